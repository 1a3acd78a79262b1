"""SmallBank as FORD defines it (minghust/ford workload/smallbank; the same in SMART's dtx/smallbank).

Two tables, ``savings`` (table id 1) and ``checking`` (table id 2), one 8-byte value per account
keyed by the account id (smallbank_db.h: ``smallbank_savings_key_t`` = the u64 acct_id). Six
transaction types drawn from a 100-entry array in FORD's proportions (``FREQUENCY_*``,
smallbank_db.h:15-20); with probability ``TX_HOT`` = 90 % a transaction's accounts come from the
first ``num_hot_accounts`` (4,000) ids, else from all 100,000 (``get_account``,
``get_two_accounts``: a second account is redrawn until it differs). The logic (smallbank_txn.cc):

==================  ==  ====================  =====================  ===============================
type                %   read-only             read-write             logic (cents here)
==================  ==  ====================  =====================  ===============================
Amalgamate          15  -                     sav[a], chk[a], chk[b] chk[b] += sav[a]+chk[a]; both 0
Balance             15  sav[a], chk[a]        -                      read
DepositChecking     15  -                     chk[a]                 += 1.30
SendPayment         25  -                     chk[a], chk[b]         chk[a] < 5: user abort; else 5 moves
TransactSaving      15  -                     sav[a]                 += 20.20
WriteCheck          15  sav[a]                chk[a]                 chk -= 5, or 6 if sav+chk < 5
==================  ==  ====================  =====================  ===============================

Where it differs, and why: FORD's value is ``{u32 magic, float bal}`` starting at 1e9, and a float32
at 1e9 has a spacing of 64, so DepositChecking's +1.3 vanishes and no invariant can be checked. Here
the 8 bytes are one signed 64-bit integer of **cents** (the value size stays 8 B, so the record is
FORD's 64 B), and the conserved total is exact: every body returns the money it created or
destroyed, and the sum over the committed ones must equal the change of the tables' total. The
magic number (a debugging aid, "unused in the spec") has no room left and is dropped.

**The state of a long run** (``warm_transactions``). FORD's and SMART's benchmarks run tens of
millions of transactions, and their tables are then far from the loaded ones: Amalgamate empties
hot accounts into others, so a SendPayment from an empty checking account aborts. SMART's
artifact measures 14.1 % aborts at one FORD+ thread, where nothing conflicts (ae/raw-reference
fig10-smallbank.csv), and its code run alone does the same (13 %, docs/dtx.md). A rack's run of a
few virtual ms is too short to get there. With ``warm_transactions = n`` the tables are loaded
as the first ``n`` transactions of the mix leave them: drawn from their own seeded stream and
run one after another in memory (``workloads.tables.run_in_memory``, the same bodies), before
the rack loads them. The share of aborts levels off at 13 % after about 150,000 transactions on
4,000 hot accounts (docs/dtx.md).

Bad parameters are refused with one line (:class:`workloads.properties.WorkloadError`).
"""

from __future__ import annotations

import random
from typing import NamedTuple

from workloads.tables import Codec, TableSpec, TxnWorkload, check_int, check_mix, check_number, run_in_memory
from workloads.properties import WorkloadError

#: FORD smallbank_db.h:15-20, in the order of its workgen array.
TYPES = ("Amalgamate", "Balance", "DepositChecking", "SendPayment", "TransactSaving", "WriteCheck")
FREQUENCIES = (15, 15, 15, 25, 15, 15)
#: smallbank_db.h:22: percentage of transactions whose accounts come from the hot set.
TX_HOT = 90
#: config/smallbank_config.json (= SMART dtx config/transaction.json): 100,000 accounts, 4,000 hot.
NUM_ACCOUNTS = 100_000
NUM_HOT_ACCOUNTS = 4_000
#: workload/smallbank/smallbank_tables/*.json: 200,000 buckets per table for 100,000 accounts.
BUCKETS_PER_ACCOUNT = 2.0
#: smallbank_db.cc:92,112: every balance starts at 1e9 (float dollars in FORD; cents here, see above).
INITIAL_BALANCE_CENTS = 1_000_000_000
#: FORD's table ids (SmallBankTableType: kSavingsTable = TABLE_SMALLBANK = 1, kCheckingTable = 2):
#: with 2 memory nodes savings' primary is node 1 and checking's node 0.
SAVINGS_ID, CHECKING_ID = 1, 2
VALUE_BYTES = 8
# The amounts of smallbank_txn.cc, in cents.
DEPOSIT_CENTS = 130
SEND_CENTS = 500
TRANSACT_CENTS = 2020
CHECK_CENTS = 500
CHECK_PENALTY_CENTS = 100
#: the seed of the stream warm_transactions draws from (apart from every run's own streams)
WARM_SEED = 0x5B

