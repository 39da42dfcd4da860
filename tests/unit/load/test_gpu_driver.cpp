// The Gpu seam over the CUDA driver (load/gpu.h): libcuda is dlopened, so a machine without it
// gets one line that says so; a machine with GPUs gets them by ordinal and a refusal past the
// last. Which of the two this machine is, the test asks the loader itself.
#include "load/gpu.h"

#include <doctest/doctest.h>

#include <dlfcn.h>
#include <string>

using namespace cudaq_rt;

namespace {

bool has_cuda_driver() {
  void *lib = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib)
    ::dlclose(lib);
  return lib != nullptr;
}

// Not having a driver is this machine's answer, not a skip: either branch checks what it sees.
void check_without_driver(Gpu &gpu) {
  auto count = gpu.device_count();
  REQUIRE_FALSE(count);
  const std::string text = count.error().str();
  CHECK(text.starts_with("no CUDA driver on this machine: "));
  CHECK(text.find("libcuda.so.1") != std::string::npos);
  CHECK(text.find('\n') == std::string::npos);
  auto device = gpu.open(0);
  REQUIRE_FALSE(device);
  CHECK(device.error().str() == text); // the same reason, not a second guess
}

void check_with_driver(Gpu &gpu) {
  auto count = gpu.device_count();
  if (!count) {
    CHECK(count.error().str().starts_with("no CUDA GPU on this machine"));
    return;
  }
  REQUIRE(*count >= 1);
  auto first = gpu.open(0);
  REQUIRE(first);
  CHECK(first->ordinal == 0);
  CHECK_FALSE(first->name.empty());
  CHECK(first->sm >= 50);
  CHECK(first->arch() == "sm_" + std::to_string(first->sm));
  auto past = gpu.open(*count);
  REQUIRE_FALSE(past);
  CHECK(past.error().str() ==
        "no GPU " + std::to_string(*count) + ": this machine has " + std::to_string(*count) +
            (*count == 1 ? " GPU (0)" : " GPUs (0 to " + std::to_string(*count - 1) + ")"));
  CHECK_FALSE(gpu.open(-1));
}

} // namespace

TEST_CASE("the driver's GPUs, or one line saying there is no driver") {
  if (has_cuda_driver())
    check_with_driver(driver_gpu());
  else
    check_without_driver(driver_gpu());
}
