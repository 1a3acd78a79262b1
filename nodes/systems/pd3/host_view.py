"""PD3's Host View: the DPU-side set of keys believed cached on the host.

The DPU parses every client request before the host sees it and asks the Host View whether the
key is cached on the host; a "no" for a read starts a prefetch from remote memory (PD3 §5.2). It
holds the keys of the *cached* items (the small side), so a DPU's DRAM fits it, and it must answer
at the request rate (tens of Mops), which is why its lookup is the paper's optimised one.

Structure (the paper's bucketised cuckoo hash set, after fardatalab/PD3's ``host_view.hpp``):

* a shard is one numpy ``uint64`` array of ``buckets x 4`` words: a bucket is 4 slots of an 8-byte
  key, 32 bytes, two buckets per 64-byte cache line. The array may be handed in preallocated (a
  shared-memory segment standing for DPU DRAM later), which is why the set is plain words and not
  Python objects;
* an empty slot holds all ones (:data:`EMPTY`), as in the artifact, so that key cannot be stored:
  every entry point refuses it with a ``ValueError`` rather than answering "present" for an empty
  slot;
* hash: splitmix64 (``x + 0x9E3779B97F4A7C15`` then its finaliser, written here as a jitted
  kernel: :func:`nodes.systems.lib.hashing.hash64` hashes byte strings and ``mix64`` is plain
  Python, and the increment keeps key 0 off the finaliser's fixed point ``mix(0) = 0``).
  ``h1 = H(key)``; first bucket ``h1 & mask``, second ``H(h1 ^ key) & mask`` (the artifact's
  scheme: the second bucket needs a second hash, which is what the delayed lookup saves);
* insert: nothing if present; else a free slot of the first, then the second bucket; else a random
  walk of displacements (a random slot of a random one of the key's buckets; the victim goes to its
  other bucket, displacing again if that is full) up to :data:`MAX_DEPTH` = 256 moves like the
  artifact. The artifact throws when the walk fails, losing the key in hand (a victim by then);
  here the walk is *undone* in reverse and :data:`FULL` returned, so a failed insert leaves the set
  exactly as it was (no key silently dropped, no stash to search on every lookup: a lookup stays
  two buckets). The walk's slot choices come from a per-shard xorshift64* state, so a seed makes
  the table layout reproducible; ``insert_all`` makes the same inserts of a whole key set in order
  (one kernel call: a preload or a fill inserts 10^4..10^6 keys, and the layout depends on the order);
* remove clears the slot.

Batched lookup (Fig. 5): up to :data:`BATCH_MAX` = 8 keys (one packet's keys, 64 B of keys).
Every lookup returns, besides the found flags, the work it did, so a cost model can price the
Arm cores' time per step (pricing is not done here). The modes are the steps of the paper's
Fig. 4, each adding one optimisation:

==========  =====================================================================================
``BASIC``   one key at a time: both hashes, both buckets read (a libcuckoo-style find fetches the
            key's two buckets before searching), one unprefetched, serialised miss per bucket;
            scalar compare slot by slot, stopping at the match
``BATCHED`` all keys' hashes first, all their buckets prefetched together (one memory round per
            batch), then the same scalar search
``SIMD``    as ``BATCHED``, but a bucket is searched by one vector compare + movemask (one compare
            op per bucket, both buckets searched branch-free)
``DELAYED`` the paper's order: first hashes and first buckets only, compare; then the second
            hash, second bucket and its compare only for the keys not found (a second round
            only if some key missed)
==========  =====================================================================================

Counts per lookup (:class:`LookupCost`): ``lines`` buckets read (each one cache-line touch: a
32-byte bucket never straddles a line), ``hashes`` hash computations, ``compares`` compare
operations (a scalar slot compare, or one vector compare of a whole bucket), ``rounds`` memory
waves (lines issued together by prefetching count once; an unprefetched line is its own wave).
All four modes give the same answers; only these counts differ: BASIC and BATCHED differ in
rounds, BATCHED and SIMD in compares, SIMD and DELAYED in hashes, lines and compares of second
buckets (none for a key found in its first bucket). Huge pages (the step before batching in
Fig. 4) change TLB misses, which are not counted.

Shards (:class:`HostView`): the set is split over N shards (2 in PD3, one per Arm core) by the top
32 bits of ``h1`` (multiply-shift onto ``0..N-1``). A hash, not the artifact's key range
(``min_key``/``max_key`` per shard), so skewed or clustered key spaces still split evenly; the
bucket index uses the *low* bits of the same ``h1`` (at most 2^32 buckets a shard), so routing and
placement are independent, and a dispatcher that hands ``h1`` to the shard adds no hash: the
counts charge ``h1`` once, to the shard.

In-flight prefetches (:class:`InFlightPrefetches`): the Host View learns of a key read from
remote memory only when the response passes the DPU (Table 1's delayed addition), so a second
request for the key in between would prefetch it again; PD3 suppresses that by remembering the
keys with a prefetch in flight. A Python set (at most ~16 K entries: PD3's request ids are 14 bits).

Numba: the inner loops (bucket search, batched find, insert with displacement, remove) are small
``@njit(cache=True)`` kernels taking the arrays as arguments; argument checks, routing and
statistics are plain Python.
"""

