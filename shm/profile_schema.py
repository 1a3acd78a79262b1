"""The hardware-profile schema: every number the timing model uses, with its unit and legal range.

A profile is a TOML file with one table per section below (``[sync]``, ``[link]``, ``[nic]``, ...).
The schema is plain data (frozen dataclasses whose fields carry ``metadata``) so that the loader can
validate any file generically: an unknown key, a missing key, a wrong type or a value outside its
range is refused with a message naming the key and the file. Keeping the schema apart from the
loader lets the timing model import only the records it reads.

Field metadata: ``unit`` (for docs and error messages), ``min``/``max`` (inclusive bounds) and
``doc`` (one line on what the number means in the model).

Besides the sections, a profile declares which of its knobs have no published source: the
``[assumptions]`` table, one array per section (``nic = ["atomic_slots", "device_memory_ns"]``).
A knob is an *assumption* when no published figure stands behind its value, or when it was fitted
only to make one figure come out (a remainder of a latency budget, a least-squares fit of one
plot, a value borrowed from another NIC generation); a knob derived from a published figure through
a documented mechanism is *sourced*. The list is data, not a comment, so that tools can act on it:
``dmrack profiles --assumptions`` lists it and ``dmrack sensitivity`` varies exactly those knobs.
"""

from __future__ import annotations

from dataclasses import dataclass, field


def knob(unit: str, doc: str, *, min=None, max=None):
    """A schema field: no default, so a profile must give every value (a silent default hides
    a missing calibration)."""
    return field(metadata={"unit": unit, "doc": doc, "min": min, "max": max})


@dataclass(frozen=True)
class SyncProfile:
    window_ns: int = knob("ns", "lax-synchronisation window W between processes", min=1, max=1_000_000)
    spin_us: float = knob("µs", "real time a node process blocked by another's clock keeps checking (yielding "
                          "its core between checks) before it sleeps; emulation speed only, never the modelled "
                          "numbers", min=0, max=1_000_000)


@dataclass(frozen=True)
class LinkProfile:
    gbps: float = knob("Gbit/s", "link bandwidth per direction", min=0.001, max=10_000)
    one_way_ns: int = knob("ns", "wire + switch latency of one hop, one way", min=0, max=1_000_000)
    header_bytes: int = knob("B", "per-packet overhead on the wire (LRH/BTH/RETH/ICRC...)", min=0, max=4096)
    mtu_bytes: int = knob("B", "path MTU; larger messages are split into packets", min=256, max=65536)


@dataclass(frozen=True)
class NicProfile:
    requester_units: int = knob("units", "parallel processing units that handle posted work requests", min=1, max=4096)
    responder_units: int = knob("units", "parallel processing units that serve incoming requests", min=1, max=4096)
    req_read_ns: int = knob("ns", "requester unit time per READ", min=0, max=1_000_000)
    req_write_ns: int = knob("ns", "requester unit time per WRITE", min=0, max=1_000_000)
    req_atomic_ns: int = knob("ns", "requester unit time per CAS/FAA", min=0, max=1_000_000)
    req_send_ns: int = knob("ns", "requester unit time per SEND", min=0, max=1_000_000)
    resp_read_ns: int = knob("ns", "responder unit time per READ", min=0, max=1_000_000)
    resp_write_ns: int = knob("ns", "responder unit time per WRITE", min=0, max=1_000_000)
    resp_atomic_ns: int = knob("ns", "responder unit time per CAS/FAA", min=0, max=1_000_000)
    resp_recv_ns: int = knob("ns", "responder unit time per incoming SEND (RECV WQE fetch, scatter)", min=0, max=1_000_000)
    atomic_units: int = knob("units", "NIC-wide atomic pipelines (bound the NIC's atomic rate)", min=1, max=4096)
    atomic_unit_ns: int = knob("ns", "time one atomic occupies a pipeline", min=0, max=1_000_000)
    atomic_slots: int = knob("slots", "per-address atomic serialisation slots (addresses hash into them)", min=1, max=1 << 20)
    atomic_slot_ns: int = knob("ns", "time one atomic holds its address slot (PCIe read-modify-write)", min=0, max=1_000_000)
    device_memory_bytes: int = knob("B", "on-chip NIC device memory (lock tables)", min=0, max=1 << 30)
    device_memory_ns: int = knob("ns", "access time of NIC device memory (replaces the PCIe trip)", min=0, max=1_000_000)
    ordered_multiline_writes: bool = knob("bool", "multi-line WRITEs land in ascending address order")
    atomic_write_race: bool = knob("bool", "a WRITE landing on a word inside a remote atomic's read-modify-write "
                                   "(atomic_slot_ns) is lost, as on real NICs (opt-in; false: atomics are "
                                   "atomic against everything)")
    atomic_holds_unit: bool = knob("bool", "an atomic keeps its responder unit while it waits for its address "
                                   "slot (up to responder_units - 1 read-modify-writes), so atomics queued on "
                                   "a hot address slow every request to the NIC")
    atomics_in_qp_order: bool = knob("bool", "the responder runs one QP's atomics one after the other: each "
                                     "waits, holding no unit, until the QP's earlier requests (its "
                                     "previous atomic's read-modify-write included) have taken effect")


