"""DPA-Store's hot-entry cache: one traverser thread's Bloom filter and bucket table, pure logic.

DPA-Store (OSDI'26, section 3.1.2) lets every DPA traverser thread keep a small cache
of hot KV pairs so that a hit skips the tree walk and the host DMAs (the paper's Fig. 11: up to
+30 % GET throughput under skew; Fig. 14: "cached requests trigger only a single memory
access"). This module is that cache's data structure and nothing else: no timing, no threads,
no packets. It counts the DPA-memory lines each operation touches and says where they are
(:meth:`HotCache.bucket_addr`), so the timed traverser can price them with its cache model.

What the paper states (implemented as stated)
    * Per traverser thread: (i) a 3-way Bloom filter of :data:`BLOOM_BITS` = 256 bits, the
      rest of the thread-context line, which also holds the RX/TX queue metadata and so stays
      in the thread's L1: testing it costs no memory access; (ii) a hash table of buckets, each
      one 64-byte line of 4 KV pairs (4 x (8 B key + 8 B value)). Capacity 96 entries per
      thread (176 threads: 16,896 entries), hence :data:`BUCKETS` = 24.
    * The client computes the cache metadata and sends it in the request: the three Bloom bit
      indices and the bucket index (:func:`cache_hints`), so the DPA does no hashing on the
      request path. A request without metadata (``hints=None``) bypasses the cache: a client
      that redirects GETs to other threads (to relieve an overloaded one) strips it, since
      another thread's cache would go incoherent.
    * The cache stores keys and values: the key detects hash collisions within a bucket.
    * Entries are chosen at random, without tracking accesses (no counters, no extra lines).
    * UPDATE and DELETE invalidate the key's entry.

Hints (the paper is silent on the hash; chosen here)
    ``h = fmix64(key ^ CACHE_SALT)``, MurmurHash3's 64-bit finaliser (constants
    0xFF51AFD7ED558CCD, 0xC4CEB9FE1A85EC53, shifts 33) of the key XOR a fixed salt. The three
    Bloom bit indices are bytes 0, 1 and 2 of ``h``; the bucket is bits 32-63 reduced onto
    0..23 by multiply-shift (``(h >> 32) * 24 >> 32``, no division). It must be independent of
    the hash that picks the thread: a client sends key k to thread ``t(k) % threads``, so all
    keys of one thread share the residue of that hash; had the bucket been a field of the same
    hash, one thread's keys would crowd a few buckets (with 176 = 16 x 11 threads, the low 4
    bits would be equal for all of them). The salt makes ``h`` an unrelated function even when
    the thread hash is fmix64 itself; the tests check the spread within one thread for both
    :func:`..lib.hashing.mix64` (splitmix64's finaliser, the rack's integer key hash) and
    unsalted fmix64 as the thread hash. Every client must use this same function: the entry a
    GET admitted under some hints is only found (and invalidated) under the same hints.

Table (DPA memory; the caller may hand in a view of a shared-memory segment)
    ``uint64[24, 8]``: bucket b is line b of the array (``base + 64 b``), words ``2i`` and
    ``2i + 1`` the key and value of slot i. A slot is free when its value word is
    :data:`.patch.EMPTY` (2**64 - 1), the store's own "not a value" word: stored values are at
    most :data:`.patch.MAX_VALUE`, so every 64-bit key stays cacheable. The Bloom filter is a
    ``uint64[4]``. Constructing a :class:`HotCache` clears both (a traverser starts cold).

One owner, no atomics
    Requests for a key always reach the same thread (the client picks it by the key's hash;
    redirected GETs carry no hints and so never touch the cache), and a traverser serves one
    request at a time (assumed: the paper's traversers take requests off their own RX queue),
    so the cache has exactly one reader and writer: plain loads and stores, no atomics, no
    locks. This is also why it is consistent: an UPDATE or DELETE of key k runs
    on k's owner thread, so it is ordered with every GET that could admit or return k.

Admission rule (the paper says only "randomly selecting"; chosen here)
    A GET that carried hints, missed the cache and found the key in the tree (insert buffer or
    leaf) calls :meth:`HotCache.admit`, which admits it with probability ``admit``
    (:data:`ADMIT_PROBABILITY` = 1/8 by default, from the thread's own seeded xorshift64*). An
    admitted key goes to the first free slot of its bucket, else replaces a slot drawn at random
    (the eviction); a key already in the bucket has its value overwritten in place. The
    probability does not change the steady-state hit ratio of random replacement (every
    transition rate of a bucket's contents scales by the same factor), it sets how many bucket
    writes a miss costs (``admit`` lines on average) and how soon the cache fills (about
    ``96 / admit`` misses). 1/8 keeps the write traffic of a skewed, mostly-missing stream at one
    line per eight misses and fills a thread's cache within ~800 misses (~140k misses over
    176 threads). [inferred, not measured on hardware]

Writes invalidate, never write the new value through
    UPDATE and DELETE call :meth:`HotCache.invalidate`; so should an INSERT that may overwrite
    an existing key. Writes go to the leaf's insert buffer, and when that buffer is full the
    traverser re-enqueues the request and retries later: a value written into the cache at that
    point would be served by GETs before the write exists in the store (a RANGE, which never
    uses the cache, would still see the old one), and if re-enqueued writes of one key were
    retried in another order the cache could keep a value the store does not end with.
    Invalidating is always safe: call it on every attempt, the retried ones too; a GET in between
    can only re-admit the value the store still holds, which the retry invalidates again.
    Writing the value through after a *successful* append would be safe as well (same owner
    thread; the same bucket line the invalidation touches; it would spare the next GET a miss),
    but the paper invalidates, so only invalidation is offered.
    Stitching needs no invalidation: it moves entries, it never changes a key's value.

Stale Bloom bits (the paper is silent; chosen here)
    A standard Bloom filter cannot delete: bits of invalidated or evicted entries stay set.
    The cache counts removals (invalidated entries + evictions) and after every
    ``rebuild_after`` of them (:data:`REBUILD_AFTER` = 32 by default) rebuilds the filter from
    the stored entries: clear the 256 bits, read the 24 bucket lines, recompute each stored key's
    three bits with the same hash the clients use (there is no room in a full bucket line to keep
    them; a side array would cost a line write per admission) and set them. Cost: the 24 bucket
    lines (:data:`REBUILD_LINES`, one 1.5 KiB sequential read the traverser can prefetch) plus at
    most 96 fmix64 evaluations (~15 RV64 integer instructions each, ~1.5k cycles) on the thread
    that caused the 32nd removal; it is charged to that call's line count. Why 32: at 96 entries
    each stale entry adds ~0.005 to the false-positive rate (d/dn of the formula below), i.e. a
    bucket line on 0.5 % of the Bloom-negative lookups; with k stale on average k/2, the excess is
    ~0.0026 k lines per miss against 24 / k lines of rebuild per removal, and with 1/8 of the
    misses admitting (and, when full, evicting) the sum is smallest near k = 34. A one-thread
    simulation agrees (GET only, Zipf 0.99 over the ~1,100 keys of ranks 1..200k that
    ``mix64 % 176`` sends to one thread, 100k requests, second half measured; cache lines per
    request, hits included)::

        admit   k=8     16     32     64     never
        1           2.27   1.72   1.45   1.35   1.38
        1/4         1.12   1.00   0.95   0.95   1.09
        1/8         0.94   0.89   0.87   0.89   1.05

    and a hit ratio of 0.62 for every admission probability (as argued above). The invariant that
    makes the Bloom-negative shortcut of :meth:`HotCache.invalidate` safe holds throughout:
    every stored entry's bits are set (admission sets them, a rebuild sets them again). It
    needs ``rehash`` to be the function the clients use.

False-positive rate (the paper's figure is elided)
    With 96 entries and 3 of 256 bits each, theory gives ``(1 - e^(-3*96/256))^3 = 0.308``
    (exactly, ``(1 - (255/256)^288)^3 = 0.309``): with this little room almost a third of the
    lookups for uncached keys read the bucket line for nothing. Measured over 100 full caches
    (freshly rebuilt) and 20,000 uncached keys each: 0.310 (sd 0.026 from cache to cache); the
    test (test_measured_false_positive_rate_matches_theory, 20 caches) asserts +/- 0.03. Without
    rebuilds the rate only grows with churn: 1.00 after 1,000 admissions into a full cache (a
    quarter of them invalidated again), against 0.36 on average (0.27-0.45 over the rebuild
    cycle) with the default rule, 10 runs each.

Zipf coverage
    :func:`zipf_coverage` is the share of requests that go to the ``capacity`` most popular of
    ``n_keys`` Zipf-distributed keys, the paper's upper bound ("16,896 entries over 200 M keys
    cover more than 50 % of all requests"; its Zipf parameter is elided: YCSB's 0.99 gives
    0.499, 1.0 gives 0.524). A random cache holds fewer of the hottest keys than that: its hit
    ratio is lower, and so is the ideal one here, since each thread caches only its own keys,
    four per bucket.
"""

