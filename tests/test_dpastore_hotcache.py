"""DPA-Store's hot-entry cache (nodes/systems/dpastore/hotcache.py) against dict oracles."""

import math

import numpy as np
import pytest

from nodes.systems.dpastore import hotcache as H
from nodes.systems.dpastore.patch import EMPTY, MAX_VALUE
from nodes.systems.lib.hashing import mix64


def _fill(cache, rng, hint=H.cache_hints):
    """Admit random keys (admit=1 caches) until all 96 slots are taken; the keys stored."""
    while cache.entries < H.CAPACITY:
        k = int(rng.integers(0, 1 << 63))
        cache.admit(hint(k), k, k & MAX_VALUE)
    return {k for b in range(H.BUCKETS) for k, _ in cache.bucket_contents(b)}


def _bloom_has(cache, bits):
    return all((int(cache.bloom[b >> 6]) >> (b & 63)) & 1 for b in bits)


# --- hints -------------------------------------------------------------------------------------


def test_hints_are_fixed_in_range_and_documented():
    """A fixed function (not Python's hash): pinned values, fields as the docstring says."""
    h = H.fmix64(12345 ^ H.CACHE_SALT)
    assert H.cache_hints(12345) == H.CacheHints(
        (h & 0xFF, (h >> 8) & 0xFF, (h >> 16) & 0xFF), ((h >> 32) * 24) >> 32
    )
    assert H.fmix64(0) == 0 and H.fmix64(1) == 0xB456BCFC34C2CB2C  # MurmurHash3 fmix64
    for k in (0, 1, 2**63, 2**64 - 1, 987654321):
        bits, bucket = H.cache_hints(k)
        assert len(bits) == 3 and all(0 <= b < 256 for b in bits) and 0 <= bucket < 24


@pytest.mark.parametrize("thread_hash", [mix64, H.fmix64], ids=["mix64", "fmix64"])
def test_one_threads_keys_spread_over_buckets_and_bits(thread_hash):
    """Keys the client sends to one thread (thread_hash % 176 equal) still cover all 24
    buckets and 256 bits evenly: the cache hash is independent of the thread choice."""
    keys = [k for k in range(500_000) if thread_hash(k) % H.TRAVERSERS == 7][:2400]
    assert len(keys) == 2400
    hints = [H.cache_hints(k) for k in keys]
    counts = np.bincount([h.bucket for h in hints], minlength=H.BUCKETS)
    expected = len(keys) / H.BUCKETS  # 100 per bucket
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    assert chi2 < 50, counts  # 23 degrees of freedom: p < 0.001 above ~49.7
    bits = np.bincount([b for h in hints for b in h.bloom], minlength=H.BLOOM_BITS)
    exp_bits = 3 * len(keys) / H.BLOOM_BITS  # 28.1 per bit
    chi2_bits = float(((bits - exp_bits) ** 2 / exp_bits).sum())
    assert chi2_bits < 330, bits  # 255 degrees of freedom: p < 0.001 above ~330


# --- the request path --------------------------------------------------------------------------


def test_hit_after_admit_and_miss_for_other_keys():
    c = H.HotCache(seed=1, admit=1.0)
    h = H.cache_hints(42)
    assert c.lookup(h, 42) == H.Probe(False, None, True, 0)  # empty: the filter says no
    assert c.admit(h, 42, 4200) == 1
    assert c.lookup(h, 42) == H.Probe(True, 4200, False, 1)
    assert c.bucket_contents(h.bucket) == ((42, 4200),)
    for k in range(1000, 1200):
        p = c.lookup(H.cache_hints(k), k)
        assert not p.hit and p.value is None and p.lines == (0 if p.bloom_negative else 1)
    s = c.statistics()
    assert (s.lookups, s.hits, s.admissions, s.entries) == (202, 1, 1, 1)
    assert s.bloom_negatives + s.false_positives == 201


