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

import contextlib

import numpy as np

from cluster.experiments.pointpool import SharedPoints, map_points
from cluster.experiments.progress import prefixed
from cluster.experiments.rows import Row, input_row, reproduction

PROFILE = "bf3"
PAPER_KEYS = 25_000_000
KEYS = {True: 100_000, False: 500_000}
TABLE_KEYS = {True: 200_000, False: 1_000_000}     # layouts only (Table 1, the bulk load): no rack
TRAVERSERS = 176
STITCHERS = 4
CLIENT_NODES = 6
CLIENT_THREADS = 31
WINDOW_US = {True: (150, 100), False: (250, 250)}    # warm-up, measured (virtual us): > 1 latency at QD 32
#: write-heavy points warm up until every leaf's insert buffer has been patched a few times: the
#: first 16 writes of a leaf only fill its buffer, which would measure the buffers, not the store
WRITE_WINDOW_US = {True: (600, 1000), False: (600, 2000)}


def window_for(mix: dict, quick: bool) -> tuple:
    return WRITE_WINDOW_US[quick] if mix.get("update", 0) + mix.get("insert", 0) >= 0.5 else WINDOW_US[quick]
VALUE = 8
#: DPA-Store §4.1: server and clients on a 100 Gb/s switch (Dell S5232F), whatever the card's port
NETWORK = {"link.gbps": 100.0}
#: a client's wait before it resends: at saturation a closed loop's latency is requests in flight /
#: throughput (3,348 inserts at 1.7 Mops: 2 ms), so the clients wait well beyond that
CLIENT_TIMEOUT_US = 20_000.0


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


