"""Parts side by side (cluster.experiments.pointpool, "Parts side by side"): a run with jobs above 1
runs its parts at once on one pool of workers for the run, prints and writes what a run one part
after the other gives, shares its points across parts, and a part that fails ends the run with no
worker left."""

from __future__ import annotations

import io
import os
import threading
import time

import psutil
import pytest
from rich.console import Console

from cluster.experiments.pointpool import RunCancelled, SharedPoints, map_points, run_pool
from cluster.experiments.progress import Sweep
from cluster.experiments.rows import Row, run_experiments


def _pid_after(x, seconds):
    time.sleep(seconds)
    return x, os.getpid()


def _fails(x):
    raise ValueError(f"point {x} is bad")


def _children():
    return psutil.Process().children(recursive=True)


def test_sweeps_of_several_threads_share_the_run_pool_and_keep_their_order():
    got = {}
    with run_pool(2):
        def sweep(name, xs):
            got[name] = map_points(_pid_after, [(x, 0.05) for x in xs], jobs=2)
        threads = [threading.Thread(target=sweep, args=(n, xs)) for n, xs in (("a", range(4)), ("b", range(10, 13)))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        workers = {p.pid for p in _children()}
    assert [x for x, _ in got["a"]] == [0, 1, 2, 3] and [x for x, _ in got["b"]] == [10, 11, 12]
    assert {pid for _, pid in got["a"] + got["b"]} <= workers and len(workers) == 2   # the run's two workers
    assert not _children()


def test_a_sweep_on_the_run_pool_tells_the_bar_its_points():
    sweep = Sweep("reproduce toy", ["a", "b"], show=False)
    part = sweep.start("a")
    with run_pool(2):
        map_points(_pid_after, [(x, 0) for x in range(3)], jobs=2, progress=part)
    assert sweep.count_text() == "0/2 parts done · 1 running · 3/3 points"
    assert sweep.now.endswith("done (3/3, 2 at a time)")


def test_a_point_that_raises_raises_in_its_sweep_and_a_cancelled_run_ends_the_others():
    with pytest.raises(ValueError, match="point 3 is bad"):
        with run_pool(2):
            with pytest.raises(ValueError, match="point 3 is bad"):
                map_points(_fails, [(3,)], jobs=2)
            ended = []

            def waiting():
                try:
                    map_points(_pid_after, [(0, 600), (1, 600)], jobs=2)
                except RunCancelled:
                    ended.append(True)
            t = threading.Thread(target=waiting)
            t.start()
            time.sleep(0.3)
            raise ValueError("point 3 is bad")        # what a failed part does to its run
    t.join(30)
    assert ended == [True] and not t.is_alive()
    assert not _children()


def test_one_job_or_no_run_pool_leaves_map_points_as_it_was():
    with run_pool(2):
        assert map_points(_pid_after, [(1, 0)], jobs=1) == [(1, os.getpid())]   # serial: here
    assert not _children()


def test_parts_asking_for_one_key_at_once_measure_it_once():
    shared, calls = SharedPoints(), []
    gate = threading.Event()

    def slow():
        calls.append(threading.current_thread().name)
        gate.wait(10)
        return 42
    out = []
    threads = [threading.Thread(target=lambda: out.append(shared.once("k", slow)), name=f"t{i}") for i in range(3)]
    for t in threads:
        t.start()
    time.sleep(0.2)
    gate.set()
    for t in threads:
        t.join()
    assert out == [42, 42, 42] and len(calls) == 1


def test_a_key_whose_measuring_part_failed_is_measured_by_the_next_that_asks():
    shared = SharedPoints()
    with pytest.raises(RuntimeError):
        shared.once("k", lambda: (_ for _ in ()).throw(RuntimeError("broken")))
    assert shared.once("k", lambda: 7) == 7


def test_the_bar_counts_parts_that_end_in_any_order():
    sweep = Sweep("reproduce toy", ["a", "b", "c"], show=False)
    a, b = sweep.start("a"), sweep.start("b")
    a.expect(4)
    b.expect(2)
    b.advance(2)
    a.advance()
    assert sweep.count_text() == "0/3 parts done · 2 running · 3/6 points"
    sweep.end("b")
    assert sweep.completed() == 1.25 and sweep.count_text() == "1/3 parts done · 1 running · 1/4 points"


# --- a run of parts side by side -------------------------------------------------------------------

def _square(x):
    return x * x


def _part(name, points, delay):
    def part(quick, progress, *, jobs=1, shared=None):
        time.sleep(delay)
        got = map_points(_square, [(x,) for x in points], jobs=jobs, progress=progress)
        both = shared.measure(_square, [100], args=lambda k: (k,), jobs=jobs)
        return [Row(name, "s", x, "v", v) for x, v in zip(points, got)] + [Row(name, "shared", 100, "v", both[0])]
    return part


def _run(jobs, parts):
    out = io.StringIO()
    rows = run_experiments(parts, quick=True, console=Console(file=out, width=200), label="reproduce toy", jobs=jobs,
                           side_by_side=tuple(parts))
    return [r.__dict__ for r in rows], out.getvalue()


def test_a_run_side_by_side_gives_the_rows_and_tables_of_a_run_one_part_after_the_other():
    # the first part is the slowest to start: the others end first, their tables still print after it
    parts = {"fig1": _part("fig1", [1, 2, 3], 0.5), "fig2": _part("fig2", [4, 5], 0.0), "fig3": _part("fig3", [6], 0.1)}
    side_rows, side_out = _run(2, parts)
    one_rows, one_out = _run(1, parts)
    assert side_rows == one_rows
    order = [side_out.index(title) for title in ("fig1  (", "fig2  (", "fig3  (")]
    assert order == sorted(order)
    # side by side a title says when the part ended (not its own cost); one after the other, its seconds
    assert "fig2  (ended " in side_out and " s into the run)" in side_out
    assert "s real)" in one_out and "into the run" not in one_out
    assert [r["experiment"] for r in side_rows] == ["fig1"] * 4 + ["fig2"] * 3 + ["fig3"] * 2
    assert not _children()


def test_a_part_that_raises_ends_the_run_and_leaves_no_worker():
    def broken(quick, progress, *, jobs=1):
        time.sleep(0.2)
        raise ZeroDivisionError("part broken")

    def long(quick, progress, *, jobs=1):
        return [Row("long", "s", 1, "v", map_points(_pid_after, [(0, 600), (1, 600)], jobs=jobs)[0][0])]
    t0 = time.monotonic()
    with pytest.raises(ZeroDivisionError, match="part broken"):
        _run(2, {"long": long, "broken": broken})
    assert time.monotonic() - t0 < 60 and not _children()
