"""dmrack reproduce dolphin: every experiment on a tiny rack, with every series on Sherman (the
structure of the rows, not the figures: those come from ``dmrack reproduce dolphin --quick``,
docs/dolphin.md)."""

from __future__ import annotations

import json
import os

import pytest

from cluster.experiments import dolphin as rd
from cluster.experiments.pointpool import SharedPoints

ON_SHERMAN = {label: "sherman" for label in rd.SYSTEMS}
TINY = dict(records=600, warm_ms=0.03, measure_ms=0.05, compute=2, threads=2, systems=ON_SHERMAN)


def quiet(msg):
    pass


def _published(rows):
    return {(r.experiment, r.series, r.metric) for r in rows}


def test_scaling_and_options():
    n = 1 << 14
    assert rd.scale_of(n) == n / (1 << 29)
    assert rd.scaled_cache_bytes(200, n) == round(200 * (1 << 20) * n / (1 << 29))
    assert rd.system_options("sherman", 10 * 1024 + 5) == {"cache_nodes": 10}   # 1 KB a node, as Sherman's code
    assert rd.system_options("sherman", 3) == {"cache_nodes": 1}          # never 0 (no cache)
    # the code's 256-byte aligned allocations (ALLOC_ALLIGN_BIT 8); SMART's NODE_256-sized node blocks
    assert rd.system_options("dolphin", 5000) == {"cache_bytes": 5000, "value_bytes": 8, "alloc_align": 256}
    assert rd.system_options("smart-art", 5000) == {"cache_bytes": 5000, "full_nodes": True, "alloc_align": 256}
    assert rd.system_options("marlin", 5000) == {"cache_bytes": 5000}
    assert rd.SYSTEMS == {"Sherman": "sherman", "Marlin": "marlin", "SMART-ART": "smart-art", "Dolphin": "dolphin"}
    with pytest.raises(ValueError, match="unknown series"):
        rd._systems({"Shermann": "sherman"})


def test_scenario_uses_the_dense_big_endian_key_space():
    doc = rd.scenario("sherman", 5000, {"A": {"preset": "a"}}, records=100, warm_ms=0.1, measure_ms=0.1)
    assert doc["workload"]["keyspace"] == 200 and doc["workload"]["keyorder"] == "big"
    assert doc["workloads"]["w-A"]["zipfianitems"] == rd.PAPER_ITEMS
    assert doc["rack"]["profile"] == "cx5-100g" and doc["compute"]["threads"] == 18
    assert [s["action"] for s in doc["step"]] == ["load", "run", "run"]


def test_dolphins_index_is_loaded_as_its_own_benchmark_loads_it():
    """Dolphin's benchmark inserts keys 1..N in increasing order (half the key space full, the other
    half empty); the others load pseudo-random positions of the key space (Sherman's CityHash of i).
    On Dolphin that halves the 256-key blocks, so its index caches less per item. Fig. 7's LOAD
    stays a load at random places, on a rack of its own."""
    from workloads.ycsb import CoreWorkload

    def load_keys(workload):
        props = {k: v for k, v in workload.items() if k != "preset"}
        return CoreWorkload.preset(workload["preset"], props).load_keys(0, 100).tolist()

    doc = rd.scenario("dolphin", 5000, rd.TABLE2_WORKLOAD, records=100, warm_ms=0.1, measure_ms=0.1, ordered=True)
    assert doc["workload"]["loadorder"] == "ordered" and doc["workloads"]["w-warm"]["loadorder"] == "ordered"
    assert load_keys(doc["workload"]) == list(range(1, 101))
    hashed = rd.scenario("dolphin", 5000, rd.TABLE2_WORKLOAD, records=100, warm_ms=0.1, measure_ms=0.1)
    assert "loadorder" not in hashed["workload"]
    keys = load_keys(hashed["workload"])
    assert len(set(keys)) == 100 and max(keys) > 150          # spread over the 200-key space
    assert rd.ORDERED_LOAD == {"dolphin"}
    kw = dict(records=2048, warm_ms=0.02, measure_ms=0.02, compute=1, memory=1, threads=2)
    cache = {o: rd.measure("dolphin", rd.UNLIMITED_CACHE, rd.TABLE2_WORKLOAD, ordered=o, **kw)["memory"][0]
             for o in (False, True)}
    assert cache[True] < 0.75 * cache[False], cache


def test_fig6_rows():
    rows = rd.fig6(True, quiet, **TINY, cache_mb=(50, 200, 800))
    assert {r.experiment for r in rows} == {"fig6a", "fig6b", "fig6c", "fig6"}
    for fig in ("fig6a", "fig6b", "fig6c"):
        mine = [r for r in rows if r.experiment == fig]
        assert any(r.metric == "1 / scale" and r.series.startswith("scale") for r in mine)
        curves = [r for r in mine if r.metric == "Mops"]
        assert len(curves) == 3 * 3 and all(r.emulated > 0 for r in curves)
        assert {r.x for r in mine if r.metric == "KB"} == {50, 200, 800}
        for other in ("Sherman", "SMART-ART"):
            assert {r.x for r in mine if r.series == f"Dolphin / {other}"} == {200, 800}
    keys = _published(rows)
    assert ("fig6", "Dolphin / others at 200 MB, min over 6a-6c", "Mops ratio") in keys
    assert ("fig6a", "Dolphin at 50 MB / best other at 200 MB", "Mops ratio") in keys
    assert ("fig6", "SMART-ART: uniform / zipf 0.99", "Mops ratio (published: < 1)") in keys
    # a tiny rack is not the paper's 4 x 18 threads: no published value beside it
    assert all(r.published is None for r in rows if r.experiment != "table2")


