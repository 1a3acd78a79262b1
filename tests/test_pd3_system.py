"""PD3's hash map on a rack: its modes, the host's RX queues, the freshness rules, the notices.

The conformance suite and ``dmrack check`` cover the KV semantics (tests/test_conformance.py runs
every check on ``pd3``); these tests cover what is PD3's own: the miss paths, the prefetched items
that must never be taken stale, the eviction notices, a malformed packet, the Transfer Engine's
wake-up, the latency client of Figs. 14-15, the reproduction's rows.
"""

from __future__ import annotations

import numpy as np
import pytest

from cluster.experiments import pd3 as rp
from cluster.experiments.pointpool import SharedPoints
from nodes.systems.pd3 import hashmap as hm
from nodes.systems.pd3.host_view import HostView
from nodes.systems.pd3.loading_zone import LoadingZone
from nodes.systems.pd3.prefetcher import Prefetcher
from nodes.systems.pd3.transfer import EVICT_KEYS, OP_EVICT, decode_evict, encode_evict

# two application threads under 64 requests in flight: busy enough that requests queue on the host,
# which is when the DPU's prefetches arrive first
TINY = dict(keys=4000, window_us=(20, 40), client_threads=8, coroutines=8, app_threads=2)


@pytest.fixture(scope="module")
def points():
    return {m: rp.point(m, "uniform", **TINY) for m in ("sync", "leap", "redy", "pd3-noprefetch", "pd3", "local")}


def test_every_mode_serves_requests(points):
    for mode, r in points.items():
        assert r["ops"] > 0 and r["mops"] > 0, mode
        assert r["p50"] <= r["p99"], mode


def test_no_operation_fails(points):
    assert all(r["failed"] == 0 for r in points.values()), {m: r["failed"] for m, r in points.items()}


def test_threads_reading_the_same_few_keys_all_get_values():
    # 200 keys, Zipfian, 128 requests in flight over 4 threads: packets wait for each other's fetches of
    # one key (a get that found another thread bringing its key in once returned "missing")
    for mode in ("pd3", "redy"):
        r = rp.point(mode, "zipf", keys=200, window_us=(10, 60), client_threads=16, coroutines=8, app_threads=4,
                     cache_fraction=0.1)
        assert r["ops"] > 0 and r["failed"] == 0, (mode, r["failed"])


def test_only_pd3_takes_items_from_the_loading_zone(points):
    assert points["pd3"]["zone_hits"] > 0
    assert all(points[m]["zone_hits"] == 0 for m in points if m != "pd3")
    assert points["local"]["misses"] == 0


def test_redy_spends_an_io_core_per_application_thread_and_pd3_none(points):
    assert points["redy"]["host_cores"] == 2 * 2
    assert points["pd3"]["host_cores"] == 2
    assert points["redy"]["io_busy"] > 0 and points["pd3"]["io_busy"] == 0


def test_the_host_has_one_rx_queue_per_application_thread():
    from cluster.scenario import scenario_from_dict
    from cluster.rack import compile_scenario
    from cluster.correctness.conformance import with_rack_tables
    from nodes.actors import default_queues
    from nodes.systems import get_system
    system = get_system("pd3")
    d = with_rack_tables(system, {"rack": {"name": "q", "profile": "bf3"}, "compute": {"count": 1},
                                  "memory": {"count": 1, "cores": 1}, "system": {"name": "pd3", "app_threads": 3},
                                  "workload": {"preset": "c", "recordcount": 100}})
    c = compile_scenario(scenario_from_dict(d, source="test"))
    decls = {n.name: n for n in c.nodes}
    assert default_queues(c.spec, decls["cn0"], c.system) == ["cn0.a0", "cn0.a1", "cn0.a2"]
    assert default_queues(c.spec, decls["mn0"], c.system) == ["mn0.rx"]


