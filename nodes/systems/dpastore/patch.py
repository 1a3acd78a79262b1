"""DPA-Store's write path, pure logic: per-leaf insert buffers, host patches, parent rebuilds.

No timing, no threads, no DMA: the functions here are what a traverser thread, a host patcher
and (later) a stitcher do to the data, so that the threaded and timed code can be built on them
and checked against them. Style and node classes follow :mod:`.pla`.

Insert buffer (DPA memory, one per leaf)
    INSERT, UPDATE and DELETE never touch the leaf: they append ``(key, value)`` or
    ``(key, delete marker)`` to the leaf's insert buffer, a fixed array of
    :data:`BUFFER_SLOTS` = 16 slots. The buffer is a plain uint64 numpy array (see
    :func:`new_buffer`) so it can later live in a shared-memory segment and be worked on with
    :mod:`shm.atomics` by several processes::

        line 0     : reserved, published, 6 words padding   (the two counters share a line)
        lines 1-2  : keys[16]
        lines 3-4  : values[16]   (EMPTY = not yet written, TOMBSTONE = delete marker)

    16 slots = 256 bytes of entries = 4 lines: a GET prefetches the whole buffer while it
    computes the leaf model's prediction (the paper's early exit on a buffered key), so the
    buffer must stay a handful of lines; and 16 writes per patch amortise one host round trip
    (DMA the request, merge, PLA, COPY + CONNECT stitches) while keeping the DPA memory per leaf
    at 5 lines (~250k leaves for 25M keys -> ~80 MB of the 1 GiB region).

The paper's two counters
    One FAA before the data write (:func:`reserve`: a slot of one's own, so writers never
    overwrite each other and need no lock) and one after it (:func:`publish`). Why two and not
    one: the slot counter says who may write where, the published counter says how many writes
    are *complete*. Only the second can tell the writer that must hand the buffer to the host:
    the one whose publish brings the count to 16 knows every slot holds its data, whereas the
    writer that reserved slot 15 may finish before the writer of slot 3. So exactly one writer
    per buffer gets the "enqueue patch" flag, and the host never DMAs a half-written buffer.
    Once ``reserved`` reaches 16 the buffer is read-only until the stitchers clear it;
    :func:`reserve` returns :data:`FULL` and the traverser re-enqueues the request (retries
    later), as the paper does. ``reserved`` keeps counting failed reservations (an FAA cannot
    be undone), so readers clamp it to the slot count.

Reads: value before key
    Publishes complete out of order, so ``published`` is a count, not a prefix: "slots below
    ``published``" may include a slot whose writer has not written yet. A reader therefore
    checks every reserved slot itself, and the value word is the slot's commit point: values
    start as :data:`EMPTY`, the writer stores the key and then the value (release), and the
    reader loads the value (acquire) before the key: a reader that sees a slot's value also
    sees the key written with it, so it never pairs a key with another write's value (the
    paper: "concurrent lookups read values before the corresponding key to guarantee correct
    mappings"). The price is two reserved value words, :data:`EMPTY` and :data:`TOMBSTONE`:
    values must be at most :data:`MAX_VALUE`. Among slots holding the same key, the highest
    slot is the newest (slots are handed out in reservation order).

Host patches
    The request names a leaf with a full buffer. :func:`patch_leaf` takes the buffer's newest
    entry per key. If they leave the key set unchanged (updates of present keys, deletes of
    absent keys) it is an UPDATE-only patch: overwrite the host values in place, nothing for the
    DPA index to change, the stitchers just clear the buffer. Otherwise (an INSERT or DELETE):
    merge into one sorted array (buffer wins, deletes remove), PLA-segment it with the leaf eps
    into one or more new leaves. The paper's retrain bound keeps 0.25 x capacity of headroom: a
    new leaf holds at most ``(1 - 0.25) * 128 = 96`` entries, so new leaves are sparse and the
    next few patches of the same range do not split them again.

Parent rebuild
    One new leaf is a pointer swap in the parent. Several new leaves replace one child, so
    :func:`rebuild_parent` merges the parent's child pivots with the new first keys, PLA-segments
    them with the inner eps and, if the result no longer fits one :class:`.pla.InnerNode`
    (7 segments of 128 pivots), splits it into balanced inner nodes each within the retrain
    bound (at most 5 of 7 segments, segments of at most 96 pivots). The caller repeats upward
    while a parent splits. It works on :class:`.pla.InnerNode` directly: an inner node keeps
    each segment's pivots and children separately and a segment's model is relative to its own
    first key, so re-grouping segments into new nodes needs no refit.
"""

