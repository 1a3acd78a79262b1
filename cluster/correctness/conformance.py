"""The conformance suite: what every KV system on the rack must do, checked the same way for all.

``nodes/systems/api.py`` states the contract in words (insert fails on an existing key, update on
a missing one, values come back exactly, ...). This module states it in code, once, so that a new
system gets the whole suite by being registered in ``nodes.systems.BUILTIN``:
``tests/test_conformance.py`` parametrises over every registered system and every check here.

The checks are listed in one declared table, ``CHECKS`` (and ``HEAVY_CHECKS`` for ``dmrack check
--heavy``), name -> check, in the order the suite runs them: the style of every registry of dmrack
(``shm/targets.py``). Each check there is a function ``check(system, options=None) -> None`` taking the System
*class* (what ``nodes.systems.get_system`` returns) and optionally system options (checked and
filled by the system; ``dmrack check --option`` passes them, e.g. RACE's deliberate
``fault``). It returns on success and raises
:class:`ConformanceFailure` (an ``AssertionError``, so pytest shows it as a failed assertion)
whose message starts with the check's name and says what went wrong, with the key, the value
and the operation. Any other exception escaping a check (a ``SystemGaveUp``, a crashed
coroutine) is turned into a ``ConformanceFailure`` of that check too: to the suite a system that
crashes is a system that fails.

Why these checks, and how they are sized:

* *semantics* (``single_client``, ``sequential_model``): every result of every operation on one
  coroutine, including the failure paths (duplicate insert, update/delete of a missing key,
  re-insert after delete, both paths of put), and scans where the system offers them
  (``UnsupportedOperation`` where it does not), then a few hundred random operations compared
  with a dict;
* *values* (``large_values``, ``no_torn_values``): values from 16 B to well over a cache line
  round-trip exactly and survive changes of size, and a get racing with many updates of one key
  with large values returns exactly one written value, never a mix of two (values are
  ``workloads.keys.value_bytes``: every 16 bytes name the key and the version, so any tear is
  visible);
* *concurrency* (``insert_race``, ``load_then_read``, ``history_uniform``,
  ``history_zipfian``): one key inserted and deleted by everyone at once has exactly one winner
  each time; a parallel load loses nothing; and a run of ``workloads.stress.StressWorkload``
  (gets, inserts, updates and deletes over 64 contended keys, many threads x coroutines on two
  compute nodes) on a co-located rack records a history that ``cluster.correctness.checker.check`` must find
  linearizable;
* *hygiene* (``client_statistics``): ``KVClient.statistics()`` is None or an immutable record.

Everything runs co-located (one process, one scheduler, virtual time): a check is deterministic
for a system, so a failure reproduces exactly, and sizes are chosen so the whole suite takes a
few seconds per system on a small machine. Rigs are context managers that close (unlink) their
shared memory on every path out.

The history checks need the stress workload inside the rack. A scenario file can only name YCSB
workloads, so the check builds a YCSB scenario of the same shape (key count, value size, steps)
and swaps ``StressWorkload`` into the compiled rack before running it (:func:`stress_rack`); the
load step's count is set explicitly in the scenario, so nothing computed at compile time from the
placeholder workload differs from what the stress workload would have given.
"""

from __future__ import annotations

import contextlib
import contextvars
import random
import time
import traceback
from typing import Callable, Iterable, NamedTuple

from cluster.correctness.shapes import (  # noqa: F401  (DEFAULT_PROFILE re-exported)
    DEFAULT_PROFILE, HEAVY, StressShape, stress_mix, stress_options)
from cluster.scenario import with_rack_tables
from shm.sim.env import Environment, ProcessError
from nodes.systems import get_system
from nodes.systems.api import UnsupportedOperation
from shm.coro import NodeRdma
from shm.fabric import Fabric, NodeSpec
from shm.profile import load_profile
from shm.segment import new_prefix
from shm.verbs import VerbsHost
from workloads.keys import decode_value, key_bytes, value_bytes

__all__ = ["ConformanceFailure", "CheckOutcome", "Rig", "RigStats", "rig", "stress_rack", "CHECKS", "run_suite"]


class ConformanceFailure(AssertionError):
    """A system broke the contract; the message names the check and what went wrong."""


class CheckOutcome(NamedTuple):
    name: str
    passed: bool
    detail: str             # "" when passed; the failure message otherwise
    ops_checked: int        # KV operations issued and checked (rig ops + history ops)
    seconds: float = 0.0    # real time the check took (for people; nothing asserts on it)


# The operation tally of the check being run by run_suite (None outside it): rigs and history
# checks add what they checked. A context variable rather than a return value so that a check
# stays "return None or raise", the shape a test calls directly.
_TALLY: contextvars.ContextVar[list | None] = contextvars.ContextVar("conformance_tally", default=None)
# The rigs' profile, DEFAULT_PROFILE, is declared in shapes.py with the stress the checks share.
_PROFILE: contextvars.ContextVar[str] = contextvars.ContextVar("conformance_profile", default=DEFAULT_PROFILE)


