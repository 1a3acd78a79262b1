// SMART's Target (include/smart/target.h), as far as RemoteHashTable::Setup uses it: chunks of a
// memory node's region and the root entry naming the directory.
#pragma once
#include "smart/common.h"
#include "smart/global_address.h"

namespace sds {
    class Target {
    public:
        Target(char *region, size_t bytes) : region_(region), bytes_(bytes) {}
        void *alloc_chunk(size_t count) {
            void *p = region_ + used_;
            used_ += count * kChunkSize;
            if (used_ > bytes_) { fprintf(stderr, "target region exhausted\n"); exit(1); }
            return p;
        }
        const void *base_address() const { return region_; }
        GlobalAddress rel_ptr(void *addr) { return GlobalAddress(0, (char *) addr - region_); }
        void set_root_entry(uint8_t index, uint64_t value) { roots[index] = value; }
        size_t used() const { return used_; }
        uint64_t roots[256] = {0};

    private:
        char *region_;
        size_t bytes_, used_ = 0;
    };
}
