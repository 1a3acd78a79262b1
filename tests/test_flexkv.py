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


def _block_holds(fabric, word: int, key: bytes) -> int:
    """What the memory node holds now at the block a slot word points to: check_block's answer."""
    from nodes.systems.race.layout import check_block, slot_block, slot_block_bytes
    from shm.fabric import gaddr_node, gaddr_offset
    a = slot_block(word)
    return int(check_block(fabric.memory[gaddr_node(a)].host, gaddr_offset(a), slot_block_bytes(word), key))


def test_a_write_rpc_leaves_only_once_its_new_pair_is_in_memory(monkeypatch):
    """A WRITE RPC names a pair the proxy will commit: if it left while the pair's WRITE was still
    on its way and the client's process then died (the RPC delivered, the WRITE never landed), a
    live proxy committed a word whose block held another key's retired pair and the key vanished
    (the kill test's rare failure: a later get "not found", an update "absent"). Checked at every
    WRITE RPC of a run whose hot keys' slots are cached (the path that did not wait)."""
    from nodes.systems.flexkv import client as fc
    from nodes.systems.flexkv.layout import is_pair
    from nodes.systems.flexkv.proxy import M_WRITE, WRITE_REQ
    sent = []
    real = fc.rpc

    def rpc(co, node, payload, *, method, **kw):
        if method == M_WRITE:
            _op, _p, _slot, _expected, new, _seen, n = WRITE_REQ.unpack_from(payload)
            key = bytes(payload[WRITE_REQ.size + 8 * n:])
            if is_pair(new):
                sent.append(_block_holds(co.thread.fabric, new, key))
        return (yield from real(co, node, payload, method=method, **kw))

    monkeypatch.setattr(fc, "rpc", rpc)
    colocated(LOAD, run(3.0), preset="a", knob=False, offload_ratio=1.0, rank_hotness=False, history=0)
    assert len(sent) > 100
    assert all(v >= 0 for v in sent), f"{sum(v < 0 for v in sent)} of {len(sent)} WRITE RPCs left before their pair"


def test_a_one_sided_update_marks_the_pair_it_replaced(monkeypatch):
    """A survivor's one-sided update can replace the word a dead proxy wrote to the memory node
    but never committed; the writer whose RPC timed out then finds its word gone from the slot,
    and only the invalid bit on its own pair tells it its write took effect (else it wrote again
    over the survivor's value, and a reader that had seen its value saw it come back). So every
    pair a one-sided update replaces carries the bit by the time the update returns."""
    from nodes.systems.flexkv import client as fc
    from nodes.systems.flexkv.layout import INVALID_BIT, INVALID_BYTE
    from nodes.systems.race.layout import slot_block
    from shm.fabric import gaddr_node, gaddr_offset
    marked = []

    def retire(self, w):
        a = slot_block(w)
        marked.append(bool(self.fabric.memory[gaddr_node(a)].host[gaddr_offset(a) + INVALID_BYTE] & INVALID_BIT))
        return fc.RaceClient.retire_block(self, w)

    monkeypatch.setattr(fc.FlexKVClient, "retire_block", retire)
    rack, _ = colocated(LOAD, run(1.0), preset="a", knob=False, offload_ratio=0.0, rank_hotness=False)
    assert check(rack.history_ops).verdict == "ok"
    assert sum(s.one_sided_ops for s in client_stats(rack)) > 0
    assert len(marked) > 100 and all(marked), f"{marked.count(False)} of {len(marked)} replaced pairs unmarked"


def _kill_and_restart(gap_ms: float, after_ms: float):
    """cn1 of three killed after 2 ms and restarted ``gap_ms`` later, then ``after_ms`` more, as a
    rack of processes (offload ratio 1: every partition has a compute node as owner); the run's
    supervisor, once it ended as it should with a linearizable history."""
    d = flexkv_dict(LOAD, run(2.0), {"action": "kill", "node": "cn1"}, run(gap_ms),
                    {"action": "restart", "node": "cn1"}, run(after_ms), compute=3, preset="b", knob=False,
                    offload_ratio=1.0, rank_hotness=False)
    d["rack"]["on_node_death"] = "continue"
    sup, code = _processes(d)
    assert code == 0 and sup.stop_reason == "scenario finished", sup.stop_reason
    assert check(sup.history_ops).verdict == "ok"
    return sup


