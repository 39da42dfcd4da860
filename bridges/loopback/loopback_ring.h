/* The loopback bridge's ring: frames between host threads of this process and the dispatch kernel,
 * through mapped pinned host memory. Shared by the device hooks (loopback_device.cu) and the host
 * operations (loopback.cpp, loopback_host.h); everything marked CUDAQ_RT_LOOPBACK_HD here is plain
 * C on the host too, so that the unit test (tests/unit/bridges/test_loopback_ring.cpp) checks the
 * layout and the stamp rules on the CPU.
 *
 * What it costs
 * -------------
 * Every GPU load from mapped host memory is a PCIe round trip (about a microsecond); GPU stores are
 * posted and cost the GPU almost nothing. Measured on an H200 (bench/loopback_rtt.md): reading a request field
 * by field costs 6.9 us per round trip; one 16-byte read and one 16-byte write per direction is the
 * 1.8 us floor (2.6-2.8 us on the H200 that bench/rtt/loopback_rtt.cpp ran on); payload +
 * __threadfence_system() + flag word costs 2.35 us. Loads that share a 128-byte line do not
 * overlap (see the layout below). And a 16-byte GPU
 * store into host memory can be observed by the host half-written (its two 8-byte halves land
 * separately), so completion cannot be signalled by "the word changed". And GPU stores to mapped
 * memory reach the host about 0.8 us late unless the storing thread fences after them
 * (fence.sc.sys): bench/probe/ring_lines.cu measured an echo over 5 cells each way at 2.76 to
 * 2.80 us p50 without and 1.96 to 1.98 us with, against floor.cu's 1.59 to 1.80 in the same calls
 * (whose kernel fences too).
 *
 * The protocol
 * ------------
 * The ring has N slots. Request k (k = 0, 1, ... counted by the host in send order) goes to slot
 * k % N and carries the stamp lap(k) = (k / N) % (2^32 - 1) + 1: laps run 1, 2, ..., 0xFFFFFFFF,
 * then 1 again, never 0, so that zeroed memory (a cell never written) never looks stamped, and a
 * slot's previous lap never matches its next one. What is left is an ABA: a cell that no frame
 * touched for exactly 2^32 - 1 laps (a payload cell past the end of every frame sent to its slot
 * in between) carries the stamp of the lap that comes round again; if the GPU loaded it in the
 * moment before the host's new store to it landed, it would take the old bytes. Header and control
 * cells are written every lap, so only payload cells of a slot whose frames shrank and then, 2^32
 * - 1 laps later to the lap, grew again are exposed.
 *
 * A frame travels as 16-byte cells, each holding two self-validating 8-byte halves
 * { u32 stamp, u32 data }. Cell 0 is control ({ stamp, frame_len, stamp, 0 }); cells 1.. carry the
 * frame's bytes, eight per cell. An aligned 8-byte access is single-copy atomic on both sides of
 * PCIe, so a half whose stamp equals the expected lap holds this lap's data, whatever order the
 * halves arrive in: torn 16-byte stores and reordered loads are detected per half, with no fence
 * and no separate flag word. The price is twice the bytes on the bus, which is free at these sizes
 * (the cost is latency, not bandwidth).
 *
 *   request, host -> GPU: the host writes cells 1.. then cell 0 (8-byte stores). The GPU polls the
 *     slot by loading cell 0 *and* the header cells in one batch, for the next few slots at once
 *     (independent loads on distinct lines, all in flight together: one round trip). Slots whose halves all carry the
 *     lap are ready; the rest of their payload (if it did not fit in the probe) is loaded in
 *     batches of 8 cells, and any half that is not stamped yet is reloaded. The frames are unpacked
 *     into per-slot staging frames in device memory, so handlers never touch PCIe.
 *   response, GPU -> host: tx_publish packs the staging response into cells and stores them to the
 *     slot's response cells (posted stores; a fence after the batch's last one, while the ring is
 *     not busy, pushes them out: CUDAQ_RT_LOOPBACK_PUSH in loopback_device.cu). The host polls
 *     cell 0 of the oldest outstanding slot, then waits until every half of the frame carries the
 *     lap.
 *   credits: a slot is the host's again once it has taken the slot's response, so the response
 *     *is* the credit tx_publish returns; the host keeps at most N requests in flight.
 *   short frames: the control cell's frame_len is the bytes the host sent. A frame shorter than
 *     24 + its header's arg_len (send() refuses to write one; a raw writer could) is staged with
 *     CUDAQ_RT_TRUNCATED_MAGIC in place of its magic (cudaq_rt/wire.h), so the dispatch kernel
 *     answers it CUDAQ_RT_STATUS_TRUNCATED instead of running a handler on the staging frame's
 *     stale bytes.
 *   shutdown: the dispatch params' mapped shutdown flag is loaded in the same batch as every poll
 *     (no extra round trip). Loads of one batch complete in any order, so the ring loads of the
 *     probe that first sees the flag set may predate requests the host sent before setting it:
 *     the serving thread then fences and probes again (once per kernel), and from there on what a
 *     probe finds is served, flag or not; only a probe after the fence that finds nothing makes
 *     rx_poll answer SHUTDOWN. So every request sent (send() returned) before the host set the
 *     flag gets its response; a request sent after may not get one from this kernel (it stays in
 *     the ring, and a kernel relaunched on the instance serves it first).
 *   relaunch: at SHUTDOWN the serving thread has handed out every frame it fetched, and the
 *     dispatch loop publishes each before it polls again (cudaq_rt/dispatch.h), so the ring
 *     position (next slot, its lap) is exact. rx_poll stores it in the device ctx, and the next
 *     kernel on this bridge instance starts from it, where the host's sent/received counters are.
 *   one serving thread: the session (slot, lap, pending frames) lives in that thread's storage; a
 *     bridge instance serves one dispatch kernel, one thread, at a time.
 *
 * So a request costs the GPU one read round trip (plus one per 8 further cells of a large payload,
 * in flight together) and posted writes; with several requests queued, one probe picks up to
 * CUDAQ_RT_LOOPBACK_PROBE_SLOTS of them at once.
 *
 * Bulk frames
 * -----------
 * Cells cost a large frame dearly: one thread loads 8 cells (64 frame bytes) per round trip, so a
 * 16 KB request took about 400 us to come in and 200 us to go out (bench/payload_sizes.md: a 16 KB
 * echo as cells takes at least 546 us). A frame of at least bulk_min bytes (the bridge option
 * bulk=BYTES; 0: never) therefore travels as plain bytes in its slot's bulk area (slot_size bytes
 * per slot, after the ring's tails), and its control cell says so: { stamp, frame_len, stamp,
 * CUDAQ_RT_LOOPBACK_KIND_BULK }. The head cells are not written.
 *   request: the host copies the frame into the bulk area, fences its stores, then writes the
 *     control cell. The GPU, having seen the control cell stamped, copies the bulk area into the
 *     staging frame: by the Hopper bulk copy engine (cp.async.bulk into shared memory, one
 *     instruction for the whole frame) where the GPU has one and the frame is staged in shared
 *     memory, else by loads on distinct lines. One dependent round trip after the probe, and the
 *     bytes at the link's rate instead of 64 per round trip.
 *   response: tx_publish copies the staged response into the slot's response bulk area (a bulk
 *     store from shared memory, or 16-byte stores), waits for those writes, fences, and then
 *     stores the control cell. The host, having seen it, copies the bytes out.
 * The warp form has no engine of its own (the mbarrier is the block's), and one lane's loads move
 * a bulk frame slower than cells, so a ring made for it defaults to bulk=0 (lay_out_for).
 * The order (bytes, then control) is what makes the plain bytes safe, where cells needed stamps:
 * x86 stores become visible in program order, a GPU load issued after the control cell's came
 * back sees them, and the GPU's fence.sc.sys orders its bulk writes before its control store.
 *
 * Tails by the engine
 * -------------------
 * A bulk frame costs a second round trip after the probe: the bytes are fetched only once the
 * control cell has said they are there, and that fetch alone (the bulk copy engine's, about 2,600
 * cycles on the H200) keeps a 1 KB echo above 4.7 us with nothing else around it
 * (bench/probe/move_modes.cu). Cells carry their own stamps, so they can be fetched before anyone
 * knows they are there. Where the serving thread has the engine (sm_90 and later, one thread in
 * its block), a frame of cells that does not fit the head cells has its tail (up to
 * CUDAQ_RT_LOOPBACK_ENGINE_TAIL_CELLS cells, whole blocks of 64 as they lie in the ring) brought
 * in by one engine copy into shared memory, checked and unpacked there; and once a request came
 * that way, the idle probe copies the next slot's tail of that size along with every probe, so
 * that the probe which finds the next request usually has its tail already (a copy taken before
 * the host's stores landed shows unstamped halves and is made again, now certainly after them).
 * The host therefore sends small frames as cells to the unified kernel on such a GPU, and larger
 * ones in bulk (bulk=CUDAQ_RT_LOOPBACK_ENGINE_BULK_MIN, response_bulk=
 * CUDAQ_RT_LOOPBACK_ENGINE_RESPONSE_BULK_MIN unless configured: lay_out_for); a frame of cells
 * longer than CUDAQ_RT_LOOPBACK_ENGINE_CELLS_MAX (bulk= set higher) has its tail loaded as before,
 * 8 cells a round trip.
 *
 * The chain
 * ---------
 * Bulk requests queued back to back (a client with several in flight) were served one after
 * another: probe, the engine's copy in, the handler, the copy out, and only then the next probe.
 * The one-slot probe already loads the next slot's control cell (the peek). Where it shows a bulk
 * request there, and the serving thread holds no frame, tx_publish starts that request's bytes
 * into the shared staging frame the next probe would have used while the response goes out (the
 * request's frame is free once the handler has returned), and the control cell of the slot after
 * it comes in the same copy; rx_poll then hands the request out without a probe, and the control
 * cell that came with it says whether the chain goes on. The protocol is unchanged: the bytes are
 * copied only after their control cell was seen stamped, as in "Bulk frames" above. Only where
 * the serving thread has the engine and shared staging (the unified kernel on sm_90 and later).
 *   the spare frame: a 16 KB request fills the shared staging's request frame, so the chain above
 *     can bring the next request in only once the handler has returned, and each request then
 *     waits for its own copy (about 2.5 us at 16 KB) after the handler of the one before. Where the
 *     instance has spare_frame=1, the launcher gives the dispatch kernel slot_size bytes of dynamic
 *     shared memory (cudaq_rt_bridge_ops::dispatch_shared_bytes) as a second request frame:
 *     chained requests alternate between the two, and the next one's copy starts as soon as a
 *     request is handed out (rx_poll), while its handler runs. A kernel that polls again before it
 *     publishes gets the chained request with its response frame in device memory (the shared one
 *     is the held request's). */
