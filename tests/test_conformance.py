"""The conformance suite (cluster/correctness/conformance.py) on every registered system, and proof that it
has teeth: deliberately broken systems fail the check meant to catch them, with a message that
names the check and the problem.

A new system gets the whole suite by being registered in ``nodes.systems.BUILTIN``: the first
test is parametrised over ``kv_system_names()`` (the registered KV systems; transactional ones have
their own suite, cluster/correctness/txn_check.py) x ``CHECKS``."""

from __future__ import annotations

import pytest

from cluster.correctness.conformance import CHECKS, CheckOutcome, ConformanceFailure, rig, run_suite, stress_rack
from nodes.systems import get_system, kv_system_names
from nodes.systems.api import KVClient, System
from nodes.systems.race import RaceSystem
from workloads.keys import decode_value
from workloads.stress import StressWorkload


@pytest.mark.parametrize("check", list(CHECKS))
@pytest.mark.parametrize("system", kv_system_names())
def test_system_passes_check(system, check):
    CHECKS[check](get_system(system))


def test_the_suite_has_the_checks_every_system_must_pass():
    assert list(CHECKS) == ["single_client", "sequential_model", "large_values", "no_torn_values", "insert_race",
                            "load_then_read", "history_uniform", "history_zipfian", "client_statistics"]
    assert issubclass(ConformanceFailure, AssertionError)


# -- broken systems: each must fail the check written for its bug --------------------------------

class _Wrapped:
    """A RACE client with one operation replaced (the rest delegated)."""

    def __init__(self, inner):
        self.inner = inner

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def get(self, co, key):
        return self.inner.get(co, key)

    def insert(self, co, key, value):
        return self.inner.insert(co, key, value)

    def update(self, co, key, value):
        return self.inner.update(co, key, value)

    def put(self, co, key, value):
        return self.inner.put(co, key, value)

    def delete(self, co, key):
        return self.inner.delete(co, key)

    def scan(self, co, start, count):
        return self.inner.scan(co, start, count)


def _broken(name, wrapper):
    return type(f"Broken{name}", (RaceSystem,), {
        "client": classmethod(lambda cls, fabric, layout, thread, options:
                              wrapper(RaceSystem.client(fabric, layout, thread, options)))})


class _UpsertingInsert(_Wrapped):
    """insert of an existing key overwrites it and says True (an upsert, not an insert)."""

    def insert(self, co, key, value):
        if (yield from self.inner.insert(co, key, value)):
            return True
        return (yield from self.inner.update(co, key, value))


class _TruncatingGet(_Wrapped):
    """get returns at most one cache line of the value."""

    def get(self, co, key):
        v = yield from self.inner.get(co, key)
        return None if v is None else v[:64]


