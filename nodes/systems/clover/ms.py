"""Clover's metadata server (MS): key -> latest version, key creation, chunk allocation, GC.

Why a server at all: Clover (Tsai, Shan, Zhang, ATC'20, "Disaggregating Persistent Memory and
Controlling Them Remotely") keeps data and metadata apart: versions live on passive memory nodes,
written and read with one-sided verbs, while a metadata server with CPUs owns the index (which
key exists, where its chain is), hands out memory and collects old versions. Clients cache a
key's latest known address and go straight to the memory nodes on a hit; everything else is an
RPC here, and the MS's cores are what caps Clover's throughput (FlexKV §5.2, Figs. 11 and 22).

Where it runs: on one memory node of the rack, the *metadata server node* (the system option
``ms_node``, the last memory node by default), whose ``[memory] cores`` are its CPU; the other
memory nodes hold the versions and stay passive (their cores idle). In FlexKV's setup the MS is
one extra machine beside the three memory nodes; a rack of 4 memory nodes is that.

What it does per request (each a handler of ``shm.rpc.rpc_server``, one request at a time per
server thread, ``ms_threads`` threads, at most the node's cores), with its CPU charged on the MS's
cores besides the RPC layer's own ``cpu.rpc_handler_ns`` and the reply's post:

* ``M_QUERY`` (a client's address-cache miss, or a chain it gave up chasing): the key's entry in
  the MS's hash table: hashing the key and one DRAM miss (pDPM ``MITSUME_ENTRY_QUERY`` to
  ``mitsume_con_alloc_key_to_controller_id(key)``, answered from the controller's hash table);
* ``M_CREATE`` (the first insert of a key): the lookup, and a new entry pointing at the version the
  client already wrote (pDPM ``mitsume_tool_open``): hashing, two DRAM misses;
* ``M_GC`` (a client's batch of "key K's chain moved on to version V"; pDPM's client GC threads
  send up to ``MITSUME_CLT_CONSUMER_MAX_GC_NUMS`` = 16 per ``MITSUME_GC_REQUEST``): per entry the
  lookup and the table update to the newest sequence number (two DRAM misses). Once answered, the
  old versions are no longer reachable from the MS's table, and the client retires them for
  epoch-based reuse (see the client);
* ``M_ALLOC`` (a client's allocator ran out): a fresh chunk of a memory node (``fabric.allocate``),
  priced ``software.alloc_server_ns`` (the profile's assumption for an allocation server's work).

The table is a dict in the MS process's memory (it is the MS's DRAM, which no other node reads).
A bulk load, which runs in a compute node's process, leaves its keys in a log in the MS node's
memory (``bulk_log_*`` below); the MS takes them into its table at its first request after the
load (the log's anchor word tells it), with no modelled cost (a load, not the measured run).
"""

from __future__ import annotations

import struct

from nodes.systems.api import SystemGaveUp
from shm.rpc import rpc_server

from .layout import (
    ALLOC_REPLY, ALLOC_REQ, CREATE_REPLY, CREATED, EXISTS, GC_ENTRY, M_ALLOC, M_CREATE, M_GC, M_QUERY,
    MAX_UNIT_OFFSET, NO_MEMORY, PTR_SEQ, UNIT,
)

#: Bulk-load log: chunks in the MS node's memory, each ``next chunk offset u64 | bytes used u64 |
#: records``; a record is ``pointer u64 | key length u16 | key``. The anchor (a line ``setup``
#: carves) holds the first chunk's offset + 1 (0: no bulk load) and the number of keys.
BULK_CHUNK = 1 << 20
BULK_HEAD = struct.Struct("<QQ")
BULK_REC = struct.Struct("<QH")


class MsCosts:
    """The MS's CPU per request beyond the RPC layer's (see the module docstring)."""

    def __init__(self, profile):
        sw = profile.software
        self.hash_cycles, self.hash_per_byte, self.ghz = sw.hash_cycles, sw.hash_cycles_per_byte, profile.cpu.ghz
        self.dram_ns = sw.dram_ns                    # one dependent miss into the hash table
        self.alloc_ns = sw.alloc_server_ns

    def hash_ns(self, key_len: int) -> int:
        return int((self.hash_cycles + self.hash_per_byte * key_len) / self.ghz)


