"""PD3 (prefetching data with DPUs for disaggregated memory) will live in this package.

Not a system on the rack yet: nothing here is registered. Its first part is
:mod:`.host_view`, the DPU-side set of keys believed cached on the host (PD3's Host View).
"""
