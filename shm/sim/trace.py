"""A timeline of what happened: a short run recorded as a Chrome trace-event / Perfetto file.

``Tracer`` records, in virtual time, what a researcher needs to see where an operation's time
goes, and ``Tracer.write`` turns it into the JSON object format of the trace-event format
(``{"traceEvents": [...], "displayTimeUnit": "ns", "otherData": {...}}``) that
https://ui.perfetto.dev and ``chrome://tracing`` open offline.

What is recorded (docs/trace.md):

* every KV operation a compute node runs (GET, UPDATE, INSERT, DELETE, SCAN, RMW), as a slice on
  its coroutine's track, with the key and the result in its args;
* every verb posted while recording, from the moment its post starts on the CPU to its
  completion, with the stages the NIC model computed for it (``shm.nic.ST_*``: building the WQE,
  QP lock and doorbell spinlock, MMIO and WQE fetch over PCIe, waiting for the QP's order, the
  requester unit, the payload DMA, the links to the responder, the responder unit, the remote
  memory or atomic work, the links back, the CQE, waiting for the completions posted before it) as
  nested slices, a doorbell as an instant event, and a flow arrow from the operation that issued
  it; on the memory node, the responder's side (arrival to effect);
* CPU charges of the modelled threads (``RdmaThread.cpu``: a system's compute; posting; polling
  the CQ) on a track per thread.

Design, and why:

* **The model is observed, not re-run.** The stage times are the ones ``shm.nic.model_post``
  computes anyway: with a tracer, a post calls ``model_post_rows_staged``, which writes them into
  an array beside the usual outputs (the prices are the same code path, so a traced run's numbers
  are identical to an untraced one). Without a tracer the hot path pays one ``env.tracer is None``
  test per post, per CPU charge and per batch completion, nothing inside compiled code.
* **Hooks, not subclasses.** ``env.tracer`` is read by ``QP.model_post`` (verbs), ``RdmaThread.cpu``
  and the coroutine batch completion (CPU), and ``ComputeNode._do`` (operations), so pyverbs users,
  coroutine clients and every system are traced alike.
* **Bounded.** Recording starts when the measured part starts (``start_step``: the plan step
  whose start opens the window; default the first ``run`` step) and takes the operations that
  *begin* within ``window_ns`` of it, at most ``max_ops`` of them; the verbs and charges of an
  operation that began inside are kept to its end, so an operation is never cut. Nothing else is
  kept, so a file is a few MB at most whatever the run's length; once the bounds have closed and
  the recorded operations have returned, the tracer takes itself off the environment and the
  rest of the run goes on the untraced path.
* **Proper nesting by construction.** Chrome's and Perfetto's slice tracks need slices on one
  (pid, tid) to nest. Operations of one coroutine are sequential; the verbs of one coroutine
  overlap (a batch is in flight together), so each kind of track is split into *lanes*: a verb
  goes on the first lane of its coroutine whose last verb has completed (interval colouring),
  and its stages, which are consecutive and lie within it, nest under it. Times are whole
  nanoseconds (the model's ps rounded up, as its outputs are), written as µs with three decimals,
  so parents and children share exact boundaries.
* **Co-located racks only.** Every node is in one process there, so one tracer sees the whole
  rack in one virtual time; a rack of processes would need a tracer per process and a merge.
"""

from __future__ import annotations

import json
import os
from typing import NamedTuple

import numpy as np

from shm import nic

__all__ = ["Tracer", "TraceBounds", "DEFAULT_WINDOW_US", "DEFAULT_MAX_OPS", "OP_NAMES", "write_json_atomic",
           "violation_events", "check_trace_path"]

#: Default bounds: the operations that begin within 100 virtual µs of the start of the measured
#: part, at most 1000 of them (a RACE YCSB-A point of a few threads: some 1 to 5 MB of JSON).
DEFAULT_WINDOW_US = 100.0
DEFAULT_MAX_OPS = 1000

#: YCSB op codes (nodes.compute) -> the names on the timeline
OP_NAMES = {0: "GET", 1: "UPDATE", 2: "INSERT", 3: "SCAN", 4: "RMW", 5: "DELETE"}
_VERB = {nic.VERB_READ: "READ", nic.VERB_WRITE: "WRITE", nic.VERB_CAS: "CAS", nic.VERB_FAA: "FAA", nic.VERB_SEND: "SEND",
         nic.VERB_SEND_UD: "SEND (UD)"}

