// One client thread running SMART's artifact's RACE hash table (hashtable/hashtable.cpp, unchanged)
// against a memory node set up by its own code (RemoteHashTable::Setup), with the verbs applied at
// once to local memory (stub smart/initiator.h). Each operation is the artifact's benchmark loop
// body (BenchmarkRunner: a record from the workload builder, the key string, the value string for
// a write, the operation); prints its ns, in all and without the time the verbs' copies took.
//
//   harness KEYS OPS
#include <sys/mman.h>
#include <ctime>
#include <cstdio>
#include "hashtable.h"
#include "util/ycsb.h"

// SMART's task pool (smart/task.cpp) is not enabled: one task, which never switches. Its symbols
// are defined for the linker; a context switch would be a bug of this harness.
namespace sds {
    thread_local bool tl_task_pool_enabled = false;
    transfer_t TaskPool::g_empty_transfer;
}
extern "C" transfer_t ontop_fcontext(fcontext_t const, void *, transfer_t (*)(transfer_t)) {
    fprintf(stderr, "a context switch in a one-task harness\n");
    abort();
}
using namespace sds;

static const size_t kValueLength = 8;        // config/datastructure.json: key_length = value_length = 8

static std::string build_key_str(uint64_t key) {      // BenchmarkRunner::build_key_str (rehash_key false)
    auto str = std::to_string(key);
    if (str.size() < kValueLength) return std::string(kValueLength - str.size(), '0') + str;
    return str.substr(0, kValueLength);
}

static char random_print_char() {
    thread_local std::default_random_engine engine(GetThreadID());
    thread_local std::uniform_int_distribution<int> uniform;
    return uniform(engine) % 94 + 33;
}

static std::string build_val_str() { return std::string(kValueLength, random_print_char()); }

int main(int argc, char **argv) {
    size_t keys = argc > 1 ? atol(argv[1]) : 1000000;
    long ops = argc > 2 ? atol(argv[2]) : 1000000;
    const size_t bytes = 12ull << 30;
    char *r = (char *) mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (r == MAP_FAILED) { perror("mmap"); return 1; }
    Target target(r, bytes);
    if (RemoteHashTable::Setup(target)) { fprintf(stderr, "setup failed\n"); return 1; }
    Initiator node({r}, bytes, target.used());
    node.set_root(0, target.roots[0]);
    JsonConfig config = JsonConfig::load_file(ROOT_DIR "/config/datastructure.json");
    RemoteHashTable table(config, 1, &node, 0);
    for (uint64_t k = 0; k < keys; ++k)
        if (table.insert(build_key_str(k), build_val_str())) { fprintf(stderr, "insert failed\n"); return 1; }
    // the calibration's two workloads, one thread, uniform keys over those loaded
    const char *names[2] = {"read-only", "update-only"};
    for (int w = 0; w < 2; ++w) {
        int pct[5] = {0};
        pct[w == 0 ? util::READ : util::UPDATE] = 100;
        util::WorkloadBuilder builder(keys, pct, "uniform", 0.99);
        uint64_t verbs0 = node.verbs, vc0 = node.verb_cycles;
        timespec a, b;
        clock_gettime(CLOCK_MONOTONIC, &a);
        uint64_t t0 = rdtsc();
        for (long i = 0; i < ops; ++i) {
            util::OpRecord record;
            builder.fill_record(record);
            auto key = build_key_str(record.key);
            int rc;
            if (record.type == util::READ) {
                std::string value;
                rc = table.search(key, value);
            } else {
                rc = table.update(key, build_val_str());
            }
            if (rc) { fprintf(stderr, "%s: op failed (%d)\n", names[w], rc); return 1; }
        }
        uint64_t t1 = rdtsc();
        clock_gettime(CLOCK_MONOTONIC, &b);
        double ns = ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec));
        double tsc_ghz = (t1 - t0) / ns;
        uint64_t empty = 0;
        for (int i = 0; i < 1000000; ++i) { uint64_t t = rdtsc(); empty += rdtsc() - t; }
        double nverbs = node.verbs - verbs0;
        double copies_ns = ((node.verb_cycles - vc0) - empty / 1e6 * nverbs) / tsc_ghz;
        printf("%s: %.0f ns per op, %.0f without the verbs' copies (%.2f verbs per op)\n", names[w], ns / ops,
               (ns - copies_ns) / ops, nverbs / ops);
    }
    return 0;
}
