"""The supervisor: runs a rack as one OS process per node and guarantees it leaves nothing behind.

Order of work, and why:

1. reclaim what killed racks left in /dev/shm (as ``dmrack clean`` does);
2. compile the scenario and create every shared segment (``cluster.rack.RackState``), then warm up
   the jitted code on a throwaway co-located rack, so the forked nodes inherit machine code
   instead of each compiling it. On a machine's first run numba compiles every kernel here (tens
   of seconds; later runs load them from its cache in a few), so this step says what it is doing
   and how long it has taken, with a spinner on a terminal and a line every ``WARM_TICK_S``
   elsewhere; ``dmrack warm`` does it ahead of time;
3. fork the nodes (memory nodes first, then compute nodes, then the manager, which starts the
   scenario); each asks the kernel to kill it if the supervisor dies;
4. watch: every tick it reads the stats plane (dashboard), checks each child's exit status and
   heartbeat, and turns Ctrl-C, SIGTERM, ``--duration`` (counted from the moment the nodes
   start, not from the command: a first run's compile does not eat the run) or the end of the
   scenario into the rack's stop flag. A node that dies unexpectedly is reported with its name
   and how it died (exit status, signal, or the exception it wrote); the rack then stops, or carries on when the spec
   says ``on_node_death = "continue"``. A heartbeat older than ``HEARTBEAT_TIMEOUT_S`` is a hang;
   every process gone before the scenario finished (``F_DONE``) stops the rack with status 1.
   Every exit it sees is written into the stats plane (``StatsPlane.mark_exited``): a node killed
   with SIGKILL never says so itself, and the dashboard reads nothing but the plane. A node whose
   system raised ``SystemGaveUp`` (it gave up: out of memory, a full table) is reported in one line,
   "cn0: the system gave up: <message>", without a traceback, and stops the rack whatever
   ``on_node_death`` says (the system, not a node, failed);
5. stop: stop flag, then join, SIGTERM, SIGKILL in turn (no orphan survives), a last dashboard
   frame with every node's final state, collect results, close (unlink) every segment, remove the
   run directory.

``run()`` returns the exit status: 0 when the scenario ended or ``--duration`` stopped it, 1 when a
node failed (died, hung), ``EXIT_GAVE_UP`` (3) when the system gave up, and ``128 + the signal's
number`` when Ctrl-C (130) or SIGTERM (143) stopped it, as a shell reports a command a signal
ended. One rule wherever the signal lands: while the rack is being built (the first run compiles
for about half a minute) it interrupts the build at once and leaves nothing behind; once the nodes
run it stops them, and the results collected so far are printed and written as after any stop.
A second Ctrl-C during the cleanup is ignored. (It used to be 0 or 130 depending on when it came.)

Each thing the supervisor has to say is said once. What it sees (a node's death, why it stopped
the rack) goes into the rack's event log, stamped with the rack's virtual time at that moment
(the furthest node's), which the dashboard's event panel shows; a view that shows no event log
(``--no-dashboard``) gets the deaths as one line each. How the run ended is the last line, after
the summary table; a death that stops the rack is said there, not also when it happened.
"""

from __future__ import annotations

import gc
import multiprocessing as mp
import os
import shutil
import signal
import tempfile
import threading
import time
from typing import NamedTuple

from cluster.control import F_DONE, F_STEP
from cluster.node_main import EXIT_GAVE_UP as EXIT_NODE_GAVE_UP
from cluster.rack import RackError, RackState, compile_scenario
from shm.messages import SystemGaveUp
from shm import failpoints
from shm.segment import reclaim_stale

TICK_S = 0.1
PLAIN_INTERVAL_S = 1.0              # --no-dashboard: a progress line this often
WARM_TICK_S = 10.0                  # a progress line this often while the kernels compile (no terminal)
WARM_SAY_S = 5.0                    # a warm-up longer than this was a compile: say so when it ends
WARMING = ("preparing the fabric's kernels: numba compiles them on a machine's first run (10-40 s, "
           "once; `dmrack warm` does it ahead of time) and loads them from its cache after that (a few "
           "seconds)")
