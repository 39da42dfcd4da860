// The loopback bridge's device hooks. The ring protocol is explained in loopback_ring.h.
//
// All three hooks are called by one serving thread (one per bridge instance at a time: the
// session below is plain, unsynchronised state). The session lives in the 256 bytes the dispatch
// kernel provides, so nothing here allocates.
//
// What this code avoids, because each cost the serving thread time on every request on an H200
// (bench/rtt/loopback_rtt.cpp measures every stage; numbers in bench/loopback_rtt.md):
//   - loads of one batch that share a 128-byte line: they do not overlap, so the ring's layout
//     (loopback_ring.h) gives every probed cell a line of its own;
//   - 64-bit division: the ring position is kept as (slot, lap) pairs that are advanced, never
//     derived from a 64-bit sequence number by % and / (the old kernel held 15 of them, each a
//     subroutine of ~100 instructions);
//   - arrays indexed by a run-time value: the probe results stay in registers (every index below
//     is a compile-time constant after unrolling);
//   - a dependent load in tx_publish: the response header and the first payload words are
//     loaded in one batch;
//   - general code where the common case is simple: one thread runs it, so every instruction
//     is paid in latency (about 5 cycles each, nothing to overlap with). A small frame, whole
//     in the probe, is unpacked and published in straight-line code (unpack, publish_frame).
#include "cudaq_rt/dispatch.h"
#include "loopback_ring.h"

namespace {

struct Session {
  const volatile uint4 *request_heads; // CUDAQ_RT_LOOPBACK_HEAD_CELLS cells per slot
  const volatile uint4 *request_tails; // tail_cells per slot
  volatile uint4 *response_heads;
  volatile uint4 *response_tails;
  unsigned char *request_frames;
  unsigned char *response_frames;
  const unsigned char *request_bulk; // mapped host memory: the bulk areas (loopback_ring.h)
  unsigned char *response_bulk;
  volatile int *shutdown_flag;
  cudaq_rt_loopback_device_ctx *ctx; // where the position is left for the next kernel
  uint32_t num_slots;
  uint32_t slot_size;
  uint32_t tail_cells;
  uint32_t lanes_layout; // the heads' layout (loopback_ring.h) is lanes, not slots
  uint32_t head_slot;    // slot of the next frame to hand out
  uint32_t fetched_slot; // slot of the next frame to probe for
  uint32_t fetched_lap;  // and the lap it must carry
  uint32_t pending;      // frames unpacked and not handed out yet (they precede fetched_slot)
  uint32_t sink;         // keeps the L1 warm-up loads alive
  uint32_t width;        // slots the next probe loads (adaptive: see fetch)
  uint32_t outstanding;  // frames handed out and not published yet
  uint32_t shared_batch; // the pending frames are staged in shared memory (see kShared below)
  uint32_t batch_first;  // slot of the first frame of the pending batch
  uint32_t last_slot;    // slot of the frame rx_poll handed out last
  uint32_t last_lap;     // its lap
  uint32_t handout_lap;  // the lap of the frame fetch_one found (handout_request)
  uint32_t lane;         // the warp form: this session's lane
  uint8_t warp_shared;   // the warp form: requests staged in warp_request_staging
  uint8_t warp_window;   // the warp form: a lone request and its response staged there too
  uint16_t warp_stride;  // the warp form: slots from one of the lane's slots to its next (32 *
                         // warps: loopback_ring.h, "Warps")
  uint32_t batch_frames; // frames of a batch staged in shared memory (at most kW)
  uint32_t bulk_min;     // responses of at least this many bytes go in bulk (0: never)
  uint32_t bulk_phase;   // the parity bulk_barrier completes next
  uint16_t bulk_pending; // bit i: frame i of the pending batch is a bulk frame not yet staged
                         // (its staging frame's second word holds its control cell's frame_len)
  uint16_t handout_pos;  // frames of the pending batch handed out so far
  uint16_t tail_pending; // bit i: frame i of the pending batch is cells whose tail the engine
                         // brings in at hand-out (stage_tail); its length in tail_lens
  uint16_t tail_ahead;   // tail cells fetch_one copies with every probe (0: none; stage_tail)
  uint16_t tail_copied;  // cells the last copy into tail_buffer copied
  uint8_t tail_inflight; // a copy into tail_buffer is on its way (tail_barrier's next phase)
  uint8_t tail_phase;    // the parity tail_barrier completes next
  uint8_t draining;      // the shutdown flag was seen and fenced: every later probe sees all
                         // requests sent before it was set
  uint8_t busy;          // the last probe found every slot it loaded ready (CUDAQ_RT_LOOPBACK_PUSH)
  uint8_t shared_ok;     // batches may be staged in shared memory (see kShared below)
  uint8_t bulk_engine;   // this session may use the bulk copy engine (bulk_barrier is its own)
  uint8_t ahead_copy;    // the chain: the request at fetched_slot is on its way into the shared
                         // staging (on bulk_barrier), with the control cell after it
  uint8_t ahead_spare;   // and into the spare frame, not the staging's first
  uint8_t has_spare;     // the chain's second request frame, spare_staging, is there
  uint8_t one_feeder;    // the warp form: one host thread feeds every lane in order (not
                         // feeders=N, loopback_ring.h "Feeders"), so the probe may narrow
  uint8_t warp_empty;    // the warp form, several warps: rounds in a row that found nothing
  uint8_t warp_resting;  // and this warp rests (loopback_ring.h, "Resting warps")
  uint8_t probe_saved;   // the lone form handed over a probe of fetched_slot: fetch_one takes it
                         // from the shared response frame (lone_poll) instead of probing again
  uint8_t lone_streak;   // requests in a row fetch_one found alone (nothing after them yet)
  uint8_t lone_ready;    // the lone form may serve next (cudaq_dev_lone_enter; set by fetch_one;
                         // the warp form: cudaq_dev_warp_lone_enter, set by warp_poll)
  uint32_t tail_slot;    // the slot the last copy into tail_buffer was of
  uint32_t ahead_len;    // not 0: the request at fetched_slot is a bulk frame of these bytes,
                         // its control cell seen stamped (the chain: start_ahead)
  uint64_t tail_lens;    // 16 bits per batch position: the tail_pending frames' lengths
  uint32_t rest_since;   // the warp form, several warps: the SM clock at its last probe
  cudaq_rt_loopback_warp_probe warp;  // the warp form: which lanes probe (warp_poll); the same in
                                      // every lane's session
  const unsigned char *last_response; // and its response frame
  unsigned char *handout_request;     // not null: fetch_one found a request, staged here, and
  unsigned char *handout_response;    // set this frame aside for its response (both worked out
                                      // before it probed); rx_poll hands them out
};
static_assert(sizeof(Session) <= CUDAQ_RT_SESSION_STORAGE_SIZE, "session must fit the storage");

// For the bench only (bench/CMakeLists.txt builds a variant with it on): the SM clock when a probe
// found requests, in the storage's last 8 bytes, and when that probe was issued, in the 8 before,
// which the session does not reach, so that the stage kernels (bench/rtt/rtt_kernels.cu) can time
// the probe and rx_poll's work after it came back (the warp form: each lane's own probe, in its
// own storage, for cudaq_rt_bench_warp_rounds).
#ifndef CUDAQ_RT_LOOPBACK_STAMP
#define CUDAQ_RT_LOOPBACK_STAMP 0
#endif
static_assert(sizeof(Session) + 16 <= CUDAQ_RT_SESSION_STORAGE_SIZE, "room for the bench stamps");

// The SM clock in a stamping build, else 0 (and no instruction).
__device__ __forceinline__ long long probe_clock() {
#if CUDAQ_RT_LOOPBACK_STAMP
  return clock64();
#else
  return 0;
#endif
}

__device__ __forceinline__ void stamp_probe(Session *s, long long issued) {
#if CUDAQ_RT_LOOPBACK_STAMP
  long long *at = reinterpret_cast<long long *>(reinterpret_cast<unsigned char *>(s) +
                                                CUDAQ_RT_SESSION_STORAGE_SIZE - 16);
  at[0] = issued;
  at[1] = clock64();
#else
  (void)s, (void)issued;
#endif
}

constexpr uint32_t kBatch = 8; // cells loaded per round trip when unpacking a large payload

// The lone form (cudaq_dev_lone_enter) after this many requests in a row that came alone.
#ifndef CUDAQ_RT_LOOPBACK_LONE_AFTER
#define CUDAQ_RT_LOOPBACK_LONE_AFTER 1
#endif
constexpr uint32_t kW = CUDAQ_RT_LOOPBACK_PROBE_SLOTS;

// Staging in shared memory. The serving thread reads back every byte it staged: the request's
// header (validation, lookup), its payload (the handler), the response (tx_publish). From device
// memory each such read-back is an L2 round trip, about 300 cycles on the H200 even right after
// the store (stores do not fill L1); from shared memory about 40 (bench/loopback_rtt.md). And the
// bulk copy engine moves bulk frames between mapped host memory and shared memory only. So a
// batch of up to batch_frames frames (kW where 2 * kW frames fit, else as many as fit, at least
// one), requests and responses, is staged here when
//   - the block has one thread: these bytes are the block's, and a second serving thread in the
//     block (with its own bridge instance) would share them;
//   - a request and a response frame of slot_size bytes fit (a 16 KB payload does);
//   - no frame of an earlier batch is still held (handed out, not yet published): a kernel may
//     poll again before it publishes (cudaq_rt/dispatch.h), and its frames must stay put;
//   - the probe did not find more small requests in a row than the batch holds (fetch).
// Otherwise the per-slot staging frames in device memory (the ctx's) are used, as before.
// Position i of a batch (the frame i slots after batch_first) has request frame i and response
// frame batch_frames + i. 34 KB: with the unified kernel's 8 KB table, under the 48 KB of static
// shared memory a block may have.
#ifndef CUDAQ_RT_LOOPBACK_SHARED_STAGING
#define CUDAQ_RT_LOOPBACK_SHARED_STAGING 1
#endif
constexpr uint32_t kSharedBytes = 34816;
__shared__ __align__(128) unsigned char shared_staging[kSharedBytes];

// The bulk copy engine (cp.async.bulk, sm_90 and later; this file is built for sm_90 too, and
// nvJitLink takes that build for those GPUs): one instruction moves a whole bulk frame between
// mapped host memory and shared memory, the request's completion counted on this mbarrier.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define CUDAQ_RT_LOOPBACK_HAS_BULK_COPY 1
#else
#define CUDAQ_RT_LOOPBACK_HAS_BULK_COPY 0
#endif
/* 1: bulk frames staged in shared memory use the bulk copy engine where there is one; 0: loads
 * and stores only (the bench compares them). */
#ifndef CUDAQ_RT_LOOPBACK_BULK_COPY
#define CUDAQ_RT_LOOPBACK_BULK_COPY 1
#endif
__shared__ __align__(8) unsigned long long bulk_barrier;
/* 1: bulk requests back to back are brought in while the last response goes out (start_ahead);
 * 0: each after its own probe (a bench variant). */
#ifndef CUDAQ_RT_LOOPBACK_AHEAD
#define CUDAQ_RT_LOOPBACK_AHEAD 1
#endif
/* 1: a chained request's response is not pushed when the chain goes on after it (0: pushed, a
 * bench variant). */
#ifndef CUDAQ_RT_LOOPBACK_CHAIN_BUSY
#define CUDAQ_RT_LOOPBACK_CHAIN_BUSY 1
#endif
// The chain (start_ahead): the control cell of the request after the one whose bytes are on
// their way, copied with them.
__shared__ __align__(16) uint4 ahead_cell;
// The spare frame (loopback_ring.h, "The chain"): slot_size bytes of the dynamic shared memory the
// launcher gives the dispatch kernel where the instance was created with spare_frame=1 (the ctx's
// spare_bytes), so that a chained request's bytes come in while the handler of the one before it
// runs. Only where the kernel has at least those bytes (%dynamic_smem_size): a launcher that gave
// fewer gets the chain of one request frame.
/* 1: the spare frame where the launcher gives it; 0: never (a bench variant). */
#ifndef CUDAQ_RT_LOOPBACK_SPARE
#define CUDAQ_RT_LOOPBACK_SPARE 1
#endif
extern __shared__ __align__(128) unsigned char spare_staging[];

__device__ __forceinline__ uint32_t dynamic_shared_bytes() {
  uint32_t bytes;
  asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(bytes));
  return bytes;
}

// Frames of cells whose tail the bulk copy engine brings in (loopback_ring.h, "Tails by the
// engine"): up to kTailCells tail cells of one slot, copied as they lie in the ring (blocks of 64
// cells) into tail_buffer, counted on tail_barrier, then checked and unpacked by the thread.
/* 1: tails by the engine where the session has it; 0: loads only (a bench variant). */
#ifndef CUDAQ_RT_LOOPBACK_TAIL_COPY
#define CUDAQ_RT_LOOPBACK_TAIL_COPY 1
#endif
constexpr uint32_t kTailCells = CUDAQ_RT_LOOPBACK_ENGINE_TAIL_CELLS;
__shared__ __align__(128) uint4 tail_buffer[kTailCells];
__shared__ __align__(8) unsigned long long tail_barrier;

