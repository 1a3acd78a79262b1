"""``dmrack bench ycsb --system NAME``: YCSB A, B and C by client-thread count, beside SMART §6.2.1.

The setup follows SMART's hash-table evaluation: one compute node and two memory nodes on the
``cx6-200g`` profile, 8-byte keys and values, zipfian 0.99 keys, 8 coroutines per thread (SMART's
default concurrency depth), QPs per thread (the RACE baseline's policy). SMART loads 100 M keys;
the bench loads far fewer (the emulator holds every byte in this machine's RAM and loads at
emulation speed) but draws them with SMART's popularity (``SMART_KEYS``: a zipfian over 100 M
items hashed onto the keys loaded), so the hot keys are as hot as in the paper.

One co-located rack (deterministic) serves every point of a workload: it loads once (with one
thread), then for each thread count, in increasing order, a ``set threads`` step, a warm-up run
and the measured run, so each measured step starts from a warm table and a steady pipeline. YCSB
A warms up for milliseconds (``CONTENDED_MS``: hot-key updates pile up that long), B and C for a
fraction of one.
Increasing order matters: in the NIC model a thread that has posted once stays a sharer of its
doorbell (see docs/bench.md). Modelled Mops and p50/p99 latency
come from the measured step's record in the stats plane; the emulation speed (virtual time and
verbs per real second) from the whole run.

Published figures (SMART ASPLOS'24 §6.2.1, Fig. 7a–c, RACE): write-heavy (50% update) peaks at
2.8 Mops with 8 threads and declines beyond; read-heavy and read-only stay below 11.4 Mops.
"""

from __future__ import annotations

import time

from cluster.experiments.figures import Figure
from cluster.experiments.registry import Experiment
from cluster.experiments.rows import Row, bound_row, run_experiments

WORKLOADS = {"a": "write-heavy (A: 50% update)", "b": "read-heavy (B: 5% update)", "c": "read-only (C)"}
THREADS_FULL = (1, 2, 4, 8, 16, 24, 32, 48, 64, 96)
THREADS_QUICK = (1, 4, 8, 16, 32, 64, 96)
PUBLISHED_A_PEAK = (8, 2.8)             # threads, Mops
PUBLISHED_READ_CEILING = 11.4           # Mops: read-heavy and read-only stay under it

# SMART's bench draws zipfian keys from its 100 M keys (MICA's zipf, then FNV), not from YCSB's
# 10^10 items: its hottest keys are 1.27x as popular (4.8 % vs 3.8 %), whatever the records loaded.
SMART_KEYS = {"zipfianitems": 100_000_000}

# (warm-up, window) in virtual ms by quick, for workloads with skewed updates (100 % or 50 %):
# hot-key updates pile up over milliseconds (docs/smart.md, "Contended updates need a long
# warm-up"). Measured with one-millisecond steps: RACE update-only at 16 threads settles within
# ~5 ms, SMART-HT without conflict avoidance at 96 threads within ~10 ms, RACE update-only at 96
# threads falls from 2.3 to 0.45 Mops over its first ~17 ms (quick mode's 8 ms leave it at ~0.55).
CONTENDED_MS = {True: (8.0, 2.0), False: (20.0, 5.0)}
# the same for read-heavy and read-only runs, which settle within a fraction of a millisecond
UNCONTENDED_MS = {True: (0.2, 0.5), False: (0.3, 2.0)}


