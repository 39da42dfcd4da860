#include "package/manifest.h"

#include <algorithm>
#include <doctest/doctest.h>
#include <functional>
#include <nlohmann/json.hpp>
#include <set>

using namespace cudaq_rt;
using nlohmann::json;

namespace {

Digest d(const char *s) {
  return sha256(std::string_view(s));
}

// A manifest with every field set to something other than its default.
Manifest full_manifest() {
  Manifest m;
  m.name = "app-1.2_x";
  m.created_by = "cudaq-rt-pack 0.1.0";
  m.sources = {{"/abs/app", "executable", 12345, d("app")},
               {"/abs/libbridge.a", "archive", 999, d("bridge")}};
  ContainerRecord c;
  c.digest = d("container0");
  c.size = 4984;
  c.role = Role::bridge;
  c.bridge = "udp";
  c.origins = {{1, "hooks.o", 0x1378, 1}, {0, "", 0, 0}};
  EntryRecord e;
  e.kind = "ltoir";
  e.kind_code = 8;
  e.arch = 90;
  e.version_major = 13;
  e.version_minor = 4;
  e.flags = 0x18011;
  e.compression = "zstd";
  e.payload_size = 2296;
  e.compressed_size = 2295;
  e.uncompressed_size = 7000;
  e.options = "-ftz=0";
  e.name = "lto";
  EntryRecord e2;
  e2.kind = "kind-77";
  e2.kind_code = 77;
  e2.compression = "none";
  c.entries = {e, e2};
  ContainerRecord c2;
  c2.digest = d("container1");
  c2.size = 16;
  c2.role = Role::dispatcher;
  c2.added_by = "cudaq-rt-link";
  m.containers = {c, c2};
  m.exports = {
      {"add_one", "handler", 0xdeadbeefu, "cudaq_rt_handler__add_one", Role::application, {0, 1}}};
  LinkRecord l;
  l.arch = TargetArch{90, 'a'};
  l.bridge = "udp";
  l.dispatcher = "builtin";
  l.lto = LtoMode::whole;
  l.options = {"-arch=sm_90a", "-lto"};
  l.nvjitlink_version = "13.0";
  l.inputs = {d("container1"), d("container0")};
  l.cubin = d("cubin");
  l.cubin_size = 5000;
  l.cache_key = d("key");
  l.created = "2025-01-01T00:00:00Z";
  l.link_ms = 12.5;
  m.links = {l};
  return m;
}

std::string error_of(const std::string &text) {
  auto m = Manifest::parse(text, "m.json");
  return m ? "" : m.error().str();
}

// full_manifest() as JSON, changed by `edit`, then parsed.
template <class F> std::string error_after(F edit) {
  json j = full_manifest().to_json();
  edit(j);
  return error_of(j.dump());
}

} // namespace

