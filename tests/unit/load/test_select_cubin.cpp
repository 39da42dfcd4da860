// select_cubin's order, called directly: the package's record for the GPU's exact arch (and only
// one linked from this runtime's inputs, in the mode asked for if one is), else the link cache,
// else a link at load, which --no-link refuses saying what the package has. One real link
// (nvJitLink, per TU) of the example app with the loopback bridge's hooks packed as bridge `echo`;
// every later choice finds it in the cache or the package.
#include "load/select_cubin.h"

#include "formats/cubin.h"

#include <doctest/doctest.h>

#include "package_fixture.h"
#include "scratch_dir.h"

#include <nlohmann/json.hpp>

#include <cstdlib>
#include <fstream>
#include <iterator>

namespace fs = std::filesystem;
using namespace cudaq_rt;
using namespace package_fixture;

namespace {

struct Fixture {
  ScratchDir dir{"cudaq_rt_test_select_cubin"};
  fs::path packed;

  Fixture() {
    ::setenv("CUDAQ_RT_BRIDGE_PATH", CUDAQ_RT_TEST_ECHO_BRIDGE_DIR, 1);
    packed = package_fixture::packed(example_options(dir.path, "echo"));
  }

  // A copy of the package as packed (no link records), for a test to store into.
  fs::path fresh(const std::string &name) { return copy_package(packed, dir.path, name); }

  LinkCache cache(const std::string &name) { return open_link_cache(dir.path / name); }
};

Fixture &fixture() {
  static Fixture f;
  return f;
}

LinkCache no_cache() {
  CacheConfig c;
  c.enabled = false;
  auto opened = LinkCache::open(c);
  REQUIRE(opened);
  return std::move(*opened);
}

std::string error_of(const Expected<CubinChoice> &c) {
  return c ? cat("(chose ", cubin_source_name(c->source), ")") : c.error().str();
}

const CubinPolicy no_link{.allow_link = false, .store = false};

// The one linked cubin, and the cache that holds it after the first test to need it.
struct Linked {
  LinkCache cache = fixture().cache("linked");
  std::vector<uint8_t> cubin;
  LinkRecord record;
};

Linked &linked() {
  static Linked l = [] {
    Linked out;
    const Package p = open_package(fixture().packed);
    const LinkPlan plan = plan_of(p);
    auto c = select_cubin(p, plan, arch("sm_90"), out.cache, {});
    REQUIRE_MESSAGE(c, error_of(c));
    REQUIRE(c->source == CubinSource::link);
    out.cubin = c->cubin;
    out.record = c->record;
    return out;
  }();
  return l;
}

} // namespace

TEST_CASE("nothing in the package or the cache: linked at load, a module for exactly that arch") {
  Linked &l = linked();
  auto info = read_cubin(l.cubin, "linked");
  REQUIRE_MESSAGE(info, (info ? "" : info.error().str()));
  CHECK(info->arch == 90);
  CHECK_FALSE(info->relocatable);
  CHECK(info->functions.count("cudaq_rt_unified_dispatch") == 1);
  CHECK(info->variables.count("cudaq_rt_handler__echo") == 1);
  CHECK(l.record.arch.str() == "sm_90");
  CHECK(l.record.bridge == "echo");
  CHECK(l.record.dispatcher == "builtin");
  CHECK(l.record.cubin == sha256(l.cubin));
  CHECK(l.record.cubin_size == l.cubin.size());
  // A link at load without --store leaves the package as it was.
  CHECK(open_package(fixture().packed).manifest().links.empty());
}

TEST_CASE("what was linked is next taken from the cache, the same bytes, even with --no-link") {
  Linked &l = linked();
  const Package p = open_package(fixture().packed);
  const LinkPlan plan = plan_of(p);
  auto c = select_cubin(p, plan, arch("sm_90"), l.cache, no_link);
  REQUIRE_MESSAGE(c, error_of(c));
  CHECK(c->source == CubinSource::cache);
  CHECK(c->arch.str() == "sm_90");
  CHECK(c->cubin == l.cubin);
  CHECK(c->record.cache_key == l.record.cache_key);
  CHECK(c->ms >= 0);
}

