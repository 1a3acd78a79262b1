"""Per-key linearizability checking of KV histories, in the style of Porcupine.

A *history* is what clients saw: one :class:`Op` per operation, with the virtual times at which
it was invoked and returned and what it returned. The history is *linearizable* if every
operation can be given a single instant inside its [call, ret] interval such that, executed one
at a time in the order of those instants, a sequential KV store gives exactly the results the
clients saw. That is the correctness condition every system on the rack claims; this module
decides it for recorded histories, and when the answer is no, says why in terms a person can
check by hand.

The sequential model (per key; the state is the key's current *version*, or None = absent):

* ``get`` returning v is legal iff state == v (None: not found);
* ``insert(v)`` ok=True needs state None and sets v; ok=False needs state not None;
* ``update(v)`` ok=True needs state not None and sets v; ok=False needs state None;
* ``put(v)`` is always legal and sets v;
* ``delete`` ok=True needs state not None and sets None; ok=False needs state None;
* an operation whose client crashed before it returned (``ret`` None) may have taken effect at any
  instant after its call, or never: its return is placed at +infinity and its outcome is open
  (an insert with unknown result takes effect if the key is absent, and is a no-op otherwise;
  placing it after everything else is the same as "never"). A crashed ``get`` constrains
  nothing and is left out of the search.

An operation with ``ok`` None but a return time is *rejected* as malformed rather than treated
as crashed: a client that returned knows its result, so a missing one is a bug in whatever wrote
the history, and silently widening the search would hide it.

The algorithm (why it is fast enough):

* **P-compositionality** (Horn & Kroening): a KV store is linearizable iff each key's sub-history
  is, because keys do not interact in the model. The history is partitioned by key and each key
  is searched on its own, so cost grows with the concurrency on one key, not with the history.
* **Wing & Gong's search with Lowe's memoisation**, as in Porcupine: the key's call and return
  events, sorted by time (calls before returns at equal times, so operations that merely touch
  are concurrent), sit in a doubly linked list. The candidates for the next linearization point
  are the call entries before the first return entry (that operation is overdue: nothing invoked
  after its return may precede it). Placing one *lifts* its call and return out of the list
  (dancing links: O(1) removal and re-insertion) and pushes it on an explicit stack; when no
  candidate is left, the search pops the last choice and tries the next. A (linearized set,
  state) pair seen before is not explored again: what can follow is fully determined by that
  pair. The loop is iterative (no Python recursion limit) and resumable (it stops at a deadline
  and continues later).
* **The linearized set** is a Python int used as a bitset over the key's operations in call
  order, stored relative to the lowest operation not yet linearized (``base``). Every operation
  below ``base`` is linearized, so the memo key ``(base, window bits, state)`` stays as small as
  the concurrency rather than the history: a 5,000-operation hot key costs a few hundred bytes
  per memo entry instead of kilobytes.

Plain WGL goes exponential on a hot key with ~30 operations in flight (measured: no answer in
10 s for the 5,000-operation key of the synthetic 100k history). These reductions, each exact
(they never change the verdict; tests compare against a brute-force checker), bring it to a
fraction of a second:

* **Read-like operations go first, without branching.** A legal get, or a failed
  insert/update/delete, leaves every state unchanged, so it can be moved to the front of any
  valid completion: placing it now loses nothing, and its alternatives need not be tried.
* **Earliest deadline first.** State-changing candidates are tried in order of their effective
  deadline (their return, or that of the first get of the version they write), not call order:
  a long write invoked early is usually linearized late.
* **Unobserved versions are one state.** In the memo key, a version no unlinearized get will
  return is replaced by "present": for the rest of the search it behaves like any other such
  version, so configurations that differ only in which unobserved write came last merge.
* **Orphaned reads.** Overwriting version v while a get of v is still to be linearized, and no
  one is left to write v again (versions are unique), can never complete: cut at once rather
  than at that get's return.
* **Presence deadlines.** Making the key present (absent) while an operation that needs it
  absent (present) must still be linearized, and every operation that could flip it back is
  invoked after that operation's deadline, can never complete either. Counted too (Hall's
  condition): k successful inserts due by time T need k deletes invoked before T, one to make
  room for each, and likewise for deletes and puts/inserts.
* **Crashed operations only where they show.** A crashed operation that would change nothing a
  remaining operation can observe is not tried: any completion placing it there also works
  with it moved to the end, which is "never". Otherwise k crashed operations in flight would
  multiply the search by up to 2^k.
* **Sequential keys** (no two operations overlap, the common case under a zipfian workload) are
  simply replayed; only if the replay fails does the search run, to produce the explanation.
* **Certificates decide without search.** A few operations that are a violation on their own
  (see below) prove a key illegal at once; refuting a key by search means exhausting it, the
  expensive case. The search then runs only to explain, within the explanation budget.

The time limit covers the whole check. Each key first gets a share proportional to its number of
operations; keys that used it up are resumed afterwards with the time left, split evenly. A key
still undecided at the end is reported as *unknown*: neither a violation nor a proof. Once a key
(or a scan) is proven illegal, the verdict is settled: the searches still to run share a short
budget (a fifth of the limit, at most 2 s), since they could only add to the count of bad keys and
one that resists would hold the failure back for the whole limit. Certificates and scans are
checked before any search, so a key they prove illegal settles the verdict from the start.

When a key is not linearizable, :class:`KeyFailure` reports the deepest partial linearization the
search reached, the operations that could have come next and why each cannot, and a timeline of
only the operations around that point. At the deepest point every candidate is either illegal
outright (a legal one would have led deeper) or cut by one of the rules above, so each gets a
concrete reason naming the versions and operations involved. Reasons of the first kind read
better ("returned v7 but the key was v9"), so the failing key is searched again without the
pruning rules, within an explanation budget (a fifth of the time limit, at most 2 s, on top of
it); if that does not finish, the pruned search's reasons are used. When a few operations are a
violation on their own (a *certificate*: a read of a version never written, a read before its
only writer was invoked, a read invoked after the version's successor had returned), the
failure is reduced to those.

Scans are not part of the search (a multi-key read would couple the keys and void
P-compositionality); they get structural checks instead: order, bounds, count, and no phantom
(key, version) pairs. Order and bounds are in key *byte* order (:func:`key_order`: a key is
the little-endian bytes of its id, compared as bytes), not numeric id order. See
docs/checking.md.
"""

from __future__ import annotations

import argparse
import bisect
import json
import math
import os
import random
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import Iterable, NamedTuple

from nodes.history import Op  # re-exported: the record of a history, declared with the histories
from shm.messages import item

__all__ = ["Op", "HistoryError", "CheckResult", "KeyFailure", "Placed", "Blocked", "KeySearchStats",
           "CheckStatistics", "check", "load_jsonl", "dump_jsonl", "validate_op", "synthetic_history",
           "KINDS", "key_order"]

KINDS = ("get", "insert", "update", "put", "delete", "scan")
_WRITES = ("insert", "update", "put")          # kinds whose value is a version written
_FIELDS = ("client", "kind", "key", "value", "ok", "call", "ret", "result", "call_real", "ret_real")
_REQUIRED = ("client", "kind", "key", "value", "ok", "call", "ret")
INF = math.inf


class HistoryError(ValueError):
    """A malformed history: the message names the record (operation #N, or path:line) and field."""


# -- describing operations and states (shared by errors and explanations) --------------------

def _t(x) -> str:
    return "crashed" if x is None else str(x)


def describe(op: Op) -> str:
    """``get by client 3 at [120, 180]`` -- how every message refers to an operation."""
    return f"{op.kind} by client {op.client} at [{op.call}, {_t(op.ret)}]"


def _v(version) -> str:
    return "absent" if version is None else f"v{version}"


def _outcome(op: Op) -> str:
    """What the operation claims happened, e.g. ``insert v5 ok`` or ``get -> v7``."""
    if op.kind == "get":
        return "get -> ?" if op.ret is None else f"get -> {_v(op.value) if op.value is not None else 'not found'}"
    if op.kind == "scan":
        return f"scan from {op.key} count {op.value}"
    what = op.kind if op.kind == "delete" else f"{op.kind} v{op.value}"
    if op.kind == "put":
        return what
    return f"{what} {'ok' if op.ok else ('failed' if op.ok is False else '?')}"


# -- validation ------------------------------------------------------------------------------

def _is_int(x) -> bool:
    return type(x) is int            # bool is an int subclass, and True is no version or key


