"""The one registry style: a declared table of names, each naming where its entry lives.

dmrack has three registries, and they are written one way:

* the systems (``nodes/systems/__init__.py``: ``BUILTIN``, plus plugins by entry point or
  ``module:Class``),
* the experiments of ``dmrack bench`` and ``dmrack reproduce``
  (``cluster/experiments/registry.py``: ``EXPERIMENTS``),
* the conformance checks (``cluster/correctness/conformance.py``: ``CHECKS``, ``HEAVY_CHECKS``).

Each is a literal dict, declared once in its registry's module, from a name to its entry, in
the order listings show them. An entry that lives in another module, and is costly to import (a
system pulls in its compiled kernels; an experiment the fabric), is a ``"module:attr"`` *target*
string, resolved here on first use: listing the names imports nothing, asking for one imports only
its module, and one broken module cannot stop the others from loading. An entry that sits beside
its table (a conformance check) is the object itself. The table is then the whole registry at a
glance: no import order to get right, no module that registers twice or from outside, and adding
an entry (or moving its module) is one line that a test checks resolves.

Earlier the three were a dict of targets with its own import code, a scan of a package's modules
for a constant, and a decorator that filled a table on import.

Standard library only, like ``shm/messages.py``, so that every floor can use it.
"""

from __future__ import annotations

import importlib

from shm.messages import clip, one_line

__all__ = ["TargetError", "is_target", "resolve", "load"]


class TargetError(ValueError):
    """A target that cannot be resolved: malformed, a module that does not import, no such
    attribute. One line, without the registry's own prefix (the registry adds it)."""


def is_target(name: str) -> bool:
    """``name`` looks like ``module:attr``."""
    module, sep, attr = name.partition(":")
    return bool(sep and module and attr)


def resolve(target: str):
    """The object ``module:attr`` names (``attr`` may be dotted), imported now; an error of the
    import or lookup propagates as it is (a registry's own, declared entry is the tree's code: a
    failure is a bug to see whole)."""
    module, _, attr = target.partition(":")
    obj = importlib.import_module(module)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


def load(target: str, form: str = "module:attr"):
    """The object ``target`` names, for a target a user gave (a plugin): every failure is one
    :class:`TargetError` line naming the module and the error. ``form``: how messages spell a
    target (``module:Class``)."""
    module, _, attr = target.partition(":")
    if not module or not attr or ":" in attr:
        raise TargetError(f"{clip(target)!r} is not of the form {form}")
    try:
        mod = importlib.import_module(module)
    except Exception as e:                  # ImportError, SyntaxError, or whatever the module raised
        raise TargetError(f"module {clip(module)!r} does not import: {type(e).__name__}: {one_line(e)}") from None
    obj = mod
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise TargetError(f"module {clip(module)!r} has no {clip(attr)!r}") from None
    return obj
