"""Tests for shm.ring: FIFO semantics, backpressure, attach validation, and
multi-process producers/consumers."""

from __future__ import annotations

import multiprocessing
import re
import time

import numpy as np
import posix_ipc
import pytest
from numba import njit

from shm.ring import (
    HEADER_BYTES,
    Ring,
    RingEmpty,
    RingFull,
    RingStats,
    ring_nbytes,
    ring_try_pop,
    ring_try_push,
)
from shm.segment import Segment

fork = multiprocessing.get_context("fork")


@pytest.fixture
def ring(prefix):
    r = Ring.create("q", 8, 3, prefix=prefix)
    yield r
    r.close()


# -- single process ---------------------------------------------------------


def test_geometry(ring, prefix):
    assert ring.name == f"/{prefix}.q"
    assert (ring.capacity, ring.slot_words, ring.multi_producer) == (8, 3, True)
    assert len(ring) == 0


def test_fifo_over_many_laps(ring):
    expected = []
    got = []
    for i in range(100):  # 100 pushes through 8 slots, the fill level see-sawing
        assert ring.try_push([i, i * i, -i])
        expected.append(i)
        if len(ring) == ring.capacity:
            got += [int(m[0]) for m in ring.drain(5)]
        elif i % 3 == 0:
            got.append(int(ring.try_pop()[0]))
    got += [int(m[0]) for m in ring.drain(100)]
    assert got == expected
    assert len(ring) == 0


def test_message_words_and_padding(ring):
    ring.push(np.array([1, 2, 3], dtype=np.uint64))
    ring.push([7])  # short messages are zero-padded
    ring.push([-1, 2**64 - 1])  # negative words wrap
    ring.push(np.array([5, 6], dtype=np.int32))
    ring.push([])
    out = [m.tolist() for m in ring.drain(10)]
    assert out == [[1, 2, 3], [7, 0, 0], [2**64 - 1, 2**64 - 1, 0], [5, 6, 0], [0, 0, 0]]
    assert ring.try_pop() is None


def test_bad_messages(ring):
    with pytest.raises(ValueError, match="exceeds slot_words=3"):
        ring.try_push([1, 2, 3, 4])
    with pytest.raises(ValueError, match="integers"):
        ring.push([1.5])
    with pytest.raises(ValueError, match="1-D"):
        ring.push(np.zeros((2, 2), dtype=np.uint64))
    with pytest.raises(ValueError, match="integers"):
        ring.push(np.zeros(2, dtype=np.float64))
    with pytest.raises(ValueError, match="sequence of integers"):
        ring.push(5)
    assert len(ring) == 0


def test_full_ring_refuses_and_keeps_contents(ring):
    for i in range(8):
        assert ring.try_push([i])
    assert len(ring) == 8
    assert not ring.try_push([99])
    t0 = time.monotonic()
    with pytest.raises(RingFull, match=re.escape(ring.name) + r".*capacity 8"):
        ring.push([99], timeout=0.05)
    waited = time.monotonic() - t0
    assert 0.04 < waited < 1.0
    with pytest.raises(RingFull):
        ring.push([99], timeout=0)
    assert [int(m[0]) for m in ring.drain(100)] == list(range(8))  # nothing overwritten
    st = ring.statistics()
    assert (st.pushes, st.pops, st.full_events, st.len) == (8, 8, 3, 0)


def test_push_waits_for_room(prefix):
    with Ring.create("w", 2, 1, prefix=prefix) as r:
        r.push([1])
        r.push([2])
        p = fork.Process(target=_pop_later, args=(r.name,))
        p.start()
        r.push([3], timeout=10)  # blocks until the child pops
        p.join(10)
        assert p.exitcode == 0
        assert [int(m[0]) for m in r.drain(5)] == [2, 3]


def _pop_later(name):
    time.sleep(0.05)
    with Ring.attach(name) as r:
        assert int(r.pop(timeout=5)[0]) == 1


def test_empty_ring(ring):
    assert ring.try_pop() is None
    t0 = time.monotonic()
    with pytest.raises(RingEmpty, match=re.escape(ring.name)):
        ring.pop(timeout=0.03)
    assert time.monotonic() - t0 >= 0.025
    with pytest.raises(RingEmpty):
        ring.pop(timeout=0)
    assert ring.drain(5) == []
    assert ring.statistics().empty_events == 3


def test_single_producer_mode(prefix):
    with Ring.create("sp", 4, 2, prefix=prefix, multi_producer=False) as r:
        assert not r.multi_producer
        for lap in range(5):
            for i in range(4):
                assert r.try_push([lap, i])
            assert not r.try_push([9, 9])
            assert [m.tolist() for m in r.drain(10)] == [[lap, i] for i in range(4)]


@pytest.mark.parametrize("capacity", [0, 1, 3, 12])
def test_capacity_must_be_power_of_two(prefix, capacity):
    with pytest.raises(ValueError, match="power of two"):
        Ring.create("bad", capacity, 1, prefix=prefix)


def test_slot_words_positive(prefix):
    with pytest.raises(ValueError, match="slot_words"):
        Ring.create("bad", 4, 0, prefix=prefix)


def test_statistics_record(ring):
    ring.push([1])
    st = ring.statistics()
    assert isinstance(st, RingStats)
    assert st == RingStats(ring.name, 8, 3, True, 1, 1, 0, 0, 0)
    with pytest.raises(AttributeError):
        st.len = 5


