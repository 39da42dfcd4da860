// cudaq-rt-link as one library call: the options checked into a command (the usage errors the
// tool prints with exit status 2), then the command run (the links, or a cache command alone)
// with its report written as text or as one --json document.
#pragma once

#include "base/tool_output.h"
#include "cache/cache_config.h"
#include "link/link.h"
#include "oci/reference.h"

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace cudaq_rt {

// The options as the command line gave them, where they still need checking.
struct LinkArgs {
  LinkOptions link;                    // all but `archs`
  std::vector<std::string> archs;      // --arch values, each a list separated by commas
  NativeArchs native_archs;            // what `--arch native` stands for (this machine's GPUs)
  std::optional<std::string> prune;    // --cache-prune SIZE
  std::filesystem::path push;          // --cache-push PKG
  CacheRequest cache;                  // --cache-dir, --remote-cache, --no-cache
  TrustRequest trust;                  // --sign, --trust
  std::optional<std::string> oci_push; // --push REF
  bool cache_stats = false;
  bool json = false;
  bool progress = false; // the progress line: stderr is a terminal, no NO_COLOR, no --quiet
};

struct LinkCommand {
  LinkOptions link; // an empty package: no link, a cache command alone; its trust is resolved
                    // from `trust` when the command runs
  CacheRequest cache;
  TrustRequest trust;
  bool cache_stats = false;
  std::optional<uint64_t> prune;
  std::filesystem::path push;
  bool json = false;
  bool sign_only = false;              // --sign and no --arch: sign the package as it is
  std::optional<RegistryRef> oci_push; // --push: after the link (or the signing, or alone)
  bool push_only = false;              // --push and no --arch: push the package as it is
  bool progress = false;               // a line on stderr, rewritten as the link goes
};

// The first refusal is the error; its message is the whole usage line ("no package given",
// "--arch: unknown arch 'x': ...", "--cache-prune: 'x' is not a size", ...). A dry run reads no
// cache entry, so it opens no cache unless a cache command needs one.
Expected<LinkCommand> make_link_command(LinkArgs args);

// Runs the command; returns the exit status (0, or 1 when anything failed).
int run_link_command(const LinkCommand &command, ToolOutput &output);

} // namespace cudaq_rt
