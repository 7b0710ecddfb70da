// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// Header rules of the proxy, in one place for both directions (RFC 9110 §7.6.1, hop-by-hop):
/// the heads each hop gets are rendered straight from the received head, in one pass.

#include "sluice/http/response_head.hpp"
#include "sluice/http/types.hpp"

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>

namespace sluice::http {

/// Removes the hop-by-hop fields (Connection, Keep-Alive, TE, Trailer, Transfer-Encoding,
/// Upgrade, Proxy-Connection, Proxy-Authenticate, Proxy-Authorization) and every field named
/// in Connection (every Connection line, case-insensitive), from a request or a response
/// header set. A Connection line naming Host or Content-Length does not remove it (neither is
/// ever hop-by-hop; removing Content-Length would re-frame the message on the next hop).
void strip_hop_by_hop(boost::beast::http::fields& fields);

/// How a request's body is framed on the upstream hop.
enum class body_framing {
  none,            ///< no body: no framing field (Content-Length: 0 for POST, PUT, PATCH)
  content_length,  ///< the client's Content-Length, kept
  chunked,         ///< Transfer-Encoding: chunked (the client's chunks are re-framed)
};

/// What the upstream hop of a forwarded request needs besides the client's head.
struct upstream_hop {
  std::string_view target;          ///< origin-form target for the upstream
  std::string_view client_address;  ///< appended to X-Forwarded-For
  body_framing framing = body_framing::none;
  std::uint64_t length = 0;  ///< the body's length for body_framing::content_length
  /// The request is a WebSocket handshake the route allows: `Connection: upgrade` and
  /// `Upgrade: websocket` go upstream (RFC 9110 §7.8).
  bool upgrade = false;
  /// Whose authority is the Host of a request that has none (an HTTP/1.0 client may omit
  /// it; RFC 9112 §3.2): `host`, or `host:port` off the scheme's default port (80, or 443
  /// for https). May be null.
  const config::upstream* default_host = nullptr;
};

/// Renders the request line and fields a client request goes upstream with into `out`
/// (replacing its contents), ending with the empty line; `head` is not changed.
/// Rules: the hop-by-hop fields (as strip_hop_by_hop) and the method-override headers
/// (X-HTTP-Method-Override, X-Method-Override, X-HTTP-Method: a caller charged for a GET must
/// not run a DELETE) are dropped; Expect is dropped (the session answers 100-continue);
/// X-Forwarded-For gets `client_address` appended and Via `1.x sluice` (the client's
/// version), each leaving as one line (existing lines joined with ", " in arrival order,
/// empty ones dropped; RFC 9110 §7.6.3); the request goes out as HTTP/1.1 to `hop.target`
/// with exactly one framing field per `hop.framing` (RFC 9112 §6.3: Content-Length for a
/// body, `0` for a POST, PUT or PATCH without one, Transfer-Encoding: chunked for a chunked
/// body); Host is kept as the client sent it.
void render_upstream_request(std::string& out, const request_head& head, const upstream_hop& hop);

/// How a response's body is framed on the client hop.
enum class response_framing {
  none,            ///< no framing field (no body, or read to EOF by an HTTP/1.0 client)
  content_length,  ///< Content-Length: client_hop::length
  chunked,         ///< Transfer-Encoding: chunked (re-framed for this hop)
};

/// What the client hop of a relayed response needs besides the upstream's head.
struct client_hop {
  unsigned version = 11;  ///< the client's HTTP version: 10 or 11
  /// The route is limited: the upstream's own rate-limit fields (X-RateLimit-*, RateLimit,
  /// RateLimit-Policy; Retry-After is kept) are dropped, only the gateway's are true.
  bool limited = false;
  /// Rendered as HTTP/1.1 `Connection: close` when false, HTTP/1.0 `Connection: keep-alive`
  /// when true (RFC 9112 §9.3).
  bool keep_alive = true;
  response_framing framing = response_framing::none;
  std::uint64_t length = 0;  ///< for response_framing::content_length
  /// Non-empty for a relayed `101`: `Connection: upgrade` and `Upgrade: <this>` are sent
  /// instead of a keep-alive field.
  std::string_view upgrade;
  /// Lines added as they are (`Name: value` CRLF each: forward_plan::added_lines, the quota
  /// fields), before `fields`. Only with `limited`, which drops the upstream's own.
  std::string_view added_lines;
  /// Fields added (the CORS headers), in order; an upstream line of the same name is
  /// dropped, except Vary, whose lines are all kept (it is a list; RFC 9110 §12.5.5).
  std::span<const std::pair<std::string_view, std::string>> fields;
};

/// Renders the status line and fields an upstream response goes to the client with into
/// `out` (replacing its contents), ending with the empty line; `res` is not changed.
/// Rules: the hop-by-hop fields (as strip_hop_by_hop) and every Content-Length line are
/// dropped (the framing is `hop.framing`'s); Via gets `1.x sluice` (the upstream's version)
/// as one line; the status line carries the client's version and the upstream's reason
/// phrase (the registered one when it sent none).
void render_client_response(std::string& out, const beast_http::response_header<>& res,
                            const client_hop& hop);
/// The same for a head the relay's response_head_parser read.
void render_client_response(std::string& out, const response_head& res, const client_hop& hop);

/// Sets each `Name: value` CRLF line of `lines` (rendered as forward_plan::added_lines) on
/// `res`, replacing a field of the same name.
void set_lines(beast_http::fields& res, std::string_view lines);

/// Whether a method is idempotent (RFC 9110 §9.2.2: GET, HEAD, OPTIONS, PUT, DELETE, TRACE),
/// so a request that failed on a stale pooled connection before any answer may be sent again.
bool is_idempotent(beast_http::verb method);

/// Whether a request is a WebSocket opening handshake (RFC 6455 §4.1): HTTP/1.1, `Upgrade`
/// listing `websocket` and `Connection` listing `upgrade` (RFC 9110 §7.8), case-insensitive.
/// Only these are ever tunnelled: any other `Upgrade` (h2c...) is a hop-by-hop field that is
/// removed, and the request is served as plain HTTP/1.1 — a tunnelled HTTP/2 connection would
/// carry requests the limiter never sees.
bool is_websocket_upgrade(const request_head& head);

}  // namespace sluice::http
