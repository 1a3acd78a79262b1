"""SMART-style coroutine verbs: the interface disaggregated systems are written against.

A system's client code runs as coroutines (actors) on modelled CPU threads. Each coroutine
appends one-sided verbs to its own batch with :meth:`Coroutine.read`, ``write``, ``cas``, ``faa``
(and the masked atomics), rings the doorbell with :meth:`Coroutine.post`, and waits for the whole
batch with ``yield co.sync()``. Results are read from the returned handles after the sync.

Thread resources follow a *policy* (SMART §3.1), which is the whole difference between the curves
of SMART Fig. 3:

* ``shared_qp``: one QP per remote node, shared by every thread of the node;
* ``multiplexed_qp``: a pool of ``qp_pool`` QPs per remote node, thread ``i`` uses QP ``i % pool``;
* ``per_thread_qp``: each thread its own QPs, in one device context, so QPs land on the context's
  4 low-latency + 12 medium-latency doorbells round-robin and threads share doorbell spinlocks;
* ``per_thread_doorbell``: SMART's thread-aware allocation: each thread's QPs on a doorbell of
  its own.

Coroutines of one thread share its core: CPU time charged by one delays the others.

The batch bypasses ``SendWR`` objects: it fills the model's arrays directly and schedules one
effect per work request and one wake-up per batch, which is what makes the emulator fast enough.
"""

from __future__ import annotations

from heapq import heappush
from struct import Struct
from sys import byteorder as _BYTEORDER
from typing import NamedTuple

import numpy as np

from shm import nic
from shm.failpoints import failpoint
from shm.fabric import (
    MAX_NODES, OFFSET_BITS, REGION_BITS, REGION_HOST, format_gaddr, gaddr, gaddr_node, gaddr_offset, gaddr_region,
    remote_read_write,
)
from shm.verbs import (
    IBV_WC_REM_ACCESS_ERR, IBV_WC_SUCCESS, IBV_WR_ATOMIC_CMP_AND_SWP, IBV_WR_ATOMIC_FETCH_AND_ADD,
    IBV_WR_MASKED_ATOMIC_CMP_AND_SWP, IBV_WR_MASKED_ATOMIC_FETCH_AND_ADD, IBV_WR_RDMA_READ, IBV_WR_RDMA_WRITE, CQ, PD, QP, Context, MR,
    MODEL_OPCODE, QPInitAttr, VerbsHost, apply_one_sided, wc_status_str,
)

POLICIES = ("shared_qp", "multiplexed_qp", "per_thread_qp", "per_thread_doorbell")

# gaddr fields, inlined on the hot path (the same arithmetic as gaddr_node/region/offset)
_NODE_SHIFT = REGION_BITS + OFFSET_BITS
_NODE_MASK = MAX_NODES - 1
_REGION_MASK = (1 << REGION_BITS) - 1
_OFFSET_MASK = (1 << OFFSET_BITS) - 1

# A batch for the NIC model is one int64 row per work request: model opcode, length, offset,
# region, inline flag (always 0 here), then the model's two outputs (effect ns, completion ns).
_WR_COLS = 8
_PACK_WR = Struct("<4q").pack_into


class RemoteAccessError(RuntimeError):
    """A verb of a batch completed with an error status (bad address, rkey or alignment)."""


class Handle:
    """The result of one queued verb: ``data`` (READ) or ``value`` (atomics) after ``sync``."""

    __slots__ = ("_buf", "_off", "length", "status")

    def __init__(self, buf, off, length):
        self._buf = buf
        self._off = off
        self.length = length
        self.status = -1  # not landed yet

    @property
    def data(self) -> np.ndarray:
        """The bytes read (a view into the thread's buffer; copy it to keep it past later verbs)."""
        return self._buf[self._off:self._off + self.length]

    @property
    def value(self) -> int:
        """An atomic's old value (or the first 8 bytes read)."""
        word = self._buf[self._off:self._off + 8]
        if word.shape[0] == 8:
            return int.from_bytes(word, _BYTEORDER)   # = its uint64 view, without making one
        return int(word.view(np.uint64)[0])

    @property
    def ok(self) -> bool:
        return self.status == IBV_WC_SUCCESS


