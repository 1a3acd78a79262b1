"""``dmrack reproduce smart``: SMART (ASPLOS'24) experiments at reduced scale, published beside emulated.

Every experiment runs co-located racks (deterministic) on the ``cx6-200g`` profile, one compute
node (fig7def: one to six; fig12def: one to eight, with as many memory nodes) and one or two
memory nodes as in the paper's setups, and prints rows of (experiment, series, x, metric, emulated,
published) like ``dmrack bench``. Reduced scale means
fewer keys (tens of thousands instead of 100 M), windows of a few virtual milliseconds instead of
seconds, and fewer points per curve; docs/smart.md says where that moves a figure.

Experiments with skewed updates (fig5, fig7's write-heavy YCSB A, fig14) measure after a warm-up
of several milliseconds (:data:`CONTENDED_MS`): an update of a hot key stays in flight while
it retries, so the operations in flight fill up with hot-key updates over milliseconds, and only
then does throughput settle (RACE's update collapse, the conflict-avoidance ablation). The
paper's 10-second runs measure that settled state; a sub-millisecond window measures the transient
before it (docs/smart.md, "Contended updates need a long warm-up").

Experiments available now:

* ``fig3``: 8-byte READ and WRITE throughput by QP policy and thread count (the verbs bench's experiment);
* ``fig4``: READ and WRITE throughput against outstanding work requests per thread;
* ``fig5``: RACE update-only throughput and p99 by thread count (zipf 0.99) and by zipf parameter
  at 16 threads;
* ``fig7``: RACE (QPs per thread, SMART off) against SMART-HT (a doorbell per thread, its
  ``smart_defaults``) on YCSB A, B and C by thread count;
* ``fig7def``: the same two scaled out, 1-6 compute nodes of 96 threads each (Fig. 7(d)-(f));
* ``fig8``: between those two ends, RACE with a doorbell per thread (+ThdResAlloc) and with adaptive
  work-request throttling as well (+WorkReqThrot), on YCSB A, B and C by thread count;
* ``fig9``: RACE against SMART-HT on YCSB C at 96 threads, each operation followed by an idle
  time that sets the load: throughput against median and p99 latency;
* ``fig10``, ``fig11``: FORD+ against SMART-DTX on SmallBank and TATP with the tables on two PMem
  memory nodes, committed Mtxn/s by thread count, and throughput against median latency at 96 x 8
  by idle time per commit (cluster/experiments/smart_dtx.py);
* ``fig12``: Sherman, Sherman with speculative lookup and SMART-BT on YCSB A, B and C by thread count;
* ``fig12def``: the same three scaled out, n compute and n memory nodes, n = 1-8 (Fig. 12(e)-(f));
* ``fig13``: 8-byte READs with and without adaptive work-request throttling, (a) by thread count at
  16 outstanding WRs per thread, (b) by outstanding WRs per thread at 96 threads (raw verbs rig);
* ``fig14``: SMART-HT's conflict-avoidance ablation, 100% updates at zipf 0.99: throughput and
  retries per update;
* ``table1``: READ throughput when the number of active threads changes every X (scaled from the
  paper's 32–2048 ms), with and without adaptive throttling.

Every experiment function takes ``(quick, progress)`` and keyword overrides of its sizes (the
tests run each on a tiny configuration). fig5, fig7 and fig14 are sweeps of fresh racks, which
also take ``jobs``: how many racks run side by side (``dmrack reproduce --jobs``), which does not
change a figure.
"""

from __future__ import annotations

from cluster.experiments.figures import Figure
from cluster.experiments.pointpool import map_points
from cluster.experiments.progress import prefixed
from cluster.experiments.rows import Row, beside, bound_row, input_row, renamed, reproduction
from cluster.experiments.bench_verbs import FIG3_POLICIES
from cluster.experiments.bench_ycsb import CONTENDED_MS, SMART_KEYS, UNCONTENDED_MS


def fig3(quick: bool, progress) -> list[Row]:
    from cluster.experiments.bench_verbs import smart_fig3
    return renamed(smart_fig3(quick, progress), "fig3")


def fig4(quick: bool, progress) -> list[Row]:
    from cluster.experiments.bench_verbs import smart_fig4
    return renamed(smart_fig4(quick, progress), "fig4")


UPDATE_ONLY = {"readproportion": 0, "updateproportion": 1}
# SMART's artifact (madsys-dev/smart ae/raw-reference/): RACE, 100 % updates, 8 coroutines a thread;
# fig5a.csv by threads at zipf 0.99 and fig5b.csv by zipf parameter at 16 threads: (Mops, p50 µs,
# p99 µs). Its two runs of 16 threads at 0.99 give 0.533 and 0.669 Mops: the spread of its points.
FIG5A_ARTIFACT = {1: (0.237, 31.538, 70.006), 2: (0.545, 26.312, 74.758), 4: (1.116, 23.374, 130.674),
                  6: (1.441, 23.652, 253.185), 8: (1.574, 23.689, 447.885), 10: (1.515, 24.845, 741.628),
                  12: (0.949, 32.982, 1861.465), 14: (0.731, 43.464, 2922.841), 16: (0.533, 60.087, 4475.455)}
FIG5B_ARTIFACT = {0.0: (3.731, 29.492, 53.708), 0.4: (3.641, 30.332, 55.643), 0.8: (3.791, 28.891, 54.569),
                  0.9: (3.110, 29.481, 233.953), 0.95: (1.224, 36.629, 1255.473), 0.99: (0.669, 46.526, 3503.948)}
FIG5_SOURCE = "SMART artifact ae/raw-reference/fig5{}.csv"


def fig5(quick: bool, progress, *, jobs: int = 1) -> list[Row]:
    """RACE, 100% updates: by thread count at zipf 0.99, and by zipf parameter at 16 threads.
    Published (SMART §3.3): the peak is at 8 threads; p99 grows by up to 17.1x with more threads;
    from θ = 0 to 0.99 the median latency grows 1.9x and the p99 78.4x. Each point beside the
    artifact's where it ran the same thread count or zipf parameter (:data:`FIG5A_ARTIFACT`,
    :data:`FIG5B_ARTIFACT`)."""
    records = 20_000 if quick else 100_000
    warm, win = CONTENDED_MS[quick]
    threads = (1, 4, 8, 16, 32, 64, 96) if quick else (1, 2, 4, 8, 16, 24, 32, 48, 64, 96)
    thetas = (0.0, 0.5, 0.9, 0.99)
    sizes = {"records": records, "warm_ms": warm, "measure_ms": win}
    # θ = 0 is the uniform distribution (YCSB's zipfian generator needs 0 < θ < 1)
    skews = [{"requestdistribution": "uniform"} if theta == 0 else {"zipfianconstant": theta} for theta in thetas]
    got = _fresh_points([(f"RACE updates, zipf 0.99: {t} threads", "race", "a", t,
                          {**sizes, "properties": UPDATE_ONLY}) for t in threads]
                        + [(f"RACE updates at 16 threads, zipf {theta}", "race", "a", 16,
                            {**sizes, "properties": {**UPDATE_ONLY, **skew}}) for theta, skew in zip(thetas, skews)],
                        prefixed(progress, "fig5: "), jobs=jobs)
    pts, by_theta = got[:len(threads)], dict(zip(thetas, got[len(threads):]))
    rows = []
    for p in pts:
        mops, _, p99 = FIG5A_ARTIFACT.get(p["threads"], (None, None, None))
        src = FIG5_SOURCE.format("a") if mops is not None else None
        # one thread's 0.237 is what RACE's client CPU (write_cpu_ns) was fitted to (docs/race.md): an input
        rows.append(Row("fig5", "race, zipf 0.99", p["threads"], "Mops", p["mops"], mops, source=src,
                        kind="input" if p["threads"] == 1 and mops is not None else "result"))
        rows.append(Row("fig5", "race, zipf 0.99", p["threads"], "p99 µs", p["p99_us"], p99, source=src))
    best = max(pts, key=lambda p: p["mops"])
    rows.append(Row("fig5", "race, zipf 0.99", "peak", "threads at peak", best["threads"], 8))
    p99s = [p["p99_us"] for p in pts if p["p99_us"]]
    rows.append(Row("fig5", "race, zipf 0.99", "max/min", "p99 growth", max(p99s) / min(p99s), 17.1))
    for theta, p in by_theta.items():
        pub = FIG5B_ARTIFACT.get(theta, (None, None, None))
        src = FIG5_SOURCE.format("b") if pub[0] is not None else None
        rows.append(Row("fig5", "race, 16 threads", f"θ={theta}", "Mops", p["mops"], pub[0], source=src))
        rows.append(Row("fig5", "race, 16 threads", f"θ={theta}", "p50 µs", p["p50_us"], pub[1], source=src))
        rows.append(Row("fig5", "race, 16 threads", f"θ={theta}", "p99 µs", p["p99_us"], pub[2], source=src))
    lo, hi = by_theta[0.0], by_theta[0.99]
    rows.append(Row("fig5", "race, 16 threads", "0.99/0", "p50 ratio", hi["p50_us"] / lo["p50_us"], 1.9))
    rows.append(Row("fig5", "race, 16 threads", "0.99/0", "p99 ratio", hi["p99_us"] / lo["p99_us"], 78.4))
    return rows


# --- shared helpers ---------------------------------------------------------------------------------

def _ycsb_rack(system: str, workload: str, threads: tuple[int, ...], *, records: int, warm_ms: float,
               measure_ms: float, **scenario):
    """Like :func:`cluster.experiments.bench_ycsb.measure` but keeps the rack, so the clients' and threads'
    statistics can be read after the run. Returns (points, rack); a point's ``plan_step`` is its
    measured step in the rack's plan (``ComputeNode.smart_at_step_end`` is keyed by it).

    ``mops`` is the operations issued in the measured step over its window (``measure_ms``): a
    timed run step ends with its window, and an operation that returns later is still counted in
    the step that issued it (nodes/compute.py), so the rack's step figure is the same number.
    """
    from cluster.experiments.bench_ycsb import scenario_dict
    from cluster.rack import ColocatedRack
    from cluster.scenario import scenario_from_dict
    scenario["properties"] = {**SMART_KEYS, **(scenario.get("properties") or {})}
    scen = scenario_from_dict(scenario_dict(system, workload, threads, records=records, warm_ms=warm_ms,
                                            measure_ms=measure_ms, **scenario), source=f"reproduce smart {system}")
    rack = ColocatedRack(scen)
    res = rack.run()
    by_index = {s.index: s for s in res.steps}
    points = []
    for k, t in enumerate(threads):
        step = by_index[5 + 3 * k]
        every = next(kf for kf in step.kinds if kf.kind == "all")
        points.append({"threads": t, "mops": step.ops / (measure_ms * 1e3), "p50_us": every.p50_us,
                       "p99_us": every.p99_us, "ops": step.ops, "plan_step": step.index - 1})
    return points, rack


