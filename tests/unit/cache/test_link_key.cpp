#include "cache/link_key.h"

#include <doctest/doctest.h>

#include "cache_fixtures.h"

#include <filesystem>
#include <set>
#include <sys/stat.h>

using namespace cudaq_rt;
using namespace cache_fixtures;
namespace fs = std::filesystem;

TEST_CASE("every part of the key changes the key") {
  const std::vector<std::string> options = {"-arch=sm_90a", "-lto"};
  LinkKey base = LinkKey::make(arch("sm_90a"), options, fake_nvjitlink(), {input(1), input(2)});

  CHECK(LinkKey::make(arch("sm_90a"), options, fake_nvjitlink(), {input(1), input(2)}).digest ==
        base.digest);
  CHECK(LinkKey::make(arch("sm_90"), options, fake_nvjitlink(), {input(1), input(2)}).digest !=
        base.digest);
  CHECK(LinkKey::make(arch("sm_90f"), options, fake_nvjitlink(), {input(1), input(2)}).digest !=
        base.digest);
  CHECK(LinkKey::make(arch("sm_90a"), std::vector<std::string>{"-arch=sm_90a"}, fake_nvjitlink(),
                      {input(1), input(2)})
            .digest != base.digest);
  CHECK(LinkKey::make(arch("sm_90a"), std::vector<std::string>{"-arch=sm_90a", "-lto", "-O0"},
                      fake_nvjitlink(), {input(1), input(2)})
            .digest != base.digest);
  CHECK(LinkKey::make(arch("sm_90a"), options, fake_nvjitlink(), {input(2), input(1)}).digest !=
        base.digest);
  CHECK(LinkKey::make(arch("sm_90a"), options, fake_nvjitlink(), {input(1)}).digest != base.digest);

  NvJitLinkIdentity newer = fake_nvjitlink();
  newer.minor = 1;
  CHECK(LinkKey::make(arch("sm_90a"), options, newer, {input(1), input(2)}).digest != base.digest);
  NvJitLinkIdentity touched = fake_nvjitlink();
  touched.mtime_ns += 1;
  CHECK(LinkKey::make(arch("sm_90a"), options, touched, {input(1), input(2)}).digest !=
        base.digest);
  NvJitLinkIdentity resized = fake_nvjitlink();
  resized.size += 1;
  CHECK(LinkKey::make(arch("sm_90a"), options, resized, {input(1), input(2)}).digest !=
        base.digest);
  NvJitLinkIdentity moved = fake_nvjitlink();
  moved.path = "/usr/lib/libnvJitLink.so.13";
  CHECK(LinkKey::make(arch("sm_90a"), options, moved, {input(1), input(2)}).digest != base.digest);
}

TEST_CASE("a library with a build ID is known by it, wherever and whenever it was installed") {
  const std::vector<std::string> options = {"-arch=sm_90", "-lto"};
  auto key = [&](const NvJitLinkIdentity &id) {
    return LinkKey::make(arch("sm_90"), options, id, {input(1)}).digest;
  };
  const Digest base = key(fake_nvjitlink_with_build_id());
  NvJitLinkIdentity elsewhere = fake_nvjitlink_with_build_id("/usr/lib/x86_64-linux-gnu/x.so");
  elsewhere.size += 1;
  elsewhere.mtime_ns = 99;
  CHECK(key(elsewhere) == base);
  NvJitLinkIdentity rebuilt = fake_nvjitlink_with_build_id();
  rebuilt.build_id[0] = '2';
  CHECK(key(rebuilt) != base);
  NvJitLinkIdentity newer = fake_nvjitlink_with_build_id();
  newer.minor = 1;
  CHECK(key(newer) != base);
  CHECK(key(fake_nvjitlink()) != base);
  CHECK(fake_nvjitlink_with_build_id().to_json().at("build_id") ==
        "157d67e654e020e4bc581f362fe42f752181ddda");
  CHECK_FALSE(fake_nvjitlink_with_build_id().to_json().contains("mtime_ns"));
}

TEST_CASE("this process's nvJitLink is known by its build ID") {
  auto id = loaded_nvjitlink_identity();
  REQUIRE(id);
  CHECK(id->major >= 12);
  // CUDA 13.0's library has one (readelf -n); 20 bytes, as GNU ld's default sha1 build IDs.
  CHECK(id->build_id.size() == 40);
  CHECK(id->path.find("nvJitLink") != std::string::npos);
}

