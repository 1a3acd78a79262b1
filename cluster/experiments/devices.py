"""``dmrack bench devices``: the device models' calibration table (issue 22, "Calibration"),
published beside emulated.

Every part builds a small co-located rig (fabric + environment in one process, deterministic in
virtual time) holding a host, its card's DPA node and, for the ping part, client compute nodes, and
measures through the device models -- :class:`nodes.devices.dpa_core.Dpa` threads on cores,
:class:`shm.dma.DmaEngine`, :class:`shm.udp.UdpNet` steering -- never by printing a profile
constant back. Where a number is a profile input by construction (the host copy rate), the row
says so.

Parts (``--only``):

* ``dpa-memory``: a DPA thread's load that misses every cache (DPA-Store §4.2.6: ~465 ns) and a
  load that hits L1, L2, L3 (no published value: emulated only).
* ``dma``: a 64 B DMA read of host memory by the DPA's engine (DPA-Store §4.2.6: ~910 ns), and the
  engine's bandwidth with large reads (emulated only).
* ``host-copy``: host -> DPA-memory copies by polling threads (DPA-Store §4.2.7: ~120 MB/s).
* ``udp-ping``: clients on compute nodes ping DPA threads, steered by port to each thread's RX
  queue; Mops by number of DPA threads (DPA-Store Fig. 14: 44.9 Mops at full threads on a B3140L;
  Fig. 9: grows with threads).

* ``dpu-forwarder``: PD3's Transfer Engine (:mod:`nodes.services.dpu_forwarder`) on one Arm core
  of ``dpu0`` (a DPU node sharing ``host0``'s NIC) moving 64 B records host -> DPU -> memory node
  ``mn0`` and back with no host core on the path, beside host-issued 64 B RDMA WRITEs from 16 host
  threads (PD3 §6.1 / Fig. A.1: 94 Mops with zero host cores vs 63 Mops on 16 host cores).
"""

from __future__ import annotations

import numpy as np

from cluster.experiments.figures import Figure
from cluster.experiments.rows import Row, bench, input_row
from cluster.experiments.bench_verbs import FabricRig
from nodes.devices.dpa_core import Dpa
from nodes.services.dpu_forwarder import OP_PUT, RECORD_BYTES, wire
from shm.coro import NodeRdma
from shm.dma import DmaEngine
from shm.fabric import NodeSpec, gaddr
from shm.profile import load_profile
from shm.udp import SteerRule, UdpNet
from shm.verbs import Context

PROFILE = "bf3"

PING_BYTES = 16           # payload of a ping and of its reply (a sequence number and a tag)
PING_PORT = 9000          # DPA thread i listens on PING_PORT + i


class Rig(FabricRig):
    """One host (``host0``), its card's DPA node (``dpa0``) and ``clients`` compute nodes, co-located."""

    def __init__(self, clients: int = 0, *, seed: int = 1, profile: str = PROFILE):
        self.profile = load_profile(profile)
        specs = [NodeSpec("host0", "compute", 32 << 20), NodeSpec("dpa0", "dpa", 8 << 20)]
        specs += [NodeSpec(f"cn{i}", "compute", 1 << 20) for i in range(clients)]
        self.cns = [f"cn{i}" for i in range(clients)]
        super().__init__(self.profile, specs, seed=seed)


def _in_window(env, warmup: int, window: int, read) -> list:
    """A one-item list that holds, once the run has passed ``warmup + window``, how much ``read()``
    (a running total: busy ns, charged ns) grew inside the measured window ``[warmup, warmup + window)``."""
    out = [0]

    def meter():
        yield env.timeout(warmup)
        start = read()
        yield env.timeout(window)
        out[0] = read() - start

    env.process(meter())
    return out


def _timed(env, gen_fn):
    """Run ``gen_fn()`` (a generator) alone as a process and return the virtual ns it took."""
    out = {}

    def timed():
        t0 = env.now
        yield from gen_fn()
        out["ns"] = env.now - t0

    env.process(timed())
    env.run()
    return out["ns"]


