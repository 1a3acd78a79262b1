// libnuma is not needed to time one thread: the artifact's smart/thread.h and task.h only ask it
// where a core sits and for local allocations.
#pragma once
#include <cstdlib>
static inline int numa_node_of_cpu(int) { return 0; }
static inline int numa_num_configured_cpus() { return 1; }
static inline int numa_num_configured_nodes() { return 1; }
static inline void *numa_alloc_local(size_t n) { return malloc(n); }
static inline void numa_free(void *p, size_t) { free(p); }
