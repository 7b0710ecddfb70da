// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// Forwarding to an upstream that speaks HTTP/2 (`upstreams.NAME.http2: true`: h2c with prior
/// knowledge, RFC 9113 §3.3, or TLS with ALPN h2), e.g. a gRPC service, with nghttp2's client
/// session on the worker's io_context. This step: one connection per exchange (made through the
/// worker's upstream_pool, never pooled), the request body sent whole, the response read whole, its
/// trailers (gRPC's grpc-status / grpc-message) kept apart to be sent to the client as
/// trailers.

#include "sluice/http/types.hpp"
#include "sluice/http/upstream_pool.hpp"

#include <boost/asio/awaitable.hpp>

#include <string>
#include <utility>
#include <vector>

namespace sluice::http {

/// Header fields as lowercase names and values (HTTP/2 trailers).
using h2_fields = std::vector<std::pair<std::string, std::string>>;

/// What the client is answered with after an HTTP/2 upstream exchange.
struct h2_upstream_answer {
  response res;        ///< status, fields (the client hop's rules applied), whole body
  h2_fields trailers;  ///< the upstream's trailers, to be sent after the body (may be empty)
};

/// Sends `whole` (a decided request, its body read whole) to `plan.upstream` over HTTP/2 and
/// makes the client's answer, as the HTTP/1.1 forward does: the upstream hop's request fields
/// by headers::render_upstream_request (hop-by-hop fields dropped, X-Forwarded-For and Via
/// added; `te: trailers` kept, as gRPC needs it), the client hop's response fields by
/// render_client_response (the gateway's rate-limit fields, the upstream's own dropped on a
/// limited route). Failures: no connection 502 (504 past connect_timeout), no response head
/// or a stalled body within `upstream.timeout` 504, a reset stream, a GOAWAY or a malformed
/// exchange 502, a body over the route's max_response_body 502; each a problem response with
/// plan.on_failure called and the watch ended. Sets r.upstream_status and r.upstream_ms.
/// `trailers`: the client's request trailers, sent after the body (RFC 9113 §8.1).
/// An https upstream is reached over TLS with ALPN `h2` (plan.upstream_tls); one that does not
/// select `h2` is a TLS failure (502).
boost::asio::awaitable<h2_upstream_answer> h2_forward(upstream_pool& pool, forward_plan& plan,
                                                      request whole, exchange_result& r,
                                                      h2_fields trailers = {});

}  // namespace sluice::http
