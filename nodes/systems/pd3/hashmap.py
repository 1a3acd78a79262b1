"""PD3's first application: a hash map whose records mostly live in remote memory, with its miss paths.

The host (``cn0``) serves clients' request packets with application threads (one core each). It
keeps a local cache of records within a budget (``cache_items``), an LRU with write-back, and
*pinned metadata*: for every key, the remote slot of its record and whether it exists (PD3 §8.2:
the baselines keep "remote address translation, collision resolution" locally, so a miss is one
remote read of one record). The records (``key u64 | len u32 | live u32 | value``) are an array
of slots in the memory node's memory. A miss goes down the path the ``mode`` names:

==================  ===========================================================================
``sync``            one blocking RDMA READ of the record (writes-back: a blocking RDMA WRITE)
``leap``            ``sync``, plus Leap's trend prefetcher over slot numbers: prefetches are READs
                    posted without waiting, kept in Leap's prefetch cache (:mod:`.leap`)
``redy``            the memory API through an I/O thread per application thread (Redy's default):
                    the app thread hands requests over an SPSC queue, the I/O thread batches them
                    to the memory server's CPU and hands results back (:class:`.transfer.RedyFront`)
``pd3-noprefetch``  the memory API through the DPU's Transfer Engine (host rings, DMA; 0 host cores)
``pd3``             as ``pd3-noprefetch``, and before the miss path ``CheckAndReturn`` on the
                    Loading Zone, which the DPU fills with the records its Host View says will miss
``local``           every record local (the cache holds them all): the all-local reference
==================  ===========================================================================

A packet's misses are fetched together (the memory-API modes post them all, then wait), as the
hash map's request pipeline does; ``sync`` and ``leap`` fetch one at a time.

Consistency on the host (several threads, one key): an install after a fetch happens only if no
write of the key happened since the fetch was issued (a per-key generation); a dirty record
evicted is *flushing* until its write-back is acknowledged, and reads of it are served from there;
the write-back's acknowledgement carries its Transfer Engine batch, the key's *fence*, and the
Loading Zone is asked only for items fetched in that batch or later (see :mod:`.transfer`). Each
packet's reply is kept per client port until the next one, so a resent packet is answered, not
executed again.

Packets (little-endian): request ``rid u32 | n u8 | n x (op u8 | key u64 | len u16 | value)``, ops
:data:`GET`, :data:`INSERT`, :data:`UPDATE`, :data:`DELETE`; reply ``rid u32 | n u8 | n x (status
u8 | len u16 | value)``. The DPU's parser (:class:`PacketParser`) reads the same format (GET ->
READ, INSERT/UPDATE -> WRITE, DELETE -> DELETE).

Costs on an application thread: the datagram's receive and the reply's send (the UDP model), per
request the profile's ``software.request_cycles`` (decode, dispatch, encode; an assumption) plus
the cache probe, two lines of ``cpu.local_read_ns_per_line`` (the slot and the LRU link), and
whatever its miss path costs.
"""

from __future__ import annotations

import struct
from collections import OrderedDict
from itertools import repeat

import numpy as np

from nodes.systems.lib.hashing import hash64, hash64_words

from .parsers import DELETE as P_DELETE, READ as P_READ, WRITE as P_WRITE, RequestParser
from .transfer import NO_KEY

MODES = ("pd3", "pd3-noprefetch", "redy", "sync", "leap", "local")
GET, INSERT, UPDATE, DELETE = 0, 3, 4, 2
S_OK, S_MISSING, S_EXISTS, S_BAD = 0, 1, 2, 3
# The wire and record layouts (the client's packet builder in system.py sizes packets with them):
PACKET_STRUCT = struct.Struct("<IB")    # a request or reply packet's header: request id, op count
OP_STRUCT = struct.Struct("<BQH")       # one request op: op, key, value length (the value follows)
RESULT_STRUCT = struct.Struct("<BH")    # one reply result: status, value length (the value follows)
# a remote record's header, key u64 | len u32 | live u32, as the struct the per-record paths pack
# and as the numpy fields a whole preload writes into every slot at once (one declaration of both)
RECORD_FIELDS = (("key", "Q"), ("len", "I"), ("live", "I"))
RECORD_STRUCT = struct.Struct("<" + "".join(code for _name, code in RECORD_FIELDS))
RECORD_DTYPE = np.dtype([(name, "<" + code) for name, code in RECORD_FIELDS])
REC_HEADER = RECORD_STRUCT.size


def key64(key: bytes) -> int:
    """A client key as the 64-bit key the DPU, the Loading Zone and the records use."""
    k = hash64(key)
    return k if k != NO_KEY else k - 1


def key64_words(ids: np.ndarray) -> np.ndarray:
    """:func:`key64` of every id's 8 little-endian bytes at once (``uint64`` in and out): what
    ``[key64(i.to_bytes(8, "little")) for i in ids]`` gives, for an experiment's whole key set."""
    words = np.ascontiguousarray(ids, dtype=np.uint64)
    out = np.empty_like(words)
    hash64_words(words, out)
    out[out == np.uint64(NO_KEY)] -= np.uint64(1)      # folded off the all-ones key, as key64
    return out


