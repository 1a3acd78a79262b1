"""Transactional systems on the rack (docs/dtx.md, "On the rack"): the registry tells them from KV
systems, a scenario runs SmallBank on ``ford`` with committed and aborted transactions in the
results, the dashboard and the JSON, bad scenarios are one line, and ``dmrack check --system ford``
runs the transactional suite, which passes ford and fails its faulty variant."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from cluster.cli import main
from cluster.correctness.conformance import run_suite
from cluster.correctness.txn_check import STRESS, TXN_CHECKS, run_txn_suite
from cluster.rack import ColocatedRack, RackError, compile_scenario
from cluster.scenario import load_scenario, scenario_from_dict
from cluster.spec import SpecError
from nodes.systems import get_system, is_transactional, kv_system_names, system_names
from nodes.systems.ford import FordSystem

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "smallbank.toml"
# the example, small: fewer accounts, one compute node, a short run
SMALL = {"workload.accounts": 2000, "workload.hot_accounts": 100, "compute.count": 1, "memory.memory": "96MiB"}


def _rack(**over):
    data = {"rack": {"profile": "cx6-200g"}, "compute": {"count": 1, "threads": 1, "coroutines": 2},
            "memory": {"count": 2, "memory": "96MiB", "kind": "nvm"}, "system": {"name": "ford"},
            "workload": {"preset": "smallbank", "accounts": 500, "hot_accounts": 50},
            "step": [{"action": "run", "duration_ms": 0.05}]}
    for k, v in over.items():
        table, _, key = k.partition(".")
        if v is None:
            data[table].pop(key, None)
        else:
            data.setdefault(table, {})[key] = v
    return data


# -- the registry ---------------------------------------------------------------------------------

def test_ford_is_registered_and_told_apart_from_kv_systems():
    assert "ford" in system_names() and get_system("ford") is FordSystem
    assert is_transactional("ford") and is_transactional(FordSystem)
    assert "ford" not in kv_system_names() and "race" in kv_system_names()
    assert not any(is_transactional(n) for n in kv_system_names())
    with pytest.raises(ValueError, match="transactional: the KV conformance suite does not apply"):
        run_suite("ford")


def test_dmrack_systems_lists_ford(capsys):
    assert main(["systems", "--json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["ford"]["source"] == "built-in" and "FORD" in rows["ford"]["description"]


# -- scenarios ------------------------------------------------------------------------------------

def test_the_example_runs_smallbank_and_reports_transactions():
    s = load_scenario(EXAMPLE, overrides=SMALL)
    c = compile_scenario(s)
    assert [st.action for st in c.plan] == ["run"]                  # tables are loaded with the rack
    res = ColocatedRack(s).run()
    (st,) = res.steps
    kinds = {kf.kind: kf for kf in st.kinds}
    assert set(kinds) == {"all", "commit", "abort"} or set(kinds) == {"all", "commit"}
    assert kinds["commit"].ops > 50 and kinds["commit"].failures == 0 and kinds["commit"].p50_us > 1
    txn = res.transactions(st)
    assert txn["committed"] == kinds["commit"].ops and txn["committed_per_s"] > 0
    assert 0 <= txn["abort_rate"] < 0.5
    doc = res.document()
    assert doc["steps"][0]["transactions"]["committed"] == txn["committed"]
    system = doc["summary"]["system"]
    assert system["commits"] == txn["committed"] and system["attempts"] == st.ops
    assert "committed/s" in "\n".join(str(res.table().caption).splitlines())


@pytest.mark.parametrize("system", ["ford", "smart-dtx"])
def test_tatp_runs_on_a_rack_with_its_aborts_by_construction(system):
    """``[workload] kind = "tatp"``: TATP's five tables loaded with the rack, its mix run by the
    coordinators; a quarter or so of the attempts abort by construction (rows that do not exist),
    and they are counted as aborts."""
    data = _rack(**{"system.name": system, "workload.preset": None, "workload.kind": "tatp",
                    "workload.accounts": None, "workload.hot_accounts": None, "workload.subscribers": 300,
                    "compute.coroutines": 4})
    data["step"] = [{"action": "run", "duration_ms": 0.2}]
    s = scenario_from_dict(data, source="t.toml")
    assert s.spec.workloads["default"].title == "TATP"
    res = ColocatedRack(s).run()
    txn = res.transactions(res.steps[0])
    assert txn["committed"] > 40 and 0.1 < txn["abort_rate"] < 0.5, txn


def test_bad_tatp_parameters_are_one_line():
    with pytest.raises(SpecError) as e:
        compile_scenario(scenario_from_dict(_rack(**{"workload.preset": "tatp", "workload.accounts": None,
                                                     "workload.hot_accounts": None, "workload.subscribers": 0}),
                                            source="t.toml"))
    assert "subscribers = 0 must be" in str(e.value) and "\n" not in str(e.value)


def test_an_open_loop_of_transactions_runs_at_its_target_and_refuses_a_bad_one():
    """``target`` (transactions per second, rack-wide): Poisson arrivals per thread served by its
    coroutines; each attempt's latency counts from its arrival."""
    data = _rack(**{"workload.target": 100_000, "compute.coroutines": 4})
    data["step"] = [{"action": "run", "duration_ms": 2.0}]
    s = scenario_from_dict(data, source="t.toml")
    assert "open loop 100000 txn/s" in s.spec.workloads["default"].build().describe()
    res = ColocatedRack(s).run()
    (st,) = res.steps
    txn = res.transactions(st)
    attempts = txn["committed"] + txn["aborted"]
    assert 140 <= attempts <= 260                    # 200 expected in 2 ms (Poisson)
    assert txn["p50_us"] > 1
    closed = res.transactions(ColocatedRack(scenario_from_dict(_rack(**{"compute.coroutines": 4}), source="t.toml"))
                              .run().steps[0])
    assert closed["committed_per_s"] > 2 * txn["committed_per_s"]   # the closed loop runs flat out
    for bad in (-1, "fast", True):
        with pytest.raises((SpecError, RackError)) as e:
            compile_scenario(scenario_from_dict(_rack(**{"workload.target": bad}), source="t.toml"))
        assert "target must be a number" in str(e.value) and "\n" not in str(e.value)


