"""toy-ht: a lock-based hash table built from the dmrack systems library (docs/systems-library.md).

Layout (``ToyHT.setup``): ``buckets`` buckets of one 64-byte line each, spread over the memory
nodes (``nodes.systems.lib.array``). A bucket line is a lock word and 7 slot words; a slot points
to an immutable KV block (``fp:8 | units:8 | node:8 | offset:40``), a checksummed record
(``nodes.systems.lib.record.RecordFormat``) of ``klen:u16 | key | value`` allocated by the client
(``nodes.systems.lib.alloc.ChunkAllocator``) and reused once no reader can hold it
(``nodes.systems.lib.reclaim``).

* get: READ the bucket line (one line: atomic), READ the blocks whose fingerprint matches, return
  the value of the one holding the key. Lock-free: it never looks at the lock.
* insert / update / delete: CAS the lock word 0 -> this node's tag, READ the line, READ the
  candidate blocks, WRITE a new block if needed, then WRITE the whole line back with the lock
  word 0: the new slots and the unlock land together (a 64-byte line is written atomically).
  The replaced block is retired after that WRITE.

A key lives in one bucket (``hash64``'s low 32 bits reduced onto the buckets); a bucket holds 7
keys, and the default load factor keeps the chance of filling one negligible.
"""

from __future__ import annotations

import struct

from nodes.systems.api import KVClient, Option, System, SystemGaveUp
from nodes.systems.lib.alloc import UNIT, ChunkAllocator
from nodes.systems.lib.array import RecordArray, allocate_array
from nodes.systems.lib.hashing import hash64, reduce_range
from nodes.systems.lib.reclaim import Reclaimer, setup_epochs
from nodes.systems.lib.record import RecordFormat
from shm.fabric import gaddr

SLOTS = 7
LINE = 64
MAX_UNITS = 255
_WORDS = struct.Struct("<8Q")
_KLEN = struct.Struct("<H")


def pack_slot(fp: int, units: int, node: int, offset: int) -> int:
    return (fp << 56) | (units << 48) | (node << 40) | offset


def unpack_slot(w: int) -> tuple[int, int, int, int]:
    """(fp, units, node, offset)."""
    return w >> 56, (w >> 48) & 0xFF, (w >> 40) & 0xFF, w & ((1 << 40) - 1)


