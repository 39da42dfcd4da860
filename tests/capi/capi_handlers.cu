// The C API test program's own handlers (capi_test.c opens them with cudaq_rt_open_self): one
// exported with the one-argument macro, one that reads a global the program sets.
#include "cudaq_rt/exports.h"

extern "C" {
__device__ int capi_offset;
}
CUDAQ_RT_EXPORT_GLOBAL(capi_offset);

static __device__ int capi_scale(const void *in, void *out, uint32_t arg_len,
                                 uint32_t max_result_len, uint32_t *result_len) {
  if (arg_len != 4 || max_result_len < 4)
    return 1;
  *(int *)out = *(const int *)in * 2;
  *result_len = 4;
  return 0;
}
CUDAQ_RT_EXPORT_HANDLER(capi_scale);

static __device__ int add_offset(const void *in, void *out, uint32_t arg_len,
                                 uint32_t max_result_len, uint32_t *result_len) {
  if (arg_len != 4 || max_result_len < 4)
    return 1;
  *(int *)out = *(const int *)in + capi_offset;
  *result_len = 4;
  return 0;
}
CUDAQ_RT_EXPORT_HANDLER(add_offset, capi_add_offset);
