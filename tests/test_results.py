"""Tests for cluster.results: figures per step/node/rack, the rack-wide merge, JSON and CSV
round trips, atomic writes and their errors."""

from __future__ import annotations

import csv
import io
import json
import os

import numpy as np
import pytest
from rich.console import Console

from cluster.results import COLUMNS, FORMAT, Results, read_csv
from cluster.stats import REL_ERROR, LatencyHistogram, ProcInfo, StatsPlane

META = {"rack": "r1", "system": "sherman", "profile": "cx6-200g", "seed": 7,
        "workloads": ["load 1000 records", "ycsb-a zipf 0.99"], "wall_s": 3.5}


@pytest.fixture
def run(prefix):
    """Two compute nodes over two steps, and a memory node that records nothing."""
    rng = np.random.default_rng(5)
    samples = {}
    with StatsPlane.create([ProcInfo("cn0", "compute"), ProcInfo("cn1", "compute"),
                            ProcInfo("mn0", "memory")], prefix=prefix, max_steps=4) as plane:
        for slot, (start, end) in enumerate([(1000, 51_000), (1200, 61_000)]):
            w = plane.writer(slot)
            w.begin()
            w.step(0, 0, "load")
            w.record_many([2] * 500, rng.integers(1000, 3000, 500))
            w.end_step(1000)
            w.step(1, start, "run")
            kinds = rng.integers(0, 2, 4000)
            lat = rng.lognormal(np.log(5000 * (slot + 1)), 0.5, 4000).astype(np.int64)
            oks = rng.random(4000) > 0.01
            w.record_many(kinds, lat, oks)
            samples[slot] = (kinds, lat, oks)
            w.end_step(end)
            w.heartbeat(end, 10, 1000 * (slot + 1))
            w.finish()
        m = plane.writer(2)
        m.begin()
        m.heartbeat(61_000, 5, 7)
        yield Results.from_plane(plane, META), samples


def test_step_figures(run):
    res, samples = run
    load, step = res.steps
    assert (load.index, load.label, load.description) == (0, "load", "load 1000 records")
    assert (load.ops, load.vstart_ns, load.vend_ns, load.vdur_ns) == (1000, 0, 1000, 1000)
    assert load.mops == pytest.approx(1000 / 1000 * 1e3)
    assert (step.vstart_ns, step.vend_ns, step.vdur_ns) == (1000, 61_000, 60_000)   # rack-wide span
    assert step.ops == 8000 and step.mops == pytest.approx(8000 / 60_000 * 1e3)
    assert [n.node for n in step.nodes] == ["cn0", "cn1"]                        # mn0 recorded no step
    assert sum(n.mops for n in step.nodes) == pytest.approx(step.mops)
    fails = sum(int((~o).sum()) for _, _, o in samples.values())
    assert step.failures == fails
    assert [k.kind for k in step.kinds] == ["all", "read", "update"]
    assert res.verbs == 1000 + 2000 + 7
    assert res.vspan_ns == 61_000
    assert res.speed is not None and res.speed > 0 and res.real_s >= 0


def test_rack_wide_merge(run):
    res, samples = run
    step = res.steps[1]
    lat = np.concatenate([s[1] for s in samples.values()])
    kinds = np.concatenate([s[0] for s in samples.values()])
    all_ = step.kinds[0]
    exact = LatencyHistogram().add(lat)
    assert all_.p99_us == pytest.approx(exact.percentile(99) / 1e3)     # merged == one big histogram
    for q, got in ((50, all_.p50_us), (99, all_.p99_us), (99.9, all_.p999_us)):
        true = np.percentile(lat, q, method="inverted_cdf") / 1e3
        assert abs(got - true) <= REL_ERROR * true
    assert all_.mean_us == pytest.approx(lat.mean() / 1e3)
    assert all_.max_us == lat.max() / 1e3
    read = step.kinds[1]
    assert read.ops == int((kinds == 0).sum())
    assert read.mean_us == pytest.approx(lat[kinds == 0].mean() / 1e3)
    # the slower node shows the higher median
    assert step.nodes[1].kinds[0].p50_us > step.nodes[0].kinds[0].p50_us


