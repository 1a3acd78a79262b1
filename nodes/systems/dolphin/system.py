"""DolphinSystem: the System contract for Dolphin (setup on the rack owner, one client per thread)."""

from __future__ import annotations

from nodes.systems.api import Option, System, SystemError_
from nodes.systems.lib.art import MAX_INTERNAL_MN, NODE_256, create_root, node_bytes

from .client import DolphinClient
from .layout import MAX_VALUE_BYTES, RAW_VALUE, LeafFormat

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
        Option("chunk_bytes", 1 << 20, "bytes of the chunks a client obtains from a memory node (one RPC each) "
               "and carves leaves and ART nodes out of", minimum=4096, maximum=1 << 30),
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
        mns = [fabric.node_index(m) for m in memory_nodes]
        if not mns:
            raise SystemError_("Dolphin needs at least one memory node")
        if len(mns) > MAX_INTERNAL_MN + 1:
            raise SystemError_(f"Dolphin: ART entries name at most {MAX_INTERNAL_MN + 1} memory nodes (mn_id:4); "
                               f"the rack has {len(mns)}")
        for m in mns:
            fabric.expose(m)
        try:
            root = create_root(fabric, mns[0])
        except MemoryError as e:
            raise SystemError_(f"Dolphin: the ART root does not fit memory node {mns[0]}: {e}") from None
        return {
            "system": cls.name,
            "format": LAYOUT_FORMAT,
            "memory_nodes": mns,
            "root": root,
            "value_bytes": opts["value_bytes"],
            "cache_bytes": opts["cache_bytes"],
            "chunk_bytes": opts["chunk_bytes"],
            "capacity": int(capacity),
            "setup_bytes": node_bytes(NODE_256),
        }

    @classmethod
    def client(cls, fabric, layout: dict, thread, options: dict) -> DolphinClient:
        if layout.get("system") != cls.name or layout.get("format") != LAYOUT_FORMAT:
            raise SystemError_(f"Dolphin: layout is not a Dolphin layout of format {LAYOUT_FORMAT}: "
                               f"{layout.get('system')!r}/{layout.get('format')!r}")
        return DolphinClient(fabric, layout, thread, cls.check_options(dict(options or {}), f"system {cls.name!r}"))


__all__ = ["DolphinSystem", "RAW_VALUE"]
