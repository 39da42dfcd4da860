#include "cache/remote_cache.h"

#include <doctest/doctest.h>

#include <chrono>
#include <map>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

using namespace cudaq_rt;

namespace {

std::string parse_error(std::string_view text) {
  auto c = RemoteConfig::parse(text);
  REQUIRE_FALSE(c);
  return c.error().str();
}

RemoteCache::Getenv env(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](const char *name) -> const char * {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  };
}

// A loopback port that nothing listens on (bound, then closed).
int closed_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  ::bind(fd, reinterpret_cast<sockaddr *>(&a), sizeof a);
  ::getsockname(fd, reinterpret_cast<sockaddr *>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

} // namespace

TEST_CASE("a URL without options gets the defaults") {
  auto c = RemoteConfig::parse("http://cache.example:8080/cudaq/");
  REQUIRE(c);
  CHECK(c->url == "http://cache.example:8080/cudaq");
  CHECK_FALSE(c->read_only);
  CHECK(c->connect_timeout_ms == 1000);
  CHECK(c->max_time_ms == 3000);
  CHECK(c->auth == RemoteConfig::Auth::none);
  Digest k = sha256(std::string_view("k"));
  CHECK(c->entry_url(k) == "http://cache.example:8080/cudaq/" + k.hex());
  CHECK(c->str() == "http://cache.example:8080/cudaq");
  CHECK(RemoteConfig::parse("HTTPS://h")->url == "HTTPS://h");
  CHECK(RemoteConfig::parse("http://h/")->url == "http://h");
}

TEST_CASE("options in the fragment") {
  auto c = RemoteConfig::parse("https://h/p#read-only,timeout=250ms,max-time=2,bearer-env=TOK");
  REQUIRE(c);
  CHECK(c->url == "https://h/p");
  CHECK(c->read_only);
  CHECK(c->connect_timeout_ms == 250);
  CHECK(c->max_time_ms == 2000);
  CHECK(c->auth == RemoteConfig::Auth::bearer);
  CHECK(c->auth_env == "TOK");
  CHECK(c->str() == "https://h/p#read-only,timeout=250ms,max-time=2000ms,bearer-env=TOK");
  auto b = RemoteConfig::parse("http://h#basic-env=CREDS,,");
  REQUIRE(b);
  CHECK(b->auth == RemoteConfig::Auth::basic);
  // A whole request is never bounded more tightly than its connection.
  CHECK(RemoteConfig::parse("http://h#timeout=5s")->max_time_ms == 5000);
}

TEST_CASE("durations") {
  CHECK(parse_remote_duration("2") == 2000u);
  CHECK(parse_remote_duration("2s") == 2000u);
  CHECK(parse_remote_duration("500ms") == 500u);
  CHECK_FALSE(parse_remote_duration(""));
  CHECK_FALSE(parse_remote_duration("ms"));
  CHECK_FALSE(parse_remote_duration("1.5s"));
  CHECK_FALSE(parse_remote_duration("-1"));
  CHECK_FALSE(parse_remote_duration("5m"));
  CHECK_FALSE(parse_remote_duration("99999999s"));
}

TEST_CASE("bad URLs and options are errors that say what was expected") {
  CHECK(parse_error("ftp://h/x") == "remote cache 'ftp://h/x' is not an http:// or https:// URL");
  CHECK(parse_error("/srv/cache") == "remote cache '/srv/cache' is not an http:// or https:// URL");
  CHECK(parse_error("http:///x") == "remote cache 'http:///x' names no server");
  CHECK(parse_error("http://u:pw@h/x").starts_with("remote cache URL holds user information"));
  CHECK(parse_error("http://u:pw@h/x").find("pw") == std::string::npos);
  CHECK(parse_error("http://h/x?sig=1") ==
        "remote cache 'http://h/x?sig=1' has a query: entries are named by appending /KEY to the "
        "URL");
  CHECK(parse_error("http://h/a b") == "remote cache URL holds a space or a control character");
  CHECK(parse_error("http://h#readonly") ==
        "unknown remote cache option 'readonly': expected read-only, timeout=D, max-time=D, "
        "bearer-env=VAR or basic-env=VAR");
  CHECK(parse_error("http://h#read-only=1") == "remote cache option 'read-only' takes no value");
  CHECK(parse_error("http://h#timeout=") ==
        "remote cache option 'timeout' needs a value: timeout=...");
  CHECK(parse_error("http://h#timeout=0") ==
        "remote cache option timeout='0' is not a duration: expected seconds (2, 2s) or "
        "milliseconds (500ms)");
  CHECK(parse_error("http://h#bearer-env=A,basic-env=B") ==
        "remote cache options bearer-env and basic-env exclude each other");
}

TEST_CASE("credentials come from the environment, and must be there") {
  auto c = RemoteConfig::parse("http://h#bearer-env=TOK");
  REQUIRE(c);
  auto missing = RemoteCache::open(*c, env({}));
  REQUIRE_FALSE(missing);
  CHECK(missing.error().str() == "remote cache: TOK is unset or empty, but the URL's options take "
                                 "the bearer token from it");
  CHECK_FALSE(RemoteCache::open(*c, env({{"TOK", ""}})));
  CHECK_FALSE(RemoteCache::open(*c, env({{"TOK", "a\r\nX-Evil: 1"}})));
  CHECK(RemoteCache::open(*c, env({{"TOK", "secret"}})));
  auto basic = RemoteConfig::parse("http://h#basic-env=CREDS");
  auto no_colon = RemoteCache::open(*basic, env({{"CREDS", "alice"}}));
  REQUIRE_FALSE(no_colon);
  CHECK(no_colon.error().str() ==
        "remote cache: CREDS must hold user:password for basic authentication");
  CHECK(RemoteCache::open(*basic, env({{"CREDS", "alice:pw"}})));
}

TEST_CASE("a server that is not there: a failure, quickly, and the server is off afterwards") {
  auto c = RemoteConfig::parse(cat("http://127.0.0.1:", closed_port(), "/c#timeout=500ms"));
  REQUIRE(c);
  auto r = RemoteCache::open(*c, env({}));
  REQUIRE(r);
  const RemoteCache &remote = **r;
  Digest k = sha256(std::string_view("k"));
  auto t0 = std::chrono::steady_clock::now();
  RemoteFetch f = remote.fetch(k, 1 << 20);
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::milliseconds(500));
  CHECK(f.outcome == RemoteFetch::Outcome::failure);
  CHECK(f.why.starts_with(cat("GET ", k.short_str(), ": ")));
  CHECK(remote.down());
  RemoteStore s = remote.store(k, as_bytes("entry"));
  CHECK_FALSE(s.ok);
  CHECK(s.why == "the server did not answer earlier in this process");
}

TEST_CASE("a read-only remote cache never stores") {
  auto c = RemoteConfig::parse("http://127.0.0.1:9/c#read-only");
  auto r = RemoteCache::open(*c, env({}));
  REQUIRE(r);
  RemoteStore s = (*r)->store(sha256(std::string_view("k")), as_bytes("entry"));
  CHECK(s.refused);
  CHECK_FALSE(s.ok);
  CHECK_FALSE((*r)->down());
}

TEST_CASE("one warning per process") {
  bool first = first_remote_warning();
  CHECK_FALSE(first_remote_warning());
  CHECK_FALSE(first_remote_warning());
  (void)first;
}
