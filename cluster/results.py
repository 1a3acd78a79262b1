"""End-of-run results: per step, per node and rack-wide figures, a summary table, JSON and CSV.

The figures come from the stats plane after the run (``Results.from_plane``) and are computed
once, into immutable records, so the table, the JSON document and the CSV file can never
disagree: all three are produced from :meth:`Results.records` (JSON also keeps the nested
per-step view).

Definitions (why they are what they are):

* A step's virtual span is rack-wide: from the earliest ``vstart`` to the latest ``vend`` among
  the nodes that recorded it (a node still running contributes its last published virtual time).
  Throughput is *modelled*: operations over that span, in Mops per virtual second. Node rows use
  the same span, so node throughputs add up to the rack's.
* Rack-wide latency percentiles come from the merged histograms of the nodes (histograms merge
  exactly, percentiles do not), within ``cluster.stats.REL_ERROR`` of the true nearest-rank
  value; means are exact.
* Emulation speed is virtual nanoseconds per real second over the steps' real span (first step
  start to last step end), i.e. while the rack ran its scenario, not while it was being set up.

Files are written atomically (a temporary file in the same directory, then ``os.replace``), so
a reader never sees half a result file and a crash never leaves one behind.

* Memory figures are end-of-run totals the nodes published as counters of their stats slot
  (``shm.telemetry.COUNTERS``): a memory node's occupancy (bytes carved from its host memory, of
  its capacity), a compute node's bytes reclaimed and blocks reused by its clients. They are not
  per step (a memory node records no steps), so they have rows of their own. Every declared
  counter is a field of each node in the JSON document (``nodes[i]``), and the ones declared
  with ``summary`` are summed over the nodes in ``summary``; both derive from the declaration.
* The system's own counters: every numeric field of the clients' ``statistics()`` records (RACE's
  CAS retries, Sherman's cache hits, a plugin's hops), as each compute node published them at the
  end of the run (summed over its clients, ``nodes.systems.api.node_statistics``), in the JSON
  document per node (``nodes[i].system``) and summed over the nodes (``summary.system``). Like the
  memory figures they are end-of-run totals, not per step (a step's share is the difference of
  two runs' totals, or a dashboard's live view); the CSV has fixed columns and leaves them out.
  The summary table's caption lists the ones that are not 0.
* Events worth keeping from the rack's event log: failpoints that fired and faults (a node that
  died, a system that gave up), in ``events``; the fired failpoints are also printed under the
  summary table (faults were already said when they happened).

CSV columns (one row per step x node x kind; ``node`` = "rack" for the rack-wide rows, ``kind``
= "all" for all kinds together; kinds with no operations are left out, "all" never is):

    step, label, node, role, kind, ops, failures, mops, p50_us, p99_us, p999_us, mean_us,
    max_us, vstart_ns, vend_ns, vdur_ns, real_s, mem_used, mem_capacity, bytes_reclaimed

then one end-of-run row (``step`` empty, ``label`` "end of run", ``kind`` "node") per memory node
and per compute node that published memory figures, and one for the rack (sums), with ``ops``
the node's operations over all steps and the last three columns filled (bytes); those three are
empty on step rows.

Empty cells are values that do not exist (a percentile of no operations, the throughput of a
zero-length step).
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
from collections import namedtuple
from typing import Iterable, NamedTuple

from rich.table import Table

from cluster.stats import COUNTER_NAMES, COUNTERS, OP_KINDS, LatencyHistogram, LogEntry, ProcSnapshot, StatsPlane
from cluster.units import fmt_mem

__all__ = ["Results", "KindFigures", "NodeStep", "StepFigures", "NodeSummary", "COLUMNS",
           "read_csv", "FORMAT"]

FORMAT = "dmrack.results/2"          # 2: memory columns and end-of-run rows, events
COLUMNS = ("step", "label", "node", "role", "kind", "ops", "failures", "mops", "p50_us", "p99_us",
           "p999_us", "mean_us", "max_us", "vstart_ns", "vend_ns", "vdur_ns", "real_s",
           "mem_used", "mem_capacity", "bytes_reclaimed")
_MEM_COLUMNS = ("mem_used", "mem_capacity", "bytes_reclaimed")
_INT_COLUMNS = {"step", "ops", "failures", "vstart_ns", "vend_ns", "vdur_ns", *_MEM_COLUMNS}
_FLOAT_COLUMNS = {"mops", "p50_us", "p99_us", "p999_us", "mean_us", "max_us", "real_s"}
RACK = "rack"
ALL = "all"
END = "end of run"
#: Event kinds of the rack's log that results keep (see the module docstring).
KEPT_EVENTS = ("failpoint", "fault", "compile")
_FAILPOINT_TEXT = ": failpoint "       # nodes.compute's "cn0: failpoint NAME fired (crash)"


class KindFigures(NamedTuple):
    kind: str                       # an OP_KINDS name or "all"
    ops: int
    failures: int
    p50_us: float | None
    p99_us: float | None
    p999_us: float | None
    mean_us: float | None
    max_us: float | None


class NodeStep(NamedTuple):
    node: str
    role: str
    ops: int
    failures: int
    mops: float | None              # over the rack-wide span of the step
    kinds: tuple                    # KindFigures: "all" first, then kinds with operations


class StepFigures(NamedTuple):
    index: int
    label: str
    description: str | None         # from meta["workloads"], if given
    vstart_ns: int
    vend_ns: int
    vdur_ns: int
    real_s: float | None            # real duration of the step
    speed: float | None             # virtual ns per real second during the step
    ops: int
    failures: int
    mops: float | None
    kinds: tuple                    # rack-wide KindFigures
    nodes: tuple                    # NodeStep per node that recorded the step
    latency: LatencyHistogram | None = None  # rack-wide, every kind (for CDFs; not in the CSV or JSON)


#: One node's end-of-run figures: who it is and what it did, then every counter of its stats slot
#: (``shm.telemetry.COUNTERS``, named and ordered as declared there, 0 unless published: memory
#: nodes' occupancy, compute nodes' reclamation, actors' cores and queues), then the system's own
#: counters (compute nodes: every numeric statistics field). Derived from the declaration, so a
#: counter declared there is a field here (and in the JSON's ``nodes``) with no edit of this file.
NodeSummary = namedtuple(
    "NodeSummary", ("node", "role", "pid", "state", "vnow_ns", "events", "verbs", "ops", *COUNTER_NAMES, "system"),
    defaults=(0,) * len(COUNTER_NAMES) + ({},))
#: The counters whose rack total the summary carries (``Counter.summary``), in declared order.
_SUMMED = tuple(c.name for c in COUNTERS if c.summary)


def _sum_system(nodes) -> dict:
    """The system's own counters summed over ``nodes``, in the order the names first appear."""
    out: dict = {}
    for n in nodes:
        for name, v in n.system.items():
            out[name] = out.get(name, 0) + v
    return out


