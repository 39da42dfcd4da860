// Ed25519 through OpenSSL's EVP interface: "pure" Ed25519 (RFC 8032) over the whole message, so
// that `openssl pkeyutl -sign -rawin` and `-verify -rawin` make and check the same signatures.
#include "base/signing.h"

#include "base/atomic_file.h"

#include <openssl/bio.h>
#include <openssl/evp.h>
#include <openssl/pem.h>

#include <algorithm>
#include <cstring>

namespace fs = std::filesystem;

namespace cudaq_rt {
namespace {

// Far beyond any PEM key; a key path that names something larger is not a key.
constexpr uint64_t max_key_file_bytes = 64 << 10;

struct PkeyFree {
  void operator()(EVP_PKEY *k) const { EVP_PKEY_free(k); }
};
using Pkey = std::unique_ptr<EVP_PKEY, PkeyFree>;

struct MdCtxFree {
  void operator()(EVP_MD_CTX *c) const { EVP_MD_CTX_free(c); }
};

// A passphrase prompt would block a tool on its terminal: encrypted keys are refused instead.
int no_passphrase(char *, int, int, void *) {
  return -1;
}

enum class PemKind { private_key, public_key };

Expected<Pkey> read_pem(std::string_view pem, PemKind kind, const std::string &what) {
  const bool want_private = kind == PemKind::private_key;
  const bool is_private = pem.find("PRIVATE KEY-----") != std::string_view::npos;
  if (!want_private && is_private)
    return make_error(what, "is a private key where a public key was expected: give its public "
                            "half (openssl pkey -in KEY -pubout)");
  if (pem.find("-----BEGIN ENCRYPTED PRIVATE KEY-----") != std::string_view::npos)
    return make_error(what, "is an encrypted private key: cudaq-rt signs with an unencrypted one "
                            "(keep it readable only by the signer)");
  std::unique_ptr<BIO, decltype(&BIO_free)> bio(
      BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())), BIO_free);
  if (!bio)
    return make_error(what, "cannot read: out of memory");
  Pkey key(want_private ? PEM_read_bio_PrivateKey(bio.get(), nullptr, no_passphrase, nullptr)
                        : PEM_read_bio_PUBKEY(bio.get(), nullptr, no_passphrase, nullptr));
  if (!key)
    return make_error(what, "is not a PEM ", want_private ? "private" : "public",
                      " key (make one with: openssl genpkey -algorithm ed25519 -out KEY",
                      want_private ? "" : "; then openssl pkey -in KEY -pubout -out KEY.pub", ")");
  if (EVP_PKEY_id(key.get()) != EVP_PKEY_ED25519) {
    const char *type = EVP_PKEY_get0_type_name(key.get());
    const std::string name = type ? type : "unknown";
    const bool vowel = std::string_view("AEFHILMNORSX").find(name[0]) != std::string_view::npos;
    return make_error(what, vowel ? "is an " : "is a ", name,
                      " key: cudaq-rt signs and verifies with Ed25519 only (openssl genpkey "
                      "-algorithm ed25519)");
  }
  return key;
}

Expected<std::string> read_key_file(const fs::path &path) {
  auto file = RegularFile::open(path, {.follow_symlinks = true, .max_bytes = max_key_file_bytes});
  if (!file)
    return std::move(file).take_error();
  if (!*file)
    return make_error(path.string(), "no such key file");
  return (*file)->read();
}

Expected<PublicKey> public_of(EVP_PKEY *key, const std::string &what) {
  std::array<uint8_t, 32> raw{};
  size_t n = raw.size();
  if (EVP_PKEY_get_raw_public_key(key, raw.data(), &n) != 1 || n != raw.size())
    return make_error(what, "has no Ed25519 public key");
  return PublicKey::from_raw(raw);
}

} // namespace

struct SigningKey::Handle {
  Pkey key;
};

Expected<PublicKey> PublicKey::from_pem(std::string_view pem, const std::string &what) {
  auto key = read_pem(pem, PemKind::public_key, what);
  if (!key)
    return std::move(key).take_error();
  return public_of(key->get(), what);
}

Expected<PublicKey> PublicKey::from_raw(std::span<const uint8_t> raw) {
  if (raw.size() != 32)
    return make_error("", "an Ed25519 public key is 32 bytes, not ", raw.size());
  PublicKey k;
  std::copy(raw.begin(), raw.end(), k.raw_.begin());
  k.id_ = KeyId{sha256(raw)};
  return k;
}

bool PublicKey::verify(std::span<const uint8_t> message, const Signature &signature) const {
  Pkey key(EVP_PKEY_new_raw_public_key(EVP_PKEY_ED25519, nullptr, raw_.data(), raw_.size()));
  std::unique_ptr<EVP_MD_CTX, MdCtxFree> ctx(EVP_MD_CTX_new());
  if (!key || !ctx || EVP_DigestVerifyInit(ctx.get(), nullptr, nullptr, nullptr, key.get()) != 1)
    return false;
  return EVP_DigestVerify(ctx.get(), signature.data(), signature.size(), message.data(),
                          message.size()) == 1;
}

Expected<SigningKey> SigningKey::load(const fs::path &path) {
  auto text = read_key_file(path);
  if (!text)
    return std::move(text).take_error();
  return from_pem(*text, path.string());
}

