// Probe: can a request of several cells cost the GPU what one cell costs, if its cells share one
// 128-byte line and the line is read in one access? ring_lines.cu measured a 5-cell request on 5
// lines at 0.3 us (p50) over a 1-cell one; cells on one line read by one thread's loads do not
// overlap (bench/loopback_rtt.md). Here the request's k cells lie side by side on one line and the
// GPU reads them
//   lines: one thread, k 16-byte volatile loads, each cell on a line of its own (today's ring);
//   warp:  lanes 0..k-1 of one warp, one 16-byte volatile load each (one coalesced access);
//   bulk:  one thread, cp.async.bulk of the k cells into shared memory (the TMA, one access),
//          completed on an mbarrier;
// with the shutdown flag loaded in the same poll. The response: m cells on m lines or side by
// side on one line, then fence.sc.sys (the bridge's push). Each cell is {lap, data, lap, data};
// the host writes cells k-1..1, then 0, and polls response cell 0, then the rest.
//
//   nvcc -O2 -arch=sm_90 one_line.cu -o one_line && ./one_line 200000
//
// Prints per row: min/p50/p90/p99 of the round trip in us.
#include "probe.h"

#include <cuda_runtime.h>
#include <emmintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

namespace {
constexpr int kLineInts = 32; // 128 bytes
enum Read { kLines, kWarp, kBulk };
const char *const kReadNames[] = {"lines", "warp ", "bulk "};

__device__ __forceinline__ uint32_t smem(const void *p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Stores the response's m cells (cell 0 last), then pushes them out.
template <int M, bool OneLine>
__device__ __forceinline__ void respond(unsigned *resp, unsigned lap, unsigned sum) {
#pragma unroll
  for (int c = M - 1; c >= 0; --c)
    store16(reinterpret_cast<volatile uint4 *>(resp + c * (OneLine ? 4 : kLineInts)),
            make_uint4(lap, sum + c, lap, c));
  asm volatile("fence.sc.sys;" ::: "memory");
}

template <int K, int M, bool OneLine>
__global__ void serve_lines(unsigned *req, unsigned *resp, const volatile int *stop) {
  if (threadIdx.x != 0)
    return;
  for (unsigned lap = 1;;) {
    uint4 v[K];
#pragma unroll
    for (int c = 0; c < K; ++c)
      v[c] = load16(reinterpret_cast<const volatile uint4 *>(req + c * kLineInts));
    const int stopping = *stop;
    bool ready = true;
    unsigned sum = 0;
#pragma unroll
    for (int c = 0; c < K; ++c) {
      ready = ready && v[c].x == lap && v[c].z == lap;
      sum += v[c].y + v[c].w;
    }
    if (ready) {
      respond<M, OneLine>(resp, lap, sum);
      ++lap;
    } else if (stopping) {
      break;
    }
  }
}

template <int K, int M, bool OneLine>
__global__ void serve_warp(unsigned *req, unsigned *resp, const volatile int *stop) {
  const unsigned lane = threadIdx.x;
  for (unsigned lap = 1;;) {
    uint4 v = make_uint4(lap, 0, lap, 0);
    if (lane < K)
      v = load16(reinterpret_cast<const volatile uint4 *>(req + lane * 4));
    const int stopping = *stop;
    const bool ready = __all_sync(0xFFFFFFFFu, v.x == lap && v.z == lap);
    unsigned sum = v.y + v.w;
#pragma unroll
    for (int o = 16; o > 0; o /= 2)
      sum += __shfl_xor_sync(0xFFFFFFFFu, sum, o);
    if (ready) {
      if (lane == 0)
        respond<M, OneLine>(resp, lap, sum);
      __syncwarp();
      ++lap;
    } else if (stopping) {
      break;
    }
  }
}

template <int K, int M, bool OneLine>
__global__ void serve_bulk(unsigned *req, unsigned *resp, const volatile int *stop) {
  __shared__ alignas(128) uint4 line[8];
  __shared__ alignas(8) unsigned long long bar;
  if (threadIdx.x != 0)
    return;
  const uint32_t b = smem(&bar), dst = smem(line);
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(b) : "memory");
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  unsigned long long src;
  asm("cvta.to.global.u64 %0, %1;" : "=l"(src) : "l"(req));
  uint32_t phase = 0;
  for (unsigned lap = 1;;) {
    // What the generic proxy read of the last copy is ordered before this copy's writes.
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(b), "r"(16 * K)
                 : "memory");
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], "
                 "%2, [%3];" ::"r"(dst),
                 "l"(src), "r"(16 * K), "r"(b)
                 : "memory");
    const int stopping = *stop;
    asm volatile("{\n .reg .pred p;\n WAIT_%=:\n mbarrier.try_wait.parity.shared::cta.b64 p, [%0], "
                 "%1;\n @!p bra WAIT_%=;\n}" ::"r"(b),
                 "r"(phase)
                 : "memory");
    phase ^= 1;
    bool ready = true;
    unsigned sum = 0;
