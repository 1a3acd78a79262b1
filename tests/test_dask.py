"""cluster.experiments.pointpool's Dask backend (dmrack reproduce --dask): the points of a sweep as
tasks on a dask.distributed cluster give what --jobs gives; a point whose worker dies is retried
once and then reported without losing the others; a point may start processes on a worker."""

from __future__ import annotations

import multiprocessing
import os
import socket
import sys
import threading
import time
from types import SimpleNamespace

import psutil
import pytest

from cluster.experiments import pointpool
from cluster.experiments.pointpool import PointsFailed, map_points
from shm.segment import list_segments, owner_pid_of


# --- point functions (module level: workers import them from tests.test_dask) ------------------------

def _times_ten(x):
    return x * 10


def _raises_or_dies(x, log):
    """Point 0 raises, point 2 kills its worker (as a crash or the OOM killer would); each attempt
    of theirs is logged with its process id. The others take a moment, so that point 0 has
    failed before point 2 starts: a worker that dies also loses the reports it had not sent yet,
    and the points they were about would run again."""
    if x in (0, 2):
        with open(log, "a") as f:
            f.write(f"{x} {os.getpid()}\n")
        if x == 2:
            os._exit(17)
        raise ValueError(f"point {x} is bad")
    time.sleep(0.3)
    return x * 10


def _child_exit_code(code):
    """Start a process and return its exit code, as a process rack does with its nodes."""
    child = multiprocessing.get_context("fork").Process(target=os._exit, args=(code,))
    child.start()
    child.join()
    return child.exitcode


def _process_rack(seed):
    """A rack of node processes under a supervisor, run to its end: its exit status and the
    operations of its steps."""
    from cluster.scenario import scenario_from_dict
    from cluster.supervisor import Supervisor
    spec = {"rack": {"name": "t", "profile": "cx6-200g", "seed": seed},
            "compute": {"count": 1, "threads": 1, "coroutines": 2, "memory": "8MiB"},
            "memory": {"count": 1, "memory": "16MiB"}, "system": {"name": "race"},
            "workload": {"preset": "a", "recordcount": 200, "keysize": 8, "valuesize": 8},
            "step": [{"action": "load"}, {"action": "run", "duration_ms": 0.1}]}
    sup = Supervisor(scenario_from_dict(spec, source="test_dask"), quiet=True, dashboard=False)
    status = sup.run()
    return status, [s.ops for s in sup.results.steps]


def _source():
    import cluster
    return cluster.__file__


# --- a LocalCluster of two worker processes for the module -----------------------------------------

@pytest.fixture(scope="module")
def dask2():
    """An open Dask backend of two one-thread worker processes (not active: tests activate it).
    Afterwards: no process of it is left (the resource tracker multiprocessing's spawn started for
    the workers included) and no shared-memory segment of its workers."""
    pytest.importorskip("distributed")
    from multiprocessing import resource_tracker
    tracker_was_running = resource_tracker._resource_tracker._pid is not None
    segments_before = set(list_segments())
    b = pointpool.DaskBackend("local:2")
    pids = set()
    try:
        b.pids = pids
        pids.update(b.client.run(os.getpid).values())
        yield b
        pids.update(b.client.run(os.getpid).values())
    finally:
        b.close()
    if not tracker_was_running:
        resource_tracker._resource_tracker._stop()
    deadline = time.monotonic() + 10
    while psutil.Process().children(recursive=True) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not psutil.Process().children(recursive=True)
    left = [n for n in set(list_segments()) - segments_before if owner_pid_of(n) in pids]
    assert not left, f"the workers left shared-memory segments behind: {left}"


def test_workers_import_this_dmrack_and_listen_on_localhost_only(dask2):
    assert set(dask2.client.run(_source).values()) == {_source()}
    assert dask2.address.startswith("tcp://127.0.0.1:")
    assert all(w.startswith("tcp://127.0.0.1:") for w in dask2.client.nthreads())
    assert dask2.threads() == 2


def test_fresh_racks_on_dask_give_the_rows_of_jobs_2(dask2):
    """Co-located racks are deterministic for their seed, so the sweep gives the same results in
    point order on a Dask cluster as on a fork pool."""
    from cluster.experiments.reproduce_smart import UPDATE_ONLY, _fresh_points
    kw = dict(records=2_000, warm_ms=0.05, measure_ms=0.05, properties=UPDATE_ONLY)
    points = [(f"{t} threads", "race", "a", t, kw) for t in (1, 2, 4)]
    heard = []
    with pointpool.activated(dask2):
        on_dask = _fresh_points(points, heard.append, jobs=5)       # jobs is ignored on Dask
    forked = _fresh_points(points, jobs=2)
    assert on_dask == forked
    assert [p["threads"] for p in on_dask] == [1, 2, 4] and all(p["ops"] > 0 for p in on_dask)
    assert len(heard) == 3 and heard[-1].startswith(tuple(p[0] for p in points)) and "(3/3 on Dask" in heard[-1]


def _map_within(seconds, fn, points, **kw):
    """map_points on a thread, failing the test instead of hanging if the cluster lost every
    worker for good (closing the cluster at the module's end then ends the thread)."""
    box = {}

    def go():
        try:
            box["value"] = map_points(fn, points, **kw)
        except BaseException as e:            # handed to the test
            box["error"] = e
    t = threading.Thread(target=go, daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), f"the sweep did not end within {seconds} s"
    if "error" in box:
        raise box["error"]
    return box["value"]


