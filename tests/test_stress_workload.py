"""workloads/stress.py: the checking workload (gets, inserts, updates, deletes over one small key
space). Mix proportions, key range, determinism per (seed, stream_id), zipfian skew, validation,
the CoreWorkload-compatible surface the rack uses, and the insert-sequence bookkeeping."""

from __future__ import annotations

import numpy as np
import pytest

from cluster.stats import OP_KINDS
from nodes import compute
from workloads import generators as g
from workloads.properties import WorkloadError
from workloads.stress import DEFAULT_MIX, OP_DELETE, StressStreamStats, StressWorkload
from workloads.ycsb import OP_INSERT, OP_READ, OP_UPDATE, LocalInsertSequence

N = 200_000


def test_op_codes_agree_with_the_rack():
    assert OP_DELETE == compute.OP_DELETE == 5 and OP_KINDS[OP_DELETE] == "delete"
    assert (OP_READ, OP_UPDATE, OP_INSERT) == (compute.OP_READ, compute.OP_UPDATE, compute.OP_INSERT)


@pytest.mark.parametrize("mix", [None, {"get": 1}, {"insert": 1, "delete": 3}, {"get": 5, "update": 2, "delete": 1}])
def test_mix_proportions(mix):
    wl = StressWorkload(64, mix)
    ops, keys, scans = wl.stream(1, 0).next_batch(N)
    assert ops.dtype == np.int8 and keys.dtype == np.int64 and scans.dtype == np.int32
    assert not scans.any()
    want = dict(DEFAULT_MIX if mix is None else mix)
    total = sum(want.values())
    code = {"get": OP_READ, "insert": OP_INSERT, "update": OP_UPDATE, "delete": OP_DELETE}
    counts = np.bincount(ops, minlength=6)
    for op, c in code.items():
        share = want.get(op, 0) / total
        assert abs(counts[c] / N - share) < 0.006, (op, counts[c] / N, share)
        if share == 0:
            assert counts[c] == 0                       # an op of weight 0 is never drawn
    assert counts[3] == counts[4] == 0                   # no scans, no read-modify-writes
    p = wl.proportions
    assert p.scan == 0 and p.rmw == 0 and abs(sum(p) - 1) < 1e-12
    assert p[OP_DELETE] == p.delete == want.get("delete", 0) / total


def test_keys_stay_in_the_key_space_and_cover_it():
    wl = StressWorkload(64)
    space = set(wl.key_ids().tolist())
    assert len(space) == 64
    _, keys, _ = wl.stream(3, 1).next_batch(20_000)
    assert set(keys.tolist()) == space                   # uniform: every key drawn, no other
    plain = StressWorkload(10, hashed=False)
    assert plain.key_ids().tolist() == list(range(10))
    _, keys, _ = plain.stream(3, 1).next_batch(5000)
    assert keys.min() == 0 and keys.max() == 9
    assert wl.key_id(5) == int(g.fnvhash64(5)) and plain.key_id(5) == 5
    # the load phase inserts part of the same space
    assert wl.load_keys(0, 32).tolist() == wl.key_ids()[:32].tolist()
    assert wl.load_keys(32, 32).tolist() == wl.key_ids()[32:].tolist()
    with pytest.raises(ValueError, match="outside the key space"):
        wl.load_keys(40, 30)


def test_streams_are_deterministic_and_independent():
    wl = StressWorkload(64, distribution="zipfian")
    a = wl.stream(7, 3).next_batch(1000)
    b = wl.stream(7, 3).next_batch(1000)
    assert all((x == y).all() for x, y in zip(a, b))
    other = wl.stream(7, 4).next_batch(1000)
    assert (other[0] != a[0]).any() and (other[1] != a[1]).any()
    seed2 = wl.stream(8, 3).next_batch(1000)
    assert (seed2[1] != a[1]).any()
    # batch size does not matter: 400 + 600 is the same stream as 1000
    s = wl.stream(7, 3)
    parts = [s.next_batch(400), s.next_batch(600)]
    assert (np.concatenate([p[0] for p in parts]) == a[0]).all()
    assert (np.concatenate([p[1] for p in parts]) == a[1]).all()


