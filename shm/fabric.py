"""The emulated hardware of a rack: node memories, NIC device memories, MR tables and the NIC model.

A :class:`Fabric` is created once by the rack's owner and attached by every node process from a
picklable description (:meth:`Fabric.describe`). It holds, per node:

* host memory: one shared segment, mapped lazily (a 16 GiB memory node costs nothing until used);
* NIC device memory: a small separate region (128–256 KiB on ConnectX) for lock tables;
* an MR table: registered regions with their keys, checked on every remote access so a bad
  address or rkey fails the verb instead of touching memory;
* line locks: striped seqlocks that make each 64-byte line of a READ/WRITE atomic across
  processes, as the PCIe/cache-line granularity of real hardware does (and nothing larger);

and, for the whole rack, the fabric table that the NIC model books (links, units, PCIe, doorbells).

Global addresses pack a node, a region and an offset into 64 bits: ``node:12 | region:4 |
offset:48``, so a system can store remote pointers in 8-byte slots.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
from numba import njit, typeof

from shm import nic
from shm.atomics import cas, faa, load_acquire, load_word_at, masked_cas, masked_faa, store_release, store_word_at
from shm.calendar import CalendarAliased
from shm.kernels import entry, type_key
from shm.profile_schema import Profile
from shm.segment import Segment, new_prefix

# --- global addresses -----------------------------------------------------------------------
NODE_BITS = 12
REGION_BITS = 4
OFFSET_BITS = 48
MAX_NODES = 1 << NODE_BITS
# a global address is node | region | offset, high bits to low: the fields' shifts and masks,
# declared here once for every module that takes addresses apart on a hot path (no call)
NODE_SHIFT = REGION_BITS + OFFSET_BITS
NODE_MASK = MAX_NODES - 1
REGION_MASK = (1 << REGION_BITS) - 1
OFFSET_MASK = (1 << OFFSET_BITS) - 1

REGION_HOST = nic.REGION_HOST
REGION_DEVICE = nic.REGION_DEVICE
REGION_NAMES = {REGION_HOST: "host", REGION_DEVICE: "device"}


def gaddr(node: int, offset: int, region: int = REGION_HOST) -> int:
    """Pack a global address. Raises ValueError naming the field that does not fit."""
    if not 0 <= node < MAX_NODES:
        raise ValueError(f"global address: node {node} out of range 0..{MAX_NODES - 1}")
    if region not in REGION_NAMES:
        raise ValueError(f"global address: unknown region {region}")
    if not 0 <= offset <= OFFSET_MASK:
        raise ValueError(f"global address: offset {offset:#x} does not fit in {OFFSET_BITS} bits")
    return (node << NODE_SHIFT) | (region << OFFSET_BITS) | offset


def gaddr_node(a: int) -> int:
    return (a >> NODE_SHIFT) & NODE_MASK


def gaddr_region(a: int) -> int:
    return (a >> OFFSET_BITS) & REGION_MASK


def gaddr_offset(a: int) -> int:
    return a & OFFSET_MASK


def format_gaddr(a: int) -> str:
    return f"node {gaddr_node(a)} {REGION_NAMES.get(gaddr_region(a), '?')}+{gaddr_offset(a):#x}"


# --- access flags (values of ibv_access_flags) ----------------------------------------------
IBV_ACCESS_LOCAL_WRITE = 1
IBV_ACCESS_REMOTE_WRITE = 2
IBV_ACCESS_REMOTE_READ = 4
IBV_ACCESS_REMOTE_ATOMIC = 8

# --- MR table -------------------------------------------------------------------------------
# One row per registered region: key, region, offset, length, access, owner pid.
MR_KEY, MR_REGION, MR_OFFSET, MR_LENGTH, MR_ACCESS, MR_PID = range(6)
MR_COLS = 6
MR_ROWS = 4096
ALLOC_WORDS = 4  # per node: bump pointers of host and device memory, keys of their exposed MRs
LINE = 64
LINE_LOCKS = 4096  # striped seqlocks per node; a power of two


@njit(cache=True, inline='always')
def mr_check(mrt, key, region, offset, length, access):
    """True if [offset, offset+length) of ``region`` lies in the MR named by ``key`` with
    ``access`` rights. A key encodes its row (key >> 8), so no search is needed."""
    row = (key >> 8) - 1
    if row < 0 or row >= mrt.shape[0] or key == 0:
        return False
    if load_acquire(mrt[row], MR_KEY) != key:
        return False
    if mrt[row, MR_REGION] != region:
        return False
    start = mrt[row, MR_OFFSET]
    if offset < start or length < 0 or offset + length > start + mrt[row, MR_LENGTH]:
        return False
    return (mrt[row, MR_ACCESS] & access) == access


@njit(cache=True, inline='always')
def _lock_line(locks, line):
    i = line & (locks.shape[0] - 1)
    while True:
        s = load_acquire(locks, i)
        if s & 1 == 0 and cas(locks, i, s, s + 1) == s:
            return i


@njit(cache=True, inline='always')
def _line_bounds(line, off, n):
    """The bytes of line ``line`` that a transfer of ``n`` bytes at ``off`` covers: [lo, hi)."""
    lo = line * 64
    if lo < off:
        lo = off
    hi = (line + 1) * 64
    if hi > off + n:
        hi = off + n
    return lo, hi


@njit(cache=True, inline='always')
def _place_line(dst, lo, hi, src, s_lo, dst_locks, line):
    """Copy dst[lo:hi] from src[s_lo:] under line ``line``'s seqlock (a writer)."""
    d_lock = _lock_line(dst_locks, line)
    for b in range(hi - lo):
        dst[lo + b] = src[s_lo + b]
    store_release(dst_locks, d_lock, load_acquire(dst_locks, d_lock) + 1)


