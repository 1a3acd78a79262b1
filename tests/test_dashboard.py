"""Tests for cluster.dashboard: the metric computation (RackMeter) from synthetic snapshots, the
sparkline, and both renderings into an in-memory console."""

from __future__ import annotations

import dataclasses
import io
import multiprocessing
import os
import time

import numpy as np
import pytest
from rich.console import Console

from cluster.dashboard import (
    Dashboard,
    PlainReporter,
    ProcUsage,
    RackMeter,
    ReporterStats,
    fit_label,
    fmt_bytes,
    fmt_mem,
    fmt_rate,
    fmt_speed,
    fmt_vtime,
    plain_line,
    render,
    sparkline,
)
from cluster.stats import (
    N_BUCKETS,
    N_KINDS,
    STATE_DONE,
    STATE_RUNNING,
    Counters,
    Gauges,
    ProcInfo,
    ProcSnapshot,
    StatsPlane,
    StepRecord,
    bucket_index,
)

INFO = {"rack": "rack-7", "system": "sherman", "profile": "cx6-200g", "workload": "ycsb-a zipf 0.99"}


def snap(name, *, vnow, ops, role="compute", pid=0, verbs=0, lat=2000, vstart=0, nic=0.0, label="run A",
         counters=Counters(), exit_code=None):
    hist = np.zeros((N_KINDS, N_BUCKETS), dtype=np.int64)
    hist[0, bucket_index(lat)] = ops
    zero = (0,) * (N_KINDS - 1)
    step = StepRecord(0, label, vstart, None, 0.0, None, (ops,) + zero, (0,) + zero,
                      (ops * lat,) + zero, (lat if ops else 0,) + zero, hist)
    return ProcSnapshot(index=0, name=name, role=role, pid=pid, state=STATE_RUNNING, started=0.0,
                        heartbeat_time=0.0, heartbeat_mono_ns=0, vnow_ns=vnow, events=0, verbs=verbs,
                        gauges=Gauges(nic, 0.0, 0.0), heartbeats=1, step=0, steps=(step,), counters=counters,
                        exit_code=exit_code)


def test_sparkline():
    assert sparkline(range(8)) == "▁▂▃▄▅▆▇█"
    assert sparkline([0, 0, 0]) == "▁▁▁"
    assert sparkline([None, 4, None, 8]) == " ▅ █"
    assert sparkline([8, 0, 4, 8], width=3) == "▁▅█"            # the last 3, scaled to their max
    assert sparkline([]) == ""


def test_formatting():
    assert fmt_vtime(1_234_567) == "1.235 ms" and fmt_vtime(12) == "12 ns" and fmt_vtime(None) == "–"
    assert fmt_vtime(2.5e9) == "2.500 s"
    assert fmt_speed(12e6) == "12.000 ms/s (83x slower)" and fmt_speed(None) == "–"
    assert fmt_speed(1.5e6, words=True) == ("1.500 ms of rack time per real second: the rack runs 667x slower "
                                            "than the hardware it models")
    assert fmt_speed(4e8) == "400.000 ms/s (2.5x slower)" and fmt_speed(2e9) == "2.000 s/s (2x faster)"
    assert fmt_rate(1.5e6) == "1.50 M" and fmt_rate(None) == "–"


def test_rack_meter_rates_from_deltas():
    m = RackMeter(history=4)
    # first sight: the current step's average (100 ops over 10 µs of virtual time = 10 Mops/s)
    v1 = m.update([snap("cn0", vnow=10_000, ops=100, verbs=0, vstart=0),
                   snap("mn0", role="memory", vnow=9_000, ops=0)], now_ns=0, phase="run")
    cn0, mn0 = v1.nodes
    assert cn0.kops == pytest.approx(10_000) and mn0.kops == 0
    assert v1.total_kops == pytest.approx(10_000)
    assert v1.speed is None and v1.verbs_per_s is None and cn0.verbs_per_s is None
    assert cn0.p50_us == pytest.approx(2.0, rel=0.07) and mn0.p50_us is None
    assert v1.vnow_ns == 10_000 and v1.ops == 100
    # half a real second later: +500 ops over +20 µs virtual (25 Mops/s), +1000 verbs
    v2 = m.update([snap("cn0", vnow=30_000, ops=600, verbs=1000, lat=8000),
                   snap("mn0", role="memory", vnow=29_000, ops=0)], now_ns=500_000_000, phase="run")
    cn0, mn0 = v2.nodes
    assert cn0.kops == pytest.approx(25_000) and v2.total_kops == pytest.approx(25_000)
    assert v2.speed == pytest.approx(40_000)                   # 20 µs virtual per 0.5 s real
    assert cn0.verbs_per_s == pytest.approx(2000) and v2.verbs_per_s == pytest.approx(2000)
    assert v2.elapsed_s == pytest.approx(0.5)
    assert v2.p99_us == pytest.approx(8.0, rel=0.07)
    # virtual time stood still: no rate rather than a division by zero
    v3 = m.update([snap("cn0", vnow=30_000, ops=600), snap("mn0", role="memory", vnow=29_000, ops=0)],
                  now_ns=1_000_000_000, phase="run")
    assert v3.nodes[0].kops is None and v3.speed == 0
    assert v3.nodes[0].history == (pytest.approx(10_000), pytest.approx(25_000), None)
    for i in range(3):
        v = m.update([snap("cn0", vnow=40_000 + i, ops=600)], now_ns=2_000_000_000 + i)
    assert len(v.nodes[0].history) == 4                        # bounded history


