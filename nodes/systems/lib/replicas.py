"""Replicated chunks: where the backup copies of a remote block live, for primary-backup replication.

FlexKV and the systems it is compared with replicate what they write to the memory nodes: "each
write is replicated to multiple MNs (3-way in our evaluation)" (FlexKV §4.5, primary-backup
replication), FUSEE writes every KV pair to r replicas, Clover its versions. The memory nodes have
no CPU on the data path, so the *client* writes every copy: the primary and its r - 1 backups in
one doorbell, each a WRITE through its own memory node's NIC. Readers READ the primary only; the
backups are what a memory node's recovery would read, so they hold the same bytes.

Where the copies are. A client allocates blocks out of chunks (``lib/alloc.py``). With r copies,
a chunk on memory node ``m`` comes with one chunk of the same size on each of the next r - 1
memory nodes of the layout's list (``m + 1``, ``m + 2``, ... round the list: the copies are on
different nodes, so r must not exceed the memory nodes), and a block at ``m:off`` has its copies
at the same offset within those mirror chunks. The **chunk map** (one word per chunk-sized
granule of each memory node and backup) records where the mirror chunks are; it lives in the
first memory node's memory and is written by the process that takes the chunk, at the same
control-path moment as the allocation itself (``fabric.allocate``, priced as the allocator's RPC:
no verb). Any client can so find the copies of any block, also of one another client allocated
and this one reuses after reclamation: a real client would hold the same map, filled from the
memory nodes' allocation replies.

Primary chunks are aligned to the granule (the chunk size rounded up to a power of two), so a
block's granule is its offset shifted right.
"""

from __future__ import annotations

from dataclasses import dataclass

from shm.fabric import gaddr, gaddr_node, gaddr_offset


class ReplicaError(ValueError):
    """r copies cannot be placed (more copies than memory nodes): one line."""


def granule_of(chunk_bytes: int) -> int:
    """The chunk map's granule: the chunk size rounded up to a power of two (chunks aligned to it)."""
    return 1 << max(6, (int(chunk_bytes) - 1).bit_length())


@dataclass(frozen=True)
class ReplicaMap:
    """The picklable description of a chunk map (what setup puts in the layout)."""

    copies: int            # r: the primary and r - 1 backups
    memory_nodes: tuple    # fabric indices, in the layout's order (backups: the next ones round it)
    granule: int           # bytes per map entry (a power of two; primary chunks aligned to it)
    granules: int          # entries per memory node
    node: int              # the memory node holding the map
    offset: int            # the map's byte offset there: int64 [memory node, granule, backup], mirror offset + 1

    @property
    def backups(self) -> int:
        return self.copies - 1


def setup_replicas(fabric, memory_nodes, copies: int, chunk_bytes: int, where: str) -> ReplicaMap | None:
    """Carve the chunk map for ``copies``-way replication over ``memory_nodes`` (fabric indices);
    None for one copy (nothing to map). ReplicaError if there are fewer memory nodes than copies."""
    copies = int(copies)
    mns = tuple(int(m) for m in memory_nodes)
    if copies <= 1:
        return None
    if copies > len(mns):
        raise ReplicaError(f"{where}: replicas = {copies} needs {copies} memory nodes (each copy on its own "
                           f"node); the rack has {len(mns)} (memory.count)")
    g = granule_of(chunk_bytes)
    granules = max(fabric.nodes[m].memory_bytes for m in mns) // g + 1
    nbytes = len(mns) * granules * (copies - 1) * 8
    off = fabric.allocate(mns[0], nbytes)
    fabric.memory[mns[0]].host[off:off + nbytes] = 0
    return ReplicaMap(copies, mns, g, granules, mns[0], off)


