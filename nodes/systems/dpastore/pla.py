"""DPA-Store's learned index: PLA segmentation, fixed-point models, node layouts, lookups.

DPA-Store (OSDI'26) keeps an ordered KV store's index in the BlueField-3 DPA's memory and its
keys and values in a host-memory replica the DPA threads read by DMA. The index is a learned
one, built bottom-up like a PGM-index. This module is its pure data-structure core: no timing,
no threads, no DMA engine; it counts cache lines so that later code can price a GET.

Segmentation (PGM-style optimal greedy PLA)
    :func:`segment` covers a sorted array of unique 64-bit keys with a minimal number of
    segments, left to right: each segment is the longest run of keys from its start such that
    one line predicts every key's position within +/- ``eps``. It is the convex-hull ("optimal
    piecewise linear model") algorithm of the PGM-index, not the simpler cone anchored at the
    first key: the line may pass anywhere, which gives longer segments for the same bound and so
    fewer leaves and smaller inner nodes. All hull arithmetic is exact (Python integers); the
    chosen line is an exact rational before it is rounded to fixed point.

Fixed point (the DPA's RISC-V cores have no FPU)
    A :class:`Segment`'s model predicts the position *within the segment* (0 = its first key)::

        d = key - first_key                                  # < 2**64
        t = (slope * d) >> (shift - 16)                      # << (16 - shift) if shift < 16
        position = (intercept + t + 2**15) >> 16             # round to nearest

    ``slope`` is a 32-bit unsigned mantissa normalised to [2**31, 2**32) (0 for a one-key
    segment), so the slope in positions per key unit is ``slope / 2**shift`` with ``shift`` a
    byte; ``intercept`` is a signed 32-bit Q15.16 position at ``first_key``. ``slope * d`` is
    below 2**96 and the shifted sum below 2**113: a 128-bit intermediate suffices, as the paper
    says. A model is 4 + 1 + 4 = 9 bytes, so seven of them fill one 64-byte line.

    The bound is kept exactly, not widened: the real line is within ``eps`` of every key's
    position; rounding the intercept costs at most 2**-17 positions, the mantissa's relative
    error 2**-32 costs at most (size + 2 eps) * 2**-32 over the segment, the truncating shift
    2**-16, so the fixed-point value is within eps + delta (delta < 0.01) of the position and the
    rounded integer, being an integer, within eps. The tests check every key.

Layout (DPA memory, 64-byte lines, 8-byte keys and pointers)
    * Inner node: up to :data:`SEGMENTS_PER_NODE` = 7 segments. Line 0 = node metadata (8 B)
      + the 7 segments' first keys; line 1 = the 7 models; then per segment a dense array of
      up to :data:`SEGMENT_CAPACITY` = 128 pivot keys and a separate array of as many child
      pointers (the pointer is read last, one line). Each array starts on a line.
    * Leaf: one metadata line in DPA memory (model, first key, count, DMA addresses of the
      host-side key and value arrays) over up to :data:`LEAF_CAPACITY` = 128 entries whose keys
      and values live in host memory, each array line-aligned there. The insert buffer that
      will hang off the leaf is not part of this module.

Lookup (what a traverser thread does)
    In an inner node: binary search over the first keys (line 0), evaluate the segment's model
    (line 1), scan the 2 eps + 1 pivots around the prediction (<= 2 lines), read the child
    pointer (1 line): 4 or 5 lines, the paper's "~4.5 per inner node". In the leaf: predict,
    DMA the 2 eps + 1 keys around the prediction (one DMA of <= 3 lines), then the value.
"""

from __future__ import annotations

from bisect import bisect_right
from fractions import Fraction
from typing import NamedTuple, Optional, Sequence, Union

import numpy as np

LINE_BYTES = 64
KEY_BYTES = 8
KEYS_PER_LINE = LINE_BYTES // KEY_BYTES  # 8 keys, pivots or pointers per line

