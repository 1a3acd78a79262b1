"""No module reads, writes or calls another module's private members (issue 42: "no imports of
another module's privates"; the project's rule "touch no other module's privates").

tests/test_no_private_imports.py catches ``from m import _name``; this guard catches the same
thing done through an object: ``host._posted``, ``te._cpu(...)``, ``getattr(x, "_name")``. A
second module that needs a member gets a public name for it, documented where it is defined, so a
change inside the first module cannot break the second unseen.

The scan reads the source with ``ast`` (no types), so it works by names: a member name starting
with one underscore is *defined* by a module that declares it (``def _f``, ``class _C``,
``self._x = ...``, ``cls._x = ...``, a class- or module-level ``_x = ...``, a name in
``__slots__``); an attribute ``x._name`` taken from anything but ``self``/``cls`` (or
``getattr``/``setattr``/``hasattr`` with the name as a literal) is an *offence* when ``_name`` is
defined by other modules of the tree and not by the module itself. A name the module defines too
is taken to be its own (a false negative the names cannot tell apart); a name no module defines
is a library's (numba's, numpy's) and not this test's business. A subclass using its base's
members through ``self`` is not an offence here. ``namedtuple``'s public API is spelled with an
underscore (``_replace``, ``_asdict``, ``_fields``, ``_make``) and allowed. The event core's
privates have their own, stricter guard (tests/test_event_core_api.py).
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("shm", "nodes", "cluster", "workloads", "scripts")
NAMEDTUPLE_API = {"_replace", "_asdict", "_fields", "_make", "_field_defaults"}
ACCESSORS = {"getattr", "setattr", "hasattr", "delattr"}
SELF = {"self", "cls"}

# (module, member): uses that must stay, each with its reason. Empty: every crossing has a public name.
ALLOWED: dict[tuple[str, str], str] = {}


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _assigned_names(target) -> list:
    """The names and attributes an assignment target binds (tuples unpacked)."""
    if isinstance(target, (ast.Tuple, ast.List)):
        return [n for t in target.elts for n in _assigned_names(t)]
    if isinstance(target, ast.Starred):
        return _assigned_names(target.value)
    return [target]


def definitions(tree: ast.AST) -> set[str]:
    """The private member names a module declares (see the module docstring)."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        targets = (node.targets if isinstance(node, ast.Assign)
                   else [node.target] if isinstance(node, (ast.AnnAssign, ast.AugAssign)) else [])
        for target in targets:
            for t in _assigned_names(target):
                if isinstance(t, ast.Name):
                    names.add(t.id)
                elif isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id in SELF:
                    names.add(t.attr)
                if isinstance(t, ast.Name) and t.id == "__slots__" and isinstance(node, ast.Assign):
                    names.update(e.value for e in getattr(node.value, "elts", ())
                                 if isinstance(e, ast.Constant) and isinstance(e.value, str))
    return {n for n in names if _private(n)}


def uses(tree: ast.AST):
    """``(line, name, text)`` for every private member this module takes from another object."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr):
            if not (isinstance(node.value, ast.Name) and node.value.id in SELF):
                yield node.lineno, node.attr, ast.unparse(node)
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ACCESSORS
              and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant)
              and isinstance(node.args[1].value, str) and _private(node.args[1].value)):
            base = node.args[0]
            if not (isinstance(base, ast.Name) and base.id in SELF):
                yield node.lineno, node.args[1].value, ast.unparse(node)


def offences(sources: dict[str, str], allowed=ALLOWED) -> list[str]:
    """``file:line: text (defined in ...)`` for every use in ``sources`` (path -> source text) of a
    private member that only other modules of ``sources`` define."""
    trees = {path: ast.parse(text, path) for path, text in sources.items()}
    own = {path: definitions(tree) for path, tree in trees.items()}
    defined_in = defaultdict(set)
    for path, names in own.items():
        for name in names:
            defined_in[name].add(path)
    found = []
    for path, tree in trees.items():
        for line, name, text in uses(tree):
            if name in NAMEDTUPLE_API or name in own[path] or not defined_in[name]:
                continue
            if (path, name) in allowed:
                continue
            found.append(f"{path}:{line}: {text} (defined in {', '.join(sorted(defined_in[name]))})")
    return sorted(found, key=lambda f: (f.split(":")[0], int(f.split(":")[1])))


def tree_sources(root: Path = ROOT) -> dict[str, str]:
    return {path.relative_to(root).as_posix(): path.read_text()
            for folder in PACKAGES for path in sorted((root / folder).rglob("*.py"))}


def test_no_module_touches_another_modules_privates():
    assert offences(tree_sources()) == []


def test_every_allowed_use_still_exists():
    """An allow-list entry whose use is gone must go too (ALLOWED is empty today)."""
    used = set()
    sources = tree_sources()
    for path, text in sources.items():
        used.update((path, name) for _line, name, _text in uses(ast.parse(text, path)))
    assert set(ALLOWED) <= used


def test_the_guard_sees_a_planted_offence():
    sources = {
        "shm/verbs.py": "class Host:\n    def __init__(self):\n        self._posted = 0\n"
                        "    def _drop(self):\n        return self._posted\n",
        "cluster/node.py": "def heartbeat(host):\n    n = host._posted\n    host._drop()\n"
                           "    return getattr(host, '_posted'), n._replace(a=1), host._unknown_to_the_tree\n",
        "nodes/own.py": "class Own:\n    __slots__ = ('_posted',)\n    def f(self, other):\n"
                        "        return other._posted\n",
    }
    assert offences(sources) == [
        "cluster/node.py:2: host._posted (defined in nodes/own.py, shm/verbs.py)",
        "cluster/node.py:3: host._drop (defined in shm/verbs.py)",
        "cluster/node.py:4: getattr(host, '_posted') (defined in nodes/own.py, shm/verbs.py)",
    ]
    # an explicit exception silences exactly its (module, member)
    assert offences(sources, {("cluster/node.py", "_posted"): "planted"}) == [
        "cluster/node.py:3: host._drop (defined in shm/verbs.py)"]


def test_the_guard_sees_a_planted_offence_in_a_copy_of_the_tree():
    """The real tree with one line appended to a real module: the scan names it."""
    sources = tree_sources()
    sources["cluster/wiring.py"] += "\n\ndef _planted(host):\n    return host._db_shares\n"
    line = sources["cluster/wiring.py"].count("\n")
    assert offences(sources) == [f"cluster/wiring.py:{line}: host._db_shares (defined in shm/verbs.py)"]
