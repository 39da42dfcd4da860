#include "base/clock.h"

#include <doctest/doctest.h>

#include <regex>
#include <thread>

using namespace cudaq_rt;

TEST_CASE("milliseconds since a point grow with the monotonic clock") {
  auto t0 = Clock::now();
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  double ms = ms_since(t0);
  CHECK(ms >= 5.0);
  CHECK(ms < 5000.0);
}

TEST_CASE("now in UTC is ISO 8601 with a Z") {
  CHECK(std::regex_match(now_utc(), std::regex(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ)")));
}
