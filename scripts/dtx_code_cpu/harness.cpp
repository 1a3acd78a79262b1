// One coordinator thread running SMART's artifact's SmallBank or TATP transactions (dtx/*/bench.cpp,
// their Tx* functions unchanged) through its DTX code (dtx/dtx.cpp, unchanged) against two memory
// nodes' tables built by its backend's code (LoadTable), with the verbs applied at once
// to local memory (manager.h here). Prints the CPU time per attempt of the coordinator's own code:
// the artifact's loop body (transaction choice, the transaction, clock_gettime twice, the latency
// record) with the NIC and the verbs' posting and polling taken out; in all, and per transaction type.
//
//   harness WARMUP ATTEMPTS [TYPE]     (TYPE: run that transaction type alone; default the mix)
#include <sys/mman.h>
#include <ctime>
#include <sys/resource.h>
#include <cstdio>
#include "dtx.h"

thread_local uint64_t rdma_cnt;
thread_local uint64_t seed;

#ifdef BENCH_TATP
#include "tatp/tatp.h"
#define WORKLOAD "tatp"
using Workload = TATP;
using TxType = TATPTxType;
thread_local TATP *tatp_client;
#define CLIENT tatp_client
#include "tx_tatp.inc"
static bool dispatch(TxType t, uint64_t iter, DTX *dtx) {
    switch (t) {
        case TxType::kGetSubsciberData: return TxGetSubsciberData(iter, dtx);
        case TxType::kGetAccessData: return TxGetAccessData(iter, dtx);
        case TxType::kGetNewDestination: return TxGetNewDestination(iter, dtx);
        case TxType::kUpdateSubscriberData: return TxUpdateSubscriberData(iter, dtx);
        case TxType::kUpdateLocation: return TxUpdateLocation(iter, dtx);
        case TxType::kInsertCallForwarding: return TxInsertCallForwarding(iter, dtx);
        case TxType::kDeleteCallForwarding: return TxDeleteCallForwarding(iter, dtx);
    }
    abort();
}
#else
#include "smallbank/smallbank.h"
#define WORKLOAD "smallbank"
using Workload = SmallBank;
using TxType = SmallBankTxType;
thread_local SmallBank *smallbank_client;
#define CLIENT smallbank_client
#include "tx_smallbank.inc"
static bool dispatch(TxType t, uint64_t iter, DTX *dtx) {
    switch (t) {
        case TxType::kAmalgamate: return TxAmalgamate(iter, dtx);
        case TxType::kBalance: return TxBalance(iter, dtx);
        case TxType::kDepositChecking: return TxDepositChecking(iter, dtx);
        case TxType::kSendPayment: return TxSendPayment(iter, dtx);
        case TxType::kTransactSaving: return TxTransactSaving(iter, dtx);
        case TxType::kWriteCheck: return TxWriteCheck(iter, dtx);
    }
    abort();
}
#endif
thread_local TxType *workgen_arr;

static char *region(size_t bytes) {
    void *p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) { perror("mmap"); exit(1); }
    return (char *) p;
}

static int only = -1;   // a transaction type to run alone (argv[3]), or -1: the artifact's mix

static int last_type;

static bool run_one(DTX *dtx) {
    TxType tx_type = workgen_arr[FastRand(&seed) % 100];
    if (only >= 0) tx_type = (TxType) only;
    last_type = (int) tx_type;
    static uint64_t tx_id = 0;
    return dispatch(tx_type, ++tx_id, dtx);
}

