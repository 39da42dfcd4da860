// The loopback bridge's ring on the CPU: the host's send and receive (loopback_host.h, the code the
// bridge runs) on rings in ordinary memory, against a model of the device side built from the
// same layout and stamp helpers (loopback_ring.h) that loopback_device.cu uses. No CUDA: this is
// what CI runs of the ring; the GPU test (tests/gpu/loopback_dispatch_test.cpp) runs the real
// device code.
#include "loopback_host.h"
#include "memory_ring.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <optional>
#include <set>
#include <utility>
#include <vector>

using namespace cudaq_rt::loopback;

namespace {

using Bytes = std::vector<uint8_t>;

using TestBridge = MemoryRing;

Bytes request(uint32_t payload_len, uint32_t seed, uint32_t claimed = UINT32_MAX) {
  Bytes f(CUDAQ_RT_HEADER_SIZE + payload_len);
  cudaq_rt_request_header h{CUDAQ_RT_REQUEST_MAGIC, 0x1234u,
                            claimed == UINT32_MAX ? payload_len : claimed, seed,
                            0x1122334455667788ull ^ seed};
  std::memcpy(f.data(), &h, sizeof h);
  for (uint32_t i = 0; i < payload_len; ++i)
    f[CUDAQ_RT_HEADER_SIZE + i] = uint8_t(i * 131u + seed * 7u + 1u);
  return f;
}

// What loopback_device.cu's unpack() accepts, one cell at a time (the device loads them in
// batches; which cells it takes, and when, is the same): nothing until the control cell carries
// `lap` in both halves, then the frame's cells, each only when both halves carry `lap` (the device
// reloads the others; here that is "not ready yet"). The staging frame keeps what earlier frames
// left past this one's end, as device memory does. Returns the frame's length.
std::optional<uint32_t> device_unpack(TestBridge &t, uint32_t slot, uint32_t lap, Bytes &staging) {
  const uint64_t *control = t.request_half(slot, 0);
  if (!cudaq_rt_loopback_stamped(stamp_of(control[0]), stamp_of(control[1]), lap))
    return std::nullopt;
  const uint32_t len = std::min(data_of(control[0]), t.b.slot_size);
  const uint32_t cells = cudaq_rt_loopback_frame_cells(len);
  Bytes frame = staging;
  uint32_t arg_len = 0xFFFFFFFFu;
  for (uint32_t c = 1; c < cells; ++c) {
    const uint64_t *h = t.request_half(slot, c);
    if (!cudaq_rt_loopback_stamped(stamp_of(h[0]), stamp_of(h[1]), lap))
      return std::nullopt;
    const uint32_t d[2] = {data_of(h[0]), data_of(h[1])};
    std::memcpy(frame.data() + 8 * (c - 1), d, 8);
    if (c == 2)
      arg_len = d[0];
  }
  if (!cudaq_rt_loopback_request_whole(len, arg_len)) { // mark_truncated()
    for (uint32_t w = (len + 7) / 8; w < CUDAQ_RT_HEADER_SIZE / 8; ++w)
      std::memset(frame.data() + 8 * w, 0, 8);
    const uint32_t marker = CUDAQ_RT_TRUNCATED_MAGIC;
    std::memcpy(frame.data(), &marker, 4);
  }
  staging = std::move(frame);
  return len;
}

// What tx_publish() stores: the frame's cells, then its control cell, each half stamped.
void device_publish(TestBridge &t, uint32_t slot, uint32_t lap, const Bytes &response) {
  const uint32_t len = uint32_t(response.size());
  Bytes padded(response);
  padded.resize((len + 7) / 8 * 8, 0);
  for (uint32_t c = 1; c < cudaq_rt_loopback_frame_cells(len); ++c) {
    uint32_t d[2];
    std::memcpy(d, padded.data() + 8 * (c - 1), 8);
    store_half(t.response_half(slot, c), lap, d[0]);
    store_half(t.response_half(slot, c) + 1, lap, d[1]);
  }
  store_half(t.response_half(slot, 0) + 1, lap, 0);
  store_half(t.response_half(slot, 0), lap, len);
}

// The device's running position (slot, lap), advanced as next_slot() does.
struct Position {
  uint32_t slot = 0, lap = 1;
  void next(uint32_t n) {
    if (++slot == n) {
      slot = 0;
      lap = cudaq_rt_loopback_next_lap(lap);
    }
  }
};

Bytes receive(TestBridge &t, uint64_t max_polls = 16) {
  Bytes buffer(t.b.slot_size);
  size_t size = 0;
  const auto rc = receive_response(&t.b, buffer.data(), buffer.size(), &size, max_polls);
  REQUIRE_MESSAGE(rc == CUDAQ_RT_BRIDGE_OK, t.b.error);
  buffer.resize(size);
  return buffer;
}

} // namespace

