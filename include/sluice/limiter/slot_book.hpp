// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// A worker's book of the concurrency slots its requests hold (limiter/concurrency.hpp): the
/// slot ids it hands out, the slots each admitted request took, the batch that renews them all
/// and the request that releases one request's slots. Bookkeeping only: the worker sends what
/// it builds to its counter store.

#include "sluice/limiter/check.hpp"

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace sluice::limiter {

/// Slots held by one worker's requests. Worker thread only (no locks).
class slot_book {
 public:
  /// `prefix` makes the ids unique across every gateway on the store: e.g. a random instance
  /// id and the worker's index ("9f3c2a71d04e.3"); ids are `<prefix>.<counter>`.
  explicit slot_book(std::string prefix) : prefix_(std::move(prefix)) {}

  /// A slot id not handed out before by this book.
  std::string next_id();

  /// Sets `id` as the slot of every concurrency limit of `req` (op acquire): what a request's
  /// check carries before it is sent. Returns whether `req` has a concurrency limit.
  static bool stamp(check_request& req, const std::string& id);

  /// Records the slots `req` took, as its `out` says (an enforced limit when `out.allowed`,
  /// a shadow limit when it admits alone), under `id`; returns how many. 0: nothing held.
  std::size_t hold(const std::string& id, const check_request& req, const check_outcome& out);

  /// The request that releases the slots held under `id` (no limits: none held), and forgets
  /// them. Called once when the request's exchange ends.
  check_request release(const std::string& id);

  /// One request renewing every slot held (no limits: none held): the worker sends it every
  /// `renew_period()`.
  check_request renewal() const;

  /// A third of the shortest slot_ttl among the slots held (0 when none is held).
  std::int64_t renew_period_ms() const;

  /// Slots held now, and per limit name (bounded by the rules' limit names).
  std::size_t held() const { return held_; }
  const std::unordered_map<std::string, std::int64_t>& held_by_limit() const { return by_limit_; }

 private:
  std::string prefix_;
  std::uint64_t counter_ = 0;
  std::size_t held_ = 0;
  std::unordered_map<std::string, std::vector<limit_check>> slots_;  // by slot id
  std::unordered_map<std::string, std::int64_t> by_limit_;           // limit name → held
  static std::string limit_name(const limit_check& l);
};

}  // namespace sluice::limiter
