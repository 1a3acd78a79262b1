"""SOSD datasets: the file format and its errors, the generators' contracts, the PLA segment
counter against a brute-force reference and (capped at 128) against DPA-Store's leaf count, and the
stand-ins' leaves per key in Table 1's order and ratios."""

from __future__ import annotations

import itertools
from fractions import Fraction

import numpy as np
import pytest

from workloads import sosd
from workloads.sosd import (
    DATASETS, STANDINS, TUNE_EPS, TUNE_MAX_SIZE, TUNE_N, count_pla_segments, dataset, dense4x, first_unsorted,
    read_sosd, sparse, write_sosd,
)

NAMES = ["sparse", "dense4x", "face", "amzn", "wiki", "osmc"]


# --------------------------------------------------------------------------- file format

def test_round_trip(tmp_path):
    keys = sparse(1000, seed=3)
    path = tmp_path / "k.bin"
    write_sosd(path, keys)
    assert path.stat().st_size == 8 + 8 * 1000
    got = read_sosd(path)
    assert got.dtype == np.dtype("<u8")
    assert np.array_equal(got, keys)
    assert np.array_equal(read_sosd(path, limit=10), keys[:10])
    assert read_sosd(path, limit=5000).size == 1000
    # The layout is the published one: count, then keys, little-endian.
    raw = path.read_bytes()
    assert int.from_bytes(raw[:8], "little") == 1000
    assert int.from_bytes(raw[8:16], "little") == int(keys[0])


def test_truncated_and_mismatched_files(tmp_path):
    keys = np.arange(10, dtype=np.uint64)
    path = tmp_path / "short.bin"
    write_sosd(path, keys)
    path.write_bytes(path.read_bytes()[:-3])
    with pytest.raises(ValueError, match=r"short\.bin.*truncated"):
        read_sosd(path)
    big = tmp_path / "big.bin"
    big.write_bytes(np.array([2], "<u8").tobytes() + np.arange(5, dtype="<u8").tobytes())
    with pytest.raises(ValueError, match=r"big\.bin.*oversized.*2 keys"):
        read_sosd(big)
    tiny = tmp_path / "tiny.bin"
    tiny.write_bytes(b"\x01\x00")
    with pytest.raises(ValueError, match=r"tiny\.bin.*8-byte count"):
        read_sosd(tiny)
    empty = tmp_path / "empty.bin"
    empty.write_bytes(np.array([0], "<u8").tobytes())
    with pytest.raises(ValueError, match=r"empty\.bin.*empty"):
        read_sosd(empty)


def test_sortedness_checks(tmp_path):
    assert first_unsorted(np.array([1, 2, 2, 5], dtype=np.uint64)) is None
    assert first_unsorted(np.array([1, 3, 2, 5, 4], dtype=np.uint64)) == 2
    bad = np.array([1, 3, 2], dtype=np.uint64)
    with pytest.raises(ValueError, match=r"u\.bin.*not sorted.*key 2"):
        write_sosd(tmp_path / "u.bin", bad)
    write_sosd(tmp_path / "u.bin", bad, check_sorted=False)
    assert np.array_equal(read_sosd(tmp_path / "u.bin"), bad)
    with pytest.raises(ValueError, match=r"u\.bin.*not sorted.*key 2"):
        read_sosd(tmp_path / "u.bin", check_sorted=True)


# --------------------------------------------------------------------------- generators

@pytest.mark.parametrize("name", NAMES)
def test_generator_contract(name):
    n = 5000
    a = dataset(name, n, seed=7)
    assert a.dtype == np.uint64 and a.shape == (n,)
    assert np.all(a[1:] > a[:-1])  # sorted and unique
    assert np.array_equal(a, dataset(name, n, seed=7))
    assert not np.array_equal(a, dataset(name, n, seed=8))


