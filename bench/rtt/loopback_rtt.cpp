// bench/loopback_rtt: the loopback round trip through the runtime's load path, one table per run.
// Not a test: it prints and asserts nothing (bench/loopback_rtt.md holds the results).
//
//   loopback_rtt --package PKG --warp-package PKG [--requests N] [--sm-ghz F] [--only TEXT]
//
// PKG: the example handlers packed with the bench's dispatch kernels (bench/rtt/rtt_kernels.cu:
// `cudaq-rt-pack cudaq_rt_example_app --dispatcher libcudaq_rt_bench_kernels.a`); the second PKG
// the same with libcudaq_rt_bench_warp_kernels.a (bench/rtt/warp_rounds.cu), for the rows of
// cudaq_rt_bench_warp_rounds. loopback_rtt.sh packs both. For each
// configuration below (bridge x dispatch kernel) it starts a Server, as cudaq-rt-run does, and
// sends the 8-byte echo with 1, 4, 16 and 64 requests in flight; with cudaq_rt_bench_stages it
// also prints where the GPU's time goes after a request is ready, from the kernel's own stamps.
// Bridges and kernels that are not there (a variant not built) are reported and skipped.
// --only TEXT runs only the rows whose label contains TEXT (an experiment's rows, in one call).
#include "load/client.h"
#include "load/server.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

using namespace cudaq_rt;

