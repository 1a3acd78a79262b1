"""``dmrack sensitivity PAPER``: how much a reproduction's published rows lean on the profile
constants that have no published source.

Every shipped profile lists its unsourced knobs in its ``[assumptions]`` table (a value with no
published figure behind it, or one fitted only to make one figure come out). A reproduction whose
rows move a lot when such a knob moves is telling us less about the hardware than about the guess;
one whose rows hold is robust to it. This module measures which is which: it runs the
reproduction's *headline* parts (the cheap parts that carry its main claims, declared as
``Experiment.headline``; ``--only`` picks others) once as shipped and then once per assumption and
factor (by default 0.5x and 2x; integers rounded and kept inside the knob's legal range; a boolean
knob is flipped instead), and for each published row reports the value at 1x and at the factor, the
change in per cent, the ±30 % verdict at both and, for a ratio row, whether its direction held.

How a changed knob reaches every rack the experiment builds: the run is made inside
:func:`shm.profile.overridden`, so every ``load_profile`` of that profile -- through a rack spec,
a rig, a cost table -- returns it with the knob changed, and
:func:`cluster.experiments.pointpool.map_points` hands the same overrides to the worker processes
(or Dask workers) that run the points. The experiments need no argument for it. A key that a rack
spec overrides itself (``[profile_overrides]``) keeps the spec's value: it is then not the
profile's constant for that rack.

The result is a ``dmrack-result/1`` file (:mod:`cluster.experiments.rows`), so ``dmrack compare``,
``report`` and ``plot`` read it: its rows are the 1x rows as ``dmrack reproduce`` writes them, then
each variant's rows with ``[knob xF]`` after the part's name (and ``knob``, ``factor`` fields); its
``run.sensitivity`` holds the table. The file is rewritten after every variant, and a run given the
same ``--json`` again skips the variants it holds (same paper, parts and ``--quick``), so a long
run that stops loses at most the variant running then. ``--plot DIR`` draws a tornado chart per
published row (the change of each knob at its low and high factor, the knobs that move it most on
top; matplotlib).
"""

from __future__ import annotations

import math
import os
import sys
import time
from dataclasses import asdict, dataclass
from typing import Any, Callable

from cluster.experiments.compare import key_of
from cluster.experiments.rows import FORMAT, KEYS, WITHIN, Row, direction, dump_json, load_result, verdict

FACTORS = (0.5, 2.0)
MOVED_PCT = 1.0           # a row "moves" when it changes by more than this (per cent) at a factor


@dataclass(frozen=True)
class Variant:
    """One profile knob at one other value."""
    profile: str
    knob: str                    # "section.key"
    factor: float | None         # None: a boolean knob flipped
    base: Any                    # the shipped value
    value: Any                   # the value of this run

    @property
    def label(self) -> str:
        return f"{self.knob} {'flipped' if self.factor is None else f'x{self.factor:g}'}"

    @property
    def key(self) -> str:
        """Names the variant in a result file (resuming matches on it)."""
        return f"{self.profile}:{self.knob}={_show(self.value)}"


def _show(v) -> str:
    return str(v).lower() if isinstance(v, bool) else f"{v:g}" if isinstance(v, float) else str(v)


def parse_factors(text: str | None) -> tuple[float, ...]:
    """``--factors 0.5,2``: positive numbers other than 1; one line naming a bad one."""
    if text is None:
        return FACTORS
    out = []
    for part in text.split(","):
        part = part.strip()
        try:
            f = float(part)
        except ValueError:
            raise ValueError(f"--factors: {part!r} is not a number (give e.g. --factors 0.5,2)") from None
        if not math.isfinite(f) or f <= 0 or f == 1:
            raise ValueError(f"--factors: {part!r} must be a positive number other than 1")
        out.append(f)
    if not out:
        raise ValueError("--factors: give at least one factor, e.g. --factors 0.5,2")
    return tuple(dict.fromkeys(out))


def _scaled(value, factor: float, meta: dict):
    """``value`` x ``factor``, an integer rounded, kept inside the knob's legal range."""
    v = value * factor
    if isinstance(value, int):
        v = int(round(v))
    lo, hi = meta.get("min"), meta.get("max")
    if lo is not None:
        v = max(v, lo)
    if hi is not None:
        v = min(v, hi)
    return type(value)(v)


