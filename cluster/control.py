"""The control block: the few shared words through which the supervisor and the node processes
coordinate in *real* time.

Everything that happens in virtual time (step starts, step ends) travels as clock-synchronised
messages between the manager and the compute nodes (see ``nodes/manager.py``). What is left for
this block is what virtual time cannot carry: which process has which pid, which deaths were
ordered by the scenario (so the supervisor does not report them as crashes), the YCSB insert
sequence that every client shares, and which scenario step the rack is in (for the dashboard).

One int64 word per field, each on its own 64-byte line so writers on different cores do not
false-share; writes are single stores or atomic adds, so nobody ever takes a lock.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from shm.atomics import faa, load_acquire, store_release
from shm.segment import Segment

_STRIDE = 8                       # words per field: one cache line
# rack-wide fields
F_STEP, F_STEP_VSTART, F_INSERT_NEXT, F_INSERT_ACKED, F_LOADED, F_DONE, F_FAILED = range(7)
_RACK_FIELDS = 8
# per-process fields
P_PID, P_EXPECTED_DEATH, P_EXIT, P_RESTART_AT, P_RESTART_STEP = range(5)
_PROC_FIELDS = 6


class ControlStats(NamedTuple):
    step: int
    step_vstart_ns: int
    loaded: int
    inserts_claimed: int
    inserts_acked: int
    done: bool
    failed: bool
    pids: tuple


class ControlBlock:
    """Shared coordination words of one rack (see the module docstring)."""

    def __init__(self, seg: Segment, n_procs: int):
        self._seg = seg
        self.n_procs = n_procs
        self.words = seg.array(np.int64)

    @classmethod
    def create(cls, n_procs: int, *, prefix: str) -> "ControlBlock":
        size = (_RACK_FIELDS + n_procs * _PROC_FIELDS) * _STRIDE * 8
        seg = Segment.create("control", size, prefix=prefix)
        blk = cls(seg, n_procs)
        blk.words[:] = 0
        blk.words[F_STEP * _STRIDE] = -1
        return blk

    @classmethod
    def attach(cls, desc: dict) -> "ControlBlock":
        return cls(Segment.attach(desc["name"]), desc["n_procs"])

    def describe(self) -> dict:
        return {"name": self._seg.name, "n_procs": self.n_procs}

    def close(self) -> None:
        if self.words is not None:
            self.words = None
            self._seg.close()

    # -- fields ----------------------------------------------------------------------------------
    def _rack(self, f: int) -> int:
        return f * _STRIDE

    def _proc(self, i: int, f: int) -> int:
        if not 0 <= i < self.n_procs:
            raise IndexError(f"process {i} outside 0..{self.n_procs - 1}")
        return (_RACK_FIELDS + i * _PROC_FIELDS + f) * _STRIDE

    def get(self, f: int) -> int:
        return int(load_acquire(self.words, self._rack(f)))

    def set(self, f: int, v: int) -> None:
        store_release(self.words, self._rack(f), int(v))

    def add(self, f: int, v: int = 1) -> int:
        """Atomic add; returns the old value."""
        return int(faa(self.words, self._rack(f), int(v)))

    def set_pid(self, i: int, pid: int) -> None:
        store_release(self.words, self._proc(i, P_PID), pid)

    def pid(self, i: int) -> int:
        return int(load_acquire(self.words, self._proc(i, P_PID)))

    def expect_death(self, i: int) -> None:
        """The scenario is about to kill process ``i``: its death is not a crash."""
        store_release(self.words, self._proc(i, P_EXPECTED_DEATH), 1)

    def death_expected(self, i: int) -> bool:
        return bool(load_acquire(self.words, self._proc(i, P_EXPECTED_DEATH)))

    # A restart step: the manager asks (request_restart), the supervisor forks a new process for
    # the slot (restart_requested), which says it has joined the clock (restart_joined).
    def request_restart(self, i: int, at_ns: int, step: int) -> None:
        """The scenario brings process ``i`` back at virtual time ``at_ns`` (plan step ``step``)."""
        store_release(self.words, self._proc(i, P_RESTART_STEP), step)
        store_release(self.words, self._proc(i, P_RESTART_AT), at_ns + 1)

    def restart_requested(self, i: int) -> tuple[int, int] | None:
        """(virtual time, plan step) of a pending restart of process ``i``, or None."""
        at = int(load_acquire(self.words, self._proc(i, P_RESTART_AT)))
        if at <= 0:
            return None
        return at - 1, int(load_acquire(self.words, self._proc(i, P_RESTART_STEP)))

    def restart_joined(self, i: int) -> None:
        """The new process of ``i`` runs: its death is no longer one the scenario ordered."""
        store_release(self.words, self._proc(i, P_EXPECTED_DEATH), 0)
        store_release(self.words, self._proc(i, P_RESTART_AT), 0)

    def statistics(self) -> ControlStats:
        return ControlStats(self.get(F_STEP), self.get(F_STEP_VSTART), self.get(F_LOADED),
                            self.get(F_INSERT_NEXT), self.get(F_INSERT_ACKED), bool(self.get(F_DONE)),
                            bool(self.get(F_FAILED)), tuple(self.pid(i) for i in range(self.n_procs)))


class SharedInsertSequence:
    """YCSB's insert key sequence shared by every client of the rack (the workloads'
    ``InsertSequence`` protocol): ``next`` claims a record number with one atomic add,
    ``acknowledge`` counts a finished insert, and ``acknowledged`` is the limit below which keys
    may be chosen. Inserts finish nearly in claim order, so counting acknowledgements stands in
    for YCSB's window of acknowledged ids."""

    def __init__(self, block: ControlBlock):
        self.block = block

    def reset(self, start: int) -> None:
        self.block.set(F_INSERT_NEXT, start)
        self.block.set(F_INSERT_ACKED, start)

    def next(self) -> int:
        return self.block.add(F_INSERT_NEXT, 1)

    def acknowledged(self) -> int:
        return self.block.get(F_INSERT_ACKED)

    def acknowledge(self, n: int = 1) -> None:
        self.block.add(F_INSERT_ACKED, n)
