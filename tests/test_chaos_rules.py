"""Chaos never breaks an ordering rule (docs/checking.md, "Chaos"; docs/fabric.md, "Ordering rules").

Every rule has its tests in tests/test_ordering.py and tests/test_verbs.py; this module runs them
again with the profile's [chaos] table on (every kind, a high share, three seeds): chaos moves what
RC leaves free and never what it guarantees. What chaos does is tests/test_chaos.py.
"""

from __future__ import annotations

import pytest

from shm.profile import list_profiles, load_profile, overridden

# The rule tests, collected again here under the chaos fixture below.
from tests.test_ordering import (  # noqa: F401  (fixtures and tests re-collected under chaos)
    fab, rack, test_data_then_unlock_in_one_post_never_unlocks_first, test_fence_after_cas_orders_the_write_behind_the_lock,
    test_fence_holds_a_write_until_the_earlier_read_completed, test_many_writes_of_one_post_land_as_a_prefix,
    test_observer_never_sees_the_flag_before_the_data_under_load, test_pyverbs_write_then_flag_and_send_fence,
    test_read_after_an_atomic_of_its_qp_sees_it, test_read_and_cas_after_write_in_one_post_see_it,
    test_writes_of_separate_posts_on_one_qp_land_in_posting_order,
    test_writes_to_one_word_in_one_post_apply_in_posting_order,
)
from tests.test_landing import KIB, ordered, test_descending_profile_lands_lines_from_the_top, watch_write  # noqa: F401
from tests.test_coro import new_fabric, setup
from tests.test_verbs import (  # noqa: F401
    test_completion_comes_after_the_effect, test_multiline_write_is_never_torn_within_a_line,
    test_send_queue_completes_in_posting_order,
)

# Larger and more frequent than --chaos's defaults: every chance draws, so the rules are tried hard.
HARD = {"chaos.seed": 0, "chaos.share": 0.6, "chaos.effect_ns": 6_000, "chaos.completion_ns": 6_000,
        "chaos.line_gap_ns": 200, "chaos.resume_ns": 8_000, "chaos.writeback_ns": 2_000,
        "chaos.stall_ns": 30_000, "chaos.stall_share": 0.05}


@pytest.fixture(autouse=True, params=[1, 2, 3])
def under_chaos(request):
    """Every test of this module runs with the [chaos] table on every shipped profile, three seeds."""
    over = {**HARD, "chaos.seed": request.param}
    with overridden({name: over for name in list_profiles()}):
        assert load_profile("cx6-200g").chaos.effect_ns == HARD["chaos.effect_ns"]
        yield request.param




def test_lines_of_a_write_land_in_order_one_by_one_before_its_completion(prefix):
    """The rule "lines of one WRITE" (ascending here; descending is the test imported above): chaos
    spreads the lines further apart (``chaos.line_gap_ns``) but keeps their order, lands every one
    before the completion, and never tears a line."""
    with new_fabric(prefix, profile=ordered(False), mem=4 << 20) as fab:
        env, node = setup(fab)
        off = fab.allocate("m0", KIB)
        seen, completed = watch_write(env, fab, node.thread().coroutine(), off)
    partial = [(t, s) for t, s in seen if any(s) and not all(s)]
    assert partial, "the KiB landed at one instant"
    for t, s in partial:              # ascending lines: the new ones are always a prefix
        assert s == sorted(s, reverse=True), f"at {t} ns: {s}"
    assert seen[-1][0] <= completed and all(seen[-1][1])
