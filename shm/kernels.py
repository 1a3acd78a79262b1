"""Entering a compiled kernel from the per-verb Python path for the price of the call alone.

Calling a numba function from Python goes through its dispatcher, which types every argument
(``typeof``), picks the matching compiled version, then unboxes the arguments and runs it. On the
verbs' hot path the choice never changes: the NIC model always gets the fabric's int64 tables and
a batch's int64 rows, a landing always a node's uint8 memory and int64 seqlocks. Typing nine
arguments on each call cost about 0.25 µs of the 1.3 µs a one-READ post spent entering the model
from Python (docs/bench.md), as much as the model's own work on some stations.

:func:`entry` returns the compiled version's entry point for the types of example arguments,
compiling (or loading from numba's cache) once. Calling it skips the typing, not the unboxing, and
runs the same machine code the dispatcher would pick for those types, so results are identical.

The price of skipping the typing: the entry point trusts its caller. An array of another dtype
or number of dimensions is not rejected but read as if it had the expected one. So an entry is
taken only where the arguments are the emulator's own arrays, made with the types the example
has (the fabric's tables, segments' views, the rows a coroutine allocates), never for arrays a
user passes in; :func:`entry` refuses an example whose arrays are not C-contiguous, so a view
that happens to be strided does not silently select a slower layout that later calls break.
"""

from __future__ import annotations

import numpy as np
from numba import typeof, types

__all__ = ["entry", "type_key"]

_ENTRIES: dict = {}
_I64_MIN, _I64_END = -(1 << 63), 1 << 63


def type_key(a):
    """What numba's type of ``a`` depends on, cheaply: for an array its dtype, dimensions, layout
    and flags (``typeof`` takes microseconds per array); anything else is typed as numba does.
    Equal keys mean the same compiled version: a key for caches of entry points. A Python int
    in int64's range is numba's int64 (``typeof`` goes through its dispatch and ``bit_length``
    for that, about 5 µs: the examples of :func:`entry` are mostly such ints)."""
    if isinstance(a, np.ndarray):
        f = a.flags
        return (a.dtype, a.ndim, f.c_contiguous, f.writeable, f.aligned)
    if type(a) is int and _I64_MIN <= a < _I64_END:
        return types.int64
    return typeof(a)


def entry(kernel, *example):
    """The compiled entry point of the numba function ``kernel`` for the argument types of
    ``example`` (one per parameter: the arrays and scalars a hot path will pass)."""
    for a in example:
        if isinstance(a, np.ndarray) and not a.flags.c_contiguous:
            raise ValueError(f"{kernel.__name__}: an entry point needs C-contiguous arrays, got shape "
                             f"{a.shape} with strides {a.strides}")
    key = (kernel, tuple(type_key(a) for a in example))
    fn = _ENTRIES.get(key)
    if fn is None:
        fn = _ENTRIES[key] = kernel.compile(tuple(typeof(a) for a in example))
    return fn
