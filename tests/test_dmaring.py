"""DMA-written rings in host memory (shm/dmaring.py): both directions, on one env and fabric."""

import pytest

from shm.dma import DMA_BAD_ADDRESS
from shm.dmaring import EMPTY, READY, RING_BUSY, RING_FULL, DmaRing
from tests.test_dma import rack  # noqa: F401  (the fixture: host0 and dpa0 on bf3, one env, host0's engine)


def rec(i: int) -> bytes:
    return f"rec{i:04d}".encode()


def take_all(ring, thread=None):
    out = []
    while (r := ring.host_take(thread)) is not None:
        out.append(r[:7])
    return out


class Core:
    """Stands in for an RdmaThread: records what the ring charges."""

    def __init__(self):
        self.ns = 0

    def cpu(self, ns):
        self.ns += ns


def test_layout_and_attach(rack):
    fabric, env, dma = rack
    ring = DmaRing.layout(fabric, "host0", 8, 64)
    again = DmaRing.attach(fabric, "host0", ring.base)
    assert (again.capacity, again.record_bytes, again.payload_bytes) == (8, 64, 56)
    assert ring.head() == ring.tail() == ring.depth() == 0
    assert ring.host_take() is None
    with pytest.raises(ValueError, match="no DMA ring"):
        DmaRing.attach(fabric, "host0", ring.base + 64)
    with pytest.raises(ValueError, match="multiple of 8"):
        DmaRing.layout(fabric, "host0", 8, 60)


def test_device_push_fifo_and_visible_only_at_the_effect_time(rack):
    fabric, env, dma = rack
    ring = DmaRing.layout(fabric, "host0", 8, 64)
    seen = {}

    def dpu():
        c = ring.device_push(dma, [rec(i) for i in range(3)])
        assert c.succeeded
        env.schedule(c.effect_ns - 1, lambda: seen.setdefault("before", (ring.host_take(), ring.head())))
        env.schedule(c.effect_ns, lambda: seen.setdefault("at", (take_all(ring), ring.head(), ring.tail())))
        yield c
        assert env.now == c.done_ns

    env.process(dpu())
    env.run()
    assert seen["before"] == (None, 0)      # state words not published yet: nothing to take
    assert seen["at"] == ([rec(0), rec(1), rec(2)], 3, 3)
    assert dma.writes == 1                  # records + head: one scatter-gather descriptor


def test_overflow_is_refused_then_room_after_refresh_and_wraparound(rack):
    fabric, env, dma = rack
    ring = DmaRing.layout(fabric, "host0", 4, 64)
    log = []

    def dpu():
        assert (yield ring.device_push(dma, [rec(0), rec(1), rec(2)])).succeeded
        full = ring.device_push(dma, [rec(3), rec(4)])            # 3 + 2 > 4
        assert full.status == RING_FULL and not full.succeeded
        yield full
        assert (yield ring.device_push(dma, [rec(3)])).succeeded
        assert ring.device_push(dma, [rec(4)]).status == RING_FULL
        log.append(take_all(ring)[:2])
        log.append(ring.device_push(dma, [rec(4)]).status)        # the device has not seen the frees
        yield ring.device_refresh(dma)
        # seq 4, 5 wrap to slots 0, 1; the head goes with them in the same descriptor
        c = ring.device_push(dma, [rec(4), rec(5), rec(6), rec(7)])
        assert c.succeeded
        yield c
        log.append(take_all(ring))
        log.append((ring.head(), ring.tail(), ring.statistics()))

    env.process(dpu())
    env.run()
    assert log[0] == [rec(0), rec(1)]
    assert log[1] == RING_FULL
    assert log[2] == [rec(4), rec(5), rec(6), rec(7)]
    assert log[3][0] == log[3][1] == 8 and log[3][2].refused == 3 and log[3][2].taken == 8


def test_unfreed_slot_is_never_overwritten(rack):
    fabric, env, dma = rack
    ring = DmaRing.layout(fabric, "host0", 2, 64)

    def dpu():
        yield ring.device_push(dma, [rec(0), rec(1)])
        yield ring.device_refresh(dma)
        assert ring.device_push(dma, [rec(2)]).status == RING_FULL   # nobody took anything
        # a record taken but whose slot is not free yet (the taker stalls mid-copy) holds the tail
        m64 = fabric.memory[0].host64
        sw = ring._state_word(1)
        assert int(m64[sw]) == (1 << 2) | READY
        assert ring.host_take() == rec(0).ljust(56, b"\0")
        yield ring.device_refresh(dma)
        yield ring.device_push(dma, [rec(2)])
        assert ring.device_push(dma, [rec(3)]).status == RING_FULL   # slot 1 (seq 1) still unread
        assert take_all(ring) == [rec(1), rec(2)]

    env.process(dpu())
    env.run()


def test_two_consumers_never_take_the_same_record(rack):
    fabric, env, dma = rack
    ring = DmaRing.layout(fabric, "host0", 64, 64)
    got = {0: [], 1: []}
    cores = [Core(), Core()]

    def dpu():
        for b in range(8):
            while not (c := ring.device_push(dma, [rec(8 * b + i) for i in range(8)])).succeeded:
                yield ring.device_refresh(dma)
            yield c

    def consumer(k):
        while len(got[0]) + len(got[1]) < 64 and env.now < 1_000_000:
            r = ring.host_take(cores[k])
            if r is not None:
                got[k].append(r[:7])
            yield env.timeout(7 + k)

    env.process(dpu())
    env.process(consumer(0))
    env.process(consumer(1))
    env.run()
    both = got[0] + got[1]
    assert sorted(both) == [rec(i) for i in range(64)]         # every record, exactly once
    assert got[0] and got[1]
    assert got[0] == sorted(got[0]) and got[1] == sorted(got[1])
    assert ring.tail() == 64
    cpu = fabric.profile.cpu
    assert cores[0].ns >= len(got[0]) * cpu.local_cas_ns