def test_a_killed_node_comes_back_with_a_restart_step_and_gets_its_partitions_again():
    sup = _kill_and_restart(2.0, 3.0)
    back = {n.node: n for n in sup.results.steps[-1].nodes}
    assert back["cn1"].ops > 0


def test_a_restart_the_supervisor_notices_with_the_death_does_not_strand_rerouted_operations(monkeypatch):
    """A loaded machine's supervisor looks at its processes seldom: here once a second, so it
    notices cn1's kill only when the restart step is due, and sets cn1's failed bit and clears it
    again in one look. The survivors' operations on cn1's partitions never saw the bit (they
    waited for it in _suspect), the manager had parked because no operation started in its last
    interval, and cn1's new process answers NOT_OWNER until a round: an operation that rerouted
    without acting on the death count went on rerouting to cn1 until it gave up (CI, once). The
    restart comes 2.1 ms after the kill: just after a manager tick that found nothing started."""
    import cluster.supervisor
    monkeypatch.setattr(cluster.supervisor, "TICK_S", 1.0)
    _kill_and_restart(2.1, 2.0)


def test_reassignments_racing_with_writes_stay_linearizable():
    """A round every 100 us under 50 % updates: partitions change owners while writes are in
    flight (pause, drain, cache clear, subtable loads) and the history stays linearizable."""
    rack, res = colocated(LOAD, run(3.0), preset="a", interval_us=100, knob=False, offload_ratio=0.5,
                          rank_samples=0)             # rank every interval: counting noise reassigns
    assert check(rack.history_ops).verdict == "ok"
    st = client_stats(rack)
    assert max(s.node_rounds for s in st) >= 5
    assert sum(s.proxied_ops for s in st) > 0 and sum(s.paused_waits + s.reroutes for s in st) > 0


def test_a_reassignment_moves_only_what_it_must_out_of_the_cache():
    """A round drops the moved partitions' entries, keeps the rest, and refuses the install of a
    request for a moved partition that was out during the round."""
    import numpy as np
    from nodes.systems.flexkv.cache import ADDR, PAIR, NodeCache
    c = NodeCache(1 << 20, lease_ns=10**9)
    c.put(b"k0", PAIR, 0, 1, 11, b"v0", now=0)
    c.put(b"k1", ADDR, 1, 2, 22, None, now=0)
    token = c.token()                                  # a request out for partition 0, one for 1
    c.clear_partitions(np.array([True, False]))
    assert c.lookup(b"k0", 1) is None and c.lookup(b"k1", 1).word == 22
    assert not c.put(b"k2", PAIR, 0, 3, 33, b"v2", now=1, token=token)
    assert c.put(b"k3", PAIR, 1, 4, 44, b"v3", now=1, token=token)
    assert c.put(b"k2", PAIR, 0, 3, 33, b"v2", now=1, token=c.token())   # asked after the round


def test_a_round_under_a_hot_key_update_storm_drains_every_node_at_once():
    """YCSB A on a few hot keys: one-sided updates of a moved partition lose CAS races to the other
    nodes' updates of the same key until those nodes pause too. Every node is paused before the
    manager waits for any to drain, so a round lasts about as long as an operation, not until the
    load stops (it took most of the run when nodes were paused one after another)."""
    d = flexkv_dict(LOAD, run(3.0), preset="a", compute=4, threads=4, coroutines=8, records=2000, knob=False,
                    offload_ratio=0.5)
    d["memory"] = {"count": 1, "memory": "256MiB"}       # one memory node's atomics: the storm
    d["workload"]["zipfianitems"] = 10_000_000            # the paper's hottest keys
    rack = ColocatedRack(scenario_from_dict(d, source="t.toml"), history=0)
    rack.run()
    rounds = [e[3] for st in node_states(rack).values() for e in st.events if e[1] == "reassign"]
    # virtual ns: 0.48 ms here; 2.06 ms when the nodes were paused one after another
    assert rounds and max(rounds) < 1_000_000, rounds


def _hot_key_updates(**options):
    """YCSB A on 4 nodes over the paper's hottest keys (Zipfian 0.99 over 10 M items hashed onto
    2,000), co-located in virtual time, with its history."""
    d = flexkv_dict(LOAD, run(1.5), preset="a", compute=4, threads=2, coroutines=8, records=2000, knob=False,
                    rank_hotness=False, interval_us=200, **options)
    d["memory"] = {"count": 1, "memory": "256MiB"}
    d["workload"]["zipfianitems"] = 10_000_000
    rack = ColocatedRack(scenario_from_dict(d, source="t.toml"), history=50_000)
    rack.run()
    return rack, client_stats(rack)


