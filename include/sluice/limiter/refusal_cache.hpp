// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// The over-limit cache: refusals a shared store answered, kept on the worker for as long as
/// the refused limit cannot change, so an abusive caller costs the store nothing.

#include "sluice/limiter/check.hpp"

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <unordered_map>

namespace sluice::limiter {

/// Remembered refusals, one per bucket key, owned by one worker (no locks).
///
/// Only a check with exactly one limit, enforced (not shadow), is remembered, when the store
/// refused it — and never a concurrency limit's refusal (a slot frees whenever a request of
/// the key ends, so no time is known during which the refusal stands). A refusal stays valid for
/// min(retry_after, next) from the moment the check was *sent* (the store decided it later, so the
/// window can only end early, never late): until then no token (or window slot) reaches that bucket
/// — other requests can only take tokens, never add them — so a check of the same key and cost is
/// refused exactly as the store would refuse it, and Remaining cannot grow meanwhile. Recalled
/// outcomes have Reset, Retry-After and the next-token time shortened by the time elapsed, so the
/// quota headers are the ones the store would produce (on a gateway that is the key's only client;
/// with several, another gateway's admissions of smaller costs may leave the store's Remaining
/// lower). A reload invalidates everything (entries carry the rules generation), and so does a new
/// store connection (they carry the store's connection epoch: a restarted Redis may have lost
/// the bucket); another cost or another limit (algorithm, bucket) under the same key is a
/// miss. A bucket deleted by hand in Redis is seen once the cached refusal ends.
///
/// A refusal by a limit's block (penalty box, limiter/block.hpp) is one the store would
/// repeat until the block ends (its Retry-After and next-unit time are at least the block's
/// remaining time, counted from the check's *sending*, so never past the block's end), but an
/// admin call may lift the block: such a refusal is kept for at most block_recheck, and a
/// lift on this gateway (note_block_lift()) forgets every entry at once.
/// A calendar quota's refusal is kept at most `calendar_hold_ms` (1 s): it would otherwise
/// stand until the period's end measured on the worker's clock, which over days drifts from
/// the store's clock the period ends on (and does not follow a step of it).
class refusal_cache {
 public:
  using clock = std::chrono::steady_clock;

  /// The longest a refusal by a block is answered from the cache: an unblock on another
  /// gateway is seen within this time.
  static constexpr std::chrono::milliseconds block_recheck{1000};
  /// The longest a calendar quota's refusal is answered from the cache, in ms.
  static constexpr std::int64_t calendar_hold_ms = 1000;

  /// `capacity`: most entries kept; when full, expired ones are dropped, then all.
  explicit refusal_cache(std::size_t capacity = 65536) : capacity_(capacity) {}

  /// When `req` matches a live remembered refusal of rules generation `generation`: true,
  /// and `out` is that refusal as of `now`. Otherwise false (ask the store).
  bool recall(const check_request& req, std::uint64_t generation, clock::time_point now,
              check_outcome& out, std::uint64_t epoch = 0);

  /// Remembers `out`, the store's outcome of a check of the one limit `limit`, if it is a
  /// refusal worth keeping (see the class comment); `sent`: when the check was sent.
  void remember(const limit_check& limit, const check_outcome& out, std::uint64_t generation,
                clock::time_point sent, std::uint64_t epoch = 0);

  /// Refusals answered from the cache so far.
  std::uint64_t hits() const { return hits_; }
  /// Entries held now.
  std::size_t size() const { return entries_.size(); }

 private:
  struct entry {
    limit_check limit;  ///< the limit as checked (algorithm, bucket, cost)
    std::uint64_t generation = 0;
    std::uint64_t epoch = 0;  ///< the store connection's, when it was remembered
    clock::time_point sent, until;
    check_outcome outcome;
  };
  std::unordered_map<std::string, entry> entries_;
  std::size_t capacity_;
  std::uint64_t hits_ = 0;
  std::uint64_t lifts_seen_ = 0;  ///< block_lifts() when the entries were last checked
};

/// Blocks lifted by this process so far (POST /admin/unblock); every worker's refusal_cache
/// forgets its entries when it sees the count change. Any thread.
std::uint64_t block_lifts() noexcept;

/// Counts one lift (the admin unblock calls it once the store deleted a block). Any thread.
void note_block_lift() noexcept;

}  // namespace sluice::limiter