TEST_CASE("a manifest survives to_json_text and parse unchanged") {
  Manifest m = full_manifest();
  std::string text = m.to_json_text();
  CHECK(text.back() == '\n');
  auto back = Manifest::parse(text, "m.json");
  REQUIRE(back);
  CHECK(back->to_json_text() == text);
  CHECK(back->format_version() == manifest_plain_format_version);
  CHECK(back->name == "app-1.2_x");
  CHECK(back->created_by == "cudaq-rt-pack 0.1.0");
  REQUIRE(back->sources.size() == 2);
  CHECK(back->sources[1].path == "/abs/libbridge.a");
  CHECK(back->sources[1].kind == "archive");
  CHECK(back->sources[1].size == 999);
  CHECK(back->sources[1].digest == d("bridge"));
  REQUIRE(back->containers.size() == 2);
  const ContainerRecord &c = back->containers[0];
  CHECK(c.digest == d("container0"));
  CHECK(c.size == 4984);
  CHECK(c.role == Role::bridge);
  CHECK(c.bridge == "udp");
  REQUIRE(c.origins.size() == 2);
  CHECK(c.origins[0].source == 1);
  CHECK(c.origins[0].member == "hooks.o");
  CHECK(c.origins[0].offset == 0x1378);
  CHECK(c.origins[0].index == 1);
  CHECK(c.origins[1].member.empty());
  REQUIRE(c.entries.size() == 2);
  CHECK(c.entries[0].kind == "ltoir");
  CHECK(c.entries[0].kind_code == 8);
  CHECK(c.entries[0].arch == 90);
  CHECK(c.entries[0].version_major == 13);
  CHECK(c.entries[0].version_minor == 4);
  CHECK(c.entries[0].flags == 0x18011);
  CHECK(c.entries[0].compression == "zstd");
  CHECK(c.entries[0].payload_size == 2296);
  CHECK(c.entries[0].compressed_size == 2295);
  CHECK(c.entries[0].uncompressed_size == 7000);
  CHECK(c.entries[0].options == "-ftz=0");
  CHECK(c.entries[0].name == "lto");
  CHECK(c.entries[1].kind_code == 77);
  CHECK(back->containers[1].role == Role::dispatcher);
  CHECK(back->containers[1].bridge.empty());
  CHECK(back->containers[0].packed());
  CHECK(back->containers[1].added_by == "cudaq-rt-link");
  CHECK_FALSE(back->containers[1].packed());
  REQUIRE(back->exports.size() == 1);
  CHECK(back->exports[0].function_id == 0xdeadbeefu);
  CHECK(back->exports[0].symbol == "cudaq_rt_handler__add_one");
  CHECK(back->exports[0].sources == std::vector<size_t>{0, 1});
  REQUIRE(back->links.size() == 1);
  const LinkRecord &l = back->links[0];
  CHECK(l.arch.str() == "sm_90a");
  CHECK(l.options == std::vector<std::string>{"-arch=sm_90a", "-lto"});
  CHECK(l.inputs == std::vector<Digest>{d("container1"), d("container0")});
  CHECK(l.cubin == d("cubin"));
  CHECK(l.cubin_size == 5000);
  CHECK(l.cache_key == d("key"));
  CHECK(l.created == "2025-01-01T00:00:00Z");
  CHECK(l.link_ms == 12.5);
  CHECK(back->find_container(d("container1")) == &back->containers[1]);
  CHECK(back->find_container(d("nope")) == nullptr);
}

TEST_CASE("the JSON carries the media type and leaves out empty optional fields") {
  json j = full_manifest().to_json();
  CHECK(j["media_type"] == manifest_media_type);
  CHECK(j["containers"][1].contains("bridge") == false);
  CHECK(j["containers"][0].contains("added_by") == false);
  CHECK(j["containers"][0]["origins"][1].contains("member") == false);
  CHECK(j["containers"][0]["entries"][1].contains("options") == false);
  CHECK(j["containers"][0]["entries"][0]["version"] == json::array({13, 4}));
}

TEST_CASE("container helpers") {
  ContainerRecord c = full_manifest().containers[0];
  CHECK(c.has_ltoir());
  c.entries = {c.entries[1]};
  CHECK_FALSE(c.has_ltoir());
}

TEST_CASE("package names") {
  CHECK(valid_package_name("app"));
  CHECK(valid_package_name("App-1.2_x"));
  CHECK_FALSE(valid_package_name(""));
  CHECK_FALSE(valid_package_name(".hidden"));
  CHECK_FALSE(valid_package_name(".."));
  CHECK_FALSE(valid_package_name("a/b"));
  CHECK_FALSE(valid_package_name("a b"));
  CHECK_FALSE(valid_package_name(std::string(201, 'a')));
  CHECK(valid_package_name(std::string(200, 'a')));
}

