// cudaq_rt_bench_warp_rounds, for bench/rtt/loopback_rtt.cpp: the warp kernel with a stamp around
// each round's poll and serve, packed with --dispatcher and launched through the runtime's load
// path.
//
// Why an archive and a package of its own (not rtt_kernels.cu's): a kernel that calls a handler
// through the function table (an indirect call) gets, from ptxas, every module-scope shared
// variable of the module, since the callee is not known. In a module that also holds the unified
// kernels, those are the loopback bridge's shared staging (34,816 bytes), its tail buffer and
// barriers, next to the warp form's own 32 KB staging: 77,872 bytes, past the 48 KB a block may
// have statically (nvJitLink: "uses too much shared data (0x13030 bytes, 0xc000 max)"), and the
// whole module failed to link for sm_90. Alone with the warp hooks, it needs what the shipped warp
// kernel does.
#include "rtt_common.cuh"

// The warp kernel (libdispatch/src/warp_dispatch.cu) with a clock64 stamp around each round's
// poll and serve: per round that found requests, [0] poll cycles, [1] serve + publish cycles,
// [2] requests served, [3] cycles since the previous such round ended, [4] the same in ns
// (%globaltimer), so that the SM clock can be told; over a bridge built with
// CUDAQ_RT_LOOPBACK_STAMP, for the first lane that found a request: [5] its probe, issued -> came
// back, [6] came back -> rx_poll returned and the round's ballot taken (cycles; else 0).
extern "C" {
__device__ unsigned int cudaq_rt_bench_round_log[BENCH_STAGE_ROWS][8];
__device__ unsigned long long cudaq_rt_bench_round_count;
}
CUDAQ_RT_EXPORT_GLOBAL(cudaq_rt_bench_round_log);
CUDAQ_RT_EXPORT_GLOBAL(cudaq_rt_bench_round_count);

namespace {
__device__ __forceinline__ void warp_rounds(const cudaq_rt_dispatch_params &p, void *session,
                                            unsigned lane) {
  const unsigned all = 0xFFFFFFFFu;
  __shared__ cudaq_rt_function_entry rows[BENCH_TABLE_ROWS];
  const cudaq_rt_function_entry *table = p.function_table;
  if (p.num_functions <= BENCH_TABLE_ROWS) {
    for (uint32_t i = lane; i < p.num_functions; i += CUDAQ_RT_WARP_LANES)
      rows[i] = p.function_table[i];
    __syncwarp(all);
    table = rows;
  }
  cudaq_rt_handler_cache cache = {0, 0};
  unsigned long long n = 0;
  long long last_end = clock64();
  unsigned long long last_ns = globaltimer_ns();
  for (;;) {
    void *request = 0, *response = 0;
    const long long t0 = clock64();
    const int r = cudaq_dev_warp_rx_poll(session, &request, &response);
    const unsigned ready = __ballot_sync(all, r == CUDAQ_DEV_RX_READY);
    const long long t1 = clock64();
    if (r == CUDAQ_DEV_RX_READY) {
      cudaq_rt_serve_frame_cached(table, p.num_functions, p.slot_size, request, response, 0,
                                  &cache);
      cudaq_dev_warp_tx_publish(session, response);
    }
    __syncwarp(all);
    const long long t2 = clock64();
    // The probe's clocks the bridge left in the storage's last 16 bytes (loopback_device.cu), taken
    // after the round's stamps so that the shuffles are not timed as serving.
    const long long *probe_clock = reinterpret_cast<const long long *>(
        static_cast<const unsigned char *>(session) + CUDAQ_RT_SESSION_STORAGE_SIZE - 16);
    const int first = ready ? __ffs(ready) - 1 : 0;
    const long long issued = __shfl_sync(all, probe_clock[0], first);
    const long long probed = __shfl_sync(all, probe_clock[1], first);
    if (ready && lane == 0) {
      unsigned int *row = cudaq_rt_bench_round_log[n % BENCH_STAGE_ROWS];
      row[0] = (unsigned int)(t1 - t0);
      row[1] = (unsigned int)(t2 - t1);
      row[2] = __popc(ready);
      row[3] = (unsigned int)(t2 - last_end);
      const unsigned long long ns = globaltimer_ns();
      row[4] = (unsigned int)(ns - last_ns);
      row[5] = probed ? (unsigned int)(probed - issued) : 0u;
      row[6] = probed ? (unsigned int)(t1 - probed) : 0u;
      last_ns = ns;
      ++n;
    }
    if (ready)
      last_end = t2;
    if (__all_sync(all, r == CUDAQ_DEV_RX_SHUTDOWN))
      break;
  }
  if (lane == 0)
    cudaq_rt_bench_round_count = n;
}
} // namespace

extern "C" __global__ void cudaq_rt_bench_warp_rounds(cudaq_rt_dispatch_params p) {
  if (blockIdx.x != 0 || threadIdx.x >= CUDAQ_RT_WARP_LANES || blockDim.x < CUDAQ_RT_WARP_LANES)
    return;
  const unsigned lane = threadIdx.x;
  __align__(16) unsigned char storage[CUDAQ_RT_SESSION_STORAGE_SIZE];
  long long *probe_clock =
      reinterpret_cast<long long *>(storage + CUDAQ_RT_SESSION_STORAGE_SIZE - 16);
  probe_clock[0] = probe_clock[1] = 0; // a bridge that does not stamp leaves them 0
  cudaq_rt_warp_serve(storage, p, lane, [&](void *session) { warp_rounds(p, session, lane); });
}
CUDAQ_RT_EXPORT_DISPATCH_KERNEL(cudaq_rt_bench_warp_rounds);
