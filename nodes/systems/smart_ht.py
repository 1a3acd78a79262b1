"""SMART-HT (SMART, ASPLOS'24 §5.1): RACE hashing run on the SMART framework.

SMART-HT is RACE with SMART's three techniques switched on, which is why it is a few lines here as
in the paper (44 changed lines there): the hash table is :mod:`nodes.systems.race` unchanged (its
slot CASes already go through ``backoff_cas``, a plain CAS when conflict avoidance is off), and
the compute nodes run it with

* thread-aware resource allocation: the rack's ``qp_policy = "per_thread_doorbell"`` (the
  default policy; the RACE baseline of the SMART figures uses ``per_thread_qp``);
* adaptive work-request throttling, conflict avoidance (back-off with the dynamic limit) and
  coroutine throttling: ``smart_defaults`` below, which a rack's ``[smart]`` table can override
  switch by switch (that is how the ablations of Fig. 8 and Fig. 14 are run).

The tuner's sampling period Δ is scaled from the paper's 8 ms to 50 µs and its hold from 60 Δ to
20 Δ, tuning over the whole node; the retry-rate window of conflict avoidance is scaled from 1 ms
to 50 µs and counted over the whole node (one thread's 50 µs holds only a handful of operations),
and t_max starts at t_M = 2^10 t0, the value the paper reports it converges to under skewed
updates (SMART's artifact starts at t0; in dmrack's millisecond runs that transient halves c_max
to 1 before t_max can rise, and the retry rate then sits between the water marks, so c_max never
recovers: docs/smart.md, Fig. 14). dmrack's runs last milliseconds of virtual time, not seconds.
"""

from __future__ import annotations

from nodes.systems.race import RaceSystem

SCALED_TUNER = {"delta_ns": 50_000, "hold": 20, "tuner_scope": "node",
                "window_ns": 50_000, "retry_scope": "node", "t_max_cycles": 4096 << 10}


class SmartHTSystem(RaceSystem):
    name = "smart-ht"
    description = ("SMART-HT: RACE hashing on the SMART framework (thread-aware doorbells, adaptive "
                   "work-request throttling, back-off CAS with a dynamic limit, coroutine throttling)")
    paper = "Ren et al., Scaling Up Memory Disaggregated Applications with SMART, ASPLOS'24"
    smart_defaults = {"all": True, **SCALED_TUNER}
