"""Alias of :mod:`shm.sim.sync` (moved there in issue 42; see :mod:`nodes.runtime`)."""
import sys

import shm.sim.sync

sys.modules[__name__] = shm.sim.sync
