"""Persistent memory on memory nodes (docs/nvm.md): the [nvm] profile table, [memory] kind, the
media's timing in the NIC model, and durability (shm/nvm.py): a WRITE survives a power failure
(a kill of the memory node) only once a later READ or atomic of its QP has executed.

Co-located and small; times are virtual.
"""

from __future__ import annotations

import dataclasses
from contextlib import contextmanager

import numpy as np
import pytest

from cluster.spec import SpecError, spec_from_dict
from shm import nic
from shm.fabric import Fabric, NodeSpec, gaddr
from shm.nvm import nvm_shadow_of, power_fail, statistics
from shm.profile import ProfileError, load_profile, profile_to_dict, with_overrides
from shm.verbs import IBV_WR_RDMA_READ, IBV_WR_RDMA_WRITE
from tests.test_coro import run, setup
from tests.test_verbs import build_rack, rdma, run_process, wait_cqes

CN, MN = 0, 1
NVM_KEYS = {f.name for f in dataclasses.fields(type(load_profile("cx6-200g").nvm))}


@contextmanager
def fabric(prefix, kind="nvm", profile=None):
    """A compute node c0 and an exposed memory node m0 of ``kind``; closed on exit."""
    f = Fabric.create(profile or load_profile("cx6-200g"),
                      [NodeSpec("c0", "compute", 16 << 20), NodeSpec("m0", "memory", 4 << 20, memory_kind=kind)],
                      prefix=prefix)
    try:
        f.expose("m0")
        yield f
    finally:
        f.close()