TEST_CASE("parse errors name the field") {
  CHECK(error_of("{") == "'m.json': not valid JSON");
  CHECK(error_of("") == "'m.json': not valid JSON");
  CHECK(error_of("[1]") == "'m.json': manifest: expected an object");
  CHECK(error_after([](json &j) { j.erase("format_version"); }) ==
        "'m.json': manifest: missing \"format_version\"");
  CHECK(error_after([](json &j) { j["format_version"] = 3; }) ==
        "'m.json': format_version 3 is not supported (this cudaq-rt reads 1 to 2)");
  CHECK(error_after([](json &j) { j["format_version"] = 0; }) ==
        "'m.json': format_version 0 is not supported (this cudaq-rt reads 1 to 2)");
  CHECK(error_after([](json &j) { j["format_version"] = "1"; }) ==
        "'m.json': manifest.format_version: expected a non-negative integer");
  CHECK(error_after([](json &j) { j["format_version"] = -1; }) ==
        "'m.json': manifest.format_version: expected a non-negative integer");
  CHECK(error_after([](json &j) { j.erase("media_type"); }) ==
        "'m.json': manifest: missing \"media_type\"");
  CHECK(error_after([](json &j) { j["media_type"] = "application/json"; }) ==
        "'m.json': manifest.media_type: 'application/json' is not "
        "application/vnd.cudaq-rt.manifest.v1+json");
  CHECK(error_after([](json &j) { j["name"] = "../evil"; }) ==
        "'m.json': name '../evil' is not a valid package name");
  CHECK(error_after([](json &j) { j["name"] = 5; }) ==
        "'m.json': manifest.name: expected a string");
  CHECK(error_after([](json &j) { j.erase("created_by"); }) ==
        "'m.json': manifest: missing \"created_by\"");
  CHECK(error_after([](json &j) { j["sources"] = json::object(); }) ==
        "'m.json': manifest.sources: expected an array");
  CHECK(error_after([](json &j) { j["sources"][1] = 7; }) ==
        "'m.json': sources[1]: missing \"path\"");
  CHECK(error_after([](json &j) { j["sources"][0]["size"] = 1.5; }) ==
        "'m.json': sources[0].size: expected a non-negative integer");
  CHECK(error_after([](json &j) { j["sources"][0]["digest"] = "sha256:abc"; }) ==
        "'m.json': sources[0].digest: 'sha256:abc' is not a sha256:<64 hex> digest");
  CHECK(error_after([](json &j) { j["containers"][0]["digest"] = 3; }) ==
        "'m.json': containers[0].digest: expected a digest string");
  CHECK(error_after([](json &j) { j["containers"][1]["digest"] = "sha256:../../../etc/passwd"; }) ==
        "'m.json': containers[1].digest: 'sha256:../../../etc/passwd' is not a "
        "sha256:<64 hex> digest");
  CHECK(error_after([](json &j) { j["containers"][0]["role"] = "driver"; }) ==
        "'m.json': containers[0].role: unknown role 'driver'");
  CHECK(error_after([](json &j) { j["containers"][1]["added_by"] = "me"; }) ==
        "'m.json': containers[1].added_by: unknown producer 'me'");
  CHECK(error_after([](json &j) { j["containers"][0].erase("bridge"); }) ==
        "'m.json': containers[0]: missing \"bridge\"");
  CHECK(error_after([](json &j) { j["containers"][0]["origins"][0]["source"] = 2; }) ==
        "'m.json': containers[0].origins[0].source: not an index into sources");
  CHECK(error_after([](json &j) { j["containers"][0]["origins"][1]["source"] = -1; }) ==
        "'m.json': containers[0].origins[1].source: not an index into sources");
  CHECK(error_after([](json &j) { j["containers"][0]["origins"][0]["member"] = 1; }) ==
        "'m.json': containers[0].origins[0].member: expected a string");
  CHECK(error_after([](json &j) { j["containers"][0]["entries"][1]["version"] = {1}; }) ==
        "'m.json': containers[0].entries[1].version: expected [major, minor]");
  CHECK(error_after([](json &j) { j["containers"][0]["entries"][0].erase("arch"); }) ==
        "'m.json': containers[0].entries[0]: missing \"arch\"");
  CHECK(error_after([](json &j) {
          j["exports"][0]["sources"] = {0, 5};
        }) == "'m.json': exports[0].sources: not an index into sources");
  CHECK(error_after([](json &j) { j["exports"][0]["name"] = "../../escaped"; }) ==
        "'m.json': exports[0].name: '../../escaped' is not a C identifier");
  CHECK(error_after([](json &j) { j["exports"][0]["role"] = 1; }) ==
        "'m.json': exports[0].role: expected a string");
  CHECK(error_after([](json &j) {
          j["links"][0]["options"] = {"-lto", 3};
        }) == "'m.json': links[0].options: expected strings");
  CHECK(error_after([](json &j) { j["links"][0]["inputs"][1] = "md5:00"; }) ==
        "'m.json': links[0].inputs[1]: 'md5:00' is not a sha256:<64 hex> digest");
  CHECK(error_after([](json &j) { j["links"][0]["cubin"].erase("size"); }) ==
        "'m.json': links[0].cubin: missing \"size\"");
  CHECK(error_after([](json &j) { j["links"][0]["cubin"] = "x"; }) ==
        "'m.json': links[0].cubin: missing \"digest\"");
  CHECK(error_after([](json &j) { j["links"][0]["link_ms"] = "fast"; }) ==
        "'m.json': links[0].link_ms: expected a number");
  CHECK(error_after([](json &j) { j.erase("links"); }) == "'m.json': manifest: missing \"links\"");
}

