// Serving behind a self-fed bridge (serve.h).
//
// Each GPU's Server lives on a thread of its own from start to destruction: the load path makes
// the GPU's primary context current on the thread that calls it, and the bridge's CUDA
// allocations and frees happen in that context.
//
// Several GPUs in one process share more than it seems: the driver loads a library
// (cuLibraryLoadData) into every context, and unloads it from every context, and a load into a
// context whose persistent kernel runs waits for that kernel, forever (the first two-GPU run of
// gpu.udp hung so, loading GPU 1's module while GPU 0 served). So the order is: every GPU loaded
// (package, cubin, module, bridge), one after another, a failure being the error; then every
// kernel launched; at the end every kernel stopped, together; and only then any GPU's module
// and bridge freed. After a kernel that does not stop, nothing is freed.
//
// The stop, on each GPU at once: the bridge takes no more datagrams (those already in its socket's
// receive buffer are still taken), waits until every request it took has been answered, then the
// kernel's shutdown flag is set, the kernel ends, and the bridge's threads end after sending the
// last responses (Server::stop). So a request that arrived before the stop began is answered; one
// that arrives after it stays unread and is lost with the socket.
#include "load/serve.h"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>

namespace cudaq_rt {
namespace {

using Clock = std::chrono::steady_clock;

ServeCounters collect(Server &server) {
  ServeCounters c;
  c.dispatch = server.stats();
  c.bridge = server.bridge().counters();
  c.latency.assign(CUDAQ_RT_LATENCY_BUCKETS, 0);
  if (!server.bridge().add_latency(std::span<uint64_t, CUDAQ_RT_LATENCY_BUCKETS>(
          c.latency.data(), CUDAQ_RT_LATENCY_BUCKETS)))
    c.latency.clear();
  return c;
}

double bucket_middle_us(uint32_t i) {
  const uint64_t low = cudaq_rt_latency_bucket_low(i);
  const uint64_t high =
      i + 1 < CUDAQ_RT_LATENCY_BUCKETS ? cudaq_rt_latency_bucket_low(i + 1) : low + 1;
  return (double(low) + double(high - 1)) / 2 / 1000.0;
}

// The protocol error kinds, as the bridge counts them, in the order reports list them.
constexpr const char *protocol_kinds[] = {
    "unknown_function", "bad_magic",        "truncated",     "oversize",
    "bad_length",       "result_too_large", "handler_fault", "other_protocol_error"};
constexpr const char *drop_kinds[] = {"dropped_runt", "dropped_socket", "send_errors"};

std::string words(std::string_view name) {
  std::string s(name);
  std::replace(s.begin(), s.end(), '_', ' ');
  return s;
}

} // namespace

Expected<std::vector<int>> parse_devices(std::string_view text, Gpu &gpu) {
  std::vector<int> out;
  if (text == "all") {
    auto count = gpu.device_count();
    if (!count)
      return std::move(count).take_error();
    if (*count < 1)
      return make_error("", "--device all: this machine has no GPU");
    for (int i = 0; i < *count; ++i)
      out.push_back(i);
    return out;
  }
  std::string_view rest = text;
  while (true) {
    const size_t comma = rest.find(',');
    std::string_view item = rest.substr(0, comma);
    int v = -1;
    auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), v);
    if (item.empty() || item[0] == '+' || item[0] == '-' || ec != std::errc() ||
        end != item.data() + item.size())
      return make_error("", "--device: ", quote(text),
                        " is not a GPU ordinal, a comma-separated list of them, or 'all'");
    if (std::find(out.begin(), out.end(), v) != out.end())
      return make_error("", "--device: GPU ", v, " is listed twice");
    out.push_back(v);
    if (comma == std::string_view::npos)
      break;
    rest = rest.substr(comma + 1);
  }
  return out;
}

uint64_t ServeCounters::get(std::string_view name) const {
  for (const auto &[n, v] : bridge)
    if (n == name)
      return v;
  return 0;
}

uint64_t ServeCounters::served() const {
  return get("answered_ok") + get("handler_errors");
}

uint64_t ServeCounters::protocol_errors() const {
  uint64_t n = 0;
  for (const char *k : protocol_kinds)
    n += get(k);
  return n;
}

uint64_t ServeCounters::dropped() const {
  uint64_t n = 0;
  for (const char *k : drop_kinds)
    n += get(k);
  return n;
}

