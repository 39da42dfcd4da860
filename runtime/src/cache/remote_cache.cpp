// The remote link cache: entries on an HTTP server that a team already runs.
//
// Why plain HTTP GET and PUT
// --------------------------
// ccache, sccache and Bazel share build results through a server the team already has; so does
// this. The least a server must do is store a file on PUT and return it on GET: nginx with its
// WebDAV module (create_full_put_path on), Apache mod_dav, bazel-remote's plain HTTP API (its /ac/
// namespace with --disable_http_ac_validation), an S3-compatible store at a pre-authorised
// prefix. An entry lives at <base>/<64 hex digits of the key>, flat, because bazel-remote accepts
// nothing else and the others do not care.
//
// What is on the server
// ---------------------
// Exactly the bytes of the local cache's entry file (cache_entry.cpp): the same key, the same
// header, the same two digests. So a fetched entry is decoded by the local cache's own decoder,
// which checks the key in the header, the header's digest and the cubin's digest; then the
// cubin is checked as a fresh link's is (arch, dispatch kernel, handler globals) before it is used
// or copied into the local cache. Whatever fails (a flipped byte, a truncated body, another key's
// entry, an HTML error page served with 200) is a miss, and the link that follows replaces it.
// The server is trusted with nothing: a member of the team who can write to it can make the others
// link, not run code that the checks reject. Like a shared local cache, it trusts its writers for
// the contents of an entry that passes every check.
//
// Never in the way
// ----------------
// A link works without a cache, so a server that is slow, down or failing never fails a link or
// a load. Every request is bounded: connecting by `timeout` (1 s), the whole request by `max-time`
// (3 s), the body by the largest entry, without signals (base/http_client.cpp). The first request
// that cannot connect or that times out turns the server off for the rest of the process: a link of
// eight archs pays the timeout once, not eight times. Each process warns once, at its first
// failure; `-v` notes every miss and why. HTTP errors (a 500, a 403 on PUT) are answers, not
// silence: they are counted and warned about, and the server stays on (a 401, 403 or 405 on a PUT
// stops this process's stores: it behaves as read-only).
//
// Secrets
// -------
// A bearer token or basic-auth credentials are read from an environment variable that the URL's
// options name. The URL itself may not hold user information, so that whatever prints a URL
// (--cache-stats, --json, warnings, link records: no URL goes into those) prints no secret.
// libcurl's own error texts never quote request headers.
#include "cache/remote_cache.h"

#include "base/http_client.h"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <optional>

