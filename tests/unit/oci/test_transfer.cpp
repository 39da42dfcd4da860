// pull_package from image sources without a registry: a source over blobs held in memory (the
// registry's HTTP is tested in test_registry.cpp and tests/integration/test_oci.py), and a
// LayoutSource over a package's own directory. The package pulled is a recording
// (interpose/link_recording.h): a real package, one blob stored compressed, one as it is.
#include "oci/transfer.h"

#include "interpose/link_recording.h"
#include "oci/layout_source.h"
#include "package/oci_layout.h"
#include "scratch_dir.h"
#include "signing_keys.h"
#include "unit_files.h"

#include <doctest/doctest.h>
#include <nvJitLink.h>

#include <map>

using namespace cudaq_rt;
namespace fs = std::filesystem;

namespace {

// An image in memory: its manifest and every blob by digest, handed out as the interface says a
// source must (exactly `size` bytes that match the digest, or an error).
class MemorySource final : public ImageSource {
public:
  std::string image;
  std::map<Digest, std::string> blobs;

  std::string name() const override { return "memory:app"; }
  std::string manifest_reference() const override { return "1"; }
  Expected<FetchedManifest> get_manifest(const std::string &) override {
    return FetchedManifest{image, sha256(image), oci_image_manifest_media_type};
  }
  Expected<std::string> get_blob(const Digest &d, uint64_t size) override {
    auto it = blobs.find(d);
    if (it == blobs.end())
      return make_error("", name(), ": no blob ", d.short_str());
    if (it->second.size() != size || sha256(it->second) != d)
      return make_error("", name(), ": blob ", d.short_str(), " does not match its digest");
    return it->second;
  }
  OciImageManifest parsed() const { return *OciImageManifest::parse(image, name()); }
  void set(const OciImageManifest &im) { image = im.to_json_text(); }
};

// A recording of two inputs (the first large and compressible, so stored compressed), signed by
// `signer` where one is given; its directory.
fs::path recording(const fs::path &dir, const SigningKey *signer = nullptr) {
  const std::vector<std::string> blobs = {std::string(8192, 'a'), "a small input"};
  LinkRecipe r;
  r.options = {"-arch=sm_80", "-lto"};
  r.inputs = {{NVJITLINK_INPUT_FATBIN, "big.fatbin", sha256(blobs[0]), blobs[0].size()},
              {NVJITLINK_INPUT_LTOIR, "small.ltoir", sha256(blobs[1]), blobs[1].size()}};
  r.output = "cubin";
  r.arch = "sm_80";
  r.program = "/usr/bin/app";
  r.nvjitlink_version = "13.0";
  r.cache_key = sha256(std::string_view("key"));
  REQUIRE(write_recording(dir, r, blobs, signer));
  return dir / (recording_name("app", r.cache_key) + package_suffix);
}

// The image a package's directory holds, read through a LayoutSource into memory.
MemorySource in_memory(const fs::path &package) {
  auto layout = LayoutSource::open(LayoutRef{package, ""});
  REQUIRE(layout);
  auto fetched = (*layout)->get_manifest("");
  REQUIRE(fetched);
  MemorySource m;
  m.image = fetched->bytes;
  const OciImageManifest im = m.parsed();
  for (const OciDescriptor &d : im.layers)
    m.blobs[d.digest] = *(*layout)->get_blob(d.digest, d.size);
  m.blobs[im.config.digest] = *(*layout)->get_blob(im.config.digest, im.config.size);
  return m;
}

SigningKey key(const char *pem) {
  auto k = SigningKey::from_pem(pem, "test key");
  REQUIRE(k);
  return std::move(*k);
}

// Refused, and nothing written: not even the output directory.
void check_refused(MemorySource &source, const fs::path &out, const std::string &message) {
  auto pulled = pull_package(source, out, false);
  REQUIRE_FALSE(pulled);
  CHECK(pulled.error().str() == message);
  CHECK_FALSE(fs::exists(out));
}

} // namespace

TEST_CASE("a pull writes the package the source holds, which Package::open reads as it was") {
  ScratchDir dir;
  const SigningKey k1 = key(test_keys::rfc8032_1_private);
  auto original = Package::open(recording(dir.path / "src", &k1));
  REQUIRE(original);
  REQUIRE_FALSE(original->manifest().stored.empty()); // the large input is kept compressed
  MemorySource source = in_memory(original->dir());
  auto pulled = pull_package(source, dir.path / "out", false);
  REQUIRE_MESSAGE(pulled, (pulled ? "" : pulled.error().str()));
  CHECK(pulled->dir == dir.path / "out" / original->dir().filename());
  CHECK(pulled->manifest == sha256(source.image));
  CHECK(pulled->blobs == 1 + source.parsed().layers.size());
  CHECK_FALSE(pulled->verified_by);
  auto copy = Package::open(pulled->dir);
  REQUIRE_MESSAGE(copy, (copy ? "" : copy.error().str()));
  CHECK(copy->manifest_text() == original->manifest_text());
  CHECK(*copy->signature_files() == *original->signature_files());
  for (const RecipeInput &in : original->manifest().recipe->inputs)
    CHECK(*copy->read_blob(in.digest) == *original->read_blob(in.digest));
  // A package there is replaced only when asked to.
  auto again = pull_package(source, dir.path / "out", false);
  REQUIRE_FALSE(again);
  CHECK(again.error().str() ==
        "'" + pulled->dir.string() + "': already exists (use --force to replace it)");
  CHECK(pull_package(source, dir.path / "out", true));
}