TEST_CASE("an API link's key: the arch from its options, its inputs' types, -arch replaced") {
  const NvJitLinkIdentity id = fake_nvjitlink_with_build_id();
  const std::vector<ApiLinkInput> inputs = {{4, input(1)}, {3, input(2)}};
  const std::vector<std::string> options = {"-arch=sm_90", "-lto"};
  auto key = api_link_key(options, id, inputs);
  REQUIRE(key);
  CHECK(key->arch.str() == "sm_90");
  CHECK(key->form.api);
  CHECK(key->form.text() == "api");
  CHECK(key->units == std::vector<uint32_t>{4, 3});
  CHECK(key->to_json().at("input_types") == nlohmann::json({4, 3}));
  // The same bytes as another type, or in another order, or the module cudaq-rt-link would
  // key from the same inputs: other keys.
  CHECK(
      api_link_key(options, id, std::vector<ApiLinkInput>{{10, input(1)}, {3, input(2)}})->digest !=
      key->digest);
  CHECK(
      api_link_key(options, id, std::vector<ApiLinkInput>{{3, input(2)}, {4, input(1)}})->digest !=
      key->digest);
  CHECK(LinkKey::make(arch("sm_90"), options, id, {input(1), input(2)}).digest != key->digest);
  // -time changes only the log, as for cudaq-rt-link's keys.
  CHECK(
      api_link_key(std::vector<std::string>{"-arch=sm_90", "-time", "-lto"}, id, inputs)->digest ==
      key->digest);
  // No arch, two, or one the key cannot name: not keyed.
  CHECK_FALSE(api_link_key(std::vector<std::string>{"-lto"}, id, inputs));
  CHECK_FALSE(api_link_key(std::vector<std::string>{"-arch=sm_90", "-arch=sm_80"}, id, inputs));
  CHECK_FALSE(api_link_key(std::vector<std::string>{"-arch=compute_90"}, id, inputs));
  // A recording linked for sm_100 is keyed as the interposer keys that link on an sm_100 GPU.
  std::vector<std::string> moved = with_arch(options, arch("sm_100"));
  CHECK(moved == std::vector<std::string>{"-arch=sm_100", "-lto"});
  CHECK(api_link_key(moved, id, inputs)->digest ==
        api_link_key(std::vector<std::string>{"-arch=sm_100", "-lto"}, id, inputs)->digest);
  CHECK(api_link_key(moved, id, inputs)->digest != key->digest);
}

TEST_CASE("the mode is part of a key, and a whole-program key is as it was before modes") {
  const std::vector<std::string> options = {"-arch=sm_90", "-lto"};
  const std::vector<Digest> inputs = {input(1), input(2), input(3)};
  LinkKey whole = LinkKey::make(arch("sm_90"), options, fake_nvjitlink(), inputs);
  CHECK(LinkKey::make(arch("sm_90"), options, fake_nvjitlink(), inputs, LinkedForm{}).digest ==
        whole.digest);
  LinkKey per_tu = LinkKey::make(arch("sm_90"), options, fake_nvjitlink(), inputs,
                                 LinkedForm{LtoMode::per_tu}, {2, 1});
  LinkKey regrouped = LinkKey::make(arch("sm_90"), options, fake_nvjitlink(), inputs,
                                    LinkedForm{LtoMode::per_tu}, {1, 2});
  LinkKey object = LinkKey::make(arch("sm_90"), options, fake_nvjitlink(), inputs,
                                 LinkedForm{LtoMode::per_tu, true});
  std::set<std::string> digests{whole.digest.str(), per_tu.digest.str(), regrouped.digest.str(),
                                object.digest.str()};
  CHECK(digests.size() == 4);
  CHECK(object.object());
  CHECK_FALSE(per_tu.object());
  CHECK(whole.to_json()["mode"] == "whole");
  CHECK(per_tu.to_json()["units"] == nlohmann::json::array({2, 1}));
}