def test_the_mix_does_not_change_which_keys_are_drawn():
    k1 = StressWorkload(64, {"get": 1}).stream(1, 0).next_batch(500)[1]
    k2 = StressWorkload(64, {"delete": 1, "insert": 1}).stream(1, 0).next_batch(500)[1]
    assert (k1 == k2).all()


def test_zipfian_skew():
    wl = StressWorkload(64, distribution="zipfian", hashed=False)
    _, keys, _ = wl.stream(1, 0).next_batch(N)
    freq = np.bincount(keys, minlength=64) / N
    top = 1 / g.zeta(64, 0.99)                           # P(record 0) of a zipfian over 64 items
    assert abs(freq[0] - top) < 0.01, (freq[0], top)
    assert freq.argmax() == 0 and 1.7 < freq[0] / freq[1] < 2.3          # ~ 2**0.99
    assert freq[:8].sum() > 0.5 and freq[32:].sum() < 0.2
    uni = np.bincount(StressWorkload(64, hashed=False).stream(1, 0).next_batch(N)[1], minlength=64) / N
    assert uni.max() < 1.2 / 64 and uni.min() > 0.8 / 64


def test_inserts_claim_one_insert_sequence_number_each():
    """The compute node acknowledges every insert it performs; the stream claims one number per
    insert so that a LocalInsertSequence (which refuses extra acknowledgements) stays balanced."""
    wl = StressWorkload(16)
    seq = LocalInsertSequence(wl.recordcount)
    s = wl.stream(2, 0, seq)
    ops, _, _ = s.next_batch(300)
    n_ins = int((ops == OP_INSERT).sum())
    assert n_ins > 0 and seq.next() == wl.recordcount + n_ins
    seq.acknowledge(n_ins)                               # balanced: no ValueError
    st = s.statistics()
    assert isinstance(st, StressStreamStats) and st.insert_claims == st.inserts == n_ins
    assert st.ops == 300 and st.gets + st.inserts + st.updates + st.deletes == 300 and st.batches == 1
    with pytest.raises(AttributeError):
        st.ops = 0                                       # an immutable record


def test_interarrivals_follow_the_rate():
    s = StressWorkload(8, target=1e6).stream(1, 0)
    gaps = s.interarrivals_ns(20_000)
    assert abs(gaps.mean() - 1000.0) < 30                 # 1 M ops/s: 1 µs apart on average
    before = StressWorkload(8, target=1e6).stream(1, 0).next_batch(100)
    s.next_batch(0)
    after = s.next_batch(100)                             # arrival draws do not move the op stream
    assert (before[0] == after[0]).all() and (before[1] == after[1]).all()
    with pytest.raises(ValueError, match="rate"):
        StressWorkload(8).stream(1, 0).interarrivals_ns(4)


def test_the_surface_the_rack_uses():
    wl = StressWorkload(64, distribution="zipfian", value_size=48)
    assert (wl.name, wl.recordcount, wl.key_size, wl.value_size, wl.target, wl.expected_new_keys) == \
        ("stress", 64, 8, 48, 0.0, 0)
    assert wl.proportions.scan == 0
    assert wl.describe() == ("stress: 40% get 20% insert 20% update 20% delete, zipfian 0.99, 64 keys "
                             "(inserts and deletes included), 8 B keys, 48 B values")
    kid = wl.key_id(3)
    assert wl.key_bytes(kid) == kid.to_bytes(8, "little")
    v = wl.value_bytes(kid, 99)
    assert len(v) == 48 and v[:16] == kid.to_bytes(8, "little") + (99).to_bytes(8, "little")


