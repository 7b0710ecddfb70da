// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// gRPC answers (gRPC over HTTP/2, "PROTOCOL-HTTP2.md" of grpc/grpc): a refusal the gateway
/// makes itself (a problem response: 429, 503 fail_closed, 413, ...) is turned into what a gRPC
/// client understands, a trailers-only response: HTTP 200, `content-type: application/grpc`,
/// `grpc-status`, `grpc-message`, and the refusal's other fields (the rate-limit fields,
/// Retry-After) as metadata, no body.

#include "sluice/http/types.hpp"

#include <string>
#include <string_view>

namespace sluice::http {

/// gRPC status codes (grpc/grpc doc/statuscodes.md) the gateway answers with.
enum class grpc_status : unsigned {
  ok = 0,
  unknown = 2,
  invalid_argument = 3,
  deadline_exceeded = 4,
  not_found = 5,
  permission_denied = 7,
  resource_exhausted = 8,
  unimplemented = 12,
  internal = 13,
  unavailable = 14,
  unauthenticated = 16,
};

/// Whether a request is gRPC: its Content-Type is `application/grpc` or starts with
/// `application/grpc+` / `application/grpc;` (case-insensitive).
bool is_grpc_request(const request_head& head);

/// The gRPC status a gateway refusal with HTTP `status` stands for: 429 and 413 (a limit, the
/// body limit) RESOURCE_EXHAUSTED; 503 (fail_closed, draining), 502 UNAVAILABLE (as Envoy's
/// `rate_limited_as_resource_exhausted` and gRPC's HTTP-to-gRPC mapping); 504 and 408
/// DEADLINE_EXCEEDED; 400 INVALID_ARGUMENT; 401 UNAUTHENTICATED; 403 PERMISSION_DENIED; 404
/// UNIMPLEMENTED; 500 INTERNAL; any other UNKNOWN.
grpc_status grpc_status_for(unsigned status);

/// Percent-encodes `text` for `grpc-message` (PROTOCOL-HTTP2.md: bytes outside 0x20..0x7E and
/// `%` itself as `%XX`, upper-case hex).
std::string grpc_percent_encode(std::string_view text);

/// Turns `res`, an answer the gateway made itself (an `application/problem+json` response),
/// into a trailers-only gRPC answer in place: status 200, `content-type: application/grpc`,
/// `grpc-status` (grpc_status_for the old status), `grpc-message` (the problem's detail, else
/// its title, percent-encoded), every other field kept (the rate-limit fields become metadata;
/// Content-Type and Content-Length are replaced), the body dropped. A response that is not a
/// problem (relayed from an upstream, a CORS preflight answer) is left as it is; returns
/// whether `res` was changed.
bool to_grpc_answer(response& res);

}  // namespace sluice::http