class Scale(NamedTuple):
    """A smaller run of a check (``shrink.py``: a failing check run again smaller): at most
    ``threads`` threads and ``coroutines`` coroutines per thread, ``keys`` keys, and ``length``
    times its rounds or virtual time. None keeps the check's own. Checks that take it:
    :data:`SHRINKABLE`."""
    threads: int | None = None
    coroutines: int | None = None
    keys: int | None = None
    length: float = 1.0

    def text(self) -> str:
        """``threads=2,coroutines=1,length=0.25`` (what ``dmrack check --scale`` takes)."""
        parts = [f"{k}={v}" for k, v in zip(self._fields, self) if v is not None and not (k == "length" and v == 1.0)]
        return ",".join(parts) or "full"

    @classmethod
    def parse(cls, text: str) -> "Scale":
        """``--scale threads=2,coroutines=1,keys=8,length=0.5``; a bad one is a ValueError of one line."""
        out = {}
        for part in filter(None, (p.strip() for p in text.split(","))):
            k, eq, v = part.partition("=")
            if not eq or k not in cls._fields:
                raise ValueError(f"--scale {text!r}: {part!r} is not one of {', '.join(f + '=N' for f in cls._fields)}")
            try:
                out[k] = float(v) if k == "length" else int(v)
            except ValueError:
                raise ValueError(f"--scale {text!r}: {k} must be a number, got {v!r}") from None
            if out[k] <= 0:
                raise ValueError(f"--scale {text!r}: {k} must be positive, got {v}")
        return cls(**out)

    def threads_of(self, n: int) -> int:
        """A check's ``n`` threads at this scale."""
        return self._count("threads", n)

    def coroutines_of(self, n: int) -> int:
        return self._count("coroutines", n)

    def keys_of(self, n: int) -> int:
        return self._count("keys", n)

    def length_of(self, x):
        """A check's rounds or virtual time ``x`` at this scale."""
        self._note("length", 1.0)
        return x if self.length == 1.0 else x * self.length

    def _count(self, field: str, n: int) -> int:
        self._note(field, n)
        v = getattr(self, field)
        return n if v is None else max(1, min(n, v))

    @staticmethod
    def _note(field: str, full) -> None:
        """Record the check's full size of ``field`` (run_suite(sizes=...)): shrinking halves it."""
        sizes = _SIZES.get()
        if sizes is not None:
            sizes.setdefault(field, full)


# The scale of the check being run (shrinking, ``--scale``): the full run unless set.
_SCALE: contextvars.ContextVar[Scale] = contextvars.ContextVar("conformance_scale", default=Scale())
# The process stress's shape (``dmrack check``: quick, heavy, chaos), which the co-located
# reproductions of a process-stress failure (STRESS_CHECKS) run: StressShape() unless set.
_STRESS_SHAPE: contextvars.ContextVar[StressShape | None] = contextvars.ContextVar("conformance_stress_shape",
                                                                                   default=None)
# run_suite(sizes=...): the dict the checks that take a Scale record their full sizes in.
_SIZES: contextvars.ContextVar[dict | None] = contextvars.ContextVar("conformance_sizes", default=None)
# ``dmrack check --only ... --trace FILE``: [path, bounds, what was written] -- the first history
# check run records its rack (shm/sim/trace.py) with the operations of its failing keys.
_TRACE: contextvars.ContextVar[list | None] = contextvars.ContextVar("conformance_trace", default=None)


def _tally(n: int) -> None:
    t = _TALLY.get()
    if t is not None:
        t[0] += int(n)


def _expect(cond, message: str) -> None:
    if not cond:
        raise ConformanceFailure(message)


def _short(v, limit: int = 48) -> str:
    """A value for a message: short values whole, long ones by length, head and version."""
    if v is None:
        return "None"
    if isinstance(v, (bytes, bytearray, memoryview)):
        v = bytes(v)
        if len(v) <= limit:
            return repr(v)
        d = decode_value(v)
        tag = f" (key {d[0]}, version {d[1]})" if d else " (not a value_bytes value: torn or foreign)"
        return f"{len(v)} B {v[:16]!r}...{tag}"
    return repr(v)


# -- the rig ---------------------------------------------------------------------------------------

class RigStats(NamedTuple):
    system: str
    threads: int
    coroutines: int
    memory_nodes: int
    ops: int                # KV calls issued through the rig's clients
    virtual_ns: int


class _Counted:
    """A client that counts the KV calls made through it (the rig's ``ops``); everything else,
    ``statistics()`` included, is the wrapped client's."""

    def __init__(self, client, rig: "Rig"):
        self.wrapped = client             # the system's own client (a script may call it uncounted)
        self._rig = rig

    def __getattr__(self, name):
        return getattr(self.wrapped, name)

    def _call(self, name, co, *args):
        self._rig.ops += 1
        return (yield from getattr(self.wrapped, name)(co, *args))

    def get(self, co, key):
        return self._call("get", co, key)

    def insert(self, co, key, value):
        return self._call("insert", co, key, value)

    def update(self, co, key, value):
        return self._call("update", co, key, value)

    def put(self, co, key, value):
        return self._call("put", co, key, value)

    def delete(self, co, key):
        return self._call("delete", co, key)

    def scan(self, co, start, count):
        return self._call("scan", co, start, count)


