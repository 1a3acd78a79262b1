"""Messages and inputs of issue 41 (items 12-18): each bad input is one line naming the problem and
the place, exit status 2, nothing left in /dev/shm; the conventions of shm.messages (values cut,
"did you mean", positions counted from 1) hold in every message that echoes user input."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from cluster.scenario import parse_scenario
from cluster.spec import SpecError, parse_override, spec_from_dict
from shm.messages import CLIP_CHARS, clip, did_you_mean, item
from tests.test_cli_edges import assert_one_line_exit_2, dmrack


def test_helpers():
    assert clip("x" * CLIP_CHARS) == "x" * CLIP_CHARS
    cut = clip("y" * 100_000)
    assert cut.startswith("y" * CLIP_CHARS + "...") and cut.endswith("(100,000 characters)") and len(cut) < 200
    assert did_you_mean("racee", ["race", "rolex"]) == "; did you mean race?"
    assert did_you_mean("racee", ["race"], quote=True) == "; did you mean 'race'?"
    assert did_you_mean("zzz", ["race"]) == ""
    assert item("steer", 0) == "steer[1]"


# -- item 12: check --option, check --system ----------------------------------------------------

def test_check_option_without_equals_names_option_and_an_example_of_the_systems_own():
    r = dmrack("check", "--system", "race", "--option", "fault")
    assert_one_line_exit_2(r, "--option fault: must look like key=value (e.g. --option fault=none)")
    assert "--set" not in r.stderr and "compute.threads" not in r.stderr
    r = dmrack("check", "--system", "race", "--option", "nonsense")
    assert_one_line_exit_2(r, "--option nonsense: must look like key=value (e.g. --option load_factor=0.5)")


def test_set_keeps_its_own_flag_and_example():
    with pytest.raises(SpecError, match=r"^--set compute\.threads: must look like table\.key=value "
                                        r"\(e\.g\. --set compute\.threads=8\)$"):
        parse_override("compute.threads")


def test_check_unknown_system_suggests_the_closest_like_run_does():
    r = dmrack("check", "--system", "racee")
    assert_one_line_exit_2(r, "unknown system 'racee'", "did you mean race?")


# -- item 14: the key at fault, long values cut ----------------------------------------------------

def test_capacity_refusal_names_the_value_size_not_the_record_count():
    with pytest.raises(SpecError) as e:
        parse_scenario("[workload]\nvaluesize = 1e9\n", source="big.toml")
    msg = str(e.value)
    assert msg.startswith("big.toml: workload.valuesize = 1000000000: system 'race' needs at least"), msg
    assert msg.endswith("or lower the value size") and "recordcount" not in msg
    # a count too large for the memory nodes still names the count
    with pytest.raises(SpecError, match=r"^many\.toml: workload\.recordcount = 100000000: .* or lower the count$"):
        parse_scenario("[workload]\nrecordcount = 100_000_000\n", source="many.toml")


def test_a_long_value_is_cut_in_messages():
    name = "n" * 100_000
    with pytest.raises(SpecError) as e:
        spec_from_dict({"rack": {"name": name}}, source="long.toml")
    assert len(str(e.value)) < 400 and "(100,000 characters)" in str(e.value)
    r = dmrack("check", "--system", "s" * 100_000)
    assert_one_line_exit_2(r, "(100,000 characters)")
    assert len(r.stderr) < 600
    r = dmrack("run", "examples/minimal.toml", "--set", "w" * 100_000)
    assert_one_line_exit_2(r, "--set www", "(100,000 characters)")
    assert len(r.stderr) < 600


# -- item 15: an empty history --------------------------------------------------------------------

@pytest.mark.parametrize("content", ["", "\n\n  \n"])
def test_an_empty_history_is_refused_not_passed(tmp_path, content):
    path = tmp_path / "empty.jsonl"
    path.write_text(content)
    r = dmrack("check", "--history", str(path))
    assert_one_line_exit_2(r, f"{path}: the history is empty (no operations to check)")
    assert "linearizable" not in r.stdout


# -- item 16: positions count from 1 --------------------------------------------------------------

def test_positions_in_messages_count_from_one_like_steps():
    rule = {"node": "cn0", "port": 70000, "target": "cn0"}
    with pytest.raises(SpecError, match=r"steer\[1\]\.port = 70000"):
        spec_from_dict({"steer": [rule]}, source="s.toml")
    with pytest.raises(SpecError, match=r"steer\[2\]: missing key 'target'"):
        spec_from_dict({"steer": [{**rule, "port": 7}, {"node": "cn0", "port": 8}]}, source="s.toml")
    with pytest.raises(SpecError, match=r'dpu\.hosts\[1\] = "cn7": no such compute node'):
        spec_from_dict({"rack": {"profile": "bf3"}, "dpu": {"hosts": ["cn7"]}}, source="s.toml")
    with pytest.raises(SpecError, match=r'step\[1\]\.action = "rnu"'):
        parse_scenario('[[step]]\naction = "rnu"\n', source="s.toml")


# -- item 17: --colocated of a scenario that runs until stopped --------------------------------------

def test_colocated_until_stopped_names_the_file_and_the_step(tmp_path):
    empty = tmp_path / "empty.toml"
    empty.write_text("")
    r = dmrack("run", str(empty), "--colocated")
    assert_one_line_exit_2(r, f"{empty}: step[2] (run workload default) has no duration_ms",
                           "--set run.duration_ms=10")


# -- item 18: a system's runtime give-up is one line in the summary ---------------------------------

def test_a_system_that_gives_up_is_one_unbroken_line_after_the_summary(tmp_path):
    """RACE sized at load_factor 1.0 fills with inserts: the 300-character "RACE table full" line
    is printed whole (not folded mid-sentence at the console's width) below the results table."""
    r = dmrack("run", "examples/minimal.toml", "--no-dashboard", "--set", "system.load_factor=1.0",
               "--set", "workload.insertproportion=1", "--set", "workload.readproportion=0",
               "--set", "workload.updateproportion=0", timeout=300)
    assert r.returncode == 3, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    gave_up = [i for i, ln in enumerate(lines) if "the system gave up: RACE table full" in ln]
    assert gave_up, r.stdout
    table_end = max(i for i, ln in enumerate(lines) if ln.startswith("└"))
    assert gave_up[-1] > table_end
    line = lines[gave_up[-1]]
    assert len(line) > 160 and line.rstrip().endswith("or size the rack for more keys."), line


# -- the repository paragraph: papers by name, check reports ignored ----------------------------------

SEED_NUMBER = r"\bseed 0\d\d\b"      # our file numbers (seed 000 = PD3, 002 = DPA-Store, 003 = FlexKV)


def test_user_facing_listings_name_papers_not_seed_numbers():
    from tests.test_rack import ROOT
    r = dmrack("systems", "--json")
    assert r.returncode == 0, r.stderr
    papers = {s["name"]: s["paper"] for s in json.loads(r.stdout)}
    assert "FlexKV: Flexible Index Offloading" in papers["flexkv"] and "Sankhe" in papers["pd3"]
    r = dmrack("reproduce", "--help")
    assert r.returncode == 0 and "FlexKV (Hu, Shen, Yang)" in r.stdout and "PD3 (Sankhe et al.)" in r.stdout
    for text in (str(papers), r.stdout, Path(ROOT, "README.md").read_text()):
        assert not re.search(SEED_NUMBER, text), re.search(SEED_NUMBER, text)


def test_check_reports_are_ignored_not_committed():
    from tests.test_rack import ROOT
    assert "dmrack-check-*.txt" in Path(ROOT, ".gitignore").read_text().split()
    assert not list(Path(ROOT).glob("dmrack-check-*.txt"))
