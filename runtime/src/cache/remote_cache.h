// A link cache on a server the team already runs: any HTTP server that stores a file on PUT and
// returns it on GET. Its entries are the local cache's entry files, byte for byte, under the same
// key; the comment at the top of remote_cache.cpp says why each choice was made.
#pragma once

#include "base/digest.h"
#include "cudaq_rt/error.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>

namespace cudaq_rt {

// The server and how to talk to it: `URL#option,option`. The URL is http:// or https://, without
// user information (credentials come from the environment, never from a URL that is printed).
// Options, in the fragment:
//   read-only          fetch entries, never store any
//   timeout=D          connecting may take at most D (default 1s)
//   max-time=D         a whole request may take at most D (default 3s)
//   bearer-env=VAR     send `Authorization: Bearer $VAR`
//   basic-env=VAR      send basic authentication; $VAR holds user:password
// D is a number of seconds, or a number followed by s or ms.
struct RemoteConfig {
  static constexpr uint32_t default_connect_timeout_ms = 1000;
  static constexpr uint32_t default_max_time_ms = 3000;

  std::string url; // the base, without the fragment and without a trailing slash
  bool read_only = false;
  uint32_t connect_timeout_ms = default_connect_timeout_ms;
  uint32_t max_time_ms = default_max_time_ms;
  enum class Auth { none, bearer, basic } auth = Auth::none;
  std::string auth_env; // the variable that holds the secret, never the secret

  // Parses `URL#options`; the error names what is wrong and what was expected.
  static Expected<RemoteConfig> parse(std::string_view text);
  // The URL an entry lives at: <base>/<64 hex digits of the key>.
  std::string entry_url(const Digest &key) const;
  // The URL with its options, as a user would write it again (no secret is ever in it).
  std::string str() const;
};

// Parses a duration option value: "2" (seconds), "2s", "500ms". Milliseconds, or nothing.
std::optional<uint32_t> parse_remote_duration(std::string_view text);

// What a GET found. A miss and a failure both mean "link locally"; a failure also means that the
// server is not answering as it should (counted as an error, warned about once).
struct RemoteFetch {
  enum class Outcome { hit, miss, failure } outcome = Outcome::miss;
  std::string bytes; // with a hit: the body
  std::string why;   // with a miss or a failure: one line, for -v and the warning
};

struct RemoteStore {
  bool ok = false;
  bool refused = false; // the server said no (401, 403, 405): it is read-only to us
  std::string why;
};

// One server. Thread-safe: every request uses an easy handle of its own. A request never takes
// longer than the configured bounds, and never raises a signal. After the first failure to
// connect or to get an answer in time, the server is off for the rest of the process: one
// timeout, not one per arch.
class RemoteCache {
public:
  using Getenv = std::function<const char *(const char *)>;
  // Reads the secret (if any) from the environment now: an unset or empty variable is an error.
  static Expected<std::shared_ptr<RemoteCache>> open(RemoteConfig config, const Getenv &getenv);

  const RemoteConfig &config() const { return config_; }
  // The largest entry a GET takes from a server, whatever the local cache's limit: a body declared
  // larger is refused before it is read, and one that grows larger is cut off there (a hostile
  // server's Content-Length: 2147483648 had the client buffer up to the local limit).
  static constexpr uint64_t max_entry_bytes = uint64_t{64} << 20;
  // A GET of the entry for `key`, whose body is at most min(`max_bytes`, max_entry_bytes).
  RemoteFetch fetch(const Digest &key, uint64_t max_bytes) const;
  // A PUT of an entry (not attempted when the cache is read-only: then `refused`).
  RemoteStore store(const Digest &key, std::span<const uint8_t> entry) const;
  // Whether an earlier request found the server unreachable or too slow.
  bool down() const;

  RemoteCache(const RemoteCache &) = delete;
  RemoteCache &operator=(const RemoteCache &) = delete;
  ~RemoteCache();

private:
  struct State;
  RemoteCache(RemoteConfig config, std::string secret);
  RemoteConfig config_;
  std::string secret_;
  std::unique_ptr<State> state_;
};

// The first remote-cache failure of this process gets a warning, later ones only a note: returns
// true exactly once per process.
bool first_remote_warning();

} // namespace cudaq_rt