class MsState:
    """The metadata server's table and counters, one per MS node per rack (made by ``rpc_server``'s
    setup in the MS's process)."""

    def __init__(self, ctx):
        layout = ctx.layout
        self.fabric = ctx.fabric
        self.table: dict[bytes, list] = {}           # key -> [pointer, seq] of the newest version known
        self.costs = MsCosts(ctx.profile)
        self.node = ctx.index
        self.host64 = ctx.fabric.memory[ctx.index].host64
        self.anchor = layout["bulk_anchor"] // 8
        self.ingested = False
        self.data_nodes = set(layout["data_nodes"])
        self.queries = self.creates = self.create_conflicts = self.gc_requests = self.gc_entries = 0
        self.allocs = 0

    def ingest(self) -> None:
        """Take a bulk load's keys into the table (once the anchor says there was one)."""
        h = self.host64
        first = int(h[self.anchor])
        if not first:
            return
        self.ingested = True
        mem = self.fabric.memory[self.node].host
        off = first - 1
        while off:
            nxt, used = BULK_HEAD.unpack_from(mem, off)
            pos, end = off + BULK_HEAD.size, off + BULK_HEAD.size + used
            while pos < end:
                ptr, klen = BULK_REC.unpack_from(mem, pos)
                pos += BULK_REC.size
                self.table[bytes(mem[pos:pos + klen])] = [ptr, 1]
                pos += klen
            off = int(nxt)


def _state(ctx) -> MsState:
    st = ctx.clover_ms
    if not st.ingested:
        st.ingest()
    return st


def handle_query(ctx, req):
    st = _state(ctx)
    key = bytes(req.payload)
    st.queries += 1
    ctx.cpu(st.costs.hash_ns(len(key)) + st.costs.dram_ns)
    e = st.table.get(key)
    return b"" if e is None else PTR_SEQ.pack(e[0], e[1])
    yield  # pragma: no cover


def handle_create(ctx, req):
    st = _state(ctx)
    ptr, seq = PTR_SEQ.unpack_from(req.payload, 0)
    key = bytes(req.payload[PTR_SEQ.size:])
    ctx.cpu(st.costs.hash_ns(len(key)) + 2 * st.costs.dram_ns)
    e = st.table.get(key)
    if e is not None:
        st.create_conflicts += 1
        return CREATE_REPLY.pack(EXISTS, e[0], e[1])
    st.creates += 1
    st.table[key] = [ptr, seq]
    st.host64[st.anchor + 2] += 1          # keys created: what a later bulk load refuses to load over
    return CREATE_REPLY.pack(CREATED, ptr, seq)
    yield  # pragma: no cover


def handle_gc(ctx, req):
    st = _state(ctx)
    data = req.payload
    pos, n, cpu = 0, 0, 0
    costs = st.costs
    table = st.table
    while pos < len(data):
        ptr, seq, klen = GC_ENTRY.unpack_from(data, pos)
        pos += GC_ENTRY.size
        key = bytes(data[pos:pos + klen])
        pos += klen
        n += 1
        cpu += costs.hash_ns(klen) + 2 * costs.dram_ns      # the lookup and the entry's update
        e = table.get(key)
        if e is None:
            raise SystemGaveUp(f"Clover MS: a GC request for key {key[:16]!r}, which was never created")
        if seq > e[1]:                     # GC requests of one key may arrive out of order
            e[0], e[1] = ptr, seq
    st.gc_requests += 1
    st.gc_entries += n
    ctx.cpu(cpu)
    return b""
    yield  # pragma: no cover


def handle_alloc(ctx, req):
    st = _state(ctx)
    node, nbytes = ALLOC_REQ.unpack_from(req.payload, 0)
    ctx.cpu(st.costs.alloc_ns)
    st.allocs += 1
    if node not in st.data_nodes:
        raise SystemGaveUp(f"Clover MS: allocation asked on node {node}, which holds no versions")
    try:
        off = st.fabric.allocate(node, nbytes, align=UNIT)
    except MemoryError:
        return ALLOC_REPLY.pack(NO_MEMORY)
    if (off + nbytes) // UNIT > MAX_UNIT_OFFSET:
        raise SystemGaveUp(f"Clover MS: memory node {node}'s offset {off:#x} is beyond the pointer's 256 GiB")
    return ALLOC_REPLY.pack(off)
    yield  # pragma: no cover


HANDLERS = {M_QUERY: handle_query, M_CREATE: handle_create, M_GC: handle_gc, M_ALLOC: handle_alloc}


def ms_threads(options: dict, cores: int) -> int:
    """Server threads of the MS: the option, or every core of the MS node."""
    return options["ms_threads"] or cores


def start_ms(ctx):
    """``servers["memory"]``: the RPC server on the metadata server node; nothing on the others."""
    if ctx.index != ctx.layout["ms"]:
        return []

    def setup(c):
        c.clover_ms = MsState(c)

    return rpc_server(HANDLERS, threads=ms_threads(ctx.options, ctx.cores.n), setup=setup)(ctx)
