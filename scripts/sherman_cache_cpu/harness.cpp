// Sherman's index cache (include/IndexCache.h, unchanged): N cached internal pages of 1 KB, each
// covering its own key range with its records filled, then search_from_cache for random keys, as
// a descent starts. Prints ns per search for each N.
//
//   harness N1 N2 ...
#include <chrono>
#include <cstdio>
#include <random>
#include <vector>
#define private public        // the harness fills pages' headers, which only the tree may touch
#include "IndexCache.h"
#undef private

bool enter_debug = false;

int main(int argc, char **argv) {
  for (int a = 1; a < argc; ++a) {
    long n = atol(argv[a]);
    const Key span = 1 << 20;                      // keys covered by one cached page
    IndexCache cache((int)(n * 2 * kInternalPageSize / define::MB) + 64);   // no eviction
    InternalPage page;
    for (long p = 0; p < n; ++p) {
      page.hdr.lowest = p * span;
      page.hdr.highest = (p + 1) * span;
      page.hdr.level = 1;
      page.hdr.leftmost_ptr = GlobalAddress::Null();
      page.hdr.last_index = kInternalCardinality - 1;
      for (int i = 0; i < kInternalCardinality; ++i) {
        page.records[i].key = p * span + (i + 1) * (span / (kInternalCardinality + 1));
        page.records[i].ptr = GlobalAddress::Null();
      }
      cache.add_to_cache(&page);
    }
    std::mt19937_64 rng(7);
    std::vector<Key> keys(1 << 20);
    for (auto &k : keys) k = rng() % (n * span);
    GlobalAddress addr;
    long found = 0;
    for (int i = 0; i < 100000; ++i) found += cache.search_from_cache(keys[i % keys.size()], &addr) != nullptr;
    const long ops = 2000000;
    auto t0 = std::chrono::steady_clock::now();
    for (long i = 0; i < ops; ++i) found += cache.search_from_cache(keys[i & (keys.size() - 1)], &addr) != nullptr;
    auto t1 = std::chrono::steady_clock::now();
    double ns = std::chrono::duration<double, std::nano>(t1 - t0).count() / ops;
    printf("%ld cached pages: %.0f ns per search_from_cache (found %.0f %%)\n", n, ns, 100.0 * found / (ops + 100000));
  }
  return 0;
}
