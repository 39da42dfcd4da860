// cudaq-rt-run: load a package on a GPU and call, batch-call, benchmark or list its handlers
// through the runtime's load path (cudaq_rt/server.h). Options are documented in
// man/cudaq-rt-run.1; keep the two in step.
#include "../common/driver.h"

#include "cudaq_rt/wire.h"
#include "load/client.h"
#include "load/request_args.h"
#include "load/serve.h"
#include "load/server.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>

using namespace cudaq_rt;
using nlohmann::json;

namespace {
constexpr const char *tool = "cudaq-rt-run";

// Set by SIGINT and SIGTERM while serving: the service stops cleanly and reports.
std::atomic<bool> stop_requested{false};
static_assert(std::atomic<bool>::is_always_lock_free, "set from a signal handler");

void on_stop_signal(int) {
  stop_requested.store(true, std::memory_order_release);
}

void catch_stop_signals() {
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

// --serve: every GPU in `devices` behind its own bridge instance until a signal or a bound.
int serve(ServeOptions options, bool as_json) {
  catch_stop_signals();
  auto service = Service::start(options);
  if (!service) {
    if (as_json)
      std::cout << json{{"package", options.load.package.string()},
                        {"error", service.error().str()},
                        {"exit_status", 1}}
                       .dump(2, ' ', false, json::error_handler_t::replace)
                << "\n";
    return driver::fail(tool, service.error());
  }
  for (const ServeInstance &g : (*service)->instances()) {
    for (const std::string &w : g.report.warnings)
      driver::warn(tool, w);
    std::fprintf(stderr, "%s: serving on %s (GPU %d: %s, %s, bridge %s, cubin from the %s)\n", tool,
                 g.address.c_str(), g.device, g.report.device.name.c_str(),
                 g.report.device.arch().c_str(), g.report.bridge.c_str(),
                 cubin_source_name(g.report.source));
  }
  std::fflush(stderr);
  ServeReport report = (*service)->run(stop_requested, [](const ServeReport &live) {
    std::fprintf(stderr, "%s", format_serve_report(live, false).c_str());
    std::fflush(stderr);
  });
  const int status = report.errors.empty() ? run_exit_ok : driver::exit_failure;
  for (const Error &e : report.errors)
    driver::fail(tool, e);
  if (as_json) {
    json doc = serve_report_json(report);
    doc["package"] = options.load.package.string();
    doc["bridge"] = report.gpus.empty() ? "" : report.gpus.front().report.bridge;
    doc["exit_status"] = status;
    std::cout << doc.dump(2, ' ', false, json::error_handler_t::replace) << "\n";
  } else {
    std::cout << format_serve_report(report, true);
  }
  std::cout.flush();
  if (status != run_exit_ok) {
    // A kernel that did not stop: exit-time cleanup would wait for it.
    std::fflush(stderr);
    std::_Exit(status);
  }
  return status;
}

// The payload bound before the bridge's slot size is known; the real one is checked after load.
constexpr size_t parse_bound = size_t{16} << 20;

std::string status_text(int32_t status) {
  return status > 0 ? cat(wire_status_name(status), " ", status) : wire_status_name(status);
}

json times_json(const LoadTimes &t) {
  json j = {{"context_ms", t.context_ms},
            {"open_ms", t.open_ms},
            {"cubin_ms", t.cubin_ms},
            {"load_ms", t.load_ms},
            {"launch_ms", t.launch_ms}};
  j["first_response_ms"] = t.first_response_ms ? json(*t.first_response_ms) : json(nullptr);
  return j;
}

json report_json(const LoadReport &r) {
  return {{"package", r.package.string()},
          {"device",
           {{"ordinal", r.device.ordinal},
            {"name", r.device.name},
            {"arch", r.device.arch()},
            {"driver", r.device.driver()}}},
          {"cubin",
           {{"source", cubin_source_name(r.source)},
            {"arch", r.record.arch},
            {"digest", r.record.cubin.str()},
            {"size", r.record.cubin_size},
            {"link_ms", r.record.link_ms},
            {"nvjitlink", r.record.nvjitlink_version}}},
          {"bridge", r.bridge},
          {"dispatcher", r.dispatcher},
          {"kernel", r.kernel},
          {"slot_size", r.slot_size},
          {"slots", r.num_slots},
          {"warnings", r.warnings}};
}

void print_verbose(const LoadReport &r) {
  const LoadTimes &t = r.times;
  std::fprintf(stderr,
               "%s: GPU %d: %s (%s, driver %s)\n"
               "%s: cubin: %s from the %s (%llu bytes, %s)\n"
               "%s: times: context %.1f ms, open+verify %.1f ms, %s %.1f ms, load %.1f ms, "
               "launch %.3f ms",
               tool, r.device.ordinal, r.device.name.c_str(), r.device.arch().c_str(),
               r.device.driver().c_str(), tool, r.record.arch.c_str(), cubin_source_name(r.source),
               (unsigned long long)r.record.cubin_size, r.record.cubin.short_str().c_str(), tool,
               t.context_ms, t.open_ms, r.source == CubinSource::link ? "link" : "lookup",
               t.cubin_ms, t.load_ms, t.launch_ms);
  if (t.first_response_ms)
    std::fprintf(stderr, ", first response %.3f ms", *t.first_response_ms);
  std::fprintf(stderr, "\n");
}

struct Request {
  std::string handler;
  std::vector<uint8_t> payload;
  ResultType result;
};

// Refusals that need the loaded package: an unknown handler, a payload larger than a slot.
std::optional<Error> refuse(const Server &server, const Request &r) {
  const LoadReport &rep = server.report();
  const bool alias = std::any_of(rep.aliases.begin(), rep.aliases.end(),
                                 [&](const AliasEntry &a) { return a.name == r.handler; });
  if (!alias &&
      std::find(rep.handlers.begin(), rep.handlers.end(), r.handler) == rep.handlers.end()) {
    std::string names;
    for (const std::string &h : rep.handlers)
      names += cat(names.empty() ? "" : ", ", h);
    for (const AliasEntry &a : rep.aliases)
      names += cat(", ", a.name, " (alias of ", a.handler, ")");
    return make_error(rep.package.string(), "no handler ", quote(r.handler),
                      ": the package exports ", names.empty() ? std::string("none") : names);
  }
  const size_t room = rep.slot_size - CUDAQ_RT_HEADER_SIZE;
  if (r.payload.size() > room)
    return make_error(rep.package.string(), "the arguments of ", quote(r.handler), " are ",
                      r.payload.size(), " bytes, but the bridge's slots hold ", room,
                      " (slot_size ", rep.slot_size, " less the 24-byte header)");
  return std::nullopt;
}

struct Outcome {
  int status = run_exit_ok;
  std::optional<Error> fatal; // the kernel failed or stopped answering: nothing more is sent
};

// One request: sent, answered, printed (or put in `out`).
Outcome run_request(Server &server, const Request &r, uint32_t request_id, double timeout_s,
                    bool as_json, json &out) {
  if (auto e = refuse(server, r)) {
    if (as_json)
      out.push_back({{"handler", r.handler}, {"error", e->str()}});
    driver::fail(tool, *e);
    return {driver::exit_usage, std::nullopt};
  }
  auto frame = build_request_frame(r.handler, r.payload, request_id, request_id);
  if (!frame) {
    driver::fail(tool, frame.error());
    return {driver::exit_usage, std::nullopt};
  }
  auto reply = call(server, *frame, timeout_s);
  if (!reply)
    return {driver::exit_failure, reply.error()};
  const Response &resp = reply->response;
  auto decoded = decode_result(r.result, resp.result);
  if (as_json) {
    json j = {{"handler", r.handler},
              {"request_id", resp.request_id},
              {"status", resp.status},
              {"status_name", wire_status_name(resp.status)},
              {"result_hex", *decode_result(ResultType{ResultType::Kind::hex}, resp.result)},
              {"latency_us", reply->latency_us}};
    if (decoded && r.result.kind != ResultType::Kind::raw)
      j["result"] = *decoded;
    else if (!decoded)
      j["decode_error"] = decoded.error().str();
    out.push_back(std::move(j));
  } else if (r.result.kind == ResultType::Kind::raw && decoded) {
    std::fwrite(decoded->data(), 1, decoded->size(), stdout);
    std::fprintf(stderr, "%s\n", status_text(resp.status).c_str());
  } else if (!decoded) {
    std::printf("%s: (%s)\n", status_text(resp.status).c_str(), decoded.error().str().c_str());
  } else if (resp.status < 0 || resp.result.empty()) {
    std::printf("%s\n", status_text(resp.status).c_str());
  } else {
    std::printf("%s: %s\n", status_text(resp.status).c_str(), decoded->c_str());
  }
  std::fflush(stdout);
  int status = run_exit_status(resp.status);
  if (!decoded && status == run_exit_ok)
    status = driver::exit_usage;
  return {status, std::nullopt};
}

} // namespace

int main(int argc, char **argv) {
  CLI::App app{"Load a package on a GPU and call, benchmark or list its handlers through the "
               "dispatch kernel.",
               tool};
  app.set_version_flag("--version", std::string(tool) + " " CUDAQ_RT_VERSION);

  LoadOptions opts;
  std::string package, call_name, result_text = "hex", calls_file, grid_text, cache_dir;
  std::string remote_cache, device_text = "0";
  ServeOptions serve_opts;
  std::vector<std::string> args, globals;
  uint64_t bench_count = 0;
  uint32_t inflight = 1;
  bool serve_flag = false;
  bool list = false, no_cache = false, verbose = false, as_json = false, no_link = false;
  double timeout_s = 10;

  app.add_option("package", package, "The package to load (NAME.cudaqpkg)")->required();
  auto *call_opt = app.add_option("--call", call_name, "Call the handler NAME once")->group("What");
  app.add_option("--arg", args, "An argument of the call: TYPE:V[,V...], hex:HEX, str:TEXT, @FILE")
      ->group("What");
  app.add_option("--result", result_text, "How to print results: hex, str, raw or a numeric type")
      ->group("What");
  auto *calls_opt =
      app.add_option("--calls", calls_file, "Send one request per line of FILE (- for stdin)")
          ->group("What");
  auto *bench_opt =
      app.add_option("--bench", bench_count, "Send N requests and print latency and throughput")
          ->group("What");
  app.add_option("--inflight", inflight, "Requests kept in flight by --bench (default 1)")
      ->group("What");
  auto *serve_opt = app.add_flag("--serve", serve_flag,
                                 "Serve clients through a self-fed bridge (default udp) until "
                                 "SIGINT, SIGTERM or a bound")
                        ->group("What");
  auto *count_opt =
      app.add_option("--count", serve_opts.count, "--serve: stop after N requests were answered")
          ->group("What");
  auto *duration_opt =
      app.add_option("--duration", serve_opts.duration_s, "--serve: stop after S seconds")
          ->group("What");
  auto *interval_opt = app.add_option("--stats-interval", serve_opts.stats_interval_s,
                                      "--serve: print the live counters every S seconds")
                           ->group("What");
  auto *list_opt =
      app.add_flag("--list", list, "List the handlers and the cubin this GPU would load")
          ->group("What");
  app.add_option("--global", globals, "Write NAME=SPEC into the __device__ global NAME at load")
      ->group("What");
  app.add_option("--device", device_text,
                 "The CUDA device (default 0); with --serve also a list (0,1) or 'all'")
      ->group("Loading");
  app.add_option("--bridge", opts.link.bridge, "Bridge name or library path (default loopback)")
      ->group("Loading");
  app.add_option("--bridge-arg", opts.bridge_config, "The bridge's options, KEY=VALUE[,...]")
      ->group("Loading");
  app.add_option("--dispatcher", opts.link.dispatcher,
                 "A custom dispatch kernel the package exports, or 'builtin'")
      ->group("Loading");
  auto *grid_opt = app.add_option("--grid", grid_text,
                                  "Launch shape of a custom dispatch kernel: BLOCKS,THREADS")
                       ->group("Loading");
  std::string lto_text;
  app.add_option("--lto", lto_text,
                 "How a link at load links LTO-IR: per-tu or whole (default per-tu; named, the "
                 "package's cubin is used only when linked in that mode)")
      ->check(CLI::IsMember({"per-tu", "whole"}))
      ->group("Loading");
  app.add_flag("--no-link", no_link, "Never link at load: the package or the cache must have it")
      ->group("Loading");
  app.add_flag("--store", opts.policy.store, "Store a cubin linked at load in the package too")
      ->group("Loading");
  app.add_flag("--no-cache", no_cache, "Neither read nor write the link cache")->group("Loading");
  app.add_option("--cache-dir", cache_dir, "Link cache directory")->group("Loading");
  app.add_option("--remote-cache", remote_cache,
                 "Remote link cache: URL[#options] of an HTTP server that stores on PUT "
                 "(default $CUDAQ_RT_REMOTE_CACHE)")
      ->group("Loading");
  app.add_option("--stop-timeout", opts.stop_timeout_s,
                 "Seconds to wait for the kernel to stop (default 5)")
      ->group("Loading");
  app.add_option("--timeout", timeout_s, "Seconds a request waits for its response (default 10)")
      ->group("Loading");
  app.add_flag("-v,--verbose", verbose, "Print the path taken and each step's time")
      ->group("Output");
  app.add_flag("--json", as_json, "Print one JSON document on stdout")->group("Output");
  call_opt->excludes(calls_opt)->excludes(list_opt);
  calls_opt->excludes(bench_opt)->excludes(list_opt);
  bench_opt->excludes(list_opt);
  serve_opt->excludes(call_opt)->excludes(calls_opt)->excludes(bench_opt)->excludes(list_opt);

  if (int rc = driver::parse(tool, app, argc, argv); rc >= 0)
    return rc;
  auto usage = [](const std::string &message) {
    std::fprintf(stderr, "%s: error: %s\nRun '%s --help' for usage.\n", tool, message.c_str(),
                 tool);
    return driver::exit_usage;
  };
  if (!lto_text.empty())
    opts.link.lto_mode = parse_lto_mode(lto_text);
  const bool serving = serve_flag;
  if (!*call_opt && !*calls_opt && !*bench_opt && !list && !serving)
    return usage("nothing to do: give --call NAME, --calls FILE, --bench N, --serve or --list");
  for (auto *o : {count_opt, duration_opt, interval_opt})
    if (*o && !serving)
      return usage(o->get_name() + " needs --serve");
  if (serving && (*count_opt && serve_opts.count == 0))
    return usage("--count: must be at least 1");
  if (serving && *duration_opt && !(serve_opts.duration_s > 0))
    return usage("--duration: must be more than 0 seconds");
  if (serving && *interval_opt && !(serve_opts.stats_interval_s > 0))
    return usage("--stats-interval: must be more than 0 seconds");
  if (!args.empty() && !*call_opt)
    return usage("--arg needs --call");
  if (device_text != "all") {
    auto devices = parse_devices(device_text);
    if (!devices)
      return usage(devices.error().str());
    if (devices->size() > 1 && !serving)
      return usage("--device " + device_text + ": several GPUs need --serve");
    opts.device = devices->front();
    serve_opts.devices = *devices;
  } else if (!serving) {
    return usage("--device all: several GPUs need --serve");
  }
  auto result_type = parse_result_type(result_text);
  if (!result_type)
    return usage("--result: " + result_type.error().str());
  if (result_type->kind == ResultType::Kind::raw && (as_json || *calls_opt))
    return usage("--result raw writes bytes to stdout: not with --json or --calls");
  if (*grid_opt) {
    auto positive = [](std::string_view s) -> std::optional<unsigned> {
      unsigned v = 0;
      auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
      if (s.empty() || s[0] == '+' || ec != std::errc() || end != s.data() + s.size() || !v)
        return std::nullopt;
      return v;
    };
    const size_t comma = grid_text.find(',');
    auto blocks = positive(std::string_view(grid_text).substr(0, comma));
    auto threads = comma == std::string::npos
                       ? std::nullopt
                       : positive(std::string_view(grid_text).substr(comma + 1));
    if (!blocks || !threads)
      return usage("--grid: " + quote(grid_text) + " is not BLOCKS,THREADS (two positive numbers)");
    opts.shape = LaunchShape{*blocks, *threads};
  }
  if (*bench_opt && bench_count == 0)
    return usage("--bench: the number of requests must be at least 1");
  if (inflight == 0)
    return usage("--inflight: must be at least 1");
  if (!(timeout_s > 0))
    return usage("--timeout: must be more than 0 seconds");
  if (!(opts.stop_timeout_s >= 0))
    return usage("--stop-timeout: must be 0 seconds or more");
  for (const std::string &g : globals) {
    auto value = parse_global(g, parse_bound);
    if (!value)
      return usage(value.error().str());
    opts.globals.push_back(std::move(*value));
  }
  Request one{call_name, {}, *result_type};
  if (*call_opt) {
    auto payload = encode_args(args, parse_bound);
    if (!payload)
      return usage(payload.error().str());
    one.payload = std::move(*payload);
  }
  opts.package = package;
  opts.policy.allow_link = !no_link;
  opts.cache = {.dir = cache_dir, .remote = remote_cache, .disable = no_cache};

  // A module that CUDA loads lazily while the persistent kernel runs can deadlock behind it: this
  // process owns its CUDA state, so everything loads eagerly (the load path forces its own module
  // either way; this covers the bridge's).
  ::setenv("CUDA_MODULE_LOADING", "EAGER", 0);

  json doc = json::object();
  // With --json, a failure to load is a document too: stdout always holds one.
  auto load_failure = [&](const Error &e) {
    if (as_json)
      std::cout << json{{"package", package}, {"error", e.str()}, {"exit_status", 1}}.dump(
                       2, ' ', false, json::error_handler_t::replace)
                << "\n";
    return driver::fail(tool, e);
  };
  if (list) {
    auto preview = preview_load(opts);
    if (!preview)
      return load_failure(preview.error());
    for (const std::string &w : preview->warnings)
      driver::warn(tool, w);
    if (as_json) {
      std::cout << preview_json(*preview).dump(2, ' ', false, json::error_handler_t::replace)
                << "\n";
    } else {
      std::cout << format_preview(*preview);
    }
    return preview->loadable() ? run_exit_ok : driver::exit_failure;
  }

  if (serving) {
    if (opts.link.bridge.empty())
      opts.link.bridge = "udp";
    if (serve_opts.devices.empty()) {
      auto devices = parse_devices(device_text);
      if (!devices)
        return load_failure(devices.error());
      serve_opts.devices = *devices;
    }
    serve_opts.load = opts;
    return serve(serve_opts, as_json);
  }

  auto server = Server::start(opts);
  if (!server)
    return load_failure(server.error());
  Server &s = **server;
  for (const std::string &w : s.report().warnings)
    driver::warn(tool, w);
  if (verbose)
    for (const std::string &n : s.report().notes)
      std::fprintf(stderr, "%s: note: %s\n", tool, n.c_str());

  int status = run_exit_ok;
  std::optional<Error> fatal;
  json calls = json::array();
  if (*call_opt && !*bench_opt) {
    Outcome o = run_request(s, one, 1, timeout_s, as_json, calls);
    status = o.status;
    fatal = o.fatal;
  } else if (*calls_opt) {
    std::ifstream file;
    std::istream *in = &std::cin;
    if (calls_file != "-") {
      file.open(calls_file);
      if (!file)
        return driver::fail(tool, make_error(calls_file, "cannot open"));
      in = &file;
    }
    std::string line;
    for (size_t n = 1; !fatal && std::getline(*in, line); ++n) {
      auto parsed = parse_call_line(line, n, calls_file, parse_bound);
      if (!parsed) {
        driver::fail(tool, parsed.error());
        if (as_json)
          calls.push_back({{"line", n}, {"error", parsed.error().str()}});
        else
          std::printf("error: line %zu\n", n);
        status = worse_run_exit_status(status, driver::exit_usage);
        continue;
      }
      if (!*parsed)
        continue;
      Request r{(*parsed)->handler, std::move((*parsed)->payload),
                (*parsed)->result.value_or(*result_type)};
      Outcome o = run_request(s, r, static_cast<uint32_t>(n), timeout_s, as_json, calls);
      status = worse_run_exit_status(status, o.status);
      fatal = o.fatal;
    }
  } else if (*bench_opt) {
    Request r = one;
    const auto &handlers = s.report().handlers;
    if (!*call_opt) {
      bool echo = std::find(handlers.begin(), handlers.end(), "echo") != handlers.end();
      if (!echo && handlers.empty())
        return driver::fail(tool, make_error(package, "exports no handler to benchmark"));
      r.handler = echo ? "echo" : handlers.front();
      r.payload.assign(echo ? 8 : 0, 0);
    }
    if (auto e = refuse(s, r)) {
      driver::fail(tool, *e);
      status = driver::exit_usage;
    } else {
      BenchOptions bo;
      bo.requests = bench_count;
      bo.inflight = inflight;
      bo.warmup = std::min<uint64_t>(1000, bench_count);
      bo.timeout_s = timeout_s;
      bo.expect_echo = r.handler == "echo";
      auto result = bench(s, r.handler, r.payload, bo);
      if (!result) {
        fatal = result.error();
      } else {
        const LatencyStats &l = result->latency;
        if (as_json) {
          doc["bench"] = {{"handler", r.handler},
                          {"payload_bytes", r.payload.size()},
                          {"requests", result->requests},
                          {"inflight", std::min(inflight, s.report().num_slots)},
                          {"wrong", result->wrong},
                          {"seconds", result->seconds},
                          {"requests_per_s", result->requests_per_s},
                          {"latency_us",
                           {{"min", l.min_us},
                            {"mean", l.mean_us},
                            {"p50", l.p50_us},
                            {"p90", l.p90_us},
                            {"p99", l.p99_us},
                            {"p99.9", l.p999_us},
                            {"max", l.max_us}}}};
        } else {
          std::printf("%s: %llu requests of %zu bytes, %u in flight, %llu wrong\n"
                      "latency us: min %.2f  mean %.2f  p50 %.2f  p90 %.2f  p99 %.2f  "
                      "p99.9 %.2f  max %.2f\n"
                      "throughput: %.0f requests/s\n",
                      r.handler.c_str(), (unsigned long long)result->requests, r.payload.size(),
                      std::min(inflight, s.report().num_slots), (unsigned long long)result->wrong,
                      l.min_us, l.mean_us, l.p50_us, l.p90_us, l.p99_us, l.p999_us, l.max_us,
                      result->requests_per_s);
        }
        if (result->wrong)
          status = driver::exit_failure;
      }
    }
  }

  if (fatal) {
    driver::fail(tool, *fatal);
    status = driver::exit_failure;
  }
  if (auto st = s.stop(); !st) {
    driver::fail(tool, st.error());
    status = driver::exit_failure;
  }
  if (verbose)
    print_verbose(s.report());
  if (as_json) {
    doc.update(report_json(s.report()));
    doc["times"] = times_json(s.report().times);
    if (*call_opt || *calls_opt)
      doc["calls"] = calls;
    cudaq_rt_dispatch_stats st = s.stats();
    doc["stats"] = {{"requests", st.requests},
                    {"ok", st.ok},
                    {"handler_errors", st.handler_errors},
                    {"protocol_errors", st.protocol_errors}};
    if (fatal)
      doc["error"] = fatal->str();
    doc["exit_status"] = status;
    std::cout << doc.dump(2, ' ', false, json::error_handler_t::replace) << "\n";
  }
  if (s.hung()) {
    // Returning would run exit-time cleanup that waits for the hung kernel.
    std::fflush(stdout);
    std::fflush(stderr);
    std::_Exit(status);
  }
  return status;
}
