"""Bounded shared-memory ring buffers (message queues between node processes).

A ring is one ``Segment`` holding a fixed number of fixed-size slots, each
``slot_words`` uint64 words; the capacity is a power of two so a position maps
to a slot with a mask. It is the transport for doorbells, completions and
control messages between node processes.

Design: Dmitry Vyukov's bounded MPMC queue. Every slot carries a sequence
number that says whose turn it is:

* ``seq == pos``        the slot is free for the producer of position ``pos``;
* ``seq == pos + 1``    it holds the message of position ``pos``;
* producer/consumer positions are monotonically increasing 64-bit counters
  (``tail``/``head``) that never wrap in practice.

A producer claims position ``tail`` (with a CAS on ``tail`` when the ring is
multi-producer, a plain release store when there is a single producer), fills
the slot and publishes it with a release store of ``seq = pos + 1``. A
consumer claims ``head`` with a CAS (which makes multiple consumers free),
copies the slot out and hands it back with ``seq = pos + capacity``. Because
slot reuse is gated by the per-slot sequence, the same layout serves both
producer modes, and a full ring is detected without reading ``head``: a
full ring never overwrites, producers get backpressure.

Caveat inherent to the design: a producer that dies between claiming a
position and publishing it (e.g. SIGKILL) stalls consumers at that slot.
Rings are per-rack and die with it, so we accept this.

Layout (int64 words for the header and sequences, uint64 slots)::

    line 0 (bytes   0.. 63)  magic, capacity, slot_words, flags
    line 1 (bytes  64..127)  tail   (producers' line)
    line 2 (bytes 128..191)  head   (consumers' line)
    bytes 192..              seqs[capacity]     (int64)
    64-aligned after that    slots[capacity][slot_words] (uint64)

``tail`` and ``head`` sit on separate cache lines so producers and consumers
do not false-share.

The jitted cores take all arrays as arguments (nothing is captured), so the
``Ring`` class is a thin Python handle and jitted node code can call
``ring_try_push``/``ring_try_pop`` directly on the views.
"""

from __future__ import annotations

import operator
import time
from typing import NamedTuple, Sequence

import numpy as np
from numba import njit

from shm.atomics import cas, load_acquire, store_release
from shm.segment import Segment

__all__ = [
    "Ring",
    "RingStats",
    "RingFull",
    "RingEmpty",
    "ring_try_push",
    "ring_try_pop",
    "ring_len",
    "ring_nbytes",
]

RING_MAGIC = 0x676E_6952_6B63_7244  # b"DrckRing" little-endian; fits in int64

# Header word indices.
H_MAGIC = 0
H_CAPACITY = 1
H_SLOT_WORDS = 2
H_FLAGS = 3
H_TAIL = 8  # cache line 1
H_HEAD = 16  # cache line 2
HEADER_WORDS = 24
HEADER_BYTES = HEADER_WORDS * 8

FLAG_MULTI_PRODUCER = 1

CACHE_LINE = 64
_MASK64 = (1 << 64) - 1


class RingFull(Exception):
    """A push could not complete because the ring stayed full."""


class RingEmpty(Exception):
    """A pop could not complete because the ring stayed empty."""


class RingStats(NamedTuple):
    name: str
    capacity: int
    slot_words: int
    multi_producer: bool
    len: int
    pushes: int
    pops: int
    full_events: int
    empty_events: int


def _slots_offset(capacity: int) -> int:
    end_of_seqs = HEADER_BYTES + 8 * capacity
    return (end_of_seqs + CACHE_LINE - 1) // CACHE_LINE * CACHE_LINE


def ring_nbytes(capacity: int, slot_words: int) -> int:
    """Segment size needed by a ring of this geometry."""
    return _slots_offset(capacity) + 8 * capacity * slot_words


# -- jitted cores ---------------------------------------------------------------


