// A request and its response as stamped cells both ways, moved by one warp: what the round trip
// of a frame of up to 4 KB costs where every lane takes part in the receive and the send, and no
// step waits for a control word before it moves the bytes. The host writes the request as the
// ring's cells (loopback_ring.h: 16 bytes carry 8 of the frame, each 8-byte half with the
// request's number); the warp polls all of them with 16-byte volatile loads (cell j in lane
// j % 32), votes on their stamps and polls again until every half carries the number, unpacks
// them into shared memory, serves, and stores the response as stamped cells from every lane,
// each lane fencing its own stores out (the ring's push). The host waits until every response
// cell carries the number and checks the bytes. No ring protocol, no dispatcher.
// Handlers:
//   none     the response is the request's bytes as unpacked (the lanes' part alone)
//   lane0    lane 0 copies the request to the response, 16 bytes a load and a store, one load
//            at a time, while the other lanes wait (a handler of the one-thread ABI, as the
//            dispatch kernels call it)
//   lane0x8  the same with 8 loads in flight
//   warp     the 32 lanes copy it together (a handler that could use the warp)
// Standalone, like floor.cu (sm_90 and newer):
//   nvcc -O2 -arch=sm_90 warp_cells.cu -o warp_cells && ./warp_cells [ITERATIONS] [SIZE...]
// Prints one line per size and handler:
//   warp_cells SIZE HANDLER rtt p50 US p99 US | gpu cycles: in N serve N out N | P polls a
//   request (idle ones too: the warp polls while the host waits for the answer)
// (in: the finding poll's issue to the request unpacked; out: the response's stores and fence).
#include "probe.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <vector>

namespace {

constexpr uint32_t kMaxBytes = 4096;
constexpr uint32_t kMaxCells = kMaxBytes / 8;  // 512: 16 a lane
constexpr uint32_t kPerLane = kMaxCells / 32u; // the loads a lane keeps in flight, at most

enum Handler { kNone, kLane0, kLane0x8, kWarp, kHandlers };
const char *const kHandlerNames[] = {"none", "lane0", "lane0x8", "warp"};

struct Control {
  volatile uint32_t stop;
  uint32_t pad;
  long long cycles[3]; // the last request's in, serve, out (lane 0's clock)
  unsigned long long polls;
};

// K: loads a lane issues a poll (ceil(cells / 32)); lanes past the last cell load the last one
// again, so that no load is predicated.
template <uint32_t K>
__global__ void serve(Control *c, const uint4 *in, uint4 *out, uint32_t bytes, int handler,
                      uint32_t first) {
  __shared__ __align__(16) unsigned char a[kMaxBytes], b[kMaxBytes];
  const uint32_t lane = threadIdx.x, n = (bytes + 7u) / 8u;
  uint32_t at[K];
#pragma unroll
  for (uint32_t k = 0; k < K; ++k)
    at[k] = min(lane + 32u * k, n - 1u);
  unsigned long long polls = 0;
  for (uint32_t want = first;; ++want) {
    long long t0;
    for (;;) {
      t0 = clock64();
      uint4 v[K];
#pragma unroll
      for (uint32_t k = 0; k < K; ++k)
        v[k] = load16(reinterpret_cast<const volatile uint4 *>(in + at[k]));
      const uint32_t stop = lane == 0 ? c->stop : 0u;
      ++polls;
      uint32_t unstamped = 0;
#pragma unroll
      for (uint32_t k = 0; k < K; ++k)
        unstamped |= (v[k].x ^ want) | (v[k].z ^ want);
      if (!__any_sync(0xFFFFFFFFu, unstamped != 0)) {
#pragma unroll
        for (uint32_t k = 0; k < K; ++k)
          reinterpret_cast<uint2 *>(a)[at[k]] = make_uint2(v[k].y, v[k].w);
        break;
      }
      if (__any_sync(0xFFFFFFFFu, stop != 0))
        return;
    }
    __syncwarp();
    const long long t1 = clock64();
    const unsigned char *from = a;
    if (handler != kNone) {
      const uint4 *s = reinterpret_cast<const uint4 *>(a);
      uint4 *d = reinterpret_cast<uint4 *>(b);
      const uint32_t chunks = (bytes + 15u) / 16u;
      if (handler == kWarp) {
        for (uint32_t j = lane; j < chunks; j += 32u)
          d[j] = s[j];
      } else if (lane == 0 && handler == kLane0) {
#pragma unroll 1
        for (uint32_t j = 0; j < chunks; ++j)
          d[j] = s[j];
      } else if (lane == 0) {
        uint32_t j = 0;
        for (; j + 8u <= chunks; j += 8u) {
          uint4 v[8];
#pragma unroll
          for (uint32_t k = 0; k < 8u; ++k)
            v[k] = s[j + k];
#pragma unroll
          for (uint32_t k = 0; k < 8u; ++k)
            d[j + k] = v[k];
        }
        for (; j < chunks; ++j)
          d[j] = s[j];
      }
      __syncwarp();
      from = b;
    }
    const long long t2 = clock64();
#pragma unroll
    for (uint32_t k = 0; k < K; ++k)
      if (lane + 32u * k < n) {
        const uint2 d = reinterpret_cast<const uint2 *>(from)[lane + 32u * k];
        store16(reinterpret_cast<volatile uint4 *>(out + lane + 32u * k),
                make_uint4(want, d.x, want, d.y));
      }
    __threadfence_system();
    const long long t3 = clock64();
    if (lane == 0) {
      c->cycles[0] = t1 - t0;
      c->cycles[1] = t2 - t1;
      c->cycles[2] = t3 - t2;
      c->polls = polls;
    }
  }
}

void launch(uint32_t bytes, Control *c, const uint4 *in, uint4 *out, int handler, uint32_t first,
            cudaStream_t stream) {
  const uint32_t k = ((bytes + 7u) / 8u + 31u) / 32u;
  if (k <= 1)
    serve<1><<<1, 32, 0, stream>>>(c, in, out, bytes, handler, first);
  else if (k <= 2)
    serve<2><<<1, 32, 0, stream>>>(c, in, out, bytes, handler, first);
  else if (k <= 4)
    serve<4><<<1, 32, 0, stream>>>(c, in, out, bytes, handler, first);
  else if (k <= 8)
    serve<8><<<1, 32, 0, stream>>>(c, in, out, bytes, handler, first);
  else
    serve<kPerLane><<<1, 32, 0, stream>>>(c, in, out, bytes, handler, first);
  CHECK(cudaGetLastError());
}

} // namespace