def test_rack_meter_usage_columns():
    m = RackMeter()
    v = m.update([snap("cn0", vnow=1, ops=0, pid=77), snap("cn1", vnow=1, ops=0, pid=0)], now_ns=0,
                 usage={77: (12.5, 64 << 20)})
    assert (v.nodes[0].cpu_pct, v.nodes[0].rss_mib) == (12.5, 64.0)
    assert (v.nodes[1].cpu_pct, v.nodes[1].rss_mib) == (None, None)


def _two_views():
    m = RackMeter()
    m.update([snap("cn0", vnow=10_000, ops=100, pid=1), snap("mn0", role="memory", vnow=10_000, ops=0)],
             now_ns=0, phase="load")
    return m.update([snap("cn0", vnow=30_000, ops=600, verbs=4000, nic=0.42, pid=1),
                     snap("mn0", role="memory", vnow=30_000, ops=0)],
                    now_ns=1_000_000_000, phase="run A")._replace(events=("      1.000 µs  kill  cn1  boom",))


def test_render_live_layout_once():
    view = _two_views()
    buf = io.StringIO()
    Console(file=buf, width=120, color_system=None).print(render(view, INFO))
    out = buf.getvalue()
    for s in ("rack-7", "sherman", "cx6-200g", "ycsb-a zipf 0.99", "run A", "cn0", "mn0", "memory",
              "kops/s", "p99 µs", "NIC %", "CPU %", "RSS MiB", "25000.0", "42", "boom", "Mops/s",
              "20.000 µs of rack time per real second: the rack runs 50,000x slower", "4.00 k", "█"):
        assert s in out, s


def test_plain_line():
    line = plain_line(_two_views())
    assert line.startswith("[run A] vtime 30.000 µs | 25.000 Mops/s | p50/p99 ")
    assert "/2.00 us" in line
    assert "speed 20.000 µs/s (50,000x slower)" in line and "verbs/s 4.00 k" in line


class Clock:
    def __init__(self):
        self.t = 0

    def __call__(self):
        return self.t


@pytest.fixture
def plane(prefix):
    p = StatsPlane.create([ProcInfo("mgr", "manager"), ProcInfo("cn0", "compute")], prefix=prefix)
    yield p
    p.close()


def test_plain_reporter_end_to_end(plane):
    buf = io.StringIO()
    clock = Clock()
    w = plane.writer("cn0")
    w.begin()
    w.step(0, 0, "run A")
    w.heartbeat(0, 0, 0)
    with PlainReporter(INFO, plane, console=Console(file=buf, width=200), interval_s=0.5, clock=clock) as rep:
        assert rep.update("run") is not None
        plane.log(5_000, "kill", "cn1", "SIGKILL by scenario")
        w.record_many([0] * 1000, [3000] * 1000)
        w.heartbeat(1_000_000, 10, 5000)
        clock.t = 100_000_000
        assert rep.update("run") is None                       # inside the interval: skipped
        rep.note("checker: 0 anomalies")
        clock.t = 600_000_000
        view = rep.update("run")
    out = buf.getvalue()
    assert "SIGKILL by scenario" in out and "checker: 0 anomalies" in out
    assert "1.000 Mops/s" in out                               # 1000 ops over 1 ms virtual
    assert view.nodes[1].kops == pytest.approx(1000)
    assert out.index("SIGKILL") < out.index("1.000 Mops/s")    # events come before the frame line
    st = rep.statistics()
    assert isinstance(st, ReporterStats)
    assert (st.mode, st.updates, st.skipped, st.events, st.notes) == ("plain", 2, 1, 1, 1)


