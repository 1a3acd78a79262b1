"""SMART-ART (Luo et al., OSDI'23): an adaptive radix tree on disaggregated memory (docs/smart_art.md).

The internal nodes are the systems library's ART (nodes/systems/lib/art.py: node types 4..256,
compressed prefixes, lock-free slot CAS, out-of-place type upgrade, reverse pointers), cached on
each compute node in a byte-budgeted radix cache (nodes/systems/lib/radix_cache.py). What is
SMART-ART's own is here: one leaf per KV pair, the update paths, and the local lock table (read
delegation and write combining, nodes/systems/lib/local_lock.py).

**Leaf**: one per KV pair, whole 64-byte units written whole before a CAS links them (the
format: :mod:`.layout`).

**Operations** (the walk: from the deepest cached node, one READ per level below it):

* GET: walk; READ the leaf; the checksum catches a READ torn by an in-place WRITE (READ again);
  the key must match. A dead leaf with a successor: READ the successor (a *chain*; a walk from
  the root also swings the entry to it, unsignaled, as a helper).
* UPDATE, in place (SMART's default, ``TREE_ENABLE_IN_PLACE_UPDATE``) when the value fits the
  leaf: CAS status 0 -> 1 (the lock), then WRITE checksum + key + value and CAS status 1 -> 0 in
  one doorbell (the CAS lands after the WRITE: same QP). The CAS returns the status, so a leaf
  that died under the walk is seen without another READ.
* UPDATE out of place when the value does not fit: WRITE a new leaf; CAS the old leaf's status
  0 -> dead(new) (the *decision*: the update takes effect here); swing the parent entry old ->
  new (unsignaled: readers follow the chain until it lands).
* DELETE: CAS status 0 -> dead(0). The entry keeps pointing at the dead leaf; an insert of the key
  later swings it to its new leaf (CAS of the entry from the word it found).
* INSERT: WRITE the leaf, then ``ArtTree.insert`` (slot CAS, leaf split, prefix split or node
  upgrade). If the key has an entry whose chain ends live, the key exists.
* SCAN: from the root, READ the nodes on start's path (one per level), then, in key order, only
  the subtrees right of it that the first ``count`` keys need: each round READs in one doorbell
  the shortest prefix of what is left that can hold the keys still wanted (``scan``).

GETs and UPDATEs go through the compute node's local lock table (option ``local_lock``): a GET
may take the value of a same-key GET's leaf READ posted after it arrived, an UPDATE hands its
value to a same-key UPDATE in flight (lib/local_lock.py has the linearizability argument).

Why deciding on the old leaf rather than on the entry: a cached node image keeps leaf entries, so
a GET that starts from the cache can reach a leaf long after the entry moved on. Were the entry
the point where an update or delete takes effect, such a reader could return the old value after
a reader from the root had returned the new one. With the decision in the leaf's status every
reader sees it, wherever it came from: a live leaf (reached by any entry that ever pointed at it)
is the key's current leaf, because a leaf leaves its key's chain only by dying first. A chain
that ends deleted is finished for good (a dead status never changes), and only then may an insert
start a new one at the entry; so a reader from the cache that finds a deleted leaf or another
key's leaf walks again from the root, where the entry is authoritative. This needs a leaf's address
never to name anything else: **replaced and deleted leaves are never reused** (counted out of
``memory_bytes`` as retired, their memory not reclaimed, as SMART's code also only clears the old
leaf's valid byte). Epoch reclamation would not make reuse safe here: a cached image's leaf
pointer outlives every epoch.

A client that stops while holding a leaf's ``w_lock`` (between the lock CAS and the unlock, one
round trip) blocks that key's writers, as in SMART. Every other stop point leaves a state others
finish or ignore: a written leaf not yet linked (leaked), a decided replacement whose entry was
not swung (readers follow the chain, walks from the root swing it), an upgrade whose new node is
written but not linked (walkers follow the forwarding header and swing the parent entry).
"""

from __future__ import annotations

from typing import NamedTuple

