"""YCSB workload property files, YCSB's defaults and the core workloads A-F.

A YCSB workload is a Java properties file (``recordcount=1000``, ``# comment``). dmrack reads the
files YCSB ships unchanged, so the parser follows ``java.util.Properties.load`` closely enough for
them and for hand-written ones: ``#`` and ``!`` comments, blank lines, ``key=value``,
``key:value`` and ``key value``, whitespace trimmed around keys and values, a trailing backslash
continuing a line, and the usual escapes. Where Java would quietly accept a line that is surely a
mistake (a bare word with no value) we raise instead, naming the file and line, because a silently
ignored typo changes what a benchmark measures.

The parsed dict remembers the line each property came from (``Properties.lines``), so that
validation in ``workloads.ycsb`` can name ``file:line`` when a value is wrong.

The presets are YCSB's ``workloads/workloada`` .. ``workloadf`` key for key, plus dmrack's
``load``, ``range-only`` and ``range-write`` (Dolphin's workloads), and ``DEFAULTS`` are
the defaults of YCSB's ``CoreWorkload`` (and of its ``Client`` for the counts); see
docs/workloads.md for the table and for the dmrack extensions.
"""

from __future__ import annotations

import os

__all__ = ["WorkloadError", "Properties", "parse_properties", "load_properties", "PRESETS", "PRESET_TITLES",
           "YCSB_LETTERS", "DMRACK_PRESETS",
           "DEFAULTS", "IGNORED", "IGNORED_PREFIXES", "EXTENSIONS"]


class WorkloadError(ValueError):
    """A workload file or property is wrong; the message names where (``source:line``) and what."""


class Properties(dict):
    """``dict[str, str]`` of properties plus where they came from: ``source`` and ``lines``
    (property name -> 1-based line of its last definition)."""

    def __init__(self, source: str = "<properties>"):
        super().__init__()
        self.source = source
        self.lines: dict[str, int] = {}

    def where(self, name: str) -> str:
        line = self.lines.get(name)
        return f"{self.source}:{line}" if line else self.source


_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def _unescape(text: str, where: str) -> str:
    out = []
    i = 0
    while i < len(text):
        c = text[i]
        if c != "\\" or i + 1 >= len(text):
            out.append(c)
            i += 1
            continue
        e = text[i + 1]
        if e == "u":
            digits = text[i + 2:i + 6]
            if len(digits) != 4 or any(d not in "0123456789abcdefABCDEF" for d in digits):
                raise WorkloadError(f"{where}: malformed \\uXXXX escape {text[i:i + 6]!r}")
            out.append(chr(int(digits, 16)))
            i += 6
        else:
            out.append(_ESCAPES.get(e, e))
            i += 2
    return "".join(out)


def _split(logical: str) -> tuple[str, str] | None:
    """Split a logical line into key and raw value at the first unescaped ``=``, ``:`` or
    whitespace (Java's rule); None when there is no separator at all."""
    i = 0
    n = len(logical)
    while i < n:
        c = logical[i]
        if c == "\\":
            i += 2
            continue
        if c in "=:" or c in " \t\f":
            break
        i += 1
    if i >= n:
        return None
    key = logical[:i]
    sep = logical[i]
    rest = logical[i + 1:].lstrip(" \t\f")
    if sep in " \t\f" and rest[:1] in ("=", ":"):
        rest = rest[1:].lstrip(" \t\f")
    return key, rest


def parse_properties(text: str, source: str = "<properties>") -> Properties:
    """Parse the text of a properties file; ``source`` names it in errors."""
    props = Properties(source)
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        start = i + 1
        line = lines[i].lstrip(" \t\f")
        i += 1
        if not line or line[0] in "#!":
            continue
        # An odd number of trailing backslashes continues the logical line on the next one.
        while (len(line) - len(line.rstrip("\\"))) % 2 == 1:
            line = line[:-1]
            if i >= len(lines):
                break
            line += lines[i].lstrip(" \t\f")
            i += 1
        where = f"{source}:{start}"
        split = _split(line.rstrip(" \t\f"))
        if split is None:
            raise WorkloadError(f"{where}: expected 'name=value', got {line.strip()!r}")
        key = _unescape(split[0], where)
        if not key:
            raise WorkloadError(f"{where}: a property needs a name before '=', got {line.strip()!r}")
        props[key] = _unescape(split[1], where)
        props.lines[key] = start
    return props


