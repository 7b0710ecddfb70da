// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// Relaying one admitted request to its upstream: the request body streamed up, the response
/// streamed down, an upgraded connection tunnelled. The session owns the client connection and
/// calls relay() once per forwarded request.

#include "sluice/http/headers.hpp"
#include "sluice/http/hop_io.hpp"
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

/// What relay() needs to know of a response before its head goes to the client.
struct response_shape {
  unsigned status = 0;
  bool no_body = false;  ///< no content follows (a response to HEAD, 204, 304, 1xx)
  /// The upstream's Content-Length when its body is not chunked.
  std::optional<std::uint64_t> length;
  bool streamed = false;  ///< chunked or close-delimited: the length is known at the end
  /// The request side allows another request on the connection (its body read whole, its
  /// upload not failed).
  bool may_keep = false;
};

class http1_client;

/// The client side of one relayed exchange: the few operations relay() needs of the client's
/// protocol. HTTP/1.1 (http1_client) reads the body through the session's parser and writes
/// framed bytes to the socket; HTTP/2 (h2_session.cpp) reads a stream's DATA and sends the
/// response through nghttp2. Owned by the session for the duration of relay().
class client_port {
 public:
  virtual ~client_port() = default;
  /// The request's head, as decided (routed, identified, limited).
  virtual const request_head& head() const = 0;
  /// The HTTP version the session's own answers (502, 413, ...) are made in: 10 or 11.
  virtual unsigned version() const = 0;
  /// Whether the request body has been read to its end (true at once for a request without
  /// one).
  virtual bool body_done() const = 0;
  /// How the request body goes upstream, and its length for body_framing::content_length.
  virtual body_framing framing() const = 0;
  virtual std::uint64_t length() const = 0;
  /// Bounds the request body to `max` bytes (config::unlimited_size: none); a longer body
  /// makes read_body() fail with http::error::body_limit.
  virtual void limit_body(std::uint64_t max) = 0;
  /// The longest wait between two pieces of the request body.
  virtual std::chrono::milliseconds read_timeout() const = 0;
  /// Bytes per second a request body must keep up on average (0 = no minimum): the time
  /// spent waiting for body bytes may reach read_timeout + received / body_min_rate seconds.
  virtual std::uint64_t body_min_rate() const = 0;
  /// Reads the next piece of the request body into `data` (at most `size` bytes), waiting at
  /// most `wait` for it: `got` bytes (0 with no error: framing only, read again). Errors:
  /// beast::error::timeout, http::error::body_limit, a malformed body, the client gone.
  virtual boost::asio::awaitable<boost::system::error_code> read_body(
      char* data, std::size_t size, std::chrono::milliseconds wait, std::size_t& got) = 0;
  /// Whether the client waits for `100 Continue` before it sends the body.
  virtual bool expects_continue() const = 0;
  /// Sends `100 Continue`; returns the write's error.
  virtual boost::asio::awaitable<boost::system::error_code> send_continue() = 0;
  /// Relays an interim `1xx` response (not 100 or 101); returns the write's error.
  virtual boost::asio::awaitable<boost::system::error_code> send_interim(
      const response_head& head) = 0;
  /// Prepares the response head (the gateway's header rules applied: client_hop) for the
  /// first write(). Returns whether the client connection may carry another request.
  virtual bool begin_response(const response_head& res, const response_shape& shape,
                              const forward_plan& plan) = 0;
  /// Writes the head (with the first call) and `n` bytes of body at `data`; `last` ends the
  /// response. Completes once the bytes are taken (back-pressure: a slow client slows this).
  virtual boost::asio::awaitable<send_result> write(const char* data, std::size_t n, bool last) = 0;
  /// Whether the response head was handed out (a response byte may have reached the client).
  virtual bool head_sent() const = 0;
  /// A buffer the relay renders the upstream request head into.
  virtual std::string& head_buffer() = 0;
  /// The HTTP/1.1 connection, which alone can be tunnelled after `101` (null otherwise).
  virtual http1_client* http1() { return nullptr; }
};

