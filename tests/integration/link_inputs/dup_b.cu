// Defines dup_helper with external linkage, as dup_a.cu does too: two translation units of one link
// that define one device symbol. nvJitLink 13.0 crashed (SIGSEGV) linking their units per TU;
// cudaq-rt-link refuses them first, naming the symbol and both units.
#include "cudaq_rt/exports.h"

extern "C" __device__ int dup_helper(int x) {
  return x + 2;
}

static __device__ int dup_b(const void *, void *, uint32_t, uint32_t, uint32_t *result_len) {
  *result_len = uint32_t(dup_helper(0) - 2);
  return 0;
}
CUDAQ_RT_EXPORT_HANDLER(dup_b, dup_b);
