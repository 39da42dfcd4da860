// Example handlers in a second translation unit: a syndrome-style parity decode and an echo,
// sharing a device helper defined in another translation unit (bits.cu), so the link must
// resolve a cross-TU call.
#include "cudaq_rt/exports.h"

#include <stdint.h>

extern __device__ uint32_t popcount_bytes(const uint8_t *p, uint32_t n);

// parity: input is bytes; output one byte per input byte, the parity of its bits, then the
// total popcount as a uint32.
static __device__ int parity(const void *input, void *output, uint32_t arg_len,
                             uint32_t max_result_len, uint32_t *result_len) {
  if (max_result_len < arg_len + 4)
    return 2;
  const uint8_t *in = static_cast<const uint8_t *>(input);
  uint8_t *out = static_cast<uint8_t *>(output);
  for (uint32_t i = 0; i < arg_len; ++i)
    out[i] = static_cast<uint8_t>(__popc(in[i]) & 1);
  uint32_t total = popcount_bytes(in, arg_len);
  for (int b = 0; b < 4; ++b)
    out[arg_len + b] = static_cast<uint8_t>(total >> (8 * b));
  *result_len = arg_len + 4;
  return 0;
}
CUDAQ_RT_EXPORT_HANDLER_CONCURRENT(parity, parity);

// sm_90 and later (this file is built for sm_90 as well, and nvJitLink takes that LTO-IR for those
// GPUs): the bulk copy engine moves `bytes` (a multiple of 16, both ends 16-aligned) from one
// place of this block's shared memory to another in one instruction, where a thread's loads take
// a round trip per few of them: the unified kernel's bridges stage a large frame and its response
// in shared memory (loopback_device.cu). Only in a kernel launched as a cluster (the runtime
// launches clusters of one block where the GPU has them): without one the copy faults with an
// illegal instruction (bench/probe/smem_bulk.cu). Only for a thread alone in its block: the
// barrier that counts the copy is the block's, and a block of threads (block_dispatch.cu) or a
// warp of lanes each calling echo (the warp dispatcher) would share it. False: not done, copy
// otherwise.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
static __device__ bool copy_by_engine(void *to, const void *from, uint32_t bytes) {
  uint32_t in_cluster = 0;
  asm("{ .reg .pred p; mov.pred p, %%is_explicit_cluster; selp.u32 %0, 1, 0, p; }"
      : "=r"(in_cluster));
  if (!in_cluster || blockDim.x * blockDim.y * blockDim.z != 1 || !__isShared(to) ||
      !__isShared(from))
    return false;
  __shared__ __align__(8) uint64_t barrier;
  const uint32_t bar = static_cast<uint32_t>(__cvta_generic_to_shared(&barrier));
  const uint32_t dst = static_cast<uint32_t>(__cvta_generic_to_shared(to));
  const uint32_t src = static_cast<uint32_t>(__cvta_generic_to_shared(from));
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(bar) : "memory");
  // The barrier's initialization, and this thread's earlier accesses to the frame, before the
  // engine's.
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes)
               : "memory");
  asm volatile("cp.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes [%0], [%1], "
               "%2, [%3];" ::"r"(dst),
               "r"(src), "r"(bytes), "r"(bar)
               : "memory");
  uint32_t done = 0;
  do
    asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], 0; "
                 "selp.u32 %0, 1, 0, p; }"
                 : "=r"(done)
                 : "r"(bar)
                 : "memory");
  while (!done);
  asm volatile("mbarrier.inval.shared::cta.b64 [%0];" ::"r"(bar) : "memory");
  return true;
}
#else
static __device__ bool copy_by_engine(void *, const void *, uint32_t) {
  return false;
}
#endif
// From this many bytes on, the engine (where there is one) rather than the thread's own loads.
// The H200 (bench/probe/smem_bulk.cu): 1 KB 227 cycles by the engine against 1,505 by loads,
// 16 KB 947 against 23,585. Below 512 bytes the loads take a few hundred cycles at most, near
// the engine's own; the sizes between were not measured one by one.
constexpr uint32_t kEngineBytes = 512;

