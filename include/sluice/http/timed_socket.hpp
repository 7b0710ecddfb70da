#pragma once
/// @file
/// A TCP socket with a deadline that costs nothing to move: the stream type of every client
/// and upstream connection.

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/system/error_code.hpp>

#include <chrono>
#include <memory>
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
/// Movable handle: the socket and timer live in one shared state, so a move keeps pending
/// operations valid. Not thread-safe (one executor, one strand of work).
class timed_socket {
 public:
  using executor_type = boost::asio::ip::tcp::socket::executor_type;
  using clock = std::chrono::steady_clock;

  explicit timed_socket(boost::asio::ip::tcp::socket socket);
  explicit timed_socket(const executor_type& ex);
  timed_socket(timed_socket&&) noexcept = default;
  timed_socket& operator=(timed_socket&&) noexcept = default;
  /// Stops the timer and closes the socket.
  ~timed_socket();

  executor_type get_executor() { return state_->socket.get_executor(); }
  boost::asio::ip::tcp::socket& socket() { return state_->socket; }
  const boost::asio::ip::tcp::socket& socket() const { return state_->socket; }

  template <class MutableBuffers, class Token>
  auto async_read_some(const MutableBuffers& buffers, Token&& token) {
    return state_->socket.async_read_some(buffers, std::forward<Token>(token));
  }
  template <class ConstBuffers, class Token>
  auto async_write_some(const ConstBuffers& buffers, Token&& token) {
    return state_->socket.async_write_some(buffers, std::forward<Token>(token));
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