def _none_if_nan(x: float) -> float | None:
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else x


def _figures(kind: str, h: LatencyHistogram, failures: int) -> KindFigures:
    n = h.count
    us = (lambda ns: _none_if_nan(ns / 1e3))
    return KindFigures(kind, n, failures, us(h.percentile(50)), us(h.percentile(99)),
                       us(h.percentile(99.9)), us(h.mean), h.max_ns / 1e3 if n else None)


def _kind_figures(hists: list[LatencyHistogram], fails: list[int]) -> tuple:
    """Figures for "all" plus each kind with operations, from per-kind histograms."""
    out = [_figures(ALL, LatencyHistogram.merged(hists), sum(fails))]
    out += [_figures(OP_KINDS[k], hists[k], fails[k]) for k in range(len(OP_KINDS)) if hists[k].count]
    return tuple(out)


def _mops(ops: int, vdur_ns: int) -> float | None:
    return ops / vdur_ns * 1e3 if vdur_ns > 0 else None


def _description(meta: dict, index: int) -> str | None:
    wl = meta.get("workloads")
    if isinstance(wl, dict):
        d = wl.get(index, wl.get(str(index)))
    elif isinstance(wl, (list, tuple)) and 0 <= index < len(wl):
        d = wl[index]
    else:
        d = None
    return None if d is None else str(d)


def _jsonable(x):
    """``x`` with NaN/inf turned into None and tuples into lists (strict JSON)."""
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    return x


