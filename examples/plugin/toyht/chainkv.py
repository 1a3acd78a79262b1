"""chain-kv: an out-of-place KV store whose writes are blocks linked into per-bucket chains by a CAS.

A design of the family of RACE, Clover and FUSEE, written from the docs as a researcher would,
small enough to read in one sitting, and shipped with a narrow-window bug to switch on
(``fault = "link-before-write"``), the one docs/checking.md ("Chaos") walks through.

Layout (``ChainKV.setup``): ``buckets`` head words (8 B each, spread over the memory nodes by
``nodes.systems.lib.array``); a head points to the newest block of its bucket's chain
(``units:8 | node:8 | offset:40``, 0: empty). A block is a checksummed record
(``nodes.systems.lib.record.RecordFormat``) of ``next:u64 | klen:u16 | live:u8 | key | value``:
written once, never changed, never reused (this example does not collect old versions).

* insert / update / delete: READ the head, walk the chain to the key's newest block (to know
  whether it exists), WRITE a new block whose ``next`` is the head read, then CAS the head from
  it to the new block: in one doorbell when the block and the head are on the same memory node (on
  one QP the CAS lands after the block's last line: docs/fabric.md, "Ordering rules", an atomic
  sees the WRITEs posted before it), after the WRITE's completion when they are not (two QPs,
  nothing orders them: the first version of this example posted both in one doorbell anyway, and
  ``dmrack check --chaos``'s stalls caught it), so whoever follows the new head finds the block
  whole. A failed CAS (another writer got in) starts over.
* get: READ the head, then the blocks of the chain one by one until the key's newest block; each
  block's checksum is verified (a torn or unwritten block would be a bug: it gives up loudly).

With ``fault = "link-before-write"`` the CAS is posted *before* the block's WRITE (on one QP a
WRITE may pass an earlier atomic: nothing orders them) and a get trusts a block without its
checksum. The head then briefly points to a block whose bytes have not landed: a get that follows
it reads zeros, takes them for the end of the chain and loses every older version of the bucket.
In the timing model the block lands nanoseconds after the CAS and any reader needs a round trip
to follow the head, so ``dmrack check`` passes it; ``dmrack check --chaos`` opens the window.
"""

from __future__ import annotations

import struct

from nodes.systems.api import KVClient, Option, System, SystemGaveUp
from nodes.systems.lib.alloc import UNIT, ChunkAllocator
from nodes.systems.lib.array import RecordArray, allocate_array
from nodes.systems.lib.hashing import hash64, reduce_range
from nodes.systems.lib.record import RECORD_HEADER, RecordFormat
from shm.fabric import gaddr, gaddr_node

MAX_UNITS = 255
HEAD = 8
_HDR = struct.Struct("<QHB")        # next, klen, live
CHAIN_LIMIT = 100_000               # blocks a get may walk before it calls the chain broken


def pack_ptr(units: int, node: int, offset: int) -> int:
    return (units << 48) | (node << 40) | offset


def unpack_ptr(w: int) -> tuple[int, int, int]:
    """(units, node, offset)."""
    return (w >> 48) & 0xFF, (w >> 40) & 0xFF, w & ((1 << 40) - 1)


