"""A tiny SimPy-like discrete-event core: virtual time in integer nanoseconds.

Design (and why):

* One ``heapq`` of plain tuples ``(time_ns, seq, fn, arg)``; running an entry is
  ``fn(arg)``.  Tuples compare element-wise, and ``seq`` is a strictly increasing
  counter, so ties run in scheduling order and ``fn`` is never compared: runs are
  deterministic for a given seed.  No per-entry object is allocated beyond the
  tuple itself, which is what keeps the loop at a few hundred ns per event.
* Processes are generators.  ``yield 10`` (a plain int) is the fast path: it pushes
  the process' cached bound ``_wake`` method straight onto the heap, with no
  Event object at all.  ``yield event`` parks the process in the event's
  callback list, exactly like SimPy.
* ``env.schedule(t, fn, *args)`` is the low-level hook the timing model uses for
  verb effects: one tuple, no Event (more in "The low-level API" below).
* ``env.charge(ns)`` models CPU time spent by the active process without
  yielding: the debt delays the process' next resumption to
  ``max(event time, now + debt)``.
* ``run(until=<int>)`` stops before any event later than ``until``;
  ``run(until=<Event>)`` stops right after that event's callbacks ran (a sentinel
  entry ``(now, -1, ...)`` is pushed, which sorts before everything else, so the
  hot loop has no extra check).
* With ``sync=ClockSync(...)`` the same loop runs inside one of several OS
  processes that synchronise laxly through a shared clock table; see
  ``shm/sim/sync.py`` for the protocol.  The hot loop then only compares
  each event time against a cached horizon and against the time a blocked peer
  asked for (one word of the clock table), and calls into the sync layer every
  ``POLL_EVENTS`` events, when the horizon is reached, or when the peer's time is.
* Words: a *process* is a generator this loop runs (:class:`Process`): a client coroutine of a
  compute thread, a server actor, a device's engine.  An *actor*, everywhere in dmrack, is a
  system's code on a node role (``nodes/actors.py``), which runs as processes here; and an *event*
  is one this scheduler fires (:class:`Event`), not a line of the rack's log
  (``cluster.stats.LogEntry``).
* Errors are never swallowed: an exception escaping a process' generator is
  thrown into the processes waiting on it, or, if none wait, propagates out of
  ``run()`` as a :class:`ProcessError` naming the process.  In sync mode an
  exception escaping ``run()`` also sets the shared stop flag, so the other
  node processes end their runs instead of waiting for this one forever (or,
  with ``ClockSync.leave_on_failure``, marks this process gone: the others
  carry on without it).

The low-level API
-----------------
What device models (``shm/coro.py``, ``shm/verbs.py``, ``shm/landing.py``, ``shm/dma.py``,
``shm/deferred.py``), server actors and node processes use of the core, besides processes,
events and ``run()``.  Nothing outside the core (this module, ``sync.py``, ``router.py``) touches the
privates of :class:`Environment` or :class:`Process` (``tests/test_event_core_api.py`` checks
it); the per-verb members are plain attributes or are fetched once, so using them costs no
Python call per verb, and a compiled per-post path can sit behind the same members: it returns
times, and the entries it schedules are still ``(t, seq, fn, arg)`` tuples on the one queue.

* ``env.now``, ``env.seq_now``: the virtual time (ns) and the sequence number of the entry
  running.  Read-only outside the core; a node that joins a rack at its current virtual time sets
  the clock of its fresh environment once with ``env.start_at(t)``.
* ``env.schedule(t, fn, *args)``: call ``fn(*args)`` at ``t`` (clamped to now).  Per-verb code
  fetches the queue once, ``heap, next_seq = env.event_queue()``, and pushes
  ``heappush(heap, (t, next_seq(), fn, arg))`` itself (``t >= now``: the caller clamps): the same
  entry, without a call.  ``env.peek()`` is the time of the next entry.  ``env.take_seqs(n)``
  draws ``n`` consecutive sequence numbers at once (places for entries kept out of the queue).
  ``env.withdraw(timeout)`` takes a timeout that has not fired out of the queue: a deadline no
  longer needed, which would otherwise still move the clock to its time when popped.
* ``env.seed``: the seed the environment was made with (read-only), from which models derive
  their own random streams.
* ``env.succeed_last(ev, value)``: ``ev.succeed(value)`` as the last action of a heap callback
  (its callbacks run at once when nothing else is due now: one heap round trip less).
* CPU time: ``env.charge(ns)`` charges the active process; ``process.debt_ns`` is what it has
  been charged since it last yielded (it resumes no earlier than ``now + debt_ns``), so
  ``env.now + env.active_process.debt_ns`` (``env.cpu_free_at()``) is when its CPU is free.  A
  model of a core that knows when the process's CPU work ends may raise ``debt_ns`` itself, never lower it (that is
  ``charge()`` without its checks; ``statistics().charged_ns`` counts it either way).
* Sync mode (``env.synced``): an entry that touches memory other processes see is declared with
  ``env.effect_at(t, write)``; a device states the least delay from an event to its effects
  with ``env.limit_lookahead(ns)``; the process's deferred READs (``shm/deferred.py``) are
  registered once with ``env.track_deferred_reads(dr)``.
"""
from __future__ import annotations