from __future__ import annotations

from typing import NamedTuple, Optional, Sequence

import numpy as np

from shm.atomics import faa, load_acquire, store_release

from . import pla
from .pla import INNER_EPS, LEAF_CAPACITY, LEAF_EPS, SEGMENT_CAPACITY, SEGMENTS_PER_NODE

# --- insert buffer -----------------------------------------------------------------------------

BUFFER_SLOTS = 16  # 16 x (8 B key + 8 B value) = 4 lines: prefetched whole during a GET
RESERVED = 0  # word index of the reservation counter
PUBLISHED = 1  # word index of the completion counter (same line: one DMA reads both)
_KEYS = pla.KEYS_PER_LINE  # keys start on line 1
_VALUES = _KEYS + BUFFER_SLOTS  # values start on line 3
BUFFER_WORDS = _VALUES + BUFFER_SLOTS  # 40 words = 5 lines

EMPTY = (1 << 64) - 1  # value word of a slot not yet written (the commit marker)
TOMBSTONE = (1 << 64) - 2  # value word of a DELETE
MAX_VALUE = (1 << 64) - 3

FULL = -1  # reserve(): the buffer is full (pending patch); retry the request later

RETRAIN_BOUND = 0.25  # of capacity, left free in every leaf / inner node a split creates


def new_buffer() -> np.ndarray:
    """An empty insert buffer: counters 0, every value EMPTY."""
    buf = np.zeros(BUFFER_WORDS, dtype=np.uint64)
    buf[_VALUES:] = EMPTY
    return buf


def _check_buffer(buf) -> np.ndarray:
    if not (
        isinstance(buf, np.ndarray)
        and buf.dtype == np.uint64
        and buf.shape == (BUFFER_WORDS,)
        and buf.flags.c_contiguous
    ):
        desc = f"{buf.dtype} {buf.shape}" if isinstance(buf, np.ndarray) else type(buf).__name__
        raise ValueError(f"an insert buffer is a C-contiguous uint64[{BUFFER_WORDS}], got {desc}")
    return buf


def _check_word(x, what: str, limit: int = 1 << 64) -> int:
    if isinstance(x, bool) or not isinstance(x, (int, np.integer)) or not 0 <= x < limit:
        raise ValueError(f"{what} must be an integer in [0, {limit}), got {x!r}")
    return int(x)


def reserve(buf: np.ndarray) -> int:
    """First FAA: the slot this writer owns, or :data:`FULL` (buffer pending a patch)."""
    slot = int(faa(_check_buffer(buf), RESERVED, 1))
    return slot if slot < BUFFER_SLOTS else FULL


def write_slot(buf: np.ndarray, slot: int, key: int, value: Optional[int]) -> None:
    """The data write between the two FAAs; ``value=None`` writes the delete marker.

    Key first, value last with release: the value is the commit word readers test."""
    _check_buffer(buf)
    if isinstance(slot, bool) or not isinstance(slot, (int, np.integer)):
        raise ValueError(f"slot must be an integer in [0, {BUFFER_SLOTS}), got {slot!r}")
    if not 0 <= slot < BUFFER_SLOTS:
        raise ValueError(f"slot must be an integer in [0, {BUFFER_SLOTS}), got {slot!r}")
    key = _check_word(key, "key")
    word = TOMBSTONE if value is None else _check_word(value, "value", MAX_VALUE + 1)
    buf[_KEYS + slot] = key
    store_release(buf, _VALUES + int(slot), word)


