"""RaceSystem: the System contract for RACE hashing (setup on the rack owner, one client per thread)."""

from __future__ import annotations

from nodes.systems.api import Option, System, SystemGaveUp
from nodes.systems.lib.array import allocate_array
from nodes.systems.lib.reclaim import setup_epochs
from nodes.systems.lib.memory_nodes import memory_node_indexes
from shm.fabric import gaddr

from .client import SEARCH_CPU_NS, WRITE_CPU_NS, RaceClient
from .directory import directory_words
from .layout import (
    BUCKET_BYTES, MAX_BLOCK_BYTES, MAX_NODE, MAX_OFFSET, SLOTS_PER_BUCKET, UNIT, WORD, Geometry, LayoutError,
    block_units, pack_dir_entry, pack_header,
)

LAYOUT_FORMAT = 1


def _where(where: str | None) -> str:
    return where or "system 'race'"


FAULTS = ("none", "update-skips-cas", "reuse-without-epochs")


class RaceSystem(System):
    name = "race"
    description = ("RACE hashing: lock-free one-sided extendible hash table (combined buckets, two hash "
                   "functions, out-of-place KV blocks, CAS on 8-byte slots, client directory cache)")
    paper = ("Zuo et al., One-sided RDMA-Conscious Extendible Hashing for Disaggregated Memory, "
             "USENIX ATC'21")
    roles = ("compute", "memory")
    supports_scan = False
    options = (
        Option("load_factor", 0.5, "keys per slot the table is sized for: slots = capacity / load_factor "
               "(lower it if inserts hit 'RACE table full')", minimum=0.05, maximum=1.0),
        Option("chunk_bytes", 1 << 20, "bytes of the chunks a client obtains from a memory node (one RPC each) "
               "and carves KV blocks out of", minimum=MAX_BLOCK_BYTES, maximum=1 << 30),
        Option("search_cpu_ns", SEARCH_CPU_NS, "modelled CPU ns of each search of the table (a get; each attempt of "
               "an update or delete; each round of an insert) beyond the verbs, hashing and bucket scans the model prices itself: workload "
               "generation, coroutine switches, bookkeeping; the defaults give one thread with 8 coroutines "
               "SMART's artifact rates (docs/race.md)", minimum=0, maximum=10**6),
        Option("write_cpu_ns", WRITE_CPU_NS, "modelled CPU ns an update, insert or delete adds once (allocator, "
               "block, request bookkeeping); see search_cpu_ns", minimum=0, maximum=10**6),
        Option("fault", "none", "a deliberate bug, to prove that dmrack check catches it: 'update-skips-cas' "
               "makes update WRITE its slot instead of CASing it (lost deletes, overwritten slots); "
               "'reuse-without-epochs' reuses a replaced KV block at once, while readers may still hold it",
               choices=FAULTS),
    )

    @classmethod
    def footprint(cls, options: dict, capacity: int, key_bytes: int, value_bytes: int) -> int:
        """The table ``setup`` builds for ``capacity`` keys (at one memory node: more nodes only add
        subtables), plus one KV block for each key but the rack's sizing slack (1024 keys). Chunk
        slack and retired blocks are not counted: the bound stays below what a run needs."""
        try:
            geo = cls.geometry(int(capacity), options, 1)
        except LayoutError:
            return 1 << 62                     # more subtables than the directory holds: never fits
        table = geo.subtables * geo.subtable_bytes + geo.directory_bytes
        return table + max(0, int(capacity) - 1024) * block_units(int(key_bytes), int(value_bytes)) * UNIT

    @classmethod
    def setup(cls, fabric, memory_nodes: list[int], options: dict, capacity: int) -> dict:
        """Expose the memory nodes, carve the directory (first memory node) and the pre-sized
        subtables (round-robin over the memory nodes) out of them, write every bucket header."""
        opts = cls.check_options(dict(options or {}), _where(None))
        mns = memory_node_indexes(fabric, memory_nodes, "RACE")
        for m in mns:
            spec = fabric.nodes[m]
            if m > MAX_NODE:
                raise LayoutError(f"RACE: memory node {spec.name!r} is fabric node {m}; slots address KV blocks "
                                  f"with 8 bits of node number, so memory nodes must be among the first "
                                  f"{MAX_NODE + 1} nodes")
            if spec.memory_bytes > MAX_OFFSET + 1:
                raise LayoutError(f"RACE: memory node {spec.name!r} has {spec.memory_bytes} B; slots hold 40 bits "
                                  f"of block offset, so at most 1 TiB per memory node")
            fabric.expose(m)
        geo = cls.geometry(int(capacity), opts, len(mns))
        try:
            dir_off = fabric.allocate(mns[0], geo.directory_bytes)
            # subtable i on memory node mns[i % len(mns)], zeroed (the library's record array)
            tables = allocate_array(fabric, mns, geo.subtables, geo.subtable_bytes)
            entries = []
            for i in range(geo.subtables):
                tables.words(fabric, i).reshape(-1, BUCKET_BYTES // WORD)[:, 0] = pack_header(geo.global_depth, i)
                entries.append(pack_dir_entry(geo.global_depth, tables.node_of(i), tables.offset_of(i)))
        except MemoryError as e:
            raise SystemGaveUp(f"RACE: the table ({geo.subtables} subtables of {geo.subtable_bytes} B for capacity "
                               f"{capacity} at load_factor {opts['load_factor']}) does not fit the memory nodes: "
                               f"{e}") from None
        try:
            epochs = setup_epochs(fabric, mns[0])
        except MemoryError as e:
            raise SystemGaveUp(f"RACE: the epoch table does not fit memory node {mns[0]}: {e}") from None
        dwords = directory_words(geo.global_depth, geo.groups, entries)
        host64 = fabric.memory[mns[0]].host64
        for k, w in enumerate(dwords):
            host64[dir_off // WORD + k] = w
        return {
            "system": cls.name,
            "format": LAYOUT_FORMAT,
            "memory_nodes": mns,
            "directory": gaddr(mns[0], dir_off),
            "global_depth": geo.global_depth,
            "groups_per_subtable": geo.groups,
            "directory_entries": entries,
            "slots_per_bucket": SLOTS_PER_BUCKET,
            "slots": geo.slots,
            "capacity": int(capacity),
            "load_factor": opts["load_factor"],
            "chunk_bytes": opts["chunk_bytes"],
            "epochs": epochs,
            "tables": tables,                  # the subtables as a record array (lib/array.py)
        }

    @classmethod
    def geometry(cls, capacity: int, opts: dict, memory_nodes: int) -> Geometry:
        """The table's shape for ``capacity`` keys (FlexKV fixes the subtable count: its partitions)."""
        return Geometry.for_capacity(capacity, opts["load_factor"], memory_nodes)

    @classmethod
    def bulk_load(cls, fabric, layout: dict, pairs) -> None:
        """Place ``pairs`` (an iterable of key bytes, value bytes; consumed once) as inserts would,
        straight into the memory nodes of the empty table ``setup`` made: the same probe, the same
        slot choice, the KV block then the committed slot word, in compiled batches
        (:mod:`nodes.systems.race.bulk`). A key given twice or a table too small is a SystemGaveUp."""
        from .bulk import bulk_load
        rmap = layout.get("block_copies")
        if rmap is None:
            bulk_load(fabric, layout, pairs)
            return
        # a replicated layout (FlexKV's replicas, FUSEE): the blocks' regions come with their mirrors,
        # then the backups get the primaries' bytes, the index's and the blocks' (lib/replicas.py)
        from nodes.systems.lib.replicas import Replicas
        reps = Replicas(fabric, rmap)
        regions = []

        def allocate(node, nbytes):
            off = reps.allocate(node, nbytes)
            regions.append((node, off, nbytes))
            return off
        bulk_load(fabric, layout, pairs, allocate=allocate)
        for node, off, nbytes in regions:
            reps.copy_region(node, off, nbytes)
        copies = layout.get("index_copies")
        if copies is not None:
            copies.copy_all(fabric)

    @classmethod
    def client(cls, fabric, layout: dict, thread, options: dict) -> RaceClient:
        if layout.get("system") != cls.name or layout.get("format") != LAYOUT_FORMAT:
            raise SystemGaveUp(f"RACE: layout is not a RACE layout of format {LAYOUT_FORMAT}: "
                               f"{layout.get('system')!r}/{layout.get('format')!r}")
        return RaceClient(fabric, layout, thread, cls.check_options(dict(options or {}), _where(None)))
