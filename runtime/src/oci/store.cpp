#include "oci/store.h"

#include "base/atomic_file.h"
#include "oci/transfer.h"
#include "package/package.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

namespace fs = std::filesystem;

namespace cudaq_rt {
namespace {

fs::path ref_record(const fs::path &store, const RegistryRef &ref) {
  return store / "refs" / sha256(ref.name()).hex();
}

// The package stored for an image manifest, if one is there whole.
std::optional<fs::path> stored(const fs::path &store, const Digest &manifest) {
  const fs::path dir = store / "packages" / manifest.hex();
  std::error_code ec;
  for (const auto &e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.size() > std::string_view(package_suffix).size() && name.front() != '.' &&
        name.ends_with(package_suffix) && Package::open(e.path())) {
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

// Removes the least recently used packages beyond the bound; one a process holds open (its
// shared lock) stays.
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
}

} // namespace

Expected<StoredPackage> package_from_registry(const RegistryRef &ref, const fs::path &store,
                                              bool offline, const Registry::Getenv &getenv) {
  StoredPackage out;
  if (offline) {
    auto d = read_ref(store, ref);
    auto pkg = d ? stored(store, *d) : std::nullopt;
    if (!pkg)
      return make_error("", ref.name(), ": --offline, and no copy of it is stored in ",
                        quote((store / "packages").string()));
    out.package = *pkg;
    out.manifest = *d;
    return out;
  }
  auto registry = Registry::open(ref, getenv);
  if (!registry)
    return std::move(registry).take_error();
  auto fetched = (*registry)->get_manifest(ref.manifest_reference());
  if (!fetched) {
    // The registry down or refusing: a stored copy of this reference still starts, with a
    // warning; a wrong answer (bytes that do not match) is an error all the same.
    auto d = read_ref(store, ref);
    auto pkg = d ? stored(store, *d) : std::nullopt;
    if (!pkg)
      return std::move(fetched).take_error();
    out.warnings.push_back(
        cat(fetched.error().str(), ": starting the stored copy ", d->short_str()));
    out.package = *pkg;
    out.manifest = *d;
    return out;
  }
  out.manifest = fetched->digest;
  out.bytes = fetched->bytes.size();
  if (auto pkg = stored(store, fetched->digest)) {
    out.package = *pkg;
  } else {
    auto pulled =
        pull_package(**registry, store / "packages" / fetched->digest.hex(), false, &*fetched);
    if (!pulled) {
      // Another process may have stored it meanwhile (it held the lock; ours found it there).
      if (auto pkg = stored(store, fetched->digest)) {
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
