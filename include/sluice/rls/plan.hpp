// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// sluice as Envoy's rate limit service: a `ShouldRateLimit` request mapped to one store check
/// through the rules file's `rate_limit_service` section, and the check's outcome rendered as
/// the answer (statuses per descriptor, the rate-limit header fields). No I/O here: the gRPC
/// server (rls/server.hpp) runs the check between the two steps.

#include "sluice/config/rules.hpp"
#include "sluice/limiter/check.hpp"
#include "sluice/limiter/decision.hpp"

#include "envoy/service/ratelimit/v3/rls.pb.h"

#include <cstddef>
#include <cstdint>
#include <string>
#include <variant>
#include <vector>

namespace sluice::rls {

namespace pb = envoy::service::ratelimit::v3;

/// Most descriptors one call may carry.
inline constexpr int max_descriptors = 64;
/// Longest descriptor key or value in bytes.
inline constexpr std::size_t max_entry_bytes = 1024;

/// A request mapped to one check: every descriptor's limits, in request order, a limit and
/// bucket met twice (one descriptor sent twice) checked once at the sum of the costs.
struct plan {
  limiter::check_request check;
  std::vector<limiter::applied_limit> applied;  ///< parallel to check.limits
  /// Per request descriptor: the indices into check.limits of its limits (empty: unknown,
  /// answered OK).
  std::vector<std::vector<std::size_t>> per_descriptor;
  std::size_t unknown = 0;  ///< descriptors that matched no leaf with limits
};

/// Why a request is refused before any counter is touched (gRPC INVALID_ARGUMENT).
struct invalid {
  std::string message;
};

/// Maps `req` through `rls` (the rules' `rate_limit_service`): the domain's tree is walked
/// one entry at a time, an exact value preferred over a node without a value; a descriptor
/// whose every entry matched, ending at a node with limits, is charged to those limits (cost:
/// its own `hits_addend`, else the request's, 0 meaning 1) in the bucket of the limit's name,
/// the domain and the entries (limiter::bucket_key namespace `descriptor`). Errors (as
/// `invalid`): an unknown domain, no descriptors or more than max_descriptors, a descriptor
/// without entries, an empty or longer than max_entry_bytes key or value, a `hits_addend`
/// above 2^31 - 1 (a negative number sent as uint32) or 2^53, a cost above a limit's Limit
/// (it could never be admitted).
std::variant<plan, invalid> map_request(const config::rate_limit_service_settings& rls,
                                        const pb::RateLimitRequest& req);

/// The answer to a decided plan: overall OK unless the check was refused; per descriptor its
/// most constraining enforced limit (limiter::most_constraining) as `current_limit` (name,
/// Limit per unit: SECOND, MINUTE, HOUR or DAY when the period is one exactly, else UNKNOWN),
/// `limit_remaining` (Remaining) and `duration_until_reset` (Reset, ms); OVER_LIMIT on the
/// descriptors with an enforced limit that refused. `response_headers_to_add`: the fields
/// the proxy sends (limiter::quota_headers in `sets`), and Retry-After when refused.
pb::RateLimitResponse render(const plan& p, const limiter::check_outcome& outcome,
                             const config::header_sets& sets);

/// The answer when the store could not decide and the policy is fail_open: every descriptor
/// OK, without limits.
pb::RateLimitResponse allow_all(std::size_t descriptors);

}  // namespace sluice::rls
