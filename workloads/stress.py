"""A checking workload: gets, inserts, updates and deletes hammering one small key space.

YCSB is a performance workload, and its shape hides most of a KV protocol from a correctness
check: inserts always add *new* records (so an insert never meets an existing key, and nothing
is ever inserted twice), there are no deletes, and with 10^4+ records two operations rarely touch
the same key at the same time. ``StressWorkload`` is the opposite, on purpose:

* every operation -- get, insert, update, delete -- draws its key from the same ``keys`` records
  (a few dozen in a conformance run), so keys are contended by many coroutines at once;
* an insert of a present key must fail and leave the value alone, a delete of a missing key must
  fail, an update of a missing key must fail, and a deleted key is later inserted again: every
  branch of a system's protocol (duplicate detection, tombstones, slot reuse, racing writers) is
  taken thousands of times in a short run;
* values are ``workloads.keys.value_bytes`` of at least 16 bytes, so each carries the version of
  the write that produced it: the rack's history records which write a get saw, which is what
  the linearizability checker (``cluster.correctness.checker``) needs;
* optionally (a mix naming "scan", for a system with ``supports_scan``), scans of 1..``max_scan``
  keys from a start key drawn like any other op's, whose recorded (key, version) pairs the
  checker's scan checks read. A mix without "scan" draws exactly what it drew before scans
  existed.

It is a drop-in for ``workloads.ycsb.CoreWorkload`` where the rack uses one (the compiled rack's
``workloads`` dict, ``nodes.compute.ComputeNode``): the same attributes (``name``,
``recordcount``, ``operationcount``, ``key_size``, ``value_size``, ``target``, ``proportions``
with a ``scan`` field, ``expected_new_keys``), ``describe()``, ``key_id``/``load_keys`` and
``stream(seed, stream_id, inserts)`` whose ``next_batch(n)`` returns ``(ops int8[n], keys
int64[n], scan_lengths int32[n])``. Operation codes are the rack's: ``OP_READ`` for get,
``OP_UPDATE``, ``OP_INSERT``, ``OP_SCAN`` and ``OP_DELETE`` (``shm/telemetry.py`` declares them).

Generation is vectorised numpy over the jitted generators of ``workloads.generators`` (uniform,
YCSB's zipfian, ``fnvhash64``), each stream owning explicit xoshiro state from ``rng_state``: a
stream is a pure function of ``(seed, stream_id)``. No numba kernel lives in this file on
purpose: numba's per-file cache does not track functions inlined from another file, so a kernel
here calling ``generators.draw`` could silently keep a stale copy of it after generators.py
changes. Operations and keys come from two independent streams of the same id, so changing the
mix does not change which keys are drawn (and vice versa).
"""

from __future__ import annotations

import math
from typing import Mapping, NamedTuple

import numpy as np

from shm.telemetry import OP_DELETE, OP_INSERT, OP_READ, OP_SCAN, OP_UPDATE
from workloads import generators as g
from workloads.generators import rng_state
from workloads.keys import decode_value, key_bytes, value_bytes
from workloads.properties import WorkloadError
from workloads.ycsb import InsertSequence, LocalInsertSequence

__all__ = ["StressWorkload", "StressStream", "StressStreamStats", "StressProportions", "OP_READ", "OP_UPDATE",
           "OP_INSERT", "OP_SCAN", "OP_DELETE", "MIX_OPS", "DEFAULT_MIX", "MAX_SCAN", "decode_value"]

# The mix names, in the order the operation draw walks them, and their rack op codes. "scan" is
# last, so a mix without scans walks (and draws) exactly as before scans existed.
MIX_OPS = ("get", "insert", "update", "delete", "scan")
_MIX_CODE = {"get": OP_READ, "insert": OP_INSERT, "update": OP_UPDATE, "delete": OP_DELETE, "scan": OP_SCAN}
MAX_SCAN = 16
DEFAULT_MIX = {"get": 0.4, "insert": 0.2, "update": 0.2, "delete": 0.2}
DISTRIBUTIONS = ("uniform", "zipfian")

# Salts of the two random streams of one (seed, stream_id); any distinct non-zero constants.
_KEY_SALT = 0x5EED_C0DE
_ARRIVAL_SALT = 0xA7721BA2
_SCAN_SALT = 0x5CA71E57
_TWO53 = float(1 << 53)


