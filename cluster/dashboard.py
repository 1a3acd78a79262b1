"""The live view of a running rack: a rich dashboard on a terminal, plain lines elsewhere.

A transactional workload (SmallBank on ``ford``) records each attempt as a ``commit`` or an
``abort`` (shm/telemetry.py): the view adds a line (:class:`TxnView`) of committed and aborted
transactions per second (the rack's rate split by the current steps' committed share), the abort
rate and the committed transactions' latency percentiles.

Three layers, so the arithmetic can be tested without a terminal:

* :class:`RackMeter` turns successive ``StatsPlane.snapshot()`` tuples into a :class:`RackView`:
  per node, *modelled* throughput (the current step's operations over the virtual time between
  two updates, which is the figure the modelled hardware would show) and latency percentiles over
  the node's current step. Rates count the current step's operations only: a load step's
  operations (a bulk load records 10,000 of them in no virtual time) counted in the first rate of
  the run step made the first frame 3.5x the steady rate and started every sparkline with a
  spike. When a node has moved to a new step since the last update, its rate is that step's
  average so far. Operations are counted as of the node's last heartbeat, which published its
  virtual time (``ProcSnapshot.step_ops_at_vnow``), not live: live counts over the heartbeat's
  virtual time still read 1.3x high on a step's first frame. Latencies of a step whose
  operations took no virtual time (a bulk load writes memory directly) are not measurements:
  they show as blank ("–"), like every other empty cell;
  rack-wide, the sum of node throughputs, the emulation speed (virtual time advanced per real
  second) and emulated verbs per real second. It keeps each node's throughput history for the
  sparklines. :class:`ProcUsage` adds CPU % and RSS from psutil (cached ``Process`` objects, so
  ``cpu_percent`` measures between updates). A process that is gone keeps its last measured
  values, and a node that has ended keeps the rates it ended with (and the rack its last speed):
  the final frame is drawn after every node exited, and showed blanks and "0x" there.
  A node's state is what its slot says, except that a node the supervisor saw die (it writes the
  exit status into the plane, see ``StatsPlane.mark_exited``) shows as "dead": a SIGKILLed node
  never publishes a last state, and this view reads nothing but the plane. Memory nodes carry
  their occupancy (bytes carved from their host memory, of their capacity) and compute nodes the
  bytes their clients reclaimed, as published counters; the rack row sums both and shows the
  latency percentiles of the compute nodes' merged histograms (histograms merge exactly,
  percentiles do not). The system's own counters (every numeric field of its clients'
  ``statistics()`` records, which each compute node publishes summed over its clients) are summed
  over the nodes into ``RackView.system``; the frame shows the ones that are not 0 in a panel of
  their own, as fresh as the nodes' last heartbeat. The counters of a stats slot come from their
  one declaration (``shm/telemetry.py``): those no table here shows and no client produces (a
  client's are in the system panel already) are summed over the nodes into
  ``RackView.counters`` and shown, when not 0, in a counters panel, so a counter declared there
  shows here with no edit of this file (none does today: each has its column).
* :func:`render` draws a ``RackView`` as a rich renderable (header, node table, throughput
  sparklines, event log); :func:`plain_line` is the one-line form. Step labels longer than the
  step column are shortened (:func:`fit_label`: "until stopped" becomes "∞", then an ellipsis at
  a word boundary) rather than cut mid-word.
* :class:`Dashboard` (rich ``Live``) and :class:`PlainReporter` (one line per interval, events
  printed as they arrive) share the polling, the meter and the event feed through ``_Reporter``.
  Plain lines leave out the ``phase`` events (the scenario finished, the supervisor stopped the
  rack): the supervisor says how the run ended once, after the summary table.
  ``Dashboard(live=None)`` picks live mode only when the console is a terminal, so piping a
  run into a file gives readable lines instead of escape codes.

``update()`` is cheap to call often: it does nothing until ``interval_s`` has passed since the
last frame (or the phase changed), because every frame copies every slot of the stats plane.
"""

from __future__ import annotations

import math
import time
from collections import deque
from typing import Iterable, NamedTuple

import psutil
from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from cluster.stats import COUNTERS, STATE_NAMES, LatencyHistogram, ProcSnapshot, StatsPlane
from cluster.units import fmt_bytes, fmt_mem     # noqa: F401 - part of this module's interface too

__all__ = [
    "NodeView", "DeviceView", "RackView", "TxnView", "RackMeter", "ProcUsage", "sparkline", "render", "plain_line",
    "fmt_vtime", "fmt_speed", "fmt_rate", "fmt_bytes", "fmt_mem", "fit_label", "STEP_WIDTH", "Dashboard", "PlainReporter", "ReporterStats",
    "TITLE_KEYS",
]

