"""Leap, PD3's prefetching baseline (nodes/systems/pd3/leap.py): trend detection, the window rule,
the prefetch cache and its accounting, in PD3's port's mode (the default) and the kernel Leap's."""

from __future__ import annotations

import random

import pytest

from nodes.systems.pd3.leap import Leap, LeapStats, PrefetchCache, majority, next_pow2

KERNEL = dict(prefetch_on_hit=False, keep_current=False)       # the kernel Leap's behaviour


def feed(leap, ids):
    """Access ``ids``; per access (hit, prefetch list, window after it)."""
    out = []
    for i in ids:
        hit, pf = leap.access(i)
        out.append((hit, pf, leap.window))
    return out


def hit_rate(trace):
    return sum(h for h, _, _ in trace) / len(trace)


def check_accounting(s: LeapStats):
    assert s.prefetch_hits <= s.prefetches
    assert s.prefetches == s.prefetch_hits + s.useless_evictions + s.discarded + s.cached
    assert s.decisions == s.suspended + s.trend_found + s.trend_not_found
    assert s.prefetch_hits <= s.accesses


def test_majority_and_next_pow2():
    assert majority([]) is None
    assert majority([5]) == 5
    assert majority([1, 2, 3]) is None                  # the vote's survivor is not a majority
    assert majority([1, 1, 2, 2]) is None               # half is not more than half
    assert majority([3, 1, 3, 2, 3]) == 3
    assert majority([-1, -1, 4, -1]) == -1
    assert [next_pow2(x) for x in (0, 1, 2, 3, 4, 5, 8, 9)] == [1, 1, 2, 4, 4, 8, 8, 16]


def test_trend_widens_until_a_majority_or_the_whole_history():
    leap = Leap(history=32, splits=4)
    ids = [1000]
    for d in [2] * 24 + [5, -3, 9, 1, -7, 4, 11, -2]:   # newest 8 and 16: no majority; all 32: +2
        ids.append(ids[-1] + d)
    feed(leap, ids)
    assert leap.trend() == 2
    for d in [3] * 5:                                   # 5 of the newest 8 deltas are +3
        ids.append(ids[-1] + d)
    feed(leap, ids[-5:])
    assert leap.trend() == 3
    leap = Leap(history=8, splits=2)
    feed(leap, [7] * 9)                                 # one id over and over: zero is no trend
    assert leap.trend() is None


@pytest.mark.parametrize("stride", [1, 7])
def test_a_stride_is_followed_pd3_mode(stride):
    leap = Leap(history=32, splits=4, max_window=8)
    trace = feed(leap, [500 + stride * k for k in range(2000)])
    assert all(pf == [] for _, pf, _ in trace[:32])     # nothing until the history is full
    steady = trace[100:]
    assert hit_rate(steady) > 0.99
    assert {w for _, _, w in steady} == {2}             # one hit between decisions: window 2
    for k, (_, pf, _) in enumerate(steady):             # each access tops the window up by one id
        cur = 500 + stride * (k + 100)
        assert pf == [cur + 2 * stride]
    s = leap.statistics()
    assert s.trend == stride and s.trend_not_found == 0 and s.useless_evictions == 0
    check_accounting(s)


@pytest.mark.parametrize("stride", [1, 7])
def test_a_stride_is_followed_kernel_mode_and_the_window_grows(stride):
    leap = Leap(history=32, splits=4, max_window=8, **KERNEL)
    ids = [500 + stride * k for k in range(2000)]
    trace = feed(leap, ids)
    windows = [w for _, _, w in trace]
    assert windows[40:60].count(8) > 0 and max(windows) == 8
    first8 = windows.index(8)
    assert windows[first8:] == [8] * (len(windows) - first8)
    assert sorted(set(windows[:first8])) == [0, 1, 2, 4]    # 1, 2, 4, 8: next_pow2(hits + 1)
    steady = trace[100:]
    assert hit_rate(steady) >= 8 / 9 - 0.01            # one miss per 9 accesses at window 8
    for k, (hit, pf, _) in enumerate(steady):
        cur = ids[k + 100]
        if hit:
            assert pf == []                             # a hit only counts
        else:
            assert pf == [cur + stride * j for j in range(1, 9)]
    check_accounting(leap.statistics())


def test_a_majority_delta_among_noise_is_found():
    rng = random.Random(25)
    leap = Leap(history=32, splits=4, max_window=8)
    cur, ids = 10**6, []
    for _ in range(5000):
        cur += 3 if rng.random() < 0.8 else rng.randrange(-5000, 5000)
        ids.append(cur)
    feed(leap, ids)
    s = leap.statistics()
    assert s.trend == 3
    assert s.trend_found > 0.95 * (s.trend_found + s.trend_not_found)
    assert s.hit_rate > 0.5
    check_accounting(s)


def test_uniform_random_ids_give_almost_no_trend():
    rng = random.Random(7)
    for kwargs in ({}, KERNEL):
        leap = Leap(history=32, splits=4, max_window=8, **kwargs)
        feed(leap, [rng.randrange(10**6) for _ in range(20000)])
        s = leap.statistics()
        assert s.trend_found <= 5
        assert s.hit_rate < 0.001
        assert s.suspended > 0.99 * s.decisions         # last two deltas almost never equal
        check_accounting(s)


