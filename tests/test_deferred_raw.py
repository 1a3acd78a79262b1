"""Raw verbs' deferred READs (shm/deferred.py, ``QP.post_send``) complete exactly as READs landing at
their effect times.

Each test runs the same co-located pyverbs workload twice on fresh fabrics, once with deferral
(the default) and once with every READ landing at its effect time (``defer_reads(fabric, False)``,
the reference path), and compares everything a client can see: every work completion (its id,
status, opcode, length, QP) with the virtual time it was polled, the bytes each READ left in local
memory once its completion was polled, the remote memory image and the final virtual time. The
workload exercises every way a deferred READ is handed back to an effect event of its own: a work
request of its QP failing before it (later ones are flushed), the QP moved to the error state, a
multi-line transfer posted on its QP, an MR deregistered while it is in flight.
"""

from __future__ import annotations

import hashlib
import random

import pytest

from shm.deferred import DEFER_MIN, defer_reads
from shm.sim.env import Environment
from shm.verbs import (
    CQ, IBV_SEND_SIGNALED, IBV_WC_REM_ACCESS_ERR, IBV_WR_ATOMIC_CMP_AND_SWP, IBV_WR_ATOMIC_FETCH_AND_ADD, IBV_WR_RDMA_READ,
    IBV_WR_RDMA_WRITE, MR, PD, QP, Context, QPInitAttr, SendWR, SGE, VerbsHost,
)
from tests.test_verbs import ACCESS_ALL, build_rack, new_fabric

SPAN = 4096                          # remote bytes under contention: 64 lines
LOCAL = 4096                         # each client's local MR


