// A custom dispatch kernel: the unified kernel's serving loop, except that requests for the
// reserved function "ping" are answered in the kernel itself, with an empty result, without a
// table lookup or a handler call (a liveness probe that costs no handler).
#include "cudaq_rt/dispatch_framing.cuh"

static constexpr uint32_t ping_function_id = cudaq_rt::function_id("ping");

extern "C" __global__ void outside_ping_dispatch(cudaq_rt_dispatch_params p) {
  if (threadIdx.x != 0 || blockIdx.x != 0)
    return;
  __align__(16) unsigned char storage[CUDAQ_RT_SESSION_STORAGE_SIZE];
  void *session = cudaq_dev_enter_kernel(storage, p.transport_ctx, p.shutdown_flag);
  if (!session)
    return;

  cudaq_rt_dispatch_counters counters = cudaq_rt_counters_load(p.stats);
  void *request = 0, *response = 0;
  while (cudaq_dev_rx_poll(session, &request, &response) == CUDAQ_DEV_RX_READY) {
    const cudaq_rt_request_header *req = (const cudaq_rt_request_header *)request;
    if (req->function_id == ping_function_id &&
        cudaq_rt_validate_request(req, p.slot_size) == CUDAQ_RT_STATUS_OK) {
      cudaq_rt_write_response_header((cudaq_rt_response_header *)response, CUDAQ_RT_STATUS_OK, 0,
                                     req->request_id, req->ptp_timestamp);
      cudaq_rt_counters_record(&counters, CUDAQ_RT_STATUS_OK);
    } else {
      cudaq_rt_serve_frame(p.function_table, p.num_functions, p.slot_size, request, response,
                           &counters);
    }
    cudaq_rt_counters_store(p.stats, &counters);
    cudaq_dev_tx_publish(session, response);
  }
}
CUDAQ_RT_EXPORT_DISPATCH_KERNEL(outside_ping_dispatch);
