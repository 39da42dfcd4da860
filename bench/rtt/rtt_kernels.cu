// Dispatch kernels for bench/rtt/loopback_rtt.cpp, packed with --dispatcher and launched through
// the runtime's load path like any custom dispatch kernel:
//   cudaq_rt_bench_stages        the unified kernel's loop (libdispatch/src/unified_dispatch.cu),
//                                step by step, with a clock64 stamp between the steps; each
//                                request's stage times go to cudaq_rt_bench_stage_log, which the
//                                bench reads after the kernel stopped;
//   cudaq_rt_bench_stages_direct the same, calling handlers through the unit of direct calls
//                                (cudaq_rt_call_direct; linked whole, the handlers are inlined);
//   cudaq_rt_bench_span,         the same with no stamp between the steps: the time after ready
//   cudaq_rt_bench_span_direct   as the unified kernel spends it (the stamps keep the steps from
//                                overlapping, and cost a few cycles each);
//   cudaq_rt_bench_global_table  the unified kernel with the function table left in device
//                                memory (what the table in shared memory buys);
//   cudaq_rt_bench_no_cache      the unified kernel without its handler cache;
//   cudaq_rt_bench_hooks_echo,   the transport without the dispatcher, and without the hooks
//   cudaq_rt_bench_raw_ring      (below; ..._span: stamped);
//   cudaq_rt_bench_fused...      the dispatcher's work on the probe's registers, no hooks (below).
// The warp kernel with stamps is in warp_rounds.cu, an archive and a package of its own.
//
// Why these restate the built-in kernels' loops instead of calling them: a stamp must sit between
// two steps of one request, inside the loop, and a hook for it in libdispatch would change the
// shipped kernels' code, which every number here is meant to describe (their SASS is compared
// before and after each bench change, bench/loopback_rtt.md). So only the loop is restated; each
// step (validation, lookup, the handler call and its outcome, the response header, the counters)
// is the shipped kernels' own, from cudaq_rt/dispatch_framing.cuh.
#include "rtt_common.cuh"

// Per request, in SM cycles: [0] ready -> handler found (validation, lookup), [1] the handler,
// [2] the response header, [3] the counters (recorded, stored; before the header, as in the
// unified kernel), [4] tx_publish, [5] all of it,
// [6] 1 when the bridge staged the request in shared memory, [7] the probe that found it ->
// rx_poll returned, [8] that probe, issued -> came back (a loopback bridge built with
// CUDAQ_RT_LOOPBACK_STAMP only; else 0).
extern "C" {
__device__ unsigned int cudaq_rt_bench_stage_log[BENCH_STAGE_ROWS][9];
__device__ unsigned long long cudaq_rt_bench_stage_count;
__device__ unsigned long long cudaq_rt_bench_stage_clock[2]; // SM cycles and ns over the kernel
}
CUDAQ_RT_EXPORT_GLOBAL(cudaq_rt_bench_stage_log);
CUDAQ_RT_EXPORT_GLOBAL(cudaq_rt_bench_stage_count);
CUDAQ_RT_EXPORT_GLOBAL(cudaq_rt_bench_stage_clock);