def test_dashboard_auto_mode_and_live(plane):
    buf = io.StringIO()
    d = Dashboard(INFO, plane, console=Console(file=buf, width=120))
    assert not d.live and d.mode == "plain"                    # a StringIO is no terminal
    buf = io.StringIO()
    console = Console(file=buf, width=120, force_terminal=True, color_system=None)
    with Dashboard(INFO, plane, live=None, console=console, interval_s=0) as d:
        assert d.live
        w = plane.writer("cn0")
        w.begin()
        w.step(0, 0, "run A")
        w.record(0, 1500, True)
        w.heartbeat(10_000, 1, 2, nic_util=0.5)
        plane.log(1, "start", "mgr", "rack up")
        d.update("run")
        d.note("hello from the supervisor")
        d.update("run")
        frame = d.renderable()
    out = buf.getvalue()
    for s in ("rack-7", "cn0", "rack up", "hello from the supervisor", "nodes"):
        assert s in out, s
    assert frame is not None and d.statistics().mode == "live"


def test_dashboard_before_first_update(plane):
    d = Dashboard(INFO, plane, live=False, console=Console(file=io.StringIO()))
    with pytest.raises(RuntimeError, match="update"):
        d.renderable()


def test_bad_title_info(plane):
    with pytest.raises(ValueError, match="lacks profile, workload"):
        Dashboard({"rack": "r", "system": "s"}, plane, live=False)
    with pytest.raises(TypeError, match="dict"):
        PlainReporter(["rack"], plane)
    with pytest.raises(ValueError, match="interval_s"):
        PlainReporter(INFO, plane, interval_s=-1)


def test_proc_usage_tolerates_dead_pids():
    ctx = multiprocessing.get_context("fork")
    child = ctx.Process(target=lambda: None)
    child.start()
    child.join(30)
    u = ProcUsage()
    first = u.sample([os.getpid(), child.pid, 0])
    assert first[os.getpid()][0] is None and first[os.getpid()][1] > 0   # no CPU interval yet
    assert first[child.pid] == (None, None) and 0 not in first
    again = u.sample([os.getpid()])
    assert isinstance(again[os.getpid()][0], float)
    assert u.errors == 1


def _frame(view, width=160) -> str:
    buf = io.StringIO()
    Console(file=buf, width=width, color_system=None).print(render(view, INFO))
    return buf.getvalue()


def _row(out: str, first: str) -> str:
    """The node table's line whose first word is ``first``."""
    lines = out.splitlines()
    top = next(i for i, ln in enumerate(lines) if "role" in ln and "kops/s" in ln)     # the table's header
    return next(ln for ln in lines[top:] if ln.strip("│ ").split()[:1] == [first])


def test_a_node_the_supervisor_saw_die_shows_as_dead():
    view = RackMeter().update([snap("cn0", vnow=10_000, ops=100, pid=7, exit_code=-9),
                               snap("cn1", vnow=10_000, ops=100, pid=8)], now_ns=0)
    assert [n.state for n in view.nodes] == ["dead", "running"]
    out = _frame(view)
    assert "dead" in _row(out, "cn0") and "running" not in _row(out, "cn0")
    assert "running" in _row(out, "cn1")


def test_step_labels_are_shortened_not_cut_mid_word():
    assert fit_label("run default until stopped") == "run default ∞"
    assert fit_label("load 10,000 records (default)") == "load 10,000 (default)"
    assert fit_label("run a for 5 ms") == "run a for 5 ms"
    assert fit_label("run readmostly for 125.5 ms (warm)") == "run readmostly for…"  # at a word boundary
    assert len(fit_label("set profile_overrides.sync.window_ns = 2000")) == 24
    view = RackMeter().update([snap("cn0", vnow=10_000, ops=100, label="run default until stopped")], now_ns=0)
    for width in (160, 120):
        row = _row(_frame(view, width), "cn0")
        assert "run default ∞" in row and "stoppe" not in row


