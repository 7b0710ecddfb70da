// SPDX-License-Identifier: Apache-2.0
// A worker's book of held concurrency slots (include/sluice/limiter/slot_book.hpp).
#include "sluice/limiter/slot_book.hpp"

#include <algorithm>

namespace sluice::limiter {

std::string slot_book::next_id() {
  return prefix_ + "." + std::to_string(++counter_);
}

bool slot_book::stamp(check_request& req, const std::string& id) {
  bool any = false;
  for (auto& l : req.limits) {
    if (l.algorithm != config::algorithm::concurrency) continue;
    l.slot = id;
    l.op = slot_op::acquire;
    any = true;
  }
  return any;
}

// The limit's name from its bucket key `sl:{<name>|...}` (bounded: names come from the rules).
std::string slot_book::limit_name(const limit_check& l) {
  const auto open = l.key.find('{');
  const auto bar = l.key.find('|', open == std::string::npos ? 0 : open);
  if (open == std::string::npos || bar == std::string::npos) return l.key;
  return l.key.substr(open + 1, bar - open - 1);
}

std::size_t slot_book::hold(const std::string& id, const check_request& req,
                            const check_outcome& out) {
  std::vector<limit_check> taken;
  for (std::size_t i = 0; i < req.limits.size() && i < out.limits.size(); ++i) {
    const auto& l = req.limits[i];
    if (l.algorithm != config::algorithm::concurrency || l.op != slot_op::acquire) continue;
    const bool debited = l.shadow ? out.limits[i].admits : out.allowed;
    if (!debited) continue;
    taken.push_back(l);
    ++by_limit_[limit_name(l)];
  }
  const std::size_t n = taken.size();
  if (n == 0) return 0;
  held_ += n;
  auto& slot = slots_[id];
  slot.insert(slot.end(), taken.begin(), taken.end());
  return n;
}

check_request slot_book::release(const std::string& id) {
  check_request req;
  auto it = slots_.find(id);
  if (it == slots_.end()) return req;
  for (auto& l : it->second) {
    l.op = slot_op::release;
    if (auto b = by_limit_.find(limit_name(l)); b != by_limit_.end() && --b->second == 0)
      by_limit_.erase(b);
  }
  held_ -= it->second.size();
  req.limits = std::move(it->second);
  slots_.erase(it);
  return req;
}

check_request slot_book::renewal() const {
  check_request req;
  req.limits.reserve(held_);
  for (const auto& [id, limits] : slots_) {
    (void)id;
    for (const auto& l : limits) {
      req.limits.push_back(l);
      req.limits.back().op = slot_op::renew;
    }
  }
  return req;
}

std::int64_t slot_book::renew_period_ms() const {
  std::int64_t least = 0;
  for (const auto& [id, limits] : slots_) {
    (void)id;
    for (const auto& l : limits) {
      const std::int64_t third = std::max<std::int64_t>(1, l.bucket.window_ms / 3);
      if (least == 0 || third < least) least = third;
    }
  }
  return least;
}

}  // namespace sluice::limiter
