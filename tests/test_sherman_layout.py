"""Sherman's node images and their parsing (nodes/systems/sherman/layout.py) against plain references:
the loops as they were written before the module packed and unpacked whole lines and entries with
one struct call each, compared on random leaves and internal nodes of both leaf formats."""

import random
import struct

import numpy as np
import pytest

from nodes.systems.sherman import layout as L


# -- the references: the byte-by-byte loops ------------------------------------------------------

def ref_leaf_image(nv, low, high, sibling, entries):
    img = bytearray(L.NODE_BYTES)
    L.stamp_lines(img, nv)
    L._header(img, nv, 0, low, high, sibling, len(entries))
    for i, (ev, vlen, key, field) in enumerate(entries, 1):
        L.LINE_HEAD.pack_into(img, i * L.LINE, nv & L.NV_MASK, ev & 0xFF, vlen, L.USED, key)
        img[i * L.LINE + 16:i * L.LINE + 16 + len(field)] = field
    return img


def ref_internal_image(nv, level, low, high, sibling, leftmost, keys, children):
    img = bytearray(L.NODE_BYTES)
    L.stamp_lines(img, nv)
    L._header(img, nv, level, low, high, sibling, len(keys), leftmost)
    for e, (k, c) in enumerate(zip(keys, children)):
        off = (1 + e // 3) * L.LINE + 8 + 16 * (e % 3)
        img[off:off + 8] = k.to_bytes(8, "big")
        struct.pack_into("<Q", img, off + 8, c)
    return img


def ref_leaf_entries(buf, off):
    out = []
    for i in range(1, L.LINES):
        base = off + i * L.LINE
        nv, ev, vlen, eflags, key = L.LINE_HEAD.unpack_from(buf, base)
        if eflags & L.USED:
            out.append((i, int.from_bytes(key, "big"), ev, vlen, key,
                        bytes(buf[base + 16:base + 16 + (12 if vlen == L.OUT_OF_LINE else vlen)])))
    return out


def ref_internal_entries(buf, off, count):
    keys, children = [], []
    for e in range(min(count, L.INTERNAL_KEYS)):
        o = off + (1 + e // 3) * L.LINE + 8 + 16 * (e % 3)
        keys.append(int.from_bytes(buf[o:o + 8], "big"))
        children.append(struct.unpack_from("<Q", buf, o + 8)[0])
    return keys, children


def ref_packed_entry(ev, key, vlen, field, used=True):
    code = 0 if not used else (L.PACKED_OUT if vlen == L.OUT_OF_LINE else vlen + 1)
    fr = (ev & 0xF) | (code << 4)
    body = bytes(key) + bytes(field).ljust(8, b"\0")
    return bytes((fr,)) + body + bytes((fr,))


def ref_packed_leaf_image(nv, low, high, sibling, entries):
    img = bytearray(L.NODE_BYTES)
    L.HEADER.pack_into(img, 0, nv & L.NV_MASK, 0, L.HIGH_INF if high is None else 0, len(entries),
                       low.to_bytes(8, "big"), (high or 0).to_bytes(8, "big"), sibling, 0)
    img[L.PACKED_HEADER:L.PACKED_HEADER + 8] = bytes(8)
    for s, (ev, vlen, key, field) in enumerate(entries):
        e = L.PACKED_HEADER + s * L.PACKED_ENTRY
        img[e:e + L.PACKED_ENTRY] = ref_packed_entry(ev, key, vlen, field)
    struct.pack_into("<I", img, L.PACKED_REAR, nv & L.NV_MASK)
    return img


def ref_packed_entries(buf, off):
    out = []
    for s in range(1, L.PACKED_SLOTS + 1):
        e = off + L.PACKED_HEADER + (s - 1) * L.PACKED_ENTRY
        f = int(buf[e])
        code = f >> 4
        if code:
            key = bytes(buf[e + 1:e + 9])
            vlen = L.OUT_OF_LINE if code == L.PACKED_OUT else code - 1
            field = bytes(buf[e + 9:e + 17]) if vlen == L.OUT_OF_LINE else bytes(buf[e + 9:e + 9 + vlen])
            out.append((s, int.from_bytes(key, "big"), f & 0xF, vlen, key, field))
    return out


# -- random nodes ---------------------------------------------------------------------------------

def _key(rng):
    return rng.getrandbits(64).to_bytes(8, "big")


def _fences(rng):
    low = rng.getrandbits(63)
    return low, (None if rng.random() < 0.3 else low + rng.getrandbits(40) + 1)


def _per_line_entries(rng, n):
    out = []
    for _ in range(n):
        if rng.random() < 0.3:           # out of line: the 12-byte block reference
            vlen, field = L.OUT_OF_LINE, L.REF.pack(rng.getrandbits(56), rng.randrange(49, L.MAX_VALUE))
        else:
            vlen = rng.randrange(0, L.INLINE_VALUE + 1)
            field = rng.randbytes(vlen)
        out.append((rng.randrange(256), vlen, _key(rng), field))
    return out


def _packed_entries(rng, n):
    out = []
    for _ in range(n):
        if rng.random() < 0.3:
            vlen, field = L.OUT_OF_LINE, rng.randbytes(8)
        else:
            vlen = rng.randrange(0, L.PACKED_INLINE + 1)
            field = rng.randbytes(vlen)
        out.append((rng.randrange(256), vlen, _key(rng), field))
    return out


def _with_free_slots(rng, img, first, stride, slots, free_byte):
    """Free some used slots of an image in place (the used flag or code cleared, the rest left as
    it was: a deleted entry's bytes stay in memory)."""
    for s in range(slots):
        if rng.random() < 0.25:
            img[first + s * stride + free_byte] &= 0x0F if free_byte == 0 else 0xFE


# per leaf format: (entries, image, reference image, parsers, reference parse, where the slots are, the byte
# whose clearing frees a slot)
FORMATS = {
    "per-line": (_per_line_entries, L.leaf_image, ref_leaf_image, (L.leaf_entries, L.PerLineLeaf.entries),
                 ref_leaf_entries, L.LINE, L.LINE, L.LEAF_SLOTS, 6),
    "packed": (_packed_entries, L.packed_leaf_image, ref_packed_leaf_image, (L.PackedLeaf.entries,),
               ref_packed_entries, L.PACKED_HEADER, L.PACKED_ENTRY, L.PACKED_SLOTS, 0),
}


def _held(img):
    """The same node as bytes, in a numpy buffer and in a memoryview, at offsets 0, 64 and 128."""
    return ((bytes(img), 0), (np.frombuffer(bytes(64) + bytes(img), np.uint8), 64),
            (memoryview(bytearray(bytes(128) + img)), 128))


@pytest.mark.parametrize("fmt", sorted(FORMATS))
@pytest.mark.parametrize("seed", range(40))
def test_leaf_image_and_entries_match_the_reference(fmt, seed):
    make, image, ref_image, parsers, ref_parse, first, stride, slots, free_byte = FORMATS[fmt]
    rng = random.Random(seed)
    nv, (low, high), sibling = rng.getrandbits(40), _fences(rng), rng.getrandbits(56)
    entries = make(rng, rng.randrange(0, slots + 1))
    img = image(nv, low, high, sibling, entries)
    assert img == ref_image(nv, low, high, sibling, entries)
    _with_free_slots(rng, img, first, stride, slots, free_byte)
    for buf, off in _held(img):
        for parse in parsers:
            assert parse(buf, off) == ref_parse(buf, off)


@pytest.mark.parametrize("seed", range(10))
def test_packed_entry_matches_the_reference(seed):
    rng = random.Random(seed)
    for ev, vlen, key, field in _packed_entries(rng, 20):
        for used in (True, False):
            assert L.packed_entry(ev, key, vlen, field, used) == ref_packed_entry(ev, key, vlen, field, used)


@pytest.mark.parametrize("seed", range(40))
def test_internal_image_and_entries_match_the_reference(seed):
    rng = random.Random(seed)
    n = rng.choice([0, 1, 2, 3, 4, L.INTERNAL_KEYS - 1, L.INTERNAL_KEYS, rng.randrange(L.INTERNAL_KEYS + 1)])
    keys = sorted(rng.getrandbits(64) for _ in range(n))
    children = [rng.getrandbits(64) for _ in range(n)]
    nv, level, (low, high), sibling, leftmost = (rng.getrandbits(40), rng.randrange(1, 8), _fences(rng),
                                                 rng.getrandbits(56), rng.getrandbits(56))
    img = L.internal_image(nv, level, low, high, sibling, leftmost, keys, children)
    assert img == ref_internal_image(nv, level, low, high, sibling, leftmost, keys, children)
    for buf, off in _held(img):
        for count in {n, 0, max(n - 1, 0), L.INTERNAL_KEYS, L.INTERNAL_KEYS + 7}:
            assert L.internal_entries(buf, off, count) == ref_internal_entries(buf, off, count)


def test_an_entry_too_long_for_its_slot_is_refused():
    with pytest.raises(ValueError, match="packed entry"):
        L.packed_entry(1, b"k" * 8, 9, b"v" * 9)
    with pytest.raises(ValueError, match="packed entry"):
        L.packed_entry(1, b"k" * 7, 1, b"v")
    with pytest.raises(ValueError, match="value field"):
        L.leaf_image(1, 0, None, 0, [(1, 49, b"k" * 8, b"v" * 49)])
