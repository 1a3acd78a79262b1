"""Shrinking a failing conformance check (cluster/correctness/shrink.py) and the sizes it runs at
(conformance.Scale, ``dmrack check --only CHECK --scale ...``)."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from cluster.correctness.conformance import SHRINKABLE, Scale, run_suite
from cluster.correctness.shrink import shrink


def test_scale_reads_and_writes_its_flag():
    sc = Scale.parse("threads=2, coroutines=1,length=0.25")
    assert sc == Scale(threads=2, coroutines=1, length=0.25)
    assert Scale.parse(sc.text()) == sc and Scale().text() == "full"
    assert sc.threads_of(4) == 2 and sc.coroutines_of(4) == 1 and sc.keys_of(64) == 64
    for bad, what in (("threads", "not one of"), ("cores=2", "not one of"), ("keys=x", "must be a number"),
                      ("length=0", "must be positive")):
        with pytest.raises(ValueError, match=what):
            Scale.parse(bad)


def test_the_search_halves_what_still_fails_and_keeps_the_smallest():
    """A failure that needs 2 threads and 3 coroutines at least (and any length): the greedy search
    ends there, on the seed it failed with."""
    tried = []

    def run_check(scale, seed):
        tried.append((scale, seed))
        fails = scale.threads >= 2 and scale.coroutines >= 3 and seed in (None, 11)
        return not fails, f"failed at {scale.text()}"
    got = shrink("race", "no_torn_values", {}, run_check=run_check, full=Scale(threads=4, coroutines=4, length=1.0))
    assert got.scale == Scale(threads=2, coroutines=4, length=1 / 16) and got.chaos_seed is None
    assert got.detail == f"failed at {got.scale.text()}" and got.runs == len(tried)
    assert shrink("race", "single_client", {}, run_check=run_check) is None      # not shrinkable
    assert shrink("race", "no_torn_values", {}, run_check=lambda sc, s: (True, "")) is None   # passes
    assert got.full == Scale(threads=4, coroutines=4, length=1.0)


@pytest.mark.parametrize("check", sorted(SHRINKABLE))
def test_a_shrinkable_check_records_its_full_size_in_the_dimensions_it_declares(check):
    """Shrinking starts from the sizes a check's full run records (so a system's own stress shape
    counts), in exactly the dimensions SHRINKABLE declares for it."""
    from cluster.correctness.conformance import HISTORY
    from cluster.correctness.shapes import HEAVY, QUICK
    sizes = {}
    # run it tiny: what it records is its full size whatever the scale
    tiny = Scale(threads=1, coroutines=1, keys=8, length=1 / 16)
    o = run_suite("race", only=[check], sizes=sizes, stress_shape=QUICK, scale=tiny)[0]
    assert o.passed, o.detail
    assert set(sizes) == set(SHRINKABLE[check])
    want = {"no_torn_values": (4, 4, None), "insert_race": (4, 4, None), "history_uniform": (HISTORY.threads, HISTORY.coroutines, HISTORY.keys),
            "history_zipfian": (HISTORY.threads, HISTORY.coroutines, HISTORY.keys), "history_heavy": (HEAVY.threads, HEAVY.coroutines, HEAVY.keys),
            "stress_uniform": (QUICK.threads, QUICK.coroutines, QUICK.keys),
            "stress_zipfian": (QUICK.threads, QUICK.coroutines, QUICK.keys)}[check]
    assert (sizes.get("threads"), sizes.get("coroutines"), sizes.get("keys")) == want


def _violation(detail: str) -> str:
    """A check's failure detail without the checker's own wall-clock time ("... keys in 0.01 s"):
    a replay gives the same violation word for word, but not the same seconds."""
    return re.sub(r"in \d+\.\d+ s", "in … s", detail)


def test_a_real_failure_shrinks_and_its_shrunk_run_fails_the_same_way():
    """RACE with fault=update-skips-cas fails history_uniform; a smaller run fails too, and running
    that size again gives the same failure (the suite's racks are co-located: one virtual clock)."""
    options = {"fault": "update-skips-cas"}
    got = shrink("race", "history_uniform", options, max_runs=12)
    assert got is not None and got.scale != got.full
    full = got.full
    assert (got.scale.threads * got.scale.coroutines * got.scale.keys * got.scale.length
            < full.threads * full.coroutines * full.keys * full.length)
    again = run_suite("race", only=["history_uniform"], options=options, scale=got.scale)[0]
    assert not again.passed and _violation(again.detail) == _violation(got.detail)


def test_check_only_and_scale_refuse_bad_input():
    def cli(*args):
        return subprocess.run([sys.executable, "-m", "cluster.cli", "check", "--system", "race", *args],
                              capture_output=True, text=True, timeout=120)
    r = cli("--scale", "threads=1")
    assert r.returncode == 2 and "--scale goes with --only" in r.stderr
    r = cli("--only", "no_such_check")
    assert r.returncode == 2 and "unknown check(s) 'no_such_check'" in r.stderr
    r = cli("--only", "no_torn_values", "--scale", "threads=one")
    assert r.returncode == 2 and "threads must be a number" in r.stderr


def test_a_shrunk_history_failure_replays_with_its_trace(tmp_path):
    """``--only HISTORY_CHECK --scale ... --trace FILE``: the replay of a shrunk failure records the
    check's co-located run, with a track per failing key."""
    import json
    trace = tmp_path / "t.json"
    r = subprocess.run([sys.executable, "-m", "cluster.cli", "check", "--system", "race", "--option",
                        "fault=update-skips-cas", "--quick", "--only", "history_uniform", "--scale",
                        "threads=1,coroutines=2", "--no-shrink", "--trace", str(trace), "--out", str(tmp_path)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "process stress skipped (--only)" in r.stdout and f"trace: {trace}" in r.stdout
    names = {e["args"]["name"] for e in json.loads(trace.read_text())["traceEvents"]
             if e.get("ph") == "M" and "name" in e.get("args", {})}
    assert any(n.startswith("violation: key ") for n in names)
    r = subprocess.run([sys.executable, "-m", "cluster.cli", "check", "--system", "race", "--only", "no_torn_values",
                        "--trace", str(trace)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "--trace with --only records a history check" in r.stderr


def test_a_process_stress_failure_is_reproduced_co_located():
    """ROLEX with fault=unlock-first loses updates in the window between its unlock and its
    write-back: the conformance suite's small histories pass, the process stress fails, and so does
    the process stress's shape run co-located (stress_uniform), which replays bit for bit and
    shrinks; the correct ROLEX passes it."""
    from cluster.correctness.shapes import QUICK
    options = {"fault": "unlock-first"}
    assert all(o.passed for o in run_suite("rolex", only=["history_uniform", "history_zipfian"], options=options))
    first = run_suite("rolex", only=["stress_uniform"], options=options, stress_shape=QUICK)[0]
    again = run_suite("rolex", only=["stress_uniform"], options=options, stress_shape=QUICK)[0]
    assert not first.passed and "not linearizable" in first.detail and _violation(again.detail) == _violation(first.detail)
    assert run_suite("rolex", only=["stress_uniform"], options={}, stress_shape=QUICK)[0].passed
    got = shrink("rolex", "stress_uniform", options, stress_shape=QUICK, max_runs=8)
    assert got is not None and got.runs <= 8
