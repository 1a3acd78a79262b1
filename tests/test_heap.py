"""What a C++ object costs its heap (nodes/systems/lib/heap.py), and the caches that count their
entries with it (FUSEE's, Aceso's, Clover's), against the sizes their code and glibc give."""

from __future__ import annotations

import pytest

from nodes.systems.lib.heap import (
    POINTER, STD_STRING, malloc_chunk, string_heap, tbb_unordered_map_element, unordered_map_element,
)


def test_malloc_chunks_are_glibcs():
    """x86-64 glibc: the request plus its 8-byte size field, 16-byte granules, at least 32 bytes."""
    assert [malloc_chunk(n) for n in (0, 1, 24, 25, 40, 56, 96)] == [32, 32, 32, 48, 48, 64, 112]
    with pytest.raises(ValueError):
        malloc_chunk(-1)


def test_strings_keep_up_to_15_characters_inside():
    assert string_heap(8) == string_heap(15) == 0
    assert string_heap(16) == 32 and string_heap(40) == 64


def test_hash_map_elements():
    # std::unordered_map<std::string, T*>: next + string + pointer + cached hash = 56 -> 64, + a bucket
    assert unordered_map_element(STD_STRING, POINTER, cached_hash=True) == 72
    # std::unordered_map<uint64_t, T*>: next + key + pointer = 24 -> 32, + a bucket
    assert unordered_map_element(8, POINTER, cached_hash=False) == 40
    # TBB: next + order key + string + pointer = 56 -> 64, + a quarter of (bucket pointer + 32-byte dummy)
    assert tbb_unordered_map_element(STD_STRING, POINTER) == 64 + 10


def test_the_baselines_caches_count_their_codes_entries():
    from nodes.systems.aceso.cache import AddrCache, entry_bytes as aceso
    from nodes.systems.clover.client import entry_bytes as clover
    from nodes.systems.fusee.cache import AddressCache, entry_bytes as fusee

    assert fusee(8) == 112 + 72 == 184            # LocalCacheEntry (96 B, 10 replica slots) + its element
    assert fusee(20) == 184 + 32                  # a key too long for the string's own buffer
    assert clover(3) == 80 + 40 == 120            # mitsume_private_hash_struct with 3 pointers + its element
    assert aceso(8) == 48 + 74 == 122             # AddrCacheEntry (40 B) + its TBB element
    c = AddrCache(1000, 0.1)
    for i in range(20):
        c.update(i.to_bytes(8, "big"), i, 1)
    assert len(c.entries) == 1000 // 122 and c.bytes == 8 * 122

    class Env:
        now = 0
    f = AddressCache(1000, 0.1, Env(), 10**9)
    for i in range(20):
        f.seen(i.to_bytes(8, "big"), 64 * i, i)
    assert len(f) == 1000 // 184 and f.bytes == 5 * 184
