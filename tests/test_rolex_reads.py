"""What one ROLEX operation READs: bytes and verbs per GET (and UPDATE), co-located, in virtual time.

ROLEX's code READs every leaf of the model's window *whole*: the authors' ``search_asyn``
(iotlpf/ROLEX, ``rolex/learned_cache.hpp``) turns the prediction's [pos - eps, pos + eps + 2] into
leaf numbers (``submodel.hpp``: lo / 64, hi / 64) and READs ``sizeof(leaf_t)`` for each, and the
reproduction CHIME (SOSP'24) ran as its ROLEX baseline (River861/ROLEX, ``src/Rolex.cpp``,
``fetch_nodes``) READs ``transLeafSize`` for every leaf in [l, r] as well; neither READs a window
of entries within a leaf. So the bytes of a GET are (leaves of the window) x (leaf bytes) + the
home leaf's 8-byte meta word, and the leaf's span sets them: 64 keys (1 KiB, the authors' code)
or 16 (CHIME's runs). The keys here are evenly spaced, so the model predicts every key's rank
exactly and each key's window is known: rank r covers [r - eps - 1, r + eps].
"""

from __future__ import annotations

import pytest

from cluster.correctness.conformance import rig
from nodes.systems.rolex import RolexSystem

N = 640                     # ten 64-key leaves, forty 16-key leaves, one model (the keys are linear)
META = 8


def _key(rank: int, offset: int = 0) -> bytes:
    return (1000 * rank + 1000 + offset).to_bytes(8, "big")


def _value(rank: int, size: int) -> bytes:
    return rank.to_bytes(8, "little") * (size // 8)


def _measure(options: dict, ops, value_size: int = 8):
    """Per operation of ``ops`` ((kind, rank, offset)): (result, bytes READ, verbs, candidate
    leaves, virtual ns), on one memory node after a bulk load and a warm-up GET (the learned cache)."""
    out = []
    with rig(RolexSystem, options=options, memory_nodes=1, capacity=4 * N) as r:
        RolexSystem.bulk_load(r.fabric, r.layout, [(_key(i), _value(i, value_size)) for i in range(N)])
        c, co, th = r.client, r.co, r.threads[0]

        def body():
            yield from c.get(co, _key(0))                     # fetches the model table once
            for kind, rank, offset in ops:
                s0, v0, t0 = c.statistics(), th.statistics().verbs, r.env.now
                if kind == "get":
                    got = yield from c.get(co, _key(rank, offset))
                else:
                    got = yield from c.update(co, _key(rank, offset), _value(rank + 1, value_size))
                s1 = c.statistics()
                out.append((got, s1.read_bytes - s0.read_bytes, th.statistics().verbs - v0,
                            s1.candidate_leaves - s0.candidate_leaves, r.env.now - t0))
        r.run(body())
    return out


def test_a_get_reads_every_leaf_of_its_window_whole():
    """ROLEX's defaults (64-key leaves, eps 32): a window of 66 ranks always crosses a leaf
    boundary inside a model, so an interior key READs 2 leaves (3 when it starts on a leaf's last
    slot); one verb per leaf plus the meta word, inline values: no more."""
    (mid, b2, v2, w2, t2), (_, b3, v3, w3, t3), (head, b1, v1, w1, _) = _measure(
        {"values": "inline"}, [("get", 95, 0), ("get", 96, 0), ("get", 31, 0)])
    assert mid == _value(95, 8) and head == _value(31, 8)
    assert (w2, b2, v2) == (2, 2 * 1024 + META, 3)          # [62, 127]: leaves 0 and 1
    assert (w3, b3, v3) == (3, 3 * 1024 + META, 4)          # [63, 128]: leaves 0, 1 and 2
    assert (w1, b1, v1) == (1, 1024 + META, 2)              # clamped at the model's first rank
    assert t3 > t2                                          # the third KiB costs link time


def test_a_narrow_window_in_the_middle_of_a_leaf_reads_one_leaf():
    """eps 4: a key in the middle of a leaf READs that leaf alone; one near a boundary, two."""
    (mid, b1, v1, w1, t1), (edge, b2, v2, w2, t2) = _measure(
        {"values": "inline", "eps": 4}, [("get", 100, 0), ("get", 62, 0)])
    assert mid == _value(100, 8) and edge == _value(62, 8)
    assert (w1, b1, v1) == (1, 1024 + META, 2)              # [95, 104] in leaf 1
    assert (w2, b2, v2) == (2, 2 * 1024 + META, 3)          # [57, 66] crosses from leaf 0 to 1
    assert t2 > t1


def test_chime_s_configuration_reads_three_or_four_small_leaves():
    """16-key leaves (256 B) and eps 16, as CHIME ran ROLEX: a 34-rank window spans 3 leaves,
    4 when it starts past a leaf's third slot; a GET READs 776 or 1,032 bytes."""
    (a, b3, v3, w3, _), (b, b4, v4, w4, _) = _measure(
        {"values": "inline", "span": 16, "eps": 16}, [("get", 100, 0), ("get", 96, 0)])
    assert a == _value(100, 8) and b == _value(96, 8)
    assert (w3, b3, v3) == (3, 3 * 256 + META, 4)           # [83, 116]: leaves 5, 6, 7
    assert (w4, b4, v4) == (4, 4 * 256 + META, 5)           # [79, 112]: leaves 4 to 7


@pytest.mark.parametrize("values", ["inline", "out-of-line"])
def test_a_missing_key_reads_its_window_and_no_value(values):
    """A key between two loaded ones: the same window, no hit, no value block READ."""
    size = 8 if values == "inline" else 40
    (miss, bm, vm, wm, _), (hit, bh, vh, wh, _) = _measure(
        {"values": values}, [("get", 95, 500), ("get", 95, 0)], value_size=size)
    assert miss is None and hit == _value(95, size)
    assert wm in (2, 3) and (bm, vm) == (wm * 1024 + META, wm + 1)
    extra = (0, 0) if values == "inline" else (size, 1)     # the hit's value block: one more READ
    assert (bh, vh) == (wh * 1024 + META + extra[0], wh + 1 + extra[1])


def test_an_update_reads_the_same_window_under_the_lock():
    """UPDATE (inline): CAS the lock with the window's READs and the meta word, then WRITE the
    leaf and its meta and CAS the lock free: W + 5 verbs, the GET's bytes READ."""
    (ok, b, v, w, _), (got, *_rest) = _measure({"values": "inline"}, [("update", 95, 0), ("get", 95, 0)])
    assert ok is True and got == _value(96, 8)
    assert (w, b, v) == (2, 2 * 1024 + META, 2 + 5)


def test_a_bad_span_or_fill_is_one_clear_line():
    with pytest.raises(ValueError, match="span .* even"):
        RolexSystem.check_options({"span": 15}, "here")
    with pytest.raises(ValueError, match="fill = 32 is above the span"):
        RolexSystem.check_options({"span": 16, "fill": 32}, "here")
