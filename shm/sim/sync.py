"""Lax synchronisation of several OS processes' virtual clocks through shared memory.

Each emulated node runs its own :class:`~shm.sim.env.Environment` in its
own OS process.  They stay within a window ``W`` of each other through a
shared **clock table**:

* Slot ``i`` holds the time of process ``i``'s next event (``INF`` = idle),
  and beside it (same cache line) two *frontiers*: the earliest time process
  ``i`` may still touch memory other processes see, and the earliest it may
  still change it (``Environment.frontiers()``: a pending verb effect, DMA or
  message delivery, or the next event plus the process's *lookahead*, the
  least delay from an event to an effect it causes).  Before running an event
  at ``t``, process ``i`` requires ``t <= min(write frontier[j], j != i) + W``,
  and for a write ``t <= min(frontier[j], j != i) + W``: two processes'
  conflicting accesses (one of them a write) keep their virtual order up to
  ``W``, and READs never wait for READs.  Otherwise it waits adaptively: for
  up to ``spin_us`` of real time (profile ``sync.spin_us``) it re-checks,
  yielding its core between checks (``sched_yield``: a process that has work
  on an oversubscribed machine runs, an idle core is not given away), then
  parks in sleeps of 10 µs doubling to 1 ms.  It spins only while the moving
  average of its waits is below ``spin_us``: an idle node, or a machine with
  fewer cores than busy nodes, makes waits long, and then it parks at once.
  Most waits of a rack with a core per busy node end within a few refreshes; a
  sleep, even ``sleep(0)`` after a few, wakes tens of µs late and leaves the
  process asleep while its peers wait for *its* clock, so without the spin a
  rack of processes ran slower than the same rack co-located in one process.
  The check is done against a cached *horizon* and refreshed every ``POLL_EVENTS`` events; a
  write scheduled meanwhile beyond the write horizon lowers it (``note_write``).
* **Asked publishing.** A process publishes its clock and frontiers at its refreshes only, so a
  peer blocked on it used to wait for its next routine refresh, up to ``POLL_EVENTS`` events of
  real work (~50 µs of the ~60 µs an average wait took with two busy compute nodes). A blocked
  process therefore writes into each process it waits for the time it needs that one's frontier
  to reach (``ASKED``, ``fetch_min``: the earliest of several askers wins); the hot loop reads its
  own ``ASKED`` word before each event (one plain load, ~30 ns beside the event's µs) and
  refreshes as soon as its next event is there, since frontiers never precede the next event.
  Every refresh resets the word. The rule of what may run is unchanged: a process only publishes
  sooner. Measured on 2 cores (``examples/minimal.toml`` as processes, 40 virtual ms): each
  compute node waited 0.8 s instead of 1.4 s, 86-88k -> 96-98k verbs/s.
  Frontiers never precede the next event, so the process with the earliest
  next event can always run: no deadlock.
* Messages: ``send(dest, arrival, payload)`` does FAA(``sent``), pushes
  ``[arrival, src, nwords, payload...]`` into ``dest``'s inbox ring, then
  ``fetch_min`` of ``dest``'s clock and frontiers to ``arrival`` so nobody runs
  past ``arrival + W`` before the receiver has seen the message (a delivery
  counts as a write: a SEND's payload lands then).  The receiver delivers it at
  ``max(arrival, now)`` by calling ``env.on_message(src, payload)`` as a
  scheduled callback.  If every sender publishes its current time before it
  sends, a message whose latency is ``>= W`` is always delivered exactly at its
  arrival time (the receiver cannot have run past it: it reads clocks, then
  drains).  Shorter latencies may be delivered up to ``W`` late: that is the
  price of laxness.
* A refresh is ``swap(my slot, next)`` (a full fence), read the others'
  clocks, then drain the inbox.  Store-then-drain closes the lost-wake race
  with a sender's push + fetch_min; repeating while messages arrive gives
  "drain -> store -> drain again".  A stale fetch_min that lands after we
  consumed its message only makes our slot too low (conservative) until the
  next refresh overwrites it.
* Draining does ``fetch_min(my slot, delivery time)`` *before* FAA(``consumed``):
  a process that consumed a message is visibly busy before the consumption is
  counted.  That is what makes the termination test below sound.
* Termination of ``run(until=T)`` (``T = INF-1`` for ``until=None``): a process
  whose next event is later than ``T`` (or which has none) publishes that
  next time (``INF`` if none) and keeps draining its inbox.  It is finished
  when it reads ``consumed``, then sees every slot ``> T``, then reads
  ``sent``, and ``sent == consumed``.  Both counters are monotone and
  ``consumed <= sent``, so equality means no send and no consumption happened
  between the two reads, nothing was in flight, and every process was past
  ``T`` or idle at once; nobody can then create an event ``<= T`` (a message
  sent at time ``s > T`` arrives at ``>= s > T``).  Publishing the true next
  time rather than ``INF`` keeps the window honest across consecutive
  ``run(until=...)`` calls: a process past ``T`` neither blocks the others
  (they only run up to ``T``) nor lets them race ahead afterwards.
* A shared ``stop`` word ends every run() promptly (checked at every refresh).
* Clocks start at 0, not INF: nobody runs ahead before everyone has started,
  so every process of the table must take part (or call :meth:`ClockSync.leave`).

The shared-memory work of one refresh, one send and one termination test is a
single numba call each (atomics from ``shm.atomics``, rings from ``shm.ring``).
"""
from __future__ import annotations

