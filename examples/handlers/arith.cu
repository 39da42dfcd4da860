// Example handlers: integer and floating-point arithmetic on little arrays.
#include "cudaq_rt/exports.h"

#include <stdint.h>

// sum_i32: input is n int32 values, output one int64 sum.
static __device__ int sum_i32(const void *input, void *output, uint32_t arg_len,
                              uint32_t max_result_len, uint32_t *result_len) {
  if (arg_len % 4 != 0)
    return 1;
  if (max_result_len < 8)
    return 2;
  const int32_t *v = static_cast<const int32_t *>(input);
  long long s = 0;
  for (uint32_t i = 0; i < arg_len / 4; ++i)
    s += v[i];
  *static_cast<long long *>(output) = s;
  *result_len = 8;
  return 0;
}
CUDAQ_RT_EXPORT_HANDLER_CONCURRENT(sum_i32, sum_i32);

// axpy_f32: input is { float a; float x[n]; float y[n] }, output a*x+y.
static __device__ int axpy_f32(const void *input, void *output, uint32_t arg_len,
                               uint32_t max_result_len, uint32_t *result_len) {
  if (arg_len < 4 || (arg_len - 4) % 8 != 0)
    return 1;
  uint32_t n = (arg_len - 4) / 8;
  if (max_result_len < n * 4)
    return 2;
  const float *in = static_cast<const float *>(input);
  float a = in[0];
  const float *x = in + 1, *y = in + 1 + n;
  float *out = static_cast<float *>(output);
  for (uint32_t i = 0; i < n; ++i)
    out[i] = a * x[i] + y[i];
  *result_len = n * 4;
  return 0;
}
CUDAQ_RT_EXPORT_HANDLER_CONCURRENT(axpy_f32, axpy_f32);
