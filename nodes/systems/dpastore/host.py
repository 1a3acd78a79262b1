"""DPA-Store's host side: the tree replica, the patchers, and the bulk load, all emitting stitches.

The host holds a replica of every DPA node (the *mirror*, :mod:`.layout`) and the leaves' key
and value arrays. It never touches DPA memory: every change reaches the DPA as *stitches* that
the DPA's stitcher threads execute (:mod:`.stitcher`):

* ``COPY``: copy a node's bytes from the mirror to the DPA address the host chose;
* ``CONNECT``: write one 8-byte word in DPA memory (a child pointer, the root pointer, a leaf's
  value-array address): the single pointer swap that makes copied nodes reachable (RCU);
* ``CLEAR``: empty a leaf's insert buffer after an update-only patch;
* ``RETIRE``: the blocks replaced so far in this queue may be freed once every traverser has
  moved on (epochs); the stitcher reports the token back in host memory;
* ``FENCE`` / ``RELEASE``: a queue fence around a change of the root (below).

**A patch** (one per full insert buffer; :func:`HostTree.patch`) finds the leaf by descending the
mirror with the leaf's ``low`` (no parent pointers), then:

* the buffer leaves the key set unchanged (updates of present keys, deletes of absent ones):
  *update-only*. The new values go into the host value array in place when a value slot lies
  within one cache line (each line is written atomically against DMA reads, as the paper's
  8-byte values are), else into a new array whose address one CONNECT swaps into the leaf; then a
  CLEAR empties the buffer.
* otherwise the leaf and the buffer are merged (later writes win, deletes remove) and cut into
  leaves by the PLA with the leaf eps, each at most 96 entries (the retrain bound 0.25 of 128):
  one new leaf is a COPY and a CONNECT in its parent; several rebuild the parent from its pivots
  (PLA with the inner eps; a node that no longer fits splits into balanced nodes within the
  bound), and so on up while nodes split; a root split grows a new root.

The first new leaf keeps the old leaf's pivot (``low``), so pivots never move and the leftmost
pivot of every level stays 0.

**Index formats.** What an inner node is, and how pairs are cut into leaves, is the layout's
format (:mod:`.inner`, the system option ``index``): the above is the learned index; with
``index = "btree"`` nodes are 2 KB B+-tree nodes, a bulk load packs leaves and nodes of 128, and
a patch cuts a merged leaf (or an overflowing parent) into balanced pieces of at most 96. Node
pointers are the format's (the B+-tree's carry the node's count): ``descend`` and ``inner`` take
them, ``fmt.address`` gives the offset.

**Stitcher partitions.** Stitches of a change below the root go to stitcher ``g mod S``, with
``g`` the root's child under which the change lies: changes of one subtree stay in order in one
queue, and different queues touch different subtrees. A change that replaces the root node is
the paper's root-split case: it is put in stitcher 0's queue between a FENCE and a RELEASE, and
every other stitcher's queue gets the FENCE too; a stitcher at a FENCE waits until all have
arrived, and the others until stitcher 0 has released it. So nothing queued before a root change
runs after it and nothing queued after runs before, the two safeguards of the paper (CONNECTs of
nodes from a root split wait for their target; the stitch installing a new root waits behind a
queue fence) in one mechanism.

**Timing.** The structural change is applied to the mirror and its stitches queued in one step,
at the end of the patch's CPU time (the profile's ``software.patch_ns`` + ``software.patch_ns_per_key`` x keys
merged and segmented, both assumptions); patchers run on their own host cores, and their steps
are serialised as the paper's parent locks serialise them.
"""

from __future__ import annotations

import struct
from bisect import bisect_right
from collections import deque
from typing import NamedTuple

import numpy as np

from shm.atomics import store_release
from shm.fabric import copy_lines, gaddr, gaddr_offset

from . import layout as L
from . import pla
from .inner import format_of
from .patch import RETRAIN_BOUND, split_limit
from .pla import LEAF_CAPACITY

OP_COPY, OP_CONNECT, OP_CLEAR, OP_RETIRE, OP_FENCE, OP_RELEASE = 1, 2, 3, 4, 5, 6
STITCH = struct.Struct("<4Q")             # op, a, b, c
STITCH_RECORD = 40                        # 32 B of stitch + the ring's state word


class PatchStats(NamedTuple):
    patches: int
    update_only: int
    merges: int
    leaves_made: int
    inner_made: int
    root_changes: int
    stale: int                 # requests for a leaf no longer in the tree (none expected)
    freed_blocks: int


