"""FlexKV against Clover, FUSEE and Aceso (FlexKV §5.2 and §5.4): Figs. 11-15 and 21-23.

The paper's central result is a comparison: "FlexKV achieves the highest throughput across all
workloads, with peak throughput improvements over the second-best system of 2.31x (YCSB A), 1.34x
(B), 1.37x (C), 1.31x (D)", against Clover (a metadata server holds the index), FUSEE (a RACE index
replicated on the memory nodes, updated by clients with the SNAPSHOT protocol) and Aceso (one
primary-index CAS per update, checkpoints and erasure coding). Every system is registered on the
rack (``nodes/systems/{flexkv,clover,fusee,aceso}``); a series whose system is not registered gets
a note row and no points, as Fig. 17 does.

**Like for like.** "All systems use 3-way replication or an equivalent fault-tolerance setup" on
3 memory nodes (§5.1). So the comparison racks have :data:`MEMORY` memory nodes and every system
its fault tolerance switched on: FlexKV with ``replicas = 3`` (§4.5 primary-backup: pairs and index
slots WRITTEN to three memory nodes), FUSEE with 3 replicas, Clover with 3 copies of its versions,
Aceso with its checkpoints and XOR parity (its own code's "equivalent"). That differs from FlexKV's
own figures (Figs. 16-20 and 24, one memory node standing for three, no replication:
docs/flexkv.md "Why one memory node"), which is why those rows do not move.

**Scale.** The paper: 20 CNs x 10 clients x 8 coroutines (200 clients), 3 MNs, 10 M pairs of 128 B,
64 MB of CN memory (~5 % of the working set). Here: :data:`COMPUTE` CNs x up to :data:`THREADS`
clients x 8 coroutines (32 clients: the paper's 200 scaled by 0.16), 3 MNs, ``records`` pairs,
each system's compute-node memory the paper's share of the working set
(:func:`cluster.experiments.flexkv.cn_memory_bytes`). Fig. 11's x axis (20 -> 200 clients) is
2 -> 16 clients per CN here with ``--quick`` (8 -> 64 clients; 1 -> 16 without: :data:`CLIENTS`), and
Fig. 12's "200 clients" its last point. Fig. 22 keeps the rack's node count (7) and moves
it between roles as the paper moves its 23 (3:20 -> 10:13 MN:CN).

Parts (``--only``): ``fig11`` (throughput vs clients, YCSB A-D), ``fig12`` (latency CDFs at the most
clients: the measured window's percentiles), ``fig13`` (UPDATE:SEARCH ratios), ``fig14`` (uniform
YCSB), ``fig15`` (Twitter-like synthetic traces: the three clusters the paper names), ``fig21``
(KV size), ``fig22`` (MN:CN ratio), ``fig23`` (CN memory limit). Points are shared across parts
(the 32-client YCSB points serve Figs. 11, 13, 21, 22 and 23, the 64-client ones Figs. 11 and 12)
and run once per run.
"""

from __future__ import annotations

import os
import tempfile

from cluster.experiments import flexkv as F
from cluster.experiments.pointpool import SharedPoints
from cluster.experiments.progress import prefixed
from cluster.experiments.rows import Row, scale_row

