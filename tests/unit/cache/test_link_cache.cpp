#include "cache/link_cache.h"

#include <doctest/doctest.h>

#include "scratch_dir.h"

#include <cstdlib>
#include <fcntl.h>
#include <fstream>
#include <map>
#include <set>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

using namespace cudaq_rt;
namespace fs = std::filesystem;

namespace {

TargetArch arch(std::string_view text) {
  auto a = parse_arch(text);
  REQUIRE(a);
  return *a;
}

NvJitLinkIdentity fake_nvjitlink() {
  return {13, 0, "/opt/cuda/lib/libnvJitLink.so.13.0.88", 98806736, 1700000000000000000};
}

Digest input(int i) {
  return sha256(std::string_view(cat("input ", i)));
}

LinkKey key_for(int i, std::vector<std::string> options = {"-arch=sm_90", "-lto"}) {
  return LinkKey::make(arch("sm_90"), options, fake_nvjitlink(), {input(i), input(i + 1000)});
}

std::vector<uint8_t> cubin_for(int i, size_t size = 1000) {
  std::vector<uint8_t> out(size);
  for (size_t j = 0; j < size; ++j)
    out[j] = static_cast<uint8_t>(i * 31 + j * 7);
  return out;
}

LinkMetadata metadata_for(const LinkKey &key) {
  LinkMetadata m = LinkMetadata::from_key(key);
  m.info_log = "ptxas info    : Used 8 registers";
  m.link_time_ms = 24.5;
  m.created = 1700000000;
  return m;
}

LinkCache open_cache(const fs::path &dir, uint64_t max_bytes = CacheConfig::default_max_bytes) {
  CacheConfig config;
  config.dir = dir;
  config.max_bytes = max_bytes;
  auto cache = LinkCache::open(config);
  REQUIRE(cache);
  return *cache;
}

void put_ok(const LinkCache &cache, int i, size_t size = 1000) {
  LinkKey key = key_for(i);
  Status st = cache.put(key, cubin_for(i, size), metadata_for(key));
  REQUIRE_MESSAGE(st, (st ? "" : st.error().str()));
}

std::vector<fs::path> files_under(const fs::path &dir) {
  std::vector<fs::path> out;
  for (const auto &e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file())
      out.push_back(e.path());
  return out;
}

std::string slurp(const fs::path &p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

void spit(const fs::path &p, const std::string &data) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out << data;
}

void set_age(const fs::path &p, int seconds_ago) {
  timespec t[2];
  t[0].tv_sec = t[1].tv_sec = ::time(nullptr) - seconds_ago;
  t[0].tv_nsec = t[1].tv_nsec = 0;
  REQUIRE(::utimensat(AT_FDCWD, p.c_str(), t, 0) == 0);
}

CacheStats stats_of(const LinkCache &cache) {
  auto s = cache.stats();
  REQUIRE(s);
  return *s;
}

} // namespace

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
  CHECK(LinkMetadata::from_key(object).form.text() == "object");
  auto back = LinkMetadata::from_json(LinkMetadata::from_key(per_tu).to_json());
  REQUIRE(back);
  CHECK(back->form == LinkedForm{LtoMode::per_tu});
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

