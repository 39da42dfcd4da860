// A handler built for the test with code=sm_80 only: a cubin and no LTO-IR.
#include "cudaq_rt/exports.h"

static __device__ int cubin_only(const void *, void *, uint32_t, uint32_t, uint32_t *result_len) {
  *result_len = 0;
  return 0;
}
CUDAQ_RT_EXPORT_HANDLER(cubin_only, cubin_only);