#: series label -> registered system, in the paper's legend order
COMPARED = {"FlexKV": "flexkv", "Aceso": "aceso", "FUSEE": "fusee", "Clover": "clover"}
MEMORY = 3                       # the paper's 3 memory nodes
REPLICAS = 3                     # "3-way replication or an equivalent fault-tolerance setup"
COMPUTE = 4                      # compute nodes (the paper's 20)
THREADS = 8                      # clients per compute node at the most (the paper's 10)
#: Fig. 11's clients per CN (x 4 CNs: 8 -> 64 clients, the paper's 20 -> 200). It goes past
#: THREADS, to 16 per CN: 64 clients x 8 coroutines put ~170 requests in flight per memory node
#: (the paper's 1,600 on 3: ~530), where the memory nodes' NICs start to bind and the curves
#: near their peaks. Fig. 12's CDFs ("with 200 clients") are taken at its last point; the other
#: figures stay at THREADS (32 clients)
CLIENTS = {True: (2, 4, 8, 16), False: (1, 2, 4, 8, 16)}
#: Fig. 13's UPDATE:SEARCH mixes (update %, as YCSB proportions)
MIXES = {True: (0, 5, 50, 100), False: (0, 5, 25, 50, 75, 100)}
#: Fig. 14's workloads (uniform keys)
UNIFORM = {True: ("A", "B", "C", "D"), False: ("A", "B", "C", "D")}
#: Fig. 21's KV pair sizes (bytes, key included): 128 -> 1024 in 128 B steps in the paper
KV_SIZES = {True: (128, 1024), False: (128, 384, 640, 1024)}
KV_SIZE_WORKLOAD = "B"
#: Fig. 22: (memory nodes, compute nodes) of a 7-node rack, the paper's 3:20 -> 10:13 of 23
SPLITS = {True: ((3, 4), (5, 2)), False: ((3, 4), (4, 3), (5, 2))}
#: Fig. 23: CN memory as the paper's MB (0 -> 128 in 16 MB steps), scaled by the working set
CN_MB = {True: (0, 64, 128), False: (0, 16, 32, 64, 96, 128)}
CN_MB_WORKLOADS = {True: ("A", "C"), False: ("A", "B", "C", "D")}
#: Fig. 15: the clusters the paper names (Yang et al.'s Twitter traces, OSDI'20) as synthetic
#: stand-ins (workloads.twitter_synth): (alpha, read ratio, value sizes), each from the sentence
#: that names it; the value sizes beyond "large KV pairs" are an assumption (cluster 50: lognormal
#: around 1000 B, the largest of Fig. 21's range; the others the paper's 128 B pairs)
CLUSTERS = {
    "cluster 1": (2.68, 0.99, "fixed:120"),         # "alpha = 2.68, 99% reads"
    "cluster 35": (0.0, 0.95, "fixed:120"),         # "uniform (Zipfian alpha = 0)"; read share assumed
    "cluster 50": (0.99, 0.95, "lognormal:1000:0.3"),  # "large KV pairs"; alpha and reads assumed
}
TRACE_ROWS = {True: 200_000, False: 1_000_000}

# --- published values (FlexKV §5.2, §5.4) ----------------------------------------------------------
PUB_FIG11_PEAK_GAIN = {"A": 2.31, "B": 1.34, "C": 1.37, "D": 1.31}     # FlexKV / second best
PUB_FIG12_P99_CUT = {"A": 0.852, "B": 0.364, "C": 0.041, "D": 0.369}   # 1 - FlexKV p99 / second best's
PUB_FIG15_GAIN = (1.03, 2.94)                                            # FlexKV / second best, over clusters


def compare_options(system: str, *, cn_bytes: int) -> dict:
    """A compared system's options: its fault tolerance on ("3-way replication or equivalent") and
    its compute-node memory ``cn_bytes`` (cache, or cache + local index for FlexKV)."""
    if system in ("flexkv", "flexkv-op"):
        return {**F.FULL, "replicas": REPLICAS, "cn_memory_bytes": cn_bytes}
    if system == "fusee":
        return {"replicas": REPLICAS, "cache_bytes": cn_bytes}
    if system == "clover":
        return {"replicas": REPLICAS, "cache_bytes": cn_bytes}
    if system == "aceso":
        return {"cache_bytes": cn_bytes}
    return {}


#: the memory nodes' cores for systems that run server actors there (Aceso's checkpoints and parity,
#: Clover's metadata server): the paper's machines have 16 cores (two 8-core Xeon E5-2650v2, §5.1)
#: and serve 200 clients; scaled with the clients (32 / 200) that is 2.6, so 3. An assumption: the
#: paper does not say how many of them Clover's metadata server or Aceso's memory nodes use.
MEMORY_CORES = 3
#: memory nodes a system needs beyond the compared ones: Clover's metadata server, "an additional
#: physical machine" (§5.1)
EXTRA_MEMORY = {"clover": 1}


