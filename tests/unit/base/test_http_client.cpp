#include "base/http_client.h"

#include "base/digest.h"
#include "loopback_http_server.h"

#include <doctest/doctest.h>

#include <chrono>
#include <cstdlib>
#include <optional>

using namespace cudaq_rt;
using namespace std::chrono_literals;

namespace {

HttpSettings plain_http() {
  HttpSettings s;
  s.connect_timeout_ms = 2000;
  s.max_time_ms = 10000;
  s.plain_http = true;
  return s;
}

HttpResponse get(const HttpSettings &settings, const std::string &url, uint64_t max_body) {
  return HttpClient(settings).perform({.url = url, .max_body = max_body});
}

// Sends a body that never ends, in 64 KiB chunks, until the client goes away.
void endless_body(HttpConnection &c) {
  const std::string chunk(64 << 10, 'x');
  while (c.written() < (uint64_t{1} << 30) &&
         c.write("10000\r\n" + chunk + "\r\n")) // 0x10000 bytes a chunk
    ;
}

// An environment variable set for one scope, restored after it.
class ScopedEnv {
public:
  ScopedEnv(const char *name, const char *value) : name_(name) {
    if (const char *old = std::getenv(name))
      old_ = old;
    ::setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (old_)
      ::setenv(name_, old_->c_str(), 1);
    else
      ::unsetenv(name_);
  }

private:
  const char *name_;
  std::optional<std::string> old_;
};

} // namespace

TEST_CASE("a body within the bound, the final response's status and headers") {
  LoopbackHttpServer server([](const SeenRequest &, HttpConnection &c) {
    c.write(http_answer(200, "hello", {"X-Thing:  value ", "Content-Type: text/plain"}));
  });
  HttpResponse r = get(plain_http(), server.url("/a"), 5);
  CHECK(r.failure == HttpFailure::none);
  CHECK(r.error.empty());
  CHECK(r.status == 200);
  CHECK(r.body == "hello");
  CHECK(r.declared_length == 5u);
  CHECK(r.headers["x-thing"] == "value");
  CHECK(r.headers["content-type"] == "text/plain");
  REQUIRE(server.requests().size() == 1);
  CHECK(server.requests()[0].method == "GET");
  CHECK(server.requests()[0].target == "/a");
}

TEST_CASE("a declared length over the bound fails at the headers, before the body") {
  LoopbackHttpServer server([](const SeenRequest &, HttpConnection &c) {
    c.write("HTTP/1.1 200 OK\r\nContent-Length: 2147483648\r\n\r\n");
    const std::string block(64 << 10, 'x');
    while (c.written() < (uint64_t{2} << 30) && c.write(block))
      ;
  });
  auto t0 = std::chrono::steady_clock::now();
  HttpResponse r = get(plain_http(), server.url("/huge"), 1 << 20);
  CHECK(std::chrono::steady_clock::now() - t0 < 2s);
  CHECK(r.failure == HttpFailure::too_large);
  CHECK(r.error == "the body (2147483648 bytes) is larger than 1048576 bytes");
  CHECK(r.declared_length == uint64_t{2147483648});
  CHECK(r.body.empty());
  CHECK(r.status == 200);
}

TEST_CASE("a body that grows past the bound stops the transfer there") {
  LoopbackHttpServer server([](const SeenRequest &, HttpConnection &c) {
    c.write("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n");
    endless_body(c);
  });
  HttpResponse r = get(plain_http(), server.url("/endless"), 1 << 20);
  CHECK(r.failure == HttpFailure::too_large);
  CHECK(r.error == "the body is larger than 1048576 bytes");
  CHECK(r.body.empty());
  // Stopped, not drained: the server could write little beyond the bound and the socket buffers.
  CHECK(server.written() < uint64_t{64} << 20);
}

TEST_CASE("a discarded body is read whatever its size, and its status kept") {
  LoopbackHttpServer server([](const SeenRequest &, HttpConnection &c) {
    c.write(http_answer(403, std::string(1 << 20, 'e')));
  });
  HttpResponse r = HttpClient(plain_http()).perform({.url = server.url("/"), .discard_body = true});
  CHECK(r.failure == HttpFailure::none);
  CHECK(r.status == 403);
  CHECK(r.body.empty());
}

