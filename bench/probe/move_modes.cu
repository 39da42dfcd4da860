// Ways to move a request into shared memory and a response out of it, one GPU thread, against the
// bulk copy engine the loopback ring uses for bulk frames (bulk_rtt.cu times that alone). One
// thread polls a control word in mapped host memory, brings the request's N bytes in one way,
// sends them back (no copy: the request's buffer is the response) another way, and stores the
// control word back; the host times each round trip and the GPU stamps each step with clock64.
// Standalone, like floor.cu (sm_90 and newer):
//   nvcc -O2 -arch=sm_90 move_modes.cu -o move_modes && ./move_modes [ITERATIONS] [SIZE...]
// In:  engine   cp.async.bulk, one instruction, waited on an mbarrier (the ring today)
//      ldgsts   cp.async.cg 16 bytes an instruction, all issued, then waited for (no registers)
//      striped  the same, chunk j read from line j % 64 (64 lines of at least 128 bytes): do
//               LDGSTS to one line overlap, or wait for each other as volatile loads do?
//      loads    16-byte volatile loads, 16 in flight, stored to shared memory
// Out: engine   cp.async.bulk store, wait_group 0, fence.sc.sys, control (the ring today)
//      stores   16-byte volatile stores from shared memory, fence.sc.sys, control
//      release  16-byte volatile stores, then the control word by st.release.sys (no fence of its
//               own before it)
// Every mode ends with fence.sc.sys after the control word (the ring's push).
// And one way that does not wait for a control word before it moves the bytes:
//   cells    the host writes the request as stamped cells (loopback_ring.h: 16 bytes carry 8 of
//            the frame, each 8-byte half with the request's number); the GPU polls by copying
//            all of them with the bulk copy engine, over and over, until every half carries the
//            number, then unpacks them (one thread) and sends the bytes back by the engine. What
//            a request costs when its bytes come with the poll (sizes up to 8 KB).
// Prints one line per size and pair:
//   move SIZE IN OUT rtt p50 US p99 US | gpu cycles: in N out N
// (for cells, in = the last poll's copy, check and unpack; polls = copies per request).
#include "probe.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <vector>

namespace {

constexpr uint32_t kMax = 16384;
constexpr uint32_t kStripe = 64;

struct Control {
  volatile uint32_t request;  // host: the sequence number of the request waiting (0: none)
  volatile uint32_t size;     // its bytes
  volatile uint32_t response; // GPU: the sequence number answered
  volatile uint32_t stop;
  long long cycles[2];      // the last request's move in and move out
  unsigned long long polls; // cells: bulk copies so far
};

enum In { kEngineIn, kLdgsts, kStriped, kLoads, kInModes };
enum Out { kEngineOut, kStores, kRelease, kOutModes };
const char *const kInNames[] = {"engine", "ldgsts", "striped", "loads"};
const char *const kOutNames[] = {"engine", "stores", "release"};

__device__ __forceinline__ uint32_t smem(const void *p) {
  return (uint32_t)__cvta_generic_to_shared(p);
}

// Bytes from the start of line j % 64 to chunk j's 16 bytes (striped).
__host__ __device__ inline uint32_t stripe_line(uint32_t bytes) {
  const uint32_t l = bytes / kStripe;
  return l < 128u ? 128u : l;
}
__host__ __device__ inline uint32_t striped_offset(uint32_t j, uint32_t bytes) {
  return (j % kStripe) * stripe_line(bytes) + (j / kStripe) * 16u;
}

__global__ void serve(Control *c, const unsigned char *in, unsigned char *out, int in_mode,
                      int out_mode) {
  __shared__ __align__(128) unsigned char a[kMax];
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
    const uint32_t chunks = bytes / 16u;
    const long long t0 = clock64();
    if (in_mode == kEngineIn) {
      bulk_in(a, in, bytes, &bar, phase);
    } else if (in_mode == kLdgsts || in_mode == kStriped) {
      const bool striped = in_mode == kStriped;
#pragma unroll 8
      for (uint32_t j = 0; j < chunks; ++j)
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(smem(a + 16u * j)),
                     "l"(in + (striped ? striped_offset(j, bytes) : 16u * j))
                     : "memory");
      asm volatile("cp.async.wait_all;" ::: "memory");
    } else {
      const volatile uint4 *from = reinterpret_cast<const volatile uint4 *>(in);
      uint4 *to = reinterpret_cast<uint4 *>(a);
      uint32_t j = 0;
      for (; j + 16 <= chunks; j += 16) {
        uint4 v[16];
#pragma unroll
        for (uint32_t k = 0; k < 16; ++k)
          v[k] = load16(from + j + k);
#pragma unroll
        for (uint32_t k = 0; k < 16; ++k)
          to[j + k] = v[k];
      }
      for (; j < chunks; ++j)
        to[j] = load16(from + j);
    }
    const long long t1 = clock64();
    if (out_mode == kEngineOut) {
      asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
      asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(out),
                   "r"(smem(a)), "r"(bytes)
                   : "memory");
      asm volatile("cp.async.bulk.commit_group;" ::: "memory");
      asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
      __threadfence_system();
      c->response = r;
    } else {
      const uint4 *from = reinterpret_cast<const uint4 *>(a);
      volatile uint4 *to = reinterpret_cast<volatile uint4 *>(out);
#pragma unroll 8
      for (uint32_t j = 0; j < chunks; ++j)
        store16(to + j, from[j]);
      if (out_mode == kStores) {
        __threadfence_system();
        c->response = r;
      } else {
        asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(&c->response), "r"(r) : "memory");
      }
    }
    const long long t2 = clock64();
    __threadfence_system();
    c->cycles[0] = t1 - t0;
    c->cycles[1] = t2 - t1;
  }
}