from __future__ import annotations

from enum import IntEnum
from typing import NamedTuple

import numpy as np
from numba import njit

SLOTS = 4                               # keys per bucket: 4 x 8 B = 32 B, half a cache line
BATCH_MAX = 8                           # keys per batched lookup: 64 B of keys (the artifact's bound)
MAX_DEPTH = 256                         # displacements per insert before it gives up (the artifact's)
EMPTY = 0xFFFFFFFFFFFFFFFF              # an empty slot; so this key cannot be stored
MAX_BUCKETS = 1 << 32                   # bucket bits come from h1's low half, shard bits from its top

_EMPTY = np.uint64(EMPTY)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)

# insert statuses (the kernel's return values)
PRESENT = 0
INSERTED = 1
FULL = -1


class Insert(IntEnum):
    PRESENT = PRESENT
    INSERTED = INSERTED
    FULL = FULL


class Lookup(IntEnum):
    """The optimisation steps of PD3's Fig. 4 (each adds one to the previous)."""
    BASIC = 0
    BATCHED = 1
    SIMD = 2
    DELAYED = 3


class LookupCost(NamedTuple):
    lines: int          # buckets read (cache-line touches)
    hashes: int         # hash computations
    compares: int       # scalar slot compares, or vector compares of a whole bucket
    rounds: int         # memory waves (prefetched lines together count once)


class HostViewStats(NamedTuple):
    keys: int
    buckets: int
    load_factor: float
    inserts: int            # keys added
    removes: int            # keys removed
    lookups: int            # keys looked up
    hits: int               # ... found
    displacements: int      # keys moved by the inserts that succeeded
    failed_inserts: int     # inserts that returned FULL (set unchanged)
    lines_read: int
    hashes: int
    compares: int
    rounds: int


# ---------------------------------------------------------------------------------------------
# kernels

@njit(cache=True)
def _hash(x):
    """splitmix64: the golden-ratio increment, then its finaliser (full avalanche)."""
    x = x + _GOLDEN
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


@njit(cache=True)
def _second(h1, key, mask):
    return np.int64(_hash(h1 ^ key) & mask)


@njit(cache=True)
def _scan(table, b, key):
    """Scalar search of bucket ``b``: (slot or -1, slots compared)."""
    base = b * 4
    for s in range(4):
        if table[base + s] == key:
            return s, s + 1
    return -1, 4


@njit(cache=True)
def _vfind(table, b, key):
    """The SIMD search (compare all four slots, movemask, first set bit): the slot or -1."""
    base = b * 4
    m = 0
    for s in range(4):                  # branch-free, like the vector compare it stands for
        m |= np.int64(table[base + s] == key) << s
    if m == 0:
        return -1
    s = 0
    while not (m >> s) & 1:
        s += 1
    return s


@njit(cache=True)
def _free(table, b):
    base = b * 4
    for s in range(4):
        if table[base + s] == _EMPTY:
            return s
    return -1


