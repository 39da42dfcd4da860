#include "base/signing.h"

#include <doctest/doctest.h>

#include "scratch_dir.h"
#include "signing_keys.h"
#include "unit_files.h"

#include <map>

namespace fs = std::filesystem;
using namespace cudaq_rt;
using unit_files::write_file;

namespace {

Signature signature_of(const char *hex) {
  Signature s{};
  REQUIRE(from_hex(hex, s));
  return s;
}

std::span<const uint8_t> bytes_of(const std::string &s) {
  return as_bytes(s);
}

} // namespace

TEST_CASE("Ed25519 signs and verifies as RFC 8032's test vectors say") {
  auto key = SigningKey::from_pem(test_keys::rfc8032_1_private, "key 1");
  REQUIRE(key);
  CHECK(to_hex(key->public_key().raw()) ==
        "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a");
  // TEST 1: the empty message.
  const Signature empty = signature_of(
      "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bacc61e39701c"
      "f9b46bd25bf5f0595bbe24655141438e7a100b");
  CHECK(key->sign({}) == empty);
  CHECK(key->public_key().verify({}, empty));

  auto key2 = SigningKey::from_pem(test_keys::rfc8032_2_private, "key 2");
  REQUIRE(key2);
  // TEST 2: the one-byte message 0x72.
  const std::string m = "\x72";
  const Signature sig2 = signature_of(
      "92a009a9f0d4cab8720e820b5f642540a2b27b5416503f8fb3762223ebdb69da085ac1e43e15996e458f3613d0"
      "f11d8c387b2eaeb4302aeeb00d291612bb0c00");
  CHECK(key2->sign(bytes_of(m)) == sig2);
  CHECK(key2->public_key().verify(bytes_of(m), sig2));

  // Another message, another key, one flipped bit: each fails.
  CHECK_FALSE(key2->public_key().verify(bytes_of("\x73"), sig2));
  CHECK_FALSE(key->public_key().verify(bytes_of(m), sig2));
  Signature flipped = sig2;
  flipped[40] ^= 0x01;
  CHECK_FALSE(key2->public_key().verify(bytes_of(m), flipped));
}

TEST_CASE("a key's id is the SHA-256 of its raw public key, the same from either half") {
  auto key = SigningKey::from_pem(test_keys::rfc8032_1_private, "k");
  auto pub = PublicKey::from_pem(test_keys::rfc8032_1_public, "k.pub");
  REQUIRE(key);
  REQUIRE(pub);
  CHECK(pub->id() == key->id());
  CHECK(pub->id().digest == sha256(pub->raw()));
  CHECK(pub->id().short_str() == pub->id().hex().substr(0, 16));
  auto other = PublicKey::from_pem(test_keys::rfc8032_2_public, "k2.pub");
  REQUIRE(other);
  CHECK_FALSE(other->id() == pub->id());
}

TEST_CASE("what is not an Ed25519 key of the kind asked for is refused, saying what it is") {
  auto priv_as_pub = PublicKey::from_pem(test_keys::rfc8032_1_private, "k");
  REQUIRE_FALSE(priv_as_pub);
  CHECK(priv_as_pub.error().str().find("is a private key where a public key was expected") !=
        std::string::npos);
  auto pub_as_priv = SigningKey::from_pem(test_keys::rfc8032_1_public, "k.pub");
  REQUIRE_FALSE(pub_as_priv);
  CHECK(pub_as_priv.error().str().find("is not a PEM private key") != std::string::npos);
  auto garbage = PublicKey::from_pem("hello\n", "junk");
  REQUIRE_FALSE(garbage);
  CHECK(garbage.error().str() ==
        "'junk': is not a PEM public key (make one with: openssl genpkey -algorithm ed25519 -out "
        "KEY; then openssl pkey -in KEY -pubout -out KEY.pub)");
  auto x25519 = PublicKey::from_pem(test_keys::x25519_public, "x.pub");
  REQUIRE_FALSE(x25519);
  CHECK(x25519.error().str().find("is an X25519 key: cudaq-rt signs and verifies with Ed25519") !=
        std::string::npos);
  auto encrypted = SigningKey::from_pem(
      "-----BEGIN ENCRYPTED PRIVATE KEY-----\nMIGb\n-----END ENCRYPTED PRIVATE KEY-----\n", "e");
  REQUIRE_FALSE(encrypted);
  CHECK(encrypted.error().str().find("is an encrypted private key") != std::string::npos);
}

