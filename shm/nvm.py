"""Persistent memory on memory nodes: which WRITEs a power failure keeps.

A memory node whose rack says ``[memory] kind = "nvm"`` has persistent memory (Intel Optane DC
PMem, the profile's ``[nvm]`` table). Its timing is the NIC model's (``shm/nic.py``: the media's
load latency, XPLine bandwidth); this module is its *durability*. What one-sided verbs leave in
the node's memory is what every later READ sees (the *visible* image, the node's segment, as for
DRAM), but not all of it would survive a power failure: the RDMA contract a remote writer programs
against (Intel's remote-persistent-memory white paper, pmem.io librpma, FORD's ``RFLUSH``) is that
a WRITE is persistent only once a later READ of the *same QP* has executed at the responder,
because a PCIe non-posted read does not pass the posted writes ahead of it, so by the time the
READ reads memory they are in the memory controller's ADR domain. Until then the write may sit in
volatile NIC or PCIe buffers (or, with DDIO on, the LLC). An atomic is a read too (it flushes the
QP's earlier writes), and its write-back is a posted write like a WRITE's.

The model keeps, per NVM node and in shared memory (so that whichever process kills the node can
act on it), a *persisted image* of every line that holds data not yet durable, and a count per
line of such writes:

* before a WRITE (or an atomic) lands, each line it touches that has no non-durable write yet is
  copied into the persisted image: that copy is what the line holds durably;
* after it landed, the poster's process records the write (its QP, its bytes) as non-durable and
  counts it on its lines;
* when a READ or atomic of that QP executes (its effect), every write recorded for the QP is
  durable: its bytes go into the persisted image and its lines' counts go down (a line whose
  count reaches 0 is the same in both images again);
* a power failure (:func:`power_fail`, what a ``kill`` of the memory node's process does) copies
  the persisted image back over every line whose count is not 0: exactly the writes that were
  never flushed are lost, what was durable stays. A write recorded before a power failure and
  flushed after it changes nothing (the node's power epoch moved on).

Writes to NVM are also durable at once when the profile says ``nvm.persist_on_placement`` (eADR,
or ADR with DDIO off as Intel platforms place a write): then nothing is tracked and a power
failure loses nothing. Writes a memory node's own CPU makes (a bulk load, a server actor) are not
verbs and are taken as durable (a CPU persists with a cache-line flush and a fence); landing on a
line that holds a non-durable remote write, they would be lost with it.

Exact in one process (a co-located rack, tests). In a rack of processes each compute node records
its own writes; two processes' writes racing on one line within microseconds of real time may
copy the other's not-yet-counted bytes into the persisted image, and two QPs' unflushed WRITEs to
the same bytes that are flushed in the reverse of their placement order leave the older bytes in
the persisted image (hardware keeps the newer). Neither arises in a design that writes a record
only under its lock and flushes before unlocking (FORD).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from shm.atomics import faa, load_acquire, store_release

LINE = 64
HEADER_WORDS = 8
# header words: the power epoch (power failures so far), writes recorded, writes made durable by a
# flush, lines a power failure reverted
H_EPOCH, H_WRITES, H_FLUSHED, H_LOST_LINES = range(4)

# what a verb is to the durability model (the callers map their opcodes onto these)
NVM_READ, NVM_WRITE, NVM_ATOMIC = range(3)


class NvmImage(NamedTuple):
    """The shared arrays of one NVM node: the header, the count of non-durable writes per line,
    and the persisted image (meaningful only on lines whose count is not 0)."""

    header: np.ndarray   # int64[HEADER_WORDS]
    pending: np.ndarray  # int64 per 64-byte line
    image: np.ndarray    # uint8 per byte of the node's host memory

    @staticmethod
    def segment_bytes(memory_bytes: int) -> int:
        """The size of an NVM node's shadow segment (mapped lazily: only lines written cost pages)."""
        return HEADER_WORDS * 8 + _lines(memory_bytes) * 8 + memory_bytes

    @classmethod
    def of_segment(cls, seg, memory_bytes: int) -> "NvmImage":
        n = _lines(memory_bytes)
        return cls(seg.array(np.int64, 0, HEADER_WORDS), seg.array(np.int64, HEADER_WORDS * 8, n),
                   seg.array(np.uint8, HEADER_WORDS * 8 + n * 8, memory_bytes))


def _lines(memory_bytes: int) -> int:
    return (memory_bytes + LINE - 1) // LINE


class NvmStats(NamedTuple):
    """One NVM node's durability so far (:func:`statistics`)."""

    power_failures: int   # power failures (kills) of the node
    writes: int           # WRITEs and atomic write-backs recorded as non-durable when they landed
    flushed: int          # of them, made durable by a later READ or atomic of their QP
    dirty_lines: int      # lines now holding data that a power failure would lose
    lost_lines: int       # lines power failures reverted to their persisted contents