int main(int argc, char **argv) {
  const auto [iterations, sizes] =
      probe_args(argc, argv, "warp_cells", {8, 64, 256, 1024, 4096}, kMaxBytes);
  CHECK(cudaSetDeviceFlags(cudaDeviceMapHost));
  Control *c;
  uint64_t *in, *out;
  CHECK(cudaHostAlloc(&c, sizeof(Control), cudaHostAllocMapped));
  CHECK(cudaHostAlloc(&in, 2 * kMaxBytes, cudaHostAllocMapped));
  CHECK(cudaHostAlloc(&out, 2 * kMaxBytes, cudaHostAllocMapped));
  std::memset(c, 0, sizeof *c);
  std::memset(in, 0, 2 * kMaxBytes);
  std::memset(out, 0, 2 * kMaxBytes);
  Control *dc;
  uint4 *din, *dout;
  CHECK(cudaHostGetDevicePointer(reinterpret_cast<void **>(&dc), c, 0));
  CHECK(cudaHostGetDevicePointer(reinterpret_cast<void **>(&din), in, 0));
  CHECK(cudaHostGetDevicePointer(reinterpret_cast<void **>(&dout), out, 0));
  cudaStream_t stream;
  CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  volatile uint64_t *req = in, *resp = out;
  uint32_t seq = 0;
  for (uint32_t n : sizes)
    for (int h = 0; h < kHandlers; ++h) {
      const uint32_t cells = (n + 7u) / 8u;
      c->stop = 0;
      c->polls = 0;
      launch(n, dc, din, dout, h, seq + 1, stream);
      std::vector<double> rtt;
      long long cyc[3] = {0, 0, 0};
      for (int i = 0; i < iterations + 100; ++i) {
        const uint32_t want = ++seq;
        // Each 8-byte half: the request's number, then 4 bytes of the payload (cell j, half h:
        // payload word 2j + h, which is want * 2654435761 + that index).
        const auto t = std::chrono::steady_clock::now();
        for (uint32_t j = 0; j < cells; ++j) {
          req[2 * j] = want | uint64_t(want * 2654435761u + 2 * j) << 32;
          req[2 * j + 1] = want | uint64_t(want * 2654435761u + 2 * j + 1) << 32;
        }
        for (;;) {
          uint32_t stamped = 0;
          for (uint32_t j = cells; j-- > 0;) {
            if (uint32_t(resp[2 * j]) != want || uint32_t(resp[2 * j + 1]) != want)
              break;
            ++stamped;
          }
          if (stamped == cells)
            break;
        }
        const double us =
            std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t).count();
        for (uint32_t j = 0; j < 2 * cells; ++j)
          if (uint32_t(resp[j] >> 32) != want * 2654435761u + j) {
            std::fprintf(stderr, "warp_cells: %u bytes (%s) came back wrong at word %u\n", n,
                         kHandlerNames[h], j);
            return 1;
          }
        if (i >= 100) {
          rtt.push_back(us);
          for (int s = 0; s < 3; ++s)
            cyc[s] += c->cycles[s];
        }
      }
      c->stop = 1;
      CHECK(cudaStreamSynchronize(stream));
      std::sort(rtt.begin(), rtt.end());
      std::printf("warp_cells %u %s rtt p50 %.2f us p99 %.2f us | gpu cycles: in %lld serve %lld "
                  "out %lld | %.2f polls a request (idle ones too)\n",
                  n, kHandlerNames[h], rtt[rtt.size() / 2], rtt[rtt.size() * 99 / 100],
                  cyc[0] / iterations, cyc[1] / iterations, cyc[2] / iterations,
                  double(c->polls) / (iterations + 100));
      std::fflush(stdout);
    }
  return 0;
}