import random
from heapq import heapify, heappop, heappush
from itertools import count, islice
from typing import Any, Callable, Iterable, NamedTuple

__all__ = [
    "Environment", "Event", "Process", "Interrupt", "ProcessError",
    "EnvStats", "ProcStats", "all_of", "any_of", "INF",
]

#: "Never": the int64 maximum, also what an idle process publishes in the clock table.
INF = (1 << 63) - 1

#: In sync mode, how many events may run between two visits to the clock table.
#: Small enough that others see our progress often, big enough to amortise the
#: shared-memory round trip (a few µs). With 64, two busy compute nodes fell into
#: a lockstep of sleeps in some runs (half their speed): each saw the other's
#: clock up to ~800 virtual ns stale and hit its horizon; 16 kept them apart.
POLL_EVENTS = 16


class ProcessError(RuntimeError):
    """An exception escaped a process and nobody was waiting on that process."""

    def __init__(self, name: str, now: int, exc: BaseException):
        super().__init__(f"process {name!r} failed at t={now} ns: {type(exc).__name__}: {exc}")
        self.process_name = name
        self.now = now


class Interrupt(Exception):
    """Thrown into a process by :meth:`Process.interrupt`; ``.cause`` is the argument."""

    @property
    def cause(self):
        return self.args[0] if self.args else None


class _StopRun(Exception):
    """Raised by the sentinel entry that ends ``run(until=event)``."""


class EnvStats(NamedTuple):
    now: int
    events: int               # heap entries run (process resumptions, event firings, callbacks)
    processes_alive: int
    queued: int               # entries currently in the heap
    sync_wait_s: float        # real seconds spent waiting for other processes (sync mode)
    messages_sent: int
    messages_received: int


class ProcStats(NamedTuple):
    name: str
    alive: bool
    charged_ns: int           # total CPU time charged (env.charge(), or debt_ns raised directly)


_new_event = object.__new__


def _raise_stop(_):
    raise _StopRun


def _earliest(times: list, nxt: int, bound: int) -> int:
    """The earliest of a heap of entry times that is still due (at ``nxt`` or later: the earlier
    ones ran and are dropped), or ``bound`` if that is earlier."""
    while times and times[0] < nxt:
        heappop(times)
    return times[0] if times and times[0] < bound else bound


def _call0(fn):
    fn()


def _calln(fn_args):
    fn_args[0](*fn_args[1])


def _process_event(ev: "Event") -> None:
    """Heap target of a triggered event: run its callbacks (once)."""
    cbs = ev.callbacks
    ev.callbacks = None
    if cbs:
        for cb in cbs:
            cb(ev)
    elif not ev.ok and not ev.defused:
        # A failure nobody waited for: surface it instead of losing it.
        raise ev.value


