"""Server actors: a system's code on any node role, not only its clients on compute threads.

A system declares, per role, a function that the rack calls once for every node of that role
before the scenario starts (``System.servers``, see docs/adding-a-system.md, "Server actors on
any role")::

    class MySystem(System):
        servers = {"memory": memory_server, "compute": compute_server}

    def memory_server(ctx: NodeContext):
        ...                       # set up (QPs, buffers) right here, at virtual time 0
        return [serve(ctx)]       # generators: each runs as a process on the node's environment

Each returned generator runs as one process of the node's virtual-time environment
(shm/sim/env.py) from time 0, beside the compute nodes' clients, and may ``yield`` events,
timeouts and ``CQ.wait()`` as any actor does. The :class:`NodeContext` it gets carries what is
in reach on that node: its name, fabric index and role, the environment, the verbs host (make a
:meth:`NodeContext.verbs` context for QPs, CQs and MRs on this node), its memory, the layout and
options the system's ``setup`` produced, and the node's modelled CPU (:meth:`NodeContext.cpu`).

Order: the functions run for every memory node (in node order), then every compute node, before
any actor runs; ``ctx.directory`` is one dict shared by the rack, so a server can publish what its
peers need to connect (a QP number) and the functions called after it can read it.

Roles: ``memory``, ``compute``, ``dpu`` and ``dpa`` (the device nodes of a rack's ``[dpu]`` and
``[dpa]`` tables, docs/devices.md). A memory node runs actors only with ``[memory] cores`` >= 1
(the spec refuses a system with memory actors on a rack whose memory nodes have no CPU; without
actors memory nodes stay passive, as before). A compute node's actors get cores of their own
(``[compute] threads`` of them), not shared with its client threads: an assumption, stated so,
that keeps the clients' timing exactly what it was. A DPU's context has its Arm cores
(``[dpu] cores`` at ``dpu.ghz``), its DMA engine into its host's memory (``ctx.dma``) and its RX
queue; a DPA's has ``ctx.dpa`` (cores, caches, up to ``[dpa] threads`` hardware threads), its DMA
engine and one RX queue per thread. Every context has the process's datagram net (``ctx.udp``).

In a rack of processes every node that runs actors is a process in the virtual clock (compute
nodes already are; memory nodes with actors, DPUs and DPAs join it), and ``ctx.directory`` is
per process: a server must not count on what another process published, but derive addresses
from the layout its ``setup`` made. ``ctx.stopped`` fires in every process when the plan is over.

An actor must wait on events rather than poll with timeouts for ever: the co-located rack runs
until nothing is left to happen, exactly as without actors (so operations in flight at the end of
the last step complete and count, and a system's figures do not move). An actor parked on an event
that never fires costs nothing; one that polls must end once ``ctx.stopped`` (one rack-wide event,
fired when the manager has finished the plan) has triggered, or the run never ends.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

#: Every role a system may name in ``servers`` (the device roles plug in here when they exist).
ACTOR_ROLES = ("memory", "compute", "dpu", "dpa")
#: The roles this version of the rack can run actors on.
AVAILABLE_ROLES = ("memory", "compute", "dpu", "dpa")


class Cores:
    """``n`` modelled cores of one node: a charge goes to the core that frees first, and the
    active process resumes when its work there is done (as ``shm.coro.RdmaThread.cpu`` does for
    one core). ``busy_ns`` sums what was charged."""

    def __init__(self, env, n: int, ghz: float):
        if n < 1:
            raise ValueError(f"a node's CPU needs at least 1 core, got {n}")
        self.env = env
        self.n = n
        self.ghz = ghz
        self.free = [0] * n
        self.busy_ns = 0
        self.charges = 0

    def charge(self, ns: int) -> None:
        env = self.env
        actor = env.active_process
        if actor is None:
            raise RuntimeError("Cores.charge() called outside an actor")
        if ns < 0:
            raise ValueError(f"negative CPU charge {ns}")
        ready = env.now + actor.debt_ns
        i = min(range(self.n), key=self.free.__getitem__)
        start = max(ready, self.free[i])
        self.free[i] = start + ns
        env.charge(start + ns - ready)
        self.busy_ns += ns
        self.charges += 1

    def cycles_ns(self, cycles: int) -> int:
        return int(round(cycles / self.ghz))


@dataclass
class NodeContext:
    """What a server actor has in reach on its node (see the module docstring)."""

    name: str                    # "mn0", "cn1", ...
    index: int                   # the node's fabric index (global addresses use it)
    role: str                    # one of AVAILABLE_ROLES
    env: Any                     # shm.sim.env.Environment
    host: Any                    # shm.verbs.VerbsHost of this process
    fabric: Any                  # shm.fabric.Fabric
    layout: dict                 # what System.setup returned
    options: dict                # the system's options, filled
    cores: Cores                 # the node's modelled CPU
    directory: dict = field(default_factory=dict)   # rack-wide, shared by every node's context
    stopped: Any = None          # rack-wide event: fires when the manager has finished the plan
    host_node: int | None = None  # a DPU's or DPA's host compute node (fabric index); else None
    dma: Any = None              # a DPU's or DPA's DMA engine into its host's memory (shm.dma.DmaEngine)
    dpa: Any = None              # a DPA node's cores, caches and threads (nodes.devices.dpa_core.Dpa)
    udp: Any = None              # the process's datagram net (shm.udp.UdpNet), if the profile has [udp]
    queues: tuple = ()           # this node's default RX queues (see rack_udp)
    rings: list = field(default_factory=list)   # DMA rings its actors serve (shm.dmaring.DmaRing): their
                                                # depth is published with the node's counters
    _verbs: Any = None

    @property
    def profile(self):
        return self.fabric.profile

    @property
    def memory(self):
        """The node's memory (``shm.fabric.NodeMemory``: ``host`` and ``device`` byte arrays)."""
        return self.fabric.memory[self.index]

    def allocate(self, nbytes: int, **kw) -> int:
        """``nbytes`` of this node's memory (``Fabric.allocate``): the offset."""
        return self.fabric.allocate(self.index, nbytes, **kw)

    def verbs(self):
        """This node's verbs context (``shm.verbs.Context``, one per node context, made on first
        use): build a PD, CQs, MRs and QPs on it."""
        if self._verbs is None:
            from shm.verbs import Context
            self._verbs = Context(self.host, self.index)
        return self._verbs

    def cpu(self, ns: int) -> None:
        """Charge ``ns`` of CPU work to the active actor on this node's cores."""
        self.cores.charge(int(ns))


