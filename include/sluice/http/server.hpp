#pragma once
/// @file
/// The listener and client sessions of one worker.

#include "sluice/http/relay.hpp"
#include "sluice/http/types.hpp"
#include "sluice/http/upstream_pool.hpp"

#include <boost/asio/io_context.hpp>

#include <chrono>
#include <cstdint>
#include <memory>

namespace sluice::http {

/// Limits applied to every client connection (RFC 9112; RFC 6585 §5 for 431).
struct session_limits {
  std::uint32_t header_limit = 8 * 1024;  ///< request head bytes; over: 431
  /// Body bytes a `verdict::kind::buffer` request may carry (over: 413); forwarded bodies
  /// are streamed under their route's `max_request_body` instead.
  std::uint64_t body_limit = 1024 * 1024;
  std::chrono::milliseconds read_timeout{30000};  ///< per request head+body; idle keep-alive too
  std::chrono::milliseconds write_timeout{30000};
};

/// Accepts connections on one endpoint for one worker and runs one coroutine session per
/// connection. Workers share a port with SO_REUSEPORT: pass the port the first worker
/// actually bound (port 0 picks a free one).
///
/// Sessions: HTTP/1.1 keep-alive; pipelined requests are read, decided and answered one at a
/// time in arrival order; a request that cannot be parsed, or that carries both
/// Content-Length and Transfer-Encoding (RFC 9112 §6.3), gets 400 and the connection is
/// closed; an oversized head gets 431. Each request is decided by the handler on its head
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
  /// This worker's relay counters (tunnels); any thread may read them.
  const relay_stats& relays() const;

 private:
  struct impl;
  std::shared_ptr<impl> impl_;
};

}  // namespace sluice::http
