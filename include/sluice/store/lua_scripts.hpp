#pragma once
/// @file
/// The Lua scripts of `lua/`, embedded at build time (cmake/SluiceEmbedLua.cmake).

#include <string_view>

namespace sluice::lua {

/// `lua/token_bucket.lua`: decides a batch of token buckets atomically.
///
/// KEYS[i]: bucket key i. ARGV[1]: store time override in ms (-1: use Redis TIME).
/// ARGV[2]: n. Then 5 integers per limit i: refill_per_ms, units_per_token, burst, cost,
/// shadow (0|1). Reply: an array of integers {allowed, now_ms, then per limit: admits,
/// remaining, reset_ms, retry_after_ms, next_ms}. State per key: a string
/// "<level units> <stamp ms>", PEXPIRE'd to the time to full on every call.
std::string_view token_bucket() noexcept;

}  // namespace sluice::lua
