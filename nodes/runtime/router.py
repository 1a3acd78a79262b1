"""Alias of :mod:`shm.sim.router` (moved there in issue 42; see :mod:`nodes.runtime`)."""
import sys

import shm.sim.router

sys.modules[__name__] = shm.sim.router