namespace {

struct Config {
  const char *label;
  const char *bridge;
  const char *dispatcher;
  std::vector<uint32_t> inflight;
  unsigned threads = 0;   // a custom kernel's block size (0: the load path's default)
  const char *extra = ""; // appended to the bridge configuration
  bool whole = false;     // linked --lto whole (the built-in kernels then call handlers directly)
};

// The variants are the knobs of bridges/loopback (built by bench/CMakeLists.txt as extra bridges)
// and the bench's own kernels: each differs from the first row by one thing.
const Config configs[] = {
    {"unified, loopback", "loopback", "builtin", {1, 4, 16, 64}},
    {"unified, one-slot probe widened after every request (no peek)",
     "loopback_no_peek",
     "builtin",
     {1, 4, 16, 64}},
    {"unified, loopback (again)", "loopback", "builtin", {1, 64}},
    {"fused prototype with the peek", "loopback", "cudaq_rt_bench_fused_peek", {1}},
    {"unified, session in shared memory",
     "loopback",
     "cudaq_rt_bench_shared_session",
     {1, 4, 16, 64}},
    {"unified, --lto whole (handlers called directly)",
     "loopback",
     "builtin",
     {1, 4, 16, 64},
     0,
     "",
     true},
    {"unified, responses never pushed", "loopback_no_push", "builtin", {1, 4, 16, 64}},
    {"unified, every batch's responses pushed", "loopback_push_always", "builtin", {1, 4, 16, 64}},
    {"unified, lanes layout", "loopback", "builtin", {1, 64}, 0, ",layout=lanes"},
    {"unified, write-combined request ring", "loopback_wc", "builtin", {1, 4, 16, 64}},
    {"unified, table in device memory", "loopback", "cudaq_rt_bench_global_table", {1, 64}},
    {"unified, staging in device memory", "loopback_device_staging", "builtin", {1, 64}},
    {"unified, probe of 4 slots always", "loopback_wide_probe", "builtin", {1, 64}},
    {"warp, loopback (lanes layout)", "loopback", "warp", {1, 16, 64, 256, 1024}},
    {"warp, loopback (lanes layout, again)", "loopback", "warp", {1, 256}},
    {"warp, every lane probes while idle (no narrow probe)",
     "loopback_warp_wide",
     "warp",
     {1, 16, 64, 256},
     0,
     ",layout=lanes"},
    {"warp, --lto whole (handlers called directly)",
     "loopback",
     "warp",
     {1, 16, 64, 256, 1024},
     0,
     "",
     true},
    {"warp, responses never pushed",
     "loopback_no_push",
     "warp",
     {1, 16, 64, 256},
     0,
     ",layout=lanes"},
    {"warp, every round's responses pushed",
     "loopback_push_always",
     "warp",
     {1, 16, 64, 256},
     0,
     ",layout=lanes"},
    {"warp, slots layout", "loopback", "warp", {1, 256, 1024}, 0, ",layout=slots"},
    {"warp, requests staged in device memory",
     "loopback_warp_device_staging",
     "warp",
     {1, 256, 1024},
     0,
     ",layout=lanes"},
    {"fused prototype: serving on the probe's registers",
     "loopback",
     "cudaq_rt_bench_fused",
     {1, 4, 16, 64}},
    {"fused prototype compiled apart inside the unified kernel",
     "loopback",
     "cudaq_rt_bench_fused_apart",
     {1, 4, 16, 64}},
    // The lone form (cudaq_rt/dispatch.h): the unified kernel's lone build (builtin: the loopback
    // bridge exports the hooks) against its plain build, and the compiled-apart bound above.
    {"unified without the lone form (lone form, shipped)",
     "loopback",
     "cudaq_rt_bench_unified_plain",
     {1, 4, 16, 64}},
    {"unified, loopback (lone form, shipped)", "loopback", "builtin", {1, 4, 16, 64}},
    {"unified without the lone form, again (lone form, shipped)",
     "loopback",
     "cudaq_rt_bench_unified_plain",
     {1, 4, 16, 64}},
    {"unified, loopback, again (lone form, shipped)", "loopback", "builtin", {1, 4, 16, 64}},
    {"unified, --lto whole (lone form, shipped)", "loopback", "builtin", {1, 64}, 0, "", true},
    {"unified without the lone form, --lto whole (lone form, shipped)",
     "loopback_no_lone",
     "builtin",
     {1, 64},
     0,
     "",
     true},
    {"unified without the lone form, bridge not exporting it (lone form, shipped)",
     "loopback_no_lone",
     "builtin",
     {1, 64}},
    {"fused prototype compiled apart (lone form, shipped)",
     "loopback",
     "cudaq_rt_bench_fused_apart",
     {1, 64}},
    // Entered only after 4 requests in a row came alone, or never (its code in the kernel).
    {"unified with the lone form after 4 alone (lone form compared)",
     "loopback_lone_after4",
     "builtin",
     {1, 4, 16, 64}},
    {"unified with the lone form never entered (lone form compared)",
     "loopback_lone_never",
     "builtin",
     {1, 4, 16, 64}},
    // The warp form's lone turn (cudaq_rt/dispatch.h): the warp kernel's lone build (warp: the
    // loopback bridge exports the hooks, and takes the turn in both layouts) against its plain
    // build through the same load path (the bridge exporting neither set), the turn taken in the
    // slots layout only, and the unified kernel's in the same call.
    {"warp without the lone turn (warp lone turn)",
     "loopback_no_lone",
     "warp",
     {1, 4, 16, 64, 256, 1024}},
    {"warp, loopback (warp lone turn)", "loopback", "warp", {1, 4, 16, 64, 256, 1024}},
    {"warp, lone turn in the slots layout only (warp lone turn)",
     "loopback_warp_lone_slots_only",
     "warp",
     {1, 4, 16, 64, 256, 1024}},
    {"warp without the lone turn, slots layout (warp lone turn)",
     "loopback_no_lone",
     "warp",
     {1, 4, 16, 256},
     0,
     ",layout=slots"},
    {"warp, slots layout (warp lone turn)",
     "loopback",
     "warp",
     {1, 4, 16, 256},
     0,
     ",layout=slots"},
    {"warp without the lone turn, again (warp lone turn)",
     "loopback_no_lone",
     "warp",
     {1, 4, 16, 64, 256, 1024}},
    {"warp, loopback, again (warp lone turn)", "loopback", "warp", {1, 4, 16, 64, 256, 1024}},
    {"warp, lone turn in the slots layout only, again (warp lone turn)",
     "loopback_warp_lone_slots_only",
     "warp",
     {1, 4, 16, 64, 256, 1024}},
    {"warp without the lone turn, slots layout, again (warp lone turn)",
     "loopback_no_lone",
     "warp",
     {1, 4, 16, 256},
     0,
     ",layout=slots"},
    {"warp, slots layout, again (warp lone turn)",
     "loopback",
     "warp",
     {1, 4, 16, 256},
     0,
     ",layout=slots"},
    // Run apart (it ends the process's context): fails where the turn is taken.
    {"warp, trap where the lone turn is taken (warp lone probe)",
     "loopback_warp_lone_trap",
     "warp",
     {1},
     0,
     ",layout=slots"},
    {"unified without the lone form (warp lone turn)", "loopback_no_lone", "builtin", {1, 64}},
    {"unified, loopback (warp lone turn)", "loopback", "builtin", {1, 64}},
    // The lone form's peek at the next line's first slot in the lanes layout (lone_poll,
    // cudaq_rt_loopback_peek_distance) against its peek at the next slot, whose control cell
    // shares the probed one's line there: the warp form's lone turn in the lanes layout, and the
    // unified kernel over the lanes layout; with the plain builds in the same call.
    {"warp without the lone turn (lone peek)", "loopback_no_lone", "warp", {1, 4, 16, 64, 256}},
    {"warp, lone turn in the lanes layout, peek at the next slot (lone peek)",
     "loopback_lone_peek_next",
     "warp",
     {1, 4, 16, 64, 256}},
    {"warp, lone turn in the lanes layout, peek at the next line (lone peek)",
     "loopback",
     "warp",
     {1, 4, 16, 64, 256}},
    {"warp, slots layout (lone peek)", "loopback", "warp", {1, 256}, 0, ",layout=slots"},
    {"unified, lanes layout, peek at the next slot (lone peek)",
     "loopback_lone_peek_next",
     "builtin",
     {1, 64},
     0,
     ",layout=lanes"},
    {"unified, lanes layout, peek at the next line (lone peek)",
     "loopback",
     "builtin",
     {1, 64},
     0,
     ",layout=lanes"},
    {"unified, loopback (lone peek)", "loopback", "builtin", {1, 64}},
    {"warp without the lone turn, again (lone peek)",
     "loopback_no_lone",
     "warp",
     {1, 4, 16, 64, 256}},
    {"warp, lone turn in the lanes layout, peek at the next slot, again (lone peek)",
     "loopback_lone_peek_next",
     "warp",
     {1, 4, 16, 64, 256}},
    {"warp, lone turn in the lanes layout, peek at the next line, again (lone peek)",
     "loopback",
     "warp",
     {1, 4, 16, 64, 256}},

    {"fused prototype, --lto whole (handlers called directly)",
     "loopback",
     "cudaq_rt_bench_fused_direct",
     {1, 4, 16, 64},
     0,
     "",
     true},
    {"hooks around a fixed echo (no dispatcher)", "loopback", "cudaq_rt_bench_hooks_echo", {1, 64}},
    {"hooks + validate, lookup", "loopback", "cudaq_rt_bench_hooks_validate", {1}},
    {"hooks + validate, lookup, handler call", "loopback", "cudaq_rt_bench_hooks_call", {1}},
    {"hooks + validate, lookup, counters", "loopback", "cudaq_rt_bench_hooks_counters", {1}},
    {"hooks + validate, lookup, handler call, response length fixed at 8",
     "loopback",
     "cudaq_rt_bench_hooks_call_len8",
     {1}},
    {"hooks + validate, lookup, response length from the request (no call)",
     "loopback",
     "cudaq_rt_bench_hooks_arg_len",
     {1}},
    {"hooks + validate, lookup, handler call, lean bridge (no bulk, tails, chain, spare)",
     "loopback_lean",
     "cudaq_rt_bench_hooks_call",
     {1}},
    {"unified, lean bridge (no bulk, tails, chain, spare)", "loopback_lean", "builtin", {1, 64}},
    {"hooks + validate, lookup, echo called by name, counters",
     "loopback",
     "cudaq_rt_bench_hooks_call_echo",
     {1, 64}},
    {"hooks + validate, lookup, echo called by name, counters, --lto whole (inlined)",
     "loopback",
     "cudaq_rt_bench_hooks_call_echo",
     {1, 64},
     0,
     "",
     true},
    {"hooks + validate, lookup, echo called by name or others through the table, counters, "
     "--lto whole (the echo inlined, a call left)",
     "loopback",
     "cudaq_rt_bench_hooks_call_echo_or_table",
     {1, 64},
     0,
     "",
     true},
    {"unified, lean: no bulk frames", "loopback_no_bulk", "builtin", {1, 64}},
    {"unified, lean: no engine tails", "loopback_no_tail_copy", "builtin", {1, 64}},
    {"unified, lean: no chain", "loopback_no_ahead", "builtin", {1, 64}},
    {"unified, lean: no spare frame", "loopback_no_spare", "builtin", {1, 64}},
    {"hooks + validate, lookup, handler call, counters",
     "loopback",
     "cudaq_rt_bench_hooks_all",
     {1, 64}},
    {"unified, no handler cache", "loopback", "cudaq_rt_bench_no_cache", {1, 64}},
    {"raw ring: head cells in registers, no hooks", "loopback", "cudaq_rt_bench_raw_ring", {1, 64}},
    {"raw ring, responses not pushed", "loopback", "cudaq_rt_bench_raw_ring_no_push", {1, 64}},
};

constexpr uint32_t stage_rows = 65536, stage_cols = 9;
const char *const stage_names[] = {"ready -> handler found (validate, lookup)",
                                   "handler (8-byte echo)",
                                   "response header",
                                   "counters",
                                   "tx_publish",
                                   "all, after ready",
                                   "staged in shared memory (1 = yes)",
                                   "probe came back -> rx_poll returned",
                                   "the probe that found it, issued -> came back"};
const char *const fused_names[] = {"probe came back -> cells checked, header read",
                                   "validate, lookup",
                                   "handler (8-byte echo), outcome",
                                   "counters",
                                   "response cells stored",
                                   "all, probe came back -> last store",
                                   "",
                                   "",
                                   ""};
const char *const rerun_names[] = {"validate, lookup",
                                   "handler (8-byte echo)",
                                   "response header",
                                   "validate, lookup, again",
                                   "handler, again",
                                   "response header, again",
                                   "tx_publish",
                                   "",
                                   ""};

// From column `first` on (the span kernels stamp only around the steps: columns 5 on).
void print_stages(Server &server, double ghz, const char *kernel, const char *const *names,
                  uint32_t first = 0) {
  std::vector<uint8_t> count_bytes(8), log(size_t(stage_rows) * stage_cols * 4);
  if (auto st = server.read_global("cudaq_rt_bench_stage_count", count_bytes); !st) {
    std::printf("stages: %s\n", st.error().str().c_str());
    return;
  }
  if (auto st = server.read_global("cudaq_rt_bench_stage_log", log); !st) {
    std::printf("stages: %s\n", st.error().str().c_str());
    return;
  }
  uint64_t n = 0;
  std::memcpy(&n, count_bytes.data(), 8);
  std::vector<uint8_t> clock_bytes(16);
  if (server.read_global("cudaq_rt_bench_stage_clock", clock_bytes)) {
    uint64_t cyc = 0, ns = 0;
    std::memcpy(&cyc, clock_bytes.data(), 8);
    std::memcpy(&ns, clock_bytes.data() + 8, 8);
    if (ns)
      std::printf(
          "\nSM clock over the stage kernel's life (clock64 over %%globaltimer): %.3f GHz\n",
          double(cyc) / double(ns));
  }
  const uint64_t rows = std::min<uint64_t>(n, stage_rows);
  std::printf(
      "\nGPU time per request after it is ready (%s, last %llu of %llu requests, SM clock "
      "%.2f GHz)\n\n| stage | median | p99 | over twice the median |\n| --- | --- | --- | --- "
      "|\n",
      kernel, (unsigned long long)rows, (unsigned long long)n, ghz);
  for (uint32_t c = first; c < stage_cols; ++c) {
    std::vector<uint32_t> v(rows);
    for (uint64_t r = 0; r < rows; ++r)
      std::memcpy(&v[r], log.data() + (r * stage_cols + c) * 4, 4);
    std::sort(v.begin(), v.end());
    if (v.empty())
      continue;
    const uint32_t p50 = v[v.size() / 2], p99 = v[v.size() * 99 / 100];
    if (!*names[c] || (c >= 7 && p99 == 0))
      continue;
    // A step's tail: e.g. a probe that found a request half written reloads its cells, a PCIe
    // round trip more in "probe came back -> rx_poll returned".
    const size_t over = size_t(v.end() - std::upper_bound(v.begin(), v.end(), 2 * uint64_t(p50)));
    std::printf("| %s | %u cycles, %.0f ns | %u cycles, %.0f ns | %.2f%% |\n", names[c], p50,
                p50 / ghz, p99, p99 / ghz, 100.0 * double(over) / double(v.size()));
  }
}

// Per warp round that found requests (cudaq_rt_bench_warp_rounds): median and p99 of each column.
void print_rounds(Server &server, double ghz) {
  std::vector<uint8_t> count_bytes(8), log(size_t(stage_rows) * 8 * 4);
  if (!server.read_global("cudaq_rt_bench_round_count", count_bytes) ||
      !server.read_global("cudaq_rt_bench_round_log", log)) {
    std::printf("rounds: not read\n");
    return;
  }
  uint64_t n = 0;
  std::memcpy(&n, count_bytes.data(), 8);
  const uint64_t rows = std::min<uint64_t>(n, stage_rows);
  const char *names[] = {"poll (all lanes' probes), ns",
                         "serve + publish, ns",
                         "requests per round",
                         "round to round, ns",
                         "round to round, globaltimer ns",
                         "the probe that found it, issued -> came back, ns",
                         "probe came back -> rx_poll returned, the round's ballot, ns"};
  std::printf("\nwarp rounds that found requests (last %llu of %llu)\n\n| column | median | p99 | "
              "mean |\n| --- | --- | --- | --- |\n",
              (unsigned long long)rows, (unsigned long long)n);
  double cycles = 0, ns = 0;
  for (uint64_t r = 0; r < rows; ++r) {
    uint32_t c3 = 0, c4 = 0;
    std::memcpy(&c3, log.data() + (r * 8 + 3) * 4, 4);
    std::memcpy(&c4, log.data() + (r * 8 + 4) * 4, 4);
    cycles += c3;
    ns += c4;
  }
  std::printf("SM clock while serving (clock64 over %%globaltimer): %.3f GHz\n", cycles / ns);
  for (uint32_t c = 0; c < 7; ++c) {
    std::vector<uint32_t> v(rows);
    double sum = 0;
    for (uint64_t r = 0; r < rows; ++r) {
      std::memcpy(&v[r], log.data() + (r * 8 + c) * 4, 4);
      sum += v[r];
    }
    std::sort(v.begin(), v.end());
    if (v.empty() || (c >= 5 && v.back() == 0)) // the probe's clocks: stamping bridges only
      continue;
    const double scale = c == 2 || c == 4 ? 1.0 : 1.0 / ghz;
    std::printf("| %s | %.0f | %.0f | %.1f |\n", names[c], v[v.size() / 2] * scale,
                v[v.size() * 99 / 100] * scale, sum / double(v.size()) * scale);
  }
}

// Where the one host thread's time goes with `inflight` echoes of `payload_bytes` in flight through
// the batched send and receive (the loop of cudaq_rt::bench, timed in parts): per request, the
// time inside send_batch, inside receive_batch calls that took responses, in checking each
// answer's payload against the request's (as the bench does), and in calls that found none (the
// thread waiting for the GPU). Little waiting means the host thread, not the GPU, is the limit.
void host_split(Server &server, uint32_t inflight, uint64_t requests, size_t payload_bytes) {
  using Clock = std::chrono::steady_clock;
  const std::vector<uint8_t> payload(payload_bytes, 0x5a);
  auto frame = build_request_frame("echo", payload, 0, 0);
  if (!frame) {
    std::printf("host split: %s\n", frame.error().str().c_str());
    return;
  }
  const size_t stride = server.report().slot_size;
  std::vector<const void *> ptrs(inflight, frame->data());
  std::vector<size_t> sizes(inflight, frame->size()), got(inflight);
  std::vector<uint8_t> responses(size_t(inflight) * stride);
  uint64_t sent = 0, received = 0, empty_polls = 0, wrong = 0;
  double send_ns = 0, take_ns = 0, check_ns = 0, wait_ns = 0;
  const auto t0 = Clock::now();
  const auto give_up = t0 + std::chrono::seconds(20);
  while (received < requests) {
    if (Clock::now() > give_up) {
      std::printf("host split: %llu of %llu responses within 20 s\n", (unsigned long long)received,
                  (unsigned long long)requests);
      return;
    }
    const size_t room = size_t(std::min<uint64_t>(requests - sent, inflight - (sent - received)));
    auto a = Clock::now();
    if (room > 0) {
      auto q = server.send_batch(std::span(ptrs.data(), room), std::span(sizes.data(), room));
      if (!q) {
        std::printf("host split: %s\n", q.error().str().c_str());
        return;
      }
      sent += *q;
    }
    auto b = Clock::now();
    send_ns += std::chrono::duration<double, std::nano>(b - a).count();
    const size_t out = size_t(sent - received);
    auto r = server.receive_batch(std::span(responses.data(), out * stride), stride,
                                  std::span(got.data(), out));
    auto c = Clock::now();
    if (!r) {
      std::printf("host split: %s\n", r.error().str().c_str());
      return;
    }
    (*r ? take_ns : wait_ns) += std::chrono::duration<double, std::nano>(c - b).count();
    empty_polls += *r == 0;
    for (size_t i = 0; i < *r; ++i) {
      const uint8_t *answer = responses.data() + i * stride + CUDAQ_RT_HEADER_SIZE;
      wrong += got[i] != CUDAQ_RT_HEADER_SIZE + payload_bytes ||
               !std::equal(payload.begin(), payload.end(), answer);
    }
    check_ns += std::chrono::duration<double, std::nano>(Clock::now() - c).count();
    received += *r;
  }
  const double total_ns = std::chrono::duration<double, std::nano>(Clock::now() - t0).count();
  const double n = double(requests);
  std::printf("| host thread, %zu B, %u in flight | %.3f M req/s | send %.1f ns | receive %.1f ns "
              "| check %.1f ns | waiting %.1f ns (%llu empty polls) | other %.1f ns | wrong %llu "
              "|\n",
              payload_bytes, inflight, n / total_ns * 1e3, send_ns / n, take_ns / n, check_ns / n,
              wait_ns / n, (unsigned long long)empty_polls,
              (total_ns - send_ns - take_ns - check_ns - wait_ns) / n, (unsigned long long)wrong);
  std::fflush(stdout);
}

} // namespace

