"""Transaction histories in shared memory, for the serializability checker across processes.

The KV history (nodes/history.py) records one key per operation; a transaction reads and writes
several records, and the serializability checker (cluster/correctness/serializability.py) needs
every attempt's read set (with the versions it saw), its write set (with the versions it
installed) and its outcome: a :class:`TxnRecord`. This module gives each compute
node's process its own region of fixed-size rows, one per attempt, written by the node's
coordinators (``TxnClient.history``) and merged by the rack's owner after the run
(``cluster/rack.py:collect_txn_history``), the same way the KV history is.

What a killed process must leave behind decides when a row is written:

* an attempt that installs nothing (it aborted, or it only read) is written once, when it ends;
* an attempt that commits writes is written *before* the design posts the WRITEs that install it
  (``TxnClient.installing``), with status "unknown" and the versions it is about to install, and
  completed when it returns. A process killed in between leaves the row "unknown": its writes may
  or may not have landed, which the checker accepts either way (the crashed coordinator of the
  co-located suite is recorded the same way), and the row's ``result`` (the cents a SmallBank
  transaction creates) lets the total be checked for both cases.

The status word is stored last, so a reader never sees a completed row with half its fields.

Values are recorded as 8-byte digests (BLAKE2b, 64 bits): the checker compares a record's final
value with what its last installer wrote, and a digest of both sides tells the same thing in a
fixed-size row (:func:`digest`, :func:`digest_state`). Tables and transaction names are recorded as
their positions in the tuples the log is created with (the workload's tables and transaction
types); a name outside them is recorded as -1 and read back as ``"txn"``.

A row holds at most ``MAX_ITEMS`` reads and ``MAX_ITEMS`` writes (SmallBank touches at most 3
records, TATP 4); an attempt with more sets the region's overflow flag, and an overflowed region
cannot be checked (a missing write could explain any read), which the merge reports.
"""

from __future__ import annotations

import hashlib
from typing import NamedTuple

import numpy as np

from shm.segment import Segment

# row fields (int64 words), then MAX_ITEMS reads (table, key, version) and MAX_ITEMS writes
# (table, key, version, value digest)
(W_TXN, W_CLIENT, W_NAME, W_START, W_END, W_STATUS, W_REASON, W_RESULT, W_NREADS, W_NWRITES) = range(10)
HEAD = 10
MAX_ITEMS = 8
READ_WORDS, WRITE_WORDS = 3, 4
WORDS = HEAD + MAX_ITEMS * (READ_WORDS + WRITE_WORDS)
STATUSES = ("unknown", "committed", "aborted")
STATUS_CODE = {s: i for i, s in enumerate(STATUSES)}
NO_RESULT = -(1 << 63)          # result: the body returned no integer
_HDR = 8                        # words per region header: count, overflow
_MASK64 = (1 << 64) - 1


#: Why an attempt aborted; the keys of ``nodes.systems.txn.TxnStats``'s ``abort_*`` fields.
ABORT_REASONS = (
    "lock",          # the execution's CAS found the record locked by another transaction
    "validation",    # a version (or, corrected, a lock bit) changed between execution and validation
    "not_found",     # the record is not in its table (chain ended) or is deleted
    "invisible",     # the record stayed INVISIBLE (a commit in flight) past the re-read limit
    "user",          # the body aborted (SmallBank SendPayment without funds, TATP's misses)
)


class TxnRecord(NamedTuple):
    """One attempt as the checker sees it (declared here, with the rows that store it, so that the
    rack merges histories without importing a system; ``nodes.systems.txn`` re-exports it).
    ``reads``: ((table, key, version seen), ...), every record the attempt read (read-only and
    read-write: a read-for-update reads the version it then replaces). ``writes``: ((table, key,
    version installed, value bytes), ...), empty unless it committed. ``status``: "committed",
    "aborted" or "unknown" (its coordinator crashed after it may have installed something).
    ``result``: what the body returned (SmallBank: the cents it created), None if not an integer."""

    txn_id: int
    client: int
    name: str
    start_ns: int
    end_ns: int
    status: str
    reason: str
    reads: tuple
    writes: tuple
    result: int | None = None


def digest(value) -> bytes:
    """The 8 bytes a history row keeps of a value (module docstring)."""
    return hashlib.blake2b(bytes(value), digest_size=8).digest()


def digest_state(final: dict) -> dict:
    """A final state ``{(table, key): (version, value bytes)}`` with digests for values, to be
    compared with a merged history."""
    return {rk: (version, digest(value)) for rk, (version, value) in final.items()}


def _signed(x: int) -> int:
    x &= _MASK64
    return x - (1 << 64) if x >= (1 << 63) else x


class TxnHistoryStats(NamedTuple):
    procs: int
    capacity: int
    records: tuple
    overflowed: tuple


