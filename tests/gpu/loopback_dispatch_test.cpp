// End-to-end test of the device side through the runtime's load path (runtime/src/load/server.h):
// the unified dispatch kernel (embedded in the runtime), the loopback bridge's hooks and the
// example application's handlers, linked into one module by cudaq-rt-link, loaded, launched as a
// persistent kernel and driven through the loopback ring. Checks every example handler, the
// protocol errors (and that the server keeps serving after them), the counters, then measures
// round-trip latency and throughput; then that requests sent just before shutdown are all answered,
// and that a second kernel launched on the same bridge instance goes on where the first stopped
// (answers and counters).
//
//   loopback_dispatch_test [--bridge NAME|PATH] --package DIR [--latency-requests N]
//                          [--dispatcher builtin|warp] [--slots N] [--layout slots|lanes]
//                          [--many N] [--bridge-arg KEY=VALUE]... [--only-many] [--grid B,T]
//
// --dispatcher warp runs every check against the warp dispatcher instead of the unified one;
// --grid launches it as B blocks of T threads (the warp dispatcher: B serving warps, each with its
// own share of the ring, the loopback ring's warps=B);
// --layout gives the loopback ring that layout (loopback_ring.h) instead of the load path's
// choice for the dispatcher;
// --many N also sends N echoes through the batched send and receive with the ring kept full,
// each checked by request_id and payload, from one host thread per feeder of the bridge (the
// loopback bridge's feeders=N); --only-many sends only those (the other checks drive feeder 0).
//
// The package must hold a cubin for this GPU (the load path runs with linking at load off, so the
// test loads what cudaq-rt-link stored). Without a GPU the test exits 77 (ctest: skipped).
//
// With the loopback bridge, the test also writes frames that send() refuses straight into the
// ring (loopback_host.h's write_request(): send() without its checks), to see what the device
// side answers to them.
#include "command/run_command.h"
#include "cudaq_rt/wire.h"
#include "load/client.h"
#include "load/server.h"
#include "loopback_host.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;
using Bytes = std::vector<uint8_t>;

const char *const kHandlers[] = {"sum_i32", "axpy_f32", "parity", "echo"};

[[noreturn]] void fail(const std::string &message) {
  std::fprintf(stderr, "loopback_dispatch_test: error: %s\n", message.c_str());
  std::exit(1);
}

Bytes request(uint32_t function_id, const void *payload, uint32_t len, uint32_t request_id,
              uint32_t magic = CUDAQ_RT_REQUEST_MAGIC, uint32_t claimed_len = UINT32_MAX) {
  cudaq_rt_request_header h{magic, function_id, claimed_len == UINT32_MAX ? len : claimed_len,
                            request_id, 0x1122334455667788ull + request_id};
  Bytes frame(sizeof h + len);
  std::memcpy(frame.data(), &h, sizeof h);
  if (len)
    std::memcpy(frame.data() + sizeof h, payload, len);
  return frame;
}

struct Client {
  cudaq_rt::Server &server;
  Bytes buffer;

  void send(const Bytes &frame) {
    for (;;) {
      auto sent = server.send(frame);
      if (!sent)
        fail(sent.error().str());
      if (*sent)
        return;
    }
  }

  // The next response; fails if the kernel died or nothing came for 10 s.
  Bytes receive() {
    const auto deadline = Clock::now() + std::chrono::seconds(10);
    for (uint64_t polls = 0;; ++polls) {
      auto got = server.receive(buffer);
      if (!got)
        fail(got.error().str());
      if (*got)
        return Bytes(buffer.begin(), buffer.begin() + long(**got));
      if ((polls & 0xfff) == 0) {
        if (auto st = server.check(); !st)
          fail(st.error().str());
        if (Clock::now() > deadline)
          fail("no response within 10 s");
      }
    }
  }

  Bytes call(const Bytes &frame) {
    send(frame);
    return receive();
  }
};

int failures = 0;

void expect(bool ok, const std::string &what) {
  if (!ok) {
    ++failures;
    std::fprintf(stderr, "FAILED: %s\n", what.c_str());
  }
}

