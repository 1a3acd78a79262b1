"""Replaying key-value traces: the Twitter cache-trace CSV format (Yang et al., OSDI'20).

Twitter's production cache traces (github.com/twitter/cache-trace) are CSV files of seven columns
and no header::

    timestamp, anonymized key, key size, value size, client id, operation, TTL

``timestamp`` in seconds, sizes in bytes, ``operation`` one of get, gets, set, add, replace, cas,
append, prepend, delete, incr, decr, ``TTL`` in seconds (0 for non-writes). ``TraceWorkload``
reads such a file and replays it on a rack. The operations are mapped onto the KV operations
dmrack's systems have (``OP_READ`` get, ``OP_UPDATE``, ``OP_INSERT``, ``OP_DELETE``):

* ``get``, ``gets`` -> read (a miss is a failed read, as it was a miss in the cache);
* ``set``, ``add``, ``replace``, ``cas``, ``append``, ``prepend``, ``incr``, ``decr`` -> update
  when the key is present at that point of the trace, else insert (the key is present afterwards).
  A dmrack value is an opaque blob written whole, so every write, in-place ones included, is one
  whole-value write of the row's value size: one trace request stays one KV operation;
* ``delete`` -> delete (the key is absent afterwards; a delete of an absent key fails, as the
  trace's did).

*Present* is decided by walking the trace in order from the loaded keys. The load step inserts
the keys whose first operation in the trace is not a creating write (``set``, ``add``): a cache
trace starts in the middle of the cache's life, and the keys it reads or modifies before setting
them existed before it began. Every other key is inserted by its first write. With ``loop`` the
trace is replayed again and again: the second and later passes start from the state the first
pass ends in (which every pass ends in), so their classification is computed once more.

Clients: the rack's clients (compute nodes x threads x coroutines) share the trace by key
(``split = "key"``, the default): a row goes to client ``key_id % clients``, so all operations on
a key are issued by one client in trace order and the classification above is exactly what the
store sees. ``split = "row"`` deals rows round-robin instead (row ``i`` to client ``i % clients``):
hot keys keep their share of every client's operations, but operations on one key then race
between clients and an update may reach a key before its insert (it fails and is counted so).
Either split is a pure function of the trace and the client count. Timestamps are not replayed:
clients run closed loop, or open loop at the workload's ``target`` rate.

Keys: a key id is the first 8 bytes (little-endian, top bit cleared) of BLAKE2b of the anonymized
key's UTF-8 bytes: deterministic, independent of the order keys appear in, and a C-speed hash.
With ``keyspace = K`` key ids are dense instead, as YCSB's ``keyspace`` makes them: the i-th
distinct key in order of first appearance gets ``generators.map_keynum(i)`` in 1..K (a fixed
pseudo-random bijection), filler load records the numbers after the trace's keys; ``keyorder =
big`` writes key ids big-endian (byte order = numeric order). For indexes whose leaves group
neighbouring integer keys (Dolphin), hashed 63-bit ids would put every key in a leaf of its own.
Values: each write carries the row's value size, clamped to ``[minvaluesize, valuesize]``
(defaults 16 and the largest size in the trace); ``valuesizes = "fixed"`` writes every value at
``valuesize`` bytes instead, for experiments with a fixed value size (Dolphin's 8 B). A loaded
key gets the value size of its first row with a non-zero value size, clamped the same way.

Parsed traces are cached per (path, size, mtime, limit) in the process, because a rack builds its
workloads more than once (the spec check, then the rack).
"""

from __future__ import annotations

import gzip
import hashlib
import math
import os
from typing import Mapping, NamedTuple

import numpy as np

from shm.messages import clip, did_you_mean
from shm.telemetry import OP_DELETE, OP_INSERT, OP_READ, OP_UPDATE
from workloads import generators as g
from workloads.generators import rng_state
from workloads.keys import key_bytes, value_bytes
from workloads.properties import WorkloadError
from workloads.stress import StressProportions

__all__ = ["TRACE_OPS", "OP_DELETE", "READ_OPS", "WRITE_OPS", "CREATE_OPS", "TraceRows", "TraceWorkload",
           "TraceStream", "TraceStreamStats", "TraceProportions", "read_trace", "trace_key_id",
           "classify", "TRACE_PROPERTIES"]

