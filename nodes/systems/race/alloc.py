"""Client-side KV-block allocation: bump allocation inside chunks obtained from the memory nodes.

RACE clients allocate KV blocks themselves (no memory-node CPU on the data path): a client asks a
memory node for a chunk (``chunk_bytes``, 1 MiB by default) with a control-path RPC, then carves
64-byte-unit blocks out of it locally. Chunks rotate round-robin over the memory nodes, starting at
a different node per client so the blocks of a rack spread evenly.

The RPC is ``fabric.allocate`` (the shared bump pointer of the node), run at once so that another
coroutine of the same thread never asks for a second chunk; the coroutine that asked then waits
:func:`alloc_rpc_ns` of virtual time (the others wait for that same RPC):
``2 * link.one_way_ns`` (request and reply) ``+ 4 * pcie.latency_ns`` (the request and reply each
cross PCIe at both ends) ``+ cpu.rpc_handler_ns`` (the memory node's handler) ``+ ALLOC_SERVER_NS``
(the allocator's own work, a documented constant).

Blocks are never reused: ``free`` only counts (an update or delete leaves the old block behind,
which is what keeps readers safe without epochs; reuse comes with FUSEE/Aceso-style reclamation).
"""

from __future__ import annotations

from nodes.systems.api import SystemError_
from .layout import MAX_OFFSET, UNIT

ALLOC_SERVER_NS = 1000        # the memory node's allocator (find, register, answer): an assumption


def alloc_rpc_ns(profile) -> int:
    """Virtual time of one chunk-allocation RPC to a memory node (see the module docstring)."""
    return 2 * profile.link.one_way_ns + 4 * profile.pcie.latency_ns + profile.cpu.rpc_handler_ns + ALLOC_SERVER_NS


class ChunkAllocator:
    """One client's KV-block allocator (shared by the coroutines of its thread)."""

    __slots__ = ("fabric", "memory_nodes", "chunk_bytes", "rpc_ns", "_next", "node", "pos", "end", "_refill",
                 "chunks", "bytes", "blocks", "freed")

    def __init__(self, fabric, memory_nodes: list[int], chunk_bytes: int, start: int = 0):
        self.fabric = fabric
        self.memory_nodes = list(memory_nodes)
        self.chunk_bytes = (chunk_bytes + UNIT - 1) // UNIT * UNIT
        self.rpc_ns = alloc_rpc_ns(fabric.profile)
        self._next = start % len(self.memory_nodes)
        self.node = -1
        self.pos = self.end = 0
        self._refill = None            # the event of a chunk RPC in flight
        self.chunks = self.bytes = self.blocks = self.freed = 0

    def alloc(self, co, units: int):
        """Generator: ``(node, offset)`` of a fresh block of ``units`` 64-byte units."""
        size = units * UNIT
        while True:
            pos = self.pos
            if pos + size <= self.end:
                self.pos = pos + size
                self.blocks += 1
                return self.node, pos
            if self._refill is not None:
                yield self._refill
                continue
            yield from self._new_chunk(co)

    def _new_chunk(self, co):
        env = co.env
        ev = self._refill = env.event()
        node = self.memory_nodes[self._next]
        self._next = (self._next + 1) % len(self.memory_nodes)
        try:
            off = self.fabric.allocate(node, self.chunk_bytes)
        except MemoryError as e:
            self._refill = None
            ev.succeed()
            raise SystemError_(f"RACE: no memory for KV blocks on memory node {node} ({e}); give the memory "
                               f"nodes more memory or lower the system option chunk_bytes") from None
        if off + self.chunk_bytes > MAX_OFFSET:
            self._refill = None
            ev.succeed()
            raise SystemError_(f"RACE: chunk at {off:#x} on node {node} is beyond the slot's 40-bit offset "
                               f"field (1 TiB per memory node)")
        try:
            yield self.rpc_ns
        finally:
            self.node, self.pos, self.end = node, off, off + self.chunk_bytes
            self.chunks += 1
            self.bytes += self.chunk_bytes
            self._refill = None
            ev.succeed()

    def free(self, word: int) -> None:
        """Give back the block a slot word points to (replaced, deleted or never published). Blocks
        are not reused yet: this only counts them (reuse needs readers to tolerate a recycled block:
        checksums plus a version or epoch, as FUSEE/Aceso do)."""
        self.freed += 1
