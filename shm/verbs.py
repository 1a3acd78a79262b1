"""RDMA verbs in the pyverbs vocabulary, on emulated hardware and virtual time.

``Context``, ``PD``, ``MR``, ``CQ``, ``QP`` (RC and UD), ``SGE``, ``SendWR``/``RecvWR`` and work
completions with ``ibv_wc_status`` keep the names and meanings of pyverbs/libibverbs, so code and
intuition carry over. What differs is time: every call is made by a process of an
:class:`~shm.sim.env.Environment` at its virtual ``now``.

* ``post_send`` charges the caller's CPU (building WQEs, the doorbell spinlock), prices the whole
  list in one call of the NIC model (:func:`shm.nic.model_post`) and schedules, per work request,
  its *effect* on target memory at the modelled arrival time and its *completion* (a CQE) at the
  modelled completion time. Effects are checked against the target's MR table when they land: a
  wrong rkey, an address outside the region, missing rights or a misaligned atomic complete with an
  error status and touch nothing, and, as on real RC QPs, move the QP to the error state so later
  work requests are flushed.
* One-sided effects run in the poster's process (it maps every node's memory); two-sided SENDs
  are handed to the receiving node's process at their arrival time (``env.send``) when nodes are
  separate processes, or run in place when co-located.
* Posting past ``max_send_wr`` raises :class:`PyverbsRDMAError` with ``ENOMEM``, as
  ``ibv_post_send`` fails; nothing of that list is posted.

A :class:`VerbsHost` is the per-process glue: it knows the fabric, the environment, which process
runs which node, and the QPs living here.
"""

from __future__ import annotations

import errno
import operator
from dataclasses import dataclass, field
from heapq import heappush
from struct import error as StructError
from typing import NamedTuple

import numpy as np

from shm import nic
from shm.kernels import entry
from shm.fabric import (
    IBV_ACCESS_LOCAL_WRITE, IBV_ACCESS_REMOTE_ATOMIC, IBV_ACCESS_REMOTE_READ, IBV_ACCESS_REMOTE_WRITE,
    ATOMIC_CAS, ATOMIC_FAA, ATOMIC_MASKED_CAS, ATOMIC_MASKED_FAA, LAND_READ, LAND_WRITE, MAX_NODES, NODE_MASK, NODE_SHIFT, OFFSET_BITS,
    OFFSET_MASK, REGION_BITS, REGION_DEVICE, REGION_HOST, REGION_MASK, Fabric, host_kernels,
    remote_atomic, remote_read_write, copy_lines, format_gaddr, gaddr, gaddr_node, gaddr_offset,
    gaddr_region, mr_check, read_lines,
)
from shm.atomic_race import atomic_race_of
from shm.deferred import (
    C_STATE, DEFER_MIN, HANDED_BACK, LANDED, ReadBatch, before_write, deferred_reads_of, sample_entry,
)
from shm.nvm import NVM_ATOMIC, NVM_READ, NVM_WRITE, nvm_shadow_of
from shm.landing import ALL_LANDED, begin_landing, flush_due, pending_writes_of

__all__ = [
    "VerbsHost", "Context", "PD", "MR", "CQ", "QP", "QPCap", "QPInitAttr", "AH", "SGE", "SendWR",
    "RecvWR", "WC", "PyverbsError", "PyverbsRDMAError",
    "IBV_QPT_RC", "IBV_QPT_UD", "IBV_WR_RDMA_WRITE", "IBV_WR_SEND", "IBV_WR_RDMA_READ",
    "IBV_WR_ATOMIC_CMP_AND_SWP", "IBV_WR_ATOMIC_FETCH_AND_ADD", "IBV_WR_MASKED_ATOMIC_CMP_AND_SWP",
    "IBV_WR_MASKED_ATOMIC_FETCH_AND_ADD", "IBV_SEND_FENCE", "IBV_SEND_SIGNALED", "IBV_SEND_INLINE",
    "IBV_WC_SUCCESS", "IBV_WC_LOC_LEN_ERR", "IBV_WC_LOC_PROT_ERR", "IBV_WC_WR_FLUSH_ERR",
    "IBV_WC_REM_INV_REQ_ERR", "IBV_WC_REM_ACCESS_ERR",
    "IBV_ACCESS_LOCAL_WRITE", "IBV_ACCESS_REMOTE_WRITE", "IBV_ACCESS_REMOTE_READ",
    "IBV_ACCESS_REMOTE_ATOMIC", "wc_status_str",
]

IBV_QPT_RC = 2
IBV_QPT_UD = 4

# ibv_wr_opcode values; the masked atomics are mlx5's extended atomics.
IBV_WR_RDMA_WRITE = 0
IBV_WR_SEND = 2
IBV_WR_RDMA_READ = 4
IBV_WR_ATOMIC_CMP_AND_SWP = 5
IBV_WR_ATOMIC_FETCH_AND_ADD = 6
IBV_WR_MASKED_ATOMIC_CMP_AND_SWP = 14
IBV_WR_MASKED_ATOMIC_FETCH_AND_ADD = 15

IBV_SEND_FENCE = 1
IBV_SEND_SIGNALED = 2
IBV_SEND_INLINE = 8

IBV_WC_SUCCESS = 0
IBV_WC_LOC_LEN_ERR = 1
IBV_WC_LOC_PROT_ERR = 4
IBV_WC_WR_FLUSH_ERR = 5
IBV_WC_REM_INV_REQ_ERR = 9
IBV_WC_REM_ACCESS_ERR = 10
_STATUS_NAMES = {
    IBV_WC_SUCCESS: "IBV_WC_SUCCESS", IBV_WC_LOC_LEN_ERR: "IBV_WC_LOC_LEN_ERR",
    IBV_WC_LOC_PROT_ERR: "IBV_WC_LOC_PROT_ERR", IBV_WC_WR_FLUSH_ERR: "IBV_WC_WR_FLUSH_ERR",
    IBV_WC_REM_INV_REQ_ERR: "IBV_WC_REM_INV_REQ_ERR", IBV_WC_REM_ACCESS_ERR: "IBV_WC_REM_ACCESS_ERR",
}

IBV_WC_SEND = 0
IBV_WC_RDMA_WRITE = 1
IBV_WC_RDMA_READ = 2
IBV_WC_COMP_SWAP = 3
IBV_WC_FETCH_ADD = 4
IBV_WC_MASKED_COMP_SWAP = 9
IBV_WC_MASKED_FETCH_ADD = 10
IBV_WC_RECV = 128

# opcode -> (model opcode, wc opcode, remote access needed, local access needed)
_OPS = {
    IBV_WR_RDMA_READ: (nic.VERB_READ, IBV_WC_RDMA_READ, IBV_ACCESS_REMOTE_READ, IBV_ACCESS_LOCAL_WRITE),
    IBV_WR_RDMA_WRITE: (nic.VERB_WRITE, IBV_WC_RDMA_WRITE, IBV_ACCESS_REMOTE_WRITE, 0),
    IBV_WR_ATOMIC_CMP_AND_SWP: (nic.VERB_CAS, IBV_WC_COMP_SWAP, IBV_ACCESS_REMOTE_ATOMIC, IBV_ACCESS_LOCAL_WRITE),
    IBV_WR_ATOMIC_FETCH_AND_ADD: (nic.VERB_FAA, IBV_WC_FETCH_ADD, IBV_ACCESS_REMOTE_ATOMIC, IBV_ACCESS_LOCAL_WRITE),
    IBV_WR_MASKED_ATOMIC_CMP_AND_SWP: (nic.VERB_CAS, IBV_WC_MASKED_COMP_SWAP, IBV_ACCESS_REMOTE_ATOMIC,
                                       IBV_ACCESS_LOCAL_WRITE),
    IBV_WR_MASKED_ATOMIC_FETCH_AND_ADD: (nic.VERB_FAA, IBV_WC_MASKED_FETCH_ADD, IBV_ACCESS_REMOTE_ATOMIC,
                                         IBV_ACCESS_LOCAL_WRITE),
    IBV_WR_SEND: (nic.VERB_SEND, IBV_WC_SEND, 0, 0),
}
#: ibv_wr_opcode -> the NIC model's opcode (for callers that price verbs without SendWRs)
MODEL_OPCODE = {opcode: spec[0] for opcode, spec in _OPS.items()}
# a raw post's row (nic.WR_* columns: model opcode, length, offset, region, flags, then the model's
# three outputs, where a READ lands locally, and the raw post's own four), one pack call per work request
_PACK_RAW_WR = nic.pack_raw_wr
_RAW_WR_BYTES = nic.RAW_WR_BYTES
_PLACE_MASK = (MAX_NODES << REGION_BITS) - 1   # a global address's node and region bits, shifted down
_ATOMICS = (IBV_WR_ATOMIC_CMP_AND_SWP, IBV_WR_ATOMIC_FETCH_AND_ADD, IBV_WR_MASKED_ATOMIC_CMP_AND_SWP,
            IBV_WR_MASKED_ATOMIC_FETCH_AND_ADD)


