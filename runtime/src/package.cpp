#include "cudaq_rt/package.h"

#include "cudaq_rt/fatbin.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <optional>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

namespace fs = std::filesystem;

namespace cudaq_rt {
namespace {

fs::path blob_relpath(const Digest &d) {
  return fs::path("blobs") / "sha256" / d.hex();
}

// What a container record says of its entries, against the entries parsed from the verified
// blob. The strings (options, name) are left out: the manifest stores them with U+FFFD for bytes
// that are not UTF-8, so they need not round-trip.
bool same_entry(const EntryRecord &r, const Entry &e) {
  return r.kind_code == e.kind && r.arch == e.arch && r.version_major == e.version_major &&
         r.version_minor == e.version_minor && r.flags == e.flags &&
         r.payload_size == e.payload_size && r.compressed_size == e.compressed_size &&
         r.uncompressed_size == e.uncompressed_size && r.kind == entry_kind_name(e.kind) &&
         r.compression == compression_name(e.compression);
}

} // namespace

fs::path Package::blob_path(const Digest &d) const {
  return dir_ / blob_relpath(d);
}

std::set<Digest> Package::referenced_blobs() const {
  std::set<Digest> out;
  for (const ContainerRecord &c : manifest_.containers)
    out.insert(c.digest);
  for (const LinkRecord &l : manifest_.links)
    out.insert(l.cubin);
  return out;
}

Expected<Package> Package::open(const fs::path &dir) {
  std::error_code ec;
  auto st = fs::status(dir, ec);
  if (ec || !fs::exists(st))
    return make_error(dir.string(), "no such package");
  if (!fs::is_directory(st))
    return make_error(dir.string(), "not a package (not a directory)");
  fs::path manifest_path = dir / "manifest.json";
  if (!fs::exists(manifest_path, ec))
    return make_error(dir.string(), "not a package: no manifest.json");
  auto text = read_file(manifest_path);
  if (!text)
    return std::move(text).take_error();
  auto m = Manifest::parse(*text, manifest_path.string());
  if (!m)
    return std::move(m).take_error();
  Package p;
  p.dir_ = dir;
  p.manifest_ = std::move(*m);
  // The digests vouch for the blobs, not for what the manifest says of them: its sizes are
  // checked here, its entries when a container blob is read.
  std::map<Digest, uint64_t> sizes;
  for (size_t i = 0; i < p.manifest_.containers.size(); ++i) {
    const ContainerRecord &c = p.manifest_.containers[i];
    sizes.emplace(c.digest, c.size);
    p.container_at_.emplace(c.digest, i);
  }
  for (const LinkRecord &l : p.manifest_.links)
    sizes.emplace(l.cubin, l.cubin_size);
  for (const auto &[d, size] : sizes) {
    fs::path b = p.blob_path(d);
    auto bst = fs::symlink_status(b, ec);
    if (ec || !fs::exists(bst))
      return make_error(dir.string(), "blob ", d.str(), " named by the manifest is missing");
    if (!fs::is_regular_file(bst))
      return make_error(b.string(), "blob is not a regular file");
    if (uint64_t actual = fs::file_size(b, ec); ec || actual != size)
      return make_error(b.string(), "blob is ", actual, " bytes but the manifest says ", size,
                        " (the package is corrupt or was modified)");
  }
  return p;
}

Expected<std::string> Package::read_blob(const Digest &d) const {
  fs::path b = blob_path(d);
  auto bytes = read_file(b);
  if (!bytes)
    return bytes;
  if (sha256(*bytes) != d)
    return make_error(b.string(), "blob does not match its digest ", d.str(),
                      " (the package is corrupt or was modified)");
  // A container blob is one whole container, as its record describes it: link hands it to
  // nvJitLink as one FATBIN input, which would ignore a second container.
  if (auto at = container_at_.find(d); at != container_at_.end()) {
    const ContainerRecord *c = &manifest_.containers[at->second];
    auto parsed = split_containers(as_bytes(*bytes), b.string(), "blob");
    if (!parsed)
      return std::move(parsed).take_error();
    if (parsed->size() != 1)
      return make_error(b.string(), "blob holds ", parsed->size(), " containers, not one");
    const std::vector<Entry> &entries = parsed->front().entries;
    if (entries.size() != c->entries.size())
      return make_error(b.string(), "blob holds ", entries.size(),
                        " entries but the manifest says ", c->entries.size(),
                        " (the manifest was modified)");
    for (size_t k = 0; k < entries.size(); ++k)
      if (!same_entry(c->entries[k], entries[k]))
        return make_error(b.string(), "entry ", k, " (", entry_kind_name(entries[k].kind), " sm_",
                          entries[k].arch, ", ", entries[k].payload_size,
                          " bytes) is not what the manifest says of it (the manifest was "
                          "modified)");
  }
  verified_.insert(d);
  return bytes;
}

Expected<PackageLock> PackageLock::acquire(const fs::path &package) {
  fs::path abs = entry_path(package);
  fs::path lock = abs.parent_path() / ("." + abs.filename().string() + ".lock");
  int fd = ::open(lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0)
    return make_error(lock.string(), "cannot create lock file: ", std::strerror(errno));
  while (::flock(fd, LOCK_EX) != 0)
    if (errno != EINTR) {
      int err = errno;
      ::close(fd);
      return make_error(lock.string(), "cannot lock: ", std::strerror(err));
    }
  return PackageLock(fd);
}

PackageLock::~PackageLock() {
  if (fd_ >= 0)
    ::close(fd_);
}

Expected<PackageWriter> PackageWriter::create(const fs::path &final_dir) {
  auto tmp = TempDir::create_beside(final_dir);
  if (!tmp)
    return std::move(tmp).take_error();
  std::error_code ec;
  fs::create_directories(tmp->path() / "blobs" / "sha256", ec);
  if (ec)
    return make_error(tmp->path().string(), "cannot create: ", ec.message());
  return PackageWriter(final_dir, std::move(*tmp));
}

Status PackageWriter::add_blob(const Digest &d, std::span<const uint8_t> bytes) {
  if (!written_.insert(d).second)
    return Status::ok();
  // The temporary directory is renamed whole, so each blob needs no rename of its own; one
  // fsync per file before the directory's rename makes the package durable.
  fs::path p = tmp_.path() / blob_relpath(d);
  FILE *f = std::fopen(p.c_str(), "wbx");
  if (!f)
    return make_error(p.string(), "cannot create: ", std::strerror(errno));
  bool ok = std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
  ok = std::fflush(f) == 0 && ok;
  ok = ::fsync(::fileno(f)) == 0 && ok;
  int err = errno;
  ok = std::fclose(f) == 0 && ok;
  if (!ok)
    return make_error(p.string(), "cannot write: ", std::strerror(err));
  return Status::ok();
}

Status PackageWriter::carry_blob(const Package &from, const Digest &d) {
  if (written_.count(d))
    return Status::ok();
  // A tampered blob must not travel into the new package: verify it, unless this process has.
  std::optional<std::string> bytes;
  if (!from.verified(d)) {
    auto read = from.read_blob(d);
    if (!read)
      return std::move(read).take_error();
    bytes = std::move(*read);
  }
  // A hard link shares the bytes without writing them again; blobs are never modified in place.
  fs::path dst = tmp_.path() / blob_relpath(d);
  if (::link(from.blob_path(d).c_str(), dst.c_str()) == 0) {
    written_.insert(d);
    return Status::ok();
  }
  if (!bytes) {
    auto read = from.read_blob(d);
    if (!read)
      return std::move(read).take_error();
    bytes = std::move(*read);
  }
  return add_blob(d, as_bytes(*bytes));
}

Status PackageWriter::commit(const Manifest &m, bool replace) {
  std::string text = m.to_json_text();
  if (auto st = write_file_atomic(tmp_.path() / "manifest.json", as_bytes(text)); !st)
    return st;
  if (auto st = fsync_path(tmp_.path() / "blobs" / "sha256"); !st)
    return st;
  return tmp_.commit(final_dir_, replace);
}

} // namespace cudaq_rt