class Rig:
    """A system set up on a fresh fabric with one compute node of ``threads`` x ``coroutines``
    (built by :func:`rig`). ``clients[t]`` is thread t's client, ``cos[t][c]`` its coroutines."""

    def __init__(self, system, fabric: Fabric, layout: dict, options: dict, env: Environment, node: NodeRdma,
                 coroutines: int, memory_nodes: int):
        self.system = system
        self.memory_nodes = memory_nodes
        self.fabric = fabric
        self.layout = layout
        self.options = options
        self.env = env
        self.node = node
        self.ops = 0
        self.threads = list(node.threads)
        self.clients = [_Counted(system.client(fabric, layout, t, options), self) for t in self.threads]
        self.cos = [[t.coroutine() for _ in range(coroutines)] for t in self.threads]

    @property
    def client(self):
        return self.clients[0]

    @property
    def co(self):
        return self.cos[0][0]

    def run(self, gen):
        """Run one generator to completion; its return value."""
        p = self.env.process(gen, name="conformance")
        self._drain()
        _expect(not p.is_alive, f"an operation never returned (virtual time {self.env.now} ns, no event left): "
                                f"a lost completion or a coroutine waiting on itself")
        return p.value

    def each(self, body: Callable) -> list:
        """Run ``body(client, co, i)`` in every coroutine at once (i = global coroutine number);
        their return values, in order."""
        procs = []
        for cl, cos in zip(self.clients, self.cos):
            for co in cos:
                procs.append(self.env.process(body(cl, co, len(procs)), name=f"conformance{len(procs)}"))
        self._drain()
        stuck = [i for i, p in enumerate(procs) if p.is_alive]
        _expect(not stuck, f"coroutines {stuck[:8]} never finished (virtual time {self.env.now} ns, no event left)")
        return [p.value for p in procs]

    def op(self, name: str, *args):
        """One KV call on thread 0, coroutine 0."""
        return self.run(getattr(self.client, name)(self.co, *args))

    def _drain(self) -> None:
        try:
            self.env.run()
        except ProcessError as e:
            cause = e.__cause__
            if isinstance(cause, ConformanceFailure):
                raise cause from None
            raise ConformanceFailure(f"an operation raised {type(cause).__name__ if cause else 'an error'}: "
                                     f"{cause if cause else e}") from e

    def statistics(self) -> RigStats:
        return RigStats(self.system.name, len(self.threads), len(self.cos[0]) if self.cos else 0,
                        self.memory_nodes, self.ops, self.env.now)


@contextlib.contextmanager
def rig(system, *, compute_threads: int = 1, coroutines: int = 1, memory_nodes: int = 2,
        profile: str | None = None, options: dict | None = None, capacity: int = 10_000, seed: int = 1,
        memory_bytes: int = 64 << 20, prefix: str | None = None):
    """A co-located rig of ``system`` (a System class): one compute node ``cn0`` with
    ``compute_threads`` x ``coroutines``, ``memory_nodes`` memory nodes of ``memory_bytes``, the
    system set up for ``capacity`` keys with ``options`` (checked and filled by the system).
    Deterministic for ``seed``. The fabric is closed (its segments unlinked) on every path out."""
    profile = profile or _PROFILE.get()
    if getattr(system, "servers", None):
        # a service: its servers run as actors of a co-located rack (devices, steering, datagrams)
        yield from _service_rig(system, compute_threads=compute_threads, coroutines=coroutines,
                                memory_nodes=memory_nodes, profile=profile, options=options, capacity=capacity,
                                seed=seed, memory_bytes=memory_bytes)
        return
    opts = system.check_options(dict(options or {}), where=f"conformance rig of {system.name!r}")
    specs = [NodeSpec("cn0", "compute", 32 << 20)] + [NodeSpec(f"mn{i}", "memory", memory_bytes)
                                                       for i in range(memory_nodes)]
    fabric = Fabric.create(load_profile(profile), specs, prefix=prefix or new_prefix(), private=True)
    r = None
    try:
        mns = list(range(1, memory_nodes + 1))
        for m in mns:
            fabric.expose(m)
        if getattr(system, "expose_compute", False):
            fabric.expose(0)                       # cn0, as the rack does (System.expose_compute)
        layout = system.setup(fabric, mns, opts, capacity)
        env = Environment(seed=seed)
        node = NodeRdma(VerbsHost(fabric, env), "cn0")
        for _ in range(compute_threads):
            node.thread()
        r = Rig(system, fabric, layout, opts, env, node, coroutines, memory_nodes)
        yield r
    finally:
        if r is not None:
            _tally(r.ops)
        fabric.close()


def _service_rig(system, *, compute_threads, coroutines, memory_nodes, profile, options, capacity, seed,
                 memory_bytes):
    """The rig of a system with server actors: a co-located rack's state (its spec gets the tables
    the system asks for, ``System.rack_tables``), the actors started, one compute node's clients."""
    from cluster.rack import RackState, compile_scenario
    from cluster.scenario import scenario_from_dict
    from nodes.actors import actor_contexts, rack_udp, start_actors
    d = with_rack_tables(system, {
        "rack": {"name": f"conformance-{system.name}", "profile": profile, "seed": seed},
        "compute": {"count": 1, "threads": compute_threads, "coroutines": coroutines, "memory": "32MiB"},
        "memory": {"count": memory_nodes, "memory": memory_bytes},
        "system": {"name": system.name, **(options or {})},
        "workload": {"preset": "a", "recordcount": capacity}})
    compiled = compile_scenario(scenario_from_dict(d, source=f"conformance rig of {system.name!r}"))
    compiled.system = system
    r = None
    with RackState.create(compiled, processes=False) as state:
        try:
            env = Environment(seed=seed)
            host = VerbsHost(state.fabric, env)
            udp = rack_udp(state, host)
            start_actors(system, actor_contexts(state, env, host, udp=udp))
            node = NodeRdma(host, "cn0")
            node.udp = udp
            for _ in range(compute_threads):
                node.thread()
            r = Rig(system, state.fabric, state.layout, compiled.options, env, node, coroutines, memory_nodes)
            yield r
        finally:
            if r is not None:
                _tally(r.ops)


# -- running the stress workload on a co-located rack ---------------------------------------------