TEST_CASE("every frame length from 24 to slot_size goes through the ring and back") {
  for (uint32_t layout : {CUDAQ_RT_LOOPBACK_LAYOUT_SLOTS, CUDAQ_RT_LOOPBACK_LAYOUT_LANES})
    for (uint32_t slot_size : {32u, 48u, 528u, 1024u, 2064u}) {
      CAPTURE(layout);
      CAPTURE(slot_size);
      // Slots are reused and laps go up: 3 slots, or the one group of the lanes layout.
      const uint32_t slots =
          layout == CUDAQ_RT_LOOPBACK_LAYOUT_LANES ? CUDAQ_RT_LOOPBACK_LANES : 3u;
      TestBridge t(slots, slot_size, layout);
      Position dev;
      std::vector<Bytes> staging(slots, Bytes(slot_size, 0xEE));
      for (uint32_t len = CUDAQ_RT_HEADER_SIZE; len <= slot_size; ++len) {
        CAPTURE(len);
        const Bytes frame = request(len - CUDAQ_RT_HEADER_SIZE, len);
        // Before send(), the device sees nothing in the slot (an old lap, or zeroed memory).
        CHECK_FALSE(device_unpack(t, dev.slot, dev.lap, staging[dev.slot]));
        REQUIRE(send_request(&t.b, frame.data(), frame.size()) == CUDAQ_RT_BRIDGE_OK);
        const auto got = device_unpack(t, dev.slot, dev.lap, staging[dev.slot]);
        REQUIRE(got);
        CHECK(*got == len);
        CHECK(Bytes(staging[dev.slot].begin(), staging[dev.slot].begin() + len) == frame);
        // The host has nothing before the device publishes, then exactly what was published.
        Bytes buffer(slot_size);
        size_t size = 0;
        CHECK(receive_response(&t.b, buffer.data(), buffer.size(), &size) == CUDAQ_RT_BRIDGE_AGAIN);
        Bytes response = frame;
        response[0] ^= 1; // any bytes: the ring does not look inside
        device_publish(t, dev.slot, dev.lap, response);
        CHECK(receive(t) == response);
        dev.next(t.b.num_slots);
      }
    }
}

