"""Deferred READs: single-line READs land when someone could tell the difference.

A READ's effect is a copy of remote bytes into the poster's buffer at its modelled effect time
``E``. Nobody can observe that copy before the READ's batch completes (the buffer belongs to the
posting thread, and a coroutine reads its handles only after ``sync``), and the copy's result
depends only on writes to the node it reads. So a READ may land at any moment between ``E`` and
its completion ``C``, provided no write to its node lands in between: sampling late then returns
exactly what sampling at ``E`` would have.

That turns one Python event per READ (a heap push and pop, a call, a numba dispatch of eleven
arguments) into one compiled call per batch at its completion (:func:`sample_reads`), which is
most of what a READ-heavy closed loop spends. The rule that keeps results identical:

* each deferred READ keeps its place in the environment's total order, ``(E, seq)``, with the
  sequence number the event would have had (so every other entry keeps its own);
* every write that lands on a node's memory first calls :meth:`DeferredReads.before_write`,
  which lands the node's deferred READs whose place comes before the running entry's
  (``env.now``, ``env.seq_now``): WRITEs and atomics (``apply_one_sided``), lines of multi-line
  WRITEs (``shm/landing.py``, which also never lands lines early past a deferred READ), DMA writes,
  atomic write-backs and SENDs;
* a batch's completion lands what is left of it before it wakes anyone.

Only batches whose every work request is a single-line READ of host memory are deferred (a
batch mixing in a WRITE keeps per-request events). In a rack of processes the other processes'
writes land in real time, unannounced; there a process counts the earliest READ still deferred
in its frontier (``Environment.frontiers``), and at each visit to the clock table lands those due
before its next event that a READ event at their time could run by then (up to the READ
horizon) whenever it is blocked or idle (where the others may be waiting for them). Then no other process applies a write more than W after a deferred READ's effect time
before that READ lands, nor has a write more than W before it still to apply: the same tolerance
as a READ landing at its effect time (shm/sim/sync.py). ``defer_reads(fabric, False)`` turns deferral off, which tests use as the
reference path.

Raw verbs (``QP.post_send``, shm/verbs.py) defer the same batches, with what RC adds: each work
request completes on its own, so a completion lands the rows placed before it (its own among them)
and reads its row's state; and a failure flushes the QP's later work requests from its effect on,
so a READ must have passed its checks when its effect comes. A post is deferred only if its rows
pass the rkey and lkey checks at post, on a QP in the ready state with no failure noted and no
multi-line transfer in flight, and the batch's ``owner`` (the QP) hands its rows back to
per-request effect events, at their own places, before anything that would make a late landing
differ happens at the running entry: a work request of the QP fails or the QP enters the error
state (later requests are flushed), the QP posts a multi-line transfer (a READ's effect lands the
QP's multi-line WRITE lines due at its nanosecond first), an MR is deregistered (checks that
passed may fail). Rows placed before the running entry land then; the rest get the effect events
they would have had. The bytes of a raw READ reach local memory between its effect and its
completion, as on hardware (nothing orders them before the CQE).
"""

from __future__ import annotations

from heapq import heapify, heappop, heappush

import numpy as np
from numba import njit

from shm import nic
from shm.fabric import OFFSET_MASK, REGION_HOST, remote_read_write
from shm.kernels import entry

INF = (1 << 63) - 1

# Columns of a batch's work-request rows (the coroutine's model rows, copied at post: shm/coro.py;
# the layout is nic.WR_*): a row's flags column holds its landing state once it is deferred
C_OP, C_LEN, C_OFF, C_REGION, C_STATE, C_LOFF = (nic.WR_OP, nic.WR_LEN, nic.WR_OFF, nic.WR_REGION, nic.WR_FLAGS,
                                                 nic.WR_LOFF)
# A row's C_STATE after it landed (before, it holds the request's non-negative model flags), or
# after its owner handed it back to an effect event of its own (raw verbs: the module docstring)
LANDED, FAILED, HANDED_BACK = -1, -2, -3
C_EFFECT = nic.WR_OUT          # a row's effect time, once the model has priced it
# Batches of at least this many one-line READs are deferred (shm/coro.py and shm/verbs.py). Below it, a
# deferred batch's fixed cost (its record, the node's heap, one compiled call) exceeds the one
# event per READ it saves: in verbs per CPU second of the coroutine loop, deferral was 0.84x at
# depth 1, 0.88x at 2, 0.97x at 3 and 4, 1.15x at 8.
DEFER_MIN = 4


