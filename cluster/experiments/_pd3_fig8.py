"""PD3 Fig. 8: CheckAndReturn throughput of three host rings as application threads are added.

The three rings (PD3 §7.2; artifact ``src/PD3/buffer/baselines.cpp`` for the two baselines), each a
model of which 64-byte lines a call touches, priced by :mod:`nodes.devices.coherence` (contention
is the queue of transfers on a shared line):

* ``spinlock``: the artifact's ``SpinlockAgentBuffer``. A test-and-set lock (one atomic exchange on
  the lock line per attempt; when it fails, PAUSE then retry, ``spins`` attempts per round,
  ``spins`` doubling up to 64, then a ``sched_yield`` after every round of 64). A call takes the
  lock to read the consumer index (Head) and the producer index (Tail), releases it, scans item
  keys from Head; on a match it takes the lock again, checks and sets the item's state, runs
  ``ConsumeRun`` (reads Head, Tail and the states of the leading consumed items, writes Head) and
  releases it.
* ``cas``: the artifact's ``LocklessAgentBuffer``. A call loads Head and Tail, scans from Head; on
  a match it CASes the item's state, then ``ConsumeRun``: load Head, Tail and the state of the item
  at Head; while that item is consumed, CAS Head one item forward (head contention).
* ``pd3``: the Loading Zone (Fig. 9, :mod:`nodes.systems.pd3.loading_zone`): load Head (written by
  the device only) into a private LocalHead, load Tail, scan; on a match copy the item (its line
  is already in L1 from the scan) and CAS its state. Head is moved by the device's cleaning.

Workload (ours; the paper does not describe Fig. 8's driver): 64-byte items (24-byte header + 40
bytes of data: one line each); item ``n`` carries key ``n``. Thread ``i`` of ``T`` asks for keys
``i, i + T, i + 2T, ...`` in turn: every item is wanted by exactly one thread (no same-key
contention), so what the three designs differ in is head contention and locking. A call that finds
its key returns it and the thread asks for its next key; a call that does not (not produced yet)
returns 0 and the thread calls again. Every call counts (the paper's metric is invocations/s).

The producer (the DPU's Transfer Engine) runs a round every ``PERIOD_NS`` = ``dma.latency_ns``
(one DMA's latency: its rounds are pipelined, one lands per latency): for ``pd3`` it first cleans
(advances Head over the leading consumed items and writes Head); for the baselines it reads Head
(the consumers move it). Then it appends items until ``WINDOW`` items lie between Head and Tail,
writing each item line and then Tail. Its DMA writes invalidate every cached copy of those lines;
it never takes the host spinlock. ``WINDOW`` = 256 items (16 KB of the 256 MiB ring): enough that
at 150 M calls/s the threads do not run dry between two rounds (150 M/s x 0.91 us = 137 items).

Threads are pinned in core order from core :data:`FIRST_CORE` (``Coherence.pinned``), as PD3's own
application pins its threads: the artifact's hash map server sets the affinity of its connection
thread ``i`` to core ``5 + i`` (``src/apps/hashmap/net_hashmap.cpp``, ``ClientConnectionThread``).
Fig. 8's driver is not in the artifact, so this is the authors' practice, not the figure's known
setup. On the EPYC 9254 (4 CCDs x 6 cores, numbered CCD by CCD) 16 threads sit 1 + 6 + 6 + 3 on the
four CCDs. ``placement="spread"`` (thread ``i`` on CCD ``i % 4``, as Linux's load balancer spreads
unpinned threads over idle LLC domains) was the placement before. Virtual time: each thread keeps a float clock, waits on the
:class:`~shm.sim.env.Environment` before each shared access; throughput is calls completed in
a measured window after a warm-up. Deterministic (no randomness at all).

Nothing here is fitted to Fig. 8: the constants are the profile's ``[coherence]`` table.
"""

from __future__ import annotations

from cluster.experiments.rows import Row
from nodes.devices.coherence import Coherence, CoherenceCosts, CoreClock, Line
from shm.sim.env import Environment
from shm.profile import load_profile

EXPERIMENT = "pd3-fig8"
RINGS = ("spinlock", "cas", "pd3")
SERIES = {"spinlock": "spinlock ring", "cas": "CAS ring (lock-free)", "pd3": "PD3 Loading Zone"}
WINDOW = 256
#: the first core PD3's application threads are pinned to (artifact: src/apps/hashmap/net_hashmap.cpp,
#: ``core_id = 5 + (next_core_id++ % num_threads)``); thread i runs on core FIRST_CORE + i
FIRST_CORE = 5
MAX_SPINS = 64
PRODUCED, CONSUMED = 1, 2


