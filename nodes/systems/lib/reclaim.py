"""Safe reuse of remote blocks: epoch-based reclamation (EBR) across the rack.

Why a library module: any design that writes out of place must eventually reuse what it
unlinked, and reuse is where a one-sided design most easily goes wrong (a reader still holding
the old address). RACE, SMART-HT, Sherman and SMART-BT share this one implementation; a new
design calls :func:`setup_epochs` in ``System.setup`` (the layout's ``"epochs"``, which
``System.node_failed`` clears for a dead node), makes one :class:`Reclaimer` per client, runs
every operation between ``enter`` and ``exit``, and hands it to its
:class:`nodes.systems.lib.alloc.ChunkAllocator`.

Systems that write out of place (RACE's KV blocks, Sherman's out-of-line values) replace a block by
swinging a pointer to a new one; the old block is garbage once no reader can still hold its
address. Without reuse a rack that updates keeps eating memory-node memory until it stops. With
naive reuse a reader that read a slot word just before the swing would READ the block after it was
rewritten for another key (or another value of the same key) and return the wrong thing. EBR makes
reuse safe without any per-read cost on the data path:

* Every compute node holds an **epoch row**: its *mirror* of the rack-wide epoch, the number of
  threads registered in the row, and one announcement word per thread. A thread starting an operation announces the mirror's value (the
  minimum over its coroutines' operations in flight; 0 = idle). Rows live where the modelled rack
  would keep them, in compute-node memory, so announcing is a local store; in the emulator the rows
  sit in the first memory node's memory (compute nodes expose none), which changes no cost.
* The **global epoch** is one word in the memory node. Any client may try to **advance** it from E
  to E+1 (``Reclaimer.advance``): one round of READs of every compute node's row (as far as its
  registered threads go: one line for up to 6 threads), then, if every mirror is at least E and
  every thread is idle or announced at least E, CAS(global, E, E+1), then CAS(mirror, E, E+1) on
  every row. Mirrors therefore only grow (a CAS cannot set an old value)
  and are never more than one behind the global epoch.
* A block unlinked by an operation is **retired** with epoch ``r = mirror + 1`` (at least the
  global epoch at that instant, because mirrors lag by at most one) and may be reused once the
  mirror reaches ``r + 2``.

Why that is safe. A reader R that can still use block B read B's address before the unlink, so it
announced ``a <= global(unlink) <= r`` before the unlink, and its thread's announcement stays at
most ``a`` until R ends. Reaching ``r + 2`` needs an advance from ``r + 1``; that advancer saw its
own mirror at ``r + 1`` before its READs (so the global epoch was already past R's announcement,
which therefore happened before those READs) and its CAS found the global still at ``r + 1``; so
its READ saw R's announcement ``a < r + 1`` and it could not advance while R runs. The argument is
about the real-time order of memory effects, which is what processes under lax clock
synchronisation share; announcements are atomic exchanges (a full fence) so that a reader's
announcement is visible before its first READ.

Never-published blocks (an update that found no key) go straight back to the free list. Blocks
are reused by the client that retired them, per size in 64-byte units (``free``). A client whose
retired blocks wait for the epoch tries to advance it **in the background**, on a coroutine of its
own thread that is not one of the workload's (its verbs and CPU are the thread's, its round trips
are no operation's latency), at most once per ``ADVANCE_PERIOD_NS`` times the number of threads it
saw active, so the rack as a whole tries about once per ``ADVANCE_PERIOD_NS``; and in the operation
itself only when its chunk runs out. The memory a rack holds in limbo is a few operation lifetimes
of retirements.

A thread that dies holding an announcement (its process killed) would stop the epoch forever;
:func:`clear_row` is what the rack calls for a dead compute node. Without it the rack runs out of
memory and stops with one line, as it would without reclamation.

``unsafe=True`` (a system's ``fault`` option) reuses a block the moment it is retired: what the
checker must catch (tests/test_reclaim.py).
"""

