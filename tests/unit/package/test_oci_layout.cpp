#include "package/oci_layout.h"

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

using namespace cudaq_rt;

namespace {

Manifest linked_manifest() {
  Manifest m;
  m.name = "app";
  ContainerRecord c;
  c.digest = sha256(std::string_view("container"));
  c.size = 9;
  c.role = Role::bridge;
  c.bridge = "udp";
  m.containers.push_back(c);
  for (const char *arch : {"sm_90", "sm_80"}) {
    LinkRecord l;
    l.arch = *parse_arch(arch);
    l.dispatcher = "builtin";
    l.bridge = "loopback";
    l.lto = LtoMode::whole;
    l.cubin = sha256(std::string_view(arch));
    l.cubin_size = 5;
    m.links.push_back(l);
  }
  return m;
}

const std::string text = "{\"name\":\"app\"}\n";

} // namespace

TEST_CASE("the image manifest names the config, every blob once, and the signatures") {
  Manifest m = linked_manifest();
  m.links.push_back(m.links[0]); // a second record of the same cubin is not a second layer
  m.links.back().dispatcher = "warp";
  const std::string sig = "{\"signature\":1}";
  const std::string key(64, 'a');
  OciImageManifest im = package_image_manifest(m, text, {{key + ".json", sig}});
  CHECK(im.artifact_type == package_artifact_type);
  CHECK(im.config.digest == sha256(text));
  CHECK(im.config.size == text.size());
  REQUIRE(im.layers.size() == 4);
  CHECK(im.layers[0].media_type == container_layer_media_type);
  CHECK(im.layers[0].annotations.at("io.cudaq-rt.role") == "bridge");
  CHECK(im.layers[0].annotations.at("io.cudaq-rt.bridge") == "udp");
  CHECK(im.layers[1].media_type == cubin_layer_media_type);
  CHECK(im.layers[1].annotations.at("io.cudaq-rt.arch") == "sm_90");
  CHECK(im.layers[1].annotations.at("io.cudaq-rt.dispatcher") == "builtin");
  CHECK(im.layers[1].annotations.at("io.cudaq-rt.mode") == "whole");
  CHECK(im.layers[2].annotations.at("io.cudaq-rt.arch") == "sm_80");
  CHECK(im.layers[3].media_type == signature_layer_media_type);
  CHECK(im.layers[3].digest == sha256(sig));
  CHECK(signature_layer_file_name(im.layers[3]) == key + ".json");
  CHECK(signature_layer_file_name(im.layers[1]).empty());
}

TEST_CASE("the image manifest's text is stable and parses back") {
  const Manifest m = linked_manifest();
  const std::string a = package_image_manifest(m, text, {}).to_json_text();
  CHECK(a == package_image_manifest(m, text, {}).to_json_text());
  auto back = OciImageManifest::parse(a, "im");
  REQUIRE(back);
  CHECK(back->to_json_text() == a);
  // Another config, another manifest.
  CHECK(package_image_manifest(m, text + " ", {}).to_json_text() != a);
}

TEST_CASE("what is not a package's image manifest is refused, saying why") {
  const Manifest m = linked_manifest();
  auto j = nlohmann::json::parse(package_image_manifest(m, text, {}).to_json_text());
  auto refused = [](const nlohmann::json &doc) {
    auto r = OciImageManifest::parse(doc.dump(), "im");
    REQUIRE_FALSE(r);
    return r.error().str();
  };
  auto other = j;
  other["config"]["mediaType"] = "application/vnd.oci.image.config.v1+json";
  CHECK(refused(other).find("not a cudaq-rt package: its config's media type") !=
        std::string::npos);
  other = j;
  other["artifactType"] = "application/x-other";
  CHECK(refused(other).find("its artifactType is") != std::string::npos);
  other = j;
  other["schemaVersion"] = 1;
  CHECK(refused(other).find("schemaVersion is not 2") != std::string::npos);
  other = j;
  other["layers"][0]["digest"] = "sha256:xyz";
  CHECK(refused(other).find("layer 0's digest") != std::string::npos);
  other = j;
  other["layers"][1].erase("size");
  CHECK(refused(other).find("layer 1 lacks mediaType, digest or size") != std::string::npos);
  CHECK_FALSE(OciImageManifest::parse("not json", "im"));
}

TEST_CASE("index.json names the image manifest, exactly one") {
  const std::string im = package_image_manifest(linked_manifest(), text, {}).to_json_text();
  const std::string index = layout_index_text(im);
  auto d = parse_layout_index(index, "index.json");
  REQUIRE(d);
  CHECK(d->digest == sha256(im));
  CHECK(d->size == im.size());
  CHECK(d->annotations.at("org.opencontainers.image.ref.name") == "latest");
  auto two = nlohmann::json::parse(index);
  two["manifests"].push_back(two["manifests"][0]);
  auto r = parse_layout_index(two.dump(), "index.json");
  REQUIRE_FALSE(r);
  CHECK(r.error().str().find("names 2 manifests") != std::string::npos);
}