#ifndef CUDAQ_RT_LOOPBACK_RING_H
#define CUDAQ_RT_LOOPBACK_RING_H

#include "cudaq_rt/wire.h"

#include <stdint.h>

#define CUDAQ_RT_LOOPBACK_CTX_MAGIC 0x4c4f4f50u /* 'LOOP' */
#define CUDAQ_RT_LOOPBACK_CELL_DATA 8u          /* frame bytes per 16-byte cell */
#define CUDAQ_RT_LOOPBACK_CELL_SIZE 16u
/* Slots probed per poll (a build-time knob so that bench/rtt/loopback_rtt.cpp can compare settings);
 * each probe loads the HEAD_CELLS cells of every probed slot. */
#ifndef CUDAQ_RT_LOOPBACK_PROBE_SLOTS
#define CUDAQ_RT_LOOPBACK_PROBE_SLOTS 4u
#endif
/* Probe one slot while the ring is idle, more while requests keep coming (1 = on). */
#ifndef CUDAQ_RT_LOOPBACK_ADAPTIVE_PROBE
#define CUDAQ_RT_LOOPBACK_ADAPTIVE_PROBE 1
#endif
/* The one-slot probe also loads the next slot's control cell, and the probe widens only when that
 * slot is ready too (1), or it widens after every request it finds (0). */
