"""Compiled entry points (shm/kernels.py) and the word copies of a landing (shm/fabric.py):
the same results as the dispatcher and as a plain-Python copy."""

import numpy as np
import pytest
from numba import njit

from shm import fabric as F
from shm.atomics import load_word_at, store_word_at
from numba import typeof

from shm.kernels import entry, type_key


@njit(cache=True)
def _scaled_sum(a, k):
    return a.sum() * k


def test_entry_runs_the_dispatchers_code():
    a = np.arange(10, dtype=np.int64)
    fn = entry(_scaled_sum, a, 3)
    assert fn(a, 3) == _scaled_sum(a, 3) == 135
    assert entry(_scaled_sum, a, 3) is fn          # one entry per signature


def test_type_key_of_an_int_is_numbas_type():
    # the shortcut for ints must name the type numba's typeof gives, at the edges of int64 too
    for v in (0, 1, -1, 2**31, -2**31 - 1, 2**62, 2**63 - 1, -2**63, 2**63, 2**64 - 1):
        assert type_key(v) == typeof(v), v
    assert type_key(True) == typeof(True)           # a bool is not an int64
    assert type_key(1.5) == typeof(1.5)
    big = np.arange(4, dtype=np.uint64)
    fn = entry(_scaled_sum, big, 2**63)             # an int past int64 is uint64: its own entry
    assert fn is not entry(_scaled_sum, big, 3)


def test_host_kernels_are_made_once_per_fabric_and_buffer_type():
    from shm.profile import load_profile
    with F.Fabric.create(load_profile("cx6-200g"), [F.NodeSpec("c0"), F.NodeSpec("m0", "memory", 1 << 20)],
                         private=True) as fab:
        host = fab.memory[0].host
        k = F.host_kernels(fab, host)
        assert F.host_kernels(fab, fab.memory[1].host) is k     # every node's host memory: one type
        assert F.host_kernels(fab, np.zeros(64, np.uint8)) is k  # a thread's buffer of the same type


def test_entry_refuses_a_strided_example():
    a = np.arange(20, dtype=np.int64)[::2]
    with pytest.raises(ValueError, match="C-contiguous"):
        entry(_scaled_sum, a, 1)


@njit(cache=True)
def _copy_by_words(dst, d, src, s, n):
    for w in range(0, n, 8):
        store_word_at(dst, d + w, load_word_at(src, s + w))


def test_word_access_copies_bytes_as_they_are():
    rng = np.random.default_rng(7)
    src = rng.integers(0, 256, 4096, dtype=np.uint8)
    dst = np.zeros(4096, np.uint8)
    _copy_by_words(dst, 64, src, 128, 256)
    assert bytes(dst[64:320]) == bytes(src[128:384])
    assert not dst[:64].any() and not dst[320:].any()


def _mrt_granting_all():
    mrt = np.zeros((2, F.MR_COLS), np.int64)
    key = (1 << 8) | 5
    mrt[0, F.MR_KEY] = key
    mrt[0, F.MR_LENGTH] = 1 << 40
    mrt[0, F.MR_ACCESS] = F.IBV_ACCESS_REMOTE_READ | F.IBV_ACCESS_REMOTE_WRITE
    return mrt, key


def test_reads_and_writes_land_the_bytes_of_a_plain_copy():
    """READs and WRITEs of random offsets and lengths, aligned or not, against slicing."""
    rng = np.random.default_rng(11)
    mrt, key = _mrt_granting_all()
    mem = rng.integers(0, 256, 1 << 14, dtype=np.uint8)
    ref = mem.copy()
    locks = np.zeros(F.LINE_LOCKS, np.int64)
    buf = np.zeros(1 << 12, np.uint8)
    for _ in range(400):
        length = int(rng.integers(1, 300))
        off = int(rng.integers(0, mem.shape[0] - length))
        loff = int(rng.integers(0, buf.shape[0] - length))
        if rng.random() < 0.5:          # aligned words take the word path
            off, loff, length = off & ~7, loff & ~7, max(8, length & ~7)
        if rng.random() < 0.5:
            assert F.remote_read_write(True, mrt, key, 0, off, length, mem, locks, buf, loff, False)
            assert bytes(buf[loff:loff + length]) == bytes(ref[off:off + length])
        else:
            buf[loff:loff + length] = rng.integers(0, 256, length, dtype=np.uint8)
            assert F.remote_read_write(False, mrt, key, 0, off, length, mem, locks, buf, loff, bool(rng.random() < 0.5))
            ref[off:off + length] = buf[loff:loff + length]
            assert bytes(mem) == bytes(ref)
    assert not (locks & 1).any()                 # every seqlock released