TEST_CASE("the cell layout is a bijection, and each batch of loads is on distinct lines") {
  for (uint32_t layout : {CUDAQ_RT_LOOPBACK_LAYOUT_SLOTS, CUDAQ_RT_LOOPBACK_LAYOUT_LANES}) {
    const bool lanes = layout == CUDAQ_RT_LOOPBACK_LAYOUT_LANES;
    for (uint32_t slots :
         lanes ? std::vector<uint32_t>{32u, 64u, 96u} : std::vector<uint32_t>{1u, 3u, 64u}) {
      for (uint32_t slot_size : {32u, 48u, 1024u, 1040u, 8192u}) {
        CAPTURE(layout);
        CAPTURE(slots);
        CAPTURE(slot_size);
        const uint32_t tail_cells = cudaq_rt_loopback_tail_cells(slot_size);
        const uint32_t cells = cudaq_rt_loopback_frame_cells(slot_size);
        CHECK(tail_cells % CUDAQ_RT_LOOPBACK_TAIL_BLOCK == 0);
        const uint64_t head_cells_total =
            CUDAQ_RT_LOOPBACK_HEADS_BYTES(slots) / CUDAQ_RT_LOOPBACK_CELL_SIZE;
        const uint32_t stride = cudaq_rt_loopback_head_stride(layout);
        std::set<std::pair<bool, uint64_t>> seen; // (in the tails, cell index)
        for (uint32_t slot = 0; slot < slots; ++slot) {
          std::set<uint64_t> head_lines;
          for (uint32_t c = 0; c < cells; ++c) {
            const bool tail = c >= CUDAQ_RT_LOOPBACK_HEAD_CELLS;
            const uint64_t at = tail ? cudaq_rt_loopback_tail_cell(
                                           slot, c - CUDAQ_RT_LOOPBACK_HEAD_CELLS, tail_cells)
                                     : cudaq_rt_loopback_head_cell(layout, slot, c);
            CHECK(at < (tail ? uint64_t(slots) * tail_cells : head_cells_total));
            CHECK(seen.insert({tail, at}).second);
            if (!tail) {
              // The device addresses a slot's head cells from its cell 0 by the stride.
              CHECK(at == cudaq_rt_loopback_head_cell(layout, slot, 0) + uint64_t(c) * stride);
              // One thread's probe of one slot: every head cell on a line of its own.
              CHECK(head_lines.insert(at / CUDAQ_RT_LOOPBACK_LINE_CELLS).second);
              if (!lanes) // and of several slots too: one line per head cell
                CHECK(at % CUDAQ_RT_LOOPBACK_LINE_CELLS == 0);
            }
          }
          // unpack() loads tail cells 8 at a time, starting at frame cell HEAD_CELLS.
          for (uint32_t t0 = 0; CUDAQ_RT_LOOPBACK_HEAD_CELLS + t0 < cells; t0 += 8) {
            std::set<uint64_t> lines;
            uint32_t in_batch = 0;
            for (uint32_t t = t0; t < t0 + 8 && CUDAQ_RT_LOOPBACK_HEAD_CELLS + t < cells; ++t) {
              lines.insert(cudaq_rt_loopback_tail_cell(slot, t, tail_cells) /
                           CUDAQ_RT_LOOPBACK_LINE_CELLS);
              ++in_batch;
            }
            CHECK(lines.size() == in_batch);
          }
        }
        if (lanes) // a warp's load of head cell c of 32 slots of a group: 4 lines, coalesced
          for (uint32_t g = 0; g < slots / CUDAQ_RT_LOOPBACK_LANES; ++g)
            for (uint32_t c = 0; c < CUDAQ_RT_LOOPBACK_HEAD_CELLS; ++c) {
              std::set<uint64_t> lines;
              for (uint32_t l = 0; l < CUDAQ_RT_LOOPBACK_LANES; ++l)
                lines.insert(
                    cudaq_rt_loopback_head_cell(layout, g * CUDAQ_RT_LOOPBACK_LANES + l, c) /
                    CUDAQ_RT_LOOPBACK_LINE_CELLS);
              CHECK(lines.size() == CUDAQ_RT_LOOPBACK_LANES / CUDAQ_RT_LOOPBACK_LINE_CELLS);
            }
      }
    }
  }
}

TEST_CASE("the running slot and lap are what the division gives, also after a jump") {
  for (uint32_t n : {1u, 3u, 64u}) {
    CAPTURE(n);
    cudaq_rt_bridge::Position at;
    // Near the end of the laps too: the stamps wrap from 0xFFFFFFFF to 1.
    for (uint64_t start : {uint64_t(0), uint64_t(n) * uint64_t(0xFFFFFFFEu) - 5, uint64_t(12345)}) {
      for (uint64_t k = start; k < start + 3 * n + 7; ++k) {
        const cudaq_rt_bridge::Position &p = position(at, k, n);
        CHECK(p.k == k);
        CHECK(p.slot == k % n);
        CHECK(p.lap == cudaq_rt_loopback_lap(k, n));
      }
    }
  }
}

