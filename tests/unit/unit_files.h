// The files a unit test reads whole, writes in one go, or lists: a file's bytes as text and as the
// span the parsers take, a file written from text, a command's output, and a directory's names in
// order.
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <span>
#include <string>
#include <vector>

namespace unit_files {

// A file's bytes; a file that cannot be opened fails the test.
inline std::string read_file(const std::filesystem::path &path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE(in);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

inline std::span<const uint8_t> bytes(const std::string &s) {
  return {reinterpret_cast<const uint8_t *>(s.data()), s.size()};
}

// Writes `text` as the whole of the file and returns its path as text, for a call that takes one.
inline std::string write_file(const std::filesystem::path &path, const std::string &text) {
  std::ofstream(path, std::ios::binary) << text;
  return path.string();
}

// What a shell command writes on stdout; a command that fails fails the test.
inline std::string command_output(const std::string &command) {
  FILE *p = ::popen(command.c_str(), "r");
  REQUIRE(p);
  std::string out;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;)
    out.append(buf, n);
  REQUIRE(::pclose(p) == 0);
  return out;
}

// The names in a directory, sorted.
inline std::vector<std::string> entries(const std::filesystem::path &dir) {
  std::vector<std::string> out;
  for (const auto &e : std::filesystem::directory_iterator(dir))
    out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

} // namespace unit_files
