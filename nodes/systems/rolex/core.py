"""ROLEX's data-structure core: learned cache on compute nodes, sorted 1 KiB leaves on memory nodes.

ROLEX (Li et al., FAST'23) is a learned range index for disaggregated memory. The keys and
values live in fixed-size sorted leaves in memory-node memory; compute nodes hold a small
*learned cache* (piecewise-linear models plus each model's leaf table) that predicts which leaves
hold a key, so a GET is one batch of one-sided READs of the candidate leaves. This module is the
pure data-structure core: no verbs, no timing, no threads. Each operation returns a
:class:`OpCost` (leaves READ and WRITTEN, round trips, FAAs) so later code can price it.

What follows the public code (iotlpf/ROLEX, ``rolex/leaf.hpp``, ``leaf_table.hpp``,
``submodel.hpp``) and what is a choice made here:

Remote layout (memory node), byte for byte
    ``Leaf<64, u64, u64>``: ``keys[64]`` (512 B, ascending, empty slots = UINT64_MAX at the end)
    then ``vals[64]`` (512 B): :data:`LEAF_BYTES` = 1024 B, no header, as in ``leaf.hpp``. The
    leaf region starts with a 16-byte header whose first word is the leaf allocation counter
    (the FAA target), so leaf ``n`` is at offset ``16 + n * 1024``, ROLEX's remote leaf offset.
    Here the region is the pair of numpy arrays ``keys[n, 64]`` / ``vals[n, 64]``.

    The synonym pointer is *not* in the leaf: as in ``leaf_table.hpp`` every leaf has an
    8-byte leaf-table entry (leaf number + the index of its next synonym leaf; ROLEX packs lock,
    region and an 8-bit synonym index into it). The table is kept on the memory node and
    cached with the models on the compute nodes, so following a synonym chain costs leaf READs
    but no pointer READs; linking a new synonym leaf costs one 8-byte table WRITE. Here it is
    ``synonym[n]`` (-1 = none), one entry per allocated leaf.

Bulk load and the learned cache
    The sorted keys are segmented by :func:`nodes.systems.dpastore.pla.segment` with eps = 32
    (ROLEX's ``learned_cache_t``); each segment is one model (ROLEX's ``SubModel``) and owns its
    own run of leaves (a leaf never spans two models, as in ``SubModel``'s constructor), filled
    with ``fill`` keys each. A key at rank r within its model is in the model's leaf r // fill.
    ``model_for_key`` is a binary search over the models' first keys (the C++ one is branchless;
    the result is the same).

    Default ``fill`` = 64, full leaves, because that is what the public code does
    (``insert_not_full`` until ``isfull``) and DPA-Store measured that code: the first insert
    into a full leaf allocates a synonym leaf, which is exactly the cost ROLEX pays between
    retrains. A smaller ``fill`` leaves headroom (the knob a data-aware allocation would set);
    the window below and :data:`max_candidates` hold for any fill.

Candidate leaves
    The model's prediction p (clamped to the model's ranks) is within eps of the rank of every
    bulk-loaded key. A key inserted later lies between two loaded keys of ranks r and r + 1, and
    the prediction is monotone, so p <= r + 1 + eps: the window [p - eps - 1, p + eps] contains
    r for every key, loaded or not (ROLEX widens its window by 2 for the same reason). Its
    2 eps + 2 ranks span at most ceil((2 eps + 1) / fill) + 1 leaves: 3 for eps 32, fill 64,
    and 2 for an interior key (66 ranks cross a 64-key leaf's boundary). Each candidate leaf is
    READ whole, as ROLEX's code does (``search_asyn`` READs ``sizeof(leaf_t)`` per leaf of the
    window; so does CHIME's reproduction, River861/ROLEX ``fetch_nodes``): no window of entries
    within a leaf. The leaf's ``span`` (keys a leaf holds, default 64, ROLEX's ``Leaf<64>``) sets
    the bytes; CHIME ran ROLEX with 16-key leaves and eps 16 (docs/rolex.md).

Which leaf a key belongs to (search, insert, update, delete alike)
    All candidate leaves are READ in one batch (``search_asyn``); the key's leaf is the last
    candidate whose first key is <= the key, else the first candidate (``insertHere`` scanned
    from ``hi`` down). Because predictions are monotone, every leaf before the window holds only
    smaller keys and every leaf after it only larger ones, so this choice keeps the whole array
    of leaves (with their chains) in key order, and an operation on a key always lands on the
    same leaf group. A leaf group is a primary leaf and its synonym chain.

Synonym leaves (overflow)
    Inserting into a full leaf allocates a synonym leaf by FAA on the counter, moves the leaf's
    upper half (32 pairs) into it and links it right after the leaf in the chain, then inserts
    the key into whichever half covers it: ROLEX's ``insert_synonym``. So the keys of a chain are
    sorted across its leaves, and the chain is only READ when the key is above the primary leaf's
    last key. A synonym leaf that a delete empties is unlinked (its space is not reclaimed, as
    in ROLEX); a primary leaf that a delete empties takes over its first synonym's contents, so
    that a group with keys always has a non-empty primary (ROLEX leaves that case a "fixme": its
    ``insertHere`` skips an empty primary and loses the chain).

Retraining
    ROLEX retrains asynchronously on the memory side, merging synonym leaves back into leaves,
    and the compute nodes fetch the new models. Here :meth:`RolexIndex.retrain` is a synchronous
    method the caller invokes: it reads every linked leaf in key order and re-lays the keys out
    as a fresh bulk load (new models, no chains), so a key that was in a synonym leaf is then
    found in its primary leaf. Its OpCost counts the leaves read and written. On the rack the
    memory node's retrainer (``retrain.py``) does this one model at a time while clients run,
    laying each model's keys out with this class.
"""

