"""The stats plane: every node process publishes its counters, latencies and progress here.

One shared segment per rack (``<prefix>.stats``) holds one *slot* per process plus a rack-wide
event log. The supervisor's dashboard and the end-of-run export read it while the nodes run, so
the one rule of the design is that **readers never slow writers down**:

* Each slot has exactly one writer (the process that owns it), so writers need no atomics for
  their own data: counters are plain 64-bit stores, which are never torn on the machines we run
  on, and a reader copying them sees each word either before or after an update.
* The hot path, :meth:`ProcWriter.record`, is one small jitted call per KV operation that bumps
  the current step's count, failure count, latency sum and max, and one histogram bucket. It
  takes no lock and publishes nothing: the counters are monotonic, so a reader's unsynchronised
  copy is merely a few operations behind (counts and histogram may disagree by the operations in
  flight during the copy).
* The slot *header* (pid, state, virtual time, heartbeat fields, gauges, the step table) changes
  rarely and its fields must be seen together, so it is a seqlock: the writer makes the sequence
  word odd, writes, makes it even again; a reader copies the header between two reads of the
  sequence and retries a few times (``READ_TRIES``) if they differ. A reader that keeps losing
  (the writer was descheduled mid-update) returns the last consistent copy it got for that slot
  (``ProcSnapshot.stale``) instead of spinning: a dashboard frame may be a heartbeat old, it must
  never hang.

Latency histograms are log-linear, HDR-style: values below 64 ns have one bucket each, and every
power of two from 64 ns up to 2^40 ns (~18 min) is split into ``SUB = 32`` equal linear buckets
(the five bits after the leading one). A bucket ``[lo, lo + w)`` has ``w <= lo / 32``, and a
percentile is reported as the middle of its bucket (clamped to the largest value recorded), so
it is within ``REL_ERROR = 1/64`` (1.6 %) of the true nearest-rank percentile, and exact below
64 ns. Latencies of 2^40 ns and more land in one overflow bucket, reported as the recorded max.
Why log-linear: a constant relative error over ten decades in 1153 buckets (9 KiB per kind and
step), one shift-and-add to find the bucket, and histograms that merge by addition. Why 32 and
not the 8 sub-buckets of the first version: with 6.25 % buckets a p50 of ~10 µs sat still while
the load moved it by 3-5 %, which is exactly the size of the effects a knob change shows; 64
sub-buckets would halve the error again at twice the memory, for differences below what the
timing model itself resolves.

Each slot holds ``max_steps`` step records (counters + one histogram per op kind), so the results
can report every scenario step separately. Memory: ~72 KiB per step, ~4.5 MiB per slot at the
default 64 steps (the rack creates its plane with one step more than its scenario has, so a
typical rack uses a few hundred KiB per node); tmpfs only backs pages that are touched, so unused
steps and unused buckets cost nothing.

A heartbeat also stores the current step's operation count of that moment (``W_HB_STEP_OPS``)
beside the virtual time it publishes. Rates need the two as a pair: the step's live counters are
bumped by every operation while the virtual time is published only by the heartbeat (every 50 ms
of real time, ~0.2 ms of virtual time at a typical emulation speed), so live operations over the
published time read up to 1.3x high on a step's first update.

Besides the heartbeat, the slot header carries a few *counters*, which ``shm/telemetry.py``
declares (``COUNTERS``: name, unit, who produces it, meaning) with the op kinds and the node
states; this module re-exports them and derives its layout from them. Examples: a memory node's
occupancy (bytes carved from its host memory, and its capacity), a compute node's sums of its
clients' reclamation figures (``bytes_reclaimed``, ``blocks_reused``), a DPU's busy cores. They
are published under the header seqlock like the gauges, and are totals since the process started
(or, for the few ``level`` ones such as a queue's depth, the value now).

A system's *own* counters (every numeric field of its clients' ``statistics()`` records, which
differ from system to system: RACE's CAS retries, Sherman's cache hits, a plugin's hops) have a
region of their own at the end of the slot (``SYS_MAX`` counters): their names travel with their
values, so the plane needs to know nothing about the system, and a reader shows a plugin's
counters as it shows RACE's. The slot's owner publishes them (a compute node: at every step end,
and every heartbeat in a node process), under the header seqlock, so a reader copies names and
values that belong together. Integers are stored as they are, finite floats as their float64 bits
(a bit per counter says which).

Two header words are the exception to "one writer per slot": ``exit code`` and ``exited``, which
the supervisor stores once the owner is dead (:meth:`StatsPlane.mark_exited`), so that the
dashboard, a pure reader of this plane, can show a SIGKILLed node as dead rather than as its last
published state. They are written after the owner is gone (no write races with it) and read
outside the seqlock (an owner killed inside a header update leaves the sequence odd forever).

The event log is a ring of ``EVENT_CAPACITY`` fixed-size entries shared by all processes: a
writer reserves a position with an atomic fetch-and-add on the tail and publishes the entry with
its own per-entry seqlock stamp; the oldest entries are overwritten once the ring has wrapped.
Text is truncated to ``EVENT_TEXT_BYTES`` bytes of UTF-8 (at a character boundary), the kind to
``EVENT_KIND_BYTES`` and the node name to ``EVENT_NODE_BYTES``.

Layout (int64 words; every region starts on a 64-byte line)::

    header   [0, 24)        magic, version, geometry; event tail on its own line (word 16)
    slot i   SLOT_HDR_WORDS header (seqlocked; counters at W_COUNTERS, supervisor's exit words at
             W_EXIT_CODE/W_EXITED) | max_steps x STEP_WORDS step data | max_steps x META_WORDS
             | SYS_WORDS: the system's own counters (count, float bits, names, values)
    events   EVENT_CAPACITY x EVENT_WORDS
"""

from __future__ import annotations

import math
import operator
import os
import threading
import time
from collections import namedtuple
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Iterable, NamedTuple, Sequence

import numpy as np
from numba import njit, types

from shm.atomics import faa, fence, load_acquire, store_release
from shm.segment import Segment
from shm.telemetry import (COUNTER_NAMES, COUNTERS, KIND_INDEX, N_KINDS, OP_KINDS, STATE_DONE, STATE_EMPTY,
                           STATE_FAILED, STATE_LOADING, STATE_NAMES, STATE_RUNNING, STATE_STARTING)

__all__ = [
    "OP_KINDS", "N_KINDS", "KIND_INDEX",
    "STATE_EMPTY", "STATE_STARTING", "STATE_LOADING", "STATE_RUNNING", "STATE_DONE", "STATE_FAILED",
    "STATE_NAMES", "GAUGES", "Gauges", "COUNTERS", "COUNTER_NAMES", "Counters", "SYS_MAX", "SYS_NAME_BYTES",
    "SUB_BITS", "SUB", "MAX_EXP", "N_BUCKETS", "REL_ERROR",
    "bucket_index", "bucket_of", "bucket_lower", "bucket_width",
    "LatencyHistogram", "HistStats",
    "ProcInfo", "StepRecord", "ProcSnapshot", "LogEntry", "Event",
    "StatsPlane", "PlaneStats", "ProcWriter", "WriterStats",
    "record_op", "record_batch",
    "EVENT_CAPACITY", "EVENT_TEXT_BYTES", "EVENT_KIND_BYTES", "EVENT_NODE_BYTES", "LABEL_BYTES",
]

# -- gauges and counters (op kinds, node states and counters: shm/telemetry.py) ------------------

#: The fixed set of utilisation gauges a heartbeat carries (fractions, nominally 0..1).
GAUGES = ("nic_util", "link_util", "pcie_util")


class Gauges(NamedTuple):
    nic_util: float = 0.0
    link_util: float = 0.0
    pcie_util: float = 0.0


#: The values of a slot's counters (``shm.telemetry.COUNTERS``, in header order; 0 unless published).
Counters = namedtuple("Counters", COUNTER_NAMES, defaults=(0,) * len(COUNTER_NAMES))
Counters.__doc__ = "The counters of one stats slot, named and ordered as shm.telemetry.COUNTERS declares them."