import os
import time
from heapq import heappush
from typing import NamedTuple

import numpy as np
from numba import njit

from shm.atomics import faa, fetch_min, load_acquire, store_release, swap
from shm.ring import Ring, ring_try_pop, ring_try_push
from shm.segment import Segment

from .env import INF

__all__ = ["ClockTable", "ClockSync", "ClockTableStats", "ClockSyncStats"]

STRIDE = 8            # one clock per 64-byte cache line: no false sharing between writers
FRONTIER = 1          # a process's frontiers, next to its clock in the same line: any effect,
FRONTIER_W = 2        # and a write
GONE = 3              # set once a process died (ClockTable.mark_gone): messages to it are dropped
ASKED = 4             # the earliest time a blocked process waits for this one's frontiers to reach
                      # (INF: nobody waits): its run publishes as soon as its next event is there
HDR_WORDS = 3         # message header: arrival, src, nwords
DRAIN_BATCH = 256     # messages taken per refresh; the rest on the next one


class ClockTableStats(NamedTuple):
    n_procs: int
    clocks: tuple
    sent: int
    consumed: int
    stop: bool


class ClockSyncStats(NamedTuple):
    index: int
    window_ns: int
    refreshes: int
    sleeps: int
    wait_s: float
    sent: int
    received: int
    send_retries: int
    spins: int = 0              # checks made while spinning (yielding the core between them)
    waits_spun: int = 0         # waits that ended within the spin
    waits_parked: int = 0       # waits that went on to sleep


# -- jitted cores: one call per refresh / send / termination test -----------------

@njit(cache=True)
def _min_others(clocks, me, n, slot):
    """The smallest of the other processes' clocks (``slot`` 0) or frontiers (FRONTIER, FRONTIER_W)."""
    m = INF
    for j in range(n):
        if j != me:
            c = load_acquire(clocks, j * STRIDE + slot)
            if c < m:
                m = c
    return m


@njit(cache=True)
def _refresh_core(clocks, me, n, pub, front, front_w, hdr, seqs, slots, out, now, consumed_i, stop_i):
    """Publish our clock ``pub`` and frontiers; return (min of others' frontiers of any effect,
    of writes, messages drained, stop flag)."""
    swap(clocks, me * STRIDE + ASKED, INF)    # what we publish now answers whoever asked
    swap(clocks, me * STRIDE + FRONTIER, front)
    swap(clocks, me * STRIDE + FRONTIER_W, front_w)
    swap(clocks, me * STRIDE, pub)            # full fence: store before the loads below
    m = _min_others(clocks, me, n, FRONTIER)
    m_w = _min_others(clocks, me, n, FRONTIER_W)
    k = 0
    first = INF
    while k < out.shape[0] and ring_try_pop(hdr, seqs, slots, out[k]):
        a = np.int64(out[k, 0])
        if a < first:
            first = a
        k += 1
    if k:
        # Visibly busy (slot <= delivery time) before the consumption counts.
        _lower(clocks, me, max(first, now))
        faa(clocks, consumed_i, k)
    return m, m_w, k, load_acquire(clocks, stop_i)


