/* cudaq_rt/dispatch_framing.cuh: the per-request work of a dispatch kernel, reusable.
 *
 * The unified dispatch kernel is nothing but a loop around these helpers; a custom dispatch
 * kernel (any grid, any launch attributes) that includes this header answers requests exactly the
 * same way: same validation, same status codes, same counters.
 *
 *   cudaq_rt_dispatch_counters counters = cudaq_rt_counters_load(p.stats);
 *   while (cudaq_dev_rx_poll(session, &req, &resp) == CUDAQ_DEV_RX_READY) {
 *     cudaq_rt_serve_frame(p.function_table, p.num_functions, p.slot_size, req, resp, &counters);
 *     cudaq_rt_counters_store(p.stats, &counters);
 *     cudaq_dev_tx_publish(session, resp);
 *   }
 *
 * (The unified kernel calls cudaq_rt_serve_frame_stored instead, which stores the counters
 * between the handler and the response header: see there why.)
 *
 * Counters are kept in registers and only *stored* to the mapped cudaq_rt_dispatch_stats: a
 * read-modify-write there would cost a PCIe round trip (about a microsecond) per counter per
 * request. Each counter is one aligned 8-byte store, which the host never sees torn. So one
 * cudaq_rt_dispatch_stats belongs to one serving thread; a kernel with several serving threads
 * gives each its own block of counters (or sums them itself). They are stored before the
 * response is published: a bridge may push the response to the host at once (the loopback
 * bridge does), and a host that holds a response then finds it counted.
 *
 * A bridge session is single-threaded too: the loop above runs in one thread per
 * cudaq_dev_enter_kernel, i.e. per transport_ctx (cudaq_rt/dispatch.h says what else a kernel
 * promises the bridge). */
#ifndef CUDAQ_RT_DISPATCH_FRAMING_CUH
#define CUDAQ_RT_DISPATCH_FRAMING_CUH

#include "cudaq_rt/dispatch.h"

#if !defined(__CUDACC__)
#error "cudaq_rt/dispatch_framing.cuh is device code: compile it with nvcc"
#endif

typedef struct cudaq_rt_dispatch_counters {
  unsigned long long requests;
  unsigned long long ok;
  unsigned long long handler_errors;
  unsigned long long protocol_errors;
} cudaq_rt_dispatch_counters;

/* Starts from the values already in `stats` (a relaunched kernel keeps counting), or zero. One
 * read per kernel, at entry. */
static __device__ __forceinline__ cudaq_rt_dispatch_counters
cudaq_rt_counters_load(const cudaq_rt_dispatch_stats *stats) {
  cudaq_rt_dispatch_counters c = {0, 0, 0, 0};
  if (stats) {
    const volatile cudaq_rt_dispatch_stats *s = stats;
    c.requests = s->requests;
    c.ok = s->ok;
    c.handler_errors = s->handler_errors;
    c.protocol_errors = s->protocol_errors;
  }
  return c;
}

/* Posted stores only, with no fence: the host may see a response a moment before its count.
 * Where stats is 16-aligned, two 16-byte stores (each 8-byte half lands whole), else four. Call
 * it before publishing the response (see above).
 *
 * The asm needs no memory clobber: these stores touch only *stats, which nothing in the dispatch
 * loop reads, and their order against the bridge's volatile stores to the host, which is what
 * matters, is kept without one (volatile asm statements are not reordered against each other).
 * Volatile asm still stops the compiler from forwarding stores written before it to loads after
 * it: a kernel that writes the response header after storing the counters lets the bridge's
 * tx_publish, inlined after it, take the header from its stores (cudaq_rt_answer_request). */
