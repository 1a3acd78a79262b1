"""No module imports another module's private names (issue 42: "no imports of another module's
privates"). A name that starts with one underscore is its module's own: a second module that needs
it gets a public name (documented where it is defined), so a change to the first module cannot
break the second unseen. The event core's privates used as attributes have their own, stricter
guard (tests/test_event_core_api.py)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("shm", "nodes", "cluster", "workloads", "scripts")


def private_imports(root: Path = ROOT) -> list[str]:
    found = []
    for folder in PACKAGES:
        for path in sorted((root / folder).rglob("*.py")):
            tree = ast.parse(path.read_text(), str(path))
            for node in ast.walk(tree):
                if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in PACKAGES:
                    for alias in node.names:
                        if alias.name.startswith("_") and not alias.name.startswith("__"):
                            found.append(f"{path.relative_to(root)}:{node.lineno}: from {node.module} import {alias.name}")
    return found


def test_no_module_imports_another_modules_private_names():
    assert private_imports() == []


def test_the_guard_sees_a_private_import(tmp_path):
    (tmp_path / "shm").mkdir()
    (tmp_path / "shm" / "a.py").write_text("from shm.b import _hidden\n")
    for folder in PACKAGES[1:]:
        (tmp_path / folder).mkdir()
    assert private_imports(tmp_path) == ["shm/a.py:1: from shm.b import _hidden"]
