"""Pricing PD3's Host View lookups on the DPU's Arm cores (nodes/systems/pd3/dpu_costs.py) and the
Fig. 4 reproduction (cluster/experiments/_pd3_fig4.py)."""

import numpy as np
import pytest

from cluster.experiments import _pd3_fig4 as f4
from nodes.systems.pd3 import dpu_costs as dc
from nodes.systems.pd3.host_view import CuckooSet, HostView, Lookup, LookupCost
from shm.profile import ProfileError, load_profile, with_overrides

DPU = load_profile("bf3").dpu


def _price(cost, keys=8, hits=8, mode=Lookup.SIMD, page=dc.PAGE_2M):
    return dc.price_lookup(LookupCost(*cost), keys, hits, mode, DPU, page_bytes=page).total_ns


@pytest.mark.parametrize("mode", list(Lookup))
@pytest.mark.parametrize("field", range(4))
def test_price_is_monotone_in_each_count(mode, field):
    base = [16, 16, 16, 2]
    prev = _price(base, mode=mode, page=dc.PAGE_4K)
    for _ in range(5):
        base[field] += 7
        now = _price(base, mode=mode, page=dc.PAGE_4K)
        assert now >= prev
        prev = now


def test_more_lines_than_the_core_keeps_in_flight_take_another_wave():
    m = DPU.line_fills
    one = dc.price_lookup(LookupCost(m, 0, 0, 1), m, 0, Lookup.BATCHED, DPU)
    two = dc.price_lookup(LookupCost(m + 1, 0, 0, 1), m + 1, 0, Lookup.BATCHED, DPU)
    assert one.memory_ns == DPU.dram_ns and two.memory_ns == 2 * DPU.dram_ns


def test_huge_pages_remove_the_tlb_cost():
    cost = LookupCost(16, 16, 16, 16)
    small = dc.price_lookup(cost, 8, 8, Lookup.BASIC, DPU, page_bytes=dc.PAGE_4K)
    huge = dc.price_lookup(cost, 8, 8, Lookup.BASIC, DPU, page_bytes=dc.PAGE_2M)
    assert small.tlb_ns > 0 and huge.tlb_ns == 0
    assert small.compute_ns == huge.compute_ns and small.memory_ns == huge.memory_ns
    # a table the TLB covers even with 4 KB pages has no TLB cost either
    tiny = dc.price_lookup(cost, 8, 8, Lookup.BASIC, DPU, table_bytes=1 << 20, page_bytes=dc.PAGE_4K)
    assert tiny.tlb_ns == 0


def test_bad_price_arguments_are_refused():
    with pytest.raises(ValueError, match="hits <= keys"):
        dc.price_lookup(LookupCost(1, 1, 1, 1), 1, 2, Lookup.SIMD, DPU)


@pytest.mark.parametrize("key,value,needle", [
    ("dpu.line_fills", 0, "'dpu.line_fills' must be >= 1, got 0"),
    ("dpu.dram_ns", -5, "'dpu.dram_ns' must be >= 1, got -5"),
    ("dpu.vector_compare_cycles", 1.5, "'dpu.vector_compare_cycles' must be an integer"),
])
def test_a_bad_profile_value_is_one_error_naming_the_key(key, value, needle):
    with pytest.raises(ProfileError) as ei:
        with_overrides(load_profile("bf3"), {key: value})
    msg = str(ei.value)
    assert needle in msg and msg.count("\n") == 0, msg


@pytest.fixture(scope="module")
def filled():
    buckets = 1 << 12
    cset = CuckooSet(buckets, seed=3)
    keys = f4.make_keys(int(0.8 * 4 * buckets) + 2048, seed=3)
    stored = f4.fill(cset, keys[:-2048])
    probe = np.random.default_rng(4).choice(stored, size=2048, replace=False)
    return cset, stored, probe, keys[-2048:]


def test_each_optimisation_step_is_faster_on_the_same_keys(filled):
    cset, stored, probe, _ = filled
    times = [f4.price_stream(cset, probe, mode, DPU, page)[0] for _, mode, page in f4.STEPS]
    assert all(a > b for a, b in zip(times, times[1:])), times
    # two shards, one core each, on the same keys: faster than one core's DELAYED
    hv = HostView(cset.n_buckets // 2, n_shards=2, seed=3)
    f4.fill(hv, stored)
    where = hv.route(probe)
    two = max(f4.price_stream(s, probe[where == i], Lookup.DELAYED, DPU, dc.PAGE_2M)[0]
              for i, s in enumerate(hv.shards))
    assert two < times[-1]


def test_all_modes_find_the_same_keys_and_absent_keys_cost_more_delayed(filled):
    cset, _, probe, absent = filled
    for _, mode, page in f4.STEPS:
        assert f4.price_stream(cset, probe, mode, DPU, page)[1] == probe.size
    present_ns, _ = f4.price_stream(cset, probe, Lookup.DELAYED, DPU, dc.PAGE_2M)
    absent_ns, hits = f4.price_stream(cset, absent, Lookup.DELAYED, DPU, dc.PAGE_2M)
    assert hits == 0 and absent_ns > present_ns


def test_baselines_follow_their_dependent_misses():
    stl, absl = dc.stl_lookup_ns(DPU), dc.abseil_lookup_ns(DPU)
    assert stl > absl > 2 * DPU.dram_ns            # three-plus dependent misses against two
    assert dc.abseil_lookup_ns(DPU, page_bytes=dc.PAGE_2M) < absl


def test_fig4_small_run_returns_every_row_with_published_values():
    seen = []
    rows = f4.fig4(True, seen.append, buckets=1 << 11, lookups=512)
    by = {r.series: r for r in rows}
    for series, published in f4.PUBLISHED.items():
        assert series in by
        assert by[series].published == published
        assert by[series].emulated > 0 and by[series].metric == "Mops"
    assert by["cuckoo +2 shards"].x == "2 cores"
    assert "cuckoo +delayed, absent keys" in by
    assert seen and all(isinstance(s, str) for s in seen)
    # progress may be None
    assert len(f4.fig4(True, None, buckets=1 << 10, lookups=64)) == len(rows)
