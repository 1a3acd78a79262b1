"""Rack specs: the plain-data description of a rack, read from the tables of a scenario file.

A rack is described, not built, here. Like Mininet's ``Topo``, a :class:`RackSpec` is inert data --
node counts and sizes, the hardware profile, the system and its options, the workloads -- and one
object elsewhere (the supervisor) turns it into live node processes. Keeping the description apart
from the machinery has three uses: a spec can be validated completely before a single process or
shared-memory segment exists (a typo fails in milliseconds, not after a minute of loading keys);
it pickles, so every node process receives the same one; and tests, the dashboard and the docs can
read it without starting anything.

Format (see ``docs/rack.md`` for the reference): a TOML file whose tables are all optional --
every missing key takes the value of the built-in default rack -- ::

    [rack]              name, profile, seed, on_node_death
    [profile_overrides] "section.key" = value, applied with shm.profile.with_overrides
    [compute]           count, threads, coroutines, memory, qp_policy, threads_per_qp, connect
    [memory]            count, memory, cores (modelled CPU cores for server actors, default 0), kind
                        ("dram" or "nvm", or one per memory node: persistent memory, docs/nvm.md),
                        same_server (mn<i> on cn<i>'s server, sharing its NIC and PCIe)
    [client]            count, memory
    [manager]           count (exactly 1)
    [system]            name, and every other key is an option of that system
    [workload]          preset or file, and every other key is a YCSB property override; or
                        trace (a Twitter-format CSV) with its own keys (workloads/traces.py)
    [workloads.NAME]    more workloads of the same form
    [run]               duration_ms, load (the default steps of a scenario)

A scenario file adds ``[[step]]`` tables; :mod:`cluster.scenario` reads those and hands the rest to
:func:`spec_from_dict`.

Validation is strict because a rack that starts with a silently wrong value produces silently wrong
numbers: unknown tables and keys are refused (with the closest known name as a suggestion), types
are exact (an integer key takes an integer, not ``2.0`` or ``true``), counts and sizes have ranges,
the profile, the system and its options are checked by their own modules, and the rack must fit in
this machine's memory. Every problem is one :class:`SpecError` whose one-line message names the
file, the dotted key and the bad value -- ``rack.toml: compute.threads = -1: must be an integer
from 1 to 256`` -- because that is the line a user needs to fix it. Only the first problem is
reported: specs are short and each message says exactly where to look.

Paths written in a file (a profile file, a workload file) are relative to that file's directory, so
a scenario and its companions can be moved or run from anywhere together.

The default rack (``default_spec()``) is sized for a 2-core laptop: 2 compute nodes x 4 threads x
4 coroutines (32 concurrent clients, enough to show contention without starving the CPU), 2 memory
nodes of 512 MiB (mapped lazily: only touched pages cost RAM), the ``cx6-200g`` profile, the RACE
hash table, and YCSB-A (zipfian 0.99) over 10,000 keys of 8 bytes (loaded in a few seconds; raise workload.recordcount for bigger tables) with 8-byte values.
"""

from __future__ import annotations

import copy
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

from cluster.units import format_size, parse_size
from shm.profile import ProfileError, list_profiles, load_profile, with_overrides
from shm.messages import clip, did_you_mean, item, show_toml  # noqa: F401 - show_toml re-exported
from shm.profile_schema import Profile
from shm.steering import SteerRule

try:  # Python >= 3.11
    import tomllib
except ModuleNotFoundError:  # pragma: no cover - Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

__all__ = [
    "SpecError",
    "RackSpec",
    "ComputeSpec",
    "MemorySpec",
    "ClientSpec",
    "ManagerSpec",
    "SystemSpec",
    "WorkloadSpec",
    "RunSpec",
    "NodeDecl",
    "TABLES",
    "DEFAULT_SOURCE",
    "MANAGER_MEMORY_BYTES",
    "THREAD_BUFFER_BYTES",
    "WORKLOAD_PRESETS",
    "DATA_SHAPE_KEYS",
    "default_spec",
    "spec_from_dict",
    "read_toml",
    "apply_overrides",
    "parse_override",
    "machine_memory_bytes",
    "workloads_available",
    "inherited_shape",
    "preset_workload",
]


class SpecError(ValueError):
    """A rack spec or scenario that cannot be run. The message is one line: file, key, value, why."""

    def __init__(self, message: str):
        # One line, always: the CLI prints it after "dmrack run: " and the dashboard's event log
        # shows one line per event. Multi-line messages from other modules are joined.
        super().__init__("; ".join(part.strip() for part in str(message).splitlines() if part.strip()))


# ----------------------------------------------------------------------------- limits and defaults

# The source label of the built-in rack (no file).
DEFAULT_SOURCE = "<default>"

# Count ranges. Upper bounds keep a rack on one machine sensible (each node is a process) and within
# what the fabric's address format and tables are sized for; they are not hardware limits.
#: The most modelled cores a memory node may have (``[memory] cores``); 0 keeps it passive.
MAX_MEMORY_CORES = 256
COUNT_RANGES = {"compute": (1, 64), "memory": (1, 16), "client": (0, 64)}
THREADS_RANGE = (1, 256)
COROUTINES_RANGE = (1, 64)

# The manager runs the scenario steps and issues no verbs of its own: it needs a node (a name and a
# clock slot in the fabric) but almost no memory. 64 KiB is the smallest tidy size above the
# fabric's 4 KiB minimum.
MANAGER_MEMORY_BYTES = 64 << 10

# Each modelled thread of a compute node registers one verbs buffer of this size in its node's
# memory (shm.coro.NodeRdma's default), so a compute node must hold threads x this.
THREAD_BUFFER_BYTES = 256 << 10

# The fabric maps at least a page per node and addresses at most 48 bits of offset.
MIN_NODE_MEMORY = 4096
MAX_NODE_MEMORY = 1 << 48

ON_NODE_DEATH = ("stop", "continue")
# YCSB's core workloads A-F, then dmrack's presets for Dolphin's workloads (workloads/properties.py)
WORKLOAD_PRESETS = ("a", "b", "c", "d", "e", "f", "load", "range-only", "range-write")
#: Transactional workloads a [workload] may name (``preset`` or ``kind``), for transactional
#: systems (nodes/systems/txn.py): the names of workloads.tables.TXN_WORKLOADS (declared there,
#: with the class each names; listed here so that a spec can be read without importing them).
TXN_WORKLOADS = ("smallbank", "tatp")

# YCSB properties that fix *which keys exist and how big they are*. Every preset-based workload of a
# scenario inherits these from [workload] unless it sets them itself, so that "run B" after
# "load" addresses the keys that were loaded (same count, same key and value sizes) instead of
# YCSB's defaults.
DATA_SHAPE_KEYS = ("recordcount", "keysize", "valuesize", "fieldcount", "fieldlength", "insertorder",
                   "zeropadding")