class _TornGet(_Wrapped):
    """get sometimes splices its value with the previous value it read (a torn read)."""

    def get(self, co, key):
        v = yield from self.inner.get(co, key)
        prev = getattr(self, "_prev", None)
        self._prev = v
        if v is not None and prev is not None and len(prev) == len(v) and prev != v:
            return v[:len(v) // 2] + prev[len(v) // 2:]
        return v


class _StaleGet(_Wrapped):
    """get answers from a per-client cache filled by the client's own writes and reads (never
    invalidated): stale once another client writes the key."""

    def get(self, co, key):
        cache = self.__dict__.setdefault("_cache", {})
        if key in cache:
            return cache[key]
        v = yield from self.inner.get(co, key)
        cache[key] = v
        return v


class _MutableStats(_Wrapped):
    def statistics(self):
        return {"gets": 0}


def _failure(check, system):
    with pytest.raises(ConformanceFailure) as e:
        CHECKS[check](system)
    return str(e.value)


def test_an_insert_that_upserts_fails_single_client():
    msg = _failure("single_client", _broken("Upsert", _UpsertingInsert))
    assert msg.startswith("single_client [race]: insert of an existing key (duplicate): returned True, expected False")


def test_truncated_large_values_fail_large_values():
    msg = _failure("large_values", _broken("Truncating", _TruncatingGet))
    # the 64 B head of a value_bytes value is itself one (same key and version), but too short
    assert msg.startswith("large_values [race]: a 65 B value came back as 64 B ")


def test_torn_reads_fail_no_torn_values():
    msg = _failure("no_torn_values", _broken("Torn", _TornGet))
    assert msg.startswith("no_torn_values [race]: ") and "a value no update wrote" in msg
    assert "not a value_bytes value: torn or foreign" in msg


def test_stale_reads_fail_the_history_check():
    msg = _failure("history_uniform", _broken("Stale", _StaleGet))
    assert msg.startswith("history_uniform [race]: stress: 40% get 20% insert 20% update 20% delete, uniform")
    assert "not linearizable" in msg and "verdict illegal" in msg


def test_a_mutable_statistics_record_fails_client_statistics():
    msg = _failure("client_statistics", _broken("MutableStats", _MutableStats))
    assert msg.startswith("client_statistics [race]: statistics() returned a mutable dict")


def test_run_suite_records_failures_and_counts_what_it_checked():
    """RACE's deliberate bug (update WRITEs its slot instead of CASing it: a racing delete is
    lost) is caught by the history check; the suite records it and carries on."""
    messages = []
    out = run_suite("race", only=["history_uniform", "insert_race"], options={"fault": "update-skips-cas"},
                    progress=messages.append)
    assert messages == ["conformance 1/2: insert_race", "conformance 2/2: history_uniform"]
    assert [o.name for o in out] == ["insert_race", "history_uniform"] and all(isinstance(o, CheckOutcome) for o in out)
    race, hist = out
    assert race.passed and race.detail == "" and race.ops_checked == 3 * 2 * 16 + 6     # 3 rounds, + 6 gets
    assert not hist.passed and "not linearizable" in hist.detail and hist.ops_checked > 500
    with pytest.raises(ValueError, match="unknown conformance check"):
        run_suite("race", only=["single_clinet"])
    with pytest.raises(ValueError, match="unknown system"):
        run_suite("no-such-system")


def test_a_crashing_check_is_recorded_not_raised():
    """A check that crashes inside the system (here: every option must be one the system knows)
    is a failed outcome whose detail names the check."""
    (out,) = run_suite("race", only=["client_statistics"], options={"no_such_option": 1})
    assert not out.passed and out.detail.startswith("client_statistics [race]: ValueError: ")
    assert "no_such_option" in out.detail


# -- an ordered toy system: the scan half of single_client ----------------------------------------

class _DictClient(KVClient):
    """Every operation is one 1 µs step on a Python dict: trivially linearizable, ordered."""

    def __init__(self, store, scan_bug=False):
        self.store = store
        self.scan_bug = scan_bug

    def get(self, co, key):
        yield 1000
        return self.store.get(key)

    def insert(self, co, key, value):
        yield 1000
        if key in self.store:
            return False
        self.store[key] = bytes(value)
        return True

    def update(self, co, key, value):
        yield 1000
        if key not in self.store:
            return False
        self.store[key] = bytes(value)
        return True

    def delete(self, co, key):
        yield 1000
        return self.store.pop(key, None) is not None

    def scan(self, co, start, count):
        yield 1000
        keys = sorted(k for k in self.store if k >= start)
        if self.scan_bug:
            keys = sorted(keys, key=lambda k: int.from_bytes(k, "little"))   # numeric, not bytes order
        return [(k, self.store[k]) for k in keys[:count]]


class _DictSystem(System):
    name = "dict-toy"
    supports_scan = True
    stores: dict = {}
    scan_bug = False

    @classmethod
    def setup(cls, fabric, memory_nodes, options, capacity):
        sid = len(cls.stores)
        cls.stores[sid] = {}
        return {"store": sid}

    @classmethod
    def client(cls, fabric, layout, thread, options):
        return _DictClient(cls.stores[layout["store"]], cls.scan_bug)


class _DictSystemBadScan(_DictSystem):
    scan_bug = True


@pytest.mark.parametrize("check", ["single_client", "sequential_model", "large_values", "no_torn_values",
                                   "insert_race", "load_then_read", "client_statistics"])
def test_an_ordered_system_passes_the_rig_checks_scans_included(check):
    CHECKS[check](_DictSystem)


def test_scans_out_of_key_order_fail_single_client():
    msg = _failure("single_client", _DictSystemBadScan)
    assert msg.startswith("single_client [dict-toy]: scan(") and "expected" in msg


def test_a_rig_is_closed_when_its_body_fails(prefix):
    # tests/conftest.py fails this test if the fabric's segments outlive the with block
    with pytest.raises(RuntimeError, match="boom"):
        with rig(RaceSystem, compute_threads=2, coroutines=2, prefix=prefix) as r:
            assert r.op("insert", b"k" * 8, b"v" * 16) is True
            assert r.statistics().ops == 1 and r.statistics().threads == 2
            raise RuntimeError("boom")


def test_stress_rack_drives_the_stress_workload():
    wl = StressWorkload(16, {"insert": 1, "delete": 1}, value_size=16, hashed=False)
    rack = stress_rack(RaceSystem, wl, compute=1, threads=1, coroutines=2, load=4, duration_ms=0.05)
    res = rack.run()
    kinds = {k.kind: k for s in res.steps for k in s.kinds}
    assert set(kinds) == {"all", "insert", "delete"}                 # only what the mix says
    ops = rack.history_ops
    assert {op.key for op in ops} <= set(range(16))
    load = [op for op in ops if op.call < min(o.call for o in ops if o.kind == "delete")][:4]
    assert sorted(op.key for op in load) == [0, 1, 2, 3] and all(op.kind == "insert" and op.ok for op in load)
    assert any(op.kind == "insert" and op.ok is False for op in ops)  # inserts meet existing keys
    assert decode_value(wl.value_bytes(3, 7)) == (3, 7)