# --- DPA memory -----------------------------------------------------------------------------------

def dpa_load_costs() -> dict[str, int]:
    """Virtual ns of one 8 B load by a DPA thread (a process on a DpaCore) that misses every cache,
    and that hits L1, L2 (a line another thread loaded) and L3 (a line pushed out of L2 by 2 MiB of
    other lines, which the 3 MiB L3 still holds)."""
    with Rig() as rig:
        env = rig.env
        dpa = Dpa(env, rig.profile)
        a, b = dpa.thread(), dpa.thread()
        p = rig.profile.dpa
        out = {"miss": _timed(env, lambda: (yield a.load(0x1000, 8)))}
        out["L1 hit"] = _timed(env, lambda: (yield a.load(0x1000, 8)))
        out["L2 hit"] = _timed(env, lambda: (yield b.load(0x1000, 8)))
        # thread b streams (l2 + l3) / 2 bytes of other lines: 0x1000 leaves L2 (LRU), stays in L3
        stream = (p.l2_bytes + p.l3_bytes) // 2
        for off in range(0x100000, 0x100000 + stream, p.line_bytes):
            dpa.memory.access(b.id, off, 8)
        c = dpa.thread()
        out["L3 hit"] = _timed(env, lambda: (yield c.load(0x1000, 8)))
        return out


def dpa_memory(quick: bool, progress) -> list[Row]:
    progress("dpa-memory: loads by a DPA thread")
    c = dpa_load_costs()
    # bf3's dpa.memory_ns is this published 465 ns: the row checks the path, not the value (an input)
    rows = [input_row("dpa-memory", "DPA thread load, misses every cache", "8B", "ns", c["miss"], 465)]
    for level in ("L1 hit", "L2 hit", "L3 hit"):
        rows.append(Row("dpa-memory", f"DPA thread load, {level}", "8B", "ns", c[level]))
    return rows


# --- DMA ------------------------------------------------------------------------------------------

def dma_read_ns(nbytes: int = 64) -> int:
    """Virtual ns from posting one DMA read of ``nbytes`` of host memory on the DPA's engine to its
    completion, alone on the engine."""
    with Rig() as rig:
        eng = DmaEngine(rig.host, "dpa0", "host0")
        buf = np.zeros(nbytes, np.uint8)
        return _timed(rig.env, lambda: (yield eng.read(gaddr(0, 0), buf, nbytes)))


def dma_read_gbps(nbytes: int, count: int) -> float:
    """Gbit/s of ``count`` DMA reads of ``nbytes`` posted at once on the DPA's engine (the engine
    keeps ``dma.max_outstanding`` in flight); bytes over the time until the last completes."""
    with Rig() as rig:
        eng = DmaEngine(rig.host, "dpa0", "host0")
        buf = np.zeros(nbytes, np.uint8)

        def gen():
            done = [eng.read(gaddr(0, (i * nbytes) % (16 << 20)), buf, nbytes) for i in range(count)]
            for c in done:
                yield c

        ns = _timed(rig.env, gen)
        return count * nbytes * 8 / ns


def dma(quick: bool, progress) -> list[Row]:
    progress("dma: one 64 B read")
    prof = load_profile(PROFILE)
    # bf3's dma.latency_ns is this published 910 ns (an input)
    rows = [input_row("dma", "DPA DMA read of host memory", "64B", "ns", dma_read_ns(64), 910)]
    n = 64 if quick else 256
    for size in (64, 4096, 65536):
        progress(f"dma: bandwidth, {n} reads of {size} B")
        rows.append(Row("dma", f"DMA read bandwidth ({prof.dma.max_outstanding} in flight)", f"{size}B",
                        "Gbit/s", round(dma_read_gbps(size, n), 1)))
    return rows


# --- host copy --------------------------------------------------------------------------------------

