"""The NIC timing model: where a work request spends its virtual time, and with whom it contends.

One jitted function, :func:`model_post`, prices a whole ``ibv_post_send`` (a list of work requests
from one QP to one remote node) in one call, so the cost of the model stays off the Python hot
path. Each work request walks the stations of a real RNIC, booking each contended one in a
reservation calendar (:mod:`shm.calendar`):

    CPU builds WQEs -> [QP lock, when threads share the QP] -> doorbell spinlock (hold time grows
    with the threads sharing it, a thread with QPs on k doorbells counting 1/k on each)
    -> MMIO -> PCIe WQE fetch (+ an extra read when outstanding WRs overflow the WQE cache)
    -> requester processing unit (in order per QP; READ/atomic capped by max_rd_atomic)
    -> [payload DMA read for WRITE/SEND] -> egress link -> wire/switch -> ingress link
    -> responder unit [atomics: after the QP's earlier requests took effect where the profile
       runs a QP's atomics in order -> NIC-wide atomic pipeline -> per-address atomic slot]
    -> responder PCIe to host memory (or NIC device memory): the *effect* happens here [on a node
       whose memory is persistent memory: plus the media's load latency over DRAM for a READ or
       atomic, and the XPLines of every READ and WRITE booked on the DIMMs' calendars (docs/nvm.md)]
    -> response on the links back -> PCIe write of data and CQE at the requester: *completion*,
       never before the completion of the QP's previous work request (a send queue completes in
       posting order).

RC ordering per QP (docs/fabric.md, "Ordering rules"): a WRITE or SEND takes effect no earlier
than the QP's previous WRITE/SEND (placement in posting order); a READ or atomic no earlier than
any earlier work request of the QP (it sees earlier WRITEs; READs and atomics keep their order); a
WRITE/SEND may pass an earlier READ/atomic unless it carries ``FLAG_FENCE``, which holds it (and
so the QP's later work requests) until the QP's earlier READs and atomics have completed. Every
completion comes at or after its effect.

Everything is in picoseconds inside; inputs and outputs are nanoseconds. Per-node hardware lives in
one int64 *fabric table* (resources, then counters) that is a shared segment when nodes are
separate processes, so two processes posting to the same memory node contend for real.
"""

from __future__ import annotations

from dataclasses import dataclass
from struct import Struct

import numpy as np
from numba import njit

from shm.atomics import faa, load_acquire
from shm.calendar import ResourceLayout, reserve
from shm.profile_schema import Profile

# Opcodes of the model: the verb a work request carries (the verbs layer maps IBV_WR_* onto
# these). VERB_*, not OP_*: an "op" is a KV operation of a workload (shm.telemetry.OP_READ, ...).
VERB_READ = 0
VERB_WRITE = 1
VERB_CAS = 2
VERB_FAA = 3
VERB_SEND = 4     # RC SEND: acknowledged
VERB_SEND_UD = 5  # UD SEND: no acknowledgement, completes once on the wire
N_VERBS = 6
#: The names the opcodes had before issue 42, kept for code written against them.
OP_READ, OP_WRITE, OP_CAS, OP_FAA, OP_SEND, OP_SEND_UD, N_OPS = (
    VERB_READ, VERB_WRITE, VERB_CAS, VERB_FAA, VERB_SEND, VERB_SEND_UD, N_VERBS)

REGION_HOST = 0
REGION_DEVICE = 1  # NIC device memory: no PCIe trip at the responder

# A batch of work requests as :func:`model_post_rows` reads it: one int64 row per work request.
# Declared once, here: shm/verbs.py and shm/coro.py fill rows, shm/deferred.py lands READs from
# them, shm/sim/trace.py reads them.
WR_OP, WR_LEN, WR_OFF, WR_REGION, WR_FLAGS = range(5)   # the request: model opcode, bytes, offset,
#                                                         region, FLAG_* (deferred READs: their state)
WR_OUT = 5                 # the model's outputs start here, OUT_* columns of ``out`` (model_post)
OUT_EFFECT, OUT_DONE, OUT_OTHER = range(3)   # effect, completion, the landing window's other end (ns)
WR_MODEL_COLS = WR_OUT + 3                   # what the model reads and writes
WR_LOFF = WR_MODEL_COLS    # the poster's own column: where a READ lands locally (deferred READs)
WR_COLS = WR_LOFF + 1      # a post's rows
# One call fills a row, its values in column order: ``pack_wr(rows, WR_BYTES * i, op, len, ...)``
WR_BYTES = 8 * WR_COLS
pack_wr = Struct(f"<{WR_COLS}q").pack_into
# A raw post's rows (``QP.post_send``, shm/verbs.py) carry four more columns, what decides at post
# whether its READs may be deferred (``shm.deferred.raw_one_line_reads``, one compiled pass instead
# of a test of each work request in Python): the remote and the local global address, rkey, lkey
WR_RADDR, WR_LADDR, WR_RKEY, WR_LKEY = range(WR_COLS, WR_COLS + 4)
RAW_WR_COLS = WR_COLS + 4
RAW_WR_BYTES = 8 * RAW_WR_COLS
pack_raw_wr = Struct(f"<{RAW_WR_COLS}q").pack_into