// The warp form stages each lane's request (not its response: the handler may write up to a whole
// slot) in shared memory, lane l at l * slot_size, when the block is that one warp and 32 slots
// fit; else in the per-slot frames in device memory. A round that found one request (a client
// that waits for each answer) stages it at the window's start and builds its response right after
// it, where two slots fit (warp_frames). Only a kernel that uses the warp hooks reserves it: 32
// slots of 1 KB, or two of 16 KB and a 64-byte header (slot_size=16448).
#ifndef CUDAQ_RT_LOOPBACK_WARP_SHARED_STAGING
#define CUDAQ_RT_LOOPBACK_WARP_SHARED_STAGING 1
#endif
constexpr uint32_t kWarpSharedBytes = 32768 + 256;
__shared__ __align__(16) unsigned char warp_request_staging[kWarpSharedBytes];

// Pushing responses out. A response's posted stores to mapped host memory reach the host about
// 0.8 us late when the serving thread goes straight back to polling: measured on the H200
// (bench/probe/ring_lines.cu, two calls), an echo over 5 cells each way takes 2.76 to 2.80 us p50
// that way and 1.96 to 1.98 us with fence.sc.sys (__threadfence_system) after the stores, against
// floor.cu's 1.59 to 1.80 in the same calls (whose kernel fences too). Nothing else tried pushes
// them out: st.wt, st.cs, st.mmio, st.release on the last cell, fence.sc.gpu, a second warp
// fencing in a loop. The fence stalls the serving thread about 1250 cycles (630 ns) while the
// host takes the response, so it is paid where a host is waiting and skipped where the ring is
// busy (the next probe follows at once and the host has other responses to take):
//   0: never;
//   1: after the last response of every probe's batch (the warp form: of every lane);
//   2: the same, but only when the probe did not find its slots all ready (fewer than kW
//      requests in the unified form's batch; fewer than 32 lanes with one in the warp form's
//      round).
#ifndef CUDAQ_RT_LOOPBACK_PUSH
#define CUDAQ_RT_LOOPBACK_PUSH 2
#endif
// The push's instruction: 0, fence.sc.sys (__threadfence_system); 1, fence.acq_rel.sys.
#ifndef CUDAQ_RT_LOOPBACK_PUSH_FENCE
#define CUDAQ_RT_LOOPBACK_PUSH_FENCE 0
#endif

__device__ __forceinline__ void push_out() {
  if (CUDAQ_RT_LOOPBACK_PUSH_FENCE == 1)
    asm volatile("fence.acq_rel.sys;" ::: "memory");
  else
    __threadfence_system();
}

__device__ __forceinline__ bool one_thread_block() {
  return blockDim.x * blockDim.y * blockDim.z == 1;
}
constexpr uint32_t kLine = 128; // bytes per L1 line

// 16-byte accesses to mapped host memory. volatile (relaxed, system scope) so that every poll
// really goes to memory; asm so that the compiler issues the loads back to back and keeps them
// as single 16-byte transactions.
__device__ __forceinline__ uint4 load_cell(const volatile uint4 *p) {
  uint4 v;
  asm volatile("ld.volatile.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

__device__ __forceinline__ void store_cell(volatile uint4 *p, uint4 v) {
  asm volatile("st.volatile.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(v.x), "r"(v.y), "r"(v.z),
               "r"(v.w)
               : "memory");
}

__device__ __forceinline__ bool stamped(const uint4 &cell, uint32_t lap) {
  return cudaq_rt_loopback_stamped(cell.x, cell.z, lap);
}

__device__ __forceinline__ uint32_t frame_cells(uint32_t frame_len) {
  return cudaq_rt_loopback_frame_cells(frame_len);
}

constexpr uint32_t kHead = CUDAQ_RT_LOOPBACK_HEAD_CELLS;

// Head cells are addressed for a layout L (CUDAQ_RT_LOOPBACK_LAYOUT_*). publish_frame and the
// warp form's poll are compiled once per layout, so that L and the offsets are constants there:
// worked out at run time they cost tx_publish 130 cycles on the H200.

// Frame cell c of a slot: in the slot's head cells, or in its tail (layout: loopback_ring.h).
template <class Cell>
__device__ __forceinline__ Cell *cell_at(const Session *s, uint32_t L, Cell *heads, Cell *tails,
                                         uint32_t slot, uint32_t c) {
  return c < kHead ? heads + cudaq_rt_loopback_head_cell(L, slot, c)
                   : tails + cudaq_rt_loopback_tail_cell(slot, c - kHead, s->tail_cells);
}

__device__ __forceinline__ void next_slot(uint32_t &slot, uint32_t &lap, uint32_t n) {
  if (++slot == n) {
    slot = 0;
    lap = cudaq_rt_loopback_next_lap(lap); // skips 0, as the host's cudaq_rt_loopback_lap does
  }
}

// A request whose bytes do not cover 24 + arg_len (cudaq_rt/wire.h): the staging frame past its
// end still holds an earlier request's bytes, so no handler may see it. Header words it did not
// bring are zeroed (the response echoes request_id and ptp_timestamp: they must not be another
// client's), and the magic becomes the marker the dispatch kernel answers with
// CUDAQ_RT_STATUS_TRUNCATED.
__device__ __forceinline__ void mark_truncated(uint2 *frame, uint32_t len) {
  for (uint32_t w = (len + 7u) / 8u; w < CUDAQ_RT_HEADER_SIZE / 8u; ++w)
    frame[w] = make_uint2(0u, 0u);
  frame[0].x = CUDAQ_RT_TRUNCATED_MAGIC;
}

// Loads the staged frame's lines (all in flight together) and folds them into the session, so
// that the loads cannot be dropped, meant to let the handler's own loads hit L1. Measured on the
// H200: no difference either way (CUDAQ_RT_LOOPBACK_WARM_L1=0 in bench/loopback_rtt.md).
__device__ __forceinline__ void warm_lines(Session *s, const unsigned char *frame, uint32_t len) {
#if CUDAQ_RT_LOOPBACK_WARM_L1
  uint32_t acc = 0;
  for (uint32_t off = 0; off < len && off < CUDAQ_RT_LOOPBACK_WARM_BYTES; off += kLine)
    acc |= *reinterpret_cast<const uint32_t *>(frame + off);
  s->sink |= acc;
#else
  (void)s, (void)frame, (void)len;
#endif
}

// Bulk frames (loopback_ring.h, "Bulk frames"): the frame's plain bytes, rounded up to 16 (slot
// areas and staging frames are slot_size bytes, a multiple of 16), between the slot's bulk area
// and the staging frame.

#if CUDAQ_RT_LOOPBACK_HAS_BULK_COPY
__device__ __forceinline__ uint32_t shared_address(const void *p) {
  return (uint32_t)__cvta_generic_to_shared(p);
}
#endif

// One engine copy of `bytes` (not 0) from mapped host memory into shared memory, and with it,
// where `cell_from` is not null, of the 16-byte cell there into cell_to, both counted on the
// mbarrier `barrier` (phase_done waits for them). The proxy fence orders this thread's earlier
// accesses (the control cell's load; the last reads of the place copied into) before the
// engine's.
__device__ __forceinline__ void engine_in(unsigned long long *barrier, void *to, const void *from,
                                          uint32_t bytes, const volatile void *cell_from = nullptr,
                                          void *cell_to = nullptr) {
#if CUDAQ_RT_LOOPBACK_HAS_BULK_COPY
  const uint32_t bar = shared_address(barrier);
  asm volatile("fence.proxy.async;" ::: "memory");
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar),
               "r"(bytes + (cell_from ? 16u : 0u))
               : "memory");
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, "
               "[%3];" ::"r"(shared_address(to)),
               "l"(from), "r"(bytes), "r"(bar)
               : "memory");
  if (cell_from)
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], "
                 "16, [%2];" ::"r"(shared_address(cell_to)),
                 "l"(cell_from), "r"(bar)
                 : "memory");
#else
  (void)barrier, (void)to, (void)from, (void)bytes, (void)cell_from, (void)cell_to;
#endif
}

// Whether the phase of `parity` of the mbarrier `barrier` has completed; with `block`, waits
// until it has.
__device__ __forceinline__ bool phase_done(unsigned long long *barrier, uint32_t parity,
                                           bool block) {
#if CUDAQ_RT_LOOPBACK_HAS_BULK_COPY
  const uint32_t bar = shared_address(barrier);
  uint32_t done = 0;
  if (block)
    do
      asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; "
                   "selp.u32 %0, 1, 0, p; }"
                   : "=r"(done)
                   : "r"(bar), "r"(parity)
                   : "memory");
    while (!done);
  else
    asm volatile("{ .reg .pred p; mbarrier.test_wait.parity.shared::cta.b64 p, [%1], %2; "
                 "selp.u32 %0, 1, 0, p; }"
                 : "=r"(done)
                 : "r"(bar), "r"(parity)
                 : "memory");
  return done;
#else
  (void)barrier, (void)parity, (void)block;
  return true;
#endif
}

// A bulk request's copy in (on bulk_barrier) is waited for.
__device__ __forceinline__ void bulk_in_wait(Session *s) {
  phase_done(&bulk_barrier, s->bulk_phase, true);
  s->bulk_phase ^= 1u;
}

__device__ __forceinline__ void bulk_copy_in(Session *s, void *to, const void *from,
                                             uint32_t bytes) {
  engine_in(&bulk_barrier, to, from, bytes);
  bulk_in_wait(s);
}

// The other half: `bytes` from shared memory out to mapped host memory (bulk_out_wait waits until
// they are written).
__device__ __forceinline__ void bulk_out_start(void *to, const void *from, uint32_t bytes) {
#if CUDAQ_RT_LOOPBACK_HAS_BULK_COPY
  asm volatile("fence.proxy.async.shared::cta;" ::
                   : "memory"); // the handler's stores, to the engine
  asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(to),
               "r"(shared_address(from)), "r"(bytes)
               : "memory");
  asm volatile("cp.async.bulk.commit_group;" ::: "memory");
#else
  (void)to, (void)from, (void)bytes;
#endif
}

__device__ __forceinline__ void bulk_out_wait() {
#if CUDAQ_RT_LOOPBACK_HAS_BULK_COPY
  asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
#endif
}

// Tails by the engine: `cells` tail cells of `slot` (whole blocks of 64, as they lie in the ring)
// into tail_buffer, counted on tail_barrier. The proxy fence orders this thread's last reads of
// tail_buffer (the previous unpack) before the engine's writes.
__device__ __forceinline__ void tail_copy(Session *s, uint32_t slot, uint32_t cells) {
#if CUDAQ_RT_LOOPBACK_HAS_BULK_COPY
  engine_in(&tail_barrier, tail_buffer,
            const_cast<const uint4 *>(s->request_tails + (size_t)slot * s->tail_cells),
            cells * 16u);
  s->tail_inflight = 1;
  s->tail_slot = slot;
  s->tail_copied = cells;
#else
  (void)s, (void)slot, (void)cells;
#endif
}

// Waits for the copy on its way (tail_inflight), or only asks whether it has arrived (`block`
// false); true when it has.
__device__ __forceinline__ bool tail_arrived(Session *s, bool block) {
#if CUDAQ_RT_LOOPBACK_HAS_BULK_COPY
  const bool done = phase_done(&tail_barrier, s->tail_phase, block);
  if (done) {
    s->tail_phase ^= 1u;
    s->tail_inflight = 0;
  }
  return done;
#else
  (void)s, (void)block;
  return true;
#endif
}

// The heads' layout of the session's ring (CUDAQ_RT_LOOPBACK_LAYOUT_*), where code is not compiled
// per layout.
__device__ __forceinline__ uint32_t layout_of(const Session *s) {
  return s->lanes_layout ? CUDAQ_RT_LOOPBACK_LAYOUT_LANES : CUDAQ_RT_LOOPBACK_LAYOUT_SLOTS;
}

__device__ __forceinline__ bool use_bulk_engine(const Session *s, const void *staging) {
  return CUDAQ_RT_LOOPBACK_HAS_BULK_COPY && CUDAQ_RT_LOOPBACK_BULK_COPY && s->bulk_engine &&
         __isShared(staging);
}

