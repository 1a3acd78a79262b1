"""docs/architecture.md is true of the tree: every name it gives exists, and no tracked file cites
sources by paths users do not have. (Its floors are import-linter contracts in pyproject.toml,
checked by tests/test_layers.py.)

The page names files and definitions in one convention, backticked paths from the repository
root: `shm/nic.py`, a folder `nodes/systems/`, a definition `shm/nic.py:model_post` or a method
`shm/coro.py:VerbBatch.sync`. The first test reads every such name and checks that the file or
folder exists and, for a definition, that the file defines it (read with :mod:`ast`, nothing is
imported). A renamed function fails here until the page follows.

The last test is review item 8 of issue 42: sources were cited by paths of a folder outside the
repository (``shared/seeds/...``, ``shared/research/...``, ``CALIBRATION.md``) that users do not
have. Every tracked file outside ``tests/`` is searched for such paths.
"""

from __future__ import annotations

import ast
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "architecture.md"

#: A backticked name of the page that is a path: a folder ending in "/", or a file with one of
#: these suffixes, optionally followed by ":Name" or ":Class.method".
_NAME = re.compile(r"^(?P<path>[A-Za-z0-9_.\-/]+?(?:/|\.py|\.toml|\.md))(?::(?P<attr>[A-Za-z_][\w.]*))?$")


def doc_text() -> str:
    return DOC.read_text()


def named_paths(text: str) -> list[tuple[str, str | None]]:
    """Every ``(path, definition or None)`` the page names in backticks, in order."""
    out = []
    for m in re.finditer(r"`([^`\s]+)`", text):
        n = _NAME.match(m.group(1))
        if n and "/" in n.group("path"):
            out.append((n.group("path"), n.group("attr")))
    return out


def _defines(tree: ast.Module, dotted: str) -> bool:
    """Whether the module defines ``Name`` or ``Class.member`` (a def, class or assignment)."""
    body = tree.body
    for part in dotted.split("."):
        found = None
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == part:
                found = node
            elif isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == part for t in node.targets):
                found = node
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == part:
                found = node
        if found is None:
            return False
        body = getattr(found, "body", [])
    return True


def test_every_named_file_and_definition_exists():
    names = named_paths(doc_text())
    assert len(names) >= 50, f"docs/architecture.md names only {len(names)} paths: is the convention still `path/file.py`?"
    missing = []
    for path, attr in names:
        p = ROOT / path
        if path.endswith("/"):
            if not p.is_dir():
                missing.append(f"{path}: no such folder")
            continue
        if not p.is_file():
            missing.append(f"{path}: no such file")
            continue
        if attr is not None:
            if not path.endswith(".py"):
                missing.append(f"{path}:{attr}: only a Python file can name a definition")
            elif not _defines(ast.parse(p.read_text(), str(p)), attr):
                missing.append(f"{path}:{attr}: {path} does not define {attr}")
    missing = list(dict.fromkeys(missing))          # a name the page gives twice, once
    assert not missing, "docs/architecture.md names what does not exist:\n  " + "\n  ".join(missing)


def test_get_path_names_a_function_at_every_hop():
    """The GET's path is a numbered list, each hop naming at least one definition of a file."""
    section = doc_text().split("## One GET", 1)[1].split("\n## ", 1)[0]
    hops = re.split(r"^\d+\. ", section, flags=re.M)[1:]
    assert len(hops) >= 8, f"the GET's path has {len(hops)} hops, expected about eight or more"
    for i, hop in enumerate(hops, 1):
        assert any(attr for _, attr in named_paths(hop)), f"hop {i} names no `file.py:function`: {hop[:80]!r}"


# -- review item 8: sources by paths users do not have ------------------------------------------
#: Paths of a folder outside the repository that sources were once cited by.
OUTSIDE_PATHS = re.compile(r"shared/(?:seeds|research)|\.\./shared/|/work/shared|\bseeds/\d{3}_[0-9a-f]+"
                           r"|\bresearch/[\w-]+\.md|CALIBRATION\.md|DESIGN\.md")

#: Matches left on purpose, each with why; the test fails when one is gone, so the list shrinks.
KNOWN = {
    ("cluster/experiments/bench_verbs.py", '_RDMA_BENCH_SEQ = "rdma_bench atomics-sequencer (ConnectX-3), CALIBRATION.md"'):
        "a row's source string in `dmrack bench verbs` JSON output; changing it changes output (issue 42 is "
        "behaviour-preserving), so the lead decides",
}


def tracked_files() -> list[Path]:
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
        files = [ROOT / p for p in out.decode().split("\0") if p]
    except (OSError, subprocess.CalledProcessError):
        files = [p for p in ROOT.rglob("*") if p.is_file() and ".git" not in p.parts]
    return [f for f in files if f.is_file() and f.relative_to(ROOT).parts[0] != "tests"]


def test_no_source_is_cited_by_a_path_outside_the_repository():
    found = []
    left = dict(KNOWN)
    for f in tracked_files():
        try:
            text = f.read_text()
        except UnicodeDecodeError:
            continue                    # images
        rel = f.relative_to(ROOT).as_posix()
        for no, line in enumerate(text.splitlines(), 1):
            if OUTSIDE_PATHS.search(line):
                key = (rel, line.strip())
                if key in left:
                    left.pop(key)
                else:
                    found.append(f"{rel}:{no}: {line.strip()[:110]}")
    assert not found, ("cite papers by title, venue, section and figure, not by a path users do not have:\n  "
                       + "\n  ".join(found))
    assert not left, f"known exceptions no longer in the tree (remove them from KNOWN): {sorted(left)}"


@pytest.mark.parametrize("line, hit", [
    ("FlexKV (its text is /work/shared/seeds/003_e575dbeb3d96bb46.txt, §4.2)", True),
    ("as summarised in `../shared/research/next-systems.md` §2c", True),
    ("# Published numbers (see CALIBRATION.md)", True),
    ("FlexKV §4.2, \"Rank-Level Displacement Score\", Figure 6", False),
    ("a shared-memory segment of the rack", False),
])
def test_outside_path_pattern(line, hit):
    assert bool(OUTSIDE_PATHS.search(line)) is hit
