"""The Marlin client: Sherman's descent and index cache, Spear-locked leaves, out-of-place items.

What changes from :class:`nodes.systems.sherman.client.ShermanClient` (docs/marlin.md):

* leaves are entered by IDUs under Spear's shared count (FAA +1 with the leaf READ, FAA -1
  unsignaled after the last CAS or WRITE) instead of Sherman's exclusive HOCL lock, so IDUs of one
  leaf run concurrently; only a split (an SMO) drains and excludes them;
* an entry points to an immutable data item; an IDU changes a key by one CAS of that pointer
  (insert: empty or tombstone -> item; update: item -> item; delete: item -> tombstone), and the
  replaced item is retired (epoch-based reclamation, nodes/systems/lib/reclaim.py);
* a get READs the leaf, then the item (2 round trips); a scan READs each item it returns.

Internal nodes, their splits (HOCL-locked, as Sherman's) and the root are Sherman's unchanged.

Verbs with a warm index cache, no contention (a round is one ``sync``; "+" = the same doorbell;
"then" = posted once the round before completed, unsignaled: nothing waits for it;
``tests/test_marlin.py`` asserts these sequences):

=========================  ======================================================  ======
op                         rounds                                                  rounds
=========================  ======================================================  ======
get                        READ leaf | READ item                                   2
update                     WRITE item + FAA +1 + READ leaf | CAS entry, then FAA -1  2
insert (empty entry)       ... | CAS entry, then WRITE key + WRITE hint + FAA -1    2
insert (tombstone entry)   ... | CAS entry + FAA -1                                2
delete                     FAA +1 + READ leaf | CAS entry, then FAA -1             2
scan                       READ leaf | READ its items (one doorbell), per leaf      2/leaf
=========================  ======================================================  ======
"""

from __future__ import annotations

from typing import NamedTuple

from nodes.systems.api import SystemGaveUp
from nodes.systems.lib.record import checksum32
from nodes.systems.lib.spear import Spear
from nodes.systems.sherman.client import CACHED_NODE_BYTES, RETRY_LIMIT, ShermanClient, ShermanStats
from nodes.systems.sherman.layout import LINE, Header, KeySizeError, ValueTooLarge, key_int, key_signed_le
from shm.failpoints import failpoint

from .layout import (
    EMPTY, HINT_SET, ITEM_HEAD, ITEM_HEADER, LEAF_SLOTS, LOCK_OFFSET, MAX_VALUE, TOMBSTONE, hint_offset,
    home_entry, item_image, item_offset, item_parts, item_units, item_word, key_offset, leaf_entries, leaf_image,
    leaf_probe,
)

#: byte offset of each entry's item word in a leaf (index: entry 1..LEAF_SLOTS)
_ITEM_AT = (0,) + tuple(item_offset(e) for e in range(1, LEAF_SLOTS + 1))

#: An item READ through a pointer the reader saw in its leaf cannot change under it (items are
#: immutable and epoch reclamation keeps them until the reader ends), so a wrong key or checksum
#: means a reclamation bug: read again a few times, then stop with one line.
ITEM_RETRIES = 8

MARLIN_FIELDS = (
    "cas_failures",        # entry CASes that found another value (retried, or the key changed)
    "pending_reads",       # item READs to learn the key of an entry bound but not yet keyed
    "idu_waits",           # Spear: IDU entries that met an SMO and backed out
    "smo_conflicts",       # Spear: SMO entries that met another SMO and backed out
    "spin_reads",          # Spear: READs of a lock word while waiting
    "compactions",         # full leaves rewritten without their tombstones instead of split
    "tombstones_dropped",  # deleted entries a split or compaction left out
    "item_mismatches",     # item READs whose key or checksum was wrong (re-read)
)

MarlinStats = NamedTuple("MarlinStats", [(f, int) for f in ShermanStats._fields + MARLIN_FIELDS])


