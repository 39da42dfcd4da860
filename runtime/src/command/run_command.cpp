#include "command/run_command.h"

#include "base/nvjitlink_library.h"
#include "cudaq_rt/wire.h"
#include "oci/layout_source.h"
#include "oci/package_argument.h"
#include "oci/store.h"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <iostream>

namespace cudaq_rt {

using nlohmann::json;

namespace {

constexpr const char *tool = "cudaq-rt-run";

// The payload bound before the bridge's slot size is known; the real one is checked after load.
constexpr size_t parse_bound = size_t{16} << 20;

Error usage(std::string message) {
  return Error{"", std::move(message)};
}

__attribute__((format(printf, 1, 2))) std::string formatted(const char *format, ...) {
  va_list args, again;
  va_start(args, format);
  va_copy(again, args);
  const int n = std::vsnprintf(nullptr, 0, format, args);
  va_end(args);
  std::string text(n > 0 ? static_cast<size_t>(n) : 0, '\0');
  std::vsnprintf(text.data(), text.size() + 1, format, again);
  va_end(again);
  return text;
}

void write_warnings(ToolOutput &output, const std::vector<std::string> &warnings) {
  for (const std::string &w : warnings)
    output.warn(w);
}

// With --json, a failure to load is a document too: stdout always holds one.
int fail_to_load(const RunOptions &options, ToolOutput &output, const Error &e) {
  if (options.json)
    output.out_json(
        {{"package", options.load.package.string()}, {"error", e.str()}, {"exit_status", 1}});
  output.fail(e);
  return run_exit_failure;
}

// --count, --duration and --stats-interval: only with --serve, and each a real bound.
std::optional<Error> check_serve_bounds(const RunArgs &args) {
  const std::pair<const char *, bool> bounds[] = {
      {"--count", args.count.has_value()},
      {"--duration", args.duration_s.has_value()},
      {"--stats-interval", args.stats_interval_s.has_value()},
      {"--watch", args.watch_s.has_value()}};
  for (const auto &[name, given] : bounds)
    if (given && !args.serve)
      return usage(cat(name, " needs --serve"));
  if (args.count && *args.count == 0)
    return usage("--count: must be at least 1");
  if (args.duration_s && !(*args.duration_s > 0))
    return usage("--duration: must be more than 0 seconds");
  if (args.stats_interval_s && !(*args.stats_interval_s > 0))
    return usage("--stats-interval: must be more than 0 seconds");
  return std::nullopt;
}

// --device: one GPU, or with --serve several. The text is parsed here, once; "all" only when
// serving starts, since counting the GPUs asks the driver.
std::optional<Error> select_devices(const RunArgs &args, RunOptions &options) {
  if (args.device == "all") {
    if (!args.serve)
      return usage("--device all: several GPUs need --serve");
    options.all_devices = true;
    return std::nullopt;
  }
  auto devices = parse_devices(args.device);
  if (!devices)
    return usage(devices.error().str());
  if (devices->size() > 1 && !args.serve)
    return usage("--device " + args.device + ": several GPUs need --serve");
  options.load.device = devices->front();
  options.serve.devices = std::move(*devices);
  return std::nullopt;
}

// --bench, --inflight, --timeout and --stop-timeout: counts and times that can be met.
std::optional<Error> check_counts(const RunArgs &args, double stop_timeout_s) {
  if (args.bench && *args.bench == 0)
    return usage("--bench: the number of requests must be at least 1");
  if (args.inflight == 0)
    return usage("--inflight: must be at least 1");
  if (!(args.timeout_s > 0))
    return usage("--timeout: must be more than 0 seconds");
  if (!(stop_timeout_s >= 0))
    return usage("--stop-timeout: must be 0 seconds or more");
  return std::nullopt;
}

RunAction action_of(const RunArgs &args) {
  if (args.list)
    return RunAction::list;
  if (args.serve)
    return RunAction::serve;
  if (args.call && !args.bench)
    return RunAction::call;
  return args.calls_file ? RunAction::calls : RunAction::bench;
}

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
            {"arch", r.record.arch.str()},
            {"digest", r.record.cubin.str()},
            {"size", r.record.cubin_size},
            {"link_ms", r.record.link_ms},
            {"nvjitlink", r.record.nvjitlink_version}}},
          {"nvjitlink", loaded_nvjitlink_json()},
          {"bridge", r.bridge},
          {"dispatcher", r.dispatcher},
          {"kernel", r.kernel},
          {"slot_size", r.slot_size},
          {"slots", r.num_slots},
          {"warnings", r.warnings}};
}

