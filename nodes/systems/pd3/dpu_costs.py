"""What a Host View lookup costs an Arm core of the DPU: PD3's Fig. 4 priced from counted work.

:meth:`nodes.systems.pd3.host_view.CuckooSet.find_batched` runs the real lookup and returns what it
did (:class:`~nodes.systems.pd3.host_view.LookupCost`: bucket lines read, hashes, compares, memory
rounds); this module turns that into Arm-core nanoseconds with the profile's ``[dpu]`` constants.
Kept apart from ``host_view.py`` so the set stays a plain data structure (its counts are facts about
the algorithm) while every number about the hardware lives in the profile, with its source, and
can be overridden (``with_overrides``) for a sensitivity run.

The price of one batch (``keys`` keys, of which ``hits`` were found) is a serial sum of three parts::

    compute = (hashes x hash_cycles + search) / ghz
              search = compares x compare_cycles + hits x branch_miss_cycles   (scalar: BASIC, BATCHED)
                     = compares x vector_compare_cycles                         (NEON: SIMD, DELAYED)
    memory  = waves x dram_ns
    tlb     = waves x page_walk_ns x P(TLB miss)

* **Waves.** A memory round is a set of lines issued together (prefetched before any is needed);
  the core keeps at most ``line_fills`` misses in flight, so a round of ``L`` lines costs
  ``ceil(L / line_fills)`` waves of one DRAM latency each. The split of lines into rounds follows
  the mode (the counts give totals): BASIC reads each bucket unprefetched, one line per round;
  BATCHED and SIMD prefetch all ``2 x keys`` buckets in one round; DELAYED has a round of the
  ``keys`` first buckets and, if some key missed, a round of the second buckets of those
  (``lines - keys``). Every bucket read is priced as DRAM: at the paper's size (100 M keys, ~1 GB)
  the table is ~60x the 16 MB LLC, so a random bucket is almost never cached.
* **TLB.** With 4 KB pages the last-level TLB (``tlb_entries`` x page) covers a few MB of a ~1 GB
  table: ``P(miss) = 1 - reach / table`` (0 when it all fits, as 512 huge pages of 2 MB do). A miss
  walks the page table, the leaf entry from DRAM (``page_walk_ns``), before the line can be fetched;
  the walks of one wave overlap like its lines, so each wave is lengthened by one walk.
* **Mispredicts.** A scalar search that stops at the matching slot exits at a data-dependent slot:
  about one mispredicted branch per key found. The NEON search (compare all four slots, movemask)
  is branch-free, which is what makes SIMD faster than BATCHED despite more work per bucket.
* **No overlap of compute with memory, nor of one batch with the next.** The search of a bucket
  needs its line, and hashing precedes the prefetch, so within a batch they are serial; an
  out-of-order core does overlap some of it (and, for BASIC, the misses of consecutive keys), which
  this model does not credit -- it errs slow, most for the unprefetched BASIC lookup.

The two baselines of Fig. 4 are not run (they are not the system), but priced by their memory
accesses per lookup with the same constants, on 4 KB pages (default ``malloc``):

* libstdc++ ``std::unordered_set<uint64_t>`` (:func:`stl_lookup_ns`): the bucket array entry holds
  a pointer to the node *before* the bucket's first node (a singly linked list), so a lookup is a
  chain of dependent misses: bucket slot -> that node (for its ``next``) -> the first node of the
  bucket (its key), then ``load/2`` further nodes on average for a present key. Hash (identity, then
  a modulo by a prime bucket count) priced as one hash; one scalar compare per node.
* Abseil ``flat_hash_set<uint64_t>`` (Swiss table, :func:`abseil_lookup_ns`): the group of control
  bytes at the hash's position (one line), one vector compare of its 16 H2 bytes, then the matching
  slot (one line, dependent on the control bytes); at 80 % load a present key is almost always in
  the first group probed.
"""

from __future__ import annotations

import math
from typing import NamedTuple

from nodes.systems.pd3.host_view import Lookup, LookupCost

PAGE_4K = 4096
PAGE_2M = 2 << 20
#: The paper's Host View for Fig. 4: 100 M 8-byte keys at 80 % load = 125 M slots of 8 B.
PAPER_TABLE_BYTES = 125_000_000 * 8
LINE_BYTES = 64


