"""Multi-line transfers landing line by line over their modelled transfer time.

The NIC model (``shm.nic.model_post``) gives a READ or WRITE of host memory that spans several
64-byte lines a *landing window*: a WRITE places its first line at the window's start and its last
at its end (its effect), a READ samples its first line at the start (its effect) and its last at
the end, one line per ``64 B / pcie.payload_gbps`` (about 5 ns on a 100 Gb/s NIC, so a 1 KiB
transfer takes ~75 ns to land). Real hardware moves a transfer line by line the same way, which is
why a READ racing a WRITE to the same bytes can return some lines old and some new: a *torn* read.
Designs guard against it with versions or checksums (``nodes/systems/lib/record.py``); landing line
by line is what lets those guards be exercised, deterministically in a co-located rack.

A :class:`Landing` is one such transfer in progress. Each step lands the next line, and with it
every later line due before the next other event of the environment: when nothing else can
happen in between, landing them now or at their own times is the same, so a transfer costs one
event unless something really interleaves with it. A READ looks further: what it returns depends
only on what changes the memory it samples, so its lines due before the next *write* to that
node (:class:`PendingWrites`: every WRITE, atomic and SEND this process has posted, with its
landing window) land at once, however many other events (other READs, completions) come between.
Under a READ-heavy load that keeps a 1 KiB READ at one event instead of sixteen. A pending write
changes only its own bytes, so a READ whose window only a write to *other* bytes of the node
falls in lands whole too (:meth:`PendingWrites.clear_of`): RACE posts a KV block's WRITE with the
two bucket READs that found its slot, and the WRITE lands at the READs' nanosecond; before, every
such READ took a :class:`Landing` and an event more, though its bytes could not change.

The rkey is checked for the whole range before the first line, so a bad key touches nothing
(:func:`begin_landing`). A completion never comes before its effect: the owner passes what is still landing to :func:`flush_due` when a completion
is due (the model puts each completion at or after its window's end, but the last line's event
may sort after the completion's at the same nanosecond).

Single-line transfers, atomics, SENDs and device memory still land at one instant.
"""

from __future__ import annotations

from heapq import heappush

import numpy as np
from numba import njit

from shm.kernels import entry
from shm.nic import VERB_READ, WR_LEN, WR_OFF, WR_OP, WR_OUT, WR_REGION
from shm.fabric import (IBV_ACCESS_REMOTE_READ, IBV_ACCESS_REMOTE_WRITE, OFFSET_BITS, OFFSET_MASK, REGION_HOST,
                        REGION_MASK, land_lines, mr_check, remote_read_write)


class _Landed:
    """What :func:`begin_landing` returns for a transfer that landed whole in its first step."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "ALL_LANDED"


ALL_LANDED = _Landed()


def begin_landing(env, fabric, node: int, is_read: bool, off: int, length: int, rkey: int, lbuf, loff: int,
                  lo: int, hi: int, kernels=None) -> "Landing | _Landed | None":
    """A multi-line READ or WRITE of ``node``'s host memory starts landing now: None (touching
    nothing) if ``rkey`` does not grant the access over the whole range, ``ALL_LANDED`` if every line
    is due now (the common case: nothing can come between, see :meth:`Landing.resume`), else the
    :class:`Landing`, its first line landed and the rest scheduled. The lines of a WRITE go in
    descending order on a NIC without ``nic.ordered_multiline_writes``. ``kernels``:
    :class:`shm.fabric.HostKernels` for ``lbuf``'s type (the same machine code, entered directly)."""
    mem = fabric.memory[node]
    pending = pending_writes_of(fabric)
    deferred = None if is_read else getattr(fabric, "_deferred_reads", None)
    descending = not is_read and not fabric.profile.nic.ordered_multiline_writes
    bound = _bound(env, pending, deferred, node, is_read)
    if hi < bound or (is_read and pending.clear_of(node, env.now, hi, off, off + length)):
        # Landing.resume would land every line in this step (or could, since nothing that may
        # change these bytes lands before the last line): one compiled call, no Landing
        rw = remote_read_write if kernels is None else kernels.read_write
        ok = rw(is_read, mem.mrt, rkey, REGION_HOST, off, length, mem.host, mem.host_locks, lbuf, loff, descending)
        return ALL_LANDED if ok else None
    check = mr_check if kernels is None else kernels.check
    if not check(mem.mrt, rkey, REGION_HOST, off, length, IBV_ACCESS_REMOTE_READ if is_read else IBV_ACCESS_REMOTE_WRITE):
        return None
    if is_read:
        fabric.windows["reads_overlapping_writes"] += 1   # a write lands inside its window
    landing = Landing(env, pending, node, is_read, mem.host, mem.host_locks, off, length, lbuf, loff, descending, lo,
                      hi, deferred, land_lines if kernels is None else kernels.lines)
    landing.step(bound)
    return landing


