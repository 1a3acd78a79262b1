"""FlexKVSystem: options, setup (the RACE table, the compute nodes' regions), proxies, manager."""

from __future__ import annotations

import os

import numpy as np

from nodes.systems.api import Option, SystemGaveUp
from nodes.systems.lib.replicas import ReplicaError, setup_record_copies, setup_replicas
from nodes.systems.race.client import SEARCH_CPU_NS, WRITE_CPU_NS
from nodes.systems.race.layout import MAX_BLOCK_BYTES, Geometry, LayoutError, SLOTS_PER_GROUP, GROUP_BYTES
from nodes.systems.race.system import RaceSystem

from .client import FlexKVClient
from .layout import ON_MEMORY, partition_bits
from .reassignment import handle_pause, handle_resume, manager
from .node import region_bytes, region_views, state_of
from .proxy import HANDLERS, M_PAUSE, M_RESUME, start_servers

LAYOUT_FORMAT = 1
#: sharer lists are 32-bit bitmaps of compute nodes (§3.3)
MAX_COMPUTE_NODES = 32


#: the paper's proxy threads per compute node (FlexKV Fig. 20: the peak)
DEFAULT_PROXY_THREADS = 2


def proxy_threads(options: dict, threads: int) -> int:
    return options["proxy_threads"] or min(DEFAULT_PROXY_THREADS, threads)


def start_node(ctx, extra: dict | None = None):
    """``servers["compute"]``: the proxy's RPC threads on every compute node (with the ``extra``
    handlers, ``proxy_coroutines`` per thread), the invalidation server, the manager on the first."""
    handlers = {**HANDLERS, M_PAUSE: handle_pause, M_RESUME: handle_resume, **(extra or {})}
    n = proxy_threads(ctx.options, ctx.cores.n)
    state_of(ctx.fabric, ctx.layout, ctx.index, ctx.env).proxy_threads = n
    gens = start_servers(ctx, handlers, n, ctx.options["proxy_coroutines"])
    if ctx.index == ctx.layout["cn_nodes"][0]:
        gens.append(manager(ctx))
    return gens