def load_properties(path: str | os.PathLike) -> Properties:
    """Read a YCSB workload file (``source`` in errors is the path as given)."""
    source = os.fspath(path)
    try:
        with open(path, encoding="latin-1") as f:  # Properties.load reads ISO 8859-1
            text = f.read()
    except OSError as e:
        raise WorkloadError(f"{source}: cannot read workload file: {e.strerror or e}") from None
    return parse_properties(text, source)


# YCSB's workloads/workloada..workloadf, key for key (the values as the files spell them).
PRESETS: dict[str, dict[str, str]] = {
    "a": {"recordcount": "1000", "operationcount": "1000", "workload": "site.ycsb.workloads.CoreWorkload",
          "readallfields": "true",
          "readproportion": "0.5", "updateproportion": "0.5", "scanproportion": "0", "insertproportion": "0",
          "requestdistribution": "zipfian"},
    "b": {"recordcount": "1000", "operationcount": "1000", "workload": "site.ycsb.workloads.CoreWorkload",
          "readallfields": "true",
          "readproportion": "0.95", "updateproportion": "0.05", "scanproportion": "0", "insertproportion": "0",
          "requestdistribution": "zipfian"},
    "c": {"recordcount": "1000", "operationcount": "1000", "workload": "site.ycsb.workloads.CoreWorkload",
          "readallfields": "true",
          "readproportion": "1", "updateproportion": "0", "scanproportion": "0", "insertproportion": "0",
          "requestdistribution": "zipfian"},
    "d": {"recordcount": "1000", "operationcount": "1000", "workload": "site.ycsb.workloads.CoreWorkload",
          "readallfields": "true",
          "readproportion": "0.95", "updateproportion": "0", "scanproportion": "0", "insertproportion": "0.05",
          "requestdistribution": "latest"},
    "e": {"recordcount": "1000", "operationcount": "1000", "workload": "site.ycsb.workloads.CoreWorkload",
          "readallfields": "true",
          "readproportion": "0", "updateproportion": "0", "scanproportion": "0.95", "insertproportion": "0.05",
          "requestdistribution": "zipfian", "maxscanlength": "100", "scanlengthdistribution": "uniform"},
    "f": {"recordcount": "1000", "operationcount": "1000", "workload": "site.ycsb.workloads.CoreWorkload",
          "readallfields": "true",
          "readproportion": "0.5", "updateproportion": "0", "scanproportion": "0", "insertproportion": "0",
          "readmodifywriteproportion": "0.5", "requestdistribution": "zipfian"},
}

# dmrack's own presets (not YCSB files), for the workloads of Dolphin (Xu et al., VLDB'25-style
# ordered-index evaluations, Fig. 7c and Fig. 8): "LOAD" (inserts only), "range-only" (scans of up
# to 100 items) and "range-write" (half scans, half inserts), uniform request distribution, scan
# lengths uniform in 1..100 (YCSB-E's scan shape). Built like YCSB's files (recordcount,
# operationcount, readallfields), so they combine with the same overrides.
_DMRACK_BASE = {"recordcount": "1000", "operationcount": "1000", "workload": "site.ycsb.workloads.CoreWorkload",
                "readallfields": "true", "readproportion": "0", "updateproportion": "0", "scanproportion": "0",
                "insertproportion": "0", "requestdistribution": "uniform"}
_SCANS_UP_TO_100 = {"minscanlength": "1", "maxscanlength": "100", "scanlengthdistribution": "uniform"}
PRESETS["load"] = {**_DMRACK_BASE, "insertproportion": "1"}
PRESETS["range-only"] = {**_DMRACK_BASE, "scanproportion": "1", **_SCANS_UP_TO_100}
PRESETS["range-write"] = {**_DMRACK_BASE, "scanproportion": "0.5", "insertproportion": "0.5", **_SCANS_UP_TO_100}
YCSB_LETTERS = ("a", "b", "c", "d", "e", "f")
DMRACK_PRESETS = ("load", "range-only", "range-write")

PRESET_TITLES = {
    "a": "Update heavy workload", "b": "Read mostly workload", "c": "Read only",
    "d": "Read latest workload", "e": "Short ranges", "f": "Read-modify-write workload",
    "load": "Load (inserts only)", "range-only": "Range only (scans of up to 100 items)",
    "range-write": "Range and write (50% scan, 50% insert)",
}