namespace {
__device__ __forceinline__ bool first_thread() {
  return threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0 && blockIdx.x == 0 &&
         blockIdx.y == 0 && blockIdx.z == 0;
}
// The SM clock where Stamps is on, else 0 (and no instruction).
template <bool Stamps> __device__ __forceinline__ long long stamp() {
  if constexpr (Stamps)
    return clock64();
  else
    return 0;
}
// cudaq_rt_answer_request's steps with a clock64 stamp around each: t[0] start, t[1] the handler
// found (validation, lookup), t[2] the handler returned. `direct`: the handler is called through
// the unit of direct calls a whole-program link generates, as the built-in kernels' direct form
// does (cudaq_rt_call_direct, cudaq_rt/dispatch_framing.cuh). Without Stamps, only t[0] is taken.
template <bool direct = false, bool Stamps = true>
__device__ __forceinline__ cudaq_rt_answer answer_stamped(const cudaq_rt_dispatch_params &p,
                                                          const cudaq_rt_function_entry *table,
                                                          cudaq_rt_handler_cache *cache,
                                                          void *request, void *response,
                                                          long long (&t)[4]) {
  t[0] = clock64();
  const cudaq_rt_request_fields h = cudaq_rt_read_request_header(request);
  uint32_t result_len = 0;
  int status = cudaq_rt_validate_fields(&h, p.slot_size);
  cudaq_rt_handler_fn handler = 0;
  if (status == CUDAQ_RT_STATUS_OK) {
    handler = cudaq_rt_find_handler_cached(table, p.num_functions, h.function_id, cache);
    if (!handler)
      status = CUDAQ_RT_STATUS_UNKNOWN_FUNCTION;
  }
  t[1] = stamp<Stamps>();
  if (handler)
    status = direct ? cudaq_rt_call_handler_direct_len(h.function_id, handler, request, response,
                                                       h.arg_len, p.slot_size, &result_len)
                    : cudaq_rt_call_handler_len(handler, request, response, h.arg_len, p.slot_size,
                                                &result_len);
  t[2] = stamp<Stamps>();
  const cudaq_rt_answer a = {status, result_len, h.request_id, h.ptp_timestamp};
  return a;
}
// answer_stamped, then the response header: t[3] the header written.
__device__ __forceinline__ void serve_stamped(const cudaq_rt_dispatch_params &p,
                                              const cudaq_rt_function_entry *table,
                                              cudaq_rt_handler_cache *cache, void *request,
                                              void *response, long long (&t)[4]) {
  const cudaq_rt_answer a = answer_stamped(p, table, cache, request, response, t);
  cudaq_rt_write_answer(response, &a);
  t[3] = clock64();
}
// cudaq_rt_bench_stages and its variants. Stamps: a stamp between the steps; without, only around
// them ([5] to [8] are filled in).
template <bool direct, bool Stamps = true>
__device__ __forceinline__ void stages(const cudaq_rt_dispatch_params &p) {
  if (!first_thread())
    return;
  __align__(16) unsigned char storage[CUDAQ_RT_SESSION_STORAGE_SIZE];
  void *session = cudaq_dev_enter_kernel(storage, p.transport_ctx, p.shutdown_flag);
  if (!session)
    return;
  __shared__ cudaq_rt_function_entry rows[BENCH_TABLE_ROWS];
  const cudaq_rt_function_entry *table =
      cudaq_rt_table_in_shared(p.function_table, p.num_functions, rows, BENCH_TABLE_ROWS);
  cudaq_rt_dispatch_counters counters = cudaq_rt_counters_load(p.stats);
  cudaq_rt_handler_cache cache = {0, 0};
  unsigned long long n = 0;
  const long long c0 = clock64();
  const unsigned long long ns0 = globaltimer_ns();
  void *request = 0, *response = 0;
  // Where a bridge built with CUDAQ_RT_LOOPBACK_STAMP leaves the clocks of the probe that found the
  // request, issued and back (bridges/loopback/loopback_device.cu); other bridges leave them 0.
  // (Plain, not volatile, accesses at a constant offset: the storage may then stay in registers,
  // as it does in the unified kernel.)
  long long *probe_clock =
      reinterpret_cast<long long *>(storage + CUDAQ_RT_SESSION_STORAGE_SIZE - 16);
  probe_clock[0] = probe_clock[1] = 0;
  while (cudaq_dev_rx_poll(session, &request, &response) == CUDAQ_DEV_RX_READY) {
    const long long issued = probe_clock[0], probed = probe_clock[1];
    unsigned int *row = cudaq_rt_bench_stage_log[n % BENCH_STAGE_ROWS];
    // In the unified kernel's order: the answer, the counters, the header, tx_publish.
    long long t[4];
    const cudaq_rt_answer a =
        answer_stamped<direct, Stamps>(p, table, &cache, request, response, t);
    cudaq_rt_counters_record(&counters, a.status);
    cudaq_rt_counters_store(p.stats, &counters);
    t[3] = stamp<Stamps>();
    cudaq_rt_write_answer(response, &a);
    const long long t4 = stamp<Stamps>();
    cudaq_dev_tx_publish(session, response);
    const long long t5 = clock64();
    if constexpr (Stamps) {
      row[0] = (unsigned int)(t[1] - t[0]);
      row[1] = (unsigned int)(t[2] - t[1]);
      row[2] = (unsigned int)(t4 - t[3]);
      row[3] = (unsigned int)(t[3] - t[2]);
      row[4] = (unsigned int)(t5 - t4);
    }
    row[5] = (unsigned int)(t5 - t[0]);
    row[7] = probed ? (unsigned int)(t[0] - probed) : 0u;
    row[8] = probed ? (unsigned int)(probed - issued) : 0u;
    row[6] = __isShared(request);
    ++n;
  }
  cudaq_rt_bench_stage_count = n;
  cudaq_rt_bench_stage_clock[0] = clock64() - c0;
  cudaq_rt_bench_stage_clock[1] = globaltimer_ns() - ns0;
}
} // namespace

extern "C" __global__ void cudaq_rt_bench_stages(cudaq_rt_dispatch_params p) {
  stages<false>(p);
}
CUDAQ_RT_EXPORT_DISPATCH_KERNEL(cudaq_rt_bench_stages);

// The stage kernel calling handlers through the unit of direct calls (cudaq_rt_call_direct): linked
// whole, as the bench does, the handlers are inlined; per TU each is a call by name.
extern "C" __global__ void cudaq_rt_bench_stages_direct(cudaq_rt_dispatch_params p) {
  stages<true>(p);
}
CUDAQ_RT_EXPORT_DISPATCH_KERNEL(cudaq_rt_bench_stages_direct);

// The unified kernel's loop stamped only before and after its steps, per TU and direct.
extern "C" __global__ void cudaq_rt_bench_span(cudaq_rt_dispatch_params p) {
  stages<false, false>(p);
}
CUDAQ_RT_EXPORT_DISPATCH_KERNEL(cudaq_rt_bench_span);
extern "C" __global__ void cudaq_rt_bench_span_direct(cudaq_rt_dispatch_params p) {
  stages<true, false>(p);
}
CUDAQ_RT_EXPORT_DISPATCH_KERNEL(cudaq_rt_bench_span_direct);

