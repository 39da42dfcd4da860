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
// A bulk frame (the control cell's second half says so) comes from the slot's bulk area instead,
// rounded up to 16 bytes as the device copies it.
std::optional<uint32_t> device_unpack(TestBridge &t, uint32_t slot, uint32_t lap, Bytes &staging) {
  const uint64_t *control = t.request_half(slot, 0);
  if (!cudaq_rt_loopback_stamped(stamp_of(control[0]), stamp_of(control[1]), lap))
    return std::nullopt;
  const uint32_t len = std::min(data_of(control[0]), t.b.slot_size);
  const uint32_t cells = cudaq_rt_loopback_frame_cells(len);
  Bytes frame = staging;
  uint32_t arg_len = 0xFFFFFFFFu;
  const bool bulk = data_of(control[1]) == CUDAQ_RT_LOOPBACK_KIND_BULK;
  if (bulk) {
    const uint32_t bytes = (len + 15) / 16 * 16;
    std::memcpy(frame.data(), t.b.request_bulk + cudaq_rt_loopback_bulk_offset(slot, t.b.slot_size),
                bytes);
    if (len >= 12)
      std::memcpy(&arg_len, frame.data() + 8, 4);
  }
  for (uint32_t c = 1; !bulk && c < cells; ++c) {
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

// What tx_publish() stores: the frame's cells, then its control cell, each half stamped; or, for a
// frame of at least bulk_min bytes, its bytes in the slot's bulk area, then the control cell.
void device_publish(TestBridge &t, uint32_t slot, uint32_t lap, const Bytes &response) {
  const uint32_t len = uint32_t(response.size());
  if (cudaq_rt_loopback_is_bulk(len, t.b.bulk_min)) {
    std::memcpy(t.b.response_bulk + cudaq_rt_loopback_bulk_offset(slot, t.b.slot_size),
                response.data(), len);
    store_half(t.response_half(slot, 0) + 1, lap, CUDAQ_RT_LOOPBACK_KIND_BULK);
    store_half(t.response_half(slot, 0), lap, len);
    return;
  }
  t.publish_cells(slot, lap, response);
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
  // As cells only (bulk=0), in bulk beyond the head cells (the default), from 200 bytes on.
  for (uint32_t bulk_min : {0u, CUDAQ_RT_LOOPBACK_DEFAULT_BULK_MIN, 200u})
    for (uint32_t layout : {CUDAQ_RT_LOOPBACK_LAYOUT_SLOTS, CUDAQ_RT_LOOPBACK_LAYOUT_LANES})
      for (uint32_t slot_size : {32u, 48u, 528u, 1024u, 2064u}) {
        CAPTURE(bulk_min);
        CAPTURE(layout);
        CAPTURE(slot_size);
        // Slots are reused and laps go up: 3 slots, or the one group of the lanes layout.
        const uint32_t slots =
            layout == CUDAQ_RT_LOOPBACK_LAYOUT_LANES ? CUDAQ_RT_LOOPBACK_LANES : 3u;
        TestBridge t(slots, slot_size, layout, bulk_min);
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
          CHECK(receive_response(&t.b, buffer.data(), buffer.size(), &size) ==
                CUDAQ_RT_BRIDGE_AGAIN);
          Bytes response = frame;
          response[0] ^= 1; // any bytes: the ring does not look inside
          device_publish(t, dev.slot, dev.lap, response);
          CHECK(receive(t) == response);
          dev.next(t.b.num_slots);
        }
      }
}

TEST_CASE("a bulk frame: plain bytes, then a control cell that says so, accepted only whole") {
  TestBridge t(2, 1024, CUDAQ_RT_LOOPBACK_LAYOUT_SLOTS, CUDAQ_RT_LOOPBACK_DEFAULT_BULK_MIN);
  Bytes staging(1024, 0xEE);
  const Bytes frame = request(500, 3);
  REQUIRE(send_request(&t.b, frame.data(), frame.size()) == CUDAQ_RT_BRIDGE_OK);
  // The bytes are in slot 0's bulk area, the head cells untouched, the control cell says bulk.
  CHECK(Bytes(t.request_bulk.begin(), t.request_bulk.begin() + frame.size()) == frame);
  for (uint32_t c = 1; c < CUDAQ_RT_LOOPBACK_HEAD_CELLS; ++c)
    CHECK(t.request_half(0, c)[0] == 0u);
  CHECK(data_of(t.request_half(0, 0)[0]) == frame.size());
  CHECK(data_of(t.request_half(0, 0)[1]) == CUDAQ_RT_LOOPBACK_KIND_BULK);

  SUBCASE("a control cell whose second half has not landed is not accepted") {
    uint64_t *second = t.request_half(0, 0) + 1;
    const uint64_t whole = *second;
    store_half(second, 0, CUDAQ_RT_LOOPBACK_KIND_BULK); // the lap before: zeroed memory
    CHECK_FALSE(device_unpack(t, 0, 1, staging));
    *second = whole;
  }
  REQUIRE(device_unpack(t, 0, 1, staging) == frame.size());
  CHECK(Bytes(staging.begin(), staging.begin() + frame.size()) == frame);

  SUBCASE("the host waits for both halves of a bulk response's control cell") {
    const Bytes response = request(700, 4);
    std::memcpy(t.response_bulk.data(), response.data(), response.size());
    store_half(t.response_half(0, 0), 1, uint32_t(response.size())); // the first half only
    Bytes buffer(1024);
    size_t size = 0;
    CHECK(receive_response(&t.b, buffer.data(), buffer.size(), &size) == CUDAQ_RT_BRIDGE_AGAIN);
    store_half(t.response_half(0, 0) + 1, 1, CUDAQ_RT_LOOPBACK_KIND_BULK);
    CHECK(receive(t) == response);
  }
  SUBCASE("a bulk response of any size up to the slot") {
    for (uint32_t len : {33u, 48u, 1000u, 1024u}) {
      CAPTURE(len);
      Bytes response = request(len - CUDAQ_RT_HEADER_SIZE, len);
      device_publish(t, uint32_t(t.b.received % 2), cudaq_rt_loopback_lap(t.b.received, 2),
                     response);
      CHECK(receive(t) == response);
      const Bytes next = request(len - CUDAQ_RT_HEADER_SIZE, len + 1);
      REQUIRE(send_request(&t.b, next.data(), next.size()) == CUDAQ_RT_BRIDGE_OK);
    }
  }
}

TEST_CASE("cells and bulk frames share a slot: each lap's bytes are its own") {
  // One slot, so that every frame reuses it; lengths that switch between the two ways and back,
  // longer and shorter, so that stale bytes of either kind are there to be mistaken.
  TestBridge t(1, 2064, CUDAQ_RT_LOOPBACK_LAYOUT_SLOTS, 64);
  Bytes staging(2064, 0xEE);
  uint32_t lap = 1;
  for (uint32_t len : {2064u, 24u, 63u, 64u, 2000u, 32u, 65u, 40u, 2064u, 24u}) {
    CAPTURE(len);
    const Bytes frame = request(len - CUDAQ_RT_HEADER_SIZE, len);
    REQUIRE(send_request(&t.b, frame.data(), frame.size()) == CUDAQ_RT_BRIDGE_OK);
    CHECK(data_of(t.request_half(0, 0)[1]) ==
          (len >= 64 ? CUDAQ_RT_LOOPBACK_KIND_BULK : CUDAQ_RT_LOOPBACK_KIND_CELLS));
    REQUIRE(device_unpack(t, 0, lap, staging) == len);
    CHECK(Bytes(staging.begin(), staging.begin() + len) == frame);
    Bytes response = frame;
    response[5] ^= 0x5A;
    device_publish(t, 0, lap, response);
    CHECK(receive(t) == response);
    lap = cudaq_rt_loopback_next_lap(lap);
  }
}

TEST_CASE("a bulk frame shorter than its header claims is staged as truncated") {
  TestBridge t(1, 256, CUDAQ_RT_LOOPBACK_LAYOUT_SLOTS, 33);
  Bytes staging(256, 0xEE);
  const Bytes short_one = request(40, 12, 100); // 64 bytes, claims 100 payload bytes
  REQUIRE(write_request(&t.b, short_one.data(), short_one.size()) == CUDAQ_RT_BRIDGE_OK);
  REQUIRE(data_of(t.request_half(0, 0)[1]) == CUDAQ_RT_LOOPBACK_KIND_BULK);
  REQUIRE(device_unpack(t, 0, 1, staging));
  cudaq_rt_request_header h;
  std::memcpy(&h, staging.data(), sizeof h);
  CHECK(h.magic == CUDAQ_RT_TRUNCATED_MAGIC);
  CHECK(h.request_id == 12u);
}

TEST_CASE("the warp form's tail loads: position p holds cell tail_cell_at(p), lanes read lines") {
  for (uint32_t slot_size : {48u, 1040u, 16448u}) {
    CAPTURE(slot_size);
    const uint32_t n = cudaq_rt_loopback_tail_cells(slot_size);
    for (uint32_t slot : {0u, 5u}) {
      std::set<uint32_t> cells;
      for (uint32_t p = 0; p < n; ++p) {
        CAPTURE(p);
        const uint32_t t = cudaq_rt_loopback_tail_cell_at(p);
        CHECK(cudaq_rt_loopback_tail_cell(slot, t, n) == uint64_t(slot) * n + p);
        CHECK(cudaq_rt_loopback_tail_cell_at(t) == p);
        CHECK(cells.insert(t).second);
      }
      CHECK(cells.size() == n);
      CHECK(*cells.rbegin() == n - 1);
    }
  }
  // Positions 0..7 (one line) are cells 0, 8, .., 56: a line holds one cell of each 8-cell batch.
  for (uint32_t p = 0; p < CUDAQ_RT_LOOPBACK_LINE_CELLS; ++p)
    CHECK(cudaq_rt_loopback_tail_cell_at(p) == p * CUDAQ_RT_LOOPBACK_LINE_CELLS);
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

TEST_CASE("the warp form's ring: lanes and no bulk frames, unless the options name them") {
  auto laid_out = [](uint32_t polling_lanes, const char *config, bool engine = false) {
    cudaq_rt::BridgeOptions options;
    REQUIRE(options.parse(config).empty());
    lay_out_for({sizeof(cudaq_rt_bridge_launch), polling_lanes, 0}, options, engine);
    return options.text();
  };
  CHECK(laid_out(32, "") == "layout=lanes,bulk=0");
  CHECK(laid_out(32, "slots=64") == "slots=64,layout=lanes,bulk=0");
  CHECK(laid_out(32, "layout=slots,slots=64") == "layout=slots,slots=64,bulk=0");
  CHECK(laid_out(32, "slots=64,layout=lanes,bulk=100") == "slots=64,layout=lanes,bulk=100");
  CHECK(laid_out(32, "", true) == "layout=lanes,bulk=0"); // its lanes have no engine anyway
  CHECK(laid_out(1, "slots=64") == "slots=64");           // the unified kernel: one thread
  CHECK(laid_out(0, "slots=64") == "slots=64");           // a custom kernel: nothing known
  CHECK(laid_out(0, "slots=64", true) == "slots=64");
}

TEST_CASE("the unified kernel with the bulk copy engine: small frames as cells, a spare frame") {
  cudaq_rt::BridgeOptions options;
  REQUIRE(options.parse("slots=64").empty());
  lay_out_for({sizeof(cudaq_rt_bridge_launch), 1, 0}, options, true);
  CHECK(options.text() == "slots=64,spare_frame=1,bulk=537,response_bulk=281");
  // Requests of up to a 512-byte payload go as cells, and their tails fit one engine copy;
  // responses of up to a 256-byte payload as cells.
  CHECK_FALSE(
      cudaq_rt_loopback_is_bulk(512 + CUDAQ_RT_HEADER_SIZE, CUDAQ_RT_LOOPBACK_ENGINE_BULK_MIN));
  CHECK(cudaq_rt_loopback_is_bulk(513 + CUDAQ_RT_HEADER_SIZE, CUDAQ_RT_LOOPBACK_ENGINE_BULK_MIN));
  CHECK(CUDAQ_RT_LOOPBACK_ENGINE_BULK_MIN - 1 <= CUDAQ_RT_LOOPBACK_ENGINE_CELLS_MAX);
  CHECK(CUDAQ_RT_LOOPBACK_ENGINE_CELLS_MAX == 1056u); // a 1 KB payload's frame, 1048 bytes
  CHECK(cudaq_rt_loopback_frame_cells(CUDAQ_RT_LOOPBACK_ENGINE_CELLS_MAX) -
            CUDAQ_RT_LOOPBACK_HEAD_CELLS ==
        CUDAQ_RT_LOOPBACK_ENGINE_TAIL_CELLS);
  CHECK_FALSE(cudaq_rt_loopback_is_bulk(256 + CUDAQ_RT_HEADER_SIZE,
                                        CUDAQ_RT_LOOPBACK_ENGINE_RESPONSE_BULK_MIN));
  CHECK(cudaq_rt_loopback_is_bulk(257 + CUDAQ_RT_HEADER_SIZE,
                                  CUDAQ_RT_LOOPBACK_ENGINE_RESPONSE_BULK_MIN));
  // Options that name bulk keep it, and responses follow it; the spare frame comes either way,
  // unless the options name it.
  cudaq_rt::BridgeOptions given;
  REQUIRE(given.parse("bulk=33").empty());
  lay_out_for({sizeof(cudaq_rt_bridge_launch), 1, 0}, given, true);
  CHECK(given.text() == "bulk=33,spare_frame=1");
  cudaq_rt::BridgeOptions response_only;
  REQUIRE(response_only.parse("response_bulk=33").empty());
  lay_out_for({sizeof(cudaq_rt_bridge_launch), 1, 0}, response_only, true);
  CHECK(response_only.text() == "response_bulk=33,spare_frame=1,bulk=537");
  cudaq_rt::BridgeOptions no_spare;
  REQUIRE(no_spare.parse("spare_frame=0").empty());
  lay_out_for({sizeof(cudaq_rt_bridge_launch), 1, 0}, no_spare, true);
  CHECK(no_spare.text() == "spare_frame=0,bulk=537,response_bulk=281");
  // Without the engine there is no chain, so no spare frame.
  cudaq_rt::BridgeOptions no_engine;
  REQUIRE(no_engine.parse("").empty());
  lay_out_for({sizeof(cudaq_rt_bridge_launch), 1, 0}, no_engine, false);
  CHECK(no_engine.text() == "");
  uint32_t flag = 7;
  CHECK((parse_flag("0", flag) && flag == 0));
  CHECK((parse_flag("1", flag) && flag == 1));
  CHECK_FALSE(parse_flag("2", flag));
  CHECK_FALSE(parse_flag("yes", flag));
}

// What stage_tail (loopback_device.cu) does with the bulk copy engine, on the CPU: it copies the
// whole blocks of 64 cells that start the slot's tail and reads it 8 tail cells at a time, cells
// g + k (g a multiple of 8) at cudaq_rt_loopback_tail_cell(0, g, 0) + 8 k of the copy, taking the
// frame only when every half of its need cells is stamped.
std::optional<Bytes> engine_tail(const std::vector<uint64_t> &copy, uint32_t need, uint32_t lap) {
  Bytes tail(8 * size_t(need));
  for (uint32_t g = 0; g < need; g += CUDAQ_RT_LOOPBACK_LINE_CELLS)
    for (uint32_t k = 0; k < CUDAQ_RT_LOOPBACK_LINE_CELLS && g + k < need; ++k) {
      const uint64_t *h = copy.data() + 2 * (cudaq_rt_loopback_tail_cell(0, g, 0) +
                                             k * CUDAQ_RT_LOOPBACK_LINE_CELLS);
      if (!cudaq_rt_loopback_stamped(stamp_of(h[0]), stamp_of(h[1]), lap))
        return std::nullopt;
      const uint32_t d[2] = {data_of(h[0]), data_of(h[1])};
      std::memcpy(tail.data() + 8 * size_t(g + k), d, 8);
    }
  return tail;
}

TEST_CASE("tails by the engine: the first blocks of a slot's tail hold its first tail cells") {
  for (uint32_t slot_size : {64u, 1024u, 16448u}) {
    const uint32_t tail_cells = cudaq_rt_loopback_tail_cells(slot_size);
    CAPTURE(slot_size);
    for (uint32_t slot : {0u, 1u, 5u})
      for (uint32_t t = 0; t < tail_cells; ++t) {
        const uint64_t in_copy = cudaq_rt_loopback_tail_cell(0, t, tail_cells);
        CHECK(cudaq_rt_loopback_tail_cell(slot, t, tail_cells) ==
              uint64_t(slot) * tail_cells + in_copy);
        // stage_tail copies the first need cells rounded up to a block: cell t is in it.
        CHECK(in_copy < (t + CUDAQ_RT_LOOPBACK_TAIL_BLOCK) / CUDAQ_RT_LOOPBACK_TAIL_BLOCK *
                            CUDAQ_RT_LOOPBACK_TAIL_BLOCK);
        // It reads them 8 at a time (unpack_group), and publish_frame writes them so: the 8 cells
        // from a multiple of 8 are one a line, 8 cells apart, from the first's.
        const uint32_t g = t & ~(CUDAQ_RT_LOOPBACK_LINE_CELLS - 1u);
        CHECK(in_copy ==
              cudaq_rt_loopback_tail_cell(0, g, 0) + (t - g) * CUDAQ_RT_LOOPBACK_LINE_CELLS);
      }
  }
}

TEST_CASE("tails by the engine: a copy taken before the host's stores is refused, one after is the "
          "frame") {
  // Frames up to CUDAQ_RT_LOOPBACK_ENGINE_CELLS_MAX bytes: their tails fit one copy.
  const uint32_t copy_halves = 2 * CUDAQ_RT_LOOPBACK_ENGINE_TAIL_CELLS;
  const uint32_t slot_size = 2048;
  for (uint32_t payload : {9u, 64u, 200u, 256u, 512u, 1000u, 1024u, 1032u}) {
    CAPTURE(payload);
    // A slot of lap 1 never written, then one written for lap 1 and taken, then lap 2; every
    // frame as cells.
    TestBridge r(1, slot_size, CUDAQ_RT_LOOPBACK_LAYOUT_SLOTS,
                 CUDAQ_RT_LOOPBACK_ENGINE_CELLS_MAX + 1u);
    for (uint32_t lap = 1; lap <= 2; ++lap) {
      const Bytes f = request(payload, lap);
      const uint32_t need =
          cudaq_rt_loopback_frame_cells(uint32_t(f.size())) - CUDAQ_RT_LOOPBACK_HEAD_CELLS;
      REQUIRE(need <= CUDAQ_RT_LOOPBACK_ENGINE_TAIL_CELLS);
      const uint64_t *base = r.request_half(0, CUDAQ_RT_LOOPBACK_HEAD_CELLS);
      const std::vector<uint64_t> before(base, base + copy_halves);
      REQUIRE(send_request(&r.b, f.data(), f.size()) == CUDAQ_RT_BRIDGE_OK);
      const std::vector<uint64_t> after(base, base + copy_halves);
      CHECK_FALSE(engine_tail(before, need, lap)); // zeroes, or lap 1's cells
      const auto tail = engine_tail(after, need, lap);
      REQUIRE(tail);
      const size_t head_bytes = 8 * (CUDAQ_RT_LOOPBACK_HEAD_CELLS - 1);
      CHECK(std::equal(f.begin() + head_bytes, f.end(), tail->begin()));
      // The host takes the slot back only with its answer: answer it for the next lap.
      Bytes staging(slot_size);
      REQUIRE(device_unpack(r, 0, lap, staging));
      device_publish(r, 0, lap, Bytes(f.begin(), f.begin() + CUDAQ_RT_HEADER_SIZE));
      receive(r);
    }
  }
}

TEST_CASE("the batched send and receive: in order, up to what fits and what has come") {
  for (uint32_t layout : {CUDAQ_RT_LOOPBACK_LAYOUT_SLOTS, CUDAQ_RT_LOOPBACK_LAYOUT_LANES}) {
    CAPTURE(layout);
    TestBridge t(32, 256, layout, 0);
    std::vector<Bytes> frames;
    std::vector<const void *> ptrs;
    std::vector<size_t> sizes;
    for (uint32_t i = 0; i < 40; ++i)
      frames.push_back(request(i % 9 * 8, i));
    for (const Bytes &f : frames) {
      ptrs.push_back(f.data());
      sizes.push_back(f.size());
    }
    size_t queued = 99;
    // 40 frames, 32 slots: the first 32 go, and that is OK (AGAIN only when none fits).
    REQUIRE(send_requests(&t.b, ptrs.data(), sizes.data(), 40, &queued) == CUDAQ_RT_BRIDGE_OK);
    CHECK(queued == 32);
    REQUIRE(send_requests(&t.b, ptrs.data() + 32, sizes.data() + 32, 8, &queued) ==
            CUDAQ_RT_BRIDGE_AGAIN);
    CHECK(queued == 0);
    Bytes buffer(40 * 256);
    std::vector<size_t> got(40);
    size_t taken = 99;
    CHECK(receive_responses(&t.b, buffer.data(), 256, got.data(), 40, &taken) ==
          CUDAQ_RT_BRIDGE_AGAIN);
    CHECK(taken == 0);
    // The device answers the first 20 (each response its request's first 24 + 8 bytes).
    Position at;
    for (uint32_t i = 0; i < 20; ++i, at.next(32)) {
      Bytes staging(256);
      REQUIRE(device_unpack(t, at.slot, at.lap, staging));
      const size_t n = std::min<size_t>(frames[i].size(), 32);
      device_publish(t, at.slot, at.lap, Bytes(staging.begin(), staging.begin() + n));
    }
    REQUIRE(receive_responses(&t.b, buffer.data(), 256, got.data(), 40, &taken) ==
            CUDAQ_RT_BRIDGE_OK);
    REQUIRE(taken == 20);
    for (uint32_t i = 0; i < 20; ++i) {
      CAPTURE(i);
      const size_t n = std::min<size_t>(frames[i].size(), 32);
      CHECK(got[i] == n);
      CHECK(std::equal(frames[i].begin(), frames[i].begin() + n, buffer.begin() + i * 256));
    }
  }
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

namespace {
// The warp form's lanes over a ring of n slots (a multiple of 32): lane l serves slots l, l + 32,
// ..., each with its own next (slot, lap), and one copy of the probe state, as every lane's
// session keeps it (loopback_device.cu, warp_poll). `sent` requests have been written, in order;
// request k is at slot k % n with lap cudaq_rt_loopback_lap(k, n).
// With `warps` > 1, the model is warp `warp` of them (loopback_ring.h, "Warps"): its lane l serves
// the requests k with k % (32 * warps) == 32 * warp + l.
struct WarpModel {
  uint32_t n;
  uint64_t sent = 0;
  Position lane[32];
  cudaq_rt_loopback_warp_probe w{0, 0, 0, 0};
  std::vector<uint64_t> served;
  uint32_t stride = 32; // slots from a lane's slot to its next

  WarpModel(uint32_t slots, uint64_t first, uint32_t warp = 0, uint32_t warps = 1)
      : n(slots), sent(first), stride(32 * warps) {
    // Every request before `first` served: lane l's next is the first index >= first in lane l.
    for (uint32_t l = 0; l < 32; ++l) {
      const uint64_t k = first + (32 * warp + l + stride - first % stride) % stride;
      lane[l] = {uint32_t(k % n), cudaq_rt_loopback_lap(k, n)};
    }
  }
  // The lane whose next request comes first, as warp_earliest works it out (32: not one lane).
  uint32_t earliest() const {
    uint32_t first = 32, count = 0;
    for (uint32_t l = 0; l < 32; ++l) {
      const Position &prev = lane[(l + 31) % 32];
      if (cudaq_rt_loopback_warp_first(lane[l].slot, lane[l].lap, prev.slot, prev.lap, n,
                                       l == 0 ? stride - 31 : 1)) {
        first = l;
        ++count;
      }
    }
    return count == 1 ? first : 32u;
  }
  // The index of the request lane l waits for (its position against the running count).
  uint64_t index_of(uint32_t l) const {
    // Before the laps wrap, the lap says which request it is (a ring's worth in flight at most).
    const uint64_t k0 = uint64_t(lane[l].lap - 1) * n + lane[l].slot;
    if (k0 < sent + 64 && k0 + n + 64 > sent && cudaq_rt_loopback_lap(k0, n) == lane[l].lap)
      return k0;
    for (uint64_t k = sent > 64 ? sent - 64 : 0; k < sent + 64; ++k)
      if (k % n == lane[l].slot && cudaq_rt_loopback_lap(k, n) == lane[l].lap)
        return k;
    return UINT64_MAX;
  }
  // One round: which lanes probe; a probing lane finds its request when it was sent and
  // `visible` says so. Returns the lanes that found one (they serve it and move on).
  template <class Visible> uint32_t round(Visible visible, int shutdown = 0) {
    uint32_t ready = 0, probing = 0;
    for (uint32_t l = 0; l < 32; ++l) {
      if (!cudaq_rt_loopback_warp_probes(&w, l))
        continue;
      ++probing;
      const uint64_t k = index_of(l);
      if (k < sent && visible(k))
        ready |= 1u << l;
    }
    last_probing = probing;
    if (cudaq_rt_loopback_warp_round(&w, ready, shutdown))
      cudaq_rt_loopback_warp_narrow(&w, earliest());
    for (uint32_t l = 0; l < 32; ++l)
      if (ready & (1u << l)) {
        served.push_back(index_of(l));
        for (uint32_t i = 0; i < stride; ++i) // slot + stride, the lap after the ring's end
          lane[l].next(n);
      }
    return ready;
  }
  uint32_t last_probing = 0;
};
const auto all_visible = [](uint64_t) { return true; };
} // namespace

TEST_CASE("warp form: a client that waits for each answer gets a probe of two lanes") {
  // Rings of 32, 64 and 256 slots, starting at the first lap and just before the laps wrap.
  for (uint32_t n : {32u, 64u, 256u})
    for (uint64_t first : {uint64_t(0), uint64_t(n) * (CUDAQ_RT_LOOPBACK_LAP_PERIOD - 1) - 40}) {
      CAPTURE(n);
      CAPTURE(first);
      WarpModel m(n, first);
      for (uint64_t k = first; k < first + 200; ++k) {
        CAPTURE(k);
        CHECK(m.round(all_visible) == 0u); // idle before the request
        ++m.sent;
        // Found in the first round after it was sent, by the lane it went to.
        REQUIRE(m.round(all_visible) == 1u << (k % 32));
        CHECK(m.served.back() == k);
        if (k >= first + CUDAQ_RT_LOOPBACK_WARP_SINGLES + 1) {
          CHECK(m.w.narrow == 1u);
          CHECK(m.last_probing == 2u);
          CHECK(m.w.next == (k + 1) % 32);
        }
      }
    }
}

TEST_CASE("warp form: a burst, the flag, an out-of-order find or a long idle widen the probe") {
  WarpModel m(64, 0);
  auto ping = [&](uint32_t count) {
    for (uint32_t i = 0; i < count; ++i) {
      m.round(all_visible);
      ++m.sent;
      REQUIRE(m.round(all_visible) != 0u);
    }
    m.round(all_visible);
  };
  ping(CUDAQ_RT_LOOPBACK_WARP_SINGLES + 1);
  REQUIRE(m.w.narrow == 1u);

  SUBCASE("a burst: the two probing lanes find theirs, the next round finds the rest") {
    m.sent += 16;
    CHECK(__builtin_popcount(m.round(all_visible)) == 2);
    CHECK(m.w.narrow == 0u);
    CHECK(__builtin_popcount(m.round(all_visible)) == 14);
    CHECK(m.round(all_visible) == 0u); // idle again, but a burst came last: stays wide
    CHECK(m.w.narrow == 0u);
    CHECK(m.last_probing == 32u);
    ping(CUDAQ_RT_LOOPBACK_WARP_SINGLES);
    CHECK(m.w.narrow == 1u);
  }
  SUBCASE("the second lane's request seen before the first's") {
    const uint64_t k = m.sent;
    m.sent += 2;
    CHECK(m.round([&](uint64_t i) { return i != k; }) == 1u << ((k + 1) % 32));
    CHECK(m.w.narrow == 0u);
    CHECK(m.round(all_visible) == 1u << (k % 32)); // every lane probes: found
  }
  SUBCASE("the shutdown flag") {
    m.round(all_visible, 1);
    CHECK(m.w.narrow == 0u);
    m.round(all_visible, 1);
    CHECK(m.w.narrow == 0u); // never narrows while the flag is set
    CHECK(m.last_probing == 32u);
  }
  SUBCASE("empty rounds: a wide one every WARP_IDLE_ROUNDS") {
    // ping's last round was the first empty one.
    for (uint32_t i = 2; i < CUDAQ_RT_LOOPBACK_WARP_IDLE_ROUNDS; ++i) {
      m.round(all_visible);
      REQUIRE(m.w.narrow == 1u);
    }
    m.round(all_visible);
    CHECK(m.w.narrow == 0u);
    m.round(all_visible);
    CHECK(m.last_probing == 32u);
    CHECK(m.w.narrow == 1u); // and narrows again
  }
  SUBCASE("no request is left behind") {
    for (int i = 0; i < 40; ++i) {
      m.sent += uint64_t(i % 3); // 0, 1 or 2 at a time, some seen late
      const uint64_t late = m.sent - 1;
      m.round([&](uint64_t k) { return k != late || i % 5; });
    }
    for (int i = 0; i < 3; ++i)
      m.round(all_visible);
    std::vector<uint64_t> s = m.served;
    std::sort(s.begin(), s.end());
    REQUIRE(s.size() == m.sent - 0);
    for (uint64_t k = 0; k < s.size(); ++k)
      CHECK(s[k] == k);
  }
}

TEST_CASE("warp form: under any mix of traffic every request is found, and soon") {
  // Requests sent 0 to 40 at a time, or none for a while, each seen by the GPU 0 to 2 rounds
  // after it was sent (loads complete in any order); never more than a ring's worth in flight.
  for (uint32_t n : {32u, 64u, 256u}) {
    CAPTURE(n);
    WarpModel m(n, 0);
    std::vector<uint64_t> visible_at; // per request, the round from which the GPU sees it
    uint64_t state = 12345 + n;
    auto next_random = [&](uint32_t bound) {
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      return uint32_t(state >> 33) % bound;
    };
    std::vector<uint64_t> found_at;
    uint32_t narrow_rounds = 0;
    for (uint64_t round = 0; round < 20000; ++round) {
      const uint32_t kind = next_random(10);
      const uint32_t burst = kind < 5 ? 0u : kind < 8 ? 1u : next_random(41);
      for (uint32_t i = 0; i < burst && m.sent - m.served.size() < n; ++i) {
        visible_at.push_back(round + next_random(3));
        ++m.sent;
      }
      narrow_rounds += m.w.narrow;
      const size_t before = m.served.size();
      m.round([&](uint64_t k) { return visible_at[k] <= round; });
      for (size_t i = before; i < m.served.size(); ++i) {
        found_at.resize(m.sent, UINT64_MAX);
        REQUIRE(found_at[m.served[i]] == UINT64_MAX); // each request once
        found_at[m.served[i]] = round;
      }
    }
    for (int i = 0; i < 3 + int(CUDAQ_RT_LOOPBACK_WARP_IDLE_ROUNDS); ++i)
      m.round(all_visible);
    REQUIRE(m.served.size() == m.sent);
    found_at.resize(m.sent, UINT64_MAX);
    uint64_t worst = 0;
    for (uint64_t k = 0; k < m.sent; ++k)
      if (found_at[k] != UINT64_MAX)
        worst = std::max(worst, found_at[k] - visible_at[k]);
    // A request in a lane that does not probe waits at most for the next wide round.
    CHECK(worst <= CUDAQ_RT_LOOPBACK_WARP_IDLE_ROUNDS);
    CHECK(narrow_rounds > 0); // the single requests did narrow the probe
  }
}

TEST_CASE("warp form: exactly the lane whose request comes next is first") {
  for (uint32_t n : {32u, 64u, 256u})
    for (uint64_t first : {uint64_t(0), uint64_t(5), uint64_t(n - 1), uint64_t(n),
                           uint64_t(n) * (CUDAQ_RT_LOOPBACK_LAP_PERIOD - 1) + 31,
                           uint64_t(n) * CUDAQ_RT_LOOPBACK_LAP_PERIOD}) {
      CAPTURE(n);
      CAPTURE(first);
      WarpModel m(n, first);
      std::vector<uint32_t> firsts;
      for (uint32_t l = 0; l < 32; ++l) {
        const Position &prev = m.lane[(l + 31) % 32];
        if (cudaq_rt_loopback_warp_first(m.lane[l].slot, m.lane[l].lap, prev.slot, prev.lap, n, 1))
          firsts.push_back(l);
      }
      REQUIRE(firsts.size() == 1u);
      CHECK(firsts[0] == first % 32);
    }
  // A lane a request ahead of where it should be: not exactly one first, so no narrowing.
  WarpModel m(64, 0);
  for (int i = 0; i < 32; ++i)
    m.lane[3].next(64);
  uint32_t count = 0;
  for (uint32_t l = 0; l < 32; ++l) {
    const Position &prev = m.lane[(l + 31) % 32];
    count +=
        cudaq_rt_loopback_warp_first(m.lane[l].slot, m.lane[l].lap, prev.slot, prev.lap, 64, 1);
  }
  CHECK(count != 1u);
}

TEST_CASE("warps: each warp finds exactly its own groups' requests, every one once and soon") {
  // W warps side by side (loopback_ring.h, "Warps"): traffic as in the test above, each warp's
  // probe rules on its own; request k is warp (k / 32) % W's lane k % 32's.
  for (auto [warps, n] :
       {std::pair{2u, 64u}, std::pair{2u, 256u}, std::pair{4u, 128u}, std::pair{8u, 256u}}) {
    CAPTURE(warps);
    CAPTURE(n);
    std::vector<WarpModel> m;
    for (uint32_t w = 0; w < warps; ++w)
      m.emplace_back(n, 0, w, warps);
    std::vector<uint64_t> visible_at, found_at;
    uint64_t sent = 0, served = 0, state = 777 + n * warps;
    auto next_random = [&](uint32_t bound) {
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      return uint32_t(state >> 33) % bound;
    };
    auto round = [&](uint64_t r, auto visible) {
      for (uint32_t w = 0; w < warps; ++w) {
        m[w].sent = sent;
        const size_t before = m[w].served.size();
        m[w].round(visible);
        for (size_t i = before; i < m[w].served.size(); ++i) {
          const uint64_t k = m[w].served[i];
          REQUIRE(k < sent);
          REQUIRE((k / 32) % warps == w); // only this warp's groups
          found_at.resize(sent, UINT64_MAX);
          REQUIRE(found_at[k] == UINT64_MAX); // each request once
          found_at[k] = r;
          ++served;
        }
      }
    };
    uint32_t narrow_rounds = 0;
    for (uint64_t r = 0; r < 20000; ++r) {
      const uint32_t kind = next_random(10);
      const uint32_t burst = kind < 5 ? 0u : kind < 8 ? 1u : next_random(41);
      for (uint32_t i = 0; i < burst && sent - served < n; ++i, ++sent)
        visible_at.push_back(r + next_random(3));
      for (const WarpModel &x : m)
        narrow_rounds += x.w.narrow;
      round(r, [&](uint64_t k) { return visible_at[k] <= r; });
    }
    for (int i = 0; i < 3 + int(CUDAQ_RT_LOOPBACK_WARP_IDLE_ROUNDS); ++i)
      round(20000 + i, all_visible);
    REQUIRE(served == sent);
    uint64_t worst = 0;
    for (uint64_t k = 0; k < sent; ++k)
      worst = std::max(worst, found_at[k] - std::min(found_at[k], visible_at[k]));
    CHECK(worst <= CUDAQ_RT_LOOPBACK_WARP_IDLE_ROUNDS);
    CHECK(narrow_rounds > 0);
  }
}

TEST_CASE("warps: a warp's first lane is lane 0 once its group is served, and narrows to it") {
  // Two warps over 128 slots: warp 0 has served requests 0..31, so every lane of it waits in
  // group 2 (slots 64..95), and lane 0 comes first.
  WarpModel m(128, 32, 0, 2);
  CHECK(m.lane[0].slot == 64u);
  CHECK(m.earliest() == 0u);
  // Warp 0 at request 70: lanes 0..5 have moved on to group 4 (slots 0..5 of the next lap), and
  // lane 6 comes first. Lane 0's predecessor is lane 31's slot of group 2, 33 slots back; taken
  // as the slot just before (one warp's rule), lane 0 would be first too, and the probe would
  // not narrow.
  WarpModel mid(128, 70, 0, 2);
  CHECK(mid.earliest() == 6u);
  uint32_t one_warp_rule = 0;
  for (uint32_t l = 0; l < 32; ++l) {
    const Position &prev = mid.lane[(l + 31) % 32];
    one_warp_rule += cudaq_rt_loopback_warp_first(mid.lane[l].slot, mid.lane[l].lap, prev.slot,
                                                  prev.lap, 128, 1);
  }
  CHECK(one_warp_rule == 2u);
  // Mid-group and where the ring wraps: the lane of the next request.
  for (uint64_t first : {uint64_t(70), uint64_t(127), uint64_t(128) + 5,
                         uint64_t(128) * (CUDAQ_RT_LOOPBACK_LAP_PERIOD - 1) + 64 + 31}) {
    CAPTURE(first);
    const uint32_t warp = uint32_t(first / 32 % 2);
    WarpModel x(128, first, warp, 2);
    CHECK(x.earliest() == first % 32);
    WarpModel other(128, first, 1 - warp, 2); // the other warp waits for its group's lane 0
    CHECK(other.earliest() == 0u);
  }
  // A client that waits for each answer: each warp narrows to its next lane within its groups.
  WarpModel w0(128, 0, 0, 2);
  for (uint64_t k = 0; k < 32; ++k) {
    w0.round(all_visible);
    ++w0.sent;
    REQUIRE(w0.round(all_visible) == 1u << k);
  }
  CHECK(w0.w.narrow == 1u);
  CHECK(w0.w.next == 0u); // its next request is 64, lane 0
  CHECK(w0.lane[0].slot == 64u);
}

TEST_CASE("warps: with a client that waits for each answer, every warp probes two lanes") {
  // Four warps over 256 slots, one request at a time: a warp serves its group of 32 in turn and
  // idles through the other warps' groups, narrow all the while (a wide round every
  // WARP_IDLE_ROUNDS idle ones at most, and the warp narrows again after it).
  const uint32_t warps = 4;
  std::vector<WarpModel> m;
  for (uint32_t w = 0; w < warps; ++w)
    m.emplace_back(256, 0, w, warps);
  uint64_t wide = 0, rounds = 0;
  for (uint64_t k = 0; k < 2000; ++k) {
    CAPTURE(k);
    for (int idle = 0; idle < 2; ++idle) // rounds before the request is sent
      for (WarpModel &x : m) {
        CHECK(x.round(all_visible) == 0u);
        wide += k >= 64 && x.last_probing > 2;
        rounds += k >= 64;
      }
    for (WarpModel &x : m)
      ++x.sent;
    const uint32_t owner = uint32_t(k / 32 % warps);
    for (uint32_t w = 0; w < warps; ++w) {
      const uint32_t found = m[w].round(all_visible);
      wide += k >= 64 && m[w].last_probing > 2;
      rounds += k >= 64;
      REQUIRE(found == (w == owner ? 1u << (k % 32) : 0u));
    }
  }
  CAPTURE(wide);
  CHECK(wide * CUDAQ_RT_LOOPBACK_WARP_IDLE_ROUNDS <= rounds);
}

namespace {
// Warps that rest (loopback_ring.h, "Resting warps"), as warp_poll keeps the rule, over
// WarpModel: time in rounds, a rest of kRestRounds standing in for WARP_REST_CYCLES, and the wake
// flags as create leaves them (warp 0's set).
struct RestingWarps {
  static constexpr uint64_t kRestRounds = 20;
  std::vector<WarpModel> m;
  std::vector<uint32_t> wake, empty, since, woken;
  std::vector<int> resting;
  uint64_t now = 0, probes = 0;
  RestingWarps(uint32_t slots, uint32_t warps)
      : wake(warps), empty(warps), since(warps), resting(warps) {
    for (uint32_t w = 0; w < warps; ++w)
      m.emplace_back(slots, 0, w, warps);
    wake[0] = 1;
  }
  // One round of every warp; returns the lanes each found.
  std::vector<uint32_t> round() { return round(all_visible); }
  template <class Visible> std::vector<uint32_t> round(Visible visible) {
    const uint32_t warps = uint32_t(m.size());
    std::vector<uint32_t> found(warps);
    for (uint32_t w = 0; w < warps; ++w) {
      if (resting[w] && !wake[w] && now - since[w] < kRestRounds)
        continue;
      resting[w] = 0;
      since[w] = uint32_t(now);
      ++probes;
      const uint32_t ready = found[w] = m[w].round(visible);
      if (ready != 0u) {
        wake[w] = 0;
        if (cudaq_rt_loopback_warp_wakes_next(ready))
          woken.push_back((w + 1) % warps);
      }
      empty[w] = cudaq_rt_loopback_warp_empty(empty[w], ready);
      if (empty[w] >= CUDAQ_RT_LOOPBACK_WARP_REST_AFTER) {
        bool between = true;
        for (uint32_t l = 0; l < 32; ++l)
          between &=
              m[w].lane[l].slot == m[w].lane[0].slot + l && m[w].lane[l].lap == m[w].lane[0].lap;
        resting[w] = cudaq_rt_loopback_warp_rests(empty[w], between, wake[w] != 0);
      }
    }
    for (uint32_t w : woken) // a wake reaches its warp a round later (it goes through L2)
      wake[w] = 1;
    woken.clear();
    ++now;
    return found;
  }
  void send() {
    for (WarpModel &x : m)
      ++x.sent;
  }
};
} // namespace

TEST_CASE("warps: idle warps rest, and the warp a lone client's next request goes to never does") {
  // Four and eight warps over 256 slots, one request at a time, with idle spells of 2 rounds and
  // of 40 (longer than WARP_REST_AFTER and the rest): every request is found in the first round
  // after it was sent, by its own warp; between requests, the warps together probe far less than
  // one probe a warp a round.
  for (uint32_t warps : {4u, 8u}) {
    CAPTURE(warps);
    RestingWarps r(256, warps);
    uint64_t idle_rounds = 0, idle_probes = 0;
    for (uint64_t k = 0; k < 3000; ++k) {
      CAPTURE(k);
      const int spell = k % 7 == 0 ? 40 : 2;
      for (int i = 0; i < spell; ++i) {
        const uint64_t before = r.probes;
        for (uint32_t f : r.round())
          CHECK(f == 0u);
        idle_probes += k >= 256 ? r.probes - before : 0;
        idle_rounds += k >= 256;
      }
      r.send();
      const std::vector<uint32_t> found = r.round();
      const uint32_t owner = uint32_t(k / 32 % warps);
      for (uint32_t w = 0; w < warps; ++w)
        REQUIRE(found[w] == (w == owner ? 1u << (k % 32) : 0u));
    }
    CAPTURE(idle_probes);
    CAPTURE(idle_rounds);
    // Awake: the owner, its successor through the last lanes of a group, its predecessor for
    // WARP_REST_AFTER rounds after its group, and the resting ones once a rest. Without rests
    // every warp probes every round (4 or 8 a round).
    CHECK(idle_probes <= idle_rounds * 2);
  }
}

TEST_CASE("warps: a stream that reaches a resting warp is served without waiting for a rest") {
  // A client that keeps 16 requests in flight (each answer lets the next one go; the device sees
  // a request 2 rounds after it was sent), paused now and then for longer than a rest: the warp
  // the stream reaches is woken ahead of it and stays awake while its group's requests come in
  // over several rounds; no request waits for a rest.
  for (uint32_t warps : {2u, 4u, 8u}) {
    CAPTURE(warps);
    RestingWarps r(256, warps);
    std::vector<uint64_t> sent_at; // the round each request was sent in
    std::vector<size_t> seen(warps);
    uint64_t answered = 0, longest = 0;
    while (answered < 20000) {
      const bool pause = answered / 500 % 2 == 1 && answered % 500 == 0;
      if (pause)
        for (int i = 0; i < 40; ++i)
          r.round();
      while (sent_at.size() < answered + 16) {
        sent_at.push_back(r.now);
        r.send();
      }
      r.round([&](uint64_t k) { return r.now >= sent_at[k] + 2; }); // seen 2 rounds after
      for (uint32_t w = 0; w < warps; ++w)
        for (; seen[w] < r.m[w].served.size(); ++seen[w], ++answered) {
          const uint64_t k = r.m[w].served[seen[w]];
          longest = std::max(longest, r.now - sent_at.at(k));
        }
    }
    CHECK(longest <= 6u);
  }
}

TEST_CASE("warps: a request that reaches a resting warp unannounced waits at most the rest") {
  // Every flag cleared (as if a wake were overtaken) and every warp idle long enough to rest: a
  // request for each warp in turn is still found, within a rest.
  RestingWarps r(256, 4);
  for (int i = 0; i < 100; ++i)
    r.round();
  std::fill(r.wake.begin(), r.wake.end(), 0u);
  for (int i = 0; i < 107; ++i) // not a whole number of rests: warp 0's next probe is not due
    r.round();
  for (uint32_t w = 0; w < 4; ++w)
    CHECK(r.resting[w]);
  uint64_t longest = 0;
  for (uint64_t k = 0; k < 256; ++k) {
    CAPTURE(k);
    r.send();
    uint64_t waited = 0;
    for (;; ++waited) {
      REQUIRE(waited <= RestingWarps::kRestRounds);
      const std::vector<uint32_t> found = r.round();
      if (found[k / 32 % 4] != 0u)
        break;
    }
    longest = std::max(longest, waited);
  }
  CHECK(longest > 0u); // warp 0's first request did wait: it was resting
}

TEST_CASE("warps: the ring's shape and the kernel's warps must agree") {
  using namespace cudaq_rt::loopback;
  CHECK(check_warps(1, 10).empty());
  CHECK(check_warps(2, 64).empty());
  CHECK(check_warps(8, 256).empty());
  CHECK(check_warps(0, 64) == "warps=0 is out of range 1..8");
  CHECK(check_warps(9, 576) == "warps=9 is out of range 1..8");
  CHECK(check_warps(2, 32) == "warps=2 needs a multiple of 64 slots, not slots=32");
  CHECK(check_warps(4, 192) == "warps=4 needs a multiple of 128 slots, not slots=192");
  auto for_launch = [](uint32_t polling_lanes, const char *config) {
    cudaq_rt::BridgeOptions options;
    REQUIRE(options.parse(config).empty());
    return check_warps_for({sizeof(cudaq_rt_bridge_launch), polling_lanes, 0}, options);
  };
  CHECK(for_launch(64, "").empty());
  CHECK(for_launch(64, "warps=2").empty());
  CHECK(for_launch(0, "warps=4").empty()); // a custom kernel: the options say
  CHECK(for_launch(1, "warps=1").empty());
  CHECK(for_launch(64, "warps=4") == "warps=4 does not match the kernel, which serves with 2 "
                                     "warps (the warp dispatcher's blocks: --grid 2,32)");
  CHECK(for_launch(32, "warps=2") == "warps=2 does not match the kernel, which serves with 1 "
                                     "warp (the warp dispatcher's blocks: --grid 1,32)");
  CHECK(for_launch(1, "warps=2") ==
        "warps=2 does not match the kernel, which serves with one thread");
  auto laid_out = [](uint32_t polling_lanes, const char *config) {
    cudaq_rt::BridgeOptions options;
    REQUIRE(options.parse(config).empty());
    lay_out_for({sizeof(cudaq_rt_bridge_launch), polling_lanes, 0}, options, true);
    return options.text();
  };
  CHECK(laid_out(64, "slots=256") == "slots=256,layout=lanes,bulk=0,warps=2");
  CHECK(laid_out(256, "") == "layout=lanes,bulk=0,warps=8");
  CHECK(laid_out(32, "") == "layout=lanes,bulk=0"); // one warp: as before
}

TEST_CASE("feeders: a feeder's frames go to its lanes' slots, in the order those lanes serve") {
  // Lane l of the warp form serves slots l, l + 32, ..., its laps counted by its own passes
  // (loopback_device.cu, cudaq_dev_warp_enter_kernel and next_slot): the slot and lap of each of
  // a feeder's frames must be the next that lane expects, also after a jump (the running
  // position recomputed) and where the laps wrap.
  for (uint32_t n : {32u, 64u, 256u})
    for (uint32_t feeders : {2u, 4u, 32u}) {
      CAPTURE(n);
      CAPTURE(feeders);
      const uint32_t lanes = 32 / feeders;
      const uint32_t share = n / 32 * lanes;
      for (uint32_t f = 0; f < feeders; f += feeders - 1) { // the first feeder and the last
        CAPTURE(f);
        for (uint64_t start : {uint64_t(0), uint64_t(share) * (CUDAQ_RT_LOOPBACK_LAP_PERIOD - 2)}) {
          CAPTURE(start);
          // The lanes' own positions at frame `start`: lane f * lanes + i has served
          // ceil((start - i) / lanes) frames.
          Position lane[32];
          for (uint32_t i = 0; i < lanes; ++i) {
            const uint64_t served = start > i ? (start - i + lanes - 1) / lanes : 0;
            const uint32_t groups = n / 32;
            lane[i] = {uint32_t(f * lanes + i + 32 * (served % groups)),
                       uint32_t((served / groups) % CUDAQ_RT_LOOPBACK_LAP_PERIOD) + 1};
          }
          cudaq_rt_bridge::Position at{0, f * lanes, 1}; // a feeder's first (make_feeders)
          for (uint64_t k = start; k < start + 3 * share + 5; ++k) {
            const cudaq_rt_bridge::Position &p = position(at, k, n, f * lanes, lanes);
            Position &l = lane[(k - start + start % lanes) % lanes];
            CHECK(p.k == k);
            REQUIRE(p.slot == l.slot);
            REQUIRE(p.lap == l.lap);
            bool wrapped = false; // the lane's next: slot + 32, or its first at the next lap
            l.slot += 32;
            if (l.slot >= n) {
              l.slot -= n;
              wrapped = true;
            }
            if (wrapped)
              l.lap = cudaq_rt_loopback_next_lap(l.lap);
          }
        }
      }
    }
}

TEST_CASE("feeders: each sends and receives over its own slots, whatever the others do") {
  TestBridge t(64, 256, CUDAQ_RT_LOOPBACK_LAYOUT_LANES, 0);
  make_feeders(&t.b, 2);
  REQUIRE(feeder(&t.b, 0) == &t.b);
  REQUIRE(feeder(&t.b, 1) != nullptr);
  CHECK(feeder(&t.b, 2) == nullptr);
  cudaq_rt_bridge *second = feeder(&t.b, 1);
  // The lanes, each with its own position (the device's warp form).
  Position lane[32];
  for (uint32_t l = 0; l < 32; ++l)
    lane[l] = {l, 1};
  auto serve_lane = [&](uint32_t l) -> bool {
    Bytes staging(256);
    auto len = device_unpack(t, lane[l].slot, lane[l].lap, staging);
    if (!len)
      return false;
    staging.resize(*len);
    device_publish(t, lane[l].slot, lane[l].lap, staging); // an echo of the whole frame
    lane[l].slot += 32;
    if (lane[l].slot >= 64) {
      lane[l].slot -= 64;
      lane[l].lap = cudaq_rt_loopback_next_lap(lane[l].lap);
    }
    return true;
  };
  auto send_on = [&](cudaq_rt_bridge *b, const Bytes &f) {
    return send_request(b, f.data(), f.size());
  };
  // Feeder 1 alone, five laps of its 32 slots: served by lanes 16..31 only; feeder 0 sends none.
  uint32_t seed = 1;
  for (int round = 0; round < 5; ++round) {
    std::vector<Bytes> sent;
    for (uint32_t i = 0; i < 32; ++i) {
      sent.push_back(request(8 + i % 3 * 8, seed++));
      REQUIRE(send_on(second, sent.back()) == CUDAQ_RT_BRIDGE_OK);
    }
    // Its share is full: the 33rd waits, and feeder 0 still has all of its own.
    CHECK(send_on(second, request(8, 999)) == CUDAQ_RT_BRIDGE_AGAIN);
    for (uint32_t l = 0; l < 16; ++l)
      CHECK_FALSE(serve_lane(l));
    for (uint32_t pass = 0; pass < 2; ++pass)
      for (uint32_t l = 16; l < 32; ++l)
        REQUIRE(serve_lane(l));
    for (const Bytes &f : sent) {
      Bytes buffer(256);
      size_t size = 0;
      REQUIRE(receive_response(second, buffer.data(), buffer.size(), &size) == CUDAQ_RT_BRIDGE_OK);
      buffer.resize(size);
      CHECK(buffer == f);
    }
  }
  // Now feeder 0 too, interleaved with feeder 1 at another pace: both get their own answers, in
  // their own order.
  std::vector<Bytes> first_sent, second_sent;
  for (uint32_t i = 0; i < 30; ++i) {
    first_sent.push_back(request(16, seed++));
    REQUIRE(send_on(&t.b, first_sent.back()) == CUDAQ_RT_BRIDGE_OK);
    if (i % 3 == 0) {
      second_sent.push_back(request(24, seed++));
      REQUIRE(send_on(second, second_sent.back()) == CUDAQ_RT_BRIDGE_OK);
    }
  }
  for (uint32_t pass = 0; pass < 2; ++pass)
    for (uint32_t l = 0; l < 32; ++l)
      serve_lane(l);
  for (auto [b, frames] : {std::pair{&t.b, &first_sent}, std::pair{second, &second_sent}})
    for (const Bytes &f : *frames) {
      Bytes buffer(256);
      size_t size = 0;
      REQUIRE(receive_response(b, buffer.data(), buffer.size(), &size) == CUDAQ_RT_BRIDGE_OK);
      buffer.resize(size);
      CHECK(buffer == f);
    }
  size_t size = 0;
  Bytes buffer(256);
  CHECK(receive_response(&t.b, buffer.data(), buffer.size(), &size) == CUDAQ_RT_BRIDGE_AGAIN);
  CHECK(receive_response(second, buffer.data(), buffer.size(), &size) == CUDAQ_RT_BRIDGE_AGAIN);
}

TEST_CASE("feeders: how many, and only for a kernel whose lanes serve their own slots") {
  CHECK(check_feeders(1, 10).empty());
  CHECK(check_feeders(2, 64).empty());
  CHECK(check_feeders(32, 32).empty());
  CHECK(check_feeders(0, 64) == "feeders=0 must divide 32 (1, 2, 4, 8, 16 or 32)");
  CHECK(check_feeders(3, 64) == "feeders=3 must divide 32 (1, 2, 4, 8, 16 or 32)");
  CHECK(check_feeders(64, 64) == "feeders=64 must divide 32 (1, 2, 4, 8, 16 or 32)");
  CHECK(check_feeders(2, 48) == "feeders=2 needs a multiple of 32 slots, not slots=48");
  auto refused = [](uint32_t polling_lanes, const char *config) {
    cudaq_rt::BridgeOptions options;
    REQUIRE(options.parse(config).empty());
    return check_feeders_for({sizeof(cudaq_rt_bridge_launch), polling_lanes, 0}, options);
  };
  CHECK(refused(32, "feeders=2").empty());
  CHECK(refused(0, "feeders=2").empty()); // a custom kernel: its author's choice
  CHECK(refused(1, "feeders=1").empty());
  CHECK(refused(1, "slots=64").empty());
  CHECK(refused(1, "feeders=2") ==
        "feeders=2 needs a kernel whose 32 lanes serve their own slots (the warp dispatcher); "
        "this one serves every slot in order from one thread");
}

TEST_CASE("feeders: each view is one feeder of the ring, holding no other") {
  for (uint32_t feeders : {2u, 4u, 32u}) {
    CAPTURE(feeders);
    TestBridge t(64, 256, CUDAQ_RT_LOOPBACK_LAYOUT_LANES, 0);
    make_feeders(&t.b, feeders);
    const uint32_t lanes = 32 / feeders;
    CHECK(t.b.first_lane == 0);
    CHECK(t.b.feeder_lanes == lanes);
    CHECK(feeder(&t.b, feeders) == nullptr);
    for (uint32_t f = 1; f < feeders; ++f) {
      const cudaq_rt_bridge *view = feeder(&t.b, f);
      REQUIRE(view != nullptr);
      CHECK(view->first_lane == f * lanes);
      CHECK(view->feeder_lanes == lanes);
      CHECK(view->send_at.slot == f * lanes);
      CHECK(view->more_feeders.empty()); // a view copies the ring's pointers, not the other views
      CHECK(view->request_heads == t.b.request_heads);
    }
  }
}

TEST_CASE("the warp form's lone turn leaves every lane at its first request after the turn's") {
  // Request k is in slot k % n of lap cudaq_rt_loopback_lap(k, n) and is lane k % 32's. After the
  // turn stops at request k, lane l's next is the first k' >= k with k' % 32 == l, across the
  // ring's end and the laps' wrap; and exactly the lane of k then comes first (warp_first), as
  // the narrow probe the turn leaves assumes.
  for (uint32_t n : {32u, 64u, 256u}) {
    CAPTURE(n);
    for (uint64_t k = 0; k < 3u * n + 40u; ++k) {
      CAPTURE(k);
      const uint32_t next = uint32_t(k % n), lap = cudaq_rt_loopback_lap(k, n);
      uint32_t slot[32], laps[32];
      for (uint32_t l = 0; l < 32; ++l) {
        uint64_t want = k;
        while (want % 32 != l)
          ++want;
        cudaq_rt_loopback_lane_from(next, lap, l, n, &slot[l], &laps[l]);
        CHECK(slot[l] == want % n);
        CHECK(laps[l] == cudaq_rt_loopback_lap(want, n));
      }
      uint32_t first = 32, count = 0;
      for (uint32_t l = 0; l < 32; ++l)
        if (cudaq_rt_loopback_warp_first(slot[l], laps[l], slot[(l + 31) % 32], laps[(l + 31) % 32],
                                         n, 1)) {
          first = l;
          ++count;
        }
      CHECK(count == 1u);
      CHECK(first == next % 32);
    }
  }
  // Across the laps' wrap (0xFFFFFFFF is followed by 1): the lanes before the turn's lane go on
  // into the next lap.
  uint32_t slot = 0, lap = 0;
  cudaq_rt_loopback_lane_from(5, 0xFFFFFFFFu, 3, 32, &slot, &lap);
  CHECK(slot == 3u);
  CHECK(lap == 1u);
  cudaq_rt_loopback_lane_from(5, 0xFFFFFFFFu, 7, 32, &slot, &lap);
  CHECK(slot == 7u);
  CHECK(lap == 0xFFFFFFFFu);
}

TEST_CASE("the lone form's peek: the nearest slot whose control cell is on another line") {
  // Lines are 128 bytes: cell index / LINE_CELLS. In the lanes layout the control cells of 8
  // slots side by side share a line; in the slots layout every cell has a line of its own.
  auto line_of = [](uint32_t layout, uint32_t slot, uint32_t c = 0) {
    return cudaq_rt_loopback_head_cell(layout, slot, c) / CUDAQ_RT_LOOPBACK_LINE_CELLS;
  };
  for (uint32_t n : {32u, 64u, 256u})
    for (uint32_t layout : {CUDAQ_RT_LOOPBACK_LAYOUT_SLOTS, CUDAQ_RT_LOOPBACK_LAYOUT_LANES})
      for (uint32_t slot = 0; slot < n; ++slot) {
        CAPTURE(n);
        CAPTURE(layout);
        CAPTURE(slot);
        const uint32_t d = cudaq_rt_loopback_peek_distance(layout, slot);
        REQUIRE(d >= 1u);
        REQUIRE(d <= CUDAQ_RT_LOOPBACK_LINE_CELLS);
        // Not on the probed slot's line, nor on any of its 5 head cells' lines...
        const uint32_t peek = (slot + d) % n;
        for (uint32_t c = 0; c < CUDAQ_RT_LOOPBACK_HEAD_CELLS; ++c)
          CHECK(line_of(layout, peek) != line_of(layout, slot, c));
        // ...and every slot before it is on the probed slot's line: the nearest such slot.
        for (uint32_t k = 1; k < d; ++k)
          CHECK(line_of(layout, (slot + k) % n) == line_of(layout, slot));
        if (layout == CUDAQ_RT_LOOPBACK_LAYOUT_SLOTS)
          CHECK(d == 1u);
      }
}
