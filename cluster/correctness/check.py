"""``dmrack check --system NAME``: is this system correct on the rack?

Two parts, both against the one KV interface, so every system gets the same verdict procedure:

1. the conformance suite (``cluster/correctness/conformance.py``): single-client semantics, large values,
   load-then-read and co-located concurrent stress with the history checked, in one process;
2. a stress of a rack of *processes*: two compute nodes whose coroutines hammer a small key space
   with gets, inserts, updates and deletes (and, on a system with ``supports_scan``, 10 % scans
   of 1-16 keys), first uniform, then zipfian 0.99 keys, every
   operation recorded in the shared history; the merged history is then checked for per-key
   linearizability (``cluster/correctness/checker.py``). Real concurrency across OS processes is what finds
   the races a single scheduler cannot produce.

The output is built for a failure, which can involve dozens of keys: the verdict comes first
(with how many operations and keys were checked, and the ``--option`` values the system ran
with, so that a PASS of a system with a fault switched on never reads like a clean PASS), then one line per check (the first line of a
failure, never wrapped), then a short block per failing key (the one reason and the timeline,
``KeyFailure.brief``), at most SHOWN_KEYS of them. The checker's full explanations -- the partial
linearization, every blocked operation, every key -- go to a report file named in the output
(``dmrack-check-SYSTEM.txt``; ``--report``/``--out`` choose where): printed, they ran to a
thousand lines with the verdict on the last, and timelines wrapped inside table cells.

``dmrack check --history FILE`` (:func:`check_history_file`) checks a history recorded by
``dmrack up/run --history`` the same way, so a history can be rechecked without ``python -m``.
"""

from __future__ import annotations

import time
from typing import NamedTuple

# The stress's shapes and mix are shared with the conformance suite, which this command runs: they
# live in shapes.py, which both import, and are re-exported here where they were first declared.
from cluster.correctness.shapes import (  # noqa: F401  (re-exports)
    HEAVY, QUICK, SCAN_SHARE, STRESS_KEYS, StressShape, stress_mix)
from cluster.scenario import with_rack_tables  # noqa: F401  (re-exported: declared here first)

HISTORY_CAPACITY = 1 << 20
#: Under --chaos the process stress writes values of 16 up to this many bytes (several lines, and
#: out of line where a system keeps large values in blocks): the windows chaos widens are theirs.
CHAOS_VALUE_BYTES = 512


class CheckReport(NamedTuple):
    system: str
    passed: bool
    suite: tuple            # conformance outcomes
    stress_verdict: str     # ok | illegal | unknown
    ops: int
    keys: int
    explanation: str
    wall_s: float


def stress_workloads(system_cls, shape: "StressShape") -> dict:
    """The process stress's two workloads (uniform, then zipfian 0.99), by scenario name."""
    from workloads.stress import StressWorkload
    mix = stress_mix(system_cls)
    return {name: StressWorkload(keys=shape.keys, mix=mix, distribution=dist, value_size=shape.value_size,
                                 mixed_sizes=shape.mixed_sizes)
            for name, dist in (("default", "uniform"), ("zipf", "zipfian"))}


