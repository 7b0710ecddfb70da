// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// Reads of a store-backed plan directory: HGET on a Redis hash of API key → plan name, over
/// a worker's own connection of the Redis store's class (kept apart from the counter
/// connection so that directory reads never queue behind, nor trip the breaker of, limit
/// checks).

#include "sluice/store/counter_store.hpp"
#include "sluice/store/redis_store.hpp"

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/system/result.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

namespace sluice::store {

/// Settings of a directory connection.
struct redis_directory_settings {
  std::string host = "127.0.0.1";  ///< an address or a name (resolved off the worker's thread)
  std::uint16_t port = 6379;
  std::string password;                          ///< "" = no AUTH
  std::string username;                          ///< ACL user ("" = the default user)
  redis_tls tls;                                 ///< no context: plain TCP
  std::chrono::milliseconds command_timeout{5};  ///< deadline of one HGET
  /// Set: the master is found through these Sentinels (as the store's; host, port ignored).
  std::optional<sentinel_settings> sentinel;
};

/// One Redis connection on a worker's executor, for HGET: a redis_store that loads no script
/// (its set-up is a PING), with everything a store connection has — a connect timeout, AUTH,
/// jittered backoff (50 ms doubling to 500 ms), the idle PING, a deadline per command, the
/// circuit breaker, READONLY/LOADING/MASTERDOWN dropping the connection.
///
/// Connects on start(). hget() errors (never thrown): errc::store_unavailable at once while
/// not connected or while its breaker is open; errc::store_timeout after `command_timeout`
/// (the late reply is dropped); errc::store_error for an error reply or a connection lost
/// mid-command; errc::store_protocol for a reply that is neither a bulk string nor nil.
///
/// Thread-safety: none; every member is called on `ex`'s thread, and the object is destroyed
/// before its io_context. hget() completes on that executor.
class redis_directory {
 public:
  redis_directory(boost::asio::any_io_executor ex, redis_directory_settings settings);
  ~redis_directory();
  redis_directory(const redis_directory&) = delete;
  redis_directory& operator=(const redis_directory&) = delete;

  /// `HGET hash field`: the value, or nullopt when the hash has no such field.
  boost::asio::awaitable<boost::system::result<std::optional<std::string>>> hget(std::string hash,
                                                                                 std::string field);

  /// Starts connecting. Idempotent.
  void start();
  /// Closes the connection; commands in flight complete with an error.
  void stop();
  /// Whether the connection is up.
  bool connected() const;
  /// The connection's counters (store_stats; checks stay 0).
  store_stats stats() const;

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace sluice::store
