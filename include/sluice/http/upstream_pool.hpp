// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// Per-worker keep-alive connection pool to upstreams.

#include "sluice/config/rules.hpp"
#include "sluice/http/timed_socket.hpp"
#include "sluice/http/tls_failure.hpp"
#include "sluice/http/types.hpp"

#include <boost/asio/any_io_executor.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/system/result.hpp>

#include <chrono>
#include <optional>
#include <string>
#include <string_view>

#include <cstddef>
#include <cstdint>
#include <memory>

namespace sluice::http {

class client_tls;   // sluice/http/tls_context.hpp
struct idle_watch;  // upstream_pool.cpp: the read an idle pooled connection keeps outstanding

/// Counters of a pool (for metrics and tests).
struct pool_stats {
  std::uint64_t connects = 0;  ///< TCP connections opened
  std::uint64_t reuses = 0;    ///< requests sent on an idle pooled connection
  std::uint64_t failures = 0;  ///< requests that ended in 502/504
  /// Requests re-sent on a fresh connection after a pooled one failed under them, by
  /// retry_reason.
  std::uint64_t retries_not_sent = 0;    ///< nothing of the request had been sent
  std::uint64_t retries_idempotent = 0;  ///< an idempotent request (RFC 9110 §9.2.2)
  /// Requests answered 502 after a pooled connection closed under them, not retried: part of
  /// a non-idempotent request had been sent (the upstream may have acted on it).
  std::uint64_t stale_failures = 0;
  /// Idle pooled connections dropped when their outstanding read completed: the upstream
  /// closed them (EOF, a reset), or sent bytes nobody asked for.
  std::uint64_t idle_closed = 0;
  std::uint64_t idle_stray = 0;
  std::uint64_t idle = 0;  ///< idle keep-alive connections pooled now (a gauge)
};

/// One upstream connection taken from the pool for one exchange (upstream_pool::acquire).
/// Give it back with upstream_pool::release() when the exchange left it reusable; drop it
/// (or close its stream) otherwise.
struct upstream_lease {
  /// Why no connection: errc::upstream_unreachable, errc::upstream_timeout, or
  /// errc::upstream_tls (then `detail` says why).
  boost::system::error_code ec;
  /// For errc::upstream_tls: why the handshake failed, for the 502 problem body and the log
  /// (e.g. `certificate verify failed: hostname mismatch`).
  std::string detail;
  /// For errc::upstream_unreachable: what the system said (the connect's or the name
  /// lookup's error, e.g. `Connection refused`), for the log and the status page's last
  /// error; never sent to clients.
  std::string cause;
  std::optional<timed_socket> stream;
  boost::beast::flat_buffer buffer;  ///< read buffer (empty when taken; reused capacity)
  /// `host:port` (`host:port tls#N` for TLS under client_tls N), the pool it belongs to.
  std::string key;
  bool reused = false;  ///< taken from the idle pool (may be stale)
  /// A pooled connection's outstanding read (see upstream_pool): when set and pending, the
  /// first read of the response must be upstream_pool::first_read(), which takes it over.
  std::shared_ptr<idle_watch> watch;
  /// The upstream's `max_idle` (idle connections kept per worker), for release().
  std::uint32_t max_idle = 0;
  explicit operator bool() const { return stream.has_value(); }
};

/// A pool of idle keep-alive connections per upstream, owned by one worker (no locks).
///
/// Idle connections are kept per `host:port` in a stack (the most recently used first, as it
/// is the least likely to have been closed by the upstream), at most the upstream's
/// `max_idle` of them (the oldest is closed first). An idle connection is dropped when the
/// upstream's `Keep-Alive: timeout=N` (or 15 s without one) is nearly over, or when the
/// upstream closes it or sends bytes on it: every idle connection keeps one read outstanding
/// (into a small buffer of its own), so the event loop sees a close or stray bytes as they
/// come and the connection leaves the pool then, without a check before reuse. When a request
/// takes the connection, that same read receives the first bytes of its response
/// (first_read()). A connection goes back to the pool only after a response that was read
/// entirely and allows keep-alive. All operations run on the worker's executor; stats() may
/// be read from any thread.
///
/// HTTPS upstreams (a client_tls given to acquire() and try_reuse()): a new connection is
/// connected, then its TLS handshake is made (SNI, certificate and host name verified as the
/// client_tls says), both within the connect budget (min(connect_timeout, time left): as
/// nginx's proxy_connect_timeout covers its SSL handshake). A failed handshake is
/// errc::upstream_tls, counted by reason in tls_stats(). TLS connections are pooled apart
/// from plain ones and per client_tls, so a reload that changes verification never reuses a
/// connection made under the old settings.
class upstream_pool {
 public:
  /// Largest response head accepted from an upstream (send() and the relay).
  static constexpr std::uint32_t response_header_limit = 64 * 1024;