SEGMENTS_PER_NODE = 7  # metadata (8 B) + 7 first keys = one line; 7 models of 9 B = one line
SEGMENT_CAPACITY = 128  # pivots (and child pointers) per inner segment
LEAF_CAPACITY = 128  # entries per leaf

# A window of w consecutive 8-byte keys starting anywhere in a line-aligned array touches at
# most ceil((w + 7) / 8) lines. The search reads 2 eps + 1 keys around the prediction (see
# search_window: the one extra candidate below the window is known without reading it), so
#   inner: "at most two cache line accesses" -> 2 eps + 1 + 7 <= 16 -> eps <= 4
#   leaf:  "at most three DMA-accessed lines" -> 2 eps + 1 + 7 <= 24 -> eps <= 8
# A window that only counts pivots (15 resp. 23 keys for eps 7 resp. 11) would meet the pivot
# counts but straddle 3 resp. 4 lines when it does not start on a line, so the largest eps that
# holds for every alignment is taken.
INNER_EPS = 4
LEAF_EPS = 8

FRAC_BITS = 16  # intercept is Q15.16
_HALF = 1 << (FRAC_BITS - 1)
_MANTISSA_BITS = 32
_MAX_SHIFT = 127  # a byte; smaller slopes are set to 0 (see _canonical_line)
# The intercept is within +/- eps of 0 and must fit a signed 32-bit Q15.16.
MAX_EPS = (1 << (31 - FRAC_BITS)) - 1

UINT64_LIMIT = 1 << 64
RAW_PAIR_BYTES = 16  # an 8-byte key and an 8-byte value

NODE_HEADER_LINES = 2  # metadata + first keys, models
LEAF_META_LINES = 1


class Segment(NamedTuple):
    """One PLA segment: ``size`` keys from rank ``start`` on, and its fixed-point model."""

    first_key: int
    start: int  # rank of first_key in the array it was fitted on (host-side bookkeeping)
    size: int
    slope: int  # uint32 mantissa in [2**31, 2**32), or 0
    shift: int  # slope in positions per key unit = slope / 2**shift; 0..127
    intercept: int  # int32, Q15.16 position (within the segment) at first_key


def predict(seg: Segment, key: int) -> int:
    """The model's position of ``key`` within ``seg`` (integer arithmetic only, not clamped).

    ``key`` must be >= ``seg.first_key``: the traversal only evaluates a segment whose first
    key is at most the search key.
    """
    d = int(key) - seg.first_key
    if seg.shift >= FRAC_BITS:
        t = (seg.slope * d) >> (seg.shift - FRAC_BITS)
    else:
        t = (seg.slope * d) << (FRAC_BITS - seg.shift)
    return (seg.intercept + t + _HALF) >> FRAC_BITS


# --- input checks -------------------------------------------------------------------------------


def _as_uint64(arr, what: str) -> np.ndarray:
    """``arr`` as a 1-d uint64 array, or one ValueError naming what is wrong."""
    try:
        a = np.asarray(arr)
        if a.dtype.kind == "f" and not isinstance(arr, np.ndarray):
            # a list mixing small ints with ints >= 2**63 comes out as float64 (precision lost):
            # take its elements as they are and check them below
            a = np.asarray(arr, dtype=object)
    except OverflowError:
        raise ValueError(f"{what} must be integers in [0, 2**64)") from None
    if a.ndim != 1:
        raise ValueError(f"{what} must be a 1-d sequence, got shape {a.shape}")
    if a.size == 0:  # np.asarray([]) is float64; an empty sequence is no type error
        return np.zeros(0, dtype=np.uint64)
    if a.dtype.kind == "u":
        return a.astype(np.uint64, copy=False)
    if a.dtype.kind == "i":
        if a.size and int(a.min()) < 0:
            raise ValueError(f"{what} must be integers in [0, 2**64), got {int(a.min())}")
        return a.astype(np.uint64)
    if a.dtype.kind == "O":
        for x in a:
            is_int = isinstance(x, (int, np.integer)) and not isinstance(x, bool)
            if not is_int or not 0 <= x < UINT64_LIMIT:
                raise ValueError(f"{what} must be integers in [0, 2**64), got {x!r}")
        return np.array([int(x) for x in a], dtype=np.uint64)
    raise ValueError(f"{what} must be integers in [0, 2**64), got dtype {a.dtype}")


