// SPDX-License-Identifier: Apache-2.0
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
  // (Concurrency reads window_limit as max_in_flight and window_ms as slot_ttl: see
  // config::algorithm.)

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

/// What a check does with a concurrency limit's slot (limit_check::op; limiter/concurrency.hpp).
enum class slot_op : std::uint8_t {
  acquire,  ///< take slot `limit_check::slot` when the request is admitted (a check)
  release,  ///< give the slot back (the request ended); never refuses
  renew,    ///< push a live slot's expiry to now + slot_ttl; never refuses
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
  /// Settling only (check_request::settle): tokens (token bucket) or units (windows) charged
  /// to the bucket (> 0: may take it into debt) or refunded (< 0: never above its capacity),
  /// -Limit .. Limit. `cost` stays the cost of the limit's requests: the outcome says what
  /// the next such request would get.
  std::int64_t settle = 0;
  /// Settling a window limit: the store time (check_outcome::now_ms) of the check that took
  /// the units settled; a refund is taken off that window, and dropped when it has ended
  /// (limiter::settled_counts). -1: the current window. Ignored by the token bucket.
  std::int64_t taken_at_ms = -1;
  /// Penalty box (`block:` of the limit, limiter/block.hpp), in ms of store time: once this
  /// limit refuses a request (enforced), the key stays refused by it for this long; the
  /// block lives in the store beside the bucket (block_address()). 0: no block.
  std::int64_t block_ms = 0;
  /// Concurrency (algorithm concurrency; bucket.window_limit = max_in_flight, bucket.window_ms
  /// = slot_ttl): the slot this request takes, or the slot `op` releases or renews. A slot id
  /// is unique per request across every gateway sharing the store (instance, worker, counter).
  std::string slot;
  slot_op op = slot_op::acquire;
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
  /// Penalty box (limit_check::block_ms > 0): the end of the block in force after this check,
  /// ms of store time (0: none) — one found, or one this check started; with
  /// check_request::lift_blocks, the end of the block the check lifted. While a block is in
  /// force the limit refuses, and Remaining, Reset, Retry-After and the next-unit time are
  /// at least what the block leaves (limiter::apply_block).
  std::int64_t block_end_ms = 0;
  /// How block_end_ms came to be.
  enum class block_event : std::uint8_t {
    none,     ///< no block, or one that was in force already
    started,  ///< this check's refusal started it
    lifted,   ///< lift_blocks deleted it (the decision is as if it was not there)
  } block = block_event::none;
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
  /// Settle after the fact instead of deciding: every limit is charged or refunded its
  /// limit_check::settle units, unconditionally, atomically per call (per slot on a cluster),
  /// on the store's clock. Token bucket, fixed window and sliding window only (a sliding log
  /// is refused: errc::store_error). The outcome: `allowed` true, per limit the state after
  /// (Remaining 0 in debt; retry_after_ms is what a request of its `cost` would wait, 0 when
  /// it would be admitted, and `admits` says which). Leases, shadow and peek do not apply.
  bool settle = false;
  /// With `peek`: a limit with a block that refuses still starts its block (the cluster's
  /// split check peeks first, and a refusal found there is final: the request is refused).
  bool peek_starts_blocks = false;
  /// Admin unblock (`POST /admin/unblock`): every checked limit's block is deleted before the
  /// decision, which is then made as if it was not there; limit_outcome::block says what was
  /// lifted. Meant with `peek` (nothing else written).
  bool lift_blocks = false;
};

/// Whether every limit of a settle can be settled: a token bucket, a fixed or a sliding
/// window (a sliding log cannot: its units are stamps), |settle| <= its Limit.
inline bool can_settle(const check_request& req) {
  for (const auto& l : req.limits) {
    if (l.algorithm != config::algorithm::token_bucket &&
        l.algorithm != config::algorithm::fixed_window &&
        l.algorithm != config::algorithm::sliding_window)
      return false;
    const std::int64_t most = l.bucket.quota(l.algorithm);
    if (l.settle > most || l.settle < -most) return false;
  }
  return true;
}

/// Ceiling of a / b for a >= 0, b > 0.
constexpr std::int64_t ceil_div(std::int64_t a, std::int64_t b) {
  return a / b + (a % b != 0);
}

}  // namespace sluice::limiter
