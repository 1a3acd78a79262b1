"""``dmrack reproduce sherman``: Sherman (SIGMOD'22) under skewed and uniform writes, and its ablation.

Sherman is the anchor of the tree indexes on disaggregated memory that come after it (SMART-BT,
Dolphin, Marlin): its whole case is write throughput under contention, so its figures test the
contention model (docs/contention.md) where it matters most: a hot leaf's lock.

**Scale.** The paper runs 8 servers, each one compute server (22 client threads) and one memory
server, on ConnectX-5 100 Gb/s; 64 M keys (``kKeySpace``), 80 % of them inserted before the run;
keys drawn from a zipfian (0.99) over the key space and hashed onto it (``test/benchmark.cpp``).
Here: ``cx5-100g``, 8 compute nodes x 22 threads, one coroutine per thread (the released
benchmark runs without coroutines, ``USE_CORO`` off) and 8 memory nodes, memory node i on compute
node i's server, the two sharing its NIC and PCIe link (``memory.same_server``: Sherman's README,
"We emulate each server as one compute node and one memory node"; each on its own NIC until issue
40, see docs/sherman.md);
100,000 keys (50,000 with ``--quick``) drawn from a zipfian over 64 M items hashed onto the keys
loaded (``zipfianitems``), so the hottest keys are as hot as in the paper (about 4.9 % of the
requests on the hottest); writes are updates of loaded keys (the paper's writes are inserts, a
fifth of them of new keys, which split leaves now and then). Windows of milliseconds, after a
warm-up long enough for the hot lock's queue to form (:data:`WINDOWS_MS`).

**Published values.** The paper's text was not at hand. Throughput and p50/p99 latency at 176
threads are the paper's Fig. 10 (skewed) and Fig. 11 (uniform) values as transcribed in a public
reproduction's run book (wilsonchang17/Sherman-CS6204, ``RUNBOOK.md``, column "Paper (Mops)");
Sherman's gain over FG+ (24.7x on write-only, 23.6x on skewed write-intensive workloads) as that
project's report quotes the paper. docs/sherman.md lists them with these caveats.

Experiments:

* ``fig10``: skewed keys (zipf 0.99), write-only, write-intensive (50 % reads), read-intensive
  (95 % reads): Mops, p50 and p99 at 176 threads;
* ``fig11``: the same with uniform keys; both run on one rack (one load);
* ``skew``: skewed over uniform throughput per mix (published: 0.26 write-only, 0.37
  write-intensive, about 1 read-intensive);
* ``onemn``: one memory node with hundreds of clients (issue 40 item 6): Sherman+ (HOCL, per-line
  leaves) on SMART's B+-tree scale-up rack (cx6-200g, 1 compute node x 94 threads x 8 coroutines,
  one memory node, SMART's key popularity), YCSB A skewed and uniform. Published: SMART's artifact
  measured the skewed point (4.29 Mops); no uniform counterpart is published, so the uniform and
  ratio rows have no published value (docs/sherman.md, "One memory node");
* ``ablation``: FG+ (host-memory locks, every thread spinning on them, unlock after the
  write-back, whole-leaf write-backs), then each of Sherman's techniques added in the order of
  its abstract: command combination, the lock table in on-chip memory, the hierarchical lock
  (local lock table and hand-over), two-level versions (entry write-backs, and readers that trust
  versions instead of waiting for a held lock, as FG's readers of a locked node must) = Sherman,
  on skewed write-only and write-intensive workloads; a fresh rack per configuration (``--jobs``).
"""

from __future__ import annotations

from cluster.experiments.figures import Figure
from cluster.experiments.pointpool import SharedPoints, map_points
from cluster.experiments.progress import prefixed
from cluster.experiments.rows import Row, reproduction

PROFILE = "cx5-100g"
SERVERS = 8                      # compute nodes and memory nodes
THREADS = 22                     # client threads per compute node
KEY_SPACE = 64 << 20             # the paper's kKeySpace: the zipfian's items
# (warm-up, window) in virtual ms by quick: a skewed write run settles within its first
# millisecond (the hot leaf's lock queue forms; measured: 7.9, 5.0, 5.0 Mops in three 1 ms runs)
WINDOWS_MS = {True: (1.5, 1.0), False: (3.0, 3.0)}
# FG+ collapses over milliseconds (its spinning clients pile up on the hot lock), and not always
# on a small rack: Sherman / FG+ read 10.2x / 3.1x with 20,000 keys, 1.5 ms of warm-up and 1 ms
# windows, 2.6x / 2.4x with 20,000 keys and 3 + 2 ms, 16.1x / 18.7x with 50,000 keys and 3 + 3 ms.
# So --quick runs the ablation at full size (75 s with --jobs 2 here): 50,000 keys, 3 + 3 ms.
ABLATION_WINDOWS_MS = (3.0, 3.0)
RECORDS = {True: 50_000, False: 100_000}
ABLATION_RECORDS = 50_000

