"""``dmrack check --system NAME`` for a transactional system: the transactional conformance suite.

A KV system is judged against a register model, key by key (conformance.py, checker.py); a
transactional system (nodes/systems/txn.py) is judged by what a transaction promises: all of its
writes or none, in an order some serial execution would give. The first five checks run on
co-located racks (``txn_suite.TxnRig``: one compute node, its memory nodes, one virtual clock, so
every failure replays bit for bit with the same seed), the last and the stress on racks of
processes (real concurrency, the operating system's interleaving), all loaded with SmallBank
(workloads/smallbank.py), and every concurrent check ends with the same three judges: the serializability checker on the recorded
history (cluster/correctness/serializability.py), SmallBank's conserved total, and the quiescent
state (no lock left set, every backup equal to its primary). The checks, in ``TXN_CHECKS`` order:

* ``single_client``: each SmallBank transaction on one coroutine, against a dict of balances: what
  commits is exactly what the logic says (values and version + 1 per commit), a read-only
  transaction changes nothing, and the aborts of the interface (a user abort: SendPayment without
  funds; ``not_found``: an account that does not exist) return their reason;
* ``abort_leaves_nothing``: bodies that fetch, write and then abort (the user's abort after the
  writes were staged; lock conflicts of coroutines racing for one record) leave every value,
  version and lock word as it was;
* ``concurrent_transfers``: only SendPayment and Amalgamate (they move money, never create it) on
  many coroutines over a few hot accounts: the total never changes, and the history is serializable;
* ``serializable_history``: the SmallBank mix on threads x coroutines (``smallbank_stress``), with
  the design's ``audit`` (what must hold at every instant) sampled during the run;
* ``coordinator_crash``: the same, with a coordinator stopped at each of the design's failpoints
  (``shm/failpoints.py``: ``<name>.*``) in the middle of a commit, then the design's ``recover``
  run: no committed transaction lost, no partial one visible, no lock left;
* ``coordinator_kill``: a rack of *processes* (two compute nodes) in which compute node cn1's
  process exits, as ``kill -9``, when one of its coordinators reaches a failpoint mid-commit: all
  its coroutines stop where they are and what they posted but did not see land never lands; the
  other node runs on; the rack's owner runs ``recover`` and the merged history is judged.

Then the *stress* (``stress``): SmallBank on a rack of processes (two compute nodes, their
coordinators recording every attempt in a shared transaction history, nodes/txn_history.py),
sized by ``--quick``/``--heavy`` (``TXN_SHAPES``), judged the same way (the design's ``audit``
is sampled only on the co-located rigs: it reads every replica while one clock stands still).

``--chaos`` runs all of it under ``chaos.applied(spec)``: the rigs load their profile by name, so
the [chaos] delays widen every window a race needs (a commit's WRITEs landing later, a coordinator
resuming later). A failure is reported in the KV check's verdict style: the verdict first, one line
per check, the full explanations in a report file (``dmrack-check-NAME.txt``).
"""

from __future__ import annotations

import time
from typing import Callable, NamedTuple

from cluster.correctness.txn_suite import TxnRig, smallbank_loop, smallbank_processes, smallbank_stress
from cluster.correctness.serializability import check_history
from workloads.smallbank import SEND_CENTS, SmallBank, amalgamate, balance, check_total, deposit_checking, \
    send_payment, transact_saving, write_check


class TxnShape(NamedTuple):
    """The stress: SmallBank on a rack of processes, ``compute`` compute nodes of ``threads x
    coroutines`` coordinators each, for ``run_ms`` of virtual time, over ``accounts`` (and hot
    ones)."""
    accounts: int = 400
    hot_accounts: int = 24
    compute: int = 2
    threads: int = 2
    coroutines: int = 8
    run_ms: float = 0.6

    def describe(self) -> str:
        return (f"SmallBank on a rack of processes, {self.compute} compute nodes x {self.threads} threads x "
                f"{self.coroutines} coroutines, {self.run_ms:g} ms, {self.accounts} accounts ({self.hot_accounts} hot)")


