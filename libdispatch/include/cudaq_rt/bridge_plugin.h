/* cudaq_rt/bridge_plugin.h: the bridge plugin ABI.
 *
 * A bridge is a transport provider: a shared library that moves request frames into a ring the
 * GPU reads and response frames out of it. It has two halves:
 *
 * - device code: the three hooks of cudaq_rt/dispatch.h (cudaq_dev_enter_kernel, cudaq_dev_rx_poll,
 *   cudaq_dev_tx_publish), compiled relocatable with LTO-IR so that the library's own
 *   `__nv_relfatbin` section carries them; cudaq-rt-link reads them from the library file and
 *   links them with a dispatch kernel and the application's handlers;
 * - host code: one exported C function, cudaq_rt_bridge_entry, returning a static, versioned table
 *   of operations (the shape of LLVM's pass-plugin entry point and of CUDA-Q's bridge interface).
 *   The runtime dlopens the library, calls the entry point once, checks the ABI version and the
 *   table size, and drives the bridge through the table.
 *
 * Life of a bridge instance, as a launcher drives it (the runtime's load path, cudaq_rt/
 * server.h, which cudaq-rt-run, the tests and the benchmarks use):
 *
 *   ops = cudaq_rt_bridge_entry();                       check abi_version, struct_size
 *   ops->instance_config(&launch, "slots=64", out, n, &needed);    where the bridge has it
 *       -> out = "slots=64,layout=lanes": the configuration for this kernel (the warp form) and
 *          GPU, the bridge's decision; without the operation, the user's configuration as it is
 *   ops->create(out, &bridge);                            allocates the ring, device context
 *   ctx = ops->device_context(bridge);                    -> cudaq_rt_dispatch_params.transport_ctx
 *   slot_size = ops->slot_size(bridge);                   -> cudaq_rt_dispatch_params.slot_size
 *   launch the dispatch kernel; then, for a host-fed bridge (CUDAQ_RT_BRIDGE_CAP_HOST_FRAMES):
 *     ops->send(bridge, frame, n);  ops->receive(bridge, buf, cap, &n);   any number of times
 *   or, for a bridge that takes its frames from elsewhere (CUDAQ_RT_BRIDGE_CAP_SELF_FED: a socket):
 *     ops->start(bridge);                        its own host threads move frames from now on
 *     ... ops->counters(), ops->latency() read live, from any thread ...
 *     ops->drain(bridge, timeout_s);             takes no more frames, answers what it took
 *   set the shutdown flag and wait for the kernel; then ops->stop(bridge) (a self-fed bridge joins
 *   its threads); to serve again, clear the flag and launch again on the same instance (the
 *   loopback bridge resumes where the last kernel stopped; the rules are in cudaq_rt/dispatch.h),
 *   and start again; at the end, ops->destroy(bridge).
 *
 * Operations return a cudaq_rt_bridge_result; on CUDAQ_RT_BRIDGE_ERROR, last_error() says why
 * (last_error(NULL) for a failed create). An instance is used by one host thread at a time.
 *
 * This header is C and needs nothing but the C library, so a bridge can be written in C and built
 * without the runtime; the runtime's C++ loader is cudaq_rt/bridge.h. */
#ifndef CUDAQ_RT_BRIDGE_PLUGIN_H
#define CUDAQ_RT_BRIDGE_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

/* Bumped on any incompatible change to cudaq_rt_bridge_ops. Fields are only ever appended within
 * one version, and the runtime uses an appended field only when struct_size covers it. */
#define CUDAQ_RT_BRIDGE_ABI_VERSION 1u
#define CUDAQ_RT_BRIDGE_ENTRY_SYMBOL "cudaq_rt_bridge_entry"
/* Bridge NAME lives in lib<prefix>NAME.so. */
#define CUDAQ_RT_BRIDGE_LIBRARY_PREFIX "libcudaq_rt_bridge_"

typedef enum cudaq_rt_bridge_result {
  CUDAQ_RT_BRIDGE_OK = 0,
  /* Nothing to do now: no free slot for send, no response yet for receive. Try again. */
  CUDAQ_RT_BRIDGE_AGAIN = 1,
  CUDAQ_RT_BRIDGE_ERROR = -1
} cudaq_rt_bridge_result;

