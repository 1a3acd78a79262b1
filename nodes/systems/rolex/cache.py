"""ROLEX's learned cache: what a compute node keeps to find a key's leaves without any index READ.

One :class:`LearnedCache` per compute node (shared by its threads, as ROLEX's ``learned_cache_t``
is shared by a server's clients), filled once from the model table the bulk load (or setup) wrote
on the first memory node (``layout.py``). It answers two questions for a key, both locally:

* :meth:`window`: the primary leaves the key's model predicts (prediction +/- eps + 1 ranks, as in
  ``core.RolexIndex.candidates``): what a GET READs in its one batch, ROLEX's cost;
* :meth:`home`: the leaf group the key belongs to, by the static fences (the last primary whose
  fence is <= the key). It always lies inside the window for a model trained on the fences (the
  core's argument); the window is widened to hold it anyway, so a wrong model costs READs, never
  a wrong answer.

An index that ``setup`` left empty has no models yet: its primary leaves split the key space
evenly and the window is the home leaf alone.

The cache never goes stale at run time here: leaves are re-laid (and models retrained) only by a
bulk load, before any client runs (docs/rolex.md, "On the rack").
"""

from __future__ import annotations

from bisect import bisect_right

from nodes.systems.dpastore.pla import predict

from .layout import MODEL_BYTES, WORD


class LearnedCache:
    __slots__ = ("loaded", "fetching", "segs", "first_keys", "bases", "fences", "eps", "fill")

    def __init__(self):
        self.loaded = False
        self.fetching = None      # the event a node's other coroutines wait on while one READs the table

    def load(self, segs, bases, fences, eps: int, fill: int) -> None:
        self.segs = segs
        self.first_keys = [s.first_key for s in segs]
        self.bases = bases
        self.fences = fences
        self.eps = eps
        self.fill = fill
        self.loaded = True

    @property
    def primaries(self) -> int:
        return len(self.fences)

    @property
    def nbytes(self) -> int:
        """Compute-node bytes: the models and one fence per primary leaf (ROLEX keeps 8 bytes per
        leaf in its cached leaf table too)."""
        return len(self.segs) * MODEL_BYTES + len(self.fences) * WORD if self.loaded else 0

    def home(self, k: int) -> int:
        return max(bisect_right(self.fences, k) - 1, 0)

    def window(self, k: int, home: int) -> tuple[int, int]:
        """[lo, hi]: the primary leaves to READ for ``k`` (always holding ``home``)."""
        if not self.segs:
            return home, home
        m = bisect_right(self.first_keys, k) - 1
        seg = self.segs[max(m, 0)]
        p = 0 if m < 0 else min(max(predict(seg, k), 0), seg.size - 1)
        base = self.bases[max(m, 0)]
        lo = base + max(p - self.eps - 1, 0) // self.fill
        hi = base + min(p + self.eps, seg.size - 1) // self.fill
        return min(lo, home), max(hi, home)
