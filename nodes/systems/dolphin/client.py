"""One modelled thread's Dolphin: the pathfinding walk, the Spear-bracketed IDUs, SMOs and scans.

The walk (paper §III-B): from the deepest cached ART node matching the key's prefix, descend byte
by byte (``lib.art``); an ART leaf entry names a Dolphin leaf holding the keys of one 7-byte
prefix, a *special node* at depth 7 names the leaves a split prefix was divided into (the entry of
the largest ``partial`` <= the key's last byte holds it). A leaf whose ``[min, max]`` does not hold
the key after a split: re-READ the special node and choose again (*backtracking*), instead of a
new walk from the root. A walk that started from the cache and finds nothing is confirmed from
the root (a cached image may lack newer entries).

IDUs (insert, delete, update) hold Spear (Marlin's ternary-state lock, FAA only) in the leaf: FAA
+1 posted with the READ of the leaf's header and keys, one round trip; then the write posted with
the release (FAA -1), the second. Many IDUs run on one leaf at once: updates synchronise in the
memory node's NIC (one in-place WRITE of the value), inserts by a CAS of the first empty key slot,
deletes by a CAS of the key to a tombstone. Slots fill in ascending order and only an SMO empties
them, so the first empty slot is always the lowest one: two inserts of one key always race for
the same slot, and the loser sees the key in the CAS's answer.

An SMO (a leaf with no empty slot) takes Spear exclusively (FAA of SMO_STATUS, then READ the lock
until the IDUs have drained) and either compacts the leaf (tombstones out) or splits it: the upper
quarter of the keys moves to a new leaf. Order, chosen so that no key is ever readable from two
leaves: WRITE the new leaf (unreachable yet), WRITE the old leaf shrunk (its max lowered; bytes up
to the lock word, then the rear version), then publish the new leaf: a CAS of an empty entry of
the special node, or, at a prefix's first split, a new special node holding both leaves CASed over
the ART entry that named the old leaf. Between the shrink and the publish, readers of the moved
keys find no leaf for them and wait (docs/dolphin.md: the paper publishes first and shrinks last,
which lets a reader take a moved key's old value from the old leaf after an update in the new one).
"""

from __future__ import annotations

from typing import NamedTuple

from nodes.systems.api import KVClient, SystemGaveUp
from nodes.systems.lib.alloc import ChunkAllocator
from nodes.systems.lib.art import (
    KEY_BYTES, NODE_16, ArtTree, build_node, decode_entry, entry_byte, is_frozen, is_leaf_entry,
    prefix_mismatch, read_leaf_key_at, with_partial,
)
from nodes.systems.lib.cpu_costs import SoftwareCosts
from nodes.systems.lib.local_lock import LocalLockTable
from nodes.systems.lib.radix_cache import HASH_KEY_BYTES, RadixCache
from nodes.systems.lib.spear import Spear
from nodes.systems.lib.shared import shared
from shm.failpoints import failpoint
from shm.fabric import gaddr, gaddr_node, gaddr_offset

from .layout import (
    EMPTY, FRONT_OFF, KEYS_OFF, MIN_OFF, TOMBSTONE, LeafFormat, LeafImage, key_num, key_word, leaf_bytes,
    num_key, rear_bytes, word_key,
)

SPECIAL_DEPTH = KEY_BYTES - 1        # the special node dispatches on the last key byte, by range
#: A leaf this small or smaller is READ whole by a get (1 round trip, Dolphin's evaluation: 1088 B);
#: a bigger one (large value slots) as header and keys, then the value slot (2 round trips).
WHOLE_LEAF_BYTES = 4096
#: Modelled CPU: the profile's [software] prices (nodes/systems/lib/cpu_costs.py): fixed work per
#: operation, a walk of the compute node's radix index cache priced by its size, and the scan of a
#: leaf's key array line by line.
RETRY_NS = 500                       # wait before reading again what another client is changing
RETRY_LIMIT = 200_000
#: How long an IDU waits for an insert that has CASed its key but not written the value (normally
#: well under a round trip) before it gives up with an error: Dolphin has no recovery for a client
#: that stops between the two (the paper describes no failure handling), so the key stays "in flight".
IN_FLIGHT_WAITS = 2_000              # x RETRY_NS = 1 ms of virtual time


class DolphinStats(NamedTuple):
    gets: int
    inserts: int
    updates: int
    deletes: int
    scans: int
    backtracks: int          # special node READ again after a leaf split under a walk
    restarts: int            # walks run again from the root
    spear_waits: int         # IDUs that found an SMO holding Spear and waited
    smo_waits: int           # SMOs that waited for another SMO of the same leaf
    torn_reads: int          # leaf or value READs that were torn or caught an insert in flight, read again
    insert_cas_failures: int
    leaf_splits: int
    compactions: int
    special_nodes: int       # special nodes created (a prefix's first split)
    new_leaves: int          # leaves created for a new 7-byte prefix
    read_handover: int       # GETs answered by another GET's leaf READ on this compute node
    write_handover: int      # UPDATEs whose value another UPDATE of this compute node wrote
    cache_hits: int          # walks that started from a cached node (the compute node's cache)
    cache_misses: int
    cache_bytes: int         # bytes the compute node's radix cache holds now
    memory_bytes: int        # bytes of leaves and nodes this thread allocated
    chunks: int
    stale_scans: int = 0     # scans whose cached special node's leaves did not tile it: walked again