from __future__ import annotations

from bisect import bisect_right
from typing import NamedTuple, Optional

import numpy as np

# the project's PLA segmenter and its input checks (one place for both systems' error messages)
from nodes.systems.dpastore.pla import (
    Segment,
    check_eps,
    check_pairs,
    predict,
    segment,
)

SLOTS = 64  # Leaf<64, u64, u64>: the public code's span (rolex/trait.hpp), the default
KEY_BYTES = VALUE_BYTES = 8
LEAF_BYTES = SLOTS * (KEY_BYTES + VALUE_BYTES)  # 1024
#: Spans a leaf may have: even (a split moves the upper half), up to what a leaf's 16-bit slot
#: count would hold; CHIME (SOSP'24) ran ROLEX with 16 (its exp/params: "span_size" ROLEX 16).
MIN_SPAN, MAX_SPAN = 2, 4096
REGION_HEADER_BYTES = 16  # the allocation counter (FAA target) and a spare word
TABLE_ENTRY_BYTES = 8  # one leaf-table entry per leaf (leaf number + synonym index)
# A cached model: first key (8, for model_for_key) + the fixed-point line of pla.Segment
# (slope 4 + shift 1 + intercept 4) + its first leaf number (4) + its size in keys (4).
MODEL_BYTES = 8 + 9 + 4 + 4
EMPTY_KEY = (1 << 64) - 1  # UINT64_MAX marks an empty slot, so it is no user key
EPS = 32
_NONE = -1
_EMPTY = np.uint64(EMPTY_KEY)


def leaf_bytes(span: int = SLOTS) -> int:
    """Bytes of a leaf of ``span`` keys: the keys, then the values (no header, as ``leaf.hpp``)."""
    return span * (KEY_BYTES + VALUE_BYTES)