def publish(buf: np.ndarray) -> bool:
    """Second FAA. True for exactly one writer per buffer: the one whose write completed the
    buffer, and so the one that must enqueue the patch request."""
    return int(faa(_check_buffer(buf), PUBLISHED, 1)) == BUFFER_SLOTS - 1


def buffer_write(buf: np.ndarray, key: int, value: Optional[int]) -> tuple[bool, bool]:
    """reserve + write + publish: (written, enqueue_patch). Not written means FULL: retry."""
    _check_word(key, "key")
    if value is not None:
        _check_word(value, "value", MAX_VALUE + 1)
    slot = reserve(buf)
    if slot == FULL:
        return False, False
    write_slot(buf, slot, key, value)
    return True, publish(buf)


class BufferHit(NamedTuple):
    """The newest buffered write of a key: ``deleted`` or ``value`` (never both)."""

    deleted: bool
    value: Optional[int]


def _committed(buf: np.ndarray):
    """(slot, key, value word) of every written slot, oldest first; value read before key."""
    n = min(int(load_acquire(buf, RESERVED)), BUFFER_SLOTS)
    for slot in range(n):
        v = int(load_acquire(buf, _VALUES + slot))
        if v == EMPTY:  # reserved, not yet written: invisible until its value lands
            continue
        yield slot, int(buf[_KEYS + slot]), v


def lookup_buffer(buf: np.ndarray, key: int) -> Optional[BufferHit]:
    """GET's early exit: the newest buffered write of ``key``, or None (look in the leaf)."""
    _check_buffer(buf)
    key = _check_word(key, "key")
    hit: Optional[BufferHit] = None
    for _, k, v in _committed(buf):
        if k == key:  # later slots are newer: keep the last
            hit = BufferHit(True, None) if v == TOMBSTONE else BufferHit(False, v)
    return hit


def newest_entries(buf: np.ndarray) -> dict[int, Optional[int]]:
    """Host side: key -> newest value (None = deleted) over the written slots."""
    _check_buffer(buf)
    out: dict[int, Optional[int]] = {}
    for _, k, v in _committed(buf):
        out[k] = None if v == TOMBSTONE else v
    return out


def clear_buffer(buf: np.ndarray) -> None:
    """What the stitchers do after a patch: values back to EMPTY, then the counters to 0.

    Values first: once ``reserved`` is 0 new writers take slots again, and a reader must not
    mistake an old value for a new write."""
    _check_buffer(buf)
    for slot in range(BUFFER_SLOTS):
        store_release(buf, _VALUES + slot, EMPTY)
    store_release(buf, PUBLISHED, 0)
    store_release(buf, RESERVED, 0)


# --- host patch of one leaf --------------------------------------------------------------------


def _check_bound(retrain_bound) -> float:
    if isinstance(retrain_bound, bool) or not isinstance(retrain_bound, (int, float)):
        raise ValueError(f"retrain_bound must be a number in [0, 1), got {retrain_bound!r}")
    if not 0 <= retrain_bound < 1:
        raise ValueError(f"retrain_bound must be a number in [0, 1), got {retrain_bound!r}")
    return float(retrain_bound)


def split_limit(capacity: int, retrain_bound: float = RETRAIN_BOUND) -> int:
    """Entries a node created by a split may hold: capacity minus the retrain headroom."""
    if isinstance(capacity, bool) or not isinstance(capacity, (int, np.integer)) or capacity < 1:
        raise ValueError(f"capacity must be an integer >= 1, got {capacity!r}")
    return max(1, int(capacity * (1 - _check_bound(retrain_bound))))


