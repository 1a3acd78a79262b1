"""SOSD datasets for DPA-Store: the binary format, exact generators and tuned stand-ins.

DPA-Store (issue 26) is evaluated on the SOSD benchmark's key sets (Marcus et al., "Benchmarking
learned indexes", VLDB 2020). This module gives the emulator those key sets:

* **The file format.** A SOSD file is a little-endian uint64 count followed by that many
  little-endian uint64 keys, sorted. ``read_sosd`` memory-maps the keys (the real files are
  200 M keys, 1.6 GB: copying them just to look at a prefix would be wasteful) and refuses a file
  whose length disagrees with its count, because a truncated download otherwise shows up much later
  as a wrong segment count. ``write_sosd`` writes the same layout; ``first_unsorted`` names the
  first index that breaks the order, since SOSD's own tools silently assume it.

* **Exact generators.** ``sparse`` (uniform random 64-bit keys) and ``dense4x`` (n keys drawn from
  a consecutive range of 4n integers; the paper used 50 M of 200 M) are defined by the paper and
  are generated as published.

* **Stand-ins** for the four real datasets, which are not obtainable here:

  - ``face``: Facebook user ids (SOSD's ``fb_200M_uint64``). Ids are handed out in blocks, so the
    set is dense runs separated by large, heavy-tailed gaps; it is the hardest set for a learned
    index. Stand-in: runs of geometric length, near-consecutive inside, Pareto gaps between.
  - ``amzn``: Amazon book popularity data (``books_200M_uint64``). Nearly linear CDF with local
    noise. Stand-in: a gently curved CDF with lognormal gaps.
  - ``wiki``: Wikipedia edit timestamps (``wiki_ts_200M_uint64``). A smooth, slowly varying arrival
    rate with very regular spacing (the real file has many near-duplicates, which flatten the
    CDF further). Stand-in: gamma gaps with a large shape (low variance) under a diurnal rate.
  - ``osmc``: OpenStreetMap cell ids (``osm_cellids_200M_uint64``). Cell ids follow a space-filling
    curve, so keys are clustered at several scales at once. Stand-in: a multiplicative cascade
    that recursively splits the key space and shares the keys unevenly between the halves.

  Each stand-in takes a ``roughness`` knob that moves its number of leaves. **The only published
  statistic they are tuned against** is DPA-Store's Table 1, index overhead per dataset at the
  default error bound (50 M pairs): face 104%, osmc 74%, amzn 54%, sparse 32%, dense4x 26%,
  wiki 23%. DPA-Store's index is a tree of PLA leaves of at most 128 entries (a longer segment is
  cut into 128-key pieces), with under 1% as many inner nodes above them, so the overhead is taken to
  be (almost) proportional to the number of **leaves**, not of PLA segments; the percentages also
  hold the tree above the leaves and the paper's own accounting, so only the order and the ratios
  between datasets are reproduced, not the percentages. The target is: leaves per key of a
  stand-in (``count_pla_segments(keys, eps, max_size=128)``, which equals the leaf count of
  ``nodes/systems/dpastore/pla.py``'s bulk load exactly), divided by that of ``sparse``, equals its
  overhead divided by sparse's 32%. Nothing else about the real files (key range, duplicates,
  distribution of lookups) is claimed.

Tuning point: n = 200_000, eps = 8 (DPA-Store's leaf eps), cap 128 (``TUNE_N``, ``TUNE_EPS``,
``TUNE_MAX_SIZE``). ``STANDINS`` holds the tuned roughness values; what they achieve with seed 1:

    dataset  roughness  segments  leaves  keys/leaf  leaf ratio to sparse  Table 1 target
    face     0.066      6227      6229     32.1      3.22                  3.25  (104%)
    osmc     0.967      4454      4458     44.9      2.30                  2.31  (74%)
    amzn     1.8        3193      3271     61.1      1.69                  1.69  (54%)
    sparse   (exact)     750      1935    103.4      1.00                  1.00  (32%)
    dense4x  (exact)     590      1852    108.0      0.96                  0.81  (26%)
    wiki     0.02        110      1616    123.8      0.84                  0.72  (23%)

**Below sparse the published ratios cannot be reached.** No set of n keys has fewer than
ceil(n / 128) leaves: 1563 here, 0.81 x sparse's 1935, because sparse's segments at eps 8
(~267 keys) are already mostly cut by the cap (103 keys per leaf). wiki's 0.72 would need 143
keys per leaf; dense4x's 0.81 would need every leaf full. dense4x is exact (n keys of a range of
4n, as published) and lands at 0.96; wiki is tuned as close to the floor as its shape allows
(very regular gaps, so segments run to thousands of keys and only the last piece of each is
short). The order of Table 1 holds; DPA-Store's lower overheads for dense4x and wiki must come
from something the leaf count does not see (padding, leaf fill, inner nodes or accounting).

Seeds 2 and 3 give each ratio within 0.06 of the above (face 3.28/3.26, osmc 2.29/2.32, amzn
1.68/1.67, dense4x 0.96/0.96, wiki 0.84/0.84). At n = 1 M (seed 1) they hold within 2%: face 3.21,
osmc 2.30, amzn 1.66, dense4x 0.95, wiki 0.82 (sparse stays at 103 keys per leaf). With eps 16
(the reproduction's larger eps) at n = 200 K, leaves relative to sparse at eps 8 are face 1.54,
osmc 1.29, amzn 1.12, sparse 0.86, dense4x 0.85, wiki 0.83; Table 1's larger-eps overheads give
face 1.63 and osmc 1.09 (reported, not tuned). The knobs are monotone (more roughness, more
segments and leaves) over the useful range; face's knob peaks at about its tuned value (see ``face``).

(Before this retuning the stand-ins were tuned to segment counts without the cap: face 0.0124,
osmc 0.32, amzn 1.08, wiki 0.6 with a stronger daily rhythm; their leaf ratios were face 1.55,
osmc 1.19, amzn 1.12, wiki 0.95.)

``count_pla_segments`` is a small optimal PLA segment counter (the PGM-index's streaming
convex-hull algorithm, exact integer arithmetic) kept here only to tune and check the stand-ins;
the learned index itself lives elsewhere.
"""

