// cudaq-rt-run: load a package on a GPU and call, batch-call, benchmark, list or serve its
// handlers. The options go into RunArgs; the run session (command/run_command.h) checks them and
// does the rest. Options are documented in man/cudaq-rt-run.1; keep the two in step.
#include "../common/driver.h"

#include "command/run_command.h"

#include <cstdio>
#include <cstdlib>

using namespace cudaq_rt;

namespace {
constexpr const char *tool = "cudaq-rt-run";

void add_options(CLI::App &app, RunArgs &a) {
  app.add_option("package", a.package,
                 "The package to load (NAME.cudaqpkg, or oci://HOST[:PORT]/REPO[:TAG] from a "
                 "registry)")
      ->required();
  auto *call_opt =
      driver::add_optional(app, "--call", a.call, "Call the handler NAME once")->group("What");
  app.add_option("--arg", a.args,
                 "An argument of the call: TYPE:V[,V...], hex:HEX, str:TEXT, @FILE")
      ->group("What");
  app.add_option("--result", a.result, "How to print results: hex, str, raw or a numeric type")
      ->group("What");
  auto *calls_opt = driver::add_optional(app, "--calls", a.calls_file,
                                         "Send one request per line of FILE (- for stdin)")
                        ->group("What");
  auto *bench_opt = driver::add_optional(app, "--bench", a.bench,
                                         "Send N requests and print latency and throughput")
                        ->group("What");
  app.add_option("--inflight", a.inflight, "Requests kept in flight by --bench (default 1)")
      ->group("What");
  auto *serve_opt = app.add_flag("--serve", a.serve,
                                 "Serve clients through a self-fed bridge (default udp) until "
                                 "SIGINT, SIGTERM or a bound; SIGHUP reloads")
                        ->group("What");
  driver::add_optional(app, "--count", a.count, "--serve: stop after N requests were answered")
      ->group("What");
  driver::add_optional(app, "--duration", a.duration_s, "--serve: stop after S seconds")
      ->group("What");
  driver::add_optional(app, "--stats-interval", a.stats_interval_s,
                       "--serve: print the live counters every S seconds")
      ->group("What");
  driver::add_optional(app, "--watch", a.watch_s,
                       "--serve: reload when the package or a --global file changes, looked at "
                       "every S seconds")
      ->group("What");
  auto *list_opt =
      app.add_flag("--list", a.list, "List the handlers and the cubin this GPU would load")
          ->group("What");
  app.add_option("--arch", a.archs,
                 "--list: say what would load for these archs (sm_NN[a|f], comma-separated or "
                 "repeated; native: this machine's GPUs), asking no GPU")
      ->group("What");
  app.add_option("--global", a.globals, "Write NAME=SPEC into the __device__ global NAME at load")
      ->group("What");
  app.add_option("--device", a.device,
                 "The CUDA device (default 0); with --serve also a list (0,1) or 'all'")
      ->group("Loading");
  app.add_option("--bridge", a.load.link.bridge, "Bridge name or library path (default loopback)")
      ->group("Loading");
  app.add_option("--bridge-arg", a.load.bridge_config, "The bridge's options, KEY=VALUE[,...]")
      ->group("Loading");
  app.add_option("--dispatcher", a.load.link.dispatcher,
                 "Dispatch kernel: 'builtin' (the unified kernel), 'warp' (the warp-wide one) "
                 "or a custom kernel the package exports")
      ->group("Loading");
  driver::add_optional(app, "--grid", a.grid,
                       "Launch shape of a custom dispatch kernel: BLOCKS,THREADS")
      ->group("Loading");
  driver::add_lto_option(app, a.lto, "Loading");
  app.add_flag("--offline", a.offline,
               "With an oci:// package: start the copy stored under the cache directory, "
               "fetching nothing")
      ->group("Loading");
  driver::add_nvjitlink_option(app, a.nvjitlink, "Loading");
  app.add_flag("--no-link", a.no_link, "Never link at load: the package or the cache must have it")
      ->group("Loading");
  app.add_flag("--store", a.load.policy.store, "Store a cubin linked at load in the package too")
      ->group("Loading");
  app.add_flag("--no-cache", a.load.cache.disable, "Neither read nor write the link cache")
      ->group("Loading");
  app.add_option("--cache-dir", a.load.cache.dir, "Link cache directory")->group("Loading");
  app.add_option("--remote-cache", a.load.cache.remote,
                 "Remote link cache: URL[#options] of an HTTP server that stores on PUT "
                 "(default $CUDAQ_RT_REMOTE_CACHE)")
      ->group("Loading");
  driver::add_trust_option(app, a.trust,
                           "load only a package one of these keys signed, and use only cache "
                           "entries one of them signed");
  driver::add_sign_option(app, a.trust.sign_key, "the cache entries a link at load stores");
  app.add_option("--stop-timeout", a.load.stop_timeout_s,
                 "Seconds to wait for the kernel to stop (default 5)")
      ->group("Loading");
  app.add_option("--timeout", a.timeout_s, "Seconds a request waits for its response (default 10)")
      ->group("Loading");
  app.add_flag("-v,--verbose", a.verbose, "Print the path taken and each step's time")
      ->group("Output");
  app.add_flag("--json", a.json, "Print one JSON document on stdout")->group("Output");
  call_opt->excludes(calls_opt)->excludes(list_opt);
  calls_opt->excludes(bench_opt)->excludes(list_opt);
  bench_opt->excludes(list_opt);
  serve_opt->excludes(call_opt)->excludes(calls_opt)->excludes(bench_opt)->excludes(list_opt);
}

// The tool; main() adds the check that its output was written.
int tool_main(int argc, char **argv) {
  CLI::App app{"Load a package on a GPU and call, benchmark or list its handlers through the "
               "dispatch kernel.",
               tool};
  driver::add_version_flag(app, tool);
  app.footer(
      "Environment: CUDAQ_RT_CACHE_DIR, CUDAQ_RT_CACHE_DISABLE, CUDAQ_RT_CACHE_MAXSIZE, "
      "CUDAQ_RT_REMOTE_CACHE, CUDAQ_RT_LTO, CUDAQ_RT_FORCE_WHOLE_LINK, CUDAQ_RT_NO_SHIPPED_UNITS, "
      "CUDAQ_RT_BRIDGE_PATH, CUDAQ_RT_SIGN_KEY, CUDAQ_RT_TRUST, CUDAQ_RT_NVJITLINK, "
      "SOURCE_DATE_EPOCH, "
      "CUDA_VISIBLE_DEVICES.\nSee cudaq-rt-run(1).");
  RunArgs args;
  add_options(app, args);
  if (int rc = driver::parse(tool, app, argc, argv); rc >= 0)
    return rc;
  const bool json = args.json;
  const std::string package = args.package;
  StdioToolOutput output(tool);
  auto options = make_run_options(std::move(args));
  if (!options) {
    const int rc = driver::usage(tool, options.error().str());
    return json ? json_failure(output, rc, "package", package, options.error().str()) : rc;
  }
  if (options->action == RunAction::serve)
    driver::catch_stop_signals();
  const RunOutcome outcome =
      run(*options, output, driver::stop_requested(), &driver::reload_requested());
  if (outcome.exit_at_once) {
    // A kernel may still run: returning would run exit-time cleanup that waits for it.
    std::_Exit(driver::flushed(tool, outcome.status));
  }
  return outcome.status;
}

} // namespace

int main(int argc, char **argv) {
  return driver::flushed(tool, tool_main(argc, argv));
}
