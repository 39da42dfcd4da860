// The link cache's entry files.
//
// <dir>/v1/<first 2 hex digits of the key>/<64 hex digits>, one file per entry:
//
//   offset size
//        0    8  magic "CQRTLNK\0"
//        8    4  entry format version, u32 little endian (1)
//       12    4  signatures' length S, u32 little endian (0: unsigned; a multiple of 96)
//       16   32  the full key digest
//       48    8  metadata length M, u64 little endian
//       56    8  cubin size C, u64 little endian
//       64   32  SHA-256 of the cubin
//       96   32  SHA-256 of bytes 0..96 followed by the metadata
//      128    M  metadata, JSON (arch, options, nvJitLink version, inputs, info log, time, created)
//    128+M    C  cubin
//  128+M+C    S  signatures, 96 bytes each: the signer's key id (32), Ed25519 signature (64)
//
// Every byte is covered by a check: the file size must be exactly 128 + M + C + S, the header and
// metadata by their digest, the cubin by its own, each signature by its key (when the reader
// trusts that key; one it does not know is carried and not used). An entry that fails any check (truncated, bit
// flips, garbage, another key's entry renamed into place) is a miss and is removed, so the next
// link stores a good one. The cubin is never handed out unverified.
#include "cache/cache_entry.h"

#include <cstring>
#include <ctime>

using json = nlohmann::json;

namespace cudaq_rt {
namespace {

constexpr char entry_magic[8] = {'C', 'Q', 'R', 'T', 'L', 'N', 'K', '\0'};
constexpr uint32_t entry_format_version = 1;
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
                                        const LinkMetadata &link_metadata,
                                        const SigningKey *signer) {
  const std::string metadata = link_metadata.to_json().dump();
  const size_t signatures = signer ? signature_record_size : 0;
  std::vector<uint8_t> out(header_size + metadata.size() + cubin.size() + signatures);
  uint8_t *h = out.data();
  std::memcpy(h, entry_magic, 8);
  put_le(h + 8, entry_format_version, 4);
  put_le(h + 12, signatures, 4);
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
  if (signer) {
    uint8_t *sig = h + header_size + metadata.size() + cubin.size();
    const Signature s = signer->sign(as_bytes(cache_entry_signature_message(key, cubin_digest)));
    std::memcpy(sig, signer->id().digest.bytes.data(), 32);
    std::memcpy(sig + 32, s.data(), s.size());
  }
  return out;
}

std::optional<CacheEntry> decode_cache_entry(std::string_view file, const Digest &key) {
  if (file.size() < header_size)
    return std::nullopt;
  auto h = reinterpret_cast<const uint8_t *>(file.data());
  const uint64_t signatures_size = get_le(h + 12, 4);
  if (std::memcmp(h, entry_magic, 8) != 0 || get_le(h + 8, 4) != entry_format_version ||
      signatures_size % signature_record_size != 0 ||
      signatures_size > max_entry_signatures * signature_record_size ||
      std::memcmp(h + 16, key.bytes.data(), 32) != 0)
    return std::nullopt;
  uint64_t metadata_size = get_le(h + 48, 8), cubin_size = get_le(h + 56, 8);
  uint64_t body = file.size() - header_size;
  if (signatures_size > body || metadata_size > body - signatures_size ||
      cubin_size != body - signatures_size - metadata_size)
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
  CacheEntry entry{std::vector<uint8_t>(cubin.begin(), cubin.end()), std::move(*parsed)};
  entry.cubin_digest = cubin_digest;
  for (const uint8_t *p = cubin.data() + cubin.size(), *end = p + signatures_size; p < end;
       p += signature_record_size) {
    EntrySignature s;
    std::memcpy(s.key.digest.bytes.data(), p, 32);
    std::memcpy(s.signature.data(), p + 32, 64);
    entry.signatures.push_back(s);
  }
  return entry;
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