TEST_CASE("a server that says nothing: the stall bound, or the whole request's") {
  LoopbackHttpServer server([](const SeenRequest &, HttpConnection &c) { c.hold(20s); });
  SUBCASE("no byte for the stall bound") {
    HttpSettings s = plain_http();
    s.max_time_ms = 0;
    s.stall_ms = 1000;
    auto t0 = std::chrono::steady_clock::now();
    HttpResponse r = get(s, server.url("/stall"), 100);
    auto waited = std::chrono::steady_clock::now() - t0;
    CHECK(r.failure == HttpFailure::timed_out);
    CHECK(r.error == "Operation too slow. Less than 1 bytes/sec transferred the last 1 seconds");
    CHECK(waited >= 900ms);
    CHECK(waited < 3s);
  }
  SUBCASE("the whole request's bound") {
    HttpSettings s = plain_http();
    s.max_time_ms = 300;
    auto t0 = std::chrono::steady_clock::now();
    HttpResponse r = get(s, server.url("/stall"), 100);
    CHECK(std::chrono::steady_clock::now() - t0 < 2s);
    CHECK(r.failure == HttpFailure::timed_out);
    CHECK(r.error.starts_with("Operation timed out after"));
  }
}

TEST_CASE("a server that stops mid-body fails the stall bound too") {
  LoopbackHttpServer server([](const SeenRequest &, HttpConnection &c) {
    c.write("HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nabc");
    c.hold(20s);
  });
  HttpSettings s = plain_http();
  s.max_time_ms = 0;
  s.stall_ms = 1000;
  auto t0 = std::chrono::steady_clock::now();
  HttpResponse r = get(s, server.url("/stall"), 100);
  // libcurl averages the rate over its last five seconds: the bytes that came first keep it
  // above the limit for a while (4.2 s here).
  CHECK(std::chrono::steady_clock::now() - t0 < 8s);
  CHECK(r.failure == HttpFailure::timed_out);
}

TEST_CASE("redirects are followed only when the caller asks") {
  LoopbackHttpServer server([&](const SeenRequest &req, HttpConnection &c) {
    if (req.target == "/from")
      c.write(http_answer(307, "", {"Location: /to"}));
    else
      c.write(http_answer(200, "there"));
  });
  HttpResponse r = get(plain_http(), server.url("/from"), 100);
  CHECK(r.failure == HttpFailure::none);
  CHECK(r.status == 307);
  CHECK(r.headers["location"] == "/to");
  CHECK(server.requests().size() == 1);

  HttpSettings follow = plain_http();
  follow.follow_redirects = true;
  r = get(follow, server.url("/from"), 100);
  CHECK(r.status == 200);
  CHECK(r.body == "there");
  CHECK(r.headers.count("location") == 0); // the final response's headers only
  REQUIRE(server.requests().size() == 3);
  CHECK(server.requests()[2].target == "/to");
}

TEST_CASE("at most five redirects") {
  LoopbackHttpServer server([&](const SeenRequest &, HttpConnection &c) {
    c.write(http_answer(302, "", {"Location: /again"}));
  });
  HttpSettings follow = plain_http();
  follow.follow_redirects = true;
  HttpResponse r = get(follow, server.url("/"), 100);
  CHECK(r.failure == HttpFailure::failed);
  CHECK(r.error.starts_with("Maximum (5) redirects followed"));
  CHECK(server.requests().size() == 6);
}

TEST_CASE("plain HTTP only where the caller allows it") {
  LoopbackHttpServer server(
      [](const SeenRequest &, HttpConnection &c) { c.write(http_answer(200, "x")); });
  HttpSettings tls_only = plain_http();
  tls_only.plain_http = false;
  HttpResponse r = get(tls_only, server.url("/"), 100);
  CHECK(r.failure == HttpFailure::failed);
  CHECK(r.error.find("http") != std::string::npos);
  CHECK(server.requests().empty());
}

TEST_CASE("a server that is not there: unreachable, at once") {
  std::string url;
  {
    LoopbackHttpServer gone([](const SeenRequest &, HttpConnection &) {});
    url = gone.url("/");
  }
  auto t0 = std::chrono::steady_clock::now();
  HttpResponse r = get(plain_http(), url, 1);
  CHECK(std::chrono::steady_clock::now() - t0 < 1s);
  CHECK(r.failure == HttpFailure::unreachable);
  CHECK(r.status == 0);
  CHECK(r.error.find("127.0.0.1") != std::string::npos);
}