def test_records_layout(run):
    res, _ = run
    rows = res.records()
    assert all(tuple(r) == COLUMNS for r in rows)
    keys = [(r["step"], r["node"], r["kind"]) for r in rows]
    assert keys == [(0, "rack", "all"), (0, "rack", "insert"), (0, "cn0", "all"), (0, "cn0", "insert"),
                    (0, "cn1", "all"), (0, "cn1", "insert"),
                    (1, "rack", "all"), (1, "rack", "read"), (1, "rack", "update"),
                    (1, "cn0", "all"), (1, "cn0", "read"), (1, "cn0", "update"),
                    (1, "cn1", "all"), (1, "cn1", "read"), (1, "cn1", "update")]
    rack = rows[6]
    assert rack["role"] == "rack" and rack["ops"] == 8000 and rack["vdur_ns"] == 60_000


def test_json_round_trip(run, tmp_path):
    res, _ = run
    path = res.to_json(tmp_path / "out.json")
    doc = json.loads(open(path).read())
    assert doc["format"] == FORMAT and doc["meta"] == META
    assert doc["rows"] == json.loads(json.dumps(res.records()))
    assert [s["index"] for s in doc["steps"]] == [0, 1]
    s1 = doc["steps"][1]
    assert s1["ops"] == 8000 and s1["description"] == "ycsb-a zipf 0.99"
    assert set(s1["kinds"]) == {"all", "read", "update"}
    assert [n["node"] for n in s1["nodes"]] == ["cn0", "cn1"]
    assert [n["node"] for n in doc["nodes"]] == ["cn0", "cn1", "mn0"]
    assert doc["nodes"][2]["verbs"] == 7 and doc["nodes"][0]["state"] == "done"
    assert doc["summary"]["ops"] == 9000 and doc["summary"]["wall_s"] == 3.5
    assert not [p for p in os.listdir(tmp_path) if p.endswith(".tmp")]


def test_csv_round_trip(run, tmp_path):
    res, _ = run
    path = res.to_csv(tmp_path / "out.csv")
    with open(path, newline="") as f:
        raw = list(csv.reader(f))
    assert tuple(raw[0]) == COLUMNS and len(raw) == 1 + len(res.records())
    assert read_csv(path) == res.records()


def test_empty_cells_and_nan(prefix, tmp_path):
    with StatsPlane.create([ProcInfo("cn0", "compute")], prefix=prefix) as plane:
        w = plane.writer(0)
        w.begin()
        w.step(0, 500, "")                                      # a step with no operations, no span
        w.end_step(500)
        res = Results.from_plane(plane, {"note": float("nan")})
    row = res.records()[0]
    assert (row["ops"], row["mops"], row["p99_us"], row["max_us"]) == (0, None, None, None)
    assert res.meta == {"note": None}                           # strict JSON: NaN becomes null
    assert read_csv(res.to_csv(tmp_path / "e.csv")) == res.records()
    assert json.load(open(res.to_json(tmp_path / "e.json")))["rows"][0]["p50_us"] is None


def test_table(run):
    res, _ = run
    buf = io.StringIO()
    Console(file=buf, width=160, color_system=None).print(res.table())
    out = buf.getvalue()
    for s in ("results: rack r1", "sherman", "Mops/s", "p999 µs", "rack", "cn1", "update",
              "8,000", "emulation speed", "3,007 verbs", "wall 3.5 s"):
        assert s in out, s


def test_write_errors(run, tmp_path):
    res, _ = run
    with pytest.raises(FileNotFoundError, match="does not exist"):
        res.to_json(tmp_path / "missing" / "out.json")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        res.to_csv(tmp_path / "missing" / "out.csv")
    with pytest.raises(IsADirectoryError):
        res.to_csv(tmp_path)
    (tmp_path / "x.csv").write_text("a,b\n1,2\n")
    with pytest.raises(ValueError, match="not a dmrack results CSV"):
        read_csv(tmp_path / "x.csv")