# The default rack. Every key of a file falls back to the value here.
DEFAULT_PROFILE = "cx6-200g"
DEFAULT_SEED = 1
DEFAULT_SYSTEM = "race"
DEFAULT_WORKLOAD_PRESET = "a"
# Applied to a preset-based [workload] under the user's own keys. YCSB-A is zipfian already; the
# constant is spelled out so the dashboard shows it. 8-byte keys and values (dmrack extensions of
# the YCSB properties) are what one-sided hash tables such as RACE are measured with.
DEFAULT_WORKLOAD_OVERRIDES = {"recordcount": 10_000, "keysize": 8, "valuesize": 8, "zipfianconstant": 0.99}
DEFAULTS = {
    "compute": {"count": 2, "threads": 4, "coroutines": 4, "memory": 64 << 20, "qp_policy": "per_thread_doorbell",
                "threads_per_qp": None, "connect": "on_first_post"},
    "memory": {"count": 2, "memory": 512 << 20, "cores": 0, "kind": "dram", "same_server": False},
    "client": {"count": 0, "memory": 64 << 20},
    "dpu": {"hosts": [], "cores": None, "memory": 64 << 20},
    "dpa": {"hosts": [], "threads": 16, "memory": 64 << 20},
    "manager": {"count": 1},
    "run": {"duration_ms": 0, "load": True},
}

TABLES = ("rack", "profile_overrides", "compute", "memory", "client", "dpu", "dpa", "steer", "manager", "system",
          "workload", "workloads", "run", "smart")
_TABLE_KEYS = {
    "rack": ("name", "profile", "seed", "on_node_death"),
    "compute": tuple(DEFAULTS["compute"]),
    "memory": tuple(DEFAULTS["memory"]),
    "client": tuple(DEFAULTS["client"]),
    "dpu": tuple(DEFAULTS["dpu"]),
    "dpa": tuple(DEFAULTS["dpa"]),
    "steer": ("node", "port", "port_hi", "target", "mirror"),
    "manager": tuple(DEFAULTS["manager"]),
    "run": tuple(DEFAULTS["run"]),
}


# ----------------------------------------------------------------------------- parsed data


@dataclass(frozen=True)
class NodeDecl:
    """One node process of the rack: its unique name, its role and its host memory in bytes."""

    name: str
    role: str  # "compute" | "memory" | "client" | "dpu" | "dpa" | "manager"
    memory_bytes: int
    host: str | None = None   # a DPU's or DPA's host compute node: they share its NIC
    memory_kind: str = "dram"  # a memory node's: "dram" or "nvm" (persistent memory, docs/nvm.md)
    same_server: bool = False  # with host: on that node's server, its PCIe shared too (memory.same_server)

    def fabric_spec(self):
        """The :class:`shm.fabric.NodeSpec` the fabric is created from (imported here: the fabric
        pulls in numba, which reading a spec does not need)."""
        from shm.fabric import NodeSpec
        return NodeSpec(self.name, self.role, self.memory_bytes, nic_of=self.host, memory_kind=self.memory_kind,
                        same_server=self.same_server)


@dataclass(frozen=True)
class ComputeSpec:
    count: int
    threads: int  # modelled CPU threads per compute node
    coroutines: int  # coroutines per thread
    memory_bytes: int
    qp_policy: str  # one of shm.coro.POLICIES
    threads_per_qp: int | None = None  # multiplexed_qp: threads sharing each QP (None: a pool of 4 QPs)
    connect: str = "on_first_post"  # when the QPs are made: one of shm.coro.CONNECT_ORDERS


@dataclass(frozen=True)
class MemorySpec:
    count: int
    memory_bytes: int
    cores: int = 0   # modelled CPU cores per memory node for server actors (0: passive, the default)
    # what each memory node's memory is, mn0 first: "dram" or "nvm" (persistent memory: the
    # profile's [nvm] table, docs/nvm.md); empty: all DRAM
    kinds: tuple = ()
    # mn<i> runs on cn<i>'s server: one NIC (units, links, atomics) and one PCIe link for both, as
    # testbeds that emulate each server as one compute and one memory node (Sherman's README)
    same_server: bool = False

    def kind_of(self, i: int) -> str:
        """Memory node ``i``'s memory kind."""
        return self.kinds[i] if self.kinds else "dram"


@dataclass(frozen=True)
class ClientSpec:
    count: int
    memory_bytes: int


@dataclass(frozen=True)
class DpuSpec:
    hosts: tuple = ()          # compute node names: one DPU per entry, dpu0, dpu1, ... in this order
    cores: int = 0             # Arm cores each DPU gives its actors
    memory_bytes: int = 64 << 20   # DPU DRAM of each (its segment)


@dataclass(frozen=True)
class DpaSpec:
    hosts: tuple = ()          # compute node names: one DPA per entry, dpa0, dpa1, ...
    threads: int = 16          # hardware threads each DPA runs actors on
    memory_bytes: int = 64 << 20   # DPA memory of each (its segment)


def SteerSpec(node: str, port: int, port_hi: int, target: str, mirror: str | None = None) -> SteerRule:
    """A NIC steering rule of the rack, as the spec's ``[[steer]]`` gives it: datagrams to ``node``
    on ``port``..``port_hi`` land in ``target`` (a node on the same card, or one of its queues), a
    copy in ``mirror``. Kept for plugins written against it (``steering(spec)`` returned these): it
    builds the one steering-rule type, :class:`shm.steering.SteerRule`, which new code uses
    directly."""
    return SteerRule(port, target, port_hi=port_hi, mirror=mirror, spread="port", node=node)


@dataclass(frozen=True)
class ManagerSpec:
    count: int  # always 1 in this version
    memory_bytes: int = MANAGER_MEMORY_BYTES


@dataclass(frozen=True)
class SystemSpec:
    name: str
    options: dict  # every option of the system, defaults filled in by System.check_options
    roles: tuple  # node roles the system uses (System.roles)
    servers: tuple = ()  # roles the system runs server actors on (System.servers, nodes/actors.py)


@dataclass(frozen=True)
class RunSpec:
    duration_ms: float | None  # virtual ms of the default run step; None = until stopped
    load: bool  # whether the default steps load the workload's keys first


