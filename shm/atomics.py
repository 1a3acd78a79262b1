"""64-bit atomic operations on shared numpy arrays, as numba intrinsics.

RDMA atomics (CAS, FAA and the Mellanox "extended" masked variants) act on
8-byte words of remote memory. In the emulator that memory is a POSIX
shared-memory mapping seen by several processes, so the operations must be
real hardware atomics on that mapping, not Python-level emulation. numba has
no public atomic API for CPU code, so the primitives here are small
``@intrinsic`` functions that emit LLVM ``cmpxchg``/``atomicrmw``/atomic
load/store/fence instructions on the element pointer of a 1-D C-contiguous
int64 or uint64 array.

Memory orderings:

* Read-modify-writes (``cas``, ``faa``, ``swap``, ``fetch_min/max`` and the
  cmpxchg loops behind ``masked_cas``/``masked_faa``) are ``seq_cst``. RDMA
  atomics are used for locks, tickets and version counters whose users expect
  them to be totally ordered; on x86-64 every locked RMW is a full barrier
  anyway, so weaker orderings would buy nothing on the machines we run on.
  The masked loops start from an acquire load, so a ``masked_cas`` whose
  compare fails on that first read is just an acquire load (as a failed
  hardware CAS is a read).
* ``load_acquire``/``store_release`` are ``acquire``/``release``: the
  publish/consume pairs of ring buffers and seqlocks need exactly that, and
  on x86-64 they compile to plain MOVs.
* ``fence()`` is a ``seq_cst`` fence (MFENCE on x86-64), for the rare
  store->load ordering a protocol needs.

All instructions use LLVM's default (system) synchronisation scope, which is
what makes them coherent across processes sharing the mapping.

The jitted fast paths do **not** bound-check the word index: callers (verbs,
rings) validate addresses once, up front. An out-of-range index is a wild
memory access. Arrays must also be naturally (8-byte) aligned, which every
``Segment.array(np.int64/np.uint64, ...)`` view is, since ``array()``
enforces offset alignment and mappings are page-aligned.

Each public function exists twice, under one name. Called from jitted code
it resolves (through ``numba.extending.overload``) to a tiny kernel that
inlines to one instruction or a short cmpxchg loop. Called from Python (tests,
slow paths) it checks the array and index, converts the operands, and runs
the same kernel, an ``@njit(cache=True)`` function. Operands are converted
(wrapping) to the array's element type, so with a uint64 array negative
deltas wrap as expected, and with an int64 array ``fetch_min``/``fetch_max``
compare signed while with uint64 they compare unsigned.

Caching caveat: numba keys the on-disk cache of a jitted function only on
its own source file, so a cached caller in another module (``shm/ring.py``,
...) keeps the atomics it was compiled with. After editing this file, delete
the ``*.nbi``/``*.nbc`` files of its dependents.
"""

from __future__ import annotations

import operator

import numpy as np
from numba import njit, types
from numba.core import cgutils, errors
from numba.core.extending import intrinsic, overload

__all__ = [
    "cas",
    "faa",
    "swap",
    "fetch_min",
    "fetch_max",
    "masked_cas",
    "masked_faa",
    "load_acquire",
    "store_release",
    "fence",
]

_WORD_TYPES = (types.int64, types.uint64)


def _check_array(arr, *, write: bool) -> None:
    """Reject, at compile time, arrays the intrinsics cannot handle."""
    if not (
        isinstance(arr, types.Array)
        and arr.ndim == 1
        and arr.layout == "C"
        and arr.dtype in _WORD_TYPES
    ):
        raise errors.TypingError(
            f"dmrack atomics need a 1-D C-contiguous int64 or uint64 array, got {arr}"
        )
    if write and not arr.mutable:
        raise errors.TypingError(f"dmrack atomics cannot modify a read-only array ({arr})")


def _word_ptr(context, builder, aryty, ary_val, idx_val):
    ary = context.make_array(aryty)(context, builder, ary_val)
    return cgutils.get_item_pointer(context, builder, aryty, ary, [idx_val], wraparound=False)


