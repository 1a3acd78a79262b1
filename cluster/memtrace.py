"""Memory tracing inside a node process, for finding what grows in a long run.

``DMRACK_MEMTRACE=DIR`` (inherited from the supervisor, like ``DMRACK_FAILPOINTS``) makes every
node process start a daemon thread that, every ``DMRACK_MEMTRACE_EVERY`` seconds (default 60),
appends one record to ``DIR/<node>.memtrace``: the process's anonymous memory (``Anon`` of
``/proc/self/smaps_rollup``), the heap of the C allocator (``mallinfo2``, when glibc has it), the
objects Python's allocator holds (``sys.getallocatedblocks``), numba's runtime allocations (NRT
allocs minus frees: arrays made inside jitted code, which no Python tracer sees) and, with
``DMRACK_MEMTRACE_FRAMES=N`` (N > 0), the 12 source lines whose ``tracemalloc`` allocations grew
most since the first record. ``DMRACK_MEMTRACE_COLLECT=1`` runs a full garbage collection right
after the first record, the event that copies a forked node's inherited pages unless the
supervisor froze them (``gc.freeze`` in ``cluster/supervisor.py``). So a step in a soak run (``scripts/soak.py``) is pinned to a layer:
Python objects, numpy or numba arrays, or the C heap under them.

A diagnostic, off by default: it costs nothing unless the variable is set, and ``tracemalloc``
slows a node down (by roughly a third with a few frames), so a traced run's timing is not a
benchmark.
"""

from __future__ import annotations

import ctypes
import os
import sys
import threading
import time


def _anon_kib() -> int:
    try:
        with open("/proc/self/smaps_rollup") as f:
            for line in f:
                if line.startswith("Anonymous:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return -1


class _Mallinfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
                 "fordblks", "keepcost")]


def _malloc_kib() -> tuple[int, int, int]:
    """(in use, free in the heap, mmapped) KiB of the C allocator, or -1s without mallinfo2."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        f = libc.mallinfo2
    except (OSError, AttributeError):
        return -1, -1, -1
    f.restype = _Mallinfo2
    m = f()
    return m.uordblks // 1024, m.fordblks // 1024, m.hblkhd // 1024


def _nrt_live() -> int:
    try:
        from numba.core.runtime import rtsys
        s = rtsys.get_allocation_stats()
        return s.alloc - s.free
    except Exception:  # noqa: BLE001 - numba without NRT stats enabled: report -1
        return -1


def start(name: str) -> None:
    """Start tracing this process when ``DMRACK_MEMTRACE`` is set; a no-op otherwise."""
    out_dir = os.environ.get("DMRACK_MEMTRACE")
    if not out_dir:
        return
    every = float(os.environ.get("DMRACK_MEMTRACE_EVERY", "60"))
    frames = int(os.environ.get("DMRACK_MEMTRACE_FRAMES", "0"))
    collect = os.environ.get("DMRACK_MEMTRACE_COLLECT") == "1"
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, f"{name}.memtrace")
    if frames > 0:
        import tracemalloc
        tracemalloc.start(frames)

    def loop() -> None:
        nonlocal collect
        t0 = time.monotonic()
        first = None
        while True:
            t = time.monotonic() - t0
            used, free, mapped = _malloc_kib()
            lines = [f"t={t:.0f}s anon={_anon_kib()}KiB malloc_used={used}KiB malloc_free={free}KiB "
                     f"malloc_mmap={mapped}KiB pyblocks={sys.getallocatedblocks()} nrt_live={_nrt_live()}"]
            if frames > 0:
                import tracemalloc
                snap = tracemalloc.take_snapshot()
                if first is None:
                    first = snap
                else:
                    for stat in snap.compare_to(first, "traceback")[:12]:
                        lines.append(f"  {stat.size_diff / 1024:+.0f} KiB {stat.count_diff:+d} blocks: "
                                     + " <- ".join(f"{fr.filename.rsplit('/', 2)[-1]}:{fr.lineno}"
                                                   for fr in stat.traceback))
            with open(path, "a") as f:
                f.write("\n".join(lines) + "\n")
            if collect:
                collect = False
                import gc
                gc.collect()
            time.sleep(every)

    threading.Thread(target=loop, name="memtrace", daemon=True).start()