@njit(cache=True)
def _ask(clocks, me, n, slot, need):
    """We wait until the others' frontiers (``slot``) reach ``need``: ask each one still short of
    it, whose own next event is short of it too, to publish as soon as its next event gets there
    (its frontiers are never before its next event). One whose next event is already past
    ``need`` waits for something else (a READ deferred past its time): asking it is no use."""
    for j in range(n):
        if j != me and load_acquire(clocks, j * STRIDE + slot) < need \
                and load_acquire(clocks, j * STRIDE) < need \
                and load_acquire(clocks, j * STRIDE + ASKED) > need:
            fetch_min(clocks, j * STRIDE + ASKED, need)


@njit(cache=True)
def _lower(clocks, i, t):
    """Process ``i`` has something to do at ``t`` (a message): its clock and frontiers drop to it."""
    fetch_min(clocks, i * STRIDE + FRONTIER, t)
    fetch_min(clocks, i * STRIDE + FRONTIER_W, t)
    fetch_min(clocks, i * STRIDE, t)


@njit(cache=True)
def _send_core(clocks, dest, sent_i, count_it, hdr, seqs, slots, msg):
    if count_it:
        faa(clocks, sent_i, 1)                # before the push: consumed <= sent always
    if not ring_try_push(hdr, seqs, slots, msg):
        return False
    _lower(clocks, dest, msg[0])
    return True


@njit(cache=True)
def _leave(clocks, i):
    """Process ``i`` holds nobody back any more."""
    swap(clocks, i * STRIDE + FRONTIER, INF)
    swap(clocks, i * STRIDE + FRONTIER_W, INF)
    swap(clocks, i * STRIDE, INF)


@njit(cache=True)
def _discard(clocks, i, consumed_i, hdr, seqs, slots, out):
    """Process ``i`` is gone: it holds nobody back (INF), and what waits in its inbox is taken and
    counted as consumed, since nobody else ever will (an uncounted message would keep the rack's
    termination test, ``sent == consumed``, from ever passing). The ring is multi-consumer, so any
    process may do this, as often as it likes."""
    _leave(clocks, i)
    k = 0
    while ring_try_pop(hdr, seqs, slots, out):
        k += 1
    if k:
        faa(clocks, consumed_i, k)
    return k


@njit(cache=True)
def _finished_core(clocks, n, limit, sent_i, consumed_i):
    c = load_acquire(clocks, consumed_i)
    for j in range(n):
        if load_acquire(clocks, j * STRIDE) <= limit:
            return False
    return load_acquire(clocks, sent_i) == c