@njit(cache=True)
def find_batched_nb(table, mask, keys, mode, found, cost):
    """Look up ``keys`` in the order of ``mode`` (a :class:`Lookup`); ``found[i]`` is set to
    whether ``keys[i]`` is present, and ``cost`` (int64[4]) is incremented by lines, hashes,
    compares, rounds. Returns the number found."""
    n = keys.shape[0]
    m = np.uint64(mask)
    lines = hashes = compares = rounds = hits = 0
    if mode == 0 or mode == 1 or mode == 2:
        b1 = np.empty(n, np.int64)
        b2 = np.empty(n, np.int64)
        for i in range(n):              # both hashes and (for the batch) both buckets up front
            h1 = _hash(keys[i])
            b1[i] = np.int64(h1 & m)
            b2[i] = _second(h1, keys[i], m)
        hashes += 2 * n
        lines += 2 * n
        rounds += 2 * n if mode == 0 else (1 if n > 0 else 0)
        for i in range(n):
            if mode == 2:
                hit = _vfind(table, b1[i], keys[i]) >= 0
                hit2 = _vfind(table, b2[i], keys[i]) >= 0
                compares += 2
                hit = hit or hit2
            else:
                s, c = _scan(table, b1[i], keys[i])
                compares += c
                hit = s >= 0
                if not hit:
                    s, c = _scan(table, b2[i], keys[i])
                    compares += c
                    hit = s >= 0
            found[i] = hit
            if hit:
                hits += 1
    else:
        b = np.empty(n, np.int64)
        h = np.empty(n, np.uint64)
        for i in range(n):              # first hashes, first buckets (prefetched together)
            h[i] = _hash(keys[i])
            b[i] = np.int64(h[i] & m)
        hashes += n
        lines += n
        rounds += 1 if n > 0 else 0
        miss = 0
        for i in range(n):
            found[i] = _vfind(table, b[i], keys[i]) >= 0
            compares += 1
            if not found[i]:
                miss += 1
        if miss > 0:                    # delayed: second hash and bucket only for the misses
            for i in range(n):
                if not found[i]:
                    b[i] = _second(h[i], keys[i], m)
            hashes += miss
            lines += miss
            rounds += 1
            for i in range(n):
                if not found[i]:
                    found[i] = _vfind(table, b[i], keys[i]) >= 0
                    compares += 1
        for i in range(n):
            if found[i]:
                hits += 1
    cost[0] += lines
    cost[1] += hashes
    cost[2] += compares
    cost[3] += rounds
    return hits


@njit(cache=True)
def _rand(rng):
    """xorshift64* step of the state in ``rng[0]``."""
    x = rng[0]
    x ^= x >> np.uint64(12)
    x ^= x << np.uint64(25)
    x ^= x >> np.uint64(27)
    rng[0] = x
    return x * np.uint64(0x2545F4914F6CDD1D)


@njit(cache=True)
def insert_nb(table, mask, key, rng, max_depth, path):
    """Insert ``key``: (status, keys displaced). On FULL the displacement walk (positions in
    ``path``, at least ``max_depth`` long) has been undone: the table is as before the call."""
    m = np.uint64(mask)
    h1 = _hash(key)
    b1 = np.int64(h1 & m)
    b2 = _second(h1, key, m)
    if _vfind(table, b1, key) >= 0 or _vfind(table, b2, key) >= 0:
        return PRESENT, 0
    s = _free(table, b1)
    if s >= 0:
        table[b1 * 4 + s] = key
        return INSERTED, 0
    s = _free(table, b2)
    if s >= 0:
        table[b2 * 4 + s] = key
        return INSERTED, 0
    cur = key
    b = b1 if _rand(rng) & np.uint64(1) else b2
    for d in range(max_depth):
        pos = b * 4 + np.int64(_rand(rng) >> np.uint64(62))
        victim = table[pos]
        table[pos] = cur
        path[d] = pos
        cur = victim
        v1 = _hash(cur)
        a = np.int64(v1 & m)
        if a == b:                      # the victim sat in its first bucket: its other is the second
            a = _second(v1, cur, m)
        s = _free(table, a)
        if s >= 0:
            table[a * 4 + s] = cur
            return INSERTED, d + 1
        b = a
    for d in range(max_depth - 1, -1, -1):
        pos = path[d]
        victim = table[pos]
        table[pos] = cur
        cur = victim
    return FULL, 0


