"""A co-located rig for transactional systems, and the SmallBank stress every one of them must pass.

The KV conformance suite (conformance.py) builds racks of KV clients; a transactional system
(nodes/systems/txn.py) needs its workload's tables set up and loaded first, and is judged by the
serializability checker and the workload's invariant instead of a register model. ``TxnRig``
builds one compute node and its memory nodes on one virtual clock (as tests/test_race.py's rig
does), sets up and loads a workload's tables, and runs transaction bodies on ``threads x
coroutines`` coordinators; :func:`smallbank_stress` runs a closed loop of SmallBank and checks

* the recorded history is serializable (cluster/correctness/serializability.py), with the
  primaries' final versions and values as the final state;
* SmallBank's total changed by exactly what the committed transactions created;
* at quiescence every lock word is 0 and every backup equals its primary (version, value, valid).
"""

from __future__ import annotations

import random
from typing import NamedTuple

from cluster.correctness.serializability import check_history
from nodes.systems import get_system
from shm.coro import NodeRdma
from shm.fabric import Fabric, NodeSpec
from shm.failpoints import ClientCrash
from shm.profile import load_profile
from shm.sim.env import Environment
from shm.verbs import VerbsHost
from workloads.smallbank import SmallBank, check_total


class TxnRig:
    """``system`` (a TxnSystem class or name) on a fresh co-located rack loaded with ``workload``'s
    tables. ``close()`` (or ``with``) frees the fabric."""

    def __init__(self, system, workload, options=None, *, memory_nodes: int = 2, threads: int = 1,
                 coroutines: int = 1, seed: int = 1, profile: str = "cx6-200g", prefix: str | None = None,
                 memory_bytes: int = 64 << 20, policy: str = "per_thread_qp", smart=None,
                 memory_kind: str = "dram", compute_bytes: int = 16 << 20):
        self.system = get_system(system) if isinstance(system, str) else system
        self.workload = workload
        self.options = self.system.check_options(dict(options or {}), f"system {self.system.name!r}")
        # memory_kind "nvm": the memory nodes hold Optane PMem (docs/nvm.md), as FORD's and SMART-DTX's
        # two memory blades do; the profile needs an [nvm] table (cx6-200g has one)
        nodes = [NodeSpec("cn0", "compute", compute_bytes)] + [NodeSpec(f"mn{i}", "memory", memory_bytes,
                                                                   memory_kind=memory_kind)
                                                          for i in range(memory_nodes)]
        self.fab = Fabric.create(load_profile(profile), nodes, prefix=prefix)
        try:
            self.layout = self.system.setup_tables(self.fab, list(range(1, memory_nodes + 1)), self.options,
                                                   workload.tables())
            for t in workload.tables():
                self.system.load(self.fab, self.layout, t.name, workload.rows(t.name))
            self.env = Environment(seed=seed)
            kw = {"smart": smart} if smart is not None else {}
            self.node = NodeRdma(VerbsHost(self.fab, self.env), "cn0", buffer_bytes=256 << 10, policy=policy, **kw)
            self.threads = [self.node.thread() for _ in range(threads)]
            self.clients = [self.system.client(self.fab, self.layout, t, self.options) for t in self.threads]
            for c in self.clients:
                c.set_codecs(workload.codecs())
                c.history = []
            self.cos = [[t.coroutine() for _ in range(coroutines)] for t in self.threads]
        except BaseException:
            self.fab.close()
            raise

    def close(self):
        self.fab.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    @property
    def client(self):
        return self.clients[0]

    @property
    def co(self):
        return self.cos[0][0]

    def run(self, body, *args, **kw):
        """Run one transaction on the first coroutine; its TxnOutcome."""
        p = self.env.process(self.client.run(self.co, body, *args, **kw))
        self.env.run()
        assert not p.is_alive
        return p.value

    def each(self, loop, audit_every_ns: int = 0, audits: list | None = None):
        """Run ``loop(client, co, i)`` in every coroutine; their return values (None if crashed).
        With ``audit_every_ns``, the system's ``audit`` (what must hold at every instant, e.g.
        FORD's unlocked primary = its backups) is sampled that often while they run, its findings
        appended to ``audits``."""
        procs = []
        i = 0
        for cl, cos in zip(self.clients, self.cos):
            for co in cos:
                procs.append(self.env.process(_guard(loop(cl, co, i))))
                i += 1
        audit = getattr(self.system, "audit", None)
        if audit_every_ns and audit is not None:
            def monitor():
                while any(p.is_alive for p in procs):
                    yield audit_every_ns
                    if audits is not None and len(audits) < 100:
                        audits.extend(audit(self.fab, self.layout))
            self.env.process(monitor())
        self.env.run()
        return [p.value for p in procs]

    def history(self) -> list:
        return [r for c in self.clients for r in c.history]

    def records(self, table: str) -> dict:
        return self.system.records(self.fab, self.layout, table)

    def all_records(self) -> dict:
        """``{table: records(table)}`` of every table of the workload."""
        return {t.name: self.records(t.name) for t in self.workload.tables()}

    def final_state(self) -> dict:
        """``{(table, key): (version, value bytes)}`` of the primaries."""
        from cluster.rack import primary_state
        return primary_state(self.all_records())

    def quiescent_problems(self) -> list[str]:
        """Locks left set, backups that differ from their primary."""
        return quiescent_problems(self.all_records())

    def statistics(self):
        from nodes.systems.api import node_statistics
        return node_statistics(c.statistics() for c in self.clients)


