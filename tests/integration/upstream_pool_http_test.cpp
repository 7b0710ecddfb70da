// SPDX-License-Identifier: Apache-2.0
// sluice-test-support: gateway_fixture http_client scripted_upstream
//
// Pooled upstream connections watched by the event loop, through real sockets: an upstream
// that closes idle pooled connections at random while clients keep sending GETs (no client
// sees an error, the upstream sees every request once); a pooled connection closed while
// idle leaves the pool as an event, so a POST after it goes on a fresh connection and is
// received once; a POST whose pooled connection closes after the request went out is a 502
// and is never sent twice, while a GET in its place is retried once; stray bytes on an idle
// connection drop it from the pool and the next request works.

#include "support/eventually.hpp"
#include "support/gateway_fixture.hpp"
#include "support/http_client.hpp"
#include "support/scripted_upstream.hpp"

#include "sluice/app/gateway.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace sluice::test {
namespace {

using namespace std::chrono_literals;

const char* const rules = R"(
store: {type: memory}
upstreams:
  api: {url: UPSTREAM_URL}
routes:
  - {name: api, match: {path_prefix: /}, upstream: api}
)";

/// What an upstream connection does after answering a request (decided per request).
enum class after { keep, close };

/// An upstream that answers every request 200 `ok` (keep-alive) and counts what it received
/// by `METHOD target`; `then` decides, per request, what the connection does next, and
/// `before` may replace the answer (returning false: close without answering).
class counting_upstream {
 public:
  std::function<after(std::size_t)> then = [](std::size_t) { return after::keep; };
  std::function<bool(const http_head&, raw_socket&, std::size_t)> before;
  /// Runs on the idle connection after each response (e.g. writes stray bytes).
  std::function<void(raw_socket&, std::size_t)> idle;

  counting_upstream() : server_([this](raw_socket& s, std::size_t index) { serve(s, index); }) {}

  std::string url() const { return server_.url(); }
  std::size_t accepts() const { return server_.accepts(); }
  /// Requests received as `METHOD target`.
  std::size_t received(const std::string& line) const {
    std::lock_guard lock(mutex_);
    std::size_t n = 0;
    for (const auto& r : requests_) n += r == line;
    return n;
  }
  std::size_t total() const {
    std::lock_guard lock(mutex_);
    return requests_.size();
  }

 private:
  void serve(raw_socket& s, std::size_t index) {
    for (;;) {
      auto head = read_head(s, 10s);
      if (!head) return;
      auto body = read_request_body(s, *head, 5s);
      if (!body) return;
      std::size_t n;
      {
        std::lock_guard lock(mutex_);
        requests_.push_back(head->method() + " " + head->target());
        n = requests_.size();
      }
      if (before && !before(*head, s, n)) return;
      if (!s.write("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")) return;
      if (then(n) == after::close) return;
      if (idle) idle(s, index);
    }
  }

  mutable std::mutex mutex_;
  std::vector<std::string> requests_;
  scripted_upstream server_;
};

/// The gateway's upstream pool counters, summed over workers.
http::pool_stats pool_of(gateway_fixture& gw) {
  return gw.gateway().sample().upstream;
}

/// Polls the gateway's pool counters until `ready` holds (at most ~5 s).
template <class Pred>
http::pool_stats poll_pool(gateway_fixture& gw, Pred ready) {
  auto s = pool_of(gw);
  (void)eventually([&] { return ready(s = pool_of(gw)); }, std::chrono::seconds(5));
  return s;
}