from __future__ import annotations

import math
from typing import Callable, NamedTuple, Optional

import numpy as np

from .patch import EMPTY, MAX_VALUE
from .pla import LINE_BYTES

# --- geometry ----------------------------------------------------------------------------------

BLOOM_BITS = 256  # the rest of the thread-context line (RX/TX metadata in the other 32 B)
BLOOM_WORDS = BLOOM_BITS // 64
BLOOM_HASHES = 3  # "three-way Bloom filter"
SLOTS_PER_BUCKET = 4  # 4 x (8 B key + 8 B value) = one 64-byte line
BUCKET_WORDS = 2 * SLOTS_PER_BUCKET
CAPACITY = 96  # entries per traverser thread
BUCKETS = CAPACITY // SLOTS_PER_BUCKET  # 24
TABLE_BYTES = BUCKETS * LINE_BYTES  # 1536 B of DPA memory per thread
TRAVERSERS = 176  # the paper's thread count: 176 x 96 = 16,896 cached entries in all

REBUILD_LINES = BUCKETS  # a Bloom rebuild reads every bucket line

ADMIT_PROBABILITY = 1 / 8
REBUILD_AFTER = 32  # removals (invalidations + evictions) between two Bloom rebuilds

# --- the client's hash -------------------------------------------------------------------------

