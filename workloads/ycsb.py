"""YCSB's CoreWorkload for dmrack: validated properties in, operation batches out.

``CoreWorkload`` is built from a preset (YCSB's workloads A-F), a YCSB workload file or a dict
of properties, always through one validation pass: every property has a type and a range, and an
error names the file and line (or "overrides", or the dict's source), the property and the value.
Unknown names are refused with the closest known name suggested, because YCSB's habit of
silently ignoring a misspelt ``requestdistributon`` makes a benchmark measure something else than
its author thinks. YCSB properties that mean nothing to a key-value emulator (``table``,
``exporter``, ``threadcount``, ...) are accepted and ignored so that YCSB's own files load.

``stream(seed, stream_id, inserts)`` returns an ``OpStream`` whose ``next_batch(n)`` produces
operations, key ids and scan lengths with the semantics of YCSB's ``CoreWorkload.doTransaction``:
the operation is drawn from the normalised proportions, the record from the request
distribution and redrawn until it is one the insert sequence has acknowledged
(``nextKeynum``), inserts take the next record number from the insert sequence, and record
numbers become key ids through fnvhash64 unless ``insertorder=ordered`` (``buildKeyName``), or,
with dmrack's ``keyspace = K``, through a pseudo-random bijection onto 1..K. The
whole batch except the insert claims is one numba kernel (``generators.stream_batch``), so a
client spends its time in the emulated system, not in choosing keys.

The insert sequence is the one piece shared between clients: YCSB's
``AcknowledgedCounterGenerator``, reduced to the protocol ``InsertSequence`` (next, acknowledged,
acknowledge) so that a rack can implement it over shared memory. ``LocalInsertSequence`` is the
one-process version. Batches read ``acknowledged()`` once, when they are generated: keep batches
modest (hundreds to a few thousand operations) so that "latest" sees recent inserts.
"""

from __future__ import annotations

import math
import os
import time
from typing import Mapping, NamedTuple, Protocol, runtime_checkable

import numpy as np

from shm.messages import clip, did_you_mean
from shm.telemetry import OP_INSERT, OP_READ, OP_RMW, OP_SCAN, OP_UPDATE, YCSB_OPS
from workloads import generators as g
from workloads.generators import fnvhash64, interarrival_ns, rng_state
from workloads.keys import decode_value, key_bytes, value_bytes
from workloads.properties import (
    DEFAULTS, DMRACK_PRESETS, IGNORED, IGNORED_PREFIXES, PRESET_TITLES, PRESETS, YCSB_LETTERS, Properties,
    WorkloadError, load_properties,
)

__all__ = [
    "OP_READ", "OP_UPDATE", "OP_INSERT", "OP_SCAN", "OP_RMW", "OP_NAMES", "CoreWorkload", "OpStream",
    "OpStreamStats", "Proportions", "InsertSequence", "LocalInsertSequence", "WorkloadError", "key_bytes",
    "value_bytes", "decode_value", "fnvhash64", "interarrival_ns", "rng_state", "benchmark",
]

OP_NAMES = YCSB_OPS                 # CoreWorkload's operations by code (shm/telemetry.py declares them)
# Salt of the arrival-time stream next to a stream's operations (any constant != 0).
_ARRIVAL_SALT = 0xA7721BA1


# --- the insert sequence ------------------------------------------------------------------------

@runtime_checkable
class InsertSequence(Protocol):
    """Record numbers for inserts, shared by every client of a run (YCSB's
    ``transactioninsertkeysequence``). Three calls:

    * ``next() -> int``: claim the next record number to insert (starts at ``recordcount``);
    * ``acknowledged() -> int``: how many records may be read: key choice only returns record
      numbers ``< acknowledged()``;
    * ``acknowledge(n=1)``: ``n`` claimed inserts have completed.

    YCSB tracks which numbers were acknowledged (a window of 2**20); counting completions, as
    here, is the same as long as inserts complete roughly in claim order, which they do when
    clients insert one record at a time. ``acknowledge`` takes a count, not a record number."""

    def next(self) -> int: ...

    def acknowledged(self) -> int: ...

    def acknowledge(self, n: int = 1) -> None: ...


