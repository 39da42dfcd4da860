// SHA-256 digests, the names of everything content-addressed: package blobs, sources, link
// inputs, cubins and link-cache keys. Written `sha256:<64 hex>` in manifests (as in OCI).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace cudaq_rt {

struct Digest {
  std::array<uint8_t, 32> bytes{};

  std::string hex() const;
  std::string str() const { return "sha256:" + hex(); }
  // `sha256:` and the first 12 hex digits, for listings and messages.
  std::string short_str() const { return str().substr(0, 7 + 12); }
  // Accepts `sha256:<64 lowercase hex>` only.
  static std::optional<Digest> parse(std::string_view text);
  friend bool operator==(const Digest &, const Digest &) = default;
  friend auto operator<=>(const Digest &, const Digest &) = default;
};

Digest sha256(std::span<const uint8_t> data);
Digest sha256(std::string_view data);

// SHA-256 runs at about 1.7 GB/s a core (SHA-NI): 2.8 ms for a 4.8 MB cubin, most of a link cache
// hit. This digest splits the data into 1 MiB chunks, hashes them on up to 8 threads at once and
// hashes their digests in order: SHA-256("cudaq-rt chunked sha256 v1" NUL || size as u64 little
// endian || SHA-256(chunk 0) || SHA-256(chunk 1) || ...). As collision-resistant as SHA-256 (the
// size and the fixed chunking leave one way to read the list), and as fast as the cores read.
constexpr size_t chunked_sha256_chunk = size_t{1} << 20;
Digest chunked_sha256(std::span<const uint8_t> data);

// Incremental hashing, for keys built from several parts.
class Sha256 {
public:
  Sha256();
  ~Sha256();
  Sha256(Sha256 &&) noexcept;
  Sha256 &operator=(Sha256 &&) noexcept;
  void update(std::span<const uint8_t> data);
  void update(std::string_view data);
  // A length-prefixed field, so that ("ab","c") and ("a","bc") hash differently.
  void field(std::string_view data);
  Digest finish();

private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Bytes as lowercase hex, and back: false unless `text` is exactly 2 * out.size() lowercase hex
// digits.
std::string to_hex(std::span<const uint8_t> bytes);
bool from_hex(std::string_view text, std::span<uint8_t> out);

inline std::span<const uint8_t> as_bytes(std::string_view s) {
  return {reinterpret_cast<const uint8_t *>(s.data()), s.size()};
}

} // namespace cudaq_rt