// The run's last line and exit status.
int verdict() {
  if (failures) {
    std::printf("%d check(s) failed\n", failures);
    return 1;
  }
  std::printf("all checks passed\n");
  return 0;
}

cudaq_rt_response_header header_of(const Bytes &r) {
  cudaq_rt_response_header h{};
  if (r.size() >= sizeof h)
    std::memcpy(&h, r.data(), sizeof h);
  return h;
}

void expect_response(const Bytes &r, int32_t status, uint32_t request_id, const Bytes &result,
                     const std::string &what) {
  auto h = header_of(r);
  expect(r.size() == sizeof h + h.result_len, what + ": frame size matches result_len");
  expect(h.magic == CUDAQ_RT_RESPONSE_MAGIC, what + ": response magic");
  expect(h.status == status,
         what + ": status " + std::to_string(h.status) + ", expected " + std::to_string(status));
  expect(h.request_id == request_id, what + ": request_id echoed");
  expect(h.ptp_timestamp == 0x1122334455667788ull + request_id, what + ": timestamp echoed");
  expect(Bytes(r.begin() + sizeof h, r.end()) == result, what + ": result bytes");
}

template <class T> Bytes bytes_of(const std::vector<T> &v) {
  Bytes b(v.size() * sizeof(T));
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

double percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return v[size_t(p * double(v.size() - 1))];
}

// What the command line asks for.
struct TestOptions {
  cudaq_rt::LoadOptions load;
  int latency_requests = 20000;
  uint64_t many = 0;
  uint64_t mixed = 0;        // echoes of mixed sizes, 8 bytes to the slot's payload
  bool only_mixed = false;   // nothing but the mixed echoes (a kernel that serves pairs only)
  bool only_many = false;    // nothing but the batched echoes (a ring fed by several threads)
  bool expect_spare = false; // the kernel must have been given the ring's spare frame
};

[[noreturn]] void usage_error(const std::string &message) {
  std::fprintf(stderr, "loopback_dispatch_test: error: %s\n", message.c_str());
  std::exit(2);
}

TestOptions parse_options(int argc, char **argv) {
  TestOptions options;
  options.load.link.bridge = "loopback";
  options.load.policy.allow_link = false;
  std::string layout, slots = "64", slot_size = "1024", bulk;
  std::vector<std::string> bridge_args;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc)
        usage_error(a + " needs a value");
      return argv[++i];
    };
    if (a == "--bridge")
      options.load.link.bridge = value();
    else if (a == "--package")
      options.load.package = value();
    else if (a == "--latency-requests")
      options.latency_requests = std::stoi(value());
    else if (a == "--dispatcher")
      options.load.link.dispatcher = value();
    else if (a == "--grid") { // as cudaq-rt-run's
      auto shape = cudaq_rt::parse_grid(value());
      if (!shape)
        usage_error(shape.error().str());
      options.load.shape = *shape;
    } else if (a == "--slots")
      slots = value();
    else if (a == "--slot-size")
      slot_size = value();
    else if (a == "--bulk") // the ring's bulk= option (loopback_ring.h): 0, every frame as cells
      bulk = value();
    else if (a == "--many")
      options.many = std::stoull(value());
    else if (a == "--mixed")
      options.mixed = std::stoull(value());
    else if (a == "--layout")
      layout = value();
    else if (a == "--bridge-arg") // KEY=VALUE added to the bridge's configuration
      bridge_args.push_back(value());
    else if (a == "--link-at-load") // a package without this kernel's link: link it (cached)
      options.load.policy.allow_link = true;
    else if (a == "--only-mixed")
      options.only_mixed = true;
    else if (a == "--only-many") // a ring with feeders=N: the other checks drive one feeder
      options.only_many = true;
    else if (a == "--expect-spare") // launched with a slot of dynamic shared memory for the hooks
      options.expect_spare = true;
    else
      usage_error("unknown argument '" + a + "'");
  }
  if (options.load.package.empty())
    usage_error("give --package");
  std::vector<std::string> config = {"slots=" + slots + ",slot_size=" + slot_size};
  if (!bulk.empty())
    config.push_back("bulk=" + bulk);
  if (!layout.empty())
    config.push_back("layout=" + layout);
  config.insert(config.end(), bridge_args.begin(), bridge_args.end());
  if (options.only_many && options.many == 0)
    usage_error("--only-many needs --many");
  if (options.only_mixed && (options.mixed == 0 || options.mixed % 2 != 0))
    usage_error("--only-mixed needs an even --mixed count (the kernel may serve in pairs)");
  for (const std::string &item : config)
    options.load.bridge_config += (options.load.bridge_config.empty() ? "" : ",") + item;
  return options;
}

