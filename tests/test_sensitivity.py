"""The profiles' [assumptions] table, profile overrides that reach every rack (also in point-pool
workers), and ``dmrack sensitivity``: its table, verdicts, resuming and command-line errors.

Racks here are tiny and co-located (deterministic): assertions are on virtual time."""

from __future__ import annotations

import dataclasses
import json

import pytest

from cluster.cli import main
from cluster.experiments import sensitivity
from cluster.experiments.pointpool import map_points
from cluster.experiments.registry import Experiment, available
from cluster.experiments.rows import Row, load_result, reproduction
from shm.profile import (ProfileError, active_overrides, dump_profile, list_profiles, load_profile, overridden,
                         profile_to_dict, schema_fields, with_overrides)

# ----------------------------------------------------------------------------- the [assumptions] table


@pytest.mark.parametrize("name", list_profiles())
def test_every_shipped_profile_declares_its_assumptions(name):
    p = load_profile(name)
    knobs = {k for k, _, _ in schema_fields(optional=True)}
    assert p.assumptions and set(p.assumptions) <= knobs
    assert "nic.atomic_slots" in p.assumptions            # "no published value" in every profile's comment
    assert "link.gbps" not in p.assumptions               # a signalling rate, sourced everywhere


def test_assumptions_round_trip_through_toml(tmp_path):
    p = load_profile("bf3")
    path = tmp_path / "mine.toml"
    path.write_text(dump_profile(dataclasses.replace(p, name="mine")))
    q = load_profile(str(path))
    assert q.assumptions == p.assumptions
    assert profile_to_dict(q)["assumptions"]["coherence"] == ["memory_ns", "dma_line_ns", "atomic_ns", "pause_ns",
                                                                "yield_ns"]
    # an override keeps the table, and the table itself is not a knob
    assert with_overrides(p, {"dpu.dram_ns": 240}).assumptions == p.assumptions
    with pytest.raises(ProfileError, match="cannot be overridden"):
        with_overrides(p, {"assumptions.nic": ["atomic_slots"]})


def _with_table(tmp_path, table_text: str, name: str = "bad.toml") -> str:
    text = dump_profile(dataclasses.replace(load_profile("cx6-200g"), name="bad", assumptions=()))
    path = tmp_path / name
    path.write_text(text + "\n[assumptions]\n" + table_text)
    return str(path)


@pytest.mark.parametrize("table, message", [
    ('nic = ["atomic_slot"]\n', "[assumptions] nic: 'atomic_slot' is not a knob of [nic]"),
    ('dpa = ["l1_ns"]\n', "[assumptions] dpa: no section [dpa] in this profile"),
    ('nic = "atomic_slots"\n', "[assumptions] nic: must be an array of knob names of [nic]"),
    ('nic = ["atomic_slots", "atomic_slots"]\n', "[assumptions] nic: 'atomic_slots' is listed twice"),
])
def test_a_bad_assumptions_table_is_refused_naming_file_section_and_name(tmp_path, table, message):
    path = _with_table(tmp_path, table)
    with pytest.raises(ProfileError) as ei:
        load_profile(path)
    assert ei.value.errors == [f"{path}: {message}" + ei.value.errors[0].split(message, 1)[1]]
    assert len(str(ei.value).splitlines()) == 1


def test_a_good_assumptions_table_loads(tmp_path):
    p = load_profile(_with_table(tmp_path, 'pcie = ["mmio_ns", "latency_ns"]\nnic = ["atomic_slots"]\n', "ok.toml"))
    assert p.assumptions == ("nic.atomic_slots", "pcie.latency_ns", "pcie.mmio_ns")     # schema order


