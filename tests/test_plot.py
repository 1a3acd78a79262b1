"""Figures of result files: --plot on reproduce, dmrack plot, the figure specs and their fallback."""

from __future__ import annotations

import importlib.util
import json
import sys

import pytest

from cluster.cli import main
from cluster.experiments import figures, plot
from cluster.experiments.figures import Figure

# the figures need the optional 'plot' extra (matplotlib); without it these tests are skipped
pytestmark = pytest.mark.skipif(importlib.util.find_spec("matplotlib") is None,
                                reason="matplotlib not installed: pip install -e '.[plot]'")

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

RUN = {"command": "reproduce smart", "title": "SMART", "parts": ["fig4", "fig5", "fig7"], "quick": True,
       "options": {"jobs": 1}, "setup": {"profile": "cx6-200g", "seed": 1, "spec": "a rack",
                                         "scale": "20,000 keys (paper: 100 M)"},
       "dmrack_version": "0.1.0", "git_commit": "0123456789abcdef0123456789abcdef01234567", "git_dirty": True,
       "python": "3.11", "numba": "0.6", "machine": {"hostname": "box", "cpu": "cpu", "cpus": 2, "memory_gib": 4},
       "argv": ["dmrack"], "started_utc": "2026-01-01T00:00:00Z", "wall_s": 12.5, "failed": []}


def _row(experiment, series, x, metric, emulated, published=None):
    return {"experiment": experiment, "series": series, "x": x, "metric": metric, "emulated": emulated,
            "published": published}


def smart_rows() -> list[dict]:
    """Rows shaped like reproduce smart's fig4, fig5 and fig7 (made-up values)."""
    rows = []
    for t in (36, 96):
        for d in (1, 8, 32):
            rows.append(_row("fig4", f"{t} threads", d, "Mops", 10.0 * d ** 0.5 + t / 10, 101.0 if (t, d) == (36, 32) else None))
    rows.append(_row("fig4", "96 threads", "d32/d8", "ratio", 0.57, 0.495))
    for t in (1, 8, 32, 96):
        rows.append(_row("fig5", "race, zipf 0.99", t, "Mops", 1.0 + t / 50))
        rows.append(_row("fig5", "race, zipf 0.99", t, "p99 µs", 10.0 * t ** 1.5))
    rows.append(_row("fig5", "race, zipf 0.99", "peak", "threads at peak", 8, 8))
    for theta in (0.0, 0.5, 0.99):
        rows.append(_row("fig5", "race, 16 threads", f"θ={theta}", "Mops", 2 - theta))
        rows.append(_row("fig5", "race, 16 threads", f"θ={theta}", "p50 µs", 5 + theta))
        rows.append(_row("fig5", "race, 16 threads", f"θ={theta}", "p99 µs", 10 + 500 * theta))
    rows.append(_row("fig5", "race, 16 threads", "0.99/0", "p99 ratio", 50.0, 78.4))
    for system in ("race", "smart-ht"):
        series = f"{system}, write-heavy"
        for t in (1, 8, 48):
            rows.append(_row("fig7", series, t, "Mops", t / 10 + (1 if system == "race" else 2)))
        rows.append(_row("fig7", series, "peak", "peak Mops", 5.0, 2.8 if system == "race" else 5.7))
        rows.append(_row("fig7", series, "peak", "threads at peak", 48, 8 if system == "race" else 48))
    rows.append(_row("fig7", "smart-ht / race, write-heavy", "peak", "ratio", 0.9, 5.7 / 2.8))
    return rows


def write_result(path, rows, run=RUN, plain=False):
    data = rows if plain else {"format": "dmrack-result/1", "run": run, "rows": rows}
    path.write_text(json.dumps(data))
    return str(path)


def check_png(path) -> None:
    with open(path, "rb") as f:
        assert f.read(8) == PNG_MAGIC
    import matplotlib.image
    img = matplotlib.image.imread(path)
    assert img.ndim == 3 and img.shape[0] > 100 and img.shape[1] > 100


def test_the_paper_module_declares_the_figures_and_the_rest_falls_back():
    rows = smart_rows() + [_row("fig99", "new", t, "Mops", float(t)) for t in (1, 2)]
    ids = [f.id for f in figures.figures_for(RUN, rows)]
    assert ids[:4] == ["fig4", "fig5a", "fig5b", "fig7a"]      # declared, with rows, in declared order
    assert "fig7b" not in ids                                  # declared, but no rows in this file
    assert ids[4:] == ["fig99-mops"]                           # automatic: no declared figure covers fig99


def test_without_a_run_record_every_figure_is_automatic():
    got = {f.id: f for f in figures.figures_for(None, smart_rows())}
    assert {"fig4-mops", "fig5-mops", "fig5-p99-us", "fig7-mops"} <= set(got)
    assert got["fig5-mops-by-category"].kind == "bar"           # θ=... as categories beside the numeric x
    assert got["fig5-p99-us"].ylog                              # values spanning more than 100x