# Indices into the parameter vector (all times in ps; rates in fs per byte).
P_ONE_WAY = 0
P_LINK_FS_PER_B = 1
P_HEADER_B = 2
P_MTU_B = 3
P_PCIE_LAT = 4
P_PCIE_FS_PER_B = 5
P_PCIE_B_PER_WR = 6
P_PCIE_RESP_B_PER_WR = 7
P_MMIO = 8
P_DB_LOCK = 9
P_DB_PER_SHARER = 10
P_WQE_CAP = 11
P_WQE_MISS_B = 12
P_WQE_MISS_PS = 13
P_ATOMIC_UNIT = 14
P_ATOMIC_SLOT = 15
P_DEVMEM = 16
P_MAX_INLINE = 17
P_PCIE_PAYLOAD_FS_PER_B = 18
P_REQ_COST = 19             # N_VERBS entries
P_RESP_COST = P_REQ_COST + N_VERBS
P_QP_LOCK = P_RESP_COST + N_VERBS
P_ATOMIC_HOLDS_UNIT = P_QP_LOCK + 1
# Adversarial timing (the profile's optional [chaos] table, docs/checking.md): the stream's seed, the
# share of chances that draw a delay (out of 2**32), and the largest delay of each kind (ps). All
# zero without the table: no draw is made and no time moves.
P_CHAOS_SEED = P_ATOMIC_HOLDS_UNIT + 1
P_CHAOS_SHARE = P_CHAOS_SEED + 1
P_CHAOS_EFFECT = P_CHAOS_SHARE + 1
P_CHAOS_DONE = P_CHAOS_EFFECT + 1
P_CHAOS_LINE = P_CHAOS_DONE + 1
# a rare, long stall on a request's way (a heavier tail than effect's uniform delays): its largest
# delay (ps) and its own share (out of 2**32)
P_CHAOS_STALL = P_CHAOS_LINE + 1
P_CHAOS_STALL_SHARE = P_CHAOS_STALL + 1
# 1: this process alone books the fabric table (a co-located rack: Fabric.create(private=True)), so
# the calendars book with plain loads and stores (shm/calendar.py: the same values, no locked ops)
P_PRIVATE = P_CHAOS_STALL_SHARE + 1
# Persistent memory (the profile's optional [nvm] table, docs/nvm.md), used only for nodes whose
# descriptor has NVM calendars (D_NVM_RD >= 0): the media's extra load latency over DRAM (ps), its
# access granularity (B, the XPLine) and the time one DIMM takes to read or write one byte (fs/B).
# All zero without the table: no node can be NVM then (Fabric.create refuses it).
P_NVM_EXTRA = P_PRIVATE + 1
P_NVM_XPLINE = P_NVM_EXTRA + 1
P_NVM_RD_FS_PER_B = P_NVM_XPLINE + 1
P_NVM_WR_FS_PER_B = P_NVM_RD_FS_PER_B + 1
# 1: the responder runs one QP's atomics in RC order, each only once the QP's earlier requests
# have taken effect (nic.atomics_in_qp_order)
P_ATOMIC_QP_ORDER = P_NVM_WR_FS_PER_B + 1
N_PARAMS = P_ATOMIC_QP_ORDER + 1

# A node descriptor: offsets of its resources in the fabric table.
D_TX = 0
D_RX = 1
D_REQ = 2
D_RESP = 3
D_PCIE = 4
D_ATOMIC = 5
D_SLOT0 = 6       # offset of the first atomic slot resource
D_SLOT_STRIDE = 7
D_N_SLOTS = 8
D_STATE = 9       # offset of the node's counters
D_DB0 = 10
D_DB_STRIDE = 11
D_N_DB = 12
D_DMA = 13        # the DMA engine, device -> host (writes)
D_DMA_RD = 14     # the DMA engine, host -> device (reads): PCIe is full duplex
D_NVM_RD = 15     # persistent memory's media reads, one server per DIMM (-1: the node's memory is DRAM)
D_NVM_WR = 16     # persistent memory's media writes, one server per DIMM (-1: DRAM)
N_DESC = 17

# Node counters at desc[D_STATE]: outstanding WRs (WQE cache), doorbells handed out, then per
# doorbell the threads that post through it, in SHARER_UNITs: a thread posting through k doorbells
# counts 1/k on each (it spins on one lock at a time), so the count is the expected contenders.
S_OUTSTANDING = 0
S_NEXT_DB = 1
S_CHAOS_DELAYS = 2   # chaos (the [chaos] table): delays drawn by this node's posts, and their sum (ps)
S_CHAOS_PS = 3
S_DB_USERS = 4
SHARER_UNIT = 2520   # divisible by 1..10: a thread's share of up to 10 doorbells is exact

# Per-QP private state (a QP lives in one process): when its requester unit is next free,
# the slot of the oldest outstanding READ/atomic, when its last work request completed, whether
# more than one thread posts through it (set by the verbs layer) and when its lock is next free,
# the effect of its last WRITE/SEND, the latest effect of any of its work requests, when its last
# READ/atomic completed (what a fence waits for), the draws of the chaos stream made for it and the
# QP's salt in that stream (its node and number: QPs draw different delays), then max_rd_atomic
# completion times.
Q_BUSY = 0
Q_RD_POS = 1
Q_DONE = 2
Q_SHARED = 3
Q_LOCK = 4
Q_PLACED = 5
Q_EFFECT = 6
Q_RD_DONE = 7
Q_CHAOS_N = 8
Q_SALT = 9
Q_RD_RING = 10

# Stage times of one work request, in ps, as model_post computes them (the ``stages`` argument,
# for traces only: shm/sim/trace.py). In walking order: the post reaches the NIC model
# (CPU built the WQEs), the QP lock is held, the doorbell is rung (the CPU is free), the WQE is
# fetched over PCIe, the requester unit starts and ends (the start also waits for the QP's order,
# a fence or max_rd_atomic), the payload is read over PCIe (WRITE/SEND), the request has crossed
# the links to the responder, the responder unit is done, the remote work is done (READ: the
# PCIe read of memory; atomics: the atomic unit and the address slot; WRITE: = the responder
# unit, the ack leaves then), the effect lands, the response has crossed back, the CQE is written
# (never before the effect), and completion (in posting order).
ST_POSTED = 0
ST_LOCKS = 1
ST_RUNG = 2
ST_FETCHED = 3
ST_REQ_START = 4
ST_REQ_DONE = 5
ST_PAYLOAD = 6
ST_ARRIVED = 7
ST_RESP_DONE = 8
ST_REMOTE_DONE = 9
ST_EFFECT = 10
ST_BACK = 11
ST_CQE = 12
ST_DONE = 13
N_STAGES = 14

# Per-WR flags (the ``flags`` argument of model_post)
FLAG_INLINE = 1   # payload in the WQE: no payload DMA read
FLAG_FENCE = 2    # IBV_SEND_FENCE: wait for the QP's earlier READs and atomics to complete