def stress_rack(system, workload, *, compute: int = 2, threads: int = 2, coroutines: int = 4,
                load: int | None = None, duration_ms: float = 0.5, seed: int = 7, profile: str | None = None,
                options: dict | None = None, history: int = 1 << 16, trace=None):
    """A ``cluster.rack.ColocatedRack`` (not yet run) that loads ``load`` records (default: half
    the key space) and then runs ``workload`` (a ``StressWorkload``) for ``duration_ms`` virtual
    ms, recording up to ``history`` operations per compute node. ``system`` (a class) replaces
    the registry's class of the same name, so a subclass can be checked without registering it."""
    from cluster.rack import ColocatedRack
    from cluster.scenario import scenario_from_dict
    load = workload.recordcount // 2 if load is None else load
    profile = profile or _PROFILE.get()
    # inserts, not a bulk load: the suite checks the system's own insert path
    steps = ([{"action": "load", "count": load, "bulk": False}] if load else []) + [{"action": "run", "duration_ms": duration_ms}]
    # A YCSB placeholder of the same key count and sizes: what the scenario schema can express.
    d = {
        "rack": {"name": f"conformance-{system.name}", "profile": profile, "seed": seed},
        "compute": {"count": compute, "threads": threads, "coroutines": coroutines, "memory": "16MiB"},
        "memory": {"count": 2, "memory": "64MiB"},
        "system": {"name": system.name, **(options or {})},
        "workload": {"preset": "a", "recordcount": workload.recordcount, "keysize": workload.key_size,
                     "valuesize": workload.value_size},
        "step": steps,
    }
    d = with_rack_tables(system, d)
    rack = ColocatedRack(scenario_from_dict(d, source=f"conformance {system.name}"), history=history, trace=trace)
    c = rack.compiled
    c.system = system
    c.workloads["default"] = workload
    # Nothing else compiled from the placeholder needs changing: the load count was given
    # explicitly, the suite gives a workload with scans only to a system with supports_scan (the
    # compile-time scan check saw the placeholder), and the capacity (recordcount + expected new
    # keys) is the same for the stress workload, whose inserts never add keys beyond recordcount.
    c.capacity = max(c.capacity, workload.recordcount + workload.expected_new_keys + 1024)
    return rack


# -- the checks ------------------------------------------------------------------------------------

def _named(checks: dict) -> dict:
    """The checks of a table (name -> function), each wrapped so that any failure escaping it
    becomes a ConformanceFailure whose message starts with its name."""
    return {name: _wrapped(name, fn) for name, fn in checks.items()}


def _wrapped(name: str, fn: Callable) -> Callable:
    def check(system, options: dict | None = None) -> None:
        try:
            fn(system, dict(options or {}))
        except ConformanceFailure as e:
            raise ConformanceFailure(f"{name} [{system.name}]: {e}") from e
        except Exception as e:          # a crash is a failure of the check it happened in
            raise ConformanceFailure(f"{name} [{system.name}]: {type(e).__name__}: {e}") from e
    check.__name__ = f"check_{name}"
    check.__qualname__ = check.__name__
    check.__doc__ = fn.__doc__
    check.check_name = name
    return check


def _k(i: int) -> bytes:
    return key_bytes(i, 8)


def _v(kid: int, version: int, size: int = 32) -> bytes:
    return value_bytes(kid, version, size)


def check_single_client(system, options) -> None:
    """Every result of every operation on one coroutine, failure paths included; scans."""
    with rig(system, options=options) as r:
        k, kid = _k(101), 101

        def op(name, *args):
            return r.op(name, *args)

        def same(what, got, want):
            _expect(got == want, f"{what}: returned {_short(got)}, expected {_short(want)}")

        same("get of a key never inserted", op("get", k), None)
        same("insert of a new key", op("insert", k, _v(kid, 1)), True)
        same("get after insert", op("get", k), _v(kid, 1))
        same("insert of an existing key (duplicate)", op("insert", k, _v(kid, 2)), False)
        same("get after a failed duplicate insert (must keep the first value)", op("get", k), _v(kid, 1))
        same("update of an existing key", op("update", k, _v(kid, 3)), True)
        same("get after update", op("get", k), _v(kid, 3))
        same("update of a missing key", op("update", _k(102), _v(102, 4)), False)
        same("get after a failed update of a missing key", op("get", _k(102)), None)
        same("delete of an existing key", op("delete", k), True)
        same("get after delete", op("get", k), None)
        same("delete of a deleted key", op("delete", k), False)
        same("delete of a key never inserted", op("delete", _k(103)), False)
        same("update of a deleted key", op("update", k, _v(kid, 5)), False)
        same("get after a failed update of a deleted key", op("get", k), None)
        same("re-insert after delete", op("insert", k, _v(kid, 6)), True)
        same("get after re-insert", op("get", k), _v(kid, 6))
        same("put (upsert) of an existing key", op("put", k, _v(kid, 7)), None)
        same("get after put of an existing key", op("get", k), _v(kid, 7))
        same("put (upsert) of a missing key", op("put", _k(104), _v(104, 8)), None)
        same("get after put of a missing key", op("get", _k(104)), _v(104, 8))
        # keys that differ only in their last byte, and in their first: no prefix confusion
        a, b = _k(0x0100000000000001), _k(0x0200000000000001)
        same("insert of a key", op("insert", a, _v(1, 9)), True)
        same("insert of a key differing from the previous one in its last byte", op("insert", b, _v(2, 10)), True)
        same("get of the first of two similar keys", op("get", a), _v(1, 9))
        same("get of the second of two similar keys", op("get", b), _v(2, 10))

        if system.supports_scan:
            _scan_semantics(r, same)
        else:
            def scan():
                try:
                    yield from r.client.scan(r.co, _k(0), 10)
                except UnsupportedOperation:
                    return "unsupported"
                return "returned"
            same("scan on a system with supports_scan = False (must raise UnsupportedOperation)", r.run(scan()),
                 "unsupported")


