// Probe: what the number of 128-byte lines a frame spans costs a round trip over mapped memory.
//
// One GPU thread serves one slot. A request is k 16-byte cells, each on a line of its own, each
// {lap, data, lap, data}; the host writes the cells after cell 0 first, then cell 0. The GPU loads
// all k cells (and, where the row says so, the shutdown flag) in one batch of independent loads;
// when every half carries the lap, it answers with m cells on m lines of the response ring, cell 0
// last, and the host polls cell 0, then waits for every half of the others. Row "k=1 m=1, no
// flag" is floor.cu's variant A but for the flag; the rows after it add lines one way or the
// other. "8-byte" rows write each request cell as two 8-byte stores instead of one 16-byte store.
//
//   nvcc -O2 -arch=sm_90 ring_lines.cu -o ring_lines && ./ring_lines 100000
//
// Prints: k, m, flag, stores, then min/p50/p90/p99 of the round trip in us.
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
constexpr int kMaxCells = 8;
constexpr int kLineInts = 32; // 128 bytes

// How the response leaves the SM: 0 posted stores alone; 1 then fence.sc.sys
// (__threadfence_system); 2 then fence.acq_rel.sys; 3 cell 0 stored st.release.sys; 4 every cell
// st.mmio.relaxed.sys; 5 then fence.sc.gpu (__threadfence); 6 every cell st.global.wt (write
// through the L2 to system memory); 7 st.global.cs; 8 posted stores while a second warp of the
// block runs fence.sc.sys in a loop.
enum Push { kNone, kFenceSc, kFenceAcqRel, kRelease, kMmio, kFenceGpu, kWt, kCs, kHelper, kPushes };
const char *const kPushNames[] = {"none",           "fence.sc.sys", "fence.acq_rel.sys",
                                  "st.release.sys", "st.mmio.sys",  "fence.sc.gpu",
                                  "st.wt",          "st.cs",        "helper fences"};

__device__ unsigned long long publish_cycles, publish_count;

