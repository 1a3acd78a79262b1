"""Rows and tables shared by every ``dmrack bench`` suite and ``dmrack reproduce`` paper: each
result is one record of (experiment, series, x, metric, emulated, published), printed as a rich
table per experiment and optionally written as JSON, so all suites read, plot and compare alike.

The JSON file of a run (``--json``) is one object::

    {"format": "dmrack-result/1", "run": {...provenance...}, "rows": [{...}, ...]}

``run`` says where the numbers came from (:mod:`cluster.experiments.provenance`: command, parts,
quick or full, dmrack version and git commit, profile, spec, seed, scale, wall time, machine), so
a figure or a report made from the file later can say it too. Files written before the run
record existed are a plain list of rows; :func:`load_result` reads both, with ``run`` None for the
old kind, so every reader (compare, plot, report) takes either. It also reads the results of
``dmrack run`` / ``dmrack up`` (``--out``/``--json``, format ``dmrack.results/2``) as rows without
published values (``cluster.results.document_rows``: per step, node and kind, throughput and
latencies), so two runs of a rack compare and go into a report like any other result.

A module's parts run through :func:`run_experiments`; :func:`reproduction` and :func:`bench` make
a module's declaration (:class:`cluster.experiments.registry.Experiment`) from its parts, setup,
figures and title, its ``run`` included, so that every paper runs, prints and records alike and a
paper module holds its experiments and nothing else.
"""

from __future__ import annotations

import json
import math
import os
import re
import time
from dataclasses import asdict, dataclass, replace
from typing import NamedTuple

from cluster.experiments.registry import Experiment

FORMAT = "dmrack-result/1"
KEYS = ("experiment", "series", "x", "metric", "emulated", "published")
WITHIN = 0.30                     # a verdict is "within" when |emulated/published - 1| <= WITHIN
_WALL = re.compile(r"\b(real|wall)\b", re.I)


#: What a row is (``Row.kind``): a **result** is a measurement put beside what the paper measured
#: (it gets a verdict and, for a ratio, a direction); a **scale** row states the run's setup beside
#: the paper's ("clients: emulated 32, published 200", "1 / scale"), a choice of the reproduction,
#: not a fidelity claim: it gets neither, so a count of rows within ±30 % counts results only. A
#: **direction** row is a point of which the paper states only the side of 1 (a figure inside a
#: range the text gives over several figures: PD3's "1.5x to 11x ... across all the applications"
#: says each application's PD3 is the fastest, and only the smallest and the largest over all of
#: them are 1.5 and 11); its ``published`` is the range's end on that side: it gets a direction,
#: not a verdict. An **at most** or **at least** row puts a value beside a bound the paper states
#: ("RACE stays under 11.4 Mops", "PD3 without prefetching does not outperform the baselines",
#: "differences under 10 %"): it is within when it is on the bound's side or beyond it by at most
#: ±30 % (:func:`verdict`), and a ratio has a direction when the bound itself is on one side of 1.
#: An **input** row puts the emulated value beside a published one that a constant of the model was
#: set from: derived from that number (a rate turned into a unit time, the rest of a latency budget)
#: or fitted to it with others (every point of a least-squares fit). Its verdict says whether the
#: calibration still holds, but it tests nothing the constant was not chosen for, so it is counted
#: apart from the published rows (:func:`counts`), and its direction is not counted either.
KINDS = ("result", "scale", "direction", "at most", "at least", "input")
#: the kinds that get no ±30 % verdict, so are not counted among a run's published rows
UNJUDGED = ("scale", "direction")
#: the kinds that are not tests of the model: counted apart from the published rows
UNCOUNTED = UNJUDGED + ("input",)


@dataclass
class Row:
    experiment: str
    series: str
    x: float | int | str
    metric: str
    emulated: float | None
    published: float | None = None
    #: where ``published`` comes from (paper and section, artifact file), when the row carries it
    source: str | None = None
    kind: str = "result"

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"row kind {self.kind!r} is not one of {', '.join(KINDS)}")


def beside(points, key, source: str) -> dict:
    """The ``published`` and ``source`` of a :class:`Row` whose point a published table may hold
    (an artifact's CSV by thread count, say): the table's value at ``key`` and where it comes from,
    or neither where the table has no such point. ``Row(..., emulated, **beside(table, t, SOURCE))``."""
    pub = points.get(key)
    return {"published": pub, "source": source if pub is not None else None}