def quiescent_problems(records: dict) -> list[str]:
    """What must hold once no transaction runs, over ``{table: TxnSystem.records(...)}``: no lock
    word set, every backup equal to its primary (version, value, valid)."""
    out = []
    for table, recs in records.items():
        for key, reps in recs.items():
            for i, (version, lock, value, valid, _) in enumerate(reps):
                if lock:
                    out.append(f"{table}[{key}] replica {i} lock word {lock:#x} at quiescence")
                if (version, value, valid) != reps[0][:1] + reps[0][2:4]:
                    out.append(f"{table}[{key}] replica {i} (v{version}) differs from the primary (v{reps[0][0]})")
    return out


def _guard(gen):
    try:
        return (yield from gen)
    except ClientCrash:
        return None


class StressReport(NamedTuple):
    ok: bool
    commits: int
    aborts: int
    message: str
    serializability: object
    conservation: object
    problems: tuple


def smallbank_loop(workload: SmallBank, attempts: int, seed: int, outcomes: list):
    """The closed loop of one coroutine: ``attempts`` SmallBank transactions, each a new draw
    after an abort (FORD's benchmark)."""
    def loop(client, co, i):
        rng = random.Random(seed * 1_000_003 + i)
        for _ in range(attempts):
            name, body, args = workload.next(rng)
            out = yield from client.run(co, body, *args, name=name)
            outcomes.append(out)
    return loop


def smallbank_stress(system, options=None, *, accounts: int = 200, hot_accounts: int = 20, threads: int = 2,
                     coroutines: int = 4, attempts: int = 60, seed: int = 1, prefix: str | None = None,
                     audit_every_ns: int = 500, crash: tuple | None = None, power_fail: tuple = (),
                     **rig) -> StressReport:
    """SmallBank on ``threads x coroutines`` coordinators of ``system``; checked as the module says.
    ``crash = (failpoint, after)`` stops the coordinator that reaches the point for the
    ``after + 1``-th time; the system's ``recover`` then runs before the checks. ``power_fail``:
    memory nodes (``mn0`` = 0) whose persistent memory loses power once the run is over (needs
    ``memory_kind = "nvm"``); the system's ``recover_power_failure`` then runs, and the checks ask
    that no committed transaction was lost."""
    wl = SmallBank(accounts=accounts, hot_accounts=hot_accounts)
    with TxnRig(system, wl, options, threads=threads, coroutines=coroutines, seed=seed, prefix=prefix, **rig) as r:
        outcomes, audits, recovered = _run(r, wl, attempts, seed, audit_every_ns, crash)
        if power_fail:
            from shm.nvm import power_fail as fail
            lost = {f"mn{m}": fail(r.fab, f"mn{m}") for m in power_fail}
            recovered = {"lines lost": lost, **r.system.recover_power_failure(r.fab, r.layout)}
        final = r.final_state()
        ser = check_history(r.history(), final)
        total = sum(int.from_bytes(v, "little", signed=True) for (_, v) in final.values())
        created = sum(o.result for o in outcomes if o.committed)
        # a coordinator stopped mid-commit: recovery may roll its transaction forward or back
        in_flight = [h.result or 0 for h in r.history() if h.status == "unknown"]
        cons = check_total(wl.initial_total(), total, created, in_flight)
        problems = tuple(audits) + tuple(r.quiescent_problems())
        commits = sum(o.committed for o in outcomes)
        ok = ser.ok and cons.ok and not problems
        msg = (f"{commits} committed, {len(outcomes) - commits} aborted; {ser.message}; {cons.message}"
               + (f"; recovery {recovered}" if recovered else "")
               + (f"; {len(problems)} quiescence problems, first: {problems[0]}" if problems else ""))
        return StressReport(ok, commits, len(outcomes) - commits, msg, ser, cons, problems)


