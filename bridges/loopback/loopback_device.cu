// The loopback bridge's device hooks. The ring protocol is explained in loopback_ring.h.
//
// All three hooks are called by one serving thread. The session lives in the 256 bytes the
// dispatch kernel provides, so nothing here allocates.
#include "cudaq_rt/dispatch.h"
#include "loopback_ring.h"

namespace {

struct Session {
  const volatile uint4 *request_cells;
  volatile uint4 *response_cells;
  unsigned char *request_frames;
  unsigned char *response_frames;
  volatile int *shutdown_flag;
  unsigned long long head;    // sequence number of the next frame to hand out
  unsigned long long fetched; // frames [head, fetched) are unpacked and ready to hand out
  uint32_t num_slots;
  uint32_t slot_size;
  uint32_t cells_per_slot;
};
static_assert(sizeof(Session) <= CUDAQ_RT_SESSION_STORAGE_SIZE, "session must fit the storage");

constexpr uint32_t kBatch = 8; // cells loaded per round trip when unpacking a large payload

// 16-byte accesses to mapped host memory. volatile (relaxed, system scope) so that every poll
// really goes to memory; asm so that the compiler issues the loads back to back and keeps them
// as single 16-byte transactions.
__device__ __forceinline__ uint4 load_cell(const volatile uint4 *p) {
  uint4 v;
  asm volatile("ld.volatile.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

__device__ __forceinline__ void store_cell(volatile uint4 *p, uint4 v) {
  asm volatile("st.volatile.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(v.x), "r"(v.y), "r"(v.z),
               "r"(v.w)
               : "memory");
}

__device__ __forceinline__ bool stamped(const uint4 &cell, uint32_t lap) {
  return cell.x == lap && cell.z == lap;
}

__device__ __forceinline__ const volatile uint4 *request_slot(const Session *s, unsigned long long k) {
  return s->request_cells + (size_t)(k % s->num_slots) * s->cells_per_slot;
}

__device__ __forceinline__ unsigned char *request_frame(const Session *s, unsigned long long k) {
  return s->request_frames + (size_t)(k % s->num_slots) * s->slot_size;
}

// Cells a frame of `frame_len` bytes occupies, control included.
__device__ __forceinline__ uint32_t frame_cells(uint32_t frame_len) {
  return 1u + (frame_len + CUDAQ_RT_LOOPBACK_CELL_DATA - 1u) / CUDAQ_RT_LOOPBACK_CELL_DATA;
}

// Probes the next slots until at least one request is there (true) or shutdown is seen (false),
// and unpacks every ready request into its staging frame.
__device__ bool fetch(Session *s) {
  constexpr uint32_t W = CUDAQ_RT_LOOPBACK_PROBE_SLOTS, P = CUDAQ_RT_LOOPBACK_PROBE_CELLS;
  const uint32_t probe_slots = s->num_slots < W ? s->num_slots : W;
  uint4 probe[W][P];
  uint32_t cells[W];
  uint32_t ready = 0;
  for (;;) {
    // One round trip: every load below is independent and issued before the first is used.
#pragma unroll
    for (uint32_t w = 0; w < W; ++w)
      if (w < probe_slots) {
        const volatile uint4 *slot = request_slot(s, s->fetched + w);
#pragma unroll
        for (uint32_t c = 0; c < P; ++c)
          probe[w][c] = load_cell(slot + c);
      }
    const int shutdown = *s->shutdown_flag;
    if (shutdown)
      return false;

#pragma unroll
    for (uint32_t w = 0; w < W; ++w) {
      if (w >= probe_slots || w != ready)
        break;
      const uint32_t lap = CUDAQ_RT_LOOPBACK_LAP(s->fetched + w, s->num_slots);
      if (!stamped(probe[w][0], lap))
        break;
      uint32_t len = probe[w][0].y < s->slot_size ? probe[w][0].y : s->slot_size;
      cells[w] = frame_cells(len);
      // The control cell landed first or not, the probed frame cells must carry the lap too;
      // a late one is reloaded below with the rest of the payload.
      ++ready;
    }
    if (ready > 0)
      break;
  }

  // Unpack the probed cells, then load the remainder of each frame, 8 cells per round trip,
  // reloading any half the host has not stamped yet (torn or still being written).
  for (uint32_t w = 0; w < ready; ++w) {
    const unsigned long long k = s->fetched + w;
    const uint32_t lap = CUDAQ_RT_LOOPBACK_LAP(k, s->num_slots);
    const volatile uint4 *slot = request_slot(s, k);
    uint2 *frame = reinterpret_cast<uint2 *>(request_frame(s, k));
#pragma unroll
    for (uint32_t c = 1; c < P; ++c) {
      if (c >= cells[w])
        break;
      uint4 v = probe[w][c];
      while (!stamped(v, lap))
        v = load_cell(slot + c);
      frame[c - 1] = make_uint2(v.y, v.w);
    }
    for (uint32_t c = P; c < cells[w]; c += kBatch) {
      uint4 v[kBatch];
#pragma unroll
      for (uint32_t b = 0; b < kBatch; ++b)
        if (c + b < cells[w])
          v[b] = load_cell(slot + c + b);
#pragma unroll
      for (uint32_t b = 0; b < kBatch; ++b)
        if (c + b < cells[w]) {
          while (!stamped(v[b], lap))
            v[b] = load_cell(slot + c + b);
          frame[c + b - 1] = make_uint2(v[b].y, v[b].w);
        }
    }
  }
  s->fetched += ready;
  return true;
}

} // namespace

extern "C" __device__ void *cudaq_dev_enter_kernel(void *storage, void *ctx,
                                                   volatile int *shutdown_flag) {
  const cudaq_rt_loopback_device_ctx *c = static_cast<const cudaq_rt_loopback_device_ctx *>(ctx);
  if (!storage || !c || !shutdown_flag || c->magic != CUDAQ_RT_LOOPBACK_CTX_MAGIC ||
      c->num_slots == 0 || c->slot_size < CUDAQ_RT_LOOPBACK_MIN_SLOT_SIZE)
    return nullptr;
  Session *s = static_cast<Session *>(storage);
  s->request_cells = static_cast<const volatile uint4 *>(c->request_cells);
  s->response_cells = static_cast<volatile uint4 *>(c->response_cells);
  s->request_frames = c->request_frames;
  s->response_frames = c->response_frames;
  s->shutdown_flag = shutdown_flag;
  s->head = 0;
  s->fetched = 0;
  s->num_slots = c->num_slots;
  s->slot_size = c->slot_size;
  s->cells_per_slot = c->cells_per_slot;
  return s;
}

extern "C" __device__ int cudaq_dev_rx_poll(void *session, void **request, void **response) {
  Session *s = static_cast<Session *>(session);
  if (s->head == s->fetched && !fetch(s))
    return CUDAQ_DEV_RX_SHUTDOWN;
  const size_t offset = (size_t)(s->head % s->num_slots) * s->slot_size;
  *request = s->request_frames + offset;
  *response = s->response_frames + offset;
  ++s->head;
  return CUDAQ_DEV_RX_READY;
}

extern "C" __device__ void cudaq_dev_tx_publish(void *session, void *response) {
  Session *s = static_cast<Session *>(session);
  const uint32_t slot =
      (uint32_t)((static_cast<unsigned char *>(response) - s->response_frames) / s->slot_size);
  // The frame in this slot is the latest one fetched into it: the host cannot reuse a slot before
  // it has this response.
  const unsigned long long last = s->fetched - 1;
  const unsigned long long k = last - (last - slot) % s->num_slots;
  const uint32_t lap = CUDAQ_RT_LOOPBACK_LAP(k, s->num_slots);

  const cudaq_rt_response_header *header = static_cast<const cudaq_rt_response_header *>(response);
  const uint32_t max_result = s->slot_size - CUDAQ_RT_HEADER_SIZE;
  const uint32_t len =
      CUDAQ_RT_HEADER_SIZE + (header->result_len < max_result ? header->result_len : max_result);
  const uint32_t cells = frame_cells(len);
  const uint2 *frame = static_cast<const uint2 *>(response);
  volatile uint4 *out = s->response_cells + (size_t)slot * s->cells_per_slot;
  // Posted stores, in any order: each half carries its own stamp, so no fence is needed.
  for (uint32_t c = 1; c < cells; ++c) {
    const uint2 d = frame[c - 1];
    store_cell(out + c, make_uint4(lap, d.x, lap, d.y));
  }
  store_cell(out, make_uint4(lap, len, lap, 0u));
}
