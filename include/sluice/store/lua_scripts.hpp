// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// The Lua scripts of `lua/`, embedded at build time (cmake/SluiceEmbedLua.cmake), and the
/// argument layout of the check script shared by the Redis store and the tests.

#include "sluice/limiter/check.hpp"

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::lua {

/// The check, as a script: `lua/common.lua`, the algorithm parts (`token_bucket.lua`,
/// `window.lua`, `fixed_window.lua`, `sliding_window.lua`, `sliding_log.lua`, `calendar.lua`,
/// `block.lua`, `concurrency.lua`) and the driver
/// `check.lua`, concatenated, then `return check(KEYS, ARGV)`. For SCRIPT LOAD / EVALSHA (and
/// EVAL in tests) where Redis functions are not available. Decides a batch of limits of any
/// mix of algorithms atomically.
///
/// KEYS[i]: the key of limit i's bucket, or the hash holding it. ARGV[1]: store time override
/// in ms (-1: use Redis TIME). ARGV[2]: stale after, Redis TIME in ms even under an override
/// (-1: no bound): a check run later than that writes nothing and answers the error
/// `STALE sluice check: now <Redis TIME ms>`. Then 2 arguments per limit i: its parameters
/// (pack_limit(): algorithm id, a, b, c, cost, flags as 6 little-endian doubles; flags 1 =
/// shadow, 2 = peek: decided as if, nothing written, 4 = lift the limit's block first, 8 = a
/// peek that still starts blocks, 16 = a settle: pack_settled_limit()) and its field
/// in hash KEYS[i] ("" = KEYS[i] is the bucket), where (a, b, c) = (refill_per_ms,
/// units_per_token, burst) for the token bucket, (window_ms, window limit, 0) for the window
/// algorithms and (unit: 1 day, 2 week, 3 month; N; utc offset in minutes) for the calendar.
/// Reply: an array of integers {allowed, now_ms, then per limit: admits, remaining, reset_ms,
/// retry_after_ms, next_ms, then per limit packed by pack_leased_limit(), in order: the
/// tokens it took (limit_outcome::granted), then per limit with a block (append_block()), in
/// order: the block's end in ms of store time (0: none) and its event (0: none or in force,
/// 1: started by this check, 2: lifted by it; limit_outcome::block)}. Bad arguments are an error
/// reply before anything is written. State per bucket, packed as little-endian doubles
/// (struct.pack('<d...'), exact integers up to 2^53); every write arms the expiry to the limit's
/// Reset, or deletes the bucket when Reset is 0; a refused request that leaves a state as it read
/// it writes nothing and only raises the expiry when it is below the Reset (a key without one gets
/// one):
/// - token bucket: (level units, stamp ms, units per token), 24 bytes;
/// - fixed window: (window index, count), 16 bytes;
/// - sliding window: (window index, current, previous), 24 bytes;
/// - sliding log: list of ms stamps, one per admitted unit, oldest first (never in a hash);
/// - concurrency: a sorted set at the bucket's own key (never in a hash), member = slot id,
///   score = the slot's expiry in ms of store time; its parameters are (max_in_flight,
///   slot_ttl ms, op: 0 acquire, 1 release, 2 renew) and its field argument the slot id;
///   its reply `admits` for a release or renew is whether the slot was held
///   (limiter/concurrency.hpp). The key expires with its latest slot.
/// - calendar: (period index, count, zone = unit + 4 × (offset + 840), period end ms), 32 bytes.
/// The text forms of earlier versions ("<level> <stamp> <units>", "<i>:<c>", "<i>:<c>:<p>")
/// are still read. In a hash a field is the 8-byte expiry stamp (ms of store time) followed
/// by the state and reads as missing from then on; the hash's own expiry is only ever raised
/// (to the latest Reset written, plus up to 500 ms of slack when it rises); about one in four
/// checks that create a field in an existing hash deletes the expired ones among 8 sampled fields.
///
/// A batch of checks in one call: ARGV[1] `batch`, ARGV[2] and ARGV[3] the override and the
/// stale bound (one for the batch), ARGV[4] one byte per check with its number of limits
/// (1..255), then 2 arguments per limit of every check in order, the KEYS likewise — or, with
/// no KEYS declared (a Redis Cluster node; the library's function is allow-cross-slot-keys),
/// every limit's key after ARGV[4] and before the limits' arguments, each check's first key
/// touched before anything is written. Decided one after the other (Redis TIME read once);
/// reply: each check's reply above, concatenated, or {-1, now} for a check whose arguments are
/// bad (nothing written for it).
std::string_view check() noexcept;

/// The same check as a Redis function library (Redis 7.0+, FUNCTION LOAD): the chunk runs
/// once, when loaded, instead of on every call, which makes a check about a third cheaper for
/// Redis (lua/common.lua, "Cost"). It registers one function, check_function(), called with
/// FCALL and the same keys and arguments as check(). The library's name (`sluice_<hash>`) and
/// the function's carry a hash of the parts, so gateways of different versions sharing one
/// Redis each find their own.
std::string_view check_library() noexcept;

/// The name check_library() registers its function under: `sluice_check_<hash>`.
std::string_view check_function() noexcept;

/// The 48-byte parameter argument of one limit (check()): struct.pack('<dddddd', id, a, b, c,
/// cost, flags), flags = (shadow ? 1 : 0) + (peek ? 2 : 0) + `more_flags` (block_flags()).
/// Every value must be an integer of at most 2^53 to arrive exact.
std::string pack_limit(int id, std::int64_t a, std::int64_t b, std::int64_t c, std::int64_t cost,
                       bool shadow, bool peek = false, int more_flags = 0);

/// The 64-byte parameter argument of a token bucket limit with a lease (limit_check::lease
/// and ::refund): pack_limit(0, ...) followed by the lease and the refund, in tokens, as two
/// more doubles. An admitted limit then takes up to `lease` tokens (never fewer than `cost`)
/// after `refund` tokens are returned to it, and the reply ends with the tokens it took.
std::string pack_leased_limit(std::int64_t a, std::int64_t b, std::int64_t c, std::int64_t cost,
                              bool shadow, bool peek, std::int64_t lease, std::int64_t refund,
                              int more_flags = 0);

/// The flags of `req` beyond shadow and peek, for every limit's parameter: 4 = lift the
/// limit's block first (check_request::lift_blocks), 8 = a peek that still starts blocks
/// (check_request::peek_starts_blocks).
int block_flags(const limiter::check_request& req) noexcept;

/// Appends the block, in ms, to a packed parameter (pack_limit(): 48 -> 56 bytes;
/// pack_leased_limit(): 64 -> 72 bytes). The script then reads and starts the limit's block
/// (lua/block.lua), and its reply ends with two integers for the limit (packs_block()).
void append_block(std::string& packed, std::int64_t block_ms);

/// Whether limit `l` goes to the script with a block (limit_check::block_ms > 0): its reply
/// then ends with the block's end ms and event (after every limit's lease, in limit order).
inline bool packs_block(const limiter::limit_check& l) noexcept {
  return l.block_ms > 0;
}

/// The 64-byte parameter argument of one limit of a settle (check_request::settle):
/// struct.pack('<dddddddd', id, a, b, c, cost, 16, units, taken_at_ms) — flags 16 marks the
/// settle; `units` > 0 are charged (a debt may follow), < 0 refunded (never above the
/// capacity), |units| <= the Limit; `taken_at_ms` the store time the units were spent at
/// (windows: a refund comes off that window; < 0: the current one). A call is a settle when
/// its first limit says so, and then every limit must: the script validates every limit, then
/// settles each in order (token bucket and windows; a sliding log is an error) and replies as
/// a check does, `allowed` 1, each limit described for a request of its `cost` (admits,
/// Remaining — 0 in debt — Reset, Retry-After counting a debt, the next unit).
std::string pack_settled_limit(int id, std::int64_t a, std::int64_t b, std::int64_t c,
                               std::int64_t cost, std::int64_t units, std::int64_t taken_at_ms);

/// Whether limit `l` goes to the script in pack_leased_limit()'s 64-byte form (a token bucket
/// with a lease or a refund): its reply then ends with the tokens it took.
inline bool packs_lease(const limiter::limit_check& l) noexcept {
  return l.algorithm == config::algorithm::token_bucket && (l.lease > 0 || l.refund > 0);
}

/// The script's algorithm id of `a`: token_bucket 0, fixed_window 1, sliding_window 2,
/// sliding_log 3, calendar 4, concurrency 5 (gcra is not offered: -1).
int algorithm_id(config::algorithm a) noexcept;

/// How buckets are laid out in Redis (`store.layout` and `store.hash_groups`).
struct key_layout {
  /// true (`layout: hash`, the default): buckets are fields of group hashes
  /// (limiter::packed_address); false (`layout: key`): one key per bucket.
  bool packed = true;
  /// Hashes per limit and identity namespace in the hash layout. Redis keeps a hash compact
  /// (a listpack) up to `hash-max-listpack-entries` fields (128 by default): size it to about
  /// active identities / 64.
  std::uint32_t hash_groups = 65536;
};

/// The Redis key that holds limit `l`'s bucket under `layout`: its group hash in the hash
/// layout (sliding logs excepted), else the bucket key itself; KEYS[i] of
/// append_check_command(). Its hash tag decides the bucket's cluster slot.
std::string redis_key(const limiter::limit_check& l, const key_layout& layout);

/// Appends everything after the script's SHA or the function's name for `req` under
/// `layout`: numkeys, the KEYS (one per limit) and the ARGV documented at check(). Sliding-log
/// buckets are never packed (a log is a list of its own). Returns the index in `out` of the
/// stale-after argument (ARGV[2]), which a re-sent check rewrites.
std::size_t append_check_command(const limiter::check_request& req, const key_layout& layout,
                                 std::vector<std::string>& out);

}  // namespace sluice::lua
