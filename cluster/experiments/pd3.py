"""``dmrack reproduce pd3``: PD3 (prefetching with DPUs for disaggregated memory), published beside emulated.

Every point is a co-located rack on the ``bf3`` profile (deterministic): ``cn0`` the host
(``APP_THREADS`` application threads, a core each, an RX queue each) with its DPU ``dpu0`` (4 Arm
cores: parser, two Host View shards, Transfer Engine), the memory server ``mn0`` (1 core, PD3
§8.1) and client nodes whose coroutines send request packets. Three applications (:data:`APPS`):
the hash map (batched packets of 8 keys, the Host View's batch; the paper's 1 billion keys and
1 GB local cache are :data:`KEYS` keys with the same 1/16 cached), the page server (4 KB pages, one
per request) and the Garnet-like store (RESP2, one request per connection and per thread). The load
is closed-loop with enough requests in flight to saturate the fastest system (PD3 needs the host to
lag the NIC by more than a prefetch takes: its RX queues must not run dry).

Parts: ``fig4`` (Host View optimisation steps, :mod:`cluster.experiments._pd3_fig4`), ``fig8``
(Loading Zone against spinlock and CAS rings, :mod:`cluster.experiments._pd3_fig8`); throughput of
sync RDMA / Leap / Redy / PD3 for the hash map uniform and Zipfian 0.99 (``fig10``, ``fig11``), the
page server (``fig12``) and Garnet (``fig13``), and their p50 and p99 (``fig14``-``fig17``: the hash
map's measured as the artifact's latency client does, batches of 250 requests per connection);
``fig18`` (PD3 with prefetching off and on against all-local, each application), ``fig19`` (Garnet's
GET broken down into stages), ``fig20`` (Redy and PD3 at 8 and 16 application threads and the host
cores each uses), ``fig21`` (Garnet against local memory size, with Fig. 22's latencies) and
``fig23`` (Garnet against the Loading Zone's size, with Fig. 24's latencies), and ``latency-range``
(§8.2's ranges over Figs. 14-17 against the smallest and largest over the four figures' points,
which it shares with them). docs/pd3.md has the table of published beside emulated and the gaps.
"""

from __future__ import annotations

import numpy as np

from cluster.experiments.pointpool import SharedPoints
from cluster.experiments.progress import prefixed
from cluster.experiments.rows import Row, bound_row, direction_row, input_row, renamed, reproduction

PROFILE = "bf3"
KEYS = {True: 500_000, False: 2_000_000}
CACHE_FRACTION = 1 / 16             # 1 GB of a 16 GB working set (PD3 §8.1)
APP_THREADS = 8
MEM_CORES = 1                       # the memory server's cores (PD3 §8.1: one)
CLIENT_NODES = 1
CLIENT_THREADS = 128
COROUTINES = 16                     # 2048 requests in flight (256 packets)
WINDOW_US = {True: (100, 100), False: (200, 400)}     # warm-up, measured window (virtual us)
READ_RATIO = 0.95                   # YCSB: 95 % reads, 5 % writes (PD3 §8.1)
VALUE = b"v" * 8                    # 8-byte values (PD3 §8.1)
ZIPF = 0.99
MODES = {"sync RDMA": "sync", "Leap": "leap", "Redy": "redy", "PD3": "pd3"}
#: the applications: the hash map (PD3 §8.1: YCSB 95/5, 8 B values, 1 GB of 16 GB cached) and the page
#: server (10 M pages of 4 KB, random page reads; 1 GB of 40 GB cached). Both are the same host
#: application -- records in remote memory, a local cache, misses by the mode's path -- with their
#: record size and requests. A 4 KB page does not fit a 1500-byte datagram: the page server's rack
#: runs jumbo frames (an MTU of 9000, common in datacenter networks), so a reply carries two pages.
#: The page server's ``work_us`` is its own handling of a page request, which the paper does not
#: describe and the model does not break down: DERIVED from §8.4 -- PD3's page server does 1.4 Mops
#: at 16 threads, +54 % over 8, so 0.91 Mops at 8, each request holding an application core
#: 8 / 0.91 = 8.8 us with its miss hidden; the model's own charges on that path (decode, probe,
#: CheckAndReturn of a 4 KB item, the reply's copy) are ~1.0 us, leaving 7.8 us. So Fig. 12's PD3
#: at 8 threads is an input, not a check; the ratios to the baselines and Fig. 20's 16 threads are.
#: Its load: 256 single requests in flight (a page request is as large as the datagram allows) over
#: longer windows, since a request takes ~10 us rather than ~0.1.
APPS = {
    "hashmap": {"keys": KEYS, "value": VALUE, "reads": READ_RATIO, "cache_fraction": CACHE_FRACTION, "overrides": {},
                "memory": "256MiB", "clients": (CLIENT_THREADS, COROUTINES), "window": WINDOW_US, "work_us": 0.0},
    "pages": {"keys": {True: 40_000, False: 160_000}, "value": b"p" * 4096, "reads": 1.0,
              "cache_fraction": 1 / 40, "overrides": {"udp.mtu_bytes": 9000}, "memory": "512MiB",
              "clients": (64, 4), "window": {True: (200, 1000), False: (400, 2000)}, "work_us": 7.8},
    # the Garnet-like store: 8 B keys and values, keys uniform (PD3 §8.1: the RESP benchmark over 425 M
    # keys, 1 GB of local memory: ~1/16 of its log); the benchmark's GET/SET mix is not stated, so the
    # hash map's 95/5. One request per datagram and per connection: 256 connections from two client
    # nodes (one client node's sends bind an all-local store at ~7.7 Mops). Its ``work_us`` is Garnet's
    # network layer (RESP over TCP through its socket server), which Fig. 19's 500 ns of process +
    # respond leaves out: DERIVED from §8.4 -- PD3's Garnet does 5.3 Mops at 16 threads, +35 % over 8,
    # so 3.93 Mops at 8, each request holding an application core 8 / 3.93 = 2.04 us with its miss
    # hidden; the model charges 0.88 us of that (process + respond 500 ns, CheckAndReturn ~70 ns, the
    # reply's send and the receive ~310 ns), leaving 1.16 us. So Fig. 13's PD3 at 8 threads is an
    # input; the baselines, all-local, 16 threads and the memory and zone sweeps are checks
    "garnet": {"keys": KEYS, "value": VALUE, "reads": READ_RATIO, "cache_fraction": CACHE_FRACTION, "overrides": {},
               "memory": "256MiB", "clients": (128, 1), "client_nodes": 2,
               "window": {True: (100, 200), False: (200, 400)}, "work_us": 1.16, "system": {"app": "garnet"}},
}


