"""Models of devices on a node: the BlueField-3 DPA's memory caches (:mod:`nodes.devices.dpa_memory`)
and its cores' thread scheduler (:mod:`nodes.devices.dpa_core`), issue 22, and the cost of
contended cache lines on a host CPU (:mod:`nodes.devices.coherence`, PD3's and FlexKV-OP's
shared-memory paths; it lived in ``nodes/runtime`` before issue 42). See docs/devices.md."""
