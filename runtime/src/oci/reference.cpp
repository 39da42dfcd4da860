#include "oci/reference.h"

#include "cache/remote_cache.h"

#include <algorithm>
#include <cctype>
#include <charconv>

namespace cudaq_rt {
namespace {

bool lower_alnum(char c) {
  return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}

// One path component: [a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*
bool valid_component(std::string_view c) {
  if (c.empty() || !lower_alnum(c.front()) || !lower_alnum(c.back()))
    return false;
  for (size_t i = 0; i < c.size(); ++i) {
    if (lower_alnum(c[i]))
      continue;
    if (c[i] == '.' || c[i] == '_') {
      // '.' alone, '_' or '__'
      size_t run = 1;
      while (i + run < c.size() && c[i + run] == c[i])
        ++run;
      if ((c[i] == '.' && run > 1) || run > 2)
        return false;
      i += run - 1;
    } else if (c[i] != '-') {
      return false;
    }
  }
  return true;
}

bool valid_repository(std::string_view r) {
  if (r.empty() || r.size() > 255)
    return false;
  size_t start = 0;
  while (true) {
    size_t slash = r.find('/', start);
    if (!valid_component(r.substr(start, slash == r.npos ? r.npos : slash - start)))
      return false;
    if (slash == r.npos)
      return true;
    start = slash + 1;
  }
}

bool valid_tag(std::string_view t) {
  if (t.empty() || t.size() > 128)
    return false;
  auto word = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; };
  if (!word(t.front()))
    return false;
  return std::all_of(t.begin(), t.end(), [&](char c) { return word(c) || c == '.' || c == '-'; });
}

bool valid_host(std::string_view h) {
  if (h.empty())
    return false;
  std::string_view name = h, port;
  if (h.front() == '[') {
    size_t close = h.find(']');
    if (close == h.npos)
      return false;
    name = h.substr(1, close - 1);
    std::string_view rest = h.substr(close + 1);
    if (!rest.empty() && rest.front() != ':')
      return false;
    port = rest.empty() ? "" : rest.substr(1);
    if (name.empty() || name.find_first_not_of("0123456789abcdefABCDEF:.") != name.npos)
      return false;
  } else {
    size_t colon = h.find(':');
    if (colon != h.npos) {
      name = h.substr(0, colon);
      port = h.substr(colon + 1);
      if (port.empty())
        return false;
    }
    if (name.empty() ||
        name.find_first_not_of("abcdefghijklmnopqrstuvwxyz"
                               "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-") != name.npos)
      return false;
  }
  if (!port.empty() &&
      (port.size() > 5 || port.find_first_not_of("0123456789") != port.npos ||
       std::stoul(std::string(port)) == 0 || std::stoul(std::string(port)) > 65535))
    return false;
  return true;
}

bool loopback_host(std::string_view h) {
  std::string_view name = h;
  if (!h.empty() && h.front() == '[')
    name = h.substr(1, h.find(']') - 1);
  else if (size_t colon = h.find(':'); colon != h.npos)
    name = h.substr(0, colon);
  return name == "localhost" || name == "::1" || name.starts_with("127.");
}

// "4096", "64k", "16M": bytes.
std::optional<uint64_t> parse_chunk_size(std::string_view text) {
  uint64_t unit = 1;
  if (text.ends_with('k') || text.ends_with('K'))
    unit = 1024;
  else if (text.ends_with('M'))
    unit = 1024 * 1024;
  if (unit != 1)
    text.remove_suffix(1);
  uint64_t v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() ||
      v > (uint64_t{1} << 40) / unit)
    return std::nullopt;
  return v * unit;
}

} // namespace

bool is_oci_reference(std::string_view text) {
  return text.starts_with(oci_scheme);
}