TEST(upstream_pool_http, random_idle_closes_under_load_cost_no_get_an_error) {
  counting_upstream up;
  // A third of the responses leave the connection to be closed by the upstream soon after
  // (0-2 ms later: while it is idle in the gateway's pool, or just as the next request goes
  // out on it).
  std::mutex rng_mutex;
  std::mt19937 rng(27);
  up.idle = [&](raw_socket& s, std::size_t) {
    int roll;
    {
      std::lock_guard lock(rng_mutex);
      roll = static_cast<int>(rng() % 9);
    }
    if (roll < 3) {
      std::this_thread::sleep_for(std::chrono::microseconds(roll * 1000));
      s.close();
    }
  };
  gateway_fixture gw(substitute(rules, {{"UPSTREAM_URL", up.url()}}), 1);

  constexpr int clients = 8;
  constexpr int per_client = 150;
  std::atomic<int> errors{0};
  std::vector<std::thread> threads;
  for (int c = 0; c < clients; ++c) {
    threads.emplace_back([&, c] {
      http_connection conn(gw.port());
      for (int i = 0; i < per_client; ++i) {
        const auto r = conn.request("GET", "/c" + std::to_string(c) + "/" + std::to_string(i));
        if (r.status != 200 || r.body != "ok") errors.fetch_add(1);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(errors.load(), 0);
  // Every GET reached the upstream once: the upstream never reads a request on a connection
  // it is closing, so a retried GET's first attempt was not received.
  const auto s = pool_of(gw);
  EXPECT_EQ(up.total(), std::size_t{clients * per_client})
      << "retries: " << s.retries_idempotent << " + " << s.retries_not_sent;
  EXPECT_GT(s.idle_closed, 0u);  // closes seen as events while idle
  EXPECT_EQ(s.stale_failures, 0u);
}

TEST(upstream_pool_http, post_after_an_idle_close_goes_on_a_fresh_connection_once) {
  counting_upstream up;
  gateway_fixture gw(substitute(rules, {{"UPSTREAM_URL", up.url()}}), 1);
  http_connection c(gw.port());
  // The first response closes the upstream's side once it is out: the gateway pooled the
  // connection (the response allowed keep-alive), and its outstanding read sees the close.
  up.then = [](std::size_t n) { return n == 1 ? after::close : after::keep; };
  ASSERT_EQ(c.request("GET", "/warm").status, 200u);
  const auto s =
      poll_pool(gw, [](const http::pool_stats& p) { return p.idle_closed >= 1 && p.idle == 0; });
  EXPECT_EQ(s.idle_closed, 1u);
  EXPECT_EQ(s.idle, 0u);  // dropped from the pool as an event, before any request came

  const auto r = c.request("POST", "/orders", {{"Content-Type", "text/plain"}}, "one order");
  EXPECT_EQ(r.status, 200u);
  EXPECT_EQ(up.received("POST /orders"), 1u);
  EXPECT_EQ(up.accepts(), 2u);
  const auto after_post = pool_of(gw);
  EXPECT_EQ(after_post.retries_not_sent + after_post.retries_idempotent, 0u);
  EXPECT_EQ(after_post.stale_failures, 0u);
}

TEST(upstream_pool_http, post_whose_pooled_connection_closes_after_sending_is_502_once) {
  counting_upstream up;
  // The second request on the first connection is read whole, then the connection closes
  // without an answer: the upstream may have acted on it.
  up.before = [](const http_head&, raw_socket&, std::size_t n) { return n != 2; };
  gateway_fixture gw(substitute(rules, {{"UPSTREAM_URL", up.url()}}), 1);
  http_connection c(gw.port());
  ASSERT_EQ(c.request("GET", "/warm").status, 200u);
  poll_pool(gw, [](const http::pool_stats& p) { return p.idle == 1; });

  const auto r = c.request("POST", "/pay", {{"Content-Type", "text/plain"}}, "10 EUR");
  EXPECT_EQ(r.status, 502u);
  EXPECT_NE(r.body.find("closed"), std::string::npos) << r.body;
  EXPECT_EQ(up.received("POST /pay"), 1u);  // never sent twice
  EXPECT_EQ(up.accepts(), 1u);
  auto s = pool_of(gw);
  EXPECT_EQ(s.stale_failures, 1u);
  EXPECT_EQ(s.retries_not_sent + s.retries_idempotent, 0u);

  // A GET in the same place is retried once on a fresh connection.
  up.before = [](const http_head&, raw_socket&, std::size_t n) { return n != 4; };
  http_connection c2(gw.port());
  ASSERT_EQ(c2.request("GET", "/warm2").status, 200u);  // request 3, a new connection
  poll_pool(gw, [](const http::pool_stats& p) { return p.idle == 1; });
  const auto g = c2.request("GET", "/items");  // request 4 dropped, request 5 answered
  EXPECT_EQ(g.status, 200u);
  EXPECT_EQ(up.received("GET /items"), 2u);
  s = pool_of(gw);
  EXPECT_EQ(s.retries_idempotent, 1u);
  EXPECT_EQ(s.stale_failures, 1u);
}

TEST(upstream_pool_http, stray_bytes_on_an_idle_connection_drop_it_and_the_next_request_works) {
  counting_upstream up;
  // Once the gateway has pooled the first connection, the upstream sends a response nobody
  // asked for on it.
  std::atomic<bool> pooled{false};
  up.idle = [&pooled](raw_socket& s, std::size_t index) {
    if (index != 1) return;
    (void)eventually([&pooled] { return pooled.load(); }, std::chrono::seconds(5));
    s.write("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n");
  };
  gateway_fixture gw(substitute(rules, {{"UPSTREAM_URL", up.url()}}), 1);
  http_connection c(gw.port());
  ASSERT_EQ(c.request("GET", "/first").status, 200u);
  ASSERT_EQ(poll_pool(gw, [](const http::pool_stats& p) { return p.idle == 1; }).idle, 1u);
  pooled = true;
  const auto s =
      poll_pool(gw, [](const http::pool_stats& p) { return p.idle_stray >= 1 && p.idle == 0; });
  EXPECT_EQ(s.idle_stray, 1u);
  EXPECT_EQ(s.idle, 0u);

  const auto r = c.request("GET", "/second");
  EXPECT_EQ(r.status, 200u);
  EXPECT_EQ(r.body, "ok");
  EXPECT_EQ(up.accepts(), 2u);  // on a fresh connection
  EXPECT_EQ(up.received("GET /second"), 1u);
}

}  // namespace
}  // namespace sluice::test