def _fits_int64(value) -> bool:
    """Whether ``value`` is an integer a work request's row can hold (``post_send``'s error text)."""
    try:
        value = operator.index(value)
    except TypeError:
        return False
    return -(1 << 63) <= value < 1 << 63


from shm.sim.router import MSG_VERBS_SEND as _MSG_SEND  # noqa: E402 - a SEND arriving at a QP of this process

#: QP numbers from here on are chosen by services (``QP(..., qp_num=)``); the counter of a process
#: (``VerbsHost._new_qpn``: 1 + process << 20, ...) stays far below them
WELL_KNOWN_QPN = 1 << 40


def wc_status_str(status: int) -> str:
    return _STATUS_NAMES.get(status, f"status {status}")


class PyverbsError(Exception):
    """Misuse of the verbs API (wrong object, wrong state)."""


class PyverbsRDMAError(PyverbsError):
    """A verb failed the way libibverbs fails: ``errno`` says how."""

    def __init__(self, msg: str, error: int):
        super().__init__(f"{msg}. Errno: {error}, {errno.errorcode.get(error, '?')}")
        self.error_code = error


@dataclass
class SGE:
    addr: int      # a global address on the local node
    length: int
    lkey: int


@dataclass
class SendWR:
    wr_id: int = 0
    opcode: int = IBV_WR_SEND
    num_sge: int = 1
    sg: list = field(default_factory=list)
    send_flags: int = IBV_SEND_SIGNALED
    imm_data: int = 0
    remote_addr: int = 0
    rkey: int = 0
    compare_add: int = 0
    swap: int = 0
    compare_add_mask: int = 0
    swap_mask: int = 0
    ah: "AH | None" = None
    remote_qpn: int = 0
    remote_qkey: int = 0

    def set_wr_rdma(self, rkey: int, addr: int) -> None:
        self.rkey, self.remote_addr = rkey, addr

    def set_wr_atomic(self, rkey: int, addr: int, compare_add: int, swap: int = 0) -> None:
        self.rkey, self.remote_addr, self.compare_add, self.swap = rkey, addr, compare_add, swap

    def set_wr_masked_atomic(self, rkey, addr, compare_add, swap, compare_add_mask, swap_mask) -> None:
        """Masked CAS: compare under ``compare_add_mask``, swap the ``swap_mask`` bits. Masked FAA:
        ``compare_add`` is the addend and ``compare_add_mask`` marks field boundaries."""
        self.set_wr_atomic(rkey, addr, compare_add, swap)
        self.compare_add_mask, self.swap_mask = compare_add_mask, swap_mask

    def set_wr_ud(self, ah: "AH", remote_qpn: int, remote_qkey: int = 0) -> None:
        self.ah, self.remote_qpn, self.remote_qkey = ah, remote_qpn, remote_qkey


@dataclass
class RecvWR:
    wr_id: int = 0
    num_sge: int = 1
    sg: list = field(default_factory=list)


def _as_posted(wr):
    """The work request (a SendWR or RecvWR) as ``post_send`` / ``post_recv`` took it, for its
    effect, delivery and completion to read later: ibverbs copies a work request into its WQE at
    post, so a program may change or reuse the object (and its SGEs) as soon as the post returns.
    Its fields and its SGE copied, without the dataclass's ``__init__`` (about half a microsecond)."""
    c = _new_object(type(wr))
    d = wr.__dict__.copy()
    sg = d["sg"]
    if sg:                          # its one SGE (both posts refuse more, before they copy)
        sge = _new_object(SGE)
        sge.__dict__ = sg[0].__dict__.copy()
        d["sg"] = [sge]
    else:
        d["sg"] = []
    c.__dict__ = d
    return c


class WC(NamedTuple):
    """A work completion (``ibv_wc``); made on the hot path as ``_new_tuple(WC, (every field))``."""
    wr_id: int
    status: int
    opcode: int
    byte_len: int
    qp_num: int
    src_qp: int = 0
    imm_data: int = 0
    vendor_err: int = 0
    src_node: int = -1


_new_tuple = tuple.__new__
_new_object = object.__new__
assert WC._field_defaults == {"src_qp": 0, "imm_data": 0, "vendor_err": 0, "src_node": -1}


@dataclass
class QPCap:
    max_send_wr: int | None = None
    max_recv_wr: int | None = None
    max_send_sge: int = 1
    max_recv_sge: int = 1
    max_inline_data: int | None = None


@dataclass
class QPInitAttr:
    qp_type: int = IBV_QPT_RC
    scq: "CQ | None" = None
    rcq: "CQ | None" = None
    cap: QPCap = field(default_factory=QPCap)
    sq_sig_all: bool = False


class VerbsStats(NamedTuple):
    posted: int
    completed: int
    errors: int
    sends_delivered: int
    ud_dropped: int


def unretired_of(fabric) -> list:
    """Completions not yet retired from their node's count of outstanding work requests
    (``nic.S_OUTSTANDING``, which prices WQE-cache misses), per node, in this process (one per
    process, as a fabric object is). A completion adds its work requests here and the next post
    from the node retires them before the model reads the count, its only reader: the count the
    model sees is the same as with each completion retiring its own, one compiled call less each."""
    u = getattr(fabric, "_unretired", None)
    if u is None:
        u = fabric._unretired = [0] * len(fabric.descriptors)
    return u


