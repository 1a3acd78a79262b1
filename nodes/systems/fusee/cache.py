"""FUSEE's address cache: per key the slot that held it and the slot word seen there, with an
access and a miss count; bypassed for a key whose miss rate exceeds a threshold.

FUSEE (``src/client.h``: ``addr_cache_``, ``check_cache``, ``update_cache``) keeps a
``LocalCacheEntry`` per key: the slot's address in every index replica, the slot word, ``acc_cnt``
and ``miss_cnt``; ``check_cache`` returns nothing when ``miss_cnt / acc_cnt > miss_rate_threash``
(0.1 in ``tests/client_config.json``), so a key that other clients keep rewriting stops costing a
useless READ of its stale KV pair. A hit does not save the bucket READs: FUSEE READs the key's
buckets together with the cached pair in every search (the read amplification FlexKV §5.4 names).

One cache per compute node, shared by its threads (dmrack's unit of compute-node memory), within a
byte budget (``cache_bytes``; FUSEE's map is unbounded, FlexKV Fig. 23 varies compute-node
memory), evicted in insertion order. An entry costs what FUSEE's code takes for it (``src/hashtable.h``,
``src/client.h``; priced by nodes/systems/lib/heap.py): its ``LocalCacheEntry`` (``r_slot_addr``
for ``MAX_REP_NUM`` = 10 replicas whatever the replication, the slot, the two counters: 96 B)
``malloc``'d on its own, and its element of ``std::unordered_map<std::string, LocalCacheEntry *>``
(the key in a std::string, the cached hash): 184 B for an 8-byte key. Until issue 40: 48 B of
assumed overhead plus 8 a replica and the key (80 B).

**Leases** (dmrack's, as FlexKV's ``lease_us``): an entry counts for ``lease_ns`` after the slot was
last seen holding its word, and a replaced KV block is reused only ``lease_ns`` after it was
retired (``Reclaimer.min_age_ns``). Without them a cached word can name a block that was retired,
reused for a new value of the same key and swung into the same slot (the same word): the block
READ posted with the bucket READs may land before the new value's WRITE, and the hit returns a
value replaced before the lookup began (the conformance suite's zipfian history caught it).
FUSEE's own check (the pair's valid byte and key) has the same window.
"""

from __future__ import annotations

from collections import OrderedDict

from nodes.systems.lib.heap import POINTER, STD_STRING, malloc_chunk, string_heap, unordered_map_element

# FUSEE's LocalCacheEntry (src/hashtable.h): r_slot_addr[MAX_REP_NUM = 10], the slot, two u32 counters
LOCAL_CACHE_ENTRY = 8 * 10 + 8 + 4 + 4


def entry_bytes(key_len: int) -> int:
    """What one cached key costs FUSEE's compute node (see the module docstring)."""
    return (malloc_chunk(LOCAL_CACHE_ENTRY) + unordered_map_element(STD_STRING, POINTER, cached_hash=True)
            + string_heap(key_len))

_CACHES: dict = {}


class Entry:
    __slots__ = ("slot", "word", "acc", "miss", "size", "since")

    def __init__(self, slot: int, word: int, size: int, since: int):
        self.slot = slot          # global address of the primary slot
        self.word = word          # the slot word last seen there
        self.acc = 1
        self.miss = 0
        self.size = size
        self.since = since        # when the slot was last seen holding ``word`` (the lease)


class AddressCache:
    def __init__(self, budget: int, threshold: float, env, lease_ns: int):
        self.lease_ns = int(lease_ns)
        self.budget = max(0, int(budget))
        self.threshold = threshold
        self.env = env
        self._d: OrderedDict = OrderedDict()
        self.bytes = 0
        self.evictions = 0

    def __len__(self) -> int:
        return len(self._d)

    def lookup(self, key: bytes):
        """``(entry, bypassed)``: the entry if it may be used (miss rate at most the threshold)."""
        e = self._d.get(key)
        if e is None:
            return None, False
        if e.miss > self.threshold * e.acc:
            return None, True
        if self.env.now - e.since > self.lease_ns:
            return None, False
        return e, False

    def entry(self, key: bytes):
        return self._d.get(key)

    def seen(self, key: bytes, slot: int, word: int) -> None:
        """The key was found in ``slot`` holding ``word`` (FUSEE's ``update_cache``): a new entry,
        or one access more, and one miss more if the cached word was another."""
        e = self._d.get(key)
        if e is not None:
            if e.word != word or e.slot != slot:
                e.miss += 1
                e.word, e.slot = word, slot
            e.acc += 1
            e.since = self.env.now
            return
        size = entry_bytes(len(key))
        if size > self.budget:
            return
        d = self._d
        while self.bytes + size > self.budget:
            _k, old = d.popitem(last=False)
            self.bytes -= old.size
            self.evictions += 1
        d[key] = Entry(slot, word, size, self.env.now)
        self.bytes += size

    def hit(self, e: Entry) -> None:
        e.acc += 1
        e.since = self.env.now

    def remove(self, key: bytes) -> None:
        e = self._d.pop(key, None)
        if e is not None:
            self.bytes -= e.size


def cache_of(layout: dict, node: int, env, budget: int, threshold: float,
             lease_ns: int) -> AddressCache:
    """The cache of compute node ``node`` (one per node and rack: keyed by the layout's nonce)."""
    key = (layout["nonce"], node)
    c = _CACHES.get(key)
    if c is None or c.env is not env:
        c = _CACHES[key] = AddressCache(budget, threshold, env, lease_ns)
    return c
