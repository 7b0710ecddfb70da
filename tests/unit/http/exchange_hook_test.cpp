// SPDX-License-Identifier: Apache-2.0
#include "sluice/http/exchange_hook.hpp"

// sluice-test-support: upstream_server http_client redis_server

// The response-end hook: exchange_watch ends its hook exactly once (end(), or its destructor:
// not_forwarded before the relay began, aborted after), and a session relaying a forward
// verdict feeds it the upstream's head, every body byte, and how the exchange ended.

#include "sluice/http/response_head.hpp"
#include "sluice/http/server.hpp"
#include "sluice/http/upstream_pool.hpp"
#include "support/eventually.hpp"
#include "support/http_client.hpp"
#include "support/redis_server.hpp"
#include "support/upstream_server.hpp"

#include <gtest/gtest.h>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/beast/core/string.hpp>

#include <mutex>
#include <thread>

namespace sluice::http {
namespace {

namespace asio = boost::asio;
using test::http_connection;

/// What a hook saw. Shared with the test thread (the hook runs on the worker's).
struct seen {
  std::mutex m;
  unsigned head_status = 0;
  std::string head_field;  // X-Usage of the head
  std::string body;
  std::vector<std::pair<exchange_end, unsigned>> ends;
  int heads = 0;
};

class recording_hook final : public exchange_hook {
 public:
  explicit recording_hook(std::shared_ptr<seen> s) : s_(std::move(s)) {}
  void on_response_head(const response_head& head) noexcept override {
    std::lock_guard lock(s_->m);
    ++s_->heads;
    s_->head_status = head.result_int();
    for (const auto& line : head)
      if (boost::beast::iequals(line.name_string(), "X-Usage")) s_->head_field = line.value();
  }
  void on_body(std::string_view bytes) noexcept override {
    std::lock_guard lock(s_->m);
    s_->body.append(bytes);
  }
  void on_end(exchange_end end, unsigned status) noexcept override {
    std::lock_guard lock(s_->m);
    s_->ends.emplace_back(end, status);
  }

 private:
  std::shared_ptr<seen> s_;
};

TEST(exchange_watch, an_empty_watch_does_nothing) {
  exchange_watch w;
  EXPECT_FALSE(w);
  w.body("x");
  w.end(exchange_end::complete);
}

TEST(exchange_watch, ends_once_whatever_follows) {
  auto s = std::make_shared<seen>();
  {
    exchange_watch w(std::make_unique<recording_hook>(s));
    EXPECT_TRUE(w);
    w.relaying();
    w.end(exchange_end::complete);
    w.end(exchange_end::client_gone);
    EXPECT_FALSE(w);
  }
  ASSERT_EQ(s->ends.size(), 1u);
  EXPECT_EQ(s->ends[0].first, exchange_end::complete);
}

TEST(exchange_watch, destroyed_before_the_relay_is_not_forwarded_after_it_aborted) {
  auto s = std::make_shared<seen>();
  { exchange_watch w(std::make_unique<recording_hook>(s)); }
  {
    exchange_watch w(std::make_unique<recording_hook>(s));
    w.relaying();
  }
  ASSERT_EQ(s->ends.size(), 2u);
  EXPECT_EQ(s->ends[0].first, exchange_end::not_forwarded);
  EXPECT_EQ(s->ends[1].first, exchange_end::aborted);
}

TEST(exchange_watch, a_move_carries_the_hook_and_an_assignment_ends_the_old_one) {
  auto s = std::make_shared<seen>();
  exchange_watch a(std::make_unique<recording_hook>(s));
  exchange_watch b(std::move(a));
  EXPECT_FALSE(a);  // NOLINT(bugprone-use-after-move): moved-from is empty by contract
  EXPECT_TRUE(b);
  b = exchange_watch(std::make_unique<recording_hook>(s));  // the first one ends here
  ASSERT_EQ(s->ends.size(), 1u);
  EXPECT_EQ(s->ends[0].first, exchange_end::not_forwarded);
  b.end(exchange_end::upstream_failed);
  ASSERT_EQ(s->ends.size(), 2u);
  EXPECT_EQ(s->ends[1].first, exchange_end::upstream_failed);
}

/// Forwards every request to `upstream` with a recording hook on it.
class hooked_handler final : public request_handler {
 public:
  hooked_handler(std::uint16_t port, std::shared_ptr<seen> s) : s_(std::move(s)) {
    config::upstream up;
    up.host = "127.0.0.1";
    up.port = port;
    up.timeout = std::chrono::milliseconds(2000);
    up_ = std::make_shared<const config::upstream>(std::move(up));
  }
  asio::awaitable<verdict> decide(request_head& head, const request_context& ctx) override {
    verdict v;
    v.what = verdict::kind::forward;
    v.forward.upstream = up_;
    v.forward.target = std::string(head.target());
    v.forward.client_address = ctx.peer_text;
    v.forward.watch = exchange_watch(std::make_unique<recording_hook>(s_));
    co_return v;
  }