def _bound(env, pending: "PendingWrites", deferred, node: int, is_read: bool) -> int:
    """Lines due before this time (ns) land now (:meth:`Landing.resume`). A WRITE's deferred READs
    that come before now land first (shm/deferred.py)."""
    now = env.now
    bound = pending.next_change(node, now) if is_read else now
    if bound <= now:
        bound = env.peek()
    if deferred is not None:
        # a WRITE lands lines ahead of their times only before the node's next deferred READ
        deferred.before_write(node)
        t = deferred.next_time(node)
        if t < bound:
            bound = t
    return bound


def flush_due(landings: list, now: int) -> list:
    """A completion never comes before its effect: land every line of ``landings`` whose window
    ended by ``now``; returns those still landing."""
    left = []
    for landing in landings:
        if landing.hi <= now:
            landing.finish()
        elif not landing.done:
            left.append(landing)
    return left


def due_end(lo: int, hi: int, n: int, k: int, bound: int) -> int:
    """Lines ``k .. j-1`` of a transfer landing ``n`` lines between ``lo`` and ``hi`` land now:
    line ``k`` and every later one due before ``bound``; returns ``j`` (arithmetic instead of a
    loop over :meth:`Landing.time`: line j is due before bound iff (hi - lo) * j < (bound - lo) * (n - 1))."""
    if hi < bound:                   # every line left is due (time(n - 1) == hi)
        return n
    # with hi == lo every line is due at hi, which is not before bound
    j = -(-(bound - lo) * (n - 1) // (hi - lo)) if hi > lo else k + 1
    return k + 1 if j <= k else (n if j > n else j)


def _resume(landing: "Landing") -> None:
    landing.resume()


class Landing:
    """A multi-line READ or WRITE landing between ``lo`` and ``hi`` (ns) on ``rbuf`` (the memory of
    ``node``), one event of ``env`` per :meth:`resume`."""

    __slots__ = ("env", "pending", "node", "is_read", "rbuf", "rlocks", "off", "length", "lbuf", "loff",
                 "descending", "lo", "hi", "n", "k", "deferred", "land_lines")

    def __init__(self, env, pending: "PendingWrites", node: int, is_read: bool, rbuf, rlocks, off: int, length: int,
                 lbuf, loff: int, descending: bool, lo: int, hi: int, deferred=None, lines=land_lines):
        self.env = env
        self.pending = pending
        self.node = node
        self.is_read = is_read
        self.rbuf = rbuf
        self.rlocks = rlocks
        self.off = off
        self.length = length
        self.lbuf = lbuf
        self.loff = loff
        self.descending = descending
        self.lo = lo
        self.hi = hi
        self.n = (off + length - 1) // 64 - off // 64 + 1
        self.k = 0                      # the next line to land
        self.deferred = deferred        # a WRITE's: the READs deferred on its node (shm/deferred.py)
        self.land_lines = lines         # shm.fabric.land_lines, or its entry point (HostKernels)

    @property
    def done(self) -> bool:
        return self.k >= self.n

    def time(self, k: int) -> int:
        """When line ``k`` (in landing order) lands."""
        return self.lo + (self.hi - self.lo) * k // (self.n - 1) if self.n > 1 else self.hi

    def advance(self, bound: int) -> int:
        """Land the next line and every later one due before ``bound``; returns when the next line
        lands, or -1 if none is left."""
        k = self.k
        n = self.n
        j = due_end(self.lo, self.hi, n, k, bound)
        self.land_lines(self.is_read, self.rbuf, self.rlocks, self.off, self.length, self.lbuf, self.loff,
                        self.descending, k, j)
        self.k = j
        return self.time(j) if j < n else -1

    def finish(self) -> None:
        """Land every line left, now."""
        if self.k < self.n:
            if self.deferred is not None:
                self.deferred.before_write(self.node)
            self.land_lines(self.is_read, self.rbuf, self.rlocks, self.off, self.length, self.lbuf, self.loff,
                            self.descending, self.k, self.n)
            self.k = self.n

    def resume(self) -> None:
        """One event of the landing: land what is due and schedule the next line if one is left.
        Due are the lines before the environment's next event, or for a READ the lines before the
        next write to its node (``pending``), unless a write is landing right now."""
        if self.k >= self.n:             # already finished by a completion
            return
        if self.is_read and self.pending.clear_of(self.node, self.env.now, self.hi, self.off, self.off + self.length):
            self.finish()                # the write that held it back was to other bytes, or has landed
            return
        self.step(_bound(self.env, self.pending, self.deferred, self.node, self.is_read))

    def step(self, bound: int) -> None:
        """Land what is due before ``bound`` (:func:`_bound`) and schedule the next line if one is left."""
        env = self.env
        t = self.advance(bound)
        if t >= 0:
            heap, next_seq = env.event_queue()   # not env.schedule: t is never clamped here
            heappush(heap, (t, next_seq(), _resume, self))
            if env.synced:
                env.effect_at(t, not self.is_read)


ALL_BYTES = 1 << 62       # the end of a write's byte range when it may change any byte of the node

# A node's pending writes live in one int64 array that compiled code reads (the landing kernels
# below, and a compiled event core after them): row 0 is a header (column 0: how many entries),
# rows 1..n a binary min-heap (row k's children are rows 2k and 2k+1) of entries (first, last,
# off, end): a write landing between ``first`` and ``last`` (ns) on bytes [off, end), ordered as
# the tuples would be. Which entry sits where never changes an answer (each answer depends only
# on the set of entries: tests/test_landing.py compares with a plain list).
_FIRST, _LAST, _OFF, _END = range(4)
_ROWS0 = 64               # entries a node's array holds before it grows


@njit(cache=True, inline='always')
def _sorts_before(h, i, j):
    """The entry at row ``i`` sorts before the one at row ``j`` (as tuples compare)."""
    for c in range(4):
        if h[i, c] != h[j, c]:
            return h[i, c] < h[j, c]
    return False


@njit(cache=True, inline='always')
def _swap_rows(h, i, j):
    for c in range(4):
        t = h[i, c]
        h[i, c] = h[j, c]
        h[j, c] = t


@njit(cache=True)
def _pop_top(h):
    """Drop the heap's first entry (the last one takes its row and sinks)."""
    n = h[0, 0]
    for c in range(4):
        h[1, c] = h[n, c]
    n -= 1
    h[0, 0] = n
    k = 1
    while True:
        least = k
        if 2 * k <= n and _sorts_before(h, 2 * k, least):
            least = 2 * k
        if 2 * k + 1 <= n and _sorts_before(h, 2 * k + 1, least):
            least = 2 * k + 1
        if least == k:
            return
        _swap_rows(h, k, least)
        k = least


@njit(cache=True, inline='always')
def _drop_ended(h, now):
    """Drop the entries at the top whose window ended before ``now``: no answer asked at ``now``
    or later needs them (``now`` -1 drops none)."""
    while h[0, 0] > 0 and h[1, _LAST] < now:
        _pop_top(h)


@njit(cache=True)
def pw_push(h, first, last, off, end, now):
    """Add a write's entry (``first <= last``) to node array ``h``, after :func:`_drop_ended`.
    False, adding nothing, if the array is full (the caller grows it)."""
    _drop_ended(h, now)
    k = h[0, 0] + 1
    if k >= h.shape[0]:
        return False
    h[k, _FIRST] = first
    h[k, _LAST] = last
    h[k, _OFF] = off
    h[k, _END] = end
    h[0, 0] = k
    while k > 1 and _sorts_before(h, k, k // 2):       # sift up
        _swap_rows(h, k, k // 2)
        k //= 2
    return True


@njit(cache=True)
def pw_push_rows(h, rows, now):
    """:func:`pw_push` of every work request of a post to ``h``'s node that may change its memory
    (all but READs; ``rows``: the post's rows, ``shm.nic.WR_*``, priced): its landing window
    (effect to the other end) and bytes, any byte if it is not host memory
    (:meth:`PendingWrites.add_verb`). False, adding none, if the array lacks room for them all."""
    _drop_ended(h, now)
    need = 0
    for i in range(rows.shape[0]):
        if rows[i, WR_OP] != VERB_READ:
            need += 1
    if h[0, 0] + need >= h.shape[0]:
        return False
    for i in range(rows.shape[0]):
        if rows[i, WR_OP] != VERB_READ:
            a = rows[i, WR_OUT]
            b = rows[i, WR_OUT + 2]
            if rows[i, WR_REGION] == REGION_HOST:
                off = rows[i, WR_OFF]
                pw_push(h, min(a, b), max(a, b), off, off + rows[i, WR_LEN], -1)
            else:
                pw_push(h, min(a, b), max(a, b), 0, ALL_BYTES, -1)
    return True


@njit(cache=True)
def pw_next_change(h, now, floor):
    """:meth:`PendingWrites.next_change` of node array ``h`` (``floor``: ``floor_ns``)."""
    soonest = now + floor
    _drop_ended(h, now)
    if h[0, 0] == 0:
        return soonest
    first = h[1, _FIRST]
    if first <= now:
        return now
    return first if first < soonest else soonest


@njit(cache=True)
def pw_clear_of(h, now, hi, off, end, floor):
    """:meth:`PendingWrites.clear_of` of node array ``h``: walks the heap in preorder, skipping
    the subtree of every entry that starts after ``hi`` (its entries start later still)."""
    if hi >= now + floor:
        return False
    n = h[0, 0]
    if n == 0:
        return True
    k = 1
    while True:
        if h[k, _FIRST] <= hi:
            if h[k, _LAST] >= now and h[k, _OFF] < end and off < h[k, _END]:
                return False             # lands in the window, on these bytes
            if 2 * k <= n:
                k = 2 * k                # into its subtree
                continue
        while True:                      # the subtree at k is done: on to the next one
            if k == 1:
                return True
            if k % 2 == 0 and k + 1 <= n:
                k += 1
                break
            k //= 2


@njit(cache=True)
def land_read_whole(h, floor, now, peek, hi, mrt, key, off, length, rbuf, rlocks, lbuf, loff):
    """:func:`begin_landing`'s first test for a multi-line READ of host memory whose window ends
    at ``hi``, and its landing when the test passes, in one call from a coroutine's landing
    (shm/coro.py ``VerbBatch._land_lines``): every line lands now if the last one is due before
    the node's next change (``pw_next_change``; when a write is landing right now, the
    environment's next entry, ``peek``) or if nothing may change its bytes meanwhile
    (``pw_clear_of``). Returns 1 (landed), 0 (the rkey refused: nothing touched) or -1 (a write
    may land inside the window: the caller makes a :class:`Landing`)."""
    bound = pw_next_change(h, now, floor)
    if bound <= now:
        bound = peek
    if hi < bound or pw_clear_of(h, now, hi, off, off + length, floor):
        return 1 if remote_read_write(True, mrt, key, REGION_HOST, off, length, rbuf, rlocks, lbuf, loff, False) else 0
    return -1


def land_read_whole_entry(fabric, lbuf):
    """:func:`land_read_whole`'s entry point (shm/kernels.py) for ``fabric``'s host memory and
    local buffers of ``lbuf``'s type."""
    mem = fabric.memory[0]
    return entry(land_read_whole, np.zeros((2, 4), np.int64), 0, 0, 0, 0, mem.mrt, 0, 0, 0, mem.host, mem.host_locks,
                 lbuf, 0)


class PendingWrites:
    """When each node's memory next changes, as far as this process knows: the landing windows
    ``(first, last)`` (ns) of the WRITEs, atomics and SENDs it has posted (and DMA writes, atomic
    write-backs), with the bytes ``[off, end)`` each may change, one heap per node ordered by
    ``first`` (``heaps``: node -> its int64 array, see above). Entries whose window has passed
    are dropped as they reach the top, and when a node's array is full."""

    __slots__ = ("heaps", "floor_ns", "push_rows")

    def __init__(self, floor_ns: int = 0):
        self.heaps: dict[int, np.ndarray] = {}
        self.push_rows = None           # pw_push_rows' entry point for the rows' type (add_rows)
        # no write posted from now on lands sooner than this after now (a PCIe crossing and the
        # wire at least), so it bounds what a READ may land at once without looking again
        self.floor_ns = floor_ns

    def heap(self, node: int) -> np.ndarray:
        """Node ``node``'s array (made empty on first use)."""
        h = self.heaps.get(node)
        if h is None:
            h = self.heaps[node] = np.zeros((_ROWS0 + 1, 4), np.int64)
        return h

    def add(self, node: int, a: int, b: int, off: int = 0, end: int = ALL_BYTES, now: int = -1) -> None:
        """A write to bytes ``[off, end)`` of ``node``'s host memory landing between ``a`` and ``b``
        (ns, either order); without a range, to any byte (a write to device memory, say, which
        host READs need not wait for but conservatively do). ``now``: the caller's time (entries
        ended before it may be dropped)."""
        h = self.heaps.get(node)
        if h is None:
            h = self.heap(node)
        if a > b:
            a, b = b, a
        if not pw_push(h, a, b, off, end, now):
            self._grow(node, now)
            pw_push(self.heaps[node], a, b, off, end, now)

    def _grow(self, node: int, now: int, room: int = 1) -> None:
        """Node ``node``'s array is full: keep the entries whose window reaches ``now``, sorted (a
        sorted array is a heap), in an array twice as large as they and ``room`` more need."""
        h = self.heaps[node]
        rows = h[1:h[0, 0] + 1]
        rows = rows[rows[:, _LAST] >= now]
        rows = rows[np.lexsort((rows[:, _END], rows[:, _OFF], rows[:, _LAST], rows[:, _FIRST]))]
        n = rows.shape[0]
        g = np.zeros((max(h.shape[0] - 1, 2 * (n + room)) + 1, 4), np.int64)
        g[1:n + 1] = rows
        g[0, 0] = n
        self.heaps[node] = g

    def add_verb(self, node: int, a: int, b: int, addr: int, length: int, now: int = -1) -> None:
        """A one-sided WRITE or atomic of ``length`` bytes at global address ``addr`` (on ``node``),
        landing between ``a`` and ``b``: its bytes if they are host memory; a write to NIC device
        memory, another array, cannot change what a host READ returns, but counts as any byte."""
        if addr >> OFFSET_BITS & REGION_MASK == REGION_HOST:
            off = addr & OFFSET_MASK
            self.add(node, a, b, off, off + length, now)
        else:
            self.add(node, a, b, 0, ALL_BYTES, now)

    def add_rows(self, node: int, rows, now: int = -1) -> None:
        """:meth:`add_verb` of each work request of ``rows`` (a post to ``node``: ``shm.nic.WR_*``
        columns, priced) but READs, in one compiled call (``pw_push_rows``). ``rows`` must be a
        C-contiguous int64 array, as a coroutine's batch rows are: the call is entered without
        numba's typing of its arguments (shm/kernels.py)."""
        h = self.heaps.get(node)
        if h is None:
            h = self.heap(node)
        push = self.push_rows
        if push is None:
            push = self.push_rows = entry(pw_push_rows, h, rows, 0)
        if not push(h, rows, now):
            self._grow(node, now, int((rows[:, WR_OP] != VERB_READ).sum()))
            push(self.heaps[node], rows, now)

    def clear_of(self, node: int, now: int, hi: int, off: int, end: int) -> bool:
        """True if nothing may change bytes ``[off, end)`` of ``node`` from ``now`` through ``hi``:
        no write posted from now on lands that soon (``floor_ns``), and no known one whose window
        reaches ``now`` and starts by ``hi`` touches those bytes. A READ's lines may then all land
        at ``now`` (exactly what landing each at its own time returns). Walks only the heap's
        entries that start by ``hi`` (a subtree at its top: usually one or two)."""
        h = self.heaps.get(node)
        if h is None:
            return hi < now + self.floor_ns
        return pw_clear_of(h, now, hi, off, end, self.floor_ns)

    def next_change(self, node: int, now: int) -> int:
        """The earliest time >= ``now`` at which a write may change ``node``'s memory (``now`` while
        one is landing): a known one, or one posted from now on (``floor_ns`` away at least)."""
        h = self.heaps.get(node)
        if h is None:
            return now + self.floor_ns
        return pw_next_change(h, now, self.floor_ns)

    def entries(self, node: int) -> list:
        """Node ``node``'s entries ``(first, last, off, end)``, in no particular order."""
        h = self.heaps.get(node)
        return [] if h is None else [tuple(r) for r in h[1:h[0, 0] + 1].tolist()]


def pending_writes_of(fabric) -> PendingWrites:
    """The process's :class:`PendingWrites` for ``fabric`` (one per process: a fabric object is)."""
    pw = getattr(fabric, "_pending_writes", None)
    if pw is None:
        p = fabric.profile
        pw = fabric._pending_writes = PendingWrites(min(p.link.one_way_ns, p.pcie.latency_ns))
    return pw