def validate_op(op, where: str) -> Op:
    """Return ``op`` if it is a well-formed :class:`Op`, else raise HistoryError naming ``where``
    and the field. Checks types and the per-kind rules of the history format."""
    if not isinstance(op, Op):
        raise HistoryError(f"{where}: expected an Op, got {type(op).__name__}")
    if not _is_int(op.client):
        raise HistoryError(f"{where}: client must be an integer, got {op.client!r}")
    if op.kind not in KINDS:
        raise HistoryError(f"{where}: kind must be one of {', '.join(KINDS)}, got {op.kind!r}")
    if not _is_int(op.key):
        raise HistoryError(f"{where}: key must be an integer, got {op.key!r}")
    if not _is_int(op.call):
        raise HistoryError(f"{where}: call must be an integer (virtual ns), got {op.call!r}")
    if op.ret is not None:
        if not _is_int(op.ret):
            raise HistoryError(f"{where}: ret must be an integer (virtual ns) or null, got {op.ret!r}")
        if op.ret < op.call:
            raise HistoryError(f"{where}: ret {op.ret} is before call {op.call}")
    if op.ok is not None and type(op.ok) is not bool:
        raise HistoryError(f"{where}: ok must be true, false or null, got {op.ok!r}")
    if op.value is not None and not _is_int(op.value):
        raise HistoryError(f"{where}: value must be an integer or null, got {op.value!r}")
    k = op.kind
    crashed = op.ret is None
    if k in _WRITES and op.value is None:
        raise HistoryError(f"{where}: value of a {k} must be the version written, got null")
    if k == "delete" and op.value is not None:
        raise HistoryError(f"{where}: value of a delete must be null, got {op.value!r}")
    if k in ("get", "put", "scan"):
        if op.ok is False:
            raise HistoryError(f"{where}: ok of a {k} must be true (or null if crashed), got false")
    if not crashed and op.ok is None and k != "scan":
        # Decided above (module docstring): unknown results only for crashed operations.
        raise HistoryError(f"{where}: ok is null but the {k} returned at {op.ret}; only an operation "
                           f"whose client crashed (ret null) may have an unknown result")
    if k == "scan":
        if op.value is not None and op.value < 0:
            raise HistoryError(f"{where}: value of a scan is the requested count, got {op.value}")
        if not isinstance(op.result, tuple):
            raise HistoryError(f"{where}: result must be a tuple of (key, version) pairs, got "
                               f"{type(op.result).__name__}")
        for j, pair in enumerate(op.result):
            if not (isinstance(pair, tuple) and len(pair) == 2 and _is_int(pair[0]) and _is_int(pair[1])):
                raise HistoryError(f"{where}: {item('result', j)} must be a (key, version) pair of integers, "
                                   f"got {pair!r}")
    elif op.result != ():
        raise HistoryError(f"{where}: result is only for scans, but this {k} has {op.result!r}")
    if not isinstance(op.call_real, (int, float)) or isinstance(op.call_real, bool):
        raise HistoryError(f"{where}: call_real must be a number (s), got {op.call_real!r}")
    if op.ret_real is not None and (not isinstance(op.ret_real, (int, float)) or isinstance(op.ret_real, bool)):
        raise HistoryError(f"{where}: ret_real must be a number (s) or null, got {op.ret_real!r}")
    return op


def _check_clients(ops: list[Op], where) -> None:
    """A client is one coroutine: its operations follow one another and none follows a crash.
    Overlap means the producer mixed up client ids, which would also make explanations lie."""
    last: dict[int, int] = {}
    for i in sorted(range(len(ops)), key=lambda j: (ops[j].client, ops[j].call, j)):
        op = ops[i]
        j = last.get(op.client)
        if j is not None:
            prev = ops[j]
            if prev.ret is None:
                raise HistoryError(f"{where(i)}: client {op.client} issued {describe(op)} after it crashed in "
                                   f"{describe(prev)} ({where(j)})")
            if op.call < prev.ret:
                raise HistoryError(f"{where(i)}: client {op.client} has overlapping operations: {describe(op)} "
                                   f"starts before {describe(prev)} ({where(j)}) returned")
        last[op.client] = i


# -- JSONL -----------------------------------------------------------------------------------

def _op_from_json(obj, where: str) -> Op:
    if not isinstance(obj, dict):
        raise HistoryError(f"{where}: expected a JSON object, got {type(obj).__name__}")
    for name in obj:
        if name not in _FIELDS:
            raise HistoryError(f"{where}: unknown field {name!r} (fields: {', '.join(_FIELDS)})")
    for name in _REQUIRED:
        if name not in obj:
            raise HistoryError(f"{where}: missing field {name!r}")
    result = obj.get("result", [])
    if not isinstance(result, list):
        raise HistoryError(f"{where}: result must be a list of [key, version] pairs, got {result!r}")
    pairs = []
    for j, pair in enumerate(result):
        if not (isinstance(pair, list) and len(pair) == 2):
            raise HistoryError(f"{where}: {item('result', j)} must be a [key, version] pair, got {pair!r}")
        pairs.append(tuple(pair))
    op = Op(obj["client"], obj["kind"], obj["key"], obj["value"], obj["ok"], obj["call"], obj["ret"],
            tuple(pairs), obj.get("call_real", 0.0), obj.get("ret_real"))
    return validate_op(op, where)


def load_jsonl(path) -> list[Op]:
    """Read a history written by :func:`dump_jsonl` (one JSON object per line, Op field names;
    blank lines are skipped). Malformed lines raise HistoryError naming ``path:line`` and the
    field; a client's overlapping operations are reported the same way."""
    path = os.fspath(path)
    ops: list[Op] = []
    lines: list[int] = []
    try:
        # Bytes, decoded line by line: a file that is not UTF-8 text (a binary file, a truncated
        # multi-byte character) is then one HistoryError naming its line, like any other malformed
        # line, instead of a UnicodeDecodeError from deep in the file iterator.
        f = open(path, "rb")
    except OSError as e:
        raise HistoryError(f"{path}: cannot read history: {e.strerror}") from None
    with f:
        n = 0
        while True:
            try:
                raw = f.readline()
            except OSError as e:        # e.g. a directory on some systems, an I/O error
                raise HistoryError(f"{path}: cannot read history: {e.strerror}") from None
            if not raw:
                break
            n += 1
            where = f"{path}:{n}"
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise HistoryError(f"{where}: not UTF-8 text (byte 0x{raw[e.start]:02x} at column {e.start + 1}); "
                                   f"a history is JSON lines") from None
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise HistoryError(f"{where}: not valid JSON ({e.msg} at column {e.colno})") from None
            except RecursionError:
                raise HistoryError(f"{where}: not a history record (JSON nested too deeply)") from None
            ops.append(_op_from_json(obj, where))
            lines.append(n)
    _check_clients(ops, lambda i: f"{path}:{lines[i]}")
    return ops


def dump_jsonl(ops: Iterable[Op], path) -> int:
    """Write ``ops`` as JSONL (one object per line with the Op field names); return the count.
    Written to a temporary file then renamed, so a reader never sees half a history."""
    path = os.fspath(path)
    d = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".history-", suffix=".jsonl", dir=d)
    n = 0
    try:
        os.fchmod(fd, 0o644)                   # mkstemp's 0600 would surprise whoever reads it next
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            for n, op in enumerate(ops, 1):
                obj = op._asdict()
                obj["result"] = [list(p) for p in op.result]
                f.write(json.dumps(obj, separators=(",", ":")))
                f.write("\n")
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return n


# -- the sequential model ----------------------------------------------------------------------

# Operation codes for the search loop: one small int per (kind, ok) so the inner loop is a chain
# of integer comparisons rather than string compares or method calls. *_ANY = crashed (unknown ok).
GET, PUT, INS_OK, INS_FAIL, UPD_OK, UPD_FAIL, DEL_OK, DEL_FAIL, INS_ANY, UPD_ANY, DEL_ANY = range(11)
_NO = object()            # "illegal here"; distinct from None, which is the state "absent"
_READLIKE = frozenset((GET, INS_FAIL, UPD_FAIL, DEL_FAIL))   # leave every state unchanged
_HALL_DEPTH = 16          # deadlines checked by the counting rule (_KeySearch._presence_doomed)
_PRESENT = "present"      # memo stand-in for a version nobody will read again (see _KeySearch.run)


def _code(op: Op) -> int:
    k = op.kind
    if k == "get":
        return GET
    if k == "put":
        return PUT
    crashed = op.ret is None
    if k == "insert":
        return INS_ANY if crashed else (INS_OK if op.ok else INS_FAIL)
    if k == "update":
        return UPD_ANY if crashed else (UPD_OK if op.ok else UPD_FAIL)
    return DEL_ANY if crashed else (DEL_OK if op.ok else DEL_FAIL)


