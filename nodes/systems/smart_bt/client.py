"""SMART-BT (SMART, ASPLOS'24 §5.2, §6.2.3): Sherman on the SMART framework + speculative lookup.

SMART-BT is the Sherman B+-tree of :mod:`nodes.systems.sherman` (declared baseline: the client
and the system are subclasses, the tree, layout, HOCL and splits are Sherman's unchanged) with

* SMART's techniques switched on (``smart_defaults``, as SMART-HT: thread-aware doorbells,
  adaptive work-request throttling, back-off CAS with the dynamic limit, coroutine throttling);
  HOCL's remote lock CAS keeps Sherman's retry by default (HOCL already queues a node's
  contenders locally); with the option ``lock_backoff`` it goes through ``backoff_masked_cas`` so
  conflict avoidance and coroutine throttling see the lock CASes (docs/smart_bt.md: under heavy
  lock contention that lowered throughput by 10-20 % in the stress runs);
* **speculative lookup**: a per-compute-node cache key -> (gaddr of the entry's 64-byte line,
  leaf version ``nv``), filled by lookups and writes; direct-mapped like the artifact's
  GenericCache (one entry per slot, a fill overwrites whatever key held the slot), so its hit rate
  under skew follows the artifact's rather than an idealised LRU's. A get first READs just that line (64 B
  instead of the 1 KB leaf) and returns its value when the line is *valid*: it carries the cached
  ``nv``, is used, and holds the key. Otherwise (not cached, or stale) it falls back to Sherman's
  descent + leaf READ and refreshes the cache (docs/smart_bt.md has the validation argument).

Writes take Sherman's path (lock, READ leaf, WRITE line + unlock) and record where they wrote.

=========================  ===============================================  ======  =====
get                        rounds                                           verbs   bytes
=========================  ===============================================  ======  =====
speculative hit            READ entry line                                  1       64
hit, value out of line     READ entry line | READ block                     2
miss / stale               (READ line |) Sherman's get (READ leaf)          1 (2)   1024 (+64)
=========================  ===============================================  ======  =====
"""

from __future__ import annotations

import random
from typing import NamedTuple

from nodes.systems.api import SystemGaveUp
from nodes.systems.lib.hashing import mix64
from nodes.systems.lib.hocl import FIELD_MASK
from nodes.systems.sherman import ShermanClient
from nodes.systems.lib.shared import shared
from nodes.systems.sherman.client import RETRY_LIMIT, ShermanStats
from nodes.systems.sherman.layout import (
    LINE, LINE_HEAD, NODE_BYTES, OUT_OF_LINE, REF, USED, key_int,
)

SPEC_FIELDS = (
    "spec_hits",            # gets answered by the one-line READ
    "spec_misses",          # gets whose key was not in the speculative cache
    "spec_invalidations",   # ... was cached but the line failed validation (stale: split, delete, moved)
    "spec_fills",           # cache entries written (lookups and writes)
    "spec_evictions",       # entries overwritten by a fill of another key mapping to the same slot
    "read_bytes",           # bytes this client READ (leaves, internal nodes, lines, blocks, root word)
)

# The artifact's GenericCache capacity (include/smart/generic_cache.h; CACHE_SIZE overrides it).
SPEC_CACHE_SLOTS = 1_000_000

SmartBTStats = NamedTuple("SmartBTStats", [(f, int) for f in ShermanStats._fields + SPEC_FIELDS])


class SpecCache:
    """key bytes -> (line gaddr, leaf nv) in ``capacity`` direct-mapped slots; one per compute node
    and tree, shared by its threads (coroutines interleave only at ``yield``, so no locking).

    Direct-mapped as SMART's artifact (include/smart/generic_cache.h: ``hash(key) % capacity``, a
    fill overwrites the slot, 10^6 slots): hot keys keep their slots, cold keys evict each other,
    so the share of gets answered speculatively depends on the key popularity as in the paper's
    runs. The artifact's keys are FNV-scrambled, so ``key % capacity`` spreads them; here the key
    is mixed first, since the rack's keys are sequential ids."""

    __slots__ = ("slots", "capacity", "__weakref__")

    def __init__(self, capacity: int):
        self.slots: dict[int, tuple[bytes, int, int]] = {}   # slot -> (key, line gaddr, nv); sparse
        self.capacity = max(int(capacity), 0)

    def _slot(self, key: bytes) -> int:
        return mix64(int.from_bytes(key, "big")) % self.capacity     # Sherman keys are 8 bytes

    def get(self, key: bytes):
        """``(line gaddr, nv)`` cached for ``key``, or None."""
        if self.capacity == 0:
            return None
        ent = self.slots.get(self._slot(key))
        return None if ent is None or ent[0] != key else ent[1:]

    def put(self, key: bytes, line_addr: int, nv: int) -> int:
        """Record ``key``'s line; 1 if that overwrote another key's entry, else 0."""
        if self.capacity == 0:
            return 0
        s = self._slot(key)
        old = self.slots.get(s)
        self.slots[s] = (key, line_addr, nv)
        return int(old is not None and old[0] != key)

    def drop(self, key: bytes) -> None:
        if self.capacity:
            s = self._slot(key)
            ent = self.slots.get(s)
            if ent is not None and ent[0] == key:
                del self.slots[s]


