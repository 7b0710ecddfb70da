// SPDX-License-Identifier: Apache-2.0
// bucket_params: a rate N per P ms reduced to exact integer units (see check.hpp).
#include "sluice/limiter/check.hpp"

#include <algorithm>
#include <numeric>

namespace sluice::limiter {

bucket_params bucket_params::from(const config::limit_params& p) {
  // Validation (config room) guarantees count, period and burst >= 1 and
  // burst * units_per_token <= 2^53; the clamps only keep the arithmetic free of division by
  // zero if an unvalidated value ever reaches here.
  const std::int64_t n = std::max<std::int64_t>(1, p.rate.count);
  const std::int64_t period = std::max<std::int64_t>(1, p.rate.period.count());
  const std::int64_t g = std::gcd(n, period);
  bucket_params out;
  out.refill_per_ms = n / g;
  out.units_per_token = period / g;
  out.burst = p.burst > 0 ? p.burst : n;  // burst defaults to N of the rate (DESIGN.md)
  out.window_ms = period;
  out.window_limit = n;
  out.calendar = p.rate.unit;
  out.utc_offset_minutes = p.rate.utc_offset_minutes;
  return out;
}

}  // namespace sluice::limiter
