"""Models of the offload devices on a node (issue 22): for now the BlueField-3 DPA's memory caches
(:mod:`nodes.devices.dpa_memory`) and its cores' thread scheduler (:mod:`nodes.devices.dpa_core`).
The DPU/DPA node roles that use them are still to come. See docs/devices.md."""