class PatchResult(NamedTuple):
    """``update_only``: values were overwritten in place (``updated`` keys), the index is
    unchanged. Otherwise ``leaves`` replace the old leaf (empty if every key was deleted) and
    ``first_keys`` are their pivots for the parent."""

    update_only: bool
    updated: tuple  # keys whose host value was overwritten (update-only patches)
    leaves: tuple  # new pla.Leaf objects, in key order
    first_keys: tuple


def patch_leaf(
    leaf: pla.Leaf,
    entries,
    leaf_eps: int = LEAF_EPS,
    capacity: int = LEAF_CAPACITY,
    retrain_bound: float = RETRAIN_BOUND,
    fence: Optional[int] = None,
) -> PatchResult:
    """Apply a full insert buffer (or its :func:`newest_entries` dict) to ``leaf``.

    ``fence`` (the next leaf's first key, if the caller knows it) rejects buffered keys that
    belong to the next leaf: merged in here they would overlap it."""
    if isinstance(entries, np.ndarray):
        entries = newest_entries(entries)
    if not isinstance(entries, dict):
        raise ValueError(
            f"entries must be an insert buffer or a dict, got {type(entries).__name__}"
        )
    if not isinstance(leaf, pla.Leaf):
        raise ValueError(f"leaf must be a pla.Leaf, got {type(leaf).__name__}")
    eps = pla.check_eps(leaf_eps, "leaf_eps")
    limit = split_limit(capacity, retrain_bound)
    for k, v in entries.items():
        _check_word(k, "key")
        if v is not None:
            _check_word(v, "value", MAX_VALUE + 1)
        if fence is not None and k >= fence:
            raise ValueError(f"key {k} is at or above the leaf's fence {fence}: not this leaf's")

    keys, values = leaf.keys, leaf.values
    pos = {int(k): i for i, k in enumerate(keys.tolist())}
    changes_keys = any((v is None) == (k in pos) for k, v in entries.items())
    if not changes_keys:
        # UPDATE-only: present keys get new values, deletes of absent keys are no-ops
        updated = sorted(k for k, v in entries.items() if v is not None)
        for k in updated:
            values[pos[k]] = entries[k]
        return PatchResult(True, tuple(updated), (), ())

    merged = dict(zip(keys.tolist(), values.tolist()))
    for k, v in entries.items():
        if v is None:
            merged.pop(k, None)
        else:
            merged[k] = v
    if not merged:
        return PatchResult(False, (), (), ())
    mk = np.array(sorted(merged), dtype=np.uint64)
    mv = np.array([merged[k] for k in mk.tolist()], dtype=np.uint64)
    new = [
        pla.Leaf(s, mk[s.start : s.start + s.size].copy(), mv[s.start : s.start + s.size].copy())
        for s in pla.segment(mk, eps, max_size=limit)
    ]
    return PatchResult(False, (), tuple(new), tuple(leaf.first_key for leaf in new))


def leaf_get(leaves: Sequence[pla.Leaf], key: int, leaf_eps: int = LEAF_EPS) -> Optional[int]:
    """A GET over sibling leaves the way a traverser does it in one leaf: pick the leaf by first
    key, predict, search only the 2 eps + 1 window. None if absent (for checks of new leaves)."""
    firsts = [leaf.first_key for leaf in leaves]
    j = int(np.searchsorted(np.array(firsts, dtype=np.uint64), np.uint64(key), side="right")) - 1
    if j < 0:
        return None
    leaf = leaves[j]
    lo, hi = pla.search_window(leaf.segment, int(key), leaf_eps)
    i = lo + int(np.searchsorted(leaf.keys[lo : hi + 1], np.uint64(key)))
    if i < len(leaf.keys) and int(leaf.keys[i]) == int(key):
        return int(leaf.values[i])
    return None


# --- parent rebuild ----------------------------------------------------------------------------


class RebuildResult(NamedTuple):
    """The inner nodes that replace the parent (one unless it ``split``) and their first keys.

    The caller rebuilds the grandparent with these when the parent split or its first key
    moved (a grandparent pivot must equal its child's first key: a model is only evaluated for
    keys at or above its segment's first key); otherwise one pointer swap installs the node.
    No nodes: every child was removed, drop the parent too."""

    nodes: tuple
    first_keys: tuple
    split: bool