def test_an_item_fetched_before_the_last_write_back_is_never_taken(fabric_dma):
    fabric, env, dma = fabric_dma
    lz = LoadingZone.layout(fabric, "host0", 4096)

    def dpu():
        yield lz.produce(dma, [(7, b"old-value", 3)])        # fetched in batch 3
    env.process(dpu())
    env.run()
    # the host wrote key 7 back in batch 5: the item is older than its data -- thrown away
    assert lz.check_and_return(None, 7, fresh_from=5) is None
    assert lz.statistics().stale == 1
    assert lz.check_and_return(None, 7) is None                # and it is gone for good

    lz2 = LoadingZone.layout(fabric, "host0", 4096)

    def dpu2():
        yield lz2.produce(dma, [(7, b"new-value", 5)])        # fetched in the write-back's batch: after it
    env.process(dpu2())
    env.run()
    assert lz2.check_and_return(None, 7, fresh_from=5) == b"new-value"


def test_a_scan_throws_away_items_of_keys_the_host_is_reading_itself(fabric_dma):
    fabric, env, dma = fabric_dma
    lz = LoadingZone.layout(fabric, "host0", 4096)

    def dpu():
        yield lz.produce(dma, [(1, b"a", 2), (2, b"b", 2), (3, b"c", 2)])
    env.process(dpu())
    env.run()
    # key 1: read by the host in batch 4 (floor 5); key 2: being read now; key 3: wanted
    assert lz.check_and_return(None, 3, floor={1: 5}, pending={2}) == b"c"
    assert lz.statistics().stale == 2                          # both claimed, so cleaning can pass them


def test_the_host_reading_a_key_makes_its_prefetch_in_flight_stale():
    pf = Prefetcher(HostView(64, 2))
    assert pf.on_client_request([(9, 0)]) == [9]               # a read: prefetch it
    pf.on_host_read([9])                                       # the host missed and reads it itself
    assert pf.on_prefetch_response(9, True) is False           # the item comes too late: not delivered
    assert pf.host_view.contains(9)                            # and the key is the host's from (1) on
    assert pf.on_client_request([(9, 0)]) == []


def test_the_latency_client_times_whole_batches_each_connection_on_one_thread():
    # Figs. 14/15 as the artifact measures them: a connection sends a batch at once and waits for
    # every reply; the host serves a connection on one application thread
    r = {(m, c): rp.point(m, "uniform", keys=4000, client_threads=c, app_threads=2, batch=128, batches=3)
         for m in ("sync", "pd3") for c in (1, 2)}
    for (m, c), x in r.items():
        assert x["ops"] == c * 128 * 2 and x["failed"] == 0 and x["resent"] == 0, (m, c)
        assert x["threads_used"] == c, (m, c)
        assert x["p50"] <= x["p99"]
    # sync RDMA pays a round trip per miss in series; PD3's host takes most items prefetched
    assert r["sync", 1]["p50"] > 2 * r["pd3", 1]["p50"]
    assert r["pd3", 1]["zone_hits"] > r["pd3", 1]["misses"]
    with pytest.raises(ValueError, match="batches >= 2"):
        rp.point("pd3", "uniform", keys=4000, client_threads=1, batch=128, batches=1)


def test_a_redy_read_that_lands_while_its_thread_waits_in_select_is_seen_at_the_timeout():
    # the artifact's hash-map server moves Redy's finished reads into its send buffer only when its
    # connection loop turns: a request arriving, or select()'s 0.1 ms timeout. A batch whose reads
    # are in flight with nothing left to read waits for the timeout; under load it never does
    from nodes.systems.pd3.system import SELECT_TIMEOUT_NS
    lone = rp.point("redy", "uniform", keys=4000, client_threads=1, app_threads=1, batch=128, batches=3)
    assert SELECT_TIMEOUT_NS / 1000 <= lone["p50"] < 2 * SELECT_TIMEOUT_NS / 1000
    busy = rp.point("redy", "uniform", **TINY)
    assert busy["p99"] < SELECT_TIMEOUT_NS / 1000


