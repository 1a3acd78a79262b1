"""``dmrack bench speed``: how fast the emulator runs, in real time, layer by layer.

Every experiment and every user's study is bounded by emulated verbs per real second, so this
bench measures them on the host at hand, one row per layer, with the same closed loop wherever
it can (threads posting ``depth`` 8-byte READs to random addresses of one memory node and
waiting for them, ``cx6-200g``):

* ``one process``: the coroutine API (``read``, ``sync``) in one process; addresses come from a
  precomputed list per client, as cheap as the SimPy model's, so the row measures the emulator
  and not ``numpy.random`` (``one process, numpy addresses``: two ``rng.integers`` calls per
  verb, as the closed loops of ``bench verbs`` draw them);
* ``raw verbs``: the pyverbs layer (``QP.post_send`` of ``depth`` READ work requests, ``CQ.wait``
  for all of them, one ``CQ.poll``);
* ``two processes``: two compute-node processes under the default lax sync window, and under
  wider windows (which let the processes drift further apart and wait less);
* ``simpy``: the textbook SimPy model of the same loop (a capacity-limited NIC, a fixed round
  trip; the ``bench`` extra), drawing addresses as ``one process`` does;
* ``race ycsb-a`` and ``sherman ycsb-a``: a co-located rack loading and running YCSB-A (operations
  and verbs per real second of the whole run); ``race bulk load`` and ``sherman bulk load``: keys
  per real second of a load step with ``bulk = true``;
* ``rack``: ``examples/minimal.toml`` (the default rack with a bounded run) as a rack of processes,
  as ``dmrack run`` runs it, against the same scenario co-located, verbs per real second over the
  steps; and the rack of processes without the adaptive spin of waits on another node's clock
  (``sync.spin_us = 0``, nodes/runtime/sync.py), what it ran before the spin existed. The target:
  processes at least as fast as co-located (on a machine with a core per busy node);
* ``reproduce smart --quick fig12``: the wall time of one reproduction part (``fig3``, ``fig4``
  and ``fig13`` too without ``--quick``).

Virtual-time results never depend on these numbers; tests check that each row is measured, never
how fast. The targets of the emulation-speed issue sit in the published column (500 k verbs per
real second per process through the coroutine API, 250 k through raw verbs).
"""

from __future__ import annotations

import time

import numpy as np

from cluster.experiments.figures import Figure
from cluster.experiments.rows import Row, bench

DEPTH = 8
TARGET_COROUTINE = 500_000
TARGET_RAW = 250_000
ADDRESSES = 1024                 # precomputed random addresses per client, cycled


def _addresses(m: int, words: int, seed: int) -> list[int]:
    from shm.fabric import gaddr
    rng = np.random.default_rng(seed)
    return [gaddr(m, int(w) * 64) for w in rng.integers(words, size=ADDRESSES)]


def _fair_client(env, co, addrs: list, window_ns: int, done: list):
    """The closed loop's client: ``DEPTH`` 8-byte READs from its precomputed addresses (cycled),
    wait for them, again until ``window_ns``; counts the verbs completed in ``done[0]``."""
    i, n = 0, len(addrs)
    while env.now < window_ns:
        for _ in range(DEPTH):
            co.read(addrs[i], 8)
            i = i + 1 if i + 1 < n else 0
        yield co.sync()
        done[0] += DEPTH


def coroutine_loop(threads: int, window_ns: int, *, numpy_addresses: bool = False) -> tuple[int, float]:
    """One process, the coroutine API: (verbs completed, real seconds) for ``window_ns`` of
    virtual time."""
    from cluster.experiments.verbs import Rig
    from shm.coro import NodeRdma
    from shm.fabric import gaddr
    from shm.profile import load_profile
    with Rig(load_profile("cx6-200g"), 1, 1, mem_bytes=16 << 20) as rig:
        env, m, words = rig.env, rig.mns[0], (16 << 20) // 64
        done = [0]

        def drawn(co, rng):
            while env.now < window_ns:
                for _ in range(DEPTH):
                    co.read(gaddr(m, int(rng.integers(words)) * 64), 8)
                yield co.sync()
                done[0] += DEPTH

        node = NodeRdma(rig.host, rig.cns[0], policy="per_thread_doorbell")
        for t in range(threads):
            co = node.thread().coroutine()
            env.process(drawn(co, np.random.default_rng(t)) if numpy_addresses
                        else _fair_client(env, co, _addresses(m, words, t), window_ns, done))
        t0 = time.perf_counter()
        env.run(until=window_ns + 50_000)
        return done[0], time.perf_counter() - t0


