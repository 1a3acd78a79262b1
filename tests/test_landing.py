"""Multi-line transfers land line by line over their modelled transfer time (shm/landing.py).

Co-located, so deterministic: a watcher process looks at the memory node's bytes every nanosecond,
and a READ racing a WRITE to the same bytes tears the same way on every run.
"""

from __future__ import annotations

import numpy as np
import pytest

from shm.sim.env import Environment
from shm.coro import RemoteAccessError
from shm.fabric import gaddr
from shm.profile import with_overrides
from shm.verbs import IBV_WR_RDMA_WRITE
from tests.test_coro import MN, new_fabric, run, setup
from tests.test_verbs import build_rack, new_fabric as new_verbs_fabric, rack_profile, rdma, run_process, wait_cqes

KIB = 1024
LINES = KIB // 64


@pytest.fixture
def fab(prefix):
    with new_fabric(prefix, mem=4 << 20) as f:
        yield f


def lines_new(host, off, value) -> list[bool]:
    """Per line of the KiB at ``off``: holds ``value`` everywhere (True) or nowhere (False);
    a line holding both would be a tear inside a line, which never happens."""
    out = []
    for k in range(LINES):
        line = host[off + 64 * k: off + 64 * (k + 1)]
        assert (line == value).all() or (line != value).all(), f"line {k} is torn inside"
        out.append(bool(line[0] == value))
    return out


def watch_write(env, fab, co, off, ascending=True):
    """WRITE a KiB of 1s at ``off`` and record, every ns, which lines hold it."""
    host = fab.memory[MN].host
    seen = []

    def watcher():
        while env.now < 20_000:
            seen.append((env.now, lines_new(host, off, 1)))
            if all(seen[-1][1]):
                return
            yield 1

    done = {}

    def writer():
        yield 1000
        co.write(gaddr(MN, off), bytes([1]) * KIB)
        yield co.sync()
        done["t"] = env.now

    env.process(watcher())
    run(env, writer())
    return seen, done["t"]


def ordered(descending: bool):
    """The tests' ConnectX-6 profile with WRITE lines in ascending (ConnectX-3/5) or descending order."""
    return with_overrides(rack_profile(), {"nic.ordered_multiline_writes": not descending})


def test_a_multi_line_write_lands_one_line_at_a_time_before_its_completion(prefix):
    with new_fabric(prefix, profile=ordered(False), mem=4 << 20) as fab:
        env, node = setup(fab)
        off = fab.allocate("m0", KIB)
        seen, completed = watch_write(env, fab, node.thread().coroutine(), off)
        line_ns = 64 * 8 / fab.profile.pcie.payload_gbps
    partial = [(t, s) for t, s in seen if any(s) and not all(s)]
    assert partial, "the KiB landed at one instant"
    for t, s in partial:              # ascending lines: the new ones are always a prefix
        assert s == sorted(s, reverse=True), f"at {t} ns: {s}"
    span = partial[-1][0] - partial[0][0] + 1
    assert span == pytest.approx((LINES - 1) * line_ns, abs=2), "one line per 64 B of PCIe payload time"
    assert seen[-1][0] <= completed and all(seen[-1][1])


def test_descending_profile_lands_lines_from_the_top(prefix):
    with new_fabric(prefix, profile=ordered(True), mem=4 << 20) as fab:
        env, node = setup(fab)
        off = fab.allocate("m0", KIB)
        seen, _ = watch_write(env, fab, node.thread().coroutine(), off)
        partial = [s for _, s in seen if any(s) and not all(s)]
        assert partial and all(s == sorted(s) for s in partial), "new lines are always a suffix"


def torn_reads(fab, delays):
    """For each delay, a fresh KiB of 0s; one coroutine WRITEs 1s over it at t=1000 while another
    READs it at t=1000+delay; returns the READs' per-line view."""
    env, node = setup(fab)
    w, r = node.thread().coroutine(), node.thread().coroutine()
    results = []

    def one(off, delay):
        def writer():
            w.write(gaddr(MN, off), bytes([1]) * KIB)
            yield w.sync()

        def reader():
            yield delay
            h = r.read(gaddr(MN, off), KIB)
            yield r.sync()
            data = np.array(h.data)
            results.append([bool(data[64 * k] == 1) for k in range(LINES)])
            for k in range(LINES):
                assert len(set(data[64 * k: 64 * k + 64].tolist())) == 1, "torn inside a line"

        env.process(writer())
        yield env.process(reader())

    def driver():
        for d in delays:
            off = fab.allocate("m0", KIB)
            yield 1000
            yield env.process(one(off, d))

    run(env, driver())
    return results