uint64_t ServeCounters::answered() const {
  return get("responses_sent") + get("bad_magic") + get("truncated") + get("oversize") +
         get("bad_length");
}

void ServeCounters::add(const ServeCounters &o) {
  dispatch.requests += o.dispatch.requests;
  dispatch.ok += o.dispatch.ok;
  dispatch.handler_errors += o.dispatch.handler_errors;
  dispatch.protocol_errors += o.dispatch.protocol_errors;
  for (const auto &[name, value] : o.bridge) {
    auto it =
        std::find_if(bridge.begin(), bridge.end(), [&](const auto &p) { return p.first == name; });
    if (it == bridge.end())
      bridge.emplace_back(name, value);
    else
      it->second += value;
  }
  if (!o.latency.empty()) {
    latency.resize(o.latency.size(), 0);
    for (size_t i = 0; i < o.latency.size(); ++i)
      latency[i] += o.latency[i];
  }
}

LatencyStats histogram_stats(const std::vector<uint64_t> &buckets) {
  LatencyStats s;
  uint64_t n = 0;
  double sum = 0;
  for (size_t i = 0; i < buckets.size(); ++i) {
    n += buckets[i];
    sum += double(buckets[i]) * bucket_middle_us(uint32_t(i));
  }
  if (n == 0)
    return s;
  s.count = n;
  s.mean_us = sum / double(n);
  auto at_rank = [&](double p) {
    const uint64_t rank = std::max<uint64_t>(1, uint64_t(std::ceil(p / 100.0 * double(n))));
    uint64_t seen = 0;
    for (size_t i = 0; i < buckets.size(); ++i) {
      seen += buckets[i];
      if (seen >= rank)
        return bucket_middle_us(uint32_t(i));
    }
    return bucket_middle_us(uint32_t(buckets.size() - 1));
  };
  s.min_us = at_rank(0);
  s.p50_us = at_rank(50);
  s.p90_us = at_rank(90);
  s.p99_us = at_rank(99);
  s.p999_us = at_rank(99.9);
  s.max_us = at_rank(100);
  return s;
}

// What the workers share: how many kernels still run, so that no GPU's module is unloaded (which
// the driver does in every context) while another GPU's kernel runs; and whether one hung.
struct Service::Shared {
  std::mutex m;
  std::condition_variable cv;
  int running = 0;
  bool hung = false;
};

struct Service::Worker {
  std::thread thread;
  mutable std::mutex m;
  std::condition_variable cv;
  bool started = false, launch_requested = false, launch_done = false, stop_requested = false;
  std::optional<Error> start_error, launch_error;
  std::optional<Error> error; // the kernel failed, or the stop did not finish
  Server *server = nullptr;   // while it serves (guarded by m)
  ServeCounters final_counters;
  LoadReport report;
  std::string address;
  bool self_fed = true;
  // Work for the worker's thread, where the GPU's context and the server live (a reload's swap);
  // the caller waits for it.
  std::function<void(Server &)> task;
  uint64_t tasks_done = 0;
  // Readers of the server on another thread (a reload's staging): it is not freed while any.
  int pinned = 0;

  void body(LoadOptions options, Gpu &gpu, Shared &shared) {
    // Loaded only: every GPU's module is loaded before any kernel runs (Server::load).
    auto started_server = Server::load(options, gpu);
    std::unique_ptr<Server> s;
    {
      std::lock_guard lock(m);
      started = true;
      if (!started_server) {
        start_error = started_server.error();
      } else {
        s = std::move(*started_server);
        report = s->report();
        address = s->bridge().address();
        self_fed = s->bridge().self_fed();
      }
    }
    cv.notify_all();
    if (!s)
      return;
    bool go = false, launched = false;
    {
      std::unique_lock lock(m);
      cv.wait(lock, [&] { return launch_requested || stop_requested; });
      go = !stop_requested;
    }
    Status st = go ? s->relaunch() : Status::ok();
    launched = go && st;
    if (launched) {
      std::lock_guard lock(shared.m);
      ++shared.running;
    }
    {
      std::lock_guard lock(m);
      launch_done = true;
      if (!st)
        launch_error = st.error();
      if (launched)
        server = s.get();
    }
    cv.notify_all();
    while (launched) {
      std::function<void(Server &)> work;
      {
        std::unique_lock lock(m);
        if (cv.wait_for(lock, std::chrono::milliseconds(20),
                        [&] { return stop_requested || task != nullptr; })) {
          if (stop_requested)
            break;
          work = std::move(task);
        }
      }
      if (work) {
        work(*s);
        std::lock_guard lock(m);
        task = nullptr;
        report = s->report();
        ++tasks_done; // under the lock, after the report: the caller reads both
        cv.notify_all();
        continue;
      }
      if (Status st = s->check(); !st) {
        std::lock_guard lock(m);
        error = st.error();
        break;
      }
    }
    st = s->stop();
    ServeCounters last = collect(*s);
    {
      std::lock_guard lock(m);
      if (!st && !error)
        error = st.error();
      final_counters = std::move(last);
      report = s->report();
      server = nullptr;
      task = nullptr; // a reload that asked too late: run_on_thread answers false
    }
    cv.notify_all();
    {
      std::unique_lock lock(m);
      cv.wait(lock, [&] { return pinned == 0; });
    }
    // Every kernel stops before any GPU's module is freed; after a hang, nothing is freed (the
    // process is about to end, and freeing would wait for the hung kernel).
    std::unique_lock lock(shared.m);
    if (launched)
      --shared.running;
    shared.hung = shared.hung || s->hung();
    shared.cv.notify_all();
    shared.cv.wait(lock, [&] { return shared.running == 0 || shared.hung; });
    if (shared.hung) {
      (void)s.release();
      return;
    }
    lock.unlock();
    s.reset(); // in this thread: the GPU's context is current here
  }