def raw_workload(prefix, *, defer: bool, seed: int, clients: int = 6, rounds: int = 30) -> tuple:
    fab = new_fabric(prefix)
    try:
        defer_reads(fab, defer)
        env = Environment(seed=seed)
        host = VerbsHost(fab, env)
        ctx, mctx = Context(host, "c0"), Context(host, "m0")
        pd, mpd = PD(ctx), PD(mctx)
        rmr = MR(mpd, SPAN, ACCESS_ALL)
        spare = MR(mpd, SPAN, ACCESS_ALL)          # deregistered part-way through the run
        seen = []
        stats = {}

        def new_qp():
            cq = CQ(ctx)
            qp = QP(pd, QPInitAttr(scq=cq))
            mqp = QP(mpd, QPInitAttr(scq=CQ(mctx)))
            qp.connect(mqp)
            mqp.connect(qp)
            return qp, cq

        def client(k):
            rng = random.Random(seed * 1000 + k)
            qp, cq = new_qp()
            lmr = MR(pd, LOCAL, ACCESS_ALL)
            wr_id = 0
            for r in range(rounds):
                yield rng.randrange(0, 400)
                posts = []
                slot = 0                           # each request of a round its own local line
                for _ in range(rng.choice((1, 1, 1, 2))):
                    wrs = []
                    kind = rng.random()
                    n = rng.randint(1, 8) if kind < 0.3 else rng.randint(DEFER_MIN, 8)
                    mr = spare if rng.random() < 0.15 else rmr
                    for i in range(n):
                        wr_id += 1
                        roff = 8 * rng.randrange(SPAN // 8)
                        loff = 256 * slot
                        slot += 1
                        op, length = IBV_WR_RDMA_READ, 8
                        if kind < 0.3:             # mixed: not deferred
                            op = rng.choice((IBV_WR_RDMA_READ, IBV_WR_RDMA_WRITE, IBV_WR_ATOMIC_CMP_AND_SWP,
                                             IBV_WR_ATOMIC_FETCH_AND_ADD))
                        if kind > 0.9 and i == n - 1:   # a multi-line WRITE behind the READs
                            op, length, roff = IBV_WR_RDMA_WRITE, 64 * rng.randint(2, 4), 64 * rng.randrange(SPAN // 64 - 4)
                        wr = SendWR(wr_id=wr_id, opcode=op, sg=[SGE(lmr.addr + loff, length, lmr.lkey)],
                                    send_flags=IBV_SEND_SIGNALED)
                        rkey = mr.rkey
                        if rng.random() < 0.03:
                            # a bad rkey (fails, and flushes what follows): its low byte, random at
                            # registration, is what changes; flipping a row bit could name the other MR
                            rkey ^= 1
                        if op in (IBV_WR_ATOMIC_CMP_AND_SWP, IBV_WR_ATOMIC_FETCH_AND_ADD):
                            wr.set_wr_atomic(rkey, mr.addr + roff, rng.getrandbits(2), rng.getrandbits(64))
                        else:
                            if op == IBV_WR_RDMA_WRITE:
                                lmr.buf[loff:loff + length] = rng.getrandbits(8)
                            wr.set_wr_rdma(rkey, mr.addr + roff)
                        wrs.append(wr)
                    qp.post_send(wrs)
                    posts.append(wrs)
                    if rng.random() < 0.3:
                        yield rng.randrange(0, 200)   # the next post while these are in flight
                if rng.random() < 0.03:
                    qp.to_error()                  # what is still in flight is flushed
                want = sum(len(w) for w in posts)
                got = []
                while len(got) < want:
                    yield cq.wait(1)
                    _, wcs = cq.poll(want - len(got))
                    for wc in wcs:
                        local = None
                        if wc.status == 0 and wc.opcode == 2:   # a READ: the bytes it left
                            wr = next(w for ws in posts for w in ws if w.wr_id == wc.wr_id)
                            a = wr.sg[0].addr - lmr.addr
                            local = bytes(lmr.buf[a:a + 8])
                        got.append((env.now, tuple(wc), local))
                seen.append((k, r, got))
                if qp.state == qp.ERR:
                    qp, cq = new_qp()              # start over on a fresh QP

        def deregister():
            yield 3_000
            spare.close()                          # READs in flight to it fail from now on

        for k in range(clients):
            env.process(client(k))
        env.process(deregister())
        env.run()
        image = hashlib.sha256(bytes(rmr.buf)).hexdigest()
        dr = QP(pd, QPInitAttr(scq=CQ(ctx)))._dr
        if dr is not None:
            stats = {"batches": dr.batches, "early": dr.early, "handed": dr.handed}
        return (env.now, image, sorted(seen, key=lambda s: (s[0], s[1]))), stats
    finally:
        fab.close()


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_raw_reads_complete_the_same_with_deferral(prefix, seed):
    ref, _ = raw_workload(prefix, defer=False, seed=seed)
    got, stats = raw_workload(prefix, defer=True, seed=seed)
    assert got[0] == ref[0] and got[1] == ref[1]
    assert len(got[2]) == len(ref[2])
    for a, b in zip(got[2], ref[2]):
        assert a == b
    assert stats["batches"] > 0 and stats["handed"] > 0, stats
    assert any(wc[1][1] == 5 for s in ref[2] for wc in s[2]), "nothing was flushed"


def test_every_way_of_handing_back_is_exercised(prefix):
    """Across the seeds, deferred READs still in flight are taken back by each trigger."""
    from shm import verbs
    counts = {"failure": 0, "error state": 0, "multi-line post": 0, "deregistration": 0}
    real = (verbs.QP._note_error, verbs.QP.to_error, verbs.QP.post_send, verbs.MR.close)

    def in_flight(qp) -> bool:
        return any(b.left for b in qp._deferred)

    def note_error(self, p):
        counts["failure"] += in_flight(self)
        real[0](self, p)

    def to_error(self):
        counts["error state"] += in_flight(self)
        real[1](self)

    def post_send(self, wrs):
        if in_flight(self) and any(w.sg and (w.remote_addr & 63) + w.sg[0].length > 64 for w in wrs):
            counts["multi-line post"] += 1
        real[2](self, wrs)

    def close(self):
        dr = verbs.deferred_reads_of(self.fabric, self._env)
        counts["deregistration"] += bool(dr is not None and dr.owners())
        real[3](self)

    mp = pytest.MonkeyPatch()
    mp.setattr(verbs.QP, "_note_error", note_error)
    mp.setattr(verbs.QP, "to_error", to_error)
    mp.setattr(verbs.QP, "post_send", post_send)
    mp.setattr(verbs.MR, "close", close)
    try:
        for seed in range(1, 5):
            raw_workload(prefix, defer=True, seed=seed)
    finally:
        mp.undo()
    assert all(counts.values()), counts


@pytest.mark.parametrize("defer", [False, True])
def test_reads_posted_behind_a_multi_line_write_on_their_qp_see_all_of_it(prefix, defer):
    """RC order: READs posted after a multi-line WRITE on the same QP see every line of it, also
    those landing at the READs' own nanosecond (deferral stays off while the WRITE is in flight)."""
    fab = new_fabric(prefix)
    try:
        defer_reads(fab, defer)          # before the QPs are made: each takes it then
        env = Environment(seed=1)
        rack = build_rack(fab, env)
        qp, cq, rmr, lmr = rack.qp, rack.cq, rack.rmr, rack.lmr
        seen = []

        def body():
            for r in range(20):
                lines = 2 + r % 6
                lmr.buf[:64 * lines] = r + 1
                write = SendWR(wr_id=0, opcode=IBV_WR_RDMA_WRITE, sg=[SGE(lmr.addr, 64 * lines, lmr.lkey)],
                               send_flags=IBV_SEND_SIGNALED)
                write.set_wr_rdma(rmr.rkey, rmr.addr)
                reads = []
                for i in range(lines):          # words of the last line the WRITE writes, the first READ
                    #                               taking effect at that line's nanosecond
                    wr = SendWR(wr_id=1 + i, opcode=IBV_WR_RDMA_READ,
                                sg=[SGE(lmr.addr + 1024 + 64 * i, 8, lmr.lkey)], send_flags=IBV_SEND_SIGNALED)
                    wr.set_wr_rdma(rmr.rkey, rmr.addr + 64 * (lines - 1) + 8 * (i % 8))
                    reads.append(wr)
                qp.post_send([write])
                qp.post_send(reads)
                got = 0
                while got < 1 + lines:
                    yield cq.wait(1)
                    got += cq.poll(1 + lines)[0]
                seen.append([bytes(lmr.buf[1024 + 64 * i:1032 + 64 * i]) for i in range(lines)])

        env.process(body())
        env.run()
        assert all(b == bytes([r + 1]) * 8 for r, bs in enumerate(seen) for b in bs), seen
    finally:
        fab.close()


def both_ways(make_fabric, body) -> dict:
    """Run ``body(env, rack, seen)`` (a process) on a fresh single-QP rack (tests/test_verbs.py's
    build_rack, its remote MR filled with a byte pattern) with deferral off and on; returns
    ``{defer: (seen, batches deferred)}``."""
    got = {}
    for defer in (False, True):
        fab = make_fabric()
        try:
            defer_reads(fab, defer)          # before the QPs are made: each takes it then
            env = Environment(seed=1)
            rack = build_rack(fab, env)
            rack.rmr.write(bytes(range(256)) * (SPAN // 256))
            seen = []
            env.process(body(env, rack, seen))
            env.run()
            got[defer] = (seen, rack.qp._dr.batches if rack.qp._dr is not None else 0)
        finally:
            fab.close()
    return got


def post_and_collect(env, qp, cq, wrs, seen):
    """``yield from`` it in a rack's process: post ``wrs`` on ``qp``, then poll ``cq`` until each
    has completed, appending ``(virtual time polled, work completion)`` to ``seen``."""
    qp.post_send(wrs)
    got = 0
    while got < len(wrs):
        yield cq.wait(1)
        _, wcs = cq.poll(len(wrs))
        got += len(wcs)
        seen.extend((env.now, tuple(wc)) for wc in wcs)


@pytest.mark.parametrize("persist_on_placement", [False, True])
def test_raw_reads_of_persistent_memory_complete_the_same(prefix, persist_on_placement):
    """A raw post of single-line READs to persistent memory: not deferred where the durability
    model tracks the node (a READ there flushes its QP's WRITEs at its effect), deferred where
    placed writes are durable at once (nothing to track); either way the same completions and bytes."""
    from shm.fabric import Fabric, NodeSpec
    from shm.profile import load_profile, with_overrides
    profile = with_overrides(load_profile("cx6-200g"), {"nvm.persist_on_placement": persist_on_placement})

    def body(env, rack, seen):
        qp, cq, rmr, lmr = rack.qp, rack.cq, rack.rmr, rack.lmr
        for r in range(4):
            wrs = []
            for i in range(DEFER_MIN + r):
                wr = SendWR(wr_id=i, opcode=IBV_WR_RDMA_READ, sg=[SGE(lmr.addr + 64 * i, 8, lmr.lkey)],
                            send_flags=IBV_SEND_SIGNALED)
                wr.set_wr_rdma(rmr.rkey, rmr.addr + 72 * i + 8 * r)
                wrs.append(wr)
            yield from post_and_collect(env, qp, cq, wrs, seen)
            seen.append(bytes(lmr.buf[:64 * len(wrs)]))

    got = both_ways(lambda: Fabric.create(profile, [NodeSpec("c0", "compute", 1 << 20),
                                                    NodeSpec("m0", "memory", 1 << 20, memory_kind="nvm")],
                                          prefix=prefix), body)
    assert got[True][0] == got[False][0]
    assert (got[True][1] > 0) == persist_on_placement, got[True][1]


@pytest.mark.parametrize("first_rkey", ["bad key 0", "valid"])
def test_unsignaled_reads_and_a_key_of_zero_complete_the_same(prefix, first_rkey):
    """Raw posts of single-line READs, some unsignaled (no completion unless they fail; a later
    signaled one's poll frees their send-queue slots), and a last post whose first READ names the
    key 0 (no MR has it: it fails and flushes the rest, deferral or not): with and without
    deferral, the same work completions at the same virtual times, the same bytes, and the same
    verbs statistics and send-queue occupancy after every round."""

    def body(env, rack, seen):
        qp, cq, rmr, lmr = rack.qp, rack.cq, rack.rmr, rack.lmr
        for r in range(12):
            n = DEFER_MIN + r % 5
            wrs = []
            for i in range(n):
                # every third unsignaled, the last always signaled (so the round ends)
                flags = IBV_SEND_SIGNALED if i % 3 != 1 or i == n - 1 else 0
                wr = SendWR(wr_id=100 * r + i, opcode=IBV_WR_RDMA_READ, sg=[SGE(lmr.addr + 64 * i, 8, lmr.lkey)],
                            send_flags=flags)
                key = 0 if first_rkey == "bad key 0" and r == 11 and i == 0 else rmr.rkey
                wr.set_wr_rdma(key, rmr.addr + 72 * i + 8 * r)
                wrs.append(wr)
            qp.post_send(wrs)
            last = False
            while not last:
                yield cq.wait(1)
                _, wcs = cq.poll(n)
                seen.extend((env.now, tuple(wc)) for wc in wcs)
                last = any(wc.wr_id == 100 * r + n - 1 for wc in wcs)
            seen.append((bytes(lmr.buf[:64 * n]), tuple(rack.host.statistics()), qp._sq_in_flight))

    got = both_ways(lambda: new_fabric(prefix), body)
    assert got[True][0] == got[False][0]
    assert got[True][1] > 0 and got[False][1] == 0
    statuses = [entry[1][1] for entry in got[False][0] if len(entry) == 2]
    assert statuses.count(IBV_WC_REM_ACCESS_ERR) == (first_rkey == "bad key 0"), statuses


@pytest.mark.parametrize("bad", ["rkey", "lkey"])
def test_a_first_read_keyed_minus_one_fails_as_without_deferral(prefix, bad):
    """A raw post of single-line READs whose first names the key -1 (no MR has it) and the rest a
    valid key. The deferral test once took -1 for "no key seen yet", so it let the rest's key stand
    for the first's and the first READ landed: with deferral it succeeded, without it failed.
    Now it fails either way (and flushes the rest), with the same completions and bytes."""

    def body(env, rack, seen):
        qp, cq, rmr, lmr = rack.qp, rack.cq, rack.rmr, rack.lmr
        wrs = []
        for i in range(DEFER_MIN + 2):
            lkey = -1 if bad == "lkey" and i == 0 else lmr.lkey
            wr = SendWR(wr_id=i, opcode=IBV_WR_RDMA_READ, sg=[SGE(lmr.addr + 64 * i, 8, lkey)],
                        send_flags=IBV_SEND_SIGNALED)
            wr.set_wr_rdma(-1 if bad == "rkey" and i == 0 else rmr.rkey, rmr.addr + 72 * i)
            wrs.append(wr)
        yield from post_and_collect(env, qp, cq, wrs, seen)
        seen.append(bytes(lmr.buf[:64 * len(wrs)]))

    got = both_ways(lambda: new_fabric(prefix), body)
    assert got[True][0] == got[False][0]
    statuses = [entry[1][1] for entry in got[False][0][:-1]]
    assert statuses[0] != 0 and all(s != 0 for s in statuses), statuses   # the first fails, the rest are flushed


def test_the_raw_deferral_test_agrees_with_its_reference_on_random_posts():
    """raw_one_line_reads (compiled, what a raw post asks of its rows) against its plain-Python
    reference, on rows at and around each of the rule's edges: another opcode, another node or
    region at either end, a line's last byte and one past it, a second key, the key -1."""
    import numpy as np

    from shm import nic
    from shm.deferred import raw_one_line_reads, raw_one_line_reads_py
    from shm.fabric import REGION_BITS
    here, there = 3 << REGION_BITS | nic.REGION_HOST, 5 << REGION_BITS | nic.REGION_HOST
    rng = random.Random(11)
    seen = set()
    for _ in range(3000):
        n = rng.randint(1, 10)
        rows = np.zeros((n, nic.RAW_WR_COLS), np.int64)
        for i in range(n):
            rows[i, nic.WR_OP] = nic.VERB_READ if rng.random() < 0.95 else rng.randrange(nic.N_VERBS)
            off = 64 * rng.randrange(1000) + rng.choice([0, 1, 8, 56, 63])
            rows[i, nic.WR_OFF] = off
            rows[i, nic.WR_LEN] = rng.choice([1, 8, 8, 64 - off % 64, 65 - off % 64])
            rows[i, nic.WR_LOFF] = 64 * rng.randrange(100) + rng.choice([0, 8])
            rows[i, nic.WR_RADDR] = there if rng.random() < 0.97 else rng.choice([here, 5 << REGION_BITS | nic.REGION_DEVICE])
            rows[i, nic.WR_LADDR] = here if rng.random() < 0.97 else rng.choice([there, 3 << REGION_BITS | nic.REGION_DEVICE])
            rows[i, nic.WR_RKEY] = 77 if rng.random() < 0.97 else rng.choice([-1, 0, 78])
            rows[i, nic.WR_LKEY] = 99 if rng.random() < 0.97 else rng.choice([-1, 0, 98])
        want_span, got_span = np.full(6, -7, np.int64), np.full(6, -7, np.int64)
        want = raw_one_line_reads_py(rows, here, there, want_span)
        assert raw_one_line_reads(rows, here, there, got_span) == want, rows
        assert (got_span == want_span).all()
        if want:
            assert want_span.tolist() == [rows[0, nic.WR_RKEY], rows[0, nic.WR_LKEY], rows[:, nic.WR_OFF].min(),
                                          (rows[:, nic.WR_OFF] + rows[:, nic.WR_LEN]).max(), rows[:, nic.WR_LOFF].min(),
                                          (rows[:, nic.WR_LOFF] + rows[:, nic.WR_LEN]).max()]
        seen.add(want)
    assert seen == {True, False}


@pytest.mark.parametrize("field", ["rkey", "lkey", "length"])
def test_a_value_beyond_int64_is_refused_at_post_and_nothing_is_posted(prefix, field):
    """A raw post whose work request names an rkey, lkey or length no row can hold (beyond int64;
    ibverbs' are 32 bits) is refused by ``post_send`` with one EINVAL error naming the request and
    the value, before anything of the post reaches the model: the QP takes the next post as if the
    bad one never came (once, numba's OverflowError ended the run at the request's effect)."""
    import errno

    from shm.verbs import PyverbsRDMAError
    huge = (1 << 64) + 5

    def body(env, rack, seen):
        qp, cq, rmr, lmr = rack.qp, rack.cq, rack.rmr, rack.lmr

        def reads(bad: bool):
            wrs = []
            for i in range(DEFER_MIN + 1):
                length = huge if bad and field == "length" and i == 2 else 8
                lkey = huge if bad and field == "lkey" and i == 2 else lmr.lkey
                wr = SendWR(wr_id=i, opcode=IBV_WR_RDMA_READ, sg=[SGE(lmr.addr + 64 * i, length, lkey)],
                            send_flags=IBV_SEND_SIGNALED)
                wr.set_wr_rdma(huge if bad and field == "rkey" and i == 2 else rmr.rkey, rmr.addr + 64 * i)
                wrs.append(wr)
            return wrs

        with pytest.raises(PyverbsRDMAError) as err:
            qp.post_send(reads(True))
        seen.append((err.value.error_code, str(err.value), qp._sq_in_flight, env.now))
        yield from post_and_collect(env, qp, cq, reads(False), seen)
        seen.append(bytes(lmr.buf[:64 * (DEFER_MIN + 1)]))

    got = both_ways(lambda: new_fabric(prefix), body)
    assert got[True][0] == got[False][0]
    (code, text, in_flight, at), *completions, data = got[True][0]
    assert code == errno.EINVAL and in_flight == 0 and at == 0
    assert "wr 2" in text and f"{field} {huge}" in text and text.count("\n") == 0
    assert [wc[1][1] for wc in completions] == [0] * (DEFER_MIN + 1)    # the next post as usual
    for i in range(DEFER_MIN + 1):                                        # and the bytes it read
        assert data[64 * i:64 * i + 8] == bytes(range(256))[64 * i % 256:64 * i % 256 + 8]