class VerbsHost:
    """Per-process verbs runtime: fabric + environment + which process runs which node.

    ``proc_of_node`` maps node index -> process index (in the clock table); ``None`` means every
    node is in this process (co-located mode).
    """

    def __init__(self, fabric: Fabric, env, *, proc_of_node: dict | None = None, my_proc: int = 0):
        self.fabric = fabric
        self.env = env
        env.limit_lookahead(fabric.profile.link.one_way_ns)   # a verb's effect is a wire crossing away at least
        self.profile = fabric.profile
        self.proc_of_node = proc_of_node
        self.my_proc = my_proc
        self.qps: dict[tuple[int, int], QP] = {}
        self._next_qpn = 1 + (my_proc << 20)
        # the verbs this host posted, completed, completed in error (coroutine verbs of shm/coro.py
        # included: VerbBatch counts them here), SENDs delivered, UD datagrams dropped; :meth:`statistics`
        self.posted = self.completed = self.errors = self.sends_delivered = self.ud_dropped = 0
        # id(process) -> {(node, doorbell): its share there in nic.SHARER_UNITs}; a thread is among a
        # doorbell's sharers iff the doorbell is in its shares
        self._db_shares: dict[int, dict[tuple[int, int], int]] = {}
        if proc_of_node is not None:
            env.on_message = self.on_message

    def _reshare(self, shares: dict) -> None:
        """Spread one thread evenly over the doorbells in ``shares`` (its current ones), moving
        each doorbell's sharer count by the change of the thread's share there."""
        if not shares:
            return
        each = nic.SHARER_UNIT // len(shares)
        for (node, db), old in shares.items():
            if each != old:
                nic.doorbell_users(self.fabric.table, self.fabric.descriptors[node], db, each - old)
                shares[(node, db)] = each

    def leave_doorbells(self, key: int, doorbells) -> None:
        """Thread ``key`` stops sharing the ``(node, doorbell)`` pairs in ``doorbells``; its share
        moves to the doorbells it keeps (one reshare, so no count passes through a transient)."""
        shares = self._db_shares.get(key, {})
        for node, db in doorbells:
            old = shares.pop((node, db), 0)
            if old:
                nic.doorbell_users(self.fabric.table, self.fabric.descriptors[node], db, -old)
        self._reshare(shares)

    def statistics(self) -> VerbsStats:
        return VerbsStats(self.posted, self.completed, self.errors, self.sends_delivered, self.ud_dropped)

    def _new_qpn(self) -> int:
        qpn = self._next_qpn
        self._next_qpn += 1
        return qpn

    def is_local(self, node: int) -> bool:
        """Whether ``node`` runs in this process (always, co-located): a datagram or SEND to it is
        placed directly instead of crossing the message router."""
        return self.proc_of_node is None or self.proc_of_node[node] == self.my_proc

    def _deliver_send(self, at: int, dst_node: int, dst_qpn: int, src_node: int, src_qpn: int, src_addr: int,
                      length: int, imm: int) -> None:
        if self.is_local(dst_node):
            # placed now, before a WRITE of the same QP that lands at the same ns (RC order)
            self._arrive_send((dst_node, dst_qpn, src_node, src_qpn, src_addr, length, imm))
        else:
            self.env.send(self.proc_of_node[dst_node], at,
                          (_MSG_SEND, dst_node, dst_qpn, src_node, src_qpn, src_addr, length, imm))

    def on_message(self, src_proc, payload):
        """The router's handler of verbs messages from another process (a SEND to one of this
        process's QPs): registered by the wiring (cluster/wiring.py)."""
        if payload[0] == _MSG_SEND:
            self._arrive_send(tuple(int(x) for x in payload[1:8]))
        else:
            raise PyverbsError(f"unknown verbs message kind {payload[0]} from process {src_proc}")

    def _arrive_send(self, msg) -> None:
        dst_node, dst_qpn, src_node, src_qpn, src_addr, length, imm = msg
        qp = self.qps.get((dst_node, dst_qpn))
        if qp is None:
            self.ud_dropped += 1  # no such QP: dropped as a real fabric would
            return
        qp._receive(src_node, src_qpn, src_addr, length, imm)


class Context:
    """A device context on one node: owns a set of doorbell registers.

    ConnectX's default is 4 low-latency doorbells (one QP each) and 12 medium-latency doorbells
    shared round-robin by later QPs (SMART §2.2). ``doorbells`` overrides the medium count (SMART's
    thread-aware allocation gives each thread its own)."""

    def __init__(self, host: VerbsHost, node, *, low_latency: int | None = None, doorbells: int | None = None):
        self.host = host
        self.fabric = host.fabric
        self.env = host.env
        self.node = self.fabric.node_index(node)
        self.desc = self.fabric.descriptors[self.node]
        prof = self.fabric.profile.doorbell
        self.low_latency = prof.low_latency if low_latency is None else low_latency
        self.medium = prof.medium_latency if doorbells is None else doorbells
        if self.low_latency < 0 or self.medium < 1:
            raise PyverbsError(f"a context needs >= 1 medium-latency doorbell, got {self.medium}")
        self.db_first = int(nic.allocate_doorbells(self.fabric.table, self.desc, self.low_latency + self.medium))
        if self.db_first < 0:
            raise PyverbsRDMAError(f"node {self.fabric.nodes[self.node].name!r}: out of doorbell registers "
                                   f"(UAR pages)", errno.ENOMEM)
        self._qps_created = 0

    def _bind_doorbell(self) -> int:
        """Doorbell of the next QP: the low-latency ones first, then medium ones round-robin."""
        i = self._qps_created
        self._qps_created += 1
        if i < self.low_latency:
            return self.db_first + i
        return self.db_first + self.low_latency + (i - self.low_latency) % self.medium


class PD:
    def __init__(self, ctx: Context):
        self.ctx = ctx


class MR:
    """A registered region of the context's node memory (allocated here unless ``offset`` is
    given). ``addr`` is its global address; ``buf`` a numpy view of its bytes."""

    def __init__(self, pd: PD, length: int, access: int = IBV_ACCESS_LOCAL_WRITE, *, offset: int | None = None,
                 region: int = REGION_HOST):
        ctx = pd.ctx
        self.fabric = ctx.fabric
        self._env = ctx.env
        self.node = ctx.node
        self.region = region
        if offset is None:
            offset = self.fabric.allocate(self.node, length, region=region)
        self.offset = offset
        self.length = length
        self.key = self.fabric.register(self.node, offset, length, access, region=region)
        self.lkey = self.rkey = self.key
        self.addr = gaddr(self.node, offset, region)
        mem = self.fabric.memory[self.node]
        self.buf = (mem.host if region == REGION_HOST else mem.device)[offset:offset + length]

    def write(self, data, length: int | None = None, offset: int = 0) -> None:
        b = np.frombuffer(bytes(data), dtype=np.uint8)
        length = len(b) if length is None else length
        if offset < 0 or offset + length > self.length:
            raise PyverbsError(f"MR write of {length} bytes at {offset} exceeds the MR ({self.length} bytes)")
        self.buf[offset:offset + length] = b[:length]

    def read(self, length: int, offset: int = 0) -> bytes:
        if offset < 0 or offset + length > self.length:
            raise PyverbsError(f"MR read of {length} bytes at {offset} exceeds the MR ({self.length} bytes)")
        return self.buf[offset:offset + length].tobytes()

    def close(self) -> None:
        if self.key:
            # deferred READs whose checks passed at post take their effects back first (shm/deferred.py)
            dr = deferred_reads_of(self.fabric, self._env)
            if dr is not None:
                for qp in dr.owners():
                    qp._undefer()
            self.fabric.deregister(self.node, self.key)
            self.key = 0


class AH:
    """Address handle of a UD destination: just the node."""

    def __init__(self, pd: PD, node):
        self.node = pd.ctx.fabric.node_index(node)


_NEVER = 1 << 62       # a CQ's wake threshold with no one waiting: no length of its entries reaches it