int main(int argc, char **argv) {
  std::string package, warp_package; // the bench kernels; the warp kernel with stamps
  uint64_t requests = 100000;
  double ghz = 1.98;
  std::string only;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--package" && i + 1 < argc)
      package = argv[++i];
    else if (a == "--warp-package" && i + 1 < argc)
      warp_package = argv[++i];
    else if (a == "--requests" && i + 1 < argc)
      requests = std::strtoull(argv[++i], nullptr, 10);
    else if (a == "--sm-ghz" && i + 1 < argc)
      ghz = std::strtod(argv[++i], nullptr);
    else if (a == "--only" && i + 1 < argc)
      only = argv[++i];
    else {
      std::fprintf(stderr, "usage: loopback_rtt --package PKG --warp-package PKG [--requests N] "
                           "[--sm-ghz F] [--only TEXT]\n");
      return 2;
    }
  }
  if (package.empty() || warp_package.empty()) {
    std::fprintf(stderr, "loopback_rtt: --package and --warp-package are required\n");
    return 2;
  }
  if (auto why = no_gpu_reason()) {
    std::printf("loopback_rtt: skipped: %s\n", why->c_str());
    return 0;
  }

  const std::vector<uint8_t> payload(8, 0x5a); // the 8-byte echo; bench() puts request_ids in it
  std::printf("| configuration | in flight | p50 us | p99 us | M req/s | wrong |\n"
              "| --- | --- | --- | --- | --- | --- |\n");
  auto run = [&](const char *label, const char *bridge, const char *dispatcher,
                 const std::vector<uint32_t> &inflight, bool stages, unsigned threads = 0,
                 bool rounds = false, const char *extra = "", bool split = false,
                 bool whole = false, size_t split_bytes = 8) {
    if (!only.empty() && std::string(label).find(only) == std::string::npos)
      return;
    LoadOptions o;
    o.package = std::string(dispatcher) == "cudaq_rt_bench_warp_rounds" ? warp_package : package;
    if (whole)
      o.link.lto_mode = LtoMode::whole;
    o.link.bridge = bridge;
    o.link.dispatcher = dispatcher;
    o.bridge_config = std::string("slots=1024") + extra;
    if (threads)
      o.shape = LaunchShape{1, threads};
    auto server = Server::start(o);
    if (!server) {
      std::printf("| %s | - | skipped: %s | | | |\n", label, server.error().str().c_str());
      return;
    }
    for (uint32_t k : inflight) {
      BenchOptions b;
      b.requests = k == 1 ? requests : requests * 4;
      b.inflight = k;
      b.expect_echo = true;
      auto r = bench(**server, "echo", payload, b);
      if (!r) {
        std::printf("| %s | %u | failed: %s | | | |\n", label, k, r.error().str().c_str());
        return;
      }
      std::printf("| %s | %u | %.2f | %.2f | %.3f | %llu |\n", label, k, r->latency.p50_us,
                  r->latency.p99_us, r->requests_per_s / 1e6, (unsigned long long)r->wrong);
      std::fflush(stdout);
    }
    if (split) // while the kernel runs
      for (uint32_t k : inflight)
        host_split(**server, k, requests * 4, split_bytes);
    if (auto st = (*server)->stop(); !st) {
      std::printf("%s: stop: %s\n", label, st.error().str().c_str());
      return;
    }
    if (stages)
      print_stages(**server, ghz, dispatcher,
                   !std::strcmp(dispatcher, "cudaq_rt_bench_stages_rerun") ? rerun_names
                   : std::strstr(dispatcher, "_fused") || std::strstr(dispatcher, "_raw_ring")
                       ? fused_names
                       : stage_names,
                   std::strstr(dispatcher, "_span") ? 5u : 0u);
    if (rounds)
      print_rounds(**server, ghz);
  };
  for (const Config &c : configs)
    run(c.label, c.bridge, c.dispatcher, c.inflight, false, c.threads, false, c.extra, false,
        c.whole);
  run("stage stamps, loopback", "loopback", "cudaq_rt_bench_stages", {1}, true);
  run("stage stamps, responses never pushed, probe stamped", "loopback_stamps",
      "cudaq_rt_bench_stages", {1}, true);
  run("stage stamps, responses never pushed, probe stamped, no peek", "loopback_stamps_no_peek",
      "cudaq_rt_bench_stages", {1}, true);
  run("stage stamps, responses never pushed, probe stamped, --lto whole", "loopback_stamps",
      "cudaq_rt_bench_stages", {1}, true, 0, false, "", false, true);
  run("stage stamps, responses never pushed, probe stamped, --lto whole, handlers called directly",
      "loopback_stamps", "cudaq_rt_bench_stages_direct", {1}, true, 0, false, "", false, true);
  // The unified kernel's time after ready as it runs: no stamp between the steps.
  run("span, responses never pushed, probe stamped", "loopback_stamps", "cudaq_rt_bench_span", {1},
      true);
  // As the unified kernel runs (responses pushed): the time of the probe that finds a request.
  run("span, responses pushed, probe stamped", "loopback_stamps_pushed", "cudaq_rt_bench_span", {1},
      true);
  run("span, responses pushed, probe stamped, write-combined request ring",
      "loopback_stamps_pushed_wc", "cudaq_rt_bench_span", {1}, true);
  run("span, responses never pushed, probe stamped, --lto whole, handlers called directly",
      "loopback_stamps", "cudaq_rt_bench_span_direct", {1}, true, 0, false, "", false, true);
  // The fused prototype: the probe's return to the response's last store, pushed.
  run("span, fused prototype, probe back -> last store", "loopback", "cudaq_rt_bench_fused_span",
      {1}, true);
  run("span, fused prototype, probe back -> last store, --lto whole, handlers called directly",
      "loopback", "cudaq_rt_bench_fused_span_direct", {1}, true, 0, false, "", false, true);
  run("span, fused prototype, step stamps, --lto whole, handlers called directly", "loopback",
      "cudaq_rt_bench_fused_steps_direct", {1}, true, 0, false, "", false, true);
  run("span, fused prototype, step stamps, --lto whole, the echo called by name", "loopback",
      "cudaq_rt_bench_fused_steps_named", {1}, true, 0, false, "", false, true);
  run("span, raw ring, probe back -> last store", "loopback", "cudaq_rt_bench_raw_ring_span", {1},
      true);
  run("stage stamps, each step run twice", "loopback_no_push", "cudaq_rt_bench_stages_rerun", {1},
      true);
  std::printf("\nThe host thread's time per request (one thread, batched send and receive)\n\n");
  for (const char *bridge : {"loopback", "loopback_wc"})
    for (const char *layout : {",layout=slots", ",layout=lanes"}) {
      const std::string label = std::string("warp, ") + (layout[8] == 'l' ? "lanes" : "slots") +
                                " layout" + (bridge[8] ? ", write-combined request ring" : "");
      run(label.c_str(), bridge, "warp", {256, 1024}, false, 0, false, layout, true);
    }
  // The unified kernel with kilobyte echoes (bulk frames, the chain): is the host thread or the GPU
  // the limit at 32 in flight?
  for (const char *spare : {"", ",spare_frame=0"})
    for (size_t bytes : {size_t{1024}, size_t{16384}}) {
      const std::string label =
          std::string(bytes == 1024 ? "unified, 1 KB echoes" : "unified, 16 KB echoes") +
          (*spare ? ", no spare frame" : "");
      run(label.c_str(), "loopback", "builtin", {32}, false, 0, false,
          (std::string(",slot_size=16448") + spare).c_str(), true, false, bytes);
    }
  // The probe's own time in the warp form's round (the unified form's: the span rows above).
  run("warp round stamps, lanes layout, responses pushed, probe stamped", "loopback_stamps_pushed",
      "cudaq_rt_bench_warp_rounds", {1}, false, 32, true, ",layout=lanes");
  for (const char *layout : {",layout=lanes", ",layout=slots"})
    for (uint32_t k : {1u, 32u, 256u, 1024u})
      run(layout[8] == 'l' ? "warp round stamps, lanes layout" : "warp round stamps, slots layout",
          "loopback", "cudaq_rt_bench_warp_rounds", {k}, false, 32, true, layout);
  return 0;
}