def test_cli_refuses_a_bad_table_with_exit_2_and_lists_the_shipped_ones(tmp_path, capsys):
    path = _with_table(tmp_path, 'nic = ["atomic_slot"]\n')
    assert main(["check", "--system", "race", "--profile", path]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "'atomic_slot' is not a knob of [nic]" in err and path in err
    assert main(["profiles", "--assumptions"]) == 0
    out = capsys.readouterr().out
    assert all(n in out for n in list_profiles()) and "atomic_slots" in out and "dram_ns" in out


# ----------------------------------------------------------------------------- overrides reach the rack


def _read_p50_us(one_way_ns: int | None = None) -> float:
    """p50 of YCSB-C reads on a tiny co-located RACE rack on cx6-200g (module level: a pool worker
    runs it by name)."""
    from cluster.rack import ColocatedRack
    from cluster.scenario import scenario_from_dict
    d = {"rack": {"name": "t", "profile": "cx6-200g", "seed": 3},
         "compute": {"count": 1, "threads": 2, "coroutines": 2, "memory": "8MiB"},
         "memory": {"count": 2, "memory": "32MiB"}, "system": {"name": "race"},
         "workload": {"preset": "c", "recordcount": 400, "keysize": 8, "valuesize": 8},
         "step": [{"action": "load"}, {"action": "run", "duration_ms": 0.1}]}
    res = ColocatedRack(scenario_from_dict(d, source="t.toml")).run()
    reads = [k for s in res.steps if s.index == 2 for k in s.kinds if k.kind == "read"]
    return reads[0].p50_us


def test_overridden_reaches_racks_here_and_in_pool_workers():
    shipped = _read_p50_us()
    with overridden({"cx6-200g": {"link.one_way_ns": 1200}}):          # 2x the shipped 600 ns
        here = _read_p50_us()
        pooled = map_points(_read_p50_us, [(), ()], jobs=2)             # forked workers get the overrides
    assert active_overrides() == {}                                     # and they end with the block
    # +0.6 us each way: a lookup's round trips in sequence add about 2.4 us (measured: 5.95 -> 8.32 us)
    assert here > shipped + 2.0
    assert pooled == [here, here]                                       # deterministic, wherever it runs
    assert _read_p50_us() == shipped


def test_overridden_checks_its_keys_on_entry():
    with pytest.raises(ProfileError, match="unknown key 'nic.no_such_knob'"):
        with overridden({"cx6-200g": {"nic.no_such_knob": 1}}):
            pass
    with pytest.raises(ProfileError, match="'link.one_way_ns' must be >= 0"):
        with overridden({"cx6-200g": {"link.one_way_ns": -1}}):
            pass


# ----------------------------------------------------------------------------- the report, on a tiny experiment

CALLS: list = []


def _latency_us() -> float:
    return load_profile("cx6-200g").link.one_way_ns / 100        # 6.0 as shipped; read in a pool worker


def _tiny_run(only=None, quick=False, json_path=None, console=None, jobs=1):
    """A reproduction of two parts whose rows follow profile knobs: ``lat`` through a point pool."""
    CALLS.append(tuple(only or ()))
    p = load_profile("cx6-200g")
    rows = []
    if "lat" in (only or ("lat",)):
        (lat,) = map_points(_latency_us, [()], jobs=jobs)
        rows += [Row("lat", "one way", 1, "us", lat, 5.0, kind="input"),          # within ±30 % at 1x
                 Row("lat", "poll / one way", "poll/one way", "ratio", p.cpu.poll_ns / 100 / lat, 0.2)]
    if "slots" in (only or ("slots",)):
        rows.append(Row("slots", "slots", 1, "count", float(p.nic.atomic_slots), None))
    return rows


TINY = Experiment(kind="reproduce", name="tiny", title="tiny", run=_tiny_run, parts=("lat", "slots"),
                  options=("jobs",), headline=("lat",), profiles=("cx6-200g",))


def test_variants_scale_round_clamp_and_flip():
    got, notes = sensitivity.variants(("cx6-200g",), knobs=["link.one_way_ns", "nic.atomic_slots",
                                                             "nic.ordered_multiline_writes"])
    assert [(v.knob, v.factor, v.value) for v in got] == [
        ("link.one_way_ns", 0.5, 300), ("link.one_way_ns", 2.0, 1200), ("nic.atomic_slots", 0.5, 512),
        ("nic.atomic_slots", 2.0, 2048), ("nic.ordered_multiline_writes", None, True)]
    got, notes = sensitivity.variants(("cx3-56g",), knobs=["nic.requester_units"], factors=(0.5, 1.2))
    assert [(v.factor, v.value) for v in got] == []                   # 1 x 0.5 -> 1 (the minimum), 1.2 -> 1
    assert len(notes) == 2 and "stays 1" in notes[0]
    every, _ = sensitivity.variants(("cx5-100g",))
    assert {v.knob for v in every} == set(load_profile("cx5-100g").assumptions)


def test_report_rows_verdicts_directions_and_resume(tmp_path):
    path = str(tmp_path / "s.json")
    CALLS.clear()
    res = sensitivity.run(TINY, quick=True, jobs=2, knobs=["link.one_way_ns"], json_path=path)
    assert CALLS == [("lat",)] * 3                                     # 1x, 0.5x, 2x: the headline only
    by = {(e["factor"], e["row"].split(" | ")[1]): e for e in res["table"]}
    hi = by[2.0, "one way"]
    assert (hi["at_1x"], hi["at_factor"], hi["change_pct"]) == (6.0, 12.0, 100.0)
    assert (hi["verdict_1x"], hi["verdict_factor"]) == ("within", "outside")
    assert hi["kind"] == "input" and "one way | 1 | us (input)" in sensitivity.markdown(res)   # its own knob
    lo = by[0.5, "poll / one way"]                                     # 0.6 / 3 = 0.2: the ratio doubles
    assert lo["change_pct"] == 100.0 and lo["direction_1x"] == lo["direction_factor"] == "held"
    s = {x["factor"]: x for x in res["summary"]}
    assert s[2.0]["moved"] == 2 and s[2.0]["verdicts_changed"] == 1
    # the file is a result file dmrack compare / report read: 1x rows, then each variant's
    run, rows = load_result(path)
    assert run["sensitivity"]["done"] == ["cx6-200g:link.one_way_ns=300", "cx6-200g:link.one_way_ns=1200"]
    assert [r["experiment"] for r in rows] == ["lat"] * 2 + ["lat [link.one_way_ns x0.5]"] * 2 + \
        ["lat [link.one_way_ns x2]"] * 2
    assert main(["compare", path, path]) == 0
    # given the same file again, nothing runs again
    CALLS.clear()
    again = sensitivity.run(TINY, quick=True, jobs=1, knobs=["link.one_way_ns"], json_path=path)
    assert CALLS == [] and again["table"] == res["table"]
    # another knob added: only its runs are made
    more = sensitivity.run(TINY, quick=True, knobs=["link.one_way_ns", "cpu.poll_ns"], json_path=path)
    assert CALLS == [("lat",)] * 2 and len(more["summary"]) == 4
    assert "cpu.poll_ns" in sensitivity.markdown(more)


def test_a_failing_variant_is_recorded_not_fatal(tmp_path):
    def run(only=None, quick=False, json_path=None, console=None, jobs=1):
        if load_profile("cx6-200g").link.one_way_ns > 600:
            raise RuntimeError("calendars aliased")
        return [Row("lat", "one way", 1, "us", 1.0, 1.0)]
    exp = dataclasses.replace(TINY, run=run)
    res = sensitivity.run(exp, knobs=["link.one_way_ns"], json_path=str(tmp_path / "f.json"))
    s = {x["factor"]: x for x in res["summary"]}
    assert s[2.0]["error"] == "RuntimeError: calendars aliased" and s[0.5]["error"] is None


def _shared_part(name: str):
    """A part that reads one point shared with the other part of its run, as FlexKV's and PD3's do."""
    def part(quick, progress, *, jobs=1, shared=None):
        (lat,) = shared.measure(_latency_us, ["one way"], args=lambda key: (), jobs=jobs)
        CALLS.append(name)
        return [Row(name, "one way", 1, "us", lat, 5.0)]
    return part


SHARING = reproduction("sharing", "Sharing", title="two parts, one point", parts={"a": _shared_part("a"),
                       "b": _shared_part("b")}, side_by_side=("a", "b"), headline=("a", "b"),
                       profiles=("cx6-200g",), setup=lambda quick: {"profile": "cx6-200g", "scale": "one point"})


def test_each_variant_measures_the_points_its_parts_share_afresh(tmp_path):
    """Every run of a variant is a run of its own: the point both parts read is measured at that
    variant's knob value (a cache kept from the 1x run would give 6.0 everywhere), and the run
    record holds the reproduction's declared setup."""
    path = str(tmp_path / "s.json")
    CALLS.clear()
    sensitivity.run(SHARING, quick=True, jobs=1, knobs=["link.one_way_ns"], json_path=path)
    run, rows = load_result(path)
    assert {r["experiment"]: r["emulated"] for r in rows} == {
        "a": 6.0, "b": 6.0, "a [link.one_way_ns x0.5]": 3.0, "b [link.one_way_ns x0.5]": 3.0,
        "a [link.one_way_ns x2]": 12.0, "b [link.one_way_ns x2]": 12.0}
    assert CALLS == ["a", "b"] * 3 and run["setup"] == {"profile": "cx6-200g", "scale": "one point"}


def test_every_reproduction_declares_a_headline_and_its_profiles():
    for exp in available("reproduce"):
        assert exp.headline and set(exp.headline) <= set(exp.parts), exp.name
        assert exp.profiles and all(p in list_profiles() for p in exp.profiles), exp.name
    with pytest.raises(ValueError, match="headline part 'nope' is not one of its parts"):
        dataclasses.replace(TINY, headline=("nope",))


# ----------------------------------------------------------------------------- command-line errors


@pytest.mark.parametrize("argv, message", [
    (["sensitivity", "nosuch"], "unknown paper 'nosuch'"),
    (["sensitivity", "pd3", "--knobs", "nic.nope"], "--knobs: 'nic.nope' is not a knob of profile bf3"),
    (["sensitivity", "pd3", "--factors", "0.5,x"], "--factors: 'x' is not a number"),
    (["sensitivity", "pd3", "--factors", "1"], "--factors: '1' must be a positive number other than 1"),
    (["sensitivity", "pd3", "--only", "fig99"], "unknown experiment 'fig99'"),
    (["sensitivity", "pd3", "--jobs", "0"], "--jobs takes a whole number"),
])
def test_cli_errors_are_one_line_and_exit_2(argv, message, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1, err


def test_cli_refuses_a_json_file_of_another_run(tmp_path, capsys):
    path = tmp_path / "other.json"
    path.write_text(json.dumps({"format": "dmrack-result/1", "run": {"command": "reproduce pd3"}, "rows": []}))
    assert main(["sensitivity", "pd3", "--only", "fig8", "--knobs", "coherence.pause_ns", "--json", str(path)]) == 2
    assert "holds no sensitivity run" in capsys.readouterr().err