def _step(c: int, v, state):
    """The new state after an operation with code ``c`` and value ``v`` in ``state``, or _NO.
    (The search loop inlines this same table for speed; keep the two in step.)"""
    if c == GET:
        return state if state == v else _NO
    if c == PUT:
        return v
    if c == INS_OK:
        return v if state is None else _NO
    if c == INS_FAIL:
        return state if state is not None else _NO
    if c == UPD_OK:
        return v if state is not None else _NO
    if c == UPD_FAIL:
        return None if state is None else _NO
    if c == DEL_OK:
        return None if state is not None else _NO
    if c == DEL_FAIL:
        return None if state is None else _NO
    if c == INS_ANY:
        return v if state is None else state
    if c == UPD_ANY:
        return v if state is not None else None
    return None                                  # DEL_ANY


# -- results ---------------------------------------------------------------------------------

class Placed(NamedTuple):
    """One operation of a partial linearization and the key's state right after it."""
    op: Op
    state: int | None


class Blocked(NamedTuple):
    """An operation that could not be linearized next, and why (a sentence)."""
    op: Op
    reason: str


class KeySearchStats(NamedTuple):
    """Counters of one key's search."""
    key: int
    ops: int                 # operations searched (crashed gets are left out)
    steps: int               # loop iterations: entries looked at
    placed: int              # successful linearization steps (pushes)
    backtracks: int
    memo_hits: int           # (set, state) pairs met again and skipped
    memo_size: int
    max_depth: int           # longest partial linearization
    elapsed_s: float
    outcome: str             # "ok" | "illegal" | "unknown"


class CheckStatistics(NamedTuple):
    """Aggregate counters of one :func:`check` call."""
    ops: int
    keys: int
    scans: int
    crashed: int
    sequential_keys: int      # decided by replay, without search
    searched_keys: int
    steps: int
    placed: int
    backtracks: int
    memo_hits: int
    memo_size: int
    largest_key: int | None   # the key with the most operations, and how many
    largest_key_ops: int
    slowest_key: int | None   # the searched key that took longest, and how long
    slowest_key_s: float
    elapsed_s: float


@dataclass(frozen=True)
class KeyFailure:
    """Why one key's history is not linearizable.

    ``ops`` is the small set of operations involved (sorted by call). If the key holds a
    *certificate* -- a handful of operations that are a violation on their own, whatever else
    happened (a read of a version never written, a read before its writer was invoked, a read of
    a version its writer's successor had already replaced in real time) -- ``ops`` is that and
    ``witness_reason`` says why. Otherwise it is the operations that could not be placed, the
    linearized ones overlapping them in real time, and the writers of the versions involved. ``prefix`` is the tail of the deepest partial linearization the search
    reached (``linearized`` operations in all), restricted to that window, with the state after
    each; ``state_before`` is the state before the shown tail. ``blocked`` are the operations
    that could have come next and the reason each is illegal; ``deadline_op`` is the operation
    whose return forced the choice (nothing invoked after its return may come before it).
    """
    key: int
    key_ops: int
    linearized: int
    ops: tuple[Op, ...]
    prefix: tuple[Placed, ...]
    state_before: int | None
    state: int | None
    writer: Op | None                # wrote ``state`` (None: the initial state)
    blocked: tuple[Blocked, ...]
    deadline_op: Op
    replaced: tuple[tuple[Op, int], ...] = ()   # (op, version it replaced) named by the reasons
    witness_reason: str = ""         # set when ``ops`` is a certificate: a violation on its own
    complete: bool = True            # False: certificate only, the search was cut short

    def timeline(self, width: int = 40) -> str:
        """An ASCII timeline of :attr:`ops`, one row per operation."""
        return _timeline(self, width)

    def brief(self, width: int = 24) -> str:
        """A few lines for a terminal, where several keys may fail at once: the key, the one
        reason (the certificate, or why the first operation that could come next cannot) and the
        timeline, which is what a reader checks first. :meth:`explain` has the whole story (the
        partial linearization, every blocked operation); ``dmrack check`` writes it to a file."""
        lines = [f"key {self.key}: not linearizable ({self.key_ops} operations on this key; "
                 f"{len(self.ops)} involved)"]
        if self.witness_reason:
            lines.append(f"  certain violation: {self.witness_reason}")
        elif self.blocked:
            more = len(self.blocked) - 1
            lines.append(f"  in state {_v(self.state)} nothing can come next: {self.blocked[0].reason}"
                         + (f" (and {more} more operation(s) that cannot)" if more else ""))
        lines.extend("    " + row for row in self.timeline(width).splitlines())
        return "\n".join(lines)

    def explain(self) -> str:
        lines = [f"key {self.key}: not linearizable ({self.key_ops} operations on this key; "
                 f"{len(self.ops)} involved)"]
        if self.witness_reason:
            lines.append(f"  Certain violation among {len(self.ops)} operation(s), whatever the others did: "
                         f"{self.witness_reason}.")
        if not self.complete:
            lines.append("  (The search for the longest partial linearization was cut short by the "
                         "explanation budget; the certificate above is the proof.)")
            lines.append("  Timeline (virtual ns):")
            lines.extend("    " + row for row in self.timeline().splitlines())
            return "\n".join(lines)
        origin = ("its initial state" if self.writer is None else
                  f"{'written' if self.state is not None else 'deleted'} by {describe(self.writer)}")
        lines.append(f"  The longest partial linearization found places {self.linearized} of them; "
                     f"after it the key is {_v(self.state)} ({origin}).")
        if self.prefix and not self.witness_reason:
            hidden = self.linearized - len(self.prefix)
            lines.append(f"  Its last {len(self.prefix)} step(s), from state {_v(self.state_before)}"
                         + (f" (after {hidden} earlier operations)" if hidden else "") + ":")
            for j, p in enumerate(self.prefix, hidden + 1):
                lines.append(f"    {j:>4}. {_outcome(p.op):<24} {describe(p.op):<40} -> {_v(p.state)}")
        lines.append(f"  The next one must have been invoked before {describe(self.deadline_op)} returned "
                     f"(at {self.deadline_op.ret}), and none of those is legal in state {_v(self.state)}:")
        for b in self.blocked:
            lines.append(f"    - {b.reason}")
        lines.append("  Timeline (virtual ns):")
        lines.extend("    " + row for row in self.timeline().splitlines())
        return "\n".join(lines)


@dataclass(frozen=True)
class CheckResult:
    """The outcome of :func:`check`. True only if the verdict is "ok"."""
    verdict: str                          # "ok" | "illegal" | "unknown"
    ops: int
    keys: int
    elapsed_s: float
    failures: tuple[KeyFailure, ...] = ()
    unknown_keys: tuple[int, ...] = ()
    scan_problems: tuple[str, ...] = ()
    time_limit_s: float | None = None
    stats: CheckStatistics | None = None
    key_stats: tuple[KeySearchStats, ...] = ()     # searched keys that were not ok, or slow

    def __bool__(self) -> bool:
        return self.verdict == "ok"

    def statistics(self) -> CheckStatistics | None:
        return self.stats

    def summary(self) -> str:
        scans = self.stats.scans if self.stats is not None else 0
        took = (f"{self.ops:,} operations" + (f" ({scans:,} scan{'s' if scans != 1 else ''})" if scans else "")
                + f" on {self.keys:,} keys in {_secs(self.elapsed_s)}")
        if self.verdict == "ok":
            return f"linearizable: {took}"
        if self.verdict == "illegal":
            parts = []
            if self.failures:
                ks = ", ".join(str(f.key) for f in self.failures[:5]) + (", ..." if len(self.failures) > 5 else "")
                parts.append(f"{len(self.failures)} of {self.keys:,} keys have no valid order (key {ks})")
            if self.scan_problems:
                parts.append(f"{len(self.scan_problems)} scan problem(s)")
            if self.unknown_keys:
                parts.append(f"{len(self.unknown_keys)} key(s) undecided")
            return f"NOT linearizable: {'; '.join(parts)}; {took}"
        ks = ", ".join(map(str, self.unknown_keys[:5])) + (", ..." if len(self.unknown_keys) > 5 else "")
        limit = f"the {_secs(self.time_limit_s)} limit" if self.time_limit_s is not None else "the limit"
        return (f"unknown: {len(self.unknown_keys)} of {self.keys:,} keys not decided within {limit} "
                f"(key {ks}); no violation in the others; {took}")

    def explain(self) -> str:
        lines = [self.summary()]
        for f in self.failures:
            lines.append("")
            lines.append(f.explain())
        if self.unknown_keys:
            lines.append("")
            lines.append("Undecided keys (the search ran out of time; neither a violation nor a proof):")
            by_key = {s.key: s for s in self.key_stats}
            for k in self.unknown_keys:
                s = by_key.get(k)
                extra = (f": {s.ops} operations, {s.steps:,} steps, {s.memo_size:,} memo entries, "
                         f"deepest {s.max_depth}") if s else ""
                lines.append(f"  key {k}{extra}")
        if self.scan_problems:
            lines.append("")
            lines.append("Scan problems:")
            lines.extend(f"  - {p}" for p in self.scan_problems)
        return "\n".join(lines)


