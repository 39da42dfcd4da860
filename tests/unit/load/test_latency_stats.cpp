#include "load/latency_stats.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <random>
#include <vector>

using namespace cudaq_rt;

TEST_CASE("no samples: all zero") {
  LatencyStats s = latency_stats({});
  CHECK(s.count == 0);
  CHECK(s.max_us == 0);
  CHECK(s.p50_us == 0);
}

TEST_CASE("one sample is every statistic") {
  const std::vector<double> one = {2.5};
  LatencyStats s = latency_stats(one);
  CHECK(s.count == 1);
  CHECK(s.min_us == 2.5);
  CHECK(s.mean_us == 2.5);
  CHECK(s.p50_us == 2.5);
  CHECK(s.p999_us == 2.5);
  CHECK(s.max_us == 2.5);
}

TEST_CASE("nearest rank: a measured sample, never an interpolation") {
  const std::vector<double> two = {2, 1};
  LatencyStats s = latency_stats(two);
  CHECK(s.p50_us == 1); // rank ceil(0.5 * 2) = 1
  CHECK(s.p90_us == 2);
  CHECK(s.mean_us == 1.5);

  const std::vector<double> four = {40, 10, 30, 20};
  s = latency_stats(four);
  CHECK(s.min_us == 10);
  CHECK(s.p50_us == 20); // rank 2
  CHECK(s.p90_us == 40); // rank ceil(3.6) = 4
  CHECK(s.max_us == 40);
}

TEST_CASE("percentile ranks of 1..1000 and 1..10000, in any order") {
  std::vector<double> samples;
  for (int i = 1; i <= 1000; ++i)
    samples.push_back(i);
  std::shuffle(samples.begin(), samples.end(), std::mt19937(1));
  LatencyStats s = latency_stats(samples);
  CHECK(s.count == 1000);
  CHECK(s.min_us == 1);
  CHECK(s.mean_us == doctest::Approx(500.5));
  CHECK(s.p50_us == 500);
  CHECK(s.p90_us == 900);
  CHECK(s.p99_us == 990);
  CHECK(s.p999_us == 999); // not 1000: the rank is computed exactly
  CHECK(s.max_us == 1000);

  samples.clear();
  for (int i = 10000; i >= 1; --i)
    samples.push_back(i * 0.5);
  s = latency_stats(samples);
  CHECK(s.p50_us == 2500);
  CHECK(s.p90_us == 4500);
  CHECK(s.p99_us == 4950);
  CHECK(s.p999_us == 4995);
  CHECK(s.max_us == 5000);
}

TEST_CASE("p99.9 of fewer than 1000 samples is the maximum; of 1001 it is not") {
  std::vector<double> samples(999, 1.0);
  samples.push_back(9.0);
  LatencyStats s = latency_stats(samples);
  CHECK(s.p99_us == 1.0);
  CHECK(s.p999_us == 1.0); // rank 999 of 1000
  samples.push_back(1.0);  // 1001 samples: rank ceil(999.999) = 1000, still a 1
  s = latency_stats(samples);
  CHECK(s.p999_us == 1.0);
  samples.resize(998); // 998 samples of 1, then 9: rank ceil(998.001) = 999, the 9
  samples.push_back(9.0);
  s = latency_stats(samples);
  CHECK(s.p999_us == 9.0);
}
