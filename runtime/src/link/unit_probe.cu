// The trial compile that tells whether nvJitLink can compile one translation unit alone
// (nvjitlink.cpp): a function nothing in the unit calls, which a unit compiled alone must keep,
// calling one that no unit defines, which it must leave unresolved.
extern "C" __device__ int cudaq_rt_unit_probe_callee(int x);
extern "C" __device__ int cudaq_rt_unit_probe(int x) {
  return cudaq_rt_unit_probe_callee(x) + 1;
}
