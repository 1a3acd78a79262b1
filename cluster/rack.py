"""The rack: the one object that turns a scenario (plain data) into live nodes.

As in Mininet, where ``Topo.build()`` is data and ``Mininet(topo)`` makes it live, a
:class:`cluster.scenario.Scenario` only describes the rack; this module

1. *compiles* it: builds every workload it names (so a bad property fails before anything
   exists), checks the system can run them, and fills in what the steps leave to the rack (a
   load's count, whether it is a bulk load): the plan is the scenario's own typed steps
   (``nodes/steps.py``), which the manager and the compute nodes dispatch on;
2. *creates* the rack's shared state (:class:`RackState`): the fabric with one memory per node,
   the system's remote structures (``System.setup``), the stats plane, the control block and the
   clock table, all under one rack-unique segment prefix, and closes (unlinks) them whatever
   happens;
3. *runs* it co-located (:class:`ColocatedRack`: every node in this process, one scheduler,
   deterministic for a seed), which tests and benchmarks use. The supervisor
   (``cluster/supervisor.py``) runs the same nodes as separate OS processes.
"""

from __future__ import annotations

import time
from typing import NamedTuple
from dataclasses import dataclass, field, replace

from cluster.control import F_DONE, ControlBlock
from cluster.scenario import table_capacity
from cluster.stats import STATE_DONE, ProcInfo, StatsPlane
from cluster.wiring import wire
from nodes.steps import KillStep, LoadStep, RestartStep, RunStep, SleepStep, Step
from nodes.history import HistoryLog
from nodes.txn_history import MAX_ITEMS, TxnHistoryLog
from shm.sim.env import Environment
from shm.sim.sync import ClockTable
from nodes.systems import get_system
from shm.messages import SystemGaveUp
from shm.fabric import Fabric
from shm.segment import new_prefix


class RackError(ValueError):
    """The scenario cannot run as written (one line, names the problem)."""


# -- compiling a scenario ------------------------------------------------------------------------

@dataclass
class CompiledRack:
    """Everything the nodes need, built once by the rack's owner and inherited by every node."""

    scenario: object
    system: type
    options: dict
    workloads: dict           # name -> workloads.ycsb.CoreWorkload
    plan: list               # nodes.steps.Step: the scenario's steps, count and bulk of loads filled in
    nodes: list               # NodeDecl(name, role, memory_bytes), fabric order
    compute: list[str]        # the nodes running the KV clients (compute, or client nodes), addresses 0..K-1
    capacity: int             # keys the system is sized for
    actor_nodes: list = field(default_factory=list)   # DPUs, DPAs, memory nodes with actors: addresses K+1..

    def address(self, name: str) -> int:
        """A node's process address in the clock table (-1: it has none, a passive node)."""
        if name in self.compute:
            return self.compute.index(name)
        if name == "mgr":
            return len(self.compute)
        if name in self.actor_nodes:
            return len(self.compute) + 1 + self.actor_nodes.index(name)
        return -1

    @property
    def n_procs(self) -> int:
        """Processes in the clock table: compute nodes, the manager, the other actor nodes."""
        return len(self.compute) + 1 + len(self.actor_nodes)

    def proc_of_node(self) -> dict:
        """Fabric index -> clock address, for every node (shm.verbs.VerbsHost, shm.udp)."""
        return {i: self.address(n.name) for i, n in enumerate(self.nodes)}

    @property
    def spec(self):
        return self.scenario.spec

    @property
    def finite(self) -> bool:
        # a run of a trace replayed once (workloads.traces, loop = false) ends with the trace
        return all(not isinstance(s, (RunStep, SleepStep)) or s.duration_ns > 0
                   or (isinstance(s, RunStep) and getattr(self.workloads.get(s.workload), "finite", False))
                   for s in self.plan)

    def describe_workloads(self) -> str:
        used = [s.workload for s in self.plan if getattr(s, "workload", None)]
        names = list(dict.fromkeys(used)) or list(self.workloads)[:1]
        return "; ".join(self.workloads[n].describe() for n in names if n in self.workloads)