// -v: the path taken and each step's time.
std::string format_verbose(const LoadReport &r) {
  const LoadTimes &t = r.times;
  std::string text = formatted(
      "%s: GPU %d: %s (%s, driver %s)\n"
      "%s: cubin: %s from the %s (%llu bytes, %s)\n"
      "%s: times: context %.1f ms, open+verify %.1f ms, %s %.1f ms, load %.1f ms, "
      "launch %.3f ms",
      tool, r.device.ordinal, r.device.name.c_str(), r.device.arch().c_str(),
      r.device.driver().c_str(), tool, r.record.arch.str().c_str(), cubin_source_name(r.source),
      (unsigned long long)r.record.cubin_size, r.record.cubin.short_str().c_str(), tool,
      t.context_ms, t.open_ms, r.source == CubinSource::link ? "link" : "lookup", t.cubin_ms,
      t.load_ms, t.launch_ms);
  if (t.first_response_ms)
    text += formatted(", first response %.3f ms", *t.first_response_ms);
  if (const NvJitLinkLibrary *lib = loaded_nvjitlink())
    text += cat("\n", tool, ": links with ", lib->describe());
  return text + "\n";
}

json bench_json(const RunRequest &r, const BenchResult &result, uint32_t inflight) {
  const LatencyStats &l = result.latency;
  return {{"handler", r.handler},
          {"payload_bytes", r.payload.size()},
          {"requests", result.requests},
          {"inflight", inflight},
          {"wrong", result.wrong},
          {"seconds", result.seconds},
          {"requests_per_s", result.requests_per_s},
          {"latency_us",
           {{"min", l.min_us},
            {"mean", l.mean_us},
            {"p50", l.p50_us},
            {"p90", l.p90_us},
            {"p99", l.p99_us},
            {"p99.9", l.p999_us},
            {"max", l.max_us}}}};
}

std::string format_bench(const RunRequest &r, const BenchResult &result, uint32_t inflight) {
  const LatencyStats &l = result.latency;
  return formatted("%s: %llu requests of %zu bytes, %u in flight, %llu wrong\n"
                   "latency us: min %.2f  mean %.2f  p50 %.2f  p90 %.2f  p99 %.2f  "
                   "p99.9 %.2f  max %.2f\n"
                   "throughput: %.0f requests/s\n",
                   r.handler.c_str(), (unsigned long long)result.requests, r.payload.size(),
                   inflight, (unsigned long long)result.wrong, l.min_us, l.mean_us, l.p50_us,
                   l.p90_us, l.p99_us, l.p999_us, l.max_us, result.requests_per_s);
}

// What sending requests came to.
struct Outcome {
  int status = run_exit_ok;
  std::optional<Error> fatal; // the kernel failed or stopped answering: nothing more is sent
};

// One request: refused, or sent, answered and shown (or put in `calls`).
Outcome run_request(Server &server, const RunRequest &r, uint32_t request_id,
                    const RunOptions &options, ToolOutput &output, json &calls) {
  if (auto e = refuse_request(server.report(), r)) {
    if (options.json)
      calls.push_back({{"handler", r.handler}, {"error", e->str()}});
    output.fail(*e);
    return {run_exit_usage, std::nullopt};
  }
  auto frame = build_request_frame(r.handler, r.payload, request_id, request_id);
  if (!frame) {
    output.fail(frame.error());
    return {run_exit_usage, std::nullopt};
  }
  auto reply = call(server, *frame, options.timeout_s);
  if (!reply)
    return {run_exit_failure, reply.error()};
  return {show_answer(r, *reply, output, options.json ? &calls : nullptr), std::nullopt};
}