#ifndef CUDAQ_RT_LOOPBACK_PEEK
#define CUDAQ_RT_LOOPBACK_PEEK 1
#endif
/* After unpacking, load the first bytes of each staged request once (1 = on). */
#ifndef CUDAQ_RT_LOOPBACK_WARM_L1
#define CUDAQ_RT_LOOPBACK_WARM_L1 1
#endif
#define CUDAQ_RT_LOOPBACK_WARM_BYTES 1024u
/* The request ring is cached on the host like the response ring (0), or write-combined (1: the
 * host only writes it; send() then ends with an sfence). Measured on the H200: no difference. */
#ifndef CUDAQ_RT_LOOPBACK_REQUEST_WC
#define CUDAQ_RT_LOOPBACK_REQUEST_WC 0
#endif

/* The control cell's fourth word: how the frame's bytes travel (see "Bulk frames" above). Zeroed
 * memory and every frame before bulk frames existed read as cells. */
#define CUDAQ_RT_LOOPBACK_KIND_CELLS 0u
#define CUDAQ_RT_LOOPBACK_KIND_BULK 1u
/* Frames of at least this many bytes travel in bulk unless the bridge's bulk= option says
 * otherwise: every frame that does not fit the head cells (24 header bytes + 8 payload bytes). */
/* 0 builds the ring without bulk frames, host and device (a bench variant: what the bulk path's
 * branches cost small frames). */
#ifndef CUDAQ_RT_LOOPBACK_BULK
#define CUDAQ_RT_LOOPBACK_BULK 1
#endif
#define CUDAQ_RT_LOOPBACK_DEFAULT_BULK_MIN (CUDAQ_RT_LOOPBACK_BULK ? 33u : 0u)
/* response_bulk= not given: responses go in bulk from bulk= bytes on, as requests do. */
#define CUDAQ_RT_LOOPBACK_RESPONSE_BULK_AS_REQUESTS 0xFFFFFFFFu
/* Tails by the engine (above): the tail cells one copy brings in (two blocks of 64: 2 KB of
 * shared memory), so the frames whose tail it can bring (4 head cells and the tail, 8 bytes a
 * cell: 1056 bytes, a 1 KB payload); and the thresholds the unified kernel gets where the engine
 * is there, chosen from measurements (bench/payload_sizes.md, H200, 1 in flight, two calls, with
 * the tail unpacked and packed 8 cells at a time): requests of up to a 512-byte payload with its
 * header (536 bytes) as cells, answers of up to a 256-byte one (280 bytes). Against bulk both ways
 * (bulk=281 and response_bulk=129 before): 256 B 4.30 -> 4.07 us and 4.41 -> 4.00, 512 B 5.30 ->
 * 4.93 and 5.36 -> 5.03; a 1 KB payload is even either way (5.15 as cells, 5.08 to 5.27 in
 * bulk), and its answer as cells loses (7.36). */
#define CUDAQ_RT_LOOPBACK_ENGINE_TAIL_CELLS 128u
#define CUDAQ_RT_LOOPBACK_ENGINE_CELLS_MAX                                                         \
  ((CUDAQ_RT_LOOPBACK_HEAD_CELLS - 1u + CUDAQ_RT_LOOPBACK_ENGINE_TAIL_CELLS) *                     \
   CUDAQ_RT_LOOPBACK_CELL_DATA)
