"""``dmrack reproduce pd3``: PD3 (prefetching with DPUs for disaggregated memory), published beside emulated.

Every point is a co-located rack on the ``bf3`` profile (deterministic): ``cn0`` the host with its
DPU ``dpu0`` (4 Arm cores), the memory server ``mn0`` (1 core, PD3 §8.1) and client nodes that
send batched request packets. Scale (printed as rows): the paper's hash map has 1 billion keys and
a 1 GB local cache (1/16 of the records); here :data:`KEYS` keys and the same 1/16 cached, so the
uniform hit rate (~6 %) and what misses are the paper's.

Parts so far: ``fig4`` (Host View optimisation steps, :mod:`cluster.experiments._pd3_fig4`),
``fig8`` (Loading Zone against spinlock and CAS rings, :mod:`cluster.experiments._pd3_fig8`),
``fig10`` and ``fig11`` (hash map throughput, uniform and Zipfian 0.99, with the p50/p99 of Figs.
14 and 15), ``fig18`` (prefetching off and on against all-local), ``fig20`` (Redy and PD3 at 8 and
16 application threads, with the host cores each uses). The page server and the Garnet-like store
(Figs. 12, 13, 16, 17, 19, 21-24) are not built yet (docs/pd3.md).
"""

from __future__ import annotations

import numpy as np

from cluster.experiments.progress import prefixed
from cluster.experiments.registry import Experiment
from cluster.experiments.rows import Row, check_only, run_experiments

PROFILE = "bf3"
KEYS = {True: 50_000, False: 200_000}
CACHE_FRACTION = 1 / 16             # 1 GB of a 16 GB working set (PD3 §8.1)
APP_THREADS = 8
CLIENT_NODES = 1
CLIENT_THREADS = 32
COROUTINES = 8
WINDOW_US = {True: (100, 200), False: (200, 600)}     # warm-up, measured window (virtual us)
READ_RATIO = 0.95                   # YCSB: 95 % reads, 5 % writes (PD3 §8.1)
VALUE = b"v" * 8                    # 8-byte values (PD3 §8.1)
ZIPF = 0.99
MODES = {"sync RDMA": "sync", "Leap": "leap", "Redy": "redy", "PD3": "pd3"}


def _zipf_cdf(n: int, theta: float) -> np.ndarray:
    w = 1.0 / np.arange(1, n + 1) ** theta
    return np.cumsum(w) / w.sum()


def point(mode: str, dist: str, *, quick: bool = True, app_threads: int = APP_THREADS, keys: int | None = None,
          window_us=None, seed: int = 1, client_nodes: int = CLIENT_NODES, client_threads: int = CLIENT_THREADS,
          coroutines: int = COROUTINES, cache_fraction: float = CACHE_FRACTION) -> dict:
    """One run: Mops over the window, p50/p99 in us, host and DPU core use."""
    from cluster.rack import RackState, compile_scenario
    from cluster.scenario import scenario_from_dict
    from cluster.correctness.conformance import with_rack_tables
    from nodes.actors import actor_contexts, rack_udp, start_actors
    from nodes.runtime.env import Environment
    from nodes.systems import get_system
    from nodes.systems.pd3 import hashmap as hm
    from nodes.systems.pd3.system import preload
    from shm.coro import NodeRdma
    from shm.verbs import VerbsHost
    system = get_system("pd3")
    n = keys or KEYS[quick]
    warm, window = window_us or WINDOW_US[quick]
    d = with_rack_tables(system, {
        "rack": {"name": f"pd3-{mode}", "profile": PROFILE, "seed": seed},
        "compute": {"count": 1, "threads": client_threads, "coroutines": coroutines, "memory": "256MiB"},
        "client": {"count": client_nodes},
        "memory": {"count": 1, "memory": "256MiB", "cores": 1},
        "system": {"name": "pd3", "mode": mode, "app_threads": app_threads, "value_max": 8,
                   "cache_fraction": 1.0 if mode == "local" else cache_fraction},
        "workload": {"preset": "c", "recordcount": n}})
    compiled = compile_scenario(scenario_from_dict(d, source=f"pd3 point {mode}"))
    compiled.system = system
    rng = np.random.default_rng(seed)
    ids = rng.permutation(n).astype(np.uint64) + np.uint64(1)
    key_ids = [int(x) for x in ids]
    with RackState.create(compiled, processes=False) as state:
        env = Environment(seed=seed)
        host = VerbsHost(state.fabric, env)
        udp = rack_udp(state, host)
        contexts = actor_contexts(state, env, host, udp=udp)
        start_actors(system, contexts)
        directory = contexts[0].directory
        preload(directory, state.fabric, [hm.key64(k.to_bytes(8, "little")) for k in key_ids], VALUE, rng=rng)
        cdf = _zipf_cdf(n, ZIPF) if dist == "zipf" else None
        lat: list = []
        done = [0]
        t0, t1 = warm * 1000, (warm + window) * 1000
        procs = []
        for c in range(client_nodes):
            node = NodeRdma(host, f"cl{c}")
            node.udp = udp
            for _ in range(client_threads):
                th = node.thread()
                cli = system.client(state.fabric, state.layout, th, compiled.options)
                for _k in range(coroutines):
                    co = th.coroutine()
                    r = np.random.default_rng(rng.integers(1 << 62))
                    procs.append(env.process(_loop(env, cli, co, r, key_ids, cdf, t0, t1, lat, done)))
        env.run(until=t1 + 50_000)
        app = directory["pd3.host"]
        dpu = directory.get("pd3.dpu")
        mops = done[0] / (window * 1000) * 1000
        lat_us = np.array(lat) / 1000 if lat else np.array([0.0])
        hmstats = app.map.n
        app_busy = sum(t.busy_ns for t in app.threads)
        io_busy = sum(te.busy_ns for te in app.io)
        out = {"mode": mode, "dist": dist, "mops": mops, "p50": float(np.percentile(lat_us, 50)),
               "p99": float(np.percentile(lat_us, 99)), "ops": done[0],
               "host_cores": app_threads + len(app.io), "app_busy": app_busy / max(1, env.now),
               "io_busy": io_busy / max(1, env.now), "hits": hmstats["hits"], "zone_hits": hmstats["zone_hits"],
               "misses": hmstats["misses"], "requests": hmstats["requests"]}
        if dpu is not None:
            out["te_busy"] = dpu.te.busy_ns / max(1, env.now)
            out["hv_busy"] = [c.busy_ns / max(1, env.now) for c in dpu.shard_cores]
            out["te"] = dpu.te.statistics()._asdict()
        return out


def _loop(env, cli, co, r, key_ids, cdf, t0, t1, lat, done):
    n = len(key_ids)
    while env.now < t1:
        i = int(np.searchsorted(cdf, r.random())) if cdf is not None else int(r.integers(n))
        key = key_ids[min(i, n - 1)].to_bytes(8, "little")
        start = env.now
        if r.random() < READ_RATIO:
            yield from cli.get(co, key)
        else:
            yield from cli.update(co, key, b"w" * 8)
        if t0 <= env.now <= t1:            # completions in the window: the throughput
            done[0] += 1
            lat.append(env.now - start)
