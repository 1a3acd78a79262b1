"""scripts/count_work.py: a speed row's work, counted, is the same run after run."""

from __future__ import annotations

import importlib.util
import json
import os
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
    fa, fb = ({f["function"]: f["bytecodes"] for f in r["functions"]} for r in (a, b))
    assert a["bytecodes"] == b["bytecodes"] > 0, {k: (fa.get(k), fb.get(k)) for k in fa.keys() | fb.keys()
                                                  if fa.get(k) != fb.get(k)}
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


def test_the_child_run_under_callgrind_reports_its_row_on_its_last_line():
    """What --instructions runs under valgrind, run without it (its callgrind_control calls then
    find no valgrind process and do nothing): the row, then one JSON line with its verbs."""
    env = dict(os.environ, DMRACK_COUNT_WORK_TOGGLE="1")
    r = subprocess.run([sys.executable, str(REPO / "scripts" / "count_work.py"), "coroutine", "--window-us", "2"],
                       capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert got["row"] == "coroutine" and got["window_ns"] == 2_000 and got["verbs"] > 0


# A child that counts a loop of n additions inside callgrind_window, as a row's child counts its
# timed part (only the standard library: under valgrind a rack's imports would take ~40 s)
_CHILD = """
import importlib.util, json, sys
spec = importlib.util.spec_from_file_location("count_work", sys.argv[1])
cw = importlib.util.module_from_spec(spec)
spec.loader.exec_module(cw)
n = int(sys.argv[2])
with cw.callgrind_window():
    total = 0
    for i in range(n):
        total += i
print(json.dumps({"verbs": n}))
"""


@pytest.mark.skipif(shutil.which("valgrind") is None or shutil.which("callgrind_control") is None,
                    reason="--instructions needs valgrind")
def test_instructions_are_counted_around_the_timed_part_only():
    """Instructions inside callgrind_window alone: an empty window counts almost nothing (not
    the ~10^8 instructions of starting Python under valgrind), twice the loop about twice as many."""
    cw = _script()
    script = str(REPO / "scripts" / "count_work.py")
    counts = {}
    for n in (0, 20_000, 40_000):
        got, counts[n] = cw.callgrind_count([sys.executable, "-c", _CHILD, script, str(n)])
        assert got == {"verbs": n}
    assert counts[0] < 5_000_000 < counts[20_000]
    assert 1.8 < (counts[40_000] - counts[0]) / (counts[20_000] - counts[0]) < 2.2, counts
    with pytest.raises(SystemExit, match="valgrind failed"):
        cw.callgrind_count([sys.executable, "-c", "raise SystemExit(3)"])
