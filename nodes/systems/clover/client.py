"""The Clover client: out-of-place versions in per-key chains, an address cache, the MS on a miss.

Clover (pDPM, Tsai, Shan, Zhang, ATC'20; code WukLab/pDPM ``clover/``) writes every version of a
key out of place, to ``replicas`` memory nodes, and links it behind the key's previous version: a
chain whose tail is the current value. A client caches, per key, the address of the latest
version it knows (``mitsume_tool_local_hashtable_operations``) and goes straight to the memory
nodes on a hit; on a miss it asks the metadata server (``ms.py``). Why chains: a writer needs one
CAS on one word (the tail's ``next``) and no lock, and a reader whose cached address is a few
versions old still finds the current one by following ``next`` words.

Verbs per operation (a warm cache that names the tail, no contention; r = replicas; a "round" is
one round trip; the table is docs/clover.md's):

=========================  =====================================================  ========
op                         rounds                                                 verbs
=========================  =====================================================  ========
get                        READ the cached version                                1
update / delete            WRITE r copies | CAS the tail's next | WRITE the       2r
                           r-1 backups' next (r > 1)
insert (new key)           WRITE r copies | RPC create to the MS                  r + RPC
insert (deleted key)       as an update (a tombstone is the cached tail)          2r
get / update (cache miss)  RPC query to the MS, then a READ of the version it     + RPC
                           names (the walk), then as above                        + READ
=========================  =====================================================  ========

A stale cached address costs one READ per version behind (following ``next``); after
``MITSUME_TOOL_ASKING_THRESHOLD`` = 7 hops the client asks the MS for the newest address it knows.
A cached address whose block was reused (its generation differs, ``layout.py``) is dropped and the
MS asked. A failed CAS (another writer appended first) walks to the new tail, re-WRITEs the block
with the next sequence number and CASes again.

Why the update WRITEs before it CASes, for every r: a CAS that published a block before its WRITE
landed would let a reader READ an unwritten block. pDPM's code does exactly this for r = 1 (poll
the WRITEs, then ``userspace_one_cs``); for r > 1 it CASes an *uncommitted* marker concurrently
with the WRITEs and then WRITEs the replicas' pointers twice (uncommitted, committed). Here every r
takes the r = 1 path and then WRITEs the backups' ``next`` words: the same three rounds for
r > 1, two for r = 1, and a writer that dies between its CAS and its last WRITE leaves a key
others can still append to (pDPM's uncommitted marker would block it).

Garbage collection: once its CAS succeeded, a writer queues "key K moved on to version V (seq s)"
for the MS; a background coroutine of the thread sends the queue in batches of ``gc_batch``
(pDPM's client GC threads: ``MITSUME_CLT_CONSUMER_MAX_GC_NUMS`` = 16 per request), at most
``gc_delay_us`` after the oldest entry. When the MS has answered, its table has moved past the old
versions, and the client retires them (all their replicas, as one group) to epoch-based
reclamation (``nodes/systems/lib/reclaim.py``: every operation runs inside an epoch): they come
back for this client's next versions once no reader can hold them. Why only after the MS's answer:
the MS's table must never name a reused block, so that a client that asks it always finds a live
chain; a client's *cached* address is not protected by any epoch (it outlives operations), which
is what the generation in every pointer is for.

Allocation: fresh blocks come from chunks the MS hands out by RPC (``M_ALLOC``, ``chunk_bytes``;
pDPM clients ask the controller for ``MITSUME_CLT_CONSUMER_PER_ASK_NUMS`` = 16 entries at a time);
reclaimed groups are reused first.
"""

from __future__ import annotations

import struct
from collections import OrderedDict, deque
from typing import NamedTuple

from nodes.systems.api import KVClient, SystemGaveUp
from nodes.systems.lib.alloc import ChunkAllocator
from nodes.systems.lib.heap import POINTER, malloc_chunk, unordered_map_element
from nodes.systems.lib.reclaim import Reclaimer
from nodes.systems.lib.shared import shared
from nodes.systems.race.client import hash_ns
from shm.coro import VerbBatch
from shm.failpoints import failpoint
from shm.rpc import HEADER, RpcTimeout

