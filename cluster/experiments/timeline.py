"""A Gantt picture of the first operations of a ``--trace`` file (docs/trace.md), without a browser.

:func:`draw_timeline` reads a trace written by :mod:`shm.sim.trace` (a path or the parsed
document) and draws, for each of its first ``max_ops`` operations of the kinds asked, one row for
the operation, then per verb it issued one row with its stages as coloured bars (the NIC model's
stages: WQE fetch over PCIe, requester unit, links, responder, remote memory or atomic, CQE...),
the operation's CPU time on its thread as a row of its own, and the same core's time for the
thread's other coroutines (why an operation waits for its CPU); x is virtual µs from the
operation's start. It is what docs/trace.md shows for a RACE update.

This module declares no experiment (``dmrack plot`` draws result files; this draws traces).
matplotlib is imported when a picture is drawn, with the Agg backend.
"""

from __future__ import annotations

import json
import os

__all__ = ["draw_timeline", "op_breakdown", "load_trace"]


def load_trace(trace) -> dict:
    """A trace document from a path or an already parsed dict."""
    if isinstance(trace, dict):
        return trace
    with open(trace, encoding="utf-8") as f:
        return json.load(f)


def _thread_cpu(doc: dict) -> dict:
    """(pid, thread track name "tN") -> every CPU slice of that thread's core (all coroutines)."""
    names = {(ev["pid"], ev["tid"]): ev["args"]["name"] for ev in doc.get("traceEvents", [])
             if ev.get("ph") == "M" and ev.get("name") == "thread_name"}
    out: dict = {}
    for ev in doc.get("traceEvents", []):
        if ev.get("ph") == "X" and ev.get("cat") == "cpu":
            track = names.get((ev["pid"], ev["tid"]), "").split(" ")[0]
            out.setdefault((ev["pid"], track), []).append(ev)
    return out


def _slices(doc: dict):
    """(operations by id, verbs by op id, stages by (pid, tid), cpu by op id) of a trace."""
    ops, verbs, stages, cpu = {}, {}, {}, {}
    for ev in doc.get("traceEvents", []):
        if ev.get("ph") != "X":
            continue
        cat = ev.get("cat")
        args = ev.get("args") or {}
        if cat == "op":
            ops[args.get("op_id")] = ev
        elif cat == "verb" and "op_id" in args:
            verbs.setdefault(args["op_id"], []).append(ev)
        elif cat == "stage":
            stages.setdefault((ev["pid"], ev["tid"]), []).append(ev)
        elif cat == "cpu" and "op_id" in args:
            cpu.setdefault(args["op_id"], []).append(ev)
    return ops, verbs, stages, cpu


def _stages_of(verb: dict, stages: dict) -> list[dict]:
    a, b = verb["ts"], verb["ts"] + verb["dur"]
    return sorted((s for s in stages.get((verb["pid"], verb["tid"]), ())
                   if s["ts"] >= a - 1e-9 and s["ts"] + s["dur"] <= b + 1e-9), key=lambda s: s["ts"])


def op_breakdown(trace, kind: str = "UPDATE", *, max_ops: int | None = None) -> dict:
    """Where the operations of ``kind`` spend their time: ``{"ops": n, "mean_us": ..., "verbs":
    mean verbs per op, "stages": {stage name: mean µs per op summed over its verbs}, "cpu_us":
    mean CPU µs per op}`` over the (first ``max_ops``) finished operations of that kind. The
    stages of concurrent verbs overlap in time, so their sum can exceed the operation's latency."""
    doc = load_trace(trace)
    ops, verbs, stages, cpu = _slices(doc)
    chosen = [e for e in sorted(ops.values(), key=lambda e: e["ts"])
              if e["name"] == kind and not (e.get("args") or {}).get("unfinished")]
    if max_ops is not None:
        chosen = chosen[:max_ops]
    total: dict[str, float] = {}
    nverbs = 0
    cpu_us = 0.0
    for e in chosen:
        oid = e["args"]["op_id"]
        for v in verbs.get(oid, ()):
            nverbs += 1
            for s in _stages_of(v, stages):
                total[s["name"]] = total.get(s["name"], 0.0) + s["dur"]
        cpu_us += sum(c["dur"] for c in cpu.get(oid, ()))
    n = len(chosen) or 1
    return {"ops": len(chosen), "mean_us": sum(e["dur"] for e in chosen) / n, "verbs": nverbs / n,
            "stages": {k: v / n for k, v in sorted(total.items(), key=lambda kv: -kv[1])}, "cpu_us": cpu_us / n}