def test_a_read_racing_a_write_tears_and_tears_the_same_way_every_run(prefix):
    delays = range(0, 3000, 10)
    with new_fabric(prefix, mem=8 << 20) as fab:
        first = torn_reads(fab, delays)
    with new_fabric(prefix, mem=8 << 20) as fab:
        again = torn_reads(fab, delays)
    assert first == again, "co-located landing is deterministic"
    torn = [s for s in first if any(s) and not all(s)]
    assert torn, "no READ overlapped the WRITE's landing"
    assert any(all(s) for s in first) and any(not any(s) for s in first)


def test_a_bad_rkey_on_a_multi_line_read_touches_nothing(fab):
    env, node = setup(fab)
    co = node.thread().coroutine()
    h = co.read(gaddr(MN, (4 << 20) - 512), KIB)        # runs off the end of m0's memory
    co.thread.buf[h.offset:h.offset + KIB] = 7

    def body():
        with pytest.raises(RemoteAccessError):
            yield co.sync()
        return np.array(h.data)

    assert (run(env, body()) == 7).all()


def test_pyverbs_multi_line_write_lands_over_a_window(prefix):
    fab = new_verbs_fabric(prefix)
    try:
        env = Environment(seed=1)
        r = build_rack(fab, env)
        host = fab.memory[1].host
        off = r.rmr.addr & ((1 << 48) - 1)
        r.lmr.write(bytes([5]) * KIB, KIB, 0)
        seen = []

        def watcher():
            while env.now < 50_000:
                n = sum(int(host[off + 64 * k] == 5) for k in range(LINES))
                seen.append(n)
                if n == LINES:
                    return
                yield 1

        def body():
            yield 100
            r.qp.post_send([rdma(IBV_WR_RDMA_WRITE, r.lmr, 0, KIB, r.rmr.addr, r.rmr.rkey)])
            yield from wait_cqes(env, r.cq, 1)
            assert (host[off:off + KIB] == 5).all(), "completed before its last line landed"

        env.process(watcher())
        run_process(env, body())
        assert any(0 < n < LINES for n in seen), "the KiB landed at one instant"
    finally:
        fab.close()


def test_reads_land_in_one_event_when_no_write_can_come_between():
    """Many 1 KiB READs in flight and no WRITE: each lands all its 16 lines at once (what it
    samples cannot change before its last line), so a READ costs the events an 8 B one landing
    at its effect time does (8 B READs are deferred to their completions by default, which
    costs less still: shm/deferred.py)."""
    from cluster.experiments.bench_verbs import Rig, _onesided_closed_loop
    from shm.deferred import defer_reads

    def events_per_verb(size, defer=True):
        with Rig(rack_profile(), 1, 1) as rig:
            defer_reads(rig.fabric, defer)
            _onesided_closed_loop(rig, threads=16, depth=8, policy="per_thread_doorbell", op="read", size=size,
                                  warmup=0, window=30_000)
            return rig.env.statistics().events / rig.completed

    assert events_per_verb(1024) <= events_per_verb(8, defer=False) + 0.2
    assert events_per_verb(8) < 0.5


def test_the_lines_due_before_a_bound_are_counted_as_landing_times_say():
    """``due_end`` (arithmetic) agrees with walking the lines' landing times one by one."""
    import random

    from shm.landing import Landing, due_end

    def walk(lo, hi, n, k, bound):
        time = Landing.time.__get__(type("L", (), {"lo": lo, "hi": hi, "n": n})())
        j = k + 1
        while j < n and time(j) < bound:
            j += 1
        return j

    rng = random.Random(5)
    for _ in range(20_000):
        n = rng.randint(2, 40)
        lo = rng.randint(0, 1000)
        hi = lo + rng.choice([0, rng.randint(0, 5), rng.randint(0, 300)])
        k = rng.randint(0, n - 1)
        bound = rng.randint(lo - 50, hi + 50)
        assert due_end(lo, hi, n, k, bound) == walk(lo, hi, n, k, bound), (lo, hi, n, k, bound)


