// The loopback bridge's host side, as far as it needs no CUDA: the bridge instance, send()'s
// checks, the encoder that writes a request into the ring and the decoder that takes a response
// out of it. The ring protocol is explained in loopback_ring.h.
//
// In a header, rather than in loopback.cpp, so that the tests reach the same code:
//   - tests/unit/bridges/test_loopback_ring.cpp runs it on the CPU, on rings in ordinary memory,
//     against a CPU model of the device side;
//   - tests/gpu/loopback_dispatch_test.cpp writes, through write_request(), frames that send()
//     refuses, to check what the device side answers to them.
// The instance's layout is still the bridge's own business: only code built from this tree, with
// this header, may look inside a cudaq_rt_bridge.
#ifndef CUDAQ_RT_LOOPBACK_HOST_H
#define CUDAQ_RT_LOOPBACK_HOST_H

#include "../common/bridge_options.h"
#include "cudaq_rt/bridge_plugin.h"
#include "cudaq_rt/wire.h"
#include "loopback_ring.h"

#include <algorithm>
#include <atomic>
#include <bit>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

struct cudaq_rt_bridge {
  uint32_t num_slots = 0;
  uint32_t slot_size = 0;
  uint32_t tail_cells = 0;
  uint32_t layout = CUDAQ_RT_LOOPBACK_LAYOUT_SLOTS; // of the heads (loopback_ring.h)
  uint64_t *request_heads = nullptr; // host view, 2 halves per cell (see loopback_ring.h)
  uint64_t *request_tails = nullptr;
  uint64_t *response_heads = nullptr;
  uint64_t *response_tails = nullptr;
  unsigned char *request_bulk = nullptr; // host view of the bulk areas (loopback_ring.h)
  unsigned char *response_bulk = nullptr;
  uint32_t bulk_min = CUDAQ_RT_LOOPBACK_DEFAULT_BULK_MIN; // frames this long travel in bulk
  uint32_t spare_bytes = 0;       // dynamic shared memory the hooks want (spare_frame=1: slot_size)
  void *request_block = nullptr;  // cudaHostAlloc: the request ring
  void *response_block = nullptr; // cudaHostAlloc: the response ring
  void *device_block = nullptr;   // cudaMalloc: device ctx + staging frames
  cudaq_rt_loopback_device_ctx *device_ctx = nullptr;
  // Sequence numbers of the next request to write and the next response to take. They go on
  // across kernel launches: the device ctx keeps the device's side of the same position.
  uint64_t sent = 0;
  uint64_t received = 0;
  // Slot and lap of frame `k`, kept for the next frame so that no 64-bit division runs per frame
  // (send and receive each remember their own; recomputed when sent or received was moved).
  struct Position {
    uint64_t k = 0;
    uint32_t slot = 0, lap = 1;
  };
  Position send_at, receive_at;
  std::string error;
  // Feeders (feeders=N, loopback_ring.h "Feeders"): this feeder's frames go to lanes first_lane ..
  // first_lane + feeder_lanes - 1 of each group of 32 slots; feeder_lanes 0: to every slot, in
  // order. The instance is feeder 0; `more_feeders` holds feeders 1..N-1, views of the same ring
  // with positions of their own (their pointers are the instance's: only it releases the ring).
  uint32_t first_lane = 0;
  uint32_t feeder_lanes = 0;
  std::vector<cudaq_rt_bridge> more_feeders;
};

