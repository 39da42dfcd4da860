// cudaq-rt-link of a recording: a link made through the interposer's ApiLinks (over the process's
// nvJitLink, the one cudaq-rt-link links with) and recorded, then linked for another arch. The
// link for that arch must be the one the interposer makes on such a GPU: the same key both ways,
// so that each finds the other's cache entry.
#include "link/recorded_link.h"

#include "base/nvjitlink_library.h"
#include "formats/target.h"
#include "interpose/api_link.h"
#include "interpose/link_recording.h"
#include "package/package.h"
#include "scratch_dir.h"

#include "nvjitlink_major.h"
#include <doctest/doctest.h>

#include <algorithm>
#include <cstring>

using namespace cudaq_rt;
namespace fs = std::filesystem;

// unit_probe.cu compiled to LTO-IR for sm_80, embedded in cudaq_rt (nvjitlink.cpp's trial).
extern "C" const uint8_t cudaq_rt_unit_probe_fatbin_begin[];
extern "C" const uint8_t cudaq_rt_unit_probe_fatbin_end[];

namespace {

using test_majors::cuda13;

// The process's nvJitLink as the interposer's real library.
RealNvJitLink process_library() {
  auto lib = process_nvjitlink();
  REQUIRE_MESSAGE(lib, (lib ? "" : lib.error().str()));
  RealNvJitLink r;
  r.api = (*lib)->api;
  r.path = (*lib)->resolved;
  return r;
}

std::shared_ptr<const LinkCache> cache_in(const fs::path &dir) {
  CacheConfig c;
  c.dir = dir;
  auto cache = LinkCache::open(c);
  REQUIRE_MESSAGE(cache, (cache ? "" : cache.error().str()));
  return std::make_shared<const LinkCache>(std::move(*cache));
}

TargetArch arch(std::string_view text) {
  auto a = parse_arch(text);
  REQUIRE(a);
  return *a;
}

struct ApiLinked {
  std::vector<uint8_t> cubin;
  std::string info_log;
};

// The probe linked through the interposer's ApiLinks, as a program calls nvJitLink.
ApiLinked interposed_link(ApiLinks &links, const char *arch_option) {
  const NvJitLinkFunctions &api = links.real().api;
  const char *options[] = {arch_option, "-lto"};
  nvJitLinkHandle h = nullptr;
  REQUIRE(links.create(api.create, &h, 2, options) == NVJITLINK_SUCCESS);
  REQUIRE(links.add_data(api.add_data, h, NVJITLINK_INPUT_FATBIN, cudaq_rt_unit_probe_fatbin_begin,
                         cudaq_rt_unit_probe_fatbin_end - cudaq_rt_unit_probe_fatbin_begin,
                         "probe") == NVJITLINK_SUCCESS);
  REQUIRE(links.complete(api.complete, h) == NVJITLINK_SUCCESS);
  ApiLinked out;
  size_t n = 0;
  REQUIRE(links.output_size(api.cubin_size, LinkOutput::cubin, h, &n) == NVJITLINK_SUCCESS);
  out.cubin.resize(n);
  REQUIRE(links.output(api.cubin, LinkOutput::cubin, h, out.cubin.data()) == NVJITLINK_SUCCESS);
  REQUIRE(links.info_log_size(api.info_log_size, h, &n) == NVJITLINK_SUCCESS);
  out.info_log.resize(n);
  REQUIRE(links.info_log(api.info_log, h, out.info_log.data()) == NVJITLINK_SUCCESS);
  out.info_log.resize(std::strlen(out.info_log.c_str()));
  REQUIRE(links.destroy(api.destroy, &h) == NVJITLINK_SUCCESS);
  return out;
}

// The recording the interposer writes of the probe's link for sm_80.
fs::path record_probe(const RealNvJitLink &real, const fs::path &dir) {
  InterposerSettings settings;
  settings.record_dir = dir;
  ApiLinks links(real, cuda13, nullptr, settings);
  interposed_link(links, "-arch=sm_80");
  std::vector<fs::path> found;
  for (const auto &e : fs::directory_iterator(dir))
    found.push_back(e.path());
  REQUIRE(found.size() == 1);
  return found[0];
}

LinkOptions options_for(const fs::path &package, std::vector<TargetArch> archs) {
  LinkOptions o;
  o.package = package;
  o.archs = std::move(archs);
  o.jobs = 1;
  return o;
}

} // namespace