def test_collision_is_detected_by_the_stored_key():
    """Two keys with identical hints (same bits, same bucket): the filter cannot tell them apart,
    the key word in the bucket can."""
    same = H.CacheHints((3, 77, 200), 5)
    c = H.HotCache(seed=2, admit=1.0, rehash=lambda k: same)
    c.admit(same, 10, 111)
    probe = c.lookup(same, 20)
    assert probe == H.Probe(False, None, False, 1)  # the filter said maybe, the line said no
    assert c.statistics().false_positives == 1
    c.admit(same, 20, 222)
    assert c.lookup(same, 10).value == 111 and c.lookup(same, 20).value == 222
    assert c.invalidate(same, 10) == 1
    assert not c.lookup(same, 10).hit and c.lookup(same, 20).value == 222


def test_invalidate_then_get_misses():
    c = H.HotCache(seed=3, admit=1.0)
    h = H.cache_hints(7)
    c.admit(h, 7, 70)
    assert c.invalidate(h, 7) == 1  # bucket line read and written
    probe = c.lookup(h, 7)
    assert not probe.hit and probe.lines == 1  # the stale bits remain until a rebuild
    assert c.invalidate(h, 7) == 1  # nothing there: line read, nothing removed
    s = c.statistics()
    assert (s.invalidations, s.entries) == (1, 0)
    empty = H.HotCache(seed=3)
    assert empty.invalidate(h, 7) == 0  # the filter says no: no line at all


def test_admit_of_a_cached_key_refreshes_it_in_place():
    c = H.HotCache(seed=4, admit=1.0)
    h = H.cache_hints(5)
    c.admit(h, 5, 1)
    c.admit(h, 5, 2)
    assert c.bucket_contents(h.bucket) == ((5, 2),) and c.entries == 1
    assert c.statistics().evictions == 0


def test_full_bucket_replaces_a_random_slot_and_keeps_four():
    """One bucket, many keys: it never holds more than 4, every admission past 4 evicts, and
    the victim is random (every slot position gets replaced, unlike FIFO or fixed-slot)."""
    hint = lambda k: H.CacheHints((k % 256, (k * 7) % 256, (k * 13) % 256), 9)  # noqa: E731
    c = H.HotCache(seed=5, admit=1.0, rehash=hint)
    victims = []
    for k in range(200):
        before = c.bucket_contents(9)
        c.admit(hint(k), k, k + 1)
        after = c.bucket_contents(9)
        assert len(after) == min(k + 1, 4)
        assert (k, k + 1) in after
        if len(before) == 4:
            gone = [i for i, e in enumerate(before) if e not in after]
            assert len(gone) == 1
            victims.append(gone[0])
    assert c.statistics().evictions == 196 and c.entries == 4
    counts = np.bincount(victims, minlength=4)
    assert counts.min() > 30, counts  # ~49 each


def test_capacity_is_96_entries_24_buckets_of_4():
    c = H.HotCache(seed=6, admit=1.0)
    rng = np.random.default_rng(6)
    keys = _fill(c, rng)
    assert len(keys) == 96 == c.entries == c.statistics().entries
    for k in range(5000):
        c.admit(H.cache_hints(k), k, k)
        assert c.entries == 96
    assert all(len(c.bucket_contents(b)) == 4 for b in range(H.BUCKETS))
    assert c.table.shape == (24, 8) and c.table.nbytes == H.TABLE_BYTES == 24 * 64


def test_bloom_negative_costs_no_line_and_stored_keys_always_pass_the_filter():
    c = H.HotCache(seed=7, admit=1.0, rebuild_after=5)
    rng = np.random.default_rng(7)
    for k in rng.integers(0, 1 << 62, 3000).tolist():
        h = H.cache_hints(k)
        p = c.lookup(h, k)
        assert p.lines == (0 if p.bloom_negative else 1)
        if not p.hit:
            c.admit(h, k, 1)
        if k % 3 == 0:
            c.invalidate(h, k)
        for b in range(H.BUCKETS):  # the invariant the 0-line shortcut relies on
            for key, _ in c.bucket_contents(b):
                assert _bloom_has(c, H.cache_hints(key).bloom)
    assert c.statistics().bloom_negatives > 0