#: The stress by mode. Sized for the 2-core machine: --quick is about a second of processes.
TXN_SHAPES = {"quick": TxnShape(accounts=200, hot_accounts=16, threads=2, coroutines=4, run_ms=0.3),
              "default": TxnShape(),
              "heavy": TxnShape(accounts=1000, hot_accounts=32, threads=4, coroutines=8, run_ms=1.5)}


class TxnCheckFailure(AssertionError):
    """A transactional check failed; the message starts with the check's name."""


class TxnOutcome(NamedTuple):
    name: str
    passed: bool
    detail: str                 # "" or what went wrong (first line: the summary)
    txns_checked: int           # transaction attempts the check judged
    wall_s: float


def _expect(cond, name: str, message: str) -> None:
    if not cond:
        raise TxnCheckFailure(f"{name}: {message}")


def _smallbank(accounts: int = 40, hot: int = 8) -> SmallBank:
    return SmallBank(accounts=accounts, hot_accounts=hot)


def _balances(rig: TxnRig) -> dict:
    """``{(table, key): (version, cents)}`` of the primaries."""
    return {k: (v, int.from_bytes(b, "little", signed=True)) for k, (v, b) in rig.final_state().items()}


def _judge(name: str, rig: TxnRig, wl: SmallBank, outcomes: list, audits: list = ()) -> int:
    """The three judges of a concurrent run: serializable history, conserved total, quiescence.
    Returns the attempts judged."""
    final = rig.final_state()
    ser = check_history(rig.history(), final)
    total = sum(int.from_bytes(v, "little", signed=True) for (_, v) in final.values())
    created = sum(o.result for o in outcomes if o.committed)
    cons = check_total(wl.initial_total(), total, created)
    problems = list(audits) + rig.quiescent_problems()
    _expect(ser.ok, name, f"the history is not serializable: {ser.message}")
    _expect(cons.ok, name, cons.message)
    _expect(not problems, name, f"{len(problems)} problem(s) of the state, first: {problems[0]}" if problems else "")
    return len(rig.history())


# -- the checks -----------------------------------------------------------------------------------

def check_single_client(system, options, ctx) -> int:
    name = "single_client"
    wl = _smallbank()
    with TxnRig(system, wl, options, seed=ctx.seed, profile=ctx.profile) as r:
        model = {k: v for k, (_, v) in _balances(r).items()}
        versions = {k: v for k, (v, _) in _balances(r).items()}
        start = wl.initial_balance_cents

        def run(body, *args, expect=True, reason=""):
            out = r.run(body, *args)
            _expect(out.committed == expect, name,
                    f"{body.__name__}{args}: {'committed' if out.committed else 'aborted (' + out.reason + ')'}, "
                    f"expected {'a commit' if expect else 'an abort (' + reason + ')'}")
            if not expect:
                _expect(out.reason == reason, name, f"{body.__name__}{args} aborted for {out.reason!r}, expected "
                                                    f"{reason!r}")
            return out

        def same(what, writes=()):
            got = _balances(r)
            for key in writes:
                versions[key] += 1
            for key, cents in model.items():
                _expect(got[key] == (versions[key], cents), name,
                        f"after {what}: {key[0]}[{key[1]}] is (version {got[key][0]}, {got[key][1]} cents), expected "
                        f"(version {versions[key]}, {cents} cents)")

        run(deposit_checking, 1)
        model[("checking", 1)] += 130
        same("DepositChecking(1)", [("checking", 1)])
        run(transact_saving, 2)
        model[("savings", 2)] += 2020
        same("TransactSaving(2)", [("savings", 2)])
        out = run(balance, 1)
        _expect(out.result == 0, name, f"Balance(1) returned {out.result!r}")
        same("Balance(1) (read-only)")
        run(send_payment, 1, 3)
        model[("checking", 1)] -= SEND_CENTS
        model[("checking", 3)] += SEND_CENTS
        same("SendPayment(1, 3)", [("checking", 1), ("checking", 3)])
        run(write_check, 4)
        model[("checking", 4)] -= 500
        same("WriteCheck(4)", [("checking", 4)])
        run(amalgamate, 5, 6)
        model[("checking", 6)] += model[("savings", 5)] + model[("checking", 5)]
        model[("savings", 5)] = model[("checking", 5)] = 0
        same("Amalgamate(5, 6)", [("checking", 6), ("savings", 5), ("checking", 5)])
        run(send_payment, 5, 7, expect=False, reason="user")          # account 5 is empty now
        same("SendPayment(5, 7) without funds (a user abort)")
        run(deposit_checking, wl.accounts + 5, expect=False, reason="not_found")
        same(f"DepositChecking({wl.accounts + 5}) of an account that does not exist")
        _expect(start > 0, name, "SmallBank starts with money")
        problems = r.quiescent_problems()
        _expect(not problems, name, problems[0] if problems else "")
        return len(r.history())