  void request_stop() {
    {
      std::lock_guard lock(m);
      stop_requested = true;
    }
    cv.notify_all();
  }

  bool failed() const {
    std::lock_guard lock(m);
    return error.has_value();
  }

  // Runs `work` on the worker's thread and waits for it; false when the worker no longer serves.
  bool run_on_thread(std::function<void(Server &)> work) {
    std::unique_lock lock(m);
    if (!server || stop_requested)
      return false;
    const uint64_t before = tasks_done;
    task = std::move(work);
    cv.notify_all();
    cv.wait(lock, [&] { return tasks_done != before || (!server && task == nullptr); });
    return tasks_done != before;
  }

  // The server, kept from being freed until unpin(); nullptr when it no longer serves.
  Server *pin() {
    std::lock_guard lock(m);
    if (server)
      ++pinned;
    return server;
  }
  void unpin() {
    {
      std::lock_guard lock(m);
      --pinned;
    }
    cv.notify_all();
  }

  ServeCounters counters() const {
    std::lock_guard lock(m);
    return server ? collect(*server) : final_counters;
  }
};

Expected<std::unique_ptr<Service>> Service::start(const ServeOptions &options, Gpu &gpu) {
  std::unique_ptr<Service> s(new Service());
  s->options_ = options;
  s->shared_ = std::make_unique<Shared>();
  if (options.devices.empty())
    return make_error("", "no GPU to serve on");
  if (auto count = gpu.device_count())
    for (int d : options.devices)
      if (d < 0 || d >= *count)
        return make_error("", "no GPU ", d, ": this machine has ", *count,
                          *count == 1 ? " GPU (0)" : cat(" GPUs (0 to ", *count - 1, ")"));
  auto on_gpu = [&](int device, Error e) {
    if (options.devices.size() > 1)
      e.message = cat("GPU ", device, ": ", e.message);
    return e;
  };
  // Every GPU loaded, then every kernel launched: the driver loads a module into every context,
  // and a load into a context whose persistent kernel runs waits for it forever.
  for (size_t i = 0; i < options.devices.size(); ++i) {
    LoadOptions o = options.load;
    o.device = options.devices[i];
    o.bridge_instance = uint32_t(i);
    auto w = std::make_unique<Worker>();
    Worker &worker = *w;
    Shared &shared = *s->shared_;
    worker.thread = std::thread([&worker, o, &gpu, &shared] { worker.body(o, gpu, shared); });
    {
      std::unique_lock lock(worker.m);
      worker.cv.wait(lock, [&] { return worker.started; });
    }
    s->workers_.push_back(std::move(w));
    if (worker.start_error)
      return on_gpu(o.device, *worker.start_error); // ~Service stops the others
    if (!worker.self_fed)
      return make_error("", "bridge ", quote(worker.report.bridge),
                        " is fed by this process, not by clients: serving needs a bridge that "
                        "receives requests itself, such as udp");
    s->instances_.push_back({o.device, worker.address, worker.report, {}});
  }
  for (size_t i = 0; i < s->workers_.size(); ++i) {
    Worker &worker = *s->workers_[i];
    {
      std::unique_lock lock(worker.m);
      worker.launch_requested = true;
      worker.cv.notify_all();
      worker.cv.wait(lock, [&] { return worker.launch_done; });
    }
    if (worker.launch_error)
      return on_gpu(options.devices[i], *worker.launch_error);
    s->instances_[i].report = worker.report;
  }
  return s;
}