// 4 lines a batch: at 16 the inlined bulk path took the unified kernel to 255 registers and
// spills (bench/payload_sizes.md).
#ifndef CUDAQ_RT_LOOPBACK_BULK_LINES
#define CUDAQ_RT_LOOPBACK_BULK_LINES 4
#endif
// Without the engine: 16-byte loads of the bulk area, kLines at a time, each on a line of its own
// (loads of one line from one thread do not overlap: loopback_ring.h), so a batch is one round
// trip and a group of kLines lines takes 8.
__device__ __forceinline__ void load_lines(uint4 *to, const volatile uint4 *from, uint32_t cells) {
  constexpr uint32_t kLines = CUDAQ_RT_LOOPBACK_BULK_LINES, kPerLine = kLine / 16;
  for (uint32_t group = 0; group < cells; group += kLines * kPerLine)
    for (uint32_t k = 0; k < kPerLine; ++k) {
      uint4 v[kLines];
#pragma unroll
      for (uint32_t l = 0; l < kLines; ++l) {
        const uint32_t c = group + l * kPerLine + k;
        if (c < cells)
          v[l] = load_cell(from + c);
      }
#pragma unroll
      for (uint32_t l = 0; l < kLines; ++l) {
        const uint32_t c = group + l * kPerLine + k;
        if (c < cells)
          to[c] = v[l];
      }
    }
}

// Stores are posted: 4 loads of the staged response, then their 4 stores.
__device__ __forceinline__ void store_cells(volatile uint4 *to, const uint4 *from, uint32_t cells) {
  for (uint32_t c = 0; c < cells; c += 4) {
    uint4 v[4];
#pragma unroll
    for (uint32_t b = 0; b < 4; ++b)
      if (c + b < cells)
        v[b] = from[c + b];
#pragma unroll
    for (uint32_t b = 0; b < 4; ++b)
      if (c + b < cells)
        store_cell(to + c + b, v[b]);
  }
}

// A bulk request of the bytes its control cell claimed (unpack left them in the staging frame's
// second word) in `slot`, into the staging frame; what rx_poll returns (READY). Inlined, as
// publish_bulk: a call anywhere in the dispatch kernel made ptxas give it a 272-byte stack frame
// and 245 local-memory loads in its loop (+0.3 to 0.45 us for an 8-byte echo on the H200,
// bench/payload_sizes.md).
__device__ __forceinline__ int stage_bulk(Session *s, uint32_t slot, void *staging) {
  uint2 *frame = static_cast<uint2 *>(staging);
  const uint32_t claimed = frame[0].y; // unpack left it there
  const uint32_t len = claimed < s->slot_size ? claimed : s->slot_size;
  const uint32_t bytes = (len + 15u) & ~15u;
  const unsigned char *from = s->request_bulk + cudaq_rt_loopback_bulk_offset(slot, s->slot_size);
  if (bytes != 0u) {
    if (use_bulk_engine(s, frame))
      bulk_copy_in(s, frame, from, bytes);
    else
      load_lines(reinterpret_cast<uint4 *>(frame), reinterpret_cast<const volatile uint4 *>(from),
                 bytes / 16u);
  }
  if (!cudaq_rt_loopback_request_whole(len, len >= 12u ? frame[1].x : 0xFFFFFFFFu))
    mark_truncated(frame, len);
  return CUDAQ_DEV_RX_READY;
}

// Tail cells g .. g + 7 (g a multiple of 8: one cell on each of a block's 8 lines, `cells` the
// first, the others 8 cells apart: cudaq_rt_loopback_tail_cell) from shared memory into frame
// words 4 + g .., those below `need`; the stamps of those that are not `lap`, folded (zero: all
// are). All 8 loads are issued before the first store: `frame` is a generic pointer the compiler
// cannot tell from `cells`, so a load after a store waits for it, and a cell at a time cost the
// serving thread a shared-memory round trip each (27 cycles a cell on the H200,
// bench/payload_sizes.md). Pairs of words go in one 16-byte store (word 4 + g is 16-aligned in a
// 16-aligned frame); the second word of the last pair may lie past the frame's end, never past
// its slot (slot_size is a multiple of 16).
constexpr uint32_t kGroup = CUDAQ_RT_LOOPBACK_LINE_CELLS;
__device__ __forceinline__ uint32_t unpack_group(uint2 *frame, const uint4 *cells, uint32_t g,
                                                 uint32_t need, uint32_t lap) {
  uint4 v[kGroup];
#pragma unroll
  for (uint32_t k = 0; k < kGroup; ++k)
    v[k] = cells[k * CUDAQ_RT_LOOPBACK_LINE_CELLS];
  uint32_t unstamped = 0;
#pragma unroll
  for (uint32_t k = 0; k < kGroup; ++k)
    unstamped |= g + k < need ? (v[k].x ^ lap) | (v[k].z ^ lap) : 0u;
  uint4 *pairs = reinterpret_cast<uint4 *>(frame + kHead - 1u + g);
#pragma unroll
  for (uint32_t k = 0; k < kGroup; k += 2)
    if (g + k < need)
      pairs[k / 2] = make_uint4(v[k].y, v[k].w, v[k + 1].y, v[k + 1].w);
  return unstamped;
}

// The tail of a frame of cells (len bytes, as its control cell said) in `slot`, stamped `lap`,
// into the staging frame past its head words (unpack put those there): from the copy fetch_one
// started with its probe where that was of this slot and reached far enough, else from a copy
// made now (one round trip, where loads took one per 8 cells). A copy some of whose halves are
// not stamped yet (made before the host's stores arrived) is made again: one made after the
// control cell was seen has them all (the host writes the tail first; loopback_ring.h). What
// rx_poll returns (READY). Inlined, as stage_bulk.
__device__ __forceinline__ int stage_tail(Session *s, uint32_t slot, uint32_t lap, void *staging,
                                          uint32_t len) {
  uint2 *frame = static_cast<uint2 *>(staging);
  const uint32_t need = frame_cells(len) - kHead;
  const uint32_t cells =
      (need + CUDAQ_RT_LOOPBACK_TAIL_BLOCK - 1u) & ~(CUDAQ_RT_LOOPBACK_TAIL_BLOCK - 1u);
  if (s->tail_inflight)
    tail_arrived(s, true);
  bool have = s->tail_slot == slot && s->tail_copied >= cells;
  for (;;) {
    if (!have) {
      tail_copy(s, slot, cells);
      tail_arrived(s, true);
    }
    uint32_t unstamped = 0;
    for (uint32_t g = 0; g < need; g += kGroup)
      unstamped |=
          unpack_group(frame, tail_buffer + cudaq_rt_loopback_tail_cell(0u, g, 0u), g, need, lap);
    if (unstamped == 0)
      break;
    have = false;
  }
  // The next request is likely of this size too: fetch_one copies its tail with its probe.
  s->tail_ahead = cells;
  if (!cudaq_rt_loopback_request_whole(len, frame[1].x))
    mark_truncated(frame, len);
  return CUDAQ_DEV_RX_READY;
}

// Unpacks one ready frame: the cells already probed come from registers, the rest is loaded 8
// cells per round trip (unless the warp form's lanes staged it: tail_staged); any half the host
// has not stamped yet (torn, or still being written) is reloaded. A frame shorter than its header
// claims is staged marked (mark_truncated).
// A bulk frame (its control cell's second half, stamped too, says so) is only noted here, as
// frame `pos` of the batch: rx_poll stages it when it hands it out (stage_bulk), outside the
// probe's code, which is inlined for every probed slot.
template <uint32_t P>
__device__ __forceinline__ uint32_t unpack(Session *s, uint32_t L, uint32_t slot, uint2 *frame,
                                           uint32_t lap, const uint4 (&probe)[P], uint32_t pos,
                                           bool tail_staged = false) {
  static_assert(P >= 3, "the probe holds the header's arg_len (frame cell 2)");
  static_assert((P - 1) * 8 <= CUDAQ_RT_LOOPBACK_MIN_SLOT_SIZE, "the probe's words fit a frame");
  if (CUDAQ_RT_LOOPBACK_BULK && probe[0].w == CUDAQ_RT_LOOPBACK_KIND_BULK) {
    s->bulk_pending = uint16_t(s->bulk_pending | 1u << pos);
    frame[0].y = probe[0].y;
    return 0;
  }
  const uint32_t len = probe[0].y < s->slot_size ? probe[0].y : s->slot_size;
  const uint32_t cells = frame_cells(len);
  // A small frame, all in the probe and all stamped (the common case): straight-line code, since
  // the serving thread pays every instruction here in latency (with this, the probe's return to
  // rx_poll's went from 910 to 650 cycles on the H200: bench/loopback_rtt.md). Frame words past
  // the frame's end get stale bytes, as the staging frame holds there anyway (slot_size >= 32:
  // all P - 1 words are in the frame).
  // The stamps of the frame's cells folded into one word, zero when every one is `lap`: per cell
  // one three-input logic op (LOP3) and a select, where comparing each stamp took two compares
  // and a predicate op (and one branch on the result, not one per cell).
  uint32_t unstamped = 0;
#pragma unroll
  for (uint32_t c = 1; c < P; ++c)
    unstamped |= c < cells ? (probe[c].x ^ lap) | (probe[c].z ^ lap) : 0u;
  if ((cells <= P) & (unstamped == 0)) {
#pragma unroll
    for (uint32_t c = 1; c < P; ++c)
      frame[c - 1] = make_uint2(probe[c].y, probe[c].w);
    if (!cudaq_rt_loopback_request_whole(len, cells > 2 ? probe[2].y : 0xFFFFFFFFu))
      mark_truncated(frame, len);
    return len;
  }
  const volatile uint4 *head = s->request_heads + cudaq_rt_loopback_head_cell(L, slot, 0);
  uint32_t arg_len = 0xFFFFFFFFu; // stays so when the frame does not reach the header's arg_len
#pragma unroll
  for (uint32_t c = 1; c < P; ++c)
    if (c < cells) {
      uint4 v = probe[c];
      while (!stamped(v, lap))
        v = load_cell(head + c * cudaq_rt_loopback_head_stride(L));
      frame[c - 1] = make_uint2(v.y, v.w);
      if (c == 2) // header bytes 8..11 (c is a constant after unrolling: a register move)
        arg_len = v.y;
    }
  if (CUDAQ_RT_LOOPBACK_TAIL_COPY && CUDAQ_RT_LOOPBACK_HAS_BULK_COPY && s->bulk_engine &&
      pos < 4u && cells > P && cells - P <= kTailCells) {
    // The tail by the engine when rx_poll hands the frame out (stage_tail): noted here, as a
    // bulk frame is, outside the probe's code. (pos is a constant after unrolling.)
    s->tail_pending = uint16_t(s->tail_pending | 1u << pos);
    s->tail_lens = (s->tail_lens & ~(0xFFFFull << 16u * pos)) | (uint64_t)len << 16u * pos;
    return len;
  }
  for (uint32_t c = P; c < (tail_staged ? 0u : cells); c += kBatch) {
    uint4 v[kBatch];
    const volatile uint4 *at[kBatch];
#pragma unroll
    for (uint32_t b = 0; b < kBatch; ++b)
      if (c + b < cells) {
        at[b] = cell_at(s, L, s->request_heads, s->request_tails, slot, c + b);
        v[b] = load_cell(at[b]);
      }
#pragma unroll
    for (uint32_t b = 0; b < kBatch; ++b)
      if (c + b < cells) {
        while (!stamped(v[b], lap))
          v[b] = load_cell(at[b]);
        frame[c + b - 1] = make_uint2(v[b].y, v[b].w);
      }
  }
  if (!cudaq_rt_loopback_request_whole(len, arg_len))
    mark_truncated(frame, len);
  return len;
}

