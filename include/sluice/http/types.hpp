// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// HTTP message types used across the gateway (Boost.Beast, HTTP/1.1), and the contract
/// between a client session and the application: the application decides on the request
/// head alone (a verdict), the http room then answers or relays the request, streaming.

#include "sluice/config/rules.hpp"
#include "sluice/http/exchange_hook.hpp"

#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/string_body.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace sluice::http {

namespace beast_http = boost::beast::http;

class client_tls;  // sluice/http/tls_context.hpp

/// A request head as parsed from a client (method, target, version, fields); no body.
using request_head = beast_http::request_header<>;
/// A whole request with its body in memory (the admin listener, tests).
using request = beast_http::request<beast_http::string_body>;
/// A response made by sluice (or read whole from an upstream by upstream_pool::send).
using response = beast_http::response<beast_http::string_body>;

/// The protocol a client spoke to the gateway (a metrics label, an array index).
enum class protocol : std::uint8_t {
  http1,  ///< HTTP/1.0 or HTTP/1.1 over a connection of its own
  h2,     ///< HTTP/2, by ALPN `h2` over TLS or prior-knowledge `h2c`, one stream of many
};
/// How many protocol values there are (an array index bound).
inline constexpr std::size_t protocol_count = 2;
/// `protocol` as a metrics label value: its ALPN protocol ID (RFC 7301's IANA registry, the
/// names Envoy's `alpn_protocols` and nginx's `$ssl_alpn_protocol` use), "http/1.1" or "h2".
constexpr const char* protocol_label(protocol p) noexcept {
  return p == protocol::h2 ? "h2" : "http/1.1";
}

/// What a handler knows about the connection a request came on.
struct request_context {
  boost::asio::ip::tcp::endpoint peer;   ///< the TCP peer (before any X-Forwarded-For)
  boost::asio::ip::tcp::endpoint local;  ///< the local address the client connected to
  /// The peer's address as text (IPv4-mapped IPv6 as IPv4), made once per connection.
  std::string peer_text;
  unsigned worker = 0;               ///< index of the worker serving the connection
  protocol proto = protocol::http1;  ///< what the client speaks on the connection
};

/// Why a relayed exchange failed (for the 502/504 problem body, the log and the metrics).
enum class upstream_failure {
  unreachable,  ///< connecting failed (refused, unresolvable, connect timeout): 502
  timeout,      ///< no response head within `upstream.timeout`: 504
  closed,       ///< the upstream closed or reset the connection before a whole head: 502
  malformed,    ///< the response head (or chunk framing) is not HTTP/1.1: 502
  too_large,    ///< the response body is over the route's max_response_body: 502
  body_failed,  ///< the body broke off after the head was relayed (client connection closed)
  tls,          ///< the TLS handshake with an https upstream failed (certificate, version): 502
};
/// How many upstream_failure kinds there are (an array index bound).
inline constexpr std::size_t upstream_failure_count = 7;

/// The metrics label of a failure kind: unreachable, timeout, closed, malformed, too_large,
/// body_failed, tls (the enumerators' names).
constexpr const char* upstream_failure_name(upstream_failure f) {
  constexpr const char* names[upstream_failure_count] = {
      "unreachable", "timeout", "closed", "malformed", "too_large", "body_failed", "tls"};
  return names[static_cast<std::size_t>(f)];
}

/// The instruction to relay a request to an upstream, made by the handler from the head.
/// Everything the session needs is held here (the upstream is copied), so no reference into
/// a rules snapshot outlives the decision.
struct forward_plan {
  std::shared_ptr<const config::upstream> upstream;  ///< where to (one per snapshot and name)
  /// The upstream's TLS, for an https upstream (one per snapshot and name); null: plain TCP.
  std::shared_ptr<const client_tls> upstream_tls;
  std::string target;          ///< origin-form target for the upstream hop
  std::string client_address;  ///< appended to X-Forwarded-For
  bool limited = false;        ///< strip the upstream's own rate-limit fields
  /// Lines added to the relayed response as they are, each `Name: value` CRLF (the quota
  /// fields, rendered once by the decision); only with `limited`. Also set on a 502/504.
  std::string added_lines;
  /// Fields added to the relayed response after them (CORS), in order; the names are of
  /// static storage (literals). An upstream field of the same name is dropped.
  std::vector<std::pair<std::string_view, std::string>> response_fields;
  std::uint64_t max_request_body = config::unlimited_size;
  std::uint64_t max_response_body = config::unlimited_size;
  std::chrono::milliseconds tunnel_idle_timeout{300000};
  bool upgrade = false;  ///< the request asks for an upgrade the route allows
  /// Called once when the exchange fails (metrics, per route and upstream), with what went
  /// wrong in words (the error's message and any detail; for the status page's last error).
  /// May be empty.
  std::function<void(upstream_failure, std::string_view)> on_failure;
  /// Called once the upstream's response head is read, with the time since the request head
  /// was sent (metrics: the upstream response histogram). May be empty.
  std::function<void(std::chrono::nanoseconds)> on_response_head;
  /// The application's response-end hook for this request (exchange_hook.hpp): fed by the
  /// relay, ended exactly once. Empty for a route with nothing to settle (no allocation).
  exchange_watch watch;
};