def host_copy_mb_per_s(total: int, threads: int = 4, chunk: int = 64 << 10) -> float:
    """MB/s of ``threads`` polling DPA threads (processes on DpaCores) copying ``total`` bytes from host
    memory into DPA memory in ``chunk``-byte pieces. Each piece is a stall priced by
    ``DpaMemory.host_copy_ns`` at the thread's share of the aggregate rate (``dpa.host_copy_mb_per_s``
    / threads), then a store of its first line to DPA memory."""
    with Rig() as rig:
        env = rig.env
        dpa = Dpa(env, rig.profile)
        ths = [dpa.thread() for _ in range(threads)]
        share = total // threads

        def stitcher(th, base):
            done = 0
            while done < share:
                n = min(chunk, share - done)
                yield th.stall(dpa.memory.host_copy_ns(n) * threads)
                yield th.load(base + done, 8, write=True)
                done += n

        for i, th in enumerate(ths):
            env.process(stitcher(th, i * share))
        env.run()
        return total / env.now * 1e3


def host_copy(quick: bool, progress) -> list[Row]:
    total = (24 if quick else 192) * 1_000_000
    progress(f"host-copy: {total // 1_000_000} MB by 4 stitcher threads")
    return [input_row("host-copy", "host -> DPA memory, 4 polling threads (profile rate)", f"{total // 1_000_000}MB",
                      "MB/s", round(host_copy_mb_per_s(total), 1), 120)]


# --- UDP ping -----------------------------------------------------------------------------------------

