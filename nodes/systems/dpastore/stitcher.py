"""DPA-Store's stitchers: DPA threads that poll the host's stitch queues and install new nodes.

The host cannot write DPA memory; the only path is DPA threads copying host memory, measured at
~120 MB/s for 4 polling threads (the paper, §4.2.7). A stitcher (the paper: 4 of them, on a
core of their own) polls its ring in host memory by DMA (:mod:`shm.dmaring`) and executes what
it finds, in order (:mod:`.host` says what each stitch is and how queues are partitioned):

* ``COPY``: the node's bytes from the host mirror into DPA memory, a software copy the stitcher
  thread runs on its own core (the DMA engine cannot write DPA memory for the host): a compute
  burst of ``DpaMemory.host_copy_ns(n)``, the published 120 MB/s being what the 4 stitchers of
  the paper's plan reach on their one dedicated core (threads of a core run one at a time, so
  more stitchers on that core copy no faster: Fig. 9's flat INSERT beyond 4). Stitchers placed
  among the traversers (``stitcher_core = "shared"``) wait behind the traversers' doorbell
  bursts, which the hardware scheduler runs first (Fig. 9's -14 % INSERT).
* ``CONNECT``: one 8-byte store; the traversers' L1 copies of that line are invalidated by the
  cache model, so the next walk sees the new pointer.
* ``CLEAR``: the insert buffer's value slots back to EMPTY, then its counters to 0.
* ``RETIRE``: a snapshot of every traverser's "begun" counter; once each traverser's "finished"
  counter has passed its snapshot, no walk that could have seen the replaced blocks is still
  running, and the stitcher DMA-writes the token into host memory, where the patchers free the
  blocks (epoch-based reclamation).
* ``FENCE`` / ``RELEASE``: the queue fence around a root change.

The bulk load runs the same stitches at once (:func:`apply_now`); its time is the copy's at that rate.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

import numpy as np

from shm.fabric import gaddr, read_lines

from . import layout as L
from .host import OP_CLEAR, OP_CONNECT, OP_COPY, OP_FENCE, OP_RELEASE, OP_RETIRE, STITCH

POLL_NS = 1_000                 # an idle stitcher's pause between ring polls
MAX_BATCH = 16                  # stitches taken per poll
FENCE_WAIT_NS = 500


class StitcherStats(NamedTuple):
    polls: int
    stitches: int
    copies: int
    copied_bytes: int
    connects: int
    clears: int
    retires: int
    reclaimed: int              # retire tokens reported safe
    fences: int


def copy_bytes(dpa_mem: np.ndarray, host_mem, dpa_off: int, host_off: int, n: int) -> None:
    """The data of a COPY (host lines read under their seqlocks)."""
    read_lines(dpa_mem, dpa_off, host_mem.host, host_off, n, host_mem.host_locks)


def clear_buffer(words: np.ndarray, geo: L.LeafGeometry, leaf: int) -> None:
    for s in range(L.BUFFER_SLOTS):
        words[(leaf + geo.values + s * geo.slot) // 8] = L.EMPTY
    words[(leaf + geo.counters) // 8 + 1] = 0
    words[(leaf + geo.counters) // 8] = 0


class Stitcher:
    def __init__(self, ctx, th, index: int, ring, lay: dict, traversers: int, waker):
        self.ctx, self.th, self.index, self.ring = ctx, th, index, ring
        self.env = ctx.env
        self.mem = ctx.memory.host
        self.words = ctx.memory.host64
        self.host_mem = ctx.fabric.memory[lay["host"]]
        self.geo = L.LeafGeometry.of(lay["value_max"])
        self.traversers = traversers
        base = lay["dpa_region"]
        self.epoch0 = (base + L.EPOCH_BASE) // 8
        self.arrived = base // 8 + L.CTL_ARRIVED
        self.released = base // 8 + L.CTL_RELEASED
        self.stitchers = lay["stitchers"]
        self.reclaimed_addr = gaddr(lay["host"], lay["host_ctl"] + 8 * (L.HCTL_RECLAIMED + 8 * index))
        self.pending: list = []                 # (token, snapshot of begun counters)
        self.waker = waker
        self.n = dict(polls=0, stitches=0, copies=0, copied_bytes=0, connects=0, clears=0, retires=0,
                      reclaimed=0, fences=0)

    def statistics(self) -> StitcherStats:
        return StitcherStats(**self.n)

    def run(self):
        th = self.th
        while True:
            c = self.ring.device_poll(self.ctx.dma, MAX_BATCH)
            self.n["polls"] += 1
            yield c
            for rec in c.records:
                yield from self.apply(STITCH.unpack_from(rec))
            yield from self._reclaim()
            if c.records:
                continue
            if self.pending:                    # traversers still hold retired blocks: look again soon
                yield th.stall(POLL_NS)
                continue
            ev = self.waker.wait()
            if ev is None:
                return
            yield ev

    def apply(self, stitch):
        op, a, b, n = stitch
        th, words = self.th, self.words
        self.n["stitches"] += 1
        if op == OP_COPY:
            yield th.compute(th.dpa.memory.host_copy_ns(n))
            copy_bytes(self.mem, self.host_mem, a, b, n)
            self.n["copies"] += 1
            self.n["copied_bytes"] += n
        elif op == OP_CONNECT:
            yield th.load(a, 8, write=True)
            words[a // 8] = b
            self.n["connects"] += 1
        elif op == OP_CLEAR:
            yield th.load(a + self.geo.counters, self.geo.buffer_bytes, write=True, overlap=True)
            clear_buffer(words, self.geo, a)
            self.n["clears"] += 1
        elif op == OP_RETIRE:
            e = self.epoch0
            snap = [int(words[e + 8 * t]) for t in range(self.traversers)]
            self.pending.append((a, snap))
            self.n["retires"] += 1
        elif op == OP_FENCE:
            self.n["fences"] += 1
            words[self.arrived] += 1
            if self.index == 0:
                while int(words[self.arrived]) < self.stitchers * a:
                    yield th.stall(FENCE_WAIT_NS)
            else:
                while int(words[self.released]) < a:
                    yield th.stall(FENCE_WAIT_NS)
        elif op == OP_RELEASE:
            words[self.released] = a
        else:
            raise ValueError(f"stitch of unknown kind {op}")

    def _reclaim(self):
        """Report the newest retire token every traverser has moved past."""
        if not self.pending:
            return
        e = self.epoch0
        safe = None
        while self.pending:
            token, snap = self.pending[0]
            if any(int(self.words[e + 8 * t + 1]) < snap[t] for t in range(self.traversers)):
                break
            safe = token
            self.pending.pop(0)
        if safe is not None:
            self.n["reclaimed"] += 1
            yield self.ctx.dma.write(self.reclaimed_addr, struct.pack("<Q", safe))


def apply_now(dpa_mem: np.ndarray, dpa_words: np.ndarray, host_mem, geo: L.LeafGeometry, stitches) -> int:
    """Run COPY, CLEAR and CONNECT stitches at once (a bulk load before the rack runs); returns the bytes
    copied, which the stitchers' copy takes ``host_copy_ns`` of."""
    copied = 0
    for op, a, b, n in stitches:
        if op == OP_COPY:
            copy_bytes(dpa_mem, host_mem, a, b, n)
            copied += n
        elif op == OP_CONNECT:
            dpa_words[a // 8] = b
        elif op == OP_CLEAR:
            clear_buffer(dpa_words, geo, a)
        else:
            raise ValueError(f"a bulk load has only COPY, CLEAR and CONNECT stitches, got kind {op}")
    return copied