@dataclass(frozen=True)
class PcieProfile:
    latency_ns: int = knob("ns", "one PCIe transaction between NIC and host memory, one way", min=0, max=1_000_000)
    gbps: float = knob("Gbit/s", "effective PCIe bandwidth of per-request traffic (WQE fetch, CQE, TLP headers)", min=0.001, max=10_000)
    payload_gbps: float = knob("Gbit/s", "PCIe bandwidth of payload (READ data, WRITE/SEND payload) in full-size TLPs", min=0.001, max=10_000)
    bytes_per_wr: int = knob("B", "host-memory traffic per work request besides payload (WQE fetch, CQE)", min=0, max=4096)
    resp_bytes_per_wr: int = knob("B", "responder host-memory traffic per request besides payload", min=0, max=4096)
    mmio_ns: int = knob("ns", "doorbell MMIO write reaching the NIC", min=0, max=1_000_000)


@dataclass(frozen=True)
class DoorbellProfile:
    low_latency: int = knob("doorbells", "low-latency doorbells per context (one QP each)", min=0, max=4096)
    medium_latency: int = knob("doorbells", "medium-latency doorbells per context (QPs share them round-robin)", min=1, max=4096)
    lock_ns: int = knob("ns", "doorbell spinlock hold time with one user", min=0, max=1_000_000)
    lock_per_sharer_ns: int = knob("ns", "extra hold time per additional thread sharing the doorbell", min=0, max=1_000_000)
    qp_lock_ns: int = knob("ns", "extra time per post on a QP that more than one thread posts through (its lock, "
                           "WQE ring and CQ move between cores); posts on that QP serialize", min=0, max=1_000_000)


@dataclass(frozen=True)
class WqeCacheProfile:
    capacity: int = knob("WRs", "outstanding work requests the NIC's WQE cache holds", min=1, max=1 << 24)
    miss_bytes: int = knob("B", "extra PCIe read per work request once the cache thrashes", min=0, max=4096)
    miss_ns: int = knob("ns", "extra latency of a WQE-cache miss", min=0, max=1_000_000)


@dataclass(frozen=True)
class QpProfile:
    max_send_wr: int = knob("WRs", "send-queue depth: posting past it fails (ENOMEM)", min=1, max=1 << 20)
    max_recv_wr: int = knob("WRs", "receive-queue depth", min=1, max=1 << 20)
    max_rd_atomic: int = knob("WRs", "outstanding READ/atomic per QP; more wait for earlier ones", min=1, max=1024)
    max_inline: int = knob("B", "largest inline payload (no payload DMA read)", min=0, max=4096)


