"""The cost of a DPA thread's loads and stores: DPA memory behind a three-level cache hierarchy.

One concept: given which hardware thread touches which bytes of DPA memory, how many virtual ns
does it wait, and which caches hold which lines afterwards. Data is not modelled here (the bytes
live in the DPA memory segment of the role that owns this model); only line residency and time.

Design (and why):

* **Levels.** A private L1 per hardware thread, an L2 and an L3 shared by all threads of the DPA,
  then DPA memory -- the hierarchy DPA-Store §2.3 describes, with sizes, line size and hit latencies
  from the profile's ``[dpa]`` table (docs/devices.md lists each value's source or assumption).
* **LRU over lines.** Each level is an ``OrderedDict`` of line numbers in recency order: a hit moves
  the line to the end, a fill appends it and evicts from the front when the level is full. Fully
  associative: the DPA's associativity is not published, and with LRU the difference to a
  set-associative cache of the same size is conflict misses, which this model leaves out
  (assumption). One dict operation per line per level: a few us of real time per one-line access (4 us measured
  on a busy 2-core machine, random lines), cheap beside
  the event loop.
* **Non-inclusive, non-exclusive fills.** A miss fills the line into every level it missed
  (L1, L2, L3); an eviction from L2 or L3 does *not* invalidate copies above it (no back-invalidation).
  Whether the DPA's caches are inclusive is not published. With 1 KiB L1s (16 lines) and a 1.5 MiB L2
  (24 576 lines) the two policies differ only for a line that stays among a thread's 16 most recent
  while 24 576 other lines pass through L2 -- an idle thread's stale L1 -- and back-invalidation would
  cost a search over up to 189 L1s per eviction. So: the simpler policy, chosen on purpose.
* **Stores.** Write-allocate: a store costs what a load of the line costs and fills the caches the
  same way. It also drops the line from the *other* threads' L1s (write-invalidate), so their next
  load of it finds L2 -- the cost of sharing a written line, e.g. DPA-Store's insert buffers.
  Write-backs of dirty lines are not charged (assumption: write buffers hide them).
* **Cost of one access.** An access of ``nbytes`` at ``addr`` touches every line in
  ``[addr, addr + nbytes)``. Each line costs the latency of the first level that holds it
  (``l1_ns``, ``l2_ns``, ``l3_ns``, else ``memory_ns``). By default the lines are fetched one after
  the other and the costs add (a dependent walk, no prefetch). With ``overlap=True`` the lines are
  independent and requested together (DPA-Store §4.2.6 prefetches the next lines while it evaluates a
  model): the access costs its slowest line plus ``l1_ns`` for each further line (each is read from
  L1 once it is there). Overlap *across* accesses -- issue a prefetch, compute, then use -- is the
  caller's to compose: ``prefetch()`` fills the lines and returns their cost, which the caller
  overlaps with its compute, and the later ``access()`` then hits.
* **Not timed.** A line counts as cached from the moment it missed, not from when its data would
  arrive: a second thread asking for a line still in flight pays an L2 hit, not the rest of the miss
  (optimistic; in-flight misses, MSHRs and memory bandwidth are not modelled).
* **Errors.** A thread outside ``dpa.usable_threads`` or bytes outside ``dpa.memory_bytes`` is a
  :class:`DpaError` with one line naming the key.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from typing import NamedTuple

from shm.profile_schema import DpaProfile

__all__ = ["DpaError", "DpaCacheStats", "DpaMemory"]


class DpaError(ValueError):
    """A DPA request that cannot exist (a thread beyond the profile's limits, bytes outside DPA
    memory); the message is one line and names the profile key."""


class DpaCacheStats(NamedTuple):
    """Counts since the model was made (``accesses``: calls of access/prefetch; ``lines``: lines they
    touched; a line that misses L1 is looked up in L2, and so on; ``memory`` = ``l3_misses``)."""
    accesses: int
    lines: int
    l1_hits: int
    l1_misses: int
    l2_hits: int
    l2_misses: int
    l3_hits: int
    l3_misses: int
    invalidations: int   # L1 copies dropped by other threads' stores
    ns: int              # total cost returned

    @property
    def memory(self) -> int:
        return self.l3_misses


class _Lru:
    """A fully associative LRU set of line numbers with a fixed capacity (0: caches nothing)."""
    __slots__ = ("lines", "capacity")

    def __init__(self, capacity: int):
        self.lines: OrderedDict[int, None] = OrderedDict()
        self.capacity = capacity

    def hit(self, line: int) -> bool:
        if line in self.lines:
            self.lines.move_to_end(line)
            return True
        return False

    def fill(self, line: int) -> None:
        if self.capacity:
            lines = self.lines
            lines[line] = None
            if len(lines) > self.capacity:
                lines.popitem(last=False)


class DpaMemory:
    """The caches and the DPA memory of one DPA, as costs (see the module docstring).

    >>> from shm.profile import load_profile
    >>> m = DpaMemory(load_profile("bf3").dpa)
    >>> m.access(0, 0x1000, 8)      # first touch: DPA memory
    465
    >>> m.access(0, 0x1000, 8)      # now in the thread's L1
    2
    >>> m.access(1, 0x1000, 8)      # another thread: the shared L2
    20
    """

    def __init__(self, dpa: DpaProfile):
        if dpa is None:
            raise DpaError("this profile has no [dpa] table: the card has no DPA")
        self.p = dpa
        shift = dpa.line_bytes.bit_length() - 1
        self._shift = shift
        self._l1_lines = dpa.l1_bytes >> shift
        self._l1: dict[int, _Lru] = {}
        self._l2 = _Lru(dpa.l2_bytes >> shift)
        self._l3 = _Lru(dpa.l3_bytes >> shift)
        self._accesses = self._lines = self._ns = self._inval = 0
        # hits and misses per level; l1_misses is public: a DPA core (dpa_core.py) compares it
        # around one access to tell an all-L1 hit (compute) from a miss (a stall)
        self._h1 = self.l1_misses = self._h2 = self._m2 = self._h3 = self._m3 = 0

    # ------------------------------------------------------------------ checks
    def _thread_l1(self, thread: int) -> _Lru:
        l1 = self._l1.get(thread)
        if l1 is None:
            if type(thread) is not int or not 0 <= thread < self.p.usable_threads:
                raise DpaError(f"DPA thread {thread!r} does not exist: 'dpa.usable_threads' is "
                               f"{self.p.usable_threads} (threads 0..{self.p.usable_threads - 1})")
            l1 = self._l1[thread] = _Lru(self._l1_lines)
        return l1

    def _span(self, addr: int, nbytes: int) -> range:
        if nbytes <= 0 or addr < 0 or addr + nbytes > self.p.memory_bytes:
            raise DpaError(f"DPA memory access of {nbytes} B at 0x{addr:x} is outside 'dpa.memory_bytes' "
                           f"({self.p.memory_bytes} B)")
        s = self._shift
        return range(addr >> s, ((addr + nbytes - 1) >> s) + 1)

    # ------------------------------------------------------------------ the model
    def _line(self, l1: _Lru, line: int) -> int:
        """Cost of one line for the thread owning ``l1``; fills the levels it missed."""
        p = self.p
        if l1.hit(line):
            self._h1 += 1
            return p.l1_ns
        self.l1_misses += 1
        if self._l2.hit(line):
            self._h2 += 1
            cost = p.l2_ns
        else:
            self._m2 += 1
            if self._l3.hit(line):
                self._h3 += 1
                cost = p.l3_ns
            else:
                self._m3 += 1
                cost = p.memory_ns
                self._l3.fill(line)
            self._l2.fill(line)
        l1.fill(line)
        return cost

    def access(self, thread: int, addr: int, nbytes: int, *, write: bool = False, overlap: bool = False) -> int:
        """Thread ``thread`` loads (``write`` False) or stores ``nbytes`` at DPA-memory offset ``addr``;
        returns the ns it waits. ``overlap``: the lines are requested together (slowest line +
        ``l1_ns`` per further line) instead of one after the other (the sum)."""
        l1 = self._thread_l1(thread)
        span = self._span(addr, nbytes)
        costs = [self._line(l1, line) for line in span]
        if write:
            self._invalidate_others(thread, span)
        n = len(costs)
        ns = max(costs) + (n - 1) * self.p.l1_ns if overlap else sum(costs)
        self._accesses += 1
        self._lines += n
        self._ns += ns
        return ns

    def prefetch(self, thread: int, addr: int, nbytes: int) -> int:
        """Bring the lines into the thread's caches as one overlapped request; returns its cost (the
        slowest line), which the caller overlaps with its own work. A later ``access`` hits L1."""
        l1 = self._thread_l1(thread)
        span = self._span(addr, nbytes)
        ns = max(self._line(l1, line) for line in span)
        self._accesses += 1
        self._lines += len(span)
        self._ns += ns
        return ns

    def install(self, addr: int, nbytes: int) -> None:
        """Lines written by the NIC (a received packet): they land in L2 (DPA-Store §2.3: "matched
        packets land in L2") without a thread's cost; the first load by a thread hits L2."""
        for line in self._span(addr, nbytes):
            if not self._l2.hit(line):
                self._l2.fill(line)
            for l1 in self._l1.values():        # the NIC's write makes any L1 copy stale
                if l1.lines.pop(line, 0) is None:
                    self._inval += 1

    def _invalidate_others(self, thread: int, span: range) -> None:
        for t, l1 in self._l1.items():
            if t != thread and l1.lines:
                lines = l1.lines
                for line in span:
                    if lines.pop(line, 0) is None:
                        self._inval += 1

    def statistics(self) -> DpaCacheStats:
        return DpaCacheStats(self._accesses, self._lines, self._h1, self.l1_misses, self._h2, self._m2,
                             self._h3, self._m3, self._inval, self._ns)

    def host_copy_ns(self, nbytes: int) -> int:
        """Virtual ns for polling DPA threads to copy ``nbytes`` from host memory into DPA memory at
        the published aggregate rate (``dpa.host_copy_mb_per_s``; a software path, not the DMA
        engine). The caller decides how the threads share the work."""
        return math.ceil(nbytes * 1000 / self.p.host_copy_mb_per_s)    # B / (MB/s) = us; x 1000 = ns
