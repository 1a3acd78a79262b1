"""FlexKV's proxy: the RPC service each compute node runs for the partitions it owns (§3.2-3.3).

A proxy is ``proxy_threads`` RPC server threads (2 by default, FlexKV Fig. 20) on the node's
``shm.rpc`` server, each running ``proxy_coroutines`` handlers at once (8 by default: a write
handler's memory-node WRITE and invalidations overlap other requests, §4.5's coroutines). They
share the node's :class:`NodeState`: the local index (loaded subtables), the per-key metadata and
the key and slot locks.

Methods (a request names the partition; a proxy that does not own it answers ``NOT_OWNER`` and the
client looks at its map again, which is how clients ride over a reassignment in progress):

* ``READ`` (key-based, the "fast path"): the committed slot words in the key's two combined buckets
  of the local index whose fingerprint matches (usually one), so the client READs the KV pair
  itself; bumps the key's read counter (plus the reads the client's cache hits owe) and, when the
  key's writes are under a quarter of its reads, adds the caller to the key's sharers and tells it
  to cache the pair (§3.3). The linearization point of a get is the proxy's scan.
* ``WRITE`` (slot-resolved): the client resolved the slot at the memory node (or had it cached)
  and sends (slot, expected word, new word) and the words it checked hold other keys. Under the
  key's and the slot's lock the proxy checks the expected word against its local index (a remote
  CAS executed locally), invalidates the cached copies (RPCs to all the sharers at once; the old
  pair's valid bit cleared by a WRITE) while it WRITEs the new word into the memory node's slot,
  then commits with a LOCAL_CAS once both are done and answers. Decisions that a key is absent
  (an insert into a free slot, an update or delete of a missing key) are also taken here: every
  committed word matching the key's fingerprint must be one the client checked, else
  ``MISMATCH``, so a stale view of the memory node never decides anything.
* ``INVALIDATE`` (proxy to sharer): drop the key from the node's cache and refuse installs of
  requests that were out meanwhile.
* ``PAUSE`` / ``RESUME`` (manager to node): the two phases of a reassignment (reassignment.py).
* ``FLUSH``: read counts owed by cache hits, sent when more than ``FLUSH_READS`` piled up.

**The proxy threads share one lock.** The local index, the per-key metadata and the key locks
are structures every proxy thread of the node reads and writes, so each handler's work on them
(the scan and the metadata bump, and the commit) runs under one spinlock (:func:`_shared`), priced
as the doorbell spinlock of the verbs layer (``doorbell.lock_ns`` plus ``lock_per_sharer_ns`` per
other thread sharing it: the cache line bouncing between cores, docs/fabric.md). One thread never
waits; each added thread makes every critical section longer, which is the contention the paper
gives for throughput falling past 2 threads (Fig. 20: "lock contention on multithreaded data
structures").

Why the memory node's slot is written before the commit: the proxy's node may die. Its partitions
then go back to the one-sided path over the memory node's copy, which must already hold every
committed write; a write that reached the memory node but not the LOCAL_CAS is redone, as FUSEE
treats an incomplete write (§3.6).
"""

from __future__ import annotations

import struct

import numpy as np

from nodes.systems.lib.hashing import hash64
from nodes.systems.race.bucket import probe, scan, slot_offset
from nodes.systems.race.client import hash_ns as race_hash_ns
from nodes.systems.race.layout import FP_SHIFT, NODE_SHIFT, OFFSET_MASK, TENTATIVE
from shm.failpoints import failpoint
from shm.fabric import gaddr
from shm.rpc import RPC_PORT, RpcError, RpcServer, endpoint_of

from .layout import INVALID_BIT, INVALID_BYTE, is_pair, reusable
from .node import state_of

M_READ, M_WRITE, M_INVALIDATE, M_PAUSE, M_RESUME, M_FLUSH = 1, 2, 3, 4, 5, 6
OK, NOT_OWNER, BUSY, MISMATCH, EXISTS, ABSENT, OVERWRITTEN = 0, 1, 2, 3, 4, 5, 6
OP_INSERT, OP_UPDATE, OP_DELETE = 1, 2, 3
F_CACHE_PAIR = 1

