// A handler safe to run in several threads at once, for the warp dispatcher, under a C++ name
// that is not its wire name (CUDA-Q's clients send FNV-1a of "add_one").
#include "cudaq_rt/exports.h"

static __device__ int add_one_handler(const void *in, void *out, uint32_t arg_len,
                                      uint32_t max_result_len, uint32_t *result_len) {
  if (arg_len != 4 || max_result_len < 4)
    return 1;
  *(int32_t *)out = *(const int32_t *)in + 1;
  *result_len = 4;
  return 0;
}
CUDAQ_RT_EXPORT_HANDLER_CONCURRENT(add_one_handler, add_one_handler);