def _write_then_abort(tx, a, b):
    """Stage writes of two records, then give up: nothing may remain."""
    x = tx.read_for_update("checking", a)
    y = tx.read_for_update("savings", b)
    yield from tx.execute()
    tx.write(x, -1)
    tx.write(y, -2)
    tx.abort("user", "staged writes, then gave up")
    return 0


def check_abort_leaves_nothing(system, options, ctx) -> int:
    name = "abort_leaves_nothing"
    wl = _smallbank()
    with TxnRig(system, wl, options, threads=2, coroutines=4, seed=ctx.seed, profile=ctx.profile) as r:
        before = _balances(r)
        out = r.run(_write_then_abort, 1, 2)
        _expect(not out.committed and out.reason == "user", name, f"the aborting body returned {out}")
        after = _balances(r)
        changed = [k for k in before if before[k] != after[k]]
        _expect(not changed, name, f"an aborted transaction changed {changed[:3]}: {before[changed[0]]} -> "
                                   f"{after[changed[0]]}" if changed else "")
        problems = r.quiescent_problems()
        _expect(not problems, name, f"after a user abort: {problems[0]}" if problems else "")
        # coroutines racing for the same two records: most attempts abort on a lock or validation;
        # half the bodies abort by themselves after staging writes
        outcomes: list = []

        def loop(client, co, i):
            for k in range(12):
                body = _write_then_abort if (i + k) % 2 else deposit_checking
                args = (0, 0) if body is _write_then_abort else (0,)
                outcomes.append((yield from client.run(co, body, *args, name=body.__name__)))
        r.each(loop)
        reasons = {o.reason for o in outcomes if not o.committed}
        _expect(reasons - {"user"}, name, f"racing coroutines never conflicted (abort reasons {sorted(reasons)}): the "
                                          f"check did not exercise lock aborts")
        after = _balances(r)
        deposits = sum(1 for o in outcomes if o.committed)
        want = before[("checking", 0)][1] + 130 * deposits
        _expect(after[("checking", 0)][1] == want, name,
                f"checking[0] = {after[('checking', 0)][1]} cents after {deposits} committed deposits and "
                f"{len(outcomes) - deposits} aborts, expected {want}")
        _expect(after[("savings", 0)] == before[("savings", 0)], name,
                f"savings[0] changed to {after[('savings', 0)]} though every transaction writing it aborted")
        return 1 + _judge(name, r, wl, [o for o in outcomes if o.committed and o.result is not None])


def check_concurrent_transfers(system, options, ctx) -> int:
    name = "concurrent_transfers"
    wl = SmallBank(accounts=60, hot_accounts=6, frequencies=(40, 0, 0, 60, 0, 0))    # Amalgamate, SendPayment
    with TxnRig(system, wl, options, threads=2, coroutines=6, seed=ctx.seed, profile=ctx.profile) as r:
        outcomes: list = []
        r.each(smallbank_loop(wl, ctx.scale(40), ctx.seed, outcomes))
        commits = sum(o.committed for o in outcomes)
        _expect(commits > 0, name, f"no transfer committed out of {len(outcomes)}")
        _expect(all(o.result == 0 for o in outcomes if o.committed), name, "a transfer created or destroyed money")
        return _judge(name, r, wl, outcomes)


