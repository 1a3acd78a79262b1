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
