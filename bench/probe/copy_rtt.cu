// The copy engine's round trip: N bytes from pinned host memory into device memory and back, on a
// stream of its own, the host waiting for the second copy (a spinning wait: cudaDeviceScheduleSpin).
// Standalone, like floor.cu: `nvcc -O2 -arch=sm_90 copy_rtt.cu -o copy_rtt`, then
//   copy_rtt [ITERATIONS] [SIZE...]   (default 20000; 8 64 256 1024 4096 16384)
// Per size it prints the round trip's p50 and p99, and the payload rate of 64 copies of that
// size each way queued back to back (the link's rate at that size, without the per-copy wait):
//   copy SIZE p50 US p99 US rate GB/s
// bench/payload_sizes.py compares each ring size with it: the payload's time each way at this
// rate is what a frame of that size cannot go below.
#include "probe.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <vector>

namespace {

double us_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t).count();
}

} // namespace

int main(int argc, char **argv) {
  const int iterations = argc > 1 ? std::atoi(argv[1]) : 20000;
  std::vector<size_t> sizes;
  for (int i = 2; i < argc; ++i)
    sizes.push_back(std::strtoull(argv[i], nullptr, 10));
  if (sizes.empty())
    sizes = {8, 64, 256, 1024, 4096, 16384};
  const size_t largest = *std::max_element(sizes.begin(), sizes.end());
  constexpr int kQueued = 64;

  CHECK(cudaSetDeviceFlags(cudaDeviceScheduleSpin));
  cudaStream_t stream;
  CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  unsigned char *host_in, *host_out, *device;
  CHECK(cudaHostAlloc(&host_in, largest * kQueued, cudaHostAllocDefault));
  CHECK(cudaHostAlloc(&host_out, largest * kQueued, cudaHostAllocDefault));
  CHECK(cudaMalloc(&device, largest * kQueued));
  for (size_t i = 0; i < largest * kQueued; ++i)
    host_in[i] = static_cast<unsigned char>(i * 7);

  for (size_t n : sizes) {
    std::vector<double> rtt;
    rtt.reserve(iterations);
    for (int i = 0; i < iterations + 100; ++i) { // the first 100 warm up
      const auto t = std::chrono::steady_clock::now();
      CHECK(cudaMemcpyAsync(device, host_in, n, cudaMemcpyHostToDevice, stream));
      CHECK(cudaMemcpyAsync(host_out, device, n, cudaMemcpyDeviceToHost, stream));
      CHECK(cudaStreamSynchronize(stream));
      if (i >= 100)
        rtt.push_back(us_since(t));
    }
    if (host_out[n - 1] != host_in[n - 1]) {
      std::fprintf(stderr, "copy_rtt: the copy of %zu bytes came back wrong\n", n);
      return 1;
    }
    std::sort(rtt.begin(), rtt.end());
    // The rate: kQueued copies each way, queued at once, timed to the last one's end.
    double best = 1e300;
    for (int rep = 0; rep < 20; ++rep) {
      const auto t = std::chrono::steady_clock::now();
      for (int k = 0; k < kQueued; ++k)
        CHECK(cudaMemcpyAsync(device + k * n, host_in + k * n, n, cudaMemcpyHostToDevice, stream));
      for (int k = 0; k < kQueued; ++k)
        CHECK(cudaMemcpyAsync(host_out + k * n, device + k * n, n, cudaMemcpyDeviceToHost, stream));
      CHECK(cudaStreamSynchronize(stream));
      best = std::min(best, us_since(t));
    }
    std::printf("copy %zu p50 %.2f us p99 %.2f us rate %.3f GB/s\n", n, rtt[rtt.size() / 2],
                rtt[rtt.size() * 99 / 100], 2.0 * kQueued * double(n) / best / 1e3);
  }
  return 0;
}