CENTS = Codec(lambda v: int(v).to_bytes(8, "little", signed=True),
              lambda b: int.from_bytes(bytes(b), "little", signed=True))


class SmallBank(TxnWorkload):
    """The workload's parameters (validated) and its transaction bodies.

    On the rack (a scenario's ``[workload] preset = "smallbank"``, built by
    :meth:`from_properties`) it is a *transactional* workload: the system's ``setup_tables`` and
    ``load`` are given :meth:`tables` and :meth:`rows` when the rack is built, and each compute
    coroutine runs a closed loop of :meth:`next` transactions through its thread's ``TxnClient``
    (nodes/compute.py), recording each attempt as a ``commit`` or an ``abort`` (shm/telemetry.py).
    The attributes below the constructor are what the rack reads of any workload."""

    TYPES = TYPES           # its transactions' names (what a shared history records by position)
    #: the scenario keys of :meth:`from_properties`, with the constructor's argument each sets
    PARAMETERS = ("accounts", "hot_accounts", "tx_hot", "frequencies", "initial_balance_cents",
                  "buckets_per_account", "warm_transactions")
    LABEL = "SmallBank"
    value_size = VALUE_BYTES

    def __init__(self, accounts: int = NUM_ACCOUNTS, hot_accounts: int = NUM_HOT_ACCOUNTS, tx_hot: int = TX_HOT,
                 frequencies=FREQUENCIES, initial_balance_cents: int = INITIAL_BALANCE_CENTS,
                 buckets_per_account: float = BUCKETS_PER_ACCOUNT, warm_transactions: int = 0):
        self.accounts = check_int("smallbank", "accounts", accounts, 2)
        self.hot_accounts = check_int("smallbank", "hot_accounts", hot_accounts, 2)
        if hot_accounts > accounts:
            raise WorkloadError(f"smallbank: hot_accounts = {hot_accounts} exceeds accounts = {accounts}")
        self.tx_hot = check_int("smallbank", "tx_hot", tx_hot, 0, 100)
        self.frequencies, self._workgen = check_mix("smallbank", frequencies, TYPES)
        self.initial_balance_cents = check_int("smallbank", "initial_balance_cents", initial_balance_cents, 0, 1 << 60)
        self.buckets_per_account = check_number("smallbank", "buckets_per_account", buckets_per_account, 0.01, 64)
        self.warm_transactions = check_int("smallbank", "warm_transactions", warm_transactions, 0, 10**8)
        self._warm: dict | None = None      # (table, key) -> cents after warm_transactions, made once

    @property
    def recordcount(self) -> int:
        """Records per table (the rack's capacity formula reads it)."""
        return self.accounts

    def describe(self) -> str:
        freq = "/".join(str(f) for f in self.frequencies)
        warm = f", loaded as {self.warm_transactions:,} transactions leave it" if self.warm_transactions else ""
        return (f"SmallBank: {self.accounts:,} accounts ({self.hot_accounts:,} hot, {self.tx_hot} % of transactions "
                f"on them), mix {freq} ({', '.join(TYPES)}){warm}{self.loop()}")

    # -- what the system is given ---------------------------------------------------------------
    def tables(self) -> list[TableSpec]:
        buckets = max(1, int(round(self.accounts * self.buckets_per_account)))
        return [TableSpec("savings", SAVINGS_ID, VALUE_BYTES, buckets, self.accounts),
                TableSpec("checking", CHECKING_ID, VALUE_BYTES, buckets, self.accounts)]

    def codecs(self) -> dict:
        return {"savings": CENTS, "checking": CENTS}

    def rows(self, table: str):
        """(key, value bytes) of every record to load, in key order (FORD's Populate*Table), as
        ``warm_transactions`` leave them."""
        if not self.warm_transactions:
            v = CENTS.encode(self.initial_balance_cents)
            return ((k, v) for k in range(self.accounts))
        state = self.warm_state()
        return ((k, CENTS.encode(state[(table, k)])) for k in range(self.accounts))

    def initial_total(self) -> int:
        if not self.warm_transactions:
            return 2 * self.accounts * self.initial_balance_cents
        return sum(self.warm_state().values())

    def warm_state(self) -> dict:
        """(table, key) -> cents after the first ``warm_transactions`` of the mix (module docstring)."""
        if self._warm is None:
            state = {(t, k): self.initial_balance_cents for t in ("savings", "checking") for k in range(self.accounts)}
            rng = random.Random(WARM_SEED)
            for _ in range(self.warm_transactions):
                _name, body, args = self.next(rng)
                run_in_memory(state, body, args)
            self._warm = state
        return self._warm

    # -- drawing transactions -----------------------------------------------------------------
    def account(self, rng: random.Random) -> int:
        n = self.hot_accounts if rng.randrange(100) < self.tx_hot else self.accounts
        return rng.randrange(n)

    def two_accounts(self, rng: random.Random) -> tuple[int, int]:
        n = self.hot_accounts if rng.randrange(100) < self.tx_hot else self.accounts
        a = rng.randrange(n)
        b = rng.randrange(n)
        while b == a:
            b = rng.randrange(n)
        return a, b

    def next(self, rng: random.Random):
        """``(name, body, args)`` of the next transaction: ``yield from client.run(co, body, *args)``."""
        name = self._workgen[rng.randrange(100)]
        if name in ("Amalgamate", "SendPayment"):
            args = self.two_accounts(rng)
        else:
            args = (self.account(rng),)
        return name, BODIES[name], args


