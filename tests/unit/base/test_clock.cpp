#include "base/clock.h"

#include <doctest/doctest.h>

#include <cstdlib>
#include <optional>
#include <regex>
#include <string>
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

// SOURCE_DATE_EPOCH for the duration of one check, then as it was.
struct EpochVariable {
  explicit EpochVariable(const char *value) {
    if (const char *was = std::getenv("SOURCE_DATE_EPOCH"))
      saved = was;
    if (value)
      ::setenv("SOURCE_DATE_EPOCH", value, 1);
    else
      ::unsetenv("SOURCE_DATE_EPOCH");
  }
  ~EpochVariable() {
    if (saved)
      ::setenv("SOURCE_DATE_EPOCH", saved->c_str(), 1);
    else
      ::unsetenv("SOURCE_DATE_EPOCH");
  }
  std::optional<std::string> saved;
};

TEST_CASE("SOURCE_DATE_EPOCH gives the records' time, and a value that is not seconds is refused") {
  {
    EpochVariable v("1700000000");
    CHECK(now_utc() == "2023-11-14T22:13:20Z");
    auto e = source_date_epoch();
    REQUIRE(e);
    CHECK(**e == 1700000000);
  }
  {
    EpochVariable v("0");
    CHECK(now_utc() == "1970-01-01T00:00:00Z");
  }
  for (const char *unset : {static_cast<const char *>(nullptr), ""}) {
    EpochVariable v(unset);
    auto e = source_date_epoch();
    REQUIRE(e);
    CHECK_FALSE(e->has_value());
  }
  for (const char *bad : {"-1", "12x", " 12", "1.5", "99999999999999999999"}) {
    CAPTURE(bad);
    EpochVariable v(bad);
    auto e = source_date_epoch();
    REQUIRE_FALSE(e);
    CHECK(e.error().str() == std::string("SOURCE_DATE_EPOCH is '") + bad +
                                 "': not a number of seconds since 1970-01-01T00:00:00Z");
  }
}
