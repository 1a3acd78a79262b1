"""One steering-rule type (issue 42): ``shm.steering.SteerRule`` is what the rack spec's
``[[steer]]`` parses into, what a system's ``steering(spec)`` returns and what the datagram path
takes, so the rack's rules and a node's list are the same plain data, resolved by
``nodes.actors.steer_rules``. Also: the names that moved keep their old homes (re-exports)."""

from __future__ import annotations

import pytest

from cluster.rack import compile_scenario
from cluster.scenario import scenario_from_dict, with_rack_tables
from cluster.spec import SteerSpec, spec_from_dict
from nodes.actors import steer_rules
from nodes.systems import get_system
from shm import udp
from shm.steering import SteerRule
from tests.test_devices_rack import device_dict
from tests.test_udp import new_fabric, new_net


def test_the_spec_parses_steer_tables_into_the_one_rule_type():
    spec = spec_from_dict(device_dict(mirror=True), source="rack.toml")
    (rule,) = spec.steer
    assert type(rule) is SteerRule and udp.SteerRule is SteerRule
    assert rule == SteerRule(9000, "dpa0", port_hi=9255, mirror="dpu0", spread="port", node="cn0")
    # the constructor plugins used keeps building the same rule
    assert SteerSpec("cn0", 9000, 9255, "dpa0", mirror="dpu0") == rule
    assert "steer: cn0 udp 9000-9255 -> dpa0, mirror to dpu0" in spec.describe()


@pytest.mark.parametrize("system, count, first", [
    ("dpa-kv", 1, SteerRule(9000, "dpa0", port_hi=9255, spread="port", node="cn0")),
    ("dpa-store", 6, SteerRule(9500, "dpa0.t0", port_hi=9500, spread="port", node="cn0")),
    ("pd3", 1, SteerRule(7000, "cn0", port_hi=7007, mirror="dpu0", spread="port", node="cn0")),
])
def test_systems_return_the_one_rule_type(system, count, first):
    d = device_dict()
    d["system"] = {"name": system}
    cls = get_system(system)
    rules = cls.steering(spec_from_dict(with_rack_tables(cls, d), source="rack.toml"))
    assert len(rules) == count and all(type(r) is SteerRule and r.node == "cn0" for r in rules)
    assert rules[0] == first


def test_steer_rules_resolve_a_node_target_to_its_queues_in_the_nodes_list():
    """dpa-kv's one rule (port 9000..9255 -> the node dpa0) becomes, in cn0's list, a rule over
    dpa0's thread queues picked by port; the file's rule comes first (first match wins)."""
    d = device_dict({"action": "load"}, mirror=True, threads=4)
    compiled = compile_scenario(scenario_from_dict(d, source="rack.toml"))
    lists = steer_rules(compiled)
    assert list(lists) == ["cn0"]
    file_rule, system_rule = lists["cn0"]
    queues = tuple(f"dpa0.t{i}" for i in range(4))
    assert file_rule == SteerRule(9000, queues, port_hi=9255, mirror="dpu0.rx", spread="port")
    assert system_rule == SteerRule(9000, queues, port_hi=9255, spread="port")
    assert file_rule.node is None and system_rule.node is None


def test_a_node_refuses_a_rule_for_another_node(prefix):
    with new_fabric(prefix) as fab:
        _env, net = new_net(fab)
        net.add_queue("h0", "h0.q")
        with pytest.raises(udp.UdpError, match="^steering rule 0 of node 'h0': the rule is for node 'c0'$"):
            net.set_rules("h0", [SteerRule(1, "h0.q", node="c0")])
        net.set_rules("h0", [SteerRule(1, "h0.q", node="h0"), SteerRule(2, "h0.q")])
        assert len(net.rules[fab.node_index("h0")]) == 2


def test_moved_names_keep_their_old_homes():
    import cluster.correctness.check as check
    import cluster.correctness.conformance as conformance
    import cluster.correctness.shapes as shapes
    import nodes.systems.api as api
    import shm.messages as messages
    import shm.rpc as rpc
    import shm.rpc_client as rpc_client
    assert api.SystemGaveUp is messages.SystemGaveUp and api.one_line is messages.one_line
    # the names before issue 42, kept for systems and plugins written against them
    assert api.SystemError_ is messages.SystemError_ is messages.SystemGaveUp
    assert rpc.rpc is rpc_client.rpc and rpc.RpcError is rpc_client.RpcError and rpc.HEADER is rpc_client.HEADER
    import cluster.scenario as scenario
    assert check.StressShape is shapes.StressShape and check.with_rack_tables is scenario.with_rack_tables
    assert conformance.with_rack_tables is scenario.with_rack_tables
    assert conformance.DEFAULT_PROFILE == shapes.DEFAULT_PROFILE == "cx6-200g"


def test_renamed_names_keep_their_old_names():
    """Issue 42 renamed what misled (a batch of verbs called Coroutine, NIC opcodes called OP_* like
    the workload's op kinds, a log line called Event, a counter called deferred); the old names stay
    importable, the same objects, for systems, plugins and scripts written against them."""
    from cluster import stats
    from shm import coro, nic
    from shm.smart import SmartStats
    assert coro.Coroutine is coro.VerbBatch and stats.Event is stats.LogEntry
    assert (nic.OP_READ, nic.OP_WRITE, nic.OP_CAS, nic.OP_FAA, nic.OP_SEND, nic.OP_SEND_UD, nic.N_OPS) == (
        nic.VERB_READ, nic.VERB_WRITE, nic.VERB_CAS, nic.VERB_FAA, nic.VERB_SEND, nic.VERB_SEND_UD, nic.N_VERBS)
    st = SmartStats(*range(len(SmartStats._fields)))
    assert st.deferred_posts == st.posts_waited == SmartStats._fields.index("posts_waited")