// The stage kernel's serve done twice per request, each pass timed: [0..2] validate + lookup,
// handler, header the first time, [3..5] the same again (code and data now warm), [6] tx_publish,
// [7] and [8] unused. Only the second pass's response is published (the same bytes).
extern "C" __global__ void cudaq_rt_bench_stages_rerun(cudaq_rt_dispatch_params p) {
  if (!first_thread())
    return;
  __align__(16) unsigned char storage[CUDAQ_RT_SESSION_STORAGE_SIZE];
  void *session = cudaq_dev_enter_kernel(storage, p.transport_ctx, p.shutdown_flag);
  if (!session)
    return;
  __shared__ cudaq_rt_function_entry rows[BENCH_TABLE_ROWS];
  const cudaq_rt_function_entry *table =
      cudaq_rt_table_in_shared(p.function_table, p.num_functions, rows, BENCH_TABLE_ROWS);
  cudaq_rt_handler_cache cache = {0, 0};
  unsigned long long n = 0;
  void *request = 0, *response = 0;
  while (cudaq_dev_rx_poll(session, &request, &response) == CUDAQ_DEV_RX_READY) {
    unsigned int *row = cudaq_rt_bench_stage_log[n % BENCH_STAGE_ROWS];
#pragma unroll 1
    for (int pass = 0; pass < 2; ++pass) {
      long long t[4];
      serve_stamped(p, table, &cache, request, response, t);
      for (int k = 0; k < 3; ++k)
        row[3 * pass + k] = (unsigned int)(t[k + 1] - t[k]);
    }
    const long long t4 = clock64();
    cudaq_dev_tx_publish(session, response);
    row[6] = (unsigned int)(clock64() - t4);
    ++n;
  }
  cudaq_rt_bench_stage_count = n;
}
CUDAQ_RT_EXPORT_DISPATCH_KERNEL(cudaq_rt_bench_stages_rerun);

namespace {
// The unified kernel's loop (libdispatch/src/unified_dispatch.cu) with one knob turned: the
// function table copied to shared memory or not, the handler cache used or not, the bridge's
// session in the kernel's own storage or in shared memory.
template <bool SharedTable, bool Cache, bool SharedSession = false>
__device__ void unified_variant(cudaq_rt_dispatch_params p) {
  if (!first_thread())
    return;
  __align__(16) unsigned char local_storage[CUDAQ_RT_SESSION_STORAGE_SIZE];
  __shared__ __align__(16) unsigned char shared_storage[CUDAQ_RT_SESSION_STORAGE_SIZE];
  unsigned char *storage = SharedSession ? shared_storage : local_storage;
  void *session = cudaq_dev_enter_kernel(storage, p.transport_ctx, p.shutdown_flag);
  if (!session)
    return;
  __shared__ cudaq_rt_function_entry rows[BENCH_TABLE_ROWS];
  const cudaq_rt_function_entry *table =
      SharedTable
          ? cudaq_rt_table_in_shared(p.function_table, p.num_functions, rows, BENCH_TABLE_ROWS)
          : p.function_table;
  cudaq_rt_dispatch_counters counters = cudaq_rt_counters_load(p.stats);
  cudaq_rt_handler_cache cache = {0, 0};
  void *request = 0, *response = 0;
  while (cudaq_dev_rx_poll(session, &request, &response) == CUDAQ_DEV_RX_READY) {
    cudaq_rt_serve_frame_stored(table, p.num_functions, p.slot_size, request, response, p.stats,
                                &counters, Cache ? &cache : 0);
    cudaq_dev_tx_publish(session, response);
  }
}
} // namespace

// The unified kernel's plain build (libdispatch/src/unified_dispatch.cu without
// CUDAQ_RT_UNIFIED_LONE), which cudaq-rt-link no longer takes with the loopback bridge: the lone
// form's baseline.
extern "C" __global__ void cudaq_rt_bench_unified_plain(cudaq_rt_dispatch_params p) {
  unified_variant<true, true>(p);
}
CUDAQ_RT_EXPORT_DISPATCH_KERNEL(cudaq_rt_bench_unified_plain);

// The unified kernel with the bridge's session in shared memory, not in its own storage (which
// the compiler keeps in registers): what 250 registers cost the kernel, or save it.
extern "C" __global__ void cudaq_rt_bench_shared_session(cudaq_rt_dispatch_params p) {
  unified_variant<true, true, true>(p);
}
CUDAQ_RT_EXPORT_DISPATCH_KERNEL(cudaq_rt_bench_shared_session);

extern "C" __global__ void cudaq_rt_bench_global_table(cudaq_rt_dispatch_params p) {
  unified_variant<false, true>(p);
}
CUDAQ_RT_EXPORT_DISPATCH_KERNEL(cudaq_rt_bench_global_table);

// What the transport costs without the dispatcher, two ways:
//   cudaq_rt_bench_hooks_echo  the bridge's hooks (rx_poll, tx_publish) around a fixed 8-byte
//                              echo: no validation, lookup, call or counters;
//   cudaq_rt_bench_raw_ring    no hooks either: the loopback ring's head cells polled and the
//                              response cells written straight from registers (bridges/loopback's
//                              layout, loopback_ring.h), the request never staged, and pushed out
//                              with a fence (..._no_push: without).
// Both answer every request as an echo of its first 8 payload bytes, whatever its function_id.
#include "../../bridges/loopback/loopback_ring.h"
#include "../probe/probe.h"

