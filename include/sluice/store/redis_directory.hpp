#pragma once
/// @file
/// Reads of a store-backed plan directory: HGET on a Redis hash of API key → plan name, over
/// a worker's own hiredis async connection (kept apart from the counter connection so that
/// directory reads never queue behind, nor trip the breaker of, limit checks).

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
  std::string host = "127.0.0.1";  ///< an address (no blocking resolution)
  std::uint16_t port = 6379;
  std::string password;                          ///< "" = no AUTH
  std::chrono::milliseconds command_timeout{5};  ///< deadline of one HGET
};

/// One hiredis async connection on a worker's executor, for HGET.
///
/// Connects on start(), reconnects with backoff (50 ms doubling to 1 s) after a failure.
/// hget() errors (never thrown): errc::store_unavailable at once while not connected;
/// errc::store_timeout after `command_timeout` (the late reply is dropped); errc::store_error
/// for an error reply or a connection lost mid-command; errc::store_protocol for a reply that
/// is neither a bulk string nor nil.
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

 private:
  struct impl;
  std::shared_ptr<impl> impl_;
};

}  // namespace sluice::store
