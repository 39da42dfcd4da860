// A package: a directory NAME.cudaqpkg/ holding manifest.json and content-addressed blobs under
// blobs/sha256/<hex>, as in the OCI image layout. Blob paths are derived only from validated
// digests, so nothing a manifest says can point outside the package. Every blob is verified
// against its digest when read. man/cudaq-rt-package.5 documents the format.
#pragma once

#include "cudaq_rt/atomic_file.h"
#include "cudaq_rt/manifest.h"

#include <filesystem>
#include <map>
#include <set>
#include <span>

namespace cudaq_rt {

constexpr const char *package_suffix = ".cudaqpkg";

class Package {
public:
  // Reads and checks the manifest; checks that every blob it names is a regular file.
  static Expected<Package> open(const std::filesystem::path &dir);

  const std::filesystem::path &dir() const { return dir_; }
  const Manifest &manifest() const { return manifest_; }
  std::filesystem::path blob_path(const Digest &d) const;
  // Reads a blob and checks its digest: a mismatch is an error naming the blob.
  Expected<std::string> read_blob(const Digest &d) const;
  // Every digest the manifest refers to (containers and linked cubins).
  std::set<Digest> referenced_blobs() const;

  // Whether read_blob has verified this blob in this process.
  bool verified(const Digest &d) const { return verified_.count(d) != 0; }

private:
  std::filesystem::path dir_;
  Manifest manifest_;
  std::map<Digest, size_t> container_at_; // digest -> index in manifest_.containers
  mutable std::set<Digest> verified_;
};

// An exclusive lock on `.NAME.cudaqpkg.lock` beside a package, held by every writer for its
// read-modify-write (cudaq-rt-link storing cubins, cudaq-rt-pack --force replacing the package),
// so that no writer loses another's update. The lock file stays: unlinking it under the lock
// would let a waiter lock an orphaned file.
class PackageLock {
public:
  static Expected<PackageLock> acquire(const std::filesystem::path &package);
  PackageLock(PackageLock &&o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  PackageLock &operator=(PackageLock &&) = delete;
  ~PackageLock();

private:
  explicit PackageLock(int fd) : fd_(fd) {}
  int fd_;
};

// Builds a package in a temporary directory beside its final path; commit() renames it into place
// in one step. Destroyed without commit, it removes everything it wrote.
class PackageWriter {
public:
  static Expected<PackageWriter> create(const std::filesystem::path &final_dir);

  // Adds a blob under its digest; adding the same digest twice writes it once.
  Status add_blob(const Digest &d, std::span<const uint8_t> bytes);
  // Carries a blob over from an existing package: a hard link where possible, after verifying
  // the blob unless read_blob already did in this process.
  Status carry_blob(const Package &from, const Digest &d);
  // Writes manifest.json and renames the directory to its final path. Without `replace`, an
  // existing package there is an error.
  Status commit(const Manifest &m, bool replace);

private:
  PackageWriter(std::filesystem::path final_dir, TempDir tmp)
      : final_dir_(std::move(final_dir)), tmp_(std::move(tmp)) {}
  std::filesystem::path final_dir_;
  TempDir tmp_;
  std::set<Digest> written_;
};

} // namespace cudaq_rt