#: Buckets of the per-node link, processing-unit and PCIe calendars (64 ns each; was 4096, a
#: 262 us span that 6 x 31 x 32 coroutines' READ backlog outran: the memory node's link then
#: carried 20x its capacity, fixed 2026-11-25, tests/test_rolex_load.py).
NODE_RING = 65536
#: Buckets of each per-address atomic slot calendar (1024 ns each: the same 4.2 ms span as
#: NODE_RING). Was 64 (a 64 us span) until 2026-11-28: a hot address's CAS queue (768 CASes
#: queued at ~370 ns in SMART fig5/fig7, ROLEX's group locks under 6 x 31 x 32 coroutines) outran it
#: and the slot served requests for free. A slot queues at most every outstanding atomic of the
#: rack behind one address (5,952 x 370 ns = 2.2 ms in the largest shipped rack), and its stamps
#: spread no wider than the NIC rings' backlogs, which NODE_RING covers.
SLOT_RING = 4096

_FS = 1000  # fs per ps
_PS = 1000  # ps per ns


def _fs_per_byte(gbps: float) -> int:
    return int(round(8_000_000.0 / gbps))  # 8 bits / (gbps * 1e9 b/s) in fs


def pack_params(p: Profile) -> np.ndarray:
    """The profile as the flat int64 vector the jitted model reads."""
    prm = np.zeros(N_PARAMS, dtype=np.int64)
    prm[P_ONE_WAY] = p.link.one_way_ns * _PS
    prm[P_LINK_FS_PER_B] = _fs_per_byte(p.link.gbps)
    prm[P_HEADER_B] = p.link.header_bytes
    prm[P_MTU_B] = p.link.mtu_bytes
    prm[P_PCIE_LAT] = p.pcie.latency_ns * _PS
    prm[P_PCIE_FS_PER_B] = _fs_per_byte(p.pcie.gbps)
    prm[P_PCIE_PAYLOAD_FS_PER_B] = _fs_per_byte(p.pcie.payload_gbps)
    prm[P_PCIE_B_PER_WR] = p.pcie.bytes_per_wr
    prm[P_PCIE_RESP_B_PER_WR] = p.pcie.resp_bytes_per_wr
    prm[P_MMIO] = p.pcie.mmio_ns * _PS
    prm[P_DB_LOCK] = p.doorbell.lock_ns * _PS
    prm[P_DB_PER_SHARER] = p.doorbell.lock_per_sharer_ns * _PS
    prm[P_WQE_CAP] = p.wqe_cache.capacity
    prm[P_WQE_MISS_B] = p.wqe_cache.miss_bytes
    prm[P_WQE_MISS_PS] = p.wqe_cache.miss_ns * _PS
    prm[P_ATOMIC_UNIT] = p.nic.atomic_unit_ns * _PS
    prm[P_ATOMIC_SLOT] = p.nic.atomic_slot_ns * _PS
    prm[P_DEVMEM] = p.nic.device_memory_ns * _PS
    prm[P_QP_LOCK] = p.doorbell.qp_lock_ns * _PS
    prm[P_ATOMIC_HOLDS_UNIT] = 1 if p.nic.atomic_holds_unit else 0
    prm[P_ATOMIC_QP_ORDER] = 1 if p.nic.atomics_in_qp_order else 0
    prm[P_MAX_INLINE] = p.qp.max_inline
    c = p.chaos
    if c is not None:
        prm[P_CHAOS_SEED] = c.seed
        prm[P_CHAOS_SHARE] = chaos_share_units(c.share)
        prm[P_CHAOS_EFFECT] = c.effect_ns * _PS
        prm[P_CHAOS_DONE] = c.completion_ns * _PS
        prm[P_CHAOS_LINE] = c.line_gap_ns * _PS
        prm[P_CHAOS_STALL] = c.stall_ns * _PS if c.stall_share > 0 else 0
        prm[P_CHAOS_STALL_SHARE] = chaos_share_units(c.stall_share)
    m = p.nvm
    if m is not None:
        prm[P_NVM_EXTRA] = (m.read_ns - m.dram_read_ns) * _PS
        prm[P_NVM_XPLINE] = m.xpline_bytes
        prm[P_NVM_RD_FS_PER_B] = _fs_per_byte(m.read_gbps)
        prm[P_NVM_WR_FS_PER_B] = _fs_per_byte(m.write_gbps)
    n = p.nic
    req = (n.req_read_ns, n.req_write_ns, n.req_atomic_ns, n.req_atomic_ns, n.req_send_ns, n.req_send_ns)
    resp = (n.resp_read_ns, n.resp_write_ns, n.resp_atomic_ns, n.resp_atomic_ns, n.resp_recv_ns, n.resp_recv_ns)
    for op in range(N_VERBS):
        prm[P_REQ_COST + op] = req[op] * _PS
        prm[P_RESP_COST + op] = resp[op] * _PS
    return prm


