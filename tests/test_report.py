"""dmrack report: one self-contained HTML page of result files."""

from __future__ import annotations

import importlib.util
import base64
import sys
from html.parser import HTMLParser

import pytest

from cluster.cli import main
from cluster.experiments.report import counts
from cluster.experiments.rows import direction
from tests.test_plot import PNG_MAGIC, RUN, _row, smart_rows, write_result

# the figures need the optional 'plot' extra (matplotlib); without it these tests are skipped
pytestmark = pytest.mark.skipif(importlib.util.find_spec("matplotlib") is None,
                                reason="matplotlib not installed: pip install -e '.[plot]'")


class Page(HTMLParser):
    """Collects what the tests look at: image sources, links, table cells, all text."""

    def __init__(self):
        super().__init__()
        self.imgs, self.links, self.cells, self.text = [], [], [], []
        self._cell = None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "img":
            self.imgs.append(attrs.get("src", ""))
        for key in ("src", "href"):
            if key in attrs:
                self.links.append(attrs[key])
        if tag in ("td", "th", "dt", "dd"):
            self._cell = []

    def handle_endtag(self, tag):
        if tag in ("td", "th", "dt", "dd") and self._cell is not None:
            self.cells.append("".join(self._cell).strip())
            self._cell = None

    def handle_data(self, data):
        self.text.append(data)
        if self._cell is not None:
            self._cell.append(data)


def parse(path) -> Page:
    page = Page()
    page.feed(path.read_text(encoding="utf-8"))
    page.close()
    return page


def test_direction_of_ratio_rows():
    assert direction(_row("fig5", "race", "0.99/0", "p99 ratio", 50.0, 78.4)) == "held"
    assert direction(_row("fig7", "smart-ht / race, a", "peak", "ratio", 0.9, 2.04)) == "not held"
    assert direction(_row("flexkv", "FAA", "8B", "x RDMA_CAS", 3.0, 2.5)) == "held"
    assert direction(_row("fig7", "race", "peak", "peak Mops", 5.0, 2.8)) is None       # not a ratio
    assert direction(_row("fig13a", "+W", "≥56", "min / peak", 0.9, 1.0)) is None      # published 1: no side
    assert direction(_row("skew", "read", "zipf / uniform", "Mops ratio", 0.99, 1.04)) is None   # about even
    assert direction(_row("skew", "write", "zipf / uniform", "Mops ratio", 0.21, 0.26)) == "held"
    assert direction(_row("fig5", "race", "0.99/0", "p99 ratio", None, 78.4)) == "not held"
    assert direction(_row("fig5", "race", "0.99/0", "p99 ratio", 2.0, None)) is None


def test_the_report_is_self_contained_and_counts_match(tmp_path, capsys):
    rows = smart_rows()
    res = write_result(tmp_path / "smart.json", rows)
    out = tmp_path / "report.html"
    assert main(["report", res, "-o", str(out)]) == 0
    page = parse(out)
    assert page.imgs, "no figure embedded"
    for src in page.imgs:
        assert src.startswith("data:image/png;base64,")
        assert base64.b64decode(src.split(",", 1)[1])[:8] == PNG_MAGIC
    assert not [u for u in page.links if u.startswith(("http://", "https://", "//"))]
    html = out.read_text()
    assert "<script" not in html and "<link" not in html
    c = counts(rows)
    published = [r for r in rows if r["published"] is not None]
    assert c["published"] == len(published) == 9
    assert c["within"] == sum(abs(r["emulated"] / r["published"] - 1) <= 0.3 for r in published)
    assert (c["directions"], c["held"]) == (3, 2)          # fig4 d32/d8 and fig5 p99 held, fig7 ratio not
    summary = page.cells[page.cells.index("directions held") + 1:][:7]
    assert summary[0] == "dmrack reproduce smart" and summary[2:] == [
        str(len(rows)), "9", str(c["within"]), str(9 - c["within"]), "2 of 3"]
    text = " ".join(page.text)
    for field in ("0123456789abcdef0123456789abcdef01234567 (uncommitted changes)", "cx6-200g", "--quick",
                  "20,000 keys (paper: 100 M)", "12.5 s", "box: cpu, 2 CPUs, 4 GiB", "2026-01-01T00:00:00Z",
                  "0.1.0", "a rack"):
        assert field in text, field
    # every headline row is in a table, with its verdict and direction
    assert page.cells.count("within") + page.cells.count("outside") == 9 + 1     # + the summary's "outside" header
    assert page.cells.count("held") == 2 and page.cells.count("not held") == 1