def scenario_dict(system: str, workload: str, threads: tuple[int, ...], *, records: int, warm_ms: float,
                  measure_ms: float, coroutines: int = 8, seed: int = 1, properties: dict | None = None,
                  options: dict | None = None, qp_policy: str = "per_thread_qp", smart: dict | None = None,
                  memory_nodes: int = 2, compute_nodes: int = 1) -> dict:
    """The bench's rack and steps as a scenario document (what a user would write in TOML).

    The compute node makes its QPs as SMART's framework does (``compute.connect =
    "by_memory_node"``): at start, memory node by memory node, one per thread of the rack
    (``ResourceManager::connect(node, ..., max_threads)``, which the hash table, the B+-tree and
    the transactions of SMART's artifact all call), so the context's four low-latency doorbells
    go to threads 0-3's QPs to mn0. With a doorbell per thread the order changes nothing.
    ``compute_nodes``: that many compute nodes, each running every step's thread count (SMART's
    scale-out, Fig. 7(d)-(f))."""
    # Load with one thread: a thread that has posted stays a sharer of its doorbell in the NIC
    # model, so loading with all threads would slow every later, smaller thread count. Keys go
    # in by inserts (bulk = false), as SMART's artifact loads them, so the warm state (caches,
    # the NIC model's sharers) is the one the figures were calibrated on.
    steps = [{"action": "set", "knob": "threads", "value": 1}, {"action": "load", "bulk": False}]
    for t in sorted(threads):
        steps += [{"action": "set", "knob": "threads", "value": t},
                  {"action": "run", "duration_ms": warm_ms},
                  {"action": "run", "duration_ms": measure_ms}]
    doc = {
        "rack": {"name": f"bench-ycsb-{system}-{workload}", "profile": "cx6-200g", "seed": seed},
        "compute": {"count": compute_nodes, "threads": max(threads), "coroutines": coroutines, "memory": "64MiB",
                    "qp_policy": qp_policy,
                    "connect": "on_first_post" if qp_policy == "per_thread_doorbell" else "by_memory_node"},
        "memory": {"count": memory_nodes, "memory": "1GiB"},
        "system": {"name": system, **(options or {})},
        "workload": {"preset": workload, "recordcount": records, "operationcount": records,
                     "requestdistribution": "zipfian", "keysize": 8, "valuesize": 8, **(properties or {})},
        "step": steps,
    }
    if smart is not None:
        doc["smart"] = smart
    return doc


# the plan step (0-based) of the first point's measured run: set threads, load, then set, warm-up, measure
FIRST_MEASURED_STEP = 4


def measure(system: str, workload: str, threads: tuple[int, ...], *, records: int, warm_ms: float,
            measure_ms: float, progress=lambda msg: None, trace=None, **scenario) -> tuple[list[dict], dict]:
    """Run one workload over every thread count; returns per-point figures and speed figures.
    ``scenario``: more arguments of :func:`scenario_dict` (properties, options, qp_policy, ...).
    ``trace``: ``(path, TraceBounds)``: write a timeline of the first point's measured run there
    (shm/sim/trace.py); the figures are the same with or without it."""
    from cluster.rack import ColocatedRack
    from cluster.scenario import scenario_from_dict
    scen = scenario_from_dict(scenario_dict(system, workload, threads, records=records, warm_ms=warm_ms,
                                            measure_ms=measure_ms, **scenario), source=f"bench ycsb {workload}")
    rack = ColocatedRack(scen, trace=trace[1]._replace(start_step=FIRST_MEASURED_STEP) if trace else None)
    progress(f"{WORKLOADS.get(workload, workload)}: loading {records:,} records, then {len(threads)} thread counts")
    t0 = time.perf_counter()
    res = rack.run()
    wall = time.perf_counter() - t0
    points = []
    by_index = {s.index: s for s in res.steps}
    for k, t in enumerate(threads):
        step = by_index[5 + 3 * k]              # steps count from 1: set, load, then (set, warm, measure) per count
        every = next(kf for kf in step.kinds if kf.kind == "all")
        points.append({"threads": t, "mops": step.mops, "p50_us": every.p50_us, "p99_us": every.p99_us,
                       "ops": step.ops, "failures": step.failures})
    if trace:
        rack.tracer.provenance.update(bench="ycsb", workload=workload, threads=min(threads))
        rack.tracer.write(trace[0])
    vns = rack.env.now
    speed = {"wall_s": wall, "virtual_ms": vns / 1e6, "verbs_per_s": rack.verbs / wall if wall else 0.0,
             "virtual_us_per_s": vns / 1e3 / wall if wall else 0.0}
    return points, speed


def setup(quick: bool) -> dict:
    """The rack of this bench, for the run record (cluster.experiments.provenance)."""
    warm, win = CONTENDED_MS[quick]
    return {"profile": "cx6-200g", "seed": 1,
            "spec": "a co-located rack: 1 compute node (threads swept, 8 coroutines each), 2 memory nodes",
            "scale": f"{20_000 if quick else 100_000:,} keys (paper: 100 M); YCSB A measured for {win:g} ms "
                     f"after {warm:g} ms of warm-up"}


