// The bulk path's parts, without the ring's protocol or a dispatcher: one GPU thread polls a
// control word in mapped host memory, brings the request's N bytes into shared memory with the
// bulk copy engine (cp.async.bulk, mbarrier), copies them to a second shared buffer (a one-thread
// echo, 16 bytes an instruction) unless told not to, sends that back with a bulk store, waits,
// fences and stores the control word back. The host times each round trip; the GPU stamps each
// step with clock64. Standalone, like floor.cu (sm_90 and newer):
//   nvcc -O2 -arch=sm_90 bulk_rtt.cu -o bulk_rtt && ./bulk_rtt [ITERATIONS] [SIZE...]
// Prints per size and mode (direct: the request's buffer sent back; echo-loop: copied by a loop of
// 16-byte copies; echo-batched: 16 loads in flight before their stores):
//   bulk SIZE MODE rtt p50 US p99 US | gpu cycles: in N copy N out N
#include "probe.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <vector>

namespace {

constexpr uint32_t kMax = 16384;

struct Control {
  volatile uint32_t request;  // host: the sequence number of the request waiting (0: none)
  volatile uint32_t size;     // its bytes
  volatile uint32_t response; // GPU: the sequence number answered
  volatile uint32_t stop;
  long long cycles[3]; // the last request's copy in, echo copy, copy out
};

__device__ __forceinline__ uint32_t smem(const void *p) {
  return (uint32_t)__cvta_generic_to_shared(p);
}

__global__ void serve(Control *c, const unsigned char *in, unsigned char *out, int echo) {
  __shared__ __align__(128) unsigned char a[kMax], b[kMax];
  __shared__ __align__(8) unsigned long long bar;
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem(&bar)) : "memory");
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  uint32_t phase = 0, seen = 0;
  for (;;) {
    uint32_t r;
    while ((r = c->request) == seen)
      if (c->stop)
        return;
    seen = r;
    const uint32_t bytes = (c->size + 15u) & ~15u;
    const long long t0 = clock64();
    bulk_in(a, in, bytes, &bar, phase);
    const long long t1 = clock64();
    const unsigned char *send = a;
    if (echo == 1) { // a loop of 16-byte copies, as the example's echo had it
      const uint4 *from = reinterpret_cast<const uint4 *>(a);
      uint4 *to = reinterpret_cast<uint4 *>(b);
#pragma unroll 4
      for (uint32_t i = 0; i < bytes / 16; ++i)
        to[i] = from[i];
      send = b;
    } else if (echo == 2) { // 16 loads in flight before their stores, as the example's echo now
      const uint4 *__restrict__ from = reinterpret_cast<const uint4 *>(a);
      uint4 *__restrict__ to = reinterpret_cast<uint4 *>(b);
      const uint32_t cells = bytes / 16;
      uint32_t i = 0;
      for (; i + 16 <= cells; i += 16) {
        uint4 v[16];
#pragma unroll
        for (uint32_t k = 0; k < 16; ++k)
          v[k] = from[i + k];
#pragma unroll
        for (uint32_t k = 0; k < 16; ++k)
          to[i + k] = v[k];
      }
      for (; i < cells; ++i)
        to[i] = from[i];
      send = b;
    }
    const long long t2 = clock64();
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(out),
                 "r"(smem(send)), "r"(bytes)
                 : "memory");
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
    asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
    __threadfence_system();
    const long long t3 = clock64();
    c->cycles[0] = t1 - t0;
    c->cycles[1] = t2 - t1;
    c->cycles[2] = t3 - t2;
    c->response = r;
    __threadfence_system();
  }
}

} // namespace

int main(int argc, char **argv) {
  const auto [iterations, sizes] =
      probe_args(argc, argv, "bulk_rtt", {64, 256, 1024, 4096, 16384}, kMax);
  CHECK(cudaSetDeviceFlags(cudaDeviceMapHost));
  Control *c;
  unsigned char *in, *out;
  CHECK(cudaHostAlloc(&c, sizeof(Control), cudaHostAllocMapped));
  CHECK(cudaHostAlloc(&in, kMax, cudaHostAllocMapped));
  CHECK(cudaHostAlloc(&out, kMax, cudaHostAllocMapped));
  std::memset(c, 0, sizeof *c);
  Control *dc;
  unsigned char *din, *dout;
  CHECK(cudaHostGetDevicePointer(reinterpret_cast<void **>(&dc), c, 0));
  CHECK(cudaHostGetDevicePointer(reinterpret_cast<void **>(&din), in, 0));
  CHECK(cudaHostGetDevicePointer(reinterpret_cast<void **>(&dout), out, 0));
  cudaStream_t stream;
  CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  uint32_t seq = 0;
  const char *const modes[] = {"direct", "echo-loop", "echo-batched"};
  for (int echo = 0; echo < 3; ++echo) {
    c->stop = 0;
    serve<<<1, 1, 0, stream>>>(dc, din, dout, echo);
    CHECK(cudaGetLastError());
    for (uint32_t n : sizes) {
      std::vector<double> rtt;
      long long cyc[3] = {0, 0, 0};
      for (int i = 0; i < iterations + 100; ++i) {
        const unsigned char mark = (unsigned char)((seq + 1) * 37 + 1);
        std::memset(in, mark, n);
        const auto t = std::chrono::steady_clock::now();
        c->size = n;
        std::atomic_thread_fence(std::memory_order_seq_cst);
        c->request = ++seq;
        while (c->response != seq) {
        }
        const double us =
            std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t).count();
        if (out[0] != mark || out[n - 1] != mark) {
          std::fprintf(stderr, "bulk_rtt: %u bytes came back wrong\n", n);
          return 1;
        }
        if (i >= 100) {
          rtt.push_back(us);
          for (int k = 0; k < 3; ++k)
            cyc[k] += c->cycles[k];
        }
      }
      std::sort(rtt.begin(), rtt.end());
      std::printf(
          "bulk %u %s rtt p50 %.2f us p99 %.2f us | gpu cycles: in %lld copy %lld out %lld\n", n,
          modes[echo], rtt[rtt.size() / 2], rtt[rtt.size() * 99 / 100], cyc[0] / iterations,
          cyc[1] / iterations, cyc[2] / iterations);
    }
    c->stop = 1;
    CHECK(cudaStreamSynchronize(stream));
  }
  return 0;
}
