// The package the build links per TU to ship the built-in dispatchers' units (their kernel and a
// bridge's hooks, compiled alone, the same for every package) for the common archs: one handler,
// so that the package links. Its own unit matches no other package's.
#include "cudaq_rt/exports.h"

#include <stdint.h>

static __device__ int unit_seed(const void *, void *, uint32_t, uint32_t, uint32_t *result_len) {
  *result_len = 0;
  return 0;
}
CUDAQ_RT_EXPORT_HANDLER_CONCURRENT(unit_seed, cudaq_rt_unit_seed);
