"""The RACE client: get / insert / update / delete over coroutine verbs (see docs/race.md).

One :class:`RaceClient` per modelled thread, shared by the thread's coroutines. Every operation is
a generator run inside a coroutine; it queues verbs on the coroutine (``co.read``, ``co.cas``
...) and waits with ``yield co.sync()``. Verbs per operation (no conflicts, no fingerprint false
positives; a "round" is one ``sync``, i.e. one round trip):

=========  ================================================================  ======
op         rounds                                                            verbs
=========  ================================================================  ======
get        READ 2 combined buckets | READ the KV block                       3
get (miss) READ 2 combined buckets                                           2
update     WRITE block + READ 2 c.b. | READ KV block | CAS slot              5
delete     READ 2 c.b. | READ KV block | CAS slot -> 0                       4
insert     WRITE block + READ 2 c.b. | CAS 0 -> tentative | READ 2 c.b. |    7
           CAS tentative -> committed
=========  ================================================================  ======

A matching fingerprint adds one READ per candidate block (in one round); a failed CAS repeats the
op from its bucket READs (``cas_retries``). The building blocks (``queue_buckets``, ``find``,
``scan_key``) are methods so that SMART-HT, FUSEE, Aceso and FlexKV clients can reuse or override
them; ``cas_failed`` is the hook where SMART puts its back-off.
"""

from __future__ import annotations

import random
from typing import NamedTuple

import numpy as np

from nodes.systems.api import KVClient, SystemGaveUp
from nodes.systems.lib.alloc import ChunkAllocator
from nodes.systems.lib.replicas import Replicas
from nodes.systems.lib.hashing import hash64
from nodes.systems.lib.reclaim import Reclaimer
from shm.coro import resume_switch_ns
from shm.fabric import gaddr
from shm.failpoints import failpoint
from shm.profile import load_profile

from .bucket import MAX_MATCHES, SAME, probe, scan, slot_offset
from .directory import DirectoryCache
from .layout import (
    COMBINED_BYTES, FP_SHIFT, MAX_NODE, MAX_OFFSET, TENTATIVE, UNIT, check_block, check_item, encode_block,
    slot_committed, slot_location, slot_units, slot_word,
)

#: Modelled CPU ns beyond what the model prices piece by piece (verbs posts and polls, hashing,
#: bucket scans, block building): in SMART's artifact client, workload generation, coroutine
#: switches, the allocator and request bookkeeping. SEARCH is paid by every search of the table (a
#: get, each attempt of an update or delete, each round of an insert), WRITE once by every update,
#: insert or delete. Calibrated so that one thread with 8 coroutines on cx6-200g runs the artifact's
#: one-thread rates (ae/raw-reference: fig8-ycsb-c.csv 0.57 Mops read-only, fig5a.csv 0.24 Mops
#: update-only; docs/race.md). Calibrated as 900 and 1900 ns while coroutine switches were part of
#: them; since issue 40 a thread running several coroutines pays two switches per completion
#: (shm.coro.resume_switch_ns, profile software.coro_switch_cycles: 46 ns on cx6-200g), so what
#: they now price is taken out, at the calibration profile's switch price (the rest is the
#: artifact's own software, a fixed ns; the switches follow the profile a run uses): a search waits
#: for two completions (buckets, then the block), an update's write part for one (its CAS).
#: Measured at the calibration points: 0.570 and 0.238 Mops again (0.538 and 0.232 with the
#: switches counted twice).
CALIBRATION_PROFILE = "cx6-200g"
_CALIBRATION_RESUME_NS = resume_switch_ns(load_profile(CALIBRATION_PROFILE))
SEARCH_CPU_NS = 900 - 2 * _CALIBRATION_RESUME_NS
WRITE_CPU_NS = 1900 - _CALIBRATION_RESUME_NS


def hash_ns(profile, key_len: int) -> int:
    """Modelled CPU of hashing a ``key_len``-byte key on the host (profile ``[software]``)."""
    sw = profile.software
    return int((sw.hash_cycles + sw.hash_cycles_per_byte * key_len) / profile.cpu.ghz)


#: An operation that keeps failing (a livelock, or a bug) gives up with SystemGaveUp after this many
#: rounds of its retry loop.
RETRY_LIMIT = 100_000
STALE_TENTATIVE_WAITS = 32      # back-offs (about 1 ms) before a tentative copy counts as abandoned