def raw_verbs_loop(threads: int, window_ns: int) -> tuple[int, float]:
    """One process, pyverbs: each thread its own QP and CQ, ``DEPTH`` READs per ``post_send``,
    then ``CQ.wait(DEPTH)`` and one ``CQ.poll``."""
    from cluster.experiments.verbs import Rig
    from shm.profile import load_profile
    from shm.verbs import (
        CQ, IBV_ACCESS_LOCAL_WRITE, IBV_ACCESS_REMOTE_READ, IBV_WR_RDMA_READ, MR, PD, QP, SGE, Context, QPInitAttr,
        SendWR,
    )
    with Rig(load_profile("cx6-200g"), 1, 1, mem_bytes=16 << 20) as rig:
        env, host = rig.env, rig.host
        cn, m = rig.cns[0], rig.mns[0]
        words = (16 << 20) // 64
        ctx, mctx = Context(host, cn), Context(host, m)
        pd, mpd = PD(ctx), PD(mctx)
        rmr = MR(mpd, 16 << 20, IBV_ACCESS_REMOTE_READ | IBV_ACCESS_LOCAL_WRITE, offset=0)
        done = [0]

        def client(k):
            cq = CQ(ctx)
            qp = QP(pd, QPInitAttr(scq=cq))
            mqp = QP(mpd, QPInitAttr(scq=CQ(mctx)))
            qp.connect(mqp)
            mqp.connect(qp)
            lmr = MR(pd, DEPTH * 64, IBV_ACCESS_LOCAL_WRITE)
            addrs = [rmr.addr + int(w) * 64 for w in np.random.default_rng(k).integers(words, size=ADDRESSES)]
            wrs = [SendWR(wr_id=i, opcode=IBV_WR_RDMA_READ, sg=[SGE(lmr.addr + 64 * i, 8, lmr.lkey)])
                   for i in range(DEPTH)]
            i, n = 0, len(addrs)
            while env.now < window_ns:
                for wr in wrs:
                    wr.set_wr_rdma(rmr.rkey, addrs[i])
                    i = i + 1 if i + 1 < n else 0
                qp.post_send(wrs)
                yield cq.wait(DEPTH)          # asleep until the whole batch is back
                got, _wcs = cq.poll(DEPTH)
                done[0] += got

        for k in range(threads):
            env.process(client(k))
        t0 = time.perf_counter()
        env.run(until=window_ns + 50_000)
        return done[0], time.perf_counter() - t0


