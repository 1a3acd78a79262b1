// Instructions per present-key lookup of PD3's cuckoo_set::find (fardatalab/PD3,
// src/PD3/prefetcher/host_view.hpp) at 80 % load, written again for x86: the bucket search scalar
// (its find_simd is NEON) and CRCHash's crc32cx as SSE4.2's crc32 (the same CRC32C).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>
#include <nmmintrin.h>
struct alignas(32) Bucket { uint64_t k[4]; };
static inline uint64_t crc(uint64_t v) { uint32_t c = _mm_crc32_u64(0, v); return (uint64_t(c) << 32) | c; }
Bucket* B; uint64_t M;
static inline const uint64_t* bfind(const Bucket& b, uint64_t key) {
  for (int i = 0; i < 4; ++i) if (b.k[i] == key) return &b.k[i];
  return nullptr;
}
static inline const uint64_t* find(uint64_t key) {
  uint64_t h = crc(key);
  auto it = bfind(B[h & M], key);
  if (it) return it;
  return bfind(B[crc(h ^ key) & M], key);
}
extern "C" __attribute__((noinline)) size_t run_lookups(const uint64_t* p, long n) {
  size_t f = 0; for (long i = 0; i < n; ++i) f += find(p[i]) != nullptr; return f; }
static bool ins(Bucket& b, uint64_t k) { for (int i = 0; i < 4; ++i) if (b.k[i] == ~0ull) { b.k[i] = k; return true; } return false; }
int main(int argc, char** argv) {
  long lookups = atol(argv[1]); size_t nb = 1 << 18; M = nb - 1;
  B = (Bucket*)aligned_alloc(64, nb * sizeof(Bucket));
  for (size_t i = 0; i < nb; ++i) for (int j = 0; j < 4; ++j) B[i].k[j] = ~0ull;
  std::mt19937_64 rng(1); std::vector<uint64_t> keys; size_t target = nb * 4 * 8 / 10; unsigned d = 0;
  while (keys.size() < target) {   // fill to 80 % with random-walk displacement
    uint64_t k = rng(), h = crc(k);
    if (ins(B[h & M], k) || ins(B[crc(h ^ k) & M], k)) { keys.push_back(k); continue; }
    uint64_t cur = k; size_t b = h & M; bool ok = false;
    for (int depth = 0; depth < 256 && !ok; ++depth) {
      int s = (++d) & 3; uint64_t out = B[b].k[s]; B[b].k[s] = cur; cur = out;
      uint64_t hh = crc(cur); size_t b1 = hh & M, b2 = crc(hh ^ cur) & M; b = (b1 == b) ? b2 : b1;
      ok = ins(B[b], cur);
    }
    if (!ok) break; keys.push_back(k);
  }
  std::vector<uint64_t> probe(lookups);
  for (long i = 0; i < lookups; ++i) probe[i] = keys[rng() % keys.size()];
  printf("load %.3f found %zu\n", keys.size() / double(nb * 4), run_lookups(probe.data(), lookups));
}