def _fresh_points(points, progress=None, *, jobs: int = 1) -> list[dict]:
    """One fresh rack per point (load, warm up, measure), as SMART's scripts restart the
    memory-node backends and reload the table for every point (ae/collect/fig5-*, fig8-*): a
    sweep on one rack would carry the previous point's hot-key stragglers into the next. A point
    is ``(label, system, workload, threads, scenario kwargs)``; the racks run ``jobs`` at a time
    (:mod:`cluster.experiments.pointpool`), and the figures do not depend on it. A rack's run time
    grows with its threads, so the most threaded start first (``cost``)."""
    return map_points(_fresh_point, points, jobs=jobs, progress=progress, describe=lambda p: p[0],
                      cost=lambda p: p[3])


def _fresh_point(label: str, system: str, workload: str, threads: int, kw: dict) -> dict:
    return _rack_points(label, system, workload, (threads,), kw)[0]


def _rack_points(label: str, system: str, workload: str, threads: tuple, kw: dict) -> list[dict]:
    """The points of one fresh rack that runs every thread count of ``threads`` in its plan
    (:func:`_ycsb_rack` with the scenario keywords ``kw``): a point of a sweep of such racks."""
    return _ycsb_rack(system, workload, threads, **kw)[0]


# Adaptive throttling for the raw-verbs experiments (fig13, table1): Δ scaled from 8 ms to 20 µs
# (k = 1/400), hold kept at the paper's 60 Δ, one tuner for the node (docs/smart.md, "Scaling Δ").
RIG_TUNER = {"throttle": "adaptive", "delta_ns": 20_000, "hold": 60, "tuner_scope": "node"}
RIG_SCALE = 8_000_000 // RIG_TUNER["delta_ns"]          # paper time / emulated time


def _reads(rig, *, threads: int, depth: int, smart: dict | None, warmup: int, window: int,
           policy: str = "per_thread_doorbell", schedule=None) -> float:
    """``threads`` threads, one coroutine each, ring a doorbell per 8-byte READ, ``depth`` READs
    per batch, wait for the batch, repeat (SMART's bench tool, as ``verbs._onesided_closed_loop``
    with ``post_each``), on a :class:`NodeRdma` built with ``smart``. ``schedule``: a list of
    (time ns, active threads); a thread turned off finishes its batch, calls ``idle()`` and waits;
    turned on, it calls ``resume()``. Returns Mops in [warmup, warmup + window)."""
    import numpy as np

    from cluster.experiments.bench_verbs import Window
    from shm.coro import NodeRdma
    from shm.fabric import gaddr
    env = rig.env
    win = Window(warmup, warmup + window)
    words = rig.mem_bytes // 64
    node = NodeRdma(rig.host, rig.cns[0], policy=policy, smart=smart)
    thr = [node.thread() for _ in range(threads)]
    active = [True] * threads
    wake = [None] * threads

    def client(i, co, rng):
        mns = rig.mns
        while env.now < win.end:
            if not active[i]:
                thr[i].idle()
                wake[i] = env.event()
                yield wake[i]
                continue
            for _ in range(depth):
                co.read(gaddr(mns[int(rng.integers(len(mns)))], int(rng.integers(words)) * 64), 8)
                co.post()
            yield co.sync()
            win.add(env.now, depth)

    def controller():
        for at, n in schedule:
            if at > env.now:
                yield at - env.now
            for i in range(threads):
                on = i < n
                if on and not active[i]:
                    thr[i].resume()
                    active[i] = True
                    if wake[i] is not None:
                        ev, wake[i] = wake[i], None
                        ev.succeed()
                elif not on:
                    active[i] = False

    for i in range(threads):
        env.process(client(i, thr[i].coroutine(), np.random.default_rng(i)))
    if schedule:
        env.process(controller())
    env.run(until=win.end + 50_000)
    return win.mops()


def _rig():
    from cluster.experiments.bench_verbs import Rig
    from shm.profile import load_profile
    return Rig(load_profile("cx6-200g"), 1, 1)


def _rig_reads(label: str, kw: dict) -> float:
    """``_reads(rig, **kw)`` on a fresh rig: a point of fig13 and table1 (module level, so the rigs
    can run side by side, ``map_points``; ``label`` is what the progress line says)."""
    with _rig() as rig:
        return _reads(rig, **kw)


# --- Fig. 7: RACE vs SMART-HT ---------------------------------------------------------------------

FIG7_SYSTEMS = (("race", "per_thread_qp"), ("smart-ht", "per_thread_doorbell"))
# published (SMART §6.2.1): peak Mops and the thread count of the peak where the text gives it
FIG7_PUBLISHED = {("race", "a"): (2.8, 8), ("smart-ht", "a"): (5.7, 48), ("race", "b"): (11.4, None),
                  ("smart-ht", "b"): (21.2, None), ("race", "c"): (11.4, None), ("smart-ht", "c"): (23.7, None)}
FIG7_WORKLOADS = {"a": "write-heavy", "b": "read-heavy", "c": "read-only"}
# Mops by thread count of SMART's artifact (madsys-dev/smart ae/raw-reference/fig8-ycsb-{a,b,c}.csv,
# the hash-table breakdown, 10 s runs, 100 M keys) for its four series: RACE, +ThdResAlloc,
# +WorkReqThrot and SMART-HT; fig7 compares the ends, fig8 the two between
HASH_TABLE_ARTIFACT = {
    ("race", "a"): {1: 0.341, 8: 2.799, 16: 1.584, 24: 0.689, 32: 0.518, 40: 0.482, 48: 0.407, 56: 0.305, 64: 0.251,
                    72: 0.218, 80: 0.203, 88: 0.204, 96: 0.201},
    ("+ThdResAlloc", "a"): {1: 0.329, 8: 2.744, 16: 1.521, 24: 0.709, 32: 0.537, 40: 0.497, 48: 0.391, 56: 0.296,
                            64: 0.244, 72: 0.224, 80: 0.209, 88: 0.213, 96: 0.193},
    ("+WorkReqThrot", "a"): {1: 0.324, 8: 2.635, 16: 4.216, 24: 4.023, 32: 5.146, 40: 1.895, 48: 1.394, 56: 0.48,
                             64: 0.453, 72: 0.381, 80: 0.391, 88: 0.298, 96: 0.226},
    ("smart-ht", "a"): {1: 0.325, 8: 2.683, 16: 4.535, 24: 5.347, 32: 5.533, 40: 5.553, 48: 5.643, 56: 5.498,
                        64: 5.468, 72: 5.323, 80: 5.321, 88: 5.306, 96: 5.234},
    ("race", "b"): {1: 0.509, 8: 3.322, 16: 5.718, 24: 8.218, 32: 9.634, 40: 9.555, 48: 11.505, 56: 8.34, 64: 7.47,
                    72: 7.352, 80: 6.946, 88: 6.137, 96: 5.128},
    ("+ThdResAlloc", "b"): {1: 0.502, 8: 3.44, 16: 6.44, 24: 10.056, 32: 13.643, 40: 15.486, 48: 17.085, 56: 18.43,
                            64: 8.869, 72: 7.968, 80: 5.592, 88: 4.199, 96: 3.058},
    ("+WorkReqThrot", "b"): {1: 0.5, 8: 3.422, 16: 6.648, 24: 10.191, 32: 12.846, 40: 14.609, 48: 16.806, 56: 17.846,
                             64: 13.218, 72: 9.778, 80: 7.71, 88: 6.745, 96: 9.468},
    ("smart-ht", "b"): {1: 0.495, 8: 3.562, 16: 6.872, 24: 9.699, 32: 12.107, 40: 14.943, 48: 16.757, 56: 18.926,
                        64: 20.209, 72: 20.331, 80: 20.198, 88: 20.69, 96: 20.882},
    ("race", "c"): {1: 0.571, 8: 4.318, 16: 6.727, 24: 10.158, 32: 10.435, 40: 10.038, 48: 11.502, 56: 8.803,
                    64: 8.132, 72: 8.278, 80: 7.629, 88: 6.891, 96: 6.455},
    ("+ThdResAlloc", "c"): {1: 0.571, 8: 4.577, 16: 8.474, 24: 12.128, 32: 15.779, 40: 18.703, 48: 20.751,
                            56: 21.991, 64: 23.149, 72: 23.849, 80: 23.851, 88: 23.798, 96: 23.943},
    ("+WorkReqThrot", "c"): {1: 0.557, 8: 4.356, 16: 8.364, 24: 11.743, 32: 15.59, 40: 17.549, 48: 20.05, 56: 20.924,
                             64: 22.843, 72: 23.687, 80: 23.62, 88: 23.734, 96: 23.889},
    ("smart-ht", "c"): {1: 0.561, 8: 4.462, 16: 8.627, 24: 12.063, 32: 15.786, 40: 18.338, 48: 20.559, 56: 22.233,
                        64: 23.138, 72: 23.574, 80: 23.678, 88: 23.719, 96: 23.856},
}
HASH_TABLE_SOURCE = "SMART artifact ae/raw-reference/fig8-ycsb-{}.csv"
# (keys, warm-up ms) of --quick's YCSB A: SMART-HT's fall past its peak at 48 threads needs both
# full mode's 100 k keys and its 20 ms warm-up (20 k keys or 8 ms leave a plateau rising to 96;
# docs/smart.md); the window stays quick's 2 ms
FIG7_WRITE_HEAVY_QUICK = (100_000, 20.0)


