"""How often a direct-mapped key cache hits under zipfian keys, and how big it must be to hit as often.

SMART-BT's speculative lookup answers a get from a compute-node cache key -> entry address. The
artifact's cache is direct-mapped (10^6 slots, a fill overwrites the slot) and its runs draw zipf
0.99 over 10^8 keys, so hot keys keep their slots and cold keys evict each other: about 63 % of
gets hit. A reduced-scale rack has 10^4-10^5 records; the same 10^6 slots would hold every key and
every get would hit, which turns SMART-BT's bandwidth-bound leaf READs into small READs the paper
never had. :func:`slots_for_hit_rate` sizes the cache of a small rack so that its expected hit rate
is the paper's instead.

The model is the independent-reference one: a get of key k hits iff the previous access to k's slot
was k, so the hit rate is ``sum_k p_k^2 / P_slot(k)``. Keys land in slots at random (the artifact's
keys are FNV-scrambled, ours go through a 64-bit mixer); a fixed seed keeps it deterministic. The
zipfian's head ranks are placed one by one; the tail beyond them (each rank under 1e-7 of the mass)
is spread evenly, which is what hashing does to it.
"""

from __future__ import annotations

import numpy as np

from workloads.generators import zeta_em

HEAD = 2_000_000          # ranks placed individually; the rest is spread evenly
SEED = 20240427           # any fixed value: the placement only has to be reproducible

# SMART's artifact: include/smart/generic_cache.h (10^6 slots), include/util/generator.h (zipf over
# the 10^8 keys of its B+-tree benchmark).
ARTIFACT_KEYS = 100_000_000
ARTIFACT_SLOTS = 1_000_000


def _head_masses(items: int, theta: float) -> tuple[np.ndarray, float, float]:
    """Probabilities of ranks 1..min(items, HEAD), the tail's total mass and its sum of squares."""
    h = min(items, HEAD)
    zeta = zeta_em(items, theta)
    p = np.arange(1, h + 1, dtype=np.float64) ** -theta / zeta
    tail = max(0.0, 1.0 - float(p.sum()))
    # sum of (r^-theta / zeta)^2 over h < r <= items, by the integral (the terms are tiny and smooth)
    a, b, e = h + 0.5, items + 0.5, 1.0 - 2.0 * theta
    squares = np.log(b / a) if abs(e) < 1e-12 else (b ** e - a ** e) / e
    tail_sq = squares / zeta ** 2 if items > h else 0.0
    return p, tail, tail_sq


def record_masses(records: int, items: int, theta: float = 0.99) -> np.ndarray:
    """Access probability of each of ``records`` keys when a zipfian over ``items`` ranks is
    hashed onto them (the workload property ``zipfianitems``)."""
    if records < 1 or items < 1:
        raise ValueError(f"records and items must be >= 1 (got {records}, {items})")
    p, tail, _ = _head_masses(items, theta)
    rng = np.random.default_rng(SEED)
    q = np.bincount(rng.integers(0, records, size=p.size), weights=p, minlength=records)
    return q + tail / records


def hit_rate(masses: np.ndarray, slots: int, *, tail: float = 0.0, tail_sq: float = 0.0) -> float:
    """Expected hit rate of a ``slots``-slot direct-mapped cache over keys with ``masses``
    (plus an evenly spread tail of total mass ``tail`` whose squares sum to ``tail_sq``)."""
    if slots < 1:
        return 0.0
    rng = np.random.default_rng(SEED + 1)
    slot = rng.integers(0, slots, size=masses.size)
    per_slot = np.bincount(slot, weights=masses, minlength=slots) + tail / slots
    head = float((masses * masses / per_slot[slot]).sum())
    return head + tail_sq / float(per_slot.mean())


def artifact_hit_rate(theta: float = 0.99) -> float:
    """The artifact's expected hit rate: 10^6 slots, zipf over 10^8 keys (~0.63 at 0.99)."""
    p, tail, tail_sq = _head_masses(ARTIFACT_KEYS, theta)
    return hit_rate(p, ARTIFACT_SLOTS, tail=tail, tail_sq=tail_sq)


def slots_for_hit_rate(masses: np.ndarray, target: float) -> int:
    """The fewest slots whose expected hit rate reaches ``target`` (bisection; the rate grows with
    the slots). Raises ValueError when even 64 slots per key fall short."""
    if not 0.0 < target < 1.0:
        raise ValueError(f"target hit rate must be in (0, 1), got {target}")
    lo, hi = 1, 64 * masses.size
    if hit_rate(masses, hi) < target:
        raise ValueError(f"no cache of up to {hi} slots reaches a hit rate of {target:.3f} over "
                         f"{masses.size} keys")
    while lo < hi:
        mid = (lo + hi) // 2
        if hit_rate(masses, mid) >= target:
            hi = mid
        else:
            lo = mid + 1
    return lo