class Event:
    """Something that happens at one virtual time; processes may wait on it.

    ``triggered``: a value (or exception) has been decided and the firing is
    scheduled.  ``processed``: the callbacks have run (``callbacks`` is then
    None); yielding a processed event resumes the process at once.
    """
    __slots__ = ("env", "callbacks", "triggered", "value", "ok", "defused")

    def __init__(self, env: "Environment"):
        self.env = env
        self.callbacks: list | None = []
        self.triggered = False
        self.value = None
        self.ok = True
        self.defused = False

    @property
    def processed(self) -> bool:
        return self.callbacks is None

    def _trigger(self, at: int, value, ok: bool) -> "Event":
        if self.triggered:
            raise RuntimeError(f"{self!r} has already been triggered")
        self.triggered = True
        self.ok = ok
        self.value = value
        env = self.env
        heappush(env._heap, (at, env._next_seq(), _process_event, self))
        return self

    def succeed(self, value=None) -> "Event":
        """Fire at ``env.now`` (scheduled, so callbacks run in time order)."""
        return self._trigger(self.env.now, value, True)

    def succeed_at(self, at_ns: int, value=None) -> "Event":
        """Fire at a future virtual time (e.g. a verb completion); past times clamp to now."""
        now = self.env.now
        return self._trigger(at_ns if at_ns > now else now, value, True)

    def fail(self, exc: BaseException) -> "Event":
        """Fire at ``env.now`` with an exception: waiting processes get it thrown in."""
        if not isinstance(exc, BaseException):
            raise TypeError(f"fail() needs an exception, not {exc!r}")
        return self._trigger(self.env.now, exc, False)

    def __repr__(self):
        state = "processed" if self.callbacks is None else ("triggered" if self.triggered else "pending")
        return f"<{type(self).__name__} {state} at 0x{id(self):x}>"


