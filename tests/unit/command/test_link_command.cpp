// cudaq-rt-link's command: the usage errors make_link_command gives, what it decides about the
// cache, and run_link_command's cache commands (--cache-stats as text and --json, --cache-prune)
// and dry run, written into strings. Real links are the integration tests' (test_link.py).
#include "command/link_command.h"

#include "base/nvjitlink_library.h"

#include <doctest/doctest.h>

#include "cache/cache_fixtures.h"
#include "package_fixture.h"
#include "scratch_dir.h"

#include <nlohmann/json.hpp>

#include <cstdlib>
#include <filesystem>
#include <set>
#include <string>
#include <sys/stat.h>

using namespace cudaq_rt;
using namespace cache_fixtures;
using package_fixture::example_options;
using package_fixture::packed;
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

std::string usage_error(LinkArgs args) {
  auto c = make_link_command(std::move(args));
  REQUIRE_FALSE(c);
  return c.error().str();
}

LinkCommand command_of(LinkArgs args) {
  auto c = make_link_command(std::move(args));
  REQUIRE_MESSAGE(c, (c ? "" : c.error().str()));
  return *c;
}

// The cache's variables unset, so that only the test's CacheRequest decides.
void clear_cache_environment() {
  for (const char *v : {"CUDAQ_RT_CACHE_DIR", "CUDAQ_RT_CACHE_DISABLE", "CUDAQ_RT_CACHE_MAXSIZE",
                        "CUDAQ_RT_REMOTE_CACHE"})
    ::unsetenv(v);
}

struct Run {
  int rc = -1;
  std::string out, err;
};

Run run(const LinkCommand &c) {
  StringToolOutput o("cudaq-rt-link");
  Run r;
  r.rc = run_link_command(c, o);
  r.out = o.out_text;
  r.err = o.err_text;
  return r;
}

// A cache-only command on `dir`.
LinkCommand cache_command(const fs::path &dir, bool stats, std::optional<std::string> prune = {},
                          bool as_json = false) {
  LinkArgs a;
  a.cache = CacheRequest{.dir = dir};
  a.cache_stats = stats;
  a.prune = std::move(prune);
  a.json = as_json;
  return command_of(std::move(a));
}

// The counters' text of a local cache without a remote, as --cache-stats prints it.
std::string stats_text(const fs::path &dir, const char *enabled, uint64_t entries, uint64_t bytes,
                       uint64_t hits, uint64_t misses, uint64_t stores, uint64_t evictions) {
  return cat("cache directory  ", dir.string(), "\n", "enabled          ", enabled, "\n",
             "entries          ", entries, "\n", "size             ", bytes,
             " bytes (max 268435456)\n", "hits             ", hits, "\n", "misses           ",
             misses, "\n", "stores           ", stores, "\n", "evictions        ", evictions, "\n",
             "corrupt entries  0\n", "unit hits        0\n", "unit misses      0\n",
             "untrusted        0\n");
}

} // namespace

TEST_CASE("usage errors, each the whole line the tool prints") {
  CHECK(usage_error({}) == "no package given");

  LinkArgs push;
  push.push = "app.cudaqpkg";
  push.link.package = "other.cudaqpkg";
  CHECK(usage_error(push) == "--cache-push takes the package: give no other");

  for (const char *bad : {"x", "", "12Q", "-1", "1.5G", "1T"}) {
    std::string text = bad;
    CAPTURE(text);
    LinkArgs prune;
    prune.link.package = "app.cudaqpkg";
    prune.archs = {"sm_90"};
    prune.prune = bad;
    CHECK(usage_error(prune) == "--cache-prune: '" + text + "' is not a size");
  }
  // The size is checked before anything else: it is the first refusal.
  LinkArgs first;
  first.prune = "lots";
  first.push = "app.cudaqpkg";
  first.link.package = "other.cudaqpkg";
  CHECK(usage_error(first) == "--cache-prune: 'lots' is not a size");

  LinkArgs arch;
  arch.link.package = "app.cudaqpkg";
  arch.archs = {"sm_90", "sm_80,sm_9x"};
  CHECK(usage_error(arch) ==
        "--arch: unknown arch 'sm_9x': expected sm_NN with an optional a or f suffix, e.g. sm_90");

  LinkArgs none;
  none.link.package = "app.cudaqpkg";
  CHECK(usage_error(none) == "no target arch: give --arch sm_NN[,sm_NN...]");
  none.archs = {",", ""};
  CHECK(usage_error(none) == "no target arch: give --arch sm_NN[,sm_NN...]");
}