@dataclass(frozen=True)
class CpuProfile:
    ghz: float = knob("GHz", "core clock (converts cycle counts such as back-off to ns)", min=0.1, max=10)
    post_ns: int = knob("ns", "CPU time of ibv_post_send, per call", min=0, max=1_000_000)
    wqe_ns: int = knob("ns", "CPU time to build one WQE", min=0, max=1_000_000)
    poll_ns: int = knob("ns", "CPU time of one ibv_poll_cq call", min=0, max=1_000_000)
    local_cas_ns: int = knob("ns", "one CAS on local memory, contended by other cores", min=0, max=1_000_000)
    local_read_ns_per_line: int = knob("ns", "memcpy of one 64-byte line from local DRAM", min=0, max=1_000_000)
    rpc_handler_ns: int = knob("ns", "CPU time to receive, dispatch and answer one two-sided RPC", min=0, max=1_000_000)


@dataclass(frozen=True)
class SoftwareProfile:
    """CPU costs of the systems' software paths on the host CPU (issue 40: each one a profile
    constant with its source, or an assumption marked as such in the profile). Cycle counts are
    converted with ``cpu.ghz``; a cost that does not scale with the clock (a DRAM miss) is in ns.
    The *structure* a cost is multiplied by (a skiplist's levels, a radix walk's depth) is the
    system's code and stays in the system's module; these are the per-step prices."""
    dram_ns: int = knob("ns", "one dependent load that misses every cache (local DRAM): a step of a "
                        "pointer-chasing search (an index cache's skiplist level, a radix-cache level)",
                        min=1, max=100_000)
    coro_switch_cycles: int = knob("cycles", "one user-level coroutine context switch (save and restore "
                                   "registers and stack); a thread running more than one coroutine pays "
                                   "two per completed round trip (to the poller and back)", min=0, max=1_000_000)
    clock_read_cycles: int = knob("cycles", "one read of the core's cycle counter (x86 RDTSC): a coroutine that "
                                  "idles by spinning (SMART's IdleExecution) reads it once per turn", min=0,
                                  max=1_000_000)
    index_cache_search_ns: int = knob("ns", "CPU per descent for a search of a compute node's index cache, "
                                      "flat (Sherman, SMART-ART, Dolphin); 0: priced by the cache's size "
                                      "(nodes/systems/lib/cpu_costs.py: dram_ns per level)", min=0, max=1_000_000)
    op_cycles: int = knob("cycles", "per-operation fixed work of a tree client (argument checks, key "
                          "conversion)", min=0, max=1_000_000)
    line_cycles: int = knob("cycles", "checking and searching one 64-byte line of a node just READ "
                            "(version compare, key compares; the line is in cache after the DMA)",
                            min=0, max=1_000_000)
    learned_lookup_cycles: int = knob("cycles", "ROLEX's learned-cache lookup: binary searches over the "
                                      "models' first keys and fences plus one prediction", min=0, max=1_000_000)
    hash_cycles: int = knob("cycles", "hashing a key, fixed part (RACE)", min=0, max=1_000_000)
    hash_cycles_per_byte: int = knob("cycles", "hashing a key, per key byte (RACE)", min=0, max=1_000_000)
    request_cycles: int = knob("cycles", "a host key-value server's own work per request beside its table "
                               "probe: decode, dispatch, encode the reply (PD3's hash map)", min=0, max=1_000_000)
    server_record_cycles: int = knob("cycles", "a batched memory server's work per record beside its copy: "
                                     "find its header, bounds-check, key map, response header (PD3)",
                                     min=0, max=1_000_000)
    garnet_hit_ns: int = knob("ns", "a Garnet request's process + respond on a cache hit (PD3's Garnet)",
                              min=0, max=1_000_000)
    patch_ns: int = knob("ns", "a DPA-Store patch's fixed host work: take the request, descend the mirror, "
                         "allocate, queue the stitches", min=0, max=100_000_000)
    patch_ns_per_key: int = knob("ns", "a DPA-Store patch's host work per key merged and PLA-segmented "
                                 "(and per pivot re-segmented)", min=0, max=1_000_000)
    alloc_server_ns: int = knob("ns", "a memory node's allocator serving one allocation RPC (find, "
                                "register, answer), beside cpu.rpc_handler_ns", min=0, max=100_000_000)
    epoch_scan_ns_per_line: int = knob("ns", "epoch-based reclamation: checking one 64-byte line of the "
                                       "announcement rows a thread READ to decide whether the epoch may move on",
                                       min=0, max=1_000_000)
    core_stream_gbps: float = knob("Gbit/s", "one host core reading memory forward, line after line, with its "
                                   "stream prefetcher running ahead (a scan, a memcpy's reads): PD3's "
                                   "Loading Zone scans and record copies", min=0.001, max=10_000)


