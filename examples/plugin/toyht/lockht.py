"""lock-ht: a lock-based hash table that keeps keys and values *in place*, and reads them without
the lock, so its GETs can meet a WRITE halfway (the toy of docs/adding-a-system.md, "Reading a
failure").

Where toy-ht (``ht.py``) writes every value out of place and publishes it with one atomic line,
lock-ht overwrites a bucket's record where it is: a reader can sample some of its lines before a
writer's WRITE lands and some after (multi-line transfers land line by line, docs/fabric.md), a
*torn* read. A checksum over the record (``nodes.systems.lib.record.RecordFormat``) tells a torn
record from a good one, and the GET reads it again. ``fault=skip-checksum`` drops that check:
``dmrack check --heavy`` (values of 1000 B, 16 lines) then reports values no write produced.

Layout (``LockHT.setup``): ``buckets`` buckets over the memory nodes
(``nodes.systems.lib.array``), each a 64-byte line holding the lock word, then a record of
``record_bytes``: ``version | length | checksum | reserved`` and the payload ``klen:u16 |
deleted:u8 | key | value``. A key's home bucket is its hash; it lives in the first of
``probe`` buckets from there that holds it or was empty (linear probing; a deleted key leaves
its record as a tombstone, which only that key reuses).

* get: READ the records along the probe sequence (without locking) until the key or an empty
  record; a torn record is read again.
* insert / update / delete: find the bucket as a get does, CAS its lock word 0 -> this node's tag,
  READ the record again under the lock (another writer may have claimed an empty bucket
  meanwhile: then unlock and probe on), then WRITE the new record and WRITE 0 to the lock word
  in one post. The data lands before the unlock because WRITEs of one QP are placed in posting
  order (docs/fabric.md, "Ordering rules").
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from nodes.systems.api import KVClient, Option, System, SystemGaveUp
from nodes.systems.lib.array import RecordArray, allocate_array
from nodes.systems.lib.hashing import hash64, reduce_range
from nodes.systems.lib.record import RECORD_HEADER, RecordFormat

LINE = 64
TORN_RETRIES = 1000               # READs of one record that may come back torn before giving up
_HEAD = struct.Struct("<HB")      # klen, deleted
_RECORD_HEAD = struct.Struct("<IIII")


class LockHTStats(NamedTuple):
    torn_reads: int               # records that failed their checksum (read again)
    lock_retries: int             # CASes of a lock word that found it taken
    reprobes: int                 # empty buckets another writer claimed while this one locked


class LockHTClient(KVClient):
    def __init__(self, fabric, layout: dict, thread):
        self.buckets: RecordArray = layout["buckets"]
        self.record = RecordFormat(layout["record_bytes"])
        self.probe = layout["probe"]
        self.skip_checksum = layout["fault"] == "skip-checksum"
        self.tag = thread.owner.node + 1
        self.backoff_ns = fabric.profile.link.one_way_ns
        self.torn_reads = self.lock_retries = self.reprobes = 0

    def statistics(self) -> LockHTStats:
        return LockHTStats(self.torn_reads, self.lock_retries, self.reprobes)

    # -- pieces ------------------------------------------------------------------------------------
    def _home(self, key: bytes) -> int:
        return reduce_range(int(hash64(key)), 0, 32, self.buckets.count)

    def _decode(self, data):
        """(version, payload) of a record's bytes, None if torn. With the fault, the checksum is not
        looked at: the bytes are taken as they came."""
        if not self.skip_checksum:
            return self.record.decode(data)
        version, length, _, _ = _RECORD_HEAD.unpack_from(bytes(data[:RECORD_HEADER]))
        length = min(length, self.record.capacity)
        return version, bytes(data[RECORD_HEADER:RECORD_HEADER + length])

    def _read_record(self, co, bucket: int):
        """Generator: (version, klen, deleted, key, value) of a bucket's record; klen -1 if empty.
        Reads it again while it is torn."""
        addr = self.buckets.address_of(bucket) + LINE
        for _ in range(TORN_RETRIES):
            h = co.read(addr, self.record.size)
            yield co.sync()
            rec = self._decode(h.data)
            if rec is None:
                self.torn_reads += 1
                continue
            version, payload = rec
            if version == 0 or len(payload) < _HEAD.size:
                return version, -1, False, b"", b""
            klen, deleted = _HEAD.unpack_from(payload)
            body = payload[_HEAD.size:]
            return version, klen, bool(deleted), body[:klen], body[klen:]
        raise SystemGaveUp(f"lock-ht: bucket {bucket}'s record stayed torn for {TORN_RETRIES} READs")

    def _find(self, co, key: bytes, start: int = 0):
        """Generator: (bucket, record) of the first bucket from probe step ``start`` on that holds
        ``key`` or is empty, or (-1, None) if the probe sequence is full of other keys."""
        home = self._home(key)
        for p in range(start, self.probe):
            b = (home + p) % self.buckets.count
            rec = yield from self._read_record(co, b)
            if rec[1] < 0 or rec[3] == key:
                return b, p, rec
        return -1, self.probe, None

    # -- the KV interface --------------------------------------------------------------------------
    def get(self, co, key):
        key = bytes(key)
        _, _, rec = yield from self._find(co, key)
        if rec is None or rec[1] < 0 or rec[2]:
            return None
        return rec[4]

    def insert(self, co, key, value):
        return (yield from self._modify(co, bytes(key), bytes(value), "insert"))

    def update(self, co, key, value):
        return (yield from self._modify(co, bytes(key), bytes(value), "update"))

    def delete(self, co, key):
        return (yield from self._modify(co, bytes(key), None, "delete"))

    def _modify(self, co, key: bytes, value, kind: str):
        if value is not None and len(key) + len(value) + _HEAD.size > self.record.capacity:
            raise SystemGaveUp(f"lock-ht: key + value of {len(key) + len(value)} B do not fit a "
                               f"{self.record.size} B record; raise the option record_bytes")
        p = 0
        while True:
            b, p, rec = yield from self._find(co, key, p)
            if b < 0:
                raise SystemGaveUp(f"lock-ht: {self.probe} buckets from the key's home are full; "
                                   f"lower the option load_factor")
            lock = self.buckets.address_of(b)
            while True:
                h = co.cas(lock, 0, self.tag)
                yield co.sync()
                if h.value == 0:
                    break
                self.lock_retries += 1
                yield self.backoff_ns
            version, klen, deleted, k, _ = yield from self._read_record(co, b)   # under the lock
            if klen >= 0 and k != key:           # someone claimed the empty bucket first
                co.write(lock, 0)
                yield co.sync()
                self.reprobes += 1
                p += 1
                continue
            present = klen >= 0 and not deleted
            if present == (kind == "insert"):    # insert of a present key, or a missing one
                co.write(lock, 0)
                yield co.sync()
                return False
            payload = _HEAD.pack(len(key), kind == "delete") + key + (value or b"")
            co.write(lock + LINE, self.record.encode(version % 0xFFFF_FFFF + 1, payload))
            co.write(lock, 0)                    # the unlock lands after the record (posting order)
            yield co.sync()
            return True


class LockHT(System):
    name = "lock-ht"
    description = ("lock-ht: lock-based hash table with in-place records and lock-free checksummed GETs "
                   "(an example plugin)")
    paper = "dmrack examples/plugin (the lockht of issue 18)"
    options = (
        Option("load_factor", 0.25, "keys per bucket the table is sized for", minimum=0.01, maximum=1.0),
        Option("record_bytes", 1088, "bytes of a bucket's record (a multiple of 64): the largest key + value "
               "is this minus 19", minimum=128, maximum=1 << 16),
        Option("probe", 16, "buckets a key may be placed in, from its home bucket on", minimum=1, maximum=1024),
        Option("fault", "none", "a deliberate bug, to prove that dmrack check --heavy catches it: "
               "'skip-checksum' (a GET takes a record without checking its checksum)",
               choices=("none", "skip-checksum")),
    )

    @classmethod
    def _buckets(cls, options, capacity) -> int:
        return max(1, int(-(-int(capacity) // options["load_factor"])))

    @classmethod
    def footprint(cls, options, capacity, key_bytes, value_bytes):
        return RecordArray.footprint(cls._buckets(options, capacity), LINE + options["record_bytes"])

    @classmethod
    def setup(cls, fabric, memory_nodes, options, capacity):
        opts = cls.check_options(dict(options or {}), "system 'lock-ht'")
        if opts["record_bytes"] % LINE:
            raise SystemGaveUp(f"lock-ht: record_bytes = {opts['record_bytes']} is not a multiple of {LINE}")
        mns = [fabric.node_index(m) for m in memory_nodes]
        buckets = cls._buckets(opts, capacity)
        try:
            array = allocate_array(fabric, mns, buckets, LINE + opts["record_bytes"])
        except MemoryError as e:
            raise SystemGaveUp(f"lock-ht: {buckets} buckets for capacity {capacity} do not fit the memory "
                               f"nodes: {e}; raise their memory or the option load_factor") from None
        return {"system": cls.name, "buckets": array, "record_bytes": opts["record_bytes"],
                "probe": opts["probe"], "fault": opts["fault"]}

    @classmethod
    def client(cls, fabric, layout, thread, options):
        return LockHTClient(fabric, layout, thread)


__all__ = ["LockHT", "LockHTClient", "LockHTStats"]