def _rmw_intrinsic(op_for_dtype):
    """Build an intrinsic ``f(arr, i, value) -> old`` for one atomicrmw op."""

    def impl(typingctx, arr, i, value):
        _check_array(arr, write=True)
        sig = arr.dtype(arr, types.intp, arr.dtype)

        def codegen(context, builder, signature, args):
            aryty = signature.args[0]
            ptr = _word_ptr(context, builder, aryty, args[0], args[1])
            return builder.atomic_rmw(op_for_dtype(aryty.dtype), ptr, args[2], "seq_cst")

        return sig, codegen

    return intrinsic(impl)


_faa = _rmw_intrinsic(lambda dt: "add")
_swap = _rmw_intrinsic(lambda dt: "xchg")
_min = _rmw_intrinsic(lambda dt: "min" if dt.signed else "umin")
_max = _rmw_intrinsic(lambda dt: "max" if dt.signed else "umax")


@intrinsic
def _cas(typingctx, arr, i, expected, desired):
    _check_array(arr, write=True)
    sig = arr.dtype(arr, types.intp, arr.dtype, arr.dtype)

    def codegen(context, builder, signature, args):
        ptr = _word_ptr(context, builder, signature.args[0], args[0], args[1])
        pair = builder.cmpxchg(ptr, args[2], args[3], "seq_cst", "seq_cst")
        return builder.extract_value(pair, 0)

    return sig, codegen


@intrinsic
def _load(typingctx, arr, i):
    _check_array(arr, write=False)
    sig = arr.dtype(arr, types.intp)

    def codegen(context, builder, signature, args):
        ptr = _word_ptr(context, builder, signature.args[0], args[0], args[1])
        return builder.load_atomic(ptr, "acquire", 8)

    return sig, codegen


@intrinsic
def _store(typingctx, arr, i, value):
    _check_array(arr, write=True)
    sig = types.void(arr, types.intp, arr.dtype)

    def codegen(context, builder, signature, args):
        ptr = _word_ptr(context, builder, signature.args[0], args[0], args[1])
        builder.store_atomic(args[2], ptr, "release", 8)
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def _fence(typingctx):
    sig = types.void()

    def codegen(context, builder, signature, args):
        builder.fence("seq_cst")
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def _word(typingctx, arr, value):
    """``value`` converted (wrapping) to the element type of ``arr``.

    The masked loops do bit arithmetic; keeping every operand in one integer
    type avoids numba's int64/uint64 -> float64 promotion.
    """
    _check_array(arr, write=False)
    sig = arr.dtype(arr, arr.dtype)

    def codegen(context, builder, signature, args):
        return args[1]

    return sig, codegen



def _check_bytes(arr) -> None:
    if not (isinstance(arr, types.Array) and arr.ndim == 1 and arr.layout == "C" and arr.dtype == types.uint8):
        raise errors.TypingError(f"dmrack word access needs a 1-D C-contiguous uint8 array, got {arr}")


def _byte_word_ptr(context, builder, aryty, ary_val, off_val):
    """The address of byte ``off`` of a uint8 array, as a pointer to a 64-bit word."""
    ptr = _word_ptr(context, builder, aryty, ary_val, off_val)
    return builder.bitcast(ptr, context.get_value_type(types.uint64).as_pointer())


@intrinsic
def load_word_at(typingctx, arr, off):
    """The aligned 8-byte word at byte ``off`` of a uint8 array (jitted code only), loaded whole:
    a concurrent store or atomic on it is seen entirely or not at all, as a NIC's DMA read of an
    aligned word. ``off`` must be a multiple of 8 and the array's base 8-byte aligned (a
    segment's views and the threads' buffers are). One instruction; ``arr.view(np.uint64)``,
    which did the same, builds a new array each time, about 50 ns in a copy of one word."""
    _check_bytes(arr)
    sig = types.uint64(arr, types.intp)

    def codegen(context, builder, signature, args):
        ptr = _byte_word_ptr(context, builder, signature.args[0], args[0], args[1])
        return builder.load_atomic(ptr, "monotonic", 8)

    return sig, codegen


@intrinsic
def store_word_at(typingctx, arr, off, value):
    """Store the 8-byte ``value`` at byte ``off`` (8-byte aligned) of a uint8 array, whole
    (jitted code only; the counterpart of :func:`load_word_at`)."""
    _check_bytes(arr)
    if not arr.mutable:
        raise errors.TypingError(f"dmrack word access cannot modify a read-only array ({arr})")
    sig = types.void(arr, types.intp, types.uint64)

    def codegen(context, builder, signature, args):
        ptr = _byte_word_ptr(context, builder, signature.args[0], args[0], args[1])
        builder.store_atomic(args[2], ptr, "monotonic", 8)
        return context.get_dummy_value()

    return sig, codegen


