"""A compute node's radix cache of ART internal nodes, bounded in bytes (SMART-ART's and Dolphin's).

Why: an ART walk on remote memory costs one READ per level; SMART-ART and Dolphin keep the
internal nodes a compute node has read in a local cache and start each walk from the deepest
cached node whose prefix matches the key, so a walk READs only what lies below it. The papers size
that cache in megabytes (Dolphin Fig. 6 sweeps 50-800 MB; SMART-ART needs GBs for a full cache),
so unlike Sherman's index cache (nodes/systems/sherman/cache.py, counted in nodes) this one counts
**bytes**.

Entries are keyed by ``(prefix, depth)``: a node at depth ``d`` (the key byte it dispatches on)
covers exactly the keys that start with ``prefix = key[:d]`` (nodes/systems/lib/art.py), so a
lookup probes ``key[:d]`` for ``d = 7 .. 0`` and returns the first (deepest) image found: at most 8
dictionary probes, one hit or one miss counted per lookup.

Budget semantics: the budget is what the systems' own code calls its cache size, spent as that
code spends it (the ``FreeMemManager`` of SMART's ``src/RadixCache.cpp``, which Dolphin's code
keeps; read in github.com/dmemsys/SMART and github.com/hust-anhang/Dolphin). An entry costs

* its ``CacheEntry::content_size()``: the node's depth (1 B) and remote address (8 B), then its
  records, 8 B per slot of the node's type (``ENTRY_FIXED_BYTES + 8 * slots``; the image as READ
  also has ``rev_ptr`` and the header, 16 B that a cache entry does not keep);
* its record in the radix tree that indexes the entries by key prefix (``CacheNodeValue``: a
  partial key byte, the entry pointer and a child pointer, ``RADIX_RECORD_BYTES`` = 17 B, as
  ``CacheNode::content_size()`` counts it). The tree's own inner nodes (their headers, 1-7 B, and
  the records that link them) are left out: over the dense key prefixes of an index they are
  about 1/256 of the records;
* with ``key_bytes = HASH_KEY_BYTES``, 8 B more: Dolphin's ``add_to_cache`` also consumes
  ``sizeof(Key)`` per insert ("emulate hash-based cache"), which SMART's, built with its
  ART-indexed cache (its default), does not.

Until issue 40 an entry cost its image plus 64 B of assumed C++ overhead: 208 B for Dolphin's
special node (a NODE_16) where its code counts 162, 2,128 B for a NODE_256 where SMART's counts
2,074.

``bytes_used`` never exceeds ``budget_bytes``: a ``put`` evicts least-recently-used entries (a
lookup hit or a put refreshes an entry) until the new one fits, and an entry larger than the
whole budget is not cached (counted in ``rejected``). A budget of 0 caches nothing.

The cache holds images as last read; they may be stale (a node replaced by a bigger one, a child
replaced by a split). The walk detects that (``rev_ptr``, forwarding headers, a negative answer
confirmed from the root) and calls ``invalidate``. One cache per compute node, shared by its
threads and coroutines (coroutines interleave only at ``yield``, so no locking), e.g. through
``nodes.systems.sherman.cache.shared``.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import NamedTuple

# What a cached node costs the budget (see the module docstring): as SMART's and Dolphin's code count it
ENTRY_FIXED_BYTES = 9        # CacheEntry: depth u8 + GlobalAddress; then 8 B per slot of the node type
RADIX_RECORD_BYTES = 17      # CacheNodeValue in the radix tree over cache keys: u8 + 2 pointers
HASH_KEY_BYTES = 8           # sizeof(Key), which Dolphin's add_to_cache consumes per insert as well
MAX_DEPTH = 7                # the deepest dispatch byte of an 8-byte key


class RadixCacheStats(NamedTuple):
    hits: int
    misses: int
    insertions: int
    evictions: int
    invalidations: int
    rejected: int
    entries: int
    bytes_used: int
    budget_bytes: int


class RadixCache:
    """LRU cache of node images under a byte budget (see the module docstring)."""

    __slots__ = ("budget_bytes", "key_bytes", "bytes_used", "_entries", "hits", "misses", "insertions",
                 "evictions", "invalidations", "rejected", "__weakref__")

    def __init__(self, budget_bytes: int, key_bytes: int = 0):
        """``key_bytes``: what an entry costs besides its content and radix record (Dolphin:
        ``HASH_KEY_BYTES``; SMART-ART: 0)."""
        if budget_bytes < 0:
            raise ValueError(f"radix cache budget must be >= 0 bytes, got {budget_bytes}")
        if key_bytes < 0:
            raise ValueError(f"radix cache key_bytes must be >= 0, got {key_bytes}")
        self.budget_bytes = int(budget_bytes)
        self.key_bytes = int(key_bytes)
        self.bytes_used = 0
        self._entries: OrderedDict = OrderedDict()     # (prefix, depth) -> (image, cost); LRU first
        self.hits = self.misses = self.insertions = self.evictions = self.invalidations = self.rejected = 0

    @classmethod
    def megabytes(cls, mb: float, key_bytes: int = 0) -> "RadixCache":
        """A cache of ``mb`` MB (10**6 bytes, as the papers' axes)."""
        return cls(int(mb * 1_000_000), key_bytes)

    def cost(self, image) -> int:
        """Bytes an image's entry counts for (see the module docstring)."""
        return ENTRY_FIXED_BYTES + 8 * len(image.entries) + RADIX_RECORD_BYTES + self.key_bytes

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, prefix_depth) -> bool:
        return prefix_depth in self._entries

    def keys(self) -> list:
        """``(prefix, depth)`` of every entry, least recently used first."""
        return list(self._entries)

    def lookup(self, key: bytes, max_depth: int = MAX_DEPTH):
        """The image of the deepest cached node whose prefix ``key`` starts with (refreshed as
        most recently used), or None."""
        entries = self._entries
        key = bytes(key)
        for d in range(min(max_depth, len(key)), -1, -1):
            k = (key[:d], d)
            got = entries.get(k)
            if got is not None:
                entries.move_to_end(k)
                self.hits += 1
                return got[0]
        self.misses += 1
        return None

    def get(self, prefix: bytes):
        """The image cached for exactly ``prefix`` (depth ``len(prefix)``), without refreshing it."""
        got = self._entries.get((bytes(prefix), len(prefix)))
        return None if got is None else got[0]

    def put(self, prefix: bytes, image) -> bool:
        """Cache ``image`` (a live node at depth ``len(prefix)``) for ``prefix``, replacing an older
        image of that prefix; evicts LRU entries until it fits. False if it is larger than the
        whole budget."""
        k = (bytes(prefix), len(prefix))
        cost = self.cost(image)
        entries = self._entries
        old = entries.pop(k, None)
        if old is not None:
            self.bytes_used -= old[1]
        if cost > self.budget_bytes:
            self.rejected += 1
            return False
        while self.bytes_used + cost > self.budget_bytes:
            _, (_, c) = entries.popitem(last=False)
            self.bytes_used -= c
            self.evictions += 1
        entries[k] = (image, cost)
        self.bytes_used += cost
        self.insertions += 1
        return True

    def invalidate(self, prefix: bytes, depth: int | None = None) -> bool:
        """Drop the entry of ``(prefix, depth)`` (a stale image: its child's ``rev_ptr`` points
        elsewhere). True if there was one."""
        depth = len(prefix) if depth is None else depth
        got = self._entries.pop((bytes(prefix[:depth]), depth), None)
        if got is None:
            return False
        self.bytes_used -= got[1]
        self.invalidations += 1
        return True

    def clear(self) -> None:
        self._entries.clear()
        self.bytes_used = 0

    def statistics(self) -> RadixCacheStats:
        return RadixCacheStats(self.hits, self.misses, self.insertions, self.evictions, self.invalidations,
                               self.rejected, len(self._entries), self.bytes_used, self.budget_bytes)
