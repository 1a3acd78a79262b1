"""Shrinking a failing conformance check to a smaller counterexample, as property-based testing
tools do (Hypothesis, QuickCheck): the smallest failing run found is the one to read.

A check of the conformance suite that failed (``conformance.SHRINKABLE``: the concurrent ones) is
run again smaller, under a :class:`conformance.Scale`: fewer threads, fewer coroutines per thread,
fewer keys, fewer rounds or less virtual time. The search is greedy: halve one dimension at a
time (coroutines first, then threads, keys, length), keep the first smaller run that still
fails, start again from it, until no halving fails or the budget of runs is spent. Under chaos a
smaller run meets other delays, so each candidate is tried on a few seeds of the failing one's
family (the seed, then the next ones); the seed that failed is part of the result, so the shrunk
run replays bit for bit (``dmrack check --only CHECK --scale ... --chaos-seed N``). The suite's
racks are co-located: one virtual clock, so a run is the same for the same scale and seed.
"""

from __future__ import annotations

import time
from typing import NamedTuple

from cluster.correctness.conformance import SHRINKABLE, Scale, run_suite

__all__ = ["Shrunk", "shrink"]

ORDER = ("coroutines", "threads", "keys", "length")
LENGTH_FLOOR = 1 / 16
SEEDS_PER_CANDIDATE = 3


class Shrunk(NamedTuple):
    check: str
    scale: Scale            # the smallest failing run found
    full: Scale             # the check's full size (what the search started from)
    chaos_seed: int | None  # the chaos seed it fails under (None: no chaos)
    detail: str             # its failure, as the check reported it
    runs: int               # runs the search took
    seconds: float


def _halved(sc: Scale, field: str, takes: tuple) -> Scale | None:
    v = getattr(sc, field)
    if field not in takes or v is None:
        return None
    if field == "length":
        return sc._replace(length=v / 2) if v / 2 >= LENGTH_FLOOR else None
    return sc._replace(**{field: v // 2}) if v // 2 >= 1 else None


def shrink(system: str, check: str, options: dict, *, chaos=None, profile: str | None = None,
           max_runs: int = 30, max_seconds: float = 60.0, run_check=None, full: Scale | None = None,
           stress_shape=None, seeds: tuple | None = None) -> Shrunk | None:
    """The smallest failing run of ``check`` found (None if the check is not shrinkable or its
    full run does not fail here). ``chaos``: the ChaosSpec the failure happened under (its seed
    family is searched); ``stress_shape``: the process stress's shape (for the stress_* checks);
    ``seeds``: the chaos seeds whose full run may fail (default the failure's own: the first that
    fails is where the search starts). The check's full size is what its full run records
    (``run_suite(sizes=...)``: a system's own stress shapes included); ``run_check(scale,
    chaos_seed) -> (passed, detail)`` replaces running the suite (tests), which then give
    ``full``."""
    if check not in SHRINKABLE:
        return None
    t0 = time.perf_counter()
    sizes: dict = {}
    if run_check is None:
        from cluster.correctness.chaos import applied

        def run_check(scale, seed):
            spec = chaos._replace(seed=seed) if chaos is not None else None
            with applied(spec, profile):
                o = run_suite(system, only=[check], options=options, profile=profile, scale=scale,
                              stress_shape=stress_shape, sizes=sizes)[0]
            return o.passed, o.detail
    runs = 0
    for seed0 in (seeds or ((chaos.seed if chaos is not None else None),)):
        passed, detail = run_check(full or Scale(), seed0)
        runs += 1
        if not passed and "the check itself failed" not in detail:
            break
    else:
        return None
    if full is None:
        full = Scale(**sizes)
    best, best_seed = full, seed0
    seeds = [seed0] if chaos is None else [seed0 + k for k in range(SEEDS_PER_CANDIDATE)]
    improved = True
    while improved and runs < max_runs and time.perf_counter() - t0 < max_seconds:
        improved = False
        for field in ORDER:
            cand = _halved(best, field, SHRINKABLE[check])
            if cand is None:
                continue
            for seed in seeds:
                if runs >= max_runs or time.perf_counter() - t0 >= max_seconds:
                    break
                runs += 1
                ok, d = run_check(cand, seed)
                # a smaller run that broke the harness itself is no counterexample of the system
                if not ok and "the check itself failed" not in d:
                    best, best_seed, detail, improved = cand, seed, d, True
                    break
            if improved:
                break
    return Shrunk(check, best, full, best_seed, detail, runs, time.perf_counter() - t0)
