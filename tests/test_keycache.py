"""The direct-mapped key-cache hit-rate model that sizes SMART-BT's speculative cache."""

import numpy as np
import pytest

from workloads.keycache import artifact_hit_rate, hit_rate, record_masses, slots_for_hit_rate


def test_uniform_keys_hit_as_often_as_the_cache_holds_them():
    # n equally likely keys: a slot with j keys hits 1/j of its gets; over random placement that
    # is slots/n * (1 - e^(-n/slots)) -- about 0.63 when slots == n
    m = np.full(10_000, 1e-4)
    assert hit_rate(m, 10_000) == pytest.approx(1 - np.exp(-1), abs=0.01)
    assert hit_rate(m, 100) == pytest.approx(0.01, abs=1e-9)           # 100 keys per slot, each
    assert hit_rate(m, 0) == 0.0


def test_one_hot_key_keeps_its_slot():
    m = np.array([0.5] + [0.5 / 999] * 999)
    assert hit_rate(m, 1) == pytest.approx(0.25 + 999 * (0.5 / 999) ** 2, rel=1e-9)
    assert hit_rate(m, 100_000) > 0.99


def test_masses_are_a_distribution_and_skewed():
    q = record_masses(20_000, 100_000_000)
    assert q.sum() == pytest.approx(1.0, rel=1e-6)
    assert 0.04 < q.max() < 0.06                 # SMART's popularity: hottest key ~4.8 %
    with pytest.raises(ValueError, match="records and items"):
        record_masses(0, 10)


def test_slots_reach_the_artifacts_hit_rate():
    target = artifact_hit_rate()
    assert 0.6 < target < 0.66                   # 10^6 slots over 10^8 zipf-0.99 keys
    q = record_masses(20_000, 100_000_000)
    slots = slots_for_hit_rate(q, target)
    assert hit_rate(q, slots) >= target > hit_rate(q, slots // 2)
    assert slots < 20_000                        # a cache of every key would hit far more often
    with pytest.raises(ValueError, match="target hit rate"):
        slots_for_hit_rate(q, 1.0)