_M64 = (1 << 64) - 1
CACHE_SALT = 0xD6E8FEB86659FD93  # XORed into the key first: unrelated to the thread hash
_FMIX_C1 = 0xFF51AFD7ED558CCD  # MurmurHash3 fmix64
_FMIX_C2 = 0xC4CEB9FE1A85EC53


def fmix64(x: int) -> int:
    """MurmurHash3's 64-bit finaliser (a bijection with full avalanche)."""
    x ^= x >> 33
    x = (x * _FMIX_C1) & _M64
    x ^= x >> 33
    x = (x * _FMIX_C2) & _M64
    return x ^ (x >> 33)


class CacheHints(NamedTuple):
    """What the client puts in a request: three Bloom bit indices (0..255) and a bucket (0..23)."""

    bloom: tuple  # three ints in [0, BLOOM_BITS)
    bucket: int  # in [0, BUCKETS)


def _check_key(key) -> int:
    if isinstance(key, bool) or not isinstance(key, (int, np.integer)) or not 0 <= key <= _M64:
        raise ValueError(f"key must be an integer in [0, 2**64), got {key!r}")
    return int(key)


def cache_hints(key: int) -> CacheHints:
    """The hints every client computes for ``key`` (see the module docstring for the fields)."""
    h = fmix64(_check_key(key) ^ CACHE_SALT)
    return CacheHints(
        (h & 0xFF, (h >> 8) & 0xFF, (h >> 16) & 0xFF), ((h >> 32) * BUCKETS) >> 32
    )


def _check_hints(hints) -> tuple[tuple, int]:
    """(bits, bucket) of well-formed hints, or one ValueError naming what is wrong."""
    if not isinstance(hints, tuple) or len(hints) != 2:
        raise ValueError(f"hints must be CacheHints(bloom, bucket) or None, got {hints!r}")
    bits, bucket = hints
    if not isinstance(bits, (tuple, list)) or len(bits) != BLOOM_HASHES:
        raise ValueError(f"hints need {BLOOM_HASHES} Bloom bit indices, got {bits!r}")
    for b in bits:
        if isinstance(b, bool) or not isinstance(b, (int, np.integer)) or not 0 <= b < BLOOM_BITS:
            raise ValueError(f"Bloom bit indices must be integers in [0, {BLOOM_BITS}), got {b!r}")
    if isinstance(bucket, bool) or not isinstance(bucket, (int, np.integer)):
        raise ValueError(f"bucket must be an integer in [0, {BUCKETS}), got {bucket!r}")
    if not 0 <= bucket < BUCKETS:
        raise ValueError(f"bucket must be an integer in [0, {BUCKETS}), got {bucket!r}")
    return tuple(int(b) for b in bits), int(bucket)