def test_bypass_without_hints_neither_reads_nor_admits():
    c = H.HotCache(seed=8, admit=1.0)
    h = H.cache_hints(3)
    c.admit(h, 3, 30)
    assert c.lookup(None, 3) == H.Probe(False, None, False, 0)  # cached, but bypassed
    assert c.admit(None, 4, 40) == 0 and c.entries == 1
    s = c.statistics()
    assert (s.bypasses, s.lookups) == (1, 0)


def test_admission_probability():
    c0 = H.HotCache(seed=9, admit=0.0)
    assert all(c0.admit(H.cache_hints(k), k, k) == 0 for k in range(500)) and c0.entries == 0
    c = H.HotCache(seed=9)  # default 1/8
    admitted = sum(c.admit(H.cache_hints(k), k, k) > 0 for k in range(4000))
    assert abs(admitted / 4000 - H.ADMIT_PROBABILITY) < 0.02  # binomial sd ~0.005
    assert admitted == c.statistics().admissions


def test_hit_ratio_does_not_depend_on_the_admission_probability():
    """Random replacement: p only scales the rate of every bucket transition, so after warm-up
    the hit ratio under Zipf is the same for p = 1 and p = 1/8 (p sets the write traffic)."""
    rng = np.random.default_rng(10)
    keys = np.arange(1, 3001)
    w = keys ** -0.99
    reqs = rng.choice(keys, size=24_000, p=w / w.sum()).tolist()
    ratios, writes = [], []
    for p in (1.0, 0.125):
        c = H.HotCache(seed=10, admit=p)
        hits = lines = 0
        for j, k in enumerate(reqs):
            h = H.cache_hints(k)
            probe = c.lookup(h, k)
            admit_lines = 0 if probe.hit else c.admit(h, k, k)
            if j >= 8000:
                hits += probe.hit
                lines += admit_lines
        ratios.append(hits / 16_000)
        writes.append(lines / 16_000)
    assert abs(ratios[0] - ratios[1]) < 0.03, ratios
    assert writes[1] < writes[0] / 3, writes


# --- the Bloom filter --------------------------------------------------------------------------


def _fp_rate(cache, rng, stored, probes):
    positives = 0
    n = 0
    while n < probes:
        k = int(rng.integers(0, 1 << 63))
        if k in stored:
            continue
        n += 1
        p = cache.lookup(H.cache_hints(k), k)
        assert not p.hit
        positives += not p.bloom_negative
    return positives / probes


def test_measured_false_positive_rate_matches_theory():
    """96 entries, 3 bits each of 256: theory (1 - e^(-288/256))^3 = 0.308."""
    theory = (1 - math.exp(-3 * 96 / 256)) ** 3
    assert abs(theory - 0.3080) < 1e-4
    rng = np.random.default_rng(11)
    rates = []
    for seed in range(20):
        c = H.HotCache(seed=seed, admit=1.0)
        stored = _fill(c, rng)
        c.rebuild()  # no stale bits from the evictions of the fill
        rates.append(_fp_rate(c, rng, stored, 2500))
    measured = float(np.mean(rates))
    assert abs(measured - theory) < 0.03, measured


