"""FuseeSystem: options, setup (RACE's table plus its backup replicas and the mirror chunks of the
KV blocks, nodes/systems/lib/replicas.py), the client; RACE's bulk load copies into the backups."""

from __future__ import annotations

import os

from nodes.systems.api import Option, SystemGaveUp
from nodes.systems.lib.replicas import setup_record_copies, setup_replicas
from nodes.systems.race.client import SEARCH_CPU_NS, WRITE_CPU_NS
from nodes.systems.race.layout import MAX_BLOCK_BYTES
from nodes.systems.race.system import LAYOUT_FORMAT, RaceSystem

from .client import FuseeClient
from .layout import MAX_REPLICAS

#: FUSEE's tests/client_config.json: "miss_rate_threash": 0.1
MISS_RATE_THRESHOLD = 0.1
#: FlexKV's evaluation gives every compute node 64 MB of memory for caching (its cn_memory_bytes
#: default, docs/flexkv.md); FUSEE's own cache is unbounded
CACHE_BYTES = 64 << 20
#: FUSEE and FlexKV's evaluation replicate the index and the KV pairs 3 times
#: (tests/server_config.json "num_replication": 3)
DEFAULT_REPLICAS = 3


def replicas_for(option: int, memory_nodes: int) -> int:
    """The replica count a rack runs with: the option, or (0) 3 capped at the memory nodes."""
    return option if option else min(DEFAULT_REPLICAS, memory_nodes)


class FuseeSystem(RaceSystem):
    name = "fusee"
    description = ("FUSEE: a RACE index replicated on several memory nodes and changed by clients only "
                   "(SNAPSHOT: CAS the backups, decide the winner, commit the embedded log, CAS the primary); "
                   "replicated KV pairs; an address cache bypassed above a miss rate")
    paper = ("Shen, Lu, Zhang et al., FUSEE: A Fully Memory-Disaggregated Key-Value Store, USENIX FAST'23 "
             "(code: dmemsys/FUSEE)")
    options = (
        Option("replicas", 0, "copies of the index and of every KV pair, on that many memory nodes (replica i of "
               "subtable j on the memory node after j's by i); 0: 3, or the memory nodes if fewer",
               minimum=0, maximum=MAX_REPLICAS),
        Option("cache_bytes", CACHE_BYTES, "bytes of each compute node's address cache (0: none)", minimum=0,
               maximum=1 << 40),
        Option("miss_rate_threshold", MISS_RATE_THRESHOLD, "a key whose cached slot was found replaced more often "
               "than this share of its accesses is looked up without the cache (FUSEE miss_rate_threash)",
               minimum=0.0, maximum=1.0),
        Option("cache_lease_us", 1000, "a cached slot counts this long after it was last seen holding its word, "
               "and a replaced KV block is reused no sooner (dmrack's, as FlexKV's lease_us: docs/fusee.md)",
               minimum=0, maximum=10**7),
        Option("load_factor", 0.5, "keys per slot the table is sized for: slots = capacity / load_factor",
               minimum=0.05, maximum=1.0),
        Option("chunk_bytes", 1 << 20, "bytes of the coarse blocks a client obtains (with their replicas) in one "
               "allocation RPC and carves KV blocks out of; a power of two (FUSEE: 64 MiB)",
               minimum=1 << 14, maximum=1 << 30),
        Option("search_cpu_ns", SEARCH_CPU_NS, "modelled CPU ns of each search of the table (RACE's calibration, "
               "docs/race.md)", minimum=0, maximum=10**6),
        Option("write_cpu_ns", WRITE_CPU_NS, "modelled CPU ns an update, insert or delete adds once (RACE's "
               "calibration)", minimum=0, maximum=10**6),
    )

    @classmethod
    def check_rack(cls, options: dict, spec) -> None:
        mns = spec.memory.count
        if options["replicas"] > mns:
            raise ValueError(f"replicas = {options['replicas']} needs as many memory nodes; the rack has {mns} "
                             f"(memory.count)")
        c = options["chunk_bytes"]
        if c & (c - 1) or c < MAX_BLOCK_BYTES:
            raise ValueError(f"chunk_bytes = {c} must be a power of two of at least {MAX_BLOCK_BYTES}")

    @classmethod
    def footprint(cls, options: dict, capacity: int, key_bytes: int, value_bytes: int) -> int:
        """RACE's table and blocks, once per replica (a lower bound: the log tails are left out)."""
        return super().footprint(options, capacity, key_bytes, value_bytes) * max(1, options["replicas"] or 1)

    @classmethod
    def setup(cls, fabric, memory_nodes: list[int], options: dict, capacity: int) -> dict:
        opts = cls.check_options(dict(options or {}), f"system {cls.name!r}")
        c = opts["chunk_bytes"]
        if c & (c - 1):
            raise SystemGaveUp(f"FUSEE: chunk_bytes = {c} must be a power of two")
        layout = super().setup(fabric, memory_nodes, opts, capacity)
        mns = layout["memory_nodes"]
        r = replicas_for(opts["replicas"], len(mns))
        if r > len(mns):
            raise SystemGaveUp(f"FUSEE: replicas = {r} needs as many memory nodes; the rack has {len(mns)}")
        try:
            # the index's backups (subtable j's copy i on the memory node i after j's) and the KV
            # blocks' mirror chunks with their chunk map (nodes/systems/lib/replicas.py)
            layout["index_copies"] = setup_record_copies(fabric, layout["tables"], r)
            layout["block_copies"] = setup_replicas(fabric, mns, r, c, "system 'fusee'")
        except MemoryError as e:
            raise SystemGaveUp(f"FUSEE: the backup replicas of the table ({r - 1} more copies) do not fit the memory "
                               f"nodes: {e}; lower replicas or raise memory.memory") from None
        layout.update(replicas=r, nonce=int.from_bytes(os.urandom(8), "little"),
                      options={k: opts[k] for k in ("cache_bytes", "miss_rate_threshold", "cache_lease_us")})
        return layout

    @classmethod
    def client(cls, fabric, layout: dict, thread, options: dict) -> FuseeClient:
        if layout.get("system") != cls.name or layout.get("format") != LAYOUT_FORMAT:
            raise SystemGaveUp(f"FUSEE: layout is not a FUSEE layout: {layout.get('system')!r}")
        return FuseeClient(fabric, layout, thread, cls.check_options(dict(options or {}), f"system {cls.name!r}"))
