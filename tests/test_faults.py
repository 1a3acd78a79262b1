"""Faults: failpoints that crash a client between two verbs, nodes killed mid-run, and a leak test
that starts and stops racks repeatedly (in the style of Mininet's pty-leak test) and compares
/dev/shm and the process table before and after."""

from __future__ import annotations

import os
import re
import signal
import time

import psutil
import pytest

from cluster.correctness.checker import check
from cluster.rack import ColocatedRack
from cluster.scenario import scenario_from_dict
from cluster.supervisor import Supervisor
from shm import failpoints
from shm.segment import list_segments, owner_pid_of
from tests.test_rack import (_dmrack, _leftovers, _wait_for_nodes, by_step, endless_file, live_children, rack_dict,
                             run)

# inserts, not the default bulk load: faults injected during loading are part of what is tested
LOAD = {"action": "load", "bulk": False}


@pytest.fixture(autouse=True)
def _disarm():
    failpoints.disarm_all()
    yield
    failpoints.disarm_all()


def checked_scenario(*steps, **kw):
    d = rack_dict(*steps, **kw)
    d["workload"]["valuesize"] = 32            # values carry their version: histories are checkable
    return scenario_from_dict(d, source="faults.toml")


def _mine():
    return sorted(s for s in list_segments() if owner_pid_of(s) == os.getpid())


# -- failpoints ------------------------------------------------------------------------------------

def test_unknown_failpoint_and_bad_spec_are_refused():
    with pytest.raises(ValueError, match="did you mean 'race.update.block_written'"):
        failpoints.arm("race.update.block_writen")
    with pytest.raises(ValueError, match="unknown action"):
        failpoints.arm("verbs.post", "explode")
    with pytest.raises(ValueError, match="is not \\[node:\\]name=action"):
        failpoints.parse("verbs.post")
    with pytest.raises(ValueError, match="not an integer"):
        failpoints.parse("verbs.post=crash@soon")
    assert failpoints.parse("race.update.block_written=crash@3; cn1:verbs.post=exit") == [
        (None, "race.update.block_written", "crash", 3), ("cn1", "verbs.post", "exit", 0)]
    env = {failpoints.ENV: "cn1:verbs.post=exit;race.delete.found=crash@2"}
    assert failpoints.arm_from_env(env, node="cn0") == ["race.delete.found"]
    assert failpoints.arm_from_env(env, node="cn1") == ["verbs.post", "race.delete.found"]


@pytest.mark.parametrize("point", ["verbs.post", "verbs.sync", "race.update.block_written", "race.delete.found",
                                   "race.insert.published", "race.insert.settled"])
def test_crashed_clients_leave_a_linearizable_history(point):
    """Crash five clients mid-operation at a failpoint: their operations never return, the rest of
    the rack carries on, and the history (with the crashed ops as "may or may not have happened")
    is still linearizable."""
    from workloads.stress import StressWorkload
    rack = ColocatedRack(checked_scenario(LOAD, run(0.3), threads=2, coroutines=4, records=32), history=100_000)
    rack.compiled.workloads["default"] = StressWorkload(keys=64, distribution="zipfian", value_size=32)
    failpoints.arm(point, "crash", after=20, times=5)
    rack.run()
    node = rack.nodes[0]
    assert node.crashed == 5
    ops = rack.history_ops
    assert sum(1 for o in ops if o.ret is None) == 5                # exactly the crashed ones are open
    res = check(ops)
    assert res.verdict == "ok", res.explain()


def test_a_failpoint_exit_kills_the_node_and_the_supervisor_reports_it(monkeypatch):
    monkeypatch.setenv(failpoints.ENV, "cn0:race.update.block_written=exit@50")
    before = set(_mine())
    sup = Supervisor(checked_scenario(LOAD, run(0.5), compute=2), quiet=True)
    assert sup.run() == 1
    assert any(d.node.startswith("cn") and "exited with status 86" in d.how and not d.expected for d in sup.deaths), \
        sup.deaths
    assert set(_mine()) == before
    assert not live_children()


