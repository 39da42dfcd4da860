// The C API's servers on a GPU played with host memory (tests/unit/fake_gpu.h), for the Python
// package's tests on a machine without a GPU: cudaq_rt.server.set_server_factory takes
// cudaq_rt_test_fake_server_create in place of cudaq_rt_server_create, so that everything above
// the driver (the package's calls, batches, benchmarks, globals, counters, errors and lifetimes)
// runs through the real libcudaq_rt.so. With the echo bridge (tests/unit/echo_bridge.c) a call's
// answer is its arguments.
#include "load/capi_gpu.h"

#include "fake_gpu.h"

#include <deque>
#include <mutex>

namespace {
std::mutex gpus_mutex;
std::deque<FakeGpu> gpus; // one per server, alive until the process ends (they must outlive it)
} // namespace

extern "C" {

__attribute__((visibility("default"))) int
cudaq_rt_test_fake_server_create(cudaq_rt_code *code, const cudaq_rt_config *config,
                                 cudaq_rt_server **server) {
  std::lock_guard<std::mutex> lock(gpus_mutex);
  return cudaq_rt::create_server(code, config, gpus.emplace_back(), server);
}

// Every fake GPU's kernels fault from now on (1), or run (0).
__attribute__((visibility("default"))) void cudaq_rt_test_fake_gpu_faults(int on) {
  std::lock_guard<std::mutex> lock(gpus_mutex);
  for (FakeGpu &g : gpus)
    g.faults = on != 0;
}

// How many dispatch kernels the fake GPUs have launched, all together.
__attribute__((visibility("default"))) int cudaq_rt_test_fake_gpu_launches(void) {
  std::lock_guard<std::mutex> lock(gpus_mutex);
  int n = 0;
  for (const FakeGpu &g : gpus)
    n += g.launches;
  return n;
}
}
