"""DPA-Store's write path (nodes/systems/dpastore/patch.py) against dict models."""

from bisect import bisect_right

import numpy as np
import pytest

from nodes.systems.dpastore import patch as P
from nodes.systems.dpastore import pla


def _value(key, writer):
    return (key * 1_000_003 + writer) % P.MAX_VALUE


# --- insert buffer -----------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(8))
def test_interleaved_writers_never_lose_or_duplicate_and_one_enqueues(seed):
    """Many writers, each reserve -> write -> publish, steps interleaved at random; readers
    look in between. Exactly 16 writes land, each once, one writer is told to enqueue and only
    after every slot is written; a reader never pairs a key with another write's value."""
    rng = np.random.default_rng(seed)
    buf = P.new_buffer()
    n_writers = 40
    keys = rng.integers(0, 12, n_writers).tolist()  # few keys: many writes of the same key
    step = [0] * n_writers  # 0: reserve next, 1: write next, 2: publish next, 3: done
    slot = [None] * n_writers
    landed = {}  # value -> key of every write whose value store happened
    enqueuers = []
    while any(s < 3 for s in step):
        w = int(rng.choice([i for i in range(n_writers) if step[i] < 3]))
        if step[w] == 0:
            slot[w] = P.reserve(buf)
            step[w] = 3 if slot[w] == P.FULL else 1
        elif step[w] == 1:
            P.write_slot(buf, slot[w], keys[w], _value(keys[w], w))
            landed[_value(keys[w], w)] = keys[w]
            step[w] = 2
        else:
            if P.publish(buf):
                enqueuers.append(w)
                # the enqueuer's publish is the last: every reserved slot holds its data
                holders = [i for i in range(n_writers) if slot[i] not in (None, P.FULL)]
                assert len(holders) == P.BUFFER_SLOTS
                assert all(step[i] == 3 for i in holders if i != w)
            step[w] = 3
        for k in range(12):  # a reader between any two steps
            hit = P.lookup_buffer(buf, k)
            assert hit is None or (not hit.deleted and landed[hit.value] == k)
    owners = [w for w in range(n_writers) if slot[w] != P.FULL]
    assert sorted(slot[w] for w in owners) == list(range(P.BUFFER_SLOTS))  # no slot twice
    assert len(enqueuers) == 1
    assert int(buf[P.PUBLISHED]) == P.BUFFER_SLOTS
    # every landed write is in the buffer exactly once, at its own slot
    for w in owners:
        assert int(buf[P._KEYS + slot[w]]) == keys[w]
        assert int(buf[P._VALUES + slot[w]]) == _value(keys[w], w)
    # the newest write per key is the one in the highest slot
    newest = {}
    for w in sorted(owners, key=lambda w: slot[w]):
        newest[keys[w]] = _value(keys[w], w)
    assert P.newest_entries(buf) == newest


def test_reserved_slot_is_invisible_until_its_value_lands():
    buf = P.new_buffer()
    s = P.reserve(buf)
    buf[P._KEYS + s] = 42  # key stored, value not yet: readers must not see it
    assert P.lookup_buffer(buf, 42) is None
    P.write_slot(buf, s, 42, 9)
    assert P.lookup_buffer(buf, 42) == P.BufferHit(False, 9)  # visible before publish