TEST_CASE("what JSON and the digests leave open is refused") {
  // A duplicate key, at the top and deep inside: nlohmann would keep the last silently.
  std::string text = full_manifest().to_json().dump();
  std::string twice = "{\"name\":\"other\"," + text.substr(1);
  CHECK(error_of(twice) == "'m.json': key 'name' appears twice in one object");
  std::string size = "\"size\":4984";
  REQUIRE(text.find(size) != std::string::npos);
  std::string deep = text;
  deep.replace(deep.find(size), size.size(), size + ",\"size\":16");
  CHECK(error_of(deep) == "'m.json': key 'size' appears twice in one object");
  // The same key in different objects is fine.
  CHECK(Manifest::parse(text, "m.json"));
  // Two records of one container.
  CHECK(error_after([](json &j) { j["containers"][1]["digest"] = j["containers"][0]["digest"]; }) ==
        "'m.json': containers[1].digest: " + d("container0").str() +
            " is also containers[0]'s: one record per container");
}

TEST_CASE("parse never throws, whatever the JSON") {
  json base = full_manifest().to_json();
  const json odd[] = {nullptr,
                      true,
                      -1,
                      1.5,
                      1e300,
                      "",
                      json::array(),
                      json::object(),
                      json::array({nullptr}),
                      18446744073709551615ull};
  // Replace every value in the manifest, one at a time, with each odd value.
  std::vector<json::json_pointer> paths;
  json flat = base.flatten();
  for (auto &[key, _] : flat.items())
    for (json::json_pointer p(key); !p.empty(); p = p.parent_pointer())
      paths.push_back(p);
  size_t rejected = 0;
  for (const auto &p : paths)
    for (const json &v : odd) {
      json j = base;
      j[p] = v;
      CHECK_NOTHROW({
        auto m = Manifest::parse(j.dump(), "m.json");
        rejected += !m;
      });
    }
  CHECK(rejected > paths.size()); // most replacements are errors, and none of them threw
  CHECK_NOTHROW((void)Manifest::parse(std::string("\xff\xfe{", 3), "m.json"));
  CHECK_NOTHROW((void)Manifest::parse(std::string(100000, '['), "m.json"));
}

TEST_CASE("bytes that are not UTF-8 (from a fatbin's options or a file name) do not throw") {
  Manifest m = full_manifest();
  m.containers[0].entries[0].options = "-O3 \xff\xfe";
  m.sources[0].path = "/abs/caf\xe9";
  std::string text;
  CHECK_NOTHROW(text = m.to_json_text());
  auto back = Manifest::parse(text, "m.json");
  REQUIRE(back);
  CHECK(back->sources[0].path == "/abs/caf\xef\xbf\xbd"); // U+FFFD
  CHECK(back->containers[0].entries[0].options == "-O3 \xef\xbf\xbd\xef\xbf\xbd");
}