class ClockTable:
    """Shared clocks, counters, stop flag and one inbox ring per process."""

    def __init__(self, seg: Segment, inboxes: list, n_procs: int, payload_words: int):
        self._seg = seg
        self.n_procs = n_procs
        self.payload_words = payload_words
        self.clocks = seg.array(np.int64)
        self.inboxes = inboxes
        self.sent_i = n_procs * STRIDE
        self.consumed_i = (n_procs + 1) * STRIDE
        self.stop_i = (n_procs + 2) * STRIDE

    @classmethod
    def create(cls, n_procs: int, *, prefix: str, inbox_capacity: int = 4096,
               payload_words: int = 8, name: str = "sync") -> "ClockTable":
        if n_procs < 1:
            raise ValueError(f"n_procs must be >= 1, got {n_procs}")
        seg = Segment.create(f"{name}-clock", (n_procs + 3) * STRIDE * 8, prefix=prefix)
        inboxes = []
        try:
            clocks = seg.array(np.int64)
            clocks[:] = 0                    # clocks start at 0: nobody races ahead at startup
            clocks[ASKED:n_procs * STRIDE:STRIDE] = INF          # and nobody waits yet
            del clocks
            for i in range(n_procs):
                inboxes.append(Ring.create(f"{name}-inbox{i}", inbox_capacity,
                                           HDR_WORDS + payload_words, prefix=prefix,
                                           multi_producer=True))
        except BaseException:
            for r in inboxes:
                r.close()
            seg.close()
            raise
        _warm_up()
        return cls(seg, inboxes, n_procs, payload_words)

    @classmethod
    def attach(cls, names: dict) -> "ClockTable":
        seg = Segment.attach(names["clock"])
        inboxes = [Ring.attach(n) for n in names["inboxes"]]
        _warm_up()
        return cls(seg, inboxes, names["n_procs"], names["payload_words"])

    def names(self) -> dict:
        """Picklable description for :meth:`attach` in another process."""
        return {"clock": self._seg.name, "inboxes": [r.name for r in self.inboxes],
                "n_procs": self.n_procs, "payload_words": self.payload_words}

    def set_stop(self) -> None:
        store_release(self.clocks, self.stop_i, 1)

    @property
    def stop_requested(self) -> bool:
        return bool(load_acquire(self.clocks, self.stop_i))

    def clock(self, i: int) -> int:
        return int(load_acquire(self.clocks, i * STRIDE))

    def mark_gone(self, i: int) -> None:
        """Process ``i`` died: publish INF for it so it holds nobody back (as ``leave`` would have)."""
        if not 0 <= i < self.n_procs:
            raise ValueError(f"index {i} outside 0..{self.n_procs - 1}")
        swap(self.clocks, i * STRIDE + GONE, 1)   # a full fence: ordered before the discard below
        self.discard(i)

    def discard(self, i: int) -> int:
        """A gone process's slot to INF and its inbox emptied (counted as consumed): see
        ``_discard``. Returns the messages thrown away."""
        hdr, seqs, slots = self.inboxes[i].views()
        out = np.zeros(HDR_WORDS + self.payload_words, dtype=np.uint64)
        return int(_discard(self.clocks, i, self.consumed_i, hdr, seqs, slots, out))

    def rejoin(self, i: int, t: int) -> None:
        """A new process takes the gone process ``i``'s place at virtual time ``t`` (a restarted
        node): its clock and frontiers become ``t``, so nobody runs past ``t + W`` before it has
        started, then it is no longer gone (messages to it are pushed again). Called by a process
        that holds the rack at ``t`` meanwhile (the manager, inside its restart step)."""
        if not 0 <= i < self.n_procs:
            raise ValueError(f"index {i} outside 0..{self.n_procs - 1}")
        if not self.gone(i):
            raise ValueError(f"process {i} is not gone")
        self.discard(i)                          # whatever a racing sender left
        for slot in (FRONTIER, FRONTIER_W, 0):
            swap(self.clocks, i * STRIDE + slot, int(t))
        swap(self.clocks, i * STRIDE + GONE, 0)
        # A sender whose send() began before the process was marked gone and checks again only
        # now may have discarded after our stores (its _leave: INF): hold the slot at t again.
        # (One that checks later still sees GONE clear and leaves the slot alone.)
        _lower(self.clocks, i, int(t))

    def gone(self, i: int) -> bool:
        return bool(load_acquire(self.clocks, i * STRIDE + GONE))

    def close(self) -> None:
        """Unmap; the creating process also unlinks the segments."""
        if self.clocks is None:
            return
        self.clocks = None                    # drop our view before the segment unmaps
        for r in self.inboxes:
            r.close()
        self._seg.close()

    def statistics(self) -> ClockTableStats:
        c = self.clocks
        return ClockTableStats(self.n_procs, tuple(int(c[i * STRIDE]) for i in range(self.n_procs)),
                               int(c[self.sent_i]), int(c[self.consumed_i]), bool(c[self.stop_i]))


