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
 * are linked into one module by cudaq-rt-link.
 *
 * What a dispatch kernel promises the bridge (the unified kernel keeps all of it):
 *   - one session per bridge instance at a time, driven by one thread: the hooks keep their state
 *     in the session without atomics (a kernel with several serving threads needs a bridge
 *     instance, and a transport_ctx, per thread);
 *   - every frame rx_poll hands out is published with tx_publish exactly once, before the kernel
 *     ends (one still held when rx_poll answers SHUTDOWN too), and neither the request nor the
 *     response frame is touched after it: they are the bridge's again (the loopback bridge may
 *     start bringing the next request into that request frame within tx_publish);
 *   - it stops serving only when rx_poll answers SHUTDOWN. A bridge may keep its ring position in
 *     transport_ctx at that point (the loopback bridge does), so that a later launch on the same
 *     instance resumes where this one stopped; a kernel that returns earlier leaves that position
 *     stale, and the instance must then be destroyed rather than relaunched.
 * A relaunch on the same instance must be ordered after the previous kernel finished (same
 * stream, or the host waited for it): that also makes what the previous kernel stored in
 * transport_ctx visible to the next.
 *
 * cudaq-rt's launcher starts a dispatch kernel as clusters of one block where the GPU has
 * clusters (sm_90 and newer), so that hooks and handlers may use the bulk copy engine between two
 * places of their block's shared memory (cp.async.bulk.shared::cluster.shared::cta), which faults
 * in a launch without a cluster. Code that does checks %is_explicit_cluster: another launcher
 * (CUDA-Q's own) need not launch clusters.
 *
 * The warp form. A bridge may also provide three hooks for a dispatch kernel that serves with all
 * 32 lanes of one warp (the built-in warp dispatcher, cudaq_rt_warp_dispatch):
 *
 *   session = cudaq_dev_warp_enter_kernel(storage, transport_ctx, shutdown_flag, lane)
 *     (cudaq_rt_warp_serve in cudaq_rt/dispatch_framing.cuh enters in every lane and serves only
 *     when every lane has a session)
 *   loop, all 32 lanes together (converged, full mask), each lane with its own session:
 *     r = cudaq_dev_warp_rx_poll(session, &req, &resp)    READY, IDLE or SHUTDOWN, per lane
 *     if (r == READY) { serve req into resp; cudaq_dev_warp_tx_publish(session, resp); }
 *   until every lane has answered SHUTDOWN.
 *
 * rx_poll does not wait: it probes the lane's next request once (or not at all, where the bridge
 * knows the request cannot be there yet) and answers IDLE when there is none, so that the warp
 * stays converged and the lanes that have a request serve it together. The hooks may vote across
 * the lanes (the loopback bridge does, with the full mask): every lane must call rx_poll in every
 * round. A lane holds at most one frame and publishes it before it polls again. The bridge
 * decides which requests each lane sees (the loopback bridge gives lane l the slots l, l + 32,
 * l + 64, ... of its ring, and while the ring is idle and its client sends one request at a time
 * probes only the lane whose request comes next and the one after it), keeps every lane's
 * position across a relaunch, and answers SHUTDOWN to a lane only when it has served every
 * request sent to it before the flag was set. Responses of different
 * lanes are published in any order; the host side puts them back in request order if it must.
 *
 * Several warps. The warp dispatcher launched as B blocks (cudaq-rt-run --dispatcher warp --grid
 * B,32) serves with the first warp of each, and stores block b's counters at stats[b]. The
 * launcher tells the bridge 32 * B polling lanes (cudaq_rt_bridge_launch), and a bridge that
 * takes them gives each warp its own share of the requests (the loopback bridge: warp w's lane l
 * the slots 32 * w + l, 32 * (w + B) + l, ...); the hooks may read blockIdx.x and gridDim.x for
 * which warp calls and of how many. A bridge without instance_config is only launched with one.
 * Handlers run in several lanes at once, so a package linked with the warp dispatcher must export
 * every handler with CUDAQ_RT_EXPORT_HANDLER_CONCURRENT (cudaq-rt-link checks).
 *
 * The lone form. A client that sends one request and waits for its answer pays the serving
 * thread's every instruction in latency, and a serving loop that holds everything a bridge and a
 * dispatcher can do (batches, large frames, the handler table's calls) pays for that code even
 * where a small request runs none of it. A bridge may provide four more hooks, so that a dispatch
 * kernel serves such requests in a compact loop compiled apart from its main one (the unified
 * kernel does, cudaq_rt_lone_step in cudaq_rt/dispatch_framing.cuh, where the bridge has them):
 *
 *   if (cudaq_dev_lone_enter(session, &lone)) {          where only a lone request can come next
 *     while (cudaq_dev_lone_poll(&lone, &req) == CUDAQ_DEV_RX_READY) {   a small request, whole
 *       answer req from its fields (its payload is in req.request's frame), the handler writing
 *       into req.response's frame
 *       if (!cudaq_dev_lone_publish(&lone, &req, &answer)) { write the response header; break; }
 *     }
 *     held = cudaq_dev_lone_leave(session, &lone);       the session as rx_poll would leave it
 *     if (held) cudaq_dev_tx_publish(session, held);
 *   }
 *   then rx_poll as always.
 *
 * The lone state is the bridge's own (CUDAQ_RT_LONE_STATE_SIZE bytes, no pointer into the
 * session), so that the compact loop keeps it in registers (the unified kernel hands it over in a
 * shared-memory box, loaded on entry), and the session, which never reaches that loop, stays in
 * the main loop's. lone_enter answers 1 only where the bridge holds nothing for the kernel (no
 * frame handed out and unpublished, none pending) and the next request is likely to come alone. lone_poll waits for the next
 * request; it answers READY with a request whose frame is at most 8 payload bytes (the request
 * fields hold its header, the frame at req.request its payload from byte 24), and anything else
 * (a larger frame, a second request already waiting, the shutdown flag) is left for rx_poll,
 * which then finds it without a second probe: lone_poll answers CUDAQ_DEV_RX_HANDOVER. The
 * request frame's header bytes are not written. lone_publish takes a response whose result
 * fits the bridge's small answer (it returns 0 otherwise, publishing nothing: the kernel writes
 * the response header into req.response and leaves, and tx_publish publishes it). The four are
 * optional as a set, and a bridge that defines them says so in their translation unit with
 * CUDAQ_RT_EXPORT_BRIDGE_HOOKS(lone) (cudaq_rt/exports.h): cudaq-rt-link then links the unified
 * kernel's lone build in a per-TU link, and its plain build otherwise (a bridge without the
 * record, a whole-program link).
 *
 * The warp form's lone turn. The same compact loop serves the warp dispatcher's lone requests in
 * lane 0 while the other lanes wait, where the bridge provides two more hooks, called by all 32
 * lanes together (converged, full mask), each lane with its own warp-form session:
 *
 *   if (cudaq_dev_warp_lone_enter(session, &lone)) {     the same answer in every lane
 *     lane 0: the compact loop above, on lone_poll and lone_publish; then __syncwarp
 *     held = cudaq_dev_warp_lone_leave(session, &lone); each lane's session as warp_rx_poll
 *                                                         would have left it
 *     if (held) cudaq_dev_warp_tx_publish(session, held); in one lane at most
 *   }
 *   then warp_rx_poll as always.
 *
 * `lone` is one state for the warp, in memory every lane reads (the warp kernel's is in shared
 * memory): warp_lone_enter writes it in one lane and leaves it visible to lane 0 (a __syncwarp
 * after its stores), and warp_lone_leave reads it in every lane after the kernel's __syncwarp.
 * warp_lone_enter answers 1 only where no lane holds a frame and the next request is likely to
 * come alone; what lone_poll hands over, the lanes' next warp_rx_poll finds. A bridge that defines
 * the two, and the four above, says so with CUDAQ_RT_EXPORT_BRIDGE_HOOKS(warp_lone): cudaq-rt-link
 * then links the warp kernel's lone build in a per-TU link. */