def variants(profiles: tuple[str, ...], *, knobs: list[str] | None = None,
             factors: tuple[float, ...] = FACTORS) -> tuple[list[Variant], list[str]]:
    """The runs to make: every assumption of ``profiles`` (or the ``knobs`` named, which may also be
    sourced knobs of them) at each factor. Returns ``(variants, notes)``; a note says why a knob at
    a factor is not run (its value would not change, or the profile refuses it). An unknown knob
    is a ValueError naming the profiles' assumptions."""
    from shm.profile import ProfileError, load_profile, schema_fields, with_overrides
    meta = {k: m for k, _, m in schema_fields(optional=True)}
    loaded = {name: load_profile(name) for name in profiles}
    for k in knobs or ():
        if not any(k in meta and getattr(p, k.split(".")[0], None) is not None for p in loaded.values()):
            listed = sorted({a for p in loaded.values() for a in p.assumptions})
            raise ValueError(f"--knobs: {k!r} is not a knob of profile {', '.join(profiles)}; its assumptions are "
                             f"{', '.join(listed) or '(none declared)'}")
    out, notes = [], []
    for name, p in loaded.items():
        chosen = [k for k in meta if k in knobs and getattr(p, k.split(".")[0], None) is not None] if knobs \
            else list(p.assumptions)
        for k in chosen:
            section, _, field = k.partition(".")
            base = getattr(getattr(p, section), field)
            todo = [(None, not base)] if isinstance(base, bool) else [(f, _scaled(base, f, meta[k])) for f in factors]
            for f, value in todo:
                v = Variant(name, k, f, base, value)
                if value == base:
                    notes.append(f"{name} {v.label}: not run, the value stays {_show(base)} (rounded, or at "
                                 f"the end of its range)")
                    continue
                try:
                    with_overrides(p, {k: value})
                except ProfileError as e:
                    notes.append(f"{name} {v.label}: not run, the profile refuses {_show(value)}: "
                                 f"{e.errors[0].split(': ', 1)[-1]}")
                    continue
                out.append(v)
    return out, notes


def _change_pct(a, b) -> float | None:
    if a is None or b is None or not (math.isfinite(a) and math.isfinite(b)):
        return None
    if a == 0:
        return 0.0 if b == 0 else math.inf
    return (b / a - 1) * 100


def table(base_rows: list[dict], runs: list[tuple[Variant, list[dict] | None, str | None]]) -> list[dict]:
    """One entry per variant and published row of the 1x run: the row at 1x and at the variant,
    the change, the verdicts and directions. A variant whose run failed gives one entry saying so."""
    published = [r for r in base_rows if r.get("published") is not None]
    out = []
    for v, rows, error in runs:
        head = {"profile": v.profile, "knob": v.knob, "factor": v.factor, "value": v.value, "base": v.base}
        if rows is None:
            out.append({**head, "row": None, "error": error})
            continue
        at = {key_of(r): r for r in rows}           # rows are matched as dmrack compare matches them
        for r in published:
            got = at.get(key_of(r))
            emu = got.get("emulated") if got else None
            out.append({**head, "row": " | ".join(str(r[k]) for k in KEYS[:4]), "kind": r.get("kind", "result"),
                        "published": r["published"],
                        "at_1x": r.get("emulated"), "at_factor": emu,
                        "change_pct": _rounded(_change_pct(r.get("emulated"), emu)),
                        "verdict_1x": verdict(r), "verdict_factor": verdict(got) if got else None,
                        "direction_1x": direction(r), "direction_factor": direction(got) if got else None})
    return out


def _label(entry: dict) -> str:
    """A table's name of an entry's row: an input row (rows.KINDS) says so, since a knob that moves
    it is the knob it calibrates, not a model it tests."""
    return entry["row"] + (" (input)" if entry.get("kind") == "input" else "")


def _rounded(x):
    return None if x is None else x if not math.isfinite(x) else round(x, 2)


def moved(entry: dict, pct: float = MOVED_PCT) -> bool:
    c = entry.get("change_pct")
    return entry.get("row") is not None and c is not None and abs(c) > pct


def summary(entries: list[dict]) -> list[dict]:
    """Per variant: rows moved, verdicts that changed, directions lost, the largest move."""
    by: dict[tuple, dict] = {}
    for e in entries:
        s = by.setdefault((e["profile"], e["knob"], e["factor"]), {
            "profile": e["profile"], "knob": e["knob"], "factor": e["factor"], "value": e["value"], "rows": 0,
            "moved": 0, "verdicts_changed": 0, "directions_lost": 0, "largest_pct": 0.0, "largest_row": None,
            "error": e.get("error")})
        if e.get("row") is None:
            continue
        s["rows"] += 1
        if moved(e):
            s["moved"] += 1
        if e["verdict_factor"] != e["verdict_1x"]:
            s["verdicts_changed"] += 1
        if e["direction_1x"] == "held" and e["direction_factor"] != "held":
            s["directions_lost"] += 1
        c = e.get("change_pct")
        if c is not None and abs(c) > abs(s["largest_pct"]):
            s["largest_pct"], s["largest_row"] = c, e["row"]
    return list(by.values())