def stress_scenario(system: str, options: dict, *, seed: int, run_ms: float, compute: int = 2, threads: int = 4,
                    coroutines: int = 4, keys: int = STRESS_KEYS, value_size: int = 32, profile: str | None = None,
                    profile_overrides: dict | None = None):
    """The process-rack stress: load half the keys, run uniform, then zipfian (as a scenario), on
    ``profile`` (default the conformance rigs' ``cx6-200g``) with ``profile_overrides`` (e.g. the
    [chaos] table of ``--chaos``)."""
    from cluster.correctness.shapes import process_rack
    from cluster.scenario import scenario_from_dict
    data = {
        **process_rack(system, options, seed=seed, on_node_death="stop", compute=compute, threads=threads,
                       coroutines=coroutines, memory="64MiB", profile=profile, profile_overrides=profile_overrides),
        "workload": {"preset": "a", "recordcount": keys // 2, "keysize": 8, "valuesize": value_size},
        "workloads": {"zipf": {"preset": "a"}},
        # inserts, not a bulk load: concurrent inserts are part of what is checked
        "step": [{"action": "load", "bulk": False}, {"action": "run", "duration_ms": run_ms},
                 {"action": "run", "workload": "zipf", "duration_ms": run_ms}],
    }
    from nodes.systems import get_system
    return scenario_from_dict(with_rack_tables(get_system(system), data), source=f"dmrack check {system}")


class StressRackFailed(RuntimeError):
    """The process stress's rack ended without a history to check (a node died, the system gave
    up): a FAIL of the check, said in one line (``dmrack check`` exits 1)."""


def stress_processes(system: str, options: dict, *, seed: int = 1, run_ms: float | None = None,
                     time_limit_s: float = 60.0, shape: StressShape = StressShape(), profile: str | None = None,
                     profile_overrides: dict | None = None):
    """Run the stress on a rack of processes; returns (CheckResult, Supervisor)."""
    from cluster.correctness.checker import check
    from cluster.correctness.shapes import stress_options
    from cluster.supervisor import Supervisor
    from nodes.systems import get_system
    if run_ms is not None:
        shape = shape._replace(run_ms=run_ms)
    options = stress_options(get_system(system), options, shape)
    sup = Supervisor(stress_scenario(system, options, seed=seed, run_ms=shape.run_ms, threads=shape.threads,
                                     coroutines=shape.coroutines, keys=shape.keys, value_size=shape.value_size,
                                     profile=profile, profile_overrides=profile_overrides),
                     quiet=True, history=HISTORY_CAPACITY)
    # The YCSB workloads of the scenario only shape the rack; the stress workload drives it: every
    # op kind on a small key space, so inserts meet existing keys and deletes meet missing ones
    # (and scans, on a system that has them).
    sup.compiled.workloads.update(stress_workloads(get_system(system), shape))
    status = sup.run()
    if status != 0:
        deaths = "; ".join(f"{d.node} {d.how}" for d in sup.deaths) or sup.stop_reason
        raise StressRackFailed(f"the stress rack failed: {deaths}")
    return check(sup.history_ops, time_limit_s=time_limit_s), sup


_STRESS_VERDICT = {"ok": "linearizable", "illegal": "NOT linearizable", "unknown": "undecided (time limit)",
                   "skipped": "skipped (--only)"}

#: Characters of an option's value the verdict line shows (longer values end in "...").
OPTION_VALUE_CHARS = 40


def options_text(given: dict) -> str:
    """The ``--option`` values a check ran with, as the verdict line shows them
    ("--option fault=skip-checksum --option n=3"); "" when none was given."""
    def value(v) -> str:
        text = str(v).lower() if isinstance(v, bool) else str(v)
        return text if len(text) <= OPTION_VALUE_CHARS else text[:OPTION_VALUE_CHARS - 3] + "..."
    return " ".join(f"--option {k}={value(v)}" for k, v in given.items())


def verdict_line(system: str, given: dict, passed: bool, checks: int, failed: int, stress: str, ops: int,
                 keys: int, wall_s: float, chaos=None) -> str:
    """The check's first line: PASS or FAIL, the system and the options it ran with (``given``:
    the ``--option`` values, checked), the chaos it ran under (``chaos``: a ChaosSpec), the
    conformance checks, the process stress's verdict (ok, illegal, unknown), the operations and
    keys checked and the time taken."""
    opts = options_text(given)
    if chaos is not None:
        opts = f"{opts}; {chaos.describe()}" if opts else chaos.describe()
    return (f"{'PASS' if passed else 'FAIL'}: {system}" + (f" ({opts})" if opts else "")
            + f": {checks} conformance checks" + (f" ({failed} failed)" if failed else "")
            + f", process stress {_STRESS_VERDICT.get(stress, stress)}; "
            f"{ops:,} operations checked for linearizability ({keys:,} keys in the process stress), {wall_s:.1f} s")


# Key blocks shown on the terminal; the report file has every key in full.
SHOWN_KEYS = 5


def default_report_path(name: str, out_dir: str | None = None) -> str:
    """Where the full report goes unless ``--report`` says: ``dmrack-check-NAME.txt`` in ``--out``
    or the current directory."""
    import os
    return os.path.join(out_dir or ".", f"dmrack-check-{name}.txt")


def _failure_blocks(result, console, report_path: str | None) -> None:
    """One short block per failing key (at most SHOWN_KEYS), without any table around it: a
    timeline wrapped inside a table cell is unreadable, and a thousand lines bury the verdict."""
    for f in result.failures[:SHOWN_KEYS]:
        console.print("")
        console.print(f.brief(), highlight=False, markup=False, soft_wrap=True)
    hidden = len(result.failures) - SHOWN_KEYS
    if hidden > 0:
        console.print(f"... and {hidden} more failing key(s)" + (f" in {report_path}" if report_path else ""),
                      highlight=False, markup=False)
    if result.unknown_keys:
        console.print(f"{len(result.unknown_keys)} key(s) undecided within the time limit (neither a violation "
                      f"nor a proof)", highlight=False, markup=False)
    for p in result.scan_problems[:SHOWN_KEYS]:
        console.print(f"scan problem: {p}", highlight=False, markup=False, soft_wrap=True)


def checks_table(system: str, given: dict):
    """The table under a verdict, one row per check (``check``, ``verdict``, ``detail``): the
    detail is one line, cut to the terminal; the rest is in the report."""
    from rich.table import Table
    table = Table(title=f"dmrack check --system {system}" + (f" {options_text(given)}" if given else ""),
                  title_justify="left")
    table.add_column("check", no_wrap=True)
    table.add_column("verdict", no_wrap=True)
    table.add_column("detail", no_wrap=True, overflow="ellipsis", max_width=100)
    return table


def write_report(path: str, text: str) -> None:
    import os
    d = os.path.dirname(os.path.abspath(path))
    os.makedirs(d, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text if text.endswith("\n") else text + "\n")


def trace_stress(system: str, options: dict, path: str, bounds, *, seed: int, shape: StressShape,
                 history=None, result=None, profile: str | None = None) -> dict:
    """``dmrack check --trace FILE``: the stress's first phase run again co-located (one process,
    one virtual clock: what a trace needs; the rack of processes keeps a clock per node), recorded
    from the start of its run within ``bounds`` (shm/sim/trace.py) and written to ``path``.
    With the process stress's ``history`` and a checker ``result`` that found violations, the
    operations of the failing keys (at most SHOWN_KEYS) go into the same file, a process track
    named ``violation: key K`` each. Returns the written document."""
    from cluster.correctness.shapes import stress_options
    from cluster.rack import ColocatedRack
    from shm.sim.trace import violation_events
    from nodes.systems import get_system
    options = stress_options(get_system(system), options, shape)
    # long enough to hold the window, no longer: the trace is of the first phase's start
    run_ms = min(shape.run_ms, bounds.window_ns / 1e6 + 0.05)
    scen = stress_scenario(system, options, seed=seed, run_ms=run_ms, threads=shape.threads,
                           coroutines=shape.coroutines, keys=shape.keys, value_size=shape.value_size, profile=profile)
    rack = ColocatedRack(scen, trace=bounds)
    rack.compiled.workloads.update(stress_workloads(get_system(system), shape))
    rack.run()
    rack.tracer.provenance.update(check=system, options=dict(options), phase_ms=round(run_ms, 6))
    extra = []
    if result is not None and result.verdict == "illegal" and history:
        for k, f in enumerate(result.failures[:SHOWN_KEYS]):
            extra.extend(violation_events(f.key, history, first_pid=1000 + 100 * k))
    return rack.tracer.write(path, extra_events=extra)


def windows_line(w: dict) -> str:
    """How hard the co-located checks pushed the windows a race needs (``shm.fabric.WINDOW_COUNTERS``
    over the conformance suite's racks): one line under the verdict, so a PASS says what it tried."""
    parts = [f"{w['cas_raced']:,} CASes lost a race", f"{w['reads_overlapping_writes']:,} multi-line READs had a "
             f"write land inside them"]
    if w["chaos_delays"] or w["resumes_delayed"] or w["write_backs_delayed"]:
        avg = w["chaos_delay_ns"] / w["chaos_delays"] if w["chaos_delays"] else 0
        parts.append(f"chaos delayed {w['chaos_delays']:,} requests or responses (mean {avg:,.0f} ns), "
                     f"{w['resumes_delayed']:,} resumptions and {w['write_backs_delayed']:,} write-backs")
    return "windows hit by the co-located checks: " + "; ".join(parts)


class StressSkipped:
    """The process stress's place in a check that ran named conformance checks only (``--only``)."""
    verdict = "skipped"
    ops = keys = 0
    failures = unknown_keys = scan_problems = ()

    def summary(self) -> str:
        return "skipped (--only)"

    def explain(self) -> str:
        return "skipped (--only)"


def replay_command(system: str, given: dict, *, quick: bool, heavy: bool, seed: int, profile: str | None,
                   chaos=None, only=None, scale=None) -> str:
    """The command that runs this check again: its co-located checks (the conformance suite) give
    the same history bit for bit, chaos included (its stream is seeded); the process stress runs
    on real processes and may interleave differently."""
    opts = "".join(f" --option {k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in given.items())
    return (f"dmrack check --system {system}{opts}" + (" --quick" if quick else "") + (" --heavy" if heavy else "")
            + (f" --profile {profile}" if profile else "") + f" --seed {seed}"
            + (f" {chaos.flags()}" if chaos is not None else "")
            + (f" --only {','.join(only)}" if only else "")
            + (f" --scale {scale.text()}" if scale is not None and scale.text() != "full" else ""))


def run(system: str, *, options: dict | None = None, quick: bool = False, heavy: bool = False, seed: int = 1,
        console=None, json_path: str | None = None, report_path: str | None = None,
        out_dir: str | None = None, trace=None, profile: str | None = None, chaos=None,
        only: list | None = None, scale=None, shrink_failures: bool = True) -> CheckReport:
    """Run the suite and the process stress; print the verdict first, then one line per check
    and a short block per failing key; the full explanations go to a report file (``report_path``,
    default ``dmrack-check-SYSTEM.txt`` in ``out_dir`` or the current directory), which is written
    when something failed or when a path or directory was given."""
    from rich.console import Console
    from cluster.correctness.conformance import run_suite
    from cluster.experiments.progress import Sweep
    from nodes.systems import get_system
    cls = get_system(system)
    if getattr(cls, "transactional", False):
        # a transactional system has its own suite (serializability, SmallBank's invariants), which
        # builds on this module's verdict helpers: the CLI dispatches to it (cluster/cli.py)
        raise ValueError(f"system {system!r} is transactional: its check is cluster.correctness.txn_check.run "
                         f"(dmrack check --system {system} dispatches there)")
    console = console or Console()
    asked = list(options or {})                 # the --option names, in the order given
    options = cls.check_options(dict(options or {}), f"dmrack check --system {system}")
    given = {k: options[k] for k in asked}      # their values as checked (converted to the option's type)
    t0 = time.perf_counter()
    from cluster.correctness.chaos import applied
    chaos_ov = chaos.overrides() if chaos is not None else None
    from shm.fabric import windows_hit
    before = windows_hit()
    with Sweep(f"check {system}", ["conformance suite", "process stress"]) as sweep:
        shape = cls.heavy_stress(HEAVY) if heavy else cls.check_stress(QUICK if quick else StressShape(), options)
        if chaos is not None and not shape.mixed_sizes:
            # chaos widens the windows of multi-line values and out-of-line blocks: give it some
            shape = shape._replace(value_size=max(shape.value_size, CHAOS_VALUE_BYTES), mixed_sizes=True)
        suite_trace = [trace[0], trace[1], None] if trace is not None and only else None
        with applied(chaos, profile):
            outcomes = run_suite(system, options=options, heavy=heavy, progress=sweep.part("conformance suite"),
                                 profile=profile, only=only, scale=scale, trace=suite_trace, stress_shape=shape)
        windows = {k: v - before[k] for k, v in windows_hit().items()}
        stress_part = sweep.part("process stress")
        if only:
            result, sup = StressSkipped(), None   # --only: the named conformance checks alone
        else:
            stress_part("stress on a rack of processes (history recorded)")
            result, sup = stress_processes(system, options, seed=seed, shape=shape, profile=profile,
                                           profile_overrides=chaos_ov)
        shrunk, reproduced = None, None
        first_failed = next((o.name for o in outcomes if not o.passed), None)
        if shrink_failures and first_failed is not None:
            from cluster.correctness.shrink import shrink
            stress_part(f"shrinking the failure of {first_failed}")
            shrunk = shrink(system, first_failed, options, chaos=chaos, profile=profile, stress_shape=shape)
        elif shrink_failures and result.verdict == "illegal":
            # a failure of the rack of processes: its interleaving was the operating system's, so
            # look for it co-located (one virtual clock: a replay is bit for bit), then shrink it
            from cluster.correctness.shrink import SEEDS_PER_CANDIDATE, shrink
            stress_part("reproducing the process stress's failure co-located")
            family = (None,) if chaos is None else tuple(chaos.seed + k for k in range(SEEDS_PER_CANDIDATE))
            reproduced = False
            for name in ("stress_zipfian", "stress_uniform"):
                shrunk = shrink(system, name, options, chaos=chaos, profile=profile, stress_shape=shape, seeds=family)
                if shrunk is not None:
                    reproduced = True
                    break
        if trace is not None and sup is not None:
            stress_part("a co-located run of the stress, traced")
            with applied(chaos, profile):
                doc = trace_stress(system, options, trace[0], trace[1], seed=seed, shape=shape,
                                   history=sup.history_ops, result=result, profile=profile)
    passed = all(o.passed for o in outcomes) and result.verdict in ("ok", "skipped")
    explanation = "" if result.verdict in ("ok", "skipped") else result.explain()
    suite_ops = sum(o.ops_checked for o in outcomes)
    report = CheckReport(system, passed, tuple(outcomes), result.verdict, result.ops + suite_ops, result.keys,
                         explanation, time.perf_counter() - t0)
    failed = [o for o in outcomes if not o.passed]
    verdict = verdict_line(system, given, passed, len(outcomes), len(failed), result.verdict, report.ops,
                           result.keys, report.wall_s, chaos)
    replay = replay_command(system, given, quick=quick, heavy=heavy, seed=seed, profile=profile, chaos=chaos,
                            only=only, scale=scale)
    coverage = windows_line(windows)
    summ = sup.results.summary() if sup is not None and getattr(sup, "results", None) is not None else None
    if summ is not None:
        stress_windows = {"cas_raced": summ.get("cas_raced", 0), "chaos_delays": summ.get("chaos_delays", 0)}
        coverage += (f"; by the process stress: {stress_windows['cas_raced']:,} CASes lost a race"
                     + (f", chaos delayed {stress_windows['chaos_delays']:,} verbs or resumptions"
                        if chaos is not None else ""))
        windows = {**windows, "process_stress": stress_windows}
    shrunk_lines = []
    if reproduced is False:
        shrunk_lines = ["the process stress's failure did not show in a co-located run of its shape (stress_zipfian, "
                        "stress_uniform" + (f", chaos seeds {chaos.seed}-{chaos.seed + 2}" if chaos is not None else "")
                        + "): its interleaving was the operating system's; run the check again to see it vary"]
    if shrunk is not None:
        detail = shrunk.detail.strip().splitlines()[0] if shrunk.detail.strip() else ""
        sized = "its full size" if shrunk.scale == shrunk.full else shrunk.scale.text()
        shrunk_lines = [
            ("the process stress's failure reproduced co-located, " if reproduced else "")
            + f"shrunk: {shrunk.check} still fails at {sized}"
            + (f" (chaos seed {shrunk.chaos_seed})" if shrunk.chaos_seed is not None else "")
            + f", the smallest of {shrunk.runs} runs: {detail}",
            "replay the shrunk run: " + replay_command(
                system, given, quick=quick, heavy=heavy, seed=seed, profile=profile,
                chaos=chaos._replace(seed=shrunk.chaos_seed) if chaos is not None else None,
                only=[shrunk.check], scale=shrunk.scale)]
    stress_name = (f"stress (2 processes x {shape.threads} x {shape.coroutines}, {shape.keys} keys, "
                   f"{'16-' if shape.mixed_sizes else ''}{shape.value_size} B values, uniform + zipf 0.99"
                   + (f", {SCAN_SHARE:.0%} scans included" if stress_mix(cls) else "") + ")")
    write = report_path or out_dir or not passed
    path = report_path or default_report_path(system, out_dir) if write else None
    if path:
        text = [verdict, coverage, f"replay: {replay}", *shrunk_lines, ""]
        for o in outcomes:
            text.append(f"== {o.name}: {'pass' if o.passed else 'FAIL'}")
            if o.detail:
                text.append(o.detail)
        text.append(f"== {stress_name}: {result.verdict}")
        text.append(result.explain())
        if shrunk is not None:
            text.append(f"== shrunk: {shrunk.check} at {shrunk.scale.text()}")
            text.append(shrunk.detail)
        write_report(path, "\n".join(text))
    console.print(verdict, highlight=False, soft_wrap=True)
    if path:
        console.print(f"full report: {path}", highlight=False)
    console.print(coverage, highlight=False, soft_wrap=True)
    if suite_trace is not None and suite_trace[2] is not None:
        written, doc, failing = suite_trace[2]
        o = doc["otherData"]
        console.print(f"trace: {written} ({o['ops_recorded']:,} operations of the {only[0] if len(only) == 1 else ''}"
                      f" history check's co-located run"
                      + (f", and the operations of {min(failing, 5)} failing key(s)" if failing else "")
                      + "; open it in https://ui.perfetto.dev)", highlight=False, soft_wrap=True)
    elif trace is not None and sup is not None:
        o = doc["otherData"]
        failing = min(len(result.failures), SHOWN_KEYS) if result.verdict == "illegal" else 0
        console.print(f"trace: {trace[0]} ({o['ops_recorded']:,} operations of a co-located stress run"
                      + (f", and the operations of {failing} failing key(s) of the process stress" if failing else "")
                      + "; open it in https://ui.perfetto.dev)", highlight=False, soft_wrap=True)
    table = checks_table(system, given)
    for o in outcomes:
        table.add_row(o.name, "[green]pass[/]" if o.passed else "[bold red]FAIL[/]",
                      o.detail.strip().splitlines()[0] if o.detail.strip() else "")
    if result.verdict != "skipped":
        table.add_row(stress_name, "[green]pass[/]" if result.verdict == "ok"
                      else f"[bold red]{result.verdict.upper()}[/]", result.summary())
    console.print(table)
    if result.verdict not in ("ok", "skipped"):
        console.print(f"process stress: {result.summary()}", highlight=False, markup=False, soft_wrap=True)
        _failure_blocks(result, console, path)
    for line in shrunk_lines:
        console.print(line, highlight=False, markup=False, soft_wrap=True)
    if not passed:
        console.print(f"replay: {replay}", highlight=False, markup=False, soft_wrap=True)
    if json_path:
        import json
        with open(json_path, "w") as f:
            json.dump({"system": system, "options": given, "chaos": chaos.describe() if chaos is not None else None,
                       "windows": windows, "replay": replay,
                       "shrunk": None if shrunk is None else {"check": shrunk.check, "scale": shrunk.scale.text(),
                                                              "chaos_seed": shrunk.chaos_seed, "runs": shrunk.runs,
                                                              "detail": shrunk.detail}, "passed": passed, "stress": result.verdict, "ops": report.ops,
                       "keys": result.keys, "suite": [o._asdict() for o in outcomes],
                       "explanation": explanation, "report": path}, f, indent=1)
    return report


def check_history_file(path: str, *, time_limit_s: float = 10.0, console=None, report_path: str | None = None,
                       out_dir: str | None = None, json_path: str | None = None) -> int:
    """``dmrack check --history FILE``: check a recorded history (``dmrack run --history``, or
    any JSONL of ``cluster.correctness.checker.Op`` records). Prints the verdict, then a short block per
    failing key; the full explanation goes to a report file when the history is not linearizable
    (or a report path or directory was given). Returns the exit status: 0 linearizable, 1 not,
    3 undecided within the time limit. A malformed file raises ``HistoryError`` (a ValueError:
    one line naming the file and line, exit status 2), and so does a file with no operations: a
    verdict "linearizable: 0 operations" would read as a pass of a history that was never recorded
    (a run that wrote to another path, a truncated copy)."""
    import os
    from rich.console import Console
    from cluster.correctness.checker import HistoryError, check, load_jsonl
    console = console or Console()
    ops = load_jsonl(path)
    if not ops:
        raise HistoryError(f"{path}: the history is empty (no operations to check); a history is JSON lines, "
                           f"one operation each, as dmrack run --history writes")
    with console.status(f"[bold]checking {len(ops):,} operations[/] of {path}"):
        result = check(ops, time_limit_s=time_limit_s)
    stem = os.path.splitext(os.path.basename(path))[0] or "history"
    write = report_path or out_dir or result.verdict != "ok"
    out = report_path or default_report_path(stem, out_dir) if write else None
    if out:
        write_report(out, f"{path}\n{result.explain()}")
    console.print(result.summary(), highlight=False, markup=False, soft_wrap=True)
    if out:
        console.print(f"full report: {out}", highlight=False)
    if result.verdict != "ok":
        _failure_blocks(result, console, out)
    if json_path:
        import json
        with open(json_path, "w") as f:
            json.dump({"history": path, "verdict": result.verdict, "ops": result.ops, "keys": result.keys,
                       "failing_keys": [fl.key for fl in result.failures], "unknown_keys": list(result.unknown_keys),
                       "report": out}, f, indent=1)
    return {"ok": 0, "illegal": 1}.get(result.verdict, 3)