class NodeRdma:
    """The RDMA resources of one compute node, allocated by policy, handed out per thread."""

    def __init__(self, host: VerbsHost, node, *, policy: str = "per_thread_doorbell", qp_pool: int = 4,
                 buffer_bytes: int = 256 << 10):
        if policy not in POLICIES:
            raise ValueError(f"unknown QP policy {policy!r}; choose one of {', '.join(POLICIES)}")
        if qp_pool < 1:
            raise ValueError(f"qp_pool must be >= 1, got {qp_pool}")
        self.host = host
        self.fabric = host.fabric
        self.env = host.env
        self.node = self.fabric.node_index(node)
        self.policy = policy
        self.qp_pool = qp_pool
        self.buffer_bytes = buffer_bytes
        self.threads: list[RdmaThread] = []
        self._shared_ctx: Context | None = None
        self._shared_qps: dict[int, list[QP]] = {}

    def _context(self) -> Context:
        if self._shared_ctx is None:
            self._shared_ctx = Context(self.host, self.node)
        return self._shared_ctx

    def thread(self) -> "RdmaThread":
        t = RdmaThread(self, len(self.threads))
        self.threads.append(t)
        return t

    def _qp_for(self, thread: "RdmaThread", dst: int) -> QP:
        """The QP ``thread`` uses towards node ``dst``, created on first use."""
        if self.policy in ("shared_qp", "multiplexed_qp"):
            pool = self._shared_qps.setdefault(dst, [])
            want = 0 if self.policy == "shared_qp" else thread.index % self.qp_pool
            while len(pool) <= want:
                pool.append(_make_qp(self._context(), dst))
            return pool[want]
        if self.policy == "per_thread_qp":
            return _make_qp(self._context(), dst)
        if thread._ctx is None:
            thread._ctx = Context(self.host, self.node, low_latency=0, doorbells=1)
        return _make_qp(thread._ctx, dst)


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
        self._buf_view = memoryview(self.buf)
        self._buf_pos = 0
        self._buf_cap = owner.buffer_bytes
        self._rkeys: dict[tuple[int, int], int] = {}
        self._batches: dict[int, tuple] = {}   # batch size -> the model's arrays (see _batch_arrays)
        self.posts = self.verbs = self.errors = 0

    def statistics(self) -> ThreadStats:
        return ThreadStats(self.posts, self.verbs, self.errors, self.cpu_free)

    def coroutine(self) -> "Coroutine":
        return Coroutine(self)

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
        actor = env.active_process
        debt = actor._debt
        start = now + debt
        if start < self.cpu_free:
            start = self.cpu_free
        self.cpu_free = start + ns
        charge = start + ns - now - debt   # env.charge(charge), inlined
        if charge < 0:
            raise ValueError(f"negative charge {charge}")
        actor._debt = debt + charge
        actor._charged += charge

    def _batch_arrays(self, n: int) -> tuple:
        """The NIC model's arrays for a batch of ``n`` work requests, allocated once per size:
        ``(rows, ops, lens, addrs, regions, inline, out)``, the last six being column views of
        ``rows`` (one row per work request, filled with one ``_PACK_WR`` call)."""
        arrays = self._batches.get(n)
        if arrays is None:
            rows = np.zeros((n, _WR_COLS), np.int64)
            arrays = self._batches[n] = (rows, rows[:, 0], rows[:, 1], rows[:, 2], rows[:, 3], rows[:, 4],
                                         rows[:, 5:7])
        return arrays


