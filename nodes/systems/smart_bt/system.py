"""SMART-BT's System: Sherman's with SMART's techniques on, per-line leaves, and the options of
speculative lookup (the client, :mod:`.client`, has the design)."""

from __future__ import annotations

from nodes.systems.api import Option
from nodes.systems.sherman import ShermanSystem
from nodes.systems.smart_ht.system import SCALED_TUNER

from .client import SPEC_CACHE_SLOTS, SmartBTClient


class SmartBTSystem(ShermanSystem):
    name = "smart-bt"
    description = ("SMART-BT: Sherman on the SMART framework (thread-aware doorbells, adaptive work-request "
                   "throttling, back-off lock CAS, coroutine throttling) + speculative lookup (a compute-node "
                   "key -> entry-line cache; a get READs one validated 64-byte line instead of the 1 KB leaf)")
    paper = "Ren et al., Scaling Up Memory Disaggregated Applications with SMART, ASPLOS'24 (§5.2, §6.2.3)"
    smart_defaults = {"all": True, **SCALED_TUNER}
    #: SMART-BT is Sherman+ (SMART §6.2.3: a version on every cache line), and its speculative
    #: lookup caches one 64-byte entry line per key: per-line leaves, no ``leaf_layout`` option.
    leaf_layout_default = "per-line"
    options = tuple(o for o in ShermanSystem.options if o.name != "leaf_layout") + (
        Option("spec_cache", SPEC_CACHE_SLOTS, "slots of a compute node's direct-mapped speculative-lookup cache "
               "(key -> entry line; 0: off, every get takes Sherman's path)", minimum=0, maximum=1 << 26),
        Option("lock_backoff", False, "HOCL's remote lock CAS goes through SMART's backoff_masked_cas (feeding "
               "the back-off and coroutine throttling's retry rate) instead of Sherman's own retry"),
    )
    client_class = SmartBTClient
