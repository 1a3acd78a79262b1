"""FlexKV's manager algorithms (nodes/systems/flexkv/algorithms.py): rank-aware hotness detection
(Algorithm 1), rank-based assignment, the unified index-offload ratio and the throughput-guided
knob (Algorithm 2). Pure functions: no rack, no shared memory."""

from __future__ import annotations

import numpy as np
import pytest

from nodes.systems.flexkv.algorithms import (
    HotnessRanker, RatioTuner, assign, displacement_bound, moved, offloaded, priority_lists,
    workload_shifted)

P, C = 64, 4  # R = 16 ranks
R = P // C


def zipf(n: int = P, seed: int = 1) -> np.ndarray:
    """Skewed counts, each distinct, in a shuffled partition order."""
    counts = (1_000_000 / np.arange(1, n + 1)).astype(np.int64)
    return np.random.default_rng(seed).permutation(counts)


def run_tuner(tuner: RatioTuner, curve, limit: int = 50) -> list:
    """Feed the tuner the throughput of ``curve`` at each ratio it asks for, until it settles."""
    events = []
    for _ in range(limit):
        if tuner.settled:
            return events
        events += tuner.sample(curve(tuner.ratio))
    raise AssertionError(f"tuner did not settle in {limit} intervals: {events}")


def peak_at(x0: float):
    return lambda i: 100.0 - 50.0 * abs(i - x0)


# --- Algorithm 1 ---------------------------------------------------------------------------


def test_first_window_reassigns_and_unchanged_hotness_does_not():
    ranker = HotnessRanker(P, C)
    first = ranker.observe(zipf())
    assert first.reassign and first.displacement == 0
    assert sorted(np.bincount(first.ranks)) == [C] * R
    again = ranker.observe(zipf())
    assert again.displacement == 0 and not again.reassign


def test_hottest_partitions_get_rank_zero_and_ties_go_by_index():
    ranks = HotnessRanker(8, 2).observe([5, 9, 5, 5, 0, 9, 1, 5]).ranks
    # order: 1, 5 (9s), then 0, 2 | 3, 7 (5s by index), 6 (1), 4 (0)
    assert ranks.tolist() == [1, 0, 1, 2, 3, 0, 3, 2]
    assert ranks.dtype == np.int32


