"""The ROLEX client (compute side): get / insert / update / delete / scan over one-sided verbs.

One :class:`RolexClient` per modelled thread; the learned cache is shared by the compute node's
threads and READ from the model table at first use (``cache.py``). Verbs per operation, out-of-line
values, no contention, a key in its primary leaf (a "round" is one ``sync``; W: the model's window
of candidate leaves, 1 to 3 for eps 32 and full leaves):

=========  ===================================================================  ======  ==========
op         rounds                                                               rounds  verbs
=========  ===================================================================  ======  ==========
get        READ W leaves + the home leaf's meta word | READ value block          2       W + 2
update     WRITE block, CAS lock, READ W leaves + meta | WRITE leaf, meta, CAS   2       W + 6
insert     as update; a full leaf adds FAA (one round) and WRITE synonym + meta  2 (3)   W + 6 (+3/4)
delete     CAS lock, READ W leaves + meta | WRITE leaf, meta, CAS unlock         2       W + 5
scan       READ W leaves + W metas, then one READ of leaf + meta per leaf       1/leaf  2/leaf
           beyond the window | READ the value blocks of each leaf
=========  ===================================================================  ======  ==========

Each synonym leaf a key's chain walk passes adds one round (READ leaf + meta: the pointer is in the
meta word just READ). A lock found taken adds a CAS round per try; the READs of the first try go
with its CAS, since on one queue pair a READ executes after the atomic posted before it, and the
previous holder's write-back landed before its unlock CAS. With ``values = "inline"`` there are
no blocks: get is one round, update/insert lose the block WRITE. With retraining on
(``retrain_synonyms`` > 0) a split's FAA round also FAAs its model's synonym count (one more verb,
no more rounds); the insert that brings the count to the budget then asks the memory node to
retrain the model (one datagram after its unlock, no reply; retrain.py).

Why each step is correct under concurrency (docs/rolex.md, "On the rack"):

* writers of a leaf group (its primary leaf's lock word) are serialised, and a key's group is fixed
  by the fences, so two writers of one key always meet at one lock;
* a reader keeps a leaf snapshot only when its checksum matches the meta word READ with it: a
  torn READ (two write-backs mixed line by line) or a leaf and meta of different write-backs is
  READ again;
* the keys of a chain stay sorted across its leaves, a new synonym leaf is WRITTEN before the meta
  that links it (one post, one queue pair), and an unlinked leaf keeps its contents and its next
  pointer, so a reader following an old pointer still ends on a leaf that was current after it
  started;
* a value block is WRITTEN and completed before the leaf that names it, and replaced blocks are
  reused only after two epochs (nodes/systems/lib/reclaim.py);
* an operation uses one table (one epoch of the learned cache) throughout; a leaf a retrain
  replaced has a retired meta word and its group a retired lock, and the retrain retires them
  before it publishes the new table, after it has locked every group it re-lays: so a leaf an
  operation takes was current when it was READ, and one that is retired sends the operation back
  to READ the new table and start over (:class:`Stale`; docs/rolex.md, "Retraining").
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from nodes.systems.api import KVClient, SystemGaveUp
from nodes.systems.lib.alloc import ChunkAllocator
from nodes.systems.lib.reclaim import Reclaimer
from nodes.systems.lib.shared import shared
from shm.fabric import gaddr

from .cache import LearnedCache, Table
from .layout import (
    EMPTY, MAX_VALUE, NO_SYNONYM, RETIRED_LOCK, VALUE_OFFSET_BITS, Remote, image_meta, key_int, leaf_checksum,
    pack_meta, parse_table, retired_epoch, table_bytes, table_head, unpack_meta, unpack_value_word, used,
    value_units, value_word,
)
from .retrain import REQUEST, REQUEST_PORT, RETRAIN_PORT

#: Modelled CPU: the profile's [software] prices (nodes/systems/lib/cpu_costs.py): a leaf's lines
#: checked and searched line by line, and per operation the fixed work plus the learned-cache
#: lookup (software.learned_lookup_cycles).
RETRY_LIMIT = 100_000
#: The model table is READ in pieces that fit the thread's buffer with room to spare.
TABLE_PIECE = 64 << 10
#: Value blocks a scan READs per round, by bytes (the thread's buffer is 256 KiB).
SCAN_VALUE_BYTES = 64 << 10


class RolexStats(NamedTuple):
    gets: int
    inserts: int
    updates: int
    deletes: int
    scans: int
    candidate_leaves: int      # leaves READ in the first batch of operations (the models' windows)
    synonym_hops: int          # synonym leaves READ after it, one round trip each
    lock_retries: int          # lock CASes that found the group taken
    torn_reads: int            # leaf snapshots whose checksum did not match their meta word (READ again)
    synonym_leaves: int        # synonym leaves this client allocated (FAA on a leaf counter)
    unlinked_leaves: int       # synonym leaves deletes emptied and unlinked (never reused, as in ROLEX)
    cache_refreshes: int       # learned caches READ from the model table (once per compute node)
    blocks_written: int        # out-of-line value blocks
    blocks_reused: int         # value blocks that came back (nodes/systems/lib/reclaim.py)
    bytes_reclaimed: int       # bytes of replaced value blocks that became reusable
    cache_bytes: int           # the node's learned cache (models + fences)
    memory_bytes: int          # value blocks this client allocated and has not retired
    read_bytes: int            # bytes operations READ (leaves, meta words, value blocks; not the model table)
    stale_retries: int         # operations that met a retired leaf or lock and started over on a newer table
    newer_tables: int          # model tables READ that were newer than the node's (retrains the node crossed)
    retrain_requests: int      # retrain requests sent to the memory node (a model's synonym budget reached)


class Stale(Exception):
    """An operation met a leaf or a lock that a retrain retired: its table is older than ``epoch``."""

    def __init__(self, epoch: int):
        super().__init__(epoch)
        self.epoch = epoch


class Snap:
    """A validated copy of one leaf: its 2 x span words, checksum and synonym pointer."""

    __slots__ = ("leaf", "words", "checksum", "synonym")

    def __init__(self, leaf: int, words: np.ndarray, checksum: int, synonym: int):
        self.leaf, self.words, self.checksum, self.synonym = leaf, words, checksum, synonym

    @property
    def span(self) -> int:
        return len(self.words) // 2

    @property
    def keys(self) -> np.ndarray:
        return self.words[:self.span]

    @property
    def vals(self) -> np.ndarray:
        return self.words[self.span:]

    @property
    def n(self) -> int:
        return used(self.keys)

    def slot(self, k: int) -> tuple[int, bool]:
        """Where ``k`` is or would go, and whether it is there."""
        n = self.n
        i = int(np.searchsorted(self.keys[:n], np.uint64(k)))
        return i, i < n and int(self.keys[i]) == k

    def covers(self, k: int) -> bool:
        """Is the key's place in this leaf rather than further down the chain?"""
        n = self.n
        return self.synonym == NO_SYNONYM or (n > 0 and k <= int(self.keys[n - 1]))

    def meta(self) -> int:
        return image_meta(self.words, self.synonym)


