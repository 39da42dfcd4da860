#include "cache/link_cache.h"

#include <doctest/doctest.h>

#include "cache_fixtures.h"
#include "scratch_dir.h"
#include "signing_keys.h"

#include <filesystem>
#include <map>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

using namespace cudaq_rt;
using namespace cache_fixtures;
namespace fs = std::filesystem;

namespace {

std::vector<fs::path> files_under(const fs::path &dir) {
  std::vector<fs::path> out;
  for (const auto &e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file())
      out.push_back(e.path());
  return out;
}

} // namespace

TEST_CASE("an entry larger than the whole cache is not stored") {
  ScratchDir tmp;
  LinkCache small = open_cache(tmp.path / "small", 2000);
  put_ok(small, 1, 1000);
  put_ok(small, 2, 5000);
  CHECK(small.get(key_for(1)));
  CHECK_FALSE(small.get(key_for(2)));
  CHECK_FALSE(fs::exists(small.entry_path(key_for(2).digest)));
  CHECK(stats_of(small).stores == 1);

  LinkCache unlimited = open_cache(tmp.path / "unlimited", 0);
  put_ok(unlimited, 2, 5000);
  CHECK(unlimited.get(key_for(2)));
}

TEST_CASE("a disabled cache stores nothing and never hits") {
  ScratchDir tmp;
  CacheConfig config;
  config.dir = tmp.path / "cache";
  config.enabled = false;
  auto cache = LinkCache::open(config);
  REQUIRE(cache);
  CHECK_FALSE(fs::exists(config.dir));
  LinkKey key = key_for(1);
  REQUIRE(cache->put(key, cubin_for(1), metadata_for(key)));
  CHECK_FALSE(cache->get(key));
  CHECK_FALSE(fs::exists(config.dir));
  CacheStats s = stats_of(*cache);
  CHECK_FALSE(s.enabled);
  CHECK(s.entries == 0);
  CHECK(s.misses == 0);
}

TEST_CASE("several processes share one cache") {
  ScratchDir tmp;
  LinkCache probe = open_cache(tmp.path / "probe");
  put_ok(probe, 0);
  const uint64_t entry_size = fs::file_size(probe.entry_path(key_for(0).digest));
  const uint64_t max_bytes = 20 * entry_size;
  const fs::path dir = tmp.path / "cache";
  LinkCache cache = open_cache(dir, max_bytes);

  constexpr int same_key_writers = 8, distinct_writers = 8, keys_per_writer = 25, readers = 4,
                gets_per_reader = 200;
  constexpr int shared_key = 7777;
  auto check_hit = [](const std::optional<CacheEntry> &e, int i) {
    return !e || e->cubin == cubin_for(i);
  };
  std::vector<pid_t> children;
  auto spawn = [&](auto body) {
    pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0)
      ::_exit(body() ? 0 : 1);
    children.push_back(pid);
  };
  for (int w = 0; w < same_key_writers; ++w)
    spawn([&] {
      LinkKey key = key_for(shared_key);
      return bool(cache.put(key, cubin_for(shared_key), metadata_for(key)));
    });
  for (int w = 0; w < distinct_writers; ++w)
    spawn([&, w] {
      for (int k = 0; k < keys_per_writer; ++k) {
        int i = 1 + w * keys_per_writer + k;
        LinkKey key = key_for(i);
        if (!cache.put(key, cubin_for(i), metadata_for(key)))
          return false;
      }
      return true;
    });
  for (int r = 0; r < readers; ++r)
    spawn([&, r] {
      for (int g = 0; g < gets_per_reader; ++g) {
        int i = g % 3 == 0 ? shared_key : 1 + (g * 7 + r) % (distinct_writers * keys_per_writer);
        if (!check_hit(cache.get(key_for(i)), i))
          return false;
      }
      return true;
    });
  for (pid_t pid : children) {
    int status = 0;
    REQUIRE(::waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
  }

  std::map<std::string, int> index_of_hex;
  index_of_hex[key_for(shared_key).digest.hex()] = shared_key;
  for (int i = 1; i <= distinct_writers * keys_per_writer; ++i)
    index_of_hex[key_for(i).digest.hex()] = i;

  const CacheStats before = stats_of(cache);
  CHECK(before.corrupt == 0);
  CHECK(before.stores == same_key_writers + distinct_writers * keys_per_writer);
  CHECK(before.hits + before.misses == readers * gets_per_reader);
  CHECK(before.bytes <= max_bytes);
  CHECK(before.entries > 0);
  CHECK(before.bytes == before.entries * entry_size);
  CHECK(before.evictions >= distinct_writers * keys_per_writer + 1 - before.entries);

  uint64_t entries = 0;
  for (const fs::path &p : files_under(dir / "v1")) {
    std::string name = p.filename().string();
    if (name == "stats")
      continue;
    CAPTURE(name);
    CHECK(name[0] != '.'); // no temporary file is left behind
    auto it = index_of_hex.find(name);
    REQUIRE(it != index_of_hex.end());
    auto entry = cache.get(key_for(it->second));
    REQUIRE(entry);
    CHECK(entry->cubin == cubin_for(it->second));
    ++entries;
  }
  CHECK(entries == before.entries);
  CHECK(stats_of(cache).hits == before.hits + entries);
}

