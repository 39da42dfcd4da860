// Probe: what can a host thread do to a GPU's context while a persistent kernel runs in it?
// A reload wants to load the next module, resolve its kernel, globals and handlers, and write its
// function table while the old kernel still serves, so that the gap between the two kernels is
// only the stop and the launch. Each operation runs on a second thread while a one-thread kernel
// spins on a mapped flag on a non-blocking stream (as the dispatch kernel does). If it has not
// returned within 1 s, the kernel is told to stop and the operation is timed again: it "waits for
// the kernel". Each is also timed with no kernel running.
//
//   python3 load_while_serving_modules.py 1 > small.cu && nvcc -cubin -arch=sm_90 -o small.cubin small.cu
//   (and 3000 for big.cu: about 1.3 MB of cubin, 3,000 functions)
//   nvcc -O2 -arch=sm_90 load_while_serving.cu -lcuda -o lws && ./lws small.cubin [big.cubin]
//
// Prints, per operation: its time idle, its time beside the kernel (or how long after the stop
// it returned), and whether the kernel kept running (its heartbeat advanced) meanwhile. Each is
// timed beside the kernel first, on fresh state (a library loaded but not yet resolved in the
// context), then idle on the same.
#include <cuda.h>
#include <cuda_runtime.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#define CU(x)                                                                                      \
  do {                                                                                             \
    CUresult r_ = (x);                                                                             \
    if (r_ != CUDA_SUCCESS) {                                                                      \
      const char *s_ = nullptr;                                                                    \
      cuGetErrorName(r_, &s_);                                                                     \
      std::fprintf(stderr, "%s: %s\n", #x, s_ ? s_ : "?");                                         \
      std::exit(1);                                                                                \
    }                                                                                              \
  } while (0)

namespace {

__global__ void spin(volatile int *stop, volatile unsigned long long *beats) {
  unsigned long long n = 0;
  while (!*stop)
    *beats = ++n;
}

using Clock = std::chrono::steady_clock;
double ms(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

std::vector<char> read_file(const char *path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "cannot open %s\n", path);
    std::exit(1);
  }
  return {std::istreambuf_iterator<char>(in), {}};
}

struct Probe {
  int *stop_host = nullptr;
  int *stop_dev = nullptr;
  unsigned long long *beats_host = nullptr;
  unsigned long long *beats_dev = nullptr;
  cudaStream_t kernel_stream{};

  Probe() {
    cudaHostAlloc(&stop_host, 64, cudaHostAllocMapped);
    cudaHostAlloc(&beats_host, 64, cudaHostAllocMapped);
    cudaHostGetDevicePointer(&stop_dev, stop_host, 0);
    cudaHostGetDevicePointer(&beats_dev, beats_host, 0);
    cudaStreamCreateWithFlags(&kernel_stream, cudaStreamNonBlocking);
    // The spin kernel's own module is loaded now, not lazily under the first test.
    *stop_host = 1;
    spin<<<1, 1, 0, kernel_stream>>>(stop_dev, beats_dev);
    cudaStreamSynchronize(kernel_stream);
  }

  // `op` beside the spinning kernel, then idle; `setup` (untimed) before each, `undo` after.
  void run(const char *name, const std::function<void()> &setup, const std::function<void()> &op,
           const std::function<void()> &undo) {
    setup();
    *(volatile int *)stop_host = 0;
    *(volatile unsigned long long *)beats_host = 0;
    spin<<<1, 1, 0, kernel_stream>>>(stop_dev, beats_dev);
    while (*(volatile unsigned long long *)beats_host == 0) {
    }
    std::atomic<bool> done{false};
    Clock::time_point finished;
    const auto started = Clock::now();
    const unsigned long long beats_before = *(volatile unsigned long long *)beats_host;
    std::thread worker([&] {
      cuCtxSetCurrent(context());
      op();
      finished = Clock::now();
      done.store(true);
    });
    const auto deadline = started + std::chrono::seconds(1);
    while (!done.load() && Clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    const bool waited = !done.load();
    const unsigned long long beats_during = *(volatile unsigned long long *)beats_host;
    const auto stopped_at = Clock::now();
    *(volatile int *)stop_host = 1;
    worker.join();
    cudaStreamSynchronize(kernel_stream);
    undo();

    setup();
    auto t = Clock::now();
    op();
    const double idle = ms(t, Clock::now());
    undo();
    if (waited)
      std::printf("%-34s idle %8.3f ms   beside the kernel: WAITS for it (returned %.3f ms "
                  "after the stop)\n",
                  name, idle, ms(stopped_at, finished));
    else
      std::printf("%-34s idle %8.3f ms   beside the kernel %8.3f ms   kernel ran on: %s\n", name,
                  idle, ms(started, finished), beats_during > beats_before ? "yes" : "NO");
    std::fflush(stdout);
  }

  static CUcontext context() {
    CUcontext c;
    cuCtxGetCurrent(&c);
    static CUcontext saved = c;
    return saved;
  }
};

} // namespace

int main(int argc, char **argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s MODULE.cubin [BIG.cubin]\n", argv[0]);
    return 2;
  }
  const char *loading = std::getenv("CUDA_MODULE_LOADING");
  std::printf("CUDA_MODULE_LOADING=%s\n", loading ? loading : "(unset: LAZY)");
  cudaFree(nullptr);
  Probe::context();
  Probe p;

  std::vector<std::pair<std::string, std::vector<char>>> images;
  for (int i = 1; i < argc; ++i)
    images.emplace_back(argv[i], read_file(argv[i]));

  CUlibrary lib = nullptr;
  CUmodule mod = nullptr;
  CUdeviceptr mem = 0;
  CUstream other;
  CU(cuStreamCreate(&other, CU_STREAM_NON_BLOCKING));
  unsigned char bytes[4096] = {};
  auto none = [] {};
  auto alloc = [&] { CU(cuMemAlloc(&mem, 1 << 20)); };
  auto free = [&] {
    if (mem)
      CU(cuMemFree(mem));
    mem = 0;
  };

  p.run("cuMemAlloc 1 MiB", none, alloc, free);
  p.run("cuMemFree", alloc, free, none);
  p.run(
      "cuMemcpyHtoD 4 KiB", alloc, [&] { CU(cuMemcpyHtoD(mem, bytes, sizeof bytes)); }, free);
  p.run(
      "cuMemcpyDtoH 8 B", alloc, [&] { CU(cuMemcpyDtoH(bytes, mem, 8)); }, free);
  p.run(
      "cuMemcpyHtoDAsync 4 KiB + sync", alloc,
      [&] {
        CU(cuMemcpyHtoDAsync(mem, bytes, sizeof bytes, other));
        CU(cuStreamSynchronize(other));
      },
      free);

  for (auto &entry : images) {
    const std::string &path = entry.first;
    const std::vector<char> &image = entry.second;
    const std::string what = path.substr(path.find_last_of('/') + 1);
    auto load = [&] {
      CU(cuLibraryLoadData(&lib, image.data(), nullptr, nullptr, 0, nullptr, nullptr, 0));
    };
    auto unload = [&] {
      if (lib)
        CU(cuLibraryUnload(lib));
      lib = nullptr;
    };
    CUfunction f = nullptr;
    auto resolve_kernel = [&] {
      CUkernel k;
      CU(cuLibraryGetKernel(&k, lib, "target"));
      CU(cuKernelGetFunction(&f, k));
      CU(cuFuncLoad(f));
    };
    auto read_global = [&] {
      CUdeviceptr g;
      size_t size;
      CU(cuLibraryGetGlobal(&g, &size, lib, "ptrs"));
      CU(cuMemcpyDtoH(bytes, g, 8));
    };
    std::printf("%s (%zu bytes):\n", what.c_str(), image.size());
    p.run("  cuLibraryLoadData", none, load, unload);
    p.run("  then kernel + cuFuncLoad", load, resolve_kernel, unload);
    p.run("  then global + cuMemcpyDtoH", load, read_global, unload);
    p.run(
        "  then launch on another stream",
        [&] {
          load();
          resolve_kernel();
          alloc();
        },
        [&] {
          void *args[] = {&mem};
          CU(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, other, args, nullptr));
          CU(cuStreamSynchronize(other));
        },
        [&] {
          unload();
          free();
        });
    p.run(
        "  cuLibraryUnload, resolved",
        [&] {
          load();
          resolve_kernel();
          read_global();
        },
        unload, none);
    p.run(
        "  cuModuleLoadData", none, [&] { CU(cuModuleLoadData(&mod, image.data())); },
        [&] { CU(cuModuleUnload(mod)); });
    p.run(
        "  cuModuleUnload", [&] { CU(cuModuleLoadData(&mod, image.data())); },
        [&] { CU(cuModuleUnload(mod)); }, none);
  }
  std::printf("done\n");
  return 0;
}