# --- results -----------------------------------------------------------------------------------


class Probe(NamedTuple):
    """A lookup's outcome. ``lines``: DPA-memory lines read, 0 when the Bloom filter (in L1)
    says no or the request bypassed the cache, 1 when it says maybe (the bucket line)."""

    hit: bool
    value: Optional[int]
    bloom_negative: bool
    lines: int


_BYPASS = Probe(False, None, False, 0)
_NEGATIVE = Probe(False, None, True, 0)


class HotCacheStats(NamedTuple):
    lookups: int  # lookups that carried hints
    hits: int
    bloom_negatives: int  # lookups answered by the filter alone (0 lines)
    false_positives: int  # filter said maybe, the bucket did not hold the key
    admissions: int  # entries written (new entries and in-place refreshes)
    evictions: int  # entries replaced by an admission into a full bucket
    invalidations: int  # entries removed by writes
    bloom_rebuilds: int
    bypasses: int  # lookups without hints (redirected GETs)
    entries: int  # entries held now


# --- the cache ---------------------------------------------------------------------------------


def _xorshift_seed(seed: int) -> int:
    """splitmix64 of the seed: a nonzero xorshift state that differs for nearby seeds."""
    z = (int(seed) + 0x9E3779B97F4A7C15) & _M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _M64
    return (z ^ (z >> 31)) or 1


