"""Named POSIX shared-memory segments: the emulator's "remote memory".

Every node of a rack is an OS process; a memory region that one node exposes
to the others is a POSIX shared-memory object (a file in /dev/shm) that the
other processes map by name. This module owns the naming scheme and the
life cycle of those objects.

Naming.  All segments of one rack share a rack-unique prefix
``dmrack.<ownerpid>.<8 hex>``; a segment's POSIX name is
``/<prefix>.<name>``. Putting the creating pid in the name lets
``reclaim_stale`` tell a leaked segment (its owner is dead) from a live one
without any side registry, and the random part keeps two racks started by
the same process apart.

Creation never touches pages.  ``Segment.create`` does ``shm_open`` +
``ftruncate`` (via posix_ipc) + ``mmap`` and wraps the mapping with
``numpy.frombuffer``. tmpfs hands out zero pages on first touch, so there is
no need to zero-fill: a 16 GiB "memory node" costs nothing until used.

Ownership.  The creator of a segment is its owner and is responsible for
unlinking it: on ``close()``/``unlink()`` or, as a safety net, in an
``atexit`` handler. Forked children inherit the Python registry but must never
unlink their parent's segments, so every unlink is gated on
``os.getpid() == owner_pid``. SIGTERM would end a process without either, so
creating the first segment makes SIGTERM raise ``SystemExit`` (exit status
143) when nobody handles it yet: ``finally`` blocks and the ``atexit`` handler
run, as after Ctrl-C (``kill`` of a ``dmrack reproduce`` or of a script driving
a co-located rack leaves nothing behind). A process killed with SIGKILL runs no
handler at all; its segments are reclaimed later by ``reclaim_stale``.

A helper process that its parent may end at any moment, blocked on a lock the parent holds (a
worker of a ``multiprocessing`` pool, whose ``terminate()`` sends SIGTERM and then joins), must not
unwind: unwinding runs ``multiprocessing``'s exit path, which joins and locks. Such a process calls
:func:`exit_promptly_on_sigterm`: SIGTERM then unlinks the segments it created and ends it at once
(``os._exit``, status 143), and creating segments later does not put the unwinding handler back.
"""

from __future__ import annotations

import atexit
import mmap
import os
import re
import secrets
import signal
import threading
from typing import NamedTuple

import numpy as np
import posix_ipc
import psutil

__all__ = [
    "Segment",
    "SegmentStats",
    "new_prefix",
    "segment_name",
    "owner_pid_of",
    "list_segments",
    "reclaim_stale",
    "unlink_all",
    "unlink_owned",
    "exit_promptly_on_sigterm",
    "SHM_DIR",
    "ROOT_PREFIX",
]

SHM_DIR = "/dev/shm"
ROOT_PREFIX = "dmrack."
# NAME_MAX on Linux is 255; keep a margin for tools that append suffixes.
MAX_NAME_LEN = 250

_NAME_RE = re.compile(r"[A-Za-z0-9_-]+")
_PREFIX_RE = re.compile(r"[A-Za-z0-9_.-]+")
# "dmrack.<pid>.<8 hex>" possibly followed by ".<segment name>".
_OWNER_RE = re.compile(r"^/?dmrack\.(\d+)\.[0-9a-f]{8}(?:\.|$)")


def new_prefix() -> str:
    """Return a fresh rack prefix ``dmrack.<pid>.<8 hex random>``."""
    return f"{ROOT_PREFIX}{os.getpid()}.{secrets.token_hex(4)}"


def segment_name(name: str, prefix: str) -> str:
    """Full POSIX name (``/<prefix>.<name>``) for segment ``name`` of a rack."""
    if not isinstance(name, str) or not _NAME_RE.fullmatch(name):
        raise ValueError(
            f"invalid segment name {name!r}: use only letters, digits, '_' and '-'"
        )
    if not isinstance(prefix, str) or not _PREFIX_RE.fullmatch(prefix):
        raise ValueError(
            f"invalid segment prefix {prefix!r}: expected something like "
            f"'dmrack.<pid>.<hex>' (see new_prefix())"
        )
    full = f"/{prefix}.{name}"
    if len(full) > MAX_NAME_LEN:
        raise ValueError(
            f"segment name {full!r} is {len(full)} characters long; "
            f"the limit is {MAX_NAME_LEN}"
        )
    return full


def _normalize(full_name: str) -> str:
    if not isinstance(full_name, str) or not full_name.strip("/"):
        raise ValueError(f"invalid segment name {full_name!r}")
    return "/" + full_name.lstrip("/")


