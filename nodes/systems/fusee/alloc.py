"""Replicated coarse blocks: the memory nodes hand a client a chunk and its r - 1 replica chunks,
and the client carves KV blocks out of them (the systems library's :class:`ChunkAllocator`).

FUSEE's servers (``src/server_mm.cc`` ``get_allocable_blocks``) cut their KV area into coarse
blocks (``block_size`` 64 MiB in ``tests/server_config.json``) placed round-robin: block ``k``
has its primary copy on server ``k mod n`` and its replicas on the next ``num_replication - 1``
servers; a client's allocation RPC gets one such replicated block and the client hands out 256-B
sub-blocks of it, writing every KV pair to the same sub-block offset in all the replicas.

Here a chunk (``chunk_bytes``, a power of two, 1 MiB by default: emulated memory nodes are small,
see docs/fusee.md) is taken from memory node ``p`` aligned to its size, and replica chunk ``i``
from node ``(p + i) mod n``; the memory node records the replica offsets in its **replica map**
(one row of ``r - 1`` words per chunk-sized window of its memory, written by the allocation RPC's
handler). A KV block at offset ``o`` of node ``p`` therefore has replica ``i`` at the same offset
inside replica chunk ``i``: anyone holding the slot word (which names the primary copy) knows all
copies, as FUSEE's clients derive them from the server's deterministic block placement. The map
is read from the memory node's memory directly (no verbs), as FUSEE computes it locally.

Blocks the bulk load placed (RACE's regions, one copy, no map row) are never reused: the free
lists hold replicated blocks only (``unreplicated`` counts the ones dropped).
"""

from __future__ import annotations

from nodes.systems.api import SystemGaveUp
from nodes.systems.lib.alloc import ChunkAllocator
from shm.fabric import gaddr

from .layout import compact

_NODE_SHIFT = 40
_OFF_MASK = (1 << 40) - 1


def map_rows(memory_bytes: int, chunk_bytes: int) -> int:
    """Rows of a memory node's replica map: one per chunk-sized window of its memory."""
    return -(-memory_bytes // chunk_bytes)


class ReplicaMap:
    """Read side of the replica maps (``layout["kv_map"]``): the replica copies of a block."""

    def __init__(self, fabric, layout: dict):
        self.fabric = fabric
        self.replicas = layout["replicas"]
        self.chunk = layout["chunk_bytes"]
        self.maps = {int(n): int(off) for n, off in layout["kv_map"]}
        self._rows: dict = {}

    def row(self, node: int, offset: int) -> tuple:
        """The replica chunks ``((node, chunk offset), ...)`` of the chunk holding ``offset`` on
        ``node``; () for a block outside any replicated chunk (the bulk load's)."""
        k = offset // self.chunk
        got = self._rows.get((node, k))
        if got is not None:
            return got
        base = self.maps.get(node)
        got = ()
        if base is not None and self.replicas > 1:
            n = self.replicas - 1
            h64 = self.fabric.memory[node].host64
            words = [int(w) for w in h64[base // 8 + k * n: base // 8 + (k + 1) * n]]
            if all(words):
                got = tuple(((w >> _NODE_SHIFT) & 0xFF, w & _OFF_MASK) for w in words)
                self._rows[(node, k)] = got
        return got

    def copies(self, node: int, offset: int) -> list:
        """Global addresses of every copy of the block at ``offset`` of ``node``: the primary
        first, then the replicas (only the primary for an unreplicated block)."""
        out = [gaddr(node, offset)]
        rel = offset % self.chunk
        for rn, roff in self.row(node, offset):
            out.append(gaddr(rn, roff + rel))
        return out

    def replicated(self, node: int, offset: int) -> bool:
        return self.replicas == 1 or bool(self.row(node, offset))


class ReplicatedChunks(ChunkAllocator):
    """A client's KV-block allocator whose chunks come with ``replicas - 1`` replica chunks on the
    following memory nodes (one allocation RPC for all of them, as FUSEE's REQ_ALLOC)."""

    __slots__ = ("layout", "replica_map", "unreplicated")

    def __init__(self, fabric, layout: dict, start: int, reclaim, replica_map: ReplicaMap):
        from nodes.systems.race.layout import MAX_OFFSET
        super().__init__(fabric, layout["memory_nodes"], layout["chunk_bytes"], start=start, reclaim=reclaim,
                         owner="FUSEE", max_offset=MAX_OFFSET,
                         offset_limit="the slot's 40-bit offset field (1 TiB per memory node)")
        self.layout = layout
        self.replica_map = replica_map
        self.unreplicated = 0

    def retire(self, node: int, offset: int, units: int) -> None:
        if not self.replica_map.replicated(node, offset):
            self.unreplicated += 1            # a bulk-loaded block: one copy, never reused
            self.freed += 1
            return
        super().retire(node, offset, units)

    def _new_chunk(self, co):
        """Generator: a chunk of ``chunk_bytes`` from the next memory node that has one, aligned
        to its size, with its replica chunks on the nodes after it, recorded in that node's replica
        map; one RPC. False if no memory node can give a replicated chunk."""
        ev = self._refill = co.env.event()
        got = None
        fab, mns, size = self.fabric, self.memory_nodes, self.chunk_bytes
        r = self.layout["replicas"]
        maps = {int(n): int(off) for n, off in self.layout["kv_map"]}
        try:
            for _ in range(len(mns)):
                k = self._next
                self._next = (self._next + 1) % len(mns)
                try:
                    off = fab.allocate(mns[k], size, align=size)
                    reps = [(mns[(k + i) % len(mns)], fab.allocate(mns[(k + i) % len(mns)], size))
                            for i in range(1, r)]
                except MemoryError:
                    continue                  # what was taken of this try is lost (a full node)
                if max([off] + [o for _, o in reps]) + size > self.max_offset:
                    raise SystemGaveUp(f"FUSEE: chunk at {off:#x} on node {mns[k]} is beyond {self.offset_limit}")
                if r > 1:
                    h64 = fab.memory[mns[k]].host64
                    row = maps[mns[k]] // 8 + (off // size) * (r - 1)
                    for i, (rn, ro) in enumerate(reps):
                        h64[row + i] = compact(rn, ro)
                got = (mns[k], off)
                break
            if got is None:
                return False
            yield self.rpc_ns
            return True
        finally:
            if got is not None:
                self.node, self.pos, self.end = got[0], got[1], got[1] + size
                self.chunks += 1
                self.bytes += size * r
            self._refill = None
            ev.succeed()
