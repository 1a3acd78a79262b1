"""ROLEX (FAST'23), the disaggregated-memory baseline of DPA-Store, as the built-in system ``rolex``.

Its parts (docs/rolex.md):

* :mod:`.core`: the pure data-structure core: 1 KiB sorted leaves (64 keys + 64 values), a
  per-leaf table with synonym (overflow) pointers, the learned cache (PLA models with eps = 32
  predicting the leaf of a key), bulk load, search, insert / update / delete with synonym leaves,
  range scan, retraining, and a per-operation count of the leaves READ and WRITTEN;
* :mod:`.layout`: the remote layout on the memory nodes (leaf regions, leaf table of meta words
  with checksums, group lock words, synonym counts, the model table and its epochs);
* :mod:`.cache`: the compute node's learned cache (models + fences), READ once from memory;
* :mod:`.client`: :class:`RolexClient`, get / insert / update / delete / scan over one-sided verbs;
* :mod:`.retrain`: the first memory node's retrainer (merges a model's synonym chains into new
  leaves and publishes a new model table while clients run);
* :mod:`.system`: :class:`RolexSystem` (options, footprint, setup, bulk load, client).
"""

from .client import RolexClient, RolexStats
from .system import RolexSystem

__all__ = ["RolexSystem", "RolexClient", "RolexStats"]