struct Counters {
  uint64_t requests = 0, ok = 0, handler_errors = 0, protocol_errors = 0;
};

// The loaded server under test, the next request_id, and what its counters should read.
struct Session {
  cudaq_rt::Server &loaded;
  cudaq_rt::Bridge &bridge;
  const uint32_t slot_size;
  // Built from this tree: its instance can be looked into.
  const bool loopback;
  Client client;
  uint32_t id = 1;
  Counters expected;

  explicit Session(cudaq_rt::Server &server)
      : loaded(server), bridge(server.bridge()), slot_size(bridge.slot_size()),
        loopback(server.report().bridge == "loopback"), client{server, Bytes(slot_size)} {}

  Bytes call(const Bytes &frame) {
    ++expected.requests;
    return client.call(frame);
  }

  void stop() {
    if (auto st = loaded.stop(); !st)
      fail(st.error().str());
  }
};

void print_load(Session &s) {
  const cudaq_rt::LoadReport &report = s.loaded.report();
  std::printf("device: %s (%s)\ncubin: %s from the %s (%llu B, %s)\n", report.device.name.c_str(),
              report.device.arch().c_str(), report.record.arch.str().c_str(),
              cudaq_rt::cubin_source_name(report.source),
              (unsigned long long)report.record.cubin_size, report.record.cubin.str().c_str());
  if (s.loopback)
    std::printf("ring: %u slots, %s layout\n", s.bridge.num_slots(),
                s.bridge.get()->layout == CUDAQ_RT_LOOPBACK_LAYOUT_LANES ? "lanes" : "slots");
  std::printf("kernel: %s, %u x %u threads, %u bytes of dynamic shared memory\n",
              report.kernel.c_str(), report.shape.blocks, report.shape.threads,
              report.shape.shared_bytes);
}

void check_sum_i32(Session &s) {
  std::vector<int32_t> v = {1, 2, 3, -10, 1000000};
  uint32_t rid = s.id++;
  auto r = s.call(request(cudaq_rt_function_id("sum_i32"), v.data(), 20, rid));
  expect_response(r, 0, rid, bytes_of(std::vector<int64_t>{999996}), "sum_i32");
  ++s.expected.ok;
}

// 2 * x + y
void check_axpy_f32(Session &s) {
  std::vector<float> in = {2.0f, 1.0f, 2.0f, 3.0f, 10.0f, 20.0f, 30.0f};
  uint32_t rid = s.id++;
  auto r = s.call(request(cudaq_rt_function_id("axpy_f32"), in.data(), 28, rid));
  expect_response(r, 0, rid, bytes_of(std::vector<float>{12.0f, 24.0f, 36.0f}), "axpy_f32");
  ++s.expected.ok;
}

// What parity answers: each byte's parity, then the total of set bits (4 bytes).
Bytes parity_of(const Bytes &in) {
  Bytes want(in.size() + 4);
  uint32_t total = 0;
  for (size_t i = 0; i < in.size(); ++i) {
    want[i] = uint8_t(__builtin_popcount(in[i]) & 1);
    total += uint32_t(__builtin_popcount(in[i]));
  }
  std::memcpy(want.data() + in.size(), &total, 4);
  return want;
}

// With a payload long enough to need several fetch batches.
void check_parity(Session &s) {
  Bytes in(300);
  for (size_t i = 0; i < in.size(); ++i)
    in[i] = uint8_t(i * 37 + 11);
  uint32_t rid = s.id++;
  auto r = s.call(request(cudaq_rt_function_id("parity"), in.data(), uint32_t(in.size()), rid));
  expect_response(r, 0, rid, parity_of(in), "parity");
  ++s.expected.ok;
}

