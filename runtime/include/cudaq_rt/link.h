// cudaq-rt-link's library: link a package's dispatch kernel, bridge hooks and handlers into one
// cubin per GPU arch with nvJitLink, through the link cache, and record the result in the package.
#pragma once

#include "cudaq_rt/link_cache.h"
#include "cudaq_rt/manifest.h"

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace cudaq_rt {

struct LinkOptions {
  std::filesystem::path package;
  std::vector<std::string> archs; // sm_NN with an optional a/f suffix
  // A bridge name or library path. Empty: the package's bridge if it packs exactly one, else
  // the installed `loopback`.
  std::string bridge;
  // A custom dispatch kernel exported by the package. Empty: the package's if it exports exactly
  // one, else the built-in unified dispatch kernel.
  std::string dispatcher;
  unsigned jobs = 0;        // 0: one per arch, at most the machine's cores
  bool kernels_used = true; // -kernels-used/-variables-used: drop all code but the module's
  std::string opt_level;    // "-O0" or "-O3"; empty: nvJitLink's default
  std::vector<std::string> extra_options; // -Xnvjitlink, part of the key
  bool verbose = false;                   // -verbose -time; the info log is returned
  bool dry_run = false;                   // plan and print keys, link nothing, write nothing
  std::optional<std::filesystem::path> save_temps; // inputs, cubin and log per arch
  bool store_in_package = true;
};

// One arch's outcome, as printed and as returned by --json.
struct ArchLink {
  std::string arch;
  LinkKey key;
  std::vector<std::string> input_names; // "dispatcher builtin", "bridge loopback #0", "app.o #1"
  std::vector<std::string> options;     // as passed to nvJitLink
  bool cache_hit = false;
  std::optional<LinkRecord> record; // set when it linked (or hit)
  std::string info_log;
  std::optional<Error> error;
  std::string details; // with an error: nvJitLink's log and the inputs, several lines
  std::vector<std::string> warnings;
};

struct LinkReport {
  std::filesystem::path package;
  std::string bridge;
  std::string dispatcher;
  std::vector<ArchLink> archs;
  bool ok() const;
};

// Links every arch (in parallel); when every arch succeeded, stores the cubins and link records
// in the package in one atomic replace. A failure of any arch leaves the package unchanged.
// Errors that stop everything (no package, unknown bridge, bad arch) come back as an Error;
// per-arch failures are in the report.
Expected<LinkReport> link_package(const LinkOptions &options, const LinkCache &cache);

// "sm_90a" -> {90, 'a'}; nullopt for anything else.
struct TargetArch {
  uint32_t sm = 0;
  char suffix = 0; // 0, 'a' or 'f'
  std::string str() const;
};
std::optional<TargetArch> parse_arch(std::string_view text);

} // namespace cudaq_rt
