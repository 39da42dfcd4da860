// Probe: does a GPU find a host's request sooner when it keeps several polls in flight, and when a
// second warp polls while the serving warp waits on its fence?
//
// floor.cu's serving thread polls with one load at a time and, after answering, waits on
// fence.sc.sys (about 630 ns on the H200: the response's stores reach the host ~0.8 us late
// without it) before it polls again. A load to mapped host memory takes about 1 us there and back,
// so a request is found, on average, half a poll period after it lands, plus the way back.
//
// Rows:
//   floor            floor.cu's variant A (one thread: poll, answer, fence, poll);
//   poll before fence  the same, but the next poll's load is issued between the response's store
//                    and the fence (d=D: D SM cycles after the store);
//   split K=k d=D m=M  two warps of one block: lane 0 of warp 0 polls, keeping k loads of the
//                    request in flight, issued at least D SM cycles apart, to M copies of it
//                    (the host writes M, each on a line of its own: M = 1 tests whether loads
//                    of one line in flight together are answered apart); it hands a request to
//                    lane 0 of warp 1 through shared memory, which answers it and fences.
//
//   nvcc -O2 -arch=sm_90 poll_overlap.cu -o poll_overlap && ./poll_overlap 100000
//
// Prints per row min/p50/p90/p99 of the round trip in us, and the GPU's loads per request.
#include "probe.h"

#include <cuda_runtime.h>
#include <emmintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace {
constexpr int kMaxMirrors = 8;
constexpr int kLineCells = 8; // 16-byte cells per 128-byte line
constexpr unsigned kStop = 0x7FFFFFFFu;

__device__ __forceinline__ bool valid(const uint4 &r, unsigned seen) {
  return r.x != seen && r.x == r.w && r.z == 3u * r.x;
}

__device__ unsigned long long g_loads;

__global__ void floor_kernel(const uint4 *req, uint4 *resp) {
  unsigned seen = 0;
  unsigned long long loads = 0;
  for (;;) {
    const uint4 r = load16(req);
    ++loads;
    if (!valid(r, seen))
      continue;
    seen = r.x;
    if (r.x == kStop)
      break;
    store16(resp, make_uint4(r.x, 0, r.z + 1, r.x));
    __threadfence_system();
  }
  g_loads = loads;
}

// floor_kernel with the next poll's load issued before the fence, `delay` SM cycles after the
// response's store (the fence then waits for it too).
__global__ void prefence_kernel(const uint4 *req, uint4 *resp, long long delay) {
  unsigned seen = 0;
  unsigned long long loads = 1;
  uint4 r = load16(req);
  for (;;) {
    if (!valid(r, seen)) {
      r = load16(req);
      ++loads;
      continue;
    }
    seen = r.x;
    if (r.x == kStop)
      break;
    store16(resp, make_uint4(r.x, 0, r.z + 1, r.x));
    const long long t = clock64();
    while (clock64() - t < delay) {
    }
    r = load16(req);
    ++loads;
    __threadfence_system();
  }
  g_loads = loads;
}

struct Handoff {
  unsigned seq;
  uint4 data;
};

template <int K>
__device__ void poll(const uint4 *req, int mirrors, long long spacing, volatile Handoff *h) {
  uint4 v[K];
  unsigned seen = 0;
  unsigned long long loads = 0;
  long long t = clock64();
#pragma unroll
  for (int j = 0; j < K; ++j) {
    while (clock64() - t < spacing) {
    }
    t = clock64();
    v[j] = load16(req + (j % mirrors) * kLineCells);
  }
  for (;;) {
#pragma unroll
    for (int j = 0; j < K; ++j) {
      const uint4 r = v[j];
      if (valid(r, seen)) {
        seen = r.x;
        h->data.x = r.x;
        h->data.z = r.z;
        __threadfence_block();
        h->seq = r.x;
        if (r.x == kStop) {
          g_loads = loads;
          return;
        }
      }
      v[j] = load16(req + (j % mirrors) * kLineCells);
      ++loads;
      while (clock64() - t < spacing) {
      }
      t = clock64();
    }
  }
}

__global__ void split_kernel(const uint4 *req, uint4 *resp, int k, int mirrors, long long spacing) {
  __shared__ Handoff handoff;
  volatile Handoff *h = &handoff;
  if (threadIdx.x == 0) {
    h->seq = 0;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    switch (k) {
    case 1:
      poll<1>(req, mirrors, spacing, h);
      break;
    case 2:
      poll<2>(req, mirrors, spacing, h);
      break;
    case 4:
      poll<4>(req, mirrors, spacing, h);
      break;
    default:
      poll<8>(req, mirrors, spacing, h);
      break;
    }
  } else if (threadIdx.x == 32) {
    unsigned seen = 0;
    for (;;) {
      unsigned s;
      while ((s = h->seq) == seen) {
      }
      seen = s;
      __threadfence_block();
      const unsigned z = h->data.z;
      if (s == kStop)
        break;
      store16(resp, make_uint4(s, 0, z + 1, s));
      __threadfence_system();
    }
  }
}

