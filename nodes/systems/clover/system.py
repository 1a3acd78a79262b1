"""CloverSystem: options, the rack's roles (metadata server node, data memory nodes), setup, bulk load."""

from __future__ import annotations

from itertools import islice

from nodes.systems.api import Option, System, SystemGaveUp
from nodes.systems.lib.reclaim import epochs_bytes, setup_epochs
from nodes.systems.race.client import SEARCH_CPU_NS, WRITE_CPU_NS

from .client import CloverClient
from .layout import (
    KIND_VALUE, MAX_ITEM_BYTES, MAX_REPLICAS, UNIT, LayoutError, block_units, encode_block, pack_ptr,
)
from .ms import BULK_CHUNK, BULK_HEAD, BULK_REC, start_ms

LAYOUT_FORMAT = 1
#: the paper's replication setting (pDPM §6, 3-way; FlexKV's comparison: 3 memory nodes)
DEFAULT_REPLICAS = 3
#: bytes the bulk load takes per memory node at a time for the blocks it places
BULK_REGION = 4 << 20


def roles(memory_nodes: list, ms_node: int):
    """(the metadata server's node, the memory nodes holding versions): ``ms_node`` indexes the
    memory nodes (negative from the end); the others hold the versions, or, in a rack of one memory
    node, that node does both."""
    n = len(memory_nodes)
    if not -n <= ms_node < n:
        raise ValueError(f"ms_node = {ms_node} names no memory node of {n} (0..{n - 1}, or -{n}..-1)")
    ms = memory_nodes[ms_node]
    data = [m for m in memory_nodes if m != ms] or [ms]
    return ms, data


def replicas_for(options: dict, data_nodes: int) -> int:
    return options["replicas"] or min(DEFAULT_REPLICAS, data_nodes)


