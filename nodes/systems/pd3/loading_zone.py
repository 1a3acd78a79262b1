"""PD3's Loading Zone: the host ring the DPU DMA-writes prefetched items into.

The DPU's Transfer Engine fetches the items it predicts the host will miss and DMA-writes them
here; an application thread calls :meth:`LoadingZone.check_and_return` before its miss path and,
if the item is there, takes it without any network access (PD3 §6.3, Fig. 9). It is a building
block: nothing registers it as a system yet.

The zone lives in the modelled memory of a node (``fabric.memory[host].host``), like
:mod:`shm.dmaring`: every device access is a priced DMA of a :class:`shm.dma.DmaEngine`, every host
access a local load, store or CAS charged to the calling thread.

Layout (``base`` 64-byte aligned; words little-endian uint64)::

    base+0    line 0: MAGIC, capacity, 0...               (written once by layout())
    base+64   line 1: Head   oldest byte position not yet reclaimed (written by the device only)
    base+128  line 2: Tail   byte position after the last published item (device only)
    base+192  data: capacity bytes, a multiple of 64

    item at byte position p (offset p % capacity of the data area, 8-byte aligned):
        word 0: size u32 (data bytes) | seq u32 (the Transfer Engine batch that fetched it; 0 if none)
        word 1: state u64 = (p ^ SALT) | st,   st in PRODUCED 1, CONSUMED 2, PAD 3
        word 2: key u64
        data:   size bytes, zero-padded to a multiple of 8
    an item takes 24 + round8(size) bytes; the next one starts right after it.

Head and Tail are *byte positions that only grow* (offset = position % capacity), so ``Tail - Head``
is the space in use without the full/empty ambiguity of wrapped indices, and a position names one
item for ever. Each has its own cache line: the device's Head writes do not invalidate the line
host threads read Tail from, and neither shares a line with items whose state words host threads
CAS. The header is the artifact's ``PrefetchResponse{size u64, consumer_state u64, key u64}``
(fardatalab/PD3 ``transfer_engine/types.hpp``) with the size narrowed to 32 bits (an item is never
larger than the zone); the state is a whole aligned word so that it is one atomic DMA element for
the device and one CAS target for the host. The state word carries its item's position (mixed with
:data:`SALT` so that small positions do not look like small keys or sizes): zeroed memory, a stale
header of an earlier lap or data bytes are never mistaken for the item at ``p``.

Wrap-around: an item never straddles the end of the data area. If the next item does not fit
before the end, the device writes a PAD record there (size = the rest of the lap minus its header,
state ``PAD``) and the item starts the next lap; if fewer than 24 bytes (one header) are left, no
record fits and both sides skip them by rule (:meth:`LoadingZone._lap_start`).

**Device side** (one end per zone, in the device's process; the cursor lives in this object, as
in :mod:`shm.dmaring`): :meth:`produce` appends a batch at Tail as one scatter-gather DMA write:
the items (and any PAD), as at most two contiguous runs, then the Tail word as the *last* element.
Elements land in list order and an element longer than a word lands line by line in ascending order
under the line seqlocks (:mod:`shm.dma`), so Tail moves only after every byte of every item below
it is in memory. A host thread loads Tail before it reads any header and never reads one at or
past it, so it cannot see a half-written item (the tests check one nanosecond before the write's
effect time and at it, and item bytes in memory with Tail not yet moved).
Items that do not fit the free space the device knows of (``capacity - (Tail - Head seen)``) are
**dropped** and counted (PD3: a full Loading Zone drops prefetches, never host requests; a dropped
prefetch only costs the host its normal miss path). A later, smaller item of the batch may still
fit.

**Cleaning** (:meth:`clean`, started by :meth:`produce` when it had to drop, or on demand): the
device knows where every item it wrote starts (a list of ``(position, length)`` in its own memory,
standing for the DPU's DRAM), so it DMA-reads only their state words, from Head forward, in one
scatter-gather read of at most :data:`CLEAN_WINDOW` words; when that lands it advances past the
leading CONSUMED items (and PADs, whose state it wrote itself), stops at the first item not
consumed, and DMA-writes the new Head. The device reuses the space only once that Head write has completed, so Head always lands in host
memory *before* anything overwrites the space it frees. One clean at a time (``ZONE_BUSY``).

**Host side** (:meth:`check_and_return`): copy Head into a private local head and load Tail once,
then scan the headers between them. The scan writes nothing, so threads scanning at once only
share lines they all read (Head, Tail, headers) and do not contend; the only contended
word is the state of the item two threads both want. On a key match whose state is PRODUCED the
thread copies the data *then* CASes the state PRODUCED -> CONSUMED (the paper's order): a
successful CAS proves the item was still PRODUCED during the copy, hence not reclaimed, hence not
overwritten, so the copy is whole. A lost CAS (another thread took it) or a match already CONSUMED
is skipped and the scan goes on; no match returns None at once. The call never waits for in-flight
prefetches: what lands after it loaded Tail is for the next call.

A scanner with an old local head may meet space the device reclaimed and is overwriting. That is
detected without locks: a header read while its state still reads ``PRODUCED(p)`` is intact (a
produced item cannot be reclaimed); for any other state the thread re-loads Head after reading the
header: Head at or below ``p`` means the space was not reclaimed yet (Head lands before any
overwrite), so the size read is good; Head above ``p`` means everything before Head is consumed
anyway and the scan jumps to it. The residual risk is the CAS itself: between the thread's load of
``PRODUCED(p)`` and its CAS, another thread would have to consume the item, the device clean and
overwrite it, and the new bytes equal the salted ``PRODUCED(p)`` word -- in a co-located run a
call is atomic in virtual time and none of this can happen.

**Costs** charged to the calling thread (anything with ``cpu(ns)``, e.g. an RdmaThread), with the
``[cpu]`` costs :mod:`shm.dmaring` uses: ``local_read_ns_per_line`` per distinct cache line read --
the Head line and the Tail line once per call, each line of headers scanned (two 24-byte headers of
small items share one), each line of data copied -- and ``local_cas_ns`` per CAS. A hit costs one
CAS. The scan reads the zone forward, line after line, which a core's stream prefetcher runs ahead
of: the first line of the scan costs a line's latency, every further line ``64 B`` at
``software.core_stream_gbps`` (the stream's bandwidth, an assumption), so a scan of n lines costs 2 + 1 lines of latency +
(n - 1) line transfers (:func:`scan_ns` has the constants: the profile's ``[coherence]`` when it
has one, else the flat ``[cpu]`` ones). The device's costs are its DMAs.

Statistics (:meth:`statistics`, a :class:`ZoneStats`): this object's counts (the device end's
produce/drop/clean, the host ends' scans in this process) and the free bytes host memory shows now.

Keys are 8 bytes: an ``int`` in ``[0, 2**64)`` or 8 bytes (little-endian). Several host threads
in several processes may use one zone (:meth:`LoadingZone.attach`); the shared words are accessed
with :mod:`shm.atomics` as in :mod:`shm.dmaring`. Plain Python but for the scan's walk over items
already taken (:func:`next_produced`, compiled: 98 % of the headers a hash-map scan passes are
consumed items or pads that cleaning has not reclaimed yet, four word loads each; in plain Python
they were half of a latency point's real time). The walk returns at each PRODUCED item, whose key,
floor and claim stay here.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import njit

from shm.atomics import cas, load_acquire
from shm.dma import DMA_OK, DmaCompletion
from shm.dmaring import W_HEAD, W_TAIL, HostRing
from shm.fabric import REGION_HOST, gaddr, read_lines
from shm.kernels import entry

MAGIC = 0x5044334C5A4E_0001      # "PD3LZN", version 1
HEADER_BYTES = 192               # zone header area: magic line, Head line, Tail line
W_MAGIC, W_CAPACITY = 0, 1
# W_HEAD, W_TAIL: the Head and Tail words (lines 1 and 2), as every host ring has them (shm.dmaring.HostRing)
ITEM_HEADER = 24                 # size|seq, state, key
SALT = 0x9E3779B97F4A7C10        # low 3 bits zero: the state kind lives there

PRODUCED, CONSUMED, PAD = 1, 2, 3

# statuses of zone completions besides the engine's (shm.dma.DMA_OK, DMA_BAD_*)
ZONE_FULL = 24          # produce: every item of the batch was dropped, nothing written
ZONE_BUSY = 25          # clean: a clean of this zone is still in flight

# state words one clean reads at most: bounds the scatter-gather list (a zone of small items holds
# millions); a clean that stops at the window is followed by the next drop's clean
CLEAN_WINDOW = 4096

_LINE = 64
_U64 = (1 << 64) - 1


def _stream_line_ns(profile) -> float:
    """One further line of a forward read streamed behind the first (profile
    ``software.core_stream_gbps``: one core with its stream prefetcher running ahead)."""
    return _LINE * 8 / profile.software.core_stream_gbps


def _state(pos: int, st: int) -> int:
    return (pos ^ SALT) | st


def _round8(n: int) -> int:
    return (n + 7) & ~7


def item_bytes(size: int) -> int:
    """Bytes an item of ``size`` data bytes takes in the zone (header + data padded to 8)."""
    return ITEM_HEADER + _round8(size)


_SALT64 = np.uint64(SALT)
_SIZE_MASK = np.uint64(0xFFFFFFFF)


@njit(cache=True)
def count_lines(first, nbytes, last_line, seen_upto, lines, cached):
    """A scan read bytes ``[first, first + nbytes)`` of the zone (positions, which only grow; the
    data area is whole lines): ``(last_line, lines, cached)`` with the lines past ``last_line``
    counted, and those below ``seen_upto`` (this core read them before) among them as cached."""
    end = (first + nbytes - 1) // _LINE
    lo = max(first // _LINE, last_line + 1)
    return max(last_line, end), lines + max(0, end - lo + 1), cached + max(0, min(end, seen_upto - 1) - lo + 1)


@njit(cache=True)
def next_produced(m64, hw, data, cap, p, t, last_line, seen_upto, lines, cached, headers):
    """The host's scan from position ``p`` to the next PRODUCED item header before Tail ``t``,
    passing consumed items and pads (most of what a scan passes: cleaning moves Head later) in one
    compiled call. Each header is read as the scan reads it: its state word, its first word (size |
    batch sequence), its key, its state word again (a change between the two means the device
    reclaimed the space meanwhile); past a header that is not PRODUCED, Head (word ``hw``) is read
    again, and if it has moved past ``p`` the scan jumps to it. ``lines``, ``cached`` and
    ``headers`` count what the scan read (the lines it priced, those already in this core's cache
    below ``seen_upto``, headers), ``last_line`` the highest line it read.

    Returns ``(status, p, last_line, lines, cached, headers, s, w0, key, s2, sw)``: status 1 at a
    PRODUCED item at ``p`` (its header words and state word index ``sw``), 0 at Tail, 2 at something
    that is no item header (nothing coherent to scan). :func:`next_produced_py` is the same in plain
    Python (the reference the tests compare it with)."""
    s = w0 = k = s2 = np.uint64(0)
    sw = 0
    while True:
        rest = cap - p % cap
        if rest < ITEM_HEADER:                  # no header fits before the lap's end: the next lap
            p += rest
        if p >= t:
            return 0, p, last_line, lines, cached, headers, s, w0, k, s2, sw
        sw = (data + p % cap) >> 3
        s = load_acquire(m64, sw + 1)
        w0 = load_acquire(m64, sw)
        k = load_acquire(m64, sw + 2)
        s2 = load_acquire(m64, sw + 1)
        headers += 1
        last_line, lines, cached = count_lines(p, ITEM_HEADER, last_line, seen_upto, lines, cached)
        base = np.uint64(p) ^ _SALT64
        produced = base | np.uint64(PRODUCED)
        if s2 == produced and s == produced:
            return 1, p, last_line, lines, cached, headers, s, w0, k, s2, sw
        # consumed, a pad, or space the device may have reclaimed: the size is only trustworthy
        # if Head has not passed p since (Head lands before any overwrite)
        h = np.int64(load_acquire(m64, hw))
        if h > p:
            p = h                               # all before Head is consumed: nothing to find there
            continue
        if s2 != (base | np.uint64(CONSUMED)) and s2 != (base | np.uint64(PAD)):
            return 2, p, last_line, lines, cached, headers, s, w0, k, s2, sw
        p += ITEM_HEADER + np.int64(((w0 & _SIZE_MASK) + np.uint64(7)) & ~np.uint64(7))


def next_produced_py(m64, hw, data, cap, p, t, last_line, seen_upto, lines, cached, headers):
    """:func:`next_produced` in plain Python, on Python ints (its line counting the same
    :func:`count_lines`, run as Python)."""
    s = w0 = k = s2 = sw = 0
    while True:
        rest = cap - p % cap
        if rest < ITEM_HEADER:
            p += rest
        if p >= t:
            return 0, p, last_line, lines, cached, headers, s, w0, k, s2, sw
        sw = (data + p % cap) >> 3
        s = int(load_acquire(m64, sw + 1))
        w0 = int(load_acquire(m64, sw))
        k = int(load_acquire(m64, sw + 2))
        s2 = int(load_acquire(m64, sw + 1))
        headers += 1
        last_line, lines, cached = count_lines.py_func(p, ITEM_HEADER, last_line, seen_upto, lines, cached)
        produced = _state(p, PRODUCED)
        if s2 == produced and s == produced:
            return 1, p, last_line, lines, cached, headers, s, w0, k, s2, sw
        h = int(load_acquire(m64, hw))
        if h > p:
            p = h
            continue
        if s2 != _state(p, CONSUMED) and s2 != _state(p, PAD):
            return 2, p, last_line, lines, cached, headers, s, w0, k, s2, sw
        p += item_bytes(w0 & 0xFFFFFFFF)


def _key(key) -> int:
    if isinstance(key, (bytes, bytearray, memoryview)):
        if len(key) != 8:
            raise ValueError(f"a Loading Zone key is 8 bytes (or an int below 2**64), got {len(key)} bytes")
        return int.from_bytes(bytes(key), "little")
    if isinstance(key, (int, np.integer)) and 0 <= int(key) <= _U64:
        return int(key)
    raise ValueError(f"a Loading Zone key is 8 bytes (or an int below 2**64), got {key!r}")


def scan_ns(profile, lines: int, cas_ops: int, *, cached: int = 0, fresh: int = 2) -> int:
    """A host thread's cost of one check_and_return that read ``lines`` lines past Head and Tail
    and did ``cas_ops`` CAS: ``lines`` new to this end (written by the device's DMA since), ``cached``
    it read in an earlier call (still in its cache: ``l1_ns``), and ``fresh`` of Head and Tail
    rewritten by the device since it last looked. With the profile's ``[coherence]`` (the host CPU
    known) a line the device wrote comes from the L3 the write was injected into (``dma_line_ns``)
    -- fresh Head or Tail, and the scan's first new line; the further new lines stream behind it
    (``software.core_stream_gbps``); a CAS hits the line the scan just brought in (``l1_ns + atomic_ns``).
    Without ``[coherence]``, ``cpu.local_read_ns_per_line`` per line whatever its state and
    ``cpu.local_cas_ns`` per CAS (the flat costs of :mod:`shm.dmaring`)."""
    c = getattr(profile, "coherence", None)
    lines = max(0, lines)
    if c is not None:
        latency, hit, cas_ns = c.dma_line_ns, c.l1_ns, c.l1_ns + c.atomic_ns
    else:
        latency = hit = profile.cpu.local_read_ns_per_line
        cas_ns = profile.cpu.local_cas_ns
    ns = (fresh * latency + (2 - fresh) * hit + min(1, lines) * latency + max(0, lines - 1) * _stream_line_ns(profile)
          + cached * hit + cas_ops * cas_ns)
    return round(ns)


def copy_ns(profile, nbytes: int, *, first: str = "dma") -> int:
    """A host thread's cost of reading ``nbytes`` in a row (to copy them): the first line's latency,
    then the rest streamed behind it at ``software.core_stream_gbps``, as in a scan. ``first`` says where that
    line is: ``dma`` (the device just wrote it: an L3, ``dma_line_ns``), ``memory`` (a cache slot
    in DRAM) or ``cached`` (this core just read it: ``l1_ns``). Without ``[coherence]``, the flat
    ``cpu.local_read_ns_per_line`` per line. Every miss path pays it for the record it brought in,
    whichever engine wrote the buffer (RDMA READ, Redy's response, the memory API, the Loading Zone),
    so modes differ only in how the record got there."""
    lines = -(-max(0, nbytes) // _LINE)
    if not lines:
        return 0
    c = getattr(profile, "coherence", None)
    if c is None:
        return lines * profile.cpu.local_read_ns_per_line
    lat = {"dma": c.dma_line_ns, "memory": c.memory_ns, "cached": c.l1_ns}[first]
    return round(lat + (lines - 1) * _stream_line_ns(profile))


class ZoneStats(NamedTuple):
    produced: int           # items the device end published
    produced_bytes: int     # their data bytes
    dropped: int            # items dropped because the zone was full
    dropped_bytes: int      # their data bytes
    consumed: int           # items taken by this object's host ends (won CAS)
    scans: int              # check_and_return calls
    headers_scanned: int    # item headers read by those calls
    misses: int             # calls that returned None
    cleaned: int            # items reclaimed by the device's cleaning (PADs not counted)
    bytes_free: int         # capacity - (Tail - Head), as host memory shows now
    stale: int              # items a host end claimed and threw away: fetched before the key's fence
    expired: int            # unconsumed items the device retired to make room (expire)


class LoadingZone(HostRing):
    """A Loading Zone of ``capacity`` data bytes at offset ``base`` of node ``host``'s memory."""

    def __init__(self, fabric, host, base: int, capacity: int):
        if base % 64:
            raise ValueError(f"a Loading Zone's base must be 64-byte aligned, got {base}")
        if capacity < 64 or capacity % 64:
            raise ValueError(f"a Loading Zone's capacity must be a positive multiple of 64 bytes, got {capacity}")
        super().__init__(fabric, host, base)
        self.capacity = capacity
        mem = self._mem
        need = self.bytes_needed(capacity)
        if base + need > mem.host.shape[0]:
            raise ValueError(f"a Loading Zone of {need} B at {base} does not fit node {self.host}'s memory "
                             f"({mem.host.shape[0]} B)")
        self._data = base + HEADER_BYTES
        # the device end (one per zone, in the device's process): what it published and what it
        # knows was reclaimed, and where each item it wrote starts (for cleaning)
        self._dev_tail = self.tail()
        self._dev_head = self.head()
        self._dev_items: list[tuple[int, int, bool]] = []    # (position, length, is_pad), oldest first
        self._cleaning = False
        self.produced = self.produced_bytes = self.dropped = self.dropped_bytes = self.cleaned = 0
        self.consumed = self.scans = self.headers_scanned = self.misses = self.stale = self.expired = 0
        # this host end's cache (one consumer per object: PD3 gives each application thread its own
        # zone): the Head and Tail it last read, and the line position up to which it has read
        self._seen_head = self._seen_tail = -1
        self._cached_line = 0
        # the scan's walk over taken items, entered without typing its arguments (shm/kernels.py):
        # the node's own memory words
        self._next = entry(next_produced, mem.host64, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)

    # -- creation ---------------------------------------------------------------------------
    @staticmethod
    def bytes_needed(capacity: int) -> int:
        return HEADER_BYTES + capacity

    @classmethod
    def layout(cls, fabric, host, capacity: int) -> "LoadingZone":
        """Allocate and initialise an empty zone in node ``host``'s memory (Head = Tail = 0, data
        zeroed: zeroed memory is never a valid state word); setup time, before any end uses it."""
        if capacity < 64 or capacity % 64:
            raise ValueError(f"a Loading Zone's capacity must be a positive multiple of 64 bytes, got {capacity}")
        base = fabric.allocate(host, cls.bytes_needed(capacity), region=REGION_HOST, align=64)
        i = fabric.node_index(host)
        m64 = fabric.memory[i].host64
        w0 = base >> 3
        m64[w0:w0 + cls.bytes_needed(capacity) // 8] = 0
        m64[w0 + W_MAGIC], m64[w0 + W_CAPACITY] = MAGIC, capacity
        return cls(fabric, host, base, capacity)

    @classmethod
    def attach(cls, fabric, host, base: int) -> "LoadingZone":
        """The zone laid out at ``base`` of ``host`` (e.g. by another process). A device end must
        attach before anything is produced: the item list it cleans from is its own."""
        i = fabric.node_index(host)
        m64 = fabric.memory[i].host64
        if base % 8 or base + HEADER_BYTES > m64.shape[0] * 8 or int(m64[(base >> 3) + W_MAGIC]) != MAGIC:
            raise ValueError(f"no Loading Zone at offset {base} of node {i}")
        return cls(fabric, host, base, int(m64[(base >> 3) + W_CAPACITY]))

    # -- addresses and shared words ---------------------------------------------------------
    def _off(self, pos: int) -> int:
        return self._data + pos % self.capacity

    def _lap_start(self, pos: int) -> int:
        """``pos``, or the next lap's start if no item header fits before the end of this lap."""
        rest = self.capacity - pos % self.capacity
        return pos + rest if rest < ITEM_HEADER else pos

    def bytes_free(self) -> int:
        return self.capacity - (self.tail() - self.head())

    # -- host side: local memory ------------------------------------------------------------
    def check_and_return(self, thread, key, dest=None, *, fresh_from: int | None = None, floor=None,
                         pending=None):
        """Take the item ``key`` if the zone holds it unconsumed: its data as ``bytes``, or, with
        ``dest`` (a writable uint8 buffer), its size after copying it into ``dest[:size]``; None if
        it is not there (``dest`` is then undefined). Never blocks. ``thread`` (anything with
        ``cpu(ns)``, or None) is charged the lines read and the CAS.

        ``fresh_from``: the host's fence for this key -- the Transfer Engine sequence of its last
        write-back of the key. An item of ``key`` fetched in an earlier batch (``seq`` below it,
        compared modulo 2^32) was read from remote memory before that write-back landed: stale.
        It is claimed (CAS to CONSUMED, so cleaning can pass it), counted in ``stale``, and the
        scan goes on. None: every item is taken as fresh.

        ``floor``: the host's floors of every key (a mapping key -> seq, the fence or more): any
        unconsumed item the scan passes whose batch is below its key's floor is of no use to anyone
        (stale, or arrived after the host had already read the key another way) and is claimed and
        thrown away the same way, so cleaning is never held up by an item nobody will take. With
        ``floor``, ``fresh_from`` defaults to ``floor.get(key)``. ``pending``: keys the host is reading
        from remote memory itself right now; any item of theirs is thrown away the same way (it was
        fetched before that read, which is where the host gets the item from)."""
        if floor is not None and fresh_from is None:
            fresh_from = floor.get(int(key) if not isinstance(key, (bytes, bytearray)) else None)
        k = _key(key)
        out = None if dest is None else np.frombuffer(dest, np.uint8) if not isinstance(dest, np.ndarray) else dest
        m64 = self._mem.host64
        hw = self._w0 + W_HEAD
        p = int(load_acquire(m64, hw))                 # the private local head
        t = int(load_acquire(m64, self._w0 + W_TAIL))  # what is published now; later items are for later calls
        # the Head and Tail words: from the L3 if the device rewrote them since this end last
        # looked, else still in this core's cache
        fresh = (p != self._seen_head) + (t != self._seen_tail)
        self._seen_head, self._seen_tail = p, t
        lines = 2
        cached = 0                                      # lines this end read before (in its cache)
        last_line = -1
        seen_upto = self._cached_line
        cas_ops = headers = 0
        result = None
        cap, data, walk = self.capacity, self._data, self._next
        while True:
            status, p, last_line, lines, cached, headers, s, w0, ikey, s2, sw = walk(
                m64, hw, data, cap, p, t, last_line, seen_upto, lines, cached, headers)
            if status != 1:
                break                                  # Tail, or nothing coherent to scan
            o = sw << 3
            size = w0 & 0xFFFFFFFF
            produced = s2
            if ikey != k and floor is not None:
                f = floor.get(ikey)
                if (f is not None and ((w0 >> 32) - f) & 0x80000000) or (pending is not None and ikey in pending):
                    cas_ops += 1
                    if int(cas(m64, sw + 1, produced, _state(p, CONSUMED))) == produced:
                        self.stale += 1        # useless to everyone: let cleaning pass it
                    p += item_bytes(size)
                    continue
            if ikey == k:
                dlo = o + ITEM_HEADER
                if out is not None:
                    if out.shape[0] < size:
                        raise ValueError(f"dest of {out.shape[0]} B is too small for the {size} B item of key {k}")
                    buf = out
                else:
                    buf = np.empty(size, np.uint8)
                # copy first, then claim: a won CAS proves the item stayed PRODUCED (so was not
                # reclaimed and overwritten) all through the copy
                read_lines(buf, 0, self._mem.host, dlo, size, self._mem.host_locks)
                if size:
                    last_line, lines, cached = count_lines.py_func(p + ITEM_HEADER, size, last_line, seen_upto,
                                                                   lines, cached)
                cas_ops += 1
                if int(cas(m64, sw + 1, produced, _state(p, CONSUMED))) == produced:
                    if fresh_from is not None and ((w0 >> 32) - fresh_from) & 0x80000000:
                        self.stale += 1                # fetched before the key's last write-back
                        p += item_bytes(size)
                        continue
                    self.consumed += 1
                    result = size if out is not None else buf[:size].tobytes()
                    break
                # another thread took it meanwhile; the scan goes on
            p += item_bytes(size)
        self.scans += 1
        self.headers_scanned += headers
        if result is None:
            self.misses += 1
        if thread is not None:
            thread.cpu(scan_ns(self.fabric.profile, lines - 2 - cached, cas_ops, cached=cached, fresh=fresh))
        self._cached_line = max(self._cached_line, last_line + 1)
        return result

    # -- device side: DMA -------------------------------------------------------------------
    def _check_engine(self, engine) -> None:
        if engine.host != self.host:
            raise ValueError(f"the Loading Zone is in node {self.host}'s memory; the DMA engine of node "
                             f"{engine.device} reaches node {engine.host}'s")

    def _done_at_once(self, engine, status: int = DMA_OK, error: str = "") -> DmaCompletion:
        c = DmaCompletion(engine.env, status, error)
        c.succeed(c)
        return c

    def produce(self, engine, items, *, clean: bool = True) -> DmaCompletion:
        """DMA-write ``items`` (``(key, data)`` or ``(key, data, seq)``: ``seq`` the low 32 bits of the
        Transfer Engine batch that fetched it, for the host's fence) at Tail, then Tail, as one scatter-gather
        descriptor. Items that do not fit the space the device knows is free are dropped (counted;
        the completion's ``written`` and ``dropped`` lists hold the keys). If nothing fits the
        completion has status ``ZONE_FULL`` and fires at once. After a drop (and ``clean``), a
        :meth:`clean` is started if none is in flight. Bad items raise ValueError before anything
        is posted."""
        self._check_engine(engine)
        batch = []
        for item in items:
            key, data = item[0], item[1]
            seq = (int(item[2]) & 0xFFFFFFFF) if len(item) > 2 else 0
            k = _key(key)
            d = bytes(data)
            if len(d) > 0xFFFFFFFF or item_bytes(len(d)) > self.capacity:
                raise ValueError(f"an item of {len(d)} B (key {k}) does not fit a Loading Zone of "
                                 f"{self.capacity} B ({ITEM_HEADER} B of header)")
            batch.append((k, d, seq))
        if not batch:
            c = self._done_at_once(engine)
            c.written, c.dropped = [], []
            return c
        t0 = t = self._dev_tail
        limit = self._dev_head + self.capacity
        records = []            # (position, length, kind, key, data) in position order
        written, dropped = [], []
        for k, d, seq in batch:
            n = item_bytes(len(d))
            p = self._lap_start(t)
            pad = None
            if p % self.capacity + n > self.capacity:          # does not fit before the lap's end
                rest = self.capacity - p % self.capacity
                pad = (p, rest)
                p += rest
            if p + n > limit:
                dropped.append(k)
                self.dropped += 1
                self.dropped_bytes += len(d)
                continue
            if pad is not None:
                records.append((pad[0], pad[1], PAD, 0, b"", 0))
            records.append((p, n, PRODUCED, k, d, seq))
            written.append(k)
            t = p + n
        if not records:
            c = self._done_at_once(engine, ZONE_FULL, f"Loading Zone full: {len(dropped)} items dropped, "
                                                      f"{limit - t0} B free as the device knows")
        else:
            buf = np.zeros(t - t0 + 8, np.uint8)
            b64 = buf[:t - t0].view(np.uint64)
            for p, n, kind, k, d, seq in records:
                j = (p - t0) >> 3
                size = n - ITEM_HEADER if kind == PAD else len(d)
                b64[j], b64[j + 1], b64[j + 2] = size | (seq << 32), _state(p, kind), k
                if d:
                    lo = p - t0 + ITEM_HEADER
                    buf[lo:lo + len(d)] = np.frombuffer(d, np.uint8)
            buf[t - t0:] = np.frombuffer(t.to_bytes(8, "little"), np.uint8)
            # positions t0..t are contiguous; split where they cross a lap boundary
            elements = []
            p = t0
            while p < t:
                run = min(t - p, self.capacity - p % self.capacity)
                elements.append((gaddr(self.host, self._off(p)), p - t0, run))
                p += run
            elements.append((self.gaddr_of(W_TAIL), t - t0, 8))      # last: Tail lands after every item
            c = engine.write_sg(elements, buf)
            if c.succeeded:
                self._dev_tail = t
                self._dev_items.extend((p, n, kind == PAD) for p, n, kind, _k, _d, _s in records)
                self.produced += len(written)
                self.produced_bytes += sum(len(d) for _p, _n, kind, _k, d, _s in records if kind == PRODUCED)
            else:
                written = []
        c.written, c.dropped = written, dropped
        if dropped and clean and not self._cleaning:
            self.clean(engine)
        return c

    @property
    def clean_in_flight(self) -> bool:
        """Whether a :meth:`clean` is under way (a new clean or expire answers ``ZONE_BUSY`` meanwhile)."""
        return self._cleaning

    def clean(self, engine, max_items: int | None = CLEAN_WINDOW) -> DmaCompletion:
        """Reclaim consumed items: DMA-read the state words of up to ``max_items`` items (None: all
        the device wrote and has not reclaimed) from Head forward, as one scatter-gather read; when
        it lands, advance past the leading CONSUMED items and PADs and DMA-write Head. The returned
        event fires when the new Head has been written (when the read lands if nothing was
        consumed; at once if there was nothing to read); its ``cleaned`` is the number of items
        reclaimed. Status ``ZONE_BUSY`` if a clean is in flight."""
        self._check_engine(engine)
        if self._cleaning:
            c = self._done_at_once(engine, ZONE_BUSY, "a clean of this Loading Zone is in flight")
            c.cleaned = 0
            return c
        items = list(self._dev_items if max_items is None else self._dev_items[:max(1, max_items)])
        if not items:
            c = self._done_at_once(engine)
            c.cleaned = 0
            return c
        done = DmaCompletion(engine.env)
        done.cleaned = 0
        buf = np.zeros(8 * len(items), np.uint8)
        elements = [(gaddr(self.host, self._off(p) + 8), 8 * j, 8) for j, (p, _n, _pad) in enumerate(items)]
        rd = engine.read_sg(elements, buf)
        if not rd.succeeded:
            rd.cleaned = 0
            return rd
        self._cleaning = True

        def landed(_ev):
            states = buf.view(np.uint64)
            n = reclaimed = 0
            for j, (p, _len, is_pad) in enumerate(items):
                if not is_pad and int(states[j]) != _state(p, CONSUMED):
                    break
                n += 1
                reclaimed += not is_pad
            if n == 0:
                self._cleaning = False
                done.succeed(done)
                return
            p, length, _pad = items[n - 1]
            new_head = p + length
            del self._dev_items[:n]
            wr = engine.write_sg([(self.gaddr_of(W_HEAD), 0, 8)], np.frombuffer(new_head.to_bytes(8, "little"),
                                                                                np.uint8))

            def written(_ev):
                # only now may the device reuse the space: Head is in host memory before any overwrite
                self._dev_head = new_head
                self._cleaning = False
                self.cleaned += reclaimed
                done.cleaned = reclaimed
                done.effect_ns, done.done_ns = wr.effect_ns, wr.done_ns
                done.succeed(done)

            wr.callbacks.append(written)

        rd.callbacks.append(landed)
        return done

    def expire(self, engine, max_items: int = 64) -> DmaCompletion:
        """Retire the oldest ``max_items`` items, consumed or not, to make room for newer
        prefetches (PD3 §8.5: with a small zone "prefetched items are replaced by more recent
        prefetches before they are consumed"): one scatter-gather DMA write of CONSUMED into their
        state words, then a :meth:`clean` that reclaims them. A host thread racing for one of them
        either wins its CAS first (it took the item, whole: it copied before the CAS) or loses it
        (the device's CONSUMED landed first) and skips the item; the space is reused only after
        the clean's Head write, as always. Status ``ZONE_BUSY`` while a clean is in flight."""
        self._check_engine(engine)
        if self._cleaning:
            c = self._done_at_once(engine, ZONE_BUSY, "a clean of this Loading Zone is in flight")
            c.cleaned = 0
            return c
        olds = [(p, n) for p, n, pad in self._dev_items[:max(1, max_items)] if not pad]
        if not olds:
            return self.clean(engine)
        buf = np.zeros(8 * len(olds), np.uint8)
        b64 = buf.view(np.uint64)
        for j, (p, _n) in enumerate(olds):
            b64[j] = _state(p, CONSUMED)
        wr = engine.write_sg([(gaddr(self.host, self._off(p) + 8), 8 * j, 8) for j, (p, _n) in enumerate(olds)], buf)
        if not wr.succeeded:
            wr.cleaned = 0
            return wr
        self.expired += len(olds)
        done = DmaCompletion(engine.env)
        done.cleaned = 0

        def retired(_ev):
            c = self.clean(engine, max_items)

            def cleaned(_ev2):
                done.cleaned = getattr(c, "cleaned", 0)
                done.succeed(done)
            if c.processed or c.triggered:
                cleaned(c)
            else:
                c.callbacks.append(cleaned)

        wr.callbacks.append(retired)
        return done

    def statistics(self) -> ZoneStats:
        return ZoneStats(self.produced, self.produced_bytes, self.dropped, self.dropped_bytes, self.consumed,
                         self.scans, self.headers_scanned, self.misses, self.cleaned, self.bytes_free(),
                         self.stale, self.expired)