def _write_atomic(path, text: str) -> str:
    path = os.fspath(path)
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise FileNotFoundError(f"cannot write {path!r}: directory {parent!r} does not exist")
    if os.path.isdir(path):
        raise IsADirectoryError(f"cannot write {path!r}: it is a directory")
    tmp = os.path.join(parent, f".{os.path.basename(path)}.{os.getpid()}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8", newline="") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    return path


class Results:
    """The figures of one run (see the module docstring); build with ``from_plane``."""

    def __init__(self, meta: dict, steps: tuple, nodes: tuple, *, verbs: int, real_s: float | None,
                 vspan_ns: int, events: tuple = ()):
        self.meta = meta
        self.events = tuple(events)         # texts of the kept events (KEPT_EVENTS), oldest first
        self.steps = steps
        self.nodes = nodes
        self.verbs = verbs
        self.real_s = real_s
        self.vspan_ns = vspan_ns

    # -- construction ------------------------------------------------------------------------

    @classmethod
    def from_plane(cls, plane: StatsPlane, meta: dict) -> "Results":
        return cls.from_snapshots(plane.snapshot(), meta, events=plane.events())

    @classmethod
    def from_snapshots(cls, snaps: Iterable[ProcSnapshot], meta: dict,
                       events: Iterable[LogEntry] = ()) -> "Results":
        if not isinstance(meta, dict):
            raise TypeError(f"meta must be a dict (rack, system, profile, seed, ...), got {type(meta).__name__}")
        meta = _jsonable(dict(meta))
        try:
            json.dumps(meta, allow_nan=False)
        except (TypeError, ValueError) as e:
            raise TypeError(f"meta must be JSON-serialisable: {e}") from None
        snaps = tuple(snaps)
        indices = sorted({s.index for p in snaps for s in p.steps})
        steps = tuple(cls._step(meta, snaps, i) for i in indices)
        nodes = tuple(NodeSummary(p.name, p.role, p.pid, p.state_name, p.vnow_ns, p.events, p.verbs,
                                  p.ops(), **p.counters._asdict(), system=dict(p.system)) for p in snaps)
        kept = tuple(dict.fromkeys(e.text for e in events if e.kind in KEPT_EVENTS))   # once each
        starts = [s.real_start for p in snaps for s in p.steps]
        ends = [s.real_end if s.real_end is not None else (p.heartbeat_time or s.real_start)
                for p in snaps for s in p.steps]
        real_s = max(ends) - min(starts) if starts else None
        vspan = (max(s.vend_ns for s in steps) - min(s.vstart_ns for s in steps)) if steps else 0
        return cls(meta, steps, nodes, verbs=sum(p.verbs for p in snaps), real_s=real_s, vspan_ns=vspan,
                   events=kept)

    @staticmethod
    def _step(meta: dict, snaps: tuple, index: int) -> StepFigures:
        rec = [(p, p.step_record(index)) for p in snaps]
        rec = [(p, s) for p, s in rec if s is not None]
        vstart = min(s.vstart_ns for _, s in rec)
        vend = max(s.vend_ns if s.vend_ns is not None else max(p.vnow_ns, s.vstart_ns) for p, s in rec)
        vdur = vend - vstart
        real_start = min(s.real_start for _, s in rec)
        real_ends = [s.real_end if s.real_end is not None else p.heartbeat_time for p, s in rec]
        real = (max(real_ends) - real_start) if all(e is not None for e in real_ends) else None
        label = next((s.label for _, s in rec if s.label), "")
        rack_hists = [LatencyHistogram() for _ in OP_KINDS]
        rack_fails = [0] * len(OP_KINDS)
        nodes = []
        for p, s in rec:
            hists = [s.histogram(k) for k in range(len(OP_KINDS))]
            fails = list(s.failures)
            for k in range(len(OP_KINDS)):
                rack_hists[k].merge(hists[k])
                rack_fails[k] += fails[k]
            nodes.append(NodeStep(p.name, p.role, s.ops(), s.failed(), _mops(s.ops(), vdur),
                                  _kind_figures(hists, fails)))
        ops = sum(n.ops for n in nodes)
        return StepFigures(index=index, label=label, description=_description(meta, index),
                           vstart_ns=vstart, vend_ns=vend, vdur_ns=vdur, real_s=real,
                           speed=vdur / real if real else None, ops=ops, failures=sum(rack_fails),
                           mops=_mops(ops, vdur), kinds=_kind_figures(rack_hists, rack_fails),
                           nodes=tuple(nodes), latency=LatencyHistogram.merged(rack_hists))

    # -- derived -----------------------------------------------------------------------------

    @property
    def speed(self) -> float | None:
        """Emulation speed over the whole scenario: virtual ns per real second."""
        return self.vspan_ns / self.real_s if self.real_s else None

    @property
    def verbs_per_s(self) -> float | None:
        return self.verbs / self.real_s if self.real_s else None

    def _memory_nodes(self) -> list:
        """Nodes with end-of-run memory figures: memory nodes, and compute nodes that published any."""
        return [n for n in self.nodes if n.mem_capacity or n.bytes_reclaimed or n.blocks_reused]

    def summary(self) -> dict:
        return {"steps": len(self.steps), "ops": sum(s.ops for s in self.steps),
                "failures": sum(s.failures for s in self.steps), "vspan_ns": self.vspan_ns,
                "real_s": self.real_s, "speed_vns_per_s": self.speed, "verbs": self.verbs,
                "verbs_per_s": self.verbs_per_s, "wall_s": self.meta.get("wall_s"),
                **{name: sum(getattr(n, name) for n in self.nodes) for name in _SUMMED},
                "system": _sum_system(self.nodes)}

    def records(self) -> list[dict]:
        """One flat dict per step x node x kind (columns ``COLUMNS``), rack rows first."""
        rows = []
        for st in self.steps:
            common = {"step": st.index, "label": st.label}
            span = {"vstart_ns": st.vstart_ns, "vend_ns": st.vend_ns, "vdur_ns": st.vdur_ns,
                    "real_s": st.real_s}
            groups = [(RACK, RACK, st.ops, st.kinds)] + [(n.node, n.role, n.ops, n.kinds) for n in st.nodes]
            for node, role, _, kinds in groups:
                for kf in kinds:
                    rows.append({**common, "node": node, "role": role, "kind": kf.kind, "ops": kf.ops,
                                 "failures": kf.failures, "mops": _mops(kf.ops, st.vdur_ns),
                                 "p50_us": kf.p50_us, "p99_us": kf.p99_us, "p999_us": kf.p999_us,
                                 "mean_us": kf.mean_us, "max_us": kf.max_us, **span,
                                 **dict.fromkeys(_MEM_COLUMNS)})
        mem = self._memory_nodes()
        if mem:
            def end_row(node, role, ops, used, cap, rec):
                row = dict.fromkeys(COLUMNS)
                row.update(label=END, node=node, role=role, kind="node", ops=ops, failures=None,
                           mem_used=used, mem_capacity=cap, bytes_reclaimed=rec)
                return row
            total = self.summary()
            rows.append(end_row(RACK, RACK, total["ops"], total["mem_used"], total["mem_capacity"],
                                total["bytes_reclaimed"]))
            for n in mem:
                memory = bool(n.mem_capacity)
                rows.append(end_row(n.node, n.role, n.ops, n.mem_used if memory else None,
                                    n.mem_capacity if memory else None,
                                    None if memory and not n.bytes_reclaimed else n.bytes_reclaimed))
        return rows

    @staticmethod
    def transactions(st: StepFigures) -> dict | None:
        """A step's transactional figures, or None when it ran no transactions (a KV step): the
        ``commit`` and ``abort`` kinds (shm/telemetry.py) as committed and aborted transactions
        per second (virtual), the abort rate (aborted attempts over all attempts) and the
        committed transactions' latency percentiles (µs, begin to commit)."""
        by = {kf.kind: kf for kf in st.kinds}
        c, a = by.get("commit"), by.get("abort")
        if c is None and a is None:
            return None
        committed, aborted = (c.ops if c else 0), (a.ops if a else 0)
        per_s = (lambda n: n / st.vdur_ns * 1e9 if st.vdur_ns > 0 else None)
        return {"committed": committed, "aborted": aborted, "committed_per_s": per_s(committed),
                "aborted_per_s": per_s(aborted), "abort_rate": aborted / (committed + aborted),
                "p50_us": c.p50_us if c else None, "p99_us": c.p99_us if c else None,
                "p999_us": c.p999_us if c else None, "mean_us": c.mean_us if c else None}

    def _step_doc(self, st: StepFigures) -> dict:
        def kinds(ks):
            return {kf.kind: {k: v for k, v in kf._asdict().items() if k != "kind"} for kf in ks}
        txn = self.transactions(st)
        return {**({"transactions": txn} if txn is not None else {}), "index": st.index, "label": st.label, "description": st.description,
                "vstart_ns": st.vstart_ns, "vend_ns": st.vend_ns, "vdur_ns": st.vdur_ns,
                "real_s": st.real_s, "speed_vns_per_s": st.speed, "ops": st.ops,
                "failures": st.failures, "mops": st.mops, "kinds": kinds(st.kinds),
                "nodes": [{"node": n.node, "role": n.role, "ops": n.ops, "failures": n.failures,
                           "mops": n.mops, "kinds": kinds(n.kinds)} for n in st.nodes]}

    def document(self) -> dict:
        """The JSON document: meta, summary, steps (nested), nodes, rows (= records())."""
        return _jsonable({"format": FORMAT, "meta": self.meta, "summary": self.summary(),
                          "steps": [self._step_doc(s) for s in self.steps],
                          "nodes": [n._asdict() for n in self.nodes], "events": list(self.events),
                          "rows": self.records()})

    # -- output ------------------------------------------------------------------------------

    def to_json(self, path) -> str:
        """Write the JSON document atomically; returns the path."""
        return _write_atomic(path, json.dumps(self.document(), indent=1, allow_nan=False) + "\n")

    def to_csv(self, path) -> str:
        """Write ``records()`` as CSV (header row = COLUMNS) atomically; returns the path."""
        buf = io.StringIO()
        w = csv.DictWriter(buf, fieldnames=COLUMNS, lineterminator="\n")
        w.writeheader()
        for r in self.records():
            w.writerow({k: "" if r[k] is None else r[k] for k in COLUMNS})
        return _write_atomic(path, buf.getvalue())

    def table(self) -> Table:
        """The summary printed at the end of a run."""
        m = self.meta
        title = "  ·  ".join(f"{k} {m[k]}" for k in ("rack", "system", "profile", "seed") if k in m)
        t = Table(title=f"results: {title}" if title else "results", title_justify="left")
        for col in ("step", "label", "node", "kind", "ops", "fail", "Mops/s", "p50 µs", "p99 µs",
                    "p999 µs", "mean µs"):
            t.add_column(col, justify="left" if col in ("label", "node", "kind") else "right", no_wrap=True)

        def num(x, spec):
            return "–" if x is None else format(x, spec)

        for st in self.steps:
            t.add_section()
            rows = [(RACK, kf, "bold" if kf.kind == ALL else "") for kf in st.kinds]
            if len(st.nodes) > 1:
                rows += [(n.node, n.kinds[0], "dim") for n in st.nodes]
            for i, (node, kf, style) in enumerate(rows):
                # Operations that took no virtual time (a bulk load writes memory directly) have no
                # latency to show: "–" like every other empty cell, not 0.00 (the JSON keeps the 0s).
                lat = [num(x, ".2f") if kf.max_us else "–" for x in (kf.p50_us, kf.p99_us, kf.p999_us, kf.mean_us)]
                t.add_row(str(st.index) if i == 0 else "", st.label if i == 0 else "", node, kf.kind,
                          f"{kf.ops:,}", f"{kf.failures:,}", num(_mops(kf.ops, st.vdur_ns), ".3f"),
                          *lat, style=style)
        speed = self.speed
        parts = [f"virtual {self.vspan_ns / 1e6:.3f} ms"]
        if self.real_s is not None:
            parts.append(f"in {self.real_s:.2f} s real")
        if speed is not None:
            from cluster.dashboard import fmt_speed       # one wording for the dashboard and the summary
            parts.append(f"emulation speed {fmt_speed(speed, than=' than the hardware')}")
        parts.append(f"{self.verbs:,} verbs" + (f" ({self.verbs_per_s:,.0f}/s)" if self.verbs_per_s else ""))
        if "wall_s" in m:
            parts.append(f"wall {m['wall_s']} s")
        lines = ["; ".join(parts)]
        mem = self._memory_nodes()
        occupied = [n for n in mem if n.mem_capacity]
        if occupied:
            # the dashboard's format (cluster.units.fmt_mem): the same bytes read the same in both
            lines.append("memory: " + ", ".join(f"{n.node} {fmt_mem(n.mem_used, n.mem_capacity)}" for n in occupied))
        reclaimers = [n for n in mem if n.role != "memory"]
        if reclaimers:
            total = sum(n.bytes_reclaimed for n in reclaimers)
            lines.append(f"reclaimed: {_mib(total)} MiB (" + ", ".join(
                f"{n.node} {_mib(n.bytes_reclaimed)}" for n in reclaimers) + f"), "
                f"{sum(n.blocks_reused for n in reclaimers):,} blocks reused")
        torn = [n for n in self.nodes if n.torn_reads]
        if torn:
            lines.append(f"torn reads: {sum(n.torn_reads for n in torn):,} (" + ", ".join(
                f"{n.node} {n.torn_reads:,}" for n in torn) + "): multi-line READs that met a WRITE halfway "
                "and were read again")
        for st in self.steps:
            txn = self.transactions(st)
            if txn is not None:
                lines.append(_txn_line(st.index, txn))
        own = self._system_line()
        if own:
            lines.append(own)
        # Fired failpoints only: faults were said as they happened, and the supervisor ends with
        # its stop reason (one line for a death, not three).
        lines += [e for e in self.events if _FAILPOINT_TEXT in e]
        t.caption = "\n".join(lines)
        t.caption_justify = "left"
        return t

    def _system_line(self) -> str:
        """The summary's line of the system's own counters that are not 0, summed over the nodes
        ("" when there are none)."""
        shown = [(k, v) for k, v in _sum_system(self.nodes).items() if v]
        if not shown:
            return ""
        return (f"{self.meta.get('system', 'system')} counters (statistics(), summed; 0s left out): "
                + ", ".join(f"{k} {v:,}" if isinstance(v, int) else f"{k} {v:,.4g}" for k, v in shown))

    def __repr__(self) -> str:
        return f"<Results steps={len(self.steps)} nodes={len(self.nodes)} ops={self.summary()['ops']}>"