class LocalInsertSequence:
    """The ``InsertSequence`` of one process (plain Python)."""

    def __init__(self, start: int):
        self._next = int(start)
        self._acked = int(start)

    def next(self) -> int:
        v = self._next
        self._next += 1
        return v

    def acknowledged(self) -> int:
        return self._acked

    def acknowledge(self, n: int = 1) -> None:
        if n < 0 or self._acked + n > self._next:
            raise ValueError(f"acknowledge({n}): only {self._next - self._acked} claimed inserts are unacknowledged "
                             f"(acknowledge takes a count of completed inserts, not a key)")
        self._acked += n


# --- properties ---------------------------------------------------------------------------------

DISTRIBUTIONS = ("uniform", "zipfian", "latest", "hotspot", "sequential", "exponential")
_PROPORTIONS = ("readproportion", "updateproportion", "insertproportion", "scanproportion",
                "readmodifywriteproportion")

# name -> (type, lower bound, upper bound, choices). Bounds are inclusive unless noted in
# _validate; None means unbounded.
_SPECS: dict[str, tuple] = {
    "recordcount": ("int", 1, None),
    "operationcount": ("int", 0, None),
    "insertstart": ("int", 0, None),
    "insertcount": ("int", 1, None),
    "readproportion": ("float", 0.0, None),
    "updateproportion": ("float", 0.0, None),
    "insertproportion": ("float", 0.0, None),
    "scanproportion": ("float", 0.0, None),
    "readmodifywriteproportion": ("float", 0.0, None),
    "requestdistribution": ("choice", DISTRIBUTIONS),
    "zipfianconstant": ("float", None, None),
    "zipfianitems": ("int", 2, None),
    "minscanlength": ("int", 1, None),
    "maxscanlength": ("int", 1, None),
    "scanlengthdistribution": ("choice", ("uniform", "zipfian")),
    "insertorder": ("choice", ("hashed", "ordered")),
    "hotspotdatafraction": ("float", 0.0, 1.0),
    "hotspotopnfraction": ("float", 0.0, 1.0),
    "exponential.percentile": ("float", None, None),
    "exponential.frac": ("float", None, None),
    "fieldcount": ("int", 1, None),
    "fieldlength": ("int", 1, None),
    "minfieldlength": ("int", 1, None),
    "fieldlengthdistribution": ("choice", ("constant", "uniform", "zipfian")),
    "readallfields": ("bool",),
    "writeallfields": ("bool",),
    "keysize": ("int", 8, 1 << 20),
    "keyspace": ("int", 1, g.KEYSPACE_MAX),
    "keyorder": ("choice", ("little", "big")),
    "loadorder": ("choice", ("hashed", "ordered")),
    "valuesize": ("int", 1, 1 << 30),
    "target": ("float", 0.0, None),
    "thinktime": ("float", 0.0, None),
    "thinkmode": ("choice", ("sleep", "spin")),
}
KNOWN = frozenset(_SPECS)


#: How far the operation proportions may sum from 1 (rounding in hand-written decimals: 0.333 x 3).
#: Past it a mix is refused, not normalised: see the proportions check in CoreWorkload._validate.
PROPORTION_SUM_TOLERANCE = 1e-3


def _fail(where: str, name: str, value, problem: str):
    raise WorkloadError(f"{where}: property {clip(name)!r} = {clip(repr(value))}: {problem}")


def _as_int(value) -> int | None:
    """An int from an int, an integral float or a string of either ("1000", "1e6"); else None."""
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, str):
        try:
            return int(value.strip(), 10)
        except ValueError:
            pass
    try:
        f = float(value)
    except (TypeError, ValueError):
        return None
    return int(f) if math.isfinite(f) and f.is_integer() else None


