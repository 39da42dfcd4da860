// The link cache's configuration (cache_config.h).
#include "cache/cache_config.h"

#include "base/atomic_file.h"

#include <cctype>
#include <cstdlib>

namespace fs = std::filesystem;

namespace cudaq_rt {
namespace {

std::optional<bool> parse_flag(std::string value) {
  for (char &c : value)
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (value == "1" || value == "true" || value == "yes" || value == "on")
    return true;
  if (value.empty() || value == "0" || value == "false" || value == "no" || value == "off")
    return false;
  return std::nullopt;
}

std::string variable(const char *name) {
  const char *v = std::getenv(name);
  return v ? v : "";
}

} // namespace

std::optional<uint64_t> parse_cache_size(std::string_view text) {
  constexpr std::string_view units = "KMG";
  size_t unit =
      text.empty()
          ? units.npos
          : units.find(static_cast<char>(std::toupper(static_cast<unsigned char>(text.back()))));
  uint64_t scale = 1;
  if (unit != units.npos) {
    scale = uint64_t{1} << (10 * (unit + 1));
    text.remove_suffix(1);
  }
  if (text.empty())
    return std::nullopt;
  uint64_t value = 0;
  for (char ch : text) {
    uint64_t digit = static_cast<uint64_t>(ch - '0');
    if (ch < '0' || ch > '9' || value > (UINT64_MAX - digit) / 10)
      return std::nullopt;
    value = value * 10 + digit;
  }
  if (value > UINT64_MAX / scale)
    return std::nullopt;
  return value * scale;
}

CacheEnvironment CacheEnvironment::of_process() {
  return {.cache_dir = variable("CUDAQ_RT_CACHE_DIR"),
          .cache_disable = variable("CUDAQ_RT_CACHE_DISABLE"),
          .cache_maxsize = variable("CUDAQ_RT_CACHE_MAXSIZE"),
          .remote_cache = variable("CUDAQ_RT_REMOTE_CACHE"),
          .xdg_cache_home = variable("XDG_CACHE_HOME"),
          .home = variable("HOME")};
}

Expected<CacheSettings> resolve_cache_settings(const CacheRequest &request,
                                               const CacheEnvironment &env) {
  CacheSettings s;
  CacheConfig &c = s.local;
  if (request.disable) {
    c.enabled = false;
    return s;
  }
  if (!env.cache_disable.empty()) {
    std::optional<bool> disable = parse_flag(env.cache_disable);
    if (!disable)
      return make_error("", "CUDAQ_RT_CACHE_DISABLE=", quote(env.cache_disable),
                        " is not a boolean: expected 1, true, yes or on to disable the cache, or "
                        "0, false, no or off");
    c.enabled = !*disable;
  }
  if (!env.cache_maxsize.empty()) {
    std::optional<uint64_t> size = parse_cache_size(env.cache_maxsize);
    if (!size)
      return make_error("", "CUDAQ_RT_CACHE_MAXSIZE=", quote(env.cache_maxsize),
                        " is not a size: expected a number of bytes with an optional K, M or G "
                        "suffix, such as 512M (0 means no limit)");
    c.max_bytes = *size;
  }
  if (!request.dir.empty()) {
    c.dir = absolute_normal_path(request.dir);
  } else if (!env.cache_dir.empty()) {
    if (!fs::path(env.cache_dir).is_absolute())
      return make_error("", "CUDAQ_RT_CACHE_DIR=", quote(env.cache_dir),
                        " is not an absolute path");
    c.dir = env.cache_dir;
  } else if (!env.xdg_cache_home.empty() && env.xdg_cache_home[0] == '/') {
    c.dir = fs::path(env.xdg_cache_home) / "cudaq-rt"; // the XDG spec ignores relative paths
  } else if (!env.home.empty()) {
    c.dir = fs::path(env.home) / ".cache" / "cudaq-rt";
  } else if (c.enabled) {
    c.enabled = false;
    c.unavailable = "no directory for the link cache: set CUDAQ_RT_CACHE_DIR, XDG_CACHE_HOME or "
                    "HOME, or set CUDAQ_RT_CACHE_DISABLE=1";
  }
  const bool disabled = !c.enabled && c.unavailable.empty();
  const std::string &remote = !request.remote.empty() ? request.remote : env.remote_cache;
  if (!remote.empty() && !disabled) {
    auto parsed = RemoteConfig::parse(remote);
    if (!parsed)
      return make_error("", request.remote.empty() ? "CUDAQ_RT_REMOTE_CACHE: " : "--remote-cache: ",
                        parsed.error().message);
    s.remote = std::move(*parsed);
  }
  return s;
}

} // namespace cudaq_rt