# Twitter's operations, in the order of their codes in TraceRows.ops.
TRACE_OPS = ("get", "gets", "set", "add", "replace", "cas", "append", "prepend", "delete", "incr", "decr")
_TRACE_CODE = {name: i for i, name in enumerate(TRACE_OPS)}
READ_OPS = frozenset({"get", "gets"})
CREATE_OPS = frozenset({"set", "add"})          # writes that make a key; the rest presume it exists
WRITE_OPS = frozenset(TRACE_OPS) - READ_OPS - {"delete"}
_KIND = np.array([0 if n in READ_OPS else 2 if n == "delete" else 1 for n in TRACE_OPS], np.int8)  # read/write/delete
_CREATES = np.array([n in CREATE_OPS for n in TRACE_OPS], np.bool_)

_MASK63 = (1 << 63) - 1
_ARRIVAL_SALT = 0xA7721BA3
SPLITS = ("key", "row")
VALUE_SIZES = ("trace", "fixed")
MIN_VALUE_SIZE = 16                             # default minvaluesize: a value carries its key id and version
# The properties a trace table takes (besides ``trace`` itself); see docs/workloads.md.
TRACE_PROPERTIES = ("loop", "limit", "split", "keysize", "valuesize", "minvaluesize", "valuesizes",
                    "recordcount", "operationcount", "target", "keyspace", "keyorder")


def trace_key_id(key: str) -> int:
    """The key id of an anonymized trace key: BLAKE2b-64 of its UTF-8 bytes, top bit cleared."""
    return int.from_bytes(hashlib.blake2b(key.encode("utf-8"), digest_size=8).digest(), "little") & _MASK63


class TraceRows(NamedTuple):
    """A parsed trace, one entry per row in file order."""
    source: str
    timestamps: np.ndarray      # int64 s
    ops: np.ndarray             # int8, index into TRACE_OPS
    keys: np.ndarray            # int32, index into key_ids (distinct keys in order of first appearance)
    key_sizes: np.ndarray       # int32
    value_sizes: np.ndarray     # int32
    clients: np.ndarray         # int64
    ttls: np.ndarray            # int64
    key_ids: np.ndarray         # int64, per distinct key
    lines: np.ndarray           # int64, 1-based line of each row in the file


def _open(path: str):
    if path.endswith(".gz"):
        return gzip.open(path, "rt", encoding="utf-8", newline="")
    return open(path, encoding="utf-8", newline="")


def _int_field(value: str, name: str, where: str, line: str) -> int:
    try:
        v = int(value.strip(), 10)
    except ValueError:
        raise WorkloadError(f"{where}: {name} {value.strip()!r} is not an integer in {_show_line(line)}") from None
    if v < 0:
        raise WorkloadError(f"{where}: {name} {v} is negative in {_show_line(line)}")
    return v


def _show_line(line: str) -> str:
    line = line.rstrip("\r\n")
    return repr(line if len(line) <= 120 else line[:117] + "...")


_CACHE: dict = {}