def one_line_host_reads_py(rows) -> bool:
    """Whether every row of a post (before it is deferred: C_STATE still holds its flags) is a
    READ of host memory within one 64-byte line: what a coroutine's post must be to be deferred
    (with at least :data:`DEFER_MIN` rows). The reference of :func:`one_line_host_reads`."""
    for i in range(rows.shape[0]):
        if (rows[i, C_OP] != nic.VERB_READ or rows[i, C_REGION] != REGION_HOST
                or (rows[i, C_OFF] & 63) + rows[i, C_LEN] > 64):
            return False
    return True


# Compiled: one pass over the rows the post packs anyway, in place of a test of each work request
# in the coroutine's Python loop (20 of its ~70 bytecodes a request: scripts/count_work.py).
one_line_host_reads = njit(cache=True)(one_line_host_reads_py)


def raw_one_line_reads_py(rows, here, there, span) -> bool:
    """The rows' part of whether a raw post (``QP.post_send``: rows of ``nic.RAW_WR_COLS``
    columns) may be deferred: every request a READ within one 64-byte line of the memory whose
    node and region bits are ``there`` (``dst << REGION_BITS | REGION_HOST``), landing in the memory
    ``here`` (the poster's host memory), under the first request's rkey and lkey. If so, ``span``
    gets the rkey, the lkey and the remote and local byte ranges ``[rlo, rhi)``, ``[llo, lhi)`` that
    the posting QP's MR checks cover. The reference of :func:`raw_one_line_reads`."""
    rkey = rows[0, nic.WR_RKEY]
    lkey = rows[0, nic.WR_LKEY]
    rlo = llo = OFFSET_MASK
    rhi = lhi = 0
    for i in range(rows.shape[0]):
        off = rows[i, C_OFF]
        length = rows[i, C_LEN]
        loff = rows[i, C_LOFF]
        if (rows[i, C_OP] != nic.VERB_READ or rows[i, nic.WR_RADDR] != there or (off & 63) + length > 64
                or rows[i, nic.WR_LADDR] != here or rows[i, nic.WR_RKEY] != rkey or rows[i, nic.WR_LKEY] != lkey):
            return False
        rlo = min(rlo, off)
        rhi = max(rhi, off + length)
        llo = min(llo, loff)
        lhi = max(lhi, loff + length)
    span[0] = rkey
    span[1] = lkey
    span[2] = rlo
    span[3] = rhi
    span[4] = llo
    span[5] = lhi
    return True


# Compiled: one pass over the rows a raw post packs anyway, in place of a test of each work request
# in post_send's Python loop (about 90 of its ~230 bytecodes a request: scripts/count_work.py raw)
raw_one_line_reads = njit(cache=True)(raw_one_line_reads_py)


@njit(cache=True)
def sample_reads(mrt, rkey, rbuf, rlocks, lbuf, rows, lo, hi):
    """Land rows ``lo .. hi-1`` of a READ batch that have not landed: check the rkey over each
    range, copy the line into ``lbuf`` at the row's buffer offset, mark the row LANDED or FAILED.
    Returns how many failed."""
    failed = 0
    for i in range(lo, hi):
        if rows[i, C_STATE] < 0:
            continue
        ok = remote_read_write(True, mrt, rkey, REGION_HOST, rows[i, C_OFF], rows[i, C_LEN], rbuf, rlocks, lbuf,
                               rows[i, C_LOFF], False)
        if ok:
            rows[i, C_STATE] = LANDED
        else:
            rows[i, C_STATE] = FAILED
            failed += 1
    return failed


def sample_entry(mem, lbuf, cols: int):
    """:func:`sample_reads` entered without numba's typing of its eight arguments (shm/kernels.py:
    the dispatcher's typing was about 5 % of the instructions of a loop of 8-READ posts), for a
    node memory's arrays (every node's are of one type), local buffers of ``lbuf``'s type and rows
    of ``cols`` columns: only for the emulator's own arrays (a thread's buffer, node memory)."""
    return entry(sample_reads, mem.mrt, 0, mem.host, mem.host_locks, lbuf, np.zeros((1, cols), np.int64), 0, 0)


