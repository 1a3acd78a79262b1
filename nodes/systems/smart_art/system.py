"""SMART-ART's System: options, setup (the root), the bulk load and the client (the design is in
:mod:`.client` and :mod:`.layout`)."""

from __future__ import annotations

from nodes.systems.api import Option, System, SystemGaveUp
from nodes.systems.lib.alloc import UNIT
from nodes.systems.lib.art import (
    ENTRIES_OFF, NODE_256, NodeImage, encode_entry, encode_header, encode_leaf_entry,
    first_difference, node_units, setup_root, slot_units, type_for,
)
from nodes.systems.lib.memory_nodes import memory_node_indexes
from shm.fabric import gaddr, gaddr_node, gaddr_offset

from .client import SmartArtClient
from .layout import KEY_BYTES, MAX_LEAF_BYTES, MAX_VALUE, KeySizeError, ValueTooLarge, leaf_image, leaf_units

LAYOUT_FORMAT = 1


class SmartArtSystem(System):
    name = "smart-art"
    description = ("SMART-ART: adaptive radix tree on one-sided verbs (ART nodes 4..256 with compressed prefixes, "
                   "lock-free slot CAS, one leaf per KV with checksum and lock, compute-side radix cache under a "
                   "byte budget, reverse pointers, read delegation and write combining)")
    paper = ("Luo, Zuo, Shen, Zhang, Feng, Chen, Chen, Hua, Lu: SMART: A High-Performance Adaptive Radix Tree "
             "for Disaggregated Memory, OSDI'23")
    roles = ("compute", "memory")
    supports_scan = True
    options = (
        Option("cache_bytes", 64_000_000, "bytes of the radix cache of internal nodes per compute node (shared by "
               "its threads; an entry costs what SMART's code counts: 26 B + 8 B a slot); 0: no cache, every walk "
               "starts at the root",
               minimum=0, maximum=1 << 40),
        Option("chunk_bytes", 1 << 20, "bytes of the chunks a client obtains from a memory node (one RPC each) "
               "and carves nodes and leaves out of (at least the largest leaf)", minimum=MAX_LEAF_BYTES,
               maximum=1 << 30),
        Option("local_lock", True, "the local lock table: same-key GETs of a compute node share one remote read "
               "(read delegation) and same-key UPDATEs write only the last value (write combining); false: "
               "every request goes remote (an ablation)"),
        Option("full_nodes", False, "allocate every internal node at NODE_256 size (2112 B), as SMART's code does "
               "to grow nodes in place: its memory footprint (Dolphin's Table II); nodes still grow out of place "
               "and are READ at their type's size"),
        Option("alloc_align", UNIT, "bytes every allocation (a leaf, a node) is rounded up to: 64, dmrack's "
               "allocator unit, or 256 as SMART's code, whose LocalAllocator starts every allocation at a "
               "2^ALLOC_ALLIGN_BIT = 256-byte boundary: its memory footprint (Dolphin's Table II); READs keep "
               "their sizes; a multiple of 64", minimum=UNIT, maximum=4096, multiple_of=UNIT),
        Option("fault", "none", "a deliberate bug, to prove that dmrack check catches it: 'skip-checksum' takes a "
               "leaf READ without checking its checksum (a READ torn by an in-place update is returned); "
               "'entry-decides' publishes an out-of-place update by the entry CAS before the old leaf is marked "
               "dead (a stale cached reader or an in-place writer still uses the old leaf); 'eager-delegation' "
               "lets a GET take the result of any same-key read in flight on its node, also one that read before "
               "the GET was invoked",
               choices=("none", "skip-checksum", "entry-decides", "eager-delegation")),
    )

    @classmethod
    def footprint(cls, options: dict, capacity: int, key_bytes: int, value_bytes: int) -> int:
        """One leaf per key (its 64-byte units, in whole ``alloc_align`` slots), for every key but
        the rack's sizing slack (1024 keys); internal nodes not counted (a lower bound)."""
        align = int((options or {}).get("alloc_align", UNIT)) // UNIT
        return max(0, int(capacity) - 1024) * slot_units(leaf_units(int(value_bytes)), align) * UNIT

    @classmethod
    def setup(cls, fabric, memory_nodes: list[int], options: dict, capacity: int) -> dict:
        """The root (a NODE_256 that is never replaced) on the first memory node."""
        opts = cls.check_options(dict(options or {}), f"system {cls.name!r}")
        mns = memory_node_indexes(fabric, memory_nodes, "SMART-ART")
        root = setup_root(fabric, mns, "SMART-ART")
        return {
            "system": cls.name,
            "format": LAYOUT_FORMAT,
            "memory_nodes": mns,
            "root": root,
            "chunk_bytes": opts["chunk_bytes"],
            "cache_bytes": opts["cache_bytes"],
            "local_lock": opts["local_lock"],
            "full_nodes": opts["full_nodes"],
            "alloc_align": opts["alloc_align"],
            "capacity": int(capacity),
            "setup_bytes": node_units(NODE_256) * UNIT,
        }

    @classmethod
    def memory_use(cls, layout: dict, stats_by_node: dict):
        """The default (caches, clients' blocks, setup) plus what a bulk load wrote."""
        use = super().memory_use(layout, stats_by_node)
        if use is None:
            return None
        bulk = max((getattr(r, "bulk_bytes", 0) for recs in stats_by_node.values() for r in recs if r is not None),
                   default=0)
        return use._replace(memory_bytes=use.memory_bytes + bulk)

    @classmethod
    def bulk_load(cls, fabric, layout: dict, pairs) -> None:
        """Build the tree of ``pairs`` (key bytes, value bytes) straight into the memory nodes, as
        inserts would have left it up to the order of slots: under the root, per group of keys
        sharing a prefix, the smallest node type that holds its children, at the depth where they
        differ (partial = the bytes in between); one leaf per key with its ``rev_ptr`` set. Nodes
        and leaves go round-robin over the memory nodes. Only into the empty tree ``setup`` made."""
        mns = layout["memory_nodes"]
        root = layout["root"]
        rnode, roff = gaddr_node(root), gaddr_offset(root)
        host = fabric.memory[rnode].host64
        if host[roff // 8 + 2: roff // 8 + 2 + 256].any():
            raise SystemGaveUp("SMART-ART: a bulk load needs the empty tree setup made; this one holds keys")
        items = []
        for key, value in pairs:
            key, value = bytes(key), bytes(value)
            if len(key) != KEY_BYTES:
                raise KeySizeError(f"SMART-ART keys are exactly {KEY_BYTES} bytes; got {len(key)}")
            if len(value) > MAX_VALUE:
                raise ValueTooLarge(f"SMART-ART values are at most {MAX_VALUE} bytes; got {len(value)}")
            items.append((key, value))
        items.sort(key=lambda kv: kv[0])
        for a, b in zip(items, items[1:]):
            if a[0] == b[0]:
                raise SystemGaveUp(f"SMART-ART: bulk load of key {a[0]!r} twice")
        mn_id = {n: i for i, n in enumerate(mns)}
        align = int(layout.get("alloc_align", UNIT)) // UNIT
        total = 0
        turn = 0

        def place(nbytes: int) -> int:
            nonlocal turn, total
            node = mns[turn % len(mns)]
            turn += 1
            try:
                off = fabric.allocate(node, nbytes)
            except MemoryError as e:
                raise SystemGaveUp(f"SMART-ART: bulk load: {e}") from None
            total += nbytes
            return gaddr(node, off)

        def write(addr: int, raw: bytes) -> None:
            off = gaddr_offset(addr)
            fabric.memory[gaddr_node(addr)].host[off:off + len(raw)] = memoryview(raw)

        def leaf_entry(byte: int, addr: int) -> int:
            return encode_leaf_entry(byte, mn_id[gaddr_node(addr)], gaddr_offset(addr))

        def build(group, lo: int, hi: int, pd: int, byte: int, entry_addr: int) -> int:
            """The entry (for key byte ``byte`` under a node at depth ``pd``) of keys lo..hi-1."""
            if hi - lo == 1:
                key, value = group[lo]
                units = leaf_units(len(value))
                addr = place(slot_units(units, align) * UNIT)
                write(addr, leaf_image(key, value, units, entry_addr))
                return leaf_entry(byte, addr)
            first, last = group[lo][0], group[hi - 1][0]
            j = first_difference(first, last, pd + 1)
            children = []                              # (byte, lo, hi)
            i = lo
            while i < hi:
                b = group[i][0][j]
                k = i
                while k < hi and group[k][0][j] == b:
                    k += 1
                children.append((b, i, k))
                i = k
            t = type_for(len(children))
            addr = place(slot_units(node_units(NODE_256 if layout.get("full_nodes") else t), align) * UNIT)
            slots = [0] * (1 << (t + 1))
            for n, (b, clo, chi) in enumerate(children):
                slot = b if t == NODE_256 else n
                slots[slot] = build(group, clo, chi, j, b, addr + ENTRIES_OFF + 8 * slot)
            img = NodeImage(addr, t, entry_addr, encode_header(j, t, first[pd + 1:j]), slots)
            write(addr, img.pack())
            return encode_entry(byte, mn_id[gaddr_node(addr)], t, gaddr_offset(addr))

        i = 0
        entries = {}
        while i < len(items):
            b = items[i][0][0]
            k = i
            while k < len(items) and items[k][0][0] == b:
                k += 1
            entries[b] = build(items, i, k, 0, b, root + ENTRIES_OFF + 8 * b)
            i = k
        # counted where the clients' records can say it (the compute node that ran the load
        # holds this layout dict; System.memory_use takes the largest record's figure)
        layout["bulk_bytes"] = int(layout.get("bulk_bytes", 0)) + total
        for b, e in entries.items():                   # the root's entries last: a walker finds whole subtrees
            host[roff // 8 + 2 + b] = e

    @classmethod
    def client(cls, fabric, layout: dict, thread, options: dict) -> SmartArtClient:
        if layout.get("system") != cls.name or layout.get("format") != LAYOUT_FORMAT:
            raise SystemGaveUp(f"SMART-ART: layout is not a SMART-ART layout of format {LAYOUT_FORMAT}: "
                               f"{layout.get('system')!r}/{layout.get('format')!r}")
        return SmartArtClient(fabric, layout, thread, cls.check_options(dict(options or {}), f"system {cls.name!r}"))
