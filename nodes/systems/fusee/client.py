"""The FUSEE client: a RACE index replicated on ``r`` memory nodes and changed by clients only,
with the SNAPSHOT replication protocol, replicated KV pairs carrying an embedded operation log, and
an address cache (Shen et al., *FUSEE: A Fully Memory-Disaggregated Key-Value Store*, FAST'23;
public code dmemsys/FUSEE, ``src/client.cc``). See docs/fusee.md.

Index replica 0 is the **primary**: every lookup READs only its buckets, and a write takes effect
(is linearized) at the CAS of its primary slot. Replicas 1..r-1 are **backups**: the slot at the
same place in each. An update or delete of a key whose primary slot holds ``old``:

1. WRITE the new KV block (with its log tail) to ``r`` memory nodes, READ the primary buckets (and,
   on a cache hit, the cached block): FUSEE's ``read_buckets_and_write_kv``;
2. READ the candidate blocks (skipped on a cache hit): ``read_kv``;
3. CAS every backup slot ``old -> new`` (``backup_consensus_0``) and decide from the returned
   values (``check_cas_consensus_0``): all ours WIN_ALL, a majority ours WIN_MAJOR, another value
   with a majority or none of ours FAIL, otherwise READ the primary: changed FINISH, else the
   smallest proposed value wins (ours: WIN_LITTLE; not: FAIL);
4. a winner CASes the backups others took to its value (``backup_consensus_1``), WRITEs the log
   commit (old value, state) into its block's copies (``commit_log``) and CASes the primary
   ``old -> new`` (``cas_primary``), which nobody else does;
5. a loser marks its block done and waits for the primary to leave ``old`` (FUSEE polls it); an
   update is then **overwritten** (last writer wins: linearized just before the winner's CAS, as
   FUSEE returns success), a delete looks again. A winner that stays away too long (a crashed
   client) is **finished by the waiter** from the backups and its log entry (``_help``), as
   FUSEE's recovery redoes a committed log entry.

Inserts: RACE's tentative insert on the primary (publish, settle duplicates of the key, commit) --
FUSEE CASes an insert's empty slot with SNAPSHOT and has no answer for two inserts of one key in
two slots -- committing the word with the *replicating* bit; the inserter then writes the backups
and clears the bit. A writer that finds the bit waits, and finishes the replication itself when the
inserter stays away (``_replicate``).

With ``r = 1`` the primary CAS decides alone (FUSEE: ``num_idx_rep == 1``): a lost update is
overwritten, a lost delete looks again.
"""

from __future__ import annotations

from typing import NamedTuple

from nodes.systems.api import SystemGaveUp
from nodes.systems.lib.hashing import hash64
from nodes.systems.race.bucket import slot_offset
from nodes.systems.race.client import RETRY_LIMIT, RaceClient
from nodes.systems.race.layout import FP_SHIFT, TENTATIVE, UNIT, encode_block, slot_units, slot_word
from shm.failpoints import failpoint

from .cache import cache_of
from .layout import (
    COMMITTED, DONE, LOG_BYTES, OP_DELETE, OP_INSERT, OP_UPDATE, REPLICATING, block_units, check_units,
    commit_bytes, compact, decode_tail, encode_tail, is_tombstone, tail_offset, tombstone, word_node, word_offset,
    word_units,
)

# consensus states of FUSEE's src/client.h (KVConsensusState)
WIN_ALL, WIN_MAJOR, WIN_LITTLE, FAIL, FINISH = range(5)
WON, LOST = True, False
#: back-offs (doubling to 16x a round trip, ~1 ms in all) a writer waits for a round's winner (or an
#: inserter's replication) before it takes the other for crashed and finishes its work itself.
#: FUSEE's losers poll the primary every 10 us with no limit (src/client.cc
#: modify_backup_idx_consensus_1); the limit is dmrack's, as RACE's STALE_TENTATIVE_WAITS.
STALE_WAITS = 32


