#include "cache/cache_stats.h"

#include <doctest/doctest.h>

#include "cache_fixtures.h"
#include "scratch_dir.h"

#include <cstdint>
#include <filesystem>

using namespace cudaq_rt;
using namespace cache_fixtures;
namespace fs = std::filesystem;

TEST_CASE("eviction removes the least recently used entries") {
  ScratchDir tmp;
  LinkCache probe = open_cache(tmp.path / "probe");
  put_ok(probe, 0);
  const uint64_t entry_size = fs::file_size(probe.entry_path(key_for(0).digest));

  // Four entries fit, a fifth does not; eviction goes down to 90%, that is four again.
  LinkCache cache = open_cache(tmp.path / "cache", entry_size * 9 / 2);
  for (int i = 1; i <= 4; ++i) {
    put_ok(cache, i);
    REQUIRE(fs::file_size(cache.entry_path(key_for(i).digest)) == entry_size);
    set_age(cache.entry_path(key_for(i).digest), 1000 - 100 * i); // 1 is the oldest
  }
  REQUIRE(cache.get(key_for(1))); // now 2 is the least recently used
  put_ok(cache, 5);
  CHECK(fs::exists(cache.entry_path(key_for(1).digest)));
  CHECK_FALSE(fs::exists(cache.entry_path(key_for(2).digest)));
  CHECK(fs::exists(cache.entry_path(key_for(3).digest)));
  CHECK(fs::exists(cache.entry_path(key_for(4).digest)));
  CHECK(fs::exists(cache.entry_path(key_for(5).digest)));
  CacheStats s = stats_of(cache);
  CHECK(s.evictions == 1);
  CHECK(s.entries == 4);
  CHECK(s.bytes == 4 * entry_size);
  CHECK(s.stores == 5);
}

TEST_CASE("prune evicts down to a size, 0 clears, and stale temporary files go") {
  ScratchDir tmp;
  LinkCache cache = open_cache(tmp.path);
  for (int i = 1; i <= 3; ++i) {
    put_ok(cache, i);
    set_age(cache.entry_path(key_for(i).digest), 100 - i);
  }
  const uint64_t entry_size = fs::file_size(cache.entry_path(key_for(1).digest));
  fs::path shard = cache.entry_path(key_for(1).digest).parent_path();
  fs::path stale = shard / ".0123.tmp-4242-abcdef", fresh = shard / ".4567.tmp-4243-abcdef";
  spit(stale, "half an entry");
  spit(fresh, "being written");
  set_age(stale, 7200);

  auto r = cache.prune(2 * entry_size);
  REQUIRE(r);
  CHECK(r->entries == 1);
  CHECK(r->bytes == entry_size);
  CHECK_FALSE(fs::exists(cache.entry_path(key_for(1).digest)));
  CHECK(fs::exists(cache.entry_path(key_for(3).digest)));
  CHECK_FALSE(fs::exists(stale));
  CHECK(fs::exists(fresh));

  r = cache.prune(0);
  REQUIRE(r);
  CHECK(r->entries == 2);
  CacheStats s = stats_of(cache);
  CHECK(s.entries == 0);
  CHECK(s.bytes == 0);
  CHECK(s.evictions == 3);
}