extern "C" __global__ void cudaq_rt_bench_hooks_echo(cudaq_rt_dispatch_params p) {
  if (!first_thread())
    return;
  __align__(16) unsigned char storage[CUDAQ_RT_SESSION_STORAGE_SIZE];
  void *session = cudaq_dev_enter_kernel(storage, p.transport_ctx, p.shutdown_flag);
  if (!session)
    return;
  void *request = 0, *response = 0;
  while (cudaq_dev_rx_poll(session, &request, &response) == CUDAQ_DEV_RX_READY) {
    const uint2 *in = (const uint2 *)request;
    uint2 *out = (uint2 *)response;
    const uint2 h1 = in[1], h2 = in[2], d = in[3];
    out[0] = make_uint2(CUDAQ_RT_RESPONSE_MAGIC, 0u);
    out[1] = make_uint2(8u, h1.y);
    out[2] = h2;
    out[3] = d;
    cudaq_dev_tx_publish(session, response);
  }
}
CUDAQ_RT_EXPORT_DISPATCH_KERNEL(cudaq_rt_bench_hooks_echo);

// The unified kernel taken apart on the bridge's hooks, one step added at a time to the fixed
// echo above: Validate (the header read, validated, its handler looked up: cached, in the shared
// table; the echo still fixed), Call (validation, lookup and the handler called through the
// table's pointer, its outcome applied: cudaq_rt_answer_request, as the unified kernel does),
// Counters (recorded and stored to the mapped stats before the header). All three are the
// unified kernel's steps (cudaq_rt_bench_hooks_all). Call is taken only with Validate.
// Two more forms split the call's cost into the call and what the publish then cannot know
// (measurement only: they answer the bench's 8-byte echoes right, nothing else):
//   kCallLen8     the call, then a valid answer's result_len taken as 8 (the compiler then knows
//                 the response's length, as with the fixed echo; its bytes still come from the
//                 handler's frame);
//   kArgLen       no call: the fixed echo with its result_len taken from the request's arg_len
//                 (a length known only at run time, the call's one effect on tx_publish).
// And two that call the echo by name (bench/loopback_rtt.md, "What the unified kernel's code
// costs a lone request"):
//   kCallEcho         the echo's export called by name (a direct call; linked whole, inlined: no
//                     call left in the kernel), any other function refused;
//   kCallEchoOrTable  the same, any other function called through the table (linked whole: the
//                     echo inlined, beside a call that the bench's echoes never take).
namespace {
enum HookCall { kNoCall, kCall, kCallLen8, kArgLen, kCallEcho, kCallEchoOrTable };
// The echo's export, called by name by kCallEcho above and by the fused prototype's Named form
// below (no table pointer, no direct-call switch): the handler step with only the handler's own
// code in it.
extern "C" __device__ int cudaq_rt_handler_call__echo(const void *, void *, uint32_t, uint32_t,
                                                      uint32_t *);
constexpr uint32_t kEchoId = 0xd49dd484u; // cudaq_rt_function_id("echo")

template <bool Validate, int Call, bool Counters>
__device__ __forceinline__ void hooks_steps(cudaq_rt_dispatch_params p) {
  static_assert(Validate || Call == kNoCall, "a handler is called for a validated request only");
  if (!first_thread())
    return;
  __align__(16) unsigned char storage[CUDAQ_RT_SESSION_STORAGE_SIZE];
  void *session = cudaq_dev_enter_kernel(storage, p.transport_ctx, p.shutdown_flag);
  if (!session)
    return;
  __shared__ cudaq_rt_function_entry rows[BENCH_TABLE_ROWS];
  const cudaq_rt_function_entry *table =
      cudaq_rt_table_in_shared(p.function_table, p.num_functions, rows, BENCH_TABLE_ROWS);
  cudaq_rt_dispatch_counters counters = cudaq_rt_counters_load(p.stats);
  cudaq_rt_handler_cache cache = {0, 0};
  void *request = 0, *response = 0;
  while (cudaq_dev_rx_poll(session, &request, &response) == CUDAQ_DEV_RX_READY) {
    cudaq_rt_answer a;
    if constexpr (Call == kCall || Call == kCallLen8) {
      // The unified kernel's own step (cudaq_rt_serve_frame_stored's).
      a = cudaq_rt_answer_request(table, p.num_functions, p.slot_size, request, response, &cache);
      if constexpr (Call == kCallLen8)
        a.result_len = a.status == CUDAQ_RT_STATUS_OK ? 8u : 0u;
    } else if (Call == kCallEchoOrTable &&
               cudaq_rt_read_request_header(request).function_id != kEchoId) {
      a = cudaq_rt_answer_request(table, p.num_functions, p.slot_size, request, response, &cache);
    } else if constexpr (Call == kCallEcho || Call == kCallEchoOrTable) {
      const cudaq_rt_request_fields h = cudaq_rt_read_request_header(request);
      uint32_t result_len = 0;
      int32_t status = cudaq_rt_validate_fields(&h, p.slot_size);
      if (status == CUDAQ_RT_STATUS_OK &&
          (h.function_id != kEchoId ||
           !cudaq_rt_find_handler_cached(table, p.num_functions, h.function_id, &cache)))
        status = CUDAQ_RT_STATUS_UNKNOWN_FUNCTION;
      if (status == CUDAQ_RT_STATUS_OK) // the framing's call, given the echo itself
        status = cudaq_rt_call_handler_len(cudaq_rt_handler_call__echo, request, response,
                                           h.arg_len, p.slot_size, &result_len);
      a = {status, result_len, h.request_id, h.ptp_timestamp};
    } else {
      const cudaq_rt_request_fields h = cudaq_rt_read_request_header(request);
      int32_t status = CUDAQ_RT_STATUS_OK;
      if constexpr (Validate) {
        status = cudaq_rt_validate_fields(&h, p.slot_size);
        if (status == CUDAQ_RT_STATUS_OK &&
            !cudaq_rt_find_handler_cached(table, p.num_functions, h.function_id, &cache))
          status = CUDAQ_RT_STATUS_UNKNOWN_FUNCTION;
      }
      ((uint2 *)response)[3] = ((const uint2 *)request)[3];
      if (Call == kArgLen && status == CUDAQ_RT_STATUS_OK && h.arg_len > 8u)
        status = CUDAQ_RT_STATUS_PAYLOAD_TOO_LARGE; // only 8 bytes are echoed
      const uint32_t ok_len = Call == kArgLen ? h.arg_len : 8u;
      // An error carries no result.
      a = {status, status == CUDAQ_RT_STATUS_OK ? ok_len : 0u, h.request_id, h.ptp_timestamp};
    }
    if constexpr (Counters) {
      cudaq_rt_counters_record(&counters, a.status);
      cudaq_rt_counters_store(p.stats, &counters);
    }
    cudaq_rt_write_answer(response, &a);
    cudaq_dev_tx_publish(session, response);
  }
}
} // namespace
extern "C" __global__ void cudaq_rt_bench_hooks_validate(cudaq_rt_dispatch_params p) {
  hooks_steps<true, kNoCall, false>(p);
}
CUDAQ_RT_EXPORT_DISPATCH_KERNEL(cudaq_rt_bench_hooks_validate);
extern "C" __global__ void cudaq_rt_bench_hooks_call(cudaq_rt_dispatch_params p) {
  hooks_steps<true, kCall, false>(p);
}
CUDAQ_RT_EXPORT_DISPATCH_KERNEL(cudaq_rt_bench_hooks_call);
extern "C" __global__ void cudaq_rt_bench_hooks_counters(cudaq_rt_dispatch_params p) {
  hooks_steps<true, kNoCall, true>(p);
}
CUDAQ_RT_EXPORT_DISPATCH_KERNEL(cudaq_rt_bench_hooks_counters);
extern "C" __global__ void cudaq_rt_bench_hooks_all(cudaq_rt_dispatch_params p) {
  hooks_steps<true, kCall, true>(p);
}
CUDAQ_RT_EXPORT_DISPATCH_KERNEL(cudaq_rt_bench_hooks_all);
extern "C" __global__ void cudaq_rt_bench_hooks_call_len8(cudaq_rt_dispatch_params p) {
  hooks_steps<true, kCallLen8, false>(p);
}
CUDAQ_RT_EXPORT_DISPATCH_KERNEL(cudaq_rt_bench_hooks_call_len8);
extern "C" __global__ void cudaq_rt_bench_hooks_arg_len(cudaq_rt_dispatch_params p) {
  hooks_steps<true, kArgLen, false>(p);
}
CUDAQ_RT_EXPORT_DISPATCH_KERNEL(cudaq_rt_bench_hooks_arg_len);
extern "C" __global__ void cudaq_rt_bench_hooks_call_echo(cudaq_rt_dispatch_params p) {
  hooks_steps<true, kCallEcho, true>(p);
}
CUDAQ_RT_EXPORT_DISPATCH_KERNEL(cudaq_rt_bench_hooks_call_echo);
extern "C" __global__ void cudaq_rt_bench_hooks_call_echo_or_table(cudaq_rt_dispatch_params p) {
  hooks_steps<true, kCallEchoOrTable, true>(p);
}
CUDAQ_RT_EXPORT_DISPATCH_KERNEL(cudaq_rt_bench_hooks_call_echo_or_table);