def test_kill_9_of_a_compute_node_with_continue_carries_on(tmp_path):
    proc = _dmrack("run", endless_file(tmp_path, on_node_death="continue"), "--no-dashboard", "--duration", "12")
    kids = _wait_for_nodes(proc, 5)
    time.sleep(1.0)
    victim = next(k for k in kids if k.name().startswith("dmrack-cn1-"))
    victim.send_signal(signal.SIGKILL)
    stdout, stderr = proc.communicate(timeout=90)
    assert proc.returncode == 0, (stdout, stderr)                   # the rack carried on
    assert "cn1 killed by signal 9 (SIGKILL)" in stdout
    assert "stopped after 12 s" in stdout
    psutil.wait_procs(kids, timeout=10)
    assert not _leftovers(proc.pid)


# -- leaks -----------------------------------------------------------------------------------------

def test_racks_started_and_stopped_repeatedly_leak_nothing():
    """Mininet's pty-leak test, for racks: segments, processes and open files stay flat."""
    me = psutil.Process()

    def rack(i):
        sup = Supervisor(checked_scenario(LOAD, run(0.1), compute=1 + i % 2, records=100), quiet=True)
        assert sup.run() == 0, sup.deaths

    segs, kids = _mine(), live_children()
    rack(0)                                 # first use opens files for good (imports, numba caches)
    fds = me.num_fds()
    for i in range(1, 5):
        rack(i)
    assert _mine() == segs
    assert live_children() == kids
    assert me.num_fds() <= fds + 1          # the last rack's memory may wait for the garbage collector


def test_a_node_dying_mid_operation_leaves_a_checkable_history(monkeypatch):
    """cn1 exits in the middle of an update (between writing the block and swinging the slot); the
    rack carries on, and the merged history, with cn1's unfinished operations as crashed ones,
    is linearizable."""
    from workloads.stress import StressWorkload
    monkeypatch.setenv(failpoints.ENV, "cn1:race.update.block_written=exit@30")
    sup = Supervisor(checked_scenario(LOAD, run(0.4), run(0.4), compute=2, records=32, on_death="continue"),
                     quiet=True, history=100_000)
    sup.compiled.workloads["default"] = StressWorkload(keys=64, distribution="zipfian", value_size=32)
    assert sup.run() == 0, sup.deaths
    assert [(d.node, d.how) for d in sup.deaths] == [
        ("cn1", "exited with status 86 (failpoint race.update.block_written: exit)")]
    ops = sup.history_ops
    open_ops = [o.client >> 16 for o in ops if o.ret is None]
    assert open_ops and set(open_ops) == {1}                        # cn1's operations in flight, cut short
    last = by_step(sup.results)[3]
    assert [n.node for n in last.nodes if n.ops] == ["cn0"]         # the survivor ran the last step
    res = check(ops)
    assert res.verdict == "ok", res.explain()
    assert not live_children()


def test_line_locks_left_by_a_dead_writer_are_released(prefix):
    """A process SIGKILLed inside a WRITE leaves a 64-byte line's seqlock held; the rack releases
    it once the writer is gone, so readers of that line do not spin forever."""
    from shm.fabric import Fabric, NodeSpec
    from shm.profile import load_profile
    fab = Fabric.create(load_profile("cx6-200g"), [NodeSpec("cn0"), NodeSpec("mn0", "memory", 1 << 20)],
                        prefix=prefix)
    try:
        locks = fab.memory[1].host_locks
        assert fab.release_stuck_line_locks(wait_s=0.001) == 0
        locks[7] += 1                     # a writer took line stripe 7 ... and died
        assert fab.release_stuck_line_locks(wait_s=0.001) == 1
        assert locks[7] % 2 == 0
    finally:
        fab.close()