def encode_request(rid: int, ops) -> bytes:
    """``ops``: (op, key u64, value bytes)."""
    out = [PACKET_STRUCT.pack(rid, len(ops))]
    for op, key, value in ops:
        out.append(OP_STRUCT.pack(op, key, len(value)))
        out.append(value)
    return b"".join(out)


def decode_request(data: bytes):
    """``(rid, [(op, key, value)])``; ValueError naming what is wrong for anything else."""
    try:
        rid, n = PACKET_STRUCT.unpack_from(data)
        pos, ops = PACKET_STRUCT.size, []
        for i in range(n):
            op, key, ln = OP_STRUCT.unpack_from(data, pos)
            pos += OP_STRUCT.size
            if op not in (GET, INSERT, UPDATE, DELETE):
                raise ValueError(f"request {i}: unknown op {op}")
            if pos + ln > len(data):
                raise ValueError(f"request {i}: a {ln} B value runs past the packet's end")
            ops.append((op, key, bytes(data[pos:pos + ln])))
            pos += ln
    except struct.error as e:
        raise ValueError(f"truncated request packet ({len(data)} B): {e}") from None
    if pos != len(data):
        raise ValueError(f"{len(data) - pos} B after the last request")
    return rid, ops


def encode_reply(rid: int, results) -> bytes:
    out = [PACKET_STRUCT.pack(rid, len(results))]
    for st, value in results:
        out.append(RESULT_STRUCT.pack(st, len(value)))
        out.append(value)
    return b"".join(out)


def decode_reply(data: bytes):
    rid, n = PACKET_STRUCT.unpack_from(data)
    pos, res = PACKET_STRUCT.size, []
    for _ in range(n):
        st, ln = RESULT_STRUCT.unpack_from(data, pos)
        pos += RESULT_STRUCT.size
        res.append((st, bytes(data[pos:pos + ln])))
        pos += ln
    return rid, res


class PacketParser(RequestParser):
    """The DPU's parser of the hash map's request packets."""

    _MAP = {GET: P_READ, INSERT: P_WRITE, UPDATE: P_WRITE, DELETE: P_DELETE}

    def _parse(self, data: bytes):
        _rid, ops = decode_request(data)
        return [(key, self._MAP[op]) for op, key, _v in ops]


def record_key(data: bytes):
    """The memory server's parser over written records: the key of a live record, else None."""
    if len(data) < REC_HEADER:
        return None
    key, _ln, live = RECORD_STRUCT.unpack_from(data)
    return key if live else None


def encode_record(key: int, value: bytes | None) -> bytes:
    if value is None:
        return RECORD_STRUCT.pack(key, 0, 0)
    return RECORD_STRUCT.pack(key, len(value), 1) + value


def write_records(mem: np.ndarray, region: int, slot_bytes: int, slots: np.ndarray, keys: np.ndarray,
                  value: bytes) -> None:
    """Write the live record ``encode_record(keys[i], value)`` into slot ``slots[i]`` (at byte
    ``region + slots[i] * slot_bytes`` of ``mem``, the memory node's bytes) for every i at once: the
    slots are one structured array over ``mem`` -- header fields and value bytes, strided by
    ``slot_bytes`` -- and each field is one numpy assignment. A slot's bytes past its record are
    left as they were, as the per-record write leaves them."""
    slots = np.asarray(slots, dtype=np.int64)
    size = REC_HEADER + len(value)
    if size > slot_bytes:
        raise ValueError(f"a record of {size} B does not fit a {slot_bytes} B slot")
    if slots.size == 0:
        return
    if slots.min() < 0 or region + int(slots.max()) * slot_bytes + size > mem.size:
        raise ValueError(f"slots {slots.min()}..{slots.max()} of {slot_bytes} B at {region} run outside the "
                         f"memory's {mem.size} B")
    fields = [(name, RECORD_DTYPE.fields[name][0]) for name in RECORD_DTYPE.names]
    if value:
        fields.append(("value", np.uint8, (len(value),)))
    rows = np.ndarray(shape=(int(slots.max()) + 1,), dtype=np.dtype(fields), buffer=mem, offset=region,
                      strides=(slot_bytes,))
    # a run of slots (a fresh map's: 0, 1, 2, ...) is a slice, a strided copy rather than a gather
    run = slots.size == slots[-1] - slots[0] + 1 and bool((np.diff(slots) == 1).all())
    at = slice(int(slots[0]), int(slots[-1]) + 1) if run else slots
    rows["key"][at] = keys
    rows["len"][at] = len(value)
    rows["live"][at] = 1
    if value:
        rows["value"][at] = np.frombuffer(value, np.uint8)


