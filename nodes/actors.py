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
(nodes/runtime/env.py) from time 0, beside the compute nodes' clients, and may ``yield`` events,
timeouts and ``CQ.wait()`` as any actor does. The :class:`NodeContext` it gets carries what is
in reach on that node: its name, fabric index and role, the environment, the verbs host (make a
:meth:`NodeContext.verbs` context for QPs, CQs and MRs on this node), its memory, the layout and
options the system's ``setup`` produced, and the node's modelled CPU (:meth:`NodeContext.cpu`).

Order: the functions run for every memory node (in node order), then every compute node, before
any actor runs; ``ctx.directory`` is one dict shared by the rack, so a server can publish what its
peers need to connect (a QP number) and the functions called after it can read it.

Roles: ``memory`` and ``compute`` today; ``dpu`` and ``dpa`` are reserved for the device roles of
issue 22 (a spec whose system names them is refused until they exist). A memory node runs actors
only with ``[memory] cores`` >= 1 (the spec refuses a system with memory actors on a rack whose
memory nodes have no CPU; without actors memory nodes stay passive, as before). A compute node's
actors get cores of their own (``[compute] threads`` of them), not shared with its client threads:
an assumption, stated so, that keeps the clients' timing exactly what it was.

Actors are co-located-rack only for now: a rack of processes refuses a system that declares any
(the memory nodes there are heartbeat-only processes outside the virtual clock).

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
AVAILABLE_ROLES = ("memory", "compute")


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
        ready = env.now + actor._debt
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
    env: Any                     # nodes.runtime.env.Environment
    host: Any                    # shm.verbs.VerbsHost of this process
    fabric: Any                  # shm.fabric.Fabric
    layout: dict                 # what System.setup returned
    options: dict                # the system's options, filled
    cores: Cores                 # the node's modelled CPU
    directory: dict = field(default_factory=dict)   # rack-wide, shared by every node's context
    stopped: Any = None          # rack-wide event: fires when the manager has finished the plan
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


def actor_contexts(state, env, host, *, directory: dict | None = None) -> list[NodeContext]:
    """A context for every node the system runs actors on: memory nodes, then compute nodes."""
    c = state.compiled
    servers = getattr(c.system, "servers", None) or {}
    spec = c.spec
    ghz = spec.profile.cpu.ghz
    directory = {} if directory is None else directory
    stopped = env.event()
    out = []
    for role in ("memory", "compute"):
        if role not in servers:
            continue
        n = spec.memory.cores if role == "memory" else spec.compute.threads
        for i, decl in enumerate(c.nodes):
            if decl.role != role:
                continue
            out.append(NodeContext(decl.name, i, role, env, host, state.fabric, state.layout, c.options,
                                   Cores(env, n, ghz), directory, stopped))
    return out


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