Service::~Service() {
  for (auto &w : workers_)
    w->request_stop();
  for (auto &w : workers_)
    if (w->thread.joinable())
      w->thread.join();
}

std::vector<ServeCounters> Service::snapshot() const {
  std::vector<ServeCounters> out;
  for (const auto &w : workers_)
    out.push_back(w->counters());
  return out;
}

ServeReport Service::run(const std::atomic<bool> &stop, const Hooks &hooks) {
  const auto &tick = hooks.tick;
  const auto t0 = Clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(Clock::now() - t0).count(); };
  auto live = [&] {
    ServeReport r;
    r.gpus = instances_;
    auto counters = snapshot();
    for (size_t i = 0; i < r.gpus.size(); ++i) {
      r.gpus[i].counters = counters[i];
      r.total.add(counters[i]);
    }
    r.seconds = elapsed();
    r.reloads = reloads_;
    return r;
  };
  double next_tick = options_.stats_interval_s;
  const ReloadSource &source = options_.reload;
  const bool watching = source.watch_interval_s > 0 && source.fingerprint;
  double next_watch = source.watch_interval_s;
  std::optional<std::string> seen; // the fingerprint the running code was loaded from
  if (watching)
    if (auto fp = source.fingerprint())
      seen = *fp;
  auto reload_now = [&](const std::string &trigger) {
    ReloadRecord record = reload(trigger);
    if (hooks.reloaded)
      hooks.reloaded(record);
  };
  std::string stopped_by;
  while (stopped_by.empty()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    if (hooks.reload && hooks.reload->exchange(false, std::memory_order_acq_rel) &&
        !stop.load(std::memory_order_acquire))
      reload_now("signal");
    if (watching && elapsed() >= next_watch) {
      next_watch = elapsed() + source.watch_interval_s;
      // A change is reloaded once: a package that is refused is not tried again until it
      // changes again.
      if (auto fp = source.fingerprint(); fp && (!seen || *fp != *seen)) {
        const bool first = !seen;
        seen = *fp;
        if (!first)
          reload_now("watch");
      }
    }
    if (stop.load(std::memory_order_acquire))
      stopped_by = "signal";
    else if (std::any_of(workers_.begin(), workers_.end(), [](auto &w) { return w->failed(); }))
      stopped_by = "error";
    else if (options_.duration_s > 0 && elapsed() >= options_.duration_s)
      stopped_by = "duration";
    else if (options_.count > 0 && live().total.answered() >= options_.count)
      stopped_by = "count";
    else if (tick && options_.stats_interval_s > 0 && elapsed() >= next_tick) {
      tick(live());
      next_tick += options_.stats_interval_s;
    }
  }
  const double seconds = elapsed();
  for (auto &w : workers_)
    w->request_stop();
  for (auto &w : workers_)
    if (w->thread.joinable())
      w->thread.join();
  ServeReport r;
  r.stopped_by = stopped_by;
  r.seconds = seconds;
  r.gpus = instances_;
  r.reloads = reloads_;
  for (size_t i = 0; i < workers_.size(); ++i) {
    Worker &w = *workers_[i];
    r.gpus[i].counters = w.final_counters;
    r.gpus[i].report = w.report;
    r.total.add(w.final_counters);
    if (w.error) {
      Error e = *w.error;
      if (workers_.size() > 1)
        e.message = cat("GPU ", r.gpus[i].device, ": ", e.message);
      r.errors.push_back(std::move(e));
    }
  }
  return r;
}

