// cudaq-rt-run's session: its options checked into what to do, with the usage errors the tool
// prints, then done: a package loaded on a GPU and called once, called line by line from a file,
// benchmarked, listed or served, and what it came to written as text or as one --json document.
// The tool parses argv into RunArgs and prints usage errors; everything else it writes goes
// through a ToolOutput, so that tests read what a session says without a terminal.
#pragma once

#include "base/tool_output.h"
#include "command/request_args.h"
#include "load/client.h"
#include "load/serve.h"
#include "load/server.h"

#include <nlohmann/json.hpp>

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace cudaq_rt {

// `--grid BLOCKS,THREADS`: two positive decimal numbers, without a sign ("-1" must not wrap to
// 4294967295 blocks). Errors read `--grid: 'TEXT' is not BLOCKS,THREADS (two positive numbers)`.
Expected<LaunchShape> parse_grid(std::string_view text);

// The bridge --serve loads when --bridge names none: the self-fed one that clients reach over the
// network (without --serve the load path's default, the host-fed loopback bridge, is used).
constexpr const char *default_serve_bridge = "udp";

// The options as the tool's command line gave them; an optional is set when its option was given.
struct RunArgs {
  std::string package;
  std::optional<std::string> call;       // --call NAME
  std::vector<std::string> args;         // --arg SPEC of the call
  std::string result = "hex";            // --result TYPE
  std::optional<std::string> calls_file; // --calls FILE, "-" for stdin
  std::optional<uint64_t> bench;         // --bench N
  uint32_t inflight = 1;
  bool serve = false;
  std::optional<uint64_t> count; // --serve's bounds
  std::optional<double> duration_s;
  std::optional<double> stats_interval_s;
  std::optional<double> watch_s; // --watch SECONDS: reload when the package or a global changes
  bool list = false;
  std::vector<std::string> globals; // --global NAME=SPEC
  std::string device = "0";         // an ordinal, a list or "all"
  std::optional<std::string> grid;
  std::string lto; // "per-tu", "whole", or empty for the default
  bool no_link = false;
  bool offline = false;           // --offline: an oci:// package from the store only
  std::vector<std::string> archs; // --list --arch sm_XX[,...]: no GPU asked
  // --bridge, --bridge-arg, --dispatcher, --store, --stop-timeout, --cache-dir, --remote-cache and
  // --no-cache as given; the package, device, grid, globals, --lto and --no-link are checked into
  // it by make_run_options.
  LoadOptions load;
  double timeout_s = 10;
  bool verbose = false;
  bool json = false;
  std::string nvjitlink; // --nvjitlink PATH
  TrustRequest trust;    // --sign, --trust
};

enum class RunAction { call, calls, bench, serve, list };

// One request as the session sends it.
struct RunRequest {
  std::string handler;
  std::vector<uint8_t> payload;
  ResultType result;
};

struct RunOptions {
  RunAction action = RunAction::call;
  LoadOptions load;
  std::optional<RunRequest> call;     // --call: the request, or with --bench the one benchmarked
  std::string calls_file;             // --calls
  std::vector<TargetArch> list_archs; // --list --arch: what each would load, no GPU asked
  ResultType result;                  // --result: also for the lines of --calls that name none
  uint64_t bench_requests = 0;
  uint32_t inflight = 1;
  // --serve's devices and bounds; its `load` is `load`, copied when serving starts.
  ServeOptions serve;
  std::vector<std::string> global_specs; // --global as given: read again at each reload
  double watch_s = 0;                    // --watch
  // --device all: the GPUs are counted when serving starts (asking the driver).
  bool all_devices = false;
  double timeout_s = 10;
  bool verbose = false;
  bool json = false;
  bool offline = false; // with an oci:// package: the stored copy, nothing fetched
  // --sign and --trust as given: resolved once when the session runs (over CUDAQ_RT_SIGN_KEY and
  // CUDAQ_RT_TRUST) into load.trust, which the load, the cache and the service then use.
  TrustRequest trust;
};

// The options checked in the order the tool has always checked them: the first refusal is the
// error, its text the whole usage message (`nothing to do: ...`, `--count needs --serve`,
// `--device 0,1: several GPUs need --serve`, `--inflight: must be at least 1`, ...). Reads the
// files of --arg and --global specs; touches no GPU.
Expected<RunOptions> make_run_options(RunArgs args);

// What --bench sends without --call: 8 bytes to `echo` when the package exports it (room for the
// request_id each answer is checked against), else no bytes to its first handler. Errors read
// `'PACKAGE': exports no handler to benchmark`.
Expected<RunRequest> default_bench_request(const std::vector<std::string> &handlers,
                                           const std::string &package);

// Refusals that need the loaded package: an unknown handler (`no handler 'x': the package exports
// a, b, c (alias of a)`), a payload larger than a slot.
std::optional<Error> refuse_request(const LoadReport &report, const RunRequest &request);
// The first of them, which the package's manifest answers before any GPU is asked.
std::optional<Error> refuse_unknown_handler(const std::filesystem::path &package,
                                            const std::vector<std::string> &handlers,
                                            const std::vector<AliasEntry> &aliases,
                                            const std::string &handler);

// One answer as the tool shows it: `STATUS: RESULT` on stdout (`ok: 2a`, `handler error 3`,
// `ok: (ERROR)` where the result does not decode), raw bytes on stdout with the status on stderr,
// or, with `calls`, an entry appended to the --json document's "calls". Returns the exit status
// it means (a result that does not decode is a usage error).
int show_answer(const RunRequest &request, const Reply &reply, ToolOutput &output,
                nlohmann::json *calls);

struct RunOutcome {
  int status = run_exit_ok;
  // A kernel may still be running (hung, or a service that did not stop cleanly): exit-time
  // cleanup would wait for it, so the process ends with _Exit once the output is flushed.
  bool exit_at_once = false;
};

// Does what the options say on `gpu`, writing to `output`. Serving stops when `stop` turns true
// (the tool's SIGINT and SIGTERM handler sets it), and reloads when `reload` does (SIGHUP's);
// other actions ignore both.
RunOutcome run(const RunOptions &options, ToolOutput &output, const std::atomic<bool> &stop,
               std::atomic<bool> *reload, Gpu &gpu = driver_gpu());
inline RunOutcome run(const RunOptions &options, ToolOutput &output, const std::atomic<bool> &stop,
                      Gpu &gpu = driver_gpu()) {
  return run(options, output, stop, nullptr, gpu);
}

// --watch's fingerprint of what a session loads: the package as named (a package directory's
// manifest, an OCI layout's index, an oci:// tag's manifest digest) and the bytes of its
// --global values (their files read again). Two equal fingerprints: nothing to reload.
Expected<std::string> run_fingerprint(const RunOptions &options);

} // namespace cudaq_rt
