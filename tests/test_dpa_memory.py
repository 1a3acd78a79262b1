"""The DPA cache model (nodes/devices/dpa_memory.py): LRU per level, hit and miss costs, the shared
L2, stores invalidating other threads' L1 copies, overlap, statistics and limits."""
import dataclasses

import pytest

from nodes.devices.dpa_memory import DpaCacheStats, DpaError, DpaMemory
from shm.profile import load_profile

BF3 = load_profile("bf3").dpa
L1, L2, L3, MEM = BF3.l1_ns, BF3.l2_ns, BF3.l3_ns, BF3.memory_ns


@pytest.fixture
def mem():
    return DpaMemory(BF3)


def small(**kw):
    """A tiny hierarchy: L1 2 lines, L2 4 lines, L3 8 lines (bf3's latencies)."""
    return DpaMemory(dataclasses.replace(BF3, l1_bytes=128, l2_bytes=256, l3_bytes=512, **kw))


def test_first_touch_costs_memory_then_l1(mem):
    assert mem.access(0, 0, 8) == MEM
    assert mem.access(0, 0, 8) == L1
    assert mem.access(0, 56, 8) == L1          # same 64-byte line


def test_an_access_touches_every_line_it_spans(mem):
    assert mem.access(0, 60, 8) == 2 * MEM     # straddles lines 0 and 1
    assert mem.statistics().lines == 2
    assert mem.access(0, 0, 128) == 2 * L1


def test_l2_is_shared_l1_is_not(mem):
    mem.access(0, 4096, 8)
    assert mem.access(1, 4096, 8) == L2        # thread 1: not in its L1, in the shared L2
    assert mem.access(1, 4096, 8) == L1


def test_lru_evicts_the_least_recent_line():
    m = small()
    m.access(0, 0, 8); m.access(0, 64, 8)      # L1 = {0, 1}
    m.access(0, 0, 8)                          # 0 most recent
    m.access(0, 128, 8)                        # evicts line 1 from L1
    assert m.access(0, 0, 8) == L1
    assert m.access(0, 64, 8) == L2            # evicted from L1, still in L2


def test_levels_fall_through_to_l3_and_memory():
    m = small()
    for i in range(6):                         # 6 lines: L2 (4) keeps 2..5, L3 (8) keeps all
        m.access(0, 64 * i, 8)
    assert m.access(1, 0, 8) == L3
    for i in range(8, 18):                     # 10 more lines push line 1 out of L3 too
        m.access(0, 64 * i, 8)
    assert m.access(1, 64, 8) == MEM


def test_store_invalidates_other_threads_l1(mem):
    mem.access(0, 0, 8); mem.access(1, 0, 8)
    assert mem.access(1, 0, 8, write=True) == L1
    assert mem.access(0, 0, 8) == L2           # its copy was dropped
    assert mem.statistics().invalidations == 1


def test_overlap_costs_the_slowest_line_plus_l1_each(mem):
    assert mem.access(0, 0, 256, overlap=True) == MEM + 3 * L1
    assert mem.access(0, 1024, 256) == 4 * MEM


def test_prefetch_then_access_hits(mem):
    assert mem.prefetch(0, 0, 192) == MEM
    assert mem.access(0, 0, 192) == 3 * L1


def test_install_puts_packet_lines_in_l2(mem):
    mem.install(8192, 100)
    assert mem.access(5, 8192, 100) == 2 * L2


def test_statistics_is_an_immutable_record(mem):
    mem.access(0, 0, 8); mem.access(0, 0, 8); mem.access(1, 0, 8)
    s = mem.statistics()
    assert isinstance(s, DpaCacheStats)
    assert (s.accesses, s.lines, s.l1_hits, s.l1_misses, s.l2_hits, s.l2_misses, s.memory) == (3, 3, 1, 2, 1, 1, 1)
    assert s.ns == MEM + L1 + L2
    with pytest.raises(AttributeError):
        s.l1_hits = 0


def test_limits_are_one_line_errors_naming_the_key(mem):
    for call, key in [(lambda: mem.access(189, 0, 8), "dpa.usable_threads"),
                      (lambda: mem.access(0, BF3.memory_bytes - 4, 8), "dpa.memory_bytes"),
                      (lambda: mem.access(0, 0, 0), "dpa.memory_bytes")]:
        with pytest.raises(DpaError) as ei:
            call()
        assert key in str(ei.value) and "\n" not in str(ei.value)
    with pytest.raises(DpaError, match=r"no \[dpa\] table"):
        DpaMemory(load_profile("cx6-200g").dpa)