# (name, from column, to column) of a verb's stages; a stage of zero length is left out. Before
# ST_POSTED the CPU builds the WQEs (from the post's start).
_STAGES = (
    ("QP lock + doorbell lock", nic.ST_POSTED, nic.ST_RUNG),
    ("MMIO + WQE fetch (PCIe)", nic.ST_RUNG, nic.ST_FETCHED),
    ("wait: QP order / fence / max_rd_atomic", nic.ST_FETCHED, nic.ST_REQ_START),
    ("requester NIC unit", nic.ST_REQ_START, nic.ST_REQ_DONE),
    ("payload DMA (PCIe)", nic.ST_REQ_DONE, nic.ST_PAYLOAD),
    ("link: to responder", nic.ST_PAYLOAD, nic.ST_ARRIVED),
    ("responder NIC unit", nic.ST_ARRIVED, nic.ST_RESP_DONE),
    (None, nic.ST_RESP_DONE, nic.ST_REMOTE_DONE),          # named by the opcode (_REMOTE)
    ("link: response back", nic.ST_REMOTE_DONE, nic.ST_BACK),
    ("CQE (PCIe)", nic.ST_BACK, nic.ST_CQE),
    ("wait: earlier completions", nic.ST_CQE, nic.ST_DONE),
)
_REMOTE = {nic.VERB_READ: "memory read (remote PCIe)", nic.VERB_CAS: "atomic unit + address slot",
           nic.VERB_FAA: "atomic unit + address slot"}
#: stage names in walking order (the timeline's colours follow it)
STAGE_NAMES = ("build WQE (CPU)",) + tuple(n for n, _, _ in _STAGES if n) + tuple(dict.fromkeys(_REMOTE.values()))


class TraceBounds(NamedTuple):
    window_ns: int = int(DEFAULT_WINDOW_US * 1000)
    max_ops: int = DEFAULT_MAX_OPS
    start_step: int | None = None       # plan step (0-based) that opens the window; None: first run step