class ToyHTClient(KVClient):
    def __init__(self, fabric, layout: dict, thread):
        self.thread = thread
        self.buckets: RecordArray = layout["buckets"]
        self.tag = thread.owner.node + 1                 # the lock holder: this compute node
        self.backoff_ns = fabric.profile.link.one_way_ns
        self.reclaim = Reclaimer(fabric, layout["epochs"], thread)
        self.alloc = ChunkAllocator(fabric, layout["memory_nodes"], layout["chunk_bytes"],
                                    start=thread.owner.node * 7 + thread.index, reclaim=self.reclaim,
                                    owner="toy-ht", max_offset=(1 << 40) - 1,
                                    offset_limit="the slot's 40-bit offset field")

    # -- pieces ------------------------------------------------------------------------------------
    def _where(self, key: bytes) -> tuple[int, int]:
        h = int(hash64(key))
        return self.buckets.address_of(reduce_range(h, 0, 32, self.buckets.count)), h >> 56

    def _find(self, co, words, key: bytes, fp: int):
        """Generator: (slot index 1..7 whose block holds ``key``, its value), or (0, None). READs
        the blocks whose fingerprint matches, in one batch."""
        cands = [i for i in range(1, 1 + SLOTS) if words[i] and words[i] >> 56 == fp]
        if not cands:
            return 0, None
        handles = []
        for i in cands:
            _, units, node, off = unpack_slot(words[i])
            handles.append(co.read(gaddr(node, off), units * UNIT))
        yield co.sync()
        for i, h in zip(cands, handles):
            rec = RecordFormat(h.length).decode(h.data)
            if rec is None:
                raise SystemGaveUp("toy-ht: torn KV block (a block was reused under a reader)")
            (klen,) = _KLEN.unpack_from(rec.payload)
            if rec.payload[2:2 + klen] == key:
                return i, rec.payload[2 + klen:]
        return 0, None

    def _read_line(self, co, addr: int):
        h = co.read(addr, LINE)
        yield co.sync()
        return list(_WORDS.unpack(h.data.tobytes()))

    def _lock(self, co, addr: int):
        while True:
            h = co.cas(addr, 0, self.tag)
            yield co.sync()
            if h.value == 0:
                return
            yield self.backoff_ns

    def _unlock_with(self, co, addr: int, words) -> None:
        words[0] = 0
        co.write(addr, _WORDS.pack(*words))

    def _new_block(self, co, key: bytes, value: bytes, fp: int):
        payload = _KLEN.pack(len(key)) + key + value
        units = -(-(16 + len(payload)) // UNIT)
        if units > MAX_UNITS:
            raise SystemGaveUp(f"toy-ht: key + value of {len(key) + len(value)} B do not fit a block")
        node, off = yield from self.alloc.alloc(co, units)
        co.write(gaddr(node, off), RecordFormat(units * UNIT).encode(1, payload))
        return pack_slot(fp, units, node, off)

    def _retire(self, w: int) -> None:
        _, units, node, off = unpack_slot(w)
        self.alloc.retire(node, off, units)

    # -- the KV interface: every operation inside an epoch (blocks it reads are not reused) ---------
    def get(self, co, key):
        e = self.reclaim.enter()
        try:
            key = bytes(key)
            addr, fp = self._where(key)
            words = yield from self._read_line(co, addr)
            _, value = yield from self._find(co, words, key, fp)
            return value
        finally:
            self.reclaim.exit(e)

    def insert(self, co, key, value):
        return (yield from self._modify(co, bytes(key), bytes(value), "insert"))

    def update(self, co, key, value):
        return (yield from self._modify(co, bytes(key), bytes(value), "update"))

    def delete(self, co, key):
        return (yield from self._modify(co, bytes(key), None, "delete"))

    def _modify(self, co, key: bytes, value, kind: str):
        e = self.reclaim.enter()
        try:
            addr, fp = self._where(key)
            yield from self._lock(co, addr)
            words = yield from self._read_line(co, addr)
            i, _ = yield from self._find(co, words, key, fp)
            if (kind == "insert") == bool(i):            # insert of an existing key, or a missing one
                self._unlock_with(co, addr, words)
                yield co.sync()
                return False
            old = words[i] if i else 0
            if kind == "insert":
                free = [j for j in range(1, 1 + SLOTS) if not words[j]]
                if not free:
                    self._unlock_with(co, addr, words)
                    yield co.sync()
                    raise SystemGaveUp("toy-ht: bucket full; lower the option load_factor")
                i = free[0]
            words[i] = 0 if kind == "delete" else (yield from self._new_block(co, key, value, fp))
            if kind != "delete":
                yield co.sync()                          # the block is written before it is published
            self._unlock_with(co, addr, words)           # new slots + unlock: one atomic line WRITE
            yield co.sync()
            if old:
                self._retire(old)
            return True
        finally:
            self.reclaim.exit(e)


class ToyHT(System):
    name = "toy-ht"
    description = "toy-ht: lock-based hash table from the systems library (an example plugin)"
    paper = "dmrack examples/plugin"
    options = (
        Option("load_factor", 0.125, "keys per slot the table is sized for", minimum=0.01, maximum=1.0),
        Option("chunk_bytes", 1 << 16, "bytes of the chunks a client carves KV blocks out of",
               minimum=MAX_UNITS * UNIT, maximum=1 << 30),
    )

    @classmethod
    def footprint(cls, options, capacity, key_bytes, value_bytes):
        buckets = max(1, int(-(-int(capacity) // (SLOTS * options["load_factor"]))))
        return RecordArray.footprint(buckets, LINE) + int(capacity) * (16 + 2 + key_bytes + value_bytes)

    @classmethod
    def setup(cls, fabric, memory_nodes, options, capacity):
        opts = cls.check_options(dict(options or {}), "system 'toy-ht'")
        mns = [fabric.node_index(m) for m in memory_nodes]
        buckets = max(1, int(-(-int(capacity) // (SLOTS * opts["load_factor"]))))
        try:
            array = allocate_array(fabric, mns, buckets, LINE)
            epochs = setup_epochs(fabric, mns[0])
        except MemoryError as e:
            raise SystemGaveUp(f"toy-ht: {buckets} buckets for capacity {capacity} do not fit the memory "
                               f"nodes: {e}; raise their memory or the option load_factor") from None
        return {"system": cls.name, "memory_nodes": mns, "buckets": array, "epochs": epochs,
                "chunk_bytes": opts["chunk_bytes"]}

    @classmethod
    def client(cls, fabric, layout, thread, options):
        return ToyHTClient(fabric, layout, thread)


__all__ = ["ToyHT", "ToyHTClient", "pack_slot", "unpack_slot"]
