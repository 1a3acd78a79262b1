"""Reservation calendars (shm/calendar.py): FIFO service, parallel servers, out-of-order stamps,
spilling across buckets, statistics and layout validation.

All times are picoseconds, as inside the calendar."""

from __future__ import annotations

import numpy as np
import pytest

from shm.calendar import HEADER_WORDS, ResourceLayout, reserve


def calendar(servers=1, bucket_ps=1000, n_buckets=64, name="r"):
    """One resource in a fresh private table: (layout, table, offset)."""
    lay = ResourceLayout()
    o = lay.add(name, servers, bucket_ps, n_buckets)
    tbl = np.zeros(lay.words, dtype=np.int64)
    lay.initialise(tbl)
    return lay, tbl, o


# -- service --------------------------------------------------------------------------------

def test_idle_resource_serves_at_stamp_plus_cost():
    _, tbl, o = calendar()
    assert reserve(tbl, o, 1234, 500) == 1734
    assert reserve(tbl, o, 50_000, 700) == 50_700   # much later: idle again


def test_zero_cost_is_free():
    lay, tbl, o = calendar()
    assert reserve(tbl, o, 777, 0) == 777
    assert lay.statistics(tbl, "r").requests == 0


def test_single_server_fifo_backlog():
    _, tbl, o = calendar(bucket_ps=1000)
    cost = 300
    done = [reserve(tbl, o, 0, cost) for _ in range(10)]
    assert done == [cost * (i + 1) for i in range(10)]   # one after the other, across buckets


def test_backlog_started_later_queues_behind_earlier_work():
    _, tbl, o = calendar(bucket_ps=1000)
    assert reserve(tbl, o, 0, 800) == 800
    assert reserve(tbl, o, 100, 400) == 1200   # waits for the first, then 400


@pytest.mark.parametrize("k", [2, 4, 8])
def test_k_servers_give_about_k_times_the_throughput(k):
    n, cost = 400, 1000
    _, tbl1, o1 = calendar(servers=1, bucket_ps=1000, n_buckets=4096)
    _, tblk, ok = calendar(servers=k, bucket_ps=1000, n_buckets=4096)
    last1 = max(reserve(tbl1, o1, 0, cost) for _ in range(n))
    lastk = max(reserve(tblk, ok, 0, cost) for _ in range(n))
    assert last1 == n * cost
    assert 0.9 * k < last1 / lastk <= k
    # k requests at once on an idle k-server resource all finish before a second round would
    _, tbl, o = calendar(servers=k)
    assert max(reserve(tbl, o, 0, cost) for _ in range(k)) < 2 * cost


def test_out_of_order_stamps_never_complete_before_stamp_plus_cost():
    _, tbl, o = calendar(bucket_ps=1000, n_buckets=256)
    late = [reserve(tbl, o, 50_000, 1000) for _ in range(5)]   # saturate buckets 50..54
    assert late == [51_000, 52_000, 53_000, 54_000, 55_000]
    for t in (49_900, 30_000, 2_000, 0):          # earlier stamps, arriving afterwards
        done = reserve(tbl, o, t, 500)
        assert done >= t + 500


def test_saturated_later_backlog_does_not_delay_an_earlier_request():
    _, tbl, o = calendar(bucket_ps=1000, n_buckets=64)
    assert [reserve(tbl, o, 10_000, 1000) for _ in range(5)][-1] == 15_000   # buckets 10..14 full
    assert reserve(tbl, o, 2_000, 500) == 2_500     # the resource was idle at 2000
    assert reserve(tbl, o, 10_500, 500) == 15_500   # inside the backlog: queues behind it
    assert reserve(tbl, o, 9_000, 500) == 9_500     # just before it: still idle


def test_earlier_stamp_uses_idle_gap_before_a_later_booking():
    _, tbl, o = calendar(bucket_ps=1000)
    assert reserve(tbl, o, 5000, 300) == 5300
    assert reserve(tbl, o, 1000, 300) == 1300     # bucket 1 is idle: no queueing behind t=5000


def test_request_older_than_the_ring_is_served_unqueued_and_counted_stale():
    lay, tbl, o = calendar(bucket_ps=1000, n_buckets=16)
    assert reserve(tbl, o, 16_000, 300) == 16_300   # bucket 16 reuses ring slot 0
    assert reserve(tbl, o, 0, 300) == 300           # slot 0 now holds a later time
    st = lay.statistics(tbl, "r")
    assert st.stale == 1 and st.requests == 2


def test_cost_longer_than_a_bucket_spills_into_following_buckets():
    _, tbl, o = calendar(bucket_ps=1000, n_buckets=16)
    assert reserve(tbl, o, 0, 3500) == 3500
    used = tbl[o + HEADER_WORDS: o + HEADER_WORDS + 5] & ((1 << 32) - 1)
    assert used.tolist() == [1000, 1000, 1000, 500, 0]
    assert reserve(tbl, o, 0, 100) == 3600          # queues behind the long request
    assert reserve(tbl, o, 10_000, 100) == 10_100   # later: idle again


def test_spill_with_several_servers_still_costs_the_full_service_time():
    _, tbl, o = calendar(servers=4, bucket_ps=1000)
    assert reserve(tbl, o, 0, 3500) == 3500         # one server does the whole job
    assert reserve(tbl, o, 0, 100) == 875 + 100     # fluid queue: 3500/4 ahead of it


