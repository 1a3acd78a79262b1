"""A compute node: modelled CPU threads whose coroutines drive a KV system with a workload.

The node owns one :class:`shm.coro.NodeRdma` (its NIC resources, allocated by QP policy), one
system client per thread and ``coroutines`` coroutines per thread. It knows nothing about
processes or scenarios: the manager tells it, through :meth:`start`, to run one step of the plan
from a given virtual time, and it answers through ``on_done(step, end_ns, ops)`` when every
coroutine of that step has finished. That is why the same class serves a node process of a real
rack and a co-located rack (all nodes in one process, deterministic) alike.

Steps a compute node executes (the scenario's typed steps, ``nodes/steps.py``, told apart by type):

* ``load``: insert its share of records ``[first, first + count)``; the share is split over the
  active coroutines, each inserting its records in YCSB insert order;
* ``run``: closed loop (each coroutine issues its next operation when the previous one returns;
  with a transactional workload, its next transaction through its thread's ``TxnClient``,
  recorded as a ``commit`` or an ``abort``) or, when the workload has a ``target`` rate, open
  loop (Poisson arrivals per thread, of operations or of transactions, into a queue the thread's
  coroutines serve; latency counts from the arrival, so queueing shows);
* ``set``: change a knob (a profile key, or the active threads/coroutines) from that time on;
* ``sleep``: nothing.

Every operation is recorded with its virtual latency in the node's stats slot (``recorder``): from
its start to the end of its work, the CPU it charged after its last wait included
(``env.cpu_free_at()``; that CPU is paid at the coroutine's next yield, so ``env.now`` alone
would leave it out and give it to the next operation).
Beside the operations the node publishes, as counters of its slot, the sums of a few fields of its
clients' ``statistics()`` records (``CLIENT_COUNTERS``, e.g. the bytes RACE's reclamation gave
back): at every step end here, and every heartbeat in a node process (``cluster/node_main.py``).
Summing named fields, read with a default of 0, keeps this generic: a system whose records lack
a field simply reports 0 for it. Beside those, the node publishes *every* numeric field of its
clients' records, summed over them (``nodes.systems.api.node_statistics``: a plugin's hops or
failed CASes as much as RACE's retries), as the system's own counters of its slot, at the same
moments: the results carry them per node and summed, and the dashboard shows them.

A client stopped by a ``crash`` failpoint is logged as an event of the rack (kind "failpoint",
"cn0: failpoint race.update.block_written fired (crash)"), so the dashboard and the summary show
what the fault injection did.
"""

from __future__ import annotations

import functools
import random
import re
from collections import deque
from typing import TYPE_CHECKING, Callable, NamedTuple, Protocol

import numpy as np

from shm.sim.env import all_of
from nodes.systems.api import UnsupportedOperation, node_statistics
from nodes.history import GARBAGE
from nodes.steps import LoadStep, RestartStep, RunStep, SetStep, SleepStep, Step
from workloads.keys import decode_value, key_packer, value_bytes
from shm import nic
from shm.coro import NodeRdma
from shm.failpoints import ClientCrash
from shm.profile import with_overrides
# Op codes and node states as the stats plane has them, declared once below every floor.
from shm.telemetry import (OP_ABORT, OP_COMMIT, OP_DELETE, OP_INSERT, OP_READ, OP_RMW, OP_SCAN,  # noqa: F401
                           OP_UPDATE, STATE_LOADING, STATE_RUNNING, counters_of)

if TYPE_CHECKING:                   # the collaborators' types, for readers and checkers only
    from nodes.history import HistoryWriter
    from shm.smart import SmartConfig
    from shm.udp import UdpNet
    from workloads.ycsb import InsertSequence

BATCH = 64                      # operations drawn from a stream at a time, per coroutine
#: Numeric fields of the clients' statistics() records a node sums and publishes (stats counters):
#: the counters shm.telemetry declares with the source "clients".
CLIENT_COUNTERS = counters_of("clients")
FABRIC_COUNTERS = counters_of("fabric")
_FAILPOINT_RE = re.compile(r"failpoint (\S+)")     # shm.failpoints.ClientCrash's message


def _packer(wl):
    """The workload's key bytes of a key id: its size and (``keyorder``) byte order."""
    return _packers(wl.key_size, getattr(wl, "key_order", "little"))


@functools.lru_cache(maxsize=None)
def _packers(key_size: int, order: str):
    return key_packer(key_size, order)