def test_lookup_returns_newest_write_and_honours_deletes():
    rng = np.random.default_rng(3)
    buf = P.new_buffer()
    model = {}
    for i in range(P.BUFFER_SLOTS):
        k = int(rng.integers(0, 5))
        v = None if rng.random() < 0.3 else int(rng.integers(0, P.MAX_VALUE, dtype=np.uint64))
        written, enqueue = P.buffer_write(buf, k, v)
        assert written and enqueue == (i == P.BUFFER_SLOTS - 1)
        model[k] = v
        for q in range(6):
            hit = P.lookup_buffer(buf, q)
            if q not in model:
                assert hit is None
            elif model[q] is None:
                assert hit == P.BufferHit(True, None)
            else:
                assert hit == P.BufferHit(False, model[q])
    assert P.newest_entries(buf) == model
    assert P.buffer_write(buf, 1, 1) == (False, False)  # full: read-only until cleared
    assert P.reserve(buf) == P.FULL
    assert P.newest_entries(buf) == model  # a refused write changes nothing
    P.clear_buffer(buf)
    assert P.newest_entries(buf) == {} and P.lookup_buffer(buf, 1) is None
    assert P.buffer_write(buf, 7, P.MAX_VALUE) == (True, False)
    assert P.lookup_buffer(buf, 7) == P.BufferHit(False, P.MAX_VALUE)


def test_buffer_is_a_few_lines():
    assert P.BUFFER_WORDS * 8 == 5 * pla.LINE_BYTES
    assert P._KEYS % pla.KEYS_PER_LINE == 0 and P._VALUES % pla.KEYS_PER_LINE == 0


# --- host patches ------------------------------------------------------------------------------


def _keys(n, seed, hi=2**40):
    rng = np.random.default_rng(seed)
    k = np.unique(rng.integers(0, hi, n * 2, dtype=np.uint64))[:n]
    return np.sort(k)


def _leaf(keys, values):
    keys = np.asarray(keys, dtype=np.uint64)
    seg = pla.segment(keys, pla.LEAF_EPS)
    assert len(seg) == 1
    return pla.Leaf(seg[0], keys.copy(), np.asarray(values, dtype=np.uint64).copy())


def _full_leaf(seed=5):
    # dense keys with small gaps fit one segment of the full 128 entries
    rng = np.random.default_rng(seed)
    keys = 10**9 + np.cumsum(rng.integers(1, 4, pla.LEAF_CAPACITY)).astype(np.uint64)
    return _leaf(keys, np.arange(keys.size, dtype=np.uint64) * 3)


def test_update_only_patch_overwrites_values_and_keeps_key_set():
    leaf = _full_leaf()
    before = leaf.keys.copy()
    buf = P.new_buffer()
    present = leaf.keys[::9][: P.BUFFER_SLOTS - 2].tolist()
    for i, k in enumerate(present):
        P.buffer_write(buf, k, 1000 + i)
    P.buffer_write(buf, present[0], 5)  # a later update of the same key wins
    P.buffer_write(buf, 1, None)  # a delete of an absent key changes nothing
    r = P.patch_leaf(leaf, buf)
    assert r.update_only and r.leaves == () and r.updated == tuple(sorted(present))
    assert np.array_equal(leaf.keys, before)
    got = dict(zip(leaf.keys.tolist(), leaf.values.tolist()))
    assert got[present[0]] == 5 and all(got[k] == 1000 + i for i, k in enumerate(present) if i)


def _check_new_leaves(r, model, eps=pla.LEAF_EPS):
    assert not r.update_only
    limit = P.split_limit(pla.LEAF_CAPACITY)
    assert limit == 96
    all_keys = np.concatenate([lf.keys for lf in r.leaves]) if r.leaves else np.zeros(0)
    assert all_keys.tolist() == sorted(model)  # tiles the merge, sorted
    assert list(r.first_keys) == [lf.first_key for lf in r.leaves]
    for lf in r.leaves:
        assert len(lf.keys) <= limit  # the retrain headroom
        assert lf.first_key == int(lf.keys[0])
        assert pla.max_error([lf.segment._replace(start=0)], lf.keys) <= eps
    for k, v in model.items():
        assert P.leaf_get(r.leaves, k) == v