def _convert(name: str, value, where: str):
    spec = _SPECS[name]
    kind = spec[0]
    if kind == "bool":
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lower() in ("true", "false"):
            return value.strip().lower() == "true"
        _fail(where, name, value, "must be true or false")
    if kind == "choice":
        if isinstance(value, str) and value.strip().lower() in spec[1]:
            return value.strip().lower()
        if name == "fieldlengthdistribution" and isinstance(value, str) and value.strip().lower() == "histogram":
            _fail(where, name, value, "the histogram distribution is not supported by dmrack; "
                                      "choose constant, uniform or zipfian")
        _fail(where, name, value, f"must be one of {', '.join(spec[1])}")
    if isinstance(value, bool):
        _fail(where, name, value, f"must be {'an integer' if kind == 'int' else 'a number'}, not a boolean")
    if kind == "int":
        v = _as_int(value)
        if v is None:
            _fail(where, name, value, "must be an integer")
    else:
        try:
            v = float(value.strip() if isinstance(value, str) else value)
        except (TypeError, ValueError):
            _fail(where, name, value, "must be a number")
        if not math.isfinite(v):
            _fail(where, name, value, "must be a finite number")
    lo, hi = spec[1], spec[2]
    if lo is not None and v < lo:
        _fail(where, name, value, f"must be >= {lo}")
    if hi is not None and v > hi:
        _fail(where, name, value, f"must be <= {hi}")
    return v


def _unknown(name: str, where: str):
    pool = sorted(KNOWN | IGNORED)
    hint = did_you_mean(name.lower(), pool, quote=True) or f"; known properties: {', '.join(sorted(KNOWN))}"
    raise WorkloadError(f"{where}: unknown property {clip(name)!r}{hint}")


def _layer_where(layer: Mapping, source: str, name: str) -> str:
    return layer.where(name) if isinstance(layer, Properties) else source


class Proportions(NamedTuple):
    """Operation mix, normalised to sum 1 (YCSB's DiscreteGenerator normalises the weights)."""
    read: float
    update: float
    insert: float
    scan: float
    rmw: float


class OpStreamStats(NamedTuple):
    ops: int
    reads: int
    updates: int
    inserts: int
    scans: int
    rmws: int
    key_retries: int    # key draws redrawn for not being acknowledged yet (YCSB's nextKeynum loop)
    batches: int


# --- the workload -------------------------------------------------------------------------------