class Ring:
    """The shared state of one ring: its lines and the items' states (model-level, not bytes)."""

    def __init__(self, kind: str, host: Coherence, window: int = WINDOW):
        self.kind, self.host, self.window = kind, host, window
        self.head = 0                 # oldest item not reclaimed (Head / consumer index)
        self.tail = 0                 # next item to produce (Tail / producer index)
        self.locked = False
        self.head_line, self.tail_line, self.lock_line = Line("head"), Line("tail"), Line("lock")
        self.slots = [Line(f"item{i}") for i in range(window)]
        self.state: dict[int, int] = {}
        self.calls = 0
        self.hits = 0

    def line(self, n: int) -> Line:
        return self.slots[n % self.window]


def _wait(clk: CoreClock):
    d = clk.sync()
    if d > 0:
        yield d


def producer(env: Environment, ring: Ring, period_ns: int):
    h = ring.host
    while True:
        t = float(env.now)
        if ring.kind == "pd3":                    # the device cleans: Head over leading CONSUMED
            new = ring.head
            while new < ring.tail and ring.state.get(new) == CONSUMED:
                new += 1
            if new != ring.head:
                for n in range(ring.head, new):
                    ring.state.pop(n, None)
                ring.head = new
                h.device_write(ring.head_line, t)
        else:
            h.device_read(ring.head_line, t)
            for n in [n for n in ring.state if n < ring.head]:
                del ring.state[n]
        if ring.tail - ring.head < ring.window:
            while ring.tail - ring.head < ring.window:
                h.device_write(ring.line(ring.tail), t)
                ring.state[ring.tail] = PRODUCED
                ring.tail += 1
            h.device_write(ring.tail_line, t)
        yield period_ns


def _lock(env, ring: Ring, core: int, clk: CoreClock):
    h, c = ring.host, ring.host.c
    yield from _wait(clk)
    clk.t = h.cas(core, ring.lock_line, clk.t)        # test_and_set
    if not ring.locked:
        ring.locked = True
        return
    spins = 1
    while True:
        for _ in range(spins):
            clk.t += c.pause_ns
            yield from _wait(clk)
            clk.t = h.cas(core, ring.lock_line, clk.t)
            if not ring.locked:
                ring.locked = True
                return
        if spins < MAX_SPINS:
            spins <<= 1
        else:
            clk.t += c.yield_ns


def _unlock(env, ring: Ring, core: int, clk: CoreClock):
    yield from _wait(clk)
    clk.t = ring.host.write(core, ring.lock_line, clk.t)
    ring.locked = False


def _scan(ring: Ring, core: int, clk: CoreClock, start: int, key: int, tail: int) -> int:
    """Scan item lines from ``start`` to the key's item (or to ``tail``): returns the position of
    the key's item or -1; charges the scan."""
    stop = key + 1 if start <= key < tail else tail
    if stop > start:
        clk.t = ring.host.read_many(core, [ring.line(n) for n in range(start, stop)], clk.t)
    return key if stop == key + 1 else -1


def call_spinlock(env, ring: Ring, core: int, clk: CoreClock, key: int):
    h = ring.host
    yield from _lock(env, ring, core, clk)
    clk.t = h.read(core, ring.head_line, clk.t)
    clk.t = h.read(core, ring.tail_line, clk.t)
    head, tail = ring.head, ring.tail
    yield from _unlock(env, ring, core, clk)
    yield from _wait(clk)
    pos = _scan(ring, core, clk, head, key, tail)
    if pos < 0:
        return False
    yield from _lock(env, ring, core, clk)
    line = ring.line(pos)
    clk.t = h.read(core, line, clk.t)
    ok = ring.state.get(pos) == PRODUCED
    if ok:
        clk.t = h.write(core, line, clk.t)
        ring.state[pos] = CONSUMED
        # ConsumeRun under the lock: Head, Tail, the leading consumed items, then write Head
        clk.t = h.read(core, ring.head_line, clk.t)
        clk.t = h.read(core, ring.tail_line, clk.t)
        new = ring.head
        while new < ring.tail:
            clk.t = h.read(core, ring.line(new), clk.t)
            if ring.state.get(new) != CONSUMED:
                break
            new += 1
        clk.t = h.write(core, ring.head_line, clk.t)
        ring.head = new
    yield from _unlock(env, ring, core, clk)
    return ok


def _claim(ring: Ring, core: int, clk: CoreClock, key: int):
    """Read Head and Tail, scan for ``key``, CAS its item's state: True if this call took it."""
    h = ring.host
    yield from _wait(clk)
    clk.t = h.read(core, ring.head_line, clk.t)      # (PD3: LocalHead = Head)
    clk.t = h.read(core, ring.tail_line, clk.t)
    pos = _scan(ring, core, clk, ring.head, key, ring.tail)
    if pos < 0:
        return False
    # the copy reads the item's line, already in L1 from the scan; then check the state and CAS it
    yield from _wait(clk)
    clk.t = h.cas(core, ring.line(pos), clk.t)
    if ring.state.get(pos) != PRODUCED:
        return False
    ring.state[pos] = CONSUMED
    return True


