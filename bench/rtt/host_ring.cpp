// What one host thread pays per frame on the loopback ring, without a GPU: the bridge's own
// send_batch and receive_batch (loopback_host.h: send_requests, receive_responses) on a ring in ordinary
// memory, against responses written as the GPU writes them (every half stamped) and then flushed
// out of this CPU's caches (clflush), as the GPU's stores over PCIe leave them. A round fills the
// ring (its slots in flight at once, as cudaq-rt-run --bench --inflight N keeps it), answers every
// request, and takes every response; the bench prints nanoseconds a frame for each half and the
// rate one thread could feed at most. It measures and prints; it asserts nothing but that every
// response came back whole.
//   host_ring [ROUNDS] [SLOTS] [PAYLOAD] [LAYOUT: slots|lanes]
#include "loopback_host.h"
#include "memory_ring.h"

#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

using namespace cudaq_rt::loopback;

namespace {

using Clock = std::chrono::steady_clock;

// The response the dispatch kernel would publish for request `frame` (an echo), in `slot` for
// `lap`, stored as tx_publish stores it (MemoryRing::publish_cells).
void answer(MemoryRing &r, uint32_t slot, uint32_t lap, const std::vector<uint8_t> &frame) {
  std::vector<uint8_t> response(frame);
  cudaq_rt_response_header h{CUDAQ_RT_RESPONSE_MAGIC, 0,
                             uint32_t(frame.size() - CUDAQ_RT_HEADER_SIZE), 0, 0};
  std::memcpy(&h.request_id, frame.data() + 12, 4);
  std::memcpy(&h.ptp_timestamp, frame.data() + 16, 8);
  std::memcpy(response.data(), &h, sizeof h);
  r.publish_cells(slot, lap, response);
}

void flush(const void *p, size_t bytes) {
  const auto *c = static_cast<const char *>(p);
  for (size_t off = 0; off < bytes; off += 64)
    _mm_clflush(c + off);
  _mm_mfence();
}

} // namespace

int main(int argc, char **argv) {
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 2000;
  const uint32_t slots = argc > 2 ? uint32_t(std::strtoul(argv[2], nullptr, 10)) : 256;
  const uint32_t payload = argc > 3 ? uint32_t(std::strtoul(argv[3], nullptr, 10)) : 8;
  const std::string layout_name = argc > 4 ? argv[4] : "lanes";
  uint32_t layout = 0;
  if (rounds <= 0 || !parse_layout(layout_name, layout) ||
      !check_ring_shape(slots, 1024, layout).empty() || payload > 1000) {
    std::fprintf(stderr, "usage: host_ring [ROUNDS] [SLOTS] [PAYLOAD <= 1000] [slots|lanes]\n");
    return 2;
  }
  MemoryRing r(slots, 1024, layout, 0); // every frame as cells, as the warp form's ring
  std::vector<std::vector<uint8_t>> frames(slots);
  std::vector<const void *> frame_ptrs(slots);
  std::vector<size_t> sizes(slots, CUDAQ_RT_HEADER_SIZE + payload);
  for (uint32_t i = 0; i < slots; ++i) {
    frames[i].assign(CUDAQ_RT_HEADER_SIZE + payload, uint8_t(i));
    cudaq_rt_request_header h{CUDAQ_RT_REQUEST_MAGIC, 0x1234u, payload, i, 0};
    std::memcpy(frames[i].data(), &h, sizeof h);
    frame_ptrs[i] = frames[i].data();
  }
  const size_t stride = 1024;
  std::vector<uint8_t> responses(size_t(slots) * stride);
  std::vector<size_t> response_sizes(slots);
  double send_ns = 0, receive_ns = 0;
  uint64_t frames_timed = 0;
  uint32_t lap = 1;
  for (int round = 0; round < rounds; ++round) {
    const auto t0 = Clock::now();
    size_t queued = 0;
    if (send_requests(&r.b, frame_ptrs.data(), sizes.data(), slots, &queued) !=
            CUDAQ_RT_BRIDGE_OK ||
        queued != slots) {
      std::fprintf(stderr, "host_ring: send: %s\n", r.b.error.c_str());
      return 1;
    }
    const auto t1 = Clock::now();
    for (uint32_t i = 0; i < slots; ++i)
      answer(r, i, lap, frames[i]);
    flush(r.response_ring.data(), r.response_ring.size() * sizeof(uint64_t));
    const auto t2 = Clock::now();
    size_t taken = 0;
    while (taken < slots) {
      size_t got = 0;
      const cudaq_rt_bridge_result rc =
          receive_responses(&r.b, responses.data() + taken * stride, stride,
                            response_sizes.data() + taken, slots - taken, &got);
      if (rc == CUDAQ_RT_BRIDGE_ERROR) {
        std::fprintf(stderr, "host_ring: receive: %s\n", r.b.error.c_str());
        return 1;
      }
      taken += got;
    }
    const auto t3 = Clock::now();
    for (uint32_t i = 0; i < slots; ++i)
      if (response_sizes[i] != sizes[i] ||
          std::memcmp(responses.data() + i * stride + CUDAQ_RT_HEADER_SIZE,
                      frames[i].data() + CUDAQ_RT_HEADER_SIZE, payload) != 0) {
        std::fprintf(stderr, "host_ring: response %u came back wrong\n", i);
        return 1;
      }
    lap = cudaq_rt_loopback_next_lap(lap);
    if (round >= rounds / 10) { // the first tenth warms up
      send_ns += std::chrono::duration<double, std::nano>(t1 - t0).count();
      receive_ns += std::chrono::duration<double, std::nano>(t3 - t2).count();
      frames_timed += slots;
    }
  }
  const double s = send_ns / double(frames_timed), rcv = receive_ns / double(frames_timed);
  std::printf("host_ring %u slots, %s layout, %u-byte payload: send %.1f ns a frame, receive %.1f "
              "ns a frame (lines flushed as the GPU leaves them): at most %.2f M frames/s for one "
              "thread\n",
              slots, layout_name.c_str(), payload, s, rcv, 1e3 / (s + rcv));
  return 0;
}