namespace {
// The ring position of the kernels below that drive the loopback ring themselves: the slot to
// probe next and the lap it must carry, from where the last kernel on the bridge instance stopped,
// and stored back there at the end; `served` counts the requests answered.
struct RingPosition {
  uint32_t slot, lap, n;
  unsigned long long served;
  __device__ explicit RingPosition(const cudaq_rt_loopback_device_ctx *c)
      : slot(c->resume_slot), lap(c->resume_lap), n(c->num_slots), served(0) {}
  __device__ void advance() {
    ++served;
    if (++slot == n) {
      slot = 0;
      lap = cudaq_rt_loopback_next_lap(lap);
    }
  }
  // Span: the stage log's rows count is the requests served.
  template <bool Span> __device__ void finish(cudaq_rt_loopback_device_ctx *c) const {
    c->resume_slot = slot;
    c->resume_lap = lap;
    if constexpr (Span)
      cudaq_rt_bench_stage_count = served;
  }
};

// A span kernel's stage log row for the request being served: [5] its probe came back (t0) -> the
// response's last store (t_end); no hand-out, so no rx_poll columns.
__device__ __forceinline__ unsigned int *span_row(unsigned long long served, long long t0,
                                                  long long t_end) {
  unsigned int *row = cudaq_rt_bench_stage_log[served % BENCH_STAGE_ROWS];
  row[5] = (unsigned int)(t_end - t0);
  row[6] = 1;
  row[7] = row[8] = 0;
  return row;
}

// Push: fence.sc.sys after each response, as the bridge does (CUDAQ_RT_LOOPBACK_PUSH).
// Span: [5] the probe came back -> the response's last store, in cudaq_rt_bench_stage_log.
template <bool Push, bool Span = false>
__device__ __forceinline__ void raw_ring(const cudaq_rt_dispatch_params &p) {
  if (!first_thread())
    return;
  cudaq_rt_loopback_device_ctx *c = (cudaq_rt_loopback_device_ctx *)p.transport_ctx;
  if (!c || c->magic != CUDAQ_RT_LOOPBACK_CTX_MAGIC)
    return;
  const volatile uint4 *rq = (const volatile uint4 *)c->request_heads;
  volatile uint4 *rs = (volatile uint4 *)c->response_heads;
  const uint32_t layout = c->layout;
  RingPosition at(c);
  for (;;) {
    const uint32_t slot = at.slot, lap = at.lap;
    uint4 v[5];
#pragma unroll
    for (uint32_t k = 0; k < 5; ++k)
      v[k] = load16(rq + cudaq_rt_loopback_head_cell(layout, slot, k));
    const int shutdown = *p.shutdown_flag;
    if (v[0].x == lap && v[0].z == lap) {
      const long long t0 = stamp<Span>();
#pragma unroll
      for (uint32_t k = 1; k < 5; ++k)
        while (v[k].x != lap || v[k].z != lap)
          v[k] = load16(rq + cudaq_rt_loopback_head_cell(layout, slot, k));
      // Request cells: 1 {magic, function_id}, 2 {arg_len, request_id}, 3 ptp, 4 payload.
      store16(rs + cudaq_rt_loopback_head_cell(layout, slot, 1),
              make_uint4(lap, CUDAQ_RT_RESPONSE_MAGIC, lap, 0u));
      store16(rs + cudaq_rt_loopback_head_cell(layout, slot, 2), make_uint4(lap, 8u, lap, v[2].w));
      store16(rs + cudaq_rt_loopback_head_cell(layout, slot, 3), v[3]);
      store16(rs + cudaq_rt_loopback_head_cell(layout, slot, 4), v[4]);
      store16(rs + cudaq_rt_loopback_head_cell(layout, slot, 0), make_uint4(lap, 32u, lap, 0u));
      if constexpr (Span)
        span_row(at.served, t0, clock64());
      if (Push)
        __threadfence_system();
      at.advance();
      continue;
    }
    if (shutdown)
      break;
  }
  at.finish<Span>(c);
}
} // namespace

