"""ShermanSystem: the System contract for Sherman (setup on the rack owner, one client per thread)."""

from __future__ import annotations

from nodes.systems.api import Option, System, SystemGaveUp
from nodes.systems.lib.hocl import FIELD_BITS, lock_table_slots, setup_lock_tables
from nodes.systems.lib.reclaim import epochs_bytes, setup_epochs
from nodes.systems.lib.memory_nodes import memory_node_indexes
from shm.fabric import REGION_DEVICE, REGION_HOST, gaddr, gaddr_node, gaddr_offset

from .client import ShermanClient
from .layout import (
    LINE, MAX_NODE, MAX_VALUE, NODE_BYTES, KeySizeError, PerLineLeaf, ValueTooLarge, block_image, block_units,
    internal_image, key_int, leaf_format, pack_root, unpack_root,
)

#: A bulk load fills leaves and internal nodes to about 70 %: what a B+-tree grown by random
#: inserts holds on average (ln 2 of its slots, Yao, "On random 2-3 trees", 1978), so that a
#: bulk-loaded tree splits about as often under later inserts as an inserted one.
BULK_FILL = 0.7
BULK_INTERNAL_KEYS = 31           # of INTERNAL_KEYS = 45


def bulk_leaf_entries(fmt) -> int:
    """Entries per bulk-loaded leaf of a leaf format: 11 of the per-line leaf's 15, 38 of the
    packed leaf's 54."""
    return int(fmt.slots * BULK_FILL + 0.5)


BULK_LEAF_ENTRIES = bulk_leaf_entries(PerLineLeaf)

LAYOUT_FORMAT = 2                 # 2: the layout names its leaf format (leaf_layout)


