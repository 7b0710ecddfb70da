#pragma once
/// @file
/// The Lua scripts of `lua/`, embedded at build time (cmake/SluiceEmbedLua.cmake), and the
/// argument layout of the check script shared by the Redis store and the tests.

#include "sluice/limiter/check.hpp"

#include <string>
#include <string_view>
#include <vector>

namespace sluice::lua {

/// The check script: `lua/common.lua`, the algorithm parts (`token_bucket.lua`, `window.lua`,
/// `fixed_window.lua`, `sliding_window.lua`, `sliding_log.lua`) and the driver `check.lua`,
/// concatenated. Decides a batch of limits of any mix of algorithms atomically.
///
/// KEYS[i]: key of limit i. ARGV[1]: store time override in ms (-1: use Redis TIME).
/// ARGV[2]: n. Then 6 integers per limit i: algorithm id (algorithm_id()), a, b, c, cost,
/// shadow (0|1), where (a, b, c) = (refill_per_ms, units_per_token, burst) for the token
/// bucket and (window_ms, window limit, 0) for the window algorithms. Reply: an array of
/// integers {allowed, now_ms, then per limit: admits, remaining, reset_ms, retry_after_ms,
/// next_ms}. A refused request writes nothing but expiries; bad arguments are an error reply
/// before anything is written. State per key (every write re-arms PX = the limit's Reset, or
/// deletes the key when Reset is 0):
/// - token bucket: string "<level units> <stamp ms>";
/// - fixed window: string "<window index>:<count>";
/// - sliding window: string "<window index>:<current>:<previous>";
/// - sliding log: list of ms stamps, one per admitted unit, oldest first.
std::string_view check() noexcept;

/// The script's algorithm id of `a`: token_bucket 0, fixed_window 1, sliding_window 2,
/// sliding_log 3 (gcra is not offered: -1).
int algorithm_id(config::algorithm a) noexcept;

/// Appends the script's ARGV for `req` (everything after the keys): the time override, n,
/// then 6 integers per limit, as documented at check().
void append_check_args(const limiter::check_request& req, std::vector<std::string>& out);

}  // namespace sluice::lua