# -- histogram geometry -------------------------------------------------------------------------

SUB_BITS = 5
SUB = 1 << SUB_BITS                 # linear buckets per power of two
MAX_EXP = 40                        # values >= 2**MAX_EXP ns go to the overflow bucket
N_BUCKETS = (MAX_EXP - SUB_BITS + 1) * SUB + 1
OVERFLOW = N_BUCKETS - 1
REL_ERROR = 1.0 / (2 * SUB)         # bound on a percentile's relative error (see module docstring)

# -- segment layout -----------------------------------------------------------------------------

MAGIC = 0x7374_6174_536B_6344       # b"DckSstat" little-endian-ish; fits in int64
VERSION = 7                         # 2: 32 sub-buckets, counters and exit words; 3: device counters;
                                    # 4: the system's own counters; 5: W_HB_STEP_OPS; 6: 24 counter words;
                                    # 7: op kinds commit and abort (transactions)
LINE = 8                            # int64 words per cache line

# global header words
G_MAGIC, G_VERSION, G_NPROCS, G_MAX_STEPS, G_SLOT_WORDS, G_NKINDS, G_NBUCKETS, G_EVCAP = range(8)
G_EVWORDS = 8
G_EV_TAIL = 16                      # the event log's multi-writer counter, alone on its line
HEADER_WORDS = 24

# slot header words (the seqlocked part, with the step meta table)
W_SEQ, W_PID, W_STATE, W_START_REAL, W_START_MONO, W_HB_REAL, W_HB_MONO, W_VNOW = range(8)
W_EVENTS, W_VERBS, W_CUR_STEP, W_STEP_HI, W_HEARTBEATS = range(8, 13)
W_EXIT_CODE, W_EXITED = 13, 14      # written by the supervisor once the owner is dead (not seqlocked)
W_HB_STEP_OPS = 15                  # the current step's operations at the last heartbeat (-1: none since it began)
W_GAUGES = 16                       # float64 words: nic_util, link_util, pcie_util
W_COUNTERS = 24                     # int64 words: COUNTERS, in order
SLOT_HDR_WORDS = 48
_COUNTER_WORD = {name: W_COUNTERS + i for i, name in enumerate(COUNTER_NAMES)}
# The jitted kernels below freeze N_KINDS and the header size when they compile, and numba's
# on-disk cache is keyed on this file, not on shm/telemetry.py where kinds and counters are
# declared: a declaration that outgrows this layout must change this file (a new VERSION), or a
# cached kernel would keep writing the old layout. Counters up to the header's 24 words fit.
_LAYOUT_KINDS = 8                   # the op kinds of layout VERSION 7
if N_KINDS != _LAYOUT_KINDS:
    raise ImportError(f"shm/telemetry.py declares {N_KINDS} op kinds, the stats plane's layout (cluster/stats.py, "
                      f"version {VERSION}) holds {_LAYOUT_KINDS}: a new kind is a new layout")
if W_COUNTERS + len(COUNTER_NAMES) > SLOT_HDR_WORDS:
    raise ImportError(f"shm/telemetry.py declares {len(COUNTER_NAMES)} counters, a stats slot's header "
                      f"(cluster/stats.py, version {VERSION}) has room for {SLOT_HDR_WORDS - W_COUNTERS}: "
                      f"more is a new layout")