def _hash_table_sizes(w: str, quick: bool, records=None, warm_ms=None, measure_ms=None,
                      contended=("a",)) -> dict:
    """Keys, warm-up and window of a fig7 or fig8 point on YCSB ``w``: YCSB A's updates pile up on
    hot keys over milliseconds; in fig7, B's 5 % of updates do not (its hottest key sees ~30 k
    updates/s, well under the 70-170 k/s one key sustains in fig5/fig14). ``contended``: the
    workloads sized as A."""
    warm, win = (CONTENDED_MS if w in contended else UNCONTENDED_MS)[quick]
    keys = 20_000 if quick else 100_000
    if quick and w in contended:
        keys, warm = FIG7_WRITE_HEAVY_QUICK
    return {"records": records or keys, "warm_ms": warm_ms if warm_ms is not None else warm,
            "measure_ms": measure_ms if measure_ms is not None else win}


def fig7(quick: bool, progress, *, threads=None, records=None, warm_ms=None, measure_ms=None,
         workloads=("a", "b", "c"), jobs: int = 1) -> list[Row]:
    """RACE (QPs per thread, SMART off) against SMART-HT (a doorbell per thread, adaptive WR
    throttling, back-off with dynamic limit, coroutine throttling; its scaled defaults) on YCSB A
    (50% updates), B (5%) and C (read-only), zipf 0.99, one compute node. Published (§6.2.1): A:
    RACE peaks at 2.8 Mops with 8 threads, SMART-HT at 5.7 with 48; B and C: RACE stays under
    11.4, SMART-HT reaches 21.2 and 23.7. Each thread count's Mops beside the artifact's point
    (:data:`HASH_TABLE_ARTIFACT`) where it ran that count."""
    threads = tuple(threads or ((1, 8, 16, 32, 48, 64, 96) if quick else (1, 2, 4, 8, 16, 24, 32, 48, 64, 96)))
    points = []
    for w in workloads:
        sizes = _hash_table_sizes(w, quick, records, warm_ms, measure_ms)
        for system, policy in FIG7_SYSTEMS:
            points += [(f"{system}, YCSB {w.upper()} ({FIG7_WORKLOADS[w]}): {t} threads", system, w, t,
                        {**sizes, "qp_policy": policy}) for t in threads]
    got = iter(_fresh_points(points, prefixed(progress, "fig7: "), jobs=jobs))
    rows, peaks = [], {}
    for w in workloads:
        for system, _ in FIG7_SYSTEMS:
            pts = [next(got) for _ in threads]
            series = f"{system}, {FIG7_WORKLOADS[w]}"
            artifact = HASH_TABLE_ARTIFACT[(system, w)]
            for p in pts:
                # RACE's read-only rate at one thread is what its client CPU (search_cpu_ns) was fitted
                # to (docs/race.md): an input; the other workloads' one-thread rates check the fit
                fitted = system == "race" and w == "c" and p["threads"] == 1
                rows.append(Row("fig7", series, p["threads"], "Mops", p["mops"],
                                **beside(artifact, p["threads"], HASH_TABLE_SOURCE.format(w)),
                                kind="input" if fitted else "result"))
            best = max(pts, key=lambda p: p["mops"])
            peaks[(system, w)] = best["mops"]
            pub_mops, pub_t = FIG7_PUBLISHED[(system, w)]
            if system == "race" and w != "a":      # "less than 11.4": a bound
                rows.append(bound_row("fig7", series, "peak", "max Mops (published: stays under)", best["mops"],
                                      pub_mops, "at most"))
            else:
                rows.append(Row("fig7", series, "peak", "peak Mops", best["mops"], pub_mops))
            rows.append(Row("fig7", series, "peak", "threads at peak", best["threads"], pub_t))
        # the ratio of the peaks: the text's for write-heavy (RACE's 2.8 Mops at 8 threads, SMART-HT's
        # 5.7 at 48); for B and C it bounds RACE from above only ("less than 11.4"), so the artifact's
        # ratio over the same thread counts (the location of a plateau's top is not compared)
        pub, src = None, None
        if w == "a":
            pub = FIG7_PUBLISHED[("smart-ht", w)][0] / FIG7_PUBLISHED[("race", w)][0]
        else:
            art = [HASH_TABLE_ARTIFACT[(system, w)] for system, _ in FIG7_SYSTEMS]
            if all(t in a for a in art for t in threads):
                race_art, smart_art = (max(a[t] for t in threads) for a in art)
                pub, src = smart_art / race_art, HASH_TABLE_SOURCE.format(w)
        rows.append(Row("fig7", f"smart-ht / race, {FIG7_WORKLOADS[w]}", "peak", "ratio",
                        peaks[("smart-ht", w)] / peaks[("race", w)] if peaks[("race", w)] else None, pub,
                        source=src))
    return rows


# --- Fig. 7(d)-(f): scale-out, several compute nodes ------------------------------------------------

# Total Mops of SMART's artifact (ae/raw-reference/fig7-ycsb-{a,b,c}.csv, ae/collect/fig7-hashtable-
# scale-out.sh): 1-6 compute nodes of 96 threads x 8 coroutines each, two memory nodes, 100 M keys;
# the first node adds up every node's operations (benchmark.h collect()) and divides by its run
SCALE_OUT_ARTIFACT = {
    ("race", "a"): {1: 0.195, 2: 0.123, 3: 0.080, 4: 0.068, 5: 0.059, 6: 0.054},
    ("smart-ht", "a"): {1: 4.972, 2: 5.573, 3: 5.584, 4: 5.669, 5: 5.682, 6: 5.696},
    ("race", "b"): {1: 5.055, 2: 1.792, 3: 1.073, 4: 0.916, 5: 0.790, 6: 0.714},
    ("smart-ht", "b"): {1: 20.265, 2: 32.047, 3: 35.034, 4: 35.912, 5: 36.852, 6: 37.051},
    ("race", "c"): {1: 6.943, 2: 13.346, 3: 20.123, 4: 26.840, 5: 33.355, 6: 41.071},
    ("smart-ht", "c"): {1: 23.506, 2: 44.946, 3: 64.639, 4: 72.612, 5: 73.751, 6: 75.051},
}
SCALE_OUT_SOURCE = "SMART artifact ae/raw-reference/fig7-ycsb-{}.csv"
SCALE_OUT_THREADS = 96


def fig7def(quick: bool, progress, *, compute_nodes=None, threads: int = SCALE_OUT_THREADS, records=None,
            warm_ms=None, measure_ms=None, workloads=None, jobs: int = 1) -> list[Row]:
    """RACE against SMART-HT scaled out (§6.2.1, Fig. 7(d)-(f)): 1-6 compute nodes of ``threads``
    x 8 coroutines each on the same two memory nodes, YCSB A, B and C, zipf 0.99: total Mops beside
    the artifact's (:data:`SCALE_OUT_ARTIFACT`). Each compute node has its own NIC and so its own
    doorbells: RACE's read-only throughput grows with the nodes (the text: "the doorbell registers
    are not shared across multiple compute blades"), SMART-HT keeps "a throughput gap (up to 3.8x)"
    over it, and with updates in the mix more clients mean more conflicts (RACE's read-heavy rate
    falls from 5.1 to 0.7 Mops). B is sized as A (its updates pile up over milliseconds, fig8).
    ``--quick`` runs C alone: A's and B's points need fig7's milliseconds of warm-up on up to 576
    threads, ~10 minutes on two cores (docs/smart.md has what they give)."""
    cns = tuple(compute_nodes or ((1, 3, 6) if quick else (1, 2, 3, 4, 5, 6)))
    workloads = tuple(workloads or (("c",) if quick else ("a", "b", "c")))
    points = []
    for w in workloads:
        sizes = _hash_table_sizes(w, quick, records, warm_ms, measure_ms, contended=("a", "b"))
        for system, policy in FIG7_SYSTEMS:
            points += [(f"{system}, YCSB {w.upper()} ({FIG7_WORKLOADS[w]}): {n} compute nodes x {threads} threads",
                        system, w, threads, {**sizes, "qp_policy": policy, "compute_nodes": n}) for n in cns]
    got = iter(_fresh_points(points, prefixed(progress, "fig7def: "), jobs=jobs))
    rows, mops = [], {}
    for w in workloads:
        for system, _ in FIG7_SYSTEMS:
            artifact = SCALE_OUT_ARTIFACT[(system, w)]
            for n in cns:
                m = mops[(system, w, n)] = next(got)["mops"]
                rows.append(Row("fig7def", f"{system}, {FIG7_WORKLOADS[w]}", n, "Mops", m,
                                **beside(artifact, n, SCALE_OUT_SOURCE.format(w))))
        lo, hi = cns[0], cns[-1]
        if hi > lo:
            # how the total moves from the fewest compute nodes to the most (above 1: it grows)
            for system, _ in FIG7_SYSTEMS:
                art = SCALE_OUT_ARTIFACT[(system, w)]
                base = mops[(system, w, lo)]
                rows.append(Row("fig7def", f"{system}, {FIG7_WORKLOADS[w]}", f"{hi} / {lo} compute nodes",
                                "Mops ratio", mops[(system, w, hi)] / base if base else None,
                                art[hi] / art[lo] if hi in art and lo in art else None,
                                source=SCALE_OUT_SOURCE.format(w)))
    if "c" in workloads:
        gaps = [mops[("smart-ht", "c", n)] / mops[("race", "c", n)] for n in cns if mops[("race", "c", n)]]
        # the text: "SMART-HT still has 2.0x ~ 3.8x higher throughput"
        rows.append(Row("fig7def", "smart-ht / race, read-only", "largest", "Mops ratio", max(gaps, default=None),
                        3.8))
        rows.append(Row("fig7def", "smart-ht / race, read-only", "smallest", "Mops ratio", min(gaps, default=None),
                        2.0))
    return rows


# --- Fig. 8: SMART-HT's techniques one at a time ----------------------------------------------------