def _first_key(node) -> int:
    return int(node.first_key)


def rebuild_parent(
    parent: pla.InnerNode,
    old_child,
    new_children: Sequence,
    inner_eps: int = INNER_EPS,
    retrain_bound: float = RETRAIN_BOUND,
) -> RebuildResult:
    """Replace ``old_child`` (found by identity) by ``new_children`` and rebuild ``parent``.

    Fits one node: one node with full-capacity segments (no split). Otherwise: segments of at
    most ``split_limit(128)`` pivots grouped evenly into nodes of at most
    ``split_limit(7)`` segments."""
    if not isinstance(parent, pla.InnerNode):
        raise ValueError(f"parent must be a pla.InnerNode, got {type(parent).__name__}")
    eps = pla.check_eps(inner_eps, "inner_eps")
    seg_limit = split_limit(SEGMENT_CAPACITY, retrain_bound)
    node_limit = split_limit(SEGMENTS_PER_NODE, retrain_bound)
    children = [c for kids in parent.children for c in kids]
    where = [i for i, c in enumerate(children) if c is old_child]
    if len(where) != 1:
        raise ValueError("old_child is not a child of parent")
    i = where[0]
    new_children = list(new_children)
    for c in new_children:
        if not isinstance(c, (pla.Leaf, pla.InnerNode)):
            raise ValueError(
                f"new children must be pla.Leaf or pla.InnerNode, got {type(c).__name__}"
            )
    children[i : i + 1] = new_children
    if not children:
        return RebuildResult((), (), False)
    pivots = [_first_key(c) for c in children]
    bad = [j for j in range(len(pivots) - 1) if pivots[j] >= pivots[j + 1]]
    if bad:
        j = bad[0]
        raise ValueError(
            f"new children do not fit between their siblings: pivot {pivots[j]} "
            f"is not below the next pivot {pivots[j + 1]}"
        )
    pv = np.array(pivots, dtype=np.uint64)

    def node(group):
        return pla.InnerNode(
            group,
            [pv[s.start : s.start + s.size] for s in group],
            [children[s.start : s.start + s.size] for s in group],
        )

    segs = pla.segment(pv, eps, max_size=SEGMENT_CAPACITY)
    if len(segs) <= SEGMENTS_PER_NODE:
        n = node(segs)
        return RebuildResult((n,), (n.first_key,), False)
    segs = pla.segment(pv, eps, max_size=seg_limit)
    m = -(-len(segs) // node_limit)  # fewest nodes within the bound, then balance them
    groups = [segs[len(segs) * g // m : len(segs) * (g + 1) // m] for g in range(m)]
    nodes = tuple(node(g) for g in groups)
    return RebuildResult(nodes, tuple(n.first_key for n in nodes), True)


def new_root(nodes: Sequence, inner_eps: int = INNER_EPS) -> pla.InnerNode:
    """The root above the nodes of a root split (levels added until one node remains), the
    same way bulk_build stacks levels."""
    level = list(nodes)
    if not level:
        raise ValueError("a new root needs at least one child")
    eps = pla.check_eps(inner_eps, "inner_eps")
    while True:
        pv = np.array([_first_key(c) for c in level], dtype=np.uint64)
        segs = pla.segment(pv, eps, max_size=SEGMENT_CAPACITY)
        level = [
            pla.InnerNode(
                segs[g : g + SEGMENTS_PER_NODE],
                [pv[s.start : s.start + s.size] for s in segs[g : g + SEGMENTS_PER_NODE]],
                [level[s.start : s.start + s.size] for s in segs[g : g + SEGMENTS_PER_NODE]],
            )
            for g in range(0, len(segs), SEGMENTS_PER_NODE)
        ]
        if len(level) == 1:
            return level[0]
