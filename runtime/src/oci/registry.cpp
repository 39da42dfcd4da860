// The registry client. Why each choice:
// - One HTTP client (base/http_client.h), kept between requests, so that a push of many blobs
//   reuses one connection.
// - Every request is bounded without signals: connecting by `timeout`, a transfer by `stall` (no
//   byte for that long), so that a registry that stops answering mid-pull costs an error, never a
//   hang; there is no bound on a whole transfer, which a large blob on a slow link may need.
// - A body is never read past the size it was asked for (a blob's descriptor size, the manifest
//   bound), so that a hostile registry cannot exhaust memory; and it is returned only after its
//   digest matched.
// - Redirects are followed (blobs are often served by a redirect to storage), to https:// only
//   unless the reference allows plain HTTP.
// - Authentication as the remote cache's (a secret from the variable an option names), plus the
//   token flow that registries use (distribution's "token authentication"): a 401 with
//   `WWW-Authenticate: Bearer realm=...,service=...,scope=...` is answered by asking the realm for a
//   token, with the basic credentials if there are any, and sending the request again once.
#include "oci/registry.h"

#include "oci/auth_file.h"

#include <nlohmann/json.hpp>

#include <strings.h>

namespace cudaq_rt {
namespace {

// What a registry's error body says: `CODE: message`, from the spec's {"errors": [...]}.
std::string error_text(const HttpResponse &r) {
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

namespace {

HttpSettings http_settings(const RegistryRef &ref) {
  HttpSettings s;
  s.connect_timeout_ms = ref.connect_timeout_ms;
  s.stall_ms = ref.stall_ms;
  s.plain_http = ref.plain_http;
  s.follow_redirects = true;
  s.ca_file = ref.ca_file;
  return s;
}

} // namespace

Registry::Registry(RegistryRef ref, std::string secret)
    : ref_(std::move(ref)), secret_(std::move(secret)), http_(http_settings(ref_)) {}

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
  return std::unique_ptr<Registry>(new Registry(std::move(ref), std::move(secret)));
}

namespace {

// Sends a request with the registry's credentials; on a Bearer challenge, asks its token service
// once and sends it again. The token is kept for the requests that follow.
class Exchange {
public:
  Exchange(const RegistryRef &ref, const std::string &secret, std::string &token,
           RegistryTraffic &traffic, HttpClient &http)
      : ref_(ref), secret_(secret), token_(token), traffic_(traffic), http_(http) {}

  Expected<HttpResponse> send(const HttpRequest &req) {
    HttpResponse r = once(req);
    if (r.failure == HttpFailure::none && r.status == 401 &&
        ref_.auth != RegistryRef::Auth::bearer) {
      auto challenge = r.headers.find("www-authenticate");
      if (challenge != r.headers.end() &&
          ::strncasecmp(challenge->second.c_str(), "bearer ", 7) == 0) {
        auto st = fetch_token(challenge->second.substr(7));
        if (!st)
          return std::move(st).take_error();
        r = once(req);
      }
    }
    if (r.failure != HttpFailure::none && r.failure != HttpFailure::too_large)
      return make_error(
          "", ref_.name(), ": ", req.method, " ", path_of(req.url), ": ",
          r.failure == HttpFailure::timed_out ? "the registry stopped answering: " : "", r.error);
    return r;
  }

  static std::string path_of(const std::string &url) {
    size_t scheme = url.find("://");
    size_t slash = url.find('/', scheme == url.npos ? 0 : scheme + 3);
    std::string p = slash == url.npos ? url : url.substr(slash);
    return escape(p.substr(0, p.find('?')));
  }

private:
  HttpResponse perform(const HttpRequest &req) {
    HttpResponse r = http_.perform(req);
    ++traffic_.requests;
    traffic_.bytes_sent += r.bytes_sent;
    traffic_.bytes_received += r.body.size();
    return r;
  }

  HttpResponse once(HttpRequest req) {
    if (ref_.auth == RegistryRef::Auth::bearer)
      req.headers.push_back("Authorization: Bearer " + secret_);
    else if (!token_.empty())
      req.headers.push_back("Authorization: Bearer " + token_);
    else if (ref_.auth == RegistryRef::Auth::basic)
      req.basic_credentials = secret_;
    return perform(req);
  }

