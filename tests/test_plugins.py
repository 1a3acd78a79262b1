"""Plugin systems (nodes/systems/__init__.py): a system in the user's own package, found as
``module:Class`` on sys.path or through a ``dmrack.systems`` entry point, checked like the built-in
ones, and run on a rack of processes; every way it can fail to load is one line, exit status 2."""

from __future__ import annotations

import json
import sys
import textwrap
import uuid
from pathlib import Path

import pytest

import nodes.systems as registry
from nodes.systems import SystemLoadError, get_system, system_names, system_origin
from nodes.systems.api import System
from tests.test_cli_edges import assert_one_line_exit_2, dmrack
from tests.test_rack import ROOT

PLUGIN_DIR = Path(ROOT) / "examples" / "plugin"
EXAMPLE = "toyht.ht:ToyHT"
LOCKHT = "toyht.lockht:LockHT"        # the in-place sibling: lock-free GETs that must check a checksum


@pytest.fixture(autouse=True)
def fresh_registry(monkeypatch):
    """Plugins a test loads are forgotten after it (the registry caches them per process)."""
    monkeypatch.setattr(registry, "_loaded", dict(registry._loaded))
    monkeypatch.setattr(registry, "_origins", dict(registry._origins))
    before = set(sys.modules)
    yield
    for name in set(sys.modules) - before:
        if name.split(".")[0].startswith(("tmpsys_", "toyht")):
            del sys.modules[name]


def _package(tmp_path, monkeypatch, source: str, module: str = "ht") -> str:
    """A package with one module of ``source`` in a fresh directory on sys.path; its import name."""
    pkg = f"tmpsys_{uuid.uuid4().hex[:8]}"
    (tmp_path / pkg).mkdir()
    (tmp_path / pkg / "__init__.py").write_text("")
    (tmp_path / pkg / f"{module}.py").write_text(textwrap.dedent(source))
    monkeypatch.syspath_prepend(str(tmp_path))
    return pkg


RACE_COPY = """
    from nodes.systems.race import RaceSystem

    class TmpHT(RaceSystem):
        name = "tmp-ht"
        description = "RACE under another name, from a temporary package"

    class NotASystem:
        name = "nope"

    class Clash(RaceSystem):
        pass                      # keeps the name "race"
"""


def _dmrack(*args, cwd, pythonpath=None, timeout=120):
    # an empty PYTHONPATH is none: only what the test puts there (and the installed dmrack) is found
    return dmrack(*args, env={"PYTHONPATH": str(pythonpath) if pythonpath else ""}, cwd=cwd, timeout=timeout)


# -- (a) resolution ------------------------------------------------------------------------------------

def test_module_class_resolves_from_a_temporary_package(tmp_path, monkeypatch):
    pkg = _package(tmp_path, monkeypatch, RACE_COPY)
    cls = get_system(f"{pkg}.ht:TmpHT")
    assert issubclass(cls, System) and cls.name == "tmp-ht"
    assert get_system("tmp-ht") is cls                      # known by its name once loaded
    assert system_origin(f"{pkg}.ht:TmpHT") == f"module:Class {pkg}.ht:TmpHT"
    assert "tmp-ht" not in system_names()                   # only installed entry points are listed


def test_a_spec_names_a_plugin_system(tmp_path, monkeypatch):
    from cluster.rack import compile_scenario
    from cluster.scenario import scenario_from_dict
    pkg = _package(tmp_path, monkeypatch, RACE_COPY)
    s = scenario_from_dict({"system": {"name": f"{pkg}.ht:TmpHT", "load_factor": 0.25},
                            "workload": {"recordcount": 100}, "step": [{"action": "load"}]})
    assert s.spec.system.options["load_factor"] == 0.25
    assert compile_scenario(s).system.name == "tmp-ht"