template <int P> __device__ __forceinline__ void store_cell(uint4 *p, uint4 v, bool last) {
  if (P == kMmio) {
    asm volatile("st.mmio.relaxed.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v.x) : "memory");
    asm volatile("st.mmio.relaxed.sys.global.u32 [%0+4], %1;" ::"l"(p), "r"(v.y) : "memory");
    asm volatile("st.mmio.relaxed.sys.global.u32 [%0+8], %1;" ::"l"(p), "r"(v.z) : "memory");
    asm volatile("st.mmio.relaxed.sys.global.u32 [%0+12], %1;" ::"l"(p), "r"(v.w) : "memory");
  } else if (P == kWt) {
    asm volatile("st.global.wt.v4.u32 [%0], {%1,%2,%3,%4};" ::"l"(p), "r"(v.x), "r"(v.y), "r"(v.z),
                 "r"(v.w)
                 : "memory");
  } else if (P == kCs) {
    asm volatile("st.global.cs.v4.u32 [%0], {%1,%2,%3,%4};" ::"l"(p), "r"(v.x), "r"(v.y), "r"(v.z),
                 "r"(v.w)
                 : "memory");
  } else if (P == kRelease && last) {
    asm volatile("st.release.sys.global.v4.u32 [%0], {%1,%2,%3,%4};" ::"l"(p), "r"(v.x), "r"(v.y),
                 "r"(v.z), "r"(v.w)
                 : "memory");
  } else {
    store16(p, v);
  }
}
template <int P> __device__ __forceinline__ void push() {
  if (P == kFenceSc)
    asm volatile("fence.sc.sys;" ::: "memory");
  else if (P == kFenceAcqRel)
    asm volatile("fence.acq_rel.sys;" ::: "memory");
  else if (P == kFenceGpu)
    asm volatile("fence.sc.gpu;" ::: "memory");
}

template <int K, int M, bool Flag, int P = kNone, bool Packed = false>
__global__ void serve(unsigned *req, unsigned *resp, const volatile int *stop) {
  if (P == kHelper && threadIdx.x >= 32) {
    if (threadIdx.x == 32)
      while (!*stop)
        asm volatile("fence.sc.sys;" ::: "memory");
    return;
  }
  if (threadIdx.x != 0)
    return;
  unsigned long long cycles = 0;
  unsigned lap = 1;
  for (;;) {
    uint4 v[K];
#pragma unroll
    for (int c = 0; c < K; ++c)
      v[c] = load16(reinterpret_cast<const uint4 *>(req + c * kLineInts));
    const int stopping = Flag ? *stop : 0;
    bool ready = true;
#pragma unroll
    for (int c = 0; c < K; ++c)
      ready = ready && v[c].x == lap && v[c].z == lap;
    if (ready) {
      unsigned sum = 0;
#pragma unroll
      for (int c = 0; c < K; ++c)
        sum += v[c].y + v[c].w;
      const long long t0 = clock64();
#pragma unroll
      for (int c = M - 1; c >= 0; --c)
        store_cell<P>(reinterpret_cast<uint4 *>(resp + c * (Packed ? 4 : kLineInts)),
                      make_uint4(lap, sum + c, lap, c), c == 0);
      push<P>();
      cycles += clock64() - t0;
      ++lap;
      continue;
    }
    if (Flag ? stopping : *stop)
      break;
  }
  publish_cycles = cycles;
  publish_count = lap - 1;
}

// The same with the cells side by side on one line, loaded (stored) by lanes 0..K-1 (0..M-1) of
// one warp with one instruction: one coalesced access per direction.
template <int K, int M>
__global__ void serve_warp(unsigned *req, unsigned *resp, const volatile int *stop) {
  const unsigned lane = threadIdx.x;
  unsigned lap = 1;
  for (;;) {
    uint4 v = make_uint4(lap, 0, lap, 0);
    if (lane < K)
      v = load16(reinterpret_cast<const uint4 *>(req + lane * 4));
    const int stopping = *stop;
    const bool ready = __all_sync(0xFFFFFFFFu, v.x == lap && v.z == lap);
    if (ready) {
      unsigned sum = v.y + v.w;
      for (int o = 16; o > 0; o /= 2)
        sum += __shfl_xor_sync(0xFFFFFFFFu, sum, o);
      if (lane < M)
        store16(reinterpret_cast<uint4 *>(resp + lane * 4), make_uint4(lap, sum + lane, lap, lane));
      ++lap;
      continue;
    }
    if (stopping)
      break;
  }
}

struct Row {
  int k, m;
  bool flag, split, coalesced = false;
  int push = kNone;
  bool packed = false; // the response cells side by side on one line, stored by one thread
};

template <int K, int M, bool Flag>
void launch(unsigned *dreq, unsigned *dresp, int *dstop, cudaStream_t s) {
  serve<K, M, Flag><<<1, 1, 0, s>>>(dreq, dresp, dstop);
}

template <int K, int M>
void start_push(int p, unsigned *dreq, unsigned *dresp, int *dstop, cudaStream_t s) {
  switch (p) {
  case kFenceSc:
    return (void)(serve<K, M, true, kFenceSc><<<1, 1, 0, s>>>(dreq, dresp, dstop));
  case kFenceAcqRel:
    return (void)(serve<K, M, true, kFenceAcqRel><<<1, 1, 0, s>>>(dreq, dresp, dstop));
  case kRelease:
    return (void)(serve<K, M, true, kRelease><<<1, 1, 0, s>>>(dreq, dresp, dstop));
  case kMmio:
    return (void)(serve<K, M, true, kMmio><<<1, 1, 0, s>>>(dreq, dresp, dstop));
  case kFenceGpu:
    return (void)(serve<K, M, true, kFenceGpu><<<1, 1, 0, s>>>(dreq, dresp, dstop));
  case kWt:
    return (void)(serve<K, M, true, kWt><<<1, 1, 0, s>>>(dreq, dresp, dstop));
  case kCs:
    return (void)(serve<K, M, true, kCs><<<1, 1, 0, s>>>(dreq, dresp, dstop));
  case kHelper:
    return (void)(serve<K, M, true, kHelper><<<1, 64, 0, s>>>(dreq, dresp, dstop));
  }
}

void start(const Row &r, unsigned *dreq, unsigned *dresp, int *dstop, cudaStream_t s) {
  if (r.push == kFenceGpu && r.packed) {
    if (r.k == 1 && r.m == 5)
      return (void)(serve<1, 5, true, kFenceGpu, true><<<1, 1, 0, s>>>(dreq, dresp, dstop));
    if (r.k == 5 && r.m == 5)
      return (void)(serve<5, 5, true, kFenceGpu, true><<<1, 1, 0, s>>>(dreq, dresp, dstop));
    if (r.k == 5 && r.m == 2)
      return (void)(serve<5, 2, true, kFenceGpu, true><<<1, 1, 0, s>>>(dreq, dresp, dstop));
  }
  if (r.push == kFenceGpu && r.k == 1 && r.m == 5)
    return (void)(serve<1, 5, true, kFenceGpu><<<1, 1, 0, s>>>(dreq, dresp, dstop));
  if (r.push == kFenceGpu && r.k == 5 && r.m == 1)
    return (void)(serve<5, 1, true, kFenceGpu><<<1, 1, 0, s>>>(dreq, dresp, dstop));
  if (r.packed && r.push == kFenceSc && r.k == 5 && r.m == 2)
    return (void)(serve<5, 2, true, kFenceSc, true><<<1, 1, 0, s>>>(dreq, dresp, dstop));
  if (r.packed && r.push == kFenceSc && r.k == 5 && r.m == 5)
    return (void)(serve<5, 5, true, kFenceSc, true><<<1, 1, 0, s>>>(dreq, dresp, dstop));
  if (r.packed && r.push == kFenceSc && r.k == 1 && r.m == 5)
    return (void)(serve<1, 5, true, kFenceSc, true><<<1, 1, 0, s>>>(dreq, dresp, dstop));
  if (r.push == kFenceSc && r.k == 1 && r.m == 5)
    return (void)(serve<1, 5, true, kFenceSc><<<1, 1, 0, s>>>(dreq, dresp, dstop));
  if (r.push == kFenceSc && r.k == 5 && r.m == 1)
    return (void)(serve<5, 1, true, kFenceSc><<<1, 1, 0, s>>>(dreq, dresp, dstop));
  if (r.push != kNone) {
    if (!r.flag)
      return (void)(serve<1, 1, false, kFenceSc><<<1, 1, 0, s>>>(dreq, dresp, dstop));
    if (r.k == 1 && r.m == 1)
      return start_push<1, 1>(r.push, dreq, dresp, dstop, s);
    if (r.k == 5 && r.m == 5)
      return start_push<5, 5>(r.push, dreq, dresp, dstop, s);
    if (r.k == 3 && r.m == 2)
      return start_push<3, 2>(r.push, dreq, dresp, dstop, s);
  }
  if (r.coalesced) {
    if (r.k == 5 && r.m == 5)
      return (void)(serve_warp<5, 5><<<1, 32, 0, s>>>(dreq, dresp, dstop));
    if (r.k == 3 && r.m == 2)
      return (void)(serve_warp<3, 2><<<1, 32, 0, s>>>(dreq, dresp, dstop));
  }
#define ROW(K, M, F)                                                                               \
  if (r.k == K && r.m == M && r.flag == F)                                                         \
  return launch<K, M, F>(dreq, dresp, dstop, s)
  ROW(1, 1, false);
  ROW(1, 1, true);
  ROW(2, 1, true);
  ROW(3, 1, true);
  ROW(5, 1, true);
  ROW(1, 2, true);
  ROW(1, 3, true);
  ROW(1, 5, true);
  ROW(2, 2, true);
  ROW(3, 2, true);
  ROW(3, 3, true);
  ROW(5, 5, true);
#undef ROW
  std::fprintf(stderr, "no kernel for k=%d m=%d\n", r.k, r.m);
  std::exit(1);
}
} // namespace

