// What the cache/ unit tests share: a fake nvJitLink identity, keys and cubins numbered by an int,
// a LinkCache over a test's directory, and a few file helpers.
#pragma once

#include "cache/link_cache.h"

#include <doctest/doctest.h>

#include <cstdint>
#include <ctime>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <string_view>
#include <sys/stat.h>
#include <vector>

namespace cache_fixtures {

using namespace cudaq_rt;

inline TargetArch arch(std::string_view text) {
  auto a = parse_arch(text);
  REQUIRE(a);
  return *a;
}

// A library without a build ID: known by its path, size and mtime.
inline NvJitLinkIdentity fake_nvjitlink() {
  return {13, 0, "", "/opt/cuda/lib/libnvJitLink.so.13.0.88", 98806736, 1700000000000000000};
}

// The same toolkit's library with its build ID, installed at `path`.
inline NvJitLinkIdentity fake_nvjitlink_with_build_id(std::string path = "/opt/cuda/lib/x.so") {
  return {13, 0, "157d67e654e020e4bc581f362fe42f752181ddda", std::move(path), 98806736, 17};
}

inline Digest input(int i) {
  return sha256(std::string_view(cat("input ", i)));
}

inline LinkKey key_for(int i, std::vector<std::string> options = {"-arch=sm_90", "-lto"}) {
  return LinkKey::make(arch("sm_90"), options, fake_nvjitlink(), {input(i), input(i + 1000)});
}

// Bytes that do not compress (an LCG's high bits), so that an entry's size on disk is its
// cubin's plus the header: the tests of the cache's bounds count on it.
inline std::vector<uint8_t> cubin_for(int i, size_t size = 1000) {
  std::vector<uint8_t> out(size);
  uint64_t x = 0x9e3779b97f4a7c15ull * static_cast<uint64_t>(i + 1);
  for (size_t j = 0; j < size; ++j) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    out[j] = static_cast<uint8_t>(x >> 56);
  }
  return out;
}

inline LinkMetadata metadata_for(const LinkKey &key) {
  LinkMetadata m = LinkMetadata::from_key(key);
  m.info_log = "ptxas info    : Used 8 registers";
  m.link_time_ms = 24.5;
  m.created = 1700000000;
  return m;
}

inline LinkCache open_cache(const std::filesystem::path &dir,
                            uint64_t max_bytes = CacheConfig::default_max_bytes) {
  CacheConfig config;
  config.dir = dir;
  config.max_bytes = max_bytes;
  auto cache = LinkCache::open(config);
  REQUIRE(cache);
  return *cache;
}

inline void put_ok(const LinkCache &cache, int i, size_t size = 1000) {
  LinkKey key = key_for(i);
  Status st = cache.put(key, cubin_for(i, size), metadata_for(key));
  REQUIRE_MESSAGE(st, (st ? "" : st.error().str()));
}

inline CacheStats stats_of(const LinkCache &cache) {
  auto s = cache.stats();
  REQUIRE(s);
  return *s;
}

inline std::string slurp(const std::filesystem::path &p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

inline void spit(const std::filesystem::path &p, const std::string &data) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out << data;
}

// Sets a file's atime and mtime, which the cache reads as its last use.
inline void set_age(const std::filesystem::path &p, int seconds_ago) {
  timespec t[2];
  t[0].tv_sec = t[1].tv_sec = ::time(nullptr) - seconds_ago;
  t[0].tv_nsec = t[1].tv_nsec = 0;
  REQUIRE(::utimensat(AT_FDCWD, p.c_str(), t, 0) == 0);
}

} // namespace cache_fixtures
