// libFuzzer target for the response-frame reader (runtime/src/load/wire_frames.cpp) and the result
// decoder (runtime/src/command/request_args.cpp): responses come from a bridge, and through a network
// bridge from any peer. A frame that is accepted must hold its whole result within the input, and
// its result must decode under every --result type that divides its size.
#include "command/request_args.h"
#include "cudaq_rt/wire.h"
#include "load/wire_frames.h"

#include <cstdlib>
#include <cstring>

using namespace cudaq_rt;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  Expected<Response> response = parse_response_frame({data, size});
  if (!response)
    return 0;
  cudaq_rt_response_header header;
  std::memcpy(&header, data, sizeof header);
  if (CUDAQ_RT_HEADER_SIZE + size_t(header.result_len) > size ||
      response->result.size() != header.result_len ||
      (header.result_len != 0 &&
       std::memcmp(response->result.data(), data + CUDAQ_RT_HEADER_SIZE, header.result_len) != 0))
    std::abort();
  for (const char *name :
       {"i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64", "f32", "f64", "hex", "str", "raw"}) {
    Expected<ResultType> type = parse_result_type(name);
    const bool whole = type->kind != ResultType::Kind::scalars ||
                       response->result.size() % scalar_type_size(type->scalar) == 0;
    if (bool(decode_result(*type, response->result)) != whole)
      std::abort();
  }
  return 0;
}
