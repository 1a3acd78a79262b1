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

The bar goes to stderr, so the tables and JSON on stdout are the same with or without it, and it
is drawn only when stderr is a terminal and nobody asked for quiet (``--quiet`` calls
:func:`set_quiet`); otherwise nothing at all is written for progress. Why a module-level quiet
switch rather than an argument: the command line decides it once, and the experiments' ``run``
functions, which a new paper writes, keep their one signature.
"""

from __future__ import annotations

import sys
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

    def completed(self) -> float:
        """Parts done, plus the fraction of the running part its points say."""
        done = max(self.index, 0)
        if self.points_total:
            done += min(self.points_done / self.points_total, 1.0)
        return done

    def count_text(self) -> str:
        text = f"part {max(self.index, 0) + 1}/{len(self.parts)}"
        if self.points_total:
            text += f" · {self.points_done}/{self.points_total} points"
        return text

    def _update(self) -> None:
        if self._progress is not None:
            self._progress.update(self._task, description=self.now, completed=self.completed(),
                                  count=self.count_text())


class Part:
    """The ``progress`` one part is handed: call it with what runs now; ``expect`` and ``advance``
    count its points."""

    def __init__(self, sweep: Sweep, name: str, prefix: str = ""):
        self._sweep, self.name, self._prefix = sweep, name, prefix

    def __call__(self, message: str) -> None:
        self._sweep.now = f"{self._prefix}{message}"
        self._sweep._update()

    def expect(self, points: int) -> None:
        """This part has ``points`` points (more calls add: a part may run several sweeps)."""
        s = self._sweep
        s.points_total = (s.points_total or 0) + max(int(points), 0)
        s._update()

    def advance(self, points: int = 1) -> None:
        s = self._sweep
        s.points_done += points
        s._update()


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