@njit(cache=True)
def ring_try_push(hdr, seqs, slots, msg):
    """Append ``msg`` (<= slot_words words, zero-padded); False if the ring is full."""
    mask = hdr[H_CAPACITY] - 1
    multi = (hdr[H_FLAGS] & FLAG_MULTI_PRODUCER) != 0
    pos = load_acquire(hdr, H_TAIL)
    while True:
        idx = pos & mask
        dif = load_acquire(seqs, idx) - pos
        if dif == 0:
            if not multi:
                # Sole producer: nobody races us for the ticket.
                store_release(hdr, H_TAIL, pos + 1)
                break
            seen = cas(hdr, H_TAIL, pos, pos + 1)
            if seen == pos:
                break
            pos = seen
        elif dif < 0:
            # The slot still holds the message from one lap ago.
            return False
        else:
            # Another producer took this position; catch up.
            pos = load_acquire(hdr, H_TAIL)
    width = slots.shape[1]
    n = min(msg.shape[0], width)
    for k in range(n):
        slots[idx, k] = msg[k]
    for k in range(n, width):
        slots[idx, k] = 0
    store_release(seqs, idx, pos + 1)
    return True


@njit(cache=True)
def ring_try_pop(hdr, seqs, slots, out):
    """Copy the oldest message into ``out``; False if the ring is empty."""
    mask = hdr[H_CAPACITY] - 1
    pos = load_acquire(hdr, H_HEAD)
    while True:
        idx = pos & mask
        dif = load_acquire(seqs, idx) - (pos + 1)
        if dif == 0:
            seen = cas(hdr, H_HEAD, pos, pos + 1)
            if seen == pos:
                break
            pos = seen
        elif dif < 0:
            return False
        else:
            pos = load_acquire(hdr, H_HEAD)
    n = min(out.shape[0], slots.shape[1])
    for k in range(n):
        out[k] = slots[idx, k]
    store_release(seqs, idx, pos + mask + 1)
    return True


@njit(cache=True)
def ring_len(hdr):
    """Number of claimed-but-not-consumed positions (a snapshot)."""
    n = load_acquire(hdr, H_TAIL) - load_acquire(hdr, H_HEAD)
    if n < 0:
        return 0
    cap = hdr[H_CAPACITY]
    return cap if n > cap else n


# -- Python handle --------------------------------------------------------------


class _Backoff:
    """Yield the CPU with growing sleeps: sleep(0) a few times, then 10 us..1 ms.

    The machine may have fewer cores than node processes, so a waiter must
    never spin: the process it waits for may need this very core.
    """

    def __init__(self, timeout: float | None):
        self.deadline = None if timeout is None else time.monotonic() + timeout
        self.rounds = 0
        self.delay = 1e-5

    def wait(self) -> bool:
        """Sleep a little; False once the deadline has passed."""
        now = time.monotonic()
        if self.deadline is not None and now >= self.deadline:
            return False
        self.rounds += 1
        if self.rounds <= 3:
            time.sleep(0)
            return True
        d = self.delay
        if self.deadline is not None:
            d = min(d, self.deadline - now)
        time.sleep(d)
        self.delay = min(self.delay * 2, 1e-3)
        return True


