// Times for reports and records: milliseconds since a point of the monotonic clock, and the UTC
// time of day as manifests record it.
#pragma once

#include "cudaq_rt/error.h"

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <ctime>
#include <optional>
#include <string>

namespace cudaq_rt {

using Clock = std::chrono::steady_clock;

inline double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// $SOURCE_DATE_EPOCH (reproducible builds, reproducible-builds.org): nullopt where it is unset or
// empty, the seconds it gives, or an error naming it where it is anything else (a build that
// asked for a fixed time must not get now in its place).
inline Expected<std::optional<std::time_t>> source_date_epoch() {
  const char *epoch = std::getenv("SOURCE_DATE_EPOCH");
  if (!epoch || !*epoch)
    return std::optional<std::time_t>();
  bool digits = true;
  for (const char *c = epoch; *c; ++c)
    digits = digits && *c >= '0' && *c <= '9';
  errno = 0;
  char *end = nullptr;
  const long long v = std::strtoll(epoch, &end, 10);
  if (!digits || *end != '\0' || errno == ERANGE)
    return make_error("", "SOURCE_DATE_EPOCH is ", quote(epoch),
                      ": not a number of seconds since 1970-01-01T00:00:00Z");
  return std::optional<std::time_t>(static_cast<std::time_t>(v));
}

// The time a record takes, UTC, ISO 8601 ("2026-07-01T12:00:00Z"): $SOURCE_DATE_EPOCH where it is
// set (a link checks it first: link_package, store_links), else now.
inline std::string now_utc() {
  std::time_t t = std::time(nullptr);
  if (auto epoch = source_date_epoch(); epoch && *epoch)
    t = **epoch;
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

} // namespace cudaq_rt
