#include "base/zstd.h"

#include <doctest/doctest.h>

#include "unit_files.h"

#include <cstdio>
#include <string>

using namespace cudaq_rt;

namespace {
std::span<const uint8_t> bytes_of(const std::string &s) {
  return {reinterpret_cast<const uint8_t *>(s.data()), s.size()};
}
std::string sample() {
  std::string s;
  for (int i = 0; i < 4000; ++i)
    s += "cubin section " + std::to_string(i % 37) + "\n";
  return s;
}
} // namespace

TEST_CASE("a frame round-trips, declares its size, and shrinks repetitive bytes") {
  const std::string data = sample();
  const std::string frame = zstd_compress(bytes_of(data));
  CHECK(frame.size() < data.size() / 4);
  auto back = zstd_decompress(bytes_of(frame), data.size(), "f");
  REQUIRE(back);
  CHECK(*back == data);
  auto empty = zstd_decompress(bytes_of(zstd_compress({})), 0, "f");
  REQUIRE(empty);
  CHECK(empty->empty());
}

TEST_CASE("the zstd tool reads our frames, and we read its frames") {
  const std::string data = sample();
  const std::string frame = zstd_compress(bytes_of(data));
  const std::string path = "test_zstd.frame.zst";
  unit_files::write_file(path, frame);
  const std::string out = unit_files::command_output("zstd -dc " + path);
  CHECK(out == data);
  // And theirs (-19, with the content size the CLI records for a file) through ours.
  unit_files::write_file(path + ".in", data);
  const std::string theirs = unit_files::command_output("zstd -19 -qc " + path + ".in");
  auto back = zstd_decompress(bytes_of(theirs), data.size(), "f");
  REQUIRE(back);
  CHECK(*back == data);
  std::remove(path.c_str());
  std::remove((path + ".in").c_str());
}

TEST_CASE("what is not exactly one bounded frame is refused, naming why") {
  const std::string data = sample();
  const std::string frame = zstd_compress(bytes_of(data));
  auto error = [](const std::string &f, uint64_t max) {
    auto r = zstd_decompress(bytes_of(f), max, "f");
    return r ? std::string() : r.error().str();
  };
  CHECK(error("not a frame at all", 100) == "'f': is not a zstd frame");
  CHECK(error(frame, data.size() - 1) == "'f': is a zstd frame of " + std::to_string(data.size()) +
                                             " bytes, more than the " +
                                             std::to_string(data.size() - 1) + " it may hold");
  CHECK(error(frame.substr(0, frame.size() - 3), data.size())
            .starts_with("'f': is a truncated zstd frame"));
  CHECK(error(frame + "x", data.size()) == "'f': holds 1 bytes after its zstd frame");
  CHECK(error(frame + frame, 2 * data.size()) ==
        "'f': holds " + std::to_string(frame.size()) + " bytes after its zstd frame");
  std::string flipped = frame;
  flipped[flipped.size() / 2] ^= 0x5a;
  CHECK(error(flipped, data.size()).starts_with("'f': is a corrupt zstd frame"));
}