TEST_CASE("a command: archs parsed once, cache commands alone, and a dry run without the cache") {
  LinkArgs a;
  a.link.package = "app.cudaqpkg";
  a.archs = {"sm_90,sm_80", "sm_90", "sm_90a"};
  a.cache = CacheRequest{.dir = "/c", .remote = "http://h/r"};
  a.json = true;
  LinkCommand c = command_of(a);
  REQUIRE(c.link.archs.size() == 3);
  CHECK(c.link.archs[0].str() == "sm_90");
  CHECK(c.link.archs[1].str() == "sm_80");
  CHECK(c.link.archs[2].str() == "sm_90a");
  CHECK(c.link.package == "app.cudaqpkg");
  CHECK(c.cache.dir == "/c");
  CHECK(c.cache.remote == "http://h/r");
  CHECK_FALSE(c.cache.disable);
  CHECK(c.json);
  CHECK_FALSE(c.cache_stats);
  CHECK_FALSE(c.prune);
  CHECK(c.push.empty());

  // --no-cache stays off.
  a.cache.disable = true;
  CHECK(command_of(a).cache.disable);

  // A dry run reads no entry: no cache, unless a cache command needs one.
  LinkArgs dry;
  dry.link.package = "app.cudaqpkg";
  dry.archs = {"sm_90"};
  dry.link.dry_run = true;
  CHECK(command_of(dry).cache.disable);
  dry.cache_stats = true;
  CHECK_FALSE(command_of(dry).cache.disable);
  dry.cache_stats = false;
  dry.prune = "0";
  CHECK_FALSE(command_of(dry).cache.disable);

  // A cache command needs no package and no arch.
  LinkArgs stats;
  stats.cache_stats = true;
  LinkCommand s = command_of(stats);
  CHECK(s.cache_stats);
  CHECK(s.link.package.empty());
  CHECK(s.link.archs.empty());
  LinkArgs prune;
  prune.prune = "512M";
  LinkCommand p = command_of(prune);
  REQUIRE(p.prune);
  CHECK(*p.prune == uint64_t{512} << 20);
  CHECK_FALSE(p.cache_stats);

  // --cache-push takes the package and nothing else, and no arch.
  LinkArgs push;
  push.push = "app.cudaqpkg";
  LinkCommand pc = command_of(push);
  CHECK(pc.push == "app.cudaqpkg");
  CHECK(pc.link.package.empty());
  CHECK_FALSE(pc.cache.disable);
}

TEST_CASE("--cache-stats and --cache-prune print the cache's figures") {
  clear_cache_environment();
  ScratchDir tmp;
  const fs::path dir = tmp.path / "cache";
  {
    LinkCache cache = open_cache(dir);
    put_ok(cache, 1);
    put_ok(cache, 2);
    CHECK(cache.get(key_for(1)));
    CHECK_FALSE(cache.get(key_for(3)));
  }
  const uint64_t bytes = fs::file_size(open_cache(dir).entry_path(key_for(1).digest)) +
                         fs::file_size(open_cache(dir).entry_path(key_for(2).digest));

  Run r = run(cache_command(dir, true));
  CHECK(r.rc == 0);
  CHECK(r.err == "");
  CHECK(r.out == stats_text(dir, "yes", 2, bytes, 1, 1, 2, 0));

  r = run(cache_command(dir, true, {}, true));
  CHECK(r.rc == 0);
  CHECK(r.err == "");
  REQUIRE(r.out.ends_with("}\n"));
  const json doc = json::parse(r.out);
  CHECK(doc.size() == 2);
  CHECK(doc["format_version"] == ToolOutput::json_format_version);
  CHECK(doc["cache"]["entries"] == 2);
  CHECK(doc["cache"]["bytes"] == bytes);
  CHECK(doc["cache"]["hits"] == 1);
  CHECK(doc["cache"]["dir"] == dir.string());

  // Prune first, then the figures after it.
  r = run(cache_command(dir, true, "0"));
  CHECK(r.rc == 0);
  CHECK(r.err == "");
  CHECK(r.out ==
        cat("pruned 2 entries, ", bytes, " bytes\n") + stats_text(dir, "yes", 0, 0, 1, 1, 2, 2));
  r = run(cache_command(dir, false, "0"));
  CHECK(r.rc == 0);
  CHECK(r.out == "pruned 0 entries, 0 bytes\n");
}

