// SPDX-License-Identifier: Apache-2.0
#include "sluice/http/server.hpp"

// sluice-test-support: http_client

#include "support/http_client.hpp"

#include <gtest/gtest.h>
#include <boost/asio/executor_work_guard.hpp>

#include <atomic>
#include <string>
#include <thread>

namespace sluice::http {
namespace {

namespace asio = boost::asio;
namespace bhttp = boost::beast::http;
using test::http_connection;

/// Answers 200 with "METHOD TARGET BODY"; `/close` asks for the connection to be closed;
/// `/empty` answers 204.
class echo_handler final : public buffered_handler {
 public:
  asio::awaitable<response> respond(request req, const request_context& ctx) override {
    calls.fetch_add(1);
    last_peer_port = ctx.peer.port();
    response res{bhttp::status::ok, req.version()};
    if (req.target() == "/empty")
      res.result(bhttp::status::no_content);
    else
      res.body() =
          std::string(req.method_string()) + " " + std::string(req.target()) + " " + req.body();
    if (req.target() == "/close") res.set(bhttp::field::connection, "close");
    res.set("Transfer-Encoding", "chunked");  // the session must reframe
    co_return res;
  }
  std::atomic<int> calls{0};
  std::atomic<unsigned> last_peer_port{0};
};

class ServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    handler = std::make_shared<echo_handler>();
    session_limits limits;
    limits.header_limit = 4 * 1024;
    limits.body_limit = 1024;
    srv = std::make_unique<server>(
        ioc, asio::ip::tcp::endpoint{asio::ip::make_address("127.0.0.1"), 0}, handler, limits, 0);
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

