"""DPA-Store's inner-node formats on the rack: the learned index, or the B+-tree of Fig. 12.

The system option ``index`` picks one (``"learned"``, the default, or ``"btree"``); everything
else -- leaves' metadata lines, insert buffers, patches, stitches, epochs, bulk load -- is the
same framework. A format is what the host (:mod:`.host`) and the traversers (:mod:`.traverser`)
need of an inner node:

* ``build(pivots, children, bulk)``: the node(s) over a level's children, as bytes;
  ``pointer(addr, count)``: the word a parent (or the root word) holds for a new node;
* ``is_inner`` / ``address`` / ``read``: the host's view of a node (pivots, children, where the
  child words are, its size);
* ``step(trav, ptr, key, want_fence)``: one node of a traverser's walk, every line priced
  through the thread's cache model (``th.load``) and the search's compute in cycles;
* ``leaf_pieces`` / ``leaf_model``: how a sorted run of pairs is cut into leaves, and the model
  a leaf's metadata line carries.

**Learned** (:class:`LearnedFormat`): the layout of :mod:`.layout` (up to 7 PLA segments of up
to 128 pivots; header line, models line, pivot and child arrays); the walk reads line 0, the
models line and the pivot window (prefetched while computing), then the child pointer. Pointers
are plain DPA offsets; a node's kind is in its first word.

**B+-tree** (:class:`BTreeFormat`, the layout of :mod:`.btree`): an inner node is exactly 2 KB,
128 key slots (16 lines, unused slots all ones) then 128 child-pointer slots (16 lines); no
header line. The node's entry count and its kind travel in the pointer to it: bits 0..47 the DPA
offset, bits 48..55 the count (1..128), bit 63 set for an inner node (a leaf's pointer is its
plain offset; a leaf keeps its kind word). The walk is an upper-bound binary search over the
count keys: each probe in a line not yet read is a dependent ``th.load`` of that line (no
prefetch can hide it), each probe ``dpa.probe_cycles`` of compute (the profile); then the child pointer's line.
Lines per node = distinct key lines probed + 1, exactly :func:`.btree.probe_lines` + 1.

Node building (the host): a bulk load packs leaves of 128 and inner nodes of 128 (as
:meth:`.btree.BPlusTree.bulk_build`, only the last of a level partly full; the first leaf's
pivot is 0 as in the learned tree, so a key below every loaded key still has a leaf). A patch
cuts a merged leaf, and a rebuilt parent that no longer fits 128 entries, into balanced pieces of
at most 96 = 128 x (1 - 0.25), the learned tree's retrain bound, so both indexes split alike
and differ only in their search. A rebuilt parent of at most 128 entries stays one node.
"""

from __future__ import annotations

import struct
from bisect import bisect_right

import numpy as np

from . import layout as L
from . import pla
from .btree import NODE_ENTRIES
from .patch import RETRAIN_BOUND, split_limit
from .pla import (INNER_EPS, KEYS_PER_LINE, LEAF_CAPACITY, LEAF_EPS, LINE_BYTES, SEGMENT_CAPACITY,
                  SEGMENTS_PER_NODE, Segment, predict)

INDEXES = ("learned", "btree")

def format_of(lay: dict) -> "InnerFormat":
    """The inner-node format of a layout (``lay["index"]``; a layout without one is learned)."""
    name = lay.get("index", "learned")
    if name == "learned":
        eps = (lay.get("leaf_eps", LEAF_EPS), lay.get("inner_eps", INNER_EPS))
        return LEARNED if eps == (LEAF_EPS, INNER_EPS) else LearnedFormat(*eps)
    if name == "btree":
        return BTREE
    raise ValueError(f"dpa-store: unknown index {name!r}; the indexes are {', '.join(INDEXES)}")