class Process(Event):
    """A generator driven by the environment.  As an Event it fires with the
    generator's return value when the generator finishes."""
    __slots__ = ("name", "_gen", "debt_ns", "_charged", "_epoch", "_target", "_ready_at",
                 "_wake_cb", "_on_event_cb", "_heap", "_next_seq")

    def __init__(self, env: "Environment", generator, name: str | None = None):
        if not hasattr(generator, "send") or not hasattr(generator, "throw"):
            raise TypeError(f"env.process() needs a generator, not {generator!r}")
        super().__init__(env)
        self.name = name if name is not None else getattr(generator, "__name__", "process")
        self._gen = generator
        self.debt_ns = 0          # CPU time charged since the last yield (the low-level API)
        self._charged = 0         # CPU time charged before the last yield (statistics())
        self._epoch = 0           # bumped by interrupt(): stale wake-ups compare unequal
        self._target = None       # the Event we wait on, if any
        self._ready_at = 0
        # Bound methods cached once: the hot path must not allocate them per event.
        self._wake_cb = self._wake
        self._on_event_cb = self._on_event
        self._heap = env._heap
        self._next_seq = env._next_seq
        env._alive += 1
        heappush(env._heap, (env.now, env._next_seq(), self._wake_cb, 0))

    @property
    def is_alive(self) -> bool:
        return self._gen is not None

    def statistics(self) -> ProcStats:
        return ProcStats(self.name, self._gen is not None, self._charged + self.debt_ns)

    # -- driving the generator -------------------------------------------------
    def _wake(self, epoch):
        """Heap target for ``yield <int>`` and for the start of the process."""
        if epoch is not self._epoch:
            return                     # superseded by an interrupt
        # Inline of the common case of _drive(): send None, got an int back.
        env = self.env
        env.active_process = self
        try:
            target = self._gen.send(None)
        except StopIteration as stop:
            env.active_process = None
            self._finish(stop.value)
            return
        except BaseException as err:
            env.active_process = None
            self._crash(err)
            return
        env.active_process = None
        if type(target) is int and target >= 0:
            debt = self.debt_ns
            if debt:
                self.debt_ns = 0
                self._charged += debt
                if debt > target:
                    target = debt
            heappush(self._heap, (env.now + target, self._next_seq(), self._wake_cb, epoch))
            return
        cbs = getattr(target, "callbacks", None)
        if cbs is not None and isinstance(target, Event):
            debt = self.debt_ns                      # as in _on_event()
            self._ready_at = env.now + debt
            if debt:
                self.debt_ns = 0
                self._charged += debt
            self._target = target
            cbs.append(self._on_event_cb)
            return
        self._dispatch(target)

    def _on_event(self, ev: Event):
        """Callback of the event we were waiting on."""
        self._target = None
        env = self.env
        if self._ready_at > env.now:   # still paying CPU debt: resume later
            heappush(self._heap, (self._ready_at, self._next_seq(), self._wake_event, (self._epoch, ev)))
            return
        # Inline of _drive(): this is the hot path of `yield env.timeout(...)`.
        env.active_process = self
        try:
            target = self._gen.send(ev.value) if ev.ok else self._gen.throw(ev.value)
        except StopIteration as stop:
            env.active_process = None
            self._finish(stop.value)
            return
        except BaseException as err:
            env.active_process = None
            self._crash(err)
            return
        env.active_process = None
        # Inline of the two common outcomes of _dispatch().
        if type(target) is int and target >= 0 and not self.debt_ns:
            heappush(self._heap, (env.now + target, self._next_seq(), self._wake_cb, self._epoch))
            return
        cbs = getattr(target, "callbacks", None)
        if cbs is not None and isinstance(target, Event):
            # parked on a pending event; CPU debt delays the resumption (as in _dispatch())
            debt = self.debt_ns
            self._ready_at = env.now + debt
            if debt:
                self.debt_ns = 0
                self._charged += debt
            self._target = target
            cbs.append(self._on_event_cb)
            return
        self._dispatch(target)

    def _wake_event(self, epoch_ev):
        epoch, ev = epoch_ev
        if epoch is not self._epoch:
            return
        if ev.ok:
            self._drive(ev.value, None)
        else:
            self._drive(None, ev.value)

    def _drive(self, value, exc):
        """General driver: resume the generator with ``value`` or throw ``exc``."""
        env = self.env
        gen = self._gen
        if gen is None:
            return
        env.active_process = self
        try:
            if exc is None:
                target = gen.send(value)
            else:
                target = gen.throw(exc)
        except StopIteration as stop:
            env.active_process = None
            self._finish(stop.value)
            return
        except BaseException as err:
            env.active_process = None
            self._crash(err)
            return
        env.active_process = None
        self._dispatch(target)

    def _dispatch(self, target):
        """Act on what the generator yielded (loops while it yields processed events)."""
        env = self.env
        while True:
            if isinstance(target, Event):
                debt = self.debt_ns
                ready_at = env.now + debt
                if debt:
                    self.debt_ns = 0
                    self._charged += debt
                if target.callbacks is not None:         # not processed yet: park
                    self._ready_at = ready_at
                    self._target = target
                    target.callbacks.append(self._on_event_cb)
                    return
                if ready_at > env.now:                    # processed, but we owe CPU time
                    heappush(self._heap, (ready_at, self._next_seq(), self._wake_event, (self._epoch, target)))
                    return
                # Processed: resume immediately (same virtual time).
                err = None if target.ok else target.value
                value = target.value
            elif type(target) is int or (hasattr(target, "__index__") and not isinstance(target, bool)):
                delay = target.__index__()   # also numpy integers
                if delay < 0:
                    err = ValueError(f"process {self.name!r} yielded a negative delay {delay}")
                else:
                    debt = self.debt_ns
                    if debt:
                        self.debt_ns = 0
                        self._charged += debt
                    heappush(self._heap, (env.now + (debt if debt > delay else delay),
                                          self._next_seq(), self._wake_cb, self._epoch))
                    return
            else:
                err = TypeError(f"process {self.name!r} yielded {target!r} "
                                f"({type(target).__name__}); yield an int delay (ns) or an Event")
            gen = self._gen
            env.active_process = self
            try:
                target = gen.send(value) if err is None else gen.throw(err)
            except StopIteration as stop:
                env.active_process = None
                self._finish(stop.value)
                return
            except BaseException as e:
                env.active_process = None
                self._crash(e)
                return
            env.active_process = None

    def _finish(self, value):
        self._gen = None
        self.env._alive -= 1
        self._trigger(self.env.now, value, True)

    def _crash(self, err: BaseException):
        self._gen = None
        env = self.env
        env._alive -= 1
        if isinstance(err, (KeyboardInterrupt, SystemExit, GeneratorExit)):
            raise err
        try:
            err.add_note(f"raised in dmrack process {self.name!r} at t={env.now} ns")
        except AttributeError:
            pass
        if self.callbacks:
            # Someone waits on us: they get the exception (and may handle it).
            self._trigger(env.now, err, False)
        else:
            self.triggered, self.ok, self.value, self.callbacks = True, False, err, None
            raise ProcessError(self.name, env.now, err) from err

    # -- interrupts ------------------------------------------------------------
    def _cancel_wait(self):
        self._epoch += 1
        tgt = self._target
        if tgt is not None:
            self._target = None
            cbs = tgt.callbacks
            if cbs is not None:
                try:
                    cbs.remove(self._on_event_cb)
                except ValueError:
                    pass

    def interrupt(self, cause=None) -> None:
        """Throw :class:`Interrupt(cause)` into the process at the current time,
        abandoning whatever it was waiting for."""
        if self._gen is None:
            raise RuntimeError(f"process {self.name!r} has terminated and cannot be interrupted")
        if self is self.env.active_process:
            raise RuntimeError("a process cannot interrupt itself")
        self._cancel_wait()
        env = self.env
        heappush(env._heap, (env.now, env._next_seq(), self._deliver_interrupt, Interrupt(cause)))

    def _deliver_interrupt(self, exc):
        if self._gen is None:
            return
        self._cancel_wait()   # it may have waited again since interrupt() was called
        self._drive(None, exc)

    def __repr__(self):
        return f"<Process {self.name!r} {'alive' if self._gen is not None else 'done'}>"


