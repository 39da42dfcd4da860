// Times for reports and records: milliseconds since a point of the monotonic clock, and the UTC
// time of day as manifests record it.
#pragma once

#include <chrono>
#include <ctime>
#include <string>

namespace cudaq_rt {

using Clock = std::chrono::steady_clock;

inline double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// Now, UTC, ISO 8601: "2026-07-01T12:00:00Z".
inline std::string now_utc() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

} // namespace cudaq_rt
