"""The sweep progress bar: it counts parts and points, keeps stdout untouched, and is silent when
stderr is not a terminal or with --quiet."""

import io

from rich.console import Console

from cluster.experiments import progress as pr
from cluster.experiments.pointpool import map_points


def _square(x):
    return x * x


def test_parts_and_points_make_the_fraction():
    sweep = pr.Sweep("bench toy", ["a", "b"], show=False)
    part = sweep.part("a")
    part.expect(4)
    part("point 1")
    part.advance()
    assert sweep.completed() == 0.25 and sweep.count_text() == "part 1/2 · 1/4 points"
    assert sweep.now == "point 1"
    sweep.part("b")
    assert sweep.completed() == 1.0 and sweep.count_text() == "part 2/2"


def test_map_points_counts_its_points_also_through_a_prefix():
    sweep = pr.Sweep("reproduce toy", ["fig1"], show=False)
    got = map_points(_square, [(1,), (2,), (3,)], progress=pr.prefixed(sweep.part("fig1"), "fig1: "))
    assert got == [1, 4, 9]
    assert (sweep.points_done, sweep.points_total) == (3, 3)
    assert sweep.now == "fig1: (3,)"


def test_a_plain_function_is_still_a_progress():
    heard = []
    assert map_points(_square, [(2,)], progress=pr.prefixed(heard.append, "x: ")) == [4]
    assert heard == ["x: (2,)"]


def test_the_bar_draws_on_its_console_while_open():
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=160)
    with pr.Sweep("reproduce toy", ["fig1"], show=True, console=console) as sweep:
        part = sweep.part("fig1")
        part.expect(2)
        part("the first point")
        sweep._progress.refresh()
    assert "reproduce toy" in out.getvalue() and "0/2 points" in out.getvalue()


def test_quiet_and_no_terminal_mean_no_bar(monkeypatch):
    monkeypatch.setattr("sys.stderr", io.StringIO())       # not a terminal
    assert not pr.shown()
    pr.set_quiet(True)
    try:
        assert not pr.shown()
    finally:
        pr.set_quiet(False)


def test_reproduce_writes_nothing_to_stderr_without_a_terminal(tmp_path, capsys):
    from cluster.cli import main
    assert main(["reproduce", "smart", "--quick", "--only", "fig4", "--quiet",
                 "--json", str(tmp_path / "r.json")]) == 0
    captured = capsys.readouterr()
    assert captured.err == "" and "smart-fig4" not in captured.err and "fig4" in captured.out
