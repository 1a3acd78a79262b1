"""Figure specs: which rows of a result make which figure, declared beside the experiment.

A paper's figure is a small declaration in its experiment module, not drawing code::

    FIGURES = [
        Figure("fig4", experiment="fig4", metric="Mops", title="Fig. 4: READ throughput",
               xlabel="outstanding WRs per thread", ylabel="throughput (Mops)", xlog=True, xbase=2),
    ]

A figure takes the rows of one ``experiment`` with its ``metric`` (and, if given, only the listed
``series``), one line (or bar) per series, x from the rows' x. ``metric`` can name several panels
side by side (a tuple), and a panel several metrics (a tuple inside the tuple: p50 and p99 in one
latency panel); ``ylabel`` and ``ylog`` are then one per panel. Published values of those rows are
drawn as distinct markers. ``refs`` names headline metrics (x = "peak", "max": one value per
series, not a point of the curve) whose published value is drawn as a horizontal reference line,
or as a marker at the published x when the metric ``peak_at`` gives one ("peak Mops" at "threads
at peak"); ``xrefs`` names headline metrics whose published value is an x, drawn as a vertical
line ("threads at peak" alone).

Why declarative: the drawing code (:mod:`cluster.experiments.plot`) is written once, the specs
stay readable next to the rows they describe, and this module needs no matplotlib, so an
experiment module can import it for free. Why a fallback (:func:`automatic`): a result file
without a run record, or an experiment nobody wrote specs for, still gets one figure per
experiment and metric, so a new paper has plots with zero work and specs only refine them.
"""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass, replace

from cluster.experiments.rows import is_wall_clock


@dataclass(frozen=True)
class Figure:
    """One figure (one PNG): rows of ``experiment`` with ``metric``, by series. See the module doc."""
    id: str                                 # file name part, unique in a module: "fig5a"
    experiment: str                         # the rows' experiment
    metric: str | tuple                     # a metric, or one entry per panel (an entry: a metric or a tuple of them)
    title: str = ""
    xlabel: str = ""
    ylabel: str | tuple[str, ...] = ""      # one per panel
    xlog: bool = False
    ylog: bool | tuple[bool, ...] = False   # one per panel
    series: tuple[str, ...] | None = None   # only these series, in this order (None: all, as they come)
    kind: str = "line"                      # "line" or "bar"
    xbase: int = 10                         # log base of x (2 for batch sizes)
    refs: tuple[str, ...] = ()              # headline metrics drawn as published reference lines
    peak_at: str | None = None              # the headline metric giving the x of a ref's marker
    xrefs: tuple[str, ...] = ()             # headline metrics whose published value is an x (threads at peak)
    xs: str = "auto"                        # "numeric", "category" or "auto" (numeric x if any, else all)

    def __post_init__(self):
        if self.kind not in ("line", "bar"):
            raise ValueError(f"figure {self.id!r}: kind must be 'line' or 'bar', got {self.kind!r}")
        if self.xs not in ("auto", "numeric", "category"):
            raise ValueError(f"figure {self.id!r}: xs must be 'auto', 'numeric' or 'category', got {self.xs!r}")
        n = len(self.metric) if isinstance(self.metric, tuple) else 1
        for name in ("ylabel", "ylog"):
            v = getattr(self, name)
            if isinstance(v, tuple) and len(v) != n:
                raise ValueError(f"figure {self.id!r}: {name} has {len(v)} entries for {n} panels")

    def panels(self) -> list[tuple[tuple[str, ...], str, bool]]:
        """``[(metrics, ylabel, ylog)]``, one per panel."""
        entries = self.metric if isinstance(self.metric, tuple) else (self.metric,)
        out = []
        for i, entry in enumerate(entries):
            metrics = entry if isinstance(entry, tuple) else (entry,)
            ylabel = self.ylabel[i] if isinstance(self.ylabel, tuple) else (self.ylabel or ", ".join(metrics))
            ylog = self.ylog[i] if isinstance(self.ylog, tuple) else self.ylog
            out.append((metrics, ylabel, ylog))
        return out

    def metrics(self) -> set[str]:
        return {m for metrics, _, _ in self.panels() for m in metrics}