def rack_extra(system: str) -> tuple:
    """(table, key, value) a compared system needs beyond the common rack: memory-node cores for
    the systems whose memory nodes work (Aceso's checkpoints and parity, Clover's metadata server)."""
    from nodes.systems import get_system
    cls = get_system(system)
    if "memory" in (getattr(cls, "servers", None) or {}):
        return (("memory", "cores", MEMORY_CORES),)
    return ()


def _sizes(quick: bool, records=None, interval_us=None, windows=None, compute=None, threads=None,
           coroutines=None) -> dict:
    return {"records": records or F.RECORDS[quick], "interval_us": interval_us or F.INTERVAL_US[quick],
            "windows": windows or F.WINDOWS_MS[quick], "compute": compute or COMPUTE, "threads": threads or THREADS,
            "coroutines": coroutines or F.COROUTINES}


def _spec(system: str, sizes: dict, workload, *, threads=None, compute=None, memory=MEMORY,
          cn_mb: float | None = None, tables: tuple | None = None) -> tuple:
    """A point of ``system`` on ``workload`` (a YCSB letter, or a name in ``tables``): the key and
    the arguments of :func:`cluster.experiments.flexkv.measure` (threads and compute nodes: the
    run's, unless given)."""
    threads, compute = threads or sizes["threads"], compute or sizes["compute"]
    n = sizes["records"]
    cn = F.cn_memory_bytes(n) if cn_mb is None else int(round(cn_mb * (1 << 20) * n / F.PAPER_KEYS))
    options = compare_options(system, cn_bytes=cn)
    warm, win = sizes["windows"]["knob" if options.get("knob") else "fixed"]
    memory += EXTRA_MEMORY.get(system, 0)
    kw = {"records": n, "interval_us": sizes["interval_us"], "compute": compute, "memory": memory,
          "threads": threads, "coroutines": sizes["coroutines"], "tables": tables, "extra": rack_extra(system)}
    runs = [(workload, warm), (workload, win)]
    key = ("compare", system, F.freeze(options), workload, F.freeze(kw), warm, win)
    return (key, system, options, runs, kw, None)


def _present(exp: str, systems: dict | None) -> tuple[dict, list[Row]]:
    """The registered series (label -> system) and a note row for each one that is not."""
    from nodes.systems import is_known
    sysmap = dict(systems or COMPARED)
    present = {label: name for label, name in sysmap.items() if is_known(name)}
    notes = [Row(exp, f"{label}: system {name!r} is not registered, skipped", "-", "Mops", None)
             for label, name in sysmap.items() if label not in present]
    return present, notes


def _run(exp: str, specs: dict, progress, jobs: int, shared) -> tuple[dict, list[Row]]:
    """Run ``specs`` ({(label, x): spec}); the results by the same keys, and a note row per failure."""
    keys = list(specs)
    res = F.points([specs[k] for k in keys], prefixed(progress, f"{exp}: "), jobs, shared)
    return dict(zip(keys, res)), F.failure_rows(exp, [specs[k] for k in keys], res)


def _scale_rows(exp: str, sizes: dict) -> list[Row]:
    n, c, t = sizes["records"], sizes["compute"], sizes["threads"]
    return [scale_row(exp, f"scale: {n:,} KV pairs / 10 M", "-", "1 / scale", F.PAPER_KEYS / n),
            scale_row(exp, f"rack: {c} CNs x up to {t} clients x {sizes['coroutines']} coroutines, {MEMORY} MNs "
                           f"(paper: 20 x 10 x 8, 3 MNs)", "-", "clients", c * t, F.PAPER_COMPUTE * F.PAPER_CLIENTS),
            scale_row(exp, "replication (every system: 3-way or its equivalent)", "-", "copies", REPLICAS, 3)]