@dataclass(frozen=True)
class WorkloadSpec:
    """A YCSB workload as written in the file: a preset letter or a properties file, plus overrides.

    ``source`` is the scenario file's label and ``table`` the dotted place it was written
    (``workload``, ``workloads.hot``, ``step[3]``), so :meth:`build` can say where a bad property is.
    """

    name: str  # "default", a [workloads.NAME] name, or a preset letter used directly in a step
    preset: str | None  # "a".."f" (or a dmrack preset), or None when ``file`` or ``trace`` is given
    file: str | None  # absolute path of a YCSB .properties file, or None
    overrides: dict  # YCSB property -> value (str, int, float or bool), applied over the preset/file
    source: str = DEFAULT_SOURCE
    table: str = "workload"
    trace: str | None = None  # absolute path of a Twitter-format trace (workloads.traces), or None

    @property
    def transactional(self) -> bool:
        """A transactional workload (``preset``/``kind = "smallbank"`` or ``"tatp"``: workloads.smallbank,
        workloads.tatp) for a transactional system (nodes/systems/txn.py), not a YCSB one."""
        return self.preset in TXN_WORKLOADS

    def build(self):
        """The :class:`workloads.ycsb.CoreWorkload`, or a SpecError naming the file and the table.

        Imported here so that specs can be read (and this module imported) without the workloads
        package, e.g. by ``dmrack profiles``-style tools and while that package is being written.
        """
        from workloads.properties import WorkloadError
        from workloads.ycsb import CoreWorkload

        where = f"{self.source}: {self.table}"
        if self.transactional:
            from workloads.tables import txn_workload_class
            try:
                return txn_workload_class(self.preset).from_properties(self.overrides, where)
            except WorkloadError as e:
                raise SpecError(str(e) if where in str(e) else f"{where}: {e}") from None
        if self.trace is not None:
            from workloads.traces import TraceWorkload
            try:
                return TraceWorkload(self.trace, self.overrides, source=where)
            except WorkloadError as e:
                raise SpecError(str(e)) from None
        props = self.properties()
        try:
            if self.file is not None:
                return CoreWorkload.from_file(self.file, props)
            return CoreWorkload.preset(self.preset, props, where)
        except WorkloadError as e:
            msg = str(e)
            # workloads.ycsb labels the layer of overrides "overrides"; here they are this table's keys.
            msg = msg[len("overrides: "):] if msg.startswith("overrides: ") else msg
            raise SpecError(msg if where in msg else f"{where}: {msg}") from None

    def properties(self) -> dict[str, str]:
        """The overrides as YCSB property strings (a properties file has only strings): TOML's
        ``true`` becomes ``"true"`` as Java writes it, numbers their shortest exact spelling."""
        def prop(v) -> str:
            if isinstance(v, bool):
                return "true" if v else "false"
            if isinstance(v, float):
                return str(int(v)) if v.is_integer() and abs(v) < 1e15 else repr(v)
            return str(v)
        return {k: prop(v) for k, v in self.overrides.items()}

    @property
    def title(self) -> str:
        """``"YCSB A"``, ``"YCSB file x.properties"`` or ``"trace x.csv"``: the short name for step lines."""
        if self.trace is not None:
            return f"trace {Path(self.trace).name}"
        if self.transactional:
            return {"smallbank": "SmallBank", "tatp": "TATP"}.get(self.preset, self.preset)
        return f"YCSB {self.preset.upper()}" if self.preset else f"YCSB file {Path(self.file).name}"

    def describe(self) -> str:
        base = (f"trace {self.trace}" if self.trace is not None else
                self.title if self.preset else f"YCSB file {self.file}")
        props = " ".join(f"{k}={show_toml(v) if not isinstance(v, (list, tuple)) else show_toml(list(v))}"
                         for k, v in self.overrides.items())
        return f"{base}{' ' + props if props else ''}"


@dataclass(frozen=True)
class RackSpec:
    """A whole rack, validated. Plain data: the supervisor turns it into node processes."""

    name: str
    source: str  # the file as given, or "<default>"
    profile: Profile  # loaded, overrides applied
    profile_name: str  # as written in rack.profile (a shipped name or a path)
    profile_overrides: dict  # "section.key" -> value, as applied to ``profile``
    seed: int
    on_node_death: str  # "stop" | "continue"
    compute: ComputeSpec
    memory: MemorySpec
    client: ClientSpec
    manager: ManagerSpec
    system: SystemSpec
    workloads: dict  # name -> WorkloadSpec; "default" is [workload]
    run: RunSpec
    base_dir: str = "."  # absolute directory relative paths of the file were resolved against
    warnings: tuple = ()  # things that are legal but probably not meant (shown, never fatal)
    smart: dict | None = None  # [smart]: SMART's switches for the compute nodes' verbs (shm.smart.SmartConfig)
    dpu: DpuSpec = DpuSpec()
    dpa: DpaSpec = DpaSpec()
    steer: tuple = ()          # shm.steering.SteerRule rules with their node, in file order (first match wins)

    def smart_config(self, system_defaults: dict | None = None):
        """The SMART switches the compute nodes run with: the system's defaults, then [smart]."""
        from shm.smart import SmartConfig
        return SmartConfig.from_dict({**(system_defaults or {}), **(self.smart or {})})

    def nodes(self) -> list[NodeDecl]:
        """Every node in fabric order: cn0.., mn0.., cl0.., dpu0.., dpa0.., then mgr.

        The order is fixed (a node's index is its fabric node id, which systems store in remote
        pointers), so the same spec always gives the same addresses.
        """
        out = [NodeDecl(f"cn{i}", "compute", self.compute.memory_bytes) for i in range(self.compute.count)]
        same = self.memory.same_server
        out += [NodeDecl(f"mn{i}", "memory", self.memory.memory_bytes, f"cn{i}" if same else None,
                         memory_kind=self.memory.kind_of(i), same_server=same)
                for i in range(self.memory.count)]
        out += [NodeDecl(f"cl{i}", "client", self.client.memory_bytes) for i in range(self.client.count)]
        out += [NodeDecl(f"dpu{i}", "dpu", self.dpu.memory_bytes, h) for i, h in enumerate(self.dpu.hosts)]
        out += [NodeDecl(f"dpa{i}", "dpa", self.dpa.memory_bytes, h) for i, h in enumerate(self.dpa.hosts)]
        out.append(NodeDecl("mgr", "manager", self.manager.memory_bytes))
        return out

    def node_names(self) -> list[str]:
        return [n.name for n in self.nodes()]

    def total_memory_bytes(self) -> int:
        return sum(n.memory_bytes for n in self.nodes())

    @property
    def workload(self) -> WorkloadSpec:
        """The default workload ([workload])."""
        return self.workloads["default"]

    def describe(self) -> list[str]:
        """Human lines for the dashboard and the event log."""
        c, m = self.compute, self.memory
        prof = self.profile_name + (" with " + ", ".join(f"{k}={show_toml(v)}" for k, v in self.profile_overrides.items())
                                    if self.profile_overrides else "")
        lines = [
            f"rack {self.name} ({self.source}): profile {prof}, seed {self.seed}, "
            f"on node death: {self.on_node_death}",
            f"compute: {c.count} x {c.threads} threads x {c.coroutines} coroutines "
            f"({c.count * c.threads * c.coroutines} clients), {format_size(c.memory_bytes)} each, {c.qp_policy}"
            + (f", QPs made {c.connect.replace('_', ' ')}" if c.connect != "on_first_post" else ""),
            f"memory: {m.count} x {format_size(m.memory_bytes)}" + (f", {m.cores} cores each" if m.cores else "")
            + _describe_kinds(m) + (", mn<i> on cn<i>'s server (one NIC, one PCIe link)" if m.same_server else ""),
        ]
        if self.client.count:
            lines.append(f"client: {self.client.count} x {format_size(self.client.memory_bytes)}")
        if self.dpu.hosts:
            lines.append(f"dpu: {len(self.dpu.hosts)} ({', '.join(f'dpu{i} on {h}' for i, h in enumerate(self.dpu.hosts))}),"
                         f" {self.dpu.cores} Arm cores and {format_size(self.dpu.memory_bytes)} each")
        if self.dpa.hosts:
            lines.append(f"dpa: {len(self.dpa.hosts)} ({', '.join(f'dpa{i} on {h}' for i, h in enumerate(self.dpa.hosts))}),"
                         f" {self.dpa.threads} threads and {format_size(self.dpa.memory_bytes)} each")
        for r in self.steer:
            ports = f"{r.port}" if r.port_hi == r.port else f"{r.port}-{r.port_hi}"
            lines.append(f"steer: {r.node} udp {ports} -> {r.target}" + (f", mirror to {r.mirror}" if r.mirror else ""))
        lines.append(f"nodes: {', '.join(self.node_names())} ({format_size(self.total_memory_bytes())} mapped lazily)")
        opts = ", ".join(f"{k}={show_toml(v)}" for k, v in self.system.options.items())
        lines.append(f"system: {self.system.name}{' (' + opts + ')' if opts else ''}")
        for name, w in self.workloads.items():
            lines.append(f"workload {name}: {w.describe()}")
        lines += [f"warning: {w}" for w in self.warnings]
        return lines