# (series, system, QP policy, [smart] table): RACE with a doorbell per thread, then with adaptive
# work-request throttling too; RACE and SMART-HT, the two ends, are fig7's series
FIG8_SERIES = (("+ThdResAlloc", "race", "per_thread_doorbell", None),
               ("+WorkReqThrot", "smart-ht", "per_thread_doorbell", {"backoff": False, "coro_throttle": False}))


def fig8(quick: bool, progress, *, threads=None, records=None, warm_ms=None, measure_ms=None,
         workloads=("a", "b", "c"), jobs: int = 1) -> list[Row]:
    """SMART-HT's techniques added to RACE one at a time (§6.2.1, Fig. 8), YCSB A, B and C, zipf
    0.99, one compute node, sized as fig7: +ThdResAlloc (a doorbell per thread) and +WorkReqThrot
    (with adaptive work-request throttling as well); the figure's ends, RACE and SMART-HT, are
    fig7's. Published: the artifact's points at the same thread counts (:data:`HASH_TABLE_ARTIFACT`)
    and the text: thread-aware allocation is what scales read-only workloads (the artifact: 23.9
    Mops at 96 threads against RACE's 6.5), throttling is "effective for write-heavy workloads when the
    thread count is between 8 and 32" (the artifact: 5.1 against 0.54 Mops at 32), and with more
    threads unsuccessful retries take over again (the read-heavy +ThdResAlloc falls from 18.4 Mops
    at 56 threads to 3.1 at 96)."""
    # --quick leaves out 64 threads: A's and B's points there cost a fifth of the part (~60 s)
    threads = tuple(threads or ((8, 32, 96) if quick else (1, 8, 16, 24, 32, 48, 64, 96)))
    points = []
    for w in workloads:
        # B as A: without conflict avoidance B's updates pile up too, but only over ~10-20 ms at
        # 64-96 threads (+ThdResAlloc at 96 threads, 2 ms windows: 15.5 Mops after 8 ms of
        # warm-up on 20,000 keys, 7.3 after 20 ms on 100,000; the artifact's 10 s runs: 3.1)
        sizes = _hash_table_sizes(w, quick, records, warm_ms, measure_ms, contended=("a", "b"))
        for series, system, policy, smart in FIG8_SERIES:
            kw = {**sizes, "qp_policy": policy, **({"smart": smart} if smart is not None else {})}
            points += [(f"{series}, YCSB {w.upper()} ({FIG7_WORKLOADS[w]}): {t} threads", system, w, t, kw)
                       for t in threads]
    got = iter(_fresh_points(points, prefixed(progress, "fig8: "), jobs=jobs))
    rows, mops = [], {}
    for w in workloads:
        for series, *_ in FIG8_SERIES:
            artifact = HASH_TABLE_ARTIFACT[(series, w)]
            for t in threads:
                p = next(got)
                mops[(series, w, t)] = p["mops"]
                rows.append(Row("fig8", f"{series}, {FIG7_WORKLOADS[w]}", t, "Mops", p["mops"],
                                **beside(artifact, t, HASH_TABLE_SOURCE.format(w))))
    # the text's two effects, as ratios the artifact's points give (direction: which is larger)
    if "a" in workloads and 32 in threads:
        art = HASH_TABLE_ARTIFACT[("+WorkReqThrot", "a")][32] / HASH_TABLE_ARTIFACT[("+ThdResAlloc", "a")][32]
        lo = mops[("+ThdResAlloc", "a", 32)]
        rows.append(Row("fig8", "+WorkReqThrot / +ThdResAlloc, write-heavy", 32, "Mops ratio",
                        mops[("+WorkReqThrot", "a", 32)] / lo if lo else None, art,
                        source=HASH_TABLE_SOURCE.format("a")))
    if "b" in workloads and 96 in threads:
        b = HASH_TABLE_ARTIFACT[("+ThdResAlloc", "b")]
        best = max((mops[("+ThdResAlloc", "b", t)] for t in threads), default=0)
        rows.append(Row("fig8", "+ThdResAlloc, read-heavy", "96 / peak", "Mops ratio",
                        mops[("+ThdResAlloc", "b", 96)] / best if best else None, b[96] / max(b.values()),
                        source=HASH_TABLE_SOURCE.format("b")))
    return rows


# --- Fig. 9: throughput against latency, read-only --------------------------------------------------

# (Mops, p50 µs, p99 µs) by the idle time after each operation (IDLE_USEC, µs), 96 threads x 8
# coroutines, YCSB C: SMART's artifact ae/raw-reference/fig9.csv (RACE, then SMART-HT), whose
# bench times every operation (REPORT_LATENCY), which costs SMART-HT a third of its rate (15.6
# against 23.9 Mops untimed, fig8-ycsb-c.csv; §6.2.1: "caused by the additional overhead of
# measuring the execution time of each operation")
FIG9_ARTIFACT = {
    "race": {0: (5.766, 105.936, 281.874), 16: (5.945, 67.303, 195.763), 32: (6.337, 50.438, 167.677),
             64: (6.233, 26.077, 96.765), 128: (4.688, 13.526, 48.375), 256: (2.668, 10.997, 24.778),
             512: (1.414, 9.463, 19.386), 1024: (0.728, 9.955, 22.583), 2048: (0.368, 9.787, 23.381),
             4096: (0.186, 9.88, 23.647), 8192: (0.093, 10.31, 23.874)},
    "smart-ht": {0: (15.641, 30.374, 57.353), 16: (14.067, 18.349, 34.057), 32: (11.604, 11.377, 31.201),
                 64: (7.909, 12.099, 25.478), 128: (4.804, 11.885, 21.725), 256: (2.674, 10.104, 19.272),
                 512: (1.411, 9.44, 18.192), 1024: (0.727, 9.523, 21.734), 2048: (0.369, 9.325, 22.596),
                 4096: (0.186, 9.409, 22.596), 8192: (0.093, 9.979, 23.027)},
}
FIG9_SOURCE = "SMART artifact ae/raw-reference/fig9.csv"
FIG9_THREADS = 96


def fig9(quick: bool, progress, *, idles_us=None, threads: int = FIG9_THREADS, records=None,
         jobs: int = 1) -> list[Row]:
    """RACE against SMART-HT on YCSB C (read-only, zipf 0.99), one compute node of ``threads`` x 8
    coroutines, each coroutine idle for a while after every operation (the workload's
    ``thinktime``, the artifact's IDLE_USEC), which sets the load: throughput against median and
    p99 latency (§6.2.1, Fig. 9). A point warms up for twice the idle time (at least 0.2 ms) and
    measures eight times it (at least 0.5 ms), so every coroutine completes several operations.
    Published: the artifact's points (:data:`FIG9_ARTIFACT`) and the text: SMART-HT cuts the
    median latency by 69.6 % against RACE, its median stays under 30.3 µs, its lowest median is
    11.2 µs (at 12.2 Mops), and it cuts the p99 by up to 80.6 %."""
    idles = tuple(idles_us or ((0, 32, 128, 512, 2048) if quick else tuple(FIG9_ARTIFACT["race"])))
    keys = records or (20_000 if quick else 100_000)
    points = []
    for system, policy in FIG7_SYSTEMS:
        for idle in idles:
            sizes = {"records": keys, "warm_ms": max(0.2, 2 * idle / 1e3), "measure_ms": max(0.5, 8 * idle / 1e3)}
            points.append((f"{system}, YCSB C, {threads} threads, idle {idle} µs", system, "c", threads,
                           {**sizes, "qp_policy": policy, "properties": {"thinktime": idle, "thinkmode": "spin"}}))
    got = iter(_fresh_points(points, prefixed(progress, "fig9: "), jobs=jobs))
    rows, res = [], {}
    for system, _ in FIG7_SYSTEMS:
        for idle in idles:
            p = res[(system, idle)] = next(got)
            pub = FIG9_ARTIFACT[system].get(idle, (None, None, None))
            src = FIG9_SOURCE if pub[0] is not None else None
            x = f"idle {idle} µs"
            rows.append(Row("fig9", system, x, "Mops", p["mops"], pub[0], source=src))
            rows.append(Row("fig9", system, x, "p50 µs", p["p50_us"], pub[1], source=src))
            rows.append(Row("fig9", system, x, "p99 µs", p["p99_us"], pub[2], source=src))
    race, smart = [res[("race", i)] for i in idles], [res[("smart-ht", i)] for i in idles]

    def cut(a, b):       # 1 - b / a: how much lower b is than a
        return 1 - b / a if a else None
    rows.append(Row("fig9", "SMART-HT vs RACE", f"idle {idles[0]} µs", "p50 cut", cut(race[0]["p50_us"],
                                                                                       smart[0]["p50_us"]), 0.696))
    rows.append(Row("fig9", "SMART-HT vs RACE", "largest", "p99 cut",
                    max((c for c in (cut(r["p99_us"], s["p99_us"]) for r, s in zip(race, smart)) if c is not None),
                        default=None), 0.806))
    # the text's SMART-HT figures (a series of their own, so that the plot's curves stay the points)
    rows.append(Row("fig9", "smart-ht (text)", "largest", "p50 µs", max(p["p50_us"] for p in smart), 30.3))
    low = min(smart, key=lambda p: p["p50_us"])
    rows.append(Row("fig9", "smart-ht (text)", "lowest", "p50 µs", low["p50_us"], 11.2))
    rows.append(Row("fig9", "smart-ht (text)", "at the lowest p50", "Mops", low["mops"], 12.2))
    return rows


# --- Fig. 12: Sherman, Sherman with speculative lookup, SMART-BT ------------------------------------