def call_cas(env, ring: Ring, core: int, clk: CoreClock, key: int):
    h = ring.host
    if not (yield from _claim(ring, core, clk, key)):
        return False
    while True:                                       # ConsumeRun
        yield from _wait(clk)
        clk.t = h.read(core, ring.head_line, clk.t)
        clk.t = h.read(core, ring.tail_line, clk.t)
        cur = ring.head
        if cur >= ring.tail:
            return True
        yield from _wait(clk)
        clk.t = h.read(core, ring.line(cur), clk.t)
        if ring.state.get(cur) != CONSUMED:
            return True
        yield from _wait(clk)
        clk.t = h.cas(core, ring.head_line, clk.t)   # compare_exchange(cur, cur + 1)
        if ring.head == cur:
            ring.head = cur + 1


def call_pd3(env, ring: Ring, core: int, clk: CoreClock, key: int):
    return (yield from _claim(ring, core, clk, key))


CALLS = {"spinlock": call_spinlock, "cas": call_cas, "pd3": call_pd3}


def app_thread(env, ring: Ring, core: int, first_key: int, stride: int, count_from: int, stats: list):
    clk = CoreClock(env)
    call = CALLS[ring.kind]
    key = first_key
    while True:
        hit = yield from call(env, ring, core, clk, key)
        yield from _wait(clk)
        if env.now >= count_from:
            stats[0] += 1
            stats[1] += bool(hit)
        if hit:
            key += stride


def throughput(kind: str, threads: int, *, profile=None, warmup_ns: int = 20_000,
               measure_ns: int = 50_000, placement: str = "pinned", window: int = WINDOW) -> dict:
    """Run ``threads`` threads calling CheckAndReturn on a ``kind`` ring: M calls/s and details."""
    profile = profile or load_profile("bf3")
    host = Coherence(CoherenceCosts.from_profile(profile))
    env = Environment()
    ring = Ring(kind, host, window)
    placements = {"pinned": lambda n: host.pinned(n, FIRST_CORE), "spread": host.spread, "packed": host.packed}
    if placement not in placements:
        raise ValueError(f"placement {placement!r}: choose one of {', '.join(placements)}")
    cores = placements[placement](threads)
    env.process(producer(env, ring, int(profile.dma.latency_ns)), name="dpu-producer")
    stats = [0, 0]
    for i, core in enumerate(cores):
        env.process(app_thread(env, ring, core, i, threads, warmup_ns, stats), name=f"app{i}")
    env.run(until=warmup_ns + measure_ns)
    calls, hits = stats
    return {"mcalls": calls / measure_ns * 1e3, "calls": calls, "hits": hits,
            "head_transfers": ring.head_line.transfers, "lock_transfers": ring.lock_line.transfers}


def fig8(quick: bool, progress) -> list[Row]:
    """Fig. 8's three curves, the ratios at 16 threads and the lock-free ring's peak."""
    say = progress or (lambda _msg: None)
    points = [1, 4, 16] if quick else [1, 2, 4, 8, 16]
    measure = 30_000 if quick else 100_000
    res: dict[tuple[str, int], float] = {}
    rows: list[Row] = []
    for kind in RINGS:
        for t in points:
            say(f"fig8: {SERIES[kind]} at {t} threads")
            r = throughput(kind, t, measure_ns=measure)
            res[kind, t] = r["mcalls"]
            # the paper's 150 M calls/s at 16 threads is the "PD3 at 16 threads" row below, once
            rows.append(Row(EXPERIMENT, SERIES[kind], t, "M calls/s", round(r["mcalls"], 3), None))
    say(None)
    pd3, cas, spin = res["pd3", 16], res["cas", 16], res["spinlock", 16]
    rows += [
        Row(EXPERIMENT, "PD3 / spinlock ring at 16 threads", 16, "ratio", round(pd3 / spin, 2) if spin else None, 224.0),
        Row(EXPERIMENT, "PD3 / CAS ring at 16 threads", 16, "ratio", round(pd3 / cas, 2) if cas else None, 35.0),
        Row(EXPERIMENT, "PD3 at 16 threads", 16, "M calls/s", round(pd3, 3), 150.0),
        Row(EXPERIMENT, "CAS ring peak (published 5-10: midpoint 7.5)", "peak", "M calls/s",
            round(max(res["cas", t] for t in points), 3), 7.5),
        Row(EXPERIMENT, "CAS ring / spinlock ring, best over thread counts (published: up to 40x)", "max",
            "ratio", round(max((res["cas", t] / res["spinlock", t] for t in points if res["spinlock", t]),
                               default=0.0), 2) or None, 40.0),
    ]
    return rows


if __name__ == "__main__":  # pragma: no cover
    import sys
    import time
    t0 = time.time()
    for row in fig8("--full" not in sys.argv, lambda m: m and print(m, file=sys.stderr)):
        print(row)
    print(f"{time.time() - t0:.1f} s", file=sys.stderr)
