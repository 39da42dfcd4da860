// Serving: a package on one or more GPUs behind a self-fed bridge (UDP), until told to stop or a
// bound is reached, with live and final counters (cudaq-rt-run --serve). One Server per GPU, each
// with its own bridge instance, each owned by a thread of its own (a GPU's context stays current
// on the thread that loaded it). serve.cpp explains the stop.
#pragma once

#include "load/latency_stats.h"
#include "load/server.h"

#include <nlohmann/json.hpp>

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace cudaq_rt {

// "0", "0,1,3" or "all" (every GPU the driver sees, asked through `gpu` only for "all"): the
// ordinals, in order, each once. Errors name what is wrong with the text.
Expected<std::vector<int>> parse_devices(std::string_view text, Gpu &gpu = driver_gpu());

struct ServeOptions {
  LoadOptions load;         // load.device and load.bridge_instance are set per GPU, from `devices`
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

struct ServeReport {
  std::vector<ServeInstance> gpus;
  ServeCounters total;
  double seconds = 0;
  std::string stopped_by;    // "signal", "count", "duration", "error"
  std::vector<Error> errors; // a kernel that failed, a stop that did not finish
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
  // reached or a kernel fails; calls `tick` every stats interval. Then stops every GPU (requests
  // already received are answered) and reports.
  ServeReport run(const std::atomic<bool> &stop,
                  const std::function<void(const ServeReport &)> &tick = {});

private:
  struct Worker;
  struct Shared;
  Service() = default;
  ServeOptions options_;
  std::unique_ptr<Shared> shared_;
  std::vector<ServeInstance> instances_;
  std::vector<std::unique_ptr<Worker>> workers_;
};

std::string format_serve_report(const ServeReport &report, bool final_report);
nlohmann::json serve_report_json(const ServeReport &report);

} // namespace cudaq_rt
