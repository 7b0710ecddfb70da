// SPDX-License-Identifier: Apache-2.0
// What one bucket of a limit enforces: the limit's parameters scaled to its region share and
// split over its shards (include/sluice/config/rules.hpp, limit::enforced).
#include "sluice/config/rules.hpp"

#include <algorithm>
#include <cmath>

namespace sluice::config {

limit_params limit::enforced(const limit_params& p) const {
  const limit& l = *this;
  limit_params out = p;
  if (out.burst <= 0) out.burst = out.rate.count;
  const bool bucket = l.algorithm == algorithm::token_bucket || l.algorithm == algorithm::gcra;
  if (l.region_share < 1.0 && l.region_share > 0.0) {
    if (bucket) {
      // N per ⌈P / share⌉: never more than the share of the rate, within 1 ms of a period.
      out.rate.period = std::chrono::milliseconds{static_cast<std::int64_t>(
          std::ceil(static_cast<double>(p.rate.period.count()) / l.region_share))};
      out.burst = std::max<std::int64_t>(
          1,
          static_cast<std::int64_t>(std::floor(static_cast<double>(out.burst) * l.region_share)));
    } else {
      // A window keeps its length; its count is the share (rounded down).
      out.rate.count = std::max<std::int64_t>(
          1, static_cast<std::int64_t>(
                 std::floor(static_cast<double>(p.rate.count) * l.region_share)));
      out.burst = out.rate.count;
    }
  }
  if (l.shards > 1 && bucket) {
    const auto s = static_cast<std::int64_t>(l.shards);
    out.rate.period *= s;  // N per S × P: each shard 1/S of the rate, exactly
    out.burst = std::max<std::int64_t>(1, out.burst / s);
  }
  return out;
}

}  // namespace sluice::config