class Ring:
    """Handle on a shared-memory ring; use ``Ring.create`` or ``Ring.attach``."""

    def __init__(self, segment: Segment):
        self._segment = segment
        hdr = segment.array(np.int64, 0, HEADER_WORDS)
        capacity = int(hdr[H_CAPACITY])
        self.name = segment.name
        self.capacity = capacity
        self.slot_words = int(hdr[H_SLOT_WORDS])
        self.multi_producer = bool(hdr[H_FLAGS] & FLAG_MULTI_PRODUCER)
        self._hdr = hdr
        self._seqs = segment.array(np.int64, HEADER_BYTES, capacity)
        self._slots = segment.array(
            np.uint64, _slots_offset(capacity), capacity * self.slot_words
        ).reshape(capacity, self.slot_words)
        self._spare = np.empty(self.slot_words, dtype=np.uint64)
        self._pushes = 0
        self._pops = 0
        self._full_events = 0
        self._empty_events = 0

    @classmethod
    def create(cls, name: str, capacity: int, slot_words: int, *, prefix: str,
               multi_producer: bool = True) -> "Ring":
        capacity = int(capacity)
        slot_words = int(slot_words)
        # Capacity 1 is out: a full slot's seq (pos + 1) would equal the next
        # producer's pos and read as free.
        if capacity < 2 or capacity & (capacity - 1):
            raise ValueError(
                f"ring {name!r}: capacity must be a power of two >= 2, got {capacity}"
            )
        if slot_words < 1:
            raise ValueError(f"ring {name!r}: slot_words must be >= 1, got {slot_words}")
        seg = Segment.create(name, ring_nbytes(capacity, slot_words), prefix=prefix)
        try:
            hdr = seg.array(np.int64, 0, HEADER_WORDS)
            hdr[H_CAPACITY] = capacity
            hdr[H_SLOT_WORDS] = slot_words
            hdr[H_FLAGS] = FLAG_MULTI_PRODUCER if multi_producer else 0
            seg.array(np.int64, HEADER_BYTES, capacity)[:] = np.arange(capacity)
            # Magic last, with release: an attacher that sees it sees the rest.
            store_release(hdr, H_MAGIC, RING_MAGIC)
            del hdr
            return cls(seg)
        except BaseException:
            seg.close()
            raise

    @classmethod
    def attach(cls, full_name: str) -> "Ring":
        seg = Segment.attach(full_name)
        try:
            cls._validate(seg)
            return cls(seg)
        except BaseException:
            seg.close()
            raise

    @staticmethod
    def _validate(seg: Segment) -> None:
        if seg.size < HEADER_BYTES:
            raise ValueError(
                f"segment {seg.name!r} ({seg.size} bytes) is too small to be a ring"
            )
        hdr = seg.array(np.int64, 0, HEADER_WORDS)
        magic = int(load_acquire(hdr, H_MAGIC))
        if magic != RING_MAGIC:
            raise ValueError(
                f"segment {seg.name!r} is not an initialised dmrack ring "
                f"(magic {magic:#x}, expected {RING_MAGIC:#x})"
            )
        capacity, slot_words = int(hdr[H_CAPACITY]), int(hdr[H_SLOT_WORDS])
        if capacity < 2 or capacity & (capacity - 1) or slot_words < 1:
            raise ValueError(
                f"ring {seg.name!r} has a corrupt header: capacity={capacity}, "
                f"slot_words={slot_words}"
            )
        need = ring_nbytes(capacity, slot_words)
        if seg.size < need:
            raise ValueError(
                f"ring {seg.name!r}: header says capacity={capacity} x "
                f"slot_words={slot_words} ({need} bytes) but the segment has "
                f"only {seg.size} bytes"
            )

    # -- messages ---------------------------------------------------------

    def _as_words(self, msg) -> np.ndarray:
        if isinstance(msg, np.ndarray):
            arr = msg
            if arr.ndim != 1:
                raise ValueError(
                    f"ring {self.name!r}: a message must be 1-D, got shape {arr.shape}"
                )
            if arr.dtype.kind not in "iub":
                raise ValueError(
                    f"ring {self.name!r}: message words must be integers, got {arr.dtype}"
                )
        else:
            # Element by element so that any mix of negative and >= 2**63 ints
            # wraps to 64 bits instead of upsetting numpy's dtype inference.
            try:
                arr = np.array([operator.index(v) & _MASK64 for v in msg], dtype=np.uint64)
            except TypeError:
                raise ValueError(
                    f"ring {self.name!r}: a message must be a sequence of integers, "
                    f"got {msg!r}"
                ) from None
        if arr.shape[0] > self.slot_words:
            raise ValueError(
                f"ring {self.name!r}: message of {arr.shape[0]} words exceeds "
                f"slot_words={self.slot_words}"
            )
        if arr.dtype != np.uint64 and arr.dtype != np.int64:
            # int64 keeps negative words two's-complement, as the jitted copy would.
            arr = arr.astype(np.int64 if arr.dtype.kind == "i" else np.uint64)
        return arr

    def views(self) -> tuple:
        """The ring's (header, sequence numbers, slots) arrays, for jitted code that calls
        ``ring_try_push``/``ring_try_pop``/``ring_len`` on them directly (the event core's inboxes)."""
        return self._hdr, self._seqs, self._slots

    def _check_open(self) -> None:
        if self._hdr is None:
            raise ValueError(f"ring {self.name!r} is closed")

    def _push_words(self, words: np.ndarray) -> bool:
        if ring_try_push(self._hdr, self._seqs, self._slots, words):
            self._pushes += 1
            return True
        return False

    def try_push(self, msg: Sequence[int] | np.ndarray) -> bool:
        """Append ``msg`` if there is room; False (nothing written) when full."""
        self._check_open()
        if self._push_words(self._as_words(msg)):
            return True
        self._full_events += 1
        return False

    def push(self, msg: Sequence[int] | np.ndarray, timeout: float | None = None) -> None:
        """Append ``msg``, waiting up to ``timeout`` s (None: forever) for room."""
        self._check_open()
        words = self._as_words(msg)
        if self._push_words(words):
            return
        self._full_events += 1
        backoff = _Backoff(timeout)
        while backoff.wait():
            if self._push_words(words):
                return
        raise RingFull(
            f"ring {self.name!r} (capacity {self.capacity}) stayed full for {timeout} s"
        )

    def _pop_words(self) -> np.ndarray | None:
        self._check_open()
        out = self._spare
        if ring_try_pop(self._hdr, self._seqs, self._slots, out):
            self._spare = np.empty(self.slot_words, dtype=np.uint64)
            self._pops += 1
            return out
        return None

    def try_pop(self) -> np.ndarray | None:
        """The oldest message (a fresh uint64 array of slot_words), or None."""
        out = self._pop_words()
        if out is None:
            self._empty_events += 1
        return out

    def pop(self, timeout: float | None = None) -> np.ndarray:
        """The oldest message, waiting up to ``timeout`` s (None: forever)."""
        out = self._pop_words()
        if out is not None:
            return out
        self._empty_events += 1
        backoff = _Backoff(timeout)
        while backoff.wait():
            out = self._pop_words()
            if out is not None:
                return out
        raise RingEmpty(
            f"ring {self.name!r} (capacity {self.capacity}) stayed empty for {timeout} s"
        )

    def drain(self, max_n: int | None = None) -> list[np.ndarray]:
        """Pop without waiting until the ring is empty or ``max_n`` messages are taken."""
        got = []
        while max_n is None or len(got) < max_n:
            out = self._pop_words()
            if out is None:
                break
            got.append(out)
        return got

    def __len__(self) -> int:
        if self._hdr is None:
            return 0
        return int(ring_len(self._hdr))

    # -- life cycle -------------------------------------------------------

    @property
    def closed(self) -> bool:
        return self._hdr is None

    def close(self) -> None:
        """Drop the views and close the segment (the creator also unlinks it)."""
        if self._hdr is None:
            return
        # Our own views must go first, or the segment could not unmap.
        self._hdr = self._seqs = self._slots = None
        self._segment.close()

    def __enter__(self) -> "Ring":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def statistics(self) -> RingStats:
        return RingStats(
            name=self.name,
            capacity=self.capacity,
            slot_words=self.slot_words,
            multi_producer=self.multi_producer,
            len=len(self),
            pushes=self._pushes,
            pops=self._pops,
            full_events=self._full_events,
            empty_events=self._empty_events,
        )

    def __repr__(self) -> str:
        mode = "MP" if self.multi_producer else "SP"
        return f"<Ring {self.name} {mode} capacity={self.capacity} slot_words={self.slot_words}>"
