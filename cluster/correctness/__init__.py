"""Correctness: whether a system on the rack does what a KV store must.

* ``checker``: the per-key linearizability checker of a recorded history (``Op`` records, JSON
  lines), with explanations of what went wrong; ``python3 -m cluster.correctness.checker``.
* ``conformance``: the suite every system must pass, co-located and deterministic (single-client
  semantics, large and torn values, histories checked by ``checker``), run on every registered
  system by tests/test_conformance.py.
* ``check``: ``dmrack check``: the suite, then a stress on a rack of processes whose history
  ``checker`` decides; or a recorded history checked again.
* ``shapes``: the stress shapes, mix and default profile that ``check`` and ``conformance`` share.

Why a package of their own: these modules build racks to judge a system, and running a rack
never needs them: the machinery of ``cluster`` (spec, rack, supervisor, stats) does not import
them (a run that records a history builds its records, ``nodes.history.Op``, and only the command
line's ``--check`` calls the checker), and the experiments (``cluster.experiments``) do not
either. docs/checking.md describes the checker and the suite.
"""
