// The loopback ring's memory (loopback_alloc.h): the layout is in loopback_ring.h.
#include "loopback_alloc.h"

#include <cuda_runtime.h>

#include <cstring>

namespace cudaq_rt::loopback {
namespace {

bool cuda_ok(cudaError_t rc, const char *what, std::string &error) {
  if (rc == cudaSuccess)
    return true;
  error = std::string(what) + ": " + cudaGetErrorString(rc);
  return false;
}

} // namespace

bool current_gpu_has_bulk_engine() {
  int device = 0, major = 0;
  return cudaGetDevice(&device) == cudaSuccess &&
         cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) == cudaSuccess &&
         major >= 9;
}

void release_ring(cudaq_rt_bridge *b) {
  if (b->request_block)
    cudaFreeHost(b->request_block);
  if (b->response_block)
    cudaFreeHost(b->response_block);
  if (b->device_block)
    cudaFree(b->device_block);
  b->request_block = b->response_block = b->device_block = nullptr;
}

bool allocate_ring(cudaq_rt_bridge *b, uint32_t slots, uint32_t slot_size, uint32_t layout,
                   uint32_t bulk_min, uint32_t response_bulk_min, bool spare_frame,
                   uint32_t feeders, uint32_t warps, std::string &error) {
  b->num_slots = slots;
  b->spare_bytes = spare_frame ? slot_size : 0u;
  b->slot_size = slot_size;
  b->layout = layout;
  b->bulk_min = bulk_min;
  b->tail_cells = cudaq_rt_loopback_tail_cells(slot_size);
  const size_t heads_bytes = CUDAQ_RT_LOOPBACK_HEADS_BYTES(slots);
  const size_t frames_bytes = size_t(slots) * slot_size;
  // Heads, tails, then the bulk area (loopback_ring.h), on a line of its own: the bulk copy
  // engine needs 16-byte alignment, and a slot's bytes start a 128-byte line where slot_size is a
  // multiple of 128.
  const size_t bulk_at =
      (heads_bytes + size_t(slots) * b->tail_cells * CUDAQ_RT_LOOPBACK_CELL_SIZE + 127) &
      ~size_t(127);
  const size_t ring_bytes = bulk_at + frames_bytes;
  // The ctx, rounded up to keep the staging frames 256-aligned. (It was a fixed 256 bytes while
  // the ctx grew to 328 with the warp form's positions: a request staged in slot 0's device frame
  // overwrote warp_resume_lap[14..31].)
  constexpr size_t ctx_bytes = (sizeof(cudaq_rt_loopback_device_ctx) + 255) & ~size_t(255);

  // Both rings mapped, zeroed: no stamp is 0, so nothing looks ready. The host only writes the
  // request ring (write-combined, see loopback_ring.h) and only reads the response ring (cached:
  // a poll of an unchanged line costs the CPU nothing).
  const unsigned request_flags =
      cudaHostAllocMapped | (CUDAQ_RT_LOOPBACK_REQUEST_WC ? cudaHostAllocWriteCombined : 0u);
  if (!cuda_ok(cudaHostAlloc(&b->request_block, ring_bytes, request_flags),
               "cudaHostAlloc (mapped, request ring)", error) ||
      !cuda_ok(cudaHostAlloc(&b->response_block, ring_bytes, cudaHostAllocMapped),
               "cudaHostAlloc (mapped, response ring)", error) ||
      !cuda_ok(cudaMalloc(&b->device_block, ctx_bytes + 2 * frames_bytes), "cudaMalloc", error)) {
    release_ring(b);
    return false;
  }
  std::memset(b->request_block, 0, ring_bytes);
  std::memset(b->response_block, 0, ring_bytes);
  flush_stores();
  b->request_heads = static_cast<uint64_t *>(b->request_block);
  b->request_tails = b->request_heads + heads_bytes / 8;
  b->response_heads = static_cast<uint64_t *>(b->response_block);
  b->response_tails = b->response_heads + heads_bytes / 8;
  b->request_bulk = static_cast<unsigned char *>(b->request_block) + bulk_at;
  b->response_bulk = static_cast<unsigned char *>(b->response_block) + bulk_at;

  void *device_requests = nullptr, *device_responses = nullptr;
  if (!cuda_ok(cudaHostGetDevicePointer(&device_requests, b->request_block, 0),
               "cudaHostGetDevicePointer", error) ||
      !cuda_ok(cudaHostGetDevicePointer(&device_responses, b->response_block, 0),
               "cudaHostGetDevicePointer", error)) {
    release_ring(b);
    return false;
  }
  auto *device = static_cast<unsigned char *>(b->device_block);
  cudaq_rt_loopback_device_ctx ctx{};
  ctx.magic = CUDAQ_RT_LOOPBACK_CTX_MAGIC;
  ctx.num_slots = slots;
  ctx.slot_size = slot_size;
  ctx.tail_cells = b->tail_cells;
  ctx.layout = layout;
  ctx.request_heads = device_requests;
  ctx.request_tails = static_cast<char *>(device_requests) + heads_bytes;
  ctx.response_heads = device_responses;
  ctx.response_tails = static_cast<char *>(device_responses) + heads_bytes;
  ctx.bulk_min = response_bulk_min == CUDAQ_RT_LOOPBACK_RESPONSE_BULK_AS_REQUESTS
                     ? bulk_min
                     : response_bulk_min;
  ctx.spare_bytes = b->spare_bytes;
  ctx.feeders = feeders;
  ctx.warps = warps;
  ctx.warp_wake[0] = 1; // request 0 is warp 0's: it never rests before it ("Resting warps")
  ctx.request_bulk = static_cast<char *>(device_requests) + bulk_at;
  ctx.response_bulk = static_cast<char *>(device_responses) + bulk_at;
  ctx.request_frames = device + ctx_bytes;
  ctx.response_frames = device + ctx_bytes + frames_bytes;
  ctx.resume_slot = 0; // the first kernel starts where send() does: request 0, slot 0
  ctx.resume_lap = cudaq_rt_loopback_lap(0, slots);
  // Request i is the first for lane i % 32 of warp i / 32 (loopback_ring.h, "Warps").
  for (uint32_t i = 0; i < std::size(ctx.warp_resume_slot) && i < slots; ++i) {
    ctx.warp_resume_slot[i] = i;
    ctx.warp_resume_lap[i] = cudaq_rt_loopback_lap(i, slots);
  }
  b->device_ctx = reinterpret_cast<cudaq_rt_loopback_device_ctx *>(device);
  // Synchronous copies: the dispatch kernel is not running yet, so nothing can queue behind it.
  if (!cuda_ok(cudaMemset(device, 0, ctx_bytes + 2 * frames_bytes), "cudaMemset", error) ||
      !cuda_ok(cudaMemcpy(device, &ctx, sizeof ctx, cudaMemcpyHostToDevice), "cudaMemcpy", error)) {
    release_ring(b);
    return false;
  }
  return true;
}

} // namespace cudaq_rt::loopback