# YCSB CoreWorkload's defaults. recordcount and operationcount have no usable YCSB default (the
# Client's "0" means 2**31-1 records, or run forever); dmrack uses the 1000 of the shipped files.
DEFAULTS: dict[str, str] = {
    "recordcount": "1000",
    "operationcount": "1000",
    "fieldcount": "10",
    "fieldlength": "100",
    "minfieldlength": "1",
    "fieldlengthdistribution": "constant",
    "readallfields": "true",
    "writeallfields": "false",
    "readproportion": "0.95",
    "updateproportion": "0.05",
    "insertproportion": "0.0",
    "scanproportion": "0.0",
    "readmodifywriteproportion": "0.0",
    "requestdistribution": "uniform",
    "minscanlength": "1",
    "maxscanlength": "1000",
    "scanlengthdistribution": "uniform",
    "insertorder": "hashed",
    "insertstart": "0",
    "hotspotdatafraction": "0.2",
    "hotspotopnfraction": "0.8",
    "exponential.percentile": "95",
    "exponential.frac": "0.8571428571",
    # dmrack extensions (see EXTENSIONS); valuesize's default depends on fieldcount*fieldlength
    "zipfianconstant": "0.99",
    "zipfianitems": "10000000000",          # YCSB's ITEM_COUNT, generators.SCRAMBLED_ITEM_COUNT
    "keysize": "8",
    "keyorder": "little",
    "loadorder": "hashed",
    "target": "0",
    "thinktime": "0",
    "thinkmode": "sleep",
}

# Properties dmrack adds to YCSB's (documented as such in docs/workloads.md). ``zipfianconstant``
# is the name YCSB forks use for the constant upstream YCSB hard-codes to 0.99. (``target`` is
# YCSB's: the client's -target option sets it.) ``zipfianitems`` is how many items the zipfian
# request distribution draws from before hashing them onto the keys: YCSB fixes it at 10^10;
# SMART's benchmark (MICA's zipf, then FNV) draws from its key count, which makes the hottest key
# 1/zeta(10^8) = 4.8 % of requests against YCSB's 3.8 %.
# ``keyspace`` makes key ids dense (a pseudo-random bijection of the record numbers onto 1..K) and
# ``keyorder = big`` writes a key id's 8 bytes big-endian, so that byte order is numeric order:
# Dolphin's leaves cover the keys that share their first 7 bytes, and its benchmark (like
# Sherman's) loads integer keys into half of a key space [1, K].
# ``loadorder = ordered`` loads the record numbers below recordcount as the ids 1..recordcount in
# order (Dolphin's own benchmark: keys 1..N, the lower half of the key space full) and lets inserts
# take the other ids at pseudo-random places. ``thinktime`` (µs) makes a closed-loop client
# coroutine wait after each operation (SMART's benchmarks' IDLE_USEC, its Figs. 9 and 11);
# ``thinkmode`` is how it waits: ``sleep`` (its thread free for the others) or ``spin`` (SMART's
# IdleExecution: it stays in its thread's run queue, reading the clock and yielding).
EXTENSIONS = ("keysize", "valuesize", "zipfianconstant", "zipfianitems", "keyspace", "keyorder", "loadorder",
              "thinktime", "thinkmode")

# YCSB properties that mean nothing to a key-value emulator: accepted and ignored, so that YCSB's
# own files and templates load unchanged.
IGNORED = frozenset({
    "workload", "db", "table", "exporter", "exportfile", "measurementtype", "measurement.interval",
    "measurement.raw.output_file", "measurement.histogram.verbose", "measurement.trackjvm",
    "histogram.buckets", "timeseries.granularity", "hdrhistogram.percentiles", "hdrhistogram.fileoutput",
    "hdrhistogram.output.path", "reportlatencyforeacherror", "latencytrackederrors", "threadcount",
    "maxexecutiontime", "status.interval", "dotransactions", "columnfamily", "fieldnameprefix", "zeropadding",
    "dataintegrity", "core_workload_insertion_retry_limit", "core_workload_insertion_retry_interval",
    "fieldlengthhistogram", "debug", "sleepafterload", "insertionretrylimit",
})
IGNORED_PREFIXES = ("htrace.",)
