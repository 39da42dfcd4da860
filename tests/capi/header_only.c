/* cudaq_rt/cudaq_rt.h alone, compiled as C99 with every warning an error (and as C++ by
 * header_only.cpp): the C API's header needs nothing but itself. */
#include "cudaq_rt/cudaq_rt.h"

int cudaq_rt_header_only_c(void);
int cudaq_rt_header_only_c(void) {
  cudaq_rt_config config;
  cudaq_rt_dispatch_stats stats;
  cudaq_rt_device_fn fn = 0;
  (void)stats;
  (void)fn;
  return (int)sizeof config + CUDAQ_RT_OK;
}