static __device__ __forceinline__ void
cudaq_rt_counters_store(cudaq_rt_dispatch_stats *stats, const cudaq_rt_dispatch_counters *c) {
  if (stats && ((unsigned long long)stats & 15u) == 0) {
    asm volatile("st.volatile.v2.u64 [%0], {%1, %2};" ::"l"(stats), "l"(c->requests), "l"(c->ok));
    asm volatile("st.volatile.v2.u64 [%0], {%1, %2};" ::"l"(&stats->handler_errors),
                 "l"(c->handler_errors), "l"(c->protocol_errors));
  } else if (stats) {
    asm volatile("st.volatile.u64 [%0], %1;" ::"l"(&stats->requests), "l"(c->requests));
    asm volatile("st.volatile.u64 [%0], %1;" ::"l"(&stats->ok), "l"(c->ok));
    asm volatile("st.volatile.u64 [%0], %1;" ::"l"(&stats->handler_errors), "l"(c->handler_errors));
    asm volatile("st.volatile.u64 [%0], %1;" ::"l"(&stats->protocol_errors),
                 "l"(c->protocol_errors));
  }
}

/* Branch-free: the serving thread pays every branch in latency. */
static __device__ __forceinline__ void cudaq_rt_counters_record(cudaq_rt_dispatch_counters *c,
                                                                int status) {
  ++c->requests;
  c->ok += status == CUDAQ_RT_STATUS_OK;
  c->handler_errors += status > 0;
  c->protocol_errors += status < 0;
}

/* A request header's fields, read with three 8-byte loads issued together (a frame is 8-byte
 * aligned, as its ptp_timestamp needs), so that validation waits for one load, not for one after
 * another behind its branches. */
typedef struct cudaq_rt_request_fields {
  uint32_t magic;
  uint32_t function_id;
  uint32_t arg_len;
  uint32_t request_id;
  uint64_t ptp_timestamp;
} cudaq_rt_request_fields;

static __device__ __forceinline__ cudaq_rt_request_fields
cudaq_rt_read_request_header(const void *request) {
  const uint2 *w = (const uint2 *)request;
  const uint2 a = w[0], b = w[1];
  const uint64_t ptp = ((const uint64_t *)request)[2];
  cudaq_rt_request_fields f = {a.x, a.y, b.x, b.y, ptp};
  return f;
}

/* 0 when the request header may be handed to a handler, else the protocol status to answer.
 * slot_size is the bridge's (cudaq_rt_dispatch_params.slot_size). A frame the bridge received
 * short carries CUDAQ_RT_TRUNCATED_MAGIC (wire.h): its arg_len is not backed by bytes of this
 * request, so it is refused before anything else is looked at. */
static __device__ __forceinline__ int cudaq_rt_validate_fields(const cudaq_rt_request_fields *h,
                                                               uint32_t slot_size) {
  /* Selects, not branches: one thread pays every branch in latency. */
  const bool too_large =
      (slot_size < CUDAQ_RT_HEADER_SIZE) | (h->arg_len > slot_size - CUDAQ_RT_HEADER_SIZE);
  int status = too_large ? CUDAQ_RT_STATUS_PAYLOAD_TOO_LARGE : CUDAQ_RT_STATUS_OK;
  status = h->magic != CUDAQ_RT_REQUEST_MAGIC ? CUDAQ_RT_STATUS_BAD_MAGIC : status;
  return h->magic == CUDAQ_RT_TRUNCATED_MAGIC ? CUDAQ_RT_STATUS_TRUNCATED : status;
}

/* cudaq_rt_validate_fields of the header at `req`. */
static __device__ __forceinline__ int cudaq_rt_validate_request(const cudaq_rt_request_header *req,
                                                                uint32_t slot_size) {
  const cudaq_rt_request_fields h = cudaq_rt_read_request_header(req);
  return cudaq_rt_validate_fields(&h, slot_size);
}

/* A copy of the function table in shared memory when it has at most `capacity` rows, else the
 * table itself: every lookup reads the table, and a read from shared memory costs about 40
 * cycles where one from global memory costs 55 (an L1 hit) to 300 (L2). Called by one thread at
 * the kernel's start; `rows` is __shared__. */
