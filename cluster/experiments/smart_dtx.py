"""SMART §6.2.2 (Figs. 10 and 11): FORD+ against SMART-DTX on SmallBank and TATP, on co-located racks.

One point is one fresh rack (SMART's scripts restart the memory blades per point): ``cx6-200g``,
one compute node running ``threads x 8`` coordinators (``DEPTH=8``, ae/collect/common.sh), two
memory nodes of Optane PMem holding the tables' primaries and backups and the undo logs
(SMART's 2 blades, ``[memory] kind = "nvm"``). FORD+ runs ``per_thread_qp`` with SMART off,
SMART-DTX ``per_thread_doorbell`` and its ``smart_defaults`` (nodes/systems/smart_dtx).

Each coordinator runs the artifact's closed loop (dtx/*/bench.cpp): draw a transaction, run it,
draw the next (an abort is not retried); with ``idle_us`` a coroutine idles that long after each
*committed* transaction (Fig. 11's ``IDLE_USEC``, bench.cpp:271-281). Throughput is committed
transactions that finished in the measured window over the window; latency the median of those
(begin to commit, coroutine-throttling waits included, idle not).

Scaled, and why:

* keys: SmallBank keeps its 4,000 hot accounts (90 % of transactions, where all contention is)
  and 20,000 accounts in all (100,000 in FORD) with 0.2 buckets per account (FORD 2: a bucket READ
  happens only on an address-cache miss, and the caches start warm, below); TATP 5,000
  subscribers (quick) or 20,000 (FORD 100,000) with its bucket counts scaled alike;
* warm-up: FORD runs 50,000 transactions per thread to fill each thread's address cache first
  (bench.cpp:241); here every coordinator starts with every loaded record's address cached;
* time: a window of a few hundred virtual microseconds after a warm-up that covers the adaptive
  tuner's first training phase (SMART-HT's scaled Δ = 50 µs x 6 candidates); the artifact runs
  60 M attempts;
* CPU: the coordinator's own work per attempt is priced from the profile's ``[software]`` table
  (``nodes/systems/ford/client.py``: per attempt, per record, per read-write record), as every
  system's; no constant is fitted to the figure. One thread's attempt rate is a row beside the
  artifact's (ae/raw-reference/fig10-*.csv: SmallBank 0.247 M, TATP 0.517 M attempts/s), a check.
"""

from __future__ import annotations

import random

import numpy as np

#: the artifact's one-thread attempt rates (M/s), ae/raw-reference/fig10-smallbank.csv and
#: fig10-tatp.csv: a check row, not a calibration
ONE_THREAD_ATTEMPTS = {"smallbank": 0.247, "tatp": 0.517}
#: SmallBank's tables are loaded as this many transactions leave them (workloads/smallbank.py)
WARM_TXNS = 200_000
SYSTEMS = {"ford+": ("ford", "per_thread_qp"), "smart-dtx": ("smart-dtx", "per_thread_doorbell")}
COROUTINES = 8


def workload(name: str, quick: bool):
    if name == "smallbank":
        from workloads.smallbank import SmallBank
        # the tables as a long run leaves them (emptied hot accounts: SendPayment's aborts), as the
        # artifact's 60 M transactions do; 13 % aborts level off after ~150,000 (docs/dtx.md)
        return SmallBank(accounts=20_000, hot_accounts=4_000, buckets_per_account=0.2, warm_transactions=WARM_TXNS)
    from workloads.tatp import Tatp
    return Tatp(subscribers=5_000 if quick else 20_000, buckets_scale=1.0)


class _Rack:
    """The co-located rack of one point: cn0 and two PMem memory nodes, the workload's tables set
    up and loaded, ``threads x COROUTINES`` coordinators (what cluster/correctness/txn_suite.py's
    TxnRig builds for the checks, without the histories; experiments sit below the correctness
    package in the import floors)."""

    def __init__(self, cls, wl, opts, threads: int, policy: str, seed: int):
        from shm.coro import NodeRdma
        from shm.fabric import Fabric, NodeSpec
        from shm.profile import load_profile
        from shm.sim.env import Environment
        from shm.verbs import VerbsHost
        buf = 256 << 10
        nodes = [NodeSpec("cn0", "compute", (threads + 4) * buf)] + \
            [NodeSpec(f"mn{i}", "memory", 96 << 20, memory_kind="nvm") for i in range(2)]
        self.fab = Fabric.create(load_profile("cx6-200g"), nodes)
        try:
            opts = cls.check_options(dict(opts), f"system {cls.name!r}")
            self.layout = cls.setup_tables(self.fab, [1, 2], opts, wl.tables())
            for t in wl.tables():
                cls.load(self.fab, self.layout, t.name, wl.rows(t.name))
            self.env = Environment(seed=seed)
            node = NodeRdma(VerbsHost(self.fab, self.env), "cn0", buffer_bytes=buf, policy=policy,
                            smart=cls.smart_defaults or None)
            self.threads = [node.thread() for _ in range(threads)]
            if policy != "per_thread_doorbell":
                # FORD's ResourceManager connects memory node by memory node at start, a QP per
                # thread (dtx/manager.h: connect(node_id, ..., max_threads)): threads 0-3's QPs to
                # mn0 take the context's low-latency doorbells (NodeRdma.connect)
                node.connect(["mn0", "mn1"])
            self.clients = [cls.client(self.fab, self.layout, t, opts) for t in self.threads]
            for c in self.clients:
                c.set_codecs(wl.codecs())
            self.cos = [[t.coroutine() for _ in range(COROUTINES)] for t in self.threads]
        except BaseException:
            self.fab.close()
            raise

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.fab.close()

    def each(self, loop):
        i = 0
        for cl, cos in zip(self.clients, self.cos):
            for co in cos:
                self.env.process(loop(cl, co, i))
                i += 1
        self.env.run()


