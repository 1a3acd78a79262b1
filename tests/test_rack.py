"""The rack end to end: co-located runs (deterministic, asserted on virtual-time results) and racks
of processes under the supervisor (steps, scripted kills, crashes, Ctrl-C, SIGTERM, a killed
supervisor), each checked for leftover segments and processes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from cluster.rack import ColocatedRack, RackError
from cluster.scenario import scenario_from_dict
from cluster.supervisor import Supervisor
from shm.segment import list_segments, owner_pid_of

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def rack_dict(*steps, compute=1, threads=2, coroutines=2, records=400, on_death="stop", preset="a", **extra):
    d = {
        "rack": {"name": "t", "profile": "cx6-200g", "seed": 3, "on_node_death": on_death},
        "compute": {"count": compute, "threads": threads, "coroutines": coroutines, "memory": "8MiB"},
        "memory": {"count": 2, "memory": "32MiB"},
        "system": {"name": "race"},
        "workload": {"preset": preset, "recordcount": records, "keysize": 8, "valuesize": 8},
    }
    d.update(extra)
    if steps:
        d["step"] = list(steps)
    return d


def scenario(*steps, **kw):
    return scenario_from_dict(rack_dict(*steps, **kw), source="test.toml")


LOAD = {"action": "load"}


def run(ms, workload=None):
    s = {"action": "run", "duration_ms": ms}
    if workload:
        s["workload"] = workload
    return s


def by_step(res):
    return {s.index: s for s in res.steps}


def kinds(step):
    return {k.kind: k for k in step.kinds}


# -- co-located -------------------------------------------------------------------------------------

def test_threads_per_qp_reaches_the_compute_nodes_qps():
    d = rack_dict(LOAD, run(0.1), threads=4)
    d["compute"].update(qp_policy="multiplexed_qp", threads_per_qp=2)
    rack = ColocatedRack(scenario_from_dict(d, source="test.toml"))
    res = rack.run()
    assert by_step(res)[2].ops > 0
    node = rack.nodes[0]
    dst = min(node.threads[0]._qps)                  # a memory node the clients used
    qps = [t.qp(dst) for t in node.threads]
    assert node.rdma.threads_per_qp == 2
    assert qps[0] is qps[1] and qps[2] is qps[3] and qps[0] is not qps[2]


def test_connect_by_memory_node_reaches_the_compute_nodes_qps():
    # compute.connect = "by_memory_node": every thread's QPs made at start, mn0's first, so
    # threads 0-3's QPs to mn0 hold the low-latency doorbells (made on first post, thread 0's would)
    d = rack_dict(LOAD, run(0.1), threads=6)
    d["compute"].update(qp_policy="per_thread_qp", connect="by_memory_node")
    rack = ColocatedRack(scenario_from_dict(d, source="test.toml"))
    assert by_step(rack.run())[2].ops > 0
    node = rack.nodes[0]
    mn0, mn1 = sorted(node.threads[0]._qps)
    ll = node.fabric.profile.doorbell.low_latency
    first = node.threads[0].qp(mn0).doorbell
    assert [t.qp(mn0).doorbell - first for t in node.threads] == list(range(ll)) + [ll, ll + 1]
    assert all(t.qp(mn1).doorbell - first >= ll for t in node.threads)


def test_a_think_time_spaces_each_coroutines_operations():
    # one coroutine, read-only: each operation then waits 20 virtual µs, which its latency leaves out
    def step(think):
        d = rack_dict(LOAD, run(1.0), threads=1, coroutines=1, preset="c")
        if think:
            d["workload"]["thinktime"] = think
        got = by_step(ColocatedRack(scenario_from_dict(d, source="test.toml")).run())[2]
        return got.ops, kinds(got)["read"].p50_us
    ops, p50 = step(0)
    ops_think, p50_think = step(20)
    assert p50_think == pytest.approx(p50, rel=0.05)
    assert ops_think == pytest.approx(1000 / (1000 / ops + 20), rel=0.05)


def test_spinning_thinkers_delay_their_threads_other_coroutines():
    # four coroutines on one thread thinking 20 µs after each read: spinning (SMART's idle loop)
    # they stay in the thread's run queue, so a read resumes later than with sleeping thinkers
    def p50(mode):
        d = rack_dict(LOAD, run(1.0), threads=1, coroutines=4, preset="c")
        d["workload"].update(thinktime=20, thinkmode=mode)
        return kinds(by_step(ColocatedRack(scenario_from_dict(d, source="test.toml")).run())[2])["read"].p50_us
    assert p50("spin") > p50("sleep")


def test_colocated_runs_every_step_and_loads_every_record():
    rack = ColocatedRack(scenario(LOAD, run(0.2)))
    res = rack.run()
    steps = by_step(res)
    # the rack's clock ends with the operations still in flight after the plan, not at the
    # drain's deadline (DRAIN_LIMIT_NS, 50 ms): a run's virtual time is what it ran
    assert res.meta["virtual_ns"] == rack.env.now < steps[2].vend_ns + 1_000_000
    assert steps[1].ops == 400 and steps[1].failures == 0          # every insert succeeded
    assert set(kinds(steps[1])) == {"all", "insert"}
    assert steps[2].ops > 0 and set(kinds(steps[2])) == {"all", "read", "update"}
    assert kinds(steps[2])["read"].failures == 0                     # every key read is found


def test_colocated_is_deterministic_for_a_seed():
    def figures():
        res = ColocatedRack(scenario(LOAD, run(0.2))).run()
        return [(s.index, s.ops, s.vend_ns, tuple((k.kind, k.ops, k.p50_us, k.p99_us) for k in s.kinds))
                for s in res.steps]
    assert figures() == figures()


def test_colocated_workload_switch_changes_the_mix():
    res = ColocatedRack(scenario(LOAD, run(0.1), run(0.1, "c"))).run()
    s = by_step(res)
    assert "update" in kinds(s[2])
    assert set(kinds(s[3])) == {"all", "read"}                       # YCSB-C: reads only


def test_colocated_threads_knob_scales_throughput():
    res = ColocatedRack(scenario(LOAD, {"action": "set", "knob": "threads", "value": 1}, run(0.2),
                                 {"action": "set", "knob": "threads", "value": 4}, run(0.2),
                                 threads=4, preset="c")).run()
    s = by_step(res)
    assert s[5].ops > 2 * s[3].ops


def test_colocated_profile_knob_changes_latency():
    res = ColocatedRack(scenario(LOAD, run(0.1, "c"), {"action": "set", "knob": "link.one_way_ns", "value": 3000},
                                 run(0.1, "c"))).run()
    s = by_step(res)
    # a lookup is two round trips in sequence: +2.4 us each way twice, at least +8 us in all
    assert kinds(s[4])["read"].p50_us > kinds(s[2])["read"].p50_us + 8


def test_colocated_open_loop_meets_its_target_rate():
    d = rack_dict(LOAD, run(1.0), threads=2, coroutines=4, preset="c")
    d["workload"]["target"] = 200_000                                 # ops per virtual second, rack-wide
    res = ColocatedRack(scenario_from_dict(d, source="open.toml")).run()
    step = by_step(res)[2]
    assert 150 <= step.ops <= 250                                    # 200 expected in 1 ms


def test_colocated_refuses_kill_and_endless_steps():
    with pytest.raises(RackError, match="kill"):
        ColocatedRack(scenario(LOAD, run(0.1), {"action": "kill", "node": "cn0"}, run(0.1), compute=2,
                               on_death="continue"))
    with pytest.raises(RackError, match="until stopped"):
        ColocatedRack(scenario(LOAD, {"action": "run"})).run()


def test_bulk_load_needs_a_system_that_has_one(monkeypatch):
    from nodes.systems.race import RaceSystem
    monkeypatch.setattr(RaceSystem, "bulk_load", None)
    with pytest.raises(RackError, match="has no bulk load"):
        ColocatedRack(scenario({"action": "load", "bulk": True}, run(0.1)))


def test_a_load_step_bulk_loads_by_default_while_the_structure_is_empty(monkeypatch):
    """docs/rack.md: a load step that does not say ``bulk`` is a bulk load when it is the first
    step to add keys and the system has one; inserts otherwise; ``bulk = false`` asks for inserts."""
    from cluster.rack import compile_scenario

    def loads(*steps):
        return [(p.bulk, p.label.split()[0]) for p in compile_scenario(scenario(*steps)).plan if p.action == "load"]

    assert loads(LOAD, run(0.1)) == [(True, "bulk-load")]
    assert loads({"action": "load", "bulk": False}, run(0.1)) == [(False, "load")]
    assert loads({"action": "load", "count": 10}, LOAD, run(0.1)) == [(True, "bulk-load"), (False, "load")]
    assert loads(run(0.1), LOAD, run(0.1)) == [(False, "load")]          # a run may have inserted keys
    assert loads({"action": "set", "knob": "threads", "value": 1}, LOAD) == [(True, "bulk-load")]
    from nodes.systems.race import RaceSystem
    monkeypatch.setattr(RaceSystem, "bulk_load", None)                      # a system without one
    assert loads(LOAD, run(0.1)) == [(False, "load")]


@pytest.mark.parametrize("system", ["race", "sherman"])
def test_bulk_load_fills_the_structure_at_once(system):
    d = rack_dict({"action": "load", "bulk": True}, run(0.2, "c"), compute=2)
    d["system"] = {"name": system}
    res = ColocatedRack(scenario_from_dict(d, source="bulk.toml")).run()
    load, reads = by_step(res)[1], by_step(res)[2]
    assert load.ops == 400 and load.failures == 0 and load.vdur_ns == 0   # no virtual time
    assert reads.ops > 0 and reads.failures == 0


def test_scan_workload_on_a_hash_table_is_refused_up_front():
    with pytest.raises(RackError, match="scan"):
        ColocatedRack(scenario(LOAD, run(0.1, "e")))


# -- a rack of processes ----------------------------------------------------------------------------

def live_children():
    """This process's descendants still alive (zombies, reaped soon, are not leftovers): what a test
    of a rack of processes checks is empty when the rack has gone."""
    return [p for p in psutil.Process().children(recursive=True) if p.status() != psutil.STATUS_ZOMBIE]


def test_process_rack_runs_a_scenario_and_leaves_nothing(tmp_path):
    out = tmp_path / "r.json"
    sup = Supervisor(scenario(LOAD, run(0.2), run(0.2, "c"), compute=2), quiet=True, json_path=str(out),
                     csv_path=str(tmp_path / "r.csv"))
    assert sup.run() == 0
    assert sup.stop_reason == "scenario finished"
    doc = json.loads(out.read_text())
    assert doc["meta"]["mode"] == "processes"
    s = by_step(sup.results)
    assert s[1].ops == 400 and s[1].failures == 0
    assert {n.node for n in s[2].nodes} >= {"cn0", "cn1"} and all(n.ops > 0 for n in s[2].nodes if n.role == "compute")
    assert set(kinds(s[3])) == {"all", "read"}
    assert (tmp_path / "r.csv").read_text().startswith("step,")
    assert not live_children()


def test_process_rack_scripted_kill_carries_on():
    sup = Supervisor(scenario(LOAD, run(0.1), {"action": "kill", "node": "cn1"}, run(0.1), compute=2,
                              on_death="continue"), quiet=True)
    status = sup.run()
    why = f"stop reason: {sup.stop_reason}; deaths: {sup.deaths}"
    assert status == 0, why
    assert [(d.node, d.expected) for d in sup.deaths] == [("cn1", True)], why
    last = by_step(sup.results)[4]
    assert [n.node for n in last.nodes if n.ops] == ["cn0"], why      # only the survivor ran step 4
    assert not live_children()


def _said(**kw):
    """Run a scripted kill (on_node_death = continue) with a plain view into a buffer: (supervisor, text)."""
    import io

    from rich.console import Console
    buf = io.StringIO()
    sup = Supervisor(scenario(LOAD, run(0.1), {"action": "kill", "node": "cn1"}, run(0.1), compute=2,
                              on_death="continue"), console=Console(file=buf, width=200), **kw)
    assert sup.run() == 0, (sup.stop_reason, sup.deaths)
    return sup, buf.getvalue()


@pytest.mark.parametrize("dashboard", [None, False])       # plain dashboard lines; --no-dashboard
def test_a_death_and_the_end_are_said_once_each(dashboard):
    """Issue 41: 'scenario finished' was printed before and after the summary table, 'cn1 killed'
    twice, and the event panel repeated each as a 'note' line, the supervisor's stamped 0 ns after
    events at milliseconds. Each is said once: the death when it happens, the end after the table;
    the event log holds each once, stamped with the rack's virtual time."""
    sup, out = _said(dashboard=dashboard)
    assert out.count("cn1 killed by signal 9 (SIGKILL)") == 1, out
    assert out.count("scenario finished") == 1 and out.rstrip().endswith("dmrack: scenario finished"), out
    assert out.index("results:") < out.index("scenario finished")
    if dashboard is None:
        events = sup.last_view.events                       # the panel of the last frame
        assert not any(line.split()[0] == "note" for line in events), events
        killed = [line for line in events if "cn1 killed by signal 9" in line]
        finished = [line for line in events if "scenario finished" in line]
        assert len(killed) == 1 and len(finished) == 1, events
        kill_step = next(line for line in events if "scenario kills cn1" in line)
        stamp = (lambda line: float(line.split()[0]) * {"ns": 1e-3, "µs": 1, "ms": 1e3}[line.split()[1]])
        assert stamp(killed[0]) >= stamp(kill_step) > 0     # not 0 ns: the rack's time when it was seen
        assert stamp(finished[0]) >= 200                    # after both 0.1 ms runs (µs)


