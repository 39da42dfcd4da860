// The unified dispatch kernel: the persistent kernel the runtime's load path
// (runtime/src/load/server.h) starts when the application brings no dispatch kernel of its own.
//
// Launch shape: one block of one thread (<<<1, 1>>>). Serving is sequential by contract (the
// bridge hands out one frame at a time and every request gets exactly one response, in order),
// so extra threads would only idle; any that a launcher does start return at once. The latency
// that matters is PCIe, not arithmetic, and the bridge keeps several transfers in flight itself.
//
// Built once, at build time, to LTO-IR for sm_80 (which links for that GPU and every newer one)
// and embedded in the runtime library; cudaq-rt-link links it with a bridge's hooks and the
// application's handlers into one module.
#include "cudaq_rt/dispatch_framing.cuh"

// Function-table rows kept in shared memory (16 bytes each); a larger table is searched where
// the runtime put it, in device memory.
// 1: the lone form (cudaq_rt/dispatch.h), for a bridge that exports its hooks: a per-TU link
// takes this build then (a whole-program one keeps the plain direct form).
#ifndef CUDAQ_RT_UNIFIED_LONE
#define CUDAQ_RT_UNIFIED_LONE 0
#endif

#ifndef CUDAQ_RT_UNIFIED_SHARED_TABLE_ROWS
#define CUDAQ_RT_UNIFIED_SHARED_TABLE_ROWS 512
#endif

extern "C" __global__ void cudaq_rt_unified_dispatch(cudaq_rt_dispatch_params p) {
  if (threadIdx.x != 0 || threadIdx.y != 0 || threadIdx.z != 0 || blockIdx.x != 0 ||
      blockIdx.y != 0 || blockIdx.z != 0)
    return;

  __align__(16) unsigned char storage[CUDAQ_RT_SESSION_STORAGE_SIZE];
  void *session = cudaq_dev_enter_kernel(storage, p.transport_ctx, p.shutdown_flag);
  if (!session)
    return;

  __shared__ cudaq_rt_function_entry rows[CUDAQ_RT_UNIFIED_SHARED_TABLE_ROWS];
  const cudaq_rt_function_entry *table = cudaq_rt_table_in_shared(
      p.function_table, p.num_functions, rows, CUDAQ_RT_UNIFIED_SHARED_TABLE_ROWS);

  cudaq_rt_dispatch_counters counters = cudaq_rt_counters_load(p.stats);
  cudaq_rt_handler_cache cache = {0, 0};
  void *request = 0, *response = 0;
  for (;;) {
#if CUDAQ_RT_UNIFIED_LONE
    cudaq_rt_lone_step(session, table, p.num_functions, p.slot_size, p.stats, &counters, &cache);
#endif
    if (cudaq_dev_rx_poll(session, &request, &response) != CUDAQ_DEV_RX_READY)
      break;
    // The counters stored before the response header, the header last: see there why.
    cudaq_rt_serve_frame_stored(table, p.num_functions, p.slot_size, request, response, p.stats,
                                &counters, &cache);
    cudaq_dev_tx_publish(session, response);
  }
}
