// The HTTP client. Its servers are a team's cache and a registry, neither of them trusted with
// memory, time or signals; each rule below is one the remote cache or the registry needed.
//
// A bounded body
// --------------
// A response body is kept up to the caller's bound and no further: a Content-Length over it fails
// the request at the headers (CURLOPT_MAXFILESIZE), before a byte of the body, and a body that
// grows past it (chunked, or longer than it said) stops the transfer there. The remote cache
// buffered a hostile server's `Content-Length: 2147483648` up to the local cache's limit, 598 MB
// of memory, before it had this bound (tests/integration/test_remote_cache.py,
// test_a_body_larger_than_an_entry_can_be_is_refused_at_its_headers). A body a caller wants only
// the status of is read and dropped.
//
// Time
// ----
// Connecting is bounded, and so is either the whole request (the remote cache: a link never waits
// for its cache longer than max-time) or a stall (the registry: a large blob on a slow link may
// take long, but a registry that stops sending fails after `stall` without a byte). libcurl
// measures a stall in whole seconds and a rate over its last five: a server silent from the start
// fails after the bound (1.2 s for 1 s), one that stops after sending some bytes a few seconds
// later (4.2 s for 1 s, tests/unit/base/test_http_client.cpp). Nothing raises a signal
// (CURLOPT_NOSIGNAL): the load path runs in other people's processes, and libcurl's alarm()-based
// resolver timeout would take their SIGALRM.
//
// Where a request may go
// ----------------------
// https:// only, unless the caller allows plain HTTP (the remote cache for an http:// URL, a
// registry on a loopback host or with #plain-http), for the request and for any redirect. No
// redirect is followed unless the caller asks: a registry does, since blobs are often served by
// a redirect to storage; libcurl then sends neither the Authorization header nor the basic
// credentials to another host. Proxies are libcurl's from the environment (http_proxy in lowercase
// only, https_proxy, all_proxy, no_proxy), TLS is verified against the system's certificates or
// the caller's CA file.
//
// Bodies sent
// -----------
// A body goes as an upload of known size with the request's method (CURLOPT_UPLOAD, renamed by
// CURLOPT_CUSTOMREQUEST), never as libcurl's POST, whose default form Content-Type distribution
// refuses (a 500 on PATCH, DIGEST_INVALID on PUT). `Expect:` is sent empty: uploads would
// otherwise wait up to a second for a 100 Continue that some servers never send.
//
// Errors
// ------
// A request that got no answer says why in libcurl's own words (its error buffer: the host and
// port, never a request header, so never a secret), escaped to one line, and how it ended as an
// HttpFailure, which tells a server that is not there from one that answered badly.
#include "base/http_client.h"

#include "cudaq_rt/error.h"

#include <curl/curl.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstring>
#include <mutex>

namespace cudaq_rt {
namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  for (char &c : out)
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t'))
    s.remove_prefix(1);
  while (!s.empty() &&
         (s.back() == ' ' || s.back() == '\t' || s.back() == '\r' || s.back() == '\n'))
    s.remove_suffix(1);
  return s;
}

struct Transfer {
  const HttpRequest &request;
  HttpResponse &response;
  size_t sent = 0;
  bool too_large = false;
};

// The headers of the last response: a redirect's or a 100 Continue's are not the answer's.
size_t on_header(char *data, size_t size, size_t n, void *user) {
  auto *t = static_cast<Transfer *>(user);
  const std::string_view line(data, size * n);
  if (line.starts_with("HTTP/")) {
    t->response.headers.clear();
    t->response.declared_length.reset();
    return size * n;
  }
  const size_t colon = line.find(':');
  if (colon == line.npos)
    return size * n;
  std::string name = lower(line.substr(0, colon));
  const std::string_view value = trim(line.substr(colon + 1));
  if (name == "content-length") {
    uint64_t v = 0;
    auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
    if (ec == std::errc() && end != value.data())
      t->response.declared_length = v;
  }
  t->response.headers[std::move(name)] = value;
  return size * n;
}

size_t on_body(char *data, size_t size, size_t n, void *user) {
  auto *t = static_cast<Transfer *>(user);
  const size_t len = size * n;
  if (t->request.discard_body)
    return len;
  if (t->response.body.size() + len > t->request.max_body) {
    t->too_large = true;
    return 0; // stops the transfer
  }
  t->response.body.append(data, len);
  return len;
}

size_t on_upload(char *buf, size_t size, size_t n, void *user) {
  auto *t = static_cast<Transfer *>(user);
  const std::span<const uint8_t> body = *t->request.body;
  const size_t len = std::min(size * n, body.size() - t->sent);
  std::memcpy(buf, body.data() + t->sent, len);
  t->sent += len;
  return len;
}

HttpFailure failure_of(CURLcode rc) {
  switch (rc) {
  case CURLE_OK:
    return HttpFailure::none;
  case CURLE_FILESIZE_EXCEEDED:
    return HttpFailure::too_large;
  case CURLE_OPERATION_TIMEDOUT:
    return HttpFailure::timed_out;
  case CURLE_COULDNT_RESOLVE_HOST:
  case CURLE_COULDNT_RESOLVE_PROXY:
  case CURLE_COULDNT_CONNECT:
  case CURLE_SSL_CONNECT_ERROR:
  case CURLE_PEER_FAILED_VERIFICATION:
  case CURLE_SEND_ERROR:
  case CURLE_RECV_ERROR:
  case CURLE_GOT_NOTHING:
    return HttpFailure::unreachable;
  default:
    return HttpFailure::failed;
  }
}

} // namespace

