// A device helper without exports, called from decode.cu.
#include <stdint.h>

__device__ uint32_t popcount_bytes(const uint8_t *p, uint32_t n) {
  uint32_t c = 0;
  for (uint32_t i = 0; i < n; ++i)
    c += __popc(p[i]);
  return c;
}