def read_trace(path: str | os.PathLike, limit: int = 0, source: str | None = None) -> TraceRows:
    """Parse a Twitter-format trace (``.gz`` too); ``limit`` > 0 keeps the first ``limit`` rows.
    Blank lines and lines starting with ``#`` are skipped. A key may itself hold commas: the first
    field is the timestamp, the last five are fixed, the key is what lies between. A malformed row
    is a WorkloadError naming ``file:line``."""
    path = os.fspath(path)
    src = source or path
    try:
        st = os.stat(path)
    except OSError as e:
        raise WorkloadError(f"{src}: cannot read trace: {e.strerror or e}") from None
    ck = (os.path.realpath(path), st.st_size, st.st_mtime_ns, int(limit))
    hit = _CACHE.get(ck)
    if hit is not None:
        return hit._replace(source=src)
    ts, ops, kidx, ksz, vsz, cli, ttl, lines = [], [], [], [], [], [], [], []
    index: dict[str, int] = {}
    ids: list[int] = []
    code = _TRACE_CODE
    try:
        with _open(path) as f:
            for lineno, line in enumerate(f, 1):
                if not line.strip() or line.startswith("#"):
                    continue
                parts = line.rstrip("\r\n").split(",")
                where = f"{src}:{lineno}"
                if len(parts) < 7:
                    raise WorkloadError(f"{where}: expected 7 comma-separated fields (timestamp, key, key size, "
                                        f"value size, client id, operation, TTL), got {len(parts)} in "
                                        f"{_show_line(line)}")
                key = ",".join(parts[1:-5]) if len(parts) > 7 else parts[1]
                if not key:
                    raise WorkloadError(f"{where}: empty key in {_show_line(line)}")
                op = parts[-2].strip()
                c = code.get(op)
                if c is None:
                    c = code.get(op.lower())
                    if c is None:
                        raise WorkloadError(f"{where}: unknown operation {op!r} (one of {', '.join(TRACE_OPS)}) in "
                                            f"{_show_line(line)}")
                t = _int_field(parts[0], "timestamp", where, line)
                k_size = _int_field(parts[-5], "key size", where, line)
                v_size = _int_field(parts[-4], "value size", where, line)
                client = _int_field(parts[-3], "client id", where, line)
                t_ttl = _int_field(parts[-1], "TTL", where, line)
                i = index.get(key)
                if i is None:
                    i = index[key] = len(ids)
                    ids.append(trace_key_id(key))
                ts.append(t); ops.append(c); kidx.append(i); ksz.append(k_size); vsz.append(v_size)
                cli.append(client); ttl.append(t_ttl); lines.append(lineno)
                if limit and len(ops) >= limit:
                    break
    except OSError as e:
        raise WorkloadError(f"{src}: cannot read trace: {e.strerror or e}") from None
    except UnicodeDecodeError as e:
        raise WorkloadError(f"{src}: not a text trace ({e.reason} at byte {e.start})") from None
    if not ops:
        raise WorkloadError(f"{src}: the trace has no rows")
    rows = TraceRows(src, np.array(ts, np.int64), np.array(ops, np.int8), np.array(kidx, np.int32),
                     np.array(ksz, np.int32), np.minimum(np.array(vsz, np.int64), 1 << 30).astype(np.int32),
                     np.array(cli, np.int64), np.array(ttl, np.int64), np.array(ids, np.int64),
                     np.array(lines, np.int64))
    if len(_CACHE) > 8:
        _CACHE.clear()
    _CACHE[ck] = rows
    return rows


