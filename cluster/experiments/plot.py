"""Drawing result files as PNG figures (``--plot DIR``, ``dmrack plot``, the report's images).

What a figure holds is declared elsewhere (:mod:`cluster.experiments.figures`: a spec per paper
figure in its experiment module, or automatic figures); this module only draws a spec: one line
(or bar) per series, the emulated values as the curve, the published ones as star markers of the
same colour (diamonds for the values a constant was set from: input rows, which a reader should
not take for checks), the headline published values (a peak, a ceiling) as dotted reference lines or a
marker at the published peak, and a caption saying where the numbers came from (command, --quick
or full, profile, scale, commit).

matplotlib is an optional extra (``pip install 'dmrack[plot]'``): it is the standard, well-kept
plotting library, but the emulator does not need it, so it is imported only here, only when a
figure is asked for (``dmrack --help`` and every other command never import it), and
:func:`require` fails with one line before a run starts rather than after it. The figures are
drawn on :class:`matplotlib.figure.Figure` with the Agg canvas directly, never through pyplot:
no display is needed or touched, and no global backend of the caller's process is changed.
"""

from __future__ import annotations

import io
import os

from cluster.experiments.figures import Figure, caption, figures_for, numeric, ref_rows, select

INSTALL = "pip install 'dmrack[plot]'"
DPI = 100


class MissingMatplotlib(ValueError):
    """matplotlib is not installed; the message is one line saying how to get it."""


def require() -> None:
    """Fail with :class:`MissingMatplotlib` (one line) when matplotlib cannot be imported."""
    try:
        import matplotlib  # noqa: F401
        from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: F401
    except ImportError:
        raise MissingMatplotlib(f"plots need matplotlib, which is not installed: {INSTALL}") from None


def _short_labels(series: list[str]) -> dict[str, str]:
    """Series names without the part they all share before their first comma or after their last
    ("FG+, write-only", "+Combine, write-only" -> "FG+", "+Combine"): the title says it once."""
    labels = {s: s for s in series}
    if len(series) < 2 or not all(", " in s for s in series):
        return labels
    if len({s.rsplit(", ", 1)[1] for s in series}) == 1:
        labels = {s: s.rsplit(", ", 1)[0] for s in series}
    elif len({s.split(", ", 1)[0] for s in series}) == 1:
        labels = {s: s.split(", ", 1)[1] for s in series}
    return labels