/* Capability bits. */
#define CUDAQ_RT_BRIDGE_CAP_HOST_FRAMES 0x1u /* send/receive feed the ring from this process */
/* The bridge receives requests and sends responses on threads of its own (start, drain, stop);
 * a launcher serves with it (cudaq-rt-run --serve) rather than sending frames itself. */
#define CUDAQ_RT_BRIDGE_CAP_SELF_FED 0x2u

/* One live counter of a bridge instance: a static name ("datagrams_received") and its value. */
typedef struct cudaq_rt_bridge_counter {
  const char *name;
  uint64_t value;
} cudaq_rt_bridge_counter;

/* Request latencies as the bridge measures them (for a network bridge: from the datagram's
 * arrival to its response's departure) as a histogram of CUDAQ_RT_LATENCY_BUCKETS buckets of
 * nanoseconds, so that instances on several GPUs can be summed. Bucket i < 32 holds exactly i ns;
 * above, each power of two [2^e, 2^(e+1)) is split into 32 equal buckets (about 3% wide); the last
 * bucket also holds everything longer (about 2.2 s and up). */
#define CUDAQ_RT_LATENCY_SUB_BITS 5u
#define CUDAQ_RT_LATENCY_MAX_EXP 40u
#define CUDAQ_RT_LATENCY_BUCKETS                                                                   \
  ((1u << CUDAQ_RT_LATENCY_SUB_BITS) * (CUDAQ_RT_LATENCY_MAX_EXP - CUDAQ_RT_LATENCY_SUB_BITS + 2u))

static inline uint32_t cudaq_rt_latency_bucket(uint64_t ns) {
  const uint32_t sub = 1u << CUDAQ_RT_LATENCY_SUB_BITS;
  if (ns < sub)
    return (uint32_t)ns;
  uint32_t e = 63u - (uint32_t)__builtin_clzll(ns);
  if (e > CUDAQ_RT_LATENCY_MAX_EXP)
    return CUDAQ_RT_LATENCY_BUCKETS - 1u;
  const uint32_t m = (uint32_t)(ns >> (e - CUDAQ_RT_LATENCY_SUB_BITS)) & (sub - 1u);
  return sub + (e - CUDAQ_RT_LATENCY_SUB_BITS) * sub + m;
}

/* The smallest value, in ns, that falls in bucket i. */
static inline uint64_t cudaq_rt_latency_bucket_low(uint32_t i) {
  const uint32_t sub = 1u << CUDAQ_RT_LATENCY_SUB_BITS;
  if (i < sub)
    return i;
  const uint32_t e = (i - sub) / sub + CUDAQ_RT_LATENCY_SUB_BITS;
  return (uint64_t)(sub + (i - sub) % sub) << (e - CUDAQ_RT_LATENCY_SUB_BITS);
}

/* What a launcher knows about an instance it is about to create that the configuration does not
 * say: the dispatch kernel that will read the ring, and the instance's place among several. A
 * bridge decides what that means for it (instance_config). Fields are only ever appended; one
 * appended after `instance` may be read only when struct_size covers it. */
typedef struct cudaq_rt_bridge_launch {
  uint32_t struct_size; /* sizeof(cudaq_rt_bridge_launch) as the launcher was built */
  /* Threads of the dispatch kernel that poll the ring side by side, each for its own slots: 1 for
   * a kernel that drives cudaq_dev_rx_poll from one thread (the unified kernel), 32 for one that
   * drives the warp-form hooks (the warp dispatcher; cudaq_rt/dispatch.h), 32 * B for the warp
   * dispatcher launched as B blocks, one serving warp each (a bridge that cannot serve B warps
   * refuses), 0 when the launcher cannot tell (a custom kernel). */
  uint32_t polling_lanes;
  /* The instance's place among those one launcher serves with, one per GPU (cudaq-rt-run --serve
   * --device 0,1 creates instances 0 and 1); 0 for a lone instance. */
  uint32_t instance;
} cudaq_rt_bridge_launch;

/* One bridge instance; its layout is the bridge's own business. */
typedef struct cudaq_rt_bridge cudaq_rt_bridge;