def test_an_entry_point_is_found_and_listed(tmp_path, monkeypatch):
    pkg = _package(tmp_path, monkeypatch, RACE_COPY)
    dist = tmp_path / "tmpsys_dist-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: tmpsys-dist\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(f"[dmrack.systems]\ntmp-ep = {pkg}.ht:TmpHT\n"
                                           f"race = {pkg}.ht:Clash\n")
    assert "tmp-ep" in system_names() and system_names().count("race") == 1
    cls = get_system("tmp-ep")
    assert cls.name == "tmp-ht" and system_origin("tmp-ep").startswith("entry point tmp-ep (tmpsys-dist")
    assert get_system("race").__module__ == "nodes.systems.race.system"   # a built-in wins a clash
    from cluster import cli
    rows = []
    monkeypatch.setattr("builtins.print", lambda text, **kw: rows.extend(json.loads(text)))
    assert cli.main(["systems", "--json"]) == 0
    by = {(r["name"], r["source"].split()[0]): r for r in rows}
    assert by[("tmp-ep", "entry")]["class_name"] == "tmp-ht"
    assert "clashes with the built-in" in by[("race", "entry")]["error"]


@pytest.mark.parametrize("target, needle", [
    ("tmpsys_nowhere_at_all.ht:X", "module 'tmpsys_nowhere_at_all.ht' does not import: ModuleNotFoundError"),
    ("{pkg}.broken:X", "module '{pkg}.broken' does not import: ZeroDivisionError: division by zero"),
    ("{pkg}.ht:Missing", "has no 'Missing'"),
    ("{pkg}.ht:NotASystem", "is not a subclass of nodes.systems.api.System"),
    ("{pkg}.ht:Clash", "is named 'race', which is a built-in system"),
])
def test_load_errors_are_one_line(tmp_path, monkeypatch, target, needle):
    pkg = _package(tmp_path, monkeypatch, RACE_COPY)
    (tmp_path / pkg / "broken.py").write_text("import os\nx = 1 / 0\n")
    with pytest.raises(SystemLoadError) as e:
        get_system(target.format(pkg=pkg))
    assert needle.format(pkg=pkg) in str(e.value) and "\n" not in str(e.value)
    assert isinstance(e.value, ValueError)


# -- (b) the conformance suite on the example plugin, co-located ------------------------------------------

@pytest.mark.parametrize("check", ["single_client", "insert_race", "no_torn_values", "history_zipfian"])
def test_conformance_on_the_example_plugin(monkeypatch, check):
    from cluster.correctness.conformance import run_suite
    monkeypatch.syspath_prepend(str(PLUGIN_DIR))
    (out,) = run_suite(EXAMPLE, only=[check])
    assert out.passed, out.detail


def test_a_get_that_skips_its_checksum_returns_torn_values_co_located(monkeypatch):
    """lock-ht overwrites records in place and GETs read them without the lock: multi-line
    transfers land line by line (shm/landing.py), so a GET meets a WRITE halfway and only the
    checksum tells. Co-located, hence the same on every run: with the checksum the history
    is linearizable and torn reads were retried; without it a GET returns bytes no write produced.
    The heavy history (values up to 1000 B, 16 lines) is the one that tears reliably: with 48 B
    values, two lines, the uniform history of this seed stopped tearing once a verb posted after a
    multi-line WRITE of its QP saw all of it (docs/fabric.md, "Ordering rules")."""
    from cluster.correctness.conformance import run_suite
    monkeypatch.syspath_prepend(str(PLUGIN_DIR))
    (good,) = run_suite(LOCKHT, only=["history_heavy"], heavy=True)
    assert good.passed, good.detail
    (bad,) = run_suite(LOCKHT, only=["history_heavy"], options={"fault": "skip-checksum"}, heavy=True)
    assert not bad.passed and "wrote" in bad.detail, bad.detail


# -- (c) the CLI, from outside the repo, with PYTHONPATH -------------------------------------------------