TITLE_KEYS = ("rack", "system", "profile", "workload")
HISTORY = 60                        # sparkline samples per node
EVENT_LINES = 8                     # lines in the event panel
_BLOCKS = "▁▂▃▄▅▆▇█"
STEP_WIDTH = 24                     # characters of the step column
# Shortenings tried in order until a step label fits (the labels come from cluster.rack._label).
_SHORTER = ((" until stopped", " ∞"), (" records", ""))


# -- formatting ---------------------------------------------------------------------------------


def fmt_vtime(ns: float | None) -> str:
    """A duration or instant in ns, in the unit that keeps 3-4 significant digits."""
    if ns is None or (isinstance(ns, float) and not math.isfinite(ns)):
        return "–"
    for unit, div in (("s", 1e9), ("ms", 1e6), ("µs", 1e3)):
        if abs(ns) >= div:
            return f"{ns / div:.3f} {unit}"
    return f"{ns:.0f} ns"


def fmt_speed(vns_per_s: float | None, *, words: bool = False, than: str = "") -> str:
    """Emulation speed, rack time per real second and how much slower (or faster) than the modelled
    hardware that is: "12.000 ms/s (83x slower)"; ``words``: the sentence the dashboard's header
    gives a newcomer, "12.000 ms of rack time per real second: the rack runs 83x slower than the
    hardware it models"; ``than`` ends the short form's parenthesis ("83x slower than the hardware")."""
    if vns_per_s is None or not vns_per_s > 0:
        return "–"
    slower = 1e9 / vns_per_s
    if slower >= 1:
        ratio, how = f"{slower:,.0f}x" if slower >= 10 else f"{slower:.2g}x", "slower"
    else:
        ratio, how = f"{1 / slower:.2g}x", "faster"
    if words:
        return (f"{fmt_vtime(vns_per_s)} of rack time per real second: the rack runs {ratio} {how} "
                f"than the hardware it models")
    return f"{fmt_vtime(vns_per_s)}/s ({ratio} {how}{than})"


def fmt_rate(x: float | None) -> str:
    """A count per second with a k/M/G prefix."""
    if x is None or not math.isfinite(x):
        return "–"
    for unit, div in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(x) >= div:
            return f"{x / div:.2f} {unit}"
    return f"{x:.0f}"


def fit_label(label: str, width: int = STEP_WIDTH) -> str:
    """``label`` in at most ``width`` characters: known long phrases shortened first, then cut at
    a word boundary with an ellipsis (mid-word only for a single word longer than half the width)."""
    if len(label) <= width:
        return label
    for long, short in _SHORTER:
        label = label.replace(long, short)
        if len(label) <= width:
            return label
    cut = label[:width - 1]
    if label[width - 1] != " ":
        space = cut.rfind(" ")
        if space >= width // 2:
            cut = cut[:space]
    return cut.rstrip() + "…"


def _fmt(x: float | None, spec: str) -> str:
    return "–" if x is None or not math.isfinite(x) else format(x, spec)


def sparkline(values: Iterable[float | None], width: int | None = None) -> str:
    """Unicode block sparkline, scaled from 0 to the largest value; None plots as a blank."""
    vals = list(values)
    if width is not None:
        vals = vals[-width:]
    top = max((v for v in vals if v is not None), default=0.0)
    out = []
    for v in vals:
        if v is None:
            out.append(" ")
        elif top <= 0:
            out.append(_BLOCKS[0])
        else:
            out.append(_BLOCKS[min(len(_BLOCKS) - 1, max(0, int(v / top * (len(_BLOCKS) - 1) + 0.5)))])
    return "".join(out)


# -- metrics ------------------------------------------------------------------------------------


class NodeView(NamedTuple):
    name: str
    role: str
    state: str
    pid: int
    step: str                       # label of the current step ("" before the first)
    vnow_ns: int
    kops: float | None              # modelled kilo-operations per virtual second
    p50_us: float | None            # latency over the node's current step
    p99_us: float | None
    p999_us: float | None
    nic_util: float
    cpu_pct: float | None
    rss_mib: float | None
    verbs_per_s: float | None       # per real second
    history: tuple                  # last HISTORY kops samples (None where unknown)
    mem_used: int | None = None     # memory nodes: bytes carved from host memory
    mem_capacity: int | None = None # memory nodes: host memory bytes
    reclaimed: int | None = None    # compute nodes: bytes their clients reclaimed
    device: "DeviceView | None" = None   # nodes with server actors (DPU, DPA, memory with cores)


class DeviceView(NamedTuple):
    """What a node's server actors do, from its counters (rates over the last update's virtual time)."""
    cores: int                      # modelled cores (a DPU's Arm cores, a DPA's cores)
    busy: float | None              # fraction of those cores busy
    threads: int                    # DPA hardware threads started (0: not a DPA)
    stalled: float | None           # fraction of the DPA threads' time waiting off their cores
    dma_gbps: float | None          # DMA engine traffic to and from the host, Gbit/s of virtual time
    rx_queued: int                  # datagrams waiting in its RX queues
    udp_dropped: int                # datagrams dropped so far (full queues)
    udp_resends: int                # requests sent again after a timeout
    ring_depth: int = 0             # records waiting in the DMA rings its actors serve


