// A custom dispatch kernel that hands each request to a whole block, for handlers that use a
// block's threads (a reduction, a decoder that works a syndrome in parallel), and two such
// handlers.
//
// The handoff. Thread 0 is the only one that talks to the bridge (a bridge session is
// single-threaded, cudaq_rt/dispatch.h): it polls, validates the frame and looks its handler up,
// and leaves the verdict in shared memory. A __syncthreads() then hands it to the block: every
// thread calls the same handler with the same arguments (the request and response frames are in
// device memory the whole block can reach), a second __syncthreads() waits until all of them have
// returned (so every thread's writes to the result are done), and thread 0 writes the response
// header, publishes and stores the counters; a third keeps the next poll from overwriting the
// verdict before every thread has read it. A frame that is refused (bad magic, unknown function,
// oversize) is answered by thread 0 alone.
//
// The block-handler contract: the handler ABI of cudaq_rt/exports.h, called by every thread of
// the block at once, so it may use __syncthreads() and __shared__ memory (every thread reaches
// every barrier); the status and *result_len that thread 0 returns are the ones sent. Written for
// any blockDim, the handlers below also answer under the unified kernel (a block of one thread).
//
// Launch: --grid 1,THREADS (up to 1024; a multiple of 32 uses whole warps). Only block 0 serves:
// the bridge hands out one frame at a time, so further blocks return at once.
#include "cudaq_rt/dispatch_framing.cuh"

namespace {
enum Verdict : int { call_handler, answered, stop };
}

// Up to 1024 threads a block: the bound makes ptxas keep the kernel (hooks and handlers inlined
// by the link) within the registers 1024 threads can have, where it would otherwise use more and
// a launch of 1024 would fail (CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, measured on the H200).
extern "C" __global__ void __launch_bounds__(1024) block_dispatch(cudaq_rt_dispatch_params p) {
  if (blockIdx.x != 0 || blockIdx.y != 0 || blockIdx.z != 0)
    return;
  const bool leader = threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0;
  __shared__ int verdict;
  __shared__ void *request, *response;
  __shared__ cudaq_rt_handler_fn handler;

  __align__(16) unsigned char storage[CUDAQ_RT_SESSION_STORAGE_SIZE]; // thread 0's
  void *session = 0;
  cudaq_rt_dispatch_counters counters = {0, 0, 0, 0};
  if (leader) {
    session = cudaq_dev_enter_kernel(storage, p.transport_ctx, p.shutdown_flag);
    verdict = session ? answered : stop;
    counters = cudaq_rt_counters_load(p.stats);
  }
  __syncthreads();
  if (verdict == stop)
    return;

  for (;;) {
    if (leader) {
      if (cudaq_dev_rx_poll(session, &request, &response) != CUDAQ_DEV_RX_READY) {
        verdict = stop;
      } else {
        const cudaq_rt_request_header *req = (const cudaq_rt_request_header *)request;
        int status = cudaq_rt_validate_request(req, p.slot_size);
        handler = 0;
        if (status == CUDAQ_RT_STATUS_OK) {
          handler = cudaq_rt_find_handler(p.function_table, p.num_functions, req->function_id);
          if (!handler)
            status = CUDAQ_RT_STATUS_UNKNOWN_FUNCTION;
        }
        if (handler) {
          verdict = call_handler;
        } else {
          cudaq_rt_write_response_header((cudaq_rt_response_header *)response, status, 0,
                                         req->request_id, req->ptp_timestamp);
          cudaq_rt_counters_record(&counters, status);
          verdict = answered;
        }
      }
    }
    __syncthreads(); // the verdict, request, response and handler are the block's
    if (verdict == stop)
      return;
    if (verdict == call_handler) {
      const cudaq_rt_request_header *req = (const cudaq_rt_request_header *)request;
      const uint32_t request_id = req->request_id;
      const uint64_t ptp_timestamp = req->ptp_timestamp;
      uint32_t result_len = 0;
      const int status =
          cudaq_rt_call_handler(handler, request, response, p.slot_size, &result_len);
      __syncthreads(); // every thread's part of the result is written
      if (leader) {
        cudaq_rt_write_response_header((cudaq_rt_response_header *)response, status, result_len,
                                       request_id, ptp_timestamp);
        cudaq_rt_counters_record(&counters, status);
      }
    }
    if (leader) {
      cudaq_rt_counters_store(p.stats, &counters);
      cudaq_dev_tx_publish(session, response);
    }
    __syncthreads(); // everyone has read this round's verdict before thread 0 polls again
  }
}
CUDAQ_RT_EXPORT_DISPATCH_KERNEL(block_dispatch);

namespace {
__device__ unsigned flat_thread() {
  return threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
}
__device__ unsigned block_size() {
  return blockDim.x * blockDim.y * blockDim.z;
}
} // namespace

// The sum of the payload's u32 values, as one u64, with every thread of the block: each sums a
// strided share, then the shares are folded pairwise in shared memory, halving the threads that
// work each round (any block size up to 1024).
static __device__ int block_sum_u32(const void *input, void *output, uint32_t arg_len,
                                    uint32_t max_result_len, uint32_t *result_len) {
  if (arg_len % 4 != 0 || max_result_len < 8)
    return 1; // every thread returns the same, before any barrier
  __shared__ unsigned long long partial[1024];
  const uint32_t *in = (const uint32_t *)input;
  const unsigned t = flat_thread(), n = block_size();
  unsigned long long sum = 0;
  for (uint32_t i = t; i < arg_len / 4; i += n)
    sum += in[i];
  partial[t] = sum;
  __syncthreads();
  unsigned half = 1;
  while (half < n)
    half *= 2;
  for (half /= 2; half > 0; half /= 2) {
    if (t < half && t + half < n)
      partial[t] += partial[t + half];
    __syncthreads();
  }
  if (t == 0)
    *(unsigned long long *)output = partial[0];
  *result_len = 8;
  return 0;
}
CUDAQ_RT_EXPORT_HANDLER(block_sum_u32);

// How many threads ran it: blockDim's size and a count of the threads that arrived (two u32), so
// that a test can tell a whole block from one thread.
static __device__ int block_threads(const void *, void *output, uint32_t, uint32_t max_result_len,
                                    uint32_t *result_len) {
  if (max_result_len < 8)
    return 1;
  __shared__ unsigned arrived;
  if (flat_thread() == 0)
    arrived = 0;
  __syncthreads();
  atomicAdd(&arrived, 1u);
  __syncthreads();
  if (flat_thread() == 0) {
    ((uint32_t *)output)[0] = block_size();
    ((uint32_t *)output)[1] = arrived;
  }
  *result_len = 8;
  return 0;
}
CUDAQ_RT_EXPORT_HANDLER(block_threads);
