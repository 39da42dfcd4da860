// Requests through a Server's host-fed bridge (the loopback bridge): one call, or a benchmark that
// keeps several in flight. While they wait, the kernel's health is checked, so a handler that
// faults is an error at once and one that never returns is an error at the timeout: never a wait
// without end.
#pragma once

#include "load/latency_stats.h"
#include "load/server.h"
#include "load/wire_frames.h"

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace cudaq_rt {

struct Reply {
  Response response;
  double latency_us = 0; // from handing the request to the bridge to taking its response
};

// Sends one request frame and waits up to `timeout_s` for its response.
Expected<Reply> call(Server &server, std::span<const uint8_t> frame, double timeout_s);

struct BenchOptions {
  uint64_t requests = 10000;
  uint32_t inflight = 1;  // at most the bridge's slots
  uint64_t warmup = 1000; // sent and checked first, not measured
  double timeout_s = 10;  // for any one response
  // The handler echoes its input: check each result is the request's own payload (the first
  // bytes of which carry the request_id, to tell one answer from another).
  bool expect_echo = false;
};

struct BenchResult {
  uint64_t requests = 0;
  uint64_t wrong = 0; // a status other than 0, someone else's request_id, a wrong echo
  double seconds = 0;
  double requests_per_s = 0;
  LatencyStats latency;
};

// Sends `requests` requests to `handler` with `payload`, `inflight` at a time.
Expected<BenchResult> bench(Server &server, const std::string &handler,
                            std::span<const uint8_t> payload, const BenchOptions &options);

} // namespace cudaq_rt