// fetch while the ring is idle: probes the next slot only, until its request is there (true) or
// shutdown is seen (false). Everything the request's hand-out needs (its staging frame, the
// position after it) is worked out before the first probe, while there is time, so that what
// runs between the probe's return and rx_poll's is the stamp check, the unpack and a few
// stores: 308 cycles on the H200, where fetch's path took 352 (bench/loopback_rtt.md).
// The same protocol as fetch's loop with one slot, flag and fence included.
__device__ bool fetch_one(Session *s, uint32_t L) {
  constexpr uint32_t W = CUDAQ_RT_LOOPBACK_PROBE_SLOTS, P = kHead;
  const uint32_t slot = s->fetched_slot, lap = s->fetched_lap;
  const volatile uint4 *cells = s->request_heads + cudaq_rt_loopback_head_cell(L, slot, 0);
  const uint32_t stride = cudaq_rt_loopback_head_stride(L);
  const volatile int *shutdown_flag = s->shutdown_flag;
  const bool shared = s->shared_ok && s->outstanding == 0;
  unsigned char *const request =
      shared ? shared_staging : s->request_frames + (size_t)slot * s->slot_size;
  unsigned char *const response = shared ? shared_staging + (size_t)s->batch_frames * s->slot_size
                                         : s->response_frames + (size_t)slot * s->slot_size;
  uint2 *frame = reinterpret_cast<uint2 *>(request);
  uint32_t next = slot, next_lap = lap;
  next_slot(next, next_lap, s->num_slots);
  // The next slot's control cell, loaded with the probe (not when it is this slot's: two loads of
  // one line in a batch do not overlap).
  const volatile uint4 *after_cell = s->request_heads + cudaq_rt_loopback_head_cell(L, next, 0);
  const bool peek = CUDAQ_RT_LOOPBACK_PEEK && next != slot;
  // The lone form's probe of this slot, handed over (lone_poll left it in the response frame,
  // which nothing uses before this request is handed out): its cells, not a round trip more.
  bool saved = s->probe_saved;
  s->probe_saved = 0;
  for (;;) {
    // The client's last request was cells with a tail (stage_tail): its next one likely is too,
    // so the engine copies this slot's tail with every probe (a new copy once the last has
    // arrived), and the tail comes with the probe that finds the request, instead of one round
    // trip after it (bench/payload_sizes.md).
    if (CUDAQ_RT_LOOPBACK_TAIL_COPY && s->tail_ahead &&
        (!s->tail_inflight || tail_arrived(s, false)))
      tail_copy(s, slot, s->tail_ahead);
    const long long issued = probe_clock();
    uint4 probe[P], after;
    if (saved) {
      const uint4 *from = reinterpret_cast<const uint4 *>(response);
#pragma unroll
      for (uint32_t c = 0; c < P; ++c)
        probe[c] = from[c];
      after = from[P];
      saved = false;
    } else {
#pragma unroll
      for (uint32_t c = 0; c < P; ++c)
        probe[c] = load_cell(cells + c * stride); // a line per cell
      after = peek ? load_cell(after_cell) : make_uint4(0u, 0u, 0u, 0u);
    }
    const int shutdown = *shutdown_flag;
    if (shutdown && !s->draining) {
      __threadfence_system(); // as in fetch
      s->draining = 1;
      continue;
    }
    if (stamped(probe[0], lap)) {
      stamp_probe(s, issued);
      const uint32_t len = unpack<P>(s, L, slot, frame, lap, probe, 0);
      if (!shared)
        warm_lines(s, reinterpret_cast<const unsigned char *>(frame), len);
      if (!(s->tail_pending & 1u))
        s->tail_ahead = 0; // a frame without a tail: stop copying tails ahead
      if (CUDAQ_RT_LOOPBACK_TAIL_COPY && s->tail_inflight && !s->tail_ahead)
        tail_arrived(s, false); // the last copy ahead: done by now, most likely (lone_ready)
      // Widen as fetch does after finding one, but only when a second request is waiting: a
      // client that sends one request at a time then stays on this path, whose work after the
      // probe is the shortest. Widened after every request (CUDAQ_RT_LOOPBACK_PEEK=0), such a
      // client's every request was found by fetch's wider probe: 2.72 -> 2.41 us a round trip
      // on the H200, same call (bench/loopback_rtt.md).
      s->width = !CUDAQ_RT_LOOPBACK_PEEK || stamped(after, next_lap) ? (2u < W ? 2u : W) : 1u;
      // A bulk request after it, already there: the chain (start_ahead) may bring it in.
      s->ahead_len = peek && stamped(after, next_lap) && after.w == CUDAQ_RT_LOOPBACK_KIND_BULK &&
                             after.y >= CUDAQ_RT_HEADER_SIZE
                         ? after.y
                         : 0u;
      // The lone form (cudaq_dev_lone_enter) once LONE_AFTER requests in a row came alone, the last
      // one small (all in the probe), and nothing is on its way: the chain, a tail copy.
      const bool alone = s->width <= 1u; // the peek found nothing after it
      s->lone_streak = alone ? (s->lone_streak < 255u ? s->lone_streak + 1u : 255u) : 0u;
      s->lone_ready = s->lone_streak >= CUDAQ_RT_LOOPBACK_LONE_AFTER &&
                      probe[0].w != CUDAQ_RT_LOOPBACK_KIND_BULK && frame_cells(len) <= P &&
                      s->ahead_len == 0 && s->tail_ahead == 0 && !s->tail_inflight &&
                      !s->draining && shared;
      s->shared_batch = shared;
      if (shared)
        s->batch_first = slot;
      s->fetched_slot = next;
      s->fetched_lap = next_lap;
      s->pending = 1;
      s->handout_pos = 0;
      s->busy = W == 1;
      s->handout_request = request;
      s->handout_response = response;
      s->handout_lap = lap;
      return true;
    }
    if (shutdown)
      return false;
  }
}

// Probes the next slots until at least one request is there (true) or shutdown is seen (false),
// and unpacks every ready request into its staging frame.
__device__ bool fetch(Session *s) {
  // The layout at run time here: a select per probed slot, before the loads (an instance per
  // layout would double this function's code for nothing measurable).
  const uint32_t L = layout_of(s);
  constexpr uint32_t W = CUDAQ_RT_LOOPBACK_PROBE_SLOTS, P = kHead;
#if CUDAQ_RT_LOOPBACK_ADAPTIVE_PROBE
  if (s->width <= 1)
    return fetch_one(s, L);
#endif
  const uint32_t n = s->num_slots;
  const uint32_t probe_slots = n < s->width ? n : s->width;
  uint32_t slot[W], lap[W];
  const volatile uint4 *cells[W];
  slot[0] = s->fetched_slot;
  lap[0] = s->fetched_lap;
#pragma unroll
  for (uint32_t w = 1; w < W; ++w) {
    slot[w] = slot[w - 1];
    lap[w] = lap[w - 1];
    next_slot(slot[w], lap[w], n);
  }
#pragma unroll
  for (uint32_t w = 0; w < W; ++w)
    cells[w] = s->request_heads + cudaq_rt_loopback_head_cell(L, slot[w], 0);
  const uint32_t stride = cudaq_rt_loopback_head_stride(L);
  const volatile int *shutdown_flag = s->shutdown_flag;

  uint4 probe[W][P];
  uint32_t ready;
  for (;;) {
    // One round trip: every load below is independent and issued before the first is used. Two
    // things keep it so in the machine code (a load whose result is needed before the next load
    // issues makes the batch two round trips, +2 us a request on the H200: bench/loopback_rtt.md):
    //   - the probe is not live across polls: a slot not probed (a ring of fewer than W slots)
    //     reads as zeroes, never stamped (laps skip 0), instead of keeping the last poll's
    //     values. Carried over, its 80 registers pushed the kernel to 255 and into spilling a
    //     probed cell between the loads (a spill store waits for its load);
    //   - the first use of the probe sits behind a branch on the flag, loaded last: without the
    //     branch, ptxas scheduled the stamp checks of the first slots among the last loads.
    const long long issued = probe_clock();
#pragma unroll
    for (uint32_t w = 0; w < W; ++w)
#pragma unroll
      for (uint32_t c = 0; c < P; ++c)
        probe[w][c] = w < probe_slots ? load_cell(cells[w] + c * stride) // a line per cell
                                      : make_uint4(0u, 0u, 0u, 0u);
    const int shutdown = *shutdown_flag;
    if (shutdown && !s->draining) {
      // The loads of one batch complete in any order: the flag's may have seen the host's store
      // while the ring loads still saw the ring as it was before requests the host sent ahead of
      // it. A fence, then probe again: from now on every probe sees every request sent before
      // the flag was set. One round trip more, once per kernel.
      __threadfence_system();
      s->draining = 1;
      continue;
    }
    // Requests are handed out in order: count the ready slots from the first.
    ready = 0;
#pragma unroll
    for (uint32_t w = 0; w < W; ++w)
      if (ready == w && w < probe_slots && stamped(probe[w][0], lap[w]))
        ++ready;
    // What a probe finds is served even when the flag is set: those requests were sent, and the
    // host waits for their answers. Nothing found after the fence: every one has been answered.
    if (ready > 0) {
      stamp_probe(s, issued);
      break;
    }
    if (shutdown)
      return false;
#if CUDAQ_RT_LOOPBACK_ADAPTIVE_PROBE
    // Idle: probe the next slot only. Its 5 loads and the flag's find a lone request sooner than
    // the 21 loads of a wide probe (bench/loopback_rtt.md); a busy ring widens it again.
    return fetch_one(s, L);
#endif
  }
  // A shared batch holds batch_frames requests (one where slots are 16 KB). Where the probe found
  // more, and more than that many of them, from the first, are small (all in the probe: no tail,
  // no bulk bytes), those are staged in the per-slot frames in device memory instead, all in this
  // batch: found again by the next probe, each would cost a probe's round trip (8-byte echoes at
  // 64 in flight over 16 KB slots: 0.34 -> 0.79 M requests/s on the H200, as over 1 KB slots,
  // whose batch holds kW). Only small ones: a handler that copies a few hundred bytes of a frame
  // in device memory waits for L2 load after load, and a bulk response leaves device memory by
  // the thread's stores, not the engine (every frame of cells staged so, loopback_dispatch_test's
  // mixed sizes gave 0.28 to 0.30 GB/s in four runs against 0.29 to 0.43 without). Otherwise the
  // rest of what the probe found is found again by the next one (in order: ready counts slots
  // from the first).
  uint32_t small_first = 0; // ready frames from the first that are small
#pragma unroll
  for (uint32_t w = 0; w < W; ++w)
    if (small_first == w && w < ready && probe[w][0].y <= (P - 1) * CUDAQ_RT_LOOPBACK_CELL_DATA &&
        (!CUDAQ_RT_LOOPBACK_BULK || probe[w][0].w != CUDAQ_RT_LOOPBACK_KIND_BULK))
      ++small_first;
  const bool shared = s->shared_ok && s->outstanding == 0;
  const bool device_batch = shared && small_first > s->batch_frames;
  s->shared_batch = shared && !device_batch;
  if (device_batch)
    ready = small_first;
  else if (s->shared_batch && ready > s->batch_frames)
    ready = s->batch_frames;
  // Requests are coming: probe twice as many slots next time, up to W (or what a shared batch
  // holds, where that is fewer, unless this batch was small frames in device memory).
  const uint32_t most = s->shared_ok && s->batch_frames < W && !device_batch ? s->batch_frames : W;
#if CUDAQ_RT_LOOPBACK_ADAPTIVE_PROBE
  s->width = 2 * ready < most ? 2 * ready : most;
#else
  s->width = most;
#endif
  // Only a batch staged in shared memory moves batch_first: a frame of the last shared batch that
  // is still held (which is why this batch is not shared) finds its slot from it at publish.
  if (s->shared_batch)
    s->batch_first = slot[0];
#pragma unroll
  for (uint32_t w = 0; w < W; ++w)
    if (w < ready) {
      uint2 *frame = reinterpret_cast<uint2 *>(
          s->shared_batch ? shared_staging + (size_t)w * s->slot_size
                          : s->request_frames + (size_t)slot[w] * s->slot_size);
      const uint32_t len = unpack<P>(s, L, slot[w], frame, lap[w], probe[w], w);
      if (!s->shared_batch)
        warm_lines(s, reinterpret_cast<const unsigned char *>(frame), len);
    }
  uint32_t next = slot[0], next_lap = lap[0];
  for (uint32_t w = 0; w < ready; ++w)
    next_slot(next, next_lap, n);
  s->fetched_slot = next;
  s->fetched_lap = next_lap;
  s->pending = ready;
  s->handout_pos = 0;
  s->busy = ready == W;
  s->ahead_len = 0; // fetched_slot moved past what fetch_one saw after its request
  s->lone_streak = 0;
  s->lone_ready = 0;
  return true;
}

// The lap of the frame fetched into `slot` last (the host cannot reuse a slot before it has that
// frame's response): this lap if the slot precedes the next one to fetch, else the last.
__device__ __forceinline__ uint32_t frame_lap(const Session *s, uint32_t slot) {
  return slot < s->fetched_slot ? s->fetched_lap : cudaq_rt_loopback_prev_lap(s->fetched_lap);
}

__device__ __forceinline__ bool push_wanted(const Session *s) {
  return CUDAQ_RT_LOOPBACK_PUSH == 1 || (CUDAQ_RT_LOOPBACK_PUSH == 2 && !s->busy);
}

// Bulk requests back to back (loopback_ring.h, "The chain"). The request at fetched_slot is known
// to be a bulk frame whose bytes are there (ahead_len: its control cell was seen stamped); its
// bytes start into the shared frame `into`, which nothing held uses, and the control cell of the
// slot after it comes in the same copy; rx_poll hands the frame out without a probe
// (handout_ahead).
__device__ __forceinline__ void start_ahead_into(Session *s, unsigned char *into) {
  const uint32_t len = s->ahead_len < s->slot_size ? s->ahead_len : s->slot_size;
  const uint32_t slot = s->fetched_slot;
  const uint32_t after = slot + 1u == s->num_slots ? 0u : slot + 1u;
  const volatile uint4 *after_cell =
      s->request_heads + cudaq_rt_loopback_head_cell(layout_of(s), after, 0);
  engine_in(&bulk_barrier, into,
            s->request_bulk + cudaq_rt_loopback_bulk_offset(slot, s->slot_size), (len + 15u) & ~15u,
            after != slot ? after_cell : nullptr, &ahead_cell);
  s->ahead_len = len;
  s->ahead_copy = 1;
  s->ahead_spare = into == spare_staging;
}