from nodes.systems.api import KVClient, SystemGaveUp
from nodes.systems.lib.alloc import UNIT, ChunkAllocator
from nodes.systems.lib.cpu_costs import SoftwareCosts
from nodes.systems.lib.art import (
    ENTRIES_OFF, NODE_256, ArtTree, decode_entry, entry_byte, is_frozen, is_leaf_entry, min_entries, node_bytes,
    parse_node, read_leaf_key_at, slot_units, with_partial,
)
from nodes.systems.lib.local_lock import LocalLockTable
from nodes.systems.lib.radix_cache import RadixCache
from nodes.systems.lib.shared import shared
from shm.failpoints import failpoint
from shm.fabric import gaddr, gaddr_node, gaddr_offset

from .layout import (
    CHECKSUM, DEAD, KEY, KEY_BYTES, LEAF_HEAD, LIVE, LOCKED, MAX_VALUE, STATUS, VALUE, KeySizeError, Leaf,
    ValueTooLarge, checksum, dead, leaf_body, leaf_image, leaf_units, successor_of,
)

RETRY_LIMIT = 100_000


class SmartArtStats(NamedTuple):
    gets: int
    inserts: int
    updates: int
    deletes: int
    scans: int
    cache_hits: int            # walks that started from a cached node
    cache_misses: int          # ... that started from the root
    cache_invalidations: int   # cached nodes this client dropped (stale rev_ptr)
    stale_restarts: int        # cached walks that met another key's or a deleted leaf: walked again from the root
    read_handover: int         # GETs answered by another GET's read (local lock table)
    write_handover: int        # UPDATEs whose value another UPDATE wrote (local lock table)
    in_place_updates: int
    out_of_place_updates: int
    lock_retries: int          # lock CASes that found the leaf's w_lock held
    decision_retries: int      # status CASes (replace, delete) that found the leaf locked or already dead
    chain_hops: int            # READs of a successor leaf (a replacement whose entry had not moved yet)
    entry_helps: int           # entry swings posted for a replacement found from the root
    torn_reads: int            # leaf READs whose checksum failed (read again)
    short_reads: int           # leaf READs shorter than the leaf (read again, whole)
    leaves_written: int
    node_reads: int
    upgrades: int
    leaf_splits: int
    prefix_splits: int
    cas_failures: int
    restarts: int
    chunks: int
    cache_bytes: int           # the compute node's radix cache (shared by its threads)
    memory_bytes: int          # bytes of the blocks this client allocated and has not unlinked
    bulk_bytes: int            # bytes a bulk load wrote (in the records of the node that ran it)


class _CountingCache:
    """The node's shared RadixCache, seen through one client: counts this client's hits, misses
    and invalidations (the shared cache's own counters are the node's)."""

    __slots__ = ("cache", "hits", "misses", "invalidations")

    def __init__(self, cache: RadixCache):
        self.cache = cache
        self.hits = self.misses = self.invalidations = 0

    def lookup(self, key):
        got = self.cache.lookup(key)
        if got is None:
            self.misses += 1
        else:
            self.hits += 1
        return got

    def put(self, prefix, image):
        return self.cache.put(prefix, image)

    def invalidate(self, prefix, depth=None):
        self.invalidations += 1
        return self.cache.invalidate(prefix, depth)

    def patch(self, key: bytes, entry_addr: int, old: int, new: int) -> None:
        """A cached image holding the entry at ``entry_addr`` as ``old`` takes ``new`` (this
        client swung it), so that the next walk from the cache does not meet the old leaf."""
        for d in range(KEY_BYTES - 1, -1, -1):
            img = self.cache.get(key[:d])
            if img is not None and img.addr + ENTRIES_OFF <= entry_addr < img.addr + img.size:
                slot = (entry_addr - img.addr - ENTRIES_OFF) // 8
                if img.entries[slot] == old:
                    img.entries[slot] = new
                return


def _scan_bytes(item, leaf_bytes: int) -> int:
    """The READ size of a scan's frontier item: a node its type's size, a leaf ``leaf_bytes``."""
    return node_bytes(item[2]) if item[0] == "n" else leaf_bytes


