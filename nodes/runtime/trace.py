"""Alias of :mod:`shm.sim.trace` (moved there in issue 42; see :mod:`nodes.runtime`)."""
import sys

import shm.sim.trace

sys.modules[__name__] = shm.sim.trace