@pytest.mark.parametrize("kwargs, match", [
    ({"keys": 0}, "keys"),
    ({"keys": 8, "mix": {"rmw": 1}}, "unknown operation 'rmw'"),
    ({"keys": 8, "mix": {"scan": 1}, "max_scan": 0}, "max_scan"),
    ({"keys": 8, "mix": {"get": -1, "update": 2}}, "must be a finite number >= 0"),
    ({"keys": 8, "mix": {"get": 0}}, "no operation"),
    ({"keys": 8, "distribution": "latest"}, "uniform, zipfian"),
    ({"keys": 8, "value_size": 8}, "carry their write's version"),
    ({"keys": 8, "key_size": 4}, "key_size"),
    ({"keys": 8, "zipfian_constant": 1.5}, "zipfian_constant"),
])
def test_bad_parameters_are_refused(kwargs, match):
    with pytest.raises(WorkloadError, match=match):
        StressWorkload(**kwargs)


def test_mixed_sizes_span_16_to_value_size_and_decode():
    """``mixed_sizes`` (dmrack check --heavy): each write's size is a hash of key and version in
    16..value_size, covering the range, and every such value decodes to its key and version."""
    from workloads.keys import decode_value
    wl = StressWorkload(16, value_size=1000, mixed_sizes=True)
    sizes = [wl.value_size_of(k, v) for k in range(16) for v in range(1, 200)]
    assert min(sizes) >= 16 and max(sizes) <= 1000 and len(set(sizes)) > 900
    assert min(sizes) < 64 and max(sizes) > 960              # one line and sixteen
    assert decode_value(wl.value_bytes(3, 77), 3) == (3, 77)
    assert len(wl.value_bytes(3, 77)) == wl.value_size_of(3, 77)
    assert "16-1000 B values" in wl.describe()
    assert StressWorkload(16, value_size=1000).value_size_of(3, 77) == 1000


# -- scans ---------------------------------------------------------------------------------------

def test_a_mix_without_scans_draws_what_it_drew_before_scans_existed():
    # Pinned: the first ops/keys of the default mix's stream (seed 1, stream 0), recorded before
    # "scan" joined MIX_OPS. A mix that does not name "scan" must not move.
    wl = StressWorkload(64)
    ops, keys, scans = wl.stream(1, 0).next_batch(12)
    assert ops.tolist() == PINNED_OPS and keys.tolist() == PINNED_KEYS and not scans.any()
    with_zero = StressWorkload(64, mix={**DEFAULT_MIX, "scan": 0})
    o2, k2, s2 = with_zero.stream(1, 0).next_batch(12)
    assert o2.tolist() == PINNED_OPS and k2.tolist() == PINNED_KEYS and not s2.any()
    assert with_zero.describe() == wl.describe()


def test_scans_in_the_mix():
    from workloads.stress import OP_SCAN
    wl = StressWorkload(64, mix={"get": 1, "scan": 1}, max_scan=5)
    assert wl.proportions.scan == 0.5 and "50% scan (scans of 1-5)" in wl.describe()
    s = wl.stream(3, 1)
    ops, keys, scans = s.next_batch(4000)
    is_scan = ops == OP_SCAN
    assert 1800 < is_scan.sum() < 2200
    assert set(scans[is_scan].tolist()) == {1, 2, 3, 4, 5} and not scans[~is_scan].any()
    assert set(keys.tolist()) <= set(wl.key_ids().tolist())       # start keys from the key space
    assert s.statistics().scans == int(is_scan.sum())
    # deterministic, and the keys do not depend on the mix
    o2, k2, s2 = wl.stream(3, 1).next_batch(4000)
    assert (o2 == ops).all() and (k2 == keys).all() and (s2 == scans).all()
    assert (StressWorkload(64).stream(3, 1).next_batch(4000)[1] == keys).all()


PINNED_OPS = [0, 0, 5, 5, 1, 1, 1, 0, 0, 0, 0, 5]
PINNED_KEYS = [6053236810108242522, 3464245635730951458, 8873773035044668275, 8164984352168075964,
               4409142221109489457, 6641457628077078866, 1699583181824442426, 5817128907606296834,
               2176826814141900048, 8984750220696046997, 6752434813728457588, 2765047632110736392]
