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
/// Its clock is the host's real-time clock in ms since the Unix epoch (same epoch as Redis
/// `TIME`); time going backwards counts as no elapsed time.
class memory_store final : public counter_store {
 public:
  /// Milliseconds since the Unix epoch.
  using clock_fn = std::function<std::int64_t()>;

  /// `clock` defaults to std::chrono::system_clock.
  explicit memory_store(clock_fn clock = {});
  ~memory_store() override;

  boost::asio::awaitable<boost::system::result<limiter::check_outcome>> check(
      limiter::check_request req) override;
  store_stats stats() const override;

  /// decide(), always available: returns true.
  bool decide_now(const limiter::check_request& req, limiter::check_outcome& out) override {
    out = decide(req);
    return true;
  }

  /// The synchronous decision behind check(); safe from any thread.
  limiter::check_outcome decide(const limiter::check_request& req);

  /// Number of live (unexpired) buckets; for tests and metrics.
  std::size_t size() const;

  /// Entries held in memory, expired or not (tests of the idle sweep).
  std::size_t stored_entries() const;

  /// Raw state of a bucket key for tests: {level units, stamp ms}, or nullopt when absent
  /// or expired.
  std::optional<std::pair<std::int64_t, std::int64_t>> peek(const std::string& key) const;

  /// Raw state of any key for tests, in the script's stored format (lua_scripts.hpp): token
  /// bucket "<level> <stamp>", fixed window "<index>:<count>", sliding window
  /// "<index>:<current>:<previous>", sliding log the stamps joined by ','. nullopt when absent
  /// or expired.
  std::optional<std::string> peek_state(const std::string& key) const;

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace sluice::store
