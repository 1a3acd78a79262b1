"""The experiments' registry (cluster/experiments/registry.py): every experiment its table lists is
found by kind and name and declares that kind and name, the table lists every module of the
package that declares one, a new module with its line in the table runs as ``dmrack reproduce
NAME``, an unknown name is one line listing what is available, and importing the command line
imports no experiment."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import cluster.experiments
from cluster.experiments import registry
from cluster.experiments.registry import OPTIONS, Experiment, UnknownExperiment, available, find

ROOT = Path(__file__).resolve().parent.parent


def test_the_package_declares_the_benches_and_the_papers():
    assert [(e.kind, e.name) for e in available()] == [
        ("bench", "devices"), ("bench", "speed"), ("bench", "verbs"), ("bench", "ycsb"), ("reproduce", "dolphin"),
        ("reproduce", "dpastore"), ("reproduce", "flexkv"), ("reproduce", "pd3"), ("reproduce", "sherman"), ("reproduce", "smart")]
    assert [e.name for e in available("reproduce")] == ["dolphin", "dpastore", "flexkv", "pd3", "sherman", "smart"]
    for e in available():
        assert e.title and callable(e.run) and e.parts and set(e.options) <= set(OPTIONS)


def test_the_table_lists_every_module_that_declares_an_experiment():
    """A module moved or renamed is its line in the table changed: every line resolves to the
    experiment it is listed as, and no public module of the package declares one the table lacks
    (the message names the line to add)."""
    import importlib
    import pkgutil
    listed = {target.partition(":")[0]: (kind, name) for kind, names in registry.EXPERIMENTS.items()
              for name, target in names.items()}
    for exp in available():
        assert registry.EXPERIMENTS[exp.kind][exp.name].endswith(":EXPERIMENT")
    for m in pkgutil.iter_modules(cluster.experiments.__path__):
        if m.name.startswith("_"):
            continue
        module = f"cluster.experiments.{m.name}"
        exp = getattr(importlib.import_module(module), "EXPERIMENT", None)
        if isinstance(exp, Experiment):
            assert listed.get(module) == (exp.kind, exp.name), \
                f"add EXPERIMENTS[{exp.kind!r}][{exp.name!r}] = '{module}:EXPERIMENT' to cluster/experiments/registry.py"


def test_a_line_that_names_another_experiment_is_refused(monkeypatch):
    monkeypatch.setitem(registry.EXPERIMENTS["reproduce"], "smarter", "cluster.experiments.reproduce_smart:EXPERIMENT")
    with pytest.raises(ValueError, match=r"EXPERIMENTS\['reproduce'\]\['smarter'\] = .* declares reproduce 'smart'"):
        find("reproduce", "smarter")


def test_find_returns_the_module_declaration():
    from cluster.experiments import bench_verbs as verbs, bench_ycsb as ycsb, reproduce_smart as smart, sherman
    assert find("reproduce", "smart") is smart.EXPERIMENT
    assert find("reproduce", "sherman") is sherman.EXPERIMENT and sherman.EXPERIMENT.setup is sherman.setup
    assert find("reproduce", "sherman").figures == tuple(sherman.FIGURES)
    assert find("bench", "verbs").parts == tuple(verbs.EXPERIMENTS)
    assert find("bench", "ycsb").options == ("system", "trace")
    assert find("reproduce", "smart").options == ("jobs",) == find("reproduce", "sherman").options
    assert ycsb.EXPERIMENT.parts == ("a", "b", "c")


@pytest.mark.parametrize("kind, name, message", [
    ("reproduce", "shermann", "unknown paper 'shermann'; available: dolphin, dpastore, flexkv, pd3, sherman, smart"),
    ("bench", "nosuch", "unknown suite 'nosuch'; available: devices, speed, verbs, ycsb"),
    ("reproduce", "verbs", "unknown paper 'verbs'"),           # a bench is not a paper
    ("bench", "rows", "unknown suite 'rows'"),                  # a helper declares nothing
    ("bench", "compare", "unknown suite 'compare'"),            # nor does dmrack compare's module
])
def test_an_unknown_name_lists_what_is_available(kind, name, message):
    with pytest.raises(UnknownExperiment, match=message):
        find(kind, name)


def test_a_declaration_is_checked():
    with pytest.raises(ValueError, match="kind must be one of"):
        Experiment(kind="paper", name="x", title="x", run=print)
    with pytest.raises(ValueError, match="unknown option 'threads'"):
        Experiment(kind="bench", name="x", title="x", run=print, options=("threads",))


def test_a_part_takes_jobs_exactly_when_it_runs_side_by_side():
    """A part that takes ``jobs`` but is not declared side by side would never be given it and run
    its racks one at a time (DPA-Store's Figs. 10 and 15 did): refused when the paper is declared,
    as are the other two mismatches. Every shipped reproduction passes (it imports)."""
    def sweep(quick, progress, *, jobs=1):
        return []

    def alone(quick, progress):
        return []

    from cluster.experiments.rows import reproduction
    setup = lambda quick: {"scale": "toy"}   # noqa: E731
    with pytest.raises(ValueError, match="part 'sweep' takes jobs but is not in side_by_side"):
        reproduction("toy", "Toy", title="t", parts={"sweep": sweep, "alone": alone}, setup=setup)
    with pytest.raises(ValueError, match="part 'alone' is in side_by_side but takes no jobs"):
        reproduction("toy", "Toy", title="t", parts={"sweep": sweep, "alone": alone}, setup=setup,
                     side_by_side=("sweep", "alone"))
    with pytest.raises(ValueError, match="side_by_side names parts it does not have: fig9"):
        reproduction("toy", "Toy", title="t", parts={"sweep": sweep}, setup=setup, side_by_side=("sweep", "fig9"))
    assert reproduction("toy", "Toy", title="t", parts={"sweep": sweep, "alone": alone}, setup=setup,
                        side_by_side=("sweep",)).parts == ("sweep", "alone")
    for name in ("dolphin", "dpastore", "pd3", "sherman", "smart", "flexkv"):
        assert find("reproduce", name).parts


NEW_PAPER = '''
"""A paper added as one module: declares itself, no edit to the command line."""
from cluster.experiments.rows import Row, reproduction

def fig1(quick, progress, *, jobs=1):
    assert jobs == 3
    return [Row("fig1", "toy", 1, "Mops", 1.5 if quick else 3.0, 2.0)]

EXPERIMENTS = {"fig1": fig1}

def setup(quick):
    return {"profile": "cx6-200g", "scale": "toy" if quick else "full toy"}

EXPERIMENT = reproduction("toypaper", "Toy", title="a toy paper", parts=EXPERIMENTS, side_by_side=("fig1",),
                          setup=setup)
'''


def test_a_new_module_is_a_new_command(tmp_path, monkeypatch, capsys):
    """A module that is not in the package's directory but on its path stands for a new file in
    cluster/experiments/, with its line in the table: ``dmrack reproduce toypaper`` finds and runs
    it, --help lists it."""
    (tmp_path / "toypaper.py").write_text(NEW_PAPER)
    monkeypatch.setattr(cluster.experiments, "__path__", [*cluster.experiments.__path__, str(tmp_path)])
    monkeypatch.setitem(registry.EXPERIMENTS["reproduce"], "toypaper", "cluster.experiments.toypaper:EXPERIMENT")
    monkeypatch.delitem(sys.modules, "cluster.experiments.toypaper", raising=False)
    try:
        from cluster.cli import main
        out = tmp_path / "rows.json"
        assert main(["reproduce", "toypaper", "--quick", "--jobs", "3", "--json", str(out)]) == 0
        written = json.loads(out.read_text())
        assert written["rows"] == [{"experiment": "fig1", "series": "toy", "x": 1, "metric": "Mops",
                                    "emulated": 1.5, "published": 2.0}]
        assert written["run"]["quick"] is True and written["run"]["parts"] == ["fig1"]
        assert written["run"]["setup"]["scale"] == "toy" and written["run"]["options"] == {"jobs": 3}
        assert [e.name for e in available("reproduce")] == ["dolphin", "dpastore", "flexkv", "pd3", "sherman", "smart", "toypaper"]
        with pytest.raises(SystemExit):
            main(["reproduce", "--help"])
        help_text = capsys.readouterr().out
        assert "toypaper  a toy paper" in help_text and "--only fig1" in help_text
        assert main(["reproduce", "toypaper", "--only", "fig2", "--jobs", "3"]) == 2
        assert "unknown experiment 'fig2'; choose from fig1" in capsys.readouterr().err
    finally:
        sys.modules.pop("cluster.experiments.toypaper", None)


def test_the_command_line_imports_no_experiment():
    """``dmrack --help`` and every command but bench and reproduce stay as fast as before the
    registry: building the parser imports no experiment module."""
    code = ("import sys\nfrom cluster.cli import main\ntry:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
            "print(sorted(m for m in sys.modules if m.startswith('cluster.experiments.')))")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().splitlines()[-1] == "['cluster.experiments.pointpool']"


def _measured(key, log):
    log.append(key)
    return key * 10


def test_points_a_run_shares_are_measured_once_per_run_and_not_seen_by_another_run():
    """Parts of one run read the same points (a new SharedPoints per run, handed to every part with
    a ``shared`` keyword); a second run in the same process measures them again (no module cache
    to clear), and parts without the keyword are called as before."""
    from cluster.experiments.pointpool import SharedPoints
    from cluster.experiments.rows import Row, reproduction

    class Quiet:
        def print(self, *a, **k):
            pass
    log, seen = [], []

    def part(name):
        def fn(quick, progress, *, shared: SharedPoints | None = None):
            seen.append(shared)
            got = shared.measure(_measured, [2, 1, 2], args=lambda k: (k, log))
            return [Row(name, "s", k, "x", v) for k, v in zip((2, 1, 2), got)]
        return fn

    def plain(quick, progress):
        return [Row("plain", "s", 0, "x", 0.0)]
    exp = reproduction("toy", "Toy", title="toy", parts={"a": part("a"), "b": part("b"), "plain": plain},
                       setup=lambda quick: {"scale": "toy"})
    assert exp.parts == ("a", "b", "plain") and exp.options == ("jobs",) and exp.figures == ()
    first = exp.run(quick=True, console=Quiet())
    assert [r.emulated for r in first] == [20, 10, 20, 20, 10, 20, 0.0]
    assert log == [2, 1]                                 # each point once, in first-named order
    assert seen[0] is seen[1]                            # both parts of the run: one SharedPoints
    exp.run(quick=True, console=Quiet())
    assert log == [2, 1, 2, 1] and seen[2] is not seen[0]   # the next run measures its own


def test_shared_points_run_the_missing_ones_in_the_order_asked():
    from cluster.experiments.pointpool import SharedPoints
    log = []
    shared = SharedPoints()
    assert shared.measure(_measured, [1, 3, 2], args=lambda k: (k, log), order=lambda k: -k) == [10, 30, 20]
    assert log == [3, 2, 1]
    assert shared.measure(_measured, [4, 3], args=lambda k: (k, log)) == [40, 30] and log == [3, 2, 1, 4]
    assert shared.once("rack", lambda: len(log)) == 4 and shared.once("rack", lambda: -1) == 4