class _Quiet:
    """A console that swallows the experiment's own tables (the report prints its own)."""

    def print(self, *args, **kwargs) -> None:
        pass


def _run_once(exp, parts, quick: bool, jobs: int, overrides: dict) -> list[dict]:
    from shm.profile import overridden
    options = {"jobs": jobs} if "jobs" in exp.options else {}
    with overridden(overrides):
        rows = exp.run(only=list(parts), quick=quick, json_path=None, console=_Quiet(), **options)
    return [asdict(r) if isinstance(r, Row) else dict(r) for r in rows]


def _variant_rows(v: Variant, rows: list[dict]) -> list[dict]:
    return [{**r, "experiment": f"{r['experiment']} [{v.label}]", "profile": v.profile, "knob": v.knob,
             "factor": v.factor, "value": v.value} for r in rows]


def _resumed(path: str | None, exp, parts, quick: bool) -> tuple[list[dict] | None, dict, dict]:
    """The 1x rows and the finished variants' rows (by key) of an earlier run of the same settings
    in ``path``; a file of other settings is refused (one line)."""
    if not path or not os.path.exists(path):
        return None, {}, {}
    run, rows = load_result(path)
    sens = (run or {}).get("sensitivity")
    if not sens:
        raise ValueError(f"--json {path}: holds no sensitivity run; give another path (it is not overwritten)")
    mine = {"paper": exp.name, "parts": list(parts), "quick": bool(quick)}
    theirs = {k: sens.get(k) for k in mine}
    if theirs != mine:
        raise ValueError(f"--json {path}: holds a sensitivity run of {theirs}, not {mine}; give another path or "
                         f"remove it")
    base = [r for r in rows if "knob" not in r]
    done: dict[str, list[dict]] = {}
    for key in sens.get("done", []):
        done[key] = [{k: val for k, val in r.items() if k not in ("profile", "knob", "factor", "value")}
                     | {"experiment": r["experiment"].rsplit(" [", 1)[0]}
                     for r in rows if r.get("variant") == key]
    for e in sens.get("failed", []):
        done[e["key"]] = None                        # co-located runs are deterministic: it would fail again
    return base, done, {e["key"]: e for e in sens.get("failed", [])}


