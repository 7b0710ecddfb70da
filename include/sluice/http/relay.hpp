// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// Relaying one admitted request to its upstream: the request body streamed up, the response
/// streamed down, an upgraded connection tunnelled. The session owns the client connection and
/// calls relay() once per forwarded request.

#include "sluice/http/timed_socket.hpp"
#include "sluice/http/types.hpp"
#include "sluice/http/upstream_pool.hpp"

#include <boost/asio/awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/buffer_body.hpp>
#include <boost/beast/http/parser.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace sluice::http {

/// The parser a session reads a client request with: the head first, the body in pieces.
using request_parser = beast_http::request_parser<beast_http::buffer_body>;

/// Per-worker counters of the relays (any thread may read them).
struct relay_stats {
  std::atomic<std::int64_t> tunnels_open{0};    ///< upgraded connections being tunnelled
  std::atomic<std::uint64_t> tunnels_total{0};  ///< upgrades relayed since start
  /// Request bodies that stalled past the body timeout (answered 408 or cut).
  std::atomic<std::uint64_t> body_timeouts{0};
};

/// Fixed-size buffers that bodies are copied through, reused across requests of one worker
/// (an idle connection holds none). Worker thread only.
class buffer_pool {
 public:
  static constexpr std::size_t block_size = 64 * 1024;  ///< bytes per block
  /// A block to use until given back (a new one when none is free).
  std::unique_ptr<char[]> take();
  /// Gives a block back (at most 64 are kept; the rest are freed).
  void give(std::unique_ptr<char[]> block);

 private:
  std::vector<std::unique_ptr<char[]>> free_;
};

/// The client side of one exchange, owned by the session for the duration of relay().
struct client_side {
  timed_socket& stream;
  boost::beast::flat_buffer& buffer;        ///< bytes read from the client and not yet parsed
  request_parser& parser;                   ///< has read the head; the body (if any) is unread
  std::chrono::milliseconds read_timeout;   ///< between two reads of the request body
  std::chrono::milliseconds write_timeout;  ///< per write to the client
  /// Bytes per second a request body must keep up on average (0 = no minimum): the time
  /// spent waiting for body bytes may reach read_timeout + received / body_min_rate seconds.
  std::uint64_t body_min_rate;
  bool keep_alive;  ///< the client allows another request on the connection
  /// The server's draining flag, read when the response head goes out: once set, the
  /// response carries `Connection: close`.
  const bool& closing;
  bool expect_continue;  ///< the client waits for `100 Continue` before sending the body
  /// The connection's buffer for rendered heads (reused by every exchange on it).
  std::string& head_buffer;
};

/// How a relay ended.
struct relay_result {
  /// The client connection can carry the next request (the whole exchange completed, both
  /// sides allow keep-alive, the server is not draining).
  bool keep_alive = false;
  /// A response the session must send (a 400, 413, 502 or 504 decided before any response
  /// byte was written); the client connection then closes unless the request body was read.
  std::optional<response> answer;
  /// Whether the request body was read entirely (a keep-alive answer is possible).
  bool body_read = false;
  // For the access log:
  unsigned status = 0;           ///< the status relayed to the client (0: none relayed)
  unsigned upstream_status = 0;  ///< the upstream's final status (0: no response head)
  double upstream_ms = -1;       ///< request head sent to response head read (-1: none)
  std::uint64_t bytes_in = 0;    ///< request body bytes read from the client
  std::uint64_t bytes_out = 0;   ///< bytes written to the client (heads and body)
  /// How the exchange ended, for forward_plan::watch (the session ends the watch with it).
  exchange_end end = exchange_end::complete;
};

/// Writes `100 Continue` (RFC 9110 §15.2.1) to a client waiting for it before its body.
/// Returns the write's error (none when sent).
boost::asio::awaitable<boost::system::error_code> send_continue(timed_socket& client,
                                                                std::chrono::milliseconds timeout);

/// Relays the request held by `client.parser` (its head already decided and `plan` made) to
/// `plan.upstream` through `pool`, streaming its body; relays the response, streaming its
/// body (each piece written to the client as it arrives; back-pressure: the upstream is not
/// read while the client is slow); tunnels both ways after a `101` when `plan.upgrade`.
///
/// Framing: a chunked request goes up chunked, a Content-Length one with its length; a
/// response keeps its framing, a close-delimited one goes to an HTTP/1.1 client chunked.
/// `100 Continue` is sent once the upstream connection is open, before the body is read.
/// Errors before any response byte reach the client come back as `answer` (502/504 naming
/// the cause, 413 over max_request_body, 400 for a malformed body); after that, the client
/// connection is closed (relay_result::keep_alive false). The upstream connection is pooled
/// only after a complete exchange that allows keep-alive.
///
/// `plan.watch` (when it holds a hook) is marked relaying at once, then given the final
/// response head and each body piece just before it is written to the client; ending it is
/// the caller's, with relay_result::end.
boost::asio::awaitable<relay_result> relay(client_side client, forward_plan& plan,
                                           upstream_pool& pool, buffer_pool& buffers,
                                           relay_stats& stats);

}  // namespace sluice::http