MIXES = {"write-only": 0.0, "write-intensive": 0.5, "read-intensive": 0.95}    # read proportion
DISTRIBUTIONS = {"fig10": "zipfian", "fig11": "uniform"}

# (Mops, p50 µs, p99 µs) at 176 threads, Fig. 10 (zipfian 0.99) and Fig. 11 (uniform), as
# transcribed by wilsonchang17/Sherman-CS6204 RUNBOOK.md
PUBLISHED = {
    ("fig10", "write-only"): (4.14, 9.6, 1136), ("fig10", "write-intensive"): (8.02, 6.9, 659),
    ("fig10", "read-intensive"): (33.8, 4.8, 12.3),
    ("fig11", "write-only"): (16.04, 10.7, 17.5), ("fig11", "write-intensive"): (21.53, 8.0, 15),
    ("fig11", "read-intensive"): (32.4, 5.0, 12.1),
}
# Sherman / FG+ throughput, skewed workloads (the same report quoting the paper)
PUBLISHED_OVER_FG = {"write-only": 24.7, "write-intensive": 23.6}

# One memory node, hundreds of clients. The one published measurement at hand of Sherman's HOCL
# on one memory node: SMART's artifact (madsys-dev/smart) runs Sherman+ with HOCL (USE_HOCL=1),
# MEMORY_NODES=1, 8 coroutines per thread on one compute node (ae/collect/fig12abc-btree-scale-up.sh)
# on YCSB A with zipf 0.99 (ae/collect/config/datastructure.btree.local.json); at 94 threads it
# reads 4.290 Mops (ae/raw-reference/fig12-ycsb-a.csv, the first of its three series, Sherman).
ONE_MN_PUBLISHED = 4.29
ONE_MN_THREADS = 94
ONE_MN_RECORDS = {True: 20_000, False: 100_000}
# warm-up, window (virtual ms). With hundreds of clients the hot leaf's queue takes milliseconds to
# absorb them (a client spends most of its time away from the hot leaf), and until it has, a window
# counts hot updates issued faster than the lock serves them: the skewed point read 5.59 Mops after
# 1 ms of warm-up, 4.24 after 4 ms (docs/sherman.md, "One memory node")
ONE_MN_WINDOWS_MS = {True: (4.0, 1.0), False: (8.0, 4.0)}

# The ablation's configurations: Sherman's options (nodes/systems/sherman/system.py). FG+ keeps
# Sherman's leaf layout: Sherman's own code builds its FG-style variant on the same LeafPage
# (CONFIG_ENABLE_EMBEDDING_LOCK, thustorage/Sherman src/Tree.cpp: the lock is the page's first
# 8 bytes; kLeafCardinality does not depend on it). On packed leaves FG+ is caught half-way out of
# its collapse by these windows (docs/sherman.md, "Since the packed leaf").
FG_PLUS = {"lock_memory": "host", "hierarchical": False, "combine": False, "entry_writes": False,
           "lock_free_reads": False}
ABLATION = (
    ("FG+", FG_PLUS),
    ("+Combine", {**FG_PLUS, "combine": True}),
    ("+On-chip", {**FG_PLUS, "combine": True, "lock_memory": "device"}),
    ("+Hierarchical", {**FG_PLUS, "combine": True, "lock_memory": "device", "hierarchical": True}),
    ("+2-level version (Sherman)", {}),
)
ABLATION_MIXES = ("write-only", "write-intensive")


def scenario(workloads: dict[str, tuple[str, float]], *, records: int, warm_ms: float, measure_ms: float,
             options: dict | None = None, servers: int = SERVERS, threads: int = THREADS, seed: int = 1) -> dict:
    """The rack and steps as a scenario document: load, then per named workload (name ->
    (distribution, read proportion)) a warm-up run and a measured run."""
    # Inserts, as Sherman's benchmark loads its tree (thread by thread before the measured
    # phase); docs/sherman.md compares against a bulk-loaded tree.
    steps = [{"action": "load", "bulk": False}]
    for name in workloads:
        steps += [{"action": "run", "workload": name, "duration_ms": warm_ms},
                  {"action": "run", "workload": name, "duration_ms": measure_ms}]
    return {
        "rack": {"name": "reproduce-sherman", "profile": PROFILE, "seed": seed},
        "compute": {"count": servers, "threads": threads, "coroutines": 1, "memory": "64MiB"},
        # the paper's servers are each one compute and one memory node on one NIC (Sherman's README)
        "memory": {"count": servers, "memory": "128MiB", "same_server": True},
        "system": {"name": "sherman", **(options or {})},
        "workload": {"preset": "a", "recordcount": records, "keysize": 8, "valuesize": 8},
        "workloads": {name: {"preset": "a", "readproportion": reads, "updateproportion": round(1 - reads, 6),
                             "requestdistribution": dist, "zipfianitems": KEY_SPACE}
                      for name, (dist, reads) in workloads.items()},
        "step": steps,
    }


