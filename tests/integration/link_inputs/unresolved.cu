// A handler that calls a device function no translation unit defines: the package packs fine,
// and the link must fail naming the unresolved symbol.
#include "cudaq_rt/exports.h"

#include <stdint.h>

extern __device__ uint32_t cudaq_rt_test_defined_nowhere(const uint8_t *p, uint32_t n);

static __device__ int lonely(const void *input, void *output, uint32_t arg_len,
                             uint32_t max_result_len, uint32_t *result_len) {
  if (max_result_len < 4)
    return 2;
  uint32_t v = cudaq_rt_test_defined_nowhere(static_cast<const uint8_t *>(input), arg_len);
  *static_cast<uint32_t *>(output) = v;
  *result_len = 4;
  return 0;
}
CUDAQ_RT_EXPORT_HANDLER(lonely, lonely);
