"""Scenarios: default steps, the shipped examples, every step action and every way a step can be
wrong (one SpecError line naming the file, ``step[N].key`` and the value), workload resolution and
the warm-up scenario. Nothing is spawned: scenarios are plain data.
"""

from __future__ import annotations

import dataclasses
import pickle
from pathlib import Path

import pytest

from cluster.scenario import (
    ACTIONS, KillStep, LoadStep, RunStep, Scenario, SetStep, SleepStep, SpecError, WARMUP_RECORDS, WARMUP_RUN_MS,
    default_scenario, load_scenario, parse_scenario, warmup_scenario,
)
from cluster.rack import compile_scenario
from cluster.spec import DEFAULT_SOURCE, default_spec
from tests.test_spec import _fake_workloads, test_systems, write  # noqa: F401  (autouse fixture)

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def scenario_of(tmp_path: Path, text: str, **kw) -> Scenario:
    return load_scenario(write(tmp_path, text), **kw)


def error_of(tmp_path: Path, text: str, **kw) -> str:
    with pytest.raises(SpecError) as e:
        load_scenario(write(tmp_path, text), **kw)
    msg = str(e.value)
    assert "\n" not in msg, msg
    assert msg.startswith(str(tmp_path / "rack.toml") + ":"), msg
    return msg


# ----------------------------------------------------------------------------- default steps


def test_default_scenario():
    s = default_scenario()
    assert s.source == DEFAULT_SOURCE and s.spec == default_spec()
    assert s.steps == (LoadStep(index=1, workload="default"), RunStep(index=2, workload="default"))
    assert s.steps[1].duration_ms is None and s.until_stopped
    assert s.workloads_used() == ["default"]


def test_default_scenario_seed_and_duration():
    s = default_scenario(seed=11, duration_ms=2.5)
    assert s.spec.seed == 11
    assert s.steps[-1] == RunStep(index=2, workload="default", duration_ms=2.5)
    assert not s.until_stopped
    assert default_scenario(duration_ms=0).until_stopped
    with pytest.raises(SpecError, match=r"run\.duration_ms = -1"):
        default_scenario(duration_ms=-1)


def test_file_without_steps_gets_default_steps(tmp_path):
    s = scenario_of(tmp_path, "[run]\nduration_ms = 3\n")
    assert s.steps == (LoadStep(1, "default"), RunStep(2, "default", 3.0))
    s = scenario_of(tmp_path, "[run]\nload = false\n")
    assert s.steps == (RunStep(1, "default", None),)