def measure(workloads: dict[str, tuple[str, float]], **kw) -> tuple[dict[str, dict], dict]:
    """Run :func:`scenario` co-located (deterministic); per workload its measured step's Mops,
    p50 and p99, and the Sherman clients' statistics summed over the whole run."""
    from cluster.rack import ColocatedRack
    from cluster.scenario import scenario_from_dict
    rack = ColocatedRack(scenario_from_dict(scenario(workloads, **kw), source="reproduce sherman"))
    res = rack.run()
    by_index = {s.index: s for s in res.steps}
    out = {}
    for k, name in enumerate(workloads):
        step = by_index[3 + 2 * k]             # steps count from 1: load, then (warm, measure) per workload
        every = next(kf for kf in step.kinds if kf.kind == "all")
        out[name] = {"mops": step.ops / (kw["measure_ms"] * 1e3), "p50_us": every.p50_us, "p99_us": every.p99_us}
    stats = [c.statistics() for n in rack.nodes for c in n.clients]
    totals = {f: sum(getattr(s, f) for s in stats) for f in ("updates", "handovers", "remote_lock_retries")}
    return out, totals


def _figures(quick: bool, progress, shared: SharedPoints | None, *, records=None, warm_ms=None, measure_ms=None,
             servers=SERVERS, threads=THREADS, mixes=tuple(MIXES), jobs: int = 1) -> dict:
    """fig10 and fig11 on one rack (one load): {(fig, mix): point}. Measured once per run and
    arguments (``shared``), since ``skew`` needs both; a point of its own (on a worker when
    ``jobs`` is above 1, beside the ablation's racks)."""
    warm, win = WINDOWS_MS[quick]
    key = (records or RECORDS[quick], warm_ms or warm, measure_ms or win, servers, threads, tuple(mixes))
    progress(f"{servers} compute nodes x {threads} threads, {servers} memory nodes: {key[0]:,} keys, then "
             f"{2 * len(mixes)} workloads")
    got = (shared if shared is not None else SharedPoints()).measure(
        _figures_point, [key], jobs=jobs, progress=progress,
        describe=lambda p: f"Figs. 10 and 11: {p[0]:,} keys, {p[3]} x {p[4]} threads")
    return got[0]


def _figures_point(records: int, warm_ms: float, measure_ms: float, servers: int, threads: int, mixes: tuple) -> dict:
    workloads = {f"{fig}_{mix}": (dist, MIXES[mix]) for fig, dist in DISTRIBUTIONS.items() for mix in mixes}
    got, _ = measure(workloads, records=records, warm_ms=warm_ms, measure_ms=measure_ms, servers=servers,
                     threads=threads)
    return {tuple(name.split("_", 1)): p for name, p in got.items()}


def _figure(fig: str, quick: bool, progress, shared: SharedPoints | None, **kw) -> list[Row]:
    points = _figures(quick, progress, shared, **kw)
    clients = kw.get("servers", SERVERS) * kw.get("threads", THREADS)
    series = "skewed (zipf 0.99)" if fig == "fig10" else "uniform"
    rows = []
    for (f, mix), p in points.items():
        if f != fig:
            continue
        pub = PUBLISHED.get((fig, mix), (None, None, None)) if clients == SERVERS * THREADS else (None,) * 3
        rows.append(Row(fig, f"{series}, {mix}", clients, "Mops", p["mops"], pub[0]))
        rows.append(Row(fig, f"{series}, {mix}", clients, "p50 µs", p["p50_us"], pub[1]))
        rows.append(Row(fig, f"{series}, {mix}", clients, "p99 µs", p["p99_us"], pub[2]))
    return rows


def fig10(quick: bool, progress, *, jobs: int = 1, shared: SharedPoints | None = None, **kw) -> list[Row]:
    """Skewed keys (zipf 0.99): write-only, write-intensive and read-intensive at 176 threads.
    Published (Fig. 10, transcribed): 4.14, 8.02 and 33.8 Mops."""
    return _figure("fig10", quick, progress, shared, jobs=jobs, **kw)