class CQ:
    """A completion queue; ``poll`` takes what has completed by now, ``wait`` is an event that
    fires when something (or ``min_entries`` completions) is there, so a process needs not spin in
    virtual time."""

    def __init__(self, ctx: Context, cqe: int = 4096):
        if cqe < 1:
            raise PyverbsError(f"CQ size must be >= 1, got {cqe}")
        self.ctx = ctx
        self.env = ctx.env
        self.cqe = cqe
        self._entries: list[WC] = []
        self._head = 0
        self._waiters: list = []        # (event, min_entries) of each wait() not yet satisfied
        # what a push compares: the entries' length at which the CQ is full (head + cqe), and at
        # which the first waiter is satisfied (head + its min_entries; _NEVER with none): two
        # comparisons a completion instead of the counts and the waiter list worked out each time
        self._full_at = cqe
        self._wake_at = _NEVER
        self._poll_ns = ctx.fabric.profile.cpu.poll_ns

    def _push(self, wc: WC, last: bool = False) -> None:
        """Queue ``wc``, waking the waiters it satisfies. ``last``: the push is the last action of
        its heap callback (a send completion), so a single waiter's wake may run at once
        (``Environment.succeed_last``: the same order and event count, one heap entry less)."""
        entries = self._entries
        if len(entries) >= self._full_at:
            raise PyverbsRDMAError(f"CQ overrun: more than {self.cqe} unpolled completions", errno.ENOSPC)
        entries.append(wc)
        if len(entries) >= self._wake_at:
            self._wake(last)

    def _wake(self, last: bool) -> None:
        """Fire the waiters the entries satisfy now (in the order they waited)."""
        have = len(self._entries) - self._head
        if len(self._waiters) == 1:          # the common case: one process waits
            ev = self._waiters[0][0]
            self._waiters = []
            self._wake_at = _NEVER
            if last:
                self.env.succeed_last(ev)
            else:
                ev.succeed()
            return
        waiting = []
        for ev, need in self._waiters:
            if have >= need:
                ev.succeed()
            else:
                waiting.append((ev, need))
        self._waiters = waiting
        self._thresholds()

    def _thresholds(self) -> None:
        """Work out :attr:`_full_at` and :attr:`_wake_at` again (the head moved, or the waiters changed)."""
        head = self._head
        self._full_at = head + self.cqe
        self._wake_at = head + min(need for _, need in self._waiters) if self._waiters else _NEVER

    def poll(self, num_entries: int = 1) -> tuple[int, list[WC]]:
        proc = self.env.active_process
        if proc is not None:
            proc.debt_ns += self._poll_ns     # env.charge, inlined (the profile's poll_ns is >= 0)
        entries = self._entries
        if self._head == 0 and len(entries) <= num_entries:
            got = entries                     # all of them (the common case): no copy
            self._entries = []
        else:
            got = entries[self._head:self._head + num_entries]
            self._head += len(got)
            if self._head > 1024 and self._head * 2 > len(entries):
                del entries[:self._head]
                self._head = 0
        if self._head or self._full_at != self.cqe or self._waiters:
            self._thresholds()
        if got:
            # each send completion polled frees its QP's send-queue slots: counted per run of one QP's
            qps, node = self.ctx.host.qps, self.ctx.node
            qpn = run = 0
            for wc in got:
                if wc.opcode == IBV_WC_RECV:
                    continue
                if run and wc.qp_num == qpn:
                    run += 1
                    continue
                if run and (qp := qps.get((node, qpn))) is not None:
                    qp._retire_polled(run)
                qpn, run = wc.qp_num, 1
            if run and (qp := qps.get((node, qpn))) is not None:
                qp._retire_polled(run)
        return len(got), got

    def wait(self, min_entries: int = 1):
        """Event that fires once the CQ holds at least ``min_entries`` completions: a process that
        posted a batch can sleep until all of it is back instead of waking for each one."""
        if type(min_entries) is not int or min_entries < 1:
            raise PyverbsError(f"CQ.wait: min_entries must be an integer >= 1, got {min_entries!r}")
        ev = self.env.event()
        if len(self._entries) - self._head >= min_entries:
            ev.succeed()
        else:
            self._waiters.append((ev, min_entries))
            at = self._head + min_entries
            if at < self._wake_at:
                self._wake_at = at
        return ev

    def __len__(self) -> int:
        return len(self._entries) - self._head


class _Pending:
    """One posted work request on its way: what its effect found, and its CQE."""

    __slots__ = ("wr", "status", "signaled", "wc_opcode", "byte_len", "seq", "lines")

    def __init__(self, wr, signaled, wc_opcode, byte_len, seq=0):
        self.wr = wr
        self.seq = seq
        self.status = IBV_WC_SUCCESS
        self.signaled = signaled
        self.wc_opcode = wc_opcode
        self.byte_len = byte_len
        self.lines = False          # a multi-line transfer (QP._lines_in_flight)


class _RawReads(ReadBatch):
    """A raw post's deferred READs (``QP._defer``): ``items`` holds their work requests' ids as
    posted, each replaced by its ``_Pending`` if it is handed back to an effect event
    (``QP._undefer``); the rest of each request as posted is its row (:meth:`posted`)."""

    __slots__ = ("sizes", "seq0", "handed")

    def pending(self, row: int) -> _Pending:
        """Row ``row``'s ``_Pending``; whether it is signaled, its completion event says
        (``QP._complete_read`` sets it)."""
        return _Pending(self.posted(row), False, IBV_WC_RDMA_READ, self.sizes[row], self.seq0 + row)

    def posted(self, row: int) -> SendWR:
        """Row ``row``'s work request as posted (a program may have changed its SendWR since), from
        the row ``post_send`` packed: all a one-line READ's effect reads."""
        r = self.rows[row].tolist()
        return SendWR(wr_id=self.items[row], opcode=IBV_WR_RDMA_READ,
                      sg=[SGE(r[nic.WR_LADDR] << OFFSET_BITS | r[nic.WR_LOFF], self.sizes[row], r[nic.WR_LKEY])],
                      remote_addr=r[nic.WR_RADDR] << OFFSET_BITS | r[nic.WR_OFF], rkey=r[nic.WR_RKEY])