class ReadBatch:
    """The single-line READs of one post, landing late (see the module docstring)."""

    __slots__ = ("mem", "rkey", "rows", "keys", "items", "lbuf", "node", "n", "left", "owner", "failed", "sample")

    def __init__(self, mem, rkey: int, rows, keys, items, lbuf, node: int, owner=None, sample=sample_reads):
        self.mem = mem              # the node's memory (shm.fabric.NodeMemory)
        self.rkey = rkey
        self.rows = rows            # a private copy: C_STATE tells which rows landed
        self.keys = keys            # (effect ns, seq) per row: its place in the total order (see places())
        self.items = items          # the coroutine's queued verbs (handles at index 8), or a raw post's ids as posted
        self.lbuf = lbuf            # where they land: the posting thread's buffer, or a raw post's node memory
        self.node = node
        self.n = self.left = len(rows)   # rows, and rows not landed yet
        self.owner = owner          # raw verbs: the QP that takes rows back (``owner._undefer()``)
        self.failed = 0             # rows that landed FAILED (their rkey check failed at landing)
        self.sample = sample        # sample_reads, or its entry point for these arrays (sample_entry)

    def places(self) -> list:
        """Each row's place in the total order, ``(effect ns, sequence number)``."""
        return self.keys

    def first(self):
        """The earliest place of a row not landed yet."""
        rows = self.rows
        return min(k for i, k in enumerate(self.places()) if rows[i, C_STATE] >= 0)

    def land(self, lo: int, hi: int) -> None:
        mem = self.mem
        self.failed += self.sample(mem.mrt, self.rkey, mem.host, mem.host_locks, self.lbuf, self.rows, lo, hi)

    def land_before(self, key) -> bool:
        """Land the rows whose place comes before ``key``; True if rows are left."""
        rows = self.rows
        keys = self.places()
        if max(keys) < key:                 # all of them: one call
            self.land(0, self.n)
            self.left = 0
            return False
        for i, k in enumerate(keys):
            if k < key and rows[i, C_STATE] >= 0:
                self.land(i, i + 1)
                self.left -= 1
        return self.left > 0


class NumberedReads(ReadBatch):
    """A batch whose rows took consecutive sequence numbers from ``seq0`` (a coroutine's post:
    ``env.take_seqs``): row ``i``'s place is ``(max(effect, floor), seq0 + i)``, its effect time in
    the rows' model outputs and ``floor`` the time of the post. Its places are made only when
    asked (a write to its node before its completion), not one tuple per READ at every post."""

    __slots__ = ("seq0", "floor")

    def places(self) -> list:
        floor = self.floor
        seq0 = self.seq0
        return [(effect if effect > floor else floor, seq0 + i)
                for i, effect in enumerate(self.rows[:, C_EFFECT].tolist())]


def _first_due(h: list) -> int:
    """The time of the earliest batch of a node's heap with rows still deferred (INF if none),
    dropping the batches that completed meanwhile from its top."""
    while h and not h[0][2].left:
        heappop(h)
    return h[0][0] if h else INF