from .layout import (
    ALLOC_REPLY, ALLOC_REQ, CREATE_REPLY, CREATED, GC_ENTRY, KIND_TOMBSTONE, KIND_VALUE, M_ALLOC, M_CREATE, M_GC,
    M_QUERY, MAX_UNIT_OFFSET, NO_MEMORY, PTR_SEQ, UNIT, LayoutError, block_units, decode_block, empty_next,
    encode_block, is_link, next_gen, pack_ptr, ptr_gaddr, ptr_gen, ptr_node, ptr_offset, ptr_units,
)

#: pDPM ``MITSUME_TOOL_ASKING_THRESHOLD`` (clover/mitsume_parameter.h): a chase this many hops long
#: asks the MS for the newest address it knows.
ASKING_THRESHOLD = 7
#: An operation whose retry loop (failed CASes, stale addresses) runs this often gives up.
RETRY_LIMIT = 100_000
#: pDPM's per-key cache entry (``struct mitsume_private_hash_struct``, clover/mitsume_struct.h):
#: the 8-byte key, epoch and replication factor, the shortcut pointer, the hop counters and the GC
#: targets (40 B) and one 8-byte pointer per replica (``ptr[MITSUME_MAX_REPLICATION]``, compiled
#: for the replication run).
PRIVATE_HASH_STRUCT = 40


def entry_bytes(replicas: int) -> int:
    """What one cached key costs a Clover compute node, as pDPM's code holds it: its
    ``mitsume_private_hash_struct`` ``malloc``'d on its own and its element of
    ``std::unordered_map<uint64_t, mitsume_private_hash_struct *>`` (nodes/systems/lib/heap.py):
    120 B with 3 replicas. Until issue 40: the key, 8 a replica and 32 B assumed (64 B)."""
    return malloc_chunk(PRIVATE_HASH_STRUCT + 8 * replicas) + unordered_map_element(8, POINTER, cached_hash=False)


class CacheEntry(NamedTuple):
    ptr: int             # the version's primary copy
    seq: int             # its place in the chain (0: unknown)
    kind: int            # KIND_VALUE, KIND_TOMBSTONE, or 0 (unknown: an address the MS gave)
    backups: tuple       # its backup copies' pointers (known once its block was read or written)


class AddressCache:
    """A compute node's address cache (one per node, shared by its threads), FIFO within a byte
    budget. pDPM keeps one hash table per client node (``local_ctx_clt``) with an optional FIFO/LRU
    bound (``MITSUME_LRU_SIZE`` = 100,000 entries, ``MITSUME_ENABLE_FIFO_LRU_QUEUE`` off in the
    code); here the bound is bytes, so a compute-node memory limit applies (FlexKV Fig. 23)."""

    def __init__(self, budget: int, replicas: int):
        self.budget = int(budget)
        self.per_entry = entry_bytes(replicas)   # the key is pDPM's 8-byte mitsume_key, inside it
        self._d: OrderedDict = OrderedDict()
        self.bytes = 0
        self.evictions = 0

    def get(self, key: bytes):
        return self._d.get(key)

    def put(self, key: bytes, e: CacheEntry) -> None:
        old = self._d.get(key)
        if old is not None:
            if e.seq >= old.seq:           # another coroutine of the node may know a newer one
                self._d[key] = e
            return
        size = self.per_entry
        if size > self.budget:
            return
        d = self._d
        while self.bytes + size > self.budget:
            k, _ = d.popitem(last=False)
            self.bytes -= self.per_entry
            self.evictions += 1
        d[key] = e
        self.bytes += size

    def drop(self, key: bytes) -> None:
        if self._d.pop(key, None) is not None:
            self.bytes -= self.per_entry

    def __len__(self) -> int:
        return len(self._d)


