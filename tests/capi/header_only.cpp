// cudaq_rt/cudaq_rt.h alone, compiled as C++11 with every warning an error (and as C99 by
// header_only.c).
#include "cudaq_rt/cudaq_rt.h"

int cudaq_rt_header_only_cxx();
int cudaq_rt_header_only_cxx() {
  cudaq_rt_config config;
  cudaq_rt_config_init(&config);
  return config.allow_link + CUDAQ_RT_E_FAILED;
}
