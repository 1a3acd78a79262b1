"""ROLEX's retraining at run time (nodes/systems/rolex/retrain.py, docs/rolex.md "Retraining"): a
retrain merges a model's synonym chains into new leaves and publishes a new model epoch; a client
whose learned cache is older meets a retired leaf or lock, READs the new table and starts over;
concurrent operations across retrains stay linearizable; loads without inserts never retrain; bad
options are one line. Co-located and in virtual time (one process stress of ``dmrack check``)."""

from __future__ import annotations

import random

import pytest

from cluster.correctness.checker import check
from cluster.correctness.conformance import CHECKS, HISTORY, ConformanceFailure, rig, stress_rack
from cluster.correctness.shapes import QUICK, stress_mix, stress_options
from nodes.systems.rolex import RolexSystem
from nodes.systems.rolex.layout import RETIRED_LOCK, Remote, retired_epoch
from nodes.systems.rolex.retrain import chain_lengths, current_table, retrain_stats
from shm.coro import NodeRdma
from workloads.stress import StressWorkload

#: full 8-key leaves (every first insert into a leaf splits), small models, a retrain every
#: second synonym leaf of a model; two memory nodes, so leaves and locks are local and remote
SMALL = {"span": 8, "eps": 4, "retrain_synonyms": 2, "leaf_headroom": 16.0}
STEP = 1 << 20            # loaded keys are multiples of STEP; inserts go between them
#: 400 keys at random multiples of STEP: a few dozen models of eps 4 (evenly spaced keys would be one)
LOADED = [STEP * m for m in sorted(random.Random(5).sample(range(1, 1 << 20), 400))]


def _key(k: int) -> bytes:
    return k.to_bytes(8, "big")


def _val(k: int, version: int = 0) -> bytes:
    return (k + version).to_bytes(8, "little") * 3


def _bulk(r, ids):
    RolexSystem.bulk_load(r.fabric, r.layout, ((_key(k), _val(k)) for k in ids))


def _second_node(r):
    """Another compute node's client (its own learned cache) on the rig's fabric: the thread at
    index 1, so its lock tag is not the rig's thread 0's."""
    node = NodeRdma(r.node.host, "cn0")
    node.udp = r.node.udp
    node.thread()
    th = node.thread()
    return RolexSystem.client(r.fabric, r.layout, th, r.options), th.coroutine()


def _grow_chain(r, around: int, count: int):
    """Insert ``count`` keys just above loaded key ``around``: its leaf splits, again and again."""
    for j in range(1, count + 1):
        assert r.op("insert", _key(around + j), _val(around + j)) is True