def numeric(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def select(fig: Figure, rows: list[dict]) -> list[dict]:
    """The rows a figure draws (its refs aside), in file order."""
    metrics = fig.metrics()
    got = [r for r in rows if r.get("experiment") == fig.experiment and r.get("metric") in metrics
           and (fig.series is None or r.get("series") in fig.series)]
    has_numeric = any(numeric(r["x"]) for r in got)
    if fig.xs == "numeric" or (fig.xs == "auto" and has_numeric):
        got = [r for r in got if numeric(r["x"])]
    elif fig.xs == "category":
        got = [r for r in got if not numeric(r["x"])]
    return got


def ref_rows(fig: Figure, rows: list[dict], metrics=None) -> list[dict]:
    """The headline rows drawn as published references: metric in ``refs`` (or ``metrics``), x
    not a number, a published value, a series the figure draws."""
    drawn = {r["series"] for r in select(fig, rows)}
    metrics = fig.refs if metrics is None else metrics
    return [r for r in rows if r.get("experiment") == fig.experiment and r.get("metric") in metrics
            and not numeric(r.get("x")) and r.get("published") is not None and r.get("series") in drawn]


def slug(text: str) -> str:
    """A file-name part: "p99 µs" -> "p99-us"."""
    return re.sub(r"[^A-Za-z0-9]+", "-", str(text).replace("µ", "u")).strip("-").lower() or "x"


def automatic(rows: list[dict], *, wall_clock: bool = False, experiments=None) -> list[Figure]:
    """One figure per experiment and metric: a line over numeric x, and a bar chart over the
    categories of x (when there are at least two such rows). Rows measuring real time are left
    out unless ``wall_clock``. ``experiments``: only these (None: all). The y axis is logarithmic
    when the values span more than a factor of 100."""
    out = []
    seen: dict[tuple[str, str], list[dict]] = {}
    for r in rows:
        if (experiments is not None and r["experiment"] not in experiments) or (is_wall_clock(r) and not wall_clock):
            continue
        seen.setdefault((r["experiment"], r["metric"]), []).append(r)
    for (exp, metric), got in seen.items():
        positive = [v for r in got for v in (r.get("emulated"), r.get("published")) if v is not None and v > 0]
        ylog = bool(positive) and max(positive) > 100 * min(positive)
        num = [r for r in got if numeric(r["x"])]
        cat = [r for r in got if not numeric(r["x"])]
        base = dict(experiment=exp, metric=metric, ylabel=metric, ylog=ylog)
        if num:     # a line over x; bars when every row has the same x (one point per series)
            kind = "bar" if len({r["x"] for r in num}) == 1 else "line"
            out.append(Figure(f"{slug(exp)}-{slug(metric)}", title=f"{exp}: {metric}", xs="numeric",
                              xlabel="x" if kind == "line" else "",
                              kind=kind, **base))
        if len(cat) >= 2:
            suffix = "-by-category" if num else ""
            out.append(Figure(f"{slug(exp)}-{slug(metric)}{suffix}", title=f"{exp}: {metric}", kind="bar",
                              xs="category", **base))
    return out


def declared(run: dict | None) -> list[Figure] | None:
    """The figures of the experiment that made the run (found through ``run["command"]``,
    "reproduce smart" or "bench ycsb (race)"; its ``Experiment.figures``), or None: no run record,
    an unknown command, an experiment that declares none."""
    command = (run or {}).get("command") or ""
    words = command.split()
    if len(words) < 2:
        return None
    from cluster.experiments.registry import KINDS, find
    if words[0] not in KINDS:
        return None
    try:
        exp = find(words[0], words[1])
    except ValueError:
        return None
    return list(exp.figures) or None


#: The figure of a transactional ``dmrack run`` (its "transactions" rows, cluster/results.py
#: ``TXN_METRICS``): committed and aborted transactions per second, the abort rate and the committed
#: transactions' latency, a bar per step.
RUN_FIGURES = (
    Figure("transactions", experiment="transactions",
           metric=(("committed txn/s", "aborted txn/s"), "abort rate %", ("txn p50 µs", "txn p99 µs", "txn p99.9 µs")),
           title="Transactions by step", xlabel="step",
           ylabel=("transactions per second (virtual)", "aborted attempts (%)", "committed latency (µs)"),
           kind="bar", xs="category"),
)


def figures_for(run: dict | None, rows: list[dict]) -> list[Figure]:
    """The figures of a result: the declared ones that have rows, then automatic figures for the
    experiments no declared figure covers (all of them when nothing is declared)."""
    own = list(RUN_FIGURES) if (run or {}).get("command") == "run" else declared(run) or []
    specs = [f for f in own if select(f, rows)]
    covered = {f.experiment for f in specs}
    rest = [r for r in rows if r["experiment"] not in covered]
    command = (run or {}).get("command") or ""
    # wall-clock rows get figures only in the speed bench (or a file of nothing else, without a record)
    wall = command.startswith("bench speed") or (run is None and bool(rows) and all(map(is_wall_clock, rows)))
    out, ids = [], set()
    for f in specs + automatic(rest, wall_clock=wall):      # file names must not collide
        k, fid = 2, f.id
        while fid in ids:
            fid, k = f"{f.id}-{k}", k + 1
        ids.add(fid)
        out.append(f if fid == f.id else replace(f, id=fid))
    return out


def stem(run: dict | None, fallback: str) -> str:
    """The file-name stem of a run's outputs: "reproduce-smart", "bench-ycsb-race"; ``fallback``
    (a result file's name) without a run record."""
    command = (run or {}).get("command")
    return slug(command) if command else slug(fallback)


def caption(run: dict | None, width: int = 110) -> str:
    """Where the numbers came from, for the foot of a figure: command, quick or full, profile,
    scale, commit, date."""
    if not run:
        return ("no run record (a result file from before provenance was recorded): "
                "scale, profile and commit not recorded")
    setup = run.get("setup") or {}
    commit = run.get("git_commit")
    parts = [f"dmrack {run.get('command', '?')} {'--quick' if run.get('quick') else '(full)'}"]
    if setup.get("profile"):
        parts.append(f"profile {setup['profile']}")
    if setup.get("scale"):
        parts.append(f"scale: {setup['scale']}")
    dirty = " (dirty)" if run.get("git_dirty") else ""
    parts.append(f"commit {commit[:10]}{dirty}" if commit else "commit not recorded")
    if run.get("started_utc"):
        parts.append(run["started_utc"])
    return "\n".join(textwrap.wrap(" · ".join(parts), width))