def simpy_loop(threads: int, window_ns: int) -> tuple[int, float] | None:
    """The same closed loop in SimPy (None without simpy): a 16-unit NIC of 9 ns per READ and a
    2.3 µs round trip, addresses drawn from the same kind of precomputed list."""
    try:
        import simpy
    except ImportError:
        return None
    env = simpy.Environment()
    nic = simpy.Resource(env, capacity=16)
    count = [0]

    def read(env, addr):
        with nic.request() as req:
            yield req
            yield env.timeout(9)
        yield env.timeout(2300 + (addr & 1))
        count[0] += 1

    def thread(env, addrs):
        i, n = 0, len(addrs)
        while env.now < window_ns:
            batch = []
            for _ in range(DEPTH):
                batch.append(env.process(read(env, addrs[i])))
                i = i + 1 if i + 1 < n else 0
            yield env.all_of(batch)

    for t in range(threads):
        env.process(thread(env, _addresses(2, (16 << 20) // 64, t)))
    t0 = time.perf_counter()
    env.run(until=window_ns)
    return count[0], time.perf_counter() - t0


def _two_processes_child(desc, table_names, index, window_ns, out_q):
    """One of :func:`two_processes`' compute nodes: 16 threads of the closed loop, fair addresses."""
    from nodes.runtime.env import Environment
    from nodes.runtime.sync import ClockSync, ClockTable
    from shm.coro import NodeRdma
    from shm.fabric import Fabric
    from shm.verbs import VerbsHost
    table = ClockTable.attach(table_names)
    fabric = Fabric.attach(desc)
    try:
        env = Environment(seed=index, sync=ClockSync(table, index, fabric.profile.sync.window_ns))
        # the memory node is passive (one-sided verbs only): no process of its own
        host = VerbsHost(fabric, env, proc_of_node={0: 0, 1: 1, 2: 0}, my_proc=index)
        node = NodeRdma(host, index, policy="per_thread_doorbell")
        done = [0]
        for t in range(16):
            env.process(_fair_client(env, node.thread().coroutine(), _addresses(2, (16 << 20) // 64, 100 * index + t),
                                     window_ns, done))
        t0 = time.perf_counter()
        env.run(until=window_ns + 50_000)
        out_q.put((index, done[0], time.perf_counter() - t0))
    finally:
        fabric.close()
        table.close()


def two_processes(window_ns: int, sync_window_ns: int | None = None) -> tuple[int, float]:
    """Two compute-node processes (16 threads each) READing one memory node under the lax sync
    window of ``cx6-200g`` (or ``sync_window_ns``): (verbs completed, real seconds of the longer
    run). Runs only: starting the processes (fork, attaching the segments) is not the emulator's
    speed, and the clock table starts nobody before both are there."""
    import multiprocessing

    from nodes.runtime.sync import ClockTable
    from shm.fabric import Fabric, NodeSpec
    from shm.profile import load_profile, with_overrides
    from shm.segment import new_prefix
    prof = load_profile("cx6-200g")
    if sync_window_ns is not None:
        prof = with_overrides(prof, {"sync.window_ns": sync_window_ns})
    prefix = new_prefix()
    fabric = Fabric.create(prof, [NodeSpec("cn0"), NodeSpec("cn1"), NodeSpec("mn0", "memory", 16 << 20)], prefix=prefix)
    fabric.expose(2)
    table = ClockTable.create(2, prefix=prefix)
    ctx = multiprocessing.get_context("fork")
    q = ctx.Queue()
    procs = [ctx.Process(target=_two_processes_child, args=(fabric.describe(), table.names(), i, window_ns, q))
             for i in range(2)]
    try:
        for p in procs:
            p.start()
        results = [q.get(timeout=600) for _ in procs]
        for p in procs:
            p.join(timeout=30)
        return sum(r[1] for r in results), max(r[2] for r in results)
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join()
        table.close()
        fabric.close()


def ycsb_a(system: str, *, records: int, threads: int, coroutines: int, run_ms: float) -> dict:
    """A co-located rack: load ``records`` keys with one thread, run YCSB-A (zipf 0.99) for
    ``run_ms`` virtual ms; operations and verbs per real second over the whole run."""
    from cluster.experiments.ycsb import SMART_KEYS, scenario_dict
    from cluster.rack import ColocatedRack
    from cluster.scenario import scenario_from_dict
    doc = scenario_dict(system, "a", (threads,), records=records, warm_ms=run_ms / 4, measure_ms=run_ms,
                        coroutines=coroutines, properties=SMART_KEYS, memory_nodes=1)
    rack = ColocatedRack(scenario_from_dict(doc, source=f"bench speed {system}"))
    t0 = time.perf_counter()
    res = rack.run()
    wall = time.perf_counter() - t0
    ops = sum(s.ops for s in res.steps)
    return {"ops_per_s": ops / wall, "verbs_per_s": rack.verbs / wall, "virtual_us_per_s": rack.env.now / 1e3 / wall}


def bulk_load_rate(system: str, keys: int) -> float:
    """Keys per real second of ``system``'s bulk load (cn0's whole load step: the keys generated,
    recorded and placed), on a co-located rack of 2 compute and 2 memory nodes."""
    from cluster.rack import ColocatedRack
    from cluster.scenario import scenario_from_dict
    doc = {"rack": {"name": f"bench-speed-bulk-{system}", "profile": "cx6-200g", "seed": 1},
           "compute": {"count": 2, "threads": 1, "coroutines": 1, "memory": "16MiB"},
           "memory": {"count": 2, "memory": f"{max(64, keys * 600 // 2 >> 20)}MiB"},
           "system": {"name": system},
           "workload": {"preset": "c", "recordcount": keys, "keysize": 8, "valuesize": 8},
           "step": [{"action": "load", "bulk": True}]}
    rack = ColocatedRack(scenario_from_dict(doc, source=f"bench speed bulk {system}"))
    res = rack.run()
    real = res.steps[0].real_s
    return keys / real if real else 0.0


def _rate(got) -> float | None:
    if got is None:
        return None
    verbs, real = got
    return round(verbs / real) if real > 0 else None


def verbs_rows(quick: bool, progress) -> list[Row]:
    """The verbs-level rows (also ``dmrack bench verbs --only speed``)."""
    window = 200_000 if quick else 1_000_000
    rows = []
    progress("speed: one process (warming the JIT caches)")
    coroutine_loop(8, 20_000)
    raw_verbs_loop(2, 20_000)
    progress("speed: one process, coroutine API")
    rows.append(Row("speed", "one process", "32 threads x depth 8", "verbs/s real",
                    _rate(coroutine_loop(32, window)), TARGET_COROUTINE))
    rows.append(Row("speed", "one process, numpy addresses", "32 threads x depth 8", "verbs/s real",
                    _rate(coroutine_loop(32, window, numpy_addresses=True))))
    progress("speed: one process, raw verbs")
    rows.append(Row("speed", "raw verbs", "32 threads x depth 8", "verbs/s real", _rate(raw_verbs_loop(32, window)),
                    TARGET_RAW))
    progress("speed: SimPy")
    simpy_rate = _rate(simpy_loop(32, window))
    if simpy_rate is not None:
        rows.append(Row("speed", "simpy", "32 threads x depth 8", "verbs/s real", simpy_rate))
    one = rows[0].emulated
    for sync in (None, 4_000) if quick else (None, 2_000, 8_000):
        label = "default window" if sync is None else f"window {sync:,} ns"
        progress(f"speed: two processes, {label}")
        try:
            rate = _rate(two_processes(window, sync))
            # the target: two processes on two cores run 1.5x one process in total
            rows.append(Row("speed", f"two processes, {label}", "2 x 16 threads x depth 8", "verbs/s real", rate,
                            1.5 * one if sync is None and one else None))
        except Exception as e:  # the table still reports the rest; the error is shown in the row
            rows.append(Row("speed", f"two processes, {label} failed: {e}", "2 x 16 threads", "verbs/s real", None))
    return rows


def systems_rows(quick: bool, progress) -> list[Row]:
    rows = []
    sizes = {"records": 5_000 if quick else 20_000, "threads": 16, "coroutines": 8,
             "run_ms": 0.5 if quick else 2.0}
    for system in ("race", "sherman"):
        progress(f"speed: {system} YCSB-A co-located")
        got = ycsb_a(system, **sizes)
        x = f"16 threads x 8 coroutines, {sizes['records']:,} keys"
        rows.append(Row("speed", f"{system} ycsb-a", x, "ops/s real", round(got["ops_per_s"])))
        rows.append(Row("speed", f"{system} ycsb-a", x, "verbs/s real", round(got["verbs_per_s"])))
        rows.append(Row("speed", f"{system} ycsb-a", x, "virtual µs per real s", round(got["virtual_us_per_s"], 1)))
    keys = 100_000 if quick else 1_000_000
    for system in ("race", "sherman"):
        progress(f"speed: {system} bulk load of {keys:,} keys")
        rows.append(Row("speed", f"{system} bulk load", f"{keys:,} keys", "keys/s real",
                        round(bulk_load_rate(system, keys))))
    return rows


def minimal_rack(colocated: bool, overrides: dict | None = None, run_ms: float | None = None) -> float:
    """Verbs per real second of ``examples/minimal.toml`` over its steps, co-located or as a rack of
    processes (a quiet supervisor: no dashboard, no summary)."""
    from pathlib import Path
    from cluster.scenario import load_scenario
    path = Path(__file__).resolve().parents[2] / "examples" / "minimal.toml"
    sets = dict(overrides or {})
    if run_ms is not None:
        sets["run.duration_ms"] = run_ms
    scenario = load_scenario(str(path), overrides=sets or None)
    if colocated:
        from cluster.rack import ColocatedRack
        res = ColocatedRack(scenario).run()
    else:
        from cluster.supervisor import Supervisor
        sup = Supervisor(scenario, dashboard=False, quiet=True)
        if sup.run() != 0 or sup.results is None:
            raise RuntimeError(f"the rack of processes failed: {sup.stop_reason}")
        res = sup.results
    return res.verbs_per_s or 0.0


def rack_rows(quick: bool, progress) -> list[Row]:
    run_ms = 10 if quick else 40
    x = f"examples/minimal.toml, {run_ms} virtual ms"
    progress("speed: minimal.toml co-located")
    minimal_rack(True, run_ms=1)                       # compile (or load) the kernels first
    colocated = minimal_rack(True, run_ms=run_ms)
    progress("speed: minimal.toml as processes")
    processes = minimal_rack(False, run_ms=run_ms)
    progress("speed: minimal.toml as processes, no spin")
    parked = minimal_rack(False, {"profile_overrides.sync.spin_us": 0}, run_ms=run_ms)
    # rows of their own experiment, so the figure of the verbs-level loops does not draw them
    return [Row("rack", "co-located", x, "verbs/s real", round(colocated)),
            Row("rack", "as processes", x, "verbs/s real", round(processes), round(colocated)),
            Row("rack", "as processes, no spin", x, "verbs/s real", round(parked)),
            Row("rack", "processes / co-located", x, "ratio of verbs/s real", round(processes / colocated, 2), 1.0)]


def reproduce_rows(quick: bool, progress) -> list[Row]:
    from cluster.experiments import smart
    rows = []
    for name in ("fig12",) if quick else ("fig3", "fig4", "fig12", "fig13"):
        progress(f"speed: reproduce smart --quick {name}")
        t0 = time.perf_counter()
        smart.EXPERIMENTS[name](True, lambda msg: None)
        rows.append(Row("speed", f"reproduce smart --quick {name}", "-", "wall s", round(time.perf_counter() - t0, 1)))
    return rows


# wall-clock figures (cluster.experiments.figures): bars per configuration, log scale where
# rates differ by orders of magnitude (raw verbs against SimPy)
FIGURES = [
    Figure("verbs", "speed", "verbs/s real", "Emulation speed: verbs per real second", "",
           "verbs per real second", kind="bar", ylog=True, xs="category"),
    Figure("systems", "speed", ("ops/s real", "virtual µs per real s"), "Systems co-located: YCSB A speed", "",
           ("operations per real second", "virtual µs per real second"), kind="bar", xs="category"),
    Figure("bulk-load", "speed", "keys/s real", "Bulk load speed", "", "keys per real second", kind="bar",
           xs="category"),
    Figure("rack", "rack", "verbs/s real", "The minimal rack: processes against co-located", "",
           "verbs per real second", kind="bar", xs="category"),
    Figure("reproduce", "speed", "wall s", "Reproduction parts: wall time", "", "seconds", kind="bar", xs="category"),
]


EXPERIMENTS = {"verbs": verbs_rows, "systems": systems_rows, "rack": rack_rows, "reproduce": reproduce_rows}


def setup(quick: bool) -> dict:
    """The rigs and racks of this bench, for the run record (cluster.experiments.provenance)."""
    return {"profile": "cx6-200g", "seed": 1,
            "spec": "a raw-verbs rig (1 compute, 1 memory node) and the systems' co-located racks",
            "scale": "short windows" if quick else "full windows",
            "note": "measures this machine's real time: compare only with runs on the same machine"}


EXPERIMENT = bench("speed", title="how fast the emulator runs in real time: verbs, systems, reproduction parts",
                   parts=EXPERIMENTS, setup=setup, figures=FIGURES, title_prefix="speed: ")
