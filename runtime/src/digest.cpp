// SHA-256 through LLVM's Support library, which the tools link for libObject anyway.
#include "cudaq_rt/digest.h"

#include <llvm/ADT/ArrayRef.h>
#include <llvm/ADT/StringRef.h>
#include <llvm/Support/SHA256.h>

#include <cstring>

namespace cudaq_rt {

std::string Digest::hex() const {
  static constexpr char digits[] = "0123456789abcdef";
  std::string out(64, '0');
  for (size_t i = 0; i < bytes.size(); ++i) {
    out[2 * i] = digits[bytes[i] >> 4];
    out[2 * i + 1] = digits[bytes[i] & 15];
  }
  return out;
}

std::optional<Digest> Digest::parse(std::string_view text) {
  constexpr std::string_view prefix = "sha256:";
  if (text.size() != prefix.size() + 64 || text.substr(0, prefix.size()) != prefix)
    return std::nullopt;
  text.remove_prefix(prefix.size());
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9')
      return c - '0';
    if (c >= 'a' && c <= 'f')
      return c - 'a' + 10;
    return -1;
  };
  Digest d;
  for (size_t i = 0; i < 32; ++i) {
    int hi = nibble(text[2 * i]), lo = nibble(text[2 * i + 1]);
    if (hi < 0 || lo < 0)
      return std::nullopt;
    d.bytes[i] = static_cast<uint8_t>(hi << 4 | lo);
  }
  return d;
}

struct Sha256::Impl {
  llvm::SHA256 h;
};

Sha256::Sha256() : impl_(std::make_unique<Impl>()) {}
Sha256::~Sha256() = default;
Sha256::Sha256(Sha256 &&) noexcept = default;
Sha256 &Sha256::operator=(Sha256 &&) noexcept = default;

void Sha256::update(std::span<const uint8_t> data) {
  impl_->h.update(llvm::ArrayRef<uint8_t>(data.data(), data.size()));
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
  llvm::StringRef raw = impl_->h.final();
  Digest d;
  std::memcpy(d.bytes.data(), raw.data(), d.bytes.size());
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
