"""RolexSystem: ROLEX on the rack (setup and bulk load in the owner's process, one client per thread,
retraining on the first memory node's CPU: retrain.py).

``setup`` carves, on every memory node, a leaf region (16-byte header, then leaves of ``span`` keys,
1 KiB for ROLEX's 64), its leaf table (a meta word per leaf) and its lock array, sized from the
rack's capacity, and lays out an
*empty index*: primary leaves with fences splitting the key space evenly, no models (an index
needs keys to be trained on), so a rack loaded by inserts works at once. ``bulk_load`` (only on that
empty index) sorts the pairs, builds the leaves and models exactly as ``core.RolexIndex`` does
(eps-32 PLA models, each owning a run of leaves filled with ``fill`` keys), writes them over the
empty index and publishes the new model table last. Clients find everything from the layout dict
and from memory (layout.py, cache.py), so the same code runs co-located and in a rack of processes.
"""

from __future__ import annotations

import numpy as np

from nodes.systems.api import Option, System, SystemGaveUp
from nodes.systems.lib.reclaim import epochs_bytes, setup_epochs
from nodes.systems.lib.memory_nodes import memory_node_indexes
from shm.fabric import gaddr

from .client import RolexClient
from .core import EPS, MAX_SPAN, MIN_SPAN, REGION_HEADER_BYTES, SLOTS, RolexIndex, check_span, leaf_bytes
from .layout import (
    COUNT_BYTES, EMPTY, MAX_NODE, MAX_VALUE, META_BYTES, LOCK_BYTES, NO_SYNONYM, WORD, Remote, image_meta, key_int,
    leaf_checksum, leaf_image, pack_meta, table_image, value_units, value_word,
)
from .retrain import STATS_WORDS, VERBS_BUFFER, memory_server

LAYOUT_FORMAT = 2
#: ROLEX's code gives a model a synonym table of kSynonymMax = 128 entries, the first its counter
#: (which starts at 1), refuses a synonym leaf once the counter reaches kSynonymMax - 1 and asks for
#: retraining then (rolex/leaf_table.hpp, synonym_emplace_back): 126 synonym leaves a model.
SYNONYM_BUDGET = 126
#: What ``dmrack check`` and the conformance histories run ROLEX with unless told otherwise, so
#: that their 16-64 keys cross retrains (the default budget of 126 synonym leaves a model and an
#: empty index sized for the rack's capacity never overflow a leaf with so few keys): an empty
#: index of one leaf group per memory node, 6-key leaves (96 B: two lines, so READs still meet
#: write-backs halfway), 5 keys a leaf after a retrain, eps 2 (several models over 32 keys, so a
#: retrain re-lays part of the index while clients use the rest), a retrain every second synonym
#: leaf of a model, and room for the leaves the retrains replace (never reused). Measured on the
#: history checks: 5-6 retrain requests in a virtual ms, 950-1,350 operations.
STRESS_OPTIONS = (("empty_leaves", 2), ("span", 6), ("fill", 5), ("eps", 2), ("retrain_synonyms", 2),
                  ("leaf_headroom", 64.0))
#: Deliberate bugs shown (and checked) on ROLEX's own options: their checks run without STRESS_OPTIONS.
FAULTS_ON_DEFAULTS = ("skip-checksum", "unlock-first", "value-with-write-back")
#: The rack sizes ``capacity`` with slack for this many keys (Sherman's footprint leaves it out too).
RACK_SLACK_KEYS = 1024