def point(*, quick: bool = True, keys: int | None = None, op: str = "get", dist: str = "uniform",
          traversers: int = TRAVERSERS, stitchers: int = STITCHERS, client_nodes: int = CLIENT_NODES,
          client_threads: int = CLIENT_THREADS, qd: int | None = None, window_us=None, seed: int = 1,
          options: dict | None = None, zipf: float = 0.99, range_count: int = 10,
          key_array: np.ndarray | None = None, scale_caches: bool = True, dataset: str = "sparse",
          profile_overrides: dict | None = None, profile: str = PROFILE) -> dict:
    """One run: Mops over the window, p50/p99 latency (us), DPA and traverser statistics.
    ``op``: get, range, update, insert, or a mix such as ``"get:0.95,insert:0.05"`` (:func:`parse_mix`).
    ``profile``: the card (``bf3``, DPA-Store's B3140L; ``bf3-b3220`` for Fig. 14)."""
    from cluster.rack import RackState, compile_scenario
    from cluster.scenario import scenario_from_dict, with_rack_tables
    from nodes.actors import actor_contexts, rack_udp, start_actors
    from shm.sim.env import Environment
    from nodes.systems import get_system
    from shm.coro import NodeRdma
    from shm.verbs import VerbsHost
    system = get_system("dpa-store")
    loaded, fresh, mix, (warm, window), qd = _load(quick, keys, key_array, dataset, seed, op, window_us, qd)
    n = len(loaded)
    dpa_mem = max(32 << 20, int(n * 1.6 * 512 // 90 * 2) + (8 << 20))
    d = with_rack_tables(system, {
        "rack": {"name": f"dpastore-{op}", "profile": profile, "seed": seed},
        "profile_overrides": {**NETWORK, **(cache_overrides(n) if scale_caches else {}), **(profile_overrides or {})},
        "compute": {"count": 1, "threads": client_threads, "coroutines": qd,
                    "memory": f"{max(128, (dpa_mem >> 20) + n * 600 // (1 << 20) + 64)}MiB"},
        "client": {"count": client_nodes},
        "dpa": {"hosts": ["cn0"], "threads": traversers + stitchers, "memory": f"{dpa_mem >> 20}MiB"},
        "memory": {"count": 1, "memory": "16MiB"},
        "system": {"name": "dpa-store", "value_max": VALUE, "traversers": traversers, "stitchers": stitchers,
                   "timeout_us": CLIENT_TIMEOUT_US, **(options or {})},
        "workload": {"preset": "c", "recordcount": n}})
    d["client"]["count"] = client_nodes          # the system's rack tables give the small defaults
    d["rack"]["profile"] = profile               # (and bf3, a card with a DPA: so is the B3220)
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
        clients = []
        for c in range(client_nodes):
            node = NodeRdma(host, f"cl{c}")
            node.udp = udp
            for _ in range(client_threads):
                th = node.thread()
                cli = system.client(state.fabric, state.layout, th, compiled.options)
                clients.append(cli)
                for _k in range(qd):
                    co = th.coroutine()
                    r = np.random.default_rng(rng.integers(1 << 62))
                    env.process(_loop(env, cli, co, r, loaded, fresh, cursor, cdf, perm, mix,
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
               "copied": sum(s.statistics().copied_bytes for s in sts),
               "calendar_errors": len(state.fabric.calendar_errors())}
        # the hot-thread switch and the traversers' RX rings (whole run): what single threads got
        cst = [cli.statistics() for cli in clients]
        for f in ("requests", "gets_moved", "late_replies", "switch_raised", "switch_lowered", "resends", "timeouts"):
            out[f] = sum(getattr(x, f) for x in cst)
        dctx = next(c for c in contexts if c.name == state.layout["dpa"])
        rx = [q.statistics() for q in dctx.queues if q.id.startswith(f"{dctx.name}.t")]
        per = sorted((s.received + s.dropped for s in rx), reverse=True)
        out["rx_dropped"] = sum(s.dropped for s in rx)
        out["hottest_share"] = per[0] / max(1, sum(per)) if per else 0.0
        if dpa is not None:
            out["core_busy"] = float(np.mean([c.statistics().utilisation for c in dpa.cores[:max(1, traversers // 16)]]))
            out["cache"] = dpa.memory.statistics()._asdict()
        return out


def parse_mix(op: str) -> dict:
    """``"get"`` -> {"get": 1.0}; ``"get:0.95,insert:0.05"`` -> the shares (they must sum to 1)."""
    if ":" not in op:
        mix = {op: 1.0}
    else:
        mix = {k: float(v) for k, v in (part.split(":") for part in op.split(","))}
    bad = [k for k in mix if k not in ("get", "range", "update", "insert")]
    if bad or abs(sum(mix.values()) - 1.0) > 1e-9:
        raise ValueError(f"operation mix {op!r}: kinds are get, range, update, insert and shares sum to 1")
    return mix


def default_qd(mix: dict) -> int:
    """The paper's queue depths: 32 for GETs and updates, 18 when inserts or ranges dominate."""
    return 18 if mix.get("insert", 0) + mix.get("range", 0) > 0.5 else 32


def _loop(env, cli, co, r, keys, fresh, cursor, cdf, perm, mix, range_count, t0, t1, lat, done, failed):
    n = len(keys)
    while env.now < t1:
        if cdf is not None:
            i = int(perm[min(int(np.searchsorted(cdf, r.random())), n - 1)])
        else:
            i = int(r.integers(n))
        key = int(keys[i]).to_bytes(8, "big")
        if len(mix) == 1:
            kind = next(iter(mix))
        else:
            x, kind = r.random(), None
            for kind, share in mix.items():
                x -= share
                if x < 0:
                    break
        start = env.cpu_free_at()        # (the previous operation's trailing CPU is not this one's)
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
            lat.append(env.cpu_free_at() - start)     # its work's end: the CPU after its last wait included


@contextlib.contextmanager
def _rolex_rack(name: str, ks: np.ndarray, *, nodes: int, threads: int, qd: int, memory_mib: int, records: int,
                options: dict, seed: int, profile_overrides: dict | None = None):
    """A co-located ROLEX rack as DPA-Store's Fig. 15 runs it: bf3 cards, 100 Gb/s links, ``nodes``
    compute nodes, one memory node of ``memory_mib`` running ROLEX's retrainer, 8-byte inline
    values, ``ks`` bulk-loaded (8-byte big-endian keys). Yields ``(state, env, host, udp, system,
    compiled)`` with the actors started; :func:`_rolex_clients` makes the clients."""
    from cluster.rack import RackState, compile_scenario
    from cluster.scenario import scenario_from_dict, with_rack_tables
    from nodes.actors import actor_contexts, rack_udp, start_actors
    from nodes.systems import get_system
    from shm.sim.env import Environment
    from shm.verbs import VerbsHost
    system = get_system("rolex")
    d = with_rack_tables(system, {
        "rack": {"name": name, "profile": PROFILE, "seed": seed},
        "profile_overrides": {**NETWORK, **(profile_overrides or {})},
        "compute": {"count": nodes, "threads": threads, "coroutines": qd, "memory": "64MiB"},
        "memory": {"count": 1, "memory": f"{memory_mib}MiB"},
        "system": {"name": "rolex", "values": "inline", **options},
        "workload": {"preset": "c", "recordcount": records}})
    compiled = compile_scenario(scenario_from_dict(d, source=f"rolex point {name}"))
    with RackState.create(compiled, processes=False) as state:
        system.bulk_load(state.fabric, state.layout, ((int(k).to_bytes(8, "big"), int(k).to_bytes(8, "little"))
                                                      for k in ks.tolist()))
        env = Environment(seed=seed)
        host = VerbsHost(state.fabric, env)
        udp = rack_udp(state, host)
        start_actors(system, actor_contexts(state, env, host, udp=udp))
        yield state, env, host, udp, system, compiled


def _rolex_clients(host, udp, system, state, compiled, nodes: int, threads: int):
    """``(thread, client)`` of every compute node's threads, in node order."""
    from shm.coro import NodeRdma
    for c in range(nodes):
        node = NodeRdma(host, f"cn{c}")
        node.udp = udp
        for _ in range(threads):
            th = node.thread()
            yield th, system.client(state.fabric, state.layout, th, compiled.options)


def rolex_point(*, quick: bool = True, keys: int | None = None, op: str = "get", dataset: str = "sparse",
                client_nodes: int = CLIENT_NODES, client_threads: int = CLIENT_THREADS, qd: int | None = None,
                window_us=None, seed: int = 1, range_count: int = 10,
                key_array: np.ndarray | None = None, profile_overrides: dict | None = None,
                options: dict | None = None) -> dict:
    """ROLEX (``rolex``) under the same load: its clients on ``client_nodes`` compute nodes (the
    paper's client machines, one-sided verbs), one memory node on the same ``bf3`` card class as
    DPA-Store's server (a BlueField-3 used as a ConnectX-7), 8-byte inline values; ``options``:
    more of the system's options (e.g. CHIME's ``span`` 16, ``eps`` 16; default: ROLEX's code).

    ``calendar_errors``: NIC calendars whose ring aliased (must be 0: see ``shm/calendar.py``; at
    6 x 31 x 32 the memory node's READ backlog outran the old 262 us rings and the run reported
    122 Mops through one 100 Gb/s link). The backlog makes a GET's latency about a millisecond at
    that load: the default windows give the rate, not a steady-state latency.

    The memory node runs ROLEX's retrainer (its ``rack_tables`` cores; docs/rolex.md,
    "Retraining"); a mix with inserts adds ``retrain`` (the retrainer's counters, retrain.py),
    ``chains`` (synonym leaves per primary leaf at the end: mean and longest) and the clients'
    ``stale_retries`` and ``newer_tables``. Without inserts nothing splits, so nothing retrains."""
    from nodes.systems.rolex.retrain import chain_lengths, retrain_stats
    ks, fresh, mix, (warm, window), qd = _load(quick, keys, key_array, dataset, seed, op, window_us, qd)
    n = len(ks)
    with _rolex_rack(f"rolex-{op}", ks, nodes=client_nodes, threads=client_threads, qd=qd,
                     memory_mib=max(64, n * 64 // (1 << 20) + 32), records=n + (len(fresh) if fresh is not None else 0),
                     options=options or {}, seed=seed, profile_overrides=profile_overrides) as (state, env, host, udp,
                                                                                               system, compiled):
        rng = np.random.default_rng(seed)
        lat: list = []
        done, failed, cursor = [0], [0], [0]
        t0, t1 = warm * 1000, (warm + window) * 1000
        clients = []
        for th, cli in _rolex_clients(host, udp, system, state, compiled, client_nodes, client_threads):
            clients.append(cli)
            for _k in range(qd):
                co = th.coroutine()
                r = np.random.default_rng(rng.integers(1 << 62))
                env.process(_loop(env, cli, co, r, ks, fresh, cursor, None, None, mix, range_count,
                                  t0, t1, lat, done, failed))
        env.run(until=t1 + 20_000)
        lat_us = np.array(lat) / 1000 if lat else np.array([0.0])
        out = {"op": op, "keys": n, "mops": done[0] / (window * 1000) * 1000, "p50": float(np.percentile(lat_us, 50)),
               "p99": float(np.percentile(lat_us, 99)), "ops": done[0], "failed": failed[0],
               "calendar_errors": len(state.fabric.calendar_errors())}
        if "insert" in mix:
            chains = chain_lengths(state.fabric, state.layout)
            stats = [cl.statistics() for cl in clients]
            out["retrain"] = retrain_stats(state.fabric, state.layout)._asdict()
            out["chains"] = {"mean": float(np.mean(chains)), "max": int(max(chains)),
                             "synonym_leaves": int(sum(s.synonym_leaves for s in stats))}
            out["stale_retries"] = int(sum(s.stale_retries for s in stats))
            out["newer_tables"] = int(sum(s.newer_tables for s in stats))
        return out


def _load(quick, keys, key_array, dataset, seed, op, window_us, qd):
    """What both systems' points share: (loaded keys, keys to insert or None, the mix, the
    windows, the queue depth)."""
    ks = key_array if key_array is not None else dataset_keys(dataset, keys or KEYS[quick], seed)
    mix = parse_mix(op)
    fresh = _fresh_keys(ks, seed) if "insert" in mix else None
    return ks, fresh, mix, window_us or window_for(mix, quick), qd or default_qd(mix)


def _fresh_keys(loaded: np.ndarray, seed: int) -> np.ndarray:
    """Keys to insert, not in ``loaded``, drawn from the loaded keys' range (a dataset grows
    inside its own distribution): midpoints between loaded neighbours, shuffled."""
    rng = np.random.default_rng(seed + 7)
    lo, hi = loaded[:-1], loaded[1:]
    gap = hi - lo
    mid = lo[gap > 1] + gap[gap > 1] // np.uint64(2)
    rng.shuffle(mid)
    return mid


# --- the figures ---------------------------------------------------------------------------------------

def _run_spec(system: str, quick: bool, kw: tuple) -> dict:
    fn = point if system == "dpa-store" else rolex_point
    return fn(quick=quick, **dict(kw))


def _spec(system: str = "dpa-store", **kw) -> tuple:
    return (system, tuple(sorted((k, tuple(sorted(v.items())) if isinstance(v, dict) else v) for k, v in kw.items())))


def _points(specs, progress, jobs: int, quick: bool, shared: SharedPoints | None) -> dict:
    """Each point once per run (``shared``: figures share points), keyed by its spec."""
    def args(key):
        (sys_, kw), _quick = key
        return (sys_, quick, tuple((k, dict(v) if isinstance(v, tuple) and v and isinstance(v[0], tuple) else v)
                                   for k, v in kw))
    got = (shared if shared is not None else SharedPoints()).measure(
        _run_spec, [(sp, quick) for sp in specs], args=args, jobs=jobs, progress=progress,
        describe=lambda a: a[0] + " " + " ".join(f"{k}={v}" for k, v in a[2]))
    return dict(zip(specs, got))


def _on(dataset: str, options: dict | None = None) -> dict:
    """A point's dataset and options as spec keywords, defaults left out so that figures share points."""
    return {**({"dataset": dataset} if dataset != "sparse" else {}), **({"options": options} if options else {})}


def _ratio(a, b):
    return round(a / b, 2) if a and b else None


def headline(quick: bool, progress, *, jobs: int = 1, shared: SharedPoints | None = None) -> list[Row]:
    """The abstract's numbers: GET 33, RANGE 13 (10 keys), UPDATE up to 12.1, INSERT at most 1.7 Mops
    (sparse, uniform; Fig. 9 and Fig. 13)."""
    ops = {"GET": ("get", 33.0), "RANGE (10 keys)": ("range", 13.0), "UPDATE": ("update", 12.1),
           "INSERT": ("insert", 1.7)}
    specs = {name: _spec(op=op) for name, (op, _) in ops.items()}
    res = _points(list(specs.values()), prefixed(progress, "headline: "), jobs, quick, shared)
    rows = []
    for name, (op, pub) in ops.items():
        r = res[specs[name]]
        rows.append(Row("headline", name, "sparse, uniform", "Mops", round(r["mops"], 2), pub))
        rows.append(Row("headline", name, "sparse, uniform", "p50 us", round(r["p50"], 1), None))
    return rows


#: Table 1's datasets whose stand-ins (workloads/sosd.py STANDINS) are tuned to its index overhead
TABLE1_TUNED = ("face", "osmc", "amzn", "wiki")


def table1(quick: bool, progress, *, jobs: int = 1) -> list[Row]:
    """Index overhead against the raw 16 B pairs and DPA memory, for 50 M pairs (Table 1): the
    bulk-built layout of each dataset at the emulated scale, per key, times 50 M."""
    from nodes.systems.dpastore import layout as L
    from nodes.systems.dpastore import pla
    published = {"sparse": (32, 207), "dense4x": (26, 169), "wiki": (23, 147), "amzn": (54, 346),
                 "osmc": (74, 472), "face": (104, 672), "osmc (larger eps)": (35, 228), "face (larger eps)": (52, 332)}
    n = TABLE_KEYS[quick]
    geo = L.LeafGeometry.of(VALUE)
    rows = []
    for name, (ovh, mb) in published.items():
        progress(f"table1: {name}")
        ds = name.split(" ")[0]
        leaf_eps, inner_eps = LARGER_EPS if "larger" in name else (pla.LEAF_EPS, pla.INNER_EPS)
        ks = dataset_keys(ds, n)
        idx = pla.LearnedIndex.bulk_build(ks, ks, leaf_eps=leaf_eps, inner_eps=inner_eps)
        st = idx.statistics()
        inner = st.dpa_bytes - st.leaves * pla.LEAF_META_LINES * pla.LINE_BYTES
        dpa = inner + st.leaves * geo.dpa_bytes
        host_pad = st.index_bytes - st.dpa_bytes
        scale = 50_000_000 / st.keys
        # the stand-in datasets' roughness is tuned to these overheads (workloads/sosd.py, STANDINS):
        # inputs for them, and so is their DPA memory, the same quantity in MB (Table 1's two columns
        # stand in the same ratio for every dataset); sparse and dense4x are exact generators, and
        # larger eps is not tuned
        kind = "input" if name in TABLE1_TUNED else "result"
        rows.append(Row("table1", name, "index overhead", "%", round(100 * (dpa + host_pad) / st.raw_bytes, 1), ovh,
                        kind=kind))
        rows.append(Row("table1", name, "DPA memory (50 M pairs)", "MB", round(dpa * scale / 1e6), mb, kind=kind))
        rows.append(Row("table1", name, "keys per leaf", "keys", round(st.keys / st.leaves, 1), None))
    return rows


def fig9(quick: bool, progress, *, jobs: int = 1, shared: SharedPoints | None = None) -> list[Row]:
    """Throughput against traverser threads (GET, uniform sparse), INSERT with the stitchers on a core
    of their own or among the traversers (-14 %), INSERT against patcher and stitcher threads."""
    travs = (16, 64, 176) if quick else (16, 32, 64, 128, 176)
    get = {t: _spec(op="get", traversers=t) for t in travs}
    # the same 172 traversers both ways (176 fill 11 cores and leave no thread to share)
    # (a ratio of two like runs: a shorter window than the headline's suffices)
    place = {c: _spec(op="insert", traversers=172, options={"stitcher_core": c}, window_us=(600, 500))
             for c in ("dedicated", "shared")}
    workers = (4, 8) if quick else (1, 2, 4, 8)
    ins = {w: _spec(op="insert") if w == STITCHERS else _spec(op="insert", stitchers=w, options={"patchers": w})
           for w in workers}                                      # 4 and 4: the headline's point
    res = _points(list(get.values()) + list(place.values()) + list(ins.values()), prefixed(progress, "fig9: "),
                  jobs, quick, shared)
    rows = [Row("fig9", "GET", f"{t} traversers", "Mops", round(res[sp]["mops"], 2), 33.0 if t == 176 else None)
            for t, sp in get.items()]
    rows.append(Row("fig9", "GET 176 / 16 traversers", "ratio", "x",
                    _ratio(res[get[travs[-1]]]["mops"], res[get[travs[0]]]["mops"]), 11.0))
    for c, sp in place.items():
        rows.append(Row("fig9", f"INSERT, stitchers {c}", "4 stitchers", "Mops", round(res[sp]["mops"], 2), None))
    rows.append(Row("fig9", "INSERT shared / dedicated stitcher core", "ratio", "x",
                    _ratio(res[place["shared"]]["mops"], res[place["dedicated"]]["mops"]), 0.86))
    for w, sp in ins.items():
        rows.append(Row("fig9", "INSERT", f"{w} patchers + {w} stitchers", "Mops", round(res[sp]["mops"], 2), None))
    rows.append(Row("fig9", f"INSERT {workers[-1]} / 4 patchers and stitchers", "ratio", "x",
                    _ratio(res[ins[workers[-1]]]["mops"], res[ins[4]]["mops"]), 1.0))
    return rows


def fig10(quick: bool, progress, *, jobs: int = 1, shared: SharedPoints | None = None) -> list[Row]:
    """GET against the clients' queue depth (6 clients x 31 threads): rises to 32, then latency grows."""
    qds = (1, 32, 64) if quick else (1, 4, 8, 16, 32, 48, 64)
    specs = {q: _spec(op="get", qd=q) for q in qds}
    res = _points(list(specs.values()), prefixed(progress, "fig10: "), jobs, quick, shared)
    rows = []
    for q, sp in specs.items():
        rows.append(Row("fig10", "GET", f"QD {q}", "Mops", round(res[sp]["mops"], 2), None))
        rows.append(Row("fig10", "GET p50", f"QD {q}", "us", round(res[sp]["p50"], 1), None))
    rows.append(Row("fig10", "QD 64 / QD 32 throughput", "ratio", "x",
                    _ratio(res[specs[64]]["mops"], res[specs[32]]["mops"]), None))
    rows.append(Row("fig10", "QD 64 / QD 32 p50 latency", "ratio", "x",
                    _ratio(res[specs[64]]["p50"], res[specs[32]]["p50"]), None))
    return rows


#: "a larger eps" for face and osmc (Table 1, Fig. 11): the values are missing from the text of the
#: paper this project works from (its formulas were lost); twice the defaults (leaf 16, inner 8)
#: is the smallest step that halves face's segment count
LARGER_EPS = (16, 8)


#: the hot-thread switch's rows (§3.1.3): the paper's 256-packet RX ring per traverser ("256
#: packets for each traverser ... 45,056 in-flight packets"), so that a hot thread overflows as the
#: paper says it can; a client timeout of 1 ms (ASSUMPTION: the paper gives none; 5x a GET's p50 at
#: QD 32, 182 us, so a request that waits in a full ring is not resent, one that was dropped is);
#: resends enough that no request gives up within the run; and windows of several timeouts, since
#: the switch reacts to late replies, which come a timeout after the drop
HOT_RX_DEPTH = 256
HOT_TIMEOUT_US = 1000.0
HOT_RESENDS = 20
HOT_WINDOW_US = {True: (3000, 1000), False: (5000, 2000)}
HOT_SKEWS = (0.99, 1.2)


def _hot_spec(zipf: float, switch: bool, quick: bool) -> tuple:
    opts = {"timeout_us": HOT_TIMEOUT_US, "resends": HOT_RESENDS, **({"hot_switch": True} if switch else {})}
    return _spec(op="get", dist="zipf", options=opts, window_us=HOT_WINDOW_US[quick],
                 profile_overrides={"udp.rx_depth": HOT_RX_DEPTH}, **({"zipf": zipf} if zipf != 0.99 else {}))


def fig11(quick: bool, progress, *, jobs: int = 1, shared: SharedPoints | None = None) -> list[Row]:
    """GET per dataset (uniform): deeper trees and larger eps cost lines; the hot-entry cache under
    Zipf skew (up to +30 %); the clients' switch away from hot traverser threads (§3.1.3) when
    256-packet rings overflow, at Zipf 0.99 and 1.2."""
    sets = ("sparse", "amzn", "osmc") if quick else ("sparse", "dense4x", "wiki", "amzn", "osmc", "face")
    uni = {d: _spec(op="get", **_on(d)) for d in sets}
    big = {d: _spec(op="get", **_on(d, {"leaf_eps": LARGER_EPS[0], "inner_eps": LARGER_EPS[1]}))
           for d in (("osmc",) if quick else ("osmc", "face"))}
    skew = {c: _spec(op="get", dist="zipf", options={"hot_cache": c}) for c in (True, False)}
    hot = {(z, sw): _hot_spec(z, sw, quick) for z in HOT_SKEWS for sw in (False, True)}
    res = _points(list(uni.values()) + list(big.values()) + list(skew.values()) + list(hot.values()),
                  prefixed(progress, "fig11: "), jobs, quick, shared)
    rows = []
    for d, sp in uni.items():
        r = res[sp]
        rows.append(Row("fig11", f"GET {d}", "uniform", "Mops", round(r["mops"], 2), None))
        rows.append(Row("fig11", f"GET {d}", "lines per inner node", "lines", round(r["inner_lines_per_node"], 2), None))
    for d, sp in big.items():
        rows.append(Row("fig11", f"GET {d} (larger eps)", "uniform", "Mops", round(res[sp]["mops"], 2), None))
        rows.append(Row("fig11", f"GET {d} larger eps / default", "ratio", "x",
                        _ratio(res[sp]["mops"], res[uni[d]]["mops"]), None))
    on, off = res[skew[True]], res[skew[False]]
    rows.append(Row("fig11", "GET Zipf 0.99, hot cache on / off", "ratio", "x", _ratio(on["mops"], off["mops"]), 1.3))
    rows.append(Row("fig11", "GET Zipf 0.99, hot cache hits", "share of GETs", "%",
                    round(100 * on["cache_hits"] / max(1, on["gets"]), 1), None))
    rows.append(Row("fig11", "GET Zipf 0.99 p99, hot cache on / off", "ratio", "x", _ratio(on["p99"], off["p99"]), None))
    for z in HOT_SKEWS:
        name = f"GET Zipf {z:g}, 256-packet rings"
        on, off = res[hot[z, True]], res[hot[z, False]]
        for label, r in (("switch off", off), ("switch on", on)):
            rows.append(Row("fig11", f"{name}, {label}", "throughput", "Mops", round(r["mops"], 2), None))
            rows.append(Row("fig11", f"{name}, {label}", "datagrams dropped by traverser rings", "per 100 requests",
                            round(100 * r["rx_dropped"] / max(1, r["requests"]), 1), None))
        rows.append(Row("fig11", f"{name}: switch on / off", "throughput", "x", _ratio(on["mops"], off["mops"]), None))
        rows.append(Row("fig11", f"{name}: switch on / off", "p99", "x", _ratio(on["p99"], off["p99"]), None))
        rows.append(Row("fig11", f"{name}, switch on: GETs moved", "share of GETs", "%",
                        round(100 * on["gets_moved"] / max(1, on["gets"]), 1), None))
    return rows


def fig12(quick: bool, progress, *, jobs: int = 1, shared: SharedPoints | None = None) -> list[Row]:
    """Learned index against the B+-tree on the same DPA framework (GET, uniform)."""
    sets = ("sparse", "amzn", "osmc") if quick else ("sparse", "dense4x", "wiki", "amzn", "osmc", "face")
    opts = {d: ({"leaf_eps": LARGER_EPS[0], "inner_eps": LARGER_EPS[1]} if d in ("osmc", "face") else {}) for d in sets}
    learned = {d: _spec(op="get", **_on(d, opts[d])) for d in sets}
    btree = {d: _spec(op="get", **_on(d, {"index": "btree"})) for d in sets}
    res = _points(list(learned.values()) + list(btree.values()), prefixed(progress, "fig12: "), jobs, quick, shared)
    winner = {"sparse": 1, "amzn": 1, "osmc": 0}          # the paper: learned higher on sparse and amzn, B+-tree on osmc
    rows = []
    for d in sets:
        a, b = res[learned[d]], res[btree[d]]
        rows.append(Row("fig12", f"{d}: learned", "GET", "Mops", round(a["mops"], 2), None))
        rows.append(Row("fig12", f"{d}: B+-tree", "GET", "Mops", round(b["mops"], 2), None))
        rows.append(Row("fig12", f"{d}: learned higher (1) or B+-tree (0)", "GET", "winner",
                        int(a["mops"] > b["mops"]), winner.get(d)))
        rows.append(Row("fig12", f"{d}: B+-tree / learned p50", "GET", "ratio", _ratio(b["p50"], a["p50"]), None))
    return rows


def fig13(quick: bool, progress, *, jobs: int = 1, shared: SharedPoints | None = None) -> list[Row]:
    """INSERT and UPDATE mixed with GETs (sparse, uniform): UPDATE-only up to 12.1, INSERT at most 1.7."""
    fractions = (0.0, 0.5, 0.9) if quick else (0.0, 0.25, 0.5, 0.75, 0.9, 0.95)
    sets = ("sparse",) if quick else ("sparse", "amzn", "osmc")
    specs = {}
    for d in sets:
        for w in ("update", "insert"):
            for f in fractions:
                op = w if f == 0 else f"get:{f},{w}:{round(1 - f, 6)}"
                specs[d, w, f] = _spec(op=op, **_on(d))
    res = _points(list(specs.values()), prefixed(progress, "fig13: "), jobs, quick, shared)
    rows = []
    for (d, w, f), sp in specs.items():
        pub = (12.1 if w == "update" else 1.7) if f == 0 and d == "sparse" else None
        rows.append(Row("fig13", f"{d}: {w.upper()} + GET", f"{int(f * 100)} % GET", "Mops", round(res[sp]["mops"], 2), pub))
    return rows


#: Fig. 14's second card (shm/profiles/bf3-b3220.toml): bf3 with the B3220's faster packet matching
B3220 = "bf3-b3220"
#: DPA-Store §4.2.9: GET-only on skewed keys 39.9 (B3140L) and 48.5 Mops (B3220); pings 44.9 and +69 %
FIG14_SKEWED = (39.9, 48.5)
FIG14_PING = (44.9, round(44.9 * 1.69, 1))
#: the paper's ping runs every DPA thread an application may use (189, bf3 [dpa] usable_threads)
PING_THREADS = 189


def fig14(quick: bool, progress, *, jobs: int = 1, shared: SharedPoints | None = None) -> list[Row]:
    """B3140L (bf3) against B3220 (bf3-b3220): GET-only per dataset on uniform keys (the same on both
    cards), on skewed keys with the hot-entry cache (48.5 against 39.9 Mops), the ping (+69 %),
    INSERT, UPDATE and RANGE (about the same); and the skewed pair again at half the DPA's
    per-packet cycles, the assumption the skewed direction turns on (docs/dpastore.md, Fig. 14)."""
    from cluster.experiments.devices import udp_ping
    sets = ("sparse", "amzn", "osmc")
    cards = {"B3140L": {}, "B3220": {"profile": B3220}}
    half = {"dpa.packet_cycles": 150}
    specs = {}
    for card, prof in cards.items():
        for d in sets:
            specs[card, "GET uniform", d] = _spec(op="get", **_on(d), **prof)
        specs[card, "GET Zipf 0.99", "sparse"] = _spec(op="get", dist="zipf", **prof)
        for op in ("insert", "update", "range"):
            specs[card, op.upper(), "sparse"] = _spec(op=op, **prof)
        specs[card, "GET Zipf 0.99, packet_cycles 150", "sparse"] = _spec(op="get", dist="zipf",
                                                                          profile_overrides=half, **prof)
    res = _points(list(specs.values()), prefixed(progress, "fig14: "), jobs, quick, shared)
    rows = []
    for (card, what, d), sp in specs.items():
        pub = dict(zip(cards, FIG14_SKEWED)).get(card) if what == "GET Zipf 0.99" else None
        rows.append(Row("fig14", f"{d} {what}", card, "Mops", round(res[sp]["mops"], 2), pub))
    for what, d, pub in [("GET uniform", d, 1.0) for d in sets] + [
            ("GET Zipf 0.99", "sparse", round(FIG14_SKEWED[1] / FIG14_SKEWED[0], 2)),
            ("INSERT", "sparse", 1.0), ("UPDATE", "sparse", 1.0), ("RANGE", "sparse", 1.0),
            ("GET Zipf 0.99, packet_cycles 150", "sparse", round(FIG14_SKEWED[1] / FIG14_SKEWED[0], 2))]:
        rows.append(Row("fig14", f"{d} {what}: B3220 / B3140L", "ratio", "x",
                        _ratio(res[specs["B3220", what, d]]["mops"], res[specs["B3140L", what, d]]["mops"]), pub))
    window = 40_000 if quick else 80_000
    pings = {}
    for card, pub in zip(cards, FIG14_PING):
        progress(f"fig14: ping, {card}")
        pings[card] = udp_ping(PING_THREADS, window=window, profile=cards[card].get("profile", PROFILE))["mops"]
        # the B3220's +69 % is what bf3-b3220's nic.resp_recv_ns was derived from: its ping is an input
        rows.append(Row("fig14", f"ping ({PING_THREADS} DPA threads)", card, "Mops", round(pings[card], 2), pub,
                        kind="input" if card == "B3220" else "result"))
    rows.append(input_row("fig14", "ping: B3220 / B3140L (the B3220's receive constant's source)", "ratio", "x",
                          _ratio(pings["B3220"], pings["B3140L"]), 1.69))
    return rows


#: YCSB A-F (Cooper et al.), insert-only and range-only of 10 keys, as DPA-Store's Fig. 15 runs them
FIG15 = {"A": "get:0.5,update:0.5", "B": "get:0.95,update:0.05", "C": "get", "D": "get:0.95,insert:0.05",
         "E": "range:0.95,insert:0.05", "F": "get:0.5,update:0.5", "insert": "insert", "range": "range"}
#: who wins where (1: DPA-Store higher throughput, 0: ROLEX), Fig. 15 as published; None: not stated
FIG15_WINNER = {("A", "amzn"): 1, ("A", "osmc"): 1, ("C", "sparse"): 1, ("C", "amzn"): 1, ("C", "osmc"): 0,
                ("insert", "sparse"): 0, ("insert", "amzn"): 0, ("insert", "osmc"): 0,
                ("range", "sparse"): 1, ("range", "amzn"): 1, ("range", "osmc"): 1}


def fig15(quick: bool, progress, *, jobs: int = 1, shared: SharedPoints | None = None) -> list[Row]:
    """DPA-Store against ROLEX on YCSB A-F, insert-only and range-only (uniform): who wins where."""
    sets = ("sparse", "amzn", "osmc")
    loads = ("A", "C", "D", "E", "insert", "range") if quick else tuple(FIG15)
    specs = {}
    for d in sets:
        opts = {"leaf_eps": LARGER_EPS[0], "inner_eps": LARGER_EPS[1]} if d == "osmc" else {}
        for w in loads:
            specs["dpa", d, w] = _spec(op=FIG15[w], **_on(d, opts))
            specs["rolex", d, w] = _spec("rolex", op=FIG15[w], **_on(d))
    res = _points(list(specs.values()), prefixed(progress, "fig15: "), jobs, quick, shared)
    rows = []
    for d in sets:
        for w in loads:
            a, b = res[specs["dpa", d, w]], res[specs["rolex", d, w]]
            rows.append(Row("fig15", f"{d} YCSB-{w}" if len(w) == 1 else f"{d} {w}-only", "DPA-Store", "Mops",
                            round(a["mops"], 2), None))
            rows.append(Row("fig15", f"{d} YCSB-{w}" if len(w) == 1 else f"{d} {w}-only", "ROLEX", "Mops",
                            round(b["mops"], 2), None))
            rows.append(Row("fig15", f"{d} {w}: DPA-Store higher (1) or ROLEX (0)", "throughput", "winner",
                            int(a["mops"] > b["mops"]), FIG15_WINNER.get((w, d))))
            rows.append(Row("fig15", f"{d} {w}: DPA-Store p50 lower (1)", "latency", "winner",
                            int(a["p50"] < b["p50"]), 1))
    return rows


def _spread_keys(loaded: np.ndarray, count: int, seed: int) -> np.ndarray:
    """``count`` keys not in ``loaded``: points strictly between loaded neighbours, shuffled."""
    rng = np.random.default_rng(seed + 7)
    lo, hi = loaded[:-1], loaded[1:]
    ok = (hi - lo) > count // len(lo) + 2
    lo, gap = lo[ok], (hi - lo)[ok]
    per = -(-count // len(lo))
    out = []
    for j in range(1, per + 1):
        out.append(lo + gap * np.uint64(j) // np.uint64(per + 1))
    keys = np.unique(np.concatenate(out))
    keys = keys[~np.isin(keys, loaded)]
    rng.shuffle(keys)
    return keys[:count]


def rolex_retrain(budget: int, *, keys: int = 20_000, inserts: int = 60_000, nodes: int = 2, threads: int = 8,
                  qd: int = 4, samples: int = 6, seed: int = 1) -> list[dict]:
    """ROLEX's synonym chains and insert rate over a long insert-only run with ``retrain_synonyms =
    budget`` (0: never retrain): Fig. 15's rack (bf3 cards, 100 Gb/s links, one memory node with
    ROLEX's retrainer, 8-byte inline values, sparse keys bulk-loaded with full leaves) with fewer
    clients (``nodes x threads x qd``) so that the memory node's NIC is not saturated, for as long
    as ``inserts`` fresh keys take (each between two loaded neighbours: the dataset grows inside
    its own distribution). A row per ``samples``-th of the inserts: virtual ms, the insert rate
    since the row before, the mean and longest synonym chain of the current table's primary
    leaves, the retrainer's counters (docs/rolex.md, "Retraining"). Deterministic for a seed."""
    from nodes.systems.rolex.retrain import chain_lengths, retrain_stats
    ks = dataset_keys("sparse", keys, seed)
    fresh = _spread_keys(ks, inserts, seed)
    n = len(ks) + len(fresh)
    rows = []
    with _rolex_rack("rolex-retrain", ks, nodes=nodes, threads=threads, qd=qd,
                     memory_mib=max(64, n * 160 // (1 << 20) + 64), records=n,
                     options={"retrain_synonyms": budget, "leaf_headroom": 8.0}, seed=seed) as (state, env, host, udp,
                                                                                             system, compiled):
        cursor, done = [0], [0]

        def loop(cli, co):
            while cursor[0] < len(fresh):
                k = int(fresh[cursor[0]]).to_bytes(8, "big")
                cursor[0] += 1
                if not (yield from cli.insert(co, k, k[::-1])):
                    raise RuntimeError(f"insert of a fresh key {k.hex()} failed")
                done[0] += 1

        for th, cli in _rolex_clients(host, udp, system, state, compiled, nodes, threads):
            for _q in range(qd):
                env.process(loop(cli, th.coroutine()))
        marks = [len(fresh) * (i + 1) // samples for i in range(samples)]
        last_t, last_done = 0, 0
        step = 100_000                                   # virtual ns between looks at the count
        for mark in marks:
            while done[0] < mark:
                env.run(until=env.now + step)
            chains = chain_lengths(state.fabric, state.layout)
            st = retrain_stats(state.fabric, state.layout)
            rows.append({"inserted": done[0], "ms": env.now / 1e6, "stats": st,
                         "mops": (done[0] - last_done) / max(1, env.now - last_t) * 1e3,
                         "chain_mean": float(np.mean(chains)), "chain_max": int(max(chains)),
                         "retrains": st.retrains, "epoch": st.epoch, "cpu_ms": st.cpu_ns / 1e6,
                         "busy_ms": st.busy_ns / 1e6})
            last_t, last_done = env.now, done[0]
    return rows


#: ROLEX's retraining over a long insert-only run: (keys loaded, fresh keys inserted) by mode, and
#: the budgets compared (ROLEX's synonym table holds 126; 0 never retrains)
RETRAIN_RUN = {True: (10_000, 20_000), False: (20_000, 60_000)}
RETRAIN_BUDGETS = (126, 0)


def _retrain_point(budget: int, keys: int, inserts: int) -> list[dict]:
    """One budget's long insert-only run: a point of :func:`retrain` (positional, for map_points)."""
    return rolex_retrain(budget, keys=keys, inserts=inserts, samples=4)


def retrain(quick: bool, progress, *, jobs: int = 1) -> list[Row]:
    """ROLEX retraining at run time (docs/rolex.md): synonym chains and the insert rate over a long
    insert-only run, with the default budget and never retraining. Nothing is published (ROLEX's
    paper gives no chain lengths); the direction is the point: chains stay short with retraining."""
    keys, inserts = RETRAIN_RUN[quick]
    runs = map_points(_retrain_point, [(budget, keys, inserts) for budget in RETRAIN_BUDGETS], jobs=jobs,
                      progress=prefixed(progress, "retrain: "), describe=lambda p: f"retrain_synonyms = {p[0]}")
    rows, last = [], {}
    for budget, got in zip(RETRAIN_BUDGETS, runs):
        label = f"ROLEX, retrain_synonyms = {budget}" + (" (never)" if budget == 0 else "")
        for r in got:
            x = f"{r['inserted']:,} inserted"
            rows.append(Row("retrain", label, x, "insert Mops since the row before", round(r["mops"], 3), None))
            rows.append(Row("retrain", label, x, "synonym chain, mean", round(r["chain_mean"], 2), None))
            rows.append(Row("retrain", label, x, "synonym chain, longest", r["chain_max"], None))
        end = got[-1]
        rows.append(Row("retrain", label, "end", "retrains", end["retrains"], None))
        rows.append(Row("retrain", label, "end", "memory-node CPU ms", round(end["cpu_ms"], 2), None))
        rows.append(Row("retrain", label, "end", "virtual ms for the inserts", round(end["ms"], 2), None))
        last[budget] = end
    rows.append(Row("retrain", "chain mean at the end: retraining / never", "ratio", "x",
                    _ratio(last[RETRAIN_BUDGETS[0]]["chain_mean"], last[0]["chain_mean"]), None))
    return rows


def model(quick: bool, progress, *, jobs: int = 1, shared: SharedPoints | None = None) -> list[Row]:
    """§4.2.6: the GET cost model (4.5 lines per inner node), the +19 % of prefetching, and the
    model's what-if of 100 ns DPA memory (> 62 Mops)."""
    base = _spec(op="get", options={"hot_cache": False})
    nopf = _spec(op="get", options={"hot_cache": False, "prefetch": False})
    fast = _spec(op="get", options={"hot_cache": False}, profile_overrides={"dpa.memory_ns": 100})
    res = _points([base, nopf, fast], prefixed(progress, "model: "), jobs, quick, shared)
    r = res[base]
    from shm.profile import load_profile
    prof = load_profile(PROFILE)
    inner = (r["depth"] - 1)
    lines = r["inner_lines_per_node"]
    est = inner * lines * prof.dpa.memory_ns + prof.dpa.memory_ns + 2 * prof.dma.latency_ns
    return [Row("model", "lines per inner node (GET)", "sparse", "lines", round(lines, 2), 4.5),
            Row("model", "inner nodes per GET", "sparse", "nodes", round(inner, 2), 2.0),
            Row("model", "uncached GET: inner lines + leaf line + 2 DMAs", "paper's formula", "us", round(est / 1000, 2),
                None),
            Row("model", "GET with / without prefetching", "ratio", "x", _ratio(r["mops"], res[nopf]["mops"]), 1.19),
            Row("model", "GET with 100 ns DPA memory", "what-if", "Mops", round(res[fast]["mops"], 2), 62.0),
            Row("model", "GET p50 with 100 ns DPA memory, QD 1 equivalent", "what-if", "us",
                round(res[fast]["p50"], 2), None)]


def bulkload(quick: bool, progress, *, jobs: int = 1) -> list[Row]:
    """§4.2.7: a bulk load of 50 M sparse pairs is COPY stitches at the host-to-DPA copy rate
    (the paper: 192 MB, 1,605 ms of stitching, 1,643 ms in all): the bytes the bulk load's stitches
    copy at the emulated scale (every inner node and every leaf whole, its empty insert buffer
    with it: the tree image), per key, times 50 M, at ``dpa.host_copy_mb_per_s``."""
    from nodes.systems.dpastore import layout as L
    from nodes.systems.dpastore import pla
    from shm.profile import load_profile
    n = TABLE_KEYS[quick]
    progress(f"bulkload: {n:,} sparse keys")
    ks = dataset_keys("sparse", n)
    st = pla.LearnedIndex.bulk_build(ks, ks).statistics()
    inner = st.dpa_bytes - st.leaves * pla.LEAF_META_LINES * pla.LINE_BYTES
    copied = inner + st.leaves * L.LeafGeometry.of(VALUE).dpa_bytes    # the whole tree image, leaves with buffers
    scale = 50_000_000 / st.keys
    rate = load_profile(PROFILE).dpa.host_copy_mb_per_s
    mb = copied * scale / 1e6
    return [Row("bulkload", "bytes copied to DPA memory (50 M sparse)", "COPY stitches", "MB", round(mb), 192),
            # dpa.host_copy_mb_per_s is 192 MB over these 1,605 ms (bf3.toml): an input
            input_row("bulkload", "stitching time", "4 stitchers", "ms", round(mb / rate * 1000), 1605)]


EXPERIMENTS = {"headline": headline, "table1": table1, "fig9": fig9, "fig10": fig10, "fig11": fig11, "fig12": fig12,
               "fig13": fig13, "fig14": fig14, "fig15": fig15, "retrain": retrain, "model": model, "bulkload": bulkload}
SIDE_BY_SIDE = ("headline", "table1", "fig9", "fig10", "fig11", "fig12", "fig13", "fig14", "fig15", "retrain", "model",
                "bulkload")


def setup(quick: bool) -> dict:
    n = KEYS[quick]
    warm, window = WINDOW_US[quick]
    return {"profile": PROFILE, "seed": 1,
            "spec": f"co-located racks: cn0 (4 patchers) + dpa0 ({TRAVERSERS} traversers, {STITCHERS} stitchers) + "
                    f"{CLIENT_NODES} client nodes x {CLIENT_THREADS} threads (QD 32 GET/UPDATE, 18 INSERT/RANGE); "
                    f"ROLEX: {CLIENT_NODES} compute nodes x {CLIENT_THREADS} threads, 1 memory node; 100 Gb/s links",
            "scale": f"{n:,} keys of 8 B with 8 B values (paper: 25 M), the DPA's L2/L3 scaled by the same "
                     f"{n / PAPER_KEYS:.4f}; windows {warm} us warm-up + {window} us measured (virtual)"}


EXPERIMENT = reproduction(
    "dpastore", "DPA-Store",
    title="DPA-Store (OSDI'26): headline, Table 1, Figs. 9-15, §4.2.6-4.2.7 (with ROLEX, its retraining, and a B+-tree)",
    # (Fig. 14's bf3-b3220 extends bf3 and has its assumptions; the headline runs on bf3 alone, so
    # `dmrack sensitivity` varies bf3's)
    parts=EXPERIMENTS, side_by_side=SIDE_BY_SIDE, setup=setup, profiles=(PROFILE,),
    # what `dmrack sensitivity dpastore` runs per knob: the abstract's GET, RANGE, UPDATE and INSERT rates
    headline=("headline",))

__all__ = ["point", "rolex_point", "rolex_retrain", "EXPERIMENT"]