class CloverStats(NamedTuple):
    gets: int
    inserts: int
    updates: int
    deletes: int
    cache_hits: int            # operations whose key's address was in the node's cache
    cache_misses: int          # ... that asked the MS (M_QUERY)
    ms_queries: int            # M_QUERY RPCs (misses, long chases, stale addresses)
    ms_creates: int            # M_CREATE RPCs (first inserts of keys)
    create_conflicts: int      # ... that found the key created by another client
    gc_rpcs: int               # M_GC RPCs (batches)
    gc_entries: int            # versions reported superseded
    alloc_rpcs: int            # M_ALLOC RPCs (chunks)
    ms_wait_ns: int            # virtual ns operations spent waiting for the MS's replies (not GC's)
    chain_hops: int            # READs of a version past the one the operation started from
    stale_addresses: int       # addresses whose block was reused or torn (dropped; the MS asked)
    cas_failures: int          # tail CASes another writer won
    versions_written: int      # versions written (each to r memory nodes)
    blocks_reused: int         # version groups served by reclaimed blocks
    bytes_reclaimed: int
    limbo_blocks: int          # retired version groups waiting for the epoch
    epoch_advances: int
    cache_entries: int         # node-wide (one client of the node reports it, 0 in the others)
    cache_bytes: int           # the node's cache (NODE_SHARED_FIELDS: the largest, not a sum)
    memory_bytes: int          # bytes of memory-node memory of the versions this client holds


class MsChunkAllocator(ChunkAllocator):
    """A ChunkAllocator whose chunks come from the metadata server (``M_ALLOC``), not from a
    memory node's own allocator: in Clover the MS owns the memory nodes' space."""

    __slots__ = ("client",)

    def _new_chunk(self, co):
        ev = self._refill = co.env.event()
        got = None
        try:
            for _ in range(len(self.memory_nodes)):
                node = self.memory_nodes[self._next]
                self._next = (self._next + 1) % len(self.memory_nodes)
                reply = yield from self.client._ms_call(co, M_ALLOC, ALLOC_REQ.pack(node, self.chunk_bytes))
                (off,) = ALLOC_REPLY.unpack(reply)
                self.client.alloc_rpcs += 1
                if off != NO_MEMORY:
                    got = (node, off)
                    break
            return got is not None
        finally:
            if got is not None:
                self.node, self.pos = got
                self.end = got[1] + self.chunk_bytes
                self.chunks += 1
                self.bytes += self.chunk_bytes
            self._refill = None
            ev.succeed()


