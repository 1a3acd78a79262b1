"""The Sherman client: get / insert / update / delete / scan over coroutine verbs (docs/sherman.md).

One :class:`ShermanClient` per modelled thread; the index cache and the local lock table are
shared by the compute node's threads. Verbs per operation with a warm index cache, no contention,
inline values (a "round" is one ``sync``):

=========  ===========================================================  ======  ======
op         rounds                                                       rounds  verbs
=========  ===========================================================  ======  ======
get        READ leaf (1 KB)                                             1       1
update     masked CAS lock | READ leaf | WRITE entry line + masked CAS  3       4
insert     as update (the entry goes to a free line)                    3       4
delete     as update (the entry line is cleared)                        3       4
scan       READ leaf, then READ each right sibling until count          1/leaf  1/leaf
=========  ===========================================================  ======  ======

An out-of-line value (> 48 B) adds one READ round to get (the block) and one WRITE to the lock
round of insert/update. A leaf split adds: WRITE the new right leaf (one round before the
write-back), then the separator insert one level up (lock, READ, WRITE + unlock: 3 rounds, more if
that node splits too; a root split adds WRITE new root | CAS root word). A cache miss READs each
uncached internal node on the path; a local hand-over skips the lock round.

Subclasses (SMART-BT, Dolphin) override the pieces: :meth:`find_node` (the descent),
:meth:`acquire` / :meth:`release` (HOCL), :meth:`read_leaf`, :meth:`modify`.
"""

from __future__ import annotations

from bisect import bisect_right
from operator import itemgetter
from typing import NamedTuple

from nodes.systems.api import KVClient, SystemGaveUp
from nodes.systems.lib.alloc import ChunkAllocator
from nodes.systems.lib.cpu_costs import SoftwareCosts
from nodes.systems.lib.hocl import FIELD_MASK, HoclClient, LocalLocks
from nodes.systems.lib.local_lock import LocalLockTable
from nodes.systems.lib.reclaim import Reclaimer
from nodes.systems.lib.shared import shared
from shm.fabric import REGION_DEVICE, gaddr, gaddr_node, gaddr_offset

from .cache import IndexCache, IndexNode
from .layout import (
    INTERNAL_KEYS, LEAF_SLOTS, LINE, MAX_VALUE, NODE_BYTES, NODE_UNITS, OUT_OF_LINE, Header, KeySizeError,
    PerLineLeaf,
    ValueTooLarge, as_int64, block_image, block_units, internal_entries, internal_image, key_int, leaf_format,
    leaf_image, node_is_leaf, pack_root, unpack_root,
)

#: Modelled CPU: the profile's ``[software]`` prices (nodes/systems/lib/cpu_costs.py): a fixed part
#: per operation, a node just READ scanned line by line, and one search of the index cache per
#: descent, priced by the cache's size (Sherman's skiplist: a DRAM miss per level).
RETRY_LIMIT = 100_000
_KEY_INT = itemgetter(1)                  # a parsed entry's key as an int (layout's entries())
#: Bytes one cached internal node counts for in ``cache_bytes``: its 1 KB copy, as Sherman's code
#: sizes its index cache (include/IndexCache.h: a cache of M MB holds ``M MB / sizeof(InternalPage)``
#: pages; the skiplist entries that index them are not counted), which is what Dolphin's Table II
#: and Fig. 6 set and measure in MB for Sherman and for Marlin ("the same index cache scheme").
#: 1,088 until issue 40 (64 B of assumed entry overhead).
CACHED_NODE_BYTES = NODE_BYTES



