"""DPA-Store's B+-tree baseline (nodes/systems/dpastore/btree.py) against a numpy oracle and
against the learned index (pla.py) on the same keys."""

import math

import numpy as np
import pytest

from nodes.systems.dpastore import btree, pla


def _uniform(n, seed=1):
    rng = np.random.default_rng(seed)
    return np.unique(rng.integers(0, 2**64, n, dtype=np.uint64, endpoint=False))


@pytest.fixture(scope="module")
def big():
    keys = _uniform(50_000, seed=7)
    values = np.random.default_rng(8).integers(0, 2**64, keys.size, dtype=np.uint64, endpoint=False)
    return keys, values, btree.BPlusTree.bulk_build(keys, values)


@pytest.fixture(scope="module", params=["dense", "partial"])
def small(request):
    # dense: a round 128 * 128 keys (every node full); partial: last leaf and nodes part full
    n = 128 * 128 if request.param == "dense" else 128 * 128 + 129 * 3 + 5
    keys = np.arange(10**12, 10**12 + 3 * n, 3, dtype=np.uint64)
    values = keys ^ np.uint64(0x5555_5555_5555_5555)
    return keys, values, btree.BPlusTree.bulk_build(keys, values)


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


def _oracle_get(keys, values, k):
    i = int(np.searchsorted(keys, np.uint64(k), side="left"))
    return int(values[i]) if i < keys.size and int(keys[i]) == k else None


def _check_lookups(keys, values, tree):
    for k, v in zip(keys.tolist(), values.tolist()):
        assert tree.get(k) == v
    rng = np.random.default_rng(3)
    for k in _absent_probes(keys, rng).tolist():
        assert _oracle_get(keys, values, k) is None
        assert tree.get(k) is None


def test_every_key_found_and_absent_keys_miss_50k(big):
    _check_lookups(*big)


def test_lookups_on_full_and_partly_full_trees(small):
    _check_lookups(*small)


def _oracle_range(keys, values, start, count):
    i = int(np.searchsorted(keys, np.uint64(start), side="left"))
    return list(zip(keys[i : i + count].tolist(), values[i : i + count].tolist()))


def test_range_scans_match_the_oracle(big, small):
    rng = np.random.default_rng(4)
    for keys, values, tree in (big, small):
        starts = np.concatenate(
            [rng.choice(keys, 60), rng.integers(0, 2**64, 60, dtype=np.uint64, endpoint=False)]
        ).tolist() + [0, int(keys[0]), int(keys[-1]), 2**64 - 1]
        for s in starts:
            for count in (0, 1, 5, 130, 700):
                assert tree.range_scan(s, count) == _oracle_range(keys, values, s, count)
        everything = tree.range_scan(0, keys.size + 10)
        assert everything == _oracle_range(keys, values, 0, keys.size + 10)
        assert tree.lower_bound(int(keys[-1])) == (int(keys[-1]), int(values[-1]))
        assert tree.lower_bound(int(keys[0]) - 1) == (int(keys[0]), int(values[0]))
        assert tree.lower_bound(int(keys[-1]) + 1) is None


