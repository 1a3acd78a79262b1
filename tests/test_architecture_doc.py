"""docs/architecture.md is true of the tree: every name it gives exists, its import exceptions are
the ones the tree has, and no tracked file cites sources by paths users do not have.

The page names files and definitions in one convention, backticked paths from the repository
root: `shm/nic.py`, a folder `nodes/systems/`, a definition `shm/nic.py:model_post` or a method
`shm/coro.py:Coroutine.sync`. The first test reads every such name and checks that the file or
folder exists and, for a definition, that the file defines it (read with :mod:`ast`, nothing is
imported). A renamed function fails here until the page follows.

Its section "Known exceptions" lists the upward imports (a lower floor importing a higher one;
floors shm < workloads < nodes < cluster) and the import cycles between modules. The second test
measures both again with :mod:`ast` over every import statement, including those inside functions
and excluding ``if TYPE_CHECKING:`` blocks, and compares the sets both ways: an import that the
page does not list fails, and so does a listed one that is gone (the page must drop the line).

The last test is review item 8 of issue 42: sources were cited by paths of a folder outside the
repository (``shared/seeds/...``, ``shared/research/...``, ``CALIBRATION.md``) that users do not
have. Every tracked file outside ``tests/`` is searched for such paths.
"""

from __future__ import annotations

import ast
import re
import subprocess
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "architecture.md"

#: The four packages and their floors, bottom first.
FLOORS = {"shm": 0, "workloads": 1, "nodes": 2, "cluster": 3}

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


# -- the imports, measured ---------------------------------------------------------------------
def _modules() -> dict[str, Path]:
    """Module name -> file, for every module of the four packages."""
    mods = {}
    for top in FLOORS:
        for f in sorted((ROOT / top).rglob("*.py")):
            parts = list(f.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            mods[".".join(parts)] = f
    return mods


def _type_checking(node: ast.If) -> bool:
    return "TYPE_CHECKING" in ast.unparse(node.test)


def import_graph() -> tuple[dict[str, Path], dict[str, set[str]]]:
    """Module -> the dmrack modules it imports, at module level or inside functions.

    ``from X import a`` imports ``X.a`` when that is a module, else ``X``; ``import X.Y`` imports
    ``X.Y`` (the longest prefix that is a module). Parent packages run as a side effect are not
    counted, as import-linter does not count them."""
    mods = _modules()

    def resolve(name: str) -> str | None:
        parts = name.split(".")
        for i in range(len(parts), 0, -1):
            cand = ".".join(parts[:i])
            if cand in mods:
                return cand
        return None

    graph: dict[str, set[str]] = defaultdict(set)
    for mod, path in mods.items():
        tree = ast.parse(path.read_text(), str(path))
        package = mod.split(".") if path.name == "__init__.py" else mod.split(".")[:-1]
        skip = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.If) and _type_checking(node):
                skip.update(id(n) for stmt in node.body for n in ast.walk(stmt))
        for node in ast.walk(tree):
            if id(node) in skip:
                continue
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package[:len(package) - (node.level - 1)]
                    src = ".".join(base + ([node.module] if node.module else []))
                else:
                    src = node.module or ""
                targets = [f"{src}.{a.name}" if f"{src}.{a.name}" in mods else src for a in node.names]
            else:
                continue
            for t in targets:
                r = resolve(t)
                if r is not None and r != mod:
                    graph[mod].add(r)
    return mods, graph


def _rel(mods: dict[str, Path], mod: str) -> str:
    return mods[mod].relative_to(ROOT).as_posix()


def measured_upward(mods, graph) -> set[tuple[str, str]]:
    return {(_rel(mods, a), _rel(mods, b)) for a, targets in graph.items() for b in targets
            if FLOORS[a.split(".")[0]] < FLOORS[b.split(".")[0]]}


def measured_cycles(mods, graph) -> set[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out = set()
    counter = 0
    for root in sorted(mods):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.get(root, ()))))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.add(frozenset(_rel(mods, m) for m in comp))
    return out


def listed_exceptions(text: str) -> tuple[set[tuple[str, str]], set[frozenset[str]]]:
    section = text.split("### Known exceptions", 1)[1].split("\n## ", 1)[0]
    upward, cycles = set(), set()
    for line in section.splitlines():
        paths = [p for p, attr in named_paths(line) if attr is None and p.endswith(".py")]
        if line.startswith("- upward:"):
            assert len(paths) >= 2, f"an upward line names importer and imported: {line!r}"
            upward.add((paths[0], paths[1]))
        elif line.startswith("- cycle:"):
            assert len(paths) >= 3 and paths[0] == paths[-1], f"a cycle line goes round to its start: {line!r}"
            cycles.add(frozenset(paths))
    return upward, cycles


def test_known_exceptions_are_the_measured_ones():
    mods, graph = import_graph()
    upward, cycles = listed_exceptions(doc_text())
    measured_up, measured_cyc = measured_upward(mods, graph), measured_cycles(mods, graph)
    problems = [f"upward import not in the page: {a} -> {b}" for a, b in sorted(measured_up - upward)]
    problems += [f"listed upward import is gone (drop its line): {a} -> {b}" for a, b in sorted(upward - measured_up)]
    problems += [f"import cycle not in the page: {sorted(c)}" for c in measured_cyc - cycles]
    problems += [f"listed cycle is gone or changed (fix its line): {sorted(c)}" for c in cycles - measured_cyc]
    assert not problems, "docs/architecture.md, \"Known exceptions\", disagrees with the tree:\n  " + \
        "\n  ".join(problems)


def test_the_measurement_sees_lazy_imports():
    """The graph counts an import inside a function: shm/rpc.py's lazy import of the systems API
    is an edge (while it exists), as is the experiments' lazy import of the rack."""
    mods, graph = import_graph()
    assert "cluster.rack" in graph["cluster.experiments.sherman"]
    tree = ast.parse((ROOT / "cluster/experiments/sherman.py").read_text())
    lazy = [n for f in ast.walk(tree) if isinstance(f, ast.FunctionDef) for n in ast.walk(f)
            if isinstance(n, ast.ImportFrom) and n.module == "cluster.rack"]
    assert lazy, "cluster/experiments/sherman.py no longer imports the rack inside a function: pick another example"


# -- review item 8: sources by paths users do not have ------------------------------------------
#: Paths of a folder outside the repository that sources were once cited by.
OUTSIDE_PATHS = re.compile(r"shared/(?:seeds|research)|\.\./shared/|/work/shared|\bseeds/\d{3}_[0-9a-f]+"
                           r"|\bresearch/[\w-]+\.md|CALIBRATION\.md|DESIGN\.md")

#: Matches left on purpose, each with why; the test fails when one is gone, so the list shrinks.
KNOWN = {
    ("cluster/experiments/verbs.py", '_RDMA_BENCH_SEQ = "rdma_bench atomics-sequencer (ConnectX-3), CALIBRATION.md"'):
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