def _check_keys(keys) -> np.ndarray:
    k = _as_uint64(keys, "keys")
    bad = np.flatnonzero(k[1:] <= k[:-1])
    if bad.size:
        i = int(bad[0])
        raise ValueError(
            f"keys must be sorted and unique: keys[{i}]={int(k[i])} "
            f"is not below keys[{i + 1}]={int(k[i + 1])}"
        )
    return k


def check_pairs(keys, values, what: str = "bulk build") -> tuple[np.ndarray, np.ndarray]:
    """Sorted unique keys and as many values, as uint64 arrays, or one ValueError naming the
    problem (``what`` names the operation in it)."""
    k = _check_keys(keys)
    v = _as_uint64(values, "values")
    if k.size == 0:
        raise ValueError(f"{what} needs at least one key")
    if v.size != k.size:
        raise ValueError(f"values must match keys in length: {v.size} values for {k.size} keys")
    return k, v


def check_eps(eps, what: str = "eps") -> int:
    if isinstance(eps, bool) or not isinstance(eps, (int, np.integer)) or not 1 <= eps <= MAX_EPS:
        raise ValueError(f"{what} must be an integer in [1, {MAX_EPS}], got {eps!r}")
    return int(eps)


# --- optimal greedy PLA (PGM-index's OptimalPiecewiseLinearModel, exact integers) ----------------


def _slope_lt(a, b) -> bool:
    """Slope of vector a < slope of vector b; both (dx, dy) with dx of the same sign."""
    return a[1] * b[0] < b[1] * a[0]


def _vec(p, q):
    return (p[0] - q[0], p[1] - q[1])


def _cross(o, a, b) -> int:
    return (a[0] - o[0]) * (b[1] - o[1]) - (a[1] - o[1]) * (b[0] - o[0])


class _Line(NamedTuple):
    """A real line fitted over ranks [start, end): position(k) = y0 + slope * (k - x0)."""

    start: int
    end: int
    x0: Fraction
    y0: Fraction
    slope: Fraction


def _pivot(hull: list, hull_start: int, points: list, points_start: int, p, side: int) -> int:
    """A new point ``p`` moves an extreme feasible line: pivot the line on ``hull`` (from
    ``hull_start``, the hull point giving the extreme slope to ``p``) and add ``p`` to its own
    points' hull ``points``. ``side`` +1: ``p`` is an upper point that lowers the steepest line,
    pivoted on the lower points' upper hull, and joins the upper points' lower hull; -1, the
    mirror: a lower point raises the flattest line, pivoted on the upper points' lower hull, and
    joins the lower points' upper hull. Returns the pivot's index in ``hull``: the line starts
    there."""
    best, best_i = _vec(hull[hull_start], p), hull_start
    for j in range(hull_start + 1, len(hull)):
        v = _vec(hull[j], p)
        # side +1: stop where the slope rises again (_slope_lt(best, v)); -1: where it falls
        if side * (best[1] * v[0] - v[1] * best[0]) < 0:
            break
        best, best_i = v, j
    end = len(points)
    while end >= points_start + 2 and side * _cross(points[end - 2], points[end - 1], p) <= 0:
        end -= 1
    del points[end:]
    points.append(p)
    return best_i


