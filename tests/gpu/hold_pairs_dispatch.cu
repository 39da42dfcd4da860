// A custom dispatch kernel that takes two requests before it answers either: cudaq_rt/dispatch.h
// lets a kernel poll again before it publishes, and the bridge must then keep both frames apart
// (gpu.loopback_dispatch_hold_pairs: among them the loopback ring's chain, whose next request may
// already be on its way into the spare frame when the kernel polls for it while it holds one).
// It serves only a client that keeps requests in flight in pairs: a lone request waits for a
// second, or for the shutdown flag.
#include "cudaq_rt/dispatch_framing.cuh"

extern "C" __global__ void hold_pairs_dispatch(cudaq_rt_dispatch_params p) {
  if (threadIdx.x != 0 || threadIdx.y != 0 || threadIdx.z != 0 || blockIdx.x != 0 ||
      blockIdx.y != 0 || blockIdx.z != 0)
    return;
  __align__(16) unsigned char storage[CUDAQ_RT_SESSION_STORAGE_SIZE];
  void *session = cudaq_dev_enter_kernel(storage, p.transport_ctx, p.shutdown_flag);
  if (!session)
    return;
  cudaq_rt_dispatch_counters counters = cudaq_rt_counters_load(p.stats);
  cudaq_rt_handler_cache cache = {0, 0};
  for (;;) {
    void *request[2] = {0, 0}, *response[2] = {0, 0};
    if (cudaq_dev_rx_poll(session, &request[0], &response[0]) != CUDAQ_DEV_RX_READY)
      return;
    const int held = cudaq_dev_rx_poll(session, &request[1], &response[1]) == CUDAQ_DEV_RX_READY
                         ? 2
                         : 1; // shutdown: the one held is still answered
    // Both served, then both published, in order: the first request's frames stay the kernel's
    // while the second is served.
    for (int i = 0; i < held; ++i)
      cudaq_rt_serve_frame_stored(p.function_table, p.num_functions, p.slot_size, request[i],
                                  response[i], p.stats, &counters, &cache);
    for (int i = 0; i < held; ++i)
      cudaq_dev_tx_publish(session, response[i]);
    if (held == 1)
      return;
  }
}
CUDAQ_RT_EXPORT_DISPATCH_KERNEL(hold_pairs_dispatch);