@pytest.mark.parametrize("n", [1, 2, 127, 128, 129, 128 * 128, 128 * 128 + 1, 50_000])
def test_depth_follows_the_fanout(n):
    keys = np.arange(n, dtype=np.uint64) * np.uint64(7)
    tree = btree.BPlusTree.bulk_build(keys, keys)
    st = tree.statistics()
    # ceil(log_128(n / 128)) + 1 for n > 128; the root is always inner, so 2 below
    formula = 2 if n <= 128 else math.ceil(math.log(n / 128, 128) - 1e-12) + 1
    assert st.depth == tree.depth == formula == btree.expected_depth(n)
    assert st.leaves == -(-n // 128) and st.nodes_per_level[0] == 1
    assert len(st.nodes_per_level) == st.depth and st.nodes_per_level[-1] == st.leaves
    assert tree.get(int(keys[-1])) == int(keys[-1]) and tree.get(int(keys[-1]) + 1) is None


def test_bulk_load_packs_every_node_but_the_last_of_a_level(big, small):
    for keys, _, tree in (big, small):
        leaves = tree.leaves()
        assert [len(leaf.keys) for leaf in leaves[:-1]] == [128] * (len(leaves) - 1)
        assert 1 <= len(leaves[-1].keys) <= 128
        assert np.array_equal(np.concatenate([leaf.keys for leaf in leaves]), keys)
        level = [tree.root]
        while isinstance(level[0], btree.BInnerNode):
            assert all(len(node.keys) == 128 for node in level[:-1])
            for node in level:
                assert node.keys == [c.first_key for c in node.children]
            level = [c for node in level for c in node.children]


def test_binary_search_line_bound_for_every_node_size_and_outcome():
    # keys 1, 3, 5, ...: every gap and both ends are an outcome of the search
    for n in range(1, 129):
        ks = [2 * i + 1 for i in range(n)]
        node_lines = -(-n // 8)
        worst = 0
        for key in range(2 * n + 2):
            n_le, probes, lines = btree.probe_lines(ks, key)
            assert n_le == min((key + 1) // 2, n)
            assert math.floor(math.log2(n + 1)) <= probes <= math.ceil(math.log2(n + 1))
            worst = max(worst, lines)
        assert worst <= math.ceil(math.log2(node_lines)) + 1
        if n == 128:
            assert worst == btree.MAX_INNER_KEY_LINES == math.log2(16) + 1


def test_cache_lines_per_inner_node_and_leaf(big, small):
    assert btree.INNER_NODE_BYTES == 2048 and btree.NODE_KEY_LINES == 16
    for keys, _, tree in (big, small):
        depth = tree.statistics().depth
        totals = []
        for k in keys[::3].tolist():
            v, cost = tree.lookup(k)
            assert v is not None
            assert len(cost.inner_lines) == len(cost.pivot_lines) == depth - 1
            assert all(1 <= p <= btree.MAX_INNER_KEY_LINES for p in cost.pivot_lines)
            assert all(n == p + 1 for n, p in zip(cost.inner_lines, cost.pivot_lines))
            assert all(1 <= pr <= 8 for pr in cost.inner_probes)
            assert cost.leaf_meta_lines == 1 and 1 <= cost.key_lines <= 5
            assert 1 <= cost.leaf_probes <= 8
            assert cost.value_lines == 1 and cost.dmas == cost.dma_lines == cost.key_lines + 1
            assert cost.dpa_lines == sum(cost.inner_lines) + 1
            totals.append(cost.pivot_lines[-1])
        # ~log2(16) key lines per full node: the level above the leaves is full but its last node
        assert 3.9 <= sum(totals) / len(totals) <= 5.0
    # a miss reads no value; a key below every key stops in the root's key lines
    keys, _, tree = big
    v, cost = tree.lookup(int(keys[0]) - 1)
    assert v is None and cost.inner_lines == cost.pivot_lines and len(cost.inner_lines) == 1
    assert cost.leaf_meta_lines == 0 and cost.dma_lines == 0
    v, cost = tree.lookup(int(keys[5]) + 1)
    assert v is None and cost.value_lines == 0 and cost.key_lines >= 1


def test_statistics_describe_the_tree(big, small):
    for keys, _, tree in (big, small):
        st = tree.statistics()
        with pytest.raises(AttributeError):
            st.leaves = 0
        assert st.keys == keys.size == sum(len(leaf.keys) for leaf in tree.leaves())
        assert st.inner_nodes == sum(st.nodes_per_level[:-1])
        assert st.dpa_bytes == 2048 * st.inner_nodes + 64 * st.leaves
        assert st.raw_bytes == 16 * keys.size
        assert st.index_bytes >= st.dpa_bytes and 0 < st.overhead < 0.1
    st = big[2].statistics()
    assert st.nodes_per_level == (1, 4, 391) and st.depth == 3


def test_learned_index_and_btree_agree_on_the_same_keys(big):
    keys, values, tree = big
    learned = pla.LearnedIndex.bulk_build(keys, values)
    rng = np.random.default_rng(9)
    probes = np.concatenate([rng.choice(keys, 1000), _absent_probes(keys, rng)[:1000]])
    rng.shuffle(probes)
    assert probes.size == 2000
    for k in probes.tolist():
        assert tree.get(k) == learned.get(k) == _oracle_get(keys, values, k)
        assert tree.lower_bound(k) == learned.lower_bound(k)
    for s in probes[:100].tolist():
        assert tree.range_scan(s, 200) == learned.range_scan(s, 200)


def test_tiny_tree_has_a_root_over_one_leaf():
    tree = btree.BPlusTree.bulk_build([5], [50])
    assert tree.get(5) == 50 and tree.get(4) is None and tree.get(6) is None
    assert tree.statistics().depth == 2 and tree.statistics().leaves == 1
    assert tree.range_scan(0, 3) == [(5, 50)] and tree.range_scan(6, 3) == []
    assert tree.get(0) is None and tree.get(2**64 - 1) is None


def test_extreme_keys():
    # as an array: numpy turns a list mixing small ints and ints >= 2**63 into float64
    keys = [0, 1, 2**63, 2**64 - 2, 2**64 - 1]
    tree = btree.BPlusTree.bulk_build(np.array(keys, dtype=np.uint64), [10, 11, 12, 13, 14])
    assert [tree.get(k) for k in keys] == [10, 11, 12, 13, 14]
    assert tree.range_scan(0, 10) == list(zip(keys, [10, 11, 12, 13, 14]))
    assert tree.lower_bound(2**63 + 1) == (2**64 - 2, 13)


@pytest.mark.parametrize(
    "keys, message",
    [
        ([3, 1, 2], "sorted and unique"),
        ([1, 2, 2, 3], "sorted and unique"),
        ([-1, 2, 3], r"in \[0, 2\*\*64\)"),
        ([1, 2, 2**64], r"in \[0, 2\*\*64\)"),
        ([1.0, 2.0], r"in \[0, 2\*\*64\)"),
        ([[1, 2]], "1-d sequence"),
    ],
)
def test_bad_input_is_one_value_error(keys, message):
    with pytest.raises(ValueError, match=message):
        btree.BPlusTree.bulk_build(keys, list(range(len(keys))))


def test_bad_values_counts_and_start_keys():
    with pytest.raises(ValueError, match="match keys in length"):
        btree.BPlusTree.bulk_build([1, 2, 3], [1, 2])
    with pytest.raises(ValueError, match="at least one key"):
        btree.BPlusTree.bulk_build([], [])
    with pytest.raises(ValueError, match=r"values must be integers in \[0, 2\*\*64\)"):
        btree.BPlusTree.bulk_build([1, 2], [-1, 2])
    tree = btree.BPlusTree.bulk_build([1, 2], [1, 2])
    with pytest.raises(ValueError, match="count must be >= 0"):
        tree.range_scan(1, -1)
    with pytest.raises(ValueError, match="start_key must be in"):
        tree.range_scan(2**64, 1)
    with pytest.raises(ValueError, match="start_key must be in"):
        tree.range_scan(-1, 1)


def test_fuzz_small_trees_against_the_oracle():
    rng = np.random.default_rng(6)
    for _ in range(40):
        n = int(rng.integers(1, 3000))
        high = int(rng.choice([4 * n, 2**40, 2**64 - 1]))
        keys = np.unique(rng.integers(0, high, n, dtype=np.uint64))
        values = np.arange(keys.size, dtype=np.uint64)
        tree = btree.BPlusTree.bulk_build(keys, values)
        for k in rng.choice(keys, min(200, keys.size)).tolist():
            assert tree.get(k) == int(np.searchsorted(keys, k))
        starts = rng.integers(0, high, 20, dtype=np.uint64).tolist()
        for s in starts:
            assert tree.range_scan(s, 150) == _oracle_range(keys, values, s, 150)
            assert tree.get(s) == _oracle_get(keys, values, s)