def check_serializable_history(system, options, ctx) -> int:
    name = "serializable_history"
    rep = smallbank_stress(system, options, accounts=200, hot_accounts=16, threads=2, coroutines=4,
                           attempts=ctx.scale(50), seed=ctx.seed, profile=ctx.profile)
    _expect(rep.ok, name, rep.message)
    _expect(rep.commits > 0, name, "nothing committed")
    return rep.commits + rep.aborts


def _failpoints(system, check: str) -> list[str]:
    """The failpoints of ``system`` (``<name>.*`` in shm/failpoints.KNOWN, for its own name and the
    designs it is built on: SMART-DTX's are FORD's); the check fails if there are none or the
    system cannot recover."""
    from shm.failpoints import KNOWN
    cls = system if isinstance(system, type) else type(system)
    names = [c.name for c in cls.__mro__ if getattr(c, "name", "")]
    points = [p for p in KNOWN if any(p.startswith(f"{n}.") for n in names)]
    _expect(points, check, f"system {system.name!r} declares no failpoints ({system.name}.* in shm/failpoints.py)")
    _expect(hasattr(system, "recover"), check, f"system {system.name!r} has no recover(fabric, layout)")
    return points


def check_coordinator_crash(system, options, ctx) -> int:
    """Each of the system's failpoints (:func:`_failpoints`), one crash each: a coroutine stopped
    on a co-located rack, so what it posted before the point still lands."""
    name = "coordinator_crash"
    points = _failpoints(system, name)
    # a dead coordinator's INVISIBLE records stall readers up to the re-read bound: keep it short
    opts = dict(options)
    if "invisible_rereads" in opts and opts["invisible_rereads"] > 20:
        opts["invisible_rereads"] = 20
    n = 0
    for point in points:
        for after in ctx.crash_afters:
            rep = smallbank_stress(system, opts, accounts=200, hot_accounts=16, threads=2, coroutines=4,
                                   attempts=ctx.scale(40), seed=ctx.seed, profile=ctx.profile, crash=(point, after))
            _expect(rep.ok, name, f"a coordinator stopped at {point} (its {after + 1}th arrival), then recovered: "
                                  f"{rep.message}")
            _expect("recovery" in rep.message, name, f"{point} never fired (after {after}): the crash was not tested")
            n += rep.commits + rep.aborts
    return n


def check_coordinator_kill(system, options, ctx) -> int:
    """A rack of processes (two compute nodes) running SmallBank, in which compute node cn1's
    process exits (as ``kill -9``) when one of its coordinators reaches a failpoint mid-commit:
    every coroutine of that process stops wherever it is, its WRITEs in flight never land, and
    the other node runs on (blocked by the dead node's locks until recovery). The rack's owner
    then runs ``recover``; the merged history must be serializable, the total kept (each attempt
    in flight at the kill counting or not), nothing locked, the replicas equal. One rack per
    failpoint (--quick: the two of the commit phase)."""
    name = "coordinator_kill"
    points = _failpoints(system, name)
    if ctx.factor < 1:
        points = [p for p in points if p.endswith(("primaries_written", "committed"))] or points
    n = 0
    for point in points:
        for after in ctx.kill_afters:
            rep = smallbank_processes(system.name, options, kill=(point, after), seed=ctx.seed, profile=ctx.profile,
                                      profile_overrides=ctx.profile_overrides)
            _expect(rep.ok, name, f"cn1's process killed at {point} (its {after + 1}th arrival), then recovered: "
                                  f"{rep.message}")
            n += rep.commits + rep.aborts
    return n