__device__ __forceinline__ bool chain_wanted(const Session *s) {
  return CUDAQ_RT_LOOPBACK_AHEAD && s->ahead_len != 0 && !s->ahead_copy && s->pending == 0 &&
         s->shared_ok && s->bulk_engine;
}

// The chain from tx_publish, once the response's frame no longer needs the request's: where
// nothing is held (every frame handed out has been published, none of a probe's batch waits),
// into the shared staging frame the probe would have put the request in, while the response just
// published is still being written out.
__device__ __forceinline__ void start_ahead(Session *s) {
  if (chain_wanted(s) && s->outstanding == 0)
    start_ahead_into(s, shared_staging);
}

// The chain from rx_poll, with the spare frame: where the request just handed out (`held`, in the
// staging's first frame or the spare one) is the only frame held, the next one's bytes start into
// the other frame at once, and come in while the handler runs. The ring is busy while the chain
// goes on (handout_ahead).
__device__ __forceinline__ void start_ahead_early(Session *s, const void *held) {
  if (!s->has_spare || !chain_wanted(s) || s->outstanding != 1u ||
      (held != shared_staging && held != spare_staging))
    return;
  start_ahead_into(s, held == spare_staging ? shared_staging : spare_staging);
  s->busy = CUDAQ_RT_LOOPBACK_CHAIN_BUSY;
}

// A bulk response of len bytes from the staged `response`: the bytes to the slot's bulk area,
// written for certain (the engine's wait, or the fence) before the control cell says they are
// there. Inlined, as stage_bulk; `push` as tx_publish's.
__device__ __forceinline__ void publish_bulk(Session *s, uint32_t slot, uint32_t lap,
                                             const void *response, uint32_t len, bool push) {
  const uint32_t bytes = (len + 15u) & ~15u;
  volatile uint4 *control = s->response_heads + cudaq_rt_loopback_head_cell(layout_of(s), slot, 0);
  unsigned char *to = s->response_bulk + cudaq_rt_loopback_bulk_offset(slot, s->slot_size);
  if (use_bulk_engine(s, response)) {
    bulk_out_start(to, response, bytes);
    if (CUDAQ_RT_LOOPBACK_AHEAD == 1)
      start_ahead(s); // the next request's bytes come in while these go out
    bulk_out_wait();
    if (CUDAQ_RT_LOOPBACK_AHEAD == 2)
      start_ahead(s);
  } else {
    store_cells(reinterpret_cast<volatile uint4 *>(to), static_cast<const uint4 *>(response),
                bytes / 16u);
  }
  __threadfence_system();
  store_cell(control, make_uint4(lap, len, lap, CUDAQ_RT_LOOPBACK_KIND_BULK));
  if (push)
    push_out();
}

// A response's frame length from its header's result_len (header word 2): header + result_len,
// at most the slot. publish_frame and the hooks' bulk test work it out the same way.
__device__ __forceinline__ uint32_t response_len(const Session *s, uint32_t result_len) {
  const uint32_t max_result = s->slot_size - CUDAQ_RT_HEADER_SIZE;
  return CUDAQ_RT_HEADER_SIZE + (result_len < max_result ? result_len : max_result);
}

// Packs the response frame staged at `response` into the response cells of `slot`, stamped
// `lap`: the head cells' words (the header and the first 8 payload bytes, result_len in header
// word 2) in one batch of loads. A frame that fits the head cells (the small ones, whose latency
// matters) takes the short way: four loads, its head cells, done.
template <uint32_t L>
__device__ __forceinline__ void publish_frame(Session *s, uint32_t slot, uint32_t lap,
                                              const void *response) {
  static_assert(kHead - 1 <= CUDAQ_RT_LOOPBACK_MIN_SLOT_SIZE / 8,
                "a frame has the head cells' words");
  const uint2 *frame = static_cast<const uint2 *>(response);
  uint2 first[kHead - 1];
#pragma unroll
  for (uint32_t i = 0; i < kHead - 1; ++i)
    first[i] = frame[i];
  const uint32_t len = response_len(s, first[1].x);
  const uint32_t cells = frame_cells(len);
  volatile uint4 *head = s->response_heads + cudaq_rt_loopback_head_cell(L, slot, 0);
  const uint32_t stride = cudaq_rt_loopback_head_stride(L);
  // Posted stores, in any order: each half carries its own stamp, so no fence is needed. (The
  // addresses from the slot's first head cell: c is a constant after unrolling.)
#pragma unroll
  for (uint32_t c = 1; c < kHead; ++c)
    if (c < cells)
      store_cell(head + c * stride, make_uint4(lap, first[c - 1].x, lap, first[c - 1].y));
  if (cells > kHead) {
    // The tail, 8 cells at a time (one on each line of a block: cudaq_rt_loopback_tail_cell): the
    // group's words loaded in 16-byte pairs, all before its stores, whose "memory" clobber keeps a
    // load after one from issuing early (a load then a store per cell cost the serving thread a
    // staging round trip each). Word pairs from word 4 on are 16-aligned and inside the slot.
    volatile uint4 *tail = s->response_tails + (size_t)slot * s->tail_cells;
    const uint32_t need = cells - kHead;
    for (uint32_t g = 0; g < need; g += kGroup) {
      const uint4 *pairs = reinterpret_cast<const uint4 *>(frame + kHead - 1u + g);
      uint4 w[kGroup / 2];
#pragma unroll
      for (uint32_t k = 0; k < kGroup; k += 2)
        w[k / 2] = g + k < need ? pairs[k / 2] : make_uint4(0u, 0u, 0u, 0u);
      volatile uint4 *at = tail + cudaq_rt_loopback_tail_cell(0u, g, s->tail_cells);
#pragma unroll
      for (uint32_t k = 0; k < kGroup; ++k)
        if (g + k < need)
          store_cell(at + k * CUDAQ_RT_LOOPBACK_LINE_CELLS,
                     k % 2 ? make_uint4(lap, w[k / 2].z, lap, w[k / 2].w)
                           : make_uint4(lap, w[k / 2].x, lap, w[k / 2].y));
    }
  }
  store_cell(head, make_uint4(lap, len, lap, 0u));
}

// The request start_ahead brought in: handed out as fetch_one would have (its position, the
// shared staging's response frame), its bytes checked as stage_bulk checks them. The control cell
// that came with them says whether the chain goes on. Where the kernel still holds the frame
// before it (it polled before publishing: only after start_ahead_early), the shared response frame
// is that one's, and this frame's response is built in its slot's frame in device memory.
__device__ __forceinline__ int handout_ahead(Session *s, void **request, void **response) {
  bulk_in_wait(s);
  s->ahead_copy = 0;
  s->lone_ready = 0;
  const uint32_t slot = s->fetched_slot, lap = s->fetched_lap, len = s->ahead_len;
  uint32_t next = slot, next_lap = lap;
  next_slot(next, next_lap, s->num_slots);
  const uint4 after = ahead_cell;
  s->ahead_len = next != slot && stamped(after, next_lap) &&
                         after.w == CUDAQ_RT_LOOPBACK_KIND_BULK && after.y >= CUDAQ_RT_HEADER_SIZE
                     ? after.y
                     : 0u;
  unsigned char *const into = s->ahead_spare ? spare_staging : shared_staging;
  uint2 *frame = reinterpret_cast<uint2 *>(into);
  if (!cudaq_rt_loopback_request_whole(len, len >= 12u ? frame[1].x : 0xFFFFFFFFu))
    mark_truncated(frame, len);
  *request = into;
  if (s->outstanding == 0) {
    *response = shared_staging + (size_t)s->batch_frames * s->slot_size;
    s->shared_batch = 1;
    s->batch_first = slot;
  } else {
    *response = s->response_frames + (size_t)slot * s->slot_size;
  }
  s->fetched_slot = next;
  s->fetched_lap = next_lap;
  s->head_slot = next;
  s->handout_pos = 0;
  s->last_slot = slot;
  s->last_lap = lap;
  s->last_response = static_cast<const unsigned char *>(*response);
  ++s->outstanding;
  // The ring is busy while the chain goes on: the next response follows at once, and its fence
  // pushes this one out (CUDAQ_RT_LOOPBACK_PUSH). The last of a chain is pushed.
  s->busy = CUDAQ_RT_LOOPBACK_CHAIN_BUSY && s->ahead_len != 0;
  start_ahead_early(s, into);
  return CUDAQ_DEV_RX_READY;
}

} // namespace

extern "C" __device__ void *cudaq_dev_enter_kernel(void *storage, void *ctx,
                                                   volatile int *shutdown_flag) {
  cudaq_rt_loopback_device_ctx *c = static_cast<cudaq_rt_loopback_device_ctx *>(ctx);
  if (!storage || !c || !shutdown_flag || c->magic != CUDAQ_RT_LOOPBACK_CTX_MAGIC ||
      c->num_slots == 0 || c->slot_size < CUDAQ_RT_LOOPBACK_MIN_SLOT_SIZE ||
      c->resume_slot >= c->num_slots || c->resume_lap == 0 ||
      (c->layout != CUDAQ_RT_LOOPBACK_LAYOUT_SLOTS &&
       (c->layout != CUDAQ_RT_LOOPBACK_LAYOUT_LANES || c->num_slots % CUDAQ_RT_LOOPBACK_LANES)))
    return nullptr;
  Session *s = static_cast<Session *>(storage);
  s->request_heads = static_cast<const volatile uint4 *>(c->request_heads);
  s->request_tails = static_cast<const volatile uint4 *>(c->request_tails);
  s->response_heads = static_cast<volatile uint4 *>(c->response_heads);
  s->response_tails = static_cast<volatile uint4 *>(c->response_tails);
  s->request_frames = c->request_frames;
  s->response_frames = c->response_frames;
  s->shutdown_flag = shutdown_flag;
  s->ctx = c;
  s->num_slots = c->num_slots;
  s->slot_size = c->slot_size;
  s->tail_cells = c->tail_cells;
  s->lanes_layout = c->layout == CUDAQ_RT_LOOPBACK_LAYOUT_LANES;
  // Where the previous kernel on this instance stopped (0 and lap 1 for the first): the host's
  // sent/received counters carry on from there, so starting at slot 0 again would serve old
  // requests still stamped with their lap, or wait forever for a lap that is not coming.
  s->head_slot = c->resume_slot;
  s->fetched_slot = c->resume_slot;
  s->fetched_lap = c->resume_lap;
  s->pending = 0;
  s->draining = 0;
  s->sink = 0;
  s->width = 1;
  s->outstanding = 0;
  s->shared_batch = 0;
  s->batch_first = 0;
  s->last_slot = 0;
  s->last_response = nullptr;
  s->busy = 0;
  s->handout_request = nullptr;
  s->handout_response = nullptr;
  s->handout_lap = 0;
  const uint32_t fit = kSharedBytes / (2u * s->slot_size);
  s->batch_frames = fit < kW ? fit : kW;
  s->shared_ok = CUDAQ_RT_LOOPBACK_SHARED_STAGING && s->batch_frames > 0 && one_thread_block();
  s->request_bulk = static_cast<const unsigned char *>(c->request_bulk);
  s->response_bulk = static_cast<unsigned char *>(c->response_bulk);
  s->bulk_min = c->bulk_min;
  s->bulk_phase = 0;
  s->bulk_pending = 0;
  s->handout_pos = 0;
  s->tail_pending = 0;
  s->tail_lens = 0;
  s->tail_ahead = 0;
  s->tail_inflight = 0;
  s->tail_phase = 0;
  s->tail_slot = 0xFFFFFFFFu;
  s->tail_copied = 0;
  s->ahead_len = 0;
  s->ahead_copy = 0;
  s->ahead_spare = 0;
  s->probe_saved = 0;
  s->lone_streak = 0;
  s->lone_ready = 0;
  // The engine's barrier is the block's: only a one-thread block's session uses it.
  s->bulk_engine = CUDAQ_RT_LOOPBACK_HAS_BULK_COPY && one_thread_block();
#if CUDAQ_RT_LOOPBACK_HAS_BULK_COPY
  if (s->bulk_engine) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(shared_address(&bulk_barrier))
                 : "memory");
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(shared_address(&tail_barrier))
                 : "memory");
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory"); // to the engine
  }
#endif
  s->has_spare = CUDAQ_RT_LOOPBACK_SPARE && CUDAQ_RT_LOOPBACK_AHEAD && s->bulk_engine &&
                 s->shared_ok && c->spare_bytes >= s->slot_size &&
                 dynamic_shared_bytes() >= c->spare_bytes;
  return s;
}