// --calls: one request a line from `in`, its request_id the line number; a line that does not
// parse is reported and skipped.
Expected<Outcome> run_calls(Server &server, std::istream *in, const RunOptions &options,
                            ToolOutput &output, json &calls) {
  Outcome total;
  std::string line;
  for (size_t n = 1; !total.fatal && std::getline(*in, line); ++n) {
    auto parsed = parse_call_line(line, n, options.calls_file, parse_bound);
    if (!parsed) {
      output.fail(parsed.error());
      if (options.json)
        calls.push_back({{"line", n}, {"error", parsed.error().str()}});
      else
        output.out(cat("error: line ", n, "\n"));
      total.status = worse_run_exit_status(total.status, run_exit_usage);
      continue;
    }
    if (!*parsed)
      continue;
    RunRequest r{(*parsed)->handler, std::move((*parsed)->payload),
                 (*parsed)->result.value_or(options.result)};
    Outcome o = run_request(server, r, static_cast<uint32_t>(n), options, output, calls);
    total.status = worse_run_exit_status(total.status, o.status);
    total.fatal = o.fatal;
  }
  return total;
}

// --bench: the request sent again and again, the summary shown (or put in `doc`). An error: the
// package exports no handler to benchmark, and nothing was sent.
Expected<Outcome> run_bench(Server &server, const RunOptions &options, ToolOutput &output,
                            json &doc) {
  auto r = options.call
               ? Expected<RunRequest>(*options.call)
               : default_bench_request(server.report().handlers, options.load.package.string());
  if (!r)
    return r.error();
  if (auto e = refuse_request(server.report(), *r)) {
    output.fail(*e);
    return Outcome{run_exit_usage, std::nullopt};
  }
  BenchOptions bo;
  bo.requests = options.bench_requests;
  bo.inflight = options.inflight;
  bo.warmup = std::min<uint64_t>(1000, options.bench_requests);
  bo.timeout_s = options.timeout_s;
  bo.expect_echo = r->handler == "echo";
  auto result = bench(server, r->handler, r->payload, bo);
  if (!result)
    return Outcome{run_exit_ok, result.error()};
  const uint32_t inflight = std::min(options.inflight, server.report().num_slots);
  if (options.json)
    doc["bench"] = bench_json(*r, *result, inflight);
  else
    output.out(format_bench(*r, *result, inflight));
  return Outcome{result->wrong ? run_exit_failure : run_exit_ok, std::nullopt};
}

Expected<Outcome> send_requests(Server &server, std::istream *calls_in, const RunOptions &options,
                                ToolOutput &output, json &doc, json &calls) {
  if (options.action == RunAction::call)
    return run_request(server, *options.call, 1, options, output, calls);
  if (options.action == RunAction::calls)
    return run_calls(server, calls_in, options, output, calls);
  return run_bench(server, options, output, doc);
}

// What can be refused without a GPU is refused before one is asked: a --calls file that does not
// open, a --call or --bench handler the package does not export. The package is opened (and
// checked under --trust) twice: a manifest read, against a context's hundreds of milliseconds.
// Returns the exit status of a refusal, said as a load failure is, or nullopt to go on.
std::optional<int> check_before_gpu(const RunOptions &options, ToolOutput &output,
                                    std::ifstream &calls_file) {
  auto refuse = [&](const Error &e, int status) {
    if (options.json)
      output.out_json({{"package", options.load.package.string()},
                       {"error", e.str()},
                       {"exit_status", status}});
    output.fail(e);
    return status;
  };
  if (options.action == RunAction::calls && options.calls_file != "-") {
    calls_file.open(options.calls_file);
    if (!calls_file)
      return refuse(make_error(options.calls_file, "cannot open: ", std::strerror(errno)),
                    run_exit_failure);
  }
  if (!options.call)
    return std::nullopt;
  auto package = preview_package(options.load);
  if (!package)
    return refuse(package.error(), run_exit_failure);
  if (auto e = refuse_unknown_handler(options.load.package, package->handlers, package->aliases,
                                      options.call->handler))
    return refuse(*e, run_exit_usage);
  return std::nullopt;
}

