"""SMART's techniques as switches of the coroutine verbs layer (SMART, ASPLOS '24, §4).

Three switches, each off by default, passed per :class:`shm.coro.NodeRdma` as one
:class:`SmartConfig` (``NodeRdma(host, node, smart=SmartConfig(...))``; a rack spec hands over
a plain dict, see :meth:`SmartConfig.from_dict`):

* **work-request throttling** (§4.2, Algorithm 1): ``throttle = "fixed"`` caps each thread's
  outstanding work requests at ``c_max``; ``throttle = "adaptive"`` tunes that cap online by
  sampling every candidate of ``candidates`` for ``delta_ns`` and keeping the best for
  ``hold x delta_ns`` (:class:`WrTuner`).
* **conflict avoidance** (§4.3): ``backoff = True`` makes ``VerbBatch.backoff_cas`` wait a
  truncated exponential back-off after a failed CAS; ``dyn_limit`` adapts its limit ``t_max``
  between ``t0`` and ``2**max_exp * t0`` from the retry rate (:class:`ConflictController`).
* **coroutine throttling** (§4.3): ``coro_throttle = True`` lets at most ``c_max`` operations
  (``RdmaThread.op_begin``/``op_end``) of a thread run at once, ``c_max`` adapted by the retry rate.

The third technique of SMART, thread-aware resource allocation (§4.1), is the
``per_thread_doorbell`` QP policy of :class:`shm.coro.NodeRdma`.

The controllers here are plain logic on virtual time (no environment), so they are unit-tested
directly; :mod:`shm.coro` drives them. See docs/smart.md.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import NamedTuple

UNLIMITED = None            # a C_max candidate: no cap on outstanding work requests

THROTTLE_MODES = ("off", "fixed", "adaptive")


@dataclass(frozen=True)
class SmartConfig:
    """Which of SMART's techniques a node's coroutine verbs apply, and their parameters.

    Defaults are SMART's values with every switch off. Times are virtual nanoseconds; back-off
    units are CPU cycles (converted with the profile's ``cpu.ghz``)."""

    # -- §4.2 adaptive work-request throttling --------------------------------------------------
    throttle: str = "off"                 # "off" | "fixed" | "adaptive"
    c_max: int | None = None              # "fixed": the cap on outstanding WRs per thread
    candidates: tuple = (4, 6, 8, 10, 12, UNLIMITED)   # "adaptive": the C_max values sampled
    delta_ns: int = 8_000_000             # Δ: one sample per candidate (paper: 8 ms)
    hold: int = 60                        # stable phase = hold x Δ (paper: 60 x 8 ms = 480 ms)
    tuner_scope: str = "thread"           # "thread": each thread tunes its own C_max (the paper);
    #                                       "node": one tuner counts every thread's completions and
    #                                       sets C_max for all (less noise when Δ is scaled down)
    # -- §4.3 conflict avoidance -----------------------------------------------------------------
    backoff: bool = False                 # truncated exponential back-off after a failed backoff_cas
    t0_cycles: int = 4096                 # back-off unit t0 (paper: 4096 cycles, about one round trip)
    max_exp: int = 10                     # t_M = 2**max_exp * t0 (paper: 2**10)
    t_max_cycles: int | None = None       # initial t_max (default: t0 with dyn_limit, else t_M)
    dyn_limit: bool = True                # adapt t_max by the retry rate (paper's +DynLimit)
    jitter: str = "paper"                 # "paper": min(t0 2^i, t_max) + U[0, t0); "full": U[0, min(t0 2^i, t_max))
    coro_throttle: bool = False           # at most c_max concurrent operations per thread
    coro_credits: int | None = None       # c_max's start and upper bound (None: the thread's
    #                                       coroutines; SMART's artifact: 64 = kMaxTasksPerThread)
    window_ns: int = 1_000_000            # retry-rate sampling window (paper: every millisecond)
    retry_scope: str = "thread"           # "thread": each thread measures its own retry rate (the paper);
    #                                       "node": one controller counts every thread's retries and
    #                                       operations and sets t_max and c_max for all (scaled windows)
    gamma_low: float = 0.1                # γ_L
    gamma_high: float = 0.5               # γ_H

    def __post_init__(self):
        if self.throttle not in THROTTLE_MODES:
            raise ValueError(f"smart.throttle must be one of {', '.join(THROTTLE_MODES)}, got {self.throttle!r}")
        if self.throttle == "fixed" and (self.c_max is None or int(self.c_max) < 1):
            raise ValueError(f"smart.c_max must be >= 1 with throttle = 'fixed', got {self.c_max!r}")
        cands = tuple(None if c in (None, 0, "unlimited", "inf") else int(c) for c in self.candidates)
        if not cands or any(c is not None and c < 1 for c in cands):
            raise ValueError(f"smart.candidates must be non-empty, each >= 1 or 'unlimited', got {self.candidates!r}")
        object.__setattr__(self, "candidates", cands)
        for key in ("delta_ns", "hold", "t0_cycles", "window_ns"):
            if int(getattr(self, key)) < 1:
                raise ValueError(f"smart.{key} must be >= 1, got {getattr(self, key)!r}")
        if not 0 <= self.max_exp <= 40:
            raise ValueError(f"smart.max_exp must be in 0..40, got {self.max_exp!r}")
        if self.tuner_scope not in ("thread", "node"):
            raise ValueError(f"smart.tuner_scope must be 'thread' or 'node', got {self.tuner_scope!r}")
        if self.retry_scope not in ("thread", "node"):
            raise ValueError(f"smart.retry_scope must be 'thread' or 'node', got {self.retry_scope!r}")
        if self.jitter not in ("paper", "full"):
            raise ValueError(f"smart.jitter must be 'paper' or 'full', got {self.jitter!r}")
        if not 0 <= self.gamma_low <= self.gamma_high <= 1:
            raise ValueError(f"smart.gamma_low <= gamma_high in [0, 1] required, got {self.gamma_low}, {self.gamma_high}")
        if self.coro_credits is not None and int(self.coro_credits) < 1:
            raise ValueError(f"smart.coro_credits must be >= 1 (or absent), got {self.coro_credits!r}")
        t_m = self.t0_cycles << self.max_exp
        if self.t_max_cycles is not None and not self.t0_cycles <= self.t_max_cycles <= t_m:
            raise ValueError(f"smart.t_max_cycles must be in [t0, 2**max_exp t0] = [{self.t0_cycles}, {t_m}], "
                             f"got {self.t_max_cycles}")

    @property
    def enabled(self) -> bool:
        return self.throttle != "off" or self.backoff or self.coro_throttle

    @classmethod
    def from_dict(cls, d: dict | None) -> "SmartConfig":
        """From a rack spec's table; unknown keys are refused. ``{"all": true}`` turns on every
        switch (adaptive throttling, back-off with dynamic limit, coroutine throttling)."""
        if d is None:
            return cls()
        if isinstance(d, SmartConfig):
            return d
        d = dict(d)
        if d.pop("all", False):
            d.setdefault("throttle", "adaptive")
            d.setdefault("backoff", True)
            d.setdefault("coro_throttle", True)
        known = {f.name for f in fields(cls)}
        bad = sorted(set(d) - known)
        if bad:
            raise ValueError(f"unknown smart key(s) {', '.join(bad)}; known: {', '.join(sorted(known | {'all'}))}")
        if "candidates" in d:
            d["candidates"] = tuple(d["candidates"])
        return cls(**d)

    def cycles_ns(self, cycles: int, ghz: float) -> int:
        return max(1, int(round(cycles / ghz)))


class WrTuner:
    """Algorithm 1's ``Update`` as an epoch state machine on virtual time.

    An epoch is an update phase (each candidate C_max in turn for ``delta`` ns, counting the
    work requests completed) followed by a stable phase of ``hold x delta`` ns on the best one;
    then the next epoch. :meth:`tick` is called with the completions as they happen and returns
    the C_max to apply when it changes (``UNLIMITED`` is ``None``, so a change is signalled by
    the second member of the returned pair)."""

    __slots__ = ("candidates", "delta", "hold", "phase", "index", "start", "count", "best", "best_rate",
                 "current", "samples", "epochs", "history")

    def __init__(self, candidates, delta_ns: int, hold: int):
        self.candidates = tuple(candidates)
        self.delta = int(delta_ns)
        self.hold = int(hold)
        self.phase = "idle"           # before the first tick
        self.index = 0
        self.start = 0
        self.count = 0
        self.best = None
        self.best_rate = -1.0
        self.current = self.candidates[0]
        self.samples = 0
        self.epochs = 0
        self.history: list = []       # (time, candidate, completed WRs per µs) of the last epochs

    def begin(self, now: int):
        """Start the first epoch at ``now``; returns the C_max to apply."""
        self.phase = "update"
        self.index = 0
        self.start = now
        self.count = 0
        self.best, self.best_rate = None, -1.0
        self.current = self.candidates[0]
        return self.current

    def tick(self, now: int, completed: int):
        """``completed`` work requests completed at ``now``. Returns ``(changed, c_max)``."""
        if self.phase == "idle":
            return True, self.begin(now)
        self.count += completed
        if self.phase == "update":
            span = now - self.start
            if span < self.delta:
                return False, self.current
            rate = self.count / span          # completed WRs per ns over the sample
            self.samples += 1
            self.history.append((now, self.current, round(rate * 1000, 3)))
            if len(self.history) > 4 * len(self.candidates):
                del self.history[0]
            if rate > self.best_rate:
                self.best_rate, self.best = rate, self.current
            self.index += 1
            self.start, self.count = now, 0
            if self.index < len(self.candidates):
                self.current = self.candidates[self.index]
                return True, self.current
            self.phase = "stable"
            self.current = self.best
            return True, self.current
        if now - self.start >= self.hold * self.delta:      # stable phase over: resample
            self.epochs += 1
            return True, self.begin(now)
        return False, self.current


class ConflictController:
    """§4.3's retry-rate controller of one thread: the back-off limit ``t_max`` (cycles) and the
    coroutine cap ``c_max``, adapted once per window from the retry rate.

    The retry rate follows SMART's artifact (``sds::Backoff``): γ = retries / (retries +
    operations completed) in the window, where a retry is a failed ``backoff_cas`` and an
    operation is an ``op_begin``/``op_end`` pair; so γ > γ_H = 0.5 means more than one retry per
    operation, γ < γ_L = 0.1 fewer than one per nine. As there, the window is closed by the first
    retry after ``window_ns`` (a thread without retries keeps its limits), and ``t_max`` starts
    at ``t0`` when it is adapted (``t_max_cycles`` overrides the start).

    With coroutine throttling, ``c_max`` moves first (halved above γ_H, doubled below γ_L, within
    ``1..c_upper``) and ``t_max`` only moves once ``c_max`` sits at the bound in that direction
    (the paper: "t_max is only updated if c_max reaches the lower or upper bound")."""

    __slots__ = ("cfg", "t0", "t_m", "t_max", "c_max", "c_upper", "win_start", "win_ops", "win_failed",
                 "gamma", "windows")

    def __init__(self, cfg: SmartConfig, c_upper: int = 1):
        self.cfg = cfg
        self.t0 = cfg.t0_cycles
        self.t_m = cfg.t0_cycles << cfg.max_exp
        self.c_upper = max(1, c_upper if cfg.coro_credits is None else int(cfg.coro_credits))
        self.windows = 0
        self.restart()

    def restart(self) -> None:
        """Back to the starting limits with an empty window (``windows`` kept), as a freshly
        started SMART process: the workload's regime changed (``set threads``)."""
        cfg = self.cfg
        if cfg.t_max_cycles is not None:
            self.t_max = cfg.t_max_cycles
        else:
            self.t_max = self.t0 if cfg.dyn_limit else self.t_m
        self.c_max = self.c_upper
        self.win_start = None
        self.win_ops = self.win_failed = 0
        self.gamma = None

    def set_upper(self, c_upper: int) -> None:
        """The number of coroutines changed: the bound of c_max follows (c_max keeps its value
        below it; at the old bound it moves with it). A fixed ``coro_credits`` bound does not move."""
        if self.cfg.coro_credits is not None:
            return
        c_upper = max(1, c_upper)
        if self.c_max >= self.c_upper or self.c_max > c_upper:
            self.c_max = c_upper
        self.c_upper = c_upper

    def op_done(self, now: int) -> None:
        """An operation (``op_end``) completed at ``now``."""
        if self.win_start is None:
            self.win_start = now
        self.win_ops += 1

    def record(self, now: int, ok: bool) -> bool:
        """A ``backoff_cas`` finished at ``now``; returns True when a window closed (and the
        limits may have changed)."""
        if self.win_start is None:
            self.win_start = now
        if ok:
            return False
        self.win_failed += 1
        if now - self.win_start < self.cfg.window_ns:
            return False
        self.adapt(self.win_failed / (self.win_failed + self.win_ops))
        self.win_start, self.win_ops, self.win_failed = now, 0, 0
        return True

    def adapt(self, gamma: float) -> None:
        cfg = self.cfg
        self.gamma = gamma
        self.windows += 1
        high, low = gamma > cfg.gamma_high, gamma < cfg.gamma_low
        if not (high or low):
            return
        if cfg.coro_throttle:
            if high and self.c_max > 1:
                self.c_max = max(1, self.c_max // 2)
                return
            if low and self.c_max < self.c_upper:
                self.c_max = min(self.c_upper, self.c_max * 2)
                return
        if cfg.backoff and cfg.dyn_limit:
            if high:
                self.t_max = min(self.t_m, self.t_max * 2)
            else:
                self.t_max = max(self.t0, self.t_max // 2)

    def backoff_cycles(self, attempt: int, rand: float) -> int:
        """The back-off after the ``attempt``-th consecutive failure (0-based), ``rand`` in [0, 1):
        paper eq. (1) ``min(t0 2^i, t_max) + Rand(t0)``, or full jitter ``Rand(min(t0 2^i, t_max))``."""
        base = self.t0 << min(attempt, 62)
        if base > self.t_max:
            base = self.t_max
        if self.cfg.jitter == "full":
            return int(rand * base)
        return base + int(rand * self.t0)


class SmartStats(NamedTuple):
    """SMART's state of one thread (``RdmaThread.smart_statistics()``)."""

    throttle: str              # "off" | "fixed" | "adaptive"
    c_max_wr: int | None       # current cap on outstanding WRs (None: unlimited / off)
    credits: int | None        # WR credits left (None: unlimited / off)
    outstanding_wr: int        # WRs rung and not yet completed
    queued_wr: int             # WRs waiting for credits
    posts_waited: int          # posts that waited for credits (deferred_posts before issue 42)
    tuner_samples: int         # Δ samples taken by the adaptive tuner
    tuner_epochs: int          # stable phases completed
    tuner_history: tuple       # recent (time ns, candidate, WRs per µs) samples
    t_max_ns: int | None       # current back-off limit (None: back-off off)
    c_max_ops: int | None      # current cap on concurrent operations (None: off)
    ops_running: int           # operations between op_begin and op_end
    ops_waiting: int           # operations waiting in op_begin
    backoff_cas: int           # backoff_cas calls
    retries: int               # of them failed (the caller retries)
    backoffs: int              # back-off waits taken
    backoff_ns: int            # virtual time spent waiting in back-off
    gamma: float | None        # retry rate of the last closed window
    windows: int               # retry-rate windows closed

    @property
    def deferred_posts(self) -> int:
        """The name :attr:`posts_waited` had before issue 42 ("deferred" now means only the
        deferred READs of shm/deferred.py), kept for code that reads it."""
        return self.posts_waited