int main(int argc, char **argv) {
    long warm = argc > 1 ? atol(argv[1]) : 200000, n = argc > 2 ? atol(argv[2]) : 1000000;
    only = argc > 3 ? atoi(argv[3]) : -1;
    // the backend's layout of a memory node: a 4 GB hash buffer (its last quarter the overflow
    // reserve), then the 1 GB log buffer (LOG_BUFFER_SIZE)
    const uint64_t hash_buf = 4ull << 30;
    std::vector<char *> regions;
    std::vector<HashMeta> metas;
    for (int node = 0; node < NUM_MEMORY_NODES; ++node) {
        char *r = region(hash_buf + LOG_BUFFER_SIZE);
        regions.push_back(r);
        // the log is written by the NIC on the real system: its pages are faulted in here, before
        // the timed loop, so that no page fault is counted as the coordinator's work
        for (uint64_t o = 0; o < (uint64_t) LOG_BUFFER_SIZE; o += 4096) r[hash_buf + o] = 0;
        MemStoreAllocParam alloc(r, r, 0, r + hash_buf * 3 / 4);
        MemStoreReserveParam reserve(r + hash_buf * 3 / 4, 0, r + hash_buf);
        auto *sb = new Workload();
        sb->LoadTable(&alloc, &reserve);
        if (node == 0)
            for (auto *t: sb->GetHashStore())
                metas.emplace_back(t->GetTableID(), (uint64_t) t->GetDataPtr(), t->GetBucketNum(),
                                   t->GetHashNodeSize(), t->GetBaseOff());
    }
    DTXContext ctx(regions, (offset_t) hash_buf);
    for (auto &m: metas) ctx.AddTable(m);
    CLIENT = new Workload();
    workgen_arr = CLIENT->CreateWorkgenArray();
    seed = 0xcc9e2d51ull * 128;
    DTX *dtx = new DTX(&ctx);
    double *timer = new double[n];
    for (long i = 0; i < warm; ++i) run_one(dtx);      // fills the address cache, as WarmUp does
    rdma_cnt = 0;
    long commits = 0;
    timespec a, b, t0, t1;
    rusage ra, rb;
    getrusage(RUSAGE_SELF, &ra);
    clock_gettime(CLOCK_MONOTONIC, &a);
    double type_ns[16] = {0}, type_verb_cycles[16] = {0};
    long type_n[16] = {0}, type_commits[16] = {0}, type_verbs[16] = {0};
    uint64_t tsc0 = rdtsc();
    for (long i = 0; i < n; ++i) {
        uint64_t vc = ctx.verb_cycles, nv = rdma_cnt;
        clock_gettime(CLOCK_REALTIME, &t0);
        bool ok = run_one(dtx);
        clock_gettime(CLOCK_REALTIME, &t1);     // the artifact reads the clock again after a commit
        double us = (t1.tv_sec - t0.tv_sec) * 1000000 + (double) (t1.tv_nsec - t0.tv_nsec) / 1000;
        if (ok) timer[commits++] = us;
        type_ns[last_type] += us * 1000;
        type_verb_cycles[last_type] += ctx.verb_cycles - vc;
        type_verbs[last_type] += rdma_cnt - nv;
        type_n[last_type]++;
        type_commits[last_type] += ok;
    }
    uint64_t tsc1 = rdtsc();
    clock_gettime(CLOCK_MONOTONIC, &b);
    // the TSC's rate, and what timing one verb costs by itself (two rdtsc with nothing between)
    double tsc_ghz = (tsc1 - tsc0) / ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec));
    uint64_t empty = 0;
    for (int i = 0; i < 1000000; ++i) { uint64_t t = rdtsc(); empty += rdtsc() - t; }
    double pair_cycles = empty / 1e6;
    getrusage(RUSAGE_SELF, &rb);
    double user = (rb.ru_utime.tv_sec - ra.ru_utime.tv_sec) * 1e9 + (rb.ru_utime.tv_usec - ra.ru_utime.tv_usec) * 1e3;
    double sys = (rb.ru_stime.tv_sec - ra.ru_stime.tv_sec) * 1e9 + (rb.ru_stime.tv_usec - ra.ru_stime.tv_usec) * 1e3;
    printf("user %.0f ns, sys %.0f ns per attempt, minor faults %ld\n", user / n, sys / n, rb.ru_minflt - ra.ru_minflt);
    double ns = ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec)) / n;
    printf(WORKLOAD " type %d: %.0f ns per attempt, %ld attempts, %ld commits, %.2f verbs per attempt\n",
           only, ns, n, commits, (double) rdma_cnt / n);
    printf("TSC %.2f GHz, an empty timing %.0f cycles\n", tsc_ghz, pair_cycles);
    for (int t = 0; t < 16; ++t)
        if (type_n[t]) {
            // the verbs' copies, less the timing's own cost, are the NIC's work on the real system
            double verbs_ns = (type_verb_cycles[t] - pair_cycles * type_verbs[t]) / tsc_ghz / type_n[t];
            printf("  type %d: %.0f ns per attempt, %.0f without the verbs' copies (%.1f verbs; %ld attempts, "
                   "%.1f %% committed)\n", t, type_ns[t] / type_n[t], type_ns[t] / type_n[t] - verbs_ns,
                   (double) type_verbs[t] / type_n[t], type_n[t], 100.0 * type_commits[t] / type_n[t]);
        }
    return 0;
}
