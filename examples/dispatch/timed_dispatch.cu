// A custom dispatch kernel that serves like the unified one (one thread, the same validation,
// status codes and counters: cudaq_rt/dispatch_framing.cuh) and times every handler call, and the
// handler that reports those times.
//
// Each call is timed twice: with %globaltimer (nanoseconds, the GPU's wall clock; the H100/H200
// update it every 32 ns or so, coarser on older GPUs) and with clock64 (SM cycles: fine-grained,
// but the SM's clock changes with the GPU's boost). The times are kept per row of the function
// table, in a __device__ global of this module: the kernel and the `dispatch_timings` handler run
// on the same thread, one after the other, so the handler reads them without any race, and a
// client asks for them in-band, like any other request:
//
//   cudaq-rt-run app.cudaqpkg --dispatcher timed_dispatch --calls - <<'END'
//   sum_i32 i32:1,2,3
//   dispatch_timings u32:0x6f8fca3c --result u64     # one handler's row, by function_id
//   dispatch_timings --result u64                    # all rows summed
//   END
//
// The result is six u64: calls, total_ns, min_ns, max_ns, last_ns, total_cycles, covering every
// call answered before this one (the report's own call is counted after it answers). Unknown
// function_ids and refused frames are not handler calls and are not timed. A function_id the
// table lacks is answered with status 1 and no result.
#include "cudaq_rt/dispatch_framing.cuh"

namespace {

constexpr uint32_t max_rows = 64; // rows beyond these are served but not timed

struct HandlerTimes {
  unsigned long long calls, total_ns, min_ns, max_ns, last_ns, total_cycles;
};

__device__ __forceinline__ unsigned long long global_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// The row of `function_id` in a table sorted by function_id, or count when it is not there.
__device__ uint32_t row_of(const cudaq_rt_function_entry *table, uint32_t count,
                           uint32_t function_id) {
  uint32_t lo = 0, hi = count;
  while (lo < hi) {
    const uint32_t mid = lo + (hi - lo) / 2;
    if (table[mid].function_id == function_id)
      return mid;
    if (table[mid].function_id < function_id)
      lo = mid + 1;
    else
      hi = mid;
  }
  return count;
}

} // namespace

// Device memory is zero at module load; a relaunched kernel keeps adding to what is there.
extern "C" {
__device__ HandlerTimes timed_dispatch_rows[max_rows];
__device__ const cudaq_rt_function_entry *timed_dispatch_table;
__device__ uint32_t timed_dispatch_table_size;
}

extern "C" __global__ void timed_dispatch(cudaq_rt_dispatch_params p) {
  if (threadIdx.x != 0 || threadIdx.y != 0 || threadIdx.z != 0 || blockIdx.x != 0 ||
      blockIdx.y != 0 || blockIdx.z != 0)
    return;
  __align__(16) unsigned char storage[CUDAQ_RT_SESSION_STORAGE_SIZE];
  void *session = cudaq_dev_enter_kernel(storage, p.transport_ctx, p.shutdown_flag);
  if (!session)
    return;
  timed_dispatch_table = p.function_table;
  timed_dispatch_table_size = p.num_functions;

  cudaq_rt_dispatch_counters counters = cudaq_rt_counters_load(p.stats);
  void *request = 0, *response = 0;
  while (cudaq_dev_rx_poll(session, &request, &response) == CUDAQ_DEV_RX_READY) {
    const cudaq_rt_request_header *req = (const cudaq_rt_request_header *)request;
    const uint32_t request_id = req->request_id;
    const uint64_t ptp_timestamp = req->ptp_timestamp;
    uint32_t result_len = 0;
    int status = cudaq_rt_validate_request(req, p.slot_size);
    if (status == CUDAQ_RT_STATUS_OK) {
      const uint32_t row = row_of(p.function_table, p.num_functions, req->function_id);
      if (row == p.num_functions) {
        status = CUDAQ_RT_STATUS_UNKNOWN_FUNCTION;
      } else {
        const unsigned long long c0 = clock64();
        const unsigned long long t0 = global_ns();
        status = cudaq_rt_call_handler(p.function_table[row].handler, request, response,
                                       p.slot_size, &result_len);
        const unsigned long long t1 = global_ns();
        const unsigned long long c1 = clock64();
        if (row < max_rows) {
          HandlerTimes &t = timed_dispatch_rows[row];
          const unsigned long long ns = t1 - t0;
          t.min_ns = t.calls == 0 || ns < t.min_ns ? ns : t.min_ns;
          t.max_ns = ns > t.max_ns ? ns : t.max_ns;
          t.last_ns = ns;
          t.total_ns += ns;
          t.total_cycles += c1 - c0;
          ++t.calls;
        }
      }
    }
    cudaq_rt_write_response_header((cudaq_rt_response_header *)response, status, result_len,
                                   request_id, ptp_timestamp);
    cudaq_rt_counters_record(&counters, status);
    cudaq_rt_counters_store(p.stats, &counters);
    cudaq_dev_tx_publish(session, response);
  }
}
CUDAQ_RT_EXPORT_DISPATCH_KERNEL(timed_dispatch);

// No argument: every row summed (min over rows that have calls); a u32 function_id: that row.
static __device__ int dispatch_timings(const void *input, void *output, uint32_t arg_len,
                                       uint32_t max_result_len, uint32_t *result_len) {
  if ((arg_len != 0 && arg_len != 4) || max_result_len < sizeof(HandlerTimes))
    return 2;
  const uint32_t rows = timed_dispatch_table_size < max_rows ? timed_dispatch_table_size : max_rows;
  uint32_t first = 0, last = rows;
  if (arg_len == 4) {
    const uint32_t id = *(const uint32_t *)input;
    first = row_of(timed_dispatch_table, timed_dispatch_table_size, id);
    if (first >= rows)
      return 1;
    last = first + 1;
  }
  HandlerTimes sum = {0, 0, 0, 0, 0, 0};
  for (uint32_t r = first; r < last; ++r) {
    const HandlerTimes &t = timed_dispatch_rows[r];
    if (t.calls == 0)
      continue;
    sum.min_ns = sum.calls == 0 || t.min_ns < sum.min_ns ? t.min_ns : sum.min_ns;
    sum.max_ns = t.max_ns > sum.max_ns ? t.max_ns : sum.max_ns;
    sum.last_ns = t.last_ns;
    sum.calls += t.calls;
    sum.total_ns += t.total_ns;
    sum.total_cycles += t.total_cycles;
  }
  *(HandlerTimes *)output = sum;
  *result_len = sizeof sum;
  return 0;
}
CUDAQ_RT_EXPORT_HANDLER(dispatch_timings);
