#include "cache/cache_config.h"

#include <doctest/doctest.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>
#include <utility>

using namespace cudaq_rt;
namespace fs = std::filesystem;

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
