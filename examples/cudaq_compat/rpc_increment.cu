// A handler written the way CUDA-Q realtime's own tests write theirs, built here unchanged but for
// the include line (CUDA-Q's is its device_code.h). CUDA-Q exports with one argument, the
// function itself, and lets the application's function table decide which function_id reaches
// it: its tests send FNV-1a("rpc_increment") to rpc_increment_handler. A package says the same
// with an alias:
//
//   cudaq-rt-pack librpc_increment.a --alias rpc_increment=rpc_increment_handler -o out
//   cudaq-rt-run out/librpc_increment.cudaqpkg --call rpc_increment --arg hex:00017f
//   ok: 01 02 80
#include "cudaq_rt/exports.h"

#include <cstdint>

__device__ int rpc_increment_handler(const void *input, void *output, std::uint32_t arg_len,
                                     std::uint32_t max_result_len, std::uint32_t *result_len) {
  const std::uint8_t *in = static_cast<const std::uint8_t *>(input);
  std::uint8_t *out = static_cast<std::uint8_t *>(output);
  if (arg_len > max_result_len)
    return 1;
  for (std::uint32_t i = 0; i < arg_len; ++i)
    out[i] = static_cast<std::uint8_t>(in[i] + 1);
  *result_len = arg_len;
  return 0;
}

CUDAQ_REALTIME_EXPORT_DEVICE_FUNCTION(rpc_increment_handler);