// The --json document of a session that loaded: what was loaded, its times, the answers, the
// kernel's counters, the error that ended it and the exit status.
json session_json(const RunOptions &options, Server &server, json doc, json calls,
                  const Outcome &outcome) {
  doc.update(report_json(server.report()));
  doc["times"] = times_json(server.report().times);
  if (options.call || options.action == RunAction::calls)
    doc["calls"] = std::move(calls);
  cudaq_rt_dispatch_stats st = server.stats();
  doc["stats"] = {{"requests", st.requests},
                  {"ok", st.ok},
                  {"handler_errors", st.handler_errors},
                  {"protocol_errors", st.protocol_errors}};
  if (outcome.fatal)
    doc["error"] = outcome.fatal->str();
  doc["exit_status"] = outcome.status;
  return doc;
}

// --call, --calls, --bench: the package started on one GPU, the requests sent, the kernel stopped.
RunOutcome run_requests(const RunOptions &options, ToolOutput &output, Gpu &gpu) {
  std::ifstream calls_file;
  if (auto refused = check_before_gpu(options, output, calls_file))
    return {*refused};
  auto server = Server::start(options.load, gpu);
  if (!server)
    return {fail_to_load(options, output, server.error())};
  Server &s = **server;
  write_warnings(output, s.report().warnings);
  if (options.verbose)
    for (const std::string &n : s.report().notes)
      output.note(n);

  json doc = json::object();
  json calls = json::array();
  Expected<Outcome> sent =
      send_requests(s, calls_file.is_open() ? &calls_file : &std::cin, options, output, doc, calls);
  if (!sent)
    return {fail_to_load(options, output, sent.error())};
  Outcome outcome = std::move(*sent);
  if (outcome.fatal) {
    output.fail(*outcome.fatal);
    outcome.status = run_exit_failure;
  }
  if (auto st = s.stop(); !st) {
    output.fail(st.error());
    outcome.status = run_exit_failure;
  }
  if (options.verbose)
    output.err(format_verbose(s.report()));
  if (options.json)
    output.out_json(session_json(options, s, std::move(doc), std::move(calls), outcome));
  return {outcome.status, s.hung()};
}

// --list: what would load on the GPU, or for each arch asked, without loading it.
int list_package(const RunOptions &options, ToolOutput &output, Gpu &gpu) {
  std::optional<LoadPreview> preview;
  for (size_t i = 0; i == 0 || i < options.list_archs.size(); ++i) {
    LoadOptions load = options.load;
    if (!options.list_archs.empty())
      load.arch = options.list_archs[i];
    auto one = preview_load(load, gpu);
    if (!one)
      return fail_to_load(options, output, one.error());
    if (!preview) {
      preview = std::move(*one);
      continue;
    }
    preview->targets.insert(preview->targets.end(), one->targets.begin(), one->targets.end());
    for (std::string &w : one->warnings)
      if (std::find(preview->warnings.begin(), preview->warnings.end(), w) ==
          preview->warnings.end())
        preview->warnings.push_back(std::move(w));
  }
  write_warnings(output, preview->warnings);
  if (options.json)
    output.out_json(preview_json(*preview));
  else
    output.out(format_preview(*preview));
  return preview->loadable() ? run_exit_ok : run_exit_failure;
}

Expected<RunOptions> resolve_package(const RunOptions &given, ToolOutput &output,
                                     std::optional<PackageArgument> &layout);