def compile_scenario(scenario) -> CompiledRack:
    spec = scenario.spec
    system = get_system(spec.system.name)
    options = dict(spec.system.options)
    workloads = {}
    for name, ws in spec.workloads.items():
        workloads[name] = ws.build()
    has_bulk = getattr(system, "bulk_load", None) is not None
    plan: list[Step] = []
    for st in scenario.steps:
        if isinstance(st, (LoadStep, RunStep)):
            if not st.workload:
                st = replace(st, workload="default")
            if st.workload not in workloads:
                raise RackError(f"{scenario.source}: step {st.index} uses workload {st.workload!r}, which is not defined")
        txn = getattr(workloads[st.workload], "transactional", False) if isinstance(st, (LoadStep, RunStep)) else False
        if isinstance(st, LoadStep) and txn:
            raise RackError(f"{scenario.source}: step {st.index}: workload {st.workload!r} is transactional: its "
                            f"tables are loaded when the rack is built; drop the load step")
        if isinstance(st, RunStep) and not txn and workloads[st.workload].proportions.scan > 0 \
                and not system.supports_scan:
            raise RackError(f"{scenario.source}: step {st.index}: workload {st.workload!r} has scans "
                            f"(scanproportion > 0) but system {system.name!r} offers no scan")
        if isinstance(st, LoadStep):
            # what the file may leave to the rack: the count (the workload's recordcount) and the
            # kind of load (bulk while the structure is empty, if the system has a bulk load)
            count = int(st.count or workloads[st.workload].recordcount)
            bulk = st.bulk
            if bulk is None:
                bulk = has_bulk and not any(isinstance(p, (LoadStep, RunStep)) for p in plan)
            if bulk and not has_bulk:
                raise RackError(f"{scenario.source}: step {st.index}: bulk = true, but system {system.name!r} has no "
                                f"bulk load; load its keys with inserts (drop bulk)")
            st = replace(st, count=count, bulk=bulk)
        plan.append(st)
    capacity = table_capacity(plan, workloads)       # the formula cluster.scenario.check_capacity checked
    nodes = list(spec.nodes())
    # the nodes that run the KV clients (YCSB, histories): compute nodes, or the client nodes of a
    # system whose clients reach a server over the network (System.client_role)
    compute = [n.name for n in nodes if n.role == getattr(system, "client_role", "compute")]
    servers = getattr(system, "servers", None) or {}
    # DPUs and DPAs always run in the virtual clock: their RX queues take steered and mirrored
    # datagrams even when the system runs no actor there
    actor_nodes = [n.name for n in nodes
                   if n.name not in compute and (n.role in ("dpu", "dpa") or n.role in servers)]
    return CompiledRack(scenario, system, options, workloads, plan, nodes, compute, capacity, actor_nodes)


def setup_tables(compiled: CompiledRack, fabric, memory_nodes: list) -> dict:
    """A transactional system's tables (nodes/systems/txn.py): set up for the default workload's
    ``tables()`` and loaded with its ``rows`` (the design's own loader, as FORD's benchmark loads
    before it runs), in the rack's owner before any node starts. Every workload of the scenario
    runs on these tables, so they must declare the same ones."""
    default = compiled.workloads["default"]
    tables = default.tables()
    for name, w in compiled.workloads.items():
        if w.tables() != tables:
            raise RackError(f"{compiled.scenario.source}: workload {name!r} declares other tables than the default "
                            f"workload's ({w.describe()}); the transactional workloads of one rack share its tables")
    layout = compiled.system.setup_tables(fabric, memory_nodes, compiled.options, tables)
    for t in tables:
        compiled.system.load(fabric, layout, t.name, default.rows(t.name))
    return layout


# -- the rack's shared state ---------------------------------------------------------------------