TEST_CASE("--store puts the cubin in the package, whose record then comes first") {
  Linked &l = linked();
  const fs::path dir = fixture().fresh("stored");
  {
    const Package p = open_package(dir);
    auto c =
        select_cubin(p, plan_of(p), arch("sm_90"), l.cache, {.allow_link = true, .store = true});
    REQUIRE_MESSAGE(c, error_of(c));
    CHECK(c->source == CubinSource::cache);
  }
  const Package p = open_package(dir);
  REQUIRE(p.manifest().links.size() == 1);
  const LinkRecord &r = p.manifest().links[0];
  CHECK(r.arch.str() == "sm_90");
  CHECK(r.bridge == "echo");
  CHECK(r.cubin == sha256(l.cubin));
  // Neither a cache nor a link is needed now.
  auto c = select_cubin(p, plan_of(p), arch("sm_90"), no_cache(), no_link);
  REQUIRE_MESSAGE(c, error_of(c));
  CHECK(c->source == CubinSource::package);
  CHECK(c->cubin == l.cubin);
  CHECK(c->record.cubin == r.cubin);
  CHECK(c->warnings.empty());

  // The record serves its own arch only: sm_90a is another target.
  auto other = select_cubin(p, plan_of(p), arch("sm_90a"), no_cache(), no_link);
  CHECK(error_of(other) ==
        "'" + dir.string() +
            "': no cubin for sm_90a (bridge echo, dispatcher builtin) in the package or the link "
            "cache, and linking at load is off; the package has cubins for sm_90 (echo, builtin): "
            "link it ahead of time for sm_90a");

  // A mode asked for by name takes only a record linked in it; unasked, either serves.
  LinkSettings whole;
  whole.lto_mode = LtoMode::whole;
  auto refused = select_cubin(p, plan_of(p, whole), arch("sm_90"), no_cache(), no_link);
  REQUIRE_FALSE(refused);
  CHECK(refused.error().str().find("no cubin for sm_90 (bridge echo, dispatcher builtin) in the "
                                   "package or the link cache, and linking at load is off") !=
        std::string::npos);
  LinkSettings per_tu;
  per_tu.lto_mode = LtoMode::per_tu;
  auto taken = select_cubin(p, plan_of(p, per_tu), arch("sm_90"), no_cache(), no_link);
  REQUIRE_MESSAGE(taken, error_of(taken));
  CHECK(taken->source == CubinSource::package);
}

TEST_CASE("--no-link with nothing to load is refused, naming what the package has") {
  const Package p = open_package(fixture().packed);
  auto c = select_cubin(p, plan_of(p), arch("sm_90"), fixture().cache("empty"), no_link);
  CHECK(error_of(c) == "'" + fixture().packed.string() +
                           "': no cubin for sm_90 (bridge echo, dispatcher builtin) in the package "
                           "or the link cache, and linking at load is off; the package has cubins "
                           "for no arch: link it ahead of time for sm_90");
}

TEST_CASE("a GPU older than the package's LTO-IR: said before any lookup or link") {
  const Package p = open_package(fixture().packed);
  const std::string e =
      error_of(select_cubin(p, plan_of(p), arch("sm_75"), fixture().cache("old"), {}));
  CHECK(e.rfind("'" + fixture().packed.string() + "': this GPU is sm_75: cannot link for sm_75: ",
                0) == 0);
  CHECK(e.find("this package can serve sm_80 and newer") != std::string::npos);
  size_t entries = 0; // nothing linked, nothing stored in the cache
  for (const auto &e : fs::recursive_directory_iterator(fixture().dir.path / "old"))
    entries += e.is_regular_file();
  CHECK(entries == 0);
}