def test_rack_row_shows_p50_p99_p999_of_the_merged_compute_histograms():
    view = RackMeter().update([snap("cn0", vnow=10_000, ops=300, lat=2000),
                               snap("cn1", vnow=10_000, ops=100, lat=8000),
                               snap("mn0", role="memory", vnow=10_000, ops=0)], now_ns=0)
    assert view.p50_us == pytest.approx(2.0, rel=0.02)          # 300 of 400 operations took 2 µs
    assert view.p99_us == pytest.approx(8.0, rel=0.02) and view.p999_us == pytest.approx(8.0, rel=0.02)
    rack = _row(_frame(view), "rack").strip("│ ").split()
    assert rack[1:5] == ["40000.0", "2.00", "8.00", "8.00"], rack


def test_memory_occupancy_and_reclaimed_bytes_per_node_and_rack():
    mib = 1 << 20
    view = RackMeter().update([
        snap("cn0", vnow=1, ops=0, counters=Counters(bytes_reclaimed=3 * mib // 2)),
        snap("cn1", vnow=1, ops=0, counters=Counters(bytes_reclaimed=mib // 2)),
        snap("mn0", role="memory", vnow=1, ops=0, counters=Counters(mem_used=int(3.3 * mib), mem_capacity=8 * mib)),
        snap("mn1", role="memory", vnow=1, ops=0, counters=Counters(mem_used=mib, mem_capacity=8 * mib)),
    ], now_ns=0)
    assert (view.mem_used, view.mem_capacity, view.reclaimed) == (int(3.3 * mib) + mib, 16 * mib, 2 * mib)
    out = _frame(view)
    assert "41 % 3.3/8 MiB" in _row(out, "mn0") and "12 % 1/8 MiB" in _row(out, "mn1")
    assert "1.5 MiB" in _row(out, "cn0") and "512 KiB" in _row(out, "cn1")
    assert "27 % 4.3/16 MiB" in _row(out, "rack") and "2 MiB" in _row(out, "rack")
    assert fmt_bytes(0) == "0 B" and fmt_bytes(None) == "–" and fmt_mem(0, 0) == "–"
    assert fmt_mem(1 << 30, 4 << 30) == "25 % 1/4 GiB"
    assert fmt_mem(8_600_000, 1 << 30) == "1 % 8.2 MiB/1 GiB"      # not "0/1 GiB" (the rack row)


def test_device_panel_shows_core_busy_stalls_dma_and_drops_of_dpu_and_dpa_nodes():
    m = RackMeter()
    dpa0 = Counters(cpu_cores=16, cpu_busy_ns=0, dpa_threads=4, dpa_stall_ns=0, dma_bytes=0)
    dpa1 = dpa0._replace(cpu_busy_ns=16 * 5_000, dpa_threads=4, dpa_stall_ns=2 * 10_000, dma_bytes=12_500,
                         rx_queued=3, udp_dropped=7, udp_resends=2)
    m.update([snap("cn0", vnow=0, ops=0), snap("dpa0", vnow=0, ops=0, role="dpa", counters=dpa0),
              snap("dpu0", vnow=0, ops=0, role="dpu")], now_ns=0)
    view = m.update([snap("cn0", vnow=10_000, ops=5), snap("dpa0", vnow=10_000, ops=0, role="dpa", counters=dpa1),
                     snap("dpu0", vnow=10_000, ops=0, role="dpu")], now_ns=10**9)
    d = next(n.device for n in view.nodes if n.name == "dpa0")
    assert d.busy == 0.5 and d.stalled == 0.5 and d.dma_gbps == 10.0 and d.threads == 4
    assert next(n.device for n in view.nodes if n.name == "cn0") is None        # no actors, no device row
    buf = io.StringIO()
    Console(file=buf, width=160, color_system=None).print(render(view, INFO))
    out = buf.getvalue()
    for s in ("devices", "DPA threads", "stalled %", "DMA Gbit/s", "ring depth", "UDP drops", "dpa0", "dpu0"):
        assert s in out, s


# -- issue 41: what the first and the last frame show ----------------------------------------------


def test_rates_count_the_current_steps_operations_only(plane):
    """A bulk load records its 10,000 inserts in no virtual time; an update in the run step whose
    previous update came before the load counted them in its rate (3.5x the steady rate on the
    first frame, a spike starting every sparkline). Rates now count the current step's operations:
    the step's average when it is new since the last update, its delta afterwards."""
    w = plane.writer("cn0")
    w.begin()
    w.heartbeat(0, 0, 0)
    m = RackMeter()
    m.update(plane.snapshot(), now_ns=0, phase="starting")
    w.step(0, 0, "bulk-load 10,000 records")
    w.record_many([2] * 10_000, [0] * 10_000)               # inserts, 0 ns each (nothing timed)
    w.heartbeat(600, 0, 0)
    load = RackMeter().update(plane.snapshot(), now_ns=0, phase="load")
    assert (load.nodes[1].p50_us, load.nodes[1].p99_us, load.nodes[1].p999_us) == (None, None, None)
    assert "0.00" not in _row(_frame(load), "cn0")          # untimed latencies: "–", not 0.00
    w.step(1, 600, "run A")
    w.record_many([0] * 1000, [10_000] * 1000)
    w.heartbeat(1_000_600, 1000, 4000)                      # 1000 ops in 1 ms: 1,000 kops/s
    w.record_many([0] * 500, [10_000] * 500)                # done after that heartbeat's virtual time
    first = m.update(plane.snapshot(), now_ns=500_000_000, phase="run")
    assert first.nodes[1].kops == pytest.approx(1000)       # was (10,000 + 1500) / 1 ms: 11.5x
    assert first.total_kops == pytest.approx(1000)
    assert (first.step_ops, first.ops) == (1500, 11_500)    # the header counts live
    assert "ops 1,500 in this step, 11,500 in all" in _frame(first)
    w.record_many([0] * 500, [10_000] * 500)
    w.heartbeat(2_000_600, 2000, 8000)
    steady = m.update(plane.snapshot(), now_ns=1_000_000_000, phase="run")
    assert steady.nodes[1].kops == pytest.approx(1000)
    assert steady.nodes[1].history == (None, pytest.approx(1000), pytest.approx(1000))   # no spike


def test_the_last_frame_keeps_cpu_rss_and_rates_of_nodes_that_ended():
    """The supervisor draws the last frame after every node exited: psutil finds no process and
    no virtual time has passed since the update before. It showed "–" for CPU %, RSS and the rates
    and "0x" for the speed; they keep the last measured values."""
    ctx = multiprocessing.get_context("fork")
    child = ctx.Process(target=time.sleep, args=(30,))
    child.start()
    try:
        u = ProcUsage()
        u.sample([child.pid])
        measured = u.sample([child.pid])[child.pid]
        assert measured[0] is not None and measured[1] > 0
    finally:
        child.kill()
        child.join(30)
    assert u.sample([child.pid])[child.pid] == measured     # gone: the last values
    assert u.sample([child.pid])[child.pid] == measured and u.errors == 1
    m = RackMeter()
    m.update([snap("cn0", vnow=10_000, ops=100, verbs=0)], now_ns=0)
    run = m.update([snap("cn0", vnow=30_000, ops=600, verbs=1000)], now_ns=500_000_000)
    done = dataclasses.replace(snap("cn0", vnow=30_000, ops=600, verbs=1000), state=STATE_DONE)
    last = m.update([done], now_ns=600_000_000)
    assert last.nodes[0].state == "done"
    assert last.nodes[0].kops == run.nodes[0].kops == pytest.approx(25_000)
    assert last.nodes[0].verbs_per_s == run.nodes[0].verbs_per_s and last.speed == run.speed
    assert last.nodes[0].history == run.nodes[0].history    # no sample for a node that stood still
    # a node still running whose virtual time stood still has no rate (it is waiting)
    assert m.update([snap("cn0", vnow=30_000, ops=600)], now_ns=700_000_000).nodes[0].kops is None


def test_a_dpu_without_actors_shows_its_cores():
    """dpu0 of examples/devices.toml runs no actor (it only receives mirrored datagrams) and showed
    "cores –" although the file sets cores = 4: the node publishes its modelled cores."""
    from cluster.scenario import load_scenario
    from nodes.actors import modelled_cores
    spec = load_scenario(os.path.join(os.path.dirname(__file__), "..", "examples", "devices.toml")).spec
    assert modelled_cores(spec, "dpu")[0] == 4
    view = RackMeter().update([snap("dpu0", vnow=0, ops=0, role="dpu", counters=Counters(cpu_cores=4))], now_ns=0)
    lines = _frame(view).splitlines()
    top = next(i for i, ln in enumerate(lines) if "DPA threads" in ln)     # the device table's header
    row = next(ln for ln in lines[top:] if ln.strip("│ ").startswith("dpu0"))
    assert row.strip("│ ").split()[:4] == ["dpu0", "dpu", "4", "–"], row   # 4 cores, busy unknown at first sight
