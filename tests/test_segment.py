"""Tests for shm.segment: naming, mapping, cross-process sharing and cleanup."""

from __future__ import annotations

import multiprocessing
import os
import re
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import posix_ipc
import psutil
import pytest

from shm import segment as segmod
from shm.segment import (
    Segment,
    SegmentStats,
    list_segments,
    new_prefix,
    owner_pid_of,
    reclaim_stale,
    unlink_all,
)

fork = multiprocessing.get_context("fork")
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _exists(name: str) -> bool:
    return os.path.exists("/dev/shm/" + name.lstrip("/"))


def _dead_pid() -> int:
    """The pid of a process that has certainly exited (and been reaped)."""
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    assert not psutil.pid_exists(p.pid)
    return p.pid


# -- naming -----------------------------------------------------------------


def test_new_prefix_format_and_uniqueness():
    p = new_prefix()
    assert re.fullmatch(rf"dmrack\.{os.getpid()}\.[0-9a-f]{{8}}", p)
    assert new_prefix() != p
    assert owner_pid_of(p) == os.getpid()
    assert owner_pid_of("/" + p + ".mem") == os.getpid()
    assert owner_pid_of("/dmrack.notapid.x") is None


def test_full_name(prefix):
    with Segment.create("mem_0-a", 4096, prefix=prefix) as seg:
        assert seg.name == f"/{prefix}.mem_0-a"
        assert seg.size == 4096
        assert seg.owner and seg.owner_pid == os.getpid()
        assert list_segments(prefix) == [seg.name]


@pytest.mark.parametrize("bad", ["", "a/b", "a.b", "sp ace", "ü", "x" * 300])
def test_bad_names(prefix, bad):
    with pytest.raises(ValueError, match="segment name"):
        Segment.create(bad, 4096, prefix=prefix)


def test_bad_prefix_and_size(prefix):
    with pytest.raises(ValueError, match="prefix"):
        Segment.create("m", 4096, prefix="bad/prefix")
    with pytest.raises(ValueError, match="size must be > 0"):
        Segment.create("m", 0, prefix=prefix)
    assert list_segments(prefix) == []


def test_duplicate_create(prefix):
    with Segment.create("dup", 4096, prefix=prefix) as seg:
        with pytest.raises(FileExistsError, match=re.escape(seg.name)):
            Segment.create("dup", 4096, prefix=prefix)
        # The failed create must not have unlinked the existing segment.
        assert _exists(seg.name)


def test_attach_missing(prefix):
    with pytest.raises(FileNotFoundError, match=re.escape(f"/{prefix}.nope")):
        Segment.attach(f"/{prefix}.nope")


# -- mapping ----------------------------------------------------------------


def test_array_views_share_memory(prefix):
    with Segment.create("m", 1 << 16, prefix=prefix) as seg:
        words = seg.array(np.uint64)
        assert words.shape == (8192,)
        tail = seg.array(np.uint64, offset=8 * 100, count=4)
        tail[:] = [1, 2, 3, 4]
        assert list(words[100:104]) == [1, 2, 3, 4]
        assert seg.array(np.uint8, 800, 1)[0] == 1  # little-endian low byte
        with Segment.attach(seg.name.lstrip("/")) as other:  # leading '/' optional
            assert not other.owner
            assert other.size == seg.size
            assert other.owner_pid == os.getpid()
            assert list(other.array(np.uint64, 800, 4)) == [1, 2, 3, 4]
            other.array(np.int64)[0] = -7
        # Closing an attacher never unlinks.
        assert words.view(np.int64)[0] == -7 and _exists(seg.name)
        del words, tail


def test_array_bounds_and_alignment(prefix):
    with Segment.create("m", 4096, prefix=prefix) as seg:
        with pytest.raises(ValueError, match="not aligned"):
            seg.array(np.uint64, offset=4)
        with pytest.raises(IndexError, match="past the segment size 4096"):
            seg.array(np.uint64, offset=8, count=512)
        with pytest.raises(IndexError, match="offset"):
            seg.array(np.uint8, offset=5000)
        with pytest.raises(ValueError, match="negative count"):
            seg.array(np.uint8, count=-1)
        assert seg.array(np.uint64, offset=4088).shape == (1,)
        assert seg.array(np.uint8, offset=4096).shape == (0,)