from __future__ import annotations

from collections import deque
from typing import NamedTuple

import numpy as np

from shm.atomics import fetch_max, swap
from shm.coro import VerbBatch
from shm.fabric import REGION_HOST, gaddr

WORD = 8
LINE_WORDS = 8
IDLE = 0                 # an announcement of a thread with no operation in flight
FIRST_EPOCH = 1
HEADER_WORDS = 8         # the global epoch, alone on its cache line
MAX_THREADS = 256        # threads per compute node (the spec's compute.threads range)
ROW_HEAD = 2             # mirror, threads registered (the highest thread index + 1)
ROW_WORDS = 264          # the head + MAX_THREADS announcements, padded to whole 64-byte lines
#: A thread tries to move the epoch on at most once per this many ns per thread it saw active at
#: its last try, so the rack as a whole tries about once per ADVANCE_PERIOD_NS whatever its size:
#: the epoch word and the rows are not a hot spot, and an epoch still turns over many times per
#: millisecond (retired blocks wait a few operation lifetimes).
ADVANCE_PERIOD_NS = 10_000
#: ... and only after this many retirements since its last try, so that a thread retiring slowly
#: (a read-mostly workload, one thread) does not spend its CPU on tries the epoch does not need.
ADVANCE_MIN_RETIRED = 32
# The CPU of checking one READ line of a row for the advance decision is the profile's
# software.epoch_scan_ns_per_line (an assumption there).


class ReclaimStats(NamedTuple):
    retired: int           # blocks unlinked and put in limbo
    reclaimed: int         # ... that became reusable (their epoch is two behind the rack's)
    bytes_reclaimed: int
    reused: int            # allocations served from reclaimed or never-published blocks
    limbo: int             # blocks waiting for the epoch to move on
    advances: int          # successful epoch advances by this client
    advance_attempts: int  # rounds of row READs (some find a straggler or lose the CAS)


def setup_epochs(fabric, node: int) -> dict:
    """Carve the epoch table out of memory node ``node`` (a fabric index); the picklable dict every
    client's :class:`Reclaimer` needs. One row per fabric node that is not a memory node."""
    rows = [i for i, n in enumerate(fabric.nodes) if n.role != "memory"]
    words = HEADER_WORDS + len(rows) * ROW_WORDS
    off = fabric.allocate(node, words * WORD)
    host = fabric.memory[node].host64
    base = off // WORD
    host[base:base + words] = 0
    host[base] = FIRST_EPOCH
    for r in range(len(rows)):
        host[base + HEADER_WORDS + r * ROW_WORDS] = FIRST_EPOCH      # mirror; threads registered: 0
    return {"node": node, "offset": off, "rows": {n: r for r, n in enumerate(rows)}}


def epochs_bytes(epochs: dict) -> int:
    """Bytes of memory-node memory the epoch table of ``epochs`` (:func:`setup_epochs`) takes."""
    return (HEADER_WORDS + len(epochs["rows"]) * ROW_WORDS) * WORD


def clear_row(fabric, epochs: dict, node: int) -> None:
    """Forget every announcement of compute node ``node`` (fabric index): the node is dead and none
    of its operations will read again."""
    r = epochs["rows"].get(node)
    if r is None:
        return
    host = fabric.memory[epochs["node"]].host64
    first = epochs["offset"] // WORD + HEADER_WORDS + r * ROW_WORDS + ROW_HEAD
    for i in range(first, first + MAX_THREADS):
        if host[i] != IDLE:
            swap(host, i, IDLE)


