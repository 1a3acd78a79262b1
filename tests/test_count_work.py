"""scripts/count_work.py: a speed row's work, counted, is the same run after run."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def _script():
    spec = importlib.util.spec_from_file_location("count_work", REPO / "scripts" / "count_work.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_a_rows_bytecodes_are_the_same_every_run_and_name_the_post_path():
    cw = _script()
    a = cw.count_bytecodes("coroutine", 5_000, 8, lines=("_post_to",))
    b = cw.count_bytecodes("coroutine", 5_000, 8)
    assert a["verbs"] == b["verbs"] > 0
    assert a["bytecodes"] == b["bytecodes"] > 0
    names = [f["function"] for f in a["functions"]]
    assert "shm/coro.py:_post_to" in names and "shm/coro.py:_defer" in names     # depth 8 defers its READs
    assert sum(f["bytecodes"] for f in a["functions"]) == a["bytecodes"]
    assert a["lines"] and all(ln["function"] == "shm/coro.py:_post_to" for ln in a["lines"])
    one = cw.count_bytecodes("coroutine", 5_000, 1)
    assert "shm/coro.py:_defer" not in [f["function"] for f in one["functions"]]   # below DEFER_MIN: events
    assert one["bytecodes_per_verb"] > a["bytecodes_per_verb"]                      # a post per verb costs more


def test_the_command_prints_a_table_writes_json_and_refuses_bad_input(tmp_path):
    out = tmp_path / "count.json"
    r = subprocess.run([sys.executable, str(REPO / "scripts" / "count_work.py"), "raw", "--window-us", "5", "--top", "3",
                        "--json", str(out)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "per verb" in r.stdout and "shm/" in r.stdout
    got = json.loads(out.read_text())
    assert got["row"] == "raw" and got["verbs"] > 0 and got["bytecodes"] > 0
    for args, what in ((["nope"], "unknown row 'nope'"), (["raw", "--window-us", "0"], "--window-us"),
                       (["raw", "--instructions", "--lines", "_post_to"], "--lines")):
        r = subprocess.run([sys.executable, str(REPO / "scripts" / "count_work.py"), *args], capture_output=True, text=True)
        assert r.returncode == 2 and what in r.stderr and len(r.stderr.strip().splitlines()) == 1


@pytest.mark.skipif(shutil.which("valgrind") is None or shutil.which("callgrind_control") is None,
                    reason="--instructions needs valgrind")
def test_instructions_are_counted_around_the_timed_part_only(tmp_path):
    out = tmp_path / "count.json"
    r = subprocess.run([sys.executable, str(REPO / "scripts" / "count_work.py"), "coroutine", "--window-us", "2",
                        "--instructions", "--json", str(out)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    got = json.loads(out.read_text())
    # the timed part alone: a few thousand instructions a verb, not the ~10^9 of starting Python and numba
    assert got["verbs"] > 0 and 1_000 < got["instructions_per_verb"] < 1_000_000
    assert "instructions:" in r.stdout