def _ceil_ns(ps: int) -> int:
    return -(-ps // 1000)


class _Op:
    __slots__ = ("id", "node", "thread", "coro", "kind", "key", "start", "end", "ok", "extra")

    def __init__(self, oid, node, thread, coro, kind, key, start):
        self.id = oid
        self.node, self.thread, self.coro = node, thread, coro
        self.kind, self.key, self.start = kind, key, start
        self.end = None
        self.ok = None
        self.extra = None


class Tracer:
    """Records a bounded stretch of a co-located run (see the module docstring). Attach with
    ``env.tracer = Tracer(fabric, ...)``; ``write(path)`` when the run is over."""

    def __init__(self, fabric, bounds: TraceBounds = TraceBounds(), *, provenance: dict | None = None, env=None):
        self.fabric = fabric
        self.env = env                      # given: the tracer detaches itself once it has all it keeps
        self.names = [n.name for n in fabric.nodes]
        self.bounds = bounds
        self.provenance = dict(provenance or {})
        self.window_start: int | None = None
        self.window_end: int | None = None
        self.closed = False                 # no new operation is taken
        self.ops: list[_Op] = []
        self._current: dict[int, _Op] = {}  # id(process) -> its operation being recorded
        self._by_coro: dict[int, _Op] = {}  # id(shm.coro.VerbBatch) -> the same
        self.posts: list[tuple] = []        # (op, track, qpn, src, dst, start_ns, rows, stages, times)
        self.cpu: list[tuple] = []          # (op, node, thread track, label, start_ns, end_ns)
        self.dropped_ops = 0                # operations begun after the bounds closed

    # -- bounds -------------------------------------------------------------------------------
    def step_started(self, index: int, action: str, now: int) -> None:
        """A plan step began: the window opens at the start step (default: the first run)."""
        if self.window_start is not None:
            return
        want = self.bounds.start_step
        if (want is None and action == "run") or (want is not None and index == want):
            self.window_start = now
            self.window_end = now + self.bounds.window_ns

    def _open(self, now: int) -> bool:
        if self.closed or self.window_start is None:
            return False
        if now >= self.window_end or len(self.ops) >= self.bounds.max_ops:
            self.closed = True
            self._detach_if_done()
            return False
        return True

    def _detach_if_done(self) -> None:
        """Closed, and every recorded operation has returned: nothing more is kept, so the rest of
        the run goes without the tracer (``env.tracer = None``: the untraced hot path)."""
        if self.closed and not self._current and self.env is not None and self.env.tracer is self:
            self.env.tracer = None

    # -- operations ---------------------------------------------------------------------------
    def op_begin(self, proc, node: str, thread: int, coro: int, kind: int, key: int, now: int, co=None):
        """A KV operation begins on ``proc`` (the coroutine's process); returns a token for
        :meth:`op_end`, or None when it is not recorded."""
        if not self._open(now):
            if self.window_start is not None:
                self.dropped_ops += 1
            return None
        op = _Op(len(self.ops), node, thread, coro, OP_NAMES.get(kind, str(kind)), key, now)
        self.ops.append(op)
        self._current[id(proc)] = op
        if co is not None:
            self._by_coro[id(co)] = op
        return op

    def op_end(self, proc, op: _Op, now: int, ok, co=None) -> None:
        op.end = now
        op.ok = bool(ok)
        if self._current.get(id(proc)) is op:
            del self._current[id(proc)]
        if co is not None and self._by_coro.get(id(co)) is op:
            del self._by_coro[id(co)]
        if self.closed:
            self._detach_if_done()

    def _op_of(self, proc, now: int):
        """(recorded?, the operation ``proc`` runs or None)."""
        op = self._current.get(id(proc)) if proc is not None else None
        if op is not None:
            return True, op
        return self._open(now), None

    # -- verbs and CPU ------------------------------------------------------------------------
    def post(self, qp, dst: int, rows, start: int, t_ns: int, user, proc) -> int:
        """Price one post as ``shm.nic.model_post_rows`` does, recording its stages; returns the
        model's result (when the posting CPU is free)."""
        fabric = qp.fabric
        keep, op = self._op_of(proc, qp.env.now)
        if not keep:
            return nic.model_post_rows(fabric.table, fabric.params, fabric.descriptors, qp.node, dst,
                                       qp.model_state, qp.doorbell, t_ns, rows)
        stages = np.zeros((rows.shape[0], nic.N_STAGES), np.int64)
        cpu_free = nic.model_post_rows_staged(fabric.table, fabric.params, fabric.descriptors, qp.node, dst,
                                              qp.model_state, qp.doorbell, t_ns, rows, stages)
        track = self._track_of(qp, user, proc)
        self.posts.append((op, track, qp.qp_num, qp.node, dst, start, rows[:, :5].copy(), stages,
                           rows[:, nic.WR_OUT:nic.WR_MODEL_COLS].copy()))
        self.cpu.append((op, qp.node, track[0], "post (build WQEs, doorbell)", start, int(cpu_free)))
        return cpu_free

    def _track_of(self, qp, user, proc) -> tuple:
        """(thread track name, coroutine track name) of a post's poster."""
        thread = getattr(user, "index", None)
        if thread is not None and getattr(user, "owner", None) is not None:
            op = self._current.get(id(proc)) if proc is not None else None
            coro = f"t{thread}.co{op.coro}" if op is not None else (getattr(proc, "name", None) or f"t{thread}")
            return f"t{thread}", coro
        name = getattr(proc, "name", None) or f"qp{qp.qp_num}"
        return name, name

    def cpu_charge(self, thread, proc, label: str, start: int, end: int, co=None) -> None:
        """``thread`` (an RdmaThread) spent [start, end) ns of its core (a system's compute,
        polling the CQ) for ``proc`` (or, when no process runs, for coroutine ``co``)."""
        if end <= start:
            return
        if proc is None and co is not None:
            op = self._by_coro.get(id(co))
            keep = op is not None or self._open(start)
        else:
            keep, op = self._op_of(proc, start)
        if keep:
            self.cpu.append((op, thread.owner.node, f"t{thread.index}", label, start, end))

    # -- writing ------------------------------------------------------------------------------
    def events(self) -> list[dict]:
        """The recorded stretch as trace events (see the module docstring for the tracks)."""
        w = _Writer(self.names)
        last = 0
        for p in self.posts:
            last = max(last, int(p[8][:, nic.OUT_DONE].max()))
        for op in self.ops:
            if op.end is not None:
                last = max(last, op.end)
        # operations
        for op in self.ops:
            end = op.end
            args = {"key": op.key, "op_id": op.id}
            if end is None:
                end = max(last, op.start)
                args["unfinished"] = True
            else:
                args["ok"] = op.ok
            w.item(op.node, f"t{op.thread}.co{op.coro} ops", op.start, end,
                   [(op.kind, "op", op.start * 1000, end * 1000, args)], sort=(op.thread, op.coro, 0))
        flow = 0
        for op, track, qpn, src, dst, start, rows, stages, times in self.posts:
            node = self.names[src]
            for i in range(rows.shape[0]):
                code = int(rows[i, nic.WR_OP])
                vname = _VERB.get(code, str(code))
                done = int(times[i, nic.OUT_DONE])
                st = stages[i]
                children = []
                t0 = start * 1000
                b = _ceil_ns(int(st[nic.ST_POSTED])) * 1000
                if b > t0:
                    children.append(("build WQE (CPU)", "stage", t0, b, None))
                for name, a_col, b_col in _STAGES:
                    a = _ceil_ns(int(st[a_col])) * 1000
                    b = _ceil_ns(int(st[b_col])) * 1000
                    if b <= a:
                        continue
                    children.append((name or _REMOTE.get(code, "remote"), "stage", a, b, None))
                args = {"qp": qpn, "to": self.names[dst], "bytes": int(rows[i, nic.WR_LEN]), "offset": int(rows[i, nic.WR_OFF]),
                        "effect_ns": int(times[i, nic.OUT_EFFECT]), "completion_ns": done}
                if op is not None:
                    args["op_id"] = op.id
                    args["op"] = op.kind
                    args["key"] = op.key
                coro = track[1]
                verb = (vname, "verb", start * 1000, done * 1000, args)
                extra = []
                if i == 0:
                    rung = _ceil_ns(int(st[nic.ST_RUNG])) * 1000
                    extra.append({"name": "doorbell", "cat": "doorbell", "ph": "i", "s": "t", "ts": _us(rung),
                                  "args": {"qp": qpn, "wrs": int(rows.shape[0])}})
                if op is not None:
                    flow += 1
                    w.flow(op.node, f"t{op.thread}.co{op.coro} ops", (op.thread, op.coro, 0), flow, start * 1000)
                    extra.append({"name": "issued", "cat": "flow", "ph": "f", "bp": "e", "id": flow,
                                  "ts": _us(start * 1000)})
                sort = (op.thread, op.coro, 1) if op is not None else (1 << 20, 0, 1)
                w.item(node, f"{coro} verbs", start, done, [verb] + children, extra=extra, sort=sort)
                # the responder's side, on the memory node: from arrival to the effect
                arr = _ceil_ns(int(st[nic.ST_ARRIVED]))
                eff = max(int(times[i, nic.OUT_EFFECT]), _ceil_ns(int(st[nic.ST_REMOTE_DONE])))
                if eff > arr:
                    w.item(self.names[dst], "responder", arr, eff,
                           [(f"{vname} from {node} {coro}", "responder", arr * 1000, eff * 1000,
                             {"qp": qpn, "bytes": int(rows[i, nic.WR_LEN]), "offset": int(rows[i, nic.WR_OFF])})], sort=(0, 0, 0))
        for op, src, thread, label, s, e in self.cpu:
            args = {"op_id": op.id, "op": op.kind} if op is not None else None
            w.item(self.names[src], f"{thread} cpu", s, e, [(label, "cpu", s * 1000, e * 1000, args)],
                   sort=(int(thread[1:]) if thread[1:].isdigit() else 1 << 20, -1, 0))
        return w.finish()

    def document(self) -> dict:
        other = {"generator": "dmrack trace (shm/sim/trace.py)", "time": "virtual",
                 "window_start_ns": self.window_start, "window_ns": self.bounds.window_ns,
                 "max_ops": self.bounds.max_ops, "ops_recorded": len(self.ops),
                 "ops_not_recorded": self.dropped_ops, "verbs_recorded": sum(p[6].shape[0] for p in self.posts),
                 "profile": getattr(self.fabric.profile, "name", None)}
        other.update(self.provenance)
        return {"traceEvents": self.events(), "displayTimeUnit": "ns", "otherData": other}

    def write(self, path: str, *, extra_events: list | None = None) -> dict:
        doc = self.document()
        if extra_events:
            doc["traceEvents"].extend(extra_events)
        write_json_atomic(path, doc)
        return doc


def _us(ps: int) -> float:
    """ps (a whole number of ns) -> µs, exact to the ns digit."""
    return round(ps / 1e6, 3)


class _Writer:
    """Lays items out on lanes: per (node, track) items that overlap go on separate tids."""

    def __init__(self, names):
        self.names = list(names)
        self.groups: dict[tuple, list] = {}     # (node, track) -> [(start, end, events, extra, sort)]
        self.flows: list = []

    def item(self, node: str, track: str, start_ns: int, end_ns: int, slices, *, extra=(), sort=(0, 0, 0)):
        self.groups.setdefault((node, track), []).append((start_ns, end_ns, slices, list(extra), sort))

    def flow(self, node, track, sort, fid, ts_ps):
        self.flows.append((node, track, sort, fid, ts_ps))

    def finish(self) -> list[dict]:
        pids = {}
        for name in self.names:
            pids[name] = len(pids) + 1
        events: list[dict] = []
        for name, pid in pids.items():
            events.append({"name": "process_name", "ph": "M", "pid": pid, "tid": 0, "ts": 0, "args": {"name": name}})
            events.append({"name": "process_sort_index", "ph": "M", "pid": pid, "tid": 0, "ts": 0,
                           "args": {"sort_index": pid}})
        tids: dict[tuple, int] = {}
        lane0: dict[tuple, int] = {}            # (node, track) -> tid of its first lane
        order = sorted(self.groups.items(), key=lambda kv: (pids.get(kv[0][0], 0), kv[1][0][4], kv[0][1]))
        for (node, track), items in order:
            pid = pids.setdefault(node, len(pids) + 1)
            items.sort(key=lambda it: (it[0], it[1]))
            lanes: list[int] = []               # end of the last item on each lane
            for start, end, slices, extra, _ in items:
                for k, free in enumerate(lanes):
                    if free <= start:
                        lanes[k] = end
                        break
                else:
                    k = len(lanes)
                    lanes.append(end)
                key = (node, track, k)
                tid = tids.get(key)
                if tid is None:
                    tid = tids[key] = len(tids) + 1
                    label = track if k == 0 else f"{track} #{k + 1}"
                    events.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "ts": 0,
                                   "args": {"name": label}})
                    events.append({"name": "thread_sort_index", "ph": "M", "pid": pid, "tid": tid, "ts": 0,
                                   "args": {"sort_index": tid}})
                    if k == 0:
                        lane0[(node, track)] = tid
                for name, cat, a, b, args in slices:
                    ev = {"name": name, "cat": cat, "ph": "X", "ts": _us(a), "dur": _us(b - a), "pid": pid,
                          "tid": tid}
                    if args:
                        ev["args"] = args
                    events.append(ev)
                for ev in extra:
                    ev = dict(ev, pid=pid, tid=tid)
                    events.append(ev)
        for node, track, _, fid, ts_ps in self.flows:
            tid = lane0.get((node, track))
            if tid is not None:             # operations of one coroutine never overlap: one lane
                events.append({"name": "issued", "cat": "flow", "ph": "s", "id": fid, "ts": _us(ts_ps),
                               "pid": pids[node], "tid": tid})
        return events