def _txn_line(index: int, txn: dict) -> str:
    """The summary's line of a step's transactions (the dashboard says the same while it runs)."""
    def rate(x):
        return "–" if x is None else f"{x:,.0f}"

    def us(x):
        return "–" if x is None else f"{x:.2f}"
    return (f"transactions, step {index}: {rate(txn['committed_per_s'])} committed/s, "
            f"{rate(txn['aborted_per_s'])} aborted/s (abort rate {txn['abort_rate']:.1%}); committed latency "
            f"p50 {us(txn['p50_us'])} µs, p99 {us(txn['p99_us'])} µs, p99.9 {us(txn['p999_us'])} µs")


# -- a results document as rows of dmrack compare and dmrack report ---------------------------------
#
# A run is a result people compare (before and after a change) and put in a report, like a bench or
# reproduce run, so ``cluster.experiments.rows.load_result`` reads this document too, as rows
# (experiment, series, x, metric, emulated) without a published value:
#
# * per step and node (``rack`` first) and kind: experiment ``step N``, series the node, x the
#   kind, one row per figure of STEP_METRICS (throughput, latency percentiles, counts);
# * per node with end-of-run memory figures: experiment ``end of run``, x ``memory``;
# * the summary: experiment ``run``, series ``rack``, x ``all``, every number of ``summary()``.
#
# Rows are keyed by the step's number, not its label, so a run of 20 ms compares with one of 10 ms
# step by step; the labels go into the run record's ``parts``. Figures that measure real time are
# named with "real" or "wall", so compare lists them apart (cluster.experiments.rows.is_wall_clock).

