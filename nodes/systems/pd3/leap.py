"""Leap, the remote-memory prefetcher PD3 compares against (a baseline of PD3's Figs. 10-17).

Leap (Al Maruf and Chowdhury, "Effectively Prefetching Remote Memory with Leap", USENIX ATC'20)
watches the ids a program touches in remote memory (page numbers in the paper; here any
non-negative int: a page of PD3's page server, a record slot of its hash map), finds the stride
most of the recent accesses follow and reads ahead along it into a *prefetch cache*. An access
that finds its id there needs no network read; any other access is a miss and the application
reads the item synchronously (PD3: one blocking RDMA READ). This module is the algorithm only: it
decides which ids to prefetch and keeps the prefetch cache; the system built on it issues the
reads, prices them and holds the data.

The two rules (the paper's Algorithms 1 and 2; PD3's userspace port, fardatalab/PD3
``src/libs/benchmarking/leap.cpp.bank``, implements the same two):

* **trend detection** (Algorithm 1, FINDTREND): the deltas between consecutive accessed ids are
  kept in a ring of the newest ``history``. A Boyer-Moore majority vote runs over the newest
  ``w = history / splits`` deltas; a delta is the trend if it occurs in more than half of them.
  With none, ``w`` doubles and the vote runs again, until a trend is found or the whole history
  has been looked at (then there is no trend). Starting small makes Leap follow a new stride
  quickly; widening makes it hold on to a stride through short bursts of noise. A zero delta
  (the same id twice) is never a trend: there is nothing to read ahead along it.
* **prefetch window** (Algorithm 2, GETPREFETCHWINDOWSIZE), ``hits`` being the prefetch-cache
  hits since the previous decision: with no hit, the window is 1 if the last two deltas are equal
  (the access still follows a stride: probe with one id) and 0 otherwise (prefetching is
  suspended); with hits, it is the power of two at or above ``hits + 1`` (what was prefetched got
  used: read further ahead), capped at ``max_window``. Whatever this gives, the window never falls
  below half the previous one: a few accesses off the stride shrink it gradually, 8, 4, 2, 1, 0,
  instead of throwing the learnt window away.

A decision (:meth:`Leap.access`): window first; if it is not 0, the trend; with a trend ``t``,
prefetch ``current + k*t`` for ``k = 1 .. window``. With no trend, prefetch ``window`` ids around
the current one along the *latest* trend found (the paper: "read PWsize pages around Pt with the
latest trend"): offsets ``k = -(window // 2) .. window - 1 - window // 2`` (PD3's port: centred,
one more behind than ahead for an even window), ``current + k*latest``. The current id is offset
0. Negative ids, and ids at or above ``id_limit`` if given, are skipped.

Where this module follows PD3's port rather than the kernel Leap (both are options):

* *When decisions run* (``prefetch_on_hit``). The kernel Leap runs in the swap-in path of a page
  fault that misses the page cache; a hit on a prefetched page is only counted, so the hits since
  the last prefetch pile up and the window grows (a sequential scan settles at ``max_window``,
  one miss every ``max_window + 1`` accesses). PD3's port decides on *every* access once the
  history is full (its benchmark calls ``ProcessAccess`` for each request). Then at most one hit
  separates two decisions, the window stays at 1-2, and a scan hits almost always because each
  access tops the window up by one id. Default ``True`` (PD3's port, what PD3 measured);
  ``False`` for the kernel Leap.
* *The current id in the no-trend window* (``keep_current``). PD3's port puts offset 0, the id
  just accessed, into its prefetch cache (and, before any trend was found, when the latest trend
  is 0, every offset is the current id). Once one such hit has lifted the window, the window
  never drops below 1 while hits continue, so every access puts its own id back: the prefetch
  cache becomes an LRU of recently accessed ids (an id accessed 4 times in a row with no stride
  hits on its 2nd, 3rd and 4th access; tests/test_pd3_leap.py). On a skewed workload that is
  plausibly where PD3's "+15 % on Zipfian" for Leap comes from (not measured here). The kernel
  Leap would find that page in the page cache already. Default ``True`` (PD3's
  port); ``False`` skips offset 0, so with no trend ever found nothing is prefetched.
* Prefetching starts once the history is full (``history`` deltas, ``history + 1`` accesses), as
  in the port. The port seeds its history with a placeholder delta 0 at the first access; here
  only real deltas enter it.
* If ``splits`` is not a power of two, doubling ``w`` would overshoot the history before covering
  all of it (30 / 3: 10, 20, 40, so the port never votes over all 30); the last vote here is
  over the whole history instead (10, 20, 30). For a power of two the windows are the paper's.

What PD3 reports for it (§8): on the hash map (YCSB, 8 B keys and values) Leap gains about 15 %
over synchronous RDMA with Zipfian keys and nothing with uniform ones (no stride to find), and
it falls back to synchronous RDMA on every miss, so it keeps the baseline's latency. Differences
from the kernel Leap: no page cache and no kernel data path (Leap's other half, the lean swap
path, is what the kernel patch spends most of its effort on); it runs in user space over
application ids, not faulting virtual pages; the prefetch cache is a bounded LRU of ids owned by
the prefetcher (as in the port), not pages in the page cache; a prefetch-cache hit removes the id
(the item is handed to the application, which caches it or not).

The prefetch cache (:class:`PrefetchCache`): an id enters it the moment it is returned to be
prefetched, so "cached or in flight" are one state here and an id is never returned twice while
it is there. An id already there that falls in a new window is only made most recently used (as
the port's ``Put``). When full, the least recently used id goes; it was never used (a used id
leaves on its hit), so each such eviction is a *useless* prefetch. Hence, at any time,
``prefetches == prefetch_hits + useless_evictions + discarded + cached``.
"""