@njit(cache=True)
def insert_all_nb(table, mask, keys, rng, max_depth, path, status):
    """:func:`insert_nb` of ``keys`` in order (``status[i]``: that of ``keys[i]``): (inserted, keys
    displaced by them, failed). The same walk, so the same table and ``rng`` as one call per key."""
    inserted = displaced = failed = 0
    for i in range(keys.shape[0]):
        st, moved = insert_nb(table, mask, keys[i], rng, max_depth, path)
        status[i] = st
        if st == INSERTED:
            inserted += 1
            displaced += moved
        elif st == FULL:
            failed += 1
    return inserted, displaced, failed


@njit(cache=True)
def remove_nb(table, mask, key):
    """Clear ``key``'s slot: whether it was present."""
    m = np.uint64(mask)
    h1 = _hash(key)
    b = np.int64(h1 & m)
    s = _vfind(table, b, key)
    if s < 0:
        b = _second(h1, key, m)
        s = _vfind(table, b, key)
        if s < 0:
            return False
    table[b * 4 + s] = _EMPTY
    return True


@njit(cache=True)
def route_nb(keys, n_shards, out):
    """The shard of each key: the top 32 bits of h1, multiply-shifted onto 0..n_shards-1."""
    for i in range(keys.shape[0]):
        out[i] = np.int64(((_hash(keys[i]) >> np.uint64(32)) * np.uint64(n_shards)) >> np.uint64(32))


# ---------------------------------------------------------------------------------------------
# Python side

def _key(key) -> np.uint64:
    k = int(key)
    if not 0 <= k < EMPTY:
        if k == EMPTY:
            raise ValueError("key 0xffffffffffffffff is the Host View's empty-slot marker and cannot be stored or looked up")
        raise ValueError(f"Host View key {k} is not an unsigned 64-bit integer")
    return np.uint64(k)


def _keys(keys) -> np.ndarray:
    if isinstance(keys, np.ndarray) and keys.dtype == np.uint64:
        arr = np.ascontiguousarray(keys.ravel())
    else:
        arr = np.array([_key(k) for k in keys], dtype=np.uint64)
    if (arr == _EMPTY).any():
        raise ValueError("key 0xffffffffffffffff is the Host View's empty-slot marker and cannot be stored or looked up")
    return arr


