"""Shared pytest fixtures for the dmrack test suite.

``shm_guard`` (autouse) makes every test prove it cleans up its shared
memory: it snapshots /dev/shm/dmrack.* before the test and, afterwards,
fails the test for any new segment named under this pytest process's pid
(which is what the ``prefix`` fixture hands out). Leftovers are unlinked
first, so one failing test does not cascade into the next.

Segments of other pids are ignored on purpose, even those of dead owners:
other test runs and racks on the same machine create (and sometimes
SIGKILL) dmrack segments concurrently, and a guard that unlinked them would
make both runs flaky. A test that makes a child create its own segments
must clean them up itself (reclaim_stale does that for killed children).
"""

from __future__ import annotations

import os

import posix_ipc
import pytest

from shm.segment import list_segments, new_prefix, owner_pid_of


@pytest.fixture(autouse=True)
def shm_guard():
    before = set(list_segments())
    yield
    leftovers = sorted(
        n for n in set(list_segments()) - before if owner_pid_of(n) == os.getpid()
    )
    for name in leftovers:
        try:
            posix_ipc.unlink_shared_memory(name)
        except posix_ipc.ExistentialError:
            pass
    assert not leftovers, f"test left shared-memory segments behind: {leftovers}"


@pytest.fixture
def prefix() -> str:
    """A fresh rack prefix, owned by this pytest process."""
    return new_prefix()


# The most workers `-n auto` starts (pyproject.toml's addopts). One per core the run may use, up to
# this: each worker imports the whole stack (0.1-0.8 GB resident over a run, measured) and its tests
# start racks of processes of their own, so past a few workers a bigger machine gains little.
MAX_WORKERS = 8


def pytest_xdist_auto_num_workers(config):
    """pytest-xdist's hook for ``-n auto``: the cores this process may run on (its affinity, which
    a container or ``taskset`` narrows; ``os.cpu_count`` would count the host's), capped."""
    return max(1, min(len(os.sched_getaffinity(0)), MAX_WORKERS))