extern "C" __global__ void cudaq_rt_bench_raw_ring_span(cudaq_rt_dispatch_params p) {
  raw_ring<true, true>(p);
}
CUDAQ_RT_EXPORT_DISPATCH_KERNEL(cudaq_rt_bench_raw_ring_span);
extern "C" __global__ void cudaq_rt_bench_raw_ring(cudaq_rt_dispatch_params p) {
  raw_ring<true>(p);
}
CUDAQ_RT_EXPORT_DISPATCH_KERNEL(cudaq_rt_bench_raw_ring);
extern "C" __global__ void cudaq_rt_bench_raw_ring_no_push(cudaq_rt_dispatch_params p) {
  raw_ring<false>(p);
}
CUDAQ_RT_EXPORT_DISPATCH_KERNEL(cudaq_rt_bench_raw_ring_no_push);

// What a fused path could buy: the unified kernel's serving (dispatch_framing.cuh's validation,
// handler lookup and cache, call, outcome, counters) done on the loopback ring's frame where the
// one-slot probe loaded it (registers), as a bridge hook that served in place could do it. The
// handler's input and output are frames in shared memory; the response cells are stored from
// registers, and pushed out with a fence. No staging, no hand-out, no read-back of the response.
// A prototype to measure, not a server: it takes frames whose request and response fit the head
// cells (at most 8 payload bytes each way) and answers any larger request
// CUDAQ_RT_STATUS_PAYLOAD_TOO_LARGE and any larger result CUDAQ_RT_STATUS_RESULT_TOO_LARGE; it
// serves rings of slots up to 1024 bytes (the bench's) and returns at once on any other.
//   cudaq_rt_bench_fused          handlers called through the table's pointer;
//   cudaq_rt_bench_fused_direct   through the unit of direct calls (linked whole: inlined);
//   ..._span, ..._span_direct     the same, stamped: [5] the probe came back -> the response's
//                                 last store (before the fence).
namespace {
// The largest slot the prototype serves (its handler frames in shared memory).
constexpr uint32_t kFusedFrame = 1024;

// Peek: the next slot's control cell loaded with every probe, as the bridge's one-slot probe
// does (its value folded into cudaq_rt_bench_peek_sink, so that it is used).
__device__ uint32_t cudaq_rt_bench_peek_sink;
// Given: the table's shared rows and the handler's frames are the caller's (a function compiled
// apart then declares no shared memory of its own).
struct FusedBuffers {
  cudaq_rt_function_entry *rows;
  uint2 *input, *output;
};
template <bool Direct, bool Span, bool Steps = false, bool Named = false, bool Peek = false,
          bool Given = false>
__device__ __forceinline__ void fused(cudaq_rt_dispatch_params p, FusedBuffers given = {}) {
  if (!first_thread())
    return;
  cudaq_rt_loopback_device_ctx *c = (cudaq_rt_loopback_device_ctx *)p.transport_ctx;
  constexpr uint32_t kFrame = kFusedFrame;
  if (!c || c->magic != CUDAQ_RT_LOOPBACK_CTX_MAGIC || p.slot_size > kFrame ||
      p.slot_size < CUDAQ_RT_LOOPBACK_MIN_SLOT_SIZE)
    return;
  FusedBuffers b = given;
  if constexpr (!Given) {
    __shared__ cudaq_rt_function_entry rows[BENCH_TABLE_ROWS];
    __shared__ uint2 in[kFrame / 8], out[kFrame / 8];
    b = {rows, in, out};
  }
  const cudaq_rt_function_entry *table =
      cudaq_rt_table_in_shared(p.function_table, p.num_functions, b.rows, BENCH_TABLE_ROWS);
  uint2 *const input = b.input, *const output = b.output;
  cudaq_rt_dispatch_counters counters = cudaq_rt_counters_load(p.stats);
  cudaq_rt_handler_cache cache = {0, 0};
  const volatile uint4 *rq = (const volatile uint4 *)c->request_heads;
  volatile uint4 *rs = (volatile uint4 *)c->response_heads;
  const uint32_t layout = c->layout, slot_size = p.slot_size;
  const uint32_t max_result_len = slot_size - CUDAQ_RT_HEADER_SIZE;
  RingPosition at(c);
  uint32_t peeked = 0;
  for (;;) {
    const uint32_t slot = at.slot, lap = at.lap;
    const volatile uint4 *cells = rq + cudaq_rt_loopback_head_cell(layout, slot, 0);
    const uint32_t stride = cudaq_rt_loopback_head_stride(layout);
    uint4 v[CUDAQ_RT_LOOPBACK_HEAD_CELLS];
#pragma unroll
    for (uint32_t k = 0; k < CUDAQ_RT_LOOPBACK_HEAD_CELLS; ++k)
      v[k] = load16(cells + k * stride);
    if constexpr (Peek) {
      const uint32_t after = slot + 1 == at.n ? 0u : slot + 1;
      const uint4 a = load16(rq + cudaq_rt_loopback_head_cell(layout, after, 0));
      peeked += a.x == lap;
    }
    const int shutdown = *p.shutdown_flag;
    if (!cudaq_rt_loopback_stamped(v[0].x, v[0].z, lap)) {
      if (shutdown)
        break;
      continue;
    }
    const long long t0 = stamp<Span>();
    const uint32_t len = v[0].y < slot_size ? v[0].y : slot_size;
    const uint32_t in_cells = cudaq_rt_loopback_frame_cells(len);
#pragma unroll
    for (uint32_t k = 1; k < CUDAQ_RT_LOOPBACK_HEAD_CELLS; ++k)
      if (k < in_cells)
        while (!cudaq_rt_loopback_stamped(v[k].x, v[k].z, lap))
          v[k] = load16(cells + k * stride);
    const long long t1 = stamp<Steps>();
    // Request cells: 1 {magic, function_id}, 2 {arg_len, request_id}, 3 ptp, 4 payload bytes 0..7.
    cudaq_rt_request_fields h = {v[1].y, v[1].w, v[2].y, v[2].w, (uint64_t)v[3].w << 32 | v[3].y};
    if (!cudaq_rt_loopback_request_whole(len, h.arg_len)) { // as the bridge's mark_truncated
      h.magic = CUDAQ_RT_TRUNCATED_MAGIC;
      h.request_id = len <= 8 ? 0u : h.request_id; // header words the frame has no byte of
      h.ptp_timestamp = len <= 16 ? 0u : h.ptp_timestamp;
    }
    int32_t status = cudaq_rt_validate_fields(&h, slot_size);
    status = status == CUDAQ_RT_STATUS_OK && in_cells > CUDAQ_RT_LOOPBACK_HEAD_CELLS
                 ? CUDAQ_RT_STATUS_PAYLOAD_TOO_LARGE
                 : status;
    uint32_t result_len = 0;
    long long t2 = 0;
    if (status == CUDAQ_RT_STATUS_OK) {
      const cudaq_rt_handler_fn handler =
          cudaq_rt_find_handler_cached(table, p.num_functions, h.function_id, &cache);
      t2 = stamp<Steps>();
      if (!handler) {
        status = CUDAQ_RT_STATUS_UNKNOWN_FUNCTION;
      } else {
        input[0] = make_uint2(v[4].y, v[4].w);
        if (Named && h.function_id == kEchoId)
          status =
              cudaq_rt_handler_call__echo(input, output, h.arg_len, max_result_len, &result_len);
        else if constexpr (Direct)
          status = cudaq_rt_call_direct(h.function_id, handler, input, output, h.arg_len,
                                        max_result_len, &result_len);
        else
          status = handler(input, output, h.arg_len, max_result_len, &result_len);
        status = cudaq_rt_handler_outcome(status, max_result_len, &result_len);
      }
    }
    if (result_len > 8) {
      status = CUDAQ_RT_STATUS_RESULT_TOO_LARGE;
      result_len = 0;
    }
    const long long t3 = stamp<Steps>();
    cudaq_rt_counters_record(&counters, status);
    cudaq_rt_counters_store(p.stats, &counters);
    const long long t4 = stamp<Steps>();
    volatile uint4 *out = rs + cudaq_rt_loopback_head_cell(layout, slot, 0);
    store16(out + stride, make_uint4(lap, CUDAQ_RT_RESPONSE_MAGIC, lap, (uint32_t)status));
    store16(out + 2 * stride, make_uint4(lap, result_len, lap, h.request_id));
    store16(out + 3 * stride,
            make_uint4(lap, (uint32_t)h.ptp_timestamp, lap, (uint32_t)(h.ptp_timestamp >> 32)));
    if (result_len) {
      const uint2 d = output[0];
      store16(out + 4 * stride, make_uint4(lap, d.x, lap, d.y));
    }
    store16(out, make_uint4(lap, CUDAQ_RT_HEADER_SIZE + result_len, lap, 0u));
    if constexpr (Span) {
      const long long t5 = clock64();
      unsigned int *row = span_row(at.served, t0, t5);
      if constexpr (Steps) {
        row[0] = (unsigned int)(t1 - t0);
        row[1] = (unsigned int)(t2 - t1);
        row[2] = (unsigned int)(t3 - t2);
        row[3] = (unsigned int)(t4 - t3);
        row[4] = (unsigned int)(t5 - t4);
      }
    }
    __threadfence_system();
    at.advance();
  }
  if constexpr (Peek)
    cudaq_rt_bench_peek_sink = peeked;
  at.finish<Span>(c);
}
} // namespace