READ_REQ = struct.Struct("<HH")          # partition, piggybacked reads; then the key
READ_REPLY = struct.Struct("<BBB")       # status, flags, candidates; then (slot u32, word u64) each
CAND = struct.Struct("<IQ")
#: op, partition, slot (-1: none), expected, new, when the client saw the key's pair there (virtual
#: ns), checked; then the checked words and the key
WRITE_REQ = struct.Struct("<BHiQQqB")
WRITE_REPLY = struct.Struct("<BQ")       # status, the slot's word (OK: the replaced one)
NO_SLOT = -1
#: cache hits a client piles up for a key before it sends them in a FLUSH of their own
FLUSH_READS = 32
#: 16-bit counters: on overflow both shift right by 2 (§3.3)
COUNTER_MAX = 0xFFFF
_BLOCK_ADDR = OFFSET_MASK & ~TENTATIVE


class Directory:
    """Where every partition's subtable is (the layout's directory entries), for proxies."""

    def __init__(self, layout: dict):
        from nodes.systems.race.directory import DirectoryCache
        self.d = DirectoryCache(layout["directory"], layout["global_depth"], layout["groups_per_subtable"],
                                layout["directory_entries"])

    def slot_gaddr(self, p: int, slot: int) -> int:
        d = self.d
        return gaddr(d.nodes[p], d.bases[p] + 8 * slot)


def _dir(st):
    d = getattr(st, "directory", None)
    if d is None:
        d = st.directory = Directory(st.layout)
    return d


def candidates(local: np.ndarray, d, p: int, h: int, out: np.ndarray):
    """Scan the key's two combined buckets in a local subtable copy: ``(pairs, free, words)`` where
    ``pairs`` lists (slot, word) of committed KV pairs with the key's fingerprint."""
    off_a, off_b, flags = probe(h, 0, d.n_main)
    r = scan(local, off_a >> 3, off_b >> 3, flags, h >> FP_SHIFT, d.expected[p], out)
    pairs = []
    for k in range(r & 63):
        w = int(out[2 * k + 1])
        if is_pair(w):
            pairs.append((slot_offset(int(out[2 * k]), off_a, off_b) >> 3, w))
    return pairs


def start_servers(ctx, handlers: dict, threads: int, coroutines: int = 1) -> list:
    """The proxy's RPC server (``threads`` x ``coroutines``) and the invalidation server of a node:
    their actors."""
    from shm.rpc import SERVERS
    server = RpcServer(ctx, handlers, threads=threads, coroutines=coroutines)
    SERVERS[ctx.name] = server
    inval = RpcServer(ctx, INVALIDATE_HANDLERS, threads=1, port=INVALIDATE_PORT, verbs_buffer=0)
    return server.actors() + inval.actors()


def _cpu(ctx, req, ns: int) -> None:
    """Charge a handler's CPU to its proxy thread's core (the node's cores without verbs)."""
    if req.co is not None:
        req.co.thread.cpu(int(ns))
    else:
        ctx.cpu(ns)


def _shared(ctx, req, st, ns: int) -> None:
    """Charge ``ns`` of work on the structures the node's proxy threads share, under their
    spinlock (module docstring): wait (spinning, on this thread's core) until the lock is free,
    then hold it for the work plus the lock's own cost, which grows with the threads sharing it."""
    co = req.co
    if co is None:
        ctx.cpu(ns)
        return
    thread = co.thread
    db = ctx.profile.doorbell
    hold = ns + db.lock_ns + (st.proxy_threads - 1) * db.lock_per_sharer_ns
    ready = max(ctx.env.now + ctx.env.active_process.debt_ns, thread.cpu_free)
    start = max(ready, st.lock_free_at)
    st.lock_free_at = start + hold
    thread.cpu(start - ready + hold)


def _hash_ns(ctx, n: int) -> int:
    return race_hash_ns(ctx.profile, n)


def _bump(m: list, write: bool, reads: int = 0) -> None:
    if write:
        m[1] += 1
    else:
        m[2] += 1 + reads
    if m[1] > COUNTER_MAX or m[2] > COUNTER_MAX:
        m[1] >>= 2
        m[2] >>= 2