def scale_row(experiment: str, series: str, x, metric: str, emulated, published=None) -> Row:
    """A row that states the run's scale beside the paper's (``kind = "scale"``: no verdict)."""
    return Row(experiment, series, x, metric, emulated, published, kind="scale")


def direction_row(experiment: str, series: str, x, metric: str, emulated, published) -> Row:
    """A ratio of which the paper states only the side of 1 at this point (``kind = "direction"``:
    no verdict, see :data:`KINDS`)."""
    return Row(experiment, series, x, metric, emulated, published, kind="direction")


def bound_row(experiment: str, series: str, x, metric: str, emulated, bound, side: str) -> Row:
    """A value beside a bound the paper states (``side`` "at most" or "at least", :data:`KINDS`)."""
    return Row(experiment, series, x, metric, emulated, bound, kind=side)


def input_row(experiment: str, series: str, x, metric: str, emulated, published, source: str | None = None) -> Row:
    """A row beside a published value a constant of the model was set from (``kind = "input"``:
    a verdict, counted apart; see :data:`KINDS`)."""
    return Row(experiment, series, x, metric, emulated, published, source, kind="input")


def renamed(rows: list[Row], experiment: str) -> list[Row]:
    """Another part's rows (a bench's, a helper module's) as rows of ``experiment``, everything else
    kept: the source, and the kind, so a reproduction that reuses a measurement claims what it did."""
    return [replace(r, experiment=experiment) for r in rows]


def is_scale(row: dict) -> bool:
    """Whether the row states the setup (:data:`KINDS`); rows of files written before kinds existed
    are results."""
    return row.get("kind") == "scale"


def fmt(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:,.2f}" if abs(v) < 1000 else f"{v:,.0f}"
    return str(v)


def print_rows(console, title: str, rows: list[Row]) -> None:
    from rich.table import Table
    table = Table(title=title)
    for col in ("series", "x", "metric", "emulated", "published"):
        table.add_column(col, justify="right" if col in ("emulated", "published") else "left")
    for r in rows:
        metric = f"{r.metric} ({r.kind})" if r.kind != "result" else r.metric
        table.add_row(str(r.series), str(r.x), metric, fmt(r.emulated), fmt(r.published))
    console.print(table)


def check_json_path(path: str | None) -> None:
    """Fail before a long benchmark, not after it, when the JSON file cannot be written."""
    if path and not os.path.isdir(os.path.dirname(os.path.abspath(path))):
        raise FileNotFoundError(f"--json {path}: no such directory")


def dump_json(path: str, data, **kw) -> None:
    """Write ``data`` as JSON to ``path`` whole or not at all (a stopped run leaves no half file)."""
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump(data, f, indent=1, **kw)
    os.replace(tmp, path)


class Rows(list):
    """The rows a run returns (a list of :class:`Row`), with the run's provenance record as ``run``."""
    run: dict | None = None


def _row_dict(r: Row) -> dict:
    """A row as JSON: ``source`` only when the row names one, ``kind`` only for a row that is not a
    result (result rows keep the old keys, so files of older versions and of this one compare alike)."""
    d = asdict(r)
    if d.get("source") is None:
        d.pop("source", None)
    if d.get("kind") == "result":
        d.pop("kind", None)
    return d


def result_dict(rows: list[Row], run: dict | None) -> dict:
    return {"format": FORMAT, "run": run, "rows": [_row_dict(r) if isinstance(r, Row) else dict(r) for r in rows]}


def write_json(console, path: str, rows: list[Row], run: dict | None = None) -> None:
    dump_json(path, result_dict(rows, run if run is not None else getattr(rows, "run", None)))
    console.print(f"wrote {len(rows)} records to {path}")


class BadRows(ValueError):
    """A result file that cannot be read: missing, not JSON, not rows; one line naming it."""


def is_wall_clock(row: dict) -> bool:
    """Whether the row measures real (wall-clock) time, which differs between any two runs."""
    return bool(_WALL.search(str(row.get("metric", ""))))


