// Handlers that break the server on purpose, for the GPU tests of cudaq-rt-run: each fault must
// end in a clear error and exit status 1, never a hang. `ok` answers first, so a test can tell a
// server that works until the fault from one that never worked.
#include "cudaq_rt/exports.h"

#include <stdint.h>

// ok: an empty result, status 0.
static __device__ int ok(const void *, void *, uint32_t, uint32_t, uint32_t *result_len) {
  *result_len = 0;
  return 0;
}
CUDAQ_RT_EXPORT_HANDLER_CONCURRENT(ok, ok);

// fault_illegal_address: a store through a pointer no allocation covers: the kernel dies with
// cudaErrorIllegalAddress and the context is unusable afterwards. volatile: the store must happen.
static __device__ int fault_illegal_address(const void *, void *, uint32_t, uint32_t,
                                            uint32_t *result_len) {
  *reinterpret_cast<volatile int *>(uintptr_t(0x10)) = 1;
  *result_len = 0;
  return 0;
}
CUDAQ_RT_EXPORT_HANDLER_CONCURRENT(fault_illegal_address, fault_illegal_address);

// fault_trap: the kernel dies with cudaErrorLaunchFailure.
static __device__ int fault_trap(const void *, void *, uint32_t, uint32_t, uint32_t *result_len) {
  __trap();
  *result_len = 0;
  return 0;
}
CUDAQ_RT_EXPORT_HANDLER_CONCURRENT(fault_trap, fault_trap);

// Never written: spin_forever's loop condition. A volatile read is a side effect the compiler
// must keep, so the loop cannot be proven infinite and removed (an infinite loop without side
// effects is undefined behaviour in C++, and LLVM deletes such loops).
extern "C" {
__device__ int cudaq_rt_fault_spin_release = 0;
}

// spin_forever: never returns, so the dispatch kernel never sees the shutdown flag; the run tool
// must report the kernel hung after its stop timeout.
static __device__ int spin_forever(const void *, void *, uint32_t, uint32_t, uint32_t *result_len) {
  while (*static_cast<volatile int *>(&cudaq_rt_fault_spin_release) == 0) {
  }
  *result_len = 0;
  return 0;
}
CUDAQ_RT_EXPORT_HANDLER_CONCURRENT(spin_forever, spin_forever);