def classify(rows: TraceRows, present: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The rack op code of every row, walking the trace in order from ``present`` (bool per
    distinct key, copied); returns ``(codes int8, present afterwards)``."""
    present = present.copy()
    kinds = _KIND[rows.ops].tolist()
    out = np.empty(len(kinds), np.int8)
    for i, (kind, k) in enumerate(zip(kinds, rows.keys.tolist())):
        if kind == 0:
            out[i] = OP_READ
        elif kind == 1:
            out[i] = OP_UPDATE if present[k] else OP_INSERT
            present[k] = True
        else:
            out[i] = OP_DELETE
            present[k] = False
    return out, present


#: The replayed mix (first pass): the stress workload's record, CoreWorkload's field names plus
#: ``delete`` (``scan`` and ``rmw`` are 0 in a trace too)
TraceProportions = StressProportions


class TraceStreamStats(NamedTuple):
    ops: int
    reads: int
    updates: int
    inserts: int
    deletes: int
    passes: int         # passes over this client's share begun
    batches: int


def _prop(props: Mapping, name: str, kind: str, default, where: str, lo=None, choices=None):
    if name not in props:
        return default
    v = props[name]
    bad = lambda why: WorkloadError(f"{where}: property {name!r} = {clip(repr(v))}: {why}")  # noqa: E731
    if kind == "bool":
        if isinstance(v, bool):
            return v
        if isinstance(v, str) and v.strip().lower() in ("true", "false"):
            return v.strip().lower() == "true"
        raise bad("must be true or false")
    if kind == "choice":
        if isinstance(v, str) and v.strip().lower() in choices:
            return v.strip().lower()
        raise bad(f"must be one of {', '.join(choices)}")
    if isinstance(v, bool):
        raise bad("must be a number, not a boolean")
    try:
        f = float(v.strip() if isinstance(v, str) else v)
    except (TypeError, ValueError):
        raise bad("must be a number") from None
    if not math.isfinite(f):
        raise bad("must be a finite number")
    if kind == "int":
        if not f.is_integer():
            raise bad("must be an integer")
        f = int(f)
    if lo is not None and f < lo:
        raise bad(f"must be >= {lo}")
    return f


class TraceWorkload:
    """A trace replayed by the rack's clients (see the module docstring). A drop-in for
    ``workloads.ycsb.CoreWorkload`` where the rack uses one, plus ``replayed = True``, which makes
    the compute nodes open each client's share with :meth:`client_stream` instead of ``stream``."""

    replayed = True             # nodes.compute: streams are shares of one trace, not random streams
    mixed_sizes = True          # nodes.compute: value sizes per key (load) and per row (writes)
    sized_writes = True         # nodes.compute: a write's size is the third array of next_batch

    def __init__(self, path: str | os.PathLike, properties: Mapping | None = None, *, source: str | None = None,
                 name: str | None = None):
        props = dict(properties or {})
        where = source or "trace"
        for k in props:
            if k not in TRACE_PROPERTIES:
                hint = (did_you_mean(k, TRACE_PROPERTIES, quote=True)
                        or f"; a trace takes {', '.join(TRACE_PROPERTIES)}")
                raise WorkloadError(f"{where}: unknown trace property {clip(str(k))!r}{hint}")
        self.path = os.fspath(path)
        self.name = name or f"trace {os.path.basename(self.path)}"
        self.loop = _prop(props, "loop", "bool", False, where)
        self.limit = _prop(props, "limit", "int", 0, where, lo=0)
        self.split = _prop(props, "split", "choice", "key", where, choices=SPLITS)
        self.key_size = _prop(props, "keysize", "int", 8, where, lo=8)
        self.value_sizes = _prop(props, "valuesizes", "choice", "trace", where, choices=VALUE_SIZES)
        self.min_value_size = _prop(props, "minvaluesize", "int", MIN_VALUE_SIZE, where, lo=1)
        self.target = float(_prop(props, "target", "float", 0.0, where, lo=0.0))
        if self.value_sizes == "fixed" and "valuesize" not in props:
            raise WorkloadError(f"{where}: valuesizes = 'fixed' needs valuesize (the size of every value)")
        rows = self.rows = read_trace(self.path, self.limit, source=self.path)
        nkeys = len(rows.key_ids)
        # dense integer keys (the YCSB properties of the same names): the i-th distinct key of the
        # trace (in order of first appearance) gets generators.map_keynum(i) in 1..keyspace, filler
        # load records the numbers after the trace's keys; keyorder = big: big-endian key bytes
        self.keyspace = _prop(props, "keyspace", "int", None, where, lo=1)
        self.key_order = _prop(props, "keyorder", "choice", "little", where, choices=("little", "big"))
        if self.keyspace is not None:
            if self.keyspace < nkeys:
                raise WorkloadError(f"{where}: property 'keyspace' = {self.keyspace}: must be >= the trace's "
                                    f"{nkeys} distinct keys")
            self._kp = g.key_map_params(True, self.keyspace)
            self.key_ids = g.load_keys(0, nkeys, kp=self._kp)
        else:
            self._kp = None
            self.key_ids = rows.key_ids
        first = np.full(nkeys, -1, np.int64)
        # the first row of each key (rows.keys numbers keys in order of first appearance)
        _, first_rows = np.unique(rows.keys, return_index=True)
        first[:] = first_rows
        preload = ~_CREATES[rows.ops[first]]
        self.preload = np.flatnonzero(preload)                  # distinct-key indexes the load inserts
        self._codes1, after = classify(rows, preload)
        self._codes2, after2 = classify(rows, after) if self.loop else (self._codes1, after)
        assert (after2 == after).all()                          # every pass ends in the same state
        writes = _KIND[rows.ops] == 1
        largest = int(rows.value_sizes.max(initial=0))
        vmax = _prop(props, "valuesize", "int", max(largest, self.min_value_size), where, lo=1)
        if vmax < self.min_value_size and self.value_sizes == "trace":
            raise WorkloadError(f"{where}: property 'valuesize' = {vmax}: must be >= minvaluesize "
                                f"({self.min_value_size})")
        self.value_size = int(vmax)
        if self.value_sizes == "fixed":
            self._row_sizes = np.full(len(rows.ops), self.value_size, np.int32)
        else:
            self._row_sizes = np.clip(rows.value_sizes, self.min_value_size, self.value_size).astype(np.int32)
        self._row_sizes[~writes] = 0
        # a loaded key's size: its first row with a non-zero value size
        nz = np.flatnonzero(rows.value_sizes > 0)
        ksize = np.zeros(nkeys, np.int64)
        if len(nz):
            ks, at = np.unique(rows.keys[nz], return_index=True)
            ksize[ks] = rows.value_sizes[nz[at]]
        if self.value_sizes == "fixed":
            ksize[:] = self.value_size
        else:
            ksize = np.clip(np.where(ksize > 0, ksize, self.value_size), self.min_value_size, self.value_size)
        self._key_size_of = dict(zip(self.key_ids.tolist(), ksize.tolist()))
        self.recordcount = _prop(props, "recordcount", "int", max(1, len(self.preload)), where, lo=1)
        self.operationcount = len(rows.ops)         # one pass; ``operationcount`` in a table is ignored
        self.distinct_keys = nkeys
        # the table holds the loaded keys plus every other key of the trace at most
        self.expected_new_keys = nkeys - len(self.preload)
        counts = np.bincount(self._codes1, minlength=6).astype(float)
        total = counts.sum()
        self.proportions = TraceProportions(read=counts[OP_READ] / total, update=counts[OP_UPDATE] / total,
                                            insert=counts[OP_INSERT] / total, scan=0.0, rmw=0.0,
                                            delete=counts[OP_DELETE] / total)
        self.op_counts = {n: int(np.count_nonzero(rows.ops == i)) for i, n in enumerate(TRACE_OPS)}
        self.finite = not self.loop                 # a run of it ends when every share is replayed
        self._assign: dict[int, np.ndarray] = {}
        self.properties = {"trace": self.path, "loop": self.loop, "limit": self.limit, "split": self.split,
                           "keysize": self.key_size, "valuesize": self.value_size, "minvaluesize": self.min_value_size,
                           "valuesizes": self.value_sizes, "recordcount": self.recordcount, "target": self.target,
                           "keyorder": self.key_order}
        if self.keyspace is not None:
            self.properties["keyspace"] = self.keyspace

    # -- what it is ------------------------------------------------------------------------------
    def describe(self) -> str:
        mix = " ".join(f"{p * 100:.4g}% {n}" for p, n in zip(self.proportions, TraceProportions._fields) if p > 0)
        sizes = (f"{self.value_size} B values" if self.value_sizes == "fixed"
                 else f"{self.min_value_size}-{self.value_size} B values (trace)")
        parts = [f"{len(self.rows.ops)} rows", mix, f"{self.distinct_keys} keys ({len(self.preload)} loaded)",
                 f"split by {self.split}", f"{self.key_size} B keys", sizes]
        if self.loop:
            parts.append("looped")
        if self.target > 0:
            parts.append(f"open loop {self.target:g} ops/s")
        return f"{self.name}: {', '.join(parts)}"

    def __repr__(self) -> str:
        return f"<TraceWorkload {self.describe()}>"

    interarrival_ns = staticmethod(g.interarrival_ns)

    # -- keys and values -------------------------------------------------------------------------
    def load_keys(self, start: int, count: int) -> np.ndarray:
        """Key ids of load records ``start .. start+count-1``: records below the number of
        preloaded keys are those keys (in order of first appearance in the trace); records beyond
        are filler keys ``fnvhash64(record)`` no trace row touches (a bigger index, e.g. a tree
        "50 % full")."""
        if start < 0 or count < 0:
            raise ValueError(f"load_keys needs start >= 0 and count >= 0, got start={start} count={count}")
        pre = self.key_ids[self.preload]
        head = pre[start:start + count]
        if len(head) == count:
            return head.copy()
        lo = max(start, len(pre))
        if self._kp is not None:       # fillers: the key numbers after the trace's distinct keys
            return np.concatenate([head, g.load_keys(self.distinct_keys + lo - len(pre), start + count - lo,
                                                     kp=self._kp)])
        return np.concatenate([head, g.load_keys(lo, start + count - lo, True)])

    def key_bytes(self, key_id: int) -> bytes:
        return key_bytes(key_id, self.key_size, self.key_order)

    def value_size_of(self, key_id: int, version: int) -> int:
        """A loaded key's value size (its first non-zero size in the trace, clamped); filler keys
        and keys the trace never sized get ``valuesize``."""
        return self._key_size_of.get(key_id, self.value_size)

    load_value_size = value_size_of

    def value_bytes(self, key_id: int, version: int) -> bytes:
        return value_bytes(key_id, version, self.value_size_of(key_id, version))

    # -- the shares --------------------------------------------------------------------------------
    def share(self, client: int, clients: int) -> np.ndarray:
        """Row numbers of client ``client`` of ``clients``, in trace order."""
        if not 0 <= client < clients:
            raise ValueError(f"client {client} is not one of {clients}")
        if self.split == "row":
            return np.arange(client, len(self.rows.ops), clients, dtype=np.int64)
        assign = self._assign.get(clients)
        if assign is None:
            by_key = (self.key_ids % clients).astype(np.int64)
            assign = self._assign[clients] = by_key[self.rows.keys]
        return np.flatnonzero(assign == client)

    def client_stream(self, client: int, clients: int, inserts=None, seed: int = 0) -> "TraceStream":
        """The operations of client ``client`` of ``clients`` (see ``split``). ``inserts`` is
        accepted for the rack's sake and not used: trace inserts are of trace keys, not YCSB
        record numbers."""
        return TraceStream(self, client, clients, seed)

    def stream(self, seed: int = 0, stream_id: int = 0, inserts=None) -> "TraceStream":
        """The whole trace as one stream (one client)."""
        return TraceStream(self, 0, 1, seed)


class TraceStream:
    """One client's share of a trace; ``next_batch(n)`` gives ``(ops int8, key ids int64, value
    sizes int32)`` (the third array is a write's value size, 0 for reads and deletes; YCSB streams
    put scan lengths there). An empty batch means the share is done (never, with ``loop``)."""

    def __init__(self, workload: TraceWorkload, client: int, clients: int, seed: int = 0):
        self.workload = workload
        self.client, self.clients = client, clients
        rows = workload.share(client, clients)
        self._rows = rows
        self._keys = workload.key_ids[workload.rows.keys[rows]]
        self._codes = [workload._codes1[rows], workload._codes2[rows]]
        self._sizes = workload._row_sizes[rows]
        self._pos = 0
        self._pass = 0
        self._arrival_rng = rng_state(seed, client, _ARRIVAL_SALT)
        self._counts = np.zeros(6, np.int64)
        self._batches = 0

    def __len__(self) -> int:
        return len(self._rows)

    def next_batch(self, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        n = int(n)
        total = len(self._rows)
        parts = []
        got = 0
        while got < n and total:
            if self._pos >= total:
                if not self.workload.loop:
                    break
                self._pos = 0
                self._pass += 1
            take = min(n - got, total - self._pos)
            codes = self._codes[min(self._pass, 1)]
            sl = slice(self._pos, self._pos + take)
            parts.append((codes[sl], self._keys[sl], self._sizes[sl]))
            self._pos += take
            got += take
        if not parts:
            return np.empty(0, np.int8), np.empty(0, np.int64), np.empty(0, np.int32)
        self._batches += 1
        ops = np.concatenate([p[0] for p in parts])
        self._counts += np.bincount(ops, minlength=6)
        return ops, np.concatenate([p[1] for p in parts]), np.concatenate([p[2] for p in parts])

    def interarrivals_ns(self, n: int, rate_per_s: float | None = None) -> np.ndarray:
        return g.arrival_gaps(self._arrival_rng, n, self.workload.target if rate_per_s is None else rate_per_s)

    def statistics(self) -> TraceStreamStats:
        c = self._counts.tolist()
        passes = self._pass + (1 if self._batches else 0)
        return TraceStreamStats(int(sum(c)), c[OP_READ], c[OP_UPDATE], c[OP_INSERT], c[OP_DELETE], passes,
                                self._batches)