static __device__ __forceinline__ const cudaq_rt_function_entry *
cudaq_rt_table_in_shared(const cudaq_rt_function_entry *table, uint32_t count,
                         cudaq_rt_function_entry *rows, uint32_t capacity) {
  if (count > capacity)
    return table;
  for (uint32_t i = 0; i < count; ++i)
    rows[i] = table[i];
  return rows;
}

/* Binary search of a table sorted by function_id; NULL when absent. */
static __device__ __forceinline__ cudaq_rt_handler_fn
cudaq_rt_find_handler(const cudaq_rt_function_entry *table, uint32_t count, uint32_t function_id) {
  uint32_t lo = 0, hi = count;
  while (lo < hi) {
    uint32_t mid = lo + (hi - lo) / 2;
    uint32_t id = table[mid].function_id;
    if (id == function_id)
      return table[mid].handler;
    if (id < function_id)
      lo = mid + 1;
    else
      hi = mid;
  }
  return 0;
}

/* The handler of the last function_id looked up, kept by one serving thread (in registers): a
 * run of requests for one function skips the table search. The table does not change while a
 * kernel runs (the launcher refuses to), so an entry never goes stale. Measured on the H200
 * (bench/loopback_rtt.md): validation and lookup 438 -> 253 cycles; end to end, 3.52 -> 3.33 us
 * at 1 in flight and 0.76 -> 0.82 M requests/s at 64 in one call, within the noise in others. */
typedef struct cudaq_rt_handler_cache {
  uint32_t function_id;
  cudaq_rt_handler_fn handler; /* NULL: empty */
} cudaq_rt_handler_cache;

static __device__ __forceinline__ cudaq_rt_handler_fn
cudaq_rt_find_handler_cached(const cudaq_rt_function_entry *table, uint32_t count,
                             uint32_t function_id, cudaq_rt_handler_cache *cache) {
  if (cache && cache->handler && cache->function_id == function_id)
    return cache->handler;
  cudaq_rt_handler_fn handler = cudaq_rt_find_handler(table, count, function_id);
  if (cache && handler) {
    cache->function_id = function_id;
    cache->handler = handler;
  }
  return handler;
}

/* Three 8-byte stores (a frame is 8-byte aligned): a bridge's tx_publish that reads the header
 * back in 8-byte words, inlined after it, then has them from these stores, not from memory. */
static __device__ __forceinline__ void
cudaq_rt_write_response_header(cudaq_rt_response_header *resp, int32_t status, uint32_t result_len,
                               uint32_t request_id, uint64_t ptp_timestamp) {
  uint2 *w = (uint2 *)resp;
  w[0] = make_uint2(CUDAQ_RT_RESPONSE_MAGIC, (uint32_t)status);
  w[1] = make_uint2(result_len, request_id);
  ((uint64_t *)resp)[2] = ptp_timestamp;
}

/* Direct handler calls. A whole-program link (cudaq-rt-link --lto whole) of a package whose
 * handlers were exported with this cudaq-rt's macros generates this function for it
 * (runtime/src/link/direct_calls.cpp): for the function_id of each such handler it compares
 * `handler` with that handler's cudaq_rt_handler_call__<name> and, when they are the same, calls it
 * by name, so that LTO can inline the handler into the kernel; any other pointer (a table the
 * application gave, a handler exported by older macros) is called through. A call through a pointer
 * costs the 8-byte echo about 430 cycles more than the same echo inlined on the H200
 * (bench/probe/call_cost.cu). A kernel compiled with CUDAQ_RT_DIRECT_CALLS defined calls handlers
 * through it: the built-in kernels' direct form, which cudaq-rt-link takes in whole mode only. A
 * custom kernel's link gets the function in either mode (per TU, in the kernel's unit: a call by
 * name into another unit is still a call), so a custom kernel may call it or define the macro. */
extern "C" __device__ int cudaq_rt_call_direct(uint32_t function_id, cudaq_rt_handler_fn handler,
                                               const void *input, void *output, uint32_t arg_len,
                                               uint32_t max_result_len, uint32_t *result_len);

