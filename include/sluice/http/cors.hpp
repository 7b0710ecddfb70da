// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// The CORS protocol of the Fetch standard (§3.2) as the gateway speaks it for a route's
/// `cors:` policy: which origins may read responses, the preflight answer, and the fields
/// every response to a cross-origin request carries — the gateway's own (429, 503, 401, 404,
/// 502...) as well as relayed ones — so that browser code can read the status and the
/// rate-limit fields.

#include "sluice/config/rules.hpp"
#include "sluice/http/types.hpp"

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace sluice::http {

/// Response fields with names of static storage (as forward_plan::response_fields).
using field_list = std::vector<std::pair<std::string_view, std::string>>;

/// The rate-limit fields a cross-origin page may always read (`Access-Control-Expose-Headers`):
/// none of them is CORS-safelisted (Fetch §3.2.4), so without this a page sees no quota.
inline constexpr std::string_view rate_limit_exposed =
    "Retry-After, RateLimit, RateLimit-Policy, X-RateLimit-Limit, X-RateLimit-Remaining, "
    "X-RateLimit-Reset, X-RateLimit-Warning";

/// Whether `origin` (an `Origin` field value, as browsers serialise it) is allowed by one of
/// `policy.origins`: `*`; an exact origin; `scheme://*.suffix` (one or more labels before
/// the suffix); a port `*` (any port, or none). Comparison is exact (browsers send lower
/// case). Pure.
bool origin_allowed(const config::cors_policy& policy, std::string_view origin);

/// Whether `head` is a CORS preflight (Fetch §3.2.2): `OPTIONS` with `Origin` and
/// `Access-Control-Request-Method`.
bool is_preflight(const request_head& head);

/// The fields a response to `head` carries under `policy` (Fetch §3.2.3), appended to
/// `out`: when the request's `Origin` is allowed, `Access-Control-Allow-Origin` (`*` for an
/// `*` policy without credentials, else the origin itself),
/// `Access-Control-Allow-Credentials: true` with credentials, and
/// `Access-Control-Expose-Headers` (the rate-limit fields, then `expose_headers`). `Vary:
/// Origin` whenever the answer depends on the origin (every policy but `*` without
/// credentials), allowed or not, so a cache never serves one origin's answer to another.
/// No fields without an `Origin` field, except that Vary.
void append_cors_fields(const config::cors_policy& policy, const request_head& head,
                        field_list& out);

/// The gateway's answer to a preflight under `policy` (Fetch §3.2.3, "HTTP responses"):
/// `204 No Content` with `extra` (the quota fields) and, for an allowed origin,
/// `Access-Control-Allow-Methods` (the policy's methods; `*` echoes the requested one),
/// `Access-Control-Allow-Headers` (the policy's headers; `*` is sent as `*`, or with
/// credentials echoes the requested ones) and `Access-Control-Max-Age` when set; `Vary` names
/// the two request fields. The fields every answer carries (append_cors_fields()) are the
/// caller's to add, as for any other answer. An origin that is not allowed gets no
/// Access-Control-* field from either: the browser then refuses the request it meant to make.
response preflight_answer(const config::cors_policy& policy, const request_head& head,
                          const field_list& extra);

}  // namespace sluice::http
