// The link cache: linked cubins kept on disk, named by a hash of everything that decides their
// bytes.
//
// Why the key has these parts
// ---------------------------
// nvJitLink is deterministic: the same inputs, options and library give a byte-identical cubin
// (measured, CUDA 13.0). So a cubin may be reused exactly when all of these are equal, and the key
// hashes each of them as a length-prefixed field:
//
//  - the key format version, so that changing what is hashed invalidates old entries instead of
//    mismatching them;
//  - the target arch *with* its a/f suffix: fatbins that hold only sm_100a code cannot be linked
//    for sm_100, and an sm_90a cubin is not an sm_90 one (cudf learned this the hard way);
//  - the nvJitLink options, normalized so that options that cannot change the cubin do not split
//    the cache: -time only adds to the info log, -no-cache only switches nvJitLink's in-memory
//    reuse. -verbose is kept: it passes -v to ptxas, which records its options in the cubin's
//    .note.nv.tkinfo, so a verbose link is a different cubin (measured, CUDA 13.0).
//    -kernels-used= and -variables-used= name sets, so their order and repeats do not matter.
//    Everything else keeps its order (-Xptxas options may override each other), and anything
//    unknown is kept, since a key that is too specific costs a relink while one that is too loose
//    returns wrong code. -split-compile-extended changes the code and is kept, and so is whether
//    -lto was given (without it a PTX + LTO-IR fatbin links through the PTX);
//  - the nvJitLink version and the library's identity. The version alone misses patched or
//    rebuilt libraries; hashing the 98 MB library at every process start would cost about 0.4 s,
//    more than most links. As ccache's compiler_check=mtime does, the realpath, size and mtime of
//    the loaded library stand in for its contents;
//  - the input digests in link order: symbol resolution and the layout of the cubin follow the
//    order of nvJitLinkAddData calls;
//  - what the entry holds, when it is not a module linked whole: a module linked per translation
//    unit ("per-tu", with the sizes of the runs of inputs compiled alone, since which inputs are
//    compiled together decides what is inlined), or one unit's relocatable cubin ("object"). A
//    whole-program key hashes no mode, so keys made before per-TU mode existed still match. The
//    options differ between the modes too (-Xptxas=-c), but the mode is what decides the procedure.
//
// Per-TU mode keeps each unit's relocatable cubin as an entry of its own, under a key of the same
// parts (the unit's container digests, its compile options): the same format, the same checks on
// read, the same LRU eviction. A module's entry is found without its units; the units are looked
// up only when the module misses, so a change to one unit costs that unit and the final link.
//
// On disk
// -------
// <dir>/v1/<first 2 hex digits of the key>/<64 hex digits>, one file per entry:
//
//   offset size
//        0    8  magic "CQRTLNK\0"
//        8    4  entry format version, u32 little endian (1)
//       12    4  reserved, 0
//       16   32  the full key digest
//       48    8  metadata length M, u64 little endian
//       56    8  cubin size C, u64 little endian
//       64   32  SHA-256 of the cubin
//       96   32  SHA-256 of bytes 0..96 followed by the metadata
//      128    M  metadata, JSON (arch, options, nvJitLink version, inputs, info log, time, created)
//    128+M    C  cubin
//
// Every byte is covered by a check: the file size must be exactly 128 + M + C, the header and
// metadata by their digest, the cubin by its own. An entry that fails any check (truncated, bit
// flips, garbage, another key's entry renamed into place) is a miss and is removed, so the next
// link stores a good one. The cubin is never handed out unverified.
//
// <dir>/v1/stats holds counters (hits, misses, stores, evictions, corrupt entries, per-TU units'
// hits and misses, and the remote cache's: hits, misses, corrupt entries, stores, errors, bytes in
// and out) and the
// approximate total size of the entries, as fixed-width text lines rewritten in place under
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

