"""ROLEX (FAST'23), the disaggregated-memory baseline of DPA-Store, will live here.

Not a system on the rack yet: nothing here is registered. Its parts so far:

* :mod:`.core`: the pure data-structure core: 1 KiB sorted leaves (64 keys + 64 values) in
  memory-node memory, a per-leaf table with synonym (overflow) pointers, the compute-side
  learned cache (PLA models with eps = 32 predicting the leaf of a key), bulk load, search,
  insert / update / delete with synonym leaves, range scan, retraining, and a per-operation
  count of the leaves READ and WRITTEN so that later code can price each operation in verbs.
"""
