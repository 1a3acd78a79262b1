"""``--trace FILE`` (issue 21 item 7): a co-located RACE run written as a Chrome trace-event /
Perfetto timeline. The file is checked against the trace-event format (JSON object format: field
types, complete events, metadata naming every process and thread, proper nesting per track), the
verbs against the operations that issued them and their stages against the verbs, the bounds
hold, the run's virtual-time figures are identical with and without a trace, a checker violation
lands as a track of its own, and the timeline picture decodes."""

from __future__ import annotations

import json
import os
from collections import defaultdict

import pytest

from cluster import cli
from cluster.rack import ColocatedRack
from cluster.scenario import scenario_from_dict
from shm.sim.trace import TraceBounds, violation_events
from tests.test_cli_edges import STALE, assert_one_line_exit_2, dmrack

KEYS = 3000


def rack_doc(run_ms=0.1, **system):
    return {
        "rack": {"name": "trace", "profile": "cx6-200g", "seed": 5},
        "compute": {"count": 1, "threads": 2, "coroutines": 3, "memory": "8MiB"},
        "memory": {"count": 2, "memory": "32MiB"},
        "system": {"name": "race", **system},
        "workload": {"preset": "a", "recordcount": KEYS, "keysize": 8, "valuesize": 16},
        "step": [{"action": "load", "bulk": True}, {"action": "run", "duration_ms": run_ms}],
    }


def write_toml(path, doc) -> str:
    lines = []
    for table in ("rack", "compute", "memory", "system", "workload"):
        lines.append(f"[{table}]")
        for k, v in doc[table].items():
            lines.append(f"{k} = {json.dumps(v)}")
    for st in doc["step"]:
        lines.append("[[step]]")
        for k, v in st.items():
            lines.append(f"{k} = {json.dumps(v)}")
    path.write_text("\n".join(lines) + "\n")
    return str(path)


# -- the trace-event format ---------------------------------------------------------------------

def ns(us: float) -> int:
    """A timestamp of the file (µs, three decimals) as whole ns."""
    return round(us * 1000)


def validate(doc: dict) -> dict:
    """Check ``doc`` against the trace-event format (JSON object format) and the tracer's promises;
    returns the complete events grouped by (pid, tid)."""
    assert isinstance(doc, dict) and isinstance(doc["traceEvents"], list)
    assert doc["displayTimeUnit"] in ("ms", "ns")
    assert isinstance(doc["otherData"], dict)
    names_pid, names_tid = set(), set()
    tracks = defaultdict(list)
    used_pids, used_tids = set(), set()
    flows = defaultdict(list)
    for ev in doc["traceEvents"]:
        assert isinstance(ev["name"], str) and ev["name"], ev
        assert ev["ph"] in ("X", "M", "i", "s", "f"), ev
        assert isinstance(ev["ts"], (int, float)) and ev["ts"] >= 0, ev
        assert isinstance(ev["pid"], int) and isinstance(ev["tid"], int), ev
        if ev["ph"] == "M":
            assert ev["name"] in ("process_name", "thread_name", "process_sort_index", "thread_sort_index"), ev
            if ev["name"] == "process_name":
                assert isinstance(ev["args"]["name"], str)
                names_pid.add(ev["pid"])
            elif ev["name"] == "thread_name":
                assert isinstance(ev["args"]["name"], str)
                names_tid.add((ev["pid"], ev["tid"]))
            continue
        used_pids.add(ev["pid"])
        used_tids.add((ev["pid"], ev["tid"]))
        if ev["ph"] == "X":
            assert isinstance(ev["dur"], (int, float)) and ev["dur"] >= 0, ev
            assert "args" not in ev or isinstance(ev["args"], dict)
            tracks[(ev["pid"], ev["tid"])].append(ev)
        elif ev["ph"] == "i":
            assert ev["s"] in ("t", "p", "g")
        else:
            assert isinstance(ev["id"], int)
            flows[ev["id"]].append(ev)
    assert used_pids <= names_pid, f"processes without a name: {used_pids - names_pid}"
    assert used_tids <= names_tid, f"threads without a name: {used_tids - names_tid}"
    # slices on one track nest properly: each lies inside the one open around it, or after it
    for key, evs in tracks.items():
        stack = []
        for ev in sorted(evs, key=lambda e: (ns(e["ts"]), -ns(e["dur"]))):
            a, b = ns(ev["ts"]), ns(ev["ts"]) + ns(ev["dur"])
            while stack and stack[-1] <= a:
                stack.pop()
            assert not stack or b <= stack[-1], f"{ev} overlaps its parent on {key} partially"
            stack.append(b)
    # flows: one start and one end each, the start on an operation's track inside the operation
    for fid, pair in flows.items():
        assert sorted(e["ph"] for e in pair) == ["f", "s"], pair
    return tracks


