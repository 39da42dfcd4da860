#include "base/zstd.h"

#include <doctest/doctest.h>

#include "unit_files.h"

#include <algorithm>
#include <cstdio>
#include <fcntl.h>
#include <string>
#include <unistd.h>

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

namespace {
// The process's resident memory now, in KiB, read without allocating (it is read for every
// block, and under ASan every allocation's freed memory stays resident a while).
uint64_t rss_kib() {
  char text[256];
  int fd = ::open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return 0;
  const ssize_t n = ::read(fd, text, sizeof text - 1);
  ::close(fd);
  if (n <= 0)
    return 0;
  text[n] = '\0';
  unsigned long long size = 0, resident = 0;
  if (std::sscanf(text, "%llu %llu", &size, &resident) != 2)
    return 0;
  return resident * (static_cast<uint64_t>(::sysconf(_SC_PAGESIZE)) / 1024);
}
} // namespace

TEST_CASE("a stream gives the frame's bytes in blocks, never holding them, with the same checks") {
  const std::string data = sample();
  const std::string frame = zstd_compress(bytes_of(data));
  std::string got;
  auto n = zstd_stream(bytes_of(frame), data.size(), "f",
                       [&](std::span<const uint8_t> p) { got.append(p.begin(), p.end()); });
  REQUIRE(n);
  CHECK(*n == data.size());
  CHECK(got == data);
  auto error = [](const std::string &f, uint64_t max) {
    auto r = zstd_stream(bytes_of(f), max, "f", [](std::span<const uint8_t>) {});
    return r ? std::string() : r.error().str();
  };
  CHECK(error("not a frame at all", 100) == "'f': is not a zstd frame");
  CHECK(error(frame, data.size() - 1).ends_with("it may hold"));
  CHECK(error(frame + "x", data.size()) == "'f': holds 1 bytes after its zstd frame");
  std::string flipped = frame;
  flipped[flipped.size() / 2] ^= 0x5a;
  CHECK(error(flipped, data.size()).starts_with("'f': is a corrupt zstd frame"));

  // 256 MiB of zeros in a few KiB of frame, made by the zstd tool from a sparse file: handed out
  // in blocks while this process's memory stays where it was.
  const uint64_t big = uint64_t{256} << 20;
  const std::string zeros = unit_files::command_output(
      "f=$(mktemp) && truncate -s 268435456 \"$f\" && zstd -q -c \"$f\"; rm -f \"$f\"");
  REQUIRE(zeros.size() < 64 * 1024);
  const uint64_t before = rss_kib();
  uint64_t seen = 0, largest = 0, grew = 0;
  auto big_n = zstd_stream(bytes_of(zeros), big, "zeros", [&](std::span<const uint8_t> p) {
    seen += p.size();
    largest = std::max<uint64_t>(largest, p.size());
    grew = std::max<uint64_t>(grew, rss_kib() - std::min(rss_kib(), before));
  });
  REQUIRE(big_n);
  CHECK(*big_n == big);
  CHECK(seen == big);
  CHECK(largest <= (1 << 20));
  CHECK(grew < 16 * 1024);
}
