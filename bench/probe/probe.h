// What the standalone probes in this directory share (each compiles alone, like floor.cu:
// `nvcc -O2 -arch=sm_90 NAME.cu -o NAME` finds this header beside it): the CUDA error check, and
// 16-byte volatile loads and stores the compiler neither splits nor moves (also the bench
// kernels' raw ring, bench/rtt/rtt_kernels.cu).
#pragma once

#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

#define CHECK(x)                                                                                   \
  do {                                                                                             \
    cudaError_t e_ = (x);                                                                          \
    if (e_ != cudaSuccess) {                                                                       \
      std::fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e_));                                \
      std::exit(1);                                                                                \
    }                                                                                              \
  } while (0)

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