/* Holds a handler that returned `status` to its contract: the status to answer, and *result_len
 * (0 whenever the result is not sent). Negative statuses are the protocol's (wire.h): passed
 * through, a handler's -1 would read as "unknown function". It broke its contract, so its result
 * is not sent either, and the frame counts as a protocol error. A handler that claims more than it
 * was given room for may have written past the frame; what it wrote cannot be trusted, so none of
 * it is sent. (Selects, not branches, as in cudaq_rt_validate_fields.) */
static __device__ __forceinline__ int cudaq_rt_handler_outcome(int status, uint32_t max_result_len,
                                                               uint32_t *result_len) {
  const uint32_t len = *result_len;
  const bool fault = status < 0;
  const bool too_large = !fault & (len > max_result_len);
  *result_len = fault | too_large ? 0u : len;
  return fault       ? CUDAQ_RT_STATUS_HANDLER_FAULT
         : too_large ? CUDAQ_RT_STATUS_RESULT_TOO_LARGE
                     : status;
}

/* Calls a validated request's handler (arg_len: its header's) with max_result_len = slot_size -
 * 24 and holds it to its contract: the status to answer, and *result_len (0 whenever the result
 * is not sent). */
static __device__ __forceinline__ int
cudaq_rt_call_handler_len(cudaq_rt_handler_fn handler, const void *request, void *response,
                          uint32_t arg_len, uint32_t slot_size, uint32_t *result_len) {
  const uint32_t max_result_len = slot_size - CUDAQ_RT_HEADER_SIZE;
  const int status =
      handler((const char *)request + CUDAQ_RT_HEADER_SIZE, (char *)response + CUDAQ_RT_HEADER_SIZE,
              arg_len, max_result_len, result_len);
  return cudaq_rt_handler_outcome(status, max_result_len, result_len);
}

/* cudaq_rt_call_handler_len through cudaq_rt_call_direct, for the handler of `function_id` (the
 * table's row it came from). */
static __device__ __forceinline__ int
cudaq_rt_call_handler_direct_len(uint32_t function_id, cudaq_rt_handler_fn handler,
                                 const void *request, void *response, uint32_t arg_len,
                                 uint32_t slot_size, uint32_t *result_len) {
  const uint32_t max_result_len = slot_size - CUDAQ_RT_HEADER_SIZE;
  const int status = cudaq_rt_call_direct(
      function_id, handler, (const char *)request + CUDAQ_RT_HEADER_SIZE,
      (char *)response + CUDAQ_RT_HEADER_SIZE, arg_len, max_result_len, result_len);
  return cudaq_rt_handler_outcome(status, max_result_len, result_len);
}

/* The kernel's way to call the handler of `function_id`: directly where it was compiled with
 * CUDAQ_RT_DIRECT_CALLS, else through the pointer. */
static __device__ __forceinline__ int
cudaq_rt_call_handler_id_len(uint32_t function_id, cudaq_rt_handler_fn handler, const void *request,
                             void *response, uint32_t arg_len, uint32_t slot_size,
                             uint32_t *result_len) {
#ifdef CUDAQ_RT_DIRECT_CALLS
  return cudaq_rt_call_handler_direct_len(function_id, handler, request, response, arg_len,
                                          slot_size, result_len);
#else
  (void)function_id;
  return cudaq_rt_call_handler_len(handler, request, response, arg_len, slot_size, result_len);
#endif
}

/* cudaq_rt_call_handler_len with the arg_len of the header at `request`. */
static __device__ __forceinline__ int cudaq_rt_call_handler(cudaq_rt_handler_fn handler,
                                                            const void *request, void *response,
                                                            uint32_t slot_size,
                                                            uint32_t *result_len) {
  const cudaq_rt_request_header *req = (const cudaq_rt_request_header *)request;
  return cudaq_rt_call_handler_len(handler, request, response, req->arg_len, slot_size, result_len);
}

/* What cudaq_rt_serve_frame_cached answers a request, before the response header is written: the
 * header's fields. */