#include <nvJitLink.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <link.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace cudaq_rt {
namespace {

constexpr char entry_magic[8] = {'C', 'Q', 'R', 'T', 'L', 'N', 'K', '\0'};
constexpr uint32_t entry_format_version = 1;
constexpr size_t header_size = 128;
constexpr size_t checked_header_size = 96; // the part the header digest covers
constexpr int64_t stale_temp_seconds = 3600;
// Fifteen fixed-width lines; anything past this is not ours to read.
constexpr size_t max_stats_bytes = 4096;
// The largest entry get() reads without a size limit: an entry larger than the limit is never
// stored, so a larger file is corrupt; without a limit, more than any cubin.
constexpr uint64_t max_unlimited_entry_bytes = uint64_t{2} << 30;

uint64_t evict_target(uint64_t limit) {
  return limit - limit / 10;
}

void put_le(uint8_t *p, uint64_t v, int n) {
  for (int i = 0; i < n; ++i)
    p[i] = static_cast<uint8_t>(v >> (8 * i));
}

uint64_t get_le(const uint8_t *p, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; ++i)
    v |= uint64_t{p[i]} << (8 * i);
  return v;
}

bool is_hex(std::string_view s) {
  return std::all_of(s.begin(), s.end(),
                     [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

std::string lower(std::string s) {
  for (char &c : s)
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

json digests_to_json(const std::vector<Digest> &ds) {
  json out = json::array();
  for (const Digest &d : ds)
    out.push_back(d.str());
  return out;
}

Digest header_digest(const uint8_t *header, std::string_view metadata) {
  Sha256 h;
  h.update(std::span<const uint8_t>(header, checked_header_size));
  h.update(metadata);
  return h.finish();
}

std::vector<uint8_t> encode_entry(const Digest &key, std::span<const uint8_t> cubin,
                                  const std::string &metadata) {
  std::vector<uint8_t> out(header_size + metadata.size() + cubin.size());
  uint8_t *h = out.data();
  std::memcpy(h, entry_magic, 8);
  put_le(h + 8, entry_format_version, 4);
  put_le(h + 12, 0, 4);
  std::memcpy(h + 16, key.bytes.data(), 32);
  put_le(h + 48, metadata.size(), 8);
  put_le(h + 56, cubin.size(), 8);
  Digest cubin_digest = sha256(cubin);
  std::memcpy(h + 64, cubin_digest.bytes.data(), 32);
  Digest check = header_digest(h, metadata);
  std::memcpy(h + 96, check.bytes.data(), 32);
  std::memcpy(h + header_size, metadata.data(), metadata.size());
  if (!cubin.empty())
    std::memcpy(h + header_size + metadata.size(), cubin.data(), cubin.size());
  return out;
}

std::optional<CacheEntry> decode_entry(std::string_view file, const Digest &key) {
  if (file.size() < header_size)
    return std::nullopt;
  auto h = reinterpret_cast<const uint8_t *>(file.data());
  if (std::memcmp(h, entry_magic, 8) != 0 || get_le(h + 8, 4) != entry_format_version ||
      get_le(h + 12, 4) != 0 || std::memcmp(h + 16, key.bytes.data(), 32) != 0)
    return std::nullopt;
  uint64_t metadata_size = get_le(h + 48, 8), cubin_size = get_le(h + 56, 8);
  uint64_t body = file.size() - header_size;
  if (metadata_size > body || cubin_size != body - metadata_size)
    return std::nullopt;
  std::string_view metadata = file.substr(header_size, metadata_size);
  Digest check = header_digest(h, metadata);
  if (std::memcmp(h + 96, check.bytes.data(), 32) != 0)
    return std::nullopt;
  std::span<const uint8_t> cubin(h + header_size + metadata_size, cubin_size);
  Digest cubin_digest = sha256(cubin);
  if (std::memcmp(h + 64, cubin_digest.bytes.data(), 32) != 0)
    return std::nullopt;
  json j = json::parse(metadata, nullptr, /*allow_exceptions=*/false);
  auto parsed = LinkMetadata::from_json(j);
  if (!parsed)
    return std::nullopt;
  return CacheEntry{std::vector<uint8_t>(cubin.begin(), cubin.end()), std::move(*parsed)};
}

struct Counters {
  uint64_t hits = 0, misses = 0, stores = 0, evictions = 0, corrupt = 0, unit_hits = 0,
           unit_misses = 0;
  std::optional<uint64_t> bytes; // unknown until a scan has counted them
  uint64_t remote_hits = 0, remote_misses = 0, remote_corrupt = 0, remote_stores = 0,
           remote_errors = 0, remote_bytes_in = 0, remote_bytes_out = 0;
};

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
                    std::pair{"unit_misses", &c.unit_misses}};
}

// The counters in <dir>/v1/stats, locked for as long as this object lives. Created with mode
// 0666 less the umask, so that every user of a group-shared cache can count. Never opened through
// a symbolic link, and never written when it has other hard links: whoever can write to a shared
// cache must not be able to make another user truncate a file of theirs.
class LockedStats {
public:
  explicit LockedStats(const fs::path &path) {
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
    fd_ = file_->fd();
    load();
  }
  LockedStats(const LockedStats &) = delete;
  LockedStats &operator=(const LockedStats &) = delete;

  Counters c;
  // Why the file could not be opened or locked; the counters then stay local.
  std::optional<Error> error;

  void save() {
    if (fd_ < 0)
      return;
    std::string text;
    auto line = [&](const char *name, std::optional<uint64_t> v) {
      char buf[40];
      std::snprintf(buf, sizeof buf, "%-12s%20s\n", name, v ? std::to_string(*v).c_str() : "?");
      text += buf;
    };
    for (auto [name, value] : counter_fields(c))
      line(name, *value);
    line("bytes", c.bytes);
    if (::pwrite(fd_, text.data(), text.size(), 0) == static_cast<ssize_t>(text.size()))
      (void)!::ftruncate(fd_, static_cast<off_t>(text.size()));
  }

private:
  void load() {
    std::string text;
    char buf[512];
    off_t off = 0;
    while (text.size() < max_stats_bytes) {
      ssize_t n = ::pread(fd_, buf, sizeof buf, off);
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
      char *stop = nullptr;
      errno = 0;
      unsigned long long value = std::strtoull(l.c_str() + v, &stop, 10);
      if (errno != 0 || stop == l.c_str() + v || *stop != '\0')
        continue; // "?" or damage: leave the default
      for (auto [counter, field] : counter_fields(c))
        if (name == counter)
          *field = value;
      if (name == "bytes")
        c.bytes = value;
    }
  }

  std::optional<RegularFile> file_; // closing it releases the lock
  int fd_ = -1;
};

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

struct EvictResult {
  PruneResult removed;
  PruneResult remaining;
};

// Under the stats lock: counts the entries and, if there are more than `limit` bytes of them,
// evicts least recently used ones until at most `target` bytes remain.
EvictResult evict_locked(const fs::path &root, Counters &c, std::optional<uint64_t> limit,
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

std::optional<bool> parse_flag(std::string value) {
  value = lower(std::move(value));
  if (value == "1" || value == "true" || value == "yes" || value == "on")
    return true;
  if (value.empty() || value == "0" || value == "false" || value == "no" || value == "off")
    return false;
  return std::nullopt;
}

Expected<NvJitLinkIdentity> find_nvjitlink_identity() {
  NvJitLinkIdentity id;
  if (nvJitLinkVersion(&id.major, &id.minor) != NVJITLINK_SUCCESS)
    return make_error("libnvJitLink", "nvJitLinkVersion failed");
  // In a PIE, &nvJitLinkVersion is the library's own definition; a non-PIE executable that takes
  // the address gets a canonical PLT entry instead, so fall back to asking the loader by soname.
  std::string loaded;
  Dl_info info{};
  if (::dladdr(reinterpret_cast<void *>(&nvJitLinkVersion), &info) && info.dli_fname &&
      fs::path(info.dli_fname).filename().string().find("nvJitLink") != std::string::npos)
    loaded = info.dli_fname;
  if (loaded.empty()) {
    std::string soname = cat("libnvJitLink.so.", id.major);
    if (void *handle = ::dlopen(soname.c_str(), RTLD_LAZY | RTLD_NOLOAD)) {
      link_map *map = nullptr;
      if (::dlinfo(handle, RTLD_DI_LINKMAP, &map) == 0 && map && map->l_name)
        loaded = map->l_name;
      ::dlclose(handle);
    }
  }
  if (loaded.empty())
    return make_error("libnvJitLink", "cannot find where the loaded library lives");
  char *real = ::realpath(loaded.c_str(), nullptr);
  if (!real)
    return make_error(loaded, "cannot resolve the path: ", std::strerror(errno));
  id.path = real;
  std::free(real);
  struct stat st;
  if (::stat(id.path.c_str(), &st) != 0)
    return make_error(id.path, "cannot stat: ", std::strerror(errno));
  id.size = static_cast<uint64_t>(st.st_size);
  id.mtime_ns = int64_t{st.st_mtim.tv_sec} * 1'000'000'000 + st.st_mtim.tv_nsec;
  return id;
}

} // namespace

std::vector<uint8_t> encode_cache_entry(const Digest &key, std::span<const uint8_t> cubin,
                                        const LinkMetadata &metadata) {
  return encode_entry(key, cubin, metadata.to_json().dump());
}

std::optional<CacheEntry> decode_cache_entry(std::string_view file, const Digest &key) {
  return decode_entry(file, key);
}

std::string NvJitLinkIdentity::version() const {
  return cat(major, '.', minor);
}

json NvJitLinkIdentity::to_json() const {
  return {{"version", version()}, {"path", path}, {"size", size}, {"mtime_ns", mtime_ns}};
}

Expected<NvJitLinkIdentity> loaded_nvjitlink_identity() {
  static const Expected<NvJitLinkIdentity> identity = find_nvjitlink_identity();
  return identity;
}

std::vector<std::string> normalize_link_options(std::span<const std::string> options) {
  static constexpr std::string_view kernels = "-kernels-used=", variables = "-variables-used=";
  std::vector<std::string> out, kernel_set, variable_set;
  for (const std::string &o : options) {
    if (o == "-time" || o == "-no-cache")
      continue;
    if (o.starts_with(kernels))
      kernel_set.push_back(o);
    else if (o.starts_with(variables))
      variable_set.push_back(o);
    else
      out.push_back(o);
  }
  for (std::vector<std::string> *set : {&kernel_set, &variable_set}) {
    std::sort(set->begin(), set->end());
    set->erase(std::unique(set->begin(), set->end()), set->end());
    out.insert(out.end(), set->begin(), set->end());
  }
  return out;
}

LinkKey LinkKey::make(std::string arch, std::span<const std::string> options,
                      NvJitLinkIdentity nvjitlink, std::vector<Digest> inputs) {
  return make(std::move(arch), options, std::move(nvjitlink), std::move(inputs), "");
}

LinkKey LinkKey::make(std::string arch, std::span<const std::string> options,
                      NvJitLinkIdentity nvjitlink, std::vector<Digest> inputs, std::string mode,
                      std::vector<uint32_t> units) {
  LinkKey k{std::move(arch),
            normalize_link_options(options),
            std::move(nvjitlink),
            std::move(inputs),
            std::move(mode),
            std::move(units),
            Digest{}};
  Sha256 h;
  h.field("cudaq-rt link key");
  h.field(std::to_string(format_version));
  h.field(k.arch);
  h.field(std::to_string(k.options.size()));
  for (const std::string &o : k.options)
    h.field(o);
  h.field(k.nvjitlink.version());
  h.field(k.nvjitlink.path);
  h.field(std::to_string(k.nvjitlink.size));
  h.field(std::to_string(k.nvjitlink.mtime_ns));
  h.field(std::to_string(k.inputs.size()));
  for (const Digest &d : k.inputs)
    h.field(std::string_view(reinterpret_cast<const char *>(d.bytes.data()), d.bytes.size()));
  if (!k.mode.empty()) {
    h.field("mode");
    h.field(k.mode);
    h.field(std::to_string(k.units.size()));
    for (uint32_t n : k.units)
      h.field(std::to_string(n));
  }
  k.digest = h.finish();
  return k;
}

json LinkKey::to_json() const {
  json j = {{"digest", digest.str()},
            {"format_version", format_version},
            {"arch", arch},
            {"options", options},
            {"nvjitlink", nvjitlink.to_json()},
            {"inputs", digests_to_json(inputs)},
            {"mode", mode.empty() ? "whole" : mode}};
  if (!units.empty())
    j["units"] = units;
  return j;
}

LinkMetadata LinkMetadata::from_key(const LinkKey &key) {
  LinkMetadata m;
  m.arch = key.arch;
  m.options = key.options;
  m.nvjitlink_version = key.nvjitlink.version();
  m.inputs = key.inputs;
  m.mode = key.mode;
  m.created = static_cast<int64_t>(::time(nullptr));
  return m;
}

json LinkMetadata::to_json() const {
  json j = {{"arch", arch},
            {"options", options},
            {"nvjitlink_version", nvjitlink_version},
            {"inputs", digests_to_json(inputs)},
            {"info_log", info_log},
            {"link_time_ms", link_time_ms},
            {"created", created}};
  if (!mode.empty())
    j["mode"] = mode;
  return j;
}

std::optional<LinkMetadata> LinkMetadata::from_json(const json &j) {
  if (!j.is_object())
    return std::nullopt;
  auto string_at = [&](const char *name) -> const json * {
    auto it = j.find(name);
    return it != j.end() && it->is_string() ? &*it : nullptr;
  };
  auto array_at = [&](const char *name) -> const json * {
    auto it = j.find(name);
    return it != j.end() && it->is_array() ? &*it : nullptr;
  };
  const json *arch = string_at("arch"), *version = string_at("nvjitlink_version"),
             *log = string_at("info_log"), *options = array_at("options"),
             *inputs = array_at("inputs");
  auto time = j.find("link_time_ms"), created = j.find("created");
  if (!arch || !version || !log || !options || !inputs || time == j.end() || !time->is_number() ||
      created == j.end() || !created->is_number_integer())
    return std::nullopt;
  LinkMetadata m;
  if (auto mode = j.find("mode"); mode != j.end()) {
    if (!mode->is_string())
      return std::nullopt;
    m.mode = mode->get<std::string>();
  }
  m.arch = arch->get<std::string>();
  m.nvjitlink_version = version->get<std::string>();
  m.info_log = log->get<std::string>();
  m.link_time_ms = time->get<double>();
  m.created = created->get<int64_t>();
  for (const json &o : *options) {
    if (!o.is_string())
      return std::nullopt;
    m.options.push_back(o.get<std::string>());
  }
  for (const json &i : *inputs) {
    std::optional<Digest> d = i.is_string() ? Digest::parse(i.get<std::string>()) : std::nullopt;
    if (!d)
      return std::nullopt;
    m.inputs.push_back(*d);
  }
  return m;
}

std::optional<uint64_t> parse_cache_size(std::string_view text) {
  constexpr std::string_view units = "KMG";
  size_t unit =
      text.empty()
          ? units.npos
          : units.find(static_cast<char>(std::toupper(static_cast<unsigned char>(text.back()))));
  uint64_t scale = 1;
  if (unit != units.npos) {
    scale = uint64_t{1} << (10 * (unit + 1));
    text.remove_suffix(1);
  }
  if (text.empty())
    return std::nullopt;
  uint64_t value = 0;
  for (char ch : text) {
    uint64_t digit = static_cast<uint64_t>(ch - '0');
    if (ch < '0' || ch > '9' || value > (UINT64_MAX - digit) / 10)
      return std::nullopt;
    value = value * 10 + digit;
  }
  if (value > UINT64_MAX / scale)
    return std::nullopt;
  return value * scale;
}

Expected<CacheConfig> CacheConfig::from_environment() {
  return from_environment([](const char *name) -> const char * { return std::getenv(name); });
}

Expected<CacheConfig> CacheConfig::from_environment(const Getenv &getenv) {
  auto var = [&](const char *name) -> std::string {
    const char *v = getenv(name);
    return v ? v : "";
  };
  CacheConfig c;
  if (std::string v = var("CUDAQ_RT_CACHE_DISABLE"); !v.empty()) {
    std::optional<bool> disable = parse_flag(v);
    if (!disable)
      return make_error("", "CUDAQ_RT_CACHE_DISABLE=", quote(v),
                        " is not a boolean: expected 1, true, yes or on to disable the cache, or "
                        "0, false, no or off");
    c.enabled = !*disable;
  }
  if (std::string v = var("CUDAQ_RT_CACHE_MAXSIZE"); !v.empty()) {
    std::optional<uint64_t> size = parse_cache_size(v);
    if (!size)
      return make_error("", "CUDAQ_RT_CACHE_MAXSIZE=", quote(v),
                        " is not a size: expected a number of bytes with an optional K, M or G "
                        "suffix, such as 512M (0 means no limit)");
    c.max_bytes = *size;
  }
  if (std::string v = var("CUDAQ_RT_CACHE_DIR"); !v.empty()) {
    if (!fs::path(v).is_absolute())
      return make_error("", "CUDAQ_RT_CACHE_DIR=", quote(v), " is not an absolute path");
    c.dir = v;
  } else if (std::string xdg = var("XDG_CACHE_HOME"); !xdg.empty() && xdg[0] == '/') {
    c.dir = fs::path(xdg) / "cudaq-rt"; // the XDG spec says to ignore relative paths
  } else if (std::string home = var("HOME"); !home.empty()) {
    c.dir = fs::path(home) / ".cache" / "cudaq-rt";
  } else if (c.enabled) {
    c.enabled = false;
    c.unavailable = "no directory for the link cache: set CUDAQ_RT_CACHE_DIR, XDG_CACHE_HOME or "
                    "HOME, or set CUDAQ_RT_CACHE_DISABLE=1";
  }
  return c;
}

Expected<LinkCache> open_link_cache(const CacheRequest &request,
                                    std::vector<std::string> &warnings) {
  if (request.disable) {
    CacheConfig off;
    off.enabled = false;
    return LinkCache::open(off);
  }
  const std::string dir = request.dir.empty() ? "" : entry_path(request.dir).string();
  auto config = CacheConfig::from_environment([&](const char *var) -> const char * {
    if (!dir.empty() && std::string_view(var) == "CUDAQ_RT_CACHE_DIR")
      return dir.c_str();
    return std::getenv(var);
  });
  if (!config)
    return std::move(config).take_error();
  std::shared_ptr<RemoteCache> remote;
  const char *remote_env = std::getenv("CUDAQ_RT_REMOTE_CACHE");
  std::string remote_url = !request.remote.empty() ? request.remote : remote_env ? remote_env : "";
  // CUDAQ_RT_CACHE_DISABLE turns both off; a local cache with no directory leaves the remote on.
  const bool disabled = !config->enabled && config->unavailable.empty();
  if (!remote_url.empty() && !disabled) {
    auto parsed = RemoteConfig::parse(remote_url);
    if (!parsed)
      return make_error("", request.remote.empty() ? "CUDAQ_RT_REMOTE_CACHE: " : "--remote-cache: ",
                        parsed.error().message);
    auto opened = RemoteCache::open(
        *parsed, [](const char *var) -> const char * { return std::getenv(var); });
    if (!opened)
      return std::move(opened).take_error();
    remote = std::move(*opened);
  }
  if (!config->unavailable.empty())
    warnings.push_back("not using a link cache: " + config->unavailable);
  auto cache = LinkCache::open(*config);
  if (!cache) {
    warnings.push_back("not using a link cache: " + cache.error().str());
    config->enabled = false;
    cache = LinkCache::open(*config);
  }
  if (cache && remote)
    cache->set_remote(std::move(remote));
  return cache;
}

json CacheStats::to_json() const {
  json j = {{"dir", dir.string()}, {"enabled", enabled}, {"max_bytes", max_bytes},
            {"entries", entries},  {"bytes", bytes},     {"hits", hits},
            {"misses", misses},    {"stores", stores},   {"evictions", evictions},
            {"corrupt", corrupt}};
  j["units"] = {{"hits", unit_hits}, {"misses", unit_misses}};
  j["remote"] = {{"url", remote_url.empty() ? json(nullptr) : json(remote_url)},
                 {"hits", remote_hits},
                 {"misses", remote_misses},
                 {"corrupt", remote_corrupt},
                 {"stores", remote_stores},
                 {"errors", remote_errors},
                 {"bytes_in", remote_bytes_in},
                 {"bytes_out", remote_bytes_out}};
  return j;
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

std::optional<CacheEntry> LinkCache::get(const LinkKey &key) const {
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
  std::optional<std::string> bytes;
  if (file && *file)
    if (auto read = (*file)->read())
      bytes = std::move(*read);
  std::optional<CacheEntry> entry;
  if (bytes)
    entry = decode_entry(*bytes, key.digest);
  bool corrupt = bytes && !entry;
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
  LockedStats stats(root() / "stats");
  if (entry) {
    ++(key.object() ? stats.c.unit_hits : stats.c.hits);
  } else {
    ++(key.object() ? stats.c.unit_misses : stats.c.misses);
    if (corrupt) {
      ++stats.c.corrupt;
      if (stats.c.bytes && bytes)
        *stats.c.bytes -= std::min<uint64_t>(*stats.c.bytes, bytes->size());
    }
  }
  stats.save();
  return entry;
}

Status LinkCache::put(const LinkKey &key, std::span<const uint8_t> cubin,
                      const LinkMetadata &metadata) const {
  if (!config_.enabled)
    return Status::ok();
  return put_encoded(key.digest, encode_cache_entry(key.digest, cubin, metadata));
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
  LockedStats stats(root() / "stats");
  ++stats.c.stores;
  if (stats.c.bytes)
    *stats.c.bytes += bytes.size();
  if (!stats.c.bytes || (config_.max_bytes != 0 && *stats.c.bytes > config_.max_bytes)) {
    std::optional<uint64_t> limit;
    if (config_.max_bytes != 0)
      limit = config_.max_bytes;
    evict_locked(root(), stats.c, limit, evict_target(config_.max_bytes));
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
  LockedStats locked(root() / "stats");
  if (locked.error)
    return *locked.error;
  PruneResult on_disk = evict_locked(root(), locked.c, std::nullopt, 0).remaining;
  locked.save();
  s.entries = on_disk.entries;
  s.bytes = on_disk.bytes;
  s.hits = locked.c.hits;
  s.misses = locked.c.misses;
  s.stores = locked.c.stores;
  s.evictions = locked.c.evictions;
  s.corrupt = locked.c.corrupt;
  s.unit_hits = locked.c.unit_hits;
  s.unit_misses = locked.c.unit_misses;
  s.remote_hits = locked.c.remote_hits;
  s.remote_misses = locked.c.remote_misses;
  s.remote_corrupt = locked.c.remote_corrupt;
  s.remote_stores = locked.c.remote_stores;
  s.remote_errors = locked.c.remote_errors;
  s.remote_bytes_in = locked.c.remote_bytes_in;
  s.remote_bytes_out = locked.c.remote_bytes_out;
  return s;
}

Expected<PruneResult> LinkCache::prune(uint64_t target_bytes) const {
  if (!config_.enabled)
    return PruneResult{};
  LockedStats stats(root() / "stats");
  if (stats.error)
    return *stats.error;
  PruneResult removed = evict_locked(root(), stats.c, target_bytes, target_bytes).removed;
  stats.save();
  return removed;
}

} // namespace cudaq_rt

namespace cudaq_rt {

struct LinkCache::RemoteCounts {
  uint64_t hits = 0, misses = 0, corrupt = 0, stores = 0, errors = 0, bytes_in = 0, bytes_out = 0;
};

void LinkCache::count_remote(const RemoteCounts &add) const {
  if (!config_.enabled)
    return;
  LockedStats stats(root() / "stats");
  stats.c.remote_hits += add.hits;
  stats.c.remote_misses += add.misses;
  stats.c.remote_corrupt += add.corrupt;
  stats.c.remote_stores += add.stores;
  stats.c.remote_errors += add.errors;
  stats.c.remote_bytes_in += add.bytes_in;
  stats.c.remote_bytes_out += add.bytes_out;
  stats.save();
}

namespace {
void remote_failure(const RemoteCache &remote, const std::string &why, LinkCache::RemoteLog &log) {
  std::string line = cat("remote cache ", remote.config().url, ": ", why);
  if (first_remote_warning())
    log.warnings.push_back(line + " (linking locally; this process warns once)");
  else
    log.notes.push_back(line);
}
} // namespace

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
    entry = decode_entry(f.bytes, key.digest);
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
  std::vector<uint8_t> bytes = encode_cache_entry(key.digest, cubin, metadata);
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
