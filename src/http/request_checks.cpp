// SPDX-License-Identifier: Apache-2.0
// The checks of a request head beyond Beast's own (request_checks.hpp; server.cpp's preamble
// says which and why).

#include "http/request_checks.hpp"

#include "sluice/http/headers.hpp"
#include "sluice/http/problem.hpp"
#include "sluice/http/router.hpp"

#include <boost/beast/core/string.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/rfc7230.hpp>

namespace sluice::http::head_checks {

/// The status answering a failed read of a request body, or nullopt when the connection just
/// ends (closed by the client, reset) and nothing is sent. `ec` has been through
/// timed_socket::timeout_error().
std::optional<bhttp::status> status_for_read_error(const error_code& ec) {
  if (ec == bhttp::error::header_limit) return bhttp::status::request_header_fields_too_large;
  if (ec == bhttp::error::body_limit) return bhttp::status::payload_too_large;
  if (ec == beast::error::timeout) return bhttp::status::request_timeout;
  if (ec == bhttp::error::end_of_stream || ec == bhttp::error::partial_message) {
    return std::nullopt;
  }
  if (ec.category() == bhttp::make_error_code(bhttp::error::bad_method).category()) {
    return bhttp::status::bad_request;  // every other parse error of Beast's http category
  }
  return std::nullopt;  // timeout, reset, aborted: the peer is gone or silent
}

/// Whether a head that overflowed the header limit did so in its request line, which is
/// then longer than `uri_limit` plus the longest method and version around it: the target is
/// what is too long (414), not the fields (431). Beast parses the request line as soon as it
/// is whole (it then has a target), so an unparsed one is still at the start of `buffer`.
bool request_line_too_long(const request_parser& parser, const beast::flat_buffer& buffer,
                           std::uint32_t uri_limit) {
  if (!parser.get().target().empty()) return false;
  const auto data = buffer.data();
  const std::string_view bytes(static_cast<const char*>(data.data()), data.size());
  const auto eol = bytes.find('\n');
  const std::size_t line = eol == std::string_view::npos ? bytes.size() : eol;
  // "METHOD SP target SP HTTP/1.1 CR": methods are short; 32 bytes covers any real one.
  return line > std::size_t{uri_limit} + 32;
}

/// The status answering a failed read of a request head (`ec` through timeout_error()), or
/// nullopt when the connection just ends without an answer. `partial`: some of the head
/// arrived.
std::optional<bhttp::status> status_for_head_error(const error_code& ec, bool partial,
                                                   const request_parser& parser,
                                                   const beast::flat_buffer& buffer,
                                                   const session_limits& limits) {
  if (ec == beast::error::timeout) {
    if (partial) return bhttp::status::request_timeout;  // RFC 9110 §15.5.9
    return std::nullopt;
  }
  if (ec == bhttp::error::header_limit && request_line_too_long(parser, buffer, limits.uri_limit))
    return bhttp::status::uri_too_long;  // RFC 9110 §15.5.15
  return status_for_read_error(ec);
}

/// Checks a parsed head against the caps on its target (414) and field count (431).
std::optional<bhttp::status> check_caps(const request_head& head, const session_limits& limits) {
  if (head.target().size() > limits.uri_limit) return bhttp::status::uri_too_long;
  std::uint32_t fields = 0;
  for (auto it = head.begin(); it != head.end(); ++it) {
    if (++fields > limits.header_count_limit) return bhttp::status::request_header_fields_too_large;
  }
  return std::nullopt;
}

/// Checks a parsed request head for what Beast accepts but sluice must not: the status to
/// answer, or nullopt when the head is acceptable.
std::optional<bhttp::status> check_head(const request_parser& parser) {
  const auto& req = parser.get();
  // One walk over the lines for the three fields checked (each count() would search the
  // field set's ordered index again).
  std::size_t te_lines = 0, length_lines = 0, hosts = 0;
  beast::string_view host;
  for (const auto& line : req) {
    switch (line.name()) {
      case bhttp::field::transfer_encoding:
        ++te_lines;
        break;
      case bhttp::field::content_length:
        ++length_lines;
        break;
      case bhttp::field::host:
        if (hosts++ == 0) host = line.value();
        break;
      default:
        break;
    }
  }
  if (te_lines > 0) {
    if (length_lines > 0) return bhttp::status::bad_request;
    if (req.version() < 11) return bhttp::status::bad_request;  // RFC 9112 §6.1
    if (!parser.chunked()) return bhttp::status::bad_request;   // RFC 9112 §6.3 rule 4
    std::size_t codings = 0;
    for (const auto& line : req) {
      if (line.name() != bhttp::field::transfer_encoding) continue;
      for (const auto coding : bhttp::token_list{line.value()}) {
        (void)coding;
        ++codings;
      }
    }
    if (codings != 1) return bhttp::status::not_implemented;  // e.g. `gzip, chunked`
  }

  if (hosts > 1 || (hosts == 0 && req.version() >= 11)) return bhttp::status::bad_request;
  if (hosts == 1 && !valid_host(host)) return bhttp::status::bad_request;
  return std::nullopt;
}

bool has_token(const bhttp::fields& fields, bhttp::field f, std::string_view token) {
  for (const auto& line : fields) {
    if (line.name() != f) continue;
    for (const auto t : bhttp::token_list{line.value()}) {
      if (beast::iequals(t, token)) return true;
    }
  }
  return false;
}

/// Sets the framing of a response for the client hop: RFC 9110 §6.4.1 (no content for 1xx,
/// 204, 304, and for a response to HEAD), RFC 9110 §8.6 (no Content-Length on 1xx/204; a 304 or
/// a HEAD response may carry the length the content would have). Otherwise Content-Length is
/// the body size; Transfer-Encoding never reaches the client (string bodies have a length).
/// Returns true when the response is sent without a body.
bool frame_response(response& res, bool head_request) {
  res.erase(bhttp::field::transfer_encoding);
  const unsigned code = res.result_int();
  if (code / 100 == 1 || code == 204) {
    res.erase(bhttp::field::content_length);
    res.body().clear();
    return true;
  }
  if (code == 304 || head_request) {
    if (!res.body().empty()) res.content_length(res.body().size());
    res.body().clear();
    return true;
  }
  res.content_length(res.body().size());
  return false;
}

response error_response(bhttp::status status) {
  response res = problem(11, status, bhttp::obsolete_reason(status), {});
  res.content_length(res.body().size());
  res.keep_alive(false);
  return res;
}

}  // namespace sluice::http::head_checks
