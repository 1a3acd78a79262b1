"""DPA-Store's B+-tree baseline: the same tree shape on the DPA, binary search instead of models.

DPA-Store (OSDI'26, Fig. 12) compares its learned index with a B+-tree run on the same DPA
framework: "nodes fully packed after bulk load, 2 KB nodes with 128 entries, binary search in
nodes". The paper gives no more than that, so this module is that baseline's pure data-structure
core, built to be priced exactly like :mod:`.pla`: no timing, no threads, no DMA engine; a lookup
counts the cache lines it touches, split the same way between DPA memory and host memory.

Why the same split as the learned index
    The comparison is about the search inside nodes (models + a small window vs. binary
    search), not about where the data lives. So, as in :mod:`.pla`, the inner nodes live in DPA
    memory and each leaf is one metadata line in DPA memory over a key array and a value array in
    host memory (the replica a DPA thread reads by DMA). Later code can then price both indexes
    with the same per-line DPA-memory latency and per-DMA cost.

Bulk build (fully packed, bottom-up)
    Sorted unique keys are cut into leaves of :data:`NODE_ENTRIES` = 128 consecutive entries; only
    the last leaf may hold fewer. Each inner level is built the same way from the first keys of
    the level below: 128 children per node, only the last node of a level partly full, up to one
    root. The root is always an inner node (as in :mod:`.pla`), so a tree over n keys has
    ``ceil(n / 128)`` leaves and depth ``max(1, ceil(log_128(leaves))) + 1`` levels counting the
    leaves, i.e. ``ceil(log_128(n / 128)) + 1`` for n > 128 and 2 below.

Layout (64-byte lines, 8-byte keys and pointers; every array starts on a line)
    * Inner node, DPA memory, exactly 2 KB: a key array of 128 slots (1 KB = 16 lines) holding
      each child's first key, then a pointer array of 128 slots (1 KB = 16 lines) holding the
      children's addresses. Key slot i is child i's first key, so slot 0 is redundant below the
      root but lets the root tell "below every key" without a header.
    * No header line: a fully packed node has no room for one, so the entry count travels in the
      pointer to the node. DPA memory is 1 GiB (30 address bits) and node addresses are 2 KB
      aligned, which leaves a 64-bit pointer's high bits free for the count (1..128). The
      root's pointer and count are in the traverser's context. [inferred: the paper does not say
      where the count is kept; this is the choice that keeps a node at exactly 2 KB.]
    * Leaf: one metadata line in DPA memory (entry count, DMA addresses of the host key and
      value arrays; the insert buffer will hang off it as in the learned index) over up to 128
      keys (1 KB, 16 lines) and 128 values (1 KB) in host memory: a 2 KB node, split in two.

Lookup (what a traverser thread does)
    In an inner node: an upper-bound binary search over the node's keys (at most
    ceil(log2(count + 1)) probes: 7 or 8 for 128 keys), each probe a dependent read that no
    prefetch can hide. The lines counted are the distinct key lines probed (a second probe in a
    line already read hits L1), plus the one line of the child pointer. Halving narrows the
    range to one line after log2(16) = 4 probes and the last probes may step into a neighbour:
    at most log2(16) + 1 = 5 key lines, 4 for almost every key (:data:`MAX_INNER_KEY_LINES`;
    the tests simulate every outcome for every node size), so 5 or 6 DPA lines per inner node
    against the learned index's 4 or 5. In the leaf: the metadata line, then the same binary
    search over the host key array, where every distinct line is its own DMA (the next probe
    depends on it), then one DMA of the value line on a hit. Fetching the leaf's whole key array
    (up to 16 lines) in one DMA instead is the other way to price it; that is left to the
    pricing code, which knows the leaf's size from :meth:`BPlusTree.leaves`.
"""

from __future__ import annotations

from bisect import bisect_right
from typing import NamedTuple, Optional, Sequence, Union

import numpy as np

from .pla import (
    KEY_BYTES,
    LEAF_META_LINES,
    KEYS_PER_LINE,
    LINE_BYTES,
    RAW_PAIR_BYTES,
    HostLeaf,
    OrderedIndex,
    check_pairs,
)

NODE_ENTRIES = 128  # keys (and children, or values) per node: the paper's "128 entries"
NODE_KEY_LINES = NODE_ENTRIES * KEY_BYTES // LINE_BYTES  # 16
INNER_NODE_BYTES = 2 * NODE_ENTRIES * KEY_BYTES  # 1 KB keys + 1 KB pointers = 2 KB
POINTER_LINES = 1  # the child pointer, read after the search picked the child