ReloadRecord Service::reload(const std::string &trigger) {
  const auto t0 = Clock::now();
  auto since = [](Clock::time_point t) {
    return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
  };
  ReloadRecord rec;
  rec.at_s = std::chrono::duration<double>(t0 - started_at_).count();
  rec.trigger = trigger;
  auto on_gpu = [&](size_t i, const Error &e) {
    return workers_.size() > 1 ? cat("GPU ", options_.devices[i], ": ", e.str()) : e.str();
  };
  auto finish = [&](std::string outcome, std::string why) {
    rec.outcome = std::move(outcome);
    rec.why = std::move(why);
    rec.duration_ms = since(t0);
    reloads_.push_back(rec);
    return rec;
  };
  Expected<LoadOptions> next =
      options_.reload.next ? options_.reload.next() : Expected<LoadOptions>(options_.load);
  if (!next)
    return finish("refused", next.error().str());
  rec.package = next->package.string();

  // Every GPU's next code staged, with every GPU serving: a refusal on any swaps none.
  std::vector<StagedLoad> staged;
  for (size_t i = 0; i < workers_.size(); ++i) {
    Server *server = workers_[i]->pin();
    if (!server)
      return finish("refused", cat("GPU ", options_.devices[i], " is not serving"));
    LoadOptions o = *next;
    o.device = options_.devices[i];
    o.bridge_instance = uint32_t(i);
    auto st = server->stage(o);
    workers_[i]->unpin();
    if (!st)
      return finish("refused", on_gpu(i, st.error()));
    for (const std::string &w : st->report.warnings)
      if (std::find(rec.warnings.begin(), rec.warnings.end(), w) == rec.warnings.end())
        rec.warnings.push_back(w);
    staged.push_back(std::move(*st));
  }
  rec.manifest = staged.front().manifest.str();
  rec.stage_ms = since(t0);
  bool unchanged = true;
  for (size_t i = 0; i < workers_.size() && unchanged; ++i) {
    Server *server = workers_[i]->pin();
    unchanged = server && server->serves(staged[i]);
    if (server)
      workers_[i]->unpin();
  }
  if (unchanged)
    return finish("unchanged", "the same manifest, cubin and globals are serving");
  const bool globals_only =
      std::all_of(staged.begin(), staged.end(), [](const StagedLoad &s) { return s.globals_only; });

  // One GPU at a time: the others answer while it swaps.
  for (size_t i = 0; i < workers_.size(); ++i) {
    std::optional<Expected<SwapTimes>> swapped;
    const bool ran = workers_[i]->run_on_thread(
        [&](Server &server) { swapped.emplace(server.swap(std::move(staged[i]))); });
    if (!ran || !*swapped) {
      std::string why =
          ran ? on_gpu(i, swapped->error()) : cat("GPU ", options_.devices[i], " stopped serving");
      if (i > 0)
        why += cat(" (GPUs ", options_.devices[0], " to ", options_.devices[i - 1],
                   " serve the new code, the others the old)");
      return finish("failed", why);
    }
    rec.swaps.push_back(**swapped);
    std::lock_guard lock(workers_[i]->m);
    instances_[i].report = workers_[i]->report;
  }
  options_.load = *next;
  return finish(globals_only ? "globals" : "swapped", "");
}

std::string format_reload(const ReloadRecord &r) {
  std::ostringstream out;
  char text[160];
  out << "reload (" << r.trigger << "): " << r.outcome;
  if (r.done()) {
    double max_gap = 0;
    for (const SwapTimes &t : r.swaps)
      max_gap = std::max(max_gap, t.gap_ms());
    std::snprintf(text, sizeof text, ": %s in %.1f ms (staged in %.1f ms, gap %.3f ms)",
                  r.package.c_str(), r.duration_ms, r.stage_ms, max_gap);
    out << text;
  } else if (!r.why.empty()) {
    out << ": " << r.why;
  }
  if (r.outcome == "refused" || r.outcome == "failed")
    out << "; the old code serves on";
  return out.str();
}

nlohmann::json reload_json(const ReloadRecord &r) {
  nlohmann::json swaps = nlohmann::json::array();
  for (const SwapTimes &t : r.swaps)
    swaps.push_back({{"hold_ms", t.hold_ms},
                     {"swap_ms", t.swap_ms},
                     {"load_ms", t.load_ms},
                     {"unload_ms", t.unload_ms},
                     {"launch_ms", t.launch_ms},
                     {"gap_ms", t.gap_ms()}});
  return {{"at_s", r.at_s},         {"trigger", r.trigger},         {"outcome", r.outcome},
          {"why", r.why},           {"package", r.package},         {"manifest", r.manifest},
          {"stage_ms", r.stage_ms}, {"duration_ms", r.duration_ms}, {"swaps", swaps}};
}

