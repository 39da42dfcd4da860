// Whether the bulk copy engine copies shared memory to shared memory of the same block, in a
// kernel launched without a cluster and with one (cluster of 1), and what it costs in cycles next
// to one thread's 16-byte loads. Standalone: `nvcc -O2 -arch=sm_90 smem_bulk.cu -o smem_bulk`,
//   smem_bulk MODE BYTES     MODE: plain | cluster   (one launch a process: a fault ends it)
// prints `MODE BYTES ok|wrong engine CYCLES loads CYCLES`.
#include "probe.h"

#include <cstdint>
#include <cstring>

namespace {
constexpr uint32_t kMax = 16384;

__global__ void copy_kernel(uint32_t bytes, unsigned long long *cycles, int *wrong) {
  __shared__ __align__(128) unsigned char a[kMax];
  __shared__ __align__(128) unsigned char b[kMax];
  __shared__ __align__(8) uint64_t barrier;
  for (uint32_t i = 0; i < bytes; ++i)
    a[i] = static_cast<unsigned char>(i * 131 + 7), b[i] = 0;
  const uint32_t bar = static_cast<uint32_t>(__cvta_generic_to_shared(&barrier));
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(bar) : "memory");
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  const long long t0 = clock64();
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes)
               : "memory");
  asm volatile("cp.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes [%0], [%1], "
               "%2, [%3];" ::"r"(static_cast<uint32_t>(__cvta_generic_to_shared(b))),
               "r"(static_cast<uint32_t>(__cvta_generic_to_shared(a))), "r"(bytes), "r"(bar)
               : "memory");
  uint32_t done = 0;
  do
    asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], 0; "
                 "selp.u32 %0, 1, 0, p; }"
                 : "=r"(done)
                 : "r"(bar)
                 : "memory");
  while (!done);
  const long long t1 = clock64();
  asm volatile("mbarrier.inval.shared::cta.b64 [%0];" ::"r"(bar) : "memory");
  int bad = 0;
  for (uint32_t i = 0; i < bytes; ++i)
    bad |= b[i] != static_cast<unsigned char>(i * 131 + 7);
  // The same copy by this thread, 16 bytes a load, 2 in flight (the example echo's way).
  const uint4 *from = reinterpret_cast<const uint4 *>(a);
  uint4 *to = reinterpret_cast<uint4 *>(b);
  const long long t2 = clock64();
#pragma unroll 1
  for (uint32_t n = 0; n < bytes / 32; ++n) {
    uint4 v0 = from[2 * n], v1 = from[2 * n + 1];
    to[2 * n] = v0, to[2 * n + 1] = v1;
  }
  const long long t3 = clock64();
  cycles[0] = t1 - t0, cycles[1] = t3 - t2;
  *wrong = bad;
}
} // namespace

int main(int argc, char **argv) {
  if (argc != 3 || (std::strcmp(argv[1], "plain") != 0 && std::strcmp(argv[1], "cluster") != 0)) {
    std::fprintf(stderr, "usage: smem_bulk plain|cluster BYTES\n");
    return 2;
  }
  const uint32_t bytes = static_cast<uint32_t>(std::strtoul(argv[2], nullptr, 10));
  unsigned long long *cycles;
  int *wrong;
  CHECK(cudaMallocManaged(&cycles, 2 * sizeof *cycles));
  CHECK(cudaMallocManaged(&wrong, sizeof *wrong));
  if (std::strcmp(argv[1], "plain") == 0) {
    copy_kernel<<<1, 1>>>(bytes, cycles, wrong);
  } else {
    cudaLaunchConfig_t config = {};
    config.gridDim = dim3(1), config.blockDim = dim3(1);
    cudaLaunchAttribute attr = {};
    attr.id = cudaLaunchAttributeClusterDimension;
    attr.val.clusterDim.x = 1, attr.val.clusterDim.y = 1, attr.val.clusterDim.z = 1;
    config.attrs = &attr, config.numAttrs = 1;
    CHECK(cudaLaunchKernelEx(&config, copy_kernel, bytes, cycles, wrong));
  }
  CHECK(cudaDeviceSynchronize());
  std::printf("%s %u %s engine %llu loads %llu\n", argv[1], bytes, *wrong ? "wrong" : "ok",
              cycles[0], cycles[1]);
  return 0;
}
