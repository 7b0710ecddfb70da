// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// From a decided check to what the client is told: the most constraining limit, the
/// X-RateLimit-* and IETF RateLimit fields, Retry-After and the 429 problem body
/// (DESIGN.md, "Headers and bodies"). Every value is rendered from the one decided outcome
/// (no off-by-one): nothing recomputes "remaining" elsewhere.

#include "sluice/config/rules.hpp"
#include "sluice/limiter/check.hpp"

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace sluice::limiter {

/// One limit as applied to one request: its name, its bucket parameters for this caller and
/// whether it is enforced. Parallel to check_request::limits.
struct applied_limit {
  std::string name;
  config::algorithm algorithm = config::algorithm::token_bucket;
  bucket_params bucket;
  bool shadow = false;
  /// `warn_at:` the near-limit threshold in basis points of the Limit (1 .. 9999); 0 = none.
  std::int32_t warn_at_bp = 0;
};

/// A header field to add to a response: a name of static storage (a literal) and its value.
using header_field = std::pair<std::string_view, std::string>;

/// Whole seconds from milliseconds, rounded up (the direction every header promise needs).
constexpr std::int64_t ceil_seconds(std::int64_t ms) {
  return ms <= 0 ? 0 : ceil_div(ms, 1000);
}

/// Index of the most constraining enforced limit: least Remaining; ties: the larger Reset,
/// then the first declared. nullopt when no limit is enforced.
std::optional<std::size_t> most_constraining(const std::vector<applied_limit>& limits,
                                             const check_outcome& outcome);

/// The `w` of a token bucket's RateLimit-Policy: burst ÷ refill per second, rounded up, so
/// the advertised average rate is never above the real one. At least 1.
std::int64_t policy_window_seconds(const bucket_params& bucket);

/// The `w` of a limit's RateLimit-Policy in seconds: the window for the window algorithms
/// (fixed, sliding counter, log), rounded up; the token bucket's as above; a calendar
/// quota's longest period (1, 7 or 31 days). At least 1.
std::int64_t policy_window_seconds(const applied_limit& limit);

/// The `w` of a limit's RateLimit-Policy for a check decided at store time `now_ms`: a
/// calendar quota's current period in seconds (86,400 a day, 604,800 a week, 2,419,200 ..
/// 2,678,400 a month: the advertised average N / w is the one of the period being counted);
/// policy_window_seconds(limit) for other algorithms or when `now_ms` is unknown (<= 0).
std::int64_t policy_window_seconds(const applied_limit& limit, std::int64_t now_ms);

/// Retry-After with `retry_after_jitter`: `honest_seconds` plus a whole number of seconds
/// drawn from [0, floor(jitter / 1 s)] by `random` (any uniform 64-bit value), so a crowd of
/// refused clients does not return in the same second; never less than the honest value.
std::int64_t jittered_retry_after(std::int64_t honest_seconds, std::chrono::milliseconds jitter,
                                  std::uint64_t random);

/// Names of the shadow limits that would have refused this request (each evaluated alone),
/// in declaration order: what `shadow_header` lists to the upstream.
std::vector<std::string> shadow_violations(const std::vector<applied_limit>& limits,
                                           const check_outcome& outcome);

/// Whether enforced limit `limit`, with outcome `o`, is past its `warn_at` threshold: used =
/// Limit − Remaining is at least warn_at × Limit (compared in integers: used ≥
/// ⌈Limit × warn_at_bp / 10,000⌉). False for a shadow limit or one without `warn_at`.
bool past_warning(const applied_limit& limit, const limit_outcome& o);

/// Whether this request took `limit` across its threshold: the check was admitted (so `cost`
/// was debited), the limit is past_warning() after it, and was not before it (used − cost
/// below the threshold). What `sluice_quota_warnings_total{limit}` counts.
bool crossed_warning(const applied_limit& limit, const limit_outcome& o, std::int64_t cost,
                     bool allowed);

/// Rate-limit header fields for a decided check, in the sets chosen by `sets`:
/// X-RateLimit-Limit/Remaining/Reset from the most constraining enforced limit;
/// `RateLimit-Policy` and `RateLimit` (draft-ietf-httpapi-ratelimit-headers-11, RFC 9651
/// lists) naming every enforced limit in declaration order; `X-RateLimit-Warning` (when any
/// set is chosen) listing, as an RFC 9651 list of strings in declaration order, the enforced
/// limits past their `warn_at` threshold (past_warning()), absent when none is. Shadow
/// limits never appear.
std::vector<header_field> quota_headers(const std::vector<applied_limit>& limits,
                                        const check_outcome& outcome,
                                        const config::header_sets& sets);

/// The same fields rendered as lines, `Name: value` CRLF each, appended to `out`: what every
/// response carries (a 429 through http::set_lines, a forwarded one as
/// http::forward_plan::added_lines), rendered with no allocation beyond `out`'s growth.
/// quota_headers() is these lines, split into (name, value) pairs.
void append_quota_lines(std::string& out, const std::vector<applied_limit>& limits,
                        const check_outcome& outcome, const config::header_sets& sets);

/// Retry-After of a refused check, in seconds: the largest wait of the violated enforced
/// limits, rounded up, at least 1 (RFC 9110 §10.2.3 delta-seconds, never 0).
std::int64_t retry_after_seconds(const std::vector<applied_limit>& limits,
                                 const check_outcome& outcome);

/// Names of the violated enforced limits, in declaration order.
std::vector<std::string> violated_policies(const std::vector<applied_limit>& limits,
                                           const check_outcome& outcome);

/// The RFC 9457 `application/problem+json` body of a 429: type
/// `https://iana.org/assignments/http-problem-types#quota-exceeded`, title, status, detail
/// and `violated-policies`.
std::string quota_exceeded_body(const std::vector<std::string>& violated, std::int64_t retry_after);

}  // namespace sluice::limiter