def test_rebuilds_keep_the_false_positive_rate_down_under_churn():
    """Churn (admissions into full buckets, invalidations) leaves stale bits; without rebuilds
    the filter fills up, with the default rule it stays near the 96-entry rate."""
    rates = {}
    for rule in (None, H.REBUILD_AFTER):
        rng = np.random.default_rng(12)
        c = H.HotCache(seed=12, admit=1.0, rebuild_after=rule)
        _fill(c, rng)
        for i in range(1000):
            k = int(rng.integers(0, 1 << 63))
            c.admit(H.cache_hints(k), k, 1)
            if i % 4 == 0:
                c.invalidate(H.cache_hints(k), k)
        stored = {k for b in range(H.BUCKETS) for k, _ in c.bucket_contents(b)}
        rates[rule] = _fp_rate(c, rng, stored, 4000)
        s = c.statistics()
        assert s.evictions > 500 and s.invalidations > 100
        assert s.bloom_rebuilds == (0 if rule is None else (s.evictions + s.invalidations) // rule)
    assert rates[None] > 0.6, rates
    assert rates[H.REBUILD_AFTER] < 0.45, rates


def test_rebuild_is_charged_to_the_removal_that_triggers_it():
    c = H.HotCache(seed=13, admit=1.0, rebuild_after=2)
    hs = [H.cache_hints(k) for k in range(3)]
    for k, h in enumerate(hs):
        c.admit(h, k, k)
    assert c.invalidate(hs[0], 0) == 1
    assert c.invalidate(hs[1], 1) == 1 + H.REBUILD_LINES
    assert c.statistics().bloom_rebuilds == 1
    assert _bloom_has(c, hs[2].bloom)  # the remaining entry's bits are back
    stale = (set(hs[0].bloom) | set(hs[1].bloom)) - set(hs[2].bloom)
    assert stale and not any((int(c.bloom[b >> 6]) >> (b & 63)) & 1 for b in stale)
    assert int(np.unpackbits(c.bloom.view(np.uint8)).sum()) == len(set(hs[2].bloom))


# --- layout, inputs, determinism ---------------------------------------------------------------


def test_bucket_address_and_caller_arrays():
    seg = np.full(64 + 24 * 8 + 4, 123, dtype=np.uint64)  # e.g. a shared-memory segment
    table = seg[64 : 64 + 24 * 8].reshape(24, 8)
    bloom = seg[-4:]
    c = H.HotCache(seed=14, base=4096, table=table, bloom=bloom, admit=1.0)
    assert (seg[64 : 64 + 24 * 8].reshape(24, 8)[:, 1::2] == EMPTY).all() and not bloom.any()
    h = H.cache_hints(99)
    assert c.bucket_addr(h) == 4096 + 64 * h.bucket
    c.admit(h, 99, 5)
    assert int(seg[64 + 8 * h.bucket]) == 99 and int(seg[64 + 8 * h.bucket + 1]) == 5
    assert bloom.any() and (seg[:64] == 123).all()  # nothing outside the two views written


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda c: c.lookup(H.CacheHints((1, 2, 256), 0), 1), "Bloom bit"),
        (lambda c: c.lookup(H.CacheHints((-1, 2, 3), 0), 1), "Bloom bit"),
        (lambda c: c.lookup(H.CacheHints((1, 2), 0), 1), "3 Bloom bit indices"),
        (lambda c: c.lookup(H.CacheHints((1, 2, 3), 24), 1), "bucket"),
        (lambda c: c.admit(H.CacheHints((1, 2, 3), -1), 1, 1), "bucket"),
        (lambda c: c.invalidate(H.CacheHints((1, 2, 3), 2.0), 1), "bucket"),
        (lambda c: c.lookup((1, 2, 3), 1), "hints"),
        (lambda c: c.lookup(H.cache_hints(1), "1"), "key"),
        (lambda c: c.lookup(H.cache_hints(1), 1.0), "key"),
        (lambda c: c.admit(H.cache_hints(1), True, 1), "key"),
        (lambda c: c.invalidate(H.cache_hints(1), 2**64), "key"),
        (lambda c: c.lookup(H.cache_hints(1), -1), "key"),
        (lambda c: c.admit(H.cache_hints(1), 1, EMPTY), "value"),
        (lambda c: c.admit(H.cache_hints(1), 1, None), "value"),
        (lambda c: c.invalidate(None, 1), "hints"),
        (lambda c: H.cache_hints("x"), "key"),
        (lambda c: c.bucket_addr(H.CacheHints((1, 2, 3), 99)), "bucket"),
        (lambda c: H.HotCache(base=100), "line-aligned"),
        (lambda c: H.HotCache(admit=1.5), "admit"),
        (lambda c: H.HotCache(rebuild_after=0), "rebuild_after"),
        (lambda c: H.HotCache(table=np.zeros((24, 8), dtype=np.int64)), "table"),
        (lambda c: H.HotCache(bloom=np.zeros(3, dtype=np.uint64)), "bloom"),
        (lambda c: H.HotCache(seed="a"), "seed"),
        (lambda c: H.zipf_coverage(0, 0.99), "n_keys"),
    ],
)
def test_bad_input_is_one_line_value_error(call, match):
    c = H.HotCache(seed=15)
    with pytest.raises(ValueError, match=match) as e:
        call(c)
    assert "\n" not in str(e.value)