def handle_read(ctx, req):
    st = state_of(ctx.fabric, ctx.layout, ctx.index, ctx.env)
    p, reads = READ_REQ.unpack_from(req.payload)
    key = bytes(req.payload[READ_REQ.size:])
    cpu = ctx.profile.cpu
    if st.active[p] != ctx.index:
        _cpu(ctx, req, cpu.local_read_ns_per_line)
        return READ_REPLY.pack(NOT_OWNER, 0, 0)
    h = hash64(key)
    _cpu(ctx, req, _hash_ns(ctx, len(key)))
    _shared(ctx, req, st, 4 * cpu.local_read_ns_per_line + cpu.local_cas_ns)      # scan, metadata
    pairs = candidates(st.local[p], _dir(st).d, p, h, st.scan_out)
    st.reads_served += 1
    m = st.meta.get(key)
    if m is None:
        m = st.meta[key] = [0, 0, 0, p]
    _bump(m, False, reads)
    flags = 0
    # no caching while a write of the key is under way: it may have taken the sharer list already,
    # and the pair we return is the one it replaces (§3.3: block in-flight RPCs from caching)
    if st.kv_cache and m[1] * 4 < m[2] and key not in st.key_locks:
        m[0] |= 1 << st.layout["cn_ordinal"][req.src_node]
        flags = F_CACHE_PAIR
    out = [READ_REPLY.pack(OK, flags, len(pairs))]
    out += [CAND.pack(s, w) for s, w in pairs]
    return b"".join(out)
    yield  # pragma: no cover


def handle_flush(ctx, req):
    st = state_of(ctx.fabric, ctx.layout, ctx.index, ctx.env)
    p, reads = READ_REQ.unpack_from(req.payload)
    key = bytes(req.payload[READ_REQ.size:])
    _shared(ctx, req, st, ctx.profile.cpu.local_cas_ns)
    m = st.meta.get(key)
    if m is not None and st.active[p] == ctx.index:
        _bump(m, False, reads - 1)
    return b""
    yield  # pragma: no cover


def handle_write(ctx, req):
    st = state_of(ctx.fabric, ctx.layout, ctx.index, ctx.env)
    op, p, slot, expected, new, seen, n = WRITE_REQ.unpack_from(req.payload)
    at = WRITE_REQ.size
    checked = set(struct.unpack_from(f"<{n}Q", req.payload, at))
    key = bytes(req.payload[at + 8 * n:])
    cpu = ctx.profile.cpu
    if st.active[p] != ctx.index:
        _cpu(ctx, req, cpu.local_read_ns_per_line)
        return WRITE_REPLY.pack(NOT_OWNER, 0)
    _cpu(ctx, req, _hash_ns(ctx, len(key)))
    _shared(ctx, req, st, cpu.local_cas_ns + 4 * cpu.local_read_ns_per_line)   # key lock, scan
    if key in st.key_locks or (p, slot) in st.slot_locks:
        w = st.writing.get(key)
        if w is not None and op == OP_UPDATE and st.overwrite:
            # "Concurrent writes to keys already in process will fail immediately, as in CAS"
            # (§4.5), and an UPDATE whose CAS failed is done in FUSEE and Aceso, the protocols FlexKV
            # follows (last writer wins). The answer waits for the write under way to commit, so
            # this UPDATE is linearized just before that commit, inside its own interval: answered
            # at once, a get after it could still see the value both writes replace.
            if w[0] is None:
                w[0] = ctx.env.event()
            yield w[0]
            if w[1]:
                st.overwritten += 1
                return WRITE_REPLY.pack(OVERWRITTEN, 0)
        st.busy += 1
        return WRITE_REPLY.pack(BUSY, 0)
    local = st.local[p]
    h = hash64(key)
    pairs = candidates(local, _dir(st).d, p, h, st.scan_out)
    if slot == NO_SLOT or not is_pair(expected):
        # the client says the key is absent: every committed word with its fingerprint must be
        # one it checked (held another key)
        unknown = [w for _s, w in pairs if w not in checked]
        if unknown:
            st.mismatches += 1
            return WRITE_REPLY.pack(MISMATCH, unknown[0])
        if op != OP_INSERT:
            return WRITE_REPLY.pack(ABSENT, 0)
        cur = int(local[slot])
        if cur != expected or not reusable(cur, ctx.env.now, st.lease_ns, st.drift):
            st.mismatches += 1
            return WRITE_REPLY.pack(MISMATCH, cur)
    else:
        cur = int(local[slot])
        if cur != expected:
            if op == OP_UPDATE and _still_the_keys(st, ctx.env.now, seen, cur, h):
                expected = cur            # an UPDATE replaces whatever pair of the key is there
            else:
                st.mismatches += 1
                return WRITE_REPLY.pack(MISMATCH, cur)
        if op == OP_INSERT:
            return WRITE_REPLY.pack(EXISTS, cur)
        if cur == new:
            return WRITE_REPLY.pack(OK, 0)            # this write is what the slot holds already
    st.key_locks.add(key)
    st.slot_locks.add((p, slot))
    w = None
    if is_pair(expected):                                        # replaces the key's pair
        w = st.writing[key] = [None, False]
    try:
        m = st.meta.get(key)
        if m is None:
            m = st.meta[key] = [0, 0, 0, p]
        _bump(m, True)
        sharers, m[0] = m[0], 0
        co = req.co
        d = _dir(st)
        at, data = d.slot_gaddr(p, slot), int(new).to_bytes(8, "little")
        co.write(at, data)
        copies = st.layout.get("index_copies")
        if copies is not None:                                   # the index's backups, in parallel
            for b in copies.backup_gaddrs(at):
                co.write(b, data)
        if is_pair(expected):
            # the replaced pair's valid bit: a client that cached its address sees it is stale
            old = gaddr((expected >> NODE_SHIFT) & 0xFF, (expected & _BLOCK_ADDR) + INVALID_BYTE)
            co.write(old, bytes([INVALID_BIT | (len(key) >> 8)]))
        if sharers:
            # the sharers' invalidations and the memory node's WRITEs go out together ("sends RPCs
            # to those CNs on the sharer list to invalidate. In parallel, the proxy writes the new
            # index slot to the MNs' index", §4.5 Workflows); the commit waits for both
            co.post()
            yield from _invalidate(ctx, st, key, sharers)
        yield co.sync()
        failpoint("flexkv.proxy.memory_written")
        local[slot] = new                                        # LOCAL_CAS: the commit point
        if w is not None:
            w[1] = True
        _shared(ctx, req, st, cpu.local_cas_ns)
        st.commits += 1
    finally:
        st.key_locks.discard(key)
        st.slot_locks.discard((p, slot))
        if w is not None:
            del st.writing[key]
            if w[0] is not None:
                w[0].succeed()                                   # the UPDATEs it overwrote
    return WRITE_REPLY.pack(OK, expected)


