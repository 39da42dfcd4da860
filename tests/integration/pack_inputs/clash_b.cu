// Exports `twin`, like clash_a.cu, with different code.
#include "cudaq_rt/exports.h"

static __device__ int twin_b(const void *, void *, uint32_t, uint32_t, uint32_t *result_len) {
  *result_len = 0;
  return 1;
}
CUDAQ_RT_EXPORT_HANDLER(twin_b, twin);
