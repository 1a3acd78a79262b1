"""A DPU or DPA node shares its host's NIC: verbs of both queue on the same units and link."""

import pytest

from shm import nic
from shm.fabric import Fabric, NodeSpec
from shm.profile import load_profile

SHARED = (nic.D_TX, nic.D_RX, nic.D_REQ, nic.D_RESP, nic.D_ATOMIC, nic.D_SLOT0)
OWN = (nic.D_PCIE, nic.D_DMA, nic.D_DMA_RD, nic.D_DB0, nic.D_STATE)


def test_dpu_shares_its_hosts_nic_units_and_link_not_its_pcie_or_dma():
    nodes = [NodeSpec("cn0"), NodeSpec("mn0", "memory"), NodeSpec("dpu0", "dpu", 1 << 20, nic_of="cn0")]
    with Fabric.create(load_profile("bf3"), nodes) as fabric:
        d = fabric.descriptors
        for k in SHARED:
            assert d[2, k] == d[0, k]
        for k in OWN:
            assert d[2, k] != d[0, k]
        assert d[1, nic.D_REQ] != d[0, nic.D_REQ]


@pytest.mark.parametrize("nic_of, why", [("cn9", "names no other node"), ("dpu0", "names no other node")])
def test_nic_of_must_name_another_node(nic_of, why):
    with pytest.raises(ValueError, match=why):
        Fabric.create(load_profile("bf3"), [NodeSpec("cn0"), NodeSpec("dpu0", "dpu", 1 << 20, nic_of=nic_of)])


def test_a_memory_node_on_a_compute_nodes_server_shares_its_nic_and_its_pcie():
    """memory.same_server: mn<i> on cn<i>'s server (Sherman's testbed: each server one compute and
    one memory node): the NIC's units, link, atomics and its PCIe link to host memory are one."""
    nodes = [NodeSpec("cn0"), NodeSpec("cn1"), NodeSpec("mn0", "memory", nic_of="cn0", same_server=True),
             NodeSpec("mn1", "memory")]
    with Fabric.create(load_profile("cx5-100g"), nodes) as fabric:
        d = fabric.descriptors
        for k in SHARED + (nic.D_PCIE,):
            assert d[2, k] == d[0, k] and d[3, k] != d[0, k]
        for k in (nic.D_DB0, nic.D_STATE):
            assert d[2, k] != d[0, k]
    with pytest.raises(ValueError, match="same_server needs nic_of"):
        Fabric.create(load_profile("cx5-100g"), [NodeSpec("cn0"), NodeSpec("mn0", "memory", same_server=True)])


def test_same_server_racks_share_a_nic_and_run_slower_under_load():
    """The spec option, and what it does: two compute nodes READ from both memory nodes; with each
    memory node on a compute node's server its responses queue on the NIC that also sends that
    compute node's requests, so the same virtual window completes fewer operations."""
    from cluster.rack import ColocatedRack
    from cluster.scenario import scenario_from_dict
    ops = {}
    for same in (False, True):
        doc = {"rack": {"name": "t", "profile": "cx5-100g"},
               "compute": {"count": 2, "threads": 8, "coroutines": 4},
               "memory": {"count": 2, "same_server": same},
               "system": {"name": "race"},
               "workload": {"preset": "c", "recordcount": 2000, "requestdistribution": "uniform", "valuesize": 512},
               "step": [{"action": "load"}, {"action": "run", "duration_ms": 0.3}]}
        sc = scenario_from_dict(doc, source="t")
        assert [(n.name, n.host) for n in sc.spec.nodes()][2:4] == ([("mn0", "cn0"), ("mn1", "cn1")] if same else
                                                                     [("mn0", None), ("mn1", None)])
        ops[same] = ColocatedRack(sc).run().steps[-1].ops
    assert 0 < ops[True] < ops[False]


def test_the_warm_up_rack_of_a_same_server_rack_builds():
    """A rack of processes compiles its kernels on a one-compute-node warm-up rack first: its
    memory nodes keep their own NICs there (a second memory node would name a compute node the
    warm-up rack does not have)."""
    from cluster.scenario import scenario_from_dict, warmup_scenario
    sc = scenario_from_dict({"compute": {"count": 2}, "memory": {"count": 2, "same_server": True},
                             "system": {"name": "race"}}, source="t")
    warm = warmup_scenario(sc.spec)
    assert warm.spec.compute.count == 1 and not warm.spec.memory.same_server
    with Fabric.create(load_profile("cx6-200g"), [n.fabric_spec() for n in warm.spec.nodes()]):
        pass
