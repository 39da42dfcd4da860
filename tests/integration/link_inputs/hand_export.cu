// A handler exported by hand, without the macros: the pointer global points at the handler itself
// and the export record is this cudaq-rt's (version 2), so it promises a
// cudaq_rt_handler_call__twice that this code never defines. A whole-program link (which calls
// it by name) must say so; a per-TU link does not need it.
#include "cudaq_rt/exports.h"

static __device__ int twice(const void *input, void *output, uint32_t arg_len,
                            uint32_t max_result_len, uint32_t *result_len) {
  if (arg_len != 4 || max_result_len < 4)
    return 1;
  *static_cast<int *>(output) = 2 * *static_cast<const int *>(input);
  *result_len = 4;
  return 0;
}
extern "C" {
__device__ cudaq_rt_handler_fn cudaq_rt_handler__twice = twice;
}
CUDAQ_RT_EXPORT_RECORD_(CUDAQ_RT_EXPORT_HANDLER_KIND, ::cudaq_rt::function_id("twice"), twice);