// At every payload size up to the slot's limit in a few steps.
void check_echo_sizes(Session &s) {
  for (uint32_t len : {0u, 1u, 7u, 8u, 9u, 100u, s.slot_size - 24}) {
    Bytes in(len);
    for (uint32_t i = 0; i < len; ++i)
      in[i] = uint8_t(i ^ 0x5a);
    uint32_t rid = s.id++;
    auto r = s.call(request(cudaq_rt_function_id("echo"), in.data(), len, rid));
    expect_response(r, 0, rid, in, "echo " + std::to_string(len) + " bytes");
    ++s.expected.ok;
  }
}

// Small requests one at a time, then a small request whose answer is longer than 8 bytes (parity
// of 8 bytes: 12), then small ones again: a client that waits for each answer is served by the
// lone form (cudaq_rt/dispatch.h) once a few came alone, which publishes an answer past 8 bytes
// through tx_publish instead (the warp form from the lane that holds it).
void check_small_requests_long_answers(Session &s) {
  for (int round = 0; round < 3; ++round) {
    for (uint32_t k = 0; k < 8; ++k) {
      const uint64_t word = 0x0123456789abcdefull * (k + 1) + uint64_t(round);
      Bytes in(8);
      std::memcpy(in.data(), &word, 8);
      uint32_t rid = s.id++;
      auto r = s.call(request(cudaq_rt_function_id("echo"), in.data(), 8, rid));
      expect_response(r, 0, rid, in, "lone echo of 8 bytes");
      ++s.expected.ok;
    }
    Bytes in(8);
    for (uint32_t i = 0; i < 8; ++i)
      in[i] = uint8_t(i * 29 + 3 + round);
    uint32_t rid = s.id++;
    auto r = s.call(request(cudaq_rt_function_id("parity"), in.data(), 8, rid));
    expect_response(r, 0, rid, parity_of(in),
                    "parity of 8 bytes after lone echoes (a 12-byte answer)");
    ++s.expected.ok;
  }
}

// A handler-defined error: sum_i32 wants a multiple of 4 bytes.
void check_handler_error(Session &s) {
  uint32_t rid = s.id++;
  uint8_t three[3] = {1, 2, 3};
  auto r = s.call(request(cudaq_rt_function_id("sum_i32"), three, 3, rid));
  expect_response(r, 1, rid, {}, "sum_i32 with 3 bytes");
  ++s.expected.handler_errors;
}

// Protocol errors, each followed by a good request.
void check_protocol_errors(Session &s) {
  uint32_t rid = s.id++;
  auto r = s.call(request(cudaq_rt_function_id("echo"), "ab", 2, rid, 0xdeadbeefu));
  expect_response(r, CUDAQ_RT_STATUS_BAD_MAGIC, rid, {}, "bad magic");
  rid = s.id++;
  r = s.call(request(cudaq_rt_function_id("no_such_handler"), "ab", 2, rid));
  expect_response(r, CUDAQ_RT_STATUS_UNKNOWN_FUNCTION, rid, {}, "unknown function");
  s.expected.protocol_errors += 2;
  rid = s.id++;
  r = s.call(request(cudaq_rt_function_id("echo"), "still here", 10, rid));
  expect_response(r, 0, rid, Bytes{'s', 't', 'i', 'l', 'l', ' ', 'h', 'e', 'r', 'e'},
                  "echo after protocol errors");
  ++s.expected.ok;
}

// A frame that is not whole (arg_len != size - 24): send() refuses it, whichever way it is off
// (bridge.h), and queues nothing.
void check_send_refuses_partial_frames(Session &s) {
  for (uint32_t claimed : {100u, 1u, s.slot_size - 23}) {
    auto sent = s.loaded.send(
        request(cudaq_rt_function_id("echo"), "ab", 2, s.id, CUDAQ_RT_REQUEST_MAGIC, claimed));
    expect(!sent && sent.error().str().find("arg_len") != std::string::npos,
           "send refuses a 26-byte frame claiming arg_len " + std::to_string(claimed) + ": " +
               (sent ? std::string("it was sent") : sent.error().str()));
    if (sent && *sent) { // take the answer it got, so that the checks below stay in step
      ++s.expected.requests;
      s.client.receive();
    }
  }
}