// What a reload of a --serve session loads: the package as named resolved again (an oci:// tag
// pulled again, a layout copied again) and the --global values read again. A layout's copy is
// kept until the next reload: a loaded module needs nothing of its package's directory.
ReloadSource reload_source(const RunOptions &given, ToolOutput &output) {
  ReloadSource r;
  auto layouts = std::make_shared<std::deque<PackageArgument>>();
  r.next = [given, &output, layouts]() -> Expected<LoadOptions> {
    std::optional<PackageArgument> layout;
    auto resolved = resolve_package(given, output, layout);
    if (!resolved)
      return std::move(resolved).take_error();
    LoadOptions load = resolved->load;
    load.globals.clear();
    for (const std::string &spec : given.global_specs) {
      auto value = parse_global(spec, parse_bound);
      if (!value)
        return std::move(value).take_error();
      load.globals.push_back(std::move(*value));
    }
    // The copy is read while the reload stages and swaps it; the one before, by nothing now.
    layouts->clear();
    if (layout)
      layouts->push_back(std::move(*layout));
    return load;
  };
  if (given.watch_s > 0) {
    r.fingerprint = [given] { return run_fingerprint(given); };
    r.watch_interval_s = given.watch_s;
  }
  return r;
}

// --serve: every GPU behind its own bridge instance until `stop`, a bound or a failure; reloaded
// on `reload` (SIGHUP) and, with --watch, when what it loads changes.
RunOutcome serve(const RunOptions &given, const RunOptions &options, ToolOutput &output,
                 const std::atomic<bool> &stop, std::atomic<bool> *reload, Gpu &gpu) {
  ServeOptions serve_options = options.serve;
  serve_options.load = options.load;
  serve_options.reload = reload_source(given, output);
  if (options.all_devices) {
    auto devices = parse_devices("all", gpu);
    if (!devices)
      return {fail_to_load(options, output, devices.error())};
    serve_options.devices = std::move(*devices);
  }
  auto service = Service::start(serve_options, gpu);
  if (!service)
    return {fail_to_load(options, output, service.error())};
  for (const ServeInstance &g : (*service)->instances()) {
    write_warnings(output, g.report.warnings);
    output.err(formatted("%s: serving on %s (GPU %d: %s, %s, bridge %s, cubin from the %s)\n", tool,
                         g.address.c_str(), g.device, g.report.device.name.c_str(),
                         g.report.device.arch().c_str(), g.report.bridge.c_str(),
                         cubin_source_name(g.report.source)));
  }
  output.flush();
  Service::Hooks hooks;
  hooks.tick = [&output](const ServeReport &live) {
    output.err(format_serve_report(live, false));
    output.flush();
  };
  hooks.reload = reload;
  hooks.reloaded = [&output](const ReloadRecord &r) {
    output.err(cat(tool, ": ", format_reload(r), "\n"));
    for (const std::string &w : r.warnings)
      output.warn(w);
    output.flush();
  };
  ServeReport report = (*service)->run(stop, hooks);
  const int status = report.errors.empty() ? run_exit_ok : run_exit_failure;
  for (const Error &e : report.errors)
    output.fail(e);
  if (options.json) {
    json doc = serve_report_json(report);
    doc["package"] = options.load.package.string();
    doc["bridge"] = report.gpus.empty() ? "" : report.gpus.front().report.bridge;
    doc["exit_status"] = status;
    output.out_json(doc);
  } else {
    output.out(format_serve_report(report, true));
  }
  output.flush();
  return {status, status != run_exit_ok};
}

} // namespace

