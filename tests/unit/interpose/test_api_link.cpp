// ApiLinks over the real nvJitLink (linked into this test, so the "real" library is the one the
// header's names bind to) and a link cache in a scratch directory.
#include "interpose/api_link.h"

#include "package/package.h"
#include "scratch_dir.h"

#include "nvjitlink_major.h"
#include <doctest/doctest.h>

#include <chrono>
#include <cstring>
#include <mutex>
#include <thread>

using namespace cudaq_rt;

// unit_probe.cu compiled to LTO-IR for sm_80, embedded in cudaq_rt (nvjitlink.cpp's trial).
extern "C" const uint8_t cudaq_rt_unit_probe_fatbin_begin[];
extern "C" const uint8_t cudaq_rt_unit_probe_fatbin_end[];

namespace {

RealNvJitLink linked_nvjitlink() {
  RealNvJitLink r;
  r.api.create = __nvJitLinkCreate_13_0;
  r.api.destroy = __nvJitLinkDestroy_13_0;
  r.api.add_data = __nvJitLinkAddData_13_0;
  r.api.add_file = __nvJitLinkAddFile_13_0;
  r.api.complete = __nvJitLinkComplete_13_0;
  r.api.cubin_size = __nvJitLinkGetLinkedCubinSize_13_0;
  r.api.cubin = __nvJitLinkGetLinkedCubin_13_0;
  r.api.ptx_size = __nvJitLinkGetLinkedPtxSize_13_0;
  r.api.ptx = __nvJitLinkGetLinkedPtx_13_0;
  r.api.error_log_size = __nvJitLinkGetErrorLogSize_13_0;
  r.api.error_log = __nvJitLinkGetErrorLog_13_0;
  r.api.info_log_size = __nvJitLinkGetInfoLogSize_13_0;
  r.api.info_log = __nvJitLinkGetInfoLog_13_0;
  r.api.version = nvJitLinkVersion;
  r.path = "linked";
  return r;
}

using test_majors::cuda13;

std::shared_ptr<const LinkCache> cache_in(const std::filesystem::path &dir) {
  CacheConfig c;
  c.dir = dir;
  auto cache = LinkCache::open(c);
  REQUIRE(cache);
  return std::make_shared<const LinkCache>(std::move(*cache));
}

struct Linked {
  nvJitLinkResult result = NVJITLINK_SUCCESS;
  std::vector<uint8_t> cubin;
  std::string info_log;
};

Linked link_probe(ApiLinks &links, std::vector<const char *> options = {"-arch=sm_80", "-lto"}) {
  const NvJitLinkFunctions &api = links.real().api;
  Linked out;
  nvJitLinkHandle h = nullptr;
  REQUIRE(links.create(api.create, &h, static_cast<uint32_t>(options.size()), options.data()) ==
          NVJITLINK_SUCCESS);
  REQUIRE(links.add_data(api.add_data, h, NVJITLINK_INPUT_FATBIN, cudaq_rt_unit_probe_fatbin_begin,
                         cudaq_rt_unit_probe_fatbin_end - cudaq_rt_unit_probe_fatbin_begin,
                         "probe") == NVJITLINK_SUCCESS);
  out.result = links.complete(api.complete, h);
  if (out.result == NVJITLINK_SUCCESS) {
    size_t n = 0;
    REQUIRE(links.output_size(api.cubin_size, LinkOutput::cubin, h, &n) == NVJITLINK_SUCCESS);
    out.cubin.resize(n);
    REQUIRE(links.output(api.cubin, LinkOutput::cubin, h, out.cubin.data()) == NVJITLINK_SUCCESS);
    REQUIRE(links.info_log_size(api.info_log_size, h, &n) == NVJITLINK_SUCCESS);
    out.info_log.resize(n);
    REQUIRE(links.info_log(api.info_log, h, out.info_log.data()) == NVJITLINK_SUCCESS);
    out.info_log.resize(std::strlen(out.info_log.c_str()));
    // A second Complete answers as the real library's does, hit or not.
    CHECK(links.complete(api.complete, h) == NVJITLINK_ERROR_INTERNAL);
  }
  REQUIRE(links.destroy(api.destroy, &h) == NVJITLINK_SUCCESS);
  CHECK(h == nullptr);
  return out;
}

// The one recording under `dir`, with its recipe.
Package only_recording(const std::filesystem::path &dir) {
  std::vector<std::filesystem::path> found;
  for (auto &e : std::filesystem::directory_iterator(dir))
    found.push_back(e.path());
  REQUIRE(found.size() == 1);
  auto pkg = Package::open(found[0]);
  REQUIRE(pkg);
  REQUIRE(pkg->manifest().recipe);
  return std::move(*pkg);
}

size_t entries(const std::filesystem::path &dir) {
  size_t n = 0;
  if (std::filesystem::exists(dir / "v1"))
    for (auto &e : std::filesystem::recursive_directory_iterator(dir / "v1"))
      n += e.is_regular_file() && e.path().parent_path().parent_path().filename() == "v1" &&
           e.path().filename().string()[0] != '.';
  return n;
}

} // namespace

