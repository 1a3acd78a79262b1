"""Reference services built from the emulator's device models (issue 22): actors that a rack, a
bench or a test wires up from explicit objects (environment, cores, DMA engines, rings, QPs), so
they do not depend on how a node was started. ``dpu_forwarder``: PD3's Transfer Engine."""