namespace cudaq_rt::loopback {

// A decimal number that fits 32 bits, nothing else.
inline bool parse_u32(std::string_view text, uint32_t &out) {
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

// The value of a spare_frame= option: 0 or 1 (loopback_ring.h, "The chain").
inline bool parse_flag(std::string_view text, uint32_t &out) {
  return parse_u32(text, out) && out <= 1;
}

// The value of a layout= option: "slots" or "lanes" (loopback_ring.h).
inline bool parse_layout(std::string_view text, uint32_t &out) {
  if (text == "slots")
    out = CUDAQ_RT_LOOPBACK_LAYOUT_SLOTS;
  else if (text == "lanes")
    out = CUDAQ_RT_LOOPBACK_LAYOUT_LANES;
  else
    return false;
  return true;
}

// Why a ring of `slots` slots of `slot_size` bytes, heads laid out as `layout`
// (CUDAQ_RT_LOOPBACK_LAYOUT_*), cannot be made; empty when it can.
inline std::string check_ring_shape(uint32_t slots, uint32_t slot_size,
                                    uint32_t layout = CUDAQ_RT_LOOPBACK_LAYOUT_SLOTS) {
  if (slots == 0 || slots > CUDAQ_RT_LOOPBACK_MAX_SLOTS)
    return "slots=" + std::to_string(slots) + " is out of range 1.." +
           std::to_string(CUDAQ_RT_LOOPBACK_MAX_SLOTS);
  if (slot_size < CUDAQ_RT_LOOPBACK_MIN_SLOT_SIZE || slot_size > CUDAQ_RT_LOOPBACK_MAX_SLOT_SIZE ||
      slot_size % 16 != 0)
    return "slot_size=" + std::to_string(slot_size) + " must be a multiple of 16 in " +
           std::to_string(CUDAQ_RT_LOOPBACK_MIN_SLOT_SIZE) + ".." +
           std::to_string(CUDAQ_RT_LOOPBACK_MAX_SLOT_SIZE);
  if (layout == CUDAQ_RT_LOOPBACK_LAYOUT_LANES && slots % CUDAQ_RT_LOOPBACK_LANES != 0)
    return "layout=lanes needs a multiple of " + std::to_string(CUDAQ_RT_LOOPBACK_LANES) +
           " slots, not slots=" + std::to_string(slots);
  return {};
}

// The warps a built-in kernel of `launch` serves with: 32 * W polling lanes are the warp
// dispatcher as W blocks; one thread (the unified kernel) counts as one.
inline uint32_t serving_warps(const cudaq_rt_bridge_launch &launch) {
  return launch.polling_lanes % CUDAQ_RT_LOOPBACK_LANES == 0
             ? launch.polling_lanes / CUDAQ_RT_LOOPBACK_LANES
             : 1u;
}

// The options a ring instance is created with for `launch` (cudaq_rt_bridge_ops::instance_config):
// the 32 lanes of the warp form load a head cell of their slots as 4 requests in the lanes layout,
// as 32 in the slots one (loopback_ring.h), so a warp-form kernel gets layout=lanes unless the
// options name a layout themselves; any other kernel keeps the default.
// The warp form also gets bulk=0 unless the options say otherwise: its lanes have no bulk copy
// engine of their own (the unified form's is the block's), and a bulk frame moved by one lane's
// loads took longer than as cells (1 KB: 45 us against 37 on the H200, bench/payload_sizes.md).
// The unified kernel (one polling thread) on a GPU with the bulk copy engine (`engine`: sm_90 and
// later, current_gpu_has_bulk_engine) gets bulk=CUDAQ_RT_LOOPBACK_ENGINE_BULK_MIN and
// response_bulk=CUDAQ_RT_LOOPBACK_ENGINE_RESPONSE_BULK_MIN unless the options name bulk: requests
// below that size go as cells, whose tails the engine brings in with the probe (loopback_ring.h,
// "Tails by the engine"), and responses from the other size on in bulk. It also gets
// spare_frame=1 unless the options name it: the chain's second request frame, in dynamic shared
// memory the launcher gives that kernel (loopback_ring.h, "The chain").
// The warp dispatcher launched as W > 1 blocks (32 * W polling lanes) gets warps=W as well.
inline void lay_out_for(const cudaq_rt_bridge_launch &launch, BridgeOptions &options, bool engine) {
  if (launch.polling_lanes == 1 && engine) {
    if (!options.find("spare_frame"))
      options.set("spare_frame", "1");
    if (!options.find("bulk")) {
      options.set("bulk", std::to_string(CUDAQ_RT_LOOPBACK_ENGINE_BULK_MIN));
      if (!options.find("response_bulk"))
        options.set("response_bulk", std::to_string(CUDAQ_RT_LOOPBACK_ENGINE_RESPONSE_BULK_MIN));
    }
    return;
  }
  if (launch.polling_lanes == 0 || launch.polling_lanes % CUDAQ_RT_LOOPBACK_LANES != 0)
    return;
  const uint32_t warps = serving_warps(launch);
  if (!options.find("layout"))
    options.set("layout", "lanes");
  if (!options.find("bulk"))
    options.set("bulk", "0");
  // The warp dispatcher of several blocks: a warp each ("Warps"; check_warps_for said yes).
  if (warps > 1 && !options.find("warps"))
    options.set("warps", std::to_string(warps));
}

// Why a ring of `slots` slots cannot be served by `warps` warps of the warp form side by side
// (warps=W, loopback_ring.h "Warps"); empty when it can.
inline std::string check_warps(uint32_t warps, uint32_t slots) {
  if (warps == 0 || warps > CUDAQ_RT_LOOPBACK_MAX_WARPS)
    return "warps=" + std::to_string(warps) + " is out of range 1.." +
           std::to_string(CUDAQ_RT_LOOPBACK_MAX_WARPS);
  if (warps > 1 && slots % (CUDAQ_RT_LOOPBACK_LANES * warps) != 0)
    return "warps=" + std::to_string(warps) + " needs a multiple of " +
           std::to_string(CUDAQ_RT_LOOPBACK_LANES * warps) +
           " slots, not slots=" + std::to_string(slots);
  return {};
}

// Why an instance with the `options` a user gave cannot serve the kernel of `launch`: warps=W is
// the number of warps the kernel serves with, which a built-in one says (32 * W polling lanes: the
// warp dispatcher as W blocks); a custom kernel (0: not known) takes what the options say.
inline std::string check_warps_for(const cudaq_rt_bridge_launch &launch,
                                   const BridgeOptions &options) {
  const std::string *value = options.find("warps");
  uint32_t warps = 1;
  if (!value || !parse_u32(*value, warps) || launch.polling_lanes == 0)
    return {}; // what create does not take, it says
  const uint32_t serving = serving_warps(launch);
  if (warps == serving)
    return {};
  return "warps=" + *value + " does not match the kernel, which serves with " +
         (launch.polling_lanes == 1
              ? std::string("one thread")
              : std::to_string(serving) + (serving == 1 ? " warp" : " warps") +
                    " (the warp dispatcher's blocks: --grid " + std::to_string(serving) + ",32)");
}

// Why a ring of `slots` slots cannot be fed by `feeders` host threads side by side (feeders=N,
// loopback_ring.h "Feeders"); empty when it can.
inline std::string check_feeders(uint32_t feeders, uint32_t slots) {
  if (feeders == 0 || feeders > CUDAQ_RT_LOOPBACK_LANES || CUDAQ_RT_LOOPBACK_LANES % feeders != 0)
    return "feeders=" + std::to_string(feeders) + " must divide " +
           std::to_string(CUDAQ_RT_LOOPBACK_LANES) + " (1, 2, 4, 8, 16 or 32)";
  if (feeders > 1 && slots % CUDAQ_RT_LOOPBACK_LANES != 0)
    return "feeders=" + std::to_string(feeders) + " needs a multiple of " +
           std::to_string(CUDAQ_RT_LOOPBACK_LANES) + " slots, not slots=" + std::to_string(slots);
  return {};
}

// Makes b, whose ring is allocated and has carried no frame, the first of `feeders` feeders
// (check_feeders said yes): each takes 32 / feeders lanes of every group of 32 slots, b the first
// ones, and b->more_feeders the others.
inline void make_feeders(cudaq_rt_bridge *b, uint32_t feeders) {
  b->more_feeders.clear();
  if (feeders <= 1)
    return;
  const uint32_t lanes = CUDAQ_RT_LOOPBACK_LANES / feeders;
  b->first_lane = 0;
  b->feeder_lanes = lanes;
  // Built apart and moved in at the end, so that each view copies b while its more_feeders is
  // still empty (copying b after the first push would nest the views in each other).
  std::vector<cudaq_rt_bridge> views;
  views.reserve(feeders - 1);
  for (uint32_t f = 1; f < feeders; ++f) {
    cudaq_rt_bridge view = *b;
    view.first_lane = f * lanes;
    view.send_at = view.receive_at = {0, f * lanes, cudaq_rt_loopback_lap(0, b->num_slots)};
    views.push_back(std::move(view));
  }
  b->more_feeders = std::move(views);
}

// Feeder i of b (0: b itself), or null past the last.
inline cudaq_rt_bridge *feeder(cudaq_rt_bridge *b, uint32_t i) {
  return i == 0 ? b : i <= b->more_feeders.size() ? &b->more_feeders[i - 1] : nullptr;
}

// Why an instance with the `options` a user gave cannot serve the kernel of `launch`: feeders=N
// with N > 1 is for a kernel whose lanes serve their own slots (the warp form); the unified kernel
// serves the slots in order from one thread, so a feeder's requests would wait on another's.
inline std::string check_feeders_for(const cudaq_rt_bridge_launch &launch,
                                     const BridgeOptions &options) {
  const std::string *value = options.find("feeders");
  uint32_t feeders = 1;
  if (!value || !parse_u32(*value, feeders) || feeders <= 1 || launch.polling_lanes != 1)
    return {}; // what create does not take, it says
  return "feeders=" + *value +
         " needs a kernel whose 32 lanes serve their own slots (the warp dispatcher); this one "
         "serves every slot in order from one thread";
}

// A response that has started to arrive completes within microseconds; a half missing for this
// many polls means the kernel died mid-publish.
constexpr uint64_t kMaxHalfPolls = uint64_t(1) << 32;

inline uint64_t load_half(const uint64_t *p) {
  return std::atomic_ref<const uint64_t>(*p).load(std::memory_order_acquire);
}

inline void store_half(uint64_t *p, uint32_t stamp, uint32_t data) {
  std::atomic_ref<uint64_t>(*p).store(uint64_t(stamp) | (uint64_t(data) << 32),
                                      std::memory_order_release);
}

inline uint32_t stamp_of(uint64_t half) {
  return uint32_t(half);
}
inline uint32_t data_of(uint64_t half) {
  return uint32_t(half >> 32);
}

// Pushes this thread's stores to the request ring out to memory now: write-combined stores can
// otherwise sit in a fill buffer for an unbounded time.
inline void flush_stores() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_sfence();
#else
  std::atomic_thread_fence(std::memory_order_seq_cst);
#endif
}

// The first half of frame cell c of `slot` (c = 0: control) in the ring made of heads (laid out
// as `layout` says) and tails.
inline uint64_t *cell_half(uint64_t *heads, uint64_t *tails, uint32_t tail_cells, uint32_t layout,
                           uint32_t slot, uint32_t c) {
  return c < CUDAQ_RT_LOOPBACK_HEAD_CELLS
             ? heads + 2 * cudaq_rt_loopback_head_cell(layout, slot, c)
             : tails + 2 * cudaq_rt_loopback_tail_cell(slot, c - CUDAQ_RT_LOOPBACK_HEAD_CELLS,
                                                       tail_cells);
}

// Slots of a feeder that takes `lanes` lanes of each group of 32 (0: every slot) in a ring of n.
inline uint32_t feeder_slots(uint32_t n, uint32_t lanes) {
  return lanes ? n / CUDAQ_RT_LOOPBACK_LANES * lanes : n;
}

// The slot after `slot` among a feeder's (first_lane, lanes: cudaq_rt_bridge) in a ring of n
// slots; `wrapped` says whether it went back to the feeder's first slot (a new lap).
inline uint32_t next_feeder_slot(uint32_t slot, uint32_t n, uint32_t first_lane, uint32_t lanes,
                                 bool &wrapped) {
  if (lanes && slot % CUDAQ_RT_LOOPBACK_LANES == first_lane + lanes - 1)
    slot += CUDAQ_RT_LOOPBACK_LANES - lanes + 1; // the feeder's first lane of the next group
  else
    ++slot;
  wrapped = slot >= n;
  return wrapped ? first_lane : slot;
}

// Slot and lap of a feeder's frame k in a ring of n slots: `at`, moved to k (one step in the
// common case). A feeder's frame k is its share's k-th (feeder_slots), so its laps count its own
// passes over its slots, as the lanes that serve them count theirs (loopback_ring.h, "Feeders").
inline cudaq_rt_bridge::Position &position(cudaq_rt_bridge::Position &at, uint64_t k, uint32_t n,
                                           uint32_t first_lane = 0, uint32_t lanes = 0) {
  if (at.k + 1 == k) {
    at.k = k;
    bool wrapped;
    at.slot = next_feeder_slot(at.slot, n, first_lane, lanes, wrapped);
    if (wrapped)
      at.lap = cudaq_rt_loopback_next_lap(at.lap);
  } else if (at.k != k) {
    const uint32_t share = feeder_slots(n, lanes);
    const uint32_t j = uint32_t(k % share);
    at = {k, lanes ? j / lanes * CUDAQ_RT_LOOPBACK_LANES + first_lane + j % lanes : j,
          cudaq_rt_loopback_lap(k, share)};
  }
  return at;
}

// The same for b's own feeder.
inline cudaq_rt_bridge::Position &position(const cudaq_rt_bridge *b, cudaq_rt_bridge::Position &at,
                                           uint64_t k) {
  return position(at, k, b->num_slots, b->first_lane, b->feeder_lanes);
}

// The first halves of one slot's frame cells, addressed from its first head cell and its tail
// (cell_half, with what does not depend on the cell worked out once per frame).
struct SlotCells {
  uint64_t *head;
  uint64_t *tail;
  uint32_t stride; // halves from head cell c to c + 1
  uint32_t tail_cells;
  uint64_t *operator()(uint32_t c) const {
    return c < CUDAQ_RT_LOOPBACK_HEAD_CELLS
               ? head + uint64_t(c) * stride
               : tail + 2 * cudaq_rt_loopback_tail_cell(0, c - CUDAQ_RT_LOOPBACK_HEAD_CELLS,
                                                        tail_cells);
  }
};

inline SlotCells slot_cells(const cudaq_rt_bridge *b, uint64_t *heads, uint64_t *tails,
                            uint32_t slot) {
  return {heads + 2 * cudaq_rt_loopback_head_cell(b->layout, slot, 0),
          tails + 2 * uint64_t(slot) * b->tail_cells, 2 * cudaq_rt_loopback_head_stride(b->layout),
          b->tail_cells};
}

// A cell's two halves: d's low 4 bytes (the first 4 frame bytes, little-endian) in the first.
inline void store_cell(uint64_t *cell, uint32_t lap, uint64_t d) {
  store_half(cell, lap, uint32_t(d));
  store_half(cell + 1, lap, uint32_t(d >> 32));
}
static_assert(std::endian::native == std::endian::little,
              "the ring's halves carry frame bytes in the host's order: little-endian");

// Why send() refuses `frame` (size bytes) for a ring of slot_size-byte slots; empty when it may go.
// A frame must be whole (cudaq_rt/wire.h): its header's arg_len is exactly size - 24. A shorter
// payload would leave the device staging frame's tail, an earlier request's bytes, where the
// handler reads its payload; the device answers such a frame CUDAQ_RT_STATUS_TRUNCATED, but a
// client that builds one has a bug better reported here, at the call.
inline std::string check_request(const void *frame, size_t size, uint32_t slot_size) {
  if (size < CUDAQ_RT_HEADER_SIZE || size > slot_size)
    return "send: a frame of " + std::to_string(size) + " bytes does not fit a slot (" +
           std::to_string(CUDAQ_RT_HEADER_SIZE) + ".." + std::to_string(slot_size) + ")";
  cudaq_rt_request_header h;
  std::memcpy(&h, frame, sizeof h);
  if (h.arg_len != size - CUDAQ_RT_HEADER_SIZE)
    return "send: the header's arg_len is " + std::to_string(h.arg_len) + " but the frame of " +
           std::to_string(size) + " bytes carries " + std::to_string(size - CUDAQ_RT_HEADER_SIZE) +
           " payload bytes (a frame is 24 header bytes + arg_len)";
  return {};
}

// The bulk area of `slot`'s requests. A writer may put the bytes of the frame that goes to a free
// slot there and pass write_request that address, which then copies nothing for a frame in bulk
// (the UDP bridge receives datagrams there). Nothing reads a free slot's area: the GPU reads a
// slot's bytes only after its control cell carries the lap they are sent with.
inline unsigned char *request_area(const cudaq_rt_bridge *b, uint32_t slot) {
  return b->request_bulk + cudaq_rt_loopback_bulk_offset(slot, b->slot_size);
}

// write_request without the store fence that a write-combined request ring needs after it (a
// batch fences once, after its last frame).
inline cudaq_rt_bridge_result write_request_unfenced(cudaq_rt_bridge *b, const void *frame,
                                                     size_t size) {
  if (b->sent - b->received == feeder_slots(b->num_slots, b->feeder_lanes))
    return CUDAQ_RT_BRIDGE_AGAIN;
  const cudaq_rt_bridge::Position &at = position(b, b->send_at, b->sent);
  const uint32_t lap = at.lap;
  const SlotCells cell = slot_cells(b, b->request_heads, b->request_tails, at.slot);
  const auto *bytes = static_cast<const unsigned char *>(frame);
  uint64_t *control = cell(0);
  if (cudaq_rt_loopback_is_bulk(uint32_t(size), b->bulk_min)) {
    // Plain bytes, then the control cell: the GPU reads the bytes only after it has seen it
    // (loopback_ring.h, "Bulk frames"). The fence orders a memcpy that used streaming stores.
    unsigned char *area = request_area(b, at.slot);
    if (area != bytes) // not already there
      std::memcpy(area, bytes, size);
    flush_stores();
    store_half(control + 1, lap, CUDAQ_RT_LOOPBACK_KIND_BULK);
    store_half(control, lap, uint32_t(size));
    ++b->sent;
    return CUDAQ_RT_BRIDGE_OK;
  }
  // Frame bytes 8c..8c+7 are cell 1 + c: the first four in its first half, the rest in its
  // second; past the frame's end, zeroes (both halves stamped, so the GPU sees the cell whole).
  const size_t full = size / 8;
  for (size_t c = 0; c < full; ++c) {
    uint64_t d;
    std::memcpy(&d, bytes + 8 * c, 8);
    store_cell(cell(uint32_t(1 + c)), lap, d);
  }
  if (size % 8) {
    uint64_t d = 0;
    std::memcpy(&d, bytes + 8 * full, size % 8);
    store_cell(cell(uint32_t(1 + full)), lap, d);
  }
  // Control last, so a poll that sees it usually finds the whole frame already there.
  store_half(control + 1, lap, CUDAQ_RT_LOOPBACK_KIND_CELLS);
  store_half(control, lap, uint32_t(size));
  ++b->sent;
  return CUDAQ_RT_BRIDGE_OK;
}

// Writes `frame` (size <= slot_size bytes, not checked otherwise) as the next request: AGAIN when
// every slot is in flight. This is send() without check_request().
inline cudaq_rt_bridge_result write_request(cudaq_rt_bridge *b, const void *frame, size_t size) {
  const cudaq_rt_bridge_result r = write_request_unfenced(b, frame, size);
  if (CUDAQ_RT_LOOPBACK_REQUEST_WC)
    flush_stores();
  return r;
}

// The bridge's send operation; `fence` false leaves the fence to the caller (send_batch).
inline cudaq_rt_bridge_result send_request(cudaq_rt_bridge *b, const void *frame, size_t size,
                                           bool fence = true) {
  if (std::string why = check_request(frame, size, b->slot_size); !why.empty()) {
    b->error = std::move(why);
    return CUDAQ_RT_BRIDGE_ERROR;
  }
  return fence ? write_request(b, frame, size) : write_request_unfenced(b, frame, size);
}

// Polls a cell's halves until both carry `lap`, at most max_polls times each; false, with the
// error set, when one never does.
[[gnu::cold, gnu::noinline]] inline bool wait_for_halves(cudaq_rt_bridge *b, uint64_t k,
                                                         const uint64_t *h, uint32_t lap,
                                                         uint64_t max_polls, uint64_t &first,
                                                         uint64_t &second) {
  for (int i = 0; i < 2; ++i) {
    uint64_t &value = i ? second : first;
    for (uint64_t polls = 0; stamp_of(value) != lap; ++polls) {
      if (polls == max_polls) {
        b->error = "receive: response " + std::to_string(k) + " never completed";
        return false;
      }
      value = load_half(h + i);
    }
  }
  return true;
}

// The bridge's receive operation, but a response in bulk is not copied: *bytes is where its bytes
// are, in the slot's bulk area, where the GPU wrote them; a response of cells is unpacked into
// `buffer`, and *bytes is buffer. The bulk area stays as it is until the host writes the slot's
// next request, which a host that keeps at most num_slots requests in flight does only once it
// has this response (b->received, advanced here): a caller that passes the bytes on (the UDP
// bridge's sendmmsg) gives that credit to its writer when it is done with them. max_half_polls
// bounds the wait for a response's missing halves (the tests shorten it).
inline cudaq_rt_bridge_result receive_response_in_place(cudaq_rt_bridge *b, void *buffer,
                                                        size_t capacity, const void **bytes,
                                                        size_t *size,
                                                        uint64_t max_half_polls = kMaxHalfPolls) {
  if (b->received == b->sent)
    return CUDAQ_RT_BRIDGE_AGAIN;
  const uint64_t k = b->received;
  const cudaq_rt_bridge::Position &at = position(b, b->receive_at, k);
  const uint32_t lap = at.lap;
  const SlotCells cell = slot_cells(b, b->response_heads, b->response_tails, at.slot);
  const uint64_t control = load_half(cell(0));
  if (stamp_of(control) != lap)
    return CUDAQ_RT_BRIDGE_AGAIN;
  const uint32_t len = data_of(control);
  if (len < CUDAQ_RT_HEADER_SIZE || len > b->slot_size) {
    b->error =
        "receive: response " + std::to_string(k) + " claims " + std::to_string(len) + " bytes";
    return CUDAQ_RT_BRIDGE_ERROR;
  }
  if (capacity < len) {
    b->error = "receive: the response is " + std::to_string(len) + " bytes, the buffer " +
               std::to_string(capacity);
    return CUDAQ_RT_BRIDGE_ERROR;
  }
  auto *out = static_cast<unsigned char *>(buffer);
  const uint64_t kind = load_half(cell(0) + 1);
  if (stamp_of(kind) != lap) // the control cell's second half is still on its way
    return CUDAQ_RT_BRIDGE_AGAIN;
  if (data_of(kind) == CUDAQ_RT_LOOPBACK_KIND_BULK) {
    // The GPU wrote the bytes and fenced before it stored the control cell (loopback_ring.h).
    *bytes = b->response_bulk + cudaq_rt_loopback_bulk_offset(at.slot, b->slot_size);
    *size = len;
    ++b->received;
    return CUDAQ_RT_BRIDGE_OK;
  }
  for (uint32_t c = 0; 8 * size_t(c) < len; ++c) {
    const uint64_t *h = cell(1 + c);
    uint64_t first = load_half(h), second = load_half(h + 1);
    // Both halves carry the lap, or wait for them (loopback_ring.h); rarely taken.
    if ((stamp_of(first) != lap || stamp_of(second) != lap) &&
        !wait_for_halves(b, k, h, lap, max_half_polls, first, second))
      return CUDAQ_RT_BRIDGE_ERROR;
    const uint64_t d = data_of(first) | uint64_t(data_of(second)) << 32;
    if (len - 8 * size_t(c) >= 8)
      std::memcpy(out + 8 * size_t(c), &d, 8);
    else
      std::memcpy(out + 8 * size_t(c), &d, len - 8 * size_t(c));
  }
  *bytes = out;
  *size = len;
  ++b->received;
  return CUDAQ_RT_BRIDGE_OK;
}

// The bridge's receive operation: the next response into `buffer`.
inline cudaq_rt_bridge_result receive_response(cudaq_rt_bridge *b, void *buffer, size_t capacity,
                                               size_t *size,
                                               uint64_t max_half_polls = kMaxHalfPolls) {
  const void *bytes = nullptr;
  const cudaq_rt_bridge_result r =
      receive_response_in_place(b, buffer, capacity, &bytes, size, max_half_polls);
  if (r == CUDAQ_RT_BRIDGE_OK && bytes != buffer)
    std::memcpy(buffer, bytes, *size);
  return r;
}

// The bridge's send_batch: the frames in order until one does not fit (AGAIN) or is refused, one
// store fence for all where the request ring is write-combined.
inline cudaq_rt_bridge_result send_requests(cudaq_rt_bridge *b, const void *const *frames,
                                            const size_t *sizes, size_t count, size_t *queued) {
  size_t done = 0;
  cudaq_rt_bridge_result r = CUDAQ_RT_BRIDGE_OK;
  for (; done < count; ++done)
    if ((r = send_request(b, frames[done], sizes[done], false)) != CUDAQ_RT_BRIDGE_OK)
      break;
  if (CUDAQ_RT_LOOPBACK_REQUEST_WC)
    flush_stores();
  *queued = done;
  return done > 0 && r == CUDAQ_RT_BRIDGE_AGAIN ? CUDAQ_RT_BRIDGE_OK : r;
}

// Responses whose lines receive_responses asks for ahead of the one it takes.
constexpr size_t kPrefetchResponses = 8;

// The head lines of the response in `slot` (which receive_responses advances, never divides).
inline void prefetch_response(const cudaq_rt_bridge *b, uint32_t slot) {
  for (uint32_t c = 0; c < CUDAQ_RT_LOOPBACK_HEAD_CELLS; ++c)
    __builtin_prefetch(b->response_heads + 2 * cudaq_rt_loopback_head_cell(b->layout, slot, c));
}

// The bridge's receive_batch: up to `count` responses, in order, into buffer (`stride` bytes
// apart), their sizes into sizes; OK with *taken > 0, AGAIN when none has come.
inline cudaq_rt_bridge_result receive_responses(cudaq_rt_bridge *b, void *buffer, size_t stride,
                                                size_t *sizes, size_t count, size_t *taken) {
  size_t done = 0;
  cudaq_rt_bridge_result r = CUDAQ_RT_BRIDGE_OK;
  // The GPU's stores took the response lines out of this CPU's caches: each is a miss. Asking for
  // the lines of the next responses ahead of time overlaps those misses instead of taking them one
  // after another.
  const uint64_t outstanding = b->sent - b->received;
  const size_t ahead = static_cast<size_t>(std::min<uint64_t>(outstanding, count));
  const uint32_t n = b->num_slots;
  // The slot of the response prefetched next: from the receive position, one step at a time
  // (a 64-bit division per response cost the host thread more than the prefetch saved).
  uint32_t slot = position(b, b->receive_at, b->received).slot;
  const auto advance = [n, b](uint32_t s) {
    bool wrapped;
    return next_feeder_slot(s, n, b->first_lane, b->feeder_lanes, wrapped);
  };
  for (size_t i = 0; i < ahead && i < kPrefetchResponses; ++i, slot = advance(slot))
    prefetch_response(b, slot);
  for (; done < count; ++done) {
    if (done + kPrefetchResponses < ahead) {
      prefetch_response(b, slot);
      slot = advance(slot);
    }
    if ((r = receive_response(b, static_cast<unsigned char *>(buffer) + done * stride, stride,
                              &sizes[done])) != CUDAQ_RT_BRIDGE_OK)
      break;
  }
  *taken = done;
  return done > 0 && r == CUDAQ_RT_BRIDGE_AGAIN ? CUDAQ_RT_BRIDGE_OK : r;
}

} // namespace cudaq_rt::loopback

#endif // CUDAQ_RT_LOOPBACK_HOST_H
