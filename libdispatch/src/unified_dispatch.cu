// The unified dispatch kernel: the persistent kernel the runtime's load path
// (runtime/src/load/server.h) starts when the application brings no dispatch kernel of its own.
//
// Launch shape: one block of one thread (<<<1, 1>>>). Serving is sequential by contract (the
// bridge hands out one frame at a time and every request gets exactly one response, in order),
// so extra threads would only idle; any that a launcher does start return at once. The latency
// that matters is PCIe, not arithmetic, and the bridge keeps several transfers in flight itself.
//
// The wide build (CUDAQ_RT_UNIFIED_WIDE=1), for a bridge that has the wide hooks
// (cudaq_rt/dispatch.h): on sm_90 and later, launched as one warp, whose 32 lanes receive and
// publish each frame together while lane 0 alone serves it (launched any other way, it faults);
// on older GPUs, the one-thread kernel.
//
// Built once, at build time, to LTO-IR for sm_80 (which links for that GPU and every newer one;
// the wide build for sm_90 too) and embedded in the runtime library; cudaq-rt-link links it with a bridge's hooks and the
// application's handlers into one module.
#include "cudaq_rt/dispatch_framing.cuh"

// Function-table rows kept in shared memory (16 bytes each); a larger table is searched where
// the runtime put it, in device memory.
#ifndef CUDAQ_RT_UNIFIED_SHARED_TABLE_ROWS
#define CUDAQ_RT_UNIFIED_SHARED_TABLE_ROWS 512
#endif

#ifndef CUDAQ_RT_UNIFIED_WIDE
#define CUDAQ_RT_UNIFIED_WIDE 0
#endif
// The wide build's wide path is for sm_90 and later (the bridges' wide hooks are built there
// only); for older GPUs the wide build is the one-thread kernel, and the launcher starts it so.
#if CUDAQ_RT_UNIFIED_WIDE && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define CUDAQ_RT_UNIFIED_WIDE_PATH 1
#else
#define CUDAQ_RT_UNIFIED_WIDE_PATH 0
#endif

namespace {

__shared__ cudaq_rt_function_entry rows[CUDAQ_RT_UNIFIED_SHARED_TABLE_ROWS];

// One thread serves through the one-thread hooks (not in the wide build's wide path).
#if !CUDAQ_RT_UNIFIED_WIDE_PATH
__device__ __forceinline__ void serve_alone(const cudaq_rt_dispatch_params &p) {
  __align__(16) unsigned char storage[CUDAQ_RT_SESSION_STORAGE_SIZE];
  void *session = cudaq_dev_enter_kernel(storage, p.transport_ctx, p.shutdown_flag);
  if (!session)
    return;

  const cudaq_rt_function_entry *table = cudaq_rt_table_in_shared(
      p.function_table, p.num_functions, rows, CUDAQ_RT_UNIFIED_SHARED_TABLE_ROWS);

  cudaq_rt_dispatch_counters counters = cudaq_rt_counters_load(p.stats);
  cudaq_rt_handler_cache cache = {0, 0};
  void *request = 0, *response = 0;
  while (cudaq_dev_rx_poll(session, &request, &response) == CUDAQ_DEV_RX_READY) {
    // The counters stored before the response header, the header last: see there why.
    cudaq_rt_serve_frame_stored(table, p.num_functions, p.slot_size, request, response, p.stats,
                                &counters, &cache);
    cudaq_dev_tx_publish(session, response);
  }
}
#endif

#if CUDAQ_RT_UNIFIED_WIDE_PATH
// One warp receives and publishes, lane 0 serves (cudaq_rt/dispatch.h, "The wide form").
__device__ __forceinline__ void serve_wide(const cudaq_rt_dispatch_params &p, unsigned lane) {
  const unsigned all = 0xFFFFFFFFu;
  __align__(16) unsigned char storage[CUDAQ_RT_SESSION_STORAGE_SIZE];
  void *session = cudaq_dev_wide_enter_kernel(storage, p.transport_ctx, p.shutdown_flag, lane);
  // Serves only where every lane has a session. Voted in two branches, as cudaq_rt_warp_serve
  // does: a vote on session != 0 with the session used after it kept the storage in memory (a
  // 272-byte stack frame).
  if (!session) {
    __all_sync(all, 0);
    return;
  }
  if (!__all_sync(all, 1))
    return;

  const cudaq_rt_function_entry *table = p.function_table;
  if (p.num_functions <= CUDAQ_RT_UNIFIED_SHARED_TABLE_ROWS) {
    for (uint32_t i = lane; i < p.num_functions; i += CUDAQ_RT_WARP_LANES)
      rows[i] = p.function_table[i];
    __syncwarp(all);
    table = rows;
  }

  cudaq_rt_dispatch_counters counters = {0, 0, 0, 0};
  if (lane == 0)
    counters = cudaq_rt_counters_load(p.stats);
  cudaq_rt_handler_cache cache = {0, 0};
  void *request = 0, *response = 0;
  while (cudaq_dev_wide_rx_poll(session, &request, &response) == CUDAQ_DEV_RX_READY) {
    if (lane == 0)
      cudaq_rt_serve_frame_stored(table, p.num_functions, p.slot_size, request, response, p.stats,
                                  &counters, &cache);
    __syncwarp(all); // the response, to the lanes that publish it with lane 0
    cudaq_dev_wide_tx_publish(session, response);
  }
}
#endif

} // namespace

extern "C" __global__ void cudaq_rt_unified_dispatch(cudaq_rt_dispatch_params p) {
  if (threadIdx.y != 0 || threadIdx.z != 0 || blockIdx.x != 0 || blockIdx.y != 0 || blockIdx.z != 0)
    return;
#if CUDAQ_RT_UNIFIED_WIDE_PATH
  // One warp, or nothing: a fault the launcher reports, where a block of another shape would wait
  // forever (the launcher starts this build as one warp; cudaq_rt/dispatch.h). The one-thread path
  // is not kept beside the wide one: inlined together they took the kernel past 255 registers.
  if (blockDim.x != CUDAQ_RT_WARP_LANES || blockDim.y != 1 || blockDim.z != 1)
    __trap();
  serve_wide(p, threadIdx.x);
#else
  if (threadIdx.x == 0)
    serve_alone(p);
#endif
}