TEST_CASE("a link is stored, and the next is a hit with the same cubin and a log line") {
  ScratchDir dir;
  RealNvJitLink real = linked_nvjitlink();
  ApiLinks links(real, cuda13, cache_in(dir.path), {});
  Linked cold = link_probe(links);
  REQUIRE(cold.result == NVJITLINK_SUCCESS);
  CHECK(cold.info_log.find("link cache") == std::string::npos);
  CHECK(entries(dir.path) == 1);
  Linked warm = link_probe(links);
  CHECK(warm.cubin == cold.cubin);
  CHECK(warm.info_log.find("cudaq-rt-nvjitlink: this output came from the link cache") !=
        std::string::npos);
  // Another process (another ApiLinks over the same directory) hits too.
  ApiLinks other(real, cuda13, cache_in(dir.path), {});
  CHECK(link_probe(other).cubin == cold.cubin);
  CHECK(entries(dir.path) == 1);
}

TEST_CASE("links that cannot be keyed, and cudaq-rt's own, go to the real library uncached") {
  ScratchDir dir;
  RealNvJitLink real = linked_nvjitlink();
  ApiLinks links(real, cuda13, cache_in(dir.path), {});
  // Two -arch options: the key would have to guess which one nvJitLink takes.
  link_probe(links, {"-arch=sm_80", "-arch=sm_80", "-lto"});
  CHECK(entries(dir.path) == 0);
  ApiLinks::set_bypass(true);
  Linked own = link_probe(links);
  ApiLinks::set_bypass(false);
  REQUIRE(own.result == NVJITLINK_SUCCESS);
  CHECK(entries(dir.path) == 0);
  // A handle it never saw (made before, or by another library) is the real library's.
  nvJitLinkHandle h = nullptr;
  const char *options[] = {"-arch=sm_80"};
  REQUIRE(real.api.create(&h, 1, options) == NVJITLINK_SUCCESS);
  size_t n = 0;
  CHECK(links.output_size(real.api.cubin_size, LinkOutput::cubin, h, &n) ==
        real.api.cubin_size(h, &n));
  CHECK(links.destroy(real.api.destroy, &h) == NVJITLINK_SUCCESS);
}

