// A custom dispatch kernel, as an application would bring one: it drives the bridge hooks and the
// function table the way cudaq_rt/dispatch.h describes, one thread per block doing the work.
#include "cudaq_rt/dispatch.h"

extern "C" __global__ void test_custom_dispatch(cudaq_rt_dispatch_params p) {
  if (threadIdx.x != 0)
    return;
  alignas(16) unsigned char storage[CUDAQ_RT_SESSION_STORAGE_SIZE];
  void *session = cudaq_dev_enter_kernel(storage, p.transport_ctx, p.shutdown_flag);
  if (!session)
    return;
  void *request, *response;
  while (cudaq_dev_rx_poll(session, &request, &response) == CUDAQ_DEV_RX_READY) {
    const cudaq_rt_request_header *rq = static_cast<const cudaq_rt_request_header *>(request);
    cudaq_rt_response_header *rs = static_cast<cudaq_rt_response_header *>(response);
    int status = CUDAQ_RT_STATUS_UNKNOWN_FUNCTION;
    uint32_t result_len = 0;
    for (uint32_t i = 0; i < p.num_functions; ++i)
      if (p.function_table[i].function_id == rq->function_id)
        status = p.function_table[i].handler(rq + 1, rs + 1, rq->arg_len,
                                             p.slot_size - CUDAQ_RT_HEADER_SIZE, &result_len);
    rs->magic = CUDAQ_RT_RESPONSE_MAGIC;
    rs->status = status;
    rs->result_len = result_len;
    rs->request_id = rq->request_id;
    rs->ptp_timestamp = rq->ptp_timestamp;
    cudaq_dev_tx_publish(session, response);
  }
}
CUDAQ_RT_EXPORT_DISPATCH_KERNEL(test_custom_dispatch);