def _read_beside_writes(prefix, *, ranges: bool):
    """Eight coroutines, each posting a 1 KiB READ with a 64 B WRITE to other bytes of the node in
    the same batch (as RACE posts a KV block's WRITE with the bucket READs), the READ of the KiB
    another coroutine writes into. ``ranges`` False: the reference, READs wait for any write to their node
    (every write recorded as changing any byte of it). Returns what every READ saw, the end time, the
    events and the READs that landed line by line."""
    from shm.landing import ALL_BYTES, PendingWrites
    from shm.nic import VERB_READ, WR_OP, WR_OUT

    real, real_rows = PendingWrites.add, PendingWrites.add_rows

    def any_byte(self, node, a, b, off=0, end=ALL_BYTES, now=-1):
        real(self, node, a, b, 0, ALL_BYTES, now)

    def rows_any_byte(self, node, rows, now=-1):
        for r in rows.tolist():
            if r[WR_OP] != VERB_READ:
                real(self, node, r[WR_OUT], r[WR_OUT + 2], 0, ALL_BYTES, now)

    if not ranges:
        PendingWrites.add, PendingWrites.add_rows = any_byte, rows_any_byte
    try:
        with new_fabric(prefix, mem=4 << 20) as fab:
            env, node = setup(fab)
            seen = []

            area = fab.allocate("m0", 8 * KIB)

            def client(i):
                # READ the KiB coroutine i + 1 writes into (writes to its bytes: line by line, a
                # torn read now and then), WRITE a line of our own KiB (the others' READs ignore it)
                co = node.thread().coroutine()
                for r in range(40):
                    h = co.read(gaddr(MN, area + (i + 1) % 8 * KIB), KIB)
                    co.write(gaddr(MN, area + i * KIB + 64 * (r % 16)), bytes([r % 251 + 1]) * 64)
                    yield co.sync()
                    seen.append((i, r, env.now, bytes(h.data)))

            for i in range(8):
                env.process(client(i))
            env.run()
            return seen, env.now, env.statistics().events, fab.windows["reads_overlapping_writes"]
    finally:
        PendingWrites.add, PendingWrites.add_rows = real, real_rows


def test_a_read_lands_whole_when_the_writes_in_its_window_change_other_bytes(prefix):
    """A write changes only its own bytes: a READ within whose window only writes to other bytes of
    the node land lands in one step, and sees what landing line by line sees (the same bytes at the
    same times). A write to its own bytes still makes it land line by line: the torn reads of
    ``test_a_read_racing_a_write_tears_and_tears_the_same_way_every_run``."""
    new = _read_beside_writes(prefix, ranges=True)
    ref = _read_beside_writes(prefix, ranges=False)
    assert new[0] == ref[0] and new[1] == ref[1], "the bytes read or the times moved"
    assert ref[3] > 0, "no READ had a write in its window: the test shows nothing"
    assert new[3] < ref[3] and new[2] < ref[2], (new[2:], ref[2:])
    assert len({d for *_, d in new[0]}) > 8, "the bytes read never changed: the test compares nothing"


def test_clear_of_agrees_with_looking_at_every_pending_write():
    """``PendingWrites.clear_of`` walks only the top of the heap: it must agree with checking every
    entry, on random windows and byte ranges (expired entries left in the heap included)."""
    import random

    from shm.landing import ALL_BYTES, PendingWrites

    rng = random.Random(7)
    for _ in range(3000):
        pw = PendingWrites(floor_ns=rng.choice([50, 150, 600]))
        entries = []
        for _ in range(rng.randint(0, 12)):
            a = rng.randint(0, 400)
            b = a + rng.choice([0, 0, rng.randint(0, 80)])
            off, end = (0, ALL_BYTES) if rng.random() < 0.2 else sorted(rng.sample(range(0, 4096, 8), 2))
            pw.add(3, a, b, off, end)
            entries.append((a, b, off, end))
        now = rng.randint(0, 300)
        hi = now + rng.randint(0, 200)
        off = rng.randrange(0, 4096, 8)
        end = off + rng.choice([8, 64, 128, 1024])
        want = hi < now + pw.floor_ns and not any(a <= hi and b >= now and o < end and off < e for a, b, o, e in entries)
        assert pw.clear_of(3, now, hi, off, end) == want
