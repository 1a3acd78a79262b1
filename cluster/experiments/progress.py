"""A progress bar with an ETA for sweeps: ``dmrack bench``, ``dmrack reproduce``, ``dmrack check``.

A sweep is a list of *parts* (the experiments of a paper, the workloads of a bench, the checks of
``dmrack check``), and a part is made of *points* (a fresh rack per thread count, a rig per
configuration). The bar counts parts, and inside the part running now the points it has declared,
so that its fraction and rich's ETA move at every point, not only at the end of a part::

    ⠼ reproduce smart ━━━━━━━━━━╸━━━━━━━━━━━━━ part 3/8 · 9/11 points 0:04:12 ETA 0:05:40 fig5: RACE updates at 16 threads, zipf 0.5

An experiment talks to it through the ``progress`` it is handed, which it may treat as a plain
function of one string (what runs now; every experiment already does). Two optional methods tell
the bar how far a part has got: ``progress.expect(n)`` (this part has ``n`` points) and
``progress.advance()`` (one more is done). :func:`cluster.experiments.pointpool.map_points` calls
both for every sweep of fresh racks, so those parts count points with no code of their own;
:func:`prefixed` keeps them when an experiment puts its name in front of the messages. A plain
function passed as ``progress`` (tests do) works with all of it: the optional methods are looked
up, not required.

Parts that run side by side (``dmrack reproduce`` with ``--jobs`` above 1:
:func:`cluster.experiments.rows.run_experiments`) start with ``sweep.start(name)`` and end with
``sweep.end(name)`` in any order, from their own threads; the bar then counts the parts done and
the points of the parts running (``3/12 parts done · 2 running · 14/40 points``).

The bar goes to stderr, so the tables and JSON on stdout are the same with or without it, and it
is drawn only when stderr is a terminal and nobody asked for quiet (``--quiet`` calls
:func:`set_quiet`); otherwise nothing at all is written for progress. Why a module-level quiet
switch rather than an argument: the command line decides it once, and the experiments' ``run``
functions, which a new paper writes, keep their one signature.
"""

from __future__ import annotations

import sys
import threading
from typing import Callable

_quiet = False


def set_quiet(quiet: bool) -> None:
    """``--quiet``: no progress bar for the rest of this process."""
    global _quiet
    _quiet = bool(quiet)


def shown() -> bool:
    """Whether a progress bar is drawn: stderr is a terminal and quiet was not asked for."""
    return not _quiet and sys.stderr.isatty()


