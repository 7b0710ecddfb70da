// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// A TCP socket with a deadline that costs nothing to move, optionally carrying TLS: the
/// stream type of every client and upstream connection.

#include <boost/asio/error.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/ssl/stream_base.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/ssl/ssl_stream.hpp>
#include <boost/system/error_code.hpp>

#include <chrono>
#include <memory>
#include <optional>
#include <utility>

namespace sluice::http {

/// A tcp::socket plus one lazily re-armed timer (an AsyncReadStream and AsyncWriteStream, so
/// Beast's HTTP algorithms run on it).
///
/// Why not beast::tcp_stream: it starts and cancels a timer around every read and write, and
/// each change of the earliest timer is a timerfd_settime system call — two per I/O
/// operation on a lightly loaded worker. Here expires_after() only records the deadline; the
/// one timer is re-armed when it fires early (the deadline moved on) or when a deadline
/// earlier than the armed one is set. When a deadline passes, the socket's pending operations
/// are cancelled and timed_out() is true until the next expires_after(): callers map the
/// resulting `operation_aborted` to a timeout with timeout_error().
///
/// TLS: start_tls() layers Beast's ssl_stream (OpenSSL through Asio ssl, with Beast's
/// flat_stream, so a gathered write of a head and a body piece is one TLS record, not one
/// per buffer) over the same socket, before any I/O; every read and write then goes through
/// it. A plain connection pays one predictable branch per operation for this: no
/// allocation, no virtual call. The deadline works the same on both: the timer cancels the
/// socket's operations, which ends a TLS read, write, handshake or shutdown under way.
///
/// Movable handle: the socket and timer live in one shared state, so a move keeps pending
/// operations valid. Not thread-safe (one executor, one strand of work).
class timed_socket {
 public:
  using executor_type = boost::asio::ip::tcp::socket::executor_type;
  using clock = std::chrono::steady_clock;
  /// The TLS layer: OpenSSL over a reference to the connection's own socket.
  using tls_stream = boost::beast::ssl_stream<boost::asio::ip::tcp::socket&>;
  /// What asio::ssl::stream and Beast need of a next layer.
  using lowest_layer_type = boost::asio::ip::tcp::socket::lowest_layer_type;

  explicit timed_socket(boost::asio::ip::tcp::socket socket);
  explicit timed_socket(const executor_type& ex);
  timed_socket(timed_socket&&) noexcept = default;
  timed_socket& operator=(timed_socket&&) noexcept = default;
  /// Stops the timer and closes the socket (abruptly: see async_shutdown for TLS).
  ~timed_socket();

  executor_type get_executor() { return state_->socket.get_executor(); }
  boost::asio::ip::tcp::socket& socket() { return state_->socket; }
  const boost::asio::ip::tcp::socket& socket() const { return state_->socket; }
  lowest_layer_type& lowest_layer() { return state_->socket; }

  /// Layers TLS over the socket with a new SSL object of `ctx` (server or client side, as
  /// the later handshake says). `owner` is kept as long as the connection (what `ctx` and its
  /// callbacks point to). Call once, before any I/O. May throw boost::system::system_error
  /// (SSL_new failed: out of memory).
  void start_tls(boost::asio::ssl::context& ctx, std::shared_ptr<const void> owner);
  /// Whether start_tls() was called.
  bool tls() const { return state_->tls.has_value(); }
  /// The TLS layer's OpenSSL object; null on a plain connection.
  SSL* native_tls() { return state_->tls ? state_->tls->native_handle() : nullptr; }

  template <class MutableBuffers, class Token>
  auto async_read_some(const MutableBuffers& buffers, Token&& token) {
    if (state_->tls) return state_->tls->async_read_some(buffers, std::forward<Token>(token));
    return state_->socket.async_read_some(buffers, std::forward<Token>(token));
  }
  template <class ConstBuffers, class Token>
  auto async_write_some(const ConstBuffers& buffers, Token&& token) {
    if (state_->tls) return state_->tls->async_write_some(buffers, std::forward<Token>(token));
    return state_->socket.async_write_some(buffers, std::forward<Token>(token));
  }

  /// Writes what the kernel takes of `buffers` now, without suspending the caller: one
  /// non-blocking send on a plain connection (the socket is put in non-blocking mode on first
  /// use; Asio's own operations are unaffected). Returns the bytes written: all of them in the
  /// common case (a head and a small body into a socket buffer with room), fewer when the
  /// buffer is full, 0 on a TLS connection (its records go through async_write). `ec`: the
  /// socket's error (would_block is none: fewer bytes). The caller sends the rest with
  /// async_write; no asynchronous write may be pending meanwhile.
  template <class ConstBuffers>
  std::size_t write_now(const ConstBuffers& buffers, boost::system::error_code& ec) {
    ec = {};
    if (state_->tls) return 0;
    auto& s = state_->socket;
    if (!s.non_blocking()) {
      s.non_blocking(true, ec);
      if (ec) return 0;
    }
    const std::size_t n = s.write_some(buffers, ec);
    if (ec == boost::asio::error::would_block || ec == boost::asio::error::try_again) ec = {};
    return n;
  }

  /// The TLS handshake (TLS connections only), under the current deadline.
  template <class Token>
  auto async_handshake(boost::asio::ssl::stream_base::handshake_type side, Token&& token) {
    return state_->tls->async_handshake(side, std::forward<Token>(token));
  }
  /// Sends TLS close_notify and waits for the peer's (or its end of the stream), under the
  /// current deadline (RFC 8446 §6.1). Application data arriving meanwhile is discarded by
  /// OpenSSL. TLS connections only; close() afterwards.
  template <class Token>
  auto async_shutdown(Token&& token) {
    return state_->tls->async_shutdown(std::forward<Token>(token));
  }

  /// Operations pending when `d` from now has passed are cancelled.
  void expires_after(std::chrono::milliseconds d);
  /// No deadline.
  void expires_never();
  /// Whether the last deadline passed (and pending operations were cancelled).
  bool timed_out() const { return state_->timed_out; }
  /// `ec`, or beast::error::timeout when the deadline cancelled the operation.
  boost::system::error_code timeout_error(const boost::system::error_code& ec) const;
  /// Closes the socket (pending operations complete with operation_aborted) and the timer.
  void close();

 private:
  struct state {
    explicit state(boost::asio::ip::tcp::socket s)
        : socket(std::move(s)), timer(socket.get_executor()) {}
    boost::asio::ip::tcp::socket socket;
    std::shared_ptr<const void> tls_owner;  ///< what the SSL_CTX's callbacks point to
    std::optional<tls_stream> tls;          ///< over `socket`; destroyed before both
    boost::asio::steady_timer timer;
    clock::time_point deadline = clock::time_point::max();
    clock::time_point armed_at = clock::time_point::max();  ///< max: no wait pending
    std::uint64_t generation = 0;  ///< of the pending wait; stale completions are ignored
    bool timed_out = false;
  };
  static void arm(const std::shared_ptr<state>& st, clock::time_point at);
  std::shared_ptr<state> state_;
};

}  // namespace sluice::http