@njit(cache=True, inline='always')
def _sample_line(dst, d_lo, src, lo, hi, src_locks, line):
    """Copy src[lo:hi] into dst[d_lo:], again until line ``line``'s seqlock did not move (a reader).

    Aligned 8-byte words are loaded whole (``load_word_at``): a word that a CPU store or local
    atomic (which take no seqlock, e.g. the reclaimer's epoch announcements) changes during the
    copy then reads either old or new, as a NIC's DMA read of an aligned word does, never half of
    each."""
    i = line & (src_locks.shape[0] - 1)
    whole = (lo & 7) == 0 and (hi & 7) == 0 and (src.ctypes.data & 7) == 0
    aligned = whole and ((dst.ctypes.data + d_lo) & 7) == 0
    while True:
        s1 = load_acquire(src_locks, i)
        if s1 & 1:
            continue
        if aligned:
            for at in range(lo, hi, 8):
                store_word_at(dst, d_lo + at - lo, load_word_at(src, at))
        elif whole:
            _copy_words(dst, d_lo, src, lo, hi)
        else:
            for b in range(hi - lo):
                dst[d_lo + b] = src[lo + b]
        if load_acquire(src_locks, i) == s1:
            return


@njit(cache=True, inline='always')
def _copy_words(dst, d_lo, src, lo, hi):
    """src[lo:hi] (8-byte aligned) into dst[d_lo:] (not aligned), one 8-byte load per word."""
    for w in range(lo, hi, 8):
        v = load_word_at(src, w)
        at = d_lo + w - lo
        for k in range(8):
            dst[at + k] = np.uint8((v >> np.uint64(8 * k)) & np.uint64(0xFF))


@njit(cache=True, inline='always')
def copy_lines(dst, doff, src, soff, n, dst_locks, descending):
    """Copy ``n`` bytes into shared memory, each 64-byte destination line under its seqlock, so a
    concurrent reader sees every line either before or after (never torn), while two lines may
    come from different moments, as on real hardware. The source is the poster's own buffer. ``descending`` copies lines in reverse
    order (NICs that do not write multi-line payloads in ascending order)."""
    if n <= 0:
        return
    first = doff // 64
    last = (doff + n - 1) // 64
    for k in range(last - first + 1):
        line = last - k if descending else first + k
        lo, hi = _line_bounds(line, doff, n)
        _place_line(dst, lo, hi, src, soff + (lo - doff), dst_locks, line)


