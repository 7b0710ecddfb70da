// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// The embedded counter store (`store.type: memory`): one per process, shared by all workers,
/// with the same semantics as the Lua scripts (held to the same table tests).

#include "sluice/store/counter_store.hpp"

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>

namespace sluice::store {

/// In-process counter store. Buckets live in sharded hash maps, each shard behind its own
/// mutex; a check locks the shards of its keys in a fixed order, so a multi-limit check is
/// atomic and deadlock-free. Idle state expires like the script's Redis keys (at its Reset).
///
/// Clock: milliseconds since the Unix epoch, as Redis `TIME` gives them (so fixed windows
/// align as they do on Redis), but measured on std::chrono::steady_clock from an anchor read
/// once from std::chrono::system_clock at construction: a step of the host's wall clock
/// (settimeofday, NTP after a suspend) neither refills nor drains a bucket. The anchored clock
/// runs at the monotonic clock's rate (NTP slews it, never steps it), so it can drift from
/// the wall clock by the slew accumulated since start. Time going backwards (an injected
/// clock) counts as no elapsed time.
///
/// Bound: at most `max_buckets` entries (one per bucket key), split evenly over the shards. A
/// check that must create an entry in a shard at its share first removes expired entries, then
/// evicts the sampled entry nearest to its Reset (the token bucket nearest to full): a missing
/// bucket reads as full, so evicting a full one changes no decision, and evicting the one
/// nearest to full changes the least (a few tokens early, never a refusal).
class memory_store final : public counter_store {
 public:
  /// Milliseconds since the Unix epoch.
  using clock_fn = std::function<std::int64_t()>;

  /// `store.max_buckets`'s default (config::store_settings): about 200 MB of buckets with
  /// keys of 40 bytes (bench/RESULTS.md, "Bounded memory store").
  static constexpr std::uint64_t default_max_buckets = 1'000'000;

  /// `clock` defaults to the anchored monotonic clock above; tests inject their own.
  /// `max_buckets` (at least 1) bounds the entries held (a bound under 1,024 uses one shard
  /// per 16 entries; below 32, one shard: it then holds exactly). Throws
  /// std::invalid_argument on 0.
  explicit memory_store(clock_fn clock = {}, std::uint64_t max_buckets = default_max_buckets);
  ~memory_store() override;

  boost::asio::awaitable<boost::system::result<limiter::check_outcome>> check(
      limiter::check_request req) override;
  /// checks, `buckets` (entries held now, expired ones not yet removed included) and
  /// `evictions` (live entries evicted at the bound); always connected.
  store_stats stats() const override;

  /// True: decide_now() always decides.
  bool decides_in_memory() const override { return true; }

  /// decide(): returns true — except for a settle that cannot be settled
  /// (limiter::can_settle), false: check() then answers errc::store_error, as the script does.
  bool decide_now(const limiter::check_request& req, limiter::check_outcome& out) override {
    if (req.settle && !limiter::can_settle(req)) return false;
    out = decide(req);
    return true;
  }

  /// The synchronous decision behind check(); safe from any thread. A settle
  /// (check_request::settle) is settled limit by limit under the same locks; expects
  /// limiter::can_settle() of it.
  limiter::check_outcome decide(const limiter::check_request& req);

  /// Number of live (unexpired) buckets; for tests. O(entries).
  std::size_t size() const;

  /// The bound in force: entries per shard × shards (≤ max_buckets, within 63 of it).
  /// A check may overshoot it by its own limits when they crowd one full shard.
  std::uint64_t capacity() const;

  /// Entries held in memory, expired or not (tests of the idle sweep).
  std::size_t stored_entries() const;

  /// Raw state of a bucket key for tests: {level units, stamp ms}, or nullopt when absent
  /// or expired.
  std::optional<std::pair<std::int64_t, std::int64_t>> peek(const std::string& key) const;

  /// Raw state of any key for tests, in the script's stored format (lua_scripts.hpp): token
  /// bucket "<level> <stamp>", fixed window "<index>:<count>", sliding window
  /// "<index>:<current>:<previous>", calendar "<period index>:<count>:<zone>", sliding log the
  /// stamps joined by ','. nullopt when absent
  /// or expired.
  std::optional<std::string> peek_state(const std::string& key) const;

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace sluice::store