def test_a_retrain_merges_the_chains_and_publishes_a_new_epoch():
    with rig(RolexSystem, options=SMALL, capacity=4000) as r:
        loaded = LOADED
        _bulk(r, loaded)
        _off, before, _n = current_table(r.fabric, r.layout)
        assert before.epoch == 1 and before.leaves is None        # bulk-loaded: slot s is leaf s
        home = loaded[200]
        _grow_chain(r, home, 12)
        st = retrain_stats(r.fabric, r.layout)
        assert st.retrains >= 1 and st.failed == 0
        assert st.synonyms_merged >= 2 and st.longest_chain >= 1
        _off, after, _n = current_table(r.fabric, r.layout)
        assert after.epoch == before.epoch + st.retrains == st.epoch
        assert after.leaves is not None                          # re-laid leaves: the table maps slots
        assert max(chain_lengths(r.fabric, r.layout)) <= 1       # the merged chains are gone
        # the leaves of the retrained model are retired for the new epoch, their group locks too
        remote = Remote(r.layout)
        gone = [leaf for leaf in range(len(before.fences)) if leaf not in set(after.leaves)]
        assert gone
        for leaf in gone:
            j, i = leaf % len(remote.nodes), leaf // len(remote.nodes)
            host64 = r.fabric.memory[remote.nodes[j]].host64
            assert retired_epoch(int(host64[(remote.tables[j] + 8 * i) // 8])) is not None
            assert int(host64[(remote.locks[j] + 8 * i) // 8]) & RETIRED_LOCK
        # every key where it was, in order
        for k in loaded + [home + j for j in range(1, 13)]:
            assert r.op("get", _key(k)) == _val(k)
        got = r.op("scan", _key(0), 1000)
        assert [int.from_bytes(k, "big") for k, _ in got] == sorted(loaded + [home + j for j in range(1, 13)])
        # priced on the memory node's cores: at least the per-retrain and per-key work
        sw = r.fabric.profile.software
        assert st.cpu_ns >= st.retrains * sw.patch_ns + st.keys * sw.patch_ns_per_key
        assert st.busy_ns >= st.cpu_ns > 0


def test_a_client_with_an_old_cache_refetches_the_table_and_starts_over():
    with rig(RolexSystem, options=SMALL, capacity=4000) as r:
        loaded = LOADED
        _bulk(r, loaded)
        other, co = _second_node(r)
        home, far = loaded[200], loaded[5]
        assert r.run(other.get(co, _key(home))) == _val(home)    # its cache: epoch 1
        assert other.statistics().cache_refreshes == 1
        _grow_chain(r, home, 12)                                 # the rig's node retrains home's model
        assert retrain_stats(r.fabric, r.layout).retrains >= 1
        # a key of a model not retrained: the old table still finds it, nothing refetched
        assert r.run(other.get(co, _key(far))) == _val(far)
        assert other.statistics().stale_retries == 0
        # a key of the retrained model: a retired leaf, the new table, the right value
        assert r.run(other.get(co, _key(home + 3))) == _val(home + 3)
        s = other.statistics()
        assert (s.stale_retries, s.newer_tables, s.cache_refreshes) == (1, 1, 2)
        # an update through the new table lands where every client reads it
        assert r.run(other.update(co, _key(home + 5), _val(home + 5, 9))) is True
        assert r.op("get", _key(home + 5)) == _val(home + 5, 9)


def test_a_writer_with_an_old_cache_meets_a_retired_lock_and_writes_the_new_leaves():
    with rig(RolexSystem, options=SMALL, capacity=4000) as r:
        loaded = LOADED
        _bulk(r, loaded)
        other, co = _second_node(r)
        home = loaded[100]
        assert r.run(other.get(co, _key(loaded[0]))) == _val(loaded[0])
        _grow_chain(r, home, 12)
        assert r.run(other.update(co, _key(home), _val(home, 7))) is True
        assert other.statistics().stale_retries == 1
        assert r.op("get", _key(home)) == _val(home, 7)


def test_loads_without_inserts_never_retrain():
    with rig(RolexSystem, options={**SMALL, "retrain_synonyms": 1}, capacity=4000) as r:
        loaded = LOADED
        _bulk(r, loaded)
        for k in loaded[::7]:
            assert r.op("update", _key(k), _val(k, 1)) is True
            assert r.op("get", _key(k)) == _val(k, 1)
        for k in loaded[::11]:
            assert r.op("delete", _key(k)) is True
        r.op("scan", _key(0), 50)
        st = retrain_stats(r.fabric, r.layout)
        assert (st.requests, st.retrains, st.epoch) == (0, 0, 0)
        s = r.client.statistics()
        assert (s.synonym_leaves, s.retrain_requests, s.stale_retries, s.cache_refreshes) == (0, 0, 0, 1)


def test_an_insert_loaded_index_is_trained_by_its_first_retrain():
    """An index setup left empty has no models; its leaf groups overflow and are retrained into
    models, with inserts, gets and deletes running on the rig's coroutines all along."""
    opts = {"empty_leaves": 2, "span": 6, "fill": 5, "eps": 2, "retrain_synonyms": 2, "leaf_headroom": 64.0}
    with rig(RolexSystem, options=opts, compute_threads=2, coroutines=4, capacity=1000) as r:
        def body(cl, co, i):
            bad = []
            for k in range(i, 400, 8):
                assert (yield from cl.insert(co, _key(k * STEP + 1), _val(k))) is True
                if k >= 40 and k % 3 == 0:
                    old = k - 40
                    if (yield from cl.get(co, _key(old * STEP + 1))) != _val(old):
                        bad.append(old)
            return bad
        assert r.each(body) == [[]] * 8
        st = retrain_stats(r.fabric, r.layout)
        assert st.retrains >= 2 and st.failed == 0
        _off, t, _n = current_table(r.fabric, r.layout)
        assert t.segs                                            # models, trained at run time
        for k in range(400):
            assert r.op("get", _key(k * STEP + 1)) == _val(k)


def test_a_concurrent_stress_crossing_retrains_is_linearizable():
    """The conformance history's stress with ROLEX's stress options (``check_stress``): gets,
    inserts, updates, deletes and scans of 64 keys by 16 coroutines on 2 compute nodes while the
    memory node retrains models under them."""
    shape = RolexSystem.history_stress(HISTORY, {})
    opts = stress_options(RolexSystem, {}, shape)
    assert opts["retrain_synonyms"] and opts["empty_leaves"]
    for dist in ("uniform", "zipfian"):
        wl = StressWorkload(shape.keys, mix=stress_mix(RolexSystem), distribution=dist, value_size=shape.value_size)
        rack = stress_rack(RolexSystem, wl, compute=2, threads=shape.threads, coroutines=shape.coroutines,
                           duration_ms=shape.run_ms, options=opts)
        counters = rack.run().summary()["system"]
        assert counters["newer_tables"] >= 2 and counters["stale_retries"] > 0, counters
        ops = rack.history_ops
        assert len(ops) > 500
        assert check(ops, time_limit_s=20.0).verdict == "ok"


def test_dmrack_check_s_process_stress_crosses_a_retrain():
    """``dmrack check --system rolex --quick``'s process stress (a rack of processes) runs with
    the stress options and its clients cross at least one retrain; the history is linearizable."""
    from cluster.correctness.check import stress_processes
    shape = RolexSystem.check_stress(QUICK, {})
    assert shape.options
    result, sup = stress_processes("rolex", {}, shape=shape)
    counters = sup.results.summary()["system"]
    assert result.verdict == "ok"
    assert counters["newer_tables"] >= 1 and counters["retrain_requests"] >= 1, counters


def test_a_retrain_that_skips_the_locks_is_caught():
    """fault=retrain-unlocked: a retrain READs a model's leaves without their locks, so a write
    landing between its READ and the retirement is lost; the history check says so."""
    with pytest.raises(ConformanceFailure, match="not linearizable"):
        CHECKS["history_uniform"](RolexSystem, {"fault": "retrain-unlocked"})


def test_the_deliberate_bugs_shown_on_rolex_s_defaults_keep_them():
    shape = RolexSystem.check_stress(QUICK, {"fault": "skip-checksum"})
    assert shape.options == ()
    assert RolexSystem.check_stress(QUICK, {"fault": "retrain-unlocked"}).options
    # an option the check names leaves the stress options out, all of them
    assert stress_options(RolexSystem, {"span": 16}, RolexSystem.check_stress(QUICK, {})) == {"span": 16}


@pytest.mark.parametrize("opts, words", [
    ({"retrain_synonyms": -1}, "retrain_synonyms = -1 is below the minimum 0"),
    ({"retrain_synonyms": 2.5}, "retrain_synonyms must be an integer"),
    ({"empty_leaves": "many"}, "empty_leaves must be an integer"),
    ({"fault": "no-such-bug"}, "fault = 'no-such-bug' is not one of"),
])
def test_bad_retrain_options_are_one_clear_line(opts, words):
    with pytest.raises(ValueError) as e:
        RolexSystem.check_options(opts, "system 'rolex'")
    assert words in str(e.value) and "\n" not in str(e.value)


def test_a_rack_without_memory_cores_is_one_clear_line():
    from cluster.scenario import scenario_from_dict
    d = {"rack": {"name": "r", "profile": "cx6-200g"}, "memory": {"count": 1, "cores": 0},
         "system": {"name": "rolex"}, "workload": {"preset": "c", "recordcount": 100}}
    with pytest.raises(Exception) as e:
        scenario_from_dict(d, source="test")
    assert "memory.cores = 0" in str(e.value) and "rolex" in str(e.value) and "\n" not in str(e.value)
