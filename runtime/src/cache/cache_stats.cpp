// The link cache's counters and size bound.
//
// <dir>/v1/stats holds counters (hits, misses, stores, evictions, corrupt entries, per-TU units'
// hits and misses, entries refused under --trust, and the remote cache's: hits, misses, corrupt
// and refused entries, stores, errors, bytes in and out) and the approximate total size of the entries, as fixed-width text lines rewritten in place under
// flock(2), in the manner of ccache's stats files. Fixed width means that a rewrite never leaves a
// stale tail behind, whatever the numbers. The counters are advisory: a stats file that cannot be
// read or written never fails a get or a put.
//
// Size bound and LRU
// ------------------
// A hit sets the entry's mtime to now, so mtime is the time of last use. After a store, the
// tracked size is checked; only when it is over the limit (or unknown, after the stats file was
// lost) is the cache scanned: 256 shard directories and one stat per entry, a few milliseconds at
// the default 256 MiB. The scan corrects the tracked size and evicts oldest-mtime entries down to
// 90% of the limit, so that a full cache is not rescanned on every store. An entry larger than the
// limit alone is never stored, as CUDA's ComputeCache does. A limit of 0 means no limit.
#include "cache/cache_stats.h"

#include "base/atomic_file.h"

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace cudaq_rt {
namespace {

constexpr int64_t stale_temp_seconds = 3600;
// Seventeen fixed-width lines; anything past this is not ours to read.
constexpr size_t max_stats_bytes = 4096;

bool is_hex(std::string_view s) {
  return std::all_of(s.begin(), s.end(),
                     [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

// The counters by name, as the stats file spells them.
template <class C> auto counter_fields(C &c) {
  return std::array{std::pair{"hits", &c.hits},
                    std::pair{"misses", &c.misses},
                    std::pair{"stores", &c.stores},
                    std::pair{"evictions", &c.evictions},
                    std::pair{"corrupt", &c.corrupt},
                    std::pair{"r_hits", &c.remote_hits},
                    std::pair{"r_misses", &c.remote_misses},
                    std::pair{"r_corrupt", &c.remote_corrupt},
                    std::pair{"r_stores", &c.remote_stores},
                    std::pair{"r_errors", &c.remote_errors},
                    std::pair{"r_bytes_in", &c.remote_bytes_in},
                    std::pair{"r_bytes_out", &c.remote_bytes_out},
                    std::pair{"unit_hits", &c.unit_hits},
                    std::pair{"unit_misses", &c.unit_misses},
                    std::pair{"untrusted", &c.untrusted},
                    std::pair{"r_untrusted", &c.remote_untrusted}};
}

struct ScannedEntry {
  fs::path path;
  uint64_t size;
  timespec mtime;
};

// Lists the entries under `root`, removing stale temporary files on the way.
std::vector<ScannedEntry> scan(const fs::path &root) {
  std::vector<ScannedEntry> out;
  DIR *top = ::opendir(root.c_str());
  if (!top)
    return out;
  time_t now = ::time(nullptr);
  while (dirent *shard = ::readdir(top)) {
    std::string_view sname = shard->d_name;
    if (sname.size() != 2 || !is_hex(sname))
      continue;
    fs::path sdir = root / shard->d_name;
    // A shard that is a symbolic link leads out of the cache: evicting there would remove
    // another user's files.
    int sfd =
        ::openat(::dirfd(top), shard->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    DIR *d = sfd < 0 ? nullptr : ::fdopendir(sfd);
    if (!d) {
      if (sfd >= 0)
        ::close(sfd);
      continue;
    }
    while (dirent *e = ::readdir(d)) {
      std::string_view name = e->d_name;
      bool entry = name.size() == 64 && is_hex(name);
      bool temp = name.size() > 1 && name[0] == '.' && name.find(".tmp-") != std::string::npos;
      if (!entry && !temp)
        continue;
      struct stat st;
      if (::fstatat(::dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode))
        continue;
      if (temp) {
        if (now - st.st_mtim.tv_sec > stale_temp_seconds)
          ::unlinkat(::dirfd(d), e->d_name, 0);
        continue;
      }
      out.push_back({sdir / e->d_name, static_cast<uint64_t>(st.st_size), st.st_mtim});
    }
    ::closedir(d);
  }
  ::closedir(top);
  return out;
}

} // namespace

StatsFile::StatsFile(const fs::path &path) {
  auto file = RegularFile::open(path, {.write = true, .create_mode = 0666});
  if (!file || !*file) {
    error = file ? make_error(path.string(), "cannot create: ", std::strerror(ENOENT))
                 : std::move(file).take_error();
    return;
  }
  struct stat st;
  if (::fstat((*file)->fd(), &st) == 0 && st.st_nlink != 1) {
    error = make_error(path.string(), "has ", st.st_nlink,
                       " hard links: refusing to write a file that is also elsewhere");
    return;
  }
  while (::flock((*file)->fd(), LOCK_EX) != 0) {
    if (errno != EINTR) {
      error = make_error(path.string(), "cannot lock: ", std::strerror(errno));
      return;
    }
  }
  file_.emplace(std::move(**file));
  load();
}

void StatsFile::save() {
  if (!file_)
    return;
  std::string text;
  auto line = [&](const char *name, std::optional<uint64_t> v) {
    char buf[40];
    std::snprintf(buf, sizeof buf, "%-12s%20s\n", name, v ? std::to_string(*v).c_str() : "?");
    text += buf;
  };
  for (auto [name, value] : counter_fields(counters))
    line(name, *value);
  line("bytes", counters.bytes);
  if (::pwrite(file_->fd(), text.data(), text.size(), 0) == static_cast<ssize_t>(text.size()))
    (void)!::ftruncate(file_->fd(), static_cast<off_t>(text.size()));
}

void StatsFile::load() {
  std::string text;
  char buf[512];
  off_t off = 0;
  while (text.size() < max_stats_bytes) {
    ssize_t n = ::pread(file_->fd(), buf, sizeof buf, off);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      break;
    text.append(buf, static_cast<size_t>(n));
    off += n;
  }
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos)
      break;
    std::string l = text.substr(pos, end - pos);
    pos = end + 1;
    size_t sp = l.find(' ');
    if (sp == std::string::npos)
      continue;
    std::string name = l.substr(0, sp);
    size_t v = l.find_first_not_of(' ', sp);
    if (v == std::string::npos)
      continue;
    if (l[v] < '0' || l[v] > '9')
      continue; // "?", a sign (strtoull reads "-1" as its largest value) or damage
    char *stop = nullptr;
    errno = 0;
    unsigned long long value = std::strtoull(l.c_str() + v, &stop, 10);
    if (errno != 0 || stop == l.c_str() + v || *stop != '\0')
      continue; // "?" or damage: leave the default
    for (auto [counter, field] : counter_fields(counters))
      if (name == counter)
        *field = value;
    if (name == "bytes")
      counters.bytes = value;
  }
}

uint64_t evict_target(uint64_t limit) {
  return limit - limit / 10;
}

// Under the stats lock: counts the entries and, if there are more than `limit` bytes of them,
// evicts least recently used ones until at most `target` bytes remain.
EvictResult evict_locked(const fs::path &root, CacheCounters &c, std::optional<uint64_t> limit,
                         uint64_t target) {
  std::vector<ScannedEntry> entries = scan(root);
  uint64_t total = 0;
  for (const ScannedEntry &e : entries)
    total += e.size;
  uint64_t count = entries.size();
  PruneResult removed;
  if (limit && total > *limit) {
    std::sort(entries.begin(), entries.end(), [](const ScannedEntry &a, const ScannedEntry &b) {
      if (a.mtime.tv_sec != b.mtime.tv_sec)
        return a.mtime.tv_sec < b.mtime.tv_sec;
      if (a.mtime.tv_nsec != b.mtime.tv_nsec)
        return a.mtime.tv_nsec < b.mtime.tv_nsec;
      return a.path < b.path;
    });
    for (const ScannedEntry &e : entries) {
      if (total <= target)
        break;
      total -= e.size; // gone either way: evicted now, or by someone else already
      --count;
      if (::unlink(e.path.c_str()) == 0) {
        ++removed.entries;
        removed.bytes += e.size;
      }
    }
  }
  c.evictions += removed.entries;
  c.bytes = total;
  return {removed, {count, total}};
}

json CacheStats::to_json() const {
  json j = {{"dir", dir.string()}, {"enabled", enabled},    {"max_bytes", max_bytes},
            {"entries", entries},  {"bytes", bytes},        {"hits", hits},
            {"misses", misses},    {"stores", stores},      {"evictions", evictions},
            {"corrupt", corrupt},  {"untrusted", untrusted}};
  j["units"] = {{"hits", unit_hits}, {"misses", unit_misses}};
  j["remote"] = {{"url", remote_url.empty() ? json(nullptr) : json(remote_url)},
                 {"hits", remote_hits},
                 {"misses", remote_misses},
                 {"corrupt", remote_corrupt},
                 {"untrusted", remote_untrusted},
                 {"stores", remote_stores},
                 {"errors", remote_errors},
                 {"bytes_in", remote_bytes_in},
                 {"bytes_out", remote_bytes_out}};
  return j;
}

std::string format_cache_stats(const CacheStats &s) {
  std::string out =
      cat("cache directory  ", s.dir.string(), "\nenabled          ", s.enabled ? "yes" : "no",
          "\nentries          ", s.entries, "\nsize             ", s.bytes, " bytes (max ",
          s.max_bytes, ")", "\nhits             ", s.hits, "\nmisses           ", s.misses,
          "\nstores           ", s.stores, "\nevictions        ", s.evictions,
          "\ncorrupt entries  ", s.corrupt, "\nunit hits        ", s.unit_hits,
          "\nunit misses      ", s.unit_misses, "\nuntrusted        ", s.untrusted, "\n");
  if (!s.remote_url.empty())
    out += cat("remote cache     ", s.remote_url, "\nremote hits      ", s.remote_hits,
               "\nremote misses    ", s.remote_misses, " (", s.remote_corrupt, " corrupt, ",
               s.remote_untrusted, " untrusted)", "\nremote stores    ", s.remote_stores,
               "\nremote errors    ", s.remote_errors, "\nremote bytes     ", s.remote_bytes_in,
               " in, ", s.remote_bytes_out, " out\n");
  return out;
}

} // namespace cudaq_rt
