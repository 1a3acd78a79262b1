"""DPA-Store's learned index core (nodes/systems/dpastore/pla.py) against a numpy oracle."""

from fractions import Fraction

import numpy as np
import pytest

from nodes.systems.dpastore import pla


def _uniform(n, seed=1):
    rng = np.random.default_rng(seed)
    return np.unique(rng.integers(0, 2**64, n, dtype=np.uint64, endpoint=False))


def _dense(n):
    return np.arange(10**12, 10**12 + n, dtype=np.uint64)


def _clustered(n, seed=2):
    """Skewed: a few hundred clusters at random places, keys packed with geometric gaps,
    cluster sizes heavy-tailed, plus a sprinkle of lone outliers."""
    rng = np.random.default_rng(seed)
    sizes = np.maximum(1, (rng.pareto(1.2, 300) * 40).astype(np.int64))
    centres = rng.integers(0, 2**63, sizes.size, dtype=np.uint64)
    parts = [
        c + np.cumsum(rng.geometric(0.05, s)).astype(np.uint64) for c, s in zip(centres, sizes)
    ]
    parts.append(rng.integers(0, 2**64, 200, dtype=np.uint64, endpoint=False))
    keys = np.unique(np.concatenate(parts))
    return keys[:n] if keys.size > n else keys


DATASETS = {"uniform": _uniform(12_000), "dense": _dense(12_000), "clustered": _clustered(12_000)}


@pytest.mark.parametrize("name", sorted(DATASETS))
@pytest.mark.parametrize("eps", [1, 4, 8, 32])
def test_eps_bound_holds_for_every_key_after_fixed_point_rounding(name, eps):
    keys = DATASETS[name]
    segs = pla.segment(keys, eps)
    # segments tile the array in order
    assert segs[0].start == 0
    assert sum(s.size for s in segs) == keys.size
    for a, b in zip(segs, segs[1:]):
        assert b.start == a.start + a.size and b.first_key == int(keys[b.start])
    assert pla.max_error(segs, keys) <= eps


@pytest.mark.parametrize("name", sorted(DATASETS))
def test_split_pieces_keep_the_bound_and_capacity(name):
    keys = DATASETS[name]
    segs = pla.segment(keys, pla.LEAF_EPS, max_size=pla.LEAF_CAPACITY)
    assert max(s.size for s in segs) <= pla.LEAF_CAPACITY
    assert pla.max_error(segs, keys) <= pla.LEAF_EPS


def test_dense_keys_are_one_exact_segment():
    segs = pla.segment(DATASETS["dense"], 1)
    assert len(segs) == 1
    assert pla.max_error(segs, DATASETS["dense"]) == 0


@pytest.mark.parametrize("name", sorted(DATASETS))
def test_fixed_point_prediction_matches_exact_arithmetic(name):
    keys = DATASETS[name]
    ks = keys.tolist()
    eps = pla.LEAF_EPS
    lines = pla._fit_lines(ks, eps)
    segs = pla.segment(keys, eps)
    assert len(lines) == len(segs)
    for line, seg in zip(lines, segs):
        # formats: 32-bit mantissa, byte shift, int32 Q15.16 intercept, 128-bit intermediate
        assert seg.slope == 0 or 2**31 <= seg.slope < 2**32
        assert 0 <= seg.shift <= 127
        assert -(2**31) <= seg.intercept < 2**31
        assert (seg.slope * (2**64 - 1)) << max(0, pla.FRAC_BITS - seg.shift) < 2**128
        for j in range(0, seg.size, 7):
            k = ks[seg.start + j]
            p = pla.predict(seg, k)
            exact_fixed = Fraction(seg.intercept, 2**16) + Fraction(
                seg.slope * (k - seg.first_key), 2**seg.shift
            )
            # the truncating shift never changes the rounded result
            assert p == (exact_fixed + Fraction(1, 2)).__floor__()
            real = line.y0 + line.slope * (k - line.x0) - seg.start
            assert abs(p - real) <= Fraction(51, 100)



