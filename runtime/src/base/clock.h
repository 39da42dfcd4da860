// Times for reports and records: milliseconds since a point of the monotonic clock, and the UTC
// time of day as manifests record it.
#pragma once

#include <chrono>
#include <cstdlib>
#include <ctime>
#include <string>

namespace cudaq_rt {

using Clock = std::chrono::steady_clock;

inline double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// The time a record takes, UTC, ISO 8601 ("2026-07-01T12:00:00Z"): $SOURCE_DATE_EPOCH when it is
// set to a number of seconds (reproducible builds, reproducible-builds.org), else now.
inline std::string now_utc() {
  std::time_t t = std::time(nullptr);
  if (const char *epoch = std::getenv("SOURCE_DATE_EPOCH"); epoch && *epoch) {
    char *end = nullptr;
    long long v = std::strtoll(epoch, &end, 10);
    if (*end == '\0' && v >= 0)
      t = static_cast<std::time_t>(v);
  }
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

} // namespace cudaq_rt