class Located(NamedTuple):
    leaf: int                # the leaf's global address, 0 if no leaf can hold the key
    path: tuple              # ((node image, slot), ...) from the walk's start to the leaf's entry
    cached: bool             # the walk started from the cache


class DolphinClient(KVClient):
    NAME = "Dolphin"

    def __init__(self, fabric, layout: dict, thread, options: dict):
        self.fabric = fabric
        self.layout = layout
        self.thread = thread
        self.env = thread.env
        self.fmt = LeafFormat.of(int(layout["value_bytes"]))
        owner = thread.owner
        budget = int(options.get("cache_bytes", layout.get("cache_bytes", 0)))
        self.cache: RadixCache | None = shared(owner, layout["root"], "radix_cache",
                                               lambda: RadixCache(budget, HASH_KEY_BYTES)) if budget else None
        mns = layout["memory_nodes"]
        self.alloc = ChunkAllocator(fabric, mns, layout["chunk_bytes"], start=owner.node * 7 + thread.index,
                                    owner=self.NAME)
        # ART nodes take whole slots of ``alloc_align`` bytes (Dolphin's code: 256); leaves do not
        self.tree = ArtTree(layout["root"], mns, self.alloc, leaf_key=read_leaf_key_at(MIN_OFF), retry_ns=RETRY_NS,
                            align_units=int(options.get("alloc_align", layout.get("alloc_align", 64))) // 64)
        self.leaf_writes = options.get("leaf_writes", layout.get("leaf_writes", "any-order"))
        self.spear = Spear(self.NAME)
        # read delegation and write combining among this compute node's GETs and UPDATEs of a key
        self.local = shared(owner, layout["root"], "local_lock", lambda: LocalLockTable(thread.env)) \
            if options.get("local_lock", True) else None
        self.read_handover = self.write_handover = 0
        costs = self.costs = SoftwareCosts(fabric.profile)
        self._op_ns = costs.op_ns
        self._keys_ns = max(1, int(fabric.profile.software.line_cycles * (self.fmt.keys_end // 64 + 1)
                                   / fabric.profile.cpu.ghz))
        self._version = (owner.node * 64 + thread.index) * 40503 & 0xFFFF
        self.gets = self.inserts = self.updates = self.deletes = self.scans = 0
        self.backtracks = self.restarts = self.torn_reads = self.stale_scans = 0
        self.insert_cas_failures = self.leaf_splits = self.compactions = self.special_nodes = self.new_leaves = 0
        self.cache_hits = self.cache_misses = 0

    def statistics(self) -> DolphinStats:
        return DolphinStats(self.gets, self.inserts, self.updates, self.deletes, self.scans, self.backtracks,
                            self.restarts, self.spear.idu_waits, self.spear.smo_conflicts, self.torn_reads,
                            self.insert_cas_failures, self.leaf_splits, self.compactions, self.special_nodes,
                            self.new_leaves, self.read_handover, self.write_handover, self.cache_hits,
                            self.cache_misses,
                            self.cache.bytes_used if self.cache is not None else 0, self.alloc.used_bytes,
                            self.alloc.chunks, self.stale_scans)

    # -- keys and versions ---------------------------------------------------------------------------
    def _key(self, key) -> bytes:
        key = bytes(key)
        if len(key) != KEY_BYTES:
            raise SystemGaveUp(f"{self.NAME} keys are exactly {KEY_BYTES} bytes; got {len(key)} bytes: {key[:16]!r}")
        w = key_word(key)
        if w == EMPTY or w == TOMBSTONE:
            raise SystemGaveUp(f"{self.NAME}: key {key.hex()} cannot be stored: its slot word would be the empty "
                               f"or the deleted mark (nodes/systems/dolphin/layout.py, KEY_MASK)")
        return key

    def _next_version(self) -> int:
        v = self._version = (self._version + 1) & 0xFFFF
        if v == 0:
            v = self._version = 1
        return v

    # -- the walk ----------------------------------------------------------------------------------
    def _locate(self, co, key: bytes, use_cache: bool):
        """Generator: a :class:`Located` for ``key``, or None to walk again from the root (a cached
        image proved stale)."""
        tree, cache = self.tree, self.cache
        if use_cache and cache is not None:
            self.thread.cpu(self.costs.radix_search_ns(len(self.cache)))
        img, cached = yield from tree.descent_start(co, key, cache, use_cache)
        started_cached = cached
        if started_cached:
            self.cache_hits += 1
        elif use_cache and cache is not None:
            self.cache_misses += 1
        path = []
        while True:
            if not img.live:
                img = yield from tree.follow(co, img)
                cached = False
            hd = img.header
            if prefix_mismatch(hd, key) >= 0:
                return Located(0, tuple(path), started_cached)
            if hd.depth == SPECIAL_DEPTH:
                slot, word = self._choose(img, key[SPECIAL_DEPTH])
                if word and is_frozen(word):
                    img, cached = (yield from tree.refresh(co, img)), False
                    continue
                if slot < 0:
                    return Located(0, tuple(path), started_cached)
                path.append((img, slot))
                return Located(tree.target(word), tuple(path), started_cached)
            slot, word = img.find(key[hd.depth])
            if word == 0:
                return Located(0, tuple(path), started_cached)
            if is_frozen(word):
                img, cached = (yield from tree.refresh(co, img)), False
                continue
            path.append((img, slot))
            if is_leaf_entry(word):
                return Located(tree.target(word), tuple(path), started_cached)
            child = yield from tree.read_child(co, img, slot, word, cached, cache, key)
            if child is None:
                return None
            img, cached = child, False

    @staticmethod
    def _choose(img, byte: int) -> tuple[int, int]:
        """The special node's entry for a key whose last byte is ``byte``: the one of the largest
        partial <= byte (``(slot, word)``; a frozen word if the node is being replaced)."""
        best, best_word, best_byte = -1, 0, -1
        for i, w in enumerate(img.entries):
            if w == 0:
                continue
            if is_frozen(w):
                return i, w
            b = entry_byte(w)
            if best_byte < b <= byte:
                best, best_word, best_byte = i, w, b
        return best, best_word

    def _find(self, co, key: bytes, use_cache: bool = True):
        """Generator: the :class:`Located` leaf for ``key`` (cache first if ``use_cache``, confirmed
        from the root when a cached walk finds nothing)."""
        for attempt in range(RETRY_LIMIT):
            loc = yield from self._locate(co, key, use_cache and attempt == 0)
            if loc is None or (not loc.leaf and loc.cached):
                self.restarts += 1
                continue
            return loc
        raise SystemGaveUp(f"{self.NAME}: no stable walk for key {key.hex()} after {RETRY_LIMIT} tries")

    def _backtrack(self, co, key: bytes, loc: Located):
        """Generator: the leaf for ``key`` after the one ``loc`` found did not hold it (a split moved
        the key): the parent special node READ again and the entry chosen again; a walk from the root
        when the parent is not a special node. Waits a little first when the same leaf comes back
        (a split between its shrink and its publish)."""
        self.backtracks += 1
        parent, _ = loc.path[-1] if loc.path else (None, -1)
        if parent is not None and parent.header.depth == SPECIAL_DEPTH:
            img = yield from self.tree.refresh(co, parent)
            slot, word = self._choose(img, key[SPECIAL_DEPTH])
            if slot >= 0 and not is_frozen(word):
                leaf = self.tree.target(word)
                if self.cache is not None:
                    self.cache.put(key[:SPECIAL_DEPTH], img)
                if leaf == loc.leaf:
                    yield RETRY_NS
                return Located(leaf, loc.path[:-1] + ((img, slot),), False)
        yield RETRY_NS
        self.restarts += 1
        got = yield from self._locate(co, key, False)
        return got if got is not None else Located(0, (), False)

    # -- leaf READs --------------------------------------------------------------------------------
    def _read_whole(self, co, leaf: int) -> LeafImage:
        fmt = self.fmt
        h = co.read(leaf, fmt.size)
        yield co.sync()
        raw = bytes(h.data)
        return LeafImage(fmt, leaf, raw, raw[fmt.rear_off])

    def _read_leaf(self, co, leaf: int, enter: bool = False):
        """Generator: a get's or an IDU's READ of the leaf: whole (values included) if it is at most
        WHOLE_LEAF_BYTES, else its header and keys and its rear version (in the same doorbell), with
        Spear's IDU FAA +1 posted first if ``enter``. Returns ``(image, entered)``."""
        fmt = self.fmt
        hl = Spear.queue_idu_enter(co, leaf + fmt.lock_off) if enter else None
        if fmt.size <= WHOLE_LEAF_BYTES:
            img = yield from self._read_whole(co, leaf)
        else:
            hk = co.read(leaf, fmt.keys_end)
            hr = co.read(leaf + fmt.rear_off, 8)
            yield co.sync()
            img = LeafImage(fmt, leaf, bytes(hk.data), int(hr.data[0]))
        return img, (hl is None or Spear.idu_entered(hl))

    def _read_slot(self, co, leaf: int, slot: int):
        h = co.read(leaf + self.fmt.slot_off(slot), self.fmt.slot_bytes)
        yield co.sync()
        return bytes(h.data)

    # -- get -----------------------------------------------------------------------------------------
    def get(self, co, key: bytes):
        key = self._key(key)
        self.gets += 1
        self.thread.cpu(self._op_ns)
        if self.local is not None:
            return (yield from self.local.read(key, lambda mark: self._remote_get(co, key, mark), self, marks=True))
        return (yield from self._remote_get(co, key, None))[0]

    def _remote_get(self, co, key: bytes, mark):
        """Generator: ``(value or None, stamp)``: the get's walk and leaf READs; ``mark`` (the local
        lock table's, or None) is called right before each leaf READ that may give the answer, and
        the stamp of the one that did is returned (0 for "absent": nobody takes that early)."""
        kw, k = key_word(key), key_num(key)
        fmt = self.fmt
        loc = yield from self._find(co, key)
        for _ in range(RETRY_LIMIT):
            if not loc.leaf:
                return None, 0
            whole = fmt.size <= WHOLE_LEAF_BYTES
            stamp = mark() if mark is not None else 0
            img, _ = yield from self._read_leaf(co, loc.leaf)
            self.thread.cpu(self._keys_ns)
            if not img.consistent:
                self.torn_reads += 1
                continue
            if not img.covers(k):
                if k > img.max and (img.max >> 8) == (k >> 8):
                    loc = yield from self._backtrack(co, key, loc)
                    continue
                if loc.cached:                       # a stale cached path led to another prefix's leaf
                    loc = yield from self._find_uncached(co, key)
                    continue
                return None, 0
            i = img.find(kw)
            if i < 0:
                return None, 0
            raw = img.slot(i) if whole else (yield from self._read_slot(co, loc.leaf, i))
            if not fmt.slot_written(raw, key):
                if whole:
                    return None, 0                   # the key's insert has not written its value: not in yet
                continue                             # or an SMO moved the key since the keys were READ
            value, ok = fmt.decode_slot(raw, key)
            if ok:
                return value, stamp
            self.torn_reads += 1                     # lines of two updates: read again
        raise SystemGaveUp(f"{self.NAME}: get of {key.hex()} found no consistent leaf after {RETRY_LIMIT} READs")

    def _find_uncached(self, co, key):
        """Generator: ``_find`` from the root, after a cached path proved stale."""
        self.restarts += 1
        return (yield from self._find(co, key, use_cache=False))

    # -- Spear, the IDU side -----------------------------------------------------------------------
    def _idu_enter(self, co, key: bytes, loc: Located, before_read=None):
        """Generator: Spear taken shared on the leaf holding ``key`` (FAA +1 posted with the READ of
        the leaf); ``(loc, image)`` with the image covering the key, or ``(loc, None)`` if no leaf
        holds it (nothing held). A leaf of at most WHOLE_LEAF_BYTES is READ whole, values included
        (Dolphin's code READs it without values; docs/dolphin.md says why not here), a bigger one
        as header and keys."""
        k = key_num(key)
        fmt = self.fmt
        lock_of = fmt.lock_off
        in_flight = 0
        for _ in range(RETRY_LIMIT):
            if not loc.leaf:
                return loc, None
            lock = loc.leaf + lock_of
            if before_read is not None:
                before_read()
            img, entered = yield from self._read_leaf(co, loc.leaf, enter=True)
            self.thread.cpu(self._keys_ns)
            if not entered:                          # an SMO holds the leaf: back off until it is done
                yield from self.spear.idu_back_off(co, lock)
                continue
            failpoint("dolphin.idu.entered")
            if img.consistent and img.covers(k):
                i = img.find(key_word(key))
                if i < 0 or (yield from self._written(co, img, i, key)):
                    return loc, img
                # the key's insert has CASed its slot but not written its value: it is not in yet,
                # and nothing may act on it before it is (an update would be overwritten by it)
                self.torn_reads += 1
                Spear.queue_idu_exit(co, lock)
                in_flight += 1
                if in_flight > IN_FLIGHT_WAITS:
                    raise SystemGaveUp(f"{self.NAME}: the insert of key {key.hex()} CASed its key slot but has not "
                                       f"written its value for {IN_FLIGHT_WAITS * RETRY_NS // 1000} µs: its client "
                                       f"stopped between the two (Dolphin has no recovery for that)")
                yield RETRY_NS
                continue
            Spear.queue_idu_exit(co, lock)
            if not img.consistent:
                self.torn_reads += 1
                continue
            if k > img.max and (img.max >> 8) == (k >> 8):
                loc = yield from self._backtrack(co, key, loc)
            elif loc.cached:
                loc = yield from self._find_uncached(co, key)
            else:
                return Located(0, loc.path, False), None
        raise SystemGaveUp(f"{self.NAME}: no leaf for {key.hex()} after {RETRY_LIMIT} tries")

    def _written(self, co, img: LeafImage, i: int, key: bytes):
        """Generator: whether slot ``i``'s value is written for ``key`` (from the image when it was
        READ whole, else one more READ of the slot's first line)."""
        fmt = self.fmt
        off = fmt.slot_off(i)
        if len(img.raw) >= off + 16:
            return fmt.slot_written(img.raw[off:off + 16], key)
        h = co.read(img.addr + off, 16)
        yield co.sync()
        return fmt.slot_written(bytes(h.data), key)

    def _release(self, co, leaf: int) -> None:
        """The IDU's release, posted with the caller's last write (the caller syncs if it waits)."""
        Spear.queue_idu_exit(co, leaf + self.fmt.lock_off)

    # -- update, delete --------------------------------------------------------------------------------
    def update(self, co, key: bytes, value: bytes):
        key = self._key(key)
        value = bytes(value)
        self.fmt.check_value(value, self.NAME)
        self.updates += 1
        self.thread.cpu(self._op_ns)
        if self.local is not None:
            return (yield from self.local.write(key, value, lambda take: self._remote_update(co, key, take), self))
        return (yield from self._remote_update(co, key, lambda: value))

    def _remote_update(self, co, key: bytes, take):
        """Generator: the update's two round trips. ``take()`` gives the value to write (the local
        lock table's write combining: the last value handed over); it is called right before each
        READ of the leaf, because that READ, which finds the key present, is where the update takes
        effect: a delete that lands between it and the WRITE leaves the WRITE in a tombstoned slot,
        and an update handed over after that READ must not return True for it."""
        loc = yield from self._find(co, key)
        value = [None]

        def before_read():
            value[0] = take()

        loc, img = yield from self._idu_enter(co, key, loc, before_read)
        if img is None:
            return False
        i = img.find(key_word(key))
        if i < 0:
            self._release(co, loc.leaf)
            return False
        failpoint("dolphin.update.found")
        co.write(loc.leaf + self.fmt.slot_off(i), self.fmt.encode_slot(key, value[0], self._next_version()))
        failpoint("dolphin.update.written")
        self._release(co, loc.leaf)
        yield co.sync()
        return True

    def delete(self, co, key: bytes):
        key = self._key(key)
        self.deletes += 1
        self.thread.cpu(self._op_ns)
        loc = yield from self._find(co, key)
        loc, img = yield from self._idu_enter(co, key, loc)
        if img is None:
            return False
        kw = key_word(key)
        i = img.find(kw)
        if i < 0:
            self._release(co, loc.leaf)
            return False
        h = co.cas(loc.leaf + KEYS_OFF + 8 * i, kw, TOMBSTONE)
        self._release(co, loc.leaf)
        yield co.sync()
        return h.value == kw

    # -- insert ----------------------------------------------------------------------------------------
    def insert(self, co, key: bytes, value: bytes):
        key = self._key(key)
        value = bytes(value)
        self.fmt.check_value(value, self.NAME)
        self.inserts += 1
        self.thread.cpu(self._op_ns)
        kw = key_word(key)
        for _ in range(RETRY_LIMIT):
            loc = yield from self._find(co, key)
            loc, img = yield from self._idu_enter(co, key, loc)
            if img is None:
                got = yield from self._insert_new_leaf(co, key, value)
                if got is not None:
                    return got
                continue                              # the prefix got a leaf meanwhile: insert into it
            if img.find(kw) >= 0:
                self._release(co, loc.leaf)
                return False
            i = img.first_empty()
            while i >= 0:
                h = co.cas(loc.leaf + KEYS_OFF + 8 * i, EMPTY, kw)
                yield co.sync()
                cur = h.value
                if cur == EMPTY:
                    failpoint("dolphin.insert.key_set")
                    co.write(loc.leaf + self.fmt.slot_off(i), self.fmt.encode_slot(key, value, self._next_version()))
                    self._release(co, loc.leaf)
                    yield co.sync()
                    return True
                self.insert_cas_failures += 1
                if cur == kw:
                    break                             # the same key won the slot: look again once it is in
                img.keys[i] = cur
                i = img.first_empty(i + 1)
            self._release(co, loc.leaf)
            if i >= 0:
                yield RETRY_NS
                continue
            # full: restructure, then try again
            yield from self._smo(co, key, loc.leaf)
        raise SystemGaveUp(f"{self.NAME}: insert of {key.hex()} did not settle after {RETRY_LIMIT} tries")

    def _insert_new_leaf(self, co, key: bytes, value: bytes):
        """Generator: no leaf holds the key's 7-byte prefix: a new leaf ``[prefix.00, prefix.ff]`` with
        the key, entered into the ART under ``prefix.00`` (lib.art). True once in, None if another
        client created the prefix's leaf first (the caller inserts into that one)."""
        fmt = self.fmt
        node, off = yield from self.alloc.alloc(co, fmt.units)
        leaf = gaddr(node, off)
        lo = key_num(key) >> 8 << 8
        v = self._next_version()
        co.write(leaf, leaf_bytes(fmt, rev_ptr=0, version=v, node_id=off // 64, lo=lo, hi=lo | 0xFF,
                                  entries=[(key, fmt.encode_slot(key, value, self._next_version()))]))
        co.write(leaf + fmt.rear_off, rear_bytes(v))
        yield co.sync()
        got = yield from self.tree.insert(co, num_key(lo), leaf, self.cache)
        if not got.inserted:
            self.alloc.release(node, off, fmt.units)
            return None
        self.new_leaves += 1
        co.write(leaf, got.entry_addr)               # its rev_ptr: a hint, unsignaled
        co.post()
        return True

    # -- SMO ---------------------------------------------------------------------------------------
    def _smo(self, co, key: bytes, leaf: int):
        """Generator: restructure the full ``leaf`` under Spear held exclusively: compact it if
        tombstones free enough slots, else split it. Returns when done or when another SMO of the
        leaf was running (the caller looks again)."""
        fmt = self.fmt
        lock = leaf + fmt.lock_off
        if not (yield from self.spear.smo_enter(co, lock, inside_idu=False)):
            return                                   # another SMO had the leaf: look again
        img = yield from self._read_whole(co, leaf)
        live = sorted(img.live(), key=lambda iw: key_num(word_key(iw[1])))
        entries = [(word_key(w), img.slot(i)) for i, w in live]
        version = (img.front + 1) & 0xFF
        if len(entries) <= fmt.slots * 3 // 4 or len(entries) < 2:
            yield from self._rewrite(co, img, version, leaf_bytes(fmt, rev_ptr=img.rev_ptr, version=version,
                                                                  node_id=img.node_id, lo=img.min, hi=img.max,
                                                                  entries=entries))
            self.compactions += 1
        else:
            yield from self._split(co, img, entries, version)
        Spear.queue_smo_exit(co, lock, inside_idu=False)
        yield co.sync()

    def _rewrite(self, co, img: LeafImage, version: int, data: bytes):
        """Generator: WRITE a reachable leaf's new bytes (up to its lock word) under Spear, so that a
        lock-free reader (one READ, front version first, rear version last) never takes a torn leaf
        for a whole one. ``leaf_writes = "ordered"`` (the paper): one WRITE then the rear version,
        which relies on the lines landing in ascending order (a reader that started before the
        front line changed stays ahead of the writer). ``"any-order"`` (the default): the rear
        version first, then everything but the front version, then the front version, each WRITE
        waited for: a reader that sees any new line reads the new rear after it, and a new front
        only once every line is in, whatever order the lines of one WRITE land in."""
        fmt, leaf = self.fmt, img.addr
        if self.leaf_writes == "ordered":
            co.write(leaf, data)
            co.write(leaf + fmt.rear_off, rear_bytes(version))
            yield co.sync()
            return
        co.write(leaf + fmt.rear_off, rear_bytes(version))
        yield co.sync()
        body = bytearray(data)
        body[FRONT_OFF] = img.front
        co.write(leaf, bytes(body))
        yield co.sync()
        co.write(leaf + FRONT_OFF, bytes([version & 0xFF]))
        yield co.sync()

    def _split(self, co, img: LeafImage, entries: list, version: int):
        """Generator: split the (Spear-held) leaf of ``img``: the upper quarter of ``entries`` (sorted
        key, slot bytes) to a new leaf, the old one shrunk, then the new one published."""
        fmt, leaf = self.fmt, img.addr
        m = len(entries) // 4 * 3
        low, high = entries[:m], entries[m:]
        s = key_num(high[0][0])
        node, off = yield from self.alloc.alloc(co, fmt.units)
        new = gaddr(node, off)
        co.write(new, leaf_bytes(fmt, rev_ptr=0, version=1, node_id=off // 64, lo=s, hi=img.max, entries=high))
        co.write(new + fmt.rear_off, rear_bytes(1))
        yield co.sync()
        failpoint("dolphin.smo.new_leaf_written")
        yield from self._rewrite(co, img, version, leaf_bytes(fmt, rev_ptr=img.rev_ptr, version=version,
                                                              node_id=img.node_id, lo=img.min, hi=s - 1, entries=low))
        failpoint("dolphin.smo.old_leaf_shrunk")
        self.leaf_splits += 1
        yield from self._publish(co, num_key(img.min), leaf, new, s & 0xFF)

    def _publish(self, co, lo_key: bytes, leaf: int, new: int, byte: int):
        """Generator: make the new leaf ``new`` (min's last byte ``byte``) reachable next to ``leaf``
        (whose min is ``lo_key``), whatever the ART did around them meanwhile."""
        tree = self.tree
        for _ in range(RETRY_LIMIT):
            loc = yield from self._locate(co, lo_key, False)
            if loc is None or loc.leaf != leaf or not loc.path:
                yield RETRY_NS
                continue
            parent, pslot = loc.path[-1]
            if parent.header.depth == SPECIAL_DEPTH:
                slot, word = parent.find(byte)
                if slot < 0:                          # full: a bigger special node, then again
                    if len(loc.path) >= 2:
                        gp, gslot = loc.path[-2]
                        yield from tree.upgrade(co, parent, gp, gslot)
                    continue
                if word != 0:
                    yield RETRY_NS
                    continue
                ok, _ = yield from tree.cas_slot(co, parent, slot, 0, tree.leaf_entry_for(byte, new))
                if ok:
                    co.write(new, parent.entry_addr(slot))     # the new leaf's rev_ptr
                    yield co.sync()
                    if self.cache is not None:
                        self.cache.put(lo_key[:SPECIAL_DEPTH], parent)
                    return
                continue
            # the prefix's first split: a special node with both leaves replaces the leaf entry
            word = parent.entries[pslot]
            pd = parent.header.depth
            saddr = yield from tree.alloc_node(co, NODE_16)
            special = build_node(saddr, NODE_16, SPECIAL_DEPTH, lo_key[pd + 1:SPECIAL_DEPTH], parent.entry_addr(pslot),
                                 [tree.leaf_entry_for(lo_key[SPECIAL_DEPTH], leaf), tree.leaf_entry_for(byte, new)])
            tree.write_node(co, special)
            co.write(leaf, special.entry_addr(0))              # rev_ptrs: hints, before the node is reachable
            co.write(new, special.entry_addr(1))
            yield co.sync()
            failpoint("dolphin.smo.special_written")
            entry = with_partial(tree.entry_for(0, saddr, NODE_16), entry_byte(word))
            ok, _ = yield from tree.cas_slot(co, parent, pslot, word, entry)
            if ok:
                self.special_nodes += 1
                if self.cache is not None:
                    self.cache.put(lo_key[:SPECIAL_DEPTH], special)
                return
            self.alloc.release(gaddr_node(saddr), gaddr_offset(saddr), tree.units_for(NODE_16))
        raise SystemGaveUp(f"{self.NAME}: could not publish a split leaf after {RETRY_LIMIT} tries")

    # -- scan --------------------------------------------------------------------------------------------
    def scan(self, co, start: bytes, count: int):
        """Up to ``count`` pairs with key >= start, in order: an ordered walk of the ART from the
        deepest cached node covering ``start``, then from the root past that node's prefix if more
        pairs are wanted; internal nodes READ one per round trip, leaves up to four per doorbell.

        A cached *special node* is not READ again: its leaves are READ from the cached entries at
        once, as Dolphin's ``Tree::range_query`` starts from the entries ``search_range_from_cache``
        returns. Its leaves tile its 256-key prefix, so a stale image (a split published since it
        was cached) shows in the leaves themselves: a leaf that does not start where the one before
        it ended, or a last leaf that does not reach the prefix's end; the scan then walks again
        without the cache. Any other cached node is READ again (its cached image could lack a newer
        child, which no leaf would show; a node at depth d holds every key of its d-byte prefix,
        whatever split happened above it). A leaf shrunk by a split whose new half is not published
        yet shows as the same gap on a fresh walk: the scan waits and walks again from the gap."""
        start = bytes(start)
        if len(start) != KEY_BYTES:
            raise SystemGaveUp(f"{self.NAME} keys are exactly {KEY_BYTES} bytes; got {len(start)}")
        self.scans += 1
        self.thread.cpu(self._op_ns)
        out: list = []
        pos = key_num(start)
        use_cache = True
        for _ in range(RETRY_LIMIT):
            if count <= 0:
                return []
            status, pos = yield from self._scan_from(co, pos, count, out, use_cache)
            if status == "done":
                return out[:count]
            use_cache = False
            if status == "stale":
                self.stale_scans += 1
            elif status == "gap":
                yield RETRY_NS
        raise SystemGaveUp(f"{self.NAME}: scan from {start.hex()} did not settle")

    @staticmethod
    def _kids(img) -> list:
        """A node image's entries as (key byte, word), in key order."""
        return sorted((entry_byte(w), w) for w in img.entries if w)

    @staticmethod
    def _covering(kids: list, start: bytes) -> list:
        """A special node's leaf entries (its :meth:`_kids`) in key order from the one covering
        ``start`` (the largest partial <= its last byte; the first one if none is)."""
        first = 0
        for j, (b, _) in enumerate(kids):
            if b <= start[SPECIAL_DEPTH]:
                first = j
        return [w for _, w in kids[first:]]

    def _scan_from(self, co, pos: int, count: int, out: list, use_cache: bool):
        """Generator: append pairs with key >= ``pos`` to ``out`` in order. Returns ``("done", _)``
        when the walk ended or ``count`` pairs are in, ``("next", key)`` when a walk that started
        below the root has gone through its node's prefix, ``("gap", key)`` at a gap, and
        ``("stale", key)`` when the leaves of a cached special node's image do not tile its prefix
        (walk again without the cache)."""
        tree, fmt = self.tree, self.fmt
        start = num_key(pos)
        # stack of pending items, last = next: ("node", addr, type, tight) / ("leaf", addr, tight)
        stack = [("node", tree.root, 7, True)]
        depth = 0
        cached = None                                # a cached special node's image, not READ again
        if use_cache and self.cache is not None:
            self.thread.cpu(self.costs.radix_search_ns(len(self.cache)))
            hit = self.cache.lookup(start)
            # the node must hold the start key's prefix (its partial, which never changes, says so):
            # a walk caches a node under the prefix of the key that led to it, before it compares
            # the node's partial with that key
            if hit is not None and hit.header.depth > 0 and prefix_mismatch(hit.header, start) < 0:
                depth = hit.header.depth
                if depth == SPECIAL_DEPTH and not any(is_frozen(w) for w in hit.entries):
                    cached = hit
                    stack = [("leaf", tree.target(w), True) for w in reversed(self._covering(self._kids(hit), start))]
                else:
                    stack = [("node", hit.addr, hit.node_type, True)]
        expect = None                                # the min the next leaf of a split prefix must have
        while stack:
            if stack[-1][0] == "leaf":
                batch = []
                # the READs land in the thread's ring buffer, which its other coroutines share: a
                # coroutine keeps its verbs in flight within a sixteenth of it (a leaf at least)
                most = max(1, min(4, self.thread.owner.buffer_bytes // (16 * fmt.size)))
                while stack and stack[-1][0] == "leaf" and len(batch) < most:
                    batch.append(stack.pop())
                hs = [co.read(addr, fmt.size) for _, addr, _ in batch]
                yield co.sync()
                # copied at once: the READs land in the thread's ring buffer, which the verbs of this
                # thread's other coroutines reuse while this one waits (a torn leaf read again below)
                raws = [bytes(h.data) for h in hs]
                for (_, addr, _), raw in zip(batch, raws):
                    img = LeafImage(fmt, addr, raw, raw[fmt.rear_off])
                    while not img.consistent:
                        self.torn_reads += 1
                        img = yield from self._read_whole(co, addr)
                    if expect is not None and img.min != expect and img.max >= expect:
                        # the upper half of a split is not published yet, or (from a cached image)
                        # was published after the image was cached; go on from the gap, never
                        # from below the scan's start (the first leaf may have shrunk below it)
                        return ("stale" if cached is not None else "gap"), max(expect, pos)
                    expect = img.max + 1 if img.max & 0xFF != 0xFF else None
                    pairs = []
                    for i, w in img.live():
                        k = key_num(word_key(w))
                        if k < pos:
                            continue
                        value, ok = fmt.decode_slot(img.slot(i), word_key(w))
                        if not ok:
                            if fmt.raw:
                                continue             # an insert in flight: not in yet
                            self.torn_reads += 1
                            return "gap", pos if not out else key_num(out[-1][0]) + 1
                        pairs.append((k, word_key(w), value))
                    pairs.sort()
                    for _, kb, value in pairs:
                        out.append((kb, value))
                    if len(out) >= count:
                        return "done", 0
                continue
            _, addr, t, tight = stack.pop()
            img = yield from tree.read_node(co, addr, t)
            if not img.live:
                img = yield from tree.follow(co, img)
            if any(is_frozen(w) for w in img.entries):
                img = yield from tree.refresh(co, img)
            hd = img.header
            d = hd.depth
            if tight:
                node_prefix = start[:d - len(hd.partial)] + hd.partial
                if node_prefix < start[:d]:
                    continue
                tight = node_prefix == start[:d]
            kids = self._kids(img)
            if d == SPECIAL_DEPTH:
                for w in reversed(self._covering(kids, start) if tight else [w for _, w in kids]):
                    stack.append(("leaf", tree.target(w), tight))
                continue
            for b, w in reversed(kids):
                if tight and b < start[d]:
                    continue
                sub_tight = tight and b == start[d]
                if is_leaf_entry(w):
                    stack.append(("leaf", tree.target(w), sub_tight))
                else:
                    stack.append(("node", tree.target(w), decode_entry(w).node_type, sub_tight))
        if cached is not None and expect is not None:
            # the image's last leaf no longer reaches the prefix's end: on from where it stopped
            return "stale", max(expect, pos)
        if depth:
            shift = 8 * (KEY_BYTES - depth)
            nxt = ((pos >> shift) + 1) << shift
            if nxt < 1 << 64:
                return "next", nxt
        return "done", 0
