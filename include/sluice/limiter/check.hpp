#pragma once
/// @file
/// The store-independent description of one rate-limit check and its outcome. A request's
/// check holds every limit that applies to it (plan limits first, then route limits); the
/// store decides them all atomically: the request is admitted only if every enforced limit
/// admits it, and a refused request debits nothing from any limit.

#include "sluice/config/rules.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace sluice::limiter {

/// A token bucket in exact integer units (how the Lua script and the memory store compute).
///
/// A rate of N tokens per P ms is reduced by g = gcd(N, P) to `refill_per_ms` = N/g and
/// `units_per_token` = P/g. The bucket level is kept in *units*: one token is
/// `units_per_token` units and `refill_per_ms` units flow in each millisecond, so refill,
/// spend and cap are integer additions with no rounding anywhere. The capacity is
/// `burst * units_per_token`, which validation keeps at most 2^53 (exact in a Lua double).
struct bucket_params {
  std::int64_t refill_per_ms = 1;    ///< units added per millisecond of store time
  std::int64_t units_per_token = 1;  ///< units in one token
  std::int64_t burst = 1;            ///< capacity in tokens

  /// Window algorithms (fixed_window, sliding_window, sliding_log): the rate N/P read as
  /// "at most `window_limit` = N units per window of `window_ms` = P milliseconds".
  std::int64_t window_ms = 1;
  std::int64_t window_limit = 1;

  /// Calendar quotas (algorithm calendar, limiter/calendar.hpp): the period's unit and the
  /// zone's offset east of UTC in minutes; window_limit = N and window_ms the longest period.
  config::calendar_unit calendar = config::calendar_unit::none;
  std::int32_t utc_offset_minutes = 0;

  /// Capacity in units (burst * units_per_token).
  std::int64_t capacity() const { return burst * units_per_token; }

  /// The Limit a caller is told (DESIGN.md, "Headers and bodies"): the burst for the token
  /// bucket (and GCRA), the window's limit for the window algorithms.
  std::int64_t quota(config::algorithm a) const {
    return a == config::algorithm::token_bucket || a == config::algorithm::gcra ? burst
                                                                                : window_limit;
  }

  /// Reduces a rate and burst to integer bucket parameters: refill_per_ms = N/g,
  /// units_per_token = P/g with g = gcd(N, P); burst defaults to N when 0; window_ms = P,
  /// window_limit = N; a calendar rate's unit and offset. Expects validated parameters (count,
  /// period >= 1; capacity <= 2^53); never throws.
  static bucket_params from(const config::limit_params& p);

  /// The bucket one store check of limit `l` uses for parameters `p` (`l`'s own or a plan's
  /// override): from(l.enforced(p)), the region share and the shards applied.
  static bucket_params for_limit(const config::limit& l, const config::limit_params& p) {
    return from(l.enforced(p));
  }
};

/// One limit to check for one caller.
struct limit_check {
  std::string key;  ///< store key (see keys.hpp), bounded, injection-proof
  config::algorithm algorithm = config::algorithm::token_bucket;
  bucket_params bucket;
  std::int64_t cost = 1;  ///< units this request spends, 1 .. Limit
  bool shadow = false;    ///< evaluated on its own; never refuses the request
  /// Token leasing (token bucket only; `lease:` of the limit, limiter/lease_book.hpp). When
  /// > cost, an admitted limit takes up to this many tokens at once — as many as the bucket
  /// holds, never fewer than `cost` — and limit_outcome::granted says how many: the worker
  /// spends the ones beyond `cost` itself. 0: take `cost`.
  std::int64_t lease = 0;
  /// Token leasing: tokens of an earlier lease returned to the bucket before it is read
  /// (added to its level, which never exceeds the capacity), whatever the decision. 0: none.
  std::int64_t refund = 0;
};

/// The outcome of one limit in a decided check. All times are milliseconds of store time.
struct limit_outcome {
  bool admits = false;              ///< this limit alone would admit the request's cost
  std::int64_t limit = 0;           ///< the most a caller can spend at once (burst; window limit)
  std::int64_t remaining = 0;       ///< whole units left after the decision (never < 0)
  std::int64_t reset_ms = 0;        ///< until Remaining would equal Limit again (bucket full)
  std::int64_t retry_after_ms = 0;  ///< until `cost` would be admitted (0 when admits)
  std::int64_t next_ms = 0;         ///< until Remaining grows by one (0 when at Limit)
  /// Tokens taken from the bucket by a check with limit_check::lease (cost included); 0 when
  /// nothing was taken or the check asked for no lease.
  std::int64_t granted = 0;
};

/// The outcome of a whole check: `limits` is parallel to the request's `limit_check`s.
struct check_outcome {
  bool allowed = false;  ///< every enforced limit admitted; all were debited
  std::vector<limit_outcome> limits;
  /// The store time the check was decided at, ms since the Unix epoch (Redis TIME or the
  /// memory store's clock); 0 when unknown. `decision_time_header` forwards it.
  std::int64_t now_ms = 0;
};

/// A batch of limits decided in one atomic store operation.
struct check_request {
  std::vector<limit_check> limits;
  /// Test seam: decide at this store time (ms since the Unix epoch) instead of the store's
  /// clock. The gateway never sets it; the algorithm table tests do.
  std::int64_t now_ms_override = -1;
  /// Store clock time (Redis TIME, ms since the Unix epoch; never the test override) after
  /// which the check must not run at all: a check
  /// queued behind a stalled store and run after the gateway gave up on it would charge a
  /// request that was already answered (503, or forwarded under fail_open). Set by the Redis
  /// store from its deadline; -1 = no bound.
  std::int64_t stale_after_ms = -1;
  /// Decide as the store would now, writing nothing (`GET /admin/explain`): the outcome is the
  /// one a request would get, and no bucket changes.
  bool peek = false;
};

/// Ceiling of a / b for a >= 0, b > 0.
constexpr std::int64_t ceil_div(std::int64_t a, std::int64_t b) {
  return a / b + (a % b != 0);
}

}  // namespace sluice::limiter