TEST_CASE("an entry round-trips with its metadata") {
  ScratchDir tmp;
  LinkCache cache = open_cache(tmp.path / "cache");
  LinkKey key = key_for(1, {"-arch=sm_90", "-lto", "-kernels-used=k"});
  CHECK_FALSE(cache.get(key));
  std::vector<uint8_t> cubin = cubin_for(1, 4321);
  REQUIRE(cache.put(key, cubin, metadata_for(key)));

  fs::path path = cache.entry_path(key.digest);
  CHECK(path == tmp.path / "cache" / "v1" / key.digest.hex().substr(0, 2) / key.digest.hex());
  CHECK(fs::is_regular_file(path));

  auto entry = cache.get(key);
  REQUIRE(entry);
  CHECK(entry->cubin == cubin);
  CHECK(entry->metadata.arch == "sm_90");
  CHECK(entry->metadata.options == key.options);
  CHECK(entry->metadata.nvjitlink_version == "13.0");
  CHECK(entry->metadata.inputs == key.inputs);
  CHECK(entry->metadata.info_log == "ptxas info    : Used 8 registers");
  CHECK(entry->metadata.link_time_ms == 24.5);
  CHECK(entry->metadata.created == 1700000000);
  CHECK(LinkMetadata::from_json(entry->metadata.to_json())->inputs == key.inputs);

  CHECK_FALSE(cache.get(key_for(2)));
  // An empty cubin is a valid entry, not a corrupt one.
  LinkKey empty = key_for(3);
  REQUIRE(cache.put(empty, {}, metadata_for(empty)));
  auto got = cache.get(empty);
  REQUIRE(got);
  CHECK(got->cubin.empty());
}

TEST_CASE("a corrupt entry is a miss and is removed") {
  struct Damage {
    const char *name;
    std::function<std::string(std::string, const std::string &other)> apply;
  };
  auto flip = [](size_t at) {
    return [at](std::string s, const std::string &) {
      s[at] ^= 0x10;
      return s;
    };
  };
  const std::vector<Damage> damages = {
      {"truncated by one byte", [](std::string s, auto &) { return s.substr(0, s.size() - 1); }},
      {"truncated inside the header", [](std::string s, auto &) { return s.substr(0, 100); }},
      {"one byte too many", [](std::string s, auto &) { return s + '\0'; }},
      {"zero length", [](std::string, auto &) { return std::string(); }},
      {"garbage", [](std::string s, auto &) { return std::string(s.size(), '\x5a'); }},
      {"another key's entry", [](std::string, const std::string &other) { return other; }},
      {"flipped magic", flip(0)},
      {"flipped format version", flip(8)},
      {"flipped reserved word", flip(12)},
      {"flipped key", flip(20)},
      {"flipped metadata length", flip(48)},
      {"flipped cubin size", flip(56)},
      {"flipped cubin digest", flip(64)},
      {"flipped header digest", flip(127)},
      {"flipped metadata byte", flip(140)},
      {"flipped first cubin byte",
       [](std::string s, auto &) {
         s[s.size() - 1000] ^= 1;
         return s;
       }},
      {"flipped last cubin byte",
       [](std::string s, auto &) {
         s.back() ^= 0x80;
         return s;
       }},
  };
  ScratchDir tmp;
  LinkCache cache = open_cache(tmp.path);
  put_ok(cache, 99);
  const std::string other = slurp(cache.entry_path(key_for(99).digest));
  uint64_t corrupt = 0;
  for (const Damage &d : damages) {
    CAPTURE(d.name);
    LinkKey key = key_for(1);
    put_ok(cache, 1);
    fs::path path = cache.entry_path(key.digest);
    REQUIRE(cache.get(key));
    spit(path, d.apply(slurp(path), other));
    CHECK_FALSE(cache.get(key));
    CHECK_FALSE(fs::exists(path));
    CHECK(stats_of(cache).corrupt == ++corrupt);
  }
  CHECK(cache.get(key_for(99)));
}

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