def test_dmrack_check_heavy_catches_lock_ht_skipping_its_checksum(tmp_path):
    """``dmrack check --heavy`` from outside the package: lock-ht passes; with
    ``fault=skip-checksum`` the torn values (values up to 1000 B, 16 lines) are caught by the
    heavy history's conformance check, a co-located rack and so the same on every run. The process
    stress, a rack of processes that the OS interleaves, catches them on most runs but not all (a CI
    run of 2026-11-30 found its history linearizable); when it does, it names the value."""
    r = _dmrack("check", "--system", LOCKHT, "--heavy", "--json", str(tmp_path / "ok.json"), cwd=tmp_path,
                pythonpath=PLUGIN_DIR, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    r = _dmrack("check", "--system", LOCKHT, "--heavy", "--option", "fault=skip-checksum", "--no-shrink", "--json",
                str(tmp_path / "bad.json"), cwd=tmp_path, pythonpath=PLUGIN_DIR, timeout=300)
    verdict = json.loads((tmp_path / "bad.json").read_text())
    assert r.returncode == 1 and not verdict["passed"], r.stdout
    failed = {c["name"]: c["detail"] for c in verdict["suite"] if not c["passed"]}
    assert "history_heavy" in failed and "wrote" in failed["history_heavy"], failed
    if verdict["stress"] == "illegal":
        assert "NOT linearizable" in r.stdout and "which no operation on key" in r.stdout


def test_dmrack_check_on_the_example_plugin(tmp_path):
    r = _dmrack("check", "--system", EXAMPLE, "--quick", cwd=tmp_path, pythonpath=PLUGIN_DIR, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.startswith(f"PASS: {EXAMPLE}: 9 conformance checks, process stress linearizable")


def test_dmrack_run_a_rack_of_processes_with_the_example_plugin(tmp_path):
    r = _dmrack("run", str(PLUGIN_DIR / "toyht.toml"), "--no-dashboard", "--json", str(tmp_path / "r.json"),
                cwd=tmp_path, pythonpath=PLUGIN_DIR, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "system toy-ht" in r.stdout or EXAMPLE in r.stdout
    assert (tmp_path / "r.json").exists()


def test_dmrack_systems_lists_a_named_plugin(tmp_path):
    r = _dmrack("systems", "--json", EXAMPLE, cwd=tmp_path, pythonpath=PLUGIN_DIR)
    assert r.returncode == 0, r.stderr
    rows = {x["name"]: x for x in json.loads(r.stdout)}
    assert rows[EXAMPLE]["source"] == f"module:Class {EXAMPLE}" and rows["race"]["source"] == "built-in"


# -- (d) one-line errors from the CLI -------------------------------------------------------------------------

def test_cli_load_errors_are_one_line_exit_2(tmp_path, monkeypatch):
    pkg = _package(tmp_path, monkeypatch, RACE_COPY)
    (tmp_path / pkg / "broken.py").write_text("import os\nx = 1 / 0\n")
    for args, needles in [
        (["check", "--system", f"{pkg}.broken:X"], [f"module '{pkg}.broken' does not import", "ZeroDivisionError"]),
        (["check", "--system", f"{pkg}.ht:NotASystem"], ["not a subclass of nodes.systems.api.System"]),
        (["systems", f"{pkg}.ht:Clash"], ["named 'race', which is a built-in system"]),
        (["run", str(Path(ROOT) / "examples" / "minimal.toml"), "--set", f"system.name={pkg}.nope:X"],
         ["system.name", f"module '{pkg}.nope' does not import"]),
    ]:
        assert_one_line_exit_2(_dmrack(*args, cwd=tmp_path, pythonpath=tmp_path), *needles)


TOO_BIG = """
    from nodes.systems.race import RaceSystem

    class Greedy(RaceSystem):
        name = "greedy-ht"

        @classmethod
        def setup(cls, fabric, memory_nodes, options, capacity):
            fabric.allocate(memory_nodes[0], 1 << 40)          # more than any memory node has
"""


def test_a_plugin_setup_that_does_not_fit_is_one_line(tmp_path, monkeypatch):
    _package(tmp_path, monkeypatch, TOO_BIG)
    pkg = next(p.name for p in tmp_path.iterdir() if p.name.startswith("tmpsys_"))
    r = _dmrack("run", str(Path(ROOT) / "examples" / "minimal.toml"), "--no-dashboard", "--set",
                f"system.name={pkg}.ht:Greedy", cwd=tmp_path, pythonpath=tmp_path)
    assert_one_line_exit_2(r, "memory exhausted")


WARMUP_ONLY = """
    from nodes.systems.api import SystemGaveUp
    from nodes.systems.race import RaceSystem

    class Picky(RaceSystem):
        name = "picky-ht"

        @classmethod
        def setup(cls, fabric, memory_nodes, options, capacity):
            if capacity < 5000:                                  # the supervisor's small warm-up rack
                raise SystemGaveUp(f"picky-ht: capacity {capacity} is too small")
            return super().setup(fabric, memory_nodes, options, capacity)
"""


def test_a_setup_error_in_the_warm_up_rack_is_one_line(tmp_path, monkeypatch):
    """The supervisor builds the rack, then a small co-located warm-up rack of the same system
    (cluster/supervisor.py warm_up): a setup that fails only there is one line too, exit 2."""
    _package(tmp_path, monkeypatch, WARMUP_ONLY)
    pkg = next(p.name for p in tmp_path.iterdir() if p.name.startswith("tmpsys_"))
    r = _dmrack("run", str(Path(ROOT) / "examples" / "minimal.toml"), "--no-dashboard", "--set",
                f"system.name={pkg}.ht:Picky", cwd=tmp_path, pythonpath=tmp_path)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "(warm-up)" in r.stderr and "is too small" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert "Traceback" not in r.stdout + r.stderr


def test_the_example_declares_its_entry_point(monkeypatch):
    """``pip install -e examples/plugin`` would register toy-ht under the dmrack.systems group."""
    import tomllib
    data = tomllib.loads((PLUGIN_DIR / "pyproject.toml").read_text())
    eps = data["project"]["entry-points"][registry.ENTRY_POINT_GROUP]
    monkeypatch.syspath_prepend(str(PLUGIN_DIR))
    assert eps == {"toy-ht": EXAMPLE, "lock-ht": LOCKHT, "chain-kv": "toyht.chainkv:ChainKV"}
    assert get_system(EXAMPLE).name == "toy-ht" and get_system(eps["chain-kv"]).name == "chain-kv"
    assert get_system(LOCKHT).name == "lock-ht"


# -- docs/adding-a-system.md: its commands and its entry point are the ones that work -------------------

def _guide_blocks(lang: str) -> list[str]:
    import re
    text = (Path(ROOT) / "docs" / "adding-a-system.md").read_text()
    return re.findall(rf"```{lang}\n(.*?)```", text, re.S)


def test_the_guides_entry_point_is_the_example_packages():
    (toml,) = _guide_blocks("toml")
    pyproject = (PLUGIN_DIR / "pyproject.toml").read_text()
    for line in toml.strip().splitlines():
        assert line.strip() in pyproject, line


def test_the_guides_commands_run_as_written():
    """Every line of the guide's ``sh`` block, run from the repository as a user would (``dmrack``
    is ``python -m cluster.cli``; ``VAR=value`` prefixes go to the environment)."""
    import shlex
    (block,) = _guide_blocks("sh")
    lines = [ln for ln in block.strip().splitlines() if ln.strip() and not ln.startswith("#")]
    assert len(lines) >= 2
    for line in lines:
        words = shlex.split(line)
        env = {}
        while "=" in words[0] and not words[0].startswith("-"):
            k, v = words.pop(0).split("=", 1)
            env[k] = str(Path(ROOT) / v) if k == "PYTHONPATH" else v
        assert words[0] == "dmrack", line
        r = dmrack(*words[1:], env=env, cwd=ROOT, timeout=300)
        assert r.returncode == 0, (line, r.stdout[-2000:], r.stderr[-2000:])


def test_the_guides_python_is_the_examples_code_or_runs(monkeypatch, capsys):
    """A python block of the guide that starts with an import runs as written; any other is an
    excerpt of the example plugin: each of its code lines (comments aside) is a line of it."""
    source = {ln.split("#")[0].strip() for f in (PLUGIN_DIR / "toyht").glob("*.py")
              for ln in f.read_text().splitlines()}
    monkeypatch.syspath_prepend(str(PLUGIN_DIR))
    ran = 0
    for block in _guide_blocks("python"):
        if block.startswith(("from ", "import ")):
            exec(compile(block, "docs/adding-a-system.md", "exec"), {})
            ran += 1
            continue
        for line in block.splitlines():
            code = line.split("#")[0].strip()
            assert not code or code in source, f"not in examples/plugin/toyht: {line!r}"
    # the check example, and the server-actor example (it defines a system; tests/test_actors.py runs one)
    assert ran == 2 and "history_heavy" in capsys.readouterr().out