# -- jitted kernels ------------------------------------------------------------
#
# The kernels are what Python callers end up running; jitted callers get the
# same bodies compiled inline through the overloads registered below.


@njit(cache=True)
def _cas_k(arr, i, expected, desired):
    return _cas(arr, i, expected, desired)


@njit(cache=True)
def _faa_k(arr, i, delta):
    return _faa(arr, i, delta)


@njit(cache=True)
def _swap_k(arr, i, value):
    return _swap(arr, i, value)


@njit(cache=True)
def _min_k(arr, i, value):
    return _min(arr, i, value)


@njit(cache=True)
def _max_k(arr, i, value):
    return _max(arr, i, value)


@njit(cache=True)
def _masked_cas_k(arr, i, compare, swap, compare_mask, swap_mask):
    cmask = _word(arr, compare_mask)
    want = _word(arr, compare) & cmask
    smask = _word(arr, swap_mask)
    bits = _word(arr, swap) & smask
    old = _load(arr, i)
    while True:
        if (old & cmask) != want:
            return old
        seen = _cas(arr, i, old, (old & ~smask) | bits)
        if seen == old:
            return old
        old = seen


@njit(cache=True)
def _masked_faa_k(arr, i, add, boundary_mask):
    msb = _word(arr, boundary_mask)
    delta = _word(arr, add)
    # SWAR addition: add with the field MSBs cleared, so a carry can reach an
    # MSB position but never leave it, then put the MSBs back as
    # old_msb ^ add_msb ^ carry_in (the carry_in is already in the sum).
    delta_low = delta & ~msb
    delta_msb = delta & msb
    old = _load(arr, i)
    while True:
        new = ((old & ~msb) + delta_low) ^ ((old & msb) ^ delta_msb)
        seen = _cas(arr, i, old, new)
        if seen == old:
            return old
        old = seen


@njit(cache=True)
def _load_k(arr, i):
    return _load(arr, i)


@njit(cache=True)
def _store_k(arr, i, value):
    _store(arr, i, value)


@njit(cache=True)
def _fence_k():
    _fence()


# -- Python entry points -------------------------------------------------------
#
# Why not call the kernels straight from Python: numba's dispatcher types a
# Python int >= 2**63 as uint64 but will still run it through an already
# compiled int64 specialisation and fail with "OverflowError: int too big to
# convert", and a negative int cannot go into a uint64 one. Which of the two
# bites depends on call order. So the Python path first turns every operand
# into a numpy scalar of the array's own type (wrapping like the hardware
# would); that always selects one exact specialisation per array dtype. It
# is also the place for the bounds check the jitted path leaves out.

_MASK64 = (1 << 64) - 1
# The native-order word dtypes: numpy hands out one descriptor object per builtin type, so an
# ``is`` test recognises them for a few ns (``arr.dtype in (np.int64, np.uint64)`` and
# ``arr.dtype.type(v)`` cost about a µs each; the epoch announcements of nodes/systems/lib/
# reclaim.py call these entry points once or twice an operation when a thread runs one
# coroutine). Anything else, a byte-swapped dtype included, takes the full checks below, which
# decide alike.
_I64, _U64 = np.dtype(np.int64), np.dtype(np.uint64)
_new_i64, _new_u64 = np.int64, np.uint64


def _check(arr, i, *, write: bool = True) -> int:
    if type(arr) is np.ndarray and type(i) is int:
        dt = arr.dtype
        if (dt is _I64 or dt is _U64) and arr.ndim == 1 and 0 <= i < arr.shape[0]:
            flags = arr.flags
            if flags.c_contiguous and (flags.writeable or not write):
                return i
    return _check_slow(arr, i, write)


def _check_slow(arr, i, write: bool) -> int:
    """:func:`_check` for any argument: the error a bad one gets, or the index."""
    if not (
        isinstance(arr, np.ndarray)
        and arr.ndim == 1
        and arr.dtype in (np.int64, np.uint64)
        and arr.flags.c_contiguous
    ):
        if isinstance(arr, np.ndarray):
            desc = f"a {arr.dtype} array of shape {arr.shape}"
        else:
            desc = type(arr).__name__
        raise TypeError(
            f"dmrack atomics need a 1-D C-contiguous int64 or uint64 array, got {desc}"
        )
    if write and not arr.flags.writeable:
        raise ValueError("dmrack atomics cannot modify a read-only array")
    i = operator.index(i)
    if not 0 <= i < arr.shape[0]:
        raise IndexError(f"atomic word index {i} out of range for {arr.shape[0]} words")
    return i