from __future__ import annotations

import os
from typing import Callable

import numpy as np

__all__ = [
    "read_sosd", "write_sosd", "first_unsorted", "sparse", "dense4x", "face", "amzn", "wiki",
    "osmc", "dataset", "count_pla_segments", "STANDINS", "DATASETS", "TUNE_N", "TUNE_EPS",
    "TUNE_MAX_SIZE",
]

TUNE_N = 200_000
TUNE_EPS = 8
TUNE_MAX_SIZE = 128  # DPA-Store's leaf capacity (nodes/systems/dpastore/pla.py LEAF_CAPACITY)
_U64_MAX = (1 << 64) - 1


# --------------------------------------------------------------------------- the file format

def read_sosd(path: str | os.PathLike, limit: int | None = None, check_sorted: bool = False) -> np.ndarray:
    """Keys of a SOSD file as a read-only memory-mapped uint64 array (the first ``limit`` if given).

    ``check_sorted`` scans the keys and raises on the first one out of order; it is off by default
    because it touches every page of a 1.6 GB file.
    """
    path = os.fspath(path)
    size = os.path.getsize(path)
    if size < 8:
        raise ValueError(f"{path}: not a SOSD file: {size} bytes, shorter than the 8-byte count")
    with open(path, "rb") as f:
        count = int(np.frombuffer(f.read(8), dtype="<u8")[0])
    expected = 8 + 8 * count
    if size != expected:
        what = "truncated" if size < expected else "oversized"
        raise ValueError(f"{path}: {what}: header says {count} keys ({expected} bytes), file has {size} bytes")
    if count == 0:
        raise ValueError(f"{path}: empty SOSD file (count 0)")
    n = count if limit is None else max(0, min(int(limit), count))
    keys = np.memmap(path, dtype="<u8", mode="r", offset=8, shape=(n,)) if n else np.empty(0, "<u8")
    if check_sorted:
        bad = first_unsorted(keys)
        if bad is not None:
            raise ValueError(f"{path}: keys not sorted: key {bad} ({int(keys[bad])}) < key {bad - 1} "
                             f"({int(keys[bad - 1])})")
    return keys


