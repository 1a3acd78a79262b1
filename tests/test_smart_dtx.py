"""SMART-DTX (nodes/systems/smart_dtx): FORD+ with SMART's switches, on SMART's setup (cx6-200g, two
memory blades of PMem). The transactions are FORD's (tests/test_ford.py); here: the switches are on
and drive each transaction (a back-off pause after every abort, the retry-rate controller counting
transactions, coroutine throttling around each attempt), the SmallBank stress stays serializable
with them, the faulty variant and a crashed coordinator are still caught and recovered, and FORD
without the switches takes no SMART step."""

from __future__ import annotations


import pytest

from cluster.correctness.txn_suite import TxnRig, smallbank_loop, smallbank_stress
from nodes.systems.ford import FordSystem
from nodes.systems.smart_dtx import DTX_TUNER, SmartDtxSystem
from nodes.systems.smart_dtx.system import QP_POLICY
from workloads.smallbank import SmallBank

WL = SmallBank(accounts=60, hot_accounts=6)


def test_smart_dtx_is_ford_with_smarts_switches():
    assert issubclass(SmartDtxSystem, FordSystem) and SmartDtxSystem.name == "smart-dtx"
    assert SmartDtxSystem.smart_defaults["all"] is True and FordSystem.smart_defaults == {}
    assert DTX_TUNER["t_max_cycles"] == 4096              # sds::Backoff starts max_backoff at 4,096 cycles
    assert QP_POLICY == {"ford": "per_thread_qp", "smart-dtx": "per_thread_doorbell"}
    assert [o.name for o in SmartDtxSystem.options] == [o.name for o in FordSystem.options]


def _run(system, prefix, smart, policy, attempts=30):
    outcomes = []
    r = TxnRig(system, WL, threads=2, coroutines=4, prefix=prefix, memory_kind="nvm", policy=policy, smart=smart)
    r.each(smallbank_loop(WL, attempts, 3, outcomes))
    return r, outcomes


def test_every_abort_backs_off_and_counts_as_a_retry(prefix):
    r, outcomes = _run(SmartDtxSystem, prefix, SmartDtxSystem.smart_defaults, "per_thread_doorbell")
    with r:
        aborts = sum(not o.committed for o in outcomes)
        assert aborts > 10
        sm = [t.smart_statistics() for t in r.threads]
        # one back-off per aborted transaction, each t0 + U[0, t0) cycles (first of its sequence)
        assert sum(s.backoffs for s in sm) == aborts
        ghz = r.fab.profile.cpu.ghz
        per = sum(s.backoff_ns for s in sm) / aborts
        assert 4096 / ghz <= per < 2 * 4096 / ghz
        # the retry-rate controller saw every attempt: the failed ones as retries
        assert sum(s.retries for s in sm) == aborts and sum(s.backoff_cas for s in sm) == len(outcomes)
        assert all(s.throttle == "adaptive" and s.ops_running == 0 for s in sm)
        assert r.quiescent_problems() == []


def test_ford_without_switches_takes_no_smart_step(prefix):
    r, outcomes = _run(FordSystem, prefix, None, "per_thread_qp")
    with r:
        sm = [t.smart_statistics() for t in r.threads]
        assert all(s.backoffs == 0 and s.backoff_cas == 0 and s.throttle == "off" for s in sm)
        assert any(not o.committed for o in outcomes)


def test_coroutine_throttling_caps_transactions_in_flight(prefix):
    # c_max = 1 transaction per thread: the four coroutines take turns
    smart = {**SmartDtxSystem.smart_defaults, "coro_credits": 1}
    r, outcomes = _run(SmartDtxSystem, prefix, smart, "per_thread_doorbell", attempts=10)
    with r:
        starts = sorted((rec.start_ns, rec.end_ns, rec.client) for rec in r.history())
        for cl in {c for *_, c in starts}:
            mine = [(s, e) for s, e, c in starts if c == cl]
            assert all(e0 <= s1 for (_, e0), (s1, _) in zip(mine, mine[1:]))   # never two at once
        assert len(outcomes) == 2 * 4 * 10


def test_smallbank_stress_with_smart_is_serializable(prefix):
    rep = smallbank_stress(SmartDtxSystem, {}, prefix=prefix, memory_kind="nvm", policy="per_thread_doorbell",
                           smart=SmartDtxSystem.smart_defaults, power_fail=(0, 1))
    assert rep.ok, rep.message
    assert rep.commits > 200 and rep.aborts > 0


@pytest.mark.parametrize("opts, crash", [({"fault": "commit-without-validation"}, None),
                                         ({"invisible_rereads": 20}, ("ford.primaries_written", 30))])
def test_faults_and_crashes_under_smart(prefix, opts, crash):
    rep = smallbank_stress(SmartDtxSystem, opts, prefix=prefix, policy="per_thread_doorbell",
                           smart=SmartDtxSystem.smart_defaults, crash=crash)
    if crash:
        assert rep.ok and "recovery" in rep.message, rep.message
    else:
        assert not rep.ok and "lost update" in rep.message


def test_bad_options_name_the_system():
    with pytest.raises(ValueError) as e:
        SmartDtxSystem.check_options({"flush": "sometimes"}, f"system {SmartDtxSystem.name!r}")
    assert "smart-dtx" in str(e.value) and "\n" not in str(e.value)