@dataclass
class RackState:
    """The shared segments of one rack (all under ``prefix``); :meth:`close` unlinks them."""

    compiled: CompiledRack
    prefix: str
    fabric: Fabric
    plane: StatsPlane
    control: ControlBlock
    clock: ClockTable | None
    layout: dict
    memory_nodes: list[int] = field(default_factory=list)
    history: HistoryLog | TxnHistoryLog | None = None     # a transactional system's is a TxnHistoryLog
    # compute node slot -> (host bump pointer, host bytes, device bump pointer, device bytes) as
    # System.setup left them: what a restarted node's memory is reset to (reset_node_memory)
    setup_images: dict = field(default_factory=dict)

    @classmethod
    def create(cls, compiled: CompiledRack, *, processes: bool, history: int = 0) -> "RackState":
        """``history``: record up to that many operations per compute node (0: none)."""
        spec = compiled.spec
        transactional = getattr(compiled.system, "transactional", False)
        # a KV history tells writes apart by a version in the value; a transactional one records versions itself
        short = [n for n, w in compiled.workloads.items() if history and not transactional and w.value_size < 16]
        if short:
            raise RackError(f"{compiled.scenario.source}: recording a history needs values of at least 16 bytes "
                            f"(they carry the version that tells writes apart); workload {short[0]!r} has valuesize "
                            f"{compiled.workloads[short[0]].value_size}")
        prefix = new_prefix()
        parts = []
        try:
            # co-located: this process alone books the calendars (plain stores, nic.P_PRIVATE)
            fabric = Fabric.create(spec.profile, [n.fabric_spec() for n in compiled.nodes], prefix=prefix,
                                   private=not processes)
            parts.append(fabric)
            plane = StatsPlane.create([ProcInfo(n.name, n.role) for n in compiled.nodes], prefix=prefix,
                                      max_steps=len(compiled.plan) + 1)
            parts.append(plane)
            control = ControlBlock.create(len(compiled.nodes), prefix=prefix)
            parts.append(control)
            clock = None
            if processes:
                # compute nodes are link addresses 0..K-1, the manager K: they run the scenario;
                # nodes with server actors (memory with cores, DPUs, DPAs) K+1.. (CompiledRack.address)
                clock = ClockTable.create(compiled.n_procs, prefix=prefix)
                parts.append(clock)
            log = None
            if history and transactional:
                wl = compiled.workloads["default"]
                log = TxnHistoryLog.create(len(compiled.compute), prefix=prefix, capacity=history,
                                           tables=[t.name for t in wl.tables()], names=wl.TYPES)
                parts.append(log)
            elif history:
                log = HistoryLog.create(len(compiled.compute), prefix=prefix, capacity=history)
                parts.append(log)
            mns = [i for i, n in enumerate(compiled.nodes) if n.role == "memory"]
            for m in mns:
                fabric.expose(m)
            if getattr(compiled.system, "expose_compute", False):
                for i, n in enumerate(compiled.nodes):
                    if n.role == "compute":
                        fabric.expose(i)
            try:
                if getattr(compiled.system, "transactional", False):
                    layout = setup_tables(compiled, fabric, mns)
                else:
                    layout = compiled.system.setup(fabric, mns, compiled.options, compiled.capacity)
            except (SystemGaveUp, MemoryError) as e:
                # The spec's capacity check (System.footprint) is a lower bound; a table that still
                # does not fit is the same bad input: one line naming the scenario, not a traceback.
                raise RackError(f"{compiled.scenario.source}: {e}") from None
            images = {}
            if processes and any(isinstance(s, RestartStep) for s in compiled.plan):
                for i, n in enumerate(compiled.nodes):
                    if n.role == "compute":
                        mem = fabric.memory[i]
                        h, d = int(mem.alloc[0]), int(mem.alloc[1])
                        images[i] = (h, mem.host[:h].copy(), d, mem.device[:d].copy())
        except BaseException:
            for p in reversed(parts):
                p.close()
            raise
        return cls(compiled, prefix, fabric, plane, control, clock, layout, mns, log, images)

    def reset_node_memory(self, slot: int, dead_pid: int = 0) -> None:
        """A compute node's memory as System.setup left it, for a new process of a restarted node:
        the regions setup carved get their contents back, everything carved later (thread
        buffers, staging rings, RPC verbs buffers: the dead process's) is zeroed and the bump
        pointers go back, and the MRs the dead process (``dead_pid``) registered are dropped.
        Only the supervisor calls it, between the old process's death and the new one's fork."""
        from shm.fabric import MR_KEY, MR_PID
        mem = self.fabric.memory[slot]
        h, host, d, dev = self.setup_images[slot]
        mem.host[h:max(h, int(mem.alloc[0]))] = 0
        mem.host[:h] = host
        mem.device[d:max(d, int(mem.alloc[1]))] = 0
        mem.device[:d] = dev
        mem.alloc[0], mem.alloc[1] = h, d
        if dead_pid > 0:
            rows = mem.mrt[:, MR_PID] == dead_pid
            mem.mrt[rows, MR_KEY] = 0
        # (line locks stay: the kill step released the ones the dead process held, and another
        # process may hold one right now for a WRITE into this node's exposed memory)

    def slot(self, name: str) -> int:
        return next(i for i, n in enumerate(self.compiled.nodes) if n.name == name)

    @property
    def rack_id(self) -> str:
        """This rack's short id: the random part of its segment prefix (``dmrack.<pid>.<id>``), so
        the same id names its processes and its files in /dev/shm."""
        return self.prefix.rsplit(".", 1)[-1]

    def process_name(self, node: str) -> str:
        """What ``ps`` calls a node's process: ``dmrack-cn0-<rack id>``. Two racks side by side both
        had ``dmrack-cn0``; the kernel keeps 15 bytes of it as ``comm`` (cluster/node_main.py)."""
        return f"dmrack-{node}-{self.rack_id}"

    def close(self, *, check: bool = True) -> None:
        """Unlink every segment; with ``check``, then raise :class:`shm.calendar.CalendarAliased`
        if a fabric calendar aliased (the run's timing is wrong: it must not give numbers)."""
        for part in (self.history, self.clock, self.control, self.plane):
            if part is not None:
                part.close()
        self.fabric.close(check=check)

    def __enter__(self):
        return self

    def __exit__(self, exc_type, *exc):
        self.close(check=exc_type is None)