class Replicas:
    """A process's handle on a :class:`ReplicaMap`: take replicated regions, find a block's copies."""

    __slots__ = ("map", "fabric", "copies", "_table", "_pos", "_shift")

    def __init__(self, fabric, rmap: ReplicaMap):
        self.map = rmap
        self.fabric = fabric
        self.copies = rmap.copies
        words = len(rmap.memory_nodes) * rmap.granules * rmap.backups
        self._table = fabric.memory[rmap.node].host64[rmap.offset // 8:rmap.offset // 8 + words].reshape(
            len(rmap.memory_nodes), rmap.granules, rmap.backups)
        self._pos = {m: i for i, m in enumerate(rmap.memory_nodes)}
        self._shift = rmap.granule.bit_length() - 1

    def backup_nodes(self, node: int) -> list[int]:
        """The memory nodes holding the backups of ``node``'s blocks, first backup first."""
        mns, i = self.map.memory_nodes, self._pos[node]
        return [mns[(i + k) % len(mns)] for k in range(1, self.copies)]

    def allocate(self, node: int, nbytes: int) -> int:
        """Carve a primary region of ``nbytes`` on ``node`` (aligned to the granule) and its mirrors
        on the backup nodes, enter them in the map; the primary's offset. MemoryError (nothing
        entered) if a node is full; the primary taken before a mirror failed stays unused."""
        fabric, g = self.fabric, self.map.granule
        size = -(-int(nbytes) // g) * g
        off = fabric.allocate(node, size, align=g)
        mirrors = [fabric.allocate(b, size) for b in self.backup_nodes(node)]
        first = off >> self._shift
        row = self._table[self._pos[node]]
        for k in range(size >> self._shift):
            for j, moff in enumerate(mirrors):
                row[first + k, j] = moff + (k << self._shift) + 1     # + 1: 0 is "no chunk here"
        return off

    def copies_of(self, node: int, offset: int) -> list[tuple[int, int]]:
        """(node, offset) of each backup of the block at ``node:offset`` (its primary)."""
        shift = self._shift
        row = self._table[self._pos[node], offset >> shift]
        inside = offset & ((1 << shift) - 1)
        out = []
        for j, b in enumerate(self.backup_nodes(node)):
            base = int(row[j])
            if base == 0:
                raise KeyError(f"no replicated chunk holds {self.fabric.nodes[node].name}:{offset:#x}")
            out.append((b, base - 1 + inside))
        return out

    def backup_gaddrs(self, node: int, offset: int) -> list[int]:
        return [gaddr(b, o) for b, o in self.copies_of(node, offset)]

    def copy_region(self, node: int, offset: int, nbytes: int) -> None:
        """Make the backups of ``[offset, offset + nbytes)`` on ``node`` hold its bytes (a bulk load
        writes the primaries directly; its copies are written the same way)."""
        fabric = self.fabric
        src = fabric.memory[node].host
        g = self.map.granule
        pos, end = offset, offset + nbytes
        while pos < end:
            stop = min(end, (pos // g + 1) * g)
            for b, o in self.copies_of(node, pos):
                fabric.memory[b].host[o:o + stop - pos] = src[pos:stop]
            pos = stop


class RecordCopies:
    """The backups of a record array (``lib/array.py``: an index's subtables): copy ``k`` of record
    ``i`` on the ``k``-th memory node after the primary's, at the same position within the record.
    Made by :func:`setup_record_copies`; picklable (it is plain data)."""

    __slots__ = ("primary", "backups", "_pos")

    def __init__(self, primary, backups):
        self.primary = primary
        self.backups = tuple(backups)
        self._pos = {m: j for j, m in enumerate(primary.nodes)}

    def __getstate__(self):
        return {"primary": self.primary, "backups": self.backups}

    def __setstate__(self, state):
        self.__init__(state["primary"], state["backups"])

    def copy_all(self, fabric) -> None:
        """Make every backup hold its primary's bytes (after a bulk load wrote the primaries)."""
        pr = self.primary
        for b in self.backups:
            for i in range(pr.count):
                b.words(fabric, i)[:] = pr.words(fabric, i)

    def backup_gaddrs(self, addr: int) -> list[int]:
        """The global addresses of the backups of the word at primary global address ``addr``."""
        pr = self.primary
        node, off = gaddr_node(addr), gaddr_offset(addr)
        j = self._pos[node]
        rel = off - pr.bases[j]
        i = (rel // pr.stride) * len(pr.nodes) + j
        inside = rel % pr.stride
        return [gaddr(b.node_of(i), b.offset_of(i) + inside) for b in self.backups]


def setup_record_copies(fabric, primary, copies: int) -> RecordCopies | None:
    """Allocate ``copies - 1`` backups of the record array ``primary`` (record ``i``'s backup ``k``
    on the memory node ``k`` places after record ``i``'s in ``primary.nodes``), each holding the
    primary's bytes as they are now; None for one copy."""
    from .array import allocate_array
    if copies <= 1:
        return None
    n = len(primary.nodes)
    backups = []
    for k in range(1, copies):
        rotated = [primary.nodes[(j + k) % n] for j in range(n)]
        backups.append(allocate_array(fabric, rotated, primary.count, primary.record_bytes, zero=False))
    copies = RecordCopies(primary, backups)
    copies.copy_all(fabric)
    return copies


def table_bytes(rmap: ReplicaMap | None) -> int:
    """Bytes the chunk map takes (0 without replication)."""
    if rmap is None:
        return 0
    return len(rmap.memory_nodes) * rmap.granules * rmap.backups * 8


__all__ = ["RecordCopies", "ReplicaError", "ReplicaMap", "Replicas", "granule_of", "setup_record_copies",
           "setup_replicas", "table_bytes"]
