"""PD3's Host View (nodes/systems/pd3/host_view.py): the cuckoo set against a Python set, batched
lookups against single ones, the work counts of the lookup orders, high load and FULL, refusals,
shards, the in-flight prefetch keys."""

from __future__ import annotations

import random

import numpy as np
import pytest

from nodes.systems.pd3.host_view import (
    BATCH_MAX, EMPTY, SLOTS, CuckooSet, HostView, InFlightPrefetches, Insert, Lookup, _hash,
)

M64 = (1 << 64) - 1


def splitmix64(x):
    x = (x + 0x9E3779B97F4A7C15) & M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & M64
    return x ^ (x >> 31)


def rand_key(rng):
    return rng.getrandbits(64) % EMPTY          # any key but the empty-slot marker


def test_the_hash_is_splitmix64():
    for x in (0, 1, 2, 12345, EMPTY - 1, 1 << 63):
        assert int(_hash(np.uint64(x))) == splitmix64(x)


@pytest.mark.parametrize("n_buckets", [1, 4, 64, 512])
def test_random_operations_match_a_python_set(n_buckets):
    rng = random.Random(n_buckets)
    s = CuckooSet(n_buckets, seed=n_buckets)
    oracle = set()
    universe = [rand_key(rng) for _ in range(n_buckets * SLOTS + 8)] + [0, 1, 2, EMPTY - 1]
    for _ in range(3000):
        k = rng.choice(universe)
        op = rng.random()
        if op < 0.5:
            st = s.insert(k)
            if st == Insert.FULL:
                assert k not in oracle
            else:
                assert st == (Insert.PRESENT if k in oracle else Insert.INSERTED)
                oracle.add(k)
        elif op < 0.75:
            assert s.remove(k) == (k in oracle)
            oracle.discard(k)
        else:
            assert s.contains(k) == (k in oracle)
        assert len(s) == len(oracle)
    assert all(s.contains(k) for k in oracle)
    stored = s.table[s.table != np.uint64(EMPTY)]
    assert sorted(int(x) for x in stored) == sorted(oracle)            # no duplicates, no strays
    st = s.statistics()
    assert st.keys == len(oracle) and st.buckets == n_buckets
    assert st.load_factor == len(oracle) / (n_buckets * SLOTS)
    assert st.inserts - st.removes == len(oracle)


def test_batched_lookups_equal_single_ones_in_every_mode():
    rng = random.Random(7)
    s = CuckooSet(256, seed=1)
    present = [rand_key(rng) for _ in range(700)]
    for k in present:
        assert s.insert(k) == Insert.INSERTED
    absent = [rand_key(rng) for _ in range(700)]
    pool = present + absent
    for _ in range(300):
        batch = rng.sample(pool, rng.randint(0, BATCH_MAX))
        single = [s.contains(k) for k in batch]
        for mode in Lookup:
            found, cost = s.find_batched(batch, mode)
            assert list(found) == single
            assert cost.hashes >= len(batch) and cost.lines >= len(batch)
    with pytest.raises(ValueError, match="at most 8 keys"):
        s.find_batched(present[:9])


def _total(s, keys, mode):
    costs = [s.find_batched(keys[i:i + BATCH_MAX], mode)[1] for i in range(0, len(keys), BATCH_MAX)]
    return [sum(c[j] for c in costs) for j in range(4)]