extern "C" __global__ void cudaq_rt_bench_fused_peek(cudaq_rt_dispatch_params p) {
  fused<false, false, false, false, true>(p);
}
CUDAQ_RT_EXPORT_DISPATCH_KERNEL(cudaq_rt_bench_fused_peek);

// The fused prototype compiled apart inside the unified kernel: its loop a function of its own
// (not inlined: register-allocated and laid out apart), called first; the unified kernel's loop
// (table in device memory, so that both fit 48 KB of static shared memory) compiled after it in
// the same kernel, entered at shutdown only (it then ends at once). Whether a compact serving loop
// keeps its speed beside the big one: the design of a lone request's path compiled apart.
namespace {
__device__ __noinline__ void fused_apart(cudaq_rt_dispatch_params p, FusedBuffers b) {
  fused<false, false, false, false, false, true>(p, b);
}
} // namespace
extern "C" __global__ void cudaq_rt_bench_fused_apart(cudaq_rt_dispatch_params p) {
  __shared__ cudaq_rt_function_entry rows[BENCH_TABLE_ROWS];
  __shared__ uint2 input[kFusedFrame / 8], output[kFusedFrame / 8];
  fused_apart(p, {rows, input, output});
  unified_variant<false, true>(p);
}
CUDAQ_RT_EXPORT_DISPATCH_KERNEL(cudaq_rt_bench_fused_apart);