def _zipf_cdf(n: int, theta: float) -> np.ndarray:
    w = 1.0 / np.arange(1, n + 1) ** theta
    return np.cumsum(w) / w.sum()


def point(mode: str, dist: str, *, quick: bool = True, app_threads: int = APP_THREADS, keys: int | None = None,
          window_us=None, seed: int = 1, client_nodes: int | None = None, client_threads: int | None = None,
          coroutines: int | None = None, cache_fraction: float | None = None, app: str = "hashmap",
          work_us: float | None = None, zone_kib: int | None = None, batch: int = 0, batches: int = 0) -> dict:
    """One run: Mops over the window, p50/p99 in us, host and DPU core use. ``app``: ``hashmap``
    (8 B values, YCSB 95/5) or ``pages`` (the page server: 4 KB pages, reads only, jumbo frames).

    ``batch`` > 0 runs the artifact's latency client instead of the closed loop of single requests
    (``src/apps/hashmap/latency_client.cpp``): ``client_threads`` connections, each one client
    thread whose packets all go to one application thread (the hash map serves a connection on a
    thread of its own), sending ``batch`` requests at once and waiting for every reply before the
    next batch; p50 and p99 are those of whole batches, after ``batches`` of them per connection
    (a batch's first request's instant to its last reply), the first one left out as warm-up."""
    if app not in APPS:
        raise ValueError(f"unknown application {app!r}; choose one of {', '.join(APPS)}")
    spec = APPS[app]
    cache_fraction = spec["cache_fraction"] if cache_fraction is None else cache_fraction
    from cluster.rack import RackState, compile_scenario
    from cluster.scenario import scenario_from_dict, with_rack_tables
    from nodes.actors import actor_contexts, rack_udp, start_actors
    from shm.sim.env import Environment
    from nodes.systems import get_system
    from nodes.systems.pd3 import hashmap as hm
    from nodes.systems.pd3.system import preload
    from shm.coro import NodeRdma
    from shm.verbs import VerbsHost
    system = get_system("pd3")
    n = keys or spec["keys"][quick]
    warm, window = window_us or spec["window"][quick]
    client_nodes = client_nodes or spec.get("client_nodes", CLIENT_NODES)
    client_threads = client_threads or spec["clients"][0]
    coroutines = coroutines or spec["clients"][1]
    value = spec["value"]
    if batch:
        if not 1 <= batch <= 256 or batches < 2:
            raise ValueError(f"a latency-client point needs 1 <= batch <= 256 (a reply port per request of a "
                             f"connection) and batches >= 2 (the first is warm-up), got batch={batch}, "
                             f"batches={batches}")
        coroutines = batch               # a request of the batch per coroutine, all sent at one instant
    d = with_rack_tables(system, {
        "rack": {"name": f"pd3-{mode}", "profile": PROFILE, "seed": seed},
        "profile_overrides": spec["overrides"],
        # (the compute table's coroutines are checked against its limit of 64; the clients' are made below)
        "compute": {"count": 1, "threads": client_threads, "coroutines": min(coroutines, 64), "memory": "256MiB"},
        "client": {"count": client_nodes},
        "memory": {"count": 1, "memory": spec["memory"], "cores": MEM_CORES},
        "system": {"name": "pd3", "mode": mode, "app_threads": app_threads, "value_max": len(value),
                   "work_us": spec["work_us"] if work_us is None else work_us,
                   "cache_fraction": 1.0 if mode == "local" else cache_fraction, **spec.get("system", {}),
                   **({"zone_kib": zone_kib} if zone_kib is not None else {})},
        "workload": {"preset": "c", "recordcount": n}})
    d["client"]["count"] = client_nodes          # the system's rack table asks for one at least
    compiled = compile_scenario(scenario_from_dict(d, source=f"pd3 point {mode}"))
    compiled.system = system
    rng = np.random.default_rng(seed)
    ids = rng.permutation(n).astype(np.uint64) + np.uint64(1)
    key_ids = ids.tolist()
    with RackState.create(compiled, processes=False) as state:
        env = Environment(seed=seed)
        host = VerbsHost(state.fabric, env)
        udp = rack_udp(state, host)
        contexts = actor_contexts(state, env, host, udp=udp)
        start_actors(system, contexts)
        directory = contexts[0].directory
        preload(directory, state.fabric, hm.key64_words(ids), value, rng=rng,
                hottest_first=dist == "zipf")            # key_ids[i] is Zipf rank i
        cdf = _zipf_cdf(n, ZIPF) if dist == "zipf" else None
        lat: list = []
        done = [0]
        failed = [0]
        t0, t1 = warm * 1000, (warm + window) * 1000
        procs = []
        spans: list = []
        finished = env.event()           # fired by the last connection to finish (its span in ``spans``)
        for c in range(client_nodes):
            node = NodeRdma(host, f"cl{c}")
            node.udp = udp
            for i in range(client_threads):
                th = node.thread()
                cli = system.client(state.fabric, state.layout, th, compiled.options)
                cos = [th.coroutine() for _k in range(coroutines)]
                if batch:
                    cli.connection = c * client_threads + i
                    r = np.random.default_rng(rng.integers(1 << 62))
                    procs.append(env.process(_batches(env, cli, cos, r, key_ids, cdf, batches, lat, done, failed,
                                                      spec["reads"], value, spans, client_nodes * client_threads,
                                                      finished)))
                    continue
                for co in cos:
                    r = np.random.default_rng(rng.integers(1 << 62))
                    procs.append(env.process(_loop(env, cli, co, r, key_ids, cdf, t0, t1, lat, done, failed,
                                                   spec["reads"], value)))
        if batch:
            env.run(until=finished)      # every connection's batches
            window = (max(e for _f, e in spans) - min(f for f, _e in spans)) / 1000
        else:
            env.run(until=t1 + 50_000)
        app = directory["pd3.host"]
        dpu = directory.get("pd3.dpu")
        mops = done[0] / (window * 1000) * 1000 if window else 0.0
        lat_us = np.array(lat) / 1000 if lat else np.array([0.0])
        st = app.statistics()
        out = {"mode": mode, "dist": dist, "mops": mops, "p50": float(np.percentile(lat_us, 50)),
               "p99": float(np.percentile(lat_us, 99)), "ops": done[0], "failed": failed[0],
               "host_cores": st.host_cores, "app_busy": st.app_busy_ns / max(1, env.now),
               "io_busy": st.io_busy_ns / max(1, env.now), "hits": st.hits, "zone_hits": st.zone_hits,
               "misses": st.misses, "requests": st.requests, "resent": st.resent,
               "threads_used": sum(1 for t in app.threads if t.busy_ns)}    # application threads that served any
        if st.stages is not None:
            out["stages"] = st.stages._asdict()
        if dpu is not None:
            out["te_busy"] = dpu.te.busy_ns / max(1, env.now)
            out["hv_busy"] = [c.busy_ns / max(1, env.now) for c in dpu.shard_cores]
            out["te"] = dpu.te.statistics()._asdict()
        return out


