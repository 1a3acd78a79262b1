"""Operation histories in shared memory, for the linearizability checker.

Each process appends one fixed-size record per KV operation to its own region of a history
segment: the record is written at *invoke* (with no return yet) and completed at *return*. Two
properties follow, and both matter to the checker:

* a process killed with SIGKILL loses nothing it recorded: its unfinished operations stay in
  shared memory as invoked-but-not-returned, which the checker treats as "may or may not have
  happened" (a crashed client);
* recording is a few stores into a numpy row, cheap enough to leave on in tests.

Values are identified by *versions*: every write of the rack writes a unique version, encoded in
the value bytes (``workloads.keys.value_bytes``), so a read records which write it saw. Values
shorter than 16 bytes cannot carry a version, so histories need ``valuesize >= 16``.

A region that fills up sets its overflow flag and stops recording; a truncated history cannot be
checked (an unrecorded write could explain any read), which the merge reports.
"""

from __future__ import annotations

import time
from typing import NamedTuple

import numpy as np

from shm.segment import Segment

# record fields (int64 words)
R_CLIENT, R_KIND, R_KEY, R_VALUE, R_OK, R_CALL, R_RET, R_CALL_REAL, R_RET_REAL, R_SEQ = range(10)
WORDS = 10
NONE = -1               # value: none (not found / not applicable); ret: not returned
UNKNOWN = -1            # ok: not known (crashed)
GARBAGE = -2            # value: bytes that no write produced (torn or foreign)
KINDS = ("get", "insert", "update", "put", "delete", "scan")
KIND_CODE = {k: i for i, k in enumerate(KINDS)}
_HDR = 8                # words per region header: count, overflow


class HistoryStats(NamedTuple):
    procs: int
    capacity: int
    records: tuple
    overflowed: tuple


class HistoryLog:
    """One segment of per-process op records (see the module docstring)."""

    def __init__(self, seg: Segment, n_procs: int, capacity: int):
        self._seg = seg
        self.n_procs = n_procs
        self.capacity = capacity
        words = seg.array(np.int64)
        stride = _HDR + capacity * WORDS
        self._headers = [words[i * stride:i * stride + _HDR] for i in range(n_procs)]
        self._records = [words[i * stride + _HDR:(i + 1) * stride].reshape(capacity, WORDS) for i in range(n_procs)]

    @classmethod
    def create(cls, n_procs: int, *, prefix: str, capacity: int = 1 << 20) -> "HistoryLog":
        if n_procs < 1 or capacity < 1:
            raise ValueError(f"a history needs n_procs >= 1 and capacity >= 1, got {n_procs}, {capacity}")
        size = n_procs * (_HDR + capacity * WORDS) * 8
        return cls(Segment.create("history", size, prefix=prefix), n_procs, capacity)

    def close(self) -> None:
        if self._seg is not None:
            self._headers = self._records = []
            self._seg.close()
            self._seg = None

    def writer(self, proc: int) -> "HistoryWriter":
        if not 0 <= proc < self.n_procs:
            raise IndexError(f"history region {proc} outside 0..{self.n_procs - 1}")
        return HistoryWriter(self._headers[proc], self._records[proc])

    def records(self, proc: int) -> np.ndarray:
        """A copy of process ``proc``'s records so far."""
        n = int(self._headers[proc][0])
        return self._records[proc][:min(n, self.capacity)].copy()

    def overflowed(self, proc: int) -> bool:
        return bool(self._headers[proc][1])

    def statistics(self) -> HistoryStats:
        return HistoryStats(self.n_procs, self.capacity,
                            tuple(int(h[0]) for h in self._headers), tuple(bool(h[1]) for h in self._headers))


class HistoryWriter:
    """Appends one process's records; only that process writes its region."""

    __slots__ = ("_hdr", "_rec", "_cap")

    def __init__(self, header: np.ndarray, records: np.ndarray):
        self._hdr = header
        self._rec = records
        self._cap = records.shape[0]

    def invoke(self, client: int, kind: str, key: int, value: int | None, call_ns: int) -> int:
        """Record an invocation; returns its slot (-1 once the region is full)."""
        i = int(self._hdr[0])
        if i >= self._cap:
            self._hdr[1] = 1
            return -1
        r = self._rec[i]
        r[R_CLIENT] = client
        r[R_KIND] = KIND_CODE[kind]
        r[R_KEY] = key if key < (1 << 63) else key - (1 << 64)
        r[R_VALUE] = NONE if value is None else value
        r[R_OK] = UNKNOWN
        r[R_CALL] = call_ns
        r[R_RET] = NONE
        r[R_CALL_REAL] = time.time_ns()
        r[R_RET_REAL] = NONE
        r[R_SEQ] = i
        self._hdr[0] = i + 1            # publish after the row is complete
        return i

    def complete(self, slot: int, ok: bool, ret_ns: int, value: int | None = NONE) -> None:
        """Record the return of ``slot``: the result and, for a get, the version it saw."""
        if slot < 0:
            return
        r = self._rec[slot]
        if value != NONE:
            r[R_VALUE] = NONE if value is None else value
        r[R_OK] = 1 if ok else 0
        r[R_RET_REAL] = time.time_ns()
        r[R_RET] = ret_ns               # last: a set return time means a complete record
