"""Where a run's numbers came from: the ``run`` record of a result file.

A figure or a report is only as useful as what it says about its own making: the same command at
another commit, on another profile or at another scale gives other numbers, and a colleague who
gets a report by mail cannot ask. So every ``dmrack bench`` and ``dmrack reproduce`` run writes,
beside its rows, one record of

* what ran: the command (``reproduce smart``), its title, the parts run, ``--quick`` or full, the
  options the command line gave (``jobs``, ``system``);
* the modelled setup, as the experiment module states it (``setup(quick)``: profile, rack spec,
  seed, scale), because a module knows its own racks and the command line does not;
* the software: dmrack's version and the git commit of the checkout it ran from (with a flag when
  the tree had uncommitted changes), Python and numba versions;
* the machine and the run: host name, CPU model and count, memory, when it started, wall time.

Everything here is read, never required: outside a git checkout the commit is None, on a system
without ``/proc/cpuinfo`` the CPU model is the platform's word. Nothing here is slow: the git
calls are two short subprocesses at the end of a run.
"""

from __future__ import annotations

import os
import platform
import socket
import subprocess
import sys
import time
from typing import Callable


def _git(*args: str) -> str | None:
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        out = subprocess.run(["git", "-C", here, *args], capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def software() -> dict:
    """dmrack's version and git commit (None outside a checkout), Python and numba versions."""
    try:
        from importlib.metadata import version
        dmrack = version("dmrack")
    except Exception:                           # not installed: run from a source tree
        dmrack = None
    try:
        import numba
        numba_version = numba.__version__
    except ImportError:
        numba_version = None
    commit = _git("rev-parse", "HEAD")
    dirty = None
    if commit is not None:
        status = _git("status", "--porcelain", "--untracked-files=no")
        dirty = bool(status) if status is not None else None
    return {"dmrack_version": dmrack, "git_commit": commit, "git_dirty": dirty,
            "python": platform.python_version(), "numba": numba_version}


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine() -> dict:
    try:
        import psutil
        memory_gib = round(psutil.virtual_memory().total / 2**30, 1)
    except ImportError:
        memory_gib = None
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:
        cpus = os.cpu_count()
    return {"hostname": socket.gethostname(), "platform": platform.platform(), "cpu": _cpu_model(),
            "cpus": cpus, "memory_gib": memory_gib}


def record(command: str, *, title: str = "", parts: list[str], quick: bool, options: dict | None = None,
           setup: Callable[[bool], dict] | None = None, started: float, wall_s: float,
           failed: list[dict] | None = None, code: dict | None = None) -> dict:
    """The ``run`` record of a result file (see the module docstring). ``started`` is a
    ``time.time()``; ``setup(quick)`` the experiment's own description of its racks; ``code``
    the :func:`software` read when the run started (a commit made during a long run is not the
    code that ran), else read now."""
    return {"command": command, "title": title, "parts": list(parts), "quick": bool(quick),
            "options": dict(options or {}), "setup": setup(quick) if setup is not None else {},
            **(code if code is not None else software()), "machine": machine(), "argv": list(sys.argv),
            "started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
            "wall_s": round(wall_s, 3), "failed": list(failed or [])}