def owner_pid_of(full_name: str) -> int | None:
    """Creator pid encoded in a segment or prefix name, or None if it does not parse."""
    m = _OWNER_RE.match(full_name)
    return int(m.group(1)) if m else None


# Segments created by this process (name -> owner pid). Only consulted by the
# atexit handler; the pid is stored so a forked child, which inherits this
# dict, can recognise that the entries are not its own.
_owned: dict[str, int] = {}
_owned_lock = threading.Lock()


def _register(name: str, pid: int) -> None:
    with _owned_lock:
        _owned[name] = pid
    _exit_on_sigterm()


_unwinds_in = 0          # the process whose SIGTERM unwinds (the one that installed _on_sigterm)


def _exit_on_sigterm() -> None:
    """SIGTERM unwinds this process (see the module docstring), unless it is handled already."""
    global _unwinds_in
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        _unwinds_in = os.getpid()
        signal.signal(signal.SIGTERM, _on_sigterm)


def _on_sigterm(signum, frame):
    if os.getpid() != _unwinds_in:
        # A forked child that has not set a handler of its own inherited this one: it must not
        # unwind the parent's stack it was forked from (it would run on as a clone of the parent,
        # e.g. of a test suite, when terminated before its own code ran). It ends at once instead.
        _unlink_and_exit(signum, frame)
    raise SystemExit(128 + signum)


def exit_promptly_on_sigterm() -> None:
    """From now on SIGTERM unlinks this process's segments and ends it at once (module docstring)."""
    signal.signal(signal.SIGTERM, _unlink_and_exit)


def _unlink_and_exit(signum, frame):
    # No lock: the handler runs on the main thread between two bytecodes, perhaps while that
    # thread holds _owned_lock; the copy of the registry is one C call under the GIL.
    try:
        names = [n for n, pid in list(_owned.items()) if pid == os.getpid()]
    except RuntimeError:                 # another thread resized the registry mid-copy
        names = []
    _unlink_names(names)
    os._exit(128 + signum)


def _unlink_names(names) -> list[str]:
    """Unlink these segments; returns those that were still there."""
    removed = []
    for n in names:
        try:
            posix_ipc.unlink_shared_memory(n)
            removed.append(n)
        except posix_ipc.ExistentialError:
            pass
    return removed


def _unregister(name: str) -> None:
    with _owned_lock:
        _owned.pop(name, None)


def unlink_owned() -> list[str]:
    """Unlink every segment this very process created and has not unlinked (run at exit)."""
    me = os.getpid()
    with _owned_lock:
        mine = [n for n, pid in _owned.items() if pid == me]
        for n in mine:
            del _owned[n]
    return _unlink_names(mine)


atexit.register(unlink_owned)


class SegmentStats(NamedTuple):
    name: str
    size: int
    owner: bool
    mapped: bool