def test_full_reversal_exceeds_a_quarter_of_b_and_reassigns():
    ranker = HotnessRanker(P, C)
    h = zipf()
    ranker.observe(h)
    result = ranker.observe(h.max() - h)
    assert result.displacement == 2 * C * sum(abs(R - 1 - 2 * r) for r in range(R // 2))  # = 512
    assert result.displacement >= 0.25 * result.bound and result.reassign


def test_small_noise_does_not_reassign():
    ranker = HotnessRanker(P, C)
    h = zipf()
    ranker.observe(h)
    noisy = h * np.random.default_rng(7).uniform(0.9, 1.1, P)
    result = ranker.observe(noisy)
    assert 0 < result.displacement < 0.25 * result.bound and not result.reassign


@pytest.mark.parametrize("partitions,nodes", [(64, 4), (8192 // 64, 8), (70, 4), (5, 3)])
def test_bound_matches_monte_carlo_random_reshuffles(partitions, nodes):
    rng = np.random.default_rng(2026)
    ranker = HotnessRanker(partitions, nodes)
    ranker.observe(np.arange(partitions))
    old = ranker.previous.copy()
    trials = [np.abs(HotnessRanker(partitions, nodes).observe(rng.permutation(partitions)).ranks
                     - old).sum() for _ in range(4000)]
    assert np.mean(trials) == pytest.approx(ranker.bound, rel=0.05)
    if partitions % nodes == 0:  # the paper's closed form
        rr = partitions // nodes
        assert displacement_bound(partitions, nodes) == pytest.approx(nodes * (rr * rr - 1) / 3)


def test_single_rank_never_reassigns_after_the_first():
    ranker = HotnessRanker(4, 4)
    assert ranker.bound == 0 and ranker.observe([1, 2, 3, 4]).reassign
    assert not ranker.observe([4, 3, 2, 1]).reassign


def test_window_reference_ignores_slow_drift_and_assignment_reference_catches_it():
    h = np.arange(P, dtype=float)[::-1] * 10  # partition 0 hottest
    paper, drift = HotnessRanker(P, C), HotnessRanker(P, C, reference="assignment")
    paper.observe(h), drift.observe(h)
    fired = {"window": False, "assignment": False}
    # each window every partition takes its predecessor's hotness: D = 30 per window (partition
    # 0 falls 15 ranks, one partition per rank boundary falls 1), under 0.25 B = 85
    for _ in range(40):
        h = np.roll(h, 1)
        fired["window"] |= paper.observe(h).reassign
        fired["assignment"] |= drift.observe(h).reassign
    assert fired == {"window": False, "assignment": True}


def test_hotness_of_the_wrong_length_is_refused():
    with pytest.raises(ValueError, match="one count per partition"):
        HotnessRanker(P, C).observe(np.ones(P - 1))


# --- assignment, priority lists, offload ratio ---------------------------------------------


def one_per_rank(owner, ranks, nodes) -> bool:
    return all(sorted(owner[ranks == r]) == list(range(nodes)) for r in range(int(ranks.max()) + 1))


def test_assign_gives_each_cn_one_partition_per_rank():
    h = zipf()
    ranks = HotnessRanker(P, C).observe(h).ranks
    owner = assign(ranks, h, C)
    assert one_per_rank(owner, ranks, C)
    loads = np.bincount(owner, weights=h, minlength=C)
    # the naive map (the k-th hottest of every rank to CN k) piles the hottest of each rank on CN 0
    naive = np.bincount(np.argsort(np.argsort(-h, kind="stable")) % C, weights=h, minlength=C)
    spread = loads.max() - loads.min()
    assert spread < 0.7 * (naive.max() - naive.min())
    assert spread <= h.max()  # the hottest partition alone is 21 % of all accesses


def test_assign_is_deterministic():
    h = zipf()
    ranks = HotnessRanker(P, C).observe(h).ranks
    assert assign(ranks, h, C).tolist() == assign(ranks, h, C).tolist()


def test_reassignment_keeps_previous_owners_where_possible():
    h = zipf()
    ranks = HotnessRanker(P, C).observe(h).ranks
    owner = assign(ranks, h, C)
    h2 = h.copy()
    a, b = np.flatnonzero(ranks == 0)[0], np.flatnonzero(ranks == 5)[0]
    h2[a], h2[b] = h[b], h[a]  # two partitions swap ranks 0 and 5
    ranks2 = HotnessRanker(P, C).observe(h2).ranks
    owner2 = assign(ranks2, h2, C, previous_owner=owner)
    assert one_per_rank(owner2, ranks2, C)
    assert len(moved(owner, owner2)) <= 2  # at most the two that changed rank


def test_reassignment_moves_nothing_when_only_the_order_inside_ranks_changes():
    h = zipf()
    ranks = HotnessRanker(P, C).observe(h).ranks
    owner = assign(ranks, h, C)
    h2 = h.copy()
    first, second = np.argsort(-h)[:2]  # both in rank 0
    h2[first], h2[second] = h[second], h[first]
    assert (HotnessRanker(P, C).observe(h2).ranks == ranks).all()
    assert len(moved(owner, assign(ranks, h2, C, previous_owner=owner))) == 0
    assert len(moved(owner, assign(ranks, h2, C))) > 0  # from scratch, owners would change


def test_assign_keeps_a_full_rank_in_place_when_previous_owners_are_distinct():
    ranks = np.array([0, 0, 0, 1, 1, 1])
    prev = np.array([2, 0, 1, 1, 2, 0])
    assert assign(ranks, [9, 8, 7, 3, 2, 1], 3, prev).tolist() == prev.tolist()


def test_partial_last_rank_goes_to_distinct_cns():
    h = zipf(10)
    ranks = HotnessRanker(10, 4).observe(h).ranks  # ranks of 4, 4, 2
    owner = assign(ranks, h, 4)
    assert len(set(owner[ranks == 2])) == 2
    assert sorted(len(lst) for lst in priority_lists(owner, ranks, 4)) == [2, 2, 3, 3]


def test_priority_lists_are_hottest_rank_first():
    h = zipf()
    ranks = HotnessRanker(P, C).observe(h).ranks
    lists = priority_lists(assign(ranks, h, C), ranks, C)
    assert sorted(np.concatenate(lists).tolist()) == list(range(P))
    for lst in lists:
        assert ranks[lst].tolist() == list(range(R))


@pytest.mark.parametrize("ratio,per_cn", [(0.0, 0), (0.3, 5), (1.0, R)])  # round(0.3 * 16) = 5
def test_offloaded_counts_per_cn(ratio, per_cn):
    h = zipf()
    ranks = HotnessRanker(P, C).observe(h).ranks
    owner = assign(ranks, h, C)
    off = offloaded(owner, ranks, C, ratio)
    assert np.bincount(owner[off], minlength=C).tolist() == [per_cn] * C
    assert set(ranks[off].tolist()) == set(range(per_cn))  # the hottest ranks


def test_offloaded_rounds_halves_up_and_without_float_drift():
    owner, ranks = np.zeros(10, dtype=int), np.arange(10)
    assert offloaded(owner, ranks, 1, 0.7).sum() == 7
    assert offloaded(owner, ranks, 1, 0.25).sum() == 3  # 2.5 -> 3, not banker's 2


@pytest.mark.parametrize("ratio", [1.5, -0.1, float("nan")])
def test_offloaded_rejects_ratios_outside_unit_interval(ratio):
    with pytest.raises(ValueError, match=r"must be in \[0, 1\]"):
        offloaded(np.zeros(4, dtype=int), np.arange(4), 1, ratio)


# --- Algorithm 2 ---------------------------------------------------------------------------


def test_tuner_from_zero_settles_at_the_peak():
    tuner = RatioTuner()
    events = run_tuner(tuner, peak_at(0.3))
    assert tuner.ratio == 0.3 and tuner.settled
    kinds = [e.kind for e in events]
    assert kinds == ["probe", "probe", "better", "better", "better", "miss", "miss", "settled"]
    assert [e.ratio for e in events] == [0.0, 0.1, 0.1, 0.2, 0.3, 0.4, 0.5, 0.3]


def test_tuner_from_one_reverses_at_the_edge_and_settles_at_the_peak():
    tuner = RatioTuner(start=1.0)
    events = run_tuner(tuner, peak_at(0.6))
    assert tuner.ratio == 0.6
    assert events[1] == ("reverse", 1.1, None)  # 1.1 cannot run: a degradation, not sampled
    assert [e.ratio for e in events if e.kind in ("better", "miss")] == [0.9, 0.8, 0.7, 0.6, 0.5, 0.4]


def test_tuner_reverses_when_the_first_probe_is_worse():
    tuner = RatioTuner(start=0.5)
    events = run_tuner(tuner, peak_at(0.2))
    assert [e.kind for e in events[:3]] == ["probe", "probe", "reverse"] and tuner.ratio == 0.2
    assert tuner.direction == -1


def test_restart_after_settling_starts_a_new_round():
    tuner = RatioTuner()
    run_tuner(tuner, peak_at(0.3))
    assert tuner.sample(1.0) == []  # settled: waits for a shift
    assert tuner.restart() == [("restart", 0.3, None)] and not tuner.settled
    run_tuner(tuner, peak_at(0.7))  # the workload shifted; the peak moved
    assert tuner.ratio == 0.7


def test_peak_at_zero_settles_at_zero():
    tuner = RatioTuner()
    events = run_tuner(tuner, peak_at(0.0))
    # 0.1 is worse: reverse; -0.1 and -0.2 cannot run: two misses without sampling
    assert [(e.kind, e.ratio, e.throughput is None) for e in events[2:]] == [
        ("reverse", 0.1, False), ("miss", -0.1, True), ("miss", -0.2, True), ("settled", 0.0, False)]
    assert tuner.ratio == 0.0


def test_peak_at_one_settles_at_one_after_one_sampled_edge_miss():
    tuner = RatioTuner()
    events = run_tuner(tuner, peak_at(1.0))
    assert tuner.ratio == 1.0
    assert [e.kind for e in events[-3:]] == ["miss", "miss", "settled"]
    assert events[-3].ratio == 1.1 and events[-3].throughput is None
    assert tuner.sample(0.0) == []


def test_tuner_ratios_do_not_drift():
    tuner = RatioTuner()
    seen = []
    for _ in range(12):
        seen.append(tuner.ratio)
        tuner.sample(tuner.ratio)  # throughput rising with the ratio: climbs to 1.0
    assert seen[:11] == [0.0, 0.1] + [round(0.1 * k, 1) for k in range(1, 10)]
    assert tuner.settled and tuner.ratio == 1.0


def test_ties_count_as_misses():
    tuner = RatioTuner(start=0.5)
    run_tuner(tuner, lambda i: 1.0)
    assert tuner.ratio == 0.5


def test_workload_shift_is_ten_points_of_the_read_fraction():
    assert workload_shifted(0.1, 0.2)  # the paper's 1:9 -> 2:8
    assert workload_shifted(0.3, 0.2)  # float 0.0999... still counts
    assert not workload_shifted(0.5, 0.59)
    assert not workload_shifted(0.01, 0.02)  # 100 % relative, 1 point absolute
