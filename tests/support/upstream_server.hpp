// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// A real HTTP/1.1 upstream for tests: listens on 127.0.0.1 port 0, runs on its own thread,
/// keeps connections alive, records every request it receives and every TCP accept, and
/// answers 200 with a JSON echo of the request, or a canned response set by the test.

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace sluice::test {

/// One request as the upstream received it.
struct recorded_request {
  std::string method;
  std::string target;
  unsigned version = 11;
  /// Every header line in arrival order, duplicates kept, names as sent.
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
  std::uint64_t connection = 0;  ///< 1-based index of the TCP connection it came on

  /// The first value of `name` (case-insensitive), or "" when absent.
  std::string header(std::string_view name) const;
  /// Every value of `name` (case-insensitive), in order.
  std::vector<std::string> values(std::string_view name) const;
  /// How many lines named `name` (case-insensitive).
  std::size_t count(std::string_view name) const;
  bool has(std::string_view name) const { return count(name) > 0; }
};

/// What the upstream answers (applies to every request until changed).
struct canned_response {
  unsigned status = 200;
  /// Extra header lines, sent as given (e.g. {"Connection","close"}, {"Keep-Alive","timeout=1"},
  /// {"X-RateLimit-Remaining","7"}). A `Connection: close` line also makes the server close
  /// the connection after the response.
  std::vector<std::pair<std::string, std::string>> headers;
  /// The body; when unset, a JSON echo of the request:
  /// {"method":"GET","target":"/x","headers":[["Name","value"],...],"body":"..."}.
  std::optional<std::string> body;
  std::chrono::milliseconds delay{0};   ///< wait this long before answering
  bool close_without_response = false;  ///< read the request, then close the connection
};

/// The upstream server. Thread-safe: the test thread reads what the server thread records.
class upstream_server {
 public:
  /// Binds 127.0.0.1:0 and starts serving on a new thread. Throws when it cannot bind.
  upstream_server();
  /// Stops the server and joins its thread.
  ~upstream_server();
  upstream_server(const upstream_server&) = delete;
  upstream_server& operator=(const upstream_server&) = delete;

  std::uint16_t port() const;
  /// `http://127.0.0.1:PORT`.
  std::string url() const;

  /// Sets the response for the following requests.
  void set_response(canned_response response);
  /// Back to the default echo response; forgets recorded requests and accepts.
  void reset();

  /// Every request received so far, in arrival order.
  std::vector<recorded_request> requests() const;
  std::size_t request_count() const;
  /// TCP connections accepted so far.
  std::size_t accepts() const;

  /// Closes every open connection (the listener stays open).
  void close_connections();
  /// Stops listening and closes every connection (idempotent).
  void stop();

 private:
  struct impl;
  std::shared_ptr<impl> impl_;
};

/// Escapes `s` as the content of a JSON string.
std::string json_escape(std::string_view s);

}  // namespace sluice::test