@pytest.mark.parametrize("seed", range(6))
def test_insert_delete_patch_equals_dict_model(seed):
    rng = np.random.default_rng(seed)
    leaf = _full_leaf(seed)
    model = dict(zip(leaf.keys.tolist(), leaf.values.tolist()))
    buf = P.new_buffer()
    lo, hi = int(leaf.keys[0]), int(leaf.keys[-1]) + 50
    for _ in range(P.BUFFER_SLOTS):
        r = rng.random()
        if r < 0.4:  # insert inside the leaf's range (the first key stays the smallest)
            k, v = int(rng.integers(lo + 1, hi)), int(rng.integers(0, 10**12))
        elif r < 0.7:  # delete, of a present key mostly
            k, v = int(rng.choice(list(model) or [lo + 1])), None
        else:  # update
            k, v = int(rng.choice(list(model) or [lo + 1])), int(rng.integers(0, 10**12))
        P.buffer_write(buf, k, v)
        if v is None:
            model.pop(k, None)
        else:
            model[k] = v
    deleted = set(leaf.keys.tolist()) - set(model)
    r = P.patch_leaf(leaf, buf)
    _check_new_leaves(r, model)
    assert len(r.leaves) >= 2  # 128 entries +- 16 never fit 96
    for k in deleted:
        assert P.leaf_get(r.leaves, k) is None
    # a LearnedIndex rebuilt from the new leaves' keys agrees
    idx = pla.LearnedIndex.bulk_build(sorted(model), [model[k] for k in sorted(model)])
    assert all(idx.get(k) == v for k, v in model.items())


def test_patch_of_sparse_random_keys_splits_into_many_leaves():
    keys = _keys(300, 11, hi=2**63)
    leaf = _leaf(keys[:1], [0])
    extra = {int(k): i for i, k in enumerate(keys[1:].tolist())}
    model = {int(keys[0]): 0, **extra}
    r = P.patch_leaf(leaf, extra)  # a dict of newest entries: bigger than one buffer
    _check_new_leaves(r, model)
    assert len(r.leaves) >= 4


def test_deleting_every_key_leaves_no_leaf():
    leaf = _leaf([10, 20, 30], [1, 2, 3])
    r = P.patch_leaf(leaf, {10: None, 20: None, 30: None})
    assert not r.update_only and r.leaves == () and r.first_keys == ()


# --- parent rebuild ----------------------------------------------------------------------------


def _dummy(k):
    k = np.array([k], dtype=np.uint64)
    return pla.Leaf(pla.segment(k, 8)[0], k, np.zeros(1, np.uint64))


def _flat(nodes):
    return [c for n in nodes for kids in n.children for c in kids]


def _pivots(nodes):
    return [int(p) for n in nodes for ps in n.pivots for p in ps.tolist()]


def _check_node(n, seg_cap=pla.SEGMENT_CAPACITY, node_cap=pla.SEGMENTS_PER_NODE):
    assert 1 <= len(n.segments) <= node_cap
    for s, ps, kids in zip(n.segments, n.pivots, n.children):
        assert s.size == len(ps) == len(kids) <= seg_cap
        assert [c.first_key for c in kids] == ps.tolist()
        assert pla.max_error([s._replace(start=0)], ps) <= pla.INNER_EPS


def _full_parent(seed):
    """A parent with exactly 7 segments over random pivots."""
    rng = np.random.default_rng(seed)
    pv = np.unique(rng.integers(0, 2**60, 4000, dtype=np.uint64))
    n = 8
    while len(pla.segment(pv[:n], pla.INNER_EPS, max_size=pla.SEGMENT_CAPACITY)) < 7:
        n += 1
    parent = P.new_root([_dummy(int(k)) for k in pv[:n].tolist()])
    assert len(parent.segments) == 7
    return parent