FIG12_SYSTEMS = (   # (series, system, [smart] table, QP policy)
    ("sherman", "sherman", None, "per_thread_qp"),
    ("sherman + speculative lookup", "smart-bt", {"all": False}, "per_thread_qp"),
    ("smart-bt", "smart-bt", None, "per_thread_doorbell"),
)
FIG12_PUBLISHED = {"b": 1.8, "c": 2.0}      # SMART-BT / Sherman+ at 94 threads (§6.2.3)
# Mops of SMART's artifact by thread count (ae/raw-reference/fig12-ycsb-{a,b,c}.csv, written by
# ae/collect/fig12abc-btree-scale-up.sh: one memory node, 8 coroutines a thread, Sherman with HOCL,
# then with speculative lookup, then SMART-BT, on one loaded tree per workload), per series
FIG12_ARTIFACT = {
    ("sherman", "a"): {1: 0.421, 8: 2.928, 16: 4.331, 24: 4.848, 32: 5.074, 40: 5.072, 48: 4.899, 56: 4.604,
                       64: 4.554, 72: 4.448, 80: 4.344, 88: 4.314, 94: 4.29},
    ("sherman + speculative lookup", "a"): {1: 0.445, 8: 3.135, 16: 4.549, 24: 5.103, 32: 5.32, 40: 5.264,
                                            48: 5.018, 56: 4.762, 64: 4.708, 72: 4.639, 80: 4.394, 88: 4.414,
                                            94: 4.462},
    ("smart-bt", "a"): {1: 0.438, 8: 2.918, 16: 4.349, 24: 5.309, 32: 5.613, 40: 5.637, 48: 5.637, 56: 5.381,
                        64: 5.177, 72: 5.12, 80: 5.017, 88: 5.048, 94: 4.997},
    ("sherman", "b"): {1: 0.628, 8: 4.281, 16: 8.379, 24: 11.432, 32: 11.359, 40: 11.317, 48: 11.379, 56: 11.398,
                       64: 11.352, 72: 11.353, 80: 11.386, 88: 11.4, 94: 11.369},
    ("sherman + speculative lookup", "b"): {1: 0.762, 8: 5.25, 16: 9.692, 24: 13.094, 32: 16.474, 40: 17.588,
                                            48: 18.043, 56: 18.041, 64: 16.984, 72: 14.854, 80: 13.894,
                                            88: 13.588, 94: 13.586},
    ("smart-bt", "b"): {1: 0.75, 8: 5.331, 16: 10.961, 24: 14.853, 32: 19.173, 40: 20.228, 48: 21.25, 56: 21.165,
                        64: 20.961, 72: 20.753, 80: 20.901, 88: 20.803, 94: 20.812},
    ("sherman", "c"): {1: 0.681, 8: 4.823, 16: 9.136, 24: 11.715, 32: 11.618, 40: 11.561, 48: 11.659, 56: 11.662,
                       64: 11.624, 72: 11.618, 80: 11.649, 88: 11.574, 94: 11.514},
    ("sherman + speculative lookup", "c"): {1: 0.844, 8: 5.968, 16: 10.401, 24: 13.936, 32: 18.106, 40: 18.818,
                                            48: 21.776, 56: 20.787, 64: 20.697, 72: 19.216, 80: 18.601,
                                            88: 17.656, 94: 16.806},
    ("smart-bt", "c"): {1: 0.825, 8: 5.738, 16: 11.532, 24: 15.608, 32: 20.72, 40: 23.166, 48: 23.184, 56: 23.296,
                        64: 23.257, 72: 23.212, 80: 23.186, 88: 23.262, 94: 23.162},
}
FIG12_SOURCE = "SMART artifact ae/raw-reference/fig12-ycsb-{}.csv"
# SMART compares against Sherman+ (§6.2.3: Sherman with a version on every cache line, because the
# NIC may write a node's lines in any order), not Sherman's own packed leaf
SHERMAN_PLUS_LEAF = "per-line"
# SMART's B+-tree scale-up runs one memory node (ae/collect/fig12abc-btree-scale-up.sh:
# MEMORY_NODES=1), the hash-table ones two: with two, each thread has two QPs and with QPs per
# thread twice as many threads share each doorbell
FIG12_MEMORY_NODES = 1


def spec_cache_slots(records: int) -> tuple[int, float]:
    """Slots of SMART-BT's speculative cache for a ``records``-key rack: as many as give the hit
    rate the artifact's 10^6 slots give over its 10^8 keys (workloads/keycache.py), and that rate."""
    from workloads.keycache import artifact_hit_rate, record_masses, slots_for_hit_rate
    target = artifact_hit_rate()
    return slots_for_hit_rate(record_masses(records, SMART_KEYS["zipfianitems"]), target), target


# SMART's B+-tree code (btree/btree.cpp, its Sherman+ and SMART-BT alike) writes an entry back with a
# synchronous WRITE and then releases the lock with a second one (HOCL_unlock, Option::Sync): the
# unlock is not combined into the write-back's doorbell as Sherman's own code does
BTREE_OPTIONS = {"combine": False}
# the B+-trees' read-heavy and read-only warm-up and window (ms; quick, full): they settle within a
# fraction of a millisecond, and 94 threads of them are the dearest points of the part
BTREE_UNCONTENDED_MS = {True: (0.1, 0.3), False: (0.3, 2.0)}


def _btree_scenarios(quick: bool, workloads, records=None, warm_ms=None,
                     measure_ms=None) -> tuple[int, float, dict]:
    """The speculative cache (slots, expected hit rate) and the scenario keywords of a fig12 or
    fig12def point, by workload and then by series of :data:`FIG12_SYSTEMS`: keys, warm-up, window,
    QP policy, SMART switches, and the tree's options (SMART-BT's cache, Sherman+'s per-line leaf,
    :data:`BTREE_OPTIONS`). YCSB A warms up as a contended workload: its updates queue on the hot
    leaves' locks for milliseconds before the rate settles (:data:`CONTENDED_MS`; SMART-BT at 94
    threads: 12.9 Mops after 0.1 ms of warm-up, 9.6 after 2, 7.1 after 6, 6.2 after 15), where B and
    C settle within a fraction of one."""
    records = records or (20_000 if quick else 100_000)
    slots, target = spec_cache_slots(records)

    def sizes(w: str) -> dict:
        warm, win = (CONTENDED_MS if w == "a" else BTREE_UNCONTENDED_MS)[quick]
        return {"records": records, "warm_ms": warm_ms if warm_ms is not None else warm,
                "measure_ms": measure_ms if measure_ms is not None else win}
    return slots, target, {
        w: {series: {**sizes(w), "qp_policy": policy, "smart": smart,
                     "options": {**({"spec_cache": slots} if system == "smart-bt"
                                    else {"leaf_layout": SHERMAN_PLUS_LEAF}), **BTREE_OPTIONS}}
            for series, system, smart, policy in FIG12_SYSTEMS}
        for w in workloads}


def fig12(quick: bool, progress, *, threads=None, records=None, warm_ms=None, measure_ms=None,
          workloads=("a", "b", "c"), jobs: int = 1) -> list[Row]:
    """Sherman (QPs per thread, SMART off), Sherman with SMART-BT's speculative lookup only, and
    SMART-BT (speculative lookup on the SMART framework) on YCSB A, B and C, zipf 0.99, one compute
    node, each thread count's Mops beside the artifact's (:data:`FIG12_ARTIFACT`). Published
    (§6.2.3): SMART-BT is 1.8x (read-heavy) and 2.0x (read-only) Sherman+ at 94 threads:
    speculative lookup reads a 64-byte entry instead of a 1 KB leaf, turning a bandwidth-bound
    workload IOPS-bound, and SMART's techniques lift the IOPS ceiling; on write-heavy "update
    operations dominate the execution time, and the throughput of SMART-BT is slightly higher than
    that of Sherman+" (the artifact: 1.16x at 94 threads). A ratio the text does not give is the
    artifact's at the same thread count."""
    threads = tuple(threads or ((8, 32, 94) if quick else (8, 16, 32, 48, 64, 94)))
    slots, target, kw = _btree_scenarios(quick, workloads, records, warm_ms, measure_ms)
    keys = kw[workloads[0]]["sherman"]["records"]
    progress(f"fig12: speculative cache of {slots} slots for {keys} keys (expected hit rate {target:.2f}, as the "
             f"artifact's 10^6 slots over 10^8 keys)")
    rows = []
    points = [(f"{series}, YCSB {w.upper()}", system, w, threads,
               {**kw[w][series], "memory_nodes": FIG12_MEMORY_NODES})
              for w in workloads for series, system, _, _ in FIG12_SYSTEMS]
    # the write-heavy racks run longest (their warm-up is milliseconds): start them first
    got = iter(map_points(_rack_points, points, jobs=jobs, progress=prefixed(progress, "fig12: "),
                          describe=lambda p: p[0], cost=lambda p: p[4]["warm_ms"] + p[4]["measure_ms"]))
    for w in workloads:
        at_max = {}
        for series, system, smart, policy in FIG12_SYSTEMS:
            pts = next(got)
            art = FIG12_ARTIFACT[(series, w)]
            for p in pts:
                rows.append(Row("fig12", f"{series}, YCSB {w.upper()}", p["threads"], "Mops", p["mops"],
                                **beside(art, p["threads"], FIG12_SOURCE.format(w))))
            at_max[series] = pts[-1]["mops"]
        base = at_max["sherman"]
        for series in ("sherman + speculative lookup", "smart-bt"):
            pub, src = None, None
            if series == "smart-bt" and w in FIG12_PUBLISHED:
                pub = FIG12_PUBLISHED[w]
            elif threads[-1] in FIG12_ARTIFACT[(series, w)]:
                pub = FIG12_ARTIFACT[(series, w)][threads[-1]] / FIG12_ARTIFACT[("sherman", w)][threads[-1]]
                src = FIG12_SOURCE.format(w)
            rows.append(Row("fig12", f"{series} / sherman, YCSB {w.upper()}", threads[-1], "ratio",
                            at_max[series] / base if base else None, pub, source=src))
    return rows


# --- Fig. 12(d)-(f): the B+-trees scaled out -------------------------------------------------------