Expected<RegistryRef> RegistryRef::parse(std::string_view text) {
  auto bad = [&](std::string_view why) {
    return make_error("", "registry reference ", quote(text), ": ", why,
                      " (expected oci://HOST[:PORT]/REPOSITORY[:TAG|@sha256:HEX][#OPTIONS])");
  };
  if (!is_oci_reference(text))
    return bad("does not start with oci://");
  std::string_view rest = text.substr(oci_scheme.size());
  std::string_view options;
  if (size_t hash = rest.find('#'); hash != rest.npos) {
    options = rest.substr(hash + 1);
    rest = rest.substr(0, hash);
  }
  RegistryRef r;
  size_t slash = rest.find('/');
  if (slash == rest.npos)
    return bad("no repository after the host");
  r.host = rest.substr(0, slash);
  if (r.host.find('@') != std::string::npos)
    return bad("credentials do not go in a reference: use basic-env=VAR or bearer-env=VAR");
  if (!valid_host(r.host))
    return bad(cat("host ", quote(r.host), " is not HOST or HOST:PORT"));
  std::string_view path = rest.substr(slash + 1);
  if (size_t at = path.find('@'); at != path.npos) {
    auto d = Digest::parse(path.substr(at + 1));
    if (!d)
      return bad("the digest after '@' is not sha256:<64 lowercase hex digits>");
    r.digest = *d;
    path = path.substr(0, at);
  } else if (size_t colon = path.rfind(':');
             colon != path.npos && path.find('/', colon) == path.npos) {
    r.tag = path.substr(colon + 1);
    path = path.substr(0, colon);
    if (!valid_tag(r.tag))
      return bad(cat("tag ", quote(r.tag), " is not [A-Za-z0-9_][A-Za-z0-9._-]{0,127}"));
  } else {
    r.tag = "latest";
  }
  if (!valid_repository(path))
    return bad(cat("repository ", quote(path),
                   " is not lowercase letters and digits in '/'-separated components"));
  r.repository = path;
  bool plain_asked = false;
  while (!options.empty()) {
    size_t comma = options.find(',');
    std::string_view item = options.substr(0, comma);
    options = comma == options.npos ? std::string_view() : options.substr(comma + 1);
    size_t eq = item.find('=');
    std::string_view name = item.substr(0, eq);
    std::string_view value = eq == item.npos ? std::string_view() : item.substr(eq + 1);
    if (name == "plain-http" && eq == item.npos) {
      plain_asked = true;
    } else if (name == "https" && eq == item.npos) {
      r.https_asked = true;
    } else if (name == "ca" && !value.empty()) {
      r.ca_file = value;
    } else if (name == "chunk" && !value.empty()) {
      std::optional<uint64_t> bytes = parse_chunk_size(value);
      if (!bytes || *bytes < min_chunk_bytes)
        return bad(cat("option chunk=", quote(value),
                       " is not a size of at least 4k: expected bytes, or a number with k or M"));
      r.chunk_bytes = *bytes;
    } else if ((name == "timeout" || name == "stall") && !value.empty()) {
      std::optional<uint32_t> ms = parse_remote_duration(value);
      if (!ms || *ms == 0)
        return bad(cat("option ", name, "=", quote(value),
                       " is not a duration: expected seconds (2, 2s) or milliseconds (500ms)"));
      (name == "timeout" ? r.connect_timeout_ms : r.stall_ms) = *ms;
    } else if ((name == "bearer-env" || name == "basic-env") && !value.empty()) {
      if (r.auth != Auth::none)
        return bad("options bearer-env and basic-env exclude each other");
      r.auth = name == "bearer-env" ? Auth::bearer : Auth::basic;
      r.auth_env = value;
    } else {
      return bad(cat("option ", quote(item),
                     " is not plain-http, https, ca=FILE, chunk=SIZE, timeout=D, stall=D, "
                     "bearer-env=VAR or basic-env=VAR"));
    }
  }
  if (plain_asked && (r.https_asked || !r.ca_file.empty()))
    return bad("option plain-http excludes https and ca=FILE");
  r.plain_http = plain_asked || (loopback_host(r.host) && !r.https_asked && r.ca_file.empty());
  return r;
}

std::string RegistryRef::base_url() const {
  return cat(plain_http ? "http://" : "https://", host, "/v2/", repository);
}

std::string RegistryRef::name() const {
  return cat(oci_scheme, host, "/", repository, digest ? "@" + digest->str() : ":" + tag);
}

std::string RegistryRef::str() const {
  std::string opts;
  auto add = [&](std::string item) { opts += (opts.empty() ? "#" : ",") + item; };
  if (plain_http && !loopback_host(host))
    add("plain-http");
  if (https_asked)
    add("https");
  if (!ca_file.empty())
    add("ca=" + ca_file);
  if (chunk_bytes != default_chunk_bytes)
    add(cat("chunk=", chunk_bytes));
  if (connect_timeout_ms != default_connect_timeout_ms)
    add(cat("timeout=", connect_timeout_ms, "ms"));
  if (stall_ms != default_stall_ms)
    add(cat("stall=", stall_ms, "ms"));
  if (auth != Auth::none)
    add(cat(auth == Auth::bearer ? "bearer-env=" : "basic-env=", auth_env));
  return name() + opts;
}

} // namespace cudaq_rt
