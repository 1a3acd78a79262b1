"""YCSB generators: fnvhash64 against a literal reference, zeta, and the shape of every
distribution (zipfian head, scrambled spread, hotspot fractions, latest skew, uniform range),
determinism and independence of random streams, counters. Sample sizes are small enough for the
whole file to run in about a second once numba's cache is warm."""

from __future__ import annotations

import ast
import pathlib

import numpy as np
import pytest

from workloads import generators as g
from workloads.generators import (
    AcknowledgedCounterGenerator, CounterGenerator, ExponentialGenerator, HotspotIntegerGenerator,
    ScrambledZipfianGenerator, SequentialGenerator, SkewedLatestGenerator, UniformLongGenerator,
    ZipfianGenerator, fnvhash64, java_rem, number_generator, rng_state,
)

M64 = (1 << 64) - 1


def fnv1a64(data: bytes) -> int:
    """Textbook FNV-1a 64 over a byte string."""
    h = 0xCBF29CE484222325
    for b in data:
        h = ((h ^ b) * 1099511628211) & M64
    return h


def java_fnvhash64(val: int) -> int:
    """YCSB's Utils.fnvhash64 transcribed with Java long arithmetic (signed wrap, >> arithmetic,
    Math.abs(Long.MIN_VALUE) == Long.MIN_VALUE)."""
    def signed(x):
        x &= M64
        return x - (1 << 64) if x >> 63 else x
    hashval = signed(0xCBF29CE484222325)
    val = signed(val)
    for _ in range(8):
        octet = val & 0xFF
        val = val >> 8
        hashval = signed(hashval ^ octet)
        hashval = signed(hashval * 1099511628211)
    return hashval if hashval == -(1 << 63) else abs(hashval)


def test_reference_fnv1a_matches_published_vectors():
    # The FNV authors' test vectors for FNV-1a 64.
    assert fnv1a64(b"") == 0xCBF29CE484222325
    assert fnv1a64(b"a") == 0xAF63DC4C8601EC8C
    assert fnv1a64(b"foobar") == 0x85944171F73967E8


@pytest.mark.parametrize("v", [0, 1, 2, 255, 256, 1000, 999_999, 10**10, 2**31 - 1, 2**63 - 1, -1, -2**63,
                               0x0123456789ABCDEF])
def test_fnvhash64_is_ycsbs(v):
    want = java_fnvhash64(v)
    assert fnvhash64(v) == want
    # ... which is FNV-1a over the long's 8 little-endian bytes, then Java's abs.
    h = fnv1a64((v & M64).to_bytes(8, "little"))
    h = h - (1 << 64) if h >> 63 else h
    assert want == (h if h == -(1 << 63) else abs(h))


def test_fnvhash64_known_values_and_batch():
    assert fnvhash64(0) == 6284781860667377211
    assert fnvhash64(1) == 8517097267634966620
    a = np.arange(-50, 50, dtype=np.int64)
    g.fnvhash64_inplace(a)
    assert a.tolist() == [java_fnvhash64(v) for v in range(-50, 50)]
    assert (a >= 0).all()


def test_java_rem_follows_the_dividend_sign():
    assert java_rem(17, 5) == 2
    assert java_rem(-2**63, 1000) == -(2**63 % 1000)
    assert java_rem(-7, 5) == -2


def test_zeta_exact_and_euler_maclaurin():
    assert g.zeta_sum(0, 3, 0.5, 0.0) == pytest.approx(1 + 2**-0.5 + 3**-0.5, rel=1e-15)
    assert g.zeta_sum(2, 3, 0.5, 1 + 2**-0.5) == pytest.approx(1 + 2**-0.5 + 3**-0.5, rel=1e-15)
    for n in (1001, 123_456):
        for theta in (0.5, 0.99):
            assert g.zeta_em(n, theta) == pytest.approx(g.zeta_sum(0, n, theta, 0.0), rel=1e-12)
    # YCSB's precomputed zeta over 10^10 items at 0.99 (its summation error is ~1e-12 relative).
    assert g.zeta_em(g.SCRAMBLED_ITEM_COUNT, 0.99) == pytest.approx(g.SCRAMBLED_ZETAN, rel=1e-11)
    assert g.zeta(10**9, 0.99) == pytest.approx(g.zeta_em(10**9, 0.99))


