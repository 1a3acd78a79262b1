"""SMART-style coroutine verbs: the interface disaggregated systems are written against.

A system's client code runs as coroutines on modelled CPU threads: SMART's user-level threads,
each one a process of the event core (shm/sim/env.py), not a Python ``async`` coroutine. Each
coroutine has one :class:`VerbBatch` (``co = thread.coroutine()``), its handle for one-sided verbs:
it appends verbs to its batch with :meth:`VerbBatch.read`, ``write``, ``cas``, ``faa`` (and the
masked atomics), rings the doorbell with :meth:`VerbBatch.post`, and waits for the whole batch with
``yield co.sync()``. Results are read from the returned handles after the sync.
:meth:`VerbBatch.read_many` queues a READ per address as ``read`` would, with one :class:`Reads` for
all of them, packed by one compiled pass (shm/readmany.py). (The class was
called ``Coroutine`` before issue 42; that name stays as an alias for code written against it.)

Thread resources follow a *policy* (SMART §3.1), which is the whole difference between the curves
of SMART Fig. 3:

* ``shared_qp``: one QP per remote node, shared by every thread of the node;
* ``multiplexed_qp``: each QP shared by ``threads_per_qp`` consecutive threads (SMART §3.1's q;
  thread ``i`` uses QP ``i // q``), or without it a pool of ``qp_pool`` QPs per remote node that
  thread ``i`` uses as QP ``i % pool``; threads sharing a QP take turns on its lock;
* ``per_thread_qp``: each thread its own QPs, in one device context, so QPs land on the context's
  4 low-latency + 12 medium-latency doorbells round-robin and threads share doorbell spinlocks;
* ``per_thread_doorbell``: SMART's thread-aware allocation: each thread's QPs on a doorbell of
  its own.

Coroutines of one thread share its core: CPU time charged by one delays the others. A thread that
runs more than one coroutine also pays two context switches each time a coroutine resumes after
its batch completed (to the coroutine that polls the CQ and back; ``software.coro_switch_cycles``
of the profile, Boost's fcontext switch); one coroutine per thread busy-polls and never switches.
A coroutine that idles by spinning (``yield from thread.spin_idle(ns)``, SMART's benchmarks'
``IdleExecution``) stays in the thread's run queue, so while it idles each resumption waits for
the poller's turn and then behind the spinners (:meth:`RdmaThread.spin_delay`).

SMART's other techniques are switches of a ``NodeRdma`` (``smart=``, a :class:`shm.smart.SmartConfig`
or a dict, all off by default; see docs/smart.md): work-request throttling (a post that lacks
credits is queued in its thread and rung by the completion that frees them),
``yield from co.backoff_cas(...)`` with truncated exponential back-off, and coroutine throttling
around ``yield from thread.op_begin()`` / ``thread.op_end()``. ``RdmaThread.idle()`` takes a thread
out of its doorbells' sharers.

The batch bypasses ``SendWR`` objects: it fills the model's arrays directly and schedules one
effect per work request and one wake-up per batch, which is what makes the emulator fast enough.
"""

from __future__ import annotations

import random
from collections import deque
from heapq import heappush
from struct import Struct
from sys import byteorder as _BYTEORDER
from typing import NamedTuple

import numpy as np

from shm import nic
from shm.deferred import C_STATE, DEFER_MIN, LANDED, NumberedReads, ReadBatch, before_write, deferred_reads_of, sample_entry
from shm.landing import ALL_LANDED, begin_landing, flush_due, land_read_whole_entry, pending_writes_of
from shm.failpoints import ARMED_POINTS, failpoint
from shm.smart import ConflictController, SmartConfig, SmartStats, WrTuner
from shm.fabric import (
    LAND_READ, NODE_MASK, NODE_SHIFT, OFFSET_BITS, OFFSET_MASK, REGION_DEVICE, REGION_HOST, REGION_MASK, VERB_LANDED,
    VERB_RACED, VERB_REFUSED, HostKernels, format_gaddr, gaddr,
    gaddr_node, gaddr_offset, gaddr_region, host_kernels,
)
from shm.verbs import (
    IBV_WC_REM_ACCESS_ERR, IBV_WC_REM_INV_REQ_ERR, IBV_WC_SUCCESS, IBV_WR_ATOMIC_CMP_AND_SWP, IBV_WR_ATOMIC_FETCH_AND_ADD,
    IBV_WR_MASKED_ATOMIC_CMP_AND_SWP, IBV_WR_MASKED_ATOMIC_FETCH_AND_ADD, IBV_WR_RDMA_READ, IBV_WR_RDMA_WRITE, CQ, PD, QP, Context, MR,
    I64_BIAS, LAND_KIND, MODEL_OPCODE, NVM_KIND, QPInitAttr, VerbsHost, apply_one_sided, unretired_of, wc_status_str,
)
from shm.nvm import nvm_shadow_of
from shm.sim.env import INF
from shm.readmany import ONE_LINE_HOST, pack_reads_entry

POLICIES = ("shared_qp", "multiplexed_qp", "per_thread_qp", "per_thread_doorbell")
# When a compute node makes its threads' QPs (NodeRdma.connect): each when its thread first posts
# to the node, or at start memory node by memory node, one per thread (SMART's and FORD's
# ResourceManager). It decides which QPs take a shared context's low-latency doorbells.
CONNECT_ORDERS = ("on_first_post", "by_memory_node")

# A batch for the NIC model is one int64 row per work request (the layout: nic.WR_*): model
# opcode, length, offset, region, flags (nic.FLAG_FENCE after co.fence(); never inline), then the
# model's three outputs (effect ns, completion ns, the other end of a multi-line landing window:
# shm/landing.py), then the offset in the thread's buffer (which deferred READs land into:
# shm/deferred.py). One pack call fills a row, its values in column order:
assert (nic.WR_OP, nic.WR_LEN, nic.WR_OFF, nic.WR_REGION, nic.WR_FLAGS, nic.WR_OUT, nic.WR_LOFF) == (0, 1, 2, 3, 4, 5, 8)
_PACK_WR = nic.pack_wr
_WR_BYTES = nic.WR_BYTES
_new_object = object.__new__
_WORD_AT = Struct("=Q").unpack_from     # the native-order uint64 at an offset of a buffer


class RemoteAccessError(RuntimeError):
    """A verb of a batch completed with an error status (bad address, rkey or alignment)."""


class Handle:
    """The result of one queued verb: ``data`` (READ) or ``value`` (atomics) after ``sync``.

    ``offset`` is where the verb's bytes land in the thread's buffer (``thread.buf``): a client
    that parses a READ in place (a bucket scan, a checksum) indexes the buffer with it rather than
    taking the ``data`` view."""

    __slots__ = ("_buf", "offset", "length", "status")

    def __init__(self, buf, off, length):
        self._buf = buf
        self.offset = off
        self.length = length
        self.status = -1  # not landed yet

    @property
    def data(self) -> np.ndarray:
        """The bytes read (a view into the thread's buffer; copy it to keep it past later verbs)."""
        return self._buf[self.offset:self.offset + self.length]

    @property
    def value(self) -> int:
        """An atomic's old value (or the first 8 bytes read)."""
        try:
            # = its uint64 view, read in place: no slice of the buffer made (a third of the time)
            return _WORD_AT(self._buf, self.offset)[0]
        except Exception:            # a strided buffer, or fewer than 8 bytes left: as a slice reads it
            word = self._buf[self.offset:self.offset + 8]
            if word.shape[0] == 8:
                return int.from_bytes(word, _BYTEORDER)
            return int(word.view(np.uint64)[0])

    @property
    def ok(self) -> bool:
        return self.status == IBV_WC_SUCCESS