def test_host_copy_rate(mem):
    assert mem.host_copy_ns(120_000_000) == 1_000_000_000     # 120 MB at 120 MB/s: 1 s


class ReferenceDpaMemory:
    """The rules of the module docstring, written plainly: one OrderedDict per level, a store or
    the NIC's write searching every thread's L1 for the line. The model keeps an index of L1
    holders instead; both must price and fill the same way."""

    def __init__(self, p):
        from collections import OrderedDict
        self.p, self.od = p, OrderedDict
        shift = p.line_bytes.bit_length() - 1
        self.shift = shift
        self.caps = (p.l1_bytes >> shift, p.l2_bytes >> shift, p.l3_bytes >> shift)
        self.l1, self.l2, self.l3 = {}, OrderedDict(), OrderedDict()
        self.inval = 0

    @staticmethod
    def hit(level, line):
        if line in level:
            level.move_to_end(line)
            return True
        return False

    @staticmethod
    def fill(level, line, cap):
        if cap:
            level[line] = None
            if len(level) > cap:
                level.popitem(last=False)

    def line(self, thread, line):
        p = self.p
        l1 = self.l1.setdefault(thread, self.od())
        if self.hit(l1, line):
            return p.l1_ns
        if self.hit(self.l2, line):
            cost = p.l2_ns
        else:
            if self.hit(self.l3, line):
                cost = p.l3_ns
            else:
                cost = p.memory_ns
                self.fill(self.l3, line, self.caps[2])
            self.fill(self.l2, line, self.caps[1])
        self.fill(l1, line, self.caps[0])
        return cost

    def span(self, addr, nbytes):
        return range(addr >> self.shift, ((addr + nbytes - 1) >> self.shift) + 1)

    def access(self, thread, addr, nbytes, write=False, overlap=False):
        span = self.span(addr, nbytes)
        costs = [self.line(thread, x) for x in span]
        if write:
            for t, l1 in self.l1.items():
                if t != thread:
                    for x in span:
                        if l1.pop(x, 0) is None:
                            self.inval += 1
        return max(costs) + (len(costs) - 1) * self.p.l1_ns if overlap else sum(costs)

    def prefetch(self, thread, addr, nbytes):
        return max(self.line(thread, x) for x in self.span(addr, nbytes))

    def install(self, addr, nbytes):
        for x in self.span(addr, nbytes):
            if not self.hit(self.l2, x):
                self.fill(self.l2, x, self.caps[1])
            for l1 in self.l1.values():
                if l1.pop(x, 0) is None:
                    self.inval += 1


@pytest.mark.parametrize("seed", range(6))
def test_the_model_matches_its_plain_reference_on_random_accesses(seed):
    import random
    rng = random.Random(seed)
    p = dataclasses.replace(BF3, l1_bytes=64 * rng.choice([0, 1, 2, 4]), l2_bytes=64 * rng.choice([0, 3, 8]),
                            l3_bytes=64 * rng.choice([0, 5, 16]))
    model, ref = DpaMemory(p), ReferenceDpaMemory(p)
    for _ in range(3000):
        thread = rng.randrange(6)
        addr = rng.randrange(40) * 32 + rng.randrange(8)
        nbytes = rng.choice([1, 8, 8, 8, 64, 100, 200])
        what = rng.random()
        if what < 0.15:
            assert model.prefetch(thread, addr, nbytes) == ref.prefetch(thread, addr, nbytes)
        elif what < 0.22:
            model.install(addr, nbytes)
            ref.install(addr, nbytes)
        else:
            write, overlap = rng.random() < 0.35, rng.random() < 0.3
            assert model.access(thread, addr, nbytes, write=write, overlap=overlap) == \
                ref.access(thread, addr, nbytes, write, overlap)
    assert model.statistics().invalidations == ref.inval
    # the same lines in the same recency order at every level
    assert list(model._l2) == list(ref.l2) and list(model._l3) == list(ref.l3)
    assert {t: list(l) for t, l in model._l1.items() if l} == {t: list(l) for t, l in ref.l1.items() if l}