class CoreWorkload:
    """A validated YCSB CoreWorkload (see the module docstring). Build it with ``preset``,
    ``from_file`` or ``from_properties``."""

    def __init__(self, layers: list[tuple[Mapping, str]], name: str):
        merged: dict[str, tuple[object, str]] = {}
        for layer, source in layers:
            for key, value in layer.items():
                if not isinstance(key, str):
                    raise WorkloadError(f"{source}: property names must be strings, got {key!r}")
                name_ = key.strip()
                where = _layer_where(layer, source, key)
                if name_ in KNOWN:
                    merged[name_] = (value, where)
                elif name_ in IGNORED or name_.startswith(IGNORED_PREFIXES):
                    continue
                else:
                    _unknown(name_, where)
        self.name = name
        self.source = ", ".join(dict.fromkeys(src for _, src in layers))
        self._where = {k: w for k, (_, w) in merged.items()}
        values: dict[str, object] = {}
        for prop in _SPECS:
            if prop in merged:
                values[prop] = _convert(prop, merged[prop][0], merged[prop][1])
            elif prop in DEFAULTS:
                values[prop] = _convert(prop, DEFAULTS[prop], "YCSB default")
        self._validate(values)

    def _w(self, name: str) -> str:
        return self._where.get(name, "default")

    def _validate(self, v: dict[str, object]) -> None:
        self.recordcount = int(v["recordcount"])
        self.operationcount = int(v["operationcount"])
        self.insert_start = int(v["insertstart"])
        if "insertcount" in v:
            self.insert_count = int(v["insertcount"])
        else:
            self.insert_count = self.recordcount - self.insert_start
            if self.insert_count < 1:
                _fail(self._w("insertstart"), "insertstart", self.insert_start,
                      f"must be below recordcount ({self.recordcount})")
        if self.insert_start + self.insert_count > self.recordcount:
            where = self._w("insertcount") if "insertcount" in v else self._w("insertstart")
            raise WorkloadError(f"{where}: insertstart ({self.insert_start}) + insertcount ({self.insert_count}) "
                                f"must not exceed recordcount ({self.recordcount})")

        raw = [float(v[p]) for p in _PROPORTIONS]
        total = sum(raw)
        if total <= 0:
            wheres = sorted({self._w(p) for p in _PROPORTIONS})
            raise WorkloadError(f"{', '.join(wheres)}: the operation proportions ({', '.join(_PROPORTIONS)}) "
                                f"are all 0; at least one must be > 0")
        if abs(total - 1.0) > PROPORTION_SUM_TOLERANCE:
            # YCSB's DiscreteGenerator.nextValue divides each weight by their sum, so 0.9 reads over
            # workload A's 0.5 updates silently runs 64 % reads. Refused instead (docs/workloads.md).
            given = [p for p in _PROPORTIONS if float(v[p]) > 0]
            wheres = sorted({self._w(p) for p in given})
            scaled = ", ".join(f"{100 * float(v[p]) / total:.3g} % {p[:-len('proportion')]}" for p in given)
            raise WorkloadError(f"{', '.join(wheres)}: the operation proportions "
                                f"({', '.join(f'{p} = {float(v[p]):g}' for p in given)}) sum to {total:g}, "
                                f"not 1; set them to sum to 1 (YCSB would scale them silently to {scaled})")
        self.raw_proportions = Proportions(*raw)
        self.proportions = Proportions(*(p / total for p in raw))

        self.distribution = str(v["requestdistribution"])
        self.zipfian_constant = float(v["zipfianconstant"])
        if not 0.0 < self.zipfian_constant < 1.0:
            _fail(self._w("zipfianconstant"), "zipfianconstant", self.zipfian_constant,
                  "must be in (0, 1) (YCSB's zipfian generator, after Gray et al., needs 0 < theta < 1)")
        self.zipfian_items = int(v["zipfianitems"])
        self.min_scan_length = int(v["minscanlength"])
        self.max_scan_length = int(v["maxscanlength"])
        if self.max_scan_length < self.min_scan_length:
            _fail(self._w("maxscanlength"), "maxscanlength", self.max_scan_length,
                  f"must be >= minscanlength ({self.min_scan_length})")
        self.scan_length_distribution = str(v["scanlengthdistribution"])
        self.insert_order = str(v["insertorder"])
        self.hashed = self.insert_order == "hashed"
        self.hotspot_data_fraction = float(v["hotspotdatafraction"])
        self.hotspot_opn_fraction = float(v["hotspotopnfraction"])
        self.exponential_percentile = float(v["exponential.percentile"])
        if not 0.0 < self.exponential_percentile < 100.0:
            _fail(self._w("exponential.percentile"), "exponential.percentile", self.exponential_percentile,
                  "must be in (0, 100)")
        self.exponential_frac = float(v["exponential.frac"])
        if not self.exponential_frac > 0.0:
            _fail(self._w("exponential.frac"), "exponential.frac", self.exponential_frac, "must be > 0")

        self.field_count = int(v["fieldcount"])
        self.field_length = int(v["fieldlength"])
        self.min_field_length = int(v["minfieldlength"])
        self.field_length_distribution = str(v["fieldlengthdistribution"])
        if self.field_length_distribution != "constant" and self.min_field_length > self.field_length:
            _fail(self._w("minfieldlength"), "minfieldlength", self.min_field_length,
                  f"must be <= fieldlength ({self.field_length})")
        self.read_all_fields = bool(v["readallfields"])
        self.write_all_fields = bool(v["writeallfields"])
        self.key_size = int(v["keysize"])
        # dmrack's dense key spaces: ids 1..keyspace (generators.key_map_params), and the byte order
        # of a key's 8 bytes (big: byte order = numeric order, as in Sherman's and Dolphin's keys)
        self.keyspace = int(v["keyspace"]) if "keyspace" in v else None
        self.key_order = str(v["keyorder"])
        if self.keyspace is not None and self.recordcount > self.keyspace:
            _fail(self._w("keyspace"), "keyspace", self.keyspace,
                  f"must be >= recordcount ({self.recordcount}): the loaded records need distinct key ids "
                  f"in 1..keyspace")
        # loadorder = ordered: the load fills ids 1..recordcount in order (Dolphin's benchmark), and
        # inserts take the rest of the key space at pseudo-random places
        self.load_order = str(v["loadorder"])
        if self.load_order == "ordered" and (self.keyspace is None or not self.hashed):
            _fail(self._w("loadorder"), "loadorder", self.load_order,
                  "needs a keyspace and insertorder = hashed (the inserts' ids are the ones it permutes)")
        self._kp = g.key_map_params(self.hashed, self.keyspace,
                                    self.recordcount if self.load_order == "ordered" else 0)
        self.value_size = int(v["valuesize"]) if "valuesize" in v else self.field_count * self.field_length
        if self.value_size > 1 << 30:
            _fail(self._w("fieldlength"), "fieldlength", self.field_length,
                  f"fieldcount*fieldlength = {self.value_size} bytes is too large for a value; set valuesize")
        self.target = float(v["target"])
        # closed loop: a coroutine waits thinktime µs after each operation (SMART's IDLE_USEC),
        # its thread free meanwhile; the operation's latency does not include it
        self.thinktime_us = float(v["thinktime"])
        if self.thinktime_us > 0 and self.target > 0:
            _fail(self._w("thinktime"), "thinktime", self.thinktime_us,
                  f"a think time is for the closed loop; with target = {self.target:g} ops/s operations arrive "
                  f"at that rate instead (set one of them)")
        # sleep: the coroutine leaves its thread's run queue while it thinks; spin: it stays there,
        # reading the clock and yielding (SMART's IdleExecution), so its thread's other coroutines
        # resume later after their completions (shm/coro.py, RdmaThread.spin_idle)
        self.thinkmode = v["thinkmode"]
        self.properties = dict(v)

        # CoreWorkload.init: the zipfian key space covers the records plus twice the inserts that
        # operationcount*insertproportion predicts, so that inserts do not reshuffle popularity.
        self.expected_new_keys = int(self.operationcount * self.raw_proportions.insert * 2.0)

        if self.distribution == "hotspot":
            try:
                g.hotspot_intervals(self.insert_start, self.insert_start + self.insert_count - 1,
                                    self.hotspot_data_fraction, self.hotspot_opn_fraction)
            except ValueError as e:
                raise WorkloadError(f"{self._w('hotspotdatafraction')}: property 'hotspotdatafraction' = "
                                    f"{self.hotspot_data_fraction!r}: {e}") from None
        if self.distribution == "latest" and self.recordcount < 2:
            _fail(self._w("recordcount"), "recordcount", self.recordcount,
                  "requestdistribution=latest needs at least 2 records (YCSB's latest generator skews over "
                  "recordcount-1 items)")
        self._key_template = self._key_generator()
        self._scan_template = self._scan_generator()

    # -- constructors ----------------------------------------------------------------------------
    @classmethod
    def preset(cls, name: str, overrides: Mapping | None = None, source: str = "preset") -> "CoreWorkload":
        """YCSB's core workload ``name`` ("a".."f", any case), or one of dmrack's presets
        ("load", "range-only", "range-write"), with ``overrides`` winning."""
        key = str(name).strip().lower()
        if key.startswith("workload"):
            key = key[len("workload"):]
        if key not in PRESETS:
            raise WorkloadError(f"{source}: unknown YCSB core workload {clip(name)!r}; choose one of "
                                f"{', '.join(YCSB_LETTERS)} or {', '.join(DMRACK_PRESETS)}")
        layers: list[tuple[Mapping, str]] = [(PRESETS[key], f"{source} {key}")]
        if overrides:
            layers.append((overrides, "overrides"))
        return cls(layers, f"YCSB-{key.upper()}")

    @classmethod
    def from_file(cls, path: str | os.PathLike, overrides: Mapping | None = None) -> "CoreWorkload":
        """A YCSB workload file (e.g. YCSB's own ``workloads/workloada``), ``overrides`` winning."""
        props = load_properties(path)
        layers: list[tuple[Mapping, str]] = [(props, props.source)]
        if overrides:
            layers.append((overrides, "overrides"))
        return cls(layers, os.path.basename(os.fspath(path)))

    @classmethod
    def from_properties(cls, props: Mapping, source: str | None = None,
                        overrides: Mapping | None = None) -> "CoreWorkload":
        """A dict of properties (strings, as in a file, or ints/floats/bools, as TOML gives)."""
        src = source or getattr(props, "source", None) or "<properties>"
        layers: list[tuple[Mapping, str]] = [(props, src)]
        if overrides:
            layers.append((overrides, "overrides"))
        return cls(layers, src)

    # -- what it is ------------------------------------------------------------------------------
    @property
    def title(self) -> str:
        """YCSB's title of a preset (e.g. "Update heavy workload"), else ''."""
        return PRESET_TITLES.get(self.name[5:].lower(), "") if self.name.startswith("YCSB-") else ""

    def describe(self) -> str:
        """One line, e.g. "YCSB-A: 50% read 50% update, zipfian 0.99, 1000 records, 8 B keys, 1000 B values"."""
        mix = " ".join(f"{p * 100:.4g}% {n}" for p, n in zip(self.proportions, OP_NAMES) if p > 0)
        d = self.distribution
        if d == "zipfian":
            dist = f"zipfian {self.zipfian_constant:g}"
        elif d == "hotspot":
            dist = (f"hotspot {self.hotspot_opn_fraction * 100:.4g}% of ops on "
                    f"{self.hotspot_data_fraction * 100:.4g}% of records")
        elif d == "exponential":
            dist = f"exponential {self.exponential_percentile:g}% on last {self.exponential_frac:g} of records"
        else:
            dist = d
        parts = [mix, dist]
        if self.proportions.scan > 0:
            parts.append(f"scans {self.min_scan_length}-{self.max_scan_length} {self.scan_length_distribution}")
        parts += [f"{self.recordcount} records", f"{self.key_size} B keys", f"{self.value_size} B values"]
        if self.target > 0:
            parts.append(f"open loop {self.target:g} ops/s")
        if self.thinktime_us > 0:
            parts.append(f"{self.thinktime_us:g} µs think time after each operation"
                         + (" (spinning)" if self.thinkmode == "spin" else ""))
        return f"{self.name}: {', '.join(parts)}"

    def __repr__(self) -> str:
        return f"<CoreWorkload {self.describe()}>"

    # Open-loop clients: one exponential gap (ns) at ``rate_per_s`` from an ``rng_state``.
    interarrival_ns = staticmethod(interarrival_ns)

    # -- keys and values -------------------------------------------------------------------------
    def key_id(self, keynum: int) -> int:
        """The key id of record number ``keynum`` (YCSB's buildKeyName without the "user"); with
        ``keyspace``, its place in 1..keyspace (``generators.map_keynum``)."""
        return int(g.map_keynum(int(keynum), self._kp))

    def load_keys(self, start: int, count: int) -> np.ndarray:
        """Key ids of records ``start .. start+count-1`` (absolute record numbers), for splitting
        the load phase among clients; YCSB's load inserts records insertstart..+insertcount-1."""
        if start < 0 or count < 0:
            raise ValueError(f"load_keys needs start >= 0 and count >= 0, got start={start} count={count}")
        if self.keyspace is not None and start + count > self.keyspace:
            raise WorkloadError(f"{self.name}: loading records {start}..{start + count - 1} needs more than "
                                f"keyspace = {self.keyspace} key ids; raise keyspace or load fewer keys")
        return g.load_keys(start, count, self.hashed, self._kp)

    def key_bytes(self, key_id: int) -> bytes:
        return key_bytes(key_id, self.key_size, self.key_order)

    def value_bytes(self, key_id: int, version: int) -> bytes:
        return value_bytes(key_id, version, self.value_size)

    def field_lengths(self, seed: int = 0, stream_id: int = 0) -> g.NumberGenerator:
        """YCSB's field length generator (fieldlengthdistribution over [minfieldlength,
        fieldlength]), for systems that model variable-size fields; dmrack's values are
        ``value_size`` bytes."""
        return g.number_generator(self.field_length_distribution, self.min_field_length, self.field_length,
                                  seed, stream_id)

    # -- generators ------------------------------------------------------------------------------
    def _key_generator(self) -> tuple[int, np.ndarray, np.ndarray]:
        lo, count = self.insert_start, self.insert_count
        d = self.distribution
        if d == "uniform":
            return g.K_UNIFORM, np.array([lo, count], np.int64), np.zeros(1)
        if d == "zipfian":
            theta, items = self.zipfian_constant, self.zipfian_items
            zetan = g.SCRAMBLED_ZETAN if theta == g.ZIPFIAN_CONSTANT and items == g.SCRAMBLED_ITEM_COUNT else None
            zp = g.zipfian_params(0, items, theta, zetan)
            # ScrambledZipfianGenerator(insertstart, insertstart + insertcount + expectednewkeys)
            return g.K_SCRAMBLED, np.array([lo, count + self.expected_new_keys + 1], np.int64), zp
        if d == "latest":
            # SkewedLatestGenerator(basis) builds ZipfianGenerator(basis.lastValue()), and the basis
            # starts at recordcount - 1.
            return g.K_LATEST, np.zeros(1, np.int64), g.zipfian_params(0, self.recordcount - 2)
        if d == "hotspot":
            hot, cold = g.hotspot_intervals(lo, lo + count - 1, self.hotspot_data_fraction, self.hotspot_opn_fraction)
            return g.K_HOTSPOT, np.array([lo, hot, cold], np.int64), np.array([self.hotspot_opn_fraction])
        if d == "sequential":
            return g.K_SEQUENTIAL, np.array([lo, count, 0], np.int64), np.zeros(1)
        gamma = g.exponential_gamma(self.exponential_percentile, self.recordcount * self.exponential_frac)
        return g.K_EXPONENTIAL, np.zeros(1, np.int64), np.array([gamma])

    def _scan_generator(self) -> tuple[int, np.ndarray, np.ndarray]:
        lo, hi = self.min_scan_length, self.max_scan_length
        if self.scan_length_distribution == "zipfian":
            return g.K_ZIPFIAN, np.array([hi - lo + 1], np.int64), g.zipfian_params(lo, hi)
        return g.K_UNIFORM, np.array([lo, hi - lo + 1], np.int64), np.zeros(1)

    def stream(self, seed: int, stream_id: int = 0, inserts: InsertSequence | None = None) -> "OpStream":
        """The operation stream of one client: deterministic for (seed, stream_id) and a given
        insert sequence; streams of different ids are independent. Without ``inserts``, a
        ``LocalInsertSequence(recordcount)`` private to the stream is used."""
        return OpStream(self, seed, stream_id, inserts if inserts is not None else LocalInsertSequence(self.recordcount))


