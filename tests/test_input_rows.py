"""The calibration points declared as input rows (issue 40, rows.KINDS) name points their published
tables hold, so a renamed series or a moved point cannot silently turn an input back into a check."""

from __future__ import annotations

from cluster.experiments import bench_verbs as bv
from cluster.experiments import dpastore
from workloads.sosd import STANDINS


def test_the_declared_calibration_points_are_in_their_published_tables():
    series = {s for s, _, _ in bv.FIG3_POLICIES}
    for op, s, t in bv.FIG3_INPUTS:
        assert s in series and t in (bv.FIG3_ARTIFACT if op == "read" else bv.FIG3B_ARTIFACT)[s]
    for op, t, d in bv.FIG4_INPUTS:
        assert (t, d) in bv.FIG4_ARTIFACT[op]
    assert bv.BATCHED_INPUTS <= set(bv.BATCHED_PUBLISHED)
    assert bv.RLIB_READ_INPUT in dict(bv.RLIB_READ_SHAPES)
    assert set(dpastore.TABLE1_TUNED) == set(STANDINS)          # every tuned stand-in, and only those