def _run(r, wl, attempts: int, seed: int, audit_every_ns: int, crash):
    """Run ``wl``'s closed loop on the rig (``crash``: a failpoint armed for the run), then the
    system's recovery after a crash; ``(outcomes, audits, what recovery did or None)``."""
    from shm import failpoints
    outcomes: list = []
    audits: list = []
    if crash:
        failpoints.arm(crash[0], "crash", after=crash[1])
    try:
        r.each(smallbank_loop(wl, attempts, seed, outcomes), audit_every_ns, audits)
    finally:
        if crash:
            failpoints.arm(crash[0], "off")
    recovered = None
    if crash and hasattr(r.system, "recover"):
        recovered = r.system.recover(r.fab, r.layout)
    return outcomes, audits, recovered


def tatp_stress(system, options=None, *, subscribers: int = 100, threads: int = 2, coroutines: int = 4,
                attempts: int = 60, seed: int = 1, prefix: str | None = None, audit_every_ns: int = 500,
                crash: tuple | None = None, **rig) -> StressReport:
    """TATP (workloads/tatp.py) on ``threads x coroutines`` coordinators of ``system``: the history
    checked serializable against the primaries' final state, TATP's invariants (each subscriber's
    secondary row names it; every live call_forwarding row has its special_facility row), the
    system's audit sampled during the run, and at quiescence no lock set and backups equal to their
    primaries. ``crash`` as for :func:`smallbank_stress`."""
    from workloads.tatp import Tatp, check_tatp
    wl = Tatp(subscribers=subscribers)
    with TxnRig(system, wl, options, threads=threads, coroutines=coroutines, seed=seed, prefix=prefix, **rig) as r:
        outcomes, audits, recovered = _run(r, wl, attempts, seed, audit_every_ns, crash)
        ser = check_history(r.history(), r.final_state())
        inv = check_tatp(r.all_records(), subscribers)
        problems = tuple(audits) + tuple(r.quiescent_problems()) + inv.problems
        commits = sum(o.committed for o in outcomes)
        reasons: dict = {}
        for o in outcomes:
            if not o.committed:
                reasons[o.reason] = reasons.get(o.reason, 0) + 1
        msg = (f"{commits} committed, {len(outcomes) - commits} aborted {reasons}; {ser.message}; {inv.message}"
               + (f"; recovery {recovered}" if recovered else "")
               + (f"; {len(problems)} problems, first: {problems[0]}" if problems else ""))
        return StressReport(ser.ok and not problems, commits, len(outcomes) - commits, msg, ser, inv, problems)


# -- on a rack of processes -----------------------------------------------------------------------