# Total Mops of SMART's artifact (ae/raw-reference/fig12a-ycsb-{b,c}.csv, ae/collect/fig12def-btree-
# scale-out.sh): n = 1-8 compute nodes of 94 threads x 8 coroutines each and as many memory nodes
# (start_backend sets MEMORY_NODES to n), per series
SCALE_OUT_BTREE_ARTIFACT = {
    ("sherman", "b"): (11.409, 18.077, 25.358, 27.210, 29.642, 31.913, 32.245, 32.478),
    ("sherman + speculative lookup", "b"): (14.418, 17.433, 22.877, 29.566, 31.844, 33.556, 34.196, 34.692),
    ("smart-bt", "b"): (19.812, 30.647, 33.749, 37.055, 38.934, 40.260, 41.325, 41.884),
    ("sherman", "c"): (11.405, 21.415, 29.315, 40.007, 53.883, 38.427, 46.640, 51.449),
    ("sherman + speculative lookup", "c"): (17.549, 24.164, 29.302, 41.296, 58.652, 38.352, 43.329, 51.835),
    ("smart-bt", "c"): (23.106, 45.906, 66.953, 89.667, 109.614, 123.977, 144.279, 159.223),
}
SCALE_OUT_BTREE_SOURCE = "SMART artifact ae/raw-reference/fig12a-ycsb-{}.csv"
SCALE_OUT_BTREE_PUBLISHED = {"b": 1.1, "c": 2.0}   # SMART-BT / Sherman+ with 6,016 coroutines (§6.2.3)


def fig12def(quick: bool, progress, *, nodes=None, threads: int = 94, records=None, warm_ms=None,
             measure_ms=None, workloads=("b", "c"), jobs: int = 1) -> list[Row]:
    """fig12's three B+-trees scaled out (§6.2.3, Fig. 12(d)-(f)): n compute nodes of ``threads`` x
    8 coroutines each and n memory nodes, as the artifact's script runs them, YCSB B and C, zipf
    0.99: total Mops beside the artifact's (:data:`SCALE_OUT_BTREE_ARTIFACT`), and the text's
    SMART-BT / Sherman+ at the most nodes ("with 6,016 coroutines", eight nodes: 1.1x read-heavy,
    2.0x read-only)."""
    ns = tuple(nodes or ((1, 4, 8) if quick else (1, 2, 3, 4, 5, 6, 7, 8)))
    _, _, kw = _btree_scenarios(quick, workloads, records, warm_ms, measure_ms)
    points = [(f"{series}, YCSB {w.upper()}: {n} compute and {n} memory nodes x {threads} threads", system, w,
               threads, {**kw[w][series], "memory_nodes": n, "compute_nodes": n})
              for w in workloads for series, system, _, _ in FIG12_SYSTEMS for n in ns]
    got = iter(_fresh_points(points, prefixed(progress, "fig12def: "), jobs=jobs))
    rows = []
    for w in workloads:
        last = {}
        for series, *_ in FIG12_SYSTEMS:
            art = dict(enumerate(SCALE_OUT_BTREE_ARTIFACT[(series, w)], start=1))    # n nodes -> Mops
            for n in ns:
                m = last[series] = next(got)["mops"]
                rows.append(Row("fig12def", f"{series}, YCSB {w.upper()}", n, "Mops", m,
                                **beside(art, n, SCALE_OUT_BTREE_SOURCE.format(w))))
        base = last["sherman"]
        rows.append(Row("fig12def", f"smart-bt / sherman, YCSB {w.upper()}", ns[-1], "Mops ratio",
                        last["smart-bt"] / base if base else None,
                        SCALE_OUT_BTREE_PUBLISHED[w] if ns[-1] == 8 else None))
    return rows


# --- Fig. 13: work-request throttling on raw READs -------------------------------------------------

# Mops of SMART's artifact (ae/raw-reference/fig13a.csv by thread count at a batch of 16,
# fig13b.csv at 96 threads by batch size; its bench tool, test/test_rdma), per series: per-thread
# QP ("rdma-read-per-qp"), +ThdResAlloc ("rdma-read-per-doorbell"), +WorkReqThrot
# ("rdma-read-work-req-throt"); fixed C_max = 8 is the model's own series
FIG13A_ARTIFACT = {
    "per-thread QP": {1: 2.711, 8: 21.675, 16: 41.469, 24: 46.198, 32: 40.549, 40: 33.372, 48: 29.052, 56: 26.102,
                      64: 24.5, 72: 23.26, 80: 22.976, 88: 22.568, 96: 20.986},
    "+ThdResAlloc": {1: 2.54, 8: 20.896, 16: 41.556, 24: 61.022, 32: 77.65, 40: 89.8, 48: 102.939, 56: 110.9,
                     64: 110.867, 72: 107.724, 80: 99.296, 88: 86.581, 96: 80.141},
    "+WorkReqThrot": {1: 2.493, 8: 20.858, 16: 39.422, 24: 58.456, 32: 76.234, 40: 87.425, 48: 98.874, 56: 108.697,
                      64: 109.876, 72: 107.396, 80: 109.467, 88: 110.414, 96: 109.516},
}
FIG13B_ARTIFACT = {
    "+ThdResAlloc": {1: 32.891, 4: 80.753, 8: 110.957, 12: 104.516, 16: 79.514, 20: 88.815, 24: 77.719, 28: 66.105,
                     32: 54.993},
    "+WorkReqThrot": {1: 32.803, 4: 80.447, 8: 110.5, 12: 107.034, 16: 108.994, 20: 109.542, 24: 109.516,
                      28: 109.169, 32: 109.294},
}
FIG13_SOURCE = "SMART artifact ae/raw-reference/{}.csv"

def fig13(quick: bool, progress, *, threads=None, depths=None, warm_us=None, window_us=None,
          jobs: int = 1) -> list[Row]:
    """(a) 8-byte READ throughput by thread count at 16 outstanding WRs per thread (a batch of 16)
    for QPs per thread, a doorbell per thread (+ThdResAlloc) and that plus adaptive WR throttling
    (+WorkReqThrot); (b) at 96 threads by batch size, with fixed C_max = 8 as well. Published
    (§6.3): +ThdResAlloc reaches 110 Mops; with +WorkReqThrot throughput stays stable at 56
    threads and above, up to 5.0x per-thread QP and 1.9x +ThdResAlloc; in (b) +WorkReqThrot is
    the best configuration for batches above 8. Adaptive throttling uses Δ = 20 µs, hold 60 Δ,
    node scope; the warm-up covers the first update phase."""
    threads = threads or ((8, 32, 56, 64, 96) if quick else (8, 16, 24, 32, 48, 56, 64, 80, 96))
    depths = depths or ((4, 8, 16, 32, 64) if quick else (1, 2, 4, 8, 16, 32, 64))
    warm = int((warm_us or 200) * 1000)
    # quick: inside the first stable phase; full: one whole epoch (stable phase + the next update phase)
    win = int((window_us or (300 if quick else 1_320)) * 1000)
    configs = (("per-thread QP", "per_thread_qp", None), ("+ThdResAlloc", "per_thread_doorbell", None),
               ("+WorkReqThrot", "per_thread_doorbell", RIG_TUNER))
    configs_b = (("+ThdResAlloc", None), ("fixed C_max=8", {"throttle": "fixed", "c_max": 8}),
                 ("+WorkReqThrot", RIG_TUNER))
    t96 = max(threads)
    # every rig of (a) and (b) at once, side by side
    points = ([(f"fig13a: {name}, {t} threads", {"threads": t, "depth": 16, "smart": smart, "warmup": warm,
                                                 "window": win, "policy": policy})
               for name, policy, smart in configs for t in threads]
              + [(f"fig13b: {name}, batch {d}", {"threads": t96, "depth": d, "smart": smart, "warmup": warm,
                                                 "window": win})
                 for name, smart in configs_b for d in depths])
    measured = iter(map_points(_rig_reads, points, jobs=jobs, progress=progress, describe=lambda p: p[0]))
    rows, got = [], {}
    for name, policy, smart in configs:
        for t in threads:
            got[(name, t)] = m = next(measured)
            rows.append(Row("fig13a", name, t, "Mops", m,
                            **beside(FIG13A_ARTIFACT[name], t, FIG13_SOURCE.format("fig13a"))))
    # the text's 110 Mops is the bound cx6-200g's pcie.gbps was derived from (an input)
    rows.append(input_row("fig13a", "+ThdResAlloc", "peak", "Mops", max(got[("+ThdResAlloc", t)] for t in threads),
                          110.0))
    thr = [got[("+WorkReqThrot", t)] for t in threads]
    hi = [t for t in threads if t >= 56]
    if hi:
        lo_hi = min(got[("+WorkReqThrot", t)] for t in hi) / max(thr)
        rows.append(Row("fig13a", "+WorkReqThrot", "≥56 threads", "min / peak", lo_hi, 1.0))
        lo_db = min(got[("+ThdResAlloc", t)] for t in hi) / max(got[("+ThdResAlloc", t)] for t in threads)
        # the text gives no number for the fall past the peak: the artifact's, over the same thread counts
        art = FIG13A_ARTIFACT["+ThdResAlloc"]
        pub, src = None, None
        if all(t in art for t in threads):
            pub = min(art[t] for t in hi) / max(art[t] for t in threads)
            src = FIG13_SOURCE.format("fig13a")
        rows.append(Row("fig13a", "+ThdResAlloc", "≥56 threads", "min / peak", lo_db, pub, source=src))
    rows.append(Row("fig13a", "+WorkReqThrot / per-thread QP", "max", "ratio",
                    max(got[("+WorkReqThrot", t)] / got[("per-thread QP", t)] for t in threads), 5.0))
    rows.append(Row("fig13a", "+WorkReqThrot / +ThdResAlloc", "max", "ratio",
                    max(got[("+WorkReqThrot", t)] / got[("+ThdResAlloc", t)] for t in threads), 1.9))
    best_b = {}
    for name, smart in configs_b:
        for d in depths:
            best_b[(name, d)] = m = next(measured)
            # the artifact's batches ran 96 threads
            art = FIG13B_ARTIFACT.get(name, {}) if t96 == 96 else {}
            rows.append(Row("fig13b", f"{name}, {t96} threads", d, "Mops", m,
                            **beside(art, d, FIG13_SOURCE.format("fig13b"))))
    above8 = [d for d in depths if d > 8]
    if above8:
        wins = sum(best_b[("+WorkReqThrot", d)] >= 0.99 * best_b[("+ThdResAlloc", d)] for d in above8)
        rows.append(Row("fig13b", "+WorkReqThrot ≥ +ThdResAlloc", "batch > 8", "fraction of batches",
                        wins / len(above8), 1.0))
    return rows


# --- Fig. 14: conflict avoidance ---------------------------------------------------------------------