TEST_CASE("a body sent: its method, its length, no Expect, basic credentials") {
  LoopbackHttpServer server(
      [](const SeenRequest &, HttpConnection &c) { c.write(http_answer(201, "")); });
  HttpClient client(plain_http());
  const std::string payload(100000, 'p');
  HttpResponse r = client.perform({.method = "PATCH",
                                   .url = server.url("/up"),
                                   .headers = {"Content-Type: application/octet-stream"},
                                   .body = as_bytes(payload),
                                   .basic_credentials = "alice:pw"});
  CHECK(r.failure == HttpFailure::none);
  CHECK(r.status == 201);
  CHECK(r.bytes_sent == payload.size());
  r = client.perform(
      {.method = "POST", .url = server.url("/start"), .body = std::span<const uint8_t>()});
  CHECK(r.status == 201);
  r = client.perform({.method = "PUT", .url = server.url("/put"), .body = as_bytes("entry")});
  CHECK(r.status == 201);
  auto seen = server.requests();
  REQUIRE(seen.size() == 3);
  CHECK(seen[0].method == "PATCH");
  CHECK(seen[0].body == payload);
  CHECK(seen[0].header("content-length") == "100000");
  CHECK(seen[0].header("content-type") == "application/octet-stream");
  CHECK(seen[0].header("authorization") == "Basic YWxpY2U6cHc=");
  CHECK(seen[0].headers.count("expect") == 0);
  CHECK(seen[1].method == "POST");
  CHECK(seen[1].header("content-length") == "0");
  CHECK(seen[1].headers.count("content-type") == 0); // no form type of libcurl's own
  CHECK(seen[2].method == "PUT");
  CHECK(seen[2].body == "entry");
  CHECK(seen[2].headers.count("authorization") == 0);
}

TEST_CASE("a HEAD reads no body, whatever length it declares") {
  LoopbackHttpServer server([](const SeenRequest &, HttpConnection &c) {
    c.write("HTTP/1.1 200 OK\r\nContent-Length: 5000000\r\n\r\n");
  });
  HttpResponse r = HttpClient(plain_http()).perform({.method = "HEAD", .url = server.url("/")});
  CHECK(r.failure == HttpFailure::none);
  CHECK(r.status == 200);
  CHECK(r.declared_length == 5000000u);
  CHECK(server.requests().at(0).method == "HEAD");
}

TEST_CASE("a proxy as libcurl reads it from the environment") {
  LoopbackHttpServer proxy(
      [](const SeenRequest &, HttpConnection &c) { c.write(http_answer(200, "proxied")); });
  ScopedEnv http_proxy("http_proxy", proxy.url().c_str());
  ScopedEnv no_proxy("no_proxy", "");
  HttpResponse r = get(plain_http(), "http://cache.example/entry", 100);
  CHECK(r.body == "proxied");
  REQUIRE(proxy.requests().size() == 1);
  CHECK(proxy.requests()[0].target == "http://cache.example/entry");
}

TEST_CASE("a CA file that is not there fails TLS, naming it") {
  HttpSettings s;
  s.connect_timeout_ms = 2000;
  s.ca_file = "/nonexistent/ca.pem";
  LoopbackHttpServer server([](const SeenRequest &, HttpConnection &) {});
  HttpResponse r = get(s, "https://127.0.0.1:" + std::to_string(server.port()) + "/", 1);
  CHECK(r.failure != HttpFailure::none);
  CHECK(r.error.find("/nonexistent/ca.pem") != std::string::npos);
}

TEST_CASE("query values are percent-encoded as libcurl's curl_easy_escape does") {
  CHECK(url_encode("repository:team/app:pull,push") == "repository%3Ateam%2Fapp%3Apull%2Cpush");
  CHECK(url_encode("A-z_0.9~ é") == "A-z_0.9~%20%C3%A9");
}

TEST_CASE("a challenge's parameters: quoted or not, names in lowercase") {
  auto p = challenge_params(
      R"( Realm="https://auth.example/token",service="reg, one" , scope=repository:app:pull,)"
      R"(error="say \"no\"")");
  CHECK(p.size() == 4);
  CHECK(p["realm"] == "https://auth.example/token");
  CHECK(p["service"] == "reg, one");
  CHECK(p["scope"] == "repository:app:pull");
  CHECK(p["error"] == "say \"no\"");
  CHECK(challenge_params("").empty());
  CHECK(challenge_params("no-equals-sign").empty());
}
