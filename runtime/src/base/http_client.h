// One HTTP client (libcurl) for every server cudaq-rt talks to: the remote link cache
// (cache/remote_cache.cpp) and OCI registries (oci/registry.cpp). The comment at the top of
// http_client.cpp says why each rule is there.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace cudaq_rt {

// How a client talks to its server, the same for each of its requests. A bound of 0 is none.
struct HttpSettings {
  uint32_t connect_timeout_ms = 0; // 0: libcurl's (300 s)
  uint32_t max_time_ms = 0;        // a whole request, headers to the body's last byte
  uint32_t stall_ms = 0;           // no byte moved for this long fails (whole seconds, at least 1)
  bool plain_http = false;         // http:// URLs (redirects too) as well as https://
  bool follow_redirects = false;   // at most 5; credentials are not sent to another host
  std::string ca_file;             // PEM certificates to verify the server by, else the system's
};

struct HttpRequest {
  std::string method = "GET"; // GET, HEAD (no body read), PUT, POST, PATCH, ...
  std::string url{};
  std::vector<std::string> headers{};             // "Name: value" lines
  std::optional<std::span<const uint8_t>> body{}; // sent with its Content-Length, even when empty
  std::string basic_credentials{};                // user:password, for basic authentication
  uint64_t max_body = 0; // the most body bytes kept: a body declared or grown larger stops there
  bool discard_body = false; // read the body and drop it, whatever its size (an answer's status)
};

// How a request ended, when it did not end with an answer of the server's.
enum class HttpFailure {
  none,        // the server answered, with whatever status
  too_large,   // the body, or its declared Content-Length, exceeds max_body: stopped there
  timed_out,   // connecting, the whole request or a stall took longer than the settings allow
  unreachable, // no answer: the name did not resolve, nothing connected, TLS failed, the
               // connection broke or closed without a response
  failed,      // anything else: a URL or a scheme refused, too many redirects, ...
};

struct HttpResponse {
  HttpFailure failure = HttpFailure::none;
  std::string error;                          // with a failure: one line, escaped, from libcurl
  long status = 0;                            // the final response's, 0 when none came
  std::map<std::string, std::string> headers; // the final response's, names in lowercase
  std::optional<uint64_t> declared_length;    // its Content-Length
  std::string body;                           // at most max_body bytes; with too_large, empty
  uint64_t bytes_sent = 0;                    // of the request's body
};

// One easy handle, kept between requests so that they share a connection. Not thread-safe: a
// thread of its own uses a client of its own.
class HttpClient {
public:
  explicit HttpClient(HttpSettings settings);
  ~HttpClient();
  HttpClient(const HttpClient &) = delete;
  HttpClient &operator=(const HttpClient &) = delete;

  const HttpSettings &settings() const { return settings_; }
  HttpResponse perform(const HttpRequest &request);

private:
  struct Handle;
  HttpSettings settings_;
  std::unique_ptr<Handle> handle_;
};

// The auth-params of a WWW-Authenticate challenge, after its scheme (RFC 7235: `realm="..."`,
// `scope=...`): names in lowercase, quoted values unquoted.
std::map<std::string, std::string> challenge_params(std::string_view text);

// `text` percent-encoded for a URL's query: all but A-Z a-z 0-9 - . _ ~ as %XX.
std::string url_encode(std::string_view text);

} // namespace cudaq_rt
