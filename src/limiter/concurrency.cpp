// SPDX-License-Identifier: Apache-2.0
// Concurrency slots: the reference that lua/concurrency.lua mirrors operation for operation
// (include/sluice/limiter/concurrency.hpp). Every time is an integer of ms of store time, so
// the same steps are exact here and in the script's doubles. A set holds at most max_in_flight
// live slots (at most 10,000, validated) plus those a lowered limit left: O(N) per check.
#include "sluice/limiter/concurrency.hpp"

#include <algorithm>
#include <limits>

namespace sluice::limiter {
namespace {

// Earliest and latest expiry of `slots` (both 0 when empty).
std::pair<std::int64_t, std::int64_t> expiry_span(const slot_set& slots) {
  if (slots.empty()) return {0, 0};
  std::int64_t lo = std::numeric_limits<std::int64_t>::max();
  std::int64_t hi = 0;
  for (const auto& s : slots) {
    lo = std::min(lo, s.expires_ms);
    hi = std::max(hi, s.expires_ms);
  }
  return {lo, hi};
}

auto find_slot(slot_set& slots, const std::string& id) {
  return std::find_if(slots.begin(), slots.end(), [&id](const held_slot& s) { return s.id == id; });
}

}  // namespace

void expire_slots(slot_set& slots, std::int64_t now_ms) {
  std::erase_if(slots, [now_ms](const held_slot& s) { return s.expires_ms <= now_ms; });
}

bool holds_slot(const slot_set& slots, const std::string& id) {
  return std::any_of(slots.begin(), slots.end(), [&id](const held_slot& s) { return s.id == id; });
}

bool slots_admit(const slot_set& slots, const limit_check& l) {
  if (l.op != slot_op::acquire) return true;
  return holds_slot(slots, l.slot) ||
         static_cast<std::int64_t>(slots.size()) < l.bucket.window_limit;
}

bool apply_slot_op(slot_set& slots, const limit_check& l, bool debit, std::int64_t now_ms) {
  auto it = find_slot(slots, l.slot);
  const bool held = it != slots.end();
  switch (l.op) {
    case slot_op::acquire:
      if (debit && !held) slots.push_back({l.slot, now_ms + l.bucket.window_ms});
      return held || debit;
    case slot_op::release:
      if (held) slots.erase(it);
      return held;
    case slot_op::renew:
      if (held) it->expires_ms = now_ms + l.bucket.window_ms;
      return held;
  }
  return false;
}

limit_outcome describe_slots(const slot_set& before, const slot_set& after, const bucket_params& p,
                             std::int64_t now_ms, bool admits) {
  limit_outcome o;
  o.admits = admits;
  o.limit = p.window_limit;
  o.remaining = std::max<std::int64_t>(0, p.window_limit - static_cast<std::int64_t>(after.size()));
  const auto [first, last] = expiry_span(after);
  o.reset_ms = after.empty() ? 0 : last - now_ms;
  if (o.remaining < o.limit && !after.empty())
    o.next_ms = std::min(first - now_ms, slot_estimate_ms);
  if (!admits && !before.empty())
    o.retry_after_ms = std::min(expiry_span(before).first - now_ms, slot_estimate_ms);
  return o;
}

std::int64_t slots_ttl_ms(const slot_set& after, std::int64_t now_ms) {
  return after.empty() ? 0 : expiry_span(after).second - now_ms;
}

}  // namespace sluice::limiter