TEST_CASE("--json: the cache commands' one document") {
  clear_cache_environment();
  ScratchDir tmp;
  const fs::path dir = tmp.path / "cache";
  put_ok(open_cache(dir), 1);
  const uint64_t bytes = fs::file_size(open_cache(dir).entry_path(key_for(1).digest));

  Run r = run(cache_command(dir, true, "0", true));
  CHECK(r.rc == 0);
  CHECK(r.err == "");
  CHECK(r.out == cat(R"({
  "cache": {
    "bytes": 0,
    "corrupt": 0,
    "dir": ")",
                     dir.string(), R"(",
    "enabled": true,
    "entries": 0,
    "evictions": 1,
    "hits": 0,
    "max_bytes": 268435456,
    "misses": 0,
    "remote": {
      "bytes_in": 0,
      "bytes_out": 0,
      "corrupt": 0,
      "errors": 0,
      "hits": 0,
      "misses": 0,
      "stores": 0,
      "untrusted": 0,
      "url": null
    },
    "stores": 1,
    "units": {
      "hits": 0,
      "misses": 0
    },
    "untrusted": 0
  },
  "format_version": 1,
  "pruned": {
    "bytes": )",
                     bytes, R"(,
    "entries": 1
  }
}
)"));

  r = run(cache_command(dir, false, "0", true));
  CHECK(r.rc == 0);
  CHECK(r.out == "{\n  \"format_version\": 1,\n  \"pruned\": {\n    \"bytes\": 0,\n    "
                 "\"entries\": 0\n  }\n}\n");
}

TEST_CASE("--cache-stats shows the remote cache, never asking it anything") {
  clear_cache_environment();
  ScratchDir tmp;
  const fs::path dir = tmp.path / "cache";
  LinkArgs a;
  a.cache = CacheRequest{.dir = dir, .remote = "http://127.0.0.1:9/c/#read-only,timeout=250ms"};
  a.cache_stats = true;
  Run r = run(command_of(a));
  CHECK(r.rc == 0);
  CHECK(r.err == "");
  CHECK(r.out == stats_text(dir, "yes", 0, 0, 0, 0, 0, 0) +
                     "remote cache     http://127.0.0.1:9/c#read-only,timeout=250ms\n"
                     "remote hits      0\n"
                     "remote misses    0 (0 corrupt, 0 untrusted)\n"
                     "remote stores    0\n"
                     "remote errors    0\n"
                     "remote bytes     0 in, 0 out\n");
}

TEST_CASE("a cache command's failures: one error line, and no document") {
  clear_cache_environment();
  ScratchDir tmp;
  const fs::path dir = tmp.path / "cache";

  SUBCASE("a remote cache that is not a URL") {
    LinkArgs a;
    a.cache = CacheRequest{.dir = dir, .remote = "ftp://h/c"};
    a.cache_stats = true;
    Run r = run(command_of(a));
    CHECK(r.rc == 1);
    CHECK(r.out == "");
    CHECK(r.err == "cudaq-rt-link: error: --remote-cache: remote cache 'ftp://h/c' is not an "
                   "http:// or https:// URL\n");
    CHECK_FALSE(fs::exists(dir));
  }
  SUBCASE("a stats file that is a symbolic link") {
    fs::create_directories(dir / "v1");
    spit(tmp.path / "elsewhere", "a file of the user's");
    fs::create_symlink(tmp.path / "elsewhere", dir / "v1" / "stats");
    const std::string error = "cudaq-rt-link: error: '" + (dir / "v1" / "stats").string() +
                              "': is a symbolic link, not a regular file\n";
    for (bool as_json : {false, true}) {
      CAPTURE(as_json);
      Run r = run(cache_command(dir, true, {}, as_json));
      CHECK(r.rc == 1);
      CHECK(r.out == "");
      CHECK(r.err == error);
      r = run(cache_command(dir, true, "0", as_json));
      CHECK(r.rc == 1);
      CHECK(r.out == "");
      CHECK(r.err == error);
    }
    CHECK(slurp(tmp.path / "elsewhere") == "a file of the user's");
  }
}