def run(exp, *, parts: list[str] | None = None, quick: bool = False, jobs: int = 1, knobs: list[str] | None = None,
        factors: tuple[float, ...] = FACTORS, json_path: str | None = None,
        log: Callable[[str], None] | None = None) -> dict:
    """Measure ``exp``'s sensitivity (see the module docstring). ``parts``: default its headline.
    ``log`` hears one line per run as it starts and ends (the command line prints them on stderr).
    Returns ``{"table": [...], "summary": [...], "notes": [...], "rows": [...], "run": {...}}``,
    also written to ``json_path`` (after the 1x run and after every variant)."""
    from cluster.experiments.provenance import record, software
    from cluster.experiments.rows import check_json_path, check_only
    log = log or (lambda s: None)
    if exp.kind != "reproduce":
        raise ValueError(f"sensitivity runs a reproduction (dmrack reproduce PAPER), not {exp.kind} {exp.name}")
    if not exp.profiles:
        raise ValueError(f"reproduce {exp.name} declares no profiles (Experiment.profiles): nothing to vary")
    parts = list(parts or exp.headline)
    if not parts:
        raise ValueError(f"reproduce {exp.name} declares no headline parts; choose some with --only "
                         f"({', '.join(exp.parts)})")
    check_only(exp.parts, parts)
    check_json_path(json_path)
    todo, notes = variants(exp.profiles, knobs=knobs, factors=factors)
    base, done, failed_before = _resumed(json_path, exp, parts, quick)
    started, t0, code = time.time(), time.perf_counter(), software()
    label = f"sensitivity {exp.name}"
    runs: list[tuple[Variant, list[dict] | None, str | None]] = []
    failed: list[dict] = []

    def result() -> dict:
        entries = table(base, runs)
        rows = list(base) + [r | {"variant": v.key} for v, rr, _ in runs if rr for r in _variant_rows(v, rr)]
        sens = {"paper": exp.name, "parts": parts, "quick": bool(quick), "profiles": list(exp.profiles),
                "factors": list(factors), "moved_pct": MOVED_PCT, "within": WITHIN,
                "done": [v.key for v, rr, _ in runs if rr is not None], "failed": failed,
                "notes": notes, "table": entries, "summary": summary(entries)}
        rec = record(label, title=f"{exp.title}: sensitivity to the profiles' assumptions", parts=parts,
                     quick=quick, options={"jobs": jobs, "factors": list(factors), "knobs": knobs or "assumptions"},
                     setup=exp.setup, started=started, wall_s=time.perf_counter() - t0, code=code)
        rec["sensitivity"] = sens
        return {"format": FORMAT, "run": rec, "rows": rows, "table": entries, "summary": sens["summary"],
                "notes": notes}

    def save() -> dict:
        res = result()
        if json_path:
            dump_json(json_path, {"format": FORMAT, "run": res["run"], "rows": res["rows"]})
        return res

    n = len(todo) + 1
    if base is None:
        log(f"[1/{n}] {exp.name} {','.join(parts)} as shipped ({', '.join(exp.profiles)})")
        t = time.perf_counter()
        base = _run_once(exp, parts, quick, jobs, {})
        log(f"[1/{n}] as shipped: {len(base)} rows, {sum(r.get('published') is not None for r in base)} published "
            f"({time.perf_counter() - t:.0f} s)")
        save()
    else:
        log(f"[1/{n}] as shipped: {len(base)} rows from {json_path}")
    for i, v in enumerate(todo, 2):
        if v.key in done:
            rr = done[v.key]
            if rr is None:
                failed.append(failed_before[v.key])
            runs.append((v, rr, None if rr is not None else failed_before[v.key]["error"]))
            log(f"[{i}/{n}] {v.profile} {v.label} ({_show(v.base)} -> {_show(v.value)}): from {json_path}")
            continue
        log(f"[{i}/{n}] {v.profile} {v.label} ({_show(v.base)} -> {_show(v.value)})")
        t = time.perf_counter()
        try:
            rr = _run_once(exp, parts, quick, jobs, {v.profile: {v.knob: v.value}})
            err = None
        except Exception as e:                      # a variant the system cannot run is a finding, not a stop
            rr, err = None, f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
            failed.append({"key": v.key, "error": err})
        runs.append((v, rr, err))
        res = save()
        mine = [s for s in res["summary"] if (s["profile"], s["knob"], s["factor"]) == (v.profile, v.knob, v.factor)]
        s = mine[0] if mine else None
        what = (f"failed: {err}" if err else
                f"{s['moved']} of {s['rows']} published rows moved > {MOVED_PCT:g} %, largest {s['largest_pct']:+.1f} %"
                if s else "no published rows")
        log(f"[{i}/{n}] {v.profile} {v.label}: {what} ({time.perf_counter() - t:.0f} s)")
    return save()


# ------------------------------------------------------------------------------------- the report


def print_report(console, res: dict, *, all_rows: bool = False) -> None:
    """The table of rows that moved (every entry with ``all_rows``), largest first, then one line
    per variant."""
    from rich.table import Table
    sens = res["run"]["sensitivity"]
    entries = [e for e in res["table"] if e.get("row") is not None and (all_rows or moved(e))]
    entries.sort(key=lambda e: -abs(e["change_pct"] or 0) if e["change_pct"] is not None else 0)
    t = Table(title=f"sensitivity {sens['paper']} ({', '.join(sens['parts'])}{', quick' if sens['quick'] else ''}): "
                    f"published rows that moved > {MOVED_PCT:g} %")
    for col in ("knob", "factor", "row", "at 1x", "at factor", "change %", "verdict 1x -> factor",
                "direction 1x -> factor"):
        t.add_column(col, justify="right" if col in ("at 1x", "at factor", "change %") else "left")
    for e in entries:
        t.add_row(f"{e['profile']}:{e['knob']}", _factor(e), _label(e), _num(e["at_1x"]), _num(e["at_factor"]),
                  "-" if e["change_pct"] is None else f"{e['change_pct']:+.1f}",
                  f"{e['verdict_1x'] or '-'} -> {e['verdict_factor'] or '-'}",
                  f"{e['direction_1x'] or '-'} -> {e['direction_factor'] or '-'}")
    console.print(t)
    s = Table(title="per knob and factor")
    for col in ("knob", "factor", "value", "rows moved", "verdicts changed", "directions lost", "largest move"):
        s.add_column(col)
    for x in res["summary"]:
        largest = f"{x['largest_pct']:+.1f} % ({x['largest_row']})" if x["largest_row"] else "-"
        s.add_row(f"{x['profile']}:{x['knob']}", _factor(x), _show(x["value"]),
                  f"failed: {x['error']}" if x["error"] else f"{x['moved']}/{x['rows']}",
                  str(x["verdicts_changed"]), str(x["directions_lost"]), largest)
    console.print(s)
    for note in res["notes"]:
        console.print(f"note: {note}", markup=False, highlight=False)