TEST_CASE("a recording is a package holding the recipe and its inputs, once per key") {
  ScratchDir dir;
  RealNvJitLink real = linked_nvjitlink();
  InterposerSettings settings;
  settings.record_dir = dir.path / "recordings";
  ApiLinks links(real, cuda13, nullptr, settings);
  REQUIRE(link_probe(links).result == NVJITLINK_SUCCESS);
  REQUIRE(link_probe(links).result == NVJITLINK_SUCCESS);
  Package pkg = only_recording(settings.record_dir);
  const LinkRecipe &r = *pkg.manifest().recipe;
  CHECK(r.options == std::vector<std::string>{"-arch=sm_80", "-lto"});
  CHECK(r.arch == "sm_80");
  CHECK(r.output == "cubin");
  REQUIRE(r.inputs.size() == 1);
  CHECK(r.inputs[0].type == NVJITLINK_INPUT_FATBIN);
  CHECK(r.inputs[0].name == "probe");
  auto blob = pkg.read_blob(r.inputs[0].digest);
  REQUIRE(blob);
  CHECK(blob->size() ==
        static_cast<size_t>(cudaq_rt_unit_probe_fatbin_end - cudaq_rt_unit_probe_fatbin_begin));
  // Its key is the one the cache would have used.
  auto identity = nvjitlink_identity(nvJitLinkVersion);
  REQUIRE(identity);
  std::vector<ApiLinkInput> in = {{NVJITLINK_INPUT_FATBIN, r.inputs[0].digest}};
  CHECK(api_link_key(r.options, *identity, in)->digest == r.cache_key);
}

namespace {

// Four PTX units that link together (no -lto: each is compiled by ptxas, then linked), each a
// function of its own. nvJitLink reads PTX up to its NUL.
std::string ptx_unit(int n) {
  return cat(".version 8.0\n.target sm_80\n.address_size 64\n.visible .func (.param .b32 out) "
             "cudaq_rt_test_f",
             n,
             "(.param .b32 in)\n{\n  .reg .b32 %r<2>;\n  ld.param.b32 %r0, [in];\n  add.s32 "
             "%r1, %r0, ",
             n, ";\n  st.param.b32 [out], %r1;\n  ret;\n}\n", '\0');
}

// The "real" AddData of the test below: the real library's, in the order it is called (kept in
// `received`), then, every other call, a pause before it returns, as a real AddData that parses a
// larger input takes longer: a call that came second returns first where nothing holds it back.
std::mutex received_mutex;
std::vector<std::string> received;

nvJitLinkResult slow_add_data(nvJitLinkHandle h, nvJitLinkInputType type, const void *data,
                              size_t size, const char *name) {
  nvJitLinkResult r;
  bool slow;
  {
    std::lock_guard lock(received_mutex);
    received.emplace_back(name);
    slow = received.size() % 2 == 1;
    r = __nvJitLinkAddData_13_0(h, type, data, size, name);
  }
  if (slow)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  return r;
}

} // namespace

TEST_CASE("two threads on one handle: the record is the order the real library received") {
  ScratchDir dir;
  RealNvJitLink real = linked_nvjitlink();
  const std::vector<std::string> units = {ptx_unit(0), ptx_unit(1), ptx_unit(2), ptx_unit(3)};
  for (int round = 0; round < 8; ++round) {
    CAPTURE(round);
    received.clear();
    InterposerSettings settings;
    settings.record_dir = dir.path / cat("round", round);
    ApiLinks links(real, cuda13, nullptr, settings);
    nvJitLinkHandle h = nullptr;
    const char *options[] = {"-arch=sm_80"};
    REQUIRE(links.create(real.api.create, &h, 1, options) == NVJITLINK_SUCCESS);
    auto add = [&](int first) {
      for (int k = first; k < 4; k += 2) {
        const std::string name = cat("unit", k);
        CHECK(links.add_data(slow_add_data, h, NVJITLINK_INPUT_PTX, units[k].data(),
                             units[k].size(), name.c_str()) == NVJITLINK_SUCCESS);
      }
    };
    std::thread a(add, 0), b(add, 1);
    a.join();
    b.join();
    REQUIRE(links.complete(real.api.complete, h) == NVJITLINK_SUCCESS);
    REQUIRE(links.destroy(real.api.destroy, &h) == NVJITLINK_SUCCESS);
    const Package pkg = only_recording(settings.record_dir);
    std::vector<std::string> recorded;
    for (const RecipeInput &in : pkg.manifest().recipe->inputs)
      recorded.push_back(in.name);
    CHECK(recorded == received);
  }
}