def draw_timeline(trace, png_path: str, *, max_ops: int = 3, kinds: tuple[str, ...] | None = None,
                  skip: int = 0, title: str | None = None, dpi: int = 110) -> str:
    """Draw the first ``max_ops`` finished operations of ``trace`` (those whose name is in
    ``kinds``, default every kind; after the first ``skip`` of them), each with its verbs'
    stages, its CPU time and the thread's CPU time for other coroutines meanwhile, to
    ``png_path``; returns the path."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch
    from shm.sim.trace import STAGE_NAMES

    doc = load_trace(trace)
    ops, verbs, stages, cpu = _slices(doc)
    thread_cpu = _thread_cpu(doc)
    names = {(ev["pid"], ev["tid"]): ev["args"]["name"] for ev in doc["traceEvents"]
             if ev.get("ph") == "M" and ev.get("name") == "thread_name"}
    chosen = [e for e in sorted(ops.values(), key=lambda e: e["ts"])
              if (kinds is None or e["name"] in kinds) and not (e.get("args") or {}).get("unfinished")]
    chosen = chosen[skip:skip + max_ops]
    if not chosen:
        raise ValueError(f"the trace has no finished operation{' of kind ' + '/'.join(kinds) if kinds else ''}")
    cmap = plt.get_cmap("tab20")
    colour = {name: cmap(i % 20) for i, name in enumerate(STAGE_NAMES)}
    rows = []           # (label, [(start, width, colour)], is_op)
    for e in chosen:
        t0 = e["ts"]
        args = e.get("args") or {}
        rows.append((f"{e['name']} key {args.get('key')} ({e['dur']:.2f} µs)", [(0.0, e["dur"], "0.35")], True))
        cpu_bars = [(c["ts"] - t0, c["dur"], "0.45") for c in cpu.get(args.get("op_id"), ())]
        if cpu_bars:
            rows.append(("  CPU: this operation", cpu_bars, False))
        # the same core's time for the thread's other coroutines: why an operation waits for its CPU
        thread = names.get((e["pid"], e["tid"]), "").split(".")[0]
        others = [(max(c["ts"], t0) - t0, min(c["ts"] + c["dur"], t0 + e["dur"]) - max(c["ts"], t0), "0.8")
                  for c in thread_cpu.get((e["pid"], thread), ())
                  if (c.get("args") or {}).get("op_id") != args.get("op_id")
                  and c["ts"] < t0 + e["dur"] and c["ts"] + c["dur"] > t0]
        if others:
            rows.append(("  CPU: other coroutines", others, False))
        for v in sorted(verbs.get(args.get("op_id"), ()), key=lambda v: (v["ts"], v["dur"])):
            bars = [(s["ts"] - t0, s["dur"], colour.get(s["name"], "0.8")) for s in _stages_of(v, stages)]
            va = v.get("args") or {}
            rows.append((f"  {v['name']} {va.get('bytes', '')} B -> {va.get('to', '')}", bars, False))
    height = 0.9 + 0.28 * len(rows)
    fig, ax = plt.subplots(figsize=(11, height))
    for y, (label, bars, is_op) in enumerate(rows):
        ax.broken_barh([(a, w) for a, w, _ in bars], (y - 0.38, 0.76), facecolors=[c for _, _, c in bars],
                       edgecolor="none")
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([r[0] for r in rows], fontsize=8)
    for tick, r in zip(ax.get_yticklabels(), rows):
        if r[2]:
            tick.set_fontweight("bold")
    ax.invert_yaxis()
    ax.set_xlabel("virtual µs from the operation's start")
    ax.grid(axis="x", color="0.9")
    ax.set_axisbelow(True)
    used = [n for n in STAGE_NAMES if any(c == colour[n] for _, bars, _ in rows for _, _, c in bars)]
    handles = [Patch(color=colour[n], label=n) for n in used] + \
        [Patch(color="0.45", label="CPU: this operation"), Patch(color="0.8", label="CPU: other coroutines")]
    ax.legend(handles=handles, fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    other = doc.get("otherData") or {}
    ax.set_title(title or f"{other.get('system', '')} on {other.get('profile', '')}: the first "
                          f"{len(chosen)} operation(s) of the trace", fontsize=10)
    fig.tight_layout()
    d = os.path.dirname(os.path.abspath(png_path))
    os.makedirs(d, exist_ok=True)
    tmp = os.path.join(d, f".{os.path.basename(png_path)}.{os.getpid()}.tmp.png")
    fig.savefig(tmp, dpi=dpi)
    plt.close(fig)
    os.replace(tmp, png_path)
    return png_path
