"""DPA cores and hardware threads in virtual time: who runs when.

A BlueField-3 DPA has ``dpa.cores`` RISC-V cores with ``dpa.threads_per_core`` hardware threads
each, of which ``dpa.usable_threads`` are an application's (DPA-Store §2.3). Each hardware thread is
a process (a generator on :class:`shm.sim.env.Environment`); the core is the resource
the threads of one core share.

Design (and why):

* **A core runs one thread at a time; a stalled thread does not hold it.** A thread holds its core
  only while it computes: ``yield th.compute(ns)`` waits until the core is free, runs ``ns`` on it and
  returns. Everything else a thread waits for -- a DPA-memory miss (``th.load``), a DMA to the host
  (an ``shm.dma.DmaEngine`` event, or ``th.stall(ns)``), a packet -- leaves the core to the other
  ready threads of that core. That is the hardware's switch-on-stall multithreading, at the grain of
  the compute bursts between stalls. Between two bursts of one thread that has no stall in between,
  another ready thread may run first (hardware interleaves threads finely too); switching costs 0 ns
  (assumption: hardware thread switching, no documented penalty).
* **Doorbells first.** A burst started by a packet (doorbell) event -- ``compute(ns, doorbell=True)``
  -- is queued ahead of every ready non-doorbell burst on that core (DPA-Store §3: "the hardware
  scheduler prioritises NIC doorbell events", which costs stitchers mixed with traversers 14% INSERT
  throughput). Among equals, first come first served. A running burst is never preempted.
* **Loads.** ``th.load(addr, n)`` asks the cache model (:class:`nodes.devices.dpa_memory.DpaMemory`)
  for the cost: if every line hits the thread's L1 the load is compute (the core stays busy),
  otherwise the thread stalls for the cost and the core switches.
* **Limits.** More threads than ``dpa.usable_threads`` on a DPA, or more than ``dpa.threads_per_core``
  on one core, is a :class:`DpaError` naming the key.
* **Statistics.** ``DpaCore.statistics()`` (busy time, utilisation, bursts, doorbell bursts,
  switches, time ready threads waited) and ``DpaThread.statistics()`` are immutable records.
"""

from __future__ import annotations

from heapq import heappop, heappush
from itertools import count
from typing import NamedTuple

from nodes.devices.dpa_memory import DpaError, DpaMemory
from shm.profile_schema import Profile

__all__ = ["Dpa", "DpaCore", "DpaThread", "DpaCoreStats", "DpaThreadStats", "DpaError"]


# The DPA CPU work of handling one request packet is the profile's ``dpa.packet_cycles`` (an
# assumption with its reasoning in shm/profiles/bf3.toml); the UDP ping of `dmrack bench devices`,
# the dpa-kv service and DPA-Store's traverser charge it per request (their memory accesses are
# priced by the cache model on top).

class DpaCoreStats(NamedTuple):
    core: int
    now: int
    busy_ns: int          # time a thread computed on the core (up to now)
    bursts: int           # compute bursts started
    doorbell_bursts: int  # ... of which started by a doorbell
    switches: int         # bursts whose thread differs from the previous burst's
    ready_wait_ns: int    # total time bursts waited for the core
    threads: int

    @property
    def utilisation(self) -> float:
        return self.busy_ns / self.now if self.now else 0.0


class DpaThreadStats(NamedTuple):
    thread: int
    core: int
    compute_ns: int
    stall_ns: int
    ready_wait_ns: int
    loads: int


class DpaCore:
    """One DPA core: a non-preemptive priority queue of compute bursts (doorbells first)."""

    def __init__(self, env, index: int, threads_per_core: int):
        self.env = env
        self.index = index
        self.capacity = threads_per_core
        self.threads: list[int] = []
        self._ready: list = []          # (priority, seq, thread, ns, event, queued_at)
        self._seq = count()
        self._running = None            # (thread, started_at) of the burst on the core
        self._last = None
        self._busy = self._bursts = self._db = self._switches = self._wait = 0

    def _add(self, thread: int) -> None:
        if len(self.threads) >= self.capacity:
            raise DpaError(f"DPA core {self.index} already runs {self.capacity} threads: "
                           f"'dpa.threads_per_core' is {self.capacity}")
        self.threads.append(thread)

    def run(self, thread: int, ns: int, *, doorbell: bool = False, on_start=None):
        """An event that fires once ``thread`` has computed ``ns`` on this core."""
        if ns < 0:
            raise ValueError(f"negative compute time {ns}")
        ev = self.env.event()
        entry = (0 if doorbell else 1, next(self._seq), thread, ns, ev, self.env.now, on_start)
        if self._running is None:
            self._start(entry)
        else:
            heappush(self._ready, entry)
        return ev

    def _start(self, entry) -> None:
        prio, _, thread, ns, ev, queued_at, on_start = entry
        env = self.env
        self._running = (thread, env.now)
        self._bursts += 1
        self._db += prio == 0
        if thread != self._last:
            self._switches += self._last is not None
            self._last = thread
        waited = env.now - queued_at
        self._wait += waited
        if on_start is not None:
            on_start(ns, waited)
        env.schedule(env.now + ns, self._done, ev)

    def _done(self, ev) -> None:
        _, started = self._running
        self._busy += self.env.now - started
        self._running = None
        ev.succeed()
        if self._ready:
            self._start(heappop(self._ready))

    def statistics(self) -> DpaCoreStats:
        now = self.env.now
        busy = self._busy + (now - self._running[1] if self._running else 0)
        return DpaCoreStats(self.index, now, busy, self._bursts, self._db, self._switches, self._wait,
                            len(self.threads))


