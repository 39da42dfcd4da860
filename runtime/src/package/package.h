// package/: a package as it sits on disk: its manifest (manifest.h), the directory and its
// verified blobs (this file), and an input's containers as a manifest records them
// (containers.h). Pack writes packages; link and load read them.
//
// A package: a directory NAME.cudaqpkg/ holding manifest.json and content-addressed blobs under
// blobs/sha256/<hex>, as in the OCI image layout. Blob paths are derived only from validated
// digests, so nothing a manifest says can point outside the package. Every blob is verified
// against its digest when read; signatures over the manifest sit in signatures/ (signatures.h).
// man/cudaq-rt-package.5 documents the format.
#pragma once

#include "base/atomic_file.h"
#include "base/signing.h"
#include "package/manifest.h"
#include "package/oci_layout.h"

#include <filesystem>
#include <map>
#include <memory>
#include <set>
#include <span>

namespace cudaq_rt {

constexpr const char *package_suffix = ".cudaqpkg";

// The largest manifest.json a reader accepts: far beyond any real package's, and small enough
// that a hostile one cannot exhaust memory.
constexpr uint64_t max_manifest_bytes = uint64_t{64} << 20;

// Where a package whose blobs are not all on disk gets the others: a package started from a
// registry keeps only the blobs a start used (oci/store.h), and fetches another the first time it
// is read. fetch returns `size` bytes that should match `d`, or an error; the package checks
// them, as it checks a blob on disk, and keeps them: as a hard link to `file` where the source
// keeps the blob in a file of its own (a content store shared by packages), else as a copy.
struct FetchedBlob {
  std::string bytes;
  std::filesystem::path file; // empty: the source keeps no file
};
class BlobSource {
public:
  virtual ~BlobSource() = default;
  virtual Expected<FetchedBlob> fetch(const Digest &d, uint64_t size) const = 0;
};

struct PackageOpenOptions {
  // Set: a blob the manifest names may be absent from the directory; read_blob fetches it from
  // here and adds it to the package (content-addressed, written atomically).
  std::shared_ptr<const BlobSource> source;
};

// An open package: the directory as it was when opened, held open and flock(2)ed shared, so that
// a writer that replaces the package meanwhile (cudaq-rt-link storing, cudaq-rt-pack --force)
// leaves this reader's manifest and blobs in place until it is done. Manifest and blobs are read
// through the directory's descriptor, without following symbolic links, never blocking on a FIFO,
// and never more bytes than the manifest records.
class Package {
public:
  // Reads and checks the manifest; checks that every blob it names is a regular file of the size
  // it records (or, with a blob source, absent). A package replaced while it is being opened is
  // opened again.
  static Expected<Package> open(const std::filesystem::path &dir, PackageOpenOptions options = {});
  Package(Package &&o) noexcept;
  Package &operator=(Package &&) = delete;
  // The last reader of a package that was replaced removes the old directory.
  ~Package();

  const std::filesystem::path &dir() const { return dir_; }
  const Manifest &manifest() const { return manifest_; }
  // The digest of manifest.json's bytes as they were read and parsed: what a signature signs.
  const Digest &manifest_digest() const { return manifest_digest_; }
  // manifest.json's bytes as they were read.
  const std::string &manifest_text() const { return manifest_text_; }
  // The signature files in signatures/ (each named <key id>.json; other names are not
  // signatures and are ignored): name and text, read through the package's directory.
  Expected<std::vector<std::pair<std::string, std::string>>> signature_files() const;
  std::filesystem::path blob_path(const Digest &d) const;
  // Reads a blob and checks its digest: a mismatch is an error naming the blob. One not on disk
  // comes from the blob source, if the package has one.
  Expected<std::string> read_blob(const Digest &d) const;
  // Whether the blob is in the package's directory (read_blob needs no source for it).
  bool has_blob(const Digest &d) const;
  const std::shared_ptr<const BlobSource> &source() const { return source_; }
  // Every digest the manifest refers to (containers and linked cubins).
  std::set<Digest> referenced_blobs() const;
  // The directory holding the blobs, open (-1 when the package has none).
  int blobs_fd() const { return blobs_fd_; }

  // Checks the package's OCI image layout (oci_layout.h) against its manifest and signatures.
  // current: index.json names the image manifest they give, and it, the config and the
  // signature blobs are present and verify. none: the package has no layout (written before
  // layouts were). stale: index.json names another image manifest (a signature filed by hand
  // since the last write); the next write brings it up to date. An error names what is missing
  // or modified.
  enum class Layout { none, current, stale };
  Expected<Layout> check_layout() const;
  // The image manifest of the package as it is (its manifest and signature files).
  Expected<OciImageManifest> image_manifest() const;

  // Whether read_blob has verified this blob in this process.
  bool verified(const Digest &d) const { return verified_.count(d) != 0; }

private:
  Package() = default;
  std::filesystem::path dir_;
  Manifest manifest_;
  Digest manifest_digest_;
  std::string manifest_text_;
  int dir_fd_ = -1;
  int blobs_fd_ = -1;
  std::map<Digest, size_t> container_at_; // digest -> index in manifest_.containers
  mutable std::set<Digest> verified_;
  std::shared_ptr<const BlobSource> source_;
  // Checks bytes read as blob `d` (at `path`, for messages): digest, and for a container its
  // entries against its record.
  Status check_blob(const Digest &d, const std::string &bytes, const std::string &path) const;
};

// Whether `dir` is recognisably a package (a directory whose manifest.json parses) or an empty
// directory, the only things cudaq-rt-pack --force may replace. The error says what it is
// instead.
Status check_is_package(const std::filesystem::path &dir);

// An exclusive lock on `.NAME.cudaqpkg.lock` beside a package, held by every writer for its
// read-modify-write (cudaq-rt-link storing cubins, cudaq-rt-pack --force replacing the package),
// so that no writer loses another's update. The lock file stays: unlinking it under the lock
// would let a waiter lock an orphaned file. It is opened without following a symbolic link, so
// that whoever can write beside a package cannot make a writer create or open a file elsewhere.
class PackageLock {
public:
  static Expected<PackageLock> acquire(const std::filesystem::path &package);

private:
  explicit PackageLock(RegularFile file) : file_(std::move(file)) {}
  RegularFile file_; // closing it releases the lock
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
  // Carries `from`'s signatures over; commit() replaces those of the keys it signs with.
  Status carry_signatures(const Package &from);
  // Writes manifest.json (`m`'s text, or `manifest_text` where the bytes must stay as they are:
  // a package signed or pulled as it is), a signature over it by each of `signers`, the OCI
  // image layout of the result (oci_layout.h), and renames the directory to its final path.
  // Without `replace`, an existing package there is an error.
  Status commit(const Manifest &m, bool replace,
                const std::vector<const SigningKey *> &signers = {},
                std::optional<std::string_view> manifest_text = std::nullopt);
  // Adds a signature file (<key id>.json) as it is: a pulled package's.
  Status add_signature(const std::string &file_name, std::string_view text);

private:
  // A file other than a blob (a signature), by its path inside the package.
  Status add_file(const std::filesystem::path &relative, std::string_view bytes);
  PackageWriter(std::filesystem::path final_dir, TempDir tmp)
      : final_dir_(std::move(final_dir)), tmp_(std::move(tmp)) {}
  std::filesystem::path final_dir_;
  TempDir tmp_;
  std::set<Digest> written_;
  std::map<std::string, std::string> signatures_; // file name -> text, as commit() writes them
};

} // namespace cudaq_rt