class Coroutine:
    """One coroutine's batch of verbs (see the module docstring)."""

    __slots__ = ("thread", "env", "_pending", "_posted", "_outstanding", "_waiter", "_errors", "_mr_off",
                 "_heap", "_next_seq", "_land_cb", "_batch_done_cb", "_finish_cb")

    def __init__(self, thread: RdmaThread):
        self.thread = thread
        env = self.env = thread.env
        self._pending: list = []
        self._outstanding = 0
        self._waiter = None
        self._errors: list = []
        self._mr_off = gaddr_offset(thread.mr.addr)
        # effects and completions go straight onto the environment's heap (what env.schedule
        # does, minus its argument handling), with bound methods made once
        self._heap = env._heap
        self._next_seq = env._next_seq
        self._land_cb = self._land
        self._batch_done_cb = self._batch_done
        self._finish_cb = self._finish_last

    # -- queueing verbs ---------------------------------------------------------------------
    def _queue(self, op, addr, length, a=0, b=0, am=0, bm=0) -> Handle:
        thr = self.thread
        off = thr._buf_pos
        end = off + ((length + 63) & ~63)
        if end <= thr._buf_cap:         # the common case of RdmaThread.scratch, inlined
            thr._buf_pos = end
        else:
            off = thr.scratch(length)
        h = Handle(thr.buf, off, length)
        self._pending.append((op, addr, length, off, a, b, am, bm, h))
        return h

    def read(self, addr: int, length: int) -> Handle:
        return self._queue(IBV_WR_RDMA_READ, addr, length)

    def write(self, addr: int, data) -> Handle:
        """WRITE ``data`` (bytes, a uint8 array, or an int written as 8 little-endian bytes)."""
        if isinstance(data, (int, np.integer)):
            data = int(data).to_bytes(8, "little", signed=False)
        if isinstance(data, (bytes, bytearray)):     # copied through a memoryview: no numpy call
            h = self._queue(IBV_WR_RDMA_WRITE, addr, len(data))
            self.thread._buf_view[h._off:h._off + h.length] = data
            return h
        payload = np.frombuffer(data, np.uint8) if not isinstance(data, np.ndarray) else data.view(np.uint8)
        h = self._queue(IBV_WR_RDMA_WRITE, addr, payload.shape[0])
        self.thread.buf[h._off:h._off + h.length] = payload
        return h

    def cas(self, addr: int, expected: int, desired: int) -> Handle:
        return self._queue(IBV_WR_ATOMIC_CMP_AND_SWP, addr, 8, expected, desired)

    def faa(self, addr: int, delta: int) -> Handle:
        return self._queue(IBV_WR_ATOMIC_FETCH_AND_ADD, addr, 8, delta & _U64)

    def masked_cas(self, addr: int, compare: int, swap: int, compare_mask: int, swap_mask: int) -> Handle:
        return self._queue(IBV_WR_MASKED_ATOMIC_CMP_AND_SWP, addr, 8, compare, swap, compare_mask, swap_mask)

    def masked_faa(self, addr: int, delta: int, boundary_mask: int) -> Handle:
        return self._queue(IBV_WR_MASKED_ATOMIC_FETCH_AND_ADD, addr, 8, delta & _U64, 0, boundary_mask)

    # -- posting and waiting ------------------------------------------------------------------
    def post(self) -> None:
        """Ring the doorbell(s) for everything queued: one post per destination node."""
        pending = self._pending
        if not pending:
            return
        failpoint("verbs.post")
        self._pending = []
        dst = pending[0][1] >> _NODE_SHIFT & _NODE_MASK
        for item in pending:
            if item[1] >> _NODE_SHIFT & _NODE_MASK != dst:
                break
        else:                            # the common case: a single destination
            self._post_to(dst, pending)
            return
        by_node: dict[int, list] = {}
        for item in pending:
            by_node.setdefault(item[1] >> _NODE_SHIFT & _NODE_MASK, []).append(item)
        for dst, items in by_node.items():
            self._post_to(dst, items)

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
            _PACK_WR(rows, pos, MODEL_OPCODE[item[0]], item[2], addr & _OFFSET_MASK,
                     addr >> OFFSET_BITS & _REGION_MASK)
            pos += 8 * _WR_COLS
        qp._model(dst, arrays[1], arrays[2], arrays[3], arrays[4], arrays[5], arrays[6], thr.cpu_free, thr)
        thr.cpu_free = qp.cpu_free
        thr.posts += 1
        thr.verbs += n
        qp.host._posted += n           # the host's verbs statistics count coroutine verbs too
        now = self.env.now
        heap = self._heap
        seq = self._next_seq
        land = self._land_cb
        done = 0
        for (effect, complete), item in zip(arrays[6].tolist(), items):
            heappush(heap, (effect if effect > now else now, seq(), land, item))
            if complete > done:
                done = complete
        self._outstanding += 1
        heappush(heap, (done if done > now else now, seq(), self._batch_done_cb, (qp, n)))

    def _land(self, item) -> None:
        op, addr, length, off, a, b, am, bm, h = item
        thr = self.thread
        dst = addr >> _NODE_SHIFT & _NODE_MASK
        region = addr >> OFFSET_BITS & _REGION_MASK
        rkey = thr._rkeys.get((dst, region))
        if rkey is None:
            rkey = thr.rkey(dst, region)
        if op == IBV_WR_RDMA_READ and region == REGION_HOST:
            # the common case of apply_one_sided, inlined (dst is the address's node by construction)
            mem = thr.fabric.memory[dst]
            status = IBV_WC_SUCCESS if remote_read_write(True, mem.mrt, rkey, REGION_HOST, addr & _OFFSET_MASK, length,
                                                         mem.host, mem.host_locks, thr.buf, off, False) \
                else IBV_WC_REM_ACCESS_ERR
        else:
            status = apply_one_sided(thr.fabric, dst, op, addr, rkey, thr.buf, off, length, a, b, am, bm)
        h.status = status
        if status != IBV_WC_SUCCESS:
            thr.errors += 1
            thr.owner.host._errors += 1
            self._errors.append((op, addr, status))

    def _batch_done(self, arg) -> None:
        qp, n = arg
        nic.retire(qp.fabric.table, qp.ctx.desc, n)
        qp.host._completed += n
        self._outstanding -= 1
        if self._outstanding == 0 and self._waiter is not None:
            ev, self._waiter = self._waiter, None
            thr = self.thread
            # the thread polls its CQ once: that costs its core
            wake = self.env.now
            if wake < thr.cpu_free:
                wake = thr.cpu_free
            wake += thr.fabric.profile.cpu.poll_ns
            thr.cpu_free = wake
            heappush(self._heap, (wake, self._next_seq(), self._finish_cb, ev))

    def _finish(self, ev) -> None:
        if self._errors:
            errs, self._errors = self._errors, []
            op, addr, status = errs[0]
            ev.fail(RemoteAccessError(f"{len(errs)} verb(s) failed; first: opcode {op} at {format_gaddr(addr)}: "
                                      f"{wc_status_str(status)}"))
        else:
            ev.succeed()

    def _finish_last(self, ev) -> None:
        """``_finish`` as a heap callback of its own: firing the event is its last action."""
        if self._errors:
            self._finish(ev)
        else:
            self.env._succeed_last(ev)

    def sync(self):
        """Post anything still queued; ``yield co.sync()`` resumes when all of this coroutine's
        verbs have completed, and raises :class:`RemoteAccessError` if any of them failed."""
        failpoint("verbs.sync")
        self.post()
        ev = self.env.event()
        if self._outstanding == 0:
            self._finish(ev)
        else:
            self._waiter = ev
        return ev


_U64 = (1 << 64) - 1