class SmartArtClient(KVClient):
    """SMART-ART for one modelled thread (see the module docstring)."""

    def __init__(self, fabric, layout: dict, thread, options: dict):
        self.fabric = fabric
        self.thread = thread
        self.env = thread.env
        owner = thread.owner
        root = layout["root"]
        self.layout = layout                     # a bulk load adds "bulk_bytes" to it
        mns = layout["memory_nodes"]
        cache_bytes = int(options.get("cache_bytes", layout.get("cache_bytes", 0)))
        self.shared_cache = shared(owner, root, "radix_cache", lambda: RadixCache(cache_bytes)) if cache_bytes else None
        self.cache = _CountingCache(self.shared_cache) if self.shared_cache is not None else None
        self.fault = options.get("fault", "none")
        use_locks = bool(options.get("local_lock", layout.get("local_lock", True)))
        eager = self.fault == "eager-delegation"
        self.locks = (shared(owner, root, "local_lock_table", lambda: LocalLockTable(thread.env, eager_reads=eager))
                      if use_locks else None)
        # No reclaimer: unlinked leaves are never reused (module docstring); nodes never are either.
        self.alloc = ChunkAllocator(fabric, mns, layout["chunk_bytes"], start=owner.node * 7 + thread.index,
                                    owner="SMART-ART")
        # every allocation takes whole slots of ``alloc_align`` bytes (SMART's code: 256)
        self._align = int(options.get("alloc_align", layout.get("alloc_align", UNIT))) // UNIT
        self.tree = ArtTree(root, mns, self.alloc, leaf_key=read_leaf_key_at(KEY),
                            full_nodes=bool(options.get("full_nodes", layout.get("full_nodes", False))),
                            align_units=self._align)
        self.retry_ns = self.tree.retry_ns
        # a GET's first READ: the size of the last leaf this client read or wrote (SMART's leaves
        # have one size; here values vary, and a longer leaf costs a second READ)
        self.read_bytes = UNIT
        # modelled CPU: the profile's [software] prices (nodes/systems/lib/cpu_costs.py)
        self.costs = SoftwareCosts(fabric.profile)
        self._op_ns = self.costs.op_ns
        self.gets = self.inserts = self.updates = self.deletes = self.scans = 0
        self.stale_restarts = self.read_handover = self.write_handover = 0
        self.in_place_updates = self.out_of_place_updates = self.lock_retries = self.decision_retries = 0
        self.chain_hops = self.entry_helps = self.torn_reads = self.short_reads = self.leaves_written = 0

    def statistics(self) -> SmartArtStats:
        a = self.tree.statistics()
        c = self.cache
        return SmartArtStats(
            self.gets, self.inserts, self.updates, self.deletes, self.scans,
            c.hits if c else 0, c.misses if c else 0, c.invalidations if c else 0, self.stale_restarts,
            self.read_handover, self.write_handover, self.in_place_updates, self.out_of_place_updates,
            self.lock_retries, self.decision_retries, self.chain_hops, self.entry_helps, self.torn_reads,
            self.short_reads, self.leaves_written, a.node_reads, a.upgrades, a.leaf_splits, a.prefix_splits,
            a.cas_failures, a.restarts, self.alloc.chunks,
            self.shared_cache.bytes_used if self.shared_cache is not None else 0, self.alloc.used_bytes,
            int(self.layout.get("bulk_bytes", 0)))

    # -- leaves ------------------------------------------------------------------------------------
    def _key(self, key) -> bytes:
        key = bytes(key)
        if len(key) != KEY_BYTES:
            raise KeySizeError(f"SMART-ART keys are exactly {KEY_BYTES} bytes; got {len(key)}")
        return key

    def _value(self, value) -> bytes:
        value = bytes(value)
        if len(value) > MAX_VALUE:
            raise ValueTooLarge(f"SMART-ART values are at most {MAX_VALUE} bytes; got {len(value)}")
        return value

    def parse_leaf(self, addr: int, raw: bytes):
        """A Leaf from a READ of its first ``len(raw)`` bytes; "short" if the leaf is longer,
        None if the checksum fails (a READ torn by an in-place WRITE)."""
        _, status, csum, key, vlen, units = LEAF_HEAD.unpack_from(raw, 0)
        end = VALUE + vlen
        if end > len(raw):
            return "short", units
        value = raw[VALUE:end]
        if checksum(key, vlen, units, value) != csum and self.fault != "skip-checksum":
            return None, units
        return Leaf(addr, status, key, value, units), units

    def read_leaf(self, co, addr: int, mark=None, size: int = 0):
        """Generator: the Leaf at ``addr``, READ until its checksum holds. ``mark``: the local
        lock table's stamp, taken before each READ is posted (read delegation). ``size``: the
        first READ's bytes (0: the last leaf's size)."""
        size = size or self.read_bytes
        for _ in range(RETRY_LIMIT):
            stamp = mark() if mark is not None else 0
            h = co.read(addr, size)
            yield co.sync()
            leaf, units = self.parse_leaf(addr, bytes(h.data))
            if isinstance(leaf, Leaf):
                self.read_bytes = leaf.units * UNIT
                return leaf._replace(stamp=stamp) if stamp else leaf
            if leaf == "short":
                self.short_reads += 1
                size = units * UNIT
            else:
                self.torn_reads += 1
        raise SystemGaveUp(f"SMART-ART: leaf {addr:#x} stayed torn for {RETRY_LIMIT} READs")

    def new_leaf(self, co, key: bytes, value: bytes, rev_ptr: int = 0):
        """Generator: allocate a leaf for ``value`` and queue its WRITE; ``(addr, units)``."""
        units = leaf_units(len(value))
        node, off = yield from self.alloc.alloc(co, slot_units(units, self._align))
        addr = gaddr(node, off)
        co.write(addr, leaf_image(key, value, units, rev_ptr))
        self.leaves_written += 1
        self.read_bytes = units * UNIT
        return addr, units

    def _unlinked(self, leaf_addr: int, units: int) -> None:
        """The leaf left its key's chain: out of ``memory_bytes``, never reused."""
        self.alloc.retire(gaddr_node(leaf_addr), gaddr_offset(leaf_addr), slot_units(units, self._align))

    # -- finding a key's current leaf ------------------------------------------------------------
    def find(self, co, key: bytes, mark=None):
        """Generator: ``(leaf, located)``: the key's current (live) leaf and where the walk found
        its chain's entry, or ``(None, located or None)`` if the key is absent. ``mark``: see
        ``read_leaf``."""
        fresh = self.cache is None
        for _ in range(RETRY_LIMIT):
            loc = yield from self.tree.locate(co, key, None if fresh else self.cache)
            if loc is None:
                return None, None
            leaf = yield from self.read_leaf(co, loc.leaf, mark)
            if leaf.key != key:
                if loc.cached:                     # a stale image led to another key's leaf
                    self.stale_restarts += 1
                    fresh = True
                    continue
                return None, loc
            first = True
            while leaf.status & DEAD and successor_of(leaf.status):
                nxt = successor_of(leaf.status)
                if first and not loc.cached:
                    # help the replacement: swing the entry to the successor (unsignaled)
                    co.cas(loc.entry_addr, loc.word, self._entry_to(nxt, loc.word))
                    co.post()
                    self.entry_helps += 1
                first = False
                self.chain_hops += 1
                leaf = yield from self.read_leaf(co, nxt, mark)
            if leaf.status & DEAD:                 # deleted
                if loc.cached:                     # an insert may have started a new chain since
                    self.stale_restarts += 1
                    fresh = True
                    continue
                return None, loc
            if not first and loc.cached:
                # the cached image lags behind the chain: point it at the live end, so that this
                # node's next walks do not hop again (the image stays a stale-tolerant hint)
                self.cache.patch(key, loc.entry_addr, loc.word, self._entry_to(leaf.addr, loc.word))
            return leaf, loc
        raise SystemGaveUp(f"SMART-ART: key {key!r} could not be found in {RETRY_LIMIT} walks")

    def _cache_cost(self) -> None:
        """An operation's fixed work and, with a cache, one walk of it, priced by its size."""
        c = self.shared_cache
        self.thread.cpu(self._op_ns + (self.costs.radix_search_ns(len(c)) if c is not None else 0))

    # -- the KV interface --------------------------------------------------------------------------
    def get(self, co, key: bytes):
        key = self._key(key)
        self.gets += 1
        if self.locks is None:
            return (yield from self._get(co, key))
        return (yield from self.locks.read(key, lambda mark: self._get_stamped(co, key, mark), stats=self, marks=True))

    def _get(self, co, key: bytes):
        self._cache_cost()
        leaf, _ = yield from self.find(co, key)
        return None if leaf is None else leaf.value

    def _get_stamped(self, co, key: bytes, mark):
        """Generator: a GET leading the local lock table: ``(value, stamp)``. A live leaf's value
        is the key's value at the instant its READ took effect, so GETs that arrived before that
        READ was posted may take it; "absent" is decided across READs: stamp 0."""
        self._cache_cost()
        leaf, _ = yield from self.find(co, key, mark)
        return (None, 0) if leaf is None else (leaf.value, leaf.stamp)

    def update(self, co, key: bytes, value: bytes):
        key, value = self._key(key), self._value(value)
        self.updates += 1
        if self.locks is None:
            return (yield from self._update(co, key, lambda: value))
        return (yield from self.locks.write(key, value, lambda take: self._update(co, key, take), stats=self))

    def _update(self, co, key: bytes, take):
        self._cache_cost()
        for _ in range(RETRY_LIMIT):
            leaf, loc = yield from self.find(co, key)
            if leaf is None:
                return False
            value = take()
            if len(value) <= leaf.capacity:
                done = yield from self._update_in_place(co, leaf, key, value)
            else:
                done = yield from self._replace(co, leaf, loc, key, value)
            if done:
                return True
        raise SystemGaveUp(f"SMART-ART: update of key {key!r} did not settle after {RETRY_LIMIT} tries")

    def _update_in_place(self, co, leaf: Leaf, key: bytes, value: bytes):
        """Generator: lock, WRITE the body and unlock in one doorbell. False if the leaf died."""
        for _ in range(RETRY_LIMIT):
            h = co.cas(leaf.addr + STATUS, LIVE, LOCKED)
            yield co.sync()
            old = h.value
            if old == LOCKED:
                self.lock_retries += 1
                yield self.retry_ns
                continue
            if old != LIVE:
                return False                        # replaced or deleted meanwhile: find it again
            co.write(leaf.addr + CHECKSUM, leaf_body(key, value, leaf.units))
            co.cas(leaf.addr + STATUS, LOCKED, LIVE)   # same QP: lands after the WRITE
            yield co.sync()
            self.in_place_updates += 1
            return True
        raise SystemGaveUp(f"SMART-ART: leaf {leaf.addr:#x} stayed locked for {RETRY_LIMIT} tries")

    def _decide(self, co, leaf: Leaf, status: int):
        """Generator: CAS the live leaf's status to ``status`` (dead), waiting while it is locked.
        True once decided; False if it was already dead (another client decided first)."""
        for _ in range(RETRY_LIMIT):
            h = co.cas(leaf.addr + STATUS, LIVE, status)
            yield co.sync()
            old = h.value
            if old == LIVE:
                return True
            self.decision_retries += 1
            if old != LOCKED:
                return False
            yield self.retry_ns
        raise SystemGaveUp(f"SMART-ART: leaf {leaf.addr:#x} stayed locked for {RETRY_LIMIT} tries")

    def _replace(self, co, leaf: Leaf, loc, key: bytes, value: bytes):
        """Generator: the out-of-place update (see the module docstring). False if the leaf died
        first (find it again)."""
        new, units = yield from self.new_leaf(co, key, value, loc.entry_addr)
        yield co.sync()                             # whole before anyone can reach it
        failpoint("smart-art.update.leaf_written")
        if self.fault == "entry-decides":
            # the deliberate bug: the entry CAS publishes the new leaf before the old one is
            # marked dead (SMART's out-of-place order), so a reader through a stale cached image
            # can still return the old value, and an in-place writer still lock and write it
            old, want = self._entry_to(leaf.addr, loc.word), self._entry_to(new, loc.word)
            h = co.cas(loc.entry_addr, old, want)
            yield co.sync()
            if h.value != old:
                self.alloc.release(gaddr_node(new), gaddr_offset(new), slot_units(units, self._align))
                return False
            yield from self._decide(co, leaf, dead(new))     # (a delete may have decided first)
            self.out_of_place_updates += 1
            return True
        if not (yield from self._decide(co, leaf, dead(new))):
            self.alloc.release(gaddr_node(new), gaddr_offset(new), slot_units(units, self._align))
            return False
        self.out_of_place_updates += 1
        self._unlinked(leaf.addr, leaf.units)
        # swing the entry old -> new, unsignaled (readers follow the chain meanwhile); it names
        # the replaced leaf unless the walk came through older dead leaves, whose entry a walk
        # from the root swings (a stale entry address fails harmlessly: nodes are never reused)
        old, want = self._entry_to(leaf.addr, loc.word), self._entry_to(new, loc.word)
        co.cas(loc.entry_addr, old, want)
        co.post()
        if self.cache is not None:
            self.cache.patch(key, loc.entry_addr, loc.word, want)
        return True

    def _entry_to(self, leaf_addr: int, like: int) -> int:
        """The leaf entry for ``leaf_addr`` in the slot of the entry word ``like`` (its key byte)."""
        return with_partial(self.tree.leaf_entry_for(0, leaf_addr), like >> 56)

    def delete(self, co, key: bytes):
        key = self._key(key)
        self.deletes += 1
        self._cache_cost()
        for _ in range(RETRY_LIMIT):
            leaf, _ = yield from self.find(co, key)
            if leaf is None:
                return False
            if (yield from self._decide(co, leaf, dead(0))):
                self._unlinked(leaf.addr, leaf.units)
                return True
        raise SystemGaveUp(f"SMART-ART: delete of key {key!r} did not settle after {RETRY_LIMIT} tries")

    def insert(self, co, key: bytes, value: bytes):
        key, value = self._key(key), self._value(value)
        self.inserts += 1
        self._cache_cost()
        addr, units = yield from self.new_leaf(co, key, value)
        yield co.sync()                             # the leaf lands before the CAS that links it
        failpoint("smart-art.insert.leaf_written")
        cache = self.cache
        for _ in range(RETRY_LIMIT):
            res = yield from self.tree.insert(co, key, addr, cache)
            if res.inserted:
                return True
            # the key has an entry: its chain says whether the key is there
            leaf = yield from self.read_leaf(co, res.leaf)
            while leaf.status & DEAD and successor_of(leaf.status):
                self.chain_hops += 1
                leaf = yield from self.read_leaf(co, successor_of(leaf.status))
            if not leaf.status & DEAD:
                self.alloc.release(gaddr_node(addr), gaddr_offset(addr), slot_units(units, self._align))
                return False
            # deleted: a new chain starts at the entry, if it still holds what the walk saw
            want = self._entry_to(addr, res.word)
            h = co.cas(res.entry_addr, res.word, want)
            yield co.sync()
            if h.value == res.word:
                if cache is not None:
                    cache.patch(key, res.entry_addr, res.word, want)
                return True
            cache = None                            # the entry moved (split, upgrade, insert): from the root
        raise SystemGaveUp(f"SMART-ART: insert of key {key!r} did not settle after {RETRY_LIMIT} tries")

    # -- scans -------------------------------------------------------------------------------------
    def scan(self, co, start: bytes, count: int):
        """Generator: up to ``count`` live pairs with key >= ``start``, in key order.

        Why this shape (issue 40, item 4): an earlier version queued every internal node at or
        above ``start`` on its way down, so the second level READ every root child past the start
        key (about 294 verbs and 125 µs per short scan of Dolphin's Fig. 8 at 4 threads). Now a
        scan READs only nodes whose key range meets the range it returns:

        1. **descent**: the nodes on ``start``'s path, one READ per level (a node's children
           cannot be chosen before it is read). The path is read from the root, not from the
           radix cache: a cached image may lack an entry inserted since, and a scan, unlike a
           GET, would return that absence as if it were the tree's.
        2. **in key order**: the *frontier* holds, in key order, what lies right of the path:
           leaves not yet read, nodes not yet read, leaves read. Each round posts, in one
           doorbell (one ``sync``, as SMART's ``range_query`` batches a level), the shortest
           prefix of the frontier that can hold the keys still wanted: a node counts for the
           fewest entries a node of its type has (``min_entries``: a NODE_16 exists only after
           a NODE_4 filled), a leaf for one. Leaves behind a node not yet read wait for it (its
           keys come first). Sibling subtrees the range needs are thus read side by side, and
           none past the ``count``-th key except when live keys are fewer than entries (deleted
           leaves) or a node holds more keys than its type's minimum (then the nodes of that
           round after it were read for nothing, at most one round's worth).

        SMART's code takes a key range [from, to); the rack's scan contract is a start key and a
        count (nodes/systems/api.py), so the end is found by counting rather than known ahead.
        Leaves are READ, validated (checksum; a torn or short READ is read again) and followed
        along their chain exactly as a GET does, so each pair is the key's value at its READ."""
        start = self._key(start)
        self.scans += 1
        self.thread.cpu(self._op_ns)
        out: list = []
        if count <= 0:
            return out
        # frontier items, in key order: ("n", addr, type, tight) a node to READ, ("l", addr) a
        # leaf to READ, ("k", pair or None) a leaf read (None: deleted, or below start).
        # "tight": the node's prefix equals start's, so its entries below start's byte are skipped
        frontier: list = [("n", self.tree.root, NODE_256, True)]
        while frontier:
            while frontier and frontier[0][0] == "k":          # the read prefix, in key order
                pair = frontier.pop(0)[1]
                if pair is not None:
                    out.append(pair)
                    if len(out) >= count:
                        return out
            if not frontier:
                break
            if frontier[0][0] == "n" and frontier[0][3]:         # descent: the path node alone
                take = [0]
            else:
                # the READs land in the thread's ring buffer, which its other coroutines share: a
                # round keeps within a sixteenth of it (one item at least), as Dolphin's scans do
                budget = self.thread.owner.buffer_bytes // 16
                take = self._scan_round(frontier, count - len(out), self.read_bytes, budget)
            handles = []
            for i in take:
                it = frontier[i]
                handles.append(co.read(it[1], _scan_bytes(it, self.read_bytes)))
            yield co.sync()
            # copied before any further READ (a refresh, a chain hop) reuses the thread's buffer
            raws = [bytes(h.data) for h in handles]
            done = {}
            for i, raw in zip(take, raws):
                it = frontier[i]
                if it[0] == "n":
                    done[i] = yield from self._scan_node(co, it, raw, start)
                else:
                    done[i] = [("k", (yield from self._scan_leaf(co, it[1], raw, start)))]
            expanded = []
            for i, it in enumerate(frontier):
                expanded.extend(done.get(i, (it,)))
            frontier = expanded
        return out

    @staticmethod
    def _scan_round(frontier: list, need: int, leaf_bytes: int, budget: int) -> list:
        """Indices of the frontier items to READ in one doorbell: the shortest prefix whose
        entries (a read pair 1, a leaf 1, a node ``min_entries`` of its type) reach ``need``;
        leaves behind an unread node wait for it; at most ``budget`` bytes (one item at least)."""
        take, have, behind_node = [], 0, False
        for i, it in enumerate(frontier):
            if have >= need:
                break
            kind = it[0]
            if kind == "k":
                have += it[1] is not None
                continue
            if kind == "l" and behind_node:
                have += 1
                continue
            budget -= _scan_bytes(it, leaf_bytes)
            if budget < 0 and take:
                break
            take.append(i)
            if kind == "l":
                have += 1
            else:
                have += min_entries(it[2])
                behind_node = True
        return take

    def _scan_node(self, co, it, raw: bytes, start: bytes):
        """Generator: the frontier items under a node READ by a scan (refreshed while it is
        being replaced, as a walk does)."""
        img = parse_node(it[1], it[2], raw)
        self.tree.node_reads += 1
        for _ in range(RETRY_LIMIT):
            if img.live and not any(is_frozen(e) for e in img.entries):
                break
            img = yield from self.tree.refresh(co, img)
        return self._children(img, it[3], start)

    def _scan_leaf(self, co, addr: int, raw: bytes, start: bytes):
        """Generator: ``(key, value)`` of the leaf a scan READ at ``addr`` (torn or short READs
        read again, a replaced leaf's chain followed), None if deleted or below ``start``."""
        leaf, units = self.parse_leaf(addr, raw)
        if leaf == "short":
            self.short_reads += 1
            leaf = yield from self.read_leaf(co, addr, size=units * UNIT)
        elif leaf is None:
            self.torn_reads += 1
            leaf = yield from self.read_leaf(co, addr)
        while leaf.status & DEAD and successor_of(leaf.status):
            self.chain_hops += 1
            leaf = yield from self.read_leaf(co, successor_of(leaf.status))
        if leaf.status & DEAD or leaf.key < start:
            return None
        return leaf.key, leaf.value

    def _children(self, img, tight: bool, start: bytes) -> list:
        """The scan items under a node, in key order, without subtrees wholly below ``start``."""
        hd = img.header
        if tight:
            lo = hd.depth - len(hd.partial)
            mine, theirs = bytes(hd.partial), start[lo:hd.depth]
            if mine < theirs:
                return []
            tight = mine == theirs
        out = []
        sb = start[hd.depth]
        for e in sorted(img.children(), key=entry_byte):
            b = entry_byte(e)
            if tight and b < sb:
                continue
            if is_leaf_entry(e):
                out.append(("l", self.tree.target(e)))
            else:
                out.append(("n", self.tree.target(e), decode_entry(e).node_type, tight and b == sb))
        return out
