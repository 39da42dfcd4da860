// call() and bench() through a Server on a fake GPU (fake_gpu.h) whose bridge answers by itself
// (echo_bridge.c, configured per test to echo, to answer with a status, someone else's
// request_id, a flipped byte or a bad header, or never): the reply's fields and latency, what a
// wrong answer counts as, and that a wait ends at the timeout or at once when the kernel fails.
// The package is the example app with the loopback bridge's hooks packed as bridge `echo`; it is
// linked at load once (nvJitLink, per TU) and taken from the package after that.
#include "load/client.h"

#include <doctest/doctest.h>

#include "fake_gpu.h"
#include "package_fixture.h"
#include "scratch_dir.h"

#include <chrono>
#include <cstdlib>
#include <numeric>

namespace fs = std::filesystem;
using namespace cudaq_rt;
using package_fixture::example_options;
using package_fixture::packed;

namespace {

using Clock = std::chrono::steady_clock;

struct Fixture {
  ScratchDir dir{"cudaq_rt_test_client"};
  fs::path package;

  Fixture() {
    ::setenv("CUDAQ_RT_BRIDGE_PATH", CUDAQ_RT_TEST_ECHO_BRIDGE_DIR, 1);
    package = packed(example_options(dir.path, "echo"));
    // Linked once, into the package: every later start takes that cubin.
    FakeGpu gpu;
    LoadOptions first = options("");
    first.policy.store = true;
    auto s = Server::start(first, gpu);
    REQUIRE_MESSAGE(s, (s ? "" : s.error().str()));
  }

  LoadOptions options(const std::string &bridge_config) const {
    LoadOptions o;
    o.package = package;
    o.bridge_config = bridge_config;
    o.cache = {.dir = {}, .remote = "", .disable = true};
    o.stop_timeout_s = 0.2;
    return o;
  }

  std::unique_ptr<Server> start(const std::string &bridge_config, FakeGpu &gpu) const {
    auto s = Server::start(options(bridge_config), gpu);
    REQUIRE_MESSAGE(s, (s ? "" : s.error().str()));
    REQUIRE((*s)->report().bridge == "echo");
    REQUIRE((*s)->report().source == CubinSource::package);
    return std::move(*s);
  }
};

Fixture &fixture() {
  static Fixture f;
  return f;
}

std::vector<uint8_t> request(const std::string &handler, std::vector<uint8_t> payload, uint32_t id,
                             uint64_t timestamp = 0) {
  auto frame = build_request_frame(handler, payload, id, timestamp);
  REQUIRE(frame);
  return *frame;
}

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

std::string error_of(const Expected<Reply> &r) {
  return r ? std::string("(answered)") : r.error().str();
}

} // namespace

TEST_CASE("a call returns its request's response: status, request_id, timestamp, result") {
  FakeGpu gpu;
  auto s = fixture().start("", gpu);
  const std::vector<uint8_t> payload{1, 2, 3, 4, 5};
  auto reply = call(*s, request("echo", payload, 42, 0x1122334455667788), 1.0);
  REQUIRE_MESSAGE(reply, error_of(reply));
  CHECK(reply->response.status == 0);
  CHECK(reply->response.request_id == 42);
  CHECK(reply->response.ptp_timestamp == 0x1122334455667788);
  CHECK(reply->response.result == payload);
  CHECK(reply->latency_us > 0);
  CHECK(reply->latency_us < 1e6);

  // Calls one after another each get their own answer.
  for (uint32_t id = 1; id <= 10; ++id) {
    auto r = call(*s, request("echo", {uint8_t(id)}, id), 1.0);
    REQUIRE_MESSAGE(r, error_of(r));
    CHECK(r->response.request_id == id);
    CHECK(r->response.result == std::vector<uint8_t>{uint8_t(id)});
  }
}

TEST_CASE("a handler's error status is an answer, a response that is none is an error") {
  FakeGpu gpu;
  auto failing = fixture().start("status=3", gpu);
  auto reply = call(*failing, request("parity", {7}, 5), 1.0);
  REQUIRE_MESSAGE(reply, error_of(reply));
  CHECK(reply->response.status == 3);
  CHECK(reply->response.request_id == 5);
  failing.reset();

  auto garbled = fixture().start("bad_magic", gpu);
  CHECK(error_of(call(*garbled, request("echo", {}, 6), 1.0)) ==
        "response has magic 0x12345678, not 0x43555153 ('CUQS')");
}

