"""The simulation core: what every device model, node and rack runs on.

A discrete-event loop in integer virtual nanoseconds (:mod:`shm.sim.env`), the lax
synchronisation of several OS processes' clocks through shared memory (:mod:`shm.sim.sync`), the
dispatch of messages a node process receives (:mod:`shm.sim.router`) and the Perfetto trace of a
short run (:mod:`shm.sim.trace`). It sits inside ``shm`` so that the verbs, DMA, datagram and RPC
models above it import it downward: it uses only the fabric's leaves (segments, atomics, rings,
the NIC model's stage names) and nothing of ``nodes`` or ``cluster``. Its public low-level API is
documented in :mod:`shm.sim.env` ("The low-level API")."""