class Reads:
    """The READs of one :meth:`VerbBatch.read_many`, read after ``sync``: READ ``i``'s bytes are
    ``data(i)`` (a view at ``offsets[i]`` of the thread's buffer, ``thread.buf``), its first 8
    bytes ``value(i)``, its status ``status[i]`` (``IBV_WC_SUCCESS`` once landed, -1 before).
    ``reads[i]`` is READ ``i`` as a :class:`Handle`."""

    __slots__ = ("_buf", "length", "offsets", "_status", "rows", "node", "_handles")

    # Made by _new_reads (read_many), not by a call of the class: about 2k instructions of the
    # call's machinery saved per read_many (scripts/count_work.py read_many --instructions).
    #   offsets: a range for a block, a list for READs queued one by one.
    #   rows, node: a block (one-line READs of one node's host memory, as many as deferral
    #   takes): its work-request rows, packed at queue time, and the node.
    #   _handles: a block that a post cannot take whole becomes one handle per READ (_items), as
    #   does a read_many that queues its READs one by one: their statuses are then the handles'.

    def __len__(self) -> int:
        return len(self.offsets)

    @property
    def status(self) -> list:
        """Each READ's status (``IBV_WC_SUCCESS`` once landed, -1 before)."""
        hs = self._handles
        return self._status if hs is None else [h.status for h in hs]

    def data(self, i: int) -> np.ndarray:
        """The bytes READ ``i`` read (a view: copy it to keep it past later verbs)."""
        off = self.offsets[i]
        return self._buf[off:off + self.length]

    def value(self, i: int) -> int:
        """READ ``i``'s first 8 bytes as a little-endian integer."""
        return self[i].value

    def values(self) -> list[int]:
        """Every READ's first 8 bytes as a little-endian integer, in order (the words a block
        of 8-byte READs read)."""
        buf = self._buf
        return [int.from_bytes(buf[off:off + 8], _BYTEORDER) for off in self.offsets]

    def __getitem__(self, i: int) -> Handle:
        if self._handles is not None:
            return self._handles[i]
        h = Handle(self._buf, self.offsets[i], self.length)
        h.status = self._status[i]      # as it is now
        return h

    @property
    def ok(self) -> bool:
        """Every READ succeeded."""
        return all(s == IBV_WC_SUCCESS for s in self.status)

    def address(self, i: int) -> int:
        """READ ``i``'s global address (of a block: rebuilt from its row)."""
        row = self.rows[i]
        return gaddr(self.node, int(row[nic.WR_OFF]), int(row[nic.WR_REGION]))

    def _items(self) -> list:
        """The block as the verbs ``read`` would have queued: a handle and a tuple per READ (a
        post that cannot take the block whole)."""
        rows = self.rows
        node = self.node
        buf, length = self._buf, self.length
        items = []
        handles = self._handles = []
        for off, loff, region, flags in zip(rows[:, nic.WR_OFF].tolist(), self.offsets,
                                            rows[:, nic.WR_REGION].tolist(), rows[:, nic.WR_FLAGS].tolist()):
            h = _new_object(Handle)      # as _queue makes it
            h._buf = buf
            h.offset = loff
            h.length = length
            h.status = -1
            handles.append(h)
            items.append((IBV_WR_RDMA_READ, gaddr(node, off, region), length, loff, 0, 0, 0, 0, h, flags))
        return items


def _new_reads(buf, length: int, offsets, rows, node: int, handles) -> Reads:
    """A :class:`Reads` (see its slots)."""
    r = _new_object(Reads)
    r._buf = buf
    r.length = length
    r.offsets = offsets
    r._status = [-1] * len(offsets)
    r.rows = rows
    r.node = node
    r._handles = handles
    return r


def _address_array(addrs) -> tuple[np.ndarray, bool]:
    """``read_many``'s addresses as a C-ordered int64 array (an unsigned address's bits as they
    are) and whether they came unsigned; a clear error for anything but one-dimensional integers."""
    if type(addrs) is np.ndarray and addrs.dtype is _INT64 and addrs.ndim == 1 and addrs.flags.c_contiguous:
        return addrs, False                           # as a loop passes them: nothing to convert
    a = addrs if isinstance(addrs, np.ndarray) else np.array(addrs)
    if a.ndim == 1 and a.size == 0:
        return np.zeros(0, np.int64), False          # no READ (np.array([]) is float64)
    if a.ndim != 1 or a.dtype.kind not in "iu" or a.dtype.itemsize > 8:
        raise TypeError(f"read_many: addresses must be a sequence of global addresses (integers of up to 64 bits), "
                        f"got an array of {a.dtype} with shape {a.shape}")
    if a.dtype.kind == "u":
        a = a.astype(np.uint64, copy=False).view(np.int64)
        unsigned = True
    else:
        a = a.astype(np.int64, copy=False)
        unsigned = False
    if not a.flags.c_contiguous:
        a = np.ascontiguousarray(a)
    return a, unsigned


_PACK_READS = None      # shm.readmany.pack_reads's entry point, made on the first read_many
_INT64 = np.dtype(np.int64)


class NodeRdma:
    """The RDMA resources of one compute node, allocated by policy, handed out per thread."""

    def __init__(self, host: VerbsHost, node, *, policy: str = "per_thread_doorbell", qp_pool: int = 4,
                 threads_per_qp: int | None = None, buffer_bytes: int = 256 << 10,
                 smart: "SmartConfig | dict | None" = None):
        if policy not in POLICIES:
            raise ValueError(f"unknown QP policy {policy!r}; choose one of {', '.join(POLICIES)}")
        if qp_pool < 1:
            raise ValueError(f"qp_pool must be >= 1, got {qp_pool}")
        if threads_per_qp is not None and threads_per_qp < 1:
            raise ValueError(f"threads_per_qp must be >= 1, got {threads_per_qp}")
        self.host = host
        self.fabric = host.fabric
        self.env = host.env
        self.node = self.fabric.node_index(node)
        self.policy = policy
        self.qp_pool = qp_pool
        self.threads_per_qp = threads_per_qp
        self.buffer_bytes = buffer_bytes
        cfg = SmartConfig.from_dict(smart)
        self.smart: SmartConfig | None = cfg if cfg.enabled else None   # None: every switch off
        self._node_tuner = WrTuner(cfg.candidates, cfg.delta_ns, cfg.hold) \
            if cfg.throttle == "adaptive" and cfg.tuner_scope == "node" else None
        self._node_conflict = ConflictController(cfg, 1) \
            if cfg.retry_scope == "node" and (cfg.backoff or cfg.coro_throttle) else None
        self.threads: list[RdmaThread] = []
        self._shared_ctx: Context | None = None
        self._shared_qps: dict[int, list[QP]] = {}

    def restart_conflict_avoidance(self) -> None:
        """Restart every retry-rate controller of the node (t_max and c_max back to their start):
        a compute node calls this when its number of active threads changes, since the limits
        learnt under one concurrency do not carry to another (SMART's artifact runs each thread
        count in a fresh process). Operations waiting for a coroutine slot are admitted."""
        if self._node_conflict is not None:
            self._node_conflict.restart()
        else:
            for t in self.threads:
                if t._conflict is not None:
                    t._conflict.restart()
        for t in self.threads:
            t._admit()

    def _context(self) -> Context:
        if self._shared_ctx is None:
            self._shared_ctx = Context(self.host, self.node)
        return self._shared_ctx

    def thread(self) -> "RdmaThread":
        t = RdmaThread(self, len(self.threads))
        self.threads.append(t)
        return t

    def connect(self, nodes) -> None:
        """Make now, node by node in the order given, each thread's QP to every node of ``nodes``
        (the threads made so far, in their order), instead of each QP when its thread first posts
        there. The order decides who gets a shared context's low-latency doorbells, which go to
        the first QPs made (:class:`shm.verbs.Context`): connected this way they are threads 0-3's
        QPs to the first node, as in a framework that connects memory node by memory node at start
        with a QP per thread (SMART's and FORD's ``ResourceManager``: ``connect(node, ...,
        max_threads)``); made on first post, thread 0 takes one on each node it posts to first.
        Making a QP posts nothing: a thread becomes a sharer of its doorbell when it posts."""
        for dst in nodes:
            dst = self.fabric.node_index(dst)
            for t in self.threads:
                t.qp(dst)

    def _qp_for(self, thread: "RdmaThread", dst: int) -> QP:
        """The QP ``thread`` uses towards node ``dst``, created on first use."""
        if self.policy in ("shared_qp", "multiplexed_qp"):
            pool = self._shared_qps.setdefault(dst, [])
            if self.policy == "shared_qp":
                want = 0
            elif self.threads_per_qp is not None:
                want = thread.index // self.threads_per_qp
            else:
                want = thread.index % self.qp_pool
            while len(pool) <= want:
                pool.append(_make_qp(self._context(), dst))
            return pool[want]
        if self.policy == "per_thread_qp":
            return _make_qp(self._context(), dst)
        if thread._ctx is None:
            thread._ctx = Context(self.host, self.node, low_latency=0, doorbells=1)
        return _make_qp(thread._ctx, dst)



