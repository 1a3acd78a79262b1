"""SMART-ART scans (nodes/systems/smart_art/client.py, ``SmartArtClient.scan``; issue 40, item 4): a scan
READs the nodes on the start key's path and then only the subtrees that hold the keys it returns,
in key order, with sibling subtrees in one doorbell; never a whole level of the tree. Asserted in
virtual time on a co-located rig: which nodes a short scan READs (against the nodes whose key range
meets the range it returns, computed from memory), how many leaves, bytes and round trips; and that
results equal a sorted reference on trees of every node type, with deletes, across node boundaries,
for empty ranges and ranges past the last key."""

from __future__ import annotations

import random

from cluster.correctness.conformance import rig
from nodes.systems.lib.art import (
    NODE_4, NODE_8, NODE_64, NODE_128, NODE_256, decode_entry, decode_forward, min_entries, node_bytes, parse_node,
)
from nodes.systems.smart_art import KEY, UNIT, SmartArtSystem
from shm.fabric import gaddr, gaddr_node, gaddr_offset

RECORDS = 4096                       # Dolphin's keys (cluster/experiments/dolphin.py): half a key space


def _k(i: int) -> bytes:
    return i.to_bytes(8, "big")


def _v(i: int, ver: int = 1) -> bytes:
    return (b"%d:%d:" % (i, ver)).ljust(8, b"x")[:16]


class TracingCo:
    """A coroutine seen through a proxy that records every READ (address, bytes) and counts the
    other verbs and the round trips (syncs with verbs outstanding)."""

    def __init__(self, co):
        self.co, self.reads, self.others, self.rounds = co, [], 0, 0

    def __getattr__(self, name):
        return getattr(self.co, name)

    def read(self, addr, length):
        self.reads.append((addr, length))
        return self.co.read(addr, length)

    def write(self, *a):
        self.others += 1
        return self.co.write(*a)

    def cas(self, *a):
        self.others += 1
        return self.co.cas(*a)

    def sync(self):
        if self.co._pending or self.co._outstanding:
            self.rounds += 1
        return self.co.sync()


def tree_nodes(fabric, layout) -> dict:
    """Every live internal node, read from memory (no verbs): address -> (type, lo, hi), the key
    range its prefix covers (its first ``depth`` bytes, then 00.. / ff..)."""
    mns = layout["memory_nodes"]
    out = {}

    def leaf_key(addr):
        mem, off = fabric.memory[gaddr_node(addr)].host, gaddr_offset(addr)
        return bytes(mem[off + KEY:off + KEY + 8])

    def walk(addr, t):
        """(any key below the node, ...) and record the node and its subtree."""
        while True:
            mem, off = fabric.memory[gaddr_node(addr)].host, gaddr_offset(addr)
            img = parse_node(addr, t, mem[off:off + node_bytes(t)])
            fwd = decode_forward(img.header_word)
            if fwd is None:
                break
            addr, t = gaddr(mns[fwd[0]], fwd[1]), fwd[2]
        some = None
        for e in img.children():
            d = decode_entry(e)
            child = gaddr(mns[d.mn_id], d.addr)
            k = leaf_key(child) if d.is_leaf else walk(child, d.node_type)
            some = some or k
        depth = img.header.depth
        if some is not None:
            p = some[:depth]
            out[addr] = (t, p + b"\0" * (8 - depth), p + b"\xff" * (8 - depth))
        return some

    walk(layout["root"], NODE_256)
    out[layout["root"]] = (NODE_256, b"\0" * 8, b"\xff" * 8)
    return out


def traced_scan(r, start: bytes, count: int):
    """(pairs, TracingCo, virtual ns) of one scan."""
    co = TracingCo(r.co)
    t0 = r.env.now
    got = r.run(r.client.wrapped.scan(co, start, count))
    return got, co, r.env.now - t0


def loaded(r, seed: int = 1):
    """Dolphin's key shape, bulk-loaded: RECORDS keys drawn from 2 * RECORDS (half full),
    big-endian. Returns the sorted (key, value) pairs."""
    ids = sorted(random.Random(seed).sample(range(2 * RECORDS), RECORDS))
    pairs = [(_k(i), _v(i)) for i in ids]
    SmartArtSystem.bulk_load(r.fabric, r.layout, pairs)
    return pairs