// The device side of the same rule, with frames written to the ring raw. Before f95da73, the
// handler ran on the staging slot's stale bytes: echo answered with an earlier request's
// payload. First fill the staging slot the short frame will land in with something to leak.
void check_truncated_frames_on_device(Session &s) {
  cudaq_rt_bridge *raw = s.bridge.get();
  const uint32_t n = s.bridge.num_slots();
  auto raw_call = [&](const Bytes &frame) {
    ++s.expected.requests;
    while (cudaq_rt::loopback::write_request(raw, frame.data(), frame.size()) ==
           CUDAQ_RT_BRIDGE_AGAIN) {
    }
    return s.client.receive();
  };
  // Go round the ring once with long echoes, so that every staging frame holds payload.
  Bytes secret(400, 0xA5);
  for (uint32_t i = 0; i < n; ++i) {
    uint32_t rid = s.id++;
    auto r = s.call(request(cudaq_rt_function_id("echo"), secret.data(), 400, rid));
    expect_response(r, 0, rid, secret, "echo 400 bytes (filling the staging frames)");
    ++s.expected.ok;
  }
  uint32_t rid = s.id++;
  auto r =
      raw_call(request(cudaq_rt_function_id("echo"), "ab", 2, rid, CUDAQ_RT_REQUEST_MAGIC, 100));
  expect_response(r, CUDAQ_RT_STATUS_TRUNCATED, rid, {}, "26-byte frame claiming 100 bytes");
  rid = s.id++;
  r = raw_call(request(cudaq_rt_function_id("echo"), "ab", 2, rid, CUDAQ_RT_REQUEST_MAGIC,
                       s.slot_size - 23));
  expect_response(r, CUDAQ_RT_STATUS_TRUNCATED, rid, {}, "26-byte frame claiming more than a slot");
  rid = s.id++;
  Bytes headless = request(cudaq_rt_function_id("echo"), nullptr, 0, rid);
  headless.resize(16); // up to request_id: no ptp_timestamp
  r = raw_call(headless);
  auto h = header_of(r);
  expect(r.size() == 24 && h.magic == CUDAQ_RT_RESPONSE_MAGIC &&
             h.status == CUDAQ_RT_STATUS_TRUNCATED && h.result_len == 0 && h.request_id == rid &&
             h.ptp_timestamp == 0,
         "16-byte frame: truncated, its own request_id, a zero timestamp (status " +
             std::to_string(h.status) + ", timestamp " + std::to_string(h.ptp_timestamp) + ")");
  s.expected.protocol_errors += 3;
  rid = s.id++;
  r = s.call(request(cudaq_rt_function_id("echo"), "still here", 10, rid));
  expect_response(r, 0, rid, Bytes{'s', 't', 'i', 'l', 'l', ' ', 'h', 'e', 'r', 'e'},
                  "echo after truncated frames");
  ++s.expected.ok;
}

// The counters are posted stores that may trail the last response by a moment.
void check_counters(Session &s) {
  const auto deadline = Clock::now() + std::chrono::seconds(1);
  cudaq_rt_dispatch_stats st = s.loaded.stats();
  while (st.requests != s.expected.requests && Clock::now() < deadline)
    st = s.loaded.stats();
  expect(st.requests == s.expected.requests, "stats.requests " + std::to_string(st.requests));
  expect(st.ok == s.expected.ok, "stats.ok " + std::to_string(st.ok));
  expect(st.handler_errors == s.expected.handler_errors,
         "stats.handler_errors " + std::to_string(st.handler_errors));
  expect(st.protocol_errors == s.expected.protocol_errors,
         "stats.protocol_errors " + std::to_string(st.protocol_errors));
}