def word(f, off) -> int:
    return int(f.memory[MN].host64[off // 8])


# -- the profile table ---------------------------------------------------------------------------

def test_cx6_has_optane_numbers_and_other_profiles_have_no_table():
    p = load_profile("cx6-200g")
    assert (p.nvm.read_ns, p.nvm.dram_read_ns, p.nvm.xpline_bytes, p.nvm.dimms) == (305, 81, 256, 6)
    assert p.nvm.read_gbps == pytest.approx(6.6 * 8) and p.nvm.write_gbps == pytest.approx(2.3 * 8)
    assert not p.nvm.persist_on_placement
    assert "nvm.dimms" in p.assumptions                       # no published DIMM count for SMART's blades
    assert load_profile("cx3-56g").nvm is None


def test_an_nvm_table_is_added_whole_by_overrides_and_checked():
    table = profile_to_dict(load_profile("cx6-200g"))["nvm"]
    q = with_overrides(load_profile("cx3-56g"), {f"nvm.{k}": v for k, v in table.items()})
    assert q.nvm == load_profile("cx6-200g").nvm
    with pytest.raises(ProfileError, match="missing nvm.dram_read_ns"):
        with_overrides(load_profile("cx3-56g"), {"nvm.read_ns": 305})
    with pytest.raises(ProfileError, match="'nvm.read_ns' \\(50\\) must be >= 'nvm.dram_read_ns'"):
        with_overrides(load_profile("cx6-200g"), {"nvm.read_ns": 50})
    with pytest.raises(ProfileError, match="'nvm.xpline_bytes' must be a power of two"):
        with_overrides(load_profile("cx6-200g"), {"nvm.xpline_bytes": 200})


# -- the rack spec -------------------------------------------------------------------------------

def test_memory_kind_in_the_rack_spec():
    spec = spec_from_dict({"memory": {"count": 2, "kind": "nvm"}}, source="t.toml")
    assert [n.memory_kind for n in spec.nodes() if n.role == "memory"] == ["nvm", "nvm"]
    assert spec.nodes()[2].fabric_spec().memory_kind == "nvm"
    assert "persistent memory (nvm)" in "\n".join(spec.describe())
    mixed = spec_from_dict({"memory": {"count": 2, "kind": ["dram", "nvm"]}}, source="t.toml")
    assert [n.memory_kind for n in mixed.nodes()] == ["dram"] * 3 + ["nvm", "dram"]
    plain = spec_from_dict({}, source="t.toml")
    assert plain.memory.kinds == () and {n.memory_kind for n in plain.nodes()} == {"dram"}


@pytest.mark.parametrize("kind, why", [
    ("nvme", "\"nvme\" is not a memory kind: use 'dram' or 'nvm'"),
    (["nvm"], "1 entries for memory.count = 2: give one per memory node"),
    (3, "must be one of 'dram', 'nvm' or a list of them"),
])
def test_bad_memory_kinds_are_one_line(kind, why):
    with pytest.raises(SpecError, match=why) as e:
        spec_from_dict({"memory": {"count": 2, "kind": kind}}, source="t.toml")
    assert "\n" not in str(e.value) and str(e.value).startswith("t.toml: memory.kind = ")


def test_nvm_needs_a_profile_with_the_table(prefix):
    with pytest.raises(SpecError, match="'cx3-56g' does not have"):
        spec_from_dict({"rack": {"profile": "cx3-56g"}, "memory": {"kind": "nvm"}}, source="t.toml")
    with pytest.raises(ValueError, match="needs the profile's \\[nvm\\] table"):
        Fabric.create(load_profile("cx3-56g"), [NodeSpec("m0", "memory", 1 << 20, memory_kind="nvm")], prefix=prefix)


# -- timing ----------------------------------------------------------------------------------------

def test_a_dram_rack_has_the_layout_it_always_had():
    p = load_profile("cx6-200g")
    names = ["c0", "m0"]
    dram = nic.FabricLayout.build(p, names)
    with_nvm = nic.FabricLayout.build(p, names, nvm=(1,))
    assert (dram.descriptors[:, nic.D_NVM_RD] == -1).all()
    assert with_nvm.descriptors[0, nic.D_NVM_RD] == -1 and with_nvm.descriptors[1, nic.D_NVM_RD] >= 0
    assert with_nvm.words > dram.words                        # the media calendars come after the rest
    same = [k for k in range(nic.D_NVM_RD) if k != nic.D_STATE]     # counters follow the resources
    assert (with_nvm.descriptors[:, same] == dram.descriptors[:, same]).all()


def _one(prefix, kind, verb, length=64):
    """Post one verb of ``length`` bytes to m0 at 1 us; returns (completion ns, media bookings)."""
    with fabric(prefix, kind) as f:
        env, node = setup(f)
        co = node.thread().coroutine()
        off = f.allocate("m0", 4096, align=4096)

        def go():
            yield 1000
            if verb == "read":
                co.read(gaddr(MN, off), length)
            elif verb == "write":
                co.write(gaddr(MN, off), bytes(length))
            else:
                co.cas(gaddr(MN, off), 0, 1)
            yield co.sync()
            return env.now
        done = run(env, go())
        media = {s.name: s for s in f.resource_statistics() if ".nvm_" in s.name}
    return done, media


def test_a_read_pays_the_media_latency_over_dram(prefix):
    p = load_profile("cx6-200g").nvm
    dram, none = _one(prefix, "dram", "read")
    nvm, media = _one(prefix, "nvm", "read")
    assert none == {}
    assert nvm - dram == p.read_ns - p.dram_read_ns           # 224 ns
    assert media["m0.nvm_rd"].requests == 1 and media["m0.nvm_wr"].requests == 0


def test_an_atomic_pays_it_too_and_a_lone_write_does_not(prefix):
    p = load_profile("cx6-200g").nvm
    assert _one(prefix, "nvm", "cas")[0] - _one(prefix, "dram", "cas")[0] == p.read_ns - p.dram_read_ns
    # a WRITE is placed in the memory controller's queue at DRAM speed (ADR): same completion
    assert _one(prefix, "nvm", "write")[0] == _one(prefix, "dram", "write")[0]


def test_a_small_write_books_a_whole_xpline_of_media_bandwidth(prefix):
    p = load_profile("cx6-200g").nvm
    xpline_ns = 256 * 8 / p.write_gbps                          # 111 ns of one DIMM
    _, small = _one(prefix, "nvm", "write", 64)
    _, two = _one(prefix, "nvm", "write", 300)                  # 300 B spans two XPLines
    assert small["m0.nvm_wr"].busy_ns == pytest.approx(xpline_ns, abs=0.01)
    assert two["m0.nvm_wr"].busy_ns == pytest.approx(2 * xpline_ns, abs=0.01)


def test_writes_beyond_the_dimms_bandwidth_queue(prefix):
    """64 1 KiB WRITEs in one post on one DIMM: the QP's requester sends one per
    ``nic.req_write_ns`` (178 ns), the DIMM takes 4 XPLines x 111 ns = 445 ns for each, so on NVM
    the last lands ~64 x (445 - 178) ns later than on DRAM; with six DIMMs it keeps up."""
    def last(kind, dimms):
        p = with_overrides(load_profile("cx6-200g"), {"nvm.dimms": dimms})
        with fabric(prefix, kind, p) as f:
            env, node = setup(f, buffer_bytes=128 << 10)
            co = node.thread().coroutine()
            off = f.allocate("m0", 64 * 1024, align=1024)

            def go():
                for k in range(64):
                    co.write(gaddr(MN, off + 1024 * k), bytes(1024))
                yield co.sync()
                return env.now
            return run(env, go())
    p = load_profile("cx6-200g")
    media = 4 * 256 * 8 / p.nvm.write_gbps
    gap = 63 * (media - p.nic.req_write_ns)
    dram = last("dram", 1)
    assert last("nvm", 1) - dram == pytest.approx(gap, rel=0.05)
    assert last("nvm", 6) - dram < 0.02 * gap


# -- durability ----------------------------------------------------------------------------------

def _durability(prefix, steps, kind="nvm", profile=None):
    """Run ``steps(env, f, co, co2, off)`` (a generator) on a fresh rack, then power-fail m0; returns
    (word at off before the failure, after it, lines reverted, stats)."""
    with fabric(prefix, kind, profile) as f:
        env, node = setup(f)
        co = node.thread().coroutine()
        co2 = node.thread().coroutine()          # another thread: another QP to m0
        off = f.allocate("m0", 4096, align=4096)
        f.memory[MN].host64[off // 8] = 7        # loaded by the memory node itself: durable
        run(env, steps(env, f, co, co2, off))
        before = word(f, off)
        lost = power_fail(f, "m0")
        return before, word(f, off), lost, statistics(f, "m0")


def test_a_write_without_a_flush_is_lost_at_a_power_failure(prefix):
    def steps(env, f, co, co2, off):
        co.write(gaddr(MN, off), 42)
        yield co.sync()                          # completed: visible, but not durable
    before, after, lost, st = _durability(prefix, steps)
    assert (before, after, lost) == (42, 7, 1)
    assert (st.power_failures, st.writes, st.flushed, st.dirty_lines, st.lost_lines) == (1, 1, 0, 0, 1)


def test_a_read_after_the_write_on_its_qp_makes_it_durable(prefix):
    def steps(env, f, co, co2, off):
        co.write(gaddr(MN, off), 42)
        co.read(gaddr(MN, off + 1024), 1)        # FORD's flush: 1 byte, anywhere on the node, same QP
        yield co.sync()
    before, after, lost, st = _durability(prefix, steps)
    assert (before, after, lost) == (42, 42, 0)
    assert (st.writes, st.flushed, st.lost_lines) == (1, 1, 0)


def test_a_read_on_another_qp_flushes_nothing(prefix):
    def steps(env, f, co, co2, off):
        co.write(gaddr(MN, off), 42)
        yield co.sync()
        co2.read(gaddr(MN, off), 8)              # sees 42, but through another thread's QP
        yield co2.sync()
    before, after, lost, _ = _durability(prefix, steps)
    assert (before, after, lost) == (42, 7, 1)


def test_an_atomic_flushes_the_writes_before_it_and_its_own_write_needs_a_flush(prefix):
    def steps(env, f, co, co2, off):
        co.write(gaddr(MN, off), 42)
        co.cas(gaddr(MN, off + 64), 0, 5)        # a read of the line: drains the WRITE
        yield co.sync()
    before, after, lost, st = _durability(prefix, steps)
    assert (before, after) == (42, 42)           # the WRITE was flushed by the CAS
    assert lost == 1 and st.writes == 2 and st.flushed == 1   # the CAS's own write-back was not


def test_a_durable_value_overwritten_without_a_flush_comes_back(prefix):
    def steps(env, f, co, co2, off):
        co.write(gaddr(MN, off), 42)
        co.read(gaddr(MN, off), 8)
        yield co.sync()
        co.write(gaddr(MN, off), 99)
        yield co.sync()
    before, after, lost, _ = _durability(prefix, steps)
    assert (before, after, lost) == (99, 42, 1)


def test_a_multi_line_write_is_kept_or_lost_whole(prefix):
    kib = bytes(range(256)) * 4

    def unflushed(env, f, co, co2, off):
        co.write(gaddr(MN, off), kib)
        yield co.sync()

    def flushed(env, f, co, co2, off):
        co.write(gaddr(MN, off), kib)
        co.read(gaddr(MN, off), 1)
        yield co.sync()
    for steps, kept in ((unflushed, False), (flushed, True)):
        with fabric(prefix) as f:
            env, node = setup(f)
            co = node.thread().coroutine()
            off = f.allocate("m0", 4096, align=4096)
            run(env, steps(env, f, co, None, off))
            assert bytes(f.memory[MN].host[off:off + 1024]) == kib
            assert power_fail(f, "m0") == (0 if kept else 16)
            assert bytes(f.memory[MN].host[off:off + 1024]) == (kib if kept else bytes(1024))


def test_a_flush_after_a_power_failure_does_not_bring_a_lost_write_back(prefix):
    with fabric(prefix) as f:
        env, node = setup(f)
        co = node.thread().coroutine()
        off = f.allocate("m0", 4096, align=4096)

        def go():
            co.write(gaddr(MN, off), 42)
            yield co.sync()
            power_fail(f, "m0")                      # the node's process is killed here
            co.read(gaddr(MN, off), 8)
            yield co.sync()
            co.write(gaddr(MN, off + 8), 43)         # after the restart: flushed normally
            co.read(gaddr(MN, off), 1)
            yield co.sync()
        run(env, go())
        assert (word(f, off), word(f, off + 8)) == (0, 43)
        assert power_fail(f, "m0") == 0 and (word(f, off), word(f, off + 8)) == (0, 43)


def test_persist_on_placement_keeps_every_placed_write(prefix):
    p = with_overrides(load_profile("cx6-200g"), {"nvm.persist_on_placement": True})

    def steps(env, f, co, co2, off):
        assert nvm_shadow_of(f) is None
        co.write(gaddr(MN, off), 42)
        yield co.sync()
    before, after, lost, _ = _durability(prefix, steps, profile=p)
    assert (before, after, lost) == (42, 42, 0)


def test_dram_has_no_power_failure_model(prefix):
    with fabric(prefix, "dram") as f:
        assert f.nvm == {} and nvm_shadow_of(f) is None
        with pytest.raises(ValueError, match="has no persistent memory"):
            power_fail(f, "m0")


def test_pyverbs_write_then_read_flush(prefix):
    """The same rule through the pyverbs QP (shm/verbs.py): flushed survives, unflushed does not."""
    from shm.sim.env import Environment
    with fabric(prefix) as f:
        env = Environment(seed=1)
        r = build_rack(f, env)
        r.lmr.write((41).to_bytes(8, "little") + (42).to_bytes(8, "little"), 16, 0)
        raddr, rkey = r.rmr.addr, r.rmr.rkey

        def go():
            r.qp.post_send([rdma(IBV_WR_RDMA_WRITE, r.lmr, 0, 8, raddr, rkey, wr_id=1),
                            rdma(IBV_WR_RDMA_READ, r.lmr, 64, 1, raddr + 64, rkey, wr_id=2),   # flushes it
                            rdma(IBV_WR_RDMA_WRITE, r.lmr, 8, 8, raddr + 8, rkey, wr_id=3)])   # not flushed
            yield from wait_cqes(env, r.cq, 3)
        run_process(env, go())
        assert (r.rmr.read(8, 0), r.rmr.read(8, 8)) == ((41).to_bytes(8, "little"), (42).to_bytes(8, "little"))
        assert power_fail(f, "m0") == 1
        assert (r.rmr.read(8, 0), r.rmr.read(8, 8)) == ((41).to_bytes(8, "little"), bytes(8))
