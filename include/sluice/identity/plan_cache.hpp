// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// The per-worker cache in front of a store-backed plan directory (`identity.directory`):
/// API key → plan name (or "not in the directory"), with a time to live per entry and a
/// bounded size, least recently used entries evicted first. A hit costs one hash lookup and
/// no store round trip.

#include "sluice/string_hash.hpp"

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <list>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

namespace sluice::identity {

/// What the cache knows about a key.
enum class cache_state {
  miss,       ///< nothing fresh: ask the store
  found,      ///< the key is in the directory; the plan is returned
  not_found,  ///< negative entry: the directory does not list the key (no round trip)
};

/// A bounded LRU cache with per-entry expiry.
///
/// Thread-safety: none. One instance per worker, used on the worker's thread only (the
/// request path takes no lock).
class plan_cache {
 public:
  using clock = std::chrono::steady_clock;

  /// `capacity`: most entries (at least 1); the least recently used is evicted beyond it.
  explicit plan_cache(std::size_t capacity);

  /// Looks `key` up at `now`. On `found`, `plan` receives the plan name. An expired entry is
  /// removed and reported as a miss. O(1) expected.
  cache_state get(std::string_view key, clock::time_point now, std::string& plan);

  /// Records that `key` has plan `plan` (nullopt: not in the directory) until `now + ttl`.
  void put(std::string_view key, std::optional<std::string> plan, clock::time_point now,
           std::chrono::milliseconds ttl);

  /// Drops every entry and sets a new capacity (after a reload changed the directory).
  void reset(std::size_t capacity);

  std::size_t size() const { return map_.size(); }
  std::size_t capacity() const { return capacity_; }

  /// Monotonic counters.
  struct counters {
    std::uint64_t hits = 0, negative_hits = 0, misses = 0, evictions = 0;
  };
  const counters& stats() const { return stats_; }

 private:
  struct entry {
    std::string key;
    std::string plan;
    bool present = false;
    clock::time_point expires;
  };
  using lru = std::list<entry>;  // front: most recently used

  std::size_t capacity_;
  lru order_;
  // Keys are views into the list nodes' strings (stable: list nodes never move).
  std::unordered_map<std::string_view, lru::iterator, string_hash, std::equal_to<>> map_;
  counters stats_;
};

}  // namespace sluice::identity