TEST_CASE("a ring's shape: slots, slot size, and the lanes layout's groups of 32") {
  CHECK(check_ring_shape(64, 1024).empty());
  CHECK(check_ring_shape(0, 1024) == "slots=0 is out of range 1..65536");
  CHECK(check_ring_shape(8, 40) == "slot_size=40 must be a multiple of 16 in 32..1048576");
  CHECK(check_ring_shape(48, 256, CUDAQ_RT_LOOPBACK_LAYOUT_LANES) ==
        "layout=lanes needs a multiple of 32 slots, not slots=48");
  CHECK(check_ring_shape(64, 256, CUDAQ_RT_LOOPBACK_LAYOUT_LANES).empty());
  uint32_t layout = 7;
  CHECK(parse_layout("lanes", layout));
  CHECK(layout == CUDAQ_RT_LOOPBACK_LAYOUT_LANES);
  CHECK(parse_layout("slots", layout));
  CHECK(layout == CUDAQ_RT_LOOPBACK_LAYOUT_SLOTS);
  CHECK_FALSE(parse_layout("Lanes", layout));
}

TEST_CASE("a torn cell is not accepted until both halves carry the lap") {
  TestBridge t(2, 256);
  Bytes staging(256, 0xEE);
  const Bytes frame = request(100, 7);
  REQUIRE(send_request(&t.b, frame.data(), frame.size()) == CUDAQ_RT_BRIDGE_OK);
  REQUIRE(device_unpack(t, 0, 1, staging));

  SUBCASE("request payload cell") {
    for (uint32_t c : {1u, 4u, 5u, 12u}) { // header, last head cell, tail cells
      for (uint32_t half = 0; half < 2; ++half) {
        CAPTURE(c);
        CAPTURE(half);
        uint64_t *h = t.request_half(0, c) + half;
        const uint64_t good = *h;
        store_half(h, 0, data_of(good)); // this half still from the previous lap (0: never written)
        CHECK_FALSE(device_unpack(t, 0, 1, staging));
        *h = good;
        CHECK(device_unpack(t, 0, 1, staging));
      }
    }
  }
  SUBCASE("request control cell") {
    uint64_t *h = t.request_half(0, 0) + 1;
    const uint64_t good = *h;
    store_half(h, 0, 0);
    CHECK_FALSE(device_unpack(t, 0, 1, staging));
    *h = good;
  }
  SUBCASE("response cell: the host waits, then gives up, then takes it once whole") {
    device_publish(t, 0, 1, frame);
    uint64_t *h = t.response_half(0, 9) + 1;
    const uint64_t good = *h;
    store_half(h, 0, data_of(good));
    Bytes buffer(256);
    size_t size = 0;
    CHECK(receive_response(&t.b, buffer.data(), buffer.size(), &size, 1000) ==
          CUDAQ_RT_BRIDGE_ERROR);
    CHECK(t.b.error.find("never completed") != std::string::npos);
    CHECK(t.b.received == 0); // still queued
    *h = good;
    CHECK(receive(t) == frame);
  }
}

