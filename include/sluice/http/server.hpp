// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// The listener and client sessions of one worker.

#include "sluice/http/relay.hpp"
#include "sluice/http/tls_failure.hpp"
#include "sluice/http/types.hpp"
#include "sluice/http/upstream_pool.hpp"

#include <boost/asio/io_context.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>

namespace sluice::http {

class server_tls;  // sluice/http/tls_context.hpp

/// Deadlines and caps applied to every client connection (config::client_settings gives
/// the gateway's; the defaults here are the same).
struct session_limits {
  /// Request head bytes, request line included (Beast's header_limit); over: 431 (RFC 6585
  /// §5), or 414 when the request line alone is over `uri_limit`.
  std::uint32_t header_limit = 32 * 1024;
  std::uint32_t header_count_limit = 100;  ///< header fields per head; over: 431
  std::uint32_t uri_limit = 8 * 1024;      ///< request-target bytes; over: 414 (RFC 9110 §15.5.15)
  /// Body bytes a `verdict::kind::buffer` request may carry (over: 413); forwarded bodies
  /// are streamed under their route's `max_request_body` instead.
  std::uint64_t body_limit = 1024 * 1024;
  /// The whole head, from its first byte (from the accept for a connection's first request);
  /// a partial head then gets 408 (RFC 9110 §15.5.9), an empty connection is just closed.
  std::chrono::milliseconds header_timeout{10000};
  /// A keep-alive connection idle this long between requests is closed (no answer).
  std::chrono::milliseconds idle_timeout{75000};
  std::chrono::milliseconds body_timeout{30000};  ///< between two body reads; then 408
  /// A forwarded body's minimum average rate, bytes per second (0 = none): the time spent
  /// waiting for its bytes may reach body_timeout + received / body_min_rate; then 408.
  std::uint64_t body_min_rate = 0;
  std::chrono::milliseconds send_timeout{30000};  ///< per write to the client; then close
  /// Open connections; one accepted over it is reset at once (counted in
  /// connection_stats::rejected, logged at most once a second). 0 = no cap.
  std::size_t max_connections = 0;
  /// `http2:` on a plain listener, a connection opening with the HTTP/2 preface is served as
  /// HTTP/2 (h2c with prior knowledge, RFC 9113 §3.3); HTTP/1.1 goes on on the same port. A TLS
  /// connection is HTTP/2 when ALPN chose `h2` (server_tls offers it under the same field).
  bool http2 = false;
};

/// Per-listener counters of the client side (one writer, the worker; any thread may read).
struct connection_stats {
  std::atomic<std::int64_t> open{0};              ///< client connections open now
  std::atomic<std::uint64_t> rejected{0};         ///< accepted over max_connections and reset
  std::atomic<std::uint64_t> header_timeouts{0};  ///< 408: a head did not complete in time
  std::atomic<std::uint64_t> idle_closed{0};      ///< closed silent: idle keep-alive or no byte
  std::atomic<std::uint64_t> too_large_heads{0};  ///< 431: head over the size or field cap
  std::atomic<std::uint64_t> too_long_uris{0};    ///< 414
};

/// Accepts connections on one endpoint for one worker and runs one coroutine session per
/// connection. Workers share a port with SO_REUSEPORT: pass the port the first worker
/// actually bound (port 0 picks a free one).
///
/// Sessions: HTTP/1.1 keep-alive; pipelined requests are read, decided and answered one at a
/// time in arrival order; a request that cannot be parsed, or that carries both
/// Content-Length and Transfer-Encoding (RFC 9112 §6.3), gets 400 and the connection is
/// closed; a head over `header_limit` or `header_count_limit` gets 431, a target over
/// `uri_limit` 414, a head that does not complete within `header_timeout` 408 (each then
/// closes the connection). Each request is decided by the handler on its head
/// alone (request_handler::decide); a forwarded one is relayed by http::relay(), its body
/// streamed both ways. A request answered without forwarding whose body is unread: the
/// body is read and discarded when its declared length is at most 64 KiB, otherwise (and
/// always after `Expect: 100-continue`, when no `100` was sent) the answer carries
/// `Connection: close` and the connection is closed after it, so a body is never parsed as
/// the next request.
///
/// Also answered by the session itself, closing the connection: 400 for a Transfer-Encoding
/// whose final coding is not chunked or on an HTTP/1.0 request, a bare CR or LF (or any other
/// control byte) in a field value, a missing (HTTP/1.1), repeated or malformed Host; 501 for a
/// transfer coding other than plain `chunked`. An HTTP/1.0 request without
/// `Connection: keep-alive` closes after its response. `Expect: 100-continue` (HTTP/1.1) is
/// answered with `100 Continue` only once the request is admitted and its upstream connected.
/// The session frames every response itself: Content-Length = body size; no body and no
/// Content-Length for 1xx/204; no body for 304 and HEAD (a Content-Length the handler set is
/// kept, else the length of the body it produced).
///
/// TLS (set_tls): each accepted connection starts with a TLS handshake, within the first
/// head's `header_timeout` (from the accept); a failed one is counted by reason (tls_stats())
/// and closed. Then the session is the same as on plain TCP (pipelining, streaming, upgrades,
/// drain, deadlines). Closing a TLS connection sends close_notify and waits a moment for the
/// client's (RFC 8446 §6.1).
///
/// Threading: construct, start() and local_endpoint() from any thread; stop() from any thread
/// (it runs on the io_context). Sessions run on the io_context given.
class server {
 public:
  /// `share_port`: bind with SO_REUSEPORT so that each worker's server listens on the same
  /// port (the gateway's listener); false for a lone listener (the admin listener), whose bind
  /// then fails with "address in use" when any other socket holds the port.
  /// Throws boost::system::system_error when the socket cannot be opened, bound or listened on.
  server(boost::asio::io_context& ioc, boost::asio::ip::tcp::endpoint endpoint,
         std::shared_ptr<request_handler> handler, session_limits limits, unsigned worker,
         bool share_port = true);
  ~server();

