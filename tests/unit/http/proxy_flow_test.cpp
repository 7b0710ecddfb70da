// SPDX-License-Identifier: Apache-2.0
#include "sluice/http/server.hpp"

// sluice-test-support: upstream_server http_client

// The http room end to end: session -> canonical target -> header rules -> pool -> recording
// upstream, and back (case c17), with a minimal forwarding handler standing in for the app.

#include "sluice/http/headers.hpp"
#include "sluice/http/router.hpp"
#include "sluice/http/upstream_pool.hpp"
#include "support/http_client.hpp"
#include "support/upstream_server.hpp"

#include <gtest/gtest.h>
#include <boost/asio/executor_work_guard.hpp>

#include <thread>

namespace sluice::http {
namespace {

namespace asio = boost::asio;
namespace bhttp = boost::beast::http;
using test::http_connection;

/// Forwards every request to one upstream through the session's relay (the streaming path
/// the gateway uses), with a quota field on the response.
class forwarding_handler final : public request_handler {
 public:
  forwarding_handler(config::upstream up, bool limited)
      : up_(std::make_shared<const config::upstream>(std::move(up))), limited_(limited) {}

  asio::awaitable<verdict> decide(request_head& head, const request_context& ctx) override {
    verdict v;
    auto target = canonicalize(head.target());
    if (!target) {
      v.answer = response{bhttp::status::bad_request, head.version()};
      co_return v;
    }
    v.what = verdict::kind::forward;
    v.forward.upstream = up_;
    v.forward.target = target->path;
    if (!target->query.empty()) v.forward.target += "?" + target->query;
    v.forward.client_address = ctx.peer.address().to_string();
    v.forward.limited = limited_;
    if (limited_) v.forward.response_fields.emplace_back("X-RateLimit-Remaining", "99");
    co_return v;
  }

 private:
  std::shared_ptr<const config::upstream> up_;
  bool limited_;
};

class ProxyFlowTest : public ::testing::Test {
 protected:
  void SetUp() override {
    config::upstream up;
    up.host = "127.0.0.1";
    up.port = upstream.port();
    handler = std::make_shared<forwarding_handler>(up, true);
    srv = std::make_unique<server>(ioc,
                                   asio::ip::tcp::endpoint{asio::ip::make_address("127.0.0.1"), 0},
                                   handler, session_limits{}, 0);
    port = srv->local_endpoint().port();
    srv->start();
    thread = std::thread([this] { ioc.run(); });
  }
  void TearDown() override {
    srv->stop();
    guard.reset();
    ioc.stop();
    thread.join();
  }