def _request(cli, co, r, key_ids, cdf, reads, value):
    """One YCSB request of the hash map's mix: True if it did what it asked."""
    n = len(key_ids)
    i = int(np.searchsorted(cdf, r.random())) if cdf is not None else int(r.integers(n))
    key = key_ids[min(i, n - 1)].to_bytes(8, "little")
    if reads >= 1.0 or r.random() < reads:
        return (yield from cli.get(co, key)) is not None      # every key is loaded: never missing
    return (yield from cli.update(co, key, b"w" * len(value))) is True


def _loop(env, cli, co, r, key_ids, cdf, t0, t1, lat, done, failed, reads, value):
    while env.now < t1:
        start = env.cpu_free_at()        # (the previous operation's trailing CPU is not this one's)
        if not (yield from _request(cli, co, r, key_ids, cdf, reads, value)):
            failed[0] += 1
        if t0 <= env.now <= t1:            # completions in the window: the throughput
            done[0] += 1
            lat.append(env.cpu_free_at() - start)     # its work's end: the CPU after its last wait included


def _batches(env, cli, cos, r, key_ids, cdf, batches, lat, done, failed, reads, value, spans, connections,
             finished):
    """The artifact's latency client on one connection: ``len(cos)`` requests sent at one instant,
    the next batch once every reply is in. The first batch is warm-up (not in ``lat`` or ``done``);
    ``spans`` gets the connection's measured span (end of the first batch, end of the last), and
    ``finished`` fires once all ``connections`` have put theirs there."""
    first = env.now
    for b in range(batches):
        start = env.now
        left = [len(cos)]
        all_in = env.event()
        for co in cos:
            env.process(_one(cli, co, r, key_ids, cdf, reads, value, failed, left, all_in))
        yield all_in
        if b:
            done[0] += len(cos)
            lat.append(env.now - start)
        else:
            first = env.now
    spans.append((first, env.now))
    if len(spans) == connections:
        finished.succeed()


def _one(cli, co, r, key_ids, cdf, reads, value, failed, left, all_in):
    """One request of a batch; the batch's last reply fires ``all_in``."""
    if not (yield from _request(cli, co, r, key_ids, cdf, reads, value)):
        failed[0] += 1
    left[0] -= 1
    if not left[0]:
        all_in.succeed()


# --- the figures -------------------------------------------------------------------------------------------

def _run_point(mode: str, dist: str, quick: bool, app_threads: int, app: str = "hashmap", extra=()) -> dict:
    return point(mode, dist, quick=quick, app_threads=app_threads, app=app, **dict(extra))


