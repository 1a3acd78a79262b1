"""``dmrack reproduce flexkv``: FlexKV (Hu, Shen, Yang, §5) on a scaled-down co-located rack.

FlexKV proxies the hot partitions of a RACE index in the compute nodes (CNs): index operations on a
proxied partition go to the owner CN by RPC and commit with a LOCAL_CAS; the rest stay one-sided on
the memory nodes; CNs cache addresses and read-mostly KV pairs coherently; a manager ranks the
partitions by hotness (Algorithm 1) and tunes the share offloaded by hill climbing (Algorithm 2).
The system is ``nodes/systems/flexkv`` (``flexkv``); FlexKV-OP (every request forwarded to the
owner CN) is ``flexkv-op``, registered with it; Fig. 17 gives any series whose system is not
registered (a later baseline) a note row instead of points.

**Scale.** The paper runs 20 CNs x 10 clients x 8 coroutines and 3 memory nodes (56 Gb/s
ConnectX-3), 10 M KV pairs of 128 B and 64 MB per CN (about 5 % of the working set), with the
manager's period Δ = 1 s. Here: ``cx3-56g``, :data:`COMPUTE` CNs x :data:`THREADS` threads x
:data:`COROUTINES` coroutines and :data:`MEMORY` memory node (the paper's memory nodes' NICs are
the bottleneck FlexKV relieves, each taking every write of the 3-way replication and a third of
the reads from 200 client threads; one memory node for 32 client threads keeps it so: docs/flexkv.md),
:data:`RECORDS` KV pairs of 8-byte
keys and 120-byte values (128 B), Zipfian keys drawn from 10 M items hashed onto the loaded ones
(``zipfianitems``, so the hottest keys are as hot as in the paper), ``cn_memory_bytes`` the same
share of the working set as 64 MB of 10 M x 128 B (:func:`cn_memory_bytes`), and Δ =
:data:`INTERVAL_US` µs of virtual time (the paper's 1 s scaled by 1/1000, shorter with ``--quick``
so that the knob gets its rounds within the budget). Every point is one fresh rack (bulk load, a
warm-up step, a measured step); windows in :data:`WINDOWS_MS`.

Experiments (``--only``):

* ``fig3``: the verbs calibration of ``dmrack bench verbs --only flexkv-fig3`` (the same function);
* ``fig16``: the ablation Base -> +Proxy -> +Rank Hotness -> +KV Cache -> +Adaptive Split on
  YCSB A-D (:data:`ABLATION`), the average gain of each step;
* ``table1``: per workload with the knob on: the ratio it chose, KV-cache and address-cache hit
  ratios among SEARCHes and SEARCH latency by how it was served (measured window only);
* ``fig17``: FlexKV against FlexKV-OP per workload;
* ``fig19``: per-CN proxy load on YCSB A with Algorithm 1 on and off at the same fixed ratio;
* ``fig20``: proxy threads 1-4 on YCSB A-D, each at the ratio the paper's knob chose for it;
* ``fig24``: fixed offload ratios 0-100 % (knob off) on YCSB A-D;
* ``fig18``: YCSB B then YCSB A on one rack, throughput sampled :data:`SAMPLES_PER_INTERVAL`
  times per Δ, the manager's events, the ratios it settles on and its rounds' durations.

Points are shared between experiments (the full FlexKV on YCSB A is Fig. 16's last step, Table
1's row A, Fig. 17's FlexKV bar and Fig. 20's 2-thread point) and run once per run (the
run's :class:`~cluster.experiments.pointpool.SharedPoints`, which it hands to the parts as
``shared``). Each figure takes a dict of series (label -> registered system), so Clover, FUSEE
and Aceso (Figs. 11-15, 21-23) can join the same figures as more series later (:data:`SYSTEMS`,
:func:`system_options`).

Per-step client statistics: a co-located rack only hands its clients' statistics over at the
end, so :func:`_observing` wraps the rack's compute-node message handler for the length of one run
to copy every client's ``statistics()`` as each step begins (and, for Fig. 18, to count completed
operations every sample period): the measured window is the difference.
"""

from __future__ import annotations

import math
from contextlib import contextmanager

from cluster.experiments.figures import Figure
from cluster.experiments.pointpool import SharedPoints
from cluster.experiments.progress import prefixed
from cluster.experiments.rows import Row, renamed, scale_row

PROFILE = "cx3-56g"
COMPUTE = 4                     # compute nodes (the paper's 20)
MEMORY = 1                      # memory nodes (the paper's 3 for 20 CNs: see Scale)
THREADS = 8                     # client threads per compute node (the paper's 10 clients)
COROUTINES = 8                  # coroutines per thread (as the paper's)
PAPER_COMPUTE, PAPER_CLIENTS, PAPER_COROUTINES = 20, 10, 8
PAPER_KEYS = 10_000_000
PAPER_CN_BYTES = 64 << 20       # CN memory in the paper
KEY_BYTES, VALUE_BYTES = 8, 120  # 128-byte KV pairs
KV_BYTES = KEY_BYTES + VALUE_BYTES
RECORDS = {True: 20_000, False: 40_000}
#: the manager's period Δ in virtual µs (the paper's 1 s scaled by 1/1000; shorter with --quick so
#: the knob's rounds fit the budget of a quick run)
INTERVAL_US = {True: 500, False: 1000}
#: (warm-up, measured window) in virtual ms: a fixed ratio needs the first reassignment (at the
#: first interval) behind it; the knob about ten intervals per round
WINDOWS_MS = {True: {"fixed": (2.0, 1.5), "knob": (6.0, 1.5)},
              False: {"fixed": (2.0, 4.0), "knob": (12.0, 4.0)}}