@pytest.mark.parametrize("seed", range(3))
def test_parent_rebuild_splits_when_it_must(seed):
    rng = np.random.default_rng(seed)
    parent = _full_parent(seed)
    old = _flat([parent])
    i = len(old) // 2
    lo, hi = old[i].first_key, old[i + 1].first_key
    new_keys = np.unique(rng.integers(lo, hi, 300, dtype=np.uint64))
    new = [_dummy(int(k)) for k in new_keys.tolist()]
    r = P.rebuild_parent(parent, old[i], new)
    assert r.split and len(r.nodes) >= 2
    for n in r.nodes:
        _check_node(n, seg_cap=96, node_cap=5)  # within the retrain bound
    counts = [len(n.segments) for n in r.nodes]
    assert max(counts) - min(counts) <= 1  # balanced
    assert _flat(r.nodes) == old[:i] + new + old[i + 1 :]  # children in order, none lost
    pv = _pivots(r.nodes)
    assert pv == sorted(pv) and len(set(pv)) == len(pv)
    assert list(r.first_keys) == [n.first_key for n in r.nodes]


def test_parent_rebuild_without_overflow_is_one_node():
    kids = [_dummy(k) for k in range(1000, 1100, 10)]
    parent = P.new_root(kids)
    new = [_dummy(k) for k in (1032, 1035, 1038)]
    r = P.rebuild_parent(parent, kids[3], new)
    assert not r.split and len(r.nodes) == 1
    _check_node(r.nodes[0])
    assert _flat(r.nodes) == kids[:3] + new + kids[4:]
    r = P.rebuild_parent(parent, kids[3], [])  # the child's leaf emptied: drop it
    assert _flat(r.nodes) == kids[:3] + kids[4:]


# --- the whole write path on a LearnedIndex ----------------------------------------------------


def _path(root, key):
    """Root-to-leaf nodes for ``key`` by plain binary search (the host has no parent pointers)."""
    path = [root]
    node = root
    while isinstance(node, pla.InnerNode):
        kids = [c for ks in node.children for c in ks]
        piv = [c.first_key for c in kids]
        node = kids[max(bisect_right(piv, key) - 1, 0)]
        path.append(node)
    return path


def _apply(index, key_of_leaf, entries):
    """Patch the leaf holding ``key_of_leaf``, then rebuild upward while a node splits or its
    first key moves; otherwise swap the one rebuilt node into its parent and stop."""
    path = _path(index.root, key_of_leaf)
    r = P.patch_leaf(path[-1], entries)
    if r.update_only:
        return index, False
    old, new, splits = path[-1], list(r.leaves), False
    for depth in range(len(path) - 2, -1, -1):
        parent = path[depth]
        rb = P.rebuild_parent(parent, old, new)
        splits |= rb.split
        old, new = parent, list(rb.nodes)
        if not rb.split and rb.nodes and rb.first_keys[0] == parent.first_key and depth:
            for ks in path[depth - 1].children:  # pointer swap: the pivot is unchanged
                for j, c in enumerate(ks):
                    if c is parent:
                        ks[j] = new[0]
            return index, splits
    root = new[0] if len(new) == 1 else P.new_root(new)
    return pla.LearnedIndex(root, index.depth, 8, 4, index.statistics()), splits


def _clustered(n_clusters, seed):
    """Clusters of 5..200 keys with gaps of very different scales: the leaves' first keys are
    far from linear, so inner nodes hold several segments and can be pushed over 7."""
    rng = np.random.default_rng(seed)
    parts, base = [], 1
    for _ in range(n_clusters):
        gaps = rng.integers(1, 2 ** int(rng.integers(2, 30)), int(rng.integers(5, 200)))
        parts.append(base + np.cumsum(gaps))
        base = int(parts[-1][-1]) + 2 ** int(rng.integers(20, 40))
    return np.unique(np.concatenate(parts).astype(np.uint64))