  /// The bound endpoint (with the real port when 0 was asked). The constructor binds and
  /// listens (SO_REUSEPORT + SO_REUSEADDR), and throws boost::system::system_error on failure.
  boost::asio::ip::tcp::endpoint local_endpoint() const;

  /// Starts accepting (spawns the accept loop on the io_context).
  void start();

  /// Closes the acceptor and every open session. Runs at once when called on the
  /// io_context's thread, else is posted to it (and takes effect only while it runs).
  void stop();

  /// Starts a graceful stop: closes the acceptor and every idle session (waiting for a
  /// request), and makes every later response carry `Connection: close`; sessions in the
  /// middle of a request (or a tunnel) go on until they end. Same threading as stop().
  void drain();

  /// Sessions open now (idle or busy). Worker thread only.
  std::size_t open_sessions() const;
  /// Sessions in the middle of a request or tunnel now. Worker thread only.
  std::size_t busy_sessions() const;

  /// This worker's upstream connections (the relay's pool). Its stats() may be read from any
  /// thread; everything else runs on the worker's thread.
  upstream_pool& pool();
  /// This worker's relay counters (tunnels, body timeouts); any thread may read them.
  const relay_stats& relays() const;
  /// This listener's client connection counters; any thread may read them.
  const connection_stats& connections() const;
  /// The connection cap in force (session_limits::max_connections; 0 = none). Any thread.
  std::size_t max_connections() const;

  /// Makes connections accepted from now on TLS with `tls` (null: plain TCP); connections
  /// already open keep what they started with. Any thread.
  void set_tls(std::shared_ptr<const server_tls> tls);
  /// Whether new connections are TLS. Any thread.
  bool tls() const;
  /// The TLS handshakes of this listener's connections: completed, and failed by reason.
  /// Any thread may read them.
  const tls_counters& tls_stats() const;

 private:
  struct impl;
  std::shared_ptr<impl> impl_;
};

}  // namespace sluice::http
