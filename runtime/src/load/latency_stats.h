// Latency statistics of a benchmark (cudaq-rt-run --bench).
#pragma once

#include <cstddef>
#include <span>

namespace cudaq_rt {

// All in microseconds. Percentiles are nearest-rank: the p-th percentile of n sorted samples is
// the sample of rank ceil(p/100 * n) (1-based), always a measured value, never an interpolation.
// So p99.9 of fewer than 1000 samples is the maximum, and p50 of {1, 2} is 1.
struct LatencyStats {
  size_t count = 0;
  double min_us = 0, mean_us = 0, p50_us = 0, p90_us = 0, p99_us = 0, p999_us = 0, max_us = 0;
};

// Statistics of the samples (microseconds); all zero for no samples.
LatencyStats latency_stats(std::span<const double> samples_us);

} // namespace cudaq_rt
