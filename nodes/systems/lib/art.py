"""The ART library on remote memory: SMART-ART's and Dolphin's internal nodes, written lock-free.

Why a library module: Dolphin (MSST'24) and SMART-ART (OSDI'23) share one internal-node format
(an adaptive radix tree over 8-byte keys, one key byte per level) and differ only in their leaves
(Dolphin: 1 KB B+-tree-like leaves under a "special" node at depth 8; SMART-ART: one leaf per KV
pair) and in what they do around the tree (Spear lock, local lock table). What is common lives
here, in plain Python (no jitted code: the tree is a few entries per operation), every remote
access a verb of the coroutine API (``yield from``) so the NIC model prices it.

Layout (docs/art.md has the tables). A node is ``rev_ptr u64 | header u64 | entries[slots] u64``,
``16 + 8 * slots`` bytes, ``slots = 2 ** (type + 1)`` for types NODE_4 = 1 .. NODE_256 = 7 (type 0
is never a live node, so an all-zero word is "empty" everywhere). Fields are listed from the most
significant bit; words are stored little-endian (what ``co.write(int)`` and the atomics use):

* header ``depth:8 | node_type:3 | partial_len:5 | partial[6]``. ``depth`` is the index of the key
  byte the node dispatches on; ``partial`` holds the ``partial_len`` key bytes just before it
  (bytes ``depth - partial_len .. depth - 1``, first byte most significant). Every key below a
  node at depth ``d`` shares its first ``d`` bytes, so ``(key[:d], d)`` names the node (the radix
  cache's key). With 8-byte keys ``partial_len <= 6`` always (a child of the root starts at byte 1,
  the deepest node dispatches on byte 7).
* internal entry ``partial:8 | mn_id:4 | node_type:3 | is_leaf:1 (0) | next_addr:48``;
  leaf entry ``partial:8 | mn_id:7 | is_leaf:1 (1) | addr:48``. ``partial`` is the key byte the
  entry stands for; ``mn_id`` indexes the tree's list of memory nodes (not the fabric's node
  index, which counts compute nodes too).
* ``rev_ptr``: the global address of the parent entry pointing at the node (SMART's reverse
  pointer). It is a hint for cache validation: a reader that reached a node from a cached parent
  and finds ``rev_ptr`` elsewhere drops the cached parent; a reader that came from the root
  repairs it with an unsignaled CAS.

Concurrency, all by CAS on 8-byte words, no locks:

* an insert into a node CASes the first empty slot (NODE_256: the slot of the key byte) 0 -> entry;
  on failure the returned word replaces the image's slot and the search goes on (that word may be
  the key byte's entry now). Slots fill in order and a filled slot's byte never changes, so no
  byte is ever entered twice;
* a new child (a leaf turned into a node of two leaves, a prefix split) is written whole before
  one CAS of the parent entry old -> new publishes it (out-of-place, as ART on DM does);
* a full node is upgraded out of place: the upgrader allocates the bigger node, CASes the old
  node's header to a *forwarding header* naming it (only one upgrader wins), then CASes every
  entry to its *frozen* form (``is_leaf`` = 0, ``node_type`` = 0: no live entry looks like that),
  all in one post, again for those that changed meanwhile, WRITEs the new node with the entries it
  froze and CASes the parent entry old -> new. A writer's CAS on a frozen slot fails, so the copy
  misses nothing and no new child can hang under a node being replaced. A walker that meets a
  frozen entry re-reads the node and follows its forwarding header (waiting while the new node is
  still zero), and points the parent entry at the replacement with an unsignaled CAS (help).

(A first version froze the header only and had each writer READ the header after its CAS: a
writer that learnt a child from a failed CAS on a frozen node, or from a READ whose entry lines
were sampled after its header line, could descend into a node reachable only from the frozen one
and insert there for nothing. Freezing the entries closes both.)

A node's header never changes except to become a forwarding header; a prefix split does not
shorten the displaced node's partial (it is re-checked, redundantly). So a cached image's header
is never wrong, only its entries can be out of date: a walk that starts from the cache trusts a
positive answer (the key found at its leaf) and confirms a negative one from the root.

Left to the systems: the leaves (their format, the key compare, ``rev_ptr`` of a displaced leaf),
deletion and reclamation of replaced nodes (never reused here: a frozen node stays as a
forwarder), Dolphin's special node at depth 8, SMART-ART's local lock table.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from nodes.systems.lib.alloc import UNIT, ChunkAllocator
from shm import failpoints
from shm.failpoints import failpoint
from shm.messages import SystemGaveUp
from shm.fabric import gaddr, gaddr_node, gaddr_offset

KEY_BYTES = 8
NODE_4, NODE_8, NODE_16, NODE_32, NODE_64, NODE_128, NODE_256 = range(1, 8)
NODE_TYPES = (NODE_4, NODE_8, NODE_16, NODE_32, NODE_64, NODE_128, NODE_256)
MAX_PARTIAL = 6
ADDR_BITS = 48
ADDR_MASK = (1 << ADDR_BITS) - 1
MAX_INTERNAL_MN = 15          # mn_id:4
MAX_LEAF_MN = 127             # mn_id:7
REV_PTR_OFF = 0
HEADER_OFF = 8
ENTRIES_OFF = 16
_U64 = (1 << 64) - 1


def slots_of(node_type: int) -> int:
    """Entries of a node of ``node_type`` (NODE_4 .. NODE_256)."""
    if not NODE_4 <= node_type <= NODE_256:
        raise ValueError(f"node type {node_type} is not one of NODE_4 (1) .. NODE_256 (7)")
    return 1 << (node_type + 1)


def node_bytes(node_type: int) -> int:
    """Size of a node: ``rev_ptr`` + header + ``8 * slots``."""
    return ENTRIES_OFF + 8 * slots_of(node_type)


def slot_units(units: int, align_units: int) -> int:
    """``units`` 64-byte units rounded up to whole slots of ``align_units`` units: what an
    allocation takes when every allocation starts at an ``align_units * 64``-byte boundary."""
    return -(-units // align_units) * align_units


def node_units(node_type: int) -> int:
    """64-byte allocation units of a node (the systems library allocator's unit)."""
    return (node_bytes(node_type) + UNIT - 1) // UNIT


def min_entries(node_type: int) -> int:
    """The fewest entries a node of ``node_type`` holds as this library's writers leave it: a
    NODE_4 is made with two (a leaf split, a prefix split), a bigger type only by upgrading a
    full node of the type below (or by a bulk load choosing ``type_for``), and no entry is ever
    emptied. A scan's estimate of how many keys lie under a node it has not read yet (a system
    that grows nodes or removes entries otherwise may hold fewer: an estimate, not a bound)."""
    return 2 if node_type == NODE_4 else slots_of(node_type - 1) + 1


def type_for(count: int) -> int:
    """The smallest node type holding ``count`` entries."""
    for t in NODE_TYPES:
        if slots_of(t) >= count:
            return t
    raise ValueError(f"no node type holds {count} entries")


# -- header ---------------------------------------------------------------------------------------

class Header(NamedTuple):
    depth: int
    node_type: int
    partial: bytes            # len = partial_len

    def encode(self) -> int:
        return encode_header(self.depth, self.node_type, self.partial)


def encode_header(depth: int, node_type: int, partial: bytes) -> int:
    """``depth:8 | node_type:3 | partial_len:5 | partial[6]`` (partial[0] most significant)."""
    if not 0 <= depth <= 0xFF:
        raise ValueError(f"header depth {depth} does not fit 8 bits")
    if not 0 <= node_type <= 7:
        raise ValueError(f"header node type {node_type} does not fit 3 bits")
    if len(partial) > MAX_PARTIAL:
        raise ValueError(f"a header holds at most {MAX_PARTIAL} partial bytes, got {len(partial)}")
    return (depth << 56) | (node_type << 53) | (len(partial) << 48) | int.from_bytes(
        bytes(partial).ljust(MAX_PARTIAL, b"\0"), "big")


def decode_header(word: int) -> Header:
    plen = (word >> 48) & 0x1F
    if plen > MAX_PARTIAL:
        raise ValueError(f"header {word:#x}: partial_len {plen} > {MAX_PARTIAL}")
    return Header(word >> 56, (word >> 53) & 7, (word & ADDR_MASK).to_bytes(MAX_PARTIAL, "big")[:plen])


def header_type(word: int) -> int:
    return (word >> 53) & 7


def encode_forward(addr_mn: int, offset: int, node_type: int) -> int:
    """The forwarding header of a frozen node: ``new_type:8 | 0:3 | 0:1 | mn_id:4 | addr:48``.
    Its header ``node_type`` field (bits 53..55) is 0, so it is never a live header, and it is
    never 0 (``new_type`` >= NODE_8)."""
    return (node_type << 56) | (addr_mn << 48) | offset


def decode_forward(word: int) -> tuple[int, int, int] | None:
    """``(mn_id, offset, node_type)`` of a forwarding header; None for a live or zero header."""
    if word == 0 or header_type(word) != 0:
        return None
    return (word >> 48) & 0xF, word & ADDR_MASK, word >> 56


# -- entries --------------------------------------------------------------------------------------

class Entry(NamedTuple):
    partial: int
    mn_id: int
    node_type: int            # 0 for a leaf entry
    is_leaf: bool
    addr: int                 # 48-bit offset on memory node mn_id


def encode_entry(partial: int, mn_id: int, node_type: int, offset: int) -> int:
    """An internal entry ``partial:8 | mn_id:4 | node_type:3 | is_leaf:1 | next_addr:48``."""
    if not 0 <= partial <= 0xFF:
        raise ValueError(f"entry partial {partial} is not a byte")
    if not 0 <= mn_id <= MAX_INTERNAL_MN:
        raise ValueError(f"internal entry mn_id {mn_id} does not fit 4 bits (at most 16 memory nodes)")
    if not NODE_4 <= node_type <= NODE_256:
        raise ValueError(f"internal entry node type {node_type} is not NODE_4..NODE_256")
    if not 0 <= offset <= ADDR_MASK:
        raise ValueError(f"entry address {offset:#x} does not fit 48 bits")
    return (partial << 56) | (mn_id << 52) | (node_type << 49) | offset


def encode_leaf_entry(partial: int, mn_id: int, offset: int) -> int:
    """A leaf entry ``partial:8 | mn_id:7 | is_leaf:1 | addr:48``."""
    if not 0 <= partial <= 0xFF:
        raise ValueError(f"entry partial {partial} is not a byte")
    if not 0 <= mn_id <= MAX_LEAF_MN:
        raise ValueError(f"leaf entry mn_id {mn_id} does not fit 7 bits")
    if not 0 <= offset <= ADDR_MASK:
        raise ValueError(f"entry address {offset:#x} does not fit 48 bits")
    return (partial << 56) | (mn_id << 49) | (1 << 48) | offset


FROZEN_BIT = 1 << 52
_KIND_BITS = 0xF << 48        # is_leaf and node_type


def freeze_entry(word: int) -> int:
    """The frozen form of a live entry (its node is being replaced): ``is_leaf`` and
    ``node_type`` cleared, bit 52 set, the ``partial`` byte kept. No live entry looks like this
    (an internal entry has a type >= 1, a leaf entry ``is_leaf`` = 1) and it is never 0."""
    return (word & ~_KIND_BITS) | FROZEN_BIT


def is_frozen(word: int) -> bool:
    return word != 0 and word & _KIND_BITS == 0


def decode_entry(word: int) -> Entry:
    if word >> 48 & 1:
        return Entry(word >> 56, (word >> 49) & 0x7F, 0, True, word & ADDR_MASK)
    return Entry(word >> 56, (word >> 52) & 0xF, (word >> 49) & 7, False, word & ADDR_MASK)


def entry_byte(word: int) -> int:
    return word >> 56


def is_leaf_entry(word: int) -> bool:
    return bool(word >> 48 & 1)


def with_partial(word: int, partial: int) -> int:
    return (word & ((1 << 56) - 1)) | (partial << 56)


# -- keys and prefixes ----------------------------------------------------------------------------

def prefix_mismatch(header: Header, key: bytes) -> int:
    """-1 if ``key`` matches the node's partial, else the index of the first key byte that differs."""
    start = header.depth - len(header.partial)
    for i, b in enumerate(header.partial):
        if key[start + i] != b:
            return start + i
    return -1


def first_difference(a: bytes, b: bytes, start: int = 0) -> int:
    """The first index >= ``start`` where two keys differ (``len(a)`` if none)."""
    for i in range(start, len(a)):
        if a[i] != b[i]:
            return i
    return len(a)


# -- node images ----------------------------------------------------------------------------------

class NodeImage:
    """A node as READ (or about to be written): its address and words, parsed lazily."""

    __slots__ = ("addr", "node_type", "rev_ptr", "header_word", "entries")

    def __init__(self, addr: int, node_type: int, rev_ptr: int, header_word: int, entries: list[int]):
        self.addr = addr
        self.node_type = node_type
        self.rev_ptr = rev_ptr
        self.header_word = header_word
        self.entries = entries

    @property
    def header(self) -> Header:
        return decode_header(self.header_word)

    @property
    def live(self) -> bool:
        return header_type(self.header_word) != 0

    @property
    def size(self) -> int:
        return ENTRIES_OFF + 8 * len(self.entries)

    def entry_addr(self, slot: int) -> int:
        return self.addr + ENTRIES_OFF + 8 * slot

    def copy(self) -> "NodeImage":
        return NodeImage(self.addr, self.node_type, self.rev_ptr, self.header_word, list(self.entries))

    def pack(self) -> bytes:
        return struct.pack(f"<{2 + len(self.entries)}Q", self.rev_ptr, self.header_word, *self.entries)

    def find(self, byte: int) -> tuple[int, int]:
        """``(slot, entry)`` of the entry for key byte ``byte``; ``(slot, 0)`` with the slot an
        insert would CAS if there is none; ``(-1, 0)`` if the node is full."""
        ents = self.entries
        if self.node_type == NODE_256:
            return byte, ents[byte]
        for i, e in enumerate(ents):
            if e == 0:
                return i, 0
            if e >> 56 == byte:
                return i, e
        return -1, 0

    def children(self) -> list[int]:
        return [e for e in self.entries if e]


def build_node(addr: int, node_type: int, depth: int, partial: bytes, rev_ptr: int, entries) -> NodeImage:
    """A fresh node image holding ``entries`` (NODE_256: each at the slot of its byte)."""
    slots = [0] * slots_of(node_type)
    if node_type == NODE_256:
        for e in entries:
            slots[e >> 56] = e
    else:
        if len(entries) > len(slots):
            raise ValueError(f"{len(entries)} entries do not fit a node of {len(slots)} slots")
        slots[:len(entries)] = entries
    return NodeImage(addr, node_type, rev_ptr, encode_header(depth, node_type, partial), slots)


_WORDS: dict[int, struct.Struct] = {}     # a node image's length in words -> the struct that unpacks it


def parse_node(addr: int, node_type: int, raw) -> NodeImage:
    """A node image from the bytes of a READ (a numpy view or bytes) of ``node_bytes(node_type)``."""
    n = len(raw) // 8
    words = _WORDS.get(n)
    if words is None:
        words = _WORDS[n] = struct.Struct(f"<{n}Q")
    try:
        words = words.unpack_from(raw)        # in place: no copy of the READ's bytes
    except (BufferError, TypeError, ValueError):   # a buffer struct cannot read in place (not contiguous)
        words = words.unpack_from(bytes(raw))
    return NodeImage(addr, node_type, words[0], words[1], list(words[2:]))


def setup_root(fabric, memory_nodes: list[int], system: str) -> int:
    """Setup time for an ART-indexed system (SMART-ART, Dolphin): check that its entries can name
    every memory node (``mn_id:4``), expose them, and create the root on the first
    (:func:`create_root`); :class:`SystemGaveUp` of one line naming ``system`` otherwise."""
    if len(memory_nodes) > MAX_INTERNAL_MN + 1:
        raise SystemGaveUp(f"{system}: ART entries name at most {MAX_INTERNAL_MN + 1} memory nodes (mn_id:4); "
                           f"the rack has {len(memory_nodes)}")
    for m in memory_nodes:
        fabric.expose(m)
    try:
        return create_root(fabric, memory_nodes[0])
    except MemoryError as e:
        raise SystemGaveUp(f"{system}: the ART root does not fit memory node {memory_nodes[0]}: {e}") from None


def create_root(fabric, memory_node: int) -> int:
    """Setup time (``System.setup``): allocate and initialise the root, a NODE_256 at depth 0 that
    is never replaced (so its address is fixed). Returns its global address."""
    off = fabric.allocate(memory_node, node_bytes(NODE_256))
    words = fabric.memory[memory_node].host64
    words[off // 8:off // 8 + node_bytes(NODE_256) // 8] = 0
    words[off // 8 + 1] = encode_header(0, NODE_256, b"")
    return gaddr(memory_node, off)


def dump_tree(fabric, memory_nodes, root: int):
    """Setup/test time: every reachable node and leaf, read from memory directly (no verbs).
    Returns ``(nodes, leaves)``: lists of ``NodeImage`` and of ``(key prefix, leaf gaddr)``."""
    nodes, leaves = [], []
    stack = [(root, NODE_256, b"")]
    while stack:
        addr, t, prefix = stack.pop()
        mem = fabric.memory[gaddr_node(addr)].host
        off = gaddr_offset(addr)
        img = parse_node(addr, t, mem[off:off + node_bytes(t)])
        fwd = decode_forward(img.header_word)
        if fwd is not None:
            stack.append((gaddr(memory_nodes[fwd[0]], fwd[1]), fwd[2], prefix))
            continue
        nodes.append(img)
        for e in img.children():
            d = decode_entry(e)
            if d.is_leaf:
                leaves.append((prefix, gaddr(memory_nodes[d.mn_id], d.addr)))
            else:
                stack.append((gaddr(memory_nodes[d.mn_id], d.addr), d.node_type, prefix))
    return nodes, leaves


# -- the client -----------------------------------------------------------------------------------

class InsertResult(NamedTuple):
    inserted: bool
    leaf: int                 # global address of the key's leaf (the new one, or the one there)
    entry_addr: int           # global address of the leaf entry pointing at it
    word: int = 0             # that entry's word as last seen (what a CAS of the entry expects)


class Located(NamedTuple):
    """Where ``locate`` found a leaf entry for a key's bytes (the leaf's key is not checked)."""
    leaf: int                 # global address of the leaf
    entry_addr: int           # global address of the entry pointing at it
    word: int                 # the entry word as read
    cached: bool              # the walk started from a cached image (the entry may be stale)


class ArtStats(NamedTuple):
    lookups: int
    inserts: int
    node_reads: int
    nodes_written: int
    upgrades: int
    leaf_splits: int
    prefix_splits: int
    cas_failures: int
    restarts: int
    forwards_followed: int
    rev_ptr_repairs: int
    stale_cache: int


def read_leaf_key_at(offset: int = 0):
    """A ``leaf_key`` callback: the leaf's key is the 8 bytes at ``offset`` in the leaf."""
    def leaf_key(co, leaf_addr: int):
        h = co.read(leaf_addr + offset, KEY_BYTES)
        yield co.sync()
        return bytes(h.data)
    return leaf_key


class ArtTree:
    """One client's handle on a tree (shared by the coroutines of its thread): the root, the
    memory nodes (``mn_id`` -> fabric node index), a ``ChunkAllocator`` for nodes, the system's
    ``leaf_key(co, leaf_gaddr)`` generator (the key stored at a leaf) and counters.

    ``lookup`` and ``insert`` are the descents; the pieces (``read_node``, ``write_node``,
    ``cas_slot``, ``upgrade``, ...) are public for systems that walk differently (Dolphin's
    special node). ``retry_ns``: the wait before re-reading a node still being written."""

    def __init__(self, root: int, memory_nodes, allocator: ChunkAllocator, leaf_key=None, retry_ns: int = 500,
                 full_nodes: bool = False, align_units: int = 1):
        self.root = root
        # SMART's code allocates every internal node at NODE_256 size (to grow it in place); with
        # ``full_nodes`` this tree does too (the memory footprint only: nodes still grow out of place)
        self.full_nodes = bool(full_nodes)
        # a node takes whole slots of ``align_units`` 64-byte units (SMART's and Dolphin's code
        # start every node's allocation at a 256-byte boundary: align_units = 4)
        if align_units < 1:
            raise ValueError(f"align_units must be at least 1, got {align_units}")
        self.align_units = int(align_units)
        self.memory_nodes = tuple(memory_nodes)
        if len(self.memory_nodes) > MAX_INTERNAL_MN + 1:
            raise ValueError(f"ART entries name at most {MAX_INTERNAL_MN + 1} memory nodes (mn_id:4), "
                             f"got {len(self.memory_nodes)}")
        self._mn = {n: i for i, n in enumerate(self.memory_nodes)}
        self.alloc = allocator
        self.leaf_key = leaf_key or read_leaf_key_at(0)
        self.retry_ns = retry_ns
        self.lookups = self.inserts = self.node_reads = self.nodes_written = 0
        self.upgrades = self.leaf_splits = self.prefix_splits = self.cas_failures = self.restarts = 0
        self.forwards_followed = self.rev_ptr_repairs = self.stale_cache = 0

    def statistics(self) -> ArtStats:
        return ArtStats(self.lookups, self.inserts, self.node_reads, self.nodes_written, self.upgrades,
                        self.leaf_splits, self.prefix_splits, self.cas_failures, self.restarts,
                        self.forwards_followed, self.rev_ptr_repairs, self.stale_cache)

    # -- addresses --------------------------------------------------------------------------------
    def mn_of(self, addr: int) -> int:
        try:
            return self._mn[gaddr_node(addr)]
        except KeyError:
            raise ValueError(f"address on node {gaddr_node(addr)} is not on one of the tree's memory nodes "
                             f"{self.memory_nodes}") from None

    def entry_for(self, partial: int, addr: int, node_type: int) -> int:
        return encode_entry(partial, self.mn_of(addr), node_type, gaddr_offset(addr))

    def leaf_entry_for(self, partial: int, leaf_addr: int) -> int:
        return encode_leaf_entry(partial, self.mn_of(leaf_addr), gaddr_offset(leaf_addr))

    def target(self, word: int) -> int:
        """The global address an entry points at."""
        d = decode_entry(word)
        return gaddr(self.memory_nodes[d.mn_id], d.addr)

    # -- node verbs -------------------------------------------------------------------------------
    def units_for(self, node_type: int) -> int:
        """64-byte units a node of ``node_type`` takes (``full_nodes``: a NODE_256's), in whole
        slots of ``align_units``."""
        return slot_units(node_units(NODE_256 if self.full_nodes else node_type), self.align_units)

    def alloc_node(self, co, node_type: int):
        """Generator: the global address of a fresh (zeroed) block for a node of ``node_type``."""
        node, off = yield from self.alloc.alloc(co, self.units_for(node_type))
        return gaddr(node, off)

    def read_node(self, co, addr: int, node_type: int):
        """Generator: READ ``16 + 8 * slots`` bytes of a node of ``node_type``; if its header is
        live and of another type (a system that grows nodes in place), READ the rest too. A
        forwarding or zero header is returned as it is (see ``live``)."""
        h = co.read(addr, node_bytes(node_type))
        yield co.sync()
        self.node_reads += 1
        img = parse_node(addr, node_type, h.data)
        t = header_type(img.header_word)
        if t > node_type:                   # the node grew: the rest of its entries
            have = node_bytes(node_type)
            h2 = co.read(addr + have, node_bytes(t) - have)
            yield co.sync()
            self.node_reads += 1
            img = parse_node(addr, t, bytes(h.data) + bytes(h2.data))
        elif 0 < t < node_type:
            img = NodeImage(addr, t, img.rev_ptr, img.header_word, img.entries[:slots_of(t)])
        return img

    def write_node(self, co, img: NodeImage) -> None:
        """Queue the WRITE of a whole node image (the caller posts or syncs)."""
        co.write(img.addr, img.pack())
        self.nodes_written += 1

    def write_reachable_node(self, co, img: NodeImage):
        """Generator: write a node readers may already reach (an upgrade's replacement, named by a
        forwarding header): everything but the header, then the header. A multi-line WRITE lands
        line by line, and a reader that saw the header early could CAS a slot the copy is about
        to fill; readers wait while the header is zero. The two WRITEs are synced apart: in the
        model, on a profile landing lines in descending order (cx6-200g), an 8-byte WRITE posted
        after a WRITE of 1 KiB or more to the same line can land before it (see docs/art.md)."""
        raw = bytearray(img.pack())
        raw[HEADER_OFF:HEADER_OFF + 8] = bytes(8)
        co.write(img.addr, bytes(raw))
        yield co.sync()
        co.write(img.addr + HEADER_OFF, img.header_word)
        self.nodes_written += 1

    def cas_slot(self, co, img: NodeImage, slot: int, old: int, new: int):
        """Generator: CAS entry ``slot`` of ``img`` old -> new. Returns ``(ok, current word)``;
        the image's slot takes the word (a frozen one if the node is being replaced). A frozen
        ``old`` is never CASed (that would unfreeze a slot under its upgrader)."""
        if is_frozen(old):
            return False, old
        h = co.cas(img.entry_addr(slot), old, new)
        yield co.sync()
        cur = h.value
        if cur != old:
            self.cas_failures += 1
            img.entries[slot] = cur
            return False, cur
        img.entries[slot] = new
        return True, new

    def fix_rev_ptr(self, co, node_addr: int, seen: int, want: int) -> None:
        """Queue an unsignaled CAS of a node's (or leaf's) ``rev_ptr`` ``seen`` -> ``want``: posted
        now, never waited for by itself (it completes with the coroutine's next sync)."""
        co.cas(node_addr + REV_PTR_OFF, seen, want)
        co.post()
        self.rev_ptr_repairs += 1

    def refresh(self, co, img: NodeImage):
        """Generator: READ the node of ``img`` again and follow it if it is being replaced (an
        image that showed a frozen entry: its header forwards by then)."""
        img = yield from self.read_node(co, img.addr, img.node_type)
        if not img.live:
            img = yield from self.follow(co, img)
        return img

    def follow(self, co, img: NodeImage):
        """Generator: the live node a forwarding header leads to (waiting while it is unwritten)."""
        while True:
            fwd = decode_forward(img.header_word)
            if fwd is None:
                if img.header_word == 0:    # not written yet
                    yield self.retry_ns
                    img = yield from self.read_node(co, img.addr, img.node_type)
                    continue
                return img
            self.forwards_followed += 1
            mn, off, t = fwd
            img = yield from self.read_node(co, gaddr(self.memory_nodes[mn], off), t)

    def upgrade(self, co, img: NodeImage, parent: NodeImage, pslot: int):
        """Generator: replace the full node ``img`` (reached through entry ``pslot`` of
        ``parent``) by one of the next type: allocate it, CAS ``img``'s header to a forwarding
        header naming it (only one upgrader wins), freeze every entry by CAS (one post; a slot
        that changed meanwhile is CASed again with what it holds), WRITE the new node with the
        entries as frozen, CAS the parent entry old -> new. Returns the new node's image, or None
        if another client began replacing ``img`` first."""
        new_type = img.node_type + 1
        naddr = yield from self.alloc_node(co, new_type)
        if self.alloc.reclaim is not None:          # a reused block: "not written yet" needs a zero header
            co.write(naddr + HEADER_OFF, 0)
            yield co.sync()
        fwd = encode_forward(self.mn_of(naddr), gaddr_offset(naddr), new_type)
        h = co.cas(img.addr + HEADER_OFF, img.header_word, fwd)
        yield co.sync()
        if h.value != img.header_word:
            self.cas_failures += 1
            self.alloc.release(gaddr_node(naddr), gaddr_offset(naddr), self.units_for(new_type))
            return None
        entries = yield from self.freeze_entries(co, img)
        hd = img.header
        pe = parent.entry_addr(pslot)
        new = build_node(naddr, new_type, hd.depth, hd.partial, pe, [e for e in entries if e])
        yield from self.write_reachable_node(co, new)
        if failpoints.armed("art.upgrade.written"):
            co.post()                                # the header WRITE goes out; then the client may stop
            failpoint("art.upgrade.written")
        if gaddr_node(naddr) != gaddr_node(pe):
            yield co.sync()                          # another QP: the node lands before its pointer
        self.upgrades += 1
        pv = parent.entries[pslot]
        # a lost parent CAS (the parent being replaced) is harmless: the forwarding header stays
        yield from self.cas_slot(co, parent, pslot, pv, with_partial(self.entry_for(0, naddr, new_type), pv >> 56))
        return new

    def freeze_entries(self, co, img: NodeImage):
        """Generator: CAS every entry of a full node to its frozen form, all in one post, again
        for those that changed under the image, until all are frozen. Returns the entries as they
        were frozen: the node's final contents (no writer can CAS a frozen slot)."""
        final = list(img.entries)
        todo = list(range(len(final)))
        while todo:
            hs = [(i, co.cas(img.entry_addr(i), final[i], freeze_entry(final[i]))) for i in todo]
            yield co.sync()
            todo = []
            for i, h in hs:
                cur = h.value
                if cur != final[i]:
                    self.cas_failures += 1
                    final[i] = cur
                    todo.append(i)
        return final

    def split_prefix(self, co, img: NodeImage, parent: NodeImage, pslot: int, key: bytes, j: int, leaf_addr: int):
        """Generator: ``key`` leaves the partial of ``img`` (reached through entry ``pslot`` of
        ``parent``) at byte ``j``: a new NODE_4 at depth ``j`` with partial ``key[pd+1:j]`` (``pd``
        the parent's depth) takes the node and the new leaf, published by a CAS of the parent
        entry; the node's ``rev_ptr`` then moves by an unsignaled CAS. The address of the new leaf's
        entry if it took, else 0 (the insert runs again)."""
        hd = img.header
        pd = parent.header.depth
        node_byte = hd.partial[j - (hd.depth - len(hd.partial))]
        naddr = yield from self.alloc_node(co, NODE_4)
        pe = parent.entry_addr(pslot)
        pv = parent.entries[pslot]
        mine = self.entry_for(node_byte, img.addr, img.node_type)
        node = build_node(naddr, NODE_4, j, key[pd + 1:j], pe, [mine, self.leaf_entry_for(key[j], leaf_addr)])
        self.write_node(co, node)
        if gaddr_node(naddr) != gaddr_node(pe):
            yield co.sync()
        ok, _ = yield from self.cas_slot(co, parent, pslot, pv, with_partial(self.entry_for(0, naddr, NODE_4), pv >> 56))
        if not ok:
            self.alloc.release(gaddr_node(naddr), gaddr_offset(naddr), self.units_for(NODE_4))
            return 0
        self.prefix_splits += 1
        self.fix_rev_ptr(co, img.addr, img.rev_ptr, node.entry_addr(0))
        return node.entry_addr(1)

    # -- descents ---------------------------------------------------------------------------------
    def descent_start(self, co, key: bytes, cache, use_cache: bool):
        """Generator: ``(image, from cache)``: the deepest cached node for ``key`` (a copy) if
        ``use_cache``, else the root as READ (and cached)."""
        if use_cache and cache is not None:
            hit = cache.lookup(key)
            if hit is not None:
                return hit.copy(), True
        img = yield from self.read_node(co, self.root, NODE_256)
        if cache is not None:
            cache.put(key[:0], img)
        return img, False

    def read_child(self, co, img: NodeImage, slot: int, word: int, img_cached: bool, cache, key: bytes):
        """Generator: READ the child an internal entry points at, follow forwarding, check its
        ``rev_ptr``. Returns the child's image, or None if the cached ``img`` proved stale."""
        d = decode_entry(word)
        child = yield from self.read_node(co, gaddr(self.memory_nodes[d.mn_id], d.addr), d.node_type)
        ea = img.entry_addr(slot)
        if not child.live:
            child = yield from self.follow(co, child)
            # help: point the entry at the replacement (unsignaled; a frozen or changed entry stays)
            co.cas(ea, word, with_partial(self.entry_for(0, child.addr, child.node_type), word >> 56))
            co.post()
        if child.rev_ptr != ea:
            if img_cached:
                self.stale_cache += 1
                depth = img.header.depth
                cache.invalidate(key[:depth], depth)
                return None
            self.fix_rev_ptr(co, child.addr, child.rev_ptr, ea)
            child.rev_ptr = ea
        # cached under the prefix it holds: the key's own bytes only if the child's partial matches
        # them (a child the key leaves at its partial is a prefix split to be, not the key's node; a
        # later walk that found it under this key's prefix would take it for its own: an insert into
        # the wrong subtree)
        if cache is not None and prefix_mismatch(child.header, key) < 0:
            cache.put(key[:child.header.depth], child)
        return child

    def lookup(self, co, key: bytes, cache=None, verify: bool = True):
        """Generator: the global address of ``key``'s leaf, or None. From the deepest cached node
        when a ``cache`` (``RadixCache``) is given; every internal node READ is cached. With
        ``verify`` the leaf's key is read (``leaf_key``) and compared. A walk that started from
        the cache and ends without the key (or meets a stale ``rev_ptr``) is run again from the
        root: a cached image may lack newer entries, so only positive answers are trusted.
        Without ``verify`` the caller compares the key at the leaf, and on a mismatch after a
        cached walk calls again with ``cache=None`` (a stale image can lead to another key's leaf)."""
        got = yield from self.locate(co, key, cache, verify)
        return None if got is None else got.leaf

    def locate(self, co, key: bytes, cache=None, verify: bool = False):
        """Generator: ``lookup`` that returns where the leaf entry is: a ``Located`` (leaf, entry
        address, entry word, whether the walk started from the cache) or None. Without ``verify``
        (the default here) the caller checks the leaf's key; a walk that started from the cache
        may then have led to another key's leaf or to an entry since replaced, so on any doubt
        the caller calls again with ``cache=None``."""
        self.lookups += 1
        key = bytes(key)
        got = yield from self._lookup_once(co, key, cache, verify, True)
        if got is False:
            self.restarts += 1
            got = yield from self._lookup_once(co, key, cache, verify, False)
        return got

    def _lookup_once(self, co, key, cache, verify, use_cache):
        """Generator: a ``Located``, None (not there), or False (a cached walk failed)."""
        img, img_cached = yield from self.descent_start(co, key, cache, use_cache)
        cached_walk = img_cached
        miss = False if cached_walk else None
        while True:
            if not img.live:
                img = yield from self.follow(co, img)
                img_cached = False
            hd = img.header
            if prefix_mismatch(hd, key) >= 0:
                return miss
            slot, word = img.find(key[hd.depth])
            if word == 0:
                return miss
            if is_frozen(word):                      # being replaced: the header forwards
                img, img_cached = (yield from self.refresh(co, img)), False
                continue
            if is_leaf_entry(word):
                leaf = self.target(word)
                if verify and (yield from self.leaf_key(co, leaf)) != key:
                    return miss
                return Located(leaf, img.entry_addr(slot), word, cached_walk)
            child = yield from self.read_child(co, img, slot, word, img_cached, cache, key)
            if child is None:
                return False
            img, img_cached = child, False

    def insert(self, co, key: bytes, leaf_addr: int, cache=None):
        """Generator: enter ``key`` -> the leaf at ``leaf_addr`` (written by the caller, holding
        ``key`` where ``leaf_key`` finds it). Returns an ``InsertResult``: ``(True, leaf_addr,
        entry address)`` once entered, or ``(False, existing leaf, its entry address)`` if the key
        was there (the entry address is what a leaf's own ``rev_ptr`` would hold). Runs again from the root (uncached)
        whenever a step cannot finish where it is (see the module docstring)."""
        if len(key) != KEY_BYTES:
            raise ValueError(f"ART keys are {KEY_BYTES} bytes, got {len(key)}")
        key = bytes(key)
        self.inserts += 1
        use_cache = True
        while True:
            got = yield from self._insert_once(co, key, leaf_addr, cache, use_cache)
            if got is not None:
                return got
            self.restarts += 1
            use_cache = False

    def _insert_once(self, co, key, leaf_addr, cache, use_cache):
        """Generator: the result of ``insert``, or None to run it again from the root."""
        img, img_cached = yield from self.descent_start(co, key, cache, use_cache)
        parent, pslot = None, -1                     # a cached start does not know its parent
        while True:
            if not img.live:
                img = yield from self.follow(co, img)
                img_cached = False
            hd = img.header
            j = prefix_mismatch(hd, key)
            if j >= 0:
                if parent is None:
                    return None
                at = yield from self.split_prefix(co, img, parent, pslot, key, j, leaf_addr)
                return InsertResult(True, leaf_addr, at, self.leaf_entry_for(key[j], leaf_addr)) if at else None
            b = key[hd.depth]
            slot, word = img.find(b)
            if slot < 0:                             # full
                if parent is None:
                    return None
                new = yield from self.upgrade(co, img, parent, pslot)
                if new is None:
                    return None
                img, img_cached = new, False
                continue
            if word == 0:
                ok, _ = yield from self.cas_slot(co, img, slot, 0, self.leaf_entry_for(b, leaf_addr))
                if ok:
                    if cache is not None:
                        cache.put(key[:hd.depth], img)     # the image with the new entry
                    return InsertResult(True, leaf_addr, img.entry_addr(slot), img.entries[slot])
                continue                             # the slot took another entry: look again
            if is_frozen(word):                      # being replaced: the header forwards
                img, img_cached = (yield from self.refresh(co, img)), False
                continue
            if is_leaf_entry(word):
                got = yield from self._at_leaf(co, img, slot, word, key, leaf_addr)
                if got is False:
                    continue                         # the slot changed under us: look again
                return got
            child = yield from self.read_child(co, img, slot, word, img_cached, cache, key)
            if child is None:
                return None
            parent, pslot, img, img_cached = img, slot, child, False

    def _at_leaf(self, co, img, slot, word, key, leaf_addr):
        """Generator: the insert met a leaf entry for its key byte: the key is there, or the old
        leaf and the new one go under a new NODE_4 at the first byte where their keys differ,
        published by a CAS of the slot. Returns the insert's result, None (run again) or False
        (the slot changed: look again)."""
        old_leaf = self.target(word)
        if old_leaf == leaf_addr:
            return InsertResult(True, leaf_addr, img.entry_addr(slot), word)   # this very leaf: already in
        old_key = yield from self.leaf_key(co, old_leaf)
        if old_key == key:
            return InsertResult(False, old_leaf, img.entry_addr(slot), word)
        depth = img.header.depth
        j = first_difference(old_key, key, depth + 1)
        naddr = yield from self.alloc_node(co, NODE_4)
        node = build_node(naddr, NODE_4, j, key[depth + 1:j], img.entry_addr(slot),
                          [with_partial(word, old_key[j]), self.leaf_entry_for(key[j], leaf_addr)])
        self.write_node(co, node)
        if gaddr_node(naddr) != gaddr_node(img.addr):
            yield co.sync()                          # another QP: the node lands before its pointer
        new = with_partial(self.entry_for(0, naddr, NODE_4), key[depth])
        ok, _ = yield from self.cas_slot(co, img, slot, word, new)
        if not ok:
            self.alloc.release(gaddr_node(naddr), gaddr_offset(naddr), self.units_for(NODE_4))
            return False
        self.leaf_splits += 1
        return InsertResult(True, leaf_addr, node.entry_addr(1), node.entries[1])