class CloverSystem(System):
    name = "clover"
    description = ("Clover (pDPM): out-of-place versions in per-key chains on passive memory nodes, appended with "
                   "one CAS; a metadata server (a memory node's cores) answers address-cache misses, creates keys, "
                   "hands out memory and collects old versions")
    paper = ("Tsai, Shan, Zhang: Disaggregating Persistent Memory and Controlling Them Remotely: An Exploration "
             "of Passive Disaggregated Key-Value Stores (USENIX ATC'20); code WukLab/pDPM clover/")
    roles = ("compute", "memory")
    supports_scan = False
    servers = {"memory": start_ms}
    #: the racks the project builds for it (conformance, dmrack check): a metadata server and three
    #: memory nodes for 3-way replication, as FlexKV's comparison, with 2 cores on each memory node
    #: (only the metadata server's run anything)
    rack_tables = {"memory": {"count": 4, "cores": 2}}
    options = (
        Option("replicas", 0, "copies of every version, on distinct memory nodes (0: 3, the paper's setting, or as "
               "many as the rack has memory nodes besides the metadata server)", minimum=0, maximum=MAX_REPLICAS),
        Option("ms_node", -1, "which memory node is the metadata server (an index into the memory nodes; negative "
               "from the end): its [memory] cores run the MS, the others hold the versions", minimum=-256,
               maximum=255),
        Option("ms_threads", 0, "RPC server threads of the metadata server, at most its node's [memory] cores "
               "(0: all of them; pDPM's controller runs 8 allocator threads, MITSUME_CON_ALLOCATOR_THREAD_NUMBER)",
               minimum=0, maximum=256),
        Option("cache_bytes", 64 << 20, "bytes of each compute node's address cache (key -> latest version); "
               "0: none, every operation asks the metadata server", minimum=0, maximum=1 << 40),
        Option("gc_batch", 16, "GC entries per request to the metadata server (pDPM "
               "MITSUME_CLT_CONSUMER_MAX_GC_NUMS)", minimum=1, maximum=64),
        Option("gc_delay_us", 10.0, "longest a GC entry waits for its batch to fill (pDPM's client GC threads "
               "sleep MITSUME_GC_CLT_EPOCH_DELAY = 10 between rounds; the unit is taken as us)", minimum=0.0,
               maximum=1e6),
        Option("chunk_bytes", 16 << 10, "bytes of memory the metadata server hands a client per allocation request, "
               "at least the largest block (pDPM asks for MITSUME_CLT_CONSUMER_PER_ASK_NUMS = 16 entries at a time, "
               "each up to 1 KiB of the value sizes measured here)", minimum=MAX_ITEM_BYTES + 64, maximum=1 << 30),
        Option("rpc_timeout_us", 500, "timeout of one RPC attempt to the metadata server", minimum=1,
               maximum=10**7),
        Option("rpc_retries", 8, "resends of an RPC before the client gives up on the metadata server",
               minimum=0, maximum=1000),
        Option("search_cpu_ns", SEARCH_CPU_NS, "modelled CPU ns of each operation's software path (as RACE's)",
               minimum=0, maximum=10**6),
        Option("write_cpu_ns", WRITE_CPU_NS, "modelled CPU ns each write adds (as RACE's)", minimum=0,
               maximum=10**6),
    )

    @classmethod
    def check_rack(cls, options: dict, spec) -> None:
        count = spec.memory.count
        try:
            _ms, data = roles(list(range(count)), options["ms_node"])
        except ValueError as e:
            raise ValueError(str(e)) from None
        r = replicas_for(options, len(data))
        if r > len(data):
            where = ("one of which is the metadata server" if count > 1 else "which is also the metadata server")
            raise ValueError(f"replicas = {r} needs {r} memory nodes besides the metadata server; the rack has "
                             f"{count} ({where}): set memory.count = {r + 1} or lower replicas")
        if options["ms_threads"] > spec.memory.cores:
            raise ValueError(f"ms_threads = {options['ms_threads']} exceeds the metadata server's "
                             f"{spec.memory.cores} cores (memory.cores)")

    @classmethod
    def footprint(cls, options: dict, capacity: int, key_bytes: int, value_bytes: int) -> int:
        """One block per key per replica (the replicas the options fix for sure: at least 1)."""
        return int(capacity) * block_units(key_bytes, value_bytes) * UNIT * max(1, options["replicas"])

    @classmethod
    def setup(cls, fabric, memory_nodes, options, capacity):
        opts = cls.check_options(dict(options or {}), "system 'clover'")
        try:
            ms, data = roles(list(memory_nodes), opts["ms_node"])
        except ValueError as e:
            raise SystemGaveUp(f"Clover: {e}") from None
        r = replicas_for(opts, len(data))
        if r > len(data):
            raise SystemGaveUp(f"Clover: replicas = {r} needs {r} memory nodes besides the metadata server, "
                               f"the rack has {len(data)}")
        for m in list(memory_nodes):
            if m >= 254:
                raise SystemGaveUp(f"Clover: memory node index {m} does not fit the pointer's node field")
        try:
            epochs = setup_epochs(fabric, ms)
            anchor = fabric.allocate(ms, 64)
        except MemoryError as e:
            raise SystemGaveUp(f"Clover: the metadata server node is too small: {e}") from None
        fabric.memory[ms].host64[anchor // 8:anchor // 8 + 8] = 0
        return {
            "system": cls.name,
            "format": LAYOUT_FORMAT,
            "ms": ms,
            "ms_name": fabric.nodes[ms].name,
            "data_nodes": data,
            "memory_nodes": data,
            "replicas": r,
            "epochs": epochs,
            "bulk_anchor": anchor,
            "capacity": int(capacity),
            "options": opts,
            "setup_bytes": epochs_bytes(epochs) + 64,
        }

    @classmethod
    def client(cls, fabric, layout: dict, thread, options: dict) -> CloverClient:
        if layout.get("system") != cls.name or layout.get("format") != LAYOUT_FORMAT:
            raise SystemGaveUp(f"Clover: layout is not a {cls.name} layout of format {LAYOUT_FORMAT}")
        return CloverClient(fabric, layout, thread, layout["options"])

    @classmethod
    def bulk_load(cls, fabric, layout: dict, pairs) -> None:
        """Write every pair's first version (r copies, as an insert would) straight into the data
        memory nodes and log (pointer, key) in the metadata server node's memory, where the MS takes
        them into its table at its first request. Refuses a structure with keys and a key twice."""
        ms, data, r = layout["ms"], layout["data_nodes"], layout["replicas"]
        h = fabric.memory[ms].host64
        a = layout["bulk_anchor"] // 8
        if h[a] or h[a + 2]:
            raise SystemGaveUp("Clover: bulk load into a store that already has keys")
        regions = {n: [0, 0] for n in data}            # node -> [next offset, end]

        def take(node: int, nbytes: int) -> int:
            reg = regions[node]
            if reg[0] + nbytes > reg[1]:
                try:
                    off = fabric.allocate(node, BULK_REGION, align=UNIT)
                except MemoryError:
                    raise SystemGaveUp(f"Clover: bulk load: memory node {fabric.nodes[node].name!r} is full; "
                                       f"give the memory nodes more memory (memory.memory)") from None
                reg[0], reg[1] = off, off + BULK_REGION
            off = reg[0]
            reg[0] += nbytes
            return off

        mem_ms = fabric.memory[ms].host
        log = []                                       # [chunk offset, used] of the MS log chunks
        seen = set()
        count = 0
        it = iter(pairs)
        while True:
            batch = list(islice(it, 4096))
            if not batch:
                break
            for key, value in batch:
                key, value = bytes(key), bytes(value)
                if key in seen:
                    raise SystemGaveUp(f"Clover: bulk load: key {key[:16]!r} is given twice")
                seen.add(key)
                try:
                    units = block_units(len(key), len(value))
                    nbytes = units * UNIT
                    i = count % len(data)
                    nodes = [data[(i + j) % len(data)] for j in range(r)]
                    offs = [take(n, nbytes) for n in nodes]
                    ptrs = [pack_ptr(1, units, n, o) for n, o in zip(nodes, offs)]
                    img = encode_block(1, 1, KIND_VALUE, key, value, tuple(ptrs[1:]))
                except LayoutError as e:
                    raise SystemGaveUp(f"Clover: bulk load: {e}") from None
                for n, o in zip(nodes, offs):
                    fabric.memory[n].host[o:o + len(img)] = memoryview(img)
                rec = BULK_REC.pack(ptrs[0], len(key)) + key
                if not log or log[-1][1] + len(rec) > BULK_CHUNK - BULK_HEAD.size:
                    try:
                        off = fabric.allocate(ms, BULK_CHUNK)
                    except MemoryError:
                        raise SystemGaveUp("Clover: bulk load: the metadata server node has no room for the key "
                                           "log; give the memory nodes more memory (memory.memory)") from None
                    if log:
                        BULK_HEAD.pack_into(mem_ms, log[-1][0], off, log[-1][1])
                    log.append([off, 0])
                    BULK_HEAD.pack_into(mem_ms, off, 0, 0)
                c = log[-1]
                pos = c[0] + BULK_HEAD.size + c[1]
                mem_ms[pos:pos + len(rec)] = memoryview(rec)
                c[1] += len(rec)
                count += 1
        if not log:
            return
        BULK_HEAD.pack_into(mem_ms, log[-1][0], 0, log[-1][1])
        h[a + 1] = count
        h[a] = log[0][0] + 1                           # last: the MS ingests only a complete log
