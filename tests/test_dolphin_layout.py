"""Dolphin's leaf header and key words, and an ART node's words, parsed with one struct call
(nodes/systems/dolphin/layout.py ``LeafImage``, nodes/systems/lib/art.py ``parse_node``) against the
field-by-field parsing they replaced, on random bytes held as bytes, numpy views and strided arrays."""

import random
import struct

import numpy as np
import pytest

from nodes.systems.dolphin import layout as D
from nodes.systems.lib import art


def ref_leaf_fields(fmt, raw):
    """The fields as ``LeafImage.__init__`` read them before, one by one from a copy."""
    b = bytes(raw[:fmt.keys_end])
    rev_ptr, = struct.unpack_from("<Q", b, 0)
    node_id, last_index = struct.unpack_from("<IH", b, 10)
    return (rev_ptr, b[D.FRONT_OFF], b[D.VALID_OFF], node_id, last_index,
            int.from_bytes(b[D.MIN_OFF:D.MIN_OFF + 8], "big"), int.from_bytes(b[D.MAX_OFF:D.MAX_OFF + 8], "big"),
            list(struct.unpack_from(f"<{fmt.slots}Q", b, D.KEYS_OFF)))


def _holders(raw: bytes, pad: int = 64):
    """The same bytes as bytes, a numpy view into a larger buffer, and a strided (non-contiguous) view."""
    yield raw
    yield np.frombuffer(bytes(pad) + raw + bytes(pad), np.uint8)[pad:pad + len(raw)]
    wide = np.zeros(2 * len(raw), np.uint8)
    wide[::2] = np.frombuffer(raw, np.uint8)
    yield wide[::2]


@pytest.mark.parametrize("value_bytes", sorted({D.RAW_VALUE, 8, 64, 100, 256, 1024}))
@pytest.mark.parametrize("seed", range(6))
def test_leaf_image_fields_match_the_field_by_field_parse(value_bytes, seed):
    fmt = D.LeafFormat.of(value_bytes)
    rng = random.Random(seed * 1009 + value_bytes)
    raw = rng.randbytes(fmt.size)
    for held in _holders(raw):
        img = D.LeafImage(fmt, 0x1234, held, 7)
        got = (img.rev_ptr, img.front, img.valid, img.node_id, img.last_index, img.min, img.max, img.keys)
        assert got == ref_leaf_fields(fmt, held)
        assert img.rear == 7 and img.raw is held
    # only the header and the keys READ (a get's first READ): the same fields
    img = D.LeafImage(fmt, 0x1234, raw[:fmt.keys_end], 7)
    assert img.keys == ref_leaf_fields(fmt, raw)[7]


def test_leaf_image_of_too_few_bytes_raises_as_before():
    fmt = D.LeafFormat.of(D.RAW_VALUE)
    with pytest.raises(struct.error):
        D.LeafImage(fmt, 0, bytes(fmt.keys_end - 1), 0)
    with pytest.raises(struct.error):
        ref_leaf_fields(fmt, bytes(fmt.keys_end - 1))


@pytest.mark.parametrize("node_type", art.NODE_TYPES)
def test_parse_node_matches_unpacking_a_copy(node_type):
    rng = random.Random(node_type)
    for _ in range(5):
        raw = rng.randbytes(art.node_bytes(node_type))
        words = struct.unpack_from(f"<{len(raw) // 8}Q", raw)
        for held in _holders(raw):
            img = art.parse_node(0x40, node_type, held)
            assert (img.addr, img.node_type, img.rev_ptr, img.header_word, img.entries) == \
                   (0x40, node_type, words[0], words[1], list(words[2:]))