def test_a_short_scan_reads_only_the_nodes_that_cover_its_range():
    """The tree: root -> one node at depth 6 (the keys' bytes 1..5 are 0, its partial) -> 32
    nodes at depth 7 (keys 256 apart, about 128 each: NODE_128 or NODE_256) -> leaves. A scan of ``count`` keys
    must READ the root, the depth-6 node, the depth-7 nodes whose key range meets
    [start, last key returned] (the *covering* nodes) and at most one node more: after the start
    node's leaves, one round asks for as many depth-7 siblings as their type's fewest entries
    (``min_entries``: 65 for a NODE_128) say are needed, so for ``count`` <= 100 at most two, of which
    the second may turn out unneeded. Leaves: exactly ``count`` (no deletes here), 64 B each.
    Round trips: root, depth-6 node, start's node, then one per further covering node at most.
    The version before issue 40 read every depth-7 node past the start key (a whole level)."""
    with rig(SmartArtSystem, options={"local_lock": False}) as r:
        pairs = loaded(r)
        keys = [k for k, _ in pairs]
        nodes = tree_nodes(r.fabric, r.layout)
        d7 = [a for a, (t, lo, hi) in nodes.items() if lo[:7] == hi[:7]]
        assert len(d7) == 2 * RECORDS // 256 and {nodes[a][0] for a in d7} == {NODE_128, NODE_256}
        assert (min_entries(NODE_128), min_entries(NODE_256)) == (65, 129)
        rnd = random.Random(4)
        starts = [keys[0], keys[127], keys[-30]] + [rnd.choice(keys) for _ in range(20)]
        starts += [_k(rnd.randrange(2 * RECORDS)) for _ in range(10)]           # mostly absent keys
        worst_extra = 0
        for start in starts:
            for count in (10, 50, 100):
                got, co, _ = traced_scan(r, start, count)
                want = [p for p in pairs if p[0] >= start][:count]
                assert got == want
                last = got[-1][0] if got else start
                covering = {a for a, (t, lo, hi) in nodes.items() if lo <= last and hi >= start}
                node_reads = [(a, n) for a, n in co.reads if a in nodes]
                leaf_reads = [(a, n) for a, n in co.reads if a not in nodes]
                read_nodes = {a for a, _ in node_reads}
                assert len(read_nodes) == len(node_reads), "a node READ twice"
                assert covering <= read_nodes, "a covering node was not read"
                extra = read_nodes - covering
                assert len(extra) <= 1, f"scan({start.hex()}, {count}) read {len(extra)} nodes past its range"
                worst_extra = max(worst_extra, len(extra))
                # not a level: 100 keys span at most two depth-7 nodes of ~128, plus the overshoot
                assert len(read_nodes & set(d7)) <= 3
                assert len(leaf_reads) == len(got) and all(n == UNIT for _, n in leaf_reads)
                assert sum(n for _, n in co.reads) == sum(node_bytes(nodes[a][0]) for a in read_nodes) + UNIT * len(got)
                assert co.others == 0
                assert co.rounds <= 3 + len(covering & set(d7))
        assert worst_extra == 1                     # the overshoot the bound allows does happen


def test_a_scan_of_ten_keys_costs_the_same_whatever_the_tree_size():
    """A scan of 10 keys from the middle of a node: root, depth-6 node, the depth-7 node, its
    10 leaves in one doorbell: 13 READs in 4 round trips, on a tree of RECORDS keys and on one
    four times as large (where the old version read four times as many depth-7 nodes)."""
    for scale in (1, 4):
        with rig(SmartArtSystem, options={"local_lock": False}, memory_bytes=128 << 20) as r:
            ids = sorted(random.Random(2).sample(range(2 * RECORDS * scale), RECORDS * scale))
            pairs = [(_k(i), _v(i)) for i in ids]
            SmartArtSystem.bulk_load(r.fabric, r.layout, pairs)
            start = _k(RECORDS * scale + 101)                       # mid-tree, mid-node
            got, co, ns = traced_scan(r, start, 10)
            assert got == [p for p in pairs if p[0] >= start][:10]
            nodes = tree_nodes(r.fabric, r.layout)
            read_nodes = [a for a, _ in co.reads if a in nodes]
            assert (len(co.reads), len(read_nodes), co.rounds) == (13, 3, 4)
            assert sum(n for _, n in co.reads) == sum(node_bytes(nodes[a][0]) for a in read_nodes) + 10 * UNIT