  test::upstream_server upstream;
  asio::io_context ioc{1};
  asio::executor_work_guard<asio::io_context::executor_type> guard{ioc.get_executor()};
  std::shared_ptr<forwarding_handler> handler;
  std::unique_ptr<server> srv;
  std::uint16_t port = 0;
  std::thread thread;
};

TEST_F(ProxyFlowTest, HopByHopHeadersStopAtTheProxyBothWays) {
  test::canned_response canned;
  canned.headers = {
      {"Connection", "close"}, {"Keep-Alive", "timeout=1"}, {"X-RateLimit-Remaining", "7"}};
  upstream.set_response(canned);

  http_connection c(port);
  c.send_raw(
      "GET /v1/./items HTTP/1.1\r\n"
      "Host: api.example.test\r\n"
      "X-API-Key: key-a\r\n"
      "Connection: keep-alive, X-Debug-Token\r\n"
      "X-Debug-Token: tok-123\r\n"
      "Keep-Alive: timeout=30\r\n"
      "TE: trailers\r\n"
      "Proxy-Authorization: Basic cGxhY2Vob2xkZXI6cGxhY2Vob2xkZXI=\r\n"
      "Proxy-Connection: keep-alive\r\n"
      "Upgrade: h2c\r\n"
      "X-HTTP-Method-Override: DELETE\r\n"
      "X-Forwarded-For: 203.0.113.9\r\n"
      "X-Forwarded-For: 198.51.100.1\r\n"
      "\r\n");
  auto r1 = c.read_response();
  EXPECT_EQ(r1.status, 200u);
  EXPECT_FALSE(r1.has("Connection"));
  EXPECT_FALSE(r1.has("Keep-Alive"));
  EXPECT_EQ(r1.count("X-RateLimit-Remaining"), 1u);
  EXPECT_EQ(r1.header("X-RateLimit-Remaining"), "99");
  EXPECT_EQ(r1.header("Via"), "1.1 sluice");

  const auto at_upstream = upstream.requests().at(0);
  EXPECT_EQ(at_upstream.target, "/v1/items");
  for (const char* name :
       {"Connection", "Keep-Alive", "TE", "Proxy-Authorization", "Proxy-Connection", "Upgrade",
        "X-Debug-Token", "X-HTTP-Method-Override", "Transfer-Encoding", "Content-Length"}) {
    EXPECT_FALSE(at_upstream.has(name)) << name;
  }
  EXPECT_EQ(at_upstream.header("X-API-Key"), "key-a");
  EXPECT_EQ(at_upstream.header("Host"), "api.example.test");
  EXPECT_EQ(at_upstream.values("X-Forwarded-For"),
            std::vector<std::string>{"203.0.113.9, 198.51.100.1, 127.0.0.1"});

  // The upstream's `Connection: close` ended the upstream connection, not the client's.
  auto r2 = c.request("GET", "/v1/items", {{"Host", "api.example.test"}});
  EXPECT_EQ(r2.status, 200u);
  EXPECT_EQ(upstream.accepts(), 2u);
}

TEST_F(ProxyFlowTest, ClientConnectionCloseDoesNotCloseThePooledConnection) {
  for (int i = 0; i < 2; ++i) {
    http_connection c(port);
    auto r = c.request("GET", "/v1/items", {{"Connection", "close"}});
    EXPECT_EQ(r.status, 200u);
    EXPECT_EQ(r.header("Connection"), "close");
    EXPECT_TRUE(c.closed_by_peer());
  }
  EXPECT_EQ(upstream.request_count(), 2u);
  EXPECT_EQ(upstream.accepts(), 1u);
}

TEST_F(ProxyFlowTest, ChunkedBodyForwardedWithOneFramingHeader) {
  http_connection c(port);
  c.send_raw(
      "POST /v1/items HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n"
      "4\r\nabcd\r\n3\r\nefg\r\n0\r\n\r\n");
  EXPECT_EQ(c.read_response().status, 200u);
  const auto at_upstream = upstream.requests().at(0);
  EXPECT_EQ(at_upstream.body, "abcdefg");
  // Streamed: chunked in, chunked out (the length is not known before the last chunk).
  EXPECT_EQ(at_upstream.values("Transfer-Encoding"), std::vector<std::string>{"chunked"});
  EXPECT_FALSE(at_upstream.has("Content-Length"));
}

TEST_F(ProxyFlowTest, SmugglingAttemptNeverReachesTheUpstream) {
  http_connection c(port);
  c.send_raw(
      "POST /v1/items HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n"
      "Content-Length: 30\r\n\r\n0\r\n\r\nGET /admin HTTP/1.1\r\nHost: h\r\n\r\n");
  EXPECT_EQ(c.read_response().status, 400u);
  EXPECT_TRUE(c.closed_by_peer());
  EXPECT_EQ(upstream.request_count(), 0u);
}

TEST_F(ProxyFlowTest, PipelinedRequestsForwardedAndAnsweredInOrder) {
  http_connection c(port);
  c.send_raw(
      "GET /one HTTP/1.1\r\nHost: h\r\n\r\n"
      "GET /two HTTP/1.1\r\nHost: h\r\n\r\n"
      "HEAD /three HTTP/1.1\r\nHost: h\r\n\r\n"
      "GET /four HTTP/1.1\r\nHost: h\r\n\r\n");
  auto r1 = c.read_response();
  auto r2 = c.read_response();
  auto r3 = c.read_response(true);
  auto r4 = c.read_response();
  EXPECT_NE(r1.body.find("\"target\":\"/one\""), std::string::npos);
  EXPECT_NE(r2.body.find("\"target\":\"/two\""), std::string::npos);
  EXPECT_TRUE(r3.body.empty());
  EXPECT_NE(r3.header("Content-Length"), "0");
  EXPECT_NE(r4.body.find("\"target\":\"/four\""), std::string::npos);
  EXPECT_EQ(upstream.accepts(), 1u);
}

}  // namespace
}  // namespace sluice::http