def test_write_path_on_a_learned_index_matches_a_dict():
    """Buffers of 16 writes into hot leaves, patched and stitched upward (root splits
    included); the index then answers every key like a dict."""
    rng = np.random.default_rng(7)
    keys = _clustered(80, 7)
    model = dict(zip(keys.tolist(), range(keys.size)))
    index = pla.LearnedIndex.bulk_build(keys, list(model.values()))
    assert index.depth == 2 and len(index.root.segments) == 7  # a full root: it must split
    root = index.root
    lo = int(keys[0])
    hot = [int(k) for k in rng.choice(keys, 3)]
    splits = 0
    for rnd in range(150):
        centre = hot[rnd % 3] if rng.random() < 0.8 else int(rng.choice(list(model)))
        leaf = _path(index.root, centre)[-1]
        leaf_keys = leaf.keys.tolist()
        buf = P.new_buffer()
        for _ in range(P.BUFFER_SLOTS):
            r = rng.random()
            if r < 0.7:  # inserts at random places of the leaf's range: non-linear pivots
                k = int(rng.integers(max(lo + 1, leaf_keys[0]), leaf_keys[-1] + 2))
                if _path(index.root, k)[-1] is not leaf:
                    k = leaf_keys[-1]
                v = int(rng.integers(0, 10**9))
            elif r < 0.85:
                k, v = int(rng.choice(leaf_keys)), None
            else:
                k, v = int(rng.choice(leaf_keys)), int(rng.integers(0, 10**9))
            P.buffer_write(buf, k, v)
            if v is None:
                model.pop(k, None)
            else:
                model[k] = v
        index, s = _apply(index, centre, buf)
        splits += s
        if lo not in model:  # keep the smallest key so every key routes to a leaf
            model[lo] = 0
            index, _ = _apply(index, lo, {lo: 0})
    assert splits >= 1 and isinstance(index.root.children[0][0], pla.InnerNode)  # grew a level
    assert index.root is not root
    for k, v in model.items():
        assert index.get(k) == v
    got = [int(k) for lf in index.leaves() for k in lf.keys.tolist()]
    assert got == sorted(model)
    for lf in index.leaves():
        assert pla.max_error([lf.segment._replace(start=0)], lf.keys) <= pla.LEAF_EPS
    stack = [index.root]
    while stack:  # every inner node, rebuilt or not, keeps its layout and the inner eps
        n = stack.pop()
        _check_node(n)
        stack.extend(c for kids in n.children for c in kids if isinstance(c, pla.InnerNode))


# --- bad input ---------------------------------------------------------------------------------


def test_bad_input_raises_one_clear_value_error():
    buf = P.new_buffer()
    with pytest.raises(ValueError, match="insert buffer is a C-contiguous uint64"):
        P.reserve(np.zeros(3, np.uint64))
    with pytest.raises(ValueError, match="slot must be an integer"):
        P.write_slot(buf, P.BUFFER_SLOTS, 1, 1)
    with pytest.raises(ValueError, match="value must be an integer"):
        P.buffer_write(buf, 1, P.EMPTY)
    with pytest.raises(ValueError, match="key must be an integer"):
        P.buffer_write(buf, -1, 1)
    assert int(buf[P.RESERVED]) == 0  # rejected before any slot was taken
    leaf = _leaf([10, 20, 30], [1, 2, 3])
    with pytest.raises(ValueError, match="retrain_bound must be a number"):
        P.patch_leaf(leaf, {40: 1}, retrain_bound=1.0)
    with pytest.raises(ValueError, match="leaf_eps must be an integer"):
        P.patch_leaf(leaf, {40: 1}, leaf_eps=0)
    with pytest.raises(ValueError, match="at or above the leaf's fence"):
        P.patch_leaf(leaf, {40: 1}, fence=40)
    with pytest.raises(ValueError, match="entries must be"):
        P.patch_leaf(leaf, [(40, 1)])
    kids = [_dummy(k) for k in (10, 20, 30)]
    parent = P.new_root(kids)
    with pytest.raises(ValueError, match="not a child of parent"):
        P.rebuild_parent(parent, _dummy(20), [_dummy(21)])
    with pytest.raises(ValueError, match="do not fit between their siblings"):
        P.rebuild_parent(parent, kids[1], [_dummy(25), _dummy(31)])