  asio::io_context ioc{1};
  asio::executor_work_guard<asio::io_context::executor_type> guard{ioc.get_executor()};
  std::shared_ptr<echo_handler> handler;
  std::unique_ptr<server> srv;
  std::uint16_t port = 0;
  std::thread thread;
};

TEST_F(ServerTest, KeepAliveTwoRequestsOnOneConnection) {
  http_connection c(port);
  auto r1 = c.request("GET", "/a");
  EXPECT_EQ(r1.status, 200u);
  EXPECT_EQ(r1.body, "GET /a ");
  EXPECT_EQ(r1.header("Content-Length"), "7");
  EXPECT_FALSE(r1.has("Transfer-Encoding"));
  EXPECT_FALSE(r1.has("Connection"));
  auto r2 = c.request("POST", "/b", {}, "xyz");
  EXPECT_EQ(r2.status, 200u);
  EXPECT_EQ(r2.body, "POST /b xyz");
  EXPECT_FALSE(c.closed_by_peer(std::chrono::milliseconds(100)));
  EXPECT_EQ(handler->calls.load(), 2);
}

TEST_F(ServerTest, PipelinedRequestsAnsweredInOrder) {
  http_connection c(port);
  c.send_raw(
      "GET /first HTTP/1.1\r\nHost: x\r\n\r\n"
      "POST /second HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n\r\nbody"
      "GET /third HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(c.read_response().body, "GET /first ");
  EXPECT_EQ(c.read_response().body, "POST /second body");
  EXPECT_EQ(c.read_response().body, "GET /third ");
}

TEST_F(ServerTest, ChunkedRequestBodyIsRead) {
  http_connection c(port);
  c.send_raw(
      "POST /c HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
      "3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n");
  EXPECT_EQ(c.read_response().body, "POST /c abcde");
}

TEST_F(ServerTest, Http10WithoutKeepAliveCloses) {
  http_connection c(port);
  c.send_raw("GET /old HTTP/1.0\r\n\r\n");
  auto r = c.read_response();
  EXPECT_EQ(r.status, 200u);
  EXPECT_EQ(r.version, 10u);
  EXPECT_TRUE(c.closed_by_peer());
}

TEST_F(ServerTest, Http10WithKeepAliveStaysOpen) {
  http_connection c(port);
  c.send_raw("GET /old HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
  auto r = c.read_response();
  EXPECT_EQ(r.status, 200u);
  EXPECT_EQ(r.header("Connection"), "keep-alive");
  c.send_raw("GET /again HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
  EXPECT_EQ(c.read_response().body, "GET /again ");
}

TEST_F(ServerTest, ClientConnectionCloseHonoured) {
  http_connection c(port);
  auto r = c.request("GET", "/a", {{"Connection", "close"}});
  EXPECT_EQ(r.status, 200u);
  EXPECT_EQ(r.header("Connection"), "close");
  EXPECT_TRUE(c.closed_by_peer());
}

TEST_F(ServerTest, HandlerCanCloseTheConnection) {
  http_connection c(port);
  auto r = c.request("GET", "/close");
  EXPECT_EQ(r.status, 200u);
  EXPECT_EQ(r.header("Connection"), "close");
  EXPECT_TRUE(c.closed_by_peer());
}

TEST_F(ServerTest, HeadAndNoContentHaveNoBody) {
  http_connection c(port);
  auto h = c.request("HEAD", "/h");
  EXPECT_EQ(h.status, 200u);
  EXPECT_EQ(h.header("Content-Length"), "8");  // the length of the body not sent
  EXPECT_TRUE(h.body.empty());
  auto e = c.request("GET", "/empty");
  EXPECT_EQ(e.status, 204u);
  EXPECT_FALSE(e.has("Content-Length"));
  // The connection is still in sync after both.
  EXPECT_EQ(c.request("GET", "/z").body, "GET /z ");
}

TEST_F(ServerTest, ExpectContinue) {
  http_connection c(port);
  c.send_raw("POST /e HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n");
  auto interim = c.read_response();
  EXPECT_EQ(interim.status, 100u);
  c.send_raw("hello");
  EXPECT_EQ(c.read_response().body, "POST /e hello");
}

struct bad_case {
  const char* name;
  std::string raw;
  unsigned status;
};

TEST_F(ServerTest, MalformedRequestsGet4xxAndClose) {
  const std::string big(5000, 'a');
  const bad_case cases[] = {
      {"garbage", "BLAH\r\n\r\n", 400},
      {"bad version", "GET / HTTP/x.y\r\nHost: x\r\n\r\n", 400},
      {"CL then TE",
       "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n"
       "0\r\n\r\n",
       400},
      {"TE then CL",
       "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n"
       "0\r\n\r\n",
       400},
      {"TE gzip then CL",
       "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\nContent-Length: 3\r\n\r\nabc",
       400},
      {"TE not chunked", "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\nabc", 400},
      {"TE gzip, chunked",
       "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n", 501},
      {"TE in HTTP/1.0", "POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400},
      {"two content lengths",
       "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd", 400},
      {"bad content length", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3x\r\n\r\nabc", 400},
      {"bare LF in value", "GET / HTTP/1.1\r\nHost: x\r\nX-A: a\nb\r\n\r\n", 400},
      {"bare CR in value", "GET / HTTP/1.1\r\nHost: x\r\nX-A: a\rb\r\n\r\n", 400},
      {"NUL in value", std::string("GET / HTTP/1.1\r\nHost: x\r\nX-A: a\0b\r\n\r\n", 38), 400},
      {"space before colon", "GET / HTTP/1.1\r\nHost: x\r\nX-A : b\r\n\r\n", 400},
      {"missing Host", "GET / HTTP/1.1\r\nX-A: b\r\n\r\n", 400},
      {"two Hosts", "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400},
      {"invalid Host", "GET / HTTP/1.1\r\nHost: a b/c\r\n\r\n", 400},
      {"invalid Host port", "GET / HTTP/1.1\r\nHost: a:8x\r\n\r\n", 400},
      {"oversized head", "GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + big + "\r\n\r\n", 431},
      {"oversized body", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 2000\r\n\r\n", 413},
      {"oversized chunked body",
       "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n800\r\n" +
           std::string(2048, 'b') + "\r\n0\r\n\r\n",
       413},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    http_connection conn(port);
    conn.send_raw(c.raw);
    auto r = conn.read_response();
    EXPECT_EQ(r.status, c.status);
    EXPECT_EQ(r.header("Connection"), "close");
    EXPECT_TRUE(conn.closed_by_peer());
  }
  EXPECT_EQ(handler->calls.load(), 0);
}

TEST_F(ServerTest, ValidHostsAccepted) {
  for (const char* host : {"example.test", "example.test:8080", "127.0.0.1:1", "[::1]", "[::1]:80",
                           "xn--caf-dma.test", ""}) {
    SCOPED_TRACE(host);
    http_connection c(port);
    auto r = c.request("GET", "/", {{"Host", host}});
    EXPECT_EQ(r.status, 200u);
  }
}

TEST_F(ServerTest, StopClosesIdleSessions) {
  http_connection c(port);
  EXPECT_EQ(c.request("GET", "/a").status, 200u);
  srv->stop();
  EXPECT_TRUE(c.closed_by_peer());
  EXPECT_THROW(http_connection late(port, std::chrono::milliseconds(500));
               late.request("GET", "/"), std::runtime_error);
}

TEST(ServerReusePort, TwoWorkersShareAPort) {
  asio::io_context ioc1{1}, ioc2{1};
  auto handler = std::make_shared<echo_handler>();
  server s1(ioc1, {asio::ip::make_address("127.0.0.1"), 0}, handler, {}, 0);
  server s2(ioc2, s1.local_endpoint(), handler, {}, 1);
  EXPECT_EQ(s1.local_endpoint().port(), s2.local_endpoint().port());
  EXPECT_NE(s1.local_endpoint().port(), 0);
}

}  // namespace
}  // namespace sluice::http