def _points(specs, progress, jobs: int, quick: bool, shared: SharedPoints | None) -> dict:
    """Each point once per run (``shared``): figures share their points. A spec is (mode, dist, app
    threads) for the hash map, or (mode, dist, app threads, app[, extra]) with ``extra`` a tuple of
    point() keyword pairs (cache_fraction, zone_kib); results are keyed by the spec as given."""
    full = [s + ("hashmap",) * (len(s) == 3) + ((),) * (len(s) <= 4) for s in specs]
    got = (shared if shared is not None else SharedPoints()).measure(
        _run_point, [(f, quick) for f in full], args=lambda k: (k[0][0], k[0][1], quick, *k[0][2:]), jobs=jobs,
        progress=progress, describe=lambda p: " ".join([p[4], p[0], p[1], f"{p[3]} threads"] +
                                                       [f"{k}={v:g}" for k, v in p[5]]))
    return dict(zip(specs, got))


def _ratio(a, b):
    return round(a / b, 2) if a and b else None


def fig4(quick: bool, progress) -> list[Row]:
    from cluster.experiments._pd3_fig4 import fig4 as run4
    return run4(quick, progress)


def fig8(quick: bool, progress) -> list[Row]:
    from cluster.experiments._pd3_fig8 import fig8 as run8
    return renamed(run8(quick, progress), "fig8")


def _throughput(exp: str, dist: str, quick: bool, progress, jobs: int, shared: SharedPoints | None,
                published: dict, ratios: list, app: str = "hashmap", inputs: tuple = ()) -> list[Row]:
    """``inputs``: the modes whose published rate a constant was derived from (APPS' ``work_us``):
    their rows are inputs, not checks (rows.KINDS)."""
    specs = [(m, dist, APP_THREADS, app) for m in MODES.values()]
    res = _points(specs, prefixed(progress, f"{exp}: "), jobs, quick, shared)
    key = (lambda m: (m, dist, APP_THREADS, app))
    mops = {name: res[key(m)]["mops"] for name, m in MODES.items()}
    rows = [Row(exp, name, f"{APP_THREADS} threads", "Mops", round(v, 2), published.get(name),
                kind="input" if name in inputs else "result") for name, v in mops.items()]
    for a, b, pub in ratios:
        rows.append(Row(exp, f"{a} / {b}", f"{APP_THREADS} threads", "ratio", _ratio(mops[a], mops[b]), pub))
    r = res[key("pd3")]
    rows.append(Row(exp, "PD3: requests served from the Loading Zone", "share", "%",
                    round(100 * r["zone_hits"] / max(1, r["requests"]), 1), None))
    return rows


def fig10(quick: bool, progress, *, jobs: int = 1, shared: SharedPoints | None = None) -> list[Row]:
    """Hash map, YCSB 95/5, uniform (PD3 §8.2, Fig. 10)."""
    return _throughput("fig10", "uniform", quick, progress, jobs, shared, {"sync RDMA": 2.0},
                       [("PD3", "sync RDMA", 26.0), ("PD3", "Redy", 2.2), ("Redy", "sync RDMA", 9.5),
                        ("Leap", "sync RDMA", 1.0)])


def fig11(quick: bool, progress, *, jobs: int = 1, shared: SharedPoints | None = None) -> list[Row]:
    """Hash map, YCSB 95/5, Zipfian 0.99 (Fig. 11)."""
    return _throughput("fig11", "zipf", quick, progress, jobs, shared, {"sync RDMA": 9.0},
                       [("Leap", "sync RDMA", 1.15), ("PD3", "sync RDMA", None), ("PD3", "Redy", None)])


def _latency_points(dist: str, quick: bool, progress, jobs: int, shared: SharedPoints | None, app: str) -> dict:
    """The page server's or Garnet's points of Figs. 12 and 13, by mode name: p50 and p99 at the
    throughput points (§8.2: "when achieving the throughput in Figures 10-13")."""
    specs = [(m, dist, APP_THREADS, app) for m in MODES.values()]
    res = _points(specs, progress, jobs, quick, shared)
    return {name: res[m, dist, APP_THREADS, app] for name, m in MODES.items()}


#: §8.2 on Figs. 14-17: PD3 "consistently achieves lower latency than other approaches across all the
#: applications, ranging from 1.5x to 11x reductions for median latency and from 1.8x to 10x
#: reductions for tail latency"; Redy's latency "up to 3.5x lower than that of synchronous RDMA" in the
#: hash map and "up to 2.2x higher" in the page server and Garnet. Each range is over the four
#: figures, so a figure's own ratio is a direction row (:func:`direction_row`: PD3 the lowest) and
#: ``latency-range`` puts the smallest and largest over all of them beside the range's ends.
P50_RANGE, P99_RANGE = (1.5, 11.0), (1.8, 10.0)
REDY_BELOW_SYNC, REDY_ABOVE_SYNC = 3.5, 2.2


def _spread(points: list[dict]) -> dict:
    """The ratios §8.2 states for one figure's points (one dict of mode name -> point per x: a
    number of connections, or the figure's one throughput point): PD3's against the best and the
    worst other mode at p50 and p99 (smallest and largest over the points), and Redy's against sync
    RDMA (largest both ways)."""
    others = [n for n in MODES if n != "PD3"]

    def each(f):
        return [f(p) for p in points]
    return {"best50": min(each(lambda p: _ratio(min(p[n]["p50"] for n in others), p["PD3"]["p50"]) or 0.0)),
            "worst50": max(each(lambda p: _ratio(max(p[n]["p50"] for n in others), p["PD3"]["p50"]) or 0.0)),
            "best99": min(each(lambda p: _ratio(min(p[n]["p99"] for n in others), p["PD3"]["p99"]) or 0.0)),
            "worst99": max(each(lambda p: _ratio(max(p[n]["p99"] for n in others), p["PD3"]["p99"]) or 0.0)),
            "sync/redy": max(each(lambda p: _ratio(p["sync RDMA"]["p50"], p["Redy"]["p50"]) or 0.0)),
            "redy/sync": max(each(lambda p: _ratio(p["Redy"]["p50"], p["sync RDMA"]["p50"]) or 0.0)),
            "redy/pd3": max(each(lambda p: _ratio(p["Redy"]["p50"], p["PD3"]["p50"]) or 0.0))}


