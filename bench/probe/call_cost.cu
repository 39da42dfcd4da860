// Probe: what calling a handler through the handler ABI costs one thread, in SM cycles.
//
// The unified kernel's stage table (bench/loopback_rtt.md) puts the 8-byte echo's call at about
// 410 cycles, warm. This probe takes the call apart: the same echo (examples/handlers/decode.cu's
// code) inlined, called directly, called through a pointer from a table the host fills (as the
// dispatch kernels do), with its frames in shared or device memory and its result_len in local
// or shared memory, and a handler that copies nothing. Each row runs the call 20,000 times in one
// thread, after an idle spin (as a request arrives after polling) or back to back, and stamps
// clock64 before the call and after its results (status, result_len, the output's first word)
// were used.
//
//   nvcc -O2 -arch=sm_90 call_cost.cu -o call_cost && ./call_cost
//
// Prints: the row, then min/p50/p90 of the stamped span in cycles.
#include "probe.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace {
typedef int (*handler_fn)(const void *, void *, uint32_t, uint32_t, uint32_t *);

constexpr int kCalls = 20000;
constexpr uint32_t kArgLen = 8;
constexpr uint32_t kMaxResult = 1000;

// examples/handlers/decode.cu's echo.
__device__ __forceinline__ int echo_body(const void *input, void *output, uint32_t arg_len,
                                         uint32_t max_result_len, uint32_t *result_len) {
  if (max_result_len < arg_len)
    return 2;
  const uint8_t *in = static_cast<const uint8_t *>(input);
  uint8_t *out = static_cast<uint8_t *>(output);
  uint32_t i = 0;
  if (((reinterpret_cast<uintptr_t>(in) | reinterpret_cast<uintptr_t>(out)) & 7u) == 0)
    for (; i + 8 <= arg_len; i += 8)
      *reinterpret_cast<uint64_t *>(out + i) = *reinterpret_cast<const uint64_t *>(in + i);
  for (; i < arg_len; ++i)
    out[i] = in[i];
  *result_len = arg_len;
  return 0;
}
__device__ __noinline__ int echo(const void *input, void *output, uint32_t arg_len,
                                 uint32_t max_result_len, uint32_t *result_len) {
  return echo_body(input, output, arg_len, max_result_len, result_len);
}
__device__ __noinline__ int nothing(const void *, void *, uint32_t arg_len, uint32_t,
                                    uint32_t *result_len) {
  *result_len = arg_len;
  return 0;
}

// [0] echo, [1] nothing: written by the host, so the calls through them stay indirect.
__device__ handler_fn table[2];
__device__ handler_fn echo_ptr = echo;
__device__ handler_fn nothing_ptr = nothing;
__device__ uint64_t global_frames[2][16];
__device__ unsigned int spans[kCalls];
__device__ unsigned long long sink;

enum Call { kInline, kDirect, kIndirect, kIndirectNothing };
enum Where { kShared, kGlobal };

__device__ __forceinline__ void use(uint32_t x) {
  asm volatile("st.volatile.shared.u32 [%0], %1;" ::"r"(0u), "r"(x));
}
// The pointer, with what the compiler knew of its address space forgotten: loads and stores
// through it are generic, as a dispatch kernel's are through the frames a bridge hands out.
template <class T> __device__ __forceinline__ T *forget(T *p) {
  asm("mov.b64 %0, %0;" : "+l"(p));
  return p;
}

// generic: the frames reached through generic pointers; escape_len: result_len's address escapes
// (as it does where the same code also passes it to a call through a pointer), so it lives in
// local memory.
template <Call call, Where frames, bool result_shared, bool generic = false,
          bool escape_len = false>
__global__ void calls(int idle_cycles) {
  __shared__ uint64_t shared_frames[2][16];
  __shared__ uint32_t shared_result_len;
  __shared__ uint32_t scratch[4];
  (void)scratch;
  uint64_t(*f)[16] = frames == kShared ? shared_frames : global_frames;
  for (int i = 0; i < 16; ++i)
    f[0][i] = 0x0102030405060708ull * (i + 1);
  const handler_fn fn = table[call == kIndirectNothing ? 1 : 0];
  unsigned long long acc = 0;
  for (int n = 0; n < kCalls; ++n) {
    if (idle_cycles) {
      const long long until = clock64() + idle_cycles;
      while (clock64() < until) {
      }
    }
    f[0][3] = n; // a new request's payload
    uint32_t local_len = 0;
    uint32_t *result_len = result_shared ? &shared_result_len : &local_len;
    *result_len = 0;
    if (escape_len)
      asm volatile("" ::"l"(result_len) : "memory");
    const void *in = generic ? forget(&f[0][3]) : &f[0][3];
    void *out = generic ? forget(&f[1][3]) : &f[1][3];
    const long long t0 = clock64();
    int status;
    if (call == kInline)
      status = echo_body(in, out, kArgLen, kMaxResult, result_len);
    else if (call == kDirect)
      status = echo(in, out, kArgLen, kMaxResult, result_len);
    else
      status = fn(in, out, kArgLen, kMaxResult, result_len);
    use(status + *result_len + static_cast<uint32_t>(f[1][3]));
    const long long t1 = clock64();
    spans[n] = static_cast<unsigned int>(t1 - t0);
    acc += f[1][3];
  }
  sink = acc;
}

struct Row {
  const char *name;
  void (*kernel)(int);
};

void run(const Row &row, int idle) {
  row.kernel<<<1, 1>>>(idle);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  std::vector<unsigned int> s(kCalls);
  CHECK(cudaMemcpyFromSymbol(s.data(), spans, sizeof(unsigned int) * kCalls));
  s.erase(s.begin(), s.begin() + 100); // the first calls: cold caches
  std::sort(s.begin(), s.end());
  std::printf("%-44s idle %5d: min %5u p50 %5u p90 %5u cycles\n", row.name, idle, s.front(),
              s[s.size() / 2], s[s.size() * 9 / 10]);
}
} // namespace

int main() {
  handler_fn h[2];
  CHECK(cudaMemcpyFromSymbol(&h[0], echo_ptr, sizeof(handler_fn)));
  CHECK(cudaMemcpyFromSymbol(&h[1], nothing_ptr, sizeof(handler_fn)));
  CHECK(cudaMemcpyToSymbol(table, h, sizeof h));
  const Row rows[] = {
      {"echo inlined, shared frames", calls<kInline, kShared, false>},
      {"echo called directly, shared frames", calls<kDirect, kShared, false>},
      {"echo through the table, shared frames", calls<kIndirect, kShared, false>},
      {"  result_len in shared memory", calls<kIndirect, kShared, true>},
      {"  device-memory frames", calls<kIndirect, kGlobal, false>},
      {"nothing through the table (result_len only)", calls<kIndirectNothing, kShared, false>},
      {"  result_len in shared memory", calls<kIndirectNothing, kShared, true>},
      {"echo inlined, device-memory frames", calls<kInline, kGlobal, false>},
      {"echo inlined, shared frames, generic pointers", calls<kInline, kShared, false, true>},
      {"  and result_len in local memory", calls<kInline, kShared, false, true, true>},
      {"echo inlined, shared frames, result_len in local memory",
       calls<kInline, kShared, false, false, true>},
  };
  for (int idle : {0, 4000})
    for (const Row &r : rows)
      run(r, idle);
  return 0;
}
