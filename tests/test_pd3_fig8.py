"""PD3 Fig. 8: the coherence model (nodes/devices/coherence.py) and the three rings
(cluster/experiments/_pd3_fig8.py). Virtual time only; nothing asserts on wall-clock time."""

import pytest

from cluster.experiments import _pd3_fig8 as f8
from nodes.devices.coherence import Coherence, CoherenceCosts, Line
from shm.sim.env import Environment
from shm.profile import load_profile

COSTS = CoherenceCosts(ccds=2, cores_per_ccd=2, l1_ns=1.0, intra_ccd_ns=20.0, cross_ccd_ns=80.0, dma_line_ns=100.0,
                       memory_ns=100.0, atomic_ns=3.0, pause_ns=20.0, yield_ns=300.0)


@pytest.fixture
def env():
    return Environment()


@pytest.fixture
def host():
    return Coherence(COSTS)


def test_line_written_by_another_core_costs_a_transfer(host):
    line = Line()
    assert host.write(0, line, 0.0) == 100.0           # nobody holds it: from memory
    assert host.read(0, line, 110.0) == 111.0          # own line: L1 hit
    assert host.read(1, line, 110.0) == 130.0          # same CCD: intra-CCD transfer
    host.write(0, line, 150.0)
    assert host.read(2, line, 200.0) == 280.0          # other CCD: cross-CCD transfer
    assert line.transfers == 4


def test_device_write_invalidates_and_next_read_goes_to_memory(host):
    line = Line()
    host.read(0, line, 0.0)
    host.device_write(line, 50.0)
    assert host.read(0, line, 60.0) == 160.0


def test_concurrent_writers_on_one_line_serialise(env, host):
    line, done = Line(), {}

    def writer(core):
        done[core] = host.cas(core, line, float(env.now))
        yield 0

    for core in range(4):
        env.process(writer(core))
    env.run()
    # each CAS waits for the previous one: memory + 3, then one hop (intra 20, cross 80) + 3 each
    assert [done[c] for c in range(4)] == [103.0, 126.0, 209.0, 232.0]


def test_writers_on_different_lines_do_not_wait(host):
    ends = [host.cas(core, Line(), 0.0) for core in range(4)]
    assert ends == [103.0] * 4


def test_shared_reads_overlap(host):
    line = Line()                                      # clean, in memory
    assert [host.read(c, line, 0.0) for c in range(4)] == [100.0, 20.0, 80.0, 20.0]
    owned = Line()
    host.write(0, owned, 0.0)                          # modified by core 0 until 100
    assert host.read(2, owned, 100.0) == 180.0         # the owner downgrades: serialised
    assert host.read(3, owned, 100.0) == 200.0         # then shared: from core 2, same CCD, no queue


def test_spread_placement_round_robins_ccds():
    h = Coherence(CoherenceCosts.from_profile(load_profile("bf3")))
    assert h.spread(5) == [0, 6, 12, 18, 1]
    with pytest.raises(ValueError):
        h.spread(25)


def test_pinned_placement_fills_ccds_in_core_order():
    # PD3's application pins thread i to core 5 + i (artifact net_hashmap.cpp): on bf3's host
    # (4 CCDs x 6 cores) 16 threads sit 1 + 6 + 6 + 3 on the CCDs
    h = Coherence(CoherenceCosts.from_profile(load_profile("bf3")))
    cores = h.pinned(16, f8.FIRST_CORE)
    assert cores == list(range(5, 21))
    assert [sum(h.ccd(c) == k for c in cores) for k in range(4)] == [1, 6, 6, 3]
    assert h.packed(3) == [0, 1, 2]
    with pytest.raises(ValueError, match="pinned from core 5"):
        h.pinned(20, 5)


def test_fig8_placement_is_checked():
    with pytest.raises(ValueError, match="placement 'nowhere'"):
        f8.throughput("pd3", 2, warmup_ns=0, measure_ns=1_000, placement="nowhere")


def test_placement_changes_what_a_call_pays():
    # the same 4 threads: pinned from core 5, three share CCD 1 (intra-CCD transfers, 17 ns); spread,
    # each is alone on its CCD and every shared line crosses CCDs (80 ns)
    pinned = f8.throughput("pd3", 4, warmup_ns=5_000, measure_ns=20_000)["mcalls"]
    spread = f8.throughput("pd3", 4, warmup_ns=5_000, measure_ns=20_000, placement="spread")["mcalls"]
    assert pinned > spread


def test_profile_without_coherence_is_refused():
    with pytest.raises(ValueError, match="coherence"):
        CoherenceCosts.from_profile(load_profile("cx6-200g"))


def _mcalls(kind, t):
    return f8.throughput(kind, t, warmup_ns=10_000, measure_ns=20_000)["mcalls"]


def test_pd3_scales_and_spinlock_does_not():
    # about twice one thread's rate (2.0x with bf3's constants: one thread reads what the device
    # wrote from its own L3, dma_line_ns; the scans of 16 threads also read lines other cores have
    # just CASed, cross-CCD transfers that one thread never pays), while the spinlock falls
    assert _mcalls("pd3", 16) > 1.8 * _mcalls("pd3", 1)
    assert _mcalls("spinlock", 16) < _mcalls("spinlock", 1)


def test_ordering_at_16_threads():
    pd3, cas, spin = (_mcalls(k, 16) for k in ("pd3", "cas", "spinlock"))
    assert pd3 > cas > spin


def test_every_hit_consumes_its_own_key_once():
    r = f8.throughput("cas", 4, warmup_ns=0, measure_ns=20_000)
    assert 0 < r["hits"] <= r["calls"]


def test_fig8_rows(monkeypatch):
    real = f8.throughput
    monkeypatch.setattr(f8, "throughput", lambda k, t, **kw: real(k, t, warmup_ns=5_000, measure_ns=20_000))
    msgs = []
    rows = f8.fig8(True, msgs.append)
    series = {r.series for r in rows}
    for s in f8.SERIES.values():
        assert {r.x for r in rows if r.series == s} == {1, 4, 16}
    pub = {r.series: r.published for r in rows if r.published is not None}
    assert pub["PD3 / spinlock ring at 16 threads"] == 224.0
    assert pub["PD3 / CAS ring at 16 threads"] == 35.0
    assert pub["PD3 at 16 threads"] == 150.0
    assert pub["CAS ring peak (published 5-10: midpoint 7.5)"] == 7.5
    assert all(r.emulated is not None and r.emulated > 0 for r in rows)
    assert len(series) == 8 and msgs[-1] is None
