#pragma once
/// @file
/// The Redis counter store: one hiredis async connection per worker, driven by the worker's
/// io_context, running the embedded Lua scripts with EVALSHA.

#include "sluice/store/counter_store.hpp"

#include <chrono>
#include <memory>
#include <string>

namespace sluice::store {

/// Settings of one Redis connection.
struct redis_settings {
  std::string host = "127.0.0.1";
  std::uint16_t port = 6379;
  std::chrono::milliseconds command_timeout{5};   ///< deadline of one check
  std::chrono::milliseconds connect_timeout{250}; ///< deadline of one connection attempt
  std::string password;                            ///< "" = no AUTH
};

/// A Redis store bound to one executor (a worker's io_context).
///
/// Protocol (see STYLE.md "hiredis 0.14 inside Asio"): the script is loaded with SCRIPT LOAD
/// after each connect and called with EVALSHA; a NOSCRIPT reply triggers one SCRIPT LOAD and
/// one retry. A check that times out or whose connection drops is never replayed (the
/// script may have run). Each command has its own deadline timer; a late reply is dropped.
/// Concurrent checks are pipelined on the one connection. Reconnects with jittered backoff
/// (50 ms doubling to 1 s) after a failed attempt or a lost connection.
///
/// check() errors: store_unavailable at once while not connected (before start(), while
/// (re)connecting, after stop()); store_timeout when `command_timeout` passes (the late reply
/// is dropped and counted in store_stats::late_replies); store_error for an error reply
/// (READONLY, OOM, BUSY, WRONGTYPE, a second NOSCRIPT...) or a connection lost mid-check;
/// store_protocol for a reply of the wrong shape.
///
/// Thread-safety: none; every member (check, start, stop, stats, the destructor) is called on
/// `ex`'s thread, and the store is destroyed before its io_context.
class redis_store final : public counter_store {
 public:
  /// `ex`: the worker's executor, on which hiredis is driven and checks complete. Does not
  /// connect: call start(). `settings.host` should be an address (hiredis resolves names with
  /// a blocking call).
  redis_store(boost::asio::any_io_executor ex, redis_settings settings);
  /// Stops (see stop()).
  ~redis_store() override;

  boost::asio::awaitable<boost::system::result<limiter::check_outcome>> check(
      limiter::check_request req) override;
  void start() override;
  void stop() override;
  store_stats stats() const override;

 private:
  struct impl;
  std::shared_ptr<impl> impl_;
};

}  // namespace sluice::store
