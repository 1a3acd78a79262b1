"""The ART library on remote memory (nodes/systems/lib/art.py): header, entry and forwarding
codecs; a tree of a few hundred keys built through the verbs (leaf splits, prefix splits, node
type upgrades) and found again from the root and from a radix cache; concurrent inserts into one
node (CAS retries, upgrades under contention); stale reverse pointers detected and repaired."""

from __future__ import annotations

import contextlib
import random

import pytest

from shm.sim.env import Environment
from nodes.systems.lib.alloc import ChunkAllocator
from nodes.systems.lib.art import (
    ADDR_MASK, NODE_4, NODE_8, NODE_16, NODE_128, NODE_256, ArtTree, Header, build_node, create_root, decode_entry,
    decode_forward, decode_header, dump_tree, encode_entry, encode_forward, encode_header, encode_leaf_entry,
    first_difference, freeze_entry, header_type, is_frozen, node_bytes, node_units, prefix_mismatch, slots_of, type_for,
)
from nodes.systems.lib.radix_cache import RadixCache
from shm.coro import NodeRdma
from shm.fabric import Fabric, NodeSpec, gaddr, gaddr_node, gaddr_offset
from shm.profile import load_profile
from shm.verbs import VerbsHost

MNS = [2, 3]                      # fabric indices of mn0, mn1 (after cn0, cn1)


# -- codecs ---------------------------------------------------------------------------------------

def test_node_types_and_sizes():
    assert [slots_of(t) for t in range(NODE_4, NODE_256 + 1)] == [4, 8, 16, 32, 64, 128, 256]
    assert node_bytes(NODE_4) == 48 and node_bytes(NODE_256) == 16 + 2048
    assert node_units(NODE_4) == 1 and node_units(NODE_8) == 2 and node_units(NODE_256) == 33
    assert type_for(1) == NODE_4 and type_for(5) == NODE_8 and type_for(256) == NODE_256
    for bad in (0, 8):
        with pytest.raises(ValueError):
            slots_of(bad)


@pytest.mark.parametrize("depth,t,partial", [(0, NODE_256, b""), (255, 7, b"\xff" * 6), (7, NODE_4, b"\x00"),
                                             (3, NODE_16, b"\x01\x02"), (6, NODE_8, b"\x00\xff\x00\xff\x00")])
def test_header_round_trip(depth, t, partial):
    w = encode_header(depth, t, partial)
    assert 0 <= w < 1 << 64
    assert decode_header(w) == Header(depth, t, partial)
    assert header_type(w) == t
    assert w >> 56 == depth and (w >> 48) & 0x1F == len(partial)       # depth:8 | type:3 | len:5 | partial[6]
    assert Header(depth, t, partial).encode() == w


def test_header_rejects_what_does_not_fit():
    for args in [(256, 1, b""), (0, 8, b""), (0, 1, b"1234567")]:
        with pytest.raises(ValueError):
            encode_header(*args)


@pytest.mark.parametrize("partial,mn,t,addr", [(0, 0, NODE_4, 0), (255, 15, NODE_256, ADDR_MASK), (0x80, 7, 3, 1 << 40)])
def test_internal_entry_round_trip(partial, mn, t, addr):
    w = encode_entry(partial, mn, t, addr)
    assert w != 0 and 0 <= w < 1 << 64
    d = decode_entry(w)
    assert (d.partial, d.mn_id, d.node_type, d.is_leaf, d.addr) == (partial, mn, t, False, addr)
    assert w >> 56 == partial and (w >> 52) & 0xF == mn and (w >> 49) & 7 == t and not (w >> 48) & 1


@pytest.mark.parametrize("partial,mn,addr", [(0, 0, 0), (255, 127, ADDR_MASK), (7, 64, 4096)])
def test_leaf_entry_round_trip(partial, mn, addr):
    w = encode_leaf_entry(partial, mn, addr)
    assert w != 0
    d = decode_entry(w)
    assert (d.partial, d.mn_id, d.node_type, d.is_leaf, d.addr) == (partial, mn, 0, True, addr)
    assert (w >> 49) & 0x7F == mn and (w >> 48) & 1


def test_entries_reject_what_does_not_fit():
    for args in [(256, 0, 1, 0), (0, 16, 1, 0), (0, 0, 0, 0), (0, 0, 8, 0), (0, 0, 1, 1 << 48)]:
        with pytest.raises(ValueError):
            encode_entry(*args)
    for args in [(0, 128, 0), (-1, 0, 0), (0, 0, 1 << 48)]:
        with pytest.raises(ValueError):
            encode_leaf_entry(*args)