def _most_clients(quick: bool, size: dict) -> int:
    """Clients per CN at Fig. 11's last point (the paper's 200 clients), where Fig. 12 is taken too:
    the run's ``threads`` when given, else the largest of :data:`CLIENTS`."""
    return size.get("threads") or max(CLIENTS[quick])


def _second(values: dict, first: str):
    """The best value among the series other than ``first`` (None if none)."""
    others = [v for k, v in values.items() if k != first and v is not None]
    return max(others) if others else None


# --- Fig. 11 and 12: YCSB A-D, throughput vs clients; latency CDFs at the most clients ----------------

def fig11(quick: bool, progress, *, jobs: int = 1, shared: SharedPoints | None = None, systems=None,
          **size) -> list[Row]:
    """Throughput vs clients on YCSB A-D (Zipfian 0.99). Published peak gain of FlexKV over the
    second best: A 2.31x, B 1.34x, C 1.37x, D 1.31x; Aceso and FUSEE bound by RDMA CAS at the
    memory nodes' NICs, Clover by its metadata server."""
    sizes = _sizes(quick, **size)
    top = _most_clients(quick, size)
    present, rows = _present("fig11", systems)
    rows = _scale_rows("fig11", {**sizes, "threads": top}) + rows
    clients = [t for t in CLIENTS[quick] if t <= top] or [top]
    specs = {(label, w, t): _spec(name, sizes, w, threads=t) for label, name in present.items()
             for w in F.WORKLOADS for t in clients}
    got, fails = _run("fig11", specs, progress, jobs, shared)
    rows += fails
    for (label, w, t), p in got.items():
        rows.append(Row("fig11", f"{label}, YCSB {w}", sizes["compute"] * t, "Mops", F.value_of(p)))
    for w in F.WORKLOADS:
        peak = {label: max((F.value_of(got[(label, w, t)]) or 0.0 for t in clients), default=None) or None
                for label in present}
        if "FlexKV" in peak:
            second = _second(peak, "FlexKV")
            rows.append(Row("fig11", "peak FlexKV / peak of the second best", f"YCSB {w}", "Mops ratio",
                            F.ratio(peak["FlexKV"], second), PUB_FIG11_PEAK_GAIN[w]))
        best = max((v, k) for k, v in peak.items() if v is not None) if any(peak.values()) else None
        if best:
            rows.append(Row("fig11", f"highest peak: {best[1]}", f"YCSB {w}", "note", None))
    return rows


def fig12(quick: bool, progress, *, jobs: int = 1, shared: SharedPoints | None = None, systems=None,
          **size) -> list[Row]:
    """Latency CDFs at the most clients (the measured window's percentiles). Published: Clover has
    the lowest p50 (address-cache hits go straight to the memory nodes, which its metadata server
    keeps lightly loaded); FlexKV's p99 is the lowest, -85.2 % (A), -36.4 % (B), -4.1 % (C), -36.9 % (D)
    against the second best. "With 200 clients" (§5.2) is Fig. 11's last point, so the CDFs are taken
    at Fig. 11's most clients (:data:`CLIENTS`; its points, run once for both)."""
    sizes = _sizes(quick, **size)
    top = _most_clients(quick, size)
    present, rows = _present("fig12", systems)
    rows = _scale_rows("fig12", {**sizes, "threads": top}) + rows
    specs = {(label, w): _spec(name, sizes, w, threads=top) for label, name in present.items() for w in F.WORKLOADS}
    got, fails = _run("fig12", specs, progress, jobs, shared)
    rows += fails
    for (label, w), p in got.items():
        for q, us in (p.get("cdf") or []):
            rows.append(Row("fig12", f"{label}, YCSB {w}", q, "latency µs at percentile", us))
    for w in F.WORKLOADS:
        p50 = {label: F.value_of(got[(label, w)], "p50_us") for label in present}
        p99 = {label: F.value_of(got[(label, w)], "p99_us") for label in present}
        lowest = min(((v, k) for k, v in p50.items() if v is not None), default=None)
        if lowest:
            rows.append(Row("fig12", f"lowest p50: {lowest[1]} (paper: Clover)", f"YCSB {w}", "note", None))
        if "FlexKV" in p99 and p99["FlexKV"] is not None:
            others = [v for k, v in p99.items() if k != "FlexKV" and v is not None]
            best_other = min(others) if others else None
            cut = 1 - p99["FlexKV"] / best_other if best_other else None
            rows.append(Row("fig12", "FlexKV p99 cut against the second best (1 - FlexKV / lowest other)",
                            f"YCSB {w}", "fraction", cut, PUB_FIG12_P99_CUT[w]))
    return rows