TEST_CASE("a cache the tool will not use is a warning, and the figures of no cache") {
  clear_cache_environment();
  ScratchDir tmp;
  const fs::path dir = tmp.path / "open";
  fs::create_directories(dir);
  ::chmod(dir.c_str(), 0777);
  Run r = run(cache_command(dir, true));
  CHECK(r.rc == 0);
  CHECK(r.err == "cudaq-rt-link: warning: not using a link cache: '" + dir.string() +
                     "': is writable by every user, who could then plant code for the GPU: "
                     "share a cache through a group instead\n");
  CHECK(r.out == stats_text(dir, "no", 0, 0, 0, 0, 0, 0));
}

TEST_CASE("a dry run prints each arch's key, options and inputs, and opens no cache") {
  clear_cache_environment();
  ::setenv("CUDAQ_RT_BRIDGE_PATH", CUDAQ_RT_TEST_ECHO_BRIDGE_DIR, 1);
  ::unsetenv(lto_mode_env);
  ScratchDir tmp;
  const fs::path package = packed(example_options(tmp.path, "echo"));
  const fs::path dir = tmp.path / "cache";

  LinkArgs a;
  a.link.package = package;
  a.link.dry_run = true;
  a.archs = {"sm_90,sm_80"};
  a.cache = CacheRequest{.dir = dir};
  const LinkCommand c = command_of(a);

  // What link_package itself plans, on a cache that is off: the values the text must show.
  CacheConfig off;
  off.enabled = false;
  auto no_cache = LinkCache::open(off);
  REQUIRE(no_cache);
  auto planned = link_package(c.link, *no_cache);
  REQUIRE_MESSAGE(planned, (planned ? "" : planned.error().str()));
  REQUIRE(planned->archs.size() == 2);
  std::string want;
  for (const ArchLink &arch : planned->archs) {
    want += arch.arch.str() + "  key " + arch.key.digest.str() + "\n  options:";
    for (const std::string &o : arch.options)
      want += " " + o;
    want += "\n";
    for (const std::string &n : arch.input_names)
      want += "  input: " + n + "\n";
  }

  Run r = run(c);
  CHECK(r.rc == 0);
  CHECK(r.err == "");
  CHECK(r.out == want);
  CHECK(r.out.starts_with("sm_90  key sha256:"));
  CHECK(r.out.find("\nsm_80  key sha256:") != std::string::npos);
  CHECK(r.out.find("\n  options: -arch=sm_90 ") != std::string::npos);
  CHECK(r.out.find("\n  input: dispatcher builtin\n") != std::string::npos);
  CHECK_FALSE(fs::exists(dir));

  LinkArgs j = a;
  j.json = true;
  r = run(command_of(j));
  CHECK(r.rc == 0);
  CHECK(r.err == "");
  const json doc = json::parse(r.out);
  CHECK(doc["package"] == package.string());
  CHECK(doc["bridge"] == "echo");
  CHECK(doc["dispatcher"] == "builtin");
  CHECK(doc["lto"] == "per-tu");
  CHECK(doc["dry_run"] == true);
  CHECK(doc["ok"] == true);
  REQUIRE(doc["archs"].size() == 2);
  for (size_t i = 0; i < 2; ++i) {
    const ArchLink &arch = planned->archs[i];
    const json &ja = doc["archs"][i];
    std::set<std::string> keys;
    for (const auto &[k, v] : ja.items())
      keys.insert(k);
    CHECK(keys == std::set<std::string>{"arch", "cache_hit", "cache_key", "inputs", "key", "lto",
                                        "options"});
    CHECK(ja["arch"] == arch.arch.str());
    CHECK(ja["cache_key"] == arch.key.digest.str());
    CHECK(ja["key"] == arch.key.to_json());
    CHECK(ja["inputs"] == json(arch.input_names));
    CHECK(ja["options"] == json(arch.options));
    CHECK(ja["cache_hit"] == false);
    CHECK(ja["lto"] == "per-tu");
  }
  CHECK(doc.size() == 9); // and format_version
  CHECK(doc["format_version"] == 1);
  // The keys name the nvJitLink they were computed for, so the dry run loaded it: it says which.
  auto lib = process_nvjitlink();
  REQUIRE(lib);
  CHECK(doc["nvjitlink"]["version"] == (*lib)->version());
  CHECK(doc["nvjitlink"]["path"] == (*lib)->resolved);
  CHECK_FALSE(fs::exists(dir));

  // With --cache-stats the dry run opens the cache, and the figures follow the keys.
  LinkArgs s = a;
  s.cache_stats = true;
  r = run(command_of(s));
  CHECK(r.rc == 0);
  CHECK(r.out == want + stats_text(dir, "yes", 0, 0, 0, 0, 0, 0));
}