class FlexKVSystem(RaceSystem):
    name = "flexkv"
    description = ("FlexKV: a RACE index in memory nodes whose hot partitions are proxied by compute nodes "
                   "(RPC + LOCAL_CAS), a coherent cache of addresses and KV pairs, rank-aware partition "
                   "assignment and a throughput-guided index-offload ratio")
    paper = "Hu, Shen, Yang: FlexKV: Flexible Index Offloading for Memory-Disaggregated Key-Value Store"
    roles = ("compute", "memory")
    supports_scan = False
    expose_compute = True
    servers = {"compute": start_node}
    options = (
        Option("partitions", 64, "index partitions (RACE subtables), a power of two; the paper has 2**13 "
               "over 20 compute nodes", minimum=1, maximum=1 << 16),
        Option("offload_ratio", 0.3, "share of each compute node's partitions it proxies, in [0, 1], when "
               "knob = false (the paper's index-offload ratio i)", minimum=0.0, maximum=1.0),
        Option("knob", True, "Algorithm 2: tune the offload ratio by hill climbing on throughput, from 0"),
        Option("knob_step", 0.1, "Algorithm 2's step (delta)", minimum=0.01, maximum=0.5),
        Option("rank_hotness", True, "Algorithm 1: assign partitions by hotness rank (false: round-robin, "
               "offloading the lowest-numbered partitions)"),
        Option("rank_samples", 1500, "accesses per partition Algorithm 1 waits for before it ranks again "
               "(after its first ranking): the paper's window held ~1,500 (12.5-17 Mops x 1 s / 2**13 "
               "partitions, Fig. 18); a shorter one ranks counting noise", minimum=0, maximum=10**9),
        Option("kv_cache", True, "cache read-mostly KV pairs (false: addresses only)"),
        Option("overwrite_on_conflict", True, "an UPDATE that loses to a concurrent write of the key is done, "
               "overwritten by it (last writer wins: a failed one-sided slot CAS, or a proxy's key lock held "
               "by another write, which it waits to commit), as FUSEE's and Aceso's clients end an UPDATE "
               "whose CAS failed and as FlexKV's proxy fails a concurrent write 'as in CAS' (§4.5); "
               "false: retry until the CAS succeeds"),
        Option("proxy_threads", 0, "RPC threads of each compute node's proxy, at most the node's threads; "
               "0: the paper's 2, or fewer on a node with fewer threads", minimum=0, maximum=64),
        Option("proxy_coroutines", 8, "coroutines of each proxy thread, so that a thread keeps several "
               "handlers' memory-node round trips in flight (§4.5: coroutines are among the RDMA "
               "optimizations FlexKV adopts; the paper gives no count for proxies, 8 is its clients' "
               "per thread: an assumption); 1: a thread serves one request at a time",
               minimum=1, maximum=64),
        Option("cn_memory_bytes", 64 << 20, "memory of each compute node for its cache and local index "
               "(64 MB in the paper, ~5 % of its working set)", minimum=0, maximum=1 << 40),
        Option("interval_us", 1000, "the manager's period and counters' window (the paper's 1 s, scaled "
               "by 1/1000 because emulated runs last milliseconds)", minimum=10, maximum=10**8),
        Option("lease_us", 1000, "lease of cached addresses and of deleted slots before reuse (the "
               "paper's 200 ms, scaled; it must outlast an RPC's retries)", minimum=1, maximum=10**9),
        Option("drift", 1e-4, "clock drift bound of the lease rule", minimum=0.0, maximum=0.1),
        Option("rpc_timeout_us", 200, "timeout of one RPC attempt", minimum=1, maximum=10**7),
        Option("rpc_retries", 3, "resends of an RPC before it fails", minimum=0, maximum=100),
        Option("load_factor", 0.5, "keys per slot the RACE table is sized for", minimum=0.05, maximum=1.0),
        Option("chunk_bytes", 1 << 20, "bytes of the chunks a client carves KV pairs out of",
               minimum=MAX_BLOCK_BYTES, maximum=1 << 30),
        Option("replicas", 1, "copies of every KV pair and index slot on the memory nodes (primary-backup, "
               "§4.5: the paper evaluates 3-way): each on its own memory node, the backups WRITTEN with the "
               "primary; 1 = one copy stands for all", minimum=1, maximum=8),
        Option("search_cpu_ns", SEARCH_CPU_NS, "modelled CPU ns of each search (as RACE's)", minimum=0,
               maximum=10**6),
        Option("write_cpu_ns", WRITE_CPU_NS, "modelled CPU ns each write adds (as RACE's)", minimum=0,
               maximum=10**6),
    )

    @classmethod
    def check_rack(cls, options: dict, spec) -> None:
        threads = spec.compute.threads
        if options["proxy_threads"] > threads:
            raise ValueError(f"proxy_threads = {options['proxy_threads']} exceeds the {threads} threads of a "
                             f"compute node (compute.threads)")
        if spec.compute.count > MAX_COMPUTE_NODES:
            raise ValueError(f"FlexKV's sharer lists hold {MAX_COMPUTE_NODES} compute nodes; the rack has "
                             f"{spec.compute.count}")
        if options["replicas"] > spec.memory.count:
            raise ValueError(f"replicas = {options['replicas']} needs {options['replicas']} memory nodes (each copy "
                             f"on its own node); the rack has {spec.memory.count} (memory.count)")
        try:
            partition_bits(options["partitions"])
        except ValueError as e:
            raise ValueError(f"partitions = {options['partitions']}: {e}") from None

    @classmethod
    def geometry(cls, capacity: int, opts: dict, memory_nodes: int) -> Geometry:
        """One subtable per partition: as many groups each as the capacity needs."""
        bits = partition_bits(opts["partitions"])
        if not 0 < capacity:
            raise ValueError(f"FlexKV: capacity must be >= 1, got {capacity}")
        slots = int(capacity / opts["load_factor"])
        groups = max(1, -(-slots // (SLOTS_PER_GROUP << bits)))
        geo = Geometry(bits, groups)
        base = Geometry.for_capacity(capacity, opts["load_factor"], memory_nodes)
        if base.global_depth > bits:
            raise LayoutError(f"FlexKV: {capacity} keys need {base.subtables} subtables, more than the "
                              f"{1 << bits} partitions; raise the system option partitions")
        return geo

    @classmethod
    def setup(cls, fabric, memory_nodes, options, capacity):
        opts = cls.check_options(dict(options or {}), "system 'flexkv'")
        layout = super().setup(fabric, memory_nodes, opts, capacity)
        cns = [i for i, n in enumerate(fabric.nodes) if n.role == "compute"]
        if not cns:
            raise SystemGaveUp("FlexKV needs at least one compute node")
        if len(cns) > MAX_COMPUTE_NODES:
            raise SystemGaveUp(f"FlexKV: sharer lists hold {MAX_COMPUTE_NODES} compute nodes, the rack has {len(cns)}")
        P = opts["partitions"]
        need = region_bytes(P)
        offs = set()
        for c in cns:
            try:
                fabric.exposed_key(c)
            except KeyError:
                raise SystemGaveUp(f"FlexKV: compute node {fabric.nodes[c].name!r} is not exposed to one-sided "
                                   f"verbs (the rack exposes compute nodes of systems with expose_compute)") from None
            offs.add(fabric.allocate(c, need))
        if len(offs) != 1:
            raise SystemGaveUp(f"FlexKV: the compute nodes' regions landed at different offsets {sorted(offs)}")
        region = offs.pop()
        for c in cns:
            _c, staging, _s, _m = region_views(fabric.memory[c].host, region, P)
            staging[:] = ON_MEMORY               # nothing offloaded until the manager's first round
        geo = cls.geometry(int(capacity), opts, len(layout["memory_nodes"]))
        try:
            layout["block_copies"] = setup_replicas(fabric, layout["memory_nodes"], opts["replicas"],
                                                    opts["chunk_bytes"], "system 'flexkv'")
            layout["index_copies"] = setup_record_copies(fabric, layout["tables"], opts["replicas"])
        except ReplicaError as e:
            raise SystemGaveUp(str(e)) from None
        except MemoryError as e:
            raise SystemGaveUp(f"FlexKV: the index's {opts['replicas'] - 1} backups do not fit the memory nodes: "
                               f"{e}") from None
        layout.update({
            "format": LAYOUT_FORMAT,
            "partitions": P,
            "subtable_bytes": geo.groups * GROUP_BYTES,
            "cn_nodes": cns,
            "cn_names": [fabric.nodes[c].name for c in cns],
            "cn_ordinal": {c: i for i, c in enumerate(cns)},
            "cn_region": region,
            "options": opts,
            "nonce": int.from_bytes(os.urandom(8), "little"),
        })
        return layout

    @classmethod
    def footprint(cls, options: dict, capacity: int, key_bytes: int, value_bytes: int) -> int:
        """RACE's table and blocks, once per copy."""
        return super().footprint(options, capacity, key_bytes, value_bytes) * int(options.get("replicas", 1))

    @classmethod
    def node_failed(cls, fabric, layout: dict, node: int) -> None:
        """The membership service: mark ``node`` failed in every compute node's membership word
        (the survivors act on it at their next operation, or when an RPC to it times out)."""
        super().node_failed(fabric, layout, node)
        if node not in layout.get("cn_ordinal", {}):
            return
        ordinal = layout["cn_ordinal"][node]
        bit = np.uint64(1 << ordinal)
        for c in layout["cn_nodes"]:
            member = region_views(fabric.memory[c].host, layout["cn_region"], layout["partitions"])[3]
            member[0] |= bit
            member[2:].view(np.uint16)[ordinal] += 1

    @classmethod
    def node_restarted(cls, fabric, layout: dict, node: int) -> None:
        """``node`` is back: clear its bit everywhere; it starts paused (``joining``) until the
        manager's next round gives it the map and its share of the partitions."""
        if node not in layout.get("cn_ordinal", {}):
            return
        bit = np.uint64(1 << layout["cn_ordinal"][node])
        view = None
        for c in layout["cn_nodes"]:
            member = region_views(fabric.memory[c].host, layout["cn_region"], layout["partitions"])[3]
            member[0] &= ~bit
            if c != node:
                view = member.copy()
        member = region_views(fabric.memory[node].host, layout["cn_region"], layout["partitions"])[3]
        if view is not None:
            member[:] = view                   # the others' view: failed nodes and death counts
        member[1] = 1

    @classmethod
    def client(cls, fabric, layout: dict, thread, options: dict) -> FlexKVClient:
        if layout.get("system") != cls.name or layout.get("format") != LAYOUT_FORMAT:
            raise SystemGaveUp(f"FlexKV: layout is not a {cls.name} layout of format {LAYOUT_FORMAT}: "
                               f"{layout.get('system')!r}/{layout.get('format')!r}")
        return FlexKVClient(fabric, layout, thread, layout["options"])