def _still_the_keys(st, now: int, seen: int, cur: int, h: int) -> bool:
    """Is ``cur``, the word in a slot where the client saw the key's pair at ``seen``, a pair of
    that key? The slot can go to another key only after the key's DELETE plus a lease (§3.5), so
    a pair with the key's fingerprint within a lease of ``seen`` (less the drift) is the key's.
    The paper's proxy commits an UPDATE over whatever the slot holds (it sends only the slot's
    address); checking the client's word instead turned every race between writers of a hot key
    into a refused RPC, a fresh bucket READ and another RPC."""
    return is_pair(cur) and cur >> FP_SHIFT == h >> FP_SHIFT and now - seen < st.lease_ns * (1 - st.drift)


def _invalidate(ctx, st, key: bytes, sharers: int):
    """Drop ``key`` from every sharer's cache before the commit: one RPC per other node, all sent at
    once through the handler's endpoint and their replies taken as they come (the proxy's paper
    sends them to "those CNs on the sharer list" in one step, over UD, which addresses any node)."""
    names = st.layout["cn_names"]
    calls = []
    for ordinal in range(len(names)):
        if not sharers >> ordinal & 1:
            continue
        st.invalidations_sent += 1
        if ordinal == st.ordinal:
            st.cache.invalidate(key)
        else:
            calls.append((names[ordinal], key))
    if not calls:
        return
    ep = endpoint_of(ctx)
    got = yield from ep.call_all(calls, method=M_INVALIDATE, timeout_ns=st.rpc_timeout_ns, retries=st.rpc_retries,
                                 port=INVALIDATE_PORT)
    # a sharer that does not answer is dead: its cache died with it (§3.6)
    st.dead_sharers += sum(isinstance(r, RpcError) for r in got)


def handle_invalidate(ctx, req):
    st = state_of(ctx.fabric, ctx.layout, ctx.index, ctx.env)
    _cpu(ctx, req, ctx.profile.cpu.local_cas_ns)
    st.cache.invalidate(bytes(req.payload))
    return b""
    yield  # pragma: no cover


HANDLERS = {M_READ: handle_read, M_WRITE: handle_write, M_FLUSH: handle_flush}
#: INVALIDATE has a server of its own on every node (one thread, a port of its own): a write handler
#: waits for its invalidations, so if they queued behind other write handlers, two nodes whose
#: proxy threads all invalidate each other's keys would wait for each other until the RPCs time out.
#: Its handler never waits on anything, so that server always drains.
INVALIDATE_HANDLERS = {M_INVALIDATE: handle_invalidate}
INVALIDATE_PORT = RPC_PORT + 1