def verdict(row: dict) -> str | None:
    """``"within"`` or ``"outside"`` ±30 % of the published value (for an at-most or at-least row: on
    the bound's side or past it by at most 30 %); None for a row with nothing published, for a scale
    row (:func:`is_scale`) and for a direction row (:data:`KINDS`)."""
    pub, emu = row.get("published"), row.get("emulated")
    kind = row.get("kind")
    if pub is None or pub == 0 or kind in UNJUDGED:
        return None
    if emu is None or not math.isfinite(emu):
        return "outside"
    if kind == "at most":         # on the bound's side, or past it by at most WITHIN
        return "within" if emu / pub <= 1 + WITHIN else "outside"
    if kind == "at least":
        return "within" if emu / pub >= 1 - WITHIN else "outside"
    return "within" if abs(emu / pub - 1) <= WITHIN else "outside"


# a row compares two things (and so has a direction) when its metric says ratio or growth or
# "x <baseline>" (times), or its series or x is "A / B" (FlexKV's "x RDMA_CAS", SMART's "p99 growth",
# "smart-ht / race", "zipf 0.99 / uniform", "d32/d8")
EVEN = 0.10                       # a published ratio within 10 % of 1 says "about even": no direction
_RATIO_METRIC = re.compile(r"ratio|growth|^x\s", re.I)
_RATIO_NAME = re.compile(r"\S\s*/\s*\S")


def is_comparison(row: dict) -> bool:
    """Whether the row is a ratio of two measurements (see :func:`direction`)."""
    series, x = str(row.get("series", "")), str(row.get("x", ""))
    return bool(_RATIO_METRIC.search(str(row.get("metric", ""))) or " / " in series
                or _RATIO_NAME.search(x))


def direction(row: dict) -> str | None:
    """``"held"`` or ``"not held"`` for a row whose published value is a ratio (:func:`is_comparison`):
    held when the emulated ratio is on the same side of 1 as the published one (the paper says A
    beats B, or A is below B, and so does the emulation), whatever the distance. None where no
    direction is defined: nothing published, a published ratio within :data:`EVEN` of 1 (the paper
    says "about even", as Sherman's skewed / uniform reads at 1.04: its verdict says whether the
    emulation is too), or a row that is not a ratio (a throughput, a thread count)."""
    pub, emu = row.get("published"), row.get("emulated")
    if pub is None or abs(pub - 1) < EVEN or not is_comparison(row) or is_scale(row):
        return None
    kind = row.get("kind")
    if (kind == "at most" and pub > 1) or (kind == "at least" and pub < 1):
        return None               # "at most 1.5" or "at least 0.8" says nothing of the side of 1
    if emu is None or not math.isfinite(emu):
        return "not held"
    return "held" if (emu > 1) == (pub > 1) and emu != 1 else "not held"


def counts(rows: list[dict]) -> dict:
    """Headline counts of a run's rows: ``published`` (result and bound rows with a published value,
    wall-clock rows aside), ``within``, ``outside``, ``directions`` (rows with a direction, direction rows
    included) and ``held``; ``scale``: rows that state the setup beside the paper's, ``direction``:
    rows of which the paper states only the side of 1 (neither has a verdict or is in ``published``);
    ``input``: rows beside a value a constant was set from, and ``input_within`` of them within ±30 %
    (a verdict, but not in ``published`` and their directions not in ``directions``)."""
    with_pub = [r for r in rows if r.get("published") is not None and not is_wall_clock(r)]
    pub = [r for r in with_pub if r.get("kind") not in UNCOUNTED]
    sided = [r for r in with_pub if r.get("kind") == "direction"]
    inputs = [r for r in with_pub if r.get("kind") == "input"]
    dirs = [direction(r) for r in pub + sided]
    return {"published": len(pub), "within": sum(verdict(r) == "within" for r in pub),
            "outside": sum(verdict(r) == "outside" for r in pub),
            "directions": sum(d is not None for d in dirs), "held": sum(d == "held" for d in dirs),
            "scale": sum(is_scale(r) for r in with_pub), "direction": len(sided),
            "input": len(inputs), "input_within": sum(verdict(r) == "within" for r in inputs)}


def _number(v) -> bool:
    return v is None or (isinstance(v, (int, float)) and not isinstance(v, bool))


