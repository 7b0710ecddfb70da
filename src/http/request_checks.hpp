// SPDX-License-Identifier: Apache-2.0
#pragma once
// Private to the http room: the checks server.cpp makes of a request head beyond Beast's own
// (its preamble lists them), the status a failed read answers, and the framing of an answer.

#include "sluice/http/relay.hpp"
#include "sluice/http/server.hpp"

#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/status.hpp>

#include <optional>
#include <string_view>

namespace sluice::http::head_checks {

namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using error_code = boost::system::error_code;

/// The status answering a failed read of a request body, or nullopt when the connection just
/// ends (closed by the client, reset) and nothing is sent. `ec` has been through
/// timed_socket::timeout_error().
std::optional<bhttp::status> status_for_read_error(const error_code& ec);

/// Whether a head that overflowed the header limit did so in its request line, which is
/// then longer than `uri_limit` plus the longest method and version around it: the target is
/// what is too long (414), not the fields (431). Beast parses the request line as soon as it
/// is whole (it then has a target), so an unparsed one is still at the start of `buffer`.
bool request_line_too_long(const request_parser& parser, const beast::flat_buffer& buffer,
                           std::uint32_t uri_limit);

/// The status answering a failed read of a request head (`ec` through timeout_error()), or
/// nullopt when the connection just ends without an answer. `partial`: some of the head
/// arrived.
std::optional<bhttp::status> status_for_head_error(const error_code& ec, bool partial,
                                                   const request_parser& parser,
                                                   const beast::flat_buffer& buffer,
                                                   const session_limits& limits);

/// Checks a parsed head against the caps on its target (414) and field count (431).
std::optional<bhttp::status> check_caps(const request_head& head, const session_limits& limits);

/// Checks a parsed request head for what Beast accepts but sluice must not: the status to
/// answer, or nullopt when the head is acceptable.
std::optional<bhttp::status> check_head(const request_parser& parser);

bool has_token(const bhttp::fields& fields, bhttp::field f, std::string_view token);

/// Sets the framing of a response for the client hop: RFC 9110 §6.4.1 (no content for 1xx,
/// 204, 304, and for a response to HEAD), RFC 9110 §8.6 (no Content-Length on 1xx/204; a 304 or
/// a HEAD response may carry the length the content would have). Otherwise Content-Length is
/// the body size; Transfer-Encoding never reaches the client (string bodies have a length).
/// Returns true when the response is sent without a body.
bool frame_response(response& res, bool head_request);

response error_response(bhttp::status status);

/// Declared request bodies up to this size are read and dropped after a refusal, so the
/// connection can stay open; longer ones close it (nginx's lingering close does the same).
constexpr std::uint64_t discard_limit = 64 * 1024;
}  // namespace sluice::http::head_checks
