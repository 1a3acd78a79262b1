"""The experiments' registry: ``dmrack bench NAME`` and ``dmrack reproduce NAME`` find an experiment
by name among the modules of this package, so a new paper is one new module and no edit elsewhere.

An experiment module declares itself with one module-level constant, usually made by
:func:`cluster.experiments.rows.reproduction` or :func:`~cluster.experiments.rows.bench` from its
parts, setup, figures and title (they write ``run``)::

    EXPERIMENT = reproduction("smart", "SMART", title="SMART (ASPLOS'24): ...", parts=EXPERIMENTS,
                              side_by_side=SIDE_BY_SIDE, setup=setup, figures=FIGURES, ...)

or, when its ``run`` is its own (``bench ycsb``: parts per system, a trace), as an
:class:`Experiment` directly, and nothing registers it: :func:`find` and :func:`available` look
for ``EXPERIMENT`` in the modules of ``cluster.experiments``. Why a constant found by looking rather than a decorator that
fills a table on import: the table is then only ever what the package holds (no import order to
get right, no module that registers twice or from outside), and a module that is never asked for
is never imported.

Lookups are lazy because the modules are not cheap to import (the verbs bench pulls in the fabric
and its compiled kernels, about half a second): importing this package or ``cluster.cli`` imports
none of them, so ``dmrack --help`` and every other subcommand stay as fast as before. :func:`find`
first imports the module named like the experiment (``reproduce sherman`` -> ``sherman.py``), or
like the command where that name is taken elsewhere in dmrack (``reproduce smart`` ->
``reproduce_smart.py``), the convention every module here follows, and only if that module does
not declare it imports them all; :func:`available` (listings, an unknown name) imports them all. Modules whose name starts
with an underscore are private and never imported by a lookup; the shared helpers (``rows``,
``pointpool``) are imported like any module and simply declare nothing.

``run`` is called as ``run(only=..., quick=..., json_path=..., console=..., **options)``: ``only``
a list of the names in ``parts`` or None for all of them, ``options`` the keywords named in
``options`` that the command line fills (``jobs``: fresh racks side by side, from ``dmrack
reproduce --jobs``; ``system``: the system to measure, from ``dmrack bench --system``; ``trace``:
``(path, shm.sim.trace.TraceBounds)`` from ``--trace``, for an experiment that can record a
timeline of its first point). ``run``
checks ``only`` itself (a ValueError is one line and exit status 2 at the command line) and
returns the rows (:class:`cluster.experiments.rows.Row`) it printed and wrote.

An experiment also declares its ``setup`` (``setup(quick) -> dict``: its racks, for the run record,
:mod:`cluster.experiments.provenance`) and its ``figures`` (:mod:`cluster.experiments.figures`),
which ``--plot``, ``dmrack plot``, ``dmrack report`` and ``dmrack sensitivity`` read from here.

A reproduction also declares its ``headline``: the few parts (names of ``parts``) that carry its
main claims and are cheap (about a minute each with ``--quick`` on two cores), and the shipped
``profiles`` its racks are built on. ``dmrack sensitivity`` (:mod:`cluster.experiments.sensitivity`)
runs the headline again for every knob those profiles list as an assumption, at other values.
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass
from typing import Callable

# kind -> the word for one experiment of that kind, in messages ("unknown paper 'x'")
KINDS = {"bench": "suite", "reproduce": "paper"}

# the keywords the command line can fill, besides only/quick/json_path/console
OPTIONS = ("jobs", "system", "trace")


@dataclass(frozen=True)
class Experiment:
    """One experiment: ``dmrack <kind> <name>`` runs ``run``."""
    kind: str                       # "bench" or "reproduce": the subcommand that runs it
    name: str                       # the word after the subcommand
    title: str                      # one line for listings and --help
    run: Callable                   # run(only=, quick=, json_path=, console=, **options) -> rows
    parts: tuple[str, ...] = ()     # what --only takes, in the order they run
    options: tuple[str, ...] = ()   # further keywords of run() the command line fills (OPTIONS)
    headline: tuple[str, ...] = ()  # the cheap parts that carry the main claims (dmrack sensitivity)
    profiles: tuple[str, ...] = ()  # the shipped profiles its racks use
    setup: Callable | None = None   # setup(quick) -> dict: its racks, for the run record
    figures: tuple = ()             # its figures (cluster.experiments.figures.Figure)

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"experiment {self.name!r}: kind must be one of {', '.join(KINDS)}, got {self.kind!r}")
        unknown = [o for o in self.options if o not in OPTIONS]
        if unknown:
            raise ValueError(f"experiment {self.name!r}: unknown option {unknown[0]!r}; "
                             f"the command line fills {', '.join(OPTIONS)}")
        stray = [h for h in self.headline if h not in self.parts]
        if stray:
            raise ValueError(f"experiment {self.name!r}: headline part {stray[0]!r} is not one of its parts "
                             f"({', '.join(self.parts)})")


class UnknownExperiment(ValueError):
    """No module of the package declares this kind and name; the message lists those that do."""


PACKAGE = __name__.rpartition(".")[0]          # cluster.experiments


def _module_names() -> list[str]:
    """The public modules of the package, by name, without importing them."""
    package = importlib.import_module(PACKAGE)
    return sorted(m.name for m in pkgutil.iter_modules(package.__path__)
                  if not m.ispkg and not m.name.startswith("_") and m.name != "registry")


def _declared(module_name: str) -> Experiment | None:
    got = getattr(importlib.import_module(f"{PACKAGE}.{module_name}"), "EXPERIMENT", None)
    if got is not None and not isinstance(got, Experiment):
        raise TypeError(f"{PACKAGE}.{module_name}.EXPERIMENT must be an Experiment, got {type(got).__name__}")
    return got


def available(kind: str | None = None) -> list[Experiment]:
    """Every experiment the package declares (of ``kind``), by name. Imports every module."""
    found: dict[tuple[str, str], str] = {}
    out = []
    for module_name in _module_names():
        exp = _declared(module_name)
        if exp is None:
            continue
        key = (exp.kind, exp.name)
        if key in found:
            raise ValueError(f"{exp.kind} {exp.name!r} is declared twice: by {PACKAGE}.{found[key]} "
                             f"and {PACKAGE}.{module_name}")
        found[key] = module_name
        if kind is None or exp.kind == kind:
            out.append(exp)
    return sorted(out, key=lambda e: (e.kind, e.name))


def find(kind: str, name: str) -> Experiment:
    """The experiment ``dmrack <kind> <name>`` runs; :class:`UnknownExperiment` (one line listing
    what is available) if no module declares it."""
    if kind not in KINDS:
        raise ValueError(f"unknown kind of experiment {kind!r}; choose from {', '.join(KINDS)}")
    modules = _module_names()
    for module_name in (name, f"{kind}_{name}"):    # the convention: the module is named like it
        if module_name in modules:
            exp = _declared(module_name)
            if exp is not None and exp.kind == kind and exp.name == name:
                return exp
    for exp in available(kind):
        if exp.name == name:
            return exp
    raise UnknownExperiment(f"unknown {KINDS[kind]} {name!r}; available: "
                            f"{', '.join(e.name for e in available(kind))}")