# The four configurations of SMART's artifact script for Fig. 14 (ae/collect/fig14bc.sh): "+Backoff"
# is exponential back-off without truncation (MAX_BACKOFF_CYCLE_LOG2=-1; here 2^20 t0, as the
# artifact's sds::Backoff does) and without coroutine throttling; "+DynLimit" adapts t_max by the
# retry rate; "+CoroThrot" is SMART-HT (everything on). All run with SMART-HT's scaled retry-rate
# window and t_max starting at t_M (nodes/systems/smart_ht/system.py); the fifth row starts t_max at t0,
# as the artifact does, to show what that transient does to coroutine throttling here.
UNTRUNCATED = {"max_exp": 20, "t_max_cycles": 4096 << 20}
# Mops of SMART's artifact by thread count (ae/raw-reference/fig14.csv, written by
# ae/collect/fig14-hashtable-conflict.sh: a fresh backend per point, the four configurations in
# this order)
FIG14_ARTIFACT = {
    "w/o ConflictAvoid": {1: 0.234, 16: 2.351, 32: 1.134, 48: 0.391, 64: 0.223, 80: 0.178, 88: 0.171, 96: 0.176},
    "+Backoff": {1: 0.237, 16: 1.737, 32: 1.878, 48: 1.699, 64: 1.506, 80: 1.472, 88: 1.292, 96: 1.429},
    "+DynLimit": {1: 0.246, 16: 2.411, 32: 2.679, 48: 2.643, 64: 2.59, 80: 2.525, 88: 2.482, 96: 2.445},
    "+CoroThrot (SMART-HT)": {1: 0.233, 16: 2.698, 32: 2.962, 48: 2.947, 64: 2.806, 80: 2.744, 88: 2.716,
                              96: 2.663},
}
FIG14_SOURCE = "SMART artifact ae/raw-reference/fig14.csv"
# The same runs rebuilt with CONFIG_STAT (ae/raw-reference/fig14bc.csv, -bc.sh): per thread count
# (CAS attempts per update, share of updates that did not retry); an update that never retried
# makes one attempt (1 thread: 1.02 attempts, 98.1 % without a retry), so retries per update are
# attempts - 1. The text's figures (96 threads: 11.5 retries without conflict avoidance, 1.1 and
# 93.3 % without a retry with all of it) stand where it gives them.
FIG14BC_ARTIFACT = {
    "w/o ConflictAvoid": {1: (1.02, 0.981), 16: (1.632, 0.652), 32: (2.876, 0.749), 48: (6.566, 0.412),
                          64: (8.732, 0.377), 80: (10.467, 0.366), 88: (10.981, 0.37), 96: (12.06, 0.354)},
    "+Backoff": {1: (1.017, 0.984), 16: (1.103, 0.918), 32: (1.114, 0.925), 48: (1.122, 0.933), 64: (1.126, 0.934),
                 80: (1.13, 0.936), 88: (1.131, 0.936), 96: (1.136, 0.938)},
    "+DynLimit": {1: (1.019, 0.982), 16: (1.534, 0.678), 32: (1.503, 0.717), 48: (1.544, 0.718), 64: (1.482, 0.78),
                  80: (1.498, 0.801), 88: (1.484, 0.826), 96: (1.493, 0.838)},
    "+CoroThrot (SMART-HT)": {1: (1.017, 0.984), 16: (1.458, 0.692), 32: (1.391, 0.779), 48: (1.372, 0.899),
                              64: (1.346, 0.924), 80: (1.363, 0.911), 88: (1.359, 0.93), 96: (1.378, 0.908)},
}
FIG14BC_SOURCE = "SMART artifact ae/raw-reference/fig14bc.csv"
FIG14_CONFIGS = (
    ("w/o ConflictAvoid", {"backoff": False, "coro_throttle": False}),
    ("+Backoff", {"backoff": True, "dyn_limit": False, "coro_throttle": False, **UNTRUNCATED}),
    ("+DynLimit", {"backoff": True, "dyn_limit": True, "coro_throttle": False}),
    ("+CoroThrot (SMART-HT)", {}),
    ("SMART-HT, t_max from t0", {"t_max_cycles": 4096}),
)


def _fig14_point(label: str, threads: int, smart, records: int, warm_ms: float, measure_ms: float) -> dict:
    """One fig14 point on a fresh rack: its throughput and latency, the RACE clients' update and
    retry counts, and SMART's t_max / c_max per thread as the measured window ended."""
    (p,), rack = _ycsb_rack("smart-ht", "a", (threads,), records=records, warm_ms=warm_ms, measure_ms=measure_ms,
                            qp_policy="per_thread_doorbell", properties=UPDATE_ONLY, smart=smart)
    stats = [c.statistics() for n in rack.nodes for c in n.clients]
    # SMART's state as the measured window ended: after the run, draining stragglers would have
    # moved t_max and c_max again
    sm = [st for n in rack.nodes for st in n.smart_at_step_end.get(p["plan_step"], ())]
    return {**p, "updates": sum(s.updates for s in stats), "retries": sum(s.cas_retries for s in stats),
            "retried": sum(s.updates_retried for s in stats),
            "t_max_ns": [s.t_max_ns for s in sm if s.t_max_ns is not None],
            "c_max_ops": [s.c_max_ops for s in sm if s.c_max_ops is not None]}


def fig14(quick: bool, progress, *, threads=None, records=None, warm_ms=None, measure_ms=None,
          configs=None, jobs: int = 1) -> list[Row]:
    """SMART-HT, 100% updates, zipf 0.99, one compute node, by conflict-avoidance configuration
    (adaptive WR throttling and a doorbell per thread in all): throughput, retries per update
    (failed slot CASes / updates, from the RACE clients; counted over warm-up and measurement)
    and the share of updates that retried at all. The warm-up (:data:`CONTENDED_MS`) lets
    hot-key updates pile up and the retry-rate controller settle.
    Published (§6.3, Fig. 14): with 96 threads 11.5 retries per update without conflict
    avoidance, 1.1 with all of it (93.3 % of updates without a retry); +Backoff keeps retries
    under 1.7; +DynLimit gives 1.6x the throughput of +Backoff; all techniques up to 1.67x
    +Backoff."""
    records = records or (20_000 if quick else 100_000)
    warm, win = CONTENDED_MS[quick]
    warm = warm_ms if warm_ms is not None else warm
    win = measure_ms if measure_ms is not None else win
    threads = threads or ((32, 96) if quick else (8, 16, 32, 64, 96))
    configs = configs or FIG14_CONFIGS
    points = [(f"{name}, {t} threads", t, smart, records, warm, win) for name, smart in configs for t in threads]
    got = iter(map_points(_fig14_point, points, jobs=jobs, progress=prefixed(progress, "fig14: "),
                          describe=lambda p: p[0]))
    rows, mops = [], {}
    for name, smart in configs:
        for t in threads:
            p = next(got)
            mops[(name, t)] = p["mops"]
            upd = p["updates"]
            text = t == 96
            pub_r = {"w/o ConflictAvoid": 11.5, "+CoroThrot (SMART-HT)": 1.1}.get(name) if text else None
            pub_q = {"+CoroThrot (SMART-HT)": 6.7}.get(name) if text else None
            bc = FIG14BC_ARTIFACT.get(name, {}).get(t)
            src_r = src_q = None
            if pub_r is None and bc is not None:
                pub_r, src_r = bc[0] - 1, FIG14BC_SOURCE
            if pub_q is None and bc is not None:
                pub_q, src_q = 100 * (1 - bc[1]), FIG14BC_SOURCE
            rows.append(Row("fig14", name, t, "Mops", p["mops"],
                            **beside(FIG14_ARTIFACT.get(name, {}), t, FIG14_SOURCE)))
            rows.append(Row("fig14", name, t, "retries / update", p["retries"] / upd if upd else None, pub_r,
                            source=src_r))
            rows.append(Row("fig14", name, t, "% updates retried", 100 * p["retried"] / upd if upd else None, pub_q,
                            source=src_q))
            rows.append(Row("fig14", name, t, "p99 µs", p["p99_us"]))
            if p["t_max_ns"]:
                rows.append(Row("fig14", name, t, "mean t_max µs (window end)", sum(p["t_max_ns"]) / len(p["t_max_ns"]) / 1000))
            if p["c_max_ops"]:
                rows.append(Row("fig14", name, t, "mean c_max ops (window end)", sum(p["c_max_ops"]) / len(p["c_max_ops"])))
    names = [n for n, _ in configs]
    t = max(threads)
    if "+Backoff" in names:
        b = mops[("+Backoff", t)]
        for name, pub in (("+DynLimit", 1.6), ("+CoroThrot (SMART-HT)", 1.67)):
            if name in names:
                rows.append(Row("fig14", f"{name} / +Backoff", t, "Mops ratio", mops[(name, t)] / b if b else None,
                                pub))
    if "w/o ConflictAvoid" in names and "+CoroThrot (SMART-HT)" in names:
        off = mops[("w/o ConflictAvoid", t)]
        rows.append(Row("fig14", "SMART-HT / w/o ConflictAvoid", t, "Mops ratio",
                        mops[("+CoroThrot (SMART-HT)", t)] / off if off else None))
    return rows


# --- Table 1: changing thread counts -----------------------------------------------------------------

TABLE1_PUBLISHED = {32: (79.3, 97.8), 64: (79.2, 95.1), 128: (77.9, 99.7), 256: (74.7, 101.0),
                    512: (73.8, 105.8), 1024: (71.8, 109.3), 2048: (65.7, 109.6)}   # w/o, w/ WorkReqThrot
TABLE1_THREADS = (36, 48, 64, 80, 96)


