// A GPU played with host memory, for the load path's tests that need no real one (test_client,
// test_capi): any image loads, every handler's pointer global holds an address of its own, and
// the kernel "runs" until its shutdown flag is set, unless it is told to fault. What was launched
// and written is kept for the test to look at. And a GPU that only counts its devices
// (test_serve, test_run_command), for the code that asks how many there are and nothing else.
#pragma once

#include "cudaq_rt/dispatch.h"
#include "cudaq_rt/wire.h"
#include "load/gpu.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <map>
#include <vector>

class FakeGpu final : public cudaq_rt::Gpu {
public:
  using GpuPointer = cudaq_rt::GpuPointer;
  int sm = 90;
  bool faults = false;
  std::map<std::string, size_t> device_globals; // beyond the handlers' pointers
  std::map<GpuPointer, std::vector<uint8_t>> written;
  int launches = 0;
  int opens = 0;
  cudaq_rt_dispatch_params params{};

  cudaq_rt::Expected<cudaq_rt::GpuDevice> open(int ordinal) override {
    ++opens;
    if (ordinal != 0)
      return cudaq_rt::make_error("", "no GPU ", ordinal, ": this machine has 1 GPU (0)");
    return cudaq_rt::GpuDevice{0, "Fake GPU", sm, 13000};
  }
  cudaq_rt::Expected<cudaq_rt::GpuLibrary> load(std::span<const uint8_t>) override {
    return reinterpret_cast<cudaq_rt::GpuLibrary>(0x1);
  }
  void unload(cudaq_rt::GpuLibrary) override {}
  cudaq_rt::Expected<cudaq_rt::GpuFunction> kernel(cudaq_rt::GpuLibrary,
                                                   const std::string &) override {
    return reinterpret_cast<cudaq_rt::GpuFunction>(0x2);
  }
  cudaq_rt::Expected<std::optional<cudaq_rt::GpuGlobal>> global(cudaq_rt::GpuLibrary,
                                                                const std::string &name) override {
    if (name.rfind("cudaq_rt_handler__", 0) == 0)
      return std::optional(
          cudaq_rt::GpuGlobal{0x10000 + (cudaq_rt_function_id(name.c_str()) & 0xfff0), 8});
    auto it = device_globals.find(name);
    if (it == device_globals.end())
      return std::optional<cudaq_rt::GpuGlobal>();
    return std::optional(cudaq_rt::GpuGlobal{0x20000, it->second});
  }
  cudaq_rt::Expected<GpuPointer> allocate(size_t) override { return GpuPointer{0x30000}; }
  void release(GpuPointer) override {}
  cudaq_rt::Expected<cudaq_rt::MappedMemory> allocate_mapped(size_t bytes) override {
    void *p = std::calloc(1, bytes);
    return cudaq_rt::MappedMemory{p, reinterpret_cast<GpuPointer>(p)};
  }
  void release_mapped(cudaq_rt::MappedMemory m) override { std::free(m.host); }
  cudaq_rt::Status copy_to_device(GpuPointer dst, std::span<const uint8_t> src) override {
    written[dst].assign(src.begin(), src.end());
    return cudaq_rt::Status::ok();
  }
  // A handler's pointer global holds 0xab00000000 + where the global is.
  cudaq_rt::Status copy_from_device(std::span<uint8_t> dst, GpuPointer src) override {
    std::memset(dst.data(), 0xab, dst.size());
    // The handlers' pointer globals (0x10000 on), read one by one or as a span.
    if (src >= 0x10000 && src < 0x20000)
      for (size_t at = 0; at + sizeof(GpuPointer) <= dst.size(); at += sizeof(GpuPointer)) {
        const GpuPointer address = 0xab00000000 + src + at;
        std::memcpy(dst.data() + at, &address, sizeof address);
      }
    return cudaq_rt::Status::ok();
  }
  cudaq_rt::Expected<cudaq_rt::GpuStream> create_stream() override {
    return reinterpret_cast<cudaq_rt::GpuStream>(0x3);
  }
  void destroy_stream(cudaq_rt::GpuStream) override {}
  cudaq_rt::Status launch(cudaq_rt::GpuFunction, cudaq_rt::LaunchShape, void **args,
                          cudaq_rt::GpuStream) override {
    ++launches;
    params = *static_cast<cudaq_rt_dispatch_params *>(args[0]);
    return cudaq_rt::Status::ok();
  }
  cudaq_rt::StreamState query(cudaq_rt::GpuStream) override {
    if (faults)
      return {true, cudaq_rt::make_error("", "CUDA_ERROR_ILLEGAL_ADDRESS (an illegal memory "
                                             "access was encountered)")};
    return {std::atomic_ref<int>(*const_cast<int *>(params.shutdown_flag)).load() != 0,
            std::nullopt};
  }
};

// A Gpu that only counts its devices: everything else fails, and is not asked of it.
class CountingGpu final : public cudaq_rt::Gpu {
public:
  explicit CountingGpu(int n) : n_(n) {}
  cudaq_rt::Expected<int> device_count() override { return n_; }
  cudaq_rt::Expected<cudaq_rt::GpuDevice> open(int) override {
    return cudaq_rt::make_error("", "not here");
  }
  cudaq_rt::Expected<cudaq_rt::GpuLibrary> load(std::span<const uint8_t>) override { return no(); }
  void unload(cudaq_rt::GpuLibrary) override {}
  cudaq_rt::Expected<cudaq_rt::GpuFunction> kernel(cudaq_rt::GpuLibrary,
                                                   const std::string &) override {
    return no();
  }
  cudaq_rt::Expected<std::optional<cudaq_rt::GpuGlobal>> global(cudaq_rt::GpuLibrary,
                                                                const std::string &) override {
    return no();
  }
  cudaq_rt::Expected<cudaq_rt::GpuPointer> allocate(size_t) override { return no(); }
  void release(cudaq_rt::GpuPointer) override {}
  cudaq_rt::Expected<cudaq_rt::MappedMemory> allocate_mapped(size_t) override { return no(); }
  void release_mapped(cudaq_rt::MappedMemory) override {}
  cudaq_rt::Status copy_to_device(cudaq_rt::GpuPointer, std::span<const uint8_t>) override {
    return no();
  }
  cudaq_rt::Status copy_from_device(std::span<uint8_t>, cudaq_rt::GpuPointer) override {
    return no();
  }
  cudaq_rt::Expected<cudaq_rt::GpuStream> create_stream() override { return no(); }
  void destroy_stream(cudaq_rt::GpuStream) override {}
  cudaq_rt::Status launch(cudaq_rt::GpuFunction, cudaq_rt::LaunchShape, void **,
                          cudaq_rt::GpuStream) override {
    return no();
  }
  cudaq_rt::StreamState query(cudaq_rt::GpuStream) override { return {}; }

private:
  static cudaq_rt::Error no() { return cudaq_rt::make_error("", "no"); }
  int n_;
};