def test_a_stop_by_the_supervisor_is_stamped_with_the_racks_virtual_time():
    """A --duration stop is the supervisor's own event: in the log once, at the rack's virtual time,
    and said once, after the summary."""
    import io

    from rich.console import Console
    buf = io.StringIO()
    sup = Supervisor(scenario(LOAD, {"action": "run"}), duration_s=2.0, console=Console(file=buf, width=200))
    assert sup.run() == 0, sup.deaths
    out = buf.getvalue()
    assert out.count("stopped after 2 s (--duration)") == 1 and out.index("results:") < out.index("stopped after")
    stops = [line for line in sup.last_view.events if "stopped after" in line]
    assert len(stops) == 1 and stops[0].split()[2:4] == ["phase", "supervisor"], sup.last_view.events
    assert stops[0].split()[1] in ("µs", "ms", "s") and float(stops[0].split()[0]) > 0, stops


# -- the CLI as a user runs it (subprocesses: signals go to the supervisor) ---------------------------

def _dmrack(*args, **kw):
    return subprocess.Popen([sys.executable, "-m", "cluster.cli", *args], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, **kw)


def _wait_for_nodes(proc, n, timeout=60.0):
    """Wait until the supervisor has ``n`` live node processes, then give them a moment to run."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        assert proc.poll() is None, proc.communicate()
        kids = psutil.Process(proc.pid).children()
        if len(kids) >= n:
            time.sleep(1.0)
            return kids
        time.sleep(0.05)
    raise AssertionError("the rack did not start")


def _leftovers(pid):
    return [s for s in list_segments() if owner_pid_of(s) == pid]


def _no_survivors(kids):
    gone, alive = psutil.wait_procs(kids, timeout=10)
    assert not alive, f"orphans: {alive}"


def endless_file(tmp_path, on_node_death: str = "stop") -> str:
    """A small rack of processes that loads 300 keys and then runs YCSB-A until stopped."""
    path = tmp_path / "endless.toml"
    path.write_text(f"""