class RolexSystem(System):
    name = "rolex"
    description = ("ROLEX: learned range index on one-sided verbs (sorted 1 KiB leaves of 64 keys on memory nodes, "
                   "eps-32 PLA learned cache on compute nodes, candidate-leaf READs in one batch, synonym leaves by FAA, "
                   "models retrained on a memory node's CPU while clients run; plus group locks by CAS, checksummed "
                   "leaf snapshots and a model epoch every operation checks)")
    paper = ("Li, Hua, Zuo, Chen, Sheng: ROLEX: A Scalable RDMA-oriented Learned Key-Value Store for "
             "Disaggregated Memory Systems, FAST'23 (code: iotlpf/ROLEX)")
    roles = ("compute", "memory")
    supports_scan = True
    #: the retrainer (retrain.py) on the first memory node's cores
    servers = {"memory": memory_server}
    #: ASSUMPTION: one core a memory node, the retrainer's (the paper: retraining on memory nodes'
    #: "dedicated computing resources", not how many); racks the project builds get it, a scenario
    #: file with ROLEX must give [memory] cores >= 1
    rack_tables = {"memory": {"cores": 1}}
    options = (
        Option("eps", EPS, "error bound of the learned cache's PLA models (ROLEX: 32); the window of candidate "
               "leaves a GET READs covers prediction +/- (eps + 1) keys", minimum=0, maximum=1 << 16),
        Option("span", SLOTS, "keys a leaf holds (ROLEX's code: Leaf<64, u64, u64>, a 1 KiB leaf; CHIME, SOSP'24, "
               "ran ROLEX with 16): a GET READs every leaf of the model's window whole, so the bytes a GET "
               "READs are about (2 eps / span + 1) x span x 16", minimum=MIN_SPAN, maximum=MAX_SPAN),
        Option("fill", 0, "keys per leaf at bulk load, at most the span; 0: the span (ROLEX's code: full leaves, so "
               "the first insert into a leaf allocates a synonym leaf); fewer leave headroom",
               minimum=0, maximum=MAX_SPAN),
        Option("values", "out-of-line", "'out-of-line': a leaf's value slot names an immutable block holding the "
               "value (any size up to 16 KiB, one more READ per get); 'inline': the value itself, 8 bytes exactly, "
               "as ROLEX's Leaf<64, u64, u64> (other sizes are refused)", choices=("out-of-line", "inline")),
        Option("leaf_headroom", 4.0, "leaves the regions hold, as a multiple of capacity / span (primary leaves plus "
               "every synonym leaf ever allocated: deletes do not give leaves back, as in ROLEX)",
               minimum=1.0, maximum=64.0),
        Option("chunk_bytes", 1 << 20, "bytes of the chunks a client obtains from a memory node (one RPC each) and "
               "carves value blocks out of", minimum=4096, maximum=1 << 30),
        Option("retrain_synonyms", SYNONYM_BUDGET, "retrain a model on the first memory node's CPU once its leaf "
               "groups have allocated this many synonym leaves since it was trained (ROLEX's code: a model's synonym "
               "table of kSynonymMax = 128 entries holds 126, rolex/leaf_table.hpp); an index setup left empty "
               "counts per primary leaf. The retrain merges the model's chains into new leaves and publishes a new "
               "model table (epoch + 1) that clients READ when they meet a leaf it retired. Costs on that node's "
               "cores, all profile assumptions: software.patch_ns per retrain, software.patch_ns_per_key per key "
               "merged and PLA-trained, software.core_stream_gbps for the bytes its CPU copies; other nodes' leaves "
               "by RDMA verbs. 0: never retrain (chains grow until the next bulk load)", minimum=0, maximum=1 << 30),
        Option("empty_leaves", 0, "primary leaves of the empty index setup lays out for a rack loaded by inserts "
               "(no models: a retrain trains them); 0: enough to be half full at the rack's capacity",
               minimum=0, maximum=1 << 26),
        Option("fault", "none", "a deliberate bug, to prove the checks catch it: 'skip-checksum' keeps every leaf "
               "snapshot without checking it against its meta word, so a READ that met a write-back halfway "
               "(keys shifted by an insert or delete) can miss a key or return another key's value; 'unlock-first' "
               "posts the unlock CAS before the leaf's write-back, in one doorbell, so the write-back may land after "
               "the unlock (lost updates: nanoseconds co-located, up to the lax window across processes); "
               "'value-with-write-back' WRITEs an out-of-line value's block in the write-back's doorbell, behind the "
               "leaf that names it, instead of completing it first (a reader may read the block before its value: a "
               "window of nanoseconds that only dmrack check --chaos opens); "
               "'retrain-unlocked' has a retrain READ a model's leaves without taking their locks, so a write that "
               "lands after the READ and before the leaves are retired is lost",
               choices=("none", "skip-checksum", "unlock-first", "value-with-write-back", "retrain-unlocked")),
    )

    @staticmethod
    def _leaves(options: dict, capacity: int, nodes: int) -> int:
        """Leaves per memory node."""
        total = max(nodes, -(-int(capacity * options["leaf_headroom"]) // options["span"]))
        return -(-total // nodes)

    @classmethod
    def footprint(cls, options: dict, capacity: int, key_bytes: int, value_bytes: int) -> int:
        """The leaf regions with their meta, lock and count words, as setup carves them (over any
        number of memory nodes: at least the total), plus a value block per key out of line for
        every key but the rack's slack, and the retrainer's verbs buffer when it runs."""
        leaves = max(1, -(-int(capacity * options["leaf_headroom"]) // options["span"]))
        blocks = 0
        if options["values"] == "out-of-line":
            blocks = max(0, int(capacity) - RACK_SLACK_KEYS) * value_units(int(value_bytes)) * 64
        retrainer = VERBS_BUFFER if options["retrain_synonyms"] else 0
        return leaves * (leaf_bytes(options["span"]) + META_BYTES + LOCK_BYTES + COUNT_BYTES) + blocks + retrainer

    @classmethod
    def check_options(cls, options: dict, where: str) -> dict:
        """The options checked one by one, then together: an even span, a fill within it
        (ValueError naming ``where``, as the base class)."""
        opts = super().check_options(options, where)
        try:
            check_span(opts["span"])
        except ValueError as e:
            raise ValueError(f"{where}: {e}") from None
        if opts["fill"] > opts["span"]:
            raise ValueError(f"{where}: fill = {opts['fill']} is above the span ({opts['span']} keys a leaf)")
        return opts

    @classmethod
    def check_stress(cls, shape, options: dict | None = None):
        """``dmrack check``'s stress shapes (quick and default) with :data:`STRESS_OPTIONS`, so that
        the stress crosses retrains (``cluster.correctness.shapes.stress_options`` applies them
        when the check was given none of them); a check of one of the deliberate bugs of
        :data:`FAULTS_ON_DEFAULTS` runs ROLEX's own options, where those bugs were shown.
        ``--heavy`` (``heavy_stress``, not overridden) runs ROLEX's own options: its 16 keys among
        128 clients in groups of several keys would leave the clients queueing on a few locks."""
        if (options or {}).get("fault", "none") in FAULTS_ON_DEFAULTS:
            return shape
        return shape._replace(options=STRESS_OPTIONS)

    @classmethod
    def history_stress(cls, shape, options: dict):
        """The conformance history checks' shape: as :meth:`check_stress` (they cross retrains)."""
        return cls.check_stress(shape, options)

    @classmethod
    def setup(cls, fabric, memory_nodes: list[int], options: dict, capacity: int) -> dict:
        opts = cls.check_options(dict(options or {}), f"system {cls.name!r}")
        mns = memory_node_indexes(fabric, memory_nodes, "ROLEX")
        if max(mns) > MAX_NODE:
            raise SystemGaveUp(f"ROLEX: memory nodes must be among the first {MAX_NODE + 1} fabric nodes (a value "
                               f"word holds 8 bits of node number); got {max(mns)}")
        M = len(mns)
        span = opts["span"]
        fill = opts["fill"] or span
        lb = leaf_bytes(span)
        lpn = cls._leaves(opts, capacity, M)
        regions, tables, locks, counts = [], [], [], []
        try:
            for m in mns:
                fabric.expose(m)
                regions.append(fabric.allocate(m, REGION_HEADER_BYTES + lpn * lb))
                tables.append(fabric.allocate(m, lpn * META_BYTES))
                locks.append(fabric.allocate(m, lpn * LOCK_BYTES))
                counts.append(fabric.allocate(m, lpn * COUNT_BYTES))
            stats = fabric.allocate(mns[0], STATS_WORDS * WORD)
        except MemoryError as e:
            raise SystemGaveUp(f"ROLEX: {e} ({lpn} leaves of {lb} B per memory node; lower the option leaf_headroom "
                               f"or give the memory nodes more memory)") from None
        layout = {
            "system": cls.name, "format": LAYOUT_FORMAT, "memory_nodes": mns, "regions": regions,
            "tables": tables, "locks": locks, "counts": counts, "leaves_per_node": lpn, "values": opts["values"],
            "eps": opts["eps"], "span": span, "fill": fill, "chunk_bytes": opts["chunk_bytes"],
            "capacity": int(capacity), "retrain_synonyms": opts["retrain_synonyms"], "retrain_stats": stats,
        }
        remote = Remote(layout)
        # the empty index: primaries at half their capacity once the rack holds ``capacity`` keys
        # (or the option empty_leaves)
        primaries = opts["empty_leaves"] or max(M, -(-int(capacity) // (span // 2)))
        primaries = min(primaries, lpn * M // 2 or 1)
        empty_meta = image_meta(leaf_image([], [], span), NO_SYNONYM)
        for j, m in enumerate(mns):
            count = len(range(j, primaries, M))
            host64 = fabric.memory[m].host64
            host64[regions[j] // 8] = count                       # the counter: leaves in use
            base = (regions[j] + REGION_HEADER_BYTES) // 8
            host64[base:base + count * 2 * span].reshape(count, 2 * span)[:, :span] = EMPTY
            host64[tables[j] // 8:tables[j] // 8 + count] = empty_meta
        fences = [(g << 64) // primaries for g in range(primaries)]
        cls._publish(fabric, remote, table_image([], [], fences, opts["eps"], fill))
        try:
            layout["epochs"] = setup_epochs(fabric, mns[0])
        except MemoryError as e:
            raise SystemGaveUp(f"ROLEX: the epoch table does not fit memory node {mns[0]}: {e}") from None
        layout["setup_bytes"] = (M * (REGION_HEADER_BYTES + lpn * (lb + META_BYTES + LOCK_BYTES + COUNT_BYTES))
                                 + STATS_WORDS * WORD + epochs_bytes(layout["epochs"])
                                 + (VERBS_BUFFER if opts["retrain_synonyms"] else 0))   # the retrainer registers it
        return layout

    @staticmethod
    def _publish(fabric, remote: Remote, table: bytes) -> None:
        """Write a model table on the first memory node, then the header word that points to it."""
        m = remote.nodes[0]
        try:
            off = fabric.allocate(m, len(table))
        except MemoryError as e:
            raise SystemGaveUp(f"ROLEX: the model table ({len(table)} B) does not fit memory node {m}: {e}") from None
        fabric.memory[m].host[off:off + len(table)] = np.frombuffer(table, np.uint8)
        fabric.memory[m].host64[(remote.regions[0] + WORD) // 8] = gaddr(m, off)

    @classmethod
    def bulk_load(cls, fabric, layout: dict, pairs) -> None:
        """Lay out the sorted ``pairs`` as ROLEX's bulk load does (core.RolexIndex: eps-PLA models,
        each owning its leaves, ``fill`` keys a leaf), over the empty index setup made."""
        remote = Remote(layout)
        M = len(remote.nodes)
        span, lb = remote.span, remote.leaf_bytes
        for j, m in enumerate(remote.nodes):
            host64 = fabric.memory[m].host64
            used = int(host64[remote.regions[j] // 8])
            first = (remote.regions[j] + REGION_HEADER_BYTES) // 8
            if (host64[first:first + used * 2 * span:2 * span] != EMPTY).any():
                raise SystemGaveUp("ROLEX: a bulk load needs the empty index setup made; this one holds keys")
        inline = layout["values"] == "inline"
        items = []
        for key, value in pairs:
            try:
                k = key_int(key)
            except ValueError as e:
                raise SystemGaveUp(str(e)) from None
            if inline and len(value) != 8:
                raise SystemGaveUp(f"ROLEX with values = \"inline\" stores 8-byte values; got {len(value)} bytes")
            if len(value) > MAX_VALUE:
                raise SystemGaveUp(f"ROLEX values are at most {MAX_VALUE} bytes; got {len(value)}")
            items.append((k, bytes(value)))
        if not items:
            return
        items.sort(key=lambda it: it[0])
        for a, b in zip(items, items[1:]):
            if a[0] == b[0]:
                raise SystemGaveUp(f"ROLEX: bulk load of key {a[0].to_bytes(8, 'big')!r} twice")
        keys = np.array([k for k, _ in items], dtype=np.uint64)
        words = cls._value_words(fabric, remote, [v for _, v in items], inline)
        index = RolexIndex(keys, words, eps=layout["eps"], fill=layout["fill"], span=span)
        # the core's leaves (arrays indexed by leaf number) and models; nothing else of it is kept
        primaries, lk, lv = index.primary_leaves, index.leaf_keys, index.leaf_values
        if -(-primaries // M) > remote.leaves_per_node:
            raise SystemGaveUp(f"ROLEX: the bulk load needs {primaries} leaves, the regions hold "
                               f"{remote.leaves_per_node} per memory node: raise the option leaf_headroom")
        for j, m in enumerate(remote.nodes):
            count = len(range(j, primaries, M))
            host64 = fabric.memory[m].host64
            base = (remote.regions[j] + REGION_HEADER_BYTES) // 8
            img = host64[base:base + count * 2 * span].reshape(count, 2 * span)
            img[:, :span] = lk[j:primaries:M]
            img[:, span:] = lv[j:primaries:M]
            raw = fabric.memory[m].host
            t = remote.tables[j] // 8
            for i in range(count):
                cs = leaf_checksum(raw, remote.regions[j] + REGION_HEADER_BYTES + i * lb, lb)
                host64[t + i] = pack_meta(cs, NO_SYNONYM)
            # leaves of the empty index beyond these are free again (a synonym leaf is written whole);
            # the models' synonym counts start at 0
            host64[remote.regions[j] // 8] = count
            host64[remote.counts[j] // 8:remote.counts[j] // 8 + remote.leaves_per_node] = 0
        fences = lk[:primaries, 0].tolist()
        cls._publish(fabric, remote, table_image(index.segments, index.first_leaves, fences, layout["eps"], layout["fill"],
                                                 epoch=1))

    @staticmethod
    def _value_words(fabric, remote: Remote, values: list, inline: bool) -> np.ndarray:
        """Each value's word: inline, the value; out of line, a block per value, round-robin over
        the memory nodes, one allocation per node."""
        if inline:
            return np.array([int.from_bytes(v, "little") for v in values], dtype=np.uint64)
        M = len(remote.nodes)
        need = [0] * M
        for i, v in enumerate(values):
            need[i % M] += value_units(len(v)) * 64
        base = []
        for j, m in enumerate(remote.nodes):
            try:
                base.append(fabric.allocate(m, need[j]) if need[j] else 0)
            except MemoryError as e:
                raise SystemGaveUp(f"ROLEX: the bulk load's values do not fit memory node {m}: {e}") from None
        pos = list(base)
        out = np.zeros(len(values), dtype=np.uint64)
        for i, v in enumerate(values):
            j = i % M
            m = remote.nodes[j]
            fabric.memory[m].host[pos[j]:pos[j] + len(v)] = np.frombuffer(v, np.uint8)
            out[i] = value_word(len(v), m, pos[j])
            pos[j] += value_units(len(v)) * 64
        return out

    @classmethod
    def client(cls, fabric, layout: dict, thread, options: dict) -> RolexClient:
        if layout.get("system") != cls.name or layout.get("format") != LAYOUT_FORMAT:
            raise SystemGaveUp(f"ROLEX: layout is not a rolex layout of format {LAYOUT_FORMAT}: "
                               f"{layout.get('system')!r}/{layout.get('format')!r}")
        return RolexClient(fabric, layout, thread, options)
