// A handler that keeps 16 16-byte loads in flight: about 165 registers, past the 64 a thread of
// block_dispatch's 1024-thread block has. The link fails, and says why in words.
#include "cudaq_rt/exports.h"

static __device__ int heavy(const void *input, void *output, uint32_t arg_len, uint32_t max_len,
                            uint32_t *result_len) {
  if (max_len < arg_len)
    return 2;
  const uint4 *__restrict__ from = static_cast<const uint4 *>(input);
  uint4 *__restrict__ to = static_cast<uint4 *>(output);
  uint32_t c = 0;
  for (; c + 16 <= arg_len / 16; c += 16) {
    uint4 v[16];
#pragma unroll
    for (uint32_t k = 0; k < 16; ++k)
      v[k] = from[c + k];
#pragma unroll
    for (uint32_t k = 0; k < 16; ++k)
      to[c + k] = v[k];
  }
  *result_len = 16 * c;
  return 0;
}
CUDAQ_RT_EXPORT_HANDLER_CONCURRENT(heavy, heavy);
