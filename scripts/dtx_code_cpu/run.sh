#!/bin/sh
# The FORD coordinator's own CPU per attempt, measured on SMART's artifact code
# (nodes/systems/ford/code_costs.py says how and why; docs/dtx.md shows the numbers).
#
#   scripts/dtx_code_cpu/run.sh PATH-TO-SMART-CHECKOUT [RUNS]
#
# PATH-TO-SMART-CHECKOUT is a clone of github.com/madsys-dev/smart (measured at eee09bb). The
# artifact's dtx/dtx.cpp and the Tx* functions of dtx/{smallbank,tatp}/bench.cpp are compiled
# unchanged beside manager.h here, whose DTXContext applies each verb at once to local memory, and
# harness.cpp runs one coordinator thread through the artifact's transaction mix. Prints, per
# transaction, the median over RUNS runs (default 5) of its mean ns per attempt without the time
# its verbs' copies took (the NIC's work on the real system), in the form of
# code_costs.MEASURED_NS; and the mix's ns per attempt with them. Needs g++ (C++17) and about 12 GB of free memory (two memory nodes'
# 4 GB hash buffers and 1 GB logs, touched in part).
set -e
smart=$(cd "${1:?usage: run.sh PATH-TO-SMART-CHECKOUT [RUNS]}" && pwd)
runs=${2:-5}
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/build/smallbank" "$work/build/tatp" "$work/stub" "$work/config" "$work/run"
cp "$smart"/dtx/*.h "$smart/dtx/dtx.cpp" "$work/build/"
cp "$smart"/dtx/smallbank/*.h "$work/build/smallbank/"
cp "$smart"/dtx/tatp/*.h "$work/build/tatp/"
cp "$here/manager.h" "$work/build/manager.h"          # the stub context replaces the artifact's
cp "$here/numa.h" "$work/stub/numa.h"
cp "$smart/config/transaction.json" "$work/config/"    # SmallBank() and TATP() read ../config
# the transactions, as the artifact's benches define them (up to the thread-local after the last)
sed -n '/^bool TxAmalgamate/,/^thread_local int running_tasks/p' "$smart/dtx/smallbank/bench.cpp" | sed '$d' \
    > "$work/build/tx_smallbank.inc"
sed -n '/^bool TxGetSubsciberData/,/^thread_local int running_tasks/p' "$smart/dtx/tatp/bench.cpp" | sed '$d' \
    > "$work/build/tx_tatp.inc"
cd "$work/build"
flags="-O2 -std=c++17 -DNDEBUG -w -I. -I../stub -I$smart/include"
g++ $flags -c "$smart/smart/thread.cpp" -o thread.o
g++ $flags -c dtx.cpp -o dtx8.o
g++ $flags -c "$here/harness.cpp" -o smallbank.o
g++ -o smallbank.bin smallbank.o dtx8.o thread.o -lpthread
g++ $flags -DCONFIG_ITEM_SIZE=40 -c dtx.cpp -o dtx40.o        # TATP's items (MAX_ITEM_SIZE 40)
g++ $flags -DCONFIG_ITEM_SIZE=40 -DBENCH_TATP -c "$here/harness.cpp" -o tatp.o
g++ -o tatp.bin tatp.o dtx40.o thread.o -lpthread
cd "$work/run"
for bench in smallbank tatp; do
    i=0
    while [ "$i" -lt "$runs" ]; do
        "$work/build/$bench.bin" 200000 2000000
        i=$((i + 1))
    done > "$work/$bench.txt"
done
python3 - "$work" <<'PY'
import collections, re, statistics, sys
names = {"smallbank": ("Amalgamate", "Balance", "DepositChecking", "SendPayment", "TransactSaving", "WriteCheck"),
         "tatp": ("GetSubscriberData", "GetAccessData", "GetNewDestination", "UpdateSubscriberData",
                  "UpdateLocation", "InsertCallForwarding", "DeleteCallForwarding")}
for bench, types in names.items():
    per, mix = collections.defaultdict(list), []
    for line in open(f"{sys.argv[1]}/{bench}.txt"):
        m = re.match(r"\s+type (\d+): \d+ ns per attempt, (-?\d+) without", line)
        if m:
            per[int(m.group(1))].append(int(m.group(2)))
        m = re.match(r"\S+ type -1: (\d+) ns", line)
        if m:
            mix.append(int(m.group(1)))
    print(f"{bench}: mix {statistics.median(mix):.0f} ns per attempt with the verbs' copies (median of {len(mix)} runs)")
    print("    " + ", ".join(f'"{types[t]}": {statistics.median(v):.0f}' for t, v in sorted(per.items())))
PY