class QP:
    """A queue pair. RC: ``connect`` to one remote QP, then one-sided and SEND verbs. UD:
    ``SendWR.set_wr_ud`` addresses each SEND; receives carry the sender's node and QPN."""

    RESET, RTS, ERR = "RESET", "RTS", "ERR"

    def __init__(self, pd: PD, init_attr: QPInitAttr, *, qp_num: int | None = None):
        """``qp_num``: a well-known QP number (>= ``WELL_KNOWN_QPN``) instead of the next free one,
        so that a peer in another process can connect to ``(node, qp_num)`` without an exchange
        (as a service listens on a well-known port); taken twice on one node is an error."""
        ctx = pd.ctx
        self.pd = pd
        self.ctx = ctx
        self.host = ctx.host
        self.env = ctx.env
        self.fabric = ctx.fabric
        prof = self.fabric.profile
        if init_attr.qp_type not in (IBV_QPT_RC, IBV_QPT_UD):
            raise PyverbsError(f"unsupported QP type {init_attr.qp_type} (RC={IBV_QPT_RC}, UD={IBV_QPT_UD})")
        if init_attr.scq is None:
            raise PyverbsError("QPInitAttr.scq is required")
        self.qp_type = init_attr.qp_type
        self.scq = init_attr.scq
        # "is not None": an empty CQ is falsy (it has a __len__), and "or" sent every RECV completion to scq
        self.rcq = init_attr.rcq if init_attr.rcq is not None else init_attr.scq
        cap = init_attr.cap
        self.max_send_wr = cap.max_send_wr or prof.qp.max_send_wr
        self.max_recv_wr = cap.max_recv_wr or prof.qp.max_recv_wr
        self.max_inline = prof.qp.max_inline if cap.max_inline_data is None else cap.max_inline_data
        if self.max_send_wr > prof.qp.max_send_wr or self.max_recv_wr > prof.qp.max_recv_wr:
            raise PyverbsRDMAError(f"QP caps exceed the device limits (max_send_wr <= {prof.qp.max_send_wr}, "
                                   f"max_recv_wr <= {prof.qp.max_recv_wr})", errno.EINVAL)
        self.sq_sig_all = init_attr.sq_sig_all
        if qp_num is None:
            self.qp_num = self.host._new_qpn()
        else:
            if type(qp_num) is not int or not WELL_KNOWN_QPN <= qp_num < 1 << 62:
                raise PyverbsError(f"a well-known QP number must be an integer >= {WELL_KNOWN_QPN}, got {qp_num!r}")
            if (ctx.node, qp_num) in self.host.qps:
                raise PyverbsError(f"QP number {qp_num} is already taken on node {ctx.node}")
            self.qp_num = qp_num
        self.node = ctx.node
        self.doorbell = ctx._bind_doorbell()
        self.state = self.RTS if self.qp_type == IBV_QPT_UD else self.RESET
        self.remote: tuple[int, int] | None = None
        # the NIC model's state of this QP (shm/nic.py, Q_*): passed to every pricing of a post,
        # read by the tracer (shm/sim/trace.py), which prices the same post stage by stage
        self.model_state = nic.new_qp_state(prof.qp.max_rd_atomic)
        self.model_state[nic.Q_SALT] = (self.node << 32) | (self.qp_num & 0xFFFFFFFF)   # its chaos stream
        fabric = self.fabric
        # the model's compiled entry for this QP's argument types (shm/kernels.py): a post skips
        # numba's typing of its ten arguments; it retires the node's completions since its last
        # post first (unretired_of)
        self._price = entry(nic.retire_and_price, fabric.table, fabric.params, fabric.descriptors, self.node, 0,
                            self.model_state, self.doorbell, 0, np.zeros((1, nic.WR_COLS), np.int64), 0)
        # the same for retiring completions where a tracer prices the post, and for the landings
        # and checks of a work request: its local buffer is always this node's host or device
        # memory, the fabric's own arrays
        self._retire = entry(nic.retire, fabric.table, ctx.desc, 0)
        self._unretired = unretired_of(fabric)
        self._kernels = host_kernels(fabric, fabric.memory[self.node].host)
        # the deferred READs' landing into this node's memory, the same way (shm/deferred.py)
        self._sample = sample_entry(fabric.memory[self.node], fabric.memory[self.node].host, nic.RAW_WR_COLS)
        self._heap, self._next_seq = self.env.event_queue()
        self._sq_in_flight = 0     # posted, not yet completed and polled
        self._unpolled_unsignaled = 0
        self._recv_queue: list[RecvWR] = []
        self._early_sends: list = []  # SENDs that arrived before a RECV was posted (RNR retry)
        self._users: set = set()
        self._wr_seq = 0           # posting order of this QP's send WRs
        self._err_seq = None       # the first WR whose effect failed: later ones are flushed
        self._landings: list = []  # multi-line READs/WRITEs still landing (shm/landing.py)
        self._lines_in_flight = 0  # multi-line work requests posted and not completed
        self._dr = deferred_reads_of(self.fabric, self.env)   # None: every READ lands at its effect time
        self._deferred: list = []  # this QP's batches of deferred READs (_defer, _undefer)
        self._post_arrays: dict = {}  # post size -> the model's input and output arrays
        self._here = self.node << REGION_BITS | REGION_HOST   # this node's host memory, as a row's WR_LADDR holds it
        self._read_span = np.zeros(6, np.int64)   # raw_deferrable's keys and ranges (shm.deferred)
        self.cpu_free = 0
        self.host.qps[(self.node, self.qp_num)] = self

    # -- connection -----------------------------------------------------------------------------
    def connect(self, remote: "QP | tuple[int, int]") -> None:
        """RC: bind to a remote QP (``QP`` or ``(node, qp_num)``) and move to RTS."""
        if self.qp_type != IBV_QPT_RC:
            raise PyverbsError("connect() is for RC QPs; UD QPs address each SEND with an AH")
        if isinstance(remote, QP):
            remote = (remote.node, remote.qp_num)
        node, qpn = remote
        self.fabric.node_index(node)
        self.remote = (int(node), int(qpn))
        self.state = self.RTS
        self._err_seq = None

    def to_error(self) -> None:
        if self._deferred:
            self._undefer()          # from now on its work requests are flushed
        self.state = self.ERR

    # -- posting --------------------------------------------------------------------------------
    def post_send(self, wrs) -> None:
        env = self.env
        if isinstance(wrs, SendWR):
            wrs = [wrs]
        n = len(wrs)
        if n == 0:
            return
        if self.state == self.RESET:
            raise PyverbsRDMAError(f"post_send on QP {self.qp_num} before connect()", errno.EINVAL)
        if self._sq_in_flight + n > self.max_send_wr:
            raise PyverbsRDMAError(
                f"post_send on QP {self.qp_num}: send queue full ({self._sq_in_flight} in flight + {n} "
                f"> max_send_wr={self.max_send_wr})", errno.ENOMEM)
        if self.qp_type == IBV_QPT_RC:
            dst = self.remote[0]
        else:
            dsts = {wr.ah.node if wr.ah is not None else -1 for wr in wrs}
            if -1 in dsts:
                raise PyverbsRDMAError("UD post_send: every SendWR needs set_wr_ud(ah, qpn)", errno.EINVAL)
            if len(dsts) > 1:
                # one model call prices one destination; split the list
                for node in sorted(dsts):
                    self.post_send([wr for wr in wrs if wr.ah.node == node])
                return
            dst = dsts.pop()
        arrays = self._post_arrays.get(n)
        if arrays is None:          # kept per post size: the model reads them before post_send returns
            # the columns of nic.model_post_rows, then WR_LOFF, then the raw post's own (nic.WR_RADDR...)
            rows = np.zeros((n, nic.RAW_WR_COLS), np.int64)
            arrays = self._post_arrays[n] = (rows, rows[:, nic.WR_OUT:nic.WR_MODEL_COLS])
        rows, out = arrays
        ud = self.qp_type == IBV_QPT_UD
        # deferred (shm/deferred.py): at least DEFER_MIN single-line READs of host memory on dst under
        # one rkey, into this node's host memory under one lkey, on a ready QP with no failure noted
        # and no multi-line transfer in flight (the rows' part: one compiled pass after they are
        # packed, shm.deferred.raw_one_line_reads); the checks of their effects are made below, at post
        reads = (self._dr is not None and n >= DEFER_MIN and not ud and self.state == self.RTS
                 and self._err_seq is None and not self._lines_in_flight)
        pos = 0
        sizes = []
        for wr in wrs:              # one row per work request, packed in one call (its columns in order)
            op = wr.opcode
            spec = _OPS.get(op)
            if spec is None or (ud and op != IBV_WR_SEND):
                raise PyverbsRDMAError(f"post_send on QP {self.qp_num}: opcode {op} not supported on "
                                       f"{'UD' if ud else 'RC'}", errno.EINVAL)
            sg = wr.sg
            if wr.num_sge != len(sg) or len(sg) > 1:
                raise PyverbsRDMAError(f"post_send on QP {self.qp_num}: wr {wr.wr_id} has {len(sg)} SGEs "
                                       f"(num_sge={wr.num_sge}); the emulator supports one", errno.EINVAL)
            if sg:
                sge = sg[0]
                length = sge.length
                laddr = sge.addr
                lkey = sge.lkey
            else:
                length = laddr = lkey = 0
                reads = False
            send_flags = wr.send_flags
            flags = 0
            if send_flags & IBV_SEND_INLINE:
                if length > self.max_inline:
                    raise PyverbsRDMAError(f"post_send: inline payload of {length} B exceeds max_inline_data="
                                           f"{self.max_inline}", errno.EINVAL)
                flags = nic.FLAG_INLINE
            if send_flags & IBV_SEND_FENCE:
                flags |= nic.FLAG_FENCE   # waits for this QP's earlier READs and atomics
            addr = wr.remote_addr
            high = addr >> OFFSET_BITS   # the node and region bits (gaddr_node and gaddr_region, inlined)
            try:
                _PACK_RAW_WR(rows, pos, nic.VERB_SEND_UD if ud else spec[0], length, addr & OFFSET_MASK,
                             high & REGION_MASK, flags, 0, 0, 0, laddr & OFFSET_MASK, high & _PLACE_MASK,
                             laddr >> OFFSET_BITS & _PLACE_MASK, wr.rkey, lkey)
            except StructError:
                # a value the row cannot hold: ibverbs' keys are 32 bits and its lengths 32 bits, so
                # no such work request exists on hardware (pyverbs refuses it when it is set)
                bad = ", ".join(f"{name} {value!r}" for name, value in (("rkey", wr.rkey), ("lkey", lkey),
                                                                         ("length", length))
                                if not _fits_int64(value)) or "a field"
                raise PyverbsRDMAError(f"post_send on QP {self.qp_num}: wr {wr.wr_id} has {bad}, beyond what "
                                       f"a work request holds (a 32-bit key or length); nothing of this post "
                                       f"was posted", errno.EINVAL) from None
            pos += _RAW_WR_BYTES
            sizes.append(length)
        if reads:
            # the rows' part: every request a one-line READ of dst's host memory into this node's,
            # under the first one's rkey and lkey; then the checks every effect would make (an MR
            # deregistered meanwhile hands the rows back: MR.close): one range per MR covers every
            # row's, since an MR is one range. READs to persistent memory the durability model
            # tracks flush their QP's WRITEs at their effects (_effect): not deferred; None when no
            # node has it or placed writes are durable
            span = self._read_span
            reads = self._dr.raw_deferrable(rows, self._here, dst << REGION_BITS | REGION_HOST, span)
            if reads:
                rkey, lkey, rlo, rhi, llo, lhi = span.tolist()
                fabric = self.fabric
                check = self._kernels.check
                nvm = nvm_shadow_of(fabric)
                reads = (check(fabric.memory[dst].mrt, rkey, REGION_HOST, rlo, rhi - rlo, IBV_ACCESS_REMOTE_READ)
                         and check(fabric.memory[self.node].mrt, lkey, REGION_HOST, llo, lhi - llo,
                                   IBV_ACCESS_LOCAL_WRITE)
                         and (nvm is None or dst not in nvm.images))
        self.model_post(dst, rows)
        self._sq_in_flight += n
        self.host.posted += n
        times = out.tolist()
        if reads:
            self._defer(dst, wrs, sizes, rows, times, rkey)
            return
        pending = pending_writes_of(self.fabric)
        # each work request's effect and completion straight onto the event queue (what
        # env.schedule does: at a time no earlier than now, in this order)
        heap, seq = self._heap, self._next_seq
        now = env.now
        synced = env.synced          # a rack of processes: the others wait for our effects
        failed = self.state == self.ERR
        effect_cb, complete_cb = self._effect, self._complete
        sig_all = self.sq_sig_all
        for wr, length, (effect, done, other) in zip(wrs, sizes, times):
            op = wr.opcode
            p = _Pending(_as_posted(wr), bool(sig_all or wr.send_flags & IBV_SEND_SIGNALED), _OPS[op][1], length,
                         self._wr_seq)
            self._wr_seq += 1
            if failed:
                p.status = IBV_WC_WR_FLUSH_ERR
            else:
                if other == effect:
                    heappush(heap, (effect if effect > now else now, seq(), effect_cb, (p, dst)))
                    if synced:
                        env.effect_at(effect, op != IBV_WR_RDMA_READ)
                else:                  # several lines, landing one by one over a window
                    if self._deferred:
                        self._undefer()   # a READ's effect lands this QP's lines due at its ns first
                    p.lines = True
                    self._lines_in_flight += 1
                    lo, hi = (effect, other) if effect < other else (other, effect)
                    heappush(heap, (lo if lo > now else now, seq(), effect_cb, (p, dst, lo, hi)))
                    if synced:
                        env.effect_at(lo, op != IBV_WR_RDMA_READ)
                if op == IBV_WR_SEND:       # lands in a receive buffer: any byte, as far as we know
                    pending.add(dst, effect, other)
                elif op != IBV_WR_RDMA_READ:  # a READ landing meanwhile must see it
                    pending.add_verb(dst, effect, other, wr.remote_addr, length)
            heappush(heap, (done if done > now else now, seq(), complete_cb, p))   # in posting order (the model)

    def _defer(self, dst: int, wrs, sizes: list, rows, times: list, rkey: int) -> None:
        """A post of single-line READs whose checks passed: their rows land late (shm/deferred.py),
        each keeping the place (time, sequence number) its effect event would have had; each
        completion is an event as before (:meth:`_complete_read`). A row gets its ``_Pending``
        only if it is handed back to an effect event (:meth:`_undefer`) or fails."""
        heap, seq = self._heap, self._next_seq
        now = self.env.now
        complete_cb = self._complete_read
        sig_all = self.sq_sig_all
        keys = []
        fabric = self.fabric
        # the ids as posted (ibverbs copies a work request at post: its SendWR may change meanwhile)
        batch = _RawReads(fabric.memory[dst], rkey, rows.copy(), keys, [wr.wr_id for wr in wrs],
                          fabric.memory[self.node].host, dst, owner=self, sample=self._sample)
        batch.sizes = sizes
        batch.handed = False
        batch.seq0 = self._wr_seq
        self._wr_seq += len(sizes)
        row = 0
        for wr, (effect, done, _) in zip(wrs, times):
            keys.append((effect if effect > now else now, seq()))
            heappush(heap, (done if done > now else now, seq(), complete_cb,
                            (batch, row, sig_all or wr.send_flags & IBV_SEND_SIGNALED)))
            row += 1
        batch.left = row
        if self._deferred and not self._deferred[0].left:
            # landed before their completions (a write to their node came first)
            self._deferred = [b for b in self._deferred if b.left]
        self._deferred.append(batch)
        self._dr.add(batch)

    def _undefer(self) -> None:
        """Take this QP's deferred READs back (shm/deferred.py, raw verbs): those placed before the
        running entry land now, the others get the effect events they would have had, at their own
        places. Called before something at the running entry that late landings would see
        differently: a failure, the error state, a multi-line transfer, an MR deregistered."""
        batches, self._deferred = self._deferred, []
        env = self.env
        key = (env.now, env.seq_now)
        heap = self._heap
        effect_cb = self._effect
        synced = env.synced
        for batch in batches:
            for i in self._dr.hand_back(batch, key):
                # its _Pending now (signaled or not is its completion event's: _complete_read)
                p = batch.items[i] = batch.pending(i)
                batch.handed = True
                t, s = batch.keys[i]
                heappush(heap, (t, s, effect_cb, (p, batch.node)))
                if synced:
                    env.effect_at(t, False)

    def model_post(self, dst: int, rows, cpu_floor: int = 0, user=None) -> None:
        """Run the NIC model for one post (``rows``: the work requests as the columns of
        :func:`shm.nic.model_post_rows`; it writes their outputs: effect ns, completion ns, the other
        end of a multi-line landing window) and charge the calling process's CPU up to the moment the
        doorbell is rung. ``cpu_floor`` is when the posting thread's core is free (coroutines of one
        thread share a core). ``user`` is the modelled thread that posts (default: the calling
        process); it counts once among the doorbell's sharers however many coroutines it runs."""
        env = self.env
        proc = env.active_process
        if user is None:
            user = proc
        if id(user) not in self._users:
            self._note_user(user)
        now = env.now
        debt = proc.debt_ns if proc is not None else 0
        start = now + debt
        if start < cpu_floor:
            start = cpu_floor
        fabric = self.fabric
        done = self._unretired[self.node]
        if done:                        # the node's completions since its last post (unretired_of)
            self._unretired[self.node] = 0
        cpu = fabric.profile.cpu
        tracer = env.tracer
        if tracer is None:              # retired, then priced, in one call
            cpu_free = self.cpu_free = self._price(
                fabric.table, fabric.params, fabric.descriptors, self.node, dst, self.model_state, self.doorbell,
                start + cpu.post_ns + cpu.wqe_ns * len(rows), rows, done)
        else:                           # the same prices, with the stages recorded (shm/sim/trace.py)
            if done:
                self._retire(fabric.table, self.ctx.desc, done)
            cpu_free = self.cpu_free = tracer.post(self, dst, rows, start,
                                                   start + cpu.post_ns + cpu.wqe_ns * rows.shape[0], user, proc)
        if proc is not None:
            # env.charge, inlined: never negative, the model frees the CPU no earlier than ``start``
            proc.debt_ns += cpu_free - now - debt

    def _note_user(self, proc) -> None:
        key = id(proc)
        if key not in self._users:
            self._users.add(key)
            if len(self._users) > 1:
                self.model_state[nic.Q_SHARED] = 1     # threads now take turns on the QP lock
            shares = self.host._db_shares.setdefault(key, {})
            if (self.node, self.doorbell) not in shares:
                shares[(self.node, self.doorbell)] = 0
                self.host._reshare(shares)

    def drop_user(self, key: int) -> bool:
        """Thread ``key`` stops posting through this QP (it went idle); True if it was a user."""
        if key not in self._users:
            return False
        self._users.discard(key)
        if len(self._users) < 2:
            self.model_state[nic.Q_SHARED] = 0         # no one left to take turns with
        return True

    def post_recv(self, wrs) -> None:
        if isinstance(wrs, RecvWR):
            wrs = [wrs]
        if len(self._recv_queue) + len(wrs) > self.max_recv_wr:
            raise PyverbsRDMAError(f"post_recv on QP {self.qp_num}: receive queue full "
                                   f"(max_recv_wr={self.max_recv_wr})", errno.ENOMEM)
        for wr in wrs:
            if wr.num_sge != len(wr.sg) or len(wr.sg) != 1:
                raise PyverbsRDMAError("post_recv: exactly one SGE per RecvWR is supported", errno.EINVAL)
        self._recv_queue.extend([_as_posted(wr) for wr in wrs])
        while self._early_sends and self._recv_queue:
            self._receive(*self._early_sends.pop(0))

    # -- effects and completions ------------------------------------------------------------------
    def _local_view(self, sge: SGE, access: int):
        """(bytes view, uint64 view, offset) of a local SGE, or None if its lkey does not cover it."""
        addr = sge.addr                 # gaddr_node, _region and _offset, inlined
        if addr >> NODE_SHIFT & NODE_MASK != self.node:
            return None
        region = addr >> OFFSET_BITS & REGION_MASK
        off = addr & OFFSET_MASK
        mem = self.fabric.memory[self.node]
        if not self._kernels.check(mem.mrt, sge.lkey, region, off, sge.length, access):
            return None
        if region == REGION_HOST:
            return mem.host, mem.host_locks, off
        return mem.device, mem.device_locks, off

    def _effect(self, arg) -> None:
        p, dst = arg[0], arg[1]
        if self.state == self.ERR or (self._err_seq is not None and p.seq > self._err_seq):
            # RC: once a WR fails, the WRs posted after it are not executed, even those already
            # on their way (the responder drops them after its NAK); they complete flushed
            p.status = IBV_WC_WR_FLUSH_ERR
            return
        if self._landings:
            # RC order: this WR's effect is no earlier than the end of the QP's earlier WRITEs'
            # landing windows (nic._in_effect_order), but at the same nanosecond their last lines
            # are events that may sort after this one: land them first, so a READ, atomic or WRITE
            # posted after a multi-line WRITE sees all of it
            self._landings = flush_due(self._landings, self.env.now)
        wr = p.wr
        op = wr.opcode
        sge = wr.sg[0] if wr.sg else None
        length = sge.length if sge else 0
        local = None
        if sge is not None:
            local = self._local_view(sge, _OPS[op][3])
            if local is None:
                p.status = IBV_WC_LOC_PROT_ERR
                self._note_error(p)
                return
        if op == IBV_WR_SEND:
            if self.qp_type == IBV_QPT_RC:
                dst_node, dst_qpn = self.remote
            else:
                dst_node, dst_qpn = wr.ah.node, wr.remote_qpn
            self.host._deliver_send(self.env.now, dst_node, dst_qpn, self.node, self.qp_num,
                                    sge.addr if sge else 0, length, wr.imm_data)
            return
        nvm = nvm_shadow_of(self.fabric) if self.fabric.nvm else None
        if nvm is not None and (dst not in nvm.images or op not in NVM_KIND
                                or wr.remote_addr >> OFFSET_BITS & REGION_MASK != REGION_HOST):
            nvm = None                   # DRAM, NIC device memory, or not a one-sided verb
        if nvm is not None:              # persistent memory: what a power failure keeps (shm/nvm.py)
            off = wr.remote_addr & OFFSET_MASK
            old = nvm.before(NVM_KIND[op], dst, off, length)
        if len(arg) == 4:
            self._start_landing(p, dst, wr, local, length, arg[2], arg[3])
        else:
            # the local buffer is this node's host memory (the kernels' buffer type) or its device memory
            p.status = apply_one_sided(self.fabric, dst, op, wr.remote_addr, wr.rkey, local[0], local[2], length,
                                       wr.compare_add, wr.swap, wr.compare_add_mask, wr.swap_mask, self.env,
                                       self._kernels if local[0] is self.fabric.memory[self.node].host else None)
            if p.status != IBV_WC_SUCCESS:
                self._note_error(p)
        if nvm is not None and p.status == IBV_WC_SUCCESS:
            nvm.after(self, NVM_KIND[op], dst, off, length, old,
                      local[0][local[2]:local[2] + length] if len(arg) == 4 else None)

    def _start_landing(self, p, dst: int, wr, local, length: int, lo: int, hi: int) -> None:
        """A multi-line READ or WRITE of host memory starts landing: the checks of
        apply_one_sided for the whole range, then one line at a time (shm/landing.py)."""
        addr = wr.remote_addr
        landing = None
        if addr >> NODE_SHIFT & NODE_MASK == dst and addr >> OFFSET_BITS & REGION_MASK == REGION_HOST:
            landing = begin_landing(self.env, self.fabric, dst, wr.opcode == IBV_WR_RDMA_READ, addr & OFFSET_MASK,
                                    length, wr.rkey, local[0], local[2], lo, hi)
        if landing is None:
            p.status = IBV_WC_REM_ACCESS_ERR
            self._note_error(p)
            return
        p.status = IBV_WC_SUCCESS
        if landing is not ALL_LANDED:
            self._landings.append(landing)

    def _note_error(self, p: _Pending) -> None:
        if self._err_seq is None or p.seq < self._err_seq:
            self._err_seq = p.seq
        if self._deferred:
            self._undefer()          # later work requests are flushed from this effect on

    def _complete(self, p: _Pending) -> None:
        if self._landings:
            self._landings = flush_due(self._landings, self.env.now)
        if p.lines:
            self._lines_in_flight -= 1
        self._unretired[self.node] += 1   # retired by the node's next post (unretired_of)
        self.host.completed += 1
        if p.status != IBV_WC_SUCCESS:
            self.host.errors += 1
            if p.status != IBV_WC_WR_FLUSH_ERR:
                self.state = self.ERR
        if p.signaled or p.status != IBV_WC_SUCCESS:
            # WC(...) without the named tuple's argument handling: every field, in order
            self.scq._push(_new_tuple(WC, (p.wr.wr_id, p.status, p.wc_opcode, int(p.byte_len), self.qp_num, 0, 0, 0, -1)),
                           True)
        else:
            self._unpolled_unsignaled += 1

    def _complete_read(self, arg) -> None:
        """A deferred READ completes (``arg``: its batch, row, and whether it is signaled): the
        rows of its batch placed before now land (its own among them: its effect came first),
        then it completes as :meth:`_complete` would with its row's status. The common case (it
        landed) needs no ``_Pending``; a row that failed or was handed back to an effect event
        goes through :meth:`_complete`."""
        batch, row, signaled = arg
        if self._landings:
            self._landings = flush_due(self._landings, self.env.now)
        if batch.left:
            env = self.env
            self._dr.land_batch_before(batch, (env.now, env.seq_now))
            if not batch.left:
                self._deferred.remove(batch)
        if batch.handed or batch.failed:
            state = batch.rows[row, C_STATE]
            if state != LANDED:
                if state == HANDED_BACK:     # its effect event set its status (_undefer)
                    p = batch.items[row]
                else:
                    # only an MR changed by another process can fail a READ whose checks passed at post
                    p = batch.pending(row)
                    p.status = IBV_WC_REM_ACCESS_ERR
                    self._note_error(p)
                p.signaled = signaled
                self._complete(p)
                return
        # _complete's success path (a deferred row is never multi-line)
        self._unretired[self.node] += 1
        self.host.completed += 1
        if signaled:
            self.scq._push(_new_tuple(WC, (batch.items[row], IBV_WC_SUCCESS, IBV_WC_RDMA_READ,
                                           int(batch.sizes[row]), self.qp_num, 0, 0, 0, -1)), True)
        else:
            self._unpolled_unsignaled += 1

    def _retire_polled(self, polled: int = 1) -> None:
        """``polled`` completions of this QP were polled: they free their send-queue slots, and
        so do the unsignaled work requests completed before them."""
        freed = polled + self._unpolled_unsignaled
        self._unpolled_unsignaled = 0
        self._sq_in_flight = max(0, self._sq_in_flight - freed)

    def _receive(self, src_node, src_qpn, src_addr, length, imm) -> None:
        """A SEND landed at this QP: consume a RECV, copy the payload from the sender's memory."""
        if not self._recv_queue:
            if self.qp_type == IBV_QPT_UD:
                self.host.ud_dropped += 1   # UD: no receive buffer means the datagram is lost
            else:
                self._early_sends.append((src_node, src_qpn, src_addr, length, imm))  # RNR retry
            return
        rwr = self._recv_queue.pop(0)
        sge = rwr.sg[0]
        status = IBV_WC_SUCCESS
        if length > sge.length:
            status = IBV_WC_LOC_LEN_ERR
        else:
            local = self._local_view(sge, IBV_ACCESS_LOCAL_WRITE)
            if local is None:
                status = IBV_WC_LOC_PROT_ERR
            elif length:
                src_mem = self.fabric.memory[gaddr_node(src_addr)]
                src_buf = src_mem.host if gaddr_region(src_addr) == REGION_HOST else src_mem.device
                so = gaddr_offset(src_addr)
                before_write(self.fabric, self.node)
                copy_lines(local[0], local[2], src_buf, so, length, local[1], False)
        self.host.sends_delivered += 1
        self.rcq._push(WC(rwr.wr_id, status, IBV_WC_RECV, length, self.qp_num, src_qpn, imm, 0, src_node))


