// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// Token-bucket arithmetic (the reference the Lua script `lua/token_bucket.lua` mirrors
/// operation for operation; the table tests hold both to the same numbers).

#include "sluice/limiter/check.hpp"

#include <cstdint>
#include <span>

namespace sluice::limiter {

/// Stored state of one bucket: level in units (see bucket_params) at store time `stamp_ms`.
struct bucket_state {
  std::int64_t level = 0;
  std::int64_t stamp_ms = 0;
  /// The units per token the level was written in (0: unknown, read as the current one). A
  /// reload that changes the rate changes the unit; the level is then rescaled, so a
  /// balance carries over in tokens (a hot reload).
  std::int64_t units_per_token = 0;
};

/// The level of a bucket at `now_ms`: lazy refill `min(capacity, level + elapsed * refill)`,
/// with elapsed clamped at 0 (a clock stepped back counts as no time). A missing bucket
/// (`state == nullptr`) is full. A stored level is read clamped to [-capacity, capacity]: a
/// negative level is a debt (settled_level) that refills like any level.
std::int64_t refilled_level(const bucket_state* state, const bucket_params& p, std::int64_t now_ms);

/// Token leasing: `level` (units) with `refund` tokens of an earlier lease returned to it,
/// never above the capacity (lua/token_bucket.lua's tb_read).
std::int64_t refunded_level(std::int64_t level, const bucket_params& p, std::int64_t refund);

/// Settling (check_request::settle): `level` (units) charged `units` tokens (> 0) or refunded
/// -`units` tokens (< 0), kept in [-capacity, capacity]: a charge may take the level below
/// zero — a debt later requests wait out, at most one capacity deep — and a refund never takes
/// it above the capacity (lua/token_bucket.lua's tb_settle).
std::int64_t settled_level(std::int64_t level, const bucket_params& p, std::int64_t units);

/// Units an admitted request of `cost` tokens takes from a bucket at `level` (units): `cost`
/// tokens, or with a lease of `lease` > cost tokens, as many whole tokens as the level holds
/// up to the lease (lua/token_bucket.lua's tb_write). Expects level >= cost tokens.
std::int64_t leased_units(std::int64_t level, const bucket_params& p, std::int64_t cost,
                          std::int64_t lease);

/// Fills `out` from a bucket at level `level` after the decision for a request of `cost`
/// tokens. `admits` says whether the level before debiting held `cost` tokens. A level below
/// zero (a debt) has Remaining 0; Retry-After and the next unit count the debt.
limit_outcome describe(std::int64_t level, const bucket_params& p, std::int64_t cost, bool admits);

/// Time to live of a bucket key at `level`: the time to refill to full, at least 1 ms.
std::int64_t ttl_ms(std::int64_t level, const bucket_params& p);

}  // namespace sluice::limiter
