// A bridge's device code with the three hooks of cudaq_rt/dispatch.h and nothing else: no
// optional set exported (CUDAQ_RT_EXPORT_BRIDGE_HOOKS), as a bridge written for CUDA-Q's contract
// has. It never serves (enter_kernel answers no session); the link tests only link it.
#include "cudaq_rt/dispatch.h"

extern "C" __device__ void *cudaq_dev_enter_kernel(void *, void *, volatile int *) {
  return nullptr;
}
extern "C" __device__ int cudaq_dev_rx_poll(void *, void **, void **) {
  return CUDAQ_DEV_RX_SHUTDOWN;
}
extern "C" __device__ void cudaq_dev_tx_publish(void *, void *) {}