class RackView(NamedTuple):
    phase: str
    vnow_ns: int                    # the furthest node's virtual time
    elapsed_s: float                # real time since the first update
    speed: float | None             # virtual ns per real second
    verbs_per_s: float | None       # emulated verbs per real second, rack-wide
    total_kops: float | None        # modelled, sum over nodes
    p99_us: float | None            # rack-wide, over each node's current step
    ops: int                        # operations recorded so far, all steps
    nodes: tuple                    # NodeView per process
    events: tuple = ()              # display lines for the event panel
    p50_us: float | None = None     # rack-wide (merged histograms), like p99_us
    p999_us: float | None = None
    mem_used: int | None = None     # summed over the memory nodes (None: no memory node published)
    mem_capacity: int | None = None
    reclaimed: int | None = None    # summed over the compute nodes
    step_ops: int = 0               # operations of each node's current step, summed (what the rates count)
    system: tuple = ()              # (name, value): the system's own counters, summed over the nodes
    counters: tuple = ()            # (Counter, value): the declared counters of _PANEL_COUNTERS, summed over the nodes
    txn: "TxnView | None" = None    # a transactional workload's figures (None: no transactions in the current steps)


class TxnView(NamedTuple):
    """Transactions of the nodes' current steps (the ``commit`` and ``abort`` kinds, shm/telemetry.py)."""
    committed_per_s: float | None   # the rack's rate (ops/s of the current steps) times the committed share
    aborted_per_s: float | None
    abort_rate: float               # aborted attempts / attempts, in the current steps
    p50_us: float | None            # committed transactions' latency (merged histograms)
    p99_us: float | None
    p999_us: float | None


#: Declared counters (shm.telemetry.COUNTERS) this view shows in a table of its own: the memory
#: and reclaimed columns of the node table, and the device table (DeviceView). A name that is not
#: declared fails here, at import.
_TABLE_COUNTERS = frozenset({"mem_used", "mem_capacity", "bytes_reclaimed", "cpu_cores", "cpu_busy_ns",
                             "dpa_threads", "dpa_stall_ns", "dma_bytes", "rx_queued", "udp_dropped",
                             "udp_resends", "ring_depth"})
if not _TABLE_COUNTERS <= {c.name for c in COUNTERS}:
    raise ImportError(f"cluster/dashboard.py shows counters shm/telemetry.py does not declare: "
                      f"{', '.join(sorted(_TABLE_COUNTERS - {c.name for c in COUNTERS}))}")
#: Every other declared counter is shown in the counters panel, except those the compute nodes'
#: clients produce: they are fields of the clients' statistics() records, so the system panel
#: shows them already. A counter declared in shm/telemetry.py thus shows without an edit here.
_PANEL_COUNTERS = tuple(c for c in COUNTERS if c.name not in _TABLE_COUNTERS and c.source != "clients")


def _counter_totals(snaps) -> tuple:
    """(Counter, value summed over the nodes) of the panel's counters (every counter is additive)."""
    return tuple((c, sum(getattr(s.counters, c.name) for s in snaps)) for c in _PANEL_COUNTERS)


def _system_totals(snaps) -> tuple:
    """The system's own counters of ``snaps`` summed over the nodes, as (name, value) pairs in the
    order the names first appear (the record's field order)."""
    out: dict = {}
    for s in snaps:
        for name, v in s.system.items():
            out[name] = out.get(name, 0) + v
    return tuple(out.items())


class _Prev(NamedTuple):
    step: int | None                # index of the node's current step at that update
    step_ops: int                   # operations of that step then
    vnow_ns: int
    verbs: int
    busy_ns: int = 0
    stall_ns: int = 0
    dma_bytes: int = 0
    kops: float | None = None       # the rates shown then (an ended node keeps them)
    verbs_per_s: float | None = None
    device: "DeviceView | None" = None


def _device(c, prev: "_Prev | None", vnow_ns: int) -> DeviceView:
    """A node's DeviceView from its counters; rates over the virtual time since ``prev``, or the
    whole run at first sight."""
    dv = vnow_ns - (prev.vnow_ns if prev is not None else 0)
    d_busy = c.cpu_busy_ns - (prev.busy_ns if prev is not None else 0)
    d_stall = c.dpa_stall_ns - (prev.stall_ns if prev is not None else 0)
    d_dma = c.dma_bytes - (prev.dma_bytes if prev is not None else 0)
    ok = dv > 0
    return DeviceView(cores=c.cpu_cores, busy=min(1.0, d_busy / (c.cpu_cores * dv)) if ok and c.cpu_cores else None,
                      threads=c.dpa_threads,
                      stalled=min(1.0, d_stall / (c.dpa_threads * dv)) if ok and c.dpa_threads else None,
                      dma_gbps=d_dma * 8 / dv if ok else None, rx_queued=c.rx_queued, udp_dropped=c.udp_dropped,
                      udp_resends=c.udp_resends, ring_depth=c.ring_depth)