#: Fig. 18: (YCSB B, then YCSB A) in virtual ms, and samples per interval (the paper: 10 ms of 1 s)
FIG18_MS = {True: (10.0, 10.0), False: (30.0, 30.0)}
SAMPLES_PER_INTERVAL = 2
PARTITIONS = 64
#: the latency CDF's points (Fig. 12): percentiles of the measured window's operations
CDF_PERCENTILES = (1, 5, 10, 25, 50, 75, 90, 95, 99, 99.9)

WORKLOADS = {"A": "a", "B": "b", "C": "c", "D": "d"}

#: series label -> registered system (Clover, FUSEE and Aceso go here when they exist)
SYSTEMS = {"FlexKV": "flexkv", "FlexKV-OP": "flexkv-op"}

#: Fig. 16: each step adds one technique to the previous one's options
ABLATION = {
    "Base": {"knob": False, "offload_ratio": 0.0, "kv_cache": False, "rank_hotness": False},
    "+Proxy": {"offload_ratio": 0.2},
    "+Rank Hotness": {"rank_hotness": True},
    "+KV Cache": {"kv_cache": True},
    "+Adaptive Split": {"knob": True},
}
FULL = {"knob": True, "kv_cache": True, "rank_hotness": True}      # FlexKV as evaluated
FIG19_RATIO = 0.6                  # Fig. 19: FlexKV on YCSB A, at the ratio it runs A with (Table 1: 60 %)
FIG20_THREADS = (1, 2, 3, 4)
FIG24_RATIOS = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)

# --- published values (FlexKV §5.2-§5.4: Figs. 16-20 and 24, Table 1) ------------------------------
PUB_FIG16 = {"+Proxy": 1.145, "+Rank Hotness": 1.119, "+KV Cache": 1.061, "+Adaptive Split": 1.152}
PUB_FIG17 = 1 - 0.249              # FlexKV-OP / FlexKV, on average
PUB_FIG18 = {"B": 0.3, "A": 0.6, "round_ms": (3.24, 5.26)}
PUB_FIG19 = {"cv": 1 - 0.427, "offloaded": 1.148}
PUB_FIG20 = {"peak": 2, "one": (0.718, 0.902)}
PUB_TABLE1 = {  # ratio, KV hit %, addr hit %, latency µs on a KV hit, an address hit, otherwise
    "A": (0.6, 0.1, 10.4, 2.3, 24.1, 54.1),
    "B": (0.3, 10.1, 24.1, 1.9, 23.6, 52.3),
    "C": (0.8, 18.9, 30.6, 2.2, 16.5, 42.8),
    "D": (0.5, 15.5, 31.3, 2.3, 23.3, 47.4),
}


def cn_memory_bytes(records: int) -> int:
    """Each CN's memory for cache and local index: the paper's 64 MB over its 10 M x 128 B working
    set (about 5 %), times this rack's working set."""
    return int(round(PAPER_CN_BYTES * records / PAPER_KEYS))


def system_options(system: str, options: dict, *, records: int, interval_us: int) -> dict:
    """The [system] table of ``system`` with the FlexKV ``options`` of a point: FlexKV and FlexKV-OP
    take them all; other systems (later: Clover, FUSEE, Aceso) would map the CN memory onto their
    own cache option here."""
    if system in ("flexkv", "flexkv-op"):
        return {"partitions": PARTITIONS, "cn_memory_bytes": cn_memory_bytes(records),
                "interval_us": interval_us, **options}
    return dict(options)


def workload(letter: str, records: int) -> dict:
    return {"preset": WORKLOADS[letter], "recordcount": records, "keysize": KEY_BYTES, "valuesize": VALUE_BYTES,
            "requestdistribution": "zipfian" if letter != "D" else "latest", "zipfianconstant": 0.99,
            "zipfianitems": PAPER_KEYS}


def scenario(system: str, options: dict, runs: list[tuple[str, float]], *, records: int, interval_us: int,
             compute: int | None = None, memory: int | None = None, threads: int | None = None,
             coroutines: int | None = None, seed: int = 1, tables: tuple | None = None,
             extra: tuple | None = None) -> dict:
    """A rack of ``system``: bulk load, then one run step per (workload, virtual ms) of ``runs``.
    A workload is a YCSB letter (:func:`workload`), or with ``tables`` (pairs of name, workload
    table: frozen, so a point's key holds it) one of those names. ``extra``: (table, key, value)
    triples merged into the rack's tables (a system's own needs, e.g. memory-node cores)."""
    compute, memory = compute or COMPUTE, memory or MEMORY
    threads, coroutines = threads or THREADS, coroutines or COROUTINES
    named = {n: dict(t) for n, t in tables} if tables else {}
    letters = list(dict.fromkeys(w for w, _ in runs))
    first = letters[0]

    def table(w):
        return named[w] if w in named else workload(w, records)
    doc = {
        "rack": {"name": "reproduce-flexkv", "profile": PROFILE, "seed": seed},
        "compute": {"count": compute, "threads": threads, "coroutines": coroutines, "memory": "64MiB"},
        "memory": {"count": memory, "memory": "256MiB"},
        "system": {"name": system, **system_options(system, options, records=records, interval_us=interval_us)},
        "workload": table(first),
        "workloads": {f"w-{w}": table(w) for w in letters[1:]},
        "step": [{"action": "load"}] + [{"action": "run", "workload": "default" if w == first else f"w-{w}",
                                          "duration_ms": ms} for w, ms in runs],
    }
    for tab, key, value in extra or ():
        doc.setdefault(tab, {})[key] = value
    return doc