def test_state_word_cas_decides_between_racing_takers(rack):
    """A taker whose CAS loses (another thread took the record between its load and its CAS)
    moves on to the next record."""
    fabric, env, dma = rack
    ring = DmaRing.layout(fabric, "host0", 4, 64)

    def dpu():
        yield ring.device_push(dma, [rec(0), rec(1)])

    env.process(dpu())
    env.run()
    import shm.dmaring as mod
    real_cas = mod.cas
    raced = []

    def racing_cas(arr, i, expected, desired):
        if not raced and (int(expected) & 3) == READY:
            raced.append(1)
            assert ring.host_take() == rec(0).ljust(56, b"\0")   # the other thread wins seq 0
        return real_cas(arr, i, expected, desired)

    mod.cas = racing_cas
    try:
        assert ring.host_take() == rec(1).ljust(56, b"\0")
    finally:
        mod.cas = real_cas
    assert ring.host_take() is None and ring.tail() == 2


def test_reverse_direction_host_push_device_poll(rack):
    fabric, env, dma = rack
    ring = DmaRing.layout(fabric, "host0", 4, 128)
    out = []

    def host():
        core = Core()
        for i in range(4):
            assert ring.host_push(rec(i) + b"x" * 100, core)
        assert not ring.host_push(rec(9), core)                 # full: nothing overwritten
        assert core.ns > 0
        yield env.timeout(1)

    def dpa():
        yield env.timeout(2)
        c = ring.device_poll(dma, 3)
        assert ring.device_poll(dma).status == RING_BUSY
        yield c
        out.append([r[:7] for r in c.records])
        assert len(c.records[0]) == 120 and c.records[0][7:107] == b"x" * 100
        assert not ring.host_push(rec(5))                       # freed only when the release lands
        yield env.timeout(fabric.profile.dma.latency_ns + 10)
        assert ring.tail() == 3
        assert ring.host_push(rec(4)) and ring.host_push(rec(5))  # seq 4, 5 wrap to slots 0, 1
        c = ring.device_poll(dma)
        yield c
        out.append([r[:7] for r in c.records])
        yield env.timeout(fabric.profile.dma.latency_ns + 10)
        out.append((ring.head(), ring.tail()))
        c = ring.device_poll(dma)
        yield c
        out.append(c.records)

    env.process(host())
    env.process(dpa())
    env.run()
    assert out[0] == [rec(0), rec(1), rec(2)]
    assert out[1] == [rec(3), rec(4), rec(5)]
    assert out[2] == (6, 6)
    assert out[3] == []


def test_device_poll_stops_at_a_record_not_yet_published(rack):
    """Producers publish out of order: the device takes only the ready prefix, in order."""
    fabric, env, dma = rack
    ring = DmaRing.layout(fabric, "host0", 4, 64)
    m64 = fabric.memory[0].host64
    out = []

    def dpa():
        assert ring.host_push(rec(0)) and ring.host_push(rec(1)) and ring.host_push(rec(2))
        m64[ring._state_word(1)] = (1 << 2) | EMPTY        # seq 1 claimed, its producer not done
        c = ring.device_poll(dma)
        yield c
        out.append([r[:7] for r in c.records])
        m64[ring._state_word(1)] = (1 << 2) | READY
        c = ring.device_poll(dma)
        yield c
        out.append([r[:7] for r in c.records])

    env.process(dpa())
    env.run()
    assert out == [[rec(0)], [rec(1), rec(2)]]


def test_a_push_that_wraps_is_one_descriptor_of_two_runs(rack):
    fabric, env, dma = rack
    ring = DmaRing.layout(fabric, "host0", 4, 64)
    out = []

    def dpu():
        yield ring.device_push(dma, [rec(0), rec(1), rec(2)])
        out.append(take_all(ring))
        yield ring.device_refresh(dma)
        writes = dma.writes
        c = ring.device_push(dma, [rec(3), rec(4), rec(5)])      # slots 3, 0, 1
        assert c.succeeded and dma.writes == writes + 1 and c.nbytes == 3 * 64 + 8
        yield c
        out.append(take_all(ring))

    env.process(dpu())
    env.run()
    assert out == [[rec(0), rec(1), rec(2)], [rec(3), rec(4), rec(5)]]
    assert ring.head() == ring.tail() == 6


def test_a_ring_the_engine_cannot_reach_is_an_error_status(rack):
    fabric, env, dma = rack
    ring = DmaRing.layout(fabric, "dpa0", 4, 64)        # not in the engine's host's memory
    out = []

    def dpu():
        c = ring.device_push(dma, [rec(0)])
        out.append(c.status)
        yield c
        out.append((ring.device_poll(dma).status, ring.device_refresh(dma).status, env.now))

    env.process(dpu())
    env.run()
    assert out == [DMA_BAD_ADDRESS, (DMA_BAD_ADDRESS, DMA_BAD_ADDRESS, 0)]
    assert ring.statistics().pushed == 0
