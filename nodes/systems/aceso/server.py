"""Aceso's memory-node side: block allocation, parity by XOR of deltas, differential index
checkpoints, all on the memory node's modelled cores (``[memory] cores``).

Aceso's server (dmemsys/Aceso ``src/Server.cc``) runs four pinned threads: the main thread
answers RPCs (``REQ_ALLOC``, ``REQ_ALLOC_DELTA``, ``REQ_SEAL``) and hands XOR and checkpoint
requests to three more (``thread_xor``, ``thread_ckpt_send``, ``thread_ckpt_recv``; ``Common.h``:
``mainCoreID 0 .. ckptRecvCoreID 3``). Here each is an actor of the memory node:

* **RPC server** (port :data:`RPC_PORT`, one thread): ``ALLOC`` hands out a data block and says
  its slab and row (the block's place in its XOR stripes); ``ALLOC_DELTA`` (on a parity node)
  hands out a *delta block*, the place where clients write a copy of every record they write to
  the data block, and names the stripe's parity block; ``SEAL`` (the code only answers it);
  ``XOR`` queues the delta block for the XOR actor and answers at once, as ``server_on_xor`` does
  (it replies before it XORs).
* **XOR actor**: parity ^= delta over the whole block (the code's ``xor_add_buffers``), then the
  delta block is zeroed and reused (``_mm_free`` memsets it). Priced as three passes over the block
  at the profile's ``software.core_stream_gbps`` (read delta, read and write parity, zero delta).
* **Checkpoint actor** (every ``ckpt_interval_us``): the code's ``_ckpt_send_index`` copies the
  node's index into its checkpoint buffer XORing it with the previous checkpoint (``avx_memcpy_128_ckpt``),
  LZ4-compresses the XOR delta, WRITEs it to the next ``ckpt_replicas`` memory nodes and tells them
  by RPC; each receiver decompresses it and XORs it into its copy of that index
  (``_ckpt_recv_index``). Here the delta is the changed 8-byte words (index and XOR, 16 bytes each:
  about what LZ4 leaves of a delta that is zero but for them), really computed, WRITten
  and applied, so a receiver's copy equals the sender's index as of the checkpoint; the CPU is
  priced on the index's full size, as the code's passes are: copy + XOR at ``core_stream_gbps``,
  compression and decompression at LZ4's published rates.
* **Checkpoint receiver** (port :data:`CKPT_PORT`, one thread of its own, as the code's receive
  thread): applies a delta, priced as above.

The checkpoint actor ticks every interval and ends when the rack's plan is over. Where its node
shares the virtual clock's environment with the clients (a co-located rack, the conformance rigs),
it parks after an interval without a change to the index, and the next write's commit (or an RPC
to the node) wakes it: such an environment must run out of events to end, and an index that does
not change has nothing to checkpoint (the code would still copy and compress it: the CPU of those
idle intervals is not charged there). A memory node that is a process of its own keeps ticking.

Counters of each memory node are words in its memory (``layout["mn_stats"]``): tests and tools
read them with :func:`memory_node_stats`.
"""

from __future__ import annotations

import struct
from collections import deque
from typing import NamedTuple

import numpy as np

from nodes.systems.api import SystemGaveUp
from shm.coro import NodeRdma
from shm.fabric import gaddr
from shm.rpc import RpcServer, rpc

RPC_PORT = 7481            # the memory node's main RPC server (alloc, seal, XOR)
CKPT_PORT = 7482           # its checkpoint receiver
M_ALLOC, M_ALLOC_DELTA, M_SEAL, M_XOR, M_CKPT_RECV = 1, 2, 3, 4, 5

#: LZ4 "fast" on the Silesia corpus, one core of a Core i5-4300U @1.9 GHz: 680 MB/s compression,
#: 2220 MB/s decompression (lz4/lz4 README.md, "Benchmarks", r129). A checkpoint delta is mostly
#: zeros, which LZ4 handles faster: these are upper bounds on its cost (ASSUMPTION that they apply).
LZ4_COMPRESS_NS_PER_BYTE = 1 / 0.680
LZ4_DECOMPRESS_NS_PER_BYTE = 1 / 2.220
#: Bytes of a checkpoint delta per changed 8-byte word (its index and its XOR, a u64 each) and
#: per delta (the count). What LZ4 leaves of a delta that is zero but for these words is a literal
#: run of 8 bytes plus a token and an offset each (~11 B): 16 B per word is a little over it.
DELTA_ENTRY_BYTES = 16
DELTA_HEADER_BYTES = 8
#: The checkpoint actor's verbs buffer (its WRITEs of a delta go out in pieces of a quarter of it).
CKPT_BUFFER = 1 << 20
#: An RPC to a checkpoint receiver waits this long per attempt (its handler runs for the whole
#: index's decompression and XOR); 3 resends.
CKPT_RPC_TIMEOUT_NS = 20_000_000