struct HttpClient::Handle {
  CURL *curl = nullptr;
  char error[CURL_ERROR_SIZE] = {};
  ~Handle() {
    if (curl)
      curl_easy_cleanup(curl);
  }
};

HttpClient::HttpClient(HttpSettings settings)
    : settings_(std::move(settings)), handle_(std::make_unique<Handle>()) {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

HttpClient::~HttpClient() = default;

HttpResponse HttpClient::perform(const HttpRequest &req) {
  HttpResponse resp;
  if (!handle_->curl)
    handle_->curl = curl_easy_init();
  CURL *h = handle_->curl;
  if (!h) {
    resp.failure = HttpFailure::failed;
    resp.error = "cannot start libcurl";
    return resp;
  }
  curl_easy_reset(h); // keeps the connection
  Transfer t{req, resp};
  const HttpSettings &s = settings_;
  const char *protocols = s.plain_http ? "http,https" : "https";
  curl_easy_setopt(h, CURLOPT_URL, req.url.c_str());
  curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, protocols);
  curl_easy_setopt(h, CURLOPT_REDIR_PROTOCOLS_STR, protocols);
  if (s.follow_redirects) {
    curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 1L);
    curl_easy_setopt(h, CURLOPT_MAXREDIRS, 5L);
  }
  if (s.connect_timeout_ms)
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(s.connect_timeout_ms));
  if (s.max_time_ms)
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, static_cast<long>(s.max_time_ms));
  if (s.stall_ms) {
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME,
                     std::max<long>(1, static_cast<long>(s.stall_ms / 1000)));
  }
  if (!s.ca_file.empty())
    curl_easy_setopt(h, CURLOPT_CAINFO, s.ca_file.c_str());
  curl_easy_setopt(h, CURLOPT_ERRORBUFFER, handle_->error);
  curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
  curl_easy_setopt(h, CURLOPT_HEADERDATA, &t);
  curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(h, CURLOPT_WRITEDATA, &t);
  if (!req.discard_body && req.max_body > 0 && req.method != "HEAD")
    curl_easy_setopt(h, CURLOPT_MAXFILESIZE_LARGE, static_cast<curl_off_t>(req.max_body));
  curl_slist *headers = curl_slist_append(nullptr, "Expect:");
  for (const std::string &line : req.headers)
    headers = curl_slist_append(headers, line.c_str());
  curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers);
  if (!req.basic_credentials.empty()) {
    curl_easy_setopt(h, CURLOPT_HTTPAUTH, static_cast<long>(CURLAUTH_BASIC));
    curl_easy_setopt(h, CURLOPT_USERPWD, req.basic_credentials.c_str());
  }
  if (req.method == "HEAD") {
    curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
  } else if (req.body) {
    curl_easy_setopt(h, CURLOPT_UPLOAD, 1L);
    curl_easy_setopt(h, CURLOPT_INFILESIZE_LARGE, static_cast<curl_off_t>(req.body->size()));
    curl_easy_setopt(h, CURLOPT_READFUNCTION, on_upload);
    curl_easy_setopt(h, CURLOPT_READDATA, &t);
    if (req.method != "PUT")
      curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, req.method.c_str());
  } else if (req.method != "GET") {
    curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, req.method.c_str());
  }
  handle_->error[0] = '\0';
  const CURLcode rc = curl_easy_perform(h);
  curl_slist_free_all(headers);
  curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &resp.status);
  resp.bytes_sent = t.sent;
  resp.failure = t.too_large ? HttpFailure::too_large : failure_of(rc);
  if (resp.failure == HttpFailure::too_large) {
    resp.body.clear();
    resp.error =
        cat("the body", resp.declared_length ? cat(" (", *resp.declared_length, " bytes)") : "",
            " is larger than ", req.max_body, " bytes");
  } else if (rc != CURLE_OK) {
    resp.error = escape(handle_->error[0] ? handle_->error : curl_easy_strerror(rc));
  }
  return resp;
}

std::map<std::string, std::string> challenge_params(std::string_view s) {
  std::map<std::string, std::string> out;
  size_t i = 0;
  while (i < s.size()) {
    while (i < s.size() && (s[i] == ' ' || s[i] == ','))
      ++i;
    size_t eq = s.find('=', i);
    if (eq == s.npos)
      break;
    std::string key = lower(trim(s.substr(i, eq - i)));
    i = eq + 1;
    std::string value;
    if (i < s.size() && s[i] == '"') {
      for (++i; i < s.size() && s[i] != '"'; ++i) {
        if (s[i] == '\\' && i + 1 < s.size())
          ++i;
        value += s[i];
      }
      ++i;
    } else {
      size_t end = s.find(',', i);
      value = trim(s.substr(i, end == s.npos ? s.npos : end - i));
      i = end == s.npos ? s.size() : end;
    }
    out[key] = value;
  }
  return out;
}

std::string url_encode(std::string_view text) {
  static constexpr char digits[] = "0123456789ABCDEF";
  std::string out;
  for (char c : text) {
    const auto u = static_cast<unsigned char>(c);
    const bool unreserved = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
                            (c >= '0' && c <= '9') || c == '-' || c == '.' || c == '_' || c == '~';
    if (unreserved) {
      out += c;
    } else {
      out += '%';
      out += digits[u >> 4];
      out += digits[u & 15];
    }
  }
  return out;
}

} // namespace cudaq_rt