_ENDED = ("done", "failed", "dead")     # node states after which nothing changes


def _us(ns: float) -> float | None:
    return None if math.isnan(ns) else ns / 1e3


def _ops_at_vnow(s: ProcSnapshot) -> int:
    """The current step's operations when the node published its virtual time (the heartbeat's
    count; the live count runs ahead of it, see cluster/stats.py), or the live count if unknown."""
    cur = s.current()
    if cur is None:
        return 0
    return s.step_ops_at_vnow if s.step_ops_at_vnow is not None else cur.ops()


def _step_rate(s: ProcSnapshot, prev: "_Prev | None") -> float | None:
    """Modelled kops/s of a node's current step: its operations since the last update over the
    virtual time since then, or, at first sight or in a step begun since, the step's average so
    far (see the module docstring). None when no virtual time passed."""
    cur = s.current()
    if cur is None:                         # no step yet (memory nodes record none): no operations
        dv = s.vnow_ns - prev.vnow_ns if prev is not None else 0
        return 0.0 if dv > 0 else None
    if prev is not None and prev.step == cur.index:
        ops, dv = _ops_at_vnow(s) - prev.step_ops, s.vnow_ns - prev.vnow_ns
    else:
        ops, dv = _ops_at_vnow(s), s.vnow_ns - cur.vstart_ns
    return ops / dv * 1e6 if dv > 0 else None


def _timed(h: LatencyHistogram) -> bool:
    """Whether a histogram's operations were timed: a bulk load records each in 0 ns."""
    return h.count > 0 and h.max_ns > 0


class RackMeter:
    """Derives a RackView from successive snapshots (see the module docstring)."""

    def __init__(self, history: int = HISTORY):
        self.history = history
        self._prev: dict[str, _Prev] = {}
        self._hist: dict[str, deque] = {}
        self._t0: int | None = None
        self._t_prev: int | None = None
        self._vnow_prev: int | None = None
        self._speed_prev: float | None = None
        self.updates = 0

    def update(self, snaps: Iterable[ProcSnapshot], *, now_ns: int, phase: str = "",
               usage: dict | None = None) -> RackView:
        """``now_ns``: a real monotonic clock (ns); ``usage``: pid -> (cpu %, rss bytes)."""
        snaps = tuple(snaps)
        usage = usage or {}
        dt_s = None if self._t_prev is None else (now_ns - self._t_prev) / 1e9
        if dt_s is not None and dt_s <= 0:
            dt_s = None
        nodes = []
        merged = LatencyHistogram()
        total_kops = None
        verbs_rate = None
        total_ops = step_ops = 0
        mem_used = mem_cap = reclaimed = None
        commits = aborts = 0
        commit_hist = LatencyHistogram()
        for s in snaps:
            total_ops += s.ops()
            prev = self._prev.get(s.name)
            cur = s.current()
            step_ops += cur.ops() if cur is not None else 0
            if cur is not None and (cur.ops("commit") or cur.ops("abort")):
                commits += cur.ops("commit")
                aborts += cur.ops("abort")
                commit_hist.merge(cur.histogram("commit"))
            c = s.counters
            # A node that has ended and not moved since the last update keeps the rates it ended
            # with (the last frame is drawn after every node stopped: it showed blanks and 0x).
            ended = prev is not None and s.state_name in _ENDED and s.vnow_ns == prev.vnow_ns
            if ended:
                kops, vps, device = prev.kops, prev.verbs_per_s, prev.device
            else:
                kops = _step_rate(s, prev)
                vps = max(0, s.verbs - prev.verbs) / dt_s if prev is not None and dt_s is not None else None
                device = _device(c, prev, s.vnow_ns) if (c.cpu_cores or s.role in ("dpu", "dpa")) else None
            if vps is not None:
                verbs_rate = (verbs_rate or 0.0) + vps
            if kops is not None:
                total_kops = (total_kops or 0.0) + kops
            self._prev[s.name] = _Prev(None if cur is None else cur.index, _ops_at_vnow(s),
                                       s.vnow_ns, s.verbs, c.cpu_busy_ns, c.dpa_stall_ns, c.dma_bytes,
                                       kops, vps, device)
            hist = self._hist.setdefault(s.name, deque(maxlen=self.history))
            if not ended:
                hist.append(kops)
            p50 = p99 = p999 = None
            if cur is not None and cur.ops():
                h = cur.histogram()
                if _timed(h):
                    merged.merge(h)
                    p50, p99, p999 = (_us(h.percentile(q)) for q in (50, 99, 99.9))
            cpu, rss = usage.get(s.pid, (None, None)) if s.pid else (None, None)
            used = cap = rec = None
            if s.counters.mem_capacity:
                used, cap = s.counters.mem_used, s.counters.mem_capacity
                mem_used, mem_cap = (mem_used or 0) + used, (mem_cap or 0) + cap
            if s.role in ("compute", "client"):
                rec = s.counters.bytes_reclaimed
                reclaimed = (reclaimed or 0) + rec
            nodes.append(NodeView(
                name=s.name, role=s.role, state=s.state_name, pid=s.pid,
                step=cur.label if cur is not None else "", vnow_ns=s.vnow_ns, kops=kops,
                p50_us=p50, p99_us=p99, p999_us=p999, nic_util=s.gauges.nic_util,
                cpu_pct=cpu, rss_mib=None if rss is None else rss / (1 << 20),
                verbs_per_s=vps, history=tuple(hist), mem_used=used, mem_capacity=cap, reclaimed=rec,
                device=device))
        vnow = max((s.vnow_ns for s in snaps), default=0)
        speed = None
        if snaps and vnow == self._vnow_prev and all(s.state_name in _ENDED for s in snaps):
            speed = self._speed_prev            # the rack has ended: the speed it ran at
        elif dt_s is not None and self._vnow_prev is not None:
            speed = max(0, vnow - self._vnow_prev) / dt_s
        if self._t0 is None:
            self._t0 = now_ns
        self._t_prev = now_ns
        self._vnow_prev = vnow
        self._speed_prev = speed
        self.updates += 1
        txn = None
        if commits or aborts:
            share = commits / (commits + aborts)
            rate = None if total_kops is None else total_kops * 1e3
            txn = TxnView(None if rate is None else rate * share, None if rate is None else rate * (1 - share),
                          aborts / (commits + aborts), _us(commit_hist.percentile(50)),
                          _us(commit_hist.percentile(99)), _us(commit_hist.percentile(99.9)))
        return RackView(txn=txn, phase=phase, vnow_ns=vnow, elapsed_s=(now_ns - self._t0) / 1e9, speed=speed,
                        verbs_per_s=verbs_rate, total_kops=total_kops,
                        p99_us=_us(merged.percentile(99)), ops=total_ops, nodes=tuple(nodes),
                        p50_us=_us(merged.percentile(50)), p999_us=_us(merged.percentile(99.9)),
                        mem_used=mem_used, mem_capacity=mem_cap, reclaimed=reclaimed, step_ops=step_ops,
                        system=_system_totals(snaps), counters=_counter_totals(snaps))


