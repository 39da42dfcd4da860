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
