import numpy as np
import pytest

from nodes.runtime.env import Environment
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