class StepRecorder(Protocol):
    """Where a compute node's operations go: one process's slot of the stats plane
    (``cluster.stats.ProcWriter`` implements it; tests pass their own). Optional, looked up with
    ``getattr``: ``set_counters(**counters)`` and ``set_system_counters(values)`` (the node's
    client and system counters at a step's end) and ``plane.log(vtime_ns, kind, node, text)``
    (an event in the rack's log)."""

    def step(self, index: int, vstart_ns: int, label: str = "") -> None:
        """Step ``index`` (counting from 1) began at ``vstart_ns``."""

    def end_step(self, vend_ns: int) -> None:
        """The current step ended at ``vend_ns``."""

    def set_state(self, state: int | str) -> None:
        """The node's state (``shm.telemetry.STATE_*``)."""

    def record(self, kind: int, latency_ns: int, ok: bool = True) -> None:
        """One operation of ``kind`` (``shm.telemetry.OP_*``) in the current step."""

    def record_in(self, step: int, kind: int, latency_ns: int, ok: bool = True) -> None:
        """One operation that was issued in step ``step`` and completed after it ended."""


class ComputeStats(NamedTuple):
    node: str
    threads: int
    active_threads: int
    coroutines: int
    active_coroutines: int
    step: int
    ops: int
    unsupported: int
    crashed: int



def _sleep(ns: int):
    """``yield from _sleep(ns)``: a think time slept, the thread free for its other coroutines
    (the counterpart of ``RdmaThread.spin_idle``)."""
    yield ns


