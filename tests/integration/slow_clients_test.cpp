// SPDX-License-Identifier: Apache-2.0
// Slow and greedy clients, with raw bytes on real sockets against the in-process gateway:
// the head deadline (408 for a partial head, a silent close for an empty connection), the
// keep-alive idle period, a stalled request body, the head caps (431, 414) and the
// per-worker connection cap, each with its metric. Deadlines are set short in the rules so
// every test takes well under two seconds.
// sluice-test-support: gateway_fixture redis_server upstream_server http_client scripted_upstream

#include "harness.hpp"
#include "support/scripted_upstream.hpp"

#include "sluice/observability/metrics.hpp"

#include <chrono>
#include <string>
#include <thread>
#include <vector>

namespace sluice::test {
namespace {

using namespace std::chrono_literals;
using steady = std::chrono::steady_clock;

std::string rules(const std::string& client) {
  return "client: " + client +
         "\n"
         "store: STORE\n"
         "upstreams: {api: {url: UPSTREAM_URL}}\n"
         "routes:\n"
         "  - {name: all, match: {path_prefix: /}, upstream: api}\n";
}

/// A one-worker gateway on the memory store, so that every connection meets the same caps.
struct slow_world {
  explicit slow_world(const std::string& client) : w(store_kind::memory, rules(client), 1) {}
  std::uint16_t port() const { return w.port(); }
  observability::client_counts clients() const { return w.gateway->gateway().sample().clients; }
  /// Polls until `pred(clients())` holds, at most 2 s; whether it did.
  template <class F>
  bool wait_for(F pred) const {
    return eventually([&] { return pred(clients()); }, 2s);
  }
  world w;
};

long long ms_since(steady::time_point t0) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(steady::now() - t0).count();
}

/// Whether a new connection to `port` is reset or closed by the gateway within 1 s (the
/// reset may already end the connect).
bool turned_away(std::uint16_t port) {
  try {
    auto s = raw_socket::connect(port);
    return s.closed_by_peer(1000ms);
  } catch (const std::runtime_error&) {
    return true;
  }
}

/// The status of the first response in `bytes` (0 when there is none).
unsigned status_of(const std::string& bytes) {
  if (bytes.rfind("HTTP/1.1 ", 0) != 0 || bytes.size() < 12) return 0;
  return static_cast<unsigned>(std::stoul(bytes.substr(9, 3)));
}

// A head trickled one byte at a time never completes within header_timeout: 408, then the
// connection closes, even though bytes kept arriving (the deadline is for the whole head).
TEST(slow_clients, a_trickled_head_gets_408_at_the_header_timeout) {
  slow_world sw("{header_timeout: 300ms}");
  auto s = raw_socket::connect(sw.port());
  const std::string head = "GET /v1/slow HTTP/1.1\r\nHost: x\r\nX-Trickle: 0123456789\r\n\r\n";
  const auto t0 = steady::now();
  for (std::size_t i = 0; i < head.size() && !s.readable(0ms); ++i) {
    if (!s.write(head.substr(i, 1), 500ms)) break;
    std::this_thread::sleep_for(25ms);  // the whole head would take 1.5 s
  }
  const std::string answer = s.read_to_end(3s);
  const auto took = ms_since(t0);
  EXPECT_EQ(status_of(answer), 408u) << answer;
  EXPECT_NE(answer.find("Connection: close"), std::string::npos) << answer;
  EXPECT_NE(s.last_status(), raw_socket::status::timeout) << "the connection stayed open";
  EXPECT_GE(took, 280);
  EXPECT_LT(took, scaled(std::chrono::milliseconds(2500)).count());
  EXPECT_TRUE(sw.w.upstream.requests().empty());
  EXPECT_EQ(sw.clients().header_timeouts, 1u);
}

// A connection that sends nothing is closed at the header timeout without an answer.
TEST(slow_clients, a_silent_connection_is_closed_without_an_answer) {
  slow_world sw("{header_timeout: 300ms}");
  auto s = raw_socket::connect(sw.port());
  const auto t0 = steady::now();
  const std::string answer = s.read_to_end(3s);
  const auto took = ms_since(t0);
  EXPECT_EQ(answer, "");
  EXPECT_NE(s.last_status(), raw_socket::status::timeout) << "the connection stayed open";
  EXPECT_GE(took, 280);
  EXPECT_LT(took, scaled(std::chrono::milliseconds(2500)).count());
  EXPECT_TRUE(sw.wait_for([](const auto& c) { return c.idle_closed == 1; }));
  EXPECT_EQ(sw.clients().header_timeouts, 0u);
}

// Between two requests a keep-alive connection may wait keepalive_timeout (longer than the
// header timeout), and is then closed without an answer.
TEST(slow_clients, an_idle_keep_alive_connection_is_closed_after_the_idle_period) {
  slow_world sw("{header_timeout: 200ms, keepalive_timeout: 1s}");
  http_connection c(sw.port());
  EXPECT_EQ(c.request("GET", "/v1/a").status, 200u);
  std::this_thread::sleep_for(500ms);  // past the header timeout, within the idle period
  EXPECT_EQ(c.request("GET", "/v1/b").status, 200u);
  const auto t0 = steady::now();
  EXPECT_TRUE(c.closed_by_peer(3000ms));
  const auto took = ms_since(t0);
  EXPECT_GE(took, 900);
  EXPECT_LT(took, scaled(std::chrono::milliseconds(2500)).count());
  EXPECT_TRUE(sw.wait_for([](const auto& c) { return c.idle_closed == 1 && c.open == 0; }));
}

// On a keep-alive connection the head deadline runs from the head's first byte, not from the
// start of the idle wait: a partial head sent after 500 ms of idling still gets its 300 ms.
TEST(slow_clients, a_keep_alive_head_gets_the_header_timeout_from_its_first_byte) {
  slow_world sw("{header_timeout: 300ms, keepalive_timeout: 3s}");
  auto s = raw_socket::connect(sw.port());
  ASSERT_TRUE(s.write("GET /v1/one HTTP/1.1\r\nHost: x\r\n\r\n"));
  auto first = s.read_until("\r\n\r\n", 2s);
  ASSERT_TRUE(first);
  EXPECT_EQ(status_of(*first), 200u) << *first;
  const auto cl = first->find("Content-Length: ");
  ASSERT_NE(cl, std::string::npos) << *first;
  ASSERT_TRUE(s.read_exact(std::stoul(first->substr(cl + 16)), 2s));
  std::this_thread::sleep_for(500ms);
  const auto t0 = steady::now();
  ASSERT_TRUE(s.write("GET /v1/two HTTP/1.1\r\nHost: x\r\n"));  // never finished
  const std::string answer = s.read_to_end(3s);
  const auto took = ms_since(t0);
  EXPECT_EQ(status_of(answer), 408u) << answer;
  EXPECT_GE(took, 280);
  EXPECT_LT(took, scaled(std::chrono::milliseconds(2500)).count());
  EXPECT_EQ(sw.clients().header_timeouts, 1u);
}

// A request body that stops arriving ends the request after body_timeout: 408 (no response
// byte was sent yet), the connection closes, and the gateway serves the next client.
TEST(slow_clients, a_stalled_body_ends_the_request_with_408) {
  slow_world sw("{body_timeout: 300ms}");
  auto s = raw_socket::connect(sw.port());
  const auto t0 = steady::now();
  ASSERT_TRUE(s.write("POST /v1/stall HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n" +
                      std::string(40, 'b')));
  const std::string answer = s.read_to_end(3s);
  const auto took = ms_since(t0);
  EXPECT_EQ(status_of(answer), 408u) << answer;
  EXPECT_NE(s.last_status(), raw_socket::status::timeout) << "the connection stayed open";
  EXPECT_GE(took, 280);
  EXPECT_LT(took, scaled(std::chrono::milliseconds(2500)).count());
  EXPECT_EQ(sw.clients().body_timeouts, 1u);
  EXPECT_EQ(get(sw.port(), "/v1/after").status, 200u);
}

// With body_min_rate, a body trickled just inside each body_timeout is still cut: the time
// spent waiting for it may reach body_timeout + received / rate (here 400 ms + 10 bytes per
// 100 ms received, for 10 bytes every 150 ms: about 1.2 s).
TEST(slow_clients, a_body_under_the_minimum_rate_ends_with_408) {
  slow_world sw("{body_timeout: 400ms, body_min_rate: 100/s}");
  auto s = raw_socket::connect(sw.port());
  const auto t0 = steady::now();
  ASSERT_TRUE(s.write("POST /v1/trickle HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n"));
  for (int i = 0; i < 30 && !s.readable(0ms); ++i) {  // 4.5 s at most; 15 s for the body
    if (!s.write(std::string(10, 'b'), 500ms)) break;
    std::this_thread::sleep_for(150ms);
  }
  const std::string answer = s.read_to_end(3s);
  const auto took = ms_since(t0);
  EXPECT_EQ(status_of(answer), 408u) << answer;
  EXPECT_GE(took, 900);
  EXPECT_LT(took, scaled(std::chrono::milliseconds(3500)).count());
  EXPECT_EQ(sw.clients().body_timeouts, 1u);
}

struct head_case {
  const char* name;
  std::string raw;
  unsigned status;
};

// Heads over the caps: 431 for too many fields or too many bytes, 414 for a long target
// (also when the request line alone overflows the head cap); at the caps, 200.
TEST(slow_clients, heads_over_the_caps_get_431_or_414) {
  slow_world sw("{max_headers: 10, max_header_size: 2KiB, max_uri_length: 256}");
  auto fields = [](int n) {
    std::string out = "Host: x\r\n";
    for (int i = 1; i < n; ++i) out += "X-F" + std::to_string(i) + ": v\r\n";
    return out;
  };
  const std::string at_uri_cap = "/" + std::string(255, 'u');
  const head_case cases[] = {
      {"10 fields", "GET /v1/ok HTTP/1.1\r\n" + fields(10) + "\r\n", 200},
      {"11 fields", "GET /v1/ok HTTP/1.1\r\n" + fields(11) + "\r\n", 431},
      {"3000-byte field",
       "GET /v1/ok HTTP/1.1\r\nHost: x\r\nX-Big: " + std::string(3000, 'v') + "\r\n\r\n", 431},
      {"target at the cap", "GET " + at_uri_cap + " HTTP/1.1\r\nHost: x\r\n\r\n", 200},
      {"target over the cap", "GET " + at_uri_cap + "u HTTP/1.1\r\nHost: x\r\n\r\n", 414},
      {"request line over the head cap",
       "GET /" + std::string(5000, 'u') + " HTTP/1.1\r\nHost: x\r\n\r\n", 414},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    auto s = raw_socket::connect(sw.port());
    ASSERT_TRUE(s.write(c.raw));
    if (c.status == 200) {
      auto head = s.read_until("\r\n\r\n", 2s);
      ASSERT_TRUE(head);
      EXPECT_EQ(status_of(*head), 200u) << *head;
      continue;
    }
    const std::string answer = s.read_to_end(3s);
    EXPECT_EQ(status_of(answer), c.status) << answer.substr(0, 200);
    EXPECT_NE(answer.find("Connection: close"), std::string::npos);
    EXPECT_NE(s.last_status(), raw_socket::status::timeout) << "the connection stayed open";
  }
  const auto counts = sw.clients();
  EXPECT_EQ(counts.too_large_heads, 2u);
  EXPECT_EQ(counts.too_long_uris, 2u);
  EXPECT_EQ(sw.w.upstream.requests().size(), 2u);
}

// The connection cap: with every slot taken, new connections are reset at once and counted,
// the connections already open keep being served, and a freed slot serves a new client.
TEST(slow_clients, the_connection_cap_holds_and_existing_clients_are_served) {
  slow_world sw("{max_connections: 4}");
  http_connection busy(sw.port());
  EXPECT_EQ(busy.request("GET", "/v1/before").status, 200u);
  std::vector<raw_socket> idle;
  for (int i = 0; i < 3; ++i) idle.push_back(raw_socket::connect(sw.port()));
  ASSERT_TRUE(sw.wait_for([](const auto& c) { return c.open == 4; })) << sw.clients().open;

  for (int i = 0; i < 5; ++i) EXPECT_TRUE(turned_away(sw.port())) << i;
  EXPECT_TRUE(sw.wait_for([](const auto& c) { return c.rejected == 5; })) << sw.clients().rejected;
  EXPECT_EQ(sw.clients().open, 4);
  EXPECT_EQ(sw.clients().max_connections, 4u);
  for (auto& i : idle) EXPECT_FALSE(i.closed_by_peer(0ms));  // the ones in were not touched

  EXPECT_EQ(busy.request("GET", "/v1/during").status, 200u);

  idle.front().close();  // a slot is freed
  ASSERT_TRUE(sw.wait_for([](const auto& c) { return c.open == 3; }));
  EXPECT_EQ(get(sw.port(), "/v1/new").status, 200u);

  const std::string text = observability::exposition(sw.w.gateway->gateway().sample());
  EXPECT_NE(text.find("sluice_client_connections_rejected_total 5"), std::string::npos) << text;
  EXPECT_NE(text.find("sluice_client_connections_max 4"), std::string::npos);
}

// `max_connections: auto`: every worker's connections, each with an upstream connection,
// fit in the open file limit less a reserve.
TEST(slow_clients, auto_max_connections_fits_the_file_limit) {
  EXPECT_EQ(app::auto_max_connections(1024, 2), (1024u - 80u) / 4u);
  EXPECT_EQ(app::auto_max_connections(1048576, 1), (1048576u - 72u) / 2u);
  EXPECT_EQ(app::auto_max_connections(50, 4), 1u);
  EXPECT_EQ(app::auto_max_connections(1u << 30, 1), 1'000'000u);
  EXPECT_GE(app::raise_file_limit(), 1024u);
}

}  // namespace
}  // namespace sluice::test