def _word_of(arr: np.ndarray, value):
    dt = arr.dtype
    kind = type(value)
    if dt is _I64:
        if kind is int:
            # a Python int within int64's range: numba types it int64, the array's specialisation
            # (making an np.int64 of it costs more than the kernel's call)
            v = value & _MASK64
            return v - (1 << 64) if v >> 63 else v
        if kind is _new_i64:            # already the array's scalar (a word read from it, say)
            return value
    elif dt is _U64:
        if kind is int:
            return _new_u64(value & _MASK64)
        if kind is _new_u64:
            return value
    return _word_of_slow(arr, value)


def _word_of_slow(arr: np.ndarray, value) -> np.integer:
    """:func:`_word_of` for any operand: ``value`` wrapped to 64 bits, as the array's scalar type."""
    v = int(value) & _MASK64
    if arr.dtype == np.int64 and v >> 63:
        v -= 1 << 64
    return arr.dtype.type(v)


def _jitted_as(kernel):
    """Make jitted calls to the decorated Python function compile ``kernel`` inline."""

    def register(pyfunc):
        overload(pyfunc, strict=False)(lambda *args: kernel.py_func)
        return pyfunc

    return register


@_jitted_as(_cas_k)
def cas(arr, i, expected, desired):
    """Compare-and-swap ``arr[i]``; returns the old value (success iff old == expected)."""
    i = _check(arr, i)
    return _cas_k(arr, i, _word_of(arr, expected), _word_of(arr, desired))


@_jitted_as(_faa_k)
def faa(arr, i, delta):
    """Fetch-and-add (wrapping); returns the old value."""
    i = _check(arr, i)
    return _faa_k(arr, i, _word_of(arr, delta))


@_jitted_as(_swap_k)
def swap(arr, i, value):
    """Atomic exchange; returns the old value."""
    i = _check(arr, i)
    return _swap_k(arr, i, _word_of(arr, value))


@_jitted_as(_min_k)
def fetch_min(arr, i, value):
    """``arr[i] = min(arr[i], value)`` (signed for int64, unsigned for uint64); returns old."""
    i = _check(arr, i)
    return _min_k(arr, i, _word_of(arr, value))


@_jitted_as(_max_k)
def fetch_max(arr, i, value):
    """``arr[i] = max(arr[i], value)`` (signed for int64, unsigned for uint64); returns old."""
    i = _check(arr, i)
    return _max_k(arr, i, _word_of(arr, value))


@_jitted_as(_masked_cas_k)
def masked_cas(arr, i, compare, swap, compare_mask, swap_mask):
    """Mellanox extended CAS; returns the old value.

    Succeeds iff ``(old & compare_mask) == (compare & compare_mask)``, and then
    stores ``(old & ~swap_mask) | (swap & swap_mask)``. The caller detects
    success by re-applying the compare to the returned value.
    """
    i = _check(arr, i)
    w = _word_of
    return _masked_cas_k(arr, i, w(arr, compare), w(arr, swap), w(arr, compare_mask),
                         w(arr, swap_mask))


@_jitted_as(_masked_faa_k)
def masked_faa(arr, i, add, boundary_mask):
    """Mellanox masked fetch-and-add; returns the old value.

    A set bit in ``boundary_mask`` marks the most significant bit of a field;
    each field adds independently and wraps, never carrying into the next.
    """
    i = _check(arr, i)
    return _masked_faa_k(arr, i, _word_of(arr, add), _word_of(arr, boundary_mask))


@_jitted_as(_load_k)
def load_acquire(arr, i):
    """Atomic load with acquire ordering."""
    i = _check(arr, i, write=False)
    return _load_k(arr, i)


@_jitted_as(_store_k)
def store_release(arr, i, value):
    """Atomic store with release ordering."""
    i = _check(arr, i)
    _store_k(arr, i, _word_of(arr, value))


@_jitted_as(_fence_k)
def fence():
    """Sequentially consistent memory fence."""
    _fence_k()
