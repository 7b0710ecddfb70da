// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// A minimal synchronous HTTP/1.1 client for tests: one keep-alive TCP connection to a
/// loopback port, raw or Beast requests, responses as plain values. Every operation has a
/// deadline (it runs a private io_context for at most that long), so a test never hangs; the
/// deadlines given here are multiplied by SLUICE_TEST_TIME_FACTOR (support/eventually.hpp).

#include <boost/beast/http/message.hpp>
#include <boost/beast/http/string_body.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace sluice::test {

/// Header lines in arrival order, duplicates kept.
using header_list = std::vector<std::pair<std::string, std::string>>;

/// A response as read by the client.
struct client_response {
  unsigned status = 0;
  unsigned version = 11;
  header_list headers;
  std::string body;

  /// The first value of `name` (case-insensitive), or "" when absent.
  std::string header(std::string_view name) const;
  /// How many lines named `name` (case-insensitive).
  std::size_t count(std::string_view name) const;
  /// Whether a line named `name` is present.
  bool has(std::string_view name) const { return count(name) > 0; }
};

/// One client connection. Not thread-safe. Errors (connect, timeout, malformed response,
/// connection closed) throw std::runtime_error.
class http_connection {
 public:
  /// Connects to 127.0.0.1:`port`; `timeout` bounds every later operation.
  explicit http_connection(std::uint16_t port,
                           std::chrono::milliseconds timeout = std::chrono::seconds(5));
  /// Connects to 127.0.0.1:`port` from local address `source` (an IPv4 address; on Linux all
  /// of 127.0.0.0/8 is loopback, so "127.203.113.7" works without any interface set-up), so
  /// the server sees that peer address.
  http_connection(std::uint16_t port, const std::string& source,
                  std::chrono::milliseconds timeout = std::chrono::seconds(5));
  ~http_connection();
  http_connection(const http_connection&) = delete;
  http_connection& operator=(const http_connection&) = delete;

  /// Writes bytes exactly as given (several pipelined requests, malformed heads...).
  void send_raw(std::string_view bytes);
  /// Writes a Beast request as is (no framing added: call prepare_payload first if needed).
  void send(const boost::beast::http::request<boost::beast::http::string_body>& req);
  /// Reads one response; `head_request`: the response has no body (answer to HEAD).
  client_response read_response(bool head_request = false);

  /// Sends `method target` with `headers` (Host: 127.0.0.1 added unless given) and `body`,
  /// then reads the response.
  client_response request(std::string_view method, std::string_view target,
                          const header_list& headers = {}, std::string_view body = {});

  /// Waits up to `wait` for the server to close the connection: true when it did (EOF or
  /// reset), false when it stayed open. Bytes received meanwhile are discarded.
  bool closed_by_peer(std::chrono::milliseconds wait = std::chrono::milliseconds(1000));

  /// Closes the connection from this side.
  void close();

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

/// One-shot GET on a fresh connection to 127.0.0.1:`port`.
client_response get(std::uint16_t port, std::string_view target, const header_list& headers = {});

}  // namespace sluice::test