STEP_METRICS = (("ops", "ops"), ("failures", "failures"), ("mops", "Mops/s"), ("p50_us", "p50 µs"),
                ("p99_us", "p99 µs"), ("p999_us", "p999 µs"), ("mean_us", "mean µs"))
#: a transactional step's figures (``Results.transactions``) as the rows of experiment
#: :data:`TRANSACTIONS`, series "step N", x "rack": what ``dmrack plot`` draws of them (a group of
#: bars per step)
TXN_METRICS = (("committed_per_s", "committed txn/s"), ("aborted_per_s", "aborted txn/s"),
               ("abort_rate", "abort rate %"), ("p50_us", "txn p50 µs"), ("p99_us", "txn p99 µs"),
               ("p999_us", "txn p99.9 µs"))
TRANSACTIONS = "transactions"
END_METRICS = (("mem_used", "bytes used"), ("mem_capacity", "bytes capacity"), ("bytes_reclaimed", "bytes reclaimed"))
SUMMARY_METRICS = {"vspan_ns": "virtual ns", "real_s": "real s", "speed_vns_per_s": "virtual ns per real s",
                   "verbs_per_s": "verbs per real s", "wall_s": "wall s"}


def document_rows(doc: dict) -> tuple[dict, list[dict]]:
    """``(run record, rows)`` of a results document (:meth:`Results.document`, read back from
    JSON); ValueError (one line, without the path) if it is not one."""
    meta, records, summary = doc.get("meta"), doc.get("rows"), doc.get("summary")
    if not isinstance(meta, dict) or not isinstance(records, list) or not isinstance(summary, dict):
        raise ValueError("a run's results must have 'meta' and 'summary' objects and a 'rows' list")
    rows = []

    def add(experiment, series, x, metric, value):
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            rows.append({"experiment": experiment, "series": series, "x": x, "metric": metric,
                         "emulated": value, "published": None})

    for i, rec in enumerate(records, 1):
        if not isinstance(rec, dict) or any(k not in rec for k in ("step", "node", "kind")):
            raise ValueError(f"row {i} is not a results record (columns {', '.join(COLUMNS)})")
        if rec["step"] is not None:
            for col, metric in STEP_METRICS:
                add(f"step {rec['step']}", str(rec["node"]), str(rec["kind"]), metric, rec.get(col))
        elif rec.get("label") == END:
            for col, metric in END_METRICS:
                add(END, str(rec["node"]), "memory", metric, rec.get(col))
    for st in doc.get("steps") or ():
        txn = st.get("transactions") if isinstance(st, dict) else None
        if isinstance(txn, dict):
            for col, metric in TXN_METRICS:
                value = txn.get(col)
                add(TRANSACTIONS, f"step {st.get('index')}", RACK, metric,
                    value * 100 if col == "abort_rate" and isinstance(value, (int, float)) else value)
    for key, value in summary.items():
        add("run", RACK, ALL, SUMMARY_METRICS.get(key, key.replace("_", " ")), value)
    steps = meta.get("steps") if isinstance(meta.get("steps"), list) else []
    run = {"command": "run", "kind": "rack run",
           "title": f"rack {meta.get('rack', '?')}: system {meta.get('system', '?')}, {meta.get('mode', '?')}",
           "parts": [f"step {i}: {label}" for i, label in enumerate(steps, 1)],
           "options": {k: meta[k] for k in ("system", "mode") if k in meta},
           "setup": {"profile": meta.get("profile"), "spec": meta.get("rack"), "seed": meta.get("seed"),
                     "note": meta.get("stop_reason") or None},
           "wall_s": meta.get("wall_s")}
    return run, rows


def _mib(n: int) -> str:
    return f"{n / (1 << 20):.1f}".rstrip("0").rstrip(".")


def read_csv(path) -> list[dict]:
    """Read a results CSV back into ``records()`` form (numbers typed, empty cells None)."""
    with open(os.fspath(path), newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        if tuple(reader.fieldnames or ()) != COLUMNS:
            raise ValueError(f"{path}: not a dmrack results CSV (columns {reader.fieldnames})")
        out = []
        for row in reader:
            rec = {}
            for k in COLUMNS:
                v = row[k]
                if v == "":
                    rec[k] = None if k not in ("label",) else ""
                elif k in _INT_COLUMNS:
                    rec[k] = int(v)
                elif k in _FLOAT_COLUMNS:
                    rec[k] = float(v)
                else:
                    rec[k] = v
            out.append(rec)
        return out