def test_a_private_fabric_books_the_same_times_and_refuses_other_processes():
    """Fabric.create(private=True) (a co-located rack) books its calendars with plain loads and
    stores: the same prices as the atomic bookings, and attach() from elsewhere is refused."""
    from shm import nic
    from shm.fabric import Fabric, NodeSpec
    from shm.profile import load_profile

    def times(private):
        with Fabric.create(load_profile("cx6-200g"), [NodeSpec("c0"), NodeSpec("m0", "memory", 1 << 20)],
                           private=private) as fab:
            assert bool(fab.params[nic.P_PRIVATE]) == private
            rows = np.zeros((8, nic.WR_COLS), np.int64)
            rows[:, nic.WR_LEN] = [8, 64, 200, 8, 1000, 8, 16, 8]
            rows[:, nic.WR_OP] = [nic.VERB_READ, nic.VERB_WRITE, nic.VERB_READ, nic.VERB_CAS, nic.VERB_WRITE,
                                  nic.VERB_FAA, nic.VERB_READ, nic.VERB_READ]
            rows[:, nic.WR_OFF] = np.arange(8) * 4096
            qp = nic.new_qp_state(16)
            out = []
            for k in range(50):
                nic.model_post_rows(fab.table, fab.params, fab.descriptors, 0, 1, qp, 0, 700 * k, rows)
                out.append(rows[:, nic.WR_OUT:nic.WR_MODEL_COLS].tolist())
            if private:
                with pytest.raises(ValueError, match="private to the process that created it"):
                    Fabric.attach(fab.describe())
            return out
    assert times(True) == times(False)


def test_retire_and_price_is_retire_then_the_model():
    """nic.retire_and_price (a post's one compiled call) books the same times and leaves the same
    table as nic.retire followed by nic.model_post_rows, with and without completions to retire."""
    from shm import nic
    from shm.fabric import Fabric, NodeSpec
    from shm.profile import load_profile

    def run(fused):
        with Fabric.create(load_profile("cx6-200g"), [NodeSpec("c0"), NodeSpec("m0", "memory", 1 << 20)],
                           private=True) as fab:
            rng = np.random.default_rng(5)
            qp = nic.new_qp_state(16)
            out = []
            for k in range(200):
                n = int(rng.integers(1, 9))
                rows = np.zeros((n, nic.WR_COLS), np.int64)
                rows[:, nic.WR_OP] = rng.choice([nic.VERB_READ, nic.VERB_WRITE, nic.VERB_CAS], n)
                rows[:, nic.WR_LEN] = np.where(rows[:, nic.WR_OP] == nic.VERB_CAS, 8, rng.integers(1, 300, n))
                rows[:, nic.WR_OFF] = rng.integers(0, 1 << 10, n) * 8
                done = int(rng.integers(0, 3)) * n      # completions since the node's last post
                if fused:
                    free = nic.retire_and_price(fab.table, fab.params, fab.descriptors, 0, 1, qp, 0, 500 * k, rows,
                                                done)
                else:
                    if done:
                        nic.retire(fab.table, fab.descriptors[0], done)
                    free = nic.model_post_rows(fab.table, fab.params, fab.descriptors, 0, 1, qp, 0, 500 * k, rows)
                out.append((free, rows[:, nic.WR_OUT:nic.WR_MODEL_COLS].tolist()))
            return out, fab.table.copy()
    (a, table_a), (b, table_b) = run(True), run(False)
    assert a == b and np.array_equal(table_a, table_b)