def test_steps_are_plain_picklable_data():
    s = default_scenario()
    assert pickle.loads(pickle.dumps(s)) == s
    assert [st.action for st in s.steps] == ["load", "run"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.steps[0].count = 5  # type: ignore[misc]


# ----------------------------------------------------------------------------- examples


def test_example_ycsb_switch():
    s = load_scenario(EXAMPLES / "ycsb-switch.toml")
    spec = s.spec
    assert spec.name == "ycsb-switch" and spec.seed == 7 and spec.profile_name == "cx6-200g"
    assert spec.memory.memory_bytes == 256 << 20
    assert set(spec.workloads) == {"default", "read-mostly"}
    assert spec.workloads["read-mostly"].preset == "b"
    assert spec.workloads["read-mostly"].overrides["recordcount"] == 20000
    assert s.steps == (
        LoadStep(1, "default"),
        RunStep(2, "default", 5.0),
        SetStep(3, "link.gbps", 100),
        RunStep(4, "read-mostly", 5.0),
    )
    assert not s.until_stopped


def test_example_minimal():
    s = load_scenario(EXAMPLES / "minimal.toml")
    assert s.spec.name == "minimal"
    assert s.steps == (LoadStep(1, "default"), RunStep(2, "default", 10.0))


def test_example_kill():
    s = load_scenario(EXAMPLES / "kill.toml")
    assert s.spec.on_node_death == "continue"
    assert [st.action for st in s.steps] == ["load", "run", "kill", "run"]
    assert s.steps[2] == KillStep(3, "cn1")


@pytest.mark.parametrize("name", ["minimal", "ycsb-switch", "kill"])
def test_examples_describe(name):
    lines = load_scenario(EXAMPLES / f"{name}.toml").describe()
    assert lines[0].startswith(f"rack {name} (")
    assert any(line.startswith("step 1: load") for line in lines)
    assert all("\n" not in line for line in lines)


@pytest.mark.parametrize("name", ["minimal", "ycsb-switch", "kill"])
def test_examples_build_with_the_real_workloads(name):
    pytest.importorskip("workloads.ycsb")
    s = load_scenario(EXAMPLES / f"{name}.toml")
    for w in s.spec.workloads.values():
        assert w.build() is not None


# ----------------------------------------------------------------------------- each action


def test_every_action(tmp_path):
    s = scenario_of(tmp_path, """
[rack]
on_node_death = "continue"
[compute]
threads = 8
coroutines = 4
[workloads.hot]
preset = "c"
requestdistribution = "hotspot"

[[step]]
action = "load"
count = 500
workload = "hot"
[[step]]
action = "run"
workload = "hot"
duration_ms = 20
[[step]]
action = "set"
knob = "link.gbps"
value = 100
[[step]]
action = "set"
knob = "coroutines"
value = 2
[[step]]
action = "set"
knob = "threads"
value = 8
[[step]]
action = "kill"
node = "mn1"
[[step]]
action = "sleep"
duration_ms = 1
[[step]]
action = "run"
workload = "B"
""")
    assert s.steps == (
        LoadStep(1, "hot", 500),
        RunStep(2, "hot", 20.0),
        SetStep(3, "link.gbps", 100),
        SetStep(4, "coroutines", 2),
        SetStep(5, "threads", 8),
        KillStep(6, "mn1"),
        SleepStep(7, 1.0),
        RunStep(8, "b", None),
    )
    assert s.until_stopped
    assert s.steps[2].is_profile_knob and not s.steps[3].is_profile_knob
    assert s.workloads_used() == ["hot", "b"]
    assert set(ACTIONS) == {"load", "run", "set", "kill", "restart", "sleep"}
    lines = s.describe()
    for want in ("step 1: load 500 keys of workload hot", "step 2: run workload hot for 20 ms",
                 "step 3: set link.gbps = 100", "step 4: set active coroutines per compute node = 2",
                 "step 6: kill node mn1", "step 7: sleep 1 ms", "step 8: run workload b until stopped"):
        assert want in lines, (want, lines)


def test_a_preset_letter_in_a_step_runs_over_the_default_workloads_keys(tmp_path):
    s = scenario_of(tmp_path, """
[workload]
recordcount = 777
keysize = 16
requestdistribution = "uniform"
[[step]]
action = "load"
[[step]]
action = "run"
workload = "d"
duration_ms = 1
[[step]]
action = "run"
workload = "d"
duration_ms = 1
""")
    d = s.spec.workloads["d"]
    assert d.name == "d" and d.preset == "d" and d.file is None
    # The data shape is inherited; the request distribution is the preset's own.
    assert d.overrides == {"recordcount": 777, "keysize": 16, "valuesize": 8}
    assert d.table == "step[2].workload" and d.source == str(tmp_path / "rack.toml")
    assert list(s.spec.workloads) == ["default", "d"]


def test_scenario_validation_builds_the_step_presets_too(tmp_path, monkeypatch):
    calls = _fake_workloads(monkeypatch)
    scenario_of(tmp_path, '[[step]]\naction = "run"\nworkload = "e"\n')
    assert [c[1] for c in calls] == ["a", "e"]


def test_a_bad_property_fails_before_anything_runs(tmp_path, monkeypatch):
    _fake_workloads(monkeypatch, fail_on="requestdistribution")
    msg = error_of(tmp_path, '[workloads.hot]\nrequestdistribution = "x"\n[[step]]\naction = "run"\nworkload = "hot"\n')
    assert "workloads.hot: requestdistribution = 'x'" in msg


def test_seed_override_applies_to_scenarios(tmp_path):
    path = write(tmp_path, '[rack]\nseed = 3\n[[step]]\naction = "sleep"\nduration_ms = 1\n')
    assert load_scenario(path).spec.seed == 3
    assert load_scenario(path, seed=4).spec.seed == 4


def test_parse_scenario_resolves_paths_against_base_dir(tmp_path):
    write(tmp_path, "recordcount=5\n", "w/x.properties")
    s = parse_scenario('[workload]\nfile = "w/x.properties"\n', base_dir=tmp_path)
    assert s.spec.workload.file == str((tmp_path / "w/x.properties").resolve())


# ----------------------------------------------------------------------------- bad steps

STEP = '[[step]]\naction = "load"\n'
BAD_STEPS = [
    ('[[step]]\naction = "jump"\n', ['step[1].action = "jump"', "unknown action", "load, run, set, kill, restart, sleep"]),
    ('[[step]]\naction = "rnu"\n', ['step[1].action = "rnu"', "did you mean run"]),
    ('[[step]]\nnode = "cn0"\n', ["step[1]", "missing action"]),
    (STEP + '[[step]]\naction = "kill"\n', ["step[2]", "'kill' step needs node"]),
    ('[[step]]\naction = "set"\nknob = "link.gbps"\n', ["step[1]", "'set' step needs value"]),
    ('[[step]]\naction = "sleep"\n', ["step[1]", "'sleep' step needs duration_ms"]),
    ('[[step]]\naction = "kill"\nnode = "cn1"\nduration_ms = 3\n',
     ["step[1].duration_ms = 3", "not a field of a 'kill' step", "it takes node"]),
    ('[[step]]\naction = "run"\nduraton_ms = 3\n', ["step[1].duraton_ms = 3", "did you mean duration_ms"]),
    ('[[step]]\naction = "run"\n' + STEP, ["step[1].duration_ms", "only the last step may run until stopped"]),
    ('[[step]]\naction = "run"\nduration_ms = 0\n' + STEP,
     ["step[1].duration_ms = 0", "only the last step may run until stopped"]),
    ('[[step]]\naction = "run"\nduration_ms = -2\n', ["step[1].duration_ms = -2", "> 0"]),
    ('[[step]]\naction = "run"\nduration_ms = "5ms"\n', ['step[1].duration_ms = "5ms"', "number"]),
    ('[[step]]\naction = "sleep"\nduration_ms = 0\n', ["step[1].duration_ms = 0", "> 0"]),
    ('[[step]]\naction = "run"\nworkload = "hott"\n[workloads.hot]\npreset = "c"\n',
     ['step[1].workload = "hott"', "unknown workload", "did you mean hot"]),
    ('[[step]]\naction = "load"\nworkload = 3\n', ["step[1].workload = 3", "workload name"]),
    ('[[step]]\naction = "load"\ncount = 0\n', ["step[1].count = 0", "integer >= 1"]),
    ('[[step]]\naction = "load"\ncount = 2.5\n', ["step[1].count = 2.5", "integer >= 1"]),
    ('[[step]]\naction = "load"\nbulk = "yes"\n', ['step[1].bulk = "yes"', "true or false"]),
    ('[[step]]\naction = "load"\ncount = 10\n[[step]]\naction = "load"\nbulk = true\n',
     ["step[2].bulk = true", "only the first load step"]),
    ('[[step]]\naction = "kill"\nnode = "cn9"\n', ['step[1].node = "cn9"', "no such node", "cn0, cn1, mn0, mn1"]),
    ('[[step]]\naction = "kill"\nnode = "mgr"\n', ['step[1].node = "mgr"', "manager"]),
    ('[rack]\non_node_death = "continue"\n[[step]]\naction = "kill"\nnode = "cn1"\n'
     '[[step]]\naction = "kill"\nnode = "cn1"\n', ['step[2].node = "cn1"', "already killed by step[1]"]),
    ('[[step]]\naction = "restart"\nnode = "cn1"\n', ['step[1].node = "cn1"', "cn1 is not dead at this step"]),
    ('[[step]]\naction = "kill"\nnode = "cn1"\n[[step]]\naction = "restart"\nnode = "cn1"\n'
     '[[step]]\naction = "restart"\nnode = "cn1"\n', ['step[3].node = "cn1"', "not dead at this step"]),
    ('[[step]]\naction = "kill"\nnode = "mn0"\n[[step]]\naction = "restart"\nnode = "mn0"\n',
     ['step[2].node = "mn0"', "mn0 is a memory node; only a compute node can be restarted"]),
    ('[[step]]\naction = "restart"\nnode = "mgr"\n', ['step[1].node = "mgr"', "the manager runs the steps",
                                                      "only a compute node can be restarted"]),
    ('[[step]]\naction = "restart"\nnode = "cn7"\n', ['step[1].node = "cn7"', "no such node"]),
    ('[[step]]\naction = "set"\nknob = "link.gbs"\nvalue = 1\n', ['step[1].knob = "link.gbs"', "unknown knob",
                                                                  "did you mean link.gbps"]),
    ('[[step]]\naction = "set"\nknob = "name"\nvalue = 1\n', ['step[1].knob = "name"', "unknown knob"]),
    ('[[step]]\naction = "set"\nknob = "link.gbps"\nvalue = -5\n', ["step[1].value = -5", "link.gbps", ">= 0.001"]),
    ('[[step]]\naction = "set"\nknob = "link.gbps"\nvalue = "fast"\n', ['step[1].value = "fast"', "number"]),
    ('[[step]]\naction = "set"\nknob = "nic.atomic_units"\nvalue = 2.5\n', ["step[1].value = 2.5", "integer"]),
    ('[[step]]\naction = "set"\nknob = "threads"\nvalue = 5\n', ["step[1].value = 5", "compute.threads = 4"]),
    ('[[step]]\naction = "set"\nknob = "coroutines"\nvalue = 0\n', ["step[1].value = 0", "from 1 to"]),
    ('[[step]]\naction = "set"\nknob = "threads"\nvalue = 1.5\n', ["step[1].value = 1.5", "integer"]),
    ('[step]\naction = "load"\n', ["step = {action = \"load\"}", "[[step]]"]),
    ("step = []\n", ["step = []", "no steps"]),
    ("step = [1, 2]\n", ["step = [1, 2]", "[[step]]"]),
]


@pytest.mark.parametrize("text, want", BAD_STEPS, ids=[w[0] for _, w in BAD_STEPS])
def test_bad_steps_name_file_key_and_value(tmp_path, text, want):
    msg = error_of(tmp_path, text)
    for w in want:
        assert w in msg, f"{w!r} not in {msg!r}"


def test_set_steps_are_checked_in_the_context_of_earlier_ones(tmp_path):
    # qp.max_rd_atomic must stay <= qp.max_send_wr: lowering max_send_wr first makes the second
    # step's value illegal although it would be fine against the profile as loaded.
    from shm.profile import load_profile
    p = load_profile("cx6-200g")
    rd = p.qp.max_rd_atomic
    msg = error_of(tmp_path, f"""
[[step]]
action = "set"
knob = "qp.max_send_wr"
value = {rd}
[[step]]
action = "set"
knob = "qp.max_rd_atomic"
value = {rd + 1}
""")
    assert f"step[2].value = {rd + 1}" in msg and "max_send_wr" in msg


def test_kill_as_last_step_with_stop_is_allowed(tmp_path):
    s = scenario_of(tmp_path, STEP + '[[step]]\naction = "kill"\nnode = "mn0"\n')
    assert s.steps[-1] == KillStep(2, "mn0")


def test_client_nodes_can_be_killed(tmp_path):
    s = scenario_of(tmp_path, '[system]\nname = "needs-client"\n[client]\ncount = 1\n'
                              '[[step]]\naction = "kill"\nnode = "cl0"\n')
    assert s.steps == (KillStep(1, "cl0"),)


# ----------------------------------------------------------------------------- warm-up


def test_warmup_scenario_is_small_and_same_hardware():
    spec = load_scenario(EXAMPLES / "ycsb-switch.toml").spec
    w = warmup_scenario(spec)
    ws = w.spec
    assert ws.profile == spec.profile and ws.system == spec.system and ws.seed == spec.seed
    assert ws.compute.count == 1 and ws.compute.threads <= 2 and ws.compute.coroutines <= 2
    assert ws.compute.qp_policy == spec.compute.qp_policy
    assert ws.memory == spec.memory and ws.client == spec.client
    assert set(ws.workloads) == set(spec.workloads)
    for name, wl in ws.workloads.items():
        assert wl.preset == spec.workloads[name].preset
        assert wl.overrides["recordcount"] == WARMUP_RECORDS and wl.overrides["keysize"] == 8
    # both load paths compiled: the rack's own choice (a bulk load here), then inserts
    half = WARMUP_RECORDS // 2
    assert w.steps[:2] == (LoadStep(1, "default", half), LoadStep(2, "default", WARMUP_RECORDS - half, bulk=False))
    plan = compile_scenario(w).plan
    assert [(p.action, p.bulk) for p in plan[:2]] == [("load", True), ("load", False)]
    assert [(s.workload, s.duration_ms) for s in w.steps[2:]] == [("default", WARMUP_RUN_MS),
                                                                  ("read-mostly", WARMUP_RUN_MS)]
    assert not w.until_stopped and not any(isinstance(s, KillStep) for s in w.steps)
    assert pickle.loads(pickle.dumps(w)) == w


def test_a_restart_step_follows_a_kill_and_the_node_may_be_killed_again(tmp_path):
    from cluster.scenario import KillStep, RestartStep
    s = scenario_of(tmp_path, '[rack]\non_node_death = "continue"\n' + STEP
                    + '[[step]]\naction = "kill"\nnode = "cn1"\n[[step]]\naction = "restart"\nnode = "cn1"\n'
                    + '[[step]]\naction = "kill"\nnode = "cn1"\n')
    assert s.steps[1:] == (KillStep(2, "cn1"), RestartStep(3, "cn1"), KillStep(4, "cn1"))
    assert "step 3: restart node cn1" in s.describe()