/// The client side of one exchange on an HTTP/1.1 connection, owned by the session for the
/// duration of relay().
class http1_client final : public client_port {
 public:
  http1_client(timed_socket& stream, boost::beast::flat_buffer& buffer, request_parser& parser,
               std::chrono::milliseconds read_timeout, std::chrono::milliseconds write_timeout,
               std::uint64_t body_min_rate, bool keep_alive, const bool& closing,
               bool expect_continue, std::string& head_buffer)
      : stream(stream),
        buffer(buffer),
        parser(parser),
        read_wait(read_timeout),
        write_timeout(write_timeout),
        min_rate(body_min_rate),
        keep_alive(keep_alive),
        closing(closing),
        expect_continue(expect_continue),
        heads(head_buffer) {}

  const request_head& head() const override { return parser.get(); }
  unsigned version() const override { return parser.get().version() == 10 ? 10 : 11; }
  bool body_done() const override { return parser.is_done(); }
  body_framing framing() const override;
  std::uint64_t length() const override { return parser.content_length().value_or(0); }
  void limit_body(std::uint64_t max) override;
  std::chrono::milliseconds read_timeout() const override { return read_wait; }
  std::uint64_t body_min_rate() const override { return min_rate; }
  boost::asio::awaitable<boost::system::error_code> read_body(char* data, std::size_t size,
                                                              std::chrono::milliseconds wait,
                                                              std::size_t& got) override;
  bool expects_continue() const override { return expect_continue; }
  boost::asio::awaitable<boost::system::error_code> send_continue() override;
  boost::asio::awaitable<boost::system::error_code> send_interim(
      const response_head& head) override;
  bool begin_response(const response_head& res, const response_shape& shape,
                      const forward_plan& plan) override;
  boost::asio::awaitable<send_result> write(const char* data, std::size_t n, bool last) override;
  bool head_sent() const override { return head_sent_; }
  std::string& head_buffer() override { return heads; }
  http1_client* http1() override { return this; }

  timed_socket& stream;
  boost::beast::flat_buffer& buffer;        ///< bytes read from the client and not yet parsed
  request_parser& parser;                   ///< has read the head; the body (if any) is unread
  std::chrono::milliseconds read_wait;      ///< between two reads of the request body
  std::chrono::milliseconds write_timeout;  ///< per write to the client
  std::uint64_t min_rate;                   ///< body_min_rate()
  bool keep_alive;                          ///< the client allows another request on the connection
  /// The server's draining flag, read when the response head goes out: once set, the
  /// response carries `Connection: close`.
  const bool& closing;
  bool expect_continue;  ///< the client waits for `100 Continue` before sending the body
  /// The connection's buffer for rendered heads (reused by every exchange on it).
  std::string& heads;

 private:
  bool chunked_ = false;  ///< the response is re-framed chunked
  bool head_sent_ = false;
  char size_line_[20] = {};
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

/// Relays the request of `client` (its head already decided and `plan` made) to
/// `plan.upstream` through `pool`, streaming its body; relays the response, streaming its
/// body (each piece written to the client as it arrives; back-pressure: the upstream is not
/// read while the client is slow); tunnels both ways after a `101` when `plan.upgrade`.
///
/// Framing: a chunked request goes up chunked, a Content-Length one with its length; a
/// response keeps its framing, a close-delimited one goes to an HTTP/1.1 client chunked (an
/// HTTP/2 client's DATA frames carry it as it comes).
/// `100 Continue` is sent once the upstream connection is open, before the body is read.
/// Errors before any response byte reach the client come back as `answer` (502/504 naming
/// the cause, 413 over max_request_body, 400 for a malformed body); after that, the client
/// connection is closed (relay_result::keep_alive false). The upstream connection is pooled
/// only after a complete exchange that allows keep-alive.
///
/// `plan.watch` (when it holds a hook) is marked relaying at once, then given the final
/// response head and each body piece just before it is written to the client; ending it is
/// the caller's, with relay_result::end.
boost::asio::awaitable<relay_result> relay(client_port& client, forward_plan& plan,
                                           upstream_pool& pool, buffer_pool& buffers,
                                           relay_stats& stats);

}  // namespace sluice::http
