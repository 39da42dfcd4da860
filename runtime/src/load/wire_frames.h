// Request and response frames (cudaq_rt/wire.h) as byte vectors, for host-side clients: the
// frames cudaq-rt-run sends through a bridge and the responses it reads back.
#pragma once

#include "cudaq_rt/error.h"

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace cudaq_rt {

// A request frame for the handler exported as `handler`: the 24-byte header (function_id is the
// FNV-1a of the name) and the payload. Fails when the payload does not fit arg_len's 32 bits.
Expected<std::vector<uint8_t>> build_request_frame(const std::string &handler,
                                                   std::span<const uint8_t> payload,
                                                   uint32_t request_id, uint64_t ptp_timestamp);
// The same for a function_id given as a number (an application's table); `label` names the
// request in an error.
Expected<std::vector<uint8_t>> build_request_frame(uint32_t function_id,
                                                   std::span<const uint8_t> payload,
                                                   uint32_t request_id, uint64_t ptp_timestamp,
                                                   const std::string &label);

struct Response {
  int32_t status = 0;
  uint32_t request_id = 0;
  uint64_t ptp_timestamp = 0;
  std::vector<uint8_t> result;
};

// Reads a response frame. `frame` may be longer than the response (a whole ring slot); bytes past
// 24 + result_len are ignored. Fails on a short frame, a bad magic, a result_len that claims more
// bytes than the frame holds, and a protocol error (status < 0) that carries result bytes.
Expected<Response> parse_response_frame(std::span<const uint8_t> frame);

// What a response status means: "ok", the protocol errors of wire.h ("unknown function or bad
// magic", "payload too large", "result too large", "truncated", "handler fault", "bad length"), "handler error"
// for any status > 0, "unknown protocol error" for other negative ones.
const char *wire_status_name(int32_t status);

// cudaq-rt-run's exit statuses (man/cudaq-rt-run.1): what a response's status means for the
// process, and which of two outcomes is the worse when several requests were sent (failure,
// usage, protocol error, handler error, ok, from worst to best: the numbers do not sort so).
enum RunExitStatus : int {
  run_exit_ok = 0,
  run_exit_failure = 1,
  run_exit_usage = 2,
  run_exit_handler_error = 3,
  run_exit_protocol_error = 4
};
int run_exit_status(int32_t wire_status);
int worse_run_exit_status(int a, int b);

} // namespace cudaq_rt
