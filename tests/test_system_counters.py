"""A system's own statistics: every numeric field of its clients' ``statistics()`` records goes
into the results per compute node (summed over the node's clients) and summed over the nodes, and
the dashboard shows them. The system here is a plugin from a temporary package whose record has
counters no built-in system has (hops, failed CASes, cache hits), a float, a node-shared
``cache_bytes`` and fields that are not counters."""

from __future__ import annotations

import json

import pytest
from rich.console import Console

from cluster.dashboard import RackMeter, render
from cluster.rack import ColocatedRack
from cluster.scenario import scenario_from_dict
from cluster.stats import SYS_MAX, SYS_NAME_BYTES, StatsPlane
from cluster.supervisor import Supervisor
from nodes.systems.api import node_statistics, statistics_fields
from tests.test_plugins import _package, fresh_registry  # noqa: F401  (the fixture forgets the plugin)
from tests.test_rack import LOAD, rack_dict, run

HOP_HT = """
    from typing import NamedTuple

    from nodes.systems.race import RaceSystem
    from nodes.systems.race.client import RaceClient


    class HopStats(NamedTuple):
        hops: int               # two per completed get
        failed_cases: int       # RACE's slot CASes that failed
        cache_hits: int         # one per completed update
        hit_ratio: float        # a float field
        cache_bytes: int        # the node's shared cache: every client reports the same
        origin: str             # not a number: left out
        warm: bool              # not a counter: left out


    class HopClient(RaceClient):
        hops = updates_done = 0

        def get(self, co, key):
            value = yield from super().get(co, key)
            self.hops += 2
            return value

        def update(self, co, key, value):
            ok = yield from super().update(co, key, value)
            self.updates_done += 1
            return ok

        def statistics(self):
            r = super().statistics()
            return HopStats(self.hops, r.cas_retries, self.updates_done, 0.25, 4096, "hop-ht", True)


    class HopHT(RaceSystem):
        name = "hop-ht"

        @classmethod
        def client(cls, fabric, layout, thread, options):
            return HopClient(fabric, layout, thread, cls.check_options(dict(options or {}), "hop-ht"))
"""

OWN = ("hops", "failed_cases", "cache_hits", "hit_ratio", "cache_bytes")


@pytest.fixture
def hop_ht(tmp_path, monkeypatch):
    """The plugin's system name (module:Class) and the directory its package is in."""
    pkg = _package(tmp_path, monkeypatch, HOP_HT)
    return f"{pkg}.ht:HopHT", tmp_path


def _hop_rack(system: str, **kw) -> dict:
    d = rack_dict(LOAD, run(0.1), run(0.1, "b"), compute=2, threads=2, coroutines=2, records=400, **kw)
    d["system"] = {"name": system}
    return d


def _reads_and_updates(doc: dict, node: str) -> tuple[int, int]:
    """A compute node's completed gets and updates over every step, from the results' steps."""
    reads = updates = 0
    for st in doc["steps"]:
        for n in st["nodes"]:
            if n["node"] == node:
                reads += n["kinds"].get("read", {}).get("ops", 0)
                updates += n["kinds"].get("update", {}).get("ops", 0)
    return reads, updates


def _check_document(doc: dict, threads: int) -> None:
    """Per node: the plugin's numeric fields, summed over its clients (cache_bytes: the node's one
    cache), tied to the operations the node recorded; the summary: their sum over the nodes."""
    compute = [n for n in doc["nodes"] if n["role"] == "compute"]
    assert len(compute) == 2
    for n in compute:
        reads, updates = _reads_and_updates(doc, n["node"])
        assert reads > 0 and updates > 0
        got = n["system"]
        assert tuple(got) == OWN                           # every numeric field, in the record's order
        assert got["hops"] == 2 * reads and got["cache_hits"] == updates
        assert got["hit_ratio"] == pytest.approx(0.25 * threads)
        assert got["cache_bytes"] == 4096                  # shared by the node's threads: not summed over them
    assert all(n["system"] == {} for n in doc["nodes"] if n["role"] != "compute")
    total = doc["summary"]["system"]
    assert tuple(total) == OWN
    for name in OWN:
        assert total[name] == pytest.approx(sum(n["system"][name] for n in compute))


