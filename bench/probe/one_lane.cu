// Probe: what one serving lane pays for the 31 other lanes of its warp (the wide receive that was
// tried for the unified kernel, bench/payload_sizes.md: lane 0 serves while the others wait).
//
// One block, lane 0 does the work, the others wait for it at __syncwarp, at a __shfl_sync, or
// sleeping on a shared flag (mode 1 to 3), against a block of one thread (mode 0):
//   - a chain of dependent shared-memory loads and stores (SM cycles an iteration);
//   - dependent 4-byte loads of mapped host memory, one round trip each;
//   - an indirect call of a 16-byte and a 1 KB echo between shared buffers (a handler's call);
// and the round trip of one probe as the loopback ring makes it (5 cells on 5 lines and a flag,
// all in flight together) from lane 0 alone, with a second lane loading a sixth line (the peek),
// and with 31 more lanes loading a line each.
//
//   nvcc -O2 -arch=sm_90 -rdc=true one_lane.cu -o one_lane && ./one_lane
//
// Prints cycles per iteration (the best of 20 launches for the first two, the mean for the rest).
#include "probe.h"

#include <cstring>

namespace {

typedef int (*handler_fn)(const unsigned char *, unsigned char *, unsigned);

__device__ __noinline__ int echo(const unsigned char *in, unsigned char *out, unsigned n) {
  for (unsigned i = 0; i < n; i += 16)
    *reinterpret_cast<uint4 *>(out + i) = *reinterpret_cast<const uint4 *>(in + i);
  return 0;
}
__device__ handler_fn handlers[1] = {echo};

__device__ __noinline__ unsigned long long work(volatile unsigned *mapped, unsigned *sh, int iters,
                                                bool pcie) {
  const long long t0 = clock64();
  unsigned acc = 0;
  for (int i = 0; i < iters; ++i) {
    if (pcie) {
      acc += mapped[(i + acc) & 7];
    } else {
      sh[(i + acc) & 255] = acc + i;
      acc += sh[(i * 7 + acc) & 255];
    }
  }
  sh[0] = acc;
  return clock64() - t0;
}

// Lane 0 works (kind 0: shared chain, 1: mapped loads, 2: a 16-byte call, 3: a 1 KB call); the
// others wait as `mode` says.
__global__ void lane_work(volatile unsigned *mapped, unsigned long long *out, int iters, int kind,
                          int mode) {
  __shared__ unsigned sh[256];
  __shared__ __align__(16) unsigned char in[1024], res[1024];
  __shared__ volatile int done;
  const unsigned lane = threadIdx.x;
  if (lane == 0)
    done = 0;
  __syncwarp();
  unsigned long long t = 0;
  if (kind < 2) {
    if (mode == 3) {
      if (lane == 0) {
        t = work(mapped, sh, iters, kind == 1);
        done = 1;
      } else {
        while (!done)
          __nanosleep(200);
      }
    } else {
      if (lane == 0)
        t = work(mapped, sh, iters, kind == 1);
      if (mode == 1)
        __syncwarp();
      if (mode == 2)
        t = __shfl_sync(0xFFFFFFFFu, t, 0);
    }
  } else {
    const handler_fn f = handlers[0];
    const unsigned n = kind == 2 ? 16 : 1024;
    int acc = 0;
    for (int i = 0; i < iters; ++i) {
      const long long t0 = clock64();
      if (lane == 0)
        acc += f(in, res, n);
      if (mode == 1)
        __syncwarp();
      if (mode == 2)
        acc += __shfl_sync(0xFFFFFFFFu, acc, 0);
      if (lane == 0)
        t += clock64() - t0;
    }
    sh[0] = acc;
  }
  if (lane == 0)
    out[0] = t;
}

// One probe a loop: lane 0 loads 5 cells (each on a line of its own) and the flag; with `peek`
// lane 1 loads a sixth line, with `all` every other lane a line of its own.
__global__ void probe_rtt(const volatile uint4 *ring, const volatile int *flag,
                          unsigned long long *out, bool peek, bool all, int iters) {
  const unsigned lane = threadIdx.x;
  unsigned long long sum = 0;
  unsigned acc = 0;
  for (int i = 0; i < iters; ++i) {
    const long long t0 = clock64();
    uint4 a = {0, 0, 0, 0}, b = a, c = a, d = a, e = a;
    int f = 0;
    if (lane == 0) {
      a = load16(ring);
      b = load16(ring + 8);
      c = load16(ring + 16);
      d = load16(ring + 24);
      e = load16(ring + 32);
      f = *flag;
    } else if ((peek && lane == 1) || all) {
      a = load16(ring + 64 + 8 * lane);
    }
    acc += __ballot_sync(0xFFFFFFFFu, (a.x ^ b.x ^ c.x ^ d.x ^ e.x ^ unsigned(f)) == 12345u);
    if (lane == 0)
      sum += clock64() - t0;
  }
  if (lane == 0) {
    out[0] = sum / iters;
    out[1] = acc;
  }
}

} // namespace

int main() {
  void *host;
  CHECK(cudaHostAlloc(&host, 1 << 16, cudaHostAllocMapped));
  std::memset(host, 0, 1 << 16);
  void *dev;
  CHECK(cudaHostGetDevicePointer(&dev, host, 0));
  unsigned long long *out;
  CHECK(cudaMallocManaged(&out, 16));
  const char *waits[] = {"one-thread block", "others at __syncwarp", "others at __shfl_sync",
                         "others asleep on a flag"};
  const char *kinds[] = {"shared chain", "mapped load", "call, 16 B echo", "call, 1 KB echo"};
  for (int kind = 0; kind < 4; ++kind) {
    const int iters = kind == 0 ? 20000 : kind == 1 ? 200 : 1000;
    for (int mode = 0; mode < 4; ++mode) {
      if (kind >= 2 && mode == 3)
        continue;
      unsigned long long best = ~0ull;
      for (int r = 0; r < 20; ++r) {
        lane_work<<<1, mode == 0 ? 1 : 32>>>(static_cast<volatile unsigned *>(dev), out, iters,
                                             kind, mode);
        CHECK(cudaDeviceSynchronize());
        best = out[0] < best ? out[0] : best;
      }
      std::printf("%-16s %-24s %8.1f cycles an iteration\n", kinds[kind], waits[mode],
                  double(best) / iters);
    }
  }
  const char *shapes[] = {"lane 0 alone, one-thread block", "lane 0 alone, 32 lanes",
                          "lane 0 and a peeking lane", "lane 0 and 31 lanes a line each"};
  for (int shape = 0; shape < 4; ++shape) {
    probe_rtt<<<1, shape == 0 ? 1 : 32>>>(
        static_cast<const volatile uint4 *>(dev),
        reinterpret_cast<const volatile int *>(static_cast<char *>(dev) + 32768), out, shape == 2,
        shape == 3, 2000);
    CHECK(cudaDeviceSynchronize());
    std::printf("probe, %-32s %6llu cycles\n", shapes[shape], out[0]);
  }
  return 0;
}