TEST_CASE("configuration comes from the environment") {
  auto config = [](std::map<std::string, std::string> vars) -> Expected<CacheConfig> {
    auto var = [&](const char *name) { return vars.count(name) ? vars[name] : std::string(); };
    CacheEnvironment env{.cache_dir = var("CUDAQ_RT_CACHE_DIR"),
                         .cache_disable = var("CUDAQ_RT_CACHE_DISABLE"),
                         .cache_maxsize = var("CUDAQ_RT_CACHE_MAXSIZE"),
                         .remote_cache = var("CUDAQ_RT_REMOTE_CACHE"),
                         .xdg_cache_home = var("XDG_CACHE_HOME"),
                         .home = var("HOME")};
    auto s = resolve_cache_settings({}, env);
    if (!s)
      return std::move(s).take_error();
    return s->local;
  };
  auto error_of = [&](std::map<std::string, std::string> env) {
    auto c = config(env);
    REQUIRE_FALSE(c);
    return c.error().str();
  };

  auto c = config({{"HOME", "/home/u"}});
  REQUIRE(c);
  CHECK(c->dir == "/home/u/.cache/cudaq-rt");
  CHECK(c->enabled);
  CHECK(c->max_bytes == 256u << 20);

  c = config({{"HOME", "/home/u"}, {"XDG_CACHE_HOME", "/xdg"}});
  REQUIRE(c);
  CHECK(c->dir == "/xdg/cudaq-rt");
  c = config({{"HOME", "/home/u"}, {"XDG_CACHE_HOME", "relative"}});
  REQUIRE(c);
  CHECK(c->dir == "/home/u/.cache/cudaq-rt");
  c = config({{"HOME", "/home/u"}, {"XDG_CACHE_HOME", "/xdg"}, {"CUDAQ_RT_CACHE_DIR", "/c"}});
  REQUIRE(c);
  CHECK(c->dir == "/c");
  CHECK(error_of({{"CUDAQ_RT_CACHE_DIR", "cache"}}) ==
        "CUDAQ_RT_CACHE_DIR='cache' is not an absolute path");
  // No directory at all: no cache, and why (a link goes on without one).
  c = config({});
  REQUIRE(c);
  CHECK_FALSE(c->enabled);
  CHECK(c->unavailable == "no directory for the link cache: set CUDAQ_RT_CACHE_DIR, "
                          "XDG_CACHE_HOME or HOME, or set CUDAQ_RT_CACHE_DISABLE=1");

  for (std::string off : {"1", "true", "TRUE", "yes", "on"}) {
    CAPTURE(off);
    c = config({{"CUDAQ_RT_CACHE_DISABLE", off}});
    REQUIRE(c);
    CHECK_FALSE(c->enabled);
  }
  for (std::string on : {"0", "false", "No", "off", ""}) {
    CAPTURE(on);
    c = config({{"HOME", "/h"}, {"CUDAQ_RT_CACHE_DISABLE", on}});
    REQUIRE(c);
    CHECK(c->enabled);
  }
  CHECK(error_of({{"HOME", "/h"}, {"CUDAQ_RT_CACHE_DISABLE", "maybe"}}) ==
        "CUDAQ_RT_CACHE_DISABLE='maybe' is not a boolean: expected 1, true, yes or on to disable "
        "the cache, or 0, false, no or off");

  const std::pair<const char *, uint64_t> sizes[] = {{"1024", 1024},
                                                     {"4K", 4096},
                                                     {"4k", 4096},
                                                     {"256M", 256u << 20},
                                                     {"2G", uint64_t{2} << 30},
                                                     {"0", 0},
                                                     {"18446744073709551615", UINT64_MAX}};
  for (auto [text, bytes] : sizes) {
    std::string shown = text;
    CAPTURE(shown);
    c = config({{"HOME", "/h"}, {"CUDAQ_RT_CACHE_MAXSIZE", text}});
    REQUIRE(c);
    CHECK(c->max_bytes == bytes);
  }
  for (const char *bad : {"12Q", "-1", "1.5G", "K", " 1", "1 ", "99999999999999999999",
                          "17179869184G", "18446744073709551616", "1T", "0x10"}) {
    std::string shown = bad;
    CAPTURE(shown);
    CHECK(error_of({{"HOME", "/h"}, {"CUDAQ_RT_CACHE_MAXSIZE", bad}}) ==
          cat("CUDAQ_RT_CACHE_MAXSIZE='", bad,
              "' is not a size: expected a number of bytes with an optional K, M or G suffix, "
              "such as 512M (0 means no limit)"));
  }

  // The process environment.
  ::setenv("CUDAQ_RT_CACHE_MAXSIZE", "3M", 1);
  ::setenv("CUDAQ_RT_CACHE_DIR", "/from/env", 1);
  ::setenv("CUDAQ_RT_REMOTE_CACHE", "http://127.0.0.1:1/c#read-only", 1);
  CacheEnvironment process = CacheEnvironment::of_process();
  ::unsetenv("CUDAQ_RT_CACHE_MAXSIZE");
  ::unsetenv("CUDAQ_RT_CACHE_DIR");
  ::unsetenv("CUDAQ_RT_REMOTE_CACHE");
  CHECK(process.cache_maxsize == "3M");
  CHECK(process.cache_dir == "/from/env");
  CHECK(process.remote_cache == "http://127.0.0.1:1/c#read-only");
}