@njit(cache=True, inline='always')
def read_lines(dst, doff, src, soff, n, src_locks):
    """Copy ``n`` bytes out of shared memory, retrying each line whose seqlock moved meanwhile."""
    if n <= 0:
        return
    for line in range(soff // 64, (soff + n - 1) // 64 + 1):
        lo, hi = _line_bounds(line, soff, n)
        _sample_line(dst, doff + (lo - soff), src, lo, hi, src_locks, line)


@njit(cache=True)
def land_lines(is_read, rbuf, rlocks, off, length, lbuf, loff, descending, k0, k1):
    """Lines ``k0 .. k1-1`` (in landing order) of a READ or WRITE of ``length`` bytes at ``off``
    land now: a READ samples each into ``lbuf[loff:]``, a WRITE places each from it. Line k is
    the k-th line from the lowest address, or from the highest when ``descending``. The rkey was
    checked for the whole range before the first line (``mr_check``)."""
    first = off // 64
    last = (off + length - 1) // 64
    for k in range(k0, k1):
        line = last - k if descending else first + k
        lo, hi = _line_bounds(line, off, length)
        if is_read:
            _sample_line(lbuf, loff + (lo - off), rbuf, lo, hi, rlocks, line)
        else:
            _place_line(rbuf, lo, hi, lbuf, loff + (lo - off), rlocks, line)


ATOMIC_CAS, ATOMIC_FAA, ATOMIC_MASKED_CAS, ATOMIC_MASKED_FAA = range(4)


@njit(cache=True)
def remote_read_write(is_read, mrt, key, region, off, length, rbuf, rlocks, lbuf, loff, descending):
    """A one-sided READ (``is_read``) or WRITE landing now: check the rkey, then copy. Returns
    False (touching nothing) if the key does not grant the access over the whole range."""
    access = IBV_ACCESS_REMOTE_READ if is_read else IBV_ACCESS_REMOTE_WRITE
    if not mr_check(mrt, key, region, off, length, access):
        return False
    if is_read:
        read_lines(lbuf, loff, rbuf, off, length, rlocks)
    else:
        copy_lines(rbuf, off, lbuf, loff, length, rlocks, descending)
    return True


@njit(cache=True)
def remote_atomic(words, i, kind, a, b, am, bm, lbuf, loff, locks):
    """Run one RDMA atomic on word ``i`` and write the old value into ``lbuf[loff:loff+8]``.
    Operands arrive as int64 bit patterns (Python ints above 2**63 do not fit numba's int64).
    ``locks``: the seqlock stripes of ``words``' memory (``host_locks`` or ``device_locks``)."""
    ua = np.uint64(a)
    ub = np.uint64(b)
    # The atomic changes its word under the line's seqlock, as a WRITE does. A READ copies a line
    # byte by byte (_sample_line) and trusts the seqlock to tell it the line moved; in a rack of
    # processes a bare cmpxchg landing in the middle of that copy handed the reader a torn word,
    # half old and half new (a RACE slot word with the key's fingerprint and another block's
    # address: a get of a key being updated returned "not found").
    lk = _lock_line(locks, i >> 3)
    if kind == ATOMIC_CAS:
        old = cas(words, i, ua, ub)
    elif kind == ATOMIC_FAA:
        old = faa(words, i, ua)
    elif kind == ATOMIC_MASKED_CAS:
        old = masked_cas(words, i, ua, ub, np.uint64(am), np.uint64(bm))
    else:
        old = masked_faa(words, i, ua, np.uint64(am))
    store_release(locks, lk, load_acquire(locks, lk) + 1)
    for k in range(8):
        lbuf[loff + k] = (old >> np.uint64(8 * k)) & np.uint64(0xFF)
    return old


# What land_verb_now lands: a READ, a WRITE, or one of the atomics' kinds above (remote_atomic)
LAND_READ, LAND_WRITE = -2, -1
# and how it went: landed; landed, a compare-and-swap whose compare failed (its word unchanged:
# it lost a race); refused (the rkey does not grant the access over the range, nothing touched);
# an atomic not on one aligned 8-byte word (nothing touched)
VERB_LANDED, VERB_RACED, VERB_REFUSED, VERB_MISALIGNED = range(4)


@njit(cache=True)
def land_verb_now(kind, region, mrt, key, off, length, mem, mem64, locks, lbuf, loff, a, b, am, bm, descending):
    """One verb landing whole, now, on ``region`` of a node (its bytes ``mem``, their 64-bit
    words ``mem64``, their seqlocks ``locks``): what ``shm.verbs.apply_one_sided`` does, checks
    first, in one call from a coroutine's landing (shm/coro.py ``VerbBatch._land``) instead of a
    Python function and a kernel. ``kind``: LAND_READ, LAND_WRITE or an ATOMIC_* kind, with its
    operands as int64 bit patterns; ``descending`` orders a WRITE's lines. Returns VERB_LANDED,
    VERB_RACED, VERB_REFUSED or VERB_MISALIGNED. (The READs deferred past now land before a WRITE
    or atomic: the caller's part, as apply_one_sided's ``before_write``.)"""
    if kind == LAND_READ or kind == LAND_WRITE:
        ok = remote_read_write(kind == LAND_READ, mrt, key, region, off, length, mem, locks, lbuf, loff, descending)
        return VERB_LANDED if ok else VERB_REFUSED
    if off % 8 != 0 or length != 8:
        return VERB_MISALIGNED
    if not mr_check(mrt, key, region, off, length, IBV_ACCESS_REMOTE_ATOMIC):
        return VERB_REFUSED
    old = remote_atomic(mem64, off // 8, kind, a, b, am, bm, lbuf, loff, locks)
    if kind == ATOMIC_CAS:
        wrote = old == np.uint64(a)
    elif kind == ATOMIC_MASKED_CAS:
        wrote = ((old ^ np.uint64(a)) & np.uint64(am)) == 0
    else:
        wrote = True
    return VERB_LANDED if wrote else VERB_RACED


class NodeMemory(NamedTuple):
    host: np.ndarray        # uint8 view of host memory
    host64: np.ndarray      # uint64 view of the same bytes (atomics)
    device: np.ndarray      # uint8 view of NIC device memory
    device64: np.ndarray
    host_locks: np.ndarray  # int64 seqlock stripes
    device_locks: np.ndarray
    mrt: np.ndarray         # (MR_ROWS, MR_COLS) int64
    alloc: np.ndarray       # (ALLOC_WORDS,) int64 bump pointers


@dataclass(frozen=True)
class NodeSpec:
    """One node of the fabric: its name, role and host memory size in bytes."""

    name: str
    role: str = "compute"
    memory_bytes: int = 64 << 20
    # the node whose NIC this one shares (a DPU or DPA node names its host): their verbs queue on
    # the same NIC units, link and atomic pipeline, as a BlueField's host and Arm cores do
    nic_of: str | None = None
    # what the host memory is: "dram", or "nvm" (persistent memory, the profile's [nvm] table:
    # slower reads, XPLine bandwidth, and WRITEs durable only once flushed; docs/nvm.md)
    memory_kind: str = "dram"
    # with ``nic_of``: this node runs on the same server as that one (a memory node beside a
    # compute node, as testbeds that emulate each server as one of each), so their NIC's PCIe link
    # to host memory is shared too; a DPU or DPA keeps its own (the card's internal path)
    same_server: bool = False


MEMORY_KINDS = ("dram", "nvm")


def nvm_nodes(nodes) -> tuple:
    """Indices of the nodes whose host memory is persistent memory."""
    return tuple(i for i, n in enumerate(nodes) if getattr(n, "memory_kind", "dram") == "nvm")


def _same_server(nodes) -> tuple:
    """Indices of the nodes that share their ``nic_of`` node's server (and so its PCIe link)."""
    out = []
    for i, n in enumerate(nodes):
        if getattr(n, "same_server", False):
            if getattr(n, "nic_of", None) is None:
                raise ValueError(f"node {n.name!r}: same_server needs nic_of, the node whose server it shares")
            out.append(i)
    return tuple(out)


def _nic_of(nodes) -> dict:
    """Node index -> index of the node whose NIC it shares (a missing name is one line)."""
    names = [n.name for n in nodes]
    out = {}
    for i, n in enumerate(nodes):
        if getattr(n, "nic_of", None) is None:
            continue
        if n.nic_of not in names or n.nic_of == n.name:
            raise ValueError(f"node {n.name!r}: nic_of = {n.nic_of!r} names no other node of the fabric")
        host = names.index(n.nic_of)
        if getattr(nodes[host], "nic_of", None) is not None:
            raise ValueError(f"node {n.name!r}: nic_of = {n.nic_of!r}, which itself shares another node's NIC")
        out[i] = host
    return out


class FabricStats(NamedTuple):
    nodes: int
    memory_bytes: int
    segments: int


#: What the windows a check can stretch saw (docs/checking.md, "Chaos"), per fabric
#: (``Fabric.windows``) and summed over every fabric this process closed (:func:`windows_hit`):
#: delays chaos drew in the NIC model and their total, CASes that lost a race (their compare
#: failed), multi-line READs a write to their node landed inside, coroutine resumptions and
#: atomic write-backs chaos delayed.
WINDOW_COUNTERS = ("chaos_delays", "chaos_delay_ns", "cas_raced", "reads_overlapping_writes",
                   "resumes_delayed", "write_backs_delayed")
_windows_total = dict.fromkeys(WINDOW_COUNTERS, 0)


def windows_hit() -> dict:
    """The :data:`WINDOW_COUNTERS` summed over the fabrics this process has closed (a copy)."""
    return dict(_windows_total)


class HostKernels(NamedTuple):
    """The compiled kernels that land verbs in host memory, entered without numba's typing of
    their arguments (shm/kernels.py: about 0.3 µs a call saved, once or twice per verb), for one
    fabric's host-memory arrays and one local buffer's type. Only for the emulator's own buffers
    (a coroutine thread's), never for a buffer a user registered, and only for host memory (a
    user's MR keeps the dispatcher, which checks every argument): an entry point reads any array
    as the type it was compiled for. ``verb`` also lands on NIC device memory, whose arrays have
    the host's types (:func:`host_kernels` checks)."""
    read_write: object    # remote_read_write
    lines: object         # land_lines
    check: object         # mr_check
    atomic: object        # remote_atomic, on host memory's 64-bit words
    verb: object          # land_verb_now, on host or device memory (their arrays have the same types)


def host_kernels(fabric: "Fabric", lbuf: np.ndarray) -> HostKernels:
    """:class:`HostKernels` for ``fabric``'s host memory and local buffers of ``lbuf``'s type.
    Looked up once per fabric and buffer type: every QP and coroutine thread asks at its making,
    and the checks and entries' keys cost about 90 µs a time, two thirds of a QP's making, paid
    per reply port by racks that make thousands of sockets (DPA-Store's clients: one per
    coroutine, docs/bench.md)."""
    key = type_key(lbuf)
    kernels = fabric._host_kernels.get(key)
    if kernels is None:
        kernels = fabric._host_kernels[key] = _host_kernels(fabric, lbuf)
    return kernels


def _host_kernels(fabric: "Fabric", lbuf: np.ndarray) -> HostKernels:
    mem = fabric.memory[0]      # every node's host memory has the same array types
    for a, b in ((mem.device, mem.host), (mem.device64, mem.host64), (mem.device_locks, mem.host_locks)):
        if typeof(a) != typeof(b):
            raise TypeError(f"host_kernels: device memory's array type {typeof(a)} is not host memory's {typeof(b)}")
    return HostKernels(
        entry(remote_read_write, True, mem.mrt, 0, 0, 0, 0, mem.host, mem.host_locks, lbuf, 0, False),
        entry(land_lines, True, mem.host, mem.host_locks, 0, 0, lbuf, 0, False, 0, 0),
        entry(mr_check, mem.mrt, 0, 0, 0, 0, 0),
        entry(remote_atomic, mem.host64, 0, 0, 0, 0, 0, 0, lbuf, 0, mem.host_locks),
        entry(land_verb_now, 0, 0, mem.mrt, 0, 0, 0, mem.host, mem.host64, mem.host_locks, lbuf, 0, 0, 0, 0, 0, False))


class Fabric:
    """Everything shared between the nodes of a rack (see the module docstring)."""

    def __init__(self, profile: Profile, nodes: tuple[NodeSpec, ...], segments: dict, owner: bool,
                 prefix: str, layout: "nic.FabricLayout | None" = None):
        self.profile = profile
        self.nodes = nodes
        self.prefix = prefix
        self.owner = owner
        self._segments = segments
        # (create has built it already, to size the segments; attach builds the same one here)
        self.layout = layout if layout is not None else nic.FabricLayout.build(
            profile, [n.name for n in nodes], nic_of=_nic_of(nodes), nvm=nvm_nodes(nodes),
            same_server=_same_server(nodes))
        self.params = nic.pack_params(profile)
        self.windows = dict.fromkeys(WINDOW_COUNTERS, 0)   # this process's share (see WINDOW_COUNTERS)
        self.table = segments["fabric"].array(np.int64, 0, self.layout.words)
        self.private_flag = segments["fabric"].array(np.int64, self.layout.words * 8, 1)
        self.descriptors = self.layout.descriptors
        self._host_kernels: dict = {}      # host_kernels(): buffer type -> HostKernels
        self.memory: list[NodeMemory] = []
        for i, spec in enumerate(nodes):
            host = segments[f"mem{i}"]
            meta = segments[f"meta{i}"]
            dev_bytes = max(profile.nic.device_memory_bytes, 64)
            meta_dev = meta.array(np.uint8, 0, dev_bytes)
            off = _round_up(dev_bytes, 64)
            host_locks = meta.array(np.int64, off, LINE_LOCKS)
            off += LINE_LOCKS * 8
            dev_locks = meta.array(np.int64, off, LINE_LOCKS)
            off += LINE_LOCKS * 8
            mrt = meta.array(np.int64, off, MR_ROWS * MR_COLS).reshape(MR_ROWS, MR_COLS)
            off += MR_ROWS * MR_COLS * 8
            alloc = meta.array(np.int64, off, ALLOC_WORDS)
            self.memory.append(NodeMemory(
                host=host.array(np.uint8), host64=host.array(np.uint64),
                device=meta_dev, device64=meta_dev[: dev_bytes - dev_bytes % 8].view(np.uint64),
                host_locks=host_locks, device_locks=dev_locks, mrt=mrt, alloc=alloc))
        # persistent memory: node index -> its durability shadow's shared arrays (shm/nvm.py)
        self.nvm: dict = {}
        if any(f"nvm{i}" in segments for i in range(len(nodes))):
            from shm.nvm import NvmImage
            self.nvm = {i: NvmImage.of_segment(segments[f"nvm{i}"], spec.memory_bytes)
                        for i, spec in enumerate(nodes) if f"nvm{i}" in segments}

    # -- creation ----------------------------------------------------------------------------
    @classmethod
    def create(cls, profile: Profile, nodes, *, prefix: str | None = None, private: bool = False) -> "Fabric":
        """Create the shared segments of a rack (this process owns and later unlinks them).
        ``private``: no other process will attach (a co-located rack): the NIC model books its
        calendars with plain loads and stores (``nic.P_PRIVATE``), and :meth:`attach` refuses."""
        nodes = tuple(n if isinstance(n, NodeSpec) else NodeSpec(n) for n in nodes)
        if not nodes:
            raise ValueError("a fabric needs at least one node")
        if len(nodes) > MAX_NODES:
            raise ValueError(f"a fabric has at most {MAX_NODES} nodes, got {len(nodes)}")
        for spec in nodes:
            if spec.memory_bytes < 4096 or spec.memory_bytes > (1 << OFFSET_BITS):
                raise ValueError(f"node {spec.name!r}: memory_bytes {spec.memory_bytes} out of range")
            kind = getattr(spec, "memory_kind", "dram")
            if kind not in MEMORY_KINDS:
                raise ValueError(f"node {spec.name!r}: memory_kind {kind!r} is not one of {', '.join(MEMORY_KINDS)}")
            if kind == "nvm" and profile.nvm is None:
                raise ValueError(f"node {spec.name!r}: persistent memory needs the profile's [nvm] table, which "
                                 f"{profile.name!r} does not have")
        prefix = prefix or new_prefix()
        layout = nic.FabricLayout.build(profile, [n.name for n in nodes], nic_of=_nic_of(nodes), nvm=nvm_nodes(nodes),
            same_server=_same_server(nodes))
        segments = {}
        try:
            # one word more than the layout: the private flag, which attach reads
            segments["fabric"] = Segment.create("fabric", (layout.words + 1) * 8, prefix=prefix)
            for i, spec in enumerate(nodes):
                segments[f"mem{i}"] = Segment.create(f"mem{i}", spec.memory_bytes, prefix=prefix)
                segments[f"meta{i}"] = Segment.create(f"meta{i}", _meta_bytes(profile), prefix=prefix)
                if getattr(spec, "memory_kind", "dram") == "nvm":
                    from shm.nvm import NvmImage
                    segments[f"nvm{i}"] = Segment.create(f"nvm{i}", NvmImage.segment_bytes(spec.memory_bytes),
                                                         prefix=prefix)
            fabric = cls(profile, nodes, segments, True, prefix, layout)
        except BaseException:
            for seg in segments.values():
                seg.close()
            raise
        layout.initialise(fabric.table)
        if private:
            fabric.private_flag[0] = 1
            fabric.params[nic.P_PRIVATE] = 1
        for i in range(len(nodes)):
            # Offset 0 is never handed out, so a zero pointer in a system's data means "none".
            fabric.memory[i].alloc[:] = (LINE, 0, 0, 0)
        return fabric

    def describe(self) -> dict:
        """Picklable description for :meth:`attach` in another process."""
        return {"profile": self.profile, "nodes": self.nodes, "prefix": self.prefix,
                "segments": {k: s.name for k, s in self._segments.items()}}

    @classmethod
    def attach(cls, desc: dict) -> "Fabric":
        segments = {}
        try:
            for k, name in desc["segments"].items():
                segments[k] = Segment.attach(name)
        except BaseException:
            for seg in segments.values():
                seg.close()
            raise
        fabric = cls(desc["profile"], desc["nodes"], segments, False, desc["prefix"])
        if fabric.private_flag[0]:
            fabric.close(check=False)
            raise ValueError(f"fabric {desc['prefix']!r} is private to the process that created it (a co-located "
                             f"rack books its calendars without atomics); create it with private=False to share it")
        return fabric

    def calendar_errors(self) -> list:
        """Resources whose calendar ring aliased (``stale`` or ``overflows`` above zero, see
        ``shm/calendar.py``): their bookings, and every time derived from them, are wrong."""
        if self.table is None:
            return []
        return self.layout.resources.aliased(self.table)

    def close(self, *, check: bool = True) -> None:
        """Unmap; the owner also unlinks every segment. Then, for the owner, with ``check``: raise
        :class:`shm.calendar.CalendarAliased` if a calendar aliased (the run's timing is wrong).
        Closing on the way out of another error does not check (it would hide that error)."""
        bad = self.calendar_errors() if self.owner and check else []
        if self.table is not None:
            for k, v in self.window_statistics().items():
                _windows_total[k] += v
        self.memory = []
        self.table = None
        self.private_flag = None
        for seg in self._segments.values():
            seg.close()
        self._segments = {}
        if bad:
            raise CalendarAliased(bad)

    def __enter__(self):
        return self

    def __exit__(self, exc_type, *exc):
        self.close(check=exc_type is None)

    # -- nodes ---------------------------------------------------------------------------------
    def node_index(self, node) -> int:
        if isinstance(node, (int, np.integer)):
            if not 0 <= node < len(self.nodes):
                raise KeyError(f"node {node} does not exist; the fabric has {len(self.nodes)} nodes")
            return int(node)
        for i, spec in enumerate(self.nodes):
            if spec.name == node:
                return i
        raise KeyError(f"unknown node {node!r}; the fabric has {[n.name for n in self.nodes]}")

    def region_bytes(self, node: int, region: int) -> int:
        mem = self.memory[node]
        return mem.host.shape[0] if region == REGION_HOST else mem.device.shape[0]

    def occupancy(self, node) -> tuple[int, int]:
        """(bytes carved from the node's host memory by :meth:`allocate`, its host memory size)."""
        i = self.node_index(node)
        capacity = self.region_bytes(i, REGION_HOST)
        return min(int(self.memory[i].alloc[0]), capacity), capacity

    def allocate(self, node, nbytes: int, *, region: int = REGION_HOST, align: int = LINE) -> int:
        """Carve ``nbytes`` out of a node's memory (bump allocation, shared by all processes);
        returns the offset. Memory is never reused: registration is a setup-time act."""
        i = self.node_index(node)
        if nbytes <= 0:
            raise ValueError(f"allocate: size must be positive, got {nbytes}")
        if align <= 0 or align & (align - 1):
            raise ValueError(f"allocate: alignment must be a power of two, got {align}")
        size = _round_up(nbytes, align)
        limit = self.region_bytes(i, region)
        word = 0 if region == REGION_HOST else 1
        while True:
            cur = int(load_acquire(self.memory[i].alloc, word))
            start = _round_up(cur, align)
            if start + size > limit:
                raise MemoryError(
                    f"node {self.nodes[i].name!r}: {REGION_NAMES[region]} memory exhausted "
                    f"({limit} bytes, {cur} used, {nbytes} more asked)")
            if cas(self.memory[i].alloc, word, cur, start + size) == cur:
                return start

    def register(self, node, offset: int, length: int, access: int, *, region: int = REGION_HOST) -> int:
        """Enter a region in the node's MR table; returns its key (used as both lkey and rkey)."""
        i = self.node_index(node)
        limit = self.region_bytes(i, region)
        if offset < 0 or length <= 0 or offset + length > limit:
            raise ValueError(
                f"register on node {self.nodes[i].name!r}: [{offset:#x}, {offset + length:#x}) is outside "
                f"its {REGION_NAMES.get(region, region)} memory of {limit} bytes")
        mrt = self.memory[i].mrt
        for row in range(MR_ROWS):
            if load_acquire(mrt[row], MR_KEY) == 0 and cas(mrt[row], MR_KEY, 0, -1) == 0:
                break
        else:
            raise MemoryError(f"node {self.nodes[i].name!r}: MR table full ({MR_ROWS} regions)")
        key = ((row + 1) << 8) | int.from_bytes(os.urandom(1), "little")
        mrt[row, MR_REGION] = region
        mrt[row, MR_OFFSET] = offset
        mrt[row, MR_LENGTH] = length
        mrt[row, MR_ACCESS] = access
        mrt[row, MR_PID] = os.getpid()
        store_release(mrt[row], MR_KEY, key)
        return key

    def deregister(self, node, key: int) -> None:
        i = self.node_index(node)
        row = (key >> 8) - 1
        mrt = self.memory[i].mrt
        if not 0 <= row < MR_ROWS or cas(mrt[row], MR_KEY, key, 0) != key:
            raise KeyError(f"node {self.nodes[i].name!r}: no MR with key {key:#x}")

    def expose(self, node) -> tuple[int, int]:
        """Register a node's whole host memory and device memory for remote READ/WRITE/atomics, as a
        memory blade does at start-up, and publish the keys for :meth:`exposed_key`."""
        i = self.node_index(node)
        access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC
        keys = []
        for word, region in ((2, REGION_HOST), (3, REGION_DEVICE)):
            key = int(load_acquire(self.memory[i].alloc, word))
            if key == 0:
                key = self.register(i, 0, self.region_bytes(i, region), access, region=region)
                store_release(self.memory[i].alloc, word, key)
            keys.append(key)
        return keys[0], keys[1]

    def exposed_key(self, node, region: int = REGION_HOST) -> int:
        """The rkey of a node's exposed memory (see :meth:`expose`)."""
        i = self.node_index(node)
        key = int(load_acquire(self.memory[i].alloc, 2 if region == REGION_HOST else 3))
        if key == 0:
            raise KeyError(f"node {self.nodes[i].name!r} has not exposed its memory (Fabric.expose)")
        return key

    def release_stuck_line_locks(self, wait_s: float = 1.0) -> int:
        """Release 64-byte line seqlocks left held by a process that died inside a copy (SIGKILL
        mid-WRITE); call it only after a node process died. A stripe that stays odd with the same
        value for ``wait_s`` belongs to no live writer: a live one holds it for microseconds, and
        the wait is long enough that an unlucky descheduled writer is not mistaken for a dead one
        (its later unlock is an increment, so releasing a live writer's lock would wedge the
        stripe). Readers of that line would otherwise spin forever. The line keeps whatever part of
        the write landed, as after a real crash. Returns the number of stripes released."""
        import time
        held = []
        for i, mem in enumerate(self.memory):
            for locks in (mem.host_locks, mem.device_locks):
                for j in np.flatnonzero(locks & 1).tolist():
                    held.append((locks, j, int(locks[j])))
        if not held:
            return 0
        time.sleep(wait_s)
        released = 0
        for locks, j, v in held:
            if cas(locks, j, v, v + 1) == v:
                released += 1
        return released

    def statistics(self) -> FabricStats:
        return FabricStats(nodes=len(self.nodes), memory_bytes=sum(n.memory_bytes for n in self.nodes),
                           segments=len(self._segments))

    def window_statistics(self) -> dict:
        """:data:`WINDOW_COUNTERS` of this fabric in this process: the model's chaos delays (in
        the nodes' counters of the table) and what the verbs counted (``windows``)."""
        out = dict(self.windows)
        for d in self.descriptors:
            out["chaos_delays"] += int(self.table[d[nic.D_STATE] + nic.S_CHAOS_DELAYS])
            out["chaos_delay_ns"] += int(self.table[d[nic.D_STATE] + nic.S_CHAOS_PS]) // 1000
        return out

    def resource_statistics(self):
        """Every NIC resource's booked time, queueing and request count (for utilisation)."""
        lay = self.layout.resources
        return [lay.statistics(self.table, name) for name in lay.names(arrays=False)]


def _round_up(x: int, a: int) -> int:
    return (x + a - 1) // a * a


def _meta_bytes(profile: Profile) -> int:
    dev = _round_up(max(profile.nic.device_memory_bytes, 64), 64)
    return dev + 2 * LINE_LOCKS * 8 + MR_ROWS * MR_COLS * 8 + ALLOC_WORDS * 8
