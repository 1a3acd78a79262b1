// SMART's Initiator (include/smart/initiator.h) with its verbs applied at once to local memory:
// RACE's client code (hashtable/hashtable.cpp) runs unchanged, and what it costs is its own CPU.
// The remote memory allocator keeps the artifact's shape: per-thread free lists by power-of-two
// size class, a chunk carved into blocks of a class when its list is empty (initiator.cpp).
#pragma once
#include <cstring>
#include <cstdlib>
#include <vector>
#include <functional>
#include "smart/common.h"
#include "smart/thread.h"
#include "smart/task.h"
#include "smart/global_address.h"

enum { IBV_SEND_FENCE = 1 };                     // a verb's flag in the artifact (ibverbs): no meaning here

namespace sds {
    struct SmartConfig {
        bool use_speculative_lookup = false;       // SMART_OPTS=None: RACE as published
    };

    class Initiator {
    public:
        enum class Option { None, PostRequest, Sync };

        explicit Initiator(std::vector<char *> regions, size_t region_bytes, size_t heap_start)
                : regions_(regions), region_bytes_(region_bytes), next_chunk_(heap_start) {}
        Initiator() : region_bytes_(0), next_chunk_(0) {}   // the artifact's own constructors name it

        int connect(node_t, const char *, uint16_t, int) { return 0; }
        int disconnect(node_t) { return 0; }
        const SmartConfig &config() const { return config_; }

        GlobalAddress alloc_memory(node_t node, size_t size) {
            if (size >= kChunkSize) return chunk(node, (size + kChunkSize - 1) / kChunkSize);
            int c = size_class(size);
            auto &list = free_[c];
            if (list.empty()) {                      // carve a chunk into blocks of this class
                GlobalAddress base = chunk(node, 1);
                for (size_t off = (1ull << c); off < kChunkSize; off += (1ull << c)) list.push_back(base.raw + off);
                return base;
            }
            uint64_t raw = list.back();
            list.pop_back();
            return GlobalAddress(raw);
        }

        int free_memory(GlobalAddress addr, size_t size) {
            if (size < kChunkSize) free_[size_class(size)].push_back(addr.raw);
            return 0;
        }

        void *alloc_cache(size_t size) {
            size = (size + kCacheLineSize - 1) / kCacheLineSize * kCacheLineSize;
            return aligned_alloc(kCacheLineSize, size);
        }

        int get_root_entry(node_t, uint8_t index, uint64_t &value) { value = roots_[index]; return 0; }
        void set_root(uint8_t index, uint64_t value) { roots_[index] = value; }

        // Each verb's copy is timed (TSC cycles): the NIC's work on the real system, taken out
        int write(const void *local, const GlobalAddress &remote, size_t length, Option = Option::None, int = 0) {
            uint64_t t = rdtsc();
            memcpy(at(remote), local, length);
            verb_cycles += rdtsc() - t;
            verbs++;
            return 0;
        }
        int read(const void *local, const GlobalAddress &remote, size_t length, Option = Option::None, int = 0) {
            uint64_t t = rdtsc();
            memcpy((void *) local, at(remote), length);
            verb_cycles += rdtsc() - t;
            verbs++;
            return 0;
        }
        int fetch_and_add(const void *local, const GlobalAddress &remote, uint64_t add, Option = Option::None,
                          int = 0) {
            uint64_t t = rdtsc();
            *(uint64_t *) local = __sync_fetch_and_add((uint64_t *) at(remote), add);
            verb_cycles += rdtsc() - t;
            verbs++;
            return 0;
        }
        int compare_and_swap(const void *local, const GlobalAddress &remote, uint64_t cmp, uint64_t swp,
                             Option = Option::None, int = 0) {
            uint64_t t = rdtsc();
            *(uint64_t *) local = __sync_val_compare_and_swap((uint64_t *) at(remote), cmp, swp);
            verb_cycles += rdtsc() - t;
            verbs++;
            return 0;
        }
        uint64_t verb_cycles = 0, verbs = 0;
        int post_request() { return 0; }
        int sync() { return 0; }
        std::function<void()> get_poll_task(int &) { return [] {}; }
        void run_tasks() {}

    private:
        char *at(const GlobalAddress &a) { return regions_[a.node] + a.offset; }
        static int size_class(size_t size) {
            int c = 6;                               // 64 B: the smallest block RACE asks for
            while ((1ull << c) < size) ++c;
            return c;
        }
        GlobalAddress chunk(node_t node, size_t count) {
            GlobalAddress a(node, next_chunk_);
            next_chunk_ += count * kChunkSize;
            if (next_chunk_ > region_bytes_) { fprintf(stderr, "remote memory exhausted\n"); exit(1); }
            return a;
        }

        std::vector<char *> regions_;
        size_t region_bytes_, next_chunk_;
        SmartConfig config_;
        uint64_t roots_[256] = {0};
        std::vector<uint64_t> free_[32];
    };
}
