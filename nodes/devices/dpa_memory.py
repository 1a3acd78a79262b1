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
  (assumption). One dict operation per line per level, and a reverse index (line -> the threads
  whose L1 holds it) so that a store invalidates only the copies that exist rather than searching
  every thread's L1; ``tests/test_dpa_memory.py`` checks the whole model against a plain reference
  of these rules on random accesses.
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


def _fill(level: OrderedDict, line: int, capacity: int) -> None:
    """Put ``line`` (not in ``level``) at the recent end of a shared level, evicting its least
    recent line when full (capacity 0: the level caches nothing)."""
    if capacity:
        level[line] = None
        if len(level) > capacity:
            level.popitem(last=False)


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
        self._l2_lines = dpa.l2_bytes >> shift
        self._l3_lines = dpa.l3_bytes >> shift
        self._l1_ns = dpa.l1_ns                     # read on every access: an attribute, not p's
        self._memory_bytes = dpa.memory_bytes
        # Each level is an OrderedDict of line numbers in recency order (oldest first).
        self._l1: dict[int, OrderedDict] = {}
        self._l2: OrderedDict = OrderedDict()
        self._l3: OrderedDict = OrderedDict()
        # line -> the threads whose L1 holds it: a store or the NIC's write drops exactly those
        # copies instead of searching every thread's L1 (up to 189 of them) for the line
        self._holders: dict[int, set] = {}
        self._accesses = self._lines = self._ns = self._inval = 0
        # hits and misses per level; l1_misses is public: a DPA core (dpa_core.py) compares it
        # around one access to tell an all-L1 hit (compute) from a miss (a stall)
        self._h1 = self.l1_misses = self._h2 = self._m2 = self._h3 = self._m3 = 0

    # ------------------------------------------------------------------ checks
    def _thread_l1(self, thread: int) -> OrderedDict:
        l1 = self._l1.get(thread)
        if l1 is None:
            if type(thread) is not int or not 0 <= thread < self.p.usable_threads:
                raise DpaError(f"DPA thread {thread!r} does not exist: 'dpa.usable_threads' is "
                               f"{self.p.usable_threads} (threads 0..{self.p.usable_threads - 1})")
            l1 = self._l1[thread] = OrderedDict()
        return l1

    def _span(self, addr: int, nbytes: int) -> range:
        if nbytes <= 0 or addr < 0 or addr + nbytes > self.p.memory_bytes:
            raise DpaError(f"DPA memory access of {nbytes} B at 0x{addr:x} is outside 'dpa.memory_bytes' "
                           f"({self.p.memory_bytes} B)")
        s = self._shift
        return range(addr >> s, ((addr + nbytes - 1) >> s) + 1)

    # ------------------------------------------------------------------ the model
    def _line(self, thread: int, l1: OrderedDict, line: int) -> int:
        """Cost of one line for ``thread`` (whose L1 is ``l1``); fills the levels it missed."""
        if line in l1:
            l1.move_to_end(line)
            self._h1 += 1
            return self._l1_ns
        self.l1_misses += 1
        l2 = self._l2
        if line in l2:
            l2.move_to_end(line)
            self._h2 += 1
            cost = self.p.l2_ns
        else:
            self._m2 += 1
            l3 = self._l3
            if line in l3:
                l3.move_to_end(line)
                self._h3 += 1
                cost = self.p.l3_ns
            else:
                self._m3 += 1
                cost = self.p.memory_ns
                _fill(l3, line, self._l3_lines)
            _fill(l2, line, self._l2_lines)
        cap = self._l1_lines
        if cap:
            l1[line] = None
            holders = self._holders
            held = holders.get(line)
            if held is None:
                holders[line] = {thread}
            else:
                held.add(thread)
            if len(l1) > cap:                   # evict the thread's least recent line
                old, _ = l1.popitem(last=False)
                held = holders[old]
                held.discard(thread)
                if not held:
                    del holders[old]
        return cost

    def access(self, thread: int, addr: int, nbytes: int, *, write: bool = False, overlap: bool = False) -> int:
        """Thread ``thread`` loads (``write`` False) or stores ``nbytes`` at DPA-memory offset ``addr``;
        returns the ns it waits. ``overlap``: the lines are requested together (slowest line +
        ``l1_ns`` per further line) instead of one after the other (the sum)."""
        l1 = self._l1.get(thread)
        if l1 is None:
            l1 = self._thread_l1(thread)
        if nbytes <= 0 or addr < 0 or addr + nbytes > self._memory_bytes:
            self._span(addr, nbytes)            # raises the one-line error
        shift = self._shift
        first = addr >> shift
        last = (addr + nbytes - 1) >> shift
        if first == last:                       # the common case: one line, and often an L1 hit
            n = 1
            if first in l1:
                l1.move_to_end(first)
                self._h1 += 1
                ns = self._l1_ns
            else:
                ns = self._line(thread, l1, first)
        else:
            n = last - first + 1
            costs = [self._line(thread, l1, line) for line in range(first, last + 1)]
            ns = max(costs) + (n - 1) * self._l1_ns if overlap else sum(costs)
        if write:
            self._invalidate_others(thread, range(first, last + 1))
        self._accesses += 1
        self._lines += n
        self._ns += ns
        return ns

    def prefetch(self, thread: int, addr: int, nbytes: int) -> int:
        """Bring the lines into the thread's caches as one overlapped request; returns its cost (the
        slowest line), which the caller overlaps with its own work. A later ``access`` hits L1."""
        l1 = self._thread_l1(thread)
        span = self._span(addr, nbytes)
        ns = 0
        for line in span:
            cost = self._line(thread, l1, line)
            if cost > ns:
                ns = cost
        self._accesses += 1
        self._lines += len(span)
        self._ns += ns
        return ns

    def install(self, addr: int, nbytes: int) -> None:
        """Lines written by the NIC (a received packet): they land in L2 (DPA-Store §2.3: "matched
        packets land in L2") without a thread's cost; the first load by a thread hits L2."""
        l2 = self._l2
        for line in self._span(addr, nbytes):
            if line in l2:
                l2.move_to_end(line)
            else:
                _fill(l2, line, self._l2_lines)
            held = self._holders.pop(line, None)    # the NIC's write makes any L1 copy stale
            if held:
                for t in held:
                    del self._l1[t][line]
                self._inval += len(held)

    def _invalidate_others(self, thread: int, span: range) -> None:
        holders = self._holders
        for line in span:
            held = holders.get(line)
            if held is None:
                continue
            mine = thread in held
            for t in held:
                if t != thread:
                    del self._l1[t][line]
            self._inval += len(held) - mine
            if mine:
                holders[line] = {thread}
            else:
                del holders[line]

    def statistics(self) -> DpaCacheStats:
        return DpaCacheStats(self._accesses, self._lines, self._h1, self.l1_misses, self._h2, self._m2,
                             self._h3, self._m3, self._inval, self._ns)

    def host_copy_ns(self, nbytes: int) -> int:
        """Virtual ns for polling DPA threads to copy ``nbytes`` from host memory into DPA memory at
        the published aggregate rate (``dpa.host_copy_mb_per_s``; a software path, not the DMA
        engine). The caller decides how the threads share the work."""
        return math.ceil(nbytes * 1000 / self.p.host_copy_mb_per_s)    # B / (MB/s) = us; x 1000 = ns
