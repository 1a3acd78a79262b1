// Instructions per present-key lookup of libstdc++'s std::unordered_set<uint64_t> at ~0.8 elements
// per bucket (PD3 Fig. 4's "STL unordered_set" row; run.sh counts run_lookups alone).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <unordered_set>
#include <vector>

static std::unordered_set<uint64_t>* S;

extern "C" __attribute__((noinline)) size_t run_lookups(const uint64_t* p, long n) {
  size_t found = 0;
  for (long i = 0; i < n; ++i) found += S->find(p[i]) != S->end();
  return found;
}

int main(int argc, char** argv) {
  const size_t n = 1 << 20;
  const long lookups = argc > 1 ? atol(argv[1]) : 100000;
  std::mt19937_64 rng(1);
  std::vector<uint64_t> keys(n);
  for (auto& k : keys) k = rng();
  std::unordered_set<uint64_t> s;
  s.max_load_factor(1.0);
  s.rehash(size_t(n / 0.8));       // ~0.8 elements per bucket, as PD3's tables are filled
  for (auto k : keys) s.insert(k);
  std::vector<uint64_t> probe(lookups);
  for (long i = 0; i < lookups; ++i) probe[i] = keys[rng() % n];
  S = &s;
  size_t found = run_lookups(probe.data(), lookups);
  printf("load %.3f buckets %zu found %zu\n", s.load_factor(), s.bucket_count(), found);
}