class MarlinClient(ShermanClient):
    NAME = "Marlin"

    def __init__(self, fabric, layout: dict, thread, options: dict):
        budget = int(options.get("cache_bytes", layout.get("cache_bytes", 0)))
        if budget:
            # the sweep of Dolphin's Fig. 6 gives the cache in bytes; the cache counts nodes
            options = dict(options, cache_nodes=budget // CACHED_NODE_BYTES)
        super().__init__(fabric, layout, thread, options)
        self.spear = Spear(self.NAME)
        self.cas_failures = self.pending_reads = self.compactions = self.tombstones_dropped = 0
        self.item_mismatches = 0

    def statistics(self) -> MarlinStats:
        sp = self.spear
        return MarlinStats(*super().statistics(), self.cas_failures, self.pending_reads, sp.idu_waits,
                           sp.smo_conflicts, sp.spin_reads, self.compactions, self.tombstones_dropped,
                           self.item_mismatches)

    # -- items -----------------------------------------------------------------------------------
    def new_item(self, co, key: bytes, value: bytes):
        """Generator: allocate a data item and queue its WRITE (it goes out with the next verbs,
        before the CAS that publishes it); its pointer word."""
        units = item_units(len(value))
        node, off = yield from self.alloc.alloc(co, units)
        co.write(self._nb[node] | off, item_image(key, value))
        self.blocks_written += 1
        return item_word(units, node, off)

    def _item_addr(self, word: int) -> int:
        node, off, _ = item_parts(word)
        return self._nb[node] | off

    def read_items(self, co, words):
        """Generator: READ the items of ``words`` in one doorbell; per word ``(key, value)``, or
        None when the item is not whole (wrong checksum or length)."""
        handles = []
        for w in words:
            node, off, units = item_parts(w)
            handles.append(co.read(self._nb[node] | off, units * LINE))
        yield co.sync()
        out = []
        for w, h in zip(words, handles):
            self.thread.cpu(self._line_ns * (w >> 56))
            key, length, check = ITEM_HEAD.unpack_from(h.data, 0)
            if ITEM_HEADER + length > h.length or checksum32(h.data, 0, 8, h.data, ITEM_HEADER, length) != check:
                out.append(None)
            else:
                out.append((key, h.data[ITEM_HEADER:ITEM_HEADER + length].tobytes()))
        return out

    def _word(self, off: int, e: int) -> int:
        """Entry ``e``'s item word in the leaf snapshot at ``off``."""
        return int(self._b64[(off + _ITEM_AT[e]) >> 3]) & ((1 << 64) - 1)

    @staticmethod
    def _key_entry(co, addr: int, e: int, key: bytes) -> None:
        """Queue the WRITEs that key entry ``e`` of the leaf at ``addr``: its key, then its hint
        (RC keeps their order, and both are in one line: a reader that sees the hint sees the key)."""
        co.write(addr + key_offset(e), key)
        co.write(addr + hint_offset(e), HINT_SET)

    def resolve_pending(self, co, off: int, pending: int, key: bytes):
        """Generator: among the pending entries (bit e-1: entry e) of the snapshot at ``off``, the
        one bound to ``key``, found by READing their items' keys: ``(entry, item word)``, or
        ``(0, EMPTY)``."""
        lines = [i for i in range(1, LEAF_SLOTS + 1) if pending >> (i - 1) & 1]
        words = [self._word(off, i) for i in lines]       # before the yield reuses the buffer
        handles = [co.read(self._item_addr(w), 8) for w in words]
        yield co.sync()
        self.pending_reads += len(lines)
        for i, w, h in zip(lines, words, handles):
            if h.data[:8].tobytes() == key:
                return i, w
        return 0, EMPTY

    # -- get ---------------------------------------------------------------------------------------
    def leaf_get(self, co, key: bytes, k: int):
        ks = key_signed_le(key)
        home = home_entry(k)
        addr, parent, _ = yield from self.find_node(co, k, 0)
        mismatches = 0
        for _ in range(RETRY_LIMIT):
            addr, parent, off, hd = yield from self.covering_leaf(co, k, addr, parent)
            r = leaf_probe(self._b64, off >> 3, ks, home)
            entry, pending = r & 0xFF, r >> 16
            if entry:
                word = self._word(off, entry)
                if word == TOMBSTONE:
                    return None
                words = [word]
            elif pending:
                words = [self._word(off, i) for i in range(1, LEAF_SLOTS + 1) if pending >> (i - 1) & 1]
                self.pending_reads += len(words)
            else:
                return None
            items = yield from self.read_items(co, words)
            for it in items:
                if it is not None and it[0] == key:
                    return it[1]
            if entry or None in items:
                mismatches = self._mismatch(key, mismatches)
                continue
            return None
        raise SystemGaveUp(f"{self.NAME}: get of key {key!r} did not settle after {RETRY_LIMIT} tries")

    def _mismatch(self, key: bytes, seen: int) -> int:
        self.item_mismatches += 1
        if seen + 1 >= ITEM_RETRIES:
            raise SystemGaveUp(f"{self.NAME}: the item an entry of key {key!r} points to holds another key or a "
                               f"torn value {ITEM_RETRIES} times in a row: an item was reused while linked")
        return seen + 1

    # -- IDUs under Spear --------------------------------------------------------------------------
    def enter_leaf(self, co, k: int, addr: int, parent: int):
        """Generator: FAA +1 on the lock of the leaf covering ``k`` with the leaf's READ (in one
        doorbell), backing out of SMOs and moving along the B-link as needed; ``(addr, parent,
        off)``: the leaf entered and its snapshot."""
        spear = self.spear
        for _ in range(RETRY_LIMIT):
            lock = addr + LOCK_OFFSET
            h = spear.queue_idu_enter(co, lock)
            off = yield from self.read_node(co, addr)
            if not spear.idu_entered(h):
                yield from spear.idu_back_off(co, lock)
                continue
            failpoint("marlin.idu.entered")
            hd = Header(self._mv, off)
            move = self.moved(hd, k)
            if move == 0:
                return addr, parent, off
            spear.queue_idu_exit(co, lock)
            addr, parent = yield from self.move_to(co, k, hd, move, parent)
        raise SystemGaveUp(f"{self.NAME}: no leaf for key {k:#x} after {RETRY_LIMIT} tries")

    def _modify(self, co, key, value, kind: str):
        """Generator: insert / update / delete by CAS of the key's entry, inside Spear's IDU count."""
        if type(key) is not bytes:
            key = bytes(key)
        k = key_int(key)
        self.thread.cpu(self._op_ns)
        ks = key_signed_le(key)
        home = home_entry(k)
        word = 0                                  # the new item (insert, update)
        if value is not None:
            if type(value) is not bytes:
                value = bytes(value)
            if len(value) > MAX_VALUE:
                raise ValueTooLarge(f"Marlin values are at most {MAX_VALUE} bytes; got {len(value)}")
            word = yield from self.new_item(co, key, value)
        spear = self.spear
        addr, parent, _ = yield from self.find_node(co, k, 0)
        held = False
        for _ in range(RETRY_LIMIT):
            if held:                              # still inside: the leaf cannot split under us
                off = yield from self.read_node(co, addr)
            else:
                addr, parent, off = yield from self.enter_leaf(co, k, addr, parent)
                held = True
            lock = addr + LOCK_OFFSET
            r = leaf_probe(self._b64, off >> 3, ks, home)
            entry, free, pending = r & 0xFF, (r >> 8) & 0xFF, r >> 16
            cur = self._word(off, entry) if entry else EMPTY
            keyed = True
            if not entry and pending:
                entry, cur = yield from self.resolve_pending(co, off, pending, key)
                keyed = False
            present = bool(entry) and cur != TOMBSTONE
            if kind == "insert":
                if present:
                    spear.queue_idu_exit(co, lock)
                    self._unpublished(word)
                    return False
                if entry:                         # the key's tombstone: its entry takes it back
                    failpoint("marlin.item.written")
                    c = co.cas(addr + _ITEM_AT[entry], TOMBSTONE, word)
                    spear.queue_idu_exit(co, lock)
                    yield co.sync()
                    if c.value == TOMBSTONE:
                        return True
                    self.cas_failures += 1        # re-inserted by another client first
                    self._unpublished(word)
                    return False
                if not free:
                    if (yield from self.split_leaf(co, addr, lock, key, k, word)):
                        return True
                    held = False
                    addr, parent, _ = yield from self.find_node(co, k, 0)
                    continue
                failpoint("marlin.item.written")
                c = co.cas(addr + _ITEM_AT[free], EMPTY, word)
                yield co.sync()
                if c.value != EMPTY:              # another insert bound it: look again
                    self.cas_failures += 1
                    continue
                self._key_entry(co, addr, free, key)
                spear.queue_idu_exit(co, lock)
                return True
            if not present:
                spear.queue_idu_exit(co, lock)
                self._unpublished(word)
                return False
            slot = addr + _ITEM_AT[entry]
            if kind == "delete":
                new = TOMBSTONE
                if not keyed:                     # a tombstone must carry its key (it has no item)
                    self._key_entry(co, addr, entry, key)
            else:
                new = word
                failpoint("marlin.item.written")
            for _ in range(RETRY_LIMIT):
                c = co.cas(slot, cur, new)
                yield co.sync()
                if c.value == cur:
                    break
                self.cas_failures += 1
                cur = c.value
                if cur == TOMBSTONE:              # deleted meanwhile: the key is gone
                    spear.queue_idu_exit(co, lock)
                    self._unpublished(word)
                    return False
            else:
                raise SystemGaveUp(f"{self.NAME}: {kind} of key {key!r}: entry CAS lost {RETRY_LIMIT} times")
            spear.queue_idu_exit(co, lock)
            if self.fault == "retire-new-item" and word:
                cur = word                        # the deliberate bug: the live item is reused
            self.alloc.retire(*item_parts(cur))
            return True
        raise SystemGaveUp(f"{self.NAME}: {kind} of key {key!r} did not settle after {RETRY_LIMIT} tries")

    def _unpublished(self, word: int) -> None:
        if word:
            self.alloc.release(*item_parts(word))

    # -- the SMO: a leaf split under Spear -----------------------------------------------------------
    def split_leaf(self, co, addr: int, lock: int, key: bytes, k: int, word: int):
        """Generator (inside an IDU of the full leaf at ``addr``): turn the IDU into an SMO, wait
        for the other IDUs to drain, then rewrite the leaf with the new entry ``key`` -> ``word``:
        without its tombstones if that makes room, else split in two (the right half written
        first, then the left half, bytes ``[0, LOCK_OFFSET)``, with the release in its doorbell)
        and insert the separator one level up. False (nothing held, nothing written) if another
        SMO had the leaf or the leaf no longer needs this split: the caller starts over."""
        spear = self.spear
        if not (yield from spear.smo_enter(co, lock, inside_idu=True, drain=self.fault != "smo-skips-drain")):
            return False
        failpoint("marlin.split.drained")
        off = yield from self.read_node(co, addr)
        hd = Header(self._mv, off)
        live = []
        dropped = 0
        for _, keyed, kb, w in leaf_entries(self._mv, off):
            if w == TOMBSTONE:
                dropped += 1
                continue
            if not keyed or kb == key:
                # an IDU that bound an entry writes its key before it leaves, and the key was
                # absent with no empty entry when we came: neither can happen; start over
                spear.queue_smo_exit(co, lock, True)
                return False
            live.append((int.from_bytes(kb, "big"), kb, w))
        if len(live) + dropped < LEAF_SLOTS:      # an entry emptied? cannot happen either
            spear.queue_smo_exit(co, lock, True)
            return False
        live.append((k, key, word))
        live.sort()
        self.thread.cpu(self._node_ns)
        self.tombstones_dropped += dropped
        if len(live) <= LEAF_SLOTS:
            co.write(addr, leaf_image(hd.nv + 1, hd.low, hd.high, hd.sibling,
                                      [(kb, w) for _, kb, w in live])[:LOCK_OFFSET])
            spear.queue_smo_exit(co, lock, True)
            self.compactions += 1
            # the insert is in this WRITE only: it may not return before the WRITE landed, or a
            # get that starts after it returned can READ the leaf without the key (a window of
            # nanoseconds in calm timing, of microseconds when the WRITE's way is slow)
            yield co.sync()
            return True
        half = len(live) // 2
        sep = live[half][0]
        new = yield from self.new_node(co)
        co.write(new, leaf_image(1, sep, hd.high, hd.sibling, [(kb, w) for _, kb, w in live[half:]]))
        yield co.sync()                           # the right leaf exists before anyone can reach it
        failpoint("marlin.split.right_written")
        co.write(addr, leaf_image(hd.nv + 1, hd.low, sep, new, [(kb, w) for _, kb, w in live[:half]])[:LOCK_OFFSET])
        spear.queue_smo_exit(co, lock, True)
        self.leaf_splits += 1
        yield from self.insert_internal(co, sep, new, 1)
        return True

    # -- scans ---------------------------------------------------------------------------------------
    def _scan(self, co, start: bytes, count: int):
        begun = yield from self.begin_scan(co, start, count)
        if begun is None:
            return []
        start, cursor, addr, parent = begun
        out: list = []
        mismatches = 0
        for _ in range(RETRY_LIMIT):
            addr, parent, off, hd = yield from self.covering_leaf(co, cursor, addr, parent)
            ents = leaf_entries(self._mv, off)
            self.thread.cpu(self._node_ns)
            need = count - len(out)
            keyed = sorted((kb, w) for _, h, kb, w in ents if h and w != TOMBSTONE
                           and int.from_bytes(kb, "big") >= cursor)[:need]
            pend = [w for _, h, kb, w in ents if not h and w != TOMBSTONE]
            self.pending_reads += len(pend)
            words = [w for _, w in keyed] + pend
            items = (yield from self.read_items(co, words)) if words else []
            if any(it is None for it in items) or any(it[0] != kb for it, (kb, _) in zip(items, keyed)):
                mismatches = self._mismatch(start, mismatches)
                continue
            got = items[:len(keyed)] + [it for it in items[len(keyed):] if int.from_bytes(it[0], "big") >= cursor]
            got.sort(key=lambda kv: kv[0])
            out.extend(got[:need])
            if len(out) >= count or hd.high is None or not hd.sibling:
                return out
            cursor, addr, parent = hd.high, hd.sibling, 0
        raise SystemGaveUp(f"{self.NAME}: scan from {start!r} did not settle after {RETRY_LIMIT} leaves")


__all__ = ["MarlinClient", "MarlinStats", "MARLIN_FIELDS", "KeySizeError", "ValueTooLarge"]