def dtx_point(label: str, series: str, wl_name: str, threads: int, quick: bool, warm_us: float, window_us: float,
              idle_us: float = 0.0, seed: int = 1) -> dict:
    """One point on a fresh rack: committed Mtxn/s, attempts, abort rate, p50/p99 µs of commits."""
    from nodes.systems.ford import FordSystem
    from nodes.systems.smart_dtx import SmartDtxSystem
    system_name, policy = SYSTEMS[series]
    cls = {"ford": FordSystem, "smart-dtx": SmartDtxSystem}[system_name]
    wl = workload(wl_name, quick)
    opts = {"log_threads": max(threads, 1), "log_slice_bytes": 64 << 10}
    rig = _Rack(cls, wl, opts, threads, policy, seed)
    with rig:
        warm_cache = {}
        for t in wl.tables():
            warm_cache.update(cls.addresses(rig.fab, rig.layout, t.name))
        for c in rig.clients:
            c.cache = warm_cache          # FORD's warm-up fills each thread's cache; here all start full
        start, end = int(warm_us * 1000), int((warm_us + window_us) * 1000)
        idle = int(idle_us * 1000)
        lat: list = []
        counts = [0, 0]                   # attempts, commits finishing in the window

        def loop(client, co, i):
            rng = random.Random(seed * 1_000_003 + i)
            env = co.env
            # the artifact idles by spinning in the thread's run queue (bench.cpp's IdleExecution)
            spin = co.thread.spin_idle
            if idle:                      # desynchronise the idlers (the artifact's long runs spread them)
                yield from spin(int(rng.random() * idle))
            while env.now < end:
                name, body, args = wl.next(rng)
                t0 = env.cpu_free_at()     # latency to the end of its work, trailing CPU included
                out = yield from client.run(co, body, *args, name=name)
                t1 = env.now
                if start <= t1 < end:
                    counts[0] += 1
                    if out.committed:
                        counts[1] += 1
                        lat.append(env.cpu_free_at() - t0)
                if out.committed and idle:
                    yield from spin(idle)

        rig.each(loop)
    win_s = window_us * 1e-6
    lat_us = np.array(lat) / 1000 if lat else np.array([np.nan])
    return {"label": label, "series": series, "workload": wl_name, "threads": threads, "idle_us": idle_us,
            "mtxn": counts[1] / win_s / 1e6, "attempts_m": counts[0] / win_s / 1e6,
            "abort_rate": 1 - counts[1] / counts[0] if counts[0] else None,
            "p50_us": float(np.median(lat_us)), "p99_us": float(np.percentile(lat_us, 99))}


def _point(label, series, wl_name, threads, quick, warm_us, window_us, idle_us):
    return dtx_point(label, series, wl_name, threads, quick, warm_us, window_us, idle_us)


