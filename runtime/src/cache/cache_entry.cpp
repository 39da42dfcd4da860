// The link cache's entry files.
//
// <dir>/v1/<first 2 hex digits of the key>/<64 hex digits>, one file per entry:
//
//   offset size
//        0    8  magic "CQRTLNK\0"
//        8    4  entry format version, u32 little endian (1)
//       12    4  reserved, 0
//       16   32  the full key digest
//       48    8  metadata length M, u64 little endian
//       56    8  cubin size C, u64 little endian
//       64   32  SHA-256 of the cubin
//       96   32  SHA-256 of bytes 0..96 followed by the metadata
//      128    M  metadata, JSON (arch, options, nvJitLink version, inputs, info log, time, created)
//    128+M    C  cubin
//
// Every byte is covered by a check: the file size must be exactly 128 + M + C, the header and
// metadata by their digest, the cubin by its own. An entry that fails any check (truncated, bit
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

std::vector<uint8_t> encode_cache_entry(const Digest &key, std::span<const uint8_t> cubin,
                                        const LinkMetadata &link_metadata) {
  const std::string metadata = link_metadata.to_json().dump();
  std::vector<uint8_t> out(header_size + metadata.size() + cubin.size());
  uint8_t *h = out.data();
  std::memcpy(h, entry_magic, 8);
  put_le(h + 8, entry_format_version, 4);
  put_le(h + 12, 0, 4);
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
  return out;
}

std::optional<CacheEntry> decode_cache_entry(std::string_view file, const Digest &key) {
  if (file.size() < header_size)
    return std::nullopt;
  auto h = reinterpret_cast<const uint8_t *>(file.data());
  if (std::memcmp(h, entry_magic, 8) != 0 || get_le(h + 8, 4) != entry_format_version ||
      get_le(h + 12, 4) != 0 || std::memcmp(h + 16, key.bytes.data(), 32) != 0)
    return std::nullopt;
  uint64_t metadata_size = get_le(h + 48, 8), cubin_size = get_le(h + 56, 8);
  uint64_t body = file.size() - header_size;
  if (metadata_size > body || cubin_size != body - metadata_size)
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
  return CacheEntry{std::vector<uint8_t>(cubin.begin(), cubin.end()), std::move(*parsed)};
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