#define CUDAQ_RT_LOOPBACK_ENGINE_BULK_MIN (CUDAQ_RT_LOOPBACK_BULK ? 537u : 0u)
#define CUDAQ_RT_LOOPBACK_ENGINE_RESPONSE_BULK_MIN (CUDAQ_RT_LOOPBACK_BULK ? 281u : 0u)

#define CUDAQ_RT_LOOPBACK_DEFAULT_SLOTS 64u
#define CUDAQ_RT_LOOPBACK_DEFAULT_SLOT_SIZE 1024u
#define CUDAQ_RT_LOOPBACK_MAX_SLOTS 65536u
#define CUDAQ_RT_LOOPBACK_MIN_SLOT_SIZE 32u
#define CUDAQ_RT_LOOPBACK_MAX_SLOT_SIZE (1u << 20)

/* Ring layout. Measured on the H200 (bench/rtt/loopback_rtt.cpp, bench/loopback_rtt.md): volatile
 * loads from one GPU thread to mapped host memory that fall in the same 128-byte line do not
 * overlap; each waits for the one before, a PCIe round trip apiece. Loads to distinct lines do
 * overlap (33 of them cost about half a microsecond more than one). With a slot's cells side by
 * side, a probe of 5 cells took 5 round trips and an 8-byte echo 8.8 us end to end (median);
 * with every cell that one batch of loads reads on a line of its own, 4.1 us:
 *   heads: per slot CUDAQ_RT_LOOPBACK_HEAD_CELLS lines, frame cell c (c = 0: control, 1..4: the
 *          24-byte header and 8 payload bytes) in the first 16 bytes of line c;
 *   tails: per slot tail_cells cells (a multiple of 64) for frame cells HEAD_CELLS.., in blocks
 *          of 8 lines x 8 cells, so that the 8 cells of one unpack batch are on 8 lines.
 * Each ring (requests, responses) is its heads, then its tails. */
#define CUDAQ_RT_LOOPBACK_HEAD_CELLS 5u
#define CUDAQ_RT_LOOPBACK_LINE_CELLS 8u /* 16-byte cells per 128-byte line */
#define CUDAQ_RT_LOOPBACK_TAIL_BLOCK 64u

#if defined(__CUDACC__)
#define CUDAQ_RT_LOOPBACK_HD __host__ __device__
#else
#define CUDAQ_RT_LOOPBACK_HD
#endif

static inline CUDAQ_RT_LOOPBACK_HD uint32_t cudaq_rt_loopback_tail_cells(uint32_t slot_size) {
  const uint32_t data_cells =
      (slot_size + CUDAQ_RT_LOOPBACK_CELL_DATA - 1u) / CUDAQ_RT_LOOPBACK_CELL_DATA;
  const uint32_t tail = data_cells > CUDAQ_RT_LOOPBACK_HEAD_CELLS - 1u
                            ? data_cells - (CUDAQ_RT_LOOPBACK_HEAD_CELLS - 1u)
                            : 0u;
  return (tail + CUDAQ_RT_LOOPBACK_TAIL_BLOCK - 1u) & ~(CUDAQ_RT_LOOPBACK_TAIL_BLOCK - 1u);
}

/* Two layouts of the heads, chosen per bridge instance (layout=slots|lanes):
 *   slots: as above, every head cell on a line of its own: one serving thread probes several
 *          slots' head cells in one batch, all loads on distinct lines (the unified dispatcher);
 *   lanes: the ring's slots in groups of 32 (the ring must have a multiple of 32 slots), frame
 *          cell c of the group's 32 slots side by side, slot 32g + l at cell (5g + c) * 32 + l.
 *          When the 32 lanes of a warp load cell c of their own slots (the warp dispatcher: lane
 *          l serves slots l, l + 32, ...), the loads fall on 4 lines and coalesce into 4
 *          requests instead of 32; and consecutive frames share lines on the host (4 cells
 *          to a 64-byte CPU line), so that taking 4 responses in a row costs the CPU 5 cache
 *          misses instead of 20. A single
 *          thread probing consecutive slots would load one line several times, which do not
 *          overlap: that is what the slots layout is for.
 * Tails are laid out per slot in both. */
#define CUDAQ_RT_LOOPBACK_LAYOUT_SLOTS 0u
#define CUDAQ_RT_LOOPBACK_LAYOUT_LANES 1u
#define CUDAQ_RT_LOOPBACK_LANES 32u /* slots per group in the lanes layout */