class HashMapHost:
    """The host's hash map, shared by its application threads (one process, ``cn0``)."""

    def __init__(self, *, cache_items: int, slot_bytes: int, region: int, mode: str, cpu):
        self.cache: OrderedDict = OrderedDict()      # key -> value (None: deleted), LRU order
        self.dirty: set = set()
        self.cache_items = cache_items
        self.slot_bytes, self.region, self.mode = slot_bytes, region, mode
        self.slot: dict = {}                         # pinned metadata: key -> remote slot
        self.owner: dict = {}                        # ... and slot -> key (Leap prefetches by slot)
        self.live: set = set()                       # ... and which keys exist
        self.next_slot = 0
        self.free_slots: list = []
        self.gen: dict = {}                          # key -> writes so far (install guard)
        self.flushing: dict = {}                     # key -> value being written back
        self.floor: dict = {}                        # key -> first TE batch whose items of it are of use:
                                                     # its last write-back's (the fence), or the batch
                                                     # after the host's own read of it
        self.fetching: dict = {}                     # key -> event fired when its fetch is installed
        self.reading: set = set()                    # keys the host is reading through its miss path
        self.replies: dict = {}                      # (client node, port) -> (rid, reply or None)
        self.cpu = cpu
        # PD3: a clean record leaving the cache is announced to the DPU (a 0-byte write, Table 2's
        # flush row), so the Host View stays the set of cached keys; silently dropped, it would
        # stay there and the DPU would stop prefetching it
        self.notify_evictions = mode == "pd3"
        self.dropped: list = []
        self.n = dict(packets=0, requests=0, hits=0, zone_hits=0, misses=0, leap_hits=0, writebacks=0,
                      resent=0, malformed=0)

    def addr(self, key: int) -> int:
        return self.region + self.slot[key] * self.slot_bytes

    def new_slot(self, key: int) -> int:
        if key in self.slot:
            return self.slot[key]
        s = self.free_slots.pop() if self.free_slots else self.next_slot
        if s == self.next_slot:
            self.next_slot += 1
        self.slot[key] = s
        self.owner[s] = key
        return s

    def new_slots(self, keys: list) -> list:
        """``[new_slot(k) for k in keys]`` (keys: ints), with the same slots, ``slot``/``owner``
        entries in the same order and ``next_slot``: with no freed slot to reuse, a key not mapped
        yet takes the next fresh slot at its first occurrence, so the new keys (deduplicated in
        order) take a run of fresh slots in a few dict builds instead of a call per key."""
        if self.free_slots:              # reused slots come off a stack: take them one key at a time
            return [self.new_slot(k) for k in keys]
        slot, first = self.slot, self.next_slot
        if not slot:
            # a preload: distinct keys into an empty map, each the next slot -- the map built in one go
            # (into an empty dict, update copies the table whole); a repeated key shows as a shorter map
            run = dict(zip(keys, range(first, first + len(keys))))
            if len(run) == len(keys):
                slot.update(run)
                self.next_slot += len(keys)
                self.owner.update(zip(range(first, self.next_slot), keys))
                return list(range(first, self.next_slot))
        fresh = dict.fromkeys(k for k in keys if k not in slot)
        self.next_slot += len(fresh)
        slot.update(zip(fresh, range(first, self.next_slot)))
        self.owner.update(zip(range(first, self.next_slot), fresh))
        return [slot[k] for k in keys]

    def slot_key(self, s: int):
        return self.owner.get(s)

    def probe_ns(self) -> int:
        return 2 * self.cpu.local_read_ns_per_line

    def load_cached(self, key: int, value) -> None:
        """A record the cache holds clean from the start (an experiment's preload)."""
        self.cache[key] = value

    def load_cached_records(self, keys: list, value) -> None:
        """:meth:`load_cached` of each of ``keys`` in order, all with one ``value``."""
        self.cache.update(zip(keys, repeat(value)))

    def touch(self, key: int) -> bool:
        """Whether ``key`` is cached (moves it to the LRU's newest end)."""
        if key in self.cache:
            self.cache.move_to_end(key)
            return True
        return False

    def install(self, key: int, value, *, dirty: bool) -> list:
        """Put ``key`` in the cache; returns the dirty records evicted: ``[(key, value)]``."""
        self.cache[key] = value
        self.cache.move_to_end(key)
        if dirty:
            self.dirty.add(key)
        out = []
        while len(self.cache) > self.cache_items:
            self.leave(*self.cache.popitem(last=False), out)
        return out

    def leave(self, key: int, value, out: list) -> None:
        """``key``'s record left local memory: a dirty one goes to ``out`` to be written back (and
        is *flushing* meanwhile), a clean one is announced to the DPU (PD3)."""
        if key in self.dirty:
            self.dirty.discard(key)
            self.flushing[key] = value
            out.append((key, value))
        elif self.notify_evictions:
            self.dropped.append(key)

    def write(self, key: int, value) -> list:
        self.gen[key] = self.gen.get(key, 0) + 1
        return self.install(key, value, dirty=True)