# -- co-located ----------------------------------------------------------------------------------

class ColocatedRack:
    """Every node of the rack in this process, on one scheduler: deterministic for a seed."""

    def __init__(self, scenario, *, history: int = 0, trace=None):
        self.compiled = compile_scenario(scenario)
        self.history_capacity = history
        # a shm.sim.trace.TraceBounds: record a timeline of the run (self.tracer after run())
        self.trace_bounds = trace
        self.tracer = None
        self.history_ops = None             # the recorded operations, when history > 0 (a KV system)
        self.txn_run: TxnRun | None = None  # the recorded transactions, when history > 0 (a transactional system)
        for s in self.compiled.plan:
            if isinstance(s, (KillStep, RestartStep)):
                raise RackError(f"{scenario.source}: step {s.index} {s.action}s {s.node}, which needs a rack "
                                f"of processes (dmrack run), not a co-located one")
        self.state: RackState | None = None
        self.wall_s = 0.0
        self.verbs = 0

    def run(self, *, until_ns: int | None = None):
        """Run the whole scenario; returns :class:`cluster.results.Results`. A scenario whose last
        step runs until stopped needs ``until_ns`` (virtual time)."""
        from cluster.results import Results
        c = self.compiled
        if not c.finite and until_ns is None:
            raise RackError("a co-located rack needs finite steps or until_ns: the last step runs until stopped")
        with RackState.create(c, processes=False, history=self.history_capacity) as state:
            self.state = state
            env = Environment(seed=c.spec.seed)
            if self.trace_bounds is not None:
                from shm.sim.trace import Tracer
                self.tracer = env.tracer = Tracer(state.fabric, self.trace_bounds, provenance={
                    "rack": c.spec.name, "system": c.system.name, "profile": c.spec.profile_name,
                    "seed": c.spec.seed, "steps": [s.label for s in c.plan]}, env=env)
            # every node in this one environment, messages as scheduled calls (cluster/wiring.py)
            w = wire(state, env, writers=lambda name: _begun(state.plane.writer(state.slot(name))))
            host, self.udp, self.actor_contexts, mgr = w.host, w.udp, w.contexts, w.manager
            nodes = w.computes
            t0 = time.perf_counter()
            env.run(until=until_ns)
            self.wall_s = time.perf_counter() - t0
            state.control.set(F_DONE, 1)
            verbs = self.verbs = host.statistics().posted
            for node, writer in nodes:
                if mgr.step < len(c.plan):
                    node.stop()
                writer.heartbeat(env.now, env.statistics().events, verbs // max(len(nodes), 1),
                                 system=node.system_counters())    # with the operations that ended after the last step
                writer.finish(STATE_DONE)
            self._publish_memory(state)
            if isinstance(state.history, TxnHistoryLog):
                self.txn_run = collect_txn_run(state, coordinators_died=any(n.dead for n, _ in nodes))
            elif state.history is not None:
                self.history_ops = collect_history(state)
            self.env = env
            self.manager = mgr
            self.nodes = [n for n, _ in nodes]
            return Results.from_plane(state.plane, self.meta(env.now))

    def _publish_memory(self, state) -> None:
        """Memory nodes have no process here: publish their occupancy into their slots, as a
        memory node's heartbeat does in a rack of processes (the results show it either way)."""
        for decl in self.compiled.nodes:
            if decl.role != "memory":
                continue
            used, capacity = state.fabric.occupancy(decl.name)
            w = state.plane.writer(state.slot(decl.name))
            w.begin(0)
            w.set_counters(mem_used=used, mem_capacity=capacity)
            w.finish(STATE_DONE)

    def meta(self, vnow: int) -> dict:
        c = self.compiled
        spec = c.spec
        return {"rack": spec.name, "system": c.system.name, "profile": spec.profile_name, "seed": spec.seed,
                "mode": "co-located", "workloads": {n: w.describe() for n, w in c.workloads.items()},
                "steps": [s.label for s in c.plan], "wall_s": round(self.wall_s, 3), "virtual_ns": vnow}


