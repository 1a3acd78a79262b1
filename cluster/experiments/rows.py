"""Rows and tables shared by every ``dmrack bench`` suite and ``dmrack reproduce`` paper: each
result is one record of (experiment, series, x, metric, emulated, published), printed as a rich
table per experiment and optionally written as a JSON list, so all suites read and compare alike."""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass

from cluster.experiments.pointpool import PointsFailed


@dataclass
class Row:
    experiment: str
    series: str
    x: float | int | str
    metric: str
    emulated: float | None
    published: float | None = None


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
        table.add_row(str(r.series), str(r.x), r.metric, fmt(r.emulated), fmt(r.published))
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


def write_json(console, path: str, rows: list[Row]) -> None:
    dump_json(path, [asdict(r) for r in rows])
    console.print(f"wrote {len(rows)} records to {path}")


class ExperimentsFailed(RuntimeError):
    """Points of some experiments failed (cluster.experiments.pointpool.PointsFailed); the other
    experiments ran, and their rows were printed and written. ``rows``: those rows; ``failed``:
    ``(experiment, [(point, error), ...])`` per experiment that lost points."""

    def __init__(self, rows: list[Row], failed: list[tuple[str, list[tuple[str, str]]]]):
        self.rows, self.failed = rows, failed
        super().__init__(f"{sum(len(f) for _, f in failed)} point(s) failed, in "
                         f"{', '.join(n for n, _ in failed)}; the other experiments' rows are complete")


def run_experiments(experiments: dict, *, only=None, quick: bool = False, json_path: str | None = None,
                    console=None, label: str, title_prefix: str = "", jobs: int = 1,
                    side_by_side: tuple = ()) -> list[Row]:
    """Run the named experiments (``name -> fn(quick, progress) -> [Row]``) in order with a progress
    line, print each one's table as it finishes, and write every row as JSON at the end. The
    experiments named in ``side_by_side`` are sweeps of fresh racks that also take ``jobs``: how
    many racks run at a time (cluster.experiments.pointpool), which does not change a figure.
    An experiment whose points failed (on a Dask cluster) prints one line per failed point and
    has no rows; the others run, and :class:`ExperimentsFailed` is raised after the JSON is written."""
    from functools import partial

    from rich.console import Console
    if not isinstance(jobs, int) or jobs < 1:
        raise ValueError(f"jobs must be a whole number of processes, at least 1; got {jobs!r}")
    experiments = {name: (partial(fn, jobs=jobs) if name in side_by_side else fn) for name, fn in experiments.items()}
    console = console or Console()
    names = list(experiments) if not only else list(only)
    for n in names:
        if n not in experiments:
            raise ValueError(f"unknown experiment {n!r}; choose from {', '.join(experiments)}")
    check_json_path(json_path)
    rows: list[Row] = []
    failed = []
    with console.status("starting") as status:
        def progress(msg):
            status.update(f"[bold]{label}[/]: {msg}")
        for n in names:
            t0 = time.perf_counter()
            try:
                got = experiments[n](quick, progress)
            except PointsFailed as e:
                for what, err in e.failures:
                    console.print(f"{title_prefix}{n}: point failed: {what}: {err}", markup=False, highlight=False)
                failed.append((n, e.failures))
                continue
            rows.extend(got)
            print_rows(console, f"{title_prefix}{n}  ({time.perf_counter() - t0:.1f} s real)", got)
    if json_path:
        write_json(console, json_path, rows)
    if failed:
        raise ExperimentsFailed(rows, failed)
    return rows