def _latency(exp: str, dist: str, quick: bool, progress, jobs: int, shared: SharedPoints | None,
             app: str) -> list[Row]:
    """The page server's and Garnet's p50 and p99 at the throughput points of Figs. 12 and 13."""
    p = _latency_points(dist, quick, prefixed(progress, f"{exp}: "), jobs, shared, app)
    rows = []
    for name in MODES:
        rows += [Row(exp, name, "p50", "us", round(p[name]["p50"], 1), None),
                 Row(exp, name, "p99", "us", round(p[name]["p99"], 1), None)]
    r = _spread([p])
    # Redy's batching backfires on large requests and one request per thread: above sync RDMA
    return rows + [direction_row(exp, "best other p50 / PD3 p50", "p50", "ratio", r["best50"], P50_RANGE[0]),
                   Row(exp, "worst other p50 / PD3 p50", "p50", "ratio", r["worst50"], None),
                   direction_row(exp, "best other p99 / PD3 p99", "p99", "ratio", r["best99"], P99_RANGE[0]),
                   direction_row(exp, "Redy p50 / sync RDMA p50", "p50", "ratio", r["redy/sync"], REDY_ABOVE_SYNC)]


def fig12(quick: bool, progress, *, jobs: int = 1, shared: SharedPoints | None = None) -> list[Row]:
    """The page server: random reads of 4 KB pages (PD3 §8.2, Fig. 12): PD3 +65 % over sync RDMA and
    +33 % over Redy. PD3's absolute number is the input of the page handling cost (APPS)."""
    return _throughput("fig12", "uniform", quick, progress, jobs, shared, {"PD3": round(1.4 / 1.54, 2)},
                       [("PD3", "sync RDMA", 1.65), ("PD3", "Redy", 1.33), ("Leap", "sync RDMA", 1.0)],
                       app="pages", inputs=("PD3",))


def fig16(quick: bool, progress, *, jobs: int = 1, shared: SharedPoints | None = None) -> list[Row]:
    """Latency of the page server (Fig. 16): Redy up to 2.2x above sync RDMA, PD3 lowest."""
    return _latency("fig16", "uniform", quick, progress, jobs, shared, app="pages")


def fig13(quick: bool, progress, *, jobs: int = 1, shared: SharedPoints | None = None) -> list[Row]:
    """The Garnet-like store, RESP, one request per thread (Fig. 13): sync RDMA and Leap 1.4x Redy;
    PD3 6x sync RDMA / Leap and 8.5x Redy."""
    return _throughput("fig13", "uniform", quick, progress, jobs, shared, {"PD3": round(5.3 / 1.35, 2)},
                       [("sync RDMA", "Redy", 1.4), ("Leap", "Redy", 1.4), ("PD3", "sync RDMA", 6.0),
                        ("PD3", "Redy", 8.5)], app="garnet", inputs=("PD3",))


def fig17(quick: bool, progress, *, jobs: int = 1, shared: SharedPoints | None = None) -> list[Row]:
    """Latency of the Garnet-like store (Fig. 17): Redy up to 2.2x above sync RDMA, PD3 lowest."""
    return _latency("fig17", "uniform", quick, progress, jobs, shared, app="garnet")


def fig19(quick: bool, progress, *, jobs: int = 1, shared: SharedPoints | None = None) -> list[Row]:
    """Garnet's GET broken down (Fig. 19): a hit's process + respond (500 ns: the model's input, so
    not a check), PD3's consume (38 ns), request + transfer of sync RDMA / Leap (5.3 us) and Redy
    (6.1 us), as measured on the application threads of the Fig. 13 runs."""
    names = {"sync RDMA": "sync", "Leap": "leap", "Redy": "redy", "PD3": "pd3"}
    res = _points([(m, "uniform", APP_THREADS, "garnet") for m in names.values()], prefixed(progress, "fig19: "),
                  jobs, quick, shared)
    st = {n: res[m, "uniform", APP_THREADS, "garnet"]["stages"] for n, m in names.items()}
    rows = [input_row("fig19", "hit: process + respond (input)", "PD3", "ns", round(st["PD3"]["hit_ns"]), 500),
            Row("fig19", "PD3: consume", "PD3", "ns", round(st["PD3"]["consume_ns"]), 38)]
    for n, pub in (("sync RDMA", 5.3), ("Leap", 5.3), ("Redy", 6.1)):
        rows.append(Row("fig19", "request + transfer", n, "us", round(st[n]["fetch_ns"] / 1000, 2), pub))
    rows.append(Row("fig19", "request + transfer, Redy / sync RDMA", "ratio", "ratio",
                    _ratio(st["Redy"]["fetch_ns"], st["sync RDMA"]["fetch_ns"]), round(6.1 / 5.3, 2)))
    rows.append(Row("fig19", "PD3: GETs served from the Loading Zone", "share", "%",
                    round(100 * st["PD3"]["consumed"] / max(1, st["PD3"]["consumed"] + st["PD3"]["misses"]
                                                            + st["PD3"]["hits"]), 1), None))
    return rows


