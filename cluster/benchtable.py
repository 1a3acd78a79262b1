"""Rows and tables shared by every ``dmrack bench`` suite: each result is one record of
(experiment, series, x, metric, emulated, published), printed as a rich table per experiment and
optionally written as a JSON list, so all suites read and compare alike."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass


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


def write_json(console, path: str, rows: list[Row]) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump([asdict(r) for r in rows], f, indent=1)
    os.replace(tmp, path)
    console.print(f"wrote {len(rows)} records to {path}")
