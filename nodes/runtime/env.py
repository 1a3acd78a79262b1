"""Alias of :mod:`shm.sim.env` (moved there in issue 42; see :mod:`nodes.runtime`)."""
import sys

import shm.sim.env

sys.modules[__name__] = shm.sim.env