# Distinct lines an upper-bound binary search over 128 line-aligned keys touches at worst:
# ceil(log2(lines)) + 1, for any node size (every outcome is simulated in the tests).
MAX_INNER_KEY_LINES = 5


def probe_lines(keys: Sequence[int], key: int) -> tuple[int, int, int]:
    """Upper-bound binary search as a thread runs it: (count of keys <= key, probes, lines).

    ``lines`` is the number of distinct 64-byte lines of the line-aligned key array the probes
    read; a repeated line is free (it is in the thread's L1 or the DMA'd buffer).
    """
    lo, hi = 0, len(keys)
    probes = 0
    seen: set[int] = set()
    while lo < hi:
        mid = (lo + hi) // 2
        probes += 1
        seen.add(mid // KEYS_PER_LINE)
        if key < keys[mid]:
            hi = mid
        else:
            lo = mid + 1
    return lo, probes, len(seen)


class BLeaf(HostLeaf):
    """Up to 128 entries: a metadata line in DPA memory over key/value arrays in host memory."""

    __slots__ = ("keys", "values", "_key_list")

    def __init__(self, keys: np.ndarray, values: np.ndarray):
        self.keys = keys  # host memory (the replica the DPA reads by DMA)
        self.values = values
        self._key_list = keys.tolist()  # the same keys as Python ints, for the probe simulation

    @property
    def first_key(self) -> int:
        return self._key_list[0]



class BInnerNode:
    """A 2 KB node: up to 128 children's first keys and, in a separate array, their pointers."""

    __slots__ = ("keys", "children")

    def __init__(self, keys: Sequence[int], children: Sequence["BNode"]):
        if not 1 <= len(keys) <= NODE_ENTRIES or len(keys) != len(children):
            raise ValueError(
                f"an inner node holds 1..{NODE_ENTRIES} keys with one child each, "
                f"got {len(keys)} keys and {len(children)} children"
            )
        self.keys = list(keys)
        self.children = list(children)

    @property
    def first_key(self) -> int:
        return self.keys[0]

    def dpa_bytes(self) -> int:
        # allocated whole: a partly full node (the last of a level) still takes its 2 KB
        return INNER_NODE_BYTES


BNode = Union[BInnerNode, BLeaf]


class BTreeLookupCost(NamedTuple):
    """Cache lines one B+-tree lookup touches, root first; the sibling of pla.LookupCost.

    ``inner_lines``, ``pivot_lines``, ``leaf_meta_lines``, ``value_lines`` and the
    ``dpa_lines``/``dma_lines`` totals mean what they mean there. The leaf's key lines are not a
    window read in one DMA but one dependent DMA per line, hence ``key_lines`` and ``dmas``.
    """

    inner_lines: tuple  # DPA-memory lines per inner node (key lines probed + child pointer)
    pivot_lines: tuple  # of those, the key lines the binary search probed (dependent reads)
    inner_probes: tuple  # key comparisons per inner node (the thread's compute)
    leaf_meta_lines: int  # DPA-memory lines of the leaf's metadata (0 if the search stopped above)
    key_lines: int  # host key lines the leaf's binary search read, one DMA each
    leaf_probes: int  # key comparisons in the leaf
    value_lines: int  # host value lines DMA'd (1 on a hit)

    @property
    def dpa_lines(self) -> int:
        return sum(self.inner_lines) + self.leaf_meta_lines

    @property
    def dma_lines(self) -> int:
        return self.key_lines + self.value_lines

    @property
    def dmas(self) -> int:
        # each key line waits for the previous probe; the value waits for the match
        return self.key_lines + self.value_lines


class BTreeStatistics(NamedTuple):
    keys: int
    leaves: int
    inner_nodes: int
    nodes_per_level: tuple  # root first, leaves last
    depth: int  # levels including the leaves: a GET reads depth - 1 inner nodes
    dpa_bytes: int  # inner nodes (2 KB each) + leaf metadata in DPA memory
    index_bytes: int  # everything but the raw 16 B per pair (DPA bytes + host array padding)
    raw_bytes: int

    @property
    def overhead(self) -> float:
        return self.index_bytes / self.raw_bytes if self.raw_bytes else 0.0


def expected_depth(n_keys: int) -> int:
    """Levels of a fully packed tree over ``n_keys`` (root always inner), in integers."""
    width = -(-n_keys // NODE_ENTRIES)  # leaves
    inner_levels = 0
    while width > 1 or inner_levels == 0:
        width = -(-width // NODE_ENTRIES)
        inner_levels += 1
    return inner_levels + 1


class BPlusTree(OrderedIndex):
    """The B+-tree baseline after a bulk load: 2 KB inner nodes down to leaves over host arrays."""

    def __init__(self, root: BInnerNode, depth: int, stats: BTreeStatistics):
        self.root = root
        self.depth = depth
        self._stats = stats

    @classmethod
    def bulk_build(cls, keys, values) -> "BPlusTree":
        """Sorted unique keys and their values -> fully packed 128-entry leaves -> fully packed
        128-child inner levels bottom-up from the children's first keys, up to one root."""
        k, v = check_pairs(keys, values)

        level: list[BNode] = [
            BLeaf(k[i : i + NODE_ENTRIES], v[i : i + NODE_ENTRIES])
            for i in range(0, k.size, NODE_ENTRIES)
        ]
        widths = [len(level)]
        dpa = sum(leaf.dpa_bytes() for leaf in level)
        padding = sum(leaf.host_padding_bytes() for leaf in level)
        inner_nodes = 0
        depth = 1
        while len(level) > 1 or depth == 1:  # the root is always an inner node
            parents: list[BNode] = []
            for i in range(0, len(level), NODE_ENTRIES):
                kids = level[i : i + NODE_ENTRIES]
                node = BInnerNode([c.first_key for c in kids], kids)
                dpa += node.dpa_bytes()
                parents.append(node)
            inner_nodes += len(parents)
            widths.append(len(parents))
            level = parents
            depth += 1
        stats = BTreeStatistics(
            keys=int(k.size),
            leaves=widths[0],
            inner_nodes=inner_nodes,
            nodes_per_level=tuple(reversed(widths)),
            depth=depth,
            dpa_bytes=dpa,
            index_bytes=dpa + padding,
            raw_bytes=RAW_PAIR_BYTES * int(k.size),
        )
        return cls(level[0], depth, stats)

    def statistics(self) -> BTreeStatistics:
        return self._stats

    # --- traversal ---------------------------------------------------------------------------

    def _descend(self, key: int):
        """(leaf or None, per-node lines, key lines, probes, fence): the leaf whose range holds
        ``key``; None when ``key`` is below the smallest key. ``fence`` is the first key of the
        next leaf (None at the last), where a range scan re-descends."""
        node: BNode = self.root
        inner_lines: list[int] = []
        key_lines: list[int] = []
        probes_per_node: list[int] = []
        fence: Optional[int] = None
        while isinstance(node, BInnerNode):
            n_le, probes, lines = probe_lines(node.keys, key)
            c = n_le - 1
            if c < 0:  # below the node's first key: only possible at the root
                # the pointer is never read: the search ends with "no child"
                inner_lines.append(lines)
                key_lines.append(lines)
                probes_per_node.append(probes)
                return None, inner_lines, key_lines, probes_per_node, fence
            inner_lines.append(lines + POINTER_LINES)
            key_lines.append(lines)
            probes_per_node.append(probes)
            if c + 1 < len(node.keys):
                fence = node.keys[c + 1]
            node = node.children[c]
        return node, inner_lines, key_lines, probes_per_node, fence

    def lookup(self, key: int) -> tuple[Optional[int], BTreeLookupCost]:
        """GET: the value of ``key`` (None if absent) and the lines the traversal touched."""
        key = int(key)
        leaf, inner_lines, key_lines, probes, _ = self._descend(key)
        if leaf is None:
            cost = BTreeLookupCost(tuple(inner_lines), tuple(key_lines), tuple(probes), 0, 0, 0, 0)
            return None, cost
        n_le, leaf_probes, lines = probe_lines(leaf._key_list, key)
        # a present key was itself a probe (lo only moves to mid + 1), so the match costs no read
        found = n_le > 0 and leaf._key_list[n_le - 1] == key
        cost = BTreeLookupCost(
            tuple(inner_lines),
            tuple(key_lines),
            tuple(probes),
            LEAF_META_LINES,
            lines,
            leaf_probes,
            int(found),
        )
        return (int(leaf.values[n_le - 1]) if found else None), cost

    def _leaf_lower_bound(self, leaf: "BLeaf", key: int) -> int:
        return bisect_right(leaf._key_list, key - 1) if key > 0 else 0  # first key >= key

    def _first_key(self) -> int:
        return self.root.first_key

    def leaves(self) -> list[BLeaf]:
        """All leaves in key order (host-side walk, for checks and statistics)."""
        level: list[BNode] = [self.root]
        while isinstance(level[0], BInnerNode):
            level = [c for node in level for c in node.children]
        return level
