"""Independent benchmark points side by side, one per core.

A benchmark point that runs on a fresh co-located rack (load, warm up, measure) shares nothing
with the next one, and a co-located rack is deterministic for its seed, so a sweep of such points
gives the same figures whether they run one after the other or side by side. :func:`map_points`
runs them on ``jobs`` forked worker processes (forked, so a worker inherits the imported modules
and any machine code already compiled) and returns the results in the order of the points.

Workers are a rack's helpers like its nodes are: they ignore Ctrl-C (the parent decides to stop,
and then terminates them), ask the kernel to kill them if the parent dies (``PR_SET_PDEATHSIG``),
and show up as ``dmrack-point`` in ps. A point that raises re-raises in the parent. With
``jobs=1`` (the default) the points run in this process and nothing is forked.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
from typing import Callable, Sequence


def available_cpus() -> int:
    """The CPUs this process may run on (a container's or taskset's limit, not the machine's)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:                       # not Linux
        return os.cpu_count() or 1


def _worker_init(parent_pid: int) -> None:
    from cluster.node_main import _die_with_parent
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _die_with_parent(parent_pid, "point")


def _call(job):
    index, fn, args = job
    return index, fn(*args)


def map_points(fn: Callable, points: Sequence[tuple], *, jobs: int = 1,
               progress: Callable[[str], None] | None = None,
               describe: Callable[[tuple], str] = str) -> list:
    """``[fn(*p) for p in points]``, on up to ``jobs`` processes. ``fn`` must be a module-level
    function (workers receive it by name) and its results picklable. ``progress`` hears
    ``describe(p)`` as each point starts when serial, and as each finishes (with a count) when
    parallel, where start order says nothing; a ``progress`` that counts points
    (:mod:`cluster.experiments.progress`) is told how many there are and each one done."""
    if jobs < 1:
        raise ValueError(f"jobs must be at least 1, got {jobs}")
    from cluster.experiments.progress import advance, expect
    points = list(points)
    jobs = min(jobs, len(points))
    expect(progress, len(points))
    if jobs <= 1:
        out = []
        for p in points:
            if progress is not None:
                progress(describe(p))
            out.append(fn(*p))
            advance(progress)
        return out
    results: list = [None] * len(points)
    ctx = multiprocessing.get_context("fork")
    # Pool.__exit__ terminates the workers, also when this process is interrupted mid-sweep
    with ctx.Pool(jobs, initializer=_worker_init, initargs=(os.getpid(),)) as pool:
        done = 0
        for index, result in pool.imap_unordered(_call, [(i, fn, p) for i, p in enumerate(points)]):
            results[index] = result
            done += 1
            advance(progress)
            if progress is not None:
                progress(f"{describe(points[index])} done ({done}/{len(points)}, {jobs} at a time)")
    return results
