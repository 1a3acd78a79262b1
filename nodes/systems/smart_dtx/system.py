"""SMART-DTX (SMART, ASPLOS'24 §5.3): FORD+ with SMART's three techniques switched on.

SMART's artifact builds FORD+ and SMART-DTX from one code base (madsys-dev/smart ``dtx/``), the
environment variable ``SMART_OPTS`` choosing ``None`` or ``ThrdAwareAlloc,WorkReqThrot,
ConflictAvoid`` (include/smart/config.h:86-137); the transaction code differs by the back-off hooks
only. So here SMART-DTX is :class:`nodes.systems.ford.FordSystem` unchanged, with

* thread-aware resource allocation: the compute nodes run ``qp_policy = "per_thread_doorbell"``
  (a thread's QPs to both memory blades on a doorbell register of its own:
  resource_manager.cpp:471-560); FORD+ runs ``per_thread_qp``, its QPs sharing the device
  context's 4 low-latency and 12 medium doorbells (the implicit doorbell contention of Fig. 10);
* adaptive work-request throttling (credits counted in work requests per thread, the cap trained
  over 4, 6, .., 12 and unlimited: initiator.cpp:453-557) and conflict avoidance driven per
  transaction: every attempt is an operation of coroutine throttling, every abort a retry for the
  retry-rate controller followed by a back-off pause (``FordClient.run``, ``co.after_attempt``):
  ``smart_defaults`` below, which a rack's ``[smart]`` table can override switch by switch.

The settings are SMART-HT's scaled ones (nodes/systems/smart_ht/system.py: tuner Δ 50 µs, hold
20 Δ, node scope; retry-rate window 1 ms over the node; coroutine credits 64, the artifact's
kMaxTasksPerThread) except ``t_max``, which starts at t0 = 4,096 cycles as the artifact's
``sds::Backoff`` does (backoff.h:34-157). An aborted transaction is not retried (a new one is
drawn), so each back-off is the first of its sequence, t0 + U[0, t0) cycles (1.7-3.4 µs at
2.4 GHz) whatever t_max is; where t_max starts matters only to a caller that retries.
"""

from __future__ import annotations

from nodes.systems.ford import FordSystem
from nodes.systems.smart_ht import SCALED_TUNER

DTX_TUNER = {**SCALED_TUNER, "t_max_cycles": 4096}
#: the QP policies of SMART's two DTX configurations (SMART_OPTS None vs ThrdAwareAlloc)
QP_POLICY = {"ford": "per_thread_qp", "smart-dtx": "per_thread_doorbell"}


class SmartDtxSystem(FordSystem):
    name = "smart-dtx"
    description = ("SMART-DTX: FORD+ transactions on the SMART framework (thread-aware doorbells, adaptive "
                   "work-request throttling, per-transaction back-off with a dynamic limit, coroutine throttling)")
    paper = ("Ren et al., Scaling Up Memory Disaggregated Applications with SMART, ASPLOS'24 (madsys-dev/smart "
             "dtx/, SMART_OPTS=ThrdAwareAlloc,WorkReqThrot,ConflictAvoid)")
    smart_defaults = {"all": True, **DTX_TUNER}
