// SPDX-License-Identifier: Apache-2.0
// LRU with expiry: a std::list holds the entries in recency order and an unordered_map
// indexes them by key (a view into the node's own string, so each key is stored once).
// Every operation is O(1) expected. Memory per entry: one list node (key + plan strings +
// expiry + two pointers) and one hash node; measured in bench/plan_directory.sh.

#include "sluice/identity/plan_cache.hpp"

#include <algorithm>

namespace sluice::identity {

plan_cache::plan_cache(std::size_t capacity) : capacity_(std::max<std::size_t>(1, capacity)) {}

cache_state plan_cache::get(std::string_view key, clock::time_point now, std::string& plan) {
  auto it = map_.find(key);
  if (it == map_.end()) {
    ++stats_.misses;
    return cache_state::miss;
  }
  auto node = it->second;
  if (node->expires <= now) {
    map_.erase(it);
    order_.erase(node);
    ++stats_.misses;
    return cache_state::miss;
  }
  order_.splice(order_.begin(), order_, node);
  if (!node->present) {
    ++stats_.negative_hits;
    return cache_state::not_found;
  }
  ++stats_.hits;
  plan = node->plan;
  return cache_state::found;
}

void plan_cache::put(std::string_view key, std::optional<std::string> plan, clock::time_point now,
                     std::chrono::milliseconds ttl) {
  if (auto it = map_.find(key); it != map_.end()) {
    auto node = it->second;
    node->present = plan.has_value();
    node->plan = plan ? std::move(*plan) : std::string();
    node->expires = now + ttl;
    order_.splice(order_.begin(), order_, node);
    return;
  }
  while (map_.size() >= capacity_ && !order_.empty()) {
    map_.erase(std::string_view(order_.back().key));
    order_.pop_back();
    ++stats_.evictions;
  }
  order_.push_front(entry{std::string(key), plan ? std::move(*plan) : std::string(),
                          plan.has_value(), now + ttl});
  map_.emplace(std::string_view(order_.front().key), order_.begin());
}

void plan_cache::reset(std::size_t capacity) {
  map_.clear();
  order_.clear();
  capacity_ = std::max<std::size_t>(1, capacity);
}

}  // namespace sluice::identity