TEST_CASE("options that cannot change the cubin do not change the key") {
  auto key = [](std::vector<std::string> options) {
    return LinkKey::make(arch("sm_90"), options, fake_nvjitlink(), {input(1)}).digest;
  };
  Digest base = key({"-arch=sm_90", "-lto", "-kernels-used=a", "-kernels-used=b"});
  CHECK(key({"-arch=sm_90", "-lto", "-kernels-used=a", "-time", "-kernels-used=b", "-no-cache"}) ==
        base);
  // -verbose makes ptxas record -v in the cubin's .note.nv.tkinfo: another cubin.
  CHECK(key({"-arch=sm_90", "-verbose", "-lto", "-kernels-used=a", "-kernels-used=b"}) != base);
  CHECK(key({"-arch=sm_90", "-lto", "-kernels-used=b", "-kernels-used=a"}) == base);
  CHECK(key({"-kernels-used=b", "-arch=sm_90", "-kernels-used=a", "-lto", "-kernels-used=a"}) ==
        base);
  CHECK(key({"-arch=sm_90", "-lto", "-kernels-used=a"}) != base);
  CHECK(key({"-lto", "-arch=sm_90", "-kernels-used=a", "-kernels-used=b"}) != base);
  CHECK(key({"-arch=sm_90", "-lto", "-kernels-used=a", "-kernels-used=b",
             "-split-compile-extended=0"}) != base);
  // -Xptxas options may override each other, so their order counts.
  CHECK(key({"-arch=sm_90", "-Xptxas=-O1", "-Xptxas=-O3"}) !=
        key({"-arch=sm_90", "-Xptxas=-O3", "-Xptxas=-O1"}));
}

TEST_CASE("normalized options keep order, drop noise and sort the sets") {
  std::vector<std::string> in = {
      "-variables-used=g", "-kernels-used=z", "-arch=sm_80", "-time",    "-lto",
      "-kernels-used=a",   "-no-cache",       "-O3",         "-verbose", "-kernels-used=z",
      "-variables-used=c"};
  std::vector<std::string> want = {"-arch=sm_80",
                                   "-lto",
                                   "-O3",
                                   "-verbose",
                                   "-kernels-used=a",
                                   "-kernels-used=z",
                                   "-variables-used=c",
                                   "-variables-used=g"};
  CHECK(normalize_link_options(in) == want);
  LinkKey key = LinkKey::make(arch("sm_80"), in, fake_nvjitlink(), {});
  CHECK(key.options == want);
  CHECK(key.to_json()["options"] == nlohmann::json(want));
  CHECK(key.to_json()["digest"] == key.digest.str());
  CHECK(key.to_json()["nvjitlink"]["version"] == "13.0");
}

TEST_CASE("the loaded nvJitLink is identified by path, size and mtime") {
  auto id = loaded_nvjitlink_identity();
  REQUIRE_MESSAGE(id, (id ? "" : id.error().str()));
  CHECK(id->major >= 12);
  CHECK(fs::path(id->path).filename().string().find("libnvJitLink.so") == 0);
  CHECK(fs::path(id->path).is_absolute());
  CHECK_FALSE(fs::is_symlink(id->path));
  CHECK(id->size == fs::file_size(id->path));
  struct stat st;
  REQUIRE(::stat(id->path.c_str(), &st) == 0);
  CHECK(id->mtime_ns == int64_t{st.st_mtim.tv_sec} * 1'000'000'000 + st.st_mtim.tv_nsec);
  auto again = loaded_nvjitlink_identity();
  REQUIRE(again);
  CHECK(*again == *id);
}

TEST_CASE("a linked form is spelt as keys hash it and entries store it") {
  CHECK(LinkedForm{}.text() == "");
  CHECK(LinkedForm{LtoMode::per_tu}.text() == "per-tu");
  CHECK(LinkedForm{LtoMode::per_tu, true}.text() == "object");
  for (LinkedForm f :
       {LinkedForm{}, LinkedForm{LtoMode::per_tu}, LinkedForm{LtoMode::per_tu, true}})
    CHECK(LinkedForm::parse(f.text()) == f);
  CHECK_FALSE(LinkedForm::parse("whole"));
  CHECK_FALSE(LinkedForm::parse("per_tu"));
  CHECK(fake_nvjitlink().version() == "13.0");
  CHECK(fake_nvjitlink().to_json() ==
        nlohmann::json{{"version", "13.0"},
                       {"path", "/opt/cuda/lib/libnvJitLink.so.13.0.88"},
                       {"size", 98806736},
                       {"mtime_ns", 1700000000000000000}});
}