def test_a_ring_the_engine_has_not_polled_for_always_wakes_it():
    # the Transfer Engine's loop waits on what DmaFront.waits() gives, leaving out events processed
    # before it waits. A host ring that came while an empty poll was in flight (the bell fired and
    # was processed, nobody waiting on it) must still wake it: the request stalled until the
    # client's resend, 500 us, when a burst of packets met one application thread
    from shm.sim.env import Environment
    from nodes.systems.pd3.transfer import DmaFront
    env = Environment()
    front = DmaFront(None, None, None, 0, 0, 0)
    front.doorbell(env)
    assert [ev.triggered for ev in front.waits()] == [False]      # nothing rung: the TE parks
    front.ring()
    env.run()                                                      # the bell fired with nobody waiting
    assert not front.parked()
    assert any(not ev.processed for ev in front.waits()), "a ring owed a poll would be lost"
    woke = []
    env.process(_wait_any(front.waits(), woke))
    env.run()
    assert woke == [0]                                             # at once, not at the next ring


def _wait_any(events, woke):
    from shm.sim.env import any_of
    yield any_of(events[0].env, events)
    woke.append(events[0].env.now)


def test_eviction_notices_round_trip_and_refuse_bad_sizes():
    keys = [1, 2, 3, 2**63, 5, 6]
    rec = encode_evict(keys)
    assert len(rec) == 56 and rec[0] == OP_EVICT and decode_evict(rec) == keys
    with pytest.raises(ValueError, match="1..6 keys"):
        encode_evict([])
    with pytest.raises(ValueError, match="1..6 keys"):
        encode_evict(range(EVICT_KEYS + 1))


def test_request_packets_round_trip_and_the_parser_maps_ops():
    pkt = hm.encode_request(5, [(hm.GET, 1, b""), (hm.UPDATE, 2, b"xy"), (hm.DELETE, 3, b"")])
    assert hm.decode_request(pkt) == (5, [(hm.GET, 1, b""), (hm.UPDATE, 2, b"xy"), (hm.DELETE, 3, b"")])
    assert hm.PacketParser().parse(pkt) == [(1, 0), (2, 1), (3, 2)]
    p = hm.PacketParser()
    assert p.parse(b"\x01\x00") == [] and p.statistics().malformed == 1
    with pytest.raises(ValueError):
        hm.decode_request(pkt[:12])                            # cut inside the second request


def test_reproduce_rows_on_a_tiny_rack(monkeypatch):
    # the hash map with 256 requests in flight: every application thread has requests waiting, as at
    # the paper's load (fewer leave Redy's threads waiting in select(), the test above)
    for app, keys, clients in (("hashmap", 4000, (16, 16)), ("pages", 1000, (8, 4)), ("garnet", 4000, (32, 1))):
        monkeypatch.setitem(rp.APPS, app, dict(rp.APPS[app], keys={True: keys, False: keys}, clients=clients,
                                               client_nodes=1, window={True: (20, 60), False: (20, 60)}))
    shared = SharedPoints()                     # fig18 reads fig10's racks, as in one run
    rows = rp.fig10(True, None, shared=shared) + rp.fig18(True, None, shared=shared)
    by = {(r.experiment, r.series): r for r in rows}
    assert by["fig10", "PD3 / sync RDMA"].published == 26.0 and by["fig10", "PD3 / sync RDMA"].emulated > 1
    assert by["fig10", "Redy / sync RDMA"].emulated > 1
    assert by["fig18", "PD3 / all local"].published == 0.9
    assert all(r.emulated is not None for r in rows if r.metric == "Mops")
    assert {r.x for r in rows if r.experiment == "fig18"} == {"hash map", "page server", "Garnet", "3 applications"}
    # §8.4's bounds: without prefetching no better than the best baseline, PD3 within 10 % of local
    assert {r.kind for r in rows if r.series.startswith("PD3 w/o prefetching /")} == {"at most"}
    assert by["fig18", "PD3 / all local"].kind == "at least"


