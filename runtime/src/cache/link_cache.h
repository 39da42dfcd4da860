// The content-addressed cache of linked cubins shared by `cudaq-rt-link` (ahead of time) and the
// load path's link at load (`cudaq-rt-run`). The key, the on-disk format and the
// argument for why several processes may use one cache at once are in the comment at the top of
// link_cache.cpp.
#pragma once

#include "base/digest.h"
#include "cache/remote_cache.h"
#include "cudaq_rt/error.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace cudaq_rt {

// Which libnvJitLink does the linking: its version and, standing in for a hash of its 98 MB of
// code, where it lives and its size and mtime (ccache's compiler_check=mtime).
struct NvJitLinkIdentity {
  unsigned major = 0;
  unsigned minor = 0;
  std::string path; // realpath of the loaded library
  uint64_t size = 0;
  int64_t mtime_ns = 0;

  std::string version() const; // "13.0"
  nlohmann::json to_json() const;
  friend bool operator==(const NvJitLinkIdentity &, const NvJitLinkIdentity &) = default;
};

// The identity of the libnvJitLink this process has loaded (found through dladdr on
// nvJitLinkVersion), computed on the first call and remembered.
Expected<NvJitLinkIdentity> loaded_nvjitlink_identity();

// The nvJitLink options as they go into a key: -time and -no-cache (which change only the info log
// or nvJitLink's in-memory reuse) are dropped, -verbose is not (ptxas records it in the cubin);
// -kernels-used= and -variables-used= are sets, so they are sorted, deduplicated and moved to the
// end; every other option keeps its place.
std::vector<std::string> normalize_link_options(std::span<const std::string> options);

// A cache key with its parts, so that `--dry-run` can show what was hashed.
struct LinkKey {
  // Bump when anything below changes meaning; old entries then simply stop matching.
  static constexpr uint32_t format_version = 1;

  std::string arch;                 // with any a/f suffix: sm_90a is not sm_90
  std::vector<std::string> options; // normalized
  NvJitLinkIdentity nvjitlink;
  std::vector<Digest> inputs; // in the order they are added to the link
  // What the entry holds: "" a module linked whole (keys made before per-TU mode existed),
  // "per-tu" a module linked from units compiled alone, whose sizes (runs of `inputs`) are
  // `units`, "object" one unit's relocatable cubin. Hashed unless empty.
  std::string mode;
  std::vector<uint32_t> units;
  Digest digest; // SHA-256 over all of the above

  // `options` is the final list passed to nvJitLinkCreate; it is normalized here.
  static LinkKey make(std::string arch, std::span<const std::string> options,
                      NvJitLinkIdentity nvjitlink, std::vector<Digest> inputs);
  static LinkKey make(std::string arch, std::span<const std::string> options,
                      NvJitLinkIdentity nvjitlink, std::vector<Digest> inputs, std::string mode,
                      std::vector<uint32_t> units = {});
  bool object() const { return mode == "object"; }
  nlohmann::json to_json() const;
};

// What is stored beside a cubin: enough to fill a manifest's link record without relinking.
struct LinkMetadata {
  std::string arch;
  std::vector<std::string> options;
  std::string nvjitlink_version; // "13.0"
  std::vector<Digest> inputs;
  std::string mode; // the key's: "", "per-tu" or "object"
  std::string info_log;
  double link_time_ms = 0;
  int64_t created = 0; // seconds since the epoch

  // Everything but the log and the timings, taken from the key.
  static LinkMetadata from_key(const LinkKey &key);
  nlohmann::json to_json() const;
  static std::optional<LinkMetadata> from_json(const nlohmann::json &j);
};

struct CacheEntry {
  std::vector<uint8_t> cubin;
  LinkMetadata metadata;
  bool remote = false; // fetched from the remote cache (and copied into the local one)
};

// The bytes of an entry file, local or remote (the format is in link_cache.cpp), and back: a
// decoded entry has passed every check the format has, against `key`.
std::vector<uint8_t> encode_cache_entry(const Digest &key, std::span<const uint8_t> cubin,
                                        const LinkMetadata &metadata);
std::optional<CacheEntry> decode_cache_entry(std::string_view file, const Digest &key);

struct CacheConfig {
  static constexpr uint64_t default_max_bytes = uint64_t{256} << 20; // as CUDA_CACHE_MAXSIZE

  std::filesystem::path dir;
  bool enabled = true;
  uint64_t max_bytes = default_max_bytes; // 0: no limit
  // Why the cache is off although nothing turned it off (no directory to put it in), or empty.
  std::string unavailable;

  // CUDAQ_RT_CACHE_DIR (an absolute path; default $XDG_CACHE_HOME/cudaq-rt, else
  // $HOME/.cache/cudaq-rt), CUDAQ_RT_CACHE_DISABLE (1/true/yes/on or 0/false/no/off),
  // CUDAQ_RT_CACHE_MAXSIZE (bytes, with an optional K, M or G suffix of powers of 1024; 0 means no
  // limit). A value that cannot be understood is an Error naming the variable. No directory at
  // all (none of the three set) leaves the cache off, saying why in `unavailable`.
  using Getenv = std::function<const char *(const char *)>;
  static Expected<CacheConfig> from_environment();
  static Expected<CacheConfig> from_environment(const Getenv &getenv);
};

