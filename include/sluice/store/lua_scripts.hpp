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

/// The check script: `lua/common.lua`, the algorithm parts (`token_bucket.lua`, `window.lua`,
/// `fixed_window.lua`, `sliding_window.lua`, `sliding_log.lua`) and the driver `check.lua`,
/// concatenated. Decides a batch of limits of any mix of algorithms atomically.
///
/// KEYS[i]: the key of limit i's bucket, or the hash holding it. ARGV[1]: store time override
/// in ms (-1: use Redis TIME). ARGV[2]: n. ARGV[3]: stale after, Redis TIME in ms even under
/// an override (-1: no bound): a check run later than that writes nothing and answers the
/// error `STALE sluice check: now <Redis TIME ms>`. Then 7 arguments per limit i: algorithm id
/// (algorithm_id()), a, b, c, cost, shadow (0|1), field, where (a, b, c) = (refill_per_ms,
/// units_per_token, burst) for the token bucket and (window_ms, window limit, 0) for the window
/// algorithms, and field is the bucket's field in hash KEYS[i] ("" = KEYS[i] is the bucket).
/// Reply: an array of integers {allowed, now_ms, then per limit: admits, remaining, reset_ms,
/// retry_after_ms, next_ms}. Bad arguments are an error reply before anything is written.
/// State per bucket, packed as little-endian doubles (struct.pack('<d...'), exact integers up
/// to 2^53); every write arms the expiry to the limit's Reset, or deletes the bucket when
/// Reset is 0; a refused request that leaves a state as it read it writes nothing and only
/// raises the expiry when it is below the Reset (a key without one gets one):
/// - token bucket: (level units, stamp ms, units per token), 24 bytes;
/// - fixed window: (window index, count), 16 bytes;
/// - sliding window: (window index, current, previous), 24 bytes;
/// - sliding log: list of ms stamps, one per admitted unit, oldest first (never in a hash).
/// The text forms of earlier versions ("<level> <stamp> <units>", "<i>:<c>", "<i>:<c>:<p>")
/// are still read. In a hash a field is the 8-byte expiry stamp (ms of store time) followed
/// by the state and reads as missing from then on; the hash's own expiry is only ever raised
/// (to the latest Reset written, plus up to 500 ms of slack when it rises); about one in four
/// checks that create a field in an existing hash deletes the expired ones among 8 sampled fields.
std::string_view check() noexcept;

/// The script's algorithm id of `a`: token_bucket 0, fixed_window 1, sliding_window 2,
/// sliding_log 3 (gcra is not offered: -1).
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

/// Appends everything after the script's name or SHA for `req` under `layout`: numkeys, the
/// KEYS (one per limit) and the ARGV documented at check(). Sliding-log buckets are never
/// packed (a log is a list of its own).
void append_check_command(const limiter::check_request& req, const key_layout& layout,
                          std::vector<std::string>& out);

}  // namespace sluice::lua
