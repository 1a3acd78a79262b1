"""ROLEX's learned cache: what a compute node keeps to find a key's leaves without any index READ.

One :class:`LearnedCache` per compute node (shared by its threads, as ROLEX's ``learned_cache_t``
is shared by a server's clients), holding the :class:`Table` it last READ from the model table on
the first memory node (``layout.py``). A table answers, locally, for a key:

* :meth:`Table.home`: the *slot* of the leaf group the key belongs to, by the static fences (the
  last slot whose fence is <= the key), and :meth:`Table.leaf` the primary leaf of a slot (slot
  ``s`` is leaf ``s`` until a retrain re-lays leaves, then the table's map says);
* :meth:`Table.window`: the slots the model of the home slot predicts (prediction +/- eps + 1
  ranks, as in ``core.RolexIndex.candidates``): what a GET READs in its one batch, ROLEX's cost.
  The home slot always lies inside the window for a model trained on the fences (the core's
  argument); the window is widened to hold it anyway, so a wrong model costs READs, never a wrong
  answer;
* :meth:`Table.unit`: the first slot of the key's *unit*, the model that owns the slot, or the
  slot alone where no model does (an index that ``setup`` left empty: its primary leaves split
  the key space evenly, no models, a window of the home leaf alone). A unit is what a retrain
  re-lays, and its first leaf's count word counts the synonym leaves it allocated.

A table is one *epoch* of the index, immutable: an operation takes the node's current table once
and uses only it, so a coroutine that READs a newer table meanwhile cannot mix two epochs into one
operation. When an operation meets a retired leaf (``layout.retired_epoch``) it READs the table
again (``RolexClient.refresh``) and starts over (docs/rolex.md, "Retraining").
"""

from __future__ import annotations

from bisect import bisect_right

from nodes.systems.dpastore.pla import predict

from .layout import MODEL_BYTES, WORD, TableData


class Table:
    """One model table as a compute node keeps it (see the module docstring)."""

    __slots__ = ("epoch", "segs", "bases", "ends", "fences", "leaves", "eps", "fill", "nbytes")

    def __init__(self, data: TableData):
        self.epoch = data.epoch
        self.segs = data.segs
        self.bases = data.bases
        self.fill = data.fill
        self.eps = data.eps
        # a model owns ceil(size / fill) slots from its base, as the bulk load and a retrain lay them
        self.ends = [b + -(-s.size // data.fill) for s, b in zip(data.segs, data.bases)]
        self.fences = data.fences
        self.leaves = data.leaves
        self.nbytes = (len(self.segs) * MODEL_BYTES + len(self.fences) * WORD
                       + (len(self.leaves) * 4 if self.leaves is not None else 0))

    @property
    def primaries(self) -> int:
        return len(self.fences)

    def leaf(self, slot: int) -> int:
        """The primary leaf of ``slot``."""
        return slot if self.leaves is None else self.leaves[slot]

    def home(self, k: int) -> int:
        return max(bisect_right(self.fences, k) - 1, 0)

    def model(self, slot: int) -> int:
        """The model that owns ``slot``, or -1 (an untrained slot)."""
        i = bisect_right(self.bases, slot) - 1
        return i if i >= 0 and slot < self.ends[i] else -1

    def unit(self, slot: int) -> int:
        """The first slot of the unit (model, or untrained slot) ``slot`` belongs to."""
        i = self.model(slot)
        return self.bases[i] if i >= 0 else slot

    def window(self, k: int, home: int) -> tuple[int, int]:
        """[lo, hi]: the slots to READ for ``k`` (always holding ``home``)."""
        i = self.model(home)
        if i < 0:
            return home, home
        seg = self.segs[i]
        p = 0 if k < seg.first_key else min(max(predict(seg, k), 0), seg.size - 1)
        base = self.bases[i]
        lo = base + max(p - self.eps - 1, 0) // self.fill
        hi = base + min(p + self.eps, seg.size - 1) // self.fill
        return min(lo, home), max(hi, home)


class LearnedCache:
    """A compute node's learned cache: its current :class:`Table` (None until first READ)."""

    __slots__ = ("table", "fetching")

    def __init__(self):
        self.table: Table | None = None
        self.fetching = None      # the event a node's other coroutines wait on while one READs the table

    @property
    def loaded(self) -> bool:
        return self.table is not None

    def load(self, data: TableData) -> None:
        if self.table is None or data.epoch >= self.table.epoch:
            self.table = Table(data)

    @property
    def nbytes(self) -> int:
        """Compute-node bytes: the models, one fence per primary slot (ROLEX keeps 8 bytes per
        leaf in its cached leaf table too) and, after a retrain, a leaf number per slot."""
        return self.table.nbytes if self.table is not None else 0