class CuckooSet:
    """One shard: a bucketised cuckoo set of 8-byte keys in one ``uint64`` array.

    ``n_buckets`` must be a power of two (at most 2^32). ``table``, if given, is the storage
    (C-contiguous ``uint64``, ``n_buckets * 4`` words, e.g. a view of a shared-memory segment);
    ``clear`` fills it with :data:`EMPTY`, otherwise its content is taken as the set (the key
    count is recounted; the counters start at zero). ``seed`` seeds the displacement walk."""

    def __init__(self, n_buckets: int, *, table: np.ndarray | None = None, clear: bool = True,
                 seed: int = 0, max_depth: int = MAX_DEPTH):
        if (not isinstance(n_buckets, (int, np.integer)) or n_buckets < 1
                or n_buckets & (n_buckets - 1) or n_buckets > MAX_BUCKETS):
            raise ValueError(f"Host View capacity must be a power-of-two number of buckets "
                             f"(1 .. 2^32), got {n_buckets!r}")
        if max_depth < 1:
            raise ValueError(f"Host View max_depth must be at least 1, got {max_depth}")
        n_buckets = int(n_buckets)
        if table is None:
            table = np.full(n_buckets * SLOTS, _EMPTY, dtype=np.uint64)
        else:
            if (not isinstance(table, np.ndarray) or table.dtype != np.uint64 or table.ndim != 1
                    or not table.flags.c_contiguous or not table.flags.writeable
                    or table.size != n_buckets * SLOTS):
                raise ValueError(f"Host View table must be a writeable C-contiguous 1-D uint64 "
                                 f"array of {n_buckets * SLOTS} words ({n_buckets} buckets x {SLOTS})")
            if clear:
                table.fill(_EMPTY)
        self.table = table
        self.n_buckets = n_buckets
        self.mask = n_buckets - 1
        self.max_depth = int(max_depth)
        self.keys = int(np.count_nonzero(table != _EMPTY))
        # xorshift's state must not be zero; hashing the seed scatters nearby seeds
        self._rng = np.array([int(_hash(np.uint64(seed & EMPTY))) | 1], dtype=np.uint64)
        self._path = np.empty(self.max_depth, dtype=np.int64)
        self._cost = np.zeros(4, dtype=np.int64)
        self._found = np.empty(BATCH_MAX, dtype=np.bool_)
        self.inserts = self.removes = self.lookups = self.hits = 0
        self.displacements = self.failed_inserts = 0

    @property
    def capacity(self) -> int:
        return self.n_buckets * SLOTS

    def __len__(self) -> int:
        return self.keys

    def __contains__(self, key) -> bool:
        return self.contains(key)

    def insert(self, key) -> Insert:
        """Add ``key``: INSERTED, PRESENT (already there), or FULL (no room within ``max_depth``
        displacements; the set is unchanged)."""
        status, moved = insert_nb(self.table, self.mask, _key(key), self._rng, self.max_depth, self._path)
        if status == INSERTED:
            self.keys += 1
            self.inserts += 1
            self.displacements += moved
        elif status == FULL:
            self.failed_inserts += 1
        return Insert(status)

    def insert_all(self, keys) -> np.ndarray:
        """:meth:`insert` of each of ``keys`` in order, in one kernel call: their statuses (an
        :class:`Insert` value per key, as ``int8``), the same set and counters."""
        arr = _keys(keys)
        status = np.empty(arr.size, dtype=np.int8)
        inserted, displaced, failed = insert_all_nb(self.table, self.mask, arr, self._rng, self.max_depth,
                                                    self._path, status)
        self.keys += inserted
        self.inserts += inserted
        self.displacements += displaced
        self.failed_inserts += failed
        return status

    def remove(self, key) -> bool:
        """Remove ``key``: whether it was present."""
        if remove_nb(self.table, self.mask, _key(key)):
            self.keys -= 1
            self.removes += 1
            return True
        return False

    def contains(self, key) -> bool:
        """One key, looked up as a batch of one in the paper's (DELAYED) order; counted."""
        return bool(self.find_batched(np.array([_key(key)], dtype=np.uint64))[0][0])

    def find_batched(self, keys, mode: Lookup = Lookup.DELAYED) -> tuple[np.ndarray, LookupCost]:
        """Look up at most :data:`BATCH_MAX` keys: (found flags in ``keys``' order, the work done)."""
        arr = _keys(keys)
        if arr.size > BATCH_MAX:
            raise ValueError(f"a Host View batch is at most {BATCH_MAX} keys (one packet's), got {arr.size}")
        mode = Lookup(mode)
        found = np.empty(arr.size, dtype=np.bool_)
        cost = np.zeros(4, dtype=np.int64)
        hits = find_batched_nb(self.table, self.mask, arr, int(mode), found, cost)
        self._cost += cost
        self.lookups += arr.size
        self.hits += hits
        return found, LookupCost(*(int(c) for c in cost))

    def statistics(self) -> HostViewStats:
        c = self._cost
        return HostViewStats(self.keys, self.n_buckets, self.keys / self.capacity, self.inserts,
                             self.removes, self.lookups, self.hits, self.displacements,
                             self.failed_inserts, int(c[0]), int(c[1]), int(c[2]), int(c[3]))


class InFlightPrefetches:
    """Keys with a prefetch in flight, so a key the Host View does not hold yet (its read response
    has not passed the DPU) is not prefetched twice."""

    def __init__(self):
        self._keys: set[int] = set()
        self.begun = 0
        self.suppressed = 0

    def __len__(self) -> int:
        return len(self._keys)

    def __contains__(self, key) -> bool:
        return int(key) in self._keys

    def begin_prefetch(self, key) -> bool:
        """Record a prefetch of ``key``: False (and nothing recorded) if one is already in flight."""
        k = int(key)
        if k in self._keys:
            self.suppressed += 1
            return False
        self._keys.add(k)
        self.begun += 1
        return True

    def end_prefetch(self, key) -> bool:
        """The prefetch of ``key`` completed: whether one was in flight."""
        k = int(key)
        if k in self._keys:
            self._keys.remove(k)
            return True
        return False


