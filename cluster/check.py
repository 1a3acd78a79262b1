"""``dmrack check --system NAME``: is this system correct on the rack?

Two parts, both against the one KV interface, so every system gets the same verdict procedure:

1. the conformance suite (``cluster/conformance.py``): single-client semantics, large values,
   load-then-read and co-located concurrent stress with the history checked, in one process;
2. a stress of a rack of *processes*: two compute nodes whose coroutines hammer a small key space
   with gets, inserts, updates and deletes, first uniform, then zipfian 0.99 keys, every
   operation recorded in the shared history; the merged history is then checked for per-key
   linearizability (``cluster/checker.py``). Real concurrency across OS processes is what finds
   the races a single scheduler cannot produce.

The verdict names how many operations and keys were checked; a failure prints the checker's
explanation (the key, the operations involved and why no order works).
"""

from __future__ import annotations

import time
from typing import NamedTuple

STRESS_KEYS = 64
HISTORY_CAPACITY = 1 << 20


class CheckReport(NamedTuple):
    system: str
    passed: bool
    suite: tuple            # conformance outcomes
    stress_verdict: str     # ok | illegal | unknown
    ops: int
    keys: int
    explanation: str
    wall_s: float


def stress_scenario(system: str, options: dict, *, seed: int, run_ms: float, compute: int = 2, threads: int = 4,
                    coroutines: int = 4):
    """The process-rack stress: load half the keys, run uniform, then zipfian (as a scenario)."""
    from cluster.scenario import scenario_from_dict
    data = {
        "rack": {"name": f"check-{system}", "profile": "cx6-200g", "seed": seed, "on_node_death": "stop"},
        "compute": {"count": compute, "threads": threads, "coroutines": coroutines, "memory": "16MiB"},
        "memory": {"count": 2, "memory": "64MiB"},
        "system": {"name": system, **options},
        "workload": {"preset": "a", "recordcount": STRESS_KEYS // 2, "keysize": 8, "valuesize": 32},
        "workloads": {"zipf": {"preset": "a"}},
        "step": [{"action": "load"}, {"action": "run", "duration_ms": run_ms},
                 {"action": "run", "workload": "zipf", "duration_ms": run_ms}],
    }
    return scenario_from_dict(data, source=f"dmrack check {system}")


def stress_processes(system: str, options: dict, *, seed: int = 1, run_ms: float = 1.0, time_limit_s: float = 60.0):
    """Run the stress on a rack of processes; returns (CheckResult, Supervisor)."""
    from cluster.checker import check
    from cluster.supervisor import Supervisor
    from workloads.stress import StressWorkload
    sup = Supervisor(stress_scenario(system, options, seed=seed, run_ms=run_ms), quiet=True,
                     history=HISTORY_CAPACITY)
    # The YCSB workloads of the scenario only shape the rack; the stress workload drives it: every
    # op kind on a small key space, so inserts meet existing keys and deletes meet missing ones.
    wls = sup.compiled.workloads
    wls["default"] = StressWorkload(keys=STRESS_KEYS, distribution="uniform", value_size=32)
    wls["zipf"] = StressWorkload(keys=STRESS_KEYS, distribution="zipfian", value_size=32)
    status = sup.run()
    if status != 0:
        deaths = "; ".join(f"{d.node} {d.how}" for d in sup.deaths) or sup.stop_reason
        raise RuntimeError(f"the stress rack failed: {deaths}")
    return check(sup.history_ops, time_limit_s=time_limit_s), sup


def run(system: str, *, options: dict | None = None, quick: bool = False, seed: int = 1, console=None,
        json_path: str | None = None) -> CheckReport:
    from rich.console import Console
    from rich.table import Table
    from cluster.conformance import run_suite
    from nodes.systems import get_system
    console = console or Console()
    cls = get_system(system)
    options = cls.check_options(dict(options or {}), f"dmrack check --system {system}")
    t0 = time.perf_counter()
    with console.status(f"[bold]check {system}[/]: conformance suite") as status:
        outcomes = run_suite(system, options=options,
                             progress=lambda m: status.update(f"[bold]check {system}[/]: {m}"))
        status.update(f"[bold]check {system}[/]: stress on a rack of processes (history recorded)")
        result, _ = stress_processes(system, options, seed=seed, run_ms=0.5 if quick else 2.0)
    table = Table(title=f"dmrack check --system {system}")
    for col in ("check", "verdict", "detail"):
        table.add_column(col)
    for o in outcomes:
        table.add_row(o.name, "[green]pass[/]" if o.passed else "[bold red]FAIL[/]", o.detail)
    table.add_row("stress (2 processes, uniform + zipf 0.99)",
                  "[green]pass[/]" if result.verdict == "ok" else f"[bold red]{result.verdict.upper()}[/]",
                  result.summary())
    console.print(table)
    passed = all(o.passed for o in outcomes) and result.verdict == "ok"
    explanation = "" if result.verdict == "ok" else result.explain()
    if explanation:
        console.print(explanation, highlight=False, markup=False)
    suite_ops = sum(o.ops_checked for o in outcomes)
    report = CheckReport(system, passed, tuple(outcomes), result.verdict, result.ops + suite_ops, result.keys,
                         explanation, time.perf_counter() - t0)
    verdict = "PASS" if passed else "FAIL"
    console.print(f"{verdict}: {system}: {len(outcomes)} conformance checks, "
                  f"{report.ops:,} operations checked for linearizability ({result.keys:,} keys in the "
                  f"process stress), {report.wall_s:.1f} s", highlight=False)
    if json_path:
        import json
        with open(json_path, "w") as f:
            json.dump({"system": system, "passed": passed, "stress": result.verdict, "ops": report.ops,
                       "keys": result.keys, "suite": [o._asdict() for o in outcomes],
                       "explanation": explanation}, f, indent=1)
    return report