TEST_CASE("the counters add up") {
  ScratchDir tmp;
  LinkCache cache = open_cache(tmp.path);
  put_ok(cache, 1);
  put_ok(cache, 2);
  put_ok(cache, 2);
  CHECK(cache.get(key_for(1)));
  CHECK(cache.get(key_for(2)));
  CHECK(cache.get(key_for(2)));
  CHECK_FALSE(cache.get(key_for(3)));
  CHECK_FALSE(cache.get(key_for(4)));
  CacheStats s = stats_of(cache);
  CHECK(s.hits == 3);
  CHECK(s.misses == 2);
  CHECK(s.stores == 3);
  CHECK(s.evictions == 0);
  CHECK(s.corrupt == 0);
  CHECK(s.entries == 2);
  CHECK(s.bytes == fs::file_size(cache.entry_path(key_for(1).digest)) +
                       fs::file_size(cache.entry_path(key_for(2).digest)));
  CHECK(s.dir == tmp.path);
  CHECK(s.to_json()["hits"] == 3);

  // A unit's entry counts apart from the modules.
  LinkKey unit = LinkKey::make(arch("sm_90"), std::vector<std::string>{"-arch=sm_90"},
                               fake_nvjitlink(), {input(9)}, LinkedForm{LtoMode::per_tu, true});
  CHECK_FALSE(cache.get(unit));
  REQUIRE(cache.put(unit, cubin_for(9), LinkMetadata::from_key(unit)));
  CHECK(cache.get(unit));
  s = stats_of(cache);
  CHECK((s.hits == 3 && s.misses == 2 && s.unit_hits == 1 && s.unit_misses == 1));
  CHECK(s.to_json()["units"]["hits"] == 1);
  CHECK(stats_of(open_cache(tmp.path)).unit_misses == 1);

  // Counters live on disk: another LinkCache over the same directory sees them.
  CHECK(stats_of(open_cache(tmp.path)).hits == 3);

  // A lost stats file costs the counters, not the entries or the size bound.
  fs::remove(tmp.path / "v1" / "stats");
  put_ok(cache, 3);
  s = stats_of(cache);
  CHECK(s.stores == 1);
  CHECK(s.entries == 4);
}

TEST_CASE("the stats file is not followed through a link, nor written with another hard link") {
  ScratchDir tmp;
  LinkCache cache = open_cache(tmp.path);
  fs::path outside = tmp.path / "outside";
  fs::create_directory(outside);
  fs::path victim = outside / "precious";
  spit(victim, "a file of the user's");

  SUBCASE("the stats file is a link: not followed, not truncated") {
    fs::create_symlink(victim, tmp.path / "v1" / "stats");
    put_ok(cache, 1); // the counters are advisory: the entry is stored
    CHECK(cache.get(key_for(1)));
    auto s = cache.stats();
    REQUIRE_FALSE(s);
    CHECK(s.error().str() ==
          "'" + (tmp.path / "v1" / "stats").string() + "': is a symbolic link, not a regular file");
  }
  SUBCASE("the stats file has another hard link") {
    fs::create_hard_link(victim, tmp.path / "v1" / "stats");
    put_ok(cache, 1);
    auto s = cache.stats();
    REQUIRE_FALSE(s);
    CHECK(s.error().str() == "'" + (tmp.path / "v1" / "stats").string() +
                                 "': has 2 hard links: refusing to write a file that is also "
                                 "elsewhere");
  }
  CHECK(slurp(victim) == "a file of the user's");
}

TEST_CASE("the stats file is fixed-width lines, read back by the next process") {
  ScratchDir tmp;
  const fs::path path = tmp.path / "stats";
  {
    StatsFile f(path);
    REQUIRE_FALSE(f.error);
    f.counters.hits = 123456;
    f.counters.unit_misses = 2;
    f.counters.remote_bytes_out = UINT64_MAX;
    f.counters.untrusted = 3;
    f.counters.remote_untrusted = 4;
    f.save();
  }
  const std::string text = slurp(path);
  CHECK(text == "hits                      123456\n"
                "misses                         0\n"
                "stores                         0\n"
                "evictions                      0\n"
                "corrupt                        0\n"
                "r_hits                         0\n"
                "r_misses                       0\n"
                "r_corrupt                      0\n"
                "r_stores                       0\n"
                "r_errors                       0\n"
                "r_bytes_in                     0\n"
                "r_bytes_out 18446744073709551615\n"
                "unit_hits                      0\n"
                "unit_misses                    2\n"
                "untrusted                      3\n"
                "r_untrusted                    4\n"
                "bytes                          ?\n");
  {
    StatsFile f(path);
    REQUIRE_FALSE(f.error);
    CHECK(f.counters.hits == 123456);
    CHECK(f.counters.unit_misses == 2);
    CHECK(f.counters.remote_bytes_out == UINT64_MAX);
    CHECK(f.counters.untrusted == 3);
    CHECK(f.counters.remote_untrusted == 4);
    CHECK_FALSE(f.counters.bytes); // "?": unknown until a scan counts them
    f.counters.hits = 1;
    f.counters.remote_bytes_out = 0;
    f.counters.bytes = 4096;
    f.save();
  }
  // Smaller numbers leave no stale tail behind.
  const std::string again = slurp(path);
  CHECK(again.size() == text.size());
  CHECK(again.starts_with("hits                           1\n"));
  CHECK(again.ends_with("bytes                       4096\n"));

  // A damaged value leaves that counter at zero and the others as they were.
  spit(path, "hits             lots\nmisses    9\nstores      -1\nbytes  -4096\n");
  StatsFile damaged(path);
  REQUIRE_FALSE(damaged.error);
  CHECK(damaged.counters.hits == 0);
  CHECK(damaged.counters.misses == 9);
  // A sign is damage too, not the largest value strtoull makes of it.
  CHECK(damaged.counters.stores == 0);
  CHECK_FALSE(damaged.counters.bytes);
}