TEST_CASE("a recording linked for sm_90 is the interposer's sm_90 link: one key, one entry") {
  ScratchDir dir;
  const RealNvJitLink real = process_library();
  const fs::path recording = record_probe(real, dir.path / "recordings");
  auto pkg = Package::open(recording);
  REQUIRE(pkg);
  const LinkRecipe recipe = *pkg->manifest().recipe;
  REQUIRE(recipe.options == std::vector<std::string>{"-arch=sm_80", "-lto"});

  // The interposer on an sm_90 GPU stores its link; cudaq-rt-link's sm_90 link of the recording
  // then hits that entry and gets its cubin.
  auto interposer_cache = cache_in(dir.path / "cache");
  ApiLinks on_sm90(real, cuda13, interposer_cache, {});
  const ApiLinked interposed = interposed_link(on_sm90, "-arch=sm_90");
  auto report = link_recording(*pkg, options_for(recording, {arch("sm_90")}), *interposer_cache);
  REQUIRE_MESSAGE(report, (report ? "" : report.error().str()));
  REQUIRE(report->ok());
  const ArchLink &a = report->archs.at(0);
  CHECK(a.arch.str() == "sm_90");
  CHECK(a.cache_hit);
  CHECK(a.cubin == interposed.cubin);
  CHECK(a.options == std::vector<std::string>{"-arch=sm_90", "-lto"});
  auto identity = loaded_nvjitlink_identity();
  REQUIRE(identity);
  const std::vector<ApiLinkInput> inputs = {{NVJITLINK_INPUT_FATBIN, recipe.inputs[0].digest}};
  const auto key = api_link_key(a.options, *identity, inputs);
  REQUIRE(key);
  CHECK(a.key.digest == key->digest);
  REQUIRE(a.record);
  CHECK(a.record->arch.str() == "sm_90");
  CHECK(a.record->options == a.options);
  CHECK(a.record->cache_key == key->digest);
  CHECK(a.record->inputs == std::vector<Digest>{recipe.inputs[0].digest});
  CHECK(a.record->cubin == sha256(std::span<const uint8_t>(interposed.cubin)));
  CHECK(a.record->cubin_size == interposed.cubin.size());
  CHECK(a.record->lto == LtoMode::whole);
  CHECK(a.record->nvjitlink_version == identity->version());

  // And the other way: a link cudaq-rt-link made ahead of time is the interposer's hit.
  auto ahead_cache = cache_in(dir.path / "ahead");
  auto ahead = link_recording(*pkg, options_for(recording, {arch("sm_90")}), *ahead_cache);
  REQUIRE(ahead);
  CHECK_FALSE(ahead->archs.at(0).cache_hit);
  ApiLinks fleet(real, cuda13, ahead_cache, {});
  const ApiLinked hit = interposed_link(fleet, "-arch=sm_90");
  CHECK(hit.cubin == ahead->archs.at(0).cubin);
  CHECK(hit.info_log.find("this output came from the link cache") != std::string::npos);
}

TEST_CASE("the records go into the recording; a dry run keys and writes nothing") {
  ScratchDir dir;
  const RealNvJitLink real = process_library();
  const fs::path recording = record_probe(real, dir.path / "recordings");
  auto cache = cache_in(dir.path / "cache");
  {
    auto pkg = Package::open(recording);
    REQUIRE(pkg);
    LinkOptions dry = options_for(recording, {arch("sm_90"), arch("sm_100")});
    dry.dry_run = true;
    auto planned = link_recording(*pkg, dry, *cache);
    REQUIRE(planned);
    REQUIRE(planned->archs.size() == 2);
    CHECK(planned->archs[1].options == std::vector<std::string>{"-arch=sm_100", "-lto"});
    CHECK(planned->archs[0].key.digest != planned->archs[1].key.digest);
    CHECK(planned->archs[0].cubin.empty());
    CHECK_FALSE(planned->archs[0].record);
    CHECK_FALSE(cache->get(planned->archs[0].key));

    auto linked =
        link_recording(*pkg, options_for(recording, {arch("sm_90"), arch("sm_100")}), *cache);
    REQUIRE_MESSAGE(linked, (linked ? "" : linked.error().str()));
    REQUIRE(linked->ok());
    CHECK(linked->archs[0].key.digest == planned->archs[0].key.digest);
    CHECK(linked->archs[1].key.digest == planned->archs[1].key.digest);
  }
  auto after = Package::open(recording);
  REQUIRE(after);
  REQUIRE(after->manifest().recipe); // still a recording
  std::vector<std::string> archs;
  for (const LinkRecord &r : after->manifest().links)
    archs.push_back(r.arch.str());
  std::sort(archs.begin(), archs.end());
  CHECK(archs == std::vector<std::string>{"sm_100", "sm_90"});
  for (const LinkRecord &r : after->manifest().links) {
    auto cubin = after->read_blob(r.cubin);
    REQUIRE(cubin);
    CHECK(cubin->size() == r.cubin_size);
  }
}

TEST_CASE("a recipe that names no -arch is refused per arch, and nothing is stored") {
  ScratchDir dir;
  const std::string input(cudaq_rt_unit_probe_fatbin_begin, cudaq_rt_unit_probe_fatbin_end);
  LinkRecipe r;
  r.options = {"-lto"};
  r.inputs = {{NVJITLINK_INPUT_FATBIN, "probe", sha256(input), input.size()}};
  r.output = "cubin";
  r.program = "app";
  r.cache_key = sha256(std::string_view("no arch"));
  REQUIRE(write_recording(dir.path, r, std::vector<std::string>{input}));
  const fs::path recording = dir.path / (recording_name("app", r.cache_key) + package_suffix);
  auto pkg = Package::open(recording);
  REQUIRE(pkg);
  auto cache = cache_in(dir.path / "cache");
  auto report = link_recording(*pkg, options_for(recording, {arch("sm_90")}), *cache);
  REQUIRE(report);
  CHECK_FALSE(report->ok());
  REQUIRE(report->archs.at(0).error);
  CHECK(report->archs[0].error->str() == "the recipe's options name no single -arch=sm_NN");
  CHECK(Package::open(recording)->manifest().links.empty());
}
