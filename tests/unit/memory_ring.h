// A loopback ring in ordinary memory, zeroed as the bridge's create() leaves it, for the unit tests
// that drive the ring's host side against a CPU model of its device side (test_loopback_ring,
// test_udp_bridge).
#ifndef CUDAQ_RT_TESTS_MEMORY_RING_H
#define CUDAQ_RT_TESTS_MEMORY_RING_H

#include "loopback_host.h"

#include <cstdint>
#include <cstring>
#include <vector>

// Frames travel as cells unless bulk_min says otherwise (the bridge's default sends every frame
// over 32 bytes in bulk: loopback_ring.h).
struct MemoryRing {
  std::vector<uint64_t> request_ring, response_ring;
  std::vector<unsigned char> request_bulk, response_bulk;
  cudaq_rt_bridge b;

  MemoryRing(uint32_t slots, uint32_t slot_size, uint32_t layout = CUDAQ_RT_LOOPBACK_LAYOUT_SLOTS,
             uint32_t bulk_min = 0) {
    b.num_slots = slots;
    b.slot_size = slot_size;
    b.layout = layout;
    b.bulk_min = bulk_min;
    request_bulk.assign(size_t(slots) * slot_size, 0);
    response_bulk.assign(size_t(slots) * slot_size, 0);
    b.request_bulk = request_bulk.data();
    b.response_bulk = response_bulk.data();
    b.tail_cells = cudaq_rt_loopback_tail_cells(slot_size);
    const size_t heads = CUDAQ_RT_LOOPBACK_HEADS_BYTES(slots) / 8;
    const size_t halves = heads + size_t(slots) * b.tail_cells * 2;
    request_ring.assign(halves, 0);
    response_ring.assign(halves, 0);
    b.request_heads = request_ring.data();
    b.request_tails = b.request_heads + heads;
    b.response_heads = response_ring.data();
    b.response_tails = b.response_heads + heads;
  }
  MemoryRing(const MemoryRing &) = delete;
  MemoryRing &operator=(const MemoryRing &) = delete;

  uint64_t *request_half(uint32_t slot, uint32_t c) {
    return cudaq_rt::loopback::cell_half(b.request_heads, b.request_tails, b.tail_cells, b.layout,
                                         slot, c);
  }
  uint64_t *response_half(uint32_t slot, uint32_t c) {
    return cudaq_rt::loopback::cell_half(b.response_heads, b.response_tails, b.tail_cells, b.layout,
                                         slot, c);
  }

  // What tx_publish stores for a response that travels as cells: its cells, then its control
  // cell, each half stamped `lap`.
  void publish_cells(uint32_t slot, uint32_t lap, const std::vector<uint8_t> &response) {
    using cudaq_rt::loopback::store_half;
    const uint32_t len = uint32_t(response.size());
    std::vector<uint8_t> padded(response);
    padded.resize((len + 7) / 8 * 8, 0);
    for (uint32_t c = 1; c < cudaq_rt_loopback_frame_cells(len); ++c) {
      uint32_t d[2];
      std::memcpy(d, padded.data() + 8 * (c - 1), 8);
      store_half(response_half(slot, c), lap, d[0]);
      store_half(response_half(slot, c) + 1, lap, d[1]);
    }
    store_half(response_half(slot, 0) + 1, lap, CUDAQ_RT_LOOPBACK_KIND_CELLS);
    store_half(response_half(slot, 0), lap, len);
  }
};

#endif // CUDAQ_RT_TESTS_MEMORY_RING_H