def _fit_lines(keys: Sequence[int], eps: int) -> list[_Line]:
    """Greedy optimal PLA: maximal runs whose points (key, rank) all lie within +/- eps of a line.

    Each key adds the points (k, r + eps) and (k, r - eps); the feasible lines are those passing
    between the upper points' lower hull and the lower points' upper hull. ``rect`` holds the two
    extreme feasible lines (rect[0]->rect[2] steepest-down, rect[1]->rect[3] steepest-up); a point
    outside them ends the segment. Every feasible line passes through their intersection with a
    slope between theirs, so the line through it with the mean slope is feasible.

    The four tests a key makes against the two extreme lines are written out in integers, with
    the lines' direction vectors kept (``d1`` = rect[2] - rect[0], ``d2`` = rect[3] - rect[1]) and
    renewed only when a pivot moves them: the same comparisons as ``_slope_lt(_vec(..), ..)``
    without four tuples and six calls a key, a third of a bulk load's time (docs/bench.md);
    ``tests/test_dpastore_pla.py`` holds it to the same loop written with the helpers.
    """
    lines: list[_Line] = []
    n = len(keys)
    start = 0
    i = 0
    while i < n:
        x = keys[i]
        up, lo = (x, i + eps), (x, i - eps)
        rect = [up, lo, None, None]
        upper, lower = [up], [lo]
        upper_start = lower_start = 0
        count = 1
        i += 1
        if i < n:                       # a second point: the extreme lines join the first two
            x = keys[i]
            rect[2], rect[3] = (x, i - eps), (x, i + eps)
            upper.append(rect[3])
            lower.append(rect[2])
            count += 1
            i += 1
            (r0x, r0y), (r1x, r1y), (r2x, r2y), (r3x, r3y) = rect
            d1x, d1y = r2x - r0x, r2y - r0y          # slope1 of the helpers' version
            d2x, d2y = r3x - r1x, r3y - r1y          # slope2
        while i < n:
            x = keys[i]
            y1, y2 = i + eps, i - eps                # the new upper and lower points' ranks
            # _slope_lt(p1 - rect[2], slope1) or _slope_lt(slope2, p2 - rect[3]): outside, segment ends
            if (y1 - r2y) * d1x < d1y * (x - r2x) or d2y * (x - r3x) < (y2 - r3y) * d2x:
                break
            if (y1 - r1y) * d2x < d2y * (x - r1x):
                p1 = (x, y1)
                lower_start = _pivot(lower, lower_start, upper, upper_start, p1, 1)
                rect[1], rect[3] = lower[lower_start], p1
                (r1x, r1y), (r3x, r3y) = rect[1], p1
                d2x, d2y = r3x - r1x, r3y - r1y
            # the flattest line as it was before this key (the pivot above moves only rect[1], rect[3])
            if d1y * (x - r0x) < (y2 - r0y) * d1x:
                p2 = (x, y2)
                upper_start = _pivot(upper, upper_start, lower, lower_start, p2, -1)
                rect[0], rect[2] = upper[upper_start], p2
                (r0x, r0y), (r2x, r2y) = rect[0], p2
                d1x, d1y = r2x - r0x, r2y - r0y
            count += 1
            i += 1
        lines.append(_canonical_line(start, i, rect, count))
        start = i
    return lines


def _canonical_line(start: int, end: int, rect, count: int) -> _Line:
    if count == 1:
        x, y = rect[0][0], Fraction(rect[0][1] + rect[1][1], 2)
        return _Line(start, end, Fraction(x), y, Fraction(0))
    p0, p1, p2, p3 = rect
    s1, s2 = _vec(p2, p0), _vec(p3, p1)
    min_slope = Fraction(s1[1], s1[0])
    max_slope = Fraction(s2[1], s2[0])
    a = s1[0] * s2[1] - s1[1] * s2[0]
    if a == 0:  # parallel extremes: any line between them through p0's column works
        ix, iy = Fraction(p0[0]), Fraction(p0[1] + p1[1] + (max_slope * (p0[0] - p1[0]))) / 2
        slope = min_slope
    else:
        b = Fraction((p1[0] - p0[0]) * (p3[1] - p1[1]) - (p1[1] - p0[1]) * (p3[0] - p1[0]), a)
        ix, iy = p0[0] + b * s1[0], p0[1] + b * s1[1]
        slope = (min_slope + max_slope) / 2
    # max_slope > 0 always (it joins a lower point to a later upper one); a tiny or negative
    # mean then means min_slope < 0, so 0 is feasible and needs no mantissa.
    if slope < Fraction(1, 1 << (_MAX_SHIFT - _MANTISSA_BITS + 1)):
        slope = Fraction(0)
    return _Line(start, end, Fraction(ix), Fraction(iy), slope)