TXN_CHECKS: dict[str, Callable] = {
    "single_client": check_single_client,
    "abort_leaves_nothing": check_abort_leaves_nothing,
    "concurrent_transfers": check_concurrent_transfers,
    "serializable_history": check_serializable_history,
    "coordinator_crash": check_coordinator_crash,
    "coordinator_kill": check_coordinator_kill,
}
#: The stress, last (named so --only can pick it).
STRESS = "stress"


class _Ctx(NamedTuple):
    seed: int
    profile: str
    factor: float               # transactions per coroutine, relative to the default
    crash_afters: tuple         # at which arrival each failpoint fires (a stopped coroutine)
    kill_afters: tuple = (20,)  # at which arrival each failpoint kills cn1's process
    profile_overrides: dict | None = None   # the [chaos] table of --chaos, for the racks of processes

    def scale(self, n: int) -> int:
        return max(4, int(n * self.factor))


def _stress(system, options, shape: TxnShape, ctx: _Ctx):
    return smallbank_processes(system.name, options, seed=ctx.seed, profile=ctx.profile,
                               profile_overrides=ctx.profile_overrides, **shape._asdict())


def run_txn_suite(system, options: dict, *, quick: bool = False, heavy: bool = False, seed: int = 1,
                  profile: str | None = None, only=None, progress=None,
                  profile_overrides: dict | None = None) -> list[TxnOutcome]:
    """Every check (or those named in ``only``, ``stress`` among them) on ``system`` (a
    TxnSystem class) with ``options``; one outcome each, a failure recorded, never raised."""
    from cluster.correctness.shapes import DEFAULT_PROFILE
    mode = "heavy" if heavy else "quick" if quick else "default"
    ctx = _Ctx(seed, profile or DEFAULT_PROFILE, {"quick": 0.5, "default": 1.0, "heavy": 2.0}[mode],
               (30,) if not heavy else (10, 30, 60), (20,) if not heavy else (5, 20, 60), profile_overrides)
    names = list(TXN_CHECKS) + [STRESS]
    if only is not None:
        unknown = [n for n in only if n not in names]
        if unknown:
            raise ValueError(f"unknown transactional check(s) {', '.join(map(repr, unknown))}; the checks are "
                             f"{', '.join(names)}")
        names = [n for n in names if n in only]
    out = []
    for i, n in enumerate(names, 1):
        if progress is not None:
            progress(f"transactional check {i}/{len(names)}: {n}")
        t0 = time.perf_counter()
        try:
            if n == STRESS:
                shape = TXN_SHAPES[mode]
                rep = _stress(system, options, shape, ctx)
                passed, detail, count = rep.ok, "" if rep.ok else f"stress: {rep.message}", rep.commits + rep.aborts
                if rep.ok:
                    detail = ""
                out.append(TxnOutcome(n, passed, detail, count, time.perf_counter() - t0))
                continue
            count = TXN_CHECKS[n](system, options, ctx)
            out.append(TxnOutcome(n, True, "", count, time.perf_counter() - t0))
        except TxnCheckFailure as e:
            out.append(TxnOutcome(n, False, str(e), 0, time.perf_counter() - t0))
        except Exception as e:          # a crash inside the system (or the check) is a failure of that check
            import traceback
            out.append(TxnOutcome(n, False, f"{n}: {type(e).__name__}: {e}\n" + traceback.format_exc(limit=4),
                                  0, time.perf_counter() - t0))
    return out


def verdict_line(system: str, given: dict, passed: bool, outcomes, wall_s: float, chaos=None) -> str:
    """The check's first line, in the KV check's style (check.verdict_line)."""
    from cluster.correctness.check import options_text
    opts = options_text(given)
    if chaos is not None:
        opts = f"{opts}; {chaos.describe()}" if opts else chaos.describe()
    checks = [o for o in outcomes if o.name != STRESS]
    failed = sum(not o.passed for o in checks)
    stress = next((o for o in outcomes if o.name == STRESS), None)
    stress_word = ("skipped (--only)" if stress is None else "serializable" if stress.passed else "NOT serializable"
                   " or an invariant broken")
    txns = sum(o.txns_checked for o in outcomes)
    return (f"{'PASS' if passed else 'FAIL'}: {system}" + (f" ({opts})" if opts else "")
            + f": {len(checks)} transactional checks" + (f" ({failed} failed)" if failed else "")
            + f", stress {stress_word}; {txns:,} transaction attempts checked for serializability and "
              f"SmallBank's invariants, {wall_s:.1f} s")


