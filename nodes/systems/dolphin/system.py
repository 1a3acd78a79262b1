"""DolphinSystem: the System contract for Dolphin (setup on the rack owner, one client per thread)."""

from __future__ import annotations

from nodes.systems.api import Option, System, SystemGaveUp
from nodes.systems.lib.art import (
    ENTRIES_OFF, NODE_16, NODE_256, build_node, encode_entry, encode_leaf_entry, first_difference, node_bytes,
    setup_root, type_for,
)
from nodes.systems.lib.memory_nodes import memory_node_indexes
from shm.fabric import gaddr, gaddr_node, gaddr_offset

from .client import SPECIAL_DEPTH, DolphinClient
from .layout import MAX_VALUE_BYTES, RAW_VALUE, LeafFormat, key_num, leaf_bytes, num_key, rear_bytes

#: A bulk load puts up to one leaf's worth of keys of a prefix in one leaf, and splits a fuller
#: prefix into leaves of BULK_FILL / 4 of the slots: what a split leaves behind (3/4 of a full leaf),
#: so a bulk-loaded tree splits about as often under later inserts as an inserted one.
BULK_FILL = 3

LAYOUT_FORMAT = 1


class DolphinSystem(System):
    name = "dolphin"
    description = ("Dolphin: ART internal nodes cached on compute nodes over 1 KB B+-tree-like leaves of 65 "
                   "entries (a special node at depth 8 picks the leaf by range), updates as one in-place WRITE "
                   "inside an FAA-counted Spear bracket (2 round trips), inserts by CAS of an empty key slot")
    paper = ("An, Yang, Wang et al.: Dolphin: A Resource-Efficient Hybrid Index on Disaggregated Memory, "
             "MSST'24 (layouts from hust-anhang/Dolphin)")
    roles = ("compute", "memory")
    supports_scan = True
    options = (
        Option("cache_bytes", 64 << 20, "bytes of ART internal nodes the radix cache of a compute node holds "
               "(0: no cache, every walk READs from the root)", minimum=0, maximum=1 << 40),
        Option("value_bytes", 1024, "largest value a leaf's value slot holds: 8 gives the paper's raw 8-byte "
               "slots (1088-byte leaves; values exactly 8 B, not all zero); any other size gives slots of whole "
               "64-byte lines with per-line versions", minimum=1, maximum=MAX_VALUE_BYTES - 1),
        Option("local_lock", True, "the local lock table (SMART-ART's, which Dolphin reuses): a compute node's "
               "concurrent GETs of a key share one leaf READ and its UPDATEs of a key one value WRITE "
               "(nodes/systems/lib/local_lock.py)"),
        Option("leaf_writes", "any-order", "how an SMO rewrites a leaf readers may be reading without a lock: "
               "'ordered' as the paper (one WRITE, front version first and rear version last, correct only where "
               "a WRITE's lines land in ascending order: cx3-56g, cx5-100g), 'any-order' (rear version, body, "
               "front version, three WRITEs waited for one by one: correct on every profile, two more round trips "
               "per SMO)", choices=("any-order", "ordered")),
        Option("chunk_bytes", 1 << 20, "bytes of the chunks a client obtains from a memory node (one RPC each) "
               "and carves leaves and ART nodes out of", minimum=4096, maximum=1 << 30),
        Option("alloc_align", 64, "bytes every ART node (internal or special) is rounded up to: 64, dmrack's "
               "allocator unit, or 256 as Dolphin's code, which allocates nodes aligned to 2^ALLOC_ALLIGN_BIT = "
               "256 bytes (leaves unaligned): its memory footprint (Table II); a multiple of 64",
               minimum=64, maximum=4096, multiple_of=64),
    )

    @classmethod
    def footprint(cls, options: dict, capacity: int, key_bytes: int, value_bytes: int) -> int:
        """Leaves packed full (65 keys each; splits leave them fuller than 3/4 at most), for every
        key but the rack's sizing slack."""
        keys = max(0, int(capacity) - 1024)
        fmt = LeafFormat.of(int(options.get("value_bytes", 1024)))
        return -(-keys // fmt.slots) * fmt.units * 64

    @classmethod
    def setup(cls, fabric, memory_nodes: list[int], options: dict, capacity: int) -> dict:
        """Expose the memory nodes and put the ART root (a NODE_256 never replaced) on the first."""
        opts = cls.check_options(dict(options or {}), f"system {cls.name!r}")
        mns = memory_node_indexes(fabric, memory_nodes, "Dolphin")
        root = setup_root(fabric, mns, "Dolphin")
        return {
            "system": cls.name,
            "format": LAYOUT_FORMAT,
            "memory_nodes": mns,
            "root": root,
            "value_bytes": opts["value_bytes"],
            "leaf_writes": opts["leaf_writes"],
            "cache_bytes": opts["cache_bytes"],
            "chunk_bytes": opts["chunk_bytes"],
            "alloc_align": opts["alloc_align"],
            "capacity": int(capacity),
            "setup_bytes": node_bytes(NODE_256),
        }

    @classmethod
    def bulk_load(cls, fabric, layout: dict, pairs) -> None:
        """Write ``pairs`` (key bytes, value bytes) straight into the empty tree ``setup`` made:
        per 7-byte prefix one leaf, or leaves of 3/4 of their slots under a special node, round-robin
        over the memory nodes; then the ART over the prefixes (compressed partials, the smallest
        node type for each fan-out), built bottom-up so that the root's entries come last."""
        fmt = LeafFormat.of(int(layout["value_bytes"]))
        mns = layout["memory_nodes"]
        root = layout["root"]
        rmem = fabric.memory[gaddr_node(root)].host64
        rw = gaddr_offset(root) // 8 + 2
        if any(int(rmem[rw + i]) for i in range(256)):
            raise SystemGaveUp("Dolphin: a bulk load needs the empty tree setup made; this one holds keys")
        items = {}
        for key, value in pairs:
            key, value = bytes(key), bytes(value)
            if len(key) != 8:
                raise SystemGaveUp(f"Dolphin keys are exactly 8 bytes; got {len(key)}")
            fmt.check_value(value)
            k = key_num(key)
            if k in items:
                raise SystemGaveUp(f"Dolphin: bulk load of key {key.hex()} twice")
            items[k] = (key, value)
        if not items:
            return
        mn_of = {m: i for i, m in enumerate(mns)}
        rr = [0]

        align = int(layout.get("alloc_align", 64))

        def place(size: int, unit: int = 64) -> int:
            """Allocate ``size`` bytes in whole ``unit``s (64: leaves; ``alloc_align``: nodes)."""
            m = mns[rr[0] % len(mns)]
            rr[0] += 1
            try:
                return gaddr(m, fabric.allocate(m, -(-size // unit) * unit))
            except MemoryError as e:
                raise SystemGaveUp(f"Dolphin: bulk load: memory node {fabric.nodes[m].name} is full ({e}); "
                                   f"give the memory nodes more memory") from None

        def write(addr: int, data: bytes) -> None:
            off = gaddr_offset(addr)
            fabric.memory[gaddr_node(addr)].host[off:off + len(data)] = memoryview(data)

        def leaf_entry(partial: int, addr: int) -> int:
            return encode_leaf_entry(partial, mn_of[gaddr_node(addr)], gaddr_offset(addr))

        def node_entry(partial: int, addr: int, t: int) -> int:
            return encode_entry(partial, mn_of[gaddr_node(addr)], t, gaddr_offset(addr))

        # leaves, per prefix: (prefix key, [(leaf addr, min)], ...)
        keys = sorted(items)
        prefixes = []
        i = 0
        per_leaf = max(1, fmt.slots * BULK_FILL // 4)
        while i < len(keys):
            p = keys[i] >> 8
            j = i
            while j < len(keys) and keys[j] >> 8 == p:
                j += 1
            group = keys[i:j]
            chunks = [group] if len(group) <= fmt.slots else [group[a:a + per_leaf]
                                                              for a in range(0, len(group), per_leaf)]
            leaves = []
            for c, chunk in enumerate(chunks):
                lo = p << 8 if c == 0 else chunk[0]
                hi = (chunks[c + 1][0] - 1) if c + 1 < len(chunks) else (p << 8) | 0xFF
                addr = place(fmt.size)
                entries = [(items[k][0], fmt.encode_slot(items[k][0], items[k][1], 1)) for k in chunk]
                write(addr, leaf_bytes(fmt, rev_ptr=0, version=1, node_id=gaddr_offset(addr) // 64, lo=lo, hi=hi,
                                       entries=entries))
                write(addr + fmt.rear_off, rear_bytes(1))
                leaves.append((addr, lo))
            prefixes.append((num_key(p << 8), leaves))
            i = j

        def set_rev(addr: int, entry_addr: int) -> None:
            write(addr, entry_addr.to_bytes(8, "little"))

        def subtree(group: list, pd: int, byte: int) -> tuple[int, list]:
            """The entry word for ``group`` (prefixes sharing bytes 0..pd) under a parent at depth
            ``pd``, and the addresses whose rev_ptr is the parent entry's (set once it is known)."""
            if len(group) == 1:
                pkey, leaves = group[0]
                if len(leaves) == 1:
                    return leaf_entry(byte, leaves[0][0]), [leaves[0][0]]
                t = max(NODE_16, type_for(len(leaves)))
                addr = place(node_bytes(t), align)
                img = build_node(addr, t, SPECIAL_DEPTH, pkey[pd + 1:SPECIAL_DEPTH], 0,
                                 [leaf_entry(lo & 0xFF, a) for a, lo in leaves])
                write(addr, img.pack())
                for a, lo in leaves:
                    slot = (lo & 0xFF) if t == NODE_256 else [x for x, _ in leaves].index(a)
                    set_rev(a, img.entry_addr(slot))
                return node_entry(byte, addr, t), [addr]
            j = first_difference(group[0][0], group[-1][0], pd + 1)
            kids = {}
            for g in group:
                kids.setdefault(g[0][j], []).append(g)
            t = type_for(len(kids))
            addr = place(node_bytes(t), align)
            img = build_node(addr, t, j, group[0][0][pd + 1:j], 0, [])
            for s_, (b, sub) in enumerate(sorted(kids.items())):
                slot = b if t == NODE_256 else s_
                word, below = subtree(sub, j, b)
                img.entries[slot] = word
                for a in below:
                    set_rev(a, img.entry_addr(slot))
            write(addr, img.pack())
            return node_entry(byte, addr, t), [addr]

        by_first = {}
        for g in prefixes:
            by_first.setdefault(g[0][0], []).append(g)
        for b, sub in sorted(by_first.items()):
            word, below = subtree(sub, 0, b)
            ea = root + ENTRIES_OFF + 8 * b
            for a in below:
                set_rev(a, ea)
            rmem[rw + b] = word

    @classmethod
    def client(cls, fabric, layout: dict, thread, options: dict) -> DolphinClient:
        if layout.get("system") != cls.name or layout.get("format") != LAYOUT_FORMAT:
            raise SystemGaveUp(f"Dolphin: layout is not a Dolphin layout of format {LAYOUT_FORMAT}: "
                               f"{layout.get('system')!r}/{layout.get('format')!r}")
        return DolphinClient(fabric, layout, thread, cls.check_options(dict(options or {}), f"system {cls.name!r}"))


__all__ = ["DolphinSystem", "RAW_VALUE"]
