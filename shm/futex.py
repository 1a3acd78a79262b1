"""Sleep on a word of shared memory until another process changes it: Linux's futex, shared.

Node processes of a rack wait for each other's virtual clocks (nodes/runtime/sync.py). A plain
``time.sleep`` wakes tens of microseconds late (the timer slack, then the scheduler) and only when
its time is up, however early the clock it waits for moved; on two cores that left a rack of
processes slower than the same rack in one process. A futex sleeps in the kernel on one 32-bit word
and is woken by whoever changes the word and calls :func:`wake`: the sleeper runs again within a
scheduler wake-up of the change, and a timeout still bounds the sleep, so a missed wake costs
time, never correctness.

The word is the low half of an int64 of a shared array (little-endian hosts: the low half is at
the int64's address); the waker increments the whole int64 (``shm.atomics.faa``), so the low
half changes on every increment. ``FUTEX_WAIT`` without ``FUTEX_PRIVATE_FLAG`` keys the wait on
the physical page, so processes that map the segment at different addresses meet on it.

Where there is no futex (not Linux, an architecture without a known syscall number, big-endian),
:func:`wait` sleeps for its timeout and :func:`wake` does nothing: waits behave as before.
"""

from __future__ import annotations

import ctypes
import os
import platform
import sys
import time

import numpy as np

__all__ = ["AVAILABLE", "wait", "wake"]

_SYS_FUTEX = {"x86_64": 202, "aarch64": 98, "arm64": 98}.get(platform.machine())
_FUTEX_WAIT, _FUTEX_WAKE = 0, 1
_WAKE_ALL = 0x7FFFFFFF


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


def _libc():
    try:
        return ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None


_LIBC = _libc() if sys.platform.startswith("linux") and sys.byteorder == "little" else None
AVAILABLE = _LIBC is not None and _SYS_FUTEX is not None and hasattr(_LIBC, "syscall")
if AVAILABLE:
    _syscall = _LIBC.syscall
    _syscall.restype = ctypes.c_long


def _address(arr: np.ndarray, i: int) -> int:
    return arr.ctypes.data + i * arr.itemsize


def wait(arr: np.ndarray, i: int, seen: int, timeout_s: float) -> None:
    """Sleep until word ``i`` of ``arr`` (an int64 array in shared memory) no longer holds
    ``seen`` in its low 32 bits, someone calls :func:`wake` on it, or ``timeout_s`` passes.
    Returns at once if the word already changed (the check and the sleep are one step in the
    kernel: no wake is lost between a caller's last look and its sleep)."""
    if not AVAILABLE:
        time.sleep(timeout_s)
        return
    ts = _Timespec(int(timeout_s), int((timeout_s % 1) * 1e9))
    val = ctypes.c_int(seen & 0xFFFFFFFF).value            # the low half, as the kernel reads it
    _syscall(_SYS_FUTEX, ctypes.c_void_p(_address(arr, i)), _FUTEX_WAIT, val, ctypes.byref(ts), None, 0)


def wake(arr: np.ndarray, i: int) -> None:
    """Wake every process sleeping in :func:`wait` on word ``i`` of ``arr``."""
    if AVAILABLE:
        _syscall(_SYS_FUTEX, ctypes.c_void_p(_address(arr, i)), _FUTEX_WAKE, _WAKE_ALL, None, None, 0)


if os.environ.get("DMRACK_NO_FUTEX"):         # to compare with the sleeping fallback
    AVAILABLE = False
