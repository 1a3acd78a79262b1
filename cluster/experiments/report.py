"""``dmrack report RESULT.json... -o report.html``: one HTML page people can look at.

The page is made for being mailed around and opened years later: a single file, the figures
embedded as PNG data URIs, the style inline, no script and no external link, so it opens offline
and shows the same thing everywhere. It holds, in order:

* a summary: per run (command), the rows with a published value, how many are within ±30 % of
  it, how many ratio rows hold the paper's direction (:func:`cluster.experiments.rows.direction`);
* per run, its provenance (command, --quick or full, dmrack version and commit, profile, spec,
  seed, scale, wall time, machine, start), "not recorded" for files written before runs carried
  a record;
* per experiment of a run, its figures (:mod:`cluster.experiments.plot`, the same as ``--plot``)
  and the table of its headline rows (rows with a published value): emulated beside published,
  the verdict and the direction;
* a legend saying what within, outside, held and not held mean.

The results of ``dmrack run``/``up`` (``--out``'s results.json) are read as rows too
(:func:`cluster.experiments.rows.load_result`): their page shows the run's provenance (rack,
system, mode, seed, steps, stop reason) and a table per step of every node's and kind's
throughput and latencies; they have no published values, so the summary says "nothing published".

Every text from a file goes through :func:`html.escape`. The figures need matplotlib; without it
the page is still written, with a line saying how to get them. A file that cannot be read is
:class:`cluster.experiments.rows.BadRows` (one line naming it) before anything is written.
"""

from __future__ import annotations

import base64
import os
import time
from html import escape

from cluster.experiments.rows import (EVEN, UNJUDGED, WITHIN, counts, direction, fmt, is_wall_clock, load_result,
                                      verdict)

STYLE = """
body { font-family: -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; margin: 2em auto; max-width: 72em;
       color: #222; line-height: 1.4; padding: 0 1em; }
h1 { font-size: 1.6em; } h2 { border-bottom: 1px solid #ccc; margin-top: 2em; } h3 { margin-top: 1.5em; }
table { border-collapse: collapse; margin: 0.6em 0; font-size: 0.9em; }
th, td { border: 1px solid #ddd; padding: 0.25em 0.6em; text-align: left; vertical-align: top; }
th { background: #f3f3f3; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
.within, .held { color: #176b24; font-weight: 600; } .outside, .not-held { color: #a3201b; font-weight: 600; }
.none { color: #888; } .scale, .direction { color: #555; font-style: italic; } .note { color: #555; font-size: 0.9em; }
img { max-width: 100%; border: 1px solid #eee; margin: 0.5em 0; }
dl.prov { display: grid; grid-template-columns: max-content auto; gap: 0.15em 1em; font-size: 0.9em; }
dl.prov dt { font-weight: 600; } dl.prov dd { margin: 0; }
"""


def _title(path: str, run: dict | None) -> str:
    return f"dmrack {run['command']}" if run and run.get("command") else os.path.basename(path)


def _provenance(run: dict | None) -> list[tuple[str, str]]:
    missing = "not recorded"
    if not run:
        return [("run record", "not recorded (a result file written before runs carried their provenance)")]
    setup = run.get("setup") or {}
    mach = run.get("machine") or {}
    commit = run.get("git_commit")
    dirty = {True: " (uncommitted changes)", False: "", None: ""}[run.get("git_dirty")]
    cpu = ", ".join(str(v) for v in (mach.get("cpu"), f"{mach['cpus']} CPUs" if mach.get("cpus") else None,
                                     f"{mach['memory_gib']} GiB" if mach.get("memory_gib") else None) if v)
    wall = run.get("wall_s")
    items = [
        ("command", f"dmrack {run.get('command', '?')}"),
        ("title", run.get("title") or missing),
        ("mode", (run.get("options") or {}).get("mode", "?") if run.get("kind") == "rack run"
         else "--quick" if run.get("quick") else "full"),
        ("parts", ", ".join(run.get("parts") or []) or missing),
        ("options", ", ".join(f"{k}={v}" for k, v in (run.get("options") or {}).items()) or "none"),
        ("dmrack version", run.get("dmrack_version") or missing),
        ("git commit", f"{commit}{dirty}" if commit else missing),
        ("profile", setup.get("profile") or missing),
        ("spec", setup.get("spec") or missing),
        ("seed", str(setup["seed"]) if setup.get("seed") is not None else missing),
        ("scale", setup.get("scale") or missing),
        ("wall time", f"{wall:,.1f} s" if isinstance(wall, (int, float)) else missing),
        ("machine", f"{mach.get('hostname', '?')}: {cpu}" if mach else missing),
        ("platform", mach.get("platform") or missing),
        ("python / numba", f"{run.get('python') or '?'} / {run.get('numba') or '?'}"),
        ("started (UTC)", run.get("started_utc") or missing),
    ]
    if setup.get("note"):
        items.append(("note", setup["note"]))
    if run.get("failed"):
        items.append(("failed", "; ".join(str(f) for f in run["failed"])))
    return items