def _scan_semantics(r: Rig, same) -> None:
    """Scans on a system that offers them: key order (bytes order), bounds, count, deleted keys
    absent, values exact."""
    base = 5000
    ids = [base + 7 * i for i in range(24)]
    live = {}
    for i in ids:
        same(f"insert of scan key {i}", r.op("insert", _k(i), _v(i, 1)), True)
        live[_k(i)] = _v(i, 1)
    for i in ids[3::5]:
        same(f"delete of scan key {i}", r.op("delete", _k(i)), True)
        del live[_k(i)]
    for i in ids[2::5]:
        same(f"update of scan key {i}", r.op("update", _k(i), _v(i, 2)), True)
        live[_k(i)] = _v(i, 2)
    # the other keys the single-client check left behind count too
    for k in (_k(101), _k(104), _k(0x0100000000000001), _k(0x0200000000000001)):
        got = r.op("get", k)
        if got is not None:
            live[k] = got
    order = sorted(live)
    starts = [order[0], order[len(order) // 2], _k(ids[3]), _k(ids[10] + 1), b"\x00" * 8, b"\xff" * 8]
    for start in starts:
        for count in (1, 5, len(order) + 3):
            want = [(k, live[k]) for k in order if k >= start][:count]
            got = r.op("scan", start, count)
            got = [(bytes(k), bytes(v)) for k, v in got]
            keys = [k for k, _ in got]
            _expect(all(x < y for x, y in zip(keys, keys[1:])),
                    f"scan({_short(start)}, {count}): keys not strictly increasing: {[_short(k) for k in keys]}")
            _expect(all(k >= start for k in keys),
                    f"scan({_short(start)}, {count}): returned a key below the start: {[_short(k) for k in keys]}")
            _expect(len(got) <= count, f"scan({_short(start)}, {count}): returned {len(got)} pairs")
            _expect(got == want, f"scan(key {_kid(start)}, {count}): returned {_pairs(got)}, expected {_pairs(want)}")
    same("scan with count 0", [tuple(p) for p in r.op("scan", order[0], 0)], [])


def _kid(key: bytes) -> int:
    return int.from_bytes(bytes(key)[:8], "little")


def _pairs(pairs) -> str:
    """Scan results for a message: (key id, version) per pair, keys in the order returned."""
    out = []
    for k, v in pairs[:12]:
        d = decode_value(v)
        out.append(f"({_kid(k)}, {'v%d' % d[1] if d else _short(v)})")
    return "[" + ", ".join(out) + (", ..." if len(pairs) > 12 else "") + "]"


def check_sequential_model(system, options) -> None:
    """600 random operations on 12 keys from one coroutine, each compared with a dict."""
    rng = random.Random(20240607)
    model: dict[bytes, bytes] = {}
    with rig(system, options=options) as r:
        def body():
            version = 0
            for step in range(600):
                kid = rng.randrange(12) + 900
                k = _k(kid)
                kind = rng.choice(("get", "get", "insert", "update", "put", "delete"))
                version += 1
                v = _v(kid, version, rng.choice((16, 24, 40, 64, 100, 300)))
                if kind == "get":
                    got = yield from r.client.get(r.co, k)
                    want = model.get(k)
                elif kind == "insert":
                    got = yield from r.client.insert(r.co, k, v)
                    want = k not in model
                    if want:
                        model[k] = v
                elif kind == "update":
                    got = yield from r.client.update(r.co, k, v)
                    want = k in model
                    if want:
                        model[k] = v
                elif kind == "put":
                    got = yield from r.client.put(r.co, k, v)
                    want = None
                    model[k] = v
                else:
                    got = yield from r.client.delete(r.co, k)
                    want = model.pop(k, None) is not None
                if got != want:
                    return (f"operation #{step} {kind} of key {kid}: returned {_short(got)}, expected "
                            f"{_short(want)} (a dict given the same operations)")
            for k, v in model.items():
                got = yield from r.client.get(r.co, k)
                if got != v:
                    return f"final get of key {int.from_bytes(k, 'little')}: {_short(got)}, expected {_short(v)}"
            return None

        problem = r.run(body())
        _expect(problem is None, problem)


def check_large_values(system, options) -> None:
    """Values from 16 B to 1000 B round-trip exactly, through inserts and updates that change
    their size (a block that grows past a cache line, and shrinks back)."""
    sizes = (16, 63, 64, 65, 128, 200, 513, 1000)
    with rig(system, options=options) as r:
        for j, size in enumerate(sizes):
            kid = 3000 + j
            v = _v(kid, 1, size)
            _expect(r.op("insert", _k(kid), v) is True, f"insert of a {size} B value was refused")
            got = r.op("get", _k(kid))
            _expect(got == v, f"a {size} B value came back as {_short(got)}")
        # every key changes size: each value takes the next size (the largest wraps to the smallest)
        for j, size in enumerate(sizes):
            kid = 3000 + j
            new = sizes[(j + 3) % len(sizes)]
            v = _v(kid, 2, new)
            _expect(r.op("update", _k(kid), v) is True, f"update of key {kid} from {size} B to {new} B refused")
            got = r.op("get", _k(kid))
            _expect(got == v, f"key {kid} updated from {size} B to {new} B came back as {_short(got)}")
        for j, size in enumerate(sizes):
            kid = 3000 + j
            v = _v(kid, 3, size)
            r.op("put", _k(kid), v)
            got = r.op("get", _k(kid))
            _expect(got == v, f"key {kid} put back to {size} B came back as {_short(got)}")


def check_no_torn_values(system, options) -> None:
    """4 threads x 4 coroutines update one key with 1000 B and 200 B values and read it back
    between updates: every get returns exactly one written value (never a mix of two, never a
    value of the wrong size for its version) and every update succeeds."""
    kid = 777
    k = _k(kid)
    sc = _SCALE.get()
    rounds = max(1, round(sc.length_of(6)))
    with rig(system, compute_threads=sc.threads_of(4), coroutines=sc.coroutines_of(4), options=options) as r:
        written = {0: _v(kid, 0, 1000)}
        _expect(r.op("insert", k, written[0]) is True, "insert of the shared key was refused")

        def body(cl, co, i):
            bad = []
            size = 1000 if i % 2 == 0 else 200
            for j in range(rounds):
                version = 1 + i * rounds + j
                v = _v(kid, version, size)
                written[version] = v
                ok = yield from cl.update(co, k, v)
                if ok is not True:
                    bad.append(f"coroutine {i}: update of the existing shared key returned {ok!r}")
                got = yield from cl.get(co, k)
                if got is None:
                    bad.append(f"coroutine {i}: get of the shared key (never deleted) returned None")
                    continue
                d = decode_value(got, kid)
                if d is None or written.get(d[1]) != bytes(got):
                    bad.append(f"coroutine {i}: get returned a value no update wrote: {_short(got)}")
            return bad

        bad = [b for res in r.each(body) for b in res]
        _expect(not bad, f"{len(bad)} bad result(s); first: " + "; ".join(bad[:3]))
        final = r.op("get", k)
        _expect(final is not None and bytes(final) in set(written.values()),
                f"after the updates the key holds {_short(final)}, which no update wrote")


def check_insert_race(system, options) -> None:
    """4 threads x 4 coroutines insert one key at the same virtual instant (and then staggered):
    exactly one insert wins and its value is the one stored; then all delete it at once: exactly
    one delete wins and the key is gone."""
    sc = _SCALE.get()
    with rig(system, compute_threads=sc.threads_of(4), coroutines=sc.coroutines_of(4), seed=3, options=options) as r:
        for rnd, stagger in enumerate((0, 3000, 0)):
            kid = 4000 + rnd
            k = _k(kid)

            def ins(cl, co, i):
                if stagger:
                    yield r.env.rng.randrange(0, stagger)
                return (yield from cl.insert(co, k, _v(kid, i + 1, 48)))

            res = r.each(ins)
            winners = [i for i, ok in enumerate(res) if ok is True]
            _expect(len(winners) == 1, f"round {rnd}: {len(res)} concurrent inserts of key {kid}: "
                                       f"{len(winners)} returned True (coroutines {winners[:8]}), expected exactly 1")
            got = r.op("get", k)
            _expect(got == _v(kid, winners[0] + 1, 48),
                    f"round {rnd}: coroutine {winners[0]} won the insert race but key {kid} holds {_short(got)}")

            def dele(cl, co, i):
                if stagger:
                    yield r.env.rng.randrange(0, stagger)
                return (yield from cl.delete(co, k))

            res = r.each(dele)
            _expect(res.count(True) == 1, f"round {rnd}: {len(res)} concurrent deletes of key {kid}: "
                                          f"{res.count(True)} returned True, expected exactly 1")
            got = r.op("get", k)
            _expect(got is None, f"round {rnd}: key {kid} deleted by everyone still reads {_short(got)}")


def check_load_then_read(system, options) -> None:
    """2,000 keys inserted by 4 threads x 4 coroutines, then every key read (by a different
    coroutine than its inserter) with exactly its value."""
    n = 2000
    with rig(system, compute_threads=4, coroutines=4, capacity=4 * n, options=options) as r:
        workers = sum(len(c) for c in r.cos)

        def load(cl, co, i):
            failed = []
            for kid in range(i, n, workers):
                ok = yield from cl.insert(co, _k(kid), _v(kid, 1, 24 + kid % 5 * 8))
                if ok is not True:
                    failed.append(kid)
            return failed

        failed = [kid for res in r.each(load) for kid in res]
        _expect(not failed, f"{len(failed)} of {n} inserts of distinct new keys failed (keys {failed[:8]})")

        def read(cl, co, i):
            bad = []
            for kid in range((i + 5) % workers, n, workers):
                got = yield from cl.get(co, _k(kid))
                if got != _v(kid, 1, 24 + kid % 5 * 8):
                    bad.append((kid, got))
            return bad

        bad = [b for res in r.each(read) for b in res]
        _expect(not bad, f"{len(bad)} of {n} loaded keys read wrong; first: "
                         + ", ".join(f"key {kid} -> {_short(v)}" for kid, v in bad[:3]))


#: The history checks' load: 64 keys, 48-byte values, 2 compute nodes x 2 threads x 4 coroutines, 1 ms.
HISTORY = StressShape(keys=64, value_size=48, threads=2, coroutines=4, run_ms=1.0)
#: How much longer the history checks run when the rigs' profile has a [chaos] table: its delays
#: halved the operations a 1 ms run completes (marlin, rolex, smart-bt fell under 500).
CHAOS_RUN_FACTOR = 3


def _history_check(system, options: dict, distribution: str, shape: StressShape = HISTORY) -> None:
    """A StressWorkload of ``shape`` (``run_ms``: the run's length) on a co-located rack of two
    compute nodes; the recorded history must be linearizable. A system with ``supports_scan``
    runs the mix with scans (``shapes.stress_mix``): their results are checked too."""
    from cluster.correctness.checker import check
    from workloads.stress import StressWorkload
    if shape is HISTORY and hasattr(system, "history_stress"):
        shape = system.history_stress(shape, options)     # a design whose ops are slower needs longer
    if load_profile(_PROFILE.get()).chaos is not None:
        # under chaos (dmrack check --chaos) verbs and resumptions take longer: run longer for
        # as many operations as without
        shape = shape._replace(run_ms=shape.run_ms * CHAOS_RUN_FACTOR)
    options = stress_options(system, options, shape)       # a system's own options for its stresses
    sc = _SCALE.get()
    shrunk = sc != Scale()
    shape = shape._replace(threads=sc.threads_of(shape.threads), coroutines=sc.coroutines_of(shape.coroutines),
                           keys=sc.keys_of(shape.keys), run_ms=sc.length_of(shape.run_ms))
    mix = stress_mix(system)
    wl = StressWorkload(shape.keys, mix=mix, distribution=distribution, value_size=shape.value_size,
                        mixed_sizes=shape.mixed_sizes)
    tr = _TRACE.get()
    bounds = tr[1] if tr is not None and tr[2] is None else None
    rack = stress_rack(system, wl, compute=2, threads=shape.threads, coroutines=shape.coroutines,
                       duration_ms=shape.run_ms, options=options, trace=bounds)
    results = rack.run()
    ops = rack.history_ops
    _tally(len(ops))
    writes = sum(1 for op in ops if op.kind not in ("get", "scan") and op.ok)
    if not shrunk:
        # a shrunk run may be small: it is there to fail by a violation, not to exercise every path
        _expect(len(ops) > 500 and writes > 100,
                f"the stress run recorded only {len(ops)} operations ({writes} successful writes): too few to check")
        kinds = {(op.kind, op.ok) for op in ops if op.kind not in ("get", "scan")}
        for want in (("insert", True), ("insert", False), ("update", True), ("update", False), ("delete", True),
                     ("delete", False)):
            _expect(want in kinds, f"the stress run never saw a {want[0]} that "
                                   f"{'succeeded' if want[1] else 'failed'}: the workload did not exercise that path")
        if mix is not None:
            _expect(any(len(op.result) > 1 for op in ops if op.kind == "scan"),
                    "the stress run recorded no scan returning more than one key: the workload did not exercise "
                    "scans")
    unsupported = sum(n.unsupported for n in rack.nodes)
    _expect(unsupported == 0, f"{unsupported} operations raised UnsupportedOperation")
    del results
    result = check(ops, time_limit_s=20.0)
    if bounds is not None:
        from shm.sim.trace import violation_events
        extra = []
        if result.verdict == "illegal":
            for k, f in enumerate(result.failures[:5]):
                extra.extend(violation_events(f.key, ops, first_pid=1000 + 100 * k))
        rack.tracer.provenance.update(check=system.name, options=dict(options or {}))
        tr[2] = (tr[0], rack.tracer.write(tr[0], extra_events=extra), len(result.failures))
    _expect(result.verdict == "ok", f"{wl.describe()}: the history is not linearizable "
                                    f"(verdict {result.verdict}):\n{result.explain()}")


def check_history_uniform(system, options) -> None:
    """A StressWorkload over 64 keys (uniform), 2 compute nodes x 2 threads x 4 coroutines, 1
    virtual ms after loading half the keys (``HISTORY``): the recorded history is linearizable."""
    _history_check(system, options, "uniform")


def check_history_zipfian(system, options) -> None:
    """As history_uniform with zipfian 0.99 keys: a few keys take most operations, so many
    operations on one key overlap."""
    _history_check(system, options, "zipfian")


def check_history_heavy(system, options) -> None:
    """``dmrack check --heavy`` only: the process stress's shape (``System.heavy_stress`` of the
    ``--heavy`` shape: by default 16 keys, values of 16-1000 bytes, 8 threads x 8 coroutines per node)
    on a co-located rack, uniform keys, 1 virtual ms. Multi-line values land line by line, so
    READs meet WRITEs halfway here too, and being co-located the interleavings are the same on
    every run: a bug that needs a rare one is caught every time or never."""
    _history_check(system, options, "uniform", system.heavy_stress(HEAVY)._replace(run_ms=1.0))


def _stress_check(system, options, distribution: str) -> None:
    """The process stress's shape (``_STRESS_SHAPE``) and mix run co-located, one phase: a failure
    of the rack of processes, reproduced where one virtual clock makes it replay bit for bit."""
    shape = _STRESS_SHAPE.get() or StressShape()
    _history_check(system, options, distribution, shape)


def check_stress_uniform(system, options) -> None:
    """``dmrack check``'s process stress (its shape: quick, heavy or under chaos), uniform keys,
    run co-located: what a process-stress failure is reproduced and shrunk with."""
    _stress_check(system, options, "uniform")


def check_stress_zipfian(system, options) -> None:
    """As stress_uniform with zipfian 0.99 keys (the process stress's second phase)."""
    _stress_check(system, options, "zipfian")


def check_client_statistics(system, options) -> None:
    """``KVClient.statistics()`` is None or an immutable record (hashable, and a snapshot: later
    operations do not change a record already returned)."""
    with rig(system, options=options) as r:
        before = r.client.statistics()
        if before is None:
            return
        try:
            snapshot = hash(before)
        except TypeError:
            raise ConformanceFailure(f"statistics() returned a mutable {type(before).__name__}: {before!r}") from None
        for i in range(5):
            r.op("insert", _k(i), _v(i, 1))
            r.op("get", _k(i))
        _expect(hash(before) == snapshot, f"a statistics() record changed after later operations: {before!r}")
        after = r.client.statistics()
        _expect(type(after) is type(before), f"statistics() changed type: {type(before)} then {type(after)}")


# -- the tables -------------------------------------------------------------------------------------
# The suite's registry, in the style of every registry of dmrack (a declared table: shm/targets.py):
# name -> check, in the order the suite runs them. A new check is a function above and its line here.

CHECKS = _named({
    "single_client": check_single_client,
    "sequential_model": check_sequential_model,
    "large_values": check_large_values,
    "no_torn_values": check_no_torn_values,
    "insert_race": check_insert_race,
    "load_then_read": check_load_then_read,
    "history_uniform": check_history_uniform,
    "history_zipfian": check_history_zipfian,
    "client_statistics": check_client_statistics,
})
#: Checks only ``dmrack check --heavy`` runs (``run_suite(heavy=True)``): too slow for every run.
HEAVY_CHECKS = _named({
    "history_heavy": check_history_heavy,
})
#: Checks that run only when named (``run_suite(only=...)``, ``dmrack check --only``): the process
#: stress's shape co-located, with which ``dmrack check`` reproduces and shrinks a failure of the
#: rack of processes.
STRESS_CHECKS = _named({
    "stress_uniform": check_stress_uniform,
    "stress_zipfian": check_stress_zipfian,
})
#: The checks that run smaller under a :class:`Scale`, and the fields each takes.
SHRINKABLE = {
    "stress_uniform": ("threads", "coroutines", "keys", "length"),
    "stress_zipfian": ("threads", "coroutines", "keys", "length"),
    "no_torn_values": ("threads", "coroutines", "length"),
    "insert_race": ("threads", "coroutines"),
    "history_uniform": ("threads", "coroutines", "keys", "length"),
    "history_zipfian": ("threads", "coroutines", "keys", "length"),
    "history_heavy": ("threads", "coroutines", "keys", "length"),
}


# -- the suite -------------------------------------------------------------------------------------

def run_suite(system_name: str, *, only: Iterable[str] | None = None, options: dict | None = None,
              progress: Callable[[str], None] | None = None, heavy: bool = False,
              profile: str | None = None, scale: Scale | None = None, trace: list | None = None,
              stress_shape: StressShape | None = None, sizes: dict | None = None) -> list[CheckOutcome]:
    """Run the checks (all, or the names in ``only``, in CHECKS order; with ``heavy`` also the
    ``HEAVY_CHECKS``, last) on the registered system
    ``system_name`` with system ``options`` (e.g. ``{"fault": "update-skips-cas"}``); one outcome
    per check. A failing check is recorded, never raised; an unknown system or check name is a
    ValueError. ``progress(message)`` is called before each check with a one-line message
    ("conformance 3/9: no_torn_values") for a status line; outcomes are the return value.
    ``profile``: the hardware profile of the rigs (default :data:`DEFAULT_PROFILE`; a system's
    ``rack_tables`` that name one still win for its service rigs). ``scale``: run the checks that
    take it smaller (:class:`Scale`); ``trace``: ``[path, bounds, None]``, the first history check
    records its run there; ``stress_shape``: the process stress's shape (the stress_* checks);
    ``sizes``: a dict the checks that take a scale fill with their full sizes (what shrinking
    halves: ``shrink.py``)."""
    system = get_system(system_name)
    if getattr(system, "transactional", False):
        raise ValueError(f"system {system_name!r} is transactional: the KV conformance suite does not apply; its "
                         f"checks are cluster/correctness/txn_check.py's (dmrack check --system {system_name})")
    if profile is not None:
        load_profile(profile)                     # an unknown name: one error now, not one per check
    # what the checks read besides their arguments, for this run (the contextvars above)
    settings = [(var, value) for var, value in ((_PROFILE, profile), (_SCALE, scale), (_TRACE, trace),
                                                (_STRESS_SHAPE, stress_shape), (_SIZES, sizes)) if value is not None]
    tokens = [(var, var.set(value)) for var, value in settings]
    try:
        return _run_checks(system, only=only, options=options, progress=progress, heavy=heavy)
    finally:
        for var, token in reversed(tokens):
            var.reset(token)


def _run_checks(system, *, only, options, progress, heavy) -> list[CheckOutcome]:
    every = {**CHECKS, **HEAVY_CHECKS, **STRESS_CHECKS}
    names = list(CHECKS) + (list(HEAVY_CHECKS) if heavy else [])
    if only is not None:
        wanted = list(only)
        unknown = [n for n in wanted if n not in every]
        if unknown:
            raise ValueError(f"unknown conformance check(s) {', '.join(map(repr, unknown))}; "
                             f"the checks are {', '.join(every)}")
        names = [n for n in every if n in wanted]
    from cluster.experiments.progress import advance, expect
    outcomes = []
    expect(progress, len(names))
    for n, name in enumerate(names, 1):
        if progress is not None:
            progress(f"conformance {n}/{len(names)}: {name}")
        tally = [0]
        token = _TALLY.set(tally)
        t0 = time.perf_counter()
        try:
            every[name](system, options)
            passed, detail = True, ""
        except ConformanceFailure as e:
            passed, detail = False, str(e)
        except Exception as e:          # a bug in the suite itself: recorded, the others still run
            passed, detail = False, (f"{name}: the check itself failed: {type(e).__name__}: {e}\n"
                                     + traceback.format_exc(limit=4))
        finally:
            _TALLY.reset(token)
        outcomes.append(CheckOutcome(name, passed, detail, tally[0], time.perf_counter() - t0))
        advance(progress)
    return outcomes