def fig11(quick: bool, progress, *, jobs: int = 1, shared: SharedPoints | None = None, **kw) -> list[Row]:
    """Uniform keys: write-only, write-intensive and read-intensive at 176 threads. Published
    (Fig. 11, transcribed): 16.04, 21.53 and 32.4 Mops."""
    return _figure("fig11", quick, progress, shared, jobs=jobs, **kw)


def skew(quick: bool, progress, *, jobs: int = 1, shared: SharedPoints | None = None, **kw) -> list[Row]:
    """Skewed over uniform throughput per mix: skewed writes far below uniform ones (published,
    from the transcribed Figs. 10 and 11: 0.26 write-only, 0.37 write-intensive, 1.04
    read-intensive)."""
    points = _figures(quick, progress, shared, jobs=jobs, **kw)
    rows = []
    for mix in kw.get("mixes", MIXES):
        z, u = points[("fig10", mix)], points[("fig11", mix)]
        pz, pu = PUBLISHED.get(("fig10", mix)), PUBLISHED.get(("fig11", mix))
        pub = pz[0] / pu[0] if pz and pu else None
        rows.append(Row("skew", mix, "zipf 0.99 / uniform", "Mops ratio", z["mops"] / u["mops"] if u["mops"] else None,
                        pub))
    return rows


def ablation(quick: bool, progress, *, records=None, warm_ms=None, measure_ms=None, servers=SERVERS,
             threads=THREADS, configs=ABLATION, jobs: int = 1) -> list[Row]:
    """FG+ and Sherman's techniques added one at a time, skewed write-only and write-intensive:
    Mops, p99, handovers and failed lock CASes per write. Published: each technique helps;
    Sherman / FG+ = 24.7 (write-only) and 23.6 (write-intensive) as quoted."""
    warm, win = ABLATION_WINDOWS_MS
    workloads = {mix: ("zipfian", MIXES[mix]) for mix in ABLATION_MIXES}
    kw = {"records": records or ABLATION_RECORDS, "warm_ms": warm_ms or warm, "measure_ms": measure_ms or win,
          "servers": servers, "threads": threads}
    points = [(name, options, workloads, kw) for name, options in configs]
    got = map_points(_ablation_point, points, jobs=jobs, progress=prefixed(progress, "ablation: "),
                     describe=lambda p: p[0])
    clients = servers * threads
    rows, mops = [], {}
    for (name, _options), (pts, totals) in zip(configs, got):
        writes = totals["updates"]
        for mix in ABLATION_MIXES:
            mops[(name, mix)] = pts[mix]["mops"]
            rows.append(Row("ablation", f"{name}, {mix}", clients, "Mops", pts[mix]["mops"]))
            rows.append(Row("ablation", f"{name}, {mix}", clients, "p99 µs", pts[mix]["p99_us"]))
        rows.append(Row("ablation", name, clients, "failed lock CAS / write",
                        totals["remote_lock_retries"] / writes if writes else None))
        rows.append(Row("ablation", name, clients, "hand-overs / write", totals["handovers"] / writes if writes else None))
    names = [n for n, _ in configs]
    for mix in ABLATION_MIXES:
        for prev, name in zip(names, names[1:]):
            before = mops[(prev, mix)]
            rows.append(Row("ablation", f"{name} / {prev}, {mix}", clients, "Mops ratio",
                            mops[(name, mix)] / before if before else None))
        if names[0] == "FG+" and names[-1] == ABLATION[-1][0]:
            fg = mops[("FG+", mix)]
            pub = PUBLISHED_OVER_FG.get(mix) if clients == SERVERS * THREADS else None
            rows.append(Row("ablation", f"Sherman / FG+, {mix}", clients, "Mops ratio",
                            mops[(names[-1], mix)] / fg if fg else None, pub))
    return rows


