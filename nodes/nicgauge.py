"""Utilisation of one node's NIC, link and PCIe, sampled from the shared fabric table.

The NIC model books every resource in the fabric table, whichever process issues the verb, so a
memory node's responder units are busy although the memory node's process never runs a verb.
Each node process samples *its own* node's resources and writes the fractions into its stats slot;
the dashboard then reads one number per node instead of knowing the fabric's layout.

Utilisation over a sampling interval = booked server time added in the interval / (servers x
virtual time elapsed). Bookings can lie slightly in the future (a request queued behind others),
so a saturated resource can read a little above 1 for one sample; the gauge clips to [0, 1].
"""

from __future__ import annotations

from typing import NamedTuple


class NicUtilisation(NamedTuple):
    nic_util: float       # the busier of the requester and responder processing units
    link_util: float      # the busier direction of the node's port
    pcie_util: float


_GROUPS = {"nic_util": ("req_pu", "resp_pu"), "link_util": ("tx", "rx"), "pcie_util": ("pcie",)}


class NicGauge:
    """Samples one node's resources (see the module docstring)."""

    def __init__(self, fabric, node):
        self.fabric = fabric
        self.node = fabric.nodes[fabric.node_index(node)].name
        self._layout = fabric.layout.resources
        self._last_busy = {r: self._busy(r) for group in _GROUPS.values() for r in group}
        self._last_vt = None
        self.last = NicUtilisation(0.0, 0.0, 0.0)

    def _busy(self, resource: str) -> float:
        st = self._layout.statistics(self.fabric.table, f"{self.node}.{resource}")
        return st.busy_ns / st.servers

    def sample(self, vnow_ns: int) -> NicUtilisation:
        """Utilisation since the previous sample (the previous value if no virtual time passed)."""
        busy = {r: self._busy(r) for r in self._last_busy}
        if self._last_vt is not None and vnow_ns > self._last_vt:
            dt = vnow_ns - self._last_vt
            vals = [min(1.0, max(0.0, max((busy[r] - self._last_busy[r]) / dt for r in group)))
                    for group in _GROUPS.values()]
            self.last = NicUtilisation(*vals)
        if self._last_vt is None or vnow_ns > self._last_vt:
            self._last_busy = busy
            self._last_vt = vnow_ns
        return self.last

    def statistics(self) -> NicUtilisation:
        return self.last