HEARTBEAT_TIMEOUT_S = 30.0
JOIN_S = 5.0
EXIT_NODE_FAILED = 1
EXIT_GAVE_UP = 3                    # the rack's exit status when the system gave up (SystemGaveUp)
EXIT_ALIASED = 5                    # a fabric calendar aliased: the run's timing is wrong, no results
EXIT_SIGNAL_BASE = 128              # stopped by signal N: 128 + N (Ctrl-C 130, SIGTERM 143), the shell's convention
_CTX = mp.get_context("fork")


class NodeDeath(NamedTuple):
    node: str
    how: str
    expected: bool


class SupervisorStats(NamedTuple):
    nodes: int
    alive: int
    deaths: tuple
    stop_reason: str
    elapsed_s: float


def describe_exit(code: int | None) -> str:
    if code is None:
        return "still running"
    if code < 0:
        try:
            return f"killed by signal {-code} ({signal.Signals(-code).name})"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited with status {code}"


class Supervisor:
    """Runs one scenario as a rack of processes (see the module docstring)."""

    def __init__(self, scenario, *, duration_s: float | None = None, dashboard: bool | None = None,
                 json_path: str | None = None, csv_path: str | None = None, console=None, quiet: bool = False,
                 history: int = 0):
        self.scenario = scenario
        self.duration_s = duration_s
        self.dashboard_mode = dashboard         # None: auto (live on a terminal), False: off
        self.json_path = json_path
        self.csv_path = csv_path
        self.quiet = quiet
        self.history_capacity = history     # record up to this many ops per compute node (0: none)
        self.history_ops = None
        self.txn_run = None                 # a transactional system's recorded run (cluster.rack.TxnRun)
        if console is None:
            from rich.console import Console
            console = Console()
            if not console.is_terminal:
                # Piped or redirected: lines must not wrap at a guessed 80 columns.
                console = Console(width=160)
        self.console = console
        self.compiled = compile_scenario(scenario)
        self.state: RackState | None = None
        self.procs_by_slot: dict = {}       # fabric slot -> multiprocessing.Process
        self.deaths: list[NodeDeath] = []
        self.stop_reason = ""
        self.results = None
        self.aliased = False                # a fabric calendar aliased (EXIT_ALIASED)
        self._t0 = time.monotonic()
        self._t_run: float | None = None    # when the nodes were started (what --duration counts from)
        self._signal = None
        self._signum = 0
        self._building = True               # a signal now interrupts the build at once
        self._tracebacks: dict[str, str] = {}
        self._fatal_status = EXIT_NODE_FAILED
        self.last_view = None               # the dashboard's last frame (a RackView), if it had one

    @property
    def procs(self) -> list:
        return list(self.procs_by_slot.values())

    def statistics(self) -> SupervisorStats:
        alive = sum(1 for p in self.procs if p.is_alive())
        return SupervisorStats(len(self.procs_by_slot), alive, tuple(self.deaths), self.stop_reason,
                               time.monotonic() - self._t0)

    def say(self, text: str) -> None:
        """One line of the supervisor's (a fault, the stop reason, a file written), never broken by
        the console: a long one (a system's "RACE table full: ..." is 300 characters) is left to the
        terminal to fold, and stays one line in a pipe or a log, not cut mid-sentence."""
        if not self.quiet:
            self.console.print(text, highlight=False, soft_wrap=True)

    # -- the whole run -----------------------------------------------------------------------
    def run(self) -> int:
        gone = reclaim_stale()
        if gone:
            self.say(f"dmrack: reclaimed {len(gone)} segment(s) left by a killed rack")
        # Signal handlers can only be set from the main thread. A supervisor run from another
        # thread (a point of a sweep on a Dask worker, cluster.experiments.pointpool) leaves
        # Ctrl-C and SIGTERM to whoever runs that thread.
        own_signals = threading.current_thread() is threading.main_thread()
        old_int = signal.signal(signal.SIGINT, self._on_signal) if own_signals else None
        old_term = signal.signal(signal.SIGTERM, self._on_signal) if own_signals else None
        run_dir = tempfile.mkdtemp(prefix="dmrack-run-")
        status = 1
        view = None
        try:
            self.say(f"dmrack: building rack {self.compiled.spec.name!r}: "
                     f"{len(self.compiled.nodes)} nodes, system {self.compiled.system.name}")
            self.state = RackState.create(self.compiled, processes=True, history=self.history_capacity)
            try:
                self._warm_up()
            except SystemGaveUp as e:
                # The warm-up rack runs the same system in the same memory: it gave up before any node did.
                self.stop_reason = f"warm-up: the system gave up: {e.one_line()}"
                self.say(f"dmrack: {self.stop_reason}")
                return EXIT_GAVE_UP
            self._building = False
            if self._signal:                  # a signal just before: nothing to stop yet
                return self._interrupted_build()
            self._spawn(run_dir)
            self._t_run = time.monotonic()
            view = self._open_view()
            status = self._watch(view, run_dir)
        except KeyboardInterrupt:
            if not (self._signal and self._building):
                raise
            return self._interrupted_build()
        finally:
            self._building = False            # nothing may cut the cleanup short
            if own_signals:
                signal.signal(signal.SIGINT, signal.SIG_IGN)     # a second Ctrl-C must not cut cleanup short
            try:
                self._stop_children()
                if self.state is not None:
                    self._mark_exits()
                if view is not None:
                    try:
                        # The last frame shows how every node ended (a dead node as dead).
                        view.update(self._phase(), force=True)
                    finally:
                        self.last_view = getattr(view, "view", None)
                        view.stop()
                if self.state is not None and self.procs_by_slot:
                    # Only a rack whose nodes started has results: an empty summary after a build
                    # that was interrupted (or whose warm-up gave up) only said its reason again.
                    self._collect()
            finally:
                if self.state is not None:
                    self.state.close(check=False)       # _collect reported aliasing already
                shutil.rmtree(run_dir, ignore_errors=True)
                if own_signals:
                    signal.signal(signal.SIGINT, old_int)
                    signal.signal(signal.SIGTERM, old_term)
        return EXIT_ALIASED if self.aliased else status

    def _on_signal(self, signum, frame) -> None:
        self._signal = signal.Signals(signum).name
        self._signum = signum
        if self._building:
            # Building (the warm-up compile can take half a minute): stop it now rather than after.
            # The finally blocks of run() and RackState.create close what was created.
            raise KeyboardInterrupt

    def _interrupted_build(self) -> int:
        self.stop_reason = f"stopped by {self._signal} before the nodes started"
        self.say(f"dmrack: {self.stop_reason}")
        return EXIT_SIGNAL_BASE + self._signum

    def _rack_vnow(self) -> int:
        """The rack's virtual time now: the furthest node's (what the dashboard's header shows)."""
        return max((s.vnow_ns for s in self.state.plane.snapshot()), default=0)

    def _event(self, view, kind: str, node: str, text: str) -> None:
        """Into the rack's event log, stamped with its virtual time; to a view that shows no event
        log as a note (see the module docstring: each thing said once)."""
        self.state.plane.log(self._rack_vnow(), kind, node, text)
        if not getattr(view, "shows_events", False):
            view.note(text)

    def _warm_up(self) -> None:
        """:func:`warm_up`, saying what it does while it takes long (the module docstring, step 2)."""
        t0 = time.monotonic()
        live = not self.quiet and self.dashboard_mode is not False and self.console.is_terminal
        if live:
            with self.console.status(f"dmrack: {WARMING}") as status:
                _while_ticking(lambda: warm_up(self.compiled), 1.0,
                               lambda dt: status.update(f"dmrack: {WARMING} [{dt:.0f} s]"))
        else:
            self.say(f"dmrack: {WARMING}")
            _while_ticking(lambda: warm_up(self.compiled), WARM_TICK_S,
                           lambda dt: self.say(f"dmrack: still preparing the kernels ({dt:.0f} s)"))
        took = time.monotonic() - t0
        if took >= WARM_SAY_S:
            self.say(f"dmrack: kernels ready after {took:.0f} s (compiled and cached: later runs start in seconds)")

    # -- spawning ----------------------------------------------------------------------------------
    def _spawn(self, run_dir: str) -> None:
        from cluster.node_main import node_main
        order = sorted(range(len(self.compiled.nodes)),
                       key=lambda i: {"memory": 0, "client": 1, "dpu": 2, "dpa": 2, "compute": 3,
                                      "manager": 4}[self.compiled.nodes[i].role])
        me = os.getpid()
        # The nodes inherit the supervisor's heap (numba's compiled code, the warm-up's objects:
        # ~90 MiB) copy-on-write. A full collection in a node writes to the GC header of every
        # object it tracks and so copies every inherited page that holds one: tens of MiB per
        # node, at a random moment of a long run (docs/running.md). Frozen objects are never
        # visited by a collection, so the pages stay shared. Garbage is collected first: frozen
        # and then unfrozen, it would wait in the oldest generation (an earlier rack's segments
        # and files with it).
        gc.collect()
        gc.freeze()
        try:
            for slot in order:
                decl = self.compiled.nodes[slot]
                p = _CTX.Process(target=node_main, args=(self.state, slot, me, run_dir),
                                 name=self.state.process_name(decl.name), daemon=True)
                p.start()
                self.procs_by_slot[slot] = p
        finally:
            gc.unfreeze()

    def _check_restarts(self, view, run_dir: str) -> None:
        """A restart step asked for a new process of a killed compute node (the manager holds the
        rack at that virtual time meanwhile): once the old process is reaped and its death
        recorded, reset the node's memory to what System.setup left and fork the new process,
        which joins the clock and clears the request (cluster/node_main.py)."""
        from cluster.node_main import node_main
        control = self.state.control
        for slot in list(self._restarting):
            if control.restart_requested(slot) is None:
                del self._restarting[slot]              # the new process has joined
        for slot, old in list(self.procs_by_slot.items()):
            if slot in self._restarting:
                continue
            req = control.restart_requested(slot)
            if req is None:
                continue
            name = self.compiled.nodes[slot].name
            old.join(JOIN_S)
            if old.exitcode is None:                    # the kill step waited for it: cannot happen
                old.kill()
                old.join()
            self._check_deaths(view, run_dir)           # the old death, as the kill step ordered it
            self.state.reset_node_memory(slot, old.pid or 0)
            c = self.compiled
            c.system.node_restarted(self.state.fabric, self.state.layout, self.state.fabric.node_index(name))
            gc.collect()
            gc.freeze()
            try:
                p = _CTX.Process(target=node_main, args=(self.state, slot, os.getpid(), run_dir),
                                 kwargs={"restart": req}, name=self.state.process_name(name), daemon=True)
                p.start()
            finally:
                gc.unfreeze()
            self.procs_by_slot[slot] = p
            self._seen_dead.discard(slot)
            self._last_beat.pop(slot, None)
            self._restarting[slot] = req
            if not getattr(view, "shows_events", False):     # the new process logs "restarted" itself
                view.note(f"{name} restarted at t={req[0]} ns (as the scenario asked)")

    # -- watching ----------------------------------------------------------------------------------
    def _open_view(self):
        if self.quiet:
            return _Silent(self.say)
        from cluster.dashboard import Dashboard, PlainReporter
        c = self.compiled
        info = {"rack": c.spec.name, "system": c.system.name, "profile": c.spec.profile_name,
                "workload": c.describe_workloads()}
        if self.dashboard_mode is False:
            # --no-dashboard: one plain progress line per interval (and events as they arrive)
            view = PlainReporter(info, self.state.plane, console=self.console, interval_s=PLAIN_INTERVAL_S)
            view.start()
            return view
        view = Dashboard(info, self.state.plane, live=None if self.dashboard_mode is None else True,
                         console=self.console)
        view.start()
        return view

    def _watch(self, view, run_dir: str) -> int:
        self._seen_dead: set[int] = set()
        self._last_beat: dict[int, tuple] = {}
        self._restarting: dict[int, tuple] = {}
        while True:
            time.sleep(TICK_S)
            view.update(self._phase())
            died = self._check_deaths(view, run_dir)
            hung = None if died else self._check_hangs()
            if not (died or hung):
                self._check_restarts(view, run_dir)
            if died:
                self._stop(died, view, log=False)    # the death is in the event log already
                return self._fatal_status
            if hung:
                self._stop(hung, view)
                return self._fatal_status
            if self._signal:
                self._stop(f"stopped by {self._signal}", view)
                return EXIT_SIGNAL_BASE + self._signum
            if self.duration_s is not None and time.monotonic() - self._t_run >= self.duration_s:
                self._stop(f"stopped after {self.duration_s:g} s (--duration)", view)
                return 0
            # every process gone (read before F_DONE: a manager that set it has set it by its exit)
            ended = all(p.exitcode is not None for p in self.procs)
            if self.state.control.get(F_DONE):
                # A scripted kill just before the end: a SIGKILLed process can take a while to be
                # torn down on a loaded machine, so wait for the ones the scenario killed.
                for slot, p in self.procs_by_slot.items():
                    if p.exitcode is None and self.state.control.death_expected(slot):
                        p.join(JOIN_S)
                self._check_deaths(view, run_dir)
                self._stop("scenario finished", view, log=False)     # the manager logged it
                return 0
            if ended:
                # Nobody is left to finish the scenario (the nodes ended their runs on a stop flag
                # without the manager getting through the plan): waiting would be forever.
                self._check_deaths(view, run_dir)
                self._stop("every node ended before the scenario finished", view)
                return EXIT_NODE_FAILED

    def _check_deaths(self, view, run_dir: str) -> str | None:
        """Report every node that exited since the last look; the reason to stop the rack, if any."""
        c = self.compiled
        state = self.state
        for slot, p in self.procs_by_slot.items():
            if slot in self._seen_dead or p.exitcode is None:
                continue
            self._seen_dead.add(slot)
            state.plane.mark_exited(slot, p.exitcode)
            if p.exitcode == 0:
                continue                      # finished its part: the rack quiesced at the scenario's end
            decl = c.nodes[slot]
            expected = state.control.death_expected(slot)
            how = describe_exit(p.exitcode)
            gave_up = _read(os.path.join(run_dir, f"{decl.name}.gaveup")) if p.exitcode == EXIT_NODE_GAVE_UP else None
            tb = _read(os.path.join(run_dir, f"{decl.name}.err"))
            if gave_up is not None:
                # Not a bug: the message says it all (the traceback stays out of the way).
                how = f"the system gave up: {gave_up}"
            elif tb is not None:
                self._tracebacks[decl.name] = tb
                last = [ln.strip() for ln in tb.strip().splitlines() if ln.strip()]
                how += f": {last[-1]}" if last else ""
            elif p.exitcode == failpoints.EXIT_STATUS:
                points = _exit_failpoints(decl.name)
                how += f" (failpoint {', '.join(points)}: exit)" if points else ""
            self.deaths.append(NodeDeath(decl.name, how, expected))
            stuck = state.fabric.release_stuck_line_locks()
            if stuck:
                state.plane.log(self._rack_vnow(), "fault", decl.name,
                                f"released {stuck} line lock(s) {decl.name} died holding")
            if decl.name in c.compute:
                # its epoch announcements would hold retired blocks back for good (docs/reclaim.md)
                c.system.node_failed(state.fabric, state.layout, state.fabric.node_index(decl.name))
            if gave_up is not None and not expected:
                # One line: the stop reason carries it (the node logged it to the event log).
                self._fatal_status = EXIT_GAVE_UP
                if c.address(decl.name) >= 0:
                    state.clock.mark_gone(c.address(decl.name))
                return f"{decl.name}: {how}"
            text = f"{decl.name} {how}" + (" (as the scenario asked)" if expected else "")
            if not expected and c.address(decl.name) >= 0:
                # It holds nobody back any more (its clock would stay put forever).
                state.clock.mark_gone(c.address(decl.name))
            if not expected and (c.spec.on_node_death != "continue" or decl.role == "manager"):
                # It stops the rack: in the event log (and the results) now, said after the summary.
                state.plane.log(self._rack_vnow(), "fault", decl.name, text)
                return f"node {decl.name} died ({how})"
            self._event(view, "fault", decl.name, text)
        return None

    def _mark_exits(self) -> None:
        """Every node that has exited, into the stats plane (the deaths the watch loop did not see:
        nodes that ended while or after the rack stopped)."""
        for slot, p in self.procs_by_slot.items():
            if p.exitcode is not None and slot not in getattr(self, "_seen_dead", ()):
                self.state.plane.mark_exited(slot, p.exitcode)

    def _check_hangs(self) -> str | None:
        """A live node whose heartbeat has not moved for HEARTBEAT_TIMEOUT_S is hung."""
        now = time.monotonic()
        for slot, p in self.procs_by_slot.items():
            if p.exitcode is not None:
                continue
            beat = self.state.plane.read(slot).heartbeat_mono_ns
            prev = self._last_beat.get(slot)
            if prev is None or prev[0] != beat:
                self._last_beat[slot] = (beat, now)
            elif now - prev[1] > HEARTBEAT_TIMEOUT_S:
                name = self.compiled.nodes[slot].name
                self.deaths.append(NodeDeath(name, "stopped heartbeating", False))
                return f"node {name} hung (no heartbeat for {HEARTBEAT_TIMEOUT_S:g} s)"
        return None

    def _phase(self) -> str:
        step = self.state.control.get(F_STEP)
        plan = self.compiled.plan
        if step < 0:
            return "starting"
        if step >= len(plan):
            return "finished"
        text = f"step {step + 1}/{len(plan)}: {plan[step].label}"
        if plan[step].action == "load" and plan[step].count:
            # Loading is long: show how far it got (ops of this step on every compute node).
            done = 0
            for snap in self.state.plane.snapshot():
                rec = snap.step_record(step + 1) if snap.name in self.compiled.compute else None
                done += rec.ops() if rec is not None else 0
            text += f" ({done:,}/{plan[step].count:,}, {100 * done // plan[step].count}%)"
        return text

    def _stop(self, reason: str, view, *, log: bool = True) -> None:
        """Stop the rack for ``reason``, said after the summary; ``log``: also into the event log
        (False when it holds the reason already: the manager's end, a fatal death)."""
        self.stop_reason = reason
        if log:
            self.state.plane.log(self._rack_vnow(), "phase", "supervisor", reason)
        self.state.clock.set_stop()

    def _stop_children(self) -> None:
        """Stop flag, then join, SIGTERM, SIGKILL: nothing survives this."""
        if self.state is not None and self.state.clock is not None:
            self.state.clock.set_stop()
        deadline = time.monotonic() + JOIN_S
        for p in self.procs:
            p.join(max(0.0, deadline - time.monotonic()))
        for p in self.procs:
            if p.is_alive():
                p.terminate()
        for p in self.procs:
            p.join(1.0)
            if p.is_alive():
                p.kill()
                p.join()

    # -- results -------------------------------------------------------------------------------------
    def _collect(self) -> None:
        from cluster.results import Results
        c = self.compiled
        spec = c.spec
        snaps = self.state.plane.snapshot()
        vnow = max((s.vnow_ns for s in snaps), default=0)
        meta = {"rack": spec.name, "system": c.system.name, "profile": spec.profile_name, "seed": spec.seed,
                "mode": "processes", "workloads": {n: w.describe() for n, w in c.workloads.items()},
                "steps": [s.label for s in c.plan], "wall_s": round(time.monotonic() - self._t0, 3),
                "virtual_ns": vnow, "stop_reason": self.stop_reason,
                "deaths": [d._asdict() for d in self.deaths]}
        bad = self.state.fabric.calendar_errors()
        if bad:
            # The run's timing is wrong (shm/calendar.py): say so instead of giving its numbers
            # (self.results stays None, so no caller can make rows of them either).
            from shm.calendar import CalendarAliased
            self.aliased = True
            self.stop_reason = str(CalendarAliased(bad))
            self.say(f"dmrack: {self.stop_reason}; no results written")
            return
        self.results = Results.from_plane(self.state.plane, meta)
        from nodes.txn_history import TxnHistoryLog
        if isinstance(self.state.history, TxnHistoryLog):
            # every node is stopped: the rack's owner recovers what dead coordinators left, then reads
            from cluster.rack import collect_txn_run
            died = any(d.node in c.compute for d in self.deaths)
            self.txn_run = collect_txn_run(self.state, coordinators_died=died)
        elif self.state.history is not None:
            from cluster.rack import collect_history
            self.history_ops = collect_history(self.state)
        if not self.quiet:
            self.console.print(self.results.table())
            for name, tb in self._tracebacks.items():
                if not any(d.node == name and d.expected for d in self.deaths):
                    self.console.print(f"[bold red]{name} failed:[/]\n{tb}", highlight=False, markup=True)
            self.say(f"dmrack: {self.stop_reason}")
        if self.json_path:
            self.results.to_json(self.json_path)
            self.say(f"dmrack: wrote {self.json_path}")
        if self.csv_path:
            self.results.to_csv(self.csv_path)
            self.say(f"dmrack: wrote {self.csv_path}")


