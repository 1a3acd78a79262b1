"""PD3 Fig. 4: Host View lookup throughput on the DPU's Arm cores, step by step.

The cuckoo steps run the real :class:`~nodes.systems.pd3.host_view.CuckooSet` (and a 2-shard
:class:`~nodes.systems.pd3.host_view.HostView`) filled to 80 % load like the paper, look up keys in
batches of 8 through each :class:`~nodes.systems.pd3.host_view.Lookup` mode, and price each batch's
counted work with :mod:`nodes.systems.pd3.dpu_costs` and the profile's ``[dpu]`` constants. Mops =
keys / summed priced time. The table is scaled down (quick: 2^18 buckets, ~0.84 M keys; full: 2^21,
~6.7 M) -- the counts per lookup depend on the load factor and the layout, not on the size -- and
priced as the paper's 100 M-key (~1 GB) table: every bucket read is a DRAM access (the paper's
table is ~60x the DPU's 16 MB LLC; the scaled ones are not -- quick is 8 MB, full 64 MB -- so
this is a choice of what is priced, not a property of the run) and the TLB reach is taken against
1 GB. STL and Abseil are priced from their memory accesses (dpu_costs), not run.

Keys looked up are present keys (Fig. 4 looks up the stored keys); one extra row prices DELAYED on
absent keys (no published value), where every key needs its second bucket.
"""

from __future__ import annotations

import numpy as np

from cluster.experiments.rows import Row
from nodes.systems.pd3 import dpu_costs as dc
from nodes.systems.pd3.host_view import BATCH_MAX, EMPTY, SLOTS, CuckooSet, HostView, Insert, Lookup
from shm.profile import load_profile

LOAD = 0.8
PUBLISHED = {                       # PD3 §5.2, Fig. 4 (Mops, one Arm core unless said)
    "STL unordered_set": 3.7,
    "Abseil flat_hash_set": 6.3,
    "cuckoo basic": None,           # "not faster than Abseil's": no number
    "cuckoo +huge pages": 9.8,
    "cuckoo +batching": 23.4,
    "cuckoo +SIMD": 27.0,
    "cuckoo +delayed hash/search": 27.0 * 1.4,   # "a 40% improvement"
    "cuckoo +2 shards": 70.0,
}
STEPS = [  # (series, mode, page size) of the one-core cuckoo steps
    ("cuckoo basic", Lookup.BASIC, dc.PAGE_4K),
    ("cuckoo +huge pages", Lookup.BASIC, dc.PAGE_2M),
    ("cuckoo +batching", Lookup.BATCHED, dc.PAGE_2M),
    ("cuckoo +SIMD", Lookup.SIMD, dc.PAGE_2M),
    ("cuckoo +delayed hash/search", Lookup.DELAYED, dc.PAGE_2M),
]


def _say(progress, msg: str) -> None:
    if progress is not None:
        progress(msg)


def make_keys(n: int, seed: int) -> np.ndarray:
    """``n`` distinct random 64-bit keys (never the empty-slot marker), in random order."""
    rng = np.random.default_rng(seed)
    keys = np.unique(rng.integers(0, EMPTY, size=n + n // 8 + 16, dtype=np.uint64, endpoint=False))
    rng.shuffle(keys)
    if keys.size < n:
        raise RuntimeError("could not draw enough distinct keys")
    return keys[:n]


def fill(target, keys: np.ndarray) -> np.ndarray:
    """Insert ``keys`` into ``target`` (a CuckooSet or HostView): the keys actually stored."""
    return keys[target.insert_all(keys) != Insert.FULL]


def price_stream(cset: CuckooSet, keys: np.ndarray, mode: Lookup, dpu, page_bytes: int,
                 table_bytes: int = dc.PAPER_TABLE_BYTES) -> tuple[float, int]:
    """Look ``keys`` up in batches of 8 through ``mode``: (priced Arm ns in all, keys found)."""
    total = 0.0
    found_all = 0
    for i in range(0, keys.size, BATCH_MAX):
        batch = keys[i:i + BATCH_MAX]
        found, cost = cset.find_batched(batch, mode)
        hits = int(found.sum())
        found_all += hits
        total += dc.price_lookup(cost, batch.size, hits, mode, dpu, table_bytes=table_bytes,
                                 page_bytes=page_bytes).total_ns
    return total, found_all


def fig4(quick: bool, progress=None, *, buckets: int | None = None, lookups: int | None = None,
         seed: int = 1, profile: str = "bf3") -> list[Row]:
    """The rows of Fig. 4: Mops per step, emulated beside published. ``buckets`` (a power of two)
    and ``lookups`` override the sizes (tests use small ones)."""
    dpu = load_profile(profile).dpu
    if dpu is None:
        raise ValueError(f"profile {profile!r} has no [dpu] table: Fig. 4 prices the DPU's Arm cores")
    buckets = buckets or (1 << 18 if quick else 1 << 21)
    lookups = lookups or (1 << 15 if quick else 1 << 17)
    n_keys = int(LOAD * SLOTS * buckets)

    keys = make_keys(n_keys + lookups, seed)
    stored, absent = keys[:n_keys], keys[n_keys:]
    _say(progress, f"fig4: filling a {buckets}-bucket cuckoo set with {n_keys:,} keys (80% load)")
    cset = CuckooSet(buckets, seed=seed)
    present_keys = fill(cset, stored)
    rng = np.random.default_rng(seed + 1)
    probe = rng.choice(present_keys, size=lookups, replace=lookups > present_keys.size)

    rows: list[Row] = []

    def row(series: str, x: str, value: float) -> None:
        rows.append(Row("fig4", series, x, "Mops", round(value, 2), PUBLISHED.get(series)))

    row("STL unordered_set", "1 core", dc.mops(dc.stl_lookup_ns(dpu, load=LOAD)))
    row("Abseil flat_hash_set", "1 core", dc.mops(dc.abseil_lookup_ns(dpu)))
    for series, mode, page in STEPS:
        _say(progress, f"fig4: {series}: {lookups:,} lookups in batches of {BATCH_MAX}")
        ns, hits = price_stream(cset, probe, mode, dpu, page)
        if hits != probe.size:
            raise AssertionError(f"{series}: {probe.size - hits} present keys not found")
        row(series, "1 core", probe.size * 1e3 / ns)

    _say(progress, "fig4: delayed hash/search on absent keys")
    ns, hits = price_stream(cset, absent, Lookup.DELAYED, dpu, dc.PAGE_2M)
    if hits:
        raise AssertionError(f"{hits} absent keys found")
    rows.append(Row("fig4", "cuckoo +delayed, absent keys", "1 core", "Mops", round(absent.size * 1e3 / ns, 2), None))

    _say(progress, f"fig4: 2 shards: filling 2 x {buckets // 2}-bucket shards")
    hv = HostView(buckets // 2, n_shards=2, seed=seed)
    fill(hv, stored)
    where = hv.route(probe)
    core_ns = []
    for i, shard in enumerate(hv.shards):
        # each core looks up the keys routed to its shard, in batches of 8 of its own
        ns, hits = price_stream(shard, probe[where == i], Lookup.DELAYED, dpu, dc.PAGE_2M)
        core_ns.append(ns)
    row("cuckoo +2 shards", "2 cores", probe.size * 1e3 / max(core_ns))
    return rows