class ClockSync:
    """Process ``index``'s view of a :class:`ClockTable`; pass it to ``Environment(sync=...)``."""

    def __init__(self, table: ClockTable, index: int, window_ns: int, spin_us: float = 0.0):
        if not 0 <= index < table.n_procs:
            raise ValueError(f"index {index} outside 0..{table.n_procs - 1}")
        if window_ns < 0:
            raise ValueError(f"negative window {window_ns}")
        if not spin_us >= 0:
            raise ValueError(f"negative spin {spin_us}")
        self.table = table
        self.index = index
        self.window = int(window_ns)
        self.spin_s = spin_us / 1e6
        self.env = None
        self.horizon = -1            # read by the env's hot loop; refreshed by refresh()
        self.horizon_w = -1          # how far our writes may run (see refresh())
        self.stopped = False         # why the last refresh() returned -1
        self._clocks = table.clocks
        self._n = table.n_procs
        self._inbox = table.inboxes[index].views()
        self._outboxes = [r.views() for r in table.inboxes]
        pw = table.payload_words
        self._pw = pw
        self._out = np.zeros((DRAIN_BATCH, HDR_WORDS + pw), dtype=np.uint64)
        self._msg = np.zeros(HDR_WORDS + pw, dtype=np.int64)
        self.sent = 0
        self.received = 0
        self.refreshes = 0
        self.sleeps = 0
        self.wait_s = 0.0
        self.send_retries = 0
        self.spins = self.waits_spun = self.waits_parked = 0
        # Moving average of this process's waits (real s, weight 1/8 for the newest): spinning is
        # worth it only while waits are short. On a machine with fewer cores than busy nodes, or
        # for an idle node, waits run long and the process parks at once, as it did before the
        # spin existed, instead of taking a core from the peer it waits for.
        self._wait_avg = 0.0
        self.dropped_gone = 0
        self.leave_on_failure = False   # fail(): mark this process gone instead of stopping the rack

    def bind(self, env) -> None:
        """Make ``env`` the environment this sync drives (its constructor calls this, once)."""
        if self.env is not None:
            raise RuntimeError("this ClockSync already drives an Environment")
        self.env = env

    # -- the env's side ------------------------------------------------------------
    def refresh(self, until_t: int) -> int:
        """Publish our next time, take messages, and wait until the next event may run.

        Returns the horizon (run events up to it), or -1 when this run is over
        (termination test passed or stop flag set; ``self.stopped`` tells which).
        """
        env = self.env
        clocks = self._clocks
        table = self.table
        hdr, seqs, slots = self._inbox
        sleeps = spins = 0
        parked = False
        delay = 1e-5
        t_block = t_spin = None      # when this wait / its current spin began (perf_counter)
        self.refreshes += 1
        try:
            while True:
                nxt = env.peek()
                front, front_w = env.frontiers()
                m, m_w, k, stop = _refresh_core(clocks, self.index, self._n, nxt, front, front_w, hdr, seqs, slots,
                                                self._out, env.now, table.consumed_i, table.stop_i)
                if k:
                    self._deliver_batch(k)
                    self.sleeps += sleeps
                    sleeps, delay, t_spin = 0, 1e-5, None    # news: spin again before parking
                    continue                   # our next time may have changed: republish
                if stop:
                    self.stopped = True
                    return -1
                horizon = self._horizon(m, m_w)
                if nxt <= until_t:
                    if nxt <= horizon:
                        self.horizon = horizon
                        return horizon
                    # Blocked: ask the processes we wait for to publish as soon as they can
                    # unblock us, rather than at their next routine refresh (ASKED).
                    window = self.window
                    if nxt > m_w + window:           # READs wait for the others' writes
                        _ask(clocks, self.index, self._n, FRONTIER_W, nxt - window)
                    else:                            # our own write waits for the others' accesses
                        _ask(clocks, self.index, self._n, FRONTIER, horizon + 1 - window)
                elif _finished_core(clocks, self._n, until_t, table.sent_i, table.consumed_i):
                    self.stopped = False
                    return -1
                deferred = env.deferred_reads
                if deferred is not None and deferred.land_past(min(nxt, horizon + 1)):
                    # Blocked or idle with READs deferred past their time, which may be what the
                    # others wait for: they land (as a READ at that time could run by now,
                    # shm/deferred.py), and our frontier is published again without them.
                    continue
                # Blocked by a slower process, or idle: check again for up to spin_s (the core
                # yielded between checks), then park in growing sleeps (the module docstring).
                t = time.perf_counter()
                if t_block is None:
                    t_block = t
                if t_spin is None:
                    t_spin = t
                if t - t_spin < self.spin_s and self._wait_avg < self.spin_s:
                    _yield()
                    spins += 1
                    continue
                time.sleep(delay)
                delay = min(delay * 2, 1e-3)
                sleeps += 1
                parked = True
        finally:
            if t_block is not None:
                waited = time.perf_counter() - t_block
                self.wait_s += waited
                self._wait_avg += (waited - self._wait_avg) / 8
                if parked:
                    self.waits_parked += 1
                else:
                    self.waits_spun += 1
            self.sleeps += sleeps
            self.spins += spins

    def asked(self) -> memoryview:
        """This process's ASKED word as an int64 memoryview (``asked[0]``: a plain read, ~30 ns
        from Python against ~60 for a numpy element): the event loop reads it before every event.
        Release it when the run ends (the clock segment cannot unmap while it is exported)."""
        i = self.index * STRIDE + ASKED
        return memoryview(self._clocks[i:i + 1])

    def _horizon(self, m: int, m_w: int) -> int:
        """How far this process may run, given the others' earliest effects ``m`` and writes
        ``m_w``: a READ (or an entry touching no shared memory) up to ``m_w + W``, since READs
        never conflict with READs; a write up to ``m + W``. So our own pending writes later than
        ``m + W`` stop the run just before them (and so does a write posted meanwhile:
        :meth:`note_write`)."""
        window = self.window
        horizon = m_w + window
        horizon_w = self.horizon_w = m + window
        if horizon > horizon_w:
            for t in self.env.pending_writes():
                if horizon_w < t <= horizon:
                    horizon = t - 1
        return horizon

    def note_write(self, t: int) -> None:
        """A write was scheduled at ``t``: the run stops before it unless it may run."""
        if self.horizon_w < t <= self.horizon:
            self.horizon = t - 1

    def _deliver_batch(self, k: int) -> None:
        env = self.env
        heap, seq = env.event_queue()
        now = env.now
        deliver = self._deliver
        for row in self._out[:k].view(np.int64).tolist():
            a, src, nw = row[0], row[1], row[2]
            heappush(heap, (a if a > now else now, seq(), deliver, (src, tuple(row[3:3 + nw]))))
            env.effect_at(a if a > now else now)   # a message may write (a SEND's payload lands then)

    def _deliver(self, src_payload) -> None:
        self.received += 1
        self.env.on_message(*src_payload)

    def send(self, dest: int, arrival_ns: int, payload) -> None:
        n = len(payload)
        if n > self._pw:
            raise ValueError(f"payload of {n} words exceeds payload_words={self._pw}")
        if not 0 <= dest < self._n:
            raise ValueError(f"destination {dest} outside 0..{self._n - 1}")
        if dest != self.index and load_acquire(self._clocks, dest * STRIDE + GONE):
            # the receiver died: nobody will take it (and counting it would keep the rack from
            # ever seeing every message consumed)
            self.dropped_gone += 1
            return
        self.sent += 1
        if dest == self.index:
            # To ourselves: no shared memory needed, same delivery rule.
            env = self.env
            env.schedule(arrival_ns, self._deliver, (dest, tuple(payload)))   # (clamped to now)
            env.effect_at(max(arrival_ns, env.now))
            return
        msg = self._msg
        msg[:HDR_WORDS + n] = (arrival_ns, self.index, n, *payload)
        hdr, seqs, slots = self._outboxes[dest]
        table = self.table
        if not _send_core(self._clocks, dest, table.sent_i, True, hdr, seqs, slots, msg):
            # Inbox full.  Keep taking our own messages meanwhile, or two
            # processes sending to each other's full inboxes would deadlock.
            delay = 1e-5
            t0 = time.perf_counter()
            while not _send_core(self._clocks, dest, table.sent_i, False, hdr, seqs, slots, msg):
                if load_acquire(self._clocks, dest * STRIDE + GONE):
                    self.dropped_gone += 1      # died while its inbox was full: it never drains
                    faa(self._clocks, table.consumed_i, 1)   # the send above was counted: balance it
                    break
                self.send_retries += 1
                self._drain_only()
                time.sleep(delay)
                delay = min(delay * 2, 1e-3)
            self.wait_s += time.perf_counter() - t0
        if load_acquire(self._clocks, dest * STRIDE + GONE):
            # It was marked gone while we pushed (after the check above): our fetch_min may have
            # lowered its INF again, and our message may sit in an inbox nobody drains. Undo both
            # (mark_gone sets GONE with a full fence before its own discard, and our push and
            # fetch_min precede this load, so one of the two discards sees the message).
            self.dropped_gone += self.table.discard(dest)
            return
        # The receiver's clock may now be as low as arrival: so is our horizon.
        h = arrival_ns + self.window
        if h < self.horizon:
            self.horizon = h

    def _drain_only(self) -> None:
        env = self.env
        hdr, seqs, slots = self._inbox
        nxt = min(env.peek(), env.now)     # we are mid-event: never publish later than now
        front, front_w = env.frontiers()
        _, _, k, _ = _refresh_core(self._clocks, self.index, self._n, nxt, min(front, env.now), min(front_w, env.now),
                                   hdr, seqs, slots, self._out, env.now, self.table.consumed_i, self.table.stop_i)
        if k:
            self._deliver_batch(k)

    # -- user helpers --------------------------------------------------------------
    def min_others(self) -> int:
        """Smallest clock published by the other processes (INF if none)."""
        return int(_min_others(self._clocks, self.index, self._n, 0))

    def min_frontier_others(self) -> int:
        """Smallest effect frontier published by the other processes (INF if none): what the
        window is measured from. A refresh publishes its frontiers before its clock, so a reader
        between the two stores sees a frontier already past the clock beside it."""
        return int(_min_others(self._clocks, self.index, self._n, FRONTIER))

    def request_stop(self) -> None:
        self.table.set_stop()

    def fail(self, exc: BaseException | None = None) -> None:
        """This process's run raised ``exc``. By default every process's run ends (the stop flag);
        with ``leave_on_failure`` (a rack with ``on_node_death = "continue"``: True, or a predicate
        of the exception) the process is marked gone instead (INF, inbox discarded, messages to it
        dropped), so the others carry on in virtual time as if it had been killed."""
        leave = self.leave_on_failure
        if callable(leave):
            leave = leave(exc)
        if leave:
            self.table.mark_gone(self.index)
        else:
            self.request_stop()

    def leave(self) -> None:
        """Publish INF for good: this process takes no further part (does not hold others back)."""
        _leave(self._clocks, self.index)

    def statistics(self) -> ClockSyncStats:
        return ClockSyncStats(self.index, self.window, self.refreshes, self.sleeps, self.wait_s,
                              self.sent, self.received, self.send_retries, self.spins, self.waits_spun,
                              self.waits_parked)


_yield = getattr(os, "sched_yield", None) or (lambda: time.sleep(0))    # sched_yield: not on every platform

_warm = False


def _warm_up() -> None:
    """Compile (or load from cache) the jitted cores once, before any fork."""
    global _warm
    if _warm:
        return
    clocks = np.zeros(4 * STRIDE, dtype=np.int64)
    hdr = np.zeros(24, dtype=np.int64)
    hdr[1] = 2
    seqs = np.arange(2, dtype=np.int64)
    slots = np.zeros((2, 4), dtype=np.uint64)
    out = np.zeros((2, 4), dtype=np.uint64)
    msg = np.zeros(4, dtype=np.int64)
    _refresh_core(clocks, 0, 1, 5, 5, 5, hdr, seqs, slots, out, 0, STRIDE, 2 * STRIDE)
    _leave(clocks, 0)
    _send_core(clocks, 0, STRIDE, True, hdr, seqs, slots, msg)
    _finished_core(clocks, 1, 5, STRIDE, 2 * STRIDE)
    _discard(clocks, 0, STRIDE, hdr, seqs, slots, out[0])
    _min_others(clocks, 0, 1, 0)
    _ask(clocks, 0, 1, FRONTIER, 5)
    _warm = True
