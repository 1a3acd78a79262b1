"""Tests for shm.atomics: single-threaded semantics and multi-process hammers."""

from __future__ import annotations

import multiprocessing
import random
import time

import numpy as np
import pytest
from numba import njit
from numba.core.errors import TypingError

from shm.atomics import (
    cas,
    faa,
    fence,
    fetch_max,
    fetch_min,
    load_acquire,
    masked_cas,
    masked_faa,
    store_release,
    swap,
)
from shm.segment import Segment

fork = multiprocessing.get_context("fork")

U64 = (1 << 64) - 1
I64_MIN, I64_MAX = -(1 << 63), (1 << 63) - 1


# -- single-threaded semantics ---------------------------------------------


@pytest.fixture(params=[np.int64, np.uint64])
def arr(request):
    return np.zeros(8, dtype=request.param)


def test_cas(arr):
    assert cas(arr, 3, 0, 5) == 0 and arr[3] == 5  # success
    assert cas(arr, 3, 4, 9) == 5 and arr[3] == 5  # failure leaves it alone
    assert cas(arr, 3, 5, 9) == 5 and arr[3] == 9
    assert arr.sum() == 9  # neighbours untouched


def test_faa_and_wrap():
    u = np.array([U64, 5], dtype=np.uint64)
    assert faa(u, 0, 1) == U64 and u[0] == 0
    assert faa(u, 1, -2) == 5 and u[1] == 3  # negative delta wraps
    s = np.array([I64_MAX, 0], dtype=np.int64)
    assert faa(s, 0, 1) == I64_MAX and s[0] == I64_MIN
    assert faa(s, 1, -10) == 0 and s[1] == -10


def test_swap(arr):
    arr[1] = 7
    assert swap(arr, 1, 11) == 7 and arr[1] == 11


def test_fetch_min_max_signedness():
    s = np.array([1, 1], dtype=np.int64)
    assert fetch_min(s, 0, -1) == 1 and s[0] == -1  # signed: -1 < 1
    assert fetch_max(s, 1, -1) == 1 and s[1] == 1
    u = np.array([1, 1], dtype=np.uint64)
    assert fetch_min(u, 0, U64) == 1 and u[0] == 1  # unsigned: 2**64-1 > 1
    assert fetch_max(u, 1, U64) == 1 and u[1] == U64
    assert fetch_max(u, 1, 3) == U64 and u[1] == U64


def test_load_store_fence(arr):
    store_release(arr, 2, 42)
    assert arr[2] == 42 and load_acquire(arr, 2) == 42
    fence()


def test_return_type_follows_array():
    u = np.array([U64], dtype=np.uint64)
    assert load_acquire(u, 0) == U64
    s = u.view(np.int64)
    assert load_acquire(s, 0) == -1


@pytest.mark.parametrize(
    "old, compare, swap_v, cmask, smask, new",
    [
        # compare the low byte, replace the high byte
        (0x1234, 0x34, 0xAB00, 0xFF, 0xFF00, 0xAB34),
        # low byte differs: fails, nothing written
        (0x1234, 0x35, 0xAB00, 0xFF, 0xFF00, 0x1234),
        # bits of `compare` outside compare_mask are ignored
        (0x1234, 0xFF34, 0x0001, 0xFF, 0xF, 0x1231),
        # compare_mask 0: unconditional masked write; swap bits outside mask ignored
        (0xF0F0, 0, 0xFFFF, 0, 0x0F00, 0xFFF0),
        # full masks: plain CAS
        (7, 7, 9, U64, U64, 9),
        (7, 6, 9, U64, U64, 7),
        # a lock bit in the top bit plus a version in the low 32 bits
        (0x0000_0000_0000_0005, 0x0000_0000_0000_0005, 1 << 63, U64, 1 << 63,
         0x8000_0000_0000_0005),
    ],
)
def test_masked_cas(old, compare, swap_v, cmask, smask, new):
    a = np.array([old], dtype=np.uint64)
    assert masked_cas(a, 0, compare, swap_v, cmask, smask) == old
    assert a[0] == new


def test_masked_cas_int64_negative():
    a = np.array([-1], dtype=np.int64)
    # compare the low 32 bits (all ones), clear the high 32 bits
    assert masked_cas(a, 0, 0xFFFF_FFFF, 0, 0xFFFF_FFFF, -(1 << 32)) == -1
    assert a[0] == 0xFFFF_FFFF


def _ref_masked_faa(old: int, add: int, boundary: int) -> int:
    """Field-by-field reference; bit 63 always ends the last field."""
    boundary |= 1 << 63
    result, lo = 0, 0
    for bit in range(64):
        if boundary >> bit & 1:
            width = bit - lo + 1
            m = (1 << width) - 1
            result |= (((old >> lo) & m) + ((add >> lo) & m) & m) << lo
            lo = bit + 1
    return result


