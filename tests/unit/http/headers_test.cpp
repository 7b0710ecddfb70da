// SPDX-License-Identifier: Apache-2.0
#include "sluice/http/headers.hpp"

#include <gtest/gtest.h>

#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/parser.hpp>

#include <string>
#include <vector>

namespace sluice::http {
namespace {

namespace bhttp = boost::beast::http;

std::vector<std::string> values(const bhttp::fields& f, std::string_view name) {
  std::vector<std::string> out;
  for (const auto& line : f) {
    if (boost::beast::iequals(line.name_string(), name)) out.emplace_back(line.value());
  }
  return out;
}

/// Parses a rendered head back into a message (the body is not part of it).
template <bool isRequest>
bhttp::header<isRequest> parse_head(const std::string& text) {
  bhttp::parser<isRequest, bhttp::empty_body> p;
  p.skip(true);  // the head only
  boost::system::error_code ec;
  const std::size_t used = p.put(boost::asio::buffer(text), ec);
  EXPECT_FALSE(ec) << ec.message() << "\n" << text;
  EXPECT_EQ(used, text.size()) << text;
  return p.get().base();
}

/// The head render_upstream_request makes of `req` (framed as a buffered body would be),
/// parsed back.
request forwarded(const request& req, std::string_view target, std::string_view address,
                  const config::upstream* default_host = nullptr) {
  std::string text;
  const bool body = !req.body().empty();
  render_upstream_request(
      text, req.base(),
      upstream_hop{target, address, body ? body_framing::content_length : body_framing::none,
                   req.body().size(), false, default_host});
  request out;
  out.base() = parse_head<true>(text);
  return out;
}

/// The head render_client_response makes of `res` for an HTTP/1.1 client, parsed back.
response relayed(const response& res, client_hop hop) {
  std::string text;
  render_client_response(text, res.base(), hop);
  response out;
  out.base() = parse_head<false>(text);
  return out;
}

response relayed(const response& res, bool limited) {
  client_hop hop;
  hop.limited = limited;
  return relayed(res, hop);
}

request c17_request() {
  request req{bhttp::verb::get, "/v1/items", 11};
  req.set(bhttp::field::host, "api.example.test");
  req.set("X-API-Key", "key-a");
  req.set(bhttp::field::connection, "keep-alive, X-Debug-Token");
  req.set("X-Debug-Token", "tok-123");
  req.set(bhttp::field::keep_alive, "timeout=30");
  req.set(bhttp::field::te, "trailers");
  req.set(bhttp::field::proxy_authorization, "Basic cGxhY2Vob2xkZXI6cGxhY2Vob2xkZXI=");
  req.set(bhttp::field::proxy_connection, "keep-alive");
  req.set(bhttp::field::upgrade, "h2c");
  return req;
}

TEST(Headers, StripHopByHopFixedListAndConnectionNames) {
  request req = c17_request();
  req.insert(bhttp::field::connection, "x-second-line");  // a second Connection line
  req.set("X-Second-Line", "v");
  req.set(bhttp::field::trailer, "Expires");
  req.set(bhttp::field::proxy_authenticate, "Basic");
  req.set(bhttp::field::transfer_encoding, "chunked");
  strip_hop_by_hop(req.base());
  for (const char* name : {"Connection", "Keep-Alive", "TE", "Trailer", "Transfer-Encoding",
                           "Upgrade", "Proxy-Connection", "Proxy-Authenticate",
                           "Proxy-Authorization", "X-Debug-Token", "X-Second-Line"}) {
    EXPECT_EQ(req.count(name), 0u) << name;
  }
  EXPECT_EQ(req[bhttp::field::host], "api.example.test");
  EXPECT_EQ(req["X-API-Key"], "key-a");
}

TEST(Headers, ConnectionCannotRemoveHost) {
  request req{bhttp::verb::get, "/", 11};
  req.set(bhttp::field::host, "h");
  req.set(bhttp::field::connection, "Host, X-A");
  req.set("X-A", "1");
  strip_hop_by_hop(req.base());
  EXPECT_EQ(req[bhttp::field::host], "h");
  EXPECT_EQ(req.count("X-A"), 0u);
}

TEST(Headers, UpstreamRequestC17) {
  request req = c17_request();
  req = forwarded(req, "/base/v1/items", "192.0.2.7");
  for (const char* name :
       {"Connection", "Keep-Alive", "TE", "Upgrade", "Proxy-Connection", "Proxy-Authorization",
        "X-Debug-Token", "Transfer-Encoding", "Content-Length"}) {
    EXPECT_EQ(req.count(name), 0u) << name;
  }
  EXPECT_EQ(req.target(), "/base/v1/items");
  EXPECT_EQ(req[bhttp::field::host], "api.example.test");
  EXPECT_EQ(req["X-API-Key"], "key-a");
  EXPECT_EQ(values(req.base(), "X-Forwarded-For"), std::vector<std::string>{"192.0.2.7"});
  EXPECT_EQ(values(req.base(), "Via"), std::vector<std::string>{"1.1 sluice"});
  EXPECT_EQ(req.version(), 11u);
  EXPECT_TRUE(req.keep_alive());
}

TEST(Headers, ForwardedForJoinedInOrderThenAppended) {
  request req{bhttp::verb::get, "/", 11};
  req.insert("X-Forwarded-For", "203.0.113.1");
  req.insert("X-Other", "o");
  req.insert("X-Forwarded-For", "10.0.0.1, 10.0.0.2");
  req.insert("X-Forwarded-For", "");
  req.insert(bhttp::field::via, "1.0 edge");
  req = forwarded(req, "/", "10.0.0.3");
  EXPECT_EQ(values(req.base(), "X-Forwarded-For"),
            std::vector<std::string>{"203.0.113.1, 10.0.0.1, 10.0.0.2, 10.0.0.3"});
  EXPECT_EQ(values(req.base(), "Via"), std::vector<std::string>{"1.0 edge, 1.1 sluice"});
}

TEST(Headers, MethodOverridesAndExpectRemoved) {
  request req{bhttp::verb::post, "/", 11};
  req.set("X-HTTP-Method-Override", "DELETE");
  req.set("x-method-override", "DELETE");
  req.set("X-Http-Method", "DELETE");
  req.set(bhttp::field::expect, "100-continue");
  req.body() = "abc";
  req = forwarded(req, "/", "127.0.0.1");
  EXPECT_EQ(req.count("X-HTTP-Method-Override"), 0u);
  EXPECT_EQ(req.count("X-Method-Override"), 0u);
  EXPECT_EQ(req.count("X-HTTP-Method"), 0u);
  EXPECT_EQ(req.count(bhttp::field::expect), 0u);
  EXPECT_EQ(req[bhttp::field::content_length], "3");
}

TEST(Headers, ExactlyOneFramingHeaderUpstream) {
  // A de-chunked body: the parser consumed the chunking, the field is still there.
  request req{bhttp::verb::post, "/", 11};
  req.set(bhttp::field::transfer_encoding, "chunked");
  req.body() = "hello world";
  req = forwarded(req, "/", "127.0.0.1");
  EXPECT_EQ(req.count(bhttp::field::transfer_encoding), 0u);
  EXPECT_EQ(values(req.base(), "Content-Length"), std::vector<std::string>{"11"});

  request get{bhttp::verb::get, "/", 11};
  get.set(bhttp::field::content_length, "0");
  get = forwarded(get, "/", "127.0.0.1");
  EXPECT_EQ(get.count(bhttp::field::content_length), 0u);

  request empty_post{bhttp::verb::post, "/", 11};
  empty_post = forwarded(empty_post, "/", "127.0.0.1");
  EXPECT_EQ(empty_post[bhttp::field::content_length], "0");
}

TEST(Headers, Http10RequestGoesUpstreamAs11) {
  request req{bhttp::verb::get, "/", 10};
  req.set(bhttp::field::connection, "keep-alive");
  req = forwarded(req, "/", "127.0.0.1");
  EXPECT_EQ(req.version(), 11u);
  EXPECT_EQ(req.count(bhttp::field::connection), 0u);
  EXPECT_EQ(req[bhttp::field::via], "1.0 sluice");
}

response upstream_response() {
  response res{bhttp::status::ok, 11};
  res.set(bhttp::field::connection, "close, X-Upstream-Hop");
  res.set("X-Upstream-Hop", "1");
  res.set(bhttp::field::keep_alive, "timeout=1");
  res.set("X-RateLimit-Remaining", "7");
  res.set("x-ratelimit-limit", "10");
  res.set("X-RateLimit-Reset", "3");
  res.set("RateLimit", "\"u\";r=7");
  res.set("RateLimit-Policy", "\"u\";q=10;w=60");
  res.set(bhttp::field::retry_after, "5");
  res.set("X-RateLimited-By", "upstream");  // not a rate-limit field of ours
  res.set(bhttp::field::content_type, "application/json");
  return res;
}

TEST(Headers, ClientResponseLimitedRoute) {
  response res = upstream_response();
  res = relayed(res, true);
  for (const char* name :
       {"Connection", "Keep-Alive", "X-Upstream-Hop", "X-RateLimit-Remaining", "X-RateLimit-Limit",
        "X-RateLimit-Reset", "RateLimit", "RateLimit-Policy"}) {
    EXPECT_EQ(res.count(name), 0u) << name;
  }
  EXPECT_EQ(res[bhttp::field::retry_after], "5");
  EXPECT_EQ(res["X-RateLimited-By"], "upstream");
  EXPECT_EQ(res[bhttp::field::content_type], "application/json");
  EXPECT_EQ(res[bhttp::field::via], "1.1 sluice");
}

TEST(Headers, ClientResponseUnlimitedRouteKeepsUpstreamQuota) {
  response res = upstream_response();
  res = relayed(res, false);
  EXPECT_EQ(res.count("Connection"), 0u);
  EXPECT_EQ(res.count("Keep-Alive"), 0u);
  EXPECT_EQ(res["X-RateLimit-Remaining"], "7");
  EXPECT_EQ(res["X-RateLimit-Limit"], "10");
  EXPECT_EQ(res["RateLimit"], "\"u\";r=7");
  EXPECT_EQ(res["RateLimit-Policy"], "\"u\";q=10;w=60");
}

TEST(Headers, UpstreamRequestFramingAndDefaultHost) {
  request req{bhttp::verb::post, "/in", 10};
  req.set(bhttp::field::content_length, "5, 5");
  std::string text;
  config::upstream up;
  up.host = "backend.test";
  up.port = 8081;
  render_upstream_request(
      text, req.base(), upstream_hop{"/up/in", "192.0.2.9", body_framing::chunked, 0, false, &up});
  EXPECT_EQ(text.substr(0, text.find("\r\n")), "POST /up/in HTTP/1.1");
  auto head = parse_head<true>(text);
  EXPECT_EQ(values(head, "Transfer-Encoding"), std::vector<std::string>{"chunked"});
  EXPECT_EQ(head.count(bhttp::field::content_length), 0u);
  EXPECT_EQ(head[bhttp::field::host], "backend.test:8081");  // HTTP/1.0 without Host
  EXPECT_EQ(head[bhttp::field::via], "1.0 sluice");

  render_upstream_request(text, req.base(),
                          upstream_hop{"/", "", body_framing::content_length, 5, false, nullptr});
  head = parse_head<true>(text);
  EXPECT_EQ(values(head, "Content-Length"), std::vector<std::string>{"5"});
  EXPECT_EQ(head.count("X-Forwarded-For"), 0u);  // nothing to append, nothing sent
  EXPECT_EQ(head.count(bhttp::field::host), 0u);
}

TEST(Headers, UpstreamWebSocketHandshakeKeepsItsUpgrade) {
  request req{bhttp::verb::get, "/ws", 11};
  req.set(bhttp::field::host, "h");
  req.set(bhttp::field::connection, "Upgrade");
  req.set(bhttp::field::upgrade, "websocket");
  req.set(bhttp::field::sec_websocket_key, "dGhlIHNhbXBsZSBub25jZQ==");
  std::string text;
  render_upstream_request(text, req.base(),
                          upstream_hop{"/ws", "127.0.0.1", body_framing::none, 0, true, nullptr});
  const auto head = parse_head<true>(text);
  EXPECT_EQ(values(head, "Connection"), std::vector<std::string>{"upgrade"});
  EXPECT_EQ(values(head, "Upgrade"), std::vector<std::string>{"websocket"});
  EXPECT_EQ(head[bhttp::field::sec_websocket_key], "dGhlIHNhbXBsZSBub25jZQ==");
}

TEST(Headers, ClientResponseFramingKeepAliveAndQuotaFields) {
  response res = upstream_response();
  res.insert(bhttp::field::content_length, "12");
  res.insert(bhttp::field::content_length, "12");
  res.set(bhttp::field::transfer_encoding, "chunked");
  const std::vector<std::pair<std::string_view, std::string>> quota{
      {"X-RateLimit-Remaining", "41"}, {"RateLimit", "\"per_key\";r=41;t=1"}};

  client_hop hop;
  hop.limited = true;
  hop.framing = response_framing::content_length;
  hop.length = 12;
  hop.fields = quota;
  auto out = relayed(res, hop);
  EXPECT_EQ(values(out, "Content-Length"), std::vector<std::string>{"12"});
  EXPECT_EQ(out.count(bhttp::field::transfer_encoding), 0u);
  EXPECT_EQ(values(out, "X-RateLimit-Remaining"), std::vector<std::string>{"41"});
  EXPECT_EQ(values(out, "RateLimit"), std::vector<std::string>{"\"per_key\";r=41;t=1"});
  EXPECT_EQ(out.count(bhttp::field::connection), 0u);  // HTTP/1.1 keep-alive: nothing to say

  hop.framing = response_framing::chunked;
  hop.keep_alive = false;
  out = relayed(res, hop);
  EXPECT_EQ(values(out, "Transfer-Encoding"), std::vector<std::string>{"chunked"});
  EXPECT_EQ(out.count(bhttp::field::content_length), 0u);
  EXPECT_EQ(values(out, "Connection"), std::vector<std::string>{"close"});

  // An HTTP/1.0 client: its version on the status line, keep-alive only when asked for.
  hop.version = 10;
  hop.framing = response_framing::none;
  hop.keep_alive = true;
  std::string text;
  render_client_response(text, res.base(), hop);
  EXPECT_EQ(text.substr(0, text.find("\r\n")), "HTTP/1.0 200 OK");
  EXPECT_EQ(values(parse_head<false>(text), "Connection"), std::vector<std::string>{"keep-alive"});
  hop.keep_alive = false;
  render_client_response(text, res.base(), hop);
  EXPECT_EQ(parse_head<false>(text).count(bhttp::field::connection), 0u);
}

TEST(Headers, ClientResponseKeepsTheUpstreamsReasonAndRelaysAnUpgrade) {
  response res{bhttp::status::switching_protocols, 11};
  res.reason("Web Socket Protocol Handshake");
  res.set(bhttp::field::connection, "Upgrade");
  res.set(bhttp::field::upgrade, "websocket");
  res.set(bhttp::field::sec_websocket_accept, "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");
  client_hop hop;
  hop.upgrade = "websocket";
  std::string text;
  render_client_response(text, res.base(), hop);
  EXPECT_EQ(text.substr(0, text.find("\r\n")), "HTTP/1.1 101 Web Socket Protocol Handshake");
  const auto out = parse_head<false>(text);
  EXPECT_EQ(values(out, "Connection"), std::vector<std::string>{"upgrade"});
  EXPECT_EQ(values(out, "Upgrade"), std::vector<std::string>{"websocket"});
  EXPECT_EQ(out[bhttp::field::sec_websocket_accept], "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");
}

}  // namespace
}  // namespace sluice::http