// The cells way in (see above): polls by bulk copies of the request's 2 * bytes of cells.
__global__ void serve_cells(Control *c, const uint4 *in, unsigned char *out, uint32_t bytes) {
  __shared__ __align__(128) uint4 cells[kMax / 16];
  __shared__ __align__(128) unsigned char a[kMax / 2];
  __shared__ __align__(8) unsigned long long bar;
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem(&bar)) : "memory");
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  const uint32_t n = (bytes + 7u) / 8u; // cells
  uint32_t phase = 0, seq = c->response;
  unsigned long long polls = 0;
  for (;;) {
    const uint32_t want = seq + 1;
    long long t0;
    for (;;) {
      t0 = clock64();
      const uint32_t stop = c->stop; // in flight with the copy
      bulk_in(cells, in, n * 16u, &bar, phase);
      ++polls;
      uint32_t unstamped = 0;
#pragma unroll 8
      for (uint32_t j = 0; j < n; ++j) {
        const uint4 v = cells[j];
        unstamped |= (v.x ^ want) | (v.z ^ want);
        reinterpret_cast<uint2 *>(a)[j] = make_uint2(v.y, v.w);
      }
      if (unstamped == 0)
        break;
      if (stop)
        return;
    }
    const long long t1 = clock64();
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(out),
                 "r"(smem(a)), "r"((bytes + 15u) & ~15u)
                 : "memory");
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
    asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
    __threadfence_system();
    c->response = want;
    const long long t2 = clock64();
    __threadfence_system();
    c->cycles[0] = t1 - t0;
    c->cycles[1] = t2 - t1;
    c->polls = polls;
    seq = want;
  }
}

} // namespace