def _secs(s: float | None) -> str:
    if s is None:
        return "?"
    return f"{s:.2f} s" if s < 10 else f"{s:.1f} s"


def _timeline(f: KeyFailure, width: int) -> str:
    placed = {}
    for j, p in enumerate(f.prefix, f.linearized - len(f.prefix) + 1):
        placed[id(p.op)] = (j, p.state)
    blocked = {id(b.op) for b in f.blocked}
    replaced = {id(op): v for op, v in f.replaced}
    read = {b.op.value for b in f.blocked if b.op.kind == "get" and b.op.value is not None}
    # Scale to the failure window (the shown steps, the blocked operations, the writer of the
    # state they conflict with); an operation
    # that ended before it (the writer of a stale version, say) is drawn as "<" at the left edge
    # instead of squashing the window into a few columns.
    if f.witness_reason:
        near = list(f.ops)
    else:
        near = [p.op for p in f.prefix] + [b.op for b in f.blocked] + ([f.writer] if f.writer is not None else [])
    t0 = min(op.call for op in near)
    t1 = max([op.ret for op in near if op.ret is not None] + [op.call for op in near])
    span = max(t1 - t0, 1)

    def col(t):
        return max(0, min(width - 1, int((t - t0) * (width - 1) / span)))

    # The operation column fits the longest outcome (a crashed client's version can be 15 digits)
    # so the columns after it stay aligned; 22 is the width of the common case.
    ow = max([22] + [len(_outcome(op)) for op in f.ops])
    rows = [f"{'client':>6}  {'operation':<{ow}} {'call':>12} {'ret':>12}  {'':<{width}}  note"]
    for op in f.ops:
        a = col(op.call)
        left = "[" if op.call >= t0 else "="
        if op.ret is not None and op.ret < t0:
            bar = "<"                                      # entirely before the window
        elif op.ret is None:
            bar = " " * a + left + "=" * (width - a - 2) + ">" if a < width - 1 else " " * (width - 1) + ">"
        else:
            b = col(op.ret)
            bar = " " * a + ("|" if a == b else left + "=" * (b - a - 1) + "]")
        bar = bar.ljust(width)[:width]
        if id(op) in placed:
            j, s = placed[id(op)]
            note = f"linearized #{j} -> {_v(s)}"
        elif id(op) in blocked:
            note = "cannot be next"
        elif op is f.writer:
            note = f"wrote {_v(f.state)}, linearized earlier"
        elif op.kind in _WRITES and op.value in read:
            note = f"wrote v{op.value}, the version a blocked get returned"
        elif id(op) in replaced:
            note = f"replaced v{replaced[id(op)]}, linearized earlier"
        elif f.witness_reason:
            note = "part of the certain violation"
        else:
            note = ""
        rows.append(f"{op.client:>6}  {_outcome(op):<{ow}} {op.call:>12} {_t(op.ret):>12}  {bar}  {note}")
    return "\n".join(rows)


# -- one key's search ------------------------------------------------------------------------