def _balanced(n: int, limit: int) -> list:
    """(start, size) of ceil(n / limit) pieces of n entries, sizes differing by at most one."""
    m = max(-(-n // limit), 1)
    return [(n * g // m, n * (g + 1) // m - n * g // m) for g in range(m)]


class InnerFormat:
    name = ""

    def address(self, ptr: int) -> int:
        raise NotImplementedError

    def is_inner(self, mem: np.ndarray, at: int, ptr: int) -> bool:
        """Is the node ``ptr`` points to inner? (``at``: where its bytes are in ``mem``)"""
        raise NotImplementedError

    def read(self, mem: np.ndarray, at: int, ptr: int):
        """(pivots, children, child word offsets from the node, node bytes)."""
        raise NotImplementedError

    def build(self, pivots, children, bulk: bool) -> list:
        """[(start, end, bytes)]: the node(s) over ``children[start:end]``."""
        raise NotImplementedError

    def pointer(self, addr: int, count: int) -> int:
        raise NotImplementedError

    def step(self, trav, ptr: int, key: int, want_fence: bool):
        """Generator: one inner node of a walk -> (child pointer, fence or None, lines read)."""
        raise NotImplementedError

    def leaf_pieces(self, keys, limit: int, bulk: bool) -> list:
        """[(start, size)] of the leaves over sorted ``keys`` (non-empty)."""
        raise NotImplementedError

    def leaf_model(self, keys) -> Segment:
        raise NotImplementedError


class LearnedFormat(InnerFormat):
    """The learned index's nodes (:mod:`.layout`): what ``dpa-store`` did before the option."""

    name = "learned"

    def __init__(self, leaf_eps: int = LEAF_EPS, inner_eps: int = INNER_EPS):
        self.leaf_eps, self.inner_eps = leaf_eps, inner_eps

    def address(self, ptr: int) -> int:
        return ptr

    def is_inner(self, mem, at, ptr) -> bool:
        return L.kind_at(mem, at) == L.KIND_INNER

    def read(self, mem, at, ptr):
        hdr = L.read_header(mem, at)
        pivots, children, where = [], [], []
        for (po, co), n in zip(L.segment_offsets(hdr.sizes), hdr.sizes):
            pivots += L.read_words(mem, at + po, n)
            children += L.read_words(mem, at + co, n)
            where += [co + 8 * i for i in range(n)]
        return pivots, children, where, L.inner_bytes(hdr.sizes)

    def build(self, pivots, children, bulk):
        """One node if the PLA fits 7 segments of 128, else (or in a bulk build) several, within
        the retrain bound unless bulk."""
        pv = np.asarray(pivots, dtype=np.uint64)
        segs = pla.segment(pv, self.inner_eps, max_size=SEGMENT_CAPACITY)
        if len(segs) <= SEGMENTS_PER_NODE:
            groups = [segs]
        elif bulk:
            groups = [segs[g:g + SEGMENTS_PER_NODE] for g in range(0, len(segs), SEGMENTS_PER_NODE)]
        else:
            segs = pla.segment(pv, self.inner_eps, max_size=split_limit(SEGMENT_CAPACITY, RETRAIN_BOUND))
            per = split_limit(SEGMENTS_PER_NODE, RETRAIN_BOUND)
            m = -(-len(segs) // per)
            groups = [segs[len(segs) * g // m:len(segs) * (g + 1) // m] for g in range(m)]
        out = []
        for group in groups:
            data = L.encode_inner(group, [pivots[s.start:s.start + s.size] for s in group],
                                  [children[s.start:s.start + s.size] for s in group])
            out.append((group[0].start, group[-1].start + group[-1].size, data))
        return out

    def pointer(self, addr, count):
        return addr

    def step(self, trav, node, key, want_fence):
        th, mem = trav.th, trav.mem
        memory = th.dpa.memory
        tid = th.id
        fence = None
        yield th.load(node, LINE_BYTES)                             # metadata + first keys
        hdr = L.read_header(mem, node)
        j = bisect_right(hdr.first_keys, key) - 1
        j = max(j, 0)                                               # leftmost pivot is 0: only a guard
        size = hdr.sizes[j]
        po, co = L.segment_offsets(hdr.sizes)[j]
        seg = L.read_model(mem, node, j, hdr.first_keys[j], size)
        p = min(max(predict(seg, key), 0), size - 1)
        lo, hi = max(p - self.inner_eps, 0), min(p + self.inner_eps, size - 1)
        first_line, last_line = lo // KEYS_PER_LINE, hi // KEYS_PER_LINE
        pv_addr = node + po + first_line * LINE_BYTES
        pv_bytes = (last_line - first_line + 1) * LINE_BYTES
        if trav.prefetch:
            yield from trav.overlap(memory.prefetch(tid, node + LINE_BYTES, LINE_BYTES), trav.ns["search"])
            yield from trav.overlap(memory.prefetch(tid, pv_addr, pv_bytes), trav.ns["model"])
        else:
            yield th.compute(trav.ns["search"])
            yield th.load(node + LINE_BYTES, LINE_BYTES)
            yield th.compute(trav.ns["model"])
            yield th.load(pv_addr, pv_bytes)                        # one line after the other
        pivots = L.read_words(mem, node + po, size)
        c = lo + bisect_right(pivots[lo:hi + 1], key) - 1
        yield th.compute(round((c - lo + 2) * trav.scan_ns))
        if want_fence:
            if c + 1 < size:
                fence = pivots[c + 1]
            elif j + 1 < len(hdr.sizes):
                fence = hdr.first_keys[j + 1]
        yield th.load(node + co + 8 * c, 8)                         # the child pointer, last
        child = L.read_words(mem, node + co + 8 * c, 1)[0]
        return child, fence, 2 + (last_line - first_line + 1) + 1

    def leaf_pieces(self, keys, limit, bulk):
        ks = np.asarray(keys, dtype=np.uint64)
        segs = pla.segment(ks, self.leaf_eps, max_size=LEAF_CAPACITY)
        if len(segs) > 1 and not bulk:
            segs = pla.segment(ks, self.leaf_eps, max_size=limit)
        return [(s.start, s.size) for s in segs]

    def leaf_model(self, keys) -> Segment:
        return L.leaf_model(keys, self.leaf_eps)


# --- the B+-tree ------------------------------------------------------------------------------------

BT_NODE_BYTES = 2 * NODE_ENTRIES * 8            # 2 KB
BT_KEYS_BYTES = NODE_ENTRIES * 8                # the key slots, then the pointer slots
BT_ADDR_MASK = (1 << 48) - 1
BT_COUNT_SHIFT = 48
BT_INNER_TAG = 1 << 63
_UNUSED = (1 << 64) - 1


def encode_btree_node(pivots, children) -> bytes:
    n = len(pivots)
    if not 1 <= n <= NODE_ENTRIES or len(children) != n:
        raise ValueError(f"a B+-tree node holds 1..{NODE_ENTRIES} keys with a child each, got {n}, {len(children)}")
    keys = list(pivots) + [_UNUSED] * (NODE_ENTRIES - n)
    ptrs = list(children) + [0] * (NODE_ENTRIES - n)
    return struct.pack(f"<{NODE_ENTRIES}Q", *keys) + struct.pack(f"<{NODE_ENTRIES}Q", *ptrs)


class BTreeFormat(InnerFormat):
    """The B+-tree's 2 KB nodes, count and kind in the pointer (see the module docstring)."""

    name = "btree"

    def address(self, ptr):
        return ptr & BT_ADDR_MASK

    @staticmethod
    def count(ptr) -> int:
        return ptr >> BT_COUNT_SHIFT & 0xFF

    def is_inner(self, mem, at, ptr):
        return bool(ptr & BT_INNER_TAG)

    def read(self, mem, at, ptr):
        n = self.count(ptr)
        pivots = L.read_words(mem, at, n)
        children = L.read_words(mem, at + BT_KEYS_BYTES, n)
        return pivots, children, [BT_KEYS_BYTES + 8 * i for i in range(n)], BT_NODE_BYTES

    def build(self, pivots, children, bulk):
        n = len(pivots)
        if bulk:
            pieces = [(s, min(NODE_ENTRIES, n - s)) for s in range(0, n, NODE_ENTRIES)]
        elif n <= NODE_ENTRIES:
            pieces = [(0, n)]
        else:
            pieces = _balanced(n, split_limit(NODE_ENTRIES, RETRAIN_BOUND))
        return [(s, s + m, encode_btree_node(pivots[s:s + m], children[s:s + m])) for s, m in pieces]

    def pointer(self, addr, count):
        if addr & ~BT_ADDR_MASK or not 1 <= count <= NODE_ENTRIES:
            raise ValueError(f"no B+-tree pointer for address {addr:#x}, count {count}")
        return BT_INNER_TAG | count << BT_COUNT_SHIFT | addr

    def step(self, trav, ptr, key, want_fence):
        """Upper-bound binary search, a dependent line load per new key line, then the pointer."""
        th, mem = trav.th, trav.mem
        node, n = ptr & BT_ADDR_MASK, self.count(ptr)
        probe = trav.ns["probe"]
        lo, hi = 0, n
        seen = set()
        while lo < hi:
            mid = (lo + hi) // 2
            line = mid // KEYS_PER_LINE
            if line not in seen:                                    # the next probe depends on it
                seen.add(line)
                yield th.load(node + line * LINE_BYTES, LINE_BYTES)
            yield th.compute(probe)
            if key < struct.unpack_from("<Q", mem, node + 8 * mid)[0]:
                hi = mid
            else:
                lo = mid + 1
        c = max(lo - 1, 0)                                          # leftmost pivot is 0: only a guard
        fence = None
        if want_fence and lo < n:                                   # keys[lo] was probed: in a line read
            fence = struct.unpack_from("<Q", mem, node + 8 * lo)[0]
        word = node + BT_KEYS_BYTES + 8 * c
        yield th.load(word, 8)                                      # the child pointer, last
        child = struct.unpack_from("<Q", mem, word)[0]
        return child, fence, len(seen) + 1

    def leaf_pieces(self, keys, limit, bulk):
        n = len(keys)
        if bulk:                                                    # fully packed, the last partial
            return [(s, min(LEAF_CAPACITY, n - s)) for s in range(0, n, LEAF_CAPACITY)]
        return [(0, n)] if n <= LEAF_CAPACITY else _balanced(n, limit)

    def leaf_model(self, keys) -> Segment:
        return Segment(0, 0, 0, 0, 0, 0)                            # no model: the fields stay 0


LEARNED = LearnedFormat()
BTREE = BTreeFormat()