@dataclass(frozen=True)
class DmaProfile:
    latency_ns: int = knob("ns", "DMA from a DPU/DPA to its host's memory, one access", min=0, max=1_000_000)
    gbps: float = knob("Gbit/s", "DMA engine bandwidth, device -> host (DMA writes)", min=0.001, max=10_000)
    read_gbps: float = knob("Gbit/s", "DMA engine bandwidth, host -> device (DMA reads); a calendar of its own, "
                            "so reads and writes overlap", min=0.001, max=10_000)
    max_outstanding: int = knob("DMAs", "DMAs one engine keeps in flight; further posts wait for the oldest "
                                "to complete", min=1, max=1 << 16)


@dataclass(frozen=True)
class DpaProfile:
    """A BlueField-3 Data Path Accelerator (optional: only profiles of a card with a DPA have one).

    DMA from a DPA thread to host memory is not here: it is ``[dma]`` (one engine, one cost)."""
    cores: int = knob("cores", "DPA cores; a core runs one hardware thread at a time", min=1, max=1024)
    threads_per_core: int = knob("threads", "hardware threads per core (switched on memory stalls)", min=1, max=1024)
    usable_threads: int = knob("threads", "hardware threads an application may use (the rest are the firmware's)",
                               min=1, max=1 << 20)
    ghz: float = knob("GHz", "core clock (converts cycle counts to ns)", min=0.1, max=10)
    memory_bytes: int = knob("B", "DPA memory (a region of the card's DDR) that DPA threads load and store",
                             min=64, max=1 << 40)
    memory_ns: int = knob("ns", "one DPA-memory access that misses every cache (one line)", min=0, max=1_000_000)
    line_bytes: int = knob("B", "cache line: the unit of the caches and of a memory access", min=8, max=4096)
    l1_bytes: int = knob("B", "private L1 data cache of each hardware thread", min=0, max=1 << 30)
    l1_ns: int = knob("ns", "L1 hit", min=0, max=1_000_000)
    l2_bytes: int = knob("B", "L2 cache shared by all DPA threads", min=0, max=1 << 34)
    l2_ns: int = knob("ns", "L2 hit (the line then also fills the thread's L1)", min=0, max=1_000_000)
    l3_bytes: int = knob("B", "L3 cache shared by all DPA threads", min=0, max=1 << 34)
    l3_ns: int = knob("ns", "L3 hit (the line then also fills L2 and L1)", min=0, max=1_000_000)
    host_copy_mb_per_s: float = knob("MB/s", "host memory -> DPA memory copies through polling DPA threads "
                                     "(a software path, not the DMA engine)", min=0.001, max=1_000_000)
    packet_cycles: int = knob("cycles", "DPA CPU work of handling one request packet: read its descriptor "
                              "and headers, check it, build and post the reply (DPA UDP services)",
                              min=0, max=1_000_000)
    search_cycles: int = knob("cycles", "DPA-Store: a binary search over a node's 7 first keys", min=0,
                              max=1_000_000)
    model_cycles: int = knob("cycles", "DPA-Store: one learned model's prediction (fixed-point multiply, "
                             "shifts, add, operand loads)", min=0, max=1_000_000)
    scan_cycles_per_key: int = knob("cycles", "DPA-Store: a leaf scan, per key compared", min=0, max=1_000_000)
    buffer_check_cycles: int = knob("cycles", "DPA-Store: checking a leaf's write buffer (16 keys)", min=0,
                                    max=1_000_000)
    write_cycles: int = knob("cycles", "DPA-Store: a buffered write (fill a slot and a counter)", min=0,
                             max=1_000_000)
    probe_cycles: int = knob("cycles", "DPA-Store: one binary-search step over an inner node's keys "
                             "(midpoint, load from a line already read, compare, branch)", min=0, max=1_000_000)