def load_result(path: str) -> tuple[dict | None, list[dict]]:
    """``(run, rows)`` of a ``--json`` file of bench or reproduce, checked: the current object form
    or the older plain list of rows (``run`` None); or of the results of run or up (their rows,
    see the module docstring). :class:`BadRows` names the file and the problem."""
    try:
        with open(path) as f:
            text = f.read()
    except FileNotFoundError:
        raise BadRows(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise BadRows(f"{path}: cannot read it: {getattr(e, 'strerror', None) or e}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise BadRows(f"{path}: not JSON ({e.msg} at line {e.lineno} column {e.colno})") from None
    run = None
    if isinstance(data, dict) and "rows" in data and data.get("format") != FORMAT:
        # the results of dmrack run / up (--out, --json): rows of their own (cluster.results);
        # imported only for them, so that reading bench and reproduce files stays light
        from cluster.results import FORMAT as RUN_FORMAT, document_rows
        if data.get("format") != RUN_FORMAT:
            raise BadRows(f"{path}: format {str(data.get('format'))[:40]!r} is neither {FORMAT!r} (dmrack bench, "
                          f"reproduce) nor {RUN_FORMAT!r} (dmrack run, up): written by another version of dmrack?")
        try:
            return document_rows(data)
        except ValueError as e:
            raise BadRows(f"{path}: {e}") from None
    if isinstance(data, dict) and "rows" in data:
        run = data.get("run")
        if run is not None and not isinstance(run, dict):
            raise BadRows(f"{path}: 'run' is not an object")
        data = data["rows"]
    if not isinstance(data, list):
        kind = {dict: "object", str: "string", bool: "boolean", type(None): "null"}.get(type(data), "number")
        raise BadRows(f"{path}: not rows (a JSON {kind} without 'rows'); "
                      f"expected the --json file of dmrack bench or dmrack reproduce")
    for i, row in enumerate(data, 1):
        if not isinstance(row, dict):
            raise BadRows(f"{path}: row {i} is not an object ({json.dumps(row)[:40]})")
        missing = [k for k in KEYS if k not in row and k != "published"]
        if missing:
            raise BadRows(f"{path}: row {i} has no {', '.join(repr(k) for k in missing)}")
        for k in ("emulated", "published"):
            if not _number(row.get(k)):
                raise BadRows(f"{path}: row {i}: {k} is {json.dumps(row[k])[:40]}, not a number or null")
        if row.get("kind", "result") not in KINDS:
            raise BadRows(f"{path}: row {i}: kind {json.dumps(row['kind'])[:40]} is not one of {', '.join(KINDS)}")
    return run, data


def load_rows(path: str) -> list[dict]:
    """The rows of a ``--json`` file (either form), checked."""
    return load_result(path)[1]


class ExperimentsFailed(RuntimeError):
    """Points of some experiments failed (cluster.experiments.pointpool.PointsFailed); the other
    experiments ran, and their rows were printed and written. ``rows``: those rows; ``failed``:
    ``(experiment, [(point, error), ...])`` per experiment that lost points."""

    def __init__(self, rows: list[Row], failed: list[tuple[str, list[tuple[str, str]]]]):
        self.rows, self.failed = rows, failed
        super().__init__(f"{sum(len(f) for _, f in failed)} point(s) failed, in "
                         f"{', '.join(n for n, _ in failed)}; the other experiments' rows are complete")


def check_only(experiments, only) -> None:
    """Refuse an ``--only`` name that is not one of ``experiments`` (one line naming the choices).
    Runners call it before they print anything; :func:`run_experiments` calls it too."""
    for n in only or ():
        if n not in experiments:
            raise ValueError(f"unknown experiment {n!r}; choose from {', '.join(experiments)}")


def run_experiments(experiments: dict, *, only=None, quick: bool = False, json_path: str | None = None,
                    console=None, label: str, title_prefix: str = "", jobs: int = 1,
                    side_by_side: tuple = (), setup=None, title: str = "", options: dict | None = None) -> Rows:
    """Run the named experiments (``name -> fn(quick, progress) -> [Row]``) in order with a progress
    bar on stderr (:mod:`cluster.experiments.progress`), print each one's table as it finishes, and
    write every row as JSON at the end, with the run's provenance (``label`` is the command,
    ``reproduce smart``; ``setup(quick)`` the experiment's description of its racks,
    :mod:`cluster.experiments.provenance`). The
    experiments named in ``side_by_side`` are sweeps of fresh racks that also take ``jobs``: how
    many racks run at a time (cluster.experiments.pointpool), which does not change a figure.
    An experiment with a ``shared`` parameter gets this run's
    :class:`~cluster.experiments.pointpool.SharedPoints` (the points its parts measure once and
    share; a new one per call of this function).
    An experiment whose points failed (on a Dask cluster) prints one line per failed point and
    has no rows; the others run, and :class:`ExperimentsFailed` is raised after the JSON is written."""
    from functools import partial
    from inspect import signature

    from rich.console import Console

    from cluster.experiments import pointpool
    from cluster.experiments.pointpool import PointsFailed, SharedPoints
    from cluster.experiments.progress import Sweep
    from cluster.experiments.provenance import record, software
    if not isinstance(jobs, int) or jobs < 1:
        raise ValueError(f"jobs must be a whole number of processes, at least 1; got {jobs!r}")
    shared = SharedPoints()

    def bound(name, fn):
        kw = {"jobs": jobs} if name in side_by_side else {}
        if "shared" in signature(fn).parameters:
            kw["shared"] = shared
        return partial(fn, **kw) if kw else fn
    experiments = {name: bound(name, fn) for name, fn in experiments.items()}
    console = console or Console()
    check_only(experiments, only)
    names = list(experiments) if not only else list(only)
    check_json_path(json_path)
    started, t_start, code = time.time(), time.perf_counter(), software()
    rows = Rows()
    failed = []
    # parts side by side: sweeps of fresh racks on a fork pool of this machine (not on Dask, whose
    # cluster schedules the points of one sweep at a time), when there is more than one part
    side = jobs > 1 and bool(side_by_side) and pointpool.active() is None and len(names) > 1
    with Sweep(label, names) as sweep:
        parts = _parts_side_by_side(experiments, names, quick, sweep, jobs) if side else \
            _parts_in_order(experiments, names, quick, sweep)
        for n, got, seconds in parts:
            if isinstance(got, PointsFailed):
                for what, err in got.failures:
                    console.print(f"{title_prefix}{n}: point failed: {what}: {err}", markup=False, highlight=False)
                failed.append((n, got.failures))
                continue
            rows.extend(got)
            # side by side every part starts with the run and its points queue behind the earlier
            # parts' on the pool: its seconds say when it ended, not what it cost
            took = f"ended {seconds:.1f} s into the run" if side else f"{seconds:.1f} s real"
            print_rows(console, f"{title_prefix}{n}  ({took})", got)
    where = {}
    if side_by_side:
        dask = pointpool.active()
        where = {"dask": dask.address} if dask is not None else {"jobs": jobs}
    rows.run = record(label, title=title, parts=names, quick=quick, options={**where, **(options or {})},
                      setup=setup, started=started, wall_s=time.perf_counter() - t_start, code=code,
                      failed=[{"experiment": n, "point": what, "error": err} for n, fs in failed for what, err in fs])
    if json_path:
        write_json(console, json_path, rows)
    if failed:
        raise ExperimentsFailed(rows, failed)
    return rows


def _parts_in_order(experiments: dict, names: list, quick: bool, sweep):
    """Run the parts one after the other: ``(name, rows or PointsFailed, seconds)`` per part."""
    from cluster.experiments.pointpool import PointsFailed
    for n in names:
        t0 = time.perf_counter()
        try:
            got = experiments[n](quick, sweep.part(n))
        except PointsFailed as e:
            got = e
        yield n, got, time.perf_counter() - t0


class _Raised(NamedTuple):
    error: BaseException


def _parts_side_by_side(experiments: dict, names: list, quick: bool, sweep, jobs: int):
    """Run every part at once, each in a thread of this process, their sweeps of fresh racks on one
    pool of ``jobs`` workers for the run (cluster.experiments.pointpool, "Parts side by side"), and
    give ``(name, rows or PointsFailed, seconds)`` per part in the parts' order as each is done, so
    that the tables print and the rows are written as a run one after the other gives them (each
    rack is deterministic and shares nothing, so its figures do not depend on when it runs). A part
    that raises ends the run at once: the pool's workers are ended and the error raised here (the
    parts still measuring in this process run on in their threads until the process exits)."""
    import threading

    from cluster.experiments.pointpool import PointsFailed, run_pool
    outcome: dict = {}
    cond = threading.Condition()

    def run(n: str, rank: int) -> None:
        pool.rank(rank)                          # its points go before those of the parts after it
        t0 = time.perf_counter()
        progress = sweep.start(n)
        try:
            got = experiments[n](quick, progress)
        except PointsFailed as e:
            got = e
        except BaseException as e:              # handed to the main thread, which raises it
            got = _Raised(e)
        finally:
            sweep.end(n)
        with cond:
            outcome[n] = (got, time.perf_counter() - t0)
            cond.notify_all()

    with run_pool(jobs) as pool:
        for rank, n in enumerate(names):
            threading.Thread(target=run, args=(n, rank), name=f"dmrack-part-{n}", daemon=True).start()
        for n in names:
            with cond:
                while n not in outcome and not any(isinstance(g, _Raised) for g, _ in outcome.values()):
                    cond.wait(0.5)
                raised = next((g for g, _ in outcome.values() if isinstance(g, _Raised)), None)
                if raised is None:
                    got, seconds = outcome[n]
            if raised is not None:
                raise raised.error
            yield n, got, seconds


def _check_side_by_side(name: str, parts: dict, side_by_side: tuple) -> None:
    """A part declares ``jobs`` exactly when it is named in ``side_by_side``: a part that takes
    ``jobs`` but is not named is never given it and runs its racks one at a time (DPA-Store's
    Figs. 10 and 15 did, a third of ``reproduce dpastore --quick`` on one core); a named part that
    cannot take it fails when the run reaches it. Either is refused when the paper is declared."""
    from inspect import signature
    for part, fn in parts.items():
        takes = "jobs" in signature(fn).parameters
        if takes and part not in side_by_side:
            raise ValueError(f"reproduce {name}: part {part!r} takes jobs but is not in side_by_side "
                             f"(its racks would run one at a time)")
        if part in side_by_side and not takes:
            raise ValueError(f"reproduce {name}: part {part!r} is in side_by_side but takes no jobs")
    unknown = [p for p in side_by_side if p not in parts]
    if unknown:
        raise ValueError(f"reproduce {name}: side_by_side names parts it does not have: {', '.join(unknown)}")


def reproduction(name: str, short: str, *, title: str, parts: dict, setup, side_by_side: tuple = (),
                 figures=(), headline: tuple = (), profiles: tuple = (), check=None) -> Experiment:
    """The :class:`~cluster.experiments.registry.Experiment` of ``dmrack reproduce NAME``: every
    paper module declares its parts (``name -> fn(quick, progress[, jobs=][, shared=]) -> [Row]``,
    a dict read when the run starts), the parts made of fresh racks (``side_by_side``: they take
    ``--jobs``), ``setup(quick)`` (its racks, for the run record and the line that states the
    scale), its figures, title, headline parts and profiles, and gets its ``run`` from here.
    ``short`` names the paper in the tables' titles and the scale line ("SMART"); ``check()``, if
    given, refuses a run before anything runs (a system that is not registered: a ValueError of
    one line)."""
    _check_side_by_side(name, parts, side_by_side)

    def run(only=None, quick: bool = False, json_path: str | None = None, console=None, jobs: int = 1) -> Rows:
        from rich.console import Console
        check_only(parts, only)
        if check is not None:
            check()
        console = console or Console()
        console.print(f"{short} reproduction, scaled: {setup(quick)['scale']}", markup=False, highlight=False)
        return run_experiments(parts, only=only, quick=quick, json_path=json_path, console=console,
                               label=f"reproduce {name}", title_prefix=f"{short} ", jobs=jobs,
                               side_by_side=side_by_side, setup=setup, title=title)
    return Experiment(kind="reproduce", name=name, title=title, run=run, parts=tuple(parts), options=("jobs",),
                      headline=headline, profiles=profiles, setup=setup, figures=tuple(figures))


def bench(name: str, *, title: str, parts: dict, setup, figures=(), title_prefix: str = "") -> Experiment:
    """The :class:`~cluster.experiments.registry.Experiment` of ``dmrack bench NAME``: its parts run
    in one process, one after the other (no ``--jobs``); ``title_prefix`` starts each table's title."""

    def run(only=None, quick: bool = False, json_path: str | None = None, console=None) -> Rows:
        return run_experiments(parts, only=only, quick=quick, json_path=json_path, console=console,
                               label=f"bench {name}", title_prefix=title_prefix, setup=setup, title=title)
    return Experiment(kind="bench", name=name, title=title, run=run, parts=tuple(parts), setup=setup,
                      figures=tuple(figures))