class _KeySearch:
    """Porcupine's checkSingle for one key, iterative and resumable (see the module docstring).

    Entries live at positions 1..2n of parallel lists (``nxt``/``prv`` links, ``match`` = the
    return position of a call entry or -1 for a return entry, ``opof`` = operation index), with a
    head sentinel at 0 and a tail sentinel at 2n+1 so lifting never tests for None."""

    def __init__(self, key: int, ops: list[Op], initial, prune: bool = True):
        self.key = key
        self.prune = prune                         # False: plain dead ends, for explanations
        self.ops = ops                             # sorted by call: the bitset's bit order
        n = len(ops)
        self.codes = [_code(op) for op in ops]
        self.vals = [op.value for op in ops]
        ev = [(op.call, 0, i) for i, op in enumerate(ops)]
        ev += [(INF if op.ret is None else op.ret, 1, i) for i, op in enumerate(ops)]
        ev.sort()                                  # calls before returns at equal times
        self.tail = tail = 2 * n + 1
        self.nxt = list(range(1, tail + 1)) + [tail]
        self.prv = [0] + list(range(0, tail))
        self.opof = [-1] * (tail + 1)
        self.match = [-1] * (tail + 1)
        # Positions never move (only links do), so these stay valid for the explanation.
        retpos = [0] * n
        self.callpos = callpos = [0] * n
        self.postime = [-INF] + [t for t, _, _ in ev] + [INF]          # position -> time
        for pos, (_, is_ret, i) in enumerate(ev, 1):
            self.opof[pos] = i
            if is_ret:
                retpos[i] = pos
            else:
                callpos[i] = pos
        for pos, (_, is_ret, i) in enumerate(ev, 1):
            if not is_ret:
                self.match[pos] = retpos[i]
        self.retpos = retpos
        self.initial = initial
        # Orphaned-read pruning (see run): versions numbered densely; per op the version it
        # reads (non-crashed get) or may write (-1: none); per version how many such ops are
        # not yet linearized. These counts are a function of the linearized set, so the memo
        # stays exact.
        vid: dict[int, int] = {}
        for op in ops:
            if op.value is not None and op.kind != "scan":
                vid.setdefault(op.value, len(vid))
        if initial is not None:
            vid.setdefault(initial, len(vid))
        self.vid = vid
        self.rd = [vid[op.value] if c == GET and op.value is not None and op.ret is not None else -1
                   for op, c in zip(ops, self.codes)]
        self.wr = [vid[op.value] if c in (PUT, INS_OK, UPD_OK, INS_ANY, UPD_ANY) else -1
                   for op, c in zip(ops, self.codes)]
        self.reads_left = [0] * len(vid)
        self.writers_left = [0] * len(vid)
        for r in self.rd:
            if r >= 0:
                self.reads_left[r] += 1
        writers_of: dict[int, list[int]] = {}
        for i, w in enumerate(self.wr):
            if w >= 0:
                self.writers_left[w] += 1
                writers_of.setdefault(w, []).append(i)
        # Presence pruning (see run): operations that need the key absent / present when they
        # take effect, sorted by return position; those that can make it absent / present,
        # sorted by call position. hints[k]: everything in list k before it is linearized.
        codes = self.codes
        absent_need = [i for i, c in enumerate(codes) if c in (INS_OK, UPD_FAIL, DEL_FAIL) or self.rd[i] < 0 and
                       c == GET and ops[i].value is None and ops[i].ret is not None]
        present_need = [i for i, c in enumerate(codes) if c in (INS_FAIL, UPD_OK, DEL_OK) or self.rd[i] >= 0]
        deleters = [i for i, c in enumerate(codes) if c in (DEL_OK, DEL_ANY)]
        creators = [i for i, c in enumerate(codes) if c in (PUT, INS_OK, INS_ANY)]
        # A write's *effective deadline*: its return, or the return of the first get of its
        # version if earlier (it must be linearized before that get, and such gets are never
        # linearized before their writer). Used as the deadline here and to order candidates.
        # Only for a version with one possible writer that is not the initial state: otherwise
        # the get may have read another copy, and the writer owes it nothing.
        eff = list(retpos)
        init_vid = vid.get(initial, -1) if initial is not None else -1
        for i, c in enumerate(codes):
            r = self.rd[i]
            if r >= 0 and r != init_vid and len(writers_of.get(r, ())) == 1:
                w = writers_of[r][0]
                if retpos[i] < eff[w]:
                    eff[w] = retpos[i]
        self.eff = eff
        absent_need.sort(key=eff.__getitem__)
        present_need.sort(key=eff.__getitem__)
        deleters.sort(key=callpos.__getitem__)
        creators.sort(key=callpos.__getitem__)
        # Consumers: operations that use up the presence they need (a successful insert makes
        # the key present, a successful delete absent), sorted by effective deadline.
        ins_ok = sorted((i for i, c in enumerate(codes) if c == INS_OK), key=eff.__getitem__)
        del_ok = sorted((i for i, c in enumerate(codes) if c == DEL_OK), key=eff.__getitem__)
        self.plists = (absent_need, deleters, present_need, creators, ins_ok, del_ok)
        self.pkeys = (eff, callpos, eff, callpos, eff, eff)
        self.pindex = [[-1] * n for _ in self.plists]          # op -> its index in each list
        for k, lst in enumerate(self.plists):
            for j, i in enumerate(lst):
                self.pindex[k][i] = j
        self.hints = [0] * len(self.plists)
        self.isplaced = [False] * n
        self.pruned = 0
        self.rets = [INF if op.ret is None else op.ret for op in ops]
        # search state, saved between run() calls
        self.state = initial
        self.base = 0
        self.win = 0
        self.path: list[tuple] = []                # placed: (entry, state, base, win) before it
        self.frames: list[list] = []               # per configuration: [(entry, new state)...], next
        self.expand = True                         # the top configuration's candidates are unknown
        self.must_left = sum(op.ret is not None for op in ops)   # non-crashed ops not yet placed
        self.memo: set = set()
        self.best: list[tuple] = []
        self.best_state = initial
        self.outcome: str | None = None
        self.steps = self.placed = self.backtracks = self.memo_hits = 0
        self.elapsed = 0.0

    def run(self, deadline: float | None) -> bool | None:
        """Search until decided (True/False) or past ``deadline`` (perf_counter s; None)."""
        if self.outcome is not None:
            return self.outcome == "ok"
        t_start = time.perf_counter()
        nxt, prv, match, opof, rets = self.nxt, self.prv, self.match, self.opof, self.rets
        codes, vals, memo, path, frames = self.codes, self.vals, self.memo, self.path, self.frames
        vid, rd, wr, reads_left, writers_left = self.vid, self.rd, self.wr, self.reads_left, self.writers_left
        tail = self.tail
        isplaced, pindex, hints, eff, prune = self.isplaced, self.pindex, self.hints, self.eff, self.prune
        state, base, win = self.state, self.base, self.win
        steps, placed, backtracks, hits, pruned = self.steps, self.placed, self.backtracks, self.memo_hits, self.pruned
        perf = time.perf_counter
        result = None
        must_left = self.must_left
        if must_left == 0:                          # nothing that has to be linearized
            result = True
        expand = self.expand                        # a configuration whose candidates are unknown
        while result is None:
            steps += 1
            # Checking the clock costs more than a step; every 256 steps is well under 1 ms.
            if not steps & 255 and deadline is not None and perf() > deadline:
                break
            if expand:
                # The candidates: call entries before the first return entry in the list (the
                # operation of that return is overdue: nothing invoked after it may come first).
                tries = []
                forced = None
                e = nxt[0]
                while True:
                    m = match[e]
                    if m < 0:
                        break
                    i = opof[e]
                    c = codes[i]
                    # _step inlined (the hot loop of the whole checker)
                    if c == 0:
                        ns = state if state == vals[i] else _NO
                    elif c == 1:
                        ns = vals[i]
                    elif c == 4:
                        ns = vals[i] if state is not None else _NO
                    elif c == 2:
                        ns = vals[i] if state is None else _NO
                    elif c == 3:
                        ns = state if state is not None else _NO
                    elif c == 5:
                        ns = None if state is None else _NO
                    elif c == 6:
                        ns = None if state is not None else _NO
                    elif c == 7:
                        ns = None if state is None else _NO
                    elif c == 8:
                        ns = vals[i] if state is None else state
                    elif c == 9:
                        ns = vals[i] if state is not None else None
                    else:
                        ns = None
                    if ns is not _NO:
                        if c in _READLIKE:
                            # A legal operation that leaves every state as it is (get, failed
                            # insert/update/delete) can be moved to the front of any valid
                            # completion, so placing it now loses nothing: no branching.
                            forced = (e, ns)
                            break
                        if rets[i] == INF and (ns == state or (
                                ns is not None and state is not None and not reads_left[vid[ns]]
                                and not reads_left[vid[state]])):
                            # A crashed operation that would change nothing any remaining
                            # operation can observe: whatever completion places it here also
                            # works with it moved to the end, i.e. never happening (it has no
                            # return to respect). Not trying it avoids 2^crashed variants.
                            e = nxt[e]
                            continue
                        if not prune:
                            pass
                        elif ns != state and state is not None:
                            sv = vid[state]
                            if reads_left[sv] and not writers_left[sv]:
                                # Overwriting a version some unlinearized get still has to
                                # return, with nobody left to write it again: every completion
                                # fails. The plain search would only notice at that get's return.
                                pruned += 1
                                e = nxt[e]
                                continue
                        if prune and (state is None) != (ns is None) and self._presence_doomed(i, ns is None):
                            pruned += 1
                            e = nxt[e]
                            continue
                        tries.append((eff[i], e, ns))
                    e = nxt[e]
                if forced is not None:
                    tries = [forced]
                else:
                    # Earliest deadline first: the write that must take effect soonest is the
                    # likeliest next one (call order, Porcupine's, tends to place long writes
                    # too early and then backtrack over everything concurrent with them).
                    tries.sort()
                    tries = [t[1:] for t in tries]
                frames.append([tries, 0])
                expand = False
            fr = frames[-1]
            tries = fr[0]
            j = fr[1]
            while j < len(tries):
                e, ns = tries[j]
                j += 1
                i = opof[e]
                d = i - base
                nwin = win | (1 << d)
                nbase = base
                if d == 0:                          # keep bit 0 = lowest unlinearized operation
                    t = (nwin ^ (nwin + 1)).bit_length() - 1
                    nwin >>= t
                    nbase += t
                # Memo key: a version no unlinearized get will return is, for the rest of the
                # search, just "present" (only presence and equality with read values matter to
                # the model). Collapsing such versions merges configurations that differ only in
                # which unobserved write came last.
                if ns is None:
                    k = (nbase, nwin, None)
                else:
                    r = vid[ns]
                    k = (nbase, nwin, ns if reads_left[r] - (rd[i] == r) else _PRESENT)
                if k in memo:
                    hits += 1
                    continue
                memo.add(k)
                fr[1] = j
                path.append((e, state, base, win))
                state, base, win = ns, nbase, nwin
                placed += 1
                r = rd[i]
                if r >= 0:
                    reads_left[r] -= 1
                r = wr[i]
                if r >= 0:
                    writers_left[r] -= 1
                isplaced[i] = True
                m = match[e]
                p = prv[e]; q = nxt[e]; nxt[p] = q; prv[q] = p          # lift call
                p = prv[m]; q = nxt[m]; nxt[p] = q; prv[q] = p          # lift return
                if rets[i] != INF:
                    must_left -= 1
                    if must_left == 0:              # crashed ops left over: "never happened"
                        result = True
                expand = True
                break
            else:
                # Dead end: no candidate leads anywhere new. Back up one step.
                if len(path) > len(self.best):      # the deepest dead end, for the explanation
                    self.best = path.copy()
                    self.best_state = state
                frames.pop()
                if not path:
                    result = False
                    break
                backtracks += 1
                e, state, base, win = path.pop()
                i = opof[e]
                if rets[i] != INF:
                    must_left += 1
                r = rd[i]
                if r >= 0:
                    reads_left[r] += 1
                r = wr[i]
                if r >= 0:
                    writers_left[r] += 1
                isplaced[i] = False
                for k in range(6):
                    j = pindex[k][i]
                    if 0 <= j < hints[k]:
                        hints[k] = j
                m = match[e]
                nxt[prv[m]] = m; prv[nxt[m]] = m                               # unlift return
                nxt[prv[e]] = e; prv[nxt[e]] = e                               # unlift call
        self.state, self.base, self.win, self.expand, self.must_left = state, base, win, expand, must_left
        self.steps, self.placed, self.backtracks, self.memo_hits = steps, placed, backtracks, hits
        self.pruned = pruned
        self.elapsed += time.perf_counter() - t_start
        if result is not None:
            self.outcome = "ok" if result else "illegal"
            self._memo_size = len(memo)
            self.memo = set()                       # decided: free it (stats keep its size)
            self.frames = []
        return result

    def _first_unplaced(self, k: int, skip: int):
        """The position key (return or call position) of the first operation of presence list
        ``k`` not yet linearized, other than ``skip``; INF if none."""
        lst, isplaced, hints = self.plists[k], self.isplaced, self.hints
        j, n = hints[k], len(lst)
        while j < n and isplaced[lst[j]]:
            j += 1
        hints[k] = j
        while j < n and (isplaced[lst[j]] or lst[j] == skip):
            j += 1
        return self.pkeys[k][lst[j]] if j < n else INF

    def _presence_doomed(self, i: int, deleting: bool) -> bool:
        """True if linearizing op ``i`` now, which flips the key between absent and present,
        leaves some operation that needs the old presence with no way back in time: every
        operation able to flip it back is invoked after that operation must have returned
        (real-time order forbids placing it before). Sound: it only cuts dead branches."""
        need, flip = (2, 3) if deleting else (0, 1)   # who needs the old presence; who restores it
        deadline = self._first_unplaced(need, i)
        if deadline == INF:
            return False
        if self._first_unplaced(flip, i) >= deadline:
            return True
        # Counting (Hall's condition): k successful inserts (deletes) that must happen by time T
        # need k deletes (puts/inserts) invoked before T to make room for each of them, since
        # the key is now present (absent). Checked for the nearest _HALL_DEPTH deadlines: a subset of
        # the conditions, so still sound, and the near ones are what the current choice affects.
        cons, sup = (5, 3) if deleting else (4, 1)
        clist, slist, isplaced, callpos, eff = self.plists[cons], self.plists[sup], self.isplaced, self.callpos, self.eff
        a, b = self.hints[cons], self.hints[sup]
        na, nb = len(clist), len(slist)
        k = supply = 0
        while a < na and k < _HALL_DEPTH:
            x = clist[a]
            a += 1
            if isplaced[x] or x == i:
                continue
            k += 1
            t = eff[x]
            while b < nb and callpos[slist[b]] < t:
                y = slist[b]
                b += 1
                if not isplaced[y] and y != i:
                    supply += 1
            if k > supply:
                return True
        return False

    def statistics(self) -> KeySearchStats:
        memo_size = getattr(self, "_memo_size", len(self.memo))
        return KeySearchStats(self.key, len(self.ops), self.steps, self.placed, self.backtracks, self.memo_hits,
                              memo_size, max(len(self.best), len(self.path)), self.elapsed,
                              self.outcome or "unknown")

    # -- explanation --------------------------------------------------------------------------

    def failure(self, all_ops: list[Op], written: set, first_write: dict) -> KeyFailure:
        """Build the KeyFailure from the deepest partial linearization (call after run -> False)."""
        ops = self.ops
        seq = [self.opof[e] for e, *_ in self.best]
        states_before = [s for _, s, *_ in self.best]
        states_after = states_before[1:] + [self.best_state]
        done = set(seq)
        state = self.best_state
        # The first overdue operation: the unlinearized one whose return entry comes first.
        rest = [i for i in range(len(ops)) if i not in done]
        r = min(rest, key=lambda i: self.retpos[i])
        limit = self.retpos[r]
        # (crashed operations are never the reason: each could as well never have happened)
        cands = [i for i in rest if self.callpos[i] < limit and ops[i].ret is not None]
        # The writer of the current state: last op in the prefix that set it.
        writer = None
        for j in range(len(seq) - 1, -1, -1):
            op = ops[seq[j]]
            if op.kind in _WRITES and states_after[j] == op.value and states_after[j] is not None:
                writer = j
                break
            if op.kind == "delete" and states_before[j] is not None and states_after[j] is None:
                writer = j
                break
        writer_op = ops[seq[writer]] if writer is not None else None
        # Who replaced each version in this partial linearization: names why a read is stale.
        self._overwriter = {}
        for j in range(1, len(seq)):
            prev = states_before[j]
            if prev is not None and states_after[j] != prev:
                self._overwriter[prev] = ops[seq[j]]
        rest_set = set(rest)
        reasons = [self._reason(i, state, writer_op, written, first_write, rest_set) for i in cands]
        blocked = tuple(Blocked(ops[i], why) for i, (why, _) in zip(cands, reasons))
        # The window: linearized ops still running when the earliest candidate was invoked.
        w0 = min(ops[i].call for i in cands)
        first = len(seq)
        for j in range(len(seq) - 1, -1, -1):
            op = ops[seq[j]]
            if op.ret is None or op.ret >= w0:
                first = j
        first = max(0, min(first, len(seq) - 3))   # and at least the last three steps, for context
        prefix = tuple(Placed(ops[seq[j]], states_after[j]) for j in range(first, len(seq)))
        involved = {id(p.op): p.op for p in prefix}
        involved.update((id(b.op), b.op) for b in blocked)
        if writer_op is not None:
            involved[id(writer_op)] = writer_op
        for _, extra in reasons:           # operations a pruned candidate would have stranded
            involved.update((id(op), op) for op in extra)
        for b in blocked:                  # the writer of a version a blocked get returned
            fw = first_write.get((b.op.key, b.op.value)) if b.op.kind == "get" else None
            if fw is not None:
                involved[id(fw[1])] = fw[1]
        order = {id(op): n for n, op in enumerate(ops)}
        inv = tuple(sorted(involved.values(), key=lambda op: order[id(op)]))
        ow = {id(o): v for v, o in self._overwriter.items()}
        replaced = tuple((o, ow[id(o)]) for _, extra in reasons for o in extra if id(o) in ow)
        witness, why = _certificate(all_ops, [b.op for b in blocked], self.initial)
        if witness:
            inv = tuple(sorted(witness, key=lambda op: order.get(id(op), -1)))
        return KeyFailure(self.key, len(all_ops), len(seq), inv, prefix,
                          states_before[first] if first < len(seq) else state, state, writer_op,
                          blocked, ops[r], replaced, why)

    def _pruned_reason(self, me: int, d: str, state, ns, rest: set) -> tuple[str, tuple]:
        ops = self.ops
        if state is not None and ns != state:
            sv = self.vid[state]
            readers = [i for i in rest if self.rd[i] == sv and i != me]
            if readers and not any(self.wr[i] == sv for i in rest if i != me):
                g = ops[min(readers, key=self.retpos.__getitem__)]
                return (f"{d} would replace v{state}, but {describe(g)} returned v{state} and is not "
                        f"linearized yet, and no other operation writes v{state}", (g,))
        if (state is None) != (ns is None):
            deleting = ns is None
            need = self.plists[2 if deleting else 0]
            flip = self.plists[3 if deleting else 1]
            xs = [i for i in need if i in rest and i != me]
            if xs:
                x = min(xs, key=self.eff.__getitem__)
                dl = self.eff[x]
                if not any(self.callpos[i] < dl for i in flip if i in rest and i != me):
                    t = self.postime[dl]
                    return (f"{d} would make the key {'absent' if deleting else 'present'}, but "
                            f"{describe(ops[x])} needs it {'present' if deleting else 'absent'} and must be "
                            f"linearized by {t} (its return, or that of a get of the version it writes), "
                            f"and no {'put or insert' if deleting else 'delete'} invoked by then is left to "
                            f"make it {'present' if deleting else 'absent'} again", (ops[x],))
        return f"{d} is legal here (-> {_v(ns)}) but every order after it fails", ()

    def _reason(self, me: int, state, writer: Op | None, written: set, first_write: dict,
                rest: set) -> tuple[str, tuple]:
        """Why operation ``me`` cannot come next in ``state``: a sentence, and any other
        operations the sentence names (they join the involved set)."""
        op = self.ops[me]
        origin = (f"written by {describe(writer)}" if writer is not None and state is not None else
                  f"deleted by {describe(writer)}" if writer is not None else "its initial state")
        st = f"the key was {_v(state)} ({origin})"
        d = describe(op)
        c = _code(op)
        ns = _step(c, op.value, state)
        if ns is not _NO:
            # Legal, so it was pruned: say which rule cut it and which operation it would strand.
            return self._pruned_reason(me, d, state, ns, rest)
        if c == GET:
            if op.value is None:
                return f"{d} returned not found but {st}", ()
            why = f"{d} returned v{op.value} but {st}"
            fw = first_write.get((op.key, op.value))
            if op.value not in written:
                why += f"; v{op.value} was never written to key {op.key}"
            elif fw is not None:
                why += f"; v{op.value} was written by {describe(fw[1])}"
                ow = self._overwriter.get(op.value)
                if ow is not None:
                    why += f" and replaced by {describe(ow)}"
                    return why, (ow,)
            elif self.initial == op.value:
                why += f"; v{op.value} is the initial state"
            return why, ()
        if c in (INS_OK, UPD_OK):
            need = "absent" if c == INS_OK else "present"
            return f"{d} took effect (wrote v{op.value}), so the key must have been {need}, but {st}", ()
        if c == DEL_OK:
            return f"{d} took effect, so the key must have been present, but {st}", ()
        if c == INS_FAIL:
            return f"{d} (v{op.value}) failed, so the key must have been present, but {st}", ()
        return (f"{d}{f' (v{op.value})' if op.value is not None else ''} failed, so the key must have been "
                f"absent, but {st}"), ()


