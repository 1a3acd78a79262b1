"""CPU costs of the tree clients' software paths, from the profile's ``[software]`` section.

Why a module: Sherman, SMART-BT, Marlin, SMART-ART, Dolphin and ROLEX charge the same kinds of
CPU work (a fixed per-operation part, the scan of a node's lines, a search of the compute node's
index cache). The per-step prices are hardware numbers and live in the profile
(``shm.profile_schema.SoftwareProfile``, each with its source in the TOML); the *structure* they
multiply -- how many levels an index-cache search walks for a cache of a given size -- is the
systems' code and is declared here once, with the code it comes from:

* **Skiplist index cache** (Sherman and the trees built on its client): Sherman's ``IndexCache``
  (thustorage/Sherman ``include/IndexCache.h``) is a RocksDB ``InlineSkipList`` of the cached
  internal pages keyed by their fence range (max height 21, branching factor 4, the
  ``InlineSkipList`` default); ``search_from_cache`` seeks it once, then scans the cached
  page's records. With ``n`` entries the list has about ``log4(n)`` levels. The search pays one
  dependent DRAM miss per level (each level's node is a separate ``aligned_alloc``: a pointer
  chase), one more for the cached page (a separate ``malloc``), and the page scan as a node just
  READ (16 lines). Pugh's bound allows up to 4 nodes per level; one per level is taken because it
  agrees with the only published measurement, Dolphin's "approximately 1-2 us" for an index-cache
  lookup with caches of 50-800 MB (about 50k-800k pages: 8-10 levels -> 0.9-1.1 us at 95 ns),
  where 4 per level would give 3-4 us.
* **Flat or by size.** The profile's ``software.index_cache_search_ns`` (1500 ns in every shipped
  profile) charges each search flat instead. The walk above is the search's own work on one
  coroutine (0.5-1.0 us at the caches the experiments build); the flat 1.5 us also covers
  per-operation thread time the model does not price piece by piece, which Sherman's 176-thread
  rows and SMART's one-thread, eight-coroutine artifact point show and which no sourced mechanism
  accounts for yet (docs/profiles.md, "[software]"). With the walk alone, Sherman's Fig. 10/11
  read-intensive rows land 54-62 % above the published ones; so the flat price stays, an
  assumption the sensitivity report varies, and ``index_cache_search_ns = 0`` selects the walk.
* **Radix index cache** (SMART-ART, Dolphin: ``nodes/systems/lib/radix_cache.py``): a local radix
  tree over the key bytes, 256-way: SMART's ``RadixCache`` (dmemsys/SMART ``include/RadixCache.h``,
  kept by Dolphin's code) keys each ``CacheNode``'s records by one key byte
  (``tbb::concurrent_unordered_map<uint8_t, CacheNodeValue>``) and compresses paths (the header's
  ``partial``), so a cache of ``n`` entries over dense key prefixes is ``1 + ceil(log256(n))``
  levels deep. One dependent miss a level is charged; the code's level reads the node's header
  (its own allocation) and a hash-map bucket and node, so up to three (an ASSUMPTION of the walk's
  price, used only with ``index_cache_search_ns = 0``).
"""

from __future__ import annotations

#: Sherman's index-cache skiplist: RocksDB InlineSkipList's default branching factor (each node is
#: one level taller with probability 1/4; thustorage/Sherman include/third_party/inlineskiplist.h).
SKIPLIST_BRANCHING = 4
#: 64-byte lines of a 1 KB node (its records scan as one node just READ).
NODE_LINES = 16


def skiplist_levels(entries: int) -> int:
    """Levels a search of a skiplist of ``entries`` nodes walks: ``ceil(log4(entries))``, at least 1."""
    if entries <= SKIPLIST_BRANCHING:
        return 1
    levels, reach = 0, 1
    while reach < entries:
        reach *= SKIPLIST_BRANCHING
        levels += 1
    return levels


def radix_levels(entries: int) -> int:
    """Levels a walk of a 256-way local radix tree of ``entries`` cached nodes visits."""
    levels, reach = 1, 1
    while reach < entries:
        reach *= 256
        levels += 1
    return levels


class SoftwareCosts:
    """The ``[software]`` prices of one profile in ns (converted once with ``cpu.ghz``)."""

    __slots__ = ("op_ns", "line_ns", "node_ns", "dram_ns", "learned_lookup_ns", "flat_search_ns")

    def __init__(self, profile):
        sw, ghz = profile.software, profile.cpu.ghz
        self.op_ns = int(sw.op_cycles / ghz)
        self.line_ns = max(1, int(sw.line_cycles / ghz))
        self.node_ns = max(1, int(sw.line_cycles * NODE_LINES / ghz))
        self.dram_ns = sw.dram_ns
        self.learned_lookup_ns = int(sw.learned_lookup_cycles / ghz)
        #: what one index-cache search is charged when the profile prices it flat (0: by size)
        self.flat_search_ns = sw.index_cache_search_ns

    def skiplist_walk_ns(self, entries: int) -> int:
        """The walk of Sherman's index cache holding ``entries`` pages: a DRAM miss per skiplist
        level and one for the page, then the page's records scanned (module docstring)."""
        return (skiplist_levels(entries) + 1) * self.dram_ns + self.node_ns

    def radix_walk_ns(self, entries: int) -> int:
        """The walk of a radix index cache holding ``entries`` nodes: a DRAM miss per level."""
        return radix_levels(entries) * self.dram_ns

    def skiplist_search_ns(self, entries: int) -> int:
        """What one search of Sherman's index cache is charged: the profile's flat
        ``index_cache_search_ns`` or, when that is 0, the walk priced by the cache's size."""
        return self.flat_search_ns or self.skiplist_walk_ns(entries)

    def radix_search_ns(self, entries: int) -> int:
        """What one search of a radix index cache is charged (flat, or by size as above)."""
        return self.flat_search_ns or self.radix_walk_ns(entries)