@pytest.mark.parametrize(
    "old, add, boundary, new",
    [
        # no boundaries: plain 64-bit wrapping add
        (5, 7, 0, 12),
        (U64, 2, 0, 1),
        # two 32-bit fields: the low field wraps, the high one does not see the carry
        (0x0000_0001_FFFF_FFFF, 1, 0x8000_0000_8000_0000, 0x0000_0001_0000_0000),
        # four 16-bit fields, each carrying out of its own MSB
        (0xFFFF_0001_8000_FFFE, 0x0001_0001_8000_0003, 0x8000_8000_8000_8000,
         0x0000_0002_0000_0001),
        # uneven fields (bits 0..3 and 4..63): 0xF + 1 wraps to 0 in the low field
        (0x1F, 0x11, 1 << 3, 0x20),
        # boundary not at bit 63: the top field still ends at bit 63
        (0x0F, 0x01, 1 << 3, 0x00),
        # every bit is a field: addition becomes xor
        (0b1011, 0b0110, U64, 0b1101),
    ],
)
def test_masked_faa_cases(old, add, boundary, new):
    assert _ref_masked_faa(old, add, boundary) == new
    a = np.array([old], dtype=np.uint64)
    assert masked_faa(a, 0, add, boundary) == old
    assert a[0] == new


def test_masked_faa_matches_reference_randomly():
    rng = random.Random(1234)
    a = np.zeros(1, dtype=np.uint64)
    s = a.view(np.int64)
    for _ in range(2000):
        old, add = rng.getrandbits(64), rng.getrandbits(64)
        boundary = rng.getrandbits(64) & rng.getrandbits(64)
        a[0] = old
        assert masked_faa(a, 0, add, boundary) == old
        assert int(a[0]) == _ref_masked_faa(old, add, boundary)
        # the int64 specialisation does the same bit arithmetic
        s[0] = np.uint64(old).view(np.int64)
        masked_faa(s, 0, np.uint64(add).view(np.int64), np.uint64(boundary).view(np.int64))
        assert int(a[0]) == _ref_masked_faa(old, add, boundary)


def test_python_path_checks_arguments():
    with pytest.raises(TypeError, match="int64 or uint64"):
        faa(np.zeros(4, dtype=np.float64), 0, 1)
    with pytest.raises(TypeError, match="1-D C-contiguous"):
        faa(np.zeros((2, 2), dtype=np.int64), 0, 1)
    with pytest.raises(TypeError, match="1-D C-contiguous"):
        faa(np.zeros(8, dtype=np.int64)[::2], 0, 1)
    a = np.zeros(4, dtype=np.uint64)
    with pytest.raises(IndexError, match="index 4 out of range for 4 words"):
        cas(a, 4, 0, 1)
    with pytest.raises(IndexError, match="index -1"):
        faa(a, -1, 1)
    ro = np.zeros(4, dtype=np.int64)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        faa(ro, 0, 1)
    assert load_acquire(ro, 0) == 0  # loads are fine on read-only arrays


def test_jitted_path_rejects_unsupported_arrays():
    @njit
    def bump(a):
        return faa(a, 0, 1)

    with pytest.raises(TypingError, match="int64 or uint64"):
        bump(np.zeros(4, dtype=np.float64))


def test_python_ints_of_any_sign_and_size():
    """Big masks and negative deltas work whatever was compiled before."""
    u = np.zeros(1, dtype=np.uint64)
    masked_cas(u, 0, 0, 1, 0, 1)  # compiles small-int operands first
    assert masked_cas(u, 0, 1, 1 << 63, 1, 1 << 63) == 1
    assert u[0] == (1 << 63) | 1
    assert faa(u, 0, -1) == (1 << 63) | 1 and u[0] == 1 << 63
    s = np.zeros(1, dtype=np.int64)
    assert swap(s, 0, U64) == 0 and s[0] == -1  # wraps into the signed word
    # two 32-bit fields of all ones: each wraps to 0 on its own
    assert masked_faa(s, 0, (1 << 32) | 1, 0x8000_0000_8000_0000) == -1 and s[0] == 0


def test_callable_from_jitted_code():
    @njit
    def bump_twice(a):
        faa(a, 0, 1)
        return cas(a, 0, 1, 10)

    a = np.zeros(1, dtype=np.int64)
    assert bump_twice(a) == 1 and a[0] == 10


# -- multi-process hammers ---------------------------------------------------

# Jitted loops so the processes really race on the word instead of spending
# their time in the interpreter.


@njit(cache=True)
def _faa_loop(a, n):
    for _ in range(n):
        faa(a, 0, 1)