# -- the system gives up ---------------------------------------------------------------------------

def _starved(**kw):
    """Four RACE clients, two memory nodes of 8 MiB and 6 MiB chunks: the table fits and any
    per-client estimate passes, but only two chunks fit, so the third client to insert runs out
    during the load (whatever block reclamation does later: nothing has been freed yet)."""
    d = rack_dict(LOAD, run(0.2), threads=4, coroutines=1, **kw)
    d["memory"]["memory"] = "8MiB"
    d["system"]["chunk_bytes"] = 6 << 20
    return scenario_from_dict(d, source="starved.toml")


def test_a_system_that_gives_up_stops_the_rack_with_one_line_and_status_3(tmp_path):
    import io
    from rich.console import Console
    buf = io.StringIO()
    before = set(_mine())
    json_path = tmp_path / "r.json"
    sup = Supervisor(_starved(compute=2, on_death="continue"), dashboard=False, json_path=str(json_path),
                     console=Console(file=buf, width=200, color_system=None))
    assert sup.run() == 3                                          # the system gave up, whatever on_node_death says
    out = buf.getvalue()
    assert "Traceback" not in out, out
    said = [ln for ln in out.splitlines() if ln.startswith("dmrack:") and "gave up" in ln]
    assert len(said) == 1, said                                     # the stop reason once, after the summary
    logged = [ln.split()[3] for ln in out.splitlines() if " fault " in ln and "gave up" in ln]
    assert len(logged) == len(set(logged)), logged                  # the event log: each node's once
    line = said.pop()
    assert re.search(r"the system gave up: RACE: (no memory for KV blocks|out of memory)", line), line
    assert line.split(": ")[1].startswith("cn")                      # names the node
    assert sup.stop_reason in line
    assert "results: rack" in out and json_path.exists()             # the summary and results are written
    assert {d.node for d in sup.deaths} <= {"cn0", "cn1"} and sup.deaths
    assert set(_mine()) == before
    assert not live_children()


def test_a_system_that_gives_up_co_located_raises_its_message_and_leaks_nothing():
    from nodes.systems.api import SystemGaveUp
    with pytest.raises(SystemGaveUp, match="RACE: (no memory for KV blocks|out of memory)"):
        ColocatedRack(_starved()).run()


# -- what the dashboard and the summary say ------------------------------------------------------

def _live_console():
    import io
    from rich.console import Console
    return Console(file=io.StringIO(), width=200, force_terminal=True, color_system=None)


def test_the_last_dashboard_frame_shows_a_killed_node_as_dead():
    from tests.test_rack import scenario
    sup = Supervisor(scenario(LOAD, run(0.1), {"action": "kill", "node": "cn1"}, run(0.1), compute=2,
                              on_death="continue"), dashboard=True, console=_live_console())
    assert sup.run() == 0, sup.deaths
    states = {n.name: n.state for n in sup.last_view.nodes}
    assert states["cn1"] == "dead", states                          # SIGKILLed: it never said so itself
    assert states["cn0"] == "done" and states["mn0"] == "done", states
    assert {n.node: n.state for n in sup.results.nodes}["cn1"] == "dead"


def test_a_fired_failpoint_is_an_event_on_the_dashboard_and_in_the_summary(monkeypatch):
    monkeypatch.setenv(failpoints.ENV, "cn0:race.update.block_written=crash@20")
    console = _live_console()
    sup = Supervisor(checked_scenario(LOAD, run(0.3), compute=2), dashboard=True, console=console)
    assert sup.run() == 0, sup.deaths
    said = "cn0: failpoint race.update.block_written fired (crash)"
    assert sup.results.events == (said,)                            # cn1 was not armed
    assert any(said in line and "failpoint" in line.split(said)[0] for line in sup.last_view.events), \
        sup.last_view.events
    assert said in console.file.getvalue().split("results: rack")[1]   # under the summary table
