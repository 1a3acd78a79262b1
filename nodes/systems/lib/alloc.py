"""Client-side allocation of remote blocks: bump allocation inside chunks obtained from the memory nodes.

Why a library module: every design that writes out of place (RACE's KV blocks, Sherman's tree
nodes and out-of-line values, any new design's records) needs remote memory at run time, and the
memory nodes have no CPU on the data path. So a client allocates blocks itself: it asks a
memory node for a chunk (``chunk_bytes``, 1 MiB by default) with a control-path RPC, then carves
64-byte-unit blocks out of it locally. Chunks rotate round-robin over the memory nodes, starting at
a different node per client so the blocks of a rack spread evenly.

The RPC is ``fabric.allocate`` (the shared bump pointer of the node), run at once so that another
coroutine of the same thread never asks for a second chunk; the coroutine that asked then waits
:func:`alloc_rpc_ns` of virtual time (the others wait for that same RPC):
``2 * link.one_way_ns`` (request and reply) ``+ 4 * pcie.latency_ns`` (the request and reply each
cross PCIe at both ends) ``+ cpu.rpc_handler_ns`` (the memory node's handler) ``+ software.alloc_server_ns``
(the allocator's own work: find, register, answer; a profile assumption).

With a :class:`nodes.systems.lib.reclaim.Reclaimer` (every system in dmrack gives one), blocks are
reused: a block an operation unlinked is retired (``retire``) and comes back once the rack's epoch has
moved on twice (epoch-based reclamation, see that module); a block nobody ever saw is
released (``release``) and comes back at once. ``alloc`` serves a request from those free blocks of the
same size first, bumps in the chunk next, and before asking for a new chunk tries to move the
epoch on, so a rack that only updates stops taking memory once its limbo has filled. Without a
reclaimer blocks are never reused (what the layout-level tests of the allocator use).
"""

from __future__ import annotations

from shm.messages import SystemGaveUp
from shm.fabric import OFFSET_BITS

UNIT = 64                     # blocks are whole 64-byte units (one cache line each)

OOM_RETRIES = 64              # epoch advances tried before "out of memory" while blocks are in limbo


def alloc_rpc_ns(profile) -> int:
    """Virtual time of one chunk-allocation RPC to a memory node (see the module docstring)."""
    return (2 * profile.link.one_way_ns + 4 * profile.pcie.latency_ns + profile.cpu.rpc_handler_ns
            + profile.software.alloc_server_ns)