typedef struct cudaq_rt_answer {
  int32_t status;
  uint32_t result_len;
  uint32_t request_id;
  uint64_t ptp_timestamp;
} cudaq_rt_answer;

/* cudaq_rt_serve_frame_cached's work but the header and the counters: validates the request, calls
 * its handler (which writes the result into `response`), and returns the response header's
 * fields (cudaq_rt_write_answer writes them), for a kernel that does something between the two
 * (cudaq_rt_serve_frame_stored, the warp kernel). */
static __device__ __forceinline__ cudaq_rt_answer
cudaq_rt_answer_fields(const cudaq_rt_function_entry *table, uint32_t table_size,
                       uint32_t slot_size, const cudaq_rt_request_fields *h, const void *request,
                       void *response, cudaq_rt_handler_cache *cache) {
  uint32_t result_len = 0; /* apart from the answer: its address goes to the handler, and the
                              answer would then live in local memory */
  int32_t status = cudaq_rt_validate_fields(h, slot_size);
  if (status == CUDAQ_RT_STATUS_OK) {
    cudaq_rt_handler_fn handler =
        cudaq_rt_find_handler_cached(table, table_size, h->function_id, cache);
    if (!handler)
      status = CUDAQ_RT_STATUS_UNKNOWN_FUNCTION;
    else
      status = cudaq_rt_call_handler_id_len(h->function_id, handler, request, response, h->arg_len,
                                            slot_size, &result_len);
  }
  const cudaq_rt_answer a = {status, result_len, h->request_id, h->ptp_timestamp};
  return a;
}

/* cudaq_rt_answer_fields of the request frame's own header. */
static __device__ __forceinline__ cudaq_rt_answer cudaq_rt_answer_request(
    const cudaq_rt_function_entry *table, uint32_t table_size, uint32_t slot_size,
    const void *request, void *response, cudaq_rt_handler_cache *cache) {
  const cudaq_rt_request_fields h = cudaq_rt_read_request_header(request);
  return cudaq_rt_answer_fields(table, table_size, slot_size, &h, request, response, cache);
}

/* The response header of an answer (cudaq_rt_write_response_header). */
static __device__ __forceinline__ void cudaq_rt_write_answer(void *response,
                                                             const cudaq_rt_answer *a) {
  cudaq_rt_write_response_header((cudaq_rt_response_header *)response, a->status, a->result_len,
                                 a->request_id, a->ptp_timestamp);
}

/* Answers one request frame into `response` (a distinct frame of slot_size bytes): validates it,
 * calls its handler with max_result_len = slot_size - 24 (slot_size: the bridge's, see
 * cudaq_rt_dispatch_params), and always writes the response header,
 * echoing request_id and ptp_timestamp (also for a bad magic: they are all a client has to match
 * the answer). Returns the status written and records it in `counters` (may be NULL). `cache`
 * (may be NULL) is the serving thread's cudaq_rt_handler_cache. */
static __device__ __forceinline__ int
cudaq_rt_serve_frame_cached(const cudaq_rt_function_entry *table, uint32_t table_size,
                            uint32_t slot_size, const void *request, void *response,
                            cudaq_rt_dispatch_counters *counters, cudaq_rt_handler_cache *cache) {
  const cudaq_rt_answer a =
      cudaq_rt_answer_request(table, table_size, slot_size, request, response, cache);
  cudaq_rt_write_answer(response, &a);
  if (counters)
    cudaq_rt_counters_record(counters, a.status);
  return a.status;
}

/* cudaq_rt_serve_frame_cached for a kernel that stores its counters after every request (the
 * unified kernel): records them and stores them to `stats` between the handler and the response
 * header.
 *   - The counters before the response: a bridge may push the response out at once (the loopback
 *     bridge fences after it), and a host that has the response should find it counted.
 *   - The header last: a bridge's tx_publish, inlined right after it, then takes the header from
 *     its stores instead of loading it back; the counters' volatile stores, between them, would
 *     stop the compiler from forwarding them (bench/loopback_rtt.md). */