def test_forwarding_header_is_never_live_nor_zero():
    for mn, off, t in [(0, 0, NODE_8), (15, ADDR_MASK, NODE_256), (3, 4096, NODE_16)]:
        w = encode_forward(mn, off, t)
        assert w != 0 and header_type(w) == 0
        assert decode_forward(w) == (mn, off, t)
    assert decode_forward(0) is None
    assert decode_forward(encode_header(3, NODE_4, b"ab")) is None


def test_frozen_entries_are_neither_live_nor_empty():
    for w in (encode_entry(0, 0, NODE_4, 0), encode_entry(255, 15, NODE_256, ADDR_MASK), encode_leaf_entry(0, 0, 0),
              encode_leaf_entry(7, 127, ADDR_MASK)):
        f = freeze_entry(w)
        assert not is_frozen(w) and is_frozen(f) and f != 0
        assert f >> 56 == w >> 56                          # the key byte stays: find() still matches
        assert not decode_entry(f).is_leaf and decode_entry(f).node_type == 0
    assert not is_frozen(0)


def test_prefix_helpers():
    h = Header(5, NODE_4, b"\x03\x04\x05")             # bytes 2..4
    assert prefix_mismatch(h, bytes([9, 9, 3, 4, 5, 0, 0, 0])) == -1
    assert prefix_mismatch(h, bytes([9, 9, 3, 7, 5, 0, 0, 0])) == 3
    assert prefix_mismatch(Header(0, NODE_256, b""), b"\xff" * 8) == -1
    assert first_difference(b"abcdefgh", b"abcdxfgh") == 4
    assert first_difference(b"abcdefgh", b"abcdefgh", 2) == 8


def test_node_image_find_and_pack():
    img = build_node(gaddr(2, 4096), NODE_4, 3, b"\x01", 77, [encode_leaf_entry(5, 0, 64), encode_leaf_entry(9, 0, 128)])
    assert img.size == 48 and len(img.pack()) == 48
    assert img.find(9) == (1, encode_leaf_entry(9, 0, 128))
    assert img.find(4) == (2, 0)                       # the slot an insert would CAS
    assert img.entry_addr(2) == gaddr(2, 4096 + 16 + 16)
    full = build_node(0, NODE_4, 3, b"", 0, [encode_leaf_entry(i, 0, 64) for i in range(4)])
    assert full.find(200) == (-1, 0)
    big = build_node(0, NODE_256, 0, b"", 0, [encode_leaf_entry(200, 0, 64)])
    assert big.find(200)[0] == 200 and big.find(3) == (3, 0)


# -- a tree on the fabric -------------------------------------------------------------------------

@contextlib.contextmanager
def art_rig(prefix, threads=1, coroutines=1, seed=1, profile="cx6-200g"):
    """cn0, cn1 (compute), mn0, mn1 (memory); a root on mn0; per thread an ArtTree client."""
    specs = [NodeSpec("cn0", "compute", 8 << 20), NodeSpec("cn1", "compute", 8 << 20),
             NodeSpec("mn0", "memory", 32 << 20), NodeSpec("mn1", "memory", 32 << 20)]
    fabric = Fabric.create(load_profile(profile), specs, prefix=prefix)
    try:
        for m in MNS:
            fabric.expose(m)
        root = create_root(fabric, MNS[0])
        env = Environment(seed=seed)
        host = VerbsHost(fabric, env)
        trees, cos = [], []
        for node in ("cn0", "cn1"):
            rd = NodeRdma(host, node)
            for i in range(threads):
                t = rd.thread()
                alloc = ChunkAllocator(fabric, MNS, 1 << 16, start=len(trees))
                trees.append(ArtTree(root, MNS, alloc))
                cos.append([t.coroutine() for _ in range(coroutines)])
        yield fabric, root, env, trees, cos
    finally:
        fabric.close()


def new_leaf(tree, co, key):
    """Generator: a dummy 8-byte leaf word holding ``key`` (what the default ``leaf_key`` reads)."""
    node, off = yield from tree.alloc.alloc(co, 1)
    addr = gaddr(node, off)
    co.write(addr, key)
    yield co.sync()
    return addr