def test_text_from_files_is_escaped(tmp_path):
    rows = [_row("fig<1>", "<script>alert(1)</script>", 1, "Mops & more", 1.0, 1.1),
            _row("fig<1>", "<script>alert(1)</script>", 2, "Mops & more", 2.0)]
    run = {**RUN, "command": "reproduce <b>x</b>", "setup": {"scale": "\"quoted\" <i>"}}
    out = tmp_path / "r.html"
    assert main(["report", write_result(tmp_path / "x.json", rows, run=run), "-o", str(out)]) == 0
    html = out.read_text()
    assert "<script>" not in html and "<b>x</b>" not in html and "<i>" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html


def test_an_old_plain_list_file_says_not_recorded(tmp_path):
    out = tmp_path / "r.html"
    old = write_result(tmp_path / "old.json", smart_rows(), plain=True)
    new = write_result(tmp_path / "new.json", smart_rows())
    assert main(["report", old, new, "-o", str(out)]) == 0
    page = parse(out)
    assert "not recorded (a result file written before runs carried their provenance)" in page.cells
    assert "old.json" in page.cells and "dmrack reproduce smart" in page.cells
    assert len(page.imgs) > 4


@pytest.mark.parametrize("content, message", [(None, "no such file"), ("[1, 2", "not JSON"),
                                              ('{"a": 1}', "not rows"), ("[[1]]", "row 1 is not an object")])