class Segment:
    """One mapped POSIX shared-memory object.

    Use ``Segment.create`` (owner) or ``Segment.attach`` (everyone else);
    the constructor is internal.
    """

    def __init__(self, name: str, size: int, mm: mmap.mmap, *, owner: bool,
                 owner_pid: int | None):
        self.name = name
        self.size = size
        self.owner = owner
        self.owner_pid = owner_pid
        self._mmap: mmap.mmap | None = mm
        self._buf: np.ndarray | None = np.frombuffer(mm, dtype=np.uint8)
        self._unlinked = False

    # -- construction -----------------------------------------------------

    @classmethod
    def create(cls, name: str, size: int, *, prefix: str) -> "Segment":
        """Create (O_CREAT|O_EXCL) and map segment ``name`` of rack ``prefix``."""
        full = segment_name(name, prefix)
        size = int(size)
        if size <= 0:
            raise ValueError(f"segment {full!r}: size must be > 0, got {size}")
        try:
            shm = posix_ipc.SharedMemory(full, posix_ipc.O_CREX, mode=0o600, size=size)
        except posix_ipc.ExistentialError:
            raise FileExistsError(
                f"shared-memory segment {full!r} already exists "
                f"(duplicate create, or a leftover: see reclaim_stale/unlink_all)"
            ) from None
        pid = os.getpid()
        # Register before mapping so a failure below still gets cleaned up.
        _register(full, pid)
        try:
            mm = mmap.mmap(shm.fd, size)
        except BaseException:
            _unregister(full)
            posix_ipc.unlink_shared_memory(full)
            raise
        finally:
            # The mapping keeps the object alive; the fd is no longer needed.
            shm.close_fd()
        return cls(full, size, mm, owner=True, owner_pid=pid)

    @classmethod
    def attach(cls, full_name: str) -> "Segment":
        """Map an existing segment by its full POSIX name (leading '/' optional)."""
        full = _normalize(full_name)
        try:
            shm = posix_ipc.SharedMemory(full)
        except posix_ipc.ExistentialError:
            raise FileNotFoundError(
                f"shared-memory segment {full!r} does not exist"
            ) from None
        try:
            size = shm.size
            if size <= 0:
                raise ValueError(f"shared-memory segment {full!r} has size 0")
            mm = mmap.mmap(shm.fd, size)
        finally:
            shm.close_fd()
        return cls(full, size, mm, owner=False, owner_pid=owner_pid_of(full))

    # -- access -----------------------------------------------------------

    @property
    def mapped(self) -> bool:
        return self._mmap is not None

    def array(self, dtype=np.uint8, offset: int = 0, count: int | None = None) -> np.ndarray:
        """A numpy view (no copy) of ``count`` items of ``dtype`` at byte ``offset``."""
        if self._buf is None:
            raise ValueError(f"segment {self.name!r} is closed")
        dt = np.dtype(dtype)
        offset = int(offset)
        if offset < 0 or offset > self.size:
            raise IndexError(
                f"segment {self.name!r}: offset {offset} outside [0, {self.size}]"
            )
        if offset % dt.itemsize:
            raise ValueError(
                f"segment {self.name!r}: offset {offset} is not aligned to "
                f"{dt} (itemsize {dt.itemsize})"
            )
        if count is None:
            count = (self.size - offset) // dt.itemsize
        count = int(count)
        if count < 0:
            raise ValueError(f"segment {self.name!r}: negative count {count}")
        end = offset + count * dt.itemsize
        if end > self.size:
            raise IndexError(
                f"segment {self.name!r}: {count} x {dt} at offset {offset} "
                f"ends at byte {end}, past the segment size {self.size}"
            )
        return self._buf[offset:end].view(dt)

    # -- life cycle -------------------------------------------------------

    def unlink(self) -> None:
        """Remove the name now (existing mappings stay valid). Idempotent."""
        if self._unlinked:
            return
        self._unlinked = True
        _unregister(self.name)
        try:
            posix_ipc.unlink_shared_memory(self.name)
        except posix_ipc.ExistentialError:
            pass

    def close(self) -> None:
        """Unmap; the owner (in its own pid) also unlinks. Idempotent."""
        mm, self._mmap = self._mmap, None
        self._buf = None
        if mm is not None:
            try:
                mm.close()
            except BufferError:
                # Someone still holds a numpy view. Dropping our reference is
                # all we can do: the mapping goes away with the last view.
                pass
        if self.owner and self.owner_pid == os.getpid():
            self.unlink()

    def __enter__(self) -> "Segment":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def statistics(self) -> SegmentStats:
        return SegmentStats(self.name, self.size, self.owner, self.mapped)

    def __repr__(self) -> str:
        state = "mapped" if self.mapped else "closed"
        role = "owner" if self.owner else "attached"
        return f"<Segment {self.name} size={self.size} {role} {state}>"


# -- cleanup helpers ------------------------------------------------------

def list_segments(prefix: str = ROOT_PREFIX) -> list[str]:
    """Full POSIX names ('/...') of segments in /dev/shm starting with ``prefix``."""
    try:
        entries = os.listdir(SHM_DIR)
    except FileNotFoundError:
        return []
    return sorted("/" + e for e in entries if e.startswith(prefix))


def _unlink_quiet(full: str) -> bool:
    _unregister(full)
    try:
        posix_ipc.unlink_shared_memory(full)
        return True
    except posix_ipc.ExistentialError:
        return False  # somebody else got there first


def reclaim_stale(prefix: str = ROOT_PREFIX) -> list[str]:
    """Unlink segments whose owner pid (from the name) is dead; return them.

    Names that do not parse are left alone: they are not ours to judge.
    """
    removed = []
    for full in list_segments(prefix):
        pid = owner_pid_of(full)
        if pid is None or psutil.pid_exists(pid):
            continue
        if _unlink_quiet(full):
            removed.append(full)
    return removed


def unlink_all(prefix: str) -> list[str]:
    """Unlink every segment of the rack with exactly this prefix.

    ``prefix`` is matched as a whole dotted component, so rack
    ``dmrack.1.ab`` never catches ``dmrack.1.abcd``. Passing the root
    ``"dmrack."`` removes every rack's segments, live or not.
    """
    if not prefix or not _PREFIX_RE.fullmatch(prefix):
        raise ValueError(f"invalid rack prefix {prefix!r}")
    rack = prefix.rstrip(".") + "."
    removed = []
    for full in list_segments(rack):
        if _unlink_quiet(full):
            removed.append(full)
    return removed
