// The registry client. Why each choice:
// - One easy handle, reset between requests, so that a push of many blobs reuses one connection.
// - Every request is bounded without signals: connecting by `timeout`, a transfer by `stall` (no
//   byte for that long), so that a registry that stops answering mid-pull costs an error, never a
//   hang; there is no bound on a whole transfer, which a large blob on a slow link may need.
// - A body is never read past the size it was asked for (a blob's descriptor size, the manifest
//   bound), so that a hostile registry cannot exhaust memory; and it is returned only after its
//   digest matched.
// - Authentication as the remote cache's (a secret from the variable an option names), plus the
//   token flow that registries use (distribution's "token authentication"): a 401 with
//   `WWW-Authenticate: Bearer realm=...,service=...,scope=...` is answered by asking the realm for a
//   token, with the basic credentials if there are any, and sending the request again once.
#include "oci/registry.h"

#include "oci/auth_file.h"

#include <curl/curl.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <map>
#include <mutex>
#include <vector>

namespace cudaq_rt {
namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  for (char &c : out)
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t'))
    s.remove_prefix(1);
  while (!s.empty() &&
         (s.back() == ' ' || s.back() == '\t' || s.back() == '\r' || s.back() == '\n'))
    s.remove_suffix(1);
  return std::string(s);
}

struct Request {
  std::string method;
  std::string url;
  std::vector<std::string> headers;
  std::span<const uint8_t> body;
  bool has_body = false;
  uint64_t max_body = 0;
  bool authorize = true; // false for the token service, which gets only the basic credentials
};

struct Response {
  CURLcode rc = CURLE_OK;
  std::string curl_error;
  long status = 0;
  std::map<std::string, std::string> headers; // lowercase names, the final response's
  std::string body;
  bool too_large = false;
};

struct Transfer {
  Response *resp;
  uint64_t max;
  std::span<const uint8_t> upload;
  size_t sent = 0;
};

size_t on_header(char *data, size_t size, size_t n, void *user) {
  auto *t = static_cast<Transfer *>(user);
  std::string_view line(data, size * n);
  if (line.starts_with("HTTP/")) {
    t->resp->headers.clear(); // a redirect's or a 100 Continue's headers are not the answer's
    return size * n;
  }
  size_t colon = line.find(':');
  if (colon != line.npos)
    t->resp->headers[lower(line.substr(0, colon))] = trim(line.substr(colon + 1));
  return size * n;
}

size_t on_body(char *data, size_t size, size_t n, void *user) {
  auto *t = static_cast<Transfer *>(user);
  size_t len = size * n;
  if (t->resp->body.size() + len > t->max) {
    t->resp->too_large = true;
    return 0; // aborts the transfer
  }
  t->resp->body.append(data, len);
  return len;
}

size_t on_upload(char *buf, size_t size, size_t n, void *user) {
  auto *t = static_cast<Transfer *>(user);
  size_t len = std::min(size * n, t->upload.size() - t->sent);
  std::memcpy(buf, t->upload.data() + t->sent, len);
  t->sent += len;
  return len;
}

// `key="value"` pairs of a challenge, after its scheme.
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

// What a registry's error body says: `CODE: message`, from the spec's {"errors": [...]}.
std::string error_text(const Response &r) {
  auto j = nlohmann::json::parse(r.body, nullptr, false);
  if (j.is_object() && j.contains("errors") && j["errors"].is_array() && !j["errors"].empty()) {
    std::string out;
    for (const auto &e : j["errors"]) {
      if (!e.is_object())
        continue;
      std::string code = e.value("code", std::string());
      std::string message = e.value("message", std::string());
      out += (out.empty() ? "" : "; ") + code + (message.empty() ? "" : ": " + message);
    }
    if (!out.empty())
      return escape(out);
  }
  return "";
}

} // namespace

struct Registry::Http {
  CURL *h = nullptr;
  char err[CURL_ERROR_SIZE] = {};
  ~Http() {
    if (h)
      curl_easy_cleanup(h);
  }