// Latency: one echo of 8 bytes at a time.
void measure_latency(Session &s, int latency_requests) {
  const uint64_t payload = 0x0123456789abcdefull;
  std::vector<double> us;
  us.reserve(size_t(latency_requests));
  bool all_right = true;
  for (int i = -1000; i < latency_requests; ++i) {
    uint32_t rid = s.id++;
    Bytes frame = request(cudaq_rt_function_id("echo"), &payload, 8, rid);
    const auto t0 = Clock::now();
    Bytes r = s.call(frame);
    const auto t1 = Clock::now();
    auto h = header_of(r);
    all_right &= h.status == 0 && h.request_id == rid && r.size() == 32 &&
                 std::memcmp(r.data() + 24, &payload, 8) == 0;
    if (i >= 0)
      us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
  }
  expect(all_right, "every latency-run echo came back right");
  s.expected.ok += uint64_t(latency_requests + 1000);
  std::printf("latency: echo 8 B, %d sequential requests: median %.2f us, p99 %.2f us, "
              "min %.2f us\n",
              latency_requests, percentile(us, 0.5), percentile(us, 0.99), percentile(us, 0.0));
}

// Throughput: keep the ring full.
void measure_throughput(Session &s) {
  const uint32_t total = 400000, slots = s.bridge.num_slots();
  uint32_t sent = 0, received = 0, first_id = s.id;
  bool in_order = true;
  const uint64_t payload = 42;
  const auto t0 = Clock::now();
  while (received < total) {
    while (sent < total && sent - received < slots) {
      auto ok = s.loaded.send(request(cudaq_rt_function_id("echo"), &payload, 8, s.id));
      if (!ok)
        fail(ok.error().str());
      if (!*ok)
        break;
      ++sent;
      ++s.id;
      ++s.expected.requests;
      ++s.expected.ok;
    }
    Bytes r = s.client.receive();
    in_order &= header_of(r).request_id == first_id + received && header_of(r).status == 0;
    ++received;
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  expect(in_order, "throughput responses in order and ok");
  std::printf("throughput: %u echoes of 8 B with up to %u in flight: %.2f M requests/s\n", total,
              slots, total / seconds / 1e6);
}

// Many requests through the batched send and receive, the ring kept full.
void check_batched_echoes(Session &s, uint64_t many) {
  cudaq_rt::BenchOptions b;
  b.requests = many;
  b.warmup = 0;
  b.inflight = s.bridge.num_slots();
  b.expect_echo = true;
  const uint64_t payload = 0x5a5a5a5a5a5a5a5aull;
  auto r = cudaq_rt::bench(s.loaded, "echo",
                           std::span(reinterpret_cast<const uint8_t *>(&payload), 8), b);
  if (!r)
    fail(r.error().str());
  expect(r->wrong == 0, std::to_string(r->wrong) + " of " + std::to_string(many) +
                            " batched echoes wrong (status, request_id or payload)");
  s.id += uint32_t(many);
  s.expected.requests += many;
  s.expected.ok += many;
  std::printf("batched: %llu echoes of 8 B, %u in flight, %u host thread%s, none lost, %llu "
              "wrong: %.2f M requests/s\n",
              (unsigned long long)many, b.inflight, s.loaded.feeders(),
              s.loaded.feeders() == 1 ? "" : "s", (unsigned long long)r->wrong,
              r->requests_per_s / 1e6);
}

// `count` echoes whose payloads run from 8 bytes to the slot's whole payload (a third of them 8
// to 64 bytes, a third up to 1 KB, a third up to the slot; laid out so that every slot sees its
// frames grow and shrink, cells and bulk in turn), the ring kept full, every response checked
// byte for byte: the bulk frames' and the cells' paths, and the switch between them in one slot.
void check_mixed_echoes(Session &s, uint64_t count) {
  const uint32_t max_payload = s.slot_size - CUDAQ_RT_HEADER_SIZE;
  const uint32_t window = s.bridge.num_slots();
  uint64_t lcg = 0x9E3779B97F4A7C15ull;
  auto next_len = [&]() -> uint32_t {
    lcg = lcg * 6364136223846793005ull + 1442695040888963407ull;
    const uint32_t r = uint32_t(lcg >> 33);
    const uint32_t cap = r % 3 == 0 ? 64u : r % 3 == 1 ? 1024u : max_payload;
    const uint32_t top = std::min(cap, max_payload);
    return 8 + (r / 3) % (top - 8 + 1);
  };
  // Each payload is its request_id's bytes, then a pattern from it: checked without keeping it.
  auto fill = [](Bytes &p, uint32_t rid) {
    for (size_t i = 0; i < p.size(); ++i)
      p[i] = uint8_t((rid >> (8 * (i % 4))) + i * 13);
  };
  std::vector<std::pair<uint32_t, uint32_t>> in_flight; // request_id, payload length (a ring)
  in_flight.resize(window);
  uint64_t sent = 0, received = 0, wrong = 0, bytes = 0;
  Bytes payload(max_payload), frame;
  const auto started = Clock::now();
  while (received < count) {
    while (sent < count && sent - received < window) {
      const uint32_t len = next_len(), rid = s.id + uint32_t(sent);
      payload.resize(len);
      fill(payload, rid);
      frame = request(cudaq_rt_function_id("echo"), payload.data(), len, rid);
      auto ok = s.loaded.send(frame);
      if (!ok)
        fail("mixed echoes: send: " + ok.error().str());
      if (!*ok)
        break;
      in_flight[sent % window] = {rid, len};
      ++sent;
      bytes += len;
    }
    const auto [rid, len] = in_flight[received % window];
    const Bytes r = s.client.receive();
    payload.resize(len);
    fill(payload, rid);
    cudaq_rt_response_header h{};
    bool right = r.size() == sizeof h + len;
    if (right) {
      std::memcpy(&h, r.data(), sizeof h);
      right = h.magic == CUDAQ_RT_RESPONSE_MAGIC && h.status == 0 && h.request_id == rid &&
              h.result_len == len && std::equal(payload.begin(), payload.end(), r.begin() + 24);
    }
    if (!right && wrong++ < 5)
      std::fprintf(stderr, "mixed echoes: request %u of %u payload bytes answered wrong\n", rid,
                   len);
    ++received;
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - started).count();
  s.id += uint32_t(count);
  s.expected.requests += count;
  s.expected.ok += count;
  expect(wrong == 0, std::to_string(wrong) + " of " + std::to_string(count) +
                         " mixed-size echoes wrong (status, request_id, length or payload)");
  std::printf("mixed: %llu echoes of 8..%u B, %u in flight, none lost, %llu wrong: %.2f GB/s of "
              "payload each way\n",
              (unsigned long long)count, max_payload, window, (unsigned long long)wrong,
              double(bytes) / seconds / 1e9);
}

// Echo `count` distinct payloads, all sent before anything is received; returns the frames.
std::vector<std::pair<uint32_t, Bytes>> send_batch(Session &s, uint32_t count, const char *what) {
  std::vector<std::pair<uint32_t, Bytes>> batch;
  for (uint32_t i = 0; i < count; ++i) {
    Bytes in(1 + (i * 37) % 200);
    for (size_t j = 0; j < in.size(); ++j)
      in[j] = uint8_t(i * 7 + j);
    const uint32_t rid = s.id++;
    auto ok =
        s.loaded.send(request(cudaq_rt_function_id("echo"), in.data(), uint32_t(in.size()), rid));
    if (!ok || !*ok)
      fail(std::string(what) + ": send " + std::to_string(i) + " " +
           (ok ? "found the ring full" : ok.error().str()));
    batch.emplace_back(rid, std::move(in));
    ++s.expected.requests;
    ++s.expected.ok;
  }
  return batch;
}

// Shutdown drains: a full ring of requests sent just before the flag is set is answered in full
// (loopback_ring.h: every request sent before the flag gets its response). The kernel has stopped
// by the time they are taken, so a missing one would never come.
void check_shutdown_drains(Session &s) {
  auto batch = send_batch(s, s.bridge.num_slots(), "before shutdown");
  s.stop();
  uint32_t answered = 0;
  for (auto &[rid, in] : batch) {
    auto got = s.loaded.receive(s.client.buffer);
    if (!got)
      fail(got.error().str());
    if (!*got)
      break;
    Bytes r(s.client.buffer.begin(), s.client.buffer.begin() + long(**got));
    expect_response(r, 0, rid, in, "request sent just before shutdown");
    ++answered;
  }
  std::printf("shutdown: %u of %zu requests sent just before the flag answered\n", answered,
              batch.size());
  // Fatal: the relaunched kernel would answer the rest, and every later check would be off.
  if (answered != batch.size())
    fail("requests sent just before shutdown went unanswered");
}

// Relaunch on the same bridge instance: the kernel resumes at the ring position the last one
// stopped at (wherever the host's counters are: not a multiple of the ring), and the counters go
// on from the values in stats.
void check_relaunch(Session &s) {
  if (auto st = s.loaded.relaunch(); !st)
    fail(st.error().str());
  for (int round = 0; round < 3; ++round) {
    auto batch = send_batch(s, s.bridge.num_slots() - 1, "after relaunch");
    for (auto &[rid, in] : batch)
      expect_response(s.client.receive(), 0, rid, in, "echo after relaunch");
  }
  std::vector<int32_t> v = {5, 6, 7};
  const uint32_t rid = s.id++;
  auto r = s.call(request(cudaq_rt_function_id("sum_i32"), v.data(), 12, rid));
  expect_response(r, 0, rid, bytes_of(std::vector<int64_t>{18}), "sum_i32 after relaunch");
  ++s.expected.ok;
}

// After the last stop: the kernel has ended, so its stores have all landed.
void check_final_counters(Session &s) {
  cudaq_rt_dispatch_stats st = s.loaded.stats();
  std::printf("stats: requests %llu, ok %llu, handler errors %llu, protocol errors %llu\n",
              st.requests, st.ok, st.handler_errors, st.protocol_errors);
  const Counters &e = s.expected;
  expect(st.requests == e.requests && st.ok == e.ok && st.handler_errors == e.handler_errors &&
             st.protocol_errors == e.protocol_errors,
         "final stats, across both launches: expected requests " + std::to_string(e.requests) +
             ", ok " + std::to_string(e.ok) + ", handler errors " +
             std::to_string(e.handler_errors) + ", protocol errors " +
             std::to_string(e.protocol_errors));
}

} // namespace

