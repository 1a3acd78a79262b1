"""ROLEX's data-structure core (nodes/systems/rolex/core.py) against a dict / sorted oracle."""

import bisect

import numpy as np
import pytest

from nodes.systems.rolex import core
from nodes.systems.rolex.core import RolexIndex


def _uniform(n, seed=1):
    rng = np.random.default_rng(seed)
    return np.unique(rng.integers(0, 2**64 - 1, n, dtype=np.uint64, endpoint=False))


def _clustered(n, seed=2):
    """A few hundred clusters with geometric gaps and heavy-tailed sizes, plus lone outliers."""
    rng = np.random.default_rng(seed)
    sizes = np.maximum(1, (rng.pareto(1.2, 300) * 200).astype(np.int64))
    centres = rng.integers(0, 2**63, sizes.size, dtype=np.uint64)
    parts = [
        c + np.cumsum(rng.geometric(0.05, s)).astype(np.uint64) for c, s in zip(centres, sizes)
    ]
    parts.append(rng.integers(0, 2**64 - 1, 200, dtype=np.uint64, endpoint=False))
    keys = np.unique(np.concatenate(parts))
    return keys[:n] if keys.size > n else keys


def _values(keys):
    return (keys * np.uint64(0x9E3779B97F4A7C15)) ^ np.uint64(12345)


_CACHE = {}


def _loaded(name):
    if name not in _CACHE:
        keys = {"uniform": _uniform, "clustered": _clustered}[name](50_000)
        _CACHE[name] = (keys, RolexIndex(keys, _values(keys)))
    return _CACHE[name]