def _fit_lines_reference(keys, eps):
    """The greedy optimal PLA as it was written before its tests were spelled out: the extreme
    lines' slopes taken afresh for every key and compared with the module's helpers (``_vec``,
    ``_slope_lt``); the hulls' pivots are the module's own (``_pivot``), which both loops
    share. ``pla._fit_lines`` must give the same lines."""
    _vec, _slope_lt, _canonical_line = pla._vec, pla._slope_lt, pla._canonical_line
    lines = []
    n = len(keys)
    start = 0
    i = 0
    while i < n:
        x = keys[i]
        up, lo = (x, i + eps), (x, i - eps)
        rect = [up, lo, None, None]
        upper, lower = [up], [lo]
        upper_start = lower_start = 0
        count = 1
        i += 1
        while i < n:
            x = keys[i]
            p1, p2 = (x, i + eps), (x, i - eps)
            if count == 1:
                rect[2], rect[3] = p2, p1
                upper.append(p1)
                lower.append(p2)
                count += 1
                i += 1
                continue
            slope1 = _vec(rect[2], rect[0])
            slope2 = _vec(rect[3], rect[1])
            if _slope_lt(_vec(p1, rect[2]), slope1) or _slope_lt(slope2, _vec(p2, rect[3])):
                break
            if _slope_lt(_vec(p1, rect[1]), slope2):
                lower_start = pla._pivot(lower, lower_start, upper, upper_start, p1, 1)
                rect[1], rect[3] = lower[lower_start], p1
            if _slope_lt(slope1, _vec(p2, rect[0])):
                upper_start = pla._pivot(upper, upper_start, lower, lower_start, p2, -1)
                rect[0], rect[2] = upper[upper_start], p2
            count += 1
            i += 1
        lines.append(_canonical_line(start, i, rect, count))
        start = i
    return lines


@pytest.mark.parametrize("name", sorted(DATASETS))
@pytest.mark.parametrize("eps", [1, 3, 8, 64])
def test_fit_lines_is_the_plain_algorithm(name, eps):
    ks = DATASETS[name].tolist()
    assert pla._fit_lines(ks, eps) == _fit_lines_reference(ks, eps)
    rng = np.random.default_rng(eps)
    for n in (1, 2, 3, 17):                       # short runs: one point, two, the first pivots
        few = sorted(set(rng.integers(0, 2**64, n, dtype=np.uint64, endpoint=False).tolist()))
        assert pla._fit_lines(few, eps) == _fit_lines_reference(few, eps)


def test_segment_count_decreases_as_eps_grows():
    for name in ("uniform", "clustered"):
        counts = [len(pla.segment(DATASETS[name], eps)) for eps in (1, 2, 4, 8, 16, 32, 64)]
        assert all(a >= b for a, b in zip(counts, counts[1:])), (name, counts)
        assert counts[0] > 4 * counts[-1], (name, counts)


# --- the tree --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def big():
    keys = _uniform(50_000, seed=7)
    values = np.random.default_rng(8).integers(0, 2**64, keys.size, dtype=np.uint64, endpoint=False)
    return keys, values, pla.LearnedIndex.bulk_build(keys, values)


@pytest.fixture(scope="module", params=["dense", "clustered"])
def small(request):
    keys = DATASETS[request.param]
    values = keys ^ np.uint64(0x5555_5555_5555_5555)
    return keys, values, pla.LearnedIndex.bulk_build(keys, values)


def _absent_probes(keys, rng):
    probes = np.concatenate(
        [
            rng.integers(0, 2**64, 3000, dtype=np.uint64, endpoint=False),
            keys[keys > 0][:2000] - np.uint64(1),
            keys[keys < 2**64 - 1][-2000:] + np.uint64(1),
            np.array([0, 2**64 - 1], dtype=np.uint64),
        ]
    )
    return probes[~np.isin(probes, keys)]


def _check_lookups(keys, values, idx):
    for k, v in zip(keys.tolist(), values.tolist()):
        assert idx.get(k) == v
    rng = np.random.default_rng(3)
    for k in _absent_probes(keys, rng).tolist():
        assert idx.get(k) is None


def test_every_key_found_and_absent_keys_miss_50k(big):
    _check_lookups(*big)


def test_lookups_on_dense_and_clustered(small):
    _check_lookups(*small)


def _oracle_range(keys, values, start, count):
    i = int(np.searchsorted(keys, np.uint64(start), side="left"))
    return list(zip(keys[i : i + count].tolist(), values[i : i + count].tolist()))


