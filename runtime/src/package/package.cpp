#include "package/package.h"

#include "base/zstd.h"
#include "formats/fatbin.h"
#include "package/oci_layout.h"
#include "package/signatures.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <dirent.h>
#include <fcntl.h>
#include <optional>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

namespace fs = std::filesystem;

namespace cudaq_rt {
namespace {

// How often open() starts again on a package that a writer replaced under it before it could lock
// it. Each retry needs a whole writer to finish in between, so this many is never reached by
// writers that merely run often.
constexpr int max_open_attempts = 100;

fs::path blob_relpath(const Digest &d) {
  return fs::path("blobs") / "sha256" / d.hex();
}

// Whether the directory open as `fd` is still the one at `path`.
bool still_at(int fd, const fs::path &path) {
  struct stat a, b;
  return ::fstat(fd, &a) == 0 && ::stat(path.c_str(), &b) == 0 && a.st_dev == b.st_dev &&
         a.st_ino == b.st_ino;
}

// A blob whose bytes are not those its digest names.
Error digest_mismatch(const std::string &path, const Digest &d) {
  return make_error(path, "blob does not match its digest ", d.str(),
                    " (the package is corrupt or was modified)");
}

int open_directory_at(int at, const char *name) {
  return ::openat(at, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
}

// Why open_directory_at(at, name) failed with `err`: a symbolic link is refused as one (the
// kernel says ELOOP or ENOTDIR for it, by version), anything else as the system says.
std::string why_not_a_directory(int at, const char *name, int err) {
  struct stat st;
  if ((err == ELOOP || err == ENOTDIR) && ::fstatat(at, name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
      S_ISLNK(st.st_mode))
    return "it is a symbolic link, which a package never follows";
  return std::strerror(err);
}

// A package's signature files are small; a larger one, or more of them, is not a signature.

// The manifest of the package directory open as `fd`, and the digest of the bytes it was parsed
// from; nullopt if it has none.
Expected<std::optional<Manifest>>
read_manifest(int fd, const fs::path &dir, Digest *digest = nullptr, std::string *bytes = nullptr) {
  fs::path path = dir / "manifest.json";
  auto file = RegularFile::open_at(fd, "manifest.json", path, {.max_bytes = max_manifest_bytes});
  if (!file)
    return std::move(file).take_error();
  if (!*file)
    return std::optional<Manifest>();
  auto text = (*file)->read();
  if (!text)
    return std::move(text).take_error();
  auto m = Manifest::parse(*text, path.string());
  if (!m)
    return std::move(m).take_error();
  if (digest)
    *digest = sha256(*text);
  if (bytes)
    *bytes = std::move(*text);
  return std::optional<Manifest>(std::move(*m));
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

Digest Package::stored_name(const Digest &d) const {
  auto it = stored_as_.find(d);
  return it == stored_as_.end() ? d : it->second.name;
}

fs::path Package::blob_path(const Digest &d) const {
  return dir_ / blob_relpath(stored_name(d));
}

std::set<Digest> Package::referenced_blobs() const {
  std::set<Digest> out;
  for (const auto &[d, size] : manifest_.blob_sizes())
    out.insert(d);
  return out;
}

Expected<Package> Package::open(const fs::path &dir, PackageOpenOptions options) {
  for (int attempt = 0; attempt < max_open_attempts; ++attempt) {
    int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
      int err = errno;
      if (err == ENOENT)
        return make_error(dir.string(), "no such package");
      if (err == ENOTDIR)
        return make_error(dir.string(), "not a package (not a directory)");
      return make_error(dir.string(), "cannot open: ", std::strerror(err));
    }
    Package p;
    p.dir_ = dir;
    p.dir_fd_ = fd;
    p.source_ = options.source;
    // The shared lock keeps a writer that replaces the package from removing this directory. A
    // writer that replaced it between the open and the lock may be removing it now: start again
    // on the new one. (A filesystem without flock on directories gets only the retries.)
    while (::flock(fd, LOCK_SH) != 0 && errno == EINTR) {
    }
    if (!still_at(fd, dir))
      continue;
    auto m = read_manifest(fd, dir, &p.manifest_digest_, &p.manifest_text_);
    if (!m)
      return std::move(m).take_error();
    if (!*m)
      return make_error(dir.string(), "not a package: no manifest.json");
    p.manifest_ = std::move(**m);
    // The digests vouch for the blobs, not for what the manifest says of them: its sizes are
    // checked here, its entries when a container blob is read.
    for (size_t i = 0; i < p.manifest_.containers.size(); ++i)
      p.container_at_.emplace(p.manifest_.containers[i].digest, i);
    for (const auto &[d, size] : p.manifest_.blob_sizes()) {
      if (const StoredBlob *s = p.manifest_.find_stored(d)) {
        p.disk_size_.emplace(s->stored_digest, s->stored_size);
        p.stored_as_.emplace(d, Stored{s->stored_digest, size});
      } else {
        p.disk_size_.emplace(d, size);
      }
    }
    fs::path blobs = dir / "blobs" / "sha256";
    int err = 0;
    std::string why;
    if (int b = open_directory_at(fd, "blobs"); b >= 0) {
      p.blobs_fd_ = open_directory_at(b, "sha256");
      err = errno;
      if (p.blobs_fd_ < 0 && err != ENOENT)
        why = why_not_a_directory(b, "sha256", err);
      ::close(b);
    } else {
      err = errno;
      if (err != ENOENT) {
        blobs = dir / "blobs";
        why = why_not_a_directory(fd, "blobs", err);
      }
    }
    if (p.blobs_fd_ < 0 && err != ENOENT)
      return make_error(blobs.string(), "cannot open the blob directory: ", why);
    for (const auto &[name, size] : p.disk_size_) {
      struct stat st;
      const fs::path path = dir / blob_relpath(name);
      if (p.blobs_fd_ < 0 ||
          ::fstatat(p.blobs_fd_, name.hex().c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
        if (p.source_)
          continue; // fetched when read
        return make_error(dir.string(), "blob ", name.str(), " named by the manifest is missing");
      }
      if (!S_ISREG(st.st_mode))
        return make_error(path.string(), "blob is not a regular file");
      if (static_cast<uint64_t>(st.st_size) != size)
        return make_error(path.string(), "blob is ", st.st_size, " bytes but the manifest says ",
                          size, " (the package is corrupt or was modified)");
    }
    return p;
  }
  return make_error(dir.string(), "was replaced ", max_open_attempts,
                    " times while it was being opened: try again");
}

Package::Package(Package &&o) noexcept
    : dir_(std::move(o.dir_)), manifest_(std::move(o.manifest_)),
      manifest_digest_(o.manifest_digest_), manifest_text_(std::move(o.manifest_text_)),
      dir_fd_(o.dir_fd_), blobs_fd_(o.blobs_fd_), container_at_(std::move(o.container_at_)),
      disk_size_(std::move(o.disk_size_)), stored_as_(std::move(o.stored_as_)),
      verified_(std::move(o.verified_)), source_(std::move(o.source_)) {
  o.dir_fd_ = o.blobs_fd_ = -1;
}

Package::~Package() {
  if (dir_fd_ < 0)
    return;
  bool replaced = !still_at(dir_fd_, dir_);
  if (blobs_fd_ >= 0)
    ::close(blobs_fd_);
  ::close(dir_fd_); // releases the shared lock
  if (replaced)
    remove_stale_temporaries(dir_);
}

bool Package::has_blob(const Digest &d) const {
  struct stat st;
  return blobs_fd_ >= 0 &&
         ::fstatat(blobs_fd_, stored_name(d).hex().c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0;
}

Expected<std::string> Package::read_blob(const Digest &d) const {
  auto stored = stored_as_.find(d);
  if (stored == stored_as_.end()) {
    auto bytes = read_file(d);
    if (!bytes)
      return bytes;
    if (auto st = check_blob(d, *bytes, blob_path(d).string()); !st)
      return std::move(st).take_error();
    verified_.insert(d);
    return bytes;
  }
  // Compressed: the file is checked against its own digest first, so that a damaged one is
  // named as such before anything is decompressed; then the bytes against the blob's.
  const fs::path path = blob_path(d);
  auto frame = read_file(stored->second.name);
  if (!frame)
    return frame;
  if (sha256(*frame) != stored->second.name)
    return make_error(path.string(), "blob does not match its stored digest ",
                      stored->second.name.str(), " (the package is corrupt or was modified)");
  // What the frame gives is streamed through SHA-256 before a byte of it is kept: its size and
  // digest must be the blob's. A manifest (signed or not) may claim any size, and forty bytes of
  // zstd declare a gibibyte: neither costs memory, and a claim over the limit costs no time.
  const uint64_t size = stored->second.size;
  if (size > max_compressed_blob_bytes)
    return make_error(path.string(), "blob is recorded as ", size,
                      " bytes, more than a compressed blob may hold (", max_compressed_blob_bytes,
                      "): the package is corrupt or was modified");
  Sha256 streamed;
  auto given = zstd_stream(as_bytes(*frame), size, path.string(),
                           [&streamed](std::span<const uint8_t> piece) { streamed.update(piece); });
  if (!given)
    return given.error();
  if (*given != size)
    return make_error(path.string(), "blob decompresses to ", *given, " bytes, not the ", size,
                      " its manifest records (the package is corrupt or was modified)");
  if (streamed.finish() != d)
    return digest_mismatch(path.string(), d);
  // The same frame again: the bytes just streamed through the digest, now kept.
  auto bytes = zstd_decompress(as_bytes(*frame), size, path.string());
  if (!bytes)
    return bytes;
  if (auto st = check_container(d, *bytes, path.string()); !st)
    return std::move(st).take_error();
  verified_.insert(stored->second.name);
  verified_.insert(d);
  return bytes;
}

Expected<std::string> Package::read_file(const Digest &name) const {
  const fs::path b = dir_ / blob_relpath(name);
  std::optional<uint64_t> recorded;
  if (auto it = disk_size_.find(name); it != disk_size_.end())
    recorded = it->second;
  auto file = blobs_fd_ < 0 ? Expected<std::optional<RegularFile>>(std::optional<RegularFile>())
                            : RegularFile::open_at(blobs_fd_, name.hex(), b, {});
  if (!file)
    return std::move(file).take_error();
  if (!*file && source_ && recorded) {
    // Not fetched yet: from the source, checked as a file on disk is, then kept. A blob that
    // cannot be kept (a full disk) still serves this read, and is fetched again next time.
    auto fetched = source_->fetch(name, *recorded);
    if (!fetched)
      return std::move(fetched).take_error();
    if (fetched->bytes.size() != *recorded)
      return make_error(b.string(), "fetched ", fetched->bytes.size(), " bytes, not the ",
                        *recorded, " the manifest records");
    if (sha256(fetched->bytes) != name)
      return make_error(b.string(), "fetched blob does not match its digest ", name.str(),
                        ": refused, nothing kept");
    if (fetched->file.empty() || blobs_fd_ < 0 ||
        (::linkat(AT_FDCWD, fetched->file.c_str(), blobs_fd_, name.hex().c_str(), 0) != 0 &&
         errno != EEXIST))
      (void)write_file_atomic(b, as_bytes(fetched->bytes));
    return std::move(fetched->bytes);
  }
  if (!*file)
    return make_error(dir_.string(), "blob ", name.str(), " named by the manifest is missing");
  if (recorded && (*file)->size() != *recorded)
    return make_error(b.string(), "blob is ", (*file)->size(), " bytes, not the ", *recorded,
                      " its manifest records (the package is corrupt or was modified)");
  return (*file)->read();
}

Status Package::check_blob(const Digest &d, const std::string &bytes,
                           const std::string &path) const {
  if (sha256(bytes) != d)
    return digest_mismatch(path, d);
  return check_container(d, bytes, path);
}

Status Package::check_container(const Digest &d, const std::string &bytes,
                                const std::string &path) const {
  // A container blob is one whole container, as its record describes it: link hands it to
  // nvJitLink as one FATBIN input, which would ignore a second container.
  auto at = container_at_.find(d);
  if (at == container_at_.end())
    return Status::ok();
  const ContainerRecord *c = &manifest_.containers[at->second];
  auto parsed = split_containers(as_bytes(bytes), path, "blob");
  if (!parsed)
    return std::move(parsed).take_error();
  if (parsed->size() != 1)
    return make_error(path, "blob holds ", parsed->size(), " containers, not one");
  const std::vector<Entry> &entries = parsed->front().entries;
  if (entries.size() != c->entries.size())
    return make_error(path, "blob holds ", entries.size(), " entries but the manifest says ",
                      c->entries.size(), " (the manifest was modified)");
  for (size_t k = 0; k < entries.size(); ++k)
    if (!same_entry(c->entries[k], entries[k]))
      return make_error(path, "entry ", k, " (", entry_kind_name(entries[k].kind), " sm_",
                        entries[k].arch, ", ", entries[k].payload_size,
                        " bytes) is not what the manifest says of it (the manifest was "
                        "modified)");
  return Status::ok();
}

Expected<std::vector<std::pair<std::string, std::string>>> Package::signature_files() const {
  const fs::path shown = dir_ / signatures_dir;
  int fd = open_directory_at(dir_fd_, signatures_dir);
  if (fd < 0 && errno == ENOENT)
    return std::vector<std::pair<std::string, std::string>>();
  DIR *d = fd < 0 ? nullptr : ::fdopendir(fd); // owns fd from here
  if (!d) {
    int err = errno;
    if (fd >= 0)
      ::close(fd);
    return make_error(shown.string(),
                      "cannot read: ", err == ELOOP ? "a symbolic link" : std::strerror(err));
  }
  std::unique_ptr<DIR, int (*)(DIR *)> closing(d, ::closedir);
  std::vector<std::string> names;
  while (dirent *e = ::readdir(d))
    if (is_signature_file_name(e->d_name))
      names.emplace_back(e->d_name);
  if (names.size() > max_signature_files)
    return make_error(shown.string(), "holds ", names.size(), " signatures, more than the ",
                      max_signature_files, " a package may have");
  std::sort(names.begin(), names.end());
  std::vector<std::pair<std::string, std::string>> out;
  for (const std::string &name : names) {
    auto file =
        RegularFile::open_at(::dirfd(d), name, shown / name, {.max_bytes = max_signature_bytes});
    if (!file)
      return std::move(file).take_error();
    if (!*file) // removed meanwhile
      continue;
    auto text = (*file)->read();
    if (!text)
      return std::move(text).take_error();
    out.emplace_back(name, std::move(*text));
  }
  return out;
}

Expected<OciImageManifest> Package::image_manifest() const {
  auto sigs = signature_files();
  if (!sigs)
    return std::move(sigs).take_error();
  return package_image_manifest(manifest_, manifest_text_, *sigs);
}

Expected<Package::Layout> Package::check_layout() const {
  const fs::path index_path = dir_ / "index.json";
  auto index =
      RegularFile::open_at(dir_fd_, "index.json", index_path, {.max_bytes = max_signature_bytes});
  if (!index)
    return std::move(index).take_error();
  if (!*index)
    return Layout::none;
  auto index_text = (*index)->read();
  if (!index_text)
    return std::move(index_text).take_error();
  auto named = parse_layout_index(*index_text, index_path.string());
  if (!named)
    return std::move(named).take_error();
  auto im = image_manifest();
  if (!im)
    return std::move(im).take_error();
  const Digest want = sha256(im->to_json_text());
  if (named->digest != want) {
    // An earlier image manifest of this very manifest (its signatures have changed since: one
    // filed by hand) is a stale layout; one of another manifest, or none in the package, is
    // another package's layout, which an OCI client copying this one would take for it.
    auto earlier = read_blob(named->digest);
    auto parsed = earlier ? OciImageManifest::parse(*earlier, index_path.string())
                          : Expected<OciImageManifest>(earlier.error());
    if (parsed && parsed->config.digest == im->config.digest)
      return Layout::stale;
    return make_error(index_path.string(), "names image manifest ", named->digest.short_str(),
                      ", which is not this package's (its manifest is ",
                      im->config.digest.short_str(),
                      "): an OCI client copying the layout would "
                      "read another package");
  }
  // The blobs the image manifest names beyond the manifest's own: itself, the config, the
  // signatures. read_blob checks each one's digest.
  std::vector<Digest> extra = {want, im->config.digest};
  for (const OciDescriptor &l : im->layers)
    if (l.media_type == signature_layer_media_type)
      extra.push_back(l.digest);
  for (const Digest &d : extra)
    if (auto blob = read_blob(d); !blob)
      return std::move(blob).take_error();
  auto layout = RegularFile::open_at(dir_fd_, "oci-layout", dir_ / "oci-layout",
                                     {.max_bytes = max_signature_bytes});
  if (!layout)
    return std::move(layout).take_error();
  auto layout_text = *layout ? (*layout)->read() : Expected<std::string>(std::string());
  if (!layout_text)
    return std::move(layout_text).take_error();
  if (*layout_text != oci_layout_text)
    return make_error((dir_ / "oci-layout").string(),
                      *layout ? "is not {\"imageLayoutVersion\":\"1.0.0\"}" : "is missing");
  return Layout::current;
}

Status check_is_package(const fs::path &dir) {
  auto refuse = [&](const std::string &why) -> Status {
    return make_error(dir.string(), "is not a package (", why,
                      "): --force replaces only a package; move it away or pack under another "
                      "name");
  };
  int fd = open_directory_at(AT_FDCWD, dir.c_str());
  if (fd < 0) {
    int err = errno;
    struct stat st;
    if (::lstat(dir.c_str(), &st) == 0 && !S_ISDIR(st.st_mode))
      return refuse(S_ISREG(st.st_mode)   ? "a regular file"
                    : S_ISLNK(st.st_mode) ? "a symbolic link"
                                          : "not a directory");
    return make_error(dir.string(), "cannot open: ", std::strerror(err));
  }
  auto m = read_manifest(fd, dir);
  ::close(fd);
  if (!m)
    return refuse(m.error().str());
  // An empty directory holds nothing to lose: build tools make one for an output's parent
  // (Ninja does for NAME.cudaqpkg/manifest.json).
  std::error_code ec;
  if (!*m && !fs::is_empty(dir, ec))
    return refuse("no manifest.json");
  return Status::ok();
}

Expected<PackageLock> PackageLock::acquire(const fs::path &package) {
  fs::path abs = absolute_normal_path(package);
  fs::path lock = abs.parent_path() / ("." + abs.filename().string() + ".lock");
  auto file = RegularFile::open(lock, {.create_mode = 0644});
  if (!file)
    return std::move(file).take_error();
  if (!*file) // the directory it would be in is gone
    return make_error(lock.string(), "cannot create lock file: ", std::strerror(ENOENT));
  while (::flock((*file)->fd(), LOCK_EX) != 0)
    if (errno != EINTR)
      return make_error(lock.string(), "cannot lock: ", std::strerror(errno));
  return PackageLock(std::move(**file));
}

Expected<PackageWriter> PackageWriter::create(const fs::path &final_dir, BlobEncoding encoding) {
  auto tmp = TempDir::create_beside(final_dir);
  if (!tmp)
    return std::move(tmp).take_error();
  std::error_code ec;
  fs::create_directories(tmp->path() / "blobs" / "sha256", ec);
  if (ec)
    return make_error(tmp->path().string(), "cannot create: ", ec.message());
  return PackageWriter(final_dir, std::move(*tmp), encoding);
}

Status PackageWriter::add_blob(const Digest &d, std::span<const uint8_t> bytes) {
  if (!written_.insert(d).second)
    return Status::ok();
  if (encoding_ == BlobEncoding::zstd && bytes.size() >= min_compressed_blob_bytes) {
    // Kept compressed only where that saves a sixteenth or more: a container nvcc already
    // compressed gains nothing, and then reads faster as it is.
    std::string frame = zstd_compress(bytes);
    if (frame.size() <= bytes.size() - bytes.size() / 16) {
      const Digest name = sha256(frame);
      stored_[d] = StoredBlob{d, BlobEncoding::zstd, name, frame.size()};
      return write_blob_file(name, as_bytes(frame));
    }
  }
  return write_blob_file(d, bytes);
}

Status PackageWriter::write_blob_file(const Digest &name, std::span<const uint8_t> bytes) {
  if (!files_.insert(name).second)
    return Status::ok();
  // The temporary directory is renamed whole, so each blob needs no rename of its own; commit()
  // makes them all durable with one syncfs before the rename, not one fsync per blob (an archive
  // of 20,000 members would spend most of its pack in fsync).
  fs::path p = tmp_.path() / blob_relpath(name);
  int fd = ::open(p.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0)
    return make_error(p.string(), "cannot create: ", std::strerror(errno));
  int err = 0;
  for (size_t done = 0; done < bytes.size() && !err;) {
    ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n > 0)
      done += static_cast<size_t>(n);
    else if (n < 0 && errno != EINTR)
      err = errno;
  }
  // Start the blob's writeback now, so that commit()'s one sync finds most of the package on the
  // disk already instead of writing all of it then.
  if (!err)
    ::sync_file_range(fd, 0, 0, SYNC_FILE_RANGE_WRITE);
  if (::close(fd) != 0 && !err)
    err = errno;
  if (err)
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
  // The blob travels in the form it has (compressed or not), and keeps its stored digest.
  const Digest name = from.stored_name(d);
  const StoredBlob *stored = from.manifest().find_stored(d);
  auto carried = [&] {
    written_.insert(d);
    if (stored)
      stored_[d] = *stored;
    return Status::ok();
  };
  // A hard link shares the bytes without writing them again; blobs are never modified in place.
  fs::path dst = tmp_.path() / blob_relpath(name);
  if (files_.count(name) || (from.blobs_fd() >= 0 && ::linkat(from.blobs_fd(), name.hex().c_str(),
                                                              AT_FDCWD, dst.c_str(), 0) == 0)) {
    files_.insert(name);
    return carried();
  }
  if (stored) {
    auto frame = from.read_blob(name); // the stored file as it is, checked against its digest
    if (!frame)
      return std::move(frame).take_error();
    if (auto st = write_blob_file(name, as_bytes(*frame)); !st)
      return st;
    return carried();
  }
  if (!bytes) {
    auto read = from.read_blob(d);
    if (!read)
      return std::move(read).take_error();
    bytes = std::move(*read);
  }
  if (auto st = write_blob_file(d, as_bytes(*bytes)); !st)
    return st;
  return carried();
}

Status PackageWriter::carry_signatures(const Package &from) {
  auto files = from.signature_files();
  if (!files)
    return std::move(files).take_error();
  for (const auto &[name, text] : *files)
    if (auto st = add_signature(name, text); !st)
      return st;
  return Status::ok();
}

Status PackageWriter::add_signature(const std::string &file_name, std::string_view text) {
  if (!is_signature_file_name(file_name))
    return make_error(file_name, "is not a signature file's name (<key id>.json)");
  if (auto st = add_file(fs::path(signatures_dir) / file_name, text); !st)
    return st;
  signatures_[file_name] = text;
  return Status::ok();
}

Status PackageWriter::add_file(const fs::path &relative, std::string_view bytes) {
  fs::path p = tmp_.path() / relative;
  std::error_code ec;
  fs::create_directories(p.parent_path(), ec);
  if (ec)
    return make_error(p.parent_path().string(), "cannot create: ", ec.message());
  return write_file_atomic(p, as_bytes(bytes));
}

Manifest PackageWriter::as_written(const Manifest &given) const {
  Manifest m = given;
  m.stored.clear();
  for (const auto &[d, size] : m.blob_sizes())
    if (auto it = stored_.find(d); it != stored_.end())
      m.stored.push_back(it->second);
  return m;
}

Status PackageWriter::commit(const Manifest &given, bool replace,
                             const std::vector<const SigningKey *> &signers,
                             std::optional<std::string_view> manifest_text) {
  // The manifest says how each blob is stored as this writer stored it; a manifest text given
  // as it is says that already (its blobs came in the form it names).
  Manifest with_forms;
  if (!manifest_text)
    with_forms = as_written(given);
  const Manifest &m = manifest_text ? given : with_forms;
  const std::string text = manifest_text ? std::string(*manifest_text) : m.to_json_text();
  if (auto st = write_file_atomic(tmp_.path() / "manifest.json", as_bytes(text)); !st)
    return st;
  for (const SigningKey *key : signers) {
    PackageSignature sig = sign_manifest(*key, m.name, sha256(text));
    if (auto st = add_signature(sig.file_name(), sig.to_json_text()); !st)
      return st;
  }
  // The OCI image layout: the config (manifest.json's bytes) and each signature as blobs, the
  // image manifest over them and the manifest's blobs, and the index naming it.
  const std::vector<std::pair<std::string, std::string>> sigs(signatures_.begin(),
                                                              signatures_.end());
  const std::string image = package_image_manifest(m, text, sigs).to_json_text();
  if (auto st = write_blob_file(sha256(text), as_bytes(text)); !st)
    return st;
  for (const auto &[name, sig] : sigs)
    if (auto st = write_blob_file(sha256(sig), as_bytes(sig)); !st)
      return st;
  if (auto st = write_blob_file(sha256(image), as_bytes(image)); !st)
    return st;
  const std::string index = layout_index_text(image);
  if (auto st = write_file_atomic(tmp_.path() / "index.json", as_bytes(index)); !st)
    return st;
  if (auto st = write_file_atomic(tmp_.path() / "oci-layout", as_bytes(oci_layout_text)); !st)
    return st;
  // Every blob's bytes reach the disk before the package appears under its name.
  const fs::path blobs = tmp_.path() / "blobs" / "sha256";
  int fd = ::open(blobs.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0 || ::syncfs(fd) != 0) {
    int err = errno;
    if (fd >= 0)
      ::close(fd);
    return make_error(blobs.string(), "cannot sync: ", std::strerror(err));
  }
  ::close(fd);
  if (auto st = fsync_path(blobs); !st)
    return st;
  return tmp_.commit(final_dir_, replace);
}

} // namespace cudaq_rt
