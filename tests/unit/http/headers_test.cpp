#include "sluice/http/headers.hpp"

#include <gtest/gtest.h>

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
  prepare_upstream_request(req, "/base/v1/items", "192.0.2.7");
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
  prepare_upstream_request(req, "/", "10.0.0.3");
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
  prepare_upstream_request(req, "/", "127.0.0.1");
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
  prepare_upstream_request(req, "/", "127.0.0.1");
  EXPECT_EQ(req.count(bhttp::field::transfer_encoding), 0u);
  EXPECT_EQ(values(req.base(), "Content-Length"), std::vector<std::string>{"11"});

  request get{bhttp::verb::get, "/", 11};
  get.set(bhttp::field::content_length, "0");
  prepare_upstream_request(get, "/", "127.0.0.1");
  EXPECT_EQ(get.count(bhttp::field::content_length), 0u);

  request empty_post{bhttp::verb::post, "/", 11};
  prepare_upstream_request(empty_post, "/", "127.0.0.1");
  EXPECT_EQ(empty_post[bhttp::field::content_length], "0");
}

TEST(Headers, Http10RequestGoesUpstreamAs11) {
  request req{bhttp::verb::get, "/", 10};
  req.set(bhttp::field::connection, "keep-alive");
  prepare_upstream_request(req, "/", "127.0.0.1");
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
  prepare_client_response(res, true);
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
  prepare_client_response(res, false);
  EXPECT_EQ(res.count("Connection"), 0u);
  EXPECT_EQ(res.count("Keep-Alive"), 0u);
  EXPECT_EQ(res["X-RateLimit-Remaining"], "7");
  EXPECT_EQ(res["X-RateLimit-Limit"], "10");
  EXPECT_EQ(res["RateLimit"], "\"u\";r=7");
  EXPECT_EQ(res["RateLimit-Policy"], "\"u\";q=10;w=60");
}

}  // namespace
}  // namespace sluice::http
