#include "load/wire_frames.h"

#include "cudaq_rt/wire.h"

#include <doctest/doctest.h>

#include <algorithm>

#include <cstring>

using namespace cudaq_rt;

namespace {

using Bytes = std::vector<uint8_t>;

template <class T> void put(Bytes &b, size_t at, T v) {
  std::memcpy(b.data() + at, &v, sizeof v);
}

template <class T> T get(const Bytes &b, size_t at) {
  T v;
  std::memcpy(&v, b.data() + at, sizeof v);
  return v;
}

// A response laid out field by field, as wire.h states it.
Bytes response(uint32_t magic, int32_t status, uint32_t result_len, const Bytes &result,
               uint32_t request_id = 7, uint64_t timestamp = 0x1122334455667788) {
  Bytes b(24);
  put(b, 0, magic);
  put(b, 4, status);
  put(b, 8, result_len);
  put(b, 12, request_id);
  put(b, 16, timestamp);
  b.resize(24 + result.size());
  std::copy(result.begin(), result.end(), b.begin() + 24);
  return b;
}

} // namespace

TEST_CASE("a request frame: header fields at their offsets, then the payload") {
  const Bytes payload = {1, 2, 3};
  Expected<Bytes> frame = build_request_frame("echo", payload, 0xabcdef01, 0x0102030405060708);
  REQUIRE(frame);
  REQUIRE(frame->size() == 27);
  CHECK(get<uint32_t>(*frame, 0) == 0x43555152u);
  CHECK(Bytes(frame->begin(), frame->begin() + 4) == Bytes{'R', 'Q', 'U', 'C'});
  // FNV-1a of "echo", computed by hand from the offset basis and prime.
  uint32_t h = 2166136261u;
  for (char c : std::string("echo"))
    h = (h ^ uint8_t(c)) * 16777619u;
  CHECK(get<uint32_t>(*frame, 4) == h);
  CHECK(get<uint32_t>(*frame, 8) == 3);
  CHECK(get<uint32_t>(*frame, 12) == 0xabcdef01);
  CHECK(get<uint64_t>(*frame, 16) == 0x0102030405060708);
  CHECK(Bytes(frame->begin() + 24, frame->end()) == payload);

  Expected<Bytes> empty = build_request_frame("ok", {}, 0, 0);
  REQUIRE(empty);
  CHECK(empty->size() == 24);
  CHECK(get<uint32_t>(*empty, 4) == cudaq_rt_function_id("ok"));
  CHECK(get<uint32_t>(*empty, 8) == 0);
}

TEST_CASE("a response frame is read field by field") {
  Expected<Response> r = parse_response_frame(response(0x43555153u, 0, 3, {9, 8, 7}));
  REQUIRE(r);
  CHECK(r->status == 0);
  CHECK(r->request_id == 7);
  CHECK(r->ptp_timestamp == 0x1122334455667788);
  CHECK(r->result == Bytes{9, 8, 7});

  r = parse_response_frame(response(0x43555153u, 42, 1, {5}));
  REQUIRE(r);
  CHECK(r->status == 42);
  CHECK(r->result == Bytes{5});

  r = parse_response_frame(response(0x43555153u, -4, 0, {}));
  REQUIRE(r);
  CHECK(r->status == -4);
  CHECK(r->result.empty());
}

TEST_CASE("a whole slot: bytes past result_len are not part of the result") {
  Bytes slot = response(0x43555153u, 0, 2, {1, 2});
  slot.resize(64, 0xee);
  Expected<Response> r = parse_response_frame(slot);
  REQUIRE(r);
  CHECK(r->result == Bytes{1, 2});
}

TEST_CASE("malformed responses are errors") {
  Expected<Response> r = parse_response_frame(Bytes(23, 0));
  REQUIRE_FALSE(r);
  CHECK(r.error().str() == "response of 23 bytes is shorter than its 24-byte header");

  r = parse_response_frame(response(0x43555152u, 0, 0, {}));
  REQUIRE_FALSE(r);
  CHECK(r.error().str() == "response has magic 0x43555152, not 0x43555153 ('CUQS')");

  r = parse_response_frame(response(0x43555153u, 0, 4, {1, 2, 3}));
  REQUIRE_FALSE(r);
  CHECK(r.error().str() == "response claims 4 result bytes but 3 follow its header");

  r = parse_response_frame(response(0x43555153u, 0, 0xffffffffu, {}));
  REQUIRE_FALSE(r);
  CHECK(r.error().str() == "response claims 4294967295 result bytes but 0 follow its header");

  r = parse_response_frame(response(0x43555153u, -2, 1, {1}));
  REQUIRE_FALSE(r);
  CHECK(r.error().str() ==
        "response has protocol status -2 (payload too large) and 1 result bytes; protocol errors "
        "carry none");
}

TEST_CASE("cudaq-rt-run's exit statuses: per response, and the worst of several") {
  CHECK(run_exit_status(0) == 0);
  CHECK(run_exit_status(1) == 3);
  CHECK(run_exit_status(250) == 3);
  CHECK(run_exit_status(CUDAQ_RT_STATUS_UNKNOWN_FUNCTION) == 4);
  CHECK(run_exit_status(CUDAQ_RT_STATUS_TRUNCATED) == 4);
  // Worst first: failure 1, usage 2, protocol error 4, handler error 3, ok 0.
  const int order[] = {1, 2, 4, 3, 0};
  for (int i = 0; i < 5; ++i)
    for (int j = 0; j < 5; ++j) {
      CAPTURE(order[i]);
      CAPTURE(order[j]);
      CHECK(worse_run_exit_status(order[i], order[j]) == order[std::min(i, j)]);
    }
}

TEST_CASE("status names") {
  CHECK(std::string(wire_status_name(0)) == "ok");
  CHECK(std::string(wire_status_name(-1)) == "unknown function or bad magic");
  CHECK(std::string(wire_status_name(-2)) == "payload too large");
  CHECK(std::string(wire_status_name(-3)) == "result too large");
  CHECK(std::string(wire_status_name(-4)) == "truncated");
  CHECK(std::string(wire_status_name(-5)) == "handler fault");
  CHECK(std::string(wire_status_name(1)) == "handler error");
  CHECK(std::string(wire_status_name(0x7fffffff)) == "handler error");
  CHECK(std::string(wire_status_name(-6)) == "bad length");
  CHECK(std::string(wire_status_name(-7)) == "unknown protocol error");
  CHECK(std::string(wire_status_name(INT32_MIN)) == "unknown protocol error");
}

TEST_CASE("the magics on the wire, byte by byte: 'RQUC' and 'SQUC' (CUQR, CUQS little-endian)") {
  // CUDA-Q's contract: u32 0x43555152 and 0x43555153, little-endian. A byte-swapped constant
  // would still round-trip through our own encoder and decoder; only the bytes tell.
  CHECK(CUDAQ_RT_REQUEST_MAGIC == 0x43555152u);
  CHECK(CUDAQ_RT_RESPONSE_MAGIC == 0x43555153u);
  const uint8_t payload[1] = {7};
  Expected<Bytes> frame = build_request_frame("echo", payload, 1, 2);
  REQUIRE(frame);
  CHECK(Bytes(frame->begin(), frame->begin() + 4) == Bytes{0x52, 0x51, 0x55, 0x43});
  // And a response whose first bytes are 'S','Q','U','C' is one.
  Bytes response(24, 0);
  const uint8_t magic[4] = {0x53, 0x51, 0x55, 0x43};
  std::memcpy(response.data(), magic, 4);
  auto r = parse_response_frame(response);
  CHECK_MESSAGE(r, (r ? "" : r.error().str()));
}