def test_scans_equal_a_sorted_reference_across_node_boundaries_deletes_and_empty_ranges():
    """Inserted keys under nodes of five types (dense runs, sparse random keys: prefix splits), some
    deleted (whole nodes' worth too: a node type's fewest entries then overestimates its keys and
    the scan needs another round), some updated out of place (a chain); scans from every node
    boundary, from absent keys, below the first key, past the last, with counts 0..all."""
    rnd = random.Random(11)
    ids = list(range(0, 1500)) + [rnd.getrandbits(64) for _ in range(300)] + [(7 << 56) + i for i in range(40)]
    ids += [(9 << 56) + (i << 8) for i in range(100)]                  # a NODE_128 at depth 6
    with rig(SmartArtSystem) as r:
        model = {}
        for i in ids:
            if r.op("insert", _k(i), _v(i)):
                model[_k(i)] = _v(i)
        for i in list(range(300, 600)) + list(range(0, 1500, 7)):        # a few whole depth-7 nodes
            if _k(i) in model:
                assert r.op("delete", _k(i)) is True
                del model[_k(i)]
        for i in range(1, 1500, 13):
            if _k(i) in model:
                v = (b"long %d " % i) * 20                               # does not fit: out of place
                assert r.op("update", _k(i), v) is True
                model[_k(i)] = v
        nodes = tree_nodes(r.fabric, r.layout)
        assert {t for t, _, _ in nodes.values()} >= {NODE_4, NODE_8, NODE_64, NODE_128, NODE_256}
        keys = sorted(model)
        bounds = sorted({lo for _, lo, _ in nodes.values()} | {hi for _, _, hi in nodes.values()})
        starts = ([keys[0], keys[-1], b"\0" * 8, b"\xff" * 8, _k(299), _k(300), _k(600), _k(1499), _k(1500)]
                  + bounds + [rnd.choice(keys) for _ in range(15)] + [_k(rnd.getrandbits(64)) for _ in range(10)])
        for start in starts:
            for count in (0, 1, 2, 7, 64, 65, 130, len(keys) + 1):
                want = [(k, model[k]) for k in keys if k >= start][:count]
                assert r.op("scan", start, count) == want, (start.hex(), count)
        assert r.op("scan", b"\xff" * 8, 5) == [] and r.op("scan", keys[-1], 3) == [(keys[-1], model[keys[-1]])]
        assert r.op("scan", _k(300), 0) == []


def test_a_scan_past_deleted_keys_reads_on_until_it_has_count_live_keys():
    """Every key of a depth-7 node deleted: the scan reads the node (counted as 65 keys by its
    type), finds no live key and asks for the next subtree in another round."""
    with rig(SmartArtSystem, options={"local_lock": False}) as r:
        for i in range(0, 768):                    # three depth-7 nodes of 256 (NODE_256)
            r.op("insert", _k(i), _v(i))
        for i in range(256, 512):
            r.op("delete", _k(i))
        got, co, _ = traced_scan(r, _k(250), 20)
        assert got == [(_k(i), _v(i)) for i in list(range(250, 256)) + list(range(512, 526))]
        nodes = tree_nodes(r.fabric, r.layout)
        read_nodes = [a for a, _ in co.reads if a in nodes]
        # root, the depth-6 node, the three depth-7 nodes (each once)
        assert len(read_nodes) == len(set(read_nodes)) == 5
        # 6 leaves of the first node, 256 dead ones of the second, 14 of the third
        assert len(co.reads) - len(read_nodes) == 6 + 256 + 14