def test_bad_meta(run):
    with pytest.raises(TypeError, match="meta must be a dict"):
        Results.from_snapshots((), ["rack"])
    with pytest.raises(TypeError, match="JSON-serialisable"):
        Results.from_snapshots((), {"rack": object()})
    empty = Results.from_snapshots((), {})
    assert empty.steps == () and empty.records() == [] and empty.speed is None


# -- memory figures and kept events ---------------------------------------------------------------

def test_memory_figures_and_events_reach_summary_json_csv_and_table(prefix, tmp_path):
    mib = 1 << 20
    with StatsPlane.create([ProcInfo("cn0", "compute"), ProcInfo("mn0", "memory"), ProcInfo("mn1", "memory")],
                           prefix=prefix) as plane:
        w = plane.writer("cn0")
        w.begin()
        w.step(0, 0, "run")
        w.record_many([1] * 10, [1000] * 10)
        w.end_step(10_000)
        w.set_counters(bytes_reclaimed=3 * mib // 2, blocks_reused=24_576)
        for name, used in (("mn0", int(3.3 * mib)), ("mn1", 2 * mib)):
            m = plane.writer(name)
            m.begin()
            m.heartbeat(10_000, 0, 0, counters={"mem_used": used, "mem_capacity": 8 * mib})
        plane.log(5_000, "failpoint", "cn0", "cn0: failpoint race.update.block_written fired (crash)")
        plane.log(6_000, "step", "mgr", "step 2/2")                     # not kept
        res = Results.from_plane(plane, {"rack": "r"})
    nodes = {n.node: n for n in res.nodes}
    assert (nodes["mn0"].mem_used, nodes["mn0"].mem_capacity) == (int(3.3 * mib), 8 * mib)
    assert (nodes["cn0"].bytes_reclaimed, nodes["cn0"].blocks_reused) == (3 * mib // 2, 24_576)
    summ = res.summary()
    assert (summ["mem_used"], summ["mem_capacity"], summ["bytes_reclaimed"]) == (int(5.3 * mib), 16 * mib, 3 * mib // 2)
    assert res.events == ("cn0: failpoint race.update.block_written fired (crash)",)
    end = [r for r in res.records() if r["label"] == "end of run"]
    assert [(r["node"], r["kind"], r["step"], r["mem_used"], r["mem_capacity"], r["bytes_reclaimed"]) for r in end] == [
        ("rack", "node", None, int(5.3 * mib), 16 * mib, 3 * mib // 2),
        ("cn0", "node", None, None, None, 3 * mib // 2),
        ("mn0", "node", None, int(3.3 * mib), 8 * mib, None), ("mn1", "node", None, 2 * mib, 8 * mib, None)]
    assert all(r["mem_used"] is None for r in res.records() if r["label"] != "end of run")
    assert read_csv(res.to_csv(tmp_path / "m.csv")) == res.records()
    doc = json.load(open(res.to_json(tmp_path / "m.json")))
    assert doc["events"] == list(res.events) and doc["nodes"][1]["mem_capacity"] == 8 * mib
    buf = io.StringIO()
    Console(file=buf, width=200, color_system=None).print(res.table())
    out = buf.getvalue()
    assert "memory: mn0 41 % 3.3/8 MiB, mn1 25 % 2/8 MiB" in out          # the dashboard's cells (fmt_mem)
    assert "reclaimed: 1.5 MiB (cn0 1.5), 24,576 blocks reused" in out
    assert "cn0: failpoint race.update.block_written fired (crash)" in out


def _reclaiming(**kw):
    """Update-only RACE with 16 KiB chunks: within 2 virtual ms its epochs advance and blocks come back."""
    from cluster.scenario import scenario_from_dict
    from tests.test_rack import LOAD, rack_dict, run
    d = rack_dict(LOAD, run(2.0), threads=1, coroutines=4, records=100, **kw)
    d["system"]["chunk_bytes"] = 16 << 10
    d["workload"].update(readproportion=0, updateproportion=1)
    return scenario_from_dict(d, source="reclaim.toml")


def test_colocated_compute_node_publishes_its_clients_reclaimed_bytes():
    from cluster.rack import ColocatedRack
    rack = ColocatedRack(_reclaiming())
    res = rack.run()
    cn0 = next(n for n in res.nodes if n.node == "cn0")
    stats = [c.statistics() for c in rack.nodes[0].clients]
    assert cn0.bytes_reclaimed == sum(s.bytes_reclaimed for s in stats) > 0
    assert cn0.blocks_reused == sum(s.blocks_reused for s in stats) > 0
    assert res.summary()["bytes_reclaimed"] == cn0.bytes_reclaimed


def test_a_rack_of_processes_reports_memory_occupancy_and_reclaimed_bytes(tmp_path):
    from cluster.supervisor import Supervisor
    sup = Supervisor(_reclaiming(), dashboard=True, csv_path=str(tmp_path / "r.csv"),
                     console=Console(file=io.StringIO(), width=200, force_terminal=True, color_system=None))
    assert sup.run() == 0, sup.deaths
    nodes = {n.node: n for n in sup.results.nodes}
    for mn in ("mn0", "mn1"):
        assert nodes[mn].mem_capacity == 32 << 20 and 0 < nodes[mn].mem_used < 32 << 20
    assert nodes["cn0"].bytes_reclaimed > 0
    view = {n.name: n for n in sup.last_view.nodes}
    assert (view["mn0"].mem_used, view["mn0"].mem_capacity) == (nodes["mn0"].mem_used, 32 << 20)
    assert view["cn0"].reclaimed == nodes["cn0"].bytes_reclaimed and sup.last_view.reclaimed > 0
    end = {r["node"]: r for r in read_csv(tmp_path / "r.csv") if r["label"] == "end of run"}
    assert end["mn1"]["mem_capacity"] == 32 << 20 and end["cn0"]["bytes_reclaimed"] == nodes["cn0"].bytes_reclaimed


def test_bulk_load_rows_show_no_latency_and_memory_reads_as_on_the_dashboard(prefix):
    """Issue 41: a bulk load's rows showed latencies 0.00 where every other empty cell shows "–"
    (its inserts take no virtual time: nothing was timed), and mn0 read "0/512 MiB" in the summary
    but "64 B/512 MiB" on the dashboard. The JSON keeps the recorded figures."""
    from cluster.dashboard import RackMeter, render
    with StatsPlane.create([ProcInfo("cn0", "compute"), ProcInfo("mn0", "memory")], prefix=prefix) as plane:
        w = plane.writer("cn0")
        w.begin()
        w.step(0, 0, "bulk-load 100 records")
        w.record_many([2] * 100, [0] * 100)
        w.end_step(0)
        w.step(1, 0, "run")
        w.record_many([0] * 10, [2000] * 10)
        w.end_step(10_000)
        m = plane.writer("mn0")
        m.begin()
        m.heartbeat(10_000, 0, 0, counters={"mem_used": 64, "mem_capacity": 512 << 20})
        res = Results.from_plane(plane, {"rack": "r"})
        view = RackMeter().update(plane.snapshot(), now_ns=0)
    buf = io.StringIO()
    Console(file=buf, width=200, color_system=None).print(res.table())
    out = buf.getvalue()
    load = [ln for ln in out.splitlines() if "bulk-load" in ln][0].split("│")
    assert [c.strip() for c in load[-6:-1]] == ["–", "–", "–", "–", "–"], load      # Mops/s, p50, p99, p999, mean
    timed = [ln for ln in out.splitlines() if "│ run " in ln][0]
    assert "2.00" in timed
    assert "memory: mn0 0 % 64 B/512 MiB" in out
    dash = io.StringIO()
    Console(file=dash, width=200, color_system=None).print(render(view, {"rack": "r", "system": "s", "profile": "p",
                                                                           "workload": "w"}))
    assert "0 % 64 B/512 MiB" in dash.getvalue()                   # the same cell, one formatter
    rows = [r for r in res.records() if r["step"] == 0 and r["node"] == "rack" and r["kind"] == "all"]
    assert rows[0]["p50_us"] == 0.0                                 # the JSON keeps what was recorded