def run(env, procs):
    ps = [env.process(p) for p in procs]
    env.run()
    assert not any(p.is_alive for p in ps)
    return [p.value for p in ps]


def sharing_keys(n, seed):
    """``n`` distinct keys, each sharing a random-length prefix with an earlier one (so nodes
    get partials, leaves split deep and new keys leave partials: prefix splits)."""
    rng = random.Random(seed)
    keys, seen = [], set()
    while len(keys) < n:
        if keys and rng.random() < 0.7:
            base = rng.choice(keys)
            k = base[:rng.randint(1, 7)]
            k += bytes(rng.getrandbits(8) for _ in range(8 - len(k)))
        else:
            k = rng.getrandbits(64).to_bytes(8, "big")
        if k not in seen:
            seen.add(k)
            keys.append(k)
    return keys


def test_tree_of_a_few_hundred_keys_is_found_again(prefix):
    keys = sharing_keys(400, 7)
    keys += [b"\x42" * 6 + bytes([i, 0]) for i in range(40)]      # one node of 40 children: NODE_64
    with art_rig(prefix) as (fabric, root, env, trees, cos):
        tree, co = trees[0], cos[0][0]
        leaves = {}

        def body():
            for k in keys:
                leaves[k] = la = yield from new_leaf(tree, co, k)
                got = yield from tree.insert(co, k, la)
                assert got[:2] == (True, la)
                word = fabric.memory[gaddr_node(got.entry_addr)].host64[gaddr_offset(got.entry_addr) // 8]
                assert decode_entry(int(word)).is_leaf and tree.target(int(word)) == la
            for k in keys[::7]:                                    # again: the existing leaf
                other = yield from new_leaf(tree, co, k)
                assert (yield from tree.insert(co, k, other))[:2] == (False, leaves[k])
            for k in keys:
                assert (yield from tree.lookup(co, k)) == leaves[k], k.hex()
            rng = random.Random(3)
            for _ in range(200):
                k = rng.getrandbits(64).to_bytes(8, "big")
                if k not in leaves:
                    assert (yield from tree.lookup(co, k)) is None
            for k in keys:                                         # prefixes of stored keys
                assert (yield from tree.lookup(co, k[:7] + bytes([k[7] ^ 0x80]))) in (None, leaves.get(k[:7] + bytes([k[7] ^ 0x80])))

        run(env, [body()])
        st = tree.statistics()
        assert st.upgrades > 0 and st.leaf_splits > 0 and st.prefix_splits > 0
        assert st.cas_failures == 0 and st.restarts == 0
        nodes, found = dump_tree(fabric, MNS, root)
        assert sorted(a for _, a in found) == sorted(leaves.values())     # every leaf exactly once
        assert any(n.node_type >= NODE_16 and n.addr != root for n in nodes)   # upgraded along the way
        for n in nodes:                                            # structure: partials fit, depths grow
            h = n.header
            assert h.node_type == n.node_type and len(h.partial) <= 6 and h.depth <= 7
        # every node's rev_ptr names the entry pointing at it (or is repaired lazily: a hint)
        by_entry = {}
        for n in nodes:
            for i, e in enumerate(n.entries):
                if e and not decode_entry(e).is_leaf:
                    by_entry[tree.target(e)] = n.entry_addr(i)
        wrong = [n for n in nodes if n.addr != root and by_entry[n.addr] != n.rev_ptr]
        assert len(wrong) <= st.upgrades * 64                      # only children of upgraded nodes


def test_lookups_from_a_radix_cache_skip_the_upper_levels(prefix):
    keys = sharing_keys(300, 11)
    with art_rig(prefix) as (fabric, root, env, trees, cos):
        tree, co = trees[0], cos[0][0]
        cache = RadixCache(1 << 20)
        leaves = {}

        def body():
            for k in keys:
                leaves[k] = la = yield from new_leaf(tree, co, k)
                yield from tree.insert(co, k, la)
            before = tree.node_reads
            for k in keys:
                assert (yield from tree.lookup(co, k, cache=cache)) == leaves[k]
            cold = tree.node_reads - before
            before = tree.node_reads
            for k in keys:
                assert (yield from tree.lookup(co, k, cache=cache)) == leaves[k]
            warm = tree.node_reads - before
            assert warm == 0 < cold                                # every internal node cached
            for k in keys[:50]:                                    # a miss from the cache is confirmed
                absent = k[:7] + bytes([(k[7] + 1) & 0xFF])
                if absent not in leaves:
                    assert (yield from tree.lookup(co, absent, cache=cache)) is None

        run(env, [body()])
        st = cache.statistics()
        assert st.hits >= len(keys) and st.bytes_used <= st.budget_bytes and st.evictions == 0
        assert tree.restarts > 0                                   # the negatives went to the root


@pytest.mark.parametrize("seed,profile", [(1, "cx6-200g"), (2, "cx5-100g"), (3, "bf3")])
def test_concurrent_inserts_into_one_node_all_land(prefix, seed, profile):
    """4 threads x 4 coroutines on each of two compute nodes insert disjoint keys that share 6
    bytes, so they race on the same node from NODE_4 up to NODE_256 (CAS failures, freezes,
    forwarding), plus keys diverging inside partials (concurrent prefix splits)."""
    base = b"\x10\x20\x30\x40\x50\x60"
    keys = [base + bytes([i, 7]) for i in range(256)]
    keys += [b"\x10\x20\x30" + bytes([i, 1, 2, 3, 4]) for i in range(1, 40)]
    keys += [b"\x10\x20" + bytes([i]) + b"\x40\x50\x60\x00\x09" for i in range(40, 60)]
    random.Random(seed).shuffle(keys)
    with art_rig(prefix, threads=4, coroutines=4, seed=seed, profile=profile) as (fabric, root, env, trees, cos):
        workers = [(t, co) for t, cs in zip(trees, cos) for co in cs]
        leaves = {}

        caches = [RadixCache(64 << 10), RadixCache(4 << 10)]       # one per compute node; the second tight

        def body(tree, co, mine, cache):
            done = []
            for k in mine:
                leaves[k] = la = yield from new_leaf(tree, co, k)
                assert (yield from tree.insert(co, k, la, cache=cache))[:2] == (True, la)
                done.append(k)
                old = done[len(done) // 2]                         # read back while others insert
                assert (yield from tree.lookup(co, old, cache=cache)) == leaves[old]

        run(env, [body(t, co, keys[i::len(workers)], caches[i // 16]) for i, (t, co) in enumerate(workers)])
        for c in caches:
            st = c.statistics()
            assert st.hits > 0 and st.bytes_used <= st.budget_bytes
        assert caches[1].statistics().evictions > 0

        def check(tree, co):
            for k in keys:
                assert (yield from tree.lookup(co, k)) == leaves[k], k.hex()

        run(env, [check(*workers[0])])
        nodes, found = dump_tree(fabric, MNS, root)
        assert sorted(a for _, a in found) == sorted(leaves.values())
        fat = [n for n in nodes if n.header.depth == 6]
        assert len(fat) == 1 and fat[0].node_type == NODE_256 and len(fat[0].children()) == 256
        total = [sum(getattr(t.statistics(), f) for t in trees) for f in ("cas_failures", "upgrades", "restarts")]
        assert total[0] > 0 and total[1] >= 6                      # NODE_4 -> ... -> NODE_256


def test_stale_rev_ptr_is_repaired_and_invalidates_the_cache(prefix):
    p5 = b"\x01\x02\x03\x04\x05"
    # N at depth 5 with four internal children (each a node at depth 7 over two leaves)
    keys = [p5 + bytes([v, 0x33, w]) for v in (10, 20, 30, 40) for w in (1, 2)]
    with art_rig(prefix) as (fabric, root, env, trees, cos):
        a, b = trees[0], trees[1]                                  # a on cn0, b on cn1
        co_a, co_b = cos[0][0], cos[1][0]
        cache = RadixCache(1 << 20)
        leaves = {}

        def body():
            for k in keys:
                leaves[k] = la = yield from new_leaf(a, co_a, k)
                yield from a.insert(co_a, k, la)
            for k in keys:                                         # a caches root, N, the children
                assert (yield from a.lookup(co_a, k, cache=cache)) == leaves[k]
            n_old = cache.get(p5)
            assert n_old is not None and n_old.node_type == NODE_4 and len(n_old.children()) == 4
            for v in (10, 20, 30, 40):                             # keep N, drop the children
                assert cache.invalidate(p5 + bytes([v, 0x33]), 7)
            k5 = p5 + bytes([50, 0, 0])                            # N is full: b upgrades it
            leaves[k5] = la = yield from new_leaf(b, co_b, k5)
            assert (yield from b.insert(co_b, k5, la))[:2] == (True, la)
            assert b.upgrades == 1
            # the frozen N forwards to its replacement
            old = yield from b.read_node(co_b, n_old.addr, NODE_4)
            assert not old.live and all(is_frozen(e) for e in old.entries)
            new = yield from b.follow(co_b, old)
            assert new.node_type == NODE_8 and len(new.children()) == 5 and new.addr != n_old.addr
            # b walks from the root: the first child's rev_ptr still names N's slot: repaired
            child = gaddr(MNS[decode_entry(new.entries[0]).mn_id], decode_entry(new.entries[0]).addr)
            stale = fabric.memory[gaddr_node(child)].host64[gaddr_offset(child) // 8]
            assert stale == n_old.entry_addr(0)
            repairs = b.rev_ptr_repairs
            assert (yield from b.lookup(co_b, keys[0])) == leaves[keys[0]]
            yield co_b.sync()                                      # the unsignaled CAS completes
            assert b.rev_ptr_repairs == repairs + 1
            assert fabric.memory[gaddr_node(child)].host64[gaddr_offset(child) // 8] == new.entry_addr(0)
            # a starts from its cached (old) N: the child's rev_ptr points elsewhere now: stale
            assert (yield from a.lookup(co_a, keys[0], cache=cache)) == leaves[keys[0]]
            assert a.stale_cache == 1 and cache.statistics().invalidations >= 5
            assert cache.get(p5).addr == new.addr                  # re-read from the root, cached
            assert (yield from a.lookup(co_a, k5, cache=cache)) == leaves[k5]

        run(env, [body()])


def test_read_node_of_a_grown_node_reads_the_rest(prefix):
    with art_rig(prefix) as (fabric, root, env, trees, cos):
        tree, co = trees[0], cos[0][0]

        def body():
            addr = yield from tree.alloc_node(co, NODE_128)
            img = build_node(addr, NODE_128, 4, b"\x01", 0, [encode_leaf_entry(i, 0, 64 * i) for i in range(100)])
            tree.write_node(co, img)
            yield co.sync()
            reads = tree.node_reads
            got = yield from tree.read_node(co, addr, NODE_4)     # the parent entry said NODE_4
            assert tree.node_reads == reads + 2
            assert got.node_type == NODE_128 and got.entries == img.entries and got.header == img.header

        run(env, [body()])


def test_keys_must_be_eight_bytes(prefix):
    with art_rig(prefix) as (fabric, root, env, trees, cos):
        def body():
            with pytest.raises(ValueError):
                yield from trees[0].insert(cos[0][0], b"short", 0)
            yield 1
        run(env, [body()])


@pytest.mark.parametrize("seed,profile", [(1, "cx5-100g"), (6, "cx6-200g")])
def test_concurrent_inserts_of_keys_sharing_prefixes_with_cached_reads(prefix, seed, profile):
    """32 coroutines insert keys sharing random prefixes (concurrent leaf splits, prefix splits and
    upgrades at every depth) and read their first key back from a per-node cache after each insert
    (seed 6 once lost a key: a writer descended into a child it learnt from a CAS on a node
    already being replaced; fixed by freezing entries)."""
    keys = sharing_keys(500, seed)
    with art_rig(prefix, threads=4, coroutines=4, seed=seed, profile=profile) as (fabric, root, env, trees, cos):
        workers = [(t, co) for t, cs in zip(trees, cos) for co in cs]
        caches = [RadixCache(8000), RadixCache(1 << 20)]
        leaves = {}

        def body(tree, co, mine, cache):
            for k in mine:
                leaves[k] = la = yield from new_leaf(tree, co, k)
                assert (yield from tree.insert(co, k, la, cache=cache))[:2] == (True, la)
                assert (yield from tree.lookup(co, mine[0], cache=cache)) == leaves[mine[0]]

        run(env, [body(t, co, keys[i::len(workers)], caches[i // 16]) for i, (t, co) in enumerate(workers)])

        def check(tree, co):
            for k in keys:
                assert (yield from tree.lookup(co, k)) == leaves[k], k.hex()

        run(env, [check(*workers[0])])
        nodes, found = dump_tree(fabric, MNS, root)
        assert sorted(a for _, a in found) == sorted(leaves.values())
        st = [t.statistics() for t in trees]
        assert sum(s.prefix_splits for s in st) > 0 and sum(s.upgrades for s in st) > 0