Expected<LaunchShape> parse_grid(std::string_view text) {
  auto positive = [](std::string_view s) -> std::optional<unsigned> {
    unsigned v = 0;
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (s.empty() || s[0] == '+' || ec != std::errc() || end != s.data() + s.size() || !v)
      return std::nullopt;
    return v;
  };
  const size_t comma = text.find(',');
  auto blocks = positive(text.substr(0, comma));
  auto threads = comma == std::string_view::npos ? std::nullopt : positive(text.substr(comma + 1));
  if (!blocks || !threads)
    return usage("--grid: " + quote(text) + " is not BLOCKS,THREADS (two positive numbers)");
  return LaunchShape{*blocks, *threads};
}

Expected<RunOptions> make_run_options(RunArgs args) {
  if (!args.call && !args.calls_file && !args.bench && !args.list && !args.serve)
    return usage("nothing to do: give --call NAME, --calls FILE, --bench N, --serve or --list");
  if (auto e = check_serve_bounds(args))
    return *e;
  if (!args.args.empty() && !args.call)
    return usage("--arg needs --call");
  if (!args.nvjitlink.empty())
    if (auto lib = choose_nvjitlink(args.nvjitlink); !lib)
      return usage("--nvjitlink: " + lib.error().str());
  RunOptions o;
  o.load = std::move(args.load);
  if (auto e = select_devices(args, o))
    return *e;
  auto result = parse_result_type(args.result);
  if (!result)
    return usage("--result: " + result.error().str());
  if (result->kind == ResultType::Kind::raw && (args.json || args.calls_file))
    return usage("--result raw writes bytes to stdout: not with --json or --calls");
  if (args.grid) {
    auto shape = parse_grid(*args.grid);
    if (!shape)
      return shape.error();
    o.load.shape = *shape;
  }
  if (auto e = check_counts(args, o.load.stop_timeout_s))
    return *e;
  for (const std::string &g : args.globals) {
    auto value = parse_global(g, parse_bound);
    if (!value)
      return usage(value.error().str());
    o.load.globals.push_back(std::move(*value));
  }
  o.global_specs = args.globals;
  if (args.watch_s && !(*args.watch_s > 0 && *args.watch_s <= 86400))
    return usage("--watch: the interval must be above 0 and at most 86400 seconds");
  o.watch_s = args.watch_s.value_or(0);
  if (args.call) {
    auto payload = encode_args(args.args, parse_bound);
    if (!payload)
      return usage(payload.error().str());
    o.call = RunRequest{*args.call, std::move(*payload), *result};
  }

  o.action = action_of(args);
  o.load.package = args.package;
  o.offline = args.offline;
  o.trust = std::move(args.trust);
  if (is_layout_reference(args.package)) {
    if (auto ref = LayoutRef::parse(args.package); !ref)
      return usage(ref.error().message);
    if (o.load.policy.store)
      return usage("--store: not with an OCI image layout (it is copied, not written)");
  }
  if (is_oci_reference(args.package)) {
    if (auto ref = RegistryRef::parse(args.package); !ref)
      return usage(ref.error().message);
    if (o.load.policy.store)
      return usage("--store: not with an oci:// package (the store keeps the registry's package "
                   "as it was pushed)");
  } else if (args.offline) {
    return usage("--offline goes with an oci:// package");
  }
  if (!args.archs.empty()) {
    if (!args.list)
      return usage("--arch goes with --list (a load links for the GPU's own arch)");
    auto archs = parse_arch_list(args.archs, [] { return gpu_archs(); });
    if (!archs)
      return usage("--arch: " + archs.error().message);
    o.list_archs = std::move(*archs);
  }
  if (!args.lto.empty())
    o.load.link.lto_mode = parse_lto_mode(args.lto);
  o.load.policy.allow_link = !args.no_link;
  if (args.serve && o.load.link.bridge.empty())
    o.load.link.bridge = default_serve_bridge;
  o.calls_file = args.calls_file.value_or("");
  o.result = *result;
  o.bench_requests = args.bench.value_or(0);
  o.inflight = args.inflight;
  o.serve.count = args.count.value_or(0);
  o.serve.duration_s = args.duration_s.value_or(0);
  o.serve.stats_interval_s = args.stats_interval_s.value_or(0);
  o.timeout_s = args.timeout_s;
  o.verbose = args.verbose;
  o.json = args.json;
  return o;
}

