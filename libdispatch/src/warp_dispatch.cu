// The warp dispatch kernel: 32 lanes of one warp serve 32 requests at a time, for throughput.
// Selected with --dispatcher warp (cudaq-rt-link, cudaq-rt-run); launched as one block of 32
// threads, or as B blocks (--grid B,32), each of whose first warp serves: the bridge is told 32 * B
// polling lanes and gives each warp its own share of the ring (the loopback ring's warps=B), so
// that one warp's round overlaps another's. It drives the bridge's warp-form hooks
// (cudaq_rt/dispatch.h): every lane polls its own next request in the same instructions, the
// lanes that found one serve it (the same framing as the unified kernel:
// cudaq_rt/dispatch_framing.cuh) and publish it, and lane 0 adds the round's outcomes to the
// counters, block b's at stats[b] (the launcher sums them). Handlers therefore run concurrently:
// the link admits only handlers exported with CUDAQ_RT_EXPORT_HANDLER_CONCURRENT.
//
// Built like the unified kernel: LTO-IR for sm_80, embedded in the runtime library; also as its
// lone build (CUDAQ_RT_WARP_LONE), which takes the lone turn before each round.
#include "cudaq_rt/dispatch_framing.cuh"

// 1: the lone turn (cudaq_rt/dispatch.h, "The warp form's lone turn"), for a bridge that exports
// its hooks: a per-TU link takes this build then (a whole-program one keeps the plain direct form).
#ifndef CUDAQ_RT_WARP_LONE
#define CUDAQ_RT_WARP_LONE 0
#endif

#ifndef CUDAQ_RT_WARP_SHARED_TABLE_ROWS
#define CUDAQ_RT_WARP_SHARED_TABLE_ROWS 512
#endif

namespace {
// The serving loop of one lane, over its bridge session.
__device__ __forceinline__ void serve(const cudaq_rt_dispatch_params &p, void *session,
                                      unsigned lane) {
  cudaq_rt_dispatch_stats *stats = p.stats ? p.stats + blockIdx.x : p.stats; // this warp's row
  const unsigned all = 0xFFFFFFFFu;
  __shared__ cudaq_rt_function_entry rows[CUDAQ_RT_WARP_SHARED_TABLE_ROWS];
  const cudaq_rt_function_entry *table = p.function_table;
  if (p.num_functions <= CUDAQ_RT_WARP_SHARED_TABLE_ROWS) {
    for (uint32_t i = lane; i < p.num_functions; i += CUDAQ_RT_WARP_LANES)
      rows[i] = p.function_table[i];
    __syncwarp(all);
    table = rows;
  }

  cudaq_rt_dispatch_counters counters = {0, 0, 0, 0};
  cudaq_rt_handler_cache cache = {0, 0}; // per lane
  if (lane == 0)
    counters = cudaq_rt_counters_load(stats);
  for (;;) {
#if CUDAQ_RT_WARP_LONE
    cudaq_rt_warp_lone_step(session, lane, table, p.num_functions, p.slot_size, stats, &counters,
                            &cache);
#endif
    void *request = 0, *response = 0;
    const int r = cudaq_dev_warp_rx_poll(session, &request, &response);
    // As the unified kernel: the answer, the counters, then the header, right before tx_publish.
    cudaq_rt_answer a = {CUDAQ_RT_STATUS_OK, 0, 0, 0};
    if (r == CUDAQ_DEV_RX_READY)
      a = cudaq_rt_answer_request(table, p.num_functions, p.slot_size, request, response, &cache);
    const unsigned ready = __ballot_sync(all, r == CUDAQ_DEV_RX_READY);
    if (ready) {
      const unsigned ok = __ballot_sync(all, r == CUDAQ_DEV_RX_READY && a.status == 0);
      const unsigned failed = __ballot_sync(all, r == CUDAQ_DEV_RX_READY && a.status > 0);
      if (lane == 0) {
        counters.requests += __popc(ready);
        counters.ok += __popc(ok);
        counters.handler_errors += __popc(failed);
        counters.protocol_errors += __popc(ready & ~ok & ~failed);
        cudaq_rt_counters_store(stats, &counters); // before the responses, as the unified kernel
      }
      __syncwarp(all); // lane 0's counters are stored before any lane publishes
    }
    if (r == CUDAQ_DEV_RX_READY) {
      cudaq_rt_write_answer(response, &a);
      cudaq_dev_warp_tx_publish(session, response);
    }
    if (__all_sync(all, r == CUDAQ_DEV_RX_SHUTDOWN))
      break;
  }
}
} // namespace

extern "C" __global__ void cudaq_rt_warp_dispatch(cudaq_rt_dispatch_params p) {
  // Warp 0 of each block serves; a launch with fewer than 32 threads cannot.
  if (blockIdx.y != 0 || blockIdx.z != 0 || threadIdx.y != 0 || threadIdx.z != 0 ||
      threadIdx.x >= CUDAQ_RT_WARP_LANES || blockDim.x < CUDAQ_RT_WARP_LANES)
    return;
  const unsigned lane = threadIdx.x;

  __align__(16) unsigned char storage[CUDAQ_RT_SESSION_STORAGE_SIZE];
  cudaq_rt_warp_serve(storage, p, lane, [&](void *session) { serve(p, session, lane); });
}
