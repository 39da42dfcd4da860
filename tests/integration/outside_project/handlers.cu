// Two handlers, exported the way CUDA-Q realtime handlers are.
#include "cudaq_rt/exports.h"

static __device__ int negate_i32(const void *in, void *out, uint32_t arg_len,
                                 uint32_t max_result_len, uint32_t *result_len) {
  if (arg_len != 4 || max_result_len < 4)
    return 1;
  *(int32_t *)out = -*(const int32_t *)in;
  *result_len = 4;
  return 0;
}
CUDAQ_RT_EXPORT_HANDLER(negate_i32, negate_i32);

static __device__ int xor_bytes(const void *in, void *out, uint32_t arg_len,
                                uint32_t max_result_len, uint32_t *result_len) {
  if (max_result_len < 1)
    return 1;
  uint8_t acc = 0;
  for (uint32_t i = 0; i < arg_len; ++i)
    acc ^= ((const uint8_t *)in)[i];
  *(uint8_t *)out = acc;
  *result_len = 1;
  return 0;
}
CUDAQ_RT_EXPORT_HANDLER(xor_bytes, xor_bytes);
