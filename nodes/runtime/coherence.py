"""Alias of :mod:`nodes.devices.coherence` (moved there in issue 42; see :mod:`nodes.runtime`)."""
import sys

import nodes.devices.coherence

sys.modules[__name__] = nodes.devices.coherence
