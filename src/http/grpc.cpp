// SPDX-License-Identifier: Apache-2.0
// gRPC answers for the gateway's own refusals (see sluice/http/grpc.hpp).

#include "sluice/http/grpc.hpp"

#include <boost/beast/core/string.hpp>

#include <string>

namespace sluice::http {

namespace {

namespace bhttp = boost::beast::http;

/// The value of the JSON string member `"name":"..."` of a problem body, unescaped (the
/// escapes append_json_string writes: \" \\ \n \r \t \b \f \uXXXX for ASCII); "" when absent.
std::string json_member(std::string_view body, std::string_view name) {
  const std::string key = "\"" + std::string(name) + "\":\"";
  const auto at = body.find(key);
  if (at == std::string_view::npos) return {};
  std::string out;
  for (std::size_t i = at + key.size(); i < body.size(); ++i) {
    const char c = body[i];
    if (c == '"') break;
    if (c != '\\' || i + 1 >= body.size()) {
      out.push_back(c);
      continue;
    }
    const char e = body[++i];
    switch (e) {
      case 'n':
        out.push_back('\n');
        break;
      case 'r':
        out.push_back('\r');
        break;
      case 't':
        out.push_back('\t');
        break;
      case 'b':
        out.push_back('\b');
        break;
      case 'f':
        out.push_back('\f');
        break;
      case 'u':
        if (i + 4 < body.size()) {
          out.push_back(
              static_cast<char>(std::stoi(std::string(body.substr(i + 1, 4)), nullptr, 16)));
          i += 4;
        }
        break;
      default:
        out.push_back(e);
    }
  }
  return out;
}

}  // namespace

bool is_grpc_request(const request_head& head) {
  const auto ct = head[bhttp::field::content_type];
  constexpr std::string_view grpc = "application/grpc";
  if (ct.size() < grpc.size() || !boost::beast::iequals(ct.substr(0, grpc.size()), grpc))
    return false;
  return ct.size() == grpc.size() || ct[grpc.size()] == '+' || ct[grpc.size()] == ';';
}

grpc_status grpc_status_for(unsigned status) {
  switch (status) {
    case 429:
    case 413:
      return grpc_status::resource_exhausted;
    case 502:
    case 503:
      return grpc_status::unavailable;
    case 504:
    case 408:
      return grpc_status::deadline_exceeded;
    case 400:
      return grpc_status::invalid_argument;
    case 401:
      return grpc_status::unauthenticated;
    case 403:
      return grpc_status::permission_denied;
    case 404:
      return grpc_status::unimplemented;
    case 500:
      return grpc_status::internal;
    default:
      return grpc_status::unknown;
  }
}

std::string grpc_percent_encode(std::string_view text) {
  static constexpr char hex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(text.size());
  for (const char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    if (c >= 0x20 && c <= 0x7E && c != '%') {
      out.push_back(ch);
    } else {
      out.push_back('%');
      out.push_back(hex[c >> 4]);
      out.push_back(hex[c & 0xF]);
    }
  }
  return out;
}

bool to_grpc_answer(response& res) {
  if (res[bhttp::field::content_type] != "application/problem+json") return false;
  std::string message = json_member(res.body(), "detail");
  if (message.empty()) message = json_member(res.body(), "title");
  const auto code = grpc_status_for(res.result_int());
  res.result(bhttp::status::ok);
  res.set(bhttp::field::content_type, "application/grpc");
  res.erase(bhttp::field::content_length);
  res.set("grpc-status", std::to_string(static_cast<unsigned>(code)));
  res.set("grpc-message", grpc_percent_encode(message));
  res.body().clear();
  return true;
}

}  // namespace sluice::http
