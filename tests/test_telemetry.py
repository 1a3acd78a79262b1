"""Op kinds, node states and counters are declared once (shm/telemetry.py), and everything derives.

Two kinds of test: that the modules which used to hold copies (op codes in five files, node
states in two, a counter in five) hold none any more, read as text; and that a counter added to
the one declaration, and nowhere else, is published by a node, stored in the stats plane,
exported in the results' JSON and shown by the dashboard. The second runs in a child interpreter
that loads an edited copy of ``shm/telemetry.py`` in place of the real one before anything
imports it, which is exactly what a developer adding a counter does.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

from shm import telemetry
from shm.telemetry import COUNTER_NAMES, COUNTERS, OP_KINDS, SOURCES, STATE_NAMES

ROOT = Path(__file__).resolve().parent.parent

#: The modules that derive from the declaration (they held copies before).
DERIVED = ("workloads/generators.py", "workloads/ycsb.py", "workloads/stress.py", "workloads/traces.py",
           "nodes/compute.py", "cluster/stats.py", "cluster/results.py", "cluster/node_main.py",
           "cluster/dashboard.py")


def _code(path: str) -> str:
    """The file's text without comments and docstrings' prose lines (good enough for assignments)."""
    return "\n".join(line.split("#", 1)[0] for line in (ROOT / path).read_text().splitlines())


def test_the_declaration_is_consistent():
    assert [telemetry.KIND_INDEX[k] for k in OP_KINDS] == list(range(len(OP_KINDS)))
    assert OP_KINDS[telemetry.OP_READ] == "read" and OP_KINDS[telemetry.OP_DELETE] == "delete"
    assert telemetry.YCSB_OPS == ("read", "update", "insert", "scan", "rmw")
    assert STATE_NAMES[telemetry.STATE_LOADING] == "loading" and STATE_NAMES[telemetry.STATE_FAILED] == "failed"
    assert len(set(COUNTER_NAMES)) == len(COUNTERS)
    assert all(c.source in SOURCES and c.unit and c.meaning for c in COUNTERS)


def test_the_declaration_is_a_standard_library_leaf():
    # workloads import it, and workloads import no rack: it must pull in nothing of the project
    # (and no numba) when imported on its own.
    code = ("import sys; import shm.telemetry; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('shm', 'nodes', 'cluster', 'workloads', 'numba', 'numpy')))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}).stdout
    assert out.strip() == "['shm', 'shm.telemetry']"


def test_no_module_holds_a_second_copy_of_op_codes_or_states():
    op_assign = re.compile(r"^\s*(OP_[A-Z]+\s*,\s*)*OP_[A-Z]+\s*=\s*(range\(|\d)", re.M)
    state_assign = re.compile(r"^\s*(STATE_[A-Z]+\s*,\s*)*STATE_[A-Z]+\s*=\s*(range\(|\d)", re.M)
    kinds_tuple = re.compile(r"\(\s*\"read\",\s*\"update\"")
    states_tuple = re.compile(r"\"starting\",\s*\"loading\"")
    for path in DERIVED:
        code = _code(path)
        for what, rx in (("op codes", op_assign), ("node states", state_assign), ("op kind names", kinds_tuple),
                         ("state names", states_tuple)):
            assert not rx.search(code), f"{path} declares {what} again: {rx.search(code).group(0)!r}"


def test_no_module_lists_the_counters_again():
    # The old copies: a NamedTuple with a field per counter (stats.Counters, results.NodeSummary)
    # and tuples of counter names (stats.COUNTERS, compute.CLIENT_COUNTERS). Views still name the
    # counters they draw in a column of their own (the dashboard's views, its set of them checked
    # against the declaration at import) and the CSV's fixed columns; the child test below proves the rest derives.
    tuple_assign = re.compile(r"^\s*\w*COUNTERS\s*=\s*\(", re.M)
    for path in DERIVED:
        code = _code(path)
        assert not tuple_assign.search(code), f"{path} lists counters again: {tuple_assign.search(code).group(0)!r}"
        if path == "cluster/dashboard.py":
            continue                # its views' fields are its columns (NodeView.mem_used, DeviceView.ring_depth)
        for c in COUNTERS:
            m = re.search(rf"^\s*{c.name}\s*:\s*int", code, re.M)
            assert m is None, f"{path} declares the counter {c.name} again: {m.group(0)!r}"


_CHILD = r'''
import importlib.util, io, json, sys, types
sys.path.insert(0, ROOT)
import shm
spec = importlib.util.spec_from_file_location("shm.telemetry", EDITED)
mod = importlib.util.module_from_spec(spec)
sys.modules["shm.telemetry"] = mod
spec.loader.exec_module(mod)
shm.telemetry = mod

from rich.console import Console
from cluster import dashboard, node_main, stats
from cluster.results import Results
from nodes import compute
from shm.segment import new_prefix

assert stats.COUNTER_NAMES[-2:] == ("widgets_made", "hops_taken")
out = {"actors": node_main._device_counters([], None, "dpu0")(),
       "clients": compute.CLIENT_COUNTERS,
       "client_sums": compute.ComputeNode.client_counters(types.SimpleNamespace(clients=[
           types.SimpleNamespace(statistics=lambda: types.SimpleNamespace(hops_taken=5, blocks_reused=1)),
           types.SimpleNamespace(statistics=lambda: types.SimpleNamespace(hops_taken=6))]))}
procs = [stats.ProcInfo("cn0", "compute"), stats.ProcInfo("dpu0", "dpu")]
with stats.StatsPlane.create(procs, prefix=new_prefix(), max_steps=2) as plane:
    cn0, dpu0 = plane.writer("cn0"), plane.writer("dpu0")
    for w in (cn0, dpu0):
        w.begin(1)
    cn0.heartbeat(10, 1, 1, counters=out["client_sums"])
    dpu0.heartbeat(10, 1, 1, counters={**out["actors"], "widgets_made": 7})
    cn0.set_counters(widgets_made=3)
    snaps = plane.snapshot()
    out["plane"] = [s.counters._asdict() for s in snaps]
    doc = Results.from_snapshots(snaps, {"rack": "t"}).document()
    out["nodes"] = doc["nodes"]
    out["summary"] = doc["summary"]
    view = dashboard.RackMeter().update(snaps, now_ns=1)
    buf = io.StringIO()
    Console(file=buf, width=160, color_system=None).print(dashboard.render(view, dict.fromkeys(dashboard.TITLE_KEYS, "t")))
    out["frame"] = buf.getvalue()
print(json.dumps(out))
'''


def test_a_counter_added_to_the_declaration_shows_everywhere(tmp_path):
    text = (ROOT / "shm/telemetry.py").read_text()
    anchor = "\n)\nCOUNTER_NAMES = "
    assert text.count(anchor) == 1
    added = ('    Counter("widgets_made", "widgets", "actors", "widgets the node\'s actors made", summary=True),\n'
             '    Counter("hops_taken", "hops", "clients", "hops the node\'s clients took"),')
    edited = tmp_path / "telemetry.py"
    edited.write_text(text.replace(anchor, "\n" + added + anchor))
    code = _CHILD.replace("ROOT", repr(str(ROOT))).replace("EDITED", repr(str(edited)))
    res = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=tmp_path, capture_output=True,
                         text=True, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=600)
    assert res.returncode == 0, res.stderr
    import json
    out = json.loads(res.stdout.splitlines()[-1])
    # the node side: a node process publishes the actors' counter (0 until read), a compute node
    # sums the clients' field of the new name
    assert out["actors"]["widgets_made"] == 0
    assert "hops_taken" in out["clients"] and out["client_sums"]["hops_taken"] == 11
    # the stats plane stores both in the slot's header
    assert [p["widgets_made"] for p in out["plane"]] == [3, 7]
    assert [p["hops_taken"] for p in out["plane"]] == [11, 0]
    # the results: every node's row, and the rack total of the counter declared with summary
    assert [(n["widgets_made"], n["hops_taken"]) for n in out["nodes"]] == [(3, 11), (7, 0)]
    assert out["summary"]["widgets_made"] == 10 and "hops_taken" not in out["summary"]
    assert list(out["summary"])[-2:] == ["widgets_made", "system"]
    # the dashboard: the counters panel, summed over the nodes
    assert "counters (summed over the nodes)" in out["frame"]
    assert re.search(r"widgets_made\s+10\b", out["frame"]), out["frame"]


def _import_stats_with(tmp_path, old: str, new: str) -> subprocess.CompletedProcess:
    """Import cluster.stats in a child whose shm/telemetry.py has ``old`` replaced by ``new``."""
    text = (ROOT / "shm/telemetry.py").read_text()
    assert text.count(old) == 1
    edited = tmp_path / "telemetry.py"
    edited.write_text(text.replace(old, new))
    code = textwrap.dedent(f"""
        import importlib.util, sys
        import shm
        spec = importlib.util.spec_from_file_location("shm.telemetry", {str(edited)!r})
        mod = importlib.util.module_from_spec(spec)
        sys.modules["shm.telemetry"] = shm.telemetry = mod
        spec.loader.exec_module(mod)
        import cluster.stats
    """)
    return subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=600)


def test_a_declaration_that_outgrows_the_plane_layout_is_refused(tmp_path):
    # numba's cache of the stats kernels would keep the old layout: the plane refuses to start
    res = _import_stats_with(tmp_path, '"delete", "commit", "abort")', '"delete", "commit", "abort", "merge")')
    assert res.returncode != 0 and "9 op kinds" in res.stderr and "a new kind is a new layout" in res.stderr
    from cluster.stats import SLOT_HDR_WORDS, W_COUNTERS
    room = SLOT_HDR_WORDS - W_COUNTERS
    n = room - len(COUNTERS) + 1             # one more than the header holds
    extra = "".join(f'    Counter("extra{i}", "things", "actors", "an extra counter"),\n' for i in range(n))
    res = _import_stats_with(tmp_path, "\n)\nCOUNTER_NAMES = ", "\n" + extra + ")\nCOUNTER_NAMES = ")
    assert res.returncode != 0 and f"{room + 1} counters" in res.stderr and f"room for {room}" in res.stderr