def slices(tracks, cat):
    return [e for evs in tracks.values() for e in evs if e.get("cat") == cat]


def inside(child, parent) -> bool:
    return ns(parent["ts"]) <= ns(child["ts"]) and \
        ns(child["ts"]) + ns(child["dur"]) <= ns(parent["ts"]) + ns(parent["dur"])


# -- a traced run -------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def traced(tmp_path_factory):
    d = tmp_path_factory.mktemp("trace")
    path = d / "race.json"
    rack = ColocatedRack(scenario_from_dict(rack_doc(), source="trace.toml"),
                         trace=TraceBounds(window_ns=40_000, max_ops=60))
    res = rack.run()
    rack.tracer.write(str(path))
    return path, res, rack


def test_a_race_trace_parses_against_the_trace_event_format(traced):
    path, _, rack = traced
    doc = json.loads(path.read_text())
    tracks = validate(doc)
    ops = slices(tracks, "op")
    verbs = slices(tracks, "verb")
    stages = slices(tracks, "stage")
    assert {"GET", "UPDATE"} <= {o["name"] for o in ops}          # YCSB-A
    assert {"READ", "WRITE", "CAS"} <= {v["name"] for v in verbs}  # RACE's update: block WRITE, slot CAS
    # the processes are the rack's nodes
    names = {e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "process_name"}
    assert {"cn0", "mn0", "mn1"} <= names
    other = doc["otherData"]
    assert other["system"] == "race" and other["profile"] == "cx6-200g" and other["seed"] == 5
    # each verb lies inside the operation that issued it; each stage inside its verb
    by_id = {o["args"]["op_id"]: o for o in ops}
    tied = 0
    for v in verbs:
        oid = v["args"].get("op_id")
        if oid is not None:
            assert inside(v, by_id[oid]), (v, by_id[oid])
            assert v["args"]["op"] == by_id[oid]["name"] and v["args"]["key"] == by_id[oid]["args"]["key"]
            tied += 1
    assert tied == len(verbs) > 3 * len(ops) // 2
    for s in stages:
        parents = [v for v in tracks[(s["pid"], s["tid"])] if v.get("cat") == "verb" and inside(s, v)]
        assert len(parents) == 1, s
    # every verb shows at least the wire both ways and its PCIe fetch
    per_verb = defaultdict(set)
    for s in stages:
        (v,) = [v for v in tracks[(s["pid"], s["tid"])] if v.get("cat") == "verb" and inside(s, v)]
        per_verb[id(v)].add(s["name"])
    assert len(per_verb) == len(verbs)
    for got in per_verb.values():
        assert {"MMIO + WQE fetch (PCIe)", "link: to responder", "link: response back", "CQE (PCIe)"} <= got
    # doorbells, flows from the operations, the responder's side on the memory nodes, CPU time
    phs = {e["ph"] for e in doc["traceEvents"]}
    assert {"i", "s", "f"} <= phs
    assert slices(tracks, "responder") and slices(tracks, "cpu")
    assert other["ops_recorded"] == len(ops) and other["verbs_recorded"] == len(verbs)


def test_the_bounds_hold(traced):
    path, _, rack = traced
    doc = json.loads(path.read_text())
    ops = [e for e in doc["traceEvents"] if e.get("cat") == "op"]
    start = doc["otherData"]["window_start_ns"]
    assert 0 < len(ops) <= 60
    assert all(start <= ns(o["ts"]) < start + 40_000 for o in ops)
    # the run went on past the window: the tracer took itself off once its operations returned
    assert rack.env.tracer is None and rack.tracer.closed and rack.env.now > start + 60_000
    # a count bound closes the recording before the window does
    rack2 = ColocatedRack(scenario_from_dict(rack_doc(), source="trace.toml"), trace=TraceBounds(max_ops=7))
    rack2.run()
    doc2 = rack2.tracer.document()
    assert len([e for e in doc2["traceEvents"] if e.get("cat") == "op"]) == 7
    assert doc2["otherData"]["ops_not_recorded"] > 0


def test_a_trace_changes_no_virtual_time_figure(traced):
    _, res, rack = traced
    plain = ColocatedRack(scenario_from_dict(rack_doc(), source="trace.toml")).run()

    def figures(r):
        return [(s.index, s.vstart_ns, s.vend_ns, s.ops, s.failures, s.mops, s.kinds, s.nodes) for s in r.steps]
    assert figures(plain) == figures(res)
    assert plain.meta["virtual_ns"] == res.meta["virtual_ns"]


