"""The systems library (nodes/systems/lib): every ``python`` block of docs/systems-library.md runs
as written, and the properties the built-in systems rely on hold (RACE's block checksum is the
library's, record arrays lay records out as one-by-one allocation would, torn records are caught)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
DOC = (ROOT / "docs" / "systems-library.md").read_text()
BLOCKS = re.findall(r"```python\n(.*?)```", DOC, re.S)


def test_the_doc_has_examples():
    assert len(BLOCKS) >= 5


@pytest.mark.parametrize("i", range(len(BLOCKS)))
def test_doc_example_runs(i, prefix, monkeypatch):
    import shm.fabric
    real = shm.fabric.Fabric.create.__func__

    def create(cls, *a, **kw):                 # the test's segment prefix, so leaks are caught
        kw.setdefault("prefix", prefix)
        return real(cls, *a, **kw)
    monkeypatch.setattr(shm.fabric.Fabric, "create", classmethod(create))
    exec(compile(BLOCKS[i], f"docs/systems-library.md block {i + 1}", "exec"), {"__name__": "__doc_example__"})


def test_every_library_module_has_a_docstring_saying_why():
    import importlib
    for name in ("hashing", "record", "array", "alloc", "reclaim", "hocl"):
        mod = importlib.import_module(f"nodes.systems.lib.{name}")
        assert mod.__doc__ and len(mod.__doc__) > 200, name
        assert f"`lib.{name}`" in DOC


def test_the_old_copies_are_gone():
    for old in ("race/hashing.py", "race/alloc.py", "reclaim.py", "sherman/hocl.py"):
        assert not (ROOT / "nodes" / "systems" / old).exists(), old


def test_race_blocks_carry_the_library_checksum():
    from nodes.systems.lib.record import checksum
    from nodes.systems.race.layout import check_block, decode_block, encode_block
    key, value = b"k" * 8, b"v" * 40
    raw = encode_block(key, value)
    assert int.from_bytes(raw[4:8], "little") == checksum(key, value)
    assert decode_block(raw) == (key, value)
    buf = np.frombuffer(raw, np.uint8)
    assert check_block(buf, 0, len(raw), np.frombuffer(key, np.uint8)) == len(value)


def test_hash64_is_unchanged():
    from nodes.systems.lib.hashing import hash64, main_buckets
    h = int(hash64(b"user1"))                  # the value race/hashing.py gave before the move
    assert h == 0xCAF672D63552CD57 and int(hash64(b"")) == 0xEFD01F60BA992926
    assert h == int(hash64(np.frombuffer(b"user1", np.uint8)))
    a, b = main_buckets(h, 1000)
    assert 0 <= a < 1000 and 0 <= b < 1000


def test_record_array_matches_one_by_one_allocation(prefix):
    from nodes.systems.lib.array import allocate_array
    from shm.fabric import Fabric, NodeSpec
    from shm.profile import load_profile
    specs = [NodeSpec("cn0"), NodeSpec("mn0", "memory", 1 << 20), NodeSpec("mn1", "memory", 1 << 20),
             NodeSpec("mn2", "memory", 1 << 20)]
    with Fabric.create(load_profile("cx6-200g"), specs, prefix=prefix) as f1, \
            Fabric.create(load_profile("cx6-200g"), specs, prefix=prefix + "b") as f2:
        f1.allocate(1, 100)                       # something already on the first node
        f2.allocate(1, 100)
        arr = allocate_array(f1, [1, 2, 3], 10, 192)
        one_by_one = [(m, f2.allocate(m, 192)) for m in [(i % 3) + 1 for i in range(10)]]
        assert [(arr.node_of(i), arr.offset_of(i)) for i in range(10)] == one_by_one
        assert [arr.per_node(j) for j in range(3)] == [4, 3, 3]
        with pytest.raises(IndexError):
            arr.address_of(10)
        assert not f1.memory[2].host[arr.offset_of(1):arr.offset_of(1) + 192].any()


def test_record_format_limits():
    from nodes.systems.lib.record import RecordFormat
    fmt = RecordFormat(64)
    assert fmt.capacity == 48
    with pytest.raises(ValueError):
        fmt.encode(1, b"x" * 49)
    with pytest.raises(ValueError):
        fmt.encode(0, b"")
    with pytest.raises(ValueError):
        RecordFormat(16)
    raw = fmt.encode(5, b"abc")
    assert RecordFormat.version_of(raw) == 5 and len(raw) == 64
    assert fmt.decode(raw[:10]) is None
