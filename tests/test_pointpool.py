"""cluster.experiments.pointpool: independent points side by side give what they give one after the other."""

from __future__ import annotations

import os

import psutil
import pytest

from cluster.experiments.pointpool import available_cpus, map_points


def _square_and_pid(x):
    return x * x, os.getpid()


def _started_at(x):
    import time
    t = time.monotonic_ns()
    time.sleep(0.2)
    return x, t


def _fails_on_three(x):
    if x == 3:
        raise ValueError(f"point {x} is bad")
    return x


def _segment_then_wait(x, prefix):
    """Point 0 creates a segment and waits; point 1 fails once it exists: the pool is terminated
    while point 0's worker owns a segment (and so would have SIGTERM's unwinding handler)."""
    import time
    from shm.segment import Segment, list_segments
    if x == 0:
        Segment.create("held", 4096, prefix=prefix)
        time.sleep(600)
    while not list_segments(prefix):
        time.sleep(0.01)
    raise ValueError("point 1 fails")


def _sigterm_state(_):
    """In a worker: whether SIGTERM is blocked, and its handler's name."""
    import signal
    return signal.SIGTERM in signal.pthread_sigmask(signal.SIG_BLOCK, []), signal.getsignal(signal.SIGTERM).__name__


def _children():
    return psutil.Process().children(recursive=True)


def test_results_keep_the_points_order_and_run_in_workers():
    got = map_points(_square_and_pid, [(x,) for x in range(6)], jobs=2)
    assert [sq for sq, _ in got] == [x * x for x in range(6)]
    assert os.getpid() not in {pid for _, pid in got}
    assert not _children()                 # the pool's workers are gone


def test_one_job_runs_here_and_reports_each_point_as_it_starts():
    heard = []
    got = map_points(_square_and_pid, [(2,), (3,)], progress=heard.append, describe=lambda p: f"x={p[0]}")
    assert got == [(4, os.getpid()), (9, os.getpid())]
    assert heard == ["x=2", "x=3"]


def test_parallel_progress_counts_the_points_done():
    heard = []
    map_points(_square_and_pid, [(x,) for x in range(3)], jobs=2, progress=heard.append)
    assert len(heard) == 3 and heard[-1].endswith("(3/3, 2 at a time)")


def test_a_failing_point_raises_in_the_caller_and_leaves_no_worker():
    with pytest.raises(ValueError, match="point 3 is bad"):
        map_points(_fails_on_three, [(x,) for x in range(5)], jobs=2)
    assert not _children()


def test_a_terminated_worker_unlinks_its_segments_and_never_blocks_the_pool():
    from shm.segment import Segment, list_segments, new_prefix
    mine = Segment.create("parent", 4096, prefix=new_prefix())   # the parent's handler is the unwinding one
    prefix = new_prefix()
    try:
        with pytest.raises(ValueError, match="point 1 fails"):
            map_points(_segment_then_wait, [(0, prefix), (1, prefix)], jobs=2)
        assert not _children()
        assert list_segments(prefix) == []        # point 0's worker unlinked its segment on SIGTERM
    finally:
        mine.unlink()


def test_workers_end_promptly_on_sigterm_and_a_sweep_that_ends_leaves_none():
    """A worker's SIGTERM ends it at once (its own handler, not the caller's), and a sweep that
    ends lets every worker exit on its own: repeated, since a pool torn down by signals could
    hang on a worker that missed its SIGTERM."""
    for _ in range(20):
        assert map_points(_sigterm_state, [(0,), (1,), (2,)], jobs=2) == [(False, "_unlink_and_exit")] * 3
        assert not _children()


def test_the_dearest_points_start_first_and_results_keep_their_order():
    got = map_points(_started_at, [(x,) for x in range(6)], jobs=2, cost=lambda p: p[0])
    assert [x for x, _ in got] == list(range(6))
    by_start = [x for x, _ in sorted(got, key=lambda r: r[1])]
    assert {5, 4} <= set(by_start[:3]) and 0 in by_start[-2:]
    assert [x for x, _ in map_points(_started_at, [(1,), (0,)], cost=lambda p: p[0])] == [1, 0]   # serial: as given
    assert not _children()


def test_jobs_must_be_positive():
    with pytest.raises(ValueError, match="at least 1"):
        map_points(_square_and_pid, [(1,)], jobs=0)
    assert available_cpus() >= 1


def test_fresh_racks_side_by_side_give_the_same_figures():
    """Co-located racks are deterministic for their seed and share nothing, so the reproduction's
    sweeps of fresh racks may run side by side (dmrack reproduce --jobs)."""
    from cluster.experiments.reproduce_smart import UPDATE_ONLY, _fresh_points
    kw = dict(records=1_000, warm_ms=0.05, measure_ms=0.05, properties=UPDATE_ONLY)
    points = [(f"{t} threads", "race", "a", t, kw) for t in (1, 2, 4)]
    serial = _fresh_points(points)
    assert _fresh_points(points, jobs=2) == serial
    assert [p["threads"] for p in serial] == [1, 2, 4] and all(p["ops"] > 0 for p in serial)