_U64 = (1 << 64) - 1
#: What each one-sided opcode is to persistent memory's durability model (shm/nvm.py).
NVM_KIND = {IBV_WR_RDMA_READ: NVM_READ, IBV_WR_RDMA_WRITE: NVM_WRITE, IBV_WR_ATOMIC_CMP_AND_SWP: NVM_ATOMIC,
            IBV_WR_ATOMIC_FETCH_AND_ADD: NVM_ATOMIC, IBV_WR_MASKED_ATOMIC_CMP_AND_SWP: NVM_ATOMIC,
            IBV_WR_MASKED_ATOMIC_FETCH_AND_ADD: NVM_ATOMIC}

_ATOMIC_KIND = {IBV_WR_ATOMIC_CMP_AND_SWP: ATOMIC_CAS, IBV_WR_ATOMIC_FETCH_AND_ADD: ATOMIC_FAA,
                IBV_WR_MASKED_ATOMIC_CMP_AND_SWP: ATOMIC_MASKED_CAS, IBV_WR_MASKED_ATOMIC_FETCH_AND_ADD: ATOMIC_MASKED_FAA}
# a one-sided verb's kind for shm.fabric.land_verb_now
LAND_KIND = {IBV_WR_RDMA_READ: LAND_READ, IBV_WR_RDMA_WRITE: LAND_WRITE, **_ATOMIC_KIND}


