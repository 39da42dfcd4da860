#include "package/signatures.h"

#include "package/package.h"

#include <doctest/doctest.h>

#include "scratch_dir.h"
#include "signing_keys.h"
#include "unit_files.h"

#include <cstring>
#include <fstream>

namespace fs = std::filesystem;
using namespace cudaq_rt;
using unit_files::write_file;

namespace {

std::string empty_container() {
  std::string c(16, '\0');
  const uint32_t magic = 0xBA55ED50;
  const uint16_t version = 1, header_size = 16;
  std::memcpy(c.data(), &magic, 4);
  std::memcpy(c.data() + 4, &version, 2);
  std::memcpy(c.data() + 6, &header_size, 2);
  return c;
}

Manifest manifest_for(const std::string &name, const std::string &blob) {
  Manifest m;
  m.name = name;
  m.created_by = "test";
  ContainerRecord c;
  c.digest = sha256(blob);
  c.size = blob.size();
  m.containers.push_back(c);
  return m;
}

SigningKey key1() {
  auto k = SigningKey::from_pem(test_keys::rfc8032_1_private, "key 1");
  REQUIRE(k);
  return std::move(*k);
}
SigningKey key2() {
  auto k = SigningKey::from_pem(test_keys::rfc8032_2_private, "key 2");
  REQUIRE(k);
  return std::move(*k);
}

TrustedKeys trusting(std::initializer_list<const SigningKey *> keys) {
  TrustedKeys t;
  for (const SigningKey *k : keys)
    t.add(k->public_key());
  return t;
}

fs::path make_package(const fs::path &parent, const std::string &name,
                      const std::vector<const SigningKey *> &signers) {
  fs::path dir = parent / (name + package_suffix);
  const std::string blob = empty_container();
  auto w = PackageWriter::create(dir);
  REQUIRE(w);
  REQUIRE(w->add_blob(sha256(blob), as_bytes(blob)));
  REQUIRE(w->commit(manifest_for(name, blob), true, signers));
  return dir;
}

// Why verify_package refuses the package at `dir`, or "" when it accepts it.
std::string refusal(const fs::path &dir, const TrustedKeys &trusted) {
  auto pkg = Package::open(dir);
  REQUIRE(pkg);
  auto key = verify_package(*pkg, trusted);
  return key ? "" : key.error().message;
}

std::string read_text(const fs::path &p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

fs::path signature_path(const fs::path &dir, const SigningKey &key) {
  return dir / signatures_dir / (key.id().hex() + ".json");
}

} // namespace

TEST_CASE("a package signed at commit verifies under its key, and under no other") {
  ScratchDir tmp;
  const SigningKey k1 = key1(), k2 = key2();
  fs::path dir = make_package(tmp.path, "app", {&k1});
  CHECK(refusal(dir, trusting({&k1})) == "");
  CHECK(refusal(dir, trusting({&k2, &k1})) == "");
  auto pkg = Package::open(dir);
  REQUIRE(pkg);
  auto by = verify_package(*pkg, trusting({&k1}));
  REQUIRE(by);
  CHECK(*by == k1.id());

  const std::string untrusted = refusal(dir, trusting({&k2}));
  CHECK(untrusted == cat("signed only by keys that are not trusted: ", k1.id().short_str(),
                         " (trusted: ", k2.id().short_str(), ")"));
}

TEST_CASE("what the signature file records, and the message, are what the format says") {
  ScratchDir tmp;
  const SigningKey k1 = key1();
  fs::path dir = make_package(tmp.path, "app", {&k1});
  auto pkg = Package::open(dir);
  REQUIRE(pkg);
  auto sig = PackageSignature::parse(read_text(signature_path(dir, k1)), "sig");
  REQUIRE(sig);
  CHECK(sig->package == "app");
  CHECK(sig->manifest == sha256(read_text(dir / "manifest.json")));
  CHECK(sig->manifest == pkg->manifest_digest());
  CHECK(sig->key == k1.id());
  std::string message = std::string("cudaq-rt package signature v1") + '\0' + "app" + '\0' +
                        sha256(read_text(dir / "manifest.json")).str();
  CHECK(package_signature_message("app", sig->manifest) == message);
  CHECK(k1.public_key().verify(as_bytes(message), sig->signature));
}

TEST_CASE("each way a package fails verification is refused with its own reason") {
  ScratchDir tmp;
  const SigningKey k1 = key1(), k2 = key2();
  const TrustedKeys t1 = trusting({&k1});

  SUBCASE("not signed") {
    fs::path dir = make_package(tmp.path, "app", {});
    CHECK(refusal(dir, t1) == "not signed: no signature in signatures/ (cudaq-rt-pack or "
                              "cudaq-rt-link --sign KEY signs a package)");
  }
  SUBCASE("a flipped signature") {
    fs::path dir = make_package(tmp.path, "app", {&k1});
    std::string text = read_text(signature_path(dir, k1));
    size_t at = text.find("\"signature\": \"") + 20;
    text[at] = text[at] == '0' ? '1' : '0';
    write_file(signature_path(dir, k1), text);
    CHECK(refusal(dir, t1) == cat("bad signature: the signature by trusted key ",
                                  k1.id().short_str(),
                                  " does not verify (it was altered, or made with another key)"));
  }
  SUBCASE("a truncated signature") {
    fs::path dir = make_package(tmp.path, "app", {&k1});
    std::string text = read_text(signature_path(dir, k1));
    size_t at = text.find("\"signature\": \"") + 14;
    text.erase(at, 2);
    write_file(signature_path(dir, k1), text);
    CHECK(refusal(dir, t1).find("is malformed: signatures/" + k1.id().hex() +
                                ".json: the signature is 63 bytes, not 64") != std::string::npos);
  }
  SUBCASE("a truncated file") {
    fs::path dir = make_package(tmp.path, "app", {&k1});
    std::string text = read_text(signature_path(dir, k1));
    write_file(signature_path(dir, k1), text.substr(0, text.size() / 2));
    CHECK(refusal(dir, t1).find(".json: not a JSON object") != std::string::npos);
  }
  SUBCASE("the manifest changed after signing") {
    fs::path dir = make_package(tmp.path, "app", {&k1});
    std::string m = read_text(dir / "manifest.json");
    write_file(dir / "manifest.json", m + "\n"); // the same manifest, other bytes
    CHECK(refusal(dir, t1).starts_with("manifest changed after signing: key " +
                                       k1.id().short_str() + " signed manifest sha256:"));
  }
  SUBCASE("a signature copied from another package") {
    fs::path other = make_package(tmp.path, "other", {&k1});
    fs::path dir = make_package(tmp.path, "app", {});
    fs::create_directories(dir / signatures_dir);
    fs::copy_file(signature_path(other, k1), signature_path(dir, k1));
    CHECK(refusal(dir, t1) == cat("the signature by trusted key ", k1.id().short_str(),
                                  " is for package 'other', not 'app' (copied from another "
                                  "package)"));
  }
  SUBCASE("a signature filed under another key's name") {
    fs::path dir = make_package(tmp.path, "app", {&k2});
    fs::rename(signature_path(dir, k2), signature_path(dir, k1));
    CHECK(refusal(dir, t1).find("is malformed: signatures/" + k1.id().hex() + ".json holds key " +
                                k2.id().short_str()) != std::string::npos);
  }
  SUBCASE("a signature that is not a regular file is an error, not a pass") {
    fs::path dir = make_package(tmp.path, "app", {&k1});
    fs::remove(signature_path(dir, k1));
    fs::create_symlink("/etc/hostname", signature_path(dir, k1));
    auto pkg = Package::open(dir);
    REQUIRE(pkg);
    CHECK_FALSE(verify_package(*pkg, t1));
  }
}

TEST_CASE("sign_package adds a key's signature, and replaces its own") {
  ScratchDir tmp;
  const SigningKey k1 = key1(), k2 = key2();
  fs::path dir = make_package(tmp.path, "app", {&k1});
  REQUIRE(sign_package(dir, k2));
  CHECK(refusal(dir, trusting({&k2})) == "");
  CHECK(refusal(dir, trusting({&k1})) == "");
  // After the manifest changes, signing again makes that key's signature good again, and only
  // that key's.
  write_file(dir / "manifest.json", read_text(dir / "manifest.json") + "\n");
  REQUIRE(sign_package(dir, k2));
  CHECK(refusal(dir, trusting({&k2})) == "");
  CHECK(refusal(dir, trusting({&k1})).starts_with("manifest changed after signing"));
  size_t files = 0;
  for (const auto &e : fs::directory_iterator(dir / signatures_dir)) {
    (void)e;
    ++files;
  }
  CHECK(files == 2);
}

TEST_CASE("sign_package with trusted keys signs only a package that verifies, as it is then") {
  ScratchDir tmp;
  const SigningKey k1 = key1(), k2 = key2();
  const TrustedKeys t1 = trusting({&k1});
  fs::path dir = make_package(tmp.path, "app", {});
  Status st = sign_package(dir, k2, &t1);
  REQUIRE_FALSE(st);
  CHECK(st.error().message.starts_with("not signed: "));
  CHECK_FALSE(fs::exists(dir / signatures_dir));
  REQUIRE(sign_package(dir, k1));
  REQUIRE(sign_package(dir, k2, &t1));
  CHECK(refusal(dir, trusting({&k2})) == "");
}

TEST_CASE("a rewrite carries the signatures over; the signer's is made over the new manifest") {
  ScratchDir tmp;
  const SigningKey k1 = key1(), k2 = key2();
  fs::path dir = make_package(tmp.path, "app", {&k1, &k2});
  auto current = Package::open(dir);
  REQUIRE(current);
  Manifest next = current->manifest();
  next.created_by = "a relink";
  auto w = PackageWriter::create(dir);
  REQUIRE(w);
  for (const Digest &d : current->referenced_blobs())
    REQUIRE(w->carry_blob(*current, d));
  REQUIRE(w->carry_signatures(*current));
  REQUIRE(w->commit(next, true, {&k2}));
  CHECK(refusal(dir, trusting({&k2})) == "");
  CHECK(refusal(dir, trusting({&k1})).starts_with("manifest changed after signing"));
}

TEST_CASE("signature file names: 64 hex digits and .json, nothing else") {
  CHECK(is_signature_file_name(std::string(64, 'a') + ".json"));
  CHECK_FALSE(is_signature_file_name(std::string(64, 'A') + ".json"));
  CHECK_FALSE(is_signature_file_name(std::string(63, 'a') + ".json"));
  CHECK_FALSE(is_signature_file_name(std::string(64, 'a') + ".jsonx"));
  CHECK_FALSE(is_signature_file_name(".." + std::string(62, 'a') + ".json"));
}