def _factor(e: dict) -> str:
    return "flip" if e["factor"] is None else f"{e['factor']:g}x"


def _num(v) -> str:
    from cluster.experiments.rows import fmt
    return fmt(v)


def markdown(res: dict, *, top: int = 40) -> str:
    """The moved rows as a Markdown table (largest first, at most ``top``), for docs."""
    entries = [e for e in res["table"] if moved(e)]
    entries.sort(key=lambda e: -abs(e["change_pct"]))
    lines = ["| knob | factor | row | at 1x | at factor | change % | verdict 1x -> factor | direction 1x -> factor |",
             "|---|---|---|---|---|---|---|---|"]
    for e in entries[:top]:
        lines.append(f"| `{e['knob']}` | {_factor(e)} | {_label(e)} | {_num(e['at_1x'])} | {_num(e['at_factor'])} | "
                     f"{e['change_pct']:+.1f} | {e['verdict_1x'] or '-'} -> {e['verdict_factor'] or '-'} | "
                     f"{e['direction_1x'] or '-'} -> {e['direction_factor'] or '-'} |")
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------------- the figure


def tornado_data(entries: list[dict]) -> dict[str, list[tuple[str, float, float]]]:
    """Per published row: ``(knob, change % at the lowest factor, at the highest)`` for each knob
    that moved it (a flipped boolean counts as both), widest spread first."""
    by_row: dict[str, dict[str, list]] = {}
    for e in entries:
        if e.get("row") is None or e.get("change_pct") is None or not math.isfinite(e["change_pct"]):
            continue
        k = by_row.setdefault(e["row"], {}).setdefault(f"{e['profile']}:{e['knob']}", [])
        k.append((e["factor"] if e["factor"] is not None else 1.0, e["change_pct"]))
    out = {}
    for row, knobs in by_row.items():
        bars = []
        for knob, pts in knobs.items():
            pts.sort()
            lo, hi = pts[0][1], pts[-1][1]
            if max(abs(lo), abs(hi)) > MOVED_PCT:
                bars.append((knob, lo, hi))
        bars.sort(key=lambda b: -max(abs(b[1]), abs(b[2])))
        if bars:
            out[row] = bars
    return out


def write_tornado(res: dict, out_dir: str, stem: str, *, per_row: int = 12) -> list[str]:
    """One PNG per published row that any knob moved: the row's change at the low and the high
    factor of each knob, the widest on top, the ±30 % band shaded. Returns the paths."""
    from cluster.experiments.figures import slug
    from cluster.experiments.plot import require
    require()
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    sens = res["run"]["sensitivity"]
    lo_f, hi_f = min(sens["factors"]), max(sens["factors"])
    published = {e["row"]: _change_pct(e["at_1x"], e["published"]) for e in res["table"] if e.get("row")}
    paths = []
    for row, bars in tornado_data(res["table"]).items():
        bars = bars[:per_row][::-1]
        fig, ax = plt.subplots(figsize=(8, 0.45 * len(bars) + 1.6), dpi=100)
        y = range(len(bars))
        ax.barh(y, [b[1] for b in bars], color="#4c72b0", label=f"{lo_f:g}x (or flipped)")
        ax.barh(y, [b[2] for b in bars], color="#dd8452", alpha=0.8, label=f"{hi_f:g}x")
        ax.axvspan(-WITHIN * 100, WITHIN * 100, color="#dddddd", zorder=0, label="±30 % of the value at 1x")
        ax.axvline(0, color="black", linewidth=0.8)
        pub = published.get(row)
        if pub is not None and math.isfinite(pub) and abs(pub) <= 400:      # where the paper's value lies
            ax.axvline(pub, color="#c44e52", linestyle="--", linewidth=1.2, label="published")
        ax.set_yticks(list(y))
        ax.set_yticklabels([b[0] for b in bars], fontsize=8)
        ax.set_xlabel("change of the emulated value against the profile as shipped (%)")
        ax.set_title(f"sensitivity {sens['paper']}: {row}", fontsize=9)
        ax.legend(fontsize=7, loc="lower right")
        fig.tight_layout()
        path = os.path.join(out_dir, f"{stem}-{slug(row)}.png")
        fig.savefig(path)
        plt.close(fig)
        paths.append(path)
    return paths


def main_log(line: str) -> None:
    """Progress for the command line: one line on stderr per run started and ended."""
    print(f"dmrack sensitivity: {line}", file=sys.stderr, flush=True)
