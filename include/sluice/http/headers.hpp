#pragma once
/// @file
/// Header rules of the proxy, in one place for both directions (RFC 9110 §7.6.1; case c17).

#include "sluice/http/types.hpp"

#include <string>
#include <string_view>

namespace sluice::http {

/// Removes the hop-by-hop fields (Connection, Keep-Alive, TE, Trailer, Transfer-Encoding,
/// Upgrade, Proxy-Connection, Proxy-Authenticate, Proxy-Authorization) and every field named
/// in Connection (every Connection line, case-insensitive), from a request or a response
/// header set. A Connection line naming Host does not remove Host (it is never hop-by-hop).
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

/// Prepares an upstream response for the client: strips hop-by-hop fields, adds
/// `Via: 1.1 sluice`. When `limited` (the route is limited) the upstream's own rate-limit
/// fields (X-RateLimit-*, RateLimit, RateLimit-Policy, Retry-After is kept) are removed.
void prepare_client_response(response& res, bool limited);

}  // namespace sluice::http