def _run(seed, ops=3000):
    c = H.HotCache(seed=seed, admit=0.5, rebuild_after=8)
    rng = np.random.default_rng(99)  # the same operations for every seed
    for k, op in zip(rng.integers(0, 400, ops).tolist(), rng.integers(0, 3, ops).tolist()):
        h = H.cache_hints(k)
        if op == 2:
            c.invalidate(h, k)
        elif not c.lookup(h, k).hit:
            c.admit(h, k, k * 3)
    return c.table.copy(), c.bloom.copy(), c.statistics()


def test_same_seed_same_run_other_seed_other_choices():
    a, b = _run(1), _run(1)
    assert (a[0] == b[0]).all() and (a[1] == b[1]).all() and a[2] == b[2]
    other = _run(2)
    assert not (a[0] == other[0]).all() or a[2] != other[2]


# --- consistency -------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("crowded", [False, True])
def test_random_operations_never_return_a_stale_value(seed, crowded):
    """GET / INSERT / UPDATE / DELETE on a small key set against a dict store. ``crowded``
    squeezes all keys into 3 buckets and 8 Bloom bits (constant collisions, stale bits, false
    positives); frequent rebuilds. A cache hit must equal the store's current value."""
    if crowded:
        hint = lambda k: H.CacheHints((k % 8, (k // 8) % 8, 0), k % 3)  # noqa: E731
    else:
        hint = H.cache_hints
    rng = np.random.default_rng(seed)
    c = H.HotCache(seed=seed, admit=[1.0, 0.5, 0.125][seed % 3], rebuild_after=3, rehash=hint)
    store = {}
    hits = 0
    for _ in range(4000):
        k = int(rng.integers(0, 60))
        op = rng.random()
        if op < 0.55:  # GET: cache, else the tree; admit what the tree returned
            p = c.lookup(hint(k), k)
            if p.hit:
                hits += 1
                assert k in store and p.value == store[k]
            elif k in store:
                c.admit(hint(k), k, store[k])
        elif op < 0.9:  # INSERT or UPDATE (may overwrite): invalidate, then write the store
            c.invalidate(hint(k), k)
            store[k] = int(rng.integers(0, MAX_VALUE, dtype=np.uint64))
        else:  # DELETE
            c.invalidate(hint(k), k)
            store.pop(k, None)
    for b in range(H.BUCKETS):
        for key, value in c.bucket_contents(b):
            assert store[key] == value and _bloom_has(c, hint(key).bloom)
    s = c.statistics()
    assert hits == s.hits > 100 and s.invalidations > 50 and s.bloom_rebuilds > 10
    assert c.entries == sum(len(c.bucket_contents(b)) for b in range(H.BUCKETS))


# --- Zipf coverage -----------------------------------------------------------------------------


def test_zipf_coverage():
    exact = sum(i**-0.99 for i in range(1, 51)) / sum(i**-0.99 for i in range(1, 200_001))
    assert abs(H.zipf_coverage(200_000, 0.99, 50) - exact) < 1e-9
    assert abs(H.zipf_coverage(1000, 0.0, 96) - 0.096) < 1e-12
    assert H.zipf_coverage(10, 1.2, 100) == 1.0 and H.zipf_coverage(10, 1.0, 0) == 0.0
    # the paper: 176 x 96 = 16,896 entries over 200 M keys cover "more than 50 %" of the
    # requests (its Zipf parameter is elided): YCSB's 0.99 gives just under half, 1.0 just over
    assert H.TRAVERSERS * H.CAPACITY == 16_896
    assert 0.49 < H.zipf_coverage(200_000_000, 0.99) < 0.5 < H.zipf_coverage(200_000_000, 1.0)
    assert H.zipf_coverage(200_000_000, 1.0) < 0.53