class RaceStats(NamedTuple):
    gets: int
    inserts: int
    updates: int
    deletes: int
    cas_retries: int           # slot CASes that failed and made the op re-read and retry
    updates_retried: int       # updates that needed at least one retry (SMART §3.3: 67.9 %)
    insert_conflicts: int      # insert rounds that met another insert's tentative copy of the key
    stale_aborts: int          # abandoned tentative copies (of crashed clients) aborted by an insert
    dir_refreshes: int         # directory re-reads after a bucket header showed the cache stale
    blocks_read: int           # KV blocks read to confirm a fingerprint match
    fp_false_positives: int    # ... that held another key
    torn_reads: int           # KV blocks that failed their checksum (re-read; 0 unless a bug)
    chunks: int                # chunk-allocation RPCs
    blocks_written: int        # KV blocks allocated
    blocks_freed: int          # ... replaced, deleted or never published
    blocks_reused: int         # allocations served by a block that came back (nodes/systems/lib/reclaim.py)
    bytes_reclaimed: int       # bytes of retired blocks that became reusable
    limbo_blocks: int          # retired blocks still waiting for the epoch to move on
    epoch_advances: int        # rack epoch advances this client made


class RaceClient(KVClient):
    """RACE for one modelled thread (``shm.coro.RdmaThread``)."""

    def __init__(self, fabric, layout: dict, thread, options: dict):
        self.fabric = fabric
        self.layout = layout
        self.thread = thread
        self.env = thread.env
        self.capacity = layout["capacity"]
        self.load_factor = layout["load_factor"]
        options = options or {}
        self.fault = options.get("fault", "none")
        self._search_ns = options.get("search_cpu_ns", SEARCH_CPU_NS)
        self._write_ns = options.get("write_cpu_ns", WRITE_CPU_NS)
        self.directory = DirectoryCache(layout["directory"], layout["global_depth"], layout["groups_per_subtable"],
                                        layout["directory_entries"])
        mns = layout["memory_nodes"]
        node = thread.owner.node
        self.reclaim = Reclaimer(fabric, layout["epochs"], thread, unsafe=self.fault == "reuse-without-epochs")
        # replication (a layout that asks for it: FlexKV's ``replicas``): every KV block and every
        # committed slot word also WRITTEN to the backups (nodes/systems/lib/replicas.py)
        rmap = layout.get("block_copies")
        self.replicas = Replicas(fabric, rmap) if rmap is not None else None
        self.index_copies = layout.get("index_copies")
        self.alloc = ChunkAllocator(fabric, mns, layout["chunk_bytes"], start=node * 7 + thread.index,
                                    reclaim=self.reclaim, owner="RACE", max_offset=MAX_OFFSET,
                                    offset_limit="the slot's 40-bit offset field (1 TiB per memory node)",
                                    replicas=self.replicas)
        # global-address prefix of every node (host region): gaddr(node, off) == _nb[node] | off
        self._nb = [gaddr(n, 0) for n in range(min(len(fabric.nodes), MAX_NODE + 1))]
        buf = thread.buf
        self._buf = buf
        self._buf64 = buf[: buf.shape[0] // 8 * 8].view(np.uint64)
        self._out = np.zeros(2 * MAX_MATCHES, np.uint64)
        cpu = fabric.profile.cpu
        self._line_ns = cpu.local_read_ns_per_line
        self._scan_ns = 4 * cpu.local_read_ns_per_line     # the 4 bucket lines of two combined buckets
        one_way = fabric.profile.link.one_way_ns
        self._backoff_ns = 2 * one_way + 4 * fabric.profile.pcie.latency_ns   # about one round trip
        self._rng = random.Random((node << 20) ^ thread.index ^ 0x5ACE)
        self.gets = self.inserts = self.updates = self.deletes = 0
        self.cas_retries = self.insert_conflicts = self.dir_refreshes = self.stale_aborts = 0
        self.updates_retried = 0
        self.blocks_read = self.fp_false_positives = self.torn_reads = 0
        self._free_word = 0           # the word an insert CASes its free slot from (0: empty)

    # -- statistics ------------------------------------------------------------------------
    def statistics(self) -> RaceStats:
        a, r = self.alloc, self.reclaim
        return RaceStats(self.gets, self.inserts, self.updates, self.deletes, self.cas_retries, self.updates_retried,
                         self.insert_conflicts, self.stale_aborts, self.dir_refreshes, self.blocks_read, self.fp_false_positives,
                         self.torn_reads, a.chunks, a.blocks, a.freed, r.reused, r.bytes_reclaimed, len(r.limbo),
                         r.advances)

    # -- pieces ------------------------------------------------------------------------------
    def hash_ns(self, key_len: int) -> int:
        """Hashing a key: the profile's software.hash_cycles plus hash_cycles_per_byte per byte."""
        return hash_ns(self.fabric.profile, key_len)

    def queue_buckets(self, co, h: int):
        """Queue the READs of a hash's two combined buckets (one READ if they coincide); returns the
        probe ``(node prefix, offset a, offset b, flags, expected header, handle a, handle b)``."""
        d = self.directory
        i = h & d.mask
        nb = self._nb[d.nodes[i]]
        off_a, off_b, flags = probe(h, d.bases[i], d.n_main)
        ha = co.read(nb | off_a, COMBINED_BYTES)
        hb = ha if flags & SAME == SAME else co.read(nb | off_b, COMBINED_BYTES)
        return nb, off_a, off_b, flags, d.expected[i], ha, hb

    def scan_probe(self, h: int, pr) -> int:
        """Run :func:`bucket.scan` on a probe whose READs completed (charges the scan's CPU: two or
        four bucket lines)."""
        self.thread.cpu(self._scan_ns if pr[3] & SAME != SAME else self._scan_ns >> 1)
        return scan(self._buf64, pr[5].offset >> 3, pr[6].offset >> 3, pr[3], h >> FP_SHIFT, pr[4], self._out)

    def refresh_directory(self, co):
        """Generator: re-read the directory after a stale-header detection."""
        self.dir_refreshes += 1
        yield from self.directory.refresh(co)

    def read_block(self, co, w: int):
        """Queue the READ of the KV block slot word ``w`` points to."""
        node, off, units = slot_location(w)
        return co.read(self._nb[node] | off, units * UNIT)

    def check(self, key: bytes, hd) -> int:
        """Match a READ block against ``key`` (see ``layout.check_block``), counting and charging."""
        self.blocks_read += 1
        self.thread.cpu(self._line_ns * (hd.length // UNIT))
        v = check_block(self._buf, hd.offset, hd.length, key)
        if v == -1:
            self.fp_false_positives += 1
        return v

    def read_buckets(self, co, h: int):
        """Generator: READ the key's two combined buckets (with any verbs queued before) and scan
        them; returns ``(probe, scan result)``, re-reading the directory while a bucket header
        says the cached one is stale."""
        for _ in range(RETRY_LIMIT):
            pr = self.queue_buckets(co, h)
            yield co.sync()
            r = self.scan_probe(h, pr)
            if r >= 0:
                return pr, r
            yield from self.refresh_directory(co)
        raise SystemGaveUp(f"RACE: the directory stayed stale for {RETRY_LIMIT} bucket reads")

    def find(self, co, key: bytes, h: int):
        """Generator: the committed slot holding ``key``: ``(slot address, slot word, block handle,
        value length)``, or None. Verbs queued before the call (an update's block WRITE) go out
        with the bucket READs. The handle's data is valid until the caller's next yield."""
        out = self._out
        self.thread.cpu(self._search_ns)
        for _ in range(RETRY_LIMIT):
            pr, r = yield from self.read_buckets(co, h)
            n = r & 63
            cands = None
            for k in range(n):
                w = int(out[2 * k + 1])
                if w & TENTATIVE or not slot_units(w):
                    continue          # an undecided insert, or a deleted slot (FlexKV): not in the table
                if cands is None:
                    cands = []
                cands.append((int(out[2 * k]), w, self.read_block(co, w)))
            if cands is None:
                return None
            yield co.sync()
            torn = False
            for idx, w, hd in cands:
                v = self.check(key, hd)
                if v >= 0:
                    return pr[0] | slot_offset(idx, pr[1], pr[2]), w, hd, v
                if v == -2:
                    torn = True
            if not torn:
                return None
            self.torn_reads += 1
        raise SystemGaveUp(f"RACE: lookup of key {key[:32]!r} did not settle after {RETRY_LIMIT} rounds")

    def scan_key(self, co, key: bytes, h: int, known: dict, mine_c: int):
        """Generator for inserts: every slot holding ``key``, tentative or committed, except the one
        with the block ``mine_c``. Returns ``(others, mine, free)``: ``others`` a list of (slot
        address, word); ``mine`` (address, word) of the slot holding our block or None; ``free`` the
        address of the slot an insert should take, or None if both combined buckets are full.
        ``known`` maps a committed slot word to whether its block holds ``key`` (blocks never change,
        so a word's answer is final)."""
        out = self._out
        self.thread.cpu(self._search_ns)
        for _ in range(RETRY_LIMIT):
            pr, r = yield from self.read_buckets(co, h)
            n = r & 63
            nb, off_a, off_b = pr[0], pr[1], pr[2]
            others = []
            mine = None
            pending = None
            for k in range(n):
                w = int(out[2 * k + 1])
                if not slot_units(w):
                    continue                      # a deleted slot (FlexKV's tombstone): holds no key
                wc = slot_committed(w)
                idx = int(out[2 * k])
                if wc == mine_c:
                    mine = (nb | slot_offset(idx, off_a, off_b), w)
                    continue
                is_key = known.get(wc)
                if is_key is None:
                    if pending is None:
                        pending = []
                    pending.append((idx, w, self.read_block(co, w)))
                elif is_key:
                    others.append((nb | slot_offset(idx, off_a, off_b), w))
            torn = False
            if pending is not None:
                yield co.sync()
                for idx, w, hd in pending:
                    v = self.check(key, hd)
                    if v == -2:
                        torn = True
                        continue
                    known[slot_committed(w)] = v >= 0
                    if v >= 0:
                        others.append((nb | slot_offset(idx, off_a, off_b), w))
            if torn:
                self.torn_reads += 1
                continue
            free = (r >> 6) - 1
            self._free_word = 0
            if free >= 0:
                return others, mine, nb | slot_offset(free, off_a, off_b)
            return others, mine, self.no_empty_slot(pr)
        raise SystemGaveUp(f"RACE: bucket scan of key {key[:32]!r} did not settle after {RETRY_LIMIT} rounds")

    def no_empty_slot(self, pr):
        """Hook for inserts when both combined buckets of a probe (still in the buffer) have no empty
        slot: the address of another slot an insert may take, with its current word in
        ``self._free_word`` (FlexKV: a deleted slot whose lease ran out), or None (RACE)."""
        return None

    def no_free_slot(self, co, key: bytes):
        """Generator hook: an insert found no slot to take. RACE: the table is full (a
        SystemGaveUp). FlexKV waits for a deleted slot's lease to run out."""
        self._table_full(key)
        yield  # pragma: no cover

    def cas_failed(self, co, attempt: int):
        """Generator hook run after a failed slot CAS of update/delete (RACE: nothing; SMART backs off)."""
        return
        yield  # pragma: no cover

    def backoff(self, attempt: int) -> int:
        """Virtual ns an insert waits for another insert's tentative copy to be decided."""
        base = self._backoff_ns
        return self._rng.randrange(base, 2 * base) << min(attempt, 4)

    def block_copies(self, node: int, off: int) -> list[int]:
        """Global addresses of every copy of the block at ``node:off``: the primary first, then the
        backups of a replicated layout (lib/replicas.py)."""
        primary = self._nb[node] | off
        if self.replicas is None:
            return [primary]
        return [primary, *self.replicas.backup_gaddrs(node, off)]

    def slot_copies(self, slot: int) -> list[int]:
        """Global addresses of the backups of the primary slot ``slot`` (none unreplicated)."""
        return [] if self.index_copies is None else self.index_copies.backup_gaddrs(slot)

    def queue_slot_copies(self, co, slot: int, word: int) -> None:
        """Queue the WRITEs of a committed slot word to the index's backups (none without them)."""
        if self.index_copies is not None:
            data = int(word).to_bytes(8, "little")
            for b in self.index_copies.backup_gaddrs(slot):
                co.write(b, data)

    def slot_committed(self, co, slot: int, word: int):
        """Generator: a slot CAS of this operation committed ``word``: with a replicated index,
        WRITE it to the backups and wait (primary-backup: the primary's CAS orders the writes,
        the operation is done once every copy holds it); nothing, and no time, without."""
        if self.index_copies is None:
            return
        self.queue_slot_copies(co, slot, word)
        yield co.sync()

    def retire_block(self, w: int) -> None:
        """The block slot word ``w`` points to was unlinked by this operation."""
        self.alloc.retire(*slot_location(w))

    def release_block(self, w: int) -> None:
        """The block of ``w`` was never published: nobody else has its address."""
        self.alloc.release(*slot_location(w))

    def new_block(self, co, key: bytes, value: bytes, h: int):
        """Generator: allocate a block for (key, value), queue its WRITE; returns its committed slot word."""
        units = check_item(key, value)
        node, off = yield from self.alloc.alloc(co, units)
        image = encode_block(key, value)
        for a in self.block_copies(node, off):          # with a replicated layout, the backups too
            co.write(a, image)
        self.thread.cpu(self._line_ns * units)           # building the block in the send buffer
        return slot_word(h >> FP_SHIFT, units, node, off)

    # -- the KV interface ----------------------------------------------------------------------
    # Every operation runs inside an epoch (nodes/systems/lib/reclaim.py): the blocks it may read are
    # not reused before it ends.
    def get(self, co, key: bytes):
        return self.reclaim.run(self._get(co, key))

    def update(self, co, key: bytes, value: bytes):
        return self.reclaim.run(self._update(co, key, value))

    def delete(self, co, key: bytes):
        return self.reclaim.run(self._delete(co, key))

    def insert(self, co, key: bytes, value: bytes):
        return self.reclaim.run(self._insert(co, key, value))

    def _get(self, co, key: bytes):
        if type(key) is not bytes:
            key = bytes(key)
        self.gets += 1
        h = hash64(key)
        self.thread.cpu(self.hash_ns(len(key)))
        found = yield from self.lookup(co, key, h)
        if found is None:
            return None
        off = found[2].offset + 8 + len(key)
        return self._buf[off:off + found[3]].tobytes()

    def write_key(self, key) -> tuple[bytes, int]:
        """A write's key as bytes and its hash, with the write's fixed CPU (``write_cpu_ns``) and the
        hashing charged to the thread."""
        if type(key) is not bytes:
            key = bytes(key)
        self.thread.cpu(self._write_ns + self.hash_ns(len(key)))
        return key, hash64(key)

    def lookup(self, co, key: bytes, h: int):
        """What a get looks the key up with: a generator of (slot, word, block handle, value
        length) or None. RACE: :meth:`find`; a design with another read path (an address cache, a
        replicated index) gives its own."""
        return self.find(co, key, h)

    def _update(self, co, key: bytes, value: bytes):
        self.updates += 1
        key, h = self.write_key(key)
        new = yield from self.new_block(co, key, value, h)
        failpoint("race.update.block_written")
        for attempt in range(RETRY_LIMIT):
            found = yield from self.find(co, key, h)
            if found is None:
                self.release_block(new)           # our block was never published
                return False
            slot, old = found[0], found[1]
            if self.fault == "update-skips-cas":
                co.write(slot, new)                # the deliberate bug: a blind write, no CAS
                yield co.sync()
                return True
            # SMART's backoff_cas: a plain CAS unless the rack turns conflict avoidance on (SMART-HT)
            swapped, _ = yield from co.backoff_cas(slot, old, new)
            if swapped:
                yield from self.slot_committed(co, slot, new)
                self.retire_block(old)            # the replaced block: reused once no reader holds it
                self.updates_retried += attempt > 0
                return True
            self.cas_retries += 1
            yield from self.cas_failed(co, attempt)
        raise SystemGaveUp(f"RACE: update of key {key[:32]!r} gave up after {RETRY_LIMIT} failed CASes")

    def _delete(self, co, key: bytes):
        self.deletes += 1
        key, h = self.write_key(key)
        for attempt in range(RETRY_LIMIT):
            found = yield from self.find(co, key, h)
            if found is None:
                return False
            failpoint("race.delete.found")
            slot, old = found[0], found[1]
            swapped, _ = yield from co.backoff_cas(slot, old, 0)
            if swapped:
                yield from self.slot_committed(co, slot, 0)
                self.retire_block(old)
                return True
            self.cas_retries += 1
            yield from self.cas_failed(co, attempt)
        raise SystemGaveUp(f"RACE: delete of key {key[:32]!r} gave up after {RETRY_LIMIT} failed CASes")

    def _insert(self, co, key: bytes, value: bytes):
        """Publish a *tentative* slot, re-read both combined buckets, settle with any concurrent
        insert of the same key (the lowest slot address wins; it aborts higher tentative copies),
        then commit with a CAS. See docs/race.md for why this is linearizable."""
        self.inserts += 1
        key, h = self.write_key(key)
        mine_c = yield from self.new_block(co, key, value, h)
        mine_t = mine_c | TENTATIVE
        known: dict = {}
        waits = 0
        published = False                         # once tentatively published, other inserts may READ it
        for _ in range(RETRY_LIMIT):
            # -- publish: the key must not be there, then CAS a free slot to our tentative word
            others, _mine, free = yield from self.scan_key(co, key, h, known, mine_c)
            if others:
                if any(not (w & TENTATIVE) for _, w in others):
                    # committed: the key exists
                    (self.retire_block if published else self.release_block)(mine_c)
                    return False
                self.insert_conflicts += 1        # another insert is deciding: let it
                if waits >= STALE_TENTATIVE_WAITS:
                    # A live insert settles in a few round trips; a tentative copy that outlived
                    # this many back-offs belongs to a crashed client. Aborting it is safe: readers
                    # never see tentative copies, and its owner, if alive after all, finds its copy
                    # gone when it settles and starts over.
                    for a, w in others:
                        co.cas(a, w, 0)
                    yield co.sync()
                    self.stale_aborts += 1
                    waits = 0
                    continue
                yield self.backoff(waits)
                waits += 1
                continue
            if free is None:
                yield from self.no_free_slot(co, key)
                continue
            word = self._free_word
            c = co.cas(free, word, mine_t)
            yield co.sync()
            if c.value != word:
                self.cas_retries += 1             # someone took the slot: look again
                continue
            published = True
            failpoint("race.insert.published")
            outcome = yield from self._settle(co, key, h, known, mine_c, mine_t, free)
            if outcome is not None:
                if not outcome:
                    self.retire_block(mine_c)     # withdrawn, but other inserts may have read it
                return outcome
            self.insert_conflicts += 1            # our tentative copy was aborted: start over
            yield self.backoff(waits)
            waits += 1
        raise SystemGaveUp(f"RACE: insert of key {key[:32]!r} did not settle after {RETRY_LIMIT} rounds")

    def _settle(self, co, key, h, known, mine_c, mine_t, slot):
        """Generator: decide a published tentative insert. True (committed), False (the key exists;
        our copy withdrawn) or None (our copy was aborted or withdrawn: publish again)."""
        for _ in range(RETRY_LIMIT):
            others, mine, _free = yield from self.scan_key(co, key, h, known, mine_c)
            if mine is None or mine[1] != mine_t or mine[0] != slot:
                return None                       # a lower tentative copy aborted ours
            if any(not (w & TENTATIVE) for _, w in others):
                co.cas(slot, mine_t, 0)           # the key exists: withdraw
                yield co.sync()
                return False
            if any(a < slot for a, _ in others):
                self.insert_conflicts += 1        # a lower copy wins: withdraw and wait for it
                co.cas(slot, mine_t, 0)
                yield co.sync()
                return None
            if others:                            # higher tentative copies: abort them
                self.insert_conflicts += len(others)
                aborts = [(w, co.cas(a, w, 0)) for a, w in others]
                yield co.sync()
                if any(hd.value != w for w, hd in aborts):
                    continue                      # one moved on (maybe committed): look again
            failpoint("race.insert.settled")
            c = co.cas(slot, mine_t, mine_c)
            yield co.sync()
            if c.value != mine_t:
                return None
            yield from self.slot_committed(co, slot, mine_c)
            return True
        raise SystemGaveUp(f"RACE: insert of key {key[:32]!r} did not settle after {RETRY_LIMIT} rounds")

    def _table_full(self, key: bytes):
        lay = self.layout
        raise SystemGaveUp(
            f"RACE table full: both combined buckets of key {key[:32]!r} have no free slot "
            f"({lay['slots']} slots sized for capacity {lay['capacity']} at load_factor {lay['load_factor']}; "
            f"RACE cannot split subtables yet). Lower the system option load_factor (more buckets per key) "
            f"or size the rack for more keys.")
