"""Correctness: whether a system on the rack does what a KV store must.

* ``checker``: the per-key linearizability checker of a recorded history (``Op`` records, JSON
  lines), with explanations of what went wrong; ``python3 -m cluster.correctness.checker``.
* ``conformance``: the suite every system must pass, co-located and deterministic (single-client
  semantics, large and torn values, histories checked by ``checker``), run on every registered
  system by tests/test_conformance.py.
* ``check``: ``dmrack check``: the suite, then a stress on a rack of processes whose history
  ``checker`` decides; or a recorded history checked again.

Why a package of their own: these modules build racks to judge a system, and running a rack
never needs them: the machinery of ``cluster`` (spec, rack, supervisor, stats) imports them only
where a run records or checks a history (``--history``, ``--check``), and the experiments
(``cluster.experiments``) not at all. docs/checking.md describes the checker and the suite.
"""
