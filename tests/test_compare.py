"""``dmrack compare OLD.json NEW.json`` (cluster.experiments.compare), through cluster.cli.main."""

from __future__ import annotations

import json

import pytest

from cluster.cli import main

ROWS = [
    {"experiment": "fig3", "series": "SMART", "x": 16, "metric": "Mops", "emulated": 10.0, "published": 10.0},
    {"experiment": "fig3", "series": "SMART", "x": 32, "metric": "Mops", "emulated": 20.0, "published": 30.0},
    {"experiment": "fig4", "series": "RACE", "x": 8, "metric": "µs", "emulated": 3.0, "published": None},
    {"experiment": "speed", "series": "raw verbs", "x": "-", "metric": "verbs/s real", "emulated": 250000,
     "published": 300000},
    {"experiment": "speed", "series": "reproduce smart --quick fig12", "x": "-", "metric": "wall s",
     "emulated": 12.5},
]


def write(tmp_path, name, rows):
    path = tmp_path / name
    path.write_text(json.dumps(rows))
    return str(path)


def changed(**emulated):
    """ROWS with the emulated value of row i replaced: changed(r0=14.0)."""
    rows = json.loads(json.dumps(ROWS))
    for k, v in emulated.items():
        rows[int(k[1:])]["emulated"] = v
    return rows


def test_identical_files(tmp_path, capsys):
    old, new = write(tmp_path, "old.json", ROWS), write(tmp_path, "new.json", ROWS)
    assert main(["compare", old, new]) == 0
    out = capsys.readouterr().out
    assert "3 of 3 rows identical" in out and "moved" not in out


def test_a_moved_row_with_its_delta(tmp_path, capsys):
    old, new = write(tmp_path, "old.json", ROWS), write(tmp_path, "new.json", changed(r2=3.3))
    assert main(["compare", old, new, "--json", str(tmp_path / "cmp.json")]) == 0   # no verdict: still 0
    out = capsys.readouterr().out
    assert "moved (1)" in out and "+0.30" in out and "+10.00 %" in out and "2 of 3 rows identical" in out
    got = json.loads((tmp_path / "cmp.json").read_text())
    assert got["counts"]["moved"] == 1 and got["moved"][0]["x"] == 8
    assert got["moved"][0]["delta_pct"] == pytest.approx(10.0)
    # within the tolerance it is unchanged
    assert main(["compare", old, new, "--tolerance", "10.5"]) == 0
    assert "3 of 3 rows identical (within 10.5 %)" in capsys.readouterr().out


def test_a_verdict_getting_worse_exits_1_and_better_is_listed(tmp_path, capsys):
    old = write(tmp_path, "old.json", ROWS)
    new = write(tmp_path, "new.json", changed(r0=14.0, r1=28.0))    # 16: within -> outside; 32: outside -> within
    assert main(["compare", old, new, "--json", str(tmp_path / "cmp.json")]) == 1
    out = capsys.readouterr().out
    assert "within -> outside (worse)" in out and "outside -> within (better)" in out
    assert "1 verdict(s) got worse" in out
    got = json.loads((tmp_path / "cmp.json").read_text())
    assert [(v["x"], v["change"]) for v in got["verdict_changes"]] == [(16, "worse"), (32, "better")]
    assert main(["compare", new, old]) == 1          # the other way round, 32 gets worse


def test_wall_clock_rows_are_not_counted(tmp_path, capsys):
    old = write(tmp_path, "old.json", ROWS)
    new = write(tmp_path, "new.json", changed(r3=100000, r4=30.0))   # raw verbs leaves ±30 % too
    assert main(["compare", old, new]) == 0
    out = capsys.readouterr().out
    assert "3 of 3 rows identical" in out and "wall-clock rows (not compared): 2" in out
    assert main(["compare", old, new, "--include-real"]) == 1
    out = capsys.readouterr().out
    assert "3 of 5 rows identical" in out and "within -> outside" in out


def test_added_and_removed_rows(tmp_path, capsys):
    extra = {"experiment": "fig3", "series": "SMART", "x": 64, "metric": "Mops", "emulated": 1.0, "published": None}
    old, new = write(tmp_path, "old.json", ROWS[1:]), write(tmp_path, "new.json", [*ROWS[:2], extra])
    assert main(["compare", old, new]) == 0
    out = capsys.readouterr().out
    assert "added (only in NEW): 2" in out and "removed (only in OLD): 3" in out
    assert "1 of 1 rows identical" in out


def test_reads_the_result_object_with_its_run_record_and_the_older_plain_list(tmp_path, capsys):
    import json
    new = tmp_path / "new.json"
    new.write_text(json.dumps({"format": "dmrack-result/1", "run": {"command": "reproduce smart"}, "rows": ROWS}))
    assert main(["compare", write(tmp_path, "old.json", ROWS), str(new)]) == 0
    assert "3 of 3 rows identical" in capsys.readouterr().out