/* Feeders (feeders=N, the loopback bridge): N host threads feed one ring side by side, for a
 * warp-form kernel, whose lane l serves slots l, l + 32, ... with a slot and lap of its own. Feeder
 * f takes lanes f * 32 / N .. (f + 1) * 32 / N - 1 of every group of 32 slots, and sends and
 * receives its frames in order over those slots alone: its k-th frame goes to its share's slot
 * k mod (num_slots / N), with the lap k / (num_slots / N) + 1 (wrapping as laps do), which is the
 * slot and lap the lane serving it expects next. No lane serves two feeders, so the feeders share
 * nothing but the shutdown flag. N = 1 (the default) is one thread over every slot in order; the
 * unified kernel, whose one thread serves the slots in that order, takes only that.
 *
 * Warps (warps=W, set from the launch: the warp dispatcher launched with W blocks, each serving
 * with one warp): warp w's lane l serves slots 32 * w + l, 32 * (w + W) + l, ..., that is lane l
 * of every W-th group of 32 slots, starting with group w, each with a slot and lap of its own as
 * for one warp, stepping 32 * W slots at a time (the ring needs a multiple of 32 * W slots). A
 * warp's round (its probe's trip over the link, then the serving) no longer bounds the rate: the
 * W warps' rounds overlap. Nothing changes for the host: its frames go to the slots in order, and
 * feeders split every group of 32 slots as with one warp. W = 1 (the default) is one warp. */
#define CUDAQ_RT_LOOPBACK_MAX_WARPS 8u

/* Resting warps (W > 1). An idle warp's probes cost the warp that serves: on an H100, a client that
 * waits for each answer took 6.3 us a round trip with 4 warps and 12.2 with 8, against 2.9 with
 * one, and 2.9 at 4 and 8 warps where the idle warps slept 20 us between probes
 * (bench/payload_sizes.md, "Several warps"). So a warp rests when its last WARP_REST_AFTER rounds
 * found nothing and its lanes are between groups (every lane's next slot is in the same group of
 * 32: with the host's frames in order, its next request comes after every other warp's group).
 * A resting warp loads nothing from the ring (nor the shutdown flag) until the warp before it in
 * the ring's order wakes it, or WARP_REST_CYCLES SM cycles after its last probe. A warp wakes the
 * next one when a round finds a request in one of its lanes from WARP_WAKE_FROM on (the next group
 * is the next warp's); a woken warp stays awake until it finds a request. The wake flags lie in
 * the device ctx (warp_wake; create sets warp 0's, whose group holds request 0), so that with one
 * feeder the warp that the next request goes to is awake: mid-group, or woken (also across a
 * relaunch: the flags stay in the ctx). A request that reaches a resting warp unannounced (several
 * feeders' frames out of order, or a wake overtaken) waits at most WARP_REST_CYCLES; the flag's
 * shutdown, as long. One warp never rests. */
#define CUDAQ_RT_LOOPBACK_WARP_REST_AFTER 16u
#define CUDAQ_RT_LOOPBACK_WARP_WAKE_FROM 24u
#define CUDAQ_RT_LOOPBACK_WARP_REST_CYCLES 40000u /* about 20 us at 2 GHz */

/* A warp's empty rounds in a row after a round that found the lanes of `ready` (counting up to
 * WARP_REST_AFTER). */
static inline CUDAQ_RT_LOOPBACK_HD uint32_t cudaq_rt_loopback_warp_empty(uint32_t empty,
                                                                         uint32_t ready) {
  return ready != 0u ? 0u : empty < CUDAQ_RT_LOOPBACK_WARP_REST_AFTER ? empty + 1u : empty;
}

/* Whether a warp rests from its next poll: `empty` rounds found nothing, its lanes are `between`
 * groups, and its wake flag is clear (`woken` 0). */
static inline CUDAQ_RT_LOOPBACK_HD int cudaq_rt_loopback_warp_rests(uint32_t empty, int between,
                                                                    int woken) {
  return (empty >= CUDAQ_RT_LOOPBACK_WARP_REST_AFTER) & (between != 0) & (woken == 0);
}

/* Whether a round that found the lanes of `ready` wakes the next warp. */
static inline CUDAQ_RT_LOOPBACK_HD int cudaq_rt_loopback_warp_wakes_next(uint32_t ready) {
  return (ready >> CUDAQ_RT_LOOPBACK_WARP_WAKE_FROM) != 0u;
}

/* Cell index, from the ring's heads, of frame cell c < HEAD_CELLS of `slot`. */
static inline CUDAQ_RT_LOOPBACK_HD uint64_t cudaq_rt_loopback_head_cell(uint32_t layout,
                                                                        uint32_t slot, uint32_t c) {
  if (layout == CUDAQ_RT_LOOPBACK_LAYOUT_LANES)
    return ((uint64_t)(slot / CUDAQ_RT_LOOPBACK_LANES) * CUDAQ_RT_LOOPBACK_HEAD_CELLS + c) *
               CUDAQ_RT_LOOPBACK_LANES +
           slot % CUDAQ_RT_LOOPBACK_LANES;
  return ((uint64_t)slot * CUDAQ_RT_LOOPBACK_HEAD_CELLS + c) * CUDAQ_RT_LOOPBACK_LINE_CELLS;
}

/* The slot whose control cell the lone form's probe of `slot` loads beside its own (the peek,
 * loopback_device.cu's lone_poll: a request waiting there ends the compact loop), as a distance
 * from `slot`. Two loads from one thread to one line do not overlap (above): in the lanes layout a
 * slot's control cell shares its line with the next slots' up to a multiple of LINE_CELLS, so the
 * peek goes to the first slot of the next line; in the slots layout, to the next slot. */