[rack]
name = "endless"
on_node_death = "{on_node_death}"
[compute]
count = 2
threads = 2
coroutines = 2
memory = "8MiB"
[memory]
count = 2
memory = "32MiB"
[workload]
preset = "a"
recordcount = 300
[[step]]
action = "load"
[[step]]
action = "run"
""")
    return str(path)


@pytest.fixture
def endless(tmp_path):
    return endless_file(tmp_path)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_cli_stops_cleanly_on_ctrl_c_and_sigterm(endless, tmp_path, sig):
    """Stopped by a signal while the nodes run: 128 + its number (130, 143), the results written."""
    out = tmp_path / "res.json"
    proc = _dmrack("run", endless, "--no-dashboard", "--json", str(out))
    kids = _wait_for_nodes(proc, 5)
    proc.send_signal(sig)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 128 + sig, stderr
    assert stdout.count(f"stopped by {signal.Signals(sig).name}") == 1, stdout     # said once, after the table
    assert stdout.index("results:") < stdout.index(f"stopped by {signal.Signals(sig).name}"), stdout
    assert json.loads(out.read_text())["meta"]["stop_reason"].startswith("stopped by")
    _no_survivors(kids)
    assert not _leftovers(proc.pid)


def test_ctrl_c_while_the_rack_is_built_exits_130_at_once_and_leaves_nothing(endless, tmp_path):
    """The other moment Ctrl-C can land: while the segments are created and the warm-up compiles
    (half a minute on a first run). Same status as during the run, without waiting for the build."""
    out = tmp_path / "res.json"
    proc = _dmrack("run", endless, "--no-dashboard", "--json", str(out))
    first = proc.stdout.readline()
    assert "building rack 'endless'" in first, first
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, (first, stdout, stderr)
    said = first + stdout + stderr
    assert "stopped by SIGINT before the nodes started" in said or "dmrack: interrupted" in said, said
    assert not out.exists() and "results:" not in said        # nothing was collected: no results, no table
    assert said.count("stopped by SIGINT") <= 1, said
    assert not psutil.pid_exists(proc.pid) or not psutil.Process(proc.pid).children()
    assert not _leftovers(proc.pid)


def test_cli_reports_a_node_that_dies(endless):
    proc = _dmrack("run", endless, "--no-dashboard")
    kids = _wait_for_nodes(proc, 5)
    victim = next(k for k in kids if k.name().startswith("dmrack-cn1-"))
    os.kill(victim.pid, signal.SIGKILL)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 1
    assert "killed by signal 9 (SIGKILL)" in stdout
    _no_survivors(kids)
    assert not _leftovers(proc.pid)


def test_killed_supervisor_takes_its_nodes_along_and_clean_reclaims(endless):
    proc = _dmrack("run", endless, "--no-dashboard")
    kids = _wait_for_nodes(proc, 5)
    assert _leftovers(proc.pid)
    proc.kill()
    proc.communicate(timeout=30)
    _no_survivors(kids)                              # PR_SET_PDEATHSIG: nobody outlives the supervisor
    clean = subprocess.run([sys.executable, "-m", "cluster.cli", "clean"], cwd=ROOT, capture_output=True,
                           text=True, timeout=60)
    assert clean.returncode == 0
    assert not _leftovers(proc.pid)


@pytest.mark.parametrize("args, message", [
    (["run", "no-such-file.toml"], "no such scenario file"),
    (["run", "examples/minimal.toml", "--set", "compute.threads=0"], "compute.threads"),
    (["run", "examples/minimal.toml", "--set", "system.name=nosuch"], "unknown system"),
    (["run", "examples/minimal.toml", "--set", "rack.profile=nosuch"], "nosuch"),
    (["up", "--duration", "-1"], "--duration"),
    (["up", "--out", "/dev/null/dir"], "/dev/null/dir"),     # --out creates a missing directory, not under a file
    (["bench", "ycsb", "--system", "nosuch"], "unknown system"),
    (["bench", "nosuch"], "unknown suite"),
    (["reproduce", "nosuch"], "unknown paper"),
    (["reproduce", "smart", "--only", "fig99"], "unknown experiment"),
    (["reproduce", "smart", "--jobs", "0"], "--jobs"),
    (["reproduce", "smart", "--jobs", "two"], "--jobs"),
    (["check", "--system", "nosuch"], "unknown system"),
    (["check", "--system", "race", "--option", "load_factr=0.5"], "load_factr"),
    (["check", "--system", "race", "--option", "fault=everything"], "fault"),
    (["run", "examples/minimal.toml", "--check"], "at least 16 bytes"),
    (["run", "examples/minimal.toml", "--history", "/no/such/dir/h.jsonl"], "/no/such/dir"),
])
def test_cli_bad_input_is_one_line_and_exit_2(args, message):
    proc = _dmrack(*args)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 2, (stdout, stderr)
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], stderr
    assert not _leftovers(proc.pid)


def test_cli_reproduce_runs_an_experiment_with_the_default_jobs(tmp_path):
    out = tmp_path / "rows.json"
    r = subprocess.run([sys.executable, "-m", "cluster.cli", "reproduce", "smart", "--quick", "--only", "fig4",
                        "--json", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    rows = json.loads(out.read_text())["rows"]
    assert rows and {row["experiment"] for row in rows} == {"fig4"}


def test_cli_systems_lists_race():
    r = subprocess.run([sys.executable, "-m", "cluster.cli", "systems", "--json"], cwd=ROOT, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0
    assert "race" in [s["name"] for s in json.loads(r.stdout)]


def test_cli_up_runs_the_default_rack_for_a_duration_and_exits_0(tmp_path):
    """The README's first command with --duration: the default rack loads, runs YCSB-A, prints
    plain dashboard lines (stdout is not a terminal), the summary table and the results files."""
    proc = _dmrack("up", "--duration", "8", "--out", str(tmp_path))
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 0, stderr
    assert "vtime" in stdout and "Mops" in stdout                       # plain periodic lines
    assert "load 10,000 records" in stdout and "stopped after 8 s (--duration)" in stdout
    assert (tmp_path / "results.json").exists() and (tmp_path / "results.csv").exists()
    assert not _leftovers(proc.pid)


def test_the_plan_is_the_scenarios_typed_steps():
    """One step type from the file to the manager (nodes/steps.py): the plan holds the scenario's
    own steps, a load's count and bulk filled in, and survives pickling (node processes get it)."""
    import pickle

    from cluster.rack import compile_scenario
    from nodes.steps import LoadStep, RunStep, SetStep, SleepStep
    s = scenario(LOAD, {"action": "set", "knob": "threads", "value": 1}, run(0.1), {"action": "sleep", "duration_ms": 0.5})
    plan = compile_scenario(s).plan
    assert [type(p) for p in plan] == [LoadStep, SetStep, RunStep, SleepStep]
    assert plan[0] == LoadStep(index=1, workload="default", count=400, bulk=True)
    assert plan[1:] == list(s.steps[1:])             # nothing to fill in: the file's own steps
    assert [p.label for p in plan] == ["bulk-load 400 records (default)", "set threads = 1",
                                       "run default for 0.1 ms", "sleep 0.5 ms"]
    assert [p.duration_ns for p in plan] == [0, 0, 100_000, 500_000]
    assert pickle.loads(pickle.dumps(plan)) == plan


