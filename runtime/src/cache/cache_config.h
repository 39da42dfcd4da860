// Where the link cache lives and what bounds it, from what a tool was asked and the environment,
// with one rule of precedence: a tool's flag over the environment, the environment over the
// default (as ccache's command line, environment and configuration file).
#pragma once

#include "base/signing.h"
#include "cache/remote_cache.h"
#include "cudaq_rt/error.h"

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

namespace cudaq_rt {

struct CacheConfig {
  static constexpr uint64_t default_max_bytes = uint64_t{256} << 20; // as CUDA_CACHE_MAXSIZE

  std::filesystem::path dir;
  bool enabled = true;
  uint64_t max_bytes = default_max_bytes; // 0: no limit
  // Why the cache is off although nothing turned it off (no directory to put it in), or empty.
  std::string unavailable;
};

// Parses a CUDAQ_RT_CACHE_MAXSIZE value ("268435456", "512K", "256M", "4G").
std::optional<uint64_t> parse_cache_size(std::string_view text);

// What a tool asks for: `dir` (its --cache-dir) overrides $CUDAQ_RT_CACHE_DIR, `remote` (its
// --remote-cache) overrides $CUDAQ_RT_REMOTE_CACHE, `disable` (its --no-cache, or a command that
// reads no entry) leaves the environment unread and turns both caches off.
struct CacheRequest {
  std::filesystem::path dir;
  std::string remote;
  bool disable = false;
};

// The variables the cache reads, as text (unset and empty are the same): the process's, or a
// test's.
struct CacheEnvironment {
  std::string cache_dir;      // CUDAQ_RT_CACHE_DIR: an absolute path
  std::string cache_disable;  // CUDAQ_RT_CACHE_DISABLE: 1/true/yes/on or 0/false/no/off
  std::string cache_maxsize;  // CUDAQ_RT_CACHE_MAXSIZE: bytes, K/M/G suffixes, 0 no limit
  std::string remote_cache;   // CUDAQ_RT_REMOTE_CACHE: URL[#options] (remote_cache.h)
  std::string xdg_cache_home; // the default's parent, $XDG_CACHE_HOME/cudaq-rt when absolute,
  std::string home;           // else $HOME/.cache/cudaq-rt

  static CacheEnvironment of_process();
};

// Both tiers as they are to be opened.
struct CacheSettings {
  CacheConfig local;
  std::optional<RemoteConfig> remote;
};

// Applies the precedence. A value that cannot be understood is an Error naming the flag or the
// variable it came from. No directory at all leaves the local cache off, saying why in
// `unavailable`, and the remote one on; CUDAQ_RT_CACHE_DISABLE turns both off.
Expected<CacheSettings> resolve_cache_settings(const CacheRequest &request,
                                               const CacheEnvironment &env);

} // namespace cudaq_rt