def resume_switch_ns(profile) -> int:
    """CPU ns a thread running several coroutines pays to resume one after its batch completed:
    two context switches (to the coroutine that polls the CQ and back), ``software.coro_switch_cycles``
    each at ``cpu.ghz``."""
    return int(2 * profile.software.coro_switch_cycles / profile.cpu.ghz)

def _make_qp(ctx: Context, dst: int) -> QP:
    pd = PD(ctx)
    cq = CQ(ctx)
    qp = QP(pd, QPInitAttr(scq=cq))
    qp.connect((dst, 0))
    return qp


class ThreadStats(NamedTuple):
    posts: int
    verbs: int
    errors: int
    cpu_free_ns: int


class RdmaThread:
    """A modelled CPU thread: a core, a registered buffer and its QPs (one per remote node)."""

    def __init__(self, owner: NodeRdma, index: int):
        self.owner = owner
        self.index = index
        self._host_kernels: HostKernels | None = None
        self._deferred_kernel = None     # the deferred READs' landing into buf (deferred_kernel)
        self.fabric = owner.fabric
        self.env = owner.env
        self._ctx: Context | None = None
        self._qps: dict[int, QP] = {}
        self.cpu_free = 0
        ctx = owner._context() if owner.policy != "per_thread_doorbell" else None
        if ctx is None:
            self._ctx = Context(owner.host, owner.node, low_latency=0, doorbells=1)
            ctx = self._ctx
        self.mr = MR(PD(ctx), owner.buffer_bytes)
        self.buf = self.mr.buf
        self.buf_view = memoryview(self.buf)   # the buffer as bytes: a landing's copy is one slice assignment
        self._buf_pos = 0
        self._buf_cap = owner.buffer_bytes
        self._rkeys: dict[tuple[int, int], int] = {}
        self._batches: dict[int, tuple] = {}   # batch size -> the model's arrays (see _batch_arrays)
        self.posts = self.verbs = self.errors = 0
        self.idle_since: int | None = None
        self._coros = 0
        # SMART (shm/smart.py); every member below stays inert when owner.smart is None
        cfg = self.smart = owner.smart
        self._throttle = cfg is not None and cfg.throttle != "off"
        self._wr_cmax: int | None = cfg.c_max if self._throttle and cfg.throttle == "fixed" else None
        self._tuner = (owner._node_tuner or WrTuner(cfg.candidates, cfg.delta_ns, cfg.hold)) \
            if self._throttle and cfg.throttle == "adaptive" else None
        if self._tuner is not None and self._tuner is owner._node_tuner and self._tuner.phase != "idle":
            self._wr_cmax = self._tuner.current
        self._wr_queue: deque = deque()        # (coroutine, dst, items) waiting for credits
        self._wr_out = self._wr_out_peak = self._wr_queued = self._posts_waited = 0
        self._conflict = (owner._node_conflict or ConflictController(cfg, 1)) \
            if cfg is not None and (cfg.backoff or cfg.coro_throttle) else None
        self._coro_throttle = cfg is not None and cfg.coro_throttle
        self._ops_running = 0
        self._op_waiters: deque = deque()
        self._bcas = self._bcas_failed = self._backoffs = self._backoff_ns = 0
        self._rng = random.Random(hash((getattr(owner.env, "seed", 0), owner.node, index, 0x5A)))
        prof = self.fabric.profile
        # chaos (the profile's [chaos] table, docs/checking.md): a coroutine may resume late, as
        # if its thread had been descheduled; the thread's own stream of draws, salted by node and index
        self._resume_chaos = nic.ChaosStream.of(prof, "resume_ns", (1 << 62) | (owner.node << 32) | index)
        # what a resumption costs the core (see VerbBatch._batch_done), from the profile once
        self.poll_ns = prof.cpu.poll_ns
        self.poll_switch_ns = prof.cpu.poll_ns + resume_switch_ns(prof)
        # coroutines idling by spinning (spin_idle) and what one turn of each costs the core
        self._spinners = 0
        self.spin_turn_ns = (prof.software.coro_switch_cycles + prof.software.clock_read_cycles) / prof.cpu.ghz

    def statistics(self) -> ThreadStats:
        return ThreadStats(self.posts, self.verbs, self.errors, self.cpu_free)

    def smart_statistics(self) -> SmartStats:
        """SMART's state of this thread: caps, credits, retries, back-off (see shm/smart.py)."""
        cfg, ctl, tuner = self.smart, self._conflict, self._tuner
        cap = self._wr_cmax if self._throttle else None
        return SmartStats(
            cfg.throttle if cfg is not None else "off", cap, None if cap is None else cap - self._wr_out,
            self._wr_out, self._wr_queued, self._posts_waited,
            tuner.samples if tuner else 0, tuner.epochs if tuner else 0, tuple(tuner.history) if tuner else (),
            self._cycles_ns(ctl.t_max) if ctl is not None and cfg.backoff else None,
            ctl.c_max if ctl is not None and self._coro_throttle else None,
            self._ops_running, len(self._op_waiters), self._bcas, self._bcas_failed, self._backoffs,
            self._backoff_ns, ctl.gamma if ctl is not None else None, ctl.windows if ctl is not None else 0)

    def host_kernels(self) -> HostKernels:
        """The compiled landing kernels for this thread's buffer, entered directly (made once)."""
        k = self._host_kernels
        if k is None:
            k = self._host_kernels = host_kernels(self.fabric, self.buf)
        return k

    def deferred_kernel(self):
        """The compiled landing of deferred READs into this thread's buffer, entered directly
        (``shm.deferred.sample_entry``, made once: about 6 µs to look up)."""
        k = self._deferred_kernel
        if k is None:
            k = self._deferred_kernel = sample_entry(self.fabric.memory[0], self.buf, nic.WR_COLS)
        return k

    def coroutine(self) -> "VerbBatch":
        """A new coroutine of this thread (counted for coroutine throttling): its :class:`VerbBatch`."""
        self._coros += 1
        ctl = self._conflict
        if ctl is not None:
            # a node-scope controller bounds c_max by the largest thread's coroutine count
            ctl.set_upper(max(ctl.c_upper, self._coros) if ctl is self.owner._node_conflict else self._coros)
            self._admit()
        return VerbBatch(self)

    @property
    def conflict_control(self) -> bool:
        """Whether SMART's retry-rate control (back-off or coroutine throttling) governs this
        thread's retries: a system with a back-off of its own leaves it off then."""
        return self._conflict is not None

    def _conflict_sharers(self):
        """The threads whose operations this thread's retry-rate controller governs."""
        return self.owner.threads if self._conflict is self.owner._node_conflict else (self,)

    # -- doorbell sharing -------------------------------------------------------------------------
    def idle(self) -> None:
        """The thread stops posting (a scenario deactivated it): it leaves the sharers of its
        doorbells, so the spinlock hold of the threads still posting there shrinks. Its next post
        makes it a sharer again (:meth:`resume` only marks it active). Outstanding verbs are
        unaffected: the hold is priced when a doorbell is rung."""
        if self.idle_since is None:
            self.idle_since = self.env.now
        key = id(self)
        left = [(qp.node, qp.doorbell) for qp in self._qps.values() if qp.drop_user(key)]
        self.owner.host.leave_doorbells(key, left)

    def resume(self) -> None:
        """The thread is active again; it rejoins its doorbells' sharers at its next post."""
        self.idle_since = None

    def spin_idle(self, ns: int):
        """``yield from thread.spin_idle(ns)``: the running coroutine idles ``ns`` the way SMART's
        benchmarks idle between operations (``IdleExecution`` in include/smart/benchmark.h and in
        dtx/*/bench.cpp: read the cycle counter, yield, until the time is up), not by sleeping. It
        stays in the thread's run queue, so while it idles every coroutine of the thread that
        resumes after a completion waits longer (:meth:`spin_delay`)."""
        self._spinners += 1
        try:
            yield ns
        finally:
            self._spinners -= 1

    def spin_delay(self) -> int:
        """How much later (ns) a coroutine resumes after its completion because ``k`` coroutines of
        its thread are idling by spinning. SMART's scheduler (include/smart/task.h) is a FIFO run
        queue: the coroutine that polls the CQ is one of its tasks, and the one it finds complete is
        appended to the queue's tail. So the completion waits for the poller's next turn, a uniform
        point of one round of the queue (``k`` spinner turns of a switch and a clock read each, and
        the poller's own switch and poll), then behind the ``k`` spinners once more. The draw is the
        thread's own stream, so a run stays deterministic."""
        k = self._spinners
        turns = k * self.spin_turn_ns
        return int(self._rng.random() * (turns + self.poll_switch_ns) + turns)

    def doorbell_sharers(self) -> dict[int, float]:
        """Doorbell index -> threads counted as its sharers, for this thread's QPs (a thread
        posting through k doorbells counts 1/k on each)."""
        out = {}
        for qp in self._qps.values():
            units = int(qp.fabric.table[qp.ctx.desc[nic.D_STATE] + nic.S_DB_USERS + qp.doorbell])
            out[qp.doorbell] = units / nic.SHARER_UNIT
        return out

    # -- SMART: work-request throttling ----------------------------------------------------------
    def _drain(self) -> None:
        """Ring queued batches, oldest first, while credits last (a batch larger than C_max goes
        in pieces of C_max). Called by a post and by the completion that returns credits; a ring
        from a completion charges the thread's core from then on (``cpu_free``)."""
        q = self._wr_queue
        while q:
            co, dst, items = q[0]
            n = len(items)
            cap = self._wr_cmax
            k = n if cap is None or n <= cap else cap
            if cap is not None and cap - self._wr_out < k:
                return
            if k < n:
                q[0] = (co, dst, items[k:])      # the rest stays queued, still one batch of co's
                items = items[:k]
            else:
                q.popleft()
                co._outstanding -= 1             # _post_to counts it again
            self._wr_queued -= k
            self._wr_out += k
            if self._wr_out > self._wr_out_peak:
                self._wr_out_peak = self._wr_out
            co._post_to(dst, items)

    def _set_cmax(self, cap) -> None:
        """UpdateCMax: credits follow as C_max - outstanding. A node-wide tuner sets every
        thread's C_max (and rings what the others now may); the caller drains this thread."""
        if self._tuner is not None and self._tuner is self.owner._node_tuner:
            for t in self.owner.threads:
                t._wr_cmax = cap
                if t is not self and t._wr_queue:
                    t._drain()
        else:
            self._wr_cmax = cap

    # -- SMART: coroutine throttling ---------------------------------------------------------------
    def op_begin(self, co: "VerbBatch | None" = None):
        """``yield from thread.op_begin(co)`` before a KV operation: with coroutine throttling on,
        waits until fewer than c_max operations of this thread are running. ``co`` (optional)
        restarts its back-off sequence. Pair with :meth:`op_end`."""
        if co is not None:
            co._bo_fail = 0
        if not self._coro_throttle or (self._ops_running < self._conflict.c_max and not self._op_waiters):
            self._ops_running += 1
            return
        ev = self.env.event()
        self._op_waiters.append(ev)
        yield ev                                 # _admit counted us in

    def op_end(self) -> None:
        """The operation started by :meth:`op_begin` has returned."""
        self._ops_running -= 1
        if self._conflict is not None:
            self._conflict.op_done(self.env.now)
        if self._op_waiters:
            self._admit()

    def op(self, gen, co: "VerbBatch | None" = None):
        """``result = yield from thread.op(client.get(co, key), co)``: op_begin, the operation, op_end."""
        yield from self.op_begin(co)
        try:
            return (yield from gen)
        finally:
            self.op_end()

    def _admit(self) -> None:
        waiters = self._op_waiters
        cap = self._conflict.c_max if self._coro_throttle else None
        while waiters and (cap is None or self._ops_running < cap):
            self._ops_running += 1
            waiters.popleft().succeed()

    def resume_delay(self) -> int:
        """Chaos: how much later (ns) the coroutine whose verbs just completed resumes: 0, or a
        draw of the thread's stream (``nic.chaos_draw``) when the profile's ``chaos.resume_ns`` is set."""
        if self._resume_chaos is None:
            return 0
        d = self._resume_chaos.draw()
        if d:
            self.fabric.windows["resumes_delayed"] += 1
        return d

    def _cycles_ns(self, cycles: int) -> int:
        return self.smart.cycles_ns(cycles, self.fabric.profile.cpu.ghz)

    def qp(self, dst: int) -> QP:
        qp = self._qps.get(dst)
        if qp is None:
            qp = self._qps[dst] = self.owner._qp_for(self, dst)
        return qp

    def rkey(self, node: int, region: int) -> int:
        key = self._rkeys.get((node, region))
        if key is None:
            key = self._rkeys[(node, region)] = self.fabric.exposed_key(node, region)
        return key

    def scratch(self, length: int) -> int:
        """Carve ``length`` bytes (64-byte aligned) out of the thread's ring buffer."""
        size = (length + 63) & ~63
        if size > self.owner.buffer_bytes:
            raise ValueError(f"a single verb of {length} B exceeds the thread buffer ({self.owner.buffer_bytes} B)")
        if self._buf_pos + size > self.owner.buffer_bytes:
            self._buf_pos = 0
        off = self._buf_pos
        self._buf_pos += size
        return off

    def cpu(self, ns: int) -> None:
        """Charge ``ns`` of this thread's core to the running coroutine."""
        env = self.env
        now = env.now
        proc = env.active_process
        debt = proc.debt_ns
        start = now + debt
        if start < self.cpu_free:
            start = self.cpu_free
        self.cpu_free = start + ns
        charge = start + ns - now - debt   # env.charge(charge), inlined
        if charge < 0:
            raise ValueError(f"negative charge {charge}")
        proc.debt_ns = debt + charge
        if env.tracer is not None:
            env.tracer.cpu_charge(self, proc, "compute", start, start + ns)

    def _batch_arrays(self, n: int) -> tuple:
        """The NIC model's arrays for a batch of ``n`` work requests, allocated once per size:
        ``(rows, out)``: one row per work request (filled with one ``_PACK_WR`` call, read by
        ``nic.model_post_rows``) and the view of the model's three outputs."""
        arrays = self._batches.get(n)
        if arrays is None:
            rows = np.zeros((n, nic.WR_COLS), np.int64)
            arrays = self._batches[n] = (rows, rows[:, nic.WR_OUT:nic.WR_MODEL_COLS])
        return arrays


