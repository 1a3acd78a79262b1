"""Operation histories in shared memory, for the linearizability checker, and :class:`Op`, the
record of one operation the checker reads.

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

A scan's result is variable-length, so it is recorded as the scan's own record (kind "scan":
key = the start key id, value = the requested count) plus one *scan-item* record per (key,
version) pair returned, appended to the same region when the scan returns (other coroutines of
the process may have appended records since the scan was invoked, so items are linked to their
scan by slot, not by position). An item record holds: client, kind "scan-item", key = the
returned key id, value = the version (GARBAGE for bytes that are not a value of that key),
ok = the item's position j in the result, call = the slot of its scan record, ret = the number
of items of that scan, seq = its own slot. Every item is published before the scan record's
return time is set, so a scan record with a return time has all its items. If the region fills
up part-way through the items, the overflow flag is set and the scan record is left without a
return time (as for any operation the region could not take): an overflowed region is refused
by the merge anyway. :func:`scan_results` rebuilds the results from the records.

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
KINDS = ("get", "insert", "update", "put", "delete", "scan", "scan-item")
KIND_CODE = {k: i for i, k in enumerate(KINDS)}
SCAN_ITEM = KIND_CODE["scan-item"]     # a continuation record of a scan's result (module docstring)
_HDR = 8                # words per region header: count, overflow
_MASK64 = (1 << 64) - 1


def _signed(x: int) -> int:
    """A 64-bit key id as the int64 a record holds (ids >= 2**63 wrap to negative)."""
    x &= _MASK64
    return x - (1 << 64) if x >= (1 << 63) else x


class Op(NamedTuple):
    """One KV operation of a history as the linearizability checker reads it
    (``cluster.correctness.checker``, which re-exports it): what the rack's merge of the recorded
    regions makes of each record (``cluster/rack.py:collect_history``), what JSON lines hold. Here,
    with the histories, so that the rack builds it without importing the checker."""
    client: int          # who issued it (one coroutine; unique across the rack)
    kind: str            # "get" | "insert" | "update" | "put" | "delete" | "scan"
    key: int             # key id (int64); for scan: the start key
    value: int | None    # get: version returned (None = not found); writes: version written;
    #                      delete: None; scan: the requested count
    ok: bool | None      # insert/update/delete: took effect; get/put: True; None = unknown (crashed)
    call: int            # invoke time (virtual ns)
    ret: int | None      # return time (virtual ns); None = the client crashed before it returned
    result: tuple = ()   # scan only: ((key, version), ...) in the order returned
    call_real: float = 0.0   # real time (s) of invoke and return, for humans; not used by the check
    ret_real: float | None = None


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
        r[R_KEY] = _signed(key)
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

    def complete_scan(self, slot: int, ret_ns: int, pairs) -> bool:
        """Record the return of the scan in ``slot`` with its result ``pairs`` of (key id,
        version): one scan-item record per pair, then the scan's return time (last, so a
        returned scan has all its items). False (and the overflow flag set, the scan left
        unreturned) when the region cannot hold every item."""
        if slot < 0:
            return False
        pairs = list(pairs)
        n = len(pairs)
        i = int(self._hdr[0])
        if i + n > self._cap:
            # write what fits (well-defined: the items are there, the scan is not returned), flag
            for j, (k, v) in enumerate(pairs[:max(self._cap - i, 0)]):
                self._item(i + j, slot, j, n, k, v)
                self._hdr[0] = i + j + 1
            self._hdr[1] = 1
            return False
        for j, (k, v) in enumerate(pairs):
            self._item(i + j, slot, j, n, k, v)
            self._hdr[0] = i + j + 1    # publish each item after its row is complete
        r = self._rec[slot]
        r[R_OK] = 1
        r[R_RET_REAL] = time.time_ns()
        r[R_RET] = ret_ns               # last: a set return time means a complete record and items
        return True

    def _item(self, i: int, slot: int, j: int, n: int, key: int, version: int) -> None:
        r = self._rec[i]
        s = self._rec[slot]
        r[R_CLIENT] = s[R_CLIENT]
        r[R_KIND] = SCAN_ITEM
        r[R_KEY] = _signed(key)
        r[R_VALUE] = NONE if version is None else version
        r[R_OK] = j
        r[R_CALL] = slot
        r[R_RET] = n
        r[R_CALL_REAL] = NONE
        r[R_RET_REAL] = time.time_ns()
        r[R_SEQ] = i


def scan_results(records) -> dict[int, tuple]:
    """``{slot: ((key, version), ...)}`` for every *returned* scan among ``records`` (rows of one
    region, as ``HistoryLog.records`` gives them, or their ``tolist()``), from its scan-item
    records in result order. Raises ValueError if a returned scan's items are missing or
    inconsistent (a writer bug: items are published before the return time)."""
    rows = records.tolist() if hasattr(records, "tolist") else records
    items: dict[int, list] = {}
    for r in rows:
        if r[R_KIND] == SCAN_ITEM:
            items.setdefault(r[R_CALL], []).append(r)
    out = {}
    for slot, r in enumerate(rows):
        if r[R_KIND] != KIND_CODE["scan"] or r[R_RET] == NONE:
            continue
        its = sorted(items.get(slot, ()), key=lambda x: x[R_OK])
        n = its[0][R_RET] if its else 0
        if [x[R_OK] for x in its] != list(range(n)) or any(x[R_RET] != n for x in its):
            raise ValueError(f"history record {slot}: a returned scan whose {len(its)} scan-item record(s) are not "
                             f"its complete result (positions {[x[R_OK] for x in its][:8]})")
        out[slot] = tuple((x[R_KEY], x[R_VALUE]) for x in its)
    return out
