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

from heapq import heappop, heappush

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


class PendingWrites:
    """When each node's memory next changes, as far as this process knows: the landing windows
    ``(first, last)`` (ns) of the WRITEs, atomics and SENDs it has posted (and DMA writes, atomic
    write-backs), with the bytes ``[off, end)`` each may change, one heap per node ordered by
    ``first``. Entries whose window has passed are dropped as they reach the top."""

    __slots__ = ("heaps", "floor_ns")

    def __init__(self, floor_ns: int = 0):
        self.heaps: dict[int, list] = {}
        # no write posted from now on lands sooner than this after now (a PCIe crossing and the
        # wire at least), so it bounds what a READ may land at once without looking again
        self.floor_ns = floor_ns

    def add(self, node: int, a: int, b: int, off: int = 0, end: int = ALL_BYTES) -> None:
        """A write to bytes ``[off, end)`` of ``node``'s host memory landing between ``a`` and ``b``
        (ns, either order); without a range, to any byte (a write to device memory, say, which
        host READs need not wait for but conservatively do)."""
        h = self.heaps.get(node)
        if h is None:
            h = self.heaps[node] = []
        heappush(h, (a, b, off, end) if a <= b else (b, a, off, end))

    def add_verb(self, node: int, a: int, b: int, addr: int, length: int) -> None:
        """A one-sided WRITE or atomic of ``length`` bytes at global address ``addr`` (on ``node``),
        landing between ``a`` and ``b``: its bytes if they are host memory; a write to NIC device
        memory, another array, cannot change what a host READ returns, but counts as any byte."""
        if addr >> OFFSET_BITS & REGION_MASK == REGION_HOST:
            off = addr & OFFSET_MASK
            self.add(node, a, b, off, off + length)
        else:
            self.add(node, a, b)

    def clear_of(self, node: int, now: int, hi: int, off: int, end: int) -> bool:
        """True if nothing may change bytes ``[off, end)`` of ``node`` from ``now`` through ``hi``:
        no write posted from now on lands that soon (``floor_ns``), and no known one whose window
        reaches ``now`` and starts by ``hi`` touches those bytes. A READ's lines may then all land
        at ``now`` (exactly what landing each at its own time returns). Walks only the heap's
        entries that start by ``hi`` (a subtree at its top: usually one or two)."""
        if hi >= now + self.floor_ns:
            return False
        h = self.heaps.get(node)
        if not h:
            return True
        stack = [0]
        n = len(h)
        while stack:
            i = stack.pop()
            e = h[i]
            if e[0] > hi:
                continue                 # it and the entries below it start later
            if e[1] >= now and e[2] < end and off < e[3]:
                return False             # lands in the window, on these bytes
            i = 2 * i + 1
            if i < n:
                stack.append(i)
                if i + 1 < n:
                    stack.append(i + 1)
        return True

    def next_change(self, node: int, now: int) -> int:
        """The earliest time >= ``now`` at which a write may change ``node``'s memory (``now`` while
        one is landing): a known one, or one posted from now on (``floor_ns`` away at least)."""
        soonest = now + self.floor_ns
        h = self.heaps.get(node)
        while h and h[0][1] < now:
            heappop(h)
        if not h:
            return soonest
        first = h[0][0]
        if first <= now:
            return now
        return first if first < soonest else soonest


def pending_writes_of(fabric) -> PendingWrites:
    """The process's :class:`PendingWrites` for ``fabric`` (one per process: a fabric object is)."""
    pw = getattr(fabric, "_pending_writes", None)
    if pw is None:
        p = fabric.profile
        pw = fabric._pending_writes = PendingWrites(min(p.link.one_way_ns, p.pcie.latency_ns))
    return pw
