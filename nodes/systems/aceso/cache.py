"""Aceso's address cache (dmemsys/Aceso ``src/AddrCache.{h,cc}``): one per compute node, shared by
its threads, key -> the key's slot (its remote address and the slot word last seen there).

A hit READs the slot word and (unless the entry's miss rate is above the threshold) the record
the cached word names, in one round trip; the cached record counts only if the slot still holds
the cached word (the code's ``_cache_read_prev_kv`` with ``cacheLevel = 2``, the default build).
Otherwise the record the slot now names is READ (``_cache_read_curr_kv``), and only when that
does not hold the key are the buckets READ: Aceso reads buckets only on misses (FlexKV §5.4).

Per entry the code counts accesses and misses (``acc_cnt``, ``miss_cnt``) and stops prefetching
the record with the slot once ``miss_cnt / acc_cnt > missRateThreash`` (0.1, ``src/Common.h``):
for keys updated often the cached record is mostly stale, so its READ is wasted bandwidth.

The code's cache is an unbounded concurrent map; here it has a byte budget (``cache_bytes``, so a
compute node's memory limit can be applied: FlexKV Fig. 23) and evicts in insertion order (FIFO,
as FlexKV's cache). An entry costs what Aceso's code takes for it (``src/Hashtable.h``,
``src/AddrCache.h``; priced by nodes/systems/lib/heap.py): its ``AddrCacheEntry`` (40 B) ``new``'d
on its own and its element of ``tbb::concurrent_unordered_map<std::string, AddrCacheEntry *>``:
122 B for an 8-byte key. Until issue 40: 64 B assumed plus the key (72 B).
"""

from __future__ import annotations

from collections import OrderedDict

from nodes.systems.lib.heap import POINTER, STD_STRING, malloc_chunk, string_heap, tbb_unordered_map_element

#: Aceso's ``AddrCacheEntry`` (src/Hashtable.h): the read_kv flag, server id, the slot's address,
#: the 16-byte slot, two counters: 40 B with padding.
ADDR_CACHE_ENTRY = 40


def entry_bytes(key_len: int) -> int:
    """What one cached key costs Aceso's compute node (see the module docstring)."""
    return (malloc_chunk(ADDR_CACHE_ENTRY) + tbb_unordered_map_element(STD_STRING, POINTER)
            + string_heap(key_len))


class Entry:
    __slots__ = ("slot", "word", "acc", "miss", "size")

    def __init__(self, slot: int, word: int, size: int):
        self.slot = slot
        self.word = word
        self.acc = 1
        self.miss = 0
        self.size = size


class AddrCache:
    """The address cache of one compute node."""

    def __init__(self, budget: int, miss_threshold: float):
        self.budget = int(budget)
        self.miss_threshold = float(miss_threshold)
        self.entries: OrderedDict[bytes, Entry] = OrderedDict()
        self.bytes = 0
        self.evictions = 0

    def lookup(self, key: bytes) -> Entry | None:
        return self.entries.get(key)

    def read_kv(self, e: Entry) -> bool:
        """Whether a hit should READ the cached record with the slot (the code's ``read_kv``)."""
        return e.miss <= self.miss_threshold * e.acc

    def update(self, key: bytes, slot: int, word: int) -> None:
        """The key's slot holds ``word`` (seen or written by this node): install or refresh."""
        e = self.entries.get(key)
        if e is not None:
            if e.slot != slot:
                e.slot = slot
            e.word = word
            e.acc += 1
            return
        size = entry_bytes(len(key))
        if size > self.budget:
            return
        while self.bytes + size > self.budget:
            _, old = self.entries.popitem(last=False)
            self.bytes -= old.size
            self.evictions += 1
        self.entries[key] = Entry(slot, word, size)
        self.bytes += size

    def drop(self, key: bytes) -> None:
        e = self.entries.pop(key, None)
        if e is not None:
            self.bytes -= e.size


_CACHES: dict = {}


def cache_of(layout: dict, node: int, env, budget: int, miss_threshold: float) -> AddrCache:
    """The cache of compute node ``node`` in this process (one per rack: the layout's nonce and the
    environment tell racks apart)."""
    key = (layout["nonce"], node)
    c = _CACHES.get(key)
    if c is None or c[0] is not env:
        c = _CACHES[key] = (env, AddrCache(budget, miss_threshold))
    return c[1]
