// Nearest-rank percentiles, with the rank computed in integers (per mille): in floating point,
// ceil(99.9 / 100 * 1000) is 1000, not 999, so p99.9 of 1000 samples would be the maximum.
#include "load/latency_stats.h"

#include <algorithm>
#include <vector>

namespace cudaq_rt {

namespace {

// The sample of rank ceil(per_mille / 1000 * n), 1-based, of sorted samples.
double nearest_rank(const std::vector<double> &sorted, size_t per_mille) {
  const size_t rank = (sorted.size() * per_mille + 999) / 1000;
  return sorted[std::max<size_t>(rank, 1) - 1];
}

} // namespace

LatencyStats latency_stats(std::span<const double> samples_us) {
  LatencyStats stats;
  if (samples_us.empty())
    return stats;
  std::vector<double> sorted(samples_us.begin(), samples_us.end());
  std::sort(sorted.begin(), sorted.end());
  long double sum = 0;
  for (double s : sorted)
    sum += s;
  stats.count = sorted.size();
  stats.min_us = sorted.front();
  stats.max_us = sorted.back();
  stats.mean_us = double(sum / sorted.size());
  stats.p50_us = nearest_rank(sorted, 500);
  stats.p90_us = nearest_rank(sorted, 900);
  stats.p99_us = nearest_rank(sorted, 990);
  stats.p999_us = nearest_rank(sorted, 999);
  return stats;
}

} // namespace cudaq_rt