class HostView:
    """The Host View: ``n_shards`` :class:`CuckooSet` shards of ``buckets_per_shard`` buckets
    each (PD3: 2, one per Arm core), keys routed by hash, and the in-flight prefetch keys.

    ``tables``, if given, is one preallocated array per shard (see :class:`CuckooSet`)."""

    def __init__(self, buckets_per_shard: int, n_shards: int = 2, *, tables=None, clear: bool = True,
                 seed: int = 0, max_depth: int = MAX_DEPTH):
        if not isinstance(n_shards, (int, np.integer)) or not 1 <= n_shards <= 1 << 16:
            raise ValueError(f"Host View shard count must be 1 .. 65536, got {n_shards!r}")
        if tables is not None and len(tables) != n_shards:
            raise ValueError(f"Host View needs one table per shard: {n_shards} shards, {len(tables)} tables")
        self.n_shards = int(n_shards)
        self.shards = [CuckooSet(buckets_per_shard, table=None if tables is None else tables[i],
                                 clear=clear, seed=seed * 1_000_003 + i, max_depth=max_depth)
                       for i in range(self.n_shards)]
        self.in_flight = InFlightPrefetches()

    def __len__(self) -> int:
        return sum(s.keys for s in self.shards)

    def __contains__(self, key) -> bool:
        return self.contains(key)

    def route(self, keys) -> np.ndarray:
        """The shard index of each key."""
        arr = _keys(keys)
        out = np.empty(arr.size, dtype=np.int64)
        route_nb(arr, self.n_shards, out)
        return out

    def shard_of(self, key) -> CuckooSet:
        return self.shards[int(self.route([key])[0])]

    def insert(self, key) -> Insert:
        return self.shard_of(key).insert(key)

    def insert_all(self, keys) -> np.ndarray:
        """:meth:`insert` of each of ``keys`` in order: their statuses (see
        :meth:`CuckooSet.insert_all`). Routed at once; each shard takes its keys in their order,
        which is all the order that matters (a shard's walk touches only its own table and state)."""
        arr = _keys(keys)
        status = np.empty(arr.size, dtype=np.int8)
        where = self.route(arr) if self.n_shards > 1 else np.zeros(arr.size, dtype=np.int64)
        for i, shard in enumerate(self.shards):
            sel = np.flatnonzero(where == i)
            if sel.size:
                status[sel] = shard.insert_all(arr[sel])
        return status

    def remove(self, key) -> bool:
        return self.shard_of(key).remove(key)

    def contains(self, key) -> bool:
        return self.shard_of(key).contains(key)

    def find_batched(self, keys, mode: Lookup = Lookup.DELAYED) -> tuple[np.ndarray, tuple[LookupCost, ...]]:
        """One packet's keys (at most :data:`BATCH_MAX`), each shard looking up its own as one
        batch: (found flags in ``keys``' order, the work of each shard, in shard order; a shard
        with no key of the batch did none)."""
        arr = _keys(keys)
        if arr.size > BATCH_MAX:
            raise ValueError(f"a Host View batch is at most {BATCH_MAX} keys (one packet's), got {arr.size}")
        found = np.zeros(arr.size, dtype=np.bool_)
        costs = []
        where = self.route(arr) if self.n_shards > 1 else np.zeros(arr.size, dtype=np.int64)
        for i, shard in enumerate(self.shards):
            sel = np.flatnonzero(where == i)
            if sel.size == 0:
                costs.append(LookupCost(0, 0, 0, 0))
                continue
            f, c = shard.find_batched(arr[sel], mode)
            found[sel] = f
            costs.append(c)
        return found, tuple(costs)

    def begin_prefetch(self, key) -> bool:
        return self.in_flight.begin_prefetch(key)

    def end_prefetch(self, key) -> bool:
        return self.in_flight.end_prefetch(key)

    def statistics(self) -> HostViewStats:
        """The shards' statistics summed (load factor over all shards)."""
        per = [s.statistics() for s in self.shards]
        keys = sum(p.keys for p in per)
        buckets = sum(p.buckets for p in per)
        sums = [sum(p[i] for p in per) for i in range(3, len(HostViewStats._fields))]
        return HostViewStats(keys, buckets, keys / (buckets * SLOTS), *sums)

    def shard_statistics(self) -> tuple[HostViewStats, ...]:
        return tuple(s.statistics() for s in self.shards)