def test_a_plugins_counters_are_in_the_results_per_node_and_summed_co_located(hop_ht):
    system, _ = hop_ht
    rack = ColocatedRack(scenario_from_dict(_hop_rack(system), source="hop.toml"))
    res = rack.run()
    doc = json.loads(json.dumps(res.document()))           # as results.json carries it
    _check_document(doc, threads=2)
    # the failed CASes are the clients' own figure, summed over each node's clients
    for node in rack.nodes:
        row = next(n for n in doc["nodes"] if n["node"] == node.name)
        race = [super(type(c), c).statistics() for c in node.clients]     # RaceClient's own record
        assert row["system"]["failed_cases"] == sum(r.cas_retries for r in race)
    # the summary under the table lists the counters that are not 0, summed
    total = doc["summary"]["system"]
    line = next(ln for ln in res.table().caption.splitlines() if "counters (statistics()" in ln)
    assert line.startswith("hop-ht counters") and f"hops {total['hops']:,}, " in line
    assert f"cache_bytes {total['cache_bytes']:,}" in line and "origin" not in line


def test_a_plugins_counters_are_in_results_json_of_a_rack_of_processes(hop_ht, tmp_path):
    """``dmrack run --out``'s results.json, from node processes that publish through the stats plane."""
    system, _ = hop_ht
    out = tmp_path / "results.json"
    sup = Supervisor(scenario_from_dict(_hop_rack(system), source="hop.toml"), quiet=True, json_path=str(out))
    assert sup.run() == 0
    _check_document(json.loads(out.read_text()), threads=2)


# -- the pieces ---------------------------------------------------------------------------------------


def test_statistics_fields_keep_numbers_only_and_a_node_sums_them():
    from typing import NamedTuple

    class Rec(NamedTuple):
        hops: int
        ratio: float
        cache_bytes: int
        name: str
        flag: bool
        nested: tuple

    a, b = Rec(3, 0.5, 100, "x", True, (1, 2)), Rec(4, 0.25, 300, "y", False, ())
    assert statistics_fields(a) == {"hops": 3, "ratio": 0.5, "cache_bytes": 100}
    assert statistics_fields(None) == {} and statistics_fields(42) == {}
    assert node_statistics([a, None, b]) == {"hops": 7, "ratio": 0.75, "cache_bytes": 300}


def test_the_stats_plane_carries_a_systems_counters_by_name(tmp_path):
    with StatsPlane.create([("cn0", "compute"), ("mn0", "memory")], prefix=f"dmrack.t{tmp_path.name[-8:]}",
                           max_steps=2) as plane:
        w = plane.writer("cn0")
        w.begin(1)
        assert plane.read("cn0").system == {}
        w.set_system_counters({"hops": 5, "ratio": 0.125, "delta": -3})
        assert plane.read("cn0").system == {"hops": 5, "ratio": 0.125, "delta": -3}
        long = "n" * (SYS_NAME_BYTES + 10)
        w.heartbeat(10, 1, 1, system={"hops": 6, long: 1})           # the set replaces the previous one
        assert plane.read("cn0").system == {"hops": 6, "n" * SYS_NAME_BYTES: 1}
        w.heartbeat(20, 2, 2)                                        # no system counters given: kept
        assert plane.read("cn0").system == {"hops": 6, "n" * SYS_NAME_BYTES: 1}
        w.set_system_counters({f"c{i}": i for i in range(SYS_MAX + 5)})
        assert plane.read("cn0").system == {f"c{i}": i for i in range(SYS_MAX)}
        for bad in ({"x": float("nan")}, {"x": "3"}, {"": 1}, {"x": 1 << 64}):
            with pytest.raises((TypeError, ValueError)):
                w.set_system_counters(bad)
        assert plane.read("mn0").system == {}


def test_the_dashboard_shows_the_systems_counters_summed(tmp_path):
    with StatsPlane.create([("cn0", "compute"), ("cn1", "compute")], prefix=f"dmrack.t{tmp_path.name[-8:]}",
                           max_steps=2) as plane:
        for i, name in enumerate(("cn0", "cn1")):
            w = plane.writer(name)
            w.begin(1)
            w.set_system_counters({"hops": 1000 * (i + 1), "failed_cases": 0, "hit_ratio": 0.5})
        view = RackMeter().update(plane.snapshot(), now_ns=1)
        assert view.system == (("hops", 3000), ("failed_cases", 0), ("hit_ratio", 1.0))
        console = Console(record=True, width=140)
        console.print(render(view, {"system": "hop-ht"}))
        text = console.export_text()
        assert "hop-ht counters" in text and "1 at 0 not shown" in text
        assert "hops" in text and "3,000" in text and "hit_ratio" in text and "failed_cases" not in text