# ----------------------------------------------------------------------------- value checks
# Each converter returns the checked value or raises ValueError with the "must be ..." part of the
# message; _Table adds "file: key = value: " in front.


def _int(lo: int, hi: int | None = None) -> Callable[[Any], int]:
    def conv(v):
        what = f"an integer from {lo} to {hi}" if hi is not None else f"an integer >= {lo}"
        if type(v) is not int or v < lo or (hi is not None and v > hi):
            raise ValueError(f"must be {what}")
        return v
    return conv


def _number(*, above: float | None = None, at_least: float | None = None) -> Callable[[Any], float]:
    def conv(v):
        what = f"a number > {above:g}" if above is not None else f"a number >= {at_least:g}"
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise ValueError(f"must be {what}")
        if (above is not None and v <= above) or (at_least is not None and v < at_least):
            raise ValueError(f"must be {what}")
        return float(v)
    return conv


def _bool(v):
    if type(v) is not bool:
        raise ValueError("must be true or false")
    return v


#: What a memory node's memory may be (shm.fabric.MEMORY_KINDS; spelled here too: reading a spec
#: does not import the fabric, which pulls in numba).
MEMORY_KINDS = ("dram", "nvm")


def _memory_kinds(count: int, profile) -> Callable[[Any], tuple]:
    """``[memory] kind``: one string for every memory node, or a list of one per node (mn0 first).
    Persistent memory needs the profile's [nvm] table."""
    def conv(v):
        if isinstance(v, str):
            kinds = (v,) * count
        elif isinstance(v, list):
            if len(v) != count:
                raise ValueError(f"{len(v)} entries for memory.count = {count}: give one per memory node "
                                 f"(mn0 first), or one string for all of them")
            kinds = tuple(v)
        else:
            raise ValueError(f"must be one of {', '.join(map(repr, MEMORY_KINDS))} or a list of them, one per "
                             f"memory node")
        for k in kinds:
            if k not in MEMORY_KINDS:
                raise ValueError(f"{show_toml(k)} is not a memory kind: use {' or '.join(map(repr, MEMORY_KINDS))}"
                                 f"{did_you_mean(k, MEMORY_KINDS) if isinstance(k, str) else ''}")
        if "nvm" in kinds and profile.nvm is None:
            raise ValueError(f"persistent memory needs the profile's [nvm] table, which {profile.name!r} does not "
                             f"have (cx6-200g has one; or add every nvm.* key under [profile_overrides], docs/nvm.md)")
        return kinds if "nvm" in kinds else ()
    return conv


def _describe_kinds(m) -> str:
    if not m.kinds:
        return ""
    if len(set(m.kinds)) == 1:
        return ", persistent memory (nvm)"
    return ", " + ", ".join(f"mn{i} {k}" for i, k in enumerate(m.kinds))


def _choice(choices) -> Callable[[Any], str]:
    def conv(v):
        if not isinstance(v, str) or v not in choices:
            hint = did_you_mean(v, choices) if isinstance(v, str) else ""
            raise ValueError(f"must be one of {', '.join(choices)}{hint}")
        return v
    return conv


def _text(v):
    if not isinstance(v, str) or not v.strip() or "\n" in v or len(v) > 64:
        raise ValueError("must be a non-empty one-line string of at most 64 characters")
    return v


def _size(lo: int = MIN_NODE_MEMORY, hi: int = MAX_NODE_MEMORY) -> Callable[[Any], int]:
    def conv(v):
        n = parse_size(v)
        if n < lo or n > hi:
            raise ValueError(f"must be a size from {format_size(lo)} to {format_size(hi)}")
        return n
    return conv


class _Table:
    """One table of the file being read: knows its dotted path (for messages) and which keys it
    may hold (to refuse the others with a suggestion)."""

    def __init__(self, label: str, path: str, data: Any):
        if not isinstance(data, dict):
            raise SpecError(f"{label}: {path} = {show_toml(data)}: must be a table [{path}]")
        self.label, self.path, self.data = label, path, data

    def key(self, key: str) -> str:
        return f"{self.path}.{key}"

    def fail(self, key: str, why: str):
        v = self.data[key]
        raise SpecError(f"{self.label}: {self.key(key)} = {show_toml(v)}: {why}")

    def get(self, key: str, default, conv: Callable[[Any], Any]):
        if key not in self.data:
            return default
        try:
            return conv(self.data[key])
        except ValueError as e:
            self.fail(key, str(e))

    def only(self, known) -> None:
        for k in self.data:
            if k not in known:
                raise SpecError(f"{self.label}: {self.key(k)} = {show_toml(self.data[k])}: unknown key in "
                                f"[{self.path}] (known: {', '.join(known)}){did_you_mean(k, known)}")


def _flatten(d: dict, prefix: str = "") -> dict:
    """``{"link": {"gbps": 1}}`` -> ``{"link.gbps": 1}``: TOML reads an unquoted ``link.gbps = 1``
    as a nested table, and both spellings should mean the same."""
    out: dict = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


# ----------------------------------------------------------------------------- files and overrides