static inline CUDAQ_RT_LOOPBACK_HD uint32_t cudaq_rt_loopback_peek_distance(uint32_t layout,
                                                                            uint32_t slot) {
  return layout == CUDAQ_RT_LOOPBACK_LAYOUT_LANES
             ? CUDAQ_RT_LOOPBACK_LINE_CELLS - slot % CUDAQ_RT_LOOPBACK_LINE_CELLS
             : 1u;
}

/* Cells from frame cell c of a slot to its cell c + 1 (c + 1 < HEAD_CELLS). */
static inline CUDAQ_RT_LOOPBACK_HD uint32_t cudaq_rt_loopback_head_stride(uint32_t layout) {
  return layout == CUDAQ_RT_LOOPBACK_LAYOUT_LANES ? CUDAQ_RT_LOOPBACK_LANES
                                                  : CUDAQ_RT_LOOPBACK_LINE_CELLS;
}

/* Cell index, from the ring's tails, of frame cell HEAD_CELLS + t of `slot`. */
static inline CUDAQ_RT_LOOPBACK_HD uint64_t cudaq_rt_loopback_tail_cell(uint32_t slot, uint32_t t,
                                                                        uint32_t tail_cells) {
  return (uint64_t)slot * tail_cells + (t & ~(CUDAQ_RT_LOOPBACK_TAIL_BLOCK - 1u)) +
         (t % CUDAQ_RT_LOOPBACK_LINE_CELLS) * CUDAQ_RT_LOOPBACK_LINE_CELLS +
         (t % CUDAQ_RT_LOOPBACK_TAIL_BLOCK) / CUDAQ_RT_LOOPBACK_LINE_CELLS;
}

/* The tail cell t (frame cell HEAD_CELLS + t) that lies at position p of its slot's tails:
 * cudaq_rt_loopback_tail_cell(slot, t, n) == slot * n + p. Each 64-cell block is 8 lines of 8
 * cells, cell t on line t % 8, so reading the positions in order (the warp form's lanes, one cell
 * each) reads whole lines. The mapping is its own inverse. */
static inline CUDAQ_RT_LOOPBACK_HD uint32_t cudaq_rt_loopback_tail_cell_at(uint32_t p) {
  return (p & ~(CUDAQ_RT_LOOPBACK_TAIL_BLOCK - 1u)) +
         (p % CUDAQ_RT_LOOPBACK_LINE_CELLS) * CUDAQ_RT_LOOPBACK_LINE_CELLS +
         (p % CUDAQ_RT_LOOPBACK_TAIL_BLOCK) / CUDAQ_RT_LOOPBACK_LINE_CELLS;
}

/* Byte offset, from the ring's bulk area, of `slot`'s plain frame bytes (slot_size is a multiple
 * of 16, so every slot's area is 16-byte aligned, as the bulk copy engine needs). */
static inline CUDAQ_RT_LOOPBACK_HD uint64_t cudaq_rt_loopback_bulk_offset(uint32_t slot,
                                                                          uint32_t slot_size) {
  return (uint64_t)slot * slot_size;
}

/* The frame of frame_len bytes travels in bulk (bulk_min 0: never). */
static inline CUDAQ_RT_LOOPBACK_HD int cudaq_rt_loopback_is_bulk(uint32_t frame_len,
                                                                 uint32_t bulk_min) {
  return (bulk_min != 0u) & (frame_len >= bulk_min);
}

/* Bytes of one ring's heads (enough for either layout: the lanes layout needs an eighth). */
#define CUDAQ_RT_LOOPBACK_HEADS_BYTES(n)                                                           \
  ((size_t)(n)*CUDAQ_RT_LOOPBACK_HEAD_CELLS * CUDAQ_RT_LOOPBACK_LINE_CELLS *                       \
   CUDAQ_RT_LOOPBACK_CELL_SIZE)

/* Laps: 1..0xFFFFFFFF, then 1 again; 0 is never a lap (zeroed memory). */
#define CUDAQ_RT_LOOPBACK_LAP_PERIOD 0xFFFFFFFFu /* laps before the stamps repeat */

static inline CUDAQ_RT_LOOPBACK_HD uint32_t cudaq_rt_loopback_next_lap(uint32_t lap) {
  return lap == 0xFFFFFFFFu ? 1u : lap + 1u;
}

static inline CUDAQ_RT_LOOPBACK_HD uint32_t cudaq_rt_loopback_prev_lap(uint32_t lap) {
  return lap <= 1u ? 0xFFFFFFFFu : lap - 1u;
}

/* The stamp of the frame with sequence number k in a ring of n slots (host side: the device keeps
 * a running (slot, lap) and never divides 64-bit numbers). */
static inline CUDAQ_RT_LOOPBACK_HD uint32_t cudaq_rt_loopback_lap(uint64_t k, uint32_t n) {
  return (uint32_t)((k / n) % CUDAQ_RT_LOOPBACK_LAP_PERIOD) + 1u;
}

/* Both halves of a cell ({ stamp, data, stamp, data }) carry `lap`: the cell holds this lap's
 * bytes, however its halves arrived. */
static inline CUDAQ_RT_LOOPBACK_HD int cudaq_rt_loopback_stamped(uint32_t stamp0, uint32_t stamp1,
                                                                 uint32_t lap) {
  return (stamp0 == lap) & (stamp1 == lap); /* no branch: the GPU's serving thread checks many */
}