def _quantize(line: _Line, start: int, size: int, first_key: int) -> Segment:
    """The fixed-point model of ranks [start, start + size) of ``line``, relative to ``start``."""
    s = line.slope
    if s == 0:
        slope, shift = 0, 0
    else:
        shift = _MANTISSA_BITS - 1 - (s.numerator.bit_length() - s.denominator.bit_length())
        while s * (1 << shift) < (1 << (_MANTISSA_BITS - 1)):
            shift += 1
        while s * (1 << shift) >= (1 << _MANTISSA_BITS):
            shift -= 1
        slope = round(s * (1 << shift))
        if slope == 1 << _MANTISSA_BITS:  # rounded up past the mantissa
            shift -= 1
            slope = round(s * (1 << shift))
        if not 0 <= shift <= _MAX_SHIFT:
            raise AssertionError(f"slope {s} outside the fixed-point range")
    b = line.y0 + s * (first_key - line.x0) - start
    intercept = round(b * (1 << FRAC_BITS))
    return Segment(first_key, start, size, slope, shift, intercept)


def segment(keys, eps: int, max_size: Optional[int] = None) -> list[Segment]:
    """PLA segments of sorted unique uint64 ``keys`` with every position predicted within ``eps``.

    ``max_size`` splits a longer segment into near-equal pieces (each keeps the same line, so
    the bound holds; each gets its own fixed-point model relative to its first key).
    """
    eps = check_eps(eps)
    k = _check_keys(keys)
    if max_size is not None and max_size < 1:
        raise ValueError(f"max_size must be >= 1, got {max_size}")
    ks = k.tolist()
    return _pieces(_fit_lines(ks, eps), ks, max_size)


