// What the standalone probes in this directory share (each compiles alone, like floor.cu:
// `nvcc -O2 -arch=sm_90 NAME.cu -o NAME` finds this header beside it): the CUDA error check,
// 16-byte volatile loads and stores the compiler neither splits nor moves (also the bench
// kernels' raw ring, bench/rtt/rtt_kernels.cu), and one bulk copy engine transfer into shared
// memory (bulk_in).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CHECK(x)                                                                                   \
  do {                                                                                             \
    cudaError_t e_ = (x);                                                                          \
    if (e_ != cudaSuccess) {                                                                       \
      std::fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e_));                                \
      std::exit(1);                                                                                \
    }                                                                                              \
  } while (0)

// The command line the size probes share, `NAME [ITERATIONS] [SIZE...]`: ITERATIONS (default
// 20000) at least 1, each SIZE (default `fallback`) 1 to `largest` bytes; otherwise says why and
// exits with 2.
struct ProbeArgs {
  int iterations;
  std::vector<uint32_t> sizes;
};
static ProbeArgs probe_args(int argc, char **argv, const char *name, std::vector<uint32_t> fallback,
                            uint32_t largest) {
  ProbeArgs a{argc > 1 ? std::atoi(argv[1]) : 20000, {}};
  for (int i = 2; i < argc; ++i)
    a.sizes.push_back(uint32_t(std::strtoul(argv[i], nullptr, 10)));
  if (a.sizes.empty())
    a.sizes = fallback;
  if (a.iterations < 1) {
    std::fprintf(stderr, "%s: ITERATIONS must be at least 1\n", name);
    std::exit(2);
  }
  for (uint32_t n : a.sizes)
    if (n == 0 || n > largest) {
      std::fprintf(stderr, "%s: sizes are 1 to %u bytes\n", name, largest);
      std::exit(2);
    }
  return a;
}

static __device__ __forceinline__ uint4 load16(const volatile uint4 *p) {
  uint4 v;
  asm volatile("ld.volatile.global.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p)
               : "memory");
  return v;
}
static __device__ __forceinline__ void store16(volatile uint4 *p, uint4 v) {
  asm volatile("st.volatile.global.v4.u32 [%0], {%1,%2,%3,%4};" ::"l"(p), "r"(v.x), "r"(v.y),
               "r"(v.z), "r"(v.w)
               : "memory");
}

// The bulk copy engine (sm_90 and newer): `bytes` (a multiple of 16) from global memory at
// `from` into shared memory at `to`, counted on the mbarrier `bar` (initialised for one arrival),
// waited for at parity `phase`, which it flips. The proxy fence orders this thread's earlier
// accesses before the engine's.
static __device__ __forceinline__ void bulk_in(void *to, const void *from, uint32_t bytes,
                                               unsigned long long *bar, uint32_t &phase) {
  const uint32_t b = (uint32_t)__cvta_generic_to_shared(bar);
  asm volatile("fence.proxy.async;" ::: "memory");
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(b), "r"(bytes)
               : "memory");
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], "
               "%2, [%3];" ::"r"((uint32_t)__cvta_generic_to_shared(to)),
               "l"(from), "r"(bytes), "r"(b)
               : "memory");
  uint32_t done = 0;
  do
    asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; "
                 "selp.u32 %0, 1, 0, p; }"
                 : "=r"(done)
                 : "r"(b), "r"(phase)
                 : "memory");
  while (!done);
  phase ^= 1u;
}

// A request ring and a response ring of `bytes` each and a shutdown flag in mapped pinned host
// memory, their device addresses, and a non-blocking stream: what each probe's host side starts
// with. (A probe runs once and exits: nothing is freed.)
struct MappedRing {
  unsigned *req = nullptr, *resp = nullptr, *dreq = nullptr, *dresp = nullptr;
  int *stop = nullptr, *dstop = nullptr;
  cudaStream_t stream = nullptr;
  explicit MappedRing(size_t bytes) {
    CHECK(cudaHostAlloc(&req, bytes, cudaHostAllocMapped));
    CHECK(cudaHostAlloc(&resp, bytes, cudaHostAllocMapped));
    CHECK(cudaHostAlloc(&stop, 128, cudaHostAllocMapped));
    CHECK(cudaHostGetDevicePointer((void **)&dreq, req, 0));
    CHECK(cudaHostGetDevicePointer((void **)&dresp, resp, 0));
    CHECK(cudaHostGetDevicePointer((void **)&dstop, stop, 0));
    CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  }
};
