// What every cudaq-rt driver does the same way: map CLI11's parse failures and its own usage errors
// to exit status 2, and declare the options every tool shares. Everything else a tool prints goes
// through a ToolOutput (base/tool_output.h).
#pragma once

#include "base/nvjitlink_library.h"
#include "base/signing.h"
#include "base/tool_output.h"
#include "cache/link_key.h"
#include "cudaq_rt/error.h"
#include "cudaq_rt_revision.h"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <optional>
#include <string>
#include <string_view>
#include <unistd.h>
#include <vector>

namespace cudaq_rt::driver {

constexpr int exit_usage = 2;

// Progress goes to stderr, and only when a person is watching.
inline bool stderr_is_terminal() {
  return ::isatty(STDERR_FILENO) == 1;
}

// Every option takes one value per use, repeatable (comma-separated where the option splits a
// list itself): CLI11 lets a list option take every word up to the next option, so that
// `-a sm_90 PKG` would read the package as an arch, and options could not come after the
// positional arguments as they do for nvcc, git and cosign.
inline void one_value_per_use(CLI::App &app) {
  for (CLI::Option *o : app.get_options())
    if (o->nonpositional() && o->get_allow_extra_args())
      o->allow_extra_args(false);
}

// make's and ninja's `-j` with no number: argv with "0" (the tool's "every core") after each of
// `options` that is not followed by a number, so that `-j PKG` keeps PKG a positional argument.
inline std::vector<char *> optional_count(int argc, char **argv,
                                          std::initializer_list<std::string_view> options) {
  static char zero[] = "0";
  std::vector<char *> words(argv, argv + argc);
  for (size_t i = 1; i < words.size(); ++i) {
    const std::string_view word = words[i];
    if (word == "--")
      break;
    if (std::find(options.begin(), options.end(), word) == options.end())
      continue;
    const bool number = i + 1 < words.size() && *words[i + 1] &&
                        std::strspn(words[i + 1], "0123456789") == std::strlen(words[i + 1]);
    if (!number)
      words.insert(words.begin() + static_cast<std::ptrdiff_t>(++i), zero);
  }
  return words;
}

// The progress line only for a person at a terminal (never into a log or a pipe), and not with
// --quiet, NO_COLOR or TERM=dumb.
inline bool progress_wanted(bool quiet) {
  const char *no_color = std::getenv("NO_COLOR");
  const char *term = std::getenv("TERM");
  return !quiet && ::isatty(STDERR_FILENO) && !(no_color && *no_color) &&
         !(term && std::string_view(term) == "dumb");
}

// Set by SIGINT and SIGTERM once catch_stop_signals() ran: a service stops cleanly and reports.
inline std::atomic<bool> &stop_requested() {
  static std::atomic<bool> requested{false}; // constant-initialized: no guard in the handler
  static_assert(std::atomic<bool>::is_always_lock_free, "set from a signal handler");
  return requested;
}
// Set by SIGHUP once catch_stop_signals() ran: a service reloads what it serves.
inline std::atomic<bool> &reload_requested() {
  static std::atomic<bool> requested{false};
  return requested;
}
inline void catch_stop_signals() {
  struct sigaction sa {};
  sa.sa_handler = [](int) { stop_requested().store(true, std::memory_order_release); };
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  sa.sa_handler = [](int) { reload_requested().store(true, std::memory_order_release); };
  sigaction(SIGHUP, &sa, nullptr);
}

// Parses argv; returns an exit status to return at once, or -1 to go on.
inline int parse(const char *tool, CLI::App &app, int argc, char **argv) {
  one_value_per_use(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::Success &e) { // --help, --version
    return app.exit(e);
  } catch (const CLI::ParseError &e) {
    // CLI11 quotes the arguments it did not expect as they came: escaped, they keep it one line.
    const std::string message = escape(e.what());
    std::fprintf(stderr, "%s: error: %s\n", tool, message.c_str());
    std::fprintf(stderr, "Run '%s --help' for usage.\n", tool);
    // A script that asked for --json reads a document on stdout even when the line did not parse.
    for (int i = 1; i < argc && std::string_view(argv[i]) != "--"; ++i)
      if (std::string_view(argv[i]) == "--json") {
        StdioToolOutput output(tool);
        output.out_json({{"error", message}, {"exit_status", exit_usage}});
        break;
      }
    return exit_usage;
  }
  return -1;
}

// The exit status once what the tool wrote to stdout is flushed: output that could not be written
// (a full disk, /dev/full) is an error, exit status 1 and one line on stderr, never a silent 0.
inline int flushed(const char *tool, int status) {
  errno = 0;
  std::cout.flush(); // CLI11's --help and --version
  int why = errno;
  const bool streams_ok = bool(std::cout);
  errno = 0;
  const bool flushed_ok = std::fflush(stdout) == 0;
  if (!why)
    why = errno;
  if (flushed_ok && streams_ok && !std::ferror(stdout))
    return status;
  std::fprintf(stderr, "%s: error: cannot write to standard output%s%s\n", tool, why ? ": " : "",
               why ? std::strerror(why) : "");
  return status == 0 ? 1 : status;
}

// A usage error found after parsing, in the form parse() prints CLI11's: exit status 2.
inline int usage(const char *tool, const std::string &message) {
  std::fprintf(stderr, "%s: error: %s\nRun '%s --help' for usage.\n", tool, message.c_str(), tool);
  return exit_usage;
}

// An option whose value lands in `to` only when the option is given, converted as CLI11 converts
// a plain T (an empty value is T{}, so `--count ''` is a given 0, not an absent option).
template <class T>
CLI::Option *add_optional(CLI::App &app, const std::string &name, std::optional<T> &to,
                          const std::string &help) {
  return app.add_option_function<T>(
      name, [&to](const T &value) { to = value; }, help);
}

// --nvjitlink PATH: the nvJitLink library the tool links with (base/nvjitlink_library.h), over
// $CUDAQ_RT_NVJITLINK and the toolkit's.
inline CLI::Option *add_nvjitlink_option(CLI::App &app, std::string &path,
                                         const std::string &group) {
  return app
      .add_option("--nvjitlink", path,
                  "The libnvJitLink to link with: a path or a soname (default "
                  "$CUDAQ_RT_NVJITLINK, else the toolkit's libnvJitLink.so." CUDAQ_RT_CUDA_MAJOR_STR
                  "); the cache keys name its version and build ID")
      ->group(group);
}

// Loads the library --nvjitlink named, if any: a path that is no nvJitLink library is a usage
// error, said once, before any work.
inline std::optional<Error> apply_nvjitlink_option(const std::string &path) {
  if (path.empty())
    return std::nullopt;
  auto lib = choose_nvjitlink(path);
  if (!lib)
    return lib.error();
  return std::nullopt;
}

// --version: what a bug report and a cache key depend on. "cudaq-rt-link 0.1.0 (source
// 83b2a2d0c1f4, CUDA 13.0.88, nvJitLink 13.0 /usr/local/cuda/lib64/libnvJitLink.so.13)": the
// source revision and the toolkit the tool was built from, and the nvJitLink it links with (cache
// keys hash that one): --nvjitlink's where given with --version.
inline void add_version_flag(CLI::App &app, const char *tool) {
  app.set_version_flag("--version", [tool, &app] {
    std::string chosen;
    if (CLI::Option *o = app.get_option_no_throw("--nvjitlink"); o && o->count() > 0)
      chosen = o->as<std::string>();
    auto lib = chosen.empty() ? process_nvjitlink() : choose_nvjitlink(chosen);
    return cat(tool,
               " " CUDAQ_RT_VERSION " (source " CUDAQ_RT_SOURCE_REVISION
               ", CUDA " CUDAQ_RT_CUDA_VERSION ", ",
               lib ? (*lib)->describe() : "nvJitLink not loadable: " + lib.error().str(), ")");
  });
}

// --lto, declared once for every tool that links (cudaq-rt-link ahead of time, cudaq-rt-run at
// load); parse_lto_mode reads the value.
inline CLI::Option *add_lto_option(CLI::App &app, std::string &mode, const std::string &group) {
  return app
      .add_option("--lto", mode,
                  "How LTO-IR is linked: per-tu (each translation unit compiled alone and "
                  "cached, then a link of the cubins; the default) or whole (one whole-program "
                  "link)")
      ->check(CLI::IsMember({"per-tu", "whole"}))
      ->group(group);
}

// --sign KEY and --trust PUB, declared once for the tools that sign or verify (signing.h).
inline void add_sign_option(CLI::App &app, std::string &key, const std::string &what) {
  app.add_option("--sign", key,
                 "Sign " + what +
                     " with this Ed25519 private key, PEM (default $CUDAQ_RT_SIGN_KEY; make one "
                     "with openssl genpkey -algorithm ed25519)")
      ->group("Trust");
}
inline void add_trust_option(CLI::App &app, TrustRequest &trust, const std::string &what) {
  app.add_option("--trust", trust.trust,
                 "Public key file or directory of them (*.pem, *.pub): " + what +
                     " (repeatable; default $CUDAQ_RT_TRUST, paths separated by ':')")
      ->group("Trust");
}

} // namespace cudaq_rt::driver