# per-step data (the hot part): counters per kind, then one histogram per kind
S_COUNT = 0
S_FAIL = S_COUNT + N_KINDS
S_SUM = S_FAIL + N_KINDS
S_MAX = S_SUM + N_KINDS
S_HIST = S_MAX + N_KINDS
STEP_WORDS = -(-(S_HIST + N_KINDS * N_BUCKETS) // LINE) * LINE
STEPS_OFF = SLOT_HDR_WORDS          # fixed, so the jitted kernel needs no geometry argument

# per-step meta (seqlocked with the slot header)
M_BEGUN, M_VSTART, M_VEND, M_REAL_START, M_REAL_END = range(5)
M_LABEL = 6
META_WORDS = 16
LABEL_BYTES = (META_WORDS - M_LABEL) * 8   # 80

# event log entries
E_STAMP, E_REAL, E_VTIME = range(3)
E_KIND, E_NODE, E_TEXT = 3, 5, 9
EVENT_WORDS = 24
EVENT_KIND_BYTES = (E_NODE - E_KIND) * 8     # 16
EVENT_NODE_BYTES = (E_TEXT - E_NODE) * 8     # 32
EVENT_TEXT_BYTES = (EVENT_WORDS - E_TEXT) * 8  # 120
EVENT_CAPACITY = 1024

# the system's own counters (seqlocked with the slot header): how many are published, which of
# them are floats (bit i: counter i), their names (SYS_NAME_BYTES of UTF-8 each), their values
#: Most of a system's own counters a slot carries: the first SYS_MAX numeric fields of its record
#: (the largest built-in record, FlexKV's, has 32).
SYS_MAX = 64
SYS_NAME_BYTES = 32                 # a counter's name, cut at a character boundary beyond it
Y_COUNT, Y_FLOATS = 0, 1
Y_NAMES = 2
Y_VALUES = Y_NAMES + SYS_MAX * SYS_NAME_BYTES // 8
SYS_WORDS = -(-(Y_VALUES + SYS_MAX) // LINE) * LINE

#: Seqlock attempts before a reader settles for its last consistent copy.
READ_TRIES = 8
#: An event entry reserved but unpublished for this long (its writer died or hangs) is skipped.
EVENT_STUCK_S = 1.0

# error codes of the jitted kernels (turned into exceptions by the Python wrappers)
_OK, _ERR_NO_STEP, _ERR_KIND, _ERR_LATENCY, _ERR_LENGTH = range(5)


def _slot_words(max_steps: int) -> int:
    return _sys_off(max_steps) + SYS_WORDS


def _sys_off(max_steps: int) -> int:
    """Where a slot's region of the system's own counters starts (words from the slot's start)."""
    return SLOT_HDR_WORDS + max_steps * (STEP_WORDS + META_WORDS)


def _events_off(n_procs: int, max_steps: int) -> int:
    return HEADER_WORDS + n_procs * _slot_words(max_steps)


def _segment_bytes(n_procs: int, max_steps: int) -> int:
    return 8 * (_events_off(n_procs, max_steps) + EVENT_CAPACITY * EVENT_WORDS)


# -- histogram buckets --------------------------------------------------------------------------


@njit(cache=True)
def bucket_index(ns):
    """Histogram bucket of a latency ``ns`` >= 0 (see the module docstring for the geometry)."""
    if ns < 2 * SUB:
        return ns
    if ns >= (1 << MAX_EXP):
        return OVERFLOW
    # floor(log2(ns)) by binary search: branchy but a handful of cycles, and no float rounding.
    e = 0
    v = ns
    if v >= (1 << 32):
        v >>= 32
        e += 32
    if v >= (1 << 16):
        v >>= 16
        e += 16
    if v >= (1 << 8):
        v >>= 8
        e += 8
    if v >= (1 << 4):
        v >>= 4
        e += 4
    if v >= (1 << 2):
        v >>= 2
        e += 2
    if v >= 2:
        e += 1
    sub = (ns >> (e - SUB_BITS)) - SUB
    return (e - SUB_BITS + 1) * SUB + sub


def bucket_of(ns) -> np.ndarray:
    """Vectorised :func:`bucket_index` for an array of latencies (numpy, no jit needed)."""
    ns = np.asarray(ns, dtype=np.int64)
    if ns.size and ns.min() < 0:
        raise ValueError(f"latencies must be >= 0 ns, got {int(ns.min())}")
    out = ns.copy()
    big = ns >= 2 * SUB
    e = np.zeros_like(ns)
    e[big] = np.floor(np.log2(ns[big].astype(np.float64))).astype(np.int64)
    # float log2 is exact at powers of two but may round 2**k - 1 up; fix both directions.
    e[big] -= (ns[big] >> np.minimum(e[big], 62)) == 0
    e[big] += (ns[big] >> np.minimum(e[big] + 1, 62)) >= 1
    sub = (ns[big] >> (e[big] - SUB_BITS)) - SUB
    out[big] = (e[big] - SUB_BITS + 1) * SUB + sub
    out[ns >= (1 << MAX_EXP)] = OVERFLOW
    return out


def bucket_lower(b: int) -> int:
    """Smallest latency (ns) that falls into bucket ``b``."""
    if b < 2 * SUB:
        return b
    e, sub = divmod(b, SUB)
    e += SUB_BITS - 1
    return (SUB + sub) << (e - SUB_BITS)


def bucket_width(b: int) -> int:
    """Number of distinct integer latencies in bucket ``b`` (the overflow bucket is unbounded)."""
    if b < 2 * SUB:
        return 1
    if b >= OVERFLOW:
        raise ValueError("the overflow bucket has no width")
    return 1 << (b // SUB + SUB_BITS - 1 - SUB_BITS)


_LOWER = np.array([bucket_lower(b) for b in range(N_BUCKETS)], dtype=np.float64)
# Middle of each bucket's integer range [lo, lo + w - 1]; the overflow bucket has none (the
# recorded max stands in for it).
_MID = np.array([bucket_lower(b) + (bucket_width(b) - 1) / 2 for b in range(OVERFLOW)] + [math.inf])


def _check_q(q) -> float:
    q = float(q)
    if not 0.0 <= q <= 100.0:
        raise ValueError(f"percentile must be within [0, 100], got {q}")
    return q


def _hist_percentile(counts: np.ndarray, q: float, vmax: int) -> float:
    """Nearest-rank percentile ``q`` of a bucket-count vector, as the middle of its bucket."""
    total = int(counts.sum())
    if total == 0:
        return math.nan
    rank = max(1, math.ceil(q / 100.0 * total))
    b = int(np.searchsorted(np.cumsum(counts), rank))
    return float(min(_MID[b], vmax)) if vmax > 0 else float(_MID[b])


class HistStats(NamedTuple):
    count: int
    mean_ns: float
    p50_ns: float
    p99_ns: float
    p999_ns: float
    max_ns: int


class LatencyHistogram:
    """A log-linear latency histogram in plain numpy (same buckets as the stats plane).

    Keeps the exact count, sum (for the mean) and max beside the bucket counts. Histograms
    merge by addition, which is how results build rack-wide figures from per-node ones.
    """

    __slots__ = ("counts", "total_ns", "max_ns")

    def __init__(self, counts: np.ndarray | None = None, *, total_ns: int = 0, max_ns: int = 0):
        if counts is None:
            counts = np.zeros(N_BUCKETS, dtype=np.int64)
        else:
            counts = np.array(counts, dtype=np.int64)
            if counts.shape != (N_BUCKETS,):
                raise ValueError(f"a latency histogram has {N_BUCKETS} buckets, got shape {counts.shape}")
            if counts.size and counts.min() < 0:
                raise ValueError("bucket counts must be >= 0")
        self.counts = counts
        self.total_ns = int(total_ns)
        self.max_ns = int(max_ns)

    def add(self, latency_ns) -> "LatencyHistogram":
        """Add one latency or an array of them (ns, >= 0); returns self."""
        arr = np.atleast_1d(np.asarray(latency_ns))
        if arr.dtype.kind not in "iu":
            if arr.size and not np.all(arr == np.floor(arr)):
                raise ValueError("latencies are integer nanoseconds")
            arr = arr.astype(np.int64)
        b = bucket_of(arr)
        np.add.at(self.counts, b, 1)
        if arr.size:
            self.total_ns += int(arr.sum())
            self.max_ns = max(self.max_ns, int(arr.max()))
        return self

    def merge(self, other: "LatencyHistogram") -> "LatencyHistogram":
        """Add ``other``'s samples to this histogram; returns self."""
        if not isinstance(other, LatencyHistogram):
            raise TypeError(f"can only merge a LatencyHistogram, got {type(other).__name__}")
        self.counts += other.counts
        self.total_ns += other.total_ns
        self.max_ns = max(self.max_ns, other.max_ns)
        return self

    @classmethod
    def merged(cls, hists: Iterable["LatencyHistogram"]) -> "LatencyHistogram":
        out = cls()
        for h in hists:
            out.merge(h)
        return out

    def copy(self) -> "LatencyHistogram":
        return LatencyHistogram(self.counts, total_ns=self.total_ns, max_ns=self.max_ns)

    @property
    def count(self) -> int:
        return int(self.counts.sum())

    @property
    def mean(self) -> float:
        """Exact mean latency in ns (nan when empty)."""
        n = self.count
        return self.total_ns / n if n else math.nan

    def percentile(self, q: float) -> float:
        """Nearest-rank percentile ``q`` (0..100) in ns, within REL_ERROR; nan when empty."""
        return _hist_percentile(self.counts, _check_q(q), self.max_ns)

    def statistics(self) -> HistStats:
        return HistStats(self.count, self.mean, self.percentile(50), self.percentile(99),
                         self.percentile(99.9), self.max_ns)

    def __repr__(self) -> str:
        return f"<LatencyHistogram n={self.count} mean={self.mean:.1f} ns max={self.max_ns} ns>"


# -- jitted hot path ----------------------------------------------------------------------------


@njit(cache=True)
def record_op(w, kind, latency_ns, ok):
    """Record one operation in slot ``w`` (a slot's int64 words); returns an error code (0 = ok).

    Callable from jitted node code with ``ProcWriter.words``. Only the slot's owner may call it.
    """
    cur = w[W_CUR_STEP]
    if cur < 0:
        return _ERR_NO_STEP
    return record_op_in(w, cur, kind, latency_ns, ok)


@njit(cache=True)
def record_op_in(w, step, kind, latency_ns, ok):
    """:func:`record_op` into step record ``step`` (begun earlier), not necessarily the current
    one: an operation issued in a timed run that returns after the next step began still belongs
    to the step that issued it."""
    if kind < 0 or kind >= N_KINDS:
        return _ERR_KIND
    if latency_ns < 0:
        return _ERR_LATENCY
    base = STEPS_OFF + step * STEP_WORDS
    w[base + S_COUNT + kind] += 1
    if not ok:
        w[base + S_FAIL + kind] += 1
    w[base + S_SUM + kind] += latency_ns
    if latency_ns > w[base + S_MAX + kind]:
        w[base + S_MAX + kind] = latency_ns
    w[base + S_HIST + kind * N_BUCKETS + bucket_index(latency_ns)] += 1
    return _OK


@njit(cache=True)
def record_batch(w, kinds, latencies, oks):
    """Record a batch; validates everything first so a bad element records nothing.

    Returns ``(error code, index of the offending element or -1)``.
    """
    n = kinds.shape[0]
    if latencies.shape[0] != n or oks.shape[0] != n:
        return _ERR_LENGTH, -1
    if w[W_CUR_STEP] < 0:
        return _ERR_NO_STEP, -1
    for i in range(n):
        if kinds[i] < 0 or kinds[i] >= N_KINDS:
            return _ERR_KIND, i
        if latencies[i] < 0:
            return _ERR_LATENCY, i
    for i in range(n):
        record_op(w, kinds[i], latencies[i], oks[i])
    return _OK, -1


# -- records ------------------------------------------------------------------------------------


class ProcInfo(NamedTuple):
    name: str
    role: str


def _freeze(a: np.ndarray) -> np.ndarray:
    a.flags.writeable = False
    return a


@dataclass(frozen=True, eq=False)
class StepRecord:
    """One scenario step as one process recorded it (a copy; arrays are read-only)."""

    index: int
    label: str
    vstart_ns: int
    vend_ns: int | None             # None while the step runs
    real_start: float               # time.time() seconds
    real_end: float | None
    counts: tuple                   # per kind (OP_KINDS order): completed operations
    failures: tuple                 # per kind: of which failed (ok=False)
    total_ns: tuple                 # per kind: latency sums (exact means)
    max_ns: tuple                   # per kind: largest latency
    hist: np.ndarray                # [N_KINDS, N_BUCKETS] bucket counts

    @property
    def running(self) -> bool:
        return self.vend_ns is None

    def ops(self, kind: int | str | None = None) -> int:
        return sum(self.counts) if kind is None else self.counts[_kind(kind)]

    def failed(self, kind: int | str | None = None) -> int:
        return sum(self.failures) if kind is None else self.failures[_kind(kind)]

    def histogram(self, kind: int | str | None = None) -> LatencyHistogram:
        """A LatencyHistogram of one kind, or of all kinds merged (None)."""
        if kind is None:
            return LatencyHistogram(self.hist.sum(axis=0), total_ns=sum(self.total_ns),
                                    max_ns=max(self.max_ns))
        k = _kind(kind)
        return LatencyHistogram(self.hist[k], total_ns=self.total_ns[k], max_ns=self.max_ns[k])

    def percentile(self, kind: int | str | None, q: float) -> float:
        """Latency percentile in ns of one kind or all kinds (None); nan without operations."""
        q = _check_q(q)
        if kind is None:
            return _hist_percentile(self.hist.sum(axis=0), q, max(self.max_ns))
        k = _kind(kind)
        return _hist_percentile(self.hist[k], q, self.max_ns[k])

    def mean(self, kind: int | str | None = None) -> float:
        n = self.ops(kind)
        s = sum(self.total_ns) if kind is None else self.total_ns[_kind(kind)]
        return s / n if n else math.nan


def _kind(kind) -> int:
    if isinstance(kind, str):
        try:
            return KIND_INDEX[kind]
        except KeyError:
            raise ValueError(f"unknown op kind {kind!r}; kinds are {', '.join(OP_KINDS)}") from None
    k = operator.index(kind)
    if not 0 <= k < N_KINDS:
        raise ValueError(f"op kind {k} out of range 0..{N_KINDS - 1} ({', '.join(OP_KINDS)})")
    return k


@dataclass(frozen=True, eq=False)
class ProcSnapshot:
    """What one process has published, copied out of its slot."""

    index: int
    name: str
    role: str
    pid: int                        # 0 until the process called begin()
    state: int
    started: float | None           # time.time() of begin()
    heartbeat_time: float | None    # time.time() of the last heartbeat
    heartbeat_mono_ns: int          # time.monotonic_ns() of the last heartbeat (same clock rack-wide)
    vnow_ns: int
    events: int
    verbs: int
    gauges: Gauges
    heartbeats: int
    step: int | None                # index of the step being (or last) recorded
    steps: tuple                    # StepRecord for each step begun, by index
    stale: bool = False             # header copy is older than the latest update (writer was busy)
    counters: Counters = Counters()
    exit_code: int | None = None    # as the supervisor saw it (negative: killed by that signal); None: alive
    system: dict = field(default_factory=dict)   # the system's own counters, by name (see the module docstring)
    # operations of ``step`` when ``vnow_ns`` was published (None: no heartbeat since it began), for rates
    step_ops_at_vnow: int | None = None

    @property
    def dead(self) -> bool:
        """The process ended abnormally (killed, or a non-zero exit status)."""
        return self.exit_code is not None and self.exit_code != 0

    @property
    def state_name(self) -> str:
        # A node killed by a signal never publishes a final state: its slot still says what it
        # was doing, so the supervisor's exit word decides. "failed" (the node reported its own
        # exception before exiting) says more than "dead" and is kept.
        if self.dead and self.state != STATE_FAILED:
            return "dead"
        return STATE_NAMES[self.state] if 0 <= self.state < len(STATE_NAMES) else f"?{self.state}"

    def current(self) -> StepRecord | None:
        """The record of ``step`` (None before the first step)."""
        for s in self.steps:
            if s.index == self.step:
                return s
        return None

    def step_record(self, index: int) -> StepRecord | None:
        for s in self.steps:
            if s.index == index:
                return s
        return None

    def ops(self) -> int:
        """Operations over all steps."""
        return sum(s.ops() for s in self.steps)


class LogEntry(NamedTuple):
    """One line of the rack's event log (a ring in the plane, :meth:`StatsPlane.events`): not an
    event of the virtual-time scheduler (``shm.sim.env.Event``)."""
    seq: int
    time: float                     # time.time() seconds when logged
    vtime_ns: int
    kind: str
    node: str
    text: str


#: The name :class:`LogEntry` had before issue 42, kept for code that reads the plane's log with it.
Event = LogEntry


class PlaneStats(NamedTuple):
    name: str
    size: int
    procs: int
    max_steps: int
    reads: int
    read_retries: int
    stale_reads: int
    events_logged: int              # rack-wide, since creation
    events_overwritten: int         # rack-wide, pushed out of the ring
    events_skipped: int             # by this reader: entries whose writer never published them


class WriterStats(NamedTuple):
    slot: int
    name: str
    pid: int
    state: str
    step: int | None
    steps: int
    heartbeats: int
    ops: int


# -- helpers ------------------------------------------------------------------------------------


def _utf8(text: str, limit: int, what: str) -> bytes:
    if not isinstance(text, str):
        raise TypeError(f"{what} must be a str, got {type(text).__name__}")
    raw = text.encode("utf-8")
    if len(raw) <= limit:
        return raw
    # Cut at a character boundary: drop a trailing partial sequence.
    return raw[:limit].decode("utf-8", "ignore").encode("utf-8")


def _from_utf8(raw: np.ndarray) -> str:
    return bytes(raw).rstrip(b"\0").decode("utf-8", "replace")


def _nonneg_int(value, what: str) -> int:
    try:
        v = operator.index(value)
    except TypeError:
        raise TypeError(f"{what} must be an integer, got {type(value).__name__}") from None
    if v < 0:
        raise ValueError(f"{what} must be >= 0, got {v}")
    return v


def _counter_words(counters) -> list[tuple[int, int]]:
    """``{name: value}`` of COUNTER_NAMES -> [(header word, value)], refusing unknown names and negatives."""
    if not counters:
        return []
    out = []
    for name, v in counters.items():
        if name not in _COUNTER_WORD:
            raise ValueError(f"unknown counter {name!r}; counters are {', '.join(COUNTER_NAMES)}")
        out.append((_COUNTER_WORD[name], _nonneg_int(v, name)))
    return out


_U64 = 1 << 64


def _system_words(values) -> tuple[tuple[bytes, ...], list[int], int]:
    """``{name: int | float}`` -> (encoded names, int64 words, float bits) of the first SYS_MAX
    counters; refuses a name that is not a non-empty str and a value that is not a finite number."""
    names, words, floats = [], [], 0
    for i, (name, v) in enumerate(dict(values or {}).items()):
        if i == SYS_MAX:
            break
        if not isinstance(name, str) or not name:
            raise ValueError(f"a system counter's name must be a non-empty str, got {name!r}")
        if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)):
            raise TypeError(f"system counter {name!r} must be a number, got {type(v).__name__}")
        if isinstance(v, (float, np.floating)):
            v = float(v)
            if not math.isfinite(v):
                raise ValueError(f"system counter {name!r} must be finite, got {v}")
            floats |= 1 << i
            words.append(int(np.array([v], dtype=np.float64).view(np.int64)[0]))
        else:
            v = int(v)
            if not -(1 << 63) <= v < (1 << 63):
                raise ValueError(f"system counter {name!r} = {v} does not fit 64 bits")
            words.append(v)
        names.append(_utf8(name, SYS_NAME_BYTES, "a system counter's name"))
    return tuple(names), words, floats - _U64 if floats >= (1 << 63) else floats


def _system_counters(region: np.ndarray) -> dict:
    """The counters of a copied SYS_WORDS region, by name, in publishing order."""
    n = min(max(int(region[Y_COUNT]), 0), SYS_MAX)
    floats = int(region[Y_FLOATS]) % _U64
    raw = region[Y_NAMES:Y_VALUES].view(np.uint8)
    out = {}
    for i in range(n):
        name = _from_utf8(raw[i * SYS_NAME_BYTES:(i + 1) * SYS_NAME_BYTES])
        v = region[Y_VALUES + i]
        out[name] = float(np.array([v], dtype=np.int64).view(np.float64)[0]) if floats >> i & 1 else int(v)
    return out


def _state(state) -> int:
    if isinstance(state, str):
        if state not in STATE_NAMES:
            raise ValueError(f"unknown state {state!r}; states are {', '.join(STATE_NAMES)}")
        return STATE_NAMES.index(state)
    s = operator.index(state)
    if not STATE_STARTING <= s < len(STATE_NAMES):
        raise ValueError(f"state {s} out of range {STATE_STARTING}..{len(STATE_NAMES) - 1} "
                         f"({', '.join(STATE_NAMES[1:])})")
    return s


# -- the plane ----------------------------------------------------------------------------------


class StatsPlane:
    """Handle on a rack's stats segment; ``StatsPlane.create`` (supervisor) or ``attach`` (nodes)."""

    def __init__(self, seg: Segment, procs: list[ProcInfo], max_steps: int):
        self._seg = seg
        self.name = seg.name
        self.procs = list(procs)
        self.max_steps = max_steps
        self._index = {p.name: i for i, p in enumerate(self.procs)}
        n = len(self.procs)
        self._hdr = seg.array(np.int64, 0, HEADER_WORDS)
        sw = _slot_words(max_steps)
        self._slots = [seg.array(np.int64, 8 * (HEADER_WORDS + i * sw), sw) for i in range(n)]
        self._slot_floats = [s[:SLOT_HDR_WORDS].view(np.float64) for s in self._slots]
        ev = _events_off(n, max_steps)
        self._ev = seg.array(np.int64, 8 * ev, EVENT_CAPACITY * EVENT_WORDS)
        self._ev_bytes = seg.array(np.uint8, 8 * ev, 8 * EVENT_CAPACITY * EVENT_WORDS)
        self._writers: dict[int, ProcWriter] = {}
        self._last: dict[int, tuple[np.ndarray, np.ndarray]] = {}   # last consistent header copies
        self._stuck: dict[int, float] = {}                          # event pos -> first seen unpublished
        self._reads = self._retries = self._stale = self._skipped = 0

    # -- construction ------------------------------------------------------------------------

    @classmethod
    def create(cls, procs: Sequence[ProcInfo], *, prefix: str, max_steps: int = 64) -> "StatsPlane":
        procs = [p if isinstance(p, ProcInfo) else ProcInfo(*p) for p in procs]
        if not procs:
            raise ValueError("a stats plane needs at least one process")
        seen = set()
        for p in procs:
            if not isinstance(p.name, str) or not p.name or not isinstance(p.role, str):
                raise ValueError(f"invalid process {p!r}: name and role must be strings, name non-empty")
            if p.name in seen:
                raise ValueError(f"duplicate process name {p.name!r}")
            seen.add(p.name)
        max_steps = operator.index(max_steps)
        if not 1 <= max_steps <= 4096:
            raise ValueError(f"max_steps must be within 1..4096, got {max_steps}")
        seg = Segment.create("stats", _segment_bytes(len(procs), max_steps), prefix=prefix)
        try:
            hdr = seg.array(np.int64, 0, HEADER_WORDS)
            hdr[G_VERSION] = VERSION
            hdr[G_NPROCS] = len(procs)
            hdr[G_MAX_STEPS] = max_steps
            hdr[G_SLOT_WORDS] = _slot_words(max_steps)
            hdr[G_NKINDS] = N_KINDS
            hdr[G_NBUCKETS] = N_BUCKETS
            hdr[G_EVCAP] = EVENT_CAPACITY
            hdr[G_EVWORDS] = EVENT_WORDS
            plane = cls(seg, procs, max_steps)
            for w in plane._slots:
                w[W_CUR_STEP] = -1
                w[W_HB_STEP_OPS] = -1
            # Magic last, with release: an attacher that sees it sees the rest.
            store_release(hdr, G_MAGIC, MAGIC)
            del hdr
            return plane
        except BaseException:
            seg.close()
            raise

    @classmethod
    def attach(cls, desc: dict) -> "StatsPlane":
        """Map the plane described by ``describe()`` (in another process)."""
        if not isinstance(desc, dict) or desc.get("kind") != "dmrack.stats":
            raise ValueError(f"not a stats plane description: {desc!r}")
        try:
            procs = [ProcInfo(str(n), str(r)) for n, r in desc["procs"]]
            max_steps = int(desc["max_steps"])
            name = desc["name"]
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"malformed stats plane description ({e}): {desc!r}") from None
        seg = Segment.attach(name)
        try:
            cls._validate(seg, len(procs), max_steps)
            return cls(seg, procs, max_steps)
        except BaseException:
            seg.close()
            raise

    @staticmethod
    def _validate(seg: Segment, n_procs: int, max_steps: int) -> None:
        if seg.size < 8 * HEADER_WORDS:
            raise ValueError(f"segment {seg.name!r} is too small to be a stats plane")
        hdr = seg.array(np.int64, 0, HEADER_WORDS)
        if int(load_acquire(hdr, G_MAGIC)) != MAGIC:
            raise ValueError(f"segment {seg.name!r} is not an initialised dmrack stats plane")
        expect = {G_VERSION: VERSION, G_NPROCS: n_procs, G_MAX_STEPS: max_steps,
                  G_SLOT_WORDS: _slot_words(max_steps), G_NKINDS: N_KINDS, G_NBUCKETS: N_BUCKETS,
                  G_EVCAP: EVENT_CAPACITY, G_EVWORDS: EVENT_WORDS}
        names = {G_VERSION: "version", G_NPROCS: "processes", G_MAX_STEPS: "max_steps",
                 G_SLOT_WORDS: "slot words", G_NKINDS: "op kinds", G_NBUCKETS: "buckets",
                 G_EVCAP: "event capacity", G_EVWORDS: "event words"}
        for word, want in expect.items():
            got = int(hdr[word])
            if got != want:
                raise ValueError(f"stats plane {seg.name!r}: {names[word]} is {got}, expected {want} "
                                 f"(description and segment disagree, or another dmrack version)")
        if seg.size < _segment_bytes(n_procs, max_steps):
            raise ValueError(f"stats plane {seg.name!r}: segment too small for its geometry")

    def describe(self) -> dict:
        """A picklable description for ``StatsPlane.attach`` in another process."""
        return {"kind": "dmrack.stats", "name": self.name,
                "procs": [tuple(p) for p in self.procs], "max_steps": self.max_steps}

    # -- slots -------------------------------------------------------------------------------

    def index(self, slot: int | str) -> int:
        """Slot number of a process given by number or name."""
        self._check_open()
        if isinstance(slot, str):
            try:
                return self._index[slot]
            except KeyError:
                raise KeyError(f"no process named {slot!r} in the stats plane "
                               f"(processes: {', '.join(self._index)})") from None
        i = operator.index(slot)
        if not 0 <= i < len(self.procs):
            raise IndexError(f"stats slot {i} out of range: the plane has {len(self.procs)} "
                             f"slots (0..{len(self.procs) - 1})")
        return i

    def writer(self, slot: int | str) -> "ProcWriter":
        """The writer of one slot (the same object on repeated calls in one process)."""
        i = self.index(slot)
        w = self._writers.get(i)
        if w is None:
            w = self._writers[i] = ProcWriter(self, i)
        return w

    def _read_header(self, i: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, bool]:
        w = self._slots[i]
        metas_at = SLOT_HDR_WORDS + self.max_steps * STEP_WORDS
        sys_at = _sys_off(self.max_steps)
        hdr = metas = sysw = None
        for attempt in range(READ_TRIES):
            s1 = int(load_acquire(w, W_SEQ))
            if s1 & 1:
                self._retries += 1
                time.sleep(0)
                continue
            hdr = w[:SLOT_HDR_WORDS].copy()
            hi = min(max(int(hdr[W_STEP_HI]), 0), self.max_steps)
            metas = w[metas_at:metas_at + hi * META_WORDS].copy().reshape(hi, META_WORDS)
            sysw = w[sys_at:sys_at + SYS_WORDS].copy()
            fence()
            if int(load_acquire(w, W_SEQ)) == s1:
                self._last[i] = (hdr, metas, sysw)
                return hdr, metas, sysw, False
            self._retries += 1
        self._stale += 1
        if i in self._last:
            hdr, metas, sysw = self._last[i]
        elif hdr is None:
            # Never saw an even sequence: take an unsynchronised copy (each word is intact).
            hdr = w[:SLOT_HDR_WORDS].copy()
            hi = min(max(int(hdr[W_STEP_HI]), 0), self.max_steps)
            metas = w[metas_at:metas_at + hi * META_WORDS].copy().reshape(hi, META_WORDS)
            sysw = w[sys_at:sys_at + SYS_WORDS].copy()
        return hdr, metas, sysw, True

    def read(self, slot: int | str) -> ProcSnapshot:
        """Copy one process's slot; never blocks on the writer (see the module docstring)."""
        i = self.index(slot)
        self._reads += 1
        hdr, metas, sysw, stale = self._read_header(i)
        w = self._slots[i]
        steps = []
        for k in range(metas.shape[0]):
            m = metas[k]
            if not m[M_BEGUN]:
                continue
            base = STEPS_OFF + k * STEP_WORDS
            data = w[base:base + STEP_WORDS].copy()
            steps.append(StepRecord(
                index=k,
                label=_from_utf8(m[M_LABEL:].view(np.uint8)),
                vstart_ns=int(m[M_VSTART]),
                vend_ns=None if m[M_VEND] < 0 else int(m[M_VEND]),
                real_start=int(m[M_REAL_START]) / 1e9,
                real_end=None if m[M_REAL_END] < 0 else int(m[M_REAL_END]) / 1e9,
                counts=tuple(data[S_COUNT:S_COUNT + N_KINDS].tolist()),
                failures=tuple(data[S_FAIL:S_FAIL + N_KINDS].tolist()),
                total_ns=tuple(data[S_SUM:S_SUM + N_KINDS].tolist()),
                max_ns=tuple(data[S_MAX:S_MAX + N_KINDS].tolist()),
                hist=_freeze(data[S_HIST:S_HIST + N_KINDS * N_BUCKETS].reshape(N_KINDS, N_BUCKETS)),
            ))
        floats = hdr.view(np.float64)
        p = self.procs[i]
        cur = int(hdr[W_CUR_STEP])
        # Outside the seqlock on purpose (see the module docstring): the owner may have died mid-update.
        exited = int(load_acquire(w, W_EXITED))
        exit_code = int(w[W_EXIT_CODE]) if exited else None
        return ProcSnapshot(
            index=i, name=p.name, role=p.role,
            pid=int(hdr[W_PID]),
            state=int(hdr[W_STATE]),
            started=int(hdr[W_START_REAL]) / 1e9 if hdr[W_START_REAL] else None,
            heartbeat_time=int(hdr[W_HB_REAL]) / 1e9 if hdr[W_HB_REAL] else None,
            heartbeat_mono_ns=int(hdr[W_HB_MONO]),
            vnow_ns=int(hdr[W_VNOW]),
            events=int(hdr[W_EVENTS]),
            verbs=int(hdr[W_VERBS]),
            gauges=Gauges(*(float(x) for x in floats[W_GAUGES:W_GAUGES + len(GAUGES)])),
            heartbeats=int(hdr[W_HEARTBEATS]),
            step_ops_at_vnow=None if cur < 0 or hdr[W_HB_STEP_OPS] < 0 else int(hdr[W_HB_STEP_OPS]),
            step=None if cur < 0 else cur,
            steps=tuple(steps),
            stale=stale,
            counters=Counters(*(max(0, int(x)) for x in hdr[W_COUNTERS:W_COUNTERS + len(COUNTER_NAMES)])),
            exit_code=exit_code,
            system=_system_counters(sysw),
        )

    def mark_exited(self, slot: int | str, exit_code: int) -> None:
        """Record that the process of ``slot`` has ended with ``exit_code`` (multiprocessing's
        convention: negative = killed by that signal). Only the supervisor calls this, once the
        process is gone, so it never races the slot's owner; readers then show it as dead."""
        i = self.index(slot)
        code = operator.index(exit_code)
        w = self._slots[i]
        w[W_EXIT_CODE] = code
        store_release(w, W_EXITED, 1)       # the code is visible before the flag

    def snapshot(self) -> tuple[ProcSnapshot, ...]:
        """Every slot, in process order."""
        return tuple(self.read(i) for i in range(len(self.procs)))

    # -- event log ---------------------------------------------------------------------------

    def log(self, vtime_ns: int, kind: str, node: str, text: str) -> int:
        """Append an event to the rack-wide log (any process); returns its sequence number."""
        self._check_open()
        vtime_ns = _nonneg_int(vtime_ns, "vtime_ns")
        kb = _utf8(kind, EVENT_KIND_BYTES, "kind")
        nb = _utf8(node, EVENT_NODE_BYTES, "node")
        tb = _utf8(text, EVENT_TEXT_BYTES, "text")
        pos = int(faa(self._hdr, G_EV_TAIL, 1))
        e = (pos % EVENT_CAPACITY) * EVENT_WORDS
        store_release(self._ev, e + E_STAMP, 2 * pos + 1)
        fence()     # the odd stamp must be visible before any field changes
        self._ev[e + E_REAL] = time.time_ns()
        self._ev[e + E_VTIME] = vtime_ns
        b = 8 * e
        for off, size, raw in ((E_KIND, EVENT_KIND_BYTES, kb), (E_NODE, EVENT_NODE_BYTES, nb),
                               (E_TEXT, EVENT_TEXT_BYTES, tb)):
            field = self._ev_bytes[b + 8 * off:b + 8 * off + size]
            field[:] = 0
            field[:len(raw)] = np.frombuffer(raw, dtype=np.uint8)
        store_release(self._ev, e + E_STAMP, 2 * pos + 2)
        return pos

    def _read_event(self, pos: int) -> LogEntry | str:
        """The event at ``pos``, or "pending" (not yet published) or "gone" (overwritten)."""
        e = (pos % EVENT_CAPACITY) * EVENT_WORDS
        want = 2 * pos + 2
        for attempt in range(READ_TRIES):
            s1 = int(load_acquire(self._ev, e + E_STAMP))
            if s1 > want:
                return "gone"
            if s1 != want:
                time.sleep(0)
                continue
            words = self._ev[e:e + EVENT_WORDS].copy()
            fence()
            if int(load_acquire(self._ev, e + E_STAMP)) != s1:
                continue
            raw = words.view(np.uint8)
            return LogEntry(pos, int(words[E_REAL]) / 1e9, int(words[E_VTIME]),
                         _from_utf8(raw[8 * E_KIND:8 * E_NODE]),
                         _from_utf8(raw[8 * E_NODE:8 * E_TEXT]),
                         _from_utf8(raw[8 * E_TEXT:]))
        return "pending"

    def events(self, since: int = 0) -> list[LogEntry]:
        """Events with ``seq >= since`` still in the ring, oldest first.

        Stops before an entry that is reserved but not yet published, so that ``since = last
        seq + 1`` on the next call never misses it; an entry left unpublished for more than
        ``EVENT_STUCK_S`` (its writer died mid-write) is skipped.
        """
        self._check_open()
        since = _nonneg_int(since, "since")
        tail = int(load_acquire(self._hdr, G_EV_TAIL))
        start = max(since, tail - EVENT_CAPACITY)
        out = []
        for pos in range(start, tail):
            ev = self._read_event(pos)
            if ev == "gone":
                continue
            if ev == "pending":
                first = self._stuck.setdefault(pos, time.monotonic())
                if time.monotonic() - first < EVENT_STUCK_S:
                    break
                self._skipped += 1
                continue
            self._stuck.pop(pos, None)
            out.append(ev)
        for pos in [p for p in self._stuck if p < tail - EVENT_CAPACITY]:
            del self._stuck[pos]
        return out

    # -- life cycle --------------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        return self._hdr is None

    def _check_open(self) -> None:
        if self._hdr is None:
            raise ValueError(f"stats plane {self.name!r} is closed")

    def close(self) -> None:
        """Drop every view and close the segment (the creator also unlinks it). Idempotent."""
        if self._hdr is None:
            return
        for w in self._writers.values():
            w._w = w._f = w._metas = w._sys = None
        self._writers.clear()
        self._hdr = self._ev = self._ev_bytes = None
        self._slots = self._slot_floats = []
        self._last.clear()
        self._seg.close()

    def __enter__(self) -> "StatsPlane":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def statistics(self) -> PlaneStats:
        logged = 0 if self._hdr is None else int(load_acquire(self._hdr, G_EV_TAIL))
        return PlaneStats(self.name, self._seg.size, len(self.procs), self.max_steps, self._reads,
                          self._retries, self._stale, logged, max(0, logged - EVENT_CAPACITY),
                          self._skipped)

    def __repr__(self) -> str:
        return f"<StatsPlane {self.name} procs={len(self.procs)} max_steps={self.max_steps}>"