  Status fetch_token(std::string_view params) {
    auto p = challenge_params(params);
    auto realm = p.find("realm");
    if (realm == p.end() || !(realm->second.starts_with("https://") ||
                              (ref_.plain_http && realm->second.starts_with("http://"))))
      return make_error("", ref_.name(), ": the registry asks for a token from ",
                        realm == p.end() ? "no realm" : quote(realm->second),
                        ", which is not an https:// URL");
    std::string url = realm->second;
    char sep = url.find('?') == url.npos ? '?' : '&';
    for (const char *key : {"service", "scope"}) {
      if (auto it = p.find(key); it != p.end()) {
        url += cat(sep, key, "=", url_encode(it->second));
        sep = '&';
      }
    }
    HttpResponse r =
        perform({.url = url,
                 .basic_credentials = ref_.auth == RegistryRef::Auth::basic ? secret_ : "",
                 .max_body = 64 << 10});
    if (r.failure != HttpFailure::none)
      return make_error("", ref_.name(), ": token service ", path_of(url), ": ", r.error);
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
  HttpClient &http_;
};

Error http_error(const RegistryRef &ref, const HttpRequest &req, const HttpResponse &r,
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

Expected<HttpResponse> Registry::send(const HttpRequest &req) {
  return Exchange(ref_, secret_, token_, traffic_, http_).send(req);
}

Expected<bool> Registry::has_blob(const Digest &d) {
  HttpRequest req{.method = "HEAD", .url = cat(ref_.base_url(), "/blobs/", d.str())};
  auto r = send(req);
  if (!r)
    return std::move(r).take_error();
  if (r->status == 200)
    return true;
  if (r->status == 404)
    return false;
  return http_error(ref_, req, *r, cat("cannot tell whether blob ", d.short_str(), " is there"));
}

Status Registry::put_blob(const Digest &d, std::span<const uint8_t> bytes) {
  // Every body goes as application/octet-stream: distribution refuses an upload of a form type
  // (a 500 on PATCH, DIGEST_INVALID on PUT).
  HttpRequest start{.method = "POST",
                    .url = ref_.base_url() + "/blobs/uploads/",
                    .headers = {"Content-Type: application/octet-stream"},
                    .body = std::span<const uint8_t>(),
                    .max_body = 64 << 10};
  auto r = send(start);
  if (!r)
    return std::move(r).take_error();
  if (r->status != 202)
    return http_error(ref_, start, *r, cat("cannot start the upload of blob ", d.short_str()));
  auto absolute = [&](const HttpResponse &resp) -> std::optional<std::string> {
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
    HttpRequest patch{.method = "PATCH",
                      .url = *location,
                      .headers = {"Content-Type: application/octet-stream",
                                  cat("Content-Range: ", done, "-", done + chunk_bytes - 1)},
                      .body = bytes.subspan(done, chunk_bytes),
                      .max_body = 64 << 10};
    auto pr = send(patch);
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
  HttpRequest put{.method = "PUT",
                  .url = cat(*location, sep, "digest=", d.str()),
                  .headers = {"Content-Type: application/octet-stream"},
                  .body = bytes.subspan(done),
                  .max_body = 64 << 10};
  auto pr = send(put);
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
  HttpRequest req{.url = cat(ref_.base_url(), "/blobs/", d.str()), .max_body = size};
  auto r = send(req);
  if (!r)
    return std::move(r).take_error();
  if (r->failure == HttpFailure::too_large)
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
  HttpRequest req{.method = "PUT",
                  .url = cat(ref_.base_url(), "/manifests/", reference),
                  .headers = {"Content-Type: " + media_type},
                  .body = as_bytes(bytes),
                  .max_body = 64 << 10};
  auto r = send(req);
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
  HttpRequest req{.url = cat(ref_.base_url(), "/manifests/", reference),
                  .headers = {"Accept: application/vnd.oci.image.manifest.v1+json"},
                  .max_body = max_manifest_bytes};
  auto r = send(req);
  if (!r)
    return std::move(r).take_error();
  if (r->failure == HttpFailure::too_large)
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
