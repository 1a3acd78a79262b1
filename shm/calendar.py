"""Reservation calendars: contended hardware as shared arrays that accept out-of-order requests.

Every contended piece of modelled hardware (a link direction, the NIC's processing units, PCIe, a
doorbell lock, an atomic slot) is a *resource*: ``k`` identical servers. Processes run laxly
synchronised, so requests arrive stamped with virtual times that are not in order; a FIFO queue
cannot take them. Instead each resource is a calendar: a ring of time buckets, each holding how
much server time (``k * bucket`` capacity) is already booked in it. A request stamped ``t`` with
cost ``c`` books ``c`` into the first bucket at or after ``t`` with room left (spilling into the
next buckets when it does not fit) and completes at ``max(t, queue start) + c``, where the queue
start is the bucket's start plus its booked work divided by ``k``: a fluid FIFO. This is the
history-based queue model of Graphite/ZSim; it needs no lock, only CAS on one word per bucket, so
any process can book any resource.

A bucket word packs a 32-bit tag (the absolute bucket index modulo 2^32) with 32 bits of booked
work (ps: at most 4.3 ms of server time per bucket), so resetting a bucket that the ring has passed
and booking into it are one CAS. The tag decides "older or later" by half its range: 2^31 buckets
(137 s of virtual time at 64 ns). It was 24 bits until 2026-11-25: 2^23 x 64 ns = 537 ms, and a
bucket not visited for that long (never, with the longer per-node rings, in a long run) was taken
for a later one and its requests served without queueing.

**The ring's span** (``n_buckets x bucket``) must exceed the resource's backlog and the spread of
the stamps it is asked about (a response booked far ahead, behind a long queue, while new requests
are stamped now). Past that, buckets alias: a booking more than a span ahead resets a bucket that
still holds work of a live time, and requests stamped at that time then find a later tag and are
served without queueing (``stale``): the resource carries more than its capacity, silently. A
walk that resets a bucket at or after its own stamp (its backlog alone exceeds the span) is
counted in ``overflows``; either counter above zero means the resource's numbers are wrong
(``Fabric.calendar_errors``). A run whose timing is wrong must not produce a number, so closing a
fabric whose calendars aliased raises :class:`CalendarAliased` (a rack run, a benchmark point and a
test fail with it; a rack of processes reports it instead of its results). A *hint*
word remembers the first bucket that may still have room, so a saturated resource does not walk
its whole backlog on every request.

All times inside are picoseconds (a 9.1 ns service time must not round to 9). The layout of one
resource in the table (int64 words, offset ``o``):

    o+0 servers k      o+1 bucket_ps     o+2 n_buckets (power of two)   o+3 hint (full run)
    o+4 booked_ps      o+5 requests      o+6 stale requests             o+7 queued_ps
    o+8 overflows (buckets reset while live)
    o+9 ... o+9+n_buckets-1  bucket words
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
from numba import njit

from shm.atomics import cas, faa, load_acquire

HEADER_WORDS = 9
_TAG_BITS = 32
_USED_BITS = 32
_TAG_MASK = (1 << _TAG_BITS) - 1
_USED_MASK = (1 << _USED_BITS) - 1
_HALF_TAG = 1 << (_TAG_BITS - 1)
_RUN_BITS = 24
_RUN_MASK = (1 << _RUN_BITS) - 1


@njit(cache=True, inline="always")
def _add(tbl, i, v, private):
    """``tbl[i] += v``: an atomic FAA, or a plain add when one process owns the table."""
    if private:
        tbl[i] += v
    else:
        faa(tbl, i, v)


@njit(cache=True, inline="always")
def _cas(tbl, i, expected, desired, private):
    """CAS of ``tbl[i]``; when one process owns the table nobody races it: a compare and a store."""
    if private:
        old = tbl[i]
        if old == expected:
            tbl[i] = desired
        return old
    return cas(tbl, i, expected, desired)


@njit(cache=True)
def reserve(tbl, o, t, cost, private=False):
    """Book ``cost`` ps of one server of the resource at ``o``, not before ``t`` ps.

    Returns the completion time in ps. A request older than the ring's memory (the lax window
    let it fall more than ``n_buckets`` buckets behind) is served without queueing and counted
    as stale. ``private``: this process alone books the table (a co-located rack,
    ``Fabric.create(private=True)``), so plain loads and stores do what the atomics do, the
    same values in the same order, without the five locked instructions of a booking.
    """
    if cost <= 0:
        return t
    k = tbl[o]
    width = tbl[o + 1]
    nb = tbl[o + 2]
    cap = k * width
    j0 = t // width
    j = j0
    # The hint word packs a run [run_start, run_start + run_len) of buckets known to be full.
    hw = tbl[o + 3] if private else load_acquire(tbl, o + 3)
    run_start = hw >> _RUN_BITS
    run_end = run_start + (hw & _RUN_MASK)
    if run_start <= j0 < run_end:
        j = run_end
        walk_from = run_start
    else:
        walk_from = j0
    remaining = cost
    qstart = -1
    end = t
    while remaining > 0:
        idx = o + HEADER_WORDS + (j & (nb - 1))
        w = tbl[idx] if private else load_acquire(tbl, idx)
        tag = (w >> _USED_BITS) & _TAG_MASK
        jt = j & _TAG_MASK
        used = w & _USED_MASK
        if tag != jt:
            if ((jt - tag) & _TAG_MASK) >= _HALF_TAG:
                # the bucket already holds a later time: this request is too old to place
                _add(tbl, o + 6, 1, private)
                _add(tbl, o + 4, cost, private)
                _add(tbl, o + 5, 1, private)
                return t + cost
            if _cas(tbl, idx, w, jt << _USED_BITS, private) == w and used > 0 and j - ((jt - tag) & _TAG_MASK) >= j0:
                # the bucket held work at or after this request's stamp: the backlog outruns the ring
                _add(tbl, o + 8, 1, private)
            continue
        if used >= cap:
            j += 1
            continue
        if qstart < 0 and j - walk_from > 0 and j > run_end and j - walk_from <= _RUN_MASK:
            # every bucket in [walk_from, j) is full: later requests stamped there may skip them
            _cas(tbl, o + 3, hw, (walk_from << _RUN_BITS) | (j - walk_from), private)
        take = cap - used
        if take > remaining:
            take = remaining
        if _cas(tbl, idx, w, (jt << _USED_BITS) | (used + take), private) != w:
            continue
        if qstart < 0:
            qstart = j * width + used // k
        remaining -= take
        end = j * width + (used + take) // k
        j += 1
    start = qstart if qstart > t else t
    done = start + cost
    if end > done:
        done = end
    _add(tbl, o + 4, cost, private)
    _add(tbl, o + 5, 1, private)
    _add(tbl, o + 7, start - t, private)
    return done


class CalendarAliased(RuntimeError):
    """A calendar ring aliased during a run (``stale`` or ``overflows`` above zero): every time
    derived from the resource is wrong, so the run's numbers must not be used. ``resources``: the
    :class:`ResourceStats` of each resource that aliased."""

    def __init__(self, resources):
        self.resources = list(resources)
        shown = ", ".join(f"{st.name} stale={st.stale} overflows={st.overflows}" for st in self.resources[:8])
        more = f" and {len(self.resources) - 8} more" if len(self.resources) > 8 else ""
        super().__init__(f"the timing of this run is wrong: fabric calendars aliased (a backlog or a spread of "
                         f"stamps longer than the ring, shm/calendar.py): {shown}{more}")


class ResourceStats(NamedTuple):
    name: str
    servers: int
    requests: int
    busy_ns: float
    queued_ns: float
    stale: int
    overflows: int = 0

    def utilisation(self, elapsed_ns: float) -> float:
        """Fraction of the resource's server time booked over ``elapsed_ns`` of virtual time."""
        if elapsed_ns <= 0:
            return 0.0
        return self.busy_ns / (self.servers * elapsed_ns)