def table1(quick: bool, progress, *, intervals_ms=None, duration_us=None, depth: int = 64,
           jobs: int = 1) -> list[Row]:
    """8-byte READs, a batch of 64 per thread, the number of active threads changing every X
    between 36 and 96 (a seeded random sequence of 36/48/64/80/96, the same for both
    configurations; threads turned off call ``idle()``, turned on ``resume()``), with and without
    adaptive WR throttling. The paper's intervals (32–2048 ms, against an epoch of 66 x 8 ms) are
    scaled by the tuner's Δ (8 ms -> 20 µs, x 1/400): 80 µs .. 5.12 ms against an epoch of 1.32 ms.
    Published: Table 1 (w/o 79.3 .. 65.7, w/ 97.8 .. 109.6 Mops)."""
    import random
    intervals_ms = intervals_ms or ((32, 128, 512) if quick else tuple(TABLE1_PUBLISHED))
    configs = (("w/o WorkReqThrot", None, 0), ("w/ WorkReqThrot", RIG_TUNER, 1))
    points, labels = [], []
    for iv in intervals_ms:
        step = int(iv * 1e6 / RIG_SCALE)
        dur = int((duration_us * 1000) if duration_us else max(3 * step, (3_000_000 if quick else 10_000_000)))
        rnd = random.Random(iv)
        schedule = [(k * step, rnd.choice(TABLE1_THREADS)) for k in range(dur // step + 1)]
        for name, smart, col in configs:
            points.append((f"table1: {name}, every {step / 1000:g} µs",
                           {"threads": max(TABLE1_THREADS), "depth": depth, "smart": smart, "warmup": 0,
                            "window": dur, "schedule": schedule}))
            labels.append((name, f"{iv} ms -> {step / 1000:g} µs", TABLE1_PUBLISHED.get(iv, (None, None))[col]))
    measured = map_points(_rig_reads, points, jobs=jobs, progress=progress, describe=lambda p: p[0])
    return [Row("table1", name, x, "Mops", m, pub) for (name, x, pub), m in zip(labels, measured)]


# --- the paper's figures (cluster.experiments.figures; drawn by --plot, dmrack plot, dmrack report) ---

THREADS = "threads (one compute node)"
_FIG7 = {"a": "write-heavy", "b": "read-heavy", "c": "read-only"}
FIGURES = [
    Figure("fig3", "fig3", "Mops", "Fig. 3(a): 8-byte READ throughput by QP policy", THREADS, "throughput (Mops)",
           series=tuple(s for s, *_ in FIG3_POLICIES)),
    Figure("fig3b", "fig3", "Mops", "Fig. 3(b): 8-byte WRITE throughput by QP policy", THREADS, "throughput (Mops)",
           series=tuple(f"{s}, WRITE" for s, *_ in FIG3_POLICIES)),
    Figure("fig4", "fig4", "Mops", "Fig. 4: READ and WRITE throughput by outstanding work requests per thread",
           "outstanding WRs per thread", "throughput (Mops)", xlog=True, xbase=2),
    Figure("fig5a", "fig5", ("Mops", "p99 µs"), "Fig. 5a: RACE, 100 % updates, zipf 0.99, by thread count",
           THREADS, ("throughput (Mops)", "p99 latency (µs)"), ylog=(False, True), series=("race, zipf 0.99",),
           xrefs=("threads at peak",)),
    Figure("fig5b", "fig5", ("Mops", ("p50 µs", "p99 µs")), "Fig. 5b: RACE, 100 % updates, 16 threads, by zipf θ",
           "key skew (zipf θ; 0 = uniform)", ("throughput (Mops)", "latency (µs)"), ylog=(False, True),
           series=("race, 16 threads",)),
    *[Figure(f"fig7{w}", "fig7", "Mops", f"Fig. 7{w}: RACE vs SMART-HT, YCSB {w.upper()} ({name}), zipf 0.99",
             THREADS, "throughput (Mops)", series=(f"race, {name}", f"smart-ht, {name}"),
             refs=("peak Mops", "max Mops (published: stays under)"), peak_at="threads at peak")
      for w, name in _FIG7.items()],
    *[Figure(f"fig7{k}", "fig7def", "Mops", f"Fig. 7{k}: RACE vs SMART-HT scaled out, YCSB {w.upper()} ({name}), "
             "96 threads per compute node", "compute nodes (96 threads x 8 coroutines each)", "throughput (Mops)",
             series=(f"race, {name}", f"smart-ht, {name}"))
      for k, (w, name) in zip("def", _FIG7.items())],
    *[Figure(f"fig8{w}", "fig8", "Mops", f"Fig. 8{w}: SMART-HT's techniques one at a time, YCSB {w.upper()} ({name})",
             THREADS, "throughput (Mops)", series=tuple(f"{s}, {name}" for s, *_ in FIG8_SERIES))
      for w, name in _FIG7.items()],
    *[Figure(f"fig12{k}", "fig12def", "Mops", f"Fig. 12{k}: B+-trees scaled out, YCSB {w.upper()}, zipf 0.99, "
             "94 threads per compute node", "compute and memory nodes (n of each)", "throughput (Mops)",
             series=tuple(f"{s}, YCSB {w.upper()}" for s, *_ in FIG12_SYSTEMS))
      for k, w in (("e", "b"), ("f", "c"))],
    *[Figure(f"fig12{w}", "fig12", "Mops", f"Fig. 12{k}: B+-trees, YCSB {w.upper()}, zipf 0.99", THREADS,
             "throughput (Mops)", series=tuple(f"{s}, YCSB {w.upper()}" for s, *_ in FIG12_SYSTEMS))
      for k, w in (("a", "a"), ("b", "b"), ("c", "c"))],
    Figure("fig9", "fig9", ("Mops", ("p50 µs", "p99 µs")), "Fig. 9: RACE vs SMART-HT, YCSB C at 96 x 8, by idle time "
           "per operation", "idle µs after each operation", ("throughput (Mops)", "latency (µs)"), xs="category",
           ylog=(False, True), series=("race", "smart-ht")),
    *[Figure(f"fig10{k}", "fig10", "Mtxn/s", f"Fig. 10{k}: FORD+ vs SMART-DTX, {w} (PMem), by thread count",
             THREADS, "committed Mtxn/s", series=(f"ford+, {w}", f"smart-dtx, {w}"), refs=("peak Mtxn/s",),
             peak_at="threads at peak")
      for k, w in (("a", "smallbank"), ("b", "tatp"))],
    *[Figure(f"fig11{k}", "fig11", ("Mtxn/s", "p50 µs"), f"Fig. 11{k}: {w} at 96 x 8, by idle time per commit",
             "idle µs after each commit", ("committed Mtxn/s", "median latency (µs)"), xs="category",
             series=(f"ford+, {w}", f"smart-dtx, {w}"))
      for k, w in (("a", "smallbank"), ("b", "tatp"))],
    Figure("fig13a", "fig13a", "Mops", "Fig. 13a: 8-byte READs, 16 outstanding WRs per thread", THREADS,
           "throughput (Mops)", refs=("Mops",)),
    Figure("fig13b", "fig13b", "Mops", "Fig. 13b: 8-byte READs at 96 threads by batch size",
           "outstanding WRs per thread (batch)", "throughput (Mops)", xlog=True, xbase=2),
    Figure("fig14a", "fig14", "Mops", "Fig. 14: conflict avoidance, 100 % updates, zipf 0.99: throughput",
           THREADS, "throughput (Mops)"),
    Figure("fig14b", "fig14", "retries / update", "Fig. 14: conflict avoidance: retries per update", THREADS,
           "failed CASes per update"),
    Figure("table1", "table1", "Mops", "Table 1: READs while the active thread count changes every X",
           "interval X (paper -> emulated)", "throughput (Mops)", xs="category"),
]


# --- Figs. 10 and 11: FORD+ vs SMART-DTX (cluster/experiments/smart_dtx.py) ------------------------

def fig10(quick: bool, progress, *, jobs: int = 1, **kw) -> list[Row]:
    """FORD+ against SMART-DTX, committed Mtxn/s by thread count on SmallBank and TATP (PMem)."""
    from cluster.experiments.smart_dtx import fig10 as run
    return run(quick, progress, jobs=jobs, **kw)


def fig11(quick: bool, progress, *, jobs: int = 1, **kw) -> list[Row]:
    """FORD+ against SMART-DTX at 96 x 8: throughput against median latency by idle time."""
    from cluster.experiments.smart_dtx import fig11 as run
    return run(quick, progress, jobs=jobs, **kw)


EXPERIMENTS = {"fig3": fig3, "fig4": fig4, "fig5": fig5, "fig7": fig7, "fig7def": fig7def, "fig8": fig8, "fig9": fig9,
               "fig10": fig10, "fig11": fig11, "fig12": fig12, "fig12def": fig12def, "fig13": fig13, "fig14": fig14,
               "table1": table1}


# the experiments made of fresh racks, which can run side by side (cluster.experiments.pointpool)
SIDE_BY_SIDE = ("fig5", "fig7", "fig7def", "fig8", "fig9", "fig10", "fig11", "fig12", "fig12def", "fig13", "fig14",
                "table1")


def setup(quick: bool) -> dict:
    """The racks of this reproduction, for the run record (cluster.experiments.provenance)."""
    warm, win = CONTENDED_MS[quick]
    return {"profile": "cx6-200g", "seed": 1,
            "spec": "co-located racks: 1 compute node (1..96 threads x 8 coroutines; fig7def 1-6 of 96 threads, "
                    "fig12def 1-8 of 94 threads with as many memory nodes), 2 memory nodes; "
                    "a raw-verbs rig of 1 compute and 1 memory node for fig3, fig4, fig13, table1",
            "scale": f"{20_000 if quick else 100_000:,} keys (paper: 100 M); skewed updates measured for "
                     f"{win:g} ms after {warm:g} ms of warm-up (paper: 10 s runs); rig times x 1/{RIG_SCALE}"}


EXPERIMENT = reproduction(
    "smart", "SMART", title="SMART (ASPLOS'24): Fig. 3, 4, 5, 7 (a-f), 8, 9, 10, 11, 12 (a-c, e-f), 13, 14 and Table 1",
    parts=EXPERIMENTS, side_by_side=SIDE_BY_SIDE, setup=setup, figures=FIGURES, profiles=("cx6-200g",),
    # what `dmrack sensitivity smart` runs per knob: Figs. 3 and 4 (doorbells, QPs, WQE cache: seconds)
    # and Fig. 5 (RACE's hot-key collapse, about 46 s) with --quick
    headline=("fig3", "fig4", "fig5"))
