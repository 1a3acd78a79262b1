"""MarlinSystem: the System contract for Marlin (docs/marlin.md).

Setup is Sherman's (root word, an empty root leaf, HOCL tables for the internal nodes, the epoch
table): an empty Sherman leaf is byte for byte an empty Marlin leaf (every entry's item word 0,
the Spear word 0). So is the bulk load, with Marlin leaves and a data item per key. Options are Sherman's that still mean something once the leaves are Spear's,
plus ``cache_bytes`` (the index cache as a byte budget, what Dolphin's cache-size sweep varies)
and Marlin's deliberate bugs.
"""

from __future__ import annotations

from nodes.systems.api import Option
from nodes.systems.sherman.layout import LINE, NODE_BYTES
from shm.fabric import gaddr
from nodes.systems.sherman.system import BULK_FILL, ShermanSystem

from .client import MarlinClient
from .layout import LEAF_SLOTS, MAX_VALUE, item_image, item_units, item_word, leaf_entries, leaf_image

#: Sherman's options that apply to Marlin (the HOCL ones lock internal nodes only).
_KEPT = ("chunk_bytes", "cache_nodes", "max_handover", "lock_slots", "lock_memory", "hierarchical")


class MarlinSystem(ShermanSystem):
    name = "marlin"
    description = ("Marlin: Sherman's B-link tree (1 KB nodes, index cache of internal nodes) whose leaf entries "
                   "point to out-of-place data items changed by CAS, with IDUs and splits of a leaf ordered by "
                   "the FAA-only ternary-state Spear lock in the leaf (IDUs concurrent, splits exclusive)")
    paper = ("Wang et al., Marlin: A Concurrent and Write-Optimized B+-tree Index on Disaggregated Memory, "
             "ICPP'23 (no public code; rebuilt from Sherman and Dolphin's Spear code, MSST'24)")
    client_class = MarlinClient
    max_value = MAX_VALUE
    #: Marlin's leaves are its own (marlin/layout.py: one entry per line, item pointers), set up
    #: from Sherman's empty per-line leaf; Sherman's ``leaf_layout`` option is not among _KEPT.
    leaf_layout_default = "per-line"
    options = tuple(o for o in ShermanSystem.options if o.name in _KEPT) + (
        Option("cache_bytes", 0, "bytes of index cache per compute node (cached internal nodes x 1024 B, as "
               "Sherman's code sizes its cache); 0: cache_nodes decides", minimum=0, maximum=1 << 40),
        Option("fault", "none", "a deliberate bug, to prove that dmrack check catches it: 'retire-new-item' "
               "retires the item an update just published instead of the one it replaced (a live "
               "item is reused: use after free); 'smo-skips-drain' lets a split write the leaf without "
               "waiting for the IDUs inside it (their CASes are lost under the split's WRITE)",
               choices=("none", "retire-new-item", "smo-skips-drain")),
    )

    @classmethod
    def footprint(cls, options: dict, capacity: int, key_bytes: int, value_bytes: int) -> int:
        """Leaves packed full (45 entries per 1 KB node) and one data item per key, for every key
        but the rack's sizing slack (1024 keys)."""
        keys = max(0, int(capacity) - 1024)
        return -(-keys // LEAF_SLOTS) * NODE_BYTES + keys * item_units(int(value_bytes)) * LINE

    @classmethod
    def bulk_leaf_entries(cls, fmt=None) -> int:
        """31 of a Marlin leaf's 45 entries (Sherman's BULK_FILL, whatever Sherman format the setup
        named: Marlin's leaves are its own)."""
        return int(LEAF_SLOTS * BULK_FILL + 0.5)

    @classmethod
    def bulk_leaf_holds_keys(cls, leaf, fmt=None) -> bool:
        return bool(leaf_entries(leaf, 0))

    @classmethod
    def bulk_leaf(cls, fabric, mns, write, i, group, low, high, sibling, fmt=None):
        """Sherman's bulk load with Marlin leaves: every value in a data item of its own, allocated
        round-robin over the memory nodes; entries keyed (no pending entry)."""
        entries = []
        for j, (_, key, value) in enumerate(group):
            m = mns[(i + j) % len(mns)]
            units = item_units(len(value))
            off = fabric.allocate(m, units * LINE)
            write(gaddr(m, off), item_image(key, value))
            entries.append((key, item_word(units, m, off)))
        return leaf_image(1, low, high, sibling, entries)

    @classmethod
    def setup(cls, fabric, memory_nodes: list[int], options: dict, capacity: int) -> dict:
        layout = super().setup(fabric, memory_nodes, options, capacity)
        layout["cache_bytes"] = cls.check_options(dict(options or {}), cls.where())["cache_bytes"]
        return layout
