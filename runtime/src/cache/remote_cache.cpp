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
// (3 s), without signals (CURLOPT_NOSIGNAL: the load path runs in other people's processes, and
// libcurl's alarm()-based resolver timeout would steal their SIGALRM). The first request that
// cannot connect or that times out turns the server off for the rest of the process: a link of
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

#include <curl/curl.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <charconv>
#include <cstring>
#include <mutex>
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

void global_init() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

struct Body {
  std::string *out;
  uint64_t max;
  bool too_large = false;
  std::optional<uint64_t> declared; // the response's Content-Length
};

// Notes the Content-Length of the response (the last one, after redirects or a 100 Continue).
size_t read_header(char *data, size_t size, size_t n, void *user) {
  auto *b = static_cast<Body *>(user);
  const std::string_view line(data, size * n);
  constexpr std::string_view name = "content-length:";
  if (line.size() > name.size() &&
      std::equal(name.begin(), name.end(), line.begin(),
                 [](char a, char c) { return a == std::tolower(static_cast<unsigned char>(c)); })) {
    uint64_t v = 0;
    size_t i = name.size();
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t'))
      ++i;
    const char *end = line.data() + line.size();
    auto [p, ec] = std::from_chars(line.data() + i, end, v);
    if (ec == std::errc() && p != line.data() + i)
      b->declared = v;
  }
  return size * n;
}

size_t write_body(char *data, size_t size, size_t n, void *user) {
  auto *b = static_cast<Body *>(user);
  size_t len = size * n;
  if (b->out->size() + len > b->max) {
    b->too_large = true;
    return 0; // aborts the transfer
  }
  b->out->append(data, len);
  return len;
}

struct Upload {
  std::span<const uint8_t> data;
  size_t pos = 0;
};

size_t read_body(char *buf, size_t size, size_t n, void *user) {
  auto *u = static_cast<Upload *>(user);
  size_t len = std::min(size * n, u->data.size() - u->pos);
  std::memcpy(buf, u->data.data() + u->pos, len);
  u->pos += len;
  return len;
}

size_t discard_body(char *, size_t size, size_t n, void *) {
  return size * n;
}

// Errors that say the server is not there, or not answering: no later request will do better.
bool server_silent(CURLcode rc) {
  switch (rc) {
  case CURLE_COULDNT_RESOLVE_HOST:
  case CURLE_COULDNT_RESOLVE_PROXY:
  case CURLE_COULDNT_CONNECT:
  case CURLE_OPERATION_TIMEDOUT:
  case CURLE_SSL_CONNECT_ERROR:
  case CURLE_PEER_FAILED_VERIFICATION:
  case CURLE_SEND_ERROR:
  case CURLE_RECV_ERROR:
  case CURLE_GOT_NOTHING:
    return true;
  default:
    return false;
  }
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
  global_init();
  return std::shared_ptr<RemoteCache>(new RemoteCache(std::move(config), std::move(secret)));
}

bool RemoteCache::down() const {
  return state_->down.load();
}

