"""`dmrack check` as a user runs it: RACE passes; RACE with a deliberately broken update (a blind
WRITE instead of the slot CAS) fails loudly, with the checker's explanation."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.test_rack import ROOT


def _check(*extra, tmp_path, cwd=ROOT):
    out = tmp_path / "verdict.json"
    r = subprocess.run([sys.executable, "-m", "cluster.cli", "check", "--system", "race", "--quick", "--json",
                        str(out), *extra], cwd=cwd, capture_output=True, text=True, timeout=600)
    return r, json.loads(out.read_text())


def test_race_passes_dmrack_check(tmp_path):
    r, verdict = _check(tmp_path=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "PASS: race" in r.stdout
    assert verdict["passed"] and verdict["stress"] == "ok"
    assert verdict["ops"] > 1000 and verdict["keys"] > 10


def test_check_with_a_trace_writes_it(tmp_path):
    """--trace re-runs the stress's first phase co-located and writes its timeline (this used to
    raise NameError after the stress passed)."""
    r, verdict = _check("--trace", str(tmp_path / "t.json"), tmp_path=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert verdict["passed"] and f"trace: {tmp_path / 't.json'}" in r.stdout
    assert json.loads((tmp_path / "t.json").read_text())["traceEvents"]


def test_a_race_whose_update_skips_its_cas_fails_loudly(tmp_path):
    """The verdict is the first line; then one unwrapped line per check and a short block per
    failing key (a handful of keys, not a thousand lines); the full explanation is in the report
    file the output names (by default dmrack-check-race.txt in the current directory)."""
    r, verdict = _check("--option", "fault=update-skips-cas", tmp_path=tmp_path, cwd=tmp_path)
    assert r.returncode == 1
    lines = r.stdout.splitlines()
    # the verdict names the option it ran with: a fault switched on never reads like a plain run
    assert lines[0].startswith("FAIL: race (--option fault=update-skips-cas): ") and "NOT linearizable" in lines[0]
    assert lines[1] == "full report: ./dmrack-check-race.txt"
    assert lines[2].startswith("windows hit by the co-located checks: ") and "CASes lost a race" in lines[2]
    assert "; by the process stress: " in lines[2] and verdict["windows"]["process_stress"]["cas_raced"] >= 0
    # the command that runs it again, last
    assert lines[-1] == "replay: dmrack check --system race --option fault=update-skips-cas --quick --seed 1"
    assert verdict["replay"] == lines[-1][len("replay: "):] and verdict["windows"]["cas_raced"] > 0
    assert "NOT linearizable" in r.stdout and "no valid order" in r.stdout
    assert len(lines) < 150, f"{len(lines)} lines of output"
    # no timeline row wrapped inside a table cell: table rows are one line per check
    table_rows = [ln for ln in lines if ln.startswith("│")]
    assert len(table_rows) == 10, "\n".join(table_rows)          # 9 conformance checks + the stress
    # the blocks: the reason and the timeline of each shown key
    assert r.stdout.count("not linearizable (") >= 1 and "cannot be next" in r.stdout
    report = (tmp_path / "dmrack-check-race.txt").read_text()
    assert report.splitlines()[0] == lines[0]
    assert "Timeline" in report and "The longest partial linearization" in report
    assert len(report.splitlines()) > len(lines)
    assert not verdict["passed"] and verdict["stress"] == "illegal"
    assert verdict["options"] == {"fault": "update-skips-cas"}
    assert "Timeline" in verdict["explanation"]
    assert verdict["report"] == "./dmrack-check-race.txt"


def test_report_goes_where_asked(tmp_path):
    """--report PATH chooses the file (its directory is created)."""
    r, _ = _check("--option", "fault=update-skips-cas", "--report", str(tmp_path / "r" / "mine.txt"),
                  tmp_path=tmp_path)
    assert r.returncode == 1 and f"full report: {tmp_path / 'r' / 'mine.txt'}" in r.stdout
    assert "Timeline" in (tmp_path / "r" / "mine.txt").read_text()


def _heavy(system, *extra, tmp_path):
    out = tmp_path / "verdict.json"
    r = subprocess.run([sys.executable, "-m", "cluster.cli", "check", "--system", system, "--heavy", "--json",
                        str(out), *extra], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    return r, json.loads(out.read_text())


def test_heavy_stress_passes_race_and_catches_sherman_unlock_before_write(tmp_path):
    """--heavy: 1000-byte values (16 lines) from 2 x 8 x 8 clients on 16 keys. RACE passes it (with
    block reuse under way); Sherman releasing its leaf lock before the write-back fails it."""
    r, verdict = _heavy("race", tmp_path=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "16 keys, 16-1000 B values" in r.stdout and verdict["keys"] == 16 and verdict["ops"] > 5000
    r, verdict = _heavy("sherman", "--option", "fault=unlock-before-write", "--no-shrink", tmp_path=tmp_path)
    assert r.returncode == 1 and r.stdout.startswith("FAIL: sherman (--option fault=unlock-before-write): ") and "NOT linearizable" in r.stdout
    assert verdict["stress"] == "illegal"


def test_quick_and_heavy_together_are_one_line(tmp_path):
    r = subprocess.run([sys.executable, "-m", "cluster.cli", "check", "--system", "race", "--quick", "--heavy"],
                       cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and r.stderr.strip().count("\n") == 0 and "--heavy" in r.stderr


def test_a_bulk_load_is_in_the_history_and_checks_linearizable(tmp_path):
    """The keys a bulk load writes are recorded as inserts completing at the load step, so the
    checker knows every key's first value."""
    scen = tmp_path / "bulk.toml"
    scen.write_text('[rack]\nname = "bulk"\nprofile = "cx5-100g"\nseed = 1\n'
                    '[compute]\ncount = 2\nthreads = 2\ncoroutines = 2\nmemory = "64MiB"\n'
                    '[memory]\ncount = 2\nmemory = "64MiB"\n[system]\nname = "sherman"\n'
                    '[workload]\npreset = "a"\nrecordcount = 2000\nkeysize = 8\nvaluesize = 16\n'
                    '[[step]]\naction = "load"\nbulk = true\n[[step]]\naction = "run"\nduration_ms = 0.3\n')
    r = subprocess.run([sys.executable, "-m", "cluster.cli", "run", str(scen), "--colocated", "--no-dashboard",
                        "--check", "--history", str(tmp_path / "h.jsonl")], cwd=ROOT, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "linearizable" in r.stdout and "NOT" not in r.stdout
    assert sum(1 for _ in open(tmp_path / "h.jsonl")) > 2000


def test_the_stress_mix_has_scans_only_where_the_system_has_them():
    from cluster.correctness.check import SCAN_SHARE, StressShape, stress_mix, stress_workloads
    from nodes.systems import get_system
    from workloads.stress import DEFAULT_MIX
    assert stress_mix(get_system("race")) is None
    wls = stress_workloads(get_system("race"), StressShape())
    assert wls["default"].mix == {**DEFAULT_MIX, "scan": 0.0} and wls["zipf"].distribution == "zipfian"
    wls = stress_workloads(get_system("sherman"), StressShape())
    for wl in wls.values():
        assert abs(wl.proportions.scan - SCAN_SHARE) < 1e-12
        assert abs(wl.mix["get"] - DEFAULT_MIX["get"] * (1 - SCAN_SHARE)) < 1e-12


def test_the_profile_of_the_checks_can_be_chosen():
    from cluster.correctness import conformance
    from cluster.correctness.check import stress_scenario
    from nodes.systems import get_system
    seen = []
    token = conformance._PROFILE.set("cx5-100g")
    try:
        with conformance.rig(get_system("race")) as r:
            seen.append(r.fabric.profile.name)
    finally:
        conformance._PROFILE.reset(token)
    with conformance.rig(get_system("race")) as r:
        seen.append(r.fabric.profile.name)
    assert seen == ["cx5-100g", "cx6-200g"]
    (out,) = conformance.run_suite("race", only=["single_client"], profile="cx5-100g")
    assert out.passed and conformance._PROFILE.get() == "cx6-200g"
    assert stress_scenario("race", {}, seed=1, run_ms=0.1, profile="cx5-100g").spec.profile.name == "cx5-100g"
    with pytest.raises(ValueError, match="unknown profile 'nope'"):
        conformance.run_suite("race", only=["single_client"], profile="nope")


def test_the_verdict_line_shows_the_options_it_ran_with():
    """A PASS with a fault (or any option) switched on says so on the verdict line itself; a run
    without options reads as before. Values are shown as checked, long ones cut."""
    from cluster.correctness.check import OPTION_VALUE_CHARS, verdict_line
    plain = verdict_line("race", {}, True, 9, 0, "ok", 12345, 64, 3.21)
    assert plain == ("PASS: race: 9 conformance checks, process stress linearizable; 12,345 operations "
                     "checked for linearizability (64 keys in the process stress), 3.2 s")
    line = verdict_line("toyht.lockht:LockHT", {"fault": "skip-checksum", "lock_free_gets": True, "n": 3},
                        True, 10, 0, "ok", 100, 16, 1.0)
    assert line.startswith("PASS: toyht.lockht:LockHT (--option fault=skip-checksum --option lock_free_gets=true "
                           "--option n=3): 10 conformance checks, ")
    fail = verdict_line("race", {"fault": "x" * 500}, False, 9, 1, "illegal", 1, 1, 1.0)
    assert fail.startswith("FAIL: race (--option fault=" + "x" * (OPTION_VALUE_CHARS - 3) + "...): 9 conformance "
                           "checks (1 failed), process stress NOT linearizable")


def test_a_stress_rack_that_fails_is_one_fail_line_not_a_traceback(monkeypatch, capsys):
    from cluster.cli import main
    from cluster.correctness import check

    def failing(*args, **kwargs):
        raise check.StressRackFailed("the stress rack failed: cl1 the system gave up: out of replies")
    monkeypatch.setattr(check, "stress_processes", failing)
    from cluster.correctness import conformance
    monkeypatch.setattr(conformance, "run_suite", lambda *a, **k: [])
    assert main(["check", "--system", "race", "--quick"]) == 1
    err = capsys.readouterr().err
    assert err.strip() == "FAIL: race: the stress rack failed: cl1 the system gave up: out of replies"
