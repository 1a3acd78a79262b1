"""PD3's Loading Zone (nodes/systems/pd3/loading_zone.py): a DPU DMA-writes items, host threads take them."""

import numpy as np
import pytest

import nodes.systems.pd3.loading_zone as lzmod
from nodes.systems.pd3.loading_zone import (CONSUMED, ITEM_HEADER, PAD, PRODUCED, ZONE_BUSY, ZONE_FULL, LoadingZone,
                                            _state, item_bytes, scan_ns)
from shm.dma import DmaEngine
from shm.verbs import VerbsHost
from tests.test_dma import rack  # noqa: F401  (the fixture: host0 and dpa0 on bf3, one env, host0's engine)


class Core:
    """Stands in for an RdmaThread: records what the zone charges."""

    def __init__(self):
        self.ns = 0

    def cpu(self, ns):
        self.ns += ns


def val(i: int, n: int = 16) -> bytes:
    return f"v{i:05d}".encode().ljust(n, b".")


def run(env, gen):
    env.process(gen)
    env.run()


def test_layout_attach_and_bad_inputs_are_one_line(rack):
    fabric, env, dma = rack
    lz = LoadingZone.layout(fabric, "host0", 1024)
    again = LoadingZone.attach(fabric, "host0", lz.base)
    assert again.capacity == 1024 and lz.head() == lz.tail() == 0 and lz.bytes_free() == 1024
    assert lz.check_and_return(None, 7) is None
    cases = [
        (lambda: LoadingZone.layout(fabric, "host0", 1000), "multiple of 64"),
        (lambda: LoadingZone.attach(fabric, "host0", lz.base + 64), "no Loading Zone"),
        (lambda: lz.check_and_return(None, b"12345"), "key is 8 bytes"),
        (lambda: lz.check_and_return(None, -1), "key is 8 bytes"),
        (lambda: lz.produce(dma, [(1 << 64, b"x")]), "key is 8 bytes"),
        (lambda: lz.produce(dma, [(1, b"x" * 1001)]), "does not fit a Loading Zone of 1024 B"),
        (lambda: LoadingZone.layout(fabric, "dpa0", 256).produce(dma, [(1, b"x")]), "reaches node 0's"),
        (lambda: LoadingZone.layout(fabric, "dpa0", 256).clean(dma), "reaches node 0's"),
    ]
    for call, msg in cases:
        with pytest.raises(ValueError, match=msg) as e:
            call()
        assert "\n" not in str(e.value)
    assert lz.tail() == 0 and dma.writes == 0          # nothing posted for a bad batch
    big = item_bytes(1024 - ITEM_HEADER)
    assert big == 1024                                  # an item as large as the zone is accepted

    def dpu():
        yield lz.produce(dma, [(b"\x01" * 8, b"abc")])

    run(env, dpu())
    with pytest.raises(ValueError, match="too small"):
        lz.check_and_return(None, b"\x01" * 8, dest=bytearray(2))
    assert lz.check_and_return(None, int.from_bytes(b"\x01" * 8, "little")) == b"abc"   # still there


def test_produce_then_each_item_is_taken_exactly_once(rack):
    fabric, env, dma = rack
    lz = LoadingZone.layout(fabric, "host0", 4096)

    def dpu():
        c = lz.produce(dma, [(i, val(i, 8 + i)) for i in range(10)])
        assert c.succeeded and c.written == list(range(10)) and c.dropped == []
        yield c

    run(env, dpu())
    assert dma.writes == 1                             # items + Tail: one descriptor
    assert lz.tail() == sum(item_bytes(8 + i) for i in range(10))
    assert lz.check_and_return(None, 3) == val(3, 11)
    assert lz.check_and_return(None, 3) is None        # consumed: skipped, no other item of key 3
    dest = bytearray(64)
    assert lz.check_and_return(None, 9, dest) == 17 and bytes(dest[:17]) == val(9, 17)
    assert lz.check_and_return(None, 12345) is None    # a miss returns at once
    got = [lz.check_and_return(None, i) for i in range(10)]
    assert got == [val(i, 8 + i) if i not in (3, 9) else None for i in range(10)]
    st = lz.statistics()
    assert (st.produced, st.consumed, st.scans, st.misses) == (10, 10, 14, 4)
    assert st.produced_bytes == sum(8 + i for i in range(10)) and st.dropped == 0