Expected<RunRequest> default_bench_request(const std::vector<std::string> &handlers,
                                           const std::string &package) {
  const bool echo = std::find(handlers.begin(), handlers.end(), "echo") != handlers.end();
  if (!echo && handlers.empty())
    return make_error(package, "exports no handler to benchmark");
  return RunRequest{echo ? "echo" : handlers.front(), std::vector<uint8_t>(echo ? 8 : 0, 0), {}};
}

std::optional<Error> refuse_unknown_handler(const std::filesystem::path &package,
                                            const std::vector<std::string> &handlers,
                                            const std::vector<AliasEntry> &aliases,
                                            const std::string &handler) {
  const bool alias = std::any_of(aliases.begin(), aliases.end(),
                                 [&](const AliasEntry &a) { return a.name == handler; });
  if (alias || std::find(handlers.begin(), handlers.end(), handler) != handlers.end())
    return std::nullopt;
  std::string names;
  for (const std::string &h : handlers)
    names += cat(names.empty() ? "" : ", ", h);
  for (const AliasEntry &a : aliases)
    names += cat(", ", a.name, " (alias of ", a.handler, ")");
  return make_error(package.string(), "no handler ", quote(handler), ": the package exports ",
                    names.empty() ? std::string("none") : names);
}

std::optional<Error> refuse_request(const LoadReport &report, const RunRequest &r) {
  if (auto e = refuse_unknown_handler(report.package, report.handlers, report.aliases, r.handler))
    return e;
  const size_t room = report.slot_size - CUDAQ_RT_HEADER_SIZE;
  if (r.payload.size() > room)
    return make_error(report.package.string(), "the arguments of ", quote(r.handler), " are ",
                      r.payload.size(), " bytes, but the bridge's slots hold ", room,
                      " (slot_size ", report.slot_size, " less the 24-byte header)");
  return std::nullopt;
}

int show_answer(const RunRequest &r, const Reply &reply, ToolOutput &output, json *calls) {
  const Response &resp = reply.response;
  auto decoded = decode_result(r.result, resp.result);
  if (calls) {
    json j = {{"handler", r.handler},
              {"request_id", resp.request_id},
              {"status", resp.status},
              {"status_name", wire_status_name(resp.status)},
              {"result_hex", *decode_result(ResultType{ResultType::Kind::hex}, resp.result)},
              {"latency_us", reply.latency_us}};
    if (decoded && r.result.kind != ResultType::Kind::raw)
      j["result"] = *decoded;
    else if (!decoded)
      j["decode_error"] = decoded.error().str();
    calls->push_back(std::move(j));
  } else if (r.result.kind == ResultType::Kind::raw && decoded) {
    output.out(*decoded);
    output.err(status_text(resp.status) + "\n");
  } else if (!decoded) {
    output.out(cat(status_text(resp.status), ": (", decoded.error().str(), ")\n"));
  } else if (resp.status < 0 || resp.result.empty()) {
    output.out(status_text(resp.status) + "\n");
  } else {
    output.out(cat(status_text(resp.status), ": ", *decoded, "\n"));
  }
  output.flush();
  int status = run_exit_status(resp.status);
  if (!decoded && status == run_exit_ok)
    status = run_exit_usage;
  return status;
}

