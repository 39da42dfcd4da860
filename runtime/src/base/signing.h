// Ed25519 keys and signatures (OpenSSL's libcrypto), and the trust a process is configured with:
// which key, if any, signs what it writes (--sign, CUDAQ_RT_SIGN_KEY) and which public keys it
// accepts signatures from (--trust, CUDAQ_RT_TRUST). What is signed, and what a signature means,
// is the caller's: package/signatures.h (packages) and cache/cache_entry.h (link cache entries).
//
// Keys are PEM files as OpenSSL writes them: `openssl genpkey -algorithm ed25519 -out KEY` (a
// PKCS#8 private key, unencrypted) and `openssl pkey -in KEY -pubout -out KEY.pub` (its public
// half). A key is named by its id, the SHA-256 of its 32 raw public-key bytes.
#pragma once

#include "base/digest.h"
#include "cudaq_rt/error.h"

#include <array>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace cudaq_rt {

using Signature = std::array<uint8_t, 64>;

// A key's name: SHA-256 of its raw public key. Messages show the first 16 hex digits.
struct KeyId {
  Digest digest;
  std::string hex() const { return digest.hex(); }
  std::string short_str() const { return digest.hex().substr(0, 16); }
  friend bool operator==(const KeyId &, const KeyId &) = default;
  friend auto operator<=>(const KeyId &, const KeyId &) = default;
};

class PublicKey {
public:
  // A PEM public key (BEGIN PUBLIC KEY) of type Ed25519; `what` names it in errors.
  static Expected<PublicKey> from_pem(std::string_view pem, const std::string &what);
  static Expected<PublicKey> from_raw(std::span<const uint8_t> raw);

  const KeyId &id() const { return id_; }
  const std::array<uint8_t, 32> &raw() const { return raw_; }
  bool verify(std::span<const uint8_t> message, const Signature &signature) const;

private:
  std::array<uint8_t, 32> raw_{};
  KeyId id_;
};

class SigningKey {
public:
  // An unencrypted PEM private key (BEGIN PRIVATE KEY) of type Ed25519, read from `path`.
  static Expected<SigningKey> load(const std::filesystem::path &path);
  static Expected<SigningKey> from_pem(std::string_view pem, const std::string &what);

  const PublicKey &public_key() const { return public_; }
  const KeyId &id() const { return public_.id(); }
  Signature sign(std::span<const uint8_t> message) const;

private:
  struct Handle;
  std::shared_ptr<Handle> key_;
  PublicKey public_;
};

// The public keys a process accepts signatures from.
class TrustedKeys {
public:
  // Each path a public key file or a directory of them (every regular file named *.pem or *.pub
  // that does not start with '.'). A file that is not an Ed25519 public key is an error, and so
  // is a directory without one: a trust setting that trusts nothing is a mistake.
  static Expected<TrustedKeys> load(const std::vector<std::filesystem::path> &paths);
  void add(PublicKey key);

  const PublicKey *find(const KeyId &id) const;
  const std::vector<PublicKey> &keys() const { return keys_; }
  // The keys' short ids, ", "-separated, for messages.
  std::string names() const;

private:
  std::vector<PublicKey> keys_;
};

// What a tool was asked for: --sign KEY overrides $CUDAQ_RT_SIGN_KEY, and --trust PUB (repeatable)
// overrides $CUDAQ_RT_TRUST (paths separated by ':').
struct TrustRequest {
  std::string sign_key;
  std::vector<std::string> trust;
};

// "A:B::C" as CUDAQ_RT_TRUST writes a list of paths: {"A", "B", "C"} (empty entries dropped).
std::vector<std::string> split_path_list(std::string_view list);

// The keys loaded: a signer signs what the process writes (packages, cache entries); with trusted
// keys, what it reads must carry a signature by one of them.
struct TrustPolicy {
  std::shared_ptr<const SigningKey> signer;
  std::shared_ptr<const TrustedKeys> trusted;
};

// Applies the precedence and loads the keys; a key that cannot be loaded is an error naming the
// flag or the variable it came from. Each half alone: null when neither flag nor variable is set.
Expected<TrustPolicy> resolve_trust(const TrustRequest &request,
                                    const std::function<const char *(const char *)> &getenv);
Expected<std::shared_ptr<const SigningKey>>
resolve_signer(const std::string &flag, const std::function<const char *(const char *)> &getenv);
Expected<std::shared_ptr<const TrustedKeys>>
resolve_trusted(const std::vector<std::string> &flags,
                const std::function<const char *(const char *)> &getenv);

} // namespace cudaq_rt