class Sweep:
    """The progress of one sweep of ``parts``; a context manager that draws the bar while open.

    ``sweep.part(name)`` starts the next part and returns its ``progress`` (a :class:`Part`).
    Drawing is rich's; everything else (counting, the text) is here and works undrawn."""

    def __init__(self, label: str, parts: list[str], *, show: bool | None = None, console=None):
        self.label = label
        self.parts = list(parts)
        self.show = shown() if show is None else show
        self.console = console
        self.index = -1                      # the part running now
        self.points_total: int | None = None
        self.points_done = 0
        self.now = "starting"
        self._progress = None
        self._task = None
        self._lock = threading.RLock()      # parts side by side report from their own threads
        self.side_by_side = False
        self.parts_done = 0                  # side by side: parts ended
        self._running: dict[str, list] = {}  # side by side: part -> [points total, points done]

    def __enter__(self):
        if self.show:
            from rich.console import Console
            from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn, \
                TimeRemainingColumn
            # what runs now goes last: on a narrow terminal it is the part that gets cut
            self._progress = Progress(
                SpinnerColumn(), TextColumn("[bold]{task.fields[label]}[/]"), BarColumn(bar_width=24),
                TextColumn("{task.fields[count]}"), TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(),
                TextColumn("{task.description}", style="dim"),
                console=self.console or Console(stderr=True), transient=True, refresh_per_second=4)
            self._progress.__enter__()
            self._task = self._progress.add_task(self.now, total=max(len(self.parts), 1), label=self.label,
                                                 count=self.count_text())
        return self

    def __exit__(self, *exc):
        if self._progress is not None:
            self._progress.__exit__(*exc)
            self._progress = None
        return False

    # --- what the parts report --------------------------------------------------------------------

    def part(self, name: str) -> "Part":
        self.index += 1
        self.points_total, self.points_done = None, 0
        self.now = name
        self._update()
        return Part(self, name)

    def start(self, name: str) -> "Part":
        """Side by side: part ``name`` starts beside the others; its ``progress``."""
        with self._lock:
            self.side_by_side = True
            self._running[name] = [0, 0]
            self.now = name
        self._update()
        return Part(self, name)

    def end(self, name: str) -> None:
        """Side by side: part ``name`` has ended."""
        with self._lock:
            self._running.pop(name, None)
            self.parts_done += 1
        self._update()

    def _expect(self, name: str, points: int) -> None:
        with self._lock:
            if self.side_by_side:
                if name in self._running:
                    self._running[name][0] += max(int(points), 0)
            else:
                self.points_total = (self.points_total or 0) + max(int(points), 0)
        self._update()

    def _advance(self, name: str, points: int) -> None:
        with self._lock:
            if self.side_by_side:
                if name in self._running:
                    self._running[name][1] += points
            else:
                self.points_done += points
        self._update()

    def _say(self, message: str) -> None:
        with self._lock:
            self.now = message
        self._update()

    def completed(self) -> float:
        """Parts done, plus the fraction of the running part(s) their points say."""
        with self._lock:
            if self.side_by_side:
                return self.parts_done + sum(min(d / t, 1.0) for t, d in self._running.values() if t)
            done = max(self.index, 0)
            if self.points_total:
                done += min(self.points_done / self.points_total, 1.0)
            return done

    def count_text(self) -> str:
        with self._lock:
            if self.side_by_side:
                text = f"{self.parts_done}/{len(self.parts)} parts done"
                if self._running:
                    text += f" · {len(self._running)} running"
                total = sum(t for t, _ in self._running.values())
                if total:
                    text += f" · {sum(d for _, d in self._running.values())}/{total} points"
                return text
            text = f"part {max(self.index, 0) + 1}/{len(self.parts)}"
            if self.points_total:
                text += f" · {self.points_done}/{self.points_total} points"
            return text

    def _update(self) -> None:
        if self._progress is not None:
            with self._lock:
                now, completed, count = self.now, self.completed(), self.count_text()
            self._progress.update(self._task, description=now, completed=completed, count=count)


class Part:
    """The ``progress`` one part is handed: call it with what runs now; ``expect`` and ``advance``
    count its points."""

    def __init__(self, sweep: Sweep, name: str, prefix: str = ""):
        self._sweep, self.name, self._prefix = sweep, name, prefix

    def __call__(self, message: str) -> None:
        self._sweep._say(f"{self._prefix}{message}")

    def expect(self, points: int) -> None:
        """This part has ``points`` points (more calls add: a part may run several sweeps)."""
        self._sweep._expect(self.name, points)

    def advance(self, points: int = 1) -> None:
        self._sweep._advance(self.name, points)


class _Prefixed:
    def __init__(self, progress: Callable[[str], None], prefix: str):
        self._progress, self._prefix = progress, prefix

    def __call__(self, message: str) -> None:
        self._progress(f"{self._prefix}{message}")

    def expect(self, points: int) -> None:
        expect(self._progress, points)

    def advance(self, points: int = 1) -> None:
        advance(self._progress, points)


def prefixed(progress: Callable[[str], None] | None, prefix: str):
    """``progress`` with ``prefix`` in front of every message, keeping its point counting."""
    return None if progress is None else _Prefixed(progress, prefix)


def expect(progress, points: int) -> None:
    """Tell ``progress`` its part has ``points`` points, if it counts them (a plain function does not)."""
    fn = getattr(progress, "expect", None)
    if fn is not None:
        fn(points)


def advance(progress, points: int = 1) -> None:
    fn = getattr(progress, "advance", None)
    if fn is not None:
        fn(points)
