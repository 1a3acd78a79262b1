"""Scenarios: a rack spec plus the steps the manager runs on it, read from one TOML file.

There is one file format. ``dmrack up`` runs the built-in default rack with its default steps;
``dmrack run FILE`` runs a file that holds the rack tables of :mod:`cluster.spec` (all optional)
and, optionally, a list of ``[[step]]`` tables::

    [[step]]  action = "load"   count = N, workload = NAME, bulk = true|false   (all optional)
    [[step]]  action = "run"    workload = NAME, duration_ms = T  (T required except on the last step)
    [[step]]  action = "set"    knob = "link.gbps" | "threads" | "coroutines", value = V
    [[step]]  action = "kill"   node = "cn1"
    [[step]]  action = "restart" node = "cn1"   (a compute node an earlier kill step killed)
    [[step]]  action = "sleep"  duration_ms = T

A file without steps gets the default ones: load the default workload's keys (if ``run.load``),
then run it for ``run.duration_ms`` (0: until stopped). One format for "a rack" and "an
experiment" means a rack file is already a runnable experiment, and an experiment is a rack file
with a few lines more; there is nothing to keep in step between two formats.

Steps are parsed into frozen dataclasses, one per action (:class:`LoadStep`, :class:`RunStep`,
:class:`SetStep`, :class:`KillStep`, :class:`RestartStep`, :class:`SleepStep`, declared in
``nodes/steps.py`` and re-exported here), all plain data like the spec: the rack's plan is a list
of the same steps, which the manager and the compute nodes receive (pickled, in a rack of
processes) and dispatch on by type. A step refers to workloads
and nodes by name, and keeps the name: ``step.workload`` is a key of ``scenario.spec.workloads``,
which holds every workload the scenario can run -- the declared ones and, under their letter, the
presets that steps name directly (``workload = "b"``: YCSB-B over the default workload's keys). So
the rack builds one workload object per name and steps stay small plain records.

Names are checked against the spec, so that everything a scenario can get wrong -- an unknown
node, a knob that does not exist or a value out of its range, a run that never ends followed by
more steps, a bad YCSB property -- fails before anything is spawned, with the same one-line
``file: key = value: why`` messages as the spec (``step[3].node = "cn9": ...``; steps are numbered
from 1 as a reader counts them in the file, as every position in a message is: shm.messages.item).

:func:`warmup_scenario` derives from a spec the tiny co-located rack that compiles (or loads from
numba's cache) every jitted function the real rack will use, before node processes fork.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from cluster.spec import (
    DEFAULT_SOURCE, DEFAULT_WORKLOAD_OVERRIDES, RackSpec, SpecError, WorkloadSpec, WORKLOAD_PRESETS, show_toml, strip_override_label,
    preset_workload, read_toml, spec_from_dict, workloads_available,
)
from nodes.steps import (ACTIONS, NODE_KNOBS, KillStep, LoadStep, RestartStep, RunStep, SetStep,
                         SleepStep, Step)
from shm.messages import did_you_mean

__all__ = [
    "with_rack_tables",
    "SpecError",
    "Step",
    "LoadStep",
    "RunStep",
    "SetStep",
    "KillStep",
    "RestartStep",
    "SleepStep",
    "Scenario",
    "ACTIONS",
    "NODE_KNOBS",
    "load_scenario",
    "parse_scenario",
    "scenario_from_dict",
    "default_scenario",
    "default_steps",
    "check_workloads",
    "check_history",
    "check_capacity",
    "table_capacity",
    "HISTORY_VALUE_SIZE",
    "warmup_scenario",
    "WARMUP_RECORDS",
    "WARMUP_RUN_MS",
]

# ----------------------------------------------------------------------------- steps

# The step types live with the nodes that run them (nodes/steps.py: nodes import nothing from
# cluster); this module parses them and re-exports every name, where scenario code finds them.

# action -> (required fields, optional fields), as written in the file.
_FIELDS = {
    "load": ((), ("count", "workload", "bulk")),
    "run": ((), ("workload", "duration_ms")),
    "set": (("knob", "value"), ()),
    "kill": (("node",), ()),
    "restart": (("node",), ()),
    "sleep": (("duration_ms",), ()),
}


# ----------------------------------------------------------------------------- scenario


@dataclass(frozen=True)
class Scenario:
    spec: RackSpec
    steps: tuple  # tuple[Step, ...]
    source: str  # the file as given, or "<default>"

    @property
    def until_stopped(self) -> bool:
        """Whether the last step runs until Ctrl-C / --duration rather than ending by itself."""
        return bool(self.steps) and isinstance(self.steps[-1], RunStep) and self.steps[-1].duration_ms is None

    def workloads_used(self) -> list[str]:
        """The names of the workloads the steps refer to, each once, in order of first use."""
        out: list[str] = []
        for s in self.steps:
            w = getattr(s, "workload", None)
            if w is not None and w not in out:
                out.append(w)
        return out

    def describe(self) -> list[str]:
        """Human lines for the dashboard and the event log: the rack, then one line per step."""
        return self.spec.describe() + [s.describe(self.spec) for s in self.steps]


def default_steps(spec: RackSpec) -> tuple:
    """[load the default workload (if run.load)] + [run it for run.duration_ms (None: until stopped)]."""
    steps: list[Step] = []
    # a transactional workload's tables are loaded when the rack is built (cluster/rack.py)
    if spec.run.load and not spec.workloads["default"].transactional:
        steps.append(LoadStep(index=1, workload="default"))
    steps.append(RunStep(index=len(steps) + 1, workload="default", duration_ms=spec.run.duration_ms))
    return tuple(steps)


def _resolve_workload(spec: RackSpec, label: str, key: str, name: Any, added: dict) -> str:
    """The spec.workloads key a step's ``workload`` names; a preset letter is added to ``added``
    (as that preset over the default workload's data) the first time a step uses it."""
    if not isinstance(name, str):
        raise SpecError(f"{label}: {key} = {show_toml(name)}: must be a workload name (a string)")
    if name in spec.workloads:
        return name
    letter = name.lower()
    if letter in WORKLOAD_PRESETS:
        if letter not in added:
            added[letter] = preset_workload(spec.workload, letter, key)
        return letter
    known = list(spec.workloads) + list(WORKLOAD_PRESETS)
    raise SpecError(f"{label}: {key} = {show_toml(name)}: unknown workload; known: {', '.join(known)}"
                    f"{did_you_mean(name, known)}")


def _duration(label: str, key: str, v: Any, *, allow_zero: bool) -> float:
    ok = not isinstance(v, bool) and isinstance(v, (int, float)) and v == v and v not in (float("inf"),)
    if not ok or v < 0 or (v == 0 and not allow_zero):
        raise SpecError(f"{label}: {key} = {show_toml(v)}: must be a number of virtual milliseconds > 0")
    return float(v)


def _parse_steps(spec: RackSpec, label: str, raw: Any) -> tuple[tuple, dict]:
    """The steps, and the preset workloads they name directly (letter -> WorkloadSpec)."""
    if not isinstance(raw, list) or not all(isinstance(t, dict) for t in raw):
        raise SpecError(f"{label}: step = {show_toml(raw)}: steps must be an array of tables, written [[step]]")
    if not raw:
        raise SpecError(f"{label}: step = []: no steps; leave [[step]] out for the default steps")
    from shm.profile import ProfileError, schema_fields, with_overrides

    profile_knobs = [k for k, _, _ in schema_fields()]
    nodes = spec.node_names()
    roles = {n.name: n.role for n in spec.nodes()}
    profile = spec.profile  # the profile as earlier set steps leave it, so each value is checked in context
    killed: dict[str, int] = {}
    added: dict[str, WorkloadSpec] = {}
    steps: list[Step] = []
    last = len(raw)
    for i, t in enumerate(raw, start=1):
        where = f"step[{i}]"
        action = t.get("action")
        if action is None:
            raise SpecError(f"{label}: {where}: missing action (one of {', '.join(ACTIONS)})")
        if action not in ACTIONS:
            raise SpecError(f"{label}: {where}.action = {show_toml(action)}: unknown action; one of "
                            f"{', '.join(ACTIONS)}{did_you_mean(str(action), ACTIONS)}")
        required, optional = _FIELDS[action]
        for k in t:
            if k != "action" and k not in required + optional:
                takes = ", ".join(required + optional)
                raise SpecError(f"{label}: {where}.{k} = {show_toml(t[k])}: not a field of a {action!r} step "
                                f"(it takes {takes}){did_you_mean(k, required + optional)}")
        for k in required:
            if k not in t:
                raise SpecError(f"{label}: {where}: a {action!r} step needs {k}")

        if action == "load":
            w = _resolve_workload(spec, label, f"{where}.workload", t.get("workload", "default"), added)
            count = t.get("count")
            if count is not None and (type(count) is not int or count < 1):
                raise SpecError(f"{label}: {where}.count = {show_toml(count)}: must be an integer >= 1")
            bulk = t.get("bulk")
            if bulk is not None and type(bulk) is not bool:
                raise SpecError(f"{label}: {where}.bulk = {show_toml(bulk)}: must be true or false")
            if bulk and any(isinstance(s, LoadStep) for s in steps):
                raise SpecError(f"{label}: {where}.bulk = true: only the first load step may be a bulk load "
                                f"(it builds an empty structure); load these keys with inserts")
            steps.append(LoadStep(index=i, workload=w, count=count, bulk=bulk))
        elif action == "run":
            w = _resolve_workload(spec, label, f"{where}.workload", t.get("workload", "default"), added)
            d = t.get("duration_ms", 0)
            duration = _duration(label, f"{where}.duration_ms", d, allow_zero=True)
            if duration == 0 and i != last:
                shown = f"{where}.duration_ms = {show_toml(d)}" if "duration_ms" in t else f"{where}.duration_ms"
                raise SpecError(f"{label}: {shown}: only the last step may run until stopped; give a "
                                f"duration_ms > 0")
            steps.append(RunStep(index=i, workload=w, duration_ms=duration or None))
        elif action == "set":
            knob, value = t["knob"], t["value"]
            if not isinstance(knob, str) or (knob not in NODE_KNOBS and knob not in profile_knobs):
                known = list(NODE_KNOBS) + profile_knobs
                raise SpecError(f"{label}: {where}.knob = {show_toml(knob)}: unknown knob; a profile key such as "
                                f"link.gbps, or threads, coroutines{did_you_mean(str(knob), known)}")
            if knob in NODE_KNOBS:
                top = spec.compute.threads if knob == "threads" else spec.compute.coroutines
                if type(value) is not int or not 1 <= value <= top:
                    raise SpecError(f"{label}: {where}.value = {show_toml(value)}: active {knob} must be an integer "
                                    f"from 1 to compute.{knob} = {top}")
            else:
                if isinstance(value, (str, list, dict)):
                    raise SpecError(f"{label}: {where}.value = {show_toml(value)}: {knob} takes a number")
                try:
                    profile = with_overrides(profile, {knob: value})
                except ProfileError as e:
                    raise SpecError(f"{label}: {where}.value = {show_toml(value)}: {strip_override_label(e.errors[0])}") from None
            steps.append(SetStep(index=i, knob=knob, value=value))
        elif action == "kill":
            node = t["node"]
            if node == "mgr":
                raise SpecError(f"{label}: {where}.node = \"mgr\": the manager runs the steps and cannot be killed")
            if not isinstance(node, str) or node not in nodes:
                raise SpecError(f"{label}: {where}.node = {show_toml(node)}: no such node; the rack has "
                                f"{', '.join(n for n in nodes if n != 'mgr')}{did_you_mean(str(node), nodes)}")
            if node in killed:
                raise SpecError(f"{label}: {where}.node = {show_toml(node)}: already killed by step[{killed[node]}]")
            killed[node] = i
            steps.append(KillStep(index=i, node=node))
        elif action == "restart":
            node = t["node"]
            shown = f"{label}: {where}.node = {show_toml(node)}"
            if not isinstance(node, str) or node not in nodes:
                raise SpecError(f"{shown}: no such node; the rack has "
                                f"{', '.join(n for n in nodes if n != 'mgr')}{did_you_mean(str(node), nodes)}")
            role = roles[node]
            if role != "compute":
                what = "the manager runs the steps" if role == "manager" else f"{node} is a {role} node"
                raise SpecError(f"{shown}: {what}; only a compute node can be restarted")
            if node not in killed:
                raise SpecError(f"{shown}: {node} is not dead at this step; restart a node an earlier "
                                f"kill step killed")
            del killed[node]                 # alive again: a later step may kill it once more
            steps.append(RestartStep(index=i, node=node))
        elif action == "sleep":
            steps.append(SleepStep(index=i, duration_ms=_duration(label, f"{where}.duration_ms", t["duration_ms"],
                                                                  allow_zero=False)))
    return tuple(steps), added


def check_workloads(scenario: Scenario) -> dict | None:
    """Build every workload of the scenario (declared or named by a step), so that a bad YCSB
    property fails now, before anything is spawned; returns them (name -> built workload).

    Skipped (None) while the workloads package is not installed (see
    cluster.spec.workloads_available).
    """
    if not workloads_available():
        return None
    return {name: w.build() for name, w in scenario.spec.workloads.items()}


# Keys a system is sized for beyond the workloads' own count: slack for the insert sequence's
# rounding, so that a table sized exactly never fills on the last key.
CAPACITY_SLACK = 1024


def table_capacity(steps, workloads: Mapping[str, Any]) -> int:
    """Keys the system must hold (``System.setup``'s ``capacity``): the most of the keys loaded
    by the load steps and any workload's recordcount, plus the most keys a workload may insert,
    plus CAPACITY_SLACK. ``workloads``: name -> built ``workloads.ycsb.CoreWorkload``. One
    formula for the check below and for the rack (``cluster.rack.compile_scenario``)."""
    loaded = sum(getattr(s, "count", None) or workloads[s.workload or "default"].recordcount
                 for s in steps if s.action == "load")
    inserts = max((w.expected_new_keys for w in workloads.values()), default=0)
    return int(max(loaded, max((w.recordcount for w in workloads.values()), default=0)) + inserts) + CAPACITY_SLACK


def check_capacity(scenario: Scenario, built: Mapping[str, Any] | None = None) -> None:
    """Refuse a scenario whose records cannot fit its memory nodes, now rather than after the rack
    is built (where ``System.setup`` or the load would fail). The need is the system's own
    estimate (``System.footprint``, a lower bound), compared with the memory nodes' total.
    ``built``: the workloads :func:`check_workloads` built (built here if not given)."""
    if built is None:
        built = check_workloads(scenario)
    # Nothing to size without the workloads package, or with a test's stand-in workloads.
    if built is None or not all(hasattr(w, "recordcount") for w in built.values()):
        return
    from cluster.units import format_size
    from nodes.systems import get_system
    spec = scenario.spec
    capacity = table_capacity(scenario.steps, built)
    key_size = max(w.key_size for w in built.values())
    value_size = max(w.value_size for w in built.values())
    cls = get_system(spec.system.name)
    options = cls.check_options(dict(spec.system.options), f"{scenario.source}: [system]")
    need = cls.footprint(options, capacity, key_size, value_size)
    have = spec.memory.count * spec.memory.memory_bytes
    if need <= have:
        return
    where, shown, lower = _capacity_culprit(scenario, built, cls, options, capacity, key_size, value_size, have)
    raise SpecError(f"{scenario.source}: {where} = {shown}: system {cls.name!r} needs at least "
                    f"{format_size(need)} of memory-node memory for {capacity:,} records of {key_size} B keys "
                    f"and {value_size} B values, but the rack's memory nodes have {format_size(have)} "
                    f"({spec.memory.count} x {format_size(spec.memory.memory_bytes)}); raise memory.memory or "
                    f"memory.count, or lower {lower}")


def _capacity_culprit(scenario, built, cls, options, capacity, key_size, value_size, have) -> tuple:
    """``(key, value, what to lower)`` for the message of :func:`check_capacity`: the key at fault.
    The value (or key) size when the records would fit with the default rack's 8-byte ones (a
    ``valuesize = 1e9`` is the mistake, not the 10,000 records), else the largest load count or
    recordcount."""
    spec = scenario.spec
    small = {k: DEFAULT_WORKLOAD_OVERRIDES[k] for k in ("keysize", "valuesize")}
    for size, prop in (("valuesize", "value_size"), ("keysize", "key_size")):
        name, w = max(built.items(), key=lambda nw: getattr(nw[1], prop))
        sizes = {"key_size": key_size, "value_size": value_size, prop: small[size]}
        if getattr(w, prop) > small[size] and cls.footprint(options, capacity, sizes["key_size"],
                                                             sizes["value_size"]) <= have:
            if size == "valuesize" and "valuesize" not in w.properties:
                size = "fieldlength"              # the value is fieldcount x fieldlength
            return f"{spec.workloads[name].table}.{size}", show_toml(w.properties.get(size, getattr(w, prop))), \
                f"the {'value' if prop == 'value_size' else 'key'} size"
    where, count = "workload.recordcount", built["default"].recordcount
    for name, w in built.items():
        if w.recordcount > count:
            where, count = f"{spec.workloads[name].table}.recordcount", w.recordcount
    for s in scenario.steps:
        if s.action == "load" and getattr(s, "count", None) and s.count > count:
            where, count = f"step[{s.index}].count", s.count
    return where, count, "the count"


def with_rack_tables(system, data: dict) -> dict:
    """``data`` (a rack the project builds: conformance rigs, the checks' stress, the PD3 and
    DPA-Store reproductions) with the tables ``system`` needs to run at all (``System.rack_tables``:
    a profile with a DPA, the devices it serves from) merged in; they are requirements, so they win
    over the builder's defaults key by key. Here, with the scenario dicts, so that the correctness
    tools and the experiments both import it downward."""
    need = getattr(system, "rack_tables", None) or {}
    out = {k: dict(v) if isinstance(v, dict) else v for k, v in data.items()}
    for table, keys in need.items():
        out[table] = {**out.get(table, {}), **keys}
    return out


def scenario_from_dict(data: Mapping[str, Any], *, source: str = "<string>", base_dir: str | os.PathLike | None = None,
                       seed: int | None = None, overrides: Mapping[str, Any] | None = None,
                       check: bool = True) -> Scenario:
    """Validate parsed TOML data: the rack tables, then the steps, then (``check``) the workloads."""
    spec = spec_from_dict(data, source=source, base_dir=base_dir, seed=seed, overrides=overrides,
                          extra_tables=("step",))
    if "step" in data:
        steps, added = _parse_steps(spec, source, data["step"])
        if added:
            spec = dataclasses.replace(spec, workloads={**spec.workloads, **added})
    else:
        steps = default_steps(spec)
    scenario = Scenario(spec=spec, steps=steps, source=source)
    if check:
        check_capacity(scenario, check_workloads(scenario))
    return scenario


def parse_scenario(text: str, *, source: str = "<string>", base_dir: str | os.PathLike | None = None,
                   seed: int | None = None, overrides: Mapping[str, Any] | None = None) -> Scenario:
    """A scenario from TOML text (paths relative to ``base_dir``, default the current directory)."""
    import tomllib
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise SpecError(f"{source}: invalid TOML: {e}") from None
    return scenario_from_dict(data, source=source, base_dir=base_dir, seed=seed, overrides=overrides)


def load_scenario(path: str | os.PathLike, *, seed: int | None = None,
                  overrides: Mapping[str, Any] | None = None) -> Scenario:
    """Read and validate a scenario file. ``seed`` (from the command line) wins over ``rack.seed``;
    ``overrides`` set dotted keys before validation (``{"compute.threads": 8}``, see
    :func:`cluster.spec.apply_overrides`). Relative paths inside resolve against the file's directory.
    """
    data = read_toml(path, "scenario")
    return scenario_from_dict(data, source=str(path), base_dir=Path(path).resolve().parent, seed=seed,
                              overrides=overrides)


def rack_scenario(path: str | os.PathLike, *, seed: int | None = None,
                  overrides: Mapping[str, Any] | None = None) -> Scenario:
    """The rack of a scenario file with the default steps (``dmrack up FILE``): its ``[[step]]``
    list is left out, so the rack loads its keys and runs its default workload until stopped
    (``[run] duration_ms`` still bounds it, as for the built-in rack)."""
    data = dict(read_toml(path, "scenario"))
    data.pop("step", None)
    return scenario_from_dict(data, source=str(path), base_dir=Path(path).resolve().parent, seed=seed,
                              overrides=overrides)


def default_scenario(*, seed: int | None = None, duration_ms: float | None = None,
                     overrides: Mapping[str, Any] | None = None, history: bool = False) -> Scenario:
    """The built-in rack with its default steps (``dmrack up``): load, then run YCSB-A.

    ``duration_ms`` (virtual ms) bounds the run step; None or 0 runs until stopped. ``overrides``
    are ``--set`` keys, as for :func:`load_scenario`. ``history`` (``dmrack up --check`` or
    ``--history``): the default values become HISTORY_VALUE_SIZE bytes instead of 8, because a
    recorded operation names the write it saw by the version carried in the value bytes, and 8
    bytes hold only the key id (``workloads.keys``). The default rack is ours to choose, so it
    is sized for what was asked; an explicit ``workload.valuesize`` still wins (and is refused by
    :func:`check_history` if too small). A scenario *file* is taken as written instead.
    """
    merged: dict[str, Any] = {"workload.valuesize": HISTORY_VALUE_SIZE} if history else {}
    if duration_ms is not None:
        merged["run.duration_ms"] = duration_ms
    merged.update(overrides or {})
    return scenario_from_dict({}, source=DEFAULT_SOURCE, seed=seed, overrides=merged)


# Values must hold the 16-byte head (key id, version) of workloads.keys.value_bytes for a history
# to tell writes apart (nodes/history.py).
HISTORY_VALUE_SIZE = 16


def check_history(scenario: Scenario) -> None:
    """Refuse, before anything is built, a scenario whose operations cannot be recorded: every
    workload it defines must have values of at least HISTORY_VALUE_SIZE bytes (nodes/history.py).
    The message names the table and says how to fix it from the command line."""
    for name, w in scenario.spec.workloads.items():
        if w.transactional:
            raise SpecError(f"{scenario.source}: {w.table}: --check and --history record KV operations; a "
                            f"transactional workload's histories are checked by dmrack check --system "
                            f"{scenario.spec.system.name} (serializability)")
        size = w.build().value_size if workloads_available() else None
        if size is not None and size < HISTORY_VALUE_SIZE:
            # A preset letter named by a step inherits its values from [workload]: fix it there.
            table = w.table if w.table.startswith("workload") else "workload"
            raise SpecError(f"{scenario.source}: {table}.valuesize = {size}: recording a history (--check, "
                            f"--history) needs values of at least {HISTORY_VALUE_SIZE} bytes (they carry the "
                            f"version that tells writes apart); add --set {table}.valuesize={HISTORY_VALUE_SIZE}")



# ----------------------------------------------------------------------------- warm-up

# The warm-up rack: enough keys and virtual time for every operation kind of every workload to run
# a few hundred times (so each jitted path is compiled), and no more: it runs in the foreground
# before the real rack starts.
WARMUP_RECORDS = 1000
WARMUP_RUN_MS = 0.2


def _warmup_keyspace(overrides) -> dict:
    """A dense key space (workload property ``keyspace``) wide enough for the warm-up's records."""
    k = overrides.get("keyspace")
    try:
        return {} if k is None or int(k) >= 2 * WARMUP_RECORDS else {"keyspace": 2 * WARMUP_RECORDS}
    except (TypeError, ValueError):
        return {}


def warmup_scenario(spec: RackSpec) -> Scenario:
    """A tiny co-located scenario with ``spec``'s profile, system, options, QP policy and workloads.

    Numba compiles a jitted function on first call in each process; forked node processes would
    each compile the same functions (seconds each) or race to write numba's cache. Running this
    scenario once in the supervisor first compiles every function the rack uses -- the same
    system client, verbs model, QP policy and workload generators -- and fills the cache, so the
    nodes start at once. It keeps the memory sizes (segments are mapped lazily, and a system may
    size its tables by them) but uses one compute node with at most 2 threads x 2 coroutines and
    WARMUP_RECORDS keys, then loads them and runs each workload for WARMUP_RUN_MS virtual ms.
    Nothing is killed (a co-located rack has no processes to kill).
    """
    small = {"recordcount": WARMUP_RECORDS, "operationcount": WARMUP_RECORDS}
    txn = spec.workloads["default"].transactional
    # a transactional workload keeps its parameters (its tables are set up and loaded as the real
    # rack's are; only the run is short)
    workloads = {name: dataclasses.replace(w, overrides={**w.overrides, **small, **_warmup_keyspace(w.overrides)},
                                           table=f"{w.table} (warm-up)") if not w.transactional else w
                 for name, w in spec.workloads.items()}
    compute = dataclasses.replace(spec.compute, count=1, threads=min(2, spec.compute.threads),
                                  coroutines=min(2, spec.compute.coroutines))
    # one compute node: memory nodes on compute nodes' servers would name compute nodes it lacks
    # (the sharing of a NIC changes prices, not the code to compile)
    memory = dataclasses.replace(spec.memory, same_server=False)
    warm = dataclasses.replace(spec, name=f"{spec.name}-warmup", compute=compute, memory=memory, workloads=workloads,
                               on_node_death="stop", run=dataclasses.replace(spec.run, duration_ms=WARMUP_RUN_MS,
                                                                             load=True))
    # Half the keys by the rack's own choice of load (a bulk load, if the real rack's first load
    # step will be one), half by inserts, so both paths are compiled before the nodes fork.
    half = WARMUP_RECORDS // 2
    steps: list[Step] = [LoadStep(index=1, workload="default", count=half),
                         LoadStep(index=2, workload="default", count=WARMUP_RECORDS - half, bulk=False)] \
        if not txn else []
    for name in workloads:
        steps.append(RunStep(index=len(steps) + 1, workload=name, duration_ms=WARMUP_RUN_MS))
    return Scenario(spec=warm, steps=tuple(steps), source=f"{spec.source} (warm-up)")
