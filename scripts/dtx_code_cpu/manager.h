// The artifact's DTXContext (dtx/manager.h) with its verbs applied at once to local memory: the
// coordinator code of dtx.cpp and the transactions of bench.cpp run unchanged, and what a run then
// costs is their own CPU (the NIC's work and the verbs' posting and polling are the emulator's to
// price). Every method dtx.cpp calls is here with the artifact's meaning.
#pragma once
#include <cassert>
#include <cstring>
#include <unordered_map>
#include <vector>
#include "smart/global_address.h"
#include "smart/thread.h"
#include "addr_cache.h"
#include "memstore.h"

using namespace sds;
extern thread_local uint64_t rdma_cnt;

class DTXContext {
public:
    DTXContext(std::vector<char *> regions, offset_t log_base) : regions_(regions) {
        remote_nodes_ = (int) regions.size();
        for (int n = 0; n < remote_nodes_; ++n) log_base_[n] = log_base;
        const size_t kBufferSize = 8 * 1024 * 1024;           // the artifact's per-thread buffer
        buf_ = (char *) aligned_alloc(64, kBufferSize);
        buf_alloc_ = new RDMABufferAllocator(buf_, buf_ + kBufferSize);
        log_alloc_ = new LogOffsetAllocator(0, kMaxThreads);
    }
    // as LoadMetadata does: table t's primary is node t % nodes, its backups the others
    void AddTable(const HashMeta &meta) {
        table_id_t t = meta.table_id;
        for (int n = 0; n < remote_nodes_; ++n) {
            if (n == (int) (t % remote_nodes_)) {
                primary_hash_metas[t] = meta;
                primary_table_nodes[t] = n;
            } else if (backup_hash_metas[t].size() < BACKUP_DEGREE) {
                backup_hash_metas[t].push_back(meta);
                backup_table_nodes[t].push_back(n);
            }
        }
    }
    char *at(GlobalAddress a) { return regions_[a.node] + a.offset; }
    // Each verb's copy is timed (TSC cycles, verb_cycles): the NIC moves these bytes on the real
    // system, so the harness reports the attempt's time without them too.
    void Write(const void *local, GlobalAddress remote, size_t length) {
        uint64_t t = rdtsc();
        memcpy(at(remote), local, length);
        verb_cycles += rdtsc() - t;
        rdma_cnt++;
    }
    void read(const void *local, GlobalAddress remote, size_t length) {
        uint64_t t = rdtsc();
        memcpy((void *) local, at(remote), length);
        verb_cycles += rdtsc() - t;
        rdma_cnt++;
    }
    void CompareAndSwap(const void *local, GlobalAddress remote, uint64_t compare_val, uint64_t swap_val) {
        uint64_t t = rdtsc();
        *(uint64_t *) local = __sync_val_compare_and_swap((uint64_t *) at(remote), compare_val, swap_val);
        verb_cycles += rdtsc() - t;
        rdma_cnt++;
    }
    void FetchAndAdd(const void *local, GlobalAddress remote, uint64_t add_val) {
        uint64_t t = rdtsc();
        *(uint64_t *) local = __sync_fetch_and_add((uint64_t *) at(remote), add_val);
        verb_cycles += rdtsc() - t;
        rdma_cnt++;
    }
    uint64_t verb_cycles = 0;
    void PostRequest() {}
    void Sync() {}
    char *Alloc(size_t size) { return buf_alloc_->Alloc(size); }
    int GetRemoteNodes() const { return remote_nodes_; }
    AddrCache *GetAddrCache() { return &addr_cache_; }
    node_id_t GetPrimaryNodeID(table_id_t table_id) { return primary_table_nodes.find(table_id)->second; }
    std::vector<node_id_t> *GetBackupNodeID(table_id_t table_id) {
        if (backup_table_nodes.empty()) return nullptr;
        return &backup_table_nodes.find(table_id)->second;
    }
    HashMeta &GetPrimaryHashMetaWithTableID(table_id_t table_id) { return primary_hash_metas.find(table_id)->second; }
    std::vector<HashMeta> *GetBackupHashMetasWithTableID(table_id_t table_id) {
        if (backup_hash_metas.empty()) return nullptr;
        return &backup_hash_metas.find(table_id)->second;
    }
    offset_t GetNextLogOffset(node_id_t node_id, size_t log_size) {
        return log_base_[node_id] + log_alloc_->GetNextLogOffset(node_id, log_size);
    }
    // SMART's conflict avoidance (smart/backoff.h) waits only when tasks contend: one task never does
    void BeginTask() {}
    void EndTask() {}
    void RetryTask() {}

private:
    std::vector<char *> regions_;
    std::unordered_map<table_id_t, HashMeta> primary_hash_metas;
    std::unordered_map<table_id_t, std::vector<HashMeta>> backup_hash_metas;
    std::unordered_map<table_id_t, node_id_t> primary_table_nodes;
    std::unordered_map<table_id_t, std::vector<node_id_t>> backup_table_nodes;
    offset_t log_base_[NUM_MEMORY_NODES];
    int remote_nodes_;
    char *buf_;
    RDMABufferAllocator *buf_alloc_;
    LogOffsetAllocator *log_alloc_;
    AddrCache addr_cache_;
};