from __future__ import annotations

import operator
from collections import OrderedDict, deque
from itertools import islice
from typing import NamedTuple


class Access(NamedTuple):
    hit: bool                   # the id was in the prefetch cache (and has now left it)
    prefetch: list[int]         # ids to read now; they are in the prefetch cache already


class LeapStats(NamedTuple):
    accesses: int
    prefetch_hits: int          # accesses that found their id in the prefetch cache
    prefetches: int             # ids returned to be read (entered the prefetch cache)
    useless_evictions: int      # prefetched ids evicted by capacity before any access used them
    discarded: int              # prefetched ids removed by discard() (e.g. the item was written)
    cached: int                 # ids in the prefetch cache now
    decisions: int              # window computations (accesses with a full history, per trigger)
    suspended: int              # ... that gave a window of 0 (nothing prefetched, no trend looked for)
    trend_found: int            # trend detections that found a majority delta
    trend_not_found: int        # ... that did not (the window went around the current id)
    window: int                 # the latest window
    trend: int                  # the latest trend found (0: none yet)

    @property
    def hit_rate(self) -> float:
        """Prefetch hits per access."""
        return self.prefetch_hits / self.accesses if self.accesses else 0.0

    @property
    def accuracy(self) -> float:
        """Prefetch hits per prefetched id."""
        return self.prefetch_hits / self.prefetches if self.prefetches else 0.0


def majority(deltas) -> int | None:
    """Boyer-Moore majority vote: the value occurring in more than half of ``deltas``, or None."""
    candidate, count, n = None, 0, 0
    for d in deltas:                    # one pass keeps the only value that can be a majority
        n += 1
        if count == 0:
            candidate, count = d, 1
        elif d == candidate:
            count += 1
        else:
            count -= 1
    if n == 0:
        return None
    # the pass proves nothing by itself ([1, 2, 3] leaves 3): count the candidate
    if 2 * sum(1 for d in deltas if d == candidate) > n:
        return candidate
    return None


def next_pow2(x: int) -> int:
    """The smallest power of two at or above ``x`` (1 for ``x <= 1``)."""
    return 1 if x <= 1 else 1 << (x - 1).bit_length()


class PrefetchCache:
    """A bounded LRU set of prefetched ids (most recently used last)."""

    def __init__(self, capacity: int):
        self.capacity = capacity
        self._ids: OrderedDict[int, None] = OrderedDict()
        self.evicted = 0                # ids pushed out by capacity (never used)

    def __len__(self) -> int:
        return len(self._ids)

    def __contains__(self, item_id) -> bool:
        return item_id in self._ids

    def ids(self) -> list[int]:
        """The ids, least recently used first."""
        return list(self._ids)

    def put(self, item_id: int) -> bool:
        """Add ``item_id`` (True) or, if there, make it most recently used (False)."""
        if item_id in self._ids:
            self._ids.move_to_end(item_id)
            return False
        self._ids[item_id] = None
        if len(self._ids) > self.capacity:
            self._ids.popitem(last=False)
            self.evicted += 1
        return True

    def take(self, item_id: int) -> bool:
        """Remove ``item_id``: whether it was there."""
        if item_id in self._ids:
            del self._ids[item_id]
            return True
        return False


def _size(name: str, value, least: int = 1) -> int:
    try:
        v = operator.index(value)
    except TypeError:
        v = None
    if v is None or isinstance(value, bool) or v < least:
        raise ValueError(f"Leap {name} must be an integer of at least {least}, got {value!r}")
    return v


def _id(item_id) -> int:
    try:
        v = operator.index(item_id)
    except TypeError:
        v = None
    if v is None or isinstance(item_id, bool) or v < 0:
        raise ValueError(f"a Leap item id is a non-negative integer, got {item_id!r}")
    return v


