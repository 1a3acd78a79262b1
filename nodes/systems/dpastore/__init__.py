"""DPA-Store (an ordered KV store on BlueField-3 DPA threads, a learned index); see docs/dpastore.md.

The system is :class:`DpaStoreSystem` (``dpa-store``, :mod:`.system`). Its parts:

* :mod:`.pla`: the learned index's data-structure core: PGM-style greedy piecewise-linear
  segmentation with an error bound, integer-only fixed-point models (the DPA has no FPU), the
  inner-node and leaf layouts, bulk build, lookup and range scan with a per-lookup count of the
  cache lines a GET touches, and the index's size statistics.
* :mod:`.btree`: the B+-tree baseline of the paper's Fig. 12 (same DPA framework, fully packed
  2 KB nodes of 128 entries, binary search in nodes) with the same DPA/host split and a
  per-lookup count of the lines its binary searches touch, so both indexes can be priced alike.
* :mod:`.inner`: the inner-node formats of the system on the rack (option ``index``): the
  learned index's, and the B+-tree baseline's 2 KB nodes with count-carrying pointers.
* :mod:`.patch`: the write path's logic: a leaf's insert buffer (two counters, a value word that
  marks a slot written, exactly one patch request per full buffer), the host's patch of a leaf
  (update in place, or merge and re-segment into sparse new leaves within the retrain bound) and
  the parent rebuild that goes upward while nodes split.
* :mod:`.hotcache`: one traverser's hot-entry cache (client-computed hints, a 256-bit Bloom filter
  in the thread context, 24 bucket lines of 4 pairs), random admission, invalidation on writes,
  Bloom rebuilds against stale bits, with the lines each operation touches;
* :mod:`.layout`, :mod:`.traverser`, :mod:`.stitcher`, :mod:`.host`: the system on the rack (the
  DPA region's layout, the DPA's traversers and stitchers, the host's patchers);
* :mod:`.wire`: the datagrams and :class:`DpaStoreClient`;
* :mod:`.system`: :class:`DpaStoreSystem` (options, steering, setup, bulk load, the roles' actors).
"""

from .system import DpaStoreSystem
from .wire import DpaStoreClient, DpaStoreStats

__all__ = ["DpaStoreSystem", "DpaStoreClient", "DpaStoreStats"]