def test_rng_is_deterministic_per_stream_and_streams_differ():
    a, b, c = rng_state(7, 0), rng_state(7, 0), rng_state(7, 1)
    assert a.dtype == np.uint64 and a.shape == (4,)
    xa = [g.next_u64(a) for _ in range(5)]
    assert xa == [g.next_u64(b) for _ in range(5)]
    assert xa != [g.next_u64(c) for _ in range(5)]
    assert not np.array_equal(rng_state(7, 0), rng_state(8, 0))
    assert not np.array_equal(rng_state(7, 0), rng_state(7, 0, salt=1))
    with pytest.raises(TypeError, match="seed"):
        rng_state(1.5, 0)


def test_independent_streams_are_uncorrelated():
    x = UniformLongGenerator(0, 10**9, seed=3, stream_id=0).next_batch(50_000).astype(float)
    y = UniformLongGenerator(0, 10**9, seed=3, stream_id=1).next_batch(50_000).astype(float)
    assert abs(np.corrcoef(x, y)[0, 1]) < 0.02
    assert abs(np.corrcoef(x[:-1], x[1:])[0, 1]) < 0.02


def test_zipfian_head_follows_theta():
    z = ZipfianGenerator(0, 999, seed=11)
    v = z.next_batch(200_000)
    assert v.min() >= 0 and v.max() <= 999
    counts = np.bincount(v, minlength=1000)
    assert counts.argmax() == 0
    assert counts[0] / counts[1] == pytest.approx(2**0.99, rel=0.05)
    assert counts[0] / len(v) == pytest.approx(1 / z.zetan, rel=0.03)
    # min..max shifts the items
    w = ZipfianGenerator(100, 199, seed=1).next_batch(10_000)
    assert w.min() == 100 and w.max() <= 199 and np.bincount(w).argmax() == 100


def test_zipfian_incremental_zeta_on_growth():
    z = ZipfianGenerator(0, 999, seed=1)
    eta_items = z.eta
    z.next_long(2000)
    assert z.zetan == pytest.approx(g.zeta_sum(0, 2000, 0.99, 0.0), rel=1e-14)
    # YCSB quirk: eta is recomputed with the construction-time item count.
    want_eta = (1 - (2 / 1000) ** 0.01) / (1 - (1 + 0.5**0.99) / z.zetan)
    assert z.eta == pytest.approx(want_eta) and z.eta != eta_items
    # A smaller count keeps the larger zeta (allowitemcountdecrease=false).
    zetan = z.zetan
    z.next_long(500)
    assert z.zetan == zetan


def test_zipfian_rejects_bad_parameters():
    with pytest.raises(ValueError, match=r"\(0, 1\)"):
        ZipfianGenerator(0, 10, theta=1.0)
    with pytest.raises(ValueError, match="max >= min"):
        ZipfianGenerator(5, 4)


def test_scrambled_zipfian_spreads_over_the_range():
    lo, hi = 1000, 10_999
    v = ScrambledZipfianGenerator(lo, hi, seed=5).next_batch(200_000)
    assert v.min() >= lo and v.max() <= hi
    counts = np.bincount(v - lo, minlength=hi - lo + 1)
    # The hottest record is where item 0 of the 10^10-item zipfian hashes to.
    assert counts.argmax() + lo == lo + fnvhash64(0) % (hi - lo + 1)
    # Popularity is scattered, not clustered at the low end.
    tenth = (hi - lo + 1) // 10
    assert 0.03 < (v < lo + tenth).mean() < 0.25
    assert (counts > 0).mean() > 0.9


def test_scrambled_zipfian_other_constant():
    v = ScrambledZipfianGenerator(0, 99, theta=0.5, seed=1).next_batch(20_000)
    assert v.min() >= 0 and v.max() <= 99
    assert (np.bincount(v, minlength=100) > 0).all()


def test_uniform_range():
    v = UniformLongGenerator(-3, 3, seed=2).next_batch(20_000)
    assert set(v.tolist()) == set(range(-3, 4))
    assert abs(v.mean()) < 0.1


