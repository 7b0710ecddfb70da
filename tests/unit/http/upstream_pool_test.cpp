// SPDX-License-Identifier: Apache-2.0
#include "sluice/http/upstream_pool.hpp"

// sluice-test-support: upstream_server

#include "sluice/errc.hpp"
#include "sluice/http/headers.hpp"
#include "support/upstream_server.hpp"

#include <gtest/gtest.h>
#include "support/eventually.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_future.hpp>
#include <future>

#include <thread>

namespace sluice::http {
namespace {

using test::scaled;

namespace asio = boost::asio;
namespace bhttp = boost::beast::http;
using namespace std::chrono_literals;

class UpstreamPoolTest : public ::testing::Test {
 protected:
  UpstreamPoolTest() : pool(ioc.get_executor()) {
    up.name = "api";
    up.host = "127.0.0.1";
    up.port = upstream.port();
    up.url = upstream.url();
    up.connect_timeout = 1000ms;
    up.timeout = 2000ms;
  }

  /// Sends one request through the pool, running the io_context until it completes.
  boost::system::result<response> send(bhttp::verb method, std::string target,
                                       std::string body = {}) {
    request req{method, target, 11};
    req.set(bhttp::field::host, "api.example.test");
    req.body() = std::move(body);
    auto fut = asio::co_spawn(ioc, pool.send(up, std::move(req), "192.0.2.1"), asio::use_future);
    // Until the exchange completes (a pooled connection's deadline timer stays pending, so
    // the io_context never runs out of work by itself).
    ioc.restart();
    while (fut.wait_for(std::chrono::seconds(0)) != std::future_status::ready) ioc.run_one();
    return fut.get();
  }

  test::upstream_server upstream;
  asio::io_context ioc{1};
  upstream_pool pool;
  config::upstream up;
};

TEST_F(UpstreamPoolTest, SequentialRequestsReuseOneConnection) {
  auto r1 = send(bhttp::verb::get, "/a");
  ASSERT_TRUE(r1) << r1.error().message();
  EXPECT_EQ(r1->result_int(), 200u);
  auto r2 = send(bhttp::verb::get, "/b");
  ASSERT_TRUE(r2) << r2.error().message();
  EXPECT_EQ(upstream.accepts(), 1u);
  EXPECT_EQ(upstream.request_count(), 2u);
  EXPECT_EQ(pool.stats().connects, 1u);
  EXPECT_EQ(pool.stats().reuses, 1u);
  EXPECT_EQ(pool.idle_count(), 1u);
  const auto reqs = upstream.requests();
  EXPECT_EQ(reqs[0].target, "/a");
  EXPECT_EQ(reqs[1].target, "/b");
  EXPECT_EQ(reqs[1].header("Host"), "api.example.test");
  EXPECT_EQ(reqs[1].values("X-Forwarded-For"), std::vector<std::string>{"192.0.2.1"});
  EXPECT_FALSE(reqs[1].has("Connection"));
}

TEST_F(UpstreamPoolTest, BodyIsForwardedWithOneFramingHeader) {
  auto r = send(bhttp::verb::post, "/p", "payload");
  ASSERT_TRUE(r);
  const auto req = upstream.requests().at(0);
  EXPECT_EQ(req.body, "payload");
  EXPECT_EQ(req.values("Content-Length"), std::vector<std::string>{"7"});
  EXPECT_FALSE(req.has("Transfer-Encoding"));
}

TEST_F(UpstreamPoolTest, UpstreamConnectionCloseMeansNewConnection) {
  test::canned_response close;
  close.headers = {{"Connection", "close"}, {"Keep-Alive", "timeout=1"}};
  upstream.set_response(close);
  auto r1 = send(bhttp::verb::get, "/a");
  ASSERT_TRUE(r1);
  // The pool hands back the upstream's fields; render_client_response drops them.
  EXPECT_EQ((*r1)[bhttp::field::connection], "close");
  EXPECT_EQ(pool.idle_count(), 0u);
  auto r2 = send(bhttp::verb::get, "/b");
  ASSERT_TRUE(r2);
  EXPECT_EQ(upstream.accepts(), 2u);
  EXPECT_EQ(pool.stats().connects, 2u);
}

TEST_F(UpstreamPoolTest, UpstreamRateLimitFieldsReachTheCaller) {
  test::canned_response canned;
  canned.headers = {{"X-RateLimit-Remaining", "7"}};
  canned.body = "{}";
  upstream.set_response(canned);
  auto r = send(bhttp::verb::get, "/a");
  ASSERT_TRUE(r);
  EXPECT_EQ((*r)["X-RateLimit-Remaining"], "7");
  EXPECT_EQ(r->body(), "{}");
}

TEST_F(UpstreamPoolTest, UnreachableUpstream) {
  std::uint16_t closed_port = 0;
  {
    asio::ip::tcp::acceptor probe(ioc, {asio::ip::make_address("127.0.0.1"), 0});
    closed_port = probe.local_endpoint().port();
  }
  up.port = closed_port;
  auto r = send(bhttp::verb::get, "/a");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error(), errc::upstream_unreachable);
  EXPECT_EQ(pool.stats().failures, 1u);
}

TEST_F(UpstreamPoolTest, UnresolvableHostIsUnreachable) {
  up.host = "host.invalid";
  auto r = send(bhttp::verb::get, "/a");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error(), errc::upstream_unreachable);
}