def _ratio(r: dict) -> str:
    pub, emu = r.get("published"), r.get("emulated")
    if pub in (None, 0) or emu is None:
        return "-"
    return f"{(emu / pub - 1) * 100:+.0f} %"


def _headline_table(rows: list[dict]) -> str:
    out = ["<table><tr><th>series</th><th>x</th><th>metric</th><th>emulated</th><th>published</th>"
           "<th>emulated vs published</th><th>±30 %</th><th>direction</th></tr>"]
    for r in rows:
        v, d = (r["kind"] if r.get("kind") in UNJUDGED else verdict(r)), direction(r)
        label = f"{v} (input)" if r.get("kind") == "input" and v else v
        out.append(
            f"<tr><td>{escape(str(r['series']))}</td><td>{escape(str(r['x']))}</td><td>{escape(str(r['metric']))}</td>"
            f"<td class=num>{escape(fmt(r.get('emulated')))}</td><td class=num>{escape(fmt(r.get('published')))}</td>"
            f"<td class=num>{escape(_ratio(r))}</td><td class={escape(v or 'none')}>{escape(label or '-')}</td>"
            f"<td class={escape((d or 'none').replace(' ', '-'))}>{escape(d or '-')}</td></tr>")
    out.append("</table>")
    return "\n".join(out)


def _values_table(rows: list[dict]) -> str:
    """Rows without published values as one table: a line per (series, x), a column per metric
    (the results of dmrack run: per node and kind, throughput and latencies)."""
    metrics = list(dict.fromkeys(str(r["metric"]) for r in rows))
    lines: dict[tuple, dict] = {}
    for r in rows:
        lines.setdefault((str(r["series"]), str(r["x"])), {})[str(r["metric"])] = r.get("emulated")
    out = ["<table><tr><th>series</th><th>x</th>" + "".join(f"<th>{escape(m)}</th>" for m in metrics) + "</tr>"]
    for (series, x), values in lines.items():
        out.append(f"<tr><td>{escape(series)}</td><td>{escape(x)}</td>"
                   + "".join(f"<td class=num>{escape(fmt(values.get(m)))}</td>" for m in metrics) + "</tr>")
    out.append("</table>")
    return "\n".join(out)


def _figures(run: dict | None, rows: list[dict]):
    """``{experiment: [(title, png bytes)]}``, or a one-line reason when they cannot be drawn."""
    from cluster.experiments.plot import MissingMatplotlib, render
    try:
        got = render(run, rows)
    except MissingMatplotlib as e:
        return str(e)
    by_exp: dict[str, list] = {}
    for f, data in got:
        by_exp.setdefault(f.experiment, []).append((f.title or f.id, data))
    return by_exp


def _summary_line(c: dict) -> str:
    return (f"{c['within']} of {c['published']} within ±30 %" if c["published"] else "nothing published") + (
        f"; {c['held']} of {c['directions']} directions held" if c["directions"] else "") + (
        f" ({c['scale']} scale row{'s' if c['scale'] != 1 else ''} aside)" if c.get("scale") else "") + (
        f" ({c['direction']} direction row{'s' if c['direction'] != 1 else ''}: the side of 1 only)"
        if c.get("direction") else "") + (
        f" ({c['input']} input row{'s' if c['input'] != 1 else ''} apart, {c['input_within']} within: "
        f"values the model's constants were set from)" if c.get("input") else "")


