// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// The penalty box (`block:` of a limit): once a limit refuses a key, the key stays refused by
/// that limit for the block's duration. The block lives in the store beside the limit's bucket
/// (same hash tag, so the same cluster slot and the same check script), with its own expiry on
/// the store's clock. lua/block.lua mirrors these functions operation for operation.

#include "sluice/limiter/check.hpp"
#include "sluice/limiter/keys.hpp"

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

namespace sluice::limiter {

/// The suffix that makes a block's place from its bucket's: `<bucket key>:block` (its own key,
/// `store.layout: key` and the memory store), or `<field>:block` (a field of the bucket's
/// group hash, `store.layout: hash`). Both keep the bucket's hash tag.
inline constexpr std::string_view block_suffix = ":block";

/// Where the block of the bucket stored at `bucket` lives: the key `bucket.key + ":block"`
/// when the bucket is a key of its own (`field` empty), else field `bucket.field + ":block"`
/// of the same hash. The value is the block's end, pack('<d', ms of store time) (in a hash,
/// that is the field's expiry stamp, so an ended block reads as missing).
store_address block_address(const store_address& bucket);

/// The block key of bucket key `bucket_key` in a key-per-bucket layout (the memory store).
std::string block_key(std::string_view bucket_key);

/// Applies a block in force for `left_ms` more ms (> 0) to the outcome `o` its bucket gave:
/// the limit refuses (admits = false), Remaining is 0, and Reset, Retry-After and the next-unit
/// time are at least `left_ms` — each is when the later of the two, the block's end and the
/// bucket's own time, has passed (the bucket only refills meanwhile: a blocked key is debited
/// nothing). The next-unit time is the bucket's own only when the bucket has no whole unit.
void apply_block(limit_outcome& o, std::int64_t left_ms);

}  // namespace sluice::limiter
