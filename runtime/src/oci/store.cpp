#include "oci/store.h"

#include "base/atomic_file.h"
#include "oci/transfer.h"
#include "package/package.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <fcntl.h>
#include <mutex>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

namespace fs = std::filesystem;

namespace cudaq_rt {
namespace {

fs::path ref_record(const fs::path &store, const RegistryRef &ref) {
  return store / "refs" / sha256(ref.name()).hex();
}

// The blobs of a stored package that no start has read yet: from the store's blob directory,
// which every stored package's blobs are hard links into (a blob two image manifests share is
// fetched once), else from the registry, written there first. Without a registry (--offline,
// or one that cannot be reached), a blob the store lacks is an error saying `why`.
class StoreBlobSource final : public BlobSource {
public:
  StoreBlobSource(fs::path blobs, std::unique_ptr<Registry> registry, std::string why = {})
      : blobs_(std::move(blobs)), registry_(std::move(registry)), why_(std::move(why)) {}

  Expected<FetchedBlob> fetch(const Digest &d, uint64_t size) const override {
    const fs::path file = blobs_ / d.hex();
    if (auto kept = RegularFile::open_at(AT_FDCWD, file.string(), file, {.max_bytes = size});
        kept && *kept && (*kept)->size() == size)
      if (auto bytes = (*kept)->read(); bytes && sha256(*bytes) == d)
        return FetchedBlob{std::move(*bytes), file};
    if (!registry_)
      return make_error("", why_, ": blob ", d.short_str(),
                        " is not stored (no earlier start of this package read it)");
    std::lock_guard<std::mutex> lock(mutex_); // the load path of several GPUs at once
    auto bytes = registry_->get_blob(d, size);
    if (!bytes)
      return std::move(bytes).take_error();
    std::error_code ec;
    fs::create_directories(blobs_, ec);
    // Verified by get_blob; a blob that cannot be kept here is still the package's copy.
    if (ec || !write_file_atomic(file, as_bytes(*bytes)))
      return FetchedBlob{std::move(*bytes), {}};
    return FetchedBlob{std::move(*bytes), file};
  }

private:
  fs::path blobs_;
  mutable std::mutex mutex_;
  std::unique_ptr<Registry> registry_;
  std::string why_;
};

fs::path blob_store(const fs::path &store) {
  return store / "blobs" / "sha256";
}

// The package stored for an image manifest, if one is there (opened with `source`, the blobs
// it lacks may be absent).
std::optional<fs::path> stored(const fs::path &store, const Digest &manifest,
                               const std::shared_ptr<const BlobSource> &source) {
  const fs::path dir = store / "packages" / manifest.hex();
  std::error_code ec;
  for (const auto &e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.size() > std::string_view(package_suffix).size() && name.front() != '.' &&
        name.ends_with(package_suffix) && Package::open(e.path(), {.source = source})) {
      ::utimensat(AT_FDCWD, dir.c_str(), nullptr, 0); // used now
      return e.path();
    }
  }
  return std::nullopt;
}

std::optional<Digest> read_ref(const fs::path &store, const RegistryRef &ref) {
  if (ref.digest)
    return ref.digest;
  const fs::path p = ref_record(store, ref);
  auto file = RegularFile::open_at(AT_FDCWD, p.string(), p, {.max_bytes = 128});
  if (!file || !*file)
    return std::nullopt;
  auto text = (*file)->read();
  if (!text)
    return std::nullopt;
  return Digest::parse(std::string_view(*text).substr(0, text->find('\n')));
}

// Removes the least recently used packages beyond the bound, one a process holds open (its
// shared lock) kept, and then the blobs only they used.
void evict(const fs::path &store) {
  std::error_code ec;
  std::vector<std::pair<fs::file_time_type, fs::path>> dirs;
  for (const auto &e : fs::directory_iterator(store / "packages", ec))
    if (e.is_directory(ec) && e.path().filename().string().front() != '.')
      dirs.emplace_back(fs::last_write_time(e.path(), ec), e.path());
  if (dirs.size() <= max_store_packages)
    return;
  std::sort(dirs.begin(), dirs.end());
  size_t excess = dirs.size() - max_store_packages;
  const size_t removing = excess;
  for (const auto &[when, dir] : dirs) {
    if (excess == 0)
      break;
    bool busy = false;
    for (const auto &pkg : fs::directory_iterator(dir, ec)) {
      int fd = ::open(pkg.path().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
      if (fd < 0)
        continue;
      busy = busy || ::flock(fd, LOCK_EX | LOCK_NB) != 0;
      ::close(fd);
    }
    if (busy)
      continue;
    fs::remove_all(dir, ec);
    --excess;
  }
  if (excess == removing)
    return;
  // A blob no stored package links any more (one link: the store's own) goes too. One a start
  // wrote a moment ago and is about to link is then written into its package as a copy.
  for (const auto &e : fs::directory_iterator(blob_store(store), ec)) {
    struct stat st;
    if (::lstat(e.path().c_str(), &st) == 0 && S_ISREG(st.st_mode) && st.st_nlink == 1)
      fs::remove(e.path(), ec);
  }
}

} // namespace

Expected<StoredPackage> package_from_registry(const RegistryRef &ref, const fs::path &store,
                                              bool offline, const Registry::Getenv &getenv) {
  StoredPackage out;
  auto stored_copy = [&](std::string why) -> std::optional<fs::path> {
    auto d = read_ref(store, ref);
    auto source =
        std::make_shared<const StoreBlobSource>(blob_store(store), nullptr, std::move(why));
    auto pkg = d ? stored(store, *d, source) : std::nullopt;
    if (pkg) {
      out.package = *pkg;
      out.manifest = *d;
      out.source = source;
    }
    return pkg;
  };
  if (offline) {
    if (!stored_copy(ref.name() + ": --offline"))
      return make_error("", ref.name(), ": --offline, and no copy of it is stored in ",
                        quote((store / "packages").string()));
    return out;
  }
  auto registry = Registry::open(ref, getenv);
  if (!registry)
    return std::move(registry).take_error();
  auto fetched = (*registry)->get_manifest(ref.manifest_reference());
  if (!fetched) {
    // The registry down or refusing: a stored copy of this reference still starts, with a
    // warning; a wrong answer (bytes that do not match) is an error all the same.
    if (!stored_copy(fetched.error().str()))
      return std::move(fetched).take_error();
    out.warnings.push_back(
        cat(fetched.error().str(), ": starting the stored copy ", out.manifest.short_str()));
    return out;
  }
  out.manifest = fetched->digest;
  out.bytes = fetched->bytes.size();
  // The registry stays open for the blobs the load path reads.
  Registry &live = **registry;
  out.source = std::make_shared<const StoreBlobSource>(blob_store(store), std::move(*registry));
  if (auto pkg = stored(store, fetched->digest, out.source)) {
    out.package = *pkg;
  } else {
    auto pulled = pull_package(live, store / "packages" / fetched->digest.hex(), false, &*fetched,
                               nullptr, PullLayers::signatures);
    if (!pulled) {
      // Another process may have stored it meanwhile (it held the lock; ours found it there).
      if (auto pkg = stored(store, fetched->digest, out.source)) {
        out.package = *pkg;
        return out;
      }
      return std::move(pulled).take_error();
    }
    out.package = pulled->dir;
    out.pulled = true;
    out.bytes = pulled->bytes;
    evict(store);
  }
  if (!ref.digest) {
    const fs::path record = ref_record(store, ref);
    std::error_code ec;
    fs::create_directories(record.parent_path(), ec);
    const std::string text = out.manifest.str() + "\n";
    if (auto st = write_file_atomic(record, as_bytes(text)); !st)
      out.warnings.push_back(st.error().str() + ": --offline will not find this reference");
  }
  return out;
}

Expected<StoredPackage> package_from_reference(std::string_view reference,
                                               const CacheRequest &cache, bool offline) {
  auto ref = RegistryRef::parse(reference);
  if (!ref)
    return std::move(ref).take_error();
  auto settings = resolve_cache_settings(cache, CacheEnvironment::of_process());
  if (!settings)
    return std::move(settings).take_error();
  if (settings->local.dir.empty())
    return make_error("", ref->name(), ": no cache directory to keep registry packages in (",
                      settings->local.unavailable, "): give one (--cache-dir)");
  return package_from_registry(*ref, settings->local.dir / "oci", offline,
                               [](const char *v) -> const char * { return std::getenv(v); });
}

} // namespace cudaq_rt