@pytest.fixture
def fabric_dma():
    from shm.sim.env import Environment
    from shm.dma import DmaEngine
    from shm.fabric import Fabric, NodeSpec
    from shm.profile import load_profile
    from shm.segment import new_prefix
    from shm.verbs import VerbsHost
    fabric = Fabric.create(load_profile("bf3"), [NodeSpec("host0", "compute", 1 << 20),
                                                 NodeSpec("dpu0", "dpu", 1 << 20, nic_of="host0")],
                           prefix=new_prefix())
    try:
        env = Environment()
        yield fabric, env, DmaEngine(VerbsHost(fabric, env), "dpu0", "host0")
    finally:
        fabric.close()


# -- the page server ---------------------------------------------------------------------------

PAGES = dict(keys=2000, window_us=(100, 400), client_threads=8, coroutines=4, app_threads=2, app="pages")


@pytest.fixture(scope="module")
def pages():
    return {m: rp.point(m, "uniform", **PAGES) for m in ("sync", "pd3")}


def test_the_page_server_serves_4_kb_pages_and_pd3_takes_them_from_the_loading_zone(pages):
    for m, r in pages.items():
        assert r["ops"] > 0 and r["failed"] == 0, m
    # its page handling keeps requests queued on the host, so the DPU's prefetches arrive first
    assert pages["pd3"]["zone_hits"] > pages["pd3"]["misses"]
    assert pages["pd3"]["mops"] > pages["sync"]["mops"]


def test_reading_a_page_costs_its_lines_streamed_not_one_latency_each():
    from nodes.systems.pd3.loading_zone import copy_ns
    from shm.profile import load_profile
    bf3 = load_profile("bf3")
    c = bf3.coherence
    assert copy_ns(bf3, 8) == round(c.dma_line_ns)                    # one line: its latency
    page = copy_ns(bf3, 4096)
    assert round(c.dma_line_ns) < page < 64 * c.dma_line_ns           # 64 lines, streamed behind the first
    assert copy_ns(bf3, 4096, first="memory") - page == round(c.memory_ns - c.dma_line_ns)
    assert copy_ns(bf3, 0) == 0


def test_the_latency_ranges_are_over_all_four_figures_and_each_figure_gives_a_direction(monkeypatch):
    """§8.2's "1.5x to 11x ... across all the applications": a figure's own cut is a direction row
    (PD3 the lowest, no verdict), the smallest and largest over every figure's points sit beside
    the range's ends (``latency-range``). Synthetic points: PD3 at 10 us everywhere, the others at
    a per-figure multiple."""
    from cluster.experiments.rows import verdict
    cut = {"pages": 1.2, "garnet": 3.0}

    def fake_points(specs, progress, jobs, quick, shared):
        out = {}
        for s in specs:
            mode, app = s[0], s[3]
            conns = dict(s[4]).get("client_threads", 1) if len(s) > 4 else 1
            k = cut.get(app, 2.0 * conns)                  # the hash map: 2x at 1 connection, 16x at 8
            base = 10.0 if mode == "pd3" else 10.0 * k * (1.5 if mode == "sync" else 1.0)
            out[s] = {"p50": base, "p99": 2 * base}
        return out
    monkeypatch.setattr(rp, "_points", fake_points)
    rows = {(r.experiment, r.series): r for r in rp.latency_range(True, None)}
    assert rows["latency-range", "best other p50 / PD3 p50, smallest"].emulated == 1.2     # the page server
    assert rows["latency-range", "worst other p50 / PD3 p50, largest"].emulated == 24.0    # 8 connections, sync
    assert rows["latency-range", "best other p50 / PD3 p50, smallest"].published == 1.5
    fig16 = {r.series: r for r in rp.fig16(True, None)}
    best = fig16["best other p50 / PD3 p50"]
    assert best.kind == "direction" and best.emulated == 1.2 and verdict(vars(best)) is None
    assert fig16["worst other p50 / PD3 p50"].published is None