TEST_CASE("a tool's request takes precedence over the environment") {
  const CacheEnvironment env{.cache_dir = "/env/cache",
                             .cache_maxsize = "1M",
                             .remote_cache = "http://127.0.0.1:1/env",
                             .home = "/home/u"};
  auto s = resolve_cache_settings({}, env);
  REQUIRE(s);
  CHECK(s->local.dir == "/env/cache");
  CHECK(s->local.max_bytes == 1u << 20);
  REQUIRE(s->remote);
  CHECK(s->remote->url == "http://127.0.0.1:1/env");

  // --cache-dir and --remote-cache win; a relative --cache-dir is taken from the working directory.
  s = resolve_cache_settings({.dir = "rel/cache", .remote = "http://127.0.0.1:2/flag"}, env);
  REQUIRE(s);
  CHECK(s->local.dir == fs::current_path() / "rel/cache");
  CHECK(s->local.max_bytes == 1u << 20);
  REQUIRE(s->remote);
  CHECK(s->remote->url == "http://127.0.0.1:2/flag");

  // The flag's own error names the flag, the environment's the variable.
  s = resolve_cache_settings({.remote = "ftp://x"}, env);
  REQUIRE_FALSE(s);
  CHECK(s.error().str().starts_with("--remote-cache: "));
  CacheEnvironment bad_remote = env;
  bad_remote.remote_cache = "ftp://x";
  s = resolve_cache_settings({}, bad_remote);
  REQUIRE_FALSE(s);
  CHECK(s.error().str().starts_with("CUDAQ_RT_REMOTE_CACHE: "));

  // --no-cache reads nothing: not even a value that would be an error.
  CacheEnvironment broken = env;
  broken.cache_maxsize = "lots";
  s = resolve_cache_settings({.disable = true}, broken);
  REQUIRE(s);
  CHECK_FALSE(s->local.enabled);
  CHECK_FALSE(s->remote);

  // CUDAQ_RT_CACHE_DISABLE turns both tiers off; no directory at all leaves the remote on.
  CacheEnvironment off = env;
  off.cache_disable = "1";
  s = resolve_cache_settings({}, off);
  REQUIRE(s);
  CHECK_FALSE(s->local.enabled);
  CHECK_FALSE(s->remote);
  s = resolve_cache_settings({}, {.remote_cache = "http://127.0.0.1:1/env"});
  REQUIRE(s);
  CHECK_FALSE(s->local.enabled);
  CHECK_FALSE(s->local.unavailable.empty());
  REQUIRE(s->remote);
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

TEST_CASE("a shared cache's names cannot make a user write or remove files elsewhere") {
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
  SUBCASE("a shard is a link to another directory") {
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
  }
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
  auto cache = open_link_cache({.dir = open_to_all, .disable = false}, warnings);
  REQUIRE(cache);
  CHECK_FALSE(cache->config().enabled);
  REQUIRE(warnings.size() == 1);
  CHECK(warnings[0].rfind("not using a link cache: '" + open_to_all.string() + "': is writable",
                          0) == 0);
}
