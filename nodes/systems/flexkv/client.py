"""The FlexKV client: one per modelled thread; routes each operation by its partition (§3.2).

A key's partition is its RACE directory index (the low bits of its hash suffix). The node's
partition map says who serves it:

* ``ON_MEMORY``: the **one-sided path** over the memory nodes' RACE table, as the baselines FlexKV
  follows (FUSEE/Aceso) do, with the node's address cache: a hit READs the slot word and the pair
  together (one round trip) and uses the pair only if the slot still names it.
* a compute node: the **proxied path** through that node's proxy (proxy.py):

  =========================  =======================================================  ==========
  operation                  verbs and RPCs                                           round trips
  =========================  =======================================================  ==========
  get, pair cached           local lookup                                             0
  get, address cached        READ pair; valid bit and key checked                      1
  get, otherwise             RPC READ(key) -> candidate slots | READ pair(s)           2
  update/delete, slot cached WRITE new pair | RPC WRITE(slot); the proxy WRITEs the    ~3 (~2
                             memory node's slot (+ the old pair's valid bit) inside    delete)
  update/delete/insert       [WRITE new pair + READ 2 combined buckets] | READ         ~3
                             candidate pairs | RPC WRITE(slot)
  =========================  =======================================================  ==========

Every decision is the proxy's (its LOCAL_CAS is the commit point; absence is decided against its
local index, proxy.py), so the memory node's copy, which runs ahead of the proxy by the writes
between their memory-node WRITE and their commit, is used only to find slots.

A WRITE RPC leaves only once its new pair's WRITE has completed (the paper sends the two
together): a client whose process died after posting both could have its RPC delivered and
committed by a live proxy while the WRITE never landed, leaving the key's slot naming a block that
still held another key's retired pair (docs/flexkv.md, "Where it differs from the paper").

Operations on a paused partition (a reassignment under way, reassignment.py) wait for the resume; a
proxy that no longer owns the partition answers ``NOT_OWNER`` and the operation is routed again
with the node's current map.
"""

from __future__ import annotations

from typing import NamedTuple

from nodes.systems.api import SystemGaveUp
from nodes.systems.lib.hashing import hash64
from nodes.systems.race.bucket import SAME, slot_offset
from nodes.systems.race.client import RETRY_LIMIT, RaceClient
from nodes.systems.race.layout import FP_SHIFT, NODE_SHIFT, slot_block
from shm.fabric import gaddr, gaddr_offset
from shm.rpc import RpcTimeout, rpc

from .cache import ADDR, PAIR
from .layout import ON_MEMORY, INVALID_BIT, INVALID_BYTE, is_pair, pick_tombstone, tombstone
from .node import state_of
from .proxy import (
    ABSENT, BUSY, CAND, EXISTS, F_CACHE_PAIR, FLUSH_READS, M_FLUSH, M_READ, M_WRITE, MISMATCH, NO_SLOT, NOT_OWNER,
    OK, OVERWRITTEN, OP_DELETE, OP_INSERT, OP_UPDATE, READ_REPLY, READ_REQ, WRITE_REPLY, WRITE_REQ, _BLOCK_ADDR,
)

GET = 0
_REROUTE = object()
#: checked words a WRITE RPC carries at most (fingerprint matches of other keys in two combined
#: buckets: a handful at most with 8-bit fingerprints)
MAX_CHECKED = 28
#: timeouts a client waits, after an RPC to a proxy timed out, for the membership to say whether
#: the proxy's node died before it tries that proxy again
SUSPECT_WAITS = 10