_ALLOC = struct.Struct("<QII")          # data block offset, slab, row
_ALLOC_DELTA_REQ = struct.Struct("<IIII")   # line, slab, row, data node position
_ALLOC_DELTA = struct.Struct("<QQ")     # delta block offset, parity block offset
_XOR = struct.Struct("<QQ")             # delta block offset, parity block offset
_CKPT = struct.Struct("<IQ")            # sender rank, changed words

STATS_WORDS = 16


class MemoryNodeStats(NamedTuple):
    data_blocks: int          # data blocks handed out (ALLOC)
    delta_blocks: int         # delta blocks handed out (ALLOC_DELTA), reused ones included
    parity_blocks: int        # parity blocks opened
    seals: int                # SEAL RPCs
    xors: int                 # delta blocks XORed into their parity block
    xor_bytes: int
    checkpoints: int          # checkpoints this node sent
    ckpt_scanned_bytes: int   # index bytes its checkpoints copied, XORed and compressed
    ckpt_changed_words: int   # changed index words they carried
    ckpt_sent_bytes: int      # delta bytes WRITten to the replicas
    ckpt_received: int        # deltas this node applied to its replicas of other nodes' indexes
    ckpt_applied_bytes: int   # index bytes those deltas covered (decompressed and XORed)
    ckpt_cpu_ns: int          # CPU its checkpoint sending and receiving charged
    xor_cpu_ns: int           # CPU its XOR actor charged
    idle_parks: int           # times the checkpoint actor parked on an unchanged index


def memory_node_stats(fabric, layout: dict, pos: int) -> MemoryNodeStats:
    """The counters of the memory node at ``pos`` in ``layout["memory_nodes"]``."""
    m = layout["memory_nodes"][pos]
    off = layout["mn_stats"][pos] // 8
    return MemoryNodeStats(*(int(x) for x in fabric.memory[m].host64[off:off + len(MemoryNodeStats._fields)]))


