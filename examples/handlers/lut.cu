// An example handler whose data comes from the host: a syndrome decoder that looks each syndrome
// byte up in a correction table held in a __device__ global. The table is written into the linked
// module before the dispatch kernel starts (cudaq-rt-run --global cudaq_rt_example_lut=@FILE), so
// the same package serves any code without being rebuilt.
//
// The link must keep the table's symbol visible: nvJitLink internalizes every global that no
// -variables-used names (the symbol turns local in the cubin, seen with CUDA 13.0). Exporting it
// with CUDAQ_RT_EXPORT_GLOBAL makes every link name it.
#include "cudaq_rt/exports.h"

#include <stdint.h>

// C linkage keeps the name unmangled, the name the host looks the global up by. The default is the
// identity, so a call before the table was set answers its input unchanged: recognisably not a
// decode. Defined inside an extern "C" block for the reason exports.h gives.
extern "C" {
__device__ uint8_t cudaq_rt_example_lut[256] = {
#define CUDAQ_RT_ROW_(r)                                                                           \
  r + 0, r + 1, r + 2, r + 3, r + 4, r + 5, r + 6, r + 7, r + 8, r + 9, r + 10, r + 11, r + 12,    \
      r + 13, r + 14, r + 15
    CUDAQ_RT_ROW_(0),   CUDAQ_RT_ROW_(16),  CUDAQ_RT_ROW_(32),  CUDAQ_RT_ROW_(48),
    CUDAQ_RT_ROW_(64),  CUDAQ_RT_ROW_(80),  CUDAQ_RT_ROW_(96),  CUDAQ_RT_ROW_(112),
    CUDAQ_RT_ROW_(128), CUDAQ_RT_ROW_(144), CUDAQ_RT_ROW_(160), CUDAQ_RT_ROW_(176),
    CUDAQ_RT_ROW_(192), CUDAQ_RT_ROW_(208), CUDAQ_RT_ROW_(224), CUDAQ_RT_ROW_(240),
#undef CUDAQ_RT_ROW_
};
}
CUDAQ_RT_EXPORT_GLOBAL(cudaq_rt_example_lut);

// lut_decode: input is syndrome bytes; output one correction byte per syndrome byte,
// cudaq_rt_example_lut[syndrome].
static __device__ int lut_decode(const void *input, void *output, uint32_t arg_len,
                                 uint32_t max_result_len, uint32_t *result_len) {
  if (max_result_len < arg_len)
    return 2;
  const uint8_t *syndromes = static_cast<const uint8_t *>(input);
  uint8_t *corrections = static_cast<uint8_t *>(output);
  for (uint32_t i = 0; i < arg_len; ++i)
    corrections[i] = cudaq_rt_example_lut[syndromes[i]];
  *result_len = arg_len;
  return 0;
}
CUDAQ_RT_EXPORT_HANDLER_CONCURRENT(lut_decode, lut_decode);
