"""What each node process runs, from fork to exit.

The supervisor forks one process per node after creating every shared segment and compiling the
jitted code, so a node inherits the rack's mappings and machine code and starts in milliseconds.
A node process

* asks the kernel to SIGKILL it if the supervisor dies (``PR_SET_PDEATHSIG``), so no node can
  outlive its rack even when the supervisor is killed with SIGKILL;
* names itself ``dmrack-<node>-<rack id>`` (``RackState.process_name``; the id is the random part
  of the rack's segment prefix, so two racks side by side, which both had ``dmrack-cn0``, differ)
  twice: ``PR_SET_NAME`` sets the kernel's ``comm`` (``ps``, ``ps -o comm``, ``top``'s default,
  psutil's ``name()``, ``pgrep``), which keeps 15 bytes, so it shows as much of the id as fits
  (``dmrack-cn0-3f9a``, ``dmrack-dpa0-3f9``: 16 bits or more of a random id for names up to 4
  characters); ``setproctitle`` rewrites the process's argv memory, which is what ``ps -ef``,
  ``ps aux``, htop and /proc/<pid>/cmdline show (they showed the supervisor's inherited command
  line, ``dmrack up``, for every node), with the whole id, the rack's name and the supervisor's
  pid: ``dmrack-cn0-3f9a1c2e (rack minimal, supervisor 12345)``;
* ignores SIGINT: Ctrl-C reaches the whole process group, but stopping is the supervisor's
  decision (it sets the rack's stop flag, and every node ends its run cleanly);
* publishes its pid and a heartbeat (virtual time, verbs, NIC utilisation) from a small thread,
  so the dashboard stays live even while the node waits for slower nodes;
* writes a failure's traceback to ``<run dir>/<node>.err`` and exits non-zero (``EXIT_FAILED``),
  which the supervisor reports. A ``SystemGaveUp`` is not a bug but the system giving up (RACE
  out of memory for KV blocks, a table full): its one-line message also goes to
  ``<run dir>/<node>.gaveup`` and the node exits with ``EXIT_GAVE_UP``, so the supervisor can say
  "cn0: the system gave up: <message>" instead of printing a traceback;
* publishes counters with its heartbeat: a memory node its occupancy (``Fabric.occupancy``: the
  shared bump pointer of its host memory against the host region's size; it lives in the node's
  own memory, so the memory node is where it is read), a compute node the sums of its clients'
  reclamation figures (``ComputeNode.client_counters``) and every numeric field of their
  statistics records, summed (``ComputeNode.system_counters``: the system's own counters).

Roles: ``compute`` and the ``manager`` run the scenario in clock-synchronised environments;
``memory`` nodes are passive (one-sided verbs never involve their CPU), so they only heartbeat
until the rack is stopped. A node whose role the system runs server actors on (a memory node
with cores, a DPU, a DPA: ``CompiledRack.actor_nodes``) runs its actors in a clock-synchronised
environment too, and publishes its device counters (cores busy, DPA threads and stalls, DMA
bytes, RX queue depth, datagram drops) with its heartbeat. Every synchronised process routes
its messages by kind (``shm/sim/router.py``): the manager's, verbs SENDs, datagrams, and
the end of the plan, which the manager announces to every process once its plan is over so that
polling actors end (``ctx.stopped``).
"""

from __future__ import annotations

import ctypes
import os
import signal
import threading
import time
import traceback

from cluster.control import F_DONE
from cluster.stats import STATE_DONE, STATE_FAILED, STATE_RUNNING
from nodes.nicgauge import NicGauge
from shm.sim.env import INF
from shm.telemetry import counters_of

HEARTBEAT_S = 0.05
RESTART_TIMEOUT_S = 60.0                       # a restart step's new process must join within this
EXIT_FAILED = 3
EXIT_GAVE_UP = 4                               # the system raised SystemGaveUp (see the module docstring)
_PR_SET_PDEATHSIG = 1
_PR_SET_NAME = 15
_ACTOR_COUNTERS = counters_of("actors")          # what _device_counters publishes