#pragma unroll
    for (int c = 0; c < K; ++c) {
      uint4 v;
      asm volatile("ld.volatile.shared.v4.u32 {%0,%1,%2,%3}, [%4];"
                   : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                   : "r"(dst + 16 * c)
                   : "memory");
      ready = ready && v.x == lap && v.z == lap;
      sum += v.y + v.w;
    }
    if (ready) {
      respond<M, OneLine>(resp, lap, sum);
      ++lap;
    } else if (stopping) {
      break;
    }
  }
}

struct Row {
  Read read;
  int k, m;
  bool one_line_response;
};

template <int K, int M, bool OneLine>
void start(Read r, unsigned *req, unsigned *resp, int *stop, cudaStream_t s) {
  if (r == kLines)
    serve_lines<K, M, OneLine><<<1, 1, 0, s>>>(req, resp, stop);
  else if (r == kWarp)
    serve_warp<K, M, OneLine><<<1, 32, 0, s>>>(req, resp, stop);
  else
    serve_bulk<K, M, OneLine><<<1, 1, 0, s>>>(req, resp, stop);
}

void start(const Row &r, unsigned *req, unsigned *resp, int *stop, cudaStream_t s) {
  if (r.k == 1 && r.m == 1)
    return start<1, 1, false>(r.read, req, resp, stop, s);
  if (r.k == 5 && r.m == 5 && r.one_line_response)
    return start<5, 5, true>(r.read, req, resp, stop, s);
  if (r.k == 5 && r.m == 5)
    return start<5, 5, false>(r.read, req, resp, stop, s);
  if (r.k == 5 && r.m == 1)
    return start<5, 1, false>(r.read, req, resp, stop, s);
  std::fprintf(stderr, "no such row\n");
  std::exit(1);
}
} // namespace

int main(int argc, char **argv) {
  const int n = argc > 1 ? std::atoi(argv[1]) : 100000;
  const size_t bytes = 8 * kLineInts * sizeof(unsigned);
  const MappedRing ring(bytes);
  unsigned *const req = ring.req, *const resp = ring.resp, *const dreq = ring.dreq,
                  *const dresp = ring.dresp;
  int *const stop = ring.stop, *const dstop = ring.dstop;
  const cudaStream_t s = ring.stream;
  const Row rows[] = {{kLines, 1, 1, false}, {kLines, 5, 1, false}, {kWarp, 5, 1, false},
                      {kBulk, 5, 1, false},  {kBulk, 1, 1, false},  {kLines, 5, 5, false},
                      {kWarp, 5, 5, true},   {kBulk, 5, 5, true},   {kBulk, 5, 5, false},
                      {kLines, 1, 1, false}};
  std::printf("read  k m response   min    p50    p90    p99 us\n");
  for (const Row &r : rows) {
    std::memset(req, 0, bytes);
    std::memset(resp, 0, bytes);
    *(volatile int *)stop = 0;
    start(r, dreq, dresp, dstop, s);
    CHECK(cudaGetLastError());
    // The request's cells: on lines of their own for `lines`, side by side for the others.
    const int req_stride = r.read == kLines ? kLineInts : 4;
    const int resp_stride = r.one_line_response ? 4 : kLineInts;
    std::vector<double> rt;
    rt.reserve(n);
    long bad = 0;
    for (int i = 0; i < n + 1000; ++i) {
      const unsigned lap = unsigned(i) + 1;
      const auto t0 = std::chrono::steady_clock::now();
      for (int c = r.k - 1; c >= 0; --c)
        _mm_store_si128(reinterpret_cast<__m128i *>(req + c * req_stride),
                        _mm_set_epi32(int(c + 7), int(lap), int(c + 3), int(lap)));
      volatile unsigned *r0 = resp;
      for (long polls = 0; r0[0] != lap || r0[2] != lap; ++polls)
        if (polls == (1L << 30)) { // the GPU never saw the request (a stale copy?)
          std::printf("%s %d %d: request %d never answered\n", kReadNames[r.read], r.k, r.m, i);
          *(volatile int *)stop = 1;
          CHECK(cudaStreamSynchronize(s));
          return 1;
        }
      unsigned sum = r0[1];
      for (int c = 1; c < r.m; ++c) {
        volatile unsigned *rc = resp + c * resp_stride;
        while (rc[0] != lap || rc[2] != lap) {
        }
        sum += rc[1] - unsigned(c);
      }
      const auto t1 = std::chrono::steady_clock::now();
      unsigned want = 0;
      for (int c = 0; c < r.k; ++c)
        want += unsigned(c + 3) + unsigned(c + 7);
      if (sum != want * unsigned(r.m))
        ++bad;
      if (i >= 1000)
        rt.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
    }
    *(volatile int *)stop = 1;
    CHECK(cudaStreamSynchronize(s));
    std::sort(rt.begin(), rt.end());
    std::printf("%s %d %d %-9s %6.2f %6.2f %6.2f %6.2f  wrong %ld\n", kReadNames[r.read], r.k, r.m,
                r.one_line_response ? "one line" : "lines", rt[0], rt[rt.size() / 2],
                rt[rt.size() * 9 / 10], rt[rt.size() * 99 / 100], bad);
  }
  return 0;
}
