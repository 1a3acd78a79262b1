"""``dmrack compare OLD.json NEW.json``: what changed between two runs of ``dmrack bench`` or
``dmrack reproduce`` (their ``--json`` files, lists of :class:`cluster.experiments.rows.Row`).

Design, and why:

* Rows are matched by their key (experiment, series, x, metric), not by position: a run with a
  different ``--only`` or a new part adds or drops rows without shifting every other one. Rows
  whose key is in only one file are listed as added or removed and are not a failure. Should a file
  repeat a key, its k-th row with that key is matched with the other file's k-th, so nothing is
  silently dropped.
* A row *moved* when its ``emulated`` value differs. The default tolerance is 0 because the
  emulator is deterministic for a seed (a co-located rack in virtual time): any change is a
  change in behaviour and worth seeing. ``tolerance_pct`` lets noisy rows through
  (a relative move up to that many percent counts as unchanged).
* Rows that measure wall-clock speed (a metric with the word ``real`` or ``wall``: "verbs/s
  real", "virtual µs per real s", "wall s") differ between any two runs, so by default they are
  listed apart as "wall-clock rows (not compared)" and neither counted as moved nor given a
  verdict change; ``include_real`` compares them like any row.
* A row with a ``published`` value has a verdict: "within" when |emulated/published - 1| <= 0.30
  (the ±30 % the docs use), else "outside" (a row with no emulated value is outside), and a ratio
  row a direction (held when on the paper's side of 1, :func:`cluster.experiments.rows.direction`).
  The exit status tells a regression from a change: 1 only when some row was within in OLD and is
  outside in NEW, or held its direction in OLD and not in NEW; 0 otherwise (moves, added or removed
  rows, better verdicts and directions are reported, not failed); 2 for a file that is not a list of
  rows (:class:`BadRows`, a ValueError: one line at the command line).
* What a run claims can change without a number moving: a row's published value or its kind (a
  result becoming a direction row, say) is listed as a *claim change*, and the headline counts of
  both files (rows within ±30 %, directions held: :func:`cluster.experiments.rows.counts`, what
  ``dmrack report`` prints) come last, so a change to the model or to the rows reads as "35 of 68
  within -> 33 of 59" beside the rows that made it.

This module is a helper of the experiments package and declares no ``EXPERIMENT``, so the
registry imports it like ``rows`` and finds nothing to run. It imports only the standard library
and ``rows`` (rich when printing), so ``dmrack compare`` does not pay for the fabric.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from cluster.experiments.rows import (WITHIN, BadRows, counts, direction, dump_json, fmt,  # noqa: F401
                                      is_wall_clock, load_rows, verdict)


def key_of(row: dict) -> tuple:
    x = row["x"]
    if isinstance(x, float) and x.is_integer():
        x = int(x)                  # 16 and 16.0 are one point
    return (str(row["experiment"]), str(row["series"]), x if isinstance(x, (int, float)) else str(x),
            str(row["metric"]))


def _keyed(rows: list[dict]) -> dict[tuple, dict]:
    """key -> row; the k-th repeat of a key gets the key plus (k,) so repeats match in order."""
    out: dict[tuple, dict] = {}
    seen: dict[tuple, int] = {}
    for row in rows:
        k = key_of(row)
        n = seen.get(k, 0)
        seen[k] = n + 1
        out[k if n == 0 else (*k, n)] = row
    return out


@dataclass
class Comparison:
    old_path: str
    new_path: str
    tolerance_pct: float
    include_real: bool
    compared: int = 0                                      # rows in both files, compared
    moved: list[dict] = field(default_factory=list)
    added: list[dict] = field(default_factory=list)        # rows only in NEW
    removed: list[dict] = field(default_factory=list)      # rows only in OLD
    wall_clock: list[dict] = field(default_factory=list)   # in both, not compared
    verdict_changes: list[dict] = field(default_factory=list)
    direction_changes: list[dict] = field(default_factory=list)
    claim_changes: list[dict] = field(default_factory=list)   # published value or kind changed
    fidelity: dict = field(default_factory=dict)             # {"old": counts, "new": counts}

    @property
    def identical(self) -> int:
        return self.compared - len(self.moved)

    @property
    def worse(self) -> list[dict]:
        return [v for v in self.verdict_changes if v["change"] == "worse"]

    @property
    def lost(self) -> list[dict]:
        """Directions held in OLD and not in NEW."""
        return [v for v in self.direction_changes if v["change"] == "worse"]

    @property
    def status(self) -> int:
        """The exit status: 1 when some verdict got worse or some direction was lost, else 0."""
        return 1 if self.worse or self.lost else 0

    def counts(self) -> dict:
        return {"compared": self.compared, "identical": self.identical, "moved": len(self.moved),
                "added": len(self.added), "removed": len(self.removed), "wall_clock": len(self.wall_clock),
                "verdicts_worse": len(self.worse), "verdicts_better": len(self.verdict_changes) - len(self.worse),
                "directions_lost": len(self.lost), "directions_gained": len(self.direction_changes) - len(self.lost),
                "claims_changed": len(self.claim_changes)}

    def to_dict(self) -> dict:
        return {"old": self.old_path, "new": self.new_path, "tolerance_pct": self.tolerance_pct,
                "include_real": self.include_real, "counts": self.counts(), "fidelity": self.fidelity,
                "moved": self.moved, "added": self.added, "removed": self.removed,
                "verdict_changes": self.verdict_changes, "direction_changes": self.direction_changes,
                "claim_changes": self.claim_changes, "wall_clock": self.wall_clock}


def _ident(row: dict) -> dict:
    return {k: row[k] for k in ("experiment", "series", "x", "metric")}


def compare_rows(old: list[dict], new: list[dict], *, tolerance_pct: float = 0.0, include_real: bool = False,
                 old_path: str = "OLD", new_path: str = "NEW") -> Comparison:
    """Compare two lists of rows (see the module docstring); every list in the result is in
    experiment order (experiments in the order they first appear in NEW, then OLD; rows in file order)."""
    if not (tolerance_pct >= 0 and math.isfinite(tolerance_pct)):
        raise ValueError(f"--tolerance must be a percentage >= 0, got {tolerance_pct:g}")
    old_k, new_k = _keyed(old), _keyed(new)
    exp_rank: dict[str, int] = {}
    pos: dict[tuple, int] = {}
    for i, (k, row) in enumerate([*new_k.items(), *old_k.items()]):
        exp_rank.setdefault(k[0], len(exp_rank))
        pos.setdefault(k, i)
    order = sorted(set(old_k) | set(new_k), key=lambda k: (exp_rank[k[0]], pos[k]))
    c = Comparison(old_path, new_path, tolerance_pct, include_real)
    c.fidelity = {"old": counts(old), "new": counts(new)}
    for k in order:
        o, n = old_k.get(k), new_k.get(k)
        if o is None:
            c.added.append(n)
            continue
        if n is None:
            c.removed.append(o)
            continue
        a, b = o["emulated"], n["emulated"]
        delta = b - a if a is not None and b is not None else None
        rel = 100.0 * delta / abs(a) if delta is not None and a != 0 else None
        entry = {**_ident(n), "old": a, "new": b, "delta": delta, "delta_pct": rel}
        if not include_real and (is_wall_clock(o) or is_wall_clock(n)):
            c.wall_clock.append(entry)
            continue
        c.compared += 1
        if a != b and not (tolerance_pct > 0 and rel is not None and abs(rel) <= tolerance_pct):
            c.moved.append(entry)
        vo, vn = verdict(o), verdict(n)
        if vo is not None and vn is not None and vo != vn:
            c.verdict_changes.append({**_ident(n), "published": n.get("published"), "old": a, "new": b,
                                      "old_verdict": vo, "new_verdict": vn,
                                      "change": "worse" if vo == "within" else "better"})
        do, dn = direction(o), direction(n)
        if do is not None and dn is not None and do != dn:
            c.direction_changes.append({**_ident(n), "published": n.get("published"), "old": a, "new": b,
                                        "old_direction": do, "new_direction": dn,
                                        "change": "worse" if do == "held" else "better"})
        po, pn, ko, kn = o.get("published"), n.get("published"), o.get("kind", "result"), n.get("kind", "result")
        if po != pn or ko != kn:
            c.claim_changes.append({**_ident(n), "old_published": po, "new_published": pn, "old_kind": ko,
                                    "new_kind": kn, "old": a, "new": b})
    return c


def compare_files(old_path: str, new_path: str, **kw) -> Comparison:
    return compare_rows(load_rows(old_path), load_rows(new_path), old_path=old_path, new_path=new_path, **kw)


def _signed(v, suffix: str = "") -> str:
    if v is None:
        return "-"
    return ("+" if v > 0 else "") + fmt(float(v)) + suffix


NUMERIC = ("old", "new", "Δ", "Δ %", "emulated", "published")       # right-aligned columns
CHANGE = {"worse": "[red]worse[/]", "better": "[green]better[/]"}


def print_comparison(console, c: Comparison) -> None:
    from rich.table import Table

    def table(title, cols, rows):
        t = Table(title=title)
        for col in cols:
            t.add_column(col, justify="right" if col in NUMERIC else "left")
        for r in rows:
            t.add_row(*r)
        console.print(t)

    ident = lambda r: (str(r["experiment"]), str(r["series"]), str(r["x"]), str(r["metric"]))   # noqa: E731
    if c.moved:
        table(f"moved ({len(c.moved)})", ("experiment", "series", "x", "metric", "old", "new", "Δ", "Δ %"),
              [(*ident(r), fmt(r["old"]), fmt(r["new"]), _signed(r["delta"]), _signed(r["delta_pct"], " %"))
               for r in c.moved])
    for title, rows in (("added (only in NEW)", c.added), ("removed (only in OLD)", c.removed)):
        if rows:
            table(f"{title}: {len(rows)}", ("experiment", "series", "x", "metric", "emulated", "published"),
                  [(*ident(r), fmt(r["emulated"]), fmt(r.get("published"))) for r in rows])
    for what, title, changes in (("verdict", f"±{WITHIN * 100:.0f} % of published", c.verdict_changes),
                                 ("direction", "the published side of 1", c.direction_changes)):
        if changes:
            table(f"{what} changes ({title}): {len(changes)}",
                  ("experiment", "series", "x", "metric", "published", "old", "new", what),
                  [(*ident(r), fmt(r["published"]), fmt(r["old"]), fmt(r["new"]),
                    f"{r['old_' + what]} -> {r['new_' + what]} ({CHANGE[r['change']]})") for r in changes])
    if c.claim_changes:
        def claim(p, k):
            return fmt(p) + ("" if k == "result" else f" ({k})")
        table(f"claim changes (published value or row kind): {len(c.claim_changes)}",
              ("experiment", "series", "x", "metric", "old claim", "new claim", "emulated"),
              [(*ident(r), claim(r["old_published"], r["old_kind"]), claim(r["new_published"], r["new_kind"]),
                fmt(r["new"])) for r in c.claim_changes])
    if c.wall_clock:
        table(f"wall-clock rows (not compared): {len(c.wall_clock)}",
              ("experiment", "series", "x", "metric", "old", "new", "Δ %"),
              [(*ident(r), fmt(r["old"]), fmt(r["new"]), _signed(r["delta_pct"], " %")) for r in c.wall_clock])
    tol = f" (within {c.tolerance_pct:g} %)" if c.tolerance_pct else ""
    extra = [f"{n} {what}" for n, what in ((len(c.added), "added"), (len(c.removed), "removed"),
                                          (len(c.wall_clock), "wall-clock not compared")) if n]
    console.print(f"{c.identical} of {c.compared} rows identical{tol}"
                  + (f"; {', '.join(extra)}" if extra else ""), highlight=False)
    if c.fidelity:
        console.print("fidelity: " + " -> ".join(_fidelity(c.fidelity[side]) for side in ("old", "new")),
                      highlight=False)
    worse = len(c.worse)
    if worse:
        console.print(f"[red]{worse} verdict(s) got worse[/] (within ±{WITHIN * 100:.0f} % in OLD, outside in NEW)")
    if c.lost:
        console.print(f"[red]{len(c.lost)} direction(s) lost[/] (held in OLD, not in NEW)")


def _fidelity(f: dict) -> str:
    """One file's headline counts, as ``dmrack report`` states them."""
    dirs = f", {f['held']} of {f['directions']} directions held" if f["directions"] else ""
    inputs = f" (inputs apart: {f['input_within']} of {f['input']} within)" if f.get("input") else ""
    return f"{f['within']} of {f['published']} within ±{WITHIN * 100:.0f} %{dirs}{inputs}"


def write_json(path: str, c: Comparison) -> None:
    dump_json(path, c.to_dict(), ensure_ascii=False)