TEST_CASE("a frame stamped with another lap is not accepted") {
  TestBridge t(2, 64);
  Bytes staging(64, 0xEE);
  const Bytes a = request(8, 1), b = request(8, 2), c = request(8, 3);
  REQUIRE(send_request(&t.b, a.data(), a.size()) == CUDAQ_RT_BRIDGE_OK); // slot 0, lap 1
  REQUIRE(send_request(&t.b, b.data(), b.size()) == CUDAQ_RT_BRIDGE_OK); // slot 1, lap 1
  CHECK_FALSE(device_unpack(t, 0, 2, staging));
  CHECK_FALSE(device_unpack(t, 0, 0xFFFFFFFFu, staging));
  CHECK(device_unpack(t, 0, 1, staging));
  // The ring is full: the slot comes back only with its response.
  CHECK(send_request(&t.b, c.data(), c.size()) == CUDAQ_RT_BRIDGE_AGAIN);
  device_publish(t, 0, 2, a); // the wrong lap: the host keeps waiting
  Bytes buffer(64);
  size_t size = 0;
  CHECK(receive_response(&t.b, buffer.data(), buffer.size(), &size) == CUDAQ_RT_BRIDGE_AGAIN);
  device_publish(t, 0, 1, a);
  CHECK(receive(t) == a);
  REQUIRE(send_request(&t.b, c.data(), c.size()) == CUDAQ_RT_BRIDGE_OK); // slot 0, lap 2
  CHECK(device_unpack(t, 0, 2, staging));
  CHECK(Bytes(staging.begin(), staging.begin() + long(c.size())) == c);
}

TEST_CASE("laps run 1..0xFFFFFFFF and wrap to 1, never 0") {
  CHECK(cudaq_rt_loopback_lap(0, 5) == 1u);
  CHECK(cudaq_rt_loopback_lap(4, 5) == 1u);
  CHECK(cudaq_rt_loopback_lap(5, 5) == 2u);
  const uint64_t period = CUDAQ_RT_LOOPBACK_LAP_PERIOD;
  for (uint32_t n : {1u, 3u, 64u, 65536u}) {
    CAPTURE(n);
    CHECK(cudaq_rt_loopback_lap(uint64_t(n) * (period - 1), n) == 0xFFFFFFFFu);
    CHECK(cudaq_rt_loopback_lap(uint64_t(n) * period - 1, n) == 0xFFFFFFFFu);
    CHECK(cudaq_rt_loopback_lap(uint64_t(n) * period, n) == 1u);
    CHECK(cudaq_rt_loopback_lap(uint64_t(n) * period + n, n) == 2u);
  }
  CHECK(cudaq_rt_loopback_next_lap(1) == 2u);
  CHECK(cudaq_rt_loopback_next_lap(0xFFFFFFFEu) == 0xFFFFFFFFu);
  CHECK(cudaq_rt_loopback_next_lap(0xFFFFFFFFu) == 1u);
  CHECK(cudaq_rt_loopback_prev_lap(1) == 0xFFFFFFFFu); // tx_publish's "the last lap"
  CHECK(cudaq_rt_loopback_prev_lap(2) == 1u);
  for (uint32_t lap : {1u, 2u, 0x80000000u, 0xFFFFFFFFu})
    CHECK(cudaq_rt_loopback_prev_lap(cudaq_rt_loopback_next_lap(lap)) == lap);

  SUBCASE("host and device agree across the wrap, and zeroed cells never look stamped") {
    const uint32_t n = 3;
    TestBridge t(n, 64);
    // Start the host two laps before the wrap; the device where it would have got to by then.
    const uint64_t k0 = uint64_t(n) * (period - 2) + 1;
    t.b.sent = t.b.received = k0;
    Position dev{uint32_t(k0 % n), cudaq_rt_loopback_lap(k0, n)};
    std::vector<Bytes> staging(n, Bytes(64, 0xEE));
    for (uint64_t k = k0; k < k0 + 4 * n; ++k) {
      CAPTURE(k);
      CHECK(dev.lap == cudaq_rt_loopback_lap(k, n));
      CHECK(dev.lap != 0u);
      // The ring was zeroed and never written at this slot before this run: lap 0 would have
      // matched it here, at the wrap.
      CHECK_FALSE(device_unpack(t, dev.slot, dev.lap, staging[dev.slot]));
      const Bytes frame = request(uint32_t(k % 40), uint32_t(k));
      REQUIRE(send_request(&t.b, frame.data(), frame.size()) == CUDAQ_RT_BRIDGE_OK);
      REQUIRE(device_unpack(t, dev.slot, dev.lap, staging[dev.slot]));
      CHECK(Bytes(staging[dev.slot].begin(), staging[dev.slot].begin() + long(frame.size())) ==
            frame);
      device_publish(t, dev.slot, dev.lap, frame);
      CHECK(receive(t) == frame);
      dev.next(n);
    }
  }
}

