// The link cache's entry files.
//
// <dir>/v1/<first 2 hex digits of the key>/<64 hex digits>, one file per entry:
//
//   offset size
//        0    8  magic "CQRTLNK\0"
//        8    4  entry format version, u32 little endian: 3 (a local entry) or 2 (a remote one);
//                1 is still read
//       12    4  signatures' length S, u32 little endian (0: unsigned; a multiple of 96)
//       16   32  the full key digest
//       48    8  metadata length M, u64 little endian
//       56    8  payload size C, u64 little endian
//       64   32  the cubin's digest (of the cubin uncompressed): version 3, chunked_sha256
//                (base/digest.h); 1 and 2, SHA-256
//       96   32  SHA-256 of bytes 0..96 followed by the metadata
//      128    M  metadata, JSON (arch, options, nvJitLink version, inputs, info log, time, created)
//    128+M    C  payload: version 2, the cubin as one zstd frame (level 1, content size in its
//                header); versions 3 and 1, the cubin as it is
//  128+M+C    S  signatures, 96 bytes each: the signer's key id (32), Ed25519 signature (64)
//
// Every byte is covered by a check: the file size must be exactly 128 + M + C + S, the header and
// metadata by their digest, the cubin, once decompressed (into at most max_cubin_bytes, the
// size its frame declares and no other, streamed through its digest before it is held), by its
// own digest, each signature by its key (when the
// reader trusts that key; one it does not know is carried and not used). An entry that fails any
// check (truncated, bit flips, garbage, another key's entry renamed into place) is a miss and is
// removed, so the next link stores a good one. The cubin is never handed out unverified.
// A cubin compresses about 4x at level 1 (the example's 111,840 bytes for sm_90 to 28,450), which
// is what a remote cache moves, at a cost of well under a millisecond each way. A local entry is
// written uncompressed (version 3): a hit is on a program's start path, and there the cubin is
// read once, straight into the buffer the caller gets, and hashed there; decompressing it too
// cost 1.2 ms against 0.4 for a 652 KB cubin (bench/jit_start.md, "A hit's cost"). Its digest is
// chunked_sha256, which hashes 1 MiB chunks on several cores: SHA-256 alone took 2.8 of the 6.3
// ms a 4.8 MB hit cost. Signatures sign whichever digest the header holds. An entry fetched
// from the remote cache (version 2) is kept locally as fetched, signatures and all.
#include "cache/cache_entry.h"
#include "base/zstd.h"

#include <cerrno>
#include <cstring>
#include <ctime>
#include <fcntl.h>
#include <functional>
#include <stdexcept>
#include <sys/stat.h>
#include <unistd.h>

using json = nlohmann::json;