def onemn(quick: bool, progress, *, threads: int = ONE_MN_THREADS, records=None, warm_ms=None, measure_ms=None,
          jobs: int = 1) -> list[Row]:
    """One memory node, one compute node of 94 threads x 8 coroutines (SMART's B+-tree scale-up
    rack, Sherman+ with HOCL), YCSB A skewed (zipf 0.99 over SMART's 10^8 keys) and uniform.
    Published: 4.29 Mops skewed (SMART's artifact); the uniform point is not published."""
    warm, win = ONE_MN_WINDOWS_MS[quick]
    kw = {"records": records or ONE_MN_RECORDS[quick], "warm_ms": warm_ms or warm, "measure_ms": measure_ms or win}
    points = [(dist, threads, kw) for dist in ("zipfian", "uniform")]
    got = map_points(_onemn_point, points, jobs=jobs, progress=prefixed(progress, "onemn: "), describe=lambda p: p[0])
    z, u = got
    clients = threads * 8
    series = f"YCSB A, Sherman+ (HOCL), 1 CN x {threads} threads x 8 coroutines, 1 MN"
    pub = ONE_MN_PUBLISHED if threads == ONE_MN_THREADS else None
    return [Row("onemn", f"skewed (zipf 0.99), {series}", clients, "Mops", z, pub),
            Row("onemn", f"uniform, {series}", clients, "Mops", u),
            Row("onemn", f"zipf 0.99 / uniform, {series}", clients, "Mops ratio", z / u if u else None)]


def _onemn_point(dist: str, threads: int, kw: dict) -> float:
    from cluster.experiments.reproduce_smart import FIG12_MEMORY_NODES, SHERMAN_PLUS_LEAF
    from cluster.experiments.bench_ycsb import SMART_KEYS
    from cluster.experiments.bench_ycsb import measure as ycsb_measure
    pts, _ = ycsb_measure("sherman", "a", (threads,), qp_policy="per_thread_qp", memory_nodes=FIG12_MEMORY_NODES,
                          options={"leaf_layout": SHERMAN_PLUS_LEAF},
                          properties={**SMART_KEYS, "requestdistribution": dist}, **kw)
    return pts[0]["mops"]


def _ablation_point(name: str, options: dict, workloads: dict, kw: dict):
    return measure(workloads, options=options, **kw)


# --- the paper's figures (cluster.experiments.figures; drawn by --plot, dmrack plot, dmrack report) ---
# One point per workload (176 clients), so the figures are bars: one per workload, the published
# value a star on it; the ablation one bar per configuration, a figure per mix.

_PERF = (("Mops", "p50 µs", "p99 µs"), ("throughput (Mops)", "p50 latency (µs)", "p99 latency (µs)"))
FIGURES = [
    Figure("fig10", "fig10", _PERF[0], "Fig. 10: skewed keys (zipf 0.99), 176 clients", "", _PERF[1],
           ylog=(False, False, True), kind="bar"),
    Figure("fig11", "fig11", _PERF[0], "Fig. 11: uniform keys, 176 clients", "", _PERF[1], kind="bar"),
    Figure("skew", "skew", "Mops ratio", "Skewed / uniform throughput by workload (Figs. 10 and 11)", "",
           "zipf 0.99 / uniform (Mops)", kind="bar"),
    *[Figure(f"ablation-{mix}", "ablation", ("Mops", "p99 µs"),
             f"Ablation: FG+ and Sherman's techniques, skewed {mix}", "", ("throughput (Mops)", "p99 latency (µs)"),
             ylog=(False, True), kind="bar", series=tuple(f"{name}, {mix}" for name, _ in ABLATION))
      for mix in ABLATION_MIXES],
    Figure("ablation-locks", "ablation", ("failed lock CAS / write", "hand-overs / write"),
           "Ablation: lock contention per write (skewed writes)", "", ("failed lock CASes per write",
           "lock hand-overs per write"), kind="bar", series=tuple(name for name, _ in ABLATION)),
]


EXPERIMENTS = {"fig10": fig10, "fig11": fig11, "skew": skew, "onemn": onemn, "ablation": ablation}
SIDE_BY_SIDE = ("fig10", "fig11", "skew", "onemn", "ablation")


def setup(quick: bool) -> dict:
    """The racks of this reproduction, for the run record (cluster.experiments.provenance)."""
    return {"profile": PROFILE, "seed": 1,
            "spec": f"co-located racks: {SERVERS} compute nodes x {THREADS} threads, {SERVERS} memory nodes",
            "scale": f"{RECORDS[quick]:,} keys for Fig. 10 and 11, {ABLATION_RECORDS:,} for the ablation "
                     f"(paper: 1 G); windows of virtual milliseconds"}


EXPERIMENT = reproduction(
    "sherman", "Sherman", title="Sherman (SIGMOD'22): Fig. 10, 11 and the ablation from FG+",
    parts=EXPERIMENTS, side_by_side=SIDE_BY_SIDE, setup=setup, figures=FIGURES, profiles=(PROFILE,),
    # what `dmrack sensitivity sherman` runs per knob: Figs. 10 and 11 share one rack: about 45 s with --quick
    headline=("fig10", "fig11"))
