// The loopback bridge's host side: allocates the ring and feeds it from this process (a
// launcher's one-shot calls, benchmarks, the GPU tests). The ring protocol is explained in
// loopback_ring.h; send and receive are in loopback_host.h. One host thread drives an instance,
// and one device thread serves it (loopback_ring.h), at a time.
#include "loopback_host.h"

#include <cuda_runtime.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>

namespace {

using namespace cudaq_rt::loopback;

thread_local std::string create_error;

bool parse_u32(std::string_view text, uint32_t &out) {
  if (text.empty() || text.size() > 10)
    return false;
  uint64_t v = 0;
  for (char c : text) {
    if (c < '0' || c > '9')
      return false;
    v = v * 10 + uint64_t(c - '0');
  }
  if (v > UINT32_MAX)
    return false;
  out = uint32_t(v);
  return true;
}

bool fail_create(std::string message) {
  create_error = std::move(message);
  return false;
}

bool parse_config(std::string_view config, uint32_t &slots, uint32_t &slot_size) {
  while (!config.empty()) {
    size_t comma = config.find(',');
    std::string_view item = config.substr(0, comma);
    config = comma == std::string_view::npos ? std::string_view{} : config.substr(comma + 1);
    if (item.empty())
      continue;
    size_t eq = item.find('=');
    std::string_view key = item.substr(0, eq);
    std::string_view value =
        eq == std::string_view::npos ? std::string_view{} : item.substr(eq + 1);
    uint32_t *target = key == "slots" ? &slots : key == "slot_size" ? &slot_size : nullptr;
    if (!target)
      return fail_create("unknown option '" + std::string(key) +
                         "' (known: slots=N, slot_size=BYTES)");
    if (!parse_u32(value, *target))
      return fail_create("option '" + std::string(key) + "' needs a number, got '" +
                         std::string(value) + "'");
  }
  if (slots == 0 || slots > CUDAQ_RT_LOOPBACK_MAX_SLOTS)
    return fail_create("slots=" + std::to_string(slots) + " is out of range 1.." +
                       std::to_string(CUDAQ_RT_LOOPBACK_MAX_SLOTS));
  if (slot_size < CUDAQ_RT_LOOPBACK_MIN_SLOT_SIZE || slot_size > CUDAQ_RT_LOOPBACK_MAX_SLOT_SIZE ||
      slot_size % 16 != 0)
    return fail_create("slot_size=" + std::to_string(slot_size) + " must be a multiple of 16 in " +
                       std::to_string(CUDAQ_RT_LOOPBACK_MIN_SLOT_SIZE) + ".." +
                       std::to_string(CUDAQ_RT_LOOPBACK_MAX_SLOT_SIZE));
  return true;
}

bool cuda_ok(cudaError_t rc, const char *what, std::string &error) {
  if (rc == cudaSuccess)
    return true;
  error = std::string(what) + ": " + cudaGetErrorString(rc);
  return false;
}

void release(cudaq_rt_bridge *b) {
  if (b->request_block)
    cudaFreeHost(b->request_block);
  if (b->response_block)
    cudaFreeHost(b->response_block);
  if (b->device_block)
    cudaFree(b->device_block);
  delete b;
}

cudaq_rt_bridge_result create(const char *config, cudaq_rt_bridge **out) {
  create_error.clear();
  if (!out) {
    create_error = "create: no place for the result";
    return CUDAQ_RT_BRIDGE_ERROR;
  }
  *out = nullptr;
  uint32_t slots = CUDAQ_RT_LOOPBACK_DEFAULT_SLOTS, slot_size = CUDAQ_RT_LOOPBACK_DEFAULT_SLOT_SIZE;
  if (!parse_config(config ? config : "", slots, slot_size))
    return CUDAQ_RT_BRIDGE_ERROR;

  auto *b = new cudaq_rt_bridge;
  b->num_slots = slots;
  b->slot_size = slot_size;
  b->tail_cells = cudaq_rt_loopback_tail_cells(slot_size);
  const size_t heads_bytes = CUDAQ_RT_LOOPBACK_HEADS_BYTES(slots);
  const size_t ring_bytes =
      heads_bytes + size_t(slots) * b->tail_cells * CUDAQ_RT_LOOPBACK_CELL_SIZE;
  const size_t frames_bytes = size_t(slots) * slot_size;
  const size_t ctx_bytes = 256; // keeps the staging frames 256-aligned

  // Both rings mapped, zeroed: no stamp is 0, so nothing looks ready. The host only writes the
  // request ring (write-combined, see loopback_ring.h) and only reads the response ring (cached:
  // a poll of an unchanged line costs the CPU nothing).
  const unsigned request_flags =
      cudaHostAllocMapped | (CUDAQ_RT_LOOPBACK_REQUEST_WC ? cudaHostAllocWriteCombined : 0u);
  if (!cuda_ok(cudaHostAlloc(&b->request_block, ring_bytes, request_flags),
               "cudaHostAlloc (mapped, request ring)", create_error) ||
      !cuda_ok(cudaHostAlloc(&b->response_block, ring_bytes, cudaHostAllocMapped),
               "cudaHostAlloc (mapped, response ring)", create_error) ||
      !cuda_ok(cudaMalloc(&b->device_block, ctx_bytes + 2 * frames_bytes), "cudaMalloc",
               create_error)) {
    release(b);
    return CUDAQ_RT_BRIDGE_ERROR;
  }
  std::memset(b->request_block, 0, ring_bytes);
  std::memset(b->response_block, 0, ring_bytes);
  flush_stores();
  b->request_heads = static_cast<uint64_t *>(b->request_block);
  b->request_tails = b->request_heads + heads_bytes / 8;
  b->response_heads = static_cast<uint64_t *>(b->response_block);
  b->response_tails = b->response_heads + heads_bytes / 8;

  void *device_requests = nullptr, *device_responses = nullptr;
  if (!cuda_ok(cudaHostGetDevicePointer(&device_requests, b->request_block, 0),
               "cudaHostGetDevicePointer", create_error) ||
      !cuda_ok(cudaHostGetDevicePointer(&device_responses, b->response_block, 0),
               "cudaHostGetDevicePointer", create_error)) {
    release(b);
    return CUDAQ_RT_BRIDGE_ERROR;
  }
  auto *device = static_cast<unsigned char *>(b->device_block);
  cudaq_rt_loopback_device_ctx ctx{};
  ctx.magic = CUDAQ_RT_LOOPBACK_CTX_MAGIC;
  ctx.num_slots = slots;
  ctx.slot_size = slot_size;
  ctx.tail_cells = b->tail_cells;
  ctx.request_heads = device_requests;
  ctx.request_tails = static_cast<char *>(device_requests) + heads_bytes;
  ctx.response_heads = device_responses;
  ctx.response_tails = static_cast<char *>(device_responses) + heads_bytes;
  ctx.request_frames = device + ctx_bytes;
  ctx.response_frames = device + ctx_bytes + frames_bytes;
  ctx.resume_slot = 0; // the first kernel starts where send() does: request 0, slot 0
  ctx.resume_lap = cudaq_rt_loopback_lap(0, slots);
  for (uint32_t lane = 0; lane < 32; ++lane) { // request `lane` is the warp form's first for it
    ctx.warp_resume_slot[lane] = lane;
    ctx.warp_resume_lap[lane] = cudaq_rt_loopback_lap(lane, slots);
  }
  b->device_ctx = reinterpret_cast<cudaq_rt_loopback_device_ctx *>(device);
  // Synchronous copies: the dispatch kernel is not running yet, so nothing can queue behind it.
  if (!cuda_ok(cudaMemset(device, 0, ctx_bytes + 2 * frames_bytes), "cudaMemset", create_error) ||
      !cuda_ok(cudaMemcpy(device, &ctx, sizeof ctx, cudaMemcpyHostToDevice), "cudaMemcpy",
               create_error)) {
    release(b);
    return CUDAQ_RT_BRIDGE_ERROR;
  }
  *out = b;
  return CUDAQ_RT_BRIDGE_OK;
}

void destroy(cudaq_rt_bridge *b) {
  if (b)
    release(b);
}

const char *last_error(const cudaq_rt_bridge *b) {
  return b ? b->error.c_str() : create_error.c_str();
}

void *device_context(cudaq_rt_bridge *b) {
  return b->device_ctx;
}
uint32_t slot_size(cudaq_rt_bridge *b) {
  return b->slot_size;
}
uint32_t num_slots(cudaq_rt_bridge *b) {
  return b->num_slots;
}

// The ring work is in loopback_host.h, where the tests reach it.
cudaq_rt_bridge_result send(cudaq_rt_bridge *b, const void *frame, size_t size) {
  return send_request(b, frame, size);
}

cudaq_rt_bridge_result receive(cudaq_rt_bridge *b, void *buffer, size_t capacity, size_t *size) {
  return receive_response(b, buffer, capacity, size);
}

cudaq_rt_bridge_result send_batch(cudaq_rt_bridge *b, const void *const *frames,
                                  const size_t *sizes, size_t count, size_t *queued) {
  size_t done = 0;
  cudaq_rt_bridge_result r = CUDAQ_RT_BRIDGE_OK;
  for (; done < count; ++done)
    if ((r = send_request(b, frames[done], sizes[done])) != CUDAQ_RT_BRIDGE_OK)
      break;
  *queued = done;
  return done > 0 && r == CUDAQ_RT_BRIDGE_AGAIN ? CUDAQ_RT_BRIDGE_OK : r;
}

cudaq_rt_bridge_result receive_batch(cudaq_rt_bridge *b, void *buffer, size_t stride, size_t *sizes,
                                     size_t count, size_t *taken) {
  size_t done = 0;
  cudaq_rt_bridge_result r = CUDAQ_RT_BRIDGE_OK;
  for (; done < count; ++done)
    if ((r = receive_response(b, static_cast<unsigned char *>(buffer) + done * stride, stride,
                              &sizes[done])) != CUDAQ_RT_BRIDGE_OK)
      break;
  *taken = done;
  return done > 0 && r == CUDAQ_RT_BRIDGE_AGAIN ? CUDAQ_RT_BRIDGE_OK : r;
}

// The name users pass to --bridge; bench/CMakeLists.txt builds variants of this bridge (other
// knobs of loopback_ring.h) under other names, side by side with it.
#ifndef CUDAQ_RT_LOOPBACK_NAME
#define CUDAQ_RT_LOOPBACK_NAME "loopback"
#endif

const cudaq_rt_bridge_ops loopback_ops = {
    CUDAQ_RT_BRIDGE_ABI_VERSION,
    sizeof(cudaq_rt_bridge_ops),
    CUDAQ_RT_LOOPBACK_NAME,
    "a ring of slots in mapped pinned host memory, fed by this process",
    CUDAQ_RT_BRIDGE_CAP_HOST_FRAMES,
    0,
    create,
    destroy,
    last_error,
    device_context,
    slot_size,
    num_slots,
    send,
    receive,
    send_batch,
    receive_batch,
};

} // namespace

extern "C" __attribute__((visibility("default"))) const cudaq_rt_bridge_ops *
cudaq_rt_bridge_entry(void) {
  return &loopback_ops;
}