def test_wall_clock_rows_get_figures_only_in_the_speed_bench():
    rows = [_row("speed", "raw verbs", "32 threads", "verbs/s real", 1e6),
            _row("speed", "simpy", "32 threads", "verbs/s real", 1e4), _row("fig1", "a", 1, "Mops", 1.0)]
    assert [f.id for f in figures.figures_for({"command": "reproduce smart"}, rows)] == ["fig1-mops"]
    assert [f.id for f in figures.figures_for({"command": "bench speed"}, rows)] == ["verbs", "fig1-mops"]


def test_log_scales_and_panels_as_declared():
    from cluster.experiments.reproduce_smart import FIGURES
    spec = {f.id: f for f in FIGURES}
    rows = smart_rows()
    fig4 = plot.draw(spec["fig4"], rows, RUN)
    assert fig4.axes[0].get_xscale() == "log" and fig4.axes[0].get_yscale() == "linear"
    fig5a = plot.draw(spec["fig5a"], rows, RUN)
    assert [ax.get_yscale() for ax in fig5a.axes] == ["linear", "log"]
    assert fig5a.axes[1].get_ylabel() == "p99 latency (µs)"
    fig5b = plot.draw(spec["fig5b"], rows, RUN)
    assert [t.get_text() for t in fig5b.axes[0].get_xticklabels()] == ["θ=0.0", "θ=0.5", "θ=0.99"]
    assert len(fig5b.axes[1].get_lines()) == 2                 # p50 and p99 in one latency panel
    texts = " ".join(t.get_text() for t in fig4.texts)
    assert "reproduce smart --quick" in texts and "cx6-200g" in texts and "0123456789" in texts
    assert "20,000 keys" in texts


def test_published_points_and_headline_references_are_drawn():
    from cluster.experiments.reproduce_smart import FIGURES
    fig7a = plot.draw({f.id: f for f in FIGURES}["fig7a"], smart_rows(), RUN)
    ax = fig7a.axes[0]
    stars = [c for c in ax.collections if len(c.get_offsets())]
    points = sorted(tuple(map(float, p)) for c in stars for p in c.get_offsets())
    assert points == [(8.0, 2.8), (48.0, 5.7)]                  # published peaks at their published thread counts
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels[:2] == ["race", "smart-ht"] and "published (paper)" in labels


def test_calibration_points_are_diamonds_with_their_own_legend_entry():
    """A published value a constant was set from (an input row) is drawn as a diamond, apart from
    the stars of the checks, and the legend says what it is (issue 40)."""
    rows = [_row("fig3", "per_thread_qp", t, "Mops", 10.0 + t, 12.0 + t) for t in (8, 24, 32)]
    for r in rows[1:]:
        r["kind"] = "input"
    ax = plot.draw(Figure("fig3", "fig3", "Mops", "per-thread QPs"), rows, RUN).axes[0]
    drawn = {(float(x), float(y)): c.get_paths()[0] for c in ax.collections for x, y in c.get_offsets()}
    assert set(drawn) == {(8.0, 20.0), (24.0, 36.0), (32.0, 44.0)}
    assert drawn[(24.0, 36.0)] is drawn[(32.0, 44.0)] and drawn[(8.0, 20.0)] is not drawn[(24.0, 36.0)]
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "published (paper)" in labels and "published, a constant's calibration point" in labels


def test_a_spec_with_panels_checks_its_labels():
    with pytest.raises(ValueError, match="ylabel has 1 entries for 2 panels"):
        Figure("f", "e", ("a", "b"), ylabel=("only one",))
    with pytest.raises(ValueError, match="kind"):
        Figure("f", "e", "a", kind="pie")


def test_dmrack_plot_draws_saved_files_new_and_old(tmp_path, capsys):
    new = write_result(tmp_path / "new.json", smart_rows())
    old = write_result(tmp_path / "old.json", smart_rows(), plain=True)
    out = tmp_path / "figs" / "sub"
    assert main(["plot", new, old, "--out", str(out)]) == 0
    names = sorted(p.name for p in out.iterdir())
    assert "new-fig4.png" in names and "new-fig5a.png" in names and "new-fig7a.png" in names
    assert "old-fig4-mops.png" in names
    for p in out.iterdir():
        check_png(p)
    assert "new.json: wrote" in capsys.readouterr().out


def test_dmrack_plot_of_a_bad_file_is_one_line_and_draws_nothing(tmp_path, capsys):
    good = write_result(tmp_path / "good.json", smart_rows())
    (tmp_path / "bad.json").write_text('{"some": "object"}')
    out = tmp_path / "figs"
    assert main(["plot", good, str(tmp_path / "bad.json"), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "bad.json" in err and "not rows" in err
    assert not out.exists()
    assert main(["plot", str(tmp_path / "nosuch.json"), "--out", str(out)]) == 2
    assert "nosuch.json: no such file" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["reproduce", "smart", "--quick", "--only", "fig4", "--plot"],
                                  ["bench", "ycsb", "--quick", "--only", "c", "--plot"],
                                  ["plot", "RESULT", "--out"]])