@dataclass(frozen=True)
class DpuProfile:
    """A DPU's Arm cores (optional: only profiles of a card with a DPU have one). The DPU shares the
    card's NIC with its host; its DMA engine to host memory is ``[dma]``."""
    cores: int = knob("cores", "Arm cores of the DPU a rack may give its DPU nodes", min=1, max=1024)
    ghz: float = knob("GHz", "Arm core clock (converts cycle counts to ns)", min=0.1, max=10)
    memory_bytes: int = knob("B", "DPU DRAM on the card: the most a DPU node's memory may be", min=4096, max=1 << 44)
    post_ns: int = knob("ns", "Arm CPU time to post one RDMA or DMA work request (build the WQE, ring the "
                        "doorbell)", min=0, max=1_000_000)
    poll_ns: int = knob("ns", "Arm CPU time of one completion-queue poll", min=0, max=1_000_000)
    record_ns: int = knob("ns", "Arm CPU time per small request record in a batch (read its header, add up "
                          "the response space it needs)", min=0, max=1_000_000)
    dram_ns: int = knob("ns", "Arm core load that misses every cache (DPU DRAM), one access", min=1, max=100_000)
    line_fills: int = knob("lines", "cache-line misses one Arm core keeps in flight (memory-level parallelism)",
                           min=1, max=1024)
    hash_cycles: int = knob("cycles", "Arm cycles per Host View bucket hash (CRC32 + mask)", min=0, max=100_000)
    compare_cycles: int = knob("cycles", "Arm cycles per slot of a scalar bucket search", min=0, max=100_000)
    vector_compare_cycles: int = knob("cycles", "Arm cycles per NEON bucket search (compare + movemask)",
                                      min=0, max=100_000)
    branch_miss_cycles: int = knob("cycles", "Arm branch-mispredict penalty", min=0, max=100_000)
    tlb_entries: int = knob("entries", "Arm core's last-level data TLB entries", min=1, max=1 << 24)
    page_walk_ns: int = knob("ns", "page-table walk after a TLB miss (leaf entry from DRAM)", min=0, max=100_000)
    parse_packet_cycles: int = knob("cycles", "Arm cycles of a DPDK packet parser per packet (its RX burst's "
                                    "share, the mirror's mbuf, the flow check; PD3's parser core)",
                                    min=0, max=1_000_000)
    parse_key_cycles: int = knob("cycles", "Arm cycles of a DPDK packet parser per key parsed (read an op "
                                 "and a key, append them; PD3's parser core)", min=0, max=1_000_000)


@dataclass(frozen=True)
class UdpProfile:
    """The unreliable datagram path for UDP-style services (optional: ``shm/udp.py`` refuses a profile
    without it). A datagram is priced as a UD SEND of its payload plus IPv4 and UDP headers."""
    mtu_bytes: int = knob("B", "largest IP packet of the datagram path (Ethernet: 1500); a datagram's payload "
                          "may be mtu_bytes - 28 (IPv4 20 + UDP 8) at most", min=68, max=65535)
    rx_depth: int = knob("datagrams", "default depth of a receive queue's ring; a datagram arriving at a full "
                         "ring is dropped and counted", min=1, max=1 << 20)


