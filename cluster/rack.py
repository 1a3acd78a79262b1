"""The rack: the one object that turns a scenario (plain data) into live nodes.

As in Mininet, where ``Topo.build()`` is data and ``Mininet(topo)`` makes it live, a
:class:`cluster.scenario.Scenario` only describes the rack; this module

1. *compiles* it: builds every workload it names (so a bad property fails before anything
   exists), checks the system can run them, and lowers the steps to :class:`PlanStep` records;
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
from dataclasses import dataclass, field

from cluster.control import F_DONE, F_LOADED, F_STEP, F_STEP_VSTART, ControlBlock, SharedInsertSequence
from cluster.scenario import table_capacity
from cluster.stats import STATE_DONE, ProcInfo, StatsPlane
from nodes.compute import ComputeNode, PlanStep
from nodes.history import HistoryLog
from nodes.manager import MSG_DONE, MSG_START, ColocatedLink, Manager
from shm.sim.env import Environment
from shm.sim.sync import ClockTable
from nodes.systems import get_system
from shm.messages import SystemGaveUp
from shm.fabric import Fabric
from shm.segment import new_prefix
from shm.verbs import VerbsHost


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
    plan: list[PlanStep]
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
        return all(s.action not in ("run", "sleep") or s.duration_ns > 0
                   or (s.action == "run" and getattr(self.workloads.get(s.workload), "finite", False))
                   for s in self.plan)

    def describe_workloads(self) -> str:
        used = [s.workload for s in self.plan if s.workload]
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
    plan: list[PlanStep] = []
    for i, st in enumerate(scenario.steps):
        action = st.action
        wname = getattr(st, "workload", None)
        if action in ("load", "run"):
            wname = wname or "default"
            if wname not in workloads:
                raise RackError(f"{scenario.source}: step {st.index} uses workload {wname!r}, which is not defined")
        wl = workloads.get(wname) if wname else None
        if action == "run" and wl is not None and wl.proportions.scan > 0 and not system.supports_scan:
            raise RackError(f"{scenario.source}: step {st.index}: workload {wname!r} has scans "
                            f"(scanproportion > 0) but system {system.name!r} offers no scan")
        duration_ms = getattr(st, "duration_ms", None) or 0
        count = getattr(st, "count", None)
        if action == "load" and not count:
            count = wl.recordcount
        bulk = getattr(st, "bulk", None) if action == "load" else False
        if bulk is None:            # the file left it to the rack: bulk while the structure is empty
            bulk = has_bulk and not any(p.action in ("load", "run") for p in plan)
        if bulk and not has_bulk:
            raise RackError(f"{scenario.source}: step {st.index}: bulk = true, but system {system.name!r} has no "
                            f"bulk load; load its keys with inserts (drop bulk)")
        label = _label(action, st, wname, wl, duration_ms, count, bulk)
        plan.append(PlanStep(index=i, action=action, label=label, workload=wname,
                             duration_ns=int(round(duration_ms * 1e6)), count=int(count or 0),
                             knob=getattr(st, "knob", None), value=getattr(st, "value", 0.0) or 0.0,
                             node=getattr(st, "node", None), bulk=bulk))
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


def _label(action, st, wname, wl, duration_ms, count, bulk) -> str:
    if action == "load":
        return f"{'bulk-load' if bulk else 'load'} {count:,} records ({wname})"
    if action == "run":
        how = f"for {duration_ms:g} ms" if duration_ms else "until stopped"
        return f"run {wname} {how}"
    if action == "set":
        return f"set {st.knob} = {st.value:g}"
    if action == "kill":
        return f"kill {st.node}"
    if action == "restart":
        return f"restart {st.node}"
    return f"sleep {duration_ms:g} ms"


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
    history: HistoryLog | None = None
    # compute node slot -> (host bump pointer, host bytes, device bump pointer, device bytes) as
    # System.setup left them: what a restarted node's memory is reset to (reset_node_memory)
    setup_images: dict = field(default_factory=dict)

    @classmethod
    def create(cls, compiled: CompiledRack, *, processes: bool, history: int = 0) -> "RackState":
        """``history``: record up to that many operations per compute node (0: none)."""
        spec = compiled.spec
        short = [n for n, w in compiled.workloads.items() if history and w.value_size < 16]
        if short:
            raise RackError(f"{compiled.scenario.source}: recording a history needs values of at least 16 bytes "
                            f"(they carry the version that tells writes apart); workload {short[0]!r} has valuesize "
                            f"{compiled.workloads[short[0]].value_size}")
        prefix = new_prefix()
        parts = []
        try:
            fabric = Fabric.create(spec.profile, [n.fabric_spec() for n in compiled.nodes], prefix=prefix)
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
            if history:
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
                layout = compiled.system.setup(fabric, mns, compiled.options, compiled.capacity)
            except (SystemGaveUp, MemoryError) as e:
                # The spec's capacity check (System.footprint) is a lower bound; a table that still
                # does not fit is the same bad input: one line naming the scenario, not a traceback.
                raise RackError(f"{compiled.scenario.source}: {e}") from None
            images = {}
            if processes and any(s.action == "restart" for s in compiled.plan):
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


def make_compute(state: RackState, env, host, name: str, send, recorder, udp=None) -> ComputeNode:
    """One compute node wired to the manager through ``send`` (link address of the manager = K)."""
    c = state.compiled
    spec = c.spec
    index = c.compute.index(name)
    manager_addr = len(c.compute)
    latency = spec.profile.link.one_way_ns

    def on_done(step: int, end: int, ops: int) -> None:
        send(manager_addr, end + latency, (MSG_DONE, step, end, ops))

    smart = spec.smart_config(getattr(c.system, "smart_defaults", None))
    return ComputeNode(env, host, name, index=index, n_compute=len(c.compute), threads=spec.compute.threads,
                       coroutines=spec.compute.coroutines, qp_policy=spec.compute.qp_policy,
                       threads_per_qp=spec.compute.threads_per_qp, system=c.system,
                       layout=state.layout, options=c.options, workloads=c.workloads, plan=c.plan,
                       recorder=recorder, inserts=SharedInsertSequence(state.control), on_done=on_done,
                       seed=spec.seed, history=state.history.writer(index) if state.history else None,
                       smart=smart, udp=udp)


def compute_handler(node: ComputeNode):
    def on_message(src: int, payload: tuple) -> None:
        if payload[0] != MSG_START:
            raise ValueError(f"{node.name}: unexpected control message {payload!r}")
        node.start(int(payload[1]), int(payload[2]))
    return on_message


def make_manager(state: RackState, env, send, *, kill_node=None, is_alive=None, restart_node=None) -> Manager:
    c = state.compiled
    control = state.control
    plane = state.plane
    inserts = SharedInsertSequence(control)

    def on_step(i: int, t: int) -> None:
        control.set(F_STEP_VSTART, t)
        control.set(F_STEP, i)

    def on_loaded(n: int) -> None:
        control.set(F_LOADED, n)
        inserts.reset(n)

    return Manager(env, c.plan, dict(enumerate(c.compute)), send, latency_ns=c.spec.profile.link.one_way_ns,
                   log=plane.log, on_step=on_step, on_loaded=on_loaded, kill_node=kill_node, is_alive=is_alive,
                   keep_going=c.spec.on_node_death == "continue", restart_node=restart_node)


# -- co-located ----------------------------------------------------------------------------------

class ColocatedRack:
    """Every node of the rack in this process, on one scheduler: deterministic for a seed."""

    def __init__(self, scenario, *, history: int = 0, trace=None):
        self.compiled = compile_scenario(scenario)
        self.history_capacity = history
        # a shm.sim.trace.TraceBounds: record a timeline of the run (self.tracer after run())
        self.trace_bounds = trace
        self.tracer = None
        self.history_ops = None             # the recorded operations, when history > 0
        for s in self.compiled.plan:
            if s.action in ("kill", "restart"):
                raise RackError(f"{scenario.source}: step {s.index + 1} {s.action}s {s.node}, which needs a rack "
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
            host = VerbsHost(state.fabric, env)
            from nodes.actors import rack_udp
            self.udp = rack_udp(state, host)
            link = ColocatedLink(env)
            nodes = []
            for i, name in enumerate(c.compute):
                slot = state.slot(name)
                writer = state.plane.writer(slot)
                writer.begin(0)
                node = make_compute(state, env, host, name, link.sender(i), writer, udp=self.udp)
                link.bind(i, compute_handler(node))
                nodes.append((node, writer))
            mgr = make_manager(state, env, link.sender(len(c.compute)))
            link.bind(len(c.compute), mgr.on_message)
            self.actor_contexts = []
            if getattr(c.system, "servers", None):
                # server actors (nodes/actors.py): only a system that declares some gets any
                from nodes.actors import actor_contexts, start_actors
                self.actor_contexts = actor_contexts(state, env, host, udp=self.udp)
                start_actors(c.system, self.actor_contexts)
            mgr_proc = env.process(mgr.run(), name="manager")
            if self.actor_contexts:
                # ctx.stopped fires when the plan is over: an actor that polls ends on it
                stopped = self.actor_contexts[0].stopped
                mgr_proc.callbacks.append(lambda _ev: stopped.succeed())
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
            if state.history is not None:
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