extern "C" __device__ int cudaq_dev_rx_poll(void *session, void **request, void **response) {
  Session *s = static_cast<Session *>(session);
  if (CUDAQ_RT_LOOPBACK_AHEAD && s->ahead_copy)
    return handout_ahead(s, request, response);
  if (s->pending == 0 && !fetch(s)) {
    // Every frame fetched has been handed out (pending == 0, so head_slot == fetched_slot), and
    // the dispatch loop has published each before polling again (cudaq_rt/dispatch.h): the next
    // kernel starts at the next frame to fetch. Plain stores, made visible to the next kernel
    // by this one's end. A custom kernel that still holds unpublished frames may publish them
    // after this (tx_publish does not depend on what is stored here), but must, before it ends.
    s->ctx->resume_slot = s->fetched_slot;
    s->ctx->resume_lap = s->fetched_lap;
    if (s->tail_inflight) // no copy into this block's shared memory outlives the kernel
      tail_arrived(s, true);
    return CUDAQ_DEV_RX_SHUTDOWN;
  }
  if (s->handout_request) {
    // The one request fetch_one found: its frames were worked out before the probe (working them
    // out here again, the shared window's address among them, cost about 100 cycles on the H200).
    *request = s->handout_request;
    *response = s->handout_response;
    s->last_lap = s->handout_lap;
    s->handout_request = nullptr;
  } else {
    s->last_lap = frame_lap(s, s->head_slot);
    if (s->shared_batch) {
      // Position in the batch: its frames are the slots from batch_first on, handed out in order.
      uint32_t pos = s->head_slot - s->batch_first;
      if (s->head_slot < s->batch_first)
        pos += s->num_slots;
      *request = shared_staging + (size_t)pos * s->slot_size;
      *response = shared_staging + (size_t)(s->batch_frames + pos) * s->slot_size;
    } else {
      const size_t offset = (size_t)s->head_slot * s->slot_size;
      *request = s->request_frames + offset;
      *response = s->response_frames + offset;
    }
  }
  s->last_slot = s->head_slot;
  s->last_response = static_cast<const unsigned char *>(*response);
  s->head_slot = s->head_slot + 1 == s->num_slots ? 0 : s->head_slot + 1;
  --s->pending;
  ++s->outstanding;
  const uint32_t pos = s->handout_pos++;
  int ready = CUDAQ_DEV_RX_READY;
  if (CUDAQ_RT_LOOPBACK_BULK && (s->bulk_pending >> pos & 1u)) {
    s->bulk_pending = uint16_t(s->bulk_pending & ~(1u << pos));
    ready = stage_bulk(s, s->last_slot, *request);
  } else if (CUDAQ_RT_LOOPBACK_TAIL_COPY && (s->tail_pending >> pos & 1u)) {
    s->tail_pending = uint16_t(s->tail_pending & ~(1u << pos));
    ready = stage_tail(s, s->last_slot, s->last_lap, *request,
                       (uint32_t)(s->tail_lens >> 16u * pos) & 0xFFFFu);
  }
  start_ahead_early(s, *request); // after stage_bulk's copy: one copy at a time on bulk_barrier
  return ready;
}

extern "C" __device__ void cudaq_dev_tx_publish(void *session, void *response) {
  Session *s = static_cast<Session *>(session);
  const unsigned char *at = static_cast<const unsigned char *>(response);
  uint32_t slot, lap;
  if (at == s->last_response) {
    // The frame rx_poll handed out last (always, for a kernel that publishes before it polls
    // again): no division, which for a 64-bit offset is a subroutine of ~100 instructions, and
    // its lap from rx_poll (fetch_one's found before its probe).
    slot = s->last_slot;
    lap = s->last_lap;
  } else {
    if (__isShared(response)) {
      // Response frame batch_frames + pos of the batch in shared memory: the slot pos after
      // batch_first.
      slot = (uint32_t)(at - shared_staging) / s->slot_size - s->batch_frames + s->batch_first;
      if (slot >= s->num_slots)
        slot -= s->num_slots;
    } else {
      slot = (uint32_t)((at - s->response_frames) / s->slot_size);
    }
    lap = frame_lap(s, slot);
  }
  --s->outstanding;

  if (CUDAQ_RT_LOOPBACK_BULK) {
    const uint32_t len = response_len(s, static_cast<const uint2 *>(response)[1].x);
    if (cudaq_rt_loopback_is_bulk(len, s->bulk_min)) {
      publish_bulk(s, slot, lap, response, len, s->pending == 0 && push_wanted(s));
      if (CUDAQ_RT_LOOPBACK_AHEAD == 3)
        start_ahead(s);
      return;
    }
  }
  if (CUDAQ_RT_LOOPBACK_AHEAD != 3)
    start_ahead(s); // the response is in its own frame: the request's may take the next one
  if (s->lanes_layout)
    publish_frame<CUDAQ_RT_LOOPBACK_LAYOUT_LANES>(s, slot, lap, response);
  else
    publish_frame<CUDAQ_RT_LOOPBACK_LAYOUT_SLOTS>(s, slot, lap, response);
  // The batch's last response: the kernel polls next. (Only a hint: a kernel that holds frames
  // across polls gets its responses out on the next push or later.)
  if (s->pending == 0 && push_wanted(s))
    push_out();
  if (CUDAQ_RT_LOOPBACK_AHEAD == 3)
    start_ahead(s);
}

// The lone form (cudaq_rt/dispatch.h). While a client sends one small request at a time, the
// kernel's compact loop serves it on these hooks: lone_poll probes the next slot as fetch_one does
// (its head cells, the next slot's control cell, the flag) and hands out a request that is all in
// the probe, its payload word staged in the shared request frame; lone_publish stores the response
// cells from the answer's registers and pushes them out. What they need of the session is copied
// into the lone state (Lone), which the compact loop keeps in registers. Anything else is handed
// over to rx_poll with the probe that found it (probe_saved).
// 0: the hooks are compiled but not exported, so that the link takes the unified kernel's plain
// build (a bench variant: the lone form's baseline through the same load path); the warp form's
// lone turn likewise (CUDAQ_RT_LOOPBACK_WARP_LONE_EXPORT, by default the same).
#ifndef CUDAQ_RT_LOOPBACK_LONE_EXPORT
#define CUDAQ_RT_LOOPBACK_LONE_EXPORT 1
#endif
// lone_poll's peek at a slot whose control cell is on another line than the probed slot's
// (cudaq_rt_loopback_peek_distance); 0: at the next slot, which in the lanes layout shares the
// probed control cell's line 7 times in 8, so that its load waits for that one (the bench's
// loopback_lone_peek_next, to compare).
#ifndef CUDAQ_RT_LOOPBACK_LONE_PEEK_LINE
#define CUDAQ_RT_LOOPBACK_LONE_PEEK_LINE 1
#endif
#ifndef CUDAQ_RT_LOOPBACK_WARP_LONE_EXPORT
#define CUDAQ_RT_LOOPBACK_WARP_LONE_EXPORT CUDAQ_RT_LOOPBACK_LONE_EXPORT
#endif
#if CUDAQ_RT_LOOPBACK_LONE_EXPORT
CUDAQ_RT_EXPORT_BRIDGE_HOOKS(lone);
#endif
#if CUDAQ_RT_LOOPBACK_WARP_LONE_EXPORT
CUDAQ_RT_EXPORT_BRIDGE_HOOKS(warp_lone);
#endif

namespace {
struct Lone {
  const volatile uint4 *request_heads;
  volatile uint4 *response_heads;
  const volatile int *shutdown_flag;
  unsigned char *staging; // shared memory: the request frame, and the response's at response_at
  uint32_t slot, lap;     // the next request's
  uint32_t num_slots;
  uint32_t layout; // CUDAQ_RT_LOOPBACK_LAYOUT_*
  uint32_t slot_size;
  uint32_t response_at; // the response frame (and the handed-over probe), from staging
  uint32_t small_max;   // the longest response frame published from registers
  uint32_t state;       // kLoneServing, or what lone_leave hands the session
};
static_assert(sizeof(Lone) <= CUDAQ_RT_LONE_STATE_SIZE, "the lone state must fit its room");
constexpr uint32_t kLoneServing = 0, kLoneSaved = 1, kLoneHeld = 2;

__device__ __forceinline__ Lone lone_load(const cudaq_rt_lone_state *from) {
  Lone l;
  __builtin_memcpy(&l, from, sizeof l);
  return l;
}
__device__ __forceinline__ void lone_store(cudaq_rt_lone_state *to, const Lone &l) {
  __builtin_memcpy(to, &l, sizeof l);
}

// The lone state of a session whose next request is at (slot, lap), served in `staging` (shared
// memory) with its response frame at response_at.
__device__ __forceinline__ Lone lone_of(const Session *s, uint32_t slot, uint32_t lap,
                                        unsigned char *staging, uint32_t response_at) {
  Lone l;
  l.request_heads = s->request_heads;
  l.response_heads = s->response_heads;
  l.shutdown_flag = s->shutdown_flag;
  l.staging = staging;
  l.slot = slot;
  l.lap = lap;
  l.num_slots = s->num_slots;
  l.layout = layout_of(s);
  l.slot_size = s->slot_size;
  l.response_at = response_at;
  // A response frame of at most the head cells' bytes, and below bulk_min (a bulk one goes out by
  // tx_publish).
  const uint32_t head_bytes = CUDAQ_RT_HEADER_SIZE + CUDAQ_RT_LOOPBACK_CELL_DATA;
  l.small_max = s->bulk_min != 0u && s->bulk_min <= head_bytes ? s->bulk_min - 1u : head_bytes;
  l.state = kLoneServing;
  return l;
}
} // namespace

// Only where fetch_one would probe next (nothing held, nothing pending), after it found
// CUDAQ_RT_LOOPBACK_LONE_AFTER requests alone in a row (lone_ready says what else).
extern "C" __device__ int cudaq_dev_lone_enter(void *session, cudaq_rt_lone_state *lone) {
  Session *s = static_cast<Session *>(session);
  if (!CUDAQ_RT_LOOPBACK_ADAPTIVE_PROBE || !s->lone_ready || s->pending != 0 || s->outstanding != 0)
    return 0;
  lone_store(lone, lone_of(s, s->fetched_slot, s->fetched_lap, shared_staging,
                           s->batch_frames * s->slot_size));
  return 1;
}

extern "C" __device__ int cudaq_dev_lone_poll(cudaq_rt_lone_state *lone,
                                              cudaq_rt_lone_request *request) {
  constexpr uint32_t P = kHead;
  Lone l = lone_load(lone);
  const uint32_t L = l.layout, stride = cudaq_rt_loopback_head_stride(L);
  const volatile uint4 *cells = l.request_heads + cudaq_rt_loopback_head_cell(L, l.slot, 0);
  // The peek: a slot's control cell on another line than this slot's (the next slot's in the
  // slots layout, the next line's first in the lanes layout), so that its load overlaps the
  // probe's (CUDAQ_RT_LOOPBACK_LONE_PEEK_LINE).
  const uint32_t ahead =
      CUDAQ_RT_LOOPBACK_LONE_PEEK_LINE ? cudaq_rt_loopback_peek_distance(L, l.slot) : 1u;
  uint32_t next = l.slot + ahead, next_lap = l.lap;
  if (next >= l.num_slots) {
    next -= l.num_slots;
    next_lap = cudaq_rt_loopback_next_lap(l.lap);
  }
  const volatile uint4 *after_cell = l.request_heads + cudaq_rt_loopback_head_cell(L, next, 0);
  const bool peek = next != l.slot;
  uint4 probe[P], after;
  int shutdown;
  for (;;) {
#pragma unroll
    for (uint32_t c = 0; c < P; ++c)
      probe[c] = load_cell(cells + c * stride);
    after = peek ? load_cell(after_cell) : make_uint4(0u, 0u, 0u, 0u);
    shutdown = *l.shutdown_flag;
    if (stamped(probe[0], l.lap) || shutdown)
      break;
  }
  const uint32_t len = probe[0].y < l.slot_size ? probe[0].y : l.slot_size;
  const uint32_t n = frame_cells(len);
  uint32_t unstamped = 0;
#pragma unroll
  for (uint32_t c = 1; c < P; ++c)
    unstamped |= c < n ? (probe[c].x ^ l.lap) | (probe[c].z ^ l.lap) : 0u;
  unsigned char *const staging = l.staging;
  if (shutdown | (n > P) | (unstamped != 0) | (probe[0].w == CUDAQ_RT_LOOPBACK_KIND_BULK) |
      (peek && stamped(after, next_lap)) | !stamped(probe[0], l.lap)) {
    // rx_poll's: the flag (fetch_one drains), a frame that is not all in the probe, or a second
    // request waiting (fetch widens). fetch_one starts from this probe.
    uint4 *to = reinterpret_cast<uint4 *>(staging + l.response_at);
#pragma unroll
    for (uint32_t c = 0; c < P; ++c)
      to[c] = probe[c];
    // fetch_one's peek is the next slot's control cell: the one loaded, or none (never stamped).
    to[P] = ahead == 1u ? after : make_uint4(0u, 0u, 0u, 0u);
    l.state = kLoneSaved;
    lone_store(lone, l);
    return CUDAQ_DEV_RX_HANDOVER;
  }
  // Header words the frame did not bring read as zero, and a frame shorter than its header claims
  // is marked, as mark_truncated does for rx_poll.
  const uint32_t w0 = len > 0u ? 1u : 0u, w1 = len > 8u ? 1u : 0u, w2 = len > 16u ? 1u : 0u;
  request->magic = w0 ? probe[1].y : 0u;
  request->function_id = w0 ? probe[1].w : 0u;
  request->arg_len = w1 ? probe[2].y : 0u;
  request->request_id = w1 ? probe[2].w : 0u;
  request->ptp_timestamp = w2 ? (unsigned long long)probe[3].w << 32 | probe[3].y : 0ull;
  if (!cudaq_rt_loopback_request_whole(len, w1 ? probe[2].y : 0xFFFFFFFFu))
    request->magic = CUDAQ_RT_TRUNCATED_MAGIC;
  reinterpret_cast<uint2 *>(staging)[CUDAQ_RT_HEADER_SIZE / 8u] =
      make_uint2(probe[4].y, probe[4].w);
  request->request = staging;
  request->response = staging + l.response_at;
  return CUDAQ_DEV_RX_READY;
}