class ChainKVClient(KVClient):
    def __init__(self, fabric, layout: dict, thread, fault: str):
        self.thread = thread
        self.heads: RecordArray = layout["heads"]
        self.fault = fault
        self.alloc = ChunkAllocator(fabric, layout["memory_nodes"], layout["chunk_bytes"],
                                    start=thread.owner.node * 7 + thread.index, owner="chain-kv",
                                    max_offset=(1 << 40) - 1, offset_limit="the pointer's 40-bit offset field")

    def _head_of(self, key: bytes) -> int:
        return self.heads.address_of(reduce_range(int(hash64(key)), 0, 32, self.heads.count))

    def _block(self, co, ptr: int):
        """Generator: (next, key, value or None if a deletion) of the block ``ptr`` points to."""
        units, node, off = unpack_ptr(ptr)
        h = co.read(gaddr(node, off), units * UNIT)
        yield co.sync()
        data = h.data
        if self.fault == "link-before-write":
            # the bug's second half: the header's length believed, the checksum never verified
            length = int.from_bytes(bytes(data[4:8]), "little")
            payload = bytes(data[RECORD_HEADER:RECORD_HEADER + length]).ljust(_HDR.size, b"\0")
        else:
            rec = RecordFormat(h.length).decode(data)
            if rec is None or not rec.payload:
                raise SystemGaveUp("chain-kv: a linked block is torn or unwritten (a write published too early)")
            payload = rec.payload
        nxt, klen, live = _HDR.unpack_from(payload)
        key = payload[_HDR.size:_HDR.size + klen]
        return nxt, key, payload[_HDR.size + klen:] if live else None

    def _newest(self, co, head: int, key: bytes):
        """Generator: (found, value) of the key's newest block in the chain from ``head``."""
        ptr = head
        for _ in range(CHAIN_LIMIT):
            if not ptr:
                return False, None
            ptr, k, value = yield from self._block(co, ptr)
            if k == key:
                return value is not None, value
        raise SystemGaveUp(f"chain-kv: a chain longer than {CHAIN_LIMIT} blocks")

    def _read_head(self, co, addr: int) -> int:
        h = co.read(addr, HEAD)
        yield co.sync()
        return h.value

    def get(self, co, key):
        key = bytes(key)
        head = yield from self._read_head(co, self._head_of(key))
        _, value = yield from self._newest(co, head, key)
        return value

    def insert(self, co, key, value):
        return (yield from self._modify(co, bytes(key), bytes(value), "insert"))

    def update(self, co, key, value):
        return (yield from self._modify(co, bytes(key), bytes(value), "update"))

    def delete(self, co, key):
        return (yield from self._modify(co, bytes(key), None, "delete"))

    def _modify(self, co, key: bytes, value, kind: str):
        addr = self._head_of(key)
        while True:
            head = yield from self._read_head(co, addr)
            found, _ = yield from self._newest(co, head, key)
            if (kind == "insert") == found:           # insert of an existing key, or a missing one
                return False
            payload = _HDR.pack(head, len(key), value is not None) + key + (value or b"")
            units = -(-(RECORD_HEADER + len(payload)) // UNIT)
            if units > MAX_UNITS:
                raise SystemGaveUp(f"chain-kv: key + value of {len(key) + len(value or b'')} B do not fit a block")
            node, off = yield from self.alloc.alloc(co, units)
            image = RecordFormat(units * UNIT).encode(1, payload)
            new = pack_ptr(units, node, off)
            if self.fault == "link-before-write":
                h = co.cas(addr, head, new)           # the bug: linked before the block is written
                co.write(gaddr(node, off), image)
            else:
                co.write(gaddr(node, off), image)     # the block, then the link
                if node != gaddr_node(addr):
                    # on another memory node the WRITE and the CAS go on two QPs, which nothing
                    # orders: the block must have landed (its completion) before the link is posted
                    yield co.sync()
                h = co.cas(addr, head, new)           # (same node: one doorbell, one QP, in order)
            yield co.sync()
            if h.value == head:
                return True
            # another writer linked first: this block is never published (not reused either)


class ChainKV(System):
    name = "chain-kv"
    description = "chain-kv: out-of-place blocks linked into per-bucket chains by a CAS (an example plugin)"
    paper = "dmrack examples/plugin"
    options = (
        Option("buckets_per_key", 0.5, "chain heads per key the table is sized for", minimum=0.01, maximum=4.0),
        Option("chunk_bytes", 1 << 16, "bytes of the chunks a client carves blocks out of",
               minimum=MAX_UNITS * UNIT, maximum=1 << 30),
        Option("fault", "none", "a deliberate bug with a window of nanoseconds: 'link-before-write' posts the "
               "link's CAS before the block's WRITE and trusts blocks without their checksum (dmrack check "
               "passes it; dmrack check --chaos does not)", choices=("none", "link-before-write")),
    )

    @classmethod
    def footprint(cls, options, capacity, key_bytes, value_bytes):
        heads = max(1, int(int(capacity) * options["buckets_per_key"]))
        # every write leaves a block behind: room for some versions of each key
        return RecordArray.footprint(heads, HEAD) + 8 * int(capacity) * (RECORD_HEADER + 11 + key_bytes + value_bytes)

    @classmethod
    def setup(cls, fabric, memory_nodes, options, capacity):
        opts = cls.check_options(dict(options or {}), "system 'chain-kv'")
        mns = [fabric.node_index(m) for m in memory_nodes]
        heads = max(1, int(int(capacity) * opts["buckets_per_key"]))
        try:
            array = allocate_array(fabric, mns, heads, HEAD)
        except MemoryError as e:
            raise SystemGaveUp(f"chain-kv: {heads} chain heads for capacity {capacity} do not fit the memory "
                               f"nodes: {e}") from None
        return {"system": cls.name, "memory_nodes": mns, "heads": array, "chunk_bytes": opts["chunk_bytes"]}

    @classmethod
    def client(cls, fabric, layout, thread, options):
        opts = cls.check_options(dict(options or {}), "system 'chain-kv'")
        return ChainKVClient(fabric, layout, thread, opts["fault"])


__all__ = ["ChainKV", "ChainKVClient", "pack_ptr", "unpack_ptr"]
