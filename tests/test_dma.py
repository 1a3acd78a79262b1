import numpy as np
import pytest

from shm.sim.env import Environment
from shm.dma import DmaEngine, DmaError
from shm.fabric import Fabric, NodeSpec, gaddr
from shm.profile import load_profile
from shm.verbs import VerbsHost


@pytest.fixture
def rack():
    fabric = Fabric.create(load_profile("bf3"), [NodeSpec("host0"), NodeSpec("dpa0", "dpa", 1 << 20)])
    env = Environment(seed=1)
    try:
        yield fabric, env, DmaEngine(VerbsHost(fabric, env), "dpa0", "host0")
    finally:
        fabric.close()


def test_dma_write_then_read_round_trips_with_modelled_latency(rack):
    fabric, env, dma = rack
    got = np.zeros(16, np.uint8)
    times = []

    def dpa_thread():
        yield dma.write(gaddr(0, 4096), b"loading zone 123")
        times.append(env.now)
        yield dma.read(gaddr(0, 4096), got, 16)
        times.append(env.now)

    env.process(dpa_thread())
    env.run()
    assert got.tobytes() == b"loading zone 123"
    lat = fabric.profile.dma.latency_ns
    assert lat <= times[0] < lat + 100
    assert times[1] - times[0] >= lat


def test_concurrent_dma_queue_on_the_engine(rack):
    fabric, env, dma = rack
    done = []

    def big(i):
        yield dma.write(gaddr(0, i * (64 << 10)), np.zeros(64 << 10, np.uint8))
        done.append(env.now)

    for i in range(4):
        env.process(big(i))
    env.run()
    # 64 KiB at the engine's bandwidth: the fourth finishes about three transfers after the first
    per = (64 << 10) * 8 / fabric.profile.dma.gbps
    assert done[3] - done[0] == pytest.approx(3 * per, rel=0.05)


def test_dma_outside_host_memory_is_refused(rack):
    fabric, env, dma = rack
    with pytest.raises(DmaError, match="outside the host memory"):
        dma.read(gaddr(0, fabric.nodes[0].memory_bytes - 8), np.zeros(16, np.uint8), 16)
    with pytest.raises(DmaError, match="reaches only the host"):
        dma.write(gaddr(1, 0), b"x")


# ------------------------------------------------------------------ scatter-gather, completions, limits

from shm.dma import DMA_BAD_ADDRESS, DMA_BAD_BUFFER, DMA_OK, DmaCompletion  # noqa: E402


def test_scatter_gather_write_lands_every_element_at_the_effect_time(rack):
    fabric, env, dma = rack
    host = fabric.memory[0].host
    buf = np.frombuffer(b"AAAABBBBBBBBCCCC", np.uint8)
    seen = {}

    def dpa_thread():
        c = dma.write_sg([(gaddr(0, 8192), 0, 4), (gaddr(0, 100), 4, 8), (gaddr(0, 70000), 12, 4)], buf)
        assert isinstance(c, DmaCompletion) and c.succeeded and c.nbytes == 16
        env.schedule(c.effect_ns - 1, lambda: seen.setdefault("before", bytes(host[8192:8196])))
        env.schedule(c.effect_ns, lambda: seen.setdefault("at", bytes(host[100:108])))
        got = yield c
        assert got is c and env.now == c.done_ns
        seen["done"] = env.now

    env.process(dpa_thread())
    env.run()
    assert seen["before"] == bytes(4)            # nothing before the effect
    assert seen["at"] == b"BBBBBBBB"              # the middle element, at the effect time
    assert bytes(host[8192:8196]) == b"AAAA" and bytes(host[70000:70004]) == b"CCCC"
    lat = fabric.profile.dma.latency_ns
    assert lat <= seen["done"] < lat + 5          # one descriptor: one latency, not three


def test_scatter_gather_read_gathers_into_the_local_buffer(rack):
    fabric, env, dma = rack
    host = fabric.memory[0].host
    host[0:4] = np.frombuffer(b"head", np.uint8)
    host[5000:5004] = np.frombuffer(b"tail", np.uint8)
    into = np.zeros(12, np.uint8)

    def dpa_thread():
        c = dma.read_sg([(gaddr(0, 5000), 8, 4), (gaddr(0, 0), 2, 4)], into)
        yield c
        assert env.now == c.done_ns

    env.process(dpa_thread())
    env.run()
    assert bytes(into) == b"\0\0head\0\0tail"


def test_a_read_and_a_write_overlap_but_two_writes_queue(rack):
    fabric, env, dma = rack
    big = np.zeros(256 << 10, np.uint8)
    per = (256 << 10) * 8 / fabric.profile.dma.gbps
    done = {}

    def post(kind, i):
        c = dma.write(gaddr(0, i * (256 << 10)), big) if kind == "w" else dma.read(gaddr(0, 0), big, 256 << 10)
        yield c
        done[(kind, i)] = env.now

    for job in (("w", 0), ("r", 1), ("w", 2)):
        env.process(post(*job))
    env.run()
    assert done[("r", 1)] == pytest.approx(done[("w", 0)], abs=2)          # its own calendar
    assert done[("w", 2)] - done[("w", 0)] == pytest.approx(per, rel=0.02)  # same direction: queued


def test_outstanding_limit_makes_further_posts_wait(rack):
    fabric, env, dma = rack
    dma.max_outstanding = 2
    done = []

    def dpa_thread():
        cs = [dma.write(gaddr(0, 64 * i), b"x" * 8) for i in range(5)]
        assert dma.in_flight() == 5 and dma.waited == 3
        for c in cs:
            yield c
            done.append(env.now)

    env.process(dpa_thread())
    env.run()
    lat = fabric.profile.dma.latency_ns
    # two at a time: completions come in pairs, one latency apart
    assert done[1] - done[0] < 5 and done[2] - done[0] >= lat and done[4] - done[2] >= lat
    assert done[4] >= 3 * lat


def test_bad_scatter_gather_is_an_error_status_not_a_crash(rack):
    fabric, env, dma = rack
    out = []

    def dpa_thread():
        size = fabric.nodes[0].memory_bytes
        c = dma.write_sg([(gaddr(0, 0), 0, 4), (gaddr(0, size - 2), 4, 4)], b"12345678")
        out.append((c.status, (yield c).succeeded, env.now))
        c = dma.read_sg([(gaddr(1, 0), 0, 4)], np.zeros(4, np.uint8))
        out.append((c.status, c.error, env.now))
        c = dma.read_sg([(gaddr(0, 0), 2, 4)], np.zeros(4, np.uint8))
        out.append((c.status, c.error))
        yield dma.write(gaddr(0, 0), b"ok")             # the engine still works
        out.append(env.now)

    env.process(dpa_thread())
    env.run()
    assert out[0] == (DMA_BAD_ADDRESS, False, 0)
    assert out[1][0] == DMA_BAD_ADDRESS and "reaches only the host" in out[1][1]
    assert out[2][0] == DMA_BAD_BUFFER
    assert bytes(fabric.memory[0].host[0:4]) == b"ok\0\0"    # the refused write copied nothing
    assert out[3] > 0 and dma.errors == 3 and DMA_OK == 0
