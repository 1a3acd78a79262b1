"""Deferred READs (shm/deferred.py) return exactly what READs landing at their effect times return.

Each test runs the same co-located workload twice on fresh fabrics, once with deferral (the
default) and once with every READ landing at its effect time (``defer_reads(fabric, False)``, the
reference path), and compares everything a client can see: every handle's bytes, value and
status, every error, the memory image, the final virtual time.
"""

from __future__ import annotations

import hashlib
import random

import pytest

from shm.coro import DEFER_MIN, RemoteAccessError
from shm.deferred import defer_reads
from shm.fabric import gaddr
from shm.profile import with_overrides
from tests.test_coro import MN, new_fabric, setup
from tests.test_verbs import rack_profile

SPAN = 4096                          # bytes under contention: 64 lines, 512 words


def mixed_workload(prefix, *, defer: bool, seed: int, profile=None, coroutines: int = 12, batches: int = 40,
                   read_share: float = 0.7) -> tuple:
    """``coroutines`` clients on 3 threads post random batches (READs of one line or several,
    WRITEs, CAS, FAA, fences, now and then a READ past the memory region) on ``SPAN`` bytes."""
    with new_fabric(prefix, profile=profile, mem=1 << 20) as fab:
        defer_reads(fab, defer)
        env, node = setup(fab, buffer_bytes=64 << 10)
        base = fab.allocate("m0", SPAN)
        threads = [node.thread() for _ in range(3)]
        seen = []

        def client(k, co):
            rng = random.Random(seed * 1000 + k)
            for b in range(batches):
                yield rng.randrange(0, 300)
                handles = []
                for _ in range(rng.randint(1, 8)):
                    word = rng.randrange(SPAN // 8)
                    a = gaddr(MN, base + 8 * word)
                    r = rng.random()
                    if rng.random() < 0.05:
                        co.fence()
                    if r < read_share:
                        if rng.random() < 0.02:
                            handles.append(("read", co.read(gaddr(MN, (1 << 20) + 64), 8)))   # out of the MR
                        elif rng.random() < 0.2:
                            off = base + rng.randrange(SPAN - 256)
                            handles.append(("read", co.read(gaddr(MN, off), rng.randint(65, 256))))
                        else:
                            handles.append(("read", co.read(a, 8)))
                    elif r < read_share + 0.15:
                        handles.append(("write", co.write(a, rng.getrandbits(64))))
                    elif r < read_share + 0.2:
                        off = base + 64 * rng.randrange(SPAN // 64 - 4)
                        handles.append(("write", co.write(gaddr(MN, off), bytes([k]) * rng.randint(65, 256))))
                    elif r < read_share + 0.25:
                        handles.append(("cas", co.cas(a, rng.getrandbits(2), rng.getrandbits(64))))
                    else:
                        handles.append(("faa", co.faa(a, rng.randint(1, 9))))
                try:
                    yield co.sync()
                    err = None
                except RemoteAccessError as e:
                    err = str(e)
                seen.append((k, b, env.now, err,
                             [(kind, h.status, bytes(h.data) if kind == "read" else h.value) for kind, h in handles]))

        for k in range(coroutines):
            env.process(client(k, threads[k % 3].coroutine()))
        env.run()
        image = hashlib.sha256(bytes(fab.memory[MN].host[base:base + SPAN])).hexdigest()
        if defer:
            dr = threads[0].coroutine()._dr
            assert dr.batches > 0 and dr.early > 0, "no deferred READ had a write land before its completion"
        return env.now, image, sorted(seen, key=lambda s: (s[0], s[1]))


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_mixed_workload_sees_the_same_bytes_with_reads_deferred(prefix, seed):
    ref = mixed_workload(prefix, defer=False, seed=seed)
    got = mixed_workload(prefix, defer=True, seed=seed)
    assert got[0] == ref[0] and got[1] == ref[1]
    for a, b in zip(got[2], ref[2]):
        assert a == b
    assert any(s[3] for s in ref[2]), "no batch failed: the out-of-region READ never ran"


@pytest.mark.parametrize("knob", ["nic.ordered_multiline_writes", "nic.atomic_write_race"])
def test_deferred_reads_agree_under_the_profile_knobs_that_reorder_writes(prefix, knob):
    base = rack_profile()
    profile = with_overrides(base, {knob: not getattr(base.nic, knob.split(".")[1])})
    ref = mixed_workload(prefix, defer=False, seed=7, profile=profile, read_share=0.5)
    got = mixed_workload(prefix, defer=True, seed=7, profile=profile, read_share=0.5)
    assert got == ref


def test_reads_only_batches_are_deferred_and_land_by_their_completion(prefix):
    with new_fabric(prefix) as fab:
        env, node = setup(fab)
        co = node.thread().coroutine()
        off = fab.allocate("m0", 128)
        fab.memory[MN].host[off:off + 8] = 7
        dr = co._dr
        assert dr is not None

        def body():
            hs = [co.read(gaddr(MN, off), 8) for _ in range(DEFER_MIN)]
            co.post()
            assert hs[0].status == -1 and dr.live[MN] == 1      # posted, deferred, not landed
            yield co.sync()
            assert all(h.ok and list(h.data) == [7] * 8 for h in hs) and dr.live[MN] == 0
            co.read(gaddr(MN, off), 8)
            co.post()
            assert dr.live[MN] == 0                             # a batch too small to defer

        env.process(body())
        env.run()


def test_a_write_landing_after_a_deferred_read_is_not_seen_by_it(prefix):
    """Two coroutines: a READ posted first, a WRITE of the same word landing after the READ's
    effect time but before its completion: the READ returns the old bytes (it landed before the
    write), exactly as at its effect time."""
    with new_fabric(prefix) as fab:
        env, node = setup(fab)
        reader, writer = node.thread().coroutine(), node.thread().coroutine()
        off = fab.allocate("m0", 64)
        a = gaddr(MN, off)
        got = {}

        def read():
            hs = [reader.read(a, 8) for _ in range(DEFER_MIN)]
            yield reader.sync()
            got["read"] = hs[-1].value

        def write():
            yield 300                      # lands after the READ's effect, before its completion
            writer.write(a, 0xABCD)
            yield writer.sync()

        env.process(read())
        env.process(write())
        env.run()
        assert got["read"] == 0 and int(fab.memory[MN].host64[off // 8]) == 0xABCD
        assert reader._dr.early == 1       # the write landed it, not its completion


def test_in_a_rack_of_processes_deferred_reads_count_in_the_frontier_until_they_land(prefix):
    """Sync mode: the earliest READ still deferred bounds the process's frontier (the others'
    writes wait for it), and a visit to the clock table lands those whose time has passed."""
    from shm.sim.env import INF, Environment
    from shm.sim.sync import ClockSync, ClockTable
    from shm.verbs import VerbsHost
    from shm.coro import NodeRdma

    table = ClockTable.create(1, prefix=prefix)
    try:
        with new_fabric(prefix) as fab:
            env = Environment(seed=1, sync=ClockSync(table, 0, 500))
            node = NodeRdma(VerbsHost(fab, env), "c0", buffer_bytes=16 << 10)
            co = node.thread().coroutine()
            off = fab.allocate("m0", 64)
            seen = {}

            def body():
                hs = [co.read(gaddr(MN, off), 8) for _ in range(DEFER_MIN)]
                co.post()
                dr = co._dr
                assert env.deferred_reads is dr and dr.live[MN] == 1
                first = min(dr.heaps[MN])[0]
                assert env.frontiers()[0] == first          # the READ is what others wait for
                last = max(dr.heaps[MN][0][2].places())[0]
                yield last + 1 - env.now                     # past every effect time of the batch
                seen["before"] = dr.live[MN]
                dr.land_past(env.now)                        # as a visit to the clock table does
                seen["after"] = dr.live[MN]
                yield co.sync()
                assert all(h.ok for h in hs)

            env.process(body())
            env.run()
            assert seen == {"before": 1, "after": 0}
            assert env.frontiers() == (INF, INF)
    finally:
        table.close()


def race(prefix, *, defer: bool, delay: int, write_bytes: int, read_line: int) -> tuple:
    """A WRITE of ``write_bytes`` 1s posted at 1,000 ns and a batch of 8-byte READs (enough to be
    deferred) of line ``read_line`` of it posted ``delay`` ns later (by another thread): what the
    last READ returned, and when."""
    with new_fabric(prefix) as fab:
        defer_reads(fab, defer)
        env, node = setup(fab)
        writer, reader = node.thread().coroutine(), node.thread().coroutine()
        off = fab.allocate("m0", 1024)
        got = {}

        def write():
            yield 1000
            writer.write(gaddr(MN, off), bytes([1]) * write_bytes)
            yield writer.sync()

        def read():
            yield 1000 + delay
            hs = [reader.read(gaddr(MN, off + 64 * read_line), 8) for _ in range(DEFER_MIN)]
            yield reader.sync()
            got["read"] = (env.now, bytes(hs[-1].data))

        env.process(write())
        env.process(read())
        env.run()
        return got["read"]


def crossing(prefix, **kw) -> int:
    """The first delay at which the reference READ returns the WRITE's bytes (bisection)."""
    lo, hi = -200, 1200
    assert race(prefix, defer=False, delay=lo, **kw)[1] == bytes(8)
    assert race(prefix, defer=False, delay=hi, **kw)[1] == bytes([1]) * 8
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if race(prefix, defer=False, delay=mid, **kw)[1] == bytes(8):
            lo = mid
        else:
            hi = mid
    return hi


@pytest.mark.parametrize("write_bytes,line", [(8, 0), (1024, 0), (1024, 8), (1024, 15)])
def test_a_read_racing_a_write_agrees_at_every_nanosecond_around_the_crossing(prefix, write_bytes, line):
    """Posting the READ 1 ns later at a time moves its effect across the WRITE's (for a 1 KiB
    WRITE, across the landing of the line it reads): at one of these delays both meet at the same
    nanosecond, and ties are ordered as their events would have been."""
    c = crossing(prefix, write_bytes=write_bytes, read_line=line)
    for delay in range(c - 3, c + 3):
        ref = race(prefix, defer=False, delay=delay, write_bytes=write_bytes, read_line=line)
        assert race(prefix, defer=True, delay=delay, write_bytes=write_bytes, read_line=line) == ref, delay


def test_earliest_is_the_least_next_time_over_the_nodes():
    """``DeferredReads.earliest`` (one loop, asked at every clock refresh of a rack of processes)
    is the minimum of ``next_time`` over the nodes and drops the same completed batches."""
    import copy
    from heapq import heapify
    from shm.deferred import DeferredReads
    from shm.sim.env import INF

    class Batch:                      # what the heaps hold: only ``left`` is read here
        def __init__(self, left):
            self.left = left

        def __lt__(self, other):       # never compared: (time, seq) are unique
            raise AssertionError("batches compared")

    rng = random.Random(7)
    for _ in range(200):
        dr = DeferredReads(None)
        seq = 0
        for node in range(rng.randint(0, 4)):
            h = []
            for _ in range(rng.randint(0, 6)):
                seq += 1
                h.append((rng.randrange(1000), seq, Batch(rng.randint(0, 2))))
            heapify(h)
            dr.heaps[node] = h
        ref = copy.deepcopy(dr)
        want = min((ref.next_time(n) for n in ref.heaps), default=INF)
        assert dr.earliest() == want
        assert {n: [(t, s, b.left) for t, s, b in h] for n, h in dr.heaps.items()} == \
            {n: [(t, s, b.left) for t, s, b in h] for n, h in ref.heaps.items()}


def test_the_compiled_deferral_test_agrees_with_its_reference_on_random_posts():
    """one_line_host_reads (compiled, what a coroutine's post asks) against its plain-Python
    reference, on posts whose requests sit at and around the rule's edges: the last byte of a
    line, one past it, device memory, each other opcode."""
    import numpy as np

    from shm import nic
    from shm.deferred import one_line_host_reads, one_line_host_reads_py
    rng = random.Random(7)
    seen = set()
    for _ in range(2000):
        n = rng.randint(1, 10)
        rows = np.zeros((n, nic.WR_COLS), np.int64)
        for i in range(n):
            rows[i, nic.WR_OP] = nic.VERB_READ if rng.random() < 0.9 else rng.randrange(nic.N_VERBS)
            rows[i, nic.WR_REGION] = nic.REGION_HOST if rng.random() < 0.95 else nic.REGION_DEVICE
            off = 64 * rng.randrange(1000) + rng.choice([0, 1, 8, 56, 63])
            rows[i, nic.WR_OFF] = off
            rows[i, nic.WR_LEN] = rng.choice([1, 8, 64 - off % 64, 65 - off % 64, 128])
            rows[i, nic.WR_FLAGS] = rng.choice([0, nic.FLAG_FENCE])
        want = one_line_host_reads_py(rows)
        assert one_line_host_reads(rows) == want, rows
        seen.add(want)
    assert seen == {True, False}