TEST_CASE("stored forms: format 2, in digest order, each blob's once, parsed back and refused") {
  Manifest m = full_manifest();
  CHECK(m.find_stored(d("cubin")) == nullptr);
  m.stored = {{d("container0"), BlobEncoding::zstd, d("z0"), 1200},
              {d("cubin"), BlobEncoding::zstd, d("zc"), 1300}};
  std::sort(m.stored.begin(), m.stored.end(),
            [](const StoredBlob &a, const StoredBlob &b) { return a.digest < b.digest; });
  CHECK(m.format_version() == manifest_format_version);
  auto back = Manifest::parse(m.to_json_text(), "m.json");
  REQUIRE(back);
  CHECK(back->to_json().at("format_version") == 2);
  CHECK(back->to_json_text() == m.to_json_text());
  REQUIRE(back->find_stored(d("cubin")));
  CHECK(back->find_stored(d("cubin"))->stored_digest == d("zc"));
  CHECK(back->find_stored(d("container1")) == nullptr);
  const auto disk = back->blobs_on_disk();
  CHECK(disk.at(d("cubin")).digest == d("zc"));
  CHECK(disk.at(d("cubin")).size == 1300);
  CHECK(disk.at(d("cubin")).stored != nullptr);
  CHECK(disk.at(d("container1")).digest == d("container1"));
  CHECK(disk.at(d("container1")).stored == nullptr);

  const json good = m.to_json();
  auto refused = [&](auto edit) {
    json j = good;
    edit(j);
    return error_of(j.dump());
  };
  CHECK(refused([](json &j) { j["format_version"] = 1; }) ==
        "'m.json': stored: needs format_version 2, not 1");
  CHECK(refused([](json &j) { j["stored"][0]["encoding"] = "gzip"; }) ==
        "'m.json': stored[0].encoding: 'gzip' is not zstd");
  CHECK(refused([](json &j) { j["stored"][1]["digest"] = d("nothing").str(); })
            .starts_with("'m.json': stored[1].digest: " + d("nothing").str() +
                         " is not a blob the manifest names"));
  CHECK(refused([](json &j) { std::swap(j["stored"][0], j["stored"][1]); }) ==
        "'m.json': stored[1].digest: not after stored[0]'s (one entry per blob, in digest order)");
  CHECK(refused([](json &j) { j["stored"][1]["stored_digest"] = d("container1").str(); }) ==
        "'m.json': stored[1].stored_digest: " + d("container1").str() +
            " is also another blob's name: each file in blobs/ is one blob");
  CHECK(refused([](json &j) { j["stored"][0]["stored_size"] = 0; }) ==
        "'m.json': stored[0].stored_size: 0 is no zstd frame");
}

TEST_CASE("every key manifest.schema.json requires is refused when missing, at every level") {
  // The keys the schema lets a manifest leave out, and those it requires only of some objects
  // (a bridge container's "bridge", an unknown entry kind's "kind_code", a handler's "symbol" and
  // an export's "function_id"): every other key of a full manifest is required wherever it is.
  static const std::set<std::string> optional = {"aliases",  "recipe",     "stored",
                                                 "member",   "name",       "options",
                                                 "added_by", "concurrent", "direct"};
  static const std::set<std::string> conditional = {"bridge", "kind_code", "symbol", "function_id"};
  const json full = full_manifest().to_json();
  size_t checked = 0;
  std::function<void(const json::json_pointer &)> sweep = [&](const json::json_pointer &at) {
    const json &here = full.at(at);
    if (here.is_array())
      for (size_t i = 0; i < here.size(); ++i)
        sweep(at / i);
    if (!here.is_object())
      return;
    for (const auto &[key, value] : here.items()) {
      sweep(at / key);
      if (optional.count(key) || conditional.count(key))
        continue;
      json without = full;
      without.at(at).erase(key);
      CAPTURE(at.to_string());
      CAPTURE(key);
      CHECK(error_of(without.dump()).find("missing \"" + key + "\"") != std::string::npos);
      ++checked;
    }
  };
  sweep(json::json_pointer());
  CHECK(checked > 40); // every level was reached
}
