// The link cache's counters and its size bound: the stats file every process updates under one
// lock, and the scan that counts entries and evicts the least recently used. cache_stats.cpp says
// how the bound is kept.
#pragma once

#include "base/atomic_file.h"
#include "cudaq_rt/error.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

namespace cudaq_rt {

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
  // Entries that were whole but not signed by a trusted key, under --trust: misses, kept.
  uint64_t untrusted = 0;

  // The remote cache (empty url: none), and its counters, kept in the same file.
  std::string remote_url; // with its options, never a secret
  uint64_t remote_hits = 0;
  uint64_t remote_misses = 0;    // corrupt entries included
  uint64_t remote_corrupt = 0;   // entries that failed verification
  uint64_t remote_untrusted = 0; // whole entries no trusted key signed, under --trust
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

// `cudaq-rt-link --cache-stats`: one line per figure, the remote cache's where there is one.
std::string format_cache_stats(const CacheStats &stats);

// The counters as the stats file holds them.
struct CacheCounters {
  uint64_t hits = 0, misses = 0, stores = 0, evictions = 0, corrupt = 0, unit_hits = 0,
           unit_misses = 0, untrusted = 0;
  std::optional<uint64_t> bytes; // unknown until a scan has counted them
  uint64_t remote_hits = 0, remote_misses = 0, remote_corrupt = 0, remote_stores = 0,
           remote_errors = 0, remote_bytes_in = 0, remote_bytes_out = 0, remote_untrusted = 0;
};

// <dir>/v1/stats, locked for as long as this object lives. Created with mode 0666 less the umask,
// so that every user of a group-shared cache can count. Never opened through a symbolic link, and
// never written when it has other hard links: whoever can write to a shared cache must not be
// able to make another user truncate a file of theirs.
class StatsFile {
public:
  explicit StatsFile(const std::filesystem::path &path);
  StatsFile(const StatsFile &) = delete;
  StatsFile &operator=(const StatsFile &) = delete;

  CacheCounters counters;
  // Why the file could not be opened or locked; the counters then stay local.
  std::optional<Error> error;

  void save();

private:
  void load();
  std::optional<RegularFile> file_; // closing it releases the lock
};

struct EvictResult {
  PruneResult removed;
  PruneResult remaining;
};

// Under the stats lock: counts the entries under `root` (removing stale temporary files on the
// way) and, if there are more than `limit` bytes of them, evicts least recently used ones until
// at most `target` bytes remain.
EvictResult evict_locked(const std::filesystem::path &root, CacheCounters &c,
                         std::optional<uint64_t> limit, uint64_t target);

// After a store: the target a full cache is evicted down to.
uint64_t evict_target(uint64_t limit);

} // namespace cudaq_rt