def run(system: str, *, options: dict | None = None, quick: bool = False, heavy: bool = False, seed: int = 1,
        console=None, json_path: str | None = None, report_path: str | None = None, out_dir: str | None = None,
        profile: str | None = None, chaos=None, only=None):
    """``dmrack check --system NAME`` of a transactional system: the suite (and the stress), the
    verdict first, one line per check, a report file when something failed (or a path was given).
    Returns a ``check.CheckReport`` (``passed`` says the exit status)."""
    from rich.console import Console
    from cluster.correctness.chaos import applied
    from cluster.correctness.check import CheckReport, checks_table, write_report, default_report_path, \
        replay_command
    from cluster.experiments.progress import Sweep
    from nodes.systems import get_system
    console = console or Console()
    cls = get_system(system)
    asked = list(options or {})
    options = cls.check_options(dict(options or {}), f"dmrack check --system {system}")
    given = {k: options[k] for k in asked}
    t0 = time.perf_counter()
    with Sweep(f"check {system}", ["transactional suite"]) as sweep:
        with applied(chaos, profile):
            outcomes = run_txn_suite(cls, options, quick=quick, heavy=heavy, seed=seed, profile=profile, only=only,
                                     progress=sweep.part("transactional suite"),
                                     profile_overrides=chaos.overrides() if chaos is not None else None)
    wall = time.perf_counter() - t0
    passed = all(o.passed for o in outcomes)
    verdict = verdict_line(system, given, passed, outcomes, wall, chaos)
    replay = replay_command(system, given, quick=quick, heavy=heavy, seed=seed, profile=profile, chaos=chaos,
                            only=only)
    mode = "heavy" if heavy else "quick" if quick else "default"
    write = report_path or out_dir or not passed
    path = report_path or default_report_path(system, out_dir) if write else None
    if path:
        text = [verdict, f"replay: {replay}", ""]
        for o in outcomes:
            text.append(f"== {o.name}: {'pass' if o.passed else 'FAIL'} ({o.txns_checked:,} attempts, {o.wall_s:.1f} s)")
            if o.detail:
                text.append(o.detail)
        write_report(path, "\n".join(text))
    console.print(verdict, highlight=False, soft_wrap=True)
    if path:
        console.print(f"full report: {path}", highlight=False)
    table = checks_table(system, given)
    for o in outcomes:
        first = o.detail.strip().splitlines()[0] if o.detail.strip() else (
            f"{o.txns_checked:,} attempts" + (f": {TXN_SHAPES[mode].describe()}" if o.name == STRESS else ""))
        label = o.name
        table.add_row(label, "[green]pass[/]" if o.passed else "[bold red]FAIL[/]", first)
    console.print(table)
    if not passed:
        console.print(f"replay: {replay}", highlight=False, markup=False, soft_wrap=True)
    if json_path:
        import json
        with open(json_path, "w") as f:
            json.dump({"system": system, "transactional": True, "options": given,
                       "chaos": chaos.describe() if chaos is not None else None, "replay": replay, "passed": passed,
                       "stress": next(("ok" if o.passed else "illegal" for o in outcomes if o.name == STRESS),
                                      "skipped"),
                       "txns": sum(o.txns_checked for o in outcomes), "suite": [o._asdict() for o in outcomes],
                       "report": path}, f, indent=1)
    return CheckReport(system, passed, tuple(outcomes), "ok" if passed else "illegal",
                       sum(o.txns_checked for o in outcomes), 0, "", wall)


__all__ = ["TXN_CHECKS", "TXN_SHAPES", "STRESS", "TxnShape", "TxnOutcome", "TxnCheckFailure", "run_txn_suite",
           "run", "verdict_line"]
