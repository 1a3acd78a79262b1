"""Cache-coherent shared lines on a multi-core host: what a contended word costs.

Why this module: the host-side costs elsewhere (``cpu.local_read_ns_per_line``,
``cpu.local_cas_ns``) are flat per access, so a word every thread writes costs the same as a word
nobody else touches, and no host data structure can show contention. Here a cache line has an
owner and a set of cores holding a copy, and every access that the core's own cache cannot serve
is a *transfer* from wherever the line is:

* a read by a core that holds a copy is an L1 hit (``l1_ns``);
* a read by a core without a copy fetches it from the nearest holder: a core of the same CCD
  (``intra_ccd_ns``), a core of another CCD (``cross_ccd_ns``), or, if no core holds it (the device
  wrote it by DMA, which invalidates every cached copy), the L3 the DMA write was injected into
  (``dma_line_ns``: EPYC 9004's Smart Data Cache Injection), else memory (``memory_ns``); the line is then
  shared and the writer loses exclusive ownership;
* a write or an atomic needs the line exclusive: a core that already owns it pays an L1 hit, any
  other core pays the transfer from the *farthest* other holder (every copy must be invalidated
  before the write may complete; the nearest one supplies the data, the farthest acknowledges
  last), or memory if nobody holds it; an atomic adds ``atomic_ns``, its own execution, during
  which it keeps the line;
* **transfers of one line are serialised**: a line is busy until its current transfer (or atomic)
  completes, and the next one starts then. That queue is the contention: sixteen cores CASing one
  word take turns, each paying a transfer; sixteen cores reading their own lines do not wait.
  The exception is a read miss on a line nobody owns exclusive (shared or clean in memory): it
  waits for a transfer in progress but does not make the next reader wait, since such a line can
  be supplied by memory, an L3 or any sharer at once and the directory only has to order changes
  of ownership; a read miss on a line another core has modified does serialise (the owner must
  downgrade and supply it).

Accesses are reserved in the order the callers make them (virtual time order: processes run in
time order on :class:`shm.sim.env.Environment`), and the state change (who holds the line)
is applied at reservation; the caller gets back the time its access completes and waits until
then. Times are float nanoseconds (an L1 hit is ~1.4 ns); callers keep a float clock of their own
and wait for ``ceil`` of it, see :class:`CoreClock`.

A forward scan of several lines (``read_many``) issues the misses together, as Zen 4's L1/L2
stream prefetchers do for a sequential walk: it completes when the slowest line arrives, plus one
L1 hit per line for the walk itself. This is an assumption (a scan whose next address depends on
the size read from the previous header is a dependent chain for the core, but the prefetchers
follow the stride of fixed-size records).

What it leaves out (deliberately small): L2/L3 capacity (every line fits), the MOESI state
names, write-back traffic, the device's own DMA costs (its writes only invalidate, its reads only
downgrade), SMT, and different latencies between particular pairs of CCDs. Topology: ``ccds``
CCDs of ``cores_per_ccd`` cores, core ``c`` on CCD ``c // cores_per_ccd``.
"""

from __future__ import annotations

import math
from typing import NamedTuple


class CoherenceCosts(NamedTuple):
    ccds: int
    cores_per_ccd: int
    l1_ns: float
    intra_ccd_ns: float
    cross_ccd_ns: float
    memory_ns: float
    dma_line_ns: float
    atomic_ns: float
    pause_ns: float
    yield_ns: float

    @classmethod
    def from_profile(cls, profile) -> "CoherenceCosts":
        c = getattr(profile, "coherence", None)
        if c is None:
            raise ValueError(f"profile {profile.name!r} has no [coherence] section (only bf3 has one)")
        return cls(c.ccds, c.cores_per_ccd, c.l1_ns, c.intra_ccd_ns, c.cross_ccd_ns, c.memory_ns,
                   c.dma_line_ns, c.atomic_ns, c.pause_ns, c.yield_ns)


class Line:
    """One 64-byte line: the cores holding a copy, the one owning it exclusive (or None), the time
    its current transfer ends, and how many transfers it has served."""
    __slots__ = ("name", "holders", "owner", "free_at", "transfers", "injected")

    def __init__(self, name: str = ""):
        self.name = name
        self.injected = False          # last written by a device's DMA: the L3 has it (dma_line_ns)
        self.holders: set[int] = set()
        self.owner: int | None = None
        self.free_at = 0.0
        self.transfers = 0

    def __repr__(self):
        return f"Line({self.name!r}, owner={self.owner}, holders={sorted(self.holders)})"


