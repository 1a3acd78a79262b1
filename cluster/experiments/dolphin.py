"""``dmrack reproduce dolphin``: Dolphin (MSST'24) against Sherman, Marlin and SMART-ART, scaled down.

Dolphin is a hybrid index on disaggregated memory: ART internal nodes cached on the compute
nodes over B+-tree-like leaves of 65 entries that hold the keys sharing their first 7 bytes, with
an update as one in-place WRITE of the value between two FAAs on the leaf's lock word. Its
evaluation (§IV) sweeps the compute nodes' index-cache size (Fig. 6), compares throughput and
latency with a large cache (Fig. 7), scans (Fig. 8), two Twitter cache traces (Fig. 9) and the
memory each index takes (Table II). docs/dolphin.md ("Reproduction") says how to run it, why the
figures survive the scaling and which published value each row carries.

**Scale.** The paper runs 4 compute and 4 memory servers (100 Gb/s ConnectX-5), 18 client
threads per compute server, 8-byte keys and values, and warms the index up with 512 M items that
fill half of the integer key space. Here: ``cx5-100g``, 4 compute nodes x 18 threads (one
coroutine each) and 4 memory nodes, 8-byte keys and values, integer keys in a dense key space
twice the item count (the YCSB properties ``keyspace`` and ``keyorder = big``: keys are 1..K in
big-endian bytes, half of them loaded at random positions, so that neighbouring keys share a
Dolphin leaf as in the paper; Dolphin's own index as its benchmark loads it, the lower half of the
key space full: :data:`ORDERED_LOAD`), :data:`RECORDS` items instead of 512 M (2^29). Every
index-cache size of the paper is multiplied by the same factor ``scale = items / 2^29``
(:func:`scaled_cache_bytes`), so a cache holds the same fraction of each index as in the paper;
Sherman's cache counts nodes, 1 KB each (as Sherman's code sizes it). Zipfian keys
draw from 2^29 items hashed onto the loaded ones (``zipfianitems``), so the hottest keys are as
hot as in the paper. Windows of virtual milliseconds (:data:`WINDOWS_MS`).

Experiments:

* ``fig6``: YCSB A throughput against the index-cache size (the paper's 50-800 MB, scaled; with
  ``--quick`` only 50, 200 and 800 MB, the sizes the published rows name) for
  Sherman, SMART-ART and Dolphin at zipf 0.99 (``fig6a``), zipf 0.8 (``fig6b``: the paper does not
  name its lower skew) and uniform keys (``fig6c``); one rack (one load) per system and cache size
  runs all three; ratio rows at 200 and 800 MB;
* ``fig7``: YCSB A (zipf 0.99), C (zipf 0.99) and LOAD with a 2000 MB (scaled) cache: Mops, p50,
  p99 of all four; LOAD is the rack's load step itself (inserts into an empty index, as the paper's
  LOAD runs without warm-up);
* ``fig8``: range-only and range-write (uniform keys, scans of 1-100 items) on the same racks as
  ``fig7`` (run after A and C; range-write last, since it inserts);
* ``fig9``: synthetic stand-ins for Twitter's cluster8 (write-intensive) and cluster9 (read-only)
  traces (:mod:`workloads.twitter_synth`, replayed by :mod:`workloads.traces`), one rack per
  system and trace;
* ``table2``: the compute-node cache an index needs for its best performance and the memory-node
  memory it takes, from ``System.memory_use`` after a load and a uniform read run with a cache
  large enough for the whole index: "cache needed for best performance" is the cache in use when
  all of the index's cacheable nodes fit; both scaled back up by ``1 / scale``.

The systems are a module constant (:data:`SYSTEMS`: series label -> registered system name);
every experiment function takes ``systems=`` (a dict overriding some of them, e.g. every series
on ``sherman``) and keyword overrides of its sizes, so the tests run each on a tiny rack.
"""

from __future__ import annotations

import os
import tempfile

from cluster.experiments.figures import Figure
from cluster.experiments.pointpool import SharedPoints, map_points
from cluster.experiments.progress import prefixed
from cluster.experiments.rows import Row, reproduction, scale_row
from nodes.systems.sherman.client import CACHED_NODE_BYTES

PROFILE = "cx5-100g"
COMPUTE = 4                      # compute nodes (the paper's compute servers)
MEMORY = 4                       # memory nodes
THREADS = 18                     # client threads per compute node
PAPER_ITEMS = 1 << 29            # the paper's 512 M warm-up items ("50 % full" key space)
PAPER_COMPUTE, PAPER_THREADS = 4, 18
# items loaded (key space: twice as many); chosen so that --quick runs in under 10 minutes with
# --jobs 2 on a 2-core machine (docs/dolphin.md, "Reproduction", has the measured times)
RECORDS = {True: 16_384, False: 65_536}
# (warm-up, window) in virtual ms
WINDOWS_MS = {True: (0.5, 0.5), False: (1.0, 1.0)}
TRACE_ROWS = {True: 200_000, False: 1_000_000}
# SMART's and Dolphin's code (include/Common.h): ALLOC_ALLIGN_BIT 8, every aligned allocation starts
# at a 256-byte boundary (include/LocalAllocator.h)
CODE_ALLOC_ALIGN = 256
# table2: bytes of cache per compute node, more than any index here needs (SMART-ART's 5200 MB
# scaled is 162 KB with --quick, 650 KB without) and small enough should a system allocate its
# whole budget up front
UNLIMITED_CACHE = 16 << 20