def build(results: list[tuple[str, dict | None, list[dict]]]) -> str:
    """The HTML page of loaded results ``[(path, run, rows)]``."""
    parts = ["<!DOCTYPE html>", "<html lang=en><head><meta charset=utf-8>",
             "<title>dmrack results</title>", f"<style>{STYLE}</style></head><body>",
             "<h1>dmrack results</h1>",
             f"<p class=note>Made by <code>dmrack report</code> at "
             f"{escape(time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime()))} "
             f"from {len(results)} result file(s). Legend at the end.</p>",
             "<h2>Summary</h2>",
             "<table><tr><th>run</th><th>file</th><th>rows</th><th>with a published value</th>"
             "<th>within ±30 %</th><th>outside</th><th>directions held</th></tr>"]
    for i, (path, run, rows) in enumerate(results, 1):
        c = counts(rows)
        held = f"{c['held']} of {c['directions']}" if c["directions"] else "-"
        parts.append(f"<tr><td><a href=\"#run-{i}\">{escape(_title(path, run))}</a></td><td>{escape(path)}</td>"
                     f"<td class=num>{len(rows)}</td><td class=num>{c['published']}</td>"
                     f"<td class=num>{c['within']}</td><td class=num>{c['outside']}</td>"
                     f"<td class=num>{held}</td></tr>")
    parts.append("</table>")
    for i, (path, run, rows) in enumerate(results, 1):
        c = counts(rows)
        parts.append(f"<h2 id=\"run-{i}\">{escape(_title(path, run))}</h2>")
        parts.append(f"<p>{escape(_summary_line(c))}. File: <code>{escape(path)}</code>.</p>")
        parts.append("<h3>Provenance</h3><dl class=prov>")
        parts += [f"<dt>{escape(k)}</dt><dd>{escape(str(v))}</dd>" for k, v in _provenance(run)]
        parts.append("</dl>")
        figs = _figures(run, rows)
        if isinstance(figs, str):
            parts.append(f"<p class=note>No figures: {escape(figs)}</p>")
            figs = {}
        experiments = list(dict.fromkeys([r["experiment"] for r in rows]))
        rack_run = bool(run) and run.get("kind") == "rack run"
        for exp in experiments:
            head = [r for r in rows if r["experiment"] == exp and r.get("published") is not None]
            if rack_run:
                # the results of dmrack run / up: nothing published, every figure shown
                parts.append(f"<h3>{escape(str(exp))}</h3>")
                parts.append(_values_table([r for r in rows if r["experiment"] == exp]))
                continue
            if not head and exp not in figs:
                continue
            parts.append(f"<h3>{escape(str(exp))}</h3>")
            for title, data in figs.get(exp, []):
                b64 = base64.b64encode(data).decode("ascii")
                parts.append(f"<img src=\"data:image/png;base64,{b64}\" alt=\"{escape(title)}\">")
            if head:
                parts.append(_headline_table(head))
            else:
                parts.append("<p class=note>No published values in this experiment.</p>")
    parts.append(LEGEND)
    parts.append("</body></html>")
    return "\n".join(parts)


LEGEND = f"""<h2>Legend</h2>
<ul>
<li><b>published</b>: the paper's value for the same series, x and metric; a headline row is a
row with one. Rows measuring real time (metric with "real" or "wall") are left out of the counts.</li>
<li><span class=within>within</span> / <span class=outside>outside</span>: whether
|emulated / published &minus; 1| &le; {WITHIN:.2f} (&plusmn;{WITHIN * 100:.0f} %); a row without an
emulated value is outside.</li>
<li><span class=held>held</span> / <span class=not-held>not held</span>: for a row that is a ratio
or comparison (its metric says ratio, growth or "x &lt;baseline&gt;", its series is "A / B", or its
x is "A/B"), whether the emulated ratio is on the same side of 1 as the published one: the paper
says A is above (or below) B, and so does the emulation, whatever the distance. Not defined
("-") for other rows, nor for a published ratio within {EVEN * 100:.0f} % of 1 (the paper says
"about even"; the verdict says whether the emulation is too).</li>
<li><b>scale</b>: a row that states the run's setup beside the paper's (no verdict, no direction);
<b>direction</b>: a point of which the paper states only the side of 1 (one figure inside a range
the text gives over several; its published value is the range's end on that side): a direction,
no verdict. Neither is counted among the rows with a published value. <b>at most</b> / <b>at
least</b>: a value beside a bound the paper states ("stays under 11.4 Mops"): within when on the
bound's side or past it by at most {WITHIN * 100:.0f} %. <b>input</b>: a published value a
constant of the model was set from (derived from it, or fitted to it with other points): its
verdict says whether that calibration still holds, but it is no test of the model, so it is counted
apart from the rows with a published value.</li>
<li>In the figures: lines (or bars) are the emulated values, one per series; stars of the same
colour are the paper's values; dotted lines are published headline values (a peak, a ceiling) and
a large star marks a published peak at its published x. The caption gives the command, --quick or
full, the profile, the scale and the commit.</li>
</ul>"""


def write_report(paths: list[str], output: str) -> None:
    """Read every result file (:class:`BadRows` before anything is written), write the page."""
    if not os.path.isdir(os.path.dirname(os.path.abspath(output))):
        raise FileNotFoundError(f"-o {output}: no such directory")
    results = [(p, *load_result(p)) for p in paths]
    page = build(results)
    tmp = f"{output}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(page)
    os.replace(tmp, output)
