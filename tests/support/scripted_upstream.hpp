// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// Byte-level test peers: a blocking loopback socket whose every operation has a deadline
/// (raw_socket), small HTTP/1.1 framing helpers over it, and an upstream whose behaviour on
/// each accepted connection is a function supplied by the test (scripted_upstream), so a test
/// can send arbitrary bytes, with pauses, resets and half-written messages.

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace sluice::test {

/// One TCP connection on a plain blocking socket. Every read and write waits at most the
/// timeout given (poll(2) before each system call), so a test never hangs. Reads go through
/// an internal buffer: bytes read past what an operation needed stay for the next one.
/// Not thread-safe.
class raw_socket {
 public:
  /// How a read ended.
  enum class status { ok, eof, reset, timeout };

  /// Takes ownership of a connected socket.
  explicit raw_socket(int fd);
  /// Connects to 127.0.0.1:`port` within `timeout`. Throws std::runtime_error on failure.
  static raw_socket connect(std::uint16_t port,
                            std::chrono::milliseconds timeout = std::chrono::seconds(2));
  /// Closes the socket (an orderly close).
  ~raw_socket();
  raw_socket(raw_socket&& other) noexcept;
  raw_socket& operator=(raw_socket&& other) noexcept;
  raw_socket(const raw_socket&) = delete;
  raw_socket& operator=(const raw_socket&) = delete;

  int fd() const { return fd_; }
  bool is_open() const { return fd_ >= 0; }

  /// Writes all of `bytes` within `timeout`. False when the peer closed or reset the
  /// connection or the time ran out (never raises SIGPIPE).
  bool write(std::string_view bytes, std::chrono::milliseconds timeout = std::chrono::seconds(5));

  /// Waits up to `timeout` for at least one byte and appends what is available (buffered
  /// bytes first) to `out`. Returns ok when bytes were appended.
  status read_some(std::string& out, std::chrono::milliseconds timeout);
  /// Reads until `delim` has arrived; returns the bytes up to and including it, or nullopt
  /// (see last_status()) when the connection ended or `timeout` passed first.
  std::optional<std::string> read_until(std::string_view delim, std::chrono::milliseconds timeout);
  /// Reads exactly `n` bytes, or nullopt when the connection ended or `timeout` passed first
  /// (what did arrive stays buffered: buffered()).
  std::optional<std::string> read_exact(std::size_t n, std::chrono::milliseconds timeout);
  /// Reads until the peer closes (or resets) the connection or `timeout` passes; returns every
  /// byte read (buffered ones included). last_status(): eof, reset or timeout.
  std::string read_to_end(std::chrono::milliseconds timeout);
  /// Whether the peer closes or resets the connection within `wait` (bytes meanwhile are
  /// kept in the buffer).
  bool closed_by_peer(std::chrono::milliseconds wait);
  /// Whether something can be observed within `wait`: bytes buffered or arriving, or the end
  /// of the connection. Received bytes stay buffered for the next read.
  bool readable(std::chrono::milliseconds wait);
  /// How the last read ended.
  status last_status() const { return last_; }
  /// Bytes received and not consumed yet.
  std::string_view buffered() const;

  /// Half-closes: no more bytes from this side (shutdown(SHUT_WR)).
  void shutdown_write();
  /// Closes with a reset (SO_LINGER 0): the peer sees ECONNRESET.
  void reset();
  /// Closes (idempotent).
  void close();

 private:
  /// One recv into the buffer, waiting up to `timeout`. Sets last_.
  bool fill(std::chrono::steady_clock::time_point deadline);
  void consume(std::size_t n);

  int fd_ = -1;
  std::string buf_;
  std::size_t pos_ = 0;  // first unconsumed byte of buf_
  status last_ = status::ok;
};

/// A request or response head as received.
struct http_head {
  std::string start_line;  ///< "POST /x HTTP/1.1" or "HTTP/1.1 200 OK", without CRLF
  std::vector<std::pair<std::string, std::string>> headers;  ///< in order, names as sent

  /// The first value of `name` (case-insensitive), or "" when absent.
  std::string header(std::string_view name) const;
  bool has(std::string_view name) const;
  /// A response's status code (0 when the start line is not a status line).
  unsigned status() const;
  /// A request's method and target.
  std::string method() const;
  std::string target() const;
  /// Whether a Transfer-Encoding line names chunked.
  bool chunked() const;
};

/// Reads one head (start line and header lines up to the empty line). nullopt when the
/// connection ended or `timeout` passed first, or the head does not parse.
std::optional<http_head> read_head(raw_socket& s, std::chrono::milliseconds timeout);

/// Reads a chunked body (and its empty trailer section) and returns it decoded; the size of
/// each chunk is appended to `sizes` when given. nullopt on a framing error, the end of the
/// connection or the timeout.
std::optional<std::string> read_chunked_body(raw_socket& s, std::chrono::milliseconds timeout,
                                             std::vector<std::size_t>* sizes = nullptr);

/// Reads the body that `head` (a request head) announces: chunked, Content-Length, or none.
std::optional<std::string> read_request_body(raw_socket& s, const http_head& head,
                                             std::chrono::milliseconds timeout);

/// `data` in chunked framing, cut into chunks of the given sizes (cycled), then the last
/// chunk "0\r\n\r\n".
std::string chunked(std::string_view data, const std::vector<std::size_t>& sizes);

/// `n` pseudo-random bytes (every value 0..255) from `seed`.
std::string random_bytes(std::size_t n, std::uint32_t seed);

/// An upstream on 127.0.0.1 port 0 whose behaviour per accepted connection is a function:
/// each accepted connection runs `script(socket, index)` on a thread of its own (`index` is
/// the 1-based accept count) and is closed when the function returns, unless it closed it.
/// The destructor stops listening, shuts every open connection down (their reads then end
/// at once) and joins the threads.
class scripted_upstream {
 public:
  using script = std::function<void(raw_socket& socket, std::size_t index)>;

  /// Binds and starts accepting. Throws std::runtime_error when it cannot bind.
  explicit scripted_upstream(script s);
  ~scripted_upstream();
  scripted_upstream(const scripted_upstream&) = delete;
  scripted_upstream& operator=(const scripted_upstream&) = delete;

  std::uint16_t port() const;
  /// `http://127.0.0.1:PORT`.
  std::string url() const;
  /// Connections accepted so far.
  std::size_t accepts() const;
  /// Replaces the function for connections accepted from now on.
  void set_script(script s);

  struct impl;  ///< defined in the .cpp

 private:
  std::shared_ptr<impl> impl_;
};

/// A loopback port nothing listens on (bound, then closed): connecting to it is refused.
std::uint16_t closed_port();

}  // namespace sluice::test