def test_the_lookup_orders_differ_in_work_the_way_the_paper_says():
    rng = random.Random(3)
    s = CuckooSet(1024, seed=3)
    keys = [rand_key(rng) for _ in range(3000)]                    # ~73 % load
    for k in keys:
        assert s.insert(k) == Insert.INSERTED
    n = 800
    hits = keys[:n - n // 10] + [rand_key(rng) for _ in range(n // 10)]   # 90 % of lookups hit
    rng.shuffle(hits)
    basic, batched, simd, delayed = (_total(s, hits, m) for m in Lookup)
    lines, hashes, compares, rounds = range(4)
    # BASIC: both hashes and buckets of every key, one serialised miss per bucket
    assert basic[hashes] == basic[lines] == 2 * n and basic[rounds] == 2 * n
    # batching: same work, one memory round per batch
    assert batched[:3] == basic[:3] and batched[rounds] == n // BATCH_MAX
    # SIMD: one vector compare per bucket instead of slot by slot
    assert simd[compares] == 2 * n < batched[compares]
    assert simd[lines] == batched[lines] and simd[hashes] == batched[hashes]
    # delayed second bucket: the second hash, line and compare only for the keys not found first
    miss_first = delayed[lines] - n
    assert 0 < miss_first < n // 3
    assert delayed[hashes] == delayed[lines] == delayed[compares] == n + miss_first
    assert delayed[lines] < simd[lines] and delayed[hashes] < simd[hashes]
    assert n // BATCH_MAX <= delayed[rounds] <= 2 * (n // BATCH_MAX)
    # a batch that all hits in its first buckets needs no second round
    first_only = [k for k in keys if s.find_batched([k])[1].lines == 1][:BATCH_MAX]
    assert s.find_batched(first_only)[1] == (BATCH_MAX, BATCH_MAX, BATCH_MAX, 1)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_high_load_and_full_leaves_the_set_consistent(seed):
    rng = random.Random(seed)
    s = CuckooSet(512, seed=seed)
    inserted = []
    while True:
        k = rand_key(rng)
        st = s.insert(k)
        if st == Insert.FULL:
            break
        inserted.append(k)
    assert s.statistics().load_factor >= 0.9                       # 4-way cuckoo: ~95 % usual
    before = s.table.copy()
    assert not s.contains(k)
    failed = 1
    for _ in range(50):                                            # more FULLs: nothing moves
        k = rand_key(rng)
        if s.insert(k) == Insert.FULL:
            failed += 1
            assert np.array_equal(s.table, before)
            assert not s.contains(k)
        else:
            inserted.append(k)
            before = s.table.copy()
    assert all(s.contains(k) for k in inserted)
    st = s.statistics()
    assert st.keys == len(inserted) and st.failed_inserts == failed and st.displacements > 0


def test_refusals_are_one_line():
    with pytest.raises(ValueError, match="power-of-two") as e:
        CuckooSet(100)
    assert "\n" not in str(e.value)
    with pytest.raises(ValueError, match="power-of-two"):
        HostView(3000)
    s = CuckooSet(8)
    for call in (s.insert, s.remove, s.contains, lambda k: s.find_batched([1, k])):
        with pytest.raises(ValueError, match="empty-slot marker") as e:
            call(EMPTY)
        assert "\n" not in str(e.value)
    with pytest.raises(ValueError, match="empty-slot marker"):
        s.find_batched(np.array([EMPTY], dtype=np.uint64))
    with pytest.raises(ValueError, match="unsigned 64-bit"):
        s.insert(-1)
    with pytest.raises(ValueError, match="uint64 array of 32 words"):
        CuckooSet(8, table=np.zeros(31, dtype=np.uint64))
    assert len(s) == 0


def test_a_preallocated_table_is_the_storage():
    table = np.zeros(64 * SLOTS, dtype=np.uint64)
    s = CuckooSet(64, table=table)
    assert s.insert(42) == Insert.INSERTED
    assert (table == np.uint64(42)).sum() == 1                     # written in place
    again = CuckooSet(64, table=table, clear=False)                # attach: the content is the set
    assert len(again) == 1 and again.contains(42)


def test_shards_route_by_hash_and_split_the_work():
    rng = random.Random(11)
    hv = HostView(512, n_shards=2, seed=5)
    keys = [rand_key(rng) for _ in range(1500)] + list(range(500))  # clustered ids split too
    for k in keys:
        assert hv.insert(k) == Insert.INSERTED
    per = hv.shard_statistics()
    assert sum(p.keys for p in per) == len(hv) == len(keys)
    assert all(0.4 < p.keys / len(keys) < 0.6 for p in per)
    where = hv.route(keys)
    for k, i in zip(keys[:200], where[:200]):
        assert hv.shards[i].contains(k) and not hv.shards[1 - i].contains(k)
    absent = [rand_key(rng) for _ in range(8)]
    for _ in range(100):
        batch = rng.sample(keys, 5) + absent[:3]
        rng.shuffle(batch)
        found, costs = hv.find_batched(batch)
        assert list(found) == [k not in absent for k in batch]
        assert len(costs) == 2
        assert sum(c.hashes for c in costs) >= len(batch)
        served = np.bincount(hv.route(batch), minlength=2)
        for c, m in zip(costs, served):
            assert (c.lines == 0) == (m == 0)                      # a shard works only for its keys
    st = hv.statistics()
    assert st.keys == len(keys) and st.buckets == 1024 and st.lookups == 200 * 2 + 100 * 8
    assert hv.remove(keys[0]) and not hv.contains(keys[0]) and len(hv) == len(keys) - 1
    assert HostView(4, n_shards=1).find_batched([1, 2])[0].tolist() == [False, False]


def test_statistics_is_an_immutable_record():
    s = CuckooSet(4)
    s.insert(1)
    s.find_batched([1, 2])
    st = s.statistics()
    assert st._fields == ("keys", "buckets", "load_factor", "inserts", "removes", "lookups", "hits",
                          "displacements", "failed_inserts", "lines_read", "hashes", "compares",
                          "rounds")
    assert (st.lookups, st.hits) == (2, 1)
    with pytest.raises(AttributeError):
        st.keys = 5


def test_in_flight_prefetches_are_deduplicated():
    f = InFlightPrefetches()
    assert f.begin_prefetch(7)
    assert not f.begin_prefetch(7)                                 # a delayed addition's duplicate
    assert f.begin_prefetch(8) and len(f) == 2 and 7 in f
    assert f.end_prefetch(7) and not f.end_prefetch(7)
    assert f.begin_prefetch(7)                                     # a new prefetch after completion
    assert (f.begun, f.suppressed) == (3, 1)
    hv = HostView(4)
    assert hv.begin_prefetch(1) and not hv.begin_prefetch(1)
    assert hv.end_prefetch(1) and hv.begin_prefetch(1)