TEST_CASE("a record linked from other code than this runtime's is stale: not used, and said") {
  Linked &l = linked();
  const fs::path dir = fixture().fresh("stale");
  {
    const Package p = open_package(dir);
    REQUIRE(
        select_cubin(p, plan_of(p), arch("sm_90"), l.cache, {.allow_link = true, .store = true}));
  }
  // The record claims other inputs: the first two swapped.
  const fs::path manifest = dir / "manifest.json";
  std::ifstream in_file(manifest);
  std::string text{std::istreambuf_iterator<char>(in_file), std::istreambuf_iterator<char>()};
  in_file.close();
  const Package before = open_package(dir);
  const LinkRecord &r = before.manifest().links.at(0);
  REQUIRE(r.inputs.size() >= 2);
  const std::string a = r.inputs[0].str(), b = r.inputs[1].str();
  const size_t in = text.find("\"inputs\"");
  REQUIRE(in != std::string::npos);
  const size_t at_a = text.find(a, in), at_b = text.find(b, in);
  REQUIRE(at_a != std::string::npos);
  REQUIRE(at_b != std::string::npos);
  text.replace(at_a, a.size(), b);
  text.replace(at_b, b.size(), a);
  std::ofstream(manifest, std::ios::trunc) << text;

  const Package p = open_package(dir);
  REQUIRE(p.manifest().links.at(0).inputs[0] == r.inputs[1]);
  const std::string what = "sm_90 (bridge echo, dispatcher builtin)";
  auto c = select_cubin(p, plan_of(p), arch("sm_90"), l.cache, no_link);
  REQUIRE_MESSAGE(c, error_of(c));
  CHECK(c->source == CubinSource::cache);
  CHECK(c->warnings ==
        std::vector<std::string>{"the package's cubin for " + what +
                                 " was linked from other code than this runtime's bridge hooks and "
                                 "dispatcher: not used"});
  CHECK(error_of(select_cubin(p, plan_of(p), arch("sm_90"), no_cache(), no_link)) ==
        "'" + dir.string() + "': no cubin for " + what +
            " in the package that matches this runtime or the link cache, and linking at load is "
            "off; the package has cubins for sm_90 (echo, builtin): link it ahead of time for "
            "sm_90");
}

TEST_CASE("sources have the names -v prints") {
  CHECK(std::string(cubin_source_name(CubinSource::package)) == "package");
  CHECK(std::string(cubin_source_name(CubinSource::cache)) == "cache");
  CHECK(std::string(cubin_source_name(CubinSource::remote)) == "remote cache");
  CHECK(std::string(cubin_source_name(CubinSource::link)) == "link at load");
}

TEST_CASE("a whole-program record of handlers without named calls is current beside the lone "
          "build") {
  // The packed bridge exports the lone form's hooks: a per-TU plan (the load path's, unasked)
  // links the unified kernel's lone build, a whole-program one the plain build where no handler
  // has a named call. The load path's plan must still know that record as this runtime's.
  Linked &l = linked();
  const fs::path dir = fixture().fresh("whole_plain");
  const fs::path manifest = dir / "manifest.json";
  {
    std::ifstream in(manifest);
    nlohmann::json doc = nlohmann::json::parse(in);
    for (nlohmann::json &e : doc["exports"])
      e.erase("direct");
    std::ofstream(manifest, std::ios::trunc) << doc.dump(2);
  }
  LinkSettings whole;
  whole.lto_mode = LtoMode::whole;
  {
    const Package p = open_package(dir);
    auto c = select_cubin(p, plan_of(p, whole), arch("sm_90"), fixture().cache("whole_plain"),
                          {.allow_link = true, .store = true});
    REQUIRE_MESSAGE(c, error_of(c));
    CHECK(c->source == CubinSource::link);
  }
  const Package p = open_package(dir);
  REQUIRE(p.manifest().links.size() == 1);
  CHECK(p.manifest().links[0].lto == LtoMode::whole);
  CHECK(p.manifest().links[0].inputs[0] != l.record.inputs[0]); // not the per-TU lone build
  auto c = select_cubin(p, plan_of(p), arch("sm_90"), no_cache(), no_link);
  REQUIRE_MESSAGE(c, error_of(c));
  CHECK(c->source == CubinSource::package);
  CHECK(c->warnings.empty());
}