def test_bucket_ring_is_reused_after_wrapping():
    _, tbl, o = calendar(bucket_ps=1000, n_buckets=4)
    for rnd in range(5):
        base = rnd * 4000 * 10
        assert [reserve(tbl, o, base, 600) for _ in range(3)] == [base + 600, base + 1200, base + 1800]


# -- statistics -----------------------------------------------------------------------------

def test_statistics_and_utilisation():
    lay, tbl, o = calendar(servers=2, bucket_ps=1000)
    for _ in range(10):
        reserve(tbl, o, 0, 1000)
    st = lay.statistics(tbl, "r")
    assert st.name == "r" and st.servers == 2 and st.requests == 10 and st.stale == 0
    assert st.busy_ns == pytest.approx(10.0)
    # fluid FIFO on 2 servers: request i starts at i * 500 ps
    assert st.queued_ns == pytest.approx(sum(i * 0.5 for i in range(10)))
    assert st.utilisation(10.0) == pytest.approx(0.5)
    assert st.utilisation(5.0) == pytest.approx(1.0)
    assert st.utilisation(0) == 0.0


def test_statistics_of_resources_are_independent():
    lay = ResourceLayout()
    oa = lay.add("a", 1, 1000, 16)
    ob = lay.add("b", 3, 500, 32)
    assert ob == oa + HEADER_WORDS + 16 and lay.words == ob + HEADER_WORDS + 32
    tbl = np.zeros(lay.words, dtype=np.int64)
    lay.initialise(tbl)
    reserve(tbl, oa, 0, 2000)
    assert lay.statistics(tbl, "a").requests == 1
    assert lay.statistics(tbl, "b") == (("b", 3, 0, 0.0, 0.0, 0, 0))
    assert reserve(tbl, ob, 0, 2000) == 2000


# -- validation -----------------------------------------------------------------------------

def test_duplicate_name_is_refused():
    lay = ResourceLayout()
    lay.add("link", 1, 1000)
    with pytest.raises(ValueError, match="link.*twice"):
        lay.add("link", 2, 1000)


@pytest.mark.parametrize("n_buckets", [0, 1, 3, 100, 1000])
def test_bucket_count_must_be_a_power_of_two(n_buckets):
    with pytest.raises(ValueError, match="power of two"):
        ResourceLayout().add("r", 1, 1000, n_buckets)


@pytest.mark.parametrize("servers", [0, -1])
def test_servers_must_be_positive(servers):
    with pytest.raises(ValueError, match="servers must be >= 1"):
        ResourceLayout().add("r", servers, 1000)


def test_bucket_width_and_overflow_are_checked():
    with pytest.raises(ValueError, match="bucket width"):
        ResourceLayout().add("r", 1, 0)
    with pytest.raises(ValueError, match="overflows"):
        ResourceLayout().add("r", 1 << 20, 1 << 20)


def test_initialise_checks_the_table():
    lay = ResourceLayout()
    lay.add("r", 1, 1000, 16)
    with pytest.raises(ValueError, match="int64"):
        lay.initialise(np.zeros(lay.words - 1, dtype=np.int64))
    with pytest.raises(ValueError, match="int64"):
        lay.initialise(np.zeros(lay.words, dtype=np.float64))
    tbl = np.zeros(lay.words, dtype=np.int64)
    lay.initialise(tbl)
    assert tbl[:4].tolist() == [1, 1000, 16, 0]


# -- arrays of identical resources ------------------------------------------------------------

def test_an_array_lays_out_and_initialises_like_one_resource_at_a_time():
    one_by_one, grouped = ResourceLayout(), ResourceLayout()
    one_by_one.add("link", 2, 500, 32)
    first = one_by_one.add("slot0", 1, 1000, 16)
    second = one_by_one.add("slot1", 1, 1000, 16)
    one_by_one.add("slot2", 1, 1000, 16)
    one_by_one.add("pcie", 1, 64, 8)
    grouped.add("link", 2, 500, 32)
    assert grouped.add_array("slot", 3, 1, 1000, 16) == (first, second - first)
    grouped.add("pcie", 1, 64, 8)
    assert grouped.words == one_by_one.words
    assert grouped.offsets == one_by_one.offsets
    assert grouped.specs == one_by_one.specs
    assert grouped.names(arrays=False) == ["link", "pcie"]
    a, b = np.zeros(grouped.words, np.int64), np.zeros(grouped.words, np.int64)
    one_by_one.initialise(a)
    grouped.initialise(b)
    assert np.array_equal(a, b)


def test_aliased_names_the_resources_whose_calendar_aliased():
    lay = ResourceLayout()
    lay.add("link", 1, 1000, 16)
    lay.add_array("slot", 4, 1, 1000, 16)
    tbl = np.zeros(lay.words, np.int64)
    lay.initialise(tbl)
    assert lay.aliased(tbl) == []
    tbl[lay.offsets["slot2"] + 6] = 5          # stale requests
    tbl[lay.offsets["link"] + 8] = 1           # an overflow
    assert [(st.name, st.stale, st.overflows) for st in lay.aliased(tbl)] == [("link", 0, 1), ("slot2", 5, 0)]


def test_an_array_member_cannot_be_defined_twice():
    lay = ResourceLayout()
    lay.add("slot1", 1, 1000)
    with pytest.raises(ValueError, match="slot1.*twice"):
        lay.add_array("slot", 2, 1, 1000)
    with pytest.raises(ValueError, match="count must be >= 1"):
        lay.add_array("db", 0, 1, 1000)