def _certificate_failure(key: int, kops: list[Op], witness: tuple, why: str) -> KeyFailure:
    """A KeyFailure from a certificate alone (the explanatory search did not finish)."""
    ops = tuple(sorted(witness, key=lambda op: op.call))
    g = next(op for op in reversed(witness) if op.kind == "get")
    return KeyFailure(key, len(kops), 0, ops, (), None, None, None, (), g, (), why, complete=False)


def _certificate(kops: list[Op], prefer: list[Op], initial) -> tuple[tuple[Op, ...], str]:
    """A few operations of one key that are a violation by themselves, or ((), "").

    Only gets of a version with a single possible writer qualify (versions are unique, so once
    that version is replaced it never comes back): the get returned a version nobody wrote; or
    returned before its writer was invoked; or was invoked after some operation that changed the
    key (an effective write or delete) had returned, which itself was invoked after the writer
    had returned. Gets among ``prefer`` (the blocked operations) are tried first."""
    writers: dict[int, list[Op]] = {}
    changers = []
    for op in kops:
        if op.kind in _WRITES and op.ok is not False:
            writers.setdefault(op.value, []).append(op)
        if op.ret is not None and op.ok and op.kind != "get":
            changers.append(op)
    changers.sort(key=lambda op: op.call)
    calls = [op.call for op in changers]
    # suffix minimum of return times: the changer invoked after t that returned first
    best = [None] * (len(changers) + 1)
    for j in range(len(changers) - 1, -1, -1):
        nxt = best[j + 1]
        best[j] = changers[j] if nxt is None or changers[j].ret <= nxt.ret else nxt
    gets = [op for op in prefer if op.kind == "get"] + [op for op in kops if op.kind == "get"]
    for g in gets:
        v = g.value
        if g.ret is None or v is None or initial == v:
            continue
        ws = writers.get(v, [])
        if not ws:
            return (g,), f"{describe(g)} returned v{v}, which no operation on key {g.key} wrote"
        if len(ws) != 1:
            continue
        w = ws[0]
        if w.call > g.ret:
            return ((w, g), f"{describe(g)} returned v{v} before its only writer, {describe(w)}, "
                            f"was invoked")
        if w.ret is None:
            continue
        x = best[bisect.bisect_right(calls, w.ret)]
        if x is not None and x.ret < g.call:
            what = "deleted the key" if x.kind == "delete" else f"wrote v{x.value}"
            return ((w, x, g), f"{describe(g)} returned v{v}, but v{v}'s only writer, {describe(w)}, "
                               f"returned before {describe(x)} was invoked, which {what} and returned "
                               f"before the get was invoked; nothing writes v{v} again")
    return (), ""