class HostTree:
    """The mirror and heaps of one rack (host memory of ``lay["host"]``), in the calling process."""

    def __init__(self, fabric, lay: dict):
        self.lay = lay
        self.software = fabric.profile.software     # a patch's CPU prices
        self.geo = L.LeafGeometry.of(lay["value_max"])
        self.fmt = format_of(lay)                   # the inner-node format (:mod:`.inner`)
        self.host = lay["host"]
        hm = fabric.memory[self.host]
        self.hb, self.hw, self.locks = hm.host, hm.host64, hm.host_locks
        self.dpa_base, self.mirror_base = lay["dpa_region"], lay["mirror"]
        ctl = lay["host_ctl"] // 8
        self.ctl = ctl
        self.dpa_heap = L.Heap(self.hw, ctl + L.HCTL_DPA_CURSOR, self.dpa_base + L.dpa_control_bytes(lay["traversers"]),
                               self.dpa_base + lay["dpa_bytes"], "the DPA region")
        self.host_heap = L.Heap(self.hw, ctl + L.HCTL_HOST_CURSOR, lay["heap"], lay["heap"] + lay["heap_bytes"],
                                "the host heap")
        self.stitchers = lay["stitchers"]
        self.queues = [deque() for _ in range(self.stitchers)]   # stitches not yet in a ring
        self.retired: list = [deque() for _ in range(self.stitchers)]   # (token, blocks)
        self.pending_blocks: list = [[] for _ in range(self.stitchers)]
        self.tokens = [0] * self.stitchers
        self.fences = 0
        self.n = dict(patches=0, update_only=0, merges=0, leaves_made=0, inner_made=0, root_changes=0,
                      stale=0, freed_blocks=0)

    def statistics(self) -> PatchStats:
        return PatchStats(**self.n)

    # --- memory --------------------------------------------------------------------------------

    def mirror(self, dpa_off: int) -> int:
        return self.mirror_base + (dpa_off - self.dpa_base)

    def write(self, host_off: int, data: bytes) -> None:
        copy_lines(self.hb, host_off, np.frombuffer(data, np.uint8), 0, len(data), self.locks, False)

    def word(self, dpa_off: int) -> int:
        return int(self.hw[self.mirror(dpa_off) // 8])

    @property
    def root(self) -> int:
        return self.word(self.dpa_base + L.CTL_ROOT * 8)

    def inner(self, ptr: int):
        """(node bytes, flat pivots, flat children, child word offsets) of the mirror node ``ptr``
        points to (a node pointer: for the B+-tree it carries the count, :mod:`.inner`)."""
        off = self.fmt.address(ptr)
        pivots, children, rel, nbytes = self.fmt.read(self.hb, self.mirror(off), ptr)
        return nbytes, pivots, children, [off + w for w in rel]

    def is_inner(self, ptr: int) -> bool:
        return self.fmt.is_inner(self.hb, self.mirror(self.fmt.address(ptr)), ptr)

    def descend(self, key: int):
        """[(node pointer, index of the child taken, that child's word)] from the root, and the leaf."""
        path = []
        node = self.root
        while self.is_inner(node):
            _, pivots, children, where = self.inner(node)
            i = max(bisect_right(pivots, key) - 1, 0)
            path.append((node, i, where[i]))
            node = children[i]
        return path, node

    def leaf_pairs(self, meta: L.LeafMeta):
        """The leaf's keys and value bytes from its host arrays."""
        g = self.geo
        ko, vo = gaddr_offset(meta.keys_addr), gaddr_offset(meta.values_addr)
        keys = np.frombuffer(self.hb[ko:ko + 8 * meta.count].tobytes(), "<u8").tolist()
        raw = self.hb[vo:vo + meta.count * g.slot].tobytes()
        return keys, [g.decode(raw[i * g.slot:(i + 1) * g.slot]) for i in range(meta.count)]

    # --- building blocks -------------------------------------------------------------------------

    def _values_array(self, values) -> int:
        g = self.geo
        off = self.host_heap.alloc(g.host_values_bytes)
        buf = bytearray(g.host_values_bytes)
        for i, v in enumerate(values):
            buf[i * g.slot:(i + 1) * g.slot] = g.encode(v)
        self.write(off, bytes(buf))
        return off

    def new_leaf(self, low: int, keys, values, plan: "Plan") -> int:
        g = self.geo
        ko = self.host_heap.alloc(L.HOST_KEYS_BYTES)
        self.write(ko, np.asarray(keys, dtype="<u8").tobytes() if len(keys) else b"")
        vo = self._values_array(values)
        model = self.fmt.leaf_model(keys)
        off = self.dpa_heap.alloc(g.dpa_bytes)
        data = L.encode_leaf(g, low, model, len(keys), gaddr(self.host, ko), gaddr(self.host, vo))
        # only the metadata line crosses the copy path: a new leaf's insert buffer is empty, and
        # the stitcher empties it in place (a CLEAR) instead of copying 16 empty slots
        if plan.snapshot:
            self.place(off, data, plan, pla.LINE_BYTES)
            plan.clear(off)
        else:                       # a bulk load streams whole leaves, buffers and all (§4.2.7's 192 MB)
            self.place(off, data, plan, len(data))
        self.n["leaves_made"] += 1
        return off

    def leaves_of(self, low: int, keys, values, limit: int, plan: "Plan", *, bulk: bool = False) -> list:
        """(pivot, offset) of the leaves for sorted pairs, the first keeping ``low``: keys that fit
        one leaf stay one leaf (the parent needs one pointer swap), others are cut into pieces of at
        most ``limit`` keys, the retrain bound's room (the learned index's PLA pieces; the B+-tree's
        fully packed in a bulk load, else balanced)."""
        if not keys:
            return [(low, self.new_leaf(low, [], [], plan))]
        out = []
        for i, (start, size) in enumerate(self.fmt.leaf_pieces(keys, limit, bulk)):
            ks, vs = keys[start:start + size], values[start:start + size]
            pivot = low if i == 0 else ks[0]
            out.append((pivot, self.new_leaf(pivot, ks, vs, plan)))
        return out

    def inner_nodes(self, pivots, children, plan: "Plan", *, bulk: bool = False) -> list:
        """(pivot, node pointer) of the inner node(s) over these children, as the format cuts them
        (:meth:`.inner.InnerFormat.build`: learned, one node if the PLA fits 7 segments of 128,
        else (or in a bulk build) several, within the retrain bound unless bulk; B+-tree, fully
        packed nodes of 128 in a bulk build, else one node up to 128, balanced nodes of at most
        96 beyond)."""
        out = []
        for start, end, data in self.fmt.build(pivots, children, bulk):
            off = self.dpa_heap.alloc(len(data))
            self.place(off, data, plan, len(data))
            self.n["inner_made"] += 1
            out.append((pivots[start], self.fmt.pointer(off, end - start)))
        return out

    def place(self, off: int, data: bytes, plan: "Plan", n: int) -> None:
        """A new node's bytes into the mirror, and a COPY of its first ``n`` bytes. A patch copies
        from a snapshot taken now (freed with the plan's retired blocks, after the COPY ran): the
        mirror node may take pointer swaps of later patches before the stitcher copies it, and
        a copy of those would point at nodes the stitcher has not copied yet."""
        self.write(self.mirror(off), data)
        src = self.mirror(off)
        if plan.snapshot:
            src = self.host_heap.alloc(n)
            self.write(src, data[:n])
            plan.retire(self.host_heap, src, n)
        plan.copy(off, src, n)

    def connect(self, word_dpa_off: int, value: int, plan: "Plan") -> None:
        """The pointer swap: in the mirror now, in DPA memory when the stitch runs."""
        store_release(self.hw, self.mirror(word_dpa_off) // 8, value)
        plan.connect(word_dpa_off, value)

    # --- bulk load and empty tree ------------------------------------------------------------------

    def build(self, keys, values) -> "Plan":
        """The tree over sorted unique pairs (none: one empty leaf under a root), as stitches:
        leaves of up to 128 by the leaf PLA, inner levels bottom-up, the root pointer last."""
        plan = Plan(self, 0, snapshot=False)     # nothing changes the mirror while a bulk load runs
        if self.root:
            from nodes.systems.api import SystemGaveUp
            raise SystemGaveUp("dpa-store: a bulk load needs the empty store setup made; this one has a tree")
        level = self.leaves_of(0, list(keys), list(values), LEAF_CAPACITY, plan, bulk=True)
        while True:
            level = self.inner_nodes([p for p, _ in level], [o for _, o in level], plan, bulk=True)
            if len(level) == 1:
                break
        self.connect(self.dpa_base + L.CTL_ROOT * 8, level[0][1], plan)
        return plan

    # --- a patch ------------------------------------------------------------------------------------

    def patch_cost_ns(self, leaf: int) -> int:
        meta = L.read_leaf(self.hb, self.mirror(leaf))
        sw = self.software
        return sw.patch_ns + sw.patch_ns_per_key * (meta.count + L.BUFFER_SLOTS)

    def patch(self, leaf: int, raw: bytes) -> "Plan | None":
        """Apply one patch request (the leaf's DPA offset and its buffer's bytes)."""
        g = self.geo
        self.n["patches"] += 1
        meta = L.read_leaf(self.hb, self.mirror(leaf))
        path, found = self.descend(meta.low)
        if found != leaf:
            self.n["stale"] += 1
            return None
        newest: dict = {}
        for k, v in L.buffer_entries(raw, g):
            newest[k] = v
        keys, vals = self.leaf_pairs(meta)
        pos = {k: i for i, k in enumerate(keys)}
        part = path[0][1] % self.stitchers if path else 0
        plan = Plan(self, part)
        changes = any((v is None) == (k in pos) for k, v in newest.items())
        if not changes:
            self.n["update_only"] += 1
            updates = {pos[k]: v for k, v in newest.items() if v is not None}
            if g.slot <= pla.LINE_BYTES and pla.LINE_BYTES % g.slot == 0:
                vo = gaddr_offset(meta.values_addr)
                for i, v in updates.items():
                    self.write(vo + i * g.slot, g.encode(v))
            else:
                for i, v in updates.items():
                    vals[i] = v
                vo = self._values_array(vals)
                self.connect(leaf + 48, gaddr(self.host, vo), plan)       # the leaf's values word
                plan.retire(self.host_heap, gaddr_offset(meta.values_addr), g.host_values_bytes)
            plan.clear(leaf)
            return plan.done()
        self.n["merges"] += 1
        merged = dict(zip(keys, vals))
        for k, v in newest.items():
            if v is None:
                merged.pop(k, None)
            else:
                merged[k] = v
        mk = sorted(merged)
        new = self.leaves_of(meta.low, mk, [merged[k] for k in mk], split_limit(LEAF_CAPACITY, RETRAIN_BOUND),
                             plan)
        plan.retire(self.dpa_heap, leaf, g.dpa_bytes)
        plan.retire(self.host_heap, gaddr_offset(meta.keys_addr), L.HOST_KEYS_BYTES)
        plan.retire(self.host_heap, gaddr_offset(meta.values_addr), g.host_values_bytes)
        level = len(path) - 1
        if len(new) == 1:
            self.connect(path[level][2], new[0][1], plan)
            return plan.done()
        replace = new
        while True:
            node, i, _ = path[level]
            nbytes, pivots, children, _ = self.inner(node)
            pivots[i:i + 1] = [p for p, _ in replace]
            children[i:i + 1] = [o for _, o in replace]
            built = self.inner_nodes(pivots, children, plan)
            plan.retire(self.dpa_heap, self.fmt.address(node), nbytes)
            if level == 0:
                plan.fence = True
                self.n["root_changes"] += 1
                while len(built) > 1:
                    built = self.inner_nodes([p for p, _ in built], [o for _, o in built], plan)
                self.connect(self.dpa_base + L.CTL_ROOT * 8, built[0][1], plan)
                return plan.done()
            if len(built) == 1:
                self.connect(path[level - 1][2], built[0][1], plan)
                return plan.done()
            replace = built
            level -= 1

    # --- reclamation ------------------------------------------------------------------------------

    def reclaim(self) -> int:
        """Free every block whose retire token a stitcher reported safe; returns how many."""
        freed = 0
        for s in range(self.stitchers):
            safe = int(self.hw[self.ctl + L.HCTL_RECLAIMED + 8 * s])
            q = self.retired[s]
            while q and q[0][0] <= safe:
                for heap, off, size in q.popleft()[1]:
                    heap.release(off, size)
                    freed += 1
        self.n["freed_blocks"] += freed
        return freed


class Plan:
    """The stitches of one change, and where they go (see the module docstring)."""

    def __init__(self, tree: HostTree, part: int, snapshot: bool = True):
        self.tree, self.part, self.snapshot = tree, part, snapshot
        self.stitches: list = []
        self.blocks: list = []
        self.fence = False
        self.copied = 0

    def copy(self, dpa_off: int, host_off: int, n: int) -> None:
        self.stitches.append((OP_COPY, dpa_off, host_off, n))
        self.copied += n

    def connect(self, word: int, value: int) -> None:
        self.stitches.append((OP_CONNECT, word, value, 0))

    def clear(self, leaf: int) -> None:
        self.stitches.append((OP_CLEAR, leaf, 0, 0))

    def retire(self, heap, off: int, size: int) -> None:
        self.blocks.append((heap, off, size))

    def done(self) -> "Plan":
        """Queue the stitches (host side; the patcher's loop pushes them into the rings in order)."""
        t = self.tree
        s = 0 if self.fence else self.part
        body = list(self.stitches)
        if self.blocks:
            t.tokens[s] += 1
            t.retired[s].append((t.tokens[s], self.blocks))
            body.append((OP_RETIRE, t.tokens[s], 0, 0))
        if self.fence and t.stitchers > 1:
            t.fences += 1
            f = t.fences
            for other in range(1, t.stitchers):
                t.queues[other].append((OP_FENCE, f, 0, 0))
            t.queues[0].append((OP_FENCE, f, 0, 0))
            t.queues[0].extend(body)
            t.queues[0].append((OP_RELEASE, f, 0, 0))
        else:
            t.queues[s].extend(body)
        return self