// echo: returns its input.
// 16-byte loads in flight before their stores: 2, since a handler must fit the 64 registers a
// thread of a 1024-thread block (block_dispatch.cu); 4 took 69 to 76 here, 8 up to 134.
constexpr uint32_t kBatch = 2;
static __device__ int echo(const void *input, void *output, uint32_t arg_len,
                           uint32_t max_result_len, uint32_t *result_len) {
  const uint8_t *in = static_cast<const uint8_t *>(input);
  uint8_t *out = static_cast<uint8_t *>(output);
  const uintptr_t a = reinterpret_cast<uintptr_t>(in), b = reinterpret_cast<uintptr_t>(out);
  // One word (a syndrome, a counter), the latency-critical case: one load, one store and the
  // result, before any of the general copy's tests. The frames' payloads are 8-aligned.
  if ((arg_len == 8) & (max_result_len >= 8) & (((a | b) & 7u) == 0)) {
    *reinterpret_cast<uint64_t *>(out) = *reinterpret_cast<const uint64_t *>(in);
    *result_len = 8;
    return 0;
  }
  if (max_result_len < arg_len)
    return 2;
  uint32_t i = 0;
  // Words where both sides allow it (frames are 16-aligned, so a payload at frame + 24 is
  // 8-aligned, 8 past a 16-byte boundary): one thread runs this, and a byte loop costs a load and
  // a store per byte. An 8-byte payload is one word; a large one goes 16 bytes a load, after the
  // 8 bytes that bring both sides to 16, with kBatch loads in flight before their stores (input and
  // output never overlap: __restrict__), or by the bulk copy engine where it can. A loop of
  // single 16-byte copies, which the compiler cannot reorder, waits for each load: 36,000 cycles
  // for 16 KB of shared memory on the H200, 12,800 with 16 in flight (bench/probe/bulk_rtt.cu).
  if (((a | b) & 7u) == 0) {
    if (((a ^ b) & 15u) == 0) {
      if ((a & 8u) != 0 && arg_len >= 8) {
        *reinterpret_cast<uint64_t *>(out) = *reinterpret_cast<const uint64_t *>(in);
        i = 8;
      }
      const uint32_t cells = (arg_len - i) / 16;
      if (16 * cells < kEngineBytes || !copy_by_engine(out + i, in + i, 16 * cells)) {
        const uint4 *__restrict__ from = reinterpret_cast<const uint4 *>(in + i);
        uint4 *__restrict__ to = reinterpret_cast<uint4 *>(out + i);
        // Two moving pointers, constant offsets and a 32-bit count, not unrolled further: a handler
        // may be called from a block of 1024 threads, whose kernel has 64 registers a thread
        // (block_dispatch.cu).
#pragma unroll 1
        for (uint32_t n = cells / kBatch; n != 0; --n, from += kBatch, to += kBatch) {
          uint4 v[kBatch];
#pragma unroll
          for (uint32_t k = 0; k < kBatch; ++k)
            v[k] = from[k];
#pragma unroll
          for (uint32_t k = 0; k < kBatch; ++k)
            to[k] = v[k];
        }
#pragma unroll 1
        for (uint32_t n = cells % kBatch; n != 0; --n, ++from, ++to)
          *to = *from;
      }
      i += 16 * cells;
    }
#pragma unroll 1
    for (; i + 8 <= arg_len; i += 8)
      *reinterpret_cast<uint64_t *>(out + i) = *reinterpret_cast<const uint64_t *>(in + i);
  }
#pragma unroll 1
  for (; i < arg_len; ++i)
    out[i] = in[i];
  *result_len = arg_len;
  return 0;
}
CUDAQ_RT_EXPORT_HANDLER_CONCURRENT(echo, echo);
