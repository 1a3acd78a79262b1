"""The Aceso client (Hu, Zuo et al., SOSP'24; dmemsys/Aceso ``src/Client.cc``) over coroutine
verbs: RACE's index with **one CAS on the only index copy** per write, KV records erasure-coded by
the memory nodes, and an address cache that reads buckets only on misses. See docs/aceso.md.

Verbs per operation (no conflict, no fingerprint false positive; ``|`` separates round trips;
``p`` parity lines, so a record goes to its data block and ``p`` delta blocks):

=====================  =====================================================================  ======
op                     rounds                                                                 verbs
=====================  =====================================================================  ======
get, cache hit         READ slot + READ record                                                2
get, slot moved on     READ slot + READ cached record | READ record                           3
get, not cached        READ 2 combined buckets | READ record                                  3
update, cache hit      READ slot + READ record | WRITE record x (1 + p) | CAS slot            4 + p
update, not cached     READ 2 c.b. | READ record | WRITE record x (1 + p) | CAS slot          5 + p
delete, cache hit      READ slot + READ record | WRITE log record x (1 + p) | CAS slot -> 0   4 + p
insert                 WRITE record x (1 + p) + READ 2 c.b. | CAS 0 -> T | READ 2 c.b. |      7 + p
                       CAS T -> C  (RACE's insert)
=====================  =====================================================================  ======

Why the order READ | WRITE | CAS for writes (RACE posts its block WRITE with the bucket READs):
Aceso's record carries the slot it is written for and the next version (``_fill_cas_addr``
fills ``slot_offset`` and the version into the header before ``_write_new_kv``), which the
client knows only after it found the slot. A new block costs 1 + p allocation RPCs; a full block
costs a SEAL RPC and p XOR RPCs (``_xor_mem_block``), by the coroutine that completed it.

**An update whose CAS fails is done**, overwritten by the write that beat it (Aceso's
``_modify_primary_idx``: ``KV_OPS_SUCCESS`` for UPDATE; docs/flexkv.md argues why this is
linearizable): it marks its record's version invalid (one more WRITE x (1 + p)) and returns True.
**A delete whose CAS fails tries again** (the code returns success there too; but a delete that
lost to an update and claimed success would be linearized before it, making that update one of an
absent key).
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from nodes.systems.api import SystemGaveUp
from nodes.systems.race.client import RETRY_LIMIT, RaceClient
from nodes.systems.race.layout import FP_SHIFT, UNIT
from shm.fabric import gaddr_node, gaddr_offset
from shm.failpoints import failpoint

from .cache import cache_of
from .layout import (
    INVALID_VERSION, OP_DELETE, OP_INSERT, OP_UPDATE, check_record, decode_trailer, encode_record,
    is_record_word, parity_positions, record_location, trailer_offset, versioned_word,
)
from .server import CLIENT_ENVS, PARKED, memory_node_stats, wake_checkpoints
from .server import _ALLOC, _ALLOC_DELTA, _ALLOC_DELTA_REQ, _XOR, M_ALLOC, M_ALLOC_DELTA, M_SEAL, M_XOR, RPC_PORT

_INVALID = struct.pack("<Q", INVALID_VERSION)


class AcesoStats(NamedTuple):
    gets: int
    inserts: int
    updates: int
    deletes: int
    cache_hits: int            # the cached record was current: one round trip
    cache_moved: int           # the slot named a newer record of the key: READ it (two round trips)
    cache_misses: int          # a cached entry that no longer led to the key: buckets READ
    cache_absent: int          # keys with no cache entry: buckets READ
    cache_kv_skipped: int      # hits that did not prefetch the record (the entry's miss rate > threshold)
    bucket_searches: int       # searches of the key's two combined buckets
    cas_retries: int           # failed CASes that made a delete (or an insert round) look again
    updates_overwritten: int   # updates whose CAS lost to another write of the key: done, record invalidated
    insert_conflicts: int      # insert rounds that met another insert's tentative copy of the key
    stale_aborts: int          # abandoned tentative copies aborted by an insert
    dir_refreshes: int
    records_read: int          # records READ to confirm a key
    fp_false_positives: int
    torn_reads: int            # records that failed their checksum (0 unless a bug)
    records_written: int       # records written (each to its data block and p delta blocks)
    record_bytes: int          # bytes of those WRITEs, all copies
    records_invalidated: int   # records whose CAS failed, marked with the invalid version
    records_abandoned: int     # records of inserts that withdrew (never reachable)
    subblocks: int             # sub-blocks taken
    blocks: int                # data blocks this client took (1 + p allocation RPCs each)
    seals: int                 # blocks it sealed (SEAL + p XOR RPCs)
    rpcs: int                  # RPCs to memory nodes
    cache_bytes: int           # the node's address cache (the same in each of its clients)
    cache_evictions: int       # the node's evictions (first client only; 0 in the others)
    # The memory nodes' own counters, summed over them (server.MemoryNodeStats), in the record of
    # the rack's first client only (cn0's thread 0; 0 in every other): the rack's totals.
    mn_data_blocks: int        # data blocks the memory nodes handed out
    mn_parity_blocks: int      # parity blocks they opened
    mn_xors: int               # delta blocks XORed into parity by their XOR actors
    mn_xor_bytes: int
    mn_xor_cpu_ns: int         # memory-node CPU of the XORs
    mn_checkpoints: int        # index checkpoints sent
    mn_ckpt_changed_words: int  # changed index words they carried
    mn_ckpt_sent_bytes: int    # delta bytes WRITten to checkpoint replicas
    mn_ckpt_cpu_ns: int        # memory-node CPU of checkpoints (sending and applying)


class _Block:
    """A data block a client is filling: where it is, its delta blocks, sub-blocks used and done."""

    __slots__ = ("pos", "node", "off", "deltas", "cap", "used", "done")

    def __init__(self, pos, node, off, deltas, cap):
        self.pos, self.node, self.off, self.deltas, self.cap = pos, node, off, deltas, cap
        self.used = self.done = 0


class SubblockAllocator:
    """One client's sub-blocks (shared by its thread's coroutines): the current data block, a new
    one by RPC when it is used up (the thread's other coroutines wait for the same refill), and
    the seal of a block once every sub-block of it was written (``Client::_req_finish``)."""

    def __init__(self, client, start: int):
        lay = client.layout
        self.client = client
        self.mns = lay["memory_nodes"]
        self.names = [client.fabric.nodes[m].name for m in self.mns]
        self.n = len(self.mns)
        self.lines = lay["parity"]
        self.sub = lay["subblock_bytes"]
        self.cap = lay["block_bytes"] // self.sub
        self.next = start % self.n
        self.cur: _Block | None = None
        self.refill = None
        self.blocks = self.seals = self.subblocks = self.rpcs = 0

    def _rpc(self, co, pos, payload, method):
        self.rpcs += 1
        return (yield from co.rpc(self.names[pos], payload, method=method, port=RPC_PORT))

    def alloc(self, co, nsub: int):
        """Generator: ``(block, byte offset in it)`` of ``nsub`` fresh sub-blocks."""
        for _ in range(RETRY_LIMIT):
            cur = self.cur
            if cur is not None and cur.used + nsub <= cur.cap:
                off = cur.used * self.sub
                cur.used += nsub
                self.subblocks += nsub
                return cur, off
            if self.refill is not None:
                yield self.refill
                continue
            self.refill = co.env.event()
            try:
                if cur is not None and cur.used < cur.cap:     # the tail is too small: left unused
                    left = cur.cap - cur.used
                    cur.used = cur.cap
                    yield from self.finished(co, cur, left)
                self.cur = yield from self._new_block(co)
            finally:
                ev, self.refill = self.refill, None
                ev.succeed()
        raise SystemGaveUp("Aceso: no sub-block after many refills")

    def _new_block(self, co):
        d = self.next
        self.next = (d + 1) % self.n
        off, slab, row = _ALLOC.unpack((yield from self._rpc(co, d, b"", M_ALLOC)))
        deltas = []
        for line, q in enumerate(parity_positions(d, slab, self.n, self.lines)):
            delta, parity = _ALLOC_DELTA.unpack((yield from self._rpc(co, q, _ALLOC_DELTA_REQ.pack(line, slab, row, d),
                                                                      M_ALLOC_DELTA)))
            deltas.append((self.mns[q], q, delta, parity))
        self.blocks += 1
        return _Block(d, self.mns[d], off, tuple(deltas), self.cap)

    def finished(self, co, blk: _Block, nsub: int):
        """Generator: ``nsub`` sub-blocks of ``blk`` are written (or given up); the last ones seal it."""
        blk.done += nsub
        if blk.done == blk.cap and self.lines:
            self.seals += 1
            yield from self._rpc(co, blk.pos, struct.pack("<Q", blk.off), M_SEAL)
            for _node, q, delta, parity in blk.deltas:
                yield from self._rpc(co, q, _XOR.pack(delta, parity), M_XOR)


class AcesoClient(RaceClient):
    """Aceso for one modelled thread: RACE's lookup and insert, Aceso's writes, records and cache."""

    def __init__(self, fabric, layout: dict, thread, options: dict):
        super().__init__(fabric, layout, thread, options)
        self.sub = layout["subblock_bytes"]
        node = thread.owner.node
        self.blocks = SubblockAllocator(self, node * 7 + thread.index)
        budget = options.get("cache_bytes", 0)
        self.cache = cache_of(layout, node, self.env, budget, options.get("miss_rate_threshold", 0.1)) if budget else None
        self._first = thread.index == 0
        CLIENT_ENVS.add(id(self.env))
        self._parked_key = (layout["nonce"], id(self.env))
        self._reporter = self._first and fabric.nodes[node].name == "cn0"
        # one dependent DRAM miss into the node's hash map per cache lookup (ASSUMPTION: the entry's
        # bucket is not in cache; tbb's concurrent_unordered_map is a split-ordered list)
        self._lookup_ns = fabric.profile.software.dram_ns
        self._pending: dict = {}          # id(co) -> [(block, sub-blocks)] of the running insert
        self._slot_of: dict = {}          # id(co) -> (slot, word) the running insert committed
        self._overwrite = options.get("overwrite_on_conflict", True)
        self.cache_hits = self.cache_moved = self.cache_misses = self.cache_absent = self.cache_kv_skipped = 0
        self.bucket_searches = self.updates_overwritten = 0
        self.records_written = self.record_bytes = self.records_invalidated = self.records_abandoned = 0
        self._mn_last = (0,) * 9

    def statistics(self) -> AcesoStats:
        b, c = self.blocks, self.cache
        mn = self._mn_totals() if self._reporter else (0,) * 9
        return AcesoStats(self.gets, self.inserts, self.updates, self.deletes, self.cache_hits, self.cache_moved,
                          self.cache_misses, self.cache_absent, self.cache_kv_skipped, self.bucket_searches,
                          self.cas_retries, self.updates_overwritten, self.insert_conflicts, self.stale_aborts,
                          self.dir_refreshes, self.blocks_read, self.fp_false_positives, self.torn_reads,
                          self.records_written, self.record_bytes, self.records_invalidated, self.records_abandoned,
                          b.subblocks, b.blocks, b.seals, b.rpcs, c.bytes if c is not None else 0,
                          c.evictions if c is not None and self._first else 0, *mn)

    def _mn_totals(self) -> tuple:
        """The memory nodes' counters, read straight from their stats words (what a monitoring
        tool reads; not a modelled verb: statistics() is no operation)."""
        if not self.fabric.memory:
            return self._mn_last            # the rack has closed: the totals its last read saw
        tot = [0] * 9
        fields = ("data_blocks", "parity_blocks", "xors", "xor_bytes", "xor_cpu_ns", "checkpoints",
                  "ckpt_changed_words", "ckpt_sent_bytes", "ckpt_cpu_ns")
        for p in range(len(self.layout["memory_nodes"])):
            st = memory_node_stats(self.fabric, self.layout, p)
            for i, f in enumerate(fields):
                tot[i] += getattr(st, f)
        self._mn_last = tuple(tot)
        return self._mn_last

    # -- records ---------------------------------------------------------------------------------
    def read_block(self, co, w: int):
        """Queue the READ of the record slot word ``w`` names (whole sub-blocks, as the code)."""
        node, off, units = record_location(w)
        return co.read(self._nb[node] | off, units * UNIT)

    def retire_block(self, w: int) -> None:
        self.records_abandoned += 1           # a withdrawn insert's record: never reachable again

    def release_block(self, w: int) -> None:
        self.records_abandoned += 1

    def write_record(self, co, key: bytes, value: bytes, h: int, version: int, op: int, slot: int, whole: bool = True):
        """Generator: take sub-blocks, queue the record's WRITEs (data block and every delta block);
        returns ``(slot word, block, offset in block, sub-blocks)``."""
        nsub = check_record(key, value, self.sub)
        blk, boff = yield from self.blocks.alloc(co, nsub)
        rec = encode_record(key, value, version, op, gaddr_node(slot) if slot else 0, gaddr_offset(slot) if slot else 0)
        data = rec + bytes(nsub * self.sub - len(rec)) if whole else rec
        nb = self._nb
        co.write(nb[blk.node] | (blk.off + boff), data)
        for node, _q, delta, _p in blk.deltas:
            co.write(nb[node] | (delta + boff), data)
        units = nsub * self.sub // UNIT
        self.thread.cpu(self._line_ns * units)        # building the record in the send buffer
        self.records_written += 1
        self.record_bytes += len(data) * (1 + len(blk.deltas))
        return versioned_word(h >> FP_SHIFT, units, blk.node, blk.off + boff, version), blk, boff, nsub

    def invalidate_record(self, co, blk, boff: int, key: bytes, value: bytes) -> None:
        """Queue the WRITEs of the invalid version into a record whose CAS failed (all copies)."""
        t = boff + trailer_offset(len(key), len(value))
        nb = self._nb
        co.write(nb[blk.node] | (blk.off + t), _INVALID)
        for node, _q, delta, _p in blk.deltas:
            co.write(nb[node] | (delta + t), _INVALID)
        self.records_invalidated += 1

    def record_version(self, hd, key_len: int, value_len: int) -> int:
        version = decode_trailer(self._buf, hd.offset + trailer_offset(key_len, value_len))[0]
        return 0 if version == INVALID_VERSION else version

    def new_block(self, co, key: bytes, value: bytes, h: int):
        """RACE's insert asks for its block here: an insert record (version 0; its slot is not known
        yet), finished once the insert has settled."""
        word, blk, _boff, nsub = yield from self.write_record(co, key, value, h, 0, OP_INSERT, 0)
        self._pending.setdefault(id(co), []).append((blk, nsub))
        return word

    # -- finding a key: the cache, then the buckets ----------------------------------------------
    def cached(self, co, key: bytes, h: int):
        """Generator: ``(slot address, slot word, record handle, value length)`` from the address
        cache, or None (no entry, or it no longer leads to the key)."""
        c = self.cache
        self.thread.cpu(self._lookup_ns)
        e = c.lookup(key)
        if e is None:
            self.cache_absent += 1
            return None
        self.thread.cpu(self._search_ns)
        slot, word = e.slot, e.word
        hs = co.read(slot, 8)
        hk = None
        if c.read_kv(e):
            hk = self.read_block(co, word)
        else:
            self.cache_kv_skipped += 1
        yield co.sync()
        cur = int.from_bytes(hs.data[:8].tobytes(), "little")
        if hk is not None:
            if cur == word or self.fault == "cache-skips-slot-check":
                v = self.check(key, hk)
                if v >= 0:
                    e.acc += 1
                    self.cache_hits += 1
                    return slot, word, hk, v
                if v == -2:
                    self.torn_reads += 1
            e.miss += 1
        if is_record_word(cur, h >> FP_SHIFT):
            hd = self.read_block(co, cur)
            yield co.sync()
            v = self.check(key, hd)
            if v >= 0:
                c.update(key, slot, cur)
                self.cache_moved += 1
                return slot, cur, hd, v
        c.drop(key)
        self.cache_misses += 1
        return None

    def locate(self, co, key: bytes, h: int):
        """Generator: the key's committed slot ``(address, word, record handle, value length)`` or
        None: the cache first, the buckets on a miss (and the cache learns the slot)."""
        if self.cache is not None:
            found = yield from self.cached(co, key, h)
            if found is not None:
                return found
        self.bucket_searches += 1
        found = yield from self.find(co, key, h)
        if found is not None and self.cache is not None:
            self.cache.update(key, found[0], found[1])
        return found

    # -- the KV interface ------------------------------------------------------------------------
    # Records are never reused while the run lasts (Aceso frees sub-blocks by a GC, not modelled),
    # so no operation needs an epoch: a slot word names the same record for ever.
    def get(self, co, key: bytes):
        return self._get(co, key)

    def update(self, co, key: bytes, value: bytes):
        return self._update(co, key, value)

    def delete(self, co, key: bytes):
        return self._delete(co, key)

    def insert(self, co, key: bytes, value: bytes):
        return self._insert_and_finish(co, key, value)

    def lookup(self, co, key: bytes, h: int):
        """A get's lookup (RACE's get calls it): :meth:`locate`, through the address cache."""
        return self.locate(co, key, h)

    def _write_and_swap(self, co, key: bytes, value: bytes, h: int, found, op: int, point: str):
        """Generator: one attempt of an update (``op`` OP_UPDATE) or a delete (OP_DELETE, its log
        record: key, no value): the record WRITTEN and completed, then one CAS of the slot from
        the word ``found`` READ to the record (a delete: to empty). Committed: ``(True, block,
        sub-blocks, the new word)``, the block still to be finished by the caller; lost: the record
        marked invalid, its block finished, the key's cache entry dropped, ``(False, ...)``."""
        slot, old, hd, v = found
        version = self.record_version(hd, len(key), v) + 1
        new, blk, boff, nsub = yield from self.write_record(co, key, value, h, version, op, slot,
                                                            whole=op != OP_DELETE)
        yield co.sync()                           # the record is in memory before the CAS publishes it
        failpoint(point)
        c = co.cas(slot, old, 0 if op == OP_DELETE else new)
        yield co.sync()
        if c.value == old:
            if self._parked_key in PARKED:
                wake_checkpoints(self.layout, self.env)
            return True, blk, nsub, new
        self.invalidate_record(co, blk, boff, key, value)
        yield co.sync()
        yield from self.blocks.finished(co, blk, nsub)
        if self.cache is not None:
            self.cache.drop(key)                  # look again from the buckets
        return False, blk, nsub, new

    def _update(self, co, key: bytes, value: bytes):
        self.updates += 1
        key, h = self.write_key(key)
        for _ in range(RETRY_LIMIT):
            found = yield from self.locate(co, key, h)
            if found is None:
                return False
            done, blk, nsub, new = yield from self._write_and_swap(co, key, value, h, found, OP_UPDATE,
                                                                   "aceso.update.written")
            if done:
                failpoint("aceso.update.committed")
                if self.cache is not None:
                    self.cache.update(key, found[0], new)
                yield from self.blocks.finished(co, blk, nsub)
                return True
            if not self._overwrite:
                self.cas_retries += 1             # option overwrite_on_conflict = false: RACE's loop
                continue
            # Last writer wins (Aceso): the slot held the key's record at our READ and another word
            # at our CAS, so a write of the key committed in between; ours is linearized just
            # before it, and never seen.
            self.updates_overwritten += 1
            return True
        raise SystemGaveUp(f"Aceso: update of key {key[:32]!r} gave up after {RETRY_LIMIT} rounds")

    def _delete(self, co, key: bytes):
        self.deletes += 1
        key, h = self.write_key(key)
        for _ in range(RETRY_LIMIT):
            found = yield from self.locate(co, key, h)
            if found is None:
                return False
            done, blk, nsub, _new = yield from self._write_and_swap(co, key, b"", h, found, OP_DELETE,
                                                                    "aceso.delete.logged")
            if done:
                if self.cache is not None:
                    self.cache.drop(key)
                yield from self.blocks.finished(co, blk, nsub)
                return True
            self.cas_retries += 1
        raise SystemGaveUp(f"Aceso: delete of key {key[:32]!r} gave up after {RETRY_LIMIT} rounds")

    def _insert_and_finish(self, co, key: bytes, value: bytes):
        if type(key) is not bytes:
            key = bytes(key)
        ok = yield from self._insert(co, key, value)
        for blk, nsub in self._pending.pop(id(co), ()):
            yield from self.blocks.finished(co, blk, nsub)
        slot = self._slot_of.pop(id(co), None)
        if self._parked_key in PARKED:
            wake_checkpoints(self.layout, self.env)    # an insert (or its withdrawal) changed the index
        if ok and slot is not None and self.cache is not None:
            self.cache.update(key, *slot)
        return ok

    def _settle(self, co, key, h, known, mine_c, mine_t, slot):
        outcome = yield from super()._settle(co, key, h, known, mine_c, mine_t, slot)
        if outcome:
            self._slot_of[id(co)] = (slot, mine_c)
        return outcome