def test_dense4x_range_and_sparse_spread():
    n = 10_000
    d = dense4x(n, seed=1)
    assert int(d[-1]) < 4 * n
    assert int(d[-1]) - int(d[0]) > 3.9 * n  # the whole range is used, not a prefix
    # Past one 4 Mi block the range is sampled block by block; the contract must not change.
    big = dense4x(1_100_000, seed=2)
    assert big.size == 1_100_000 and int(big[-1]) < 4_400_000 and np.all(big[1:] > big[:-1])
    assert abs(int(np.count_nonzero(big < (1 << 22))) - (1 << 22) // 4) < 3000
    s = sparse(n, seed=1)
    # Uniform over 2^64: every sixteenth of the space holds about n/16 keys.
    counts = np.bincount((s >> np.uint64(60)).astype(np.int64), minlength=16)
    assert counts.min() > 0.8 * n / 16 and counts.max() < 1.2 * n / 16
    assert int(s[-1]) > (1 << 63)


def test_unknown_dataset_lists_the_names():
    with pytest.raises(ValueError, match="sparse, dense4x, face, amzn, wiki, osmc"):
        dataset("books", 10)
    assert set(DATASETS) == set(NAMES)


def test_stand_in_roughness_is_monotone():
    # The knob's whole point is tuning: more roughness must mean more segments and more leaves
    # (over the ranges used; face peaks near its tuned 0.066, see its docstring).
    n = 20_000
    for name, lo, hi in [("face", 0.01, 0.04), ("amzn", 1.2, 2.0), ("wiki", 0.1, 0.8), ("osmc", 0.5, 1.0)]:
        gen = getattr(sosd, name)
        a, b = gen(n, 1, lo), gen(n, 1, hi)
        assert count_pla_segments(a, TUNE_EPS) < count_pla_segments(b, TUNE_EPS), name
        assert count_pla_segments(a, TUNE_EPS, TUNE_MAX_SIZE) < count_pla_segments(b, TUNE_EPS, TUNE_MAX_SIZE), name


# --------------------------------------------------------------------------- PLA segment counter

def _feasible(xs, ys, eps):
    """Brute force: some line is within eps of every point. A non-empty feasible set of (slope,
    intercept) for two or more distinct x is bounded, so it has a vertex: a line tight on two
    constraints, i.e. through two of the points (x, y +/- eps)."""
    if len(xs) <= 1:
        return True
    pts = [(x, y + s) for x, y in zip(xs, ys) for s in (eps, -eps)]
    for (xa, ya), (xb, yb) in itertools.combinations(pts, 2):
        if xa == xb:
            continue
        a = Fraction(yb - ya, xb - xa)
        b = ya - a * xa
        if all(abs(a * x + b - y) <= eps for x, y in zip(xs, ys)):
            return True
    return False


def _brute_segments(keys, eps):
    """Greedy maximal segments by brute force; returns their boundaries."""
    bounds, i, n = [], 0, len(keys)
    while i < n:
        j = i + 1
        while j < n and _feasible(keys[i:j + 1], list(range(i, j + 1)), eps):
            j += 1
        bounds.append((i, j))
        i = j
    return bounds


def test_pla_hand_made_cases():
    assert count_pla_segments(np.array([], dtype=np.uint64), 4) == 0
    assert count_pla_segments(np.array([5], dtype=np.uint64), 0) == 1
    assert count_pla_segments(np.arange(0, 100_000, 7, dtype=np.uint64), 0) == 1
    # Perfectly linear keys near the top of the 64-bit space (float slopes would round there).
    top = np.uint64((1 << 64) - 1) - np.arange(1000, dtype=np.uint64)[::-1] * np.uint64(1 << 40)
    assert count_pla_segments(top, 0) == 1
    # Two linear pieces with a kink: eps 0 needs exactly two segments.
    kink = np.concatenate([np.arange(0, 50), 50 + 10 * np.arange(0, 50)]).astype(np.uint64)
    assert count_pla_segments(kink, 0) == 2
    # A step of height 2 eps + 1 cannot be bridged; one of 2 eps can.
    step = np.array([0, 1, 2, 3, 1000, 1001, 1002, 1003], dtype=np.uint64)
    assert count_pla_segments(step, 1) == 2
    assert count_pla_segments(step, 2) == 1
    with pytest.raises(ValueError, match="strictly increasing"):
        count_pla_segments(np.array([1, 2, 2, 3], dtype=np.uint64), 1)


def test_pla_matches_brute_force():
    rng = np.random.default_rng(0)
    for trial in range(150):
        n = int(rng.integers(1, 22))
        eps = int(rng.integers(0, 3))
        kind = trial % 3
        if kind == 0:
            keys = np.unique(rng.integers(0, 60, n))
        elif kind == 1:
            keys = np.unique(rng.integers(0, 2**64 - 1, n, dtype=np.uint64))
        else:
            keys = np.unique(np.cumsum(rng.geometric(0.3, n) ** 2))
        keys = [int(k) for k in keys]
        bounds = _brute_segments(keys, eps)
        arr = np.array(keys, dtype=np.uint64)
        assert count_pla_segments(arr, eps) == len(bounds), (keys, eps)
        for cap in (1, 2, 3, 5):  # a capped segment of L keys is ceil(L / cap) pieces
            want = sum(-(-(j - i) // cap) for i, j in bounds)
            assert count_pla_segments(arr, eps, cap) == want, (keys, eps, cap)
        for i, j in bounds:  # every segment is fittable and (but the last) maximal
            assert _feasible(keys[i:j], list(range(i, j)), eps)
            if j < len(keys):
                assert not _feasible(keys[i:j + 1], list(range(i, j + 1)), eps)


def test_pla_size_cap():
    line = np.arange(0, 1000, 3, dtype=np.uint64)  # 334 keys, one segment
    assert count_pla_segments(line, 0) == 1
    assert count_pla_segments(line, 0, 128) == 3
    assert count_pla_segments(line, 0, 334) == 1
    assert count_pla_segments(line, 0, 333) == 2
    assert count_pla_segments(line, 0, 1) == 334
    assert count_pla_segments(np.array([], dtype=np.uint64), 4, 128) == 0
    kink = np.concatenate([np.arange(0, 200), 200 + 10 * np.arange(0, 50)]).astype(np.uint64)
    assert count_pla_segments(kink, 0, 128) == 2 + 1  # 200 keys -> 2 pieces, 50 keys -> 1
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="max_size"):
            count_pla_segments(line, 0, bad)


@pytest.mark.parametrize("name", NAMES)
def test_capped_count_is_dpa_store_leaf_count(name):
    # The tuning statistic must be exactly the number of leaves DPA-Store's bulk load builds
    # (PLA at the leaf eps, segments cut into pieces of at most LEAF_CAPACITY entries).
    from nodes.systems.dpastore import pla

    assert pla.LEAF_CAPACITY == TUNE_MAX_SIZE and pla.LEAF_EPS == TUNE_EPS
    for n, seed, eps in [(20_000, 5, 8), (7_000, 2, 16), (3_000, 9, 1)]:
        ks = dataset(name, n, seed)
        st = pla.LearnedIndex.bulk_build(ks, ks, leaf_eps=eps).statistics()
        assert count_pla_segments(ks, eps, pla.LEAF_CAPACITY) == st.leaves, (name, n, eps)
        assert count_pla_segments(ks, eps) == st.leaf_pla_segments, (name, n, eps)


# --------------------------------------------------------------------------- Table 1 order

def test_stand_ins_rank_as_table_1():
    # Table 1 (DPA-Store, index overhead at default eps): face 104% > osmc 74% > amzn 54% >
    # sparse 32% > dense4x 26% > wiki 23%. The overhead follows the number of leaves (128-entry
    # PLA pieces), so that is the tuned statistic: leaves per key relative to sparse.
    leaves = {name: count_pla_segments(dataset(name, TUNE_N, seed=1), TUNE_EPS, TUNE_MAX_SIZE)
              for name in NAMES}
    order = sorted(leaves, key=leaves.get, reverse=True)
    assert order == ["face", "osmc", "amzn", "sparse", "dense4x", "wiki"], leaves
    ratio = {name: leaves[name] / leaves["sparse"] for name in NAMES}
    # The stand-ins above sparse hit the published ratios (the tuning target) within 5%.
    for name, pct in {"face": 104, "osmc": 74, "amzn": 54}.items():
        assert ratio[name] == pytest.approx(pct / 32, rel=0.05), (name, ratio)
    # Below sparse the cap rules: no set has fewer than ceil(n / 128) leaves, and sparse's
    # leaves are already ~103 keys full, so wiki's 23/32 = 0.72 is out of reach; dense4x is
    # exact (0.96, not 0.81) and wiki is tuned to within a few percent of that floor.
    floor = -(-TUNE_N // TUNE_MAX_SIZE) / leaves["sparse"]
    assert 23 / 32 < floor < 26 / 32 + 0.01
    assert ratio["dense4x"] == pytest.approx(0.957, abs=0.02)
    assert floor <= ratio["wiki"] < floor * 1.06, (floor, ratio)
    assert set(STANDINS) == {"face", "osmc", "amzn", "wiki"}
