// The C API's servers on a GPU played with host memory (tests/unit/fake_gpu.h), for the Python
// package's tests on a machine without a GPU: cudaq_rt.server.set_server_factory takes
// cudaq_rt_test_fake_server_create in place of cudaq_rt_server_create, so that everything above
// the driver (the package's calls, batches, benchmarks, globals, counters, errors and lifetimes)
// runs through the real libcudaq_rt.so. With the echo bridge (tests/unit/echo_bridge.c) a call's
// answer is its arguments.
#include "load/capi_gpu.h"

#include "fake_gpu.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <deque>
#include <mutex>
#include <vector>

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

// The median of `n` cudaq_rt_call()s of `function_id` with `size` zero bytes, each timed in C,
// in microseconds; -1 when a call fails. For bench/python/binding_overhead.py: what a call costs
// in C, next to what it costs from Python, on the same server.
__attribute__((visibility("default"))) double
cudaq_rt_test_time_calls(cudaq_rt_server *server, uint32_t function_id, uint32_t size, size_t n) {
  std::vector<uint8_t> arg(size), result(cudaq_rt_slot_size(server));
  std::vector<double> us(n);
  for (size_t i = 0; i < n; ++i) {
    uint32_t len = 0;
    int32_t status = 0;
    const auto t0 = std::chrono::steady_clock::now();
    if (cudaq_rt_call(server, function_id, arg.data(), size, result.data(),
                      static_cast<uint32_t>(result.size()), &len, &status, 5.0) != CUDAQ_RT_OK)
      return -1;
    us[i] =
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
  }
  std::nth_element(us.begin(), us.begin() + n / 2, us.end());
  return n ? us[n / 2] : 0;
}
}
