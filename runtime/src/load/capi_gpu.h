// The C API's servers on a GPU other than the machine's driver: the tests play one with a fake
// (tests/unit/load/test_capi.cpp), as they do for the load path itself.
#pragma once

#include "cudaq_rt/cudaq_rt.h"
#include "load/gpu.h"

namespace cudaq_rt {

// cudaq_rt_server_create on `gpu`, which must outlive the server.
int create_server(cudaq_rt_code *code, const cudaq_rt_config *config, Gpu &gpu,
                  cudaq_rt_server **server);

} // namespace cudaq_rt
