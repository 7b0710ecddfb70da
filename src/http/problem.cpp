// SPDX-License-Identifier: Apache-2.0
// RFC 9457 problem bodies made by sluice itself.

#include "sluice/http/problem.hpp"

#include <cstdio>

namespace sluice::http {

namespace bhttp = boost::beast::http;

void append_json_string(std::string& out, std::string_view s) {
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += ch;
        }
    }
  }
}

std::string problem_body(unsigned status, std::string_view title, std::string_view detail,
                         std::string_view type) {
  std::string out;
  out.reserve(64 + title.size() + detail.size() + type.size());
  out += "{\"type\":\"";
  append_json_string(out, type.empty() ? std::string_view("about:blank") : type);
  out += "\",\"title\":\"";
  append_json_string(out, title);
  out += "\",\"status\":";
  out += std::to_string(status);
  if (!detail.empty()) {
    out += ",\"detail\":\"";
    append_json_string(out, detail);
    out += '"';
  }
  out += '}';
  return out;
}

response problem(unsigned version, bhttp::status status, std::string_view title,
                 std::string_view detail) {
  response res{status, version};
  res.set(bhttp::field::server, "sluice");
  res.set(bhttp::field::content_type, "application/problem+json");
  res.body() = problem_body(static_cast<unsigned>(status), title, detail);
  return res;
}

failure_text describe(upstream_failure f) {
  switch (f) {
    case upstream_failure::unreachable:
      return {bhttp::status::bad_gateway, "Bad Gateway", "the upstream could not be reached"};
    case upstream_failure::timeout:
      return {bhttp::status::gateway_timeout, "Gateway Timeout",
              "the upstream did not answer in time"};
    case upstream_failure::closed:
      return {bhttp::status::bad_gateway, "Bad Gateway",
              "the upstream closed the connection before a complete response head"};
    case upstream_failure::malformed:
      return {bhttp::status::bad_gateway, "Bad Gateway", "the upstream sent a malformed response"};
    case upstream_failure::too_large:
      return {bhttp::status::bad_gateway, "Bad Gateway",
              "the upstream response is larger than the route's max_response_body"};
    case upstream_failure::body_failed:
      return {bhttp::status::bad_gateway, "Bad Gateway", "the upstream response body broke off"};
    case upstream_failure::tls:
      return {bhttp::status::bad_gateway, "Bad Gateway",
              "the TLS handshake with the upstream failed"};
  }
  return {bhttp::status::bad_gateway, "Bad Gateway", "the upstream failed"};
}

}  // namespace sluice::http