typedef struct cudaq_rt_bridge_ops {
  uint32_t abi_version; /* CUDAQ_RT_BRIDGE_ABI_VERSION */
  uint32_t struct_size; /* sizeof(cudaq_rt_bridge_ops) as the bridge was built */
  const char *name;     /* "loopback": what users pass to --bridge */
  const char *description;
  uint32_t capabilities; /* CUDAQ_RT_BRIDGE_CAP_* */
  uint32_t reserved;

  /* Creates an instance from a configuration string of comma-separated key=value pairs (NULL or
   * "" for the defaults; unknown keys are an error). Allocates everything the device side needs,
   * so a CUDA context must be current. */
  cudaq_rt_bridge_result (*create)(const char *config, cudaq_rt_bridge **out);
  /* Frees the instance; the dispatch kernel must have stopped. NULL is ignored. */
  void (*destroy)(cudaq_rt_bridge *bridge);
  /* Why the last call on `bridge` failed, or why the last create on this thread failed when
   * `bridge` is NULL. Valid until the next call on the same instance (or thread). */
  const char *(*last_error)(const cudaq_rt_bridge *bridge);

  /* The device-accessible context to pass as cudaq_dev_enter_kernel's `ctx`. */
  void *(*device_context)(cudaq_rt_bridge *bridge);
  /* Bytes per frame, 24-byte header included: the dispatch kernel's slot_size. */
  uint32_t (*slot_size)(cudaq_rt_bridge *bridge);
  /* Frames the ring holds at once: how many requests can be in flight. */
  uint32_t (*num_slots)(cudaq_rt_bridge *bridge);

  /* CUDAQ_RT_BRIDGE_CAP_HOST_FRAMES only (else NULL). Queues one request frame of `size` bytes
   * (at most slot_size); AGAIN when every slot is in flight. Frames are served in order. A frame
   * that is not whole, i.e. whose header's arg_len is not size - 24, is an error and is not
   * queued: the device would have to answer it CUDAQ_RT_STATUS_TRUNCATED (cudaq_rt/wire.h). */
  cudaq_rt_bridge_result (*send)(cudaq_rt_bridge *bridge, const void *frame, size_t size);
  /* Takes the oldest response, in the order the requests were sent; AGAIN when it is not there
   * yet. `capacity` below the frame's size is an error and the frame stays queued. */
  cudaq_rt_bridge_result (*receive)(cudaq_rt_bridge *bridge, void *buffer, size_t capacity,
                                    size_t *size);

  /* Appended within ABI version 1: a launcher uses them only when struct_size covers them (and
   * they are not NULL). A bridge built before them is a host-fed bridge without counters. */

  /* CUDAQ_RT_BRIDGE_CAP_SELF_FED only (else NULL). start: after the dispatch kernel is launched,
   * starts the threads that feed the ring. drain: takes no more requests (what already arrived,
   * e.g. in a socket's buffer, is still taken) and waits up to timeout_s until every request it
   * took has been answered; AGAIN when the time ran out first (the kernel must still be running).
   * stop: after the kernel stopped, ends the threads (a no-op when they are not running). */
  cudaq_rt_bridge_result (*start)(cudaq_rt_bridge *bridge);
  cudaq_rt_bridge_result (*drain)(cudaq_rt_bridge *bridge, double timeout_s);
  void (*stop)(cudaq_rt_bridge *bridge);
  /* Where clients reach the instance ("127.0.0.1:40123"), or NULL when that means nothing. */
  const char *(*address)(const cudaq_rt_bridge *bridge);
  /* May be NULL. Fills up to `capacity` counters (out may be NULL when capacity is 0) and returns
   * how many the bridge has; names and their order are fixed for an instance. Safe to call from
   * any thread while the bridge runs: each value is read atomically (not all at one instant). */
  uint32_t (*counters)(const cudaq_rt_bridge *bridge, cudaq_rt_bridge_counter *out,
                       uint32_t capacity);
  /* May be NULL. Adds the latency histogram (CUDAQ_RT_LATENCY_BUCKETS counts) into `buckets`;
   * any thread, any time, like counters. */
  void (*latency)(const cudaq_rt_bridge *bridge, uint64_t *buckets);

  /* The batched forms of send and receive, for one host thread that keeps many requests in
   * flight (one call per batch instead of one per frame). Optional, even for a host-fed bridge:
   * NULL (or a struct_size that ends before them) and the runtime loops over send and receive. */
  /* Queues frames[0..count) (sizes[i] bytes each) in order, as send would one by one, until one
   * does not fit; *queued says how many went. OK when at least one went (or count is 0), AGAIN
   * when none fit, ERROR when frames[*queued] is refused (the ones before it are queued). */
  cudaq_rt_bridge_result (*send_batch)(cudaq_rt_bridge *bridge, const void *const *frames,
                                       const size_t *sizes, size_t count, size_t *queued);
  /* Takes up to `count` responses, oldest first, response i into buffer + i * stride (at most
   * stride bytes) with its size in sizes[i]; *taken says how many. OK when at least one was
   * taken, AGAIN when none was there, ERROR as receive (the ones before it are taken). */
  cudaq_rt_bridge_result (*receive_batch)(cudaq_rt_bridge *bridge, void *buffer, size_t stride,
                                          size_t *sizes, size_t count, size_t *taken);

  /* Optional: without it (NULL, or a struct_size that ends before it) an instance is created with
   * the configuration as the user gave it. Called before create, needing no CUDA context: the
   * configuration an instance for `launch` is to be created with, given the user's `config`
   * (never NULL; "" for the defaults), so that what depends on the kernel or the GPU is the
   * bridge's own decision (the loopback and UDP bridges lay their ring out for the warp form's
   * lanes unless config names a layout; the UDP bridge serves instance i on port N + i). Writes
   * the configuration and its NUL into out[0..capacity) and sets *needed to their size; AGAIN,
   * out untouched, when capacity is below that (out may be NULL when capacity is 0): call again
   * with *needed bytes; the answer is the same for the same arguments. ERROR when config is
   * refused: last_error(NULL) says why, on this thread, as after a failed create. */
  cudaq_rt_bridge_result (*instance_config)(const cudaq_rt_bridge_launch *launch,
                                            const char *config, char *out, size_t capacity,
                                            size_t *needed);
  /* Optional (NULL, or a struct_size that ends before it: 0). Bytes of dynamic shared memory the
   * instance's device hooks want the dispatch kernel launched with (the loopback and UDP bridges:
   * slot_size with spare_frame=1, a second request frame for chained bulk requests). The launcher
   * gives them where the GPU can (past 48 KB a kernel opts in); the hooks check
   * %dynamic_smem_size and go without where they did not get them. Only for a dispatch kernel
   * that uses no dynamic shared memory of its own: the hooks' bytes start at its base. */
  uint32_t (*dispatch_shared_bytes)(cudaq_rt_bridge *bridge);
  /* Optional, CUDAQ_RT_BRIDGE_CAP_SELF_FED only (NULL, or a struct_size that ends before it: the
   * launcher uses drain). For a swap of the dispatch kernel (a hot reload): as drain, but takes
   * nothing more at once, not even what already waits in a socket's buffer. What arrives stays
   * there until the next start, when the new kernel serves it; what was taken is answered
   * (waiting up to timeout_s: AGAIN when the time ran out first). Under steady load a drain may
   * go on taking what keeps arriving; a hold ends as soon as the requests taken are answered. */
  cudaq_rt_bridge_result (*hold)(cudaq_rt_bridge *bridge, double timeout_s);
  /* Optional, CUDAQ_RT_BRIDGE_CAP_HOST_FRAMES only (NULL, or a struct_size that ends before it:
   * one feeder, the instance). Feeder `index` of the instance, or NULL past the last: host threads
   * that feed one instance side by side each drive a feeder of their own, which holds a share of
   * the slots (num_slots / feeders) and takes and answers its frames in order, apart from the
   * others' (the loopback bridge's feeders=N, for the warp dispatcher, whose lanes serve their own
   * slots). Feeder 0 is the instance. A feeder is passed where send, receive, send_batch,
   * receive_batch and last_error take an instance, and nowhere else; it lives as long as the
   * instance. One thread at a time drives a feeder. */
  cudaq_rt_bridge *(*feeder)(cudaq_rt_bridge *bridge, uint32_t index);
} cudaq_rt_bridge_ops;

/* The size of the table as ABI version 1 first defined it (up to receive). */
#define CUDAQ_RT_BRIDGE_OPS_V1_SIZE (offsetof(cudaq_rt_bridge_ops, receive) + sizeof(void *))

#ifdef __cplusplus
extern "C" {
#endif
/* What a bridge library exports (with default visibility). Returns a table with static storage
 * duration; never NULL. */
typedef const cudaq_rt_bridge_ops *(*cudaq_rt_bridge_entry_fn)(void);
const cudaq_rt_bridge_ops *cudaq_rt_bridge_entry(void);
#ifdef __cplusplus
}
#endif

#endif /* CUDAQ_RT_BRIDGE_PLUGIN_H */