#ifndef CUDAQ_RT_DISPATCH_H
#define CUDAQ_RT_DISPATCH_H

#include "cudaq_rt/exports.h"

#define CUDAQ_RT_UNIFIED_DISPATCH_KERNEL "cudaq_rt_unified_dispatch"
#define CUDAQ_RT_SESSION_STORAGE_SIZE 256u

/* cudaq_dev_rx_poll's answers. READY hands out a whole request frame: a bridge that received
 * fewer bytes than 24 + arg_len hands it out with CUDAQ_RT_TRUNCATED_MAGIC in place of its magic
 * (cudaq_rt/wire.h), since the hook has no way to say how many bytes arrived. The request and
 * response frames it hands out are 8-byte aligned: the header's ptp_timestamp is a uint64_t, and
 * cudaq_rt/dispatch_framing.cuh reads and writes headers in 8-byte words (the loopback and UDP
 * bridges' frames are 16-byte aligned). */
#define CUDAQ_DEV_RX_READY 0
#define CUDAQ_DEV_RX_SHUTDOWN 1
#define CUDAQ_DEV_RX_IDLE 2     /* the warp form only: nothing for this lane now; poll again */
#define CUDAQ_DEV_RX_HANDOVER 3 /* the lone form only: what came is rx_poll's to hand out */