class ShermanStats(NamedTuple):
    gets: int
    inserts: int
    updates: int
    deletes: int
    scans: int
    cache_hits: int            # internal nodes found in the index cache during descents
    cache_misses: int          # ... READ from memory instead
    cache_invalidations: int   # cached nodes (or the root) dropped after a fence showed them stale
    sibling_follows: int       # moves right along a level (a split the walk had not seen)
    local_lock_waits: int      # lock acquisitions that queued behind a thread of this node
    handovers: int             # ... and got the lock handed over (no remote CAS)
    remote_lock_retries: int   # masked CASes on a remote lock that found it taken
    torn_reads: int            # node READs whose line versions differed (re-read)
    leaf_splits: int
    internal_splits: int
    root_splits: int           # new roots installed by CAS on the root word
    root_cas_failures: int     # ... lost to another client's new root
    nodes_allocated: int
    blocks_written: int        # out-of-line value blocks
    chunks: int                # chunk RPCs of the node/block allocator
    blocks_reused: int         # value blocks that came back (nodes/systems/lib/reclaim.py)
    bytes_reclaimed: int       # bytes of replaced value blocks that became reusable
    limbo_blocks: int          # replaced value blocks waiting for the epoch to move on
    epoch_advances: int        # rack epoch advances this client made
    locked_reads: int          # get READs that found the leaf locked and read again (lock_free_reads off)
    cache_bytes: int           # the compute node's index cache now: cached nodes x CACHED_NODE_BYTES (shared)
    memory_bytes: int          # this thread's allocated blocks still linked (ChunkAllocator.used_bytes)
    read_handover: int = 0     # gets answered by another get's leaf READ (option local_lock; not in gets)
    write_handover: int = 0    # updates whose value another update of the node wrote (option local_lock)