std::string format_serve_report(const ServeReport &r, bool final_report) {
  std::ostringstream out;
  auto line = [&](const std::string &who, const ServeCounters &c) {
    out << who << ": received " << c.get("datagrams_received") << ", served " << c.served()
        << " (ok " << c.get("answered_ok") << ", handler errors " << c.get("handler_errors")
        << "), protocol errors " << c.protocol_errors();
    if (final_report) {
      out << " (";
      const char *sep = "";
      for (const char *k : protocol_kinds) {
        out << sep << words(k) << " " << c.get(k);
        sep = ", ";
      }
      out << ")";
    }
    out << ", dropped " << c.dropped();
    if (final_report)
      out << " (under 16 bytes " << c.get("dropped_runt") << ", socket buffer full "
          << c.get("dropped_socket") << ", send errors " << c.get("send_errors") << ")";
    out << "\n";
    if (final_report && !c.latency.empty()) {
      LatencyStats l = histogram_stats(c.latency);
      char text[256];
      std::snprintf(text, sizeof text,
                    "  latency us, arrival to departure, %llu requests: p50 %.2f  p90 %.2f  "
                    "p99 %.2f  p99.9 %.2f  max %.2f\n",
                    (unsigned long long)l.count, l.p50_us, l.p90_us, l.p99_us, l.p999_us, l.max_us);
      out << text;
    }
  };
  if (final_report) {
    char text[128];
    std::snprintf(text, sizeof text, "served for %.3f s, stopped by %s\n", r.seconds,
                  r.stopped_by.c_str());
    out << text;
  } else {
    char text[64];
    std::snprintf(text, sizeof text, "%.1f s: ", r.seconds);
    out << text;
  }
  for (const ServeInstance &g : r.gpus)
    line(cat("GPU ", g.device, " (", g.address, ")"), g.counters);
  if (r.gpus.size() > 1)
    line("total", r.total);
  if (final_report && !r.reloads.empty()) {
    size_t done = 0, refused = 0, unchanged = 0;
    double max_gap = 0;
    for (const ReloadRecord &rr : r.reloads) {
      done += rr.done();
      refused += rr.outcome == "refused" || rr.outcome == "failed";
      unchanged += rr.outcome == "unchanged";
      for (const SwapTimes &t : rr.swaps)
        max_gap = std::max(max_gap, t.gap_ms());
    }
    char text[160];
    std::snprintf(text, sizeof text,
                  "reloads: %zu done, %zu refused, %zu unchanged; longest gap %.3f ms\n", done,
                  refused, unchanged, max_gap);
    out << text;
  }
  return out.str();
}

nlohmann::json serve_report_json(const ServeReport &r) {
  auto counters = [](const ServeCounters &c) {
    nlohmann::json bridge = nlohmann::json::object();
    for (const auto &[name, value] : c.bridge)
      bridge[name] = value;
    nlohmann::json j = {{"served", c.served()},
                        {"protocol_errors", c.protocol_errors()},
                        {"dropped", c.dropped()},
                        {"answered", c.answered()},
                        {"bridge", bridge},
                        {"dispatch",
                         {{"requests", c.dispatch.requests},
                          {"ok", c.dispatch.ok},
                          {"handler_errors", c.dispatch.handler_errors},
                          {"protocol_errors", c.dispatch.protocol_errors}}}};
    if (!c.latency.empty()) {
      LatencyStats l = histogram_stats(c.latency);
      j["latency_us"] = {{"count", l.count},   {"min", l.min_us}, {"mean", l.mean_us},
                         {"p50", l.p50_us},    {"p90", l.p90_us}, {"p99", l.p99_us},
                         {"p99.9", l.p999_us}, {"max", l.max_us}};
    }
    return j;
  };
  nlohmann::json gpus = nlohmann::json::array();
  for (const ServeInstance &g : r.gpus) {
    nlohmann::json j = counters(g.counters);
    j["device"] = g.device;
    j["name"] = g.report.device.name;
    j["arch"] = g.report.device.arch();
    j["address"] = g.address;
    j["cubin_source"] = cubin_source_name(g.report.source);
    gpus.push_back(std::move(j));
  }
  nlohmann::json errors = nlohmann::json::array();
  for (const Error &e : r.errors)
    errors.push_back(e.str());
  nlohmann::json reloads = nlohmann::json::array();
  for (const ReloadRecord &rr : r.reloads)
    reloads.push_back(reload_json(rr));
  return {{"seconds", r.seconds},       {"stopped_by", r.stopped_by}, {"gpus", gpus},
          {"total", counters(r.total)}, {"errors", errors},           {"reloads", reloads}};
}

} // namespace cudaq_rt
