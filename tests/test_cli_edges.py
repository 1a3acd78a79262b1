"""The ``dmrack`` command line at its edges (issue 17): the documented ``up --check``/``--history``
on the default rack, ``up --set``, capacity refused when the spec is read, failpoint typos refused
before a rack is built, ``--out`` creating its directory, and ``check --history`` for recorded
histories. Bad input is always one line on stderr, exit status 2, nothing left in /dev/shm."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

import pytest

from cluster import cli
from cluster.scenario import HISTORY_VALUE_SIZE, check_capacity, default_scenario, parse_scenario
from cluster.spec import SpecError
from shm import failpoints
from shm.segment import list_segments, owner_pid_of
from tests.test_rack import ROOT


def dmrack(*args, env=None, timeout=120, cwd=ROOT):
    """Run the CLI as a user would; whatever it did, it must leave no segment of its own."""
    full_env = dict(os.environ, **(env or {}))
    proc = subprocess.Popen([sys.executable, "-m", "cluster.cli", *args], cwd=cwd, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=full_env)
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert no_segments_of(proc.pid), f"dmrack {' '.join(args)} left shared memory behind"
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)


def assert_one_line_exit_2(r, *needles):
    assert r.returncode == 2, (r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    for n in needles:
        assert n in lines[0], lines[0]
    assert "Traceback" not in r.stdout + r.stderr


def no_segments_of(pid: int) -> bool:
    return not [s for s in list_segments() if owner_pid_of(s) == pid]


# -- item 1: up --check / --history on the default rack; up --set ---------------------------------

def test_default_rack_with_history_gets_values_that_carry_versions():
    assert default_scenario().spec.workload.overrides["valuesize"] == 8
    s = default_scenario(history=True)
    assert s.spec.workload.build().value_size == HISTORY_VALUE_SIZE
    # an explicit --set still wins over the history default
    s = default_scenario(history=True, overrides={"workload.valuesize": 64})
    assert s.spec.workload.build().value_size == 64


def test_up_check_and_history_work_on_the_default_rack(tmp_path):
    """The README's `dmrack up ... --history PATH --check` on the default rack (a smaller load via
    the new --set, so the test stays short): exit 0, a linearizable verdict, the history written."""
    hist = tmp_path / "h.jsonl"
    # 6 real seconds: the rack must build, warm up and load before --duration ends it, also on a
    # busy 2-core machine (3 s was not always enough there)
    r = dmrack("up", "--check", "--history", str(hist), "--duration", "6", "--no-dashboard",
               "--set", "workload.recordcount=500")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "linearizable:" in r.stdout and "NOT" not in r.stdout
    assert "load 500 records" in r.stdout               # --set reached the rack
    assert f"values are {HISTORY_VALUE_SIZE} bytes" in r.stdout
    lines = hist.read_text().splitlines()
    assert len(lines) > 500 and json.loads(lines[0])["kind"] in ("insert", "get", "update")


@pytest.mark.parametrize("args, needles", [
    (["up", "--set", "compute.threads=0"], ["compute.threads"]),
    (["up", "--set", "workload.valuesize=8", "--check"], ["at least 16 bytes", "--set workload.valuesize=16"]),
    (["run", "examples/minimal.toml", "--check"], ["at least 16 bytes", "--set workload.valuesize=16"]),
])
def test_up_set_and_history_refusals_are_one_line(args, needles):
    r = dmrack(*args)
    assert_one_line_exit_2(r, *needles)
    assert "building rack" not in r.stdout               # refused before anything was built


# -- item 2: capacity is checked when the spec is read --------------------------------------------

def test_a_table_larger_than_the_memory_nodes_is_refused_when_the_spec_is_read():
    with pytest.raises(SpecError, match=r"^h\.toml: workload\.recordcount = 100000000000: system 'race' needs "
                                        r"at least .* TiB .* memory nodes have 1 GiB \(2 x 512 MiB\)"):
        parse_scenario("[workload]\nrecordcount = 100000000000\n", source="h.toml")
    # a load step's count is named when it is the large one
    with pytest.raises(SpecError, match=r"step\[1\]\.count = 90000000000"):
        parse_scenario('[[step]]\naction = "load"\ncount = 90000000000\n', source="h.toml")
    # what fits is accepted: the default rack, and a bigger table on bigger memory nodes
    check_capacity(default_scenario())
    parse_scenario("[workload]\nrecordcount = 100000\n[memory]\nmemory = \"64MiB\"\n", source="ok.toml")


def test_systems_count_their_table_and_blocks_not_just_the_raw_records():
    """30 M records of 8 + 8 B are 480 MB raw, which 1 GiB of memory nodes would hold; RACE's table
    and 64-byte KV blocks need 2.3 GiB, Sherman's leaves and SMART-BT's over 1 GiB with 100 B
    values (out-of-line blocks): refused when the spec is read, not halfway through the load.
    Sherman's packed leaves (54 entries of 18 B) hold 8 M such records in 1.1 GiB, SMART-BT's
    per-line leaves 6 M in over 1 GiB."""
    with pytest.raises(SpecError, match=r"system 'race' needs at least 2\.3 GiB"):
        parse_scenario("[workload]\nrecordcount = 30000000\n", source="h.toml")
    for name, records in (("sherman", 8_000_000), ("smart-bt", 6_000_000)):
        with pytest.raises(SpecError, match=f"system '{name}' needs at least"):
            parse_scenario(f'[system]\nname = "{name}"\n[workload]\nrecordcount = {records}\nvaluesize = 100\n',
                           source="h.toml")
    # the default rack and the README's 20,000-key scenario still fit
    parse_scenario("[workload]\nrecordcount = 20000\n", source="ok.toml")


def test_cli_refuses_a_rack_too_small_for_its_records_in_one_line(tmp_path):
    f = tmp_path / "h.toml"
    f.write_text("[workload]\nrecordcount = 100000000000\n")
    r = dmrack("run", str(f), "--no-dashboard")
    assert_one_line_exit_2(r, "workload.recordcount = 100000000000", "memory.memory")
    assert "building rack" not in r.stdout


def test_a_system_whose_setup_still_fails_is_one_line_not_a_traceback(monkeypatch):
    """The spec's check is a lower bound (System.footprint); a table that passes it but still does
    not fit the memory nodes is refused by setup, and that too is a RackError (one line at the
    CLI, exit 2) with every segment already closed (the shm_guard fixture checks)."""
    from cluster.rack import RackError, RackState, compile_scenario
    from nodes.systems.race import RaceSystem
    monkeypatch.setattr(RaceSystem, "footprint", classmethod(lambda cls, *a: 0))
    s = parse_scenario('[workload]\nrecordcount = 3000000\n[memory]\nmemory = "16MiB"\n', source="tight.toml")
    with pytest.raises(RackError, match=r"^tight\.toml: RACE: the table .* does not fit the memory nodes") as e:
        RackState.create(compile_scenario(s), processes=False)
    assert "\n" not in str(e.value)


# -- item 4: failpoints are validated before the rack is built -------------------------------------

def test_validate_names_the_bad_part_with_a_suggestion():
    ok = "race.update.block_written=crash@3;cn1:verbs.post=exit@1000"
    assert failpoints.validate(ok, ["cn0", "cn1", "mn0", "mgr"]) == [
        (None, "race.update.block_written", "crash", 3), ("cn1", "verbs.post", "exit", 1000)]
    cases = [
        ("race.updat.block_written=crash@3", "did you mean 'race.update.block_written'?"),
        ("race.update.block_written=crsh", "did you mean 'crash'?"),
        ("verbs.post=crash@-1", "after must be >= 0"),
        ("verbs.post", "is not [node:]name=action[@after]"),
        ("cn7:verbs.post=exit", "no node 'cn7'"),
    ]
    for text, needle in cases:
        with pytest.raises(ValueError) as e:
            failpoints.validate(text, ["cn0", "cn1", "mn0", "mgr"])
        assert needle in str(e.value) and "\n" not in str(e.value) and str(e.value).startswith(failpoints.ENV)
    assert not failpoints.statistics().armed           # validating arms nothing


@pytest.mark.parametrize("args", [["up", "--no-dashboard"], ["run", "examples/minimal.toml", "--no-dashboard"],
                                  ["check", "--system", "race", "--quick"]])
def test_a_failpoint_typo_is_refused_before_the_rack_is_built(args):
    r = dmrack(*args, env={failpoints.ENV: "race.updat.block_written=crash@3"}, timeout=60)
    assert_one_line_exit_2(r, "race.updat.block_written", "did you mean 'race.update.block_written'?")
    assert "building rack" not in r.stdout


# -- item 6: --out creates its directory -------------------------------------------------------------

def test_out_creates_a_missing_directory_with_its_parents(tmp_path):
    out = tmp_path / "a" / "b" / "c"
    args = argparse.Namespace(out=str(out), json=None, csv=None, history=None)
    json_path, csv_path = cli._outputs(args)
    assert out.is_dir()
    assert json_path == str(out / "results.json") and csv_path == str(out / "results.csv")


def test_out_that_is_a_file_is_one_line(tmp_path):
    f = tmp_path / "file"
    f.write_text("")
    r = dmrack("up", "--duration", "1", "--out", str(f / "sub"))
    assert_one_line_exit_2(r, "--out", "cannot create")


# -- item 3: dmrack check --history FILE --------------------------------------------------------------

def _history(tmp_path, text: str | bytes, name="h.jsonl"):
    p = tmp_path / name
    (p.write_bytes if isinstance(text, bytes) else p.write_text)(text)
    return p


GOOD = ('{"client":1,"kind":"insert","key":5,"value":1,"ok":true,"call":10,"ret":20}\n'
        '{"client":2,"kind":"get","key":5,"value":1,"ok":true,"call":30,"ret":40}\n')
STALE = GOOD + ('{"client":1,"kind":"update","key":5,"value":2,"ok":true,"call":50,"ret":60}\n'
                '{"client":3,"kind":"get","key":5,"value":1,"ok":true,"call":70,"ret":80}\n')


def test_check_history_passes_a_linearizable_history(tmp_path):
    r = dmrack("check", "--history", str(_history(tmp_path, GOOD)), cwd=tmp_path, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.startswith("linearizable: 2 operations on 1 keys")
    assert not list(tmp_path.glob("dmrack-check-*"))     # nothing to report on a pass


def test_check_history_fails_a_stale_read_and_writes_the_report(tmp_path):
    h = _history(tmp_path, STALE, "stale.jsonl")
    r = dmrack("check", "--history", str(h), "--out", str(tmp_path / "rep" / "x"), cwd=tmp_path, timeout=60)
    assert r.returncode == 1, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith("NOT linearizable: 1 of 1 keys")
    report = tmp_path / "rep" / "x" / "dmrack-check-stale.txt"
    assert f"full report: {report}" in r.stdout
    assert "key 5: not linearizable" in r.stdout and "certain violation" in r.stdout
    assert "Timeline" in report.read_text()


@pytest.mark.parametrize("content, needle", [
    (bytes(range(128, 256)) * 2, "h.jsonl:1: not UTF-8 text"),
    (GOOD + "{not json\n", "h.jsonl:3: not valid JSON"),
    (GOOD + '{"client":1,"kind":"get"}\n', "h.jsonl:3: missing field"),
])
def test_check_history_malformed_is_one_line_exit_2(tmp_path, content, needle):
    r = dmrack("check", "--history", str(_history(tmp_path, content)), cwd=tmp_path, timeout=60)
    assert_one_line_exit_2(r, needle)


def test_check_needs_exactly_one_of_system_and_history(tmp_path):
    assert_one_line_exit_2(dmrack("check", timeout=60), "--system", "--history")
    assert_one_line_exit_2(dmrack("check", "--system", "race", "--history", "x.jsonl", timeout=60), "--history")


def test_a_colocated_rack_whose_system_gives_up_is_one_line_exit_3(tmp_path):
    """Two chunks of 6 MiB fill the 8 MiB memory nodes: the load runs out of memory (co-located:
    the same line and status as a rack of processes, no traceback)."""
    f = tmp_path / "e.toml"
    f.write_text("")
    r = dmrack("run", str(f), "--colocated", "--set", "memory.memory=8MiB", "--set",
               "system.chunk_bytes=6291456", "--set", "run.duration_ms=1")
    assert r.returncode == 3, (r.stdout, r.stderr)
    assert r.stderr.strip().splitlines() == [r.stderr.strip()]
    assert "the system gave up: RACE: out of memory" in r.stderr and "Traceback" not in r.stdout + r.stderr


def test_a_restart_of_a_node_that_is_not_dead_is_one_line_and_status_2(tmp_path):
    f = tmp_path / "restart.toml"
    f.write_text('[rack]\non_node_death = "continue"\n[compute]\ncount = 2\n[[step]]\naction = "load"\n'
                 '[[step]]\naction = "run"\nduration_ms = 0.1\n[[step]]\naction = "restart"\nnode = "cn1"\n')
    r = dmrack("run", str(f), "--no-dashboard")
    assert_one_line_exit_2(r, str(f), 'step[3].node = "cn1"', "cn1 is not dead at this step")


def test_sigterm_to_a_reproduction_ends_its_pool_and_leaves_no_segment():
    """SIGTERM to ``dmrack reproduce`` (no supervisor of its own) unwinds as Ctrl-C does: the
    pool's workers are terminated and unlink their racks' segments, exit status 143. Before, the
    command died at once, its workers with it (SIGKILL, their parent-death signal), and every
    segment of the points in flight stayed in /dev/shm."""
    import signal
    import time

    import psutil
    proc = subprocess.Popen([sys.executable, "-m", "cluster.cli", "reproduce", "sherman", "--quick", "--only",
                             "ablation", "--jobs", "2", "--quiet"], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    workers: set[int] = set()
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:
            kids = {c.pid for c in psutil.Process(proc.pid).children(recursive=True)}
            if kids and any(owner_pid_of(s) in kids for s in list_segments()):
                workers = kids                 # a point's rack is up in a worker
                break
            time.sleep(0.2)
        assert workers, "no worker made a rack within 120 s"
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 128 + signal.SIGTERM, stderr
    assert "terminated" in stderr and "Traceback" not in stderr, stderr
    time.sleep(0.5)
    left = [s for s in list_segments() if owner_pid_of(s) in workers | {proc.pid}]
    assert left == [], left