def test_a_one_sided_update_that_loses_its_cas_is_overwritten_not_retried():
    """FUSEE's and Aceso's clients end an UPDATE whose slot CAS failed (last writer wins): the slot
    changed between the bucket READ and the CAS, so a write of the key committed within the
    update, which is linearized just before it. One failed CAS per overwritten update at most;
    with ``overwrite_on_conflict = false`` the same hot-key load retries (RACE's loop)."""
    rack, st = _hot_key_updates(offload_ratio=0.0)
    assert check(rack.history_ops).verdict == "ok"
    over, fails = sum(s.overwritten for s in st), sum(s.cas_retries for s in st)
    assert sum(s.proxied_ops for s in st) == 0
    assert over > 0 and fails == over                      # every failed CAS ended its update
    rack, st = _hot_key_updates(offload_ratio=0.0, overwrite_on_conflict=False)
    assert check(rack.history_ops).verdict == "ok"
    assert sum(s.overwritten for s in st) == 0 and sum(s.cas_retries for s in st) > over


def test_a_proxied_update_of_a_key_being_written_waits_for_that_commit_and_is_overwritten():
    """The proxy's key lock (§4.5: "concurrent writes to keys already in process will fail
    immediately, as in CAS"): an UPDATE that finds another write of the key under way is answered
    OVERWRITTEN once that write commits (never before: a get in between would see the value both
    replace), with no memory-node WRITE of its own and no retry; only other collisions are BUSY."""
    rack, st = _hot_key_updates(offload_ratio=1.0)
    assert check(rack.history_ops).verdict == "ok"
    over = sum(p.overwritten for p in node_states(rack).values())
    assert over > 0 and sum(s.proxied_ops for s in st) > sum(s.one_sided_ops for s in st)
    # the clients' count: the proxies' answers plus the one-sided losers before the first round
    assert sum(s.overwritten for s in st) == over + sum(s.cas_retries for s in st)
    assert sum(s.busy for s in st) < over                 # BUSY only when another key holds the slot
    rack, st = _hot_key_updates(offload_ratio=1.0, overwrite_on_conflict=False)
    assert check(rack.history_ops).verdict == "ok"
    assert sum(s.overwritten for s in st) == 0 and sum(s.busy for s in st) > 0


def test_proxy_coroutines_overlap_the_proxied_writes_memory_node_round_trips():
    """§4.5's coroutines on the proxies (``proxy_coroutines``, 8 by default): a write handler waiting
    for its memory-node WRITE lets the thread's next request run, so with every partition proxied
    and half the operations updates, one proxy thread of 8 coroutines serves clearly more than one
    of a single coroutine, and the history stays linearizable."""
    ops = {}
    for n in (1, 8):
        d = flexkv_dict(LOAD, run(1.0), preset="a", compute=2, threads=2, coroutines=8, records=512, knob=False,
                        rank_hotness=False, offload_ratio=1.0, proxy_threads=1, proxy_coroutines=n,
                        interval_us=200)
        rack = ColocatedRack(scenario_from_dict(d, source="t.toml"), history=50_000)
        res = rack.run()
        assert check(rack.history_ops).verdict == "ok"
        ops[n] = res.steps[-1].ops
    assert ops[8] > 1.2 * ops[1], ops


def test_a_writes_invalidations_go_to_every_sharer_at_once(monkeypatch):
    """§4.5's write workflow: the proxy "sends RPCs to those CNs on the sharer list to invalidate. In
    parallel, the proxy writes the new index slot to the MNs' index". With four compute nodes caching
    read-mostly pairs, a write whose key two or three other nodes share waits about as long for its
    invalidations as one with a single remote sharer (one round trip, not one per sharer)."""
    from nodes.systems.flexkv import proxy
    waits: dict = {}
    inner = proxy._invalidate

    def timed(ctx, st, key, sharers):
        t0 = ctx.env.now
        yield from inner(ctx, st, key, sharers)
        waits.setdefault(bin(sharers & ~(1 << st.ordinal)).count("1"), []).append(ctx.env.now - t0)
    monkeypatch.setattr(proxy, "_invalidate", timed)
    rack, _res = colocated(LOAD, run(2.0), compute=4, threads=2, coroutines=4, records=64, knob=False,
                           rank_hotness=False, offload_ratio=1.0)
    assert check(rack.history_ops).verdict == "ok"
    one = waits.get(1, [])
    more = waits.get(2, []) + waits.get(3, [])
    assert one and more, sorted((k, len(v)) for k, v in waits.items())
    mean = lambda xs: sum(xs) / len(xs)          # noqa: E731
    assert mean(more) < 1.5 * mean(one), (mean(one), mean(more))
    assert sum(p.dead_sharers for p in node_states(rack).values()) == 0