def test_hotspot_fractions():
    h = HotspotIntegerGenerator(0, 999, 0.2, 0.8, seed=9)
    v = h.next_batch(100_000)
    assert v.min() >= 0 and v.max() <= 999
    assert (v < 200).mean() == pytest.approx(0.8, abs=0.01)
    assert len(np.unique(v[v < 200])) == 200 and len(np.unique(v[v >= 200])) == 800
    with pytest.raises(ValueError, match="empty hot set"):
        HotspotIntegerGenerator(0, 3, 0.1, 0.5)
    with pytest.raises(ValueError, match="empty cold set"):
        HotspotIntegerGenerator(0, 9, 1.0, 0.5)
    all_hot = HotspotIntegerGenerator(0, 9, 1.0, 1.0, seed=1).next_batch(100)
    assert all_hot.max() <= 9


def test_latest_favours_recent_records():
    basis = CounterGenerator(1000)        # last value 999
    lat = SkewedLatestGenerator(basis, seed=4)
    v = lat.next_batch(50_000)
    assert v.min() >= 1 and v.max() <= 999      # YCSB quirk: record 0 is never drawn
    counts = np.bincount(v, minlength=1000)
    assert counts.argmax() == 999 and counts[999] > counts[998] > counts[900]
    for _ in range(500):
        basis.next()                              # the basis grows: the head follows it
    v = lat.next_batch(50_000)
    assert np.bincount(v).argmax() == 1499 and v.max() <= 1499
    assert lat.fp[g.ZP_COUNT] == 1499             # zeta extended incrementally


def test_sequential_and_exponential():
    s = SequentialGenerator(5, 7)
    assert s.next_batch(7).tolist() == [5, 6, 7, 5, 6, 7, 5]
    basis = CounterGenerator(10_000)
    e = ExponentialGenerator(95, 1000, basis, seed=1)
    v = e.next_batch(20_000)
    assert v.max() <= 9999
    assert (v > 9999 - 1000).mean() == pytest.approx(0.95, abs=0.01)


def test_counters_and_acknowledgements():
    c = CounterGenerator(5)
    assert [c.next(), c.next()] == [5, 6] and c.last_value() == 6
    a = AcknowledgedCounterGenerator(10)
    assert a.last_value() == 9
    x, y, z = a.next(), a.next(), a.next()
    a.acknowledge(y)
    assert a.last_value() == 9          # 10 is still in flight
    a.acknowledge(x)
    assert a.last_value() == 11
    a.acknowledge(z)
    assert a.last_value() == 12
    a.acknowledge(20)                      # ahead of 13..19: parked in the window
    assert a.last_value() == 12
    with pytest.raises(RuntimeError, match="unacknowledged"):
        a.acknowledge(20 + g.ACK_WINDOW_SIZE)  # the window is full at that slot


def test_length_generators():
    assert number_generator("constant", 1, 100).next_batch(3).tolist() == [100, 100, 100]
    u = number_generator("uniform", 1, 100, seed=1).next_batch(5000)
    assert u.min() == 1 and u.max() == 100
    z = number_generator("zipfian", 1, 100, seed=1).next_batch(5000)
    assert z.min() == 1 and z.max() <= 100 and np.bincount(z).argmax() == 1
    with pytest.raises(ValueError, match="constant, uniform or zipfian"):
        number_generator("histogram", 1, 100)


def test_statistics_are_immutable_records():
    z = ZipfianGenerator(0, 9, seed=1)
    assert z.statistics() == ("zipfian", 0, None)
    z.next_batch(10)
    last = z.next()
    st = z.statistics()
    assert st.draws == 11 and st.last == last and st.kind == "zipfian"
    with pytest.raises(AttributeError):
        st.draws = 0


def test_load_keys_and_interarrivals():
    assert g.load_keys(3, 4, hashed=False).tolist() == [3, 4, 5, 6]
    assert g.load_keys(3, 2).tolist() == [java_fnvhash64(3), java_fnvhash64(4)]
    s = rng_state(1, 2)
    out = np.empty(50_000)
    g.interarrivals_ns(s, 1e6, out)
    assert out.min() >= 0 and out.mean() == pytest.approx(1000.0, rel=0.03)
    assert g.interarrival_ns(s, 1e3) >= 0


#: The modules of shm a workload may import: leaves of the standard library that hold no rack
#: (one-line error conventions; the op codes, declared once for every floor).
WORKLOAD_MAY_IMPORT = ("shm.messages", "shm.telemetry")


def test_workloads_package_depends_on_nothing_of_the_rack():
    for path in pathlib.Path(g.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            for n in names:
                if n in WORKLOAD_MAY_IMPORT:
                    continue
                assert n.split(".")[0] not in ("shm", "nodes", "cluster"), f"{path.name} imports {n}"