# --- published: madsys-dev/smart ae/raw-reference (columns counted from 0: committed Mtxn/s = 4,
# p50 µs = 5, abort rate = 7) ---
_T = (1, 8, 16, 24, 32, 40, 48, 56, 64, 72, 80, 88, 96)
FIG10_ARTIFACT = {   # (committed Mtxn/s, abort rate) by thread count, 8 coroutines each
    ("smallbank", "ford+"): dict(zip(_T, (
        (0.212, 0.141), (1.044, 0.152), (1.559, 0.163), (2.120, 0.173), (1.505, 0.181), (1.269, 0.187),
        (1.433, 0.197), (1.147, 0.205), (1.139, 0.211), (1.071, 0.219), (0.988, 0.223), (0.558, 0.226),
        (0.803, 0.239)))),
    ("smallbank", "smart-dtx"): dict(zip(_T, (
        (0.204, 0.143), (0.944, 0.152), (1.889, 0.162), (2.550, 0.173), (3.056, 0.183), (3.552, 0.192),
        (3.939, 0.203), (4.190, 0.210), (4.265, 0.220), (4.648, 0.231), (4.575, 0.240), (4.618, 0.249),
        (4.628, 0.258)))),
    ("tatp", "ford+"): dict(zip(_T, (
        (0.388, 0.249), (1.973, 0.251), (3.264, 0.252), (4.501, 0.253), (4.305, 0.254), (3.955, 0.255),
        (4.644, 0.255), (2.792, 0.256), (3.250, 0.256), (3.206, 0.257), (2.446, 0.257), (1.890, 0.257),
        (2.160, 0.258)))),
    ("tatp", "smart-dtx"): dict(zip(_T, (
        (0.370, 0.251), (1.967, 0.252), (3.453, 0.253), (4.590, 0.254), (5.510, 0.254), (5.978, 0.255),
        (5.998, 0.256), (6.111, 0.256), (6.474, 0.257), (6.653, 0.257), (6.696, 0.258), (6.634, 0.258),
        (6.504, 0.259)))),
}
#: SMART §6.2.2's text: FORD+ peaks at 24 (SmallBank) and 32 (TATP) threads; SmallBank FORD+ at 96
#: threads 1.0 M txn/s; SMART-DTX up to 5.2x (SmallBank) and 2.6x (TATP) FORD+
FIG10_TEXT = {"peak threads": {"smallbank": 24, "tatp": 32}, "ford+ at 96": {"smallbank": 1.0},
              "max ratio": {"smallbank": 5.2, "tatp": 2.6}}
FIG11_IDLE = (0, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192)     # fig11-dtx-scale-latency.sh
FIG11_ARTIFACT = {   # (committed Mtxn/s, p50 µs) by IDLE_USEC, 96 threads x 8
    ("smallbank", "ford+"): dict(zip(FIG11_IDLE, ((0.893, 453.584), (0.939, 385.309), (0.913, 380.472),
                                                  (0.963, 368.263), (1.028, 246.559), (0.915, 198.076),
                                                  (1.264, 33.617), (0.722, 23.443), (0.367, 21.236),
                                                  (0.185, 20.587), (0.093, 20.942)))),
    ("smallbank", "smart-dtx"): dict(zip(FIG11_IDLE, ((4.541, 137.484), (4.585, 107.992), (4.454, 96.605),
                                                      (4.137, 79.752), (3.279, 68.907), (2.179, 60.798),
                                                      (1.313, 32.836), (0.722, 23.520), (0.368, 20.034),
                                                      (0.185, 19.726), (0.093, 19.137)))),
    ("tatp", "ford+"): dict(zip(FIG11_IDLE, ((2.780, 86.495), (3.471, 52.882), (3.225, 50.322), (3.530, 41.238),
                                             (3.395, 29.796), (2.385, 20.378), (1.399, 12.119), (0.727, 8.538),
                                             (0.368, 6.701), (0.185, 5.675), (0.093, 5.948)))),
    ("tatp", "smart-dtx"): dict(zip(FIG11_IDLE, ((6.540, 43.990), (5.955, 36.118), (5.493, 36.927),
                                                 (4.713, 32.752), (3.686, 27.085), (2.446, 19.400),
                                                 (1.388, 12.365), (0.728, 7.720), (0.368, 6.562),
                                                 (0.185, 5.686), (0.093, 5.976)))),
}
#: SMART §6.2.2's text: SMART-DTX's median latency -45.8 % (SmallBank) and -77.0 % (TATP)
FIG11_TEXT = {"smallbank": -45.8, "tatp": -77.0}
WORKLOADS = ("smallbank", "tatp")


def _windows(quick: bool, idle_us: float = 0.0) -> tuple[float, float]:
    """(warm-up, window) µs: the warm-up covers the adaptive tuner's first training (6 x 50 µs) and,
    with idling, the coroutines' first desynchronised idle periods; the window holds several."""
    warm, win = (350.0, 200.0) if quick else (400.0, 600.0)
    return warm + 2 * idle_us, max(win, 4 * idle_us)


