// The link cache: linked cubins kept on disk, named by a hash of everything that decides their
// bytes (link_key.cpp), one self-checking file each (cache_entry.cpp), bounded by size with LRU
// eviction (cache_stats.cpp).
//
// Several processes at once
// -------------------------
//  - Entries are written to a temporary name in their shard directory, fsynced and renamed over
//    the final name (write_file_atomic). A reader therefore sees a whole entry or none. Two
//    writers of one key write identical bytes (nvJitLink is deterministic), and the second rename
//    replaces the first: both succeed, one valid entry remains.
//  - Entries are never modified in place, only created by rename or removed by unlink. A reader
//    that opened an entry before an eviction unlinked it still reads the whole, verified file; one
//    that comes after gets ENOENT, a miss.
//  - Evictions, counter updates and size tracking happen under an exclusive flock on the stats
//    file, so two processes never evict for each other and counters add up. Entry writes and
//    reads take no lock; the scan may therefore miss a store that lands during it, which only
//    makes the tracked size high, and the next scan corrects it.
//  - The remaining race is benign: a reader that finds a corrupt entry and removes it may, if a
//    writer renamed a good entry into place in between, remove the good one. The cost is one
//    relink.
//  - Shard directories are created on demand and never removed, so a writer never loses its
//    directory to an eviction. Temporary files older than an hour belong to writers that were
//    killed; scans remove them.
//
// Several users at once
// ---------------------
// A cache shared by a group is trusted by its members for its contents (an entry is checked
// against itself, not against its writer), but not for what its names point to: an entry or the
// stats file is opened without following a symbolic link and without blocking (RegularFile), an
// entry is read only up to the cache's limit, the stats file is not written when it has other
// hard links, and no entry is read, written or evicted through a shard that is a symbolic link.
// Whoever can write to the cache can thus make others relink, but not read, block on, truncate or
// remove a file of theirs. man/cudaq-rt-link.1 gives the permission model.
#include "cache/link_cache.h"

#include "base/atomic_file.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace fs = std::filesystem;