extern "C" __device__ int cudaq_dev_lone_publish(cudaq_rt_lone_state *lone,
                                                 const cudaq_rt_lone_request *request,
                                                 const cudaq_rt_lone_answer *answer) {
  Lone l = lone_load(lone);
  const uint32_t len = CUDAQ_RT_HEADER_SIZE + answer->result_len;
  if (len > l.small_max) {
    l.state = kLoneHeld; // tx_publish's (lone_leave)
    lone_store(lone, l);
    return 0;
  }
  const uint32_t L = l.layout, stride = cudaq_rt_loopback_head_stride(L), lap = l.lap;
  volatile uint4 *head = l.response_heads + cudaq_rt_loopback_head_cell(L, l.slot, 0);
  const unsigned long long ptp = request->ptp_timestamp;
  store_cell(head + stride,
             make_uint4(lap, CUDAQ_RT_RESPONSE_MAGIC, lap, (uint32_t)answer->status));
  store_cell(head + 2 * stride, make_uint4(lap, answer->result_len, lap, request->request_id));
  store_cell(head + 3 * stride, make_uint4(lap, (uint32_t)ptp, lap, (uint32_t)(ptp >> 32)));
  if (answer->result_len != 0u) {
    const uint2 d = reinterpret_cast<const uint2 *>(request->response)[CUDAQ_RT_HEADER_SIZE / 8u];
    store_cell(head + 4 * stride, make_uint4(lap, d.x, lap, d.y));
  }
  store_cell(head, make_uint4(lap, len, lap, 0u));
  if (CUDAQ_RT_LOOPBACK_PUSH != 0) // a client waits for it: pushed, as tx_publish does then
    push_out();
  next_slot(l.slot, l.lap, l.num_slots);
  lone_store(lone, l);
  return 1;
}

extern "C" __device__ void *cudaq_dev_lone_leave(void *session, const cudaq_rt_lone_state *lone) {
  Session *s = static_cast<Session *>(session);
  const Lone l = lone_load(lone);
  s->fetched_slot = l.slot;
  s->fetched_lap = l.lap;
  s->head_slot = l.slot;
  s->probe_saved = l.state == kLoneSaved;
  if (l.state != kLoneHeld)
    return nullptr;
  // The request at l.slot was answered into the shared response frame: handed out, as rx_poll
  // hands out what fetch_one found, for tx_publish.
  unsigned char *response = l.staging + l.response_at;
  s->shared_batch = 1;
  s->batch_first = l.slot;
  s->last_slot = l.slot;
  s->last_lap = l.lap;
  s->last_response = response;
  next_slot(s->fetched_slot, s->fetched_lap, s->num_slots);
  s->head_slot = s->fetched_slot;
  s->busy = 0;
  ++s->outstanding;
  return response;
}

// The warp form (cudaq_rt/dispatch.h). Every lane has a Session of its own, used differently:
// fetched_slot and fetched_lap are the lane's next request (slots lane, lane + 32, ... of the
// ring, so that the host's request k is lane k % 32's; with W warps, warp w's lane serves every
// W-th group of 32 from group w: loopback_ring.h, "Warps"), last_slot and last_lap the one it
// holds. Warp w is block w's: a ring made for W warps is served only by a kernel of W blocks.
// Requests are staged in shared memory where 32 of them fit (warp_request_staging), responses in
// the per-slot frames in device memory; a lone request and its response in shared memory where
// two slots fit (warp_frames).

extern "C" __device__ void *
cudaq_dev_warp_enter_kernel(void *storage, void *ctx, volatile int *shutdown_flag, unsigned lane) {
  cudaq_rt_loopback_device_ctx *c = static_cast<cudaq_rt_loopback_device_ctx *>(ctx);
  if (lane >= CUDAQ_RT_WARP_LANES || !cudaq_dev_enter_kernel(storage, ctx, shutdown_flag))
    return nullptr;
  const uint32_t warps = c->warps, warp = blockIdx.x, at = warp * CUDAQ_RT_WARP_LANES + lane;
  const uint32_t stride = warps * CUDAQ_RT_WARP_LANES;
  if (warps == 0 || warps > CUDAQ_RT_LOOPBACK_MAX_WARPS || gridDim.x != warps ||
      c->num_slots % stride != 0 || c->warp_resume_slot[at] >= c->num_slots ||
      c->warp_resume_slot[at] % stride != at || c->warp_resume_lap[at] == 0)
    return nullptr;
  Session *s = static_cast<Session *>(storage);
  s->lane = lane;
  s->warp_stride = stride;
  const bool one_warp = CUDAQ_RT_LOOPBACK_WARP_SHARED_STAGING &&
                        blockDim.x * blockDim.y * blockDim.z == CUDAQ_RT_WARP_LANES;
  s->warp_shared = one_warp && c->slot_size <= kWarpSharedBytes / CUDAQ_RT_WARP_LANES;
  s->warp_window = one_warp && c->slot_size <= kWarpSharedBytes / 2u;
  s->fetched_slot = c->warp_resume_slot[at];
  s->fetched_lap = c->warp_resume_lap[at];
  s->warp = cudaq_rt_loopback_warp_probe{0u, 0u, 0u, 0u}; // every lane probes the first round
  s->one_feeder = c->feeders <= 1u;
  s->warp_empty = 0;
  s->warp_resting = 0;
  s->rest_since = 0;
  return s;
}

