// Serving's pure parts (runtime/src/load/serve.h): the --device syntax, the per-GPU bridge
// configuration, the latency histogram's buckets (cudaq_rt/bridge_plugin.h) and percentiles, and
// the counters' sums. Serving itself needs a GPU: tests/gpu/test_udp.py.
#include "load/serve.h"

#include <doctest/doctest.h>

#include "fake_gpu.h"

#include <random>

using namespace cudaq_rt;

TEST_CASE("--device: one ordinal, a list, all; exact refusals") {
  CountingGpu three(3), none(0);
  CHECK(*parse_devices("0", three) == std::vector<int>{0});
  CHECK(*parse_devices("2,0", three) == std::vector<int>{2, 0});
  CHECK(*parse_devices("all", three) == std::vector<int>{0, 1, 2});
  CHECK(parse_devices("all", none).error().str() == "--device all: this machine has no GPU");
  for (const char *bad : {"", "x", "-1", "+1", "0,", ",0", "0,,1", "1.5", "99999999999", "all,0"}) {
    CAPTURE(bad);
    auto r = parse_devices(bad, three);
    REQUIRE(!r);
    CHECK(r.error().str() ==
          std::string("--device: '") + bad +
              "' is not a GPU ordinal, a comma-separated list of them, or 'all'");
  }
  CHECK(parse_devices("1,0,1", three).error().str() == "--device: GPU 1 is listed twice");
}

TEST_CASE("latency buckets: exact below 32 ns, then 32 per power of two, monotonic") {
  for (uint64_t ns = 0; ns < 32; ++ns)
    CHECK(cudaq_rt_latency_bucket(ns) == ns);
  uint32_t last = 0;
  for (uint64_t ns = 1; ns < (uint64_t(1) << 42); ns = ns * 5 / 4 + 1) {
    CAPTURE(ns);
    const uint32_t b = cudaq_rt_latency_bucket(ns);
    CHECK(b >= last);
    CHECK(b < CUDAQ_RT_LATENCY_BUCKETS);
    last = b;
    if (ns < (uint64_t(1) << (CUDAQ_RT_LATENCY_MAX_EXP + 1))) {
      CHECK(cudaq_rt_latency_bucket_low(b) <= ns);
      CHECK(ns < cudaq_rt_latency_bucket_low(b + 1));
      // About 3% wide: 1/32 of the bucket's power of two.
      CHECK(double(cudaq_rt_latency_bucket_low(b + 1) - cudaq_rt_latency_bucket_low(b)) <=
            std::max(1.0, double(ns) / 32.0));
    }
  }
  CHECK(cudaq_rt_latency_bucket(UINT64_MAX) == CUDAQ_RT_LATENCY_BUCKETS - 1);
}

TEST_CASE("percentiles of a histogram are within a bucket of the exact ones") {
  std::mt19937_64 rng(7);
  std::lognormal_distribution<double> dist(std::log(5000.0), 0.5); // ns, around 5 us
  std::vector<double> us;
  std::vector<uint64_t> buckets(CUDAQ_RT_LATENCY_BUCKETS, 0);
  for (int i = 0; i < 100000; ++i) {
    const uint64_t ns = uint64_t(dist(rng));
    us.push_back(double(ns) / 1000.0);
    ++buckets[cudaq_rt_latency_bucket(ns)];
  }
  const LatencyStats exact = latency_stats(us), h = histogram_stats(buckets);
  CHECK(h.count == 100000);
  for (auto [a, b] : {std::pair{exact.p50_us, h.p50_us}, std::pair{exact.p90_us, h.p90_us},
                      std::pair{exact.p99_us, h.p99_us}, std::pair{exact.max_us, h.max_us},
                      std::pair{exact.min_us, h.min_us}}) {
    CAPTURE(a);
    CHECK(std::abs(a - b) <= a / 32.0);
  }
  CHECK(histogram_stats(std::vector<uint64_t>(CUDAQ_RT_LATENCY_BUCKETS, 0)).count == 0);
}

TEST_CASE("counters: derived kinds and the sum over GPUs") {
  ServeCounters a, b;
  a.bridge = {{"datagrams_received", 20}, {"answered_ok", 10},    {"handler_errors", 2},
              {"unknown_function", 1},    {"bad_magic", 3},       {"truncated", 1},
              {"dropped_runt", 2},        {"responses_sent", 13}, {"dropped_socket", 5}};
  a.dispatch.requests = 13;
  a.latency.assign(CUDAQ_RT_LATENCY_BUCKETS, 0);
  a.latency[100] = 13;
  CHECK(a.served() == 12);
  CHECK(a.protocol_errors() == 5);
  CHECK(a.dropped() == 7);
  CHECK(a.answered() == 17);
  b.bridge = {{"answered_ok", 5}, {"oversize", 1}};
  b.dispatch.requests = 5;
  ServeCounters total;
  total.add(a);
  total.add(b);
  CHECK(total.served() == 17);
  CHECK(total.protocol_errors() == 6);
  CHECK(total.get("datagrams_received") == 20);
  CHECK(total.dispatch.requests == 18);
  CHECK(total.latency.size() == CUDAQ_RT_LATENCY_BUCKETS);
  CHECK(total.latency[100] == 13);
}