TEST_CASE("send refuses a frame whose header's arg_len is not its payload's length") {
  TestBridge t(4, 128);
  const Bytes good = request(40, 1);
  CHECK(check_request(good.data(), good.size(), 128).empty());
  for (uint32_t claimed : {0u, 39u, 41u, 104u, 105u, 0xFFFFFFF0u}) {
    CAPTURE(claimed);
    const Bytes bad = request(40, 1, claimed);
    CHECK(send_request(&t.b, bad.data(), bad.size()) == CUDAQ_RT_BRIDGE_ERROR);
    CHECK(t.b.error.find("arg_len is " + std::to_string(claimed)) != std::string::npos);
    CHECK(t.b.sent == 0);
  }
  const Bytes small(23, 0), big = request(128 - 24 + 1, 1);
  CHECK(send_request(&t.b, small.data(), small.size()) == CUDAQ_RT_BRIDGE_ERROR);
  CHECK(t.b.error.find("does not fit a slot") != std::string::npos);
  CHECK(send_request(&t.b, big.data(), big.size()) == CUDAQ_RT_BRIDGE_ERROR);
  CHECK(send_request(&t.b, good.data(), good.size()) == CUDAQ_RT_BRIDGE_OK);
  CHECK(t.b.sent == 1);
}

TEST_CASE("a frame shorter than its header claims is staged as truncated") {
  CHECK(cudaq_rt_loopback_request_whole(24, 0));
  CHECK(cudaq_rt_loopback_request_whole(32, 8));
  CHECK(cudaq_rt_loopback_request_whole(32, 3)); // longer than claimed: the handler reads 3
  CHECK_FALSE(cudaq_rt_loopback_request_whole(32, 9));
  CHECK_FALSE(cudaq_rt_loopback_request_whole(23, 0));
  CHECK_FALSE(cudaq_rt_loopback_request_whole(0, 0));
  CHECK_FALSE(cudaq_rt_loopback_request_whole(1024, 0xFFFFFFFFu));

  // What write_request() puts in the ring, raw (send() refuses these), as the device stages it.
  TestBridge t(1, 256);
  Bytes staging(256, 0xEE); // an earlier request's bytes
  const Bytes long_one = request(200, 9);
  REQUIRE(send_request(&t.b, long_one.data(), long_one.size()) == CUDAQ_RT_BRIDGE_OK);
  REQUIRE(device_unpack(t, 0, 1, staging));
  device_publish(t, 0, 1, long_one);
  receive(t);

  const Bytes short_one = request(8, 10, 100); // 32 bytes, claims 100 payload bytes
  REQUIRE(write_request(&t.b, short_one.data(), short_one.size()) == CUDAQ_RT_BRIDGE_OK);
  REQUIRE(device_unpack(t, 0, 2, staging));
  cudaq_rt_request_header h;
  std::memcpy(&h, staging.data(), sizeof h);
  CHECK(h.magic == CUDAQ_RT_TRUNCATED_MAGIC);
  CHECK(h.arg_len == 100u);
  CHECK(h.request_id == 10u); // the bytes it brought are its own
  device_publish(t, 0, 2, short_one);
  receive(t);

  Bytes headless = request(0, 11); // 16 bytes: no ptp_timestamp
  headless.resize(16);
  REQUIRE(write_request(&t.b, headless.data(), headless.size()) == CUDAQ_RT_BRIDGE_OK);
  REQUIRE(device_unpack(t, 0, 3, staging));
  std::memcpy(&h, staging.data(), sizeof h);
  CHECK(h.magic == CUDAQ_RT_TRUNCATED_MAGIC);
  CHECK(h.request_id == 11u);
  CHECK(h.ptp_timestamp == 0u); // not the earlier request's
}