extern "C" __global__ void cudaq_rt_bench_fused(cudaq_rt_dispatch_params p) {
  fused<false, false>(p);
}
CUDAQ_RT_EXPORT_DISPATCH_KERNEL(cudaq_rt_bench_fused);
extern "C" __global__ void cudaq_rt_bench_fused_direct(cudaq_rt_dispatch_params p) {
  fused<true, false>(p);
}
CUDAQ_RT_EXPORT_DISPATCH_KERNEL(cudaq_rt_bench_fused_direct);
extern "C" __global__ void cudaq_rt_bench_fused_span(cudaq_rt_dispatch_params p) {
  fused<false, true>(p);
}
CUDAQ_RT_EXPORT_DISPATCH_KERNEL(cudaq_rt_bench_fused_span);
extern "C" __global__ void cudaq_rt_bench_fused_span_direct(cudaq_rt_dispatch_params p) {
  fused<true, true>(p);
}
CUDAQ_RT_EXPORT_DISPATCH_KERNEL(cudaq_rt_bench_fused_span_direct);
extern "C" __global__ void cudaq_rt_bench_fused_steps_direct(cudaq_rt_dispatch_params p) {
  fused<true, true, true>(p);
}
CUDAQ_RT_EXPORT_DISPATCH_KERNEL(cudaq_rt_bench_fused_steps_direct);
extern "C" __global__ void cudaq_rt_bench_fused_steps_named(cudaq_rt_dispatch_params p) {
  fused<true, true, true, true>(p);
}
CUDAQ_RT_EXPORT_DISPATCH_KERNEL(cudaq_rt_bench_fused_steps_named);

// The unified kernel without its handler cache: every request searches the table (what the
// cache, cudaq_rt_handler_cache, buys).
extern "C" __global__ void cudaq_rt_bench_no_cache(cudaq_rt_dispatch_params p) {
  unified_variant<true, false>(p);
}
CUDAQ_RT_EXPORT_DISPATCH_KERNEL(cudaq_rt_bench_no_cache);