class StressProportions(NamedTuple):
    """The normalised mix, with CoreWorkload's field names (``read`` is get) plus ``delete``;
    ``rmw`` is always 0. Indexing by op code works: ``p[OP_DELETE]``."""
    read: float
    update: float
    insert: float
    scan: float
    rmw: float
    delete: float


class StressStreamStats(NamedTuple):
    ops: int
    gets: int
    inserts: int
    updates: int
    deletes: int
    batches: int
    insert_claims: int    # insert-sequence numbers claimed (one per insert, see StressStream)
    scans: int = 0


class StressWorkload:
    """Gets/inserts/updates/deletes (and scans) over ``keys`` records (see the module docstring).

    ``mix`` maps any of get/insert/update/delete/scan to a non-negative weight (normalised;
    missing names weigh 0). A scan starts at a key drawn like any other op's and asks for a
    count drawn uniformly from 1..``max_scan``, from a random stream of its own: a mix without
    "scan" draws exactly what it drew before scans existed. Scans need a system with
    ``supports_scan`` (the rack refuses the step otherwise). ``distribution`` is "uniform" or "zipfian" (YCSB's ZipfianGenerator over the
    records, record 0 the most popular, ``zipfian_constant`` default 0.99). ``hashed`` makes key
    ids ``fnvhash64(record)`` (YCSB's insertorder=hashed) so that a system's hashing or ordering
    sees ids spread over 64 bits; ``False`` keeps them 0..keys-1. ``seed`` is the default seed of
    :meth:`stream`; the rack passes its own. ``target`` > 0 makes the rack drive it open loop."""

    def __init__(self, keys: int, mix: Mapping[str, float] | None = None, distribution: str = "uniform", *,
                 key_size: int = 8, value_size: int = 32, zipfian_constant: float = g.ZIPFIAN_CONSTANT,
                 hashed: bool = True, seed: int = 0, operationcount: int = 0, target: float = 0.0,
                 mixed_sizes: bool = False, max_scan: int = MAX_SCAN, name: str = "stress"):
        if isinstance(keys, bool) or not isinstance(keys, (int, np.integer)) or keys < 1:
            raise WorkloadError(f"{name}: keys = {keys!r}: must be an integer >= 1")
        mix = dict(DEFAULT_MIX if mix is None else mix)
        for op, w in mix.items():
            if op not in _MIX_CODE:
                raise WorkloadError(f"{name}: mix has unknown operation {op!r}; use {', '.join(MIX_OPS)}")
            if isinstance(w, bool) or not isinstance(w, (int, float)) or not math.isfinite(w) or w < 0:
                raise WorkloadError(f"{name}: mix[{op!r}] = {w!r}: must be a finite number >= 0")
        total = float(sum(mix.values()))
        if total <= 0:
            raise WorkloadError(f"{name}: the mix {mix!r} has no operation with a weight > 0")
        if distribution not in DISTRIBUTIONS:
            raise WorkloadError(f"{name}: distribution {distribution!r}: must be one of {', '.join(DISTRIBUTIONS)}")
        if not 0.0 < zipfian_constant < 1.0:
            raise WorkloadError(f"{name}: zipfian_constant = {zipfian_constant!r}: must be in (0, 1)")
        if key_size < 8:
            raise WorkloadError(f"{name}: key_size = {key_size}: must be >= 8 bytes to hold a key id")
        if value_size < 16:
            # A value shorter than 16 bytes cannot carry its version (workloads.keys), and without
            # versions a history cannot say which write a get saw: the whole point of this workload.
            raise WorkloadError(f"{name}: value_size = {value_size}: must be >= 16 bytes so that values carry "
                                f"their write's version")
        if isinstance(max_scan, bool) or not isinstance(max_scan, (int, np.integer)) or max_scan < 1:
            raise WorkloadError(f"{name}: max_scan = {max_scan!r}: must be an integer >= 1")
        if not (isinstance(target, (int, float)) and math.isfinite(target) and target >= 0):
            raise WorkloadError(f"{name}: target = {target!r}: must be a finite number >= 0")
        self.name = name
        self.keys = self.recordcount = int(keys)
        self.operationcount = int(operationcount)     # informational: runs are bounded by their duration
        self.key_size = int(key_size)
        self.value_size = int(value_size)
        self.mixed_sizes = bool(mixed_sizes)      # each write's size drawn from 16..value_size
        self.target = float(target)
        self.distribution = distribution
        self.zipfian_constant = float(zipfian_constant)
        self.hashed = bool(hashed)
        self.seed = int(seed)
        self.max_scan = int(max_scan)
        self.mix = {op: float(mix.get(op, 0.0)) / total for op in MIX_OPS}
        self.proportions = StressProportions(read=self.mix["get"], update=self.mix["update"],
                                             insert=self.mix["insert"], scan=self.mix["scan"], rmw=0.0,
                                             delete=self.mix["delete"])
        # Inserts reuse the key space, so the table never holds more than ``keys`` records: the
        # rack sizes the system for recordcount + expected_new_keys, and there are none.
        self.expected_new_keys = 0
        present = [op for op in MIX_OPS if self.mix[op] > 0]
        self._op_codes = np.array([_MIX_CODE[op] for op in present], np.int8)
        cum = np.cumsum([self.mix[op] for op in present])
        cum[-1] = np.inf        # rounding can leave the sum a hair below 1; the last op takes the rest
        self._op_cum = cum
        if distribution == "uniform":
            self._key_template = (g.K_UNIFORM, np.array([0, self.keys], np.int64), np.zeros(1))
        else:
            self._key_template = (g.K_ZIPFIAN, np.array([self.keys], np.int64),
                                  g.zipfian_params(0, self.keys - 1, self.zipfian_constant))

    # -- what it is ------------------------------------------------------------------------------
    def describe(self) -> str:
        """One line, e.g. "stress: 40% get 20% insert 20% update 20% delete, uniform, 64 keys, ..."."""
        mix = " ".join(f"{self.mix[op] * 100:.4g}% {op}" for op in MIX_OPS if self.mix[op] > 0)
        if self.mix["scan"] > 0:
            mix += f" (scans of 1-{self.max_scan})"
        dist = f"zipfian {self.zipfian_constant:g}" if self.distribution == "zipfian" else "uniform"
        parts = [mix, dist, f"{self.keys} keys (inserts and deletes included)", f"{self.key_size} B keys",
                 f"16-{self.value_size} B values" if self.mixed_sizes else f"{self.value_size} B values"]
        if self.target > 0:
            parts.append(f"open loop {self.target:g} ops/s")
        return f"{self.name}: {', '.join(parts)}"

    def __repr__(self) -> str:
        return f"<StressWorkload {self.describe()}>"

    # -- keys and values -------------------------------------------------------------------------
    def key_id(self, keynum: int) -> int:
        """The key id of record ``keynum`` (0 <= keynum < keys)."""
        return int(g.fnvhash64(keynum)) if self.hashed else int(keynum)

    def key_ids(self) -> np.ndarray:
        """Every key id of the key space, in record order."""
        return g.load_keys(0, self.keys, self.hashed)

    def load_keys(self, start: int, count: int) -> np.ndarray:
        """Key ids of records ``start .. start+count-1``, which must lie in the key space: a load
        beyond it would insert keys no operation ever touches."""
        if start < 0 or count < 0 or start + count > self.keys:
            raise ValueError(f"{self.name}: load_keys({start}, {count}) is outside the key space of "
                             f"{self.keys} records")
        return g.load_keys(start, count, self.hashed)

    def key_bytes(self, key_id: int) -> bytes:
        return key_bytes(key_id, self.key_size)

    def value_bytes(self, key_id: int, version: int) -> bytes:
        return value_bytes(key_id, version, self.value_size_of(key_id, version))

    def value_size_of(self, key_id: int, version: int) -> int:
        """The size of the value a write of ``version`` to ``key_id`` carries: ``value_size``, or
        with ``mixed_sizes`` one drawn from 16..value_size by a hash of both (so a key's value
        grows and shrinks across lines, inline and out-of-line limits, allocation size classes)."""
        if not self.mixed_sizes:
            return self.value_size
        h = ((key_id * 0x9E3779B97F4A7C15) ^ (version * 0xBF58476D1CE4E5B9)) & 0xFFFFFFFFFFFFFFFF
        return 16 + (h >> 17) % (self.value_size - 15)

    # -- streams ---------------------------------------------------------------------------------
    def stream(self, seed: int | None = None, stream_id: int = 0,
               inserts: InsertSequence | None = None) -> "StressStream":
        """The operations of one client: deterministic for ``(seed, stream_id)``; streams of
        different ids are independent. ``inserts`` is the rack's insert sequence (see
        :class:`StressStream` for why it is used at all); without it a private one is made."""
        return StressStream(self, self.seed if seed is None else seed, stream_id,
                            inserts if inserts is not None else LocalInsertSequence(self.recordcount))