int main(int argc, char **argv) {
  const int n = argc > 1 ? std::atoi(argv[1]) : 100000;
  const size_t bytes = kMaxCells * kLineInts * sizeof(unsigned);
  const MappedRing ring(bytes);
  unsigned *const req = ring.req, *const resp = ring.resp, *const dreq = ring.dreq,
                  *const dresp = ring.dresp;
  int *const stop = ring.stop, *const dstop = ring.dstop;
  const cudaStream_t s = ring.stream;
  const Row rows[] = {{1, 1, false, false},
                      {1, 1, true, false},
                      {2, 1, true, false},
                      {3, 1, true, false},
                      {5, 1, true, false},
                      {1, 2, true, false},
                      {1, 3, true, false},
                      {1, 5, true, false},
                      {2, 2, true, false},
                      {3, 2, true, false},
                      {3, 3, true, false},
                      {5, 5, true, false},
                      {5, 5, true, true},
                      {3, 2, true, true},
                      {5, 5, true, false, true},
                      {3, 2, true, false, true},
                      {1, 1, true, false, false, kFenceSc},
                      {1, 1, true, false, false, kFenceGpu},
                      {1, 1, true, false, false, kWt},
                      {1, 1, true, false, false, kCs},
                      {1, 1, true, false, false, kHelper},
                      {3, 2, true, false, false, kFenceSc},
                      {3, 2, true, false, false, kFenceGpu},
                      {3, 2, true, false, false, kWt},
                      {3, 2, true, false, false, kCs},
                      {3, 2, true, false, false, kHelper},
                      {5, 5, true, false, false, kFenceSc},
                      {5, 5, true, false, false, kFenceGpu},
                      {5, 5, true, false, false, kWt},
                      {5, 5, true, false, false, kCs},
                      {5, 5, true, false, false, kHelper},
                      {1, 1, false, false, false, kFenceSc}};
  // ./ring_lines N packed: only the rows that split a frame's lines between the two directions
  // and put the response's cells on one line.
  const Row packed_rows[] = {
      {1, 1, true, false, false, kFenceSc}, {5, 1, true, false, false, kFenceSc},
      {1, 5, true, false, false, kFenceSc}, {1, 5, true, false, false, kFenceSc, true},
      {5, 5, true, false, false, kFenceSc}, {5, 5, true, false, false, kFenceSc, true},
      {1, 1, true, false, false, kFenceSc}};
  // ./ring_lines N gpu: the GPU-scope fence against the system-scope one, with the response's
  // cells on lines of their own or on one.
  const Row gpu_rows[] = {
      {1, 1, true, false, false, kFenceSc},       {1, 1, true, false, false, kFenceGpu},
      {5, 1, true, false, false, kFenceSc},       {5, 1, true, false, false, kFenceGpu},
      {1, 5, true, false, false, kFenceGpu},      {1, 5, true, false, false, kFenceGpu, true},
      {5, 5, true, false, false, kFenceGpu},      {5, 5, true, false, false, kFenceGpu, true},
      {5, 2, true, false, false, kFenceSc, true}, {5, 2, true, false, false, kFenceGpu, true},
      {5, 5, true, false, false, kFenceSc, true}, {1, 1, true, false, false, kFenceSc},
      {1, 1, true, false, false, kFenceGpu},      {5, 2, true, false, false, kFenceGpu, true}};
  const bool only_gpu = argc > 2 && std::strcmp(argv[2], "gpu") == 0;
  const bool only_packed = argc > 2 && std::strcmp(argv[2], "packed") == 0;
  std::printf("k m flag stores push                 min    p50    p90    p99 us\n");
  const Row *first = only_gpu ? gpu_rows : only_packed ? packed_rows : rows;
  const size_t count_rows = only_gpu      ? sizeof gpu_rows / sizeof gpu_rows[0]
                            : only_packed ? sizeof packed_rows / sizeof packed_rows[0]
                                          : sizeof rows / sizeof rows[0];
  for (const Row *row = first; row != first + count_rows; ++row) {
    const Row &r = *row;
    std::memset(req, 0, bytes);
    std::memset(resp, 0, bytes);
    *(volatile int *)stop = 0;
    start(r, dreq, dresp, dstop, s);
    CHECK(cudaGetLastError());
    std::vector<double> rt;
    rt.reserve(n);
    long bad = 0;
    for (int i = 1; i <= n + 1000; ++i) {
      const unsigned lap = (unsigned)i;
      const auto t0 = std::chrono::steady_clock::now();
      const int stride = r.coalesced ? 4 : kLineInts;
      for (int c = r.k - 1; c >= 0; --c) {
        unsigned *cell = req + c * stride;
        if (r.split) {
          *(volatile unsigned long long *)cell = lap | (unsigned long long)(lap + c) << 32;
          *(volatile unsigned long long *)(cell + 2) = lap | (unsigned long long)(lap * 3) << 32;
        } else {
          _mm_store_si128((__m128i *)cell,
                          _mm_set_epi32((int)(lap * 3), (int)lap, (int)(lap + c), (int)lap));
        }
      }
      volatile unsigned *c0 = resp;
      while (c0[0] != lap || c0[2] != lap) {
      }
      for (int c = 1; c < r.m; ++c) {
        volatile unsigned *cell = resp + c * (r.packed ? 4 : stride);
        while (cell[0] != lap || cell[2] != lap) {
        }
      }
      const auto t1 = std::chrono::steady_clock::now();
      unsigned sum = 0;
      for (int c = 0; c < r.k; ++c)
        sum += lap + c + lap * 3;
      if (c0[1] != sum)
        ++bad;
      if (i > 1000)
        rt.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
    }
    *(volatile int *)stop = 1;
    CHECK(cudaStreamSynchronize(s));
    std::sort(rt.begin(), rt.end());
    unsigned long long cycles = 0, count = 0;
    if (!r.coalesced) {
      CHECK(cudaMemcpyFromSymbol(&cycles, publish_cycles, sizeof cycles));
      CHECK(cudaMemcpyFromSymbol(&count, publish_count, sizeof count));
    }
    std::printf("%d %d %-4s %-6s %-17s %6.2f %6.2f %6.2f %6.2f  publish %llu cycles%s%s\n", r.k,
                r.m, r.flag ? "yes" : "no", r.split ? "8-byte" : "16", kPushNames[r.push], rt[0],
                rt[rt.size() / 2], rt[rt.size() * 9 / 10], rt[rt.size() * 99 / 100],
                count ? cycles / count : 0ull,
                r.coalesced ? "  (one line, one warp)"
                : r.packed  ? "  (response on one line)"
                            : "",
                bad ? "  WRONG ANSWERS" : "");
  }
  return 0;
}