# --- Fig. 13: UPDATE:SEARCH ratios; Fig. 14: uniform keys --------------------------------------------

def _mix_table(update_pct: int, records: int) -> dict:
    t = F.workload("A", records)
    t.update({"readproportion": (100 - update_pct) / 100, "updateproportion": update_pct / 100})
    return t


def fig13(quick: bool, progress, *, jobs: int = 1, shared: SharedPoints | None = None, systems=None,
          **size) -> list[Row]:
    """Throughput under UPDATE:SEARCH mixes (Zipfian 0.99). Published: every system falls as
    updates grow, FlexKV the highest throughout."""
    sizes = _sizes(quick, **size)
    present, rows = _present("fig13", systems)
    rows = _scale_rows("fig13", sizes) + rows
    specs = {}
    for label, name in present.items():
        for u in MIXES[quick]:
            name_w = f"mix-{u}"
            specs[(label, u)] = _spec(name, sizes, name_w,
                                      tables=((name_w, F.freeze(_mix_table(u, sizes["records"]))),))
    got, fails = _run("fig13", specs, progress, jobs, shared)
    rows += fails
    for (label, u), p in got.items():
        rows.append(Row("fig13", label, f"{u}:{100 - u}", "Mops", F.value_of(p)))
    _ordering_rows(rows, "fig13", present, {(label, u): F.value_of(p) for (label, u), p in got.items()},
                   [u for u in MIXES[quick]], lambda u: f"{u}:{100 - u}")
    for label in present:
        ys = [F.value_of(got[(label, u)]) for u in MIXES[quick]]
        falls = all(a is not None and b is not None and b <= a * 1.05 for a, b in zip(ys, ys[1:]))
        rows.append(Row("fig13", f"{label}: falls as updates grow (5 % tolerance)", "-", "holds", float(falls), 1.0))
    return rows


def _ordering_rows(rows: list, exp: str, present: dict, mops: dict, xs, fmt) -> None:
    """A row per x: FlexKV / the best other series (published: above 1 throughout)."""
    if "FlexKV" not in present:
        return
    for x in xs:
        vals = {label: mops.get((label, x)) for label in present}
        rows.append(Row(exp, "FlexKV / best other", fmt(x), "Mops ratio", F.ratio(vals["FlexKV"],
                                                                                  _second(vals, "FlexKV"))))


