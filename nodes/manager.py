"""The manager: runs a scenario's steps over virtual time.

Steps are executed by the compute nodes; the manager only sequences them. For each step it sends
every live compute node ``START(step, t)`` with ``t`` = now + one control-message latency, waits
for ``DONE(step, end, ops)`` from each of them, and starts the next step one latency after the
last ``DONE`` arrived. Loads end when every record is in, runs when their duration has passed and
the last operation returned, so a step boundary is the same virtual instant on every node.
After the last step it sends ``DRAIN`` and waits for every node's ``DONE`` once the operations
still in flight from timed runs have finished: only then is the plan over for the rack's server
actors (``ctx.stopped``), so an operation that outlasts the last window is still served.

The messages travel through a *link*: in a rack of processes that is the clock-synchronised
message layer (``env.send``/``env.on_message``), in a co-located rack a scheduled call. Both give
the same virtual-time behaviour, which is why the manager never needs to know which it has.

The plan is the scenario's typed steps (``nodes/steps.py``), in order; a step's position in it is
what the messages and the stats plane carry. The manager tells the steps apart by type.

A ``kill`` step is the manager's own: it asks the rack (``kill_node``) to SIGKILL the node's
process, logs it, and stops waiting for that node. With ``on_node_death = "continue"`` it also
notices nodes that die on their own (``is_alive``) while it waits. A ``restart`` step asks the
rack (``restart_node``) for a new process of a node a kill step killed, which joins the clock at
the manager's current virtual time; the node takes part in the steps from the next one on.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

from nodes.steps import KillStep, LoadStep, RestartStep
from shm.sim.env import any_of
from shm.sim.router import MSG_DONE, MSG_DRAIN, MSG_START  # noqa: F401 - the message kinds live in one place

DEATH_POLL_NS = 20_000          # how often a waiting manager looks for dead nodes ("continue" mode)
#: The longest the manager waits, after the plan, for the compute nodes' operations still in
#: flight (virtual ns): a generous bound (a hot-key update has outlasted a window by a few ms), so
#: that an operation stuck for good (a lock whose holder crashed) cannot hold the rack open.
DRAIN_LIMIT_NS = 50_000_000


class ColocatedLink:
    """Control messages between processes of one Environment: delivery is a scheduled call."""

    def __init__(self, env):
        self.env = env
        self.handlers: dict[int, Callable] = {}

    def bind(self, dest: int, handler: Callable[[int, tuple], None]) -> None:
        self.handlers[dest] = handler

    def sender(self, src: int) -> Callable[[int, int, tuple], None]:
        def send(dest: int, arrival: int, payload: tuple) -> None:
            self.env.schedule(arrival, self._deliver, (dest, src, payload))
        return send

    def _deliver(self, arg) -> None:
        dest, src, payload = arg
        self.handlers[dest](src, payload)


class ManagerStats(NamedTuple):
    step: int
    steps: int
    waiting_for: tuple
    dead: tuple
    loaded: int


class Manager:
    """Sequences the plan's steps over the compute nodes (see the module docstring)."""

    def __init__(self, env, plan, compute: dict[int, str], send: Callable[[int, int, tuple], None], *,
                 latency_ns: int, log: Callable[[int, str, str, str], None],
                 on_step: Callable[[int, int], None] = lambda i, t: None,
                 on_loaded: Callable[[int], None] = lambda n: None,
                 kill_node: Callable[[str], None] | None = None,
                 is_alive: Callable[[int], bool] | None = None, keep_going: bool = False,
                 restart_node: Callable[[str, int], None] | None = None):
        self.env = env
        self.plan = plan
        self.compute = dict(compute)        # link address -> node name
        self.send = send
        self.latency = latency_ns
        self.log = log
        self.on_step = on_step
        self.on_loaded = on_loaded
        self.kill_node = kill_node
        self.is_alive = is_alive
        self.keep_going = keep_going
        self.restart_node = restart_node
        self.step = -1
        self.loaded = 0
        self.dead: set[int] = set()
        self._pending: set[int] = set()
        self._ends: list[int] = []
        self._ops: dict[int, int] = {}
        self._all_done = None

    def statistics(self) -> ManagerStats:
        return ManagerStats(self.step, len(self.plan), tuple(sorted(self._pending)), tuple(sorted(self.dead)),
                            self.loaded)

    def on_message(self, src: int, payload: tuple) -> None:
        if payload[0] != MSG_DONE:
            raise ValueError(f"manager: unexpected control message {payload!r} from {src}")
        _, step, end, ops = payload[:4]
        if step != self.step or src not in self._pending:
            raise ValueError(f"manager: DONE for step {step} from {src} while in step {self.step}")
        self._pending.discard(src)
        self._ends.append(end)
        self._ops[src] = ops
        self._check_done()

    def _check_done(self) -> None:
        if not self._pending and self._all_done is not None and not self._all_done.triggered:
            self._all_done.succeed()

    def _notice_deaths(self) -> None:
        for addr in list(self._pending):
            if not self.is_alive(addr):
                self._declare_dead(addr, "died")

    def _declare_dead(self, addr: int, how: str) -> None:
        self.dead.add(addr)
        self._pending.discard(addr)
        self.log(self.env.now, "fault", self.compute[addr], f"{self.compute[addr]} {how}; the rack carries on")
        self._check_done()

    def run(self):
        """The manager's process: every step in order, then return (the rack then quiesces)."""
        env = self.env
        t = env.now
        for position, step in enumerate(self.plan):
            self.step = position
            match step:
                case KillStep(node=node):
                    victim = next(a for a, n in self.compute.items() if n == node) \
                        if node in self.compute.values() else None
                    self.log(env.now, "fault", node, f"scenario kills {node}")
                    self.kill_node(node)
                    if victim is not None:
                        self.dead.add(victim)
                    continue
                case RestartStep(node=node):
                    addr = next(a for a, n in self.compute.items() if n == node)
                    if self.restart_node is None:
                        raise RuntimeError(f"step {position + 1}: restart {node} needs a rack of processes")
                    self.log(env.now, "fault", node, f"scenario restarts {node}")
                    self.restart_node(node, position)     # returns once the new process has joined
                    self.dead.discard(addr)
                    continue
            start = env.now + self.latency
            self.on_step(position, start)
            self.log(start, "step", "mgr", f"step {position + 1}/{len(self.plan)}: {step.label}")
            yield from self._ask_live((MSG_START, position, start), start)
            if isinstance(step, LoadStep):
                self.loaded += step.count
                self.on_loaded(self.loaded)
            t = max(self._ends, default=env.now)
            if t > env.now:
                yield t - env.now
        self.log(env.now, "phase", "mgr", "scenario finished")
        self.step = len(self.plan)
        yield from self._drain()
        return t

    def _drain(self):
        """After the plan: DRAIN every live compute node and wait (up to ``DRAIN_LIMIT_NS``) for its
        DONE, sent once its operations still in flight have finished. The manager's process ends
        after it, and with it the plan (``ctx.stopped``: actors that poll end), so no server actor
        stops while a client still waits for it."""
        env = self.env
        start = env.now + self.latency
        yield from self._ask_live((MSG_DRAIN,), start, deadline=start + DRAIN_LIMIT_NS)
        if self._pending:
            names = ", ".join(self.compute[a] for a in sorted(self._pending))
            self.log(env.now, "fault", "mgr", f"operations still in flight on {names} after "
                     f"{DRAIN_LIMIT_NS / 1e6:g} ms past the plan; the rack ends without them")

    def _ask_live(self, payload: tuple, at: int, *, deadline: int | None = None):
        """Send ``payload`` to every live compute node, arriving at ``at``, and wait for each one's
        DONE (or, with ``on_node_death = "continue"``, its death; or ``deadline``, if given)."""
        env = self.env
        live = [a for a in self.compute if a not in self.dead]
        self._pending = set(live)
        self._ends = []
        self._all_done = env.event()
        for addr in live:
            self.send(addr, at, payload)
        timer = None
        while self._pending and (deadline is None or env.now < deadline):
            if self.keep_going and self.is_alive is not None:
                yield DEATH_POLL_NS
                self._notice_deaths()
            elif deadline is None:
                yield self._all_done
            else:
                timer = env.timeout(deadline - env.now)
                yield any_of(env, [self._all_done, timer])
        if timer is not None:
            # every node answered before the deadline: without this its timeout would still be
            # popped at the deadline, and the rack's clock (the dashboard's vtime and speed, a
            # run's virtual time) would end DRAIN_LIMIT_NS past its plan
            env.withdraw(timer)