class ShermanClient(HoclClient, KVClient):
    """Sherman for one modelled thread (``shm.coro.RdmaThread``); its locks are the library's HOCL
    (:class:`nodes.systems.lib.hocl.HoclClient`: ``lock_of``, ``acquire``, ``remote_acquire``, ``release``)."""

    NAME = "Sherman"                  # in error messages; subclasses (SMART-BT) name themselves

    def __init__(self, fabric, layout: dict, thread, options: dict):
        self.fabric = fabric
        self.layout = layout
        self.thread = thread
        self.env = thread.env
        self.root_word = layout["root"]
        self.lock_slots = layout["lock_slots"]
        self.lock_region = layout.get("lock_region", REGION_DEVICE)
        self._lock_base = {int(n): off for n, off in layout["locks"].items()}
        owner = thread.owner
        cap = options.get("cache_nodes", layout.get("cache_nodes", 16384))
        self.cache: IndexCache = shared(owner, self.root_word, "index_cache", lambda: IndexCache(cap))
        self.locks: LocalLocks = shared(owner, self.root_word, "local_locks", LocalLocks)
        self.max_handover = int(options.get("max_handover", 8))
        self.hierarchical = bool(options.get("hierarchical", True))
        self.combine = bool(options.get("combine", True))
        self.entry_writes = bool(options.get("entry_writes", True))
        self.lock_free_reads = bool(options.get("lock_free_reads", True))
        self.locked_reads = 0
        # read delegation and write combining per key (SMART's local lock table, lib/local_lock.py):
        # not in Sherman's code; CHIME's build of its Sherman baseline turns them on (see system.py)
        self.rdwc = shared(owner, self.root_word, "rdwc_table", lambda: LocalLockTable(thread.env)) \
            if options.get("local_lock", False) else None
        self.read_handover = self.write_handover = 0
        self.fault = options.get("fault", "none")
        self._late_blocks: dict = {}    # fault=value-after-entry: block gaddr -> its image, not yet written
        self.tag = (owner.node % FIELD_MASK) + 1          # the remote lock's holder: this compute node
        mns = layout["memory_nodes"]
        # Out-of-line value blocks are reused once no reader can hold them (nodes/systems/lib/reclaim.py);
        # nodes are never freed (no merging).
        self.reclaim = Reclaimer(fabric, layout["epochs"], thread)
        self.alloc = ChunkAllocator(fabric, mns, layout["chunk_bytes"], start=owner.node * 7 + thread.index,
                                    reclaim=self.reclaim, owner=self.NAME)
        self._nb = [gaddr(n, 0) for n in range(min(len(fabric.nodes), 256))]
        self._buf = thread.buf
        self._b64 = as_int64(thread.buf)
        self._mv = thread.buf_view
        # the leaf format the tree was set up with (nodes/systems/sherman/layout.py): Sherman's packed
        # leaf or SMART's per-line Sherman+ leaf; a layout without the key predates the option
        self.leaf = leaf_format(layout.get("leaf_layout", "per-line"))
        costs = self.costs = SoftwareCosts(fabric.profile)
        self._node_ns = costs.node_ns
        self._line_ns = costs.line_ns
        self._op_ns = costs.op_ns
        self.gets = self.inserts = self.updates = self.deletes = self.scans = 0
        self.cache_hits = self.cache_misses = self.cache_invalidations = self.sibling_follows = 0
        self.local_lock_waits = self.handovers = self.remote_lock_retries = self.torn_reads = 0
        self.leaf_splits = self.internal_splits = self.root_splits = self.root_cas_failures = 0
        self.nodes_allocated = self.blocks_written = 0

    def statistics(self) -> ShermanStats:
        return ShermanStats(self.gets, self.inserts, self.updates, self.deletes, self.scans, self.cache_hits,
                            self.cache_misses, self.cache_invalidations, self.sibling_follows,
                            self.local_lock_waits, self.handovers, self.remote_lock_retries, self.torn_reads,
                            self.leaf_splits, self.internal_splits, self.root_splits, self.root_cas_failures,
                            self.nodes_allocated, self.blocks_written, self.alloc.chunks, self.reclaim.reused,
                            self.reclaim.bytes_reclaimed, len(self.reclaim.limbo), self.reclaim.advances,
                            self.locked_reads, len(self.cache.nodes) * CACHED_NODE_BYTES, self.alloc.used_bytes,
                            self.read_handover, self.write_handover)

    # -- pieces: allocation ----------------------------------------------------------------------
    def new_node(self, co):
        """Generator: the gaddr of a fresh 1 KB node (never reused)."""
        node, off = yield from self.alloc.alloc(co, NODE_UNITS)
        self.nodes_allocated += 1
        return self._nb[node] | off

    def new_block(self, co, key: bytes, value: bytes):
        """Generator: allocate an out-of-line value block and queue its WRITE; its gaddr."""
        node, off = yield from self.alloc.alloc(co, block_units(len(value)))
        addr = self._nb[node] | off
        if self.fault in ("value-after-entry", "value-after-unlock"):
            # the deliberate bug: the block's WRITE waits until the entry that points to it is
            # queued (_modify posts it behind the entry's write-back, or after the unlock)
            self._late_blocks[addr] = block_image(key, value)
        else:
            co.write(addr, block_image(key, value))
        self.blocks_written += 1
        return addr

    # -- pieces: reading nodes ---------------------------------------------------------------------
    def read_node(self, co, addr: int):
        """Generator: READ a node until its line versions agree; the buffer offset of the snapshot
        (valid until this coroutine's next yield)."""
        for _ in range(RETRY_LIMIT):
            h = co.read(addr, NODE_BYTES)
            yield co.sync()
            self.thread.cpu(self._node_ns)
            # a leaf is checked by its format's versions; internal nodes are per-line in both
            fmt = self.leaf if node_is_leaf(self._buf, h.offset) else PerLineLeaf
            if fmt.consistent(self._buf, self._b64, h.offset):
                return h.offset
            self.torn_reads += 1
        raise SystemGaveUp(f"Sherman: node {addr:#x} stayed torn for {RETRY_LIMIT} READs")

    def read_unlocked(self, co, addr: int):
        """Generator (option ``lock_free_reads`` off, FG+'s readers): READ a leaf together with its
        lock word, in one doorbell, until the lock is free: a tree whose lock sits in the node
        header (FG) cannot tell a reader that a node is being written but by its lock."""
        word, shift = self.lock_of(addr)
        mask = FIELD_MASK << shift
        for _ in range(RETRY_LIMIT):
            lk = co.read(word, 8)
            off = yield from self.read_node(co, addr)
            if lk.value & mask == 0:
                return off
            self.locked_reads += 1
        raise SystemGaveUp(f"{self.NAME}: node {addr:#x} stayed locked for {RETRY_LIMIT} READs")

    def fetch_internal(self, co, addr: int) -> IndexNode:
        """Generator: READ an internal node, parse it, put it in the index cache."""
        self.cache_misses += 1
        off = yield from self.read_node(co, addr)
        hd = Header(self._mv, off)
        keys, children = internal_entries(self._mv, off, hd.count)
        node = IndexNode(hd.level, hd.low, hd.high, hd.sibling, keys, [hd.leftmost] + children)
        if hd.level > 0:
            self.cache.put(addr, node)
        return node

    def read_root(self, co):
        """Generator: (address, level) of the root, from the root word on the first memory node."""
        h = co.read(self.root_word, 8)
        yield co.sync()
        root = unpack_root(h.value)
        self.cache.root = root
        return root

    def find_node(self, co, k: int, level: int):
        """Generator: ``(addr, parent, lvl)``: the node at ``level`` that covers key ``k`` as far as
        the index cache knows (not read), the internal node that pointed to it (0: none, it is
        the root), and ``lvl`` = ``level`` (or the root's level when the tree is lower)."""
        cache = self.cache
        if cache.capacity:
            self.thread.cpu(self.costs.skiplist_search_ns(len(cache.nodes)))
        for _ in range(RETRY_LIMIT):
            root = cache.root
            if root is None:
                root = yield from self.read_root(co)
            addr, lvl = root
            parent = 0
            while lvl > level:
                n = cache.nodes.get(addr)
                if n is None:
                    n = yield from self.fetch_internal(co, addr)
                else:
                    self.cache_hits += 1
                if n.level != lvl:
                    self.invalidate(addr)         # not the node the path promised: start over
                    self.invalidate(parent)
                    break
                if n.high is not None and k >= n.high:
                    self.sibling_follows += 1
                    self.invalidate(parent)       # the parent did not know of this split
                    addr = n.sibling
                    parent = 0
                    continue
                if k < n.low:
                    self.invalidate(addr)
                    self.invalidate(parent)
                    break
                parent = addr
                addr = n.child(k)
                lvl -= 1
            else:
                return addr, parent, lvl
        raise SystemGaveUp(f"Sherman: descent for key {k:#x} did not settle after {RETRY_LIMIT} tries")

    def invalidate(self, addr: int) -> None:
        """Drop a cached node (0: the cached root) after a fence showed it stale."""
        self.cache_invalidations += 1
        self.cache.drop(addr)

    # -- the KV interface --------------------------------------------------------------------------
    def _key(self, key) -> int:
        if type(key) is not bytes:
            key = bytes(key)
        return key_int(key)

    # Every operation runs inside an epoch (nodes/systems/lib/reclaim.py): an out-of-line block it may
    # read is not reused before it ends. Subclasses override the bodies (_get, modify, _scan).
    def get(self, co, key: bytes):
        if self.rdwc is not None:
            # a get of a key whose leaf READ is in flight on this node waits for the next one
            key = bytes(key)
            return self.rdwc.read(key, lambda: self.reclaim.run(self._get(co, key)), self)
        return self.reclaim.run(self._get(co, key))

    def scan(self, co, start: bytes, count: int):
        return self.reclaim.run(self._scan(co, start, count))

    def _get(self, co, key: bytes):
        if type(key) is not bytes:
            key = bytes(key)
        k = key_int(key)
        self.gets += 1
        self.thread.cpu(self._op_ns)
        return (yield from self.leaf_get(co, key, k))

    def leaf_get(self, co, key: bytes, k: int):
        """Generator: a get's descent, leaf READ and B-link moves; reports where it found the key
        (:meth:`entry_at`) or that it is absent (:meth:`entry_gone`)."""
        fmt = self.leaf
        read = self.read_node if self.lock_free_reads else self.read_unlocked
        addr, parent, _ = yield from self.find_node(co, k, 0)
        for _ in range(RETRY_LIMIT):
            addr, parent, off, hd = yield from self.covering_leaf(co, k, addr, parent, read)
            r = fmt.probe(self._buf, self._b64, off, key)
            if r < 0:                                  # torn (read_node checked; kept for safety)
                self.torn_reads += 1
                continue
            line = r & 0xFF
            if line == 0:
                self.entry_gone(key)
                return None
            self.entry_at(key, addr + fmt.entry_offset(line), hd.nv)
            v = fmt.value_at(self._mv, off, line)
            if type(v) is bytes:
                return v
            return (yield from self.read_block(co, *v))
        raise SystemGaveUp(f"{self.NAME}: get of key {key!r} did not settle after {RETRY_LIMIT} tries")

    # Where a key's entry line is, as the operations see it: no-ops here; SMART-BT's speculative
    # lookup caches them (the only difference between its reads and writes and Sherman's).
    def entry_at(self, key: bytes, line_addr: int, nv: int) -> None:
        """``key``'s entry is the line at ``line_addr`` of a leaf whose node version is ``nv``."""

    def entry_gone(self, key: bytes) -> None:
        """``key`` has no entry line to remember: absent, deleted, or about to move in a split."""

    def read_block(self, co, block: int, nbytes: int, length: int | None = None):
        """Generator: the value in an out-of-line block (blocks are immutable: no version), READing
        ``nbytes`` (a packed entry knows the block's units, not the value's length: None takes it
        from the block's header)."""
        h = co.read(block, nbytes)
        yield co.sync()
        self.thread.cpu(self._line_ns * ((nbytes + LINE - 1) // LINE))
        data = h.data
        if length is None:
            length = int.from_bytes(data[8:12].tobytes(), "little")
        return data[16:16 + length].tobytes()

    def insert(self, co, key: bytes, value: bytes):
        self.inserts += 1
        return (yield from self.modify(co, key, value, "insert"))

    def update(self, co, key: bytes, value: bytes):
        self.updates += 1
        if self.rdwc is not None and len(value) <= self.leaf.inline:
            # write combining: the node's updates of one key go remote one at a time, each writing
            # the last value handed to it (values that fit the entry only: a longer one has its
            # block written before the lock, so it cannot take another update's value)
            key, value = bytes(key), bytes(value)
            return (yield from self.rdwc.write(
                key, value, lambda take: self.reclaim.run(self._modify(co, key, value, "update", take)), self))
        return (yield from self.modify(co, key, value, "update"))

    def delete(self, co, key: bytes):
        self.deletes += 1
        return (yield from self.modify(co, key, None, "delete"))

    def modify(self, co, key, value, kind: str):
        """Generator: insert / update / delete inside an epoch (see :meth:`get`)."""
        return self.reclaim.run(self._modify(co, key, value, kind))

    def _block_of(self, block: int, length: int):
        return gaddr_node(block), gaddr_offset(block), block_units(length)

    def _block_read(self, block: int, nbytes: int):
        """``_block_of`` of a block known by the bytes its READ takes (header + value, 64 B units)."""
        return gaddr_node(block), gaddr_offset(block), (nbytes + LINE - 1) // LINE

    def _modify(self, co, key, value, kind: str, take=None):
        """Generator: insert / update / delete under the leaf's lock (see the module table). ``take``
        (write combining, an update of an inline value): called under the lock once the key is found,
        right before the entry is built, for the value to write (lib/local_lock.py)."""
        if type(key) is not bytes:
            key = bytes(key)
        k = key_int(key)
        self.thread.cpu(self._op_ns)
        fmt = self.leaf
        block = 0
        if value is not None:
            if type(value) is not bytes:
                value = bytes(value)
            if len(value) > MAX_VALUE:
                raise ValueTooLarge(f"Sherman values are at most {MAX_VALUE} bytes; got {len(value)}")
            if len(value) > fmt.inline:
                block = yield from self.new_block(co, key, value)   # WRITE goes out with the lock CAS
        addr, parent, _ = yield from self.find_node(co, k, 0)
        for _ in range(RETRY_LIMIT):
            lock = self.lock_of(addr)
            yield from self.acquire(co, lock)
            off = yield from self.read_node(co, addr)
            hd = Header(self._mv, off)
            if hd.high is not None and k >= hd.high:
                yield from self.release(co, lock)
                self.sibling_follows += 1
                self.invalidate(parent)
                addr, parent = hd.sibling, 0
                continue
            if k < hd.low or hd.level != 0:
                yield from self.release(co, lock)
                self.invalidate(parent)
                addr, parent, _ = yield from self.find_node(co, k, 0)
                continue
            r = fmt.probe(self._buf, self._b64, off, key)
            if r < 0:                                  # torn under the lock: cannot be, read again
                yield from self.release(co, lock)
                self.torn_reads += 1
                continue
            line, free = r & 0xFF, (r >> 8) & 0xFF
            if (kind == "insert") == (line != 0):          # insert of a present / change of a missing key
                if line:
                    self.entry_at(key, addr + fmt.entry_offset(line), hd.nv)
                else:
                    self.entry_gone(key)
                yield from self.release(co, lock)
                if block:
                    self._late_blocks.pop(block, None)
                    self.alloc.release(*self._block_of(block, len(value)))   # never published
                return False
            old = None                                 # the out-of-line block this write unlinks
            if line:
                v = fmt.value_at(self._mv, off, line)
                if type(v) is not bytes:
                    old = self._block_read(v[0], v[1])
            ev = fmt.version(self._mv, off, line or free or 1) + 1
            if kind == "delete":
                wb = (addr + fmt.entry_offset(line), fmt.entry(hd.nv, ev, bytes(8), 0, b"", used=False))
                self.entry_gone(key)
            elif kind == "update" or free:
                if take is not None:
                    value = take()
                vlen, field = fmt.value_field(value, block)
                wb = (addr + fmt.entry_offset(line or free), fmt.entry(hd.nv, ev, key, vlen, field))
                self.entry_at(key, addr + fmt.entry_offset(line or free), hd.nv)
            else:
                self.entry_gone(key)                  # the split moves it; the next get finds it
                if block in self._late_blocks:        # (the fault's block goes out first here)
                    co.write(block, self._late_blocks.pop(block))
                yield from self.split_leaf(co, addr, lock, off, hd, key, k, value, block)
                return True
            if not self.entry_writes:                 # ablation: the whole leaf goes back
                at = wb[0] - addr
                leaf = bytearray(self._mv[off:off + NODE_BYTES])
                leaf[at:at + len(wb[1])] = wb[1]
                wb = (addr, bytes(leaf))
            if self.fault == "unlock-before-write":
                # the deliberate bug: the lock is free before the entry is written back, so the
                # next holder works on a leaf that misses this write (and may be overwritten by it)
                yield from self.release(co, lock)
                co.write(*wb)
                yield co.sync()
            elif block in self._late_blocks and self.fault == "value-after-unlock":
                # fault=value-after-unlock, the deliberate bug: the entry and the unlock first, the
                # value's block in the next doorbell, once they completed: a reader that READs the
                # new entry and then the block within that round trip reads the block before it
                # holds the value
                co.write(*wb)
                yield from self.release(co, lock)
                yield co.sync()
                co.write(block, self._late_blocks.pop(block))
                yield co.sync()
            elif block in self._late_blocks:
                # fault=value-after-entry, the deliberate bug: the entry goes first, the value's
                # block behind it in the same doorbell (then the unlock): on one QP the block lands
                # nanoseconds after the entry, so a reader must follow the new entry to the block
                # within that gap to read the block before its value is there
                co.write(*wb)
                co.write(block, self._late_blocks.pop(block))
                yield from self.release(co, lock)
            else:
                co.write(*wb)                         # the write-back and the unlock in one post
                yield from self.release(co, lock)
            if self.fault == "retire-new-block" and block:
                # the deliberate bug: the block just published is retired instead of the one it
                # replaced, so it is reused under the entry that points to it (only values over
                # 48 B have blocks)
                old = self._block_of(block, len(value))
            if old is not None:
                self.alloc.retire(*old)               # after the entry's WRITE completed
            return True
        raise SystemGaveUp(f"{self.NAME}: {kind} of key {key!r} did not settle after {RETRY_LIMIT} tries")

    # -- splits --------------------------------------------------------------------------------------
    def split_leaf(self, co, addr, lock, off, hd, key, k, value, block):
        """Generator (holding the leaf's lock): split the full leaf at ``addr`` (snapshot at
        ``off``) with the new entry: WRITE the right half to a new node, then the left half + unlock
        in one batch, then insert the separator one level up."""
        fmt = self.leaf
        entries = fmt.entries(self._mv, off)
        vlen, field = fmt.value_field(value, block)
        entries.append((0, k, 0, vlen, key, field))
        entries.sort(key=_KEY_INT)
        half = len(entries) // 2
        sep = entries[half][1]
        left = [(e[2] + 1, e[3], e[4], e[5]) for e in entries[:half]]
        right = [(e[2] + 1, e[3], e[4], e[5]) for e in entries[half:]]
        new = yield from self.new_node(co)
        co.write(new, fmt.image(1, sep, hd.high, hd.sibling, right))
        yield co.sync()                               # the right leaf exists before anyone can reach it
        co.write(addr, fmt.image(hd.nv + 1, hd.low, sep, new, left))
        yield from self.release(co, lock)
        self.leaf_splits += 1
        yield from self.insert_internal(co, sep, new, 1)

    def insert_internal(self, co, k: int, child: int, level: int):
        """Generator: insert separator ``k`` -> ``child`` into the node at ``level`` covering ``k``
        (splitting it, and up to a new root, as needed)."""
        go = 0                                        # a node to move right to (0: descend)
        parent = 0
        for _ in range(RETRY_LIMIT):
            if go:
                addr, lvl = go, level
                go = 0
            else:
                addr, parent, lvl = yield from self.find_node(co, k, level)
            if lvl < level:                           # the tree is lower: grow a new root
                if (yield from self.grow_root(co, addr, lvl, k, child, level)):
                    return
                continue
            lock = self.lock_of(addr)
            yield from self.acquire(co, lock)
            off = yield from self.read_node(co, addr)
            hd = Header(self._mv, off)
            if hd.level != level or k < hd.low:
                yield from self.release(co, lock)
                self.invalidate(addr)
                self.invalidate(parent)
                continue
            if hd.high is not None and k >= hd.high:
                yield from self.release(co, lock)
                self.sibling_follows += 1
                self.invalidate(parent)
                go, parent = hd.sibling, 0
                continue
            keys, children = internal_entries(self._mv, off, hd.count)
            i = bisect_right(keys, k)
            if i > 0 and keys[i - 1] == k:            # already there (cannot happen; harmless)
                yield from self.release(co, lock)
                return
            keys.insert(i, k)
            children.insert(i, child)
            self.thread.cpu(self._node_ns)
            if len(keys) <= INTERNAL_KEYS:
                co.write(addr, internal_image(hd.nv + 1, level, hd.low, hd.high, hd.sibling, hd.leftmost, keys,
                                              children))
                yield from self.release(co, lock)
                self.cache.put(addr, IndexNode(level, hd.low, hd.high, hd.sibling, keys, [hd.leftmost] + children))
                return
            # split: the middle key goes up; the right node's leftmost child is its child
            m = len(keys) // 2
            up = keys[m]
            new = yield from self.new_node(co)
            rkeys, rchildren, rleft = keys[m + 1:], children[m + 1:], children[m]
            co.write(new, internal_image(1, level, up, hd.high, hd.sibling, rleft, rkeys, rchildren))
            yield co.sync()
            lkeys, lchildren = keys[:m], children[:m]
            co.write(addr, internal_image(hd.nv + 1, level, hd.low, up, new, hd.leftmost, lkeys, lchildren))
            yield from self.release(co, lock)
            self.internal_splits += 1
            self.cache.put(addr, IndexNode(level, hd.low, up, new, lkeys, [hd.leftmost] + lchildren))
            self.cache.put(new, IndexNode(level, up, hd.high, hd.sibling, rkeys, [rleft] + rchildren))
            k, child, level = up, new, level + 1
        raise SystemGaveUp(f"Sherman: separator insert of {k:#x} at level {level} did not settle")

    def grow_root(self, co, old: int, old_level: int, k: int, child: int, level: int):
        """Generator: install a new root over the root ``old`` (level ``old_level``) with the one
        separator ``k`` -> ``child``, by CAS on the root word. False if the root moved."""
        h = co.read(self.root_word, 8)
        yield co.sync()
        cur = h.value
        if cur != pack_root(old, old_level) or old_level + 1 != level:
            self.cache.root = unpack_root(cur)
            return False
        new = yield from self.new_node(co)
        co.write(new, internal_image(1, old_level + 1, 0, None, 0, old, [k], [child]))
        yield co.sync()
        c = co.cas(self.root_word, cur, pack_root(new, old_level + 1))
        yield co.sync()
        if c.value != cur:
            self.root_cas_failures += 1
            self.cache.root = None
            return False
        self.root_splits += 1
        self.cache.root = (new, old_level + 1)
        self.cache.put(new, IndexNode(old_level + 1, 0, None, 0, [k], [old, child]))
        return True

    # -- scans ---------------------------------------------------------------------------------------
    def begin_scan(self, co, start: bytes, count: int):
        """Generator: a scan's start, counted and its per-operation CPU charged; ``(start bytes,
        cursor, leaf addr, parent)`` of the descent to the leaf of ``start``, or None for a scan
        of no keys (Sherman's and Marlin's scans)."""
        if type(start) is not bytes:
            start = bytes(start)
        cursor = key_int(start)
        self.scans += 1
        self.thread.cpu(self._op_ns)
        if count <= 0:
            return None
        addr, parent, _ = yield from self.find_node(co, cursor, 0)
        return start, cursor, addr, parent

    def moved(self, hd, k: int) -> int:
        """Where a leaf snapshot's header ``hd`` sends key ``k``: 0 it covers it, 1 move right
        along the B-link, 2 descend again (the node is no leaf, or ``k`` is left of it)."""
        if hd.high is not None and k >= hd.high:
            return 1
        if k < hd.low or hd.level != 0:
            return 2
        return 0

    def covering_leaf(self, co, k: int, addr: int, parent: int, read=None):
        """Generator: READ the leaf at ``addr`` (with ``read``; default the lock-free
        :meth:`read_node`) and move along the B-link (or walk again) until the leaf READ covers
        ``k``; ``(addr, parent, off, header)`` of that READ. The get and the scan of Sherman and
        its descendants find their leaf this way."""
        if read is None:
            read = self.read_node
        for _ in range(RETRY_LIMIT):
            off = yield from read(co, addr)
            hd = Header(self._mv, off)
            move = self.moved(hd, k)
            if move == 0:
                return addr, parent, off, hd
            addr, parent = yield from self.move_to(co, k, hd, move, parent)
        raise SystemGaveUp(f"{self.NAME}: no leaf covering key {k:#x} after {RETRY_LIMIT} moves")

    def move_to(self, co, k: int, hd, move: int, parent: int):
        """Generator: take the ``move`` :meth:`moved` chose for ``k`` from the leaf of header
        ``hd`` (1: its B-link sibling; 2: a descent from the cache or the root), dropping the
        cached parent that led astray; ``(addr, parent)`` of the node to READ next."""
        self.invalidate(parent)
        if move == 1:
            self.sibling_follows += 1
            return hd.sibling, 0
        addr, parent, _ = yield from self.find_node(co, k, 0)
        return addr, parent

    def _scan(self, co, start: bytes, count: int):
        begun = yield from self.begin_scan(co, start, count)
        if begun is None:
            return []
        start, cursor, addr, parent = begun
        out: list = []
        for _ in range(RETRY_LIMIT):
            addr, parent, off, hd = yield from self.covering_leaf(co, cursor, addr, parent)
            ents = [e for e in self.leaf.entries(self._mv, off) if e[1] >= cursor]
            ents.sort(key=lambda e: e[1])
            self.thread.cpu(self._node_ns)
            pending = []
            for e in ents[:count - len(out)]:
                if e[3] == OUT_OF_LINE:
                    blk, nbytes, length = self.leaf.ref_of(e[3], e[5])
                    pending.append((len(out), co.read(blk, nbytes), length))
                    out.append([e[4], None])
                else:
                    out.append([e[4], e[5]])
            if pending:
                yield co.sync()
                for i, h, length in pending:
                    if length is None:
                        length = int.from_bytes(h.data[8:12].tobytes(), "little")
                    out[i][1] = h.data[16:16 + length].tobytes()
            if len(out) >= count or hd.high is None or not hd.sibling:
                return [(kk, v) for kk, v in out]
            cursor, addr, parent = hd.high, hd.sibling, 0
        raise SystemGaveUp(f"Sherman: scan from {start!r} did not settle after {RETRY_LIMIT} leaves")


__all__ = ["ShermanClient", "ShermanStats", "KeySizeError", "ValueTooLarge", "LEAF_SLOTS", "leaf_image"]