def fig14(quick: bool, progress, *, jobs: int = 1, shared: SharedPoints | None = None, systems=None,
          **size) -> list[Row]:
    """YCSB with uniform keys. Published: FlexKV drops against the skewed case (fewer cache hits,
    offloaded partitions less hot)."""
    sizes = _sizes(quick, **size)
    present, rows = _present("fig14", systems)
    rows = _scale_rows("fig14", sizes) + rows
    specs, skewed = {}, {}
    for label, name in present.items():
        for w in UNIFORM[quick]:
            t = F.workload(w, sizes["records"])
            t["requestdistribution"] = "uniform"
            t.pop("zipfianitems", None)
            t.pop("zipfianconstant", None)
            specs[(label, w)] = _spec(name, sizes, f"uniform-{w}", tables=((f"uniform-{w}", F.freeze(t)),))
            skewed[(label, w)] = _spec(name, sizes, w)
    got, fails = _run("fig14", {**specs, **{("skewed",) + k: v for k, v in skewed.items()}}, progress, jobs, shared)
    rows += fails
    for (label, w) in specs:
        u, z = F.value_of(got[(label, w)]), F.value_of(got[("skewed", label, w)])
        rows.append(Row("fig14", f"{label}, uniform", f"YCSB {w}", "Mops", u))
        rows.append(Row("fig14", f"{label}: uniform / Zipfian 0.99", f"YCSB {w}", "Mops ratio", F.ratio(u, z)))
    _ordering_rows(rows, "fig14", present, {k: F.value_of(got[k]) for k in specs}, UNIFORM[quick], lambda w: f"YCSB {w}")
    if "FlexKV" in present:
        drops = [F.ratio(F.value_of(got[("FlexKV", w)]), F.value_of(got[("skewed", "FlexKV", w)])) for w in UNIFORM[quick]]
        rows.append(Row("fig14", "FlexKV uniform / Zipfian (mean; published: below 1)", "-", "Mops ratio",
                        F.mean(drops)))
    return rows


# --- Fig. 15: Twitter-like traces ------------------------------------------------------------------------

def make_traces(directory: str, records: int, rows: int) -> dict[str, str]:
    """Write the three clusters' synthetic traces (once per size); name -> path."""
    from workloads.twitter_synth import SynthParams, write_trace
    os.makedirs(directory, exist_ok=True)
    out = {}
    for name, (alpha, reads, sizes) in CLUSTERS.items():
        path = os.path.join(directory, f"flexkv-{name.replace(' ', '')}-{records}-{rows}.csv")
        if not os.path.exists(path):
            write_trace(path, SynthParams(keys=records, rows=rows, alpha=alpha, read_ratio=reads, value_size=sizes))
        out[name] = path
    return out


def _trace_table(path: str, records: int, large: bool) -> dict:
    return {"trace": path, "loop": True, "keysize": F.KEY_BYTES, "valuesize": 1016 if large else F.VALUE_BYTES,
            "valuesizes": "trace" if large else "fixed", "minvaluesize": 16, "recordcount": records,
            "keyspace": 2 * records, "keyorder": "big"}


def fig15(quick: bool, progress, *, jobs: int = 1, shared: SharedPoints | None = None, systems=None,
          trace_dir=None, **size) -> list[Row]:
    """Twitter-like traces: the clusters the paper names, as synthetic stand-ins. Published: FlexKV
    1.03-2.94x the second best; small gains on uniform (cluster 35) and large-KV (cluster 50)
    clusters, large on the skewed read-mostly cluster 1."""
    sizes = _sizes(quick, **size)
    present, rows = _present("fig15", systems)
    rows = _scale_rows("fig15", sizes) + rows
    n = sizes["records"]
    paths = make_traces(trace_dir or os.path.join(tempfile.gettempdir(), "dmrack-flexkv-traces"), n,
                        TRACE_ROWS[quick])
    specs = {}
    for label, name in present.items():
        for c, path in paths.items():
            t = _trace_table(path, n, large=CLUSTERS[c][2].startswith("lognormal"))
            specs[(label, c)] = _spec(name, sizes, c, tables=((c, F.freeze(t)),))
    got, fails = _run("fig15", specs, progress, jobs, shared)
    rows += fails
    for c, (alpha, reads, vs) in CLUSTERS.items():
        for label in present:
            rows.append(Row("fig15", label, f"{c} (alpha {alpha:g}, {reads:.0%} reads, values {vs})", "Mops",
                            F.value_of(got[(label, c)])))
    if "FlexKV" in present:
        gains = {}
        for c in CLUSTERS:
            vals = {label: F.value_of(got[(label, c)]) for label in present}
            gains[c] = F.ratio(vals["FlexKV"], _second(vals, "FlexKV"))
            rows.append(Row("fig15", "FlexKV / second best", c, "Mops ratio", gains[c]))
        vals = [g for g in gains.values() if g is not None]
        rows.append(Row("fig15", "FlexKV / second best, smallest over the clusters", "-", "Mops ratio",
                        min(vals) if vals else None, PUB_FIG15_GAIN[0]))
        rows.append(Row("fig15", "FlexKV / second best, largest over the clusters", "-", "Mops ratio",
                        max(vals) if vals else None, PUB_FIG15_GAIN[1]))
        big = max(gains, key=lambda c: gains[c] or 0) if vals else None
        rows.append(Row("fig15", f"largest gain on: {big} (paper: cluster 1)", "-", "note", None))
    return rows