namespace cudaq_rt {
namespace {

// The largest entry get() reads without a size limit: an entry larger than the limit is never
// stored, so a larger file is corrupt; without a limit, more than any cubin.
constexpr uint64_t max_unlimited_entry_bytes = uint64_t{2} << 30;

void remote_failure(const RemoteCache &remote, const std::string &why, LinkCache::RemoteLog &log) {
  std::string line = cat("remote cache ", remote.config().url, ": ", why);
  if (first_remote_warning())
    log.warnings.push_back(line + " (linking locally; this process warns once)");
  else
    log.notes.push_back(line);
}

} // namespace

Expected<LinkCache> open_link_cache(const CacheRequest &request, TrustPolicy trust,
                                    std::vector<std::string> &warnings) {
  auto settings = resolve_cache_settings(request, CacheEnvironment::of_process());
  if (!settings)
    return std::move(settings).take_error();
  std::shared_ptr<RemoteCache> remote;
  if (settings->remote) {
    auto opened = RemoteCache::open(
        *settings->remote, [](const char *var) -> const char * { return std::getenv(var); });
    if (!opened)
      return std::move(opened).take_error();
    remote = std::move(*opened);
  }
  CacheConfig &config = settings->local;
  if (!config.unavailable.empty())
    warnings.push_back("not using a link cache: " + config.unavailable);
  auto cache = LinkCache::open(config);
  if (!cache) {
    warnings.push_back("not using a link cache: " + cache.error().str());
    config.enabled = false;
    cache = LinkCache::open(config);
  }
  if (cache && remote)
    cache->set_remote(std::move(remote));
  if (cache)
    cache->set_trust(std::move(trust));
  return cache;
}

Expected<LinkCache> LinkCache::open(CacheConfig config) {
  LinkCache cache(std::move(config));
  if (!cache.config_.enabled)
    return cache;
  std::error_code ec;
  fs::create_directories(cache.root(), ec);
  if (ec || !fs::is_directory(cache.root(), ec))
    return make_error(cache.root().string(), "cannot create the link cache directory: ",
                      ec ? ec.message() : "not a directory");
  // Whoever can write an entry decides what code a GPU runs: the cache's own directories must be
  // real directories, not writable by every user (a shared cache is shared through a group,
  // cudaq-rt-link(1)). A world-writable directory with the sticky bit (/tmp) still lets anyone
  // create entries, so it is refused too.
  for (const fs::path &dir : {cache.config_.dir, cache.root()}) {
    struct stat st {};
    if (::lstat(dir.c_str(), &st) != 0)
      return make_error(dir.string(),
                        "cannot read the link cache directory: ", std::strerror(errno));
    if (S_ISLNK(st.st_mode) && dir == cache.root())
      return make_error(dir.string(), "is a symbolic link: the link cache's own directories "
                                      "must be directories");
    if (!S_ISLNK(st.st_mode) && (st.st_mode & S_IWOTH))
      return make_error(dir.string(), "is writable by every user, who could then plant code "
                                      "for the GPU: share a cache through a group instead");
  }
  return cache;
}

fs::path LinkCache::entry_path(const Digest &key) const {
  std::string h = key.hex();
  return root() / h.substr(0, 2) / h;
}

std::optional<CacheEntry> LinkCache::get(const LinkKey &key, bool defer_cubin) const {
  if (!config_.enabled)
    return std::nullopt;
  fs::path path = entry_path(key.digest);
  // Whatever is there that is not a regular file no larger than an entry can be (a FIFO, a
  // link, a device) is never read, and is corrupt. A regular entry this user cannot open or read
  // is a miss, as before: it may be another user's good one.
  const uint64_t limit = config_.max_bytes != 0 ? config_.max_bytes : max_unlimited_entry_bytes;
  // Through the shard as it is, never through a link that leads out of the cache.
  int shard = ::open(path.parent_path().c_str(),
                     O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  const std::string name = path.filename().string();
  auto file = shard < 0 ? Expected<std::optional<RegularFile>>(std::optional<RegularFile>())
                        : RegularFile::open_at(shard, name, path, {.max_bytes = limit});
  // Read piece by piece: the cubin of a plain entry lands once, in the buffer the caller gets.
  const bool opened = file && *file;
  std::optional<CacheEntry> entry;
  const std::string shown = path.string();
  if (opened)
    entry = read_cache_entry((*file)->fd(), (*file)->size(), key.digest,
                             defer_cubin ? &shown : nullptr);
  bool corrupt = opened && !entry;
  const bool untrusted = entry && !trusted(*entry, key.digest);
  if (untrusted)
    entry.reset();
  if (!file) {
    struct stat st;
    corrupt = ::fstatat(shard, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 &&
              !(S_ISREG(st.st_mode) && static_cast<uint64_t>(st.st_size) <= limit);
  }
  if (entry) {
    timespec now[2] = {{0, UTIME_NOW}, {0, UTIME_NOW}};
    ::futimens((*file)->fd(), now); // gone meanwhile: still a good hit
  } else if (corrupt && ::unlinkat(shard, name.c_str(), 0) != 0 && errno == EISDIR) {
    ::unlinkat(shard, name.c_str(), AT_REMOVEDIR); // an empty one; any other blocks only stores
  }
  if (shard >= 0)
    ::close(shard);
  StatsFile stats(root() / "stats");
  if (entry) {
    ++(key.object() ? stats.counters.unit_hits : stats.counters.hits);
  } else {
    ++(key.object() ? stats.counters.unit_misses : stats.counters.misses);
    if (untrusted)
      ++stats.counters.untrusted;
    if (corrupt) {
      ++stats.counters.corrupt;
      if (stats.counters.bytes && opened)
        *stats.counters.bytes -= std::min<uint64_t>(*stats.counters.bytes, (*file)->size());
    }
  }
  stats.save();
  return entry;
}

Status LinkCache::put(const LinkKey &key, std::span<const uint8_t> cubin,
                      const LinkMetadata &metadata) const {
  if (!config_.enabled)
    return Status::ok();
  return put_encoded(key.digest, encode(key.digest, cubin, metadata, EntryPayload::plain));
}

std::vector<uint8_t> LinkCache::encode(const Digest &key, std::span<const uint8_t> cubin,
                                       const LinkMetadata &metadata, EntryPayload form) const {
  return encode_cache_entry(key, cubin, metadata, trust_.signer.get(), form);
}

bool LinkCache::trusted(const CacheEntry &entry, const Digest &key) const {
  return !trust_.trusted || entry.signed_by(*trust_.trusted, key);
}

Status LinkCache::put_encoded(const Digest &key, std::span<const uint8_t> bytes) const {
  if (!config_.enabled)
    return Status::ok();
  if (config_.max_bytes != 0 && bytes.size() > config_.max_bytes)
    return Status::ok();
  fs::path path = entry_path(key);
  std::error_code ec; // the whole cache may have been removed since open()
  if (fs::create_directories(path.parent_path(), ec); ec)
    return make_error(path.parent_path().string(),
                      "cannot create a cache directory: ", ec.message());
  // create_directories accepts a link to a directory; an entry must not land outside the cache.
  struct stat st;
  if (::lstat(path.parent_path().c_str(), &st) == 0 && S_ISLNK(st.st_mode))
    return make_error(path.parent_path().string(),
                      "is a symbolic link, not a directory: nothing is written through it");
  if (Status st = write_file_atomic(path, bytes); !st)
    return st;
  StatsFile stats(root() / "stats");
  ++stats.counters.stores;
  if (stats.counters.bytes)
    *stats.counters.bytes += bytes.size();
  if (!stats.counters.bytes ||
      (config_.max_bytes != 0 && *stats.counters.bytes > config_.max_bytes)) {
    std::optional<uint64_t> limit;
    if (config_.max_bytes != 0)
      limit = config_.max_bytes;
    evict_locked(root(), stats.counters, limit, evict_target(config_.max_bytes));
  }
  stats.save();
  return Status::ok();
}

Expected<CacheStats> LinkCache::stats() const {
  CacheStats s;
  s.dir = config_.dir;
  s.enabled = config_.enabled;
  s.max_bytes = config_.max_bytes;
  if (remote_)
    s.remote_url = remote_->config().str();
  if (!config_.enabled)
    return s;
  StatsFile locked(root() / "stats");
  if (locked.error)
    return *locked.error;
  PruneResult on_disk = evict_locked(root(), locked.counters, std::nullopt, 0).remaining;
  locked.save();
  s.entries = on_disk.entries;
  s.bytes = on_disk.bytes;
  s.hits = locked.counters.hits;
  s.misses = locked.counters.misses;
  s.stores = locked.counters.stores;
  s.evictions = locked.counters.evictions;
  s.corrupt = locked.counters.corrupt;
  s.unit_hits = locked.counters.unit_hits;
  s.unit_misses = locked.counters.unit_misses;
  s.remote_hits = locked.counters.remote_hits;
  s.remote_misses = locked.counters.remote_misses;
  s.remote_corrupt = locked.counters.remote_corrupt;
  s.remote_untrusted = locked.counters.remote_untrusted;
  s.untrusted = locked.counters.untrusted;
  s.remote_stores = locked.counters.remote_stores;
  s.remote_errors = locked.counters.remote_errors;
  s.remote_bytes_in = locked.counters.remote_bytes_in;
  s.remote_bytes_out = locked.counters.remote_bytes_out;
  return s;
}

Expected<PruneResult> LinkCache::prune(uint64_t target_bytes) const {
  if (!config_.enabled)
    return PruneResult{};
  StatsFile stats(root() / "stats");
  if (stats.error)
    return *stats.error;
  PruneResult removed = evict_locked(root(), stats.counters, target_bytes, target_bytes).removed;
  stats.save();
  return removed;
}

struct LinkCache::RemoteCounts {
  uint64_t hits = 0, misses = 0, corrupt = 0, untrusted = 0, stores = 0, errors = 0, bytes_in = 0,
           bytes_out = 0;
};

void LinkCache::count_remote(const RemoteCounts &add) const {
  if (!config_.enabled)
    return;
  StatsFile stats(root() / "stats");
  stats.counters.remote_hits += add.hits;
  stats.counters.remote_misses += add.misses;
  stats.counters.remote_corrupt += add.corrupt;
  stats.counters.remote_untrusted += add.untrusted;
  stats.counters.remote_stores += add.stores;
  stats.counters.remote_errors += add.errors;
  stats.counters.remote_bytes_in += add.bytes_in;
  stats.counters.remote_bytes_out += add.bytes_out;
  stats.save();
}

std::optional<CacheEntry> LinkCache::get_remote(const LinkKey &key, const CubinCheck &check,
                                                RemoteLog &log) const {
  if (!remote_ || remote_->down())
    return std::nullopt;
  const uint64_t limit =
      config_.enabled && config_.max_bytes != 0 ? config_.max_bytes : max_unlimited_entry_bytes;
  RemoteFetch f = remote_->fetch(key.digest, limit);
  RemoteCounts n;
  std::optional<CacheEntry> entry;
  switch (f.outcome) {
  case RemoteFetch::Outcome::failure:
    n.errors = 1;
    remote_failure(*remote_, f.why, log);
    break;
  case RemoteFetch::Outcome::miss:
    n.misses = 1;
    log.notes.push_back(cat("remote cache: miss: ", f.why));
    break;
  case RemoteFetch::Outcome::hit: {
    n.bytes_in = f.bytes.size();
    entry = decode_cache_entry(f.bytes, key.digest);
    if (entry && !trusted(*entry, key.digest)) {
      // Whole, but nobody this process trusts vouches for it: a server (or whoever can write to
      // it) must not choose the code. Not copied locally.
      entry.reset();
      n.misses = n.untrusted = 1;
      log.notes.push_back(cat("remote cache: miss: GET ", key.digest.short_str(), ": ",
                              f.bytes.size(), " bytes of an entry no trusted key signed"));
      break;
    }
    std::optional<Error> bad;
    if (entry)
      bad = check(entry->cubin);
    if (!entry || bad) {
      entry.reset();
      n.misses = n.corrupt = 1;
      log.notes.push_back(cat("remote cache: miss: GET ", key.digest.short_str(), ": ",
                              f.bytes.size(), " bytes that ",
                              bad ? "hold a cubin that fails the link's checks: " + bad->str()
                                  : std::string("are not a valid entry for this key")));
      break;
    }
    n.hits = 1;
    entry->remote = true;
    log.notes.push_back(
        cat("remote cache: hit: GET ", key.digest.short_str(), ": ", f.bytes.size(), " bytes"));
    // The fetched bytes are the entry file: copied as they are.
    if (auto st = put_encoded(key.digest, as_bytes(f.bytes)); !st)
      log.warnings.push_back("not cached locally: " + st.error().str());
    break;
  }
  }
  count_remote(n);
  return entry;
}

void LinkCache::put_remote(const LinkKey &key, std::span<const uint8_t> cubin,
                           const LinkMetadata &metadata, RemoteLog &log) const {
  if (!remote_ || remote_->config().read_only || remote_->down())
    return;
  std::vector<uint8_t> bytes = encode(key.digest, cubin, metadata);
  RemoteStore s = remote_->store(key.digest, bytes);
  RemoteCounts n;
  if (s.ok) {
    n.stores = 1;
    n.bytes_out = bytes.size();
    log.notes.push_back(
        cat("remote cache: stored: PUT ", key.digest.short_str(), ": ", bytes.size(), " bytes"));
  } else if (!s.refused || !s.why.starts_with("the server refused an earlier")) {
    n.errors = 1;
    remote_failure(*remote_, s.why, log);
  }
  count_remote(n);
}

Status LinkCache::push_remote(const Digest &key, std::span<const uint8_t> entry) const {
  if (!remote_)
    return make_error("", "no remote cache: give --remote-cache URL or set CUDAQ_RT_REMOTE_CACHE");
  if (remote_->config().read_only)
    return make_error("", "remote cache ", remote_->config().url, " is read-only");
  RemoteStore s = remote_->store(key, entry);
  RemoteCounts n;
  if (s.ok) {
    n.stores = 1;
    n.bytes_out = entry.size();
  } else {
    n.errors = 1;
  }
  count_remote(n);
  if (!s.ok)
    return make_error("", "remote cache ", remote_->config().url, ": ", s.why);
  return Status::ok();
}

} // namespace cudaq_rt