def write_sosd(path: str | os.PathLike, keys, check_sorted: bool = True) -> None:
    """Write ``keys`` as a SOSD file; refuses unsorted keys unless ``check_sorted`` is False."""
    keys = np.ascontiguousarray(keys, dtype="<u8")
    if keys.ndim != 1:
        raise ValueError(f"{os.fspath(path)}: keys must be one-dimensional, got shape {keys.shape}")
    if check_sorted:
        bad = first_unsorted(keys)
        if bad is not None:
            raise ValueError(f"{os.fspath(path)}: keys not sorted: key {bad} < key {bad - 1}")
    with open(path, "wb") as f:
        f.write(np.array([keys.size], dtype="<u8").tobytes())
        f.write(keys.tobytes())


def first_unsorted(keys) -> int | None:
    """Index of the first key smaller than its predecessor, or None if sorted (equal keys are sorted)."""
    keys = np.asarray(keys)
    bad = np.flatnonzero(keys[1:] < keys[:-1])
    return int(bad[0]) + 1 if bad.size else None


# --------------------------------------------------------------------------- PLA segment counter

def count_pla_segments(keys, eps: int, max_size: int | None = None) -> int:
    """Fewest segments of a piecewise-linear map key -> rank with every rank within +/- eps.

    ``max_size`` caps a segment's length as a learned index's node capacity does: a segment of
    L keys then counts ceil(L / max_size) pieces (each keeps the same line, so the bound holds).
    With ``max_size=128`` this is the number of leaves DPA-Store's bulk load builds.

    Greedy and optimal (a segment is extended while some line still fits all its keys; since any
    subset of a fittable run is fittable, greedy is optimal). Feasibility is kept incrementally as
    in the PGM-index (O'Rourke's algorithm): the upper and lower convex hulls of the points
    (key, rank + eps) and (key, rank - eps) and the two extreme lines through them. Python ints
    make it exact for 64-bit keys, where float slopes would round. Keys must be strictly increasing.
    """
    if max_size is not None and (isinstance(max_size, bool) or int(max_size) != max_size or max_size < 1):
        raise ValueError(f"count_pla_segments: max_size must be an integer >= 1 or None, got {max_size!r}")
    keys = np.asarray(keys)
    n = int(keys.size)
    if n == 0:
        return 0
    xs = keys.tolist()
    segments = 0
    i = 0
    while i < n:
        end = _extend_segment(xs, i, eps)
        segments += 1 if max_size is None else -(-(end - i) // int(max_size))
        i = end
    return segments


def _extend_segment(xs: list, start: int, eps: int) -> int:
    """Index one past the longest run from ``start`` that one line fits within +/- eps."""
    n = len(xs)
    x0 = xs[start]
    if start + 1 >= n:
        return n
    x1 = xs[start + 1]
    if x1 <= x0:
        raise ValueError(f"count_pla_segments: keys must be strictly increasing (index {start + 1})")
    # Points are (x, y); ranks are relative to the segment, which changes nothing but keeps ints small.
    # rect: r0 = upper of the first, r1 = lower of the first, r2/r3 = lower/upper ends of the lines.
    r0 = (x0, eps)
    r1 = (x0, -eps)
    r2 = (x1, 1 - eps)
    r3 = (x1, 1 + eps)
    upper = [r0, r3]
    lower = [r1, r2]
    us = ls = 0
    last = x1
    i = start + 2
    while i < n:
        x = xs[i]
        if x <= last:
            raise ValueError(f"count_pla_segments: keys must be strictly increasing (index {i})")
        last = x
        y = i - start
        p1 = (x, y + eps)
        p2 = (x, y - eps)
        # slope1: r0 -> r2 (the least steep line), slope2: r1 -> r3 (the steepest line).
        s1x, s1y = r2[0] - r0[0], r2[1] - r0[1]
        s2x, s2y = r3[0] - r1[0], r3[1] - r1[1]
        # p1 below the least steep line, or p2 above the steepest: no line fits any more.
        if (p1[1] - r2[1]) * s1x < s1y * (p1[0] - r2[0]):
            return i
        if (p2[1] - r3[1]) * s2x > s2y * (p2[0] - r3[0]):
            return i
        if (p1[1] - r1[1]) * s2x < s2y * (p1[0] - r1[0]):
            # p1 cuts the steepest line: its new pivot is the lower-hull point of least slope to p1.
            j = ls
            bx, by = p1[0] - lower[j][0], p1[1] - lower[j][1]
            for k in range(ls + 1, len(lower)):
                vx, vy = p1[0] - lower[k][0], p1[1] - lower[k][1]
                if vy * bx > by * vx:  # slope (lower[k] -> p1) greater: past the tangent point
                    break
                bx, by, j = vx, vy, k
            r1 = lower[j]
            r3 = p1
            ls = j
            end = len(upper)
            while end >= us + 2 and _cross(upper[end - 2], upper[end - 1], p1) <= 0:
                end -= 1
            del upper[end:]
            upper.append(p1)
        if (p2[1] - r0[1]) * s1x > s1y * (p2[0] - r0[0]):
            # p2 cuts the least steep line: its new pivot is the upper-hull point of greatest slope to p2.
            j = us
            bx, by = p2[0] - upper[j][0], p2[1] - upper[j][1]
            for k in range(us + 1, len(upper)):
                vx, vy = p2[0] - upper[k][0], p2[1] - upper[k][1]
                if vy * bx < by * vx:
                    break
                bx, by, j = vx, vy, k
            r0 = upper[j]
            r2 = p2
            us = j
            end = len(lower)
            while end >= ls + 2 and _cross(lower[end - 2], lower[end - 1], p2) >= 0:
                end -= 1
            del lower[end:]
            lower.append(p2)
        i += 1
    return n


def _cross(o, a, b) -> int:
    return (a[0] - o[0]) * (b[1] - o[1]) - (a[1] - o[1]) * (b[0] - o[0])


# --------------------------------------------------------------------------- generators

def _rng(seed: int, name: str) -> np.random.Generator:
    # The dataset's name is part of the seed so that face(seed=1) and osmc(seed=1) are independent.
    return np.random.default_rng([int(seed), sum(ord(c) << (8 * i) for i, c in enumerate(name))])


def _exactly_n(keys: np.ndarray, n: int, rng: np.random.Generator, hi: int = _U64_MAX) -> np.ndarray:
    """Sorted unique uint64 keys, exactly n: a generator's rare collisions are replaced by neighbours.

    Replacing a lost duplicate by key+1 of a random key (or key-1 at the top) moves a handful of
    keys by one, which no index statistic can see, and keeps every generator exact in n without a
    redraw loop whose result would depend on how many collisions happened.
    """
    keys = np.unique(np.asarray(keys, dtype=np.uint64))
    while keys.size < n:
        picks = keys[rng.integers(0, keys.size, n - keys.size)]
        up = picks < np.uint64(hi)
        extra = np.where(up, picks + np.uint64(1), picks - np.uint64(1))
        keys = np.unique(np.concatenate([keys, extra]))
    if keys.size > n:
        keys = np.sort(rng.choice(keys, n, replace=False))
    return keys


def _from_gaps(gaps: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Keys as a random start plus the running sum of integer gaps >= 1 (so unique by construction)."""
    gaps = np.maximum(np.asarray(gaps, dtype=np.float64), 1.0)
    total = float(gaps.sum())
    if total >= 2.0 ** 63:
        raise ValueError(f"key range overflow: gaps sum to {total:.3g} >= 2^63; lower roughness or n")
    start = int(rng.integers(0, 1 << 62))
    return np.uint64(start) + np.cumsum(np.floor(gaps).astype(np.uint64), dtype=np.uint64)


def sparse(n: int, seed: int = 0) -> np.ndarray:
    """SOSD ``sparse``: n unique keys uniform over the whole 64-bit space, sorted."""
    rng = _rng(seed, "sparse")
    return _exactly_n(rng.integers(0, _U64_MAX, n, dtype=np.uint64, endpoint=True), n, rng)


def dense4x(n: int, seed: int = 0) -> np.ndarray:
    """SOSD ``dense4x``: n keys drawn without replacement from the consecutive range [0, 4n), sorted."""
    rng = _rng(seed, "dense4x")
    # choice(4n, n, replace=False) builds a 4n-entry array (1.6 GB at the paper's 200 M range);
    # instead share the n keys among blocks of the range by the exact multivariate hypergeometric
    # law and sample each block without replacement, which is the same distribution in bounded memory.
    block = 1 << 22
    sizes = np.full((4 * n + block - 1) // block, block, dtype=np.int64)
    sizes[-1] = 4 * n - block * (sizes.size - 1)
    counts = rng.multivariate_hypergeometric(sizes, n, method="marginals")
    parts = [np.sort(rng.choice(int(size), int(c), replace=False)).astype(np.uint64) + np.uint64(b * block)
             for b, (size, c) in enumerate(zip(sizes, counts)) if c]
    return np.concatenate(parts)


def face(n: int, seed: int = 0, roughness: float | None = None) -> np.ndarray:
    """Stand-in for Facebook user ids: dense runs (ids handed out in blocks) split by heavy-tailed gaps.

    ``roughness`` is the number of runs per key (mean run length 1/roughness): each run end is
    a jump no line can absorb, so it moves the segment count almost one for one while runs are
    long. Runs shorter than a few eps are absorbed several to a line (a staircase), so the count
    peaks near roughness 0.07 (about 32 keys per segment at eps 8) and falls beyond; the tuned
    0.066 sits at that peak.
    """
    r = STANDINS["face"] if roughness is None else float(roughness)
    rng = _rng(seed, "face")
    # Inside a run ids are nearly consecutive (a few skipped, deleted accounts).
    gaps = rng.geometric(0.7, n).astype(np.float64)
    starts = rng.random(n) < r
    # Pareto(1.2) jumps: mostly modest, a few enormous, as between id-allocation blocks; capped so
    # that 200 M keys stay inside 64 bits.
    jumps = np.minimum(1e3 * (1.0 + rng.pareto(1.2, n)), 2.0 ** 34)
    gaps = np.where(starts, jumps, gaps)
    return _from_gaps(gaps, rng)


def amzn(n: int, seed: int = 0, roughness: float | None = None) -> np.ndarray:
    """Stand-in for Amazon book popularity keys: a near-linear, gently curved CDF with local noise.

    ``roughness`` is the sigma of lognormal gaps; the segment count grows with the gaps'
    squared coefficient of variation, exp(sigma^2) - 1.
    """
    s = STANDINS["amzn"] if roughness is None else float(roughness)
    rng = _rng(seed, "amzn")
    # A slow drift in density (popular ranges are denser) makes the CDF curved, not a straight line.
    t = np.arange(n) / max(n, 1)
    density = 1.0 + 0.5 * np.sin(2 * np.pi * 3 * t) ** 2
    gaps = 1000.0 * density * rng.lognormal(-s * s / 2, s, n)
    return _from_gaps(gaps, rng)


def wiki(n: int, seed: int = 0, roughness: float | None = None) -> np.ndarray:
    """Stand-in for Wikipedia edit timestamps: a smooth daily rhythm with very regular spacing.

    ``roughness`` is the squared coefficient of variation of the gamma-distributed gaps (1/shape);
    below 1 the spacing is more regular than a Poisson process, hence fewer segments than sparse.
    Below ~0.02 the daily rhythm's curvature, not the gaps, ends the segments.
    """
    cv2 = STANDINS["wiki"] if roughness is None else float(roughness)
    rng = _rng(seed, "wiki")
    t = np.arange(n) / max(n, 1)
    # Five "days" in the sample, edits twice as frequent at the daily peak as at the trough. (Until
    # the leaf retuning it was 30 days at 3x; that curvature alone cut segments to ~660 keys, 5 of
    # a leaf's 128-key pieces each, and kept wiki far from the fewest leaves the cap allows.)
    rate = 1.0 + np.sin(2 * np.pi * 5 * t) / 3.0
    shape = 1.0 / cv2
    gaps = 100.0 / rate * rng.gamma(shape, 1.0 / shape, n)
    return _from_gaps(gaps, rng)


def osmc(n: int, seed: int = 0, roughness: float | None = None, levels: int = 40) -> np.ndarray:
    """Stand-in for OpenStreetMap cell ids: clusters inside clusters, from a multiplicative cascade.

    The 64-bit space is halved ``levels`` times; at every split a node's keys go left with
    probability 0.5 + roughness * (U - 0.5), U uniform. Roughness 0 splits evenly (uniform keys,
    like sparse); roughness 1 lets any share go either way, so populated and empty regions alternate
    at every scale, as cell ids on a space-filling curve crowd into inhabited areas. Leaves get
    their keys uniformly. Unlike a Beta(a, a) split, whose extreme concentration puts all keys into
    a few uniform leaves and so *lowers* the segment count again, this knob is monotone. Table 1's
    osmc ratio needs nearly its whole range (tuned 0.967).
    """
    r = STANDINS["osmc"] if roughness is None else float(roughness)
    if not 0.0 <= r <= 1.0:
        raise ValueError(f"osmc: roughness must be in [0, 1], got {r}")
    rng = _rng(seed, "osmc")
    lo = np.zeros(1, dtype=np.uint64)
    cnt = np.array([n], dtype=np.int64)
    width = 1 << 64
    done = []
    for _ in range(levels):
        width //= 2
        p = 0.5 + r * (rng.random(cnt.size) - 0.5)
        left = rng.binomial(cnt, p)
        lo = np.concatenate([lo, lo + np.uint64(width)])
        cnt = np.concatenate([left, cnt - left])
        # Empty regions drop out, so the work per level is bounded by n, not 2^level; a lone key
        # is uniform over its region whatever later splits do (E[p] = 1/2), so it is placed now.
        alone = cnt == 1
        done.append(lo[alone] + (rng.random(int(alone.sum())) * width).astype(np.uint64))
        keep = cnt > 1
        lo, cnt = lo[keep], cnt[keep]
    done.append(np.repeat(lo, cnt) + (rng.random(int(cnt.sum())) * width).astype(np.uint64))
    return _exactly_n(np.concatenate(done), n, rng)


# Tuned roughness of each stand-in (see the module docstring for the tuning point and results).
STANDINS: dict[str, float] = {"face": 0.066, "osmc": 0.967, "amzn": 1.8, "wiki": 0.02}

DATASETS: dict[str, Callable[[int, int], np.ndarray]] = {
    "sparse": sparse, "dense4x": dense4x, "face": face, "amzn": amzn, "wiki": wiki, "osmc": osmc,
}


def dataset(name: str, n: int, seed: int = 0) -> np.ndarray:
    """Sorted unique uint64 keys of SOSD dataset ``name`` (exact or stand-in, see the module docstring)."""
    try:
        gen = DATASETS[name]
    except KeyError:
        raise ValueError(f"unknown SOSD dataset {name!r}; valid names: {', '.join(DATASETS)}") from None
    if n < 1:
        raise ValueError(f"dataset {name!r}: n must be >= 1, got {n}")
    return gen(int(n), seed)
