"""AcesoSystem: options, setup (RACE's table plus Aceso's memory-node areas), the rack checks, the
bulk load and the memory-node actors (nodes/systems/aceso/server.py)."""

from __future__ import annotations

import os

import numpy as np

from nodes.systems.api import Option, System, SystemGaveUp
from nodes.systems.lib.hashing import hash64
from nodes.systems.race import RaceSystem
from nodes.systems.race.bucket import MAX_MATCHES, probe, scan, slot_offset
from nodes.systems.race.client import SEARCH_CPU_NS, WRITE_CPU_NS
from nodes.systems.race.layout import (
    BUCKET_BYTES, GROUP_BYTES, LayoutError, UNIT, WORD, pack_header, unpack_dir_entry,
)

from .client import AcesoClient
from .layout import (
    MAX_LINES, OP_INSERT, SUBBLOCK_ALIGN, auto_code, check_record, code_fits, encode_record, record_location,
    record_subblocks, versioned_word,
)
from .server import DELTA_ENTRY_BYTES, DELTA_HEADER_BYTES, STATS_WORDS, index_words, memory_server

LAYOUT_FORMAT = 1
WHERE = "system 'aceso'"
FAULTS = ("none", "cache-skips-slot-check")


def resolve_code(opts: dict, n: int) -> tuple[int, int]:
    """(k, parity lines) for ``n`` memory nodes: the options, or Aceso's rule where they say auto."""
    k_auto, lines_auto = auto_code(n)
    lines = lines_auto if opts["parity"] < 0 else opts["parity"]
    k = opts["code_k"] or (k_auto if opts["parity"] < 0 else max(1, min(k_auto, n - 1)))
    return k, lines


def resolve_replicas(opts: dict, n: int) -> int:
    return min(2, n - 1) if opts["ckpt_replicas"] < 0 else opts["ckpt_replicas"]


def rack_problem(opts: dict, n: int) -> str | None:
    """Why these options cannot run on ``n`` memory nodes (one line), or None."""
    k, lines = resolve_code(opts, n)
    if lines > n - 1:
        return (f"parity = {lines} needs {lines + 1} memory nodes (a block and each of its parity blocks on "
                f"distinct nodes), the rack has {n}; lower parity (0 = no erasure code)")
    why = code_fits(n, k, lines)
    if why:
        return f"{why}; set code_k and parity that fit, or leave them auto"
    r = resolve_replicas(opts, n)
    if r > n - 1:
        return (f"ckpt_replicas = {r} needs {r + 1} memory nodes (each checkpoint copy on another node), "
                f"the rack has {n}; lower ckpt_replicas (0: no checkpoints)")
    return None


