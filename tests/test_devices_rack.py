"""DPU and DPA nodes in a rack: spec checks, the dpa-kv reference service co-located and as processes.

The service is clients on compute nodes -> UDP to cn0 -> cn0's NIC steers by port -> a DPA thread
of dpa0 -> reply; so a run exercises the device roles, steering, mirroring, datagrams between
processes and the device counters of the stats plane.
"""

from __future__ import annotations

import os
import signal
import time

import psutil
import pytest

from cluster.correctness.checker import check
from cluster.rack import ColocatedRack
from cluster.scenario import scenario_from_dict
from cluster.spec import SpecError, spec_from_dict
from cluster.supervisor import Supervisor
from shm.segment import list_segments, owner_pid_of
from tests.test_rack import rack_dict, run

LOAD = {"action": "load"}


def device_dict(*steps, threads=4, dpu=True, mirror=False, records=200, **kw):
    d = rack_dict(*steps, compute=1, threads=2, coroutines=2, records=records, **kw)
    d["client"] = {"count": 2, "memory": "8MiB"}
    d["rack"]["profile"] = "bf3"
    d["memory"]["count"] = 1
    d["dpa"] = {"hosts": ["cn0"], "threads": threads, "memory": "8MiB"}
    if dpu:
        d["dpu"] = {"hosts": ["cn0"], "cores": 2, "memory": "4MiB"}
    if mirror:
        d["steer"] = [{"node": "cn0", "port": 9000, "port_hi": 9255, "target": "dpa0", "mirror": "dpu0"}]
    d["system"] = {"name": "dpa-kv"}
    d["workload"]["valuesize"] = 32
    return d


def _mine():
    return sorted(s for s in list_segments() if owner_pid_of(s) == os.getpid())


def _spec_error(d) -> str:
    with pytest.raises(SpecError) as e:
        spec_from_dict(d, source="rack.toml")
    msg = str(e.value)
    assert "\n" not in msg
    return msg


# -- the spec --------------------------------------------------------------------------------------

def test_device_nodes_are_named_after_their_order_and_share_their_hosts_card():
    spec = spec_from_dict(device_dict(), source="rack.toml")
    nodes = {n.name: n for n in spec.nodes()}
    assert nodes["dpu0"].role == "dpu" and nodes["dpu0"].host == "cn0"
    assert nodes["dpa0"].role == "dpa" and nodes["dpa0"].fabric_spec().nic_of == "cn0"
    assert [n.name for n in spec.nodes()][-1] == "mgr"


@pytest.mark.parametrize("change, names", [
    (lambda d: d["dpa"].update(hosts=["cn7"]), "dpa.hosts[1] = \"cn7\": no such compute node"),
    (lambda d: d["dpu"].update(hosts=["cn0", "cn0"]), "dpu.hosts[2] = \"cn0\": listed twice"),
    (lambda d: d["dpa"].update(threads=190), "dpa.threads = 190: must be an integer from 1 to 189"),
    (lambda d: d["dpu"].update(cores=17), "dpu.cores = 17"),
    (lambda d: d["rack"].update(profile="cx6-200g"), "has no [dpu] table"),
    (lambda d: d.update(steer=[{"node": "mn0", "port": 1, "target": "dpa0"}]),
     "steer[1].target = \"dpa0\": unknown steering target"),
    (lambda d: d.update(steer=[{"node": "cn0", "port": 1, "target": "dpu0", "mirror": "dpx0"}]),
     "steer[1].mirror = \"dpx0\": unknown steering target"),
    (lambda d: d.update(steer=[{"node": "cn0", "port": 70000, "target": "dpa0"}]), "steer[1].port = 70000"),
    (lambda d: d.pop("dpa"), "dpa.hosts = [] (default): system 'dpa-kv' runs server actors on DPA nodes"),
])
def test_bad_device_specs_are_one_line_naming_the_key(change, names):
    d = device_dict()
    change(d)
    assert names in _spec_error(d)


# -- co-located ------------------------------------------------------------------------------------

