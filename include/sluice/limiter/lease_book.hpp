// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// Token leasing (`lease: N` on a token bucket limit): a worker takes up to N tokens of a
/// bucket in one store round trip and spends them itself until they are gone or the lease
/// time runs out, so a hot key costs the store one check per N requests instead of one each.

#include "sluice/limiter/check.hpp"

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

namespace sluice::limiter {

/// What lease_book::split() did to one request's check, for settle() and failed().
struct lease_split {
  std::vector<limit_check> all;  ///< the request's limits as prepared, in order
  /// Per limit of `all`: true when a live lease covers it (it was taken out of the check and
  /// its cost already spent from the lease); its outcome is in `covered`.
  std::vector<bool> local;
  std::vector<limit_outcome> covered;
  /// Per limit of `all` that went to the store asking for a lease: the lease time of the new
  /// lease (0 and lease_id 0: no lease asked for that limit).
  std::vector<std::chrono::milliseconds> lease_time;
  /// Per limit: the lease it spent from (covered) or asked for (sent); 0: none.
  std::vector<std::uint64_t> lease_id;
};

/// The leases one worker holds, one per bucket key (no locks: a worker's own).
///
/// Accuracy: tokens are taken from the bucket before they are spent, so what a bucket
/// admits is unchanged; what can run ahead of it is what the workers hold. In any interval a
/// limit admits at most what the bucket would (burst + rate × interval) plus the tokens held
/// in leases at the interval's start: at most N per worker and instance, so at most
/// N × workers × instances units above the limit (limiter::guarantee states it). Tokens of a
/// lease that ends unused are returned to the bucket (limit_check::refund) with the next check
/// of that key from this worker; until then — or for good, when no such check comes, or the
/// check that carried them failed — they are lost, which refuses early, never admits late.
/// A reload (rules generation) or a new store connection (epoch) ends every lease: a reload
/// may change the bucket, a restarted store may have lost it.
class lease_book {
 public:
  using clock = std::chrono::steady_clock;

  /// `capacity`: most leases kept; when full, the ones that ended go, then all (their tokens
  /// are lost).
  explicit lease_book(std::size_t capacity = 65536) : capacity_(capacity) {}

  /// Prepares `req`, whose limits each carry their lease size in limit_check::lease (0: the
  /// limit does not lease), `lease_time` (parallel to req.limits) their lease times: each
  /// limit a live lease of this worker covers (same bucket, generation and epoch, not ended,
  /// at least `cost` tokens left) is taken out of `req` and its cost spent from the lease;
  /// each other leasing limit asks the store for a lease and returns what its ended lease
  /// left (limit_check::refund) — unless this worker already waits for a lease of that key,
  /// then it is checked without one (one lease request per key and worker in flight, so a
  /// worker never holds more than one lease of a bucket). Returns false, leaving `req` as it
  /// is, when no limit of `req` leases; then neither settle() nor failed() is needed.
  bool split(check_request& req, const std::vector<std::chrono::milliseconds>& lease_time,
             std::uint64_t generation, std::uint64_t epoch, clock::time_point now, lease_split& s);

  /// After the store decided what split() left in the check (`rest`; nullptr when split()
  /// left nothing): records the new leases, gives a covered enforced limit its cost back when
  /// the request was refused (a shadow limit is decided as if alone: it keeps the spend), and
  /// returns the outcome of every limit of the request in its order, the leased ones (covered,
  /// or taking a new lease) described from their lease: Remaining is the tokens left in this
  /// worker's lease plus what the store said was left when the lease was taken (at most the
  /// burst), Reset and the next token as from that level.
  check_outcome settle(lease_split& s, const check_outcome* rest, clock::time_point now);

  /// The store could not decide what split() left in the check: the covered limits get
  /// their cost back, the leases asked for are forgotten (the refunds sent are lost: the
  /// store may or may not have added them), and `req` gets the request's limits back in
  /// order, without lease or refund (for the `local` failure policy).
  void failed(lease_split& s, check_request& req);

  /// Counters: requests decided on the worker from leases alone (no round trip), leases
  /// taken, tokens taken in leases beyond the requests' costs, and tokens returned.
  std::uint64_t local_decisions() const { return local_decisions_; }
  std::uint64_t grants() const { return grants_; }
  std::uint64_t tokens_leased() const { return tokens_leased_; }
  std::uint64_t tokens_returned() const { return tokens_returned_; }
  /// Leases held now.
  std::size_t size() const { return entries_.size(); }

 private:
  struct entry {
    bucket_params bucket;              ///< the bucket as leased (another rate is another bucket)
    std::int64_t tokens = 0;           ///< left to spend
    std::int64_t store_remaining = 0;  ///< the store's Remaining when the lease was taken
    std::uint64_t generation = 0, epoch = 0;
    std::uint64_t id = 0;     ///< this lease's (split() hands it out; settle() matches it)
    bool pending = false;     ///< asked of the store, not answered yet (no tokens)
    clock::time_point until;  ///< when the lease ends (its tokens are then returned)
  };
  static bool same_bucket(const bucket_params& a, const bucket_params& b);
  /// An admitting outcome of bucket `p` with `remaining` tokens (at most the burst): Reset
  /// and the next token as from a level of that many whole tokens.
  static limit_outcome described(const bucket_params& p, std::int64_t remaining);
  void make_room(clock::time_point now);
  /// Gives `cost` back to lease `id` of `key` if it is still the one held.
  void give_back(const std::string& key, std::uint64_t id, std::int64_t cost);

  std::unordered_map<std::string, entry> entries_;
  std::size_t capacity_;
  std::uint64_t next_id_ = 0;
  std::uint64_t local_decisions_ = 0, grants_ = 0, tokens_leased_ = 0, tokens_returned_ = 0;
};

}  // namespace sluice::limiter