/* Cells a frame of `frame_len` bytes occupies, control included. */
static inline CUDAQ_RT_LOOPBACK_HD uint32_t cudaq_rt_loopback_frame_cells(uint32_t frame_len) {
  return 1u + (frame_len + CUDAQ_RT_LOOPBACK_CELL_DATA - 1u) / CUDAQ_RT_LOOPBACK_CELL_DATA;
}

/* A request of `frame_len` bytes (as its control cell says) whose header claims `arg_len` payload
 * bytes is whole when the bytes cover header and payload; else the device stages it as truncated
 * (cudaq_rt/wire.h). Longer than claimed is harmless: a handler reads only arg_len bytes. */
static inline CUDAQ_RT_LOOPBACK_HD int cudaq_rt_loopback_request_whole(uint32_t frame_len,
                                                                       uint32_t arg_len) {
  return (frame_len >= CUDAQ_RT_HEADER_SIZE) & (arg_len <= frame_len - CUDAQ_RT_HEADER_SIZE);
}

/* The warp form's idle probe (loopback_device.cu, warp_poll): while the ring is idle and its
 * client sends one request at a time, only the lane whose request comes next and the one after it
 * probe, instead of all 32. Every lane keeps the same copy of this state (it changes only with
 * what the lanes vote), so the lanes agree on who probes. */
#define CUDAQ_RT_LOOPBACK_WARP_SINGLES 4u /* rounds in a row with one request before narrowing */
#define CUDAQ_RT_LOOPBACK_WARP_IDLE_ROUNDS 64u /* empty narrow rounds before a wide one */

typedef struct cudaq_rt_loopback_warp_probe { /* bytes: it lives in every lane's session */
  uint8_t narrow;                             /* only lanes next and next + 1 (mod 32) probe */
  uint8_t next;                               /* the lane whose request comes next, while narrow */
  uint8_t idle;   /* narrow rounds in a row that found nothing (up to WARP_IDLE_ROUNDS) */
  uint8_t single; /* rounds in a row that found exactly one request (up to WARP_SINGLES) */
} cudaq_rt_loopback_warp_probe;

/* Lane `lane` probes its next slot this round. */
static inline CUDAQ_RT_LOOPBACK_HD int
cudaq_rt_loopback_warp_probes(const cudaq_rt_loopback_warp_probe *w, uint32_t lane) {
  return !w->narrow | (lane == w->next) | (lane == (w->next + 1u) % CUDAQ_RT_LOOPBACK_LANES);
}

/* After a round in which the lanes of `ready` (bit l: lane l) found a request and the shutdown flag
 * read `shutdown`. A narrow round that found exactly lane next's request moves on to the next
 * lane; any other find (a burst, or the second lane's request seen before the first's), the flag,
 * or WARP_IDLE_ROUNDS empty rounds widen the probe, so that no request waits in a lane that does
 * not probe. Returns 1 when a wide round found nothing after WARP_SINGLES rounds in a row with one
 * request each (a client that waits for each answer): the caller then works out the lane whose
 * request comes next and calls cudaq_rt_loopback_warp_narrow. */
static inline CUDAQ_RT_LOOPBACK_HD int cudaq_rt_loopback_warp_round(cudaq_rt_loopback_warp_probe *w,
                                                                    uint32_t ready, int shutdown) {
  const int one = ready != 0u && (ready & (ready - 1u)) == 0u;
  if (ready != 0u)
    w->single = (uint8_t)(!one                                         ? 0u
                          : w->single < CUDAQ_RT_LOOPBACK_WARP_SINGLES ? w->single + 1u
                                                                       : w->single);
  if (w->narrow) {
    if (!shutdown && ready == (1u << w->next)) {
      w->next = (uint8_t)((w->next + 1u) % CUDAQ_RT_LOOPBACK_LANES);
      w->idle = 0u;
    } else if (shutdown || ready != 0u || ++w->idle >= CUDAQ_RT_LOOPBACK_WARP_IDLE_ROUNDS) {
      w->narrow = 0u;
    }
    return 0;
  }
  return ready == 0u && !shutdown && w->single >= CUDAQ_RT_LOOPBACK_WARP_SINGLES;
}

/* Narrows the probe to lane `first` and the one after it; first >= 32 (not known) leaves it wide. */
static inline CUDAQ_RT_LOOPBACK_HD void
cudaq_rt_loopback_warp_narrow(cudaq_rt_loopback_warp_probe *w, uint32_t first) {
  w->narrow = (uint8_t)(first < CUDAQ_RT_LOOPBACK_LANES);
  w->next = (uint8_t)first;
  w->idle = 0u;
}

/* Whether a lane whose next request is at (slot, lap) comes first among its warp's lanes: the
 * lanes' next slots are 32 consecutive slots of the warp's groups, so the first is the one whose
 * predecessor in the warp's order is not lane l - 1's next (prev_slot, prev_lap). That predecessor
 * lies `back` slots before (wrapping into the lap before): 1, except for lane 0 of one of W > 1
 * warps, whose predecessor is lane 31's slot of the warp's group before, 32 * (W - 1) + 1 back
 * ("Warps"). Exactly one lane is first unless a lane has served a request while an earlier one was
 * not yet visible; the caller then leaves the probe wide. */
