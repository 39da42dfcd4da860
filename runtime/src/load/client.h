// Requests through a Server's host-fed bridge (the loopback bridge): one call, or a benchmark that
// keeps several in flight. While they wait, the kernel's health is checked, so a handler that
// faults is an error at once and one that never returns is an error at the timeout: never a wait
// without end.
#pragma once

#include "cudaq_rt/wire.h"
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

// Sends `requests` requests to `function_id` (`label` names it in an error) with `payload`,
// `inflight` at a time.
Expected<BenchResult> bench(Server &server, uint32_t function_id, const std::string &label,
                            std::span<const uint8_t> payload, const BenchOptions &options);
// The same for the handler exported as `handler` (function_id: the FNV-1a of its name).
inline Expected<BenchResult> bench(Server &server, const std::string &handler,
                                   std::span<const uint8_t> payload, const BenchOptions &options) {
  return bench(server, function_id(handler.c_str()), handler, payload, options);
}

// Many requests to one function and all their answers (cudaq_rt_call_batch): request i's
// arguments are arg_lens[i] bytes (every one arg_stride bytes when arg_lens is empty) at
// args + i * arg_stride; its result goes to results + i * result_stride, its length and status to
// result_lens[i] and statuses[i]. Request ids are first_request_id + i, which is how an answer
// finds its request, in whatever order the answers come.
struct BatchCall {
  uint32_t function_id = 0;
  const uint8_t *args = nullptr;
  size_t arg_stride = 0;
  std::span<const uint32_t> arg_lens;
  size_t count = 0;
  uint8_t *results = nullptr;
  size_t result_stride = 0;
  uint32_t *result_lens = nullptr;
  int32_t *statuses = nullptr;
  uint32_t inflight = 1; // at most the bridge's slots
  double timeout_s = 10; // for any one answer
  uint32_t first_request_id = 1;
};
// Whether every request fits arg_stride and the bridge's slots (call_batch checks this first).
Status check_batch(const Server &server, const BatchCall &batch);
// *timed_out (when given) says whether an error was an answer that did not come in time.
Status call_batch(Server &server, const BatchCall &batch, bool *timed_out = nullptr);

} // namespace cudaq_rt