int main(int argc, char **argv) {
  const auto [iterations, sizes] =
      probe_args(argc, argv, "move_modes", {64, 256, 1024, 4096, 16384}, kMax);
  CHECK(cudaSetDeviceFlags(cudaDeviceMapHost));
  // The striped reads of a 16 KB request reach 64 lines of 256 bytes: kMax in all; of a smaller
  // one, 64 lines of 128 bytes (8 KB).
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
  for (int im = 0; im < kInModes; ++im)
    for (int om = 0; om < kOutModes; ++om) {
      if (im != kEngineIn && om != kEngineOut && om != kStores)
        continue; // the release store once, after the engine's way in
      c->stop = 0;
      serve<<<1, 1, 0, stream>>>(dc, din, dout, im, om);
      CHECK(cudaGetLastError());
      for (uint32_t n : sizes) {
        const uint32_t span = im == kStriped ? kStripe * stripe_line((n + 15u) & ~15u) : n;
        std::vector<double> rtt;
        long long cyc[2] = {0, 0};
        for (int i = 0; i < iterations + 100; ++i) {
          const unsigned char mark = (unsigned char)((seq + 1) * 37 + 1);
          std::memset(in, mark, span < kMax ? span : kMax);
          const auto t = std::chrono::steady_clock::now();
          c->size = n;
          std::atomic_thread_fence(std::memory_order_seq_cst);
          c->request = ++seq;
          while (c->response != seq) {
          }
          const double us =
              std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t)
                  .count();
          if (out[0] != mark || out[n - 1] != mark) {
            std::fprintf(stderr, "move_modes: %u bytes (%s in, %s out) came back wrong\n", n,
                         kInNames[im], kOutNames[om]);
            return 1;
          }
          if (i >= 100) {
            rtt.push_back(us);
            cyc[0] += c->cycles[0];
            cyc[1] += c->cycles[1];
          }
        }
        std::sort(rtt.begin(), rtt.end());
        std::printf("move %u %s %s rtt p50 %.2f us p99 %.2f us | gpu cycles: in %lld out %lld\n", n,
                    kInNames[im], kOutNames[om], rtt[rtt.size() / 2], rtt[rtt.size() * 99 / 100],
                    cyc[0] / iterations, cyc[1] / iterations);
        std::fflush(stdout);
      }
      c->stop = 1;
      CHECK(cudaStreamSynchronize(stream));
    }
  // The cells way in, for sizes up to 8 KB (their cells fill `in`).
  for (uint32_t n : sizes) {
    if (2 * n > kMax)
      continue;
    c->stop = 0;
    c->response = seq;
    const unsigned long long polls_before = c->polls = 0;
    serve_cells<<<1, 1, 0, stream>>>(dc, reinterpret_cast<const uint4 *>(din), dout, n);
    CHECK(cudaGetLastError());
    std::vector<double> rtt;
    long long cyc[2] = {0, 0};
    auto *cells = reinterpret_cast<volatile uint64_t *>(in);
    const uint32_t ncells = (n + 7u) / 8u;
    for (int i = 0; i < iterations + 100; ++i) {
      const uint32_t want = ++seq;
      const unsigned char mark = (unsigned char)(want * 37 + 1);
      const uint32_t word = 0x01010101u * mark;
      const auto t = std::chrono::steady_clock::now();
      for (uint32_t j = 0; j < ncells; ++j) {
        cells[2 * j] = want | uint64_t(word) << 32; // aligned 8-byte stores: whole halves
        cells[2 * j + 1] = want | uint64_t(word) << 32;
      }
      while (c->response != want) {
      }
      const double us =
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t).count();
      if (out[0] != mark || out[n - 1] != mark) {
        std::fprintf(stderr, "move_modes: %u bytes (cells in) came back wrong\n", n);
        return 1;
      }
      if (i >= 100) {
        rtt.push_back(us);
        cyc[0] += c->cycles[0];
        cyc[1] += c->cycles[1];
      }
    }
    const unsigned long long polls = c->polls - polls_before;
    c->stop = 1;
    CHECK(cudaStreamSynchronize(stream));
    std::sort(rtt.begin(), rtt.end());
    std::printf("move %u cells engine rtt p50 %.2f us p99 %.2f us | gpu cycles: in %lld out %lld | "
                "%.1f polls a request\n",
                n, rtt[rtt.size() / 2], rtt[rtt.size() * 99 / 100], cyc[0] / iterations,
                cyc[1] / iterations, double(polls) / (iterations + 100));
    std::fflush(stdout);
  }
  return 0;
}
