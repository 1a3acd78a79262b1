#!/bin/sh
# RACE's client CPU per operation, measured on SMART's artifact code (docs/race.md, "CPU model").
#
#   scripts/race_code_cpu/run.sh PATH-TO-SMART-CHECKOUT [KEYS] [OPS]
#
# PATH-TO-SMART-CHECKOUT is a clone of github.com/madsys-dev/smart (measured at eee09bb). Its
# hashtable/hashtable.cpp (RACE) is compiled unchanged against the Initiator and Target of
# smart/ here, whose verbs apply at once to local memory (each copy timed with the TSC), and
# harness.cpp runs one client thread through the artifact's benchmark loop body on KEYS loaded
# keys (default 1,000,000): OPS (default 1,000,000) read-only operations, then as many
# update-only ones, uniform keys. Prints ns per operation, in all and without the verbs' copies
# (the NIC's work on the real system). Needs g++ (C++17) and about 6 GB of free memory (the
# artifact's table of 256 subtables is 4.9 GB).
set -e
smart=$(cd "${1:?usage: run.sh PATH-TO-SMART-CHECKOUT [KEYS] [OPS]}" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/build" "$work/stub/smart" "$work/config" "$work/run"
cp "$here/smart/initiator.h" "$here/smart/target.h" "$work/stub/smart/"   # found before the artifact's
cp "$here/../dtx_code_cpu/numa.h" "$work/stub/"
cp "$smart/config/datastructure.json" "$work/config/"                    # RemoteHashTable reads it
cd "$work/build"
flags="-O2 -std=c++17 -DNDEBUG -w -I../stub -I$smart/include -I$smart/hashtable"
g++ $flags -c "$smart/hashtable/hashtable.cpp" -o hashtable.o
g++ $flags -c "$smart/smart/thread.cpp" -o thread.o
g++ $flags -c "$here/harness.cpp" -o harness.o
g++ -o race harness.o hashtable.o thread.o -lpthread
cd "$work/run"
"$work/build/race" "${2:-1000000}" "${3:-1000000}"
