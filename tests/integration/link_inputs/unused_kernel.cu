// A handler next to a kernel that nothing launches: -kernels-used drops the kernel, and
// --no-kernels-used keeps it, so the two links differ in size and symbols.
#include "cudaq_rt/exports.h"

#include <stdint.h>

extern "C" __global__ void cudaq_rt_test_unused_kernel(float *out, const float *in, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n)
    return;
  float acc = 0.f;
  for (int k = 0; k < 64; ++k)
    acc = fmaf(acc, in[(i + k) % n], sinf(static_cast<float>(k)));
  out[i] = acc;
}

static __device__ int negate_i32(const void *input, void *output, uint32_t arg_len,
                                 uint32_t max_result_len, uint32_t *result_len) {
  if (arg_len % 4 != 0 || max_result_len < arg_len)
    return 1;
  for (uint32_t i = 0; i < arg_len / 4; ++i)
    static_cast<int32_t *>(output)[i] = -static_cast<const int32_t *>(input)[i];
  *result_len = arg_len;
  return 0;
}
CUDAQ_RT_EXPORT_HANDLER(negate_i32, negate_i32);