def test_a_transactional_run_plots_its_transactions_by_step(tmp_path):
    """Two run steps: ``dmrack plot`` of the results draws committed and aborted transactions per
    second, the abort rate and the committed latency, a group of bars per step."""
    from cluster.experiments.figures import figures_for
    from cluster.experiments.plot import write_plots
    from cluster.experiments.rows import load_result
    data = _rack()
    data["step"] = [{"action": "run", "duration_ms": 0.05}, {"action": "run", "duration_ms": 0.05}]
    res = ColocatedRack(scenario_from_dict(data, source="t.toml")).run()
    path = res.to_json(tmp_path / "r.json")
    run, rows = load_result(str(path))
    txn = {(r["series"], r["metric"]): r["emulated"] for r in rows if r["experiment"] == "transactions"}
    for st in res.steps:
        t = res.transactions(st)
        assert txn[(f"step {st.index}", "committed txn/s")] == pytest.approx(t["committed_per_s"])
        assert txn[(f"step {st.index}", "abort rate %")] == pytest.approx(100 * t["abort_rate"])
        assert txn[(f"step {st.index}", "txn p99 µs")] == pytest.approx(t["p99_us"])
    figs = figures_for(run, rows)
    assert figs[0].id == "transactions"
    written = write_plots(run, rows, str(tmp_path / "plots"), "r")
    assert any(p.endswith("r-transactions.png") for p in written)


def test_a_colocated_run_records_its_transactions_for_the_checker():
    from cluster.correctness.serializability import check_history
    from nodes.txn_history import digest_state
    rack = ColocatedRack(scenario_from_dict(_rack(), source="t.toml"), history=1 << 12)
    rack.run()
    run = rack.txn_run
    assert run is not None and run.recovered is None and rack.history_ops is None
    assert {r.status for r in run.history} <= {"committed", "aborted"}
    assert sum(r.status == "committed" for r in run.history) > 10
    assert check_history(run.history, digest_state(run.final_state())).ok


def test_a_kv_run_has_no_transaction_figures():
    res = ColocatedRack(scenario_from_dict({"compute": {"count": 1, "threads": 1, "coroutines": 1},
                                            "workload": {"recordcount": 200},
                                            "step": [{"action": "load"}, {"action": "run", "duration_ms": 0.02}]})
                        ).run()
    assert all(res.transactions(st) is None for st in res.steps)
    assert all("transactions" not in d for d in res.document()["steps"])
    assert not any(kf.kind in ("commit", "abort") for st in res.steps for kf in st.kinds)


@pytest.mark.parametrize("over, words", [
    ({"workload.accounts": 1}, "smallbank: accounts = 1 must be >= 2"),
    ({"workload.hot_accounts": 600}, "hot_accounts = 600 exceeds accounts = 500"),
    ({"workload.frequencies": [50, 50, 0, 0, 0, 1]}, "frequencies must sum to 100"),
    ({"workload.recordcount": 10}, "workload.recordcount: unknown SmallBank parameter"),
    ({"workload.preset": None, "workload.kind": "tpcc"}, "workload.kind"),
    ({"workload.preset": "a"}, "system 'ford' is transactional: give it a transactional workload"),
    ({"system.name": "race"}, "system 'race' is a key-value store: SmallBank is a transactional workload"),
])
def test_bad_transactional_scenarios_are_one_line(over, words):
    with pytest.raises((SpecError, RackError)) as e:
        s = scenario_from_dict(_rack(**over), source="t.toml")
        compile_scenario(s)
    assert words in str(e.value) and "\n" not in str(e.value)