#: series label -> registered system name (the paper's four indexes)
SYSTEMS = {"Sherman": "sherman", "Marlin": "marlin", "SMART-ART": "smart-art", "Dolphin": "dolphin"}
FIG6_SERIES = ("Sherman", "SMART-ART", "Dolphin")      # Fig. 6 (Marlin "little different from Sherman")
CACHE_MB = (50, 100, 200, 400, 800)                     # Fig. 6's x axis (paper MB)
# --quick: the points the published rows name (50, 200, 800 MB), to stay under 10 minutes
QUICK_CACHE_MB = (50, 200, 800)
LARGE_CACHE_MB = 2000                                   # Fig. 7 and 8
FIG6_SKEWS = {"fig6a": ("zipf 0.99", {"requestdistribution": "zipfian", "zipfianconstant": 0.99}),
              "fig6b": ("zipf 0.8", {"requestdistribution": "zipfian", "zipfianconstant": 0.8}),
              "fig6c": ("uniform", {"requestdistribution": "uniform"})}
TRACES = {"cluster8": "write-intensive", "cluster9": "read-only"}
# Systems whose own benchmark loads keys 1..N in increasing order: Dolphin's README runs
# ``./benchmark``, whose warm-up inserts ``int2key(i)`` for i = 1 .. kWarmRatio x kKeySpace, each
# of the threads its residue class (hust-anhang/Dolphin, test/benchmark.cpp), so the lower half of
# the key space is full and the upper half empty. Sherman's benchmark (and SMART's, the base of
# SMART-ART's) loads ``CityHash64(i) % kKeySpace``: pseudo-random positions, as ``_keys`` does.
# Each index is loaded as its own code loads it (the workload property ``loadorder``); the paper's
# LOAD runs without a warm-up, from YCSB's files (keys at random places), so fig7's LOAD of these
# systems is a rack of its own.
ORDERED_LOAD = frozenset({"dolphin"})

# --- published values (Dolphin §IV as its text states them; docs/dolphin.md) -----------------------
PUB_FIG6_800 = {"Sherman": 1.51, "SMART-ART": 1.32}     # Dolphin / X at 800 MB, Fig. 6a
PUB_FIG6_200_RANGE = (1.16, 3.26)                        # Dolphin / the others at 200 MB, over Fig. 6
PUB_FIG7_A_RANGE = (1.25, 1.45)                          # Dolphin / each other, YCSB A
PUB_FIG7_A_P50 = 5.5                                     # Dolphin's p50 on YCSB A, µs
PUB_FIG7_A_P50_GAP = (1.4, 2.5)                          # others' p50 - Dolphin's, µs
PUB_FIG7_C_MARLIN_P50_GAP = 2.4                          # Marlin's p50 - Dolphin's on C, µs
PUB_FIG7_C_SMART_P99_GAP = 10.0                          # SMART-ART's p99 - others', µs ("~10")
PUB_FIG7_LOAD = 1.54                                     # Dolphin / SMART-ART on LOAD
PUB_FIG7_LOAD_P50_GAP = 8.0                              # SMART-ART's p50 - Dolphin's on LOAD, µs
PUB_FIG8 = {"Dolphin / Marlin": 4.38, "Dolphin / SMART-ART": 22.4, "Marlin / SMART-ART": 5.11,
            "Dolphin / Sherman": 1.0}                    # range-only
PUB_TABLE2 = {"Sherman": (460, 12), "Marlin": (460, 26), "SMART-ART": (5200, 156), "Dolphin": (320, 14)}


def scale_of(records: int) -> float:
    """Emulated items over the paper's 512 M."""
    return records / PAPER_ITEMS


def scaled_cache_bytes(paper_mb: float, records: int) -> int:
    """The paper's ``paper_mb`` of index cache, scaled by the item count."""
    return max(1, int(round(paper_mb * (1 << 20) * scale_of(records))))