class HotCache:
    """One traverser thread's hot-entry cache (single owner: no atomics, see the module doc).

    ``base``: DPA-memory offset of the bucket array (24 x 64 B), for :meth:`bucket_addr`.
    ``table``/``bloom``: optional ``uint64[24, 8]`` / ``uint64[4]`` arrays to use (e.g. views of a
    shared-memory segment); cleared here. ``rehash``: the clients' hint function, which a Bloom
    rebuild recomputes the stored keys' bits with (a test that makes hints by hand passes its
    own). ``rebuild_after=None`` never rebuilds (to measure what stale bits cost)."""

    def __init__(
        self,
        seed: int = 0,
        *,
        base: int = 0,
        table: Optional[np.ndarray] = None,
        bloom: Optional[np.ndarray] = None,
        admit: float = ADMIT_PROBABILITY,
        rebuild_after: Optional[int] = REBUILD_AFTER,
        rehash: Callable[[int], CacheHints] = cache_hints,
    ):
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
            raise ValueError(f"seed must be an integer, got {seed!r}")
        if isinstance(base, bool) or not isinstance(base, (int, np.integer)) or base < 0:
            raise ValueError(f"base must be a non-negative integer, got {base!r}")
        if base % LINE_BYTES:
            raise ValueError(f"base must be line-aligned ({LINE_BYTES} B), got {base}")
        if isinstance(admit, bool) or not isinstance(admit, (int, float)) or not 0 <= admit <= 1:
            raise ValueError(f"admit must be a probability in [0, 1], got {admit!r}")
        if rebuild_after is not None and (
            isinstance(rebuild_after, bool)
            or not isinstance(rebuild_after, (int, np.integer))
            or rebuild_after < 1
        ):
            raise ValueError(
                f"rebuild_after must be an integer >= 1 or None, got {rebuild_after!r}"
            )
        if not callable(rehash):
            raise ValueError(f"rehash must be a function key -> CacheHints, got {rehash!r}")
        self.table = self._check_array(table, (BUCKETS, BUCKET_WORDS), "table")
        self.bloom = self._check_array(bloom, (BLOOM_WORDS,), "bloom")
        self.table[:, 1::2] = EMPTY  # every slot free
        self.table[:, 0::2] = 0
        self.bloom[:] = 0
        self.base = int(base)
        self.admit_probability = float(admit)
        # admit iff the top 53 random bits fall below this (admit=1: always, 0: never)
        self._admit_below = int(round(self.admit_probability * (1 << 53)))
        self.rebuild_after = None if rebuild_after is None else int(rebuild_after)
        self.rehash = rehash
        self._rng = _xorshift_seed(seed)
        self._removals = 0  # since the last rebuild
        self._entries = 0
        self._c = dict.fromkeys(HotCacheStats._fields[:-1], 0)

    @staticmethod
    def _check_array(arr, shape, what) -> np.ndarray:
        if arr is None:
            return np.zeros(shape, dtype=np.uint64)
        if not (
            isinstance(arr, np.ndarray)
            and arr.dtype == np.uint64
            and arr.shape == shape
            and arr.flags.c_contiguous
            and arr.flags.writeable
        ):
            desc = f"{arr.dtype} {arr.shape}" if isinstance(arr, np.ndarray) else type(arr).__name__
            raise ValueError(
                f"{what} must be a writable C-contiguous uint64{list(shape)}, got {desc}"
            )
        return arr

    # -- the thread's random numbers (xorshift64*: three shifts and a multiply on the DPA) ----

    def _random(self) -> int:
        x = self._rng
        x ^= x >> 12
        x ^= (x << 25) & _M64
        x ^= x >> 27
        self._rng = x
        return (x * 0x2545F4914F6CDD1D) & _M64

    # -- Bloom filter (thread-context line, L1) --------------------------------------------------

    def _bloom_maybe(self, bits) -> bool:
        bl = self.bloom
        return all((int(bl[b >> 6]) >> (b & 63)) & 1 for b in bits)

    def _bloom_set(self, bits) -> None:
        bl = self.bloom
        for b in bits:
            bl[b >> 6] |= np.uint64(1 << (b & 63))

    def rebuild(self) -> int:
        """Rebuild the Bloom filter from the stored entries; returns the lines read (24).

        Called by the cache itself after every ``rebuild_after`` removals; public so that a test
        (or a traverser with nothing queued) can run it too."""
        self.bloom[:] = 0
        for bucket in range(BUCKETS):
            line = self.table[bucket]
            for i in range(SLOTS_PER_BUCKET):
                if int(line[2 * i + 1]) != EMPTY:
                    self._bloom_set(_check_hints(self.rehash(int(line[2 * i])))[0])
        self._removals = 0
        self._c["bloom_rebuilds"] += 1
        return REBUILD_LINES

    def _find(self, bucket: int, key: int) -> int:
        line = self.table[bucket]
        for i in range(SLOTS_PER_BUCKET):
            if int(line[2 * i + 1]) != EMPTY and int(line[2 * i]) == key:
                return i
        return -1

    # -- the request path --------------------------------------------------------------------

    def bucket_addr(self, hints: CacheHints) -> int:
        """DPA-memory offset of the bucket line these hints name."""
        return self.base + _check_hints(hints)[1] * LINE_BYTES

    def lookup(self, hints: Optional[CacheHints], key: int) -> Probe:
        """A GET's cache probe: Bloom test in L1, then (maybe) the bucket line."""
        key = _check_key(key)
        if hints is None:
            self._c["bypasses"] += 1
            return _BYPASS
        bits, bucket = _check_hints(hints)
        self._c["lookups"] += 1
        if not self._bloom_maybe(bits):
            self._c["bloom_negatives"] += 1
            return _NEGATIVE
        i = self._find(bucket, key)
        if i < 0:
            self._c["false_positives"] += 1
            return Probe(False, None, False, 1)
        self._c["hits"] += 1
        return Probe(True, int(self.table[bucket, 2 * i + 1]), False, 1)

    def admit(self, hints: Optional[CacheHints], key: int, value: int) -> int:
        """After a GET missed the cache and found ``key`` -> ``value`` in the tree: maybe cache it.

        Returns the DPA-memory lines touched, 0 if not admitted (declined by the draw, or no
        hints): the bucket line (1), plus :data:`REBUILD_LINES` if the eviction triggered a
        Bloom rebuild. ``value`` must be the store's current value (what the GET returns)."""
        key = _check_key(key)
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise ValueError(f"value must be an integer in [0, {MAX_VALUE}], got {value!r}")
        if not 0 <= value <= MAX_VALUE:
            raise ValueError(f"value must be an integer in [0, {MAX_VALUE}], got {value!r}")
        if hints is None:  # a redirected GET may run on a thread that does not own the key
            return 0
        bits, bucket = _check_hints(hints)
        if (self._random() >> 11) >= self._admit_below:
            return 0
        line = self.table[bucket]
        i = self._find(bucket, key)
        if i < 0:
            free = [j for j in range(SLOTS_PER_BUCKET) if int(line[2 * j + 1]) == EMPTY]
            if free:
                i = free[0]
                self._entries += 1
            else:
                i = self._random() >> 62  # a random slot of four
                self._c["evictions"] += 1
                self._removals += 1  # the rebuild waits until the new entry is stored
        line[2 * i] = np.uint64(key)
        line[2 * i + 1] = np.uint64(value)
        self._bloom_set(bits)
        self._c["admissions"] += 1
        return 1 + self._rebuild_due()

    def _rebuild_due(self) -> int:
        """The rebuild rule: after every ``rebuild_after`` removals; its lines, or 0."""
        if self.rebuild_after is not None and self._removals >= self.rebuild_after:
            return self.rebuild()
        return 0

    def invalidate(self, hints: CacheHints, key: int) -> int:
        """An UPDATE's or DELETE's invalidation of ``key``; returns the lines touched.

        0 when the Bloom filter says no (a stored entry's bits are always set), else 1 (the
        bucket line, written if the key was there), plus :data:`REBUILD_LINES` if this removal
        triggered a Bloom rebuild. Writes must carry hints: without them the key's entry could
        not be found and would go stale."""
        key = _check_key(key)
        if hints is None:
            raise ValueError("a write must carry the key's cache hints: it could not invalidate")
        bits, bucket = _check_hints(hints)
        if not self._bloom_maybe(bits):
            return 0
        i = self._find(bucket, key)
        if i < 0:
            return 1
        self.table[bucket, 2 * i] = 0
        self.table[bucket, 2 * i + 1] = EMPTY
        self._entries -= 1
        self._c["invalidations"] += 1
        self._removals += 1
        return 1 + self._rebuild_due()

    # -- inspection ---------------------------------------------------------------------------

    def bucket_contents(self, bucket: int) -> tuple:
        """The (key, value) pairs bucket ``bucket`` holds, in slot order."""
        _check_hints(((0, 0, 0), bucket))
        line = self.table[bucket]
        return tuple(
            (int(line[2 * i]), int(line[2 * i + 1]))
            for i in range(SLOTS_PER_BUCKET)
            if int(line[2 * i + 1]) != EMPTY
        )

    @property
    def entries(self) -> int:
        """Entries held now (a property, not ``__len__``: an empty cache is still truthy)."""
        return self._entries

    def statistics(self) -> HotCacheStats:
        return HotCacheStats(**self._c, entries=self._entries)


