"""Former home of the event core, kept so that code written against it keeps working.

The discrete-event core (virtual time, lax clock sync, the message router, the Perfetto trace)
moved below everything that uses it, to :mod:`shm.sim` (issue 42), and the host CPU-cache model to
:mod:`nodes.devices.coherence`. ``nodes.runtime.env``, ``.sync``, ``.router``, ``.trace`` and
``.coherence`` are aliases of those modules (the same module objects, so classes and constants are
identical); new code imports from the new places. docs/architecture.md has the floors."""