def _absent(keys, n, seed=7):
    rng = np.random.default_rng(seed)
    present = set(keys.tolist())
    cand = rng.integers(0, 2**64 - 1, 3 * n, dtype=np.uint64).tolist()
    # also neighbours of present keys, the hard case for the window
    cand += [k + 1 for k in keys[:: max(1, keys.size // n)].tolist() if k + 1 < 2**64 - 1]
    return [k for k in cand if k not in present][: 2 * n]


@pytest.mark.parametrize("name", ["uniform", "clustered"])
def test_bulk_load_finds_every_key_and_no_absent_one(name):
    keys, idx = _loaded(name)
    assert len(idx) == keys.size
    if name == "clustered":
        assert keys.size > 40_000
    oracle = dict(zip(keys.tolist(), _values(keys).tolist()))
    bound = core.max_candidates()
    assert bound == 3
    counts = []
    for k, v in oracle.items():
        got, cost = idx.search(k)
        assert got == v
        assert cost.synonym_reads == 0 and cost.round_trips == 1
        counts.append(cost.candidates)
    assert max(counts) <= bound
    assert np.mean(counts) <= 2.5  # usually 1 or 2
    for k in _absent(keys, 2000):
        got, cost = idx.search(k)
        assert got is None
        assert cost.candidates <= bound
    assert idx.search(0)[0] == oracle.get(0)


def test_statistics_layout_and_immutability():
    keys, idx = _loaded("uniform")
    st = idx.statistics()
    assert st.keys == keys.size
    assert st.leaves == st.allocated_leaves  # fill 64 and no inserts: no synonym leaves
    assert st.synonym_leaves == 0
    assert st.leaves >= -(-keys.size // 64)
    assert st.memory_bytes == 16 + st.allocated_leaves * (1024 + 8)
    assert st.cache_bytes == st.models * core.MODEL_BYTES + 8 * st.allocated_leaves
    assert core.LEAF_BYTES == 1024 and core.remote_offset(3) == 16 + 3 * 1024
    with pytest.raises(AttributeError):
        st.keys = 0


def _pick(rng, live, lo, hi):
    """Mostly a key that was inserted at some point (maybe deleted since), else any in range."""
    if rng.random() < 0.8:
        return live[int(rng.integers(0, len(live)))]
    return int(rng.integers(lo, hi))


@pytest.mark.parametrize("fill", [64, 48, 60])
def test_mixed_ops_match_dict_with_synonym_overflow(fill):
    rng = np.random.default_rng(fill)
    keys = _uniform(3000, seed=fill)
    # a narrow key universe so that inserts hit existing keys and pile into the same leaves
    lo, hi = int(keys[100]), int(keys[400])
    idx = RolexIndex(keys, _values(keys), fill=fill)
    oracle = dict(zip(keys.tolist(), _values(keys).tolist()))
    live = keys.tolist()
    for step in range(4000):
        op = rng.integers(0, 10)
        if op < 5:
            k = int(rng.integers(lo, hi))
            v = int(rng.integers(0, 2**64, dtype=np.uint64))
            ok, cost = idx.insert(k, v)
            assert ok == (k not in oracle)
            if ok:
                oracle[k] = v
                live.append(k)
                assert cost.leaves_written in (1, 2)
                assert cost.faa == cost.leaves_written - 1 == cost.table_writes
            else:
                assert cost.leaves_written == 0
        elif op < 7:
            k = _pick(rng, live, lo, hi)
            v = int(rng.integers(0, 2**64, dtype=np.uint64))
            ok, cost = idx.update(k, v)
            assert ok == (k in oracle)
            assert cost.leaves_written == int(ok)
            if ok:
                oracle[k] = v
        elif op < 9:
            k = _pick(rng, live, lo, hi)
            ok, cost = idx.delete(k)
            assert ok == (k in oracle)
            oracle.pop(k, None)
        else:
            k = int(rng.integers(lo, hi))
            got, cost = idx.search(k)
            assert got == oracle.get(k)
        assert cost.candidates <= core.max_candidates(fill=fill)
        if step % 500 == 0:
            assert idx.items() == sorted(oracle.items())
    assert len(idx) == len(oracle)
    for k, v in oracle.items():
        assert idx.get(k) == v
    assert idx.items() == sorted(oracle.items())
    st = idx.statistics()
    assert st.synonym_leaves > 0  # overflow happened and chains are live
    assert max(idx.chain_lengths()) >= 2
    # some searches had to follow a chain
    assert any(idx.search(k)[1].synonym_reads > 0 for k in oracle)

    cost = idx.retrain()
    assert cost.leaves_read == st.leaves + st.synonym_leaves
    st2 = idx.statistics()
    assert st2.synonym_leaves == 0 and st2.keys == len(oracle)
    for k, v in oracle.items():
        got, c = idx.search(k)
        assert got == v and c.synonym_reads == 0
    for k in _absent(np.array(sorted(oracle), dtype=np.uint64), 300):
        assert idx.get(k) is None
    assert idx.items() == sorted(oracle.items())
    # and it keeps working after the retrain
    for k in list(oracle)[:200]:
        assert idx.delete(k)[0]
        del oracle[k]
    assert idx.items() == sorted(oracle.items())


def test_delete_everything_in_a_chain_then_reinsert():
    keys = np.arange(1, 1 + 64 * 4, dtype=np.uint64) * 1000
    idx = RolexIndex(keys, keys)
    oracle = dict(zip(keys.tolist(), keys.tolist()))
    # pile 150 keys into the gap after keys[100] (leaf 1): several half-splits, one chain
    new = [int(keys[100]) + 1 + 6 * i for i in range(150)]
    for k in new:
        ok, cost = idx.insert(k, k)
        assert ok
        oracle[k] = k
    chains = idx.chain_lengths()
    assert chains[1] >= 3 and sum(chains) == chains[1]
    assert any(idx.search(k)[1].synonym_reads == chains[1] for k in new)
    # delete the group's keys smallest first: the primary empties again and again and each
    # time its first synonym's pairs move in, so the chain shrinks and every key stays found
    group = sorted(k for k in oracle if keys[64] <= k < keys[128])
    for n, k in enumerate(group):
        ok, cost = idx.delete(k)
        assert ok and cost.leaves_written == 1
        del oracle[k]
        if n % 16 == 0:
            assert idx.items() == sorted(oracle.items())
            assert all(idx.get(x) == x for x in group[n + 1 :])
    assert idx.chain_lengths() == [0, 0, 0, 0]
    assert idx.items() == sorted(oracle.items())
    assert idx.statistics().synonym_leaves == 0
    assert idx.statistics().allocated_leaves > 4  # synonym leaves are not reclaimed (as in ROLEX)
    # the emptied group still takes keys in its range
    assert idx.insert(int(keys[90]), 7)[0] and idx.get(int(keys[90])) == 7
    assert not idx.insert(int(keys[90]), 8)[0]


@pytest.mark.parametrize("name", ["uniform", "clustered"])
def test_range_scan_matches_sorted_oracle(name):
    keys, idx = _loaded(name)
    vals = _values(keys)
    ks = keys.tolist()
    rng = np.random.default_rng(3)
    starts = [0, ks[0], ks[-1], ks[-1] + 1]
    starts += rng.integers(0, 2**64 - 1, 100, dtype=np.uint64).tolist()
    starts += [ks[i] for i in rng.integers(0, len(ks), 100)]
    for s in starts:
        for count in (0, 1, 10, 200):
            out, cost = idx.range_scan(int(s), count)
            i = bisect.bisect_left(ks, int(s))
            exp = list(zip(ks[i : i + count], vals[i : i + count].tolist()))
            assert out == exp
            assert cost.leaves_read >= (1 if count else 0)


def test_small_fill_leaves_headroom_and_more_candidates():
    keys = _uniform(5000, seed=9)
    idx = RolexIndex(keys, keys, fill=16)
    st = idx.statistics()
    assert st.leaves >= -(-keys.size // 16)
    worst = max(idx.search(int(k))[1].candidates for k in keys[::7])
    assert worst <= core.max_candidates(fill=16) == 6
    # a leaf loaded with 16 pairs takes 48 more before it overflows into a synonym leaf
    k0 = int(keys[10])
    for d in range(1, 30):
        assert idx.insert(k0 + d, d)[1].faa == 0
    assert idx.statistics().synonym_leaves == 0


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: RolexIndex([3, 2, 1], [1, 2, 3]), "sorted and unique"),
        (lambda: RolexIndex([1, 2], [1]), "values must match keys"),
        (lambda: RolexIndex([], []), "at least one key"),
        (lambda: RolexIndex([1, 2**64 - 1], [1, 2]), "UINT64_MAX"),
        (lambda: RolexIndex([1, 2], [1, 2], fill=0), "fill must be"),
        (lambda: RolexIndex([1, 2], [1, 2], fill=65), "fill must be"),
        (lambda: RolexIndex([1, 2], [1, 2], eps=0), "eps must be"),
        (lambda: RolexIndex([-1, 2], [1, 2]), "keys must be integers"),
        (lambda: RolexIndex([1, 2], [1, 2]).search(2**64 - 1), "key must be"),
        (lambda: RolexIndex([1, 2], [1, 2]).search(-5), "key must be"),
        (lambda: RolexIndex([1, 2], [1, 2]).insert(3, -1), "value must be"),
        (lambda: RolexIndex([1, 2], [1, 2]).insert(3.0, 1), "key must be"),
        (lambda: RolexIndex([1, 2], [1, 2]).update(True, 1), "key must be"),
        (lambda: RolexIndex([1, 2], [1, 2]).range_scan(1, -1), "count must be"),
        (lambda: RolexIndex([1, 2], [1, 2]).range_scan(2**64, 1), "start must be"),
    ],
)
def test_bad_input_raises_one_clear_value_error(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_retrain_of_empty_index_raises():
    idx = RolexIndex([5], [6])
    assert idx.delete(5)[0]
    assert idx.get(5) is None and idx.items() == []
    with pytest.raises(ValueError, match="empty index"):
        idx.retrain()


def test_keys_below_and_above_every_loaded_key_overflow_the_end_leaves():
    keys = _clustered(20_000, seed=5)
    keys = keys[(keys > 10**6) & (keys < 2**64 - 10**6)]
    idx = RolexIndex(keys, keys)
    oracle = dict(zip(keys.tolist(), keys.tolist()))
    low = list(range(0, 300))
    high = list(range(2**64 - 2, 2**64 - 302, -1))
    for k in low + high:
        ok, cost = idx.insert(k, k + 1)
        assert ok and cost.candidates <= core.max_candidates()
        oracle[k] = k + 1
    chains = idx.chain_lengths()
    assert chains[0] >= 4 and chains[-1] >= 4
    for k in low + high:
        assert idx.get(k) == k + 1
    assert idx.range_scan(0, 5)[0] == [(k, k + 1) for k in range(5)]
    assert idx.items() == sorted(oracle.items())
    idx.retrain()
    assert sum(idx.chain_lengths()) == 0
    assert idx.items() == sorted(oracle.items())