# --- Fig. 21: KV size; Fig. 22: MN:CN; Fig. 23: CN memory -------------------------------------------------

def fig21(quick: bool, progress, *, jobs: int = 1, shared: SharedPoints | None = None, systems=None,
          **size) -> list[Row]:
    """KV pair size 128 -> 1024 B (YCSB B here). Published: every system falls and the gaps narrow
    (network bandwidth); FlexKV the highest throughout."""
    sizes = _sizes(quick, **size)
    present, rows = _present("fig21", systems)
    rows = _scale_rows("fig21", sizes) + rows
    specs = {}
    for label, name in present.items():
        for kv in KV_SIZES[quick]:
            if kv == F.KV_BYTES:
                specs[(label, kv)] = _spec(name, sizes, KV_SIZE_WORKLOAD)
                continue
            t = F.workload(KV_SIZE_WORKLOAD, sizes["records"])
            t["valuesize"] = kv - F.KEY_BYTES
            specs[(label, kv)] = _spec(name, sizes, f"kv-{kv}", tables=((f"kv-{kv}", F.freeze(t)),))
    got, fails = _run("fig21", specs, progress, jobs, shared)
    rows += fails
    mops = {k: F.value_of(p) for k, p in got.items()}
    for (label, kv), v in mops.items():
        rows.append(Row("fig21", f"{label}, YCSB {KV_SIZE_WORKLOAD}", kv, "Mops", v))
    _ordering_rows(rows, "fig21", present, mops, KV_SIZES[quick], lambda kv: f"{kv} B")
    if "FlexKV" in present:
        lo, hi = KV_SIZES[quick][0], KV_SIZES[quick][-1]
        g_lo = F.ratio(mops.get(("FlexKV", lo)), _second({k: mops.get((k, lo)) for k in present}, "FlexKV"))
        g_hi = F.ratio(mops.get(("FlexKV", hi)), _second({k: mops.get((k, hi)) for k in present}, "FlexKV"))
        rows.append(Row("fig21", f"gap narrows: FlexKV / best other at {hi} B over at {lo} B (published: below 1)",
                        "-", "ratio", F.ratio(g_hi, g_lo)))
    return rows


def fig22(quick: bool, progress, *, jobs: int = 1, shared: SharedPoints | None = None, systems=None,
          **size) -> list[Row]:
    """The rack's nodes split between memory and compute (the paper's 23: 3:20 -> 10:13; here 7).
    Published: FlexKV, Aceso and FUSEE rise then fall (more memory-node NICs, then fewer clients);
    Clover flat (its metadata server)."""
    sizes = _sizes(quick, **size)
    present, rows = _present("fig22", systems)
    rows = _scale_rows("fig22", sizes) + rows
    specs = {(label, split): _spec(name, sizes, "A", memory=split[0], compute=split[1])
             for label, name in present.items() for split in SPLITS[quick]}
    got, fails = _run("fig22", specs, progress, jobs, shared)
    rows += fails
    for (label, (m, c)), p in got.items():
        rows.append(Row("fig22", f"{label}, YCSB A", f"{m}:{c}", "Mops", F.value_of(p)))
    if "Clover" in present:
        ys = [F.value_of(got[("Clover", s)]) for s in SPLITS[quick]]
        ys = [y for y in ys if y]
        rows.append(Row("fig22", "Clover: largest / smallest over the splits (published: flat)", "-", "Mops ratio",
                        max(ys) / min(ys) if ys else None, 1.0))
    return rows