class Leap:
    """Leap's prefetcher over one stream of accesses (one application thread's, or a host's).

    ``history`` deltas are kept (at least 2: the window rule compares the last two); trend
    detection starts over the newest ``history // splits`` (``splits`` must divide ``history``);
    a window is at most ``max_window`` ids; the prefetch cache holds ``cache_items`` ids (at least
    ``max_window``, so one window's ids never evict each other). ``id_limit``: ids at or above it
    are never prefetched (the size of the id space, e.g. the number of pages). ``prefetch_on_hit``
    and ``keep_current``: PD3's port (True) or the kernel Leap (False), see the module docstring.
    """

    def __init__(self, history: int = 32, splits: int = 4, max_window: int = 8, cache_items: int = 1024, *,
                 id_limit: int | None = None, prefetch_on_hit: bool = True, keep_current: bool = True):
        self.history = _size("history", history, 2)
        self.splits = _size("splits", splits)
        self.max_window = _size("max_window", max_window)
        cache_items = _size("cache_items", cache_items)
        if self.splits > self.history or self.history % self.splits:
            raise ValueError(f"Leap splits must divide history, got history={self.history} splits={self.splits}")
        if cache_items < self.max_window:
            raise ValueError(f"Leap cache_items must be at least max_window ({self.max_window}), got {cache_items}")
        self.id_limit = None if id_limit is None else _size("id_limit", id_limit)
        self.prefetch_on_hit = bool(prefetch_on_hit)
        self.keep_current = bool(keep_current)
        self.cache = PrefetchCache(cache_items)
        self._deltas: deque[int] = deque(maxlen=self.history)
        self._last: int | None = None       # the previous id accessed
        self._hits_since = 0                # prefetch hits since the previous decision
        self.window = 0                     # the latest window (the "previous" one for the next)
        self.latest_trend = 0
        self.accesses = self.hits = self.prefetches = self.discarded = 0
        self.decisions = self.suspended = self.trend_found = self.trend_not_found = 0

    def __len__(self) -> int:
        return len(self.cache)

    def __contains__(self, item_id) -> bool:
        return item_id in self.cache

    def access(self, item_id) -> Access:
        """Record an access to ``item_id``: whether the prefetch cache held it (it leaves it), and
        the ids to prefetch now (not in the prefetch cache before; they are in it now)."""
        i = _id(item_id)
        self.accesses += 1
        hit = self.cache.take(i)
        if hit:
            self.hits += 1
            self._hits_since += 1
        if self._last is not None:
            self._deltas.append(i - self._last)
        self._last = i
        if len(self._deltas) < self.history or (hit and not self.prefetch_on_hit):
            return Access(hit, [])
        return Access(hit, self._prefetch(i))

    def trend(self) -> int | None:
        """Algorithm 1 over the current history: the majority delta, or None."""
        n = len(self._deltas)
        w = max(1, n // self.splits)
        while n:
            # newest w deltas; a zero majority (one id again and again) gives no stride to follow
            m = majority(list(islice(reversed(self._deltas), w)))
            if m is not None and m != 0:
                return m
            if w >= n:
                return None
            w = min(2 * w, n)           # the last vote covers the whole history
        return None

    def window_size(self) -> int:
        """Algorithm 2: the next window (consumes the hits counted since the previous one)."""
        if self._hits_since == 0:
            pw = 1 if self._deltas[-1] == self._deltas[-2] else 0
        else:
            pw = next_pow2(self._hits_since + 1)
        pw = max(min(pw, self.max_window), self.window // 2)
        self._hits_since = 0
        self.window = pw
        return pw

    def _prefetch(self, current: int) -> list[int]:
        self.decisions += 1
        pw = self.window_size()
        if pw == 0:
            self.suspended += 1
            return []
        t = self.trend()
        if t is not None:
            self.trend_found += 1
            self.latest_trend = t
            offsets = range(1, pw + 1)
        else:
            self.trend_not_found += 1
            t = self.latest_trend
            first = -(pw // 2)
            offsets = range(first, first + pw)
        out = []
        for k in offsets:
            j = current + k * t
            if j == current and not self.keep_current:
                continue                # offset 0, or any offset along a zero latest trend
            if j < 0 or (self.id_limit is not None and j >= self.id_limit):
                continue
            if self.cache.put(j):       # new: to be read; already there: only refreshed
                out.append(j)
        self.prefetches += len(out)
        return out

    def discard(self, item_id) -> bool:
        """Drop a prefetched id (its item changed, say): whether it was in the prefetch cache."""
        if self.cache.take(_id(item_id)):
            self.discarded += 1
            return True
        return False

    def statistics(self) -> LeapStats:
        return LeapStats(self.accesses, self.hits, self.prefetches, self.cache.evicted, self.discarded,
                         len(self.cache), self.decisions, self.suspended, self.trend_found,
                         self.trend_not_found, self.window, self.latest_trend)