class ProcUsage:
    """CPU % and RSS of node processes via psutil; a process that is gone keeps its last values."""

    def __init__(self):
        self._procs: dict[int, psutil.Process] = {}
        self._last: dict[int, tuple[float | None, int | None]] = {}
        self.errors = 0

    def sample(self, pids: Iterable[int]) -> dict[int, tuple[float | None, int | None]]:
        out = {}
        for pid in pids:
            if not pid:
                continue
            proc = self._procs.get(pid)
            first = proc is None
            try:
                if first:
                    proc = self._procs[pid] = psutil.Process(pid)
                # The first cpu_percent() of a Process object has no interval to measure over.
                cpu = proc.cpu_percent(None)
                rss = proc.memory_info().rss
                out[pid] = self._last[pid] = (None if first else cpu, rss)
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                if self._procs.pop(pid, None) is not None or pid not in self._last:
                    self.errors += 1
                out[pid] = self._last.get(pid, (None, None))
        return out


# -- rendering ----------------------------------------------------------------------------------


def _title_line(info: dict) -> Text:
    t = Text()
    for i, key in enumerate(TITLE_KEYS):
        if i:
            t.append("  ·  ", style="dim")
        t.append(f"{key} ", style="dim")
        t.append(str(info.get(key, "?")), style="bold")
    return t


def _pairs(parts) -> Text:
    t = Text()
    for i, (k, v) in enumerate(parts):
        if i:
            t.append("  ·  ", style="dim")
        t.append(f"{k} ", style="dim")
        t.append(v, style="bold cyan" if k == "phase" else "bold")
    return t


def _status_lines(view: RackView) -> list[Text]:
    mops = None if view.total_kops is None else view.total_kops / 1e3
    return [
        _pairs([("phase", view.phase or "–"), ("vtime", fmt_vtime(view.vnow_ns)),
                ("real", f"{view.elapsed_s:.1f} s"),
                ("ops", f"{view.step_ops:,} in this step, {view.ops:,} in all")]),
        _pairs([("rack", f"{_fmt(mops, '.3f')} Mops/s"), ("p50", f"{_fmt(view.p50_us, '.2f')} µs"),
                ("p99", f"{_fmt(view.p99_us, '.2f')} µs"), ("verbs/s", fmt_rate(view.verbs_per_s))]),
        *([_txn_pairs(view.txn)] if view.txn is not None else []),
        _pairs([("speed", fmt_speed(view.speed, words=True))]),
    ]