class ShermanSystem(System):
    name = "sherman"
    description = ("Sherman: write-optimised B+-tree on one-sided verbs (1 KB nodes, B-link fences and siblings, "
                   "compute-side index cache, HOCL locks in NIC memory with local hand-over, per-line versions, "
                   "write-back + unlock in one doorbell)")
    paper = ("Wang, Lu, Shu: Sherman: A Write-Optimized Distributed B+Tree Index on Disaggregated Memory, "
             "SIGMOD'22 (per-line versions as SMART's Sherman+)")
    roles = ("compute", "memory")
    supports_scan = True
    client_class = ShermanClient        # SMART-BT plugs in its own client here
    #: The leaf format when the system has no ``leaf_layout`` option (SMART-BT's Sherman+ and
    #: Marlin's leaves are per-line).
    leaf_layout_default = "packed"
    options = (
        Option("chunk_bytes", 1 << 20, "bytes of the chunks a client obtains from a memory node (one RPC each) "
               "and carves tree nodes and value blocks out of", minimum=4096, maximum=1 << 30),
        Option("cache_nodes", 16384, "internal nodes the index cache of a compute node holds (0: no cache, every "
               "descent READs the path)", minimum=0, maximum=1 << 24),
        Option("max_handover", 8, "times in a row a lock is handed to a waiting thread of the same compute node "
               "before it is released remotely (0: no hand-over)", minimum=0, maximum=1 << 16),
        Option("leaf_layout", "packed", "the leaf format: 'packed' (Sherman's own code: 54 entries of 18 B in a "
               "1 KB leaf, front/rear node versions and f/r entry versions, an entry write-back of 18 B) or "
               "'per-line' (SMART's Sherman+: one 64 B entry per line and the node version on every line, 15 "
               "entries, a write-back of 64 B)", choices=("packed", "per-line")),
        Option("lock_slots", 8192, "16-bit HOCL locks per memory node in NIC device memory (tree nodes hash onto "
               "them; 2 bytes each)", minimum=4, maximum=1 << 16),
        Option("lock_memory", "device", "where the HOCL lock tables are: 'device' (the memory node's NIC on-chip "
               "memory, Sherman's design) or 'host' (its DRAM: every lock CAS is a PCIe read-modify-write; an "
               "ablation)", choices=("device", "host")),
        Option("hierarchical", True, "the local tier of HOCL: threads of a compute node queue for a lock in its "
               "local lock table and hand it over (false: every coroutine CASes the remote lock; an ablation)"),
        Option("combine", True, "command combination: the unlock WRITE goes in the write-back's doorbell (false: "
               "after the write-back has completed, one more round trip holding the lock; an ablation)"),
        Option("entry_writes", True, "two-level versions: an update, insert or delete writes back its 64-byte "
               "entry line (false: the whole 1 KB leaf, as a node-versioned tree does; an ablation)"),
        Option("local_lock", False, "SMART's local lock table per compute node (lib/local_lock.py): same-key gets "
               "share one leaf READ (read delegation) and same-key updates of inline values write only the last "
               "value (write combining). Not in Sherman's code; CHIME's build of its Sherman baseline turns it on "
               "(docs/sherman.md, 'One memory node')"),
        Option("lock_free_reads", True, "a get trusts the versions of the leaf it READs (false: it READs the leaf's "
               "lock word with it and reads again while the lock is held, as a tree whose lock is in the node "
               "header does; an ablation)"),
        Option("fault", "none", "a deliberate bug, to prove that dmrack check catches it: 'unlock-before-write' "
               "releases a leaf's lock before the entry's write-back (lost and overwritten entries); "
               "'retire-new-block' retires the out-of-line value block an update or insert just published "
               "instead of the one it replaced, so a live value is reused under its entry (use after free; only "
               "values over 48 B have blocks); 'value-after-entry' WRITEs an out-of-line value's block behind the "
               "entry that points to it, in the same doorbell (it lands nanoseconds after the entry on the same QP: "
               "a window only dmrack check --chaos opens wide enough to see); 'value-after-unlock' WRITEs it "
               "only once the entry and the unlock completed (a window of one round trip)",
               choices=("none", "unlock-before-write", "retire-new-block", "value-after-entry",
                        "value-after-unlock")),
    )

    @classmethod
    def leaf_layout_of(cls, options: dict):
        """The leaf format class (layout.PackedLeaf / PerLineLeaf) the options choose."""
        return leaf_format((options or {}).get("leaf_layout", cls.leaf_layout_default))

    @classmethod
    def footprint(cls, options: dict, capacity: int, key_bytes: int, value_bytes: int) -> int:
        """Leaves filled up (54 entries per packed 1 KB leaf, 15 per-line; splits leave them half
        full, so a run needs more), plus an out-of-line block per key for values longer than the
        leaf's inline field (8 B packed, 48 B per-line), for every key but the rack's sizing slack
        (1024 keys)."""
        fmt = cls.leaf_layout_of(options)
        keys = max(0, int(capacity) - 1024)
        blocks = block_units(int(value_bytes)) * LINE if int(value_bytes) > fmt.inline else 0
        return -(-keys // fmt.slots) * NODE_BYTES + keys * blocks

    @classmethod
    def setup(cls, fabric, memory_nodes: list[int], options: dict, capacity: int) -> dict:
        """Expose the memory nodes, carve a HOCL lock table out of each one's NIC device memory,
        and put the root word and an empty root leaf on the first memory node."""
        opts = cls.check_options(dict(options or {}), cls.where())
        mns = memory_node_indexes(fabric, memory_nodes, "Sherman")
        for m in mns:
            if m > MAX_NODE:
                raise SystemGaveUp(f"Sherman: memory node {fabric.nodes[m].name!r} is fabric node {m}; the root word "
                                   f"holds 8 bits of node number, so memory nodes must be among the first "
                                   f"{MAX_NODE + 1} nodes")
            fabric.expose(m)
        slots = lock_table_slots(opts["lock_slots"])
        lock_bytes = slots * FIELD_BITS // 8
        try:
            region = REGION_DEVICE if opts["lock_memory"] == "device" else REGION_HOST
            locks = setup_lock_tables(fabric, mns, slots, region)
            root_word = fabric.allocate(mns[0], 64)
            leaf = fabric.allocate(mns[0], NODE_BYTES)
        except MemoryError as e:
            raise SystemGaveUp(f"Sherman: {e} (lower the option lock_slots: {lock_bytes} B of device memory per "
                               f"memory node were asked)") from None
        fmt = cls.leaf_layout_of(opts)
        mem = fabric.memory[mns[0]]
        mem.host[leaf:leaf + NODE_BYTES] = memoryview(fmt.image(1, 0, None, 0, []))
        mem.host64[root_word // 8] = pack_root(gaddr(mns[0], leaf), 0)
        try:
            epochs = setup_epochs(fabric, mns[0])
        except MemoryError as e:
            raise SystemGaveUp(f"{cls.client_class.NAME}: the epoch table does not fit memory node {mns[0]}: "
                               f"{e}") from None
        return {
            "system": cls.name,
            "format": LAYOUT_FORMAT,
            "memory_nodes": mns,
            "root": gaddr(mns[0], root_word),
            "locks": locks,
            "lock_slots": slots,
            "lock_region": region,
            "leaf_layout": fmt.name,
            "chunk_bytes": opts["chunk_bytes"],
            "cache_nodes": opts["cache_nodes"],
            "capacity": int(capacity),
            "epochs": epochs,
            # memory-node host memory setup carved (the root word's line, the root leaf, the epoch
            # table); the lock tables sit in the NICs' device memory and are not counted
            "setup_bytes": 64 + NODE_BYTES + epochs_bytes(epochs),
        }

    @classmethod
    def bulk_load(cls, fabric, layout: dict, pairs) -> None:
        """Build the tree of ``pairs`` (key bytes, value bytes) straight into the memory nodes:
        sorted leaves of :meth:`bulk_leaf_entries` entries round-robin over the memory nodes,
        chained by siblings with fences, internal levels of :data:`BULK_INTERNAL_KEYS` keys up to
        one root, the root word last; values over 48 B in out-of-line blocks. Only into the empty
        tree ``setup`` made (SystemGaveUp otherwise)."""
        name = cls.client_class.NAME
        mns = layout["memory_nodes"]
        root_word = layout["root"]
        rnode, roff = gaddr_node(root_word), gaddr_offset(root_word)
        root_addr, root_level = unpack_root(int(fabric.memory[rnode].host64[roff // 8]))
        first = fabric.memory[gaddr_node(root_addr)].host
        fo = gaddr_offset(root_addr)
        fmt = leaf_format(layout.get("leaf_layout", "per-line"))
        if root_level != 0 or cls.bulk_leaf_holds_keys(memoryview(first[fo:fo + NODE_BYTES]), fmt):
            raise SystemGaveUp(f"{name}: a bulk load needs the empty tree setup made; this one holds keys")
        items = []
        for key, value in pairs:
            if len(key) != 8:
                raise KeySizeError(f"{name}: keys are 8 bytes; got {len(key)}")
            if len(value) > cls.max_value:
                raise ValueTooLarge(f"{name} values are at most {cls.max_value} bytes; got {len(value)}")
            items.append((key_int(key), key, value))
        items.sort(key=lambda it: it[0])
        for a, b in zip(items, items[1:]):
            if a[0] == b[0]:
                raise SystemGaveUp(f"{name}: bulk load of key {a[1]!r} twice")
        if not items:
            return

        def place(count: int) -> list[int]:
            """Addresses of ``count`` new nodes, round-robin over the memory nodes."""
            per = [count // len(mns) + (1 if i < count % len(mns) else 0) for i in range(len(mns))]
            base = {m: fabric.allocate(m, n * NODE_BYTES) for m, n in zip(mns, per) if n}
            used = dict.fromkeys(base, 0)
            out = []
            for i in range(count):
                m = mns[i % len(mns)]
                out.append(gaddr(m, base[m] + used[m] * NODE_BYTES))
                used[m] += 1
            return out

        def write(addr: int, img) -> None:
            off = gaddr_offset(addr)
            fabric.memory[gaddr_node(addr)].host[off:off + len(img)] = memoryview(img)

        def build(groups: list, image) -> list:
            """One level: a node per group, ``image(i, group, low, high, sibling)`` the bytes of the
            i-th, fences from the groups' first keys (the leftmost node's low fence 0, the
            rightmost's high fence +inf), chained left to right; returns the level's (low fence,
            address)s."""
            addrs = place(len(groups))
            lows = [0] + [g[0][0] for g in groups[1:]]
            for i, (g, addr) in enumerate(zip(groups, addrs)):
                last = i == len(groups) - 1
                write(addr, image(i, g, lows[i], None if last else lows[i + 1], 0 if last else addrs[i + 1]))
            return list(zip(lows, addrs))

        def leaf(i, group, low, high, sibling):
            return cls.bulk_leaf(fabric, mns, write, i, group, low, high, sibling, fmt)

        per = cls.bulk_leaf_entries(fmt)
        nodes = build([items[i:i + per] for i in range(0, len(items), per)], leaf)
        level = 0
        while len(nodes) > 1:
            level += 1

            def internal(i, group, low, high, sibling, level=level):
                return internal_image(1, level, low, high, sibling, group[0][1], [lo for lo, _ in group[1:]],
                                      [a for _, a in group[1:]])

            fan = BULK_INTERNAL_KEYS + 1
            nodes = build([nodes[i:i + fan] for i in range(0, len(nodes), fan)], internal)
        # the root word last: a client that reads it finds a whole tree below
        fabric.memory[rnode].host64[roff // 8] = pack_root(nodes[0][1], level)

    #: The longest value a bulk load accepts (the client refuses longer ones the same way).
    max_value = MAX_VALUE

    @classmethod
    def bulk_leaf_holds_keys(cls, leaf, fmt=PerLineLeaf) -> bool:
        """Does the leaf image ``leaf`` (bytes of one node, leaf format ``fmt``) hold any key?
        (bulk load's check that the tree is the empty one setup made)"""
        return bool(fmt.entries(leaf, 0))

    @classmethod
    def bulk_leaf_entries(cls, fmt=PerLineLeaf) -> int:
        """Entries per bulk-loaded leaf (:func:`bulk_leaf_entries` of the leaf format; a system with
        leaves of its own says how many of its slots)."""
        return bulk_leaf_entries(fmt)

    @classmethod
    def bulk_leaf(cls, fabric, mns: list[int], write, i: int, group, low: int, high: int | None, sibling: int,
                  fmt=PerLineLeaf):
        """The image of the ``i``-th leaf of a bulk load in leaf format ``fmt``: ``group`` its (key
        int, key, value)s in order, fences and sibling given; values longer than the inline field
        go to out-of-line blocks allocated round-robin over ``mns`` and written with
        ``write(gaddr, bytes)``."""
        entries = []
        for j, (_, key, value) in enumerate(group):
            block = 0
            if len(value) > fmt.inline:
                m = mns[(i + j) % len(mns)]
                block = gaddr(m, fabric.allocate(m, block_units(len(value)) * LINE))
                write(block, block_image(key, value))
            vlen, field = fmt.value_field(value, block)
            entries.append((1, vlen, key, field))
        return fmt.image(1, low, high, sibling, entries)

    @classmethod
    def history_stress(cls, shape, options: dict):
        """The conformance history checks' shape (cluster/correctness/conformance.py HISTORY, 64
        keys of 48 B): with packed leaves the 64 keys share two leaves, so the 16 writers queue on
        two locks, and the 48-byte values are out of line (two rounds per get): three times the
        run for as many operations to check."""
        if cls.leaf_layout_of(options).name == "packed":
            return shape._replace(run_ms=shape.run_ms * 3)
        return shape

    @classmethod
    def where(cls) -> str:
        """How option errors name this system (a subclass names itself, not Sherman)."""
        return f"system {cls.name!r}"

    @classmethod
    def client(cls, fabric, layout: dict, thread, options: dict) -> ShermanClient:
        name = cls.client_class.NAME
        if layout.get("system") != cls.name or layout.get("format") != LAYOUT_FORMAT:
            raise SystemGaveUp(f"{name}: layout is not a {name} layout of format {LAYOUT_FORMAT}: "
                               f"{layout.get('system')!r}/{layout.get('format')!r}")
        return cls.client_class(fabric, layout, thread, cls.check_options(dict(options or {}), cls.where()))