class TxnHistoryLog:
    """One segment of per-process transaction rows (see the module docstring)."""

    def __init__(self, seg: Segment, n_procs: int, capacity: int, tables: tuple, names: tuple):
        self._seg = seg
        self.n_procs = n_procs
        self.capacity = capacity
        self.tables = tuple(tables)
        self.names = tuple(names)
        words = seg.array(np.int64)
        stride = _HDR + capacity * WORDS
        self._headers = [words[i * stride:i * stride + _HDR] for i in range(n_procs)]
        self._rows = [words[i * stride + _HDR:(i + 1) * stride].reshape(capacity, WORDS) for i in range(n_procs)]

    @classmethod
    def create(cls, n_procs: int, *, prefix: str, tables, names, capacity: int = 1 << 16) -> "TxnHistoryLog":
        if n_procs < 1 or capacity < 1:
            raise ValueError(f"a transaction history needs n_procs >= 1 and capacity >= 1, got {n_procs}, {capacity}")
        size = n_procs * (_HDR + capacity * WORDS) * 8
        return cls(Segment.create("txnhistory", size, prefix=prefix), n_procs, capacity, tables, names)

    def close(self) -> None:
        if self._seg is not None:
            self._headers = self._rows = []
            self._seg.close()
            self._seg = None

    def writer(self, proc: int) -> "TxnHistoryWriter":
        if not 0 <= proc < self.n_procs:
            raise IndexError(f"transaction history region {proc} outside 0..{self.n_procs - 1}")
        return TxnHistoryWriter(self._headers[proc], self._rows[proc], self.tables, self.names)

    def overflowed(self, proc: int) -> bool:
        return bool(self._headers[proc][1])

    def records(self, proc: int) -> list:
        """Process ``proc``'s attempts so far, as ``TxnRecord``s (values as digests)."""
        n = min(int(self._headers[proc][0]), self.capacity)
        out = []
        for r in self._rows[proc][:n].tolist():
            name = self.names[r[W_NAME]] if 0 <= r[W_NAME] < len(self.names) else "txn"
            reads = tuple((self.tables[r[HEAD + i * READ_WORDS]], r[HEAD + i * READ_WORDS + 1],
                           r[HEAD + i * READ_WORDS + 2]) for i in range(r[W_NREADS]))
            base = HEAD + MAX_ITEMS * READ_WORDS
            writes = tuple((self.tables[r[base + i * WRITE_WORDS]], r[base + i * WRITE_WORDS + 1],
                            r[base + i * WRITE_WORDS + 2],
                            (r[base + i * WRITE_WORDS + 3] & _MASK64).to_bytes(8, "little"))
                           for i in range(r[W_NWRITES]))
            status = STATUSES[r[W_STATUS]]
            reason = "crash" if status == "unknown" else "" if r[W_REASON] < 0 else _reason(r[W_REASON])
            out.append(TxnRecord(r[W_TXN], r[W_CLIENT], name, r[W_START], r[W_END], status, reason, reads, writes,
                                 None if r[W_RESULT] == NO_RESULT else r[W_RESULT]))
        return out

    def statistics(self) -> TxnHistoryStats:
        return TxnHistoryStats(self.n_procs, self.capacity, tuple(int(h[0]) for h in self._headers),
                               tuple(bool(h[1]) for h in self._headers))


def _reason(code: int) -> str:
    return ABORT_REASONS[code] if 0 <= code < len(ABORT_REASONS) else "?"


class TxnHistoryWriter:
    """Appends one process's attempts (``TxnClient.history``): ``intend`` before an attempt's
    installing WRITEs are posted, ``append`` when it ends. Only that process writes its region."""

    def __init__(self, header: np.ndarray, rows: np.ndarray, tables: tuple, names: tuple):
        self._hdr = header
        self._rows = rows
        self._cap = rows.shape[0]
        self._table = {t: i for i, t in enumerate(tables)}
        self._name = {n: i for i, n in enumerate(names)}
        self._open: dict[int, int] = {}      # txn id -> the row its intent took

    def intend(self, rec) -> None:
        """Record ``rec`` (status "unknown", its writes the versions about to be installed) before
        the WRITEs are posted."""
        slot = self._new_row()              # (a new row's status is "unknown" already)
        if slot >= 0:
            self._fill(slot, rec)
            self._open[rec.txn_id] = slot

    def append(self, rec) -> None:
        """Record the end of an attempt: its intent's row completed, or a new row."""
        slot = self._open.pop(rec.txn_id, None)
        if slot is None:
            slot = self._new_row()
            if slot < 0:
                return
        self._fill(slot, rec)
        if rec.status != "unknown":
            self._rows[slot][W_STATUS] = STATUS_CODE[rec.status]     # last: the row is complete

    def _new_row(self) -> int:
        i = int(self._hdr[0])
        if i >= self._cap:
            self._hdr[1] = 1
            return -1
        self._rows[i][W_STATUS] = STATUS_CODE["unknown"]
        self._hdr[0] = i + 1
        return i

    def _fill(self, slot: int, rec) -> None:
        if len(rec.reads) > MAX_ITEMS or len(rec.writes) > MAX_ITEMS:
            self._hdr[1] = 1                 # cannot be recorded whole: the region cannot be checked
            return
        r = self._rows[slot]
        r[W_TXN] = rec.txn_id
        r[W_CLIENT] = rec.client
        r[W_NAME] = self._name.get(rec.name, -1)
        r[W_START] = rec.start_ns
        r[W_END] = rec.end_ns
        r[W_REASON] = ABORT_REASONS.index(rec.reason) if rec.reason in ABORT_REASONS else -1
        r[W_RESULT] = rec.result if isinstance(rec.result, int) and not isinstance(rec.result, bool) else NO_RESULT
        for i, (table, key, version) in enumerate(rec.reads):
            r[HEAD + i * READ_WORDS:HEAD + (i + 1) * READ_WORDS] = (self._table[table], _signed(key), version)
        base = HEAD + MAX_ITEMS * READ_WORDS
        for i, (table, key, version, value) in enumerate(rec.writes):
            d = int.from_bytes(digest(value), "little")
            r[base + i * WRITE_WORDS:base + (i + 1) * WRITE_WORDS] = (self._table[table], _signed(key), version,
                                                                      _signed(d))
        r[W_NREADS] = len(rec.reads)
        r[W_NWRITES] = len(rec.writes)
