// SPDX-License-Identifier: Apache-2.0
#pragma once
// Private to the store room: the script call of a batch of checks, and the reading of one
// check's answer out of a call's reply (lua_scripts.hpp, check(); lua/check.lua, check_batch).

#include "sluice/limiter/check.hpp"

#include <hiredis/hiredis.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::store::detail {

/// How a check's answer is laid out in a reply: one limit per burst (its Limit), then the
/// tokens taken by the limits packed with a lease (`leased`, their indexes), then two integers
/// per limit packed with a block (`blocked`).
struct reply_shape {
  std::vector<std::int64_t> bursts;
  std::vector<std::size_t> leased;
  std::vector<std::size_t> blocked;

  /// Integers of the check's answer: 2 + 5 per limit + 1 per lease + 2 per block.
  std::size_t size() const noexcept {
    return 2 + 5 * bursts.size() + leased.size() + 2 * blocked.size();
  }
};

/// Limits a check may have and still go in a batch (its count travels in one byte).
inline constexpr std::size_t max_batched_limits = 255;

/// The arguments after the command and its target (the function's name or the script's SHA1)
/// of one call deciding `parts` in order, each the output of lua::append_check_command() for
/// one check (numkeys, KEYS, the time override, the stale bound, then 2 arguments per limit),
/// moved from. One part is sent as it is; several as a batch: the keys of all, then `batch`,
/// the override and the stale bound of the first part (checks of a batch are made in one turn
/// of the loop: the first has the earliest bound), one byte per part with its limit count
/// (each at most max_batched_limits), then every part's limit arguments. With
/// `declare_keys` false (a Redis Cluster node: its checks may be of several slots) a batch
/// declares no key and carries them after the counts instead, and the parts are copied, not
/// moved from (kept for sending each alone should the node refuse the batch). Returns the
/// index in `out` of the stale bound (which a re-sent call rewrites).
std::size_t append_batch(std::span<std::vector<std::string>*> parts, bool declare_keys,
                         std::vector<std::string>& out);

/// What reading one check's answer came to.
enum class answer_kind {
  decided,   ///< `out` holds the decision
  refused,   ///< the script refused the check's arguments ({-1, now} in a batch's reply)
  malformed  ///< too few elements, or one that is not an integer
};

/// Reads the check whose answer starts at `e[0]` (`available` elements from there) laid out
/// as `shape`: fills `out` (allowed, the store time, one limit_outcome per limit) and `used`
/// (the elements its answer took).
answer_kind read_answer(redisReply* const* e, std::size_t available, const reply_shape& shape,
                        limiter::check_outcome& out, std::size_t& used);

}  // namespace sluice::store::detail
