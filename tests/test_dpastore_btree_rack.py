"""dpa-store with ``index = "btree"`` (nodes/systems/dpastore/inner.py): the B+-tree baseline of
Fig. 12 on the same DPA framework. The conformance suite on it; a bulk load of 20k keys then GETs
on both indexes; the B+-tree's nodes are 2 KB, its depth is btree.expected_depth, and the lines a
traverser reads per inner node (and per leaf search) are btree.py's cost model on the same keys."""

from __future__ import annotations

import random
import struct

import numpy as np
import pytest

import nodes.actors as actors
from cluster.correctness.conformance import CHECKS, rig
from nodes.systems import get_system
from nodes.systems.dpastore import btree
from nodes.systems.dpastore.host import HostTree
from nodes.systems.dpastore.inner import BT_NODE_BYTES, BTREE, LEARNED, format_of
from nodes.systems.dpastore.system import DpaStoreSystem
from nodes.systems.dpastore.traverser import Traverser

BTREE_OPTS = {"index": "btree"}
N_KEYS = 20_000


@pytest.mark.parametrize("name", list(CHECKS))
def test_conformance_on_the_btree(name):
    CHECKS[name](get_system("dpa-store"), BTREE_OPTS)


def test_the_option_picks_the_format():
    assert format_of({}) is LEARNED and format_of({"index": "learned"}) is LEARNED
    assert format_of({"index": "btree"}) is BTREE
    with pytest.raises(ValueError):
        format_of({"index": "hash"})
    opt = {o.name: o for o in DpaStoreSystem.options}["index"]
    assert opt.default == "learned" and set(opt.choices) == {"learned", "btree"}


def test_btree_pointer_carries_count_and_kind():
    p = BTREE.pointer(0x12340800, 128)
    assert BTREE.address(p) == 0x12340800 and BTREE.count(p) == 128 and BTREE.is_inner(None, 0, p)
    assert not BTREE.is_inner(None, 0, 0x12340800)              # a leaf's pointer is its offset
    with pytest.raises(ValueError):
        BTREE.pointer(0x800, 129)


def test_btree_build_cuts():
    piv = list(range(300))
    kids = list(range(1000, 1300))
    bulk = BTREE.build(piv, kids, bulk=True)
    assert [(s, e) for s, e, _ in bulk] == [(0, 128), (128, 256), (256, 300)]
    assert all(len(d) == BT_NODE_BYTES for _, _, d in bulk)
    assert [(s, e) for s, e, _ in BTREE.build(piv[:128], kids[:128], bulk=False)] == [(0, 128)]
    split = BTREE.build(piv[:129], kids[:129], bulk=False)       # overflow: balanced, within 96
    assert [(s, e) for s, e, _ in split] == [(0, 64), (64, 129)]
    assert BTREE.leaf_pieces(list(range(300)), 128, bulk=True) == [(0, 128), (128, 128), (256, 44)]
    assert BTREE.leaf_pieces(list(range(97)), 96, bulk=False) == [(0, 97)]           # fits a leaf: one
    assert BTREE.leaf_pieces(list(range(129)), 96, bulk=False) == [(0, 64), (64, 65)]


@pytest.fixture
def directory(monkeypatch):
    """The rack-wide directory of the rig's actor contexts (``dpastore.dpa``: traversers, stitchers)."""
    d: dict = {}
    real = actors.actor_contexts

    def with_directory(*a, **kw):
        kw["directory"] = d
        return real(*a, **kw)

    monkeypatch.setattr(actors, "actor_contexts", with_directory)
    return d


def _keys(n: int, seed: int = 3) -> list:
    rng = random.Random(seed)
    return sorted(rng.sample(range(1, 1 << 62), n))


def _value(k: int) -> bytes:
    return struct.pack("<Q", (k * 7 + 1) % (1 << 64))


def _walk_stats(travs) -> tuple:
    s = [t.statistics() for t in travs]
    return (sum(x.inner_lines for x in s), sum(x.inner_nodes for x in s),
            sum(x.leaf_key_lines for x in s), sum(x.leaf_searches for x in s))


