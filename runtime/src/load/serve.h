// Serving: a package on one or more GPUs behind a self-fed bridge (UDP), until told to stop or a
// bound is reached, with live and final counters (cudaq-rt-run --serve). One Server per GPU, each
// with its own bridge instance, each owned by a thread of its own (a GPU's context stays current
// on the thread that loaded it). serve.cpp explains the stop.
#pragma once

#include "load/latency_stats.h"
#include "load/server.h"

#include <nlohmann/json.hpp>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace cudaq_rt {

// "0", "0,1,3" or "all" (every GPU the driver sees, asked through `gpu` only for "all"): the
// ordinals, in order, each once. Errors name what is wrong with the text.
Expected<std::vector<int>> parse_devices(std::string_view text, Gpu &gpu = driver_gpu());

// What a reload reads again, and how --watch notices a change (set by the command; a service
// without it reloads `load` as it was given).
struct ReloadSource {
  // The next load: the package opened again (an oci:// reference pulled again), the globals'
  // files read again. Called on the thread that runs the service.
  std::function<Expected<LoadOptions>()> next;
  // What --watch compares between two polls: it changes when the package or a global's file
  // does. An error is a poll that saw nothing (a package being replaced): the next one looks again.
  std::function<Expected<std::string>()> fingerprint;
  double watch_interval_s = 0; // 0: no watching
};

struct ServeOptions {
  LoadOptions load; // load.device and load.bridge_instance are set per GPU, from `devices`
  ReloadSource reload;
  std::vector<int> devices; // one Server each
  uint64_t count = 0;       // stop once this many requests were answered in all (0: no bound)
  double duration_s = 0;    // stop after this many seconds (0: no bound)
  double stats_interval_s = 0;
};

// One GPU's counters, or their sum.
struct ServeCounters {
  cudaq_rt_dispatch_stats dispatch{};                   // the kernel's (dispatch.h)
  std::vector<std::pair<std::string, uint64_t>> bridge; // the bridge's, in its order
  std::vector<uint64_t> latency;                        // its histogram (bridge_plugin.h), or empty
  uint64_t get(std::string_view name) const;            // a bridge counter, 0 when absent
  // Derived, from the bridge's counters: requests a handler answered (status >= 0), protocol
  // errors of every kind, datagrams dropped, responses sent in all.
  uint64_t served() const;
  uint64_t protocol_errors() const;
  uint64_t dropped() const;
  uint64_t answered() const;
  void add(const ServeCounters &other);
};

// Percentiles of a latency histogram: each the middle of its bucket (within about 3%), in us.
LatencyStats histogram_stats(const std::vector<uint64_t> &buckets);

struct ServeInstance {
  int device = 0;
  std::string address; // where clients reach it
  LoadReport report;
  ServeCounters counters;
};

// One reload of a serving process: what asked for it, what came of it, and what it cost.
struct ReloadRecord {
  double at_s = 0;              // since serving began
  std::string trigger;          // "signal", "watch", or the caller's word
  std::string outcome;          // "swapped", "globals", "unchanged", "refused", "failed"
  std::string why;              // refused, failed: one line; unchanged: what was compared
  std::string package;          // what was loaded, or asked for
  std::string manifest;         // its manifest digest, where it was read
  double stage_ms = 0;          // everything read, checked and linked, with the old code serving
  double duration_ms = 0;       // from the trigger to the last GPU's swap
  std::vector<SwapTimes> swaps; // per GPU swapped, in order
  std::vector<std::string> warnings; // what staging warned of (a signature no longer valid, ...)
  bool done() const { return outcome == "swapped" || outcome == "globals"; }
};
std::string format_reload(const ReloadRecord &record);
nlohmann::json reload_json(const ReloadRecord &record);

struct ServeReport {
  std::vector<ServeInstance> gpus;
  ServeCounters total;
  double seconds = 0;
  std::string stopped_by;    // "signal", "count", "duration", "error"
  std::vector<Error> errors; // a kernel that failed, a stop that did not finish
  std::vector<ReloadRecord> reloads;
};

class Service {
public:
  // Starts a Server on each device in turn; on any error, what started is stopped again.
  static Expected<std::unique_ptr<Service>> start(const ServeOptions &options,
                                                  Gpu &gpu = driver_gpu());
  ~Service();
  Service(const Service &) = delete;
  Service &operator=(const Service &) = delete;

  const std::vector<ServeInstance> &instances() const { return instances_; }
  // Live counters, read from mapped memory and the bridges' atomics: per GPU, in order.
  std::vector<ServeCounters> snapshot() const;
  // Serves until `stop` turns true (a signal handler may set it), a bound of the options is
  // reached or a kernel fails; calls `tick` every stats interval. Reloads when `reload` turns true
  // (it is set back to false; SIGHUP's handler sets it) and, with a watch interval, when the
  // fingerprint changes; `reloaded` hears of each. Then stops every GPU (requests already
  // received are answered) and reports.
  struct Hooks {
    std::function<void(const ServeReport &)> tick;
    std::atomic<bool> *reload = nullptr;
    std::function<void(const ReloadRecord &)> reloaded;
  };
  ServeReport run(const std::atomic<bool> &stop, const Hooks &hooks);
  ServeReport run(const std::atomic<bool> &stop,
                  const std::function<void(const ServeReport &)> &tick = {}) {
    return run(stop, Hooks{tick, nullptr, {}});
  }
  // Reloads now: the next load staged for every GPU while they serve (any refusal leaves every
  // GPU as it was), then swapped in on each GPU in turn, so that the others answer meanwhile.
  // On the thread that runs the service (or before run()).
  ReloadRecord reload(const std::string &trigger);

private:
  struct Worker;
  struct Shared;
  Service() = default;
  ServeOptions options_;
  std::unique_ptr<Shared> shared_;
  std::vector<ServeInstance> instances_;
  std::vector<std::unique_ptr<Worker>> workers_;
  std::vector<ReloadRecord> reloads_;
  std::chrono::steady_clock::time_point started_at_ = std::chrono::steady_clock::now();
};

std::string format_serve_report(const ServeReport &report, bool final_report);
nlohmann::json serve_report_json(const ServeReport &report);

} // namespace cudaq_rt