Expected<SigningKey> SigningKey::from_pem(std::string_view pem, const std::string &what) {
  auto key = read_pem(pem, PemKind::private_key, what);
  if (!key)
    return std::move(key).take_error();
  auto pub = public_of(key->get(), what);
  if (!pub)
    return std::move(pub).take_error();
  SigningKey k;
  k.key_ = std::make_shared<Handle>(Handle{std::move(*key)});
  k.public_ = std::move(*pub);
  return k;
}

Signature SigningKey::sign(std::span<const uint8_t> message) const {
  Signature out{};
  size_t n = out.size();
  std::unique_ptr<EVP_MD_CTX, MdCtxFree> ctx(EVP_MD_CTX_new());
  // Ed25519 signing fails only without memory; a zero signature then verifies nowhere.
  if (ctx && EVP_DigestSignInit(ctx.get(), nullptr, nullptr, nullptr, key_->key.get()) == 1 &&
      EVP_DigestSign(ctx.get(), out.data(), &n, message.data(), message.size()) == 1 &&
      n == out.size())
    return out;
  return Signature{};
}

Expected<TrustedKeys> TrustedKeys::load(const std::vector<fs::path> &paths) {
  TrustedKeys out;
  auto add_file = [&](const fs::path &p) -> Status {
    auto text = read_key_file(p);
    if (!text)
      return std::move(text).take_error();
    auto key = PublicKey::from_pem(*text, p.string());
    if (!key)
      return std::move(key).take_error();
    out.add(std::move(*key));
    return Status::ok();
  };
  for (const fs::path &p : paths) {
    std::error_code ec;
    if (!fs::is_directory(p, ec)) {
      if (auto st = add_file(p); !st)
        return std::move(st).take_error();
      continue;
    }
    std::vector<fs::path> files;
    for (const fs::directory_entry &e : fs::directory_iterator(p, ec)) {
      const std::string name = e.path().filename().string();
      const std::string ext = e.path().extension().string();
      if (!name.starts_with(".") && (ext == ".pem" || ext == ".pub") && e.is_regular_file(ec))
        files.push_back(e.path());
    }
    if (ec)
      return make_error(p.string(), "cannot read the key directory: ", ec.message());
    if (files.empty())
      return make_error(p.string(), "holds no public key (*.pem or *.pub): trusting it would "
                                    "trust nothing");
    std::sort(files.begin(), files.end());
    for (const fs::path &f : files)
      if (auto st = add_file(f); !st)
        return std::move(st).take_error();
  }
  return out;
}

void TrustedKeys::add(PublicKey key) {
  if (!find(key.id()))
    keys_.push_back(std::move(key));
}

const PublicKey *TrustedKeys::find(const KeyId &id) const {
  for (const PublicKey &k : keys_)
    if (k.id() == id)
      return &k;
  return nullptr;
}

std::string TrustedKeys::names() const {
  std::string out;
  for (const PublicKey &k : keys_)
    out += (out.empty() ? "" : ", ") + k.id().short_str();
  return out;
}

Expected<std::shared_ptr<const SigningKey>>
resolve_signer(const std::string &flag, const std::function<const char *(const char *)> &getenv) {
  std::string from = "--sign", path = flag;
  if (path.empty()) {
    const char *v = getenv("CUDAQ_RT_SIGN_KEY");
    path = v ? v : "";
    from = "CUDAQ_RT_SIGN_KEY";
  }
  if (path.empty())
    return std::shared_ptr<const SigningKey>();
  auto key = SigningKey::load(path);
  if (!key)
    return make_error("", from, ": ", key.error().str());
  return std::make_shared<const SigningKey>(std::move(*key));
}

Expected<std::shared_ptr<const TrustedKeys>>
resolve_trusted(const std::vector<std::string> &flags,
                const std::function<const char *(const char *)> &getenv) {
  std::vector<fs::path> paths(flags.begin(), flags.end());
  std::string from = "--trust";
  if (flags.empty()) {
    from = "CUDAQ_RT_TRUST";
    const char *v = getenv("CUDAQ_RT_TRUST");
    for (const std::string &p : split_path_list(v ? v : ""))
      paths.emplace_back(p);
  }
  if (paths.empty())
    return std::shared_ptr<const TrustedKeys>();
  auto keys = TrustedKeys::load(paths);
  if (!keys)
    return make_error("", from, ": ", keys.error().str());
  return std::make_shared<const TrustedKeys>(std::move(*keys));
}

std::vector<std::string> split_path_list(std::string_view list) {
  std::vector<std::string> out;
  while (!list.empty()) {
    size_t colon = std::min(list.find(':'), list.size());
    if (colon != 0)
      out.emplace_back(list.substr(0, colon));
    list.remove_prefix(std::min(colon + 1, list.size()));
  }
  return out;
}

Expected<TrustPolicy> resolve_trust(const TrustRequest &request,
                                    const std::function<const char *(const char *)> &getenv) {
  auto signer = resolve_signer(request.sign_key, getenv);
  if (!signer)
    return std::move(signer).take_error();
  auto trusted = resolve_trusted(request.trust, getenv);
  if (!trusted)
    return std::move(trusted).take_error();
  return TrustPolicy{std::move(*signer), std::move(*trusted)};
}

} // namespace cudaq_rt