@pytest.mark.parametrize("index", ["learned", "btree"])
def test_bulk_load_then_get(index, directory):
    keys = _keys(N_KEYS)
    opts = {"index": index, "value_max": 8, "hot_cache": False}
    with rig(get_system("dpa-store"), options=opts, capacity=2 * N_KEYS) as r:
        DpaStoreSystem.bulk_load(r.fabric, r.layout, [(struct.pack(">Q", k), _value(k)) for k in keys])
        travs, _ = directory["dpastore.dpa"]
        assert all(isinstance(t, Traverser) for t in travs)
        before = _walk_stats(travs)
        rng = random.Random(9)
        sample = rng.sample(keys, 150)
        for k in sample:
            assert r.op("get", struct.pack(">Q", k)) == _value(k)
        for k in rng.sample(keys, 20):                           # absent neighbours
            if k + 1 not in keys:
                assert r.op("get", struct.pack(">Q", k + 1)) is None
        got = r.op("scan", struct.pack(">Q", sample[0]), 40)
        i = keys.index(sample[0])
        assert [(bytes(a), bytes(b)) for a, b in got] == [(struct.pack(">Q", k), _value(k)) for k in keys[i:i + 40]]
        lines, nodes, key_lines, searches = (a - b for a, b in zip(_walk_stats(travs), before))
        assert nodes >= 150 and searches >= 150

        tree = HostTree(r.fabric, r.layout)
        path, leaf = tree.descend(sample[0])
        if index == "btree":
            assert len(path) + 1 == btree.expected_depth(N_KEYS)
            model = btree.BPlusTree.bulk_build(np.asarray(keys, np.uint64), np.asarray(keys, np.uint64))
            assert model.depth == len(path) + 1
            # every inner node is 2 KB and fully packed but the last of its level
            level = [tree.root]
            while tree.is_inner(level[0]):
                sizes = [tree.inner(p)[0] for p in level]
                counts = [BTREE.count(p) for p in level]
                assert set(sizes) == {BT_NODE_BYTES}
                assert all(c == btree.NODE_ENTRIES for c in counts[:-1])
                level = [c for p in level for c in tree.inner(p)[2]]
            assert len(level) == model.statistics().leaves
            # lines per inner node and per leaf search: the cost model's, on the same GETs
            costs = [model.lookup(k)[1] for k in sample]
            want_inner = sum(sum(c.inner_lines) for c in costs) / sum(len(c.inner_lines) for c in costs)
            want_keys = sum(c.key_lines for c in costs) / len(costs)
            # (the walks here include the absent keys' GETs and the scan's: close, not exact)
            assert lines / nodes == pytest.approx(want_inner, abs=0.15)
            assert key_lines / searches == pytest.approx(want_keys, abs=0.3)
        else:
            assert tree.fmt is LEARNED and len(path) >= 1


def test_btree_cost_model_exact_on_gets(directory):
    """Only GETs of present keys after a bulk load: the traverser's lines are exactly probe_lines'."""
    keys = _keys(N_KEYS, seed=11)
    with rig(get_system("dpa-store"), options={"index": "btree", "value_max": 8, "hot_cache": False},
             capacity=2 * N_KEYS) as r:
        DpaStoreSystem.bulk_load(r.fabric, r.layout, [(struct.pack(">Q", k), _value(k)) for k in keys])
        travs, _ = directory["dpastore.dpa"]
        sample = random.Random(4).sample(keys, 100)
        for k in sample:
            assert r.op("get", struct.pack(">Q", k)) == _value(k)
        lines, nodes, key_lines, searches = _walk_stats(travs)
        model = btree.BPlusTree.bulk_build(np.asarray(keys, np.uint64), np.asarray(keys, np.uint64))
        costs = [model.lookup(k)[1] for k in sample]
        assert nodes == sum(len(c.inner_lines) for c in costs)
        assert lines == sum(sum(c.inner_lines) for c in costs)
        assert searches == len(sample) and key_lines == sum(c.key_lines for c in costs)


def test_btree_splits_under_full_nodes(directory):
    """Inserts into three leaves of a bulk-loaded (fully packed) B+-tree: each full buffer's patch
    splits its leaf; the first one's full parent (128) splits into balanced nodes (64, 65) and the
    root is rebuilt; the later ones rebuild their parent as one node. Every key reads."""
    keys = _keys(N_KEYS, seed=5)
    with rig(get_system("dpa-store"), options={"index": "btree", "value_max": 8, "hot_cache": False},
             capacity=2 * N_KEYS) as r:
        DpaStoreSystem.bulk_load(r.fabric, r.layout, [(struct.pack(">Q", k), _value(k)) for k in keys])
        tree = HostTree(r.fabric, r.layout)
        assert [BTREE.count(p) for p in tree.inner(tree.root)[2]] == [128, 29]
        new = []
        for leaf_no in (3, 70, 140):                              # leaves under both level-2 nodes
            lo, hi = keys[leaf_no * 128 + 60], keys[leaf_no * 128 + 61]
            assert hi - lo > 40
            new += [lo + 1 + 2 * j for j in range(16)]            # one full insert buffer each
        for k in new:
            assert r.op("insert", struct.pack(">Q", k), _value(k)) is True
        host = directory["dpastore.host"].statistics()
        assert host.merges == 3 and host.root_changes == 1
        assert [BTREE.count(p) for p in tree.inner(tree.root)[2]] == [64, 66, 30]
        everything = sorted(keys + new)
        rng = random.Random(1)
        for k in new + rng.sample(keys, 60):
            assert r.op("get", struct.pack(">Q", k)) == _value(k)
        i = everything.index(new[16]) - 30
        got = r.op("scan", struct.pack(">Q", everything[i]), 80)
        assert [bytes(a) for a, _ in got] == [struct.pack(">Q", k) for k in everything[i:i + 80]]
        assert len(tree.descend(new[0])[0]) + 1 == btree.expected_depth(N_KEYS)