@njit(cache=True)
def _cas_increment_loop(a, n):
    retries = 0
    for _ in range(n):
        old = load_acquire(a, 0)
        while True:
            seen = cas(a, 0, old, old + 1)
            if seen == old:
                break
            old = seen
            retries += 1
    return retries


@njit(cache=True)
def _masked_faa_loop(a, n, add, boundary):
    for _ in range(n):
        masked_faa(a, 0, add, boundary)


def _worker(name, nprocs, kind, n, args):
    with Segment.attach(name) as seg:
        a = seg.array(np.int64 if kind == "cas" else np.uint64, 0, 2)
        # Barrier on word 1. Waiters yield rather than block, so once the last
        # worker arrives everybody is runnable at once and the loops overlap;
        # with an Event the wake-ups are staggered enough for a short loop to
        # finish before the next process even starts.
        faa(a, 1, 1)
        while load_acquire(a, 1) < nprocs:
            time.sleep(0)
        if kind == "faa":
            _faa_loop(a, n)
        elif kind == "cas":
            _cas_increment_loop(a, n)
        else:
            _masked_faa_loop(a, n, *args)
        del a


def _hammer(prefix, kind, n, per_proc_args):
    """Run one worker per entry of per_proc_args, all released together."""
    seg = Segment.create("hammer", 4096, prefix=prefix)
    try:
        procs = [
            fork.Process(target=_worker, args=(seg.name, len(per_proc_args), kind, n, args))
            for args in per_proc_args
        ]
        for p in procs:
            p.start()
        for p in procs:
            p.join(60)
        assert [p.exitcode for p in procs] == [0] * len(procs)
        return int(seg.array(np.uint64, 0, 1)[0])
    finally:
        seg.close()


@pytest.fixture(scope="module", autouse=True)
def _compile_before_fork():
    # Children inherit the compiled code instead of each compiling it.
    u, s = np.zeros(2, dtype=np.uint64), np.zeros(2, dtype=np.int64)
    _faa_loop(u, 1)
    _cas_increment_loop(s, 1)
    _masked_faa_loop(u, 1, 1, 1 << 63)


def test_hammer_faa(prefix):
    n, procs = 2_000_000, 4
    assert _hammer(prefix, "faa", n, [()] * procs) == n * procs


def test_hammer_cas_increment(prefix):
    n, procs = 1_000_000, 3
    assert _hammer(prefix, "cas", n, [()] * procs) == n * procs


def test_hammer_masked_faa_fields(prefix):
    # Four 16-bit fields, one process per field. n > 2**16, so every field
    # wraps repeatedly; a carry leaking into a neighbour would show up there.
    n, boundary = 1_000_000, 0x8000_8000_8000_8000
    word = _hammer(prefix, "masked", n, [(1 << (16 * k), boundary) for k in range(4)])
    fields = [(word >> (16 * k)) & 0xFFFF for k in range(4)]
    assert fields == [n % (1 << 16)] * 4


def test_python_entry_points_fast_path_decides_as_the_full_checks():
    """``_check`` and ``_word_of`` recognise native int64/uint64 arrays and int operands by
    identity; every other argument takes the full checks. Both must give the same index, the
    same word and the same error."""
    from shm.atomics import _check, _check_slow, _word_of, _word_of_slow

    def outcome(fn, *args):
        try:
            return ("ok", fn(*args))
        except Exception as e:                                    # noqa: BLE001 - compared
            return (type(e).__name__, str(e))

    ro = np.zeros(4, np.int64)
    ro.flags.writeable = False
    arrays = [np.zeros(4, np.int64), np.zeros(4, np.uint64), ro, np.zeros(8, np.int64)[::2],
              np.zeros((2, 2), np.int64), np.zeros(4, np.float64), np.zeros(4, np.dtype(">i8")), [0, 0]]
    rng = random.Random(7)
    for arr in arrays:
        for i in (0, 3, 4, -1, np.int64(2), True, 2.0):
            for write in (True, False):
                assert outcome(lambda *a: _check(*a, write=write), arr, i) == outcome(_check_slow, arr, i, write)
        if isinstance(arr, np.ndarray) and arr.dtype in (np.int64, np.uint64):
            values = [0, -1, 1 << 63, (1 << 64) - 1, 1 << 64, -(1 << 63) - 1, np.uint64(5), np.int64(-5),
                      np.uint64((1 << 64) - 1), np.int64(-(1 << 63)), np.int32(-3), True, 2.0]
            for v in values + [rng.getrandbits(70) - (1 << 69) for _ in range(200)]:
                fast, slow = _word_of(arr, v), _word_of_slow(arr, v)
                assert int(fast) == int(slow) and arr.dtype.type(fast) == slow