def _txn_pairs(txn: "TxnView") -> Text:
    """The status line of a transactional workload: committed and aborted per second, the abort
    rate and the committed transactions' latency."""
    def rate(x):
        return "–" if x is None else f"{x:,.0f}/s"
    return _pairs([("committed", rate(txn.committed_per_s)), ("aborted", rate(txn.aborted_per_s)),
                   ("abort rate", f"{txn.abort_rate:.1%}"), ("txn p50", f"{_fmt(txn.p50_us, '.2f')} µs"),
                   ("txn p99", f"{_fmt(txn.p99_us, '.2f')} µs")])


_STATE_STYLE = {"running": "green", "loading": "yellow", "starting": "yellow", "done": "blue",
                "failed": "bold red", "dead": "bold red", "empty": "dim"}


def _node_table(view: RackView) -> Table:
    table = Table(expand=True, box=None, header_style="bold", pad_edge=False)
    steps = [fit_label(n.step) for n in view.nodes]
    for col, just in (("node", "left"), ("role", "left"), ("state", "left"), ("step", "left"),
                      ("kops/s", "right"), ("p50 µs", "right"), ("p99 µs", "right"),
                      ("p999 µs", "right"), ("NIC %", "right"), ("CPU %", "right"),
                      ("RSS MiB", "right"), ("verbs/s", "right"), ("memory", "right"),
                      ("reclaimed", "right")):
        # The step column keeps its (already shortened) labels whole: narrow terminals squeeze
        # the figures instead.
        width = max((len(x) for x in steps), default=0) if col == "step" else None
        table.add_column(col, justify=just, no_wrap=True, min_width=width)
    for n, step in zip(view.nodes, steps):
        table.add_row(n.name, n.role, Text(n.state, style=_STATE_STYLE.get(n.state, "")), step,
                      _fmt(n.kops, ".1f"), _fmt(n.p50_us, ".2f"), _fmt(n.p99_us, ".2f"),
                      _fmt(n.p999_us, ".2f"), _fmt(n.nic_util * 100, ".0f"), _fmt(n.cpu_pct, ".0f"),
                      _fmt(n.rss_mib, ".0f"), fmt_rate(n.verbs_per_s),
                      fmt_mem(n.mem_used, n.mem_capacity) if n.mem_capacity else "",
                      fmt_bytes(n.reclaimed) if n.reclaimed is not None else "")
    table.add_section()
    table.add_row(Text("rack", style="bold"), "", "", "", Text(_fmt(view.total_kops, ".1f"), style="bold"),
                  _fmt(view.p50_us, ".2f"), _fmt(view.p99_us, ".2f"), _fmt(view.p999_us, ".2f"), "", "", "",
                  fmt_rate(view.verbs_per_s),
                  fmt_mem(view.mem_used, view.mem_capacity) if view.mem_capacity else "",
                  fmt_bytes(view.reclaimed) if view.reclaimed is not None else "")
    return table


def _history_table(view: RackView) -> Table:
    table = Table(expand=True, box=None, show_header=False, pad_edge=False)
    table.add_column("node", no_wrap=True)
    table.add_column("history", no_wrap=True, ratio=1)
    table.add_column("now", justify="right", no_wrap=True)
    for n in view.nodes:
        if n.role in ("compute", "client") or any(v for v in n.history if v):
            table.add_row(n.name, Text(sparkline(n.history, HISTORY), style="green"),
                          f"{_fmt(n.kops, '.1f')} kops/s")
    return table


def _device_table(view: RackView) -> Table | None:
    """DPUs, DPAs and memory nodes with cores: what their actors keep busy (None: the rack has none)."""
    devs = [n for n in view.nodes if n.device is not None]
    if not devs:
        return None
    table = Table(expand=True, box=None, header_style="bold", pad_edge=False)
    for col in ("node", "role", "cores", "busy %", "DPA threads", "stalled %", "DMA Gbit/s", "ring depth",
                "RX queued", "UDP drops", "resends", "NIC %"):
        table.add_column(col, justify="left" if col in ("node", "role") else "right", no_wrap=True)
    for n in devs:
        d = n.device
        table.add_row(n.name, n.role, str(d.cores) if d.cores else "–", _fmt(None if d.busy is None else d.busy * 100, ".0f"),
                      str(d.threads) if d.threads else "–",
                      _fmt(None if d.stalled is None else d.stalled * 100, ".0f"), _fmt(d.dma_gbps, ".2f"),
                      f"{d.ring_depth:,}", f"{d.rx_queued:,}", f"{d.udp_dropped:,}", f"{d.udp_resends:,}", _fmt(n.nic_util * 100, ".0f"))
    return table