def _workload(system: str, w: str, policy: str, trace, quick: bool, progress) -> list[Row]:
    """One workload over every thread count: its rows, then its emulation speed (wall clock)."""
    warm_ms, measure_ms = (CONTENDED_MS if w == "a" else UNCONTENDED_MS)[quick]
    points, speed = measure(system, w, THREADS_QUICK if quick else THREADS_FULL,
                            records=20_000 if quick else 100_000, warm_ms=warm_ms, measure_ms=measure_ms,
                            progress=progress, qp_policy=policy, properties=SMART_KEYS, trace=trace)
    return _rows(system, w, points) + [
        Row("speed", w, "-", "virtual µs per real s", speed["virtual_us_per_s"]),
        Row("speed", w, "-", "verbs per real s", speed["verbs_per_s"])]


def run(system: str = "race", only=None, quick: bool = False, json_path: str | None = None, console=None,
        trace=None):
    """``trace``: ``(path, TraceBounds)`` of ``--trace``: a timeline of the first workload's first point."""
    from functools import partial

    from rich.console import Console
    console = console or Console()
    from nodes.systems import get_system
    cls = get_system(system)                    # unknown system: one-line error before any work
    # Baselines run with QPs per thread, as in SMART's evaluation; systems on the SMART framework
    # with its thread-aware allocation (a doorbell per thread).
    policy = "per_thread_doorbell" if getattr(cls, "smart_defaults", None) else "per_thread_qp"
    only = [w.lower() for w in only] if only else None
    for w in only or ():
        if w not in WORKLOADS:
            raise ValueError(f"unknown workload {w!r} for bench ycsb; choose from {', '.join(WORKLOADS)}")
    first = (only or list(WORKLOADS))[0]
    rows = run_experiments({w: partial(_workload, system, w, policy, trace if w == first else None)
                            for w in WORKLOADS}, only=only, quick=quick, json_path=json_path, console=console,
                           label=f"bench ycsb ({system})", title_prefix="ycsb ", setup=setup, title=TITLE,
                           options={"system": system})
    if trace:
        console.print(f"bench ycsb: wrote a trace of ycsb {first} at {min(THREADS_QUICK if quick else THREADS_FULL)} "
                      f"thread(s) to {trace[0]}; open it in https://ui.perfetto.dev or chrome://tracing",
                      highlight=False, soft_wrap=True)
    return rows


TITLE = "YCSB A, B and C by thread count beside SMART §6.2.1's RACE figures (--system)"


def _rows(system: str, w: str, points: list[dict]) -> list[Row]:
    exp = f"ycsb-{w}"
    out = []
    for p in points:
        pub = PUBLISHED_A_PEAK[1] if (w == "a" and p["threads"] == PUBLISHED_A_PEAK[0]) else None
        out.append(Row(exp, system, p["threads"], "Mops", p["mops"], pub))
        out.append(Row(exp, system, p["threads"], "p50 µs", p["p50_us"]))
        out.append(Row(exp, system, p["threads"], "p99 µs", p["p99_us"]))
    best = max(points, key=lambda p: p["mops"])
    last = points[-1]
    if w == "a":
        out.append(Row(exp, system, "peak", "threads at peak", best["threads"], PUBLISHED_A_PEAK[0]))
        out.append(Row(exp, system, "peak", "peak Mops", best["mops"], PUBLISHED_A_PEAK[1]))
        out.append(Row(exp, system, last["threads"], f"Mops at {last['threads']} / peak",
                       last["mops"] / best["mops"] if best["mops"] else None))
    else:
        out.append(bound_row(exp, system, "max", "max Mops (published: stays under)", best["mops"],
                             PUBLISHED_READ_CEILING, "at most"))
    return out


# SMART Fig. 7's axes, one figure per workload (cluster.experiments.figures): throughput and p99
# by thread count, the published peak (YCSB A) or ceiling (B, C) as a reference
FIGURES = [Figure(f"ycsb-{w}", f"ycsb-{w}", ("Mops", "p99 µs"), f"YCSB {w.upper()}, zipf 0.99, by thread count",
                  "threads (one compute node)", ("throughput (Mops)", "p99 latency (µs)"), ylog=(False, True),
                  refs=("peak Mops", "max Mops (published: stays under)"), peak_at="threads at peak")
           for w in WORKLOADS]


EXPERIMENT = Experiment(kind="bench", name="ycsb", run=run, parts=tuple(WORKLOADS), options=("system", "trace"),
                        title=TITLE, setup=setup, figures=tuple(FIGURES))