# -- scans -----------------------------------------------------------------------------------

_MASK64 = (1 << 64) - 1


def key_order(key: int) -> int:
    """The rank of key id ``key`` in the order systems keep keys: a key is the 8 little-endian
    bytes of its id (``workloads.keys.key_bytes``; negative ids are the int64 form of ids >=
    2**63) and systems compare keys as bytes, so the order is that of the byte-reversed id (ids
    below 256 keep their numeric order)."""
    return int.from_bytes((key & _MASK64).to_bytes(8, "little"), "big")


def _check_scans(ops: list[Op], scans: list[int], first_write: dict, initial: dict) -> list[str]:
    problems = []
    for i in scans:
        s = ops[i]
        if s.ret is None:
            continue                       # crashed: the client never saw a result
        head = f"{describe(s)} from key {s.key}" + (f" (count {s.value})" if s.value is not None else "")
        res = s.result
        if s.value is not None and len(res) > s.value:
            problems.append(f"{head}: returned {len(res)} pairs, more than the {s.value} requested")
        start = key_order(s.key)
        for j, (k, ver) in enumerate(res):
            if key_order(k) < start:
                problems.append(f"{head}: {item('result', j)} key {k} is below the start key {s.key} (in key byte order)")
            if j and key_order(k) <= key_order(res[j - 1][0]):
                problems.append(f"{head}: {item('result', j)} key {k} is not after {item('result', j - 1)} key "
                                f"{res[j - 1][0]} (keys must be strictly increasing in key byte order)")
            if initial.get(k, _NO) == ver:
                continue
            t = first_write.get((k, ver))
            if t is None:
                problems.append(f"{head}: {item('result', j)} ({k}, v{ver}) is a phantom: v{ver} was never "
                                f"written to key {k}")
            elif t[0] > s.ret:
                problems.append(f"{head}: {item('result', j)} ({k}, v{ver}) is a phantom: v{ver} was first "
                                f"written by {describe(t[1])}, invoked after the scan returned")
    return problems


# -- the check -------------------------------------------------------------------------------

def check(history: Iterable[Op], *, initial: dict[int, int | None] | None = None,
          time_limit_s: float | None = 10.0) -> CheckResult:
    """Decide whether ``history`` is linearizable per key (see the module docstring).

    ``initial`` maps keys to their version before the history (absent keys start as None).
    ``time_limit_s`` bounds the whole check; keys not decided in time are "unknown".
    Malformed operations raise HistoryError naming the operation (#N, 0-based)."""
    t0 = time.perf_counter()
    deadline = None if time_limit_s is None else t0 + time_limit_s
    ops = list(history)
    initial = dict(initial or {})
    for k, v in initial.items():
        if not _is_int(k) or (v is not None and not _is_int(v)):
            raise HistoryError(f"initial[{k!r}] = {v!r}: keys and versions must be integers (version "
                               f"may be None)")

    def where(i):
        return f"operation #{i}"

    by_key: dict[int, list[int]] = {}
    scans: list[int] = []
    first_write: dict[tuple, tuple] = {}           # (key, version) -> (earliest call, op)
    written: dict[int, set] = {}
    crashed = 0
    for i, op in enumerate(ops):
        validate_op(op, where(i))
        if op.ret is None:
            crashed += 1
        if op.kind == "scan":
            scans.append(i)
            continue
        by_key.setdefault(op.key, []).append(i)
        if op.kind in _WRITES and op.ok is not False:     # a failed insert/update wrote nothing
            written.setdefault(op.key, set()).add(op.value)
            kv = (op.key, op.value)
            fw = first_write.get(kv)
            if fw is None or op.call < fw[0]:
                first_write[kv] = (op.call, op)
    _check_clients(ops, where)

    failures: list[KeyFailure] = []
    by_key_ops: dict[int, list[Op]] = {}           # searched keys: all their ops, by call
    pending: list[_KeySearch] = []
    searched: list[_KeySearch] = []
    sequential = 0
    total = sum(len(v) for v in by_key.values()) or 1
    largest_key, largest_ops = None, 0
    for key in sorted(by_key):
        idx = by_key[key]
        if len(idx) > largest_ops:
            largest_key, largest_ops = key, len(idx)
        kops = sorted((ops[i] for i in idx), key=lambda op: op.call)
        init = initial.get(key)
        if _replay_sequential(kops, init):
            sequential += 1
            continue
        sops = [op for op in kops if not (op.kind == "get" and op.ret is None)]
        s = _KeySearch(key, sops, init)
        by_key_ops[key] = kops
        searched.append(s)
        # A certificate is a proof: the key is illegal without searching. Refuting a key by
        # search means exhausting it, the expensive case, so this matters most on hot keys.
        s.certificate = _certificate(kops, [], init)
    scan_problems = _check_scans(ops, scans, first_write, initial)
    # Once a key (or a scan) is proven illegal the verdict is settled, whatever the keys still to
    # search turn out to be: searching on would only count more bad keys, and a key that resists
    # may take the whole limit (a minute under `dmrack check`) before the user sees the failure.
    # From then on the searches share a short budget, and the keys it leaves are reported undecided.
    settled_end = (_settled_end(deadline, time_limit_s)
                   if scan_problems or any(s.certificate[0] for s in searched) else None)
    # First round: each key a share of the limit proportional to its operations.
    for s in searched:
        if s.certificate[0]:
            continue
        share = None
        if deadline is not None:
            now = time.perf_counter()
            share = min(deadline, now + time_limit_s * len(by_key[s.key]) / total)
        if settled_end is not None:
            share = settled_end if share is None else min(share, settled_end)
        r = s.run(share)
        if r is None:
            pending.append(s)
        elif r is False and settled_end is None:
            settled_end = _settled_end(deadline, time_limit_s)
    # Second round: whatever time is left, split evenly among the keys that ran out of share.
    round_end = deadline if settled_end is None else settled_end
    unknown = []
    for n, s in enumerate(pending):
        left = len(pending) - n
        now = time.perf_counter()
        r = s.run(now + max(0.0, (round_end - now)) / left) if round_end is not None else s.run(None)
        if r is None:
            unknown.append(s.key)
    # Explanation searches get their own small budget, so a history with thousands of bad keys
    # is not explained for hours: past it, keys keep the pruned search's explanation.
    explain_budget = _settled_budget(time_limit_s)
    explain_until = time.perf_counter() + explain_budget
    for s in searched:
        certified = bool(s.certificate[0])
        if certified and s.outcome is None:
            # Proven illegal; search only to explain, within the explanation budget.
            now = time.perf_counter()
            if now < explain_until:
                s.run(min(explain_until, now + 1.0))
            if s.outcome is None:
                failures.append(_certificate_failure(s.key, by_key_ops[s.key], *s.certificate))
                continue
        if s.outcome == "illegal":
            # The pruned search's deepest point may be a write cut for stranding a read, which is
            # right but roundabout. A search without the pruning rules ends where some operation
            # is plainly illegal ("returned v7 but the key was v9"); give it a little time, and
            # keep the pruned explanation if it cannot finish.
            now = time.perf_counter()
            if now < explain_until:
                plain = _KeySearch(s.key, s.ops, s.initial, prune=False)
                if plain.run(min(explain_until, now + 1.0)) is False:
                    s = plain
            failures.append(s.failure(by_key_ops[s.key],
                                      written.get(s.key, set()) | (
                {initial[s.key]} if initial.get(s.key) is not None else set()), first_write))
    elapsed = time.perf_counter() - t0
    verdict = "illegal" if failures or scan_problems else ("unknown" if unknown else "ok")
    kstats = [s.statistics()._replace(outcome="illegal") if s.certificate[0] else s.statistics()
              for s in searched]
    slow = max(kstats, key=lambda s: s.elapsed_s, default=None)
    stats = CheckStatistics(
        ops=len(ops), keys=len(by_key), scans=len(scans), crashed=crashed, sequential_keys=sequential,
        searched_keys=len(searched), steps=sum(s.steps for s in kstats), placed=sum(s.placed for s in kstats),
        backtracks=sum(s.backtracks for s in kstats), memo_hits=sum(s.memo_hits for s in kstats),
        memo_size=sum(s.memo_size for s in kstats), largest_key=largest_key, largest_key_ops=largest_ops,
        slowest_key=slow.key if slow else None, slowest_key_s=slow.elapsed_s if slow else 0.0,
        elapsed_s=elapsed)
    keep = tuple(s for s in kstats if s.outcome != "ok" or s is slow)
    return CheckResult(verdict, len(ops), len(by_key), elapsed, tuple(failures), tuple(sorted(unknown)),
                       tuple(scan_problems), time_limit_s, stats, keep)


