"""YCSB core workloads for dmrack (see docs/workloads.md): ``workloads.ycsb.CoreWorkload`` builds
validated workloads from presets A-F, YCSB workload files or dicts, and hands each client an
``OpStream`` of operations drawn with YCSB's generators (``workloads.generators``). Depends on
numpy and numba only, never on the rack (shm, nodes, cluster)."""
