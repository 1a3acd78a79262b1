"""``dmrack reproduce dpastore``: DPA-Store (ordered KV store on BlueField-3 DPA threads), published beside emulated.

Every point is a co-located rack on the ``bf3`` profile (deterministic in virtual time): ``cn0``
the host (patchers), its DPA ``dpa0`` (traversers and stitchers), and client nodes whose
coroutines send one request per datagram (the paper: 6 clients x 31 threads; GETs at queue depth
32, inserts and ranges at 18). The store is bulk-loaded (``DpaStoreSystem.bulk_load``: the same
COPY and CONNECT stitches the patchers use) with 8-byte keys and values.

**Scale.** The paper loads 25 M pairs; a point here loads :data:`KEYS` (printed with the run).
The GET rate is set by how many of a walk's lines miss the DPA's caches, and that depends on the
ratio of the tree to the caches, not on the key count alone: the DPA's shared L2 and L3 are scaled
by the same factor as the data (:func:`cache_overrides`), so the tree-to-cache ratio of a point is
the paper's. The private 1 KiB L1 per thread is not scaled (a thread's working set does not
shrink with the store).
"""

from __future__ import annotations

import numpy as np

from cluster.experiments.rows import Row

PROFILE = "bf3"
PAPER_KEYS = 25_000_000
KEYS = {True: 100_000, False: 500_000}
TRAVERSERS = 176
STITCHERS = 4
CLIENT_NODES = 6
CLIENT_THREADS = 31
QD = {"get": 32, "insert": 18, "range": 18, "update": 32}
WINDOW_US = {True: (150, 100), False: (250, 250)}    # warm-up, measured (virtual us): > 1 latency at QD 32
VALUE = 8
#: DPA-Store §4.1: server and clients on a 100 Gb/s switch (Dell S5232F), whatever the card's port
NETWORK = {"link.gbps": 100.0}