/// What the application tells the access log about its decision; filled only when the
/// handler records exchanges (request_handler::records()).
struct access_note {
  std::string route;            ///< "" when no route matched
  const char* decision = "";    ///< allowed, limited, shadow-limited, fail_open, fail_closed,
                                ///< local, unlimited, or "" (answered before any limit)
  std::string limit;            ///< the deciding (refusing) limit, "" when none
  std::int64_t remaining = -1;  ///< the Remaining the response carries (-1: none)
  std::string upstream;         ///< the upstream's name when forwarded
  std::string client;           ///< the client address the request was keyed on
  std::string key_hash;         ///< a keyed hash of the API key ("" when none)
  /// The handler's own, for its record() (the gateway: the counters of the request's route;
  /// null when no route matched). Set whether or not there is an access log.
  void* handler_tag = nullptr;
};

/// How one exchange ended, for request_handler::record().
struct exchange_result {
  std::int64_t unix_ms = 0;      ///< when the head was read, ms since the Unix epoch
  double total_ms = 0;           ///< head read to the last response byte written
  unsigned status = 0;           ///< status sent to the client (0: none)
  unsigned upstream_status = 0;  ///< the upstream's final status (0: not forwarded / none)
  double upstream_ms = -1;       ///< request sent to response head read (-1: none)
  std::uint64_t bytes_in = 0;    ///< request body bytes read
  std::uint64_t bytes_out = 0;   ///< bytes written to the client
};

/// What the application decided about a request, from its head.
struct verdict {
  enum class kind {
    answer,   ///< send `answer` (the body, if any, is never forwarded)
    forward,  ///< relay to `forward.upstream`, streaming the body both ways
    buffer,   ///< read the whole body (up to the session's body limit), then call respond()
  };
  kind what = kind::answer;
  response answer;
  forward_plan forward;
  access_note access;  ///< for the access log (empty unless the handler records())
};

/// The application's request handler, called by sessions once per request, in arrival
/// order on a connection. Runs on the worker's executor. Must not throw.
class request_handler {
 public:
  virtual ~request_handler() = default;
  /// Decides on a request from its head alone (route, identity, limits), before any body
  /// byte is read; may edit the head (it is what is forwarded). A verdict's `answer` is framed
  /// by the session (keep-alive, Content-Length); one carrying `Connection: close` closes the
  /// client connection once written.
  virtual boost::asio::awaitable<verdict> decide(request_head& head,
                                                 const request_context& ctx) = 0;
  /// decide() without suspending, for a handler that can decide this request from what it
  /// holds in memory: true with the verdict in `out` (the session then skips decide()); false,
  /// having changed nothing, when the decision must wait. The default returns false.
  virtual bool decide_now(request_head& head, const request_context& ctx, verdict& out) {
    (void)head;
    (void)ctx;
    (void)out;
    return false;
  }
  /// For `verdict::kind::buffer`: answers the whole request. The default answers 500.
  virtual boost::asio::awaitable<response> respond(request req, const request_context& ctx);
  /// Whether the session should call record() after each decided exchange (asked once per
  /// connection). Default: no.
  virtual bool records() const { return false; }
  /// Called by the session once an exchange decided by decide() has ended (its response
  /// written, or the connection gone): the access log. Runs on the worker's thread; must not
  /// block or throw.
  virtual void record(const request_head& head, const request_context& ctx, const verdict& v,
                      const exchange_result& r) noexcept {
    (void)head;
    (void)ctx;
    (void)v;
    (void)r;
  }
};

/// A handler that always reads the whole request first and answers it (the admin listener,
/// tests): decide() asks for the body, respond() is the handler's.
class buffered_handler : public request_handler {
 public:
  boost::asio::awaitable<verdict> decide(request_head& head, const request_context& ctx) override;
  boost::asio::awaitable<response> respond(request req, const request_context& ctx) override = 0;
};

}  // namespace sluice::http