  Response perform(const RegistryRef &ref, const Request &req, const std::string &auth_header,
                   const std::string &userpwd, RegistryTraffic &traffic) {
    Response resp;
    if (!h)
      h = curl_easy_init();
    if (!h) {
      resp.rc = CURLE_FAILED_INIT;
      resp.curl_error = "cannot start libcurl";
      return resp;
    }
    curl_easy_reset(h); // keeps the connection
    Transfer t{&resp, req.max_body, req.body};
    curl_easy_setopt(h, CURLOPT_URL, req.url.c_str());
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(ref.connect_timeout_ms));
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME,
                     std::max<long>(1, static_cast<long>(ref.stall_ms / 1000)));
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
    if (!ref.ca_file.empty())
      curl_easy_setopt(h, CURLOPT_CAINFO, ref.ca_file.c_str());
    curl_easy_setopt(h, CURLOPT_REDIR_PROTOCOLS_STR, ref.plain_http ? "http,https" : "https");
    // Blobs are often served by a redirect to storage; an Authorization header set here is not
    // sent to another host (libcurl drops it on a redirect off the host).
    curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 1L);
    curl_easy_setopt(h, CURLOPT_MAXREDIRS, 5L);
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, err);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, &t);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &t);
    curl_slist *headers = curl_slist_append(nullptr, "Expect:");
    for (const std::string &line : req.headers)
      headers = curl_slist_append(headers, line.c_str());
    if (!auth_header.empty())
      headers = curl_slist_append(headers, auth_header.c_str());
    if (!userpwd.empty()) {
      curl_easy_setopt(h, CURLOPT_HTTPAUTH, static_cast<long>(CURLAUTH_BASIC));
      curl_easy_setopt(h, CURLOPT_USERPWD, userpwd.c_str());
    }
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers);
    if (req.method == "HEAD") {
      curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
    } else if (req.has_body) {
      curl_easy_setopt(h, CURLOPT_POST, 1L);
      curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(req.body.size()));
      curl_easy_setopt(h, CURLOPT_READFUNCTION, on_upload);
      curl_easy_setopt(h, CURLOPT_READDATA, &t);
      curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, req.method.c_str());
    } else if (req.method != "GET") {
      curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, req.method.c_str());
    }
    err[0] = '\0';
    resp.rc = curl_easy_perform(h);
    curl_slist_free_all(headers);
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &resp.status);
    if (resp.rc != CURLE_OK)
      resp.curl_error = err[0] ? err : curl_easy_strerror(resp.rc);
    ++traffic.requests;
    traffic.bytes_sent += t.sent;
    traffic.bytes_received += resp.body.size();
    return resp;
  }
};

namespace {

void global_init() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

} // namespace

Registry::Registry(RegistryRef ref, std::string secret)
    : ref_(std::move(ref)), secret_(std::move(secret)), http_(std::make_unique<Http>()) {}

Registry::~Registry() = default;

Expected<std::unique_ptr<Registry>> Registry::open(RegistryRef ref, const Getenv &getenv) {
  std::string secret;
  if (ref.auth != RegistryRef::Auth::none) {
    const char *v = getenv(ref.auth_env.c_str());
    if (!v || !*v)
      return make_error("", ref.name(), ": ", ref.auth_env,
                        " is unset or empty, but the "
                        "reference's options take the ",
                        ref.auth == RegistryRef::Auth::bearer ? "bearer token" : "credentials",
                        " from it");
    secret = v;
    if (secret.find_first_of("\r\n") != secret.npos)
      return make_error("", ref.name(), ": ", ref.auth_env, " holds a line break");
    if (ref.auth == RegistryRef::Auth::basic && secret.find(':') == secret.npos)
      return make_error("", ref.name(), ": ", ref.auth_env,
                        " must hold user:password for basic authentication");
  } else {
    auto found = credentials_from_auth_files(ref.host, ref.repository, getenv);
    if (!found)
      return make_error("", ref.name(), ": ", found.error().str());
    if (*found) {
      ref.auth = RegistryRef::Auth::basic;
      ref.auth_file = (*found)->file.string();
      secret = std::move((*found)->user_password);
    }
  }
  global_init();
  return std::unique_ptr<Registry>(new Registry(std::move(ref), std::move(secret)));
}