@dataclass(frozen=True)
class ResourceSpec:
    name: str
    servers: int
    bucket_ps: int
    n_buckets: int


class ResourceLayout:
    """Plans where each named resource lives in one int64 table.

    The layout is plain data (picklable) so a child process can rebuild the same offsets; the
    table itself is a shared segment (multi-process) or a private array (co-located).
    """

    def __init__(self):
        # Resources in table order, in groups: (name, count, servers, bucket_ps, n_buckets,
        # offset); count None is one resource called name, count n is n identical resources
        # name0..name{n-1} one after the other (a node's 1,024 atomic slots and 512 doorbells:
        # one group each, so a rack's layout is built, initialised and checked in a few numpy
        # calls instead of a Python call per resource).
        self._groups: list[tuple] = []
        self._names: set[str] = set()
        self._specs: list[ResourceSpec] | None = None     # built on first use (specs, offsets)
        self._offsets: dict[str, int] | None = None
        self._headers: np.ndarray | None = None
        self.words = 0

    @staticmethod
    def _check(name: str, servers: int, bucket_ps: int, n_buckets: int) -> None:
        if servers < 1:
            raise ValueError(f"resource {name!r}: servers must be >= 1, got {servers}")
        if bucket_ps < 1:
            raise ValueError(f"resource {name!r}: bucket width must be >= 1 ps, got {bucket_ps}")
        if n_buckets < 2 or n_buckets & (n_buckets - 1):
            raise ValueError(f"resource {name!r}: n_buckets must be a power of two >= 2, got {n_buckets}")
        if servers * bucket_ps >= 1 << _USED_BITS:
            raise ValueError(f"resource {name!r}: servers x bucket width overflows a bucket word")

    def _append(self, name: str, count, servers: int, bucket_ps: int, n_buckets: int) -> int:
        self._check(name, servers, bucket_ps, n_buckets)
        names = [name] if count is None else [f"{name}{i}" for i in range(count)]
        for nm in names:
            if nm in self._names:
                raise ValueError(f"resource {nm!r} is defined twice")
        self._names.update(names)
        offset = self.words
        self._groups.append((name, count, servers, bucket_ps, n_buckets, offset))
        self.words += len(names) * (HEADER_WORDS + n_buckets)
        self._specs = self._offsets = self._headers = None
        return offset

    def add(self, name: str, servers: int, bucket_ps: int, n_buckets: int = 1024) -> int:
        """Add one resource; its offset in the table."""
        return self._append(name, None, servers, bucket_ps, n_buckets)

    def add_array(self, name: str, count: int, servers: int, bucket_ps: int, n_buckets: int = 1024) -> tuple[int, int]:
        """Add ``count`` identical resources ``name0..``, one after the other, so that compiled
        code indexes them (atomic slots, doorbells): ``(offset of the first, stride)``."""
        if count < 1:
            raise ValueError(f"resource array {name!r}: count must be >= 1, got {count}")
        return self._append(name, count, servers, bucket_ps, n_buckets), HEADER_WORDS + n_buckets

    @property
    def specs(self) -> list[ResourceSpec]:
        """Every resource, in table order."""
        if self._specs is None:
            self._specs = [ResourceSpec(name if count is None else f"{name}{i}", servers, bucket_ps, n_buckets)
                           for name, count, servers, bucket_ps, n_buckets, _ in self._groups
                           for i in range(1 if count is None else count)]
        return self._specs

    @property
    def offsets(self) -> dict[str, int]:
        """Each resource's offset in the table, by name."""
        if self._offsets is None:
            offsets = {}
            for name, count, _servers, _bucket, n_buckets, offset in self._groups:
                if count is None:
                    offsets[name] = offset
                else:
                    stride = HEADER_WORDS + n_buckets
                    offsets.update((f"{name}{i}", offset + i * stride) for i in range(count))
            self._offsets = offsets
        return self._offsets

    def names(self, *, arrays: bool = True) -> list[str]:
        """Every resource's name in table order; ``arrays=False`` leaves out the members of
        :meth:`add_array` groups (slots, doorbells)."""
        if arrays:
            return [spec.name for spec in self.specs]
        return [name for name, count, *_ in self._groups if count is None]

    def _header_offsets(self) -> np.ndarray:
        """The offset of every resource's header, in table order (int64)."""
        if self._headers is None:
            parts = [offset + np.arange(1 if count is None else count, dtype=np.int64) * (HEADER_WORDS + n_buckets)
                     for _name, count, _servers, _bucket, n_buckets, offset in self._groups]
            self._headers = np.concatenate(parts) if parts else np.zeros(0, np.int64)
        return self._headers

    def initialise(self, tbl: np.ndarray) -> None:
        """Write every resource header into a zeroed table of at least ``self.words`` words."""
        if tbl.dtype != np.int64 or tbl.shape[0] < self.words:
            raise ValueError(f"resource table must be int64 with >= {self.words} words")
        for _name, count, servers, bucket_ps, n_buckets, offset in self._groups:
            if count is None:
                tbl[offset : offset + HEADER_WORDS] = (servers, bucket_ps, n_buckets, 0, 0, 0, 0, 0, 0)
                continue
            # a group's headers as one strided view: row i is resource i's first HEADER_WORDS words
            stride = HEADER_WORDS + n_buckets
            rows = tbl[offset : offset + count * stride].reshape(count, stride)
            rows[:, :HEADER_WORDS] = (servers, bucket_ps, n_buckets, 0, 0, 0, 0, 0, 0)

    def aliased(self, tbl: np.ndarray) -> list[ResourceStats]:
        """The resources whose calendar aliased (``stale`` or ``overflows`` above zero), in
        table order: read for all of them at once."""
        heads = self._header_offsets()
        bad = np.flatnonzero((tbl[heads + 6] != 0) | (tbl[heads + 8] != 0))
        if not bad.size:
            return []
        specs = self.specs
        return [self.statistics(tbl, specs[i].name) for i in bad.tolist()]

    def statistics(self, tbl: np.ndarray, name: str) -> ResourceStats:
        o = self.offsets[name]
        return ResourceStats(
            name=name,
            servers=int(tbl[o]),
            requests=int(tbl[o + 5]),
            busy_ns=int(tbl[o + 4]) / 1000.0,
            queued_ns=int(tbl[o + 7]) / 1000.0,
            stale=int(tbl[o + 6]),
            overflows=int(tbl[o + 8]),
        )
