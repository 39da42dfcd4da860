// cudaq-rt-link: link a package for a list of GPU archs with nvJitLink, through the link cache.
// Options are documented in man/cudaq-rt-link.1; keep the two in step.
#include "../common/driver.h"

#include "base/atomic_file.h"
#include "link/link.h"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <sstream>

using namespace cudaq_rt;
using nlohmann::json;

namespace {
constexpr const char *tool = "cudaq-rt-link";

json arch_json(const ArchLink &a) {
  json j = {{"arch", a.arch},         {"cache_key", a.key.digest.str()},
            {"key", a.key.to_json()}, {"inputs", a.input_names},
            {"options", a.options},   {"cache_hit", a.cache_hit}};
  // Where the cubin came from: "link", "cache" (local) or "remote" (the remote cache).
  if (a.record)
    j["source"] = a.remote_hit ? "remote" : a.cache_hit ? "cache" : "link";
  // link_ms is the link's own time (on a hit, the run that linked it); time_ms is this run's.
  if (a.record)
    j["cubin"] = {{"digest", a.record->cubin.str()},
                  {"size", a.record->cubin_size},
                  {"link_ms", a.record->link_ms},
                  {"time_ms", a.time_ms}};
  if (a.error)
    j["error"] = a.error->str();
  if (!a.info_log.empty())
    j["info_log"] = a.info_log;
  if (!a.notes.empty())
    j["remote_cache"] = a.notes;
  j["lto"] = lto_mode_name(a.mode);
  if (!a.fallback.empty())
    j["fallback"] = a.fallback;
  // Per-TU mode, when the module was not in the cache: where each unit's cubin came from.
  if (!a.units.empty()) {
    j["final_link_ms"] = a.final_link_ms;
    j["units"] = json::array();
    for (const UnitLink &u : a.units) {
      json ju = {{"name", u.name},
                 {"source", u.cache_hit  ? "cache"
                            : u.compiled ? "compiled"
                                         : "fatbin"}};
      if (u.cache_hit || u.compiled)
        ju.update({{"key", u.key.str()}, {"size", u.size}, {"time_ms", u.time_ms}});
      j["units"].push_back(ju);
    }
  }
  return j;
}

// --cache-prune and --cache-stats. With --json the results go into `out`, the one document the
// caller prints; otherwise they are printed here.
int cache_command(const LinkCache &cache, bool stats, std::optional<uint64_t> prune, bool as_json,
                  json &out) {
  if (prune) {
    auto r = cache.prune(*prune);
    if (!r)
      return driver::fail(tool, r.error());
    out["pruned"] = {{"entries", r->entries}, {"bytes", r->bytes}};
    if (!as_json)
      std::printf("pruned %llu entries, %llu bytes\n", (unsigned long long)r->entries,
                  (unsigned long long)r->bytes);
  }
  if (stats) {
    auto s = cache.stats();
    if (!s)
      return driver::fail(tool, s.error());
    out["cache"] = s->to_json();
    if (!as_json)
      std::printf("cache directory  %s\nenabled          %s\nentries          %llu\n"
                  "size             %llu bytes (max %llu)\nhits             %llu\n"
                  "misses           %llu\nstores           %llu\nevictions        %llu\n"
                  "corrupt entries  %llu\nunit hits        %llu\nunit misses      %llu\n",
                  s->dir.c_str(), s->enabled ? "yes" : "no", (unsigned long long)s->entries,
                  (unsigned long long)s->bytes, (unsigned long long)s->max_bytes,
                  (unsigned long long)s->hits, (unsigned long long)s->misses,
                  (unsigned long long)s->stores, (unsigned long long)s->evictions,
                  (unsigned long long)s->corrupt, (unsigned long long)s->unit_hits,
                  (unsigned long long)s->unit_misses);
    if (!as_json && !s->remote_url.empty())
      std::printf("remote cache     %s\nremote hits      %llu\nremote misses    %llu "
                  "(%llu corrupt)\nremote stores    %llu\nremote errors    %llu\n"
                  "remote bytes     %llu in, %llu out\n",
                  s->remote_url.c_str(), (unsigned long long)s->remote_hits,
                  (unsigned long long)s->remote_misses, (unsigned long long)s->remote_corrupt,
                  (unsigned long long)s->remote_stores, (unsigned long long)s->remote_errors,
                  (unsigned long long)s->remote_bytes_in, (unsigned long long)s->remote_bytes_out);
  }
  return 0;
}

// --cache-push: the package's cubins into the remote cache.
int push_command(const LinkCache &cache, const std::string &package, bool as_json) {
  auto pushed = push_links(package, cache);
  if (!pushed)
    return driver::fail(tool, pushed.error());
  json out = {{"package", package}, {"pushed", json::array()}};
  int rc = 0;
  for (const PushedLink &p : *pushed) {
    json j = {{"arch", p.arch}, {"cache_key", p.key.str()}, {"bytes", p.bytes}};
    if (p.error) {
      j["error"] = p.error->str();
      rc = driver::fail(tool, *p.error);
    } else if (!as_json) {
      std::printf("%s  pushed  %llu bytes  %s\n", p.arch.c_str(), (unsigned long long)p.bytes,
                  p.key.str().c_str());
    }
    out["pushed"].push_back(j);
  }
  if (pushed->empty() && !as_json)
    driver::warn(tool, "'" + package + "': no link records: nothing to push");
  if (as_json)
    std::cout << out.dump(2, ' ', false, json::error_handler_t::replace) << "\n";
  return rc;
}
} // namespace