def smallbank_scenario(system: str, options: dict, *, seed: int = 1, accounts: int = 200, hot_accounts: int = 16,
                       compute: int = 2, threads: int = 2, coroutines: int = 4, run_ms: float = 0.3,
                       profile: str | None = None, profile_overrides: dict | None = None):
    """SmallBank on a rack of processes: ``compute`` compute nodes of ``threads x coroutines``
    coordinators, two memory nodes, one timed run; a node that dies (a coordinator killed
    mid-commit) leaves the others running (``on_node_death = "continue"``)."""
    from cluster.correctness.shapes import process_rack
    from cluster.scenario import scenario_from_dict
    data = {
        # FORD's undo logs take 2 compute nodes x 32 thread slices x 1 MiB on each memory node
        **process_rack(system, options, seed=seed, on_node_death="continue", compute=compute, threads=threads,
                       coroutines=coroutines, memory="128MiB", profile=profile, profile_overrides=profile_overrides),
        "workload": {"preset": "smallbank", "accounts": accounts, "hot_accounts": hot_accounts},
        "step": [{"action": "run", "duration_ms": run_ms}],
    }
    return scenario_from_dict(data, source=f"dmrack check {system}")


#: transaction rows recorded per compute node (a 0.3 ms run of 8 coordinators records ~400)
PROCESS_HISTORY_ROWS = 1 << 15


def smallbank_processes(system: str, options: dict, *, kill: tuple | None = None, **shape) -> StressReport:
    """:func:`smallbank_scenario` run as processes with the history recorded in shared memory
    (nodes/txn_history.py), judged as :func:`smallbank_stress` judges a co-located run: the merged
    history serializable against the primaries' final state, SmallBank's total (each attempt a
    killed coordinator left in flight may count or not), and quiescence. ``kill = (failpoint,
    after)``: compute node cn1's process exits (``os._exit``, as ``kill -9``) when one of its
    coordinators reaches ``failpoint`` for the ``after + 1``-th time, mid-commit; the rack's owner
    then runs the system's ``recover`` before anything is read."""
    import os
    from cluster.supervisor import Supervisor
    from nodes.txn_history import digest_state
    from shm import failpoints
    sup = Supervisor(smallbank_scenario(system, options, **shape), quiet=True, history=PROCESS_HISTORY_ROWS)
    wl = sup.compiled.workloads["default"]
    saved = os.environ.get(failpoints.ENV)
    if kill:
        os.environ[failpoints.ENV] = f"cn1:{kill[0]}=exit@{kill[1]}"      # inherited by the forked nodes
    try:
        status = sup.run()
    finally:
        if saved is None:
            os.environ.pop(failpoints.ENV, None)
        else:
            os.environ[failpoints.ENV] = saved
    run = sup.txn_run
    if run is None:
        deaths = "; ".join(f"{d.node} {d.how}" for d in sup.deaths) or sup.stop_reason
        return StressReport(False, 0, 0, f"the rack of processes ended without a history (status {status}): {deaths}",
                            None, None, ())
    problems = []
    if kill and not any(d.node == "cn1" for d in sup.deaths):
        problems.append(f"cn1 never reached {kill[0]} {kill[1] + 1} times: the kill was not tested")
    unexpected = [f"{d.node} {d.how}" for d in sup.deaths if not (kill and d.node == "cn1")]
    problems += [f"node died: {u}" for u in unexpected]
    final = run.final_state()
    ser = check_history(run.history, digest_state(final))
    total = sum(int.from_bytes(v, "little", signed=True) for (_, v) in final.values())
    committed = [r for r in run.history if r.status == "committed"]
    in_flight = [r.result or 0 for r in run.history if r.status == "unknown"]
    cons = check_total(wl.initial_total(), total, sum(r.result or 0 for r in committed), in_flight)
    problems = tuple(problems) + tuple(quiescent_problems(run.records))
    aborts = sum(r.status == "aborted" for r in run.history)
    ok = ser.ok and cons.ok and not problems
    msg = (f"{len(committed)} committed, {aborts} aborted, {len(in_flight)} in flight at the kill; {ser.message}; "
           f"{cons.message}" + (f"; recovery {run.recovered}" if run.recovered is not None else "")
           + (f"; {len(problems)} problems, first: {problems[0]}" if problems else ""))
    return StressReport(ok, len(committed), aborts, msg, ser, cons, problems)
