"""PD3's Garnet-like store: the hybrid log's rules, RESP on the wire, the runs of the reproduction.

The conformance suite runs on it here through its RESP client (``dmrack check --system pd3 --option
app=garnet`` adds the multi-process stress); the rest covers what is the store's own.
"""

from __future__ import annotations

import numpy as np
import pytest

from cluster.correctness.conformance import CHECKS
from cluster.experiments import pd3 as rp
from nodes.systems import get_system
from nodes.systems.pd3.garnet import MUTABLE_FRACTION, HybridLogHost, encode_get, encode_set
from shm.profile import load_profile
from workloads.resp import RespError, encode_command


def make_log(items=10, mode="pd3"):
    return HybridLogHost(cache_items=items, slot_bytes=32, region=0, mode=mode, cpu=load_profile("bf3").cpu)


@pytest.mark.parametrize("check", list(CHECKS))
def test_the_store_passes_the_conformance_suite_through_resp(check):
    CHECKS[check](get_system("pd3"), {"app": "garnet"})


# -- the hybrid log ---------------------------------------------------------------------------

def test_a_set_in_the_mutable_region_is_in_place_and_one_past_it_appends():
    log = make_log(10)
    for k in range(10):
        log.write(k, b"v")
    assert log.tail == 10 and log.n["in_place"] == 0
    log.write(9, b"w")                            # the newest record: mutable, in place
    assert log.tail == 10 and log.n["in_place"] == 1 and log.cache[9] == b"w"
    oldest_mutable = 10 - int(MUTABLE_FRACTION * 10)
    log.write(oldest_mutable - 1, b"w")           # just below the mutable region: read-copy-update
    assert log.tail == 11 and log.seq_of[oldest_mutable - 1] == 10


def test_only_the_latest_dirty_version_of_a_key_spills():
    log = make_log(4)                             # mutable region: the newest 3 records
    log.load_cached(7, b"clean")                  # seq 0, clean (preloaded)
    out = log.write(1, b"a") + log.write(2, b"a") + log.write(3, b"b")    # seqs 1-3
    out += log.write(4, b"c")                     # seq 4: the clean 7 leaves memory, announced
    assert out == [] and log.dropped == [7]
    out += log.write(1, b"a2")                    # seq 1 < 5 - 3: read-only, so a new version (seq 5),
    assert log.seq_of[1] == 5 and out == []       # and seq 1 leaves memory as garbage: nothing written
    assert log.n["garbage"] == 1
    out += log.write(5, b"d")                     # seq 6: key 2's only version leaves, dirty
    assert out == [(2, b"a")] and 2 in log.flushing and 2 not in log.cache
    assert log.cache[1] == b"a2"


def test_a_record_read_from_remote_memory_is_not_brought_back():
    log = make_log(4)
    assert log.install(42, b"fetched", dirty=False) == []
    assert not log.touch(42) and 42 not in log.cache


def test_a_clean_record_leaving_memory_is_announced_only_to_pd3():
    for mode, announced in (("pd3", [1]), ("sync", [])):
        log = make_log(1, mode)
        log.load_cached(1, b"x")
        log.write(2, b"y")
        assert log.dropped == announced, mode


# -- RESP on a rack ------------------------------------------------------------------------------

def _garnet_rack(script):
    """A tiny co-located Garnet rack (the reproduction's build, 2 application threads); runs
    ``script(env, cli, co)`` in one client coroutine and returns what it returns."""
    from cluster.correctness.conformance import with_rack_tables
    from cluster.rack import RackState, compile_scenario
    from cluster.scenario import scenario_from_dict
    from nodes.actors import actor_contexts, rack_udp, start_actors
    from shm.sim.env import Environment
    from nodes.systems import get_system
    from shm.coro import NodeRdma
    from shm.verbs import VerbsHost
    system = get_system("pd3")
    d = with_rack_tables(system, {
        "rack": {"name": "garnet-test", "profile": "bf3"},
        "compute": {"count": 1, "threads": 1, "coroutines": 1, "memory": "64MiB"},
        "memory": {"count": 1, "memory": "64MiB", "cores": 1},
        "system": {"name": "pd3", "mode": "pd3", "app": "garnet", "app_threads": 2, "value_max": 64,
                   "cache_fraction": 0.5},
        "workload": {"preset": "c", "recordcount": 64}})
    compiled = compile_scenario(scenario_from_dict(d, source="test garnet"))
    compiled.system = system
    out = {}
    with RackState.create(compiled, processes=False) as state:
        env = Environment(seed=1)
        host = VerbsHost(state.fabric, env)
        udp = rack_udp(state, host)
        start_actors(system, actor_contexts(state, env, host, udp=udp))
        node = NodeRdma(host, "cl0")
        node.udp = udp
        th = node.thread()
        cli = system.client(state.fabric, state.layout, th, compiled.options)

        def run():
            out["value"] = yield from script(env, cli, th.coroutine())
        env.process(run())
        env.run(until=2_000_000)
    return out["value"]


