// SPDX-License-Identifier: Apache-2.0
// Token-bucket arithmetic in exact integer units: the reference that lua/token_bucket.lua
// mirrors operation for operation (tests/unit/store/token_bucket_table_test.cpp holds both to
// one table). Every quantity is an integer <= 2^53 (validated capacity), so the same steps are
// exact in int64 here and in Lua 5.1 doubles there; no product below can exceed the capacity.
#include "sluice/limiter/token_bucket.hpp"

#include <algorithm>
#include <cmath>

namespace sluice::limiter {

std::int64_t refilled_level(const bucket_state* state, const bucket_params& p,
                            std::int64_t now_ms) {
  const std::int64_t cap = p.capacity();
  if (state == nullptr) return cap;  // a missing (or expired) bucket is full
  // Clamp a stored level into [-cap, cap]: a burst lowered by a config reload, or a corrupt
  // value, must not carry more units than the bucket can hold; below zero is a debt a settled
  // charge left (settled_level), at most one capacity.
  std::int64_t stored = state->level;
  if (state->units_per_token > 0 && state->units_per_token != p.units_per_token) {
    // Written under another rate: the same balance in tokens, in this rate's units, rounded
    // down. Computed in doubles exactly as the script does (the same IEEE operations), so
    // both stores agree; only a fraction of one unit can be lost.
    stored = static_cast<std::int64_t>(
        std::floor(static_cast<double>(stored) / static_cast<double>(state->units_per_token) *
                   static_cast<double>(p.units_per_token)));
  }
  const std::int64_t level = std::clamp<std::int64_t>(stored, -cap, cap);
  // A clock stepped back counts as no time (DESIGN.md, "Fine points").
  const std::int64_t elapsed = std::max<std::int64_t>(0, now_ms - state->stamp_ms);
  // elapsed * refill may overflow (and is inexact above 2^53 in Lua): compare the elapsed time
  // against the time to full first; below it, elapsed * refill < cap - level.
  if (elapsed >= ceil_div(cap - level, p.refill_per_ms)) return cap;
  return level + elapsed * p.refill_per_ms;
}

std::int64_t refunded_level(std::int64_t level, const bucket_params& p, std::int64_t refund) {
  if (refund <= 0 || level >= p.capacity()) return level;
  // refund <= burst (validated), so refund * units_per_token <= capacity <= 2^53.
  return std::min(p.capacity(), level + refund * p.units_per_token);
}

std::int64_t settled_level(std::int64_t level, const bucket_params& p, std::int64_t units) {
  // |units| <= burst (validated), so |units| * units_per_token <= capacity <= 2^53.
  const std::int64_t cap = p.capacity();
  return std::clamp<std::int64_t>(level - units * p.units_per_token, -cap, cap);
}

std::int64_t leased_units(std::int64_t level, const bucket_params& p, std::int64_t cost,
                          std::int64_t lease) {
  const std::int64_t upt = p.units_per_token;
  if (lease <= cost) return cost * upt;
  return std::min(lease * upt, level - level % upt);
}

limit_outcome describe(std::int64_t level, const bucket_params& p, std::int64_t cost, bool admits) {
  const std::int64_t cap = p.capacity();
  const std::int64_t upt = p.units_per_token;
  limit_outcome out;
  out.admits = admits;
  out.limit = p.burst;
  out.remaining = level < 0 ? 0 : level / upt;  // a debt shows as 0, never below
  out.reset_ms = ceil_div(cap - level, p.refill_per_ms);
  // Not admitted means not debited, so `level` is still the level before the decision.
  out.retry_after_ms = admits ? 0 : ceil_div(cost * upt - level, p.refill_per_ms);
  // In debt, the next whole unit is one token above zero.
  out.next_ms = level >= cap ? 0
                : level < 0  ? ceil_div(upt - level, p.refill_per_ms)
                             : ceil_div(upt - level % upt, p.refill_per_ms);
  return out;
}

std::int64_t ttl_ms(std::int64_t level, const bucket_params& p) {
  return std::max<std::int64_t>(1, ceil_div(p.capacity() - level, p.refill_per_ms));
}

}  // namespace sluice::limiter
