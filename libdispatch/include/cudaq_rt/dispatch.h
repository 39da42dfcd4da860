/* cudaq_rt/dispatch.h: the contract between a dispatch kernel, a bridge's device hooks and the
 * launcher.
 *
 * A dispatch kernel (the unified one built into the runtime, or a custom one an application
 * brings) is an extern "C" __global__ function taking one cudaq_rt_dispatch_params by value. It
 * drives the bridge's three device hooks:
 *
 *   session = cudaq_dev_enter_kernel(storage, transport_ctx, shutdown_flag)   once, per kernel
 *   while (cudaq_dev_rx_poll(session, &req, &resp) == CUDAQ_DEV_RX_READY) {
 *     look up req->function_id in the table, call the handler, write resp's header
 *     cudaq_dev_tx_publish(session, resp)                                     once per frame
 *   }
 *
 * The hooks are resolved at device-link time: the kernel, the bridge's hooks and the handlers
 * are linked into one module by cudaq-rt-link. */
#ifndef CUDAQ_RT_DISPATCH_H
#define CUDAQ_RT_DISPATCH_H

#include "cudaq_rt/exports.h"

#define CUDAQ_RT_UNIFIED_DISPATCH_KERNEL "cudaq_rt_unified_dispatch"
#define CUDAQ_RT_SESSION_STORAGE_SIZE 256u

/* cudaq_dev_rx_poll's answers. */
#define CUDAQ_DEV_RX_READY 0
#define CUDAQ_DEV_RX_SHUTDOWN 1

/* One row of the function table: the runtime fills it from the module's cudaq_rt_handler__*
 * globals. Sorted by function_id. */
typedef struct cudaq_rt_function_entry {
  uint32_t function_id;
  uint32_t reserved;
  cudaq_rt_handler_fn handler;
} cudaq_rt_function_entry;

/* Counters the kernel updates as it serves; they live in mapped host memory so the host can read
 * them while the kernel runs. */
typedef struct cudaq_rt_dispatch_stats {
  unsigned long long requests;        /* frames taken from rx_poll */
  unsigned long long ok;              /* handler returned 0 */
  unsigned long long handler_errors;  /* handler returned > 0 */
  unsigned long long protocol_errors; /* bad magic, unknown function, oversize */
} cudaq_rt_dispatch_stats;

typedef struct cudaq_rt_dispatch_params {
  void *transport_ctx;    /* the bridge's device-accessible context */
  uint32_t slot_size;     /* bytes per frame slot, header included */
  uint32_t num_functions; /* rows in function_table */
  const cudaq_rt_function_entry *function_table;
  volatile int *shutdown_flag;    /* set to non-zero by the host to stop serving */
  cudaq_rt_dispatch_stats *stats; /* may be NULL */
} cudaq_rt_dispatch_params;

#if defined(__CUDACC__)

typedef void (*cudaq_rt_dispatch_kernel_fn)(cudaq_rt_dispatch_params);

/* The bridge's device hooks, with C linkage. */
extern "C" {
__device__ void *cudaq_dev_enter_kernel(void *storage, void *ctx, volatile int *shutdown_flag);
__device__ int cudaq_dev_rx_poll(void *session, void **request, void **response);
__device__ void cudaq_dev_tx_publish(void *session, void *response);
}

#endif /* __CUDACC__ */

#endif /* CUDAQ_RT_DISPATCH_H */