TEST_F(UpstreamPoolTest, SlowUpstreamTimesOut) {
  test::canned_response slow;
  slow.delay = 800ms;
  upstream.set_response(slow);
  up.timeout = 200ms;
  const auto start = std::chrono::steady_clock::now();
  auto r = send(bhttp::verb::get, "/slow");
  const auto took = std::chrono::steady_clock::now() - start;
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error(), errc::upstream_timeout);
  EXPECT_LT(took, scaled(700ms));
  EXPECT_EQ(upstream.request_count(), 1u);  // a timeout is never retried
  EXPECT_EQ(pool.idle_count(), 0u);
}

TEST_F(UpstreamPoolTest, CloseWithoutResponseIsProtocolError) {
  test::canned_response drop;
  drop.close_without_response = true;
  upstream.set_response(drop);
  auto r = send(bhttp::verb::get, "/a");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error(), errc::upstream_protocol);
  EXPECT_EQ(upstream.request_count(), 1u);  // fresh connection: no retry
}

TEST_F(UpstreamPoolTest, StaleReusedConnectionRetriedOnceForIdempotentMethods) {
  ASSERT_TRUE(send(bhttp::verb::get, "/warm"));
  test::canned_response drop;
  drop.close_without_response = true;
  upstream.set_response(drop);
  auto r = send(bhttp::verb::get, "/a");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error(), errc::upstream_protocol);
  EXPECT_EQ(pool.stats().retries_idempotent, 1u);
  EXPECT_EQ(upstream.request_count(), 3u);  // warm-up, the reused attempt, one retry
  EXPECT_EQ(upstream.accepts(), 2u);
}

TEST_F(UpstreamPoolTest, NonIdempotentRequestIsNotRetried) {
  ASSERT_TRUE(send(bhttp::verb::get, "/warm"));
  test::canned_response drop;
  drop.close_without_response = true;
  upstream.set_response(drop);
  auto r = send(bhttp::verb::post, "/a", "x");
  ASSERT_FALSE(r);
  EXPECT_EQ(pool.stats().retries_idempotent, 0u);
  EXPECT_EQ(upstream.request_count(), 2u);
}

TEST_F(UpstreamPoolTest, ConnectionClosedWhileIdleIsNotUsed) {
  ASSERT_TRUE(send(bhttp::verb::post, "/first", "x"));
  upstream.close_connections();
  // The idle connection's outstanding read completes with EOF: it leaves the pool as the
  // event loop runs, before any request comes.
  ioc.restart();
  while (pool.idle_count() > 0) ioc.run_one_for(10ms);
  EXPECT_EQ(pool.stats().idle_closed, 1u);
  // A POST cannot be retried: it must not meet the dead connection.
  auto r = send(bhttp::verb::post, "/second", "y");
  ASSERT_TRUE(r) << r.error().message();
  EXPECT_EQ(upstream.accepts(), 2u);
  EXPECT_EQ(pool.stats().retries_idempotent, 0u);
}

TEST_F(UpstreamPoolTest, AdvertisedKeepAliveTimeoutExpiresIdleConnection) {
  test::canned_response canned;
  canned.headers = {{"Keep-Alive", "timeout=1"}};
  upstream.set_response(canned);
  ASSERT_TRUE(send(bhttp::verb::get, "/a"));
  ASSERT_TRUE(send(bhttp::verb::get, "/b"));
  EXPECT_EQ(upstream.accepts(), 1u);
  std::this_thread::sleep_for(600ms);  // past timeout=1 less the 500 ms margin
  ASSERT_TRUE(send(bhttp::verb::get, "/c"));
  EXPECT_EQ(upstream.accepts(), 2u);
}

TEST_F(UpstreamPoolTest, HeadResponseHasNoBodyAndKeepsConnection) {
  auto h = send(bhttp::verb::head, "/h");
  ASSERT_TRUE(h);
  EXPECT_TRUE(h->body().empty());
  EXPECT_NE((*h)[bhttp::field::content_length], "");
  auto g = send(bhttp::verb::get, "/g");
  ASSERT_TRUE(g);
  EXPECT_FALSE(g->body().empty());
  EXPECT_EQ(upstream.accepts(), 1u);
}

TEST_F(UpstreamPoolTest, OversizedResponseBodyIsRefused) {
  pool.set_response_body_limit(10);
  auto r = send(bhttp::verb::get, "/a");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error(), errc::upstream_protocol);
}

TEST_F(UpstreamPoolTest, MaxIdleBoundsThePool) {
  upstream_pool small(ioc.get_executor(), 1);
  request req{bhttp::verb::get, "/", 11};
  req.set(bhttp::field::host, "h");
  // Two concurrent exchanges open two connections; only one stays pooled.
  auto f1 = asio::co_spawn(ioc, small.send(up, req, "192.0.2.1"), asio::use_future);
  auto f2 = asio::co_spawn(ioc, small.send(up, req, "192.0.2.1"), asio::use_future);
  // (A pooled connection's outstanding read keeps the io_context busy: run until both end.)
  ioc.restart();
  while (f1.wait_for(0s) != std::future_status::ready ||
         f2.wait_for(0s) != std::future_status::ready) {
    ioc.run_one();
  }
  ASSERT_TRUE(f1.get());
  ASSERT_TRUE(f2.get());
  EXPECT_EQ(small.stats().connects, 2u);
  EXPECT_EQ(small.idle_count(), 1u);
}

}  // namespace
}  // namespace sluice::http