int main(int argc, char **argv) {
  const TestOptions options = parse_options(argc, argv);
  // Skipped only where there is no GPU (no driver installed, or no device): any other failure,
  // a driver too old for the cubin included, is on a machine that may well have a GPU.
  if (auto why = cudaq_rt::no_gpu_reason()) {
    std::printf("skipped: %s\n", why->c_str());
    return 77;
  }
  auto started = cudaq_rt::Server::start(options.load);
  if (!started)
    fail(started.error().str());
  Session s(**started);
  print_load(s);
  if (options.expect_spare)
    expect(s.loaded.report().shape.shared_bytes == s.slot_size,
           "the dispatch kernel was launched with " +
               std::to_string(s.loaded.report().shape.shared_bytes) +
               " bytes of dynamic shared memory, not the spare frame's " +
               std::to_string(s.slot_size));
  if (options.only_mixed) {
    check_mixed_echoes(s, options.mixed);
    s.stop();
    check_final_counters(s);
    return verdict();
  }
  if (options.only_many) {
    // Then again on a second kernel: each lane goes on where it stopped, as each feeder does.
    check_batched_echoes(s, options.many);
    s.stop();
    if (auto st = s.loaded.relaunch(); !st)
      fail(st.error().str());
    check_batched_echoes(s, std::max<uint64_t>(options.many / 10, 1));
    s.stop();
    check_final_counters(s);
    return verdict();
  }

  check_sum_i32(s);
  check_axpy_f32(s);
  check_parity(s);
  check_echo_sizes(s);
  check_small_requests_long_answers(s);
  check_handler_error(s);
  check_protocol_errors(s);
  check_send_refuses_partial_frames(s);
  if (s.loopback)
    check_truncated_frames_on_device(s);
  else
    std::printf("not the loopback bridge: truncated frames on the device side not checked\n");
  check_counters(s);

  measure_latency(s, options.latency_requests);
  measure_throughput(s);
  if (options.many > 0)
    check_batched_echoes(s, options.many);
  if (options.mixed > 0)
    check_mixed_echoes(s, options.mixed);

  check_shutdown_drains(s);
  check_relaunch(s);
  s.stop();
  check_final_counters(s);
  return verdict();
}