class DeferredReads:
    """The deferred READ batches of one process, per node, ordered by their earliest row."""

    __slots__ = ("env", "heaps", "live", "batches", "early", "handed", "deferrable", "raw_deferrable")

    def __init__(self, env):
        self.env = env
        # one_line_host_reads for a post's rows (int64, C order), entered without numba's typing
        self.deferrable = entry(one_line_host_reads, np.zeros((1, nic.WR_COLS), np.int64))
        # raw_one_line_reads for a raw post's rows, the same way
        self.raw_deferrable = entry(raw_one_line_reads, np.zeros((1, nic.RAW_WR_COLS), np.int64), 0, 0,
                                    np.zeros(6, np.int64))
        self.batches = 0                    # batches deferred
        self.early = 0                      # of them, landed (in part) before a write, not at completion
        self.handed = 0                     # raw batches handed back (in part) to effect events
        self.heaps: dict[int, list] = {}    # node -> heap of (time, seq, batch)
        self.live: dict[int, int] = {}      # node -> batches with rows not landed

    def add(self, batch: ReadBatch, first=None) -> None:
        """Defer ``batch``; ``first``: its earliest place if the caller knows it (else the least
        of its keys)."""
        node = batch.node
        h = self.heaps.get(node)
        if h is None:
            h = self.heaps[node] = []
            self.live[node] = 0
        live = self.live[node] = self.live[node] + 1
        self.batches += 1
        if len(h) > 64 and len(h) > 2 * live:
            # batches that completed stay in the heap until popped: under READs alone nothing
            # pops them, so drop them once they are half of it
            h[:] = [e for e in h if e[2].left]
            heapify(h)
        t, s = min(batch.places()) if first is None else first
        heappush(h, (t, s, batch))

    def complete(self, batch: ReadBatch) -> None:
        """The batch completes now: land what is left of it (its heap entry goes stale)."""
        if batch.left:
            batch.land(0, batch.n)
            batch.left = 0
            self.live[batch.node] -= 1

    def land_batch_before(self, batch: ReadBatch, key) -> None:
        """Land the rows of ``batch`` placed before ``key`` (a raw READ completes, or its QP
        takes the batch back: the module docstring)."""
        if batch.left and not batch.land_before(key):
            self.live[batch.node] -= 1

    def hand_back(self, batch: ReadBatch, key) -> list:
        """The raw batch's rows placed before ``key`` land; the indices of the others, which stop
        being deferred (``HANDED_BACK``): their owner schedules their effects."""
        self.land_batch_before(batch, key)
        if not batch.left:
            return []
        rows = batch.rows
        back = [i for i in range(batch.n) if rows[i, C_STATE] >= 0]
        for i in back:
            rows[i, C_STATE] = HANDED_BACK
        self.handed += 1
        batch.left = 0
        self.live[batch.node] -= 1
        return back

    def owners(self) -> set:
        """The owners (raw verbs' QPs) of batches with rows still deferred."""
        return {e[2].owner for h in self.heaps.values() for e in h if e[2].left and e[2].owner is not None}

    def before_write(self, node: int) -> None:
        """A write lands on ``node`` in the running entry: land first the node's deferred READs
        that come before it in the total order."""
        if self.heaps.get(node):
            env = self.env
            self._land_node_before(node, (env.now, env.seq_now))

    def _land_node_before(self, node: int, key) -> None:
        h = self.heaps[node]
        while h and h[0][:2] < key:
            batch = heappop(h)[2]
            if not batch.left:
                continue                    # completed meanwhile
            self.early += 1
            if batch.land_before(key):
                t, s = batch.first()
                heappush(h, (t, s, batch))
            else:
                self.live[node] -= 1

    def land_past(self, t: int) -> bool:
        """Land every deferred READ due before time ``t`` (a rack of processes: see the module
        docstring); True if there was one."""
        landed = False
        for node, h in self.heaps.items():
            if _first_due(h) < t:
                self._land_node_before(node, (t, -1))
                landed = True
        return landed

    def earliest(self) -> int:
        """The earliest effect time of a READ still deferred (INF if none): ``next_time`` of every
        node (a rack of processes asks at every refresh of its clock)."""
        return min(map(_first_due, self.heaps.values()), default=INF)

    def next_time(self, node: int) -> int:
        """When the node's earliest deferred READ lands at the latest (INF if none): a write may
        land lines ahead of time only before it."""
        h = self.heaps.get(node)
        return INF if h is None else _first_due(h)


def deferred_reads_of(fabric, env) -> DeferredReads | None:
    """The process's :class:`DeferredReads` for ``fabric`` and ``env``, or None where READs land at
    their effect times (deferral turned off)."""
    if not getattr(fabric, "_defer_reads", True):
        return None
    dr = getattr(fabric, "_deferred_reads", None)
    if dr is None or (dr.env is not env and not any(dr.live.values())):
        dr = fabric._deferred_reads = DeferredReads(env)
        env.track_deferred_reads(dr)        # sync mode: its earliest READ counts in the frontier
    return dr if dr.env is env else None


def defer_reads(fabric, on: bool) -> None:
    """Turn deferral on or off for coroutines created from now on (tests compare both paths)."""
    fabric._defer_reads = on


def before_write(fabric, node: int) -> None:
    """Hook for every writer of node memory: see the module docstring."""
    dr = getattr(fabric, "_deferred_reads", None)
    if dr is not None and dr.heaps.get(node):     # (its own test first: one call less per write)
        dr.before_write(node)
