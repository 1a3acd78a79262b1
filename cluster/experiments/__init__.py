"""Experiments: the benchmarks (``dmrack bench``) and the papers' reproductions (``dmrack reproduce``).

One module per bench or paper, named like its command (``dmrack reproduce sherman`` is
``sherman.py``), or like the whole command (``bench_verbs.py``, ``bench_ycsb.py``,
``reproduce_smart.py``) where the plain name is a module of another floor already (``shm/verbs.py``,
``workloads/ycsb.py``, ``shm/smart.py``: a module name is used once), beside the helpers they share: ``rows`` (the
(experiment, series, x, metric, emulated, published) record, its tables and JSON, the loop
that runs a module's parts, and ``reproduction``/``bench``, which turn a module's parts, setup,
figures and title into its declaration) and ``pointpool`` (fresh racks side by side, one per
core, and the points one run's parts share).

Why a package of their own: the rest of ``cluster`` builds, runs and watches a rack (spec,
scenario, rack, supervisor, stats, dashboard, results), ``cluster.correctness`` checks that a
system is right; experiments use both and nothing uses them. Each paper to come adds a module,
so they are kept out of the way of the machinery, and the command line does not list them: a
module declares itself (``EXPERIMENT = Experiment(kind=..., name=..., ...)``) and the registry's
table (``registry.py``: ``EXPERIMENTS``, read by :func:`~cluster.experiments.registry.find` and
:func:`~cluster.experiments.registry.available`) names it for ``dmrack bench NAME`` or ``dmrack
reproduce NAME``. Adding a reproduction is one new module here and its line in that table
(docs/experiments.md).

Importing this package imports none of its modules: the registry imports an experiment's module
only when it is asked for, so ``dmrack --help`` does not pay for numpy and the fabric.
"""