#: The order in which a rack calls the servers functions of its nodes' roles.
ROLE_ORDER = ("memory", "compute", "dpu", "dpa")


def modelled_cores(spec, role: str) -> tuple[int, float]:
    """(cores, GHz) a node of ``role`` has in ``spec``: what its actors run on, and what the
    dashboard shows for it even when the system runs no actor there (a DPU that only mirrors)."""
    prof = spec.profile
    if role == "memory":
        return spec.memory.cores, prof.cpu.ghz
    if role == "compute":
        return spec.compute.threads, prof.cpu.ghz
    if role == "dpu":
        return spec.dpu.cores, prof.dpu.ghz
    if role == "dpa":
        return prof.dpa.cores, prof.dpa.ghz
    return 0, prof.cpu.ghz


def actor_contexts(state, env, host, *, directory: dict | None = None, only=None, udp=None) -> list[NodeContext]:
    """A context for every node the system runs actors on: memory nodes, compute nodes, DPUs, DPAs.
    ``only``: the node names this process runs (a rack of processes; default: all). ``udp``: the
    process's datagram net (:func:`rack_udp`)."""
    c = state.compiled
    servers = getattr(c.system, "servers", None) or {}
    spec = c.spec
    prof = spec.profile
    directory = {} if directory is None else directory
    stopped = env.event()
    out = []
    for role in ROLE_ORDER:
        if role not in servers:
            continue
        for i, decl in enumerate(c.nodes):
            if decl.role != role or (only is not None and decl.name not in only):
                continue
            host_node = dma = dpa = None
            if role == "dpa":
                from nodes.devices.dpa_core import Dpa
                dpa = Dpa(env, prof, threads=spec.dpa.threads, name=decl.name)
            # a DPA's own work is charged to its threads (dpa.thread()); its cores here stand for the
            # DPA cores for code that charges ctx.cpu() instead
            cores = Cores(env, *modelled_cores(spec, role))
            if decl.host is not None:
                from shm.dma import DmaEngine
                host_node = state.fabric.node_index(decl.host)
                dma = DmaEngine(host, i, host_node)
            queues = tuple(q for q in (udp.queues.values() if udp is not None else ()) if q.node == i)
            out.append(NodeContext(decl.name, i, role, env, host, state.fabric, state.layout, c.options,
                                   cores, directory, stopped, host_node=host_node, dma=dma, dpa=dpa, udp=udp,
                                   queues=queues))
    return out