#: Figs. 21/22: local memory from 64 MB to 16 GB of a ~17 GB Garnet log (425 M records), as fractions
MEMORY_FRACTIONS = {True: (1 / 256, 1 / 64, 1 / 16, 1 / 4, 1.0), False: (1 / 256, 1 / 128, 1 / 64, 1 / 16, 1 / 4, 1.0)}
#: Figs. 23/24: the Loading Zone from 1 MB to 256 MB (the paper's, shared); here per application
#: thread, with the paper's 64 MB knee scaled by keys and threads it is ~4 KiB: the sweep spans it
ZONE_KIB = {True: (1, 2, 4, 16, 1024), False: (1, 2, 4, 8, 16, 64, 256, 1024)}


def fig21(quick: bool, progress, *, jobs: int = 1, shared: SharedPoints | None = None) -> list[Row]:
    """Garnet against local memory size (Figs. 21, 22): PD3 reaches all-local throughput from 128 MB
    (< 1 % of the log); sync RDMA only when everything is cached; PD3 stays above it at 64 MB."""
    fr = MEMORY_FRACTIONS[quick]
    specs = [(m, "uniform", APP_THREADS, "garnet", (("cache_fraction", f),)) for m in ("pd3", "sync") for f in fr]
    res = _points(specs + [("local", "uniform", APP_THREADS, "garnet")], prefixed(progress, "fig21: "), jobs, quick,
                  shared)
    local = res["local", "uniform", APP_THREADS, "garnet"]["mops"]
    rows = []
    for s in specs:
        r, f = res[s], s[4][0][1]
        x = f"{f * 17:.3g} GB of 17"
        rows.append(Row("fig21", {"pd3": "PD3", "sync": "sync RDMA"}[s[0]], x, "Mops", round(r["mops"], 2), None))
        rows.append(Row("fig22", {"pd3": "PD3", "sync": "sync RDMA"}[s[0]], x, "p50 us", round(r["p50"], 1), None))
    pd3 = {s[4][0][1]: res[s]["mops"] for s in specs if s[0] == "pd3"}
    sync = {s[4][0][1]: res[s]["mops"] for s in specs if s[0] == "sync"}
    second = fr[1]
    rows += [Row("fig21", "all local", "17 GB of 17", "Mops", round(local, 2), None),
             Row("fig21", "PD3 / all local", f"{second * 17:.3g} GB of 17", "ratio", _ratio(pd3[second], local), 1.0),
             Row("fig21", "PD3 / sync RDMA", f"{fr[0] * 17:.3g} GB of 17", "ratio", _ratio(pd3[fr[0]], sync[fr[0]]),
                 None),
             Row("fig21", "sync RDMA / all local", f"{fr[-2] * 17:.3g} GB of 17", "ratio",
                 _ratio(sync[fr[-2]], local), None)]
    return rows


def fig23(quick: bool, progress, *, jobs: int = 1, shared: SharedPoints | None = None) -> list[Row]:
    """Garnet against the Loading Zone's size (Figs. 23, 24): throughput falls and latency rises once
    the zone is too small to hold the items prefetched and not yet consumed (drops counted)."""
    sizes = ZONE_KIB[quick]
    specs = [("pd3", "uniform", APP_THREADS, "garnet", (("zone_kib", z),)) for z in sizes]
    res = _points(specs, prefixed(progress, "fig23: "), jobs, quick, shared)
    rows = []
    for s in specs:
        r, z = res[s], s[4][0][1]
        x = f"{z} KiB x {APP_THREADS}"
        rows += [Row("fig23", "PD3", x, "Mops", round(r["mops"], 2), None),
                 Row("fig24", "PD3", x, "p50 us", round(r["p50"], 1), None),
                 Row("fig23", "prefetched items dropped (zone full)", x, "items", r["te"]["dropped"], None)]
    big, small = res[specs[-1]]["mops"], res[specs[0]]["mops"]
    rows.append(Row("fig23", "smallest / largest zone", f"{sizes[0]} / {sizes[-1]} KiB", "ratio", _ratio(small, big),
                    None))
    return rows


#: Figs. 14/15 (and the appendix's B.4/B.5, by connections): the artifact's latency client
#: (``src/apps/hashmap/latency_client.cpp``: ``request_batch_size_ = 250``, a batch sent at once and
#: every reply awaited; ``exp/fig15/gen_fig.py``: 1, 2, 4 and 8 client threads, a connection each)
LATENCY_BATCH = 250
CONNECTIONS = {True: (1, 8), False: (1, 2, 4, 8)}
BATCHES = {True: 6, False: 21}           # per connection, the first one warm-up


def _latency_client_points(dist: str, quick: bool, progress, jobs: int, shared: SharedPoints | None) -> list[dict]:
    """The latency client's points, one dict of mode name -> point per number of connections (in
    :data:`CONNECTIONS` order)."""
    conns = CONNECTIONS[quick]
    extra = (lambda c: (("client_threads", c), ("batch", LATENCY_BATCH), ("batches", BATCHES[quick])))
    specs = {(m, c): (m, dist, APP_THREADS, "hashmap", extra(c)) for m in MODES.values() for c in conns}
    res = _points(list(specs.values()), progress, jobs, quick, shared)
    return [{name: res[specs[m, c]] for name, m in MODES.items()} for c in conns]


