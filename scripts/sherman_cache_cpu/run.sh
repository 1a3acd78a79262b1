#!/bin/sh
# The CPU of one search of Sherman's index cache, measured on Sherman's own code (docs/profiles.md,
# "Index-cache search: flat, or by size").
#
#   scripts/sherman_cache_cpu/run.sh PATH-TO-SHERMAN-CHECKOUT [PAGES ...]
#
# PATH-TO-SHERMAN-CHECKOUT is a clone of github.com/thustorage/Sherman. Its include/IndexCache.h
# (a RocksDB InlineSkipList of cached 1 KB internal pages) is compiled unchanged; Rdma.h and DSM.h
# are replaced by the stubs here (the cache uses neither), and Boost's coroutines and CityHash by
# declarations. For each cache size (default 100 ... 800,000 pages: Dolphin's 50-800 MB caches are
# 50k-800k pages) harness.cpp fills the cache with pages of disjoint key ranges and times
# search_from_cache for random keys: ns per search, the skiplist's seek and the page's scan.
set -e
sherman=$(cd "${1:?usage: run.sh PATH-TO-SHERMAN-CHECKOUT [PAGES ...]}" && pwd)
shift
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp -r "$sherman/include" "$work/include"
cp "$here/stub/Rdma.h" "$here/stub/DSM.h" "$work/include/"     # in place of the RDMA layer
g++ -O2 -std=c++17 -DNDEBUG -w -I"$work/include" -I"$here/stub" -o "$work/harness" "$here/harness.cpp"
if [ $# -eq 0 ]; then set -- 100 1000 4096 16384 65536 262144 800000; fi
"$work/harness" "$@"