static inline CUDAQ_RT_LOOPBACK_HD int
cudaq_rt_loopback_warp_first(uint32_t slot, uint32_t lap, uint32_t prev_slot, uint32_t prev_lap,
                             uint32_t num_slots, uint32_t back) {
  const uint32_t pred_slot = slot < back ? slot + num_slots - back : slot - back;
  const uint32_t pred_lap = slot < back ? cudaq_rt_loopback_prev_lap(lap) : lap;
  return (prev_slot != pred_slot) | (prev_lap != pred_lap);
}

/* The warp form's lone turn (loopback_device.cu, cudaq_dev_warp_lone_leave): lane `lane`'s next
 * request once the turn leaves the next one at (next, lap), in a ring one warp serves (lane l the
 * slots l, l + 32, ...; num_slots a multiple of 32): the lane's first slot at or after it. */
static inline CUDAQ_RT_LOOPBACK_HD void
cudaq_rt_loopback_lane_from(uint32_t next, uint32_t lap, uint32_t lane, uint32_t num_slots,
                            uint32_t *slot_out, uint32_t *lap_out) {
  const uint32_t at = next % CUDAQ_RT_LOOPBACK_LANES;
  uint32_t slot = next - at + lane;
  if (lane < at && (slot += CUDAQ_RT_LOOPBACK_LANES) >= num_slots) {
    slot -= num_slots;
    lap = cudaq_rt_loopback_next_lap(lap);
  }
  *slot_out = slot;
  *lap_out = lap;
}

/* What cudaq_dev_enter_kernel receives as ctx; lives in device memory (cudaMalloc), written by
 * create, and by the serving thread at SHUTDOWN (resume_*). The host never reads it back. */
typedef struct cudaq_rt_loopback_device_ctx {
  uint32_t magic; /* CUDAQ_RT_LOOPBACK_CTX_MAGIC */
  uint32_t num_slots;
  uint32_t slot_size;   /* frame bytes per slot, header included; a multiple of 16 */
  uint32_t tail_cells;  /* cudaq_rt_loopback_tail_cells(slot_size) */
  void *request_heads;  /* mapped host memory: CUDAQ_RT_LOOPBACK_HEADS_BYTES(num_slots) */
  void *request_tails;  /* mapped host memory: num_slots * tail_cells cells */
  void *response_heads; /* the same for responses */
  void *response_tails;
  unsigned char *request_frames;  /* device memory: num_slots * slot_size, unpacked requests */
  unsigned char *response_frames; /* device memory: num_slots * slot_size, responses being built */
  /* Where the next kernel starts: the slot of the next request and the lap it will carry. create
   * sets 0 and 1; the serving thread stores its position here when rx_poll answers SHUTDOWN (see
   * "relaunch" above). Plain stores to device memory: the end of the kernel makes them visible to
   * the next one, which the launcher orders after it (cudaq_rt/dispatch.h). */
  uint32_t resume_slot;
  uint32_t resume_lap;
  /* The warp form's positions (cudaq_rt/dispatch.h): lane l of warp w (w * 32 + l here) serves
   * slots 32 * w + l, 32 * (w + warps) + l, ... ("Warps"), so each lane has its own next slot and
   * lap, kept here across a relaunch like resume_*. create sets slot i and its lap for each i; a
   * ring whose slots are not a multiple of 32 * warps has no warp form. */
  uint32_t warp_resume_slot[32 * CUDAQ_RT_LOOPBACK_MAX_WARPS];
  uint32_t warp_resume_lap[32 * CUDAQ_RT_LOOPBACK_MAX_WARPS];
  uint32_t layout;     /* CUDAQ_RT_LOOPBACK_LAYOUT_*: where the head cells are */
  uint32_t bulk_min;   /* responses of at least this many bytes go in bulk (0: never) */
  void *request_bulk;  /* mapped host memory: num_slots * slot_size bytes, plain frames */
  void *response_bulk; /* the same for responses */
  /* The spare frame ("The chain"): bytes of dynamic shared memory the launcher gives the dispatch
   * kernel for it (slot_size with spare_frame=1, else 0); the device uses it only where the
   * kernel has at least that many (%dynamic_smem_size). */
  uint32_t spare_bytes;
  /* Host threads that feed the ring side by side, each on its own lanes ("Feeders"): 1, or a
   * divisor of 32 for the warp form. */
  uint32_t feeders;
  /* Warps of the warp form that serve the ring side by side ("Warps"): 1 to
   * CUDAQ_RT_LOOPBACK_MAX_WARPS; the warp form serves only a kernel launched with that many
   * blocks, warp w in block w. */
  uint32_t warps;
  /* Resting warps' wake flags, warp w's at w: set by warp w - 1 (mod warps), cleared by warp w
   * when it finds a request ("Resting warps"). Create sets warp 0's (request 0 is its) and clears
   * the others; device memory only. */
  uint32_t warp_wake[CUDAQ_RT_LOOPBACK_MAX_WARPS];
} cudaq_rt_loopback_device_ctx;

#endif /* CUDAQ_RT_LOOPBACK_RING_H */