class SmartBTClient(ShermanClient):
    """Sherman's client with speculative lookup and SMART's back-off CAS on the HOCL remote tier."""

    NAME = "SMART-BT"

    def __init__(self, fabric, layout: dict, thread, options: dict):
        super().__init__(fabric, layout, thread, options)
        cap = options.get("spec_cache", SPEC_CACHE_SLOTS)
        self.spec: SpecCache = shared(thread.owner, self.root_word, "spec_cache", lambda: SpecCache(cap))
        self.lock_backoff = bool(options.get("lock_backoff", False))
        # with lock_backoff but SMART's back-off off: a random pause of one to two link latencies
        # after the third failed CAS (Sherman's code retries at once; this keeps SMART-BT's earlier rule)
        self._rng = random.Random((thread.owner.node << 20) ^ thread.index ^ 0x5E4)
        self._backoff_ns = fabric.profile.link.one_way_ns
        self._probe_ns = fabric.profile.cpu.local_read_ns_per_line   # the hash-table probe
        self.spec_hits = self.spec_misses = self.spec_invalidations = self.spec_fills = 0
        self.spec_evictions = self.read_bytes = 0

    def statistics(self) -> SmartBTStats:
        return SmartBTStats(*super().statistics(), self.spec_hits, self.spec_misses, self.spec_invalidations,
                            self.spec_fills, self.spec_evictions, self.read_bytes)

    def _fill(self, key: bytes, line_addr: int, nv: int) -> None:
        self.spec_fills += 1
        self.spec_evictions += self.spec.put(key, line_addr, nv)

    # -- byte accounting of Sherman's READs ---------------------------------------------------------
    def read_node(self, co, addr: int):
        torn = self.torn_reads
        off = yield from super().read_node(co, addr)
        self.read_bytes += NODE_BYTES * (1 + self.torn_reads - torn)
        return off

    def read_block(self, co, block: int, nbytes: int, length: int | None = None):
        self.read_bytes += nbytes
        return (yield from super().read_block(co, block, nbytes, length))

    def read_root(self, co):
        self.read_bytes += 8
        return (yield from super().read_root(co))

    # -- HOCL remote tier through SMART's back-off CAS ----------------------------------------------
    def remote_acquire(self, co, lock):
        if not self.lock_backoff:
            return (yield from super().remote_acquire(co, lock))
        word, shift = lock
        mask = FIELD_MASK << shift
        mine = self.tag << shift
        smart_backoff = self.thread.conflict_control
        for attempt in range(RETRY_LIMIT):
            ok, _ = yield from co.backoff_masked_cas(word, 0, mine, mask, mask)
            if ok:
                return
            self.remote_lock_retries += 1
            if attempt >= 2 and not smart_backoff:     # Sherman's own back-off when SMART's is off
                yield self._rng.randrange(self._backoff_ns, 2 * self._backoff_ns)
        raise SystemGaveUp(f"SMART-BT: lock {word:#x}>>{shift} not acquired after {RETRY_LIMIT} tries")

    # -- get: the speculative fast path, then Sherman's path refreshing the cache -------------------
    def _get(self, co, key: bytes):
        if type(key) is not bytes:
            key = bytes(key)
        k = key_int(key)                                  # KeySizeError before anything else
        self.gets += 1
        self.thread.cpu(self._op_ns)
        ent = self.spec.get(key)
        self.thread.cpu(self._probe_ns)
        if ent is None:
            self.spec_misses += 1
        else:
            line_addr, nv = ent
            h = co.read(line_addr, LINE)
            yield co.sync()
            self.read_bytes += LINE
            self.thread.cpu(self._line_ns)
            base = h.offset
            lnv, _ev, vlen, eflags, lkey = LINE_HEAD.unpack_from(self._mv, base)
            if lnv == nv and eflags & USED and lkey == key:
                self.spec_hits += 1
                if vlen != OUT_OF_LINE:
                    return bytes(self._mv[base + 16:base + 16 + vlen])
                block, length = REF.unpack_from(self._mv, base + 16)
                return (yield from self.read_block(co, block, 16 + length, length))
            self.spec_invalidations += 1
            self.spec.drop(key)
        return (yield from self.leaf_get(co, key, k))

    # -- where keys are: Sherman's reads and writes report it, the speculative cache keeps it ---------
    def entry_at(self, key: bytes, line_addr: int, nv: int) -> None:
        self._fill(key, line_addr, nv)

    def entry_gone(self, key: bytes) -> None:
        self.spec.drop(key)