# -- the transaction bodies: each returns the cents it created (+) or destroyed (-) -----------------

def amalgamate(tx, a, b):
    sav_a = tx.read_for_update("savings", a)
    chk_a = tx.read_for_update("checking", a)
    chk_b = tx.read_for_update("checking", b)
    yield from tx.execute()
    _need(tx, sav_a, chk_a, chk_b)
    tx.write(chk_b, chk_b.value + sav_a.value + chk_a.value)
    tx.write(sav_a, 0)
    tx.write(chk_a, 0)
    return 0


def balance(tx, a):
    sav = tx.read("savings", a)
    chk = tx.read("checking", a)
    yield from tx.execute()
    _need(tx, sav, chk)
    return 0


def deposit_checking(tx, a):
    chk = tx.read_for_update("checking", a)
    yield from tx.execute()
    _need(tx, chk)
    tx.write(chk, chk.value + DEPOSIT_CENTS)
    return DEPOSIT_CENTS


def send_payment(tx, a, b):
    src = tx.read_for_update("checking", a)
    dst = tx.read_for_update("checking", b)
    yield from tx.execute()
    _need(tx, src, dst)
    if src.value < SEND_CENTS:
        tx.abort("user", "insufficient funds")
    tx.write(src, src.value - SEND_CENTS)
    tx.write(dst, dst.value + SEND_CENTS)
    return 0


def transact_saving(tx, a):
    sav = tx.read_for_update("savings", a)
    yield from tx.execute()
    _need(tx, sav)
    tx.write(sav, sav.value + TRANSACT_CENTS)
    return TRANSACT_CENTS


def write_check(tx, a):
    sav = tx.read("savings", a)
    chk = tx.read_for_update("checking", a)
    yield from tx.execute()
    _need(tx, sav, chk)
    debit = CHECK_CENTS + (CHECK_PENALTY_CENTS if sav.value + chk.value < CHECK_CENTS else 0)
    tx.write(chk, chk.value - debit)
    return -debit


def _need(tx, *items):
    for it in items:
        if not it.found:
            tx.abort("not_found", f"{it.table}[{it.key}]")


BODIES = {"Amalgamate": amalgamate, "Balance": balance, "DepositChecking": deposit_checking,
          "SendPayment": send_payment, "TransactSaving": transact_saving, "WriteCheck": write_check}


class ConservationReport(NamedTuple):
    ok: bool
    initial: int
    final: int
    created: int          # the committed transactions' net cents
    message: str


def check_total(initial: int, final: int, created: int, uncertain=()) -> ConservationReport:
    """SmallBank's invariant: the tables' total changes by exactly what committed transactions
    created (DepositChecking, TransactSaving) or destroyed (WriteCheck); the others move money.
    ``uncertain``: what each attempt whose coordinator died mid-commit would have created; each
    may have taken effect or not, so the total may be off by the sum of any subset of them."""
    reachable = {0}
    for u in uncertain:
        reachable |= {x + u for x in reachable}
    off = final - initial - created
    ok = off in reachable
    if ok:
        msg = "total conserved" + (f" ({len(uncertain)} attempts in flight at a crash, net {off} cents of them "
                                   f"took effect)" if uncertain else "")
    else:
        msg = (f"total {final} != initial {initial} + committed net {created} (off by {off} cents"
               + (f", which no subset of the {len(uncertain)} attempts in flight at a crash explains" if uncertain
                  else "") + ")")
    return ConservationReport(ok, initial, final, created, msg)
