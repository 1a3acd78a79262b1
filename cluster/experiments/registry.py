"""The experiments' registry: ``dmrack bench NAME`` and ``dmrack reproduce NAME`` find an experiment
by name in one declared table, :data:`EXPERIMENTS`, so a new paper is one new module and one line
here.

An experiment module declares itself with one module-level constant, usually made by
:func:`cluster.experiments.rows.reproduction` or :func:`~cluster.experiments.rows.bench` from its
parts, setup, figures and title (they write ``run``)::

    EXPERIMENT = reproduction("smart", "SMART", title="SMART (ASPLOS'24): ...", parts=EXPERIMENTS,
                              side_by_side=SIDE_BY_SIDE, setup=setup, figures=FIGURES, ...)

or, when its ``run`` is its own (``bench ycsb``: parts per system, a trace), as an
:class:`Experiment` directly; the table names it by kind and name as a ``module:attr`` target
(``"cluster.experiments.reproduce_smart:EXPERIMENT"``). That is the style of every registry of dmrack (the
systems' ``BUILTIN``, the conformance checks' ``CHECKS``; ``shm/targets.py`` says why): the table
is the whole registry at a glance, there is no import order to get right and no module that
registers twice or from outside, and a module that is never asked for is never imported. A
module moved or renamed is its line here changed; the registry's test resolves every line and
checks that each declares the kind and name it is listed under, and that no module of the package
declares an experiment the table lacks.

Lookups are lazy because the modules are not cheap to import (the verbs bench pulls in the fabric
and its compiled kernels, about half a second): importing this package or ``cluster.cli`` imports
none of them, so ``dmrack --help`` and every other subcommand stay as fast as before. :func:`find`
imports the one module the table names, and an unknown name's message lists the table's names
without importing anything; :func:`available` (listings: ``--help`` of bench and reproduce,
``dmrack sensitivity``) imports them all.

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

from dataclasses import dataclass
from typing import Callable

from shm.targets import resolve

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
    """The table lists no experiment of this kind and name; the message lists those it does."""


#: kind -> name -> the "module:attr" of the Experiment ``dmrack <kind> <name>`` runs, in the order
#: listings show them. A new bench or paper adds one line.
EXPERIMENTS = {
    "bench": {
        "devices": "cluster.experiments.devices:EXPERIMENT",
        "speed": "cluster.experiments.speed:EXPERIMENT",
        "verbs": "cluster.experiments.bench_verbs:EXPERIMENT",
        "ycsb": "cluster.experiments.bench_ycsb:EXPERIMENT",
    },
    "reproduce": {
        "dolphin": "cluster.experiments.dolphin:EXPERIMENT",
        "dpastore": "cluster.experiments.dpastore:EXPERIMENT",
        "flexkv": "cluster.experiments.reproduce_flexkv:EXPERIMENT",
        "pd3": "cluster.experiments.pd3:EXPERIMENT",
        "sherman": "cluster.experiments.sherman:EXPERIMENT",
        "smart": "cluster.experiments.reproduce_smart:EXPERIMENT",
    },
}


def _declared(kind: str, name: str) -> Experiment:
    """The Experiment the table lists under ``kind``, ``name``, imported now and checked."""
    target = EXPERIMENTS[kind][name]
    got = resolve(target)
    if not isinstance(got, Experiment):
        raise TypeError(f"{__name__}.EXPERIMENTS[{kind!r}][{name!r}] = {target!r}: not an Experiment "
                        f"(a {type(got).__name__})")
    if (got.kind, got.name) != (kind, name):
        raise ValueError(f"{__name__}.EXPERIMENTS[{kind!r}][{name!r}] = {target!r} declares "
                         f"{got.kind} {got.name!r}")
    return got


def available(kind: str | None = None) -> list[Experiment]:
    """Every experiment the table lists (of ``kind``), sorted by kind and name. Imports their modules."""
    return [_declared(k, name) for k in sorted(EXPERIMENTS) if kind is None or k == kind
            for name in sorted(EXPERIMENTS[k])]


def find(kind: str, name: str) -> Experiment:
    """The experiment ``dmrack <kind> <name>`` runs; :class:`UnknownExperiment` (one line listing
    what is available) if the table lists none."""
    if kind not in KINDS:
        raise ValueError(f"unknown kind of experiment {kind!r}; choose from {', '.join(KINDS)}")
    listed = EXPERIMENTS.get(kind, {})
    if name not in listed:
        raise UnknownExperiment(f"unknown {KINDS[kind]} {name!r}; available: {', '.join(sorted(listed))}")
    return _declared(kind, name)