class FuseeStats(NamedTuple):
    gets: int
    inserts: int
    updates: int
    deletes: int
    cache_hits: int            # lookups served by the cached slot (one round trip)
    cache_misses: int          # cached slot word found replaced (the key was rewritten)
    cache_bypassed: int        # lookups whose key's miss rate was above the threshold
    win_all: int               # SNAPSHOT outcomes of this client's updates and deletes
    win_major: int
    win_little: int
    consensus_fail: int
    consensus_finish: int
    overwritten: int           # updates that lost and ended as overwritten (last writer wins)
    delete_retries: int        # deletes that lost a round and looked again
    primary_polls: int         # READs of a primary slot while waiting for a round's winner
    helped_rounds: int         # rounds of stalled winners this client finished (recovery from the log)
    helped_inserts: int        # replications of stalled inserters this client finished
    replication_waits: int     # writes that met a key still being replicated
    cas_retries: int           # primary CASes that failed (r = 1; inserts)
    blocks_read: int
    fp_false_positives: int
    torn_reads: int
    dir_refreshes: int
    chunks: int                # replicated chunk allocations (one RPC each)
    blocks_written: int
    blocks_freed: int
    blocks_reused: int
    bytes_reclaimed: int
    limbo_blocks: int
    epoch_advances: int
    cache_entries: int         # node-wide (thread 0's record only)
    cache_bytes: int           # the node's cache (NODE_SHARED_FIELDS: largest, not summed)


def _u64(hd) -> int:
    return int(hd.data[:8].view("<u8")[0])


