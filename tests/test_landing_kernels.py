"""The compiled landings of a coroutine's verbs against their plain references, on random inputs.

``shm.fabric.land_verb_now`` lands a verb in one call where ``shm.verbs.apply_one_sided`` (the
reference) takes a Python function and a kernel; ``shm.landing.PendingWrites`` keeps each node's
pending writes in an int64 array that compiled code reads, where a plain list of entries is the
reference; ``shm.landing.land_read_whole`` decides and lands a multi-line READ as
``begin_landing``'s first test would. Same inputs, same answers, same bytes.
"""

from __future__ import annotations

import random

import numpy as np
import pytest

from shm import landing
from shm.fabric import (
    LAND_READ, REGION_DEVICE, REGION_HOST, VERB_LANDED, VERB_MISALIGNED, VERB_RACED, VERB_REFUSED, Fabric, NodeSpec,
    gaddr, host_kernels, remote_read_write,
)
from shm.landing import ALL_BYTES, PendingWrites, land_read_whole, land_read_whole_entry
from shm.profile import load_profile
from shm.verbs import (
    IBV_ACCESS_REMOTE_ATOMIC, IBV_ACCESS_REMOTE_READ, IBV_ACCESS_REMOTE_WRITE, IBV_WC_REM_ACCESS_ERR,
    IBV_WC_REM_INV_REQ_ERR, IBV_WC_SUCCESS, IBV_WR_ATOMIC_CMP_AND_SWP, IBV_WR_ATOMIC_FETCH_AND_ADD,
    IBV_WR_MASKED_ATOMIC_CMP_AND_SWP, IBV_WR_MASKED_ATOMIC_FETCH_AND_ADD, IBV_WR_RDMA_READ, IBV_WR_RDMA_WRITE,
    LAND_KIND, apply_one_sided, to_i64,
)

OPS = (IBV_WR_RDMA_READ, IBV_WR_RDMA_WRITE, IBV_WR_ATOMIC_CMP_AND_SWP, IBV_WR_ATOMIC_FETCH_AND_ADD,
       IBV_WR_MASKED_ATOMIC_CMP_AND_SWP, IBV_WR_MASKED_ATOMIC_FETCH_AND_ADD)
STATUS = {VERB_LANDED: IBV_WC_SUCCESS, VERB_RACED: IBV_WC_SUCCESS, VERB_REFUSED: IBV_WC_REM_ACCESS_ERR,
          VERB_MISALIGNED: IBV_WC_REM_INV_REQ_ERR}
MEM = 1 << 20


def _fabric(prefix, tag):
    f = Fabric.create(load_profile("cx6-200g"), [NodeSpec("c0", "compute", 1 << 20), NodeSpec("m0", "memory", MEM)],
                      prefix=f"{prefix}{tag}")
    f.expose("m0")
    return f


