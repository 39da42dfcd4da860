// A kernel, a device function it calls and a global it reads: small device code the unit tests
// compile at build time into cubins and LTO-IR (tests/CMakeLists.txt), to read and to link.
extern "C" {
__device__ int cudaq_rt_test_global = 7;

#ifdef CUDAQ_RT_TEST_UNRESOLVED
// Defined in no translation unit: a link of this code must fail naming it.
__device__ int cudaq_rt_test_defined_nowhere(int x);
#endif

__device__ __noinline__ int cudaq_rt_test_helper(int x) {
#ifdef CUDAQ_RT_TEST_UNRESOLVED
  return cudaq_rt_test_defined_nowhere(x);
#else
  return 3 * x + cudaq_rt_test_global;
#endif
}

__global__ void cudaq_rt_test_kernel(int *out) {
  out[threadIdx.x] = cudaq_rt_test_helper(static_cast<int>(threadIdx.x));
}
}
