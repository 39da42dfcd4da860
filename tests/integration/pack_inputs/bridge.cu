// A bridge's device hooks, reduced to what packing needs: the three C-linkage functions.
#include "cudaq_rt/dispatch.h"

extern "C" {
__device__ void *cudaq_dev_enter_kernel(void *storage, void *ctx, volatile int *shutdown_flag) {
  return *shutdown_flag ? nullptr : ctx;
}
__device__ int cudaq_dev_rx_poll(void *, void **request, void **response) {
  *request = *response = nullptr;
  return CUDAQ_DEV_RX_SHUTDOWN;
}
__device__ void cudaq_dev_tx_publish(void *, void *) {}
}
