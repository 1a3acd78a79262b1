#!/bin/sh
# Instructions per present-key lookup of the unprefetched hash sets of PD3's Fig. 4 (docs/pd3.md,
# "The instruction window measured against them"): each program runs its lookup loop
# (run_lookups) over 100,000 and then 200,000 random present keys under callgrind, which counts
# only that loop; the difference of the two counts over 100,000 is the instructions per lookup.
# Needs g++ (SSE4.2 for the cuckoo set's CRC32C) and valgrind. x86-64 counts, not the A78's.
set -e
cd "$(dirname "$0")"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
g++ -O2 -o "$out/stl" stl.cpp
g++ -O2 -msse4.2 -o "$out/cuckoo" cuckoo.cpp
for prog in stl cuckoo; do
  a=$(valgrind --tool=callgrind --toggle-collect=run_lookups --callgrind-out-file=/dev/null "$out/$prog" 100000 2>&1 | sed -n 's/.*Collected : //p')
  b=$(valgrind --tool=callgrind --toggle-collect=run_lookups --callgrind-out-file=/dev/null "$out/$prog" 200000 2>&1 | sed -n 's/.*Collected : //p')
  echo "$prog: $(awk "BEGIN { printf \"%.1f\", ($b - $a) / 100000 }") instructions per lookup"
done