def test_close_is_idempotent_and_tolerates_live_views(prefix):
    seg = Segment.create("m", 4096, prefix=prefix)
    view = seg.array(np.uint64)
    view[0] = 42
    seg.close()  # mmap.close() raises BufferError internally: tolerated
    seg.close()
    assert not _exists(seg.name)
    assert seg.statistics() == SegmentStats(seg.name, 4096, True, False)
    assert view[0] == 42  # the live view keeps the mapping alive
    with pytest.raises(ValueError, match="closed"):
        seg.array()
    seg.unlink()


def test_explicit_unlink_keeps_mapping(prefix):
    with Segment.create("m", 4096, prefix=prefix) as seg:
        a = seg.array(np.uint64)
        seg.unlink()
        assert not _exists(seg.name)
        a[1] = 5
        assert seg.array(np.uint64)[1] == 5
        del a


def test_statistics(prefix):
    seg = Segment.create("m", 8192, prefix=prefix)
    st = seg.statistics()
    assert st == SegmentStats(seg.name, 8192, True, True)
    with pytest.raises(AttributeError):
        st.size = 1  # immutable record
    seg.close()
    assert seg.statistics().mapped is False


def test_huge_segment_is_lazy(prefix):
    proc = psutil.Process()
    rss0 = proc.memory_info().rss
    t0 = time.perf_counter()
    seg = Segment.create("huge", 16 << 30, prefix=prefix)
    words = seg.array(np.uint64)
    words[-1] = 1  # touches one page at the far end only
    assert words.shape == (2 << 30,)
    del words
    seg.close()
    elapsed = time.perf_counter() - t0
    assert elapsed < 0.5, f"16 GiB create/close took {elapsed:.3f} s"
    assert proc.memory_info().rss - rss0 < 64 << 20
    assert not _exists(seg.name)


# -- cross-process ----------------------------------------------------------


def _child_add(name: str, n: int) -> None:
    with Segment.attach(name) as seg:
        a = seg.array(np.int64)
        # The parent wrote a[0]; answer in a[1] so both directions are tested.
        a[1] = a[0] + n
        del a


def test_share_across_processes(prefix):
    with Segment.create("m", 4096, prefix=prefix) as seg:
        a = seg.array(np.int64)
        a[0] = 100
        p = fork.Process(target=_child_add, args=(seg.name, 23))
        p.start()
        p.join(10)
        assert p.exitcode == 0
        assert a[1] == 123
        assert _exists(seg.name)  # the attaching child's close did not unlink
        del a


def _child_closes_inherited(seg: Segment, prefix: str) -> None:
    # Inherited through fork: this process is not the owner pid.
    seg.close()
    segmod.unlink_owned()  # what a normal interpreter exit would run
    # A segment the child creates itself is its own to clean up.
    Segment.create("childs", 4096, prefix=prefix)
    removed = segmod.unlink_owned()
    os._exit(0 if removed == [f"/{prefix}.childs"] else 3)


def test_forked_child_does_not_unlink_parent_segments(prefix):
    seg = Segment.create("m", 4096, prefix=prefix)
    seg.array(np.uint64, 0, 1)[0] = 9
    p = fork.Process(target=_child_closes_inherited, args=(seg, prefix))
    p.start()
    p.join(10)
    assert p.exitcode == 0
    assert _exists(seg.name)
    assert list_segments(prefix) == [seg.name]
    with Segment.attach(seg.name) as again:
        assert again.array(np.uint64, 0, 1)[0] == 9
    seg.close()
    assert not _exists(seg.name)