def test_resp_commands_and_a_malformed_request_that_leaves_the_connection_usable():
    def script(env, cli, co):
        got = []
        got.append((yield from cli.command(co, encode_set(b"k1", b"v1"))))
        got.append((yield from cli.command(co, encode_get(b"k1"))))
        got.append((yield from cli.command(co, encode_set(b"k1", b"v2", "NX"))))     # exists: nil
        got.append((yield from cli.command(co, b"*2\r\n$3\r\nGET\r\n$2\r\nk")))       # cut short
        got.append((yield from cli.command(co, b"GET k1\r\n")))                       # inline: refused
        got.append((yield from cli.command(co, encode_command("HSET", "h", "f", "v"))))
        got.append((yield from cli.command(co, encode_command("GET"))))
        got.append((yield from cli.command(co, encode_get(b"k1"))))                  # still serving
        got.append((yield from cli.command(co, encode_command("DEL", "k1", "nope"))))
        got.append((yield from cli.command(co, encode_get(b"k1"))))
        got.append((yield from cli.command(co, encode_command("PING"))))
        return got
    got = _garnet_rack(script)
    assert got[0] == "OK" and got[1] == b"v1" and got[2] is None
    assert isinstance(got[3], RespError) and got[3].startswith("ERR Protocol error")
    assert isinstance(got[4], RespError) and got[4].startswith("ERR Protocol error")
    assert got[5] == "ERR unknown command 'HSET'" and isinstance(got[5], RespError)
    assert got[6] == "ERR wrong number of arguments for 'get' command"
    assert got[7] == b"v1" and got[8] == 1 and got[9] is None and got[10] == "PONG"


# -- the reproduction's Garnet runs -----------------------------------------------------------

SMALL = dict(keys=4000, window_us=(20, 60), client_threads=32, coroutines=1, app_threads=2, client_nodes=1)


@pytest.fixture(scope="module")
def garnet():
    return {m: rp.point(m, "uniform", app="garnet", **SMALL) for m in ("sync", "redy", "pd3", "local")}


def test_every_mode_serves_the_store_without_failures(garnet):
    for m, r in garnet.items():
        assert r["ops"] > 0 and r["failed"] == 0, m


def test_pd3_takes_the_store_from_the_loading_zone_and_leads_the_baselines(garnet):
    st = garnet["pd3"]["stages"]
    assert st["consumed"] > st["misses"]
    assert garnet["pd3"]["mops"] > garnet["sync"]["mops"] > garnet["redy"]["mops"]


def test_the_stages_of_a_get(garnet):
    # a hit is Fig. 19's process + respond; a miss waits for its record longer on Redy than on sync
    assert garnet["local"]["stages"]["hit_ns"] == 500 and garnet["local"]["stages"]["misses"] == 0
    assert garnet["redy"]["stages"]["fetch_ns"] > garnet["sync"]["stages"]["fetch_ns"] > 0
    assert 0 < garnet["pd3"]["stages"]["consume_ns"] < 500


def test_a_loading_zone_too_small_drops_prefetches_and_loses_throughput():
    small = rp.point("pd3", "uniform", app="garnet", zone_kib=1, **dict(SMALL, client_threads=64))
    big = rp.point("pd3", "uniform", app="garnet", zone_kib=64, **dict(SMALL, client_threads=64))
    assert small["te"]["dropped"] > 0 == big["te"]["dropped"]
    assert small["mops"] < big["mops"]