namespace {

// An oci:// package: fetched into the store under the cache directory (oci/store.h), then loaded
// from there as any package is.
Expected<StoredPackage> registry_package(const RunOptions &options, ToolOutput &output) {
  const std::string reference = options.load.package.string();
  auto got = package_from_reference(reference, options.load.cache, options.offline);
  if (!got)
    return std::move(got).take_error();
  for (const std::string &w : got->warnings)
    output.warn(w);
  if (options.verbose)
    output.note(cat(escape(reference), "@", got->manifest.str(), ": ",
                    got->pulled ? cat("pulled its manifest and signatures (", got->bytes,
                                      " bytes; the blobs the load reads follow) into ")
                                : cat("stored copy (", got->bytes, " bytes fetched) at "),
                    escape(got->package.string())));
  return got;
}

// The package as named, made into a directory to open: an oci:// reference pulled into the store,
// an OCI image layout another tool wrote copied and checked (`layout` holds the copy), else the
// directory itself. The same at the start and at each reload.
Expected<RunOptions> resolve_package(const RunOptions &given, ToolOutput &output,
                                     std::optional<PackageArgument> &layout) {
  const std::string named = given.load.package.string();
  RunOptions resolved = given;
  if (is_oci_reference(named)) {
    auto got = registry_package(given, output);
    if (!got)
      return std::move(got).take_error();
    resolved.load.package = got->package;
    resolved.load.blob_source = got->source;
  } else if (is_copied_package_argument(named)) {
    auto copy = package_argument(named, given.load.trust.trusted.get());
    if (!copy)
      return std::move(copy).take_error();
    if (given.verbose)
      output.note(cat(escape(named), "@", copy->image_manifest->str(), ": copied into ",
                      escape(copy->package.string())));
    resolved.load.package = copy->package;
    layout.emplace(std::move(*copy));
  }
  return resolved;
}

} // namespace

Expected<std::string> run_fingerprint(const RunOptions &options) {
  const std::string named = options.load.package.string();
  std::string text;
  if (is_oci_reference(named)) {
    auto got = package_from_reference(named, options.load.cache, options.offline);
    if (!got)
      return std::move(got).take_error();
    text = got->manifest.str();
  } else {
    // A layout's index names its images by digest; a package's manifest, its blobs.
    std::filesystem::path file = options.load.package / "manifest.json";
    if (is_layout_reference(named)) {
      auto ref = LayoutRef::parse(named);
      if (!ref)
        return std::move(ref).take_error();
      file = ref->dir / "index.json";
    } else if (is_copied_package_argument(named)) {
      file = options.load.package / "index.json"; // a layout directory named as it is
    }
    std::ifstream in(file, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), {});
    if (!in && !in.eof())
      return make_error(file.string(), "cannot read: ", std::strerror(errno));
    if (bytes.empty())
      return make_error(file.string(), "cannot read, or empty");
    text = sha256(std::span(reinterpret_cast<const uint8_t *>(bytes.data()), bytes.size())).str();
  }
  for (const std::string &spec : options.global_specs) {
    auto value = parse_global(spec, parse_bound);
    if (!value)
      return std::move(value).take_error();
    text += cat(" ", value->name, "=", sha256(value->bytes).str());
  }
  return text;
}

RunOutcome run(const RunOptions &asked, ToolOutput &output, const std::atomic<bool> &stop,
               std::atomic<bool> *reload, Gpu &gpu) {
  RunOptions given = asked;
  auto trust =
      resolve_trust(asked.trust, [](const char *var) -> const char * { return std::getenv(var); });
  if (!trust)
    return {fail_to_load(asked, output, trust.error())};
  given.load.trust = std::move(*trust);
  std::optional<PackageArgument> layout;
  auto resolved = resolve_package(given, output, layout);
  if (!resolved)
    return {fail_to_load(given, output, resolved.error())};
  const RunOptions &options = *resolved;
  // A module that CUDA loads lazily while the persistent kernel runs can deadlock behind it: a
  // run session owns its process's CUDA state, so everything loads eagerly (the load path forces
  // its own module either way; this covers the bridge's).
  ::setenv("CUDA_MODULE_LOADING", "EAGER", 0);
  if (options.action == RunAction::list)
    return {list_package(options, output, gpu)};
  if (options.action == RunAction::serve)
    return serve(given, options, output, stop, reload, gpu);
  return run_requests(options, output, gpu);
}

} // namespace cudaq_rt