class NvmShadow:
    """One process's side of the durability model for a fabric: the non-durable writes it posted,
    per QP (see the module docstring). Get it with :func:`nvm_shadow_of`."""

    __slots__ = ("fabric", "images", "per_qp")

    def __init__(self, fabric):
        self.fabric = fabric
        self.images: dict = fabric.nvm        # node index -> NvmImage
        self.per_qp: dict = {}                # QP -> [(node, epoch, offset, bytes)]

    def before(self, kind: int, node: int, off: int, length: int):
        """A WRITE or atomic is about to land on ``node``: copy each line it touches that holds no
        non-durable write into the persisted image. Returns an atomic's word before it (to tell
        whether it wrote), else None."""
        if kind == NVM_READ or length <= 0:
            return None
        img = self.images[node]
        mem = self.fabric.memory[node].host
        for line in range(off // LINE, (off + length - 1) // LINE + 1):
            if img.pending[line] == 0:
                a = line * LINE
                img.image[a:a + LINE] = mem[a:a + LINE]
        if kind == NVM_ATOMIC:
            return bytes(mem[off:off + 8])
        return None

    def after(self, qp, kind: int, node: int, off: int, length: int, old=None, payload=None) -> None:
        """A verb of ``qp`` landed on ``node`` (successfully): a READ or atomic makes the QP's
        earlier writes durable; a WRITE, or an atomic that changed its word, is recorded as
        non-durable: ``payload`` (a WRITE's source bytes, for one whose later lines have not
        landed yet), else its bytes as they are now in memory."""
        img = self.images[node]
        if kind != NVM_WRITE:
            self.flush(qp)
        if kind == NVM_READ or length <= 0:
            return
        data = bytes(payload) if payload is not None else bytes(self.fabric.memory[node].host[off:off + length])
        if kind == NVM_ATOMIC and data == old:
            return                      # a CAS that failed wrote nothing
        epoch = int(load_acquire(img.header, H_EPOCH))
        for line in range(off // LINE, (off + length - 1) // LINE + 1):
            faa(img.pending, line, 1)
        faa(img.header, H_WRITES, 1)
        recs = self.per_qp.get(qp)
        if recs is None:
            recs = self.per_qp[qp] = []
        recs.append((node, epoch, off, data))

    def flush(self, qp) -> None:
        """A READ or atomic of ``qp`` executed: every write recorded for it is durable now."""
        recs = self.per_qp.pop(qp, None)
        if not recs:
            return
        for node, epoch, off, data in recs:
            img = self.images[node]
            if int(load_acquire(img.header, H_EPOCH)) != epoch:
                continue                # a power failure came between: it was lost then
            img.image[off:off + len(data)] = np.frombuffer(data, np.uint8)
            for line in range(off // LINE, (off + len(data) - 1) // LINE + 1):
                faa(img.pending, line, -1)
            faa(img.header, H_FLUSHED, 1)


def nvm_shadow_of(fabric) -> NvmShadow | None:
    """This process's :class:`NvmShadow` for ``fabric`` (one per process, as a fabric object is),
    or None when no node has persistent memory or its writes are durable once placed
    (``nvm.persist_on_placement``): then there is nothing to track."""
    if not fabric.nvm or fabric.profile.nvm.persist_on_placement:
        return None
    sh = getattr(fabric, "_nvm_shadow", None)
    if sh is None:
        sh = fabric._nvm_shadow = NvmShadow(fabric)
    return sh


def power_fail(fabric, node) -> int:
    """Node ``node`` (an index or name) loses power and comes back: every line holding a write
    that no flush made durable gets its persisted contents back. Returns the number of lines
    reverted. Call it when nothing lands on the node (the rack's ``kill`` step, between steps)."""
    i = fabric.node_index(node)
    img = fabric.nvm.get(i)
    if img is None:
        raise ValueError(f"node {fabric.nodes[i].name!r} has no persistent memory: a power failure loses all "
                         f"of its DRAM, which the rack does not model (its memory stays reachable)")
    used = min(_lines(int(fabric.memory[i].alloc[0])), img.pending.shape[0])
    lines = np.flatnonzero(img.pending[:used])
    if lines.size:
        idx = (lines[:, None] * LINE + np.arange(LINE)).ravel()
        fabric.memory[i].host[idx] = img.image[idx]
        img.pending[lines] = 0
    store_release(img.header, H_EPOCH, int(img.header[H_EPOCH]) + 1)
    faa(img.header, H_LOST_LINES, int(lines.size))
    return int(lines.size)


def statistics(fabric, node) -> NvmStats:
    """Node ``node``'s :class:`NvmStats`."""
    i = fabric.node_index(node)
    img = fabric.nvm.get(i)
    if img is None:
        raise ValueError(f"node {fabric.nodes[i].name!r} has no persistent memory")
    used = min(_lines(int(fabric.memory[i].alloc[0])), img.pending.shape[0])
    h = img.header
    return NvmStats(int(h[H_EPOCH]), int(h[H_WRITES]), int(h[H_FLUSHED]), int(np.count_nonzero(img.pending[:used])),
                    int(h[H_LOST_LINES]))
