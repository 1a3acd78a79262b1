"""Shared pytest fixtures for the dmrack test suite.

``shm_guard`` (autouse) makes every test prove it cleans up its shared
memory: it snapshots /dev/shm/dmrack.* before the test and, afterwards,
fails the test for any new segment that belongs to this pytest process
(its pid is in the name) or to a process that has since died (a forked
child that leaked). Leftovers are unlinked first, so one failing test does
not cascade into the next. Segments of other live processes are ignored:
other test runs on the same machine are not our business.
"""

from __future__ import annotations

import os

import posix_ipc
import psutil
import pytest

from shm.segment import list_segments, new_prefix, owner_pid_of


def _ours_or_orphaned(name: str) -> bool:
    pid = owner_pid_of(name)
    if pid is None:
        return False
    return pid == os.getpid() or not psutil.pid_exists(pid)


@pytest.fixture(autouse=True)
def shm_guard():
    before = set(list_segments())
    yield
    leftovers = sorted(
        n for n in set(list_segments()) - before if _ours_or_orphaned(n)
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
