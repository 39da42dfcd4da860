// Frames as the host builds and reads them. The layout is wire.h's; the header structs are copied
// as host bytes, which is the wire's little-endian on every host CUDA runs on (checked below).
#include "load/wire_frames.h"

#include "cudaq_rt/wire.h"

#include <bit>
#include <cstring>
#include <limits>

namespace cudaq_rt {

static_assert(std::endian::native == std::endian::little,
              "frame headers are copied as host bytes, which must be the wire's little-endian");

Expected<std::vector<uint8_t>> build_request_frame(uint32_t function_id,
                                                   std::span<const uint8_t> payload,
                                                   uint32_t request_id, uint64_t ptp_timestamp,
                                                   const std::string &label) {
  if (payload.size() > std::numeric_limits<uint32_t>::max() - CUDAQ_RT_HEADER_SIZE)
    return make_error(label, "a payload of ", payload.size(),
                      " bytes does not fit a request frame (arg_len is 32 bits)");
  const cudaq_rt_request_header header{CUDAQ_RT_REQUEST_MAGIC, function_id,
                                       uint32_t(payload.size()), request_id, ptp_timestamp};
  std::vector<uint8_t> frame(CUDAQ_RT_HEADER_SIZE + payload.size());
  std::memcpy(frame.data(), &header, sizeof header);
  if (!payload.empty())
    std::memcpy(frame.data() + CUDAQ_RT_HEADER_SIZE, payload.data(), payload.size());
  return frame;
}

Expected<std::vector<uint8_t>> build_request_frame(const std::string &handler,
                                                   std::span<const uint8_t> payload,
                                                   uint32_t request_id, uint64_t ptp_timestamp) {
  return build_request_frame(function_id(handler.c_str()), payload, request_id, ptp_timestamp,
                             handler);
}

Expected<Response> parse_response_frame(std::span<const uint8_t> frame) {
  if (frame.size() < CUDAQ_RT_HEADER_SIZE)
    return make_error("", "response of ", frame.size(), " bytes is shorter than its ",
                      CUDAQ_RT_HEADER_SIZE, "-byte header");
  cudaq_rt_response_header header;
  std::memcpy(&header, frame.data(), sizeof header);
  if (header.magic != CUDAQ_RT_RESPONSE_MAGIC)
    return make_error("", "response has magic ", hex(header.magic), ", not ",
                      hex(CUDAQ_RT_RESPONSE_MAGIC), " ('CUQS')");
  const size_t available = frame.size() - CUDAQ_RT_HEADER_SIZE;
  if (header.result_len > available)
    return make_error("", "response claims ", header.result_len, " result bytes but ", available,
                      " follow its header");
  if (header.status < 0 && header.result_len != 0)
    return make_error("", "response has protocol status ", header.status, " (",
                      wire_status_name(header.status), ") and ", header.result_len,
                      " result bytes; protocol errors carry none");
  Response response;
  response.status = header.status;
  response.request_id = header.request_id;
  response.ptp_timestamp = header.ptp_timestamp;
  const uint8_t *result = frame.data() + CUDAQ_RT_HEADER_SIZE;
  response.result.assign(result, result + header.result_len);
  return response;
}

int run_exit_status(int32_t wire_status) {
  return wire_status == 0  ? run_exit_ok
         : wire_status > 0 ? run_exit_handler_error
                           : run_exit_protocol_error;
}

int worse_run_exit_status(int a, int b) {
  auto severity = [](int status) {
    switch (status) {
    case run_exit_failure:
      return 4;
    case run_exit_usage:
      return 3;
    case run_exit_protocol_error:
      return 2;
    case run_exit_handler_error:
      return 1;
    default:
      return 0;
    }
  };
  return severity(a) >= severity(b) ? a : b;
}

const char *wire_status_name(int32_t status) {
  if (status > 0)
    return "handler error";
  switch (status) {
  case CUDAQ_RT_STATUS_OK:
    return "ok";
  case CUDAQ_RT_STATUS_UNKNOWN_FUNCTION:
    return "unknown function or bad magic";
  case CUDAQ_RT_STATUS_PAYLOAD_TOO_LARGE:
    return "payload too large";
  case CUDAQ_RT_STATUS_RESULT_TOO_LARGE:
    return "result too large";
  case CUDAQ_RT_STATUS_TRUNCATED:
    return "truncated";
  case CUDAQ_RT_STATUS_HANDLER_FAULT:
    return "handler fault";
  case CUDAQ_RT_STATUS_BAD_LENGTH:
    return "bad length";
  default:
    return "unknown protocol error";
  }
}

} // namespace cudaq_rt