def test_atexit_in_real_interpreters(prefix):
    """Real exits: a forked child's sys.exit must not unlink; the owner's exit must."""
    script = textwrap.dedent(
        f"""
        import os, sys
        sys.path.insert(0, {REPO!r})
        from shm.segment import Segment
        seg = Segment.create("leak", 4096, prefix={prefix!r})
        pid = os.fork()
        if pid == 0:
            sys.exit(0)  # runs atexit handlers in the child
        os.waitpid(pid, 0)
        print(os.path.exists("/dev/shm" + seg.name))
        # no close(): the owner's atexit handler must unlink
        """
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "True"  # survived the child's exit
    assert list_segments(prefix) == []  # removed by the owner's exit


def test_sigterm_unlinks_what_the_process_created(prefix):
    """``kill`` (SIGTERM) of a script holding segments: they go with it, exit status 143."""
    script = textwrap.dedent(
        f"""
        import sys, time
        sys.path.insert(0, {REPO!r})
        from shm.segment import Segment
        seg = Segment.create("held", 4096, prefix={prefix!r})
        print("ready", flush=True)
        time.sleep(60)
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        assert len(list_segments(prefix)) == 1
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 128 + signal.SIGTERM
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert list_segments(prefix) == []


def _child_attach_and_hang(name: str, ready) -> None:
    seg = Segment.attach(name)
    seg.array(np.uint64, 0, 1)[0] = 77
    ready.set()
    time.sleep(60)


def _child_create_and_hang(q) -> None:
    seg = Segment.create("orphan", 4096, prefix=new_prefix())
    q.put(seg.name)
    time.sleep(60)


def test_sigkilled_attacher_leaves_cleanup_to_owner(prefix):
    seg = Segment.create("m", 4096, prefix=prefix)
    ready = fork.Event()
    p = fork.Process(target=_child_attach_and_hang, args=(seg.name, ready))
    p.start()
    assert ready.wait(10)
    os.kill(p.pid, signal.SIGKILL)
    p.join(10)
    assert p.exitcode == -signal.SIGKILL
    assert _exists(seg.name)
    assert seg.array(np.uint64, 0, 1)[0] == 77
    seg.close()
    assert not _exists(seg.name)


def test_sigkilled_owner_is_reclaimed():
    q = fork.Queue()
    p = fork.Process(target=_child_create_and_hang, args=(q,))
    p.start()
    name = q.get(timeout=10)
    assert owner_pid_of(name) == p.pid
    assert reclaim_stale(f"dmrack.{p.pid}.") == []  # owner still alive
    os.kill(p.pid, signal.SIGKILL)
    p.join(10)
    assert _exists(name)  # SIGKILL runs no handler
    assert reclaim_stale(f"dmrack.{p.pid}.") == [name]
    assert not _exists(name)


# -- cleanup helpers --------------------------------------------------------


def test_reclaim_stale_only_dead_owners(prefix):
    dead = _dead_pid()
    fake = f"/dmrack.{dead}.0123abcd.mem"
    odd = f"/dmrack.notapid.{os.getpid()}.odd"
    for n in (fake, odd):
        posix_ipc.SharedMemory(n, posix_ipc.O_CREX, size=4096).close_fd()
    try:
        live = Segment.create("live", 4096, prefix=prefix)
        # Narrow prefixes keep the test from reclaiming other runs' leftovers
        # on a shared machine; the code path is the same as for "dmrack.".
        assert reclaim_stale(f"dmrack.{os.getpid()}.") == []
        assert reclaim_stale("dmrack.notapid.") == []
        assert reclaim_stale(f"dmrack.{dead}.") == [fake]
        assert not _exists(fake)
        assert _exists(live.name) and _exists(odd)
        live.close()
    finally:
        for n in (fake, odd):
            try:
                posix_ipc.unlink_shared_memory(n)
            except posix_ipc.ExistentialError:
                pass


def test_unlink_all_exact_prefix(prefix):
    a = Segment.create("a", 4096, prefix=prefix)
    b = Segment.create("b", 4096, prefix=prefix)
    other = Segment.create("a", 4096, prefix=prefix + "x")  # a longer prefix
    assert sorted(unlink_all(prefix)) == [a.name, b.name]
    assert list_segments(prefix + ".") == []
    assert list_segments(prefix) == [other.name]
    for s in (a, b, other):
        s.close()  # unlinking twice is harmless
    assert list_segments(prefix) == []
    with pytest.raises(ValueError, match="prefix"):
        unlink_all("")


def test_a_forked_child_terminated_before_its_own_handler_ends_instead_of_unwinding_the_parents_stack(prefix):
    import signal
    import time
    seg = Segment.create("parent-owned", 4096, prefix=prefix)   # the parent's SIGTERM unwinds from now on
    try:
        pid = os.fork()
        if pid == 0:
            try:
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(5)
            finally:
                os._exit(7)                 # reached only if the handler raised in the child
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 128 + signal.SIGTERM
        assert seg.name in list_segments(prefix)          # the child unlinked nothing of the parent's
    finally:
        seg.unlink()