def test_dpa_kv_serves_a_linearizable_history_from_dpa_threads():
    from workloads.stress import StressWorkload
    rack = ColocatedRack(scenario_from_dict(device_dict(LOAD, run(0.2), records=32), source="t.toml"),
                         history=50_000)
    rack.compiled.workloads["default"] = StressWorkload(keys=64, distribution="zipfian", value_size=32)
    res = rack.run()
    assert res.steps[-1].ops > 100
    assert check(rack.history_ops).verdict == "ok"
    dpa = next(c for c in rack.actor_contexts if c.name == "dpa0")
    assert len(dpa.dpa.threads) == 4                               # one server per [dpa] thread
    counts = [q.statistics().received for q in dpa.queues]
    assert sum(counts) >= res.steps[-1].ops and min(counts) > 0     # the port spread reached every thread
    assert sum(core.statistics().busy_ns for core in dpa.dpa.cores) > 0


def test_a_mirror_rule_copies_every_request_to_the_dpu_queue():
    rack = ColocatedRack(scenario_from_dict(device_dict(LOAD, run(0.05), mirror=True), source="t.toml"))
    res = rack.run()
    net = rack.udp
    copies = net.queues["dpu0.rx"].statistics()
    requests = sum(q.statistics().received for q in net.queues.values() if q.id.startswith("dpa0.t"))
    assert requests >= res.steps[-1].ops
    assert copies.received + copies.dropped == requests          # every request, copied once
    assert net.statistics().mirrored == copies.received


# -- processes ---------------------------------------------------------------------------------------

def test_a_rack_of_processes_runs_the_dpa_service_and_publishes_device_counters():
    before = set(_mine())
    sup = Supervisor(scenario_from_dict(device_dict(LOAD, run(0.3), mirror=True), source="t.toml"), quiet=True)
    assert sup.run() == 0, sup.deaths
    res = sup.results
    assert res.steps[-1].ops > 100
    nodes = {n.node: n for n in res.nodes}
    dpa, dpu = nodes["dpa0"], nodes["dpu0"]
    assert dpa.role == "dpa" and dpa.dpa_threads == 4 and dpa.cpu_cores == 16 and dpa.cpu_busy_ns > 0
    assert dpu.role == "dpu" and dpu.dpa_threads == 0                # the DPU runs no actor here: passive
    assert dpu.cpu_cores == 2 and dpu.cpu_busy_ns == 0                # but it has its [dpu] cores (idle)
    # active clients: the client nodes ran the workload, the server's host ran none of it
    assert nodes["cl0"].ops > 0 and nodes["cl1"].ops > 0 and nodes["cn0"].ops == 0
    assert set(_mine()) == before


def test_killing_the_dpa_process_is_reported_and_leaves_no_segment():
    before = set(_mine())
    d = device_dict(LOAD, run(0))                                     # runs until stopped
    sup = Supervisor(scenario_from_dict(d, source="t.toml"), quiet=True)
    import threading

    def kill_dpa():
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            for p in psutil.Process().children(recursive=True):
                try:
                    if p.name().startswith("dmrack-dpa0-"):
                        time.sleep(1.0)
                        p.send_signal(signal.SIGKILL)
                        return
                except psutil.NoSuchProcess:
                    pass
            time.sleep(0.05)
    t = threading.Thread(target=kill_dpa, daemon=True)
    t.start()
    status = sup.run()
    t.join()
    assert status == 1
    assert any(x.node == "dpa0" and "SIGKILL" in x.how for x in sup.deaths), sup.deaths
    assert set(_mine()) == before
    assert not [p for p in psutil.Process().children(recursive=True) if p.status() != psutil.STATUS_ZOMBIE]


# -- the DPU forwarder in a rack ----------------------------------------------------------------------

