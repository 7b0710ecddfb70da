// SPDX-License-Identifier: Apache-2.0
// The penalty box's places and arithmetic (include/sluice/limiter/block.hpp); lua/block.lua
// is the script's copy.
#include "sluice/limiter/block.hpp"

#include <algorithm>

namespace sluice::limiter {

store_address block_address(const store_address& bucket) {
  store_address out = bucket;
  if (out.field.empty())
    out.key.append(block_suffix);
  else
    out.field.append(block_suffix);
  return out;
}

std::string block_key(std::string_view bucket_key) {
  std::string out;
  out.reserve(bucket_key.size() + block_suffix.size());
  out.append(bucket_key);
  out.append(block_suffix);
  return out;
}

void apply_block(limit_outcome& o, std::int64_t left_ms) {
  // The bucket's next unit counts only when it has none now: with one, the block's end is
  // when the next unit can be spent.
  o.next_ms = o.remaining > 0 ? left_ms : std::max(o.next_ms, left_ms);
  o.admits = false;
  o.remaining = 0;
  o.reset_ms = std::max(o.reset_ms, left_ms);
  o.retry_after_ms = std::max(o.retry_after_ms, left_ms);
}

}  // namespace sluice::limiter