def test_racing_threads_for_one_key_exactly_one_wins(rack):
    fabric, env, dma = rack
    lz = LoadingZone.layout(fabric, "host0", 4096)
    wins = []

    def dpu():
        yield lz.produce(dma, [(k, val(k)) for k in range(20)])

    def app(tid):
        yield env.timeout(5_000)                       # all threads ask at the same virtual time
        for k in range(20):
            r = lz.check_and_return(Core(), k)
            if r is not None:
                wins.append((k, tid, r))

    env.process(dpu())
    for tid in range(4):
        env.process(app(tid))
    env.run()
    assert sorted(k for k, _t, _r in wins) == list(range(20))       # each key won exactly once
    assert all(r == val(k) for k, _t, r in wins)
    assert lz.statistics().consumed == 20 and lz.statistics().misses == 60


def test_a_lost_cas_skips_the_item_and_the_scan_goes_on(rack):
    """Another thread consumes the item between this thread's copy and its CAS: the CAS fails and
    the scan continues to the next item of that key."""
    fabric, env, dma = rack
    lz = LoadingZone.layout(fabric, "host0", 1024)

    def dpu():
        yield lz.produce(dma, [(7, b"first"), (8, b"other"), (7, b"second")])

    run(env, dpu())
    real_cas = lzmod.cas
    raced = []

    def racing_cas(arr, i, expected, desired):
        if not raced:
            raced.append(1)
            assert lz.check_and_return(None, 7) == b"first"      # the other thread wins
        return real_cas(arr, i, expected, desired)

    lzmod.cas = racing_cas
    core = Core()
    try:
        assert lz.check_and_return(core, 7) == b"second"
    finally:
        lzmod.cas = real_cas
    assert core.ns >= scan_ns(fabric.profile, 0, 2)              # the lost CAS and the won one
    assert lz.check_and_return(None, 7) is None


def test_the_host_never_sees_a_half_written_item(rack):
    fabric, env, dma = rack
    lz = LoadingZone.layout(fabric, "host0", 4096)
    big = bytes(range(256)) * 2                        # 512 B: 9 lines with its header
    seen = {}

    def dpu():
        c = lz.produce(dma, [(1, big), (2, b"small")])
        env.schedule(c.effect_ns - 1, lambda: seen.setdefault("before", (lz.check_and_return(None, 2),
                                                                         lz.check_and_return(None, 1), lz.tail())))
        env.schedule(c.effect_ns, lambda: seen.setdefault("at", (lz.check_and_return(None, 2),
                                                                 lz.check_and_return(None, 1))))
        yield c

    run(env, dpu())
    assert seen["before"] == (None, None, 0)
    assert seen["at"] == (b"small", big)
    # items whose bytes are in memory but whose Tail is not (a DMA still landing): invisible
    o = lz._off(lz.tail())
    mem = fabric.memory[0]
    mem.host64[o >> 3:(o >> 3) + 3] = [3, _state(lz.tail(), PRODUCED), 99]
    mem.host[o + ITEM_HEADER:o + ITEM_HEADER + 3] = np.frombuffer(b"new", np.uint8)
    assert lz.check_and_return(None, 99) is None
    mem.host64[lz._w0 + 16] = lz.tail() + item_bytes(3)      # Tail lands: now it is there
    assert lz.check_and_return(None, 99) == b"new"


def test_full_zone_drops_and_counts_then_cleaning_makes_room(rack):
    fabric, env, dma = rack
    lz = LoadingZone.layout(fabric, "host0", 256)      # 4 items of 40 B data (64 B each)
    log = {}

    def dpu():
        c = lz.produce(dma, [(k, val(k, 40)) for k in range(6)])
        assert c.written == [0, 1, 2, 3] and c.dropped == [4, 5]
        yield c
        st = lz.statistics()
        log["full"] = (st.dropped, st.dropped_bytes, st.bytes_free)
        assert lz.produce(dma, [(9, b"x")]).status == ZONE_FULL
        yield env.timeout(5_000)                       # the clean a drop started found nothing consumed
        assert lz.head() == 0
        assert lz.check_and_return(None, 1) == val(1, 40)   # consume 0 and 1 out of order, 3 too
        assert lz.check_and_return(None, 0) == val(0, 40)
        assert lz.check_and_return(None, 3) == val(3, 40)
        c = lz.clean(dma)
        assert lz.clean(dma).status == ZONE_BUSY
        yield c
        log["clean"] = (c.cleaned, lz.head(), lz.statistics().cleaned)   # stops at item 2
        c = lz.produce(dma, [(10, val(10, 40)), (11, val(11, 40)), (12, val(12, 40))])
        assert c.written == [10, 11] and c.dropped == [12]
        yield c

    run(env, dpu())
    assert log["full"] == (2, 80, 0)
    assert log["clean"] == (2, 128, 2)
    assert [lz.check_and_return(None, k) for k in (2, 10, 11, 12)] == [val(2, 40), val(10, 40), val(11, 40), None]
    st = lz.statistics()
    assert (st.produced, st.dropped, st.consumed) == (6, 4, 6)