def default_queues(spec, decl, system=None) -> list[str]:
    """The RX queues a node has from the start: one per DPA thread (``dpa0.t3``), those the system
    (``system``, the rack's system class: ``CompiledRack.system``) asks for on that node
    (``System.rx_queues(spec, node)``, e.g. one per host application thread, as a NIC's RSS queues:
    ``cn0.a0``..), else one (``cn0.rx``). The caller hands the class in, so that this module, which
    the systems import, never looks systems up itself."""
    if decl.role == "dpa":
        return [f"{decl.name}.t{i}" for i in range(spec.dpa.threads)]
    hook = getattr(system, "rx_queues", None)
    extra = hook(spec, decl.name) if hook is not None else None
    if extra:
        bad = [q for q in extra if not (isinstance(q, str) and q.startswith(f"{decl.name}.") and q != f"{decl.name}.")]
        if bad:
            raise ValueError(f"system {spec.system.name!r}: RX queue {bad[0]!r} of node {decl.name!r} must be "
                             f"named '{decl.name}.<name>'")
        return list(extra)
    return [f"{decl.name}.rx"]


def steer_rules(compiled) -> dict:
    """The rack's steering rules per node name, as the lists ``UdpNet.set_rules`` takes: the spec's
    ``[[steer]]`` first (first match wins, so a file can override), then the system's
    (``System.steering``). Each is a :class:`shm.steering.SteerRule` naming its ``node``; here a
    target or mirror that names a node becomes that node's queues, and the rule goes to its node's
    list (without the ``node``, which the list says)."""
    from dataclasses import replace
    spec = compiled.spec
    decls = {d.name: d for d in compiled.nodes}
    system_rules = getattr(compiled.system, "steering", None)
    rules = list(spec.steer) + list(system_rules(spec) if system_rules else ())

    def queues(target: str):
        if "." in target:
            return (target,)
        return tuple(default_queues(spec, decls[target], compiled.system))

    out: dict = {}
    for r in rules:
        targets = queues(r.target)
        mirror = queues(r.mirror)[0] if r.mirror else None
        out.setdefault(r.node, []).append(replace(r, target=targets[0] if len(targets) == 1 else targets,
                                                  mirror=mirror, node=None))
    return out


def rack_udp(state, host, *, only=None):
    """The datagram net of one process of a rack: the default queues of the nodes it runs
    (``only``; default all) and every node's steering rules (the same in every process). None if
    the profile has no ``[udp]`` table."""
    if state.compiled.spec.profile.udp is None:
        return None
    from shm.udp import UdpNet
    c = state.compiled
    net = UdpNet(host)
    for decl in c.nodes:
        if decl.role == "manager" or (only is not None and decl.name not in only):
            continue
        for qid in default_queues(c.spec, decl, c.system):
            net.add_queue(decl.name, qid)
    for node, rules in steer_rules(c).items():
        net.set_rules(node, rules)
    return net


def start_actors(system, contexts: list[NodeContext]) -> list:
    """Call the system's server function for every context, then start every actor it returned
    as a process (named ``<node>.<role>.<n>``). Returns the processes."""
    servers = getattr(system, "servers", None) or {}
    pending = []
    for ctx in contexts:
        gens = servers[ctx.role](ctx) or []
        for k, gen in enumerate(gens):
            pending.append((f"{ctx.name}.{ctx.role}.{k}", ctx.env, gen))
    return [env.process(gen, name=name) for name, env, gen in pending]