def system_options(system: str, cache_bytes: int) -> dict:
    """The [system] options of ``system`` with an index cache of ``cache_bytes`` per compute node:
    Sherman counts internal nodes (``cache_nodes``, at least 1: 0 would turn its cache off),
    the others take bytes; Dolphin stores the paper's 8-byte values; SMART-ART allocates every
    internal node at NODE_256 size, as SMART's code does (its memory in Table II; reads and the
    cache still use each node's own size); SMART-ART and Dolphin start their allocations at
    256-byte boundaries as their code does (``ALLOC_ALLIGN_BIT`` 8: SMART-ART's leaves and nodes,
    Dolphin's nodes; their memory in Table II)."""
    if system == "sherman":
        return {"cache_nodes": max(1, cache_bytes // CACHED_NODE_BYTES)}
    opts = {"cache_bytes": int(cache_bytes)}
    if system == "dolphin":
        opts["value_bytes"] = 8
        opts["alloc_align"] = CODE_ALLOC_ALIGN
    if system == "smart-art":
        opts["full_nodes"] = True
        opts["alloc_align"] = CODE_ALLOC_ALIGN
    return opts


def _systems(systems: dict | None) -> dict:
    got = {**SYSTEMS, **(systems or {})}
    unknown = [k for k in got if k not in SYSTEMS]
    if unknown:
        raise ValueError(f"unknown series {unknown[0]!r}; the series are {', '.join(SYSTEMS)}")
    return got


def _keys(records: int, ordered: bool = False) -> dict:
    """The workload properties of the paper's keys: 8-byte integers in a key space twice the items
    (half full), compared as big-endian bytes; 8-byte values. ``ordered``: the items are keys 1..N,
    loaded in increasing order (Dolphin's own benchmark, :data:`ORDERED_LOAD`), instead of at
    pseudo-random positions of the key space."""
    keys = {"recordcount": records, "keysize": 8, "valuesize": 8, "keyspace": 2 * records, "keyorder": "big"}
    if ordered:
        keys["loadorder"] = "ordered"
    return keys


def scenario(system: str, cache_bytes: int, workloads: dict[str, dict], *, records: int, warm_ms: float,
             measure_ms: float, compute: int | None = None, memory: int | None = None,
             threads: int | None = None, seed: int = 1, load: str = "default", ordered: bool = False) -> dict:
    """A rack of ``system`` with ``cache_bytes`` of index cache per compute node: load the items by
    inserts (as the paper's warm-up; also its LOAD workload), then per named workload (name ->
    its properties, a ``preset`` among them, or a ``trace``) a warm-up run and a measured run.
    ``ordered``: the items are keys 1..N loaded in increasing order (:func:`_keys`)."""
    compute, memory, threads = compute or COMPUTE, memory or MEMORY, threads or THREADS
    steps = [{"action": "load", "bulk": False, "workload": "default"}]
    for name in workloads:
        steps += [{"action": "run", "workload": _table(name, load), "duration_ms": warm_ms},
                  {"action": "run", "workload": _table(name, load), "duration_ms": measure_ms}]
    keys = _keys(records, ordered)
    tables = {}
    for name, props in workloads.items():
        tables[name] = dict(props) if "trace" in props else {**keys, "zipfianitems": PAPER_ITEMS, **props}
    default = tables[load] if load in tables else {"preset": "load", **keys}
    return {
        "rack": {"name": "reproduce-dolphin", "profile": PROFILE, "seed": seed},
        "compute": {"count": compute, "threads": threads, "coroutines": 1, "memory": "64MiB"},
        "memory": {"count": memory, "memory": "256MiB"},
        "system": {"name": system, **system_options(system, cache_bytes)},
        "workload": default,
        "workloads": {_table(n, load): t for n, t in tables.items() if n != load},
        "step": steps,
    }


def _table(name: str, load: str) -> str:
    """The scenario's name of workload ``name`` (the one loaded is the default workload; a rack's
    workload may not be named like a preset, "a" or "range-only")."""
    return "default" if name == load else f"w-{name}"


def _step_point(step, window_ms: float | None) -> dict:
    every = next(kf for kf in step.kinds if kf.kind == "all")
    mops = step.ops / (window_ms * 1e3) if window_ms else step.mops
    return {"mops": mops, "p50_us": every.p50_us, "p99_us": every.p99_us, "ops": step.ops}


def measure(system: str, cache_bytes: int, workloads: dict[str, dict], **kw) -> dict:
    """Run :func:`scenario` co-located (deterministic). Returns ``{"load": point, name: point,
    "memory": (cache bytes per compute node, memory-node bytes) or None}``; a point is Mops, p50
    and p99 (µs) and operations of a step (the load step over its own span, a run step over its
    window)."""
    from cluster.rack import ColocatedRack
    from cluster.scenario import scenario_from_dict
    doc = scenario(system, cache_bytes, workloads, **kw)
    rack = ColocatedRack(scenario_from_dict(doc, source="reproduce dolphin"))
    res = rack.run()
    by_index = {s.index: s for s in res.steps}
    out = {"load": _step_point(by_index[1], None)}
    for k, name in enumerate(workloads):
        out[name] = _step_point(by_index[3 + 2 * k], kw["measure_ms"])
    out["memory"] = _memory(rack)
    return out


def _memory(rack) -> tuple[float, int, int] | None:
    """``System.memory_use`` of the rack after its run: (cache bytes per compute node, memory-node
    bytes, of which ``setup`` carved), None when the system's statistics do not carry the fields."""
    nodes = rack.nodes
    if not nodes:
        return None
    system, layout = nodes[0].system, nodes[0].layout
    use = getattr(system, "memory_use", None)
    if use is None:
        return None
    got = use(layout, {n.name: [c.statistics() for c in n.clients] for n in nodes})
    if got is None:
        return None
    setup = int((layout or {}).get("setup_bytes", 0) or 0)
    return got.cache_bytes / len(nodes), got.memory_bytes, setup


def _point(label: str, system: str, cache_bytes: int, workloads: dict, kw: dict) -> dict:
    """A rack of ``system``, its items loaded as its own benchmark loads them (:data:`ORDERED_LOAD`)."""
    return measure(system, cache_bytes, workloads, **{"ordered": system in ORDERED_LOAD, **kw})


def _sizes(quick: bool, records, warm_ms, measure_ms, compute, threads) -> dict:
    warm, win = WINDOWS_MS[quick]
    compute = compute or COMPUTE
    return {"records": records or RECORDS[quick], "warm_ms": warm if warm_ms is None else warm_ms,
            "measure_ms": win if measure_ms is None else measure_ms, "compute": compute,
            "memory": MEMORY if compute == COMPUTE else compute, "threads": threads or THREADS}


def _paper_shape(kw: dict) -> bool:
    """Whether a rack has the paper's shape (4 compute nodes x 18 threads): only then do rows carry
    a published value (a tiny test rack compares with nothing)."""
    return kw["compute"] == PAPER_COMPUTE and kw["threads"] == PAPER_THREADS


def _scale_row(experiment: str, records: int) -> Row:
    # 1 / scale: the factor itself (about 3e-5) would print as 0.00
    return scale_row(experiment, f"scale: {records:,} items / 512 M (2^29)", "-", "1 / scale", 1 / scale_of(records))


def _ratio(a, b):
    return a / b if a and b else None


# --- Fig. 6: throughput against the index-cache size --------------------------------------------

def fig6(quick: bool, progress, *, systems=None, records=None, warm_ms=None, measure_ms=None,
         compute: int | None = None, threads: int | None = None, cache_mb=None, jobs: int = 1) -> list[Row]:
    """YCSB A by index-cache size (paper MB, scaled), Sherman, SMART-ART, Dolphin, at zipf 0.99
    (fig6a), zipf 0.8 (fig6b) and uniform (fig6c). Published: Dolphin 1.16x-3.26x the others at
    200 MB; at 800 MB (6a) 1.51x Sherman and 1.32x SMART-ART; Dolphin with 50 MB reaches what the
    others reach with 200 MB."""
    sysmap = _systems(systems)
    kw = _sizes(quick, records, warm_ms, measure_ms, compute, threads)
    n = kw["records"]
    cache_mb = tuple(cache_mb or (QUICK_CACHE_MB if quick else CACHE_MB))
    workloads = {fig: {"preset": "a", **props} for fig, (_, props) in FIG6_SKEWS.items()}
    points = [(f"{label}, {mb} MB", sysmap[label], scaled_cache_bytes(mb, n), workloads, kw)
              for label in FIG6_SERIES for mb in cache_mb]
    got = iter(map_points(_point, points, jobs=jobs, progress=prefixed(progress, "fig6: "),
                          describe=lambda p: p[0]))
    mops = {}
    for label in FIG6_SERIES:
        for mb in cache_mb:
            p = next(got)
            for fig in FIG6_SKEWS:
                mops[(fig, label, mb)] = p[fig]["mops"]
    paper = _paper_shape(kw)
    rows = []
    for fig, (skew, _) in FIG6_SKEWS.items():
        rows.append(_scale_row(fig, n))
        for mb in cache_mb:
            b = scaled_cache_bytes(mb, n)
            rows.append(Row(fig, "index cache per compute node, emulated", mb, "KB", b / 1024))
        for label in FIG6_SERIES:
            for mb in cache_mb:
                rows.append(Row(fig, f"{label}, YCSB A {skew}", mb, "Mops", mops[(fig, label, mb)]))
        for other in ("Sherman", "SMART-ART"):
            for mb in (200, 800):
                if mb not in cache_mb:
                    continue
                pub = PUB_FIG6_800.get(other) if (fig == "fig6a" and mb == 800 and paper) else None
                rows.append(Row(fig, f"Dolphin / {other}", mb, "Mops ratio",
                                _ratio(mops[(fig, "Dolphin", mb)], mops[(fig, other, mb)]), pub))
        if 200 in cache_mb and 50 in cache_mb:
            best200 = max(mops[(fig, o, 200)] for o in ("Sherman", "SMART-ART"))
            rows.append(Row(fig, "Dolphin at 50 MB / best other at 200 MB", "50 vs 200", "Mops ratio",
                            _ratio(mops[(fig, "Dolphin", 50)], best200), 1.0 if paper else None))
    if 200 in cache_mb:
        ratios = [_ratio(mops[(fig, "Dolphin", 200)], mops[(fig, o, 200)]) for fig in FIG6_SKEWS
                  for o in ("Sherman", "SMART-ART")]
        ratios = [r for r in ratios if r is not None]
        lo, hi = PUB_FIG6_200_RANGE if paper else (None, None)
        rows.append(Row("fig6", "Dolphin / others at 200 MB, min over 6a-6c", 200, "Mops ratio",
                        min(ratios) if ratios else None, lo))
        rows.append(Row("fig6", "Dolphin / others at 200 MB, max over 6a-6c", 200, "Mops ratio",
                        max(ratios) if ratios else None, hi))
    # the paper's directions without values: Sherman gains with less skew (fewer write conflicts);
    # SMART-ART is clearly lower on uniform keys than at zipf 0.99 (its cache covers less of them)
    big = max(cache_mb)
    rows.append(Row("fig6", "Sherman: zipf 0.8 / zipf 0.99", big, "Mops ratio (published: > 1)",
                    _ratio(mops[("fig6b", "Sherman", big)], mops[("fig6a", "Sherman", big)])))
    rows.append(Row("fig6", "SMART-ART: uniform / zipf 0.99", big, "Mops ratio (published: < 1)",
                    _ratio(mops[("fig6c", "SMART-ART", big)], mops[("fig6a", "SMART-ART", big)])))
    return rows


# --- Fig. 7 and 8: a large cache ---------------------------------------------------------------------

FIG7_WORKLOADS = {"A": {"preset": "a", "requestdistribution": "zipfian", "zipfianconstant": 0.99},
                  "C": {"preset": "c", "requestdistribution": "zipfian", "zipfianconstant": 0.99}}
FIG8_WORKLOADS = {"range-only": {"preset": "range-only"}, "range-write": {"preset": "range-write"}}


def _large(quick: bool, progress, shared: SharedPoints | None, *, systems=None, records=None, warm_ms=None,
           measure_ms=None, compute: int | None = None, threads: int | None = None, jobs: int = 1) -> dict:
    """The racks of fig7 and fig8 (one per system: load, A, C, range-only, range-write), measured
    once per run and arguments (``shared``) since both experiments read them."""
    sysmap = _systems(systems)
    kw = _sizes(quick, records, warm_ms, measure_ms, compute, threads)
    key = (quick, tuple(sorted(sysmap.items())), tuple(sorted(kw.items())))

    def large():
        workloads = {**FIG7_WORKLOADS, **FIG8_WORKLOADS}
        cache = scaled_cache_bytes(LARGE_CACHE_MB, kw["records"])
        points = [(f"{label}, {LARGE_CACHE_MB} MB", system, cache, workloads, kw) for label, system in sysmap.items()]
        # LOAD is the load step of each rack, but of a rack of its own (keys at random places)
        # for an index whose warm-up loads its keys in order
        loads = [label for label, system in sysmap.items() if system in ORDERED_LOAD]
        points += [(f"{label}, LOAD", sysmap[label], cache, {}, {**kw, "ordered": False}) for label in loads]
        got = map_points(_point, points, jobs=jobs, progress=progress, describe=lambda p: p[0])
        racks = dict(zip(sysmap, got))
        for label, p in zip(loads, got[len(sysmap):]):
            racks[label] = {**racks[label], "load": p["load"]}
        return racks, kw
    return (shared if shared is not None else SharedPoints()).once(key, large)


def fig7(quick: bool, progress, *, jobs: int = 1, shared: SharedPoints | None = None, **kw) -> list[Row]:
    """YCSB A and C (zipf 0.99) and LOAD with a 2000 MB cache (scaled): Mops, p50, p99 of all four.
    Published: Dolphin 1.25x-1.45x the others on A, p50 5.5 µs (1.4-2.5 µs below the others);
    C: Sherman ~ Dolphin; LOAD: SMART-ART ~1.54x lower, p50 +8 µs."""
    got, sizes = _large(quick, prefixed(progress, "fig7: "), shared, jobs=jobs, **kw)
    paper = _paper_shape(sizes)
    n = sizes["records"]
    rows = [_scale_row("fig7", n),
            Row("fig7", "index cache per compute node, emulated", LARGE_CACHE_MB, "KB",
                scaled_cache_bytes(LARGE_CACHE_MB, n) / 1024)]
    for wl, step in (("A", "A"), ("C", "C"), ("LOAD", "load")):
        for label in SYSTEMS:
            p = got[label][step]
            pub50 = PUB_FIG7_A_P50 if (wl == "A" and label == "Dolphin" and paper) else None
            rows.append(Row("fig7", f"{label}, YCSB {wl}", LARGE_CACHE_MB, "Mops", p["mops"]))
            rows.append(Row("fig7", f"{label}, YCSB {wl}", LARGE_CACHE_MB, "p50 µs", p["p50_us"], pub50))
            rows.append(Row("fig7", f"{label}, YCSB {wl}", LARGE_CACHE_MB, "p99 µs", p["p99_us"]))
    m = {(label, s): got[label][s] for label in SYSTEMS for s in ("A", "C", "load")}
    others = [o for o in SYSTEMS if o != "Dolphin"]
    a = [_ratio(m[("Dolphin", "A")]["mops"], m[(o, "A")]["mops"]) for o in others]
    for o, r in zip(others, a):
        rows.append(Row("fig7", f"Dolphin / {o}, YCSB A", LARGE_CACHE_MB, "Mops ratio", r))
    a = [r for r in a if r is not None]
    lo, hi = PUB_FIG7_A_RANGE if paper else (None, None)
    rows.append(Row("fig7", "Dolphin / others, YCSB A, min", LARGE_CACHE_MB, "Mops ratio", min(a) if a else None, lo))
    rows.append(Row("fig7", "Dolphin / others, YCSB A, max", LARGE_CACHE_MB, "Mops ratio", max(a) if a else None, hi))
    gaps = [_diff(m[(o, "A")]["p50_us"], m[("Dolphin", "A")]["p50_us"]) for o in others]
    gaps = [g for g in gaps if g is not None]
    lo, hi = PUB_FIG7_A_P50_GAP if paper else (None, None)
    rows.append(Row("fig7", "others - Dolphin, YCSB A, min", LARGE_CACHE_MB, "p50 gap µs",
                    min(gaps) if gaps else None, lo))
    rows.append(Row("fig7", "others - Dolphin, YCSB A, max", LARGE_CACHE_MB, "p50 gap µs",
                    max(gaps) if gaps else None, hi))
    rows.append(Row("fig7", "Sherman / Dolphin, YCSB C", LARGE_CACHE_MB, "Mops ratio",
                    _ratio(m[("Sherman", "C")]["mops"], m[("Dolphin", "C")]["mops"]), 1.0 if paper else None))
    rows.append(Row("fig7", "Marlin - Dolphin, YCSB C", LARGE_CACHE_MB, "p50 gap µs",
                    _diff(m[("Marlin", "C")]["p50_us"], m[("Dolphin", "C")]["p50_us"]),
                    PUB_FIG7_C_MARLIN_P50_GAP if paper else None))
    rest = [m[(o, "C")]["p99_us"] for o in SYSTEMS if o != "SMART-ART" and m[(o, "C")]["p99_us"] is not None]
    rows.append(Row("fig7", "SMART-ART - mean of the others, YCSB C", LARGE_CACHE_MB, "p99 gap µs",
                    _diff(m[("SMART-ART", "C")]["p99_us"], sum(rest) / len(rest) if rest else None),
                    PUB_FIG7_C_SMART_P99_GAP if paper else None))
    rows.append(Row("fig7", "Dolphin / SMART-ART, YCSB LOAD", LARGE_CACHE_MB, "Mops ratio",
                    _ratio(m[("Dolphin", "load")]["mops"], m[("SMART-ART", "load")]["mops"]),
                    PUB_FIG7_LOAD if paper else None))
    rows.append(Row("fig7", "SMART-ART - Dolphin, YCSB LOAD", LARGE_CACHE_MB, "p50 gap µs",
                    _diff(m[("SMART-ART", "load")]["p50_us"], m[("Dolphin", "load")]["p50_us"]),
                    PUB_FIG7_LOAD_P50_GAP if paper else None))
    return rows


def _diff(a, b):
    return a - b if a is not None and b is not None else None


def fig8(quick: bool, progress, *, jobs: int = 1, shared: SharedPoints | None = None, **kw) -> list[Row]:
    """range-only (scans of 1-100 items) and range-write (half scans, half inserts), uniform keys,
    2000 MB cache (scaled), all four. Published (range-only): Dolphin ~ Sherman, 4.38x Marlin and
    22.4x SMART-ART; Marlin 5.11x SMART-ART. range-write: Marlin, SMART-ART and Dolphin slightly up
    from range-only, Sherman slightly down (no values given)."""
    got, sizes = _large(quick, prefixed(progress, "fig8: "), shared, jobs=jobs, **kw)
    paper = _paper_shape(sizes)
    rows = [_scale_row("fig8", sizes["records"])]
    for wl in FIG8_WORKLOADS:
        for label in SYSTEMS:
            p = got[label][wl]
            rows.append(Row("fig8", f"{label}, {wl}", LARGE_CACHE_MB, "Mops", p["mops"]))
            rows.append(Row("fig8", f"{label}, {wl}", LARGE_CACHE_MB, "p50 µs", p["p50_us"]))
            rows.append(Row("fig8", f"{label}, {wl}", LARGE_CACHE_MB, "p99 µs", p["p99_us"]))
    for name, pub in PUB_FIG8.items():
        a, b = name.split(" / ")
        rows.append(Row("fig8", f"{name}, range-only", LARGE_CACHE_MB, "Mops ratio",
                        _ratio(got[a]["range-only"]["mops"], got[b]["range-only"]["mops"]), pub if paper else None))
    for label in SYSTEMS:
        rows.append(Row("fig8", f"{label}: range-write / range-only", LARGE_CACHE_MB,
                        "Mops ratio (published: < 1 Sherman, > 1 others)",
                        _ratio(got[label]["range-write"]["mops"], got[label]["range-only"]["mops"])))
    return rows


# --- Fig. 9: Twitter-trace stand-ins -------------------------------------------------------------

def make_traces(directory: str, records: int, rows: int) -> dict[str, str]:
    """Write the cluster8-like and cluster9-like synthetic traces (workloads.twitter_synth presets)
    over ``records`` keys into ``directory``; returns name -> path."""
    from workloads.twitter_synth import PRESETS, write_trace
    out = {}
    for name in TRACES:
        path = os.path.join(directory, f"{name}-{records}-{rows}.csv")
        if not os.path.exists(path):
            write_trace(path, PRESETS[name]._replace(keys=records, rows=rows))
        out[name] = path
    return out


def _trace_workload(path: str, records: int) -> dict:
    # 8-byte values as the paper's; the trace's keys in the dense big-endian key space (twice the
    # items); the load inserts the keys the trace presumes present and fillers up to the item
    # count, so the index is as full as the YCSB racks' (the trace inserts the rest of its keys)
    return {"trace": path, "loop": True, "keysize": 8, "valuesize": 8, "valuesizes": "fixed",
            "minvaluesize": 8, "keyspace": 2 * records, "keyorder": "big", "recordcount": records}


def fig9(quick: bool, progress, *, systems=None, records=None, warm_ms=None, measure_ms=None,
         compute: int | None = None, threads: int | None = None, trace_rows=None, trace_dir=None,
         jobs: int = 1) -> list[Row]:
    """The synthetic cluster8-like (write-intensive) and cluster9-like (read-only) traces, 2000 MB
    cache (scaled), all four. Published (directions only): cluster8 Dolphin best; cluster9
    Sherman slightly above Dolphin."""
    sysmap = _systems(systems)
    kw = _sizes(quick, records, warm_ms, measure_ms, compute, threads)
    n = kw["records"]
    directory = trace_dir or os.path.join(tempfile.gettempdir(), "dmrack-dolphin-traces")
    os.makedirs(directory, exist_ok=True)
    paths = make_traces(directory, n, trace_rows or TRACE_ROWS[quick])
    cache = scaled_cache_bytes(LARGE_CACHE_MB, n)
    points = [(f"{label}, {trace}", system, cache, {trace: _trace_workload(paths[trace], n)},
               {**kw, "load": trace}) for trace in TRACES for label, system in sysmap.items()]
    got = iter(map_points(_trace_point, points, jobs=jobs, progress=prefixed(progress, "fig9: "),
                          describe=lambda p: p[0]))
    rows = [_scale_row("fig9", n)]
    mops = {}
    for trace, kind in TRACES.items():
        for label in SYSTEMS:
            p = next(got)[trace]
            mops[(trace, label)] = p["mops"]
            series, x = f"{label}, {trace}-like", f"{trace}-like ({kind}, synthetic)"
            rows.append(Row("fig9", series, x, "Mops", p["mops"]))
            rows.append(Row("fig9", series, x, "p50 µs", p["p50_us"]))
            rows.append(Row("fig9", series, x, "p99 µs", p["p99_us"]))
    best8 = max(mops[("cluster8", o)] or 0 for o in SYSTEMS if o != "Dolphin")
    rows.append(Row("fig9", "Dolphin / best other, cluster8-like", "cluster8-like", "Mops ratio (published: > 1)",
                    _ratio(mops[("cluster8", "Dolphin")], best8)))
    rows.append(Row("fig9", "Sherman / Dolphin, cluster9-like", "cluster9-like", "Mops ratio (published: slightly > 1)",
                    _ratio(mops[("cluster9", "Sherman")], mops[("cluster9", "Dolphin")])))
    return rows


def _trace_point(label: str, system: str, cache_bytes: int, workloads: dict, kw: dict) -> dict:
    return measure(system, cache_bytes, workloads, **kw)


# --- Table II: memory ----------------------------------------------------------------------------

TABLE2_WORKLOAD = {"warm": {"preset": "c", "requestdistribution": "uniform"}}
# Table II's items: 4x the figures' racks. The nodes above an index's last cached level are a
# geometric tail at 512 M items (Dolphin's: ~5 % of its cache), but at 16,384 items one root over
# 64 blocks is 16-19 % of it, and table2 scales everything but what ``setup`` carved up with the
# items; at 65,536 they are ~6 % (docs/dolphin.md, "Table II")
TABLE2_RECORDS = {True: 65_536, False: 262_144}


def table2(quick: bool, progress, *, systems=None, records=None, warm_ms=None, measure_ms=None,
           compute: int | None = None, threads: int | None = None, jobs: int = 1) -> list[Row]:
    """Compute-node cache for the best performance (MB) and memory-node memory (GB) per index,
    scaled back up to 512 M items. Published (Table II): Sherman 460 MB / 12 GB, Marlin 460 / 26,
    SMART-ART 5200 / 156, Dolphin 320 / 14. Measured with a cache larger than any index after a
    load and a uniform read run: the cache in use then is all the index caches. Each index is
    loaded as its own benchmark loads it (:data:`ORDERED_LOAD`), with :data:`TABLE2_RECORDS` items."""
    sysmap = _systems(systems)
    kw = _sizes(quick, records or TABLE2_RECORDS[quick], warm_ms, measure_ms, compute, threads)
    n = kw["records"]
    scale = scale_of(n)
    points = [(f"{label}, unlimited cache", system, UNLIMITED_CACHE, TABLE2_WORKLOAD, kw)
              for label, system in sysmap.items()]
    got = map_points(_point, points, jobs=jobs, progress=prefixed(progress, "table2: "), describe=lambda p: p[0])
    rows = [_scale_row("table2", n)]
    cache_mb = {}
    for label, p in zip(sysmap, got):
        mem = p["memory"]
        pub_mb, pub_gb = PUB_TABLE2[label]
        cache_b, mem_b, setup_b = mem if mem is not None else (None, None, 0)
        cache_mb[label] = cache_b / scale / (1 << 20) if cache_b is not None else None
        rows.append(Row("table2", label, "512 M items", "CS cache for best performance, MB (scaled up)",
                        cache_mb[label], pub_mb))
        # what setup carved (roots, lock tables) does not grow with the items: not scaled up
        rows.append(Row("table2", label, "512 M items", "MS memory, GB (scaled up)",
                        ((mem_b - setup_b) / scale + setup_b) / (1 << 30) if mem_b is not None else None, pub_gb))
        rows.append(Row("table2", label, f"{n:,} items", "CS cache in use, KB (emulated)",
                        cache_b / 1024 if cache_b is not None else None))
        rows.append(Row("table2", label, f"{n:,} items", "MS memory, MB (emulated)",
                        mem_b / (1 << 20) if mem_b is not None else None))
    d = cache_mb.get("Dolphin")
    others = [cache_mb[o] for o in SYSTEMS if o != "Dolphin" and cache_mb.get(o) is not None]
    rows.append(Row("table2", "others / Dolphin, min", "512 M items", "CS cache ratio",
                    min(others) / d if others and d else None, 460 / 320))
    rows.append(Row("table2", "others / Dolphin, max", "512 M items", "CS cache ratio",
                    max(others) / d if others and d else None, 5200 / 320))
    return rows


# --- the paper's figures (cluster.experiments.figures; drawn by --plot, dmrack plot, dmrack report) ---

_PERF = (("Mops", "p50 µs", "p99 µs"), ("throughput (Mops)", "p50 latency (µs)", "p99 latency (µs)"))
FIGURES = [
    *[Figure(fig, fig, "Mops", f"Fig. 6{fig[-1]}: YCSB A ({skew}) by index-cache size", "index cache per compute "
             "node (paper MB; emulated: x scale)", "throughput (Mops)",
             series=tuple(f"{s}, YCSB A {skew}" for s in FIG6_SERIES)) for fig, (skew, _) in FIG6_SKEWS.items()],
    Figure("fig7", "fig7", _PERF[0], "Fig. 7: YCSB A, C and LOAD, 2000 MB cache (scaled)", "", _PERF[1],
           ylog=(False, False, True), kind="bar",
           series=tuple(f"{s}, YCSB {w}" for w in ("A", "C", "LOAD") for s in SYSTEMS)),
    Figure("fig8", "fig8", "Mops", "Fig. 8: range-only and range-write (uniform, scans of 1-100 items)", "",
           "throughput (Mops)", kind="bar", series=tuple(f"{s}, {w}" for w in FIG8_WORKLOADS for s in SYSTEMS)),
    Figure("fig9", "fig9", "Mops", "Fig. 9: synthetic cluster8-like and cluster9-like traces", "trace",
           "throughput (Mops)", kind="bar"),
    Figure("table2", "table2", ("CS cache for best performance, MB (scaled up)", "MS memory, GB (scaled up)"),
           "Table II: index cache and memory-node memory per index (512 M items)", "",
           ("compute-node cache (MB)", "memory-node memory (GB)"), kind="bar", ylog=(True, True)),
]


EXPERIMENTS = {"fig6": fig6, "fig7": fig7, "fig8": fig8, "fig9": fig9, "table2": table2}
SIDE_BY_SIDE = tuple(EXPERIMENTS)


def setup(quick: bool) -> dict:
    """The racks of this reproduction, for the run record (cluster.experiments.provenance)."""
    n = RECORDS[quick]
    warm, win = WINDOWS_MS[quick]
    return {"profile": PROFILE, "seed": 1,
            "spec": f"co-located racks: {COMPUTE} compute nodes x {THREADS} threads, {MEMORY} memory nodes; "
                    f"systems {', '.join(f'{k}={v}' for k, v in SYSTEMS.items())}; keys loaded as each system's "
                    f"benchmark loads them: in order ({', '.join(sorted(ORDERED_LOAD))}), else at random places",
            "scale": f"{n:,} items in a key space of {2 * n:,} (paper: 512 M = 2^29 in 2^30), scale "
                     f"{scale_of(n):.3g}: index caches x scale (200 MB -> {scaled_cache_bytes(200, n) / 1024:.1f} KB, "
                     f"2000 MB -> {scaled_cache_bytes(LARGE_CACHE_MB, n) / 1024:.1f} KB); table2 with "
                     f"{TABLE2_RECORDS[quick]:,} items, scaled back up by 1/scale; {warm:g} ms warm-up + "
                     f"{win:g} ms windows (virtual)"}


def check_systems(systems: dict | None = None) -> None:
    """One line (ValueError) naming the systems of the series that are not registered, before
    any rack runs."""
    from nodes.systems import is_known
    missing = sorted({name for name in _systems(systems).values() if not is_known(name)})
    if missing:
        raise ValueError(f"reproduce dolphin needs the systems {', '.join(SYSTEMS.values())}; not registered: "
                         f"{', '.join(missing)}")


EXPERIMENT = reproduction(
    "dolphin", "Dolphin", title="Dolphin (MSST'24): Fig. 6, 7, 8, 9 and Table II against Sherman, Marlin and SMART-ART",
    parts=EXPERIMENTS, side_by_side=SIDE_BY_SIDE, setup=setup, figures=FIGURES, profiles=(PROFILE,),
    check=check_systems,
    # what `dmrack sensitivity dolphin` runs per knob: Fig. 7's throughput of the four indexes and
    # Table II's per-operation cost: about a minute with --quick
    headline=("fig7", "table2"))