def test_wraparound_with_a_pad_record_and_a_header_less_gap(rack):
    fabric, env, dma = rack
    lz = LoadingZone.layout(fabric, "host0", 256)
    m64 = fabric.memory[0].host64
    out = []

    def dpu():
        # 3 items of 64 B, then one of 40 B: 232 B used, 24 B left before the end
        yield lz.produce(dma, [(k, val(k, 40)) for k in range(3)] + [(3, val(3, 16))])
        for k in range(4):
            assert lz.check_and_return(None, k) is not None
        yield lz.clean(dma)
        assert lz.head() == lz.tail() == 232
        # 64 B does not fit the 24 B left: a PAD record there, the item at the next lap's start
        c = lz.produce(dma, [(4, val(4, 40))])
        yield c
        pad = lz._off(232) >> 3
        out.append((int(m64[pad]), int(m64[pad + 1]), lz.tail()))
        out.append(lz.check_and_return(None, 4))
        # consume, clean over the PAD, fill to 8 B before the end: that gap has no header
        yield lz.clean(dma)
        out.append(lz.head())
        yield lz.produce(dma, [(5, val(5, 40)), (6, val(6, 96))])       # 64 + 120 B: Tail at offset 248
        c = lz.produce(dma, [(8, val(8, 8))])
        yield c
        out.append((c.written, lz.tail(), [lz.check_and_return(None, k) for k in (5, 6, 8)]))

    run(env, dpu())
    assert out[0] == (0, _state(232, PAD), 256 + 64)          # PAD: no data bytes, 24 B of header
    assert out[1] == val(4, 40)
    assert out[2] == 320
    assert out[3] == ([8], 512 + 32, [val(5, 40), val(6, 96), val(8, 8)])   # skipped the 8 B at 504..512


def test_scan_costs_lines_per_header_and_one_cas_per_hit(rack):
    fabric, env, dma = rack
    lz = LoadingZone.layout(fabric, "host0", 4096)
    prof = fabric.profile

    def cost(lines, cas_ops=0, cached=0, fresh=2):
        return scan_ns(prof, lines, cas_ops, cached=cached, fresh=fresh)

    def dpu():
        yield lz.produce(dma, [(k, val(k, 40)) for k in range(10)])    # one 64 B line per item

    run(env, dpu())
    miss = Core()
    assert lz.check_and_return(miss, 999) is None
    assert miss.ns == cost(10)                         # 10 new header lines, Head and Tail fresh
    assert lz.statistics().headers_scanned == 10
    hit = Core()
    assert lz.check_and_return(hit, 4) == val(4, 40)
    # 5 headers (the data shares item 4's line), all read by the last call and Head and Tail
    # unchanged since: cache hits; one CAS
    assert hit.ns == cost(0, 1, cached=5, fresh=0) < cost(5, 1)
    after = Core()
    assert lz.check_and_return(after, 999) is None     # the consumed item is still scanned
    assert after.ns == cost(0, cached=10, fresh=0)
    # the scan streams: a longer scan costs more, but far less than a latency per line
    assert cost(1) < cost(10) < 10 * cost(1)

    lz2 = LoadingZone.layout(fabric, "host0", 4096)

    def dpu2():
        yield lz2.produce(dma, [(k, b"12345678") for k in range(8)])   # 32 B items: two headers a line

    run(env, dpu2())
    small = Core()
    assert lz2.check_and_return(small, 999) is None
    assert small.ns == cost(4)