def test_land_verb_now_lands_as_apply_one_sided_does(prefix):
    """Two fabrics with the same bytes and MRs: each random verb lands on one through
    ``apply_one_sided`` and on the other through ``land_verb_now`` (the entry point a coroutine
    uses): the same status, the same raced CASes, the same bytes in memory and in the local
    buffer. Verbs: every kind, host and device memory, aligned and misaligned atomics, the
    exposed key, a narrower MR's key (some accesses refused), a bogus key, operands past 2**63."""
    rng = random.Random(11)
    ref, new = _fabric(prefix, "r"), _fabric(prefix, "n")
    try:
        keys = []
        for f in (ref, new):
            m = f.memory[1]
            seed = np.random.default_rng(5)
            m.host[:] = seed.integers(0, 256, m.host.shape[0], dtype=np.uint8)
            m.device[:] = seed.integers(0, 256, m.device.shape[0], dtype=np.uint8)
            dev_key = f.register("m0", 0, m.device.shape[0] // 2, IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC,
                                 region=REGION_DEVICE)
            narrow = f.register("m0", 4096, 8192, IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE)
            keys.append((f.exposed_key("m0"), narrow, dev_key))
        keys = [k + (12345,) for k in keys]   # each fabric's exposed, narrow, device key, and a bogus one
        lbuf_ref, lbuf_new = np.zeros(4096, np.uint8), np.zeros(4096, np.uint8)
        kernels = host_kernels(new, lbuf_new)
        dev_bytes = ref.memory[1].device.shape[0]
        seen = set()
        for _ in range(3000):
            op = rng.choice(OPS)
            region = REGION_DEVICE if rng.random() < 0.25 else REGION_HOST
            size = dev_bytes if region == REGION_DEVICE else MEM
            atomic = op not in (IBV_WR_RDMA_READ, IBV_WR_RDMA_WRITE)
            length = (8 if rng.random() < 0.9 else rng.choice([4, 16])) if atomic else rng.randint(1, 300)
            off = rng.randrange(0, min(size, 16384) - 300)
            if atomic and rng.random() < 0.85:
                off -= off % 8
            which = rng.choice([0, 0, 1, 3]) if region == REGION_HOST else rng.choice([2, 2, 0])
            # operands: small, past 2**63, negative; a CAS often compares with the word's value
            vals = [rng.choice([rng.randrange(1 << 16), rng.randrange(1 << 63, 1 << 64), -rng.randrange(1, 99)])
                    for _ in range(4)]
            m = ref.memory[1]
            words = m.host64 if region == REGION_HOST else m.device64
            if atomic and off % 8 == 0 and rng.random() < 0.5:
                vals[0] = int(words[off // 8])
            loff = rng.randrange(0, 2048)
            lbuf_ref[loff:loff + length] = rng.randrange(256)
            lbuf_new[:] = lbuf_ref
            raced = ref.windows["cas_raced"]
            want = apply_one_sided(ref, 1, op, gaddr(1, off, region), keys[0][which], lbuf_ref, loff, length, *vals)
            mem = new.memory[1]
            arrays = (mem.host, mem.host64, mem.host_locks) if region == REGION_HOST else \
                (mem.device, mem.device64, mem.device_locks)
            got = kernels.verb(LAND_KIND[op], region, mem.mrt, keys[1][which], off, length, *arrays, lbuf_new, loff,
                               *[to_i64(v) for v in vals], not new.profile.nic.ordered_multiline_writes)
            assert STATUS[got] == want, (op, region, off, length, which)
            assert (got == VERB_RACED) == (ref.windows["cas_raced"] > raced)
            assert np.array_equal(lbuf_ref, lbuf_new)
            seen.add((op, region, got))
        for f in (ref, new):
            assert f.memory[1].host.tobytes() == ref.memory[1].host.tobytes()
            assert f.memory[1].device.tobytes() == ref.memory[1].device.tobytes()
        outcomes = {g for _, _, g in seen}
        assert outcomes == {VERB_LANDED, VERB_RACED, VERB_REFUSED, VERB_MISALIGNED}, "an outcome never came up"
        assert {(op, r) for op, r, g in seen if g == VERB_LANDED} >= {(op, REGION_HOST) for op in OPS}
    finally:
        ref.close()
        new.close()


class _ListWrites:
    """The plain reference of :class:`PendingWrites`: a list of entries, every answer by looking
    at all of them."""

    def __init__(self, floor_ns):
        self.floor_ns = floor_ns
        self.entries: dict[int, list] = {}

    def add(self, node, a, b, off=0, end=ALL_BYTES):
        self.entries.setdefault(node, []).append((min(a, b), max(a, b), off, end))

    def next_change(self, node, now):
        soonest = now + self.floor_ns
        live = [a for a, b, _, _ in self.entries.get(node, []) if b >= now]
        if not live:
            return soonest
        return min(max(min(live), now), soonest)

    def clear_of(self, node, now, hi, off, end):
        return hi < now + self.floor_ns and not any(
            a <= hi and b >= now and o < end and off < e for a, b, o, e in self.entries.get(node, []))


@pytest.mark.parametrize("rows0", [1, 3, 64])
def test_pending_writes_answer_as_a_plain_list_does(monkeypatch, rows0):
    """Random adds (windows either way round, byte ranges or any byte, a node's array growing
    from ``rows0`` entries, entries past their window dropped as time moves on), next_change
    and clear_of at a time that only moves forward, on three nodes: the arrays answer as the
    list does."""
    monkeypatch.setattr(landing, "_ROWS0", rows0)
    rng = random.Random(rows0)
    for _ in range(60):
        floor = rng.choice([50, 150, 600])
        pw, ref = PendingWrites(floor), _ListWrites(floor)
        now = 0
        for _ in range(rng.randint(1, 300)):
            now += rng.choice([0, 0, 1, rng.randint(0, 60)])
            node = rng.randrange(3)
            r = rng.random()
            if r < 0.5:
                a = now + rng.randint(0, 400)
                b = a + rng.choice([0, 0, rng.randint(0, 80)])
                if rng.random() < 0.3:
                    a, b = b, a
                off, end = (0, ALL_BYTES) if rng.random() < 0.2 else sorted(rng.sample(range(0, 4096, 8), 2))
                pw.add(node, a, b, off, end, now if rng.random() < 0.8 else -1)
                ref.add(node, a, b, off, end)
            elif r < 0.75:
                assert pw.next_change(node, now) == ref.next_change(node, now)
            else:
                hi = now + rng.randint(0, 200)
                off = rng.randrange(0, 4096, 8)
                end = off + rng.choice([8, 64, 128, 1024])
                assert pw.clear_of(node, now, hi, off, end) == ref.clear_of(node, now, hi, off, end)
        for node in range(3):       # what the arrays dropped had ended: the live entries are all there
            live = sorted(e for e in ref.entries.get(node, []) if e[1] >= now)
            assert sorted(e for e in pw.entries(node) if e[1] >= now) == live


def test_land_read_whole_decides_and_lands_as_begin_landing_would(prefix):
    """On random pending writes and windows: ``land_read_whole`` lands the READ (the bytes
    ``remote_read_write`` copies) exactly when ``begin_landing``'s first test, written with the
    PendingWrites methods, passes, refuses a bad key touching nothing, and otherwise lands
    nothing; its ``.py_func`` (interpreted) agrees with the compiled code."""
    rng = random.Random(3)
    f = _fabric(prefix, "w")
    try:
        mem = f.memory[1]
        mem.host[:] = np.random.default_rng(2).integers(0, 256, MEM, dtype=np.uint8)
        key = f.exposed_key("m0")
        lbuf = np.zeros(4096, np.uint8)
        compiled = land_read_whole_entry(f, lbuf)
        outcomes = set()
        for _ in range(1500):
            pw = PendingWrites(rng.choice([50, 300]))
            now = rng.randint(0, 500)
            for _ in range(rng.randint(0, 6)):
                a = rng.randint(0, 900)
                pw.add(1, a, a + rng.randint(0, 60), *sorted(rng.sample(range(0, 8192, 8), 2)))
            hi = now + rng.randint(1, 400)
            peek = now + rng.randint(0, 500)
            off, length = rng.randrange(0, 6000), rng.randint(65, 1024)
            k = key if rng.random() < 0.9 else 999
            bound = pw.next_change(1, now)
            bound = peek if bound <= now else bound
            whole = hi < bound or pw.clear_of(1, now, hi, off, off + length)
            want_buf = np.zeros(4096, np.uint8)
            want = -1
            if whole:
                want = int(remote_read_write(True, mem.mrt, k, REGION_HOST, off, length, mem.host, mem.host_locks,
                                             want_buf, 64, False))
            for fn in (compiled, land_read_whole.py_func):
                h = pw.heap(1).copy()
                lbuf[:] = 0
                assert fn(h, pw.floor_ns, now, peek, hi, mem.mrt, k, off, length, mem.host, mem.host_locks, lbuf,
                          64) == want
                assert np.array_equal(lbuf, want_buf)
            outcomes.add(want)
        assert outcomes == {-1, 0, 1}
    finally:
        f.close()


def test_land_kind_names_every_one_sided_verb():
    """Every one-sided verb a coroutine queues has a kind for ``land_verb_now``: READ and WRITE
    below zero, the atomics their ``remote_atomic`` kinds."""
    assert LAND_KIND[IBV_WR_RDMA_READ] == LAND_READ
    assert set(LAND_KIND) == set(OPS)
    assert sorted(LAND_KIND[op] for op in OPS[2:]) == [0, 1, 2, 3]


def test_a_posts_rows_add_the_entries_add_verb_would(monkeypatch):
    """``PendingWrites.add_rows`` (one compiled call a post) leaves the entries that
    ``add_verb`` of each of the post's WRITEs and atomics leaves (READs add none; device memory
    counts as any byte), on random posts, also when the node's array must grow for them."""
    from shm import nic
    from shm.fabric import gaddr as ga

    monkeypatch.setattr(landing, "_ROWS0", 2)
    rng = random.Random(9)
    for _ in range(300):
        pw, ref = PendingWrites(100), PendingWrites(100)
        now = rng.randint(0, 50)
        for _ in range(rng.randint(1, 4)):
            n = rng.randint(1, 12)
            rows = np.zeros((n, nic.WR_COLS), np.int64)
            for i in range(n):
                op = rng.choice([nic.VERB_READ, nic.VERB_WRITE, nic.VERB_CAS, nic.VERB_FAA])
                region = REGION_DEVICE if rng.random() < 0.2 else REGION_HOST
                off, length = rng.randrange(0, 1 << 16), rng.randint(1, 512)
                effect = now + rng.randint(0, 300)
                other = effect - rng.randint(0, 40) if rng.random() < 0.5 else effect
                rows[i, [nic.WR_OP, nic.WR_LEN, nic.WR_OFF, nic.WR_REGION]] = op, length, off, region
                rows[i, nic.WR_OUT], rows[i, nic.WR_OUT + 2] = effect, other
                if op != nic.VERB_READ:
                    ref.add_verb(1, effect, other, ga(1, off, region), length, now)
            pw.add_rows(1, rows, now)
            now += rng.randint(0, 100)
        assert sorted(e for e in pw.entries(1) if e[1] >= now) == sorted(e for e in ref.entries(1) if e[1] >= now)
