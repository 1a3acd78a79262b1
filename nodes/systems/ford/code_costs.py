"""The FORD coordinator's own CPU per attempt, measured on the artifact's code.

A FORD or SMART-DTX coordinator spends CPU of its own on every attempt besides posting and polling
verbs. It builds the read and write sets (a ``std::make_shared<DataItem>`` per record), looks up
addresses in its three-level ``unordered_map`` address cache, fills the pending-read vectors and
lists, checks what came back, serialises the undo log and the new images, and cleans up. The
verbs layer prices posting and polling. This module gives the rest: CPU cycles per attempt of each
transaction of FORD's SmallBank and TATP.

**How they were measured.** SMART's artifact (madsys-dev/smart @ eee09bb, whose ``dtx/`` is FORD+
and SMART-DTX) was built on this project's 2-core AMD EPYC VM (nominal 2.6 GHz: the TSC, BogoMIPS
5,192), with ``scripts/dtx_code_cpu/``. Its ``dtx.cpp`` and the ``Tx*`` functions of
``dtx/{smallbank,tatp}/bench.cpp`` ran unchanged. Only its ``DTXContext`` was replaced, by one
whose verbs apply at once to local memory (so the NIC's work and the verbs' own CPU, which dmrack
prices elsewhere, are out). One coordinator thread ran two memory nodes' tables, built by the
artifact's ``LoadTable``, in the artifact's loop body (a transaction drawn from the workgen array,
``clock_gettime`` around it). After 200,000 warm-up attempts (the artifact's ``WarmUp`` fills the
address cache the same way), 2,000,000 attempts were timed per run, each attempt on its own, and
summed by transaction type. The stub's copies, which stand in for the verbs, were timed on their
own with the TSC and taken out, since the NIC moves those bytes on the real system. They were 25-45 %
of an attempt: 30 ns a verb, most of it cache misses on the remote tables and the log. The table
holds the medians over five runs (run-to-run spread on this VM: 5-15 %), in ns, converted to
cycles at 2.6 GHz.

Each value is the mean over that type's attempts in the mix, committed or aborted (SmallBank's
``SendPayment`` commits 48 % there, TATP's ``GetNewDestination`` 9 %). dmrack charges it once
per attempt, whichever way the attempt ends.

**Assumptions.** (1) The cycles an attempt takes on this Zen core are the cycles it takes on
the artifact's Xeon Gold 6240R. dmrack prices them at the profile's ``cpu.ghz`` (2.4 GHz on
``cx6-200g``). (2) What is left of a verb in the stub once its copy is taken out, a call and an
address computation, is counted here (13.3 verbs a SmallBank attempt, 3.4 a TATP one), though on
the real system it is part of posting the verb, which dmrack prices again. (3) A transaction that
is not one of these (a user's own) is priced by the ``[software]`` formula the client had before
(``FordClient``): per attempt an operation, per record an address-cache lookup and its lines.
"""

from __future__ import annotations

import re

#: the clock of the host the table was measured on (cycles = ns x this)
MEASURED_GHZ = 2.6

#: median ns per attempt of each transaction, in the artifact's mix (see the module docstring)
MEASURED_NS = {
    "smallbank": {
        "Amalgamate": 1095, "Balance": 565, "DepositChecking": 396, "SendPayment": 573,
        "TransactSaving": 491, "WriteCheck": 741,
    },
    "tatp": {
        "GetSubscriberData": 460, "GetAccessData": 609, "GetNewDestination": 1345,
        "UpdateSubscriberData": 1079, "UpdateLocation": 1129, "InsertCallForwarding": 2104,
        "DeleteCallForwarding": 1304,
    },
}


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


#: cycles per attempt by transaction name: the artifact's Tx* functions without ``Tx``, which are the
#: names workloads/smallbank.py and tatp.py draw, and the names of their bodies there
#: (``DepositChecking`` and ``deposit_checking``: a transaction run without a name takes its body's)
CODE_CYCLES: dict[str, int] = {alias: round(ns * MEASURED_GHZ)
                               for txns in MEASURED_NS.values() for name, ns in txns.items()
                               for alias in (name, _snake(name))}


def code_ns(name: str, ghz: float) -> int | None:
    """The coordinator's own CPU for one attempt of transaction ``name`` on a core of ``ghz``, or
    None for a transaction the table does not hold."""
    cycles = CODE_CYCLES.get(name)
    return None if cycles is None else round(cycles / ghz)
