// What bench/rtt's dispatch kernels share: the log sizes and the %globaltimer clock.
#ifndef CUDAQ_RT_BENCH_RTT_COMMON_CUH
#define CUDAQ_RT_BENCH_RTT_COMMON_CUH

#include "cudaq_rt/dispatch_framing.cuh"

#define BENCH_STAGE_ROWS 65536u
#define BENCH_TABLE_ROWS 512u

namespace {
__device__ __forceinline__ unsigned long long globaltimer_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
} // namespace

#endif // CUDAQ_RT_BENCH_RTT_COMMON_CUH