def test_kind_names_the_workload_and_load_steps_are_refused():
    s = scenario_from_dict(_rack(**{"workload.preset": None, "workload.kind": "smallbank"}), source="t.toml")
    assert s.spec.workloads["default"].transactional and s.spec.workloads["default"].title == "SmallBank"
    data = _rack()
    data["step"] = [{"action": "load"}, {"action": "run", "duration_ms": 0.05}]
    with pytest.raises(RackError, match="tables are loaded when the rack is built; drop the load step"):
        compile_scenario(scenario_from_dict(data, source="t.toml"))


def test_run_check_of_a_transactional_scenario_is_refused(capsys):
    assert main(["run", str(EXAMPLE), "--colocated", "--check"]) == 2
    err = capsys.readouterr().err
    assert "dmrack check --system ford" in err


# -- the dashboard --------------------------------------------------------------------------------

def test_the_dashboard_shows_committed_and_aborted_transactions():
    from cluster.dashboard import RackMeter, plain_line, render
    from cluster.stats import N_BUCKETS, N_KINDS, STATE_RUNNING, Counters, Gauges, ProcSnapshot, StepRecord, \
        bucket_index
    from shm.telemetry import OP_ABORT, OP_COMMIT

    def snap(vnow, commits, aborts):
        hist = np.zeros((N_KINDS, N_BUCKETS), dtype=np.int64)
        hist[OP_COMMIT, bucket_index(10_000)] = commits
        hist[OP_ABORT, bucket_index(4_000)] = aborts
        counts = [0] * N_KINDS
        fails = [0] * N_KINDS
        total = [0] * N_KINDS
        mx = [0] * N_KINDS
        counts[OP_COMMIT], counts[OP_ABORT], fails[OP_ABORT] = commits, aborts, aborts
        total[OP_COMMIT], total[OP_ABORT], mx[OP_COMMIT], mx[OP_ABORT] = commits * 10_000, aborts * 4_000, 10_000, 4_000
        step = StepRecord(0, "run smallbank", 0, None, 0.0, None, tuple(counts), tuple(fails), tuple(total),
                          tuple(mx), hist)
        return ProcSnapshot(index=0, name="cn0", role="compute", pid=0, state=STATE_RUNNING, started=0.0,
                            heartbeat_time=0.0, heartbeat_mono_ns=0, vnow_ns=vnow, events=0, verbs=0,
                            gauges=Gauges(0.0, 0.0, 0.0), heartbeats=1, step=0, steps=(step,), counters=Counters())

    m = RackMeter()
    m.update([snap(0, 0, 0)], now_ns=0)
    view = m.update([snap(1_000_000, 900, 100)], now_ns=10**9)       # 1 ms: 1,000 attempts
    assert view.txn is not None
    assert view.txn.committed_per_s == pytest.approx(900_000, rel=0.01)
    assert view.txn.aborted_per_s == pytest.approx(100_000, rel=0.01)
    assert view.txn.abort_rate == pytest.approx(0.1) and view.txn.p50_us == pytest.approx(10, rel=0.02)
    assert "abort rate 10.0%" in plain_line(view)
    render(view, {"rack": "r", "system": "ford"})                      # draws without error


# -- dmrack check ---------------------------------------------------------------------------------

def test_the_transactional_suite_passes_ford_and_catches_its_faulty_variant():
    assert list(TXN_CHECKS) == ["single_client", "abort_leaves_nothing", "concurrent_transfers",
                                "serializable_history", "coordinator_crash", "coordinator_kill"]
    good = run_txn_suite(FordSystem, FordSystem.check_options({}, "t"), quick=True,
                         only=["single_client", "abort_leaves_nothing", "concurrent_transfers"])
    assert [o.name for o in good] == ["single_client", "abort_leaves_nothing", "concurrent_transfers"]
    assert all(o.passed for o in good), [o.detail for o in good]
    bad = run_txn_suite(FordSystem, FordSystem.check_options({"fault": "commit-without-validation"}, "t"),
                        quick=True, only=["concurrent_transfers"])
    assert not bad[0].passed and "lost update" in bad[0].detail


def test_dmrack_check_ford_cli(tmp_path, capsys):
    out = tmp_path / "c.json"
    assert main(["check", "--system", "ford", "--quick", "--only", "coordinator_crash", "--json", str(out),
                 "--out", str(tmp_path)]) == 0
    text = capsys.readouterr().out
    assert text.startswith("PASS: ford: 1 transactional checks, stress skipped (--only)")
    doc = json.loads(out.read_text())
    assert doc["passed"] and doc["transactional"] and doc["suite"][0]["name"] == "coordinator_crash"
    assert main(["check", "--system", "ford", "--quick", "--only", STRESS, "--option",
                 "fault=commit-without-validation", "--out", str(tmp_path)]) == 1
    text = capsys.readouterr().out
    assert text.startswith("FAIL: ford (--option fault=commit-without-validation): 0 transactional checks, stress NOT")
    assert "replay: dmrack check --system ford --option fault=commit-without-validation --quick --seed 1" in text
    assert main(["check", "--system", "ford", "--only", "history_uniform"]) == 2
    assert "the transactional checks are single_client" in capsys.readouterr().err