class FlexKVStats(NamedTuple):
    gets: int
    inserts: int
    updates: int
    deletes: int
    pair_hits: int            # gets served from a cached KV pair
    addr_hits: int            # gets served by READing a cached address
    addr_stale: int           # cached addresses found stale (invalid pair, other key, slot moved)
    proxied_ops: int          # operations served through a proxy
    one_sided_ops: int        # operations on the memory nodes' one-sided path
    read_rpcs: int
    write_rpcs: int
    flush_rpcs: int
    busy: int                 # write RPCs refused: the key or slot was being written
    mismatches: int           # write RPCs whose slot view was stale (resolved again)
    reroutes: int             # NOT_OWNER answers (a reassignment under way)
    paused_waits: int         # operations that waited for a paused partition
    get_pair_ns: int          # summed latency of gets by how they were served (Table 1)
    get_addr_ns: int
    get_other_ns: int
    get_other: int
    cas_retries: int          # one-sided path: failed slot CASes
    timeouts: int             # RPCs to a proxy that timed out (a dead or overloaded node)
    redone: int               # writes whose RPC timed out and that had taken effect (found in the slot)
    overwritten: int          # updates that lost to a concurrent write of the key: done, overwritten by it
    # node-wide (thread 0's record only; 0 in the others, so sums over a node's records are right)
    node_proxy_reads: int     # read RPCs this node's proxy served
    node_proxy_commits: int   # writes it committed (LOCAL_CAS)
    node_rounds: int          # reassignments it went through
    node_loaded_bytes: int    # subtable bytes it loaded from the memory nodes
    node_index_bytes: int     # its local index now (subtables + metadata)
    node_cache_bytes: int     # its cache now, and the budget the index leaves it
    node_cache_budget: int
    node_offloaded: int       # partitions its proxy owns now
    manager_events: tuple     # the manager's (ns, kind, ratio, value) events (first compute node)