def global_epoch(fabric, epochs: dict) -> int:
    """The rack's epoch as the memory node holds it (for statistics and tests)."""
    return int(fabric.memory[epochs["node"]].host64[epochs["offset"] // WORD])


class Reclaimer:
    """One thread's share of EBR: its announcement, its limbo and its free lists."""

    def __init__(self, fabric, epochs: dict, thread, *, unsafe: bool = False):
        node, off = epochs["node"], epochs["offset"]
        row = epochs["rows"].get(thread.owner.node)
        if row is None:
            raise ValueError(f"reclaim: node {fabric.nodes[thread.owner.node].name!r} has no epoch row "
                             f"(a memory node cannot run clients)")
        if not 0 <= thread.index < MAX_THREADS:
            raise ValueError(f"reclaim: thread {thread.index} is beyond the {MAX_THREADS} threads of a row")
        self.thread = thread
        self.env = thread.env
        self._line_scan_ns = fabric.profile.software.epoch_scan_ns_per_line
        self._host = fabric.memory[node].host64
        base = off // WORD
        self._mirror = base + HEADER_WORDS + row * ROW_WORDS
        self._slot = self._mirror + ROW_HEAD + thread.index
        # register before the first announcement: an advancer reads a row only up to its count
        fetch_max(self._host, self._mirror + 1, thread.index + 1)
        self._global_addr = gaddr(node, off, REGION_HOST)
        self._row_addrs = [gaddr(node, off + (HEADER_WORDS + r * ROW_WORDS) * WORD, REGION_HOST)
                           for r in sorted(epochs["rows"].values())]
        self._row_words = [LINE_WORDS] * len(self._row_addrs)   # how much of each row to READ
        self._active: dict = {}
        self._announced = IDLE
        self.limbo: deque = deque()           # (epoch, node, offset, units, retired ns), in order
        self.free: dict = {}                  # units -> [(node, offset)]
        self.unsafe = unsafe
        #: a retired block also waits this long (virtual ns) before reuse: FlexKV's lease on
        #: cached addresses (a node may read a cached pair address until its lease runs out)
        self.min_age_ns = 0
        self._co = None                       # the coroutine background advances post on
        self._busy = False
        self._next_try = 0
        self._since = 0                       # retirements since the last try
        self.retired = self.reclaimed = self.bytes_reclaimed = self.reused = 0
        self.advances = self.advance_attempts = 0

    def statistics(self) -> ReclaimStats:
        return ReclaimStats(self.retired, self.reclaimed, self.bytes_reclaimed, self.reused, len(self.limbo),
                            self.advances, self.advance_attempts)

    # -- announcements (every operation) ------------------------------------------------------
    def enter(self) -> int:
        """An operation starts: announce the epoch it runs in; returns it for :meth:`exit`."""
        e = int(self._host[self._mirror])
        a = self._active
        a[e] = a.get(e, 0) + 1
        if self._announced == IDLE or e < self._announced:
            self._announce(e)
        return e

    def run(self, op):
        """Generator: the operation generator ``op`` run inside an epoch (announced before its
        first verb, withdrawn when it returns, raises or is closed). A client's ``get`` is
        ``return self.reclaim.run(self._get(co, key))``: no generator layer of its own."""
        e = self.enter()
        try:
            return (yield from op)
        finally:
            self.exit(e)

    def exit(self, e: int) -> None:
        a = self._active
        n = a[e] - 1
        if n:
            a[e] = n
            return
        del a[e]
        if e == self._announced:
            self._announce(min(a) if a else IDLE)

    def _announce(self, e: int) -> None:
        self._announced = e
        swap(self._host, self._slot, e)       # an atomic exchange: visible before our next READ

    # -- blocks --------------------------------------------------------------------------------
    def retire(self, node: int, offset: int, units: int) -> None:
        """A block this thread unlinked (called inside the operation that unlinked it, after the
        unlinking verb completed)."""
        self.retired += 1
        if self.unsafe:                        # the deliberate bug: reuse at once
            self._reusable(node, offset, units)
            return
        self.limbo.append((int(self._host[self._mirror]) + 1, node, offset, units, self.env.now))
        self._since += 1

    def release(self, node: int, offset: int, units: int) -> None:
        """A block nobody else ever saw (never published): reusable at once."""
        self.free.setdefault(units, []).append((node, offset))

    def take(self, units: int):
        """A reusable ``(node, offset)`` of exactly ``units`` 64-byte units, or None. Moves the epoch
        on in the background when retired blocks wait for it."""
        limbo = self.limbo
        if limbo:
            if limbo[0][0] <= int(self._host[self._mirror]) - 2:
                if limbo[0][4] <= self.env.now - self.min_age_ns:
                    self.collect()
            elif self._since >= ADVANCE_MIN_RETIRED and not self._busy and self.env.now >= self._next_try:
                self._busy = True
                if self._co is None:
                    self._co = VerbBatch(self.thread)   # not one of the workload's coroutines
                self.env.process(self._background(), name="epoch-advance")
        lst = self.free.get(units)
        if not lst:
            return None
        self.reused += 1
        return lst.pop()

    def _reusable(self, node, offset, units) -> None:
        self.reclaimed += 1
        self.bytes_reclaimed += units * 64
        self.release(node, offset, units)

    def collect(self) -> int:
        """Move the blocks whose epoch is two behind the mirror to the free lists; how many."""
        limbo = self.limbo
        if not limbo:
            return 0
        safe = int(self._host[self._mirror]) - 2
        old = self.env.now - self.min_age_ns
        n = 0
        while limbo and limbo[0][0] <= safe and limbo[0][4] <= old:
            _, node, offset, units, _t = limbo.popleft()
            self._reusable(node, offset, units)
            n += 1
        return n

    # -- moving the epoch on (occasionally, by any client) ---------------------------------------
    def _background(self):
        try:
            yield from self.advance(self._co)
        finally:
            self._busy = False

    def advance_inline(self, co):
        """Generator: :meth:`advance` on ``co``, an operation's coroutine whose chunk ran out, unless
        a background try is under way or ``co`` has verbs queued (the round trip would carry them)."""
        if not self._busy and not co.queued:
            yield from self.advance(co)

    def advance(self, co):
        """Generator: try to move the rack's epoch on by one (see the module docstring), then
        collect. Runs on ``co`` with nothing queued on it. True if the epoch moved (by anyone)."""
        self.advance_attempts += 1
        self._since = 0
        e = int(self._host[self._mirror])
        words = self._row_words
        handles = [co.read(a, n * WORD) for a, n in zip(self._row_addrs, words)]
        yield co.sync()
        self.thread.cpu(self._line_scan_ns * sum(words) // LINE_WORDS)
        active = 0
        ok = True
        for r, h in enumerate(handles):
            row = h.data.view(np.uint64)
            registered = int(row[1])
            if ROW_HEAD + registered > words[r]:
                # a row with more threads than we read: read them all next time (soon)
                words[r] = min(ROW_WORDS, -(-(ROW_HEAD + registered) // LINE_WORDS) * LINE_WORDS)
                ok = False
                continue
            if int(row[0]) < e:
                ok = False                     # a mirror still behind: a previous advance is finishing
            ann = row[ROW_HEAD:ROW_HEAD + registered]
            busy = ann != IDLE
            active += int(busy.sum())
            if (busy & (ann < e)).any():
                ok = False                     # a thread still runs in an older epoch
        self._next_try = self.env.now + ADVANCE_PERIOD_NS * max(1, active)
        if not ok:
            return False
        c = co.cas(self._global_addr, e, e + 1)
        yield co.sync()
        now = int(c.value)
        if now == e:
            self.advances += 1
            now = e + 1
        elif now < e:                          # cannot happen: mirrors never pass the global epoch
            raise RuntimeError(f"reclaim: global epoch {now} behind a mirror at {e}")
        for a in self._row_addrs:              # help every mirror to the epoch we know of
            co.cas(a, now - 1, now)
        yield co.sync()
        self.collect()
        return True
