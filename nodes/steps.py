"""The steps of a scenario: one type per action, from the scenario file to the nodes that run it.

A scenario file's ``[[step]]`` tables are parsed (``cluster/scenario.py``) into these frozen
dataclasses, one per action (:class:`LoadStep`, :class:`RunStep`, :class:`SetStep`,
:class:`KillStep`, :class:`RestartStep`, :class:`SleepStep`); the rack
(``cluster.rack.compile_scenario``) checks them against the system and fills in what the file may
leave to it (a load's count and whether it is a bulk load), and the plan it hands the manager
(``nodes/manager.py``) and the compute nodes (``nodes/compute.py``) is a list of the same steps.
Both dispatch on the step's type (``match``, ``isinstance``). An earlier design lowered the steps
to one record with a string ``action`` and every action's fields, filled by ``getattr``: a new
field had to be added in three places, and a misspelt action string was a silent no-op.

They live here, below ``cluster``, because the nodes run them and ``nodes`` imports nothing from
``cluster`` (the layers' contract, pyproject.toml); ``cluster.scenario`` re-exports every name.
They are plain data, picklable: a rack of processes sends the plan to every node process.

A step's ``index`` is its 1-based position in the file (or in the default steps), as a reader
counts; the plan holds the steps in that order, so a step's 0-based position in the plan, which
the manager's messages and the stats plane carry, is ``index - 1``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from shm.messages import show_toml

__all__ = ["NODE_KNOBS", "Step", "LoadStep", "RunStep", "SetStep", "KillStep", "RestartStep", "SleepStep",
           "ACTIONS"]

# Knobs a set step may change besides profile keys: how many of the configured threads/coroutines of
# each compute node issue requests from then on (the rest idle). They can only go down from the
# configured count, since the resources (QPs, buffers) are created at start.
NODE_KNOBS = ("threads", "coroutines")


def _ns(ms: float | None) -> int:
    return int(round(ms * 1e6)) if ms else 0


@dataclass(frozen=True)
class Step:
    """One step. ``index`` is its 1-based position in the file (or in the default steps)."""

    index: int
    action: ClassVar[str] = ""       # the action's name, as the file writes it

    def describe(self, spec=None) -> str:  # pragma: no cover - every subclass overrides
        """One human line; ``spec`` (a ``cluster.spec.RackSpec``, optional) lets a step show
        numbers it takes from the rack."""
        return f"step {self.index}: {self.action}"

    @property
    def label(self) -> str:  # pragma: no cover - every subclass overrides
        """The step as the event log, the dashboard and the results name it."""
        return self.action

    @property
    def duration_ns(self) -> int:
        """Virtual ns the step lasts by itself (run, sleep); 0: it ends when its work is done, or,
        for a run, when the rack is stopped."""
        return 0


@dataclass(frozen=True)
class LoadStep(Step):
    """Insert ``count`` keys of workload ``workload`` (a key of spec.workloads); None: its recordcount.
    ``bulk``: True writes them straight into the memory nodes (the system's ``bulk_load``), False
    inserts them one by one through the system's client, None (the file says nothing) lets the rack
    choose: a bulk load when the structure is still empty (the first load step, no run before it)
    and the system has one, inserts otherwise. A bulk load is the default because loading is
    not what a study measures, and per-key inserts of millions of keys take hours of real time
    (a Sherman tree also grows from one root leaf, so they are slow in virtual time too). In the
    rack's plan, both are filled in (``cluster.rack.compile_scenario``)."""

    workload: str
    count: int | None = None
    bulk: bool | None = None
    action: ClassVar[str] = "load"

    def describe(self, spec=None) -> str:
        n = f"{self.count:,}" if self.count is not None else "recordcount"
        w = spec.workloads.get(self.workload) if spec is not None else None
        if self.count is None and w is not None and isinstance(w.overrides.get("recordcount"), int):
            n = f"{w.overrides['recordcount']:,} (recordcount)"
        how = {True: "bulk-load", False: "insert", None: "load"}[self.bulk]
        return f"step {self.index}: {how} {n} keys of workload {self.workload}"

    @property
    def label(self) -> str:
        n = f"{self.count:,}" if self.count is not None else "recordcount"
        return f"{'bulk-load' if self.bulk else 'load'} {n} records ({self.workload})"


@dataclass(frozen=True)
class RunStep(Step):
    """Run workload ``workload`` (a key of spec.workloads) for ``duration_ms`` virtual ms
    (None: until stopped, which only the last step may do)."""

    workload: str
    duration_ms: float | None = None
    action: ClassVar[str] = "run"

    def describe(self, spec=None) -> str:
        d = f"for {self.duration_ms:g} ms" if self.duration_ms is not None else "until stopped"
        return f"step {self.index}: run workload {self.workload} {d}"

    @property
    def label(self) -> str:
        how = f"for {self.duration_ms:g} ms" if self.duration_ms else "until stopped"
        return f"run {self.workload} {how}"

    @property
    def duration_ns(self) -> int:
        return _ns(self.duration_ms)


@dataclass(frozen=True)
class SetStep(Step):
    """Change a knob for the following steps: a profile key (``link.gbps``) or a NODE_KNOBS entry."""

    knob: str
    value: Any  # int | float (| bool for a boolean profile key)
    action: ClassVar[str] = "set"

    @property
    def is_profile_knob(self) -> bool:
        return self.knob not in NODE_KNOBS

    def describe(self, spec=None) -> str:
        what = f"active {self.knob} per compute node" if not self.is_profile_knob else self.knob
        return f"step {self.index}: set {what} = {show_toml(self.value)}"

    @property
    def label(self) -> str:
        # a number as %g (``set link.gbps = 100``), a boolean as the file writes it (``= false``)
        value = show_toml(self.value) if isinstance(self.value, bool) else f"{self.value:g}"
        return f"set {self.knob} = {value}"


@dataclass(frozen=True)
class KillStep(Step):
    """SIGKILL one node process (never the manager, which runs the steps)."""

    node: str
    action: ClassVar[str] = "kill"

    def describe(self, spec=None) -> str:
        return f"step {self.index}: kill node {self.node}"

    @property
    def label(self) -> str:
        return f"kill {self.node}"


@dataclass(frozen=True)
class RestartStep(Step):
    """Bring back a compute node an earlier kill step killed: a new process for it joins the
    rack's clock at the current virtual time, runs the system's setup for the node again (its
    server actors, its clients) on fresh memory, and takes part in the following steps."""

    node: str
    action: ClassVar[str] = "restart"

    def describe(self, spec=None) -> str:
        return f"step {self.index}: restart node {self.node}"

    @property
    def label(self) -> str:
        return f"restart {self.node}"


@dataclass(frozen=True)
class SleepStep(Step):
    """Let ``duration_ms`` virtual ms pass with no load."""

    duration_ms: float
    action: ClassVar[str] = "sleep"

    def describe(self, spec=None) -> str:
        return f"step {self.index}: sleep {self.duration_ms:g} ms"

    @property
    def label(self) -> str:
        return f"sleep {self.duration_ms:g} ms"

    @property
    def duration_ns(self) -> int:
        return _ns(self.duration_ms)


#: action name (as the file writes it) -> its step type
ACTIONS = {cls.action: cls for cls in (LoadStep, RunStep, SetStep, KillStep, RestartStep, SleepStep)}