def _latency_client(exp: str, dist: str, quick: bool, progress, jobs: int, shared: SharedPoints | None) -> list[Row]:
    """The hash map's p50 and p99 as the artifact measures them: whole batches of the latency client
    (:data:`LATENCY_BATCH` requests per connection at once), by connections; PD3 the lowest at every
    number of connections (direction rows: the ranges are ``latency-range``'s) and PD3 "up to 5x"
    below Redy (appendix B) as the largest over connections."""
    conns = CONNECTIONS[quick]
    points = _latency_client_points(dist, quick, prefixed(progress, f"{exp}: "), jobs, shared)
    rows = []
    for name in MODES:
        for c, p in zip(conns, points):
            rows += [Row(exp, name, f"{c} connections", "p50 us", round(p[name]["p50"], 1), None),
                     Row(exp, name, f"{c} connections", "p99 us", round(p[name]["p99"], 1), None)]
    span = f"{conns[0]}-{conns[-1]} connections"
    r = _spread(points)
    return rows + [direction_row(exp, "best other p50 / PD3 p50, smallest", span, "ratio", r["best50"], P50_RANGE[0]),
                   Row(exp, "worst other p50 / PD3 p50, largest", span, "ratio", r["worst50"], None),
                   direction_row(exp, "best other p99 / PD3 p99, smallest", span, "ratio", r["best99"], P99_RANGE[0]),
                   direction_row(exp, "sync RDMA p50 / Redy p50, largest", span, "ratio", r["sync/redy"],
                                 REDY_BELOW_SYNC),
                   Row(exp, "Redy p50 / PD3 p50, largest", span, "ratio", r["redy/pd3"],
                       5.0 if dist == "uniform" else None)]


def latency_range(quick: bool, progress, *, jobs: int = 1, shared: SharedPoints | None = None) -> list[Row]:
    """§8.2's ranges over Figs. 14-17 (:data:`P50_RANGE`): the smallest and largest of PD3's latency
    cuts over every application and point, and Redy's against sync RDMA over the hash map's figures
    and over the page server's and Garnet's. Its points are the four figures' (shared in a run)."""
    figs = {"fig14": _latency_client_points("uniform", quick, prefixed(progress, "fig14: "), jobs, shared),
            "fig15": _latency_client_points("zipf", quick, prefixed(progress, "fig15: "), jobs, shared),
            "fig16": [_latency_points("uniform", quick, prefixed(progress, "fig16: "), jobs, shared, "pages")],
            "fig17": [_latency_points("uniform", quick, prefixed(progress, "fig17: "), jobs, shared, "garnet")]}
    s = {f: _spread(pts) for f, pts in figs.items()}
    exp, x = "latency-range", "Figs. 14-17"

    def low(k):
        return min(v[k] for v in s.values())

    def high(k, fs=tuple(figs)):
        return max(s[f][k] for f in fs)
    return [Row(exp, "best other p50 / PD3 p50, smallest", x, "ratio", low("best50"), P50_RANGE[0]),
            Row(exp, "worst other p50 / PD3 p50, largest", x, "ratio", high("worst50"), P50_RANGE[1]),
            Row(exp, "best other p99 / PD3 p99, smallest", x, "ratio", low("best99"), P99_RANGE[0]),
            Row(exp, "worst other p99 / PD3 p99, largest", x, "ratio", high("worst99"), P99_RANGE[1]),
            Row(exp, "sync RDMA p50 / Redy p50, largest", "Figs. 14-15 (hash map)", "ratio",
                high("sync/redy", ("fig14", "fig15")), REDY_BELOW_SYNC),
            Row(exp, "Redy p50 / sync RDMA p50, largest", "Figs. 16-17 (page server, Garnet)", "ratio",
                high("redy/sync", ("fig16", "fig17")), REDY_ABOVE_SYNC)]


def fig14(quick: bool, progress, *, jobs: int = 1, shared: SharedPoints | None = None) -> list[Row]:
    """Latency of the hash map, uniform (Fig. 14): PD3 1.5-11x lower p50, Redy up to 3.5x below sync."""
    return _latency_client("fig14", "uniform", quick, progress, jobs, shared)


def fig15(quick: bool, progress, *, jobs: int = 1, shared: SharedPoints | None = None) -> list[Row]:
    """Latency of the hash map, Zipfian (Fig. 15)."""
    return _latency_client("fig15", "zipf", quick, progress, jobs, shared)


#: §8.4 on Fig. 18: "when prefetching is disabled, PD3 does not outperform existing approaches.
#: Applications are up to 12.7x lower than with the full PD3 ... their performance differences [PD3
#: against all-local] are under 10 %": two bounds per application and a largest over the three
FIG18_NO_BETTER, FIG18_UP_TO, FIG18_LOCAL = 1.0, 12.7, 0.9


def fig18(quick: bool, progress, *, jobs: int = 1, shared: SharedPoints | None = None) -> list[Row]:
    """Prefetching off and on against all-local (Fig. 18): the hash map (uniform), the page server,
    Garnet; PD3 without prefetching against the best baseline at the same point (Figs. 10, 12, 13's)."""
    apps = (("hashmap", "hash map"), ("pages", "page server"), ("garnet", "Garnet"))
    modes = ("pd3-noprefetch", "pd3", "local", "sync", "leap", "redy")
    res = _points([(m, "uniform", APP_THREADS, a) for a, _ in apps for m in modes], prefixed(progress, "fig18: "),
                  jobs, quick, shared)
    rows, gains = [], []
    for app, x in apps:
        mops = {m: res[m, "uniform", APP_THREADS, app]["mops"] for m in modes}
        best = max(("sync", "leap", "redy"), key=mops.get)
        gains.append(_ratio(mops["pd3"], mops["pd3-noprefetch"]) or 0.0)
        rows += [Row("fig18", "PD3 w/o prefetching", x, "Mops", round(mops["pd3-noprefetch"], 2), None),
                 Row("fig18", "PD3", x, "Mops", round(mops["pd3"], 2), None),
                 Row("fig18", "all local", x, "Mops", round(mops["local"], 2), None),
                 Row("fig18", "PD3 / PD3 w/o prefetching", x, "ratio", gains[-1], None),
                 bound_row("fig18", "PD3 / all local", x, "ratio", _ratio(mops["pd3"], mops["local"]), FIG18_LOCAL,
                           "at least"),
                 bound_row("fig18", "PD3 w/o prefetching / best baseline", x, "ratio",
                           _ratio(mops["pd3-noprefetch"], mops[best]), FIG18_NO_BETTER, "at most")]
    return rows + [Row("fig18", "PD3 / PD3 w/o prefetching, largest", "3 applications", "ratio", max(gains),
                       FIG18_UP_TO)]