class StressStream:
    """One client's stress operations, made in batches (see ``StressWorkload.stream``).

    The rack's compute node calls ``inserts.acknowledge()`` after every insert it performs,
    whatever workload drew it, because for YCSB that is what lets reads reach the new record. A
    stress insert targets an existing record number, but it still claims one number per insert
    from ``inserts`` so that the sequence's claimed and acknowledged counts stay balanced (a
    ``LocalInsertSequence`` refuses more acknowledgements than claims, and a YCSB step after this
    one starts from a consistent sequence). The claimed numbers are otherwise unused."""

    def __init__(self, workload: StressWorkload, seed: int, stream_id: int, inserts: InsertSequence):
        self.workload = workload
        self.seed = seed
        self.stream_id = stream_id
        self.inserts = inserts
        self.rng = rng_state(seed, stream_id)                    # which operation
        self.key_rng = rng_state(seed, stream_id, _KEY_SALT)     # which key
        self._arrival_rng = rng_state(seed, stream_id, _ARRIVAL_SALT)
        self._scan_rng = rng_state(seed, stream_id, _SCAN_SALT)         # how long a scan
        self._sip = np.array([1, workload.max_scan], np.int64)          # uniform 1..max_scan
        kind, ip, fp = workload._key_template
        self._kkind, self._kip, self._kfp = kind, ip.copy(), fp.copy()
        # 53-bit uniform integers, turned into doubles in [0, 1) exactly as next_double does.
        self._uip = np.array([0, 1 << 53], np.int64)
        self._ufp = np.zeros(1)
        self._counts = np.zeros(6, np.int64)
        self._batches = 0
        self._claims = 0

    def next_batch(self, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(ops int8[n], keys int64[n], scan_lengths int32[n])``: codes OP_READ (get),
        OP_UPDATE, OP_INSERT, OP_DELETE or OP_SCAN; key ids of the key space (a scan's start
        key); scan lengths (1..max_scan for a scan, else 0)."""
        n = int(n)
        ops = np.empty(max(n, 0), np.int8)
        keys = np.empty(max(n, 0), np.int64)
        scans = np.zeros(max(n, 0), np.int32)
        if n <= 0:
            return ops, keys, scans
        u = np.empty(n, np.int64)
        g.draw_batch(g.K_UNIFORM, self.rng, self._uip, self._ufp, 0, u)
        w = self.workload
        ops[:] = w._op_codes[np.searchsorted(w._op_cum, u / _TWO53, side="right")]
        g.draw_batch(self._kkind, self.key_rng, self._kip, self._kfp, 0, keys)
        if w.hashed:
            g.fnvhash64_inplace(keys)
        if w.mix["scan"] > 0:
            # one length per op, drawn whatever the op, so a stream's lengths do not depend on the mix
            lengths = np.empty(n, np.int64)
            g.draw_batch(g.K_UNIFORM, self._scan_rng, self._sip, self._ufp, 0, lengths)
            is_scan = ops == OP_SCAN
            scans[is_scan] = lengths[is_scan]
        self._counts += np.bincount(ops, minlength=6)[:6]
        n_ins = int(np.count_nonzero(ops == OP_INSERT))
        claim = self.inserts.next
        for _ in range(n_ins):
            claim()
        self._claims += n_ins
        self._batches += 1
        return ops, keys, scans

    def interarrivals_ns(self, n: int, rate_per_s: float | None = None) -> np.ndarray:
        """``n`` exponential gaps (float64 ns) at ``rate_per_s`` (default: the workload's
        ``target``), from a random stream of their own so that arrivals do not change the ops."""
        return g.arrival_gaps(self._arrival_rng, n, self.workload.target if rate_per_s is None else rate_per_s)

    def statistics(self) -> StressStreamStats:
        c = self._counts.tolist()
        return StressStreamStats(sum(c), c[OP_READ], c[OP_INSERT], c[OP_UPDATE], c[OP_DELETE], self._batches,
                                 self._claims, c[OP_SCAN])
