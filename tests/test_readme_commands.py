"""The README's command table, run end to end.

The table is parsed out of README.md, so this test follows the README: every row's command must
have a concrete invocation below (a new row without one fails ``test_every_readme_command_has_a_run``),
every ``--flag`` a row shows must be one its subcommand accepts (``--help``), and every
invocation runs as a user would (a subprocess, from the repository) with a short duration,
``--quick`` and the cheapest ``--only``, must exit 0 and must leave no shared-memory segment of
its own processes in /dev/shm.

Cost on a 2-core machine (measured): about a minute for the whole file. The slow commands are cut
down: ``bench ycsb`` runs only workload C (read-only, the cheapest of A/B/C, ~9 s), ``bench verbs``
only ``latency`` (~2 s), ``reproduce smart`` only ``fig4`` (~4 s; ``table1`` takes ~50 s even with
--quick), ``up`` and ``run`` stop after 3 real seconds.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from cluster.correctness.checker import Op, dump_jsonl
from shm.segment import list_segments, owner_pid_of

ROOT = Path(__file__).resolve().parent.parent


def readme_commands() -> list[str]:
    """The commands of the README's table (the text in the first column's backticks)."""
    text = (ROOT / "README.md").read_text()
    section = text.split("## Commands", 1)[1].split("\n## ", 1)[0]
    return [m.group(1) for m in re.finditer(r"^\| `(dmrack [^`]*)` \|", section, re.M)]


def base_of(command: str) -> str:
    """``dmrack run FILE [--set ...]`` -> ``dmrack run FILE``: the words before the first option
    in brackets, which is what tells two rows apart."""
    return command.split(" [", 1)[0].strip()


def flags_of(command: str) -> list[str]:
    return sorted(set(re.findall(r"(--[a-z][a-z-]*)", command)))


# The concrete runs of each row (keyed by base_of); {tmp} is the test's temporary directory.
RUNS = {
    "dmrack up": [
        ["up", "examples/devices.toml", "--duration", "4", "--no-dashboard", "--json", "{tmp}/devices.json"],
        ["up", "--duration", "3", "--no-dashboard", "--seed", "2", "--out", "{tmp}/up/new/dir"],
        ["up", "--check", "--history", "{tmp}/h.jsonl", "--duration", "3", "--no-dashboard"],      # last: its stdout is checked
    ],
    "dmrack run FILE": [["run", "examples/minimal.toml", "--duration", "3", "--no-dashboard",
                         "--set", "compute.threads=2"]],
    "dmrack check --system NAME": [["check", "--system", "race", "--quick", "--json", "{tmp}/check.json"]],
    "dmrack check --history FILE": [["check", "--history", "{tmp}/given.jsonl", "--time-limit", "5"]],
    "dmrack systems": [["systems"], ["systems", "--json"]],
    "dmrack profiles": [["profiles"], ["profiles", "--json"], ["profiles", "--assumptions"]],
    # Fig. 8 of PD3 is a one-process model (~1 s a run): three runs, one knob
    "dmrack sensitivity PAPER": [["sensitivity", "pd3", "--quick", "--only", "fig8", "--knobs", "coherence.pause_ns",
                                  "--factors", "0.5,2", "--json", "{tmp}/sens.json", "--plot", "{tmp}/sens",
                                  "--jobs", "1"]],
    "dmrack clean": [["clean"]],
    "dmrack warm": [["warm"], ["warm", "examples/minimal.toml"]],
    "dmrack bench ycsb --system race": [["bench", "ycsb", "--system", "race", "--quick", "--only", "c"]],
    "dmrack bench verbs": [["bench", "verbs", "--quick", "--only", "latency", "--json", "{tmp}/verbs.json"]],
    "dmrack reproduce smart": [["reproduce", "smart", "--quick", "--only", "fig4", "--jobs", "2",
                                "--plot", "{tmp}/plots"]],
    # onemn: two racks side by side, 25 s in this test on a slow host; skew (the Figs. 10 and 11 rack) took 64 s
    "dmrack reproduce sherman": [["reproduce", "sherman", "--quick", "--only", "onemn", "--json", "{tmp}/sherman.json"]],
    "dmrack reproduce dolphin": [["reproduce", "dolphin", "--quick", "--only", "table2", "--jobs", "2", "--json",
                                  "{tmp}/dolphin.json"]],
    "dmrack reproduce flexkv": [["reproduce", "flexkv", "--quick", "--only", "fig19", "--jobs", "2", "--json",
                                 "{tmp}/flexkv.json"]],
    "dmrack reproduce pd3": [["reproduce", "pd3", "--quick", "--only", "fig4,fig8", "--json", "{tmp}/pd3.json"]],
    "dmrack reproduce dpastore": [["reproduce", "dpastore", "--quick", "--only", "bulkload", "--json",
                                   "{tmp}/dpastore.json"]],
    "dmrack bench devices": [["bench", "devices", "--quick", "--only", "dpa-memory,dma", "--json",
                              "{tmp}/devices.json"]],
    "dmrack bench speed": [["bench", "speed", "--quick", "--only", "verbs", "--json", "{tmp}/speed.json"]],
    "dmrack compare OLD.json NEW.json": [["compare", "{tmp}/old.json", "{tmp}/old.json", "--tolerance", "1",
                                          "--include-real", "--json", "{tmp}/compare.json"]],
    "dmrack plot RESULT.json... --out DIR": [["plot", "{tmp}/old.json", "--out", "{tmp}/figs"]],
    "dmrack report RESULT.json... -o PATH": [["report", "{tmp}/old.json", "-o", "{tmp}/report.html"]],
}


def test_every_readme_command_has_a_run():
    bases = [base_of(c) for c in readme_commands()]
    assert len(bases) >= 9, bases
    assert sorted(set(bases)) == sorted(RUNS), "README rows and the runs of this test differ"


@pytest.mark.parametrize("command", readme_commands(), ids=base_of)
def test_readme_flags_exist(command):
    """Every flag the README shows for a command is in that subcommand's --help."""
    words = base_of(command).split()
    sub = [w for w in words[1:] if not w.isupper() and not w.startswith("--")][:1]
    r = subprocess.run([sys.executable, "-m", "cluster.cli", *sub, "--help"], cwd=ROOT, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    missing = [f for f in flags_of(command) if f not in r.stdout]
    assert not missing, f"{command}: not in `dmrack {' '.join(sub)} --help`: {missing}"


def _run(args: list[str], timeout: float = 300):
    """Run one command; returns (CompletedProcess-like tuple, pids of it and its descendants)."""
    proc = subprocess.Popen([sys.executable, "-m", "cluster.cli", *args], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    pids = {proc.pid}
    end = time.monotonic() + timeout
    me = psutil.Process(proc.pid)
    # Segments are named by the pid of the process that created them (the supervisor, or a
    # worker of a pool of fresh racks): collect the descendants while the command runs.
    while proc.poll() is None and time.monotonic() < end:
        try:
            pids.update(p.pid for p in me.children(recursive=True))
        except psutil.Error:
            pass
        time.sleep(0.05)
    stdout, stderr = proc.communicate(timeout=max(1.0, end - time.monotonic()))
    return proc.returncode, stdout, stderr, pids


@pytest.mark.parametrize("base", sorted(RUNS))
def test_readme_command_runs(base, tmp_path):
    if base == "dmrack check --history FILE":
        dump_jsonl([Op(1, "insert", 5, 1, True, 10, 20), Op(2, "get", 5, 1, True, 30, 40)], tmp_path / "given.jsonl")
    if base in ("dmrack compare OLD.json NEW.json", "dmrack plot RESULT.json... --out DIR",
                "dmrack report RESULT.json... -o PATH"):
        (tmp_path / "old.json").write_text('[{"experiment": "fig1", "series": "s", "x": 1, "metric": "Mops", '
                                           '"emulated": 1.0, "published": 1.1}]')
    if any(a in ("--plot", "plot", "report") for args in RUNS[base] for a in args):
        pytest.importorskip("matplotlib")           # the figures need the 'plot' extra
    for args in RUNS[base]:
        args = [a.replace("{tmp}", str(tmp_path)) for a in args]
        before = set(list_segments())
        status, stdout, stderr, pids = _run(args)
        assert status == 0, f"dmrack {' '.join(args)}: exit {status}\n{stdout[-3000:]}\n{stderr[-3000:]}"
        assert "Traceback" not in stderr, stderr
        left = [s for s in set(list_segments()) - before if owner_pid_of(s) in pids]
        assert not left, f"dmrack {' '.join(args)} left shared memory behind: {left}"
    if base == "dmrack up":
        assert (tmp_path / "up" / "new" / "dir" / "results.json").exists()      # --out was created
        assert (tmp_path / "h.jsonl").stat().st_size > 0 and "linearizable:" in stdout
        nodes = {n["node"]: n for n in json.loads((tmp_path / "devices.json").read_text())["nodes"]}
        assert nodes["dpa0"]["role"] == "dpa" and nodes["dpa0"]["dpa_threads"] == 16      # the DPA served
        assert nodes["dpu0"]["udp_dropped"] + nodes["dpu0"]["rx_queued"] > 0               # mirrored copies
    if base == "dmrack reproduce smart":
        assert (tmp_path / "plots" / "reproduce-smart-fig4.png").exists()
    if base.startswith("dmrack plot"):
        assert (tmp_path / "figs" / "old-fig1-mops.png").exists()
    if base.startswith("dmrack report"):
        assert (tmp_path / "report.html").read_text().count("data:image/png;base64,") == 1


def test_a_first_run_says_what_it_compiles_and_still_gets_its_duration(tmp_path):
    """The README's first command on a machine whose numba cache is empty (pointed at a fresh
    directory): the compile is announced before it starts, plain progress lines follow once the
    nodes run, and --duration counts from then (the steps get their 3 real seconds)."""
    import os
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "numba-cache"))
    r = subprocess.run([sys.executable, "-m", "cluster.cli", "up", "--duration", "3", "--no-dashboard",
                        "--json", str(tmp_path / "r.json")], cwd=ROOT, env=env, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    lines = r.stdout.splitlines()
    said = next(i for i, line in enumerate(lines) if "preparing the fabric's kernels" in line)
    progress = [i for i, line in enumerate(lines) if line.startswith("[step ") and "Mops/s" in line]
    assert lines[0].startswith("dmrack: building rack") and said == 1
    assert progress and progress[0] > said and "p50/p99" in lines[progress[0]]
    assert any((tmp_path / "numba-cache").rglob("*.nbi"))               # it compiled into the empty cache
    assert json.loads((tmp_path / "r.json").read_text())["summary"]["real_s"] >= 2.5   # the run got its duration


def test_warm_checks_every_file_before_it_compiles(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[compute]\ncount = 0\n")
    r = subprocess.run([sys.executable, "-m", "cluster.cli", "warm", "examples/minimal.toml", str(bad)], cwd=ROOT,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "ready in" not in r.stdout
    assert len(r.stderr.strip().splitlines()) == 1 and "compute.count" in r.stderr, r.stderr