class _Silent:
    """The view when the dashboard is off: nothing live, but deaths are still said (as notes)."""

    shows_events = False                # the supervisor's deaths come as notes (Supervisor._event)

    def __init__(self, say):
        self.say = say

    def update(self, phase: str, *, force: bool = False) -> None:
        pass

    def note(self, text: str) -> None:
        self.say(f"dmrack: {text}")

    def stop(self) -> None:
        pass


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read()
    except FileNotFoundError:
        return None


def _exit_failpoints(node: str) -> list[str]:
    """The ``exit`` failpoints DMRACK_FAILPOINTS arms in ``node`` (what status 86 came from)."""
    try:
        armed = failpoints.parse(os.environ.get(failpoints.ENV, ""))
    except ValueError:
        return []
    return [name for only, name, action, _ in armed if action == "exit" and only in (None, node)]


def _while_ticking(work, every_s: float, show) -> None:
    """Run ``work()`` here while a daemon thread calls ``show(seconds since start)`` every ``every_s``."""
    done = threading.Event()
    t0 = time.monotonic()

    def tick():
        while not done.wait(every_s):
            show(time.monotonic() - t0)
    ticker = threading.Thread(target=tick, daemon=True)
    ticker.start()
    try:
        work()
    finally:
        done.set()
        ticker.join()


def warm_up(compiled) -> None:
    """Compile (or load from numba's cache) every jitted function the nodes use, before forking, by
    running a tiny co-located rack of the same system and profile."""
    from cluster.rack import ColocatedRack
    from cluster.scenario import warmup_scenario
    ColocatedRack(warmup_scenario(compiled.spec)).run()