class FuseeClient(RaceClient):
    def __init__(self, fabric, layout: dict, thread, options: dict):
        race_opts = {k: options[k] for k in ("search_cpu_ns", "write_cpu_ns") if k in options}
        super().__init__(fabric, layout, thread, race_opts)
        self.r = layout["replicas"]
        node = thread.owner.node
        # (the RACE client's allocator takes replicated chunks: layout["block_copies"])
        opts = layout["options"]
        lease = opts["cache_lease_us"] * 1000
        self.cache = cache_of(layout, node, thread.env, opts["cache_bytes"], opts["miss_rate_threshold"], lease)
        # a replaced block comes back only after every cached word naming it has expired (cache.py)
        self.reclaim.min_age_ns = lease
        self._prev_log = 0            # this client's last log entry (the tail's prev pointer)
        self._settled: dict = {}      # committed insert word -> its slot (from _settle)
        self.cache_hits = self.cache_misses = self.cache_bypassed = 0
        self.win_all = self.win_major = self.win_little = self.consensus_fail = self.consensus_finish = 0
        self.overwritten = self.delete_retries = self.primary_polls = 0
        self.helped_rounds = self.helped_inserts = self.replication_waits = 0

    def statistics(self) -> FuseeStats:
        a, r = self.alloc, self.reclaim
        first = self.thread.index == 0
        return FuseeStats(self.gets, self.inserts, self.updates, self.deletes, self.cache_hits, self.cache_misses,
                          self.cache_bypassed, self.win_all, self.win_major, self.win_little, self.consensus_fail,
                          self.consensus_finish, self.overwritten, self.delete_retries, self.primary_polls,
                          self.helped_rounds, self.helped_inserts, self.replication_waits, self.cas_retries,
                          self.blocks_read, self.fp_false_positives, self.torn_reads, self.dir_refreshes, a.chunks,
                          a.blocks, a.freed, r.reused, r.bytes_reclaimed, len(r.limbo), r.advances,
                          len(self.cache) if first else 0, self.cache.bytes)

    # -- words, blocks, copies ----------------------------------------------------------------------
    def read_block(self, co, w: int):
        """READ the whole block a (possibly flagged) slot word names, its log tail included."""
        return co.read(self._nb[word_node(w)] | word_offset(w), word_units(w) * UNIT)

    def retire_block(self, w: int) -> None:
        units = word_units(w)
        self.alloc.retire(word_node(w), word_offset(w), units)

    def release_block(self, w: int) -> None:
        self.alloc.release(word_node(w), word_offset(w), word_units(w))

    def _retire_log(self, w: int, units: int) -> None:
        """Retire a delete's log block (its tombstone word counts no units)."""
        self.alloc.retire(word_node(w), word_offset(w), units)

    def _copies(self, w: int) -> list:
        return self.block_copies(word_node(w), word_offset(w))

    def _backups(self, h: int, slot: int) -> list:
        """Global addresses of a primary slot's copies in the backup replicas."""
        return self.slot_copies(slot)

    def slot_committed(self, co, slot: int, word: int):
        """RACE's hook for a replicated index: FUSEE's protocols replicate the slot themselves
        (SNAPSHOT's backup CASes, an insert's _replicate), so nothing here."""
        return
        yield  # pragma: no cover

    def new_block(self, co, key: bytes, value: bytes, h: int, op: int = OP_INSERT):
        """Generator: allocate a replicated block, queue its WRITE to every copy (FUSEE writes the
        whole sub-block to each replica); returns the slot word (an insert's with the replicating
        bit when there are backups). RACE's insert calls it with four arguments: op INSERT."""
        units = check_units(key, value)
        node, off = yield from self.alloc.alloc(co, units)
        body = bytearray(units * UNIT)
        blk = encode_block(key, value)
        body[:len(blk)] = blk
        body[tail_offset(units):] = encode_tail(self._prev_log, op)
        self._prev_log = compact(node, off)
        for a in self.block_copies(node, off):
            co.write(a, bytes(body))
        self.thread.cpu(self._line_ns * units * self.r)          # building the block, one copy per replica
        w = slot_word(h >> FP_SHIFT, units, node, off)
        return w | REPLICATING if op == OP_INSERT and self.r > 1 else w

    def _delete_log(self, co, key: bytes, h: int):
        """Generator: a delete's log block (the key, no value) written to every copy; returns its
        tombstone word and units."""
        units = block_units(len(key), 0)
        node, off = yield from self.alloc.alloc(co, units)
        body = bytearray(units * UNIT)
        blk = encode_block(key, b"")
        body[:len(blk)] = blk
        body[tail_offset(units):] = encode_tail(self._prev_log, OP_DELETE)
        self._prev_log = compact(node, off)
        for a in self.block_copies(node, off):
            co.write(a, bytes(body))
        self.thread.cpu(self._line_ns * units * self.r)
        return tombstone(h >> FP_SHIFT, node, off), units

    # -- lookups -----------------------------------------------------------------------------------
    def _lookup(self, co, key: bytes, h: int):
        """Generator: ``(slot, word, block handle, value length)`` of the key's committed slot, or
        None. Verbs queued before go out with the bucket READs; a cached slot whose word is still
        in the primary bucket READ with it is a hit (FUSEE: the cached pair READ with the buckets),
        else the candidate blocks are READ."""
        cache = self.cache
        e, bypassed = cache.lookup(key)
        self.cache_bypassed += bypassed
        if e is not None:
            # the entry is the node's: another coroutine may change it while this one waits
            cslot, cword = e.slot, e.word
            hc = self.read_block(co, cword)
        refreshes = self.dir_refreshes
        self.thread.cpu(self._search_ns)
        pr, res = yield from self.read_buckets(co, h)
        out = self._out
        n = res & 63
        if e is not None:
            if self.dir_refreshes == refreshes:
                for k in range(n):
                    if int(out[2 * k + 1]) == cword and pr[0] | slot_offset(int(out[2 * k]), pr[1], pr[2]) == cslot:
                        v = self.check(key, hc)
                        if v >= 0:
                            self.cache_hits += 1
                            cache.hit(e)
                            return cslot, cword, hc, v
                        break
            self.cache_misses += 1
        for _ in range(RETRY_LIMIT):
            cands = []
            for k in range(n):
                w = int(out[2 * k + 1])
                if w & TENTATIVE or not slot_units(w):
                    continue          # an undecided insert: not in the table
                cands.append((int(out[2 * k]), w, self.read_block(co, w)))
            if not cands:
                return None
            yield co.sync()
            torn = False
            for idx, w, hd in cands:
                v = self.check(key, hd)
                if v >= 0:
                    slot = pr[0] | slot_offset(idx, pr[1], pr[2])
                    cache.seen(key, slot, w)
                    return slot, w, hd, v
                torn = torn or v == -2
            if not torn:
                return None
            self.torn_reads += 1
            pr, res = yield from self.read_buckets(co, h)
            n = res & 63
        raise SystemGaveUp(f"FUSEE: lookup of key {key[:32]!r} did not settle after {RETRY_LIMIT} rounds")

    # -- the KV interface --------------------------------------------------------------------------
    def lookup(self, co, key: bytes, h: int):
        """A get's lookup (RACE's get calls it): :meth:`_lookup`, through the address cache."""
        return self._lookup(co, key, h)

    def _update(self, co, key: bytes, value: bytes):
        self.updates += 1
        key, h = self.write_key(key)
        new = yield from self.new_block(co, key, value, h, OP_UPDATE)
        for _ in range(RETRY_LIMIT):
            found = yield from self._lookup(co, key, h)
            if found is None:
                self.release_block(new)           # never published
                return False
            slot, old = found[0], found[1]
            if old & REPLICATING:
                yield from self._await_replication(co, h, slot, old)
                continue
            failpoint("fusee.update.found")
            if (yield from self._snapshot(co, h, slot, old, new, OP_UPDATE, len(key))):
                self.cache.seen(key, slot, new)
                return True
            # lost: overwritten by the round's winner, whose CAS came within this update
            self.overwritten += 1
            if self.r > 1:
                self.retire_block(new)            # it may sit in a backup a helper READ
            else:
                self.release_block(new)
            self.cache.remove(key)
            return True
        raise SystemGaveUp(f"FUSEE: update of key {key[:32]!r} did not settle after {RETRY_LIMIT} rounds")

    def _delete(self, co, key: bytes):
        self.deletes += 1
        key, h = self.write_key(key)
        tomb, units = yield from self._delete_log(co, key, h)
        proposed = False
        for attempt in range(RETRY_LIMIT):
            found = yield from self._lookup(co, key, h)
            if found is None:
                if proposed:
                    self._retire_log(tomb, units)
                else:
                    self.alloc.release(word_node(tomb), word_offset(tomb), units)
                self.cache.remove(key)
                return False
            slot, old = found[0], found[1]
            if old & REPLICATING:
                yield from self._await_replication(co, h, slot, old)
                continue
            failpoint("fusee.delete.found")
            proposed = True
            if (yield from self._snapshot(co, h, slot, old, tomb, OP_DELETE, len(key))):
                self._retire_log(tomb, units)
                self.cache.remove(key)
                return True
            self.delete_retries += 1              # another write of the key won: look again
        raise SystemGaveUp(f"FUSEE: delete of key {key[:32]!r} did not settle after {RETRY_LIMIT} rounds")

    def _insert(self, co, key: bytes, value: bytes):
        """RACE's insert on the primary (it calls :meth:`new_block`, whose word carries the
        replicating bit), then the backups, then the bit cleared."""
        if type(key) is not bytes:
            key = bytes(key)
        ok = yield from super()._insert(co, key, value)
        if not ok:
            return ok
        # the word RACE committed and its slot, as _settle recorded them for this coroutine
        w_r, slot = self._settled.pop(id(co))
        if self.r > 1:
            failpoint("fusee.insert.committed")
            yield from self._replicate(co, hash64(key), slot, w_r)
        self.cache.seen(key, slot, w_r & ~REPLICATING)
        return True

    def _settle(self, co, key, h, known, mine_c, mine_t, slot):
        got = yield from super()._settle(co, key, h, known, mine_c, mine_t, slot)
        if got:
            self._settled[id(co)] = (mine_c, slot)
        return got

    # -- SNAPSHOT ----------------------------------------------------------------------------------
    def _decide(self, vals: list, old: int, new: int) -> int:
        """FUSEE's check_cas_consensus_0 on the backup CASes' returned values (without the READ of
        the primary its last case needs: -1 then)."""
        cnt: dict = {}
        for v in vals:
            k = new if v == old or v == new else v
            cnt[k] = cnt.get(k, 0) + 1
        n = len(vals)
        maj = min(cnt, key=lambda k: (-cnt[k], k))      # the most votes; the smallest on a tie
        if cnt[maj] == n:
            return WIN_ALL if maj == new else FAIL
        if 2 * cnt[maj] > n:
            return WIN_MAJOR if maj == new else FAIL
        if new not in cnt:
            return FAIL
        return -1 if min(cnt) == new else -2             # -1: WIN_LITTLE unless FINISH; -2: FAIL or FINISH

    def _snapshot(self, co, h, slot, old, new, op, key_len):
        """Generator: replace ``old`` by ``new`` (a block word, or a delete's tombstone) in the
        key's replicated slot. WON (this write took effect at its primary CAS) or LOST (another
        write of the key took effect within this call)."""
        target = 0 if op == OP_DELETE else new
        if self.r == 1:
            c = co.cas(slot, old, target)
            yield co.sync()
            if c.value == old:
                self.win_all += 1
                self.retire_block(old)
                return WON
            self.cas_retries += 1
            return LOST
        bks = self._backups(h, slot)
        hs = [co.cas(b, old, new) for b in bks]
        yield co.sync()
        vals = [x.value for x in hs]
        failpoint("fusee.snapshot.backups_cased")
        state = self._decide(vals, old, new)
        if state < 0:
            hp = co.read(slot, 8)
            yield co.sync()
            self.primary_polls += 1
            if _u64(hp) != old:
                state = FINISH
            else:
                state = WIN_LITTLE if state == -1 else FAIL
        if state in (FAIL, FINISH):
            if state == FAIL:
                self.consensus_fail += 1
            else:
                self.consensus_finish += 1
            units = word_units(new) or block_units(key_len, 0)
            for a in self._copies(new):           # FUSEE writes KV_OP_FINISH into the loser's log
                co.write(a + tail_offset(units) + 16, commit_bytes(0, op, DONE))
            if state == FAIL:
                yield from self._await_round(co, h, slot, old, bks, key_len)
            else:
                yield co.sync()
            return LOST
        if state == WIN_ALL:
            self.win_all += 1
        elif state == WIN_MAJOR:
            self.win_major += 1
        else:
            self.win_little += 1
        fix = [(b, v) for b, v in zip(bks, vals) if v != old and v != new]
        if fix:
            for b, v in fix:
                co.cas(b, v, new)
            yield co.sync()
        failpoint("fusee.snapshot.backups_settled")
        yield from self._commit_and_swing(co, slot, old, new, op, key_len, bks)
        return WON

    def _commit_and_swing(self, co, slot, old, new, op, key_len, bks) -> bool:
        """Generator: the log commit on every copy of ``new``'s block, then the primary CAS (a
        delete's also clears its tombstones from the backups). True if this CAS swung the primary
        (then the replaced block is retired here); False if a helper had done it."""
        units = word_units(new) or block_units(key_len, 0)
        for a in self._copies(new):
            co.write(a + tail_offset(units) + 16, commit_bytes(old, op))
        yield co.sync()
        failpoint("fusee.snapshot.log_committed")
        c = co.cas(slot, old, 0 if op == OP_DELETE else new)
        if op == OP_DELETE:
            for b in bks:
                co.cas(b, new, 0)
        yield co.sync()
        if c.value == old:
            self.retire_block(old)
            return True
        return False

    def _await_round(self, co, h, slot, old, bks, key_len):
        """Generator: a loser waits for the primary to leave ``old``; after STALE_WAITS back-offs it
        finishes the round's winner itself (:meth:`_help`)."""
        for waits in range(RETRY_LIMIT):
            hp = co.read(slot, 8)
            yield co.sync()
            self.primary_polls += 1
            if _u64(hp) != old:
                return
            if waits >= STALE_WAITS and waits % STALE_WAITS == 0:
                yield from self._help(co, h, slot, old, bks, key_len)
                continue
            yield self.backoff(waits)
        raise SystemGaveUp(f"FUSEE: a slot's round stayed open for {RETRY_LIMIT} polls")

    def _help(self, co, h, slot, old, bks, key_len):
        """Generator: finish the round on ``old`` for its winner (a crashed client): the winner is
        what FUSEE's rule picks from the backups now (a majority, else the smallest); its log entry
        is READ and must be an update or delete in flight or committed; then its backups, its log
        commit and the primary CAS, as the winner would have done them."""
        hs = [co.read(b, 8) for b in bks]
        hp = co.read(slot, 8)
        yield co.sync()
        if _u64(hp) != old:
            return
        vals = [_u64(x) for x in hs]
        if old in vals:
            return                                # a contender's CAS is still to land: wait more
        cnt: dict = {}
        for v in vals:
            cnt[v] = cnt.get(v, 0) + 1
        w = min(cnt, key=lambda k: (-cnt[k], k))
        if 2 * cnt[w] <= len(vals):
            w = min(cnt)
        units = word_units(w) or block_units(key_len, 0)
        ht = co.read(self._nb[word_node(w)] | (word_offset(w) + tail_offset(units)), LOG_BYTES)
        yield co.sync()
        _next, _prev, _old, op, state = decode_tail(ht.data)
        if op not in (OP_UPDATE, OP_DELETE) or (op == OP_DELETE) != is_tombstone(w) or state not in (0, COMMITTED):
            return                                # not a log entry of this round: wait more
        self.helped_rounds += 1
        fix = [(b, v) for b, v in zip(bks, vals) if v != w]
        for b, v in fix:
            co.cas(b, v, w)
        if fix:
            yield co.sync()
        yield from self._commit_and_swing(co, slot, old, w, op, key_len, bks)

    # -- insert replication ------------------------------------------------------------------------
    def _replicate(self, co, h, slot, w_r) -> None:
        """Generator: write the committed insert word into the backups, then clear its replicating
        bit in the primary. Backups may hold 0 or a tombstone left by the slot's last delete; a
        value is forced only after a READ of the primary showed the bit still set, so it is never a
        value of a round that started after the replication ended (docs/fusee.md)."""
        w = w_r & ~REPLICATING
        bks = self._backups(h, slot)
        expected = {b: 0 for b in bks}
        for _ in range(RETRY_LIMIT):
            hs = [(b, co.cas(b, e, w)) for b, e in expected.items()]
            yield co.sync()
            for b, x in hs:
                if x.value == expected[b] or x.value == w:
                    del expected[b]
                else:
                    expected[b] = x.value
            if not expected:
                break
            hp = co.read(slot, 8)
            yield co.sync()
            if _u64(hp) != w_r:
                return                            # someone else finished it
        else:
            raise SystemGaveUp(f"FUSEE: the backups of slot {slot:#x} did not take an insert's word")
        failpoint("fusee.insert.replicated")
        c = co.cas(slot, w_r, w)
        yield co.sync()
        if c.value != w_r:
            self.cas_retries += 1

    def _await_replication(self, co, h, slot, w_r):
        """Generator: a write found its key still being replicated: wait for the inserter, and after
        STALE_WAITS back-offs replicate it itself."""
        self.replication_waits += 1
        for waits in range(RETRY_LIMIT):
            if waits >= STALE_WAITS:
                self.helped_inserts += 1
                yield from self._replicate(co, h, slot, w_r)
                return
            yield self.backoff(waits)
            hp = co.read(slot, 8)
            yield co.sync()
            self.primary_polls += 1
            if _u64(hp) != w_r:
                return