def die_with_parent(parent_pid: int, name: str, rack: str = "") -> None:
    """``name``: what ps calls this process (``RackState.process_name``); ``rack``: the rack's name."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        # ps/top/psutil show "dmrack-cn1-3f9a" instead of a row of identical pythons
        libc.prctl(_PR_SET_NAME, name.encode()[:15], 0, 0, 0)
    except (OSError, AttributeError):
        pass                                   # not Linux: the supervisor's finally still reaps us
    try:
        import setproctitle
        # argv memory, for ps -ef/htop (see the module docstring); comm was set above, keep it
        setproctitle.setproctitle(f"{name} (rack {rack}, supervisor {parent_pid})" if rack else name)
    except ImportError:
        pass                                   # an install without it: comm still names the node
    if os.getppid() != parent_pid:             # the parent died before prctl took effect
        os._exit(EXIT_FAILED)


class _Heartbeat(threading.Thread):
    """Publishes this node's liveness and gauges every HEARTBEAT_S of real time."""

    def __init__(self, writer, gauge: NicGauge, vnow, events, verbs, counters=None, system=None):
        super().__init__(daemon=True, name="heartbeat")
        self.writer = writer
        self.gauge = gauge
        self.vnow, self.events, self.verbs = vnow, events, verbs
        self.counters = counters                # () -> {counter: value}, or None
        self.system = system                    # () -> the system's own counters {name: value}, or None
        self.halt = threading.Event()

    def beat(self) -> None:
        v = self.vnow()
        g = self.gauge.sample(v)
        self.writer.heartbeat(v, self.events(), self.verbs(), nic_util=g.nic_util, link_util=g.link_util,
                              pcie_util=g.pcie_util, counters=self.counters() if self.counters else None,
                              system=self.system() if self.system else None)

    def run(self) -> None:
        while not self.halt.wait(HEARTBEAT_S):
            self.beat()

    def during(self, env) -> None:
        """Run ``env`` to its end with this thread beating meanwhile."""
        self.start()
        try:
            env.run()
        finally:
            self.halt.set()
            self.join()

    def last(self) -> None:
        """The final beat, then the slot says the node is done."""
        self.beat()
        self.writer.finish(STATE_DONE)


def node_main(state, slot: int, parent_pid: int, run_dir: str, restart: tuple[int, int] | None = None) -> None:
    """Entry point of a forked node process (``multiprocessing`` target). ``restart``: (virtual
    time, plan step) of a restart step: this process replaces a compute node a kill step killed."""
    decl = state.compiled.nodes[slot]
    die_with_parent(parent_pid, state.process_name(decl.name), state.compiled.spec.name)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    writer = state.plane.writer(slot)
    try:
        writer.begin(os.getpid())
        state.control.set_pid(slot, os.getpid())
        writer.set_state(STATE_RUNNING)
        from shm.failpoints import arm_from_env
        arm_from_env(node=decl.name)           # DMRACK_FAILPOINTS, inherited from the supervisor
        _log_late_compiles(state, decl.name)
        from cluster import memtrace
        memtrace.start(decl.name)              # DMRACK_MEMTRACE: a diagnostic, off by default
        if decl.name in state.compiled.compute:       # the KV clients' nodes (System.client_role)
            _compute(state, slot, decl.name, writer, restart)
        elif decl.role == "manager":
            _manager(state, decl.name, writer)
        elif decl.name in state.compiled.actor_nodes:
            _actor_node(state, decl.name, writer)
        else:
            _passive(state, decl.name, writer)
    except BaseException as e:  # noqa: BLE001 - every failure is reported, then the process exits
        from shm.messages import SystemGaveUp
        with open(os.path.join(run_dir, f"{decl.name}.err"), "w") as f:
            f.write(traceback.format_exc())
        gave_up = isinstance(e, SystemGaveUp)
        if gave_up:
            msg = e.one_line()
            with open(os.path.join(run_dir, f"{decl.name}.gaveup"), "w") as f:
                f.write(msg)
        try:
            text = (f"{decl.name}: the system gave up: {msg}" if gave_up
                    else f"{decl.name} failed: {type(e).__name__}: {e}")
            state.plane.log(_published_vnow(state, decl.name), "fault", decl.name, text[:200])
            writer.finish(STATE_FAILED)
        except Exception:  # noqa: BLE001 - the stats plane itself may be what broke
            pass
        os._exit(EXIT_GAVE_UP if gave_up else EXIT_FAILED)


def _published_vnow(state, name: str) -> int:
    """The virtual time ``name`` last published: the stamp of what it logs outside its event loop
    (a failure, a late compile), which said 0 ns beside events at milliseconds."""
    try:
        return state.plane.read(name).vnow_ns
    except Exception:  # noqa: BLE001 - a stamp must never hide the event it stamps
        return 0


