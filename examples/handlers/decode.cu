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

// echo: returns its input.
// 16-byte loads in flight before their stores: 2, since a handler must fit the 64 registers a
// thread of a 1024-thread block (block_dispatch.cu); 4 took 69 to 76 here, 8 up to 134.
constexpr uint32_t kBatch = 2;
static __device__ int echo(const void *input, void *output, uint32_t arg_len,
                           uint32_t max_result_len, uint32_t *result_len) {
  if (max_result_len < arg_len)
    return 2;
  const uint8_t *in = static_cast<const uint8_t *>(input);
  uint8_t *out = static_cast<uint8_t *>(output);
  const uintptr_t a = reinterpret_cast<uintptr_t>(in), b = reinterpret_cast<uintptr_t>(out);
  uint32_t i = 0;
  // Words where both sides allow it (frames are 16-aligned, so a payload at frame + 24 is
  // 8-aligned, 8 past a 16-byte boundary): one thread runs this, and a byte loop costs a load and
  // a store per byte. An 8-byte payload is one word; a large one goes 16 bytes a load, after the
  // 8 bytes that bring both sides to 16, with kBatch loads in flight before their stores (input and
  // output never overlap: __restrict__). A loop of single 16-byte copies, which the compiler
  // cannot reorder, waits for each load: 36,000 cycles for 16 KB of shared memory on the H200,
  // 12,800 with 16 in flight (bench/probe/bulk_rtt.cu).
  if (((a | b) & 7u) == 0) {
    if (((a ^ b) & 15u) == 0) {
      if ((a & 8u) != 0 && arg_len >= 8) {
        *reinterpret_cast<uint64_t *>(out) = *reinterpret_cast<const uint64_t *>(in);
        i = 8;
      }
      const uint32_t cells = (arg_len - i) / 16;
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