class Coherence:
    """The host's cores and the costs of moving lines between them (see the module docstring)."""

    def __init__(self, costs: CoherenceCosts):
        self.c = costs
        self.cores = costs.ccds * costs.cores_per_ccd

    def ccd(self, core: int) -> int:
        return core // self.c.cores_per_ccd

    def spread(self, n: int) -> list[int]:
        """Cores for ``n`` threads spread over the CCDs round-robin (thread i on CCD i % ccds), the
        way Linux's load balancer spreads runnable threads over idle LLC domains."""
        if n > self.cores:
            raise ValueError(f"{n} threads on {self.cores} cores")
        k = self.c.ccds
        return [(i % k) * self.c.cores_per_ccd + i // k for i in range(n)]

    def packed(self, n: int) -> list[int]:
        """Cores 0..n-1: fill one CCD before the next (explicit pinning in core order)."""
        return self.pinned(n, 0)

    def pinned(self, n: int, first: int) -> list[int]:
        """Cores ``first .. first + n - 1``: thread i pinned to core ``first + i``, as an application
        that sets its threads' affinity in core order does. Linux numbers an EPYC's cores CCD by CCD
        (the APIC ID holds the CCD above the core), so consecutive cores fill a CCD before the next."""
        if first < 0 or first + n > self.cores:
            raise ValueError(f"{n} threads pinned from core {first} on {self.cores} cores")
        return list(range(first, first + n))

    def _hop(self, core: int, other: int) -> float:
        return self.c.intra_ccd_ns if self.ccd(core) == self.ccd(other) else self.c.cross_ccd_ns

    def _fetch(self, core: int, line: Line) -> float:
        """Read miss: from the nearest holder, or memory."""
        if not line.holders:
            return self.c.dma_line_ns if line.injected else self.c.memory_ns
        return min(self._hop(core, h) for h in line.holders)

    def read(self, core: int, line: Line, t: float) -> float:
        """A load by ``core`` issued at ``t``; returns when it completes."""
        if core in line.holders:
            return t + self.c.l1_ns
        start = max(t, line.free_at)
        done = start + self._fetch(core, line)
        if line.owner is not None:        # modified elsewhere: the owner downgrades, one at a time
            line.free_at = done
        line.transfers += 1
        line.holders.add(core)
        line.owner = None
        return done

    def read_many(self, core: int, lines, t: float) -> float:
        """A forward scan over ``lines``: the misses overlap (prefetch), each line costs an L1 hit
        for the walk; returns when the scan completes."""
        slowest = t
        n = 0
        for line in lines:
            n += 1
            if core not in line.holders:
                slowest = max(slowest, self.read(core, line, t))
        return max(slowest, t + n * self.c.l1_ns)

    def write(self, core: int, line: Line, t: float, atomic: bool = False) -> float:
        """A store (or, with ``atomic``, a locked read-modify-write) by ``core`` at ``t``."""
        extra = self.c.atomic_ns if atomic else 0.0
        if line.owner == core:
            done = t + self.c.l1_ns + extra
            if atomic:
                line.free_at = max(line.free_at, done)
            return done
        others = [h for h in line.holders if h != core]
        if others:
            cost = max(self._hop(core, h) for h in others)
        elif core in line.holders:
            cost = self.c.l1_ns            # the only copy, clean: upgrade in place
        else:
            cost = self.c.dma_line_ns if line.injected else self.c.memory_ns
        start = max(t, line.free_at)
        done = start + cost + extra
        line.free_at = done
        line.transfers += 1
        line.holders = {core}
        line.owner = core
        return done

    def cas(self, core: int, line: Line, t: float) -> float:
        return self.write(core, line, t, atomic=True)

    @staticmethod
    def device_write(line: Line, t: float) -> None:
        """A DMA write by the device lands at ``t``: every cached copy is invalidated."""
        line.holders = set()
        line.owner = None
        line.injected = True
        line.free_at = max(line.free_at, t)

    @staticmethod
    def device_read(line: Line, t: float) -> None:
        """A DMA read by the device at ``t``: the owner keeps a shared copy (downgrade)."""
        line.owner = None


class CoreClock:
    """A thread's float clock on an :class:`~shm.sim.env.Environment`: ``t`` advances by
    the access costs; :meth:`sync` is the number of ns to ``yield`` so that ``env.now`` catches up
    (call it before every access to a shared line, so reservations are made in time order)."""
    __slots__ = ("env", "t")

    def __init__(self, env):
        self.env = env
        self.t = float(env.now)

    def sync(self) -> int:
        if self.t < self.env.now:
            self.t = float(self.env.now)
        return math.ceil(self.t) - self.env.now
