// Exports `twin`; clash_b.cu exports a different function under the same name.
#include "cudaq_rt/exports.h"

static __device__ int twin_a(const void *, void *, uint32_t, uint32_t, uint32_t *result_len) {
  *result_len = 0;
  return 0;
}
CUDAQ_RT_EXPORT_HANDLER(twin_a, twin);
