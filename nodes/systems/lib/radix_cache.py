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

Budget semantics: an entry costs ``image.size + ENTRY_OVERHEAD`` bytes, where ``image.size`` is
the node image as READ (``16 + 8 * slots``: ``rev_ptr``, header, entries) and ``ENTRY_OVERHEAD`` =
64 bytes stands for the rest of a C++ cache entry (the prefix key, the remote address, LRU links,
the hash slot), a documented assumption, not measured Python memory. ``bytes_used`` never exceeds
``budget_bytes``: a ``put`` evicts least-recently-used entries (a lookup hit or a put refreshes an
entry) until the new one fits, and an entry larger than the whole budget is not cached (counted in
``rejected``). A budget of 0 caches nothing.

The cache holds images as last read; they may be stale (a node replaced by a bigger one, a child
replaced by a split). The walk detects that (``rev_ptr``, forwarding headers, a negative answer
confirmed from the root) and calls ``invalidate``. One cache per compute node, shared by its
threads and coroutines (coroutines interleave only at ``yield``, so no locking), e.g. through
``nodes.systems.sherman.cache.shared``.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import NamedTuple

ENTRY_OVERHEAD = 64          # bytes per cached node besides its image (see the module docstring)
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

    __slots__ = ("budget_bytes", "bytes_used", "_entries", "hits", "misses", "insertions", "evictions",
                 "invalidations", "rejected", "__weakref__")

    def __init__(self, budget_bytes: int):
        if budget_bytes < 0:
            raise ValueError(f"radix cache budget must be >= 0 bytes, got {budget_bytes}")
        self.budget_bytes = int(budget_bytes)
        self.bytes_used = 0
        self._entries: OrderedDict = OrderedDict()     # (prefix, depth) -> (image, cost); LRU first
        self.hits = self.misses = self.insertions = self.evictions = self.invalidations = self.rejected = 0

    @classmethod
    def megabytes(cls, mb: float) -> "RadixCache":
        """A cache of ``mb`` MB (10**6 bytes, as the papers' axes)."""
        return cls(int(mb * 1_000_000))

    @staticmethod
    def cost(image) -> int:
        """Bytes an image counts for: its size as READ plus ``ENTRY_OVERHEAD``."""
        return image.size + ENTRY_OVERHEAD

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
