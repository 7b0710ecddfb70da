#pragma once
/// @file
/// Header rules of the proxy, in one place for both directions (RFC 9110 §7.6.1; case c17).

#include "sluice/http/types.hpp"

#include <cstdint>
#include <string>
#include <string_view>

namespace sluice::http {

/// Removes the hop-by-hop fields (Connection, Keep-Alive, TE, Trailer, Transfer-Encoding,
/// Upgrade, Proxy-Connection, Proxy-Authenticate, Proxy-Authorization) and every field named
/// in Connection (every Connection line, case-insensitive), from a request or a response
/// header set. A Connection line naming Host or Content-Length does not remove it (neither is
/// ever hop-by-hop; removing Content-Length would re-frame the message on the next hop).
void strip_hop_by_hop(boost::beast::http::fields& fields);

/// Prepares a client request for the upstream: strips hop-by-hop fields and the
/// method-override headers, appends `client_address` to X-Forwarded-For (joining repeated
/// lines in order), adds `Via: 1.1 sluice`, sets the target to `target`, and sets keep-alive
/// and the body framing (Content-Length) for the upstream hop.
/// Details: X-Forwarded-For and Via leave as one line each (existing lines joined with ", "
/// in arrival order, empty ones dropped); Via names the client's protocol version ("1.0" or
/// "1.1"); Expect is removed (the session has answered 100-continue); Host is left as the
/// client sent it; the request goes out as HTTP/1.1; Transfer-Encoding is removed and
/// Content-Length set when there is a body (or the method is POST, PUT or PATCH), else removed.
void prepare_upstream_request(request& req, std::string_view target,
                              std::string_view client_address);

/// How a request's body is framed on the upstream hop.
enum class body_framing {
  none,            ///< no body: no framing field (Content-Length: 0 for POST, PUT, PATCH)
  content_length,  ///< the client's Content-Length, kept
  chunked,         ///< Transfer-Encoding: chunked (the client's chunks are re-framed)
};

/// prepare_upstream_request() for a head whose body is streamed: the same field rules, with
/// the framing given; `upgrade`: the request is a WebSocket handshake the route allows, so
/// `Connection: upgrade` and `Upgrade: websocket` go upstream (RFC 9110 §7.8).
/// `length`: the body's length for body_framing::content_length (set as the one
/// Content-Length line).
void prepare_upstream_head(request_head& head, std::string_view target,
                           std::string_view client_address, body_framing framing, bool upgrade,
                           std::uint64_t length = 0);

/// Whether a method is idempotent (RFC 9110 §9.2.2: GET, HEAD, OPTIONS, PUT, DELETE, TRACE),
/// so a request that failed on a stale pooled connection before any answer may be sent again.
bool is_idempotent(beast_http::verb method);

/// Whether a request is a WebSocket opening handshake (RFC 6455 §4.1): HTTP/1.1, `Upgrade`
/// listing `websocket` and `Connection` listing `upgrade` (RFC 9110 §7.8), case-insensitive.
/// Only these are ever tunnelled: any other `Upgrade` (h2c...) is a hop-by-hop field that is
/// removed, and the request is served as plain HTTP/1.1 — a tunnelled HTTP/2 connection would
/// carry requests the limiter never sees.
bool is_websocket_upgrade(const request_head& head);

/// Sets Host to `up`'s authority (`host`, or `host:port` off port 80) when the request has
/// none: an HTTP/1.0 client may omit it, HTTP/1.1 requires it (RFC 9112 §3.2).
void set_default_host(request_head& head, const config::upstream& up);

/// Prepares an upstream response for the client: strips hop-by-hop fields, adds
/// `Via: 1.1 sluice`. When `limited` (the route is limited) the upstream's own rate-limit
/// fields (X-RateLimit-*, RateLimit, RateLimit-Policy, Retry-After is kept) are removed.
void prepare_client_response(beast_http::response_header<>& res, bool limited);

}  // namespace sluice::http