def cache_overrides(keys: int) -> dict:
    """The DPA's L2 and L3 scaled with the data (see the module docstring), in whole lines."""
    from shm.profile import load_profile
    dpa = load_profile(PROFILE).dpa
    f = keys / PAPER_KEYS
    line = dpa.line_bytes
    return {"dpa.l2_bytes": max(line, int(dpa.l2_bytes * f) // line * line),
            "dpa.l3_bytes": max(line, int(dpa.l3_bytes * f) // line * line)}


def _zipf_cdf(n: int, theta: float) -> np.ndarray:
    w = 1.0 / np.arange(1, n + 1) ** theta
    return np.cumsum(w) / w.sum()


def dataset_keys(name: str, n: int, seed: int = 1) -> np.ndarray:
    """SOSD keys (workloads.sosd: ``sparse`` exact, the real datasets' stand-ins), sorted, unique,
    never 0 or 2**64 - 1."""
    from workloads.sosd import dataset
    ks = dataset(name, n, seed=seed)
    return ks[(ks > 0) & (ks < np.uint64(2**64 - 1))]


def sparse_keys(n: int, seed: int) -> np.ndarray:
    return dataset_keys("sparse", n, seed)


def point(*, quick: bool = True, keys: int | None = None, op: str = "get", dist: str = "uniform",
          traversers: int = TRAVERSERS, stitchers: int = STITCHERS, client_nodes: int = CLIENT_NODES,
          client_threads: int = CLIENT_THREADS, qd: int | None = None, window_us=None, seed: int = 1,
          options: dict | None = None, zipf: float = 0.99, range_count: int = 10, get_ratio: float | None = None,
          key_array: np.ndarray | None = None, scale_caches: bool = True, dataset: str = "sparse",
          profile_overrides: dict | None = None) -> dict:
    """One run: Mops over the window, p50/p99 latency (us), DPA and traverser statistics.
    ``op``: get, range, update, insert, or mix (``get_ratio`` GETs, the rest ``mix_op``)."""
    from cluster.correctness.conformance import with_rack_tables
    from cluster.rack import RackState, compile_scenario
    from cluster.scenario import scenario_from_dict
    from nodes.actors import actor_contexts, rack_udp, start_actors
    from nodes.runtime.env import Environment
    from nodes.systems import get_system
    from shm.coro import NodeRdma
    from shm.verbs import VerbsHost
    system = get_system("dpa-store")
    ks = key_array if key_array is not None else dataset_keys(dataset, keys or KEYS[quick], seed)
    n = len(ks)
    warm, window = window_us or WINDOW_US[quick]
    qd = qd or QD.get(op, 32)
    inserts = op == "insert" or (op.startswith("mix") and "insert" in op)
    # keys to insert: a second sparse set, disjoint from the loaded one
    loaded = ks
    fresh = None
    if inserts:
        fresh = _fresh_keys(loaded, seed)
    dpa_mem = max(32 << 20, int(n * 1.6 * 512 // 90 * 2) + (8 << 20))
    d = with_rack_tables(system, {
        "rack": {"name": f"dpastore-{op}", "profile": PROFILE, "seed": seed},
        "profile_overrides": {**NETWORK, **(cache_overrides(n) if scale_caches else {}), **(profile_overrides or {})},
        "compute": {"count": 1, "threads": client_threads, "coroutines": qd,
                    "memory": f"{max(128, (dpa_mem >> 20) + n * 600 // (1 << 20) + 64)}MiB"},
        "client": {"count": client_nodes},
        "dpa": {"hosts": ["cn0"], "threads": traversers + stitchers, "memory": f"{dpa_mem >> 20}MiB"},
        "memory": {"count": 1, "memory": "16MiB"},
        "system": {"name": "dpa-store", "value_max": VALUE, "traversers": traversers, "stitchers": stitchers,
                   **(options or {})},
        "workload": {"preset": "c", "recordcount": n}})
    d["client"]["count"] = client_nodes          # the system's rack tables give the small defaults
    d["dpa"].update({"threads": traversers + stitchers, "memory": f"{dpa_mem >> 20}MiB"})
    d["compute"]["memory"] = f"{max(128, (dpa_mem >> 20) + n * 600 // (1 << 20) + 64)}MiB"
    compiled = compile_scenario(scenario_from_dict(d, source=f"dpastore point {op}"))
    compiled.system = system
    rng = np.random.default_rng(seed)
    with RackState.create(compiled, processes=False) as state:
        vals = [int(k).to_bytes(8, "little") for k in loaded.tolist()]
        system.bulk_load(state.fabric, state.layout, ((int(k).to_bytes(8, "big"), v)
                                                      for k, v in zip(loaded.tolist(), vals)))
        env = Environment(seed=seed)
        host = VerbsHost(state.fabric, env)
        udp = rack_udp(state, host)
        contexts = actor_contexts(state, env, host, udp=udp)
        start_actors(system, contexts)
        directory = contexts[0].directory
        cdf = _zipf_cdf(n, zipf) if dist == "zipf" else None
        perm = rng.permutation(n) if dist == "zipf" else None     # Zipf rank -> key, not key order
        lat: list = []
        done = [0]
        failed = [0]
        t0, t1 = warm * 1000, (warm + window) * 1000
        cursor = [0]
        for c in range(client_nodes):
            node = NodeRdma(host, f"cl{c}")
            node.udp = udp
            for _ in range(client_threads):
                th = node.thread()
                cli = system.client(state.fabric, state.layout, th, compiled.options)
                for _k in range(qd):
                    co = th.coroutine()
                    r = np.random.default_rng(rng.integers(1 << 62))
                    env.process(_loop(env, cli, co, r, loaded, fresh, cursor, cdf, perm, op, get_ratio,
                                      range_count, t0, t1, lat, done, failed))
        env.run(until=t1 + 20_000)
        travs, sts = directory["dpastore.dpa"]
        tree = directory["dpastore.host"]
        tstats = [t.statistics() for t in travs]
        lat_us = np.array(lat) / 1000 if lat else np.array([0.0])
        dpa = contexts[-1].dpa if contexts[-1].dpa is not None else None
        inner_nodes = sum(s.inner_nodes for s in tstats)
        out = {"op": op, "dist": dist, "keys": n, "mops": done[0] / (window * 1000) * 1000,
               "p50": float(np.percentile(lat_us, 50)), "p99": float(np.percentile(lat_us, 99)),
               "ops": done[0], "failed": failed[0],
               "inner_lines_per_node": sum(s.inner_lines for s in tstats) / max(1, inner_nodes),
               "depth": inner_nodes / max(1, sum(s.gets + s.writes for s in tstats)) + 1,
               "cache_hits": sum(s.cache_hits for s in tstats), "gets": sum(s.gets for s in tstats),
               "deferred": sum(s.deferred for s in tstats), "patches": tree.statistics()._asdict(),
               "copied": sum(s.statistics().copied_bytes for s in sts)}
        if dpa is not None:
            out["core_busy"] = float(np.mean([c.statistics().utilisation for c in dpa.cores[:max(1, traversers // 16)]]))
            out["cache"] = dpa.memory.statistics()._asdict()
        return out


def _loop(env, cli, co, r, keys, fresh, cursor, cdf, perm, op, get_ratio, range_count, t0, t1, lat, done, failed):
    n = len(keys)
    while env.now < t1:
        if cdf is not None:
            i = int(perm[min(int(np.searchsorted(cdf, r.random())), n - 1)])
        else:
            i = int(r.integers(n))
        key = int(keys[i]).to_bytes(8, "big")
        kind = op
        if op.startswith("mix"):
            kind = "get" if r.random() < get_ratio else op.split("-", 1)[1]
        start = env.now
        if kind == "get":
            ok = (yield from cli.get(co, key)) is not None
        elif kind == "range":
            ok = len((yield from cli.scan(co, key, range_count))) > 0
        elif kind == "update":
            ok = (yield from cli.update(co, key, key[::-1])) is True
        elif kind == "insert":
            j = cursor[0]
            cursor[0] += 1
            if j >= len(fresh):
                return
            k = int(fresh[j]).to_bytes(8, "big")
            ok = (yield from cli.insert(co, k, k[::-1])) is True
        else:
            raise ValueError(f"unknown operation {kind!r}")
        if not ok:
            failed[0] += 1
        if t0 <= env.now <= t1:
            done[0] += 1
            lat.append(env.now - start)


def rolex_point(*, quick: bool = True, keys: int | None = None, op: str = "get", dataset: str = "sparse",
                client_nodes: int = CLIENT_NODES, client_threads: int = CLIENT_THREADS, qd: int | None = None,
                window_us=None, seed: int = 1, get_ratio: float | None = None, range_count: int = 10,
                key_array: np.ndarray | None = None, profile_overrides: dict | None = None) -> dict:
    """ROLEX (``rolex``) under the same load: its clients on ``client_nodes`` compute nodes (the
    paper's client machines, one-sided verbs), one memory node on the same ``bf3`` card class as
    DPA-Store's server (a BlueField-3 used as a ConnectX-7), 8-byte inline values.

    ``calendar_errors``: NIC calendars whose ring aliased (must be 0: see ``shm/calendar.py``; at
    6 x 31 x 32 the memory node's READ backlog outran the old 262 us rings and the run reported
    122 Mops through one 100 Gb/s link). The backlog makes a GET's latency about a millisecond at
    that load: the default windows give the rate, not a steady-state latency."""
    from cluster.rack import RackState, compile_scenario
    from cluster.scenario import scenario_from_dict
    from nodes.runtime.env import Environment
    from nodes.systems import get_system
    from shm.coro import NodeRdma
    from shm.verbs import VerbsHost
    system = get_system("rolex")
    ks = key_array if key_array is not None else dataset_keys(dataset, keys or KEYS[quick], seed)
    n = len(ks)
    warm, window = window_us or WINDOW_US[quick]
    qd = qd or QD.get(op if not op.startswith("mix") else op.split("-", 1)[1], 32)
    fresh = _fresh_keys(ks, seed) if "insert" in op else None
    leaf_mib = max(64, n * 64 // (1 << 20) + 32)
    d = {"rack": {"name": f"rolex-{op}", "profile": PROFILE, "seed": seed},
         "profile_overrides": {**NETWORK, **(profile_overrides or {})},
         "compute": {"count": client_nodes, "threads": client_threads, "coroutines": qd, "memory": "64MiB"},
         "memory": {"count": 1, "memory": f"{leaf_mib}MiB"},
         "system": {"name": "rolex", "values": "inline"},
         "workload": {"preset": "c", "recordcount": n + (len(fresh) if fresh is not None else 0)}}
    compiled = compile_scenario(scenario_from_dict(d, source=f"rolex point {op}"))
    rng = np.random.default_rng(seed)
    with RackState.create(compiled, processes=False) as state:
        system.bulk_load(state.fabric, state.layout, ((int(k).to_bytes(8, "big"), int(k).to_bytes(8, "little"))
                                                      for k in ks.tolist()))
        env = Environment(seed=seed)
        host = VerbsHost(state.fabric, env)
        lat: list = []
        done, failed, cursor = [0], [0], [0]
        t0, t1 = warm * 1000, (warm + window) * 1000
        for c in range(client_nodes):
            node = NodeRdma(host, f"cn{c}")
            for _ in range(client_threads):
                th = node.thread()
                cli = system.client(state.fabric, state.layout, th, compiled.options)
                for _k in range(qd):
                    co = th.coroutine()
                    r = np.random.default_rng(rng.integers(1 << 62))
                    env.process(_loop(env, cli, co, r, ks, fresh, cursor, None, None, op, get_ratio, range_count,
                                      t0, t1, lat, done, failed))
        env.run(until=t1 + 20_000)
        lat_us = np.array(lat) / 1000 if lat else np.array([0.0])
        return {"op": op, "keys": n, "mops": done[0] / (window * 1000) * 1000, "p50": float(np.percentile(lat_us, 50)),
                "p99": float(np.percentile(lat_us, 99)), "ops": done[0], "failed": failed[0],
                "calendar_errors": len(state.fabric.calendar_errors())}


def _fresh_keys(loaded: np.ndarray, seed: int) -> np.ndarray:
    """Keys to insert, not in ``loaded``, drawn from the loaded keys' range (a dataset grows
    inside its own distribution): midpoints between loaded neighbours, shuffled."""
    rng = np.random.default_rng(seed + 7)
    lo, hi = loaded[:-1], loaded[1:]
    gap = hi - lo
    mid = lo[gap > 1] + gap[gap > 1] // np.uint64(2)
    rng.shuffle(mid)
    return mid


__all__ = ["point", "rolex_point", "Row"]