class Environment:
    """Virtual-time scheduler; see the module docstring."""
    __slots__ = ("now", "rng", "active_process", "on_message", "_heap", "_next_seq", "_seqs", "_alive",
                 "_events", "_sync", "_seed", "_inline", "seq_now", "lookahead_ns", "_effects", "_writes",
                 "deferred_reads", "synced", "tracer")

    def __init__(self, *, seed: int = 0, sync=None):
        self.now = 0
        # the sequence number of the entry running: with ``now``, the running entry's place in
        # the total order, which deferred READs (shm/deferred.py) compare their own places with
        self.seq_now = -1
        self._seed = seed
        self.rng = random.Random(seed)
        self.active_process: Process | None = None
        self.on_message: Callable[[int, tuple], Any] = self._no_handler
        self._heap: list = []
        self._seqs = count()      # the entries' sequence numbers (take_seqs draws several at once)
        self._next_seq = self._seqs.__next__
        self._alive = 0
        self._events = 0
        self._inline = False      # True while _run_local runs: see succeed_last
        self._sync = sync
        self.synced = sync is not None   # one of several OS processes of a rack (read-only)
        # Sync mode: the times of pending entries that touch memory other processes see (verb
        # effects, DMA, message deliveries; _writes: those that may change it), and the least
        # delay from any entry to an effect it causes (None: unknown, so 0). Together they bound
        # this process's next effects (frontiers()), which the others wait for (shm/sim/sync.py).
        self.lookahead_ns: int | None = None
        self._effects: list | None = [] if sync is not None else None
        self._writes: list | None = [] if sync is not None else None
        self.deferred_reads = None   # sync mode: the process's deferred READs (track_deferred_reads)
        self.tracer = None        # a shm.sim.trace.Tracer while a trace is recorded
        if sync is not None:
            sync.bind(self)

    @property
    def seed(self) -> int:
        """The seed this environment was made with: models derive their own random streams from it."""
        return self._seed

    # -- creating things -------------------------------------------------------
    def process(self, generator, name: str | None = None) -> Process:
        return Process(self, generator, name)

    def event(self) -> Event:
        ev = _new_event(Event)   # Event.__init__, inlined: the coroutine verbs make one per batch
        ev.env = self
        ev.callbacks = []
        ev.triggered = False
        ev.value = None
        ev.ok = True
        ev.defused = False
        return ev

    def timeout(self, delay_ns: int, value=None) -> Event:
        if delay_ns < 0:
            raise ValueError(f"negative timeout delay {delay_ns}")
        ev = _new_event(Event)   # skip __init__: timeouts are hot
        ev.env = self
        ev.callbacks = []
        ev.triggered = True
        ev.value = value
        ev.ok = True
        ev.defused = False
        heappush(self._heap, (self.now + delay_ns, self._next_seq(), _process_event, ev))
        return ev

    def withdraw(self, timeout: Event) -> bool:
        """Take ``timeout`` (made by :meth:`timeout`, not fired yet) out of the queue; False if it
        is not there (it fired, or is not a timeout). A deadline a process no longer waits for (the
        other event of its ``any_of`` fired) would still be popped at its time and move the clock
        there, so a run would end at the deadline instead of at its last real event. Nothing
        else moves: the other entries keep their times and sequence numbers. A scan of the
        queue (O(n)): for a deadline dropped once in a while, not per verb."""
        heap = self._heap
        for i, entry in enumerate(heap):
            if entry[3] is timeout and entry[2] is _process_event:
                last = heap.pop()
                if i < len(heap):
                    heap[i] = last
                    heapify(heap)
                return True
        return False

    def schedule(self, at_ns: int, callback, *args) -> None:
        """Call ``callback(*args)`` at virtual time ``at_ns`` (clamped to now)."""
        if at_ns < self.now:
            at_ns = self.now
        if len(args) == 1:
            heappush(self._heap, (at_ns, self._next_seq(), callback, args[0]))
        elif not args:
            heappush(self._heap, (at_ns, self._next_seq(), _call0, callback))
        else:
            heappush(self._heap, (at_ns, self._next_seq(), _calln, (callback, args)))

    def event_queue(self) -> tuple[list, Callable[[], int]]:
        """The event queue itself, ``(heap, next_seq)``, for code that schedules once per verb:
        ``heappush(heap, (t, next_seq(), fn, arg))`` with ``t >= now`` is ``schedule(t, fn, arg)``
        without a Python call (see "The low-level API" in the module docstring).  Fetch it once
        (e.g. when a coroutine is made), not per entry."""
        return self._heap, self._next_seq

    def take_seqs(self, n: int) -> int:
        """Draw ``n`` (>= 1) consecutive sequence numbers at once and return the first: places in
        the total order for entries kept out of the queue (shm/deferred.py's READs), the numbers
        ``n`` calls of ``next_seq`` would have drawn (in C: no Python loop)."""
        first = self._next_seq()
        if n > 1:
            next(islice(self._seqs, n - 2, None))
        return first

    def start_at(self, t_ns: int) -> None:
        """Set the clock of an environment that has run nothing yet: a node that joins a rack
        (starts, or restarts after a crash) at the rack's current virtual time ``t_ns``."""
        if self._events or self._heap:
            raise RuntimeError(f"start_at({t_ns}) on an environment that already has events (now={self.now})")
        if t_ns < self.now:
            raise ValueError(f"start_at({t_ns}) is before now={self.now}")
        self.now = t_ns

    def succeed_last(self, ev: Event, value=None) -> None:
        """``ev.succeed(value)`` as the last action of a heap callback.  When no other entry is
        due at ``now``, the firing would be the very next entry popped, so its callbacks run at
        once: same order, same event count, one heap round trip less.  Only inside the
        co-located loop (``step()`` runs one entry; sync mode keeps its polling rhythm)."""
        heap = self._heap
        if not self._inline or (heap and heap[0][0] <= self.now) or ev.triggered:
            ev._trigger(self.now, value, True)
            return
        ev.triggered = True
        ev.ok = True
        ev.value = value
        self.seq_now = self._next_seq()   # the entry's sequence number, so later ones stay the same
        self._events += 1
        _process_event(ev)

    def effect_at(self, t: int, write: bool = True) -> None:
        """Sync mode: an entry scheduled at ``t`` reads (``write`` False) or may change memory
        that other processes see."""
        if self._effects is not None:
            heappush(self._effects, t)
            if write:
                heappush(self._writes, t)
                self._sync.note_write(t)

    def track_deferred_reads(self, deferred_reads) -> None:
        """Sync mode: READs deferred past their effect times (``shm.deferred.DeferredReads``):
        their earliest time counts in :meth:`frontiers`, and the sync layer lands them
        (``land_past``) when the rack would otherwise wait for them.  Co-located: nothing to do
        (no other process reads the frontier)."""
        if self._sync is not None:
            self.deferred_reads = deferred_reads

    def limit_lookahead(self, ns: int) -> None:
        """A device of this process turns what an event posts into an effect ``ns`` later at the
        earliest (verbs: the wire; DMA: half its latency). Code that writes shared memory from an
        event itself must call ``limit_lookahead(0)``."""
        self.lookahead_ns = ns if self.lookahead_ns is None else min(self.lookahead_ns, ns)

    def frontiers(self) -> tuple[int, int]:
        """The earliest times this process may still touch memory others see, and change it: a
        pending effect (a pending write), or the next event plus the lookahead; INF when idle.
        Never before the next event, but for a READ deferred past its time until the sync layer
        lands it (shm/deferred.py)."""
        heap = self._heap
        if not heap:
            return INF, INF
        nxt = heap[0][0]
        f = nxt + (self.lookahead_ns or 0)
        f_all = _earliest(self._effects, nxt, f)
        deferred = self.deferred_reads
        if deferred is not None:          # a READ deferred past its time (shm/deferred.py)
            t = deferred.earliest()
            if t < f_all:
                f_all = t
        return f_all, _earliest(self._writes, nxt, f)

    def pending_writes(self) -> list:
        """Sync mode: the times of this process's pending writes (unordered; some may have run)."""
        return self._writes

    def cpu_free_at(self) -> int:
        """When the active process's CPU is free: ``now`` plus what it has been charged since it
        last yielded (the time its work so far ends, which an operation's latency must include)."""
        return self.now + self.active_process.debt_ns

    def charge(self, ns: int) -> None:
        """Charge CPU time to the active process (see module docstring)."""
        p = self.active_process
        if p is None:
            raise RuntimeError("env.charge() called outside a process")
        if ns < 0:
            raise ValueError(f"negative charge {ns}")
        p.debt_ns += ns

    # -- messages (sync mode) ----------------------------------------------------
    def send(self, dest: int, arrival_ns: int, payload: tuple = ()) -> None:
        """Send ``payload`` (ints) to process ``dest``; its ``on_message(src, payload)``
        runs at ``max(arrival_ns, its now)``.  Needs ``sync``."""
        if self._sync is None:
            raise RuntimeError("env.send() needs an Environment created with sync=ClockSync(...)")
        if arrival_ns < self.now:
            raise ValueError(f"message arrival {arrival_ns} is before now={self.now}")
        self._sync.send(dest, arrival_ns, payload)

    def _no_handler(self, src, payload):
        raise RuntimeError(f"message {payload!r} from process {src} but env.on_message is not set")

    def stop(self) -> None:
        """Sync mode: set the shared stop flag, ending every process' run()."""
        if self._sync is None:
            raise RuntimeError("env.stop() needs sync")
        self._sync.request_stop()

    # -- running -----------------------------------------------------------------
    def peek(self) -> int:
        """Time of the next entry, INF if none."""
        return self._heap[0][0] if self._heap else INF

    def step(self) -> None:
        """Run exactly one heap entry (co-located mode)."""
        if not self._heap:
            raise RuntimeError("no more events")
        t, s, fn, arg = heappop(self._heap)
        self.now = t
        self.seq_now = s
        self._events += 1
        fn(arg)

    def run(self, until: "int | Event | None" = None) -> None:
        """Run events in time order.

        ``until=None``: until no events are left (sync: global quiescence).
        ``until=T``: every event at ``t <= T`` runs, then ``now = T``.
        ``until=event``: stop right after ``event``'s callbacks ran; if the
        heap empties (or the rack quiesces) first, return with it unprocessed
        (check ``event.processed``).  In sync mode the shared stop flag also
        ends the run (``now`` is then left where it was).
        """
        until_t = INF - 1
        if isinstance(until, Event):
            if until.callbacks is None:
                return
            until.callbacks.append(self._stop_cb)
        elif until is not None:
            until_t = until.__index__()
            if until_t < self.now:
                raise ValueError(f"until={until_t} is before now={self.now}")
        try:
            if self._sync is None:
                self._run_local(until_t)
            elif not self._run_sync(until_t):
                return                        # stop flag: leave now where it is
        except _StopRun:
            return
        finally:
            if isinstance(until, Event) and until.callbacks:
                try:
                    until.callbacks.remove(self._stop_cb)
                except ValueError:
                    pass
        if until is not None and not isinstance(until, Event) and self.now < until_t:
            self.now = until_t

    def _stop_cb(self, ev):
        # Sorts before every other entry (time == now, seq -1): the loop pops it next.
        heappush(self._heap, (self.now, -1, _raise_stop, None))

    def _run_local(self, until_t: int) -> None:
        heap = self._heap
        n = 0
        inline, self._inline = self._inline, True
        try:
            while heap:
                entry = heappop(heap)
                t, s, fn, arg = entry
                if t > until_t:
                    heappush(heap, entry)     # rare: once per run(until=...)
                    break
                self.now = t
                self.seq_now = s
                n += 1
                fn(arg)
        finally:
            self._events += n
            self._inline = inline

    def _run_sync(self, until_t: int) -> bool:
        """Returns False if ended by the shared stop flag."""
        heap = self._heap
        sync = self._sync
        asked = sync.asked()        # asked[0]: a blocked process waits for our next event to reach it
        n = 0
        try:
            while True:
                horizon = sync.refresh(until_t)   # may block; -1 means: this run is over
                if horizon < 0:
                    return not sync.stopped
                if horizon > until_t:
                    horizon = until_t
                budget = POLL_EVENTS
                while budget and heap and heap[0][0] <= horizon:
                    if heap[0][0] >= asked[0]:
                        break                     # publish now: another process waits for this
                    t, s, fn, arg = heappop(heap)
                    self.now = t
                    self.seq_now = s
                    n += 1
                    budget -= 1
                    fn(arg)
                    # send() may have shrunk the horizon (the receiver's clock dropped)
                    if sync.horizon < horizon:
                        horizon = sync.horizon
        except _StopRun:
            raise
        except BaseException as e:
            # A node that dies would hold every other node back forever (its
            # clock stays put, its inbox fills): end the whole rack's run, or
            # (a rack that carries on after a node death) leave it for good.
            sync.fail(e)
            raise
        finally:
            self._events += n
            asked.release()

    def statistics(self) -> EnvStats:
        s = self._sync
        return EnvStats(self.now, self._events, self._alive, len(self._heap),
                        s.wait_s if s is not None else 0.0,
                        s.sent if s is not None else 0,
                        s.received if s is not None else 0)


class _Condition(Event):
    __slots__ = ("_events", "_pending", "_all")

    def __init__(self, env, events, want_all: bool):
        super().__init__(env)
        self._events = list(events)
        self._all = want_all
        self._pending = len(self._events)
        if not self._events:
            self.succeed([] if want_all else {})
            return
        for ev in self._events:
            if ev.callbacks is None:
                self._check(ev)
            else:
                ev.callbacks.append(self._check)

    def _check(self, ev):
        if self.triggered:
            return
        if not ev.ok:
            ev.defused = True
            self.fail(ev.value)
            return
        self._pending -= 1
        if self._all:
            if self._pending == 0:
                self.succeed([e.value for e in self._events])
        else:
            self.succeed({e: e.value for e in self._events if e.callbacks is None or e is ev})


def all_of(env: Environment, events: Iterable[Event]) -> Event:
    """Fires when every event has fired; value = list of their values (in order).
    Fails as soon as one of them fails."""
    return _Condition(env, events, True)


def any_of(env: Environment, events: Iterable[Event]) -> Event:
    """Fires when the first event fires; value = {event: value} of those fired by then."""
    return _Condition(env, events, False)