@dataclass(frozen=True)
class FabricLayout:
    """Where every node's NIC resources and counters live in the fabric table (plain data)."""

    nodes: tuple[str, ...]
    resources: ResourceLayout
    descriptors: np.ndarray  # (n_nodes, N_DESC) int64
    words: int

    @classmethod
    def build(cls, profile: Profile, nodes, *, doorbells_per_node: int = 512,
              nic_of: dict | None = None, nvm=(), same_server=()) -> "FabricLayout":
        """``nic_of``: node index -> index of the node whose NIC it shares (a DPU or DPA on its
        host's card): that node's link, requester and responder units and atomic pipeline and
        slots are the host's calendars; its PCIe (the card's internal path), DMA engine, doorbells
        and counters stay its own. ``same_server``: indices of ``nic_of`` nodes on their host's
        server itself (a memory node beside a compute node): their PCIe is the host's
        too. ``nvm``: indices of the nodes whose host memory is persistent
        memory (the profile's [nvm] table): they get media read and write calendars, added after
        every other resource so that a rack without NVM has exactly the layout it always had."""
        nodes = tuple(nodes)
        if len(set(nodes)) != len(nodes):
            raise ValueError(f"node names must be unique, got {nodes}")
        lay = ResourceLayout()
        desc = np.zeros((len(nodes), N_DESC), dtype=np.int64)
        ns = 1000  # one ns in ps
        for i, name in enumerate(nodes):
            d = desc[i]
            # Bucket widths: small enough to resolve the resource's service time, large enough
            # that a saturated resource's backlog spans few buckets. Ring spans: longer than any
            # backlog a run builds (shm/calendar.py: past it the calendar aliases and serves
            # requests for free). The path of every verb gets NODE_RING buckets of 64 ns (4.2 ms:
            # 6 x 31 threads x 32 coroutines of ~3 KiB READs queue 1.6 ms on one 100 Gb/s link,
            # and the CASes queued behind them on their QPs arrive spread over as long); the
            # atomic pipeline the same span in 256 ns buckets, the per-address slots in 1024 ns
            # buckets (SLOT_RING). Only pages a booking touches become resident (a new segment is
            # zero and initialise writes only the headers): 1,024 slots x 4.2 ms is 34 MB of
            # address space per node, most of it never touched by a run.
            d[D_TX] = lay.add(f"{name}.tx", 1, 64 * ns, NODE_RING)
            d[D_RX] = lay.add(f"{name}.rx", 1, 64 * ns, NODE_RING)
            d[D_REQ] = lay.add(f"{name}.req_pu", profile.nic.requester_units, 64 * ns, NODE_RING)
            d[D_RESP] = lay.add(f"{name}.resp_pu", profile.nic.responder_units, 64 * ns, NODE_RING)
            d[D_PCIE] = lay.add(f"{name}.pcie", 1, 64 * ns, NODE_RING)
            d[D_ATOMIC] = lay.add(f"{name}.atomic", profile.nic.atomic_units, 256 * ns, NODE_RING // 4)
            d[D_DMA] = lay.add(f"{name}.dma", 1, 256 * ns, 1024)
            d[D_DMA_RD] = lay.add(f"{name}.dma_rd", 1, 256 * ns, 1024)
            d[D_SLOT0], d[D_SLOT_STRIDE] = lay.add_array(f"{name}.slot", profile.nic.atomic_slots, 1, 1024 * ns,
                                                          SLOT_RING)
            d[D_N_SLOTS] = profile.nic.atomic_slots
            d[D_DB0], d[D_DB_STRIDE] = lay.add_array(f"{name}.db", doorbells_per_node, 1, 1024 * ns, 256)
            d[D_N_DB] = doorbells_per_node
        desc[:, D_NVM_RD] = -1
        desc[:, D_NVM_WR] = -1
        for i in sorted(nvm):
            if profile.nvm is None:
                raise ValueError(f"node {nodes[i]!r} has persistent memory but profile {profile.name!r} has no "
                                 f"[nvm] table")
            # one server per DIMM (an XPLine goes to one DIMM; interleaving spreads them), 64 ns
            # buckets over NODE_RING: a saturated DIMM set's backlog is bounded by the NIC's
            desc[i, D_NVM_RD] = lay.add(f"{nodes[i]}.nvm_rd", profile.nvm.dimms, 64 * ns, NODE_RING)
            desc[i, D_NVM_WR] = lay.add(f"{nodes[i]}.nvm_wr", profile.nvm.dimms, 64 * ns, NODE_RING)
        for i, host in (nic_of or {}).items():
            for k in (D_TX, D_RX, D_REQ, D_RESP, D_ATOMIC, D_SLOT0, D_SLOT_STRIDE, D_N_SLOTS):
                desc[i, k] = desc[host, k]
            if i in same_server:
                desc[i, D_PCIE] = desc[host, D_PCIE]
        state_words = S_DB_USERS + doorbells_per_node
        for i in range(len(nodes)):
            desc[i, D_STATE] = lay.words + i * state_words
        words = lay.words + len(nodes) * state_words
        desc.setflags(write=False)
        return cls(nodes, lay, desc, words)

    def initialise(self, tbl: np.ndarray) -> None:
        """Write the resource headers into ``tbl``, which must be zero (a new segment is): zeroing
        it here would make every bucket page of every ring resident, hundreds of MB per rack."""
        self.resources.initialise(tbl)

    def index(self, node: str) -> int:
        try:
            return self.nodes.index(node)
        except ValueError:
            raise KeyError(f"unknown node {node!r}; the fabric has {list(self.nodes)}") from None


@njit(cache=True)
def _ceil_ns(ps):
    return (ps + 999) // 1000


@njit(cache=True)
def _in_posting_order(qp, t):
    """A send queue completes in posting order: a WR completes no earlier than the QP's previous
    one (a CAS queued behind a hot address holds back every later WR of its QP; with QPs per
    thread, the thread's other coroutines). Returns the completion time and records it."""
    if qp[Q_DONE] > t:
        t = qp[Q_DONE]
    qp[Q_DONE] = t
    return t


@njit(cache=True)
def _in_effect_order(qp, op, eff):
    """RC placement order: a WRITE/SEND lands no earlier than the QP's previous WRITE/SEND, a
    READ/atomic no earlier than anything posted before it on the QP (so it sees earlier WRITEs).
    Returns the effect time and records it."""
    if op == VERB_WRITE or op == VERB_SEND:
        if qp[Q_PLACED] > eff:
            eff = qp[Q_PLACED]
        qp[Q_PLACED] = eff
    elif qp[Q_EFFECT] > eff:
        eff = qp[Q_EFFECT]
    if eff > qp[Q_EFFECT]:
        qp[Q_EFFECT] = eff
    return eff


CHAOS_SHARE_ONE = 1 << 32    # P_CHAOS_SHARE's unit: a share of 1.0
_MASK32 = (1 << 32) - 1


@njit(cache=True)
def mix64(z):
    """splitmix64's finaliser: a uint64 whose bits all depend on every bit of ``z``."""
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


@njit(cache=True)
def chaos_draw(seed, salt, n, share, max_ps):
    """Draw ``n`` of the stream ``(seed, salt)``: 0, or with probability ``share / 2**32`` a delay
    uniform in ``0 .. max_ps``. Counter-based (a hash of the three), so a draw depends on nothing
    but its place in its QP's stream: a run is the same for the same seed, and turning one kind of
    delay on leaves the draws of another QP unchanged."""
    x = mix64(np.uint64(seed) ^ mix64(np.uint64(salt) + np.uint64(0x9E3779B97F4A7C15) * np.uint64(n + 1)))
    if np.int64(x & np.uint64(_MASK32)) >= share:
        return 0
    return np.int64((x >> np.uint64(32)) % np.uint64(max_ps + 1))


_M64 = (1 << 64) - 1


def mix64_py(z: int) -> int:
    """:func:`mix64` on a Python int (splitmix64's finaliser, wrapping at 64 bits): what plain-Python
    code hashes an integer with (``nodes.systems.lib.hashing.mix64`` is this one)."""
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _M64
    return z ^ (z >> 31)


def chaos_draw_py(seed: int, salt: int, n: int, share: int, max_ps: int) -> int:
    """:func:`chaos_draw` in plain Python: what the Python-side models draw (a coroutine's resumption,
    an atomic's write-back), and the reference tests compare the compiled draw with."""
    x = mix64_py((seed & _M64) ^ mix64_py(((salt & _M64) + 0x9E3779B97F4A7C15 * (n + 1)) & _M64))
    if (x & _MASK32) >= share:
        return 0
    return (x >> 32) % (max_ps + 1)


def chaos_share_units(share: float) -> int:
    """A [chaos] table's ``share`` as the draws compare it: out of :data:`CHAOS_SHARE_ONE`."""
    return int(round(share * CHAOS_SHARE_ONE))


class ChaosStream:
    """A Python-side model's own stream of one kind of chaos delay (a thread's resumptions, a
    process's atomic write-backs): draw ``n`` of ``(seed, salt)`` for the n-th chance, as the
    compiled model draws a QP's (:func:`_chaos_ps`). :meth:`of` is None when the kind is off."""

    __slots__ = ("seed", "salt", "share", "most", "draws")

    def __init__(self, seed: int, salt: int, share: int, most: int):
        self.seed, self.salt, self.share, self.most = seed, salt, share, most
        self.draws = 0

    @classmethod
    def of(cls, profile: Profile, key: str, salt: int) -> "ChaosStream | None":
        """The stream of the [chaos] key ``key`` (``"resume_ns"``, ``"writeback_ns"``) of ``profile``,
        or None when the profile has no [chaos] table or that kind is 0."""
        c = profile.chaos
        most = getattr(c, key) if c is not None else 0
        return cls(c.seed, salt, chaos_share_units(c.share), most) if most > 0 else None

    def draw(self) -> int:
        """The next delay (ns): 0, or up to the kind's maximum."""
        n = self.draws
        self.draws = n + 1
        return chaos_draw_py(self.seed, self.salt, n, self.share, self.most)


#: mixed into the seed of the stall draws, so that they are another stream than effect's (same
#: chance number: turning stalls on leaves every other kind's draws as they were)
STALL_MIX = 0x5157A11


@njit(cache=True)
def _request_chaos_ps(tbl, rq, prm, qp):
    """The adversarial delay of a request on its way to the responder: effect's (uniform up to
    ``P_CHAOS_EFFECT`` on ``share`` of the chances) plus, on ``P_CHAOS_STALL_SHARE`` of them, a stall
    uniform up to ``P_CHAOS_STALL`` drawn at the same chance from another stream. 0 with both off."""
    eff, stall = prm[P_CHAOS_EFFECT], prm[P_CHAOS_STALL]
    if stall <= 0:
        return _chaos_ps(tbl, rq, prm, qp, eff)
    n = qp[Q_CHAOS_N]
    qp[Q_CHAOS_N] = n + 1
    d = chaos_draw(prm[P_CHAOS_SEED], qp[Q_SALT], n, prm[P_CHAOS_SHARE], eff) if eff > 0 else 0
    d += chaos_draw(prm[P_CHAOS_SEED] ^ STALL_MIX, qp[Q_SALT], n, prm[P_CHAOS_STALL_SHARE], stall)
    if d > 0:
        faa(tbl, rq[D_STATE] + S_CHAOS_DELAYS, 1)
        faa(tbl, rq[D_STATE] + S_CHAOS_PS, d)
    return d


@njit(cache=True)
def _chaos_ps(tbl, rq, prm, qp, max_ps):
    """The QP's next adversarial delay of at most ``max_ps`` (0 when the kind is off: no draw),
    counted in the posting node's S_CHAOS_* counters (what a check reports as windows stretched)."""
    if max_ps <= 0:
        return 0
    n = qp[Q_CHAOS_N]
    qp[Q_CHAOS_N] = n + 1
    d = chaos_draw(prm[P_CHAOS_SEED], qp[Q_SALT], n, prm[P_CHAOS_SHARE], max_ps)
    if d > 0:
        faa(tbl, rq[D_STATE] + S_CHAOS_DELAYS, 1)
        faa(tbl, rq[D_STATE] + S_CHAOS_PS, d)
    return d


@njit(cache=True)
def _nvm_media_start(tbl, prm, res, t, addr, nbytes, fs_per_b, pv):
    """Book the XPLines an access of ``nbytes`` at ``addr`` touches on persistent memory's media
    calendar ``res`` (one server per DIMM), not before ``t`` (ps); returns when the media starts
    on it (``t`` unless the DIMMs are busy). A 64 B write moves a whole 256 B XPLine: the write
    amplification of small writes is in the bandwidth, not the latency."""
    xp = prm[P_NVM_XPLINE]
    n = nbytes if nbytes > 0 else 1
    lines = (addr + n - 1) // xp - addr // xp + 1
    cost = (lines * xp * fs_per_b) // _FS
    return reserve(tbl, res, t, cost, pv) - cost


@njit(cache=True)
def _wire_ps(prm, nbytes):
    mtu = prm[P_MTU_B]
    packets = (nbytes + mtu - 1) // mtu
    if packets < 1:
        packets = 1
    return ((nbytes + packets * prm[P_HEADER_B]) * prm[P_LINK_FS_PER_B]) // _FS


@njit(cache=True)
def _pcie_ps(prm, overhead_b, payload_b):
    # Two rates: per-request traffic (WQE fetch, CQE, TLP headers of small DMAs) moves in small TLPs,
    # payload in full-size ones, so a 1 KB READ is not priced as 1 KB of WQE-sized transfers.
    return (overhead_b * prm[P_PCIE_FS_PER_B] + payload_b * prm[P_PCIE_PAYLOAD_FS_PER_B]) // _FS


@njit(cache=True)
def doorbell_users(tbl, rq, db, delta):
    """Add ``delta`` (in SHARER_UNITs) to the sharers of doorbell ``db`` of node ``rq``; return
    the new count in SHARER_UNITs."""
    return faa(tbl, rq[D_STATE] + S_DB_USERS + db, delta) + delta


@njit(cache=True)
def allocate_doorbells(tbl, rq, n):
    """Hand out ``n`` consecutive doorbells of a node (one device context); first index or -1."""
    first = faa(tbl, rq[D_STATE] + S_NEXT_DB, n)
    if first + n > rq[D_N_DB]:
        faa(tbl, rq[D_STATE] + S_NEXT_DB, -n)
        return -1
    return first


@njit(cache=True)
def retire(tbl, rq, n):
    """``n`` work requests of node ``rq`` completed and were polled: they leave the WQE cache."""
    faa(tbl, rq[D_STATE] + S_OUTSTANDING, -n)


@njit(cache=True)
def model_post_rows(tbl, prm, descs, rq, rs, qp, db, t_ns, rows):
    """:func:`model_post` for a batch kept as one int64 row per work request: opcode, length,
    offset, region, flags, then the three outputs (later columns are the caller's). Nodes are
    indices into ``descs``, the fabric's descriptors. Five arrays to pass instead of eleven: numba
    unboxes each array argument of a call from Python, about 0.1 µs apiece, once per post."""
    return model_post(tbl, prm, descs[rq], descs[rs], qp, db, t_ns, rows[:, WR_OP], rows[:, WR_LEN], rows[:, WR_OFF],
                      rows[:, WR_REGION], rows[:, WR_FLAGS], rows[:, WR_OUT:WR_MODEL_COLS], rows[:0, :])


@njit(cache=True)
def retire_and_price(tbl, prm, descs, rq, rs, qp, db, t_ns, rows, done):
    """:func:`retire` of node ``rq``'s ``done`` completions since its last post, then
    :func:`model_post_rows` of its next post: the order a post takes them in (shm/verbs.py
    ``QP.model_post``), in one call from Python instead of two (a call unboxes its arrays again)."""
    if done:
        retire(tbl, descs[rq], done)
    return model_post_rows(tbl, prm, descs, rq, rs, qp, db, t_ns, rows)


@njit(cache=True)
def model_post_rows_staged(tbl, prm, descs, rq, rs, qp, db, t_ns, rows, stages):
    """:func:`model_post_rows` that also writes each work request's stage times (ps, the
    ``ST_*`` columns) into ``stages`` (``len(rows)`` x ``N_STAGES`` int64): what a trace shows
    (``shm/sim/trace.py``). Same prices: the stages are only observed."""
    return model_post(tbl, prm, descs[rq], descs[rs], qp, db, t_ns, rows[:, WR_OP], rows[:, WR_LEN], rows[:, WR_OFF],
                      rows[:, WR_REGION], rows[:, WR_FLAGS], rows[:, WR_OUT:WR_MODEL_COLS], stages)


@njit(cache=True)
def model_post(tbl, prm, rq, rs, qp, db, t_ns, ops, lens, addrs, regions, flags, out, stages):
    """Price one post of ``len(ops)`` work requests from node ``rq`` to node ``rs`` at ``t_ns``.

    ``db`` is the doorbell index on ``rq`` (-1: none, e.g. a loopback engine); ``flags`` per WR
    ``FLAG_INLINE | FLAG_FENCE``. Writes
    ``out[i, 0]`` (when the effect lands on target memory), ``out[i, 1]`` (completion, when
    the CQE is visible) and ``out[i, 2]`` (the other end of the landing window, see below) in ns,
    and returns when the posting CPU is free again (after the doorbell lock), in ns.

    A READ or WRITE of host memory that spans several 64-byte lines does not land at one instant:
    its lines pass the responder's PCIe one after the other, one line per ``64 B /
    pcie.payload_gbps``. A WRITE's effect is its last line placed and ``out[i, 2]`` its first (no
    earlier than the QP's previous WRITE's last line, nor than the responder starting on it); a
    READ's effect is its first line sampled and ``out[i, 2]`` its last (no later than its PCIe
    read ends). Everything else lands at once: ``out[i, 2] == out[i, 0]``.

    ``stages``: empty (``shape[0] == 0``, no trace), or one row per work request that receives
    the times (ps) the walk computes anyway, in the ``ST_*`` columns; writing them changes no
    price.
    """
    n = ops.shape[0]
    t = t_ns * _PS
    pv = prm[P_PRIVATE] != 0
    rec = stages.shape[0] > 0
    shared = qp[Q_SHARED] != 0
    if shared and qp[Q_LOCK] > t:
        t = qp[Q_LOCK]          # another thread holds the QP's lock
    t_locks = t
    if db >= 0:
        users = load_acquire(tbl, rq[D_STATE] + S_DB_USERS + db)
        if users < SHARER_UNIT:
            users = SHARER_UNIT
        hold = prm[P_DB_LOCK] + (prm[P_DB_PER_SHARER] * (users - SHARER_UNIT)) // SHARER_UNIT
        t = reserve(tbl, rq[D_DB0] + db * rq[D_DB_STRIDE], t, hold, pv)
    if shared:
        # every post pays it, as if another core had posted last: a fit over threads taking
        # turns (SMART fig3a), not a per-handoff count
        t += prm[P_QP_LOCK]
        qp[Q_LOCK] = t
    cpu_free = t
    t_nic = t + prm[P_MMIO]
    outstanding = faa(tbl, rq[D_STATE] + S_OUTSTANDING, n) + n
    cap = prm[P_WQE_CAP]
    # Fraction of WQE fetches that miss once outstanding WRs exceed the cache (fluid, so that the
    # model stays deterministic): 0 below capacity, 1 at twice the capacity.
    miss_num = outstanding - cap
    if miss_num < 0:
        miss_num = 0
    if miss_num > cap:
        miss_num = cap
    one_way = prm[P_ONE_WAY]
    pcie_lat = prm[P_PCIE_LAT]
    line_ps = (64 * prm[P_PCIE_PAYLOAD_FS_PER_B]) // _FS
    rd_k = qp.shape[0] - Q_RD_RING
    for i in range(n):
        op = ops[i]
        nbytes = lens[i]
        fetch_b = prm[P_PCIE_B_PER_WR] + (prm[P_WQE_MISS_B] * miss_num) // cap
        t1 = reserve(tbl, rq[D_PCIE], t_nic, _pcie_ps(prm, fetch_b, 0), pv)
        t1 += pcie_lat + (prm[P_WQE_MISS_PS] * miss_num) // cap
        if rec:
            stages[i, ST_POSTED] = t_ns * _PS
            stages[i, ST_LOCKS] = t_locks
            stages[i, ST_RUNG] = cpu_free
            stages[i, ST_FETCHED] = t1
        # in order per QP: the requester handles one QP's WQEs one after the other
        if qp[Q_BUSY] > t1:
            t1 = qp[Q_BUSY]
        if flags[i] & FLAG_FENCE and qp[Q_RD_DONE] > t1:
            t1 = qp[Q_RD_DONE]  # fenced: the QP's earlier READs and atomics have completed
        is_rd = op == VERB_READ or op == VERB_CAS or op == VERB_FAA
        if is_rd and rd_k > 0:
            pos = qp[Q_RD_POS]
            if qp[Q_RD_RING + pos] > t1:
                t1 = qp[Q_RD_RING + pos]
        t2 = reserve(tbl, rq[D_REQ], t1, prm[P_REQ_COST + op], pv)
        qp[Q_BUSY] = t2
        if rec:
            stages[i, ST_REQ_START] = t1
            stages[i, ST_REQ_DONE] = t2
        carries_payload = op == VERB_WRITE or op == VERB_SEND or op == VERB_SEND_UD
        if carries_payload and flags[i] & FLAG_INLINE == 0:
            t2 = reserve(tbl, rq[D_PCIE], t2 + pcie_lat, _pcie_ps(prm, 0, nbytes), pv)
        if rec:
            stages[i, ST_PAYLOAD] = t2
        req_b = nbytes if carries_payload else 0
        if op == VERB_CAS or op == VERB_FAA:
            req_b = 16
        wire = _wire_ps(prm, req_b)
        t3 = reserve(tbl, rq[D_TX], t2, wire, pv)
        if op == VERB_SEND_UD:
            # unreliable datagram: complete once sent; the receiver sees it after the wire
            t4 = reserve(tbl, rs[D_RX], t3 + one_way, wire, pv)
            t5 = reserve(tbl, rs[D_RESP], t4, prm[P_RESP_COST + op], pv)
            eff = t5 + pcie_lat
            t5 = reserve(tbl, rs[D_PCIE], eff, _pcie_ps(prm, prm[P_PCIE_RESP_B_PER_WR], nbytes), pv)
            done = _in_posting_order(qp, t3 + pcie_lat)
            if rec:             # no response: sent at t3, complete once the CQE is written
                stages[i, ST_ARRIVED] = t3
                stages[i, ST_RESP_DONE] = t3
                stages[i, ST_REMOTE_DONE] = t3
                stages[i, ST_EFFECT] = eff
                stages[i, ST_BACK] = t3
                stages[i, ST_CQE] = t3 + pcie_lat
                stages[i, ST_DONE] = done
            out[i, OUT_EFFECT] = _ceil_ns(eff)
            out[i, OUT_DONE] = _ceil_ns(done)
            out[i, OUT_OTHER] = out[i, OUT_EFFECT]
            continue
        # chaos: the request takes longer to reach the responder (a retransmission, a switch
        # queue); the responder still applies one QP's requests in RC order (_in_effect_order)
        t4 = reserve(tbl, rs[D_RX], t3 + one_way + _request_chaos_ps(tbl, rq, prm, qp), wire, pv)
        t5 = reserve(tbl, rs[D_RESP], t4, prm[P_RESP_COST + op], pv)
        if rec:
            stages[i, ST_ARRIVED] = t4
            stages[i, ST_RESP_DONE] = t5
        device = regions[i] == REGION_DEVICE
        mem_lat = prm[P_DEVMEM] if device else pcie_lat
        nvm = not device and rs[D_NVM_RD] >= 0     # persistent memory (docs/nvm.md)
        span = 0                # lines after the first, landing one per line_ps (host memory only)
        if not device and nbytes > 0:
            span = (addrs[i] + nbytes - 1) // 64 - addrs[i] // 64
        gap = 0                 # chaos: more time between two lines (ps)
        if span > 0 and (op == VERB_READ or op == VERB_WRITE):
            gap = _chaos_ps(tbl, rq, prm, qp, prm[P_CHAOS_LINE])
        other = -1
        if op == VERB_CAS or op == VERB_FAA:
            if prm[P_ATOMIC_QP_ORDER] and qp[Q_EFFECT] > t5:
                # One QP's atomics run one after the other: this one waits, in the responder's
                # input queue (holding no unit), until the QP's earlier requests have taken effect,
                # its previous atomic's read-modify-write included. rlib's doorbell-batching bench
                # (ConnectX-4/5 class) gets 2.08 M CAS/s per thread-QP where the same QPs READ at
                # 5.5 M/s, and 48 M/s NIC-wide only from 36 QPs (docs/contention.md).
                t5 = qp[Q_EFFECT]
            t_unit = t5
            t5 = reserve(tbl, rs[D_ATOMIC], t5, prm[P_ATOMIC_UNIT], pv)
            slot = ((addrs[i] >> 3) * 0x9E3779B1) % rs[D_N_SLOTS]
            slot_hold = prm[P_ATOMIC_SLOT] if not device else prm[P_DEVMEM]
            if nvm:
                # the NIC's read-modify-write reads the line from the media: it holds the
                # address that much longer (the write-back goes to the memory controller's queue)
                slot_hold += prm[P_NVM_EXTRA]
            rmw_end = reserve(tbl, rs[D_SLOT0] + slot * rs[D_SLOT_STRIDE], t5, slot_hold, pv)
            t6 = _in_effect_order(qp, op, rmw_end)
            if prm[P_ATOMIC_HOLDS_UNIT]:
                # The processing unit that took the atomic stays with it while it waits for the
                # NIC's internal lock on its address (Kalia et al., ATC'16 §3.4: PUs lock the
                # address, then issue the read-modify-write over PCIe), so atomics queued on a hot
                # address hold units every other request to this NIC needs (FORGE, OSDI'26 §2.2:
                # atomics degrade concurrent READs 4.3x on ConnectX-5). Its own RMW, once issued,
                # holds the address, not the unit: random-address atomics never wait, and reach
                # rlib's 48 M/s on 16 units where units held through a 370 ns RMW would stop at
                # 31.7 (docs/contention.md). At most all k units wait on one address, so an atomic
                # holds its unit for at most the k - 1 RMWs ahead of it; the rest of its wait is in
                # the NIC's input queue. Booked as more of the units' time (the fluid calendar has
                # no "hold until", shm/calendar.py).
                held = rmw_end - slot_hold - t_unit
                most = (tbl[rs[D_RESP]] - 1) * slot_hold
                reserve(tbl, rs[D_RESP], t_unit, held if held < most else most, pv)
            eff = t6
            resp_b = 8
        elif op == VERB_READ:
            t_mem = t5 + mem_lat
            if nvm:
                # the media's load latency over DRAM's, once the DIMMs have room for its XPLines
                t_mem = _nvm_media_start(tbl, prm, rs[D_NVM_RD], t_mem, addrs[i], nbytes, prm[P_NVM_RD_FS_PER_B],
                                         pv) + prm[P_NVM_EXTRA]
            eff = _in_effect_order(qp, op, t_mem)
            if device:
                t6 = eff
            else:
                t6 = reserve(tbl, rs[D_PCIE], eff, _pcie_ps(prm, prm[P_PCIE_RESP_B_PER_WR], nbytes), pv)
                if span > 0:
                    other = eff + span * (line_ps + gap)
                    if other > t6:
                        if gap > 0:
                            t6 = other  # the last line is sampled late; the response waits for it
                        else:
                            other = t6
            resp_b = nbytes
        else:  # WRITE and RC SEND: payload goes to memory, an ack goes back
            if device:
                eff = t5 + mem_lat
            else:
                # chaos: the lines are placed further apart, the last one (the effect) later
                eff = reserve(tbl, rs[D_PCIE], t5, _pcie_ps(prm, prm[P_PCIE_RESP_B_PER_WR], nbytes), pv) + mem_lat \
                    + span * gap
                if nvm and op == VERB_WRITE:
                    # placed in the memory controller's write queue at DRAM speed (ADR), unless
                    # the DIMMs' write bandwidth is used up: then the queue is full and the
                    # write waits for room (its XPLines' media time, amplified for small writes)
                    eff = _nvm_media_start(tbl, prm, rs[D_NVM_WR], eff, addrs[i], nbytes, prm[P_NVM_WR_FS_PER_B], pv)
            placed_before = qp[Q_PLACED]
            eff = _in_effect_order(qp, op, eff)
            if op == VERB_WRITE and span > 0:
                other = eff - span * (line_ps + gap)
                if other < t5 + mem_lat:
                    other = t5 + mem_lat
                if other < placed_before:
                    other = placed_before
                if other > eff:
                    other = eff
            t6 = t5
            resp_b = 0
        wire_back = _wire_ps(prm, resp_b)
        t7 = reserve(tbl, rs[D_TX], t6, wire_back, pv)
        # chaos: the response takes longer to come back (the completion never precedes the
        # effect and keeps posting order: below)
        t8 = reserve(tbl, rq[D_RX], t7 + one_way + _chaos_ps(tbl, rq, prm, qp, prm[P_CHAOS_DONE]), wire_back, pv)
        t9 = reserve(tbl, rq[D_PCIE], t8, _pcie_ps(prm, 0, resp_b), pv) + pcie_lat
        if t9 < eff:
            t9 = eff            # an ack never announces a WRITE that has not landed
        if rec:
            stages[i, ST_REMOTE_DONE] = t6
            stages[i, ST_EFFECT] = eff
            stages[i, ST_BACK] = t8
            stages[i, ST_CQE] = t9
        t9 = _in_posting_order(qp, t9)
        if rec:
            stages[i, ST_DONE] = t9
        if is_rd:
            qp[Q_RD_DONE] = t9
            if rd_k > 0:
                pos = qp[Q_RD_POS]
                qp[Q_RD_RING + pos] = t9
                qp[Q_RD_POS] = (pos + 1) % rd_k
        out[i, OUT_EFFECT] = _ceil_ns(eff)
        out[i, OUT_DONE] = _ceil_ns(t9)
        out[i, OUT_OTHER] = _ceil_ns(other) if other >= 0 else out[i, OUT_EFFECT]
    return _ceil_ns(cpu_free)


@njit(cache=True)
def model_dma(tbl, prm_dma_lat_ps, prm_dma_fs_per_b, node, t_ns, nbytes, res=D_DMA):
    """A DPU/DPA DMA access to its host's memory: returns (effect_ns, done_ns). ``res`` is the
    descriptor slot of the direction's calendar (``D_DMA`` writes, ``D_DMA_RD`` reads)."""
    t = t_ns * _PS
    done = reserve(tbl, node[res], t, (nbytes * prm_dma_fs_per_b) // _FS) + prm_dma_lat_ps
    return _ceil_ns(done - prm_dma_lat_ps // 2), _ceil_ns(done)


def new_qp_state(max_rd_atomic: int) -> np.ndarray:
    return np.zeros(Q_RD_RING + max_rd_atomic, dtype=np.int64)