SYSTEM_PAIRS = 4                    # counters per line of the system panel


def _system_panel(view: RackView, title_info: dict) -> Panel | None:
    """The system's own counters that are not 0, summed over the compute nodes (None: it
    publishes none)."""
    if not view.system:
        return None
    shown = [(k, v) for k, v in view.system if v]
    table = _pairs_table([(k, f"{v:,}" if isinstance(v, int) else f"{v:,.4g}") for k, v in shown])
    zero = len(view.system) - len(shown)
    title = (f"{title_info.get('system', 'system')} counters (statistics(), summed over the compute nodes"
             + (f"; {zero} at 0 not shown" if zero else "") + ")")
    body = table if shown else Text(f"all {len(view.system)} counters are 0 so far", style="dim")
    return Panel(body, title=title, border_style="dim")


def _pairs_table(pairs) -> Table:
    """(name, shown value) pairs, SYSTEM_PAIRS to a row: a panel of counters."""
    table = Table(expand=True, box=None, show_header=False, pad_edge=False)
    for _ in range(SYSTEM_PAIRS):
        table.add_column(style="dim", no_wrap=True, overflow="ellipsis")
        table.add_column(justify="right", style="bold", no_wrap=True)
    for i in range(0, len(pairs), SYSTEM_PAIRS):
        table.add_row(*[cell for pair in pairs[i:i + SYSTEM_PAIRS] for cell in pair])
    return table


def _fmt_counter(c, v: int) -> str:
    """A counter's value in its declared unit."""
    if c.unit == "bytes":
        return fmt_bytes(v)
    if c.unit == "ns":
        return fmt_vtime(v)
    return f"{v:,}"


def _counters_panel(view: RackView) -> Panel | None:
    """The declared counters no table shows, those that are not 0, summed over the nodes (None:
    all are 0, which is every counter declared today: see _PANEL_COUNTERS)."""
    shown = [(c, v) for c, v in view.counters if v]
    if not shown:
        return None
    table = _pairs_table([(c.name, _fmt_counter(c, v)) for c, v in shown])
    return Panel(table, title="counters (summed over the nodes)", border_style="dim")


def render(view: RackView, title_info: dict):
    """The dashboard frame for ``view`` (a rich renderable)."""
    header = Panel(Group(_title_line(title_info), *_status_lines(view)), title="dmrack", border_style="cyan")
    nodes = Panel(_node_table(view), title="nodes (latency over the current step)", border_style="dim")
    hist = Panel(_history_table(view), title=f"modelled throughput, last {HISTORY} updates",
                 border_style="dim")
    ev = Text("\n".join(view.events) if view.events else "(no events yet)")
    events = Panel(ev, title="events", border_style="dim")
    own = [p for p in (_counters_panel(view), _system_panel(view, title_info)) if p is not None]
    table = _device_table(view)
    if table is None:
        return Group(header, nodes, *own, hist, events)
    devices = Panel(table, title="devices (rates over the last update's virtual time; NIC shared with the host)",
                    border_style="dim")
    return Group(header, nodes, devices, *own, hist, events)


def plain_line(view: RackView) -> str:
    """One line per interval for logs and non-terminals."""
    mops = None if view.total_kops is None else view.total_kops / 1e3
    return (f"[{view.phase or '-'}] vtime {fmt_vtime(view.vnow_ns)} | {_fmt(mops, '.3f')} Mops/s | "
            f"p50/p99 {_fmt(view.p50_us, '.2f')}/{_fmt(view.p99_us, '.2f')} us | speed {fmt_speed(view.speed)} | "
            f"verbs/s {fmt_rate(view.verbs_per_s)} | ops {view.ops}"
            + ("" if view.txn is None else
               f" | txn committed/aborted {fmt_rate(view.txn.committed_per_s)}/{fmt_rate(view.txn.aborted_per_s)} "
               f"abort rate {view.txn.abort_rate:.1%} p50/p99 {_fmt(view.txn.p50_us, '.2f')}/"
               f"{_fmt(view.txn.p99_us, '.2f')} us"))


def _event_line(ev) -> str:
    return f"{fmt_vtime(ev.vtime_ns):>12}  {ev.kind:<10} {ev.node:<8} {ev.text}"


# -- reporters ----------------------------------------------------------------------------------


class ReporterStats(NamedTuple):
    mode: str
    updates: int                    # frames computed
    skipped: int                    # update() calls inside the interval
    events: int                     # plane events shown
    notes: int
    psutil_errors: int