def test_a_dead_worker_is_retried_once_then_reported_and_the_others_finish(dask2, tmp_path):
    log = tmp_path / "attempts"
    with pointpool.activated(dask2), pytest.raises(PointsFailed) as got:
        _map_within(60, _raises_or_dies, [(x, str(log)) for x in range(5)], describe=lambda p: f"x={p[0]}")
    results, failures = got.value.results, dict(got.value.failures)
    assert results[0] is None and failures["x=0"] == "ValueError: point 0 is bad"
    assert results[2] is None and "worker died" in failures["x=2"] and "2 times" in failures["x=2"]
    # The others finish. Dask counts every point on a worker that dies against it, also one
    # queued behind the point that killed it: one per worker thread at a time makes that rare,
    # and then a point fails only if it was on both workers that died.
    finished = [x for x in (1, 3, 4) if results[x] == x * 10]
    assert len(finished) >= 2 and all("worker died" in failures[f"x={x}"] for x in (1, 3, 4) if x not in finished)
    attempts = log.read_text().split("\n")[:-1]
    killed = [line.split()[1] for line in attempts if line.startswith("2 ")]
    assert len(killed) == 2 and len(set(killed)) == 2, attempts     # two workers, each killed once
    assert sum(line.startswith("0 ") for line in attempts) == 1, attempts  # a raising point is not run again
    dask2.pids.update(int(pid) for pid in killed)
    dask2.client.wait_for_workers(1, timeout=30)                 # the nannies restart them
    with pointpool.activated(dask2):
        assert _map_within(60, _times_ten, [(x,) for x in range(3)]) == [0, 10, 20]


def test_a_point_may_start_processes_on_a_daemonic_worker(dask2):
    """Nanny workers are daemonic, and multiprocessing refuses children of a daemonic process:
    a bare task fails, a point (the flag cleared while it runs) does not. A rack of node processes
    runs too (its supervisor, in a worker's task thread, leaves signal handlers alone)."""
    with pytest.raises(AssertionError, match="daemonic"):
        dask2.client.submit(_child_exit_code, 3, pure=False).result()
    with pointpool.activated(dask2):
        assert map_points(_child_exit_code, [(3,), (4,)]) == [3, 4]
        [(status, ops)] = map_points(_process_rack, [(1,)])
    assert status == 0 and ops[0] == 200 and ops[1] > 0


# --- without a cluster ------------------------------------------------------------------------------

def test_without_distributed_one_line_says_what_to_install(monkeypatch, capsys):
    from cluster.cli import main
    monkeypatch.setitem(sys.modules, "distributed", None)        # import distributed -> ImportError
    with pytest.raises(ValueError, match=r"pip install 'dmrack\[dist\]'"):
        with pointpool.backend(dask="local:1"):
            pass
    assert main(["reproduce", "smart", "--only", "fig5", "--dask", "local:1"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "pip install 'dmrack[dist]'" in err


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_an_unreachable_scheduler_is_one_line_and_exit_2(monkeypatch, capsys):
    pytest.importorskip("distributed")
    from cluster.cli import main
    monkeypatch.setattr(pointpool, "CONNECT_TIMEOUT_S", 1.0)
    address = f"tcp://127.0.0.1:{_closed_port()}"
    t0 = time.monotonic()
    assert main(["reproduce", "smart", "--only", "fig5", "--dask", address]) == 2
    assert time.monotonic() - t0 < 15
    err = capsys.readouterr().err.strip()
    assert err == f"dmrack reproduce: --dask {address}: cannot reach the Dask scheduler: no answer within 1 s"
    for bad in ("localhost:8786", "local:0", "local:x"):
        assert main(["reproduce", "smart", "--dask", bad]) == 2
        assert len(capsys.readouterr().err.strip().splitlines()) == 1


def test_dask_and_jobs_do_not_go_together(capsys):
    from cluster.cli import main
    assert main(["reproduce", "smart", "--dask", "local:2", "--jobs", "2"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--dask and --jobs" in err


def test_failed_points_lose_only_their_experiment_and_exit_1(tmp_path, capsys):
    """run_experiments prints a line per failed point, runs the other experiments, writes their
    rows and then raises; the command exits 1."""
    import json

    from rich.console import Console

    from cluster.cli import _run_experiment
    from cluster.experiments.rows import ExperimentsFailed, Row, run_experiments

    def sweep(quick, progress, jobs=1):
        raise PointsFailed([1, None], [("x=2", "its worker died while running it, 2 times")])

    def other(quick, progress):
        return [Row("other", "s", 1, "Mops", 1.5)]

    experiments = {"sweep": sweep, "other": other}

    def run(only=None, quick=False, json_path=None, console=None, jobs=1):
        return run_experiments(experiments, only=only, quick=quick, json_path=json_path, console=console,
                               label="test", jobs=jobs, side_by_side=("sweep",))

    path = tmp_path / "rows.json"
    with pytest.raises(ExperimentsFailed) as got:
        run(json_path=str(path), console=Console(width=200))
    assert got.value.failed == [("sweep", [("x=2", "its worker died while running it, 2 times")])]
    written = json.loads(path.read_text())
    assert [r["experiment"] for r in written["rows"]] == ["other"]
    assert written["run"]["failed"] == [{"experiment": "sweep", "point": "x=2",
                                         "error": "its worker died while running it, 2 times"}]
    assert "sweep: point failed: x=2: its worker died while running it, 2 times" in capsys.readouterr().out
    exp = SimpleNamespace(run=run, options=("jobs",))
    args = SimpleNamespace(only=None, quick=True, json=str(path), command="reproduce", quiet=True, plot=None)
    assert _run_experiment(exp, args, jobs=1) == 1
    assert "1 point(s) failed, in sweep" in capsys.readouterr().err