class OpStream:
    """A client's YCSB operations, made in batches (see ``CoreWorkload.stream``)."""

    def __init__(self, workload: CoreWorkload, seed: int, stream_id: int, inserts: InsertSequence):
        self.workload = workload
        self.seed = seed
        self.stream_id = stream_id
        self.inserts = inserts
        self.rng = rng_state(seed, stream_id)
        self._arrival_rng = rng_state(seed, stream_id, _ARRIVAL_SALT)
        kind, ip, fp = workload._key_template
        self._kkind, self._kip, self._kfp = kind, ip.copy(), fp.copy()   # latest/sequential mutate theirs
        kind, ip, fp = workload._scan_template
        self._skind, self._sip, self._sfp = kind, ip.copy(), fp.copy()
        present = [(code, p) for code, p in enumerate(workload.proportions) if p > 0]
        self._op_codes = np.array([c for c, _ in present], np.int8)
        self._op_weights = np.array([p for _, p in present], np.float64)
        self._counts = np.zeros(6, np.int64)
        self._batches = 0

    def next_batch(self, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(ops int8[n], keys int64[n], scan_lengths int32[n])``: operation codes (OP_*), key ids
        (hashed as for the load phase) and scan lengths (0 except for scans)."""
        n = int(n)
        ops = np.empty(n, np.int8)
        keys = np.empty(n, np.int64)
        scans = np.empty(n, np.int32)
        if n <= 0:
            return ops, keys, scans
        limit = int(self.inserts.acknowledged()) - 1   # YCSB's transactioninsertkeysequence.lastValue()
        if limit < (1 if self._kkind == g.K_LATEST else 0):
            raise WorkloadError(f"{self.workload.name}: the insert sequence acknowledges {limit + 1} records; "
                                f"there is no record to choose a key from")
        inserts_before = int(self._counts[OP_INSERT])
        done = g.stream_batch(self.rng, self._op_codes, self._op_weights, self._kkind, self._kip, self._kfp,
                              self._skind, self._sip, self._sfp, limit, ops, keys, scans, self._counts)
        if done < 0:
            raise WorkloadError(f"{self.workload.name}: no record at or below {limit} could be drawn from "
                                f"requestdistribution={self.workload.distribution} (insertstart="
                                f"{self.workload.insert_start}); is the insert sequence started at recordcount?")
        if self._counts[OP_INSERT] != inserts_before:
            claim = self.inserts.next
            for i in np.flatnonzero(ops == OP_INSERT).tolist():
                keys[i] = claim()
        g.map_keynums_inplace(keys, self.workload._kp)
        self._batches += 1
        return ops, keys, scans

    def interarrivals_ns(self, n: int, rate_per_s: float | None = None) -> np.ndarray:
        """``n`` exponential gaps (float64 ns) of an open-loop client at ``rate_per_s`` (default:
        the workload's ``target``), from a random stream of their own, so that arrival times do
        not change which operations are drawn."""
        return g.arrival_gaps(self._arrival_rng, n, self.workload.target if rate_per_s is None else rate_per_s)

    def statistics(self) -> OpStreamStats:
        c = self._counts.tolist()
        return OpStreamStats(sum(c[:5]), c[OP_READ], c[OP_UPDATE], c[OP_INSERT], c[OP_SCAN], c[OP_RMW],
                             c[g.COUNT_RETRIES], self._batches)


# --- speed --------------------------------------------------------------------------------------

class BenchRow(NamedTuple):
    what: str
    keys: int
    seconds: float
    mkeys_per_s: float


def benchmark(n: int = 4_000_000, batch: int = 4096, recordcount: int = 1_000_000) -> list[BenchRow]:
    """Generation speed on this core: raw generator batches and YCSB A-F operation streams."""
    rows = []

    def run(what, fn, total):
        fn(min(total, 10_000))  # compile / warm up
        t0 = time.perf_counter()
        fn(total)
        dt = time.perf_counter() - t0
        rows.append(BenchRow(what, total, dt, total / dt / 1e6))

    gens = {
        "uniform": g.UniformLongGenerator(0, recordcount - 1, seed=1),
        "zipfian": g.ZipfianGenerator(0, recordcount - 1, seed=1),
        "scrambled zipfian": g.ScrambledZipfianGenerator(0, recordcount - 1, seed=1),
        "hotspot": g.HotspotIntegerGenerator(0, recordcount - 1, 0.2, 0.8, seed=1),
        "latest": g.SkewedLatestGenerator(g.CounterGenerator(recordcount), seed=1),
    }
    for name, gen in gens.items():
        run(f"generator {name}", gen.next_batch, n)
    for w in "abcdef":
        wl = CoreWorkload.preset(w, {"recordcount": recordcount, "operationcount": n})
        stream = wl.stream(1, 0)

        def drive(total, stream=stream):
            for _ in range(0, total, batch):
                stream.next_batch(batch)
        run(f"stream {wl.name} ({batch}/batch)", drive, n)
    return rows


if __name__ == "__main__":
    import sys
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 4_000_000
    print(f"{'what':<32} {'keys':>10} {'s':>7} {'Mkeys/s':>8}")
    for r in benchmark(n):
        print(f"{r.what:<32} {r.keys:>10} {r.seconds:>7.3f} {r.mkeys_per_s:>8.1f}")