namespace cudaq_rt {
namespace {

Expected<bool> parse_option(RemoteConfig &c, std::string_view item) {
  size_t eq = item.find('=');
  std::string_view name = item.substr(0, eq);
  std::string_view value = eq == item.npos ? std::string_view() : item.substr(eq + 1);
  auto need_value = [&]() -> std::optional<Error> {
    if (eq == item.npos || value.empty())
      return make_error("", "remote cache option '", name, "' needs a value: ", name, "=...");
    return std::nullopt;
  };
  if (name == "read-only") {
    if (eq != item.npos)
      return make_error("", "remote cache option 'read-only' takes no value");
    c.read_only = true;
  } else if (name == "timeout" || name == "max-time") {
    if (auto e = need_value())
      return *e;
    std::optional<uint32_t> ms = parse_remote_duration(value);
    if (!ms || *ms == 0)
      return make_error("", "remote cache option ", name, "=", quote(value),
                        " is not a duration: expected seconds (2, 2s) or milliseconds (500ms)");
    (name == "timeout" ? c.connect_timeout_ms : c.max_time_ms) = *ms;
  } else if (name == "bearer-env" || name == "basic-env") {
    if (auto e = need_value())
      return *e;
    if (c.auth != RemoteConfig::Auth::none)
      return make_error("", "remote cache options bearer-env and basic-env exclude each other");
    c.auth = name == "bearer-env" ? RemoteConfig::Auth::bearer : RemoteConfig::Auth::basic;
    c.auth_env = value;
  } else {
    return make_error("", "unknown remote cache option ", quote(name),
                      ": expected read-only, timeout=D, max-time=D, bearer-env=VAR or "
                      "basic-env=VAR");
  }
  return true;
}

// A server that did not answer: no later request will do better.
bool server_silent(const HttpResponse &r) {
  return r.failure == HttpFailure::timed_out || r.failure == HttpFailure::unreachable;
}

std::atomic<bool> warned{false};

} // namespace

std::optional<uint32_t> parse_remote_duration(std::string_view text) {
  uint64_t scale = 1000;
  if (text.ends_with("ms")) {
    scale = 1;
    text.remove_suffix(2);
  } else if (text.ends_with("s")) {
    text.remove_suffix(1);
  }
  if (text.empty() || text.size() > 9)
    return std::nullopt;
  uint64_t v = 0;
  for (char ch : text) {
    if (ch < '0' || ch > '9')
      return std::nullopt;
    v = v * 10 + static_cast<uint64_t>(ch - '0');
  }
  v *= scale;
  if (v > UINT32_MAX)
    return std::nullopt;
  return static_cast<uint32_t>(v);
}

Expected<RemoteConfig> RemoteConfig::parse(std::string_view text) {
  RemoteConfig c;
  size_t hash = text.find('#');
  std::string_view url = text.substr(0, hash);
  std::string_view scheme_end = "://";
  size_t colon = url.find(scheme_end);
  std::string scheme;
  if (colon != url.npos)
    for (char ch : url.substr(0, colon))
      scheme += static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  if (scheme != "http" && scheme != "https")
    return make_error("", "remote cache ", quote(url), " is not an http:// or https:// URL");
  std::string_view rest = url.substr(colon + scheme_end.size());
  std::string_view authority = rest.substr(0, rest.find('/'));
  if (authority.empty())
    return make_error("", "remote cache ", quote(url), " names no server");
  if (authority.find('@') != authority.npos)
    return make_error("", "remote cache URL holds user information: give credentials with the "
                          "bearer-env=VAR or basic-env=VAR option instead, so that no URL that "
                          "is printed holds a secret");
  if (url.find_first_of("?") != url.npos)
    return make_error("", "remote cache ", quote(url),
                      " has a query: entries are named by appending /KEY to the URL");
  for (char ch : url)
    if (static_cast<unsigned char>(ch) <= ' ' || ch == 0x7f)
      return make_error("", "remote cache URL holds a space or a control character");
  while (url.size() > colon + scheme_end.size() + authority.size() && url.ends_with('/'))
    url.remove_suffix(1);
  c.url = url;
  if (hash != text.npos) {
    std::string_view opts = text.substr(hash + 1);
    while (!opts.empty()) {
      size_t comma = opts.find(',');
      std::string_view item = opts.substr(0, comma);
      if (!item.empty())
        if (auto ok = parse_option(c, item); !ok)
          return ok.error();
      opts = comma == opts.npos ? std::string_view() : opts.substr(comma + 1);
    }
  }
  if (c.max_time_ms < c.connect_timeout_ms)
    c.max_time_ms = c.connect_timeout_ms;
  return c;
}

std::string RemoteConfig::entry_url(const Digest &key) const {
  return url + "/" + key.hex();
}

std::string RemoteConfig::str() const {
  std::string opts;
  auto add = [&](const std::string &o) { opts += (opts.empty() ? "#" : ",") + o; };
  if (read_only)
    add("read-only");
  if (connect_timeout_ms != default_connect_timeout_ms)
    add(cat("timeout=", connect_timeout_ms, "ms"));
  if (max_time_ms != default_max_time_ms)
    add(cat("max-time=", max_time_ms, "ms"));
  if (auth == Auth::bearer)
    add("bearer-env=" + auth_env);
  if (auth == Auth::basic)
    add("basic-env=" + auth_env);
  return url + opts;
}

struct RemoteCache::State {
  std::atomic<bool> down{false};
  std::atomic<bool> refused{false};
};

RemoteCache::RemoteCache(RemoteConfig config, std::string secret)
    : config_(std::move(config)), secret_(std::move(secret)), state_(std::make_unique<State>()) {}

RemoteCache::~RemoteCache() = default;

Expected<std::shared_ptr<RemoteCache>> RemoteCache::open(RemoteConfig config,
                                                         const Getenv &getenv) {
  std::string secret;
  if (config.auth != RemoteConfig::Auth::none) {
    const char *v = getenv(config.auth_env.c_str());
    if (!v || !*v)
      return make_error("", "remote cache: ", config.auth_env,
                        " is unset or empty, but the URL's options take the ",
                        config.auth == RemoteConfig::Auth::bearer ? "bearer token" : "credentials",
                        " from it");
    secret = v;
    if (secret.find_first_of("\r\n") != secret.npos)
      return make_error("", "remote cache: ", config.auth_env, " holds a line break");
    if (config.auth == RemoteConfig::Auth::basic && secret.find(':') == secret.npos)
      return make_error("", "remote cache: ", config.auth_env,
                        " must hold user:password for basic authentication");
  }
  return std::shared_ptr<RemoteCache>(new RemoteCache(std::move(config), std::move(secret)));
}

bool RemoteCache::down() const {
  return state_->down.load();
}

namespace {

HttpSettings http_settings(const RemoteConfig &c) {
  HttpSettings s;
  s.connect_timeout_ms = c.connect_timeout_ms;
  s.max_time_ms = c.max_time_ms;
  s.plain_http = c.url.find("://") == 4; // http://, where parse allows only http and https
  return s;
}

// A request for the entry of `key`, with the credentials.
HttpRequest entry_request(const RemoteConfig &c, const std::string &secret, const Digest &key) {
  HttpRequest r;
  r.url = c.entry_url(key);
  if (c.auth == RemoteConfig::Auth::bearer)
    r.headers.push_back("Authorization: Bearer " + secret);
  if (c.auth == RemoteConfig::Auth::basic)
    r.basic_credentials = secret;
  return r;
}

} // namespace

// A client per request, so that each has an easy handle of its own: link jobs fetch and store
// in parallel.
RemoteFetch RemoteCache::fetch(const Digest &key, uint64_t max_bytes) const {
  RemoteFetch f;
  if (down()) {
    f.outcome = RemoteFetch::Outcome::failure;
    f.why = "the server did not answer earlier in this process";
    return f;
  }
  HttpRequest req = entry_request(config_, secret_, key);
  const uint64_t bound = std::min(max_bytes, max_entry_bytes);
  req.max_body = bound;
  HttpResponse r = HttpClient(http_settings(config_)).perform(req);
  if (r.failure == HttpFailure::too_large) {
    f.outcome = RemoteFetch::Outcome::miss;
    f.why = cat("GET ", key.short_str(), ": the body",
                r.declared_length ? cat(" (", *r.declared_length, " bytes)") : "",
                " is larger than an entry can be (", bound, " bytes)");
    return f;
  }
  if (r.failure != HttpFailure::none) {
    if (server_silent(r))
      state_->down = true;
    f.outcome = RemoteFetch::Outcome::failure;
    f.why = cat("GET ", key.short_str(), ": ", r.error);
    return f;
  }
  if (r.status == 200) {
    f.outcome = RemoteFetch::Outcome::hit;
    f.bytes = std::move(r.body);
    return f;
  }
  f.outcome = r.status == 404 || r.status == 410 ? RemoteFetch::Outcome::miss
                                                 : RemoteFetch::Outcome::failure;
  f.why = cat("GET ", key.short_str(), ": HTTP ", r.status);
  return f;
}

RemoteStore RemoteCache::store(const Digest &key, std::span<const uint8_t> entry) const {
  RemoteStore s;
  if (config_.read_only || state_->refused) {
    s.refused = true;
    s.why = config_.read_only ? "read-only" : "the server refused an earlier store";
    return s;
  }
  if (down()) {
    s.why = "the server did not answer earlier in this process";
    return s;
  }
  HttpRequest req = entry_request(config_, secret_, key);
  req.method = "PUT";
  req.body = entry;
  req.discard_body = true;
  HttpResponse r = HttpClient(http_settings(config_)).perform(req);
  if (r.failure != HttpFailure::none) {
    if (server_silent(r))
      state_->down = true;
    s.why = cat("PUT ", key.short_str(), ": ", r.error);
    return s;
  }
  if (r.status >= 200 && r.status < 300) {
    s.ok = true;
    return s;
  }
  if (r.status == 401 || r.status == 403 || r.status == 405) {
    state_->refused = true;
    s.refused = true;
  }
  s.why = cat("PUT ", key.short_str(), ": HTTP ", r.status);
  return s;
}

bool first_remote_warning() {
  return !warned.exchange(true);
}

} // namespace cudaq_rt