def test_range_scans_match_the_oracle(big, small):
    rng = np.random.default_rng(4)
    for keys, values, idx in (big, small):
        starts = np.concatenate(
            [rng.choice(keys, 60), rng.integers(0, 2**64, 60, dtype=np.uint64, endpoint=False)]
        ).tolist() + [0, int(keys[0]), int(keys[-1]), 2**64 - 1]
        for s in starts:
            for count in (0, 1, 5, 130, 700):
                assert idx.range_scan(s, count) == _oracle_range(keys, values, s, count)
        assert idx.range_scan(0, keys.size + 10) == _oracle_range(keys, values, 0, keys.size + 10)
        assert idx.lower_bound(int(keys[-1])) == (int(keys[-1]), int(values[-1]))
        assert idx.lower_bound(int(keys[0]) - 1) == (int(keys[0]), int(values[0]))
        assert idx.lower_bound(int(keys[-1]) + 1) is None


def test_cache_lines_respect_the_papers_constraints(big, small):
    # the window arithmetic behind the constants
    assert 2 * pla.INNER_EPS + 1 <= 16 and -(-(2 * pla.INNER_EPS + 1 + 7) // 8) <= 2
    assert 2 * pla.LEAF_EPS + 1 <= 24 and -(-(2 * pla.LEAF_EPS + 1 + 7) // 8) <= 3
    for keys, _, idx in (big, small):
        depth = idx.statistics().depth
        totals = []
        for k in keys[::3].tolist():
            v, cost = idx.lookup(k)
            assert v is not None
            assert len(cost.inner_lines) == depth - 1
            assert all(1 <= p <= 2 for p in cost.pivot_lines)
            assert all(1 <= sc <= p for sc, p in zip(cost.pivot_scan_lines, cost.pivot_lines))
            assert all(4 <= n <= 5 for n in cost.inner_lines)
            assert cost.leaf_meta_lines == 1 and 1 <= cost.key_window_lines <= 3
            assert cost.value_lines == 1 and cost.dma_lines <= 4
            totals.extend(cost.inner_lines)
        assert 4.0 <= sum(totals) / len(totals) <= 5.0
    # a miss reads no value; a key below every key stops at the root's first-keys line
    keys, _, idx = big
    v, cost = idx.lookup(int(keys[0]) - 1)
    assert v is None and cost.inner_lines == (1,) and cost.dma_lines == 0


def test_layout_fits_the_cache_lines():
    assert 8 + pla.SEGMENTS_PER_NODE * pla.KEY_BYTES <= pla.LINE_BYTES  # metadata + first keys
    assert pla.SEGMENTS_PER_NODE * (4 + 1 + 4) <= pla.LINE_BYTES  # 7 models of 9 bytes


def test_statistics_describe_the_tree(big, small):
    for keys, _, idx in (big, small):
        st = idx.statistics()
        with pytest.raises(AttributeError):
            st.leaves = 0
        leaves = idx.leaves()
        assert st.keys == keys.size == sum(len(leaf.keys) for leaf in leaves)
        assert st.leaves == len(leaves) and st.leaf_pla_segments <= st.leaves
        assert all(1 <= len(leaf.keys) <= pla.LEAF_CAPACITY for leaf in leaves)
        assert [leaf.first_key for leaf in leaves] == sorted(leaf.first_key for leaf in leaves)
        nodes, level, depth = 0, [idx.root], 1
        segs = 0
        while isinstance(level[0], pla.InnerNode):
            for node in level:
                assert 1 <= len(node.segments) <= pla.SEGMENTS_PER_NODE
                assert all(1 <= len(p) <= pla.SEGMENT_CAPACITY for p in node.pivots)
                segs += len(node.segments)
            nodes += len(level)
            level = [c for node in level for kids in node.children for c in kids]
            depth += 1
        assert (st.inner_nodes, st.inner_segments, st.depth) == (nodes, segs, depth)
        assert st.raw_bytes == 16 * keys.size
        assert st.dpa_bytes >= 64 * st.leaves + 128 * st.inner_nodes
        assert st.index_bytes >= st.dpa_bytes and 0 < st.overhead < 1


def test_tiny_index_has_a_root_over_one_leaf():
    idx = pla.LearnedIndex.bulk_build([5], [50])
    assert idx.get(5) == 50 and idx.get(4) is None and idx.get(6) is None
    assert idx.statistics().depth == 2 and idx.statistics().leaves == 1
    assert idx.range_scan(0, 3) == [(5, 50)] and idx.range_scan(6, 3) == []


@pytest.mark.parametrize(
    "keys, eps, message",
    [
        ([3, 1, 2], 4, "sorted and unique"),
        ([1, 2, 2, 3], 4, "sorted and unique"),
        ([1, 2, 3], 0, "eps must be an integer"),
        ([1, 2, 3], -2, "eps must be an integer"),
        ([1, 2, 3], 1.5, "eps must be an integer"),
        ([-1, 2, 3], 4, r"in \[0, 2\*\*64\)"),
        ([1, 2, 2**64], 4, r"in \[0, 2\*\*64\)"),
        ([1.0, 2.0], 4, r"in \[0, 2\*\*64\)"),
    ],
)
def test_bad_input_is_one_value_error(keys, eps, message):
    with pytest.raises(ValueError, match=message):
        pla.segment(keys, eps)
    with pytest.raises(ValueError, match=message):
        pla.LearnedIndex.bulk_build(keys, list(range(len(keys))), leaf_eps=eps, inner_eps=eps)


def test_bulk_build_rejects_mismatched_values_and_empty_input():
    with pytest.raises(ValueError, match="match keys in length"):
        pla.LearnedIndex.bulk_build([1, 2, 3], [1, 2])
    with pytest.raises(ValueError, match="at least one key"):
        pla.LearnedIndex.bulk_build([], [])


def test_fuzz_small_arrays_keep_the_bound():
    # tiny key ranges make collinear points and parallel extreme lines common
    rng = np.random.default_rng(5)
    for _ in range(600):
        n = int(rng.integers(1, 60))
        universe = int(rng.integers(n, 4 * n + 2))
        keys = np.sort(rng.choice(universe, n, replace=False)).astype(np.uint64)
        eps = int(rng.integers(1, 4))
        segs = pla.segment(keys, eps, max_size=int(rng.integers(1, 20)))
        assert sum(s.size for s in segs) == n
        assert pla.max_error(segs, keys) <= eps


def _cone_segment_count(keys, eps):
    """A shrinking cone anchored at each segment's first key: feasible, not optimal."""
    count, i, ks = 0, 0, keys.tolist()
    while i < len(ks):
        x0, y0, lo, hi = ks[i], i, None, None
        count += 1
        i += 1
        while i < len(ks):
            dx = ks[i] - x0
            a, b = Fraction(i - eps - y0, dx), Fraction(i + eps - y0, dx)
            nlo, nhi = a if lo is None else max(lo, a), b if hi is None else min(hi, b)
            if nlo > nhi:
                break
            lo, hi = nlo, nhi
            i += 1
    return count


def test_optimal_pla_needs_no_more_segments_than_an_anchored_cone():
    for name in ("uniform", "clustered"):
        keys = DATASETS[name][:4000]
        for eps in (2, 8):
            assert len(pla.segment(keys, eps)) <= _cone_segment_count(keys, eps)


def test_fuzz_small_trees_against_the_oracle():
    rng = np.random.default_rng(6)
    for _ in range(40):
        n = int(rng.integers(1, 3000))
        high = int(rng.choice([4 * n, 2**40, 2**64 - 1]))
        keys = np.unique(rng.integers(0, high, n, dtype=np.uint64))
        values = np.arange(keys.size, dtype=np.uint64)
        leaf_eps, inner_eps = int(rng.integers(1, 9)), int(rng.integers(1, 5))
        idx = pla.LearnedIndex.bulk_build(keys, values, leaf_eps=leaf_eps, inner_eps=inner_eps)
        for k in rng.choice(keys, min(200, keys.size)).tolist():
            assert idx.get(k) == int(np.searchsorted(keys, k))
        starts = rng.integers(0, 2**64, 20, dtype=np.uint64, endpoint=False).tolist()
        for s in starts + rng.choice(keys, 10).tolist():
            c = int(rng.integers(0, 300))
            assert idx.range_scan(s, c) == _oracle_range(keys, values, s, c)


def test_a_list_mixing_small_and_large_64_bit_keys_is_taken_exactly():
    from nodes.systems.dpastore.pla import _as_uint64
    assert _as_uint64([0, 1, 2**63], "keys").tolist() == [0, 1, 2**63]
    with pytest.raises(ValueError, match="must be integers"):
        _as_uint64([0.5, 2], "keys")