namespace {
// While the ring is idle and its client sends one request at a time, the warp form probes two
// lanes, not 32 (cudaq_rt_loopback_warp_round in loopback_ring.h has the rules). Requests go to
// the lanes in order (request k to lane k % 32), so an idle ring's next request is the lane whose
// position follows the last request served (warp_earliest). That lane and the one after it probe:
// their cells share lines in the lanes layout, so the two load what one lane would (5 lines and
// the flag's, against the 21 of all 32 lanes; 10 and the flag's where the two straddle a line).
// The second is the peek the unified form's one-slot probe does for the next slot: a burst widens
// the probe at once.
//
// Only after several rounds in a row that found one request each: a burst after an idle spell (a
// client that sends several at once) finds only two lanes in a narrow round, and the rest a round
// later, a probe's round trip lost. Measured on the H200 (bench/loopback_rtt.md, against
// loopback_warp_wide in the same call): 1 in flight 2.64 / 2.65 -> 2.48 / 2.50 us p50, 16 in
// flight 4.10 / 3.79 -> 3.58 / 3.76; narrowed after every empty round instead, 1 in flight went to
// 2.51 but 16 in flight from 3.7 to 6.0 (a burst's rest found a round late).
// 0: every lane probes every round (the bench's loopback_warp_wide, to compare).
#ifndef CUDAQ_RT_LOOPBACK_WARP_NARROW
#define CUDAQ_RT_LOOPBACK_WARP_NARROW 1
#endif
// Idle warps rest (loopback_ring.h, "Resting warps"); 0: never (the bench's
// loopback_warp_no_rest, to compare).
#ifndef CUDAQ_RT_LOOPBACK_WARP_REST
#define CUDAQ_RT_LOOPBACK_WARP_REST 1
#endif

// The lane whose next request comes first (cudaq_rt_loopback_warp_first against lane l - 1's
// position), or 32 when that is not exactly one lane. With several warps, among this warp's
// lanes: lane 0's predecessor is lane 31's slot of the warp's group before.
__device__ __forceinline__ uint32_t warp_earliest(const Session *s, unsigned mask) {
  const unsigned prev_lane = (s->lane + CUDAQ_RT_WARP_LANES - 1) % CUDAQ_RT_WARP_LANES;
  const uint32_t prev_slot = __shfl_sync(mask, s->fetched_slot, prev_lane);
  const uint32_t prev_lap = __shfl_sync(mask, s->fetched_lap, prev_lane);
  const uint32_t back = s->lane == 0 ? s->warp_stride - (CUDAQ_RT_WARP_LANES - 1u) : 1u;
  const unsigned first =
      __ballot_sync(mask, cudaq_rt_loopback_warp_first(s->fetched_slot, s->fetched_lap, prev_slot,
                                                       prev_lap, s->num_slots, back));
  return __popc(first) == 1 ? (uint32_t)(__ffs(first) - 1) : CUDAQ_RT_WARP_LANES;
}

// Where lane `lane`'s request of `slot` is staged this round, and its response built: a lone
// request (`lone`: no other lane found one) in the shared window with its response, so that the
// handler and tx_publish work in shared memory as the unified kernel's do, where a frame in device
// memory costs them an L2 round trip per load (a 16 KB echo copied 32 bytes a round trip);
// else as warp_request_staging says.
struct WarpFrames {
  unsigned char *request, *response;
};
__device__ __forceinline__ WarpFrames warp_frames(const Session *s, uint32_t lane, uint32_t slot,
                                                  bool lone) {
  const size_t offset = (size_t)slot * s->slot_size;
  if (lone && s->warp_window)
    return {warp_request_staging, warp_request_staging + s->slot_size};
  return {s->warp_shared ? warp_request_staging + (size_t)lane * s->slot_size
                         : s->request_frames + offset,
          s->response_frames + offset};
}

// The warp form's tails loaded by all 32 lanes together, where one lane's loads would take more
// round trips: a lane that found a frame longer than its probe (the cells of `tails`) would load
// its tail 8 cells per round trip (unpack), 16 of them for a 1 KB request, while the lanes with
// nothing to serve wait. Here each lane loads kWarpTailCells cells of a frame's tail in one round
// trip, the 32 lanes 128 cells (a 1 KB request's tail), one frame after another. The lanes take
// the cells in the order they lie in the ring (cudaq_rt_loopback_tail_cell_at), so that 32 lanes
// read 512 consecutive bytes. Any half not stamped yet is reloaded, as in unpack.
constexpr uint32_t kWarpTailCells = 4;
__device__ __forceinline__ void warp_stage_tails(Session *s, unsigned tails, uint32_t slot,
                                                 uint32_t lap, uint32_t cells, bool lone) {
  const unsigned mask = 0xFFFFFFFFu;
  constexpr uint32_t B = CUDAQ_RT_LOOPBACK_TAIL_BLOCK;
  for (unsigned left = tails; left != 0u; left &= left - 1u) {
    const unsigned o = __ffs(left) - 1;
    const uint32_t oslot = __shfl_sync(mask, slot, o);
    const uint32_t olap = __shfl_sync(mask, lap, o);
    const uint32_t need = __shfl_sync(mask, cells, o) - kHead;
    uint2 *words = reinterpret_cast<uint2 *>(warp_frames(s, o, oslot, lone).request) + (kHead - 1u);
    const volatile uint4 *ring =
        s->request_tails + cudaq_rt_loopback_tail_cell(oslot, 0u, s->tail_cells);
    const uint32_t span = (need + B - 1u) & ~(B - 1u);
    for (uint32_t first = 0; first < span; first += CUDAQ_RT_WARP_LANES * kWarpTailCells) {
      uint4 v[kWarpTailCells];
      uint32_t at[kWarpTailCells], t[kWarpTailCells];
#pragma unroll
      for (uint32_t k = 0; k < kWarpTailCells; ++k) {
        at[k] = first + k * CUDAQ_RT_WARP_LANES + s->lane;
        t[k] = cudaq_rt_loopback_tail_cell_at(at[k]);
        if (t[k] < need)
          v[k] = load_cell(ring + at[k]);
      }
#pragma unroll
      for (uint32_t k = 0; k < kWarpTailCells; ++k)
        if (t[k] < need) {
          while (!stamped(v[k], olap))
            v[k] = load_cell(ring + at[k]);
          words[t[k]] = make_uint2(v[k].y, v[k].w);
        }
    }
  }
  __syncwarp(mask); // every lane's words are in the frames before their lanes serve them
}

template <uint32_t L>
__device__ __forceinline__ int warp_poll(Session *s, void **request, void **response) {
  constexpr uint32_t P = kHead;
  // Every lane polls together (the warp form's contract): the votes below take the full mask, so
  // that every lane sees the same `ready` and keeps the same s->warp.
  const unsigned mask = 0xFFFFFFFFu;
  // Several warps: a resting warp probes only when woken or when its rest is over.
  const bool several = CUDAQ_RT_LOOPBACK_WARP_REST && s->warp_stride > CUDAQ_RT_WARP_LANES;
  volatile uint32_t *wake = s->ctx->warp_wake;
  if (several) {
    if (s->warp_resting &&
        !__any_sync(mask, wake[blockIdx.x] != 0u || (uint32_t)clock() - s->rest_since >=
                                                        CUDAQ_RT_LOOPBACK_WARP_REST_CYCLES))
      return CUDAQ_DEV_RX_IDLE;
    s->warp_resting = 0; // awake from this round on, until an empty one decides again
    s->rest_since = (uint32_t)clock();
  }
  const uint32_t slot = s->fetched_slot, lap = s->fetched_lap;
  const volatile uint4 *cells = s->request_heads + cudaq_rt_loopback_head_cell(L, slot, 0);
  const bool probes =
      !CUDAQ_RT_LOOPBACK_WARP_NARROW || cudaq_rt_loopback_warp_probes(&s->warp, s->lane);
  // One probe: this lane's next slot's head cells and the flag, all in flight together (the
  // lanes' loads of the flag are one transaction). A lane that does not probe reads zeroes,
  // never stamped.
  const long long issued = probe_clock();
  uint4 probe[P];
#pragma unroll
  for (uint32_t c = 0; c < P; ++c)
    probe[c] = probes ? load_cell(cells + c * cudaq_rt_loopback_head_stride(L))
                      : make_uint4(0u, 0u, 0u, 0u);
  // The flag as any lane saw it (it only goes from 0 to set): lanes can reach the poll apart
  // (votes over __activemask() here once came out split, bench/loopback_rtt.md) and load it
  // apart, and the probe state below, with its votes and shuffles, must be the same in every lane.
  const int shutdown = __any_sync(mask, *s->shutdown_flag != 0);
  // The round is busy when all 32 found one.
  const bool found = stamped(probe[0], lap);
  if (found)
    stamp_probe(s, issued);
  const unsigned ready = __ballot_sync(mask, found);
  // The frames with a tail (see below), voted on the control cell beside the round's vote.
  const unsigned tails = __ballot_sync(
      mask, found & (probe[0].y > (P - 1u) * 8u) & (s->slot_size > (P - 1u) * 8u) &
                !(CUDAQ_RT_LOOPBACK_BULK && probe[0].w == CUDAQ_RT_LOOPBACK_KIND_BULK));
  s->busy = ready == 0xFFFFFFFFu;
  // The warp form's lone turn may come next (cudaq_dev_warp_lone_enter) after a round that found
  // one request without a tail.
  if (ready != 0u)
    s->lone_ready = (ready & (ready - 1u)) == 0u && tails == 0u;
  // The next round's probe, the same in every lane (ready, the flag and s->warp are).
  // Several feeders' requests come in no order across their lanes: no lane comes next, so the
  // probe stays wide.
  if (cudaq_rt_loopback_warp_round(&s->warp, ready, shutdown) && CUDAQ_RT_LOOPBACK_WARP_NARROW &&
      s->one_feeder)
    cudaq_rt_loopback_warp_narrow(&s->warp, warp_earliest(s, mask));
  if (several) {
    // Wake the next warp where its group comes next; stay awake until a request comes. The rest
    // is decided in empty rounds alone, so that a round that serves loads nothing more.
    if (ready != 0u && s->lane == 0) {
      wake[blockIdx.x] = 0u;
      if (cudaq_rt_loopback_warp_wakes_next(ready))
        wake[(blockIdx.x + 1u) % (s->warp_stride / CUDAQ_RT_WARP_LANES)] = 1u;
    }
    s->warp_empty = (uint8_t)cudaq_rt_loopback_warp_empty(s->warp_empty, ready);
    if (s->warp_empty >= CUDAQ_RT_LOOPBACK_WARP_REST_AFTER) {
      const uint32_t slot0 = __shfl_sync(mask, slot, 0), lap0 = __shfl_sync(mask, lap, 0);
      // Not once the flag is seen: the drain's second probe (below) follows at once.
      const bool between = __all_sync(mask, slot == slot0 + s->lane && lap == lap0) && !shutdown;
      s->warp_resting = (uint8_t)cudaq_rt_loopback_warp_rests(
          s->warp_empty, between, __any_sync(mask, wake[blockIdx.x] != 0u));
    }
  }
  // Frames longer than their probe: their tails by all lanes (warp_stage_tails), where that takes
  // fewer round trips (one a frame) than the longest tail would take its own lane (one per 8
  // cells); else each lane its own, in unpack. A bulk frame is staged apart (stage_bulk). `tails`
  // is voted on the control cell alone, so that a round of frames without a tail pays one vote
  // more and no more: a frame has a tail when it is longer than the probe's words, (P - 1) * 8
  // bytes (frame_cells; slot_size is at least that).
  bool tail_staged = false;
  if (tails != 0u) {
    const uint32_t n = (tails >> s->lane) & 1u
                           ? frame_cells(probe[0].y < s->slot_size ? probe[0].y : s->slot_size)
                           : 0u;
    tail_staged =
        __any_sync(mask, n > P && (n - P + kBatch - 1u) / kBatch > (uint32_t)__popc(tails));
    if (tail_staged)
      warp_stage_tails(s, tails, slot, lap, n, (ready & (ready - 1u)) == 0u);
  }
  if (!found) {
    // A lane that did not probe has seen nothing: never SHUTDOWN (the next round probes it).
    if (!shutdown || !probes)
      return CUDAQ_DEV_RX_IDLE;
    if (!s->draining) {
      // As in fetch: this probe may predate requests sent before the flag; after the fence,
      // every probe sees them. Probe again.
      __threadfence_system();
      s->draining = 1;
      return CUDAQ_DEV_RX_IDLE;
    }
    // Nothing after the fence: every request sent to this lane before the flag was served. The
    // next kernel on this instance starts where this lane stopped.
    const uint32_t at = blockIdx.x * CUDAQ_RT_WARP_LANES + s->lane;
    s->ctx->warp_resume_slot[at] = slot;
    s->ctx->warp_resume_lap[at] = lap;
    return CUDAQ_DEV_RX_SHUTDOWN;
  }
  const WarpFrames f = warp_frames(s, s->lane, slot, (ready & (ready - 1u)) == 0u);
  unsigned char *frame = f.request;
  unpack<P>(s, L, slot, reinterpret_cast<uint2 *>(frame), lap, probe, 0, tail_staged);
  *request = frame;
  *response = f.response;
  s->last_slot = slot;
  s->last_lap = lap;
  uint32_t next = slot + s->warp_stride;
  if (next >= s->num_slots) {
    next -= s->num_slots;
    s->fetched_lap = cudaq_rt_loopback_next_lap(lap);
  }
  s->fetched_slot = next;
  if (CUDAQ_RT_LOOPBACK_BULK && s->bulk_pending) {
    s->bulk_pending = 0;
    return stage_bulk(s, slot, frame);
  }
  return CUDAQ_DEV_RX_READY;
}
} // namespace

extern "C" __device__ int cudaq_dev_warp_rx_poll(void *session, void **request, void **response) {
  Session *s = static_cast<Session *>(session);
  return s->lanes_layout ? warp_poll<CUDAQ_RT_LOOPBACK_LAYOUT_LANES>(s, request, response)
                         : warp_poll<CUDAQ_RT_LOOPBACK_LAYOUT_SLOTS>(s, request, response);
}

extern "C" __device__ void cudaq_dev_warp_tx_publish(void *session, void *response) {
  Session *s = static_cast<Session *>(session);
  if (CUDAQ_RT_LOOPBACK_BULK) {
    const uint32_t len = response_len(s, static_cast<const uint2 *>(response)[1].x);
    if (cudaq_rt_loopback_is_bulk(len, s->bulk_min))
      return publish_bulk(s, s->last_slot, s->last_lap, response, len, push_wanted(s));
  }
  if (s->lanes_layout)
    publish_frame<CUDAQ_RT_LOOPBACK_LAYOUT_LANES>(s, s->last_slot, s->last_lap, response);
  else
    publish_frame<CUDAQ_RT_LOOPBACK_LAYOUT_SLOTS>(s, s->last_slot, s->last_lap, response);
  if (push_wanted(s))
    push_out();
}

// The warp form's lone turn (cudaq_rt/dispatch.h): lane 0 serves on the lone hooks above while the
// lanes wait, where one warp, fed by one host thread, probes narrow (its client sends one request
// at a time, request k to lane k % 32) and the last request it found had no tail. The lone loop
// follows the ring slot by slot, whatever lane a slot is, in the window of warp_request_staging
// (warp_frames' lone request and its response); leaving, every lane takes its next slot after the
// last one served. Anything lone_poll hands over is probed again by the lanes, all of them (a
// burst, a larger frame, the flag): the warp form has no saved probe.
// In both layouts. An 8-byte echo at 1 in flight on H100s, against the warp's narrow round:
// slots layout 2.45 to 2.52 us against 3.01 to 3.12; lanes layout (the warp form's default) 2.40
// to 2.56 against 2.93 to 3.09, since lone_poll's peek goes to the next line there (with the peek
// at the next slot, whose control cell shares the probed one's line, the turn took 3.11 to 3.20;
// bench/loopback_rtt.md, "The warp form's lone turn" and "The lone form's peek").
// Bench variants: the turn in the slots layout only (!s->lanes_layout), and a trap where it is
// taken.
#ifndef CUDAQ_RT_LOOPBACK_WARP_LONE_WHEN
#define CUDAQ_RT_LOOPBACK_WARP_LONE_WHEN 1
#endif
#ifndef CUDAQ_RT_LOOPBACK_WARP_LONE_TRAP
#define CUDAQ_RT_LOOPBACK_WARP_LONE_TRAP 0
#endif
extern "C" __device__ int cudaq_dev_warp_lone_enter(void *session, cudaq_rt_lone_state *lone) {
  Session *s = static_cast<Session *>(session);
  const unsigned mask = 0xFFFFFFFFu;
  // The same in every lane: the probe state and lone_ready change only with what the lanes vote,
  // and the rest is the instance's. A narrow probe also means the flag was not seen (it widens).
  if (!CUDAQ_RT_LOOPBACK_WARP_NARROW || !s->warp.narrow || !s->lone_ready || !s->one_feeder ||
      s->warp_stride != CUDAQ_RT_WARP_LANES || !s->warp_window ||
      !(CUDAQ_RT_LOOPBACK_WARP_LONE_WHEN))
    return 0;
#if CUDAQ_RT_LOOPBACK_WARP_LONE_TRAP
  __trap(); // the bench's proof that the turn is taken
#endif
  const uint32_t slot = __shfl_sync(mask, s->fetched_slot, s->warp.next);
  const uint32_t lap = __shfl_sync(mask, s->fetched_lap, s->warp.next);
  if (s->lane == 0)
    lone_store(lone, lone_of(s, slot, lap, warp_request_staging, s->slot_size));
  __syncwarp(mask); // the state before lane 0 serves on it
  return 1;
}

extern "C" __device__ void *cudaq_dev_warp_lone_leave(void *session,
                                                      const cudaq_rt_lone_state *lone) {
  Session *s = static_cast<Session *>(session);
  const Lone l = lone_load(lone);
  const bool held = l.state == kLoneHeld;
  // The first request the lanes look for: after the held one, else the one lone_poll was at.
  uint32_t next = l.slot, next_lap = l.lap;
  if (held)
    next_slot(next, next_lap, l.num_slots);
  cudaq_rt_loopback_lane_from(next, next_lap, s->lane, s->num_slots, &s->fetched_slot,
                              &s->fetched_lap);
  // What lone_poll handed over may be a burst: every lane probes then. Else the lane of `next`.
  cudaq_rt_loopback_warp_narrow(&s->warp, l.state == kLoneSaved ? CUDAQ_RT_WARP_LANES
                                                                : next % CUDAQ_RT_WARP_LANES);
  s->busy = 0;
  if (!held || s->lane != l.slot % CUDAQ_RT_WARP_LANES)
    return nullptr;
  // The request at l.slot was answered into the window's response frame: this lane's to publish.
  s->last_slot = l.slot;
  s->last_lap = l.lap;
  return l.staging + l.response_at;
}