namespace cudaq_rt {
namespace {

constexpr char entry_magic[8] = {'C', 'Q', 'R', 'T', 'L', 'N', 'K', '\0'};
constexpr uint32_t compressed_format_version = 2;   // zstd frame, SHA-256
constexpr uint32_t plain_format_version = 3;        // as it is, chunked_sha256
constexpr uint32_t uncompressed_format_version = 1; // as it is, SHA-256 (read only)
// No linked module is near this; a frame that says more is not a cache entry's.
constexpr uint64_t max_cubin_bytes = uint64_t{1} << 30;
// A zstd frame is never much larger than what it holds.
constexpr uint64_t max_frame_bytes = max_cubin_bytes + (max_cubin_bytes >> 7) + 4096;
constexpr size_t header_size = 128;
constexpr size_t checked_header_size = 96; // the part the header digest covers
constexpr size_t signature_record_size = 32 + 64;
constexpr size_t max_entry_signatures = 16;

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

} // namespace

std::string cache_entry_signature_message(const Digest &key, const Digest &cubin) {
  std::string m = "cudaq-rt cache entry signature v1";
  m += '\0';
  m.append(reinterpret_cast<const char *>(key.bytes.data()), key.bytes.size());
  m.append(reinterpret_cast<const char *>(cubin.bytes.data()), cubin.bytes.size());
  return m;
}

bool CacheEntry::signed_by(const TrustedKeys &trusted, const Digest &key) const {
  const std::string message = cache_entry_signature_message(key, cubin_digest);
  for (const EntrySignature &s : signatures)
    if (const PublicKey *k = trusted.find(s.key); k && k->verify(as_bytes(message), s.signature))
      return true;
  return false;
}

std::vector<uint8_t> encode_cache_entry(const Digest &key, std::span<const uint8_t> cubin,
                                        const LinkMetadata &link_metadata, const SigningKey *signer,
                                        EntryPayload form) {
  const std::string metadata = link_metadata.to_json().dump();
  const size_t signatures = signer ? signature_record_size : 0;
  const bool compress = form == EntryPayload::compressed;
  const std::string payload =
      compress ? zstd_compress(cubin)
               : std::string(reinterpret_cast<const char *>(cubin.data()), cubin.size());
  std::vector<uint8_t> out(header_size + metadata.size() + payload.size() + signatures);
  uint8_t *h = out.data();
  std::memcpy(h, entry_magic, 8);
  put_le(h + 8, compress ? compressed_format_version : plain_format_version, 4);
  put_le(h + 12, signatures, 4);
  std::memcpy(h + 16, key.bytes.data(), 32);
  put_le(h + 48, metadata.size(), 8);
  put_le(h + 56, payload.size(), 8);
  Digest cubin_digest = compress ? sha256(cubin) : chunked_sha256(cubin);
  std::memcpy(h + 64, cubin_digest.bytes.data(), 32);
  Digest check = header_digest(h, metadata);
  std::memcpy(h + 96, check.bytes.data(), 32);
  std::memcpy(h + header_size, metadata.data(), metadata.size());
  std::memcpy(h + header_size + metadata.size(), payload.data(), payload.size());
  if (signer) {
    uint8_t *sig = h + header_size + metadata.size() + payload.size();
    const Signature s = signer->sign(as_bytes(cache_entry_signature_message(key, cubin_digest)));
    std::memcpy(sig, signer->id().digest.bytes.data(), 32);
    std::memcpy(sig + 32, s.data(), s.size());
  }
  return out;
}

namespace {

// Reads `n` bytes at `offset` of the entry into `to`; false where the entry has fewer.
using EntryReader = std::function<bool(uint64_t offset, void *to, size_t n)>;

// An entry's parts other than its payload, each checked: the header against the key and the
// file's size, the header and metadata against their digest, the metadata parsed.
struct EntryParts {
  uint64_t version = 0;
  uint64_t payload_at = 0, payload_size = 0;
  bool plain = false;
  Digest cubin_digest;
  LinkMetadata metadata;
  std::vector<EntrySignature> signatures;
};

std::optional<EntryParts> read_parts(uint64_t file_size, const EntryReader &read,
                                     const Digest &key) {
  uint8_t h[header_size];
  if (file_size < header_size || !read(0, h, header_size))
    return std::nullopt;
  EntryParts parts;
  const uint64_t signatures_size = get_le(h + 12, 4);
  parts.version = get_le(h + 8, 4);
  parts.plain =
      parts.version == plain_format_version || parts.version == uncompressed_format_version;
  if (std::memcmp(h, entry_magic, 8) != 0 ||
      (!parts.plain && parts.version != compressed_format_version) ||
      signatures_size % signature_record_size != 0 ||
      signatures_size > max_entry_signatures * signature_record_size ||
      std::memcmp(h + 16, key.bytes.data(), 32) != 0)
    return std::nullopt;
  uint64_t metadata_size = get_le(h + 48, 8);
  parts.payload_size = get_le(h + 56, 8);
  uint64_t body = file_size - header_size;
  if (signatures_size > body || metadata_size > body - signatures_size ||
      parts.payload_size != body - signatures_size - metadata_size)
    return std::nullopt;
  if (parts.payload_size > (parts.plain ? max_cubin_bytes : max_frame_bytes))
    return std::nullopt;
  std::string metadata(metadata_size, '\0');
  if (!read(header_size, metadata.data(), metadata_size))
    return std::nullopt;
  Digest check = header_digest(h, metadata);
  if (std::memcmp(h + 96, check.bytes.data(), 32) != 0)
    return std::nullopt;
  std::memcpy(parts.cubin_digest.bytes.data(), h + 64, 32);
  json j = json::parse(metadata, nullptr, /*allow_exceptions=*/false);
  auto parsed = LinkMetadata::from_json(j);
  if (!parsed)
    return std::nullopt;
  parts.metadata = std::move(*parsed);
  parts.payload_at = header_size + metadata_size;
  std::vector<uint8_t> signatures(signatures_size);
  if (!read(parts.payload_at + parts.payload_size, signatures.data(), signatures_size))
    return std::nullopt;
  for (size_t at = 0; at < signatures.size(); at += signature_record_size) {
    EntrySignature sig;
    std::memcpy(sig.key.digest.bytes.data(), signatures.data() + at, 32);
    std::memcpy(sig.signature.data(), signatures.data() + at + 32, 64);
    parts.signatures.push_back(sig);
  }
  return parts;
}

// The digest a format's header holds for `cubin`.
Digest digest_of(uint64_t version, std::span<const uint8_t> cubin) {
  return version == plain_format_version ? chunked_sha256(cubin) : sha256(cubin);
}

// The entry whose checked parts are `parts`, its cubin read through `read` and checked against
// the digest the header holds: the one decoder of both sources, a file's bytes in memory (a
// remote GET) and a local entry read piece by piece from its descriptor, so that a hit reads its
// cubin once, into the buffer the caller gets, and hashes it there.
std::optional<CacheEntry> with_cubin(EntryParts parts, const EntryReader &read) {
  std::vector<uint8_t> cubin;
  if (parts.plain) {
    cubin.resize(parts.payload_size);
    if (!read(parts.payload_at, cubin.data(), parts.payload_size) ||
        digest_of(parts.version, cubin) != parts.cubin_digest)
      return std::nullopt;
  } else {
    std::vector<uint8_t> frame(parts.payload_size);
    if (!read(parts.payload_at, frame.data(), parts.payload_size))
      return std::nullopt;
    // Streamed through SHA-256 before a byte is kept (the frame's digest check): forty bytes of
    // zstd declare a gibibyte, which must cost neither memory nor a link's worth of time for each
    // arch that reads it. Decompressing again gives the same bytes.
    Sha256 streamed;
    auto given = zstd_stream(frame, max_cubin_bytes, "",
                             [&streamed](std::span<const uint8_t> p) { streamed.update(p); });
    if (!given || streamed.finish() != parts.cubin_digest)
      return std::nullopt;
    auto unpacked = zstd_decompress(frame, max_cubin_bytes, "");
    if (!unpacked)
      return std::nullopt;
    cubin.assign(unpacked->begin(), unpacked->end());
  }
  CacheEntry entry;
  entry.cubin = std::move(cubin);
  entry.metadata = std::move(parts.metadata);
  entry.cubin_digest = parts.cubin_digest;
  entry.signatures = std::move(parts.signatures);
  return entry;
}

std::optional<CacheEntry> decode_entry(uint64_t file_size, const EntryReader &read,
                                       const Digest &key) {
  auto parts = read_parts(file_size, read, key);
  if (!parts)
    return std::nullopt;
  return with_cubin(std::move(*parts), read);
}

// Reads `n` bytes at `offset` of `fd`; false where the file has fewer (shrunk since it was
// opened) or cannot be read.
bool pread_all(int fd, uint64_t offset, void *to, size_t n) {
  auto *p = static_cast<uint8_t *>(to);
  while (n > 0) {
    ssize_t got = ::pread(fd, p, n, static_cast<off_t>(offset));
    if (got < 0 && errno == EINTR)
      continue;
    if (got <= 0)
      return false;
    p += got;
    offset += static_cast<uint64_t>(got);
    n -= static_cast<size_t>(got);
  }
  return true;
}

} // namespace

std::optional<CacheEntry> decode_cache_entry(std::string_view file, const Digest &key) {
  return decode_entry(
      file.size(),
      [file](uint64_t offset, void *to, size_t n) {
        if (offset > file.size() || n > file.size() - offset)
          return false;
        if (n != 0) // `to` may be an empty buffer's null
          std::memcpy(to, file.data() + offset, n);
        return true;
      },
      key);
}

std::optional<CacheEntry> read_cache_entry(int fd, uint64_t file_size, const Digest &key,
                                           const std::string *defer_path) {
  const EntryReader read = [fd](uint64_t offset, void *to, size_t n) {
    return pread_all(fd, offset, to, n);
  };
  auto parts = read_parts(file_size, read, key);
  if (!parts)
    return std::nullopt;
  const int copy =
      defer_path && parts->version == plain_format_version ? ::fcntl(fd, F_DUPFD_CLOEXEC, 0) : -1;
  if (copy < 0)
    return with_cubin(std::move(*parts), read);
  CacheEntry entry;
  entry.deferred = std::make_shared<const DeferredCubin>(
      copy, parts->payload_at, parts->payload_size, parts->cubin_digest, *defer_path);
  entry.metadata = std::move(parts->metadata);
  entry.cubin_digest = parts->cubin_digest;
  entry.signatures = std::move(parts->signatures);
  return entry;
}

DeferredCubin::DeferredCubin(int fd, uint64_t offset, uint64_t size, Digest digest,
                             std::string path)
    : fd_(fd), offset_(offset), size_(size), digest_(digest), path_(std::move(path)) {}

DeferredCubin::~DeferredCubin() {
  ::close(fd_);
}

bool DeferredCubin::read_into(uint8_t *out) const {
  if (pread_all(fd_, offset_, out, size_) &&
      chunked_sha256(std::span<const uint8_t>(out, size_)) == digest_)
    return true;
  // Corrupt since it was opened (entries are written whole and renamed into place, so only
  // someone writing into the file itself): removed, where the path still names this file.
  struct stat ours, there;
  if (::fstat(fd_, &ours) == 0 && ::lstat(path_.c_str(), &there) == 0 &&
      ours.st_dev == there.st_dev && ours.st_ino == there.st_ino)
    ::unlink(path_.c_str());
  return false;
}

LinkMetadata LinkMetadata::from_key(const LinkKey &key) {
  LinkMetadata m;
  m.arch = key.arch.str();
  m.options = key.options;
  m.nvjitlink_version = key.nvjitlink.version();
  m.inputs = key.inputs;
  m.form = key.form;
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
  if (!form.text().empty())
    j["mode"] = form.text();
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
    auto form = mode->is_string() ? LinkedForm::parse(mode->get<std::string>()) : std::nullopt;
    if (!form)
      return std::nullopt;
    m.form = *form;
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

} // namespace cudaq_rt