def _log_late_compiles(state, name: str) -> None:
    """The warm-up compiles every jitted function before the fork; one compiled later stalls this
    node for the compile (and keeps LLVM's memory, tens of MiB) and means a call site passes a type
    the warm-up did not: log each to the rack's event log (kind "compile"), which the dashboard and
    the results show."""
    from numba.core import event

    class _Late(event.Listener):
        def on_start(self, ev):
            pass

        def on_end(self, ev):
            try:
                d = ev.data or {}
                fn = getattr(d.get("dispatcher"), "py_func", None)
                what = f"{fn.__module__}.{fn.__qualname__}" if fn is not None else "?"
                state.plane.log(_published_vnow(state, name), "compile", name, f"{name}: numba compiled {what}{tuple(d.get('args', ()))} "
                                                    f"after the warm-up"[:200])
            except Exception:  # noqa: BLE001 - a diagnostic must never take the node down
                pass

    event.register("numba:compile", _Late())


def _sync_env(state, address: int):
    from shm.sim.env import Environment
    from shm.sim.sync import ClockSync
    spec = state.compiled.spec
    sync = ClockSync(state.clock, address, spec.profile.sync.window_ns, spec.profile.sync.spin_us)
    # A rack that carries on after a node death: a node whose run raises leaves the clock (the
    # others go on without it) instead of stopping every node. The manager's failure still stops
    # it, and so does the system giving up (SystemGaveUp), which stops the rack whatever
    # on_node_death says (cluster/supervisor.py).
    if spec.on_node_death == "continue" and address != len(state.compiled.compute):
        from shm.messages import SystemGaveUp
        sync.leave_on_failure = lambda exc: not isinstance(exc, SystemGaveUp)
    return Environment(seed=spec.seed * 1000 + address, sync=sync)


def _device_counters(contexts, udp, name: str, idle_cores: int = 0):
    """() -> the device counters of this node's actors (``shm.telemetry.COUNTERS`` whose source is
    "actors"), for the heartbeat.
    ``idle_cores``: the cores to publish when the system runs no actor here (a DPU that only
    receives mirrored datagrams still has its Arm cores: the dashboard showed "cores –")."""
    def counters() -> dict:
        try:
            return read()
        except RuntimeError:          # an actor added a queue or thread while this thread read: next beat
            return {}

    def read() -> dict:
        out = dict.fromkeys(_ACTOR_COUNTERS, 0)      # a counter declared and not read here: 0
        out["cpu_cores"] = 0 if contexts else idle_cores
        for ctx in contexts:
            if ctx.dpa is not None:
                out["cpu_cores"] += len(ctx.dpa.cores)
                out["cpu_busy_ns"] += sum(core.statistics().busy_ns for core in ctx.dpa.cores)
                out["dpa_threads"] += len(ctx.dpa.threads)
                out["dpa_stall_ns"] += sum(th.statistics().stall_ns for th in ctx.dpa.threads)
            else:
                out["cpu_cores"] += ctx.cores.n
                out["cpu_busy_ns"] += ctx.cores.busy_ns
            if ctx.dma is not None:
                out["dma_bytes"] += ctx.dma.statistics().bytes
        out["ring_depth"] = sum(max(0, r.depth()) for ctx in contexts for r in list(ctx.rings))
        if udp is not None:             # (without one, the UDP counters stay 0)
            out["rx_queued"] = sum(len(q) for q in list(udp.queues.values()))
            st = udp.statistics()
            out["udp_dropped"] = st.dropped
            out["udp_resends"] = st.resends
        return out
    return counters


def _compute(state, slot: int, name: str, writer, restart: tuple[int, int] | None = None) -> None:
    from cluster.wiring import wire
    c = state.compiled
    address = c.compute.index(name)
    env = _sync_env(state, address)
    if restart is not None:
        # a restarted node starts at the rack's current virtual time: the manager set our clock
        # slot to it (ClockTable.rejoin) and holds the rack there until we say we have joined
        env.start_at(restart[0])
    w = wire(state, env, {name}, writers=lambda _name: writer)
    host, udp, contexts = w.host, w.udp, w.contexts
    ((node, _writer),) = w.computes
    if restart is not None:
        node.catch_up(restart[1])
        state.plane.log(env.now, "fault", name, f"{name} restarted (pid {os.getpid()})")
        state.control.restart_joined(slot)
    dev = _device_counters(contexts, udp, name)

    def counters() -> dict:
        out = dict(node.client_counters() or {})
        out.update(dev())
        return out
    def system() -> dict | None:
        try:
            return node.system_counters()
        except RuntimeError:          # a client's record read while its event loop changed it: next beat
            return None
    hb = _Heartbeat(writer, NicGauge(state.fabric, name), lambda: env.now, lambda: node.ops,
                    lambda: host.posted, counters, system)
    hb.during(env)
    node.stop()
    hb.last()