 private:
  std::shared_ptr<const config::upstream> up_;
  std::shared_ptr<seen> s_;
};

class hooked_session : public ::testing::Test {
 protected:
  void start(std::uint16_t upstream_port) {
    handler = std::make_shared<hooked_handler>(upstream_port, s);
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
  // The ends recorded, once `n` are (the end is called after the last byte is written).
  std::vector<std::pair<exchange_end, unsigned>> ends(std::size_t n) {
    (void)test::eventually(
        [&] {
          std::lock_guard lock(s->m);
          return s->ends.size() >= n;
        },
        std::chrono::milliseconds(2500));
    std::lock_guard lock(s->m);
    return s->ends;
  }

  std::shared_ptr<seen> s = std::make_shared<seen>();
  asio::io_context ioc{1};
  asio::executor_work_guard<asio::io_context::executor_type> guard{ioc.get_executor()};
  std::shared_ptr<hooked_handler> handler;
  std::unique_ptr<server> srv;
  std::uint16_t port = 0;
  std::thread thread;
};

TEST_F(hooked_session, a_complete_exchange_shows_head_body_and_end) {
  test::upstream_server upstream;
  test::canned_response canned;
  canned.status = 401;
  canned.headers = {{"X-Usage", "1234"}};
  canned.body = std::string(200'000, 'b');  // several pieces
  upstream.set_response(canned);
  start(upstream.port());
  http_connection c(port);
  c.send_raw("GET /login HTTP/1.1\r\nHost: x\r\n\r\n");
  const auto r = c.read_response();
  EXPECT_EQ(r.status, 401u);
  const auto e = ends(1);
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e[0].first, exchange_end::complete);
  EXPECT_EQ(e[0].second, 401u);
  std::lock_guard lock(s->m);
  EXPECT_EQ(s->heads, 1);
  EXPECT_EQ(s->head_status, 401u);
  EXPECT_EQ(s->head_field, "1234");
  EXPECT_EQ(s->body, *canned.body);
}

TEST_F(hooked_session, an_unreachable_upstream_ends_as_upstream_failed) {
  start(test::free_loopback_port());  // nothing listens there
  http_connection c(port);
  c.send_raw("GET / HTTP/1.1\r\nHost: x\r\n\r\n");
  const auto r = c.read_response();
  EXPECT_EQ(r.status, 502u);
  const auto e = ends(1);
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e[0].first, exchange_end::upstream_failed);
  EXPECT_EQ(e[0].second, 0u);  // no upstream head
}

TEST_F(hooked_session, a_client_gone_mid_response_ends_once) {
  test::upstream_server upstream;
  test::canned_response canned;
  canned.body = std::string(8'000'000, 'b');  // more than the socket buffers hold
  upstream.set_response(canned);
  start(upstream.port());
  {
    http_connection c(port);
    c.send_raw("GET / HTTP/1.1\r\nHost: x\r\n\r\n");
  }  // closed without reading
  const auto e = ends(1);
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e[0].first, exchange_end::client_gone);
  EXPECT_EQ(e[0].second, 200u);
}

}  // namespace
}  // namespace sluice::http