TEST_CASE("a full cache is evicted down to 90% of its limit") {
  CHECK(evict_target(1000) == 900);
  CHECK(evict_target(256u << 20) == 241591911);
  CHECK(evict_target(9) == 9);
}

TEST_CASE("--cache-stats shows one figure per line, the remote cache's where there is one") {
  CacheStats s;
  s.dir = "/home/u/.cache/cudaq-rt";
  s.enabled = true;
  s.max_bytes = 268435456;
  s.entries = 3;
  s.bytes = 12345;
  s.hits = 10;
  s.misses = 4;
  s.stores = 5;
  s.evictions = 1;
  s.corrupt = 2;
  s.unit_hits = 6;
  s.unit_misses = 7;
  s.untrusted = 8;
  const std::string local = "cache directory  /home/u/.cache/cudaq-rt\n"
                            "enabled          yes\n"
                            "entries          3\n"
                            "size             12345 bytes (max 268435456)\n"
                            "hits             10\n"
                            "misses           4\n"
                            "stores           5\n"
                            "evictions        1\n"
                            "corrupt entries  2\n"
                            "unit hits        6\n"
                            "unit misses      7\n"
                            "untrusted        8\n";
  CHECK(format_cache_stats(s) == local);
  CHECK(s.to_json()["remote"]["url"].is_null());

  s.remote_url = "http://cache.example/c#read-only";
  s.remote_hits = 11;
  s.remote_misses = 12;
  s.remote_corrupt = 1;
  s.remote_untrusted = 2;
  s.remote_stores = 13;
  s.remote_errors = 14;
  s.remote_bytes_in = 1000;
  s.remote_bytes_out = 2000;
  CHECK(format_cache_stats(s) == local + "remote cache     http://cache.example/c#read-only\n"
                                         "remote hits      11\n"
                                         "remote misses    12 (1 corrupt, 2 untrusted)\n"
                                         "remote stores    13\n"
                                         "remote errors    14\n"
                                         "remote bytes     1000 in, 2000 out\n");
  CHECK(s.to_json() == nlohmann::json::parse(R"({
    "dir": "/home/u/.cache/cudaq-rt", "enabled": true, "max_bytes": 268435456,
    "entries": 3, "bytes": 12345, "hits": 10, "misses": 4, "stores": 5, "evictions": 1,
    "corrupt": 2, "untrusted": 8, "units": {"hits": 6, "misses": 7},
    "remote": {"url": "http://cache.example/c#read-only", "hits": 11, "misses": 12,
               "corrupt": 1, "untrusted": 2, "stores": 13, "errors": 14, "bytes_in": 1000,
               "bytes_out": 2000}
  })"));

  s.enabled = false;
  CHECK(format_cache_stats(s).find("\nenabled          no\n") != std::string::npos);
}