def check_span(span) -> int:
    is_int = isinstance(span, (int, np.integer)) and not isinstance(span, bool)
    if not is_int or not MIN_SPAN <= span <= MAX_SPAN or span % 2:
        raise ValueError(f"span (keys per leaf) must be an even integer in [{MIN_SPAN}, {MAX_SPAN}], got {span!r}")
    return int(span)


def remote_offset(leaf: int, span: int = SLOTS) -> int:
    """Byte offset of leaf ``leaf`` in the memory node's leaf region (ROLEX: 16 + n x 1024)."""
    return REGION_HEADER_BYTES + leaf * leaf_bytes(span)


def max_candidates(eps: int = EPS, fill: int = SLOTS) -> int:
    """Most primary leaves one window of 2 eps + 2 ranks can touch."""
    return -(-(2 * eps + 1) // fill) + 1


class OpCost(NamedTuple):
    """What one operation did to remote memory (all one-sided verbs)."""

    candidates: int  # primary leaves READ in the first batch (the model's window)
    synonym_reads: int  # synonym leaves READ afterwards (a second round trip if > 0)
    leaves_written: int  # 1 KiB leaf WRITEs
    table_writes: int  # 8-byte leaf-table entry WRITEs (linking / unlinking synonym leaves)
    faa: int  # FAAs on the leaf counter (synonym leaves allocated)
    round_trips: int  # dependent batches of verbs

    @property
    def leaves_read(self) -> int:
        return self.candidates + self.synonym_reads


class Statistics(NamedTuple):
    keys: int
    leaves: int  # primary leaves (addressed by the models)
    synonym_leaves: int  # synonym leaves currently linked in a chain
    allocated_leaves: int  # the counter: primary + every synonym ever allocated
    models: int
    memory_bytes: int  # region header + allocated leaves + leaf table, on the memory node
    cache_bytes: int  # models + the cached leaf table, on each compute node


class _Found(NamedTuple):
    leaf: int  # the leaf of the group that covers the key
    prev: int  # its predecessor in the chain (_NONE for the primary)
    primary: int
    cost: OpCost


def _check_key(key, what: str = "key") -> int:
    is_int = isinstance(key, (int, np.integer)) and not isinstance(key, bool)
    if not is_int or not 0 <= int(key) < EMPTY_KEY:
        raise ValueError(f"{what} must be an integer in [0, 2**64 - 1), got {key!r}")
    return int(key)


def _check_value(value) -> int:
    is_int = isinstance(value, (int, np.integer)) and not isinstance(value, bool)
    if not is_int or not 0 <= int(value) < (1 << 64):
        raise ValueError(f"value must be an integer in [0, 2**64), got {value!r}")
    return int(value)


class RolexIndex:
    """ROLEX's leaves (memory node) and learned cache (compute node) after a bulk load."""

    def __init__(self, keys, values, eps: int = EPS, fill: int | None = None, span: int = SLOTS):
        self.eps = check_eps(eps)
        self.span = check_span(span)
        fill = self.span if fill is None else fill
        is_int = isinstance(fill, (int, np.integer)) and not isinstance(fill, bool)
        if not is_int or not 1 <= fill <= self.span:
            raise ValueError(f"fill must be an integer in [1, {self.span}] (the span), got {fill!r}")
        self.fill = int(fill)
        k, v = check_pairs(keys, values, "bulk load")
        if int(k[-1]) == EMPTY_KEY:
            raise ValueError("keys must be below 2**64 - 1 (UINT64_MAX marks an empty slot)")
        self._load(k, v)

    # --- layout ------------------------------------------------------------------------------

    def _load(self, k: np.ndarray, v: np.ndarray) -> None:
        segs = segment(k, self.eps)
        f = self.fill
        per_model = [-(-s.size // f) for s in segs]
        n = sum(per_model)
        cap = max(16, 2 * n)  # room for synonym leaves; grows by doubling (a bigger region)
        self._keys = np.full((cap, self.span), _EMPTY, dtype=np.uint64)
        self._vals = np.zeros((cap, self.span), dtype=np.uint64)
        self._n = np.zeros(cap, dtype=np.int64)  # slots used: what a reader sees in the leaf
        self._syn = np.full(cap, _NONE, dtype=np.int64)  # the leaf table's synonym pointers
        self._segs: list[Segment] = segs
        self._first_keys = [s.first_key for s in segs]
        self._base: list[int] = []
        leaf = 0
        for s, m in zip(segs, per_model):
            self._base.append(leaf)
            for i in range(m):
                a = s.start + i * f
                b = min(a + f, s.start + s.size)
                self._keys[leaf, : b - a] = k[a:b]
                self._vals[leaf, : b - a] = v[a:b]
                self._n[leaf] = b - a
                leaf += 1
        self._primary = n
        self._counter = n  # the FAA word in the region header
        self._size = int(k.size)

    # what a rack's bulk load copies into the memory nodes' regions and the leaf table (system.py)
    @property
    def primary_leaves(self) -> int:
        """The leaves the bulk load filled (synonym leaves are allocated after them)."""
        return self._primary

    @property
    def leaf_keys(self) -> np.ndarray:
        """The leaves' key slots, one row of ``span`` per leaf (``EMPTY_KEY`` marks a free slot)."""
        return self._keys

    @property
    def leaf_values(self) -> np.ndarray:
        """The leaves' value slots, row for row beside :attr:`leaf_keys`."""
        return self._vals

    @property
    def segments(self) -> list:
        """The learned models, one per segment of the sorted keys."""
        return self._segs

    @property
    def first_leaves(self) -> list:
        """Each model's first leaf (its segment's keys fill the leaves from there on)."""
        return self._base

    def _alloc(self) -> int:
        """A synonym leaf, as FAA(counter, 1) does it; the arrays stand for a bigger region."""
        s = self._counter
        self._counter += 1
        if s >= self._n.size:
            grow = self._n.size
            self._keys = np.concatenate([self._keys, np.full((grow, self.span), _EMPTY, np.uint64)])
            self._vals = np.concatenate([self._vals, np.zeros((grow, self.span), np.uint64)])
            self._n = np.concatenate([self._n, np.zeros(grow, np.int64)])
            self._syn = np.concatenate([self._syn, np.full(grow, _NONE, np.int64)])
        return s

    # --- the learned cache ---------------------------------------------------------------------

    def candidates(self, key: int) -> tuple[int, int]:
        """[lo, hi]: the primary leaves the model's window for ``key`` covers."""
        key = _check_key(key)
        m = bisect_right(self._first_keys, key) - 1  # model_for_key
        if m < 0:  # below every model: the first model's first leaf group covers it
            m, p = 0, 0
        else:
            seg = self._segs[m]
            # clamped to the model's ranks, so predictions stay monotone across models
            p = min(max(predict(self._segs[m], key), 0), seg.size - 1)
        seg = self._segs[m]
        lo = max(p - self.eps - 1, 0)
        hi = min(p + self.eps, seg.size - 1)
        base = self._base[m]
        return base + lo // self.fill, base + hi // self.fill

    def _find(self, key: int) -> _Found:
        lo, hi = self.candidates(key)
        keys, n = self._keys, self._n
        j = lo
        for g in range(hi, lo, -1):  # insertHere, from the back
            if n[g] and int(keys[g, 0]) <= key:
                j = g
                break
        leaf, prev, syn_reads = j, _NONE, 0
        # the chain is sorted above the primary: READ it only when the key is above the primary
        if self._syn[j] != _NONE and (n[j] == 0 or int(keys[j, n[j] - 1]) < key):
            chain = []
            s = int(self._syn[j])
            while s != _NONE:
                chain.append(s)
                s = int(self._syn[s])
            syn_reads = len(chain)
            before = j
            for s in chain:
                if n[s] and int(keys[s, 0]) <= key:
                    leaf, prev = s, before
                before = s
        cost = OpCost(hi - lo + 1, syn_reads, 0, 0, 0, 1 + (syn_reads > 0))
        return _Found(leaf, prev, j, cost)

    def _slot(self, leaf: int, key: int) -> tuple[int, bool]:
        n = int(self._n[leaf])
        i = int(np.searchsorted(self._keys[leaf, :n], np.uint64(key)))
        return i, i < n and int(self._keys[leaf, i]) == key

    # --- operations ----------------------------------------------------------------------------

    def search(self, key) -> tuple[Optional[int], OpCost]:
        """GET: the value of ``key`` or None, and the leaves READ."""
        key = _check_key(key)
        found = self._find(key)
        i, hit = self._slot(found.leaf, key)
        return (int(self._vals[found.leaf, i]) if hit else None), found.cost

    def get(self, key) -> Optional[int]:
        return self.search(key)[0]

    def insert(self, key, value) -> tuple[bool, OpCost]:
        """PUT of a new key: False (nothing written) if the key exists."""
        key, value = _check_key(key), _check_value(value)
        found = self._find(key)
        t = found.leaf
        i, hit = self._slot(t, key)
        if hit:
            return False, found.cost
        written, table, faa = 1, 0, 0
        if self._n[t] == self.span:
            # ROLEX's insert_synonym: move the upper half to a new synonym leaf linked after t,
            # which keeps the chain sorted across its leaves
            s = self._alloc()
            half = self.span // 2
            self._keys[s, :half] = self._keys[t, half:]
            self._vals[s, :half] = self._vals[t, half:]
            self._keys[t, half:] = _EMPTY
            self._n[s] = half
            self._n[t] = half
            self._syn[s] = self._syn[t]
            self._syn[t] = s
            written, table, faa = 2, 1, 1
            if key > int(self._keys[s, 0]):
                t = s
            i, _ = self._slot(t, key)
        n = int(self._n[t])
        self._keys[t, i + 1 : n + 1] = self._keys[t, i:n]
        self._vals[t, i + 1 : n + 1] = self._vals[t, i:n]
        self._keys[t, i] = key
        self._vals[t, i] = value
        self._n[t] = n + 1
        self._size += 1
        c = found.cost
        return True, c._replace(leaves_written=written, table_writes=table, faa=faa,
                                round_trips=c.round_trips + 1 + faa)

    def update(self, key, value) -> tuple[bool, OpCost]:
        """UPDATE of an existing key: False (nothing written) if the key is absent."""
        key, value = _check_key(key), _check_value(value)
        found = self._find(key)
        i, hit = self._slot(found.leaf, key)
        if not hit:
            return False, found.cost
        self._vals[found.leaf, i] = value
        c = found.cost
        return True, c._replace(leaves_written=1, round_trips=c.round_trips + 1)

    def delete(self, key) -> tuple[bool, OpCost]:
        """DELETE: whether the key existed."""
        key = _check_key(key)
        found = self._find(key)
        t = found.leaf
        i, hit = self._slot(t, key)
        c = found.cost
        if not hit:
            return False, c
        n = int(self._n[t])
        self._keys[t, i : n - 1] = self._keys[t, i + 1 : n]
        self._vals[t, i : n - 1] = self._vals[t, i + 1 : n]
        self._keys[t, n - 1] = _EMPTY
        self._n[t] = n - 1
        self._size -= 1
        syn_reads, table = c.synonym_reads, 0
        if n == 1:
            if found.prev != _NONE:  # an emptied synonym leaf leaves its chain
                self._syn[found.prev] = self._syn[t]
                table = 1
            elif self._syn[t] != _NONE:
                # an emptied primary takes its first synonym's pairs, so a group with keys keeps
                # a non-empty primary (which _find's insertHere test relies on)
                s = int(self._syn[t])
                m = int(self._n[s])
                self._keys[t, :m] = self._keys[s, :m]
                self._vals[t, :m] = self._vals[s, :m]
                self._n[t] = m
                self._syn[t] = self._syn[s]
                if c.synonym_reads == 0:
                    syn_reads = 1
                table = 1
        rt = c.round_trips + (syn_reads > c.synonym_reads) + 1
        return True, c._replace(synonym_reads=syn_reads, leaves_written=1, table_writes=table,
                                round_trips=rt)

    def range_scan(self, start, count) -> tuple[list[tuple[int, int]], OpCost]:
        """SCAN: up to ``count`` pairs with key >= ``start`` in key order, and the leaves READ.

        The start leaf group comes from the model; from there leaf groups are READ in order
        (primary, then its chain), since the leaves are in key order across groups."""
        start = _check_key(start, "start")
        if isinstance(count, bool) or not isinstance(count, (int, np.integer)) or count < 0:
            raise ValueError(f"count must be an integer >= 0, got {count!r}")
        found = self._find(start)
        c = found.cost
        _, hi = self.candidates(start)
        out: list[tuple[int, int]] = []
        extra = 0  # leaves beyond the model's batch (and the chain _find already read)
        g = found.primary
        while g < self._primary and len(out) < count:
            leaf = g
            while leaf != _NONE and len(out) < count:
                in_batch = leaf == g and g <= hi
                in_chain = leaf != g and g == found.primary and c.synonym_reads > 0
                extra += not (in_batch or in_chain)
                n = int(self._n[leaf])
                ks = self._keys[leaf, :n]
                i = int(np.searchsorted(ks, np.uint64(start)))
                take = min(n - i, count - len(out))
                out.extend(zip(ks[i : i + take].tolist(), self._vals[leaf, i : i + take].tolist()))
                leaf = int(self._syn[leaf])
            g += 1
        return out, c._replace(synonym_reads=c.synonym_reads + extra,
                               round_trips=c.round_trips + (extra > 0))

    def retrain(self) -> OpCost:
        """Rebuild the models over the current keys and re-lay the leaves out (no chains)."""
        ks: list[np.ndarray] = []
        vs: list[np.ndarray] = []
        reads = 0
        for g in range(self._primary):
            leaf = g
            while leaf != _NONE:
                reads += 1
                n = int(self._n[leaf])
                ks.append(self._keys[leaf, :n])
                vs.append(self._vals[leaf, :n])
                leaf = int(self._syn[leaf])
        k = np.concatenate(ks)
        v = np.concatenate(vs)
        if k.size == 0:
            raise ValueError("cannot retrain an empty index: bulk load needs at least one key")
        self._load(k.copy(), v.copy())
        # every linked leaf READ (counted as the batch), then the new leaves and table written
        return OpCost(reads, 0, self._primary, self._primary, 0, 2)

    # --- inspection -----------------------------------------------------------------------------

    def __len__(self) -> int:
        return self._size

    def items(self) -> list[tuple[int, int]]:
        """Every pair in key order (a host-side walk, for checks)."""
        return self.range_scan(0, self._size)[0]

    def chain_lengths(self) -> list[int]:
        """Synonym leaves linked after each primary leaf."""
        out = []
        for g in range(self._primary):
            c, s = 0, int(self._syn[g])
            while s != _NONE:
                c, s = c + 1, int(self._syn[s])
            out.append(c)
        return out

    def statistics(self) -> Statistics:
        linked = sum(self.chain_lengths())
        alloc = self._counter
        return Statistics(
            keys=self._size,
            leaves=self._primary,
            synonym_leaves=linked,
            allocated_leaves=alloc,
            models=len(self._segs),
            memory_bytes=REGION_HEADER_BYTES + alloc * (leaf_bytes(self.span) + TABLE_ENTRY_BYTES),
            cache_bytes=len(self._segs) * MODEL_BYTES + alloc * TABLE_ENTRY_BYTES,
        )