def _pieces(lines: Sequence[_Line], ks: Sequence[int], max_size: Optional[int]) -> list[Segment]:
    out: list[Segment] = []
    for line in lines:
        n = line.end - line.start
        pieces = 1 if max_size is None else -(-n // max_size)
        for p in range(pieces):
            a = line.start + n * p // pieces
            b = line.start + n * (p + 1) // pieces
            out.append(_quantize(line, a, b - a, ks[a]))
    return out


def max_error(segments: Sequence[Segment], keys) -> int:
    """Largest |predict - position| over all keys (a check of the bound after rounding)."""
    ks = np.asarray(keys).tolist()
    worst = 0
    for seg in segments:
        for j in range(seg.size):
            worst = max(worst, abs(predict(seg, ks[seg.start + j]) - j))
    return worst


# --- nodes -----------------------------------------------------------------------------------


def lines_of(n_items: int) -> int:
    """The cache lines a line-aligned array of ``n_items`` 8-byte keys (pivots, pointers) spans."""
    return -(-n_items // KEYS_PER_LINE)


def search_window(seg: Segment, key: int, eps: int) -> tuple[int, int]:
    """The clamped [lo, hi] positions to read around the prediction for ``key``."""
    p = min(max(predict(seg, key), 0), seg.size - 1)
    return max(p - eps, 0), min(p + eps, seg.size - 1)


def _window_lines(lo: int, hi: int) -> int:
    # arrays start on a line, so position j is in line j // 8
    return hi // KEYS_PER_LINE - lo // KEYS_PER_LINE + 1


class HostLeaf:
    """A leaf of either index: one metadata line in DPA memory over ``keys`` and ``values``
    arrays in host memory (what the sizes below count)."""

    __slots__ = ()

    def dpa_bytes(self) -> int:
        return LEAF_META_LINES * LINE_BYTES

    def host_padding_bytes(self) -> int:
        # each array is line-aligned, so its last line's tail is index overhead, not data
        n = len(self.keys)
        return 2 * (lines_of(n) * LINE_BYTES - n * KEY_BYTES)


class Leaf(HostLeaf):
    """Up to 128 entries: a model in DPA memory over key/value arrays in host memory."""

    __slots__ = ("segment", "keys", "values")

    def __init__(self, segment: Segment, keys: np.ndarray, values: np.ndarray):
        self.segment = segment
        self.keys = keys  # host memory (the replica the DPA reads by DMA)
        self.values = values

    @property
    def first_key(self) -> int:
        return self.segment.first_key



class InnerNode:
    """Up to 7 segments, each with its pivots (children's first keys) and child pointers."""

    __slots__ = ("first_keys", "segments", "pivots", "children")

    def __init__(
        self, segments: Sequence[Segment], pivots: Sequence[np.ndarray], children: Sequence[list]
    ):
        if not 1 <= len(segments) <= SEGMENTS_PER_NODE:
            raise ValueError(
                f"an inner node holds 1..{SEGMENTS_PER_NODE} segments, got {len(segments)}"
            )
        self.segments = tuple(segments)
        self.first_keys = [s.first_key for s in self.segments]  # line 0, with the metadata
        self.pivots = list(pivots)
        self.children = list(children)

    @property
    def first_key(self) -> int:
        return self.first_keys[0]

    def dpa_bytes(self) -> int:
        body = sum(2 * lines_of(len(p)) * LINE_BYTES for p in self.pivots)
        return NODE_HEADER_LINES * LINE_BYTES + body


Node = Union[InnerNode, Leaf]


class LookupCost(NamedTuple):
    """Cache lines one lookup touches, root first; a GET's price is built from these."""

    inner_lines: tuple  # DPA-memory lines per inner node (header 2 + pivots + child pointer)
    pivot_lines: tuple  # of those, the pivot-window lines per inner node (all prefetched)
    # lines a left-to-right scan of the window reads before it can stop (at the first pivot
    # above the key): a cheaper price if the pivot lines are not all prefetched
    pivot_scan_lines: tuple
    leaf_meta_lines: int  # DPA-memory lines of the leaf's metadata (0 if the search stopped above)
    key_window_lines: int  # host key lines DMA'd in one DMA around the prediction
    value_lines: int  # host value lines DMA'd (1 on a hit)

    @property
    def dpa_lines(self) -> int:
        return sum(self.inner_lines) + self.leaf_meta_lines

    @property
    def dma_lines(self) -> int:
        return self.key_window_lines + self.value_lines


class IndexStatistics(NamedTuple):
    keys: int
    leaf_pla_segments: int  # PLA segments at the leaf level before the 128-entry split
    leaves: int
    inner_segments: int
    inner_nodes: int
    depth: int  # levels including the leaves: a GET reads depth - 1 inner nodes
    dpa_bytes: int  # inner nodes + leaf metadata in DPA memory
    index_bytes: int  # everything but the raw 16 B per pair (DPA bytes + host array padding)
    raw_bytes: int

    @property
    def overhead(self) -> float:
        return self.index_bytes / self.raw_bytes if self.raw_bytes else 0.0


class OrderedIndex:
    """What both of DPA-Store's indexes (this learned one and the B+-tree baseline) answer the
    same way, given their own descent: GET from ``lookup``, and RANGE as the DPA runs it (no
    sibling pointers): descend to the start key, scan the leaf from the first key >= it, and at
    the leaf's end re-descend with the next leaf's first key (the fence the descent found).
    A subclass gives ``lookup``, ``_descend(key) -> (leaf or None, ..., fence or None)``,
    ``_leaf_lower_bound(leaf, key)`` and ``_first_key()``."""

    def get(self, key: int) -> Optional[int]:
        return self.lookup(key)[0]

    def range_scan(self, start_key: int, count: int) -> list[tuple[int, int]]:
        """RANGE: up to ``count`` (key, value) pairs with key >= ``start_key``, in key order."""
        if count < 0:
            raise ValueError(f"count must be >= 0, got {count}")
        out: list[tuple[int, int]] = []
        key: Optional[int] = int(start_key)
        if key < 0 or key >= UINT64_LIMIT:
            raise ValueError(f"start_key must be in [0, 2**64), got {start_key}")
        while key is not None and len(out) < count:
            leaf, *_, fence = self._descend(key)
            if leaf is None:  # below every key: start from the first leaf
                key = self._first_key()
                continue
            i = self._leaf_lower_bound(leaf, key)
            take = min(len(leaf.keys) - i, count - len(out))
            out.extend(zip(leaf.keys[i : i + take].tolist(), leaf.values[i : i + take].tolist()))
            key = fence
        return out

    def lower_bound(self, key: int) -> Optional[tuple[int, int]]:
        """The first (key, value) with key >= ``key``, or None."""
        r = self.range_scan(key, 1)
        return r[0] if r else None


class LearnedIndex(OrderedIndex):
    """DPA-Store's tree after a bulk build: inner nodes down to leaves over host arrays."""

    def __init__(
        self, root: InnerNode, depth: int, leaf_eps: int, inner_eps: int, stats: IndexStatistics
    ):
        self.root = root
        self.depth = depth
        self.leaf_eps = leaf_eps
        self.inner_eps = inner_eps
        self._stats = stats

    @classmethod
    def bulk_build(
        cls, keys, values, leaf_eps: int = LEAF_EPS, inner_eps: int = INNER_EPS
    ) -> "LearnedIndex":
        """Sorted unique keys and their values -> leaves by PLA (leaf eps, 128 entries each) ->
        inner levels bottom-up from the children's first keys (inner eps) up to one root."""
        leaf_eps = check_eps(leaf_eps, "leaf_eps")
        inner_eps = check_eps(inner_eps, "inner_eps")
        k, v = check_pairs(keys, values)

        ks = k.tolist()
        leaf_lines = _fit_lines(ks, leaf_eps)
        level: list[Node] = [
            Leaf(s, k[s.start : s.start + s.size], v[s.start : s.start + s.size])
            for s in _pieces(leaf_lines, ks, LEAF_CAPACITY)
        ]
        n_leaves = len(level)
        dpa = sum(leaf.dpa_bytes() for leaf in level)
        padding = sum(leaf.host_padding_bytes() for leaf in level)
        inner_segments = inner_nodes = 0
        depth = 1
        while len(level) > 1 or depth == 1:  # the root is always an inner node
            pivots = np.array([c.first_key for c in level], dtype=np.uint64)
            segs = segment(pivots, inner_eps, max_size=SEGMENT_CAPACITY)
            parents: list[Node] = []
            for g in range(0, len(segs), SEGMENTS_PER_NODE):
                group = segs[g : g + SEGMENTS_PER_NODE]
                node = InnerNode(
                    group,
                    [pivots[s.start : s.start + s.size] for s in group],
                    [level[s.start : s.start + s.size] for s in group],
                )
                dpa += node.dpa_bytes()
                parents.append(node)
            inner_segments += len(segs)
            inner_nodes += len(parents)
            level = parents
            depth += 1
        stats = IndexStatistics(
            keys=int(k.size),
            leaf_pla_segments=len(leaf_lines),
            leaves=n_leaves,
            inner_segments=inner_segments,
            inner_nodes=inner_nodes,
            depth=depth,
            dpa_bytes=dpa,
            index_bytes=dpa + padding,
            raw_bytes=RAW_PAIR_BYTES * int(k.size),
        )
        return cls(level[0], depth, leaf_eps, inner_eps, stats)

    def statistics(self) -> IndexStatistics:
        return self._stats

    # --- traversal ---------------------------------------------------------------------------

    def _descend(self, key: int):
        """(leaf or None, per-node lines, pivot lines, pivot scan lines, fence): the leaf whose
        range holds ``key``; None when ``key`` is below the smallest key. ``fence`` is the first
        key of the next leaf (None at the last), where a range scan re-descends."""
        node: Node = self.root
        eps = self.inner_eps
        inner_lines: list[int] = []
        pivot_lines: list[int] = []
        scan_lines: list[int] = []
        fence: Optional[int] = None
        while isinstance(node, InnerNode):
            j = bisect_right(node.first_keys, key) - 1
            if j < 0:  # below the node's first key: only possible at the root
                inner_lines.append(1)
                pivot_lines.append(0)
                scan_lines.append(0)
                return None, inner_lines, pivot_lines, scan_lines, fence
            seg = node.segments[j]
            lo, hi = search_window(seg, key, eps)
            window = node.pivots[j][lo : hi + 1].tolist()
            # the model brackets the child in [p - eps - 1, p + eps]; if no pivot of the window
            # is <= key the child is the one just below it, known without reading its pivot
            c = lo + bisect_right(window, key) - 1
            if c < 0:
                raise AssertionError(f"model of segment {j} missed key {key}")
            lines = _window_lines(lo, hi)
            inner_lines.append(NODE_HEADER_LINES + lines + 1)
            pivot_lines.append(lines)
            scan_lines.append(_window_lines(lo, max(lo, min(c + 1, hi))))
            pivots = node.pivots[j]
            if c + 1 < seg.size:
                fence = int(pivots[c + 1])
            elif j + 1 < len(node.segments):
                fence = node.first_keys[j + 1]
            node = node.children[j][c]
        return node, inner_lines, pivot_lines, scan_lines, fence

    def lookup(self, key: int) -> tuple[Optional[int], LookupCost]:
        """GET: the value of ``key`` (None if absent) and the lines the traversal touched."""
        key = int(key)
        leaf, inner_lines, pivot_lines, scan_lines, _ = self._descend(key)
        if leaf is None:
            cost = LookupCost(tuple(inner_lines), tuple(pivot_lines), tuple(scan_lines), 0, 0, 0)
            return None, cost
        lo, hi = search_window(leaf.segment, key, self.leaf_eps)
        window = leaf.keys[lo : hi + 1].tolist()
        i = bisect_right(window, key) - 1
        found = i >= 0 and window[i] == key
        cost = LookupCost(
            tuple(inner_lines),
            tuple(pivot_lines),
            tuple(scan_lines),
            LEAF_META_LINES,
            _window_lines(lo, hi),
            int(found),
        )
        return (int(leaf.values[lo + i]) if found else None), cost

    def _leaf_lower_bound(self, leaf: Leaf, key: int) -> int:
        if key <= leaf.first_key:
            return 0
        lo, hi = search_window(leaf.segment, key, self.leaf_eps)
        # first key >= key lies in [lo, hi + 1] (hi + 1 when the whole window is below key)
        return lo + int(np.searchsorted(leaf.keys[lo : hi + 1], np.uint64(key), side="left"))

    def _first_key(self) -> int:
        node: Node = self.root
        while isinstance(node, InnerNode):
            node = node.children[0][0]
        return node.first_key

    def leaves(self) -> list[Leaf]:
        """All leaves in key order (host-side walk, for checks and statistics)."""
        out: list[Leaf] = []
        stack: list[Node] = [self.root]
        while stack:
            node = stack.pop()
            if isinstance(node, Leaf):
                out.append(node)
            else:
                for kids in reversed(node.children):
                    stack.extend(reversed(kids))
        return out
