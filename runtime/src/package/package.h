// package/: a package as it sits on disk: its manifest (manifest.h), the directory and its
// verified blobs (this file), and an input's containers as a manifest records them
// (containers.h). Pack writes packages; link and load read them.
//
// A package: a directory NAME.cudaqpkg/ holding manifest.json and content-addressed blobs under
// blobs/sha256/<hex>, as in the OCI image layout. Blob paths are derived only from validated
// digests, so nothing a manifest says can point outside the package. Every blob is verified
// against its digest when read; signatures over the manifest sit in signatures/ (signatures.h).
// A blob the manifest lists in `stored` is kept as a zstd frame under the frame's digest: it is
// read, checked against that digest, decompressed and checked against its own.
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
  // The file blob `d` is kept in (its stored form's, for a compressed blob).
  std::filesystem::path blob_path(const Digest &d) const;
  // The name of the file blob `d` is kept in: its stored digest if compressed, else `d`.
  Digest stored_name(const Digest &d) const;
  // Reads a blob and checks its digest: a mismatch is an error naming the blob. A compressed one
  // is decompressed (at most to the size its manifest records). One not on disk comes from the
  // blob source, if the package has one. Any other file of blobs/ (the layout's, or a stored
  // form by its own digest) is read as it is and checked against its name.
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
  std::map<Digest, uint64_t> disk_size_;  // every file the manifest names -> its size
  struct Stored {
    Digest name;   // the file's
    uint64_t size; // the blob's, decompressed
  };
  std::map<Digest, Stored> stored_as_; // compressed blobs, by their own digest
  mutable std::set<Digest> verified_;
  std::shared_ptr<const BlobSource> source_;
  // Reads file `name` of blobs/ (fetching it from the source where it is absent and the manifest
  // names it), of the size the manifest records for it; checks a fetched one's digest.
  Expected<std::string> read_file(const Digest &name) const;
  // Checks bytes read as blob `d` (at `path`, for messages): digest, and for a container its
  // entries against its record.
  Status check_blob(const Digest &d, const std::string &bytes, const std::string &path) const;
  // What check_blob checks beyond the digest: a container blob is the one container its record
  // describes.
  Status check_container(const Digest &d, const std::string &bytes, const std::string &path) const;
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
// Blobs smaller than this are stored as they are: a zstd frame's header would eat what it saves.
constexpr size_t min_compressed_blob_bytes = 512;
// The most signatures a package may have, and the most bytes one may be (cudaq-rt-package(5)): a
// reader refuses more, so a pull refuses them before it writes.
constexpr size_t max_signature_files = 256;
constexpr uint64_t max_signature_bytes = 16 << 10;
// The most a compressed blob may hold (cudaq-rt-package(5)): a manifest that records more is
// refused before its frame is read. No container or cubin is near it (a 1,000-handler module is
// 5 MB).
constexpr uint64_t max_compressed_blob_bytes = uint64_t{1} << 30;

class PackageWriter {
public:
  // `encoding`: how add_blob stores the blobs it is given. zstd keeps a blob compressed (one zstd
  // frame, level 1) where that saves a sixteenth of it or more, and commit() lists it in the
  // manifest's `stored`; identity stores bytes as they come (a pull: its layers are already the
  // stored forms its manifest names).
  static Expected<PackageWriter> create(const std::filesystem::path &final_dir,
                                        BlobEncoding encoding = BlobEncoding::identity);

  // Adds a blob under its digest; adding the same digest twice writes it once.
  Status add_blob(const Digest &d, std::span<const uint8_t> bytes);
  // Carries a blob over from an existing package in the form it has there (compressed or not):
  // a hard link where possible, after verifying the blob unless read_blob already did in this
  // process.
  Status carry_blob(const Package &from, const Digest &d);
  // Carries `from`'s signatures over; commit() replaces those of the keys it signs with.
  Status carry_signatures(const Package &from);
  // Writes manifest.json (`m`'s text with `stored` as this writer stored the blobs, or
  // `manifest_text` where the bytes must stay as they are: a package signed or pulled as it is),
  // a signature over it by each of `signers`, the OCI image layout of the result
  // (oci_layout.h), and renames the directory to its final path. Without `replace`, an existing
  // package there is an error.
  Status commit(const Manifest &m, bool replace,
                const std::vector<const SigningKey *> &signers = {},
                std::optional<std::string_view> manifest_text = std::nullopt);
  // `m` with `stored` as this writer stored its blobs: the manifest commit() writes.
  Manifest as_written(const Manifest &m) const;
  // Adds a signature file (<key id>.json) as it is: a pulled package's.
  Status add_signature(const std::string &file_name, std::string_view text);

private:
  // A file other than a blob (a signature), by its path inside the package.
  Status add_file(const std::filesystem::path &relative, std::string_view bytes);
  // Writes one file of blobs/sha256/ (once).
  Status write_blob_file(const Digest &name, std::span<const uint8_t> bytes);
  PackageWriter(std::filesystem::path final_dir, TempDir tmp, BlobEncoding encoding)
      : final_dir_(std::move(final_dir)), tmp_(std::move(tmp)), encoding_(encoding) {}
  std::filesystem::path final_dir_;
  TempDir tmp_;
  BlobEncoding encoding_;
  std::set<Digest> written_;                      // blobs added or carried, by their own digest
  std::set<Digest> files_;                        // files of blobs/sha256/ written, by name
  std::map<Digest, StoredBlob> stored_;           // the compressed ones' forms
  std::map<std::string, std::string> signatures_; // file name -> text, as commit() writes them
};

} // namespace cudaq_rt