class RolexClient(KVClient):
    NAME = "ROLEX"

    def __init__(self, fabric, layout: dict, thread, options: dict):
        self.fabric = fabric
        self.remote = Remote(layout)
        self.thread = thread
        owner = thread.owner
        self.cache: LearnedCache = shared(owner, self.remote.model_word(), "rolex_learned_cache", LearnedCache)
        self.inline = layout["values"] == "inline"
        self.skip_checksum = options.get("fault", "none") == "skip-checksum"
        self.unlock_first = options.get("fault", "none") == "unlock-first"
        self.value_late = options.get("fault", "none") == "value-with-write-back"
        self.retrain_at = int(layout.get("retrain_synonyms", 0))     # a model's synonym budget; 0: off
        self.retrainer = fabric.nodes[self.remote.nodes[0]].name      # the memory node that retrains
        self.tag = ((owner.node << 16) | thread.index) + 1          # the lock holder: this thread
        self.reclaim = Reclaimer(fabric, layout["epochs"], thread)
        self.alloc = ChunkAllocator(fabric, list(self.remote.nodes), layout["chunk_bytes"],
                                    start=owner.node * 7 + thread.index, reclaim=self.reclaim, owner=self.NAME,
                                    max_offset=(1 << VALUE_OFFSET_BITS) - 1,
                                    offset_limit="the value word's 40-bit offset field")
        self.buf = thread.buf
        self.span, self.leaf_bytes = self.remote.span, self.remote.leaf_bytes
        cpu = fabric.profile.cpu
        sw = fabric.profile.software
        self._leaf_ns = max(1, int(sw.line_cycles * -(-self.leaf_bytes // 64) / cpu.ghz))
        self._line_ns = max(1, int(sw.line_cycles / cpu.ghz))
        self._op_ns = int((sw.op_cycles + sw.learned_lookup_cycles) / cpu.ghz)
        self.gets = self.inserts = self.updates = self.deletes = self.scans = 0
        self.candidate_leaves = self.synonym_hops = self.lock_retries = self.torn_reads = 0
        self.synonym_leaves = self.unlinked_leaves = self.cache_refreshes = self.blocks_written = 0
        self.read_bytes = 0
        self.stale_retries = self.newer_tables = self.retrain_requests = 0
        self._socket = None                  # the datagram socket retrain requests go out on (made on first use)

    def statistics(self) -> RolexStats:
        return RolexStats(self.gets, self.inserts, self.updates, self.deletes, self.scans, self.candidate_leaves,
                          self.synonym_hops, self.lock_retries, self.torn_reads, self.synonym_leaves,
                          self.unlinked_leaves, self.cache_refreshes, self.blocks_written, self.reclaim.reused,
                          self.reclaim.bytes_reclaimed, self.cache.nbytes,
                          self.alloc.used_bytes, self.read_bytes, self.stale_retries, self.newer_tables, self.retrain_requests)

    # -- the learned cache -----------------------------------------------------------------------
    def refresh(self, co, want: int = 0):
        """Generator: READ the model table (its address from the first region's header) into the
        node's learned cache: a compute node's first operation does it, and an operation that met
        a leaf retired for epoch ``want`` (the table of that epoch is published right after)."""
        for _ in range(RETRY_LIMIT):
            h = co.read(self.remote.model_word(), 8)
            yield co.sync()
            table = h.value
            if not table:
                raise SystemGaveUp("ROLEX: no model table in memory: the index was not set up")
            h = co.read(table, 64)
            yield co.sync()
            models, primaries, mapped, epoch = table_head(bytes(h.data))
            if epoch < want:
                continue                     # retired, not yet published: the store comes next
            size = table_bytes(models, primaries, mapped)
            data = bytearray(size)
            for pos in range(0, size, TABLE_PIECE):
                n = min(TABLE_PIECE, size - pos)
                h = co.read(table + pos, n)
                yield co.sync()
                data[pos:pos + n] = h.data.tobytes()
            self.thread.cpu(self._line_ns * (size // 64 + 1))
            self.cache_refreshes += 1
            had = self.cache.table
            self.cache.load(parse_table(data))
            if had is not None and self.cache.table.epoch > had.epoch:
                self.newer_tables += 1
            return
        raise SystemGaveUp(f"ROLEX: the model table of epoch {want} was not published after {RETRY_LIMIT} READs")

    def _fill_cache(self, co, want: int = 0):
        """Generator: the node's learned cache, at epoch ``want`` or later, READ by the first
        coroutine that needs it; the others wait for that one."""
        cache = self.cache
        while cache.table is None or cache.table.epoch < want:
            if cache.fetching is not None:
                yield cache.fetching
                continue
            cache.fetching = self.thread.env.event()
            try:
                yield from self.refresh(co, want)
            finally:
                done, cache.fetching = cache.fetching, None
                done.succeed()

    def _locate(self, co, key, bound: bool = False) -> tuple[Table, int, int, int, int]:
        """Generator: (table, key int, home slot, window lo, hi), the cache loaded first if need be."""
        if type(key) is not bytes:
            key = bytes(key)
        try:
            k = key_int(key, bound)
        except ValueError as e:
            raise SystemGaveUp(str(e)) from None
        if not self.cache.loaded:
            yield from self._fill_cache(co)
        self.thread.cpu(self._op_ns)
        t = self.cache.table
        home = t.home(k)
        lo, hi = t.window(k, home)
        return t, k, home, lo, hi

    def _again(self, co, op, *args):
        """Generator: ``op(co, *args)``, started over on a newer table each time it meets a leaf
        or lock a retrain retired."""
        for _ in range(RETRY_LIMIT):
            try:
                return (yield from op(co, *args))
            except Stale as s:
                self.stale_retries += 1
                yield from self._fill_cache(co, s.epoch)
        raise SystemGaveUp(f"ROLEX: an operation met retired leaves {RETRY_LIMIT} times in a row")

    # -- reading leaves ---------------------------------------------------------------------------
    def _take(self, leaf: int, h_leaf, h_meta) -> Snap | None:
        """The snapshot READ into ``h_leaf`` if the meta word READ with it vouches for it."""
        self.thread.cpu(self._leaf_ns)
        word = h_meta.value
        epoch = retired_epoch(word)
        if epoch is not None:
            raise Stale(epoch)
        checksum, synonym = unpack_meta(word)
        if leaf_checksum(self.buf, h_leaf.offset, self.leaf_bytes) != checksum and not self.skip_checksum:
            self.torn_reads += 1
            return None
        return Snap(leaf, self.buf[h_leaf.offset:h_leaf.offset + self.leaf_bytes].view(np.uint64).copy(), checksum,
                    synonym)

    def _read(self, co, addr: int, nbytes: int):
        """Queue a READ of ``nbytes`` (counted in ``read_bytes``: what the operation asks of the link)."""
        self.read_bytes += nbytes
        return co.read(addr, nbytes)

    def _read_leaf(self, co, leaf: int) -> Snap:
        """Generator: a validated snapshot of ``leaf`` (READ with its meta word until they agree)."""
        r = self.remote
        for _ in range(RETRY_LIMIT):
            hl, hm = self._read(co, r.leaf_addr(leaf), self.leaf_bytes), self._read(co, r.meta_addr(leaf), 8)
            yield co.sync()
            snap = self._take(leaf, hl, hm)
            if snap is not None:
                return snap
        raise SystemGaveUp(f"ROLEX: leaf {leaf} stayed torn for {RETRY_LIMIT} READs")

    def _queue_window(self, co, t: Table, lo: int, hi: int, metas: range) -> tuple[list, dict]:
        """Queue the READs of the window's leaves (slots ``lo``..``hi`` of table ``t``) and of the
        meta words of the slots ``metas``."""
        r = self.remote
        self.candidate_leaves += hi - lo + 1
        return ([self._read(co, r.leaf_addr(t.leaf(g)), self.leaf_bytes) for g in range(lo, hi + 1)],
                {g: self._read(co, r.meta_addr(t.leaf(g)), 8) for g in metas})

    def _walk(self, co, snap: Snap, k: int) -> tuple[Snap, Snap | None]:
        """Generator: from a group's primary snapshot, the leaf of the chain where ``k`` is or
        would go (the first whose last key is >= k, else the tail), and the leaf before it."""
        prev = None
        for _ in range(RETRY_LIMIT):
            if snap.covers(k):
                return snap, prev
            self.synonym_hops += 1
            prev, snap = snap, (yield from self._read_leaf(co, snap.synonym))
        raise SystemGaveUp(f"ROLEX: synonym chain from leaf {snap.leaf} does not end")

    def _read_value(self, co, word: int):
        """Generator: the value bytes a leaf's value word stands for."""
        if self.inline:
            return int(word).to_bytes(8, "little")
        length, node, off = unpack_value_word(int(word))
        if not length:
            return b""
        h = self._read(co, gaddr(node, off), length)
        yield co.sync()
        self.thread.cpu(self._line_ns * value_units(length))
        return h.data.tobytes()

    # -- the KV interface -------------------------------------------------------------------------
    def get(self, co, key: bytes):
        self.gets += 1
        return self.reclaim.run(self._again(co, self._get, key))

    def _get(self, co, key: bytes):
        t, k, home, lo, hi = yield from self._locate(co, key)
        leaves, metas = self._queue_window(co, t, lo, hi, (home,))
        yield co.sync()
        leaf = t.leaf(home)
        snap = self._take(leaf, leaves[home - lo], metas[home])
        if snap is None:
            snap = yield from self._read_leaf(co, leaf)
        snap, _ = yield from self._walk(co, snap, k)
        i, hit = snap.slot(k)
        if not hit:
            return None
        return (yield from self._read_value(co, snap.vals[i]))

    def insert(self, co, key: bytes, value: bytes):
        self.inserts += 1
        return self.reclaim.run(self._again(co, self._modify, key, value, "insert"))

    def update(self, co, key: bytes, value: bytes):
        self.updates += 1
        return self.reclaim.run(self._again(co, self._modify, key, value, "update"))

    def delete(self, co, key: bytes):
        self.deletes += 1
        return self.reclaim.run(self._again(co, self._modify, key, None, "delete"))

    def _value_word(self, co, value: bytes):
        """Generator: the value word for ``value``; out of line, the block's WRITE is queued
        (it goes out with the lock CAS and completes before the leaf that names it)."""
        if type(value) is not bytes:
            value = bytes(value)
        if self.inline:
            if len(value) != 8:
                raise SystemGaveUp(f"ROLEX with values = \"inline\" stores 8-byte values (ROLEX's u64); got "
                                   f"{len(value)} bytes (use values = \"out-of-line\")")
            return int.from_bytes(value, "little"), None
        if len(value) > MAX_VALUE:
            raise SystemGaveUp(f"ROLEX values are at most {MAX_VALUE} bytes; got {len(value)}")
        units = value_units(len(value))
        node, off = yield from self.alloc.alloc(co, units)
        if not self.value_late:
            co.write(gaddr(node, off), value)
        self.blocks_written += 1
        return value_word(len(value), node, off), (node, off, units)

    def _block(self, word) -> tuple | None:
        if self.inline:
            return None
        length, node, off = unpack_value_word(int(word))
        return node, off, value_units(length)

    def _lock(self, co, t: Table, home: int, lo: int, hi: int):
        """Generator: take the group's lock; the window's leaves and the home meta READ after it
        (with the first CAS; again after a CAS that had to be retried). A retired lock: Stale."""
        leaf = t.leaf(home)
        addr = self.remote.lock_addr(leaf)
        for attempt in range(RETRY_LIMIT):
            c = co.cas(addr, 0, self.tag)
            if attempt == 0:
                batch = self._queue_window(co, t, lo, hi, (home,))
            yield co.sync()
            held = c.value
            if held == 0:
                break
            if held & RETIRED_LOCK:
                raise Stale(held & 0xFFFFFFFF)
            self.lock_retries += 1
        else:
            raise SystemGaveUp(f"ROLEX: the lock of leaf group {leaf} stayed taken for {RETRY_LIMIT} tries")
        if attempt:
            batch = self._queue_window(co, t, lo, hi, (home,))
            yield co.sync()
        leaves, metas = batch
        try:
            snap = self._take(leaf, leaves[home - lo], metas[home])
            if snap is None:                 # cannot be torn under the lock; READ again regardless
                snap = yield from self._read_leaf(co, leaf)
        except Stale:
            # a group whose lock a writer holds is never retired (a retrain takes the lock
            # first); should one be (fault=retrain-unlocked), the lock still goes back
            self._unlock(co, leaf)
            yield co.sync()
            raise
        return snap

    def _unlock(self, co, leaf: int):
        """Queue the unlock: a CAS after the write-back WRITEs on the same queue pair lands after them."""
        co.cas(self.remote.lock_addr(leaf), self.tag, 0)

    def _modify(self, co, key, value, kind: str):
        """Generator: insert / update / delete under the leaf group's lock (see the module table)."""
        t, k, home, lo, hi = yield from self._locate(co, key)
        word, block = (0, None) if value is None else (yield from self._value_word(co, value))
        try:
            primary = yield from self._lock(co, t, home, lo, hi)
        except Stale:
            if block:
                self.alloc.release(*block)   # never published
            raise
        slot, home = home, t.leaf(home)      # from here on the group by its primary leaf
        try:
            snap, prev = yield from self._walk(co, primary, k)
        except Stale:
            # a leaf of a group whose lock this writer holds is never retired (a retrain takes
            # the lock first); should one be, the lock still goes back before starting over
            self._unlock(co, home)
            yield co.sync()
            if block:
                self.alloc.release(*block)
            raise
        i, hit = snap.slot(k)
        due = None
        if hit != (kind != "insert"):        # insert of a present key, change of a missing one
            self._unlock(co, home)
            yield co.sync()
            if block:
                self.alloc.release(*block)   # never published
            return False
        r = self.remote
        n = snap.n
        keys, vals = snap.keys, snap.vals
        old = None
        dirty = [snap]                       # leaves to write back, in this order
        if kind == "update":
            old = self._block(vals[i])
            vals[i] = word
        elif kind == "delete":
            old = self._block(vals[i])
            keys[i:n - 1], vals[i:n - 1] = keys[i + 1:n].copy(), vals[i + 1:n].copy()
            keys[n - 1], vals[n - 1] = EMPTY, 0
        else:
            if n == self.span:
                # the new synonym leaf goes first, so it has landed before the meta that links it
                syn, full, due = yield from self._split(co, t, slot, home, snap)
                dirty = [syn, full]
                snap = dirty[0] if k > int(dirty[0].keys[0]) else dirty[1]
                i = snap.slot(k)[0]
                keys, vals, n = snap.keys, snap.vals, snap.n
            keys[i + 1:n + 1], vals[i + 1:n + 1] = keys[i:n].copy(), vals[i:n].copy()
            keys[i], vals[i] = k, word
        if self.unlock_first:
            # fault=unlock-first, the deliberate bug: the unlock CAS is posted before the write-back
            # in the same doorbell; a WRITE may pass an earlier atomic of its QP, so nothing keeps
            # the write-back from landing after the unlock, where the next holder READs the leaf
            # without it (nanoseconds co-located, where the CAS takes the longer path; up to the
            # lax window between two processes, whose clocks may be sync.window_ns apart)
            self._unlock(co, home)
        for leaf in dirty:
            co.write(r.leaf_addr(leaf.leaf), leaf.words.view(np.uint8))
            co.write(r.meta_addr(leaf.leaf), leaf.meta())
        if self.value_late and block:
            # fault=value-with-write-back, the deliberate bug: the value's block is WRITTEN in the
            # write-back's doorbell, behind the leaf that names it (saving it the lock round's
            # bandwidth), not completed before it: on another memory node, or on the same QP a
            # few nanoseconds after, a reader that follows the new leaf reads the block before
            # its value is there; calm timing leaves it no time to, a slow WRITE does
            co.write(gaddr(block[0], block[1]), bytes(value))
        if kind == "delete" and n == 1 and prev is not None:
            # the emptied synonym leaf leaves the chain; it keeps its next pointer for readers in flight
            co.write(r.meta_addr(prev.leaf), pack_meta(prev.checksum, snap.synonym))
            self.unlinked_leaves += 1
        if not self.unlock_first:
            self._unlock(co, home)
        yield co.sync()
        if old is not None:
            self.alloc.retire(*old)          # after the WRITE that unlinked it completed
        if due is not None:
            self._request_retrain(*due)
        return True

    def _request_retrain(self, epoch: int, unit_leaf: int) -> None:
        """Ask the memory node that retrains (the first) to retrain the model whose first primary
        is ``unit_leaf``: one datagram (a UD SEND, priced on this thread's core and the NIC
        model), no reply to wait for; a request lost to a full receive ring is made again when
        the model's count reaches its next multiple of the budget."""
        if self._socket is None:
            owner = self.thread.owner
            net = getattr(owner, "udp", None)
            if net is None:
                raise SystemGaveUp("ROLEX: retraining needs the datagram path to the memory node (a profile with "
                                   "[udp] and a rack that gives its nodes one); set retrain_synonyms = 0 to run "
                                   "without it")
            self._socket = net.socket(owner.node, REQUEST_PORT)
        self.retrain_requests += 1
        self._socket.send(self.retrainer, RETRAIN_PORT, REQUEST.pack(epoch, unit_leaf), thread=self.thread)

    def _split(self, co, t: Table, slot: int, home: int, full: Snap):
        """Generator (holding the lock): ROLEX's insert_synonym. A synonym leaf from the group's
        memory node (FAA on its counter) takes the upper half of the full leaf and is linked right
        after it, so the chain stays sorted. Returns (the synonym leaf, the full leaf, a retrain
        request or None), the leaves changed locally: the caller inserts the key into one of them
        and writes both back in that order. With retraining on, the same round FAAs the synonym
        count of the group's model (its first primary's count word); the FAA that reaches the
        budget (and each further budget) makes the request (epoch, the model's first leaf).
        ``slot``: the group's slot in ``t``; ``home``: its primary leaf."""
        r = self.remote
        j = r.node_of(home)
        h = co.faa(r.counter_addr(j), 1)
        c = None
        if self.retrain_at:
            unit = t.leaf(t.unit(slot))
            c = co.faa(r.count_addr(unit), 1)
        yield co.sync()
        local = h.value
        if local >= r.leaves_per_node:
            raise SystemGaveUp(f"ROLEX: the leaf region of memory node {r.nodes[j]} is full ({r.leaves_per_node} "
                               f"leaves): raise the option leaf_headroom")
        span = self.span
        half = span // 2
        words = np.zeros(2 * span, dtype=np.uint64)
        words[:span] = EMPTY
        words[:half] = full.keys[half:]
        words[span:span + half] = full.vals[half:]
        syn = Snap(r.global_leaf(j, local), words, 0, full.synonym)
        full.keys[half:], full.vals[half:] = EMPTY, 0
        full.synonym = syn.leaf
        self.synonym_leaves += 1
        due = None
        if c is not None:
            n, at = c.value + 1, self.retrain_at
            if n >= at and (n - at) % at == 0:
                due = (t.epoch, unit)
        return syn, full, due

    def scan(self, co, start: bytes, count: int):
        self.scans += 1
        return self.reclaim.run(self._again(co, self._scan, start, count))

    def _scan(self, co, start: bytes, count: int):
        """Generator: the window of ``start`` in one batch (with every window leaf's meta), then
        leaf groups in key order, each primary then its chain, until ``count`` pairs."""
        t, k, home, lo, hi = yield from self._locate(co, start, bound=True)
        out: list = []
        if count <= 0:
            return out
        leaves, metas = self._queue_window(co, t, lo, hi, range(lo, hi + 1))
        yield co.sync()
        batch = {g: self._take(t.leaf(g), leaves[g - lo], metas[g]) for g in range(home, hi + 1)}
        g = home
        while g < t.primaries and len(out) < count:
            snap = batch.get(g) or (yield from self._read_leaf(co, t.leaf(g)))
            while True:
                n = snap.n
                ks = snap.keys[:n]
                a = int(np.searchsorted(ks, np.uint64(k))) if g == home else 0
                pairs = list(zip(ks[a:a + count - len(out)].tolist(), snap.vals[a:a + count - len(out)].tolist()))
                out.extend((yield from self._values(co, pairs)))
                if len(out) >= count or snap.synonym == NO_SYNONYM:
                    break
                self.synonym_hops += 1
                snap = yield from self._read_leaf(co, snap.synonym)
            g += 1
        return out

    def _values(self, co, pairs: list) -> list:
        """Generator: (key bytes, value bytes) of (key int, value word) pairs, the value blocks
        READ in batches."""
        if self.inline:
            return [(kk.to_bytes(8, "big"), w.to_bytes(8, "little")) for kk, w in pairs]
        out = []
        i = 0
        while i < len(pairs):
            handles, size = [], 0
            while i < len(pairs) and (not handles or size < SCAN_VALUE_BYTES):
                kk, w = pairs[i]
                length, node, off = unpack_value_word(w)
                handles.append((kk, self._read(co, gaddr(node, off), length) if length else None))
                size += length
                i += 1
            yield co.sync()
            self.thread.cpu(self._line_ns * (size // 64 + len(handles)))
            out.extend((kk.to_bytes(8, "big"), h.data.tobytes() if h else b"") for kk, h in handles)
        return out