TEST_CASE("a call gives up at its timeout: no response, or no free slot") {
  FakeGpu gpu;
  auto s = fixture().start("silent", gpu);
  const std::string subject = "'" + fixture().package.string() + "': sm_90: ";
  auto t0 = Clock::now();
  CHECK(error_of(call(*s, request("echo", {}, 1), 0.2)) == subject + "no response within 0.2 s");
  double waited = seconds_since(t0);
  CHECK(waited >= 0.2);
  CHECK(waited < 2.0);

  // The bridge holds 4 requests in flight (that one, and 3 more): the fifth finds no slot.
  for (uint32_t id = 2; id <= 4; ++id) {
    auto sent = s->send(request("echo", {}, id));
    REQUIRE(sent);
    REQUIRE(*sent);
  }
  t0 = Clock::now();
  CHECK(error_of(call(*s, request("echo", {}, 5), 0.2)) ==
        subject + "no free slot in the bridge within 0.2 s");
  waited = seconds_since(t0);
  CHECK(waited >= 0.2);
  CHECK(waited < 2.0);
}

TEST_CASE("a kernel that fails while a call waits ends the wait at once, naming the request") {
  FakeGpu gpu;
  auto s = fixture().start("silent", gpu);
  gpu.faults = true;
  const auto t0 = Clock::now();
  auto reply = call(*s, request("echo", {1}, 77), 30.0);
  CHECK(seconds_since(t0) < 5.0);
  CHECK(error_of(reply) == "'" + fixture().package.string() +
                               "': sm_90: the dispatch kernel cudaq_rt_unified_dispatch failed: "
                               "CUDA_ERROR_ILLEGAL_ADDRESS (an illegal memory access was "
                               "encountered), serving request_id 77 (handler 'echo')");
}

TEST_CASE("bench: every request answered, measured after the warmup") {
  FakeGpu gpu;
  auto s = fixture().start("", gpu);
  std::vector<uint8_t> payload(16);
  std::iota(payload.begin(), payload.end(), uint8_t(1));
  BenchOptions o;
  o.requests = 200;
  o.warmup = 20;
  o.inflight = 3;
  o.timeout_s = 2;
  o.expect_echo = true;
  auto r = bench(*s, "echo", payload, o);
  REQUIRE_MESSAGE(r, (r ? "" : r.error().str()));
  CHECK(r->requests == 200);
  CHECK(r->wrong == 0);
  CHECK(r->latency.count == 200);
  CHECK(r->latency.min_us > 0);
  CHECK(r->latency.min_us <= r->latency.p50_us);
  CHECK(r->latency.p50_us <= r->latency.max_us);
  CHECK(r->seconds > 0);
  CHECK(r->requests_per_s == doctest::Approx(200 / r->seconds));

  // More in flight than the bridge has slots: as many as it has.
  o.inflight = 64;
  r = bench(*s, "echo", payload, o);
  REQUIRE_MESSAGE(r, (r ? "" : r.error().str()));
  CHECK(r->wrong == 0);
  CHECK(r->latency.count == 200);
}

TEST_CASE("bench counts wrong answers: a status, another request's id, an echo that differs") {
  FakeGpu gpu;
  const std::vector<uint8_t> payload{9, 8, 7, 6, 5, 4, 3, 2};
  BenchOptions o;
  o.requests = 50;
  o.warmup = 5;
  o.inflight = 2;
  o.timeout_s = 2;
  // Wrong answers during the warmup count too: every one of the 55 here.
  for (const char *config : {"status=3", "wrong_id"}) {
    CAPTURE(config);
    auto s = fixture().start(config, gpu);
    auto r = bench(*s, "echo", payload, o);
    REQUIRE_MESSAGE(r, (r ? "" : r.error().str()));
    CHECK(r->requests == 50);
    CHECK(r->wrong == 55);
    CHECK(r->latency.count == 50);
  }
  // A flipped byte is wrong only to a bench that expects an echo.
  auto s = fixture().start("corrupt", gpu);
  auto r = bench(*s, "echo", payload, o);
  REQUIRE(r);
  CHECK(r->wrong == 0);
  o.expect_echo = true;
  r = bench(*s, "echo", payload, o);
  REQUIRE(r);
  CHECK(r->wrong == 55);
}

TEST_CASE("bench gives up at the timeout when nothing answers") {
  FakeGpu gpu;
  auto s = fixture().start("silent", gpu);
  BenchOptions o;
  o.requests = 10;
  o.warmup = 0;
  o.timeout_s = 0.2;
  const auto t0 = Clock::now();
  auto r = bench(*s, "echo", std::vector<uint8_t>{1}, o);
  REQUIRE_FALSE(r);
  CHECK(r.error().str() == "'" + fixture().package.string() + "': sm_90: no response within 0.2 s");
  CHECK(seconds_since(t0) < 2.0);
}
