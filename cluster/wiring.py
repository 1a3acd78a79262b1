"""One wiring path for every rack: the nodes one environment runs, built and hooked to it.

A rack runs its nodes either all in this process on one scheduler (co-located,
``cluster.rack.ColocatedRack``: deterministic for a seed) or one OS process per node, each in its
own clock-synchronised environment (``cluster/node_main.py``). Both build a node's objects here,
with :func:`wire`: the verbs host, the datagram net, the message routes, the compute nodes (their
stats slot, history region and insert sequence), the manager, the system's server actors, and
the signal that tells polling actors the plan is over. Two copies of this had drifted apart once
(a change to one wiring silently missing from the other), so there is one, and what really
differs between the two racks is a parameter or follows from the rack's state:

* **which nodes** an environment runs (``names``): every node co-located; one in a process;
* **the environment** itself, made by the caller: one seeded scheduler co-located (with a tracer,
  if asked); per process one synchronised with the others through the clock table, seeded per
  process address, started at the rack's current time for a restarted node;
* **how control messages travel**, which the rack state says (a rack of processes has a clock
  table, ``RackState.clock``): co-located, a scheduled call to the handler of a link address
  (``nodes.manager.ColocatedLink``); in a rack of processes, ``env.send`` to another process
  and, on arrival, a router (``shm.sim.router.Router``) that hands the message to its handler
  by kind. The verbs host of a process also maps fabric nodes to processes, so that a SEND to a
  node of another process travels as a message;
* **the stats slot writers** (``writers``): co-located, the rack begins each slot itself (pid 0);
  a node process began its own with its pid before wiring;
* **the manager's hooks** for kill and restart steps (``manager_hooks``): only a rack of
  processes has processes to kill (a co-located rack refuses those steps);
* **the end of the plan** for actors that poll (``ctx.stopped``): co-located, the manager's end
  fires it; in a rack of processes the manager sends every other process a stop message.

The order of creation is the co-located rack's, and must stay so: event sequence numbers, RNG
draws and memory allocations follow it, and they decide a co-located run's results. Compute nodes
come first (in the order of ``CompiledRack.compute``), then the manager, then the server actors
(``nodes.actors.ROLE_ORDER``), then the manager's process. A node process keeps the same order
for the nodes it runs, so its memory is carved as the co-located rack carves it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from cluster.control import F_LOADED, F_STEP, F_STEP_VSTART, SharedInsertSequence
from nodes import actors
from nodes.compute import ComputeNode
from nodes.manager import ColocatedLink, Manager
from shm.sim.router import (MSG_DONE, MSG_DRAIN, MSG_START, MSG_STOP, MSG_UDP, MSG_UDP_COPY, MSG_VERBS_SEND,
                            Router)
from shm.verbs import VerbsHost

MANAGER = "mgr"                       # the manager's node name (cluster.spec)


@dataclass
class Wiring:
    """What :func:`wire` built for one environment."""

    env: Any
    host: VerbsHost | None                   # None: the environment runs only the manager
    udp: Any = None                          # the process's datagram net (shm.udp.UdpNet), or None
    router: Router | None = None             # a rack of processes: this process's message routes
    computes: list = field(default_factory=list)   # (ComputeNode, its stats writer), compute order
    manager: Manager | None = None
    manager_proc: Any = None                 # the manager's process in env
    contexts: list = field(default_factory=list)   # the server actors' nodes.actors.NodeContext


def wire(state, env, names=None, *, writers: Callable[[str], Any],
         manager_hooks: dict | None = None) -> Wiring:
    """Build the nodes ``names`` (None: every node of the rack) of ``state`` (a
    ``cluster.rack.RackState``) in ``env`` and hook them to it; see the module docstring for what
    differs between a co-located rack and a rack of processes. ``writers(name)``: the stats slot
    writer of compute node ``name``, begun; ``manager_hooks``: ``kill_node``, ``is_alive``,
    ``restart_node`` of :class:`nodes.manager.Manager` (a rack of processes)."""
    c = state.compiled
    processes = state.clock is not None
    only = None if names is None else set(names)

    def runs(name: str) -> bool:
        return only is None or name in only

    out = Wiring(env, None)
    # The manager needs no verbs host (and must not get one: a host bounds its env's lookahead).
    if only is None or only - {MANAGER}:
        if processes:
            (me,) = only                     # a node process runs one node
            out.host = VerbsHost(state.fabric, env, proc_of_node=c.proc_of_node(), my_proc=c.address(me))
        else:
            out.host = VerbsHost(state.fabric, env)
        out.udp = actors.rack_udp(state, out.host, only=only)
    host, udp = out.host, out.udp

    if processes:
        (me,) = only
        router = out.router = Router(me)
        if host is not None:
            router.on(MSG_VERBS_SEND, host.on_message)
        if udp is not None:
            router.on(MSG_UDP, lambda _src, p: udp.deliver(False, p[1:]))
            router.on(MSG_UDP_COPY, lambda _src, p: udp.deliver(True, p[1:]))
        env.on_message = router

        def sender(_address: int):
            return env.send

        def bind(_address: int, kind: int, handler) -> None:
            router.on(kind, handler)
    else:
        link = ColocatedLink(env)
        sender = link.sender

        def bind(address: int, _kind: int, handler) -> None:
            link.bind(address, handler)

    for i, name in enumerate(c.compute):
        if not runs(name):
            continue
        writer = writers(name)
        node = make_compute(state, env, host, name, sender(i), writer, udp=udp)
        handler = compute_handler(node)
        bind(i, MSG_START, handler)
        bind(i, MSG_DRAIN, handler)
        out.computes.append((node, writer))
    manager_addr = len(c.compute)
    if runs(MANAGER):
        out.manager = make_manager(state, env, sender(manager_addr), **(manager_hooks or {}))
        bind(manager_addr, MSG_DONE, out.manager.on_message)
    if host is not None and getattr(c.system, "servers", None):
        # server actors (nodes/actors.py): only a system that declares some gets any; looked up on
        # the module when called, so a test can wrap actor_contexts
        out.contexts = actors.actor_contexts(state, env, host, only=only, udp=udp)
        actors.start_actors(c.system, out.contexts)
    if out.manager is not None:
        out.manager_proc = env.process(out.manager.run(), name="manager")
    _end_of_plan(state, out, processes)
    return out


def _end_of_plan(state, out: Wiring, processes: bool) -> None:
    """Hook ``ctx.stopped`` (fires when the plan is over: an actor that polls ends on it)."""
    c = state.compiled
    stopped = out.contexts[0].stopped if out.contexts else None
    if not processes:
        if stopped is not None:
            out.manager_proc.callbacks.append(lambda _ev: stopped.succeed())
        return
    if out.manager is not None:
        if getattr(c.system, "servers", None):
            env = out.env
            address = len(c.compute)
            latency = c.spec.profile.link.one_way_ns

            def announce(_ev) -> None:
                # the plan is over: every other process's actors that poll may end (ctx.stopped)
                for dest in range(c.n_procs):
                    if dest != address and not state.clock.gone(dest):
                        env.send(dest, env.now + latency, (MSG_STOP,))
            out.manager_proc.callbacks.append(announce)
        return

    def stop(_src, _p) -> None:
        if stopped is not None and not stopped.triggered:
            stopped.succeed()
    out.router.on(MSG_STOP, stop)


def make_compute(state, env, host, name: str, send, recorder, udp=None) -> ComputeNode:
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
                       smart=smart, udp=udp, connect=spec.compute.connect)


def compute_handler(node: ComputeNode):
    """A compute node's control messages: the manager's START of a step, its DRAIN at the end."""
    def on_message(src: int, payload: tuple) -> None:
        if payload[0] == MSG_START:
            node.start(int(payload[1]), int(payload[2]))
        elif payload[0] == MSG_DRAIN:
            node.drain()
        else:
            raise ValueError(f"{node.name}: unexpected control message {payload!r}")
    return on_message


def make_manager(state, env, send, *, kill_node=None, is_alive=None, restart_node=None) -> Manager:
    """The manager, publishing the step and the records loaded to the rack's control block."""
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