def _actor_node(state, name: str, writer) -> None:
    """A memory node with cores, a DPU or a DPA: its server actors in the rack's virtual clock."""
    from cluster.wiring import wire
    env = _sync_env(state, state.compiled.address(name))
    w = wire(state, env, {name}, writers=lambda _name: writer)
    host, udp, contexts = w.host, w.udp, w.contexts
    role = state.compiled.nodes[state.slot(name)].role
    base = None
    if role == "memory":
        def base() -> dict:
            used, capacity = state.fabric.occupancy(name)
            return {"mem_used": used, "mem_capacity": capacity}
    from nodes.actors import modelled_cores
    dev = _device_counters(contexts, udp, name, modelled_cores(state.compiled.spec, role)[0]
                           if role in ("dpu", "dpa") else 0)

    def counters() -> dict:
        out = dev()
        if base is not None:
            out.update(base())
        return out
    hb = _Heartbeat(writer, NicGauge(state.fabric, name), lambda: env.now, lambda: env.statistics().events,
                    lambda: host.posted, counters)
    hb.during(env)
    hb.last()


def _manager(state, name: str, writer) -> None:
    from cluster.wiring import wire
    c = state.compiled
    address = len(c.compute)
    env = _sync_env(state, address)
    control = state.control

    def kill_node(victim: str) -> None:
        slot = state.slot(victim)
        control.expect_death(slot)
        pid = control.pid(slot)
        if pid > 0:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            _wait_gone(pid)
        if c.address(victim) >= 0:
            state.clock.mark_gone(c.address(victim))
        state.fabric.release_stuck_line_locks()      # it may have died inside a 64-byte line copy
        if state.fabric.node_index(victim) in state.fabric.nvm:
            # a memory node with persistent memory lost power: the WRITEs no READ of their QP
            # flushed are gone, what was durable stays (shm/nvm.py); its memory stays reachable
            from shm.nvm import power_fail
            lost = power_fail(state.fabric, victim)
            state.plane.log(env.now, "fault", victim, f"{victim}'s persistent memory keeps what was flushed; "
                            f"{lost} line(s) of unflushed writes lost")

    def is_alive(addr: int) -> bool:
        pid = control.pid(state.slot(c.compute[addr]))
        return pid <= 0 or _alive(pid)

    def restart_node(node: str, step: int) -> None:
        # The rack stays at env.now meanwhile: we are inside an event, and the node's clock slot is
        # env.now from here on. The supervisor forks the new process (it owns the processes).
        slot = state.slot(node)
        state.clock.rejoin(c.address(node), env.now)
        control.request_restart(slot, env.now, step)
        deadline = time.monotonic() + RESTART_TIMEOUT_S
        while control.restart_requested(slot) is not None:
            if state.clock.stop_requested:
                return                               # the rack is stopping: our run ends next
            if time.monotonic() > deadline:
                raise RuntimeError(f"restart of {node}: no new process joined within {RESTART_TIMEOUT_S:g} s")
            time.sleep(0.002)

    mgr = wire(state, env, {name}, writers=lambda _name: writer,
               manager_hooks={"kill_node": kill_node, "is_alive": is_alive, "restart_node": restart_node}).manager
    hb = _Heartbeat(writer, NicGauge(state.fabric, name), lambda: env.now, lambda: mgr.step, lambda: 0)
    hb.during(env)
    if mgr.step >= len(c.plan):
        control.set(F_DONE, 1)               # tells the supervisor the scenario is over
    hb.last()


def _passive(state, name: str, writer) -> None:
    """A memory (or client) node: heartbeat until the rack stops."""
    gauge = NicGauge(state.fabric, name)
    clock = state.clock
    seen = [0]

    def rack_time() -> int:
        # The slowest running participant's time (idle ones publish INF): what this node has seen.
        live = [t for t in (clock.clock(i) for i in range(clock.n_procs)) if t < INF]
        if live and min(live) > seen[0]:
            seen[0] = min(live)
        return seen[0]

    counters = None
    if state.compiled.nodes[state.slot(name)].role == "memory":
        def counters() -> dict:
            used, capacity = state.fabric.occupancy(name)
            return {"mem_used": used, "mem_capacity": capacity}

    hb = _Heartbeat(writer, gauge, rack_time, lambda: 0, lambda: 0, counters)
    while not clock.stop_requested and not state.control.get(F_DONE):
        hb.beat()
        time.sleep(HEARTBEAT_S)
    hb.last()


def _alive(pid: int) -> bool:
    import psutil
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _wait_gone(pid: int, timeout_s: float = 5.0) -> None:
    end = time.monotonic() + timeout_s
    while _alive(pid) and time.monotonic() < end:
        time.sleep(0.002)