// Parses a CUDAQ_RT_CACHE_MAXSIZE value ("268435456", "512K", "256M", "4G").
std::optional<uint64_t> parse_cache_size(std::string_view text);

struct CacheStats {
  std::filesystem::path dir;
  bool enabled = false;
  uint64_t max_bytes = 0;
  uint64_t entries = 0; // counted on disk when stats() ran
  uint64_t bytes = 0;
  // Persistent counters, over all processes since the cache was created or cleared.
  uint64_t hits = 0;
  uint64_t misses = 0;
  uint64_t stores = 0;
  uint64_t evictions = 0;
  uint64_t corrupt = 0; // entries that failed verification and were removed
  // Per-TU mode's units (relocatable cubins), counted apart from the modules above.
  uint64_t unit_hits = 0;
  uint64_t unit_misses = 0;

  // The remote cache (empty url: none), and its counters, kept in the same file.
  std::string remote_url; // with its options, never a secret
  uint64_t remote_hits = 0;
  uint64_t remote_misses = 0;  // corrupt entries included
  uint64_t remote_corrupt = 0; // entries that failed verification
  uint64_t remote_stores = 0;
  uint64_t remote_errors = 0; // failed requests: no answer, timeouts, HTTP errors
  uint64_t remote_bytes_in = 0;
  uint64_t remote_bytes_out = 0;

  nlohmann::json to_json() const;
};

struct PruneResult {
  uint64_t entries = 0;
  uint64_t bytes = 0;
};

// What a tool asks for: `dir` (its --cache-dir) overrides $CUDAQ_RT_CACHE_DIR, `remote` (its
// --remote-cache) overrides $CUDAQ_RT_REMOTE_CACHE, `disable` (its --no-cache, or a command that
// reads no entry) leaves the environment unread and turns both caches off.
// CUDAQ_RT_CACHE_DISABLE turns both off too; a local cache with no directory leaves the remote on.
struct CacheRequest {
  std::filesystem::path dir;
  std::string remote;
  bool disable = false;
};

class LinkCache;
// Opens the cache a tool asked for. A setting that cannot be understood is an error; a cache that
// has no directory, or whose directory cannot be created, is a warning and no cache: a link
// works without one.
Expected<LinkCache> open_link_cache(const CacheRequest &request,
                                    std::vector<std::string> &warnings);

class LinkCache {
public:
  // Creates the cache directory when enabled. A disabled cache never touches the disk.
  static Expected<LinkCache> open(CacheConfig config);

  const CacheConfig &config() const { return config_; }
  std::filesystem::path entry_path(const Digest &key) const;

  // A verified entry, or nothing: a missing, unreadable or corrupt entry is a miss, and a corrupt
  // one is removed. A hit makes the entry the most recently used. A unit's entry (key.object())
  // counts as a unit hit or miss.
  std::optional<CacheEntry> get(const LinkKey &key) const;
  // Stores an entry (unless it alone is larger than the limit), then evicts least recently used
  // entries if the cache has grown past its limit.
  Status put(const LinkKey &key, std::span<const uint8_t> cubin,
             const LinkMetadata &metadata) const;

  // The remote tier, or null. get() and put() never touch it: link_arch asks it on a local miss
  // and stores into it after a link, so that a remote entry is checked before it is used.
  const RemoteCache *remote() const { return remote_.get(); }
  void set_remote(std::shared_ptr<const RemoteCache> remote) { remote_ = std::move(remote); }

  // What a remote lookup or store found, for the caller to show: `notes` with -v, `warning`
  // always (the first failure of the process only).
  struct RemoteLog {
    std::vector<std::string> notes;
    std::vector<std::string> warnings;
  };
  // The remote entry for `key`, decoded and verified, and accepted by `check` (the checks a fresh
  // link's cubin gets), then copied into the local cache. Anything else is a miss.
  using CubinCheck = std::function<std::optional<Error>(std::span<const uint8_t>)>;
  std::optional<CacheEntry> get_remote(const LinkKey &key, const CubinCheck &check,
                                       RemoteLog &log) const;
  // Stores an entry remotely, unless the remote cache is read-only. A failure is a warning.
  void put_remote(const LinkKey &key, std::span<const uint8_t> cubin, const LinkMetadata &metadata,
                  RemoteLog &log) const;
  // Stores an entry's exact bytes remotely: --cache-push, where a failure is an error.
  Status push_remote(const Digest &key, std::span<const uint8_t> entry) const;

  // Counts entries on disk and reads the persistent counters.
  Expected<CacheStats> stats() const;
  // Evicts least recently used entries until at most `target_bytes` remain (0: all of them) and
  // removes temporary files that crashed writers left behind.
  Expected<PruneResult> prune(uint64_t target_bytes) const;

private:
  explicit LinkCache(CacheConfig c) : config_(std::move(c)) {}
  std::filesystem::path root() const { return config_.dir / "v1"; }

  // Stores an encoded entry locally.
  Status put_encoded(const Digest &key, std::span<const uint8_t> bytes) const;
  // Adds to the persistent counters (when there is a local cache to keep them).
  struct RemoteCounts;
  void count_remote(const RemoteCounts &add) const;

  CacheConfig config_;
  std::shared_ptr<const RemoteCache> remote_;
};

} // namespace cudaq_rt
