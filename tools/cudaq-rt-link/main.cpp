// cudaq-rt-link: link a package for a list of GPU archs with nvJitLink, through the link cache.
// Options are documented in man/cudaq-rt-link.1; keep the two in step.
#include "../common/driver.h"

#include "base/atomic_file.h"
#include "base/jobserver.h"
#include "command/link_command.h"
#include "load/gpu.h"

#include <cstdlib>
#include <string_view>
#include <unistd.h>

using namespace cudaq_rt;

namespace {
constexpr const char *tool = "cudaq-rt-link";
// The tool; main() adds the check that its output was written.
int tool_main(int argc, char **argv) {
  // Before anything opens a descriptor of its own: only then are MAKEFLAGS' numbers make's.
  take_jobserver_from_environment();
  remove_temporaries_on_signals();
  CLI::App app{"Link a package's dispatch kernel, bridge hooks and handlers into one cubin per GPU "
               "arch with nvJitLink, through a content-addressed link cache.",
               tool};
  driver::add_version_flag(app, tool);
  app.footer("Environment: CUDAQ_RT_CACHE_DIR, CUDAQ_RT_CACHE_DISABLE, CUDAQ_RT_CACHE_MAXSIZE, "
             "CUDAQ_RT_REMOTE_CACHE, CUDAQ_RT_BRIDGE_PATH, CUDAQ_RT_LTO, "
             "CUDAQ_RT_FORCE_WHOLE_LINK, CUDAQ_RT_NO_SHIPPED_UNITS, CUDAQ_RT_SIGN_KEY, "
             "CUDAQ_RT_TRUST, CUDAQ_RT_NVJITLINK, SOURCE_DATE_EPOCH, MAKEFLAGS (make's jobserver), "
             "NO_COLOR, TERM.\n"
             "See cudaq-rt-link(1).");

  LinkArgs args;
  bool no_kernels_used = false, quiet = false;
  std::string save_temps, prune_text, opt_level, lto_text, nvjitlink;

  app.add_option("package", args.link.package, "The package to link (NAME.cudaqpkg)")
      ->group("Link");
  app.add_option("-a,--arch", args.archs,
                 "Target GPUs: sm_NN[a|f], comma-separated or repeated; native: this machine's")
      ->group("Link");
  args.native_archs = [] { return gpu_archs(); };
  app.add_option("--bridge", args.link.settings.bridge,
                 "Bridge whose device hooks are linked: a name (loopback) or a library path "
                 "(default: the package's bridge, else loopback)")
      ->group("Link");
  app.add_option("--dispatcher", args.link.settings.dispatcher,
                 "Dispatch kernel: 'builtin' (the unified kernel), 'warp' (the warp-wide one) or "
                 "a custom kernel the package exports (default: the package's custom kernel, "
                 "else builtin)")
      ->group("Link");
  app.add_option("-j,--jobs", args.link.jobs,
                 "Archs (and per-TU units) linked at once (default, and -j alone: the number of "
                 "cores)")
      ->group("Link");
  driver::add_lto_option(app, lto_text, "Link");
  app.add_option("-O", opt_level, "nvJitLink optimization level: -O0 or -O3 (part of the key)")
      ->check(CLI::IsMember({"0", "3"}))
      ->group("nvJitLink");
  app.add_option("-X,--Xnvjitlink", args.link.settings.extra_options,
                 "Pass an option to nvJitLink (part of the cache key)")
      ->group("nvJitLink");
  driver::add_nvjitlink_option(app, nvjitlink, "nvJitLink");
  app.add_flag("--no-kernels-used", no_kernels_used,
               "Keep every kernel instead of passing -kernels-used/-variables-used")
      ->group("nvJitLink");
  app.add_flag("-v,--verbose", args.link.settings.verbose,
               "Print nvJitLink's info log, with -verbose -time")
      ->group("Output");
  app.add_flag("--json", args.json, "Print one JSON document on stdout")->group("Output");
  app.add_flag("-q,--quiet", quiet, "No progress line on a terminal")->group("Output");
  app.add_flag("--dry-run", args.link.dry_run,
               "Print what would be linked and the cache keys; link and write nothing")
      ->group("Output");
  app.add_option("--save-temps", save_temps,
                 "Write each arch's inputs, options, log and cubin under DIR/<arch>/")
      ->group("Output");
  app.add_flag(
         "--no-store", [&](int64_t) { args.link.store_in_package = false; },
         "Do not record the cubins in the package")
      ->group("Output");
  app.add_flag(
         "--no-compress", [&](int64_t) { args.link.compress = false; },
         "Store the cubins in the package as they are (default: zstd-compressed)")
      ->group("Output");
  app.add_flag("--no-cache", args.cache.disable, "Neither read nor write the link cache")
      ->group("Cache");
  app.add_option("--cache-dir", args.cache.dir,
                 "Link cache directory (default $CUDAQ_RT_CACHE_DIR, "
                 "else $XDG_CACHE_HOME/cudaq-rt)")
      ->group("Cache");
  app.add_option("--remote-cache", args.cache.remote,
                 "Remote link cache: URL[#options] of an HTTP server that stores on PUT (default "
                 "$CUDAQ_RT_REMOTE_CACHE); options read-only, timeout=D, max-time=D, "
                 "bearer-env=VAR, basic-env=VAR")
      ->group("Cache");
  app.add_flag("--cache-stats", args.cache_stats,
               "Print the cache's size and counters, the remote cache's too")
      ->group("Cache");
  app.add_option("--cache-push", args.push,
                 "Upload the cubins of PKG's link records to the remote cache")
      ->group("Cache");
  driver::add_sign_option(app, args.trust.sign_key,
                          "the package after linking (alone, without --arch: as it is) and the "
                          "cache entries this link stores");
  driver::add_trust_option(app, args.trust,
                           "link only a package one of these keys signed, and use only cache "
                           "entries one of them signed");
  app.add_option("--push", args.oci_push,
                 "Push the package to an OCI registry after linking (alone, without --arch: as "
                 "it is): oci://HOST[:PORT]/REPO[:TAG][#options]")
      ->group("Registry");
  auto *prune_opt = app.add_option("--cache-prune", prune_text,
                                   "Evict least recently used entries down to SIZE bytes "
                                   "(K/M/G suffixes; 0 clears the cache)")
                        ->group("Cache");

  std::vector<char *> words = driver::optional_count(argc, argv, {"-j", "--jobs"});
  if (int rc = driver::parse(tool, app, static_cast<int>(words.size()), words.data()); rc >= 0)
    return rc;
  if (auto bad = driver::apply_nvjitlink_option(nvjitlink))
    return driver::usage(tool, bad->str());
  args.link.settings.opt_level = opt_level.empty() ? "" : "-O" + opt_level;
  args.link.settings.kernels_used = !no_kernels_used;
  if (!lto_text.empty())
    args.link.settings.lto_mode = parse_lto_mode(lto_text);
  if (!save_temps.empty())
    args.link.save_temps = save_temps;
  if (*prune_opt)
    args.prune = prune_text;
  args.progress = driver::progress_wanted(quiet);

  const bool json = args.json;
  const std::string package = args.link.package.string();
  StdioToolOutput output(tool);
  auto command = make_link_command(std::move(args));
  if (!command) {
    int rc = driver::usage(tool, command.error().message);
    return json ? json_failure(output, rc, "package", package, command.error().message) : rc;
  }
  int rc = run_link_command(*command, output);
  return json ? json_failure(output, rc, "package", package) : rc;
}

} // namespace

int main(int argc, char **argv) {
  return driver::flushed(tool, tool_main(argc, argv));
}