def test_a_set_step_reaches_the_nodes_as_written():
    """A boolean profile key set to false arrives as False (the string-typed plan step of before
    turned it into 0.0, which the profile refused mid-run)."""
    rack = ColocatedRack(scenario(LOAD, {"action": "set", "knob": "nic.atomic_write_race", "value": True}, run(0.05),
                                  {"action": "set", "knob": "nic.atomic_write_race", "value": False}, run(0.05)))
    res = rack.run()
    assert rack.nodes[0].fabric.profile.nic.atomic_write_race is False
    assert [s.label for s in res.steps][-2:] == ["set nic.atomic_write_race = false", "run default for 0.05 ms"]


def test_one_wiring_for_both_kinds_of_rack():
    """cluster/wiring.py builds a co-located rack's nodes and a node process's alike; what differs
    follows from the rack state: a rack of processes (a clock table) routes messages by kind, the
    manager's process gets no verbs host, a compute node's process builds its one node."""
    from cluster.rack import RackState, compile_scenario
    from cluster.wiring import wire
    from shm.sim.env import Environment
    from shm.sim.router import MSG_DONE, MSG_START, MSG_STOP, MSG_VERBS_SEND
    c = compile_scenario(scenario(LOAD, run(0.1), compute=2))
    with RackState.create(c, processes=True) as state:
        mgr = wire(state, Environment(seed=1), {"mgr"}, writers=lambda n: None)
        assert mgr.host is None and mgr.computes == [] and mgr.manager is not None
        assert set(mgr.router.handlers) == {MSG_DONE}
        cn1 = wire(state, Environment(seed=2), {"cn1"}, writers=lambda n: n)
        assert [(n.name, w) for n, w in cn1.computes] == [("cn1", "cn1")] and cn1.manager is None
        assert cn1.host.my_proc == c.address("cn1") == 1
        assert {MSG_START, MSG_VERBS_SEND, MSG_STOP} <= set(cn1.router.handlers)
    with RackState.create(c, processes=False) as state:
        w = wire(state, Environment(seed=3), writers=lambda n: n)
        assert [n.name for n, _ in w.computes] == ["cn0", "cn1"] and w.router is None
        assert w.manager is not None and w.manager_proc is not None and w.host.proc_of_node is None