def fig20(quick: bool, progress, *, jobs: int = 1, shared: SharedPoints | None = None) -> list[Row]:
    """Host cores saved (Fig. 20): Redy and PD3 with 8 and 16 application threads."""
    specs = [(m, "uniform", t) for m in ("redy", "pd3") for t in (APP_THREADS, 2 * APP_THREADS)]
    apps = [(m, "uniform", t, a) for a in ("pages", "garnet") for m in ("redy", "pd3")
            for t in (APP_THREADS, 2 * APP_THREADS)]
    res = _points(specs + apps, prefixed(progress, "fig20: "), jobs, quick, shared)
    rows = []
    for m, name in (("redy", "Redy"), ("pd3", "PD3")):
        for t in (APP_THREADS, 2 * APP_THREADS):
            r = res[m, "uniform", t]
            rows.append(Row("fig20", name, f"{t} threads", "Mops", round(r["mops"], 2),
                            73.0 if (m == "pd3" and t == 16) else None))
            # Redy: an I/O thread per application thread (16 cores at 8 threads); at 16 threads the
            # host's 24 cores run out, so the published doubling has no number there
            rows.append(Row("fig20", f"{name}: host cores", f"{t} threads", "cores", r["host_cores"],
                            (2 * t if t == APP_THREADS else None) if m == "redy" else t))
    for m, name, pub in (("pd3", "PD3", 1.3), ("redy", "Redy", 1.0)):
        rows.append(Row("fig20", f"{name}: 16 / 8 threads", "gain", "ratio",
                        _ratio(res[m, "uniform", 2 * APP_THREADS]["mops"], res[m, "uniform", APP_THREADS]["mops"]), pub))
    # the page server (§8.4: PD3 1.4 Mops at 16 threads, +54 %; Redy saturated at 8)
    # ... and Garnet (PD3 5.3 Mops at 16 threads, +35 %)
    for a, label, top, gain in (("pages", "page server", 1.4, 1.54), ("garnet", "Garnet", 5.3, 1.35)):
        for m, name in (("pd3", "PD3"), ("redy", "Redy")):
            hi, lo = res[m, "uniform", 2 * APP_THREADS, a], res[m, "uniform", APP_THREADS, a]
            rows.append(Row("fig20", f"{name} {label}", f"{2 * APP_THREADS} threads", "Mops", round(hi["mops"], 2),
                            top if m == "pd3" else None))
            rows.append(Row("fig20", f"{name} {label}: 16 / 8 threads", "gain", "ratio",
                            _ratio(hi["mops"], lo["mops"]), gain if m == "pd3" else 1.0))
    return rows


EXPERIMENTS = {"fig4": fig4, "fig8": fig8, "fig10": fig10, "fig11": fig11, "fig12": fig12, "fig13": fig13,
               "fig14": fig14, "fig15": fig15, "fig16": fig16, "fig17": fig17, "fig18": fig18, "fig19": fig19,
               "fig20": fig20, "fig21": fig21, "fig23": fig23, "latency-range": latency_range}
SIDE_BY_SIDE = ("fig10", "fig11", "fig12", "fig13", "fig14", "fig15", "fig16", "fig17", "fig18", "fig19", "fig20",
                "fig21", "fig23", "latency-range")


def setup(quick: bool) -> dict:
    n = KEYS[quick]
    warm, window = WINDOW_US[quick]
    return {"profile": PROFILE, "seed": 1,
            "spec": f"co-located racks: cn0 ({APP_THREADS} application threads) + dpu0 (4 Arm cores) + mn0 "
                    f"(1 core) + {CLIENT_NODES} client node x {CLIENT_THREADS} threads x {COROUTINES} coroutines",
            "scale": f"{n:,} keys of 8 B with 8 B values (paper: 1 billion), {CACHE_FRACTION:.4g} of them cached "
                     f"on the host (paper: 1 GB of 16 GB); {CLIENT_THREADS * COROUTINES} requests in flight; "
                     f"YCSB {int(READ_RATIO * 100)}/{100 - int(READ_RATIO * 100)} reads/updates; windows "
                     f"{warm} us warm-up + {window} us measured (virtual)"}


EXPERIMENT = reproduction(
    "pd3", "PD3", title="PD3 (Sankhe et al.): Figs. 4, 8, 10-24 (hash map, page server, Garnet-like store)",
    parts=EXPERIMENTS, side_by_side=SIDE_BY_SIDE, setup=setup, profiles=(PROFILE,),
    # what `dmrack sensitivity pd3` runs per knob: Fig. 4's Host View steps (the DPU cost table), Fig. 8's
    # Loading Zone (the host's coherence costs) and Fig. 10's hash map, uniform (the four systems'
    # racks): about 55 s with --quick
    headline=("fig4", "fig8", "fig10"))