class VerbBatch:
    """One coroutine's batch of verbs and its handle for posting them (see the module docstring)."""

    __slots__ = ("thread", "env", "_pending", "_posted", "_outstanding", "_waiter", "_errors", "_mr_off",
                 "_heap", "_next_seq", "_land_cb", "_batch_done_cb", "_succeed_cb", "_submit", "_bo_fail", "_flags",
                 "_lines_cb", "_landings", "_pw", "_dr", "_kernels", "_unretired", "_node", "_nvm", "_many",
                 "_sample", "_read_whole", "_descending", "_write_race")

    def __init__(self, thread: RdmaThread):
        self.thread = thread
        env = self.env = thread.env
        self._pending: list = []
        self._many = False             # a read_many block (a Reads) is among the queued verbs
        self._outstanding = 0
        self._waiter = None
        self._errors: list = []
        self._mr_off = gaddr_offset(thread.mr.addr)
        # effects and completions go straight onto the environment's queue (what env.schedule
        # does, minus its call), with bound methods made once
        self._heap, self._next_seq = env.event_queue()
        self._land_cb = self._land
        self._lines_cb = self._land_lines
        self._landings: list = []      # multi-line transfers still landing (shm/landing.py)
        self._pw = pending_writes_of(thread.fabric)   # when each node's memory next changes
        self._dr = deferred_reads_of(thread.fabric, env)   # None: every READ lands at its effect time
        # persistent memory's durability model (shm/nvm.py): None unless a node has NVM
        self._nvm = nvm_shadow_of(thread.fabric)
        # the compiled landings (a one-line READ of host memory, any other verb that lands at once:
        # land_verb_now; multi-line transfers: begin_landing's kernels), entered without numba's
        # typing of their arguments (shm/kernels.py): the arrays are the fabric's own and the
        # thread's buffer
        self._kernels = thread.host_kernels()
        # a multi-line READ's test whether it lands whole, and its landing (shm/landing.py)
        self._read_whole = land_read_whole_entry(thread.fabric, thread.buf)
        nic_profile = thread.fabric.profile.nic
        self._descending = not nic_profile.ordered_multiline_writes   # a WRITE's lines, highest first
        self._write_race = nic_profile.atomic_write_race             # atomics through apply_one_sided
        # and the deferred READs' landing (shm/deferred.py), the same way
        self._sample = thread.deferred_kernel() if self._dr is not None else None
        # completions still to retire from the node's outstanding count, per node (unretired_of)
        self._unretired = unretired_of(thread.fabric)
        self._node = thread.owner.node
        self._batch_done_cb = self._batch_done
        self._succeed_cb = env.succeed_last   # a sync's wake-up with no error: firing its event is all it does
        self._bo_fail = 0              # consecutive failed backoff_cas (the back-off exponent)
        self._flags = 0                # nic.FLAG_FENCE for the next verb queued, after fence()
        if thread._throttle:           # SMART work-request throttling: posts go through credits
            self._submit = self._post_throttled
            self._batch_done_cb = self._batch_done_throttled
        else:
            self._submit = self._post_to

    @property
    def queued(self) -> int:
        """The verbs queued on this batch and not yet posted (``post``/``sync`` sends them)."""
        return sum(len(e) if type(e) is Reads else 1 for e in self._pending)

    @property
    def in_flight(self) -> int:
        """The posts of this batch not yet completed (a ``sync`` now would wait for them)."""
        return self._outstanding

    # -- queueing verbs ---------------------------------------------------------------------
    def _queue(self, op, addr, length, a=0, b=0, am=0, bm=0) -> Handle:
        thr = self.thread
        off = thr._buf_pos
        end = off + ((length + 63) & ~63)
        if end <= thr._buf_cap:         # the common case of RdmaThread.scratch, inlined
            thr._buf_pos = end
        else:
            off = thr.scratch(length)
        # Handle(thr.buf, off, length) without the call of its __init__ (about a third of a
        # handle's making, once per verb)
        h = _new_object(Handle)
        h._buf = thr.buf
        h.offset = off
        h.length = length
        h.status = -1
        flags = self._flags
        if flags:
            self._flags = 0
        self._pending.append((op, addr, length, off, a, b, am, bm, h, flags))
        return h

    def fence(self) -> None:
        """The next verb queued waits, at the NIC, until the earlier READs and atomics of its QP
        have completed (``IBV_SEND_FENCE``). Without it a WRITE may take effect before a READ or
        atomic posted earlier on the same QP (RC allows it); WRITEs keep their posting order
        among themselves, and a READ or atomic sees the WRITEs posted before it, fence or not
        (docs/fabric.md, "Ordering rules")."""
        self._flags = nic.FLAG_FENCE

    def read(self, addr: int, length: int) -> Handle:
        return self._queue(IBV_WR_RDMA_READ, addr, length)

    def read_many(self, addrs, length: int) -> Reads:
        """Queue a READ of ``length`` bytes at each global address of ``addrs`` (a sequence of
        ints or a one-dimensional integer array), in order: the same verbs, buffer offsets,
        timing and results as ``[co.read(a, length) for a in addrs]``, with one :class:`Reads`
        for all of them instead of a handle each. Cheaper in Python per READ: a block whose
        addresses name one node is packed into its work-request rows by one compiled pass, and
        when it is posted alone (nothing else queued), at least ``shm.deferred.DEFER_MIN`` READs
        each within one 64-byte line of host memory, its rows go to the NIC model and to the
        deferred READs as they are (shm/readmany.py)."""
        global _PACK_READS
        a, unsigned = _address_array(addrs)
        if type(length) is not int:
            if not isinstance(length, np.integer):      # (nor a bool)
                raise ValueError(f"read_many: length must be a positive number of bytes, got {length!r}")
            length = int(length)
        if length < 1:
            raise ValueError(f"read_many: length must be a positive number of bytes, got {length!r}")
        thr = self.thread
        n = a.shape[0]
        stride = (length + 63) & ~63
        base = thr._buf_pos
        end = base + n * stride
        if n >= DEFER_MIN and end <= thr._buf_cap:   # one block of the buffer, as n reads would carve it
            rows = np.empty((n, nic.WR_COLS), np.int64)
            pack = _PACK_READS
            if pack is None:
                pack = _PACK_READS = pack_reads_entry()
            code = pack(rows, a, length, base, stride, self._flags)
            if code >= ONE_LINE_HOST:     # one node, each READ within one line of host memory
                thr._buf_pos = end
                self._flags = 0
                reads = _new_reads(thr.buf, length, range(base, end, stride), rows, code - ONE_LINE_HOST, None)
                self._pending.append(reads)
                self._many = True
                return reads
        # a few READs (fewer than deferral takes: a block would cost more than it saves), READs
        # that no post could defer (of several lines, of device memory), several nodes, a
        # buffer that wraps, or an address past the signed range: each READ queued on its own,
        # as read() queues it
        addresses = a.view(np.uint64).tolist() if unsigned else a.tolist()
        if addresses and min(addresses) < 0:
            i = next(i for i, addr in enumerate(addresses) if addr < 0)
            raise ValueError(f"read_many: address {addresses[i]} (index {i}) is negative")
        queue = self._queue
        handles = [queue(IBV_WR_RDMA_READ, addr, length) for addr in addresses]
        return _new_reads(thr.buf, length, [h.offset for h in handles], None, -1, handles)

    def write(self, addr: int, data) -> Handle:
        """WRITE ``data`` (bytes, a uint8 array, or an int written as 8 little-endian bytes)."""
        if isinstance(data, (int, np.integer)):
            data = int(data).to_bytes(8, "little", signed=False)
        if isinstance(data, (bytes, bytearray)):     # copied through a memoryview: no numpy call
            h = self._queue(IBV_WR_RDMA_WRITE, addr, len(data))
            self.thread.buf_view[h.offset:h.offset + h.length] = data
            return h
        payload = np.frombuffer(data, np.uint8) if not isinstance(data, np.ndarray) else data.view(np.uint8)
        h = self._queue(IBV_WR_RDMA_WRITE, addr, payload.shape[0])
        self.thread.buf[h.offset:h.offset + h.length] = payload
        return h

    def cas(self, addr: int, expected: int, desired: int) -> Handle:
        return self._queue(IBV_WR_ATOMIC_CMP_AND_SWP, addr, 8, expected, desired)

    def faa(self, addr: int, delta: int) -> Handle:
        return self._queue(IBV_WR_ATOMIC_FETCH_AND_ADD, addr, 8, delta & _U64)

    def masked_cas(self, addr: int, compare: int, swap: int, compare_mask: int, swap_mask: int) -> Handle:
        return self._queue(IBV_WR_MASKED_ATOMIC_CMP_AND_SWP, addr, 8, compare, swap, compare_mask, swap_mask)

    def masked_faa(self, addr: int, delta: int, boundary_mask: int) -> Handle:
        return self._queue(IBV_WR_MASKED_ATOMIC_FETCH_AND_ADD, addr, 8, delta & _U64, 0, boundary_mask)

    def rpc(self, dst_node, payload: bytes = b"", **kw):
        """``reply = yield from co.rpc(node, payload, method=m, timeout_ns=..., retries=...)``: a
        two-sided RPC over datagrams to ``node``'s RPC server, its post charged to this coroutine's
        thread (``shm.rpc.rpc``; the thread's node needs a datagram net, ``NodeRdma.udp``)."""
        from shm.rpc_client import rpc
        return rpc(self, dst_node, payload, **kw)

    # -- posting and waiting ------------------------------------------------------------------
    def post(self) -> None:
        """Ring the doorbell(s) for everything queued: one post per destination node."""
        pending = self._pending
        if not pending:
            return
        if ARMED_POINTS:
            failpoint("verbs.post")
        self._pending = []
        if self._many:                   # a read_many block among them
            self._many = False
            if len(pending) == 1:
                self._post_many(pending[0])
                return
            pending = [item for e in pending for item in (e._items() if type(e) is Reads else (e,))]
        dst = pending[0][1] >> NODE_SHIFT & NODE_MASK
        for item in pending:
            if item[1] >> NODE_SHIFT & NODE_MASK != dst:
                break
        else:                            # the common case: a single destination
            self._submit(dst, pending)
            return
        by_node: dict[int, list] = {}
        for item in pending:
            by_node.setdefault(item[1] >> NODE_SHIFT & NODE_MASK, []).append(item)
        for dst, items in by_node.items():
            self._submit(dst, items)

    def _post_many(self, reads: Reads) -> None:
        """A read_many block posted alone: :meth:`_post_to` and :meth:`_defer` of its READs, with
        its rows as they were packed at queue time (the same prices, places and sequence numbers).
        A block that may not be deferred goes READ by READ through the path ``read`` takes."""
        dst = reads.node
        rows = reads.rows
        n = len(rows)
        if n < DEFER_MIN or self._dr is None or self.thread._throttle \
                or (self._nvm is not None and dst in self._nvm.images):
            self._submit(dst, reads._items())
            return
        # the doorbell as _post_to rings it (kept inline there: a shared helper's call cost the
        # depth-1 loop 0.7 % of its instructions, scripts/count_work.py)
        thr = self.thread
        qp = thr._qps.get(dst)
        if qp is None:
            qp = thr.qp(dst)
        qp.model_post(dst, rows, thr.cpu_free, thr)
        thr.cpu_free = qp.cpu_free
        thr.posts += 1
        thr.verbs += n
        qp.host.posted += n
        # the block's rows are its own (made by read_many): the batch takes them without a copy
        self._defer(dst, qp, reads, rows, self.env.now, False)

    def _post_throttled(self, dst: int, items: list) -> None:
        """SMART Algorithm 1's SmartPostSend: queue the batch in the thread and ring what the
        credits allow now; the rest is rung by the completions that return credits."""
        thr = self.thread
        tuner = thr._tuner
        if tuner is not None and tuner.phase == "idle":
            thr._set_cmax(tuner.begin(self.env.now))
        q = thr._wr_queue
        cap = thr._wr_cmax
        if q or (cap is not None and cap - thr._wr_out < (len(items) if len(items) <= cap else cap)):
            thr._posts_waited += 1
        q.append((self, dst, items))
        thr._wr_queued += len(items)
        self._outstanding += 1           # a queued batch counts: sync() waits for it too
        thr._drain()

    def _post_to(self, dst: int, items: list) -> None:
        """One doorbell towards node ``dst``: price the batch, schedule each work request's
        effect at its arrival time, then the batch's completion."""
        thr = self.thread
        n = len(items)
        qp = thr._qps.get(dst)
        if qp is None:
            qp = thr.qp(dst)
        arrays = thr._batches.get(n)
        if arrays is None:
            arrays = thr._batch_arrays(n)
        rows = arrays[0]
        pos = 0
        for item in items:
            addr = item[1]
            _PACK_WR(rows, pos, MODEL_OPCODE[item[0]], item[2], addr & OFFSET_MASK, addr >> OFFSET_BITS & REGION_MASK,
                     item[9], 0, 0, 0, item[3])
            pos += _WR_BYTES
        # deferred (shm/deferred.py): every request a one-line host READ, and not of persistent
        # memory (a READ to NVM flushes its QP's WRITEs at its effect time)
        dr = self._dr
        reads = (n >= DEFER_MIN and dr is not None and dr.deferrable(rows)
                 and (self._nvm is None or dst not in self._nvm.images))
        qp.model_post(dst, rows, thr.cpu_free, thr)
        thr.cpu_free = qp.cpu_free
        thr.posts += 1
        thr.verbs += n
        qp.host.posted += n           # the host's verbs statistics count coroutine verbs too
        now = self.env.now
        if reads:                        # one line each: the model lands each at one instant
            self._defer(dst, qp, items, rows, now)
            return
        heap = self._heap
        seq = self._next_seq
        times = arrays[1].tolist()
        land = self._land_cb
        env = self.env
        synced = env.synced               # a rack of processes: the others wait for our effects
        writes = False
        for (effect, _, other), item in zip(times, items):
            first = other if other < effect else effect   # == effect but for a multi-line transfer
            if other == effect:
                heappush(heap, (effect if effect > now else now, seq(), land, item))
            else:                        # several lines, landing one by one (shm/landing.py)
                heappush(heap, (first if first > now else now, seq(), self._lines_cb, (item, effect, other)))
            if item[0] != IBV_WR_RDMA_READ:
                writes = True
                if synced:
                    env.effect_at(first if first > now else now)
            elif synced:
                env.effect_at(first if first > now else now, False)
        if writes:                       # a READ landing meanwhile must see them
            self._pw.add_rows(dst, rows, now)
        self._outstanding += 1
        done = times[-1][1]               # the last request's completion: in posting order (as in _defer)
        heappush(heap, (done if done > now else now, seq(), self._batch_done_cb, (qp, n, None)))

    def _defer(self, dst: int, qp, items, rows, now: int, copy: bool = True) -> None:
        """A batch of single-line READs: they land at its completion, or before a write to their
        node that comes after them (shm/deferred.py); each keeps the place (time, sequence
        number) its own event would have had: the batch takes the READs' numbers at once, in
        posting order (``NumberedReads``). ``items``: the queued verbs, or a read_many block
        (:class:`Reads`); ``copy``: the rows are the thread's, shared by its posts of one size."""
        effects = rows[:, nic.WR_OUT].tolist()
        n = len(effects)
        seq0 = self.env.take_seqs(n)
        done = rows.item(n - 1, nic.WR_OUT + 1)   # the last completion: a QP completes in posting order (nic)
        thr = self.thread
        rkey = thr._rkeys.get((dst, REGION_HOST))
        if rkey is None:
            rkey = thr.rkey(dst, REGION_HOST)
        batch = NumberedReads(thr.fabric.memory[dst], rkey, rows.copy() if copy else rows, None, items, thr.buf, dst,
                              sample=self._sample)
        batch.seq0 = seq0
        batch.floor = now
        lo = min(effects)
        # the earliest place: the first of the earliest effects (a READ takes effect after its
        # post, so no place is clamped to now; min over the places where one would be)
        self._dr.add(batch, (lo, seq0 + effects.index(lo)) if lo >= now else None)
        self._outstanding += 1
        heappush(self._heap, (done if done > now else now, self._next_seq(), self._batch_done_cb, (qp, n, batch)))

    def _land(self, item) -> None:
        if self._landings:
            # RC order: this verb's effect is no earlier than the end of the landing windows of
            # the multi-line WRITEs posted before it (nic._in_effect_order), but their last lines
            # are events that may sort after this one at the same ns: land them first
            self._landings = flush_due(self._landings, self.env.now)
        op, addr, length, off, a, b, am, bm, h, _ = item
        thr = self.thread
        dst = addr >> NODE_SHIFT & NODE_MASK
        region = addr >> OFFSET_BITS & REGION_MASK
        rkey = thr._rkeys.get((dst, region))
        if rkey is None:
            rkey = thr.rkey(dst, region)
        nvm = self._nvm
        if nvm is not None and region == REGION_HOST and dst in nvm.images and op in NVM_KIND:
            self._land_nvm(nvm, item, dst, rkey)
            return
        if op == IBV_WR_RDMA_READ and region == REGION_HOST:
            # the commonest verb, with the fewest steps (dst is the address's node by construction)
            mem = thr.fabric.memory[dst]
            status = IBV_WC_SUCCESS if self._kernels.read_write(True, mem.mrt, rkey, REGION_HOST, addr & OFFSET_MASK,
                                                                length, mem.host, mem.host_locks, thr.buf, off, False) \
                else IBV_WC_REM_ACCESS_ERR
        elif (region == REGION_HOST or region == REGION_DEVICE) and (op == IBV_WR_RDMA_WRITE or not self._write_race):
            # the rest of apply_one_sided in one compiled call; an atomic's write-back race
            # (shm/atomic_race.py) takes apply_one_sided
            fabric = thr.fabric
            kind = LAND_KIND[op]
            if kind != LAND_READ:
                before_write(fabric, dst)        # READs deferred past now land first (shm/deferred.py)
                if kind >= 0:                    # the operands as int64 bit patterns (to_i64, inlined)
                    a = ((a + I64_BIAS) & _U64) - I64_BIAS
                    b = ((b + I64_BIAS) & _U64) - I64_BIAS
                    am = ((am + I64_BIAS) & _U64) - I64_BIAS
                    bm = ((bm + I64_BIAS) & _U64) - I64_BIAS
            mem = fabric.memory[dst]
            if region == REGION_HOST:
                landed = self._kernels.verb(kind, REGION_HOST, mem.mrt, rkey, addr & OFFSET_MASK, length, mem.host,
                                            mem.host64, mem.host_locks, thr.buf, off, a, b, am, bm, self._descending)
            else:
                landed = self._kernels.verb(kind, REGION_DEVICE, mem.mrt, rkey, addr & OFFSET_MASK, length,
                                            mem.device, mem.device64, mem.device_locks, thr.buf, off, a, b, am, bm,
                                            self._descending)
            if landed == VERB_LANDED:
                h.status = IBV_WC_SUCCESS
                return
            if landed == VERB_RACED:
                fabric.windows["cas_raced"] += 1     # docs/checking.md, "Chaos": how hard a check tried
                h.status = IBV_WC_SUCCESS
                return
            status = IBV_WC_REM_ACCESS_ERR if landed == VERB_REFUSED else IBV_WC_REM_INV_REQ_ERR
        else:
            status = apply_one_sided(thr.fabric, dst, op, addr, rkey, thr.buf, off, length, a, b, am, bm, self.env,
                                     self._kernels)
        h.status = status
        if status != IBV_WC_SUCCESS:
            thr.errors += 1
            thr.owner.host.errors += 1
            self._errors.append((op, addr, status))

    def _land_nvm(self, nvm, item, dst: int, rkey: int) -> None:
        """:meth:`_land` on persistent memory: the verb's effect between the durability model's
        two steps (shm/nvm.py: lines copied before a write, the write recorded or the QP's writes
        flushed after)."""
        op, addr, length, off, a, b, am, bm, h, _ = item
        thr = self.thread
        kind = NVM_KIND[op]
        roff = addr & OFFSET_MASK
        old = nvm.before(kind, dst, roff, length)
        status = apply_one_sided(thr.fabric, dst, op, addr, rkey, thr.buf, off, length, a, b, am, bm, self.env)
        h.status = status
        if status == IBV_WC_SUCCESS:
            nvm.after(thr.qp(dst), kind, dst, roff, length, old)
        else:
            thr.errors += 1
            thr.owner.host.errors += 1
            self._errors.append((op, addr, status))

    def _land_lines(self, arg) -> None:
        """The first line of a multi-line READ or WRITE lands: check the rkey for the whole range
        (a bad one touches nothing), then land lines as they come due."""
        item, effect, other = arg
        if self._landings:          # as in _land: earlier multi-line WRITEs first
            self._landings = flush_due(self._landings, self.env.now)
        op, addr, length, off, a, b, am, bm, h, _ = item
        thr = self.thread
        dst = addr >> NODE_SHIFT & NODE_MASK
        rkey = thr._rkeys.get((dst, REGION_HOST))
        if rkey is None:
            rkey = thr.rkey(dst, REGION_HOST)
        is_read = op == IBV_WR_RDMA_READ
        nvm = self._nvm
        if is_read and (nvm is None or dst not in nvm.images):
            # begin_landing's first test, and the landing when it passes, in one compiled call
            pw = self._pw
            ph = pw.heaps.get(dst)
            if ph is None:
                ph = pw.heap(dst)
            heap = self._heap
            mem = thr.fabric.memory[dst]
            landed = self._read_whole(ph, pw.floor_ns, self.env.now, heap[0][0] if heap else INF, other, mem.mrt, rkey,
                                      addr & OFFSET_MASK, length, mem.host, mem.host_locks, thr.buf, off)
            if landed > 0:
                h.status = IBV_WC_SUCCESS
                return
            if landed == 0:
                h.status = IBV_WC_REM_ACCESS_ERR
                thr.errors += 1
                thr.owner.host.errors += 1
                self._errors.append((op, addr, IBV_WC_REM_ACCESS_ERR))
                return
            # a write may land inside its window: line by line (begin_landing tests again, the same way)
        lo, hi = (effect, other) if is_read else (other, effect)
        if nvm is not None and dst in nvm.images:
            # persistent memory (shm/nvm.py): a WRITE's lines are copied before its first lands
            # and the whole WRITE recorded (a flush comes after its last line: RC order)
            nvm.before(NVM_KIND[op], dst, addr & OFFSET_MASK, length)
        else:
            nvm = None
        landing = begin_landing(self.env, thr.fabric, dst, is_read, addr & OFFSET_MASK, length, rkey, thr.buf, off,
                                lo, hi, self._kernels)
        if nvm is not None and landing is not None:
            nvm.after(thr.qp(dst), NVM_KIND[op], dst, addr & OFFSET_MASK, length, None, thr.buf[off:off + length])
        if landing is None:
            h.status = IBV_WC_REM_ACCESS_ERR
            thr.errors += 1
            thr.owner.host.errors += 1
            self._errors.append((op, addr, IBV_WC_REM_ACCESS_ERR))
            return
        h.status = IBV_WC_SUCCESS
        if landing is not ALL_LANDED:
            self._landings.append(landing)

    def _batch_done(self, arg) -> None:
        qp, n, batch = arg
        if batch is not None:
            self._dr.complete(batch)
            self._read_statuses(batch)
        if self._landings:
            self._landings = flush_due(self._landings, self.env.now)
        self._unretired[self._node] += n   # retired by the node's next post (shm.verbs.unretired_of)
        qp.host.completed += n
        self._outstanding -= 1
        if self._outstanding == 0 and self._waiter is not None:
            ev, self._waiter = self._waiter, None
            thr = self.thread
            # the thread polls its CQ once: that costs its core; a thread running several
            # coroutines also switched away from this one when it waited and switches back now
            # (to the polling coroutine and back: two switches per resume, profile
            # software.coro_switch_cycles; one coroutine busy-polls in place and switches never)
            cost = thr.poll_ns if thr._coros < 2 else thr.poll_switch_ns
            if thr._spinners:
                cost += thr.spin_delay()       # idlers spinning in the thread's run queue
            wake = self.env.now
            if wake < thr.cpu_free:
                wake = thr.cpu_free
            wake += cost
            if thr._resume_chaos is not None:
                wake += thr.resume_delay()     # chaos: the thread was descheduled meanwhile
            thr.cpu_free = wake
            if self.env.tracer is not None:
                self.env.tracer.cpu_charge(thr, None, "poll CQ", wake - cost, wake, co=self)
            # every verb of the coroutine has landed (each lands before its completion), so its
            # errors are known: the wake-up fires the event, or fails it with them
            heappush(self._heap, (wake, self._next_seq(), self._finish if self._errors else self._succeed_cb, ev))

    def _read_statuses(self, batch: ReadBatch) -> None:
        """Each deferred READ's handle gets its status (errors as ``_land`` reports them)."""
        items = batch.items
        if type(items) is Reads:         # a read_many block: its status list
            self._block_statuses(batch, items)
            return
        if not batch.failed:             # every row LANDED (complete() landed what was left)
            for item in items:
                item[8].status = IBV_WC_SUCCESS
            return
        thr = self.thread
        for item, state in zip(batch.items, batch.rows[:, C_STATE].tolist()):
            if state == LANDED:
                item[8].status = IBV_WC_SUCCESS
            else:
                item[8].status = IBV_WC_REM_ACCESS_ERR
                thr.errors += 1
                thr.owner.host.errors += 1
                self._errors.append((item[0], item[1], IBV_WC_REM_ACCESS_ERR))

    def _block_statuses(self, batch: ReadBatch, reads: Reads) -> None:
        """:meth:`_read_statuses` of a read_many block's batch."""
        status = reads._status
        if not batch.failed:
            status[:] = [IBV_WC_SUCCESS] * len(status)
            return
        thr = self.thread
        for i, state in enumerate(batch.rows[:, C_STATE].tolist()):
            if state == LANDED:
                status[i] = IBV_WC_SUCCESS
            else:
                status[i] = IBV_WC_REM_ACCESS_ERR
                thr.errors += 1
                thr.owner.host.errors += 1
                self._errors.append((IBV_WR_RDMA_READ, reads.address(i), IBV_WC_REM_ACCESS_ERR))

    def _batch_done_throttled(self, arg) -> None:
        """SmartPollCQ: the completion returns its credits, feeds the C_max tuner, then rings
        batches that were waiting for credits."""
        thr = self.thread
        n = arg[1]
        thr._wr_out -= n
        self._batch_done(arg)
        tuner = thr._tuner
        if tuner is not None:
            changed, cap = tuner.tick(self.env.now, n)
            if changed:
                thr._set_cmax(cap)       # UpdateCMax: credits = C_max - outstanding
        if thr._wr_queue:
            thr._drain()

    def _finish(self, ev) -> None:
        if self._errors:
            errs, self._errors = self._errors, []
            op, addr, status = errs[0]
            ev.fail(RemoteAccessError(f"{len(errs)} verb(s) failed; first: opcode {op} at {format_gaddr(addr)}: "
                                      f"{wc_status_str(status)}"))
        else:
            ev.succeed()

    def sync(self):
        """Post anything still queued; ``yield co.sync()`` resumes when all of this coroutine's
        verbs have completed, and raises :class:`RemoteAccessError` if any of them failed."""
        if ARMED_POINTS:
            failpoint("verbs.sync")
        self.post()
        ev = self.env.event()
        if self._outstanding == 0:
            self._finish(ev)
        else:
            self._waiter = ev
        return ev


    # -- SMART: conflict avoidance ------------------------------------------------------------------
    def backoff_cas(self, addr: int, expected: int, desired: int):
        """``ok, old = yield from co.backoff_cas(addr, expected, desired)``: SMART's
        backoff_cas_sync. Posts the CAS (with anything queued before it), waits for it, and on
        failure waits a truncated exponential back-off before returning, so the caller's retry
        is delayed. With conflict avoidance off it is a plain CAS and sync."""
        h = self.cas(addr, expected, desired)
        return (yield from self._backoff_after(h, expected, _U64))

    def backoff_masked_cas(self, addr: int, compare: int, swap: int, compare_mask: int, swap_mask: int):
        """:meth:`backoff_cas` for a masked CAS: it succeeded when the compared bits matched."""
        h = self.masked_cas(addr, compare, swap, compare_mask, swap_mask)
        return (yield from self._backoff_after(h, compare, compare_mask))

    def after_attempt(self, ok: bool):
        """``yield from co.after_attempt(ok)``: SMART's conflict avoidance driven by an attempt that
        is not one CAS, a transaction (SMART-DTX hooks ``sds::Backoff`` at a transaction's commit
        and abort: madsys-dev/smart dtx/dtx.h:91-96, dtx.cpp:149-162). ``ok`` False (an abort) is a
        retry for the retry-rate controller and, with back-off on, waits the truncated exponential
        back-off; True restarts the back-off sequence. Counted as a ``backoff_cas`` would be
        (``SmartStats.backoff_cas`` = attempts, ``retries`` = the failed ones). With conflict
        avoidance off it does nothing (no counter moves, no time passes)."""
        if self.thread._conflict is None:
            return
        delay = self._after_cas(ok)
        if delay:
            yield delay

    def _backoff_after(self, h: Handle, compare: int, mask: int):
        """Sync a queued CAS, then back off if its compared bits (``mask``) did not match."""
        yield self.sync()
        old = h.value
        ok = (old & mask) == (compare & mask)
        if self.thread._conflict is None:
            self._count_cas(ok)
            return ok, old
        delay = self._after_cas(ok)
        if delay:
            yield delay
        return ok, old

    def _count_cas(self, ok: bool) -> None:
        thr = self.thread
        thr._bcas += 1
        if not ok:
            thr._bcas_failed += 1

    def _after_cas(self, ok: bool) -> int:
        """Record the outcome with the retry-rate controller; the back-off (ns) to wait."""
        thr = self.thread
        self._count_cas(ok)
        ctl = thr._conflict
        if ctl.record(self.env.now, ok) and thr._coro_throttle:
            for t in thr._conflict_sharers():       # c_max may have grown
                t._admit()
        if ok:
            self._bo_fail = 0
            return 0
        if not thr.smart.backoff:
            return 0
        cycles = ctl.backoff_cycles(self._bo_fail, thr._rng.random())
        self._bo_fail += 1
        ns = thr._cycles_ns(cycles) if cycles > 0 else 0
        thr._backoffs += 1
        thr._backoff_ns += ns
        return ns


_U64 = (1 << 64) - 1

#: The name :class:`VerbBatch` had before issue 42 (it is not a Python coroutine), kept so that
#: systems and plugins written against ``shm.coro.Coroutine`` keep working.
Coroutine = VerbBatch
