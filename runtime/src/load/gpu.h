// The CUDA driver calls the load path makes, behind one interface: the real driver
// (driver_gpu(), libcuda loaded with dlopen so that a program starts, and says what is missing,
// on a machine without one) and, in the tests, a fake that plays a GPU whose kernel never stops
// or faults. No CUDA header is needed to use it.
#pragma once

#include "cudaq_rt/error.h"
#include "formats/target.h"

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace cudaq_rt {

struct GpuDevice {
  int ordinal = 0;
  std::string name;       // "NVIDIA H200"
  int sm = 0;             // compute capability as major * 10 + minor: 90
  int driver_version = 0; // cuDriverGetVersion: 13000
  std::string arch() const { return cat("sm_", sm); }
  std::string driver() const { return cat(driver_version / 1000, ".", driver_version % 1000 / 10); }
};

// Handles, opaque outside the implementation.
using GpuLibrary = void *;
using GpuFunction = void *;
using GpuStream = void *;
using GpuPointer = uint64_t; // a device address

struct GpuGlobal {
  GpuPointer address = 0;
  size_t size = 0;
};

// Host memory the GPU reads and writes directly (mapped, pinned).
struct MappedMemory {
  void *host = nullptr;
  GpuPointer device = 0;
};

struct LaunchShape {
  unsigned blocks = 1;
  unsigned threads = 1;
  unsigned shared_bytes = 0; // dynamic shared memory per block (Gpu::allow_dynamic_shared)
};

// What a stream's work has come to.
struct StreamState {
  bool done = false;          // everything queued on it has finished
  std::optional<Error> fault; // it failed: the kernel faulted, trapped, was killed
};

class Gpu {
public:
  virtual ~Gpu() = default;

  // Initialises the driver, checks the device exists and makes its primary context current on the
  // calling thread (the one the runtime API, and so a bridge built with it, uses too).
  virtual Expected<GpuDevice> open(int ordinal) = 0;
  // Why this machine has no GPU at all (no_gpu_reason()), or nullopt: a GPU, or a fake one.
  virtual std::optional<std::string> absent() { return std::nullopt; }
  // What open() says of the device, without a context: its name, arch and driver.
  virtual Expected<GpuDevice> describe(int ordinal) { return open(ordinal); }

  // How many GPUs the driver sees (cudaq-rt-run --device all).
  virtual Expected<int> device_count() {
    return make_error("", "cannot count this machine's GPUs");
  }

  // Loads a cubin into the current context, with its kernels and globals loaded at once: a
  // module that CUDA's lazy loading brings in while a persistent kernel runs can deadlock.
  virtual Expected<GpuLibrary> load(std::span<const uint8_t> image) = 0;
  virtual void unload(GpuLibrary library) = 0;
  virtual Expected<GpuFunction> kernel(GpuLibrary library, const std::string &name) = 0;
  // nullopt: the module has no such global.
  virtual Expected<std::optional<GpuGlobal>> global(GpuLibrary library,
                                                    const std::string &name) = 0;

  virtual Expected<GpuPointer> allocate(size_t bytes) = 0;
  virtual void release(GpuPointer p) = 0;
  virtual Expected<MappedMemory> allocate_mapped(size_t bytes) = 0;
  virtual void release_mapped(MappedMemory m) = 0;
  // Synchronous copies: only before a persistent kernel starts (they could queue behind it).
  virtual Status copy_to_device(GpuPointer dst, std::span<const uint8_t> src) = 0;
  virtual Status copy_from_device(std::span<uint8_t> dst, GpuPointer src) = 0;

  // A stream that does not synchronise with the legacy default stream.
  virtual Expected<GpuStream> create_stream() = 0;
  virtual void destroy_stream(GpuStream stream) = 0;
  // Where the GPU has thread block clusters (sm_90 on), each block is launched as a cluster of
  // one: the bulk copy engine's shared-to-shared copy (cp.async.bulk.shared::cluster.shared::cta)
  // then works within a block, where a launch without a cluster faults on it with an illegal
  // instruction (bench/probe/smem_bulk.cu). A handler that uses it checks %is_explicit_cluster.
  virtual Status launch(GpuFunction kernel, LaunchShape shape, void **args, GpuStream stream) = 0;
  // Lets `kernel` be launched with `bytes` of dynamic shared memory a block (past 48 KB a kernel
  // must opt in); false where this GPU cannot give it that many beside its static shared memory.
  virtual bool allow_dynamic_shared(GpuFunction, unsigned bytes) { return bytes == 0; }
  virtual StreamState query(GpuStream stream) = 0;
};

// The machine's CUDA driver. Without one, every call fails with a line that says so.
Gpu &driver_gpu();

// The archs of the GPUs `gpu` sees, each once, in device order: `--arch native`.
Expected<std::vector<TargetArch>> gpu_archs(Gpu &gpu = driver_gpu());

// Why this machine has no GPU to run on (no driver installed, or no device), or nullopt when it
// has one. A test skips on the first; any other failure (a driver too old, a device that cannot
// be opened) is on a machine with a GPU, and worth failing on.
std::optional<std::string> no_gpu_reason();

} // namespace cudaq_rt