enum Kernel { kFloor, kSplit, kPrefence };
struct Row {
  const char *name;
  Kernel kernel;
  int k, mirrors;    // kSplit: loads in flight, copies of the request
  long long spacing; // kSplit: cycles between loads; kPrefence: from the store to the load
};
} // namespace

int main(int argc, char **argv) {
  const int n = argc > 1 ? std::atoi(argv[1]) : 100000;
  uint4 *req, *resp, *dreq, *dresp;
  CHECK(cudaHostAlloc(&req, kMaxMirrors * 128, cudaHostAllocMapped));
  CHECK(cudaHostAlloc(&resp, 128, cudaHostAllocMapped));
  CHECK(cudaHostGetDevicePointer(reinterpret_cast<void **>(&dreq), req, 0));
  CHECK(cudaHostGetDevicePointer(reinterpret_cast<void **>(&dresp), resp, 0));
  cudaStream_t stream;
  CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const Row rows[] = {
      {"floor", kFloor, 1, 1, 0},
      {"poll before fence", kPrefence, 1, 1, 0},
      {"poll before fence d=200", kPrefence, 1, 1, 200},
      {"poll before fence d=400", kPrefence, 1, 1, 400},
      {"poll before fence d=800", kPrefence, 1, 1, 800},
      {"floor", kFloor, 1, 1, 0},
      {"split K=1", kSplit, 1, 1, 0},
      {"split K=2 d=1000 m=1", kSplit, 2, 1, 1000},
      {"split K=2 d=1000 m=2", kSplit, 2, 2, 1000},
      {"split K=4 d=500 m=1", kSplit, 4, 1, 500},
      {"split K=4 d=500 m=4", kSplit, 4, 4, 500},
      {"split K=8 d=250 m=8", kSplit, 8, 8, 250},
      {"split K=8 d=120 m=8", kSplit, 8, 8, 120},
      {"floor", kFloor, 1, 1, 0},
  };
  for (const Row &row : rows) {
    std::memset(req, 0, kMaxMirrors * 128);
    std::memset(resp, 0, 128);
    if (row.kernel == kPrefence)
      prefence_kernel<<<1, 1, 0, stream>>>(dreq, dresp, row.spacing);
    else if (row.kernel == kSplit)
      split_kernel<<<1, 64, 0, stream>>>(dreq, dresp, row.k, row.mirrors, row.spacing);
    else
      floor_kernel<<<1, 1, 0, stream>>>(dreq, dresp);
    CHECK(cudaGetLastError());
    std::vector<double> rt;
    long bad = 0;
    auto send = [&](unsigned i) {
      for (int j = row.mirrors - 1; j >= 0; --j)
        _mm_store_si128(reinterpret_cast<__m128i *>(req + j * kLineCells),
                        _mm_set_epi32(int(i), int(3u * i), 0, int(i)));
    };
    for (int i = 1; i <= n + 1000; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      send(unsigned(i));
      uint4 o;
      do {
        // One 16-byte load, in asm: the compiler may otherwise split it and load z before x.
        __m128i v;
        asm volatile("movdqa %1, %0" : "=x"(v) : "m"(*reinterpret_cast<const __m128i *>(resp)));
        _mm_storeu_si128(reinterpret_cast<__m128i *>(&o), v);
      } while (o.x != unsigned(i) || o.w != unsigned(i));
      const auto t1 = std::chrono::steady_clock::now();
      if (o.z != 3u * unsigned(i) + 1 && ++bad <= 3)
        std::printf("  wrong: request %d got {%u, %u, %u, %u}\n", i, o.x, o.y, o.z, o.w);
      if (i > 1000)
        rt.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
    }
    send(kStop);
    CHECK(cudaStreamSynchronize(stream));
    unsigned long long loads = 0;
    CHECK(cudaMemcpyFromSymbol(&loads, g_loads, sizeof loads));
    std::sort(rt.begin(), rt.end());
    const size_t m = rt.size();
    std::printf("%-22s min %.2f p50 %.2f p90 %.2f p99 %.2f us  loads/request %.1f  wrong %ld\n",
                row.name, rt[0], rt[m / 2], rt[m * 9 / 10], rt[m * 99 / 100],
                double(loads) / double(n + 1000), bad);
  }
  return 0;
}