@pytest.mark.parametrize("content, message", [
    (None, "no such file"),
    ("{not json", "not JSON"),
    ('{"runs": []}', "not rows (a JSON object without 'rows')"),
    ('{"format": "other/9", "rows": []}', "format 'other/9' is neither 'dmrack-result/1' (dmrack bench, reproduce) "
                                         "nor 'dmrack.results/2' (dmrack run, up)"),
    ('{"format": "dmrack.results/2", "rows": []}', "a run's results must have 'meta' and 'summary' objects"),
    ('[{"experiment": "fig3", "series": "s", "x": 1, "emulated": 1}]', "row 1 has no 'metric'"),
    ('[{"experiment": "e", "series": "s", "x": 1, "metric": "m", "emulated": "fast"}]', "emulated is \"fast\""),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys, content, message):
    bad = tmp_path / "bad.json"
    if content is not None:
        bad.write_text(content)
    assert main(["compare", write(tmp_path, "old.json", ROWS), str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"dmrack compare: {bad}: ") and message in err, err


def test_the_results_of_dmrack_run_compare_and_go_into_a_report(tmp_path, capsys):
    """Issue 41 item 11: `run --out`'s results.json is a result like any other: a co-located run
    (deterministic for its seed) compares as identical with itself, a run with another seed moves,
    and the report shows the run's steps without a published value."""
    a, b = tmp_path / "a", tmp_path / "b"
    assert main(["run", "examples/minimal.toml", "--colocated", "--out", str(a)]) == 0
    assert main(["run", "examples/minimal.toml", "--colocated", "--seed", "2", "--json", str(b)]) == 0
    capsys.readouterr()
    assert main(["compare", str(a / "results.json"), str(a / "results.json")]) == 0
    out = capsys.readouterr().out
    # 110: the summary's counters include cas_raced and chaos_delays since the check's coverage line
    assert "of 110 rows identical; 4 wall-clock not compared" in out and "110 of 110" in out, out
    assert main(["compare", str(a / "results.json"), str(b)]) == 0       # no published values: no verdicts
    assert "moved" in capsys.readouterr().out

    from cluster.experiments.rows import load_result
    run, rows = load_result(str(a / "results.json"))
    assert run["command"] == "run" and run["parts"][1] == "step 2: run default for 10 ms"
    keys = {(r["experiment"], r["series"], r["x"], r["metric"]) for r in rows}
    assert {("step 2", "rack", "all", "Mops/s"), ("step 2", "cn0", "read", "p99 µs"),
            ("end of run", "mn0", "memory", "bytes used"), ("run", "rack", "all", "verbs")} <= keys
    assert all(r["published"] is None for r in rows)

    page = tmp_path / "runs.html"
    assert main(["report", str(a / "results.json"), str(b), "-o", str(page)]) == 0
    html = page.read_text()
    assert "step 1: bulk-load 10,000 records (default)" in html and "<h3>step 2</h3>" in html
    assert "nothing published" in html and "<th>Mops/s</th>" in html


RATIO = [{"experiment": "fig16", "series": "PD3 / sync", "x": "p50", "metric": "ratio", "emulated": 2.0,
          "published": 1.5},
         {"experiment": "fig16", "series": "worst / PD3", "x": "p50", "metric": "ratio", "emulated": 3.0,
          "published": 11.0}]


def test_a_lost_direction_exits_1_and_the_fidelity_counts_of_both_files_are_printed(tmp_path, capsys):
    """A ratio that falls to the other side of 1 is a regression like a lost verdict, and the
    headline counts (within ±30 %, directions held) of both files come last (issue 40)."""
    old = write(tmp_path, "old.json", RATIO)
    moved = json.loads(json.dumps(RATIO))
    moved[0]["emulated"] = 0.9                        # outside before and after: no verdict change
    moved[0]["published"] = 3.0
    new = write(tmp_path, "new.json", moved)
    assert main(["compare", old, new, "--json", str(tmp_path / "cmp.json")]) == 1
    out = capsys.readouterr().out
    assert "held -> not held (worse)" in out and "1 direction(s) lost" in out
    assert "fidelity: 0 of 2 within ±30 %, 2 of 2 directions held -> 0 of 2 within ±30 %, 1 of 2" in out
    got = json.loads((tmp_path / "cmp.json").read_text())
    assert got["counts"]["directions_lost"] == 1 and got["fidelity"]["new"]["held"] == 1


def test_a_claim_change_without_a_moved_number_is_listed(tmp_path, capsys):
    """A row that becomes a direction row, or loses its published value, changes the counts with
    every emulated value identical: listed as a claim change."""
    old = write(tmp_path, "old.json", RATIO)
    claims = json.loads(json.dumps(RATIO))
    claims[0]["kind"] = "direction"
    claims[1]["published"] = None
    new = write(tmp_path, "new.json", claims)
    assert main(["compare", old, new]) == 0
    out = capsys.readouterr().out
    assert "2 of 2 rows identical" in out and "claim changes (published value or row kind): 2" in out
    assert "1.50 (direction)" in out
    assert "fidelity: 0 of 2 within ±30 %, 2 of 2 directions held -> 0 of 0 within ±30 %, 1 of 1" in out


def test_a_row_that_becomes_an_input_is_a_claim_change_and_counted_apart(tmp_path, capsys):
    """Marking a calibration point as an input (issue 40) moves no number: a claim change, and the
    fidelity line gives the inputs apart."""
    old = write(tmp_path, "old.json", RATIO)
    claims = json.loads(json.dumps(RATIO))
    claims[1]["kind"] = "input"
    new = write(tmp_path, "new.json", claims)
    assert main(["compare", old, new]) == 0
    out = capsys.readouterr().out
    assert "2 of 2 rows identical" in out and "claim changes (published value or row kind): 1" in out
    assert "-> 0 of 1 within ±30 %, 1 of 1 directions held (inputs apart: 0 of 1 within)" in out