#define CUDAQ_RT_WARP_DISPATCH_KERNEL "cudaq_rt_warp_dispatch"
#define CUDAQ_RT_WARP_LANES 32u

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
  unsigned long long protocol_errors; /* status < 0: bad magic, unknown function, oversize,
                                         truncated frame, handler fault (see wire.h) */
} cudaq_rt_dispatch_stats;

/* The lone form's state (see above): the bridge's, opaque to the kernel. */
#define CUDAQ_RT_LONE_STATE_SIZE 64u
typedef struct cudaq_rt_lone_state {
  unsigned long long words[CUDAQ_RT_LONE_STATE_SIZE / 8u];
} cudaq_rt_lone_state;

/* A request lone_poll hands out: its header's fields (magic CUDAQ_RT_TRUNCATED_MAGIC where the
 * frame was shorter than its header claims, as rx_poll marks it), and the frames the handler
 * reads from and writes into, their payloads from byte 24 (slot_size bytes each). */
typedef struct cudaq_rt_lone_request {
  uint32_t magic;
  uint32_t function_id;
  uint32_t arg_len;
  uint32_t request_id;
  unsigned long long ptp_timestamp;
  const void *request;
  void *response;
} cudaq_rt_lone_request;

/* The response header's fields lone_publish sends (the header tx_publish would find). */
typedef struct cudaq_rt_lone_answer {
  int32_t status;
  uint32_t result_len;
} cudaq_rt_lone_answer;

typedef struct cudaq_rt_dispatch_params {
  void *transport_ctx; /* the bridge's device-accessible context */
  /* Bytes per frame slot, header included: must be the bridge instance's own slot_size (a
   * launcher takes it from the bridge, cudaq_rt_bridge_ops::slot_size). It bounds arg_len and is
   * what a handler is told it may write (slot_size - 24); a larger value lets a handler write past
   * the bridge's response frame. */
  uint32_t slot_size;
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

/* The warp form (see above); `lane` is 0..31. */
__device__ void *cudaq_dev_warp_enter_kernel(void *storage, void *ctx, volatile int *shutdown_flag,
                                             unsigned lane);
__device__ int cudaq_dev_warp_rx_poll(void *session, void **request, void **response);
__device__ void cudaq_dev_warp_tx_publish(void *session, void *response);

/* The lone form (see above). */
__device__ int cudaq_dev_lone_enter(void *session, cudaq_rt_lone_state *lone);
__device__ int cudaq_dev_lone_poll(cudaq_rt_lone_state *lone, cudaq_rt_lone_request *request);
__device__ int cudaq_dev_lone_publish(cudaq_rt_lone_state *lone,
                                      const cudaq_rt_lone_request *request,
                                      const cudaq_rt_lone_answer *answer);
__device__ void *cudaq_dev_lone_leave(void *session, const cudaq_rt_lone_state *lone);

/* The warp form's lone turn (see above). */
__device__ int cudaq_dev_warp_lone_enter(void *session, cudaq_rt_lone_state *lone);
__device__ void *cudaq_dev_warp_lone_leave(void *session, const cudaq_rt_lone_state *lone);
}

#endif /* __CUDACC__ */

#endif /* CUDAQ_RT_DISPATCH_H */