class _State:
    """One memory node's server state (in the process that runs the node)."""

    def __init__(self, ctx):
        lay = ctx.layout
        self.ctx = ctx
        self.layout = lay
        self.mns = lay["memory_nodes"]
        self.pos = self.mns.index(ctx.index)
        self.n = len(self.mns)
        self.k = lay["code_k"]
        self.lines = lay["parity"]
        self.block = lay["block_bytes"]
        self.host = ctx.memory.host
        self.stats = ctx.memory.host64[lay["mn_stats"][self.pos] // 8:][:STATS_WORDS]
        self.data_count = 0
        self.data_blocks: list[int] = []      # offsets of the data blocks handed out, in order
        self.sealed: set[int] = set()         # ... of those sealed
        self.free_deltas: list[int] = []
        self.parity: dict = {}
        self.xor_queue: deque = deque()
        self.xor_wake = None
        self.ckpt_wake = None
        bps = ctx.profile.software.core_stream_gbps / 8          # bytes per ns
        self.stream_ns_per_byte = 1 / bps

    def count(self, field: str, n: int = 1) -> None:
        self.stats[MemoryNodeStats._fields.index(field)] += n

    def poke(self) -> None:
        ev, self.ckpt_wake = self.ckpt_wake, None
        if ev is not None:
            ev.succeed()

    def allocate(self, what: str) -> int:
        try:
            return self.ctx.allocate(self.block, align=256)
        except MemoryError as e:
            raise SystemGaveUp(f"Aceso: out of memory on {self.ctx.name} taking a {self.block} B {what} block "
                               f"({e}); Aceso frees sub-blocks by a GC this model does not run: give the memory "
                               f"nodes more memory (memory.memory) or lower subblock_bytes") from None


_STATES: dict = {}
#: Environments (by id) that run Aceso clients in this process: there a checkpoint actor may park.
CLIENT_ENVS: set = set()
#: (nonce, id(env)) -> memory-node states whose checkpoint actor is parked in that environment.
PARKED: dict = {}


def wake_checkpoints(layout: dict, env) -> None:
    """A client committed a write: wake the parked checkpoint actors of its environment."""
    parked = PARKED.pop((layout["nonce"], id(env)), None)
    if parked:
        for st in parked:
            st.poke()


def state_of(ctx) -> _State:
    key = (ctx.layout["nonce"], ctx.index)
    st = _STATES.get(key)
    if st is None or st.ctx.env is not ctx.env:
        st = _STATES[key] = _State(ctx)
    return st


# -- RPC handlers ------------------------------------------------------------------------------------

def _alloc(ctx, req):
    st = state_of(ctx)
    st.poke()
    ctx.cpu(ctx.profile.software.alloc_server_ns)
    off = st.allocate("data")
    c = st.data_count
    st.data_count += 1
    st.data_blocks.append(off)
    st.count("data_blocks")
    return _ALLOC.pack(off, c % st.k, c // st.k)
    yield  # pragma: no cover


def _alloc_delta(ctx, req):
    st = state_of(ctx)
    st.poke()
    line, slab, row, _d = _ALLOC_DELTA_REQ.unpack(req.payload)
    ctx.cpu(ctx.profile.software.alloc_server_ns)
    delta = st.free_deltas.pop() if st.free_deltas else st.allocate("delta")
    parity = st.parity.get((line, row))
    if parity is None:
        parity = st.parity[(line, row)] = st.allocate("parity")
        st.count("parity_blocks")
    st.count("delta_blocks")
    return _ALLOC_DELTA.pack(delta, parity)
    yield  # pragma: no cover


def _seal(ctx, req):
    st = state_of(ctx)
    st.poke()
    st.sealed.add(struct.unpack("<Q", req.payload)[0])
    st.count("seals")
    return b""
    yield  # pragma: no cover


def _xor(ctx, req):
    st = state_of(ctx)
    st.poke()
    st.xor_queue.append(_XOR.unpack(req.payload))
    ev, st.xor_wake = st.xor_wake, None
    if ev is not None:
        ev.succeed()
    return b""                      # answered before the XOR, as server_on_xor does
    yield  # pragma: no cover


def _xor_actor(ctx, st: _State):
    host, b = st.host, st.block
    while True:
        if not st.xor_queue:
            st.xor_wake = ctx.env.event()
            yield st.xor_wake
            continue
        delta, parity = st.xor_queue.popleft()
        ns = int(3 * b * st.stream_ns_per_byte)
        ctx.cpu(ns)
        yield 0                     # the XOR takes its CPU time before it lands
        np.bitwise_xor(host[parity:parity + b], host[delta:delta + b], out=host[parity:parity + b])
        host[delta:delta + b] = 0
        st.free_deltas.append(delta)
        st.count("xors")
        st.count("xor_bytes", b)
        st.count("xor_cpu_ns", ns)


# -- checkpoints --------------------------------------------------------------------------------------

def index_words(fabric, layout: dict, pos: int) -> np.ndarray:
    """A copy of the index words the memory node at ``pos`` holds (its subtables, in order)."""
    m = layout["memory_nodes"][pos]
    h64 = fabric.memory[m].host64
    parts = [h64[off // 8:(off + nbytes) // 8] for off, nbytes in layout["index_regions"][pos]]
    return np.concatenate(parts) if parts else np.zeros(0, np.uint64)


def replica_words(fabric, layout: dict, holder: int, rank: int) -> np.ndarray:
    """The checkpoint copy memory node ``holder`` keeps of the index of node ``holder - 1 - rank``
    (a view of its memory)."""
    rep = layout["ckpt_areas"][holder][rank]
    m = layout["memory_nodes"][holder]
    return fabric.memory[m].host64[rep[0] // 8:rep[0] // 8 + rep[2] // 8]


def _ckpt_recv(ctx, req):
    st = state_of(ctx)
    st.poke()
    rank, changed = _CKPT.unpack(req.payload)
    rep_off, delta_off, nbytes = st.layout["ckpt_areas"][st.pos][rank]
    ns = int(nbytes * (LZ4_DECOMPRESS_NS_PER_BYTE + 2 * st.stream_ns_per_byte))
    ctx.cpu(ns)
    yield 0
    if changed:
        h64 = ctx.memory.host64
        base = delta_off // 8 + 1
        idx = h64[base:base + changed].view(np.uint64).astype(np.int64)
        vals = h64[base + changed:base + 2 * changed]
        rep = h64[rep_off // 8:rep_off // 8 + nbytes // 8]
        rep[idx] ^= vals
    st.count("ckpt_received")
    st.count("ckpt_applied_bytes", nbytes)
    st.count("ckpt_cpu_ns", ns)
    return b""


def _ckpt_actor(ctx, st: _State, interval_ns: int, replicas: int):
    lay = st.layout
    last = index_words(ctx.fabric, lay, st.pos)
    nbytes = last.size * 8
    rdma = NodeRdma(ctx.host, ctx.index, buffer_bytes=CKPT_BUFFER)
    co = rdma.thread().coroutine()
    piece = CKPT_BUFFER // 4
    names = [ctx.fabric.nodes[m].name for m in st.mns]
    start = ctx.env.now
    while True:
        # the code's timer measures from one checkpoint's start to the next one's
        # (thread_ckpt_send: last_ckpt_time = curr_ckpt_time before it sends)
        yield ctx.env.timeout(max(0, start + interval_ns - ctx.env.now))
        if ctx.stopped is not None and ctx.stopped.triggered:
            return
        start = ctx.env.now
        now = index_words(ctx.fabric, lay, st.pos)
        delta = now ^ last
        idx = np.flatnonzero(delta)
        # the code's pass: copy + XOR against the previous checkpoint, then LZ4 over the whole delta
        ns = int(nbytes * (2 * st.stream_ns_per_byte + LZ4_COMPRESS_NS_PER_BYTE))
        ctx.cpu(ns)
        st.count("ckpt_cpu_ns", ns)
        yield 0
        if not idx.size:
            if id(ctx.env) in CLIENT_ENVS:
                st.count("idle_parks")
                st.ckpt_wake = ctx.env.event()
                PARKED.setdefault((lay["nonce"], id(ctx.env)), []).append(st)
                yield st.ckpt_wake           # nothing changed: wait for the next write or RPC
                start = ctx.env.now
            continue
        payload = (np.array([idx.size], np.uint64).tobytes() + idx.astype(np.uint64).tobytes()
                   + delta[idx].tobytes())
        wire = len(payload)             # DELTA_HEADER_BYTES + DELTA_ENTRY_BYTES per changed word
        for rank in range(replicas):
            holder = (st.pos + 1 + rank) % st.n
            _rep, delta_off, _nb = lay["ckpt_areas"][holder][rank]
            addr = gaddr(st.mns[holder], delta_off)
            for i in range(0, len(payload), piece):
                co.write(addr + i, payload[i:i + piece])
                yield co.sync()
            st.count("ckpt_sent_bytes", wire)
            yield from rpc(ctx, names[holder], _CKPT.pack(rank, int(idx.size)), method=M_CKPT_RECV,
                           port=CKPT_PORT, timeout_ns=CKPT_RPC_TIMEOUT_NS)
        last = now
        st.count("checkpoints")
        st.count("ckpt_scanned_bytes", nbytes)
        st.count("ckpt_changed_words", int(idx.size))


def memory_server(ctx):
    """``AcesoSystem.servers["memory"]``: the actors of one memory node."""
    st = state_of(ctx)
    lay = ctx.layout
    main = RpcServer(ctx, {M_ALLOC: _alloc, M_ALLOC_DELTA: _alloc_delta, M_SEAL: _seal, M_XOR: _xor},
                     threads=1, port=RPC_PORT, verbs_buffer=0)
    actors = main.actors()
    actors.append(_xor_actor(ctx, st))
    replicas = lay["ckpt_replicas"]
    if replicas:
        recv = RpcServer(ctx, {M_CKPT_RECV: _ckpt_recv}, threads=1, port=CKPT_PORT, verbs_buffer=0)
        actors += recv.actors()
        if lay["ckpt_interval_ns"] > 0:
            actors.append(_ckpt_actor(ctx, st, lay["ckpt_interval_ns"], replicas))
    return actors
