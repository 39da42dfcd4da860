// A fresh directory under the system temp dir for one test case, removed with everything in it.
#pragma once

#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <string>

struct ScratchDir {
  std::filesystem::path path;

  explicit ScratchDir(const char *prefix = "cudaq_rt_test") {
    std::string tmpl = (std::filesystem::temp_directory_path() / prefix).string() + ".XXXXXX";
    REQUIRE(::mkdtemp(tmpl.data()) != nullptr);
    path = tmpl;
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  ScratchDir(const ScratchDir &) = delete;
  ScratchDir &operator=(const ScratchDir &) = delete;
};
