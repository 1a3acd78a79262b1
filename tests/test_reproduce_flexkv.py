"""dmrack reproduce flexkv: the experiments on a tiny rack (the structure of the rows and that the
values are sensible, not the figures: those come from ``dmrack reproduce flexkv --quick``)."""

from __future__ import annotations

import json

import pytest

from cluster.experiments import flexkv as rf
from cluster.experiments import reproduce_flexkv

TINY = dict(records=2000, interval_us=200, windows={"fixed": (0.3, 0.4), "knob": (0.6, 0.4)}, compute=2, threads=2,
            coroutines=4)


def quiet(msg):
    pass


def test_scaling_and_options():
    assert rf.cn_memory_bytes(10_000_000) == 64 << 20
    assert rf.cn_memory_bytes(20_000) == round((64 << 20) * 20_000 / 10_000_000)
    steps = rf.ablation_options()
    assert list(steps) == ["Base", "+Proxy", "+Rank Hotness", "+KV Cache", "+Adaptive Split"]
    assert steps["Base"] == {"knob": False, "offload_ratio": 0.0, "kv_cache": False, "rank_hotness": False}
    assert steps["+Adaptive Split"] == {"knob": True, "offload_ratio": 0.2, "kv_cache": True, "rank_hotness": True}
    opts = rf.system_options("flexkv", {"knob": False}, records=20_000, interval_us=500)
    assert opts["cn_memory_bytes"] == rf.cn_memory_bytes(20_000) and opts["interval_us"] == 500 and not opts["knob"]


def test_scenario_is_a_bulk_load_then_the_runs():
    doc = rf.scenario("flexkv", rf.full_options(), [("B", 1.0), ("A", 2.0)], records=100, interval_us=300)
    assert doc["rack"]["profile"] == "cx3-56g" and doc["compute"]["coroutines"] == rf.COROUTINES
    assert doc["workload"]["preset"] == "b" and doc["workloads"]["w-A"]["preset"] == "a"
    assert doc["workload"]["keysize"] + doc["workload"]["valuesize"] == 128
    assert doc["workload"]["zipfianitems"] == rf.PAPER_KEYS
    assert [s["action"] for s in doc["step"]] == ["load", "run", "run"]
    assert [s["workload"] for s in doc["step"][1:]] == ["default", "w-A"]


def test_chosen_ratio_weights_the_map_by_time():
    events = [(0, "reassign", 0.2, 1), (50, "settled", 0.4, None), (60, "reassign", 0.4, 1)]
    mean, settled = rf.chosen_ratio(events, 40, 80)
    assert mean == pytest.approx((0.2 * 20 + 0.4 * 20) / 40) and settled == 0.4
    assert rf.chosen_ratio([], 0, 10) == (None, None)


def test_table1_and_fig19_rows():
    rows = rf.table1(True, quiet, **TINY)
    for w in rf.WORKLOADS:
        got = {r.series: r for r in rows if r.x == f"YCSB {w}"}
        pub = rf.PUB_TABLE1[w]
        assert got["offload ratio, knob's last settled"].published == pub[0]
        assert got["KV-cache hits / SEARCHes"].published == pub[1]
        assert got["SEARCH latency, otherwise"].published == pub[5]
        assert got["FlexKV"].emulated > 0
        for name in ("KV-cache hits / SEARCHes", "address-cache hits / SEARCHes"):
            v = got[name].emulated
            assert v is None or 0 <= v <= 100
        if w != "A":                                     # read-mostly: some KV pairs are cached
            assert got["SEARCH latency, otherwise"].emulated > 0
    assert any(r.metric == "1 / scale" for r in rows)
    rows = rf.fig19(True, quiet, **TINY)
    loads = [r for r in rows if r.metric == "proxy ops (window)"]
    assert {r.series for r in loads} == {"without Alg. 1", "with Alg. 1"} and len(loads) == 2 * TINY["compute"]
    assert all(r.emulated >= 0 for r in loads) and sum(r.emulated for r in loads) > 0
    cv = next(r for r in rows if r.metric == "CV ratio")
    assert cv.published == pytest.approx(0.573) and cv.series == "with / without Alg. 1"


