"""The floors of docs/architecture.md, checked by import-linter (issue 42).

The contracts live in pyproject.toml (``[tool.importlinter]``): ``cluster`` above ``nodes`` above
``workloads`` above ``shm``; inside ``shm`` the simulation core (``shm/sim/``) below the device
models that use it; ``workloads`` using only the standard-library leaves of ``shm``; devices,
services, actors and the core importing no system; and no cycle between sibling modules or packages
anywhere, imports inside functions included. The first test runs the contracts on the tree; the
others show that they bite: the same contracts on a copy of the tree with one deliberate upward
import, or one cycle, fail and name the offending line."""
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("shm", "workloads", "nodes", "cluster")
LINT = "from importlinter.cli import lint_imports_command; lint_imports_command()"   # = lint-imports


def lint(root: Path) -> subprocess.CompletedProcess:
    """``lint-imports`` with the contracts of ``root/pyproject.toml`` on the packages under ``root``."""
    env = dict(os.environ, PYTHONPATH=str(root))
    return subprocess.run([sys.executable, "-c", LINT], cwd=root, env=env,
                          capture_output=True, text=True, timeout=120)


def _copy_tree(dst: Path) -> Path:
    for pkg in PACKAGES:
        shutil.copytree(ROOT / pkg, dst / pkg, ignore=shutil.ignore_patterns("__pycache__", "*.toml",
                                                                               "*.json", "*.csv"))
    shutil.copy(ROOT / "pyproject.toml", dst / "pyproject.toml")
    return dst


def test_the_tree_keeps_every_contract():
    done = lint(ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 broken" in done.stdout


@pytest.mark.parametrize("probe, imported, contract", [
    # a lazy upward import: the fabric reaching into the rack
    ("shm/_probe_upward.py", "def f():\n    import cluster.rack\n",
     "shm is not allowed to import cluster"),
    # the event core reaching up into the verbs that sit on it
    ("shm/sim/_probe_core.py", "from shm import verbs\n",
     "shm.sim is not allowed to import shm.verbs"),
    # a workload using the fabric
    ("workloads/_probe_fabric.py", "import shm.fabric\n",
     "workloads is not allowed to import shm.fabric"),
])
def test_a_deliberate_upward_import_fails(tmp_path, probe, imported, contract):
    root = _copy_tree(tmp_path)
    (root / probe).write_text(imported)
    done = lint(root)
    assert done.returncode == 1, done.stdout + done.stderr
    assert contract in done.stdout
    assert probe.replace("/", ".").removesuffix(".py") in done.stdout   # the line is named


def test_a_cycle_fails(tmp_path):
    root = _copy_tree(tmp_path)
    # RACE's client imports the API; the API importing RACE back closes a cycle
    api = root / "nodes/systems/api.py"
    api.write_text(api.read_text() + "\n\ndef _probe():\n    import nodes.systems.race\n")
    assert "from nodes.systems.api import" in (root / "nodes/systems/race/client.py").read_text()
    done = lint(root)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "No cycles are allowed in nodes.systems" in done.stdout