# -- replication (option replicas, §4.5 primary-backup) ------------------------------------------

def _copies_agree(fab, layout) -> tuple[int, int]:
    """(committed slots, their pairs) checked: every committed slot word of the primary index is
    in every backup of its slot, and every pair it names has the same bytes in every backup."""
    from nodes.systems.lib.replicas import Replicas
    from nodes.systems.race.layout import NODE_SHIFT, OFFSET_MASK, UNITS_SHIFT
    from shm.fabric import gaddr, gaddr_node, gaddr_offset
    tables, copies = layout["tables"], layout["index_copies"]
    reps = Replicas(fab, layout["block_copies"])
    slots = pairs = 0
    for i in range(tables.count):
        words = tables.words(fab, i)
        for j, w in enumerate(words.tolist()):
            if j % 8 == 0:
                continue                                   # bucket headers
            addr = gaddr(tables.node_of(i), tables.offset_of(i) + 8 * j)
            for b in copies.backup_gaddrs(addr):
                assert int(fab.memory[gaddr_node(b)].host64[gaddr_offset(b) // 8]) == w, (i, j)
            units = (w >> UNITS_SHIFT) & 0xFF
            if not units:
                continue                                   # empty or a tombstone
            slots += 1
            node, off = (w >> NODE_SHIFT) & 0xFF, (w & OFFSET_MASK) & ~63
            n = units * 64
            primary = bytes(fab.memory[node].host[off:off + n])
            for bn, bo in reps.copies_of(node, off):       # (a live pair's valid bit is clear on every copy)
                assert bn != node and bytes(fab.memory[bn].host[bo:bo + n]) == primary
            pairs += 1
    return slots, pairs


@pytest.mark.parametrize("ratio", [0.0, 0.5])
def test_replicas_put_every_pair_and_slot_on_every_copy(monkeypatch, ratio):
    """replicas = 2: after a bulk load and a run of YCSB A (one-sided at ratio 0, proxied and
    one-sided at 0.5), every committed slot and the pair it names are the same on the backups,
    on another memory node, and the history stays linearizable."""
    d = flexkv_dict({"action": "load", "bulk": True}, run(2.0), preset="a", knob=False, offload_ratio=ratio,
                    rank_hotness=False, replicas=2)
    rack = ColocatedRack(scenario_from_dict(d, source="t.toml"), history=50_000)
    seen = []
    publish = ColocatedRack._publish_memory
    # at the end of the run, while the rack's memory is still there
    monkeypatch.setattr(ColocatedRack, "_publish_memory",
                        lambda self, state: (publish(self, state), seen.append(_copies_agree(state.fabric,
                                                                                             state.layout))))
    rack.run()
    assert check(rack.history_ops).verdict == "ok"
    slots, pairs = seen[0]
    assert slots >= 256 and pairs == slots


def test_replicas_cost_writes_on_the_backup_memory_node():
    """The same YCSB A run with 2 copies WRITEs every pair and slot twice: more verbs reach the
    memory nodes, and updates wait for their backups (fewer operations in the same time)."""
    def run_with(r):
        d = flexkv_dict({"action": "load", "bulk": True}, run(2.0), preset="a", knob=False, offload_ratio=0.0,
                        rank_hotness=False, replicas=r)
        rack = ColocatedRack(scenario_from_dict(d, source="t.toml"), history=0)
        res = rack.run()
        return res.steps[-1]
    one, two = run_with(1), run_with(2)
    assert two.ops < one.ops


def test_more_replicas_than_memory_nodes_is_one_line():
    with pytest.raises(SpecError) as e:
        scenario_from_dict(flexkv_dict(LOAD, replicas=3), source="t.toml")
    assert "replicas = 3 needs 3 memory nodes" in str(e.value) and "\n" not in str(e.value)