int main(int argc, char **argv) {
  remove_temporaries_on_signals();
  CLI::App app{"Link a package's dispatch kernel, bridge hooks and handlers into one cubin per GPU "
               "arch with nvJitLink, through a content-addressed link cache.",
               tool};
  app.set_version_flag("--version", std::string(tool) + " " CUDAQ_RT_VERSION);

  LinkOptions opts;
  std::string package;
  std::vector<std::string> archs;
  bool no_cache = false, cache_stats = false, as_json = false;
  bool no_kernels_used = false;
  std::string cache_dir, save_temps, remote_cache, cache_push;
  std::optional<uint64_t> prune;
  std::string prune_text;

  app.add_option("package", package, "The package to link (NAME.cudaqpkg)")->group("Link");
  app.add_option("-a,--arch", archs, "Target GPUs: sm_NN[a|f], comma-separated or repeated")
      ->group("Link");
  app.add_option("--bridge", opts.settings.bridge,
                 "Bridge whose device hooks are linked: a name (loopback) or a library path "
                 "(default: the package's bridge, else loopback)")
      ->group("Link");
  app.add_option("--dispatcher", opts.settings.dispatcher,
                 "Dispatch kernel: 'builtin' or a custom kernel the package exports (default: "
                 "the package's custom kernel, else builtin)")
      ->group("Link");
  app.add_option("-j,--jobs", opts.jobs,
                 "Archs (and per-TU units) linked at once (default: the number of cores)")
      ->group("Link");
  std::string lto_text;
  app.add_option("--lto", lto_text,
                 "How LTO-IR is linked: per-tu (each translation unit compiled alone and cached, "
                 "then a link of the cubins; the default) or whole (one whole-program link)")
      ->check(CLI::IsMember({"per-tu", "whole"}))
      ->group("Link");
  std::string opt_level;
  app.add_option("-O", opt_level, "nvJitLink optimization level: -O0 or -O3 (part of the key)")
      ->check(CLI::IsMember({"0", "3"}))
      ->group("nvJitLink");
  app.add_option("-X,--Xnvjitlink", opts.settings.extra_options,
                 "Pass an option to nvJitLink (part of the cache key)")
      ->group("nvJitLink");
  app.add_flag("--no-kernels-used", no_kernels_used,
               "Keep every kernel instead of passing -kernels-used/-variables-used")
      ->group("nvJitLink");
  app.add_flag("-v,--verbose", opts.settings.verbose,
               "Print nvJitLink's info log, with -verbose -time")
      ->group("Output");
  app.add_flag("--json", as_json, "Print one JSON document on stdout")->group("Output");
  app.add_flag("--dry-run", opts.dry_run,
               "Print what would be linked and the cache keys; link and write nothing")
      ->group("Output");
  app.add_option("--save-temps", save_temps,
                 "Write each arch's inputs, options, log and cubin under DIR/<arch>/")
      ->group("Output");
  app.add_flag(
         "--no-store", [&](int64_t) { opts.store_in_package = false; },
         "Do not record the cubins in the package")
      ->group("Output");
  app.add_flag("--no-cache", no_cache, "Neither read nor write the link cache")->group("Cache");
  app.add_option("--cache-dir", cache_dir,
                 "Link cache directory (default $CUDAQ_RT_CACHE_DIR, "
                 "else $XDG_CACHE_HOME/cudaq-rt)")
      ->group("Cache");
  app.add_option("--remote-cache", remote_cache,
                 "Remote link cache: URL[#options] of an HTTP server that stores on PUT (default "
                 "$CUDAQ_RT_REMOTE_CACHE); options read-only, timeout=D, max-time=D, "
                 "bearer-env=VAR, basic-env=VAR")
      ->group("Cache");
  app.add_flag("--cache-stats", cache_stats,
               "Print the cache's size and counters, the remote cache's too")
      ->group("Cache");
  app.add_option("--cache-push", cache_push,
                 "Upload the cubins of PKG's link records to the remote cache")
      ->group("Cache");
  auto *prune_opt = app.add_option("--cache-prune", prune_text,
                                   "Evict least recently used entries down to SIZE bytes "
                                   "(K/M/G suffixes; 0 clears the cache)")
                        ->group("Cache");

  if (int rc = driver::parse(tool, app, argc, argv); rc >= 0)
    return rc;
  opts.settings.opt_level = opt_level.empty() ? "" : "-O" + opt_level;
  opts.settings.kernels_used = !no_kernels_used;
  if (!lto_text.empty())
    opts.settings.lto_mode = parse_lto_mode(lto_text);
  if (*prune_opt) {
    prune = parse_cache_size(prune_text);
    if (!prune) {
      std::fprintf(stderr, "%s: error: --cache-prune: '%s' is not a size\n", tool,
                   prune_text.c_str());
      return driver::exit_usage;
    }
  }

  // A dry run reads no entry, so it needs no cache and must not create one.
  std::vector<std::string> cache_warnings;
  auto cache = open_link_cache({.dir = cache_dir,
                                .remote = remote_cache,
                                .disable = no_cache || (opts.dry_run && !cache_stats && !prune)},
                               cache_warnings);
  if (!cache)
    return driver::fail(tool, cache.error());
  for (const std::string &w : cache_warnings)
    driver::warn(tool, w);

  if (!cache_push.empty()) {
    if (!package.empty()) {
      std::fprintf(stderr, "%s: error: --cache-push takes the package: give no other\n", tool);
      return driver::exit_usage;
    }
    return push_command(*cache, cache_push, as_json);
  }
  if (package.empty()) {
    if (cache_stats || prune) {
      json out = json::object();
      int rc = cache_command(*cache, cache_stats, prune, as_json, out);
      if (rc == 0 && as_json)
        std::cout << out.dump(2, ' ', false, json::error_handler_t::replace) << "\n";
      return rc;
    }
    std::fprintf(stderr, "%s: error: no package given\nRun '%s --help' for usage.\n", tool, tool);
    return driver::exit_usage;
  }
  opts.package = package;
  auto targets = parse_arch_list(archs);
  if (!targets) {
    std::fprintf(stderr, "%s: error: --arch: %s\n", tool, targets.error().str().c_str());
    return driver::exit_usage;
  }
  opts.archs = std::move(*targets);
  if (auto st = check_link_options(opts); !st) {
    std::fprintf(stderr, "%s: error: %s\n", tool, st.error().message.c_str());
    return driver::exit_usage;
  }
  if (!save_temps.empty())
    opts.save_temps = save_temps;

  auto report = link_package(opts, *cache);
  if (!report)
    return driver::fail(tool, report.error());

  for (const ArchLink &a : report->archs) {
    for (const std::string &w : a.warnings)
      driver::warn(tool, a.arch + ": " + w);
    if (!a.fallback.empty())
      std::fprintf(stderr, "%s: note: %s: %s\n", tool, a.arch.c_str(), a.fallback.c_str());
    if (opts.settings.verbose)
      for (const UnitLink &u : a.units) {
        char ms[32];
        std::snprintf(ms, sizeof ms, "%.1f ms", u.time_ms);
        std::string what = u.cache_hit  ? cat("cached  ", u.size, " bytes  ", ms)
                           : u.compiled ? cat("compiled  ", u.size, " bytes  ", ms)
                                        : std::string("no LTO-IR: linked as it is");
        std::fprintf(stderr, "%s: %s: unit %s: %s\n", tool, a.arch.c_str(), u.name.c_str(),
                     what.c_str());
      }
    if (opts.settings.verbose)
      for (const std::string &n : a.notes)
        std::fprintf(stderr, "%s: %s: note: %s\n", tool, a.arch.c_str(), n.c_str());
    if (a.error) {
      std::fprintf(stderr, "%s: error: %s\n", tool, a.error->str().c_str());
      std::istringstream details(a.details);
      for (std::string line; std::getline(details, line);)
        std::fprintf(stderr, "%s: note: %s\n", tool, line.c_str());
    }
    if (opts.settings.verbose && !a.info_log.empty() && !as_json)
      std::fprintf(stderr, "%s: %s: nvJitLink info log:\n%s", tool, a.arch.c_str(),
                   a.info_log.c_str());
  }
  if (as_json) {
    json j = {{"package", report->package.string()},
              {"bridge", report->bridge},
              {"dispatcher", report->dispatcher},
              {"lto", lto_mode_name(report->mode)},
              {"dry_run", opts.dry_run},
              {"ok", report->ok()},
              {"archs", json::array()}};
    for (const ArchLink &a : report->archs)
      j["archs"].push_back(arch_json(a));
    if (cache_stats || prune)
      if (int rc = cache_command(*cache, cache_stats, prune, true, j); rc != 0)
        return rc;
    std::cout << j.dump(2, ' ', false, json::error_handler_t::replace) << "\n";
  } else {
    for (const ArchLink &a : report->archs) {
      if (opts.dry_run) {
        std::printf("%s  key %s\n", a.arch.c_str(), a.key.digest.str().c_str());
        std::string o;
        for (const std::string &s : a.options)
          o += " " + s;
        std::printf("  options:%s\n", o.c_str());
        for (const std::string &n : a.input_names)
          std::printf("  input: %s\n", n.c_str());
      } else if (a.record) {
        if (a.cache_hit)
          std::printf("%s  %s  %llu bytes  %.1f ms (linked in %.1f ms)  %s\n", a.arch.c_str(),
                      a.remote_hit ? "remote" : "cached", (unsigned long long)a.record->cubin_size,
                      a.time_ms, a.record->link_ms, a.record->cubin.str().c_str());
        else
          std::printf("%s  linked  %llu bytes  %.1f ms  %s\n", a.arch.c_str(),
                      (unsigned long long)a.record->cubin_size, a.record->link_ms,
                      a.record->cubin.str().c_str());
      }
    }
  }
  if (!as_json && (cache_stats || prune)) {
    json unused;
    if (int rc = cache_command(*cache, cache_stats, prune, false, unused); rc != 0)
      return rc;
  }
  return report->ok() ? 0 : driver::exit_failure;
}
