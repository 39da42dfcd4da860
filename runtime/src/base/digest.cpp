// SHA-256 through OpenSSL's EVP interface. Pack hashes every byte of its inputs (a 218 MB
// library is 218 MB of SHA-256) and should run at the speed of the disk: libcrypto's assembly
// uses the CPU's SHA extensions where it has them (1.45 GB/s on one core here), LLVM's portable
// SHA256 runs at about 300 MB/s. The EVP context is made once per Sha256 and reused by update().
#include "base/digest.h"

#include <openssl/evp.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

namespace cudaq_rt {

std::string to_hex(std::span<const uint8_t> bytes) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string out(2 * bytes.size(), '0');
  for (size_t i = 0; i < bytes.size(); ++i) {
    out[2 * i] = digits[bytes[i] >> 4];
    out[2 * i + 1] = digits[bytes[i] & 15];
  }
  return out;
}

bool from_hex(std::string_view text, std::span<uint8_t> out) {
  if (text.size() != 2 * out.size())
    return false;
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9')
      return c - '0';
    if (c >= 'a' && c <= 'f')
      return c - 'a' + 10;
    return -1;
  };
  for (size_t i = 0; i < out.size(); ++i) {
    int hi = nibble(text[2 * i]), lo = nibble(text[2 * i + 1]);
    if (hi < 0 || lo < 0)
      return false;
    out[i] = static_cast<uint8_t>(hi << 4 | lo);
  }
  return true;
}

std::string Digest::hex() const {
  return to_hex(bytes);
}

std::optional<Digest> Digest::parse(std::string_view text) {
  constexpr std::string_view prefix = "sha256:";
  if (!text.starts_with(prefix))
    return std::nullopt;
  Digest d;
  if (!from_hex(text.substr(prefix.size()), d.bytes))
    return std::nullopt;
  return d;
}

// A failing EVP call means no SHA-256 at all (an OpenSSL build without it, or no memory):
// there is nothing to fall back to and no digest to return, so the process stops.
namespace {
void check(int ok) {
  if (ok != 1)
    std::abort();
}
} // namespace

struct Sha256::Impl {
  EVP_MD_CTX *ctx = EVP_MD_CTX_new();
  Impl() {
    if (!ctx)
      std::abort();
    check(EVP_DigestInit_ex(ctx, EVP_sha256(), nullptr));
  }
  ~Impl() { EVP_MD_CTX_free(ctx); }
  Impl(const Impl &) = delete;
  Impl &operator=(const Impl &) = delete;
};

Sha256::Sha256() : impl_(std::make_unique<Impl>()) {}
Sha256::~Sha256() = default;
Sha256::Sha256(Sha256 &&) noexcept = default;
Sha256 &Sha256::operator=(Sha256 &&) noexcept = default;

void Sha256::update(std::span<const uint8_t> data) {
  check(EVP_DigestUpdate(impl_->ctx, data.data(), data.size()));
}
void Sha256::update(std::string_view data) {
  update(as_bytes(data));
}

void Sha256::field(std::string_view data) {
  uint64_t n = data.size();
  uint8_t len[8];
  for (int i = 0; i < 8; ++i)
    len[i] = static_cast<uint8_t>(n >> (8 * i));
  update(std::span<const uint8_t>(len, 8));
  update(data);
}

Digest Sha256::finish() {
  Digest d;
  unsigned int size = 0;
  check(EVP_DigestFinal_ex(impl_->ctx, d.bytes.data(), &size));
  if (size != d.bytes.size())
    std::abort();
  return d;
}

Digest sha256(std::span<const uint8_t> data) {
  Sha256 h;
  h.update(data);
  return h.finish();
}
Digest sha256(std::string_view data) {
  return sha256(as_bytes(data));
}

} // namespace cudaq_rt

namespace cudaq_rt {

Digest chunked_sha256(std::span<const uint8_t> data) {
  const size_t chunks = (data.size() + chunked_sha256_chunk - 1) / chunked_sha256_chunk;
  std::vector<Digest> digests(chunks);
  auto hash_from = [&](size_t first, size_t stride) {
    for (size_t c = first; c < chunks; c += stride)
      digests[c] = sha256(
          data.subspan(c * chunked_sha256_chunk,
                       std::min(chunked_sha256_chunk, data.size() - c * chunked_sha256_chunk)));
  };
  // A thread starts in tens of microseconds, a chunk hashes in about 0.6 ms: one per chunk
  // beyond the first, on the cores there are, at most 8 in all.
  const size_t threads =
      std::min<size_t>({chunks, std::max(1u, std::thread::hardware_concurrency()), 8});
  std::vector<std::thread> helpers;
  for (size_t t = 1; t < threads; ++t)
    helpers.emplace_back(hash_from, t, threads);
  hash_from(0, threads);
  for (std::thread &t : helpers)
    t.join();
  Sha256 h;
  h.update(std::string_view("cudaq-rt chunked sha256 v1", sizeof "cudaq-rt chunked sha256 v1"));
  uint8_t size[8];
  for (int i = 0; i < 8; ++i)
    size[i] = static_cast<uint8_t>(static_cast<uint64_t>(data.size()) >> (8 * i));
  h.update(std::span<const uint8_t>(size, 8));
  for (const Digest &d : digests)
    h.update(std::span<const uint8_t>(d.bytes.data(), d.bytes.size()));
  return h.finish();
}

} // namespace cudaq_rt
