// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// The access log (issue 13): one line per request, plain or JSON lines, to a file or stdout,
/// written by spdlog's asynchronous logger on its own thread so a slow disk never slows a
/// request (a full queue drops the oldest lines and counts them), reopened on request
/// (`SIGUSR1`, after logrotate moved the file). API keys appear only as key_hash().

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace spdlog {
class logger;
namespace details {
class thread_pool;
}
}  // namespace spdlog

namespace sluice::observability {

/// One request as the access log records it. Views are read during write() only.
struct access_record {
  std::int64_t unix_ms = 0;  ///< when the request head was read, ms since the Unix epoch
  std::string_view client;   ///< the client address the gateway keyed on (or the peer)
  std::string_view method;   ///< request method
  std::string_view target;   ///< request target as received
  /// The client's protocol: `HTTP/1.0`, `HTTP/1.1` or `HTTP/2.0` ("" when unknown: left out).
  std::string_view protocol;
  unsigned status = 0;           ///< status sent to the client (0: none, the connection ended)
  std::string_view route;        ///< "" when no route matched
  std::string_view decision;     ///< allowed, limited, shadow-limited, fail_open, fail_closed,
                                 ///< local, unlimited, or "" (answered before any limit)
  std::string_view limit;        ///< the deciding limit ("" when none refused)
  std::int64_t remaining = -1;   ///< the Remaining sent (-1: none)
  std::string_view upstream;     ///< upstream name ("" when not forwarded)
  unsigned upstream_status = 0;  ///< the upstream's status (0: none)
  double upstream_ms = -1;       ///< request sent to response head received (-1: none)
  double total_ms = 0;           ///< head read to the last response byte written
  std::uint64_t bytes_in = 0;    ///< request body bytes read from the client
  std::uint64_t bytes_out = 0;   ///< response bytes written to the client (head and body)
  std::string_view key_hash;     ///< key_hash() of the API key ("" when none)
};

/// Line formats (`access_log.format`).
enum class access_format { plain, json };

/// A short keyed hash of an API key for logs: the first 12 hex digits of
/// HMAC-SHA256(secret, key) (RFC 2104). The same key gives the same hash while the secret is
/// the same, so lines of one caller can be found, and the key cannot be read back.
std::string key_hash(std::string_view key, std::string_view secret);

/// Formats `r` as one line without its newline: `plain` is
/// `TIME CLIENT "METHOD TARGET PROTOCOL" STATUS route=R decision=D limit=L remaining=N upstream=U
/// upstream_status=S upstream_ms=X total_ms=Y in=B out=B key=H` (absent values as `-`), TIME
/// in UTC RFC 3339 with milliseconds; `json` is one object with the same names, always valid
/// JSON (RFC 8259): a byte of the target that is not well-formed UTF-8 is written `%XX` (as a
/// URI writes it; a client may send such bytes), in any other value U+FFFD.
std::string format_access_line(const access_record& r, access_format f);

/// The access log: an asynchronous spdlog logger over a file sink that reopens its file on
/// request, or over stdout (`path` "-").
class access_log {
 public:
  /// Opens `path` for appending (created 0640), or stdout for "-"; `queue` lines may wait for
  /// the logging thread. Throws std::runtime_error naming the file when it cannot be opened.
  access_log(const std::string& path, access_format format, std::size_t queue = 8192);
  ~access_log();  ///< writes what is queued, then stops the thread
  access_log(const access_log&) = delete;
  access_log& operator=(const access_log&) = delete;

  /// Formats `r` on the calling thread and queues the line; never blocks on the file (a
  /// full queue drops the oldest line: dropped()). Thread-safe.
  void write(const access_record& r) noexcept;
  /// Reopens the file (same path) before the next line is written; for logrotate's
  /// `postrotate kill -USR1`. Async-signal-safe (sets a flag). No effect on stdout.
  void reopen() noexcept;
  /// Lines dropped because the queue was full.
  std::uint64_t dropped() const;
  /// Writes every queued line now (tests, shutdown).
  void flush();
  access_format format() const { return format_; }

 private:
  access_format format_;
  std::shared_ptr<std::atomic<bool>> reopen_;
  std::shared_ptr<spdlog::details::thread_pool> pool_;
  std::shared_ptr<spdlog::logger> logger_;
};

}  // namespace sluice::observability
