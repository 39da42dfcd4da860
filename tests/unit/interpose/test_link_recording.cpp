#include "interpose/link_recording.h"

#include "package/package.h"
#include "scratch_dir.h"

#include <doctest/doctest.h>

#include <fstream>

using namespace cudaq_rt;

TEST_CASE("a recording's name is the program's, made a package name, and the key's") {
  Digest key = sha256(std::string_view("key"));
  CHECK(recording_name("python3", key) == "python3-" + key.hex().substr(0, 16));
  CHECK(recording_name("my app/x", key).starts_with("my_app_x-"));
  CHECK(recording_name("..hidden", key).starts_with("hidden-"));
  CHECK(valid_package_name(recording_name("..", key)));
}

TEST_CASE("a recording is written whole, once, and reads back") {
  ScratchDir dir;
  const std::string a = "first input", b = "second input";
  LinkRecipe r;
  r.options = {"-arch=sm_90", "-lto", "-ptx"};
  r.inputs = {{3, "a.ltoir", sha256(std::string_view(a)), a.size()},
              {10, "/tmp/b.fatbin", sha256(std::string_view(b)), b.size()}};
  r.output = "ptx";
  r.arch = "sm_90";
  r.program = "/usr/bin/prog";
  r.nvjitlink_version = "13.0";
  r.cache_key = sha256(std::string_view("the key"));
  const std::vector<std::string> blobs = {a, b};
  REQUIRE(write_recording(dir.path / "rec", r, blobs));
  auto path = dir.path / "rec" / (recording_name("prog", r.cache_key) + ".cudaqpkg");
  auto pkg = Package::open(path);
  REQUIRE(pkg);
  REQUIRE(pkg->manifest().recipe);
  const LinkRecipe &back = *pkg->manifest().recipe;
  CHECK(back.options == r.options);
  CHECK(back.output == "ptx");
  REQUIRE(back.inputs.size() == 2);
  CHECK(back.inputs[1].type == 10);
  CHECK(back.inputs[1].name == "/tmp/b.fatbin");
  CHECK(*pkg->read_blob(back.inputs[0].digest) == a);
  CHECK(pkg->referenced_blobs().size() == 2);
  // The same key again leaves the first recording as it is.
  auto before = std::filesystem::last_write_time(path / "manifest.json");
  REQUIRE(write_recording(dir.path / "rec", r, blobs));
  CHECK(std::filesystem::last_write_time(path / "manifest.json") == before);
}

TEST_CASE("a recording whose directory cannot be made is an error, and leaves nothing") {
  ScratchDir dir;
  std::filesystem::path file = dir.path / "file";
  { std::ofstream(file) << "x"; }
  LinkRecipe r;
  r.output = "cubin";
  r.cache_key = sha256(std::string_view("k"));
  auto st = write_recording(file / "rec", r, {});
  REQUIRE_FALSE(st);
  CHECK(st.error().message.find("cannot create") != std::string::npos);
}
