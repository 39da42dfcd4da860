// cache/: linked cubins kept by a content-addressed key, locally and on a remote server.
//
// The content-addressed cache of linked cubins shared by `cudaq-rt-link` (ahead of time) and the
// load path's link at load (`cudaq-rt-run`): a local directory and, optionally, a remote server
// behind it. Its parts, one file each: the key (link_key.h), the entry file (cache_entry.h), the
// configuration (cache_config.h), the counters and eviction (cache_stats.h), the remote server
// (remote_cache.h). Why several processes and users may share one cache is at the top of
// link_cache.cpp.
#pragma once

#include "base/digest.h"
#include "cache/cache_config.h"
#include "cache/cache_entry.h"
#include "cache/cache_stats.h"
#include "cache/link_key.h"
#include "cache/remote_cache.h"
#include "cudaq_rt/error.h"

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace cudaq_rt {

class LinkCache;
// Opens the cache a tool asked for, with the process's environment (cache_config.h), under the
// trust its caller resolved once (resolve_trust, signing.h: the command layer, the C API, the
// interposer), which governs the entries it takes and signs those it stores. A setting that
// cannot be understood is an error; a cache that has no directory, or whose directory cannot be
// created, is a warning and no cache: a link works without one.
Expected<LinkCache> open_link_cache(const CacheRequest &request, TrustPolicy trust,
                                    std::vector<std::string> &warnings);

class LinkCache {
public:
  // Creates the cache directory when enabled. A disabled cache never touches the disk.
  static Expected<LinkCache> open(CacheConfig config);

  const CacheConfig &config() const { return config_; }
  std::filesystem::path entry_path(const Digest &key) const;

  // The keys this process signs with and trusts (signing.h). With trusted keys, an entry that no
  // trusted key signed is a miss wherever it comes from, and is left in place (it is whole: it
  // may be good for another user); the link that follows replaces it.
  const TrustPolicy &trust() const { return trust_; }
  void set_trust(TrustPolicy trust) { trust_ = std::move(trust); }

  // A verified entry, or nothing: a missing, unreadable or corrupt entry is a miss, and a corrupt
  // one is removed. A hit makes the entry the most recently used. A unit's entry (key.object())
  // counts as a unit hit or miss.
  // With `defer_cubin`, a local entry's cubin is read only when asked for, into the caller's
  // buffer (CacheEntry::deferred; the interposer's hits).
  std::optional<CacheEntry> get(const LinkKey &key, bool defer_cubin = false) const;
  // Stores an entry (unless it alone is larger than the limit), then evicts least recently used
  // entries if the cache has grown past its limit.
  Status put(const LinkKey &key, std::span<const uint8_t> cubin,
             const LinkMetadata &metadata) const;
  // An entry file's bytes, signed with the process's signing key when it has one; compressed
  // unless `form` says plain (a local entry: cache_entry.cpp says why).
  std::vector<uint8_t> encode(const Digest &key, std::span<const uint8_t> cubin,
                              const LinkMetadata &metadata,
                              EntryPayload form = EntryPayload::compressed) const;

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

  // Whether the trust policy lets this process use the entry (always, without trusted keys).
  bool trusted(const CacheEntry &entry, const Digest &key) const;

  CacheConfig config_;
  std::shared_ptr<const RemoteCache> remote_;
  TrustPolicy trust_;
};

} // namespace cudaq_rt
