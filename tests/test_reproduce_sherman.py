"""dmrack reproduce sherman: every experiment runs on a tiny rack and returns rows of its own name
(the figures themselves come from ``dmrack reproduce sherman --quick``, docs/sherman.md)."""

from __future__ import annotations

import pytest

from cluster.experiments import sherman as rsh

TINY = dict(records=400, warm_ms=0.05, measure_ms=0.1, servers=2, threads=2)


@pytest.mark.parametrize("name", ["fig10", "fig11", "skew"])
def test_figure_rows(name):
    rows = rsh.EXPERIMENTS[name](True, lambda msg: None, **TINY, mixes=("write-only", "read-intensive"))
    assert rows and {r.experiment for r in rows} == {name}
    assert all(r.emulated is not None and r.emulated > 0 for r in rows)
    # a tiny rack is not the paper's 176 threads: nothing is compared with a published value
    assert all(r.published is None for r in rows if name != "skew")


def test_ablation_configurations_and_ratios():
    configs = (rsh.ABLATION[0], rsh.ABLATION[-1])
    rows = rsh.ablation(True, lambda msg: None, **TINY, configs=configs)
    assert {r.experiment for r in rows} == {"ablation"}
    fg = {r.series: r.emulated for r in rows if r.metric == "hand-overs / write"}
    assert fg["FG+"] == 0                             # FG+ has no local lock table
    ratios = [r for r in rows if r.series.startswith("Sherman / FG+")]
    assert len(ratios) == 2 and all(r.emulated > 0 for r in ratios)


def test_one_memory_node_rows():
    rows = rsh.onemn(True, lambda msg: None, threads=2, records=400, warm_ms=0.05, measure_ms=0.1)
    assert [r.metric for r in rows] == ["Mops", "Mops", "Mops ratio"]
    assert {r.experiment for r in rows} == {"onemn"} and all(r.emulated > 0 for r in rows)
    # 2 threads are not the artifact's 94: nothing is compared with its published value
    assert all(r.published is None for r in rows)
    assert rows[0].x == 16                            # clients: threads x 8 coroutines


def test_unknown_paper_is_one_line(capsys):
    from cluster.cli import main
    assert main(["reproduce", "shermann"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "unknown paper" in err[0] and "available: dolphin, dpastore, flexkv, pd3, sherman, smart" in err[0]
