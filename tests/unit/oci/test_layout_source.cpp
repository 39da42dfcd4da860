#include "oci/layout_source.h"

#include "base/digest.h"
#include "package/oci_layout.h"
#include "scratch_dir.h"

#include <doctest/doctest.h>

#include <fstream>

using namespace cudaq_rt;
namespace fs = std::filesystem;

TEST_CASE("oci:DIR[:TAG] and oci:DIR@sha256:HEX, as skopeo spells a layout") {
  auto r = LayoutRef::parse("oci:/srv/layouts/app:1.2");
  REQUIRE(r);
  CHECK(r->dir == "/srv/layouts/app");
  CHECK(r->reference == "1.2");
  CHECK(r->name() == "oci:/srv/layouts/app:1.2");
  r = LayoutRef::parse("oci:rel/dir");
  REQUIRE(r);
  CHECK(r->dir == "rel/dir");
  CHECK(r->reference.empty());
  CHECK(r->name() == "oci:rel/dir");
  r = LayoutRef::parse("oci:a:b/c"); // a ':' in a directory's name, no tag
  REQUIRE(r);
  CHECK(r->dir == "a:b/c");
  const std::string hex(64, 'e');
  r = LayoutRef::parse("oci:dir@sha256:" + hex);
  REQUIRE(r);
  CHECK(r->reference == "sha256:" + hex);
  CHECK(r->name() == "oci:dir@sha256:" + hex);
  for (const char *bad : {"oci:", "oci::tag", "oci:dir:", "oci:dir@sha256:12", "dir"}) {
    CAPTURE(bad);
    CHECK_FALSE(LayoutRef::parse(bad));
  }
  CHECK(is_layout_reference("oci:dir"));
  CHECK_FALSE(is_layout_reference("oci://host/repo:1"));
  CHECK_FALSE(is_layout_reference("dir"));
}

TEST_CASE("a layout's image by tag, by digest or as the only one; its blobs checked") {
  ScratchDir dir;
  const fs::path blobs = dir.path / "blobs" / "sha256";
  fs::create_directories(blobs);
  auto put = [&](const std::string &bytes) {
    const Digest d = sha256(bytes);
    std::ofstream(blobs / d.hex(), std::ios::binary) << bytes;
    return d;
  };
  const std::string m1 = R"({"schemaVersion":2,"note":"one"})";
  const std::string m2 = R"({"schemaVersion":2,"note":"two"})";
  const Digest d1 = put(m1), d2 = put(m2);
  auto descriptor = [](const Digest &d, size_t size, const char *tag) {
    return cat(R"({"mediaType":")", oci_image_manifest_media_type, R"(","digest":")", d.str(),
               R"(","size":)", size, R"(,"annotations":{")", oci_ref_name_annotation, R"(":")", tag,
               R"("}})");
  };
  std::ofstream(dir.path / "oci-layout") << oci_layout_text;
  std::ofstream(dir.path / "index.json")
      << cat(R"({"schemaVersion":2,"manifests":[)", descriptor(d1, m1.size(), "1"), ",",
             descriptor(d2, m2.size(), "2"), "]}");
  CHECK(is_foreign_layout(dir.path));
  auto source = LayoutSource::open(LayoutRef{dir.path, "2"});
  REQUIRE(source);
  auto got = (*source)->get_manifest("2");
  REQUIRE(got);
  CHECK(got->bytes == m2);
  CHECK(got->digest == d2);
  got = (*source)->get_manifest(d1.str());
  REQUIRE(got);
  CHECK(got->bytes == m1);
  got = (*source)->get_manifest("");
  REQUIRE_FALSE(got);
  CHECK(got.error().str() == "'" + (dir.path / "index.json").string() +
                                 "': holds 2 images (1, 2): name one, oci:DIR:TAG");
  CHECK((*source)->get_manifest("3").error().str() ==
        "'" + (dir.path / "index.json").string() + "': has no image '3'");
  // A blob whose bytes are not its digest's, or of another size than its descriptor says.
  std::ofstream(blobs / d2.hex(), std::ios::binary) << R"({"schemaVersion":2,"note":"TWO"})";
  auto bad = (*source)->get_blob(d2, m2.size());
  REQUIRE_FALSE(bad);
  CHECK(bad.error().message.starts_with("does not match its digest"));
  bad = (*source)->get_blob(d1, m1.size() + 1);
  REQUIRE_FALSE(bad);
  CHECK(bad.error().message.find("but its descriptor says") != std::string::npos);
  bad = (*source)->get_blob(d1, ImageSource::max_blob_bytes + 1);
  REQUIRE_FALSE(bad);
  CHECK(bad.error().message.ends_with("refused"));
  // A directory without the oci-layout marker is not a layout.
  fs::remove(dir.path / "oci-layout");
  CHECK_FALSE(is_foreign_layout(dir.path));
  CHECK(LayoutSource::open(LayoutRef{dir.path, ""}).error().message ==
        "not an OCI image layout: no oci-layout file");
}
