"""Independent benchmark points side by side: on this machine's cores, or on a Dask cluster.

A benchmark point that runs on a fresh co-located rack (load, warm up, measure) shares nothing
with the next one, and a co-located rack is deterministic for its seed, so a sweep of such points
gives the same figures whether they run one after the other, side by side or on other machines.
:func:`map_points` runs them and returns the results in the order of the points, whichever backend
runs them:

* **serial** (``jobs=1``, the default): in this process, nothing is forked;
* **a fork pool** (``jobs=N``): ``N`` forked worker processes (forked, so a worker inherits the
  imported modules and any machine code already compiled). Workers are a rack's helpers like its
  nodes are: they ignore Ctrl-C (the parent decides to stop, and then terminates them; at the end
  of a sweep they exit on their own, so no signal can go missing), ask the
  kernel to kill them if the parent dies (``PR_SET_PDEATHSIG``), and show up as ``dmrack-point`` in
  ps. A point that raises re-raises in the parent;
* **a Dask cluster** (``with backend(dask="tcp://HOST:PORT")`` or ``dask="local:N"``; ``dmrack
  reproduce --dask``): each point is a task on a ``dask.distributed`` cluster, which is the
  well-kept way to use the machines of a user's existing cluster (a Slurm allocation through
  dask-jobqueue, a Kubernetes deployment). The backend is a context manager rather than an argument
  so that the experiment modules, which call ``map_points(..., jobs=jobs)``, need no change: while
  it is entered, every ``map_points`` call sends its points to the cluster and ``jobs`` is ignored
  (the cluster's worker threads say how many run at a time). ``local:N`` starts a LocalCluster of
  ``N`` one-thread worker processes listening on 127.0.0.1 only, without a dashboard, and closes
  it on exit. ``distributed`` is imported only here, when a Dask backend is entered
  (``pip install 'dmrack[dist]'``).

  How the Dask backend keeps a sweep whole: tasks are submitted at most one per worker thread at a
  time, as a pool would (the scheduler counts a worker's death against every task on it, also
  those queued behind the one that killed it; with one point per thread that is rare, though the
  scheduler may still place two on one worker). A point that raises fails (co-located racks are deterministic: running it
  again would raise again). A point whose worker dies is run again by the scheduler on another
  worker: ``retries=`` of ``Client.submit`` covers only exceptions, worker deaths are counted by the
  scheduler against ``distributed.scheduler.allowed-failures``, which the ``local:N`` cluster sets
  to 1 (one retry) and a cluster of the user's keeps as configured (dask's default is 3). Failed
  points do not stop the others: when every point has ended, :class:`PointsFailed` carries the
  results (None for the failed ones) and one line per failure. Nanny worker processes are
  daemonic, and ``multiprocessing`` refuses to start children from a daemonic process, so a point
  runs with its worker's daemon flag cleared: a point whose rack forks node processes (or a fork
  pool) works on a worker as it does here.

**Parts side by side.** A run of several parts (:func:`cluster.experiments.rows.run_experiments`
with ``jobs`` above 1) runs its parts at once, each in a thread of this process, and every
:func:`map_points` they call sends its points to one fork pool for the whole run
(:class:`RunPool`, entered with :func:`run_pool`). A pool per sweep left cores idle between parts
and at the end of every part (the last, long points running alone), and a part that measures a
rack in this process (Sherman's Figs. 10 and 11) kept every core but one idle for its whole
length; one queue for the run keeps the workers busy while any part has points left, an earlier
part's points first, so the tables still come out in the parts' order. The pool is forked
before the parts' threads start, so no process is ever forked while another thread runs (a
child would inherit a lock some thread holds). Its workers live for the run, so they keep the
machine code they compiled for one point for the next, and collect each point's garbage after
it (:func:`_call_and_collect`).

Points that several parts of one run read (FlexKV's Fig. 16 last step is Table 1's and Fig. 17's
point, Sherman's Figs. 10 and 11 are the skew part's) are measured once per run:
:class:`SharedPoints` holds them, and :func:`cluster.experiments.rows.run_experiments` makes one per
run and hands it to every part that takes a ``shared`` keyword. It is an object of the run rather
than a cache in the module, so two runs in one process (``dmrack sensitivity`` runs a paper once
per knob, under other profile overrides; tests run parts side by side) never read each other's
points, and nothing has to remember to clear it.

Profile overrides (:func:`shm.profile.overridden`, what ``dmrack sensitivity`` varies) travel with
the points: every backend runs a point under the overrides in force where :func:`map_points` was
called, handed to the worker with the point (a forked worker would inherit them, a Dask worker would
not; both are given them explicitly, so a point's rack is the same wherever it runs).
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
from contextlib import contextmanager
from heapq import heappop, heappush
from typing import Callable, Iterator, Sequence

DIST_HINT = "pip install 'dmrack[dist]'"
CONNECT_TIMEOUT_S = 5.0         # how long --dask tcp://... tries to reach the scheduler
TERMINATE_S = 10.0              # how long a pool's terminate() may take before its workers are killed


class PointsFailed(RuntimeError):
    """Some points of a sweep failed (their worker died twice, or they raised) while the others
    finished. ``results``: one per point, in point order, None for a failed one; ``failures``:
    ``(describe(point), error text)`` per failed point, in point order."""

    def __init__(self, results: list, failures: list[tuple[str, str]]):
        self.results = results
        self.failures = failures
        super().__init__(f"{len(failures)} of {len(results)} points failed: "
                         + "; ".join(f"{what}: {err}" for what, err in failures))


def available_cpus() -> int:
    """The CPUs this process may run on (a container's or taskset's limit, not the machine's)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:                       # not Linux
        return os.cpu_count() or 1


def _worker_init(parent_pid: int) -> None:
    from cluster.node_main import die_with_parent
    from shm.segment import exit_promptly_on_sigterm
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # A failed or interrupted sweep ends with Pool.terminate() (_end_workers), which SIGTERMs a
    # worker that may be blocked on the task queue's lock, which the parent holds while it drains
    # the queue: unwinding through multiprocessing's exit path would wait on that lock.
    exit_promptly_on_sigterm()
    die_with_parent(parent_pid, "dmrack-point")


def _call(job):
    index, fn, args, overrides = job
    return index, _with_overrides(overrides, fn, args)


def _call_and_collect(job):
    """``_call`` in a worker that outlives its point (:class:`RunPool`): the point's rack is
    garbage once it returns, much of it in reference cycles, which the collector's thresholds
    (``cluster.cli.GC_THRESHOLDS``: a full collection every ~500 M allocations) would leave for
    a long time; a worker that kept them grew by ~0.5 GB a second over PD3's points and paid
    twice the system time for its page faults. A full collection here scans only what the point
    made: the objects the worker was forked with are frozen out of the collector's view."""
    import gc
    try:
        return _call(job)
    finally:
        gc.collect()
        gc.freeze()                 # what is left lives on (kernels, caches): not scanned again


def _run_worker_init(parent_pid: int) -> None:
    import gc
    _worker_init(parent_pid)
    gc.freeze()                     # the modules and kernels inherited from the parent: never garbage


def _with_overrides(overrides: dict, fn: Callable, args: tuple):
    """``fn(*args)`` with the profile overrides of the caller of :func:`map_points` in force."""
    if not overrides:
        return fn(*args)
    from shm.profile import overridden
    with overridden(overrides):
        return fn(*args)


_active: "DaskBackend | None" = None       # the backend entered with backend(), if any


def active() -> "DaskBackend | None":
    """The Dask backend :func:`map_points` uses now, or None (this machine)."""
    return _active


def map_points(fn: Callable, points: Sequence[tuple], *, jobs: int = 1,
               progress: Callable[[str], None] | None = None,
               describe: Callable[[tuple], str] = str, cost: Callable[[tuple], float] | None = None) -> list:
    """``[fn(*p) for p in points]``, on up to ``jobs`` processes, or on the Dask cluster of the
    :func:`backend` entered (then ``jobs`` is ignored). ``fn`` must be a module-level function
    (workers receive it by name) and its results picklable. ``progress`` hears ``describe(p)`` as
    each point starts when serial, and as each finishes (with a count) when parallel, where start
    order says nothing. On a Dask cluster, failed points raise :class:`PointsFailed` once all the
    points have ended. A ``progress`` that counts points (:mod:`cluster.experiments.progress`)
    is told how many there are and each one done. ``cost(p)``, if given, estimates a point's run
    time: a fork pool starts the dearest points first, so that the last to start are short and no
    worker waits alone for a long one at the end of the sweep (the results keep the points'
    order; serial and Dask runs keep it too)."""
    if jobs < 1:
        raise ValueError(f"jobs must be at least 1, got {jobs}")
    from cluster.experiments.progress import advance, expect
    from shm.profile import active_overrides
    points = list(points)
    overrides = active_overrides()
    if _active is not None:
        return _active.map(fn, points, progress=progress, describe=describe, overrides=overrides)
    expect(progress, len(points))
    run = _run
    if run is not None and jobs > 1 and run.pid == os.getpid():
        return run.map(fn, points, progress=progress, describe=describe, cost=cost, overrides=overrides)
    jobs = min(jobs, len(points))
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
    pool = ctx.Pool(jobs, initializer=_worker_init, initargs=(os.getpid(),))
    try:
        done = 0
        order = range(len(points)) if cost is None else sorted(range(len(points)), key=lambda i: -cost(points[i]))
        for index, result in pool.imap_unordered(_call, [(i, fn, points[i], overrides) for i in order]):
            results[index] = result
            done += 1
            advance(progress)
            if progress is not None:
                progress(f"{describe(points[index])} done ({done}/{len(points)}, {jobs} at a time)")
    except BaseException:           # a point raised, or this process was interrupted mid-sweep
        _end_workers(pool)
        raise
    # Every point is done: each worker takes its end-of-work sentinel and exits on its own. Not
    # Pool.terminate(): its SIGTERM can be lost by a worker forked an instant before (CPython clears
    # the signal flags a new child caught before its interpreter resumed), which then waits on the
    # task queue forever while terminate() joins it (a hang seen in the test suite).
    pool.close()
    pool.join()
    return results


def _end_workers(pool) -> None:
    """End a pool's workers now: Pool.terminate(), in a thread; a worker that missed its SIGTERM
    (see map_points) would keep terminate() joining it forever, so after TERMINATE_S the workers
    still alive are SIGKILLed (which none can miss), and terminate() then reaps them."""
    import threading
    ender = threading.Thread(target=pool.terminate, daemon=True, name="dmrack-pool-terminate")
    ender.start()
    ender.join(TERMINATE_S)
    if ender.is_alive():
        for p in multiprocessing.active_children():
            if p.name.startswith("ForkPoolWorker"):
                p.kill()
        ender.join()


class RunCancelled(RuntimeError):
    """The run a sweep belongs to was ended (a part failed or the run was interrupted) while the
    sweep waited for its points."""


class RunPool:
    """The fork pool of one run whose parts run side by side (the module docstring): ``jobs``
    workers, forked when it is made, taking the points of every :func:`map_points` of the run,
    from any thread of this process. A point goes to a worker when one is free, the points of an
    earlier part first (:meth:`rank`), a sweep's in the order :func:`map_points` gives them (its
    dearest first), so the tables come out in the parts' order while the later parts' points
    fill the cores the earlier ones leave idle."""

    def __init__(self, jobs: int):
        if jobs < 1:
            raise ValueError(f"jobs must be at least 1, got {jobs}")
        self.jobs = jobs
        self.pid = os.getpid()             # a forked worker inherits this object and must not use it
        self._cond = threading.Condition()
        self._cancelled = False
        self._waiting: list = []           # heap of (rank, seq, job, on_done, on_error): points not sent yet
        self._seq = 0
        self._sent = 0                     # points on the workers now (at most jobs)
        self._ranks = threading.local()
        ctx = multiprocessing.get_context("fork")
        self._pool = ctx.Pool(jobs, initializer=_run_worker_init, initargs=(os.getpid(),))

    def rank(self, rank: int) -> None:
        """The calling thread's sweeps come before those of threads of a higher rank (a part's
        place in its run)."""
        self._ranks.value = rank

    def _send(self) -> None:
        """Give free workers the first points waiting (called with the lock held)."""
        while self._waiting and self._sent < self.jobs and not self._cancelled:
            _, _, job, on_done, on_error = heappop(self._waiting)
            self._sent += 1
            self._pool.apply_async(_call_and_collect, (job,), callback=on_done, error_callback=on_error)

    def map(self, fn: Callable, points: list, *, progress=None, describe: Callable[[tuple], str] = str,
            cost: Callable[[tuple], float] | None = None, overrides: dict | None = None) -> list:
        """:func:`map_points` on the run's workers: the results in point order; a point that
        raises re-raises here; :class:`RunCancelled` if the run ends meanwhile."""
        from cluster.experiments.progress import advance
        results: list = [None] * len(points)
        state = {"left": len(points), "error": None, "done": 0}
        cond = self._cond

        def finished(res) -> None:          # in the pool's result thread
            index, value = res
            with cond:
                results[index] = value
                state["done"] += 1
                # told before the sweep's caller wakes: its bar has every point when it returns
                advance(progress)
                if progress is not None:
                    progress(f"{describe(points[index])} done ({state['done']}/{len(points)}, {self.jobs} at a time)")
                state["left"] -= 1
                self._sent -= 1
                self._send()
                cond.notify_all()

        def failed(err: BaseException) -> None:
            with cond:
                if state["error"] is None:
                    state["error"] = err
                state["left"] -= 1
                self._sent -= 1
                self._send()
                cond.notify_all()

        order = range(len(points)) if cost is None else sorted(range(len(points)), key=lambda i: -cost(points[i]))
        rank = getattr(self._ranks, "value", 0)
        with cond:
            if self._cancelled:
                raise RunCancelled("the run has ended")
            for i in order:
                heappush(self._waiting, (rank, self._seq, (i, fn, points[i], overrides or {}), finished, failed))
                self._seq += 1
            self._send()
            while state["left"] and state["error"] is None and not self._cancelled:
                cond.wait(0.5)
            if state["error"] is not None:
                raise state["error"]
            if self._cancelled:
                raise RunCancelled("the run has ended")
        return results

    def cancel(self) -> None:
        """End the run now: every sweep waiting for its points raises :class:`RunCancelled`, and the
        workers are ended (their points' segments unlinked, as when a sweep fails)."""
        with self._cond:
            self._cancelled = True
            self._cond.notify_all()
        _end_workers(self._pool)

    def close(self) -> None:
        """The run is over and every point done: each worker takes its end-of-work sentinel and
        exits on its own (see map_points)."""
        self._pool.close()
        self._pool.join()


_run: RunPool | None = None               # the pool of the run whose parts run side by side, if any


@contextmanager
def run_pool(jobs: int) -> Iterator[RunPool]:
    """While entered, :func:`map_points` with ``jobs`` above 1 sends its points to one
    :class:`RunPool` of ``jobs`` workers, from any thread; on leaving, the pool is closed, or its
    workers ended if the block raised."""
    global _run
    pool = RunPool(jobs)
    previous, _run = _run, pool
    try:
        yield pool
    except BaseException:
        pool.cancel()
        raise
    else:
        pool.close()
    finally:
        _run = previous


class SharedPoints:
    """The points one run has measured, by key, for the parts of that run that share them (see the
    module docstring). A part called on its own (a test) passes none and gets a fresh one: it then
    measures everything it needs itself. Parts running side by side may ask for the same key at
    once: the first measures it, the others wait for its result (and measure it themselves if
    that part failed)."""

    def __init__(self):
        self._got: dict = {}
        self._busy: dict = {}               # key -> threading.Event: a part is measuring it now
        self._lock = threading.Lock()

    def _claim(self, keys) -> tuple[list, list]:
        """Of ``keys``, those not measured yet that nobody measures now (marked as this caller's
        from now on), and the events of those another part measures now."""
        mine, theirs = [], []
        with self._lock:
            for k in keys:
                if k in self._got:
                    continue
                ev = self._busy.get(k)
                if ev is None:
                    self._busy[k] = threading.Event()
                    mine.append(k)
                else:
                    theirs.append(ev)
        return mine, theirs

    def _settle(self, keys: list, values: list | None = None) -> None:
        """The caller is done with ``keys``: their ``values`` (None: it failed, they stay to measure)."""
        with self._lock:
            if values is not None:
                self._got.update(zip(keys, values))
            for k in keys:
                self._busy.pop(k).set()

    def measure(self, fn: Callable, keys: Sequence, *, args: Callable = tuple, jobs: int = 1,
                progress: Callable[[str], None] | None = None, describe: Callable[[tuple], str] = str,
                order: Callable | None = None) -> list:
        """The results of the points named by ``keys`` (hashable), in that order: those this run has
        not measured yet are run by :func:`map_points` as ``fn(*args(key))``, each once, in the
        order ``order`` sorts them by (a key function; None: as first named)."""
        wanted = list(dict.fromkeys(keys))
        while True:
            todo, waiting = self._claim(wanted)
            if order is not None:
                todo.sort(key=order)
            if todo:
                try:
                    got = map_points(fn, [args(k) for k in todo], jobs=jobs, progress=progress, describe=describe)
                except BaseException:
                    self._settle(todo)
                    raise
                self._settle(todo, got)
            for ev in waiting:
                ev.wait()
            with self._lock:
                if all(k in self._got for k in wanted):
                    return [self._got[k] for k in keys]

    def once(self, key, measure: Callable[[], object]):
        """``measure()`` the first time this run asks for ``key``, what it returned after that (one
        rack that several parts read, measured in this process)."""
        while True:
            mine, theirs = self._claim([key])
            if mine:
                try:
                    value = measure()
                except BaseException:
                    self._settle(mine)
                    raise
                self._settle(mine, [value])
            for ev in theirs:
                ev.wait()
            with self._lock:
                if key in self._got:
                    return self._got[key]


# --- the Dask backend ------------------------------------------------------------------------------

@contextmanager
def backend(dask: str | None = None, *, connect_timeout: float | None = None) -> Iterator["DaskBackend | None"]:
    """While entered, :func:`map_points` runs every point as a task on a Dask cluster: ``dask``
    is a scheduler's address (``tcp://HOST:PORT``, or another protocol distributed knows) or
    ``local:N`` (a LocalCluster of N one-thread worker processes on 127.0.0.1, closed on exit).
    ``dask=None`` changes nothing. A bad address, an unreachable scheduler (after
    ``connect_timeout`` seconds, default :data:`CONNECT_TIMEOUT_S`) or distributed missing is a
    one-line ValueError."""
    if dask is None:
        yield None
        return
    b = DaskBackend(dask, connect_timeout=CONNECT_TIMEOUT_S if connect_timeout is None else connect_timeout)
    try:
        with activated(b):
            yield b
    finally:
        b.close()


@contextmanager
def activated(b: "DaskBackend | None") -> Iterator["DaskBackend | None"]:
    """:func:`map_points` uses the open backend ``b`` while entered (None: this machine again);
    :func:`backend` opens one and enters this."""
    global _active
    previous, _active = _active, b
    try:
        yield b
    finally:
        _active = previous


def _import_distributed():
    try:
        import distributed
    except ImportError:
        raise ValueError(f"--dask needs dask.distributed, which is not installed: {DIST_HINT}") from None
    return distributed


def _local_workers(address: str) -> int | None:
    """N of ``local:N``; None if ``address`` is not of that form; ValueError if N is not >= 1."""
    if not address.startswith("local:"):
        return None
    n = address[len("local:"):]
    if not n.isdigit() or int(n) < 1:
        raise ValueError(f"--dask {address}: local:N takes a whole number of worker processes, at least 1")
    return int(n)


def _source_root() -> str:
    """The directory this dmrack is imported from (its parent of ``cluster/``)."""
    import cluster
    return os.path.dirname(os.path.dirname(os.path.abspath(cluster.__file__)))


class DaskBackend:
    """A client of a Dask cluster (and the LocalCluster it started, for ``local:N``)."""

    def __init__(self, address: str, *, connect_timeout: float = CONNECT_TIMEOUT_S):
        n_local = _local_workers(address)
        if n_local is None and "://" not in address:
            raise ValueError(f"--dask {address}: give a scheduler address like tcp://HOST:PORT, or local:N")
        distributed = _import_distributed()
        import dask
        self.cluster = None
        self.client = None
        if n_local is not None:
            # workers are spawned: they import the same dmrack as this process
            env = {"PYTHONPATH": os.pathsep.join([_source_root()] + [x for x in os.environ.get("PYTHONPATH", "")
                                                                      .split(os.pathsep) if x])}
            # one retry when a point's worker dies (dask's default allows three)
            with dask.config.set({"distributed.scheduler.allowed-failures": 1}):
                # no dashboard; the scheduler's other HTTP routes (health, metrics) on a free
                # localhost port, not 8787, which another cluster may hold
                self.cluster = distributed.LocalCluster(n_workers=n_local, threads_per_worker=1, processes=True,
                                                        host="127.0.0.1", dashboard_address=None, env=env,
                                                        scheduler_kwargs={"dashboard_address": "127.0.0.1:0"})
            try:
                self.client = distributed.Client(self.cluster, set_as_default=False)
            except BaseException:
                self.cluster.close()
                raise
        else:
            try:
                self.client = distributed.Client(address, timeout=connect_timeout, set_as_default=False)
            except (OSError, TimeoutError) as e:
                why = _one_line(e) or type(e).__name__
                if "Timed out" in why:
                    why = f"no answer within {connect_timeout:g} s"
                raise ValueError(f"--dask {address}: cannot reach the Dask scheduler: {why}") from None
        self.address = self.client.scheduler.address

    def __repr__(self) -> str:
        return f"DaskBackend({self.address!r}, {self.threads()} worker threads)"

    def threads(self) -> int:
        return sum(self.client.nthreads().values())

    def close(self) -> None:
        if self.client is not None:
            self.client.close()
        if self.cluster is not None:
            self.cluster.close()

    def map(self, fn: Callable, points: list, *, progress=None, describe=str, overrides: dict | None = None) -> list:
        """The points' results in point order; :class:`PointsFailed` if some failed. ``overrides``:
        the profile overrides each point runs under (:func:`shm.profile.overridden`)."""
        import uuid

        from distributed import as_completed
        results: list = [None] * len(points)
        errors: dict[int, str] = {}
        if not points:
            return results
        if self.threads() == 0:
            if progress is not None:
                progress(f"waiting for a worker of the Dask cluster at {self.address}")
            self.client.wait_for_workers(1)
        run = uuid.uuid4().hex[:8]
        index: dict = {}
        todo = iter(enumerate(points))
        running = as_completed(loop=self.client.loop)

        def submit_more() -> None:
            # one point per worker thread at a time: a dying worker seldom takes others along
            while running.count() < max(1, self.threads()):
                nxt = next(todo, None)
                if nxt is None:
                    return
                i, p = nxt
                fut = self.client.submit(_run_task, fn, tuple(p), overrides or {}, key=f"dmrack-point-{run}-{i}",
                                         pure=False)
                index[fut.key] = i
                running.add(fut)

        done = 0
        try:
            submit_more()
            for fut in running:
                i = index[fut.key]
                try:
                    # waits again if the worker that held the result died since (it is recomputed)
                    results[i] = fut.result()
                except Exception as e:                # the point's exception, KilledWorker, cancelled
                    errors[i] = _task_error(e)
                fut.release()
                done += 1
                if progress is not None:
                    state = "failed" if i in errors else "done"
                    progress(f"{describe(points[i])} {state} ({done}/{len(points)} on Dask, "
                             f"{self.threads()} worker threads)")
                submit_more()
        except BaseException:
            self.client.cancel(list(running.futures))
            raise
        if errors:
            raise PointsFailed(results, [(describe(points[i]), errors[i]) for i in sorted(errors)])
        return results


def _run_task(fn: Callable, args: tuple, overrides: dict | None = None):
    """A point on a Dask worker, under the caller's profile overrides. The worker process of a
    nanny is daemonic, and multiprocessing refuses to start children of a daemonic process; a point
    whose rack forks its nodes must start them, so the flag is cleared while the point runs."""
    proc = multiprocessing.current_process()
    daemonic = proc._config.get("daemon", False)
    proc._config["daemon"] = False
    try:
        return _with_overrides(overrides or {}, fn, args)
    finally:
        proc._config["daemon"] = daemonic


def _one_line(e: BaseException) -> str:
    lines = [x for x in str(e).splitlines() if x.strip()]
    return lines[0].strip() if lines else ""


def _task_error(e: BaseException) -> str:
    """One line for a failed task: how its worker died, or the point's exception."""
    if type(e).__name__ == "KilledWorker":
        tries = getattr(e, "allowed_failures", None)
        worker = getattr(getattr(e, "last_worker", None), "address", None)
        return ("its worker died while running it" + ("" if tries is None else f", {tries + 1} times")
                + (f" (last {worker})" if worker else ""))
    text = _one_line(e)
    return f"{type(e).__name__}: {text}" if text else type(e).__name__
