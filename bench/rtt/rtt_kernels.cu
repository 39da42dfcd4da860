// Dispatch kernels for bench/loopback_rtt.cpp, packed with --dispatcher and launched through the
// runtime's load path like any custom dispatch kernel:
//   cudaq_rt_bench_stages        the unified kernel's loop (libdispatch/src/unified_dispatch.cu),
//                                step by step, with a clock64 stamp between the steps; each
//                                request's stage times go to cudaq_rt_bench_stage_log, which the
//                                bench reads after the kernel stopped;
//   cudaq_rt_bench_global_table  the unified kernel with the function table left in device
//                                memory (what the table in shared memory buys).
#include "cudaq_rt/dispatch_framing.cuh"

#define BENCH_STAGE_ROWS 65536u
#define BENCH_TABLE_ROWS 512u

// Per request, in SM cycles: [0] ready -> handler found (validation, lookup), [1] the handler,
// [2] the response header, [3] tx_publish, [4] the counters' store, [5] all of it, [6] 1 when
// the bridge staged the request in shared memory.
extern "C" {
__device__ unsigned int cudaq_rt_bench_stage_log[BENCH_STAGE_ROWS][8];
__device__ unsigned long long cudaq_rt_bench_stage_count;
}
CUDAQ_RT_EXPORT_GLOBAL(cudaq_rt_bench_stage_log);
CUDAQ_RT_EXPORT_GLOBAL(cudaq_rt_bench_stage_count);

namespace {
__device__ __forceinline__ bool first_thread() {
  return threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0 && blockIdx.x == 0 &&
         blockIdx.y == 0 && blockIdx.z == 0;
}
} // namespace

extern "C" __global__ void cudaq_rt_bench_stages(cudaq_rt_dispatch_params p) {
  if (!first_thread())
    return;
  __align__(16) unsigned char storage[CUDAQ_RT_SESSION_STORAGE_SIZE];
  void *session = cudaq_dev_enter_kernel(storage, p.transport_ctx, p.shutdown_flag);
  if (!session)
    return;
  __shared__ cudaq_rt_function_entry rows[BENCH_TABLE_ROWS];
  const cudaq_rt_function_entry *table =
      cudaq_rt_table_in_shared(p.function_table, p.num_functions, rows, BENCH_TABLE_ROWS);
  cudaq_rt_dispatch_counters counters = cudaq_rt_counters_load(p.stats);
  unsigned long long n = 0;
  void *request = 0, *response = 0;
  while (cudaq_dev_rx_poll(session, &request, &response) == CUDAQ_DEV_RX_READY) {
    const long long t0 = clock64();
    const cudaq_rt_request_header *req = (const cudaq_rt_request_header *)request;
    const uint32_t request_id = req->request_id;
    const uint64_t ptp_timestamp = req->ptp_timestamp;
    uint32_t result_len = 0;
    int status = cudaq_rt_validate_request(req, p.slot_size);
    cudaq_rt_handler_fn handler = 0;
    if (status == CUDAQ_RT_STATUS_OK) {
      handler = cudaq_rt_find_handler(table, p.num_functions, req->function_id);
      if (!handler)
        status = CUDAQ_RT_STATUS_UNKNOWN_FUNCTION;
    }
    const long long t1 = clock64();
    if (handler)
      status = cudaq_rt_call_handler(handler, request, response, p.slot_size, &result_len);
    const long long t2 = clock64();
    cudaq_rt_write_response_header((cudaq_rt_response_header *)response, status, result_len,
                                   request_id, ptp_timestamp);
    cudaq_rt_counters_record(&counters, status);
    const long long t3 = clock64();
    cudaq_dev_tx_publish(session, response);
    const long long t4 = clock64();
    cudaq_rt_counters_store(p.stats, &counters);
    const long long t5 = clock64();
    unsigned int *row = cudaq_rt_bench_stage_log[n % BENCH_STAGE_ROWS];
    row[0] = (unsigned int)(t1 - t0);
    row[1] = (unsigned int)(t2 - t1);
    row[2] = (unsigned int)(t3 - t2);
    row[3] = (unsigned int)(t4 - t3);
    row[4] = (unsigned int)(t5 - t4);
    row[5] = (unsigned int)(t5 - t0);
    row[6] = __isShared(request);
    ++n;
  }
  cudaq_rt_bench_stage_count = n;
}
CUDAQ_RT_EXPORT_DISPATCH_KERNEL(cudaq_rt_bench_stages);

extern "C" __global__ void cudaq_rt_bench_global_table(cudaq_rt_dispatch_params p) {
  if (!first_thread())
    return;
  __align__(16) unsigned char storage[CUDAQ_RT_SESSION_STORAGE_SIZE];
  void *session = cudaq_dev_enter_kernel(storage, p.transport_ctx, p.shutdown_flag);
  if (!session)
    return;
  cudaq_rt_dispatch_counters counters = cudaq_rt_counters_load(p.stats);
  void *request = 0, *response = 0;
  while (cudaq_dev_rx_poll(session, &request, &response) == CUDAQ_DEV_RX_READY) {
    cudaq_rt_serve_frame(p.function_table, p.num_functions, p.slot_size, request, response,
                         &counters);
    cudaq_dev_tx_publish(session, response);
    cudaq_rt_counters_store(p.stats, &counters);
  }
}
CUDAQ_RT_EXPORT_DISPATCH_KERNEL(cudaq_rt_bench_global_table);