namespace {

// Sends a request with the registry's credentials; on a Bearer challenge, asks its token service
// once and sends it again. The token is kept for the requests that follow.
class Exchange {
public:
  Exchange(const RegistryRef &ref, const std::string &secret, std::string &token,
           RegistryTraffic &traffic)
      : ref_(ref), secret_(secret), token_(token), traffic_(traffic) {}

  template <class Http> Expected<Response> send(Http &http, const Request &req) {
    Response r = once(http, req);
    if (r.rc == CURLE_OK && r.status == 401 && ref_.auth != RegistryRef::Auth::bearer) {
      auto challenge = r.headers.find("www-authenticate");
      if (challenge != r.headers.end() && lower(challenge->second).starts_with("bearer ")) {
        auto st = fetch_token(http, challenge->second.substr(7));
        if (!st)
          return std::move(st).take_error();
        r = once(http, req);
      }
    }
    if (r.rc != CURLE_OK && !r.too_large)
      return make_error("", ref_.name(), ": ", req.method, " ", path_of(req.url), ": ",
                        r.rc == CURLE_OPERATION_TIMEDOUT ? "the registry stopped answering: " : "",
                        escape(r.curl_error));
    return r;
  }

  static std::string path_of(const std::string &url) {
    size_t scheme = url.find("://");
    size_t slash = url.find('/', scheme == url.npos ? 0 : scheme + 3);
    std::string p = slash == url.npos ? url : url.substr(slash);
    return escape(p.substr(0, p.find('?')));
  }

private:
  template <class Http> Response once(Http &http, const Request &req) {
    std::string header;
    std::string userpwd;
    if (ref_.auth == RegistryRef::Auth::bearer)
      header = "Authorization: Bearer " + secret_;
    else if (!token_.empty())
      header = "Authorization: Bearer " + token_;
    else if (ref_.auth == RegistryRef::Auth::basic)
      userpwd = secret_;
    return http.perform(ref_, req, header, userpwd, traffic_);
  }

  template <class Http> Status fetch_token(Http &http, std::string_view params) {
    auto p = challenge_params(params);
    auto realm = p.find("realm");
    if (realm == p.end() || !(realm->second.starts_with("https://") ||
                              (ref_.plain_http && realm->second.starts_with("http://"))))
      return make_error("", ref_.name(), ": the registry asks for a token from ",
                        realm == p.end() ? "no realm" : quote(realm->second),
                        ", which is not an https:// URL");
    std::string url = realm->second;
    char sep = url.find('?') == url.npos ? '?' : '&';
    CURL *esc = curl_easy_init();
    for (const char *key : {"service", "scope"}) {
      if (auto it = p.find(key); it != p.end()) {
        char *e = curl_easy_escape(esc, it->second.c_str(), static_cast<int>(it->second.size()));
        url += cat(sep, key, "=", e ? e : "");
        curl_free(e);
        sep = '&';
      }
    }
    curl_easy_cleanup(esc);
    Request req{"GET", url, {}, {}, false, 64 << 10, false};
    std::string userpwd = ref_.auth == RegistryRef::Auth::basic ? secret_ : "";
    Response r = http.perform(ref_, req, "", userpwd, traffic_);
    if (r.rc != CURLE_OK)
      return make_error("", ref_.name(), ": token service ", path_of(url), ": ",
                        escape(r.curl_error));
    if (r.status != 200)
      return make_error("", ref_.name(), ": the token service refused (HTTP ", r.status, ")",
                        ref_.auth == RegistryRef::Auth::none ? ": no credentials were given "
                                                               "(basic-env=VAR)"
                                                             : ": check the credentials");
    auto j = nlohmann::json::parse(r.body, nullptr, false);
    std::string token;
    if (j.is_object())
      for (const char *key : {"token", "access_token"})
        if (j.contains(key) && j[key].is_string())
          token = j[key].get<std::string>();
    if (token.empty() || token.find_first_of("\r\n") != token.npos)
      return make_error("", ref_.name(), ": the token service's answer holds no token");
    token_ = token;
    return Status::ok();
  }

