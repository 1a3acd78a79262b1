"""``co.read_many``: the same READs as ``co.read`` per address, priced, landed and completed alike.

Every test runs one workload twice, once queueing READs with ``read_many`` and once with ``read``
per address, and asks for the same run: the same virtual times, bytes, statuses and errors, the
same memory image and the same fabric table (every calendar booked alike)."""

from __future__ import annotations

import hashlib
import random

import numpy as np
import pytest

from shm import nic
from shm.coro import DEFER_MIN, Reads, RemoteAccessError
from shm.deferred import defer_reads
from shm.fabric import gaddr
from shm.readmany import ONE_LINE_HOST, pack_reads_entry, pack_reads_py
from shm.smart import SmartConfig
from tests.test_coro import MN, new_fabric, setup

SPAN = 4096


def workload(prefix, *, many: bool, seed: int, defer: bool = True, coroutines: int = 9, batches: int = 30,
             smart=None, buffer_bytes: int = 64 << 10) -> tuple:
    """``coroutines`` clients on 3 threads post random batches on ``SPAN`` bytes: blocks of READs
    (8 bytes, several lines, a few past the memory region, now and then after a fence or beside
    WRITEs, CASes and FAAs), each block queued with ``read_many`` if ``many`` else READ by READ."""
    with new_fabric(prefix, mem=1 << 20) as fab:
        defer_reads(fab, defer)
        env, node = setup(fab, buffer_bytes=buffer_bytes, smart=smart)
        base = fab.allocate("m0", SPAN)
        threads = [node.thread() for _ in range(3)]
        seen = []

        def block(rng):
            """(addresses, length) of one block of READs."""
            n = rng.choice([1, 2, DEFER_MIN - 1, DEFER_MIN, 8, 8, 16])
            kind = rng.random()
            if kind < 0.1:
                length = rng.randint(65, 200)
                return [gaddr(MN, base + rng.randrange(SPAN - 256)) for _ in range(n)], length
            addrs = [gaddr(MN, base + 8 * rng.randrange(SPAN // 8)) for _ in range(n)]
            if kind < 0.15:
                addrs[rng.randrange(n)] = gaddr(MN, (1 << 20) + 64)     # out of the MR: fails
            return addrs, 8

        def client(k, co):
            rng = random.Random(seed * 1000 + k)
            for b in range(batches):
                yield rng.randrange(0, 300)
                got = []
                for _ in range(rng.randint(1, 3)):
                    r = rng.random()
                    if rng.random() < 0.1:
                        co.fence()
                    if r < 0.6:
                        addrs, length = block(rng)
                        if many:
                            got.append(("reads", co.read_many(addrs, length)))
                        else:
                            got.append(("reads", [co.read(a, length) for a in addrs]))
                    elif r < 0.8:
                        got.append(("write", co.write(gaddr(MN, base + 8 * rng.randrange(SPAN // 8)),
                                                      rng.getrandbits(64))))
                    elif r < 0.9:
                        got.append(("cas", co.cas(gaddr(MN, base + 8 * rng.randrange(SPAN // 8)),
                                                  rng.getrandbits(2), rng.getrandbits(64))))
                    else:
                        got.append(("faa", co.faa(gaddr(MN, base + 8 * rng.randrange(SPAN // 8)), 3)))
                try:
                    yield co.sync()
                    err = None
                except RemoteAccessError as e:
                    err = str(e)
                seen.append((k, b, env.now, err, [_outcome(kind, h) for kind, h in got]))

        for k in range(coroutines):
            env.process(client(k, threads[k % 3].coroutine()))
        env.run()
        image = hashlib.sha256(bytes(fab.memory[MN].host[base:base + SPAN])).hexdigest()
        table = hashlib.sha256(fab.table.tobytes()).hexdigest()
        return env.now, image, table, sorted(seen, key=lambda s: (s[0], s[1]))


def _outcome(kind, h):
    if kind == "reads":
        if isinstance(h, Reads):
            return [(h.status[i], h.offsets[i], bytes(h.data(i))) for i in range(len(h))]
        return [(x.status, x.offset, bytes(x.data)) for x in h]
    return kind, h.status, h.value


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_read_many_runs_as_reads_one_by_one(prefix, seed):
    ref = workload(prefix, many=False, seed=seed)
    got = workload(prefix, many=True, seed=seed)
    assert got[:3] == ref[:3]
    for a, b in zip(got[3], ref[3]):
        assert a == b
    assert any(s[3] for s in ref[3]), "no batch failed: the out-of-region READ never ran"


def test_read_many_agrees_without_deferral_throttled_and_with_a_wrapping_buffer(prefix):
    for kw in ({"defer": False}, {"smart": SmartConfig(throttle="fixed", c_max=4)}, {"buffer_bytes": 2048}):
        assert workload(prefix, many=True, seed=5, batches=15, **kw) == \
            workload(prefix, many=False, seed=5, batches=15, **kw), kw


def _words(fab, n: int, first: int):
    """A coroutine and ``n`` words of m0 holding ``first``, ``first + 1``, ...: (env, co, base)."""
    env, node = setup(fab)
    base = fab.allocate("m0", 4096)
    for i in range(n):
        fab.memory[MN].host64[base // 8 + i] = first + i
    return env, node.thread().coroutine(), base


def test_a_block_posted_alone_is_deferred_whole(prefix):
    """The fast path is taken: the block's own rows go to the deferred READs, and its READs land
    by its completion (a block of DEFER_MIN one-line READs, nothing else queued)."""
    with new_fabric(prefix, mem=1 << 20) as fab:
        env, co, base = _words(fab, 16, 1000)

        def client():
            reads = co.read_many([gaddr(MN, base + 8 * i) for i in range(16)], 8)
            assert co.queued == 16
            yield co.sync()
            return reads

        p = env.process(client())
        env.run()
        reads = p.value
        assert reads.ok and [reads.value(i) for i in range(16)] == [1000 + i for i in range(16)] == reads.values()
        assert co._dr.batches == 1
        assert reads[3].value == 1003 and reads[3].ok


def test_read_many_refuses_what_is_not_a_list_of_addresses_and_a_length(prefix):
    with new_fabric(prefix) as fab:
        env, node = setup(fab)
        co = node.thread().coroutine()
        a = gaddr(MN, 0)
        with pytest.raises(TypeError, match="read_many: addresses"):
            co.read_many([float(a)], 8)
        with pytest.raises(TypeError, match="read_many: addresses"):
            co.read_many(np.zeros((2, 2), np.int64), 8)
        with pytest.raises(ValueError, match="length must be a positive"):
            co.read_many([a], 0)
        with pytest.raises(ValueError, match="length must be a positive"):
            co.read_many([a], True)
        with pytest.raises(ValueError, match=r"address -64 \(index 1\) is negative"):
            co.read_many([a, -64], 8)
        assert co.queued == 0
        assert len(co.read_many([], 8)) == 0 and co.queued == 0


def test_addresses_as_arrays_and_unsigned(prefix):
    with new_fabric(prefix) as fab:
        env, node = setup(fab)
        base = fab.allocate("m0", 4096)
        fab.memory[MN].host64[base // 8 + 5] = 77
        co = node.thread().coroutine()

        def client():
            a = np.array([gaddr(MN, base + 40)] * 4, np.uint64)
            r1 = co.read_many(a, 8)
            r2 = co.read_many(a.astype(np.int64)[::-1], 8)    # strided: copied
            yield co.sync()
            return r1, r2

        p = env.process(client())
        env.run()
        assert all(r.ok and r.value(3) == 77 and r.values() == [77] * 4 for r in p.value)


def test_the_compiled_packing_agrees_with_its_reference_on_random_blocks():
    rng = np.random.default_rng(3)
    pack = pack_reads_entry()
    for _ in range(300):
        n = int(rng.integers(1, 12))
        nodes = rng.integers(0, 3, size=n) if rng.random() < 0.3 else np.full(n, int(rng.integers(0, 4000)))
        regions = rng.integers(0, 2, size=n) if rng.random() < 0.2 else np.zeros(n, np.int64)
        offs = rng.integers(0, 1 << 20, size=n)
        addrs = (nodes.astype(np.uint64) << np.uint64(52)) | (regions.astype(np.uint64) << np.uint64(48)) \
            | offs.astype(np.uint64)
        a = addrs.view(np.int64)
        length = int(rng.integers(1, 100))
        flags = int(rng.choice([0, nic.FLAG_FENCE]))
        ref = np.full((n, nic.WR_COLS), 7, np.int64)
        got = ref.copy()
        r = pack_reads_py(ref, a, length, 128, 128, flags)
        assert pack(got, a, length, 128, 128, flags) == r
        if r >= 0:
            assert (got == ref).all()
            one_line = all(reg == 0 and (o & 63) + length <= 64 for reg, o in zip(regions, offs))
            assert (r >= ONE_LINE_HOST) == one_line


def test_a_few_reads_and_a_block_posted_with_a_write_read_as_reads_do(prefix):
    """Below DEFER_MIN the READs are queued one by one (handles), and a block queued beside a
    WRITE becomes handles at the post: both answer through the same Reads."""
    with new_fabric(prefix) as fab:
        env, co, base = _words(fab, 8, 500)

        def client():
            few = co.read_many([gaddr(MN, base), gaddr(MN, base + 8)], 8)
            block = co.read_many([gaddr(MN, base + 8 * i) for i in range(4, 8)], 8)
            assert few.status == [-1, -1] and block.status == [-1] * 4 and co.queued == 6
            co.write(gaddr(MN, base + 2048), 1)
            yield co.sync()
            return few, block

        p = env.process(client())
        env.run()
        few, block = p.value
        assert few.ok and few.values() == [500, 501] and few[1].value == 501
        assert block.ok and block.values() == [504, 505, 506, 507] and block.status == [0] * 4
        assert co._dr is None or co._dr.batches == 0      # a WRITE beside them: nothing deferred