TEST_CASE("what is not a regular entry is corrupt, and never read, blocked on or followed") {
  ScratchDir tmp;
  LinkCache cache = open_cache(tmp.path, 1 << 20);
  LinkKey key = key_for(1);
  fs::path path = cache.entry_path(key.digest);
  fs::create_directories(path.parent_path());
  fs::path outside = tmp.path / "outside";
  spit(outside, "a file of the user's");
  uint64_t corrupt = 0;
  SUBCASE("a FIFO") {
    REQUIRE(::mkfifo(path.c_str(), 0644) == 0);
  }
  SUBCASE("a link to /dev/zero") {
    fs::create_symlink("/dev/zero", path);
  }
  SUBCASE("a link to a file outside the cache") {
    fs::create_symlink(outside, path);
  }
  SUBCASE("a directory") {
    fs::create_directory(path);
  }
  SUBCASE("larger than the cache's limit") {
    spit(path, "");
    fs::resize_file(path, (1 << 20) + 1);
  }
  CHECK_FALSE(cache.get(key));
  CHECK(stats_of(cache).corrupt == ++corrupt);
  CHECK_FALSE(fs::exists(fs::symlink_status(path))); // removed, so the next put stores a good one
  CHECK(slurp(outside) == "a file of the user's");
  put_ok(cache, 1);
  CHECK(cache.get(key));
}

TEST_CASE("a shared cache's shard cannot make a user write or remove files elsewhere") {
  ScratchDir tmp;
  LinkCache cache = open_cache(tmp.path);
  fs::path outside = tmp.path / "outside";
  fs::create_directory(outside);
  fs::path victim = outside / "precious";
  spit(victim, "a file of the user's");

  LinkKey key = key_for(1);
  fs::path shard = cache.entry_path(key.digest).parent_path();
  fs::create_directory_symlink(outside, shard);
  fs::path planted = outside / cache.entry_path(key.digest).filename();
  spit(planted, "not an entry, but a file of the user's named like one");
  CHECK_FALSE(cache.get(key));
  Status st = cache.put(key, cubin_for(1), metadata_for(key));
  REQUIRE_FALSE(st);
  CHECK(st.error().str() == "'" + shard.string() +
                                "': is a symbolic link, not a directory: nothing is written "
                                "through it");
  CHECK(cache.prune(0));
  CHECK(slurp(planted) == "not an entry, but a file of the user's named like one");
  CHECK(slurp(victim) == "a file of the user's");
}

TEST_CASE("a cache whose directories anyone can write, or whose v1 is a link, is not used") {
  ScratchDir tmp;
  auto open_error = [](const fs::path &dir) {
    CacheConfig config;
    config.dir = dir;
    auto cache = LinkCache::open(config);
    return cache ? std::string("(opened)") : cache.error().str();
  };
  fs::path open_to_all = tmp.path / "open";
  fs::create_directories(open_to_all);
  ::chmod(open_to_all.c_str(), 0777);
  CHECK(open_error(open_to_all) == "'" + open_to_all.string() +
                                       "': is writable by every user, who could then plant code "
                                       "for the GPU: share a cache through a group instead");
  // The group-shared layout the man page describes is fine.
  fs::path group = tmp.path / "group";
  fs::create_directories(group / "v1");
  ::chmod(group.c_str(), 02775);
  ::chmod((group / "v1").c_str(), 02775);
  CHECK(open_error(group) == "(opened)");

  fs::path elsewhere = tmp.path / "elsewhere";
  fs::create_directories(elsewhere);
  fs::path linked = tmp.path / "linked";
  fs::create_directories(linked);
  fs::create_directory_symlink(elsewhere, linked / "v1");
  CHECK(open_error(linked) == "'" + (linked / "v1").string() +
                                  "': is a symbolic link: the link cache's own directories must "
                                  "be directories");

  // The tools go on without a cache, and say why.
  std::vector<std::string> warnings;
  auto cache = open_link_cache({.dir = open_to_all, .disable = false}, {}, warnings);
  REQUIRE(cache);
  CHECK_FALSE(cache->config().enabled);
  REQUIRE(warnings.size() == 1);
  CHECK(warnings[0].rfind("not using a link cache: '" + open_to_all.string() + "': is writable",
                          0) == 0);
}

TEST_CASE("under trust, only an entry a trusted key signed is a hit; others stay and miss") {
  ScratchDir tmp;
  auto k1 = SigningKey::from_pem(test_keys::rfc8032_1_private, "k1");
  auto k2 = SigningKey::from_pem(test_keys::rfc8032_2_private, "k2");
  REQUIRE(k1);
  REQUIRE(k2);
  auto trusts_k1 = std::make_shared<TrustedKeys>();
  trusts_k1->add(k1->public_key());
  const LinkKey key = key_for(7);

  LinkCache plain = open_cache(tmp.path);
  LinkCache by_k2 = open_cache(tmp.path);
  by_k2.set_trust({std::make_shared<const SigningKey>(*k2), nullptr});
  LinkCache by_k1 = open_cache(tmp.path);
  by_k1.set_trust({std::make_shared<const SigningKey>(*k1), nullptr});
  LinkCache strict = open_cache(tmp.path);
  strict.set_trust({nullptr, trusts_k1});

  SUBCASE("unsigned") {
    put_ok(plain, 7);
  }
  SUBCASE("signed by a key that is not trusted") {
    REQUIRE(by_k2.put(key, cubin_for(7), metadata_for(key)));
  }
  CHECK(plain.get(key)); // whole: anyone who does not ask for a signature uses it
  CHECK_FALSE(strict.get(key));
  CacheStats s = stats_of(strict);
  CHECK(s.untrusted == 1);
  CHECK(s.corrupt == 0);
  CHECK(fs::exists(strict.entry_path(key.digest))); // kept, not removed as corrupt

  // The link that follows stores a signed entry over it, and that one hits.
  REQUIRE(by_k1.put(key, cubin_for(7), metadata_for(key)));
  auto hit = strict.get(key);
  REQUIRE(hit);
  CHECK(hit->cubin == cubin_for(7));
  CHECK(stats_of(strict).untrusted == 1);
}