def test_without_matplotlib_one_line_exit_2_before_anything_runs(tmp_path, capsys, monkeypatch, argv):
    from cluster.experiments import bench_ycsb as ycsb, reproduce_smart as smart

    def boom(*a, **k):
        raise AssertionError("ran an experiment without matplotlib")

    monkeypatch.setitem(smart.EXPERIMENTS, "fig4", boom)
    monkeypatch.setattr(ycsb, "_workload", boom)
    monkeypatch.setitem(sys.modules, "matplotlib", None)       # import matplotlib -> ImportError
    argv = [a.replace("RESULT", write_result(tmp_path / "r.json", smart_rows())) for a in argv]
    assert main(argv + [str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "pip install 'dmrack[plot]'" in err
    assert not (tmp_path / "out").exists()


def test_reproduce_with_plot_writes_the_json_and_a_png_per_figure(tmp_path, capsys):
    """One real small run: SMART Fig. 4 at --quick (a few seconds)."""
    out = tmp_path / "out"
    assert main(["reproduce", "smart", "--quick", "--only", "fig4", "--jobs", "1", "--plot", str(out)]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["reproduce-smart-fig4.png", "reproduce-smart.json"]
    check_png(out / "reproduce-smart-fig4.png")
    data = json.loads((out / "reproduce-smart.json").read_text())
    assert data["run"]["command"] == "reproduce smart" and data["run"]["quick"] is True
    assert {r["experiment"] for r in data["rows"]} == {"fig4"}
    # the JSON written into DIR draws the same figures again without a run
    out2 = tmp_path / "out2"
    assert main(["plot", str(out / "reproduce-smart.json"), "--out", str(out2)]) == 0
    assert sorted(p.name for p in out2.iterdir()) == ["reproduce-smart-fig4.png"]
    # --json says where the JSON goes; DIR then holds only the figures
    out3, js = tmp_path / "out3", tmp_path / "elsewhere.json"
    assert main(["reproduce", "smart", "--quick", "--only", "fig4", "--jobs", "1", "--plot", str(out3),
                 "--json", str(js)]) == 0
    assert sorted(p.name for p in out3.iterdir()) == ["reproduce-smart-fig4.png"] and js.exists()


def test_matplotlib_is_imported_only_for_figures():
    """``dmrack --help``, ``dmrack reproduce --help`` (which imports every experiment module and
    so their FIGURES) do not import matplotlib."""
    import subprocess
    from pathlib import Path
    code = ("import sys\nfrom cluster.cli import main\nfor argv in (['--help'], ['reproduce', '--help']):\n"
            "    try:\n        main(argv)\n    except SystemExit:\n        pass\n"
            "print('matplotlib' in sys.modules)")
    r = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).resolve().parent.parent,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().splitlines()[-1] == "False"


def test_figure_names_never_collide():
    rows = [_row("e", "a", 1, "p99 µs", 1.0), _row("e", "a", 2, "p99 µs", 2.0),
            _row("e", "a", 1, "p99 us", 1.0), _row("e", "a", 2, "p99 us", 2.0)]
    assert [f.id for f in figures.figures_for(None, rows)] == ["e-p99-us", "e-p99-us-2"]


def test_the_module_is_found_through_the_command_or_not_at_all():
    rows = [_row("ycsb-a", "race", t, "Mops", float(t)) for t in (1, 8)]
    assert [f.id for f in figures.figures_for({"command": "bench ycsb (race)"}, rows)] == ["ycsb-a"]
    for run in ({"command": "reproduce nosuchpaper"}, {"command": "compare"}, {"command": "nosuch kind"}, {}):
        assert [f.id for f in figures.figures_for(run, rows)] == ["ycsb-a-mops"]


def test_the_same_file_name_twice_gets_two_sets_of_figures(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    one = write_result(tmp_path / "a" / "run.json", smart_rows())
    two = write_result(tmp_path / "b" / "run.json", smart_rows())
    assert main(["plot", one, two, "--out", str(tmp_path / "o")]) == 0
    names = {p.name for p in (tmp_path / "o").iterdir()}
    assert {"run-fig4.png", "run-2-fig4.png"} <= names


def test_the_speed_bench_draws_its_wall_clock_rows(tmp_path):
    rows = [_row("speed", "one process", "32 threads x depth 8", "verbs/s real", 2e5),
            _row("speed", "raw verbs", "32 threads x depth 8", "verbs/s real", 3e6),
            _row("speed", "two processes, sync 10 µs", "2 x 16 threads x depth 8", "verbs/s real", 1.5e5, 3e5),
            _row("speed", "two processes, x failed: boom", "2 x 16 threads", "verbs/s real", None),
            _row("speed", "race ycsb-a", "16 threads", "ops/s real", 5e4),
            _row("speed", "race ycsb-a", "16 threads", "virtual µs per real s", 80.0),
            _row("speed", "race bulk load", "100,000 keys", "keys/s real", 4e5),
            _row("speed", "reproduce smart --quick fig12", "-", "wall s", 30.0)]
    paths = plot.write_plots({"command": "bench speed"}, rows, str(tmp_path), "bench-speed")
    assert sorted(p.rsplit("/", 1)[1] for p in paths) == [
        "bench-speed-bulk-load.png", "bench-speed-reproduce.png", "bench-speed-systems.png", "bench-speed-verbs.png"]
    for p in paths:
        check_png(p)