def test_published_values_only_on_the_papers_rack_shape():
    assert rd._paper_shape({"compute": 4, "threads": 18}) and not rd._paper_shape({"compute": 4, "threads": 2})
    assert rd.PUB_FIG6_800 == {"Sherman": 1.51, "SMART-ART": 1.32} and rd.PUB_FIG6_200_RANGE == (1.16, 3.26)


def test_fig7_and_fig8_share_their_racks():
    shared = SharedPoints()                             # what one run hands its parts
    seen = []
    rows7 = rd.fig7(True, seen.append, shared=shared, **TINY)
    started = len(seen)
    rows8 = rd.fig8(True, seen.append, shared=shared, **TINY)
    assert len(seen) == started                         # fig8 ran no rack of its own
    for label in rd.SYSTEMS:
        for wl in ("A", "C", "LOAD"):
            got = {r.metric for r in rows7 if r.series == f"{label}, YCSB {wl}"}
            assert got == {"Mops", "p50 µs", "p99 µs"}
        for wl in ("range-only", "range-write"):
            assert any(r.series == f"{label}, {wl}" and r.metric == "Mops" and r.emulated > 0 for r in rows8)
    series7 = {r.series for r in rows7}
    for s in ("Dolphin / others, YCSB A, min", "Dolphin / others, YCSB A, max", "Sherman / Dolphin, YCSB C",
              "Dolphin / SMART-ART, YCSB LOAD", "SMART-ART - Dolphin, YCSB LOAD", "Marlin - Dolphin, YCSB C"):
        assert s in series7
    series8 = {r.series for r in rows8}
    for name in rd.PUB_FIG8:
        assert f"{name}, range-only" in series8
    assert any(r.metric == "1 / scale" for r in rows7) and any(r.metric == "1 / scale" for r in rows8)


def test_fig9_rows(tmp_path):
    rows = rd.fig9(True, quiet, **TINY, trace_rows=3000, trace_dir=str(tmp_path))
    assert sorted(os.listdir(tmp_path)) == ["cluster8-600-3000.csv", "cluster9-600-3000.csv"]
    for label in rd.SYSTEMS:
        for trace in rd.TRACES:
            assert any(r.series.startswith(f"{label}, {trace}-like") and r.metric == "Mops" and r.emulated > 0
                       for r in rows)
    assert {r.series for r in rows} >= {"Dolphin / best other, cluster8-like", "Sherman / Dolphin, cluster9-like"}


def test_table2_rows_degrade_to_blank_without_memory_fields():
    rows = rd.table2(True, quiet, **TINY)
    for label, (mb, gb) in rd.PUB_TABLE2.items():
        got = {r.metric: r for r in rows if r.series == label}
        assert got["CS cache for best performance, MB (scaled up)"].published == mb
        assert got["MS memory, GB (scaled up)"].published == gb
    # Sherman's statistics carry no memory fields yet on this branch: blank, not an error
    for r in rows:
        if r.series in rd.PUB_TABLE2 and r.metric.startswith(("CS", "MS")):
            assert r.emulated is None or r.emulated > 0


def test_memory_use_is_read_per_compute_node():
    from types import SimpleNamespace

    from nodes.systems.api import MemoryUse

    class Fake:
        @staticmethod
        def memory_use(layout, by_node):
            assert set(by_node) == {"cn0", "cn1"} and layout == {"setup_bytes": 1}
            return MemoryUse(2000, 3 << 20)

    node = lambda name: SimpleNamespace(name=name, system=Fake, layout={"setup_bytes": 1},  # noqa: E731
                                        clients=[SimpleNamespace(statistics=lambda: None)])
    assert rd._memory(SimpleNamespace(nodes=[node("cn0"), node("cn1")])) == (1000, 3 << 20, 1)


def test_run_writes_json_with_the_scale(tmp_path, monkeypatch):
    from rich.console import Console
    monkeypatch.setattr(rd, "SYSTEMS", dict(ON_SHERMAN))
    monkeypatch.setattr(rd, "RECORDS", {True: 500, False: 500})
    monkeypatch.setattr(rd, "TABLE2_RECORDS", {True: 1000, False: 1000})    # its own item count
    monkeypatch.setattr(rd, "WINDOWS_MS", {True: (0.03, 0.05), False: (0.03, 0.05)})
    monkeypatch.setattr(rd, "COMPUTE", 1)
    monkeypatch.setattr(rd, "MEMORY", 1)
    monkeypatch.setattr(rd, "THREADS", 2)
    console = Console(record=True, width=200)
    path = tmp_path / "d.json"
    rows = rd.EXPERIMENT.run(only=["table2"], quick=True, json_path=str(path), console=console)
    out = console.export_text()
    assert "scale" in out and "500 items" in out
    data = json.loads(path.read_text())
    assert data["format"] == "dmrack-result/1" and len(data["rows"]) == len(rows)
    assert "500 items" in data["run"]["setup"]["scale"] and "table2 with 1,000 items" in data["run"]["setup"]["scale"]
    scale = next(r for r in data["rows"] if r["series"].startswith("scale"))
    assert scale["metric"] == "1 / scale" and scale["emulated"] == (1 << 29) / 1000


def test_unregistered_systems_are_one_line(monkeypatch):
    monkeypatch.setattr(rd, "SYSTEMS", {**ON_SHERMAN, "Dolphin": "no-such-system"})
    with pytest.raises(ValueError, match="not registered: no-such-system$"):
        rd.EXPERIMENT.run(quick=True)
    rd.check_systems({"Dolphin": "sherman"})            # an override that is registered passes


def test_registered():
    from cluster.experiments.registry import find
    exp = find("reproduce", "dolphin")
    assert exp.parts == ("fig6", "fig7", "fig8", "fig9", "table2") and "jobs" in exp.options