TEST_CASE("trusted keys come from files and from directories of *.pem and *.pub") {
  ScratchDir tmp;
  fs::create_directories(tmp.path / "keys");
  write_file(tmp.path / "keys" / "one.pem", test_keys::rfc8032_1_public);
  write_file(tmp.path / "keys" / "README", "not a key, and not read");
  write_file(tmp.path / "keys" / ".hidden.pem", "not read either");
  write_file(tmp.path / "two.pub", test_keys::rfc8032_2_public);

  auto keys = TrustedKeys::load({tmp.path / "keys", tmp.path / "two.pub"});
  REQUIRE(keys);
  REQUIRE(keys->keys().size() == 2);
  auto k1 = PublicKey::from_pem(test_keys::rfc8032_1_public, "");
  REQUIRE(k1);
  CHECK(keys->find(k1->id()) != nullptr);

  // The same key twice is one key.
  auto twice = TrustedKeys::load({tmp.path / "two.pub", tmp.path / "two.pub"});
  REQUIRE(twice);
  CHECK(twice->keys().size() == 1);

  fs::create_directories(tmp.path / "empty");
  auto empty = TrustedKeys::load({tmp.path / "empty"});
  REQUIRE_FALSE(empty);
  CHECK(empty.error().str().find("holds no public key (*.pem or *.pub)") != std::string::npos);

  write_file(tmp.path / "keys" / "bad.pub", "garbage");
  auto bad = TrustedKeys::load({tmp.path / "keys"});
  REQUIRE_FALSE(bad);
  CHECK(bad.error().subject == (tmp.path / "keys" / "bad.pub").string());

  auto missing = TrustedKeys::load({tmp.path / "nope.pub"});
  REQUIRE_FALSE(missing);
  CHECK(missing.error().str() == quote((tmp.path / "nope.pub").string()) + ": no such key file");
}

TEST_CASE("resolve_trust: a flag over the environment, each error naming where it came from") {
  ScratchDir tmp;
  write_file(tmp.path / "sign.pem", test_keys::rfc8032_1_private);
  write_file(tmp.path / "a.pub", test_keys::rfc8032_1_public);
  write_file(tmp.path / "b.pub", test_keys::rfc8032_2_public);
  std::map<std::string, std::string> env;
  auto getenv = [&](const char *name) -> const char * {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  };

  auto none = resolve_trust({}, getenv);
  REQUIRE(none);
  CHECK_FALSE(none->signer);
  CHECK_FALSE(none->trusted);

  env["CUDAQ_RT_SIGN_KEY"] = (tmp.path / "sign.pem").string();
  env["CUDAQ_RT_TRUST"] =
      ":" + (tmp.path / "a.pub").string() + "::" + (tmp.path / "b.pub").string();
  auto from_env = resolve_trust({}, getenv);
  REQUIRE(from_env);
  REQUIRE(from_env->signer);
  REQUIRE(from_env->trusted);
  CHECK(from_env->trusted->keys().size() == 2);

  // --trust replaces the variable's list; it does not add to it.
  auto flags = resolve_trust({.sign_key = "", .trust = {(tmp.path / "b.pub").string()}}, getenv);
  REQUIRE(flags);
  REQUIRE(flags->trusted->keys().size() == 1);
  CHECK(flags->trusted->keys()[0].raw()[0] == 0x3d);

  env["CUDAQ_RT_SIGN_KEY"] = (tmp.path / "a.pub").string();
  auto bad_env = resolve_trust({}, getenv);
  REQUIRE_FALSE(bad_env);
  CHECK(bad_env.error().str().starts_with("CUDAQ_RT_SIGN_KEY: "));
  auto bad_flag =
      resolve_trust({.sign_key = "", .trust = {(tmp.path / "sign.pem").string()}}, getenv);
  REQUIRE_FALSE(bad_flag);
  CHECK(bad_flag.error().str().starts_with("CUDAQ_RT_SIGN_KEY: ")); // the signer comes first
  env.erase("CUDAQ_RT_SIGN_KEY");
  auto bad_trust =
      resolve_trust({.sign_key = "", .trust = {(tmp.path / "sign.pem").string()}}, getenv);
  REQUIRE_FALSE(bad_trust);
  CHECK(bad_trust.error().str().starts_with("--trust: "));
  CHECK(bad_trust.error().str().find("is a private key where a public key was expected") !=
        std::string::npos);
}
