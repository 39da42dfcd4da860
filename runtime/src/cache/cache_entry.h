// A link cache entry: a cubin and what is stored beside it, as one self-checking file, the same
// bytes in the local cache and on a remote server. The format is in cache_entry.cpp.
#pragma once

#include "base/digest.h"
#include "base/signing.h"
#include "cache/link_key.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace cudaq_rt {

// What is stored beside a cubin: enough to fill a manifest's link record without relinking.
struct LinkMetadata {
  std::string arch;
  std::vector<std::string> options;
  std::string nvjitlink_version; // "13.0"
  std::vector<Digest> inputs;
  LinkedForm form;
  std::string info_log;
  double link_time_ms = 0;
  int64_t created = 0; // seconds since the epoch

  // Everything but the log and the timings, taken from the key.
  static LinkMetadata from_key(const LinkKey &key);
  nlohmann::json to_json() const;
  static std::optional<LinkMetadata> from_json(const nlohmann::json &j);
};

// A signature over an entry: its key's id and an Ed25519 signature over
// cache_entry_signature_message(entry key, cubin digest). It vouches that the key's holder
// stored this cubin as the link of this key (which hashes the link's inputs and options).
struct EntrySignature {
  KeyId key;
  Signature signature{};
};

// The cubin of a local entry (format 3) that a hit reads only when it is asked for, straight into
// the buffer the caller gives, and checks there against the digest the entry's header holds (and
// its signatures sign): the interposer's GetLinkedCubin, where a copy into a buffer of ours first
// would cost a second pass over the cubin and the page faults of a fresh buffer (about 2.5 ms a
// 4.8 MB cubin on a virtual machine here).
class DeferredCubin {
public:
  DeferredCubin(int fd, uint64_t offset, uint64_t size, Digest digest, std::string path);
  DeferredCubin(const DeferredCubin &) = delete;
  DeferredCubin &operator=(const DeferredCubin &) = delete;
  ~DeferredCubin();

  uint64_t size() const { return size_; }
  // Reads the cubin into `out` (size() bytes) and checks it: false, and the entry file removed
  // (where it is still the one read), when it is not the cubin its digest names.
  bool read_into(uint8_t *out) const;

private:
  int fd_;
  uint64_t offset_, size_;
  Digest digest_;
  std::string path_;
};

struct CacheEntry {
  std::vector<uint8_t> cubin; // empty where `deferred` holds it
  std::shared_ptr<const DeferredCubin> deferred;
  LinkMetadata metadata;
  bool remote = false; // fetched from the remote cache (and copied into the local one)
  Digest cubin_digest;
  std::vector<EntrySignature> signatures; // as stored, not yet checked against any key

  // Whether a key in `trusted` signed this entry for `key`.
  bool signed_by(const TrustedKeys &trusted, const Digest &key) const;
};

// "cudaq-rt cache entry signature v1" NUL, the entry's key (32 bytes), its cubin's digest (32).
std::string cache_entry_signature_message(const Digest &key, const Digest &cubin);

// The bytes of an entry file, local or remote (the format is in cache_entry.cpp), signed by
// `signer` when there is one, and back: a decoded entry has passed every check the format has,
// against `key`; its signatures are checked by whoever trusts keys (CacheEntry::signed_by).
// The payload's form: a zstd frame (version 2: what a remote cache moves) or the cubin as it is
// (version 3: a local entry, read at every hit).
enum class EntryPayload { compressed, plain };
std::vector<uint8_t> encode_cache_entry(const Digest &key, std::span<const uint8_t> cubin,
                                        const LinkMetadata &metadata,
                                        const SigningKey *signer = nullptr,
                                        EntryPayload form = EntryPayload::compressed);
std::optional<CacheEntry> decode_cache_entry(std::string_view file, const Digest &key);
// The same from an open entry file of `size` bytes, read piece by piece (pread): the cubin of a
// plain entry goes straight into the entry's buffer, with no copy of the file in between. With
// `defer_path`, the cubin of a format 3 entry is not read at all: the entry's `deferred` reads it
// later from a duplicate of `fd` (and removes `defer_path`, the file's path, where it fails).
std::optional<CacheEntry> read_cache_entry(int fd, uint64_t size, const Digest &key,
                                           const std::string *defer_path = nullptr);

} // namespace cudaq_rt