def _begun(writer):
    """A stats slot writer begun for a node with no process of its own (pid 0)."""
    writer.begin(0)
    return writer


def collect_txn_history(state: RackState) -> list:
    """Every compute node's recorded transaction attempts (``nodes.txn_history.TxnRecord``, values
    as digests) in node order."""
    log = state.history
    full = [state.compiled.compute[i] for i in range(log.n_procs) if log.overflowed(i)]
    if full:
        raise RackError(f"the transaction history of {', '.join(full)} overflowed its {log.capacity:,} rows (or an "
                        f"attempt touched more than {MAX_ITEMS} records): it cannot be checked; record fewer")
    return [r for i in range(log.n_procs) for r in log.records(i)]


def primary_state(records: dict) -> dict:
    """``{(table, key): (version, value bytes)}`` of the primaries, from ``{table:
    TxnSystem.records(...)}`` (a record's replicas, the primary first)."""
    return {(t, k): (reps[0][0], reps[0][2]) for t, recs in records.items() for k, reps in recs.items()}


class TxnRun(NamedTuple):
    """What a transactional rack recorded, read by its owner once no coordinator runs: every
    attempt (``TxnRecord``, values as digests), what the system's recovery did (None: no compute
    node died, or the system has no ``recover``), then every record's replicas
    (``{table: {key: [(version, lock, value bytes, valid, offset), per replica]}}``)."""
    history: list
    recovered: dict | None
    records: dict

    def final_state(self) -> dict:
        """``{(table, key): (version, value bytes)}`` of the primaries."""
        return primary_state(self.records)


def collect_txn_run(state: RackState, *, coordinators_died: bool) -> TxnRun:
    """The history, then (when ``coordinators_died``) the system's recovery from its undo logs, as
    the rack's owner would run it with every coordinator stopped, then the records."""
    c = state.compiled
    history = collect_txn_history(state)
    recovered = None
    if coordinators_died and hasattr(c.system, "recover"):
        recovered = c.system.recover(state.fabric, state.layout)
    records = {t.name: c.system.records(state.fabric, state.layout, t.name) for t in c.workloads["default"].tables()}
    return TxnRun(history, recovered, records)


def collect_history(state: RackState) -> list:
    """Every compute node's recorded operations as checker ops (``nodes.history.Op``)."""
    from nodes import history as h
    Op = h.Op
    log = state.history
    full = [state.compiled.compute[i] for i in range(log.n_procs) if log.overflowed(i)]
    if full:
        raise RackError(f"the history of {', '.join(full)} overflowed its {log.capacity:,} records: it cannot be "
                        f"checked (an unrecorded write could explain any read); record fewer operations")
    ops = []
    for i in range(log.n_procs):
        rows = log.records(i).tolist()
        try:
            scans = h.scan_results(rows)
        except ValueError as e:
            raise RackError(f"the history of {state.compiled.compute[i]}: {e}") from None
        for slot, r in enumerate(rows):
            if r[h.R_KIND] == h.SCAN_ITEM:
                continue                # part of a scan's result (nodes/history.py)
            kind = h.KINDS[r[h.R_KIND]]
            ret = None if r[h.R_RET] == h.NONE else r[h.R_RET]
            value = None if r[h.R_VALUE] == h.NONE else r[h.R_VALUE]
            ok = None if ret is None else bool(r[h.R_OK])
            ops.append(Op(client=r[h.R_CLIENT], kind=kind, key=r[h.R_KEY], value=value, ok=ok, call=r[h.R_CALL],
                          ret=ret, result=scans.get(slot, ()) if kind == "scan" else (),
                          call_real=r[h.R_CALL_REAL] / 1e9,
                          ret_real=None if ret is None else r[h.R_RET_REAL] / 1e9))
    return ops