class DpaThread:
    """One hardware thread: what its process yields to compute, load and stall."""

    def __init__(self, dpa: "Dpa", tid: int, core: DpaCore):
        self.dpa = dpa
        self.id = tid
        self.core = core
        self._compute = self._stall = self._wait = self._loads = 0

    def _account(self, ns: int, waited: int) -> None:
        self._compute += ns
        self._wait += waited

    def compute(self, ns: int, *, doorbell: bool = False):
        """Event: ``ns`` of work on this thread's core, after the core is free (doorbells first)."""
        return self.core.run(self.id, ns, doorbell=doorbell, on_start=self._account)

    def stall(self, ns: int):
        """Event: wait ``ns`` off the core (a memory miss, a DMA, ...); the core runs other threads."""
        self._stall += ns
        return self.dpa.env.timeout(ns)

    def load(self, addr: int, nbytes: int, *, write: bool = False, overlap: bool = False):
        """Event: a load (or store) of DPA memory, priced by the cache model. All-L1 hits keep the
        core busy (compute); anything that misses L1 is a stall."""
        mem = self.dpa.memory
        misses = mem.l1_misses       # the model's L1 miss count: did this access miss?
        ns = mem.access(self.id, addr, nbytes, write=write, overlap=overlap)
        self._loads += 1
        return self.compute(ns) if mem.l1_misses == misses else self.stall(ns)

    def dma(self):
        """Event: one DMA access to host memory as a cost alone (``[dma] latency_ns``, off the core).
        A DMA that moves data goes through ``shm.dma.DmaEngine``; yield its event instead."""
        return self.stall(self.dpa.dma_ns)

    def statistics(self) -> DpaThreadStats:
        return DpaThreadStats(self.id, self.core.index, self._compute, self._stall, self._wait, self._loads)


class Dpa:
    """The DPA of one card: its cores, its memory model and its threads (limits checked)."""

    def __init__(self, env, profile: Profile, *, threads: int | None = None, name: str = "dpa"):
        """``threads``: the most threads this DPA hands out (a rack's ``dpa.threads``; default and
        at most ``dpa.usable_threads``)."""
        if profile.dpa is None:
            raise DpaError(f"profile {profile.name!r} has no [dpa] table: the card has no DPA")
        p = self.p = profile.dpa
        if threads is not None and not (type(threads) is int and 1 <= threads <= p.usable_threads):
            raise DpaError(f"{name}: {threads!r} threads: 'dpa.usable_threads' allows 1 to {p.usable_threads}")
        self.limit = p.usable_threads if threads is None else threads
        self.limit_key = "dpa.usable_threads" if threads is None else f"dpa.threads of the rack ({name})"
        self.env = env
        self.dma_ns = profile.dma.latency_ns     # DPA DMA to host memory is the [dma] engine's cost
        self.memory = DpaMemory(p)
        self.cores = [DpaCore(env, i, p.threads_per_core) for i in range(p.cores)]
        self.threads: list[DpaThread] = []

    def thread(self, core: int | None = None) -> DpaThread:
        """A new hardware thread, on ``core`` or else on the core with the fewest threads (the lowest
        index among equals)."""
        p = self.p
        if len(self.threads) >= self.limit:
            raise DpaError(f"DPA thread {len(self.threads)} is one too many: '{self.limit_key}' is {self.limit}")
        if core is None:
            c = min(self.cores, key=lambda c: len(c.threads))
        elif type(core) is int and 0 <= core < p.cores:
            c = self.cores[core]
        else:
            raise DpaError(f"DPA core {core!r} does not exist: 'dpa.cores' is {p.cores}")
        tid = len(self.threads)
        c._add(tid)
        th = DpaThread(self, tid, c)
        self.threads.append(th)
        return th