def violation_events(failure_key, ops, *, first_pid: int = 1000, provenance: dict | None = None) -> list[dict]:
    """The operations of one failing key (``cluster.correctness.checker.Op`` records of the
    history) as a process track ``violation: key K``, one lane per client; an operation that never
    returned runs to the last time of the key's history."""
    ops = sorted((o for o in ops if o.key == failure_key), key=lambda o: (o.call, o.client))
    if not ops:
        return []
    last = max(max(o.call for o in ops), max((o.ret for o in ops if o.ret is not None), default=0))
    w = _Writer([f"violation: key {failure_key}"])
    for o in ops:
        end = o.ret if o.ret is not None else last
        args = {"client": o.client, "key": o.key, "value": o.value, "ok": o.ok,
                "returned": o.ret is not None}
        if o.result:
            args["result"] = [list(r) for r in o.result]
        node, rest = o.client >> 16, o.client & 0xFFFF
        w.item(f"violation: key {failure_key}", f"cn{node} t{rest >> 8}.co{rest & 0xFF}", o.call, end,
               [(o.kind.upper(), "violation", o.call * 1000, end * 1000, args)])
    evs = w.finish()
    for ev in evs:                  # a pid of its own, after the rack's nodes
        ev["pid"] = ev["pid"] - 1 + first_pid
    return evs


def write_json_atomic(path: str, doc: dict) -> None:
    """Write ``doc`` as JSON to ``path`` through a temporary file and ``os.replace``."""
    d = os.path.dirname(os.path.abspath(path))
    tmp = os.path.join(d, f".{os.path.basename(path)}.{os.getpid()}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(doc, f, separators=(",", ":"))
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def check_trace_path(path: str) -> None:
    """A ``--trace FILE`` that cannot be written fails before anything runs (FileNotFoundError,
    one line)."""
    d = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        raise FileNotFoundError(f"--trace {path}: is a directory")
    if not os.path.isdir(d):
        raise FileNotFoundError(f"--trace {path}: no such directory {os.path.dirname(path) or '.'}")
    if not os.access(d, os.W_OK):
        raise FileNotFoundError(f"--trace {path}: directory {d} is not writable")