def off_stride(start, n):
    """Ids whose deltas are all different and never repeat the previous one: no hit, no trend."""
    ids, cur = [], start
    for k in range(n):
        cur += 1000 + 37 * k
        ids.append(cur)
    return ids


def test_the_window_shrinks_gradually_kernel_mode():
    leap = Leap(history=32, splits=4, max_window=8, **KERNEL)
    cur = 0
    while True:                                         # scan until a miss has just set window 8
        hit, _ = leap.access(cur)
        cur += 1
        if not hit and leap.window == 8 and cur > 100:
            break
    windows = [w for _, _, w in feed(leap, off_stride(cur, 6))]
    assert windows == [4, 2, 1, 0, 0, 0]


def test_the_window_shrinks_gradually_pd3_mode():
    leap = Leap(history=32, splits=4, max_window=8)
    feed(leap, range(200))
    assert leap.window == 2
    assert [w for _, _, w in feed(leap, off_stride(10**5, 4))] == [1, 0, 0, 0]


def test_a_reversal_is_picked_up():
    leap = Leap(history=32, splits=4, max_window=8)
    up = list(range(5000, 5300))
    down = list(range(5299 - 1, 5299 - 401, -1))
    feed(leap, up)
    trace = feed(leap, down)
    assert leap.latest_trend == -1
    assert hit_rate(trace[50:]) > 0.99
    assert all(j < 5299 - 50 - k for k, (_, pf, _) in enumerate(trace[50:]) for j in pf)


def test_ids_never_go_negative_or_past_the_limit():
    leap = Leap(history=8, splits=2, max_window=8, id_limit=300, **KERNEL)
    seen = [j for _, pf, _ in feed(leap, range(250, 300)) for j in pf]
    assert seen and max(seen) < 300
    leap = Leap(history=8, splits=2, max_window=8, **KERNEL)
    seen = [j for _, pf, _ in feed(leap, range(60, -1, -1)) for j in pf]
    assert seen and min(seen) >= 0


def test_the_prefetch_cache_is_a_bounded_lru():
    c = PrefetchCache(3)
    assert [c.put(i) for i in (1, 2, 3)] == [True, True, True]
    assert c.put(1) is False                            # refreshed, not added
    assert c.put(4) is True and c.ids() == [3, 1, 4]    # 2 was least recently used
    assert c.evicted == 1 and 2 not in c
    assert c.take(3) is True and c.take(3) is False and len(c) == 2


def test_the_cache_stays_bounded_and_useless_prefetches_are_counted():
    leap = Leap(history=16, splits=4, max_window=8, cache_items=8, **KERNEL)
    ids = []
    for run in range(40):                               # scans of 30 ids, far apart
        ids += [run * 10**5 + k for k in range(30)]
    for i in ids:
        leap.access(i)
        assert len(leap) <= 8
    s = leap.statistics()
    assert s.useless_evictions > 0                      # read-ahead past each scan's end
    assert s.prefetch_hits > 0.6 * s.accesses
    check_accounting(s)


def test_pd3_keeps_the_current_id_kernel_does_not():
    rng = random.Random(3)
    ids = [x for _ in range(2000) for x in [rng.randrange(10**6)] * 4]   # each id 4 times, no stride
    pd3 = Leap(history=32, splits=4, max_window=8)
    kernel = Leap(history=32, splits=4, max_window=8, **KERNEL)
    feed(pd3, ids)
    feed(kernel, ids)
    # once one hit keeps the window at 1 or more, every access puts its own id back: the 2nd, 3rd
    # and 4th access of each id hit, as if the prefetch cache were an LRU of accessed ids
    assert 0.74 < pd3.statistics().hit_rate <= 0.75
    assert kernel.statistics().prefetches == 0 and kernel.statistics().prefetch_hits == 0
    check_accounting(pd3.statistics())


def test_statistics_and_discard():
    rng = random.Random(11)
    leap = Leap(history=16, splits=2, max_window=4, cache_items=16)
    cur = 0
    for _ in range(3000):
        cur = max(0, cur + (1 if rng.random() < 0.7 else rng.randrange(-50, 50)))
        hit, pf = leap.access(cur)
        if pf and rng.random() < 0.1:
            assert leap.discard(pf[0]) is True
            assert leap.discard(pf[0]) is False
    s = leap.statistics()
    assert s.accesses == 3000 and s.discarded > 0
    check_accounting(s)
    with pytest.raises(AttributeError):
        s.accesses = 0                                  # immutable
    assert isinstance(s.hit_rate, float) and 0 <= s.accuracy <= 1


@pytest.mark.parametrize("kwargs, word", [
    (dict(history=0), "history"), (dict(history=1, splits=1), "history"), (dict(history=-4), "history"),
    (dict(splits=0), "splits"), (dict(history=32, splits=5), "divide"), (dict(history=4, splits=8), "divide"),
    (dict(max_window=0), "max_window"), (dict(cache_items=0), "cache_items"),
    (dict(max_window=8, cache_items=4), "cache_items"), (dict(history=2.5), "history"),
    (dict(history=True), "history"), (dict(id_limit=0), "id_limit"),
])
def test_bad_parameters_are_refused_with_one_line(kwargs, word):
    with pytest.raises(ValueError) as e:
        Leap(**kwargs)
    assert word in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("bad", [-1, 1.5, True, "3", None])
def test_bad_ids_are_refused_with_one_line(bad):
    with pytest.raises(ValueError) as e:
        Leap().access(bad)
    assert "\n" not in str(e.value)
