"""`dmrack check` as a user runs it: RACE passes; RACE with a deliberately broken update (a blind
WRITE instead of the slot CAS) fails loudly, with the checker's explanation."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.test_rack import ROOT


def _check(*extra, tmp_path):
    out = tmp_path / "verdict.json"
    r = subprocess.run([sys.executable, "-m", "cluster.cli", "check", "--system", "race", "--quick", "--json",
                        str(out), *extra], cwd=ROOT, capture_output=True, text=True, timeout=600)
    return r, json.loads(out.read_text())


def test_race_passes_dmrack_check(tmp_path):
    r, verdict = _check(tmp_path=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "PASS: race" in r.stdout
    assert verdict["passed"] and verdict["stress"] == "ok"
    assert verdict["ops"] > 1000 and verdict["keys"] > 10


def test_a_race_whose_update_skips_its_cas_fails_loudly(tmp_path):
    r, verdict = _check("--option", "fault=update-skips-cas", tmp_path=tmp_path)
    assert r.returncode == 1
    assert "FAIL: race" in r.stdout
    assert "NOT linearizable" in r.stdout and "no valid order" in r.stdout
    assert not verdict["passed"] and verdict["stress"] == "illegal"
    assert "Timeline" in verdict["explanation"]