def udp_ping(threads: int, *, clients_per_thread: int = 8, client_nodes: int = 8, warmup: int = 20_000,
             window: int = 50_000, seed: int = 1, profile: str = PROFILE) -> dict:
    """Closed-loop UDP pings to ``threads`` DPA threads; returns Mops in the window and the DPA
    cores' mean utilisation.

    Each client (a coroutine on one of ``client_nodes`` compute nodes) sends a ``PING_BYTES`` ping
    to ``dpa0`` port ``PING_PORT + k % threads``; the DPA's steering rules send port
    ``PING_PORT + i`` to thread i's RX queue. Thread i (a process on its DpaCore) waits on its queue,
    takes a datagram (one poll), loads its first line (the NIC put it in L2), computes
    ``dpa.packet_cycles`` (the profile's packet-handling assumption, never tuned to the published
    44.9 Mops) on its core as a doorbell burst and sends the reply to the client's queue."""
    with Rig(client_nodes, seed=seed, profile=profile) as rig:
        env, prof = rig.env, rig.profile
        net = UdpNet(rig.host)
        dpa = Dpa(env, prof)
        ping_ns = round(prof.dpa.packet_cycles / prof.dpa.ghz)
        end = warmup + window
        served = [0]
        qs = []
        for i in range(threads):
            qs.append(net.add_queue("dpa0", f"dpa{i}"))
        net.set_rules("dpa0", [SteerRule(PING_PORT + i, f"dpa{i}") for i in range(threads)])
        line = prof.dpa.line_bytes

        def server(i, th, q, sock):
            buf = i * line
            while env.now < end:
                got = yield q.wait(end - env.now)
                if not got:
                    break
                dg = q.poll()
                dpa.memory.install(buf, PING_BYTES)        # the NIC wrote the packet: L2
                yield th.load(buf, PING_BYTES)
                yield th.compute(ping_ns, doorbell=True)
                sock.send(dg.src_node, dg.src_port, dg.data, queue=f"r{dg.src_port}")
                if warmup <= env.now < end:
                    served[0] += 1

        # a doorbell per DPA thread (each rings its own send queue), and per client (the load
        # generator must not be what binds): no doorbell is shared, so no doorbell lock contention
        dctx = Context(rig.host, "dpa0", low_latency=0, doorbells=threads)
        for i, q in enumerate(qs):
            env.process(server(i, dpa.thread(), q, net.socket("dpa0", PING_PORT + i, context=dctx)))
        n_clients = threads * clients_per_thread
        cctx = {node: Context(rig.host, node, low_latency=0, doorbells=-(-n_clients // client_nodes))
                for node in rig.cns}

        def client(k, node):
            sock = net.socket(node, k, context=cctx[node])
            rq = net.add_queue(node, f"r{k}")
            port = PING_PORT + k % threads
            while env.now < end:
                sock.send("dpa0", port, k.to_bytes(PING_BYTES, "little"))
                got = yield rq.wait(end - env.now)
                if not got:
                    break
                rq.poll()

        for k in range(n_clients):
            env.process(client(k, rig.cns[k % client_nodes]))
        used = [c for c in dpa.cores if c.threads]
        busy = _in_window(env, warmup, window, lambda: sum(c.statistics().busy_ns for c in used))
        env.run(until=end + 20_000)
        util = busy[0] / (len(used) * window)
        return {"mops": served[0] / window * 1e3, "core_util": util, "cores": len(used),
                "drops": net.statistics().dropped}


def udp_ping_part(quick: bool, progress) -> list[Row]:
    counts = (1, 16, 64, 189) if quick else (1, 4, 16, 32, 64, 128, 189)
    window = 20_000 if quick else 100_000
    nic = load_profile(PROFILE).nic
    bound = nic.responder_units * 1e3 / nic.resp_recv_ns
    rows = []
    for n in counts:
        progress(f"udp-ping: {n} DPA threads")
        r = udp_ping(n, window=window)
        pub = 44.9 if n == load_profile(PROFILE).dpa.usable_threads else None
        rows.append(Row("udp-ping", "pings served by DPA threads", n, "Mops", round(r["mops"], 2), pub))
        rows.append(Row("udp-ping", "pings served by DPA threads", n, "DPA core utilisation",
                        round(r["core_util"], 2)))
    rows.append(Row("udp-ping", "dpa0 NIC receive bound: responder_units / resp_recv_ns", "-", "Mops",
                    round(bound, 2)))
    return rows


# --- DPU forwarder (PD3's Transfer Engine) ---------------------------------------------------------------

# ASSUMPTIONS of this part, stated once, chosen before any run (never tuned to PD3's numbers):
FWD_SERVER_CORES = 4      # memory-node cores executing batches (PD3 does not say how many it used)
FWD_MAX_BATCH = 256       # records per DMA poll of the host ring (PD3: "all available requests")
FWD_SLOTS = 8             # batches in flight between the DPU and the memory node
FWD_RING = 4096           # records in each host ring
HOST_DEPTH = 64           # host-issued baseline: WRITEs in flight per thread, one doorbell each.
                          # PD3 reports its baseline "consumes 16 CPU cores": its threads post
                          # without waiting on round trips. The model's 16 threads gain nothing
                          # beyond 32 in flight (51.2 Mops at 32 and 64); 64 is taken to be past
                          # that knee (the part also runs 8, SMART's bench-tool convention, where
                          # the threads idle on round trips)


class FwdRig(FabricRig):
    """``host0`` (compute), its DPU ``dpu0`` (sharing host0's NIC: own PCIe, DMA engine, doorbells)
    and the memory node ``mn0`` (exposed: the host-issued baseline writes into it)."""

    def __init__(self, *, seed: int = 1, profile: str = PROFILE):
        self.profile = load_profile(profile)
        specs = [NodeSpec("host0", "compute", 32 << 20), NodeSpec("dpu0", "dpu", 16 << 20, nic_of="host0"),
                 NodeSpec("mn0", "memory", 64 << 20)]
        super().__init__(self.profile, specs, expose=("mn0", "dpu0"), seed=seed)


class _HostTally:
    """The feeding host thread's CPU: counted (``cpu(ns)``), never delaying anyone -- PD3's
    benchmark keeps the request ring filled and does not count the filling."""

    def __init__(self):
        self.ns = 0

    def cpu(self, ns):
        self.ns += ns


def transfer_engine(*, warmup: int = 20_000, window: int = 80_000, record_ns: int | None = None,
                    server_cores: int = FWD_SERVER_CORES, max_batch: int = FWD_MAX_BATCH, slots: int = FWD_SLOTS,
                    ring: int = FWD_RING, seed: int = 1) -> dict:
    """64 B records through the Transfer Engine (one Arm core of dpu0) to mn0's server and back;
    returns Mops of responses reaching the host response ring inside the window, the Arm core's and
    the server cores' utilisation in it, the mean batch, host CPU ns per record spent feeding and
    draining the rings (not counted, PD3's setup) and the host threads on the transfer path.

    The host side is two uncounted processes: a feeder that refills the request ring every 100 ns
    (``HostClient.submit``, PUTs of 64 B records) and a drain that takes every response every 100 ns."""
    with FwdRig(seed=seed) as rig:
        env = rig.env
        pl = wire(rig.host, host_node="host0", dpu_node="dpu0", mem_node="mn0", ring_capacity=ring,
                  max_batch=max_batch, slots=slots, server_cores=server_cores, record_ns=record_ns)
        end = warmup + window
        tally = _HostTally()
        got = [0, 0]            # responses taken: in the window, all

        def feeder():
            k = 0
            while env.now < end:
                while pl.client.submit(k, OP_PUT, k, b"v", thread=tally):
                    k += 1
                yield 100

        def drain():
            while env.now < end:
                while pl.client.take(tally) is not None:
                    got[1] += 1
                    if warmup <= env.now:
                        got[0] += 1
                yield 100

        env.process(feeder())
        env.process(drain())
        pl.processes(end)
        fwd_busy = _in_window(env, warmup, window, lambda: pl.forwarder.busy_ns)
        srv_busy = _in_window(env, warmup, window, lambda: pl.server.busy_ns)
        env.run(until=end + 20_000)
        s = pl.forwarder.statistics()
        host = rig.fabric.node_index("host0")
        # a charge counts when it is made, so the last one may run past the window: at most 1.0
        return {"mops": got[0] / window * 1e3, "dpu_util": min(1.0, fwd_busy[0] / window),
                "server_util": min(1.0, srv_busy[0] / (server_cores * window)), "mean_batch": s.mean_batch,
                "status": s.status,
                "host_qps": sum(1 for node, _ in rig.host.qps if node == host),
                "dma_gbps": s.dma_bytes * 8 / (end + 20_000)}


def transfer_to_dpu(*, warmup: int = 20_000, window: int = 80_000, max_batch: int = FWD_MAX_BATCH,
                    ring: int = FWD_RING, seed: int = 1) -> dict:
    """PD3 Fig. A.1a: 64 B records from the host to DPU memory by the Transfer Engine's loop on one
    Arm core of dpu0: post one DMA read of every ready record of the host ring (up to
    ``max_batch``), wait for it -- PD3's loop runs its steps in order, each batch's DMA read before
    the work on it -- then read each record's header (``dpu.record_ns``). The host side is an
    uncounted feeder that refills the ring every 100 ns (PD3's benchmark keeps it full). Returns
    Mops of records landed in DPU memory in the window, the Arm core's utilisation, the mean batch."""
    from nodes.actors import Cores
    from shm.dmaring import DmaRing
    with FwdRig(seed=seed) as rig:
        env, d = rig.env, rig.profile.dpu
        req = DmaRing.layout(rig.fabric, "host0", ring, RECORD_BYTES)
        engine = DmaEngine(rig.host, "dpu0", "host0")
        core = Cores(env, 1, d.ghz)
        end = warmup + window
        tally = _HostTally()
        got = [0, 0, 0]          # records landed in the window, batches in the window, busy ns in the window
        record = b"\x01" * (RECORD_BYTES - 8)

        def feeder():
            while env.now < end:
                while req.host_push(record, thread=tally):
                    pass
                yield 100

        def loop():
            while env.now < end:
                t0, busy0 = env.now, core.busy_ns
                core.charge(d.poll_ns + d.post_ns)                  # post the DMA read of the ready records
                yield 0                                             # the post leaves after that work
                c = req.device_poll(engine, max_batch)
                yield c
                n = len(c.records)
                if n:
                    core.charge(d.post_ns + d.record_ns * n)       # the slots' free write, each header
                    yield 0
                if warmup <= t0 and env.now <= end:
                    got[0] += n
                    got[1] += 1
                    got[2] += core.busy_ns - busy0

        env.process(feeder())
        env.process(loop())
        env.run(until=end + 20_000)
        return {"mops": got[0] / window * 1e3, "dpu_util": min(1.0, got[2] / window),
                "mean_batch": got[0] / max(got[1], 1)}


def host_rdma_writes(threads: int = 16, *, depth: int = HOST_DEPTH, warmup: int = 20_000, window: int = 80_000,
                     seed: int = 1, target: str = "mn0") -> dict:
    """64 B RDMA WRITEs from ``threads`` host threads of host0 (one QP each, the profile's CPU
    costs, ``depth`` in flight, one doorbell per WRITE) to random lines of ``target`` (mn0, or the
    DPU's memory dpu0 through the card's NIC); returns Mops and the host cores busy in the window
    (the threads' charged CPU over the window)."""
    with FwdRig(seed=seed) as rig:
        env = rig.env
        m = rig.fabric.node_index(target)
        lines = rig.fabric.nodes[m].memory_bytes // 64 // 2          # the upper half stays clear of allocations
        base_line = lines
        end = warmup + window
        done = [0]
        node = NodeRdma(rig.host, "host0", policy="per_thread_qp")
        payload = b"\x01" * RECORD_BYTES

        def client(co, rng):
            while env.now < end:
                for _ in range(depth):
                    co.write(gaddr(m, (base_line + int(rng.integers(lines))) * 64), payload)
                    co.post()
                yield co.sync()
                if warmup <= env.now < end:
                    done[0] += depth

        procs = [env.process(client(node.thread().coroutine(), np.random.default_rng(k))) for k in range(threads)]
        cpu = _in_window(env, warmup, window, lambda: sum(p.statistics().charged_ns for p in procs))
        env.run(until=end + 20_000)
        return {"mops": done[0] / window * 1e3, "host_cores_busy": cpu[0] / window}


TE_A1A = "Transfer Engine (1 DPU Arm core), 64 B records host -> DPU memory"
HOST_A1A = "host-issued RDMA WRITE 64 B -> DPU memory, a QP per thread"
TE_RT = "Transfer Engine, 64 B records host -> DPU -> mn0 -> host (memory API round trip)"
HOST_RT = "host-issued RDMA WRITE 64 B -> mn0, a QP per thread"


def dpu_forwarder_part(quick: bool, progress) -> list[Row]:
    # the Transfer Engine delivers hundreds of records at a time, a host thread 64 WRITEs per round:
    # the windows must hold many of them
    warm, win = (20_000, 150_000) if quick else (50_000, 300_000)
    te_win = 200_000 if quick else 1_000_000
    progress("dpu-forwarder: Transfer Engine, host -> DPU, 1 Arm core")
    a = transfer_to_dpu(warmup=warm, window=te_win)
    rows = [Row("dpu-forwarder", TE_A1A, "0 host cores", "Mops", round(a["mops"], 2), 94),
            Row("dpu-forwarder", TE_A1A, "0 host cores", "DPU Arm core utilisation", round(a["dpu_util"], 2)),
            Row("dpu-forwarder", TE_A1A, "0 host cores", "mean batch (records)", round(a["mean_batch"], 1))]
    for depth in ((8, HOST_DEPTH) if quick else (8, 32, HOST_DEPTH)):
        progress(f"dpu-forwarder: host-issued RDMA WRITE -> DPU, 16 host threads, depth {depth}")
        h = host_rdma_writes(16, depth=depth, warmup=warm, window=win, target="dpu0")
        x = f"16 host threads, depth {depth}"
        pub = depth == HOST_DEPTH
        rows += [Row("dpu-forwarder", HOST_A1A, x, "Mops", round(h["mops"], 2), 63 if pub else None),
                 Row("dpu-forwarder", HOST_A1A, x, "host cores busy", round(h["host_cores_busy"], 2),
                     16 if pub else None)]
    rows.append(Row("dpu-forwarder", "Transfer Engine / host-issued, host -> DPU", "-", "ratio",
                    round(a["mops"] / h["mops"], 2), round(94 / 63, 2)))
    x = f"16 host threads, depth {HOST_DEPTH}"
    progress("dpu-forwarder: Transfer Engine, host -> DPU -> mn0 -> host")
    te = transfer_engine(warmup=warm, window=te_win)
    rows += [Row("dpu-forwarder", TE_RT, "0 host cores", "Mops", round(te["mops"], 2)),
             Row("dpu-forwarder", TE_RT, "0 host cores", "DPU Arm core utilisation", round(te["dpu_util"], 2)),
             Row("dpu-forwarder", TE_RT, "0 host cores", "memory-node core utilisation", round(te["server_util"], 2)),
             Row("dpu-forwarder", TE_RT, "0 host cores", "mean batch (records)", round(te["mean_batch"], 1)),
             Row("dpu-forwarder", TE_RT, "0 host cores", "host QPs on the transfer path", te["host_qps"], 0)]
    progress(f"dpu-forwarder: host-issued RDMA WRITE -> mn0, 16 host threads, depth {HOST_DEPTH}")
    r = host_rdma_writes(16, depth=HOST_DEPTH, warmup=warm, window=win)
    rows += [Row("dpu-forwarder", HOST_RT, x, "Mops", round(r["mops"], 2)),
             Row("dpu-forwarder", HOST_RT, x, "host cores busy", round(r["host_cores_busy"], 2), 16),
             # PD3 Appendix A: to remote memory the Transfer Engine "achieves the same throughput as
             # host-issued RDMA consuming 16 host CPU cores" (no number in the text)
             Row("dpu-forwarder", "Transfer Engine / host-issued, to remote memory", "-", "ratio",
                 round(te["mops"] / r["mops"], 2), 1.0)]
    return rows


FIGURES = [
    Figure("udp-ping", "udp-ping", "Mops", "UDP pings served by DPA threads (bf3; DPA-Store Fig. 9/14)",
           "DPA threads", "throughput (Mops)", series=("pings served by DPA threads",), xs="numeric"),
    Figure("dpu-forwarder", "dpu-forwarder", "Mops",
           "PD3 Fig. A.1: 64 B records, Transfer Engine (0 host cores) vs host-issued RDMA (bf3)",
           "host cores / threads", "throughput (Mops)", kind="bar", xs="category",
           series=(TE_A1A, HOST_A1A, TE_RT, HOST_RT)),
]

EXPERIMENTS = {
    "dpa-memory": dpa_memory,
    "dma": dma,
    "host-copy": host_copy,
    "udp-ping": udp_ping_part,
    "dpu-forwarder": dpu_forwarder_part,
}


def setup(quick: bool) -> dict:
    """The rigs of this bench, for the run record (cluster.experiments.provenance)."""
    return {"profile": PROFILE, "seed": 1,
            "spec": "device rigs: host0, its DPA node dpa0 and client compute nodes in one process",
            "scale": "fewer thread counts, shorter windows" if quick else "full sweeps",
            "assumption": (f"a ping costs {load_profile(PROFILE).dpa.packet_cycles} DPA cycles of CPU work "
                           f"(no published count); the DPU "
                           f"forwarder's memory node executes on {FWD_SERVER_CORES} cores, batches of up to "
                           f"{FWD_MAX_BATCH} records, {FWD_SLOTS} in flight; the host baseline keeps {HOST_DEPTH} "
                           f"WRITEs in flight per thread")}


EXPERIMENT = bench("devices", title="device calibration: DPA memory, DMA, host copy, UDP ping on DPA threads "
                                    "(DPA-Store), DPU forwarder (PD3)",
                   parts=EXPERIMENTS, setup=setup, figures=FIGURES)