static __device__ __forceinline__ int
cudaq_rt_serve_frame_stored(const cudaq_rt_function_entry *table, uint32_t table_size,
                            uint32_t slot_size, const void *request, void *response,
                            cudaq_rt_dispatch_stats *stats, cudaq_rt_dispatch_counters *counters,
                            cudaq_rt_handler_cache *cache) {
  const cudaq_rt_answer a =
      cudaq_rt_answer_request(table, table_size, slot_size, request, response, cache);
  cudaq_rt_counters_record(counters, a.status);
  cudaq_rt_counters_store(stats, counters);
  cudaq_rt_write_answer(response, &a);
  return a.status;
}

/* The lone form (cudaq_rt/dispatch.h): what the kernel hands its compact loop and takes back. In
 * shared memory, not passed by value: a 112-byte argument and result went through the stack, and
 * the unified kernel's main loop spilled around the call. */
typedef struct cudaq_rt_lone_run {
  cudaq_rt_lone_state lone;
  cudaq_rt_dispatch_counters counters;
  cudaq_rt_handler_cache cache;
  const cudaq_rt_function_entry *table;
  cudaq_rt_dispatch_stats *stats;
  uint32_t table_size;
  uint32_t slot_size;
} cudaq_rt_lone_run;
static __shared__ cudaq_rt_lone_run cudaq_rt_lone_box;

/* The compact loop: lone requests answered as cudaq_rt_serve_frame_stored answers a frame (the
 * same validation, lookup, call, outcome and counters, stored before the response), their
 * responses published by the bridge from the answer's registers. Compiled apart (not inlined),
 * so that it is laid out and allocated registers on its own: the serving thread pays every
 * instruction of the loop it runs in, and a loop that also holds the bridge's batches, large
 * frames and the main loop's steps cost a lone 8-byte echo about 0.3 us on an H100 where a
 * compact one compiled apart in the same kernel did not (bench/loopback_rtt.md). Everything it
 * carries is in cudaq_rt_lone_box, loaded into registers on entry and stored back on leaving. */
static __device__ __noinline__ void cudaq_rt_serve_lone() {
  cudaq_rt_lone_run run = cudaq_rt_lone_box;
  cudaq_rt_lone_request r;
  while (cudaq_dev_lone_poll(&run.lone, &r) == CUDAQ_DEV_RX_READY) {
    const cudaq_rt_request_fields h = {r.magic, r.function_id, r.arg_len, r.request_id,
                                       r.ptp_timestamp};
    const cudaq_rt_answer a = cudaq_rt_answer_fields(run.table, run.table_size, run.slot_size, &h,
                                                     r.request, r.response, &run.cache);
    cudaq_rt_counters_record(&run.counters, a.status);
    cudaq_rt_counters_store(run.stats, &run.counters);
    const cudaq_rt_lone_answer small = {a.status, a.result_len};
    if (!cudaq_dev_lone_publish(&run.lone, &r, &small)) {
      cudaq_rt_write_answer(r.response, &a); /* for tx_publish, after lone_leave */
      break;
    }
  }
  cudaq_rt_lone_box = run;
}

/* The compact loop entered (the bridge's lone_enter wrote cudaq_rt_lone_box.lone) with the main
 * loop's `counters` and `cache`, carried across. */
static __device__ __forceinline__ void
cudaq_rt_lone_serve_with(const cudaq_rt_function_entry *table, uint32_t table_size,
                         uint32_t slot_size, cudaq_rt_dispatch_stats *stats,
                         cudaq_rt_dispatch_counters *counters, cudaq_rt_handler_cache *cache) {
  cudaq_rt_lone_run *box = &cudaq_rt_lone_box;
  box->counters = *counters;
  box->cache = *cache;
  box->table = table;
  box->stats = stats;
  box->table_size = table_size;
  box->slot_size = slot_size;
  cudaq_rt_serve_lone();
  *counters = box->counters;
  *cache = box->cache;
}