class LookupPrice(NamedTuple):
    compute_ns: float
    memory_ns: float
    tlb_ns: float

    @property
    def total_ns(self) -> float:
        return self.compute_ns + self.memory_ns + self.tlb_ns


def tlb_miss_probability(dpu, table_bytes: int, page_bytes: int) -> float:
    """The chance that a random line of a ``table_bytes`` table misses the last-level TLB."""
    if table_bytes <= 0 or page_bytes <= 0:
        raise ValueError(f"table_bytes and page_bytes must be positive, got {table_bytes}, {page_bytes}")
    reach = dpu.tlb_entries * page_bytes
    return max(0.0, 1.0 - reach / table_bytes)


def _rounds(cost: LookupCost, keys: int, mode: Lookup) -> list[int]:
    """Lines per memory round, in order, as the mode issues them."""
    if cost.lines == 0:
        return []
    if mode == Lookup.BASIC:
        return [1] * cost.lines
    if mode in (Lookup.BATCHED, Lookup.SIMD):
        return [cost.lines]
    first = min(keys, cost.lines)
    return [first] + ([cost.lines - first] if cost.lines > first else [])


def price_lookup(cost: LookupCost, keys: int, hits: int, mode: Lookup, dpu, *,
                 table_bytes: int = PAPER_TABLE_BYTES, page_bytes: int = PAGE_2M) -> LookupPrice:
    """The Arm-core time of one :meth:`find_batched` call that looked up ``keys`` keys, found
    ``hits``, and did ``cost``, in ``mode``, on a ``table_bytes`` table mapped with ``page_bytes``
    pages; ``dpu`` is a profile's ``[dpu]`` record."""
    if keys < 0 or hits < 0 or hits > keys or min(cost) < 0:
        raise ValueError(f"a lookup price needs 0 <= hits <= keys and non-negative counts, got "
                         f"keys={keys}, hits={hits}, {cost}")
    mode = Lookup(mode)
    cycles = cost.hashes * dpu.hash_cycles
    if mode in (Lookup.BASIC, Lookup.BATCHED):
        cycles += cost.compares * dpu.compare_cycles + hits * dpu.branch_miss_cycles
    else:
        cycles += cost.compares * dpu.vector_compare_cycles
    waves = sum(math.ceil(lines / dpu.line_fills) for lines in _rounds(cost, keys, mode))
    p_miss = tlb_miss_probability(dpu, table_bytes, page_bytes)
    return LookupPrice(cycles / dpu.ghz, waves * dpu.dram_ns, waves * dpu.page_walk_ns * p_miss)


def _chain_ns(dpu, dependent_lines: float, cycles: float, table_bytes: int, page_bytes: int) -> float:
    p_miss = tlb_miss_probability(dpu, table_bytes, page_bytes)
    return cycles / dpu.ghz + dependent_lines * (dpu.dram_ns + p_miss * dpu.page_walk_ns)


def stl_lookup_ns(dpu, *, load: float = 0.8, table_bytes: int = PAPER_TABLE_BYTES,
                  page_bytes: int = PAGE_4K) -> float:
    """One present-key lookup in libstdc++'s ``unordered_set<uint64_t>`` at ``load`` elements per
    bucket: bucket slot, the node before the bucket's first, the first node, and ``load / 2`` more
    nodes on average, each a dependent DRAM access; one hash, one scalar compare per node."""
    nodes = 1 + load / 2
    return _chain_ns(dpu, 2 + nodes, dpu.hash_cycles + nodes * dpu.compare_cycles, table_bytes, page_bytes)


def abseil_lookup_ns(dpu, *, table_bytes: int = PAPER_TABLE_BYTES, page_bytes: int = PAGE_4K) -> float:
    """One present-key lookup in Abseil's ``flat_hash_set<uint64_t>``: the control-byte group, then
    the slot it points at (two dependent DRAM accesses); one hash, one vector compare of the group's
    control bytes, one scalar compare of the key."""
    return _chain_ns(dpu, 2, dpu.hash_cycles + dpu.vector_compare_cycles + dpu.compare_cycles,
                     table_bytes, page_bytes)


def mops(ns_per_key: float) -> float:
    """Million lookups a second of one core spending ``ns_per_key`` on each."""
    return 1e3 / ns_per_key if ns_per_key > 0 else math.inf