def fig23(quick: bool, progress, *, jobs: int = 1, shared: SharedPoints | None = None, systems=None,
          **size) -> list[Row]:
    """CN memory limit 0 -> 128 MB (scaled by the working set). Published: throughput grows with
    memory, mostly for reads; on YCSB A only FlexKV gains; FUSEE flat (it READs buckets even on
    address-cache hits)."""
    sizes = _sizes(quick, **size)
    present, rows = _present("fig23", systems)
    rows = _scale_rows("fig23", sizes) + rows
    mbs, ws = CN_MB[quick], CN_MB_WORKLOADS[quick]
    specs = {(label, w, mb): _spec(name, sizes, w, cn_mb=mb) for label, name in present.items()
             for w in ws for mb in mbs}
    got, fails = _run("fig23", specs, progress, jobs, shared)
    rows += fails
    for (label, w, mb), p in got.items():
        rows.append(Row("fig23", f"{label}, YCSB {w}", mb, "Mops", F.value_of(p)))
    for label in present:
        for w in ws:
            gain = F.ratio(F.value_of(got[(label, w, mbs[-1])]), F.value_of(got[(label, w, mbs[0])]))
            rows.append(Row("fig23", f"{label}: {mbs[-1]} MB / 0 MB", f"YCSB {w}", "Mops ratio", gain))
    return rows


PARTS = {"fig11": fig11, "fig12": fig12, "fig13": fig13, "fig14": fig14, "fig15": fig15, "fig21": fig21,
         "fig22": fig22, "fig23": fig23}


def _figures():
    from cluster.experiments.figures import Figure
    out = []
    for w in F.WORKLOADS:
        out.append(Figure(f"fig11{w.lower()}", "fig11", "Mops", f"Fig. 11: YCSB {w}, throughput vs clients",
                          "clients", "throughput (Mops)", xs="numeric",
                          series=tuple(f"{label}, YCSB {w}" for label in COMPARED)))
        out.append(Figure(f"fig12{w.lower()}", "fig12", "latency µs at percentile",
                          f"Fig. 12: YCSB {w}, latency at the most clients", "percentile", "latency (µs)",
                          xs="numeric", series=tuple(f"{label}, YCSB {w}" for label in COMPARED)))
    out += [
        Figure("fig13", "fig13", "Mops", "Fig. 13: UPDATE:SEARCH ratios", "UPDATE:SEARCH", "throughput (Mops)",
               xs="category", series=tuple(COMPARED)),
        Figure("fig21", "fig21", "Mops", f"Fig. 21: KV pair size (YCSB {KV_SIZE_WORKLOAD})", "KV pair (B)",
               "throughput (Mops)", xs="numeric", series=tuple(f"{label}, YCSB {KV_SIZE_WORKLOAD}" for label in COMPARED)),
        Figure("fig22", "fig22", "Mops", "Fig. 22: memory nodes : compute nodes (YCSB A)", "MN:CN",
               "throughput (Mops)", kind="bar", series=tuple(f"{label}, YCSB A" for label in COMPARED)),
        Figure("fig15", "fig15", "Mops", "Fig. 15: Twitter-like traces", "cluster", "throughput (Mops)", kind="bar",
               series=tuple(COMPARED)),
    ]
    for w in ("A", "B", "C", "D"):
        out.append(Figure(f"fig23{w.lower()}", "fig23", "Mops", f"Fig. 23: CN memory limit, YCSB {w}",
                          "CN memory (paper MB)", "throughput (Mops)", xs="numeric",
                          series=tuple(f"{label}, YCSB {w}" for label in COMPARED)))
    out.append(Figure("fig14", "fig14", "Mops", "Fig. 14: uniform YCSB", "workload", "throughput (Mops)", kind="bar",
                      series=tuple(f"{label}, uniform" for label in COMPARED)))
    return out


FIGURES = _figures()