_record_fast = None


def _record_entry():
    """``record_op``'s compiled entry point for (slot words, int, int, bool).

    Calling a numba dispatcher from Python costs ~250 ns, almost all of it typing the
    arguments; the entry point of the one specialisation we need skips that and costs ~20 ns.
    It converts its arguments like ``int()``/``bool()``, and is only ever handed our own
    int64 slot array, so skipping the dispatcher's type checks is safe. Should a numba version
    not return an entry point from ``compile``, the dispatcher itself is used.
    """
    global _record_fast
    if _record_fast is None:
        slot_t = types.Array(types.int64, 1, "C")
        entry = record_op.compile((slot_t, types.int64, types.int64, types.boolean))
        _record_fast = entry if callable(entry) else record_op
    return _record_fast


# -- the writer ---------------------------------------------------------------------------------


_RECORD_ERRORS = {
    _ERR_NO_STEP: "no step begun: call step(index, vstart_ns, label) before recording",
    _ERR_KIND: f"op kind out of range 0..{N_KINDS - 1} ({', '.join(OP_KINDS)})",
    _ERR_LATENCY: "latency must be >= 0 ns",
    _ERR_LENGTH: "kinds, latencies and oks must have the same length",
}


class ProcWriter:
    """The owner's side of one slot: the only code that writes it (see ``StatsPlane.writer``)."""

    __slots__ = ("plane", "slot", "name", "_w", "_f", "_metas", "_sys", "_sys_names", "_rec", "_lock")

    def __init__(self, plane: StatsPlane, slot: int):
        self.plane = plane
        self.slot = slot
        self.name = plane.procs[slot].name
        self._w = plane._slots[slot]
        self._f = plane._slot_floats[slot]
        at = SLOT_HDR_WORDS + plane.max_steps * STEP_WORDS
        self._metas = self._w[at:at + plane.max_steps * META_WORDS].reshape(plane.max_steps, META_WORDS)
        at = _sys_off(plane.max_steps)
        self._sys = self._w[at:at + SYS_WORDS]
        self._sys_names: tuple = ()         # the names last written (rewritten only when they change)
        self._rec = _record_entry()
        # A node's heartbeat thread and its event loop both write the header (heartbeat vs.
        # step/state changes): the seqlock allows one writer at a time, so they take turns.
        self._lock = threading.Lock()

    @property
    def words(self) -> np.ndarray:
        """The slot's int64 words, for ``record_op``/``record_batch`` from jitted code."""
        self._check_open()
        return self._w

    def _check_open(self) -> None:
        if self._w is None:
            raise ValueError(f"stats writer of {self.name!r}: the plane is closed")

    @contextmanager
    def _header(self):
        """Seqlock write section over the slot header and the step meta table."""
        self._check_open()
        w = self._w
        with self._lock:
            seq = int(w[W_SEQ])                 # only we write it
            store_release(w, W_SEQ, seq + 1)
            fence()     # readers must see the odd sequence before any field changes
            try:
                yield w
            finally:
                store_release(w, W_SEQ, seq + 2)

    def _require_begun(self) -> None:
        self._check_open()
        if self._w[W_STATE] == STATE_EMPTY:
            raise RuntimeError(f"stats slot {self.slot} ({self.name!r}): call begin(pid) first")

    # -- life cycle --------------------------------------------------------------------------

    def begin(self, pid: int | None = None) -> None:
        """Mark the slot alive (state starting) with ``pid`` (default: this process)."""
        pid = os.getpid() if pid is None else _nonneg_int(pid, "pid")
        if self._w[W_EXITED]:
            # a new process in the slot of one that exited (a restart step): alive again
            store_release(self._w, W_EXITED, 0)
            self._w[W_EXIT_CODE] = 0
        with self._header() as w:
            w[W_PID] = pid
            w[W_STATE] = STATE_STARTING
            w[W_START_REAL] = time.time_ns()
            w[W_START_MONO] = time.monotonic_ns()
            w[W_HB_REAL] = w[W_START_REAL]
            w[W_HB_MONO] = w[W_START_MONO]

    def heartbeat(self, vnow_ns: int, events: int, verbs: int, *, nic_util: float | None = None,
                  link_util: float | None = None, pcie_util: float | None = None,
                  state: int | str | None = None, counters: dict | None = None,
                  system: dict | None = None) -> None:
        """Publish progress: virtual time, events processed, verbs issued, gauges (None: keep),
        ``counters`` (a dict of some of ``COUNTER_NAMES``; the others keep their values) and ``system``
        (the system's own counters, all of them: see :meth:`set_system_counters`; None: keep)."""
        self._require_begun()
        vnow_ns = _nonneg_int(vnow_ns, "vnow_ns")
        events = _nonneg_int(events, "events")
        verbs = _nonneg_int(verbs, "verbs")
        gauges = []
        for k, (name, v) in enumerate((("nic_util", nic_util), ("link_util", link_util),
                                       ("pcie_util", pcie_util))):
            if v is None:
                continue
            v = float(v)
            if not (math.isfinite(v) and v >= 0.0):
                raise ValueError(f"gauge {name} must be a finite fraction >= 0, got {v}")
            gauges.append((W_GAUGES + k, v))
        st = None if state is None else _state(state)
        cnt = _counter_words(counters)
        sysc = None if system is None else _system_words(system)
        with self._header() as w:
            for word, v in cnt:
                w[word] = v
            if sysc is not None:
                self._put_system(*sysc)
            w[W_VNOW] = vnow_ns
            cur = int(w[W_CUR_STEP])
            if cur >= 0:
                # Counted now, beside vnow: the pair a reader's rates use (the step's live counters
                # run up to a heartbeat ahead of the published vnow; see the module docstring).
                at = STEPS_OFF + cur * STEP_WORDS + S_COUNT
                w[W_HB_STEP_OPS] = int(w[at:at + N_KINDS].sum())
            w[W_EVENTS] = events
            w[W_VERBS] = verbs
            w[W_HB_REAL] = time.time_ns()
            w[W_HB_MONO] = time.monotonic_ns()
            w[W_HEARTBEATS] += 1
            for word, v in gauges:
                self._f[word] = v
            if st is not None:
                w[W_STATE] = st

    def set_counters(self, **counters: int) -> None:
        """Publish some of ``COUNTER_NAMES`` (values >= 0) without a heartbeat."""
        cnt = _counter_words(counters)
        self._require_begun()
        with self._header() as w:
            for word, v in cnt:
                w[word] = v

    def set_system_counters(self, values: dict) -> None:
        """Publish the system's own counters, ``{name: int or finite float}`` (the first SYS_MAX;
        they replace the ones published before), without a heartbeat."""
        sysc = _system_words(values)
        self._require_begun()
        with self._header():
            self._put_system(*sysc)

    def _put_system(self, names: tuple, words: list, floats: int) -> None:
        """Inside a header write section: store the counters of ``_system_words``."""
        y = self._sys
        if names != self._sys_names:
            raw = y[Y_NAMES:Y_VALUES].view(np.uint8)
            raw[:] = 0
            for i, b in enumerate(names):
                raw[i * SYS_NAME_BYTES:i * SYS_NAME_BYTES + len(b)] = np.frombuffer(b, dtype=np.uint8)
            self._sys_names = names
        y[Y_VALUES:Y_VALUES + len(words)] = words
        y[Y_FLOATS] = floats
        y[Y_COUNT] = len(words)

    def set_state(self, state: int | str) -> None:
        st = _state(state)
        self._require_begun()
        with self._header() as w:
            w[W_STATE] = st

    def finish(self, state: int | str = STATE_DONE) -> None:
        """Final state (done/failed); a step still running ends at the last published vnow."""
        st = _state(state)
        self._require_begun()
        with self._header() as w:
            cur = int(w[W_CUR_STEP])
            if cur >= 0 and self._metas[cur, M_VEND] < 0:
                self._metas[cur, M_VEND] = max(int(w[W_VNOW]), int(self._metas[cur, M_VSTART]))
                self._metas[cur, M_REAL_END] = time.time_ns()
            w[W_STATE] = st
            w[W_HB_REAL] = time.time_ns()
            w[W_HB_MONO] = time.monotonic_ns()

    # -- steps -------------------------------------------------------------------------------

    def step(self, index: int, vstart_ns: int, label: str = "") -> None:
        """Start recording into step record ``index``; a step still running ends at ``vstart_ns``."""
        self._check_open()
        index = operator.index(index)
        if not 0 <= index < self.plane.max_steps:
            raise IndexError(f"step index {index} out of range: this plane holds "
                             f"{self.plane.max_steps} steps (0..{self.plane.max_steps - 1}); "
                             f"create it with a larger max_steps")
        vstart_ns = _nonneg_int(vstart_ns, "vstart_ns")
        raw = _utf8(label, LABEL_BYTES, "label")
        if self._metas[index, M_BEGUN]:
            raise ValueError(f"stats slot {self.name!r}: step {index} was already begun")
        now = time.time_ns()
        with self._header() as w:
            cur = int(w[W_CUR_STEP])
            if cur >= 0 and self._metas[cur, M_VEND] < 0:
                self._metas[cur, M_VEND] = max(vstart_ns, int(self._metas[cur, M_VSTART]))
                self._metas[cur, M_REAL_END] = now
            m = self._metas[index]
            m[M_VSTART] = vstart_ns
            m[M_VEND] = -1
            m[M_REAL_START] = now
            m[M_REAL_END] = -1
            lab = m[M_LABEL:].view(np.uint8)
            lab[:] = 0
            lab[:len(raw)] = np.frombuffer(raw, dtype=np.uint8)
            m[M_BEGUN] = 1
            w[W_CUR_STEP] = index
            w[W_HB_STEP_OPS] = -1           # no heartbeat in this step yet
            w[W_STEP_HI] = max(int(w[W_STEP_HI]), index + 1)

    def end_step(self, vend_ns: int) -> None:
        """Close the current step at ``vend_ns``. Ending an already ended step changes nothing.

        Operations recorded after the end still count in this step (stragglers that were issued
        in it) until the next ``step()``.
        """
        self._check_open()
        vend_ns = _nonneg_int(vend_ns, "vend_ns")
        cur = int(self._w[W_CUR_STEP])
        if cur < 0:
            raise RuntimeError(f"stats slot {self.name!r}: end_step() without a step begun")
        if self._metas[cur, M_VEND] >= 0:
            return
        vstart = int(self._metas[cur, M_VSTART])
        if vend_ns < vstart:
            raise ValueError(f"stats slot {self.name!r}: step {cur} cannot end at {vend_ns} ns, "
                             f"before its start at {vstart} ns")
        with self._header():
            self._metas[cur, M_VEND] = vend_ns
            self._metas[cur, M_REAL_END] = time.time_ns()

    # -- the hot path ------------------------------------------------------------------------

    def record(self, kind: int, latency_ns: int, ok: bool = True) -> None:
        """Record one operation of ``kind`` with its virtual latency into the current step.

        Arguments are converted like ``int()``/``bool()`` (the compiled entry point does it).
        """
        try:
            err = self._rec(self._w, kind, latency_ns, ok)
        except (TypeError, ValueError, OverflowError) as e:
            self._check_open()
            raise type(e)(f"stats slot {self.name!r}: record(kind, latency_ns, ok) takes integers "
                          f"(latency < 2**63), got kind={kind!r}, latency_ns={latency_ns!r}") from e
        if err:
            raise self._error(err, kind, latency_ns)

    def record_in(self, step: int, kind: int, latency_ns: int, ok: bool = True) -> None:
        """Record one operation into step record ``step``, which must have begun (an operation
        that straddles a step boundary is counted where it was issued)."""
        step = operator.index(step)
        if not 0 <= step < self.plane.max_steps or not self._metas[step, M_BEGUN]:
            raise ValueError(f"stats slot {self.name!r}: record_in step {step}, which has not begun")
        err = record_op_in(self._w, step, int(kind), int(latency_ns), bool(ok))
        if err:
            raise self._error(err, kind, latency_ns)

    def record_many(self, kinds, latencies, oks=None) -> None:
        """Record a batch of operations (array-likes; ``oks`` None = all succeeded)."""
        self._check_open()
        k = np.ascontiguousarray(kinds, dtype=np.int64)
        lat = np.ascontiguousarray(latencies, dtype=np.int64)
        ok = np.ones(k.shape[0], dtype=np.bool_) if oks is None else np.ascontiguousarray(oks, dtype=np.bool_)
        if k.ndim != 1 or lat.ndim != 1 or ok.ndim != 1:
            raise ValueError("record_many takes 1-D arrays")
        err, at = record_batch(self._w, k, lat, ok)
        if err:
            where = f" (element {at})" if at >= 0 else ""
            kind = int(k[at]) if at >= 0 else None
            latency = int(lat[at]) if at >= 0 else None
            raise self._error(err, kind, latency, where)

    def _error(self, err: int, kind, latency, where: str = "") -> Exception:
        if self._w is None:
            return ValueError(f"stats writer of {self.name!r}: the plane is closed")
        msg = f"stats slot {self.name!r}: {_RECORD_ERRORS.get(err, f'error {err}')}{where}"
        if err == _ERR_KIND:
            return ValueError(f"{msg}, got {kind}")
        if err == _ERR_LATENCY:
            return ValueError(f"{msg}, got {latency}")
        if err == _ERR_NO_STEP:
            return RuntimeError(msg)
        return ValueError(msg)

    def statistics(self) -> WriterStats:
        self._check_open()
        w = self._w
        cur = int(w[W_CUR_STEP])
        hi = int(w[W_STEP_HI])
        begun = [k for k in range(hi) if self._metas[k, M_BEGUN]]
        ops = sum(int(w[STEPS_OFF + k * STEP_WORDS + S_COUNT:
                        STEPS_OFF + k * STEP_WORDS + S_COUNT + N_KINDS].sum()) for k in begun)
        st = int(w[W_STATE])
        return WriterStats(self.slot, self.name, int(w[W_PID]), STATE_NAMES[st],
                           None if cur < 0 else cur, len(begun), int(w[W_HEARTBEATS]), ops)

    def __repr__(self) -> str:
        return f"<ProcWriter slot={self.slot} {self.name!r}>"
