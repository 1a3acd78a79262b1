"""The byte-budget radix cache (nodes/systems/lib/radix_cache.py): what an entry costs, the budget
never exceeded, LRU order by use, the deepest matching prefix, invalidation, statistics."""

from __future__ import annotations

import random

import pytest

from nodes.systems.lib.art import NODE_4, NODE_8, NODE_16, NODE_256, build_node, encode_leaf_entry
from nodes.systems.lib.radix_cache import (
    ENTRY_FIXED_BYTES, HASH_KEY_BYTES, RADIX_RECORD_BYTES, RadixCache, RadixCacheStats,
)


def node(depth, node_type=NODE_4, addr=0):
    return build_node(addr, node_type, depth, b"", 0, [encode_leaf_entry(1, 0, 64)])


def test_an_entry_costs_what_smart_and_dolphins_code_count():
    """CacheEntry::content_size() (1 B depth + 8 B address + 8 B per slot) and the entry's
    CacheNodeValue in the radix tree (17 B); Dolphin's code adds sizeof(Key) per insert."""
    assert (ENTRY_FIXED_BYTES, RADIX_RECORD_BYTES, HASH_KEY_BYTES) == (1 + 8, 1 + 8 + 8, 8)
    smart, dolphin = RadixCache(10_000), RadixCache(10_000, HASH_KEY_BYTES)
    assert smart.cost(node(3, NODE_4)) == 9 + 4 * 8 + 17 == 58
    assert smart.cost(node(0, NODE_256)) == 9 + 256 * 8 + 17 == 2074
    assert dolphin.cost(node(7, NODE_16)) == 9 + 16 * 8 + 17 + 8 == 162      # a special node
    c = smart
    c.put(b"abc", node(3, NODE_16))
    assert c.bytes_used == 154
    c.put(b"abc", node(3, NODE_4))                              # a newer image of the same prefix
    assert len(c) == 1 and c.bytes_used == 58
    assert RadixCache.megabytes(200).budget_bytes == 200_000_000
    assert RadixCache.megabytes(1, HASH_KEY_BYTES).key_bytes == 8
    with pytest.raises(ValueError):
        RadixCache(100, -1)


def test_deepest_matching_prefix_wins():
    c = RadixCache(1 << 20)
    root, n2, n5 = node(0, NODE_256, 1), node(2, addr=2), node(5, addr=3)
    c.put(b"", root)
    c.put(b"ab", n2)
    c.put(b"abcde", n5)
    assert c.lookup(b"abcdefgh") is n5
    assert c.lookup(b"abcdXfgh") is n2
    assert c.lookup(b"aXcdefgh") is root
    assert c.lookup(b"abcdefgh", max_depth=4) is n2
    assert RadixCache(1 << 20).lookup(b"abcdefgh") is None
    st = c.statistics()
    assert (st.hits, st.misses) == (4, 0)


def test_miss_and_invalidate():
    c = RadixCache(1 << 20)
    c.put(b"ab", node(2))
    assert c.lookup(b"xyzxyzxy") is None
    assert c.invalidate(b"abXXXXXX", 2) and not c.invalidate(b"ab", 2)
    assert c.lookup(b"abcdefgh") is None
    st = c.statistics()
    assert (st.hits, st.misses, st.invalidations, st.entries, st.bytes_used) == (0, 2, 1, 0, 0)


def test_lru_order_follows_use_and_evicts_by_bytes():
    per = 58                                                   # a NODE_4's entry
    c = RadixCache(3 * per)                                     # room for three NODE_4 images
    for p in (b"a", b"b", b"c"):
        c.put(p, node(1))
    assert c.keys() == [(b"a", 1), (b"b", 1), (b"c", 1)]
    assert c.lookup(b"aaaaaaaa") is not None                    # "a" becomes most recently used
    c.put(b"d", node(1))                                        # evicts "b", the least recently used
    assert c.keys() == [(b"c", 1), (b"a", 1), (b"d", 1)]
    big = node(1, NODE_8)                                       # 90 bytes: two must go
    c.put(b"e", big)
    assert c.keys() == [(b"d", 1), (b"e", 1)] and c.bytes_used == per + c.cost(big)
    st = c.statistics()
    assert st.evictions == 3 and st.bytes_used <= st.budget_bytes


def test_budget_is_never_exceeded_and_oversized_images_are_not_cached():
    rng = random.Random(5)
    c = RadixCache(5_000)
    for i in range(2000):
        t = rng.choice([NODE_4, NODE_16, NODE_256])
        depth = rng.randint(0, 7)
        prefix = bytes(rng.getrandbits(8) % 4 for _ in range(depth))
        c.put(prefix, node(depth, t))
        assert c.bytes_used <= c.budget_bytes
        assert c.bytes_used == sum(c.cost(c.get(p)) for p, _ in c.keys())
        if i % 3 == 0:
            c.lookup(bytes(rng.getrandbits(8) % 4 for _ in range(8)))
    st = c.statistics()
    assert isinstance(st, RadixCacheStats) and st.evictions > 0 and st.rejected == 0
    tiny = RadixCache(100)
    assert not tiny.put(b"", node(0, NODE_256)) and len(tiny) == 0 and tiny.statistics().rejected == 1
    assert not RadixCache(0).put(b"ab", node(2)) and RadixCache(0).lookup(b"abcdefgh") is None
    with pytest.raises(ValueError):
        RadixCache(-1)


def test_statistics_is_an_immutable_record():
    st = RadixCache(1000).statistics()
    with pytest.raises(AttributeError):
        st.hits = 3
    assert st._fields == ("hits", "misses", "insertions", "evictions", "invalidations", "rejected", "entries",
                          "bytes_used", "budget_bytes")