def test_close_is_idempotent_and_unlinks(prefix):
    r = Ring.create("c", 4, 1, prefix=prefix)
    r.close()
    r.close()
    assert r.closed
    with pytest.raises(ValueError, match="closed"):
        r.try_push([1])
    with pytest.raises(FileNotFoundError):
        Ring.attach(r.name)


def test_jitted_cores_on_views(ring):
    @njit
    def pump(hdr, seqs, slots, n):
        msg = np.zeros(3, dtype=np.uint64)
        out = np.zeros(3, dtype=np.uint64)
        total = 0
        for i in range(n):
            msg[0] = i
            ring_try_push(hdr, seqs, slots, msg)
            ring_try_pop(hdr, seqs, slots, out)
            total += out[0]
        return total

    assert pump(*ring.views(), 1000) == sum(range(1000))


# -- attach -----------------------------------------------------------------


def test_attach_shares_state(ring):
    ring.push([1, 2, 3])
    with Ring.attach(ring.name) as other:
        assert (other.capacity, other.slot_words, other.multi_producer) == (8, 3, True)
        assert len(other) == 1
        assert other.pop().tolist() == [1, 2, 3]
        other.push([4])
    assert ring.pop().tolist() == [4, 0, 0]
    with Segment.attach(ring.name) as seg:
        assert seg.size == ring_nbytes(8, 3)


def test_attach_validates(prefix):
    with Segment.create("plain", 4096, prefix=prefix) as seg:
        with pytest.raises(ValueError, match="not an initialised dmrack ring"):
            Ring.attach(seg.name)
    with Segment.create("tiny", HEADER_BYTES - 8, prefix=prefix) as seg:
        with pytest.raises(ValueError, match="too small to be a ring"):
            Ring.attach(seg.name)
    with pytest.raises(FileNotFoundError):
        Ring.attach(f"/{prefix}.missing")


def test_attach_rejects_bad_geometry(prefix):
    with Ring.create("g", 8, 2, prefix=prefix) as r:
        hdr = Segment.attach(r.name)
        try:
            words = hdr.array(np.int64, 0, 3)
            words[1] = 6  # capacity no longer a power of two
            with pytest.raises(ValueError, match="corrupt header"):
                Ring.attach(r.name)
            words[1] = 1024  # larger than the segment
            with pytest.raises(ValueError, match=r"capacity=1024.*only \d+ bytes"):
                Ring.attach(r.name)
            words[1] = 8
            Ring.attach(r.name).close()
            del words
        finally:
            hdr.close()


# -- multi-process ----------------------------------------------------------


def _producer(name, pid, n):
    with Ring.attach(name) as r:
        for seq in range(n):
            r.push([pid, seq], timeout=30)


def test_multi_producer_multi_process(prefix):
    producers, n = 3, 20_000
    with Ring.create("mp", 64, 2, prefix=prefix) as r:
        procs = [fork.Process(target=_producer, args=(r.name, k, n)) for k in range(producers)]
        for p in procs:
            p.start()
        nxt = [0] * producers
        received = 0
        deadline = time.monotonic() + 60
        while received < producers * n:
            assert time.monotonic() < deadline, f"stalled at {received} messages"
            batch = r.drain(1024) or [r.pop(timeout=10)]
            for m in batch:
                k, seq = int(m[0]), int(m[1])
                assert seq == nxt[k], f"producer {k}: got {seq}, expected {nxt[k]}"
                nxt[k] += 1
            received += len(batch)
        for p in procs:
            p.join(10)
        assert [p.exitcode for p in procs] == [0] * producers
        assert nxt == [n] * producers  # each message exactly once, in order
        assert r.try_pop() is None


def _consumer(name, q):
    got = []
    with Ring.attach(name) as r:
        while True:
            m = r.pop(timeout=30)
            if int(m[0]) == 2**64 - 1:
                break
            got.append((int(m[0]), int(m[1])))
    q.put(got)


def test_multi_producer_multi_consumer(prefix):
    producers, consumers, n = 2, 2, 10_000
    with Ring.create("mpmc", 32, 2, prefix=prefix) as r:
        q = fork.Queue()
        cons = [fork.Process(target=_consumer, args=(r.name, q)) for _ in range(consumers)]
        prods = [fork.Process(target=_producer, args=(r.name, k, n)) for k in range(producers)]
        for p in cons + prods:
            p.start()
        for p in prods:
            p.join(60)
        for _ in cons:
            r.push([-1], timeout=10)  # one stop message per consumer
        results = [q.get(timeout=60) for _ in cons]
        for p in cons:
            p.join(10)
        assert [p.exitcode for p in cons + prods] == [0] * (producers + consumers)
    everything = sorted(m for got in results for m in got)
    assert everything == [(k, s) for k in range(producers) for s in range(n)]
    for got in results:
        # Each consumer sees any one producer's messages in order.
        for k in range(producers):
            seqs = [s for kk, s in got if kk == k]
            assert seqs == sorted(seqs)


def test_single_producer_ring_across_processes(prefix):
    n = 20_000
    with Ring.create("sp", 16, 2, prefix=prefix, multi_producer=False) as r:
        p = fork.Process(target=_producer, args=(r.name, 0, n))
        p.start()
        got = []
        while len(got) < n:
            got += [int(m[1]) for m in (r.drain(256) or [r.pop(timeout=10)])]
        p.join(10)
        assert p.exitcode == 0
        assert got == list(range(n))


def test_ring_segment_is_posix_named(ring):
    # Other tools (dmrack clean) find rings like any other segment.
    posix_ipc.SharedMemory(ring.name).close_fd()