class CloverClient(KVClient):
    """Clover for one modelled thread (``shm.coro.RdmaThread``)."""

    def __init__(self, fabric, layout: dict, thread, options: dict):
        self.fabric = fabric
        self.thread = thread
        self.env = thread.env
        self.layout = layout
        self.ms_name = layout["ms_name"]
        self.data = list(layout["data_nodes"])
        self.r = layout["replicas"]
        node = thread.owner.node
        self.reclaim = Reclaimer(fabric, layout["epochs"], thread)
        chunk = options["chunk_bytes"]
        self.alloc = MsChunkAllocator(fabric, self.data, chunk, start=node * 7 + thread.index, reclaim=self.reclaim,
                                      owner="Clover", max_offset=MAX_UNIT_OFFSET * UNIT,
                                      offset_limit="the pointer's 32-bit unit offset (256 GiB per memory node)")
        self.alloc.client = self
        self.backup_alloc = {}
        for n in self.data:
            a = MsChunkAllocator(fabric, [n], chunk, owner="Clover", max_offset=MAX_UNIT_OFFSET * UNIT)
            a.client = self
            self.backup_alloc[n] = a
        self._groups: dict = {}        # retired/released primary (node, offset) -> (backups, gen)
        self.cache = shared(thread.owner, ("clover", layout["ms"], layout["bulk_anchor"]), "address-cache",
                            lambda: AddressCache(options["cache_bytes"], self.r))
        self._reports_cache = shared(thread.owner, ("clover", layout["ms"], layout["bulk_anchor"]), "reporter",
                                     lambda: [self])[0] is self
        prof = fabric.profile
        self._search_ns = options["search_cpu_ns"]
        self._write_ns = options["write_cpu_ns"]
        self._line_ns = prof.cpu.local_read_ns_per_line
        self._dram_ns = prof.software.dram_ns
        self._rpc_timeout = int(options["rpc_timeout_us"] * 1000)
        self._rpc_retries = options["rpc_retries"]
        self.gc_batch = options["gc_batch"]
        self.gc_delay_ns = int(options["gc_delay_us"] * 1000)
        self._max_payload = prof.udp.mtu_bytes - 28 - HEADER.size
        self._gc: deque = deque()
        self._gc_busy = False
        self._gc_co = None
        self.gets = self.inserts = self.updates = self.deletes = 0
        self.cache_hits = self.cache_misses = self.ms_queries = self.ms_creates = self.create_conflicts = 0
        self.gc_rpcs = self.gc_entries = self.alloc_rpcs = self.ms_wait_ns = 0
        self.chain_hops = self.stale_addresses = self.cas_failures = self.versions_written = 0

    # -- statistics ------------------------------------------------------------------------------
    def statistics(self) -> CloverStats:
        r = self.reclaim
        mine = self._reports_cache
        return CloverStats(self.gets, self.inserts, self.updates, self.deletes, self.cache_hits, self.cache_misses,
                           self.ms_queries, self.ms_creates, self.create_conflicts, self.gc_rpcs, self.gc_entries,
                           self.alloc_rpcs, self.ms_wait_ns, self.chain_hops, self.stale_addresses, self.cas_failures,
                           self.versions_written, r.reused, r.bytes_reclaimed, len(r.limbo), r.advances,
                           len(self.cache) if mine else 0, self.cache.bytes, self.alloc.used_bytes * self.r)

    # -- the KV interface ---------------------------------------------------------------------------
    def get(self, co, key: bytes):
        self.gets += 1
        return self.reclaim.run(self._get(co, bytes(key)))

    def insert(self, co, key: bytes, value: bytes):
        self.inserts += 1
        return self.reclaim.run(self._write(co, bytes(key), bytes(value), KIND_VALUE, False))

    def update(self, co, key: bytes, value: bytes):
        self.updates += 1
        return self.reclaim.run(self._write(co, bytes(key), bytes(value), KIND_VALUE, True))

    def delete(self, co, key: bytes):
        self.deletes += 1
        return self.reclaim.run(self._write(co, bytes(key), b"", KIND_TOMBSTONE, True))

    # -- the metadata server -------------------------------------------------------------------------
    def _ms_call(self, co, method: int, payload: bytes, *, background: bool = False):
        t0 = self.env.now
        try:
            reply = yield from co.rpc(self.ms_name, payload, method=method, timeout_ns=self._rpc_timeout,
                                      retries=self._rpc_retries)
        except RpcTimeout as e:
            raise SystemGaveUp(f"Clover: the metadata server {self.ms_name!r} did not answer: {e}") from None
        if not background:
            self.ms_wait_ns += self.env.now - t0
        return reply

    def _query(self, co, key: bytes):
        """The MS's entry for ``key`` (kind unknown), or None: the key was never created."""
        self.ms_queries += 1
        reply = yield from self._ms_call(co, M_QUERY, key)
        if not reply:
            return None
        p, s = PTR_SEQ.unpack(reply)
        return CacheEntry(p, s, 0, ())

    def _lookup(self, co, key: bytes):
        """The cached entry of ``key``, or the MS's (None: the key was never created)."""
        self.thread.cpu(hash_ns(self.fabric.profile, len(key)) + self._dram_ns)   # the local hash table
        e = self.cache.get(key)
        if e is not None:
            self.cache_hits += 1
            return e
        self.cache_misses += 1
        return (yield from self._query(co, key))

    # -- versions --------------------------------------------------------------------------------------
    def _read_version(self, co, key: bytes, p: int):
        """Generator: the version ``p`` points to, or None when its block is not that version any
        more (reused: another generation, another key, torn by a rewrite)."""
        units = ptr_units(p)
        h = co.read(ptr_gaddr(p), units * UNIT)
        yield co.sync()
        self.thread.cpu(self._line_ns * units)          # the checksum over the lines READ
        v = decode_block(h.data, key)
        if v is None or v.gen != ptr_gen(p) or not (is_link(v.next) or v.next == empty_next(v.gen)):
            self.stale_addresses += 1
            return None
        return v

    def _walk(self, co, key: bytes, start: CacheEntry, asked: bool):
        """Generator: ``(pointer, version)`` of the chain's tail, following ``next`` words from
        ``start``; a stale address sends it to the MS. ``asked``: ``start`` came from the MS."""
        p, hops = start.ptr, 0
        for _ in range(RETRY_LIMIT):
            v = yield from self._read_version(co, key, p)
            if v is None:
                self.cache.drop(key)
                e = yield from self._query(co, key)
                if e is None:
                    raise SystemGaveUp(f"Clover: key {key[:16]!r} had a chain but the MS does not know it")
                p, hops, asked = e.ptr, 0, True
                continue
            if not is_link(v.next):
                return p, v
            p = v.next
            hops += 1
            self.chain_hops += 1
            if hops >= ASKING_THRESHOLD and not asked:
                asked = True
                e = yield from self._query(co, key)
                if e is not None and e.seq > v.seq + 1:
                    p, hops = e.ptr, 0
        raise SystemGaveUp(f"Clover: no tail found for key {key[:16]!r} after {RETRY_LIMIT} READs")

    def _remember(self, key: bytes, p: int, v) -> None:
        self.cache.put(key, CacheEntry(p, v.seq, v.kind, tuple(v.backups)))

    def _get(self, co, key: bytes):
        self.thread.cpu(self._search_ns)
        e = yield from self._lookup(co, key)
        if e is None:
            return None
        p, v = yield from self._walk(co, key, e, asked=e.kind == 0)
        self._remember(key, p, v)
        return v.value if v.kind == KIND_VALUE else None

    # -- blocks ------------------------------------------------------------------------------------------
    def _alloc_group(self, co, units: int):
        """Generator: (primary pointer, backup pointers) of a block on r distinct memory nodes: a
        reclaimed group of this size, or fresh blocks on the primary's node and the r - 1 after it."""
        node, off = yield from self.alloc.alloc(co, units)
        g = self._groups.pop((node, off), None)
        if g is not None:
            backups, gen = g
            gen = next_gen(gen)
        else:
            gen = 1
            i = self.data.index(node)
            backups = []
            for j in range(1, self.r):
                bn = self.data[(i + j) % len(self.data)]
                backups.append((yield from self.backup_alloc[bn].alloc(co, units)))
        return pack_ptr(gen, units, node, off), tuple(pack_ptr(gen, units, n, o) for n, o in backups)

    def _free_group(self, p: int, backups: tuple, *, retire: bool) -> None:
        node, off = ptr_node(p), ptr_offset(p)
        self._groups[(node, off)] = (tuple((ptr_node(b), ptr_offset(b)) for b in backups), ptr_gen(p))
        (self.alloc.retire if retire else self.alloc.release)(node, off, ptr_units(p))

    def _write_block(self, co, p: int, backups: tuple, seq: int, kind: int, key: bytes, value: bytes) -> None:
        img = encode_block(ptr_gen(p), seq, kind, key, value, backups)
        self.thread.cpu(self._line_ns * ptr_units(p))   # building the block (and its checksum)
        co.write(ptr_gaddr(p), img)
        for b in backups:
            co.write(ptr_gaddr(b), img)
        self.versions_written += 1

    # -- writes ------------------------------------------------------------------------------------------
    def _write(self, co, key: bytes, value: bytes, kind: int, need_live: bool):
        """Append a version of ``kind`` if the key's tail is live (``need_live``: update, delete) or
        missing or a tombstone (insert); False, nothing changed, otherwise."""
        try:
            units = block_units(len(key), len(value))
            encode_block(1, 1, kind, key, value, ())         # refuse what no block holds, before any verb
        except LayoutError as e:
            raise SystemGaveUp(str(e)) from None
        self.thread.cpu(self._search_ns + self._write_ns)
        e = yield from self._lookup(co, key)
        grp = None
        try:
            if e is None:
                if need_live:
                    return False
                grp = yield from self._alloc_group(co, units)
                p, bps = grp
                self._write_block(co, p, bps, 1, kind, key, value)
                yield co.sync()
                failpoint("clover.insert.written")
                self.ms_creates += 1
                st, rp, rs = CREATE_REPLY.unpack((yield from self._ms_call(co, M_CREATE, PTR_SEQ.pack(p, 1) + key)))
                if st == CREATED:
                    grp = None
                    self.cache.put(key, CacheEntry(p, 1, kind, bps))
                    return True
                self.create_conflicts += 1
                e = CacheEntry(rp, rs, 0, ())                  # created meanwhile: append to its chain
            want = KIND_VALUE if need_live else KIND_TOMBSTONE
            if e.kind == want:
                tail, seq, tail_backups = e.ptr, e.seq, e.backups     # the cached version is the tail, we hope
            else:
                tail, v = yield from self._walk(co, key, e, asked=e.kind == 0)
                self._remember(key, tail, v)
                if (v.kind == KIND_VALUE) != need_live:
                    return False
                seq, tail_backups = v.seq, v.backups
            if grp is None:
                grp = yield from self._alloc_group(co, units)
            p, bps = grp
            for _ in range(RETRY_LIMIT):
                self._write_block(co, p, bps, seq + 1, kind, key, value)
                yield co.sync()                                  # the block is written before it is linked
                failpoint("clover.write.block_written")
                expect = empty_next(ptr_gen(tail))
                c = co.cas(ptr_gaddr(tail), expect, p)
                yield co.sync()
                old = int(c.value)
                if old == expect:
                    grp = None
                    failpoint("clover.write.linked")
                    for j, b in enumerate(tail_backups):        # the backups' chains (pDPM's nextptr mesh)
                        co.write(ptr_gaddr(b), struct.pack("<Q", bps[j]))
                    if tail_backups:
                        yield co.sync()
                    self.cache.put(key, CacheEntry(p, seq + 1, kind, bps))
                    self._submit_gc(key, p, seq + 1, tail, tail_backups)
                    return True
                self.cas_failures += 1
                if is_link(old):
                    tail, v = yield from self._walk(co, key, CacheEntry(old, 0, 0, ()), asked=False)
                else:                                            # the tail's block was reused: a stale address
                    self.stale_addresses += 1
                    self.cache.drop(key)
                    q = yield from self._query(co, key)
                    tail, v = yield from self._walk(co, key, q, asked=True)
                self._remember(key, tail, v)
                if (v.kind == KIND_VALUE) != need_live:
                    return False
                seq, tail_backups = v.seq, v.backups
            raise SystemGaveUp(f"Clover: {RETRY_LIMIT} CASes on key {key[:16]!r}'s tail failed")
        finally:
            if grp is not None:
                self._free_group(*grp, retire=False)           # never published

    # -- garbage collection ----------------------------------------------------------------------------
    def _submit_gc(self, key: bytes, p: int, seq: int, old: int, old_backups: tuple) -> None:
        self._gc.append((key, p, seq, old, old_backups))
        if not self._gc_busy:
            self._gc_busy = True
            self.env.process(self._gc_loop(), name="clover-gc")

    def _gc_loop(self):
        """Background: send the queued GC entries to the MS in batches, then retire the versions
        they superseded (see the module docstring)."""
        if self._gc_co is None:
            self._gc_co = VerbBatch(self.thread)                # not one of the workload's coroutines
        co = self._gc_co
        q = self._gc
        try:
            while q:
                if len(q) < self.gc_batch:
                    yield self.gc_delay_ns
                batch, payload = [], b""
                while q and len(batch) < self.gc_batch:
                    key, p, seq, _old, _ob = q[0]
                    entry = GC_ENTRY.pack(p, seq, len(key)) + key
                    if batch and len(payload) + len(entry) > self._max_payload:
                        break
                    payload += entry
                    batch.append(q.popleft())
                yield from self._ms_call(co, M_GC, payload, background=True)
                self.gc_rpcs += 1
                self.gc_entries += len(batch)
                for _key, _p, _seq, old, old_backups in batch:
                    self._free_group(old, old_backups, retire=True)
        finally:
            self._gc_busy = False