@dataclass(frozen=True)
class CoherenceProfile:
    """Cache coherence of the host CPU's cores (optional: only a profile whose host CPU is known has
    one; :mod:`nodes.devices.coherence` refuses a profile without it). Costs of moving one 64-byte
    line between cores, used where threads contend for shared words (PD3 Fig. 8)."""
    ccds: int = knob("CCDs", "core complex dies (one L3 each) of the host CPU", min=1, max=64)
    cores_per_ccd: int = knob("cores", "cores per CCD", min=1, max=64)
    l1_ns: float = knob("ns", "L1 hit: a load of a line the core holds", min=0, max=1_000)
    intra_ccd_ns: float = knob("ns", "core-to-core transfer of a line within one CCD", min=0, max=100_000)
    cross_ccd_ns: float = knob("ns", "core-to-core transfer of a line between two CCDs", min=0, max=100_000)
    memory_ns: float = knob("ns", "a line no core holds (e.g. just DMA-written by a device), from DRAM",
                            min=0, max=100_000)
    dma_line_ns: float = knob("ns", "a line a device just wrote by DMA, read by a core (injected into an L3)",
                              min=0, max=100_000)
    atomic_ns: float = knob("ns", "a locked read-modify-write's own execution once the line is exclusive",
                            min=0, max=100_000)
    pause_ns: float = knob("ns", "one PAUSE in a spin-wait loop", min=0, max=100_000)
    yield_ns: float = knob("ns", "sched_yield() with no other runnable thread on the core", min=0,
                           max=1_000_000)


@dataclass(frozen=True)
class ChaosProfile:
    """Adversarial timing for checking designs (optional; ``dmrack check --chaos``, docs/checking.md):
    delays that real hardware may add (PCIe and NIC queues, retransmissions, another QP's burst, a
    descheduled thread) and that widen the windows in which a design's races show, drawn from a
    seeded stream so that a run is the same for the same seed. Every delay is added *before* the
    rules of docs/fabric.md ("Ordering rules") are applied, so none of them is ever broken. Not a
    calibration: no published figure stands behind these numbers and no experiment sets them; a
    delay of 0 turns its kind off, and a profile without the section has none."""
    seed: int = knob("", "the seed of the delays' stream (a run is the same for the same seed)", min=0,
                     max=(1 << 62) - 1)
    share: float = knob("", "the fraction of chances that draw a delay (each delay is uniform in 0 .. its maximum)",
                        min=0, max=1)
    effect_ns: int = knob("ns", "at most this much longer on the way to the responder: a work request's effect "
                          "lands later (per-QP order kept)", min=0, max=10_000_000)
    completion_ns: int = knob("ns", "at most this much longer on the way back: a completion is delivered later "
                              "(never before its effect, in posting order)", min=0, max=10_000_000)
    line_gap_ns: int = knob("ns", "at most this much more between two lines of a multi-line READ or WRITE (lines "
                            "in the profile's order)", min=0, max=1_000_000)
    resume_ns: int = knob("ns", "at most this much later a coroutine resumes after its verbs completed (its "
                          "thread was descheduled)", min=0, max=10_000_000)
    writeback_ns: int = knob("ns", "at most this much later an atomic's write-back lands (only with "
                             "nic.atomic_write_race)", min=0, max=10_000_000)
    stall_ns: int = knob("ns", "a rare stall on the way to the responder: at most this much longer (a "
                         "retransmission, a paused link), on top of effect_ns", min=0, max=100_000_000)
    stall_share: float = knob("", "the fraction of requests that stall (0: none)", min=0, max=1)