  const RegistryRef &ref_;
  const std::string &secret_;
  std::string &token_;
  RegistryTraffic &traffic_;
};

Error http_error(const RegistryRef &ref, const Request &req, const Response &r,
                 std::string_view what) {
  std::string detail = error_text(r);
  std::string hint;
  if (r.status == 401)
    hint = ref.auth == RegistryRef::Auth::none
               ? " (the registry wants credentials: add #basic-env=VAR or #bearer-env=VAR)"
           : ref.auth_file.empty()
               ? " (the credentials were refused)"
               : " (the credentials of " + quote(ref.auth_file) + " were refused)";
  return make_error("", ref.name(), ": ", what, ": HTTP ", r.status,
                    detail.empty() ? "" : " " + detail, hint, " (", req.method, " ",
                    Exchange::path_of(req.url), ")");
}

} // namespace

Expected<bool> Registry::has_blob(const Digest &d) {
  Request req{"HEAD", cat(ref_.base_url(), "/blobs/", d.str()), {}, {}, false, 0};
  auto r = Exchange(ref_, secret_, token_, traffic_).send(*http_, req);
  if (!r)
    return std::move(r).take_error();
  if (r->status == 200)
    return true;
  if (r->status == 404)
    return false;
  return http_error(ref_, req, *r, cat("cannot tell whether blob ", d.short_str(), " is there"));
}

Status Registry::put_blob(const Digest &d, std::span<const uint8_t> bytes) {
  Exchange ex(ref_, secret_, token_, traffic_);
  // Every body goes as application/octet-stream: libcurl's default form type makes
  // distribution refuse an upload (a 500 on PATCH, DIGEST_INVALID on PUT).
  Request start{"POST",
                ref_.base_url() + "/blobs/uploads/",
                {"Content-Type: application/octet-stream"},
                {},
                true,
                64 << 10};
  auto r = ex.send(*http_, start);
  if (!r)
    return std::move(r).take_error();
  if (r->status != 202)
    return http_error(ref_, start, *r, cat("cannot start the upload of blob ", d.short_str()));
  auto absolute = [&](const Response &resp) -> std::optional<std::string> {
    auto loc = resp.headers.find("location");
    if (loc == resp.headers.end() || loc->second.empty())
      return std::nullopt;
    if (loc->second.front() == '/')
      return cat(ref_.plain_http ? "http://" : "https://", ref_.host, loc->second);
    return loc->second;
  };
  std::optional<std::string> location = absolute(*r);
  if (!location)
    return make_error("", ref_.name(), ": the registry started an upload without a Location");
  // Chunks beyond the first chunk_bytes, each a PATCH with its range; the last bytes go with the
  // closing PUT.
  const uint64_t chunk_bytes = ref_.chunk_bytes;
  size_t done = 0;
  while (bytes.size() - done > chunk_bytes) {
    Request patch{"PATCH",
                  *location,
                  {"Content-Type: application/octet-stream",
                   cat("Content-Range: ", done, "-", done + chunk_bytes - 1)},
                  bytes.subspan(done, chunk_bytes),
                  true,
                  64 << 10};
    auto pr = ex.send(*http_, patch);
    if (!pr)
      return std::move(pr).take_error();
    if (pr->status != 202)
      return http_error(ref_, patch, *pr, cat("cannot upload blob ", d.short_str()));
    location = absolute(*pr);
    if (!location)
      return make_error("", ref_.name(), ": the registry took a chunk without a Location");
    done += chunk_bytes;
  }
  const char sep = location->find('?') == std::string::npos ? '?' : '&';
  Request put{"PUT",
              cat(*location, sep, "digest=", d.str()),
              {"Content-Type: application/octet-stream"},
              bytes.subspan(done),
              true,
              64 << 10};
  auto pr = ex.send(*http_, put);
  if (!pr)
    return std::move(pr).take_error();
  if (pr->status != 201)
    return http_error(ref_, put, *pr, cat("cannot upload blob ", d.short_str()));
  return Status::ok();
}