class AcesoSystem(System):
    name = "aceso"
    description = ("Aceso: RACE index committed by one CAS on the only index copy, index checkpointed "
                   "differentially by memory-node CPUs, KV records erasure-coded (XOR parity of delta "
                   "blocks on memory-node CPUs), address cache that reads buckets only on misses")
    paper = ("Hu, Zuo, Chen, Wang, Hu, Yang: Aceso: Achieving Efficient Fault Tolerance in Memory-Disaggregated "
             "Key-Value Stores, SOSP'24 (code: github.com/dmemsys/Aceso)")
    roles = ("compute", "memory")
    supports_scan = False
    servers = {"memory": memory_server}
    # Aceso's server pins four threads (src/Common.h: mainCoreID 0, xorCoreID 1, ckptSendCoreID 2,
    # ckptRecvCoreID 3): racks the project builds for it give memory nodes four cores
    rack_tables = {"memory": {"cores": 4}}
    options = (
        Option("load_factor", 0.5, "keys per slot the RACE table is sized for (as RACE's option)", minimum=0.05,
               maximum=1.0),
        Option("search_cpu_ns", SEARCH_CPU_NS, "modelled client CPU of each search beyond what the model prices "
               "(RACE's calibration, docs/race.md)", minimum=0, maximum=10**6),
        Option("write_cpu_ns", WRITE_CPU_NS, "modelled client CPU an update, insert or delete adds once (RACE's "
               "calibration)", minimum=0, maximum=10**6),
        Option("cache_bytes", 64 << 20, "bytes of each compute node's address cache (0: none); FlexKV gives "
               "every system 64 MB of compute-node memory", minimum=0, maximum=1 << 40),
        Option("miss_rate_threshold", 0.1, "a cache entry whose misses exceed this share of its accesses stops "
               "prefetching its record (src/Common.h missRateThreash)", minimum=0.0, maximum=1.0),
        Option("block_bytes", 256 << 10, "bytes of a data block (Aceso: 2 MB, memoryBlockSize; scaled, see "
               "docs/aceso.md)", minimum=4096, maximum=1 << 30),
        Option("subblock_bytes", 1024, "bytes of a sub-block, the unit of every record WRITE and READ "
               "(src/Common.h subblockSize); a multiple of 256", minimum=SUBBLOCK_ALIGN, maximum=16384),
        Option("code_k", 0, "data blocks per XOR stripe (0: Aceso's rule, memory nodes - 2 with two parity "
               "lines: 3 on 5 nodes, the code's codeK)", minimum=0, maximum=64),
        Option("parity", -1, "parity lines, each an XOR parity block per stripe (-1: Aceso's two on 3+ memory "
               "nodes, one on 2, none on 1; 0: no erasure code)", minimum=-1, maximum=MAX_LINES),
        Option("ckpt_interval_us", 500, "virtual us between index checkpoints (Aceso: 500 ms, ckptInterval; "
               "scaled by 1/1000; 0: none)", minimum=0, maximum=10**7),
        Option("ckpt_replicas", -1, "memory nodes each node's index checkpoint goes to (-1: Aceso's 2, fewer "
               "on a smaller rack; 0: no checkpoints)", minimum=-1, maximum=MAX_LINES),
        Option("overwrite_on_conflict", True, "an update whose CAS lost to another write of the key is done "
               "(Aceso); false: retry until the CAS succeeds (RACE)"),
        Option("fault", "none", "a deliberate bug, to prove that dmrack check catches it: 'cache-skips-slot-check' "
               "takes a cached record without checking that the slot still names it (stale reads)",
               choices=FAULTS),
    )

    @classmethod
    def check_options(cls, given: dict, where: str) -> dict:
        opts = super().check_options(given, where)
        if opts["subblock_bytes"] % SUBBLOCK_ALIGN:
            raise ValueError(f"{where}: subblock_bytes = {opts['subblock_bytes']} is not a multiple of "
                             f"{SUBBLOCK_ALIGN} (records start {SUBBLOCK_ALIGN}-B aligned: the slot's version "
                             f"lives in the offset's low bits)")
        if opts["block_bytes"] % opts["subblock_bytes"] or opts["block_bytes"] < 2 * opts["subblock_bytes"]:
            raise ValueError(f"{where}: block_bytes = {opts['block_bytes']} must be a multiple of subblock_bytes "
                             f"({opts['subblock_bytes']}) and hold at least two sub-blocks")
        return opts

    @classmethod
    def check_rack(cls, options: dict, spec) -> None:
        why = rack_problem(options, spec.memory.count)
        if why:
            raise ValueError(f"system aceso: {why}")
        if spec.profile.udp is None:
            raise ValueError(f"system aceso: its memory nodes answer RPCs (allocation, XOR, checkpoints), which "
                             f"need a profile with a datagram path ([udp]); {spec.profile_name} has none")

    @classmethod
    def footprint(cls, options: dict, capacity: int, key_bytes: int, value_bytes: int) -> int:
        """RACE's table for ``capacity`` keys plus one record (whole sub-blocks) per key but the
        rack's sizing slack; parity, delta blocks and checkpoint copies are not counted (a lower bound)."""
        try:
            geo = RaceSystem.geometry(int(capacity), options, 1)
        except LayoutError:
            return 1 << 62
        sub = options["subblock_bytes"]
        table = geo.subtables * geo.subtable_bytes + geo.directory_bytes
        return table + max(0, int(capacity) - 1024) * record_subblocks(int(key_bytes), int(value_bytes), sub) * sub

    @classmethod
    def setup(cls, fabric, memory_nodes: list[int], options: dict, capacity: int) -> dict:
        opts = cls.check_options(dict(options or {}), WHERE)
        lay = RaceSystem.setup(fabric, memory_nodes, {"load_factor": opts["load_factor"]}, capacity)
        mns = lay["memory_nodes"]
        n = len(mns)
        why = rack_problem(opts, n)
        if why:
            raise SystemGaveUp(f"Aceso: {why}")
        k, lines = resolve_code(opts, n)
        replicas = resolve_replicas(opts, n)
        sub_bytes = lay["groups_per_subtable"] * GROUP_BYTES
        regions = [[] for _ in mns]
        for e in lay["directory_entries"]:
            _ld, node, off = unpack_dir_entry(e)
            regions[mns.index(node)].append((off, sub_bytes))
        lay.update({
            "system": cls.name, "format": LAYOUT_FORMAT, "nonce": int.from_bytes(os.urandom(8), "little"),
            "code_k": k, "parity": lines, "block_bytes": opts["block_bytes"],
            "subblock_bytes": opts["subblock_bytes"], "ckpt_replicas": replicas,
            "ckpt_interval_ns": int(opts["ckpt_interval_us"] * 1000), "index_regions": regions,
        })
        try:
            lay["mn_stats"] = [fabric.allocate(m, STATS_WORDS * WORD) for m in mns]
            areas = [[] for _ in mns]
            for holder, m in enumerate(mns):
                for rank in range(replicas):
                    sender = (holder - 1 - rank) % n
                    words = index_words(fabric, lay, sender)
                    rep = fabric.allocate(m, words.size * WORD)
                    fabric.memory[m].host64[rep // WORD:rep // WORD + words.size] = words
                    delta = fabric.allocate(m, DELTA_HEADER_BYTES + DELTA_ENTRY_BYTES * words.size)
                    areas[holder].append((rep, delta, words.size * WORD))
            lay["ckpt_areas"] = areas
        except MemoryError as e:
            raise SystemGaveUp(f"Aceso: the index's checkpoint copies ({replicas} per memory node) do not fit: {e}; "
                               f"lower ckpt_replicas or give the memory nodes more memory") from None
        return lay

    @classmethod
    def client(cls, fabric, layout: dict, thread, options: dict) -> AcesoClient:
        if layout.get("system") != cls.name or layout.get("format") != LAYOUT_FORMAT:
            raise SystemGaveUp(f"Aceso: layout is not an Aceso layout of format {LAYOUT_FORMAT}: "
                               f"{layout.get('system')!r}/{layout.get('format')!r}")
        return AcesoClient(fabric, layout, thread, cls.check_options(dict(options or {}), WHERE))

    @classmethod
    def bulk_load(cls, fabric, layout: dict, pairs) -> int:
        """Place ``pairs`` as inserts would (RACE's probe and slot choice, a record of version 0 per
        key, then its committed slot word) into the empty table ``setup`` made; the records go
        round-robin over the memory nodes into blocks taken for the load (no parity: the load is
        outside what a run measures). A key given twice or a full bucket pair is a SystemGaveUp."""
        mns = layout["memory_nodes"]
        sub = layout["subblock_bytes"]
        block = layout["block_bytes"]
        entries = [unpack_dir_entry(e) for e in layout["directory_entries"]]
        mask = (1 << layout["global_depth"]) - 1
        n_main = 2 * layout["groups_per_subtable"]
        buf = np.zeros(4 * BUCKET_BYTES // WORD, np.uint64)
        out = np.zeros(2 * MAX_MATCHES, np.uint64)
        cursor = [[0, 0] for _ in mns]          # per memory node: next record offset, end of its region
        half = 2 * BUCKET_BYTES // WORD
        done = 0
        for key, value in pairs:
            key, value = bytes(key), bytes(value)
            nsub = check_record(key, value, sub)
            h = int(hash64(key))
            e = h & mask
            ld, node, base = entries[e]
            h64 = fabric.memory[node].host64
            off_a, off_b, flags = probe(h, base, n_main)
            buf[:half] = h64[off_a // WORD:off_a // WORD + half]
            buf[half:] = h64[off_b // WORD:off_b // WORD + half]
            fp = h >> 56
            r = scan(buf, 0, half, flags, fp, pack_header(ld, e & ((1 << ld) - 1)), out)
            if r < 0:
                raise SystemGaveUp("Aceso: a bulk load needs the table setup made (a bucket header differs)")
            for i in range(r & 63):
                rn, roff, _units = record_location(int(out[2 * i + 1]))
                rec = fabric.memory[rn].host
                klen = int(rec[roff]) | int(rec[roff + 1]) << 8
                if klen == len(key) and rec[roff + 8:roff + 8 + klen].tobytes() == key:
                    raise SystemGaveUp(f"Aceso: bulk load of key {key[:32]!r} twice")
            free = (r >> 6) - 1
            if free < 0:
                raise SystemGaveUp(f"Aceso table full during a bulk load: both combined buckets of key {key[:32]!r} "
                                   f"have no free slot (capacity {layout['capacity']} at load_factor "
                                   f"{layout['load_factor']})")
            p = done % len(mns)
            m = mns[p]
            c = cursor[p]
            if c[0] + nsub * sub > c[1]:
                size = max(block, nsub * sub)
                try:
                    c[0] = fabric.allocate(m, size, align=SUBBLOCK_ALIGN)
                except MemoryError as err:
                    raise SystemGaveUp(f"Aceso: the records of a bulk load do not fit the memory nodes: {err}") from None
                c[1] = c[0] + size
            roff = c[0]
            c[0] += nsub * sub
            slot = slot_offset(free, off_a, off_b)
            rec = encode_record(key, value, 0, OP_INSERT, node, slot)
            fabric.memory[m].host[roff:roff + len(rec)] = np.frombuffer(rec, np.uint8)
            h64[slot // WORD] = versioned_word(fp, nsub * sub // UNIT, m, roff, 0)
            done += 1
        return done


__all__ = ["AcesoSystem"]