def read_toml(path: str | os.PathLike, what: str = "scenario") -> dict:
    """Parse a TOML file; a missing file or a syntax error is a one-line SpecError (tomllib's own
    message carries the line and column)."""
    label = str(path)
    try:
        raw = Path(path).read_bytes()
    except FileNotFoundError:
        raise SpecError(f"no such {what} file: {label}") from None
    except IsADirectoryError:
        raise SpecError(f"{label}: is a directory, not a {what} file") from None
    except OSError as e:
        raise SpecError(f"{label}: cannot read: {e.strerror or e}") from None
    try:
        return tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise SpecError(f"{label}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    except tomllib.TOMLDecodeError as e:
        raise SpecError(f"{label}: invalid TOML: {e}") from None


def parse_override(text: str, flag: str = "--set", shape: str = "table.key=value",
                   example: str = "compute.threads=8") -> tuple[str, Any]:
    """``"compute.threads=8"`` -> ``("compute.threads", 8)``, for ``--set`` options on the command
    line (and ``dmrack check --option``: ``flag``, the ``shape`` it takes and an ``example`` of it
    name that flag in the message). The value is read as a TOML value (``8``, ``2.5``, ``true``,
    ``"x"``); anything that is not one is taken as a plain string, so ``--set system.name=race``
    needs no quotes."""
    key, eq, value = text.partition("=")
    key = key.strip()
    if not eq or not key:
        raise SpecError(f"{flag} {clip(text)}: must look like {shape} (e.g. {flag} {example})")
    try:
        return key, tomllib.loads(f"v = {value.strip()}")["v"]
    except tomllib.TOMLDecodeError:
        return key, value.strip()


def apply_overrides(data: dict, overrides: Mapping[str, Any] | None, label: str,
                    tables: tuple = TABLES) -> dict:
    """A copy of the file's data with dotted keys set (``{"compute.threads": 8}``).

    The first component names the table; for ``workloads`` the second names the workload; the rest
    is one key, so ``profile_overrides.link.gbps`` sets ``"link.gbps"`` and
    ``workload.hdrhistogram.percentiles`` a dotted YCSB property. Values are validated afterwards
    with the file's, by the same code.
    """
    data = copy.deepcopy(data)
    for key, value in (overrides or {}).items():
        table, _, rest = str(key).partition(".")
        where = f"{label}: override {key} = {show_toml(value)}"
        if table not in tables:
            raise SpecError(f"{where}: unknown table {table!r} (known: {', '.join(tables)}){did_you_mean(table, tables)}")
        if not rest:
            raise SpecError(f"{where}: give a dotted key such as {table}.{_TABLE_KEYS.get(table, ('key',))[0]}")
        t = data.setdefault(table, {})
        if not isinstance(t, dict):
            raise SpecError(f"{where}: [{table}] is not a table in the file")
        if table == "workloads":
            name, _, rest = rest.partition(".")
            if not rest:
                raise SpecError(f"{where}: give workloads.NAME.key")
            t = t.setdefault(name, {})
            if not isinstance(t, dict):
                raise SpecError(f"{where}: workloads.{name} is not a table in the file")
        t[rest] = value
    return data


# ----------------------------------------------------------------------------- machine and packages


def machine_memory_bytes() -> int:
    """Physical memory of this machine (tests replace this function to check the refusal)."""
    import psutil
    return int(psutil.virtual_memory().total)


def workloads_available() -> bool:
    """Whether :mod:`workloads.ycsb` can be imported, so that :meth:`WorkloadSpec.build` can run.

    While that package is missing (it is written alongside this one) a spec is still read and
    checked in every other respect; any other import failure inside the package is a bug and
    propagates.
    """
    try:
        import workloads.properties  # noqa: F401
        import workloads.ycsb  # noqa: F401
    except ModuleNotFoundError as e:
        if e.name in ("workloads", "workloads.ycsb", "workloads.properties"):
            return False
        raise
    return True


# ----------------------------------------------------------------------------- the tables


def _is_profile_path(s: str) -> bool:
    # The same rule as shm.profile.load_profile: a path has a separator or ends in .toml.
    return "/" in s or os.sep in s or s.endswith(".toml")


def _load_profile(label: str, base_dir: Path, rack: _Table) -> tuple[Profile, str]:
    name = rack.get("profile", DEFAULT_PROFILE, _text_path)
    try:
        if _is_profile_path(name):
            path = base_dir / name
            if not path.is_file():
                rack.fail("profile", f"no such profile file {path}")
            return load_profile(path), name
        if name not in list_profiles():
            rack.fail("profile", f"unknown profile; shipped profiles are {', '.join(list_profiles())}, "
                                 f"or give the path of a .toml file{did_you_mean(name, list_profiles())}")
        return load_profile(name), name
    except ProfileError as e:
        rack.fail("profile", "; ".join(e.errors))
    raise AssertionError  # pragma: no cover - rack.fail raises


def _apply_profile_overrides(label: str, profile: Profile, data: Any) -> tuple[Profile, dict]:
    if data is None:
        return profile, {}
    _Table(label, "profile_overrides", data)
    flat = _flatten(data)
    try:
        return with_overrides(profile, flat), flat
    except ProfileError as whole:
        # Find the key to blame: the first one that fails on its own. If none does, the keys only
        # fail together (a cross-field rule such as qp.max_rd_atomic <= qp.max_send_wr).
        for k, v in flat.items():
            try:
                with_overrides(profile, {k: v})
            except ProfileError as e:
                raise SpecError(f"{label}: profile_overrides.{k} = {show_toml(v)}: {strip_override_label(e.errors[0])}") from None
        raise SpecError(f"{label}: profile_overrides: {'; '.join(strip_override_label(x) for x in whole.errors)}") from None


def strip_override_label(line: str) -> str:
    # shm.profile prefixes each line with "<file> (overrides): "; ours names the scenario file instead.
    head, sep, tail = line.partition(" (overrides): ")
    return tail if sep else line


def _load_system(label: str, data: Any) -> SystemSpec:
    from nodes.systems import get_system, is_known, system_names

    t = _Table(label, "system", data if data is not None else {})
    name = t.get("name", DEFAULT_SYSTEM, _text)
    # A registered name (built-in or an installed dmrack.systems entry point), or a plugin given
    # as module:Class (nodes/systems/__init__.py): every failure to load it is one line.
    if not is_known(name):
        if "name" in t.data:
            t.fail("name", f"unknown system; registered systems are {', '.join(system_names())}"
                           f"{did_you_mean(name, system_names())} (or a plugin as module:Class)")
        raise SpecError(f"{label}: system.name: the default system {name!r} is not registered")
    try:
        cls = get_system(name)
    except (ValueError, ImportError, AttributeError) as e:  # a plugin (or a registry line) that does not load
        raise SpecError(f"{label}: system.name = {show_toml(name)}: the system cannot be loaded "
                        f"({' '.join(str(e).split())})") from None
    given = {k: v for k, v in t.data.items() if k != "name"}
    try:
        options = cls.check_options(given, where=f"{label}: system")
    except ValueError as e:
        raise SpecError(str(e)) from None
    servers = getattr(cls, "servers", None) or {}
    from nodes.actors import ACTOR_ROLES, AVAILABLE_ROLES
    if not isinstance(servers, dict):
        raise SpecError(f"{label}: system.name = {show_toml(name)}: {cls.__name__}.servers must be a dict "
                        f"role -> function(ctx), got {type(servers).__name__}")
    for role, fn in servers.items():
        if role not in ACTOR_ROLES:
            raise SpecError(f"{label}: system.name = {show_toml(name)}: {cls.__name__}.servers names role {role!r}; "
                            f"server actors run on {', '.join(ACTOR_ROLES)}")
        if role not in AVAILABLE_ROLES:
            raise SpecError(f"{label}: system.name = {show_toml(name)}: {cls.__name__}.servers names role {role!r}, "
                            f"which this version of the rack does not have yet (it has {', '.join(AVAILABLE_ROLES)})")
        if not callable(fn):
            raise SpecError(f"{label}: system.name = {show_toml(name)}: {cls.__name__}.servers[{role!r}] is not callable")
    return SystemSpec(name=name, options=dict(options), roles=tuple(getattr(cls, "roles", ("compute", "memory"))),
                      servers=tuple(r for r in ACTOR_ROLES if r in servers))


def _workload(label: str, base_dir: Path, name: str, path: str, data: Any, *, defaults: dict,
              inherit: dict) -> WorkloadSpec:
    t = _Table(label, path, data)
    txn = _txn_workload(label, name, path, t)
    if txn is not None:
        return txn
    if "preset" in t.data and "file" in t.data:
        t.fail("file", "give preset or file, not both")
    if "trace" in t.data:
        for other in ("preset", "file"):
            if other in t.data:
                t.fail("trace", f"give trace or {other}, not both")
        resolved = (base_dir / t.get("trace", None, _text_path)).resolve()
        if not resolved.is_file():
            t.fail("trace", f"no such trace file {resolved}")
        overrides = {}
        for k, v in _flatten({k: v for k, v in t.data.items() if k != "trace"}).items():
            if isinstance(v, (list, dict)) or v is None:
                raise SpecError(f"{label}: {path}.{k} = {show_toml(v)}: a trace property must be a string, number or "
                                f"boolean")
            overrides[k] = v
        return WorkloadSpec(name=name, preset=None, file=None, overrides=overrides, source=label, table=path,
                            trace=str(resolved))
    preset = file = None
    if "file" in t.data:
        file_s = t.get("file", None, _text_path)
        resolved = (base_dir / file_s).resolve()
        if not resolved.is_file():
            t.fail("file", f"no such workload file {resolved}")
        file = str(resolved)
        overrides = {}
    else:
        preset = t.get("preset", DEFAULT_WORKLOAD_PRESET, _preset)
        overrides = {**defaults, **inherit}
    for k, v in _flatten({k: v for k, v in t.data.items() if k not in ("preset", "file")}).items():
        if isinstance(v, (list, dict)) or v is None:
            raise SpecError(f"{label}: {path}.{k} = {show_toml(v)}: a YCSB property must be a string, number or boolean")
        overrides[k] = v
    return WorkloadSpec(name=name, preset=preset, file=file, overrides=overrides, source=label, table=path)


def _txn_workload(label: str, name: str, path: str, t: "_Table") -> WorkloadSpec | None:
    """A transactional workload (``preset = "smallbank"`` or ``kind = "smallbank"``, and the
    workload's parameters: workloads.smallbank.SmallBank.PARAMETERS), or None for a YCSB one.
    Its parameters are checked when it is built (one line naming the key)."""
    kind = t.data.get("kind")
    preset = t.data.get("preset")
    if kind is None and not (isinstance(preset, str) and preset.lower() in TXN_WORKLOADS):
        return None
    if kind is not None:
        if not isinstance(kind, str) or kind.lower() not in TXN_WORKLOADS:
            t.fail("kind", f"must be one of {', '.join(TXN_WORKLOADS)} (a transactional workload); a YCSB workload "
                           f"gives preset or file instead")
        if preset is not None and str(preset).lower() != kind.lower():
            t.fail("preset", f"give kind = {show_toml(kind)} or a YCSB preset, not both")
    for other in ("file", "trace"):
        if other in t.data:
            t.fail(other, f"a transactional workload ({(kind or preset).lower()}) has no {other}")
    params = {k: (tuple(v) if isinstance(v, list) else v) for k, v in t.data.items() if k not in ("kind", "preset")}
    return WorkloadSpec(name=name, preset=(kind or preset).lower(), file=None, overrides=params, source=label,
                        table=path)


def _text_path(v):
    if not isinstance(v, str) or not v.strip():
        raise ValueError("must be a non-empty path string")
    return v


def _preset(v):
    if not isinstance(v, str) or v.lower() not in WORKLOAD_PRESETS:
        raise ValueError(f"must be a YCSB preset letter, one of {', '.join(WORKLOAD_PRESETS[:6])}, or one of "
                         f"{', '.join(WORKLOAD_PRESETS[6:])}")
    return v.lower()


_WORKLOAD_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*$")


def inherited_shape(default: WorkloadSpec) -> dict:
    """The data-shape properties (DATA_SHAPE_KEYS) of the default workload that other preset-based
    workloads inherit."""
    return {k: default.overrides[k] for k in DATA_SHAPE_KEYS if k in default.overrides}


def preset_workload(default: WorkloadSpec, letter: str, table: str) -> WorkloadSpec:
    """The workload a bare preset letter names in a step: that preset over the default's data."""
    return WorkloadSpec(name=letter, preset=letter, file=None, overrides=inherited_shape(default),
                        source=default.source, table=table)


def _workloads(label: str, base_dir: Path, data: dict) -> dict:
    given = data.get("workload") or {}
    default = _workload(label, base_dir, "default", "workload", data.get("workload", {}),
                        defaults=DEFAULT_WORKLOAD_OVERRIDES if "file" not in given and "trace" not in given else {},
                        inherit={})
    out = {"default": default}
    named = data.get("workloads")
    if named is None:
        return out
    if not isinstance(named, dict):
        raise SpecError(f"{label}: workloads = {show_toml(named)}: must be tables [workloads.NAME]")
    shape = inherited_shape(default) if not default.transactional else {}
    for name, table in named.items():
        if name == "default" or name.lower() in WORKLOAD_PRESETS or not _WORKLOAD_NAME.match(name):
            raise SpecError(f"{label}: workloads.{name}: bad workload name {name!r}: use letters, digits, _ "
                            f"and -, not 'default' nor a preset letter (a step names those directly)")
        if not isinstance(table, dict):
            raise SpecError(f"{label}: workloads.{name} = {show_toml(table)}: must be a table [workloads.{name}]")
        inherit = ({k: v for k, v in shape.items() if k not in table}
                   if not {"file", "trace", "kind"} & set(table) else {})
        out[name] = _workload(label, base_dir, name, f"workloads.{name}", table, defaults={}, inherit=inherit)
    return out


def spec_from_dict(data: Mapping[str, Any], *, source: str = "<string>", base_dir: str | os.PathLike | None = None,
                   seed: int | None = None, overrides: Mapping[str, Any] | None = None,
                   extra_tables: tuple = ()) -> RackSpec:
    """Validate the tables of a file (already parsed) and build the :class:`RackSpec`.

    ``source`` labels every message (the file as the user gave it); ``base_dir`` is where relative
    paths are resolved (default: the current directory); ``seed`` (from the command line) wins over
    ``rack.seed``; ``overrides`` are dotted keys set before validation (see :func:`apply_overrides`);
    ``extra_tables`` are top-level tables the caller reads itself (``step``).
    """
    label = source
    base = Path(base_dir if base_dir is not None else ".").resolve()
    known_tables = TABLES + tuple(extra_tables)
    data = apply_overrides(dict(data), overrides, label, TABLES)

    for k, v in data.items():
        if k in extra_tables:
            continue
        if k not in TABLES:
            if isinstance(v, dict):
                raise SpecError(f"{label}: [{k}]: unknown table (known: {', '.join(known_tables)})"
                                f"{did_you_mean(k, known_tables)}")
            owner = next((t for t, keys in _TABLE_KEYS.items() if k in keys), None)
            hint = f"; it belongs in [{owner}]" if owner else did_you_mean(k, known_tables)
            raise SpecError(f"{label}: {k} = {show_toml(v)}: unknown top-level key{hint}")
        if k == "steer":
            if not (isinstance(v, list) and all(isinstance(x, dict) for x in v)):
                raise SpecError(f"{label}: steer = {show_toml(v)}: must be an array of tables [[steer]]")
            continue
        if not isinstance(v, dict):
            raise SpecError(f"{label}: {k} = {show_toml(v)}: must be a table [{k}]")

    # [rack]
    rack = _Table(label, "rack", data.get("rack", {}))
    rack.only(_TABLE_KEYS["rack"])
    stem = Path(source).stem if source not in (DEFAULT_SOURCE, "<string>") else "default"
    name = rack.get("name", stem or "default", _text)
    file_seed = rack.get("seed", DEFAULT_SEED, _int(0))  # TOML integers stop at 2**63-1 anyway
    if seed is not None:
        try:
            seed = _int(0, (1 << 63) - 1)(seed)  # a command-line seed is a Python int: bound it
        except ValueError as e:
            raise SpecError(f"{label}: rack.seed (from the command line) = {show_toml(seed)}: {e}") from None
    on_death = rack.get("on_node_death", "stop", _choice(ON_NODE_DEATH))
    profile, profile_name = _load_profile(label, base, rack)
    profile, prof_over = _apply_profile_overrides(label, profile, data.get("profile_overrides"))

    # [compute], [memory], [client], [manager]
    # the one lists of QP policies and connect orders (imported late: shm.coro loads numba)
    from shm.coro import CONNECT_ORDERS, POLICIES

    t = _Table(label, "compute", data.get("compute", {}))
    t.only(_TABLE_KEYS["compute"])
    d = DEFAULTS["compute"]
    compute = ComputeSpec(
        count=t.get("count", d["count"], _int(*COUNT_RANGES["compute"])),
        threads=t.get("threads", d["threads"], _int(*THREADS_RANGE)),
        coroutines=t.get("coroutines", d["coroutines"], _int(*COROUTINES_RANGE)),
        memory_bytes=t.get("memory", d["memory"], _size()),
        qp_policy=t.get("qp_policy", d["qp_policy"], _choice(POLICIES)),
        threads_per_qp=t.get("threads_per_qp", d["threads_per_qp"], _int(*THREADS_RANGE)),
        connect=t.get("connect", d["connect"], _choice(CONNECT_ORDERS)),
    )
    if compute.threads_per_qp is not None and compute.qp_policy != "multiplexed_qp":
        raise SpecError(f"{label}: compute.threads_per_qp = {compute.threads_per_qp}: only meaningful with "
                        f"qp_policy = \"multiplexed_qp\" (qp_policy is \"{compute.qp_policy}\")")
    if compute.connect != "on_first_post" and compute.qp_policy == "per_thread_doorbell":
        raise SpecError(f"{label}: compute.connect = \"{compute.connect}\": with qp_policy = \"per_thread_doorbell\" "
                        f"each thread has a context of its own, so the order QPs are made in changes nothing; "
                        f"use it with a shared context (per_thread_qp, multiplexed_qp, shared_qp)")
    need = compute.threads * THREAD_BUFFER_BYTES + MIN_NODE_MEMORY
    if compute.memory_bytes < need:
        shown = show_toml(t.data["memory"]) if "memory" in t.data else f"{format_size(compute.memory_bytes)} (default)"
        raise SpecError(f"{label}: compute.memory = {shown}: too small for {compute.threads} threads, each "
                        f"registering a {format_size(THREAD_BUFFER_BYTES)} verbs buffer; give at least "
                        f"{format_size(need, exact=True)}")

    t = _Table(label, "memory", data.get("memory", {}))
    t.only(_TABLE_KEYS["memory"])
    count = t.get("count", DEFAULTS["memory"]["count"], _int(*COUNT_RANGES["memory"]))
    memory = MemorySpec(count=count,
                        memory_bytes=t.get("memory", DEFAULTS["memory"]["memory"], _size()),
                        cores=t.get("cores", DEFAULTS["memory"]["cores"], _int(0, MAX_MEMORY_CORES)),
                        kinds=t.get("kind", (), _memory_kinds(count, profile)),
                        same_server=t.get("same_server", DEFAULTS["memory"]["same_server"], _bool))
    if memory.same_server and memory.count > compute.count:
        raise SpecError(f"{label}: memory.same_server = true puts mn<i> on cn<i>'s server, but memory.count = "
                        f"{memory.count} > compute.count = {compute.count}")

    t = _Table(label, "client", data.get("client", {}))
    t.only(_TABLE_KEYS["client"])
    client = ClientSpec(count=t.get("count", DEFAULTS["client"]["count"], _int(*COUNT_RANGES["client"])),
                        memory_bytes=t.get("memory", DEFAULTS["client"]["memory"], _size()))

    dpu, dpa = _devices(label, data, profile, compute)
    steer = _steering(label, data.get("steer") or [], compute, memory, dpu, dpa)

    t = _Table(label, "manager", data.get("manager", {}))
    t.only(_TABLE_KEYS["manager"])

    def _one(v):
        if type(v) is not int or v != 1:
            raise ValueError("must be 1 (this version runs exactly one manager)")
        return v
    manager = ManagerSpec(count=t.get("count", 1, _one))

    # [system]: its options are checked by the system itself.
    system = _load_system(label, data.get("system"))
    if "memory" in system.servers and memory.cores == 0:
        shown = "0" if "cores" in (data.get("memory") or {}) else "0 (default)"
        raise SpecError(f"{label}: memory.cores = {shown}: system {system.name!r} runs server actors on memory "
                        f"nodes, which need a CPU; give memory.cores >= 1")
    for role, spec_of in (("dpu", dpu), ("dpa", dpa)):
        if role in system.servers and not spec_of.hosts:
            raise SpecError(f"{label}: {role}.hosts = [] (default): system {system.name!r} runs server actors on "
                            f"{role.upper()} nodes; attach one to a compute node, e.g. {role}.hosts = [\"cn0\"]")
    warnings = []
    counts = {"compute": compute.count, "memory": memory.count, "client": client.count}
    for role, count in counts.items():
        if role in system.roles and count == 0:
            lo = max(1, COUNT_RANGES[role][0])
            raise SpecError(f"{label}: {role}.count = 0: system {system.name!r} needs at least {lo} {role} node")
        if role not in system.roles and count > 0:
            warnings.append(f"{role}.count = {count}: system {system.name!r} does not use {role} nodes; "
                            f"they will idle")

    # [workload], [workloads.NAME]
    workloads = _workloads(label, base, data)

    # [run]
    t = _Table(label, "run", data.get("run", {}))
    t.only(_TABLE_KEYS["run"])
    duration = t.get("duration_ms", 0.0, _number(at_least=0))
    run = RunSpec(duration_ms=duration or None, load=t.get("load", True, _bool))

    # [smart]: SMART's techniques as switches (shm/smart.py, docs/smart.md)
    smart = data.get("smart")
    if smart is not None:
        if not isinstance(smart, dict):
            raise SpecError(f"{label}: smart = {show_toml(smart)}: must be a table of SMART switches")
        from shm.smart import SmartConfig
        try:
            SmartConfig.from_dict(smart)
        except (TypeError, ValueError) as e:
            raise SpecError(f"{label}: [smart]: {e}") from None

    spec = RackSpec(
        name=name, source=source, profile=profile, profile_name=profile_name, profile_overrides=prof_over,
        seed=file_seed if seed is None else seed, on_node_death=on_death, compute=compute, memory=memory,
        client=client, manager=manager, system=system, workloads=workloads, run=run, base_dir=str(base),
        warnings=tuple(warnings), smart=dict(smart) if smart else None, dpu=dpu, dpa=dpa, steer=steer,
    )

    # a transactional system runs transactional workloads only, and a KV system KV ones
    from nodes.systems import is_transactional
    txn_system = is_transactional(system.name)
    for w in workloads.values():
        if w.transactional != txn_system:
            given = "kind" if w.transactional else "preset"
            raise SpecError(f"{label}: {w.table}: system {system.name!r} is "
                            + ("transactional: give it a transactional workload (preset = \"smallbank\")"
                               if txn_system else
                               f"a key-value store: {w.title} is a transactional workload (for a transactional "
                               f"system such as 'ford'); drop {given} or pick a YCSB preset"))

    # a system's options that only make sense against the rack (FlexKV: proxy threads <= threads)
    try:
        from nodes.systems import get_system
        get_system(system.name).check_rack(system.options, spec)
    except ValueError as e:
        raise SpecError(f"{label}: system: {' '.join(str(e).split())}") from None

    # Memory segments are mapped lazily, so a rack larger than RAM would start -- and then be killed
    # by the OOM killer (or SIGBUS on a full /dev/shm) in the middle of a run. Refuse it now.
    total, have = spec.total_memory_bytes(), machine_memory_bytes()
    if total > have:
        raise SpecError(f"{label}: the rack asks for {format_size(total)} of node memory but this machine has "
                        f"{format_size(have)} (compute {compute.count} x {format_size(compute.memory_bytes)}, "
                        f"memory {memory.count} x {format_size(memory.memory_bytes)}, "
                        f"client {client.count} x {format_size(client.memory_bytes)}"
                        + (f", dpu {len(dpu.hosts)} x {format_size(dpu.memory_bytes)}" if dpu.hosts else "")
                        + (f", dpa {len(dpa.hosts)} x {format_size(dpa.memory_bytes)}" if dpa.hosts else "") + ")")
    return spec


def _hosts(t: "_Table", compute: ComputeSpec) -> tuple:
    names = [f"cn{i}" for i in range(compute.count)]
    hosts = t.data.get("hosts", [])
    if not isinstance(hosts, list) or not all(isinstance(h, str) for h in hosts):
        t.fail("hosts", "must be a list of compute node names, e.g. [\"cn0\"]")
    for i, h in enumerate(hosts):
        if h not in names:
            raise SpecError(f"{t.label}: {t.path}.{item('hosts', i)} = {show_toml(h)}: no such compute node; the rack has "
                            f"{', '.join(names)}{did_you_mean(h, names)}")
        if h in hosts[:i]:
            raise SpecError(f"{t.label}: {t.path}.{item('hosts', i)} = {show_toml(h)}: listed twice; a card has one "
                            f"{t.path.upper()}")
    return tuple(hosts)


def _device_table(label: str, data: Mapping, role: str, profile: Profile, card: str, compute: ComputeSpec):
    """The part [dpu] and [dpa] share: the table, its hosts, the profile table the card needs
    (None if the profile has none) and the node memory, at most what the card has."""
    table = getattr(profile, role)
    t = _Table(label, role, data.get(role, {}))
    t.only(_TABLE_KEYS[role])
    hosts = _hosts(t, compute)
    if hosts and table is None:
        t.fail("hosts", f"profile {profile.name!r} has no [{role}] table (a card without {card}); use "
                        f"rack.profile = \"bf3\" or a profile with one")
    hi = min(MAX_NODE_MEMORY, table.memory_bytes) if table is not None else MAX_NODE_MEMORY
    return t, hosts, t.get("memory", DEFAULTS[role]["memory"], _size(hi=hi))


def _devices(label: str, data: Mapping, profile: Profile, compute: ComputeSpec) -> tuple:
    """[dpu] and [dpa]: the offload devices attached to compute nodes (docs/devices.md)."""
    t, hosts, memory = _device_table(label, data, "dpu", profile, "Arm cores", compute)
    most = profile.dpu.cores if profile.dpu else 1024
    dpu = DpuSpec(hosts, t.get("cores", profile.dpu.cores if profile.dpu else 0, _int(1, most)), memory)
    t, hosts, memory = _device_table(label, data, "dpa", profile, "a DPA", compute)
    most = profile.dpa.usable_threads if profile.dpa else 1 << 20

    def _threads(v):
        try:
            return _int(1, most)(v)
        except ValueError as e:
            raise ValueError(f"{e} (dpa.usable_threads of profile {profile.name!r})" if profile.dpa else str(e)) from None
    dpa = DpaSpec(hosts, t.get("threads", DEFAULTS["dpa"]["threads"], _threads), memory)
    return dpu, dpa


def _steering(label: str, rules: list, compute, memory, dpu, dpa) -> tuple:
    """[[steer]]: a rule is applied by ``node``'s NIC, so its targets must be on that card: the node
    itself or a DPU/DPA attached to it (a queue ``node.name`` names one queue of such a node)."""
    nodes = ([f"cn{i}" for i in range(compute.count)] + [f"mn{i}" for i in range(memory.count)]
             + [f"dpu{i}" for i in range(len(dpu.hosts))] + [f"dpa{i}" for i in range(len(dpa.hosts))])
    card = {f"dpu{i}": h for i, h in enumerate(dpu.hosts)} | {f"dpa{i}": h for i, h in enumerate(dpa.hosts)}
    out = []
    for i, data in enumerate(rules):
        t = _Table(label, item("steer", i), data)
        t.only(_TABLE_KEYS["steer"])
        for key in ("node", "port", "target"):
            if key not in data:
                raise SpecError(f"{label}: {item('steer', i)}: missing key {key!r} (a rule needs node, port and target)")
        node = t.get("node", "", _text)
        if node not in nodes:
            t.fail("node", f"no such node; the rack has {', '.join(nodes)}{did_you_mean(node, nodes)}")
        port = t.get("port", 0, _int(0, 65535))
        hi = t.get("port_hi", port, _int(port, 65535))
        host = card.get(node, node)
        on_card = [n for n in nodes if n == host or card.get(n) == host]

        def target(key, v):
            owner = v.split(".", 1)[0]
            if owner not in on_card:
                t.fail(key, f"unknown steering target: {owner!r} is not a node on {node}'s card "
                            f"(there: {', '.join(on_card)})")
            return v
        tgt = target("target", t.get("target", "", _text))
        mirror = t.get("mirror", None, _text)
        if mirror is not None:
            target("mirror", mirror)
        out.append(SteerRule(port, tgt, port_hi=hi, mirror=mirror, spread="port", node=node))
    return tuple(out)


def default_spec(*, seed: int | None = None) -> RackSpec:
    """The built-in rack (see the module docstring for what it is and why)."""
    return spec_from_dict({}, source=DEFAULT_SOURCE, seed=seed)
