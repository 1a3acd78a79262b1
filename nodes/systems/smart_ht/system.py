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
20 Δ, tuning over the whole node. The retry-rate window of conflict avoidance is the paper's 1 ms
("every millisecond"; SMART's artifact uses 20 ms), counted over the whole node, and t_max starts at
t_M = 2^10 t0, the value the paper reports it converges to under skewed updates. SMART's artifact
starts t_max at t0: in dmrack that start halves c_max to 1 while the back-off is still short, and
the hot-key updates already running then keep failing (SMART-HT at 96 threads, 100 % updates:
0.25 Mops instead of 3.3). A window much shorter than the milliseconds hot-key pile-ups take to
form and clear (an earlier 50 µs) made c_max and t_max oscillate into that same state in fig7's
write-heavy runs. Coroutine throttling's credits start at 64, the artifact's kMaxTasksPerThread,
above the 8 coroutines of a thread, so c_max binds only after three high-retry windows.
docs/smart.md, Fig. 14.
"""

from __future__ import annotations

from nodes.systems.race import RaceSystem

SCALED_TUNER = {"delta_ns": 50_000, "hold": 20, "tuner_scope": "node",
                "window_ns": 1_000_000, "retry_scope": "node", "t_max_cycles": 4096 << 10, "coro_credits": 64}


class SmartHTSystem(RaceSystem):
    name = "smart-ht"
    description = ("SMART-HT: RACE hashing on the SMART framework (thread-aware doorbells, adaptive "
                   "work-request throttling, back-off CAS with a dynamic limit, coroutine throttling)")
    paper = "Ren et al., Scaling Up Memory Disaggregated Applications with SMART, ASPLOS'24"
    smart_defaults = {"all": True, **SCALED_TUNER}