TEST_CASE("a package's directory is an OCI layout, and a LayoutSource over it a pull's source") {
  ScratchDir dir;
  auto original = Package::open(recording(dir.path / "src"));
  REQUIRE(original);
  CHECK_FALSE(is_foreign_layout(original->dir()));
  auto layout = LayoutSource::open(LayoutRef{original->dir(), layout_tag});
  REQUIRE(layout);
  auto pulled = pull_package(**layout, dir.path / "out", false);
  REQUIRE_MESSAGE(pulled, (pulled ? "" : pulled.error().str()));
  auto copy = Package::open(pulled->dir);
  REQUIRE(copy);
  CHECK(copy->manifest_text() == original->manifest_text());
}

TEST_CASE("an image manifest that does not carry exactly the package's blobs is refused") {
  ScratchDir dir;
  MemorySource source = in_memory(recording(dir.path / "src"));
  const fs::path out = dir.path / "out";
  const OciImageManifest im = source.parsed();
  REQUIRE(im.layers.size() == 2);
  const OciDescriptor layer = im.layers[1];

  SUBCASE("a layer the manifest does not name") {
    OciImageManifest bad = im;
    const std::string stray = "stray";
    bad.layers.push_back({layer.media_type, sha256(stray), stray.size(), {}});
    source.blobs[sha256(stray)] = stray;
    source.set(bad);
    check_refused(source, out,
                  cat("memory:app: layer ", sha256(stray).short_str(), " ('", layer.media_type,
                      "') is not a blob the package's manifest names"));
  }
  SUBCASE("a layer of another size than the manifest records") {
    OciImageManifest bad = im;
    bad.layers[1].size += 1;
    source.set(bad);
    check_refused(source, out,
                  cat("memory:app: layer ", layer.digest.short_str(), " is ", layer.size + 1,
                      " bytes by its descriptor, ", layer.size, " by the package's manifest"));
  }
  SUBCASE("a blob the manifest names that no layer carries") {
    OciImageManifest bad = im;
    bad.layers.pop_back();
    source.set(bad);
    check_refused(source, out,
                  cat("memory:app: the package's manifest names blob ", layer.digest.short_str(),
                      ", which the image manifest does not carry"));
  }
  SUBCASE("more signature layers than a package may have") {
    OciImageManifest bad = im;
    for (size_t i = 0; i <= max_signature_files; ++i)
      bad.layers.push_back({signature_layer_media_type, sha256(cat(i)), 10, {}});
    source.set(bad);
    check_refused(source, out,
                  cat("memory:app: ", max_signature_files + 1, " signature layers, more than the ",
                      max_signature_files, " a package may have: refused"));
  }
}

TEST_CASE("a compressed blob recorded as larger than one may hold is refused before any fetch") {
  ScratchDir dir;
  MemorySource source = in_memory(recording(dir.path / "src"));
  OciImageManifest im = source.parsed();
  auto m = Manifest::parse(source.blobs.at(im.config.digest), "config");
  REQUIRE(m);
  REQUIRE(m->stored.size() == 1);
  RecipeInput &big = m->recipe->inputs[0];
  REQUIRE(big.digest == m->stored[0].digest);
  big.size = max_compressed_blob_bytes + 1;
  const std::string config = m->to_json_text();
  im.config.digest = sha256(config);
  im.config.size = config.size();
  source.blobs[im.config.digest] = config;
  source.set(im);
  check_refused(source, dir.path / "out",
                cat("memory:app: blob ", big.digest.short_str(), " is recorded as ",
                    max_compressed_blob_bytes + 1, " bytes, more than a compressed blob may hold (",
                    max_compressed_blob_bytes, "): refused"));
}

TEST_CASE("a blob the source cannot hand out stops the pull: nothing is left but the lock") {
  ScratchDir dir;
  MemorySource source = in_memory(recording(dir.path / "src"));
  const OciDescriptor layer = source.parsed().layers[1];
  source.blobs[layer.digest][0] ^= 1;
  auto pulled = pull_package(source, dir.path / "out", false);
  REQUIRE_FALSE(pulled);
  CHECK(pulled.error().str() ==
        cat("memory:app: blob ", layer.digest.short_str(), " does not match its digest"));
  const std::vector<std::string> left = unit_files::entries(dir.path / "out");
  REQUIRE(left.size() == 1);
  CHECK(left[0].ends_with(".cudaqpkg.lock"));
}

TEST_CASE("with trusted keys, a package no trusted key signed is refused before it is written") {
  ScratchDir dir;
  const SigningKey k1 = key(test_keys::rfc8032_1_private);
  const SigningKey k2 = key(test_keys::rfc8032_2_private);
  TrustedKeys trusting_k1;
  trusting_k1.add(k1.public_key());
  const fs::path out = dir.path / "out";
  const std::pair<const SigningKey *, std::string> refused[] = {
      {nullptr, "'memory:app': not signed"},
      {&k2, "'memory:app': signed only by keys that are not trusted"}};
  for (const auto &case_ : refused) {
    const std::string &why = case_.second;
    CAPTURE(why);
    ScratchDir src;
    MemorySource source = in_memory(recording(src.path, case_.first));
    auto pulled = pull_package(source, out, false, nullptr, &trusting_k1);
    REQUIRE_FALSE(pulled);
    CHECK(pulled.error().str().starts_with(why));
    for (const std::string &name : unit_files::entries(out))
      CHECK(name.ends_with(".cudaqpkg.lock"));
  }
  MemorySource signed_by_k1 = in_memory(recording(dir.path / "src", &k1));
  auto pulled = pull_package(signed_by_k1, out, false, nullptr, &trusting_k1);
  REQUIRE_MESSAGE(pulled, (pulled ? "" : pulled.error().str()));
  REQUIRE(pulled->verified_by);
  CHECK(*pulled->verified_by == k1.id());
  CHECK(Package::open(pulled->dir));
}