def fig10(quick: bool, progress, *, threads=None, workloads=WORKLOADS, jobs: int = 1) -> list:
    """Committed Mtxn/s by thread count (8 coroutines each), FORD+ and SMART-DTX, SmallBank and TATP
    (module docstring for the rack). Published: the artifact's points at the same thread counts
    (ae/raw-reference/fig10-*.csv) and the text's peaks and ratios."""
    from cluster.experiments.pointpool import map_points
    from cluster.experiments.progress import prefixed
    from cluster.experiments.rows import Row
    threads = tuple(threads or ((1, 8, 24, 48, 96) if quick else (1, 8, 16, 24, 32, 48, 64, 80, 96)))
    warm, win = _windows(quick)
    points = [(f"{w}, {s}: {t} threads", s, w, t, quick, warm, win, 0.0)
              for w in workloads for s in SYSTEMS for t in threads]
    got = iter(map_points(_point, points, jobs=jobs, progress=prefixed(progress, "fig10: "),
                          describe=lambda p: p[0]))
    rows = []
    for w in workloads:
        by = {}
        for s in SYSTEMS:
            pts = [next(got) for _ in threads]
            by[s] = {p["threads"]: p for p in pts}
            series = f"{s}, {w}"
            for p in pts:
                rows.append(Row("fig10", series, p["threads"], "Mtxn/s", p["mtxn"],
                                FIG10_ARTIFACT[(w, s)].get(p["threads"], (None, None))[0]))
            for p in pts:
                rows.append(Row("fig10", series, p["threads"], "abort rate", p["abort_rate"],
                                FIG10_ARTIFACT[(w, s)].get(p["threads"], (None, None))[1]))
            if s == "ford+" and 1 in by[s]:
                # the coordinator's CPU is priced from the profile, not fitted: one thread's attempt
                # rate is a check beside the artifact's
                rows.append(Row("fig10", series, 1, "attempts M/s, 1 thread", by[s][1]["attempts_m"],
                                ONE_THREAD_ATTEMPTS[w]))
            best = max(pts, key=lambda p: p["mtxn"])
            pub_best = max(((t, v[0]) for t, v in FIG10_ARTIFACT[(w, s)].items()), key=lambda kv: kv[1])
            rows.append(Row("fig10", series, "peak", "peak Mtxn/s", best["mtxn"], pub_best[1]))
            rows.append(Row("fig10", series, "peak", "threads at peak", best["threads"],
                            FIG10_TEXT["peak threads"][w] if s == "ford+" else pub_best[0]))
            top = max(threads)
            rows.append(Row("fig10", series, f"{top}/peak", "Mtxn/s ratio", by[s][top]["mtxn"] / best["mtxn"],
                            FIG10_ARTIFACT[(w, s)][96][0] / pub_best[1] if top == 96 else None))
        if max(threads) == 96 and w in FIG10_TEXT["ford+ at 96"]:
            rows.append(Row("fig10", f"ford+, {w}", 96, "Mtxn/s (text)", by["ford+"][96]["mtxn"],
                            FIG10_TEXT["ford+ at 96"].get(w)))
        ratios = {t: by["smart-dtx"][t]["mtxn"] / by["ford+"][t]["mtxn"] for t in threads if by["ford+"][t]["mtxn"]}
        t_max = max(ratios, key=ratios.get)
        rows.append(Row("fig10", f"smart-dtx / ford+, {w}", t_max, "max ratio", ratios[t_max],
                        FIG10_TEXT["max ratio"][w]))
    return rows


def fig11(quick: bool, progress, *, idles=None, threads: int = 96, workloads=WORKLOADS, jobs: int = 1) -> list:
    """96 x 8 coordinators, each idling ``IDLE_USEC`` after every committed transaction (swept):
    committed Mtxn/s and median latency per idle time, FORD+ and SMART-DTX, SmallBank and TATP.
    Published: the artifact's points (ae/raw-reference/fig11-*.csv) and the text's median-latency
    reductions (-45.8 %, -77.0 %), set beside the reduction at idle 0 (the loaded end)."""
    from cluster.experiments.pointpool import map_points
    from cluster.experiments.progress import prefixed
    from cluster.experiments.rows import Row
    idles = tuple(idles if idles is not None else ((0, 64, 512, 2048) if quick else FIG11_IDLE))
    points = [(f"{w}, {s}: idle {i} µs", s, w, threads, quick, *_windows(quick, i), float(i))
              for w in workloads for s in SYSTEMS for i in idles]
    got = iter(map_points(_point, points, jobs=jobs, progress=prefixed(progress, "fig11: "),
                          describe=lambda p: p[0]))
    rows = []
    for w in workloads:
        by = {}
        for s in SYSTEMS:
            by[s] = {}
            for i in idles:
                p = next(got)
                by[s][i] = p
                pub = FIG11_ARTIFACT[(w, s)].get(i, (None, None)) if threads == 96 else (None, None)
                series = f"{s}, {w}"
                rows.append(Row("fig11", series, f"idle {i} µs", "Mtxn/s", p["mtxn"], pub[0]))
                rows.append(Row("fig11", series, f"idle {i} µs", "p50 µs", p["p50_us"], pub[1]))
        if 0 in idles:
            f, d = by["ford+"][0]["p50_us"], by["smart-dtx"][0]["p50_us"]
            rows.append(Row("fig11", f"smart-dtx vs ford+, {w}", "idle 0 µs", "p50 change %",
                            100 * (d - f) / f if f else None, FIG11_TEXT[w]))
    return rows