def test_fig18_samples_throughput_and_marks_the_manager():
    rows = rf.fig18(True, quiet, phases_ms=(0.8, 0.8), **TINY)
    tput = [r for r in rows if r.series == "FlexKV, YCSB B then A"]
    assert len(tput) >= 4 and all(r.emulated >= 0 for r in tput)
    assert [r.x for r in tput] == sorted(r.x for r in tput)
    assert any(r.series.startswith("manager: ") for r in rows)
    pub = {r.series: r.published for r in rows if r.published is not None}
    assert pub["YCSB B: knob's last settled ratio"] == 0.3 and pub["YCSB A: knob's last settled ratio"] == 0.6
    assert pub["reassignment round, min"] == 3.24


def test_fig17_skips_an_unregistered_system():
    rows = rf.fig17(True, quiet, systems={"FlexKV-OP": "no-such-system"}, **TINY)
    assert any("not registered" in r.series for r in rows)
    assert {r.x for r in rows if r.series == "FlexKV"} == {f"YCSB {w}" for w in rf.WORKLOADS}
    mean = next(r for r in rows if r.series == "FlexKV-OP / FlexKV")
    assert mean.emulated is None and mean.published == pytest.approx(0.751)


def test_run_writes_json_with_the_scale(tmp_path, monkeypatch):
    from rich.console import Console
    monkeypatch.setattr(rf, "RECORDS", {True: 2000, False: 2000})
    monkeypatch.setattr(rf, "INTERVAL_US", {True: 200, False: 200})
    monkeypatch.setattr(rf, "WINDOWS_MS", {q: TINY["windows"] for q in (True, False)})
    monkeypatch.setattr(rf, "COMPUTE", 2)
    monkeypatch.setattr(rf, "THREADS", 2)
    monkeypatch.setattr(rf, "COROUTINES", 4)
    console = Console(record=True, width=200)
    path = tmp_path / "f.json"
    rows = reproduce_flexkv.EXPERIMENT.run(only=["fig19"], quick=True, json_path=str(path), console=console)
    out = console.export_text()
    assert "scaled" in out and "2,000 KV pairs" in out
    data = json.loads(path.read_text())
    assert data["format"] == "dmrack-result/1" and len(data["rows"]) == len(rows)
    assert "2,000 KV pairs" in data["run"]["setup"]["scale"]
    assert all({"published", "emulated"} <= set(r) for r in data["rows"])


def test_registered():
    from cluster.experiments.registry import find
    exp = find("reproduce", "flexkv")
    assert exp.parts == ("fig3", "fig11", "fig12", "fig13", "fig14", "fig15", "fig21", "fig22", "fig23", "fig16",
                         "table1", "fig17", "fig19", "fig20", "fig24", "fig18")
    assert "jobs" in exp.options
    with pytest.raises(ValueError, match="unknown experiment"):
        reproduce_flexkv.EXPERIMENT.run(only=["fig99"], quick=True)


def test_a_failed_point_is_a_note_and_blank_rows():
    kw = {k: v for k, v in rf._sizes(True, **TINY).items() if k != "windows"}
    got = rf._run_point(None, "no-such-system", {}, [("A", 0.1)], kw, None)
    assert set(got) == {"error"} and "\n" not in got["error"]
    spec = rf._spec("flexkv", rf.full_options(), "A", rf._sizes(True, **TINY))
    notes = rf.failure_rows("fig16", [spec], [got])
    assert len(notes) == 1 and notes[0].series.startswith("point failed: flexkv YCSB A") and notes[0].emulated is None
    assert rf.value_of(got) is None


def test_the_comparison_runs_registered_series_and_notes_the_others():
    """Fig. 13 on a tiny rack: FlexKV's points (3 memory nodes, 3 copies), a note row for a series
    whose system is not registered; FlexKV falls as updates grow."""
    from cluster.experiments import flexkv_compare as cmp
    rows = cmp.fig13(True, None, systems={"FlexKV": "flexkv", "Nope": "no-such-system"}, **TINY)
    assert any(r.series.startswith("Nope: system 'no-such-system' is not registered") for r in rows)
    mops = [r.emulated for r in rows if r.series == "FlexKV" and r.metric == "Mops"]
    assert len(mops) == len(cmp.MIXES[True]) and all(m and m > 0 for m in mops)
    assert mops[0] > mops[-1]                       # all searches against all updates
    assert cmp.compare_options("flexkv", cn_bytes=1000)["replicas"] == cmp.REPLICAS