@dataclass(frozen=True)
class NvmProfile:
    """Persistent memory on memory nodes (optional: a rack's ``[memory] kind = "nvm"`` needs it;
    docs/nvm.md). Intel Optane DC PMem, first generation (the memory FORD and SMART-DTX keep their
    tables and undo logs on), in App Direct mode behind the memory node's NIC. The timing model
    charges a READ or atomic to an NVM node the media's extra load latency over DRAM and books
    every access's 256-byte XPLines on the node's media read and write calendars; the durability
    model (shm/nvm.py) keeps what a power failure (a ``kill`` of the node) would leave."""
    read_ns: int = knob("ns", "random 64 B load latency of the media (an idle DIMM, a line in no cache)",
                        min=1, max=100_000)
    dram_read_ns: int = knob("ns", "the same load from DRAM in the same measurement: the model adds read_ns - "
                             "dram_read_ns to a host-memory access (pcie.latency_ns already holds DRAM's)",
                             min=1, max=100_000)
    xpline_bytes: int = knob("B", "media access granularity: a smaller or unaligned access moves whole XPLines "
                             "(write amplification of small writes)", min=64, max=4096)
    read_gbps: float = knob("Gbit/s", "media read bandwidth of one DIMM", min=0.001, max=10_000)
    write_gbps: float = knob("Gbit/s", "media write bandwidth of one DIMM", min=0.001, max=10_000)
    dimms: int = knob("DIMMs", "DIMMs interleaved behind one memory node's NIC (bandwidths scale with them)",
                      min=1, max=64)
    persist_on_placement: bool = knob("bool", "a WRITE is durable once placed in memory (eADR, or ADR with DDIO "
                                      "off as Intel platforms place it); false: only once a later READ or atomic "
                                      "of its QP has executed (the RDMA read-after-write flush, FORD's), the "
                                      "contract a design may rely on")


#: The table of a profile that lists its unsourced knobs, section by section (see the module docstring).
ASSUMPTIONS = "assumptions"

SECTIONS = {
    "sync": SyncProfile,
    "link": LinkProfile,
    "nic": NicProfile,
    "pcie": PcieProfile,
    "doorbell": DoorbellProfile,
    "wqe_cache": WqeCacheProfile,
    "qp": QpProfile,
    "cpu": CpuProfile,
    "software": SoftwareProfile,
    "dma": DmaProfile,
}

#: Sections a profile may leave out (the attribute of :class:`Profile` is then None). A profile that
#: has one gives every key of it, validated like the required ones.
OPTIONAL_SECTIONS = {
    "dpa": DpaProfile,
    "dpu": DpuProfile,
    "udp": UdpProfile,
    "coherence": CoherenceProfile,
    "chaos": ChaosProfile,
    "nvm": NvmProfile,
}


@dataclass(frozen=True)
class Profile:
    """A whole hardware profile. ``name`` and ``description`` come from the top-level keys."""

    name: str
    description: str
    sync: SyncProfile
    link: LinkProfile
    nic: NicProfile
    pcie: PcieProfile
    doorbell: DoorbellProfile
    wqe_cache: WqeCacheProfile
    qp: QpProfile
    cpu: CpuProfile
    software: SoftwareProfile
    dma: DmaProfile
    dpa: DpaProfile | None = None   # optional: a card with a DPA (bf3)
    dpu: DpuProfile | None = None   # optional: a card with Arm cores (bf3)
    udp: UdpProfile | None = None   # optional: the datagram path (shm/udp.py)
    coherence: CoherenceProfile | None = None   # optional: host core-to-core line transfers (bf3)
    chaos: ChaosProfile | None = None   # optional: adversarial timing for checks (dmrack check --chaos)
    nvm: NvmProfile | None = None   # optional: persistent memory for [memory] kind = "nvm" (docs/nvm.md)
    # the knobs without a published source, dotted ("nic.atomic_slots"), in schema order ([assumptions])
    assumptions: tuple[str, ...] = ()
    source: str = ""  # the file it was read from
