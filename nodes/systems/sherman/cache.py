"""The compute-node index cache: internal nodes as last read, shared by every thread of a node.

Sherman keeps a cache of internal nodes on each compute node so that a lookup walks the upper
levels locally and READs only the leaf. Here one :class:`IndexCache` per (compute node, tree) is
shared by all the node's threads and coroutines (``nodes.systems.lib.shared.shared`` keys it by
the node's ``NodeRdma``, so co-located compute nodes of one process each get their own). It holds:

* ``root``: ``(address, level)`` of the root as last read (None: read the root word);
* ``nodes``: address -> :class:`IndexNode` (a parsed internal node), at most ``capacity``
  entries (the oldest inserted goes first).

A cached node may be stale: its high fence can be higher than the node's real one (a split since),
so a walk can reach a node that no longer covers the key. Nodes never merge and low fences never
change, so the walk stays correct (B-link: follow the sibling); the client then drops the cached
parent that sent it there (:meth:`drop`), and the root when the stale node had no parent.
Coroutines interleave only at ``yield``, so no locking is needed.
"""

from __future__ import annotations

from bisect import bisect_right


class IndexNode:
    """A parsed internal node: ``children[i]`` covers keys in [keys[i-1], keys[i]) with
    ``children[0]`` the leftmost child (keys < keys[0])."""

    __slots__ = ("level", "low", "high", "sibling", "keys", "children")

    def __init__(self, level, low, high, sibling, keys, children):
        self.level = level
        self.low = low
        self.high = high            # None: +inf
        self.sibling = sibling
        self.keys = keys
        self.children = children    # len(keys) + 1

    def child(self, k: int) -> int:
        return self.children[bisect_right(self.keys, k)]

    def covers(self, k: int) -> bool:
        return self.low <= k and (self.high is None or k < self.high)


class IndexCache:
    __slots__ = ("nodes", "root", "capacity", "evictions", "__weakref__")

    def __init__(self, capacity: int):
        self.nodes: dict[int, IndexNode] = {}
        self.root: tuple[int, int] | None = None
        self.capacity = max(int(capacity), 0)
        self.evictions = 0

    def get(self, addr: int):
        return self.nodes.get(addr)

    def put(self, addr: int, node: IndexNode) -> None:
        if self.capacity == 0:
            return
        nodes = self.nodes
        if addr not in nodes and len(nodes) >= self.capacity:
            del nodes[next(iter(nodes))]
            self.evictions += 1
        nodes[addr] = node

    def drop(self, addr: int) -> None:
        if addr:
            self.nodes.pop(addr, None)
        else:
            self.root = None