I64_BIAS = 1 << 63


def to_i64(v: int) -> int:
    """The int64 with the same 64 bits as ``v`` (which may be negative or up to 2**64-1)."""
    v &= _U64
    return v - (1 << 64) if v >> 63 else v


def apply_one_sided(fabric: Fabric, dst: int, op: int, remote_addr: int, rkey: int, lbuf, loff: int, length: int,
                    compare_add: int = 0, swap: int = 0, compare_add_mask: int = 0, swap_mask: int = 0,
                    env=None, kernels=None) -> int:
    """The effect of a one-sided verb on node ``dst``'s memory, landing now; returns a WC status.

    Checks first (the right node, a valid rkey covering the range with the right access, an
    8-byte aligned 8-byte atomic) and touches nothing when a check fails. ``env`` (the caller's
    environment) schedules an atomic's write-back when the profile sets
    ``nic.atomic_write_race`` (shm/atomic_race.py). ``kernels``: :class:`shm.fabric.HostKernels`
    for ``lbuf``'s type, used on host memory (a coroutine's verbs; the same machine code)."""
    # gaddr_region/_node/_offset, inlined: this runs once per work request
    region = remote_addr >> OFFSET_BITS & REGION_MASK
    if remote_addr >> NODE_SHIFT & NODE_MASK != dst or (region != REGION_HOST and region != REGION_DEVICE):
        return IBV_WC_REM_ACCESS_ERR
    off = remote_addr & OFFSET_MASK
    mem = fabric.memory[dst]
    if op != IBV_WR_RDMA_READ:
        before_write(fabric, dst)        # READs deferred past now land first (shm/deferred.py)
    if op == IBV_WR_RDMA_READ or op == IBV_WR_RDMA_WRITE:
        target, locks = (mem.host, mem.host_locks) if region == REGION_HOST else (mem.device, mem.device_locks)
        # the descending flag only orders the lines of a WRITE
        is_read = op == IBV_WR_RDMA_READ
        descending = not is_read and not fabric.profile.nic.ordered_multiline_writes
        rw = remote_read_write if kernels is None or region != REGION_HOST else kernels.read_write
        ok = rw(is_read, mem.mrt, rkey, region, off, length, target, locks, lbuf, loff, descending)
        return IBV_WC_SUCCESS if ok else IBV_WC_REM_ACCESS_ERR
    if op in _ATOMICS and (off % 8 or length != 8):
        return IBV_WC_REM_INV_REQ_ERR
    host = region == REGION_HOST
    check, atomic = (mr_check, remote_atomic) if kernels is None or not host else (kernels.check, kernels.atomic)
    if not check(mem.mrt, rkey, region, off, length, _OPS[op][2]):
        return IBV_WC_REM_ACCESS_ERR
    # operands as int64 bit patterns (to_i64, inlined)
    old = atomic(mem.host64 if host else mem.device64, off // 8, _ATOMIC_KIND[op],
                 ((compare_add + I64_BIAS) & _U64) - I64_BIAS, ((swap + I64_BIAS) & _U64) - I64_BIAS,
                 ((compare_add_mask + I64_BIAS) & _U64) - I64_BIAS,
                 ((swap_mask + I64_BIAS) & _U64) - I64_BIAS, lbuf, loff,
                 mem.host_locks if host else mem.device_locks)
    # whether the atomic changed its word: a CAS whose compare failed did not (it lost a race)
    if op == IBV_WR_ATOMIC_CMP_AND_SWP:
        wrote = int(old) == compare_add & _U64
    elif op == IBV_WR_MASKED_ATOMIC_CMP_AND_SWP:
        wrote = (int(old) ^ compare_add) & compare_add_mask & _U64 == 0
    else:
        wrote = True
    if not wrote:
        fabric.windows["cas_raced"] += 1     # docs/checking.md, "Chaos": how hard a check tried
    if env is not None and fabric.profile.nic.atomic_write_race:
        atomic_race_of(fabric).after_atomic(env, dst, region, off, wrote)
    return IBV_WC_SUCCESS