def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys, content, message):
    bad = tmp_path / "bad.json"
    if content is not None:
        bad.write_text(content)
    out = tmp_path / "r.html"
    assert main(["report", write_result(tmp_path / "ok.json", smart_rows()), str(bad), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "bad.json" in err and message in err
    assert not out.exists()
    assert main(["report", str(tmp_path / "ok.json"), "-o", str(tmp_path / "no" / "r.html")]) == 2
    assert "no such directory" in capsys.readouterr().err


def test_without_matplotlib_the_report_says_how_to_get_the_figures(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    out = tmp_path / "r.html"
    assert main(["report", write_result(tmp_path / "s.json", smart_rows()), "-o", str(out)]) == 0
    page = parse(out)
    assert not page.imgs and "pip install 'dmrack[plot]'" in " ".join(page.text)


def test_the_issue_s_commands_from_a_real_run(tmp_path):
    """``reproduce smart --quick --plot out/ && report out/*.json -o out/report.html`` (Fig. 4 only)."""
    out = tmp_path / "out"
    assert main(["reproduce", "smart", "--quick", "--only", "fig4", "--jobs", "1", "--plot", str(out)]) == 0
    assert main(["report", *map(str, out.glob("*.json")), "-o", str(out / "report.html")]) == 0
    page = parse(out / "report.html")
    assert len(page.imgs) == 1 and "fig4" in page.text
    assert "96 threads" in page.cells and "d32/d8" in page.cells


def test_scale_rows_state_the_setup_and_are_not_counted_as_fidelity():
    """A row that states the run's scale beside the paper's ("clients: 32, paper 200") is no
    fidelity claim: no verdict, no direction, and counts keep it apart (issue 40)."""
    from cluster.experiments.rows import Row, is_scale, scale_row, verdict
    from dataclasses import asdict
    scale = asdict(scale_row("fig16", "rack: 2 CNs (paper: 20)", "-", "clients", 32, 200))
    result = asdict(Row("fig16", "flexkv", "-", "Mops", 10.0, 11.0))
    ratio = asdict(scale_row("fig16", "scale / paper", "-", "ratio", 0.1, 10.0))
    assert is_scale(scale) and not is_scale(result)
    assert verdict(scale) is None and direction(ratio) is None and verdict(result) == "within"
    c = counts([scale, result, ratio])
    assert (c["published"], c["within"], c["outside"], c["scale"]) == (1, 1, 0, 2)
    # files written before rows had kinds read as results
    old = {k: v for k, v in result.items() if k != "kind"}
    assert not is_scale(old) and verdict(old) == "within"
    with pytest.raises(ValueError, match="row kind 'setup'"):
        Row("x", "s", 1, "m", 1.0, kind="setup")


def test_direction_rows_have_a_direction_and_no_verdict():
    """A point of which the paper states only the side of 1 (one figure inside a range the text gives
    over several) is held or not held, never within or outside, and counts keep it apart."""
    from cluster.experiments.rows import Row, direction_row, verdict
    from dataclasses import asdict
    inside = asdict(direction_row("fig16", "best other p50 / PD3 p50", "p50", "ratio", 2.4, 1.5))
    wrong_side = asdict(direction_row("fig16", "Redy p50 / sync RDMA p50", "p50", "ratio", 0.8, 2.2))
    result = asdict(Row("latency-range", "best other p50 / PD3 p50, smallest", "-", "ratio", 1.4, 1.5))
    assert verdict(inside) is None and direction(inside) == "held" and direction(wrong_side) == "not held"
    c = counts([inside, wrong_side, result])
    assert (c["published"], c["within"], c["direction"], c["directions"], c["held"]) == (1, 1, 2, 3, 2)


def test_input_rows_keep_their_verdict_and_are_counted_apart():
    """A published value a constant was set from (a least-squares fit's points, a rate turned into a
    unit time) is no test of the model: its verdict shows whether the calibration still holds, and
    counts keep it, and its direction, out of the published rows (issue 40)."""
    from cluster.experiments.rows import Row, input_row, verdict
    from dataclasses import asdict
    fit = asdict(input_row("smart-fig3", "per_thread_qp", 96, "Mops", 17.1, 19.2, "fig3a.csv"))
    off = asdict(input_row("fig3", "WRITE / CAS", "-", "ratio", 14.0, 10.1))
    result = asdict(Row("smart-fig3", "per_thread_qp", 8, "Mops", 30.0, 20.0))
    assert fit["kind"] == "input" and fit["source"] == "fig3a.csv"
    assert verdict(fit) == "within" and verdict(off) == "outside" and direction(off) == "held"
    c = counts([fit, off, result])
    assert (c["published"], c["within"], c["outside"], c["directions"]) == (1, 0, 1, 0)
    assert (c["input"], c["input_within"]) == (2, 1)
    from cluster.experiments.report import build
    page = build([("inputs.json", None, [fit, off, result])])
    assert "2 input rows apart, 1 within" in page and "within (input)" in page


def test_bound_rows_are_within_on_the_bounds_side_or_30_percent_past_it():
    """"Stays under 11.4 Mops": 5 Mops holds it (a ±30 % verdict would call it outside), 14 Mops is
    past it by less than 30 %, 15 by more; "at least 0.9" mirrors it; a bound at 1 has no direction."""
    from cluster.experiments.rows import bound_row, verdict
    from dataclasses import asdict

    def v(emu, pub, side, metric="Mops"):
        return asdict(bound_row("fig7", "race, read-only", "peak", metric, emu, pub, side))
    assert [verdict(v(e, 11.4, "at most")) for e in (5.0, 14.0, 15.0)] == ["within", "within", "outside"]
    assert [verdict(v(e, 0.9, "at least", "ratio")) for e in (0.97, 0.64, 0.6)] == ["within", "within", "outside"]
    assert direction(v(0.52, 1.0, "at most", "ratio")) is None and verdict(v(0.52, 1.0, "at most", "ratio")) == "within"
    assert direction(v(0.5, 0.8, "at most", "ratio")) == "held" and direction(v(1.2, 0.8, "at most", "ratio")) == "not held"
    assert counts([v(5.0, 11.4, "at most")])["published"] == 1