class ComputeNode:
    """One compute node's threads, coroutines and clients (see the module docstring)."""

    def __init__(self, env, host, node: str, *, index: int, n_compute: int, threads: int, coroutines: int,
                 qp_policy: str, system, layout: dict, options: dict, workloads: dict, plan: "list[Step]",
                 recorder: StepRecorder, inserts: "InsertSequence", on_done: Callable[[int, int, int], None],
                 seed: int = 0, buffer_bytes: int = 256 << 10, history: "HistoryWriter | None" = None,
                 smart: "SmartConfig | None" = None, threads_per_qp: int | None = None, udp: "UdpNet | None" = None,
                 connect: str = "on_first_post"):
        """``recorder``: where operations and steps go (:class:`StepRecorder`); ``inserts``: the
        rack's shared insert key sequence (``workloads.ycsb.InsertSequence``; a rack implements it
        over shared memory, ``cluster.control.SharedInsertSequence``); ``history``: this node's
        region of the operation history (``nodes.history.HistoryWriter``; a transactional system's
        ``nodes.txn_history.TxnHistoryWriter``), None when not recorded;
        ``smart``: SMART's switches for the node's verbs (``shm.smart.SmartConfig``); ``connect``:
        when the threads' QPs are made (``shm.coro.CONNECT_ORDERS``; ``"by_memory_node"``: now, for
        every memory node in order, :meth:`shm.coro.NodeRdma.connect`); ``udp``: the
        process's datagram net (``shm.udp.UdpNet``), for clients of a service; ``on_done(step,
        end_ns, ops)``: called when every thread finished a step."""
        self.env = env
        self.name = node
        self.index = index                  # among compute nodes: picks this node's load share
        self.n_compute = n_compute
        self.fabric = host.fabric
        self.rdma = NodeRdma(host, node, policy=qp_policy, threads_per_qp=threads_per_qp, buffer_bytes=buffer_bytes,
                             smart=smart)
        # the process's datagram net (shm.udp.UdpNet): a client of a service reaches it as thread.owner.udp
        self.rdma.udp = udp
        self.threads = [self.rdma.thread() for _ in range(threads)]
        if connect == "by_memory_node":
            self.rdma.connect(i for i, n in enumerate(self.fabric.nodes) if n.role == "memory")
        self.smart_at_step_end: dict = {}   # plan step index -> active threads' SmartStats at its end
        self.clients = [system.client(self.fabric, layout, t, options) for t in self.threads]
        self.system = system
        self.layout = layout
        self.coroutines = [[t.coroutine() for _ in range(coroutines)] for t in self.threads]
        self.active_threads = threads
        self.active_coroutines = coroutines
        self.workloads = workloads
        self.plan = plan
        self.recorder = recorder
        self.history = history             # a HistoryWriter (TxnHistoryWriter for transactions), or None
        self.inserts = inserts
        self.on_done = on_done
        self.seed = seed
        self.step_index = -1
        self._stragglers: list = []      # the done events of timed runs whose operations may still be in flight
        self._version = index << 48         # unique write versions across the rack
        self.ops = 0
        self.unsupported = 0
        self.crashed = 0                    # coroutines stopped by a crash failpoint
        self.incarnation = 0                # restarts of this node so far (catch_up sets it)
        self.dead: set[tuple[int, int]] = set()
        self._running: dict = {}            # (thread, coroutine) -> the process driving it now
        self.loaded_before = 0              # records loaded by earlier load steps (rack-wide)
        self.fired: dict[str, int] = {}     # crash failpoints fired in this node, by name

    def statistics(self) -> ComputeStats:
        return ComputeStats(self.name, len(self.threads), self.active_threads, len(self.coroutines[0]),
                            self.active_coroutines, self.step_index, self.ops, self.unsupported,
                            self.crashed)

    def client_counters(self) -> dict:
        """``CLIENT_COUNTERS`` summed over this node's clients (0 for a field a record lacks)."""
        out = dict.fromkeys(CLIENT_COUNTERS, 0)
        for client in self.clients:
            stats = getattr(client, "statistics", None)
            rec = stats() if stats is not None else None
            for name in CLIENT_COUNTERS:
                v = getattr(rec, name, 0)
                if isinstance(v, (int, np.integer)) and v > 0:
                    out[name] += int(v)
        return out

    def system_counters(self) -> dict:
        """Every numeric field of this node's clients' ``statistics()`` records, summed over the
        clients (``nodes.systems.api.node_statistics``), by name in the record's order."""
        records = []
        for client in self.clients:
            stats = getattr(client, "statistics", None)
            records.append(stats() if stats is not None else None)
        return node_statistics(records)

    def fabric_counters(self) -> dict:
        """The node's share of ``shm.fabric.WINDOW_COUNTERS`` that the stats plane carries
        (``counters_of("fabric")``): chaos's delays count its coroutines' late resumptions too."""
        w = self.fabric.window_statistics()
        w["chaos_delays"] += w["resumes_delayed"] + w["write_backs_delayed"]
        return {name: w[name] for name in FABRIC_COUNTERS}

    def publish_counters(self) -> None:
        setter = getattr(self.recorder, "set_counters", None)
        if setter is not None:
            setter(**self.client_counters(), **self.fabric_counters())
        setter = getattr(self.recorder, "set_system_counters", None)
        if setter is not None:
            setter(self.system_counters())

    def _crash(self, t: int, c: int, e: ClientCrash) -> None:
        """A crash failpoint stopped client (t, c) between two verbs: it stays down, and the
        firing becomes an event of the rack. The point is named by the exception (the process-wide
        fire counts of ``failpoints.statistics()`` cannot tell which node of a co-located rack
        fired it)."""
        self.crashed += 1
        self.dead.add((t, c))
        m = _FAILPOINT_RE.match(str(e))
        name = m.group(1) if m else "?"
        self.fired[name] = self.fired.get(name, 0) + 1
        log = getattr(getattr(self.recorder, "plane", None), "log", None)
        if log is not None:
            log(self.env.now, "failpoint", self.name, f"{self.name}: failpoint {name} fired (crash)")

    # -- steps -----------------------------------------------------------------------------------
    def start(self, step_index: int, at_ns: int) -> None:
        """Begin plan step ``step_index`` at virtual time ``at_ns`` (now or later)."""
        self.env.schedule(at_ns, self._begin, step_index)

    def _begin(self, step_index: int) -> None:
        step = self.plan[step_index]
        env = self.env
        self.step_index = step_index
        self.recorder.step(step_index + 1, env.now, step.label)   # stats steps count from 1, as scenario files do
        if env.tracer is not None:
            env.tracer.step_started(step_index, step.action, env.now)
        if isinstance(step, (LoadStep, RunStep)):
            self.recorder.set_state(STATE_LOADING if isinstance(step, LoadStep) else STATE_RUNNING)
        match step:
            case LoadStep():
                done = self._load(step)
            case RunStep():
                done = self._run(step)
                if step.duration_ns > 0:
                    # A timed run ends with its window: the operations still in flight finish (and are
                    # recorded) afterwards, while the next step starts, as in a real measurement; a step
                    # that waited for its stragglers would divide its ops by a span stretched by the
                    # slowest one (a hot-key update can outlast a short window by milliseconds).
                    done.callbacks.append(self._check_failed)
                    self._stragglers.append(done)
                    env.schedule(env.now + step.duration_ns, self._finish, step_index)
                    return
            case SetStep():
                self._set(step)
                done = None
            case SleepStep():
                done = env.timeout(step.duration_ns)
            case _:                         # kill, restart: nothing for a compute node to do
                done = None
        if done is None:
            self._finish(step_index)
        else:
            done.callbacks.append(lambda ev: self._step_done(ev, step_index))

    def drain(self) -> None:
        """The plan is over (the manager's DRAIN): report ``on_done(len(plan), ...)`` once the
        operations still in flight from timed runs have finished. Until every compute node has,
        the rack's server actors keep serving (``ctx.stopped`` waits for it): an operation that
        outlasts the last window is still answered, as on a real rack, and recorded."""
        pending = [ev for ev in self._stragglers if not ev.triggered]
        self._stragglers.clear()
        if not pending:
            self.on_done(len(self.plan), self.env.now, self.ops)
            return
        all_of(self.env, pending).callbacks.append(lambda _ev: self.on_done(len(self.plan), self.env.now, self.ops))

    def _step_done(self, ev, step_index: int) -> None:
        self._check_failed(ev)
        self._finish(step_index)

    @staticmethod
    def _check_failed(ev) -> None:
        if not ev.ok:
            ev.defused = True
            raise ev.value          # a coroutine failed (not a crash failpoint): the node fails loudly

    def _finish(self, step_index: int) -> None:
        step = self.plan[step_index]
        if isinstance(step, LoadStep):
            self.loaded_before += step.count
        self.recorder.end_step(self.env.now)
        self.publish_counters()
        if isinstance(step, RunStep) and self.rdma.smart is not None:
            # SMART's controller state as the step ended (t_max, c_max, C_max move during the run)
            self.smart_at_step_end[step_index] = tuple(t.smart_statistics() for t in self.threads[:self.active_threads])
        self.on_done(step_index, self.env.now, self.ops)

    def catch_up(self, upto: int) -> None:
        """A restarted node's process (a restart step at plan index ``upto``): take over what the
        steps before left behind that later ones rely on: the knobs set steps changed (profile keys
        included: this process was forked with the profile as the scenario began) and the records
        load steps loaded. Nothing is recorded for those steps."""
        self.incarnation = sum(1 for s in self.plan[:upto + 1] if isinstance(s, RestartStep) and s.node == self.name)
        for step in self.plan[:upto]:
            if isinstance(step, SetStep):
                self._set(step)
            elif isinstance(step, LoadStep):
                self.loaded_before += step.count

    def stop(self) -> None:
        """The rack was stopped mid-step: close the step record at the current time."""
        if self.step_index >= 0:
            self.recorder.end_step(self.env.now)
        self.publish_counters()

    def _active(self):
        for t in range(self.active_threads):
            for c in range(self.active_coroutines):
                if (t, c) not in self.dead:         # a crashed client stays down
                    yield t, c

    # -- load ------------------------------------------------------------------------------------
    def _load(self, step: LoadStep):
        wl = self.workloads[step.workload]
        if step.bulk:
            self._bulk_load(step, wl)
            return None
        share = step.count // self.n_compute
        first = self.loaded_before + self.index * share
        if self.index == self.n_compute - 1:
            share = step.count - share * (self.n_compute - 1)
        keys = wl.load_keys(first, share) if share else np.empty(0, np.int64)
        loaders = list(self._active())
        procs = []
        # a trace (workloads.traces) sizes each loaded key's value by the trace
        vsize = getattr(wl, "load_value_size", None) or wl.value_size
        for j, (t, c) in enumerate(loaders):
            mine = keys[j::len(loaders)]
            if len(mine):
                procs.append(self.env.process(self._load_loop(t, c, mine, _packer(wl), vsize),
                                              name=f"{self.name}.load.t{t}c{c}"))
        return all_of(self.env, procs)

    def _bulk_load(self, step: LoadStep, wl) -> None:
        """The whole step's keys written straight into the memory nodes by the system's
        ``bulk_load``, at once in virtual time, by compute node 0 (a structure such as a tree is
        built over all keys together); the other compute nodes have nothing to do. Each key is
        recorded as an insert (stats, and the history the checker reads) completing now."""
        if self.index != 0:
            return
        keys = wl.load_keys(self.loaded_before, step.count)
        ks, vs = _packer(wl), getattr(wl, "load_value_size", None) or wl.value_size
        h, now = self.history, self.env.now
        client = self._client_id(0, 0)
        given = [0]

        def pairs():                # streamed: a system that can place keys one by one holds none
            for kid in _ints(keys):
                self._version += 1
                size = vs(kid, self._version) if not isinstance(vs, int) else vs
                if h is not None:
                    h.complete(h.invoke(client, "insert", kid, self._version, now), True, now)
                given[0] += 1
                yield ks(kid), value_bytes(kid, self._version, size)

        self.system.bulk_load(self.fabric, self.layout, pairs())
        record = self.recorder.record
        for _ in range(given[0]):
            record(OP_INSERT, 0, True)
        self.ops += given[0]

    def _load_loop(self, t: int, c: int, keys: np.ndarray, ksize, vsize):
        env = self.env
        record = self.recorder.record
        try:
            for kid in keys.tolist():
                t0 = env.cpu_free_at()
                ok = yield from self._write("insert", t, c, kid, ksize, vsize)
                record(OP_INSERT, env.cpu_free_at() - t0, ok)
                self.ops += 1
        except ClientCrash as e:
            self._crash(t, c, e)        # a failpoint stopped this client between two verbs

    # -- run -------------------------------------------------------------------------------------
    def _run(self, step: RunStep):
        wl = self.workloads[step.workload]
        env = self.env
        end = env.now + step.duration_ns if step.duration_ns > 0 else None
        procs = []
        target = getattr(wl, "target", 0) or 0
        # A replayed trace (workloads.traces) is one sequence of operations shared by the rack's
        # clients: each opens its own share, numbered across the compute nodes.
        replayed = getattr(wl, "replayed", False)
        transactional = getattr(wl, "transactional", False)
        if transactional:
            for client in self.clients:
                client.set_codecs(wl.codecs())
                if self.history is not None:
                    client.history = self.history   # this node's region (nodes.txn_history.TxnHistoryWriter)
        if target > 0:
            # Open loop: operations (or transactions) arriving at the workload's rate (rack-wide,
            # shared evenly by the compute nodes and their active threads), Poisson, into a queue
            # per thread that its coroutines serve; latency counts from the arrival, so queueing shows.
            rate = target / (self.n_compute * self.active_threads)
            serve = self._txn_item if transactional else self._kv_item(wl)
            for t in range(self.active_threads):
                queue: deque = deque()
                waiting: list = []
                if transactional:
                    rng = random.Random(self.seed * 1_000_003 + self._stream_id(t, 63))
                    arrivals = self._txn_arrivals(wl, rng, rate, end, queue, waiting)
                else:
                    if replayed:
                        stream = wl.client_stream(self.index * self.active_threads + t,
                                                  self.n_compute * self.active_threads, self.inserts, self.seed)
                    else:
                        stream = wl.stream(self.seed, self._stream_id(t, 0), self.inserts)
                    arrivals = self._arrivals(stream, rate, end, queue, waiting, t, self.step_index)
                procs.append(env.process(arrivals, name=f"{self.name}.arrivals.t{t}"))
                for c in range(self.active_coroutines):
                    if (t, c) not in self.dead:
                        procs.append(env.process(self._serve(t, c, queue, waiting, serve),
                                                 name=f"{self.name}.t{t}c{c}"))
        elif transactional:
            # a transactional workload (SmallBank): every coroutine runs transactions back to back
            # through its thread's TxnClient, closed loop as FORD's benchmark does
            for t, c in self._active():
                rng = random.Random(self.seed * 1_000_003 + self._stream_id(t, c))
                procs.append(env.process(self._txn_loop(t, c, wl, rng, end), name=f"{self.name}.t{t}c{c}"))
        else:
            per_node = self.active_threads * self.active_coroutines
            for t, c in self._active():
                if replayed:
                    stream = wl.client_stream(self.index * per_node + t * self.active_coroutines + c,
                                              self.n_compute * per_node, self.inserts, self.seed)
                else:
                    stream = wl.stream(self.seed, self._stream_id(t, c), self.inserts)
                procs.append(env.process(self._closed_loop(t, c, wl, stream, end), name=f"{self.name}.t{t}c{c}"))
        return all_of(env, procs)

    def _after_previous(self, t: int, c: int):
        """A coroutine's previous step may still be finishing its last operation (timed runs end
        with their window): the coroutine takes up the new step when that operation returns."""
        prev = self._running.get((t, c))
        self._running[(t, c)] = self.env.active_process
        if prev is not None and prev.is_alive:
            yield prev

    def _stream_id(self, t: int, c: int) -> int:
        """The operation stream of coroutine (t, c) in the current step: by the step's position
        in the plan (0-based), this node, the thread and the coroutine."""
        return ((self.step_index * 4096 + self.index) * 1024 + t) * 64 + c

    def _closed_loop(self, t: int, c: int, wl, stream, end):
        env = self.env
        do = self._do
        # the workload's think time (YCSB ``thinktime``, µs): the coroutine waits after each
        # operation, its thread free for the others (``thinkmode = sleep``) or spinning in its run
        # queue (``spin``, SMART's IdleExecution); not part of the operation's latency
        think = round(getattr(wl, "thinktime_us", 0.0) * 1000)
        pause = self.threads[t].spin_idle if getattr(wl, "thinkmode", "sleep") == "spin" else _sleep
        yield from self._after_previous(t, c)
        if think:
            # start at a random point of one think time: on a testbed the coroutines' phases spread
            # out over a long run, where here, all starting together with near-equal latencies,
            # they would stay in step and post in bursts
            yield from pause(int(random.Random(self.seed * 1_000_003 + self._stream_id(t, c)).random() * think))
        try:
            while end is None or env.now < end:
                ops, keys, scans = stream.next_batch(BATCH)
                if not len(ops):
                    return                  # a trace's share is done
                for op, kid, n in zip(ops.tolist(), keys.tolist(), scans.tolist()):
                    if end is not None and env.now >= end:
                        return
                    yield from do(t, c, wl, op, kid, n, env.cpu_free_at())
                    if think:
                        yield from pause(think)
        except ClientCrash as e:
            self._crash(t, c, e)        # its operation never returns: "may or may not have happened"

    def _txn_loop(self, t: int, c: int, wl, rng, end):
        """Transactions of ``wl`` (``wl.next(rng)``: name, body, arguments) one after the other on
        coroutine (t, c) until ``end``; each attempt is recorded as a ``commit`` (its latency from
        begin to commit) or an ``abort`` (a failure of that kind), and an aborted transaction is
        not retried: the next is drawn (FORD's benchmark). A coordinator stopped by a crash
        failpoint stays down, as a KV client does."""
        env = self.env
        yield from self._after_previous(t, c)
        try:
            while end is None or env.now < end:
                name, body, args = wl.next(rng)
                yield from self._txn(t, c, name, body, args, env.cpu_free_at())
        except ClientCrash as e:
            self._crash(t, c, e)

    def _txn(self, t: int, c: int, name: str, body, args, t0: int):
        """One transaction attempt on coroutine (t, c), recorded as a ``commit`` or an ``abort``
        with its latency from ``t0`` (its start, or its arrival in an open loop)."""
        env = self.env
        client, co, thread = self.clients[t], self.coroutines[t][c], self.threads[t]
        issued_in = self.step_index
        yield from thread.op_begin(co)      # SMART's coroutine throttling, if on
        try:
            out = yield from client.run(co, body, *args, name=name)
        finally:
            thread.op_end()
        kind = OP_COMMIT if out.committed else OP_ABORT
        done = env.cpu_free_at()
        if self.step_index == issued_in:
            self.recorder.record(kind, done - t0, out.committed)
        else:
            self.recorder.record_in(issued_in + 1, kind, done - t0, out.committed)
        self.ops += 1

    def _txn_item(self, t: int, c: int, item):
        name, body, args, arrived = item        # queued by _txn_arrivals
        return self._txn(t, c, name, body, args, arrived)

    def _kv_item(self, wl):
        def serve(t: int, c: int, item):
            op, kid, n, arrived = item          # queued by _arrivals
            return self._do(t, c, wl, op, kid, n, arrived)
        return serve

    @staticmethod
    def _close(queue: deque, waiting: list) -> None:
        """An open loop's arrivals are over: a marker tells the servers to go home."""
        queue.append(None)
        for ev in waiting:
            ev.succeed()
        waiting.clear()

    def _txn_arrivals(self, wl, rng, rate_per_s: float, end, queue: deque, waiting: list):
        """Transactions of ``wl`` arriving at ``rate_per_s`` (exponential gaps from ``rng``, the
        thread's own stream) into ``queue`` until ``end``."""
        env = self.env
        mean_ns = 1e9 / rate_per_s
        while True:
            yield int(rng.expovariate(1.0) * mean_ns) + 1
            if end is not None and env.now >= end:
                self._close(queue, waiting)
                return
            queue.append((*wl.next(rng), env.now))
            if waiting:
                waiting.pop().succeed()

    def _arrivals(self, stream, rate_per_s: float, end, queue: deque, waiting: list, t: int, step_index: int):
        env = self.env
        while True:
            ops, keys, scans = stream.next_batch(BATCH)
            gaps = stream.interarrivals_ns(BATCH, rate_per_s)
            if not len(ops):                    # a trace's share is done: the servers go home
                self._close(queue, waiting)
                return
            for op, kid, n, gap in zip(ops.tolist(), keys.tolist(), scans.tolist(), gaps.tolist()):
                yield int(gap) + 1
                if end is not None and env.now >= end:
                    self._close(queue, waiting)
                    return
                queue.append((op, kid, n, env.now))
                if waiting:
                    waiting.pop().succeed()

    def _serve(self, t: int, c: int, queue: deque, waiting: list, serve):
        """Coroutine (t, c) of an open loop: takes the next arrival from ``queue`` and runs
        ``serve(t, c, item)`` on it, until the arrivals' marker (``_close``)."""
        env = self.env
        yield from self._after_previous(t, c)
        while True:
            if not queue:
                ev = env.event()
                waiting.append(ev)
                yield ev
                continue
            item = queue[0]
            if item is None:
                return                          # leave the marker for the other servers
            queue.popleft()
            try:
                yield from serve(t, c, item)
            except ClientCrash as e:
                self._crash(t, c, e)
                return

    def _do(self, t: int, c: int, wl, op: int, kid: int, n: int, t0: int):
        """One YCSB operation; records its latency from ``t0``."""
        ks = _packer(wl)                # key id -> key bytes (the workload's key size and byte order)
        # a workload that varies its value sizes (workloads.stress, mixed_sizes) gives a size per write
        vs = wl.value_size_of if getattr(wl, "mixed_sizes", False) else wl.value_size
        if op != OP_SCAN and n > 0 and getattr(wl, "sized_writes", False):
            vs = n                  # a trace (workloads.traces) gives each write its row's value size
        thread = self.threads[t]
        issued_in = self.step_index
        tracer = self.env.tracer
        traced = None if tracer is None else tracer.op_begin(self.env.active_process, self.name, t, c, op, kid,
                                                             self.env.now, self.coroutines[t][c])
        yield from thread.op_begin(self.coroutines[t][c])     # SMART's coroutine throttling, if on
        try:
            if op == OP_READ:
                ok = (yield from self._get(t, c, kid, ks)) is not None
            elif op == OP_UPDATE:
                ok = yield from self._write("update", t, c, kid, ks, vs)
            elif op == OP_INSERT:
                ok = yield from self._write("insert", t, c, kid, ks, vs)
                if not getattr(wl, "replayed", False):   # a trace's inserts claim no YCSB record number
                    self.inserts.acknowledge()
            elif op == OP_DELETE:
                ok = yield from self._delete(t, c, kid, ks)
            elif op == OP_SCAN:
                got = yield from self._scan(t, c, kid, ks, n, getattr(wl, "key_order", "little"))
                ok = len(got) > 0
            elif op == OP_RMW:
                # YCSB's read-modify-write is a read and then a write, not an atomic operation
                ok = (yield from self._get(t, c, kid, ks)) is not None and \
                    (yield from self._write("update", t, c, kid, ks, vs))
            else:
                raise ValueError(f"unknown operation code {op}")
        except UnsupportedOperation:
            # Validation refuses such workloads up front; count rather than kill the node.
            self.unsupported += 1
            ok = False
        finally:
            thread.op_end()
        if traced is not None:
            tracer.op_end(self.env.active_process, traced, self.env.now, ok, self.coroutines[t][c])
        # latency to when the operation's work ends: env.now plus the CPU it charged after its
        # last wait (paid at the coroutine's next yield), as t0 of a closed loop is the end of
        # the previous operation's work
        done = self.env.cpu_free_at()
        if self.step_index == issued_in:
            self.recorder.record(op, done - t0, ok)
        else:                       # returned after the next step began: it belongs to its own step
            self.recorder.record_in(issued_in + 1, op, done - t0, ok)
        self.ops += 1

    # One KV call each, recorded in the history when there is one.
    def _client_id(self, t: int, c: int) -> int:
        # a restarted node's clients are new clients of the history (the dead process's operations
        # that never returned stay open under the old ids): the incarnation tells them apart
        return (self.incarnation << 24) | (self.index << 16) | (t << 8) | c

    def _get(self, t: int, c: int, kid: int, ks):
        h, env = self.history, self.env
        slot = h.invoke(self._client_id(t, c), "get", kid, None, env.now) if h is not None else -1
        got = yield from self.clients[t].get(self.coroutines[t][c], ks(kid))
        if h is not None:
            seen = decode_value(got, kid) if got is not None else None
            h.complete(slot, True, env.now, None if got is None else (seen[1] if seen else GARBAGE))
        return got

    def _scan(self, t: int, c: int, kid: int, ks, n: int, order: str = "little"):
        """A scan of ``n`` from ``kid``; recorded as a scan and its (key id, version) pairs: the
        key id is the key's first 8 bytes in the workload's byte order (workloads.keys), the version
        that of the value (GARBAGE if the bytes are not a value of that key). The checker orders
        scan results by key bytes taking ids as little-endian (the stress's keys), so a history of
        scans over big-endian keys (``keyorder = big``) is not checked for order correctly."""
        h, env = self.history, self.env
        slot = h.invoke(self._client_id(t, c), "scan", kid, n, env.now) if h is not None else -1
        got = yield from self.clients[t].scan(self.coroutines[t][c], ks(kid), n)
        if h is not None:
            pairs = []
            for key, value in got:
                k = int.from_bytes(bytes(key[:8]), order)
                seen = decode_value(value, k) if value is not None else None
                pairs.append((k, seen[1] if seen else GARBAGE))
            h.complete_scan(slot, env.now, pairs)
        return got

    def _write(self, kind: str, t: int, c: int, kid: int, ks, vs: int):
        h, env = self.history, self.env
        self._version += 1
        version = self._version
        slot = h.invoke(self._client_id(t, c), kind, kid, version, env.now) if h is not None else -1
        call = self.clients[t].insert if kind == "insert" else self.clients[t].update
        size = vs(kid, version) if not isinstance(vs, int) else vs
        ok = yield from call(self.coroutines[t][c], ks(kid), value_bytes(kid, version, size))
        if h is not None:
            h.complete(slot, ok, env.now)
        return ok

    def _delete(self, t: int, c: int, kid: int, ks):
        h, env = self.history, self.env
        slot = h.invoke(self._client_id(t, c), "delete", kid, None, env.now) if h is not None else -1
        ok = yield from self.clients[t].delete(self.coroutines[t][c], ks(kid))
        if h is not None:
            h.complete(slot, ok, env.now)
        return ok

    # -- knobs -----------------------------------------------------------------------------------
    def _set(self, step: SetStep) -> None:
        knob, value = step.knob, step.value
        if knob == "threads":
            before = self.active_threads
            self.active_threads = max(1, min(int(value), len(self.threads)))
            # Threads turned off leave their doorbells' sharers; turned back on, they rejoin.
            for t in self.threads[self.active_threads:before]:
                t.idle()
            for t in self.threads[before:self.active_threads]:
                t.resume()
            if self.active_threads != before:
                self.rdma.restart_conflict_avoidance()
        elif knob == "coroutines":
            self.active_coroutines = max(1, min(int(value), len(self.coroutines[0])))
        else:
            apply_profile_knob(self.fabric, knob, value)


def _ints(keys: np.ndarray, chunk: int = 1 << 16):
    """The keys as Python ints, a chunk at a time: ``tolist()`` of 100 M keys would hold 3.6 GB."""
    for i in range(0, keys.shape[0], chunk):
        yield from keys[i:i + chunk].tolist()


def apply_profile_knob(fabric, knob: str, value) -> None:
    """Change one profile key for this process's model from now on (every process applies the same
    change at the same virtual time, so the rack stays consistent)."""
    current = getattr(getattr(fabric.profile, knob.partition(".")[0]), knob.partition(".")[2])
    if isinstance(current, int) and not isinstance(current, bool):
        value = int(value)
    new = with_overrides(fabric.profile, {knob: value})
    fabric.profile = new
    fabric.params[:] = nic.pack_params(new)