# --- running one rack, with the clients' statistics per step --------------------------------------

@contextmanager
def _observing(on_start):
    """For the runs inside: ``on_start(node, step, at_ns)`` as each compute node is told to begin
    plan step ``step`` (it begins at ``at_ns``). Wraps ``cluster.wiring.compute_handler`` (restored
    on leaving); a co-located rack runs in this process, one at a time."""
    import cluster.wiring as wiring
    from shm.sim.router import MSG_START
    orig = wiring.compute_handler

    def handler(node):
        inner = orig(node)

        def on_message(src, payload):
            inner(src, payload)
            if payload[0] == MSG_START:           # not the DRAIN after the plan
                on_start(node, int(payload[1]), int(payload[2]))
        return on_message

    wiring.compute_handler = handler
    try:
        yield
    finally:
        wiring.compute_handler = orig


def _numeric(stats) -> dict:
    return {k: v for k, v in stats._asdict().items() if isinstance(v, (int, float))}


def measure(system: str, options: dict, runs: list[tuple[str, float]], *, sample_ns: int | None = None,
            **kw) -> dict:
    """Run :func:`scenario` co-located. Returns, for the last run step (the measured window):
    ``mops``, ``p50_us``, ``p99_us``, ``ops``; ``window``: the clients' numeric statistics summed over
    the rack, differences over the window; ``nodes``: per compute node the window's node-wide
    fields (thread 0's record); ``events``: the manager's events over the whole run; with
    ``sample_ns``, ``series``: [(virtual ns, operations completed so far)] over every run step."""
    from cluster.rack import ColocatedRack
    from cluster.scenario import scenario_from_dict
    doc = scenario(system, options, runs, **kw)
    measured = len(runs)                                  # plan index of the last run step
    at_start: dict = {}
    begins: dict = {}
    samples: dict = {}

    def snapshot(node, step):
        at_start[(node.name, step)] = [_numeric(c.statistics()) for c in node.clients]

    def sample(node, t):
        samples[t] = samples.get(t, 0) + node.ops

    def on_start(node, step, at_ns):
        begins.setdefault(step, at_ns)
        node.env.schedule(at_ns, snapshot, node, step)
        plan = node.plan[step]
        if sample_ns and plan.action == "run":
            for k in range(int(plan.duration_ns // sample_ns) + 1):
                node.env.schedule(at_ns + k * sample_ns, sample, node, at_ns + k * sample_ns)

    rack = ColocatedRack(scenario_from_dict(doc, source="reproduce flexkv"))
    with _observing(on_start):
        res = rack.run()
    step = next(s for s in res.steps if s.index == measured + 1)
    every = next(kf for kf in step.kinds if kf.kind == "all")
    window_ms = runs[-1][1]
    window: dict = {}
    nodes = []
    events = []
    for node in rack.nodes:
        end = [c.statistics() for c in node.clients]
        for e in end:
            events.extend(getattr(e, "manager_events", None) or ())     # FlexKV's manager
        end = [_numeric(e) for e in end]
        start = at_start.get((node.name, measured), [{k: 0 for k in e} for e in end])
        for e, s in zip(end, start):
            for k, v in e.items():
                window[k] = window.get(k, 0) + v - s.get(k, 0)
        if "node_offloaded" in end[0]:                                  # FlexKV's node-wide fields
            nodes.append({k: end[0][k] - start[0].get(k, 0) for k in end[0] if k.startswith("node_")}
                         | {"offloaded_now": end[0]["node_offloaded"], "proxied_ops":
                            sum(e["proxied_ops"] - s.get("proxied_ops", 0) for e, s in zip(end, start))})
    lat = step.latency
    cdf = [(q, lat.percentile(q) / 1e3) for q in CDF_PERCENTILES] if lat is not None and lat.count else []
    return {"mops": step.ops / (window_ms * 1e3), "p50_us": every.p50_us, "p99_us": every.p99_us,
            "cdf": cdf,
            "ops": step.ops, "window": window, "nodes": nodes, "events": sorted(events, key=lambda e: e[0]),
            "series": sorted(samples.items()) if sample_ns else None,
            "begins": [begins.get(i) for i in range(measured + 2)], "end_ns": res.meta.get("virtual_ns")}


def _run_point(key: tuple, system: str, options: dict, runs: list, kw: dict, sample_ns) -> dict:
    """:func:`measure`, or ``{"error": one line}`` when the rack fails (an RPC that never gets a
    reply, say): the point's rows are then blank and a note row names the error, and the other
    points still run."""
    try:
        return measure(system, options, runs, sample_ns=sample_ns, **kw)
    except Exception as e:                                   # noqa: BLE001 - reported as a row
        msg = " ".join(str(e).split()) or type(e).__name__
        return {"error": f"{type(e).__name__}: {msg}"[:300]}


# --- the shared points ----------------------------------------------------------------------------

def _sizes(quick: bool, records=None, interval_us=None, windows=None, compute=None, threads=None,
           coroutines=None) -> dict:
    return {"records": records or RECORDS[quick], "interval_us": interval_us or INTERVAL_US[quick],
            "windows": windows or WINDOWS_MS[quick], "compute": compute or COMPUTE,
            "memory": MEMORY if (compute or COMPUTE) == COMPUTE else min(MEMORY, compute),
            "threads": threads or THREADS, "coroutines": coroutines or COROUTINES}


def freeze(d: dict) -> tuple:
    return tuple(sorted(d.items()))


def _spec(system: str, options: dict, letter: str, sizes: dict) -> tuple:
    """A point: (key, system, options, runs, rack sizes, None)."""
    knob = options.get("knob", True)
    if knob:
        # the knob starts from 0 whatever offload_ratio says: one point for Fig. 16's last step,
        # Table 1, Fig. 17 and Fig. 20's 2 threads
        options = {k: v for k, v in options.items() if k != "offload_ratio"}
    warm, win = sizes["windows"]["knob" if knob else "fixed"]
    kw = {k: v for k, v in sizes.items() if k != "windows"}
    runs = [(letter, warm), (letter, win)]
    key = (system, freeze(options), letter, freeze(kw), warm, win)
    return (key, system, options, runs, kw, None)


def points(specs: list[tuple], progress, jobs: int, shared: SharedPoints | None) -> list[dict]:
    """The results of ``specs`` (from :func:`_spec`), running those this run (``shared``) has not
    run yet (knob points first: they are the longest)."""
    by_key: dict = {}
    for s in specs:
        by_key.setdefault(s[0], s)
    return (shared if shared is not None else SharedPoints()).measure(
        _run_point, [s[0] for s in specs], args=by_key.__getitem__, jobs=jobs, progress=progress,
        describe=_describe, order=lambda k: -sum(ms for _, ms in by_key[k][3]))


def _describe(p: tuple) -> str:
    key, system, options, runs = p[:4]
    opts = ", ".join(f"{k}={v}" for k, v in sorted(options.items()))
    return f"{system} YCSB {'+'.join(dict.fromkeys(w for w, _ in runs))} ({opts})"


def failure_rows(exp: str, specs: list[tuple], got: list[dict]) -> list[Row]:
    """A note row per failed point (its emulated rows are blank)."""
    return [Row(exp, f"point failed: {_describe(s)}: {p['error']}", "-", "note", None)
            for s, p in zip(specs, got) if "error" in p]


def value_of(p: dict, field: str = "mops"):
    return None if "error" in p else p[field]


def _grid(exp: str, keys, spec_of, sizes: dict, progress, jobs: int,
          shared: SharedPoints | None) -> tuple[dict, list[Row]]:
    """Run the point ``spec_of(key, letter)`` of every key x YCSB workload: Mops per (key, letter)
    (None for a failed point), and the experiment's first rows (the scale, a note per failure)."""
    grid = [(k, w) for k in keys for w in WORKLOADS]
    specs = [spec_of(k, w) for k, w in grid]
    res = points(specs, prefixed(progress, f"{exp}: "), jobs, shared)
    return ({kw: value_of(p) for kw, p in zip(grid, res)},
            _scale_rows(exp, sizes) + failure_rows(exp, specs, res))


def ablation_options() -> dict[str, dict]:
    """Fig. 16's steps, each with all the options of the steps before it."""
    out, cur = {}, {}
    for name, add in ABLATION.items():
        cur = {**cur, **add}
        out[name] = dict(cur)
    return out


def full_options(**extra) -> dict:
    return {**FULL, **extra}


def _scale_rows(exp: str, sizes: dict) -> list[Row]:
    """The run's setup beside the paper's: scale rows (no verdict, rows.KINDS)."""
    n = sizes["records"]
    return [scale_row(exp, f"scale: {n:,} KV pairs / 10 M", "-", "1 / scale", PAPER_KEYS / n),
            scale_row(exp, f"rack: {sizes['compute']} CNs x {sizes['threads']} threads x {sizes['coroutines']} "
                           f"coroutines (paper: 20 x 10 x 8)", "-", "clients", sizes["compute"] * sizes["threads"],
                      PAPER_COMPUTE * PAPER_CLIENTS),
            scale_row(exp, "CN memory (paper 64 MB, same share of the working set)", "-", "KB",
                      cn_memory_bytes(n) / 1024),
            scale_row(exp, "manager interval Δ (paper 1 s)", "-", "virtual µs", sizes["interval_us"])]


def ratio(a, b):
    return a / b if a and b else None


def mean(xs):
    xs = [x for x in xs if x is not None]
    return sum(xs) / len(xs) if xs else None


# --- Fig. 3 ---------------------------------------------------------------------------------------

def fig3(quick: bool, progress) -> list[Row]:
    """The verbs of FlexKV Fig. 3 (``dmrack bench verbs --only flexkv-fig3``, the same function)."""
    from cluster.experiments.bench_verbs import flexkv_fig3
    return renamed(flexkv_fig3(quick, progress), "fig3")


# --- Fig. 16: ablation ------------------------------------------------------------------------------

def fig16(quick: bool, progress, *, jobs: int = 1, shared: SharedPoints | None = None,
          system: str = "flexkv", **size) -> list[Row]:
    """Base -> +Proxy -> +Rank Hotness -> +KV Cache -> +Adaptive Split on YCSB A-D. Published average
    gains per step +14.5 %, +11.9 %, +6.1 %, +15.2 %."""
    sizes = _sizes(quick, **size)
    steps = ablation_options()
    mops, rows = _grid("fig16", steps, lambda s, w: _spec(system, steps[s], w, sizes), sizes, progress, jobs,
                       shared)
    for s in steps:
        for w in WORKLOADS:
            rows.append(Row("fig16", s, f"YCSB {w}", "Mops", mops[(s, w)]))
    names = list(steps)
    for prev, s in zip(names, names[1:]):
        gains = [ratio(mops[(s, w)], mops[(prev, w)]) for w in WORKLOADS]
        for w, g in zip(WORKLOADS, gains):
            rows.append(Row("fig16", f"{s} / {prev}", f"YCSB {w}", "Mops ratio", g))
        rows.append(Row("fig16", f"{s} / {prev}", "mean of A-D", "Mops ratio", mean(gains), PUB_FIG16[s]))
    total = [ratio(mops[(names[-1], w)], mops[(names[0], w)]) for w in WORKLOADS]
    rows.append(Row("fig16", f"{names[-1]} / {names[0]}", "mean of A-D", "Mops ratio", mean(total),
                    math.prod(PUB_FIG16.values())))
    return rows


# --- Table 1 ---------------------------------------------------------------------------------------

def chosen_ratio(events, start_ns: int, end_ns: int) -> tuple[float | None, float | None]:
    """(the ratio the map held on average over [start, end), from the reassignment events; the
    ratio of the knob's last "settled" event before ``end_ns``)."""
    applied = [(t, r) for t, kind, r, _ in events if kind == "reassign"]
    settled = [r for t, kind, r, _ in events if kind == "settled" and t < end_ns]
    cur, total, weight = None, 0.0, 0
    t_prev = start_ns
    for t, r in applied:
        if t <= start_ns:
            cur = r
            continue
        if t >= end_ns:
            break
        if cur is not None:
            total += cur * (t - t_prev)
            weight += t - t_prev
        cur, t_prev = r, t
    if cur is not None:
        total += cur * (end_ns - t_prev)
        weight += end_ns - t_prev
    return (total / weight if weight else None), (settled[-1] if settled else None)


def _window_bounds(p: dict, runs: list) -> tuple[int, int]:
    """Virtual ns of the measured window (the last step's begin, plus its duration)."""
    start = p["begins"][len(runs)]
    return start, start + int(runs[-1][1] * 1e6)


TABLE1_ROWS = (("offload ratio, knob's last settled", "ratio"), ("KV-cache hits / SEARCHes", "%"),
               ("address-cache hits / SEARCHes", "%"), ("SEARCH latency, KV-cache hit", "µs"),
               ("SEARCH latency, address-cache hit", "µs"), ("SEARCH latency, otherwise", "µs"))


def table1(quick: bool, progress, *, jobs: int = 1, shared: SharedPoints | None = None,
           system: str = "flexkv", **size) -> list[Row]:
    """Per workload, knob on: the offload ratio chosen, KV-cache and address-cache hit ratios
    among SEARCHes, SEARCH latency on a KV hit, an address hit and otherwise (measured window)."""
    sizes = _sizes(quick, **size)
    specs = [_spec(system, full_options(), w, sizes) for w in WORKLOADS]
    got = points(specs, prefixed(progress, "table1: "), jobs, shared)
    rows = _scale_rows("table1", sizes) + failure_rows("table1", specs, got)
    for w, spec, p in zip(WORKLOADS, specs, got):
        pub = PUB_TABLE1[w]
        x = f"YCSB {w}"
        if "error" in p:
            rows += [Row("table1", name, x, unit, None, v) for (name, unit), v in zip(TABLE1_ROWS, pub)]
            continue
        s = p["window"]
        mean_ratio, settled = chosen_ratio(p["events"], *_window_bounds(p, spec[3]))
        gets = s["gets"]
        rows += [
            Row("table1", "offload ratio, knob's last settled", x, "ratio", settled, pub[0]),
            Row("table1", "offload ratio held over the window (mean)", x, "ratio", mean_ratio),
            Row("table1", "KV-cache hits / SEARCHes", x, "%", 100 * s["pair_hits"] / gets if gets else None, pub[1]),
            Row("table1", "address-cache hits / SEARCHes", x, "%", 100 * s["addr_hits"] / gets if gets else None,
                pub[2]),
            Row("table1", "SEARCH latency, KV-cache hit", x, "µs",
                s["get_pair_ns"] / s["pair_hits"] / 1e3 if s["pair_hits"] else None, pub[3]),
            Row("table1", "SEARCH latency, address-cache hit", x, "µs",
                s["get_addr_ns"] / s["addr_hits"] / 1e3 if s["addr_hits"] else None, pub[4]),
            Row("table1", "SEARCH latency, otherwise", x, "µs",
                s["get_other_ns"] / s["get_other"] / 1e3 if s["get_other"] else None, pub[5]),
            Row("table1", "FlexKV", x, "Mops", p["mops"]),
        ]
    return rows


# --- Fig. 17: FlexKV-OP --------------------------------------------------------------------------------

def fig17(quick: bool, progress, *, jobs: int = 1, shared: SharedPoints | None = None,
          systems: dict | None = None, **size) -> list[Row]:
    """FlexKV against FlexKV-OP (ownership partitioning) per workload. Published: OP -24.9 % on
    average. A series whose system is not registered gets a note row and no points."""
    from nodes.systems import is_known
    sysmap = {**SYSTEMS, **(systems or {})}
    sizes = _sizes(quick, **size)
    rows = _scale_rows("fig17", sizes)
    present = {label: name for label, name in sysmap.items() if is_known(name)}
    for label, name in sysmap.items():
        if label not in present:
            rows.append(Row("fig17", f"{label}: system {name!r} is not registered, skipped", "-", "Mops", None))
    specs = {label: [_spec(name, full_options(), w, sizes) for w in WORKLOADS] for label, name in present.items()}
    flat = [s for ss in specs.values() for s in ss]
    res = points(flat, prefixed(progress, "fig17: "), jobs, shared)
    rows += failure_rows("fig17", flat, res)
    got = iter(res)
    mops = {(label, w): value_of(next(got)) for label in specs for w in WORKLOADS}
    for label in specs:
        for w in WORKLOADS:
            rows.append(Row("fig17", label, f"YCSB {w}", "Mops", mops[(label, w)]))
    if "FlexKV" in specs and "FlexKV-OP" in specs:
        r = [ratio(mops[("FlexKV-OP", w)], mops[("FlexKV", w)]) for w in WORKLOADS]
        for w, v in zip(WORKLOADS, r):
            rows.append(Row("fig17", "FlexKV-OP / FlexKV", f"YCSB {w}", "Mops ratio", v))
        rows.append(Row("fig17", "FlexKV-OP / FlexKV", "mean of A-D", "Mops ratio", mean(r), PUB_FIG17))
    else:
        rows.append(Row("fig17", "FlexKV-OP / FlexKV", "mean of A-D", "Mops ratio", None, PUB_FIG17))
    return rows


# --- Fig. 19: load balance --------------------------------------------------------------------------------

def _cv(xs: list[float]) -> float | None:
    if not xs or not sum(xs):
        return None
    m = sum(xs) / len(xs)
    return math.sqrt(sum((x - m) ** 2 for x in xs) / len(xs)) / m


def fig19(quick: bool, progress, *, jobs: int = 1, shared: SharedPoints | None = None,
          system: str = "flexkv", **size) -> list[Row]:
    """FlexKV on YCSB A at the ratio it runs A with (:data:`FIG19_RATIO`, knob off so both cases
    offload the same share): each CN's proxy load (read RPCs served + writes committed) with
    Algorithm 1 off (each CN offloads the first partitions of its static list) and on; its
    coefficient of variation (published -42.7 % with Algorithm 1) and the index operations
    offloaded (+14.8 %)."""
    sizes = _sizes(quick, **size)
    fixed = full_options(knob=False, offload_ratio=FIG19_RATIO)
    cases = {"without Alg. 1": {**fixed, "rank_hotness": False}, "with Alg. 1": fixed}
    specs = [_spec(system, opts, "A", sizes) for opts in cases.values()]
    res = points(specs, prefixed(progress, "fig19: "), jobs, shared)
    got = dict(zip(cases, res))
    rows = _scale_rows("fig19", sizes) + failure_rows("fig19", specs, res)
    cv, offl = {}, {}
    for case, p in got.items():
        if "error" in p:
            cv[case] = offl[case] = None
            continue
        loads = [n["node_proxy_reads"] + n["node_proxy_commits"] for n in p["nodes"]]
        for i, load in enumerate(loads):
            rows.append(Row("fig19", case, f"CN {i}", "proxy ops (window)", load))
        cv[case] = _cv(loads)
        offl[case] = p["window"]["proxied_ops"]
        rows.append(Row("fig19", case, "all CNs", "coefficient of variation", cv[case]))
        rows.append(Row("fig19", case, "all CNs", "index ops offloaded (window)", offl[case]))
        rows.append(Row("fig19", case, "all CNs", "share of ops offloaded",
                        offl[case] / p["ops"] if p["ops"] else None))
    rows.append(Row("fig19", "with / without Alg. 1", "all CNs", "CV ratio",
                    ratio(cv["with Alg. 1"], cv["without Alg. 1"]), PUB_FIG19["cv"]))
    rows.append(Row("fig19", "with / without Alg. 1", "all CNs", "offloaded ops ratio",
                    ratio(offl["with Alg. 1"], offl["without Alg. 1"]), PUB_FIG19["offloaded"]))
    return rows


# --- Fig. 20: proxy threads ---------------------------------------------------------------------------

def fig20(quick: bool, progress, *, jobs: int = 1, shared: SharedPoints | None = None, system: str = "flexkv",
          threads_list=FIG20_THREADS, **size) -> list[Row]:
    """FlexKV with 1-4 proxy threads per CN on YCSB A-D, each workload at the ratio the paper's
    knob chose for it (Table 1) with the knob off: the knob's own noise (which ratio it settles on
    within a few short samples) would otherwise decide more than the thread count does. Published:
    the peak at 2 threads; 1 thread reaches 71.8-90.2 % of the peak."""
    sizes = _sizes(quick, **size)
    threads_list = [t for t in threads_list if t <= sizes["threads"]]
    mops, rows = _grid("fig20", threads_list, lambda t, w: _spec(
        system, full_options(proxy_threads=t, knob=False, offload_ratio=PUB_TABLE1[w][0]), w, sizes),
        sizes, progress, jobs, shared)
    ones = []
    for w in WORKLOADS:
        for t in threads_list:
            rows.append(Row("fig20", f"YCSB {w}", t, "Mops", mops[(t, w)]))
        best = max(threads_list, key=lambda t: mops[(t, w)] or 0)
        rows.append(Row("fig20", f"YCSB {w}", "peak", "proxy threads at peak", best, PUB_FIG20["peak"]))
        if 1 in threads_list and mops[(best, w)]:
            one = ratio(mops[(1, w)], mops[(best, w)])
            ones.append(one)
            rows.append(Row("fig20", f"YCSB {w}: 1 thread / peak", 1, "Mops ratio", one))
    ones = [o for o in ones if o is not None]
    lo, hi = PUB_FIG20["one"]
    rows.append(Row("fig20", "1 thread / peak, min over A-D", 1, "Mops ratio", min(ones) if ones else None, lo))
    rows.append(Row("fig20", "1 thread / peak, max over A-D", 1, "Mops ratio", max(ones) if ones else None, hi))
    return rows


# --- Fig. 24: fixed offload ratios -------------------------------------------------------------------

def fig24(quick: bool, progress, *, jobs: int = 1, shared: SharedPoints | None = None, system: str = "flexkv",
          ratios=FIG24_RATIOS, **size) -> list[Row]:
    """Knob off, fixed offload ratios 0-100 % on YCSB A-D (Algorithm 1 and the KV cache on).
    Published: roughly unimodal; 0 % and 100 % both below the best."""
    sizes = _sizes(quick, **size)
    mops, rows = _grid("fig24", ratios, lambda r, w: _spec(system, full_options(knob=False, offload_ratio=r), w, sizes),
                       sizes, progress, jobs, shared)
    for w in WORKLOADS:
        for r in ratios:
            rows.append(Row("fig24", f"YCSB {w}", f"{r:.0%}", "Mops", mops[(r, w)]))
        best = max(ratios, key=lambda r: mops[(r, w)] or 0)
        rows.append(Row("fig24", f"YCSB {w}", "best", "best fixed ratio", best, PUB_TABLE1[w][0]))
        for edge in (ratios[0], ratios[-1]):
            rows.append(Row("fig24", f"YCSB {w}: {edge:.0%} / best", f"{edge:.0%}",
                            "Mops ratio (published: < 1)", ratio(mops[(edge, w)], mops[(best, w)])))
        inner = [mops[(r, w)] for r in ratios]
        rows.append(Row("fig24", f"YCSB {w}", "all", "local maxima (published: 1, unimodal)",
                        sum(1 for i, m in enumerate(inner)
                            if m is not None and all(m >= (inner[j] or 0) for j in (i - 1, i + 1)
                                                     if 0 <= j < len(inner)))))
    return rows


# --- Fig. 18: dynamic workload -------------------------------------------------------------------------

def fig18(quick: bool, progress, *, shared: SharedPoints | None = None, system: str = "flexkv", phases_ms=None,
          options: dict | None = None, **size) -> list[Row]:
    """YCSB B, then YCSB A, on one rack with the full FlexKV: throughput over time (sampled
    SAMPLES_PER_INTERVAL times per Δ), the offload ratio the map holds, the manager's events, the
    ratios the knob settles on in B (published 30 %) and A (60 %) and its rounds' durations
    (published 3.24-5.26 ms at 20 CNs with Δ = 1 s). ``options``: system options over the full
    FlexKV's (to try one, e.g. more proxy threads)."""
    sizes = _sizes(quick, **size)
    b_ms, a_ms = phases_ms or FIG18_MS[quick]
    kw = {k: v for k, v in sizes.items() if k != "windows"}
    interval_ns = sizes["interval_us"] * 1000
    sample_ns = max(1000, interval_ns // SAMPLES_PER_INTERVAL)
    runs = [("B", b_ms), ("A", a_ms)]
    opts = full_options(**(options or {}))
    key = (system, "fig18", freeze(opts), tuple(runs), freeze(kw), sample_ns)
    spec = (key, system, opts, runs, kw, sample_ns)
    p = points([spec], prefixed(progress, "fig18: "), 1, shared)[0]
    rows = _scale_rows("fig18", sizes) + failure_rows("fig18", [spec], [p])
    if "error" in p:
        return rows
    series = p["series"]
    # samples closer than half a period (the last of one step, the first of the next) are merged
    kept = [series[0]] if series else []
    for t, n in series[1:]:
        if t - kept[-1][0] >= sample_ns // 2:
            kept.append((t, n))
    for (t0, n0), (t1, n1) in zip(kept, kept[1:]):
        if t1 > t0:
            rows.append(Row("fig18", "FlexKV, YCSB B then A", round(t1 / 1e6, 3), "Mops", (n1 - n0) / (t1 - t0) * 1e3))
    events = p["events"]
    for t, kind, r, value in events:
        if kind == "reassign":
            rows.append(Row("fig18", "offload ratio held", round(t / 1e6, 3), "ratio", r))
    for t, kind, r, value in events:
        rows.append(Row("fig18", f"manager: {kind}", round(t / 1e6, 3), "event ratio", r))
    b0, switch = p["begins"][1], p["begins"][2]
    end = switch + int(a_ms * 1e6)
    for phase, (lo, hi) in (("B", (b0, switch)), ("A", (switch, end))):
        mean_ratio, _ = chosen_ratio(events, lo + (hi - lo) // 2, hi)
        settled = [r for t, kind, r, _ in events if kind == "settled" and lo <= t < hi]
        rows.append(Row("fig18", f"YCSB {phase}: knob's last settled ratio", "phase", "ratio",
                        settled[-1] if settled else None, PUB_FIG18[phase]))
        rows.append(Row("fig18", f"YCSB {phase}: ratio held, second half of the phase (mean)", "phase", "ratio",
                        mean_ratio))
        n = [(t, c) for t, c in series if lo <= t <= hi]
        rows.append(Row("fig18", f"YCSB {phase}: throughput over the phase", "phase", "Mops",
                        (n[-1][1] - n[0][1]) / (n[-1][0] - n[0][0]) * 1e3 if len(n) > 1 and n[-1][0] > n[0][0] else None))
        rows.append(Row("fig18", f"YCSB {phase}: knob settle events", "phase", "count", len(settled)))
    rounds = [v / 1e6 for t, kind, r, v in events if kind == "reassign"]
    lo, hi = PUB_FIG18["round_ms"]
    rows.append(Row("fig18", "reassignment round, min", "all", "ms (virtual)", min(rounds) if rounds else None, lo))
    rows.append(Row("fig18", "reassignment round, max", "all", "ms (virtual)", max(rounds) if rounds else None, hi))
    rows.append(Row("fig18", "reassignment rounds", "all", "count", len(rounds)))
    rows.append(Row("fig18", "reassignment rounds, total / run", "all", "share of virtual time",
                    sum(rounds) / (b_ms + a_ms) if rounds else 0.0))
    return rows


# --- the paper's figures (cluster.experiments.figures) ---------------------------------------------

FIGURES = [
    Figure("fig16", "fig16", "Mops", "Fig. 16: ablation on YCSB A-D (Zipfian 0.99)", "workload",
           "throughput (Mops)", kind="bar", series=tuple(ABLATION)),
    Figure("fig17", "fig17", "Mops", "Fig. 17: FlexKV vs FlexKV-OP", "workload", "throughput (Mops)", kind="bar",
           series=("FlexKV", "FlexKV-OP")),
    Figure("fig18", "fig18", ("Mops", "ratio"), "Fig. 18: YCSB B, then YCSB A (virtual ms)", "virtual time (ms)",
           ("throughput (Mops)", "offload ratio held"), xs="numeric",
           series=("FlexKV, YCSB B then A", "offload ratio held")),
    Figure("fig19", "fig19", "proxy ops (window)", "Fig. 19: proxy load per CN, YCSB A", "compute node",
           "proxy operations in the window", kind="bar", series=("without Alg. 1", "with Alg. 1")),
    Figure("fig20", "fig20", "Mops", "Fig. 20: proxy threads per CN", "proxy threads", "throughput (Mops)",
           xs="numeric", series=tuple(f"YCSB {w}" for w in WORKLOADS)),
    Figure("fig24", "fig24", "Mops", "Fig. 24: fixed offload ratio (knob off)", "offload ratio",
           "throughput (Mops)", series=tuple(f"YCSB {w}" for w in WORKLOADS)),
]


def setup(quick: bool) -> dict:
    """The racks of this reproduction, for the run record (cluster.experiments.provenance)."""
    n = RECORDS[quick]
    fixed, knob = WINDOWS_MS[quick]["fixed"], WINDOWS_MS[quick]["knob"]
    return {"profile": PROFILE, "seed": 1,
            "spec": f"co-located racks: {COMPUTE} compute nodes x {THREADS} threads x {COROUTINES} coroutines, "
                    f"{MEMORY} memory nodes; {PARTITIONS} partitions; systems "
                    f"{', '.join(f'{k}={v}' for k, v in SYSTEMS.items())}",
            "scale": f"{n:,} KV pairs of {KV_BYTES} B (paper: 10 M), Zipfian 0.99 over 10 M items hashed onto them; "
                     f"{COMPUTE} CNs x {THREADS} x {COROUTINES} = {COMPUTE * THREADS * COROUTINES} coroutines "
                     f"(paper: 20 x 10 x 8 = 1600); CN memory {cn_memory_bytes(n) / 1024:.0f} KB (64 MB x {n:,} / 10 M, "
                     f"~5 % of the working set); manager interval {INTERVAL_US[quick]} µs virtual (paper: 1 s); "
                     f"windows (virtual ms, warm-up + measured): fixed ratio {fixed[0]:g} + {fixed[1]:g}, knob "
                     f"{knob[0]:g} + {knob[1]:g}; Fig. 18: B {FIG18_MS[quick][0]:g} ms then A {FIG18_MS[quick][1]:g} ms"}