/* One turn of the lone form, for a kernel's main loop to take before each rx_poll (one serving
 * thread a block): where the bridge says only a lone request can come next, serves in the compact
 * loop until it hands over, then publishes the response it left with tx_publish, if any.
 * `counters` and `cache` are the main loop's, carried across. */
static __device__ __forceinline__ void
cudaq_rt_lone_step(void *session, const cudaq_rt_function_entry *table, uint32_t table_size,
                   uint32_t slot_size, cudaq_rt_dispatch_stats *stats,
                   cudaq_rt_dispatch_counters *counters, cudaq_rt_handler_cache *cache) {
  if (!cudaq_dev_lone_enter(session, &cudaq_rt_lone_box.lone))
    return;
  cudaq_rt_lone_serve_with(table, table_size, slot_size, stats, counters, cache);
  void *held = cudaq_dev_lone_leave(session, &cudaq_rt_lone_box.lone);
  if (held)
    cudaq_dev_tx_publish(session, held);
}

/* The warp form's lone turn (cudaq_rt/dispatch.h), for a warp kernel's main loop to take before
 * each warp_rx_poll, in all 32 lanes of its one warp a block: where the bridge says only a lone
 * request can come next, lane 0 serves in the compact loop (`counters` and `cache`: lane 0's)
 * while the other lanes wait, and the lane that holds the response it left publishes it. */
static __device__ __forceinline__ void
cudaq_rt_warp_lone_step(void *session, unsigned lane, const cudaq_rt_function_entry *table,
                        uint32_t table_size, uint32_t slot_size, cudaq_rt_dispatch_stats *stats,
                        cudaq_rt_dispatch_counters *counters, cudaq_rt_handler_cache *cache) {
  if (!cudaq_dev_warp_lone_enter(session, &cudaq_rt_lone_box.lone))
    return;
  if (lane == 0)
    cudaq_rt_lone_serve_with(table, table_size, slot_size, stats, counters, cache);
  __syncwarp(0xFFFFFFFFu); /* lane 0's lone state and counters before the lanes read them */
  void *held = cudaq_dev_warp_lone_leave(session, &cudaq_rt_lone_box.lone);
  if (held)
    cudaq_dev_warp_tx_publish(session, held);
}

/* The warp form's start (cudaq_rt/dispatch.h), for a kernel whose 32 lanes of one warp call it
 * together: enters the bridge's warp hooks in every lane with `storage` (the lane's own
 * CUDAQ_RT_SESSION_STORAGE_SIZE bytes) and, when every lane has a session, calls serve(session) in
 * every lane; else returns in every lane. The lanes vote in two branches on the pointer itself (the same
 * intrinsic and mask in both, which the lanes meet wherever they are) rather than once on
 * `session != 0`: after that one convergent call the compiler cannot tell the pointer from the
 * storage's address, and a session kept in the storage (the loopback bridge's) then lives in local
 * memory (the warp kernel: STACK 320 bytes against 56, and a 40% larger cubin). */
template <class Serve>
static __device__ __forceinline__ void
cudaq_rt_warp_serve(void *storage, const cudaq_rt_dispatch_params &p, unsigned lane, Serve serve) {
  void *session = cudaq_dev_warp_enter_kernel(storage, p.transport_ctx, p.shutdown_flag, lane);
  if (session) {
    if (__all_sync(0xFFFFFFFFu, 1))
      serve(session);
  } else if (__all_sync(0xFFFFFFFFu, 0)) {
    __trap(); /* never: this lane voted no */
  }
}

/* cudaq_rt_serve_frame_cached without a cache. */
static __device__ __forceinline__ int cudaq_rt_serve_frame(const cudaq_rt_function_entry *table,
                                                           uint32_t table_size, uint32_t slot_size,
                                                           const void *request, void *response,
                                                           cudaq_rt_dispatch_counters *counters) {
  return cudaq_rt_serve_frame_cached(table, table_size, slot_size, request, response, counters, 0);
}

#endif /* CUDAQ_RT_DISPATCH_FRAMING_CUH */
