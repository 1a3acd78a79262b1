"""SmallBank as FORD defines it (workloads/smallbank.py): tables, the mix, TX_HOT, the amounts in
cents, the invariant's arithmetic, the tables a long run leaves (warm_transactions), and bad
parameters refused in one line."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from workloads.properties import WorkloadError
from workloads.smallbank import (
    CENTS, FREQUENCIES, TYPES, SmallBank, check_total,
)


def test_tables_as_ford_declares_them():
    wl = SmallBank()
    sav, chk = wl.tables()
    assert (sav.name, sav.table_id, sav.value_bytes, sav.rows, sav.buckets) == ("savings", 1, 8, 100_000, 200_000)
    assert (chk.name, chk.table_id) == ("checking", 2)
    rows = list(SmallBank(accounts=5, hot_accounts=2).rows("savings"))
    assert [k for k, _ in rows] == [0, 1, 2, 3, 4]
    assert CENTS.decode(rows[0][1]) == 1_000_000_000 and len(rows[0][1]) == 8
    assert CENTS.decode(CENTS.encode(-5)) == -5


def test_mix_and_hot_accounts_follow_ford():
    wl = SmallBank(accounts=10_000, hot_accounts=400)
    rng = random.Random(1)
    n = 20_000
    names, hot = Counter(), 0
    for _ in range(n):
        name, body, args = wl.next(rng)
        names[name] += 1
        hot += all(a < 400 for a in args)
        if len(args) == 2:
            assert args[0] != args[1]
    for t, f in zip(TYPES, FREQUENCIES):
        assert abs(names[t] / n - f / 100) < 0.015, (t, names[t])
    # 90 % hot by TX_HOT, plus the cold draws that happen to fall among the hot ids (4 %)
    assert 0.89 < hot / n < 0.93


def test_total_check():
    assert check_total(100, 230, 130).ok
    rep = check_total(100, 100, 130)
    assert not rep.ok and "off by -130 cents" in rep.message


def test_warm_transactions_load_the_tables_a_long_run_leaves():
    """``warm_transactions``: the tables as the mix's first transactions leave them, run one at a
    time in memory by the same bodies; their total is what the committed ones created, and once
    the hot accounts have been emptied by Amalgamates, SendPayments from them fail (the artifact's
    14 % aborts at one uncontended thread)."""
    from workloads.smallbank import BODIES, WARM_SEED
    from workloads.tables import run_in_memory
    cold = SmallBank(accounts=2_000, hot_accounts=200)
    warm = SmallBank(accounts=2_000, hot_accounts=200, warm_transactions=20_000)
    assert warm.initial_total() == sum(CENTS.decode(v) for t in ("savings", "checking") for _, v in warm.rows(t))
    # the same stream, replayed here, creates exactly the total's change
    state = {(t, k): cold.initial_balance_cents for t in ("savings", "checking") for k in range(2_000)}
    rng, created, tried, failed = random.Random(WARM_SEED), 0, Counter(), Counter()
    for _ in range(20_000):
        name, body, args = warm.next(rng)
        before = sum(state.values())
        tried[name] += 1
        if run_in_memory(state, body, args):
            created += sum(state.values()) - before
        else:
            failed[name] += 1
    assert state == warm.warm_state()
    assert warm.initial_total() == cold.initial_total() + created
    assert set(failed) == {"SendPayment"} and failed["SendPayment"] > 0.3 * tried["SendPayment"]
    empty = sum(1 for k in range(200) if warm.warm_state()[("checking", k)] < 500)
    assert empty > 50 and "loaded as 20,000 transactions leave it" in warm.describe()
    assert list(cold.rows("savings")) == list(SmallBank(accounts=2_000, hot_accounts=200).rows("savings"))
    # a body that aborts changes nothing
    state = {("checking", 1): 100, ("checking", 2): 0}
    assert not run_in_memory(state, BODIES["SendPayment"], (1, 2)) and state == {("checking", 1): 100, ("checking", 2): 0}


@pytest.mark.parametrize("kw, word", [
    ({"warm_transactions": -1}, "warm_transactions = -1"),
    ({"accounts": 1}, "accounts = 1"),
    ({"hot_accounts": 5000, "accounts": 1000}, "exceeds accounts"),
    ({"tx_hot": 101}, "tx_hot = 101"),
    ({"frequencies": (50, 50, 0, 0, 0, 1)}, "sum to 100"),
    ({"frequencies": (100,)}, "6 non-negative integers"),
    ({"accounts": 1.5}, "must be an integer"),
    ({"buckets_per_account": 0}, "buckets_per_account"),
])
def test_bad_parameters_are_one_line(kw, word):
    with pytest.raises(WorkloadError) as e:
        SmallBank(**kw)
    assert word in str(e.value) and "\n" not in str(e.value)