class FlexKVClient(RaceClient):
    def __init__(self, fabric, layout: dict, thread, options: dict):
        race_opts = {k: options[k] for k in ("search_cpu_ns", "write_cpu_ns") if k in options}
        super().__init__(fabric, layout, thread, race_opts)
        self.st = state_of(fabric, layout, thread.owner.node, thread.env)
        self.pmask = (1 << layout["global_depth"]) - 1
        self.names = {n: fabric.nodes[n].name for n in layout["cn_nodes"]}
        opts = layout["options"]
        self._timeout_ns = opts["rpc_timeout_us"] * 1000
        self._retries = opts["rpc_retries"]
        self._lease_ns = opts["lease_us"] * 1000
        self.lww_updates = opts.get("overwrite_on_conflict", True)
        self._drift = opts["drift"]
        self._hit_ns = fabric.profile.cpu.local_read_ns_per_line
        # KV-pair free lists (§3.5): a replaced pair is reused only after the address leases of
        # every node that may have cached it ran out (and, as for RACE, after the epoch moved on)
        self.reclaim.min_age_ns = int(self._lease_ns * (1 + self._drift))
        self.pair_hits = self.addr_hits = self.addr_stale = self.proxied_ops = self.one_sided_ops = 0
        self.read_rpcs = self.write_rpcs = self.flush_rpcs = self.busy = self.mismatches = self.reroutes = 0
        self.paused_waits = 0
        self.timeouts = self.redone = self.lease_waits = self.overwritten = 0
        self._tomb_wait_ns = None
        self.get_pair_ns = self.get_addr_ns = self.get_other_ns = self.get_other = 0

    def statistics(self) -> FlexKVStats:
        return FlexKVStats(self.gets, self.inserts, self.updates, self.deletes, self.pair_hits, self.addr_hits,
                           self.addr_stale, self.proxied_ops, self.one_sided_ops, self.read_rpcs, self.write_rpcs,
                           self.flush_rpcs, self.busy, self.mismatches, self.reroutes, self.paused_waits,
                           self.get_pair_ns, self.get_addr_ns, self.get_other_ns, self.get_other, self.cas_retries,
                           self.timeouts, self.redone, self.overwritten, *self._node_fields())

    def _node_fields(self) -> tuple:
        if self.thread.index != 0:
            return 0, 0, 0, 0, 0, 0, 0, 0, ()
        st = self.st
        return (st.reads_served, st.commits, st.rounds, st.loaded_bytes, st.index_bytes(), st.cache.bytes,
                st.cache.budget, len(st.local), tuple(tuple(e) for e in st.events))

    # -- the KV interface ----------------------------------------------------------------------
    def get(self, co, key):
        return self.reclaim.run(self._op(co, GET, key, None))

    def insert(self, co, key, value):
        return self.reclaim.run(self._op(co, OP_INSERT, key, value))

    def update(self, co, key, value):
        return self.reclaim.run(self._op(co, OP_UPDATE, key, value))

    def delete(self, co, key):
        return self.reclaim.run(self._op(co, OP_DELETE, key, None))

    def _op(self, co, op, key, value):
        if type(key) is not bytes:
            key = bytes(key)
        h = hash64(key)
        p = h & self.pmask
        st = self.st
        st.check_membership()
        unc = []                          # the timed-out attempts of this write: (word, expected)
        if st.paused[p]:
            self.paused_waits += 1
        yield from st.enter(p)
        inside = True
        try:
            st.count(p, op != GET)
            for _ in range(RETRY_LIMIT):
                owner = int(st.active[p])
                if owner == ON_MEMORY:
                    self.one_sided_ops += 1
                    return (yield from self._one_sided(co, op, key, value, h, p, unc))
                r = yield from self._proxied(co, op, key, value, h, p, owner, unc)
                if r is not _REROUTE:
                    self.proxied_ops += 1
                    return r
                self.reroutes += 1
                # out of the partition while waiting: a reassignment's PAUSE waits for operations
                # in flight to drain, and the owner we wait for gets the partition in that round
                st.leave(p)
                inside = False
                yield self.backoff(0)
                yield from st.enter(p)
                inside = True
                # a death noticed nowhere yet on this node: its partitions go to the memory nodes
                # before the owner is read again. Without it, a node killed and restarted between
                # two looks of _suspect (its failed bit set and cleared, its death count up) kept
                # answering NOT_OWNER from its new process, and an operation that had started
                # before the death rerouted to it until it gave up: nothing else on this node
                # looked (its other operations were stuck the same way) and the manager, parked
                # while no operation started, never ran the round that would have fixed the map
                st.check_membership()
            raise SystemGaveUp(f"FlexKV: key {key[:32]!r} found no owner for partition {p} after {RETRY_LIMIT} tries")
        finally:
            if inside:
                st.leave(p)

    # -- pieces ----------------------------------------------------------------------------------
    def _clock(self) -> int:
        """Virtual now including the CPU charged since the last yield (latency by path, Table 1)."""
        env = self.env
        return env.now + env.active_process.debt_ns

    def _slot_index(self, p: int, slot_gaddr: int) -> int:
        return (gaddr_offset(slot_gaddr) - self.directory.bases[p]) >> 3

    def _slot_gaddr(self, p: int, slot: int) -> int:
        d = self.directory
        return gaddr(d.nodes[p], d.bases[p] + 8 * slot)

    def _check(self, key: bytes, hd) -> tuple[int, bool]:
        """(value length or -1/-2, the pair's valid bit was cleared) of a READ pair."""
        invalid = bool(self._buf[hd.offset + INVALID_BYTE] & INVALID_BIT)
        return self.check(key, hd), invalid

    def check(self, key: bytes, hd) -> int:
        """RACE's check of a READ pair, less the invalid bit, which shares the key length's high
        byte: a replaced pair is still a whole pair (its value is the one a reader that found it
        current may return), and the one-sided update marks the pair before its CAS, so a pair
        still in its slot can carry the bit for a round trip (or for good, if that client died in
        between)."""
        self._buf[hd.offset + INVALID_BYTE] &= ~INVALID_BIT & 0xFF
        return super().check(key, hd)

    def _value(self, key: bytes, hd, vlen: int) -> bytes:
        off = hd.offset + 8 + len(key)
        return self._buf[off:off + vlen].tobytes()

    # -- the proxied path ------------------------------------------------------------------------
    def _proxied(self, co, op, key, value, h, p, owner, unc):
        if op == GET:
            return (yield from self._proxied_get(co, key, h, p, owner))
        return (yield from self._proxied_write(co, op, key, value, h, p, owner, unc))

    def _owe_read(self, co, key: bytes, p: int, owner: int):
        """A cache hit owes the proxy a read count: piggybacked on the key's next RPC, or flushed."""
        pend = self.st.pending_reads
        n = pend.get(key, 0) + 1
        if n <= FLUSH_READS:
            pend[key] = n
            return
        del pend[key]
        self.flush_rpcs += 1
        yield from rpc(co, self.names[owner], READ_REQ.pack(p, min(n, 0xFFFF)) + key, method=M_FLUSH,
                       timeout_ns=self._timeout_ns, retries=self._retries)

    def _proxied_get(self, co, key, h, p, owner):
        env = self.env
        t0 = self._clock()
        self.gets += 1
        self.thread.cpu(self._search_ns + self.hash_ns(len(key)))
        cache = self.st.cache
        e = cache.lookup(key, t0)
        if e is not None:
            if e.kind == PAIR:
                self.thread.cpu(self._hit_ns * (1 + len(e.value) // 64))
                self.pair_hits += 1
                yield from self._owe_read(co, key, p, owner)
                self.get_pair_ns += self._clock() - t0
                return e.value
            hd = self.read_block(co, e.word)
            yield co.sync()
            v, invalid = self._check(key, hd)
            if v >= 0 and not invalid:
                self.addr_hits += 1
                value = self._value(key, hd, v)
                cache.renew(key, env.now)
                yield from self._owe_read(co, key, p, owner)
                self.get_addr_ns += self._clock() - t0
                return value
            self.addr_stale += 1
            cache.discard(key)
        for _ in range(RETRY_LIMIT):
            token = cache.token()
            reads = self.st.pending_reads.pop(key, 0)
            self.read_rpcs += 1
            try:
                reply = yield from rpc(co, self.names[owner], READ_REQ.pack(p, min(reads, 0xFFFF)) + key,
                                       method=M_READ, timeout_ns=self._timeout_ns, retries=self._retries)
            except RpcTimeout:
                if (yield from self._suspect(owner)):
                    return _REROUTE
                continue
            status, flags, n = READ_REPLY.unpack_from(reply)
            if status == NOT_OWNER:
                return _REROUTE
            hds = []
            for k in range(n):
                s, w = CAND.unpack_from(reply, READ_REPLY.size + k * CAND.size)
                hds.append((s, w, self.read_block(co, w)))
            if hds:
                yield co.sync()
            torn = False
            for s, w, hd in hds:
                v, _invalid = self._check(key, hd)     # replaced after the proxy's answer: still its value
                if v >= 0:
                    value = self._value(key, hd, v)
                    cache.put(key, PAIR if flags & F_CACHE_PAIR else ADDR, p, s, w, value, env.now, token)
                    self.get_other += 1
                    self.get_other_ns += self._clock() - t0
                    return value
                torn |= v == -2
            if not torn:
                self.get_other += 1
                self.get_other_ns += self._clock() - t0
                return None
            self.torn_reads += 1
        raise SystemGaveUp(f"FlexKV: get of key {key[:32]!r} did not settle after {RETRY_LIMIT} rounds")

    def _resolve(self, co, key, h, p, op):
        """Generator: the key's slot in the memory node's copy (queued verbs go out with the bucket
        READs): ``(slot or NO_SLOT, expected word, checked words)``; for an insert of an absent
        key, the slot is a free one (empty, or a tombstone whose lease ran out)."""
        for _ in range(RETRY_LIMIT):
            self.thread.cpu(self._search_ns)
            pr, r = yield from self.read_buckets(co, h)
            out = self._out
            cands = []
            for k in range(r & 63):
                w = int(out[2 * k + 1])
                if is_pair(w):
                    cands.append((int(out[2 * k]), w, self.read_block(co, w)))
            if cands:
                yield co.sync()
            checked = []
            found = None
            torn = False
            for idx, w, hd in cands:
                v, _invalid = self._check(key, hd)
                if v >= 0:
                    found = (idx, w)
                elif v == -1:
                    checked.append(w)
                else:
                    torn = True
            if torn:
                self.torn_reads += 1
                continue
            off_a, off_b = pr[1], pr[2]
            base = self.directory.bases[p]
            if found is not None:
                return (slot_offset(found[0], off_a, off_b) - base) >> 3, found[1], checked[:MAX_CHECKED]
            if op != OP_INSERT:
                return NO_SLOT, 0, checked[:MAX_CHECKED]
            free = (r >> 6) - 1
            if free >= 0:
                return (slot_offset(free, off_a, off_b) - base) >> 3, 0, checked[:MAX_CHECKED]
            slot = self._expired_tombstone(pr)
            if slot is None:
                yield from self.no_free_slot(co, key)
                continue
            return (slot[0] - base) >> 3, slot[1], checked[:MAX_CHECKED]
        raise SystemGaveUp(f"FlexKV: slot of key {key[:32]!r} did not settle after {RETRY_LIMIT} rounds")

    def _expired_tombstone(self, pr):
        """(node offset, word) of a deleted slot an insert may take now, in the probe's buckets
        (still in the buffer); None, with the wait until the first one may be taken in
        ``self._tomb_wait_ns`` (None: no deleted slot at all)."""
        buf64 = self._buf64
        off_a, off_b, flags = pr[1], pr[2], pr[3]

        def slots():
            for b in range(4 if flags & SAME != SAME else 2):
                w0 = ((pr[5] if b < 2 else pr[6]).offset >> 3) + (b & 1) * 8
                for s in range(7):
                    yield b * 7 + s, int(buf64[w0 + 1 + s])
        idx, w, self._tomb_wait_ns = pick_tombstone(slots(), self.env.now, self._lease_ns, self._drift)
        return None if idx is None else (slot_offset(idx, off_a, off_b), w)

    def no_empty_slot(self, pr):
        got = self._expired_tombstone(pr)
        if got is None:
            return None
        self._free_word = got[1]
        return pr[0] | got[0]

    def no_free_slot(self, co, key: bytes):
        """Both combined buckets are full: if deleted slots are among them, wait until the first
        one's lease runs out (§3.5); else the table is full."""
        if self._tomb_wait_ns is None:
            self._table_full(key)
        self.lease_waits += 1
        yield max(1, self._tomb_wait_ns)

    def count_write(self, op: int, key: bytes) -> None:
        """Count a write and charge its fixed CPU (allocator, block, bookkeeping, hashing)."""
        if op == OP_INSERT:
            self.inserts += 1
        elif op == OP_UPDATE:
            self.updates += 1
        else:
            self.deletes += 1
        self.thread.cpu(self._write_ns + self.hash_ns(len(key)))

    def _overwritten(self, key: bytes, new: int) -> None:
        """An UPDATE that lost to a concurrent write of its key ends as done, overwritten by it (last
        writer wins, ``overwrite_on_conflict``): counted, its unpublished pair freed, the key's
        cached entry dropped (the winner's pair is elsewhere)."""
        self.overwritten += 1
        self.release_block(new)
        self.st.cache.discard(key)

    def _proxied_write(self, co, op, key, value, h, p, owner, unc):
        env = self.env
        self.count_write(op, key)
        new = (yield from self.new_block(co, key, value, h)) if op != OP_DELETE else 0
        cache = self.st.cache
        e = cache.lookup(key, env.now)
        slot = None
        if e is not None:
            slot, expected, checked, seen = e.slot, e.word, (), e.since_ns
        word = new if op != OP_DELETE else tombstone(h >> FP_SHIFT, env.now)
        landed = False                                 # the new pair's WRITE has completed
        for attempt in range(RETRY_LIMIT):
            if slot is None:
                if unc and (yield from self._took_effect(co, key, h, unc)):
                    return True
                seen = env.now
                slot, expected, checked = yield from self._resolve(co, key, h, p, op)
                landed = True                          # its bucket READs waited for the pair's WRITE
            payload = WRITE_REQ.pack(op, p, slot, expected, word, seen, len(checked))
            if checked:
                payload += b"".join(w.to_bytes(8, "little") for w in checked)
            if new and not landed:
                # the RPC leaves only once the new pair is in memory: a client that died between
                # the two would otherwise have a live proxy commit a word whose block still holds
                # whatever it held before (another key's retired pair), and the key would vanish
                yield co.sync()
                landed = True
            self.write_rpcs += 1
            again = False
            while True:
                try:
                    reply = yield from rpc(co, self.names[owner], payload + key, method=M_WRITE,
                                           timeout_ns=self._timeout_ns, retries=self._retries, again=again)
                    break
                except RpcTimeout:
                    # the proxy may have written the memory node's slot (and even committed) before
                    # it went quiet: if it died, our own word there means the write took effect
                    if not again:
                        unc.append((word, expected))
                    if (yield from self._suspect(owner)):
                        return _REROUTE
                    # only slow: go on with the same request (it runs at most once), never a new
                    # one, since an UPDATE that still ran after this one returned could overwrite
                    # a later write of the key
                    again = True
            if again:
                unc.clear()                            # its outcome is this reply
            status, cur = WRITE_REPLY.unpack_from(reply)
            if status == OK:
                if new:
                    cache.put(key, ADDR, p, slot, new, None, env.now)
                else:
                    cache.discard(key)
                if is_pair(cur):
                    self.retire_block(cur)             # the pair the proxy replaced
                return True
            if status == OVERWRITTEN:
                # a write of the key was under way at the proxy and committed after this request
                # arrived: this UPDATE is linearized just before it, overwritten (last writer wins,
                # as a failed slot CAS of an UPDATE in FUSEE and Aceso; proxy.handle_write)
                self._overwritten(key, new)
                return True
            if status in (EXISTS, ABSENT, NOT_OWNER):
                if new:
                    self.release_block(new)
                if status == EXISTS:
                    cache.put(key, ADDR, p, slot, cur, None, env.now)
                elif status == ABSENT:
                    cache.discard(key)
                return _REROUTE if status == NOT_OWNER else False
            cache.discard(key)
            if status == BUSY:
                self.busy += 1
                yield self.backoff(min(attempt, 4))
            else:
                self.mismatches += 1
            if not self._still_mine(op, expected, seen):
                slot = None
            elif status == MISMATCH and is_pair(cur) and cur >> FP_SHIFT == h >> FP_SHIFT:
                expected = cur          # another write of the key committed first: try over it
            elif status == MISMATCH:
                slot = None
        raise SystemGaveUp(f"FlexKV: write of key {key[:32]!r} did not settle after {RETRY_LIMIT} rounds")

    def _still_mine(self, op, expected, seen) -> bool:
        """Does the slot that held this key's pair ``expected`` at ``seen`` still belong to the key?
        Another key can take it only after the key's DELETE plus a lease (§3.5), so yes for a lease
        after ``seen``, less the clock drift: a write refused as BUSY or MISMATCH then retries with
        the word the proxy has (a pair with the key's fingerprint is the key's) instead of READing
        the memory node's buckets again. Under a hot key's write contention those READs went to
        a memory node whose NIC the one-sided partitions' CASes kept busy."""
        return (op != OP_INSERT and is_pair(expected)
                and self.env.now - seen < self._lease_ns * (1 - self._drift))

    # -- failures --------------------------------------------------------------------------------
    # (an insert whose RPC timed out and whose pair another client replaced before the retry looked
    # is not recognised: nothing marks it; docs/flexkv.md)
    def _suspect(self, owner: int):
        """Generator, after an RPC to ``owner`` timed out: wait for the membership to say whether
        it died (True: this node has redirected its partitions; route again) or not (False, after
        SUSPECT_WAITS timeouts: it is only slow; try it again)."""
        st = self.st
        self.timeouts += 1
        for _ in range(SUSPECT_WAITS):
            if st.owner_failed(owner):
                st.check_membership()
                return True
            yield self._timeout_ns
        return False

    def _took_effect(self, co, key, h, attempts):
        """Generator: did a write whose RPCs timed out (``attempts``) take effect? Its own
        word in the key's buckets says so: the new pair's (insert, update) or the tombstone with its
        T_delete (delete). The proxy writes the memory node's slot before its commit, so a proxy
        that died in between left its write there, and it counts (a redo, FlexKV §3.6).

        Or our new pair carries the invalid bit: it was in a slot and was replaced since, by a
        proxy (which sets the bit with its slot WRITE) or by a survivor's one-sided update (which
        sets it before its CAS, :meth:`_one_sided_update`). Without the latter a survivor that
        replaced the dead proxy's uncommitted word left no trace of it, this write was done again
        over the survivor's, and a reader that had seen our value saw it come back.

        The bit on a pair an attempt *expected* to replace is no evidence: the dying proxy's
        WRITE of it can land without its slot WRITE (they go to different memory nodes), and an
        expected word from the address cache may have been replaced before this write began, so
        it cannot be placed before that replacement. Such a write is done again, which is
        linearizable since nothing of it was ever in a slot."""
        pairs = {w for w, _e in attempts if is_pair(w)}
        hds = [co.read(slot_block(w), 8) for w in pairs]
        pr, r = yield from self.read_buckets(co, h)
        out = self._out
        words = {w for w, _e in attempts}
        took = any(int(out[2 * k + 1]) in words for k in range(r & 63))
        took = took or any(self._buf[hd.offset + INVALID_BYTE] & INVALID_BIT for hd in hds)
        if took:
            self.redone += 1
            attempts.clear()
        return took

    # -- the one-sided path ----------------------------------------------------------------------
    def _one_sided(self, co, op, key, value, h, p, unc=None):
        if op != GET and unc and (yield from self._took_effect(co, key, h, unc)):
            return True
        if op == GET:
            return (yield from self._one_sided_get(co, key, h, p))
        if op == OP_INSERT:
            return (yield from self._insert(co, key, value))
        if op == OP_UPDATE:
            return (yield from self._one_sided_update(co, key, value, h, p))
        return (yield from self._delete(co, key))

    def _one_sided_get(self, co, key, h, p):
        env = self.env
        t0 = self._clock()
        self.gets += 1
        self.thread.cpu(self.hash_ns(len(key)))
        cache = self.st.cache
        e = cache.lookup(key, t0)
        if e is not None and e.kind == ADDR:
            # the slot and the pair in one round: the pair is current iff the slot still names it
            hs = co.read(self._slot_gaddr(p, e.slot), 8)
            hd = self.read_block(co, e.word)
            self.thread.cpu(self._search_ns)
            yield co.sync()
            if int(hs.data.view("<u8")[0]) == e.word:
                v, _invalid = self._check(key, hd)
                if v >= 0:
                    self.addr_hits += 1
                    cache.renew(key, env.now)
                    self.get_addr_ns += self._clock() - t0
                    return self._value(key, hd, v)
            self.addr_stale += 1
            cache.discard(key)
        found = yield from self.find(co, key, h)
        self.get_other += 1
        if found is None:
            self.get_other_ns += self._clock() - t0
            return None
        slot_addr, w, hd, v = found
        value = self._value(key, hd, v)
        cache.put(key, ADDR, p, self._slot_index(p, slot_addr), w, None, env.now)
        self.get_other_ns += self._clock() - t0
        return value

    def _one_sided_update(self, co, key, value, h, p):
        self.updates += 1
        self.thread.cpu(self._write_ns + self.hash_ns(len(key)))
        new = yield from self.new_block(co, key, value, h)
        for attempt in range(RETRY_LIMIT):
            found = yield from self.find(co, key, h)
            if found is None:
                self.release_block(new)
                return False
            slot, old = found[0], found[1]
            # mark the pair we replace, queued before the CAS (no extra round trip): a writer
            # whose RPC to a proxy that died timed out looks for the mark on its own pair once its
            # word is gone from the slot (_took_effect). A failed CAS leaves a true mark too: the
            # pair had been replaced by then. When the pair and the slot are on different memory
            # nodes the mark may land just after the CAS; a writer looking in between does its
            # write again (the window a proxy's WRITEs leave as well).
            co.write(gaddr((old >> NODE_SHIFT) & 0xFF, (old & _BLOCK_ADDR) + INVALID_BYTE),
                     bytes([INVALID_BIT | (len(key) >> 8)]))
            swapped, _ = yield from co.backoff_cas(slot, old, new)
            if swapped:
                yield from self.slot_committed(co, slot, new)      # the index's backups (replicas)
                self.retire_block(old)
                self.st.cache.put(key, ADDR, p, self._slot_index(p, slot), new, None, self.env.now)
                return True
            self.cas_retries += 1
            if self.lww_updates:
                # the slot held the key's pair ``old`` when find() READ it and no longer did at the
                # CAS: a write of the key committed in between, within this operation, and this
                # UPDATE is linearized just before it, overwritten. Last writer wins, as FUSEE's and
                # Aceso's clients end an UPDATE whose slot CAS failed (KV_OPS_SUCCESS, no retry:
                # FUSEE src/client.cc, Aceso src/Client.cc _modify_primary_idx), the one-sided path
                # FlexKV follows (§4.5 "identical protocols to [25, 62]"). Retrying instead made a
                # hot key's updates a CAS storm (YCSB A: 8.8 failed CASes per update, p99 2.6 ms).
                self._overwritten(key, new)
                return True
        raise SystemGaveUp(f"FlexKV: update of key {key[:32]!r} gave up after {RETRY_LIMIT} failed CASes")