def test_dmrack_run_trace_and_its_errors(tmp_path):
    scen = write_toml(tmp_path / "s.toml", rack_doc(run_ms=0.05))
    out = tmp_path / "t.json"
    assert cli.main(["run", scen, "--colocated", "--trace", str(out), "--trace-ops", "20"]) == 0
    doc = json.loads(out.read_text())
    validate(doc)
    assert 0 < doc["otherData"]["ops_recorded"] <= 20
    assert not [p for p in os.listdir(tmp_path) if p.endswith(".tmp")]       # written atomically
    # one line, exit 2, before anything runs
    r = dmrack("run", scen, "--trace", str(tmp_path / "x.json"))
    assert_one_line_exit_2(r, "--colocated")
    r = dmrack("run", scen, "--colocated", "--trace", str(tmp_path / "nodir" / "x.json"))
    assert_one_line_exit_2(r, "no such directory")
    r = dmrack("run", scen, "--colocated", "--trace-ops", "5")
    assert_one_line_exit_2(r, "--trace FILE")
    r = dmrack("bench", "verbs", "--trace", str(tmp_path / "x.json"))
    assert_one_line_exit_2(r, "bench ycsb")
    hist = tmp_path / "h.jsonl"
    hist.write_text(STALE)
    r = dmrack("check", "--history", str(hist), "--trace", str(tmp_path / "x.json"))
    assert_one_line_exit_2(r, "--trace")
    r = dmrack("check", "--system", "race", "--trace", str(tmp_path / "nodir" / "x.json"))
    assert_one_line_exit_2(r, "no such directory")
    assert not (tmp_path / "x.json").exists()


def test_bench_ycsb_traces_its_first_point(tmp_path):
    from cluster.experiments import bench_ycsb as ycsb
    out = tmp_path / "ycsb.json"
    points, _ = ycsb.measure("race", "a", (1, 2), records=2000, warm_ms=0.05, measure_ms=0.05,
                             trace=(str(out), TraceBounds(window_ns=20_000, max_ops=50)))
    doc = json.loads(out.read_text())
    tracks = validate(doc)
    ops = slices(tracks, "op")
    assert ops and {o["tid"] for o in ops} and doc["otherData"]["threads"] == 1
    # the window opens with the first point's measured step (after its warm-up)
    assert doc["otherData"]["window_start_ns"] >= 50_000
    # one thread: every op on thread 0's coroutines
    thread_names = {e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "thread_name"}
    assert all(not n.startswith("t1.") for n in thread_names)
    assert points[0]["ops"] > 0


def test_a_violation_is_a_track_of_its_own(tmp_path):
    """The operations of a failing key, from a handmade stale-read history (tests/test_cli_edges.py),
    land in the trace as the process 'violation: key K', beside a co-located run of the stress."""
    from cluster.correctness import check as chk
    from cluster.correctness.checker import check, load_jsonl
    hist = tmp_path / "h.jsonl"
    hist.write_text(STALE)
    ops = load_jsonl(str(hist))
    result = check(ops)
    assert result.verdict == "illegal"
    out = tmp_path / "check.json"
    doc = chk.trace_stress("race", {}, str(out), TraceBounds(window_ns=10_000, max_ops=40), seed=1,
                           shape=chk.QUICK._replace(threads=2, coroutines=2), history=ops, result=result)
    assert doc == json.loads(out.read_text())
    tracks = validate(doc)
    names = {e["pid"]: e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "process_name"}
    (pid,) = [p for p, n in names.items() if n == "violation: key 5"]
    vio = sorted((e for e in slices(tracks, "violation") if e["pid"] == pid), key=lambda e: e["ts"])
    assert [e["name"] for e in vio] == ["INSERT", "GET", "UPDATE", "GET"]
    assert vio[-1]["args"]["value"] == 1 and ns(vio[-1]["ts"]) == 70
    assert slices(tracks, "op")                               # and the stress run itself
    # a key with no operation gives nothing
    assert violation_events(99, ops) == []


def test_the_timeline_png(traced, tmp_path):
    pytest.importorskip("matplotlib")               # the picture needs the 'plot' extra
    from cluster.experiments.timeline import draw_timeline, op_breakdown
    path, _, _ = traced
    png = tmp_path / "update.png"
    draw_timeline(str(path), str(png), max_ops=2, kinds=("UPDATE",))
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 1000
    import matplotlib.image
    img = matplotlib.image.imread(str(png))
    assert img.shape[0] > 100 and img.shape[1] > 100
    b = op_breakdown(str(path), "UPDATE")
    assert b["ops"] > 0 and b["verbs"] >= 3 and b["mean_us"] > 0
    assert "link: to responder" in b["stages"]
    with pytest.raises(ValueError):
        draw_timeline(str(path), str(tmp_path / "none.png"), kinds=("SCAN",))