def _settled_budget(time_limit_s: float | None) -> float:
    """Seconds the searches still to run may take in all once the verdict is settled (a key or a
    scan proven illegal): as much as explaining may take, a fifth of the limit, at most 2 s, at
    least 0.1 s (no limit: 2 s)."""
    return 2.0 if time_limit_s is None else min(2.0, max(0.1, time_limit_s / 5))


def _settled_end(deadline: float | None, time_limit_s: float | None) -> float:
    """When the searches still to run stop once the verdict is settled: the settled budget from
    now, and no later than the check's deadline."""
    end = time.perf_counter() + _settled_budget(time_limit_s)
    return end if deadline is None else min(end, deadline)


def _replay_sequential(kops: list[Op], state) -> bool:
    """True if no two operations overlap and replaying them in call order is legal: then call
    order is the only linearization and it works. False means "search" (overlap, or a failure
    the search will explain)."""
    prev_ret = -INF
    for op in kops:
        if op.call <= prev_ret:                   # touching counts as overlap (calls first)
            return False
        if op.ret is None:
            if op is not kops[-1]:
                return False
            return True                          # a last crashed op fits any state
        prev_ret = op.ret
        state = _step(_code(op), op.value, state)
        if state is _NO:
            return False
    return True


# -- a synthetic correct history (tests, docs' timings) ---------------------------------------

def synthetic_history(ops: int = 100_000, keys: int = 10_000, hot_ops: int = 5_000, concurrency: int = 30,
                      clients: int = 64, zipf: float = 0.5, crash_rate: float = 0.0,
                      seed: int = 1) -> list[Op]:
    """A linearizable history of a correct atomic KV store, by simulation.

    Key 0 is hot: ``concurrency`` clients issue ``hot_ops`` operations on it back to back, so
    about that many are in flight at any time. The other ``ops - hot_ops`` operations come from
    ``clients`` clients over keys 1..keys-1 drawn zipf(``zipf``), mostly sequential per key.
    Each operation takes effect at a uniformly random instant inside its interval; results are
    computed by applying operations in the order of those instants. With ``crash_rate`` > 0 a
    client may crash mid-operation (ret None; it took effect or not at random) and stops."""
    rng = random.Random(seed)
    plan: list[list] = []                           # [key, client, call, ret|None, took_effect]

    def run_client(client, n, key_of, t):
        for _ in range(n):
            d = rng.randint(200, 2000)
            if crash_rate and rng.random() < crash_rate:
                plan.append([key_of(), client, t, None, rng.random() < 0.5, t + rng.random() * d])
                return
            plan.append([key_of(), client, t, t + d, True, t + rng.random() * d])
            t += d + rng.randint(0, 300)

    hot_ops = min(hot_ops, ops)
    for c in range(concurrency):
        n = hot_ops // concurrency + (1 if c < hot_ops % concurrency else 0)
        run_client(c, n, lambda: 0, rng.randint(0, 1000))
    rest = ops - hot_ops
    if rest and keys > 1:
        cum = list(_accumulate(1.0 / (r ** zipf) for r in range(1, keys)))
        top = cum[-1]
        for c in range(clients):
            n = rest // clients + (1 if c < rest % clients else 0)
            run_client(concurrency + c, n, lambda: 1 + bisect.bisect_left(cum, rng.random() * top),
                       rng.randint(0, 1000))
    by_key: dict[int, list] = {}
    for p in plan:
        by_key.setdefault(p[0], []).append(p)
    version = 0
    out: list[Op] = []
    kinds = ("get",) * 10 + ("put",) * 2 + ("update",) * 3 + ("insert",) * 3 + ("delete",) * 2
    for key, lst in by_key.items():
        lst.sort(key=lambda p: p[5])                # the linearization points
        state = None
        for key_, client, call, ret, effect, _ in lst:
            kind = rng.choice(kinds)
            value = ok = None
            if kind in _WRITES:
                version += 1
                value = version
            if ret is None:                         # crashed: result unknown
                if effect and kind != "get":
                    state = _step(_code(Op(client, kind, key, value, None, call, None)), value, state)
                out.append(Op(client, kind, key, value if kind != "get" else None, None, call, None))
                continue
            if kind == "get":
                value, ok = state, True
            elif kind == "put":
                ok, state = True, value
            elif kind == "insert":
                ok = state is None
                state = value if ok else state
            elif kind == "update":
                ok = state is not None
                state = value if ok else state
            else:
                ok = state is not None
                state = None
            out.append(Op(client, kind, key, value, ok, call, ret))
    out.sort(key=lambda op: (op.call, op.client))
    return out


def _accumulate(xs):
    s = 0.0
    for x in xs:
        s += x
        yield s


# -- command line ----------------------------------------------------------------------------

def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m cluster.correctness.checker",
                                 description="Check a KV history (JSONL) for per-key linearizability.")
    ap.add_argument("history", nargs="?", help="a JSONL history (see docs/checking.md)")
    ap.add_argument("--time-limit", type=float, default=10.0, help="seconds for the whole check (default 10)")
    ap.add_argument("--synthetic", type=int, metavar="OPS",
                    help="check a generated correct history of OPS operations instead (timings)")
    ap.add_argument("--stats", action="store_true", help="print search statistics")
    a = ap.parse_args(argv)
    if (a.history is None) == (a.synthetic is None):
        ap.error("give a history file or --synthetic OPS")
    try:
        if a.synthetic is not None:
            t = time.perf_counter()
            hist = synthetic_history(ops=a.synthetic, keys=max(2, a.synthetic // 10),
                                     hot_ops=max(1, a.synthetic // 20))
            print(f"generated {len(hist):,} operations in {time.perf_counter() - t:.2f} s")
        else:
            hist = load_jsonl(a.history)
    except HistoryError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    res = check(hist, time_limit_s=a.time_limit)
    print(res.explain())
    if a.stats:
        for name, v in res.statistics()._asdict().items():
            print(f"  {name}: {v}")
    return {"ok": 0, "illegal": 1}.get(res.verdict, 3)


if __name__ == "__main__":
    sys.exit(main())
