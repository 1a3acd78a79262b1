"""The event core's public low-level API (shm/sim/env.py, "The low-level API"), and that no
module outside the core (env.py, sync.py, router.py) uses its privates instead (issue 42).

The guard reads the source with ``ast``: an attribute named like a private member of
:class:`Environment`, :class:`Process` or :class:`Event` (read off the classes, so a member added
later is covered too), or one the core had before (``_debt``, ``_succeed_last``, ...), is an
offence when taken from anything but ``self``; a name that a module outside the core also uses
for its own attribute (``self._heap`` of a coroutine, which holds the queue from
``env.event_queue()``) only when taken from something called ``env``, ``environment`` or
``active_process``. Writing ``env.now`` or ``env.seq_now`` outside the core is one too
(``env.start_at(t)`` sets the clock of a node that joins a rack)."""
import ast
from heapq import heappush
from pathlib import Path

import pytest

from shm.sim.env import Environment, Event, Process

ROOT = Path(__file__).resolve().parents[1]
CORE = {"shm/sim/env.py", "shm/sim/sync.py", "shm/sim/router.py"}
FOLDERS = ("shm", "nodes", "cluster", "workloads", "scripts", "examples", "tests")
FORMER = {"_debt", "_charged", "_succeed_last", "_deferred", "_effects", "_writes", "_heap", "_next_seq"}
ENV_NAMES = {"env", "environment", "active_process"}
CLOCK = {"now", "seq_now"}


def _private_members() -> set[str]:
    names = set(FORMER)
    for cls in (Environment, Process, Event):
        for klass in cls.__mro__[:-1]:
            names.update(getattr(klass, "__slots__", ()))
            names.update(vars(klass))
    return {n for n in names if n.startswith("_") and not n.startswith("__")}


def _last_name(node) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def _sources():
    for folder in FOLDERS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if rel not in CORE:
                yield rel, ast.parse(path.read_text(), rel)


def offences(sources) -> list[str]:
    """``file:line: what`` for every use of the core's privates in ``sources`` ((path, ast) pairs)."""
    private = _private_members()
    sources = list(sources)
    own = {n.attr for _, tree in sources for n in ast.walk(tree)
           if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "self"}
    found = []
    for rel, tree in sources:
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr in private:
                base = _last_name(node.value)
                if base in ("self", "cls"):
                    continue
                if node.attr in own and base not in ENV_NAMES:
                    continue
                found.append(f"{rel}:{node.lineno}: {ast.unparse(node)}")
            targets = (node.targets if isinstance(node, ast.Assign)
                       else [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else [])
            for t in targets:
                if isinstance(t, ast.Attribute) and t.attr in CLOCK and _last_name(t.value) in ENV_NAMES:
                    found.append(f"{rel}:{t.lineno}: writes {ast.unparse(t)} (use env.start_at)")
    return sorted(found, key=lambda f: (f.split(":")[0], int(f.split(":")[1])))


def test_no_module_outside_the_event_core_touches_its_privates():
    assert offences(_sources()) == []


def test_the_guard_catches_what_the_callers_used_to_do():
    before = '''
def post(env, actor, co):
    heappush(env._heap, (t, env._next_seq(), f, x))
    if env._effects is not None:
        co.env._succeed_last(ev)
    actor._debt += 5
    actor._charged += 5
    ready = env.now + env.active_process._debt
    env._deferred = dr
    env.now = 7
    self.env.seq_now += 1
    co._heap = env._heap
    env.deferred_reads = dr
'''
    found = offences([("x.py", ast.parse(before))])
    assert [f.split(":")[1] for f in found] == ["3", "3", "4", "5", "6", "7", "8", "9", "10", "11", "12", "12"]
    assert all("x.py" in f for f in found) and "deferred_reads" not in "".join(found)


# -- the API itself (co-located, virtual time) ---------------------------------------------------

def test_event_queue_entries_are_schedule_entries():
    env = Environment()
    log = []
    heap, next_seq = env.event_queue()
    env.schedule(10, log.append, "schedule")
    heappush(heap, (10, next_seq(), log.append, "queue"))   # same time: runs after, in push order
    heappush(heap, (5, next_seq(), log.append, "early"))
    env.run()
    assert log == ["early", "schedule", "queue"] and env.now == 10


def test_withdraw_takes_a_timeout_out_of_the_queue_and_leaves_the_rest():
    env = Environment()
    log = []
    deadline = env.timeout(50)
    for t in (30, 10, 20, 10):
        env.schedule(t, log.append, t)
    assert env.withdraw(deadline) and not env.withdraw(deadline)   # gone; a second time: nothing
    env.run()
    assert log == [10, 10, 20, 30] and env.now == 30               # the clock ends at the last entry
    fired = env.timeout(5)
    env.run()
    assert not env.withdraw(fired) and env.now == 35                # a timeout that fired is not there


def test_take_seqs_draws_the_numbers_as_many_next_seq_calls_would():
    env, twin = Environment(), Environment()
    _, next_seq = env.event_queue()
    _, twin_seq = twin.event_queue()
    for n in (1, 2, 8, 3):
        first = env.take_seqs(n)
        assert [first + i for i in range(n)] == [twin_seq() for _ in range(n)]
    assert next_seq() == twin_seq()                 # and the next entry's number follows them


def test_debt_ns_is_what_was_charged_since_the_last_yield_and_may_be_raised_directly():
    env = Environment()
    seen = []

    def p(env):
        env.charge(100)
        seen.append(env.active_process.debt_ns)
        env.active_process.debt_ns += 50              # a core model's inlined charge
        yield 10                                      # resumes at now + debt = 150
        seen.append((env.now, env.active_process.debt_ns))
        env.charge(7)
        yield env.timeout(1)                          # the event at 151, the CPU free at 157
        seen.append(env.now)

    proc = env.process(p(env))
    env.run()
    assert seen == [100, (150, 0), 157] and proc.statistics().charged_ns == 157


def test_charged_ns_counts_the_debt_not_yet_paid():
    env = Environment()
    stats = []

    def p(env):
        env.charge(30)
        stats.append(env.active_process.statistics().charged_ns)
        yield 0

    env.process(p(env))
    env.run()
    assert stats == [30]


def test_start_at_sets_the_clock_of_a_fresh_environment_only():
    env = Environment()
    env.start_at(5_000)
    env.process(iter_once(env))
    env.run()
    assert env.now == 5_010
    with pytest.raises(RuntimeError, match="start_at"):
        env.start_at(6_000)
    with pytest.raises(ValueError, match="before now"):
        fresh = Environment()
        fresh.start_at(10)
        fresh.start_at(5)


def iter_once(env):
    yield 10


def test_succeed_last_runs_the_callbacks_at_once_when_nothing_else_is_due():
    env = Environment()
    ev = env.event()
    log = []
    ev.callbacks.append(lambda e: log.append((env.now, e.value)))
    env.schedule(20, env.succeed_last, ev)
    env.run()
    assert log == [(20, None)] and ev.processed and env.statistics().events == 2


def test_deferred_reads_are_tracked_in_sync_mode_only():
    env = Environment()
    env.track_deferred_reads(object())
    assert env.deferred_reads is None and not env.synced