# --- Zipf coverage -----------------------------------------------------------------------------


def _harmonic(n: int, s: float, exact: int = 10_000) -> float:
    """sum_{i=1..n} i**-s: exact up to ``exact`` terms, Euler-Maclaurin for the tail."""
    m = min(n, exact)
    total = math.fsum(i ** -s for i in range(1, m + 1))
    if n > m:
        if abs(s - 1) < 1e-12:
            integral = math.log(n / m)
        else:
            integral = (n ** (1 - s) - m ** (1 - s)) / (1 - s)
        total += integral + (n ** -s - m ** -s) / 2 + s * (m ** (-s - 1) - n ** (-s - 1)) / 12
    return total


def zipf_coverage(n_keys: int, theta: float, capacity: int = TRAVERSERS * CAPACITY) -> float:
    """Share of Zipf(``theta``) requests over ``n_keys`` keys that go to the ``capacity`` most
    popular ones: an upper bound on the hit ratio of ``capacity`` cache entries."""
    if isinstance(n_keys, bool) or not isinstance(n_keys, (int, np.integer)) or n_keys < 1:
        raise ValueError(f"n_keys must be an integer >= 1, got {n_keys!r}")
    if isinstance(capacity, bool) or not isinstance(capacity, (int, np.integer)) or capacity < 0:
        raise ValueError(f"capacity must be a non-negative integer, got {capacity!r}")
    if isinstance(theta, bool) or not isinstance(theta, (int, float)) or not theta >= 0:
        raise ValueError(f"theta must be a number >= 0, got {theta!r}")
    c = min(int(capacity), int(n_keys))
    return _harmonic(c, float(theta)) / _harmonic(int(n_keys), float(theta)) if c else 0.0