class _FwdClient:
    """GET and PUT through the host rings of cn0: a coroutine pushes its request and polls the
    response ring, keeping others' responses for them (one dict per node)."""

    def __init__(self, client, thread, inbox):
        self.client, self.thread, self.inbox = client, thread, inbox
        self.env = thread.env

    def _call(self, op, key, value=b""):
        from nodes.services.dpu_forwarder import OP_GET  # noqa: F401 - the ops are the service's
        tag = self.inbox.setdefault("next", 1)
        self.inbox["next"] = tag + 1
        kid = int.from_bytes(key[:8], "little")
        while not self.client.submit(tag, op, kid, value, thread=self.thread):
            yield self.env.timeout(500)                      # the request ring is full
        while tag not in self.inbox:
            r = self.client.take(self.thread)
            while r is not None:
                self.inbox[r.tag] = r
                r = self.client.take(self.thread)
            if tag not in self.inbox:
                yield self.env.timeout(200)                  # a host thread polling its ring
        return self.inbox.pop(tag)

    def get(self, co, key):
        from nodes.services.dpu_forwarder import OP_GET
        r = yield from self._call(OP_GET, key)
        return None if not any(r.value) else r.value

    def put(self, co, key, value):
        from nodes.services.dpu_forwarder import OP_PUT
        yield from self._call(OP_PUT, key, value)

    def insert(self, co, key, value):          # the load inserts fresh keys: a PUT
        yield from self.put(co, key, value)
        return True

    def update(self, co, key, value):          # YCSB updates keys it loaded: a PUT
        yield from self.put(co, key, value)
        return True

    def statistics(self):
        return None


def _fwd_dpu(ctx):
    from nodes.services import dpu_forwarder as f
    fwd = f.dpu_side(ctx, ctx.layout["fwd"])
    ctx.rings += [fwd.req_ring, fwd.resp_ring]          # their depth goes on the dashboard
    return [fwd.run(stop=ctx.stopped)]


def _fwd_memory(ctx):
    from nodes.services import dpu_forwarder as f
    return f.server_side(ctx, ctx.layout["fwd"]).runs()


from nodes.systems.api import System  # noqa: E402


class FwdKV(System):
    """A test service: cn0's clients -> host rings -> dpu0's Transfer Engine -> mn0's CPU (GET/PUT
    of 32 B values keyed by the key id) and back. Not a full KV (no insert/delete semantics)."""

    name = "fwd-kv-test"
    roles = ("compute", "memory")
    servers = {"dpu": _fwd_dpu, "memory": _fwd_memory}

    @classmethod
    def setup(cls, fabric, memory_nodes, options, capacity):
        from nodes.services.dpu_forwarder import rack_layout
        return {"fwd": rack_layout(fabric, host="cn0", dpu="dpu0", mem="mn0", ring_capacity=256, max_batch=32,
                                   slots=4, lanes=2, table_slots=1024)}

    @classmethod
    def client(cls, fabric, layout, thread, options):
        from nodes.services.dpu_forwarder import host_side
        inbox = thread.owner.__dict__.setdefault("_fwd_inbox", {})
        return _FwdClient(host_side(fabric, layout["fwd"]), thread, inbox)


def fwd_dict(*steps):
    d = rack_dict(*steps, compute=1, threads=2, coroutines=4, records=64)
    d["rack"]["profile"] = "bf3"
    d["memory"] = {"count": 1, "memory": "32MiB", "cores": 2}
    d["dpu"] = {"hosts": ["cn0"], "cores": 1, "memory": "8MiB"}
    d["system"] = {"name": "tests.test_devices_rack:FwdKV"}
    d["workload"]["valuesize"] = 32
    return d


def test_the_dpu_forwarder_serves_a_rack_of_processes_with_a_linearizable_history():
    """Host threads of cn0 -> DMA-read by dpu0's Arm core -> one RDMA WRITE per batch to mn0's CPU
    -> responses RDMA-written to dpu0 -> DMA-written to cn0's response ring: three processes."""
    before = set(_mine())
    sup = Supervisor(scenario_from_dict(fwd_dict(LOAD, run(0.3)), source="t.toml"), quiet=True, history=20_000)
    assert sup.run() == 0, sup.deaths
    res = sup.results
    assert res.steps[0].ops == 64 and res.steps[-1].ops > 200
    nodes = {n.node: n for n in res.nodes}
    assert nodes["dpu0"].dma_bytes > 0 and nodes["dpu0"].cpu_busy_ns > 0 and nodes["dpu0"].cpu_cores == 1
    assert nodes["mn0"].cpu_busy_ns > 0 and nodes["mn0"].cpu_cores == 2
    assert check(sup.history_ops).verdict == "ok"
    assert set(_mine()) == before


def test_the_dpu_forwarder_co_located_gives_the_same_operations():
    rack = ColocatedRack(scenario_from_dict(fwd_dict(LOAD, run(0.3)), source="t.toml"))
    res = rack.run()
    assert res.steps[0].ops == 64 and res.steps[-1].ops > 200