Expected<std::string> Registry::get_blob(const Digest &d, uint64_t size) {
  if (size > max_blob_bytes)
    return make_error("", ref_.name(), ": blob ", d.short_str(), " is ", size,
                      " bytes by its descriptor, more than a package's blob may be (",
                      max_blob_bytes, "): refused");
  Request req{"GET", cat(ref_.base_url(), "/blobs/", d.str()), {}, {}, false, size};
  auto r = Exchange(ref_, secret_, token_, traffic_).send(*http_, req);
  if (!r)
    return std::move(r).take_error();
  if (r->too_large)
    return make_error("", ref_.name(), ": blob ", d.short_str(), " is larger than the ", size,
                      " bytes its descriptor says: refused");
  if (r->status != 200)
    return http_error(ref_, req, *r, cat("cannot fetch blob ", d.short_str()));
  if (r->body.size() != size || sha256(r->body) != d)
    return make_error("", ref_.name(), ": blob ", d.short_str(), " as served (", r->body.size(),
                      " bytes) does not match its digest: refused");
  return std::move(r->body);
}

Status Registry::put_manifest(const std::string &reference, const std::string &media_type,
                              std::string_view bytes) {
  Request req{"PUT",
              cat(ref_.base_url(), "/manifests/", reference),
              {"Content-Type: " + media_type},
              as_bytes(bytes),
              true,
              64 << 10};
  auto r = Exchange(ref_, secret_, token_, traffic_).send(*http_, req);
  if (!r)
    return std::move(r).take_error();
  if (r->status != 201)
    return http_error(ref_, req, *r, "cannot store the manifest");
  if (auto got = r->headers.find("docker-content-digest"); got != r->headers.end())
    if (Digest::parse(got->second) != sha256(bytes))
      return make_error("", ref_.name(), ": the registry stored the manifest as ",
                        quote(got->second), ", not as the ", sha256(bytes).str(), " it was sent");
  return Status::ok();
}

Expected<FetchedManifest> Registry::get_manifest(const std::string &reference) {
  Request req{"GET",
              cat(ref_.base_url(), "/manifests/", reference),
              {"Accept: application/vnd.oci.image.manifest.v1+json"},
              {},
              false,
              max_manifest_bytes};
  auto r = Exchange(ref_, secret_, token_, traffic_).send(*http_, req);
  if (!r)
    return std::move(r).take_error();
  if (r->too_large)
    return make_error("", ref_.name(), ": the manifest is larger than ", max_manifest_bytes,
                      " bytes: refused");
  if (r->status == 404)
    return make_error("", ref_.name(), ": no such manifest",
                      error_text(*r).empty() ? "" : " (" + error_text(*r) + ")");
  if (r->status != 200)
    return http_error(ref_, req, *r, "cannot fetch the manifest");
  FetchedManifest m;
  m.digest = sha256(r->body);
  if (auto asked = Digest::parse(reference); asked && *asked != m.digest)
    return make_error("", ref_.name(), ": the manifest served is ", m.digest.short_str(),
                      ", not the one asked for: refused");
  if (auto said = r->headers.find("docker-content-digest"); said != r->headers.end())
    if (Digest::parse(said->second) != m.digest)
      return make_error("", ref_.name(), ": the manifest served does not match the digest ",
                        quote(said->second), " the registry gives for it: refused");
  if (auto ct = r->headers.find("content-type"); ct != r->headers.end())
    m.media_type = ct->second.substr(0, ct->second.find(';'));
  m.bytes = std::move(r->body);
  return m;
}

} // namespace cudaq_rt