  /// Responses with a body over this many bytes are refused (errc::upstream_protocol).
  static constexpr std::uint64_t default_response_body_limit = 64ull * 1024 * 1024;

  /// `max_idle_per_upstream`: idle connections kept per upstream by send() (relay() uses
  /// each upstream's own `max_idle`).
  explicit upstream_pool(boost::asio::any_io_executor ex, std::size_t max_idle_per_upstream = 64);
  ~upstream_pool();

  /// Sets the largest upstream response body accepted, in bytes.
  void set_response_body_limit(std::uint64_t bytes);

  /// An idle connection to `up` (the most recently pooled one still open), or a new one
  /// connected within min(`up.connect_timeout`, time left before `deadline`). A pooled
  /// connection comes with its outstanding read (lease.watch): read its response with
  /// first_read() first.
  /// `fresh`: skip the idle connections (after try_reuse() found none, or a retry after a
  /// stale one). Errors in `ec`: errc::upstream_unreachable (resolve or connect failed),
  /// errc::upstream_timeout.
  /// `tls`: the upstream's TLS (null: plain TCP); errors then also errc::upstream_tls.
  boost::asio::awaitable<upstream_lease> acquire(const config::upstream& up,
                                                 std::chrono::steady_clock::time_point deadline,
                                                 bool fresh = false,
                                                 std::shared_ptr<const client_tls> tls = nullptr);

  /// acquire()'s first step, without waiting: an idle pooled connection to `up` (over
  /// `tls`, when not null), when one is open, into `lease` (true); false otherwise (then
  /// acquire() connects).
  bool try_reuse(const config::upstream& up, upstream_lease& lease,
                 const client_tls* tls = nullptr);

  /// Returns a connection whose last response was read entirely and allows keep-alive; it may
  /// stay idle for `idle_for` (the upstream's Keep-Alive timeout less a margin).
  void release(upstream_lease lease, std::chrono::milliseconds idle_for);

  /// Why a request was sent again on a fresh connection after a pooled one failed under it
  /// (RFC 9110 §9.2.2: only then may a request be retried automatically).
  enum class retry_reason {
    not_sent,    ///< no byte of the request had been sent
    idempotent,  ///< an idempotent request, no byte of a response received
  };

  /// Counts an exchange that failed (502/504), one re-sent after a stale connection, and one
  /// answered 502 because its pooled connection closed under it after part of a request that
  /// may not be repeated had been sent.
  void count_failure();
  void count_retry(retry_reason why);
  void count_stale_failure();

  /// Receives the first bytes of the response on a leased pooled connection: the read the
  /// connection kept outstanding while idle completes (or has completed) into lease.buffer.
  /// Returns its error: asio::error::eof when the upstream closed the connection,
  /// operation_aborted when the stream's deadline passed or it was closed (map it with
  /// timed_socket::timeout_error). Without a pending outstanding read, returns at once with
  /// no error and reads nothing. Set the stream's deadline first.
  static boost::asio::awaitable<boost::system::error_code> first_read(upstream_lease& lease);

  /// How long a connection whose response said `Keep-Alive: <keep_alive>` may stay idle:
  /// `timeout=N` (a de-facto field, RFC 2068 §19.7.1.1) less 500 ms, else (none, or no
  /// timeout in it) 15 s.
  static std::chrono::milliseconds idle_lifetime(std::string_view keep_alive);

  /// Sends `req` (a client request, rendered for the upstream hop by
  /// headers::render_upstream_request with its own target and `client_address`) to `up`
  /// with its body framed by Content-Length, and reads the whole response. Reuses an idle
  /// connection when one is open; a reused connection that fails before any response byte is
  /// retried once on a new connection (only for requests whose method is idempotent). Errors:
  /// errc::upstream_unreachable (connect failed: 502), errc::upstream_timeout (504),
  /// errc::upstream_protocol (malformed response: 502).
  boost::asio::awaitable<boost::system::result<response>> send(const config::upstream& up,
                                                               request req,
                                                               std::string_view client_address);

  /// The pool's counters (safe from any thread).
  pool_stats stats() const;
  /// TLS handshakes with upstreams: completed, and failed by reason (any thread may read).
  const tls_counters& tls_stats() const;

  /// Idle connections currently pooled for every upstream (worker thread only).
  std::size_t idle_count() const;

 private:
  struct impl;
  std::shared_ptr<impl> impl_;
};

}  // namespace sluice::http