namespace {

// One request on an easy handle of its own: set up, run, and its response code.
class Request {
public:
  Request(const RemoteConfig &c, const std::string &secret, const std::string &url) {
    h_ = curl_easy_init();
    if (!h_)
      return;
    curl_easy_setopt(h_, CURLOPT_URL, url.c_str());
    curl_easy_setopt(h_, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h_, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(c.connect_timeout_ms));
    curl_easy_setopt(h_, CURLOPT_TIMEOUT_MS, static_cast<long>(c.max_time_ms));
    curl_easy_setopt(h_, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(h_, CURLOPT_ERRORBUFFER, err_);
    // Uploads would otherwise wait up to a second for a 100 Continue that some servers never send.
    headers_ = curl_slist_append(headers_, "Expect:");
    if (c.auth == RemoteConfig::Auth::bearer)
      headers_ = curl_slist_append(headers_, ("Authorization: Bearer " + secret).c_str());
    if (c.auth == RemoteConfig::Auth::basic) {
      curl_easy_setopt(h_, CURLOPT_HTTPAUTH, static_cast<long>(CURLAUTH_BASIC));
      curl_easy_setopt(h_, CURLOPT_USERPWD, secret.c_str());
    }
  }
  ~Request() {
    if (headers_)
      curl_slist_free_all(headers_);
    if (h_)
      curl_easy_cleanup(h_);
  }
  Request(const Request &) = delete;
  Request &operator=(const Request &) = delete;

  CURL *handle() const { return h_; }
  CURLcode perform() {
    if (!h_)
      return CURLE_FAILED_INIT;
    curl_easy_setopt(h_, CURLOPT_HTTPHEADER, headers_);
    err_[0] = '\0';
    return curl_easy_perform(h_);
  }
  long status() const {
    long code = 0;
    curl_easy_getinfo(h_, CURLINFO_RESPONSE_CODE, &code);
    return code;
  }
  std::string why(CURLcode rc) const { return err_[0] ? err_ : curl_easy_strerror(rc); }

private:
  CURL *h_ = nullptr;
  curl_slist *headers_ = nullptr;
  char err_[CURL_ERROR_SIZE] = {};
};

} // namespace

RemoteFetch RemoteCache::fetch(const Digest &key, uint64_t max_bytes) const {
  RemoteFetch f;
  if (down()) {
    f.outcome = RemoteFetch::Outcome::failure;
    f.why = "the server did not answer earlier in this process";
    return f;
  }
  Request req(config_, secret_, config_.entry_url(key));
  const uint64_t bound = std::min(max_bytes, max_entry_bytes);
  Body body{&f.bytes, bound};
  curl_easy_setopt(req.handle(), CURLOPT_HTTPGET, 1L);
  curl_easy_setopt(req.handle(), CURLOPT_WRITEFUNCTION, write_body);
  curl_easy_setopt(req.handle(), CURLOPT_WRITEDATA, &body);
  curl_easy_setopt(req.handle(), CURLOPT_HEADERFUNCTION, read_header);
  curl_easy_setopt(req.handle(), CURLOPT_HEADERDATA, &body);
  // A Content-Length over the bound fails the request at the headers, before any of the body.
  curl_easy_setopt(req.handle(), CURLOPT_MAXFILESIZE_LARGE, static_cast<curl_off_t>(bound));
  CURLcode rc = req.perform();
  if (body.too_large || rc == CURLE_FILESIZE_EXCEEDED) {
    f.outcome = RemoteFetch::Outcome::miss;
    f.why = cat("GET ", key.short_str(), ": the body",
                body.declared ? cat(" (", *body.declared, " bytes)") : "",
                " is larger than an entry can be (", bound, " bytes)");
    f.bytes.clear();
    return f;
  }
  if (rc != CURLE_OK) {
    if (server_silent(rc))
      state_->down = true;
    f.outcome = RemoteFetch::Outcome::failure;
    f.why = cat("GET ", key.short_str(), ": ", req.why(rc));
    f.bytes.clear();
    return f;
  }
  long status = req.status();
  if (status == 200) {
    f.outcome = RemoteFetch::Outcome::hit;
    return f;
  }
  f.bytes.clear();
  f.outcome =
      status == 404 || status == 410 ? RemoteFetch::Outcome::miss : RemoteFetch::Outcome::failure;
  f.why = cat("GET ", key.short_str(), ": HTTP ", status);
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
  Request req(config_, secret_, config_.entry_url(key));
  Upload up{entry};
  curl_easy_setopt(req.handle(), CURLOPT_UPLOAD, 1L);
  curl_easy_setopt(req.handle(), CURLOPT_READFUNCTION, read_body);
  curl_easy_setopt(req.handle(), CURLOPT_READDATA, &up);
  curl_easy_setopt(req.handle(), CURLOPT_INFILESIZE_LARGE, static_cast<curl_off_t>(entry.size()));
  curl_easy_setopt(req.handle(), CURLOPT_WRITEFUNCTION, discard_body);
  CURLcode rc = req.perform();
  if (rc != CURLE_OK) {
    if (server_silent(rc))
      state_->down = true;
    s.why = cat("PUT ", key.short_str(), ": ", req.why(rc));
    return s;
  }
  long status = req.status();
  if (status >= 200 && status < 300) {
    s.ok = true;
    return s;
  }
  if (status == 401 || status == 403 || status == 405) {
    state_->refused = true;
    s.refused = true;
  }
  s.why = cat("PUT ", key.short_str(), ": HTTP ", status);
  return s;
}

bool first_remote_warning() {
  return !warned.exchange(true);
}

} // namespace cudaq_rt
