"""FlexKV on the rack: the proxied and one-sided paths, the cache, the manager, bad options."""

from __future__ import annotations

import pytest

from cluster.correctness.checker import check
from cluster.rack import ColocatedRack
from cluster.scenario import scenario_from_dict
from cluster.spec import SpecError
from nodes.systems.flexkv.node import states
from tests.test_rack import LOAD, rack_dict, run


def flexkv_dict(*steps, compute=2, threads=2, coroutines=2, records=256, preset="b", **options):
    d = rack_dict(*steps, compute=compute, threads=threads, coroutines=coroutines, records=records, preset=preset)
    d["rack"]["profile"] = "cx3-56g"
    d["system"] = {"name": "flexkv", **options}
    d["workload"]["requestdistribution"] = "zipfian"
    d["workload"]["valuesize"] = 32
    return d


def colocated(*steps, history=50_000, **kw):
    rack = ColocatedRack(scenario_from_dict(flexkv_dict(*steps, **kw), source="t.toml"), history=history)
    res = rack.run()
    return rack, res


def client_stats(rack):
    return [c.statistics() for n in rack.nodes for c in n.clients]


def node_states(rack):
    nonce = rack.state.layout["nonce"] if hasattr(rack.state, "layout") else None
    return {node: st for (n, node), st in states().items() if nonce is None or n == nonce}


def test_a_fixed_ratio_proxies_partitions_and_stays_linearizable():
    rack, res = colocated(LOAD, run(3.0), knob=False, offload_ratio=0.5, rank_hotness=False)
    assert check(rack.history_ops).verdict == "ok"
    st = client_stats(rack)
    assert sum(s.proxied_ops for s in st) > 0 and sum(s.one_sided_ops for s in st) > 0
    assert sum(s.read_rpcs for s in st) > 0 and sum(s.write_rpcs for s in st) > 0
    assert sum(s.pair_hits for s in st) > 0                    # YCSB B is read-mostly: pairs get cached


def test_the_knob_and_rank_hotness_reassign_and_stay_linearizable():
    rack, res = colocated(LOAD, run(4.0), preset="a")
    assert check(rack.history_ops).verdict == "ok"
    kinds = {e[1] for st in states().values() for e in st.events}
    assert "reassign" in kinds and "rank" in kinds


@pytest.mark.parametrize("option, value, words", [
    ("offload_ratio", 1.5, "above the maximum"),
    ("proxy_threads", 3, "exceeds the 2 threads"),
    ("partitions", 100, "power of two"),
])
def test_bad_options_are_one_line(option, value, words):
    with pytest.raises(SpecError) as e:
        scenario_from_dict(flexkv_dict(LOAD, **{option: value}), source="t.toml")
    assert words in str(e.value) and "\n" not in str(e.value)


def test_flexkv_op_forwards_to_owners_and_stays_linearizable():
    d = flexkv_dict(LOAD, run(3.0), knob=False, offload_ratio=0.5)
    d["system"]["name"] = "flexkv-op"
    rack = ColocatedRack(scenario_from_dict(d, source="t.toml"), history=50_000)
    rack.run()
    assert check(rack.history_ops).verdict == "ok"
    st = client_stats(rack)
    assert sum(s.read_rpcs + s.write_rpcs for s in st) > 0          # forwarded to the other owner
    assert sum(s.pair_hits for s in st) > 0                          # the owners' caches serve reads


def _processes(d, history=100_000):
    from cluster.supervisor import Supervisor
    sup = Supervisor(scenario_from_dict(d, source="t.toml"), quiet=True, history=history)
    code = sup.run()
    return sup, code


def test_a_proxy_killed_between_its_memory_write_and_its_commit_loses_no_write(monkeypatch):
    """cn1's process ends (failpoint exit) in a write handler after the memory node's slot was
    written and before the LOCAL_CAS: the survivors see the membership change, drop their caches,
    serve cn1's partitions one-sidedly, and the writer whose RPC timed out finds its own word in
    the slot (a redo); the history stays linearizable."""
    monkeypatch.setenv("DMRACK_FAILPOINTS", "cn1:flexkv.proxy.memory_written=exit@5")
    d = flexkv_dict(LOAD, run(3.0), run(2.0), compute=3, preset="a", knob=False, offload_ratio=1.0,
                    rank_hotness=False)
    d["rack"]["on_node_death"] = "continue"
    sup, code = _processes(d)
    assert [x.node for x in sup.deaths] == ["cn1"], sup.deaths
    assert check(sup.history_ops).verdict == "ok"
    last = {n.node: n for n in sup.results.steps[-1].nodes}
    assert last["cn0"].ops > 0 and last["cn2"].ops > 0


def test_a_killed_node_comes_back_with_a_restart_step_and_gets_its_partitions_again():
    d = flexkv_dict(LOAD, run(2.0), {"action": "kill", "node": "cn1"}, run(2.0),
                    {"action": "restart", "node": "cn1"}, run(3.0), compute=3, preset="b", knob=False,
                    offload_ratio=1.0, rank_hotness=False)
    d["rack"]["on_node_death"] = "continue"
    sup, code = _processes(d)
    assert code == 0 and sup.stop_reason == "scenario finished", sup.stop_reason
    assert check(sup.history_ops).verdict == "ok"
    back = {n.node: n for n in sup.results.steps[-1].nodes}
    assert back["cn1"].ops > 0


def test_reassignments_racing_with_writes_stay_linearizable():
    """A round every 100 us under 50 % updates: partitions change owners while writes are in
    flight (pause, drain, cache clear, subtable loads) and the history stays linearizable."""
    rack, res = colocated(LOAD, run(3.0), preset="a", interval_us=100, knob=False, offload_ratio=0.5,
                          rank_samples=0)             # rank every interval: counting noise reassigns
    assert check(rack.history_ops).verdict == "ok"
    st = client_stats(rack)
    assert max(s.node_rounds for s in st) >= 5
    assert sum(s.proxied_ops for s in st) > 0 and sum(s.paused_waits + s.reroutes for s in st) > 0