def _log_axis(axis, values) -> None:
    """Plain numbers on a log axis (20, 50, 100, 200 rather than 10^2): ticks at 1, 2 and 5 per
    decade, only at the powers of ten when the values span more than three decades."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter
    subs = (1.0, 2.0, 5.0) if max(values) < 1000 * min(values) else (1.0,)
    axis.set_major_locator(LogLocator(base=10, subs=subs))
    axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    axis.set_minor_formatter(NullFormatter())


def _xtick(x) -> str:
    return f"{x:g}" if isinstance(x, float) else str(x)


class _Layout:
    """What the panels of one figure share: its rows, series order, colours, labels and x."""

    def __init__(self, fig: Figure, rows: list[dict]):
        self.sel = select(fig, rows)
        present = list(dict.fromkeys(r["series"] for r in self.sel))
        wanted = fig.series or ()
        self.order = [s for s in wanted if s in present] + [s for s in present if s not in wanted]
        self.colors = {s: f"C{i % 10}" for i, s in enumerate(self.order)}
        self.labels = _short_labels(self.order)
        self.xs = list(dict.fromkeys(r["x"] for r in self.sel))
        self.categorical = not all(numeric(x) for x in self.xs)
        # bars of series that each have one x (one workload at 176 clients, one configuration)
        # are one bar per series; otherwise one group per x, a bar per series in it
        self.single_x = fig.kind == "bar" and all(len({r["x"] for r in self.sel if r["series"] == s}) == 1
                                                  for s in self.order)

    def label(self, series: str | None, metric: str, metrics: tuple) -> str:
        if len(metrics) == 1:
            return self.labels[series] if series is not None else metric
        return metric if series is None or len(self.order) == 1 else f"{self.labels[series]}, {metric}"


#: the marker of a published value, and of one a constant was set from (an input row: rows.KINDS),
#: which a reader should not take for a check of the model
STAR, INPUT = "*", "D"


def _stars(ax, points, colors) -> set:
    """Published values ``(x, value, kind)``: stars of their series' colour, a diamond for an input
    row. Returns the markers drawn."""
    drawn = set()
    for marker, size in ((STAR, 150), (INPUT, 50)):
        pts = [(p, v) for p, v, kind in points if (INPUT if kind == "input" else STAR) == marker]
        if pts:
            ax.scatter([p for p, _ in pts], [v for _, v in pts], marker=marker, s=size, color=colors,
                       edgecolors="black", linewidths=0.8, zorder=5)
            drawn.add(marker)
    return drawn


def _draw_lines(ax, lay: _Layout, metrics: tuple) -> set:
    """One line per series and metric (dashed for a panel's second metric); the published markers
    drawn (:func:`_stars`)."""
    published = set()
    for s in lay.order:
        for i, m in enumerate(metrics):
            pts = [r for r in lay.sel if r["series"] == s and r["metric"] == m]
            if not lay.categorical:
                pts.sort(key=lambda r: r["x"])
            pos = [lay.xs.index(r["x"]) if lay.categorical else r["x"] for r in pts]
            emu = [(p, r["emulated"]) for p, r in zip(pos, pts) if r["emulated"] is not None]
            if emu:
                ax.plot(*zip(*emu), marker="o", markersize=4, linestyle=("-", "--", ":", "-.")[i % 4],
                        color=lay.colors[s], label=lay.label(s, m, metrics))
            pub = [(p, r["published"], r.get("kind")) for p, r in zip(pos, pts) if r["published"] is not None]
            if pub:
                published |= _stars(ax, pub, lay.colors[s])
    if lay.categorical:
        ax.set_xticks(range(len(lay.xs)), [_xtick(x) for x in lay.xs], fontsize=8,
                      rotation=20 if sum(len(_xtick(x)) for x in lay.xs) > 50 else 0)
    return published


def _draw_bars(ax, lay: _Layout, metrics: tuple) -> set:
    """Bars: one group per x (or one bar per series, ``single_x``), in a group a bar per series and
    metric (hatched for a panel's second metric); the published markers drawn (:func:`_stars`)."""
    panel_xs = [x for x in lay.xs if any(r["x"] == x and r["metric"] in metrics for r in lay.sel)]
    groups = lay.order if lay.single_x else panel_xs
    members = [(None, m) for m in metrics] if lay.single_x else [(s, m) for s in lay.order for m in metrics]
    width = 0.8 / len(members)
    published = set()
    for k, (s, m) in enumerate(members):
        offset = (k - (len(members) - 1) / 2) * width
        bars, pubs = [], []
        for g, group in enumerate(groups):
            series, x = (group, None) if lay.single_x else (s, group)
            for r in lay.sel:
                if r["series"] == series and r["metric"] == m and (x is None or r["x"] == x):
                    if r["emulated"] is not None:
                        bars.append((g + offset, r["emulated"], lay.colors[series]))
                    if r["published"] is not None:
                        pubs.append((g + offset, r["published"], r.get("kind")))
        if bars:
            label = None if lay.single_x and len(metrics) == 1 else lay.label(s, m, metrics)
            ax.bar([b[0] for b in bars], [b[1] for b in bars], width=width * 0.9, color=[b[2] for b in bars],
                   hatch=("", "//", "..", "xx")[metrics.index(m) % 4], label=label)
        if pubs:            # white: a star of the bar's own colour would vanish in it
            published |= _stars(ax, pubs, "white")
    names = [lay.labels[g] if lay.single_x else _xtick(g) for g in groups]
    long = sum(map(len, names)) > 40
    ax.set_xticks(range(len(groups)), names, rotation=20 if long else 0, ha="right" if long else "center",
                  fontsize=8)
    return published


def draw(fig: Figure, rows: list[dict], run: dict | None):
    """The matplotlib Figure of one spec over a result's rows (not saved)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure as MplFigure
    from matplotlib.lines import Line2D
    from matplotlib.ticker import NullLocator

    lay = _Layout(fig, rows)
    panels = fig.panels()
    text = caption(run)
    cap_lines = text.count("\n") + 1
    width, height = 5.4 * len(panels) + (1.0 if len(panels) == 1 else 0.6), 4.2 + 0.16 * cap_lines
    mfig = MplFigure(figsize=(width, height), dpi=DPI)
    FigureCanvasAgg(mfig)
    axes = mfig.subplots(1, len(panels), squeeze=False)[0]
    markers: set = set()
    for ax, (metrics, ylabel, ylog) in zip(axes, panels):
        markers |= (_draw_lines if fig.kind == "line" else _draw_bars)(ax, lay, metrics)
        values = [v for r in lay.sel if r["metric"] in metrics for v in (r["emulated"], r["published"])
                  if v is not None]
        if ylog and values and min(values) > 0:
            ax.set_yscale("log")
            _log_axis(ax.yaxis, values)
        elif fig.kind == "bar" or (values and min(values) >= 0):
            ax.set_ylim(bottom=0)
        ax.set_ylabel(ylabel)
        ax.set_xlabel(fig.xlabel or ("" if lay.single_x else "x"))
        if fig.kind == "line" and not lay.categorical:
            if fig.xlog and min(lay.xs) > 0:
                ax.set_xscale("log", base=fig.xbase)
                ax.xaxis.set_minor_locator(NullLocator())
            if len(lay.xs) <= 12:
                ax.set_xticks(sorted(lay.xs), [_xtick(x) for x in sorted(lay.xs)])
        ax.grid(True, alpha=0.3)

    stars, lines = _draw_refs(fig, rows, axes[0], lay.colors, lay.categorical)
    handles, _ = axes[0].get_legend_handles_labels()
    if STAR in markers or stars:
        handles.append(Line2D([], [], marker=STAR, markersize=11, color="0.6", markeredgecolor="black",
                              linestyle="none", label="published (paper)"))
    if INPUT in markers:
        handles.append(Line2D([], [], marker=INPUT, markersize=6, color="0.6", markeredgecolor="black",
                              linestyle="none", label="published, a constant's calibration point"))
    if lines:
        handles.append(Line2D([], [], color="0.4", linestyle=":", label="published headline value"))
    if handles:
        axes[0].legend(handles=handles, fontsize=7.5, loc="best", framealpha=0.85)
    first = set(axes[0].get_legend_handles_labels()[1])
    for ax in axes[1:]:           # a panel with lines of its own (p50 and p99) says which is which
        own = ax.get_legend_handles_labels()[1]
        if len(own) > 1 and set(own) != first:
            ax.legend(fontsize=7.5, loc="best", framealpha=0.85)
    mfig.suptitle(fig.title or fig.id, fontsize=11)
    foot = (0.16 * cap_lines + 0.12) / height
    mfig.text(0.01, 0.08 / height, text, fontsize=7, color="0.3", va="bottom", ha="left")   # 0.08 in up
    mfig.tight_layout(rect=(0, foot, 1, 0.97))
    return mfig


def _draw_refs(fig: Figure, rows: list[dict], ax, colors: dict, categorical: bool) -> tuple[int, int]:
    """Headline published values (a peak, a ceiling) on the first panel: a star at (published
    x, published value) when ``peak_at`` gives that x on a numeric axis, else a dotted line.
    Returns how many stars and lines were drawn."""
    stars = lines = 0
    for r in ref_rows(fig, rows):
        where = [q for q in rows if q.get("experiment") == fig.experiment and q.get("series") == r["series"]
                 and q.get("metric") == fig.peak_at and q.get("x") == r["x"] and q.get("published") is not None]
        color = colors.get(r["series"], "0.3")
        bottom, top = ax.get_ylim()             # a published peak above every point still shows
        if r["published"] > top and ax.get_yscale() == "linear":
            ax.set_ylim(bottom, r["published"] * 1.08)
        if where and not categorical:
            ax.scatter([where[0]["published"]], [r["published"]], marker="*", s=170, color=color,
                       edgecolors="black", linewidths=0.8, zorder=6)
            ax.annotate(f"published {r['metric']}", (where[0]["published"], r["published"]), fontsize=7,
                        xytext=(6, 6), textcoords="offset points", color=color)
            stars += 1
        else:
            ax.axhline(r["published"], color=color, linestyle=":", linewidth=1.2)
            ax.annotate(f"published {r['metric']}: {r['published']:g}", (1, r["published"]),
                        xycoords=("axes fraction", "data"), fontsize=7, ha="right", va="bottom", color=color)
            lines += 1
    if not categorical:
        for r in ref_rows(fig, rows, fig.xrefs):
            color = colors.get(r["series"], "0.3")
            ax.axvline(r["published"], color=color, linestyle=":", linewidth=1.2)
            ax.annotate(f"published {r['metric']}: {r['published']:g}", (r["published"], 1),
                        xycoords=("data", "axes fraction"), xytext=(3, -3), textcoords="offset points",
                        fontsize=7, ha="left", va="top", color=color)
            lines += 1
    return stars, lines


def png(mfig) -> bytes:
    buf = io.BytesIO()
    mfig.savefig(buf, format="png", dpi=DPI)
    return buf.getvalue()


def render(run: dict | None, rows: list[dict]) -> list[tuple[Figure, bytes]]:
    """Every figure of a result (:func:`cluster.experiments.figures.figures_for`) as PNG bytes."""
    require()
    return [(f, png(draw(f, rows, run))) for f in figures_for(run, rows)]


def write_plots(run: dict | None, rows: list[dict], out_dir: str, stem: str) -> list[str]:
    """Write ``out_dir/<stem>-<figure id>.png`` for every figure of a result; the paths written."""
    os.makedirs(out_dir, exist_ok=True)
    paths = []
    for f, data in render(run, rows):
        path = os.path.join(out_dir, f"{stem}-{f.id}.png")
        tmp = f"{path}.tmp"
        with open(tmp, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
        paths.append(path)
    return paths