class _Reporter:
    """Polling, metrics and the event feed shared by the dashboard and the plain reporter."""

    mode = "plain"
    #: The supervisor logs what it sees (deaths, stops) to the plane's event log only when its view
    #: shows that log; a view that does not gets them as notes (cluster/supervisor.py).
    shows_events = True

    def __init__(self, title_info: dict, plane: StatsPlane, *, console: Console | None = None,
                 interval_s: float = 0.5, clock=time.monotonic_ns):
        if not isinstance(title_info, dict):
            raise TypeError(f"title_info must be a dict with keys {', '.join(TITLE_KEYS)}")
        missing = [k for k in TITLE_KEYS if k not in title_info]
        if missing:
            raise ValueError(f"title_info lacks {', '.join(missing)} (needs {', '.join(TITLE_KEYS)})")
        interval_s = float(interval_s)
        if not (interval_s >= 0 and math.isfinite(interval_s)):
            raise ValueError(f"interval_s must be >= 0 seconds, got {interval_s}")
        self.title_info = dict(title_info)
        self.plane = plane
        self.console = console if console is not None else Console()
        self.interval_ns = int(interval_s * 1e9)
        self._clock = clock
        self.meter = RackMeter()
        self.usage = ProcUsage()
        self._events: deque[str] = deque(maxlen=EVENT_LINES)
        self._since = 0
        self._last_t: int | None = None
        self._last_phase: str | None = None
        self.view: RackView | None = None
        self._updates = self._skipped = self._n_events = self._notes = 0
        self._started = False

    def start(self) -> None:
        self._started = True

    def stop(self) -> None:
        self._started = False

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def update(self, phase: str, *, force: bool = False) -> RackView | None:
        """Poll the plane and show a frame, unless the last one is younger than ``interval_s``
        and the phase is unchanged. Returns the new view (None when skipped)."""
        now = self._clock()
        if (not force and self._last_t is not None and phase == self._last_phase
                and now - self._last_t < self.interval_ns):
            self._skipped += 1
            return None
        self._last_t = now
        self._last_phase = phase
        snaps = self.plane.snapshot()
        usage = self.usage.sample(s.pid for s in snaps)
        fresh = self.plane.events(self._since)
        if fresh:
            self._since = fresh[-1].seq + 1
            self._n_events += len(fresh)
            for ev in fresh:
                self._events.append(_event_line(ev))
        view = self.meter.update(snaps, now_ns=now, phase=phase, usage=usage)
        self.view = view = view._replace(events=tuple(self._events))
        self._updates += 1
        self._show(view, fresh)
        return view

    def note(self, text: str) -> None:
        """Add a line of the supervisor's own to the event panel (not to the plane's log)."""
        line = f"{'note':>12}  {text}"
        self._events.append(line)
        self._notes += 1
        self._show_note(line)

    def _show(self, view: RackView, fresh) -> None:
        for ev in fresh:
            if ev.kind != "phase":          # how the run ended: said once, after the summary
                self.console.print(_event_line(ev), markup=False, highlight=False)
        self.console.print(plain_line(view), markup=False, highlight=False)

    def _show_note(self, line: str) -> None:
        self.console.print(line, markup=False, highlight=False)

    def statistics(self) -> ReporterStats:
        return ReporterStats(self.mode, self._updates, self._skipped, self._n_events, self._notes,
                             self.usage.errors)


class PlainReporter(_Reporter):
    """One line per interval (phase, vtime, Mops/s, p99, emulation speed); events as they arrive."""


class Dashboard(_Reporter):
    """The live rich dashboard; falls back to plain lines when the console is not a terminal."""

    def __init__(self, title_info: dict, plane: StatsPlane, *, live: bool | None = None,
                 console: Console | None = None, interval_s: float = 0.5, clock=time.monotonic_ns):
        super().__init__(title_info, plane, console=console, interval_s=interval_s, clock=clock)
        self.live = self.console.is_terminal if live is None else bool(live)
        self.mode = "live" if self.live else "plain"
        self._live = None

    def renderable(self):
        """The current frame (after at least one update), e.g. to print it once."""
        if self.view is None:
            raise RuntimeError("no frame yet: call update(phase) first")
        return render(self.view, self.title_info)

    def start(self) -> None:
        super().start()
        if self.live and self._live is None:
            from rich.live import Live
            # Frames are pushed by update(); no refresh thread, so nothing redraws mid-frame.
            self._live = Live(console=self.console, auto_refresh=False, transient=False)
            self._live.start()

    def stop(self) -> None:
        if self._live is not None:
            if self.view is not None:
                self._live.update(self.renderable(), refresh=True)
            self._live.stop()
            self._live = None
        super().stop()

    def _show(self, view: RackView, fresh) -> None:
        if not self.live:
            return super()._show(view, fresh)
        if self._live is not None:
            self._live.update(render(view, self.title_info), refresh=True)

    def _show_note(self, line: str) -> None:
        if not self.live:
            return super()._show_note(line)
        if self._live is not None and self.view is not None:
            self.view = self.view._replace(events=tuple(self._events))
            self._live.update(render(self.view, self.title_info), refresh=True)