class ChunkAllocator:
    """One client's KV-block allocator (shared by the coroutines of its thread)."""

    __slots__ = ("fabric", "memory_nodes", "chunk_bytes", "rpc_ns", "_next", "node", "pos", "end", "_refill",
                 "chunks", "bytes", "blocks", "freed", "used_bytes", "reclaim", "owner", "max_offset", "offset_limit",
                 "replicas")

    def __init__(self, fabric, memory_nodes: list[int], chunk_bytes: int, start: int = 0, reclaim=None,
                 owner: str = "allocator", max_offset: int = (1 << OFFSET_BITS) - 1,
                 offset_limit: str = "the global address's 48-bit offset field", replicas=None):
        """``start``: the index of the memory node the first chunk comes from (spread clients
        over the nodes: e.g. ``node * 7 + thread.index``); ``reclaim``: the thread's
        :class:`nodes.systems.lib.reclaim.Reclaimer`, or None (never reuse); ``owner``: how
        errors name the system; ``max_offset``/``offset_limit``: the highest byte offset the
        design's pointers can encode, and how to say so (RACE's slots hold 40 bits); ``replicas``:
        a :class:`nodes.systems.lib.replicas.Replicas` (every chunk comes with mirror chunks on the
        backup memory nodes, whose blocks the client WRITEs with the primary's), or None."""
        self.fabric = fabric
        self.memory_nodes = list(memory_nodes)
        self.chunk_bytes = (chunk_bytes + UNIT - 1) // UNIT * UNIT
        self.rpc_ns = alloc_rpc_ns(fabric.profile)
        self._next = start % len(self.memory_nodes)
        self.node = -1
        self.pos = self.end = 0
        self._refill = None            # the event of a chunk RPC in flight
        self.chunks = self.bytes = self.blocks = self.freed = 0
        self.used_bytes = 0            # bytes of blocks handed out and not yet retired or released
        self.reclaim = reclaim
        self.owner = owner
        self.max_offset = max_offset
        self.offset_limit = offset_limit
        self.replicas = replicas

    def alloc(self, co, units: int):
        """Generator: ``(node, offset)`` of a fresh block of ``units`` 64-byte units. It queues no
        verbs of its own, except that with a reclaimer whose retired blocks wait, a chunk that ran
        out first tries to move the epoch on with a round trip of READs on ``co``; it skips that
        try if ``co`` has verbs queued (it never posts them early), so call it with none queued."""
        size = units * UNIT
        rec = self.reclaim
        if rec is not None:
            got = self._reuse(units)
            if got is not None:
                return got
        while True:
            pos = self.pos
            if pos + size <= self.end:
                self.pos = pos + size
                self.blocks += 1
                self.used_bytes += size
                return self.node, pos
            if self._refill is not None:
                yield self._refill
                continue
            if rec is not None and rec.limbo:
                # before taking more memory, see whether the epoch lets retired blocks come back
                if rec.collect() == 0:
                    yield from rec.advance_inline(co)
                got = self._reuse(units)
                if got is not None:
                    return got
            if (yield from self._new_chunk(co)):
                continue
            # Every memory node is full. Retired blocks come back once the epoch moves on, which
            # readers in flight may delay: try a few times, about a round trip apart, then give up.
            for _ in range(OOM_RETRIES):
                if rec is None or not rec.limbo:
                    break
                yield self.rpc_ns
                yield from rec.advance_inline(co)
                rec.collect()
                got = self._reuse(units)
                if got is not None:
                    return got
            raise self._out_of_memory()

    def _reuse(self, units: int):
        """A block of ``units`` the reclaimer gives back, counted as allocated, or None."""
        got = self.reclaim.take(units)
        if got is not None:
            self.blocks += 1
            self.used_bytes += units * UNIT
        return got

    def retire(self, node: int, offset: int, units: int) -> None:
        """A block an operation unlinked (replaced or deleted): reusable once no reader can hold it."""
        self.freed += 1
        self.used_bytes -= units * UNIT
        if self.reclaim is not None:
            self.reclaim.retire(node, offset, units)

    def release(self, node: int, offset: int, units: int) -> None:
        """A block that was never published: nobody else knows its address."""
        self.freed += 1
        self.used_bytes -= units * UNIT
        if self.reclaim is not None:
            self.reclaim.release(node, offset, units)

    def _new_chunk(self, co):
        """Generator: take a chunk from the next memory node that has one (an RPC); False if
        every memory node is full."""
        ev = self._refill = co.env.event()
        off = None
        try:
            for _ in range(len(self.memory_nodes)):
                node = self.memory_nodes[self._next]
                self._next = (self._next + 1) % len(self.memory_nodes)
                try:
                    if self.replicas is None:
                        off = self.fabric.allocate(node, self.chunk_bytes)
                    else:                       # with its mirrors, asked in parallel: one RPC's time
                        off = self.replicas.allocate(node, self.chunk_bytes)
                    break
                except MemoryError:
                    continue
            if off is None:
                return False
            if off + self.chunk_bytes > self.max_offset:
                raise SystemGaveUp(f"{self.owner}: chunk at {off:#x} on node {node} is beyond {self.offset_limit}")
            yield self.rpc_ns
            return True
        finally:
            if off is not None:
                self.node, self.pos, self.end = node, off, off + self.chunk_bytes
                self.chunks += 1
                self.bytes += self.chunk_bytes
            self._refill = None
            ev.succeed()

    def _out_of_memory(self):
        rec = self.reclaim
        held = (f"; {len(rec.limbo)} retired blocks still wait for readers (a thread that stopped in the "
                f"middle of an operation holds the epoch)") if rec is not None and rec.limbo else ""
        names = ", ".join(self.fabric.nodes[n].name for n in self.memory_nodes)
        return SystemGaveUp(f"{self.owner}: out of memory: memory nodes {names} are full "
                            f"({self.chunk_bytes} B chunks){held}; give them more memory (memory.memory) "
                            f"or lower the system option chunk_bytes")