def test_host_threads_consume_while_the_device_produces_and_cleans(rack):
    fabric, env, dma = rack
    lz = LoadingZone.layout(fabric, "host0", 1024)
    got = {}
    n = 120

    wins = []

    def dpu():
        pending = list(range(n))
        while pending:
            batch, pending = pending[:4], pending[4:]
            c = lz.produce(dma, [(k, val(k, 24)) for k in batch], clean=False)
            pending = c.dropped + pending              # the Transfer Engine re-issues what was dropped
            if c.status != ZONE_FULL:
                yield c
            if c.dropped:
                yield lz.clean(dma)
            yield env.timeout(300)

    def app(tid):
        core = Core()
        while len(got) < n and env.now < 2_000_000:
            lo = next(k for k in range(n) if k not in got)
            for k in range(lo, min(lo + 8, n)):
                if (r := lz.check_and_return(core, k)) is not None:
                    wins.append(k)
                    got[k] = r
            yield env.timeout(150 + 7 * tid)

    env.process(dpu())
    for tid in range(3):
        env.process(app(tid))
    env.run(until=2_100_000)
    assert sorted(wins) == list(range(n)) and all(got[k] == val(k, 24) for k in got)
    assert lz.statistics().cleaned > 0 and lz.head() > 0


def test_a_scanner_with_a_stale_head_jumps_over_reclaimed_space(rack):
    """A thread that loaded Head before the device reclaimed and refilled the space reads a state
    word that is not its position's: it reloads Head, jumps to it, and still finds the new item."""
    fabric, env, dma = rack
    lz = LoadingZone.layout(fabric, "host0", 256)

    def dpu():
        yield lz.produce(dma, [(k, val(k, 40)) for k in range(4)])
        for k in range(4):
            lz.check_and_return(None, k)
        yield lz.clean(dma)
        yield lz.produce(dma, [(10, val(10, 8)), (11, val(11, 100))])   # over items 0..2's space

    run(env, dpu())
    real = lzmod.load_acquire
    calls = []

    def stale_head_first(arr, i):
        if not calls and i == lz._w0 + 8:
            calls.append(1)
            return np.uint64(0)                        # the Head of before the clean
        return real(arr, i)

    lzmod.load_acquire = stale_head_first
    try:
        assert lz.check_and_return(None, 11) == val(11, 100)
    finally:
        lzmod.load_acquire = real


def test_a_second_engine_object_of_the_device_shares_the_zone(rack):
    fabric, env, dma = rack
    other = DmaEngine(VerbsHost(fabric, env), "dpa0", "host0")
    lz = LoadingZone.layout(fabric, "host0", 512)

    def dpu():
        yield lz.produce(other, [(1, b"a")])
        yield lz.produce(dma, [(2, b"b")])

    run(env, dpu())
    host_end = LoadingZone.attach(fabric, "host0", lz.base)     # a host thread's view, e.g. another process
    assert (host_end.check_and_return(None, 2), host_end.check_and_return(None, 1)) == (b"b", b"a")
    assert host_end.statistics().consumed == 2 and host_end.statistics().produced == 0
    assert int(fabric.memory[0].host64[lz._off(0) // 8 + 1]) == _state(0, CONSUMED)
    assert PRODUCED != CONSUMED != PAD


def test_the_compiled_walk_to_the_next_item_matches_its_python_reference():
    # next_produced passes consumed items, pads and reclaimed space in compiled code: on random
    # zone contents (state words of every kind, some right for their position, some not; Head
    # anywhere), from random start positions, it returns what the plain-Python reference returns
    rng = np.random.default_rng(7)
    cap, data = 4096, 192
    for _trial in range(200):
        m64 = np.zeros((data + cap) // 8, np.uint64)
        m64[1] = int(rng.integers(0, 3 * cap))                        # Head (word 1 here)
        pos = int(rng.integers(0, 2 * cap)) // 8 * 8
        p = pos
        while p < pos + cap:                                         # lay item headers from pos on
            size = int(rng.integers(0, 200))
            sw = (data + p % cap) >> 3
            if (data + p % cap) + ITEM_HEADER > data + cap:
                break
            st = int(rng.choice([PRODUCED, CONSUMED, PAD, 0]))
            word = lzmod._state(p, st) if st else int(rng.integers(0, 1 << 63))
            if rng.random() < 0.1:
                word = lzmod._state(p + 8, PRODUCED)                # a state of another position
            m64[sw] = (int(rng.integers(0, 1 << 31)) << 32) | size
            m64[sw + 1] = word
            m64[sw + 2] = int(rng.integers(0, 1 << 63))
            p += lzmod.item_bytes(size)
        args = (1, data, cap, pos, pos + int(rng.integers(0, cap)), -1, int(rng.integers(0, 200)), 2, 0, 0)
        got = lzmod.next_produced(m64, *args)
        ref = lzmod.next_produced_py(m64, *args)
        assert tuple(int(x) for x in got) == ref, (got, ref)
