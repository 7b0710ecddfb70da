// SPDX-License-Identifier: Apache-2.0
// The streaming data path: events relayed as they come (SSE), bodies larger than every buffer
// in both directions and both framings, `max_request_body`, `Expect: 100-continue` before and
// after admission, upstream misbehaviour before and after the response head, malformed client
// bodies, and pipelining with bodies. Every peer is a real socket on loopback; scripted
// upstreams send exact bytes (with pauses, resets and lies about lengths).
// sluice-test-support: gateway_fixture upstream_server http_client scripted_upstream
// sluice-test-serial

#include "support/eventually.hpp"
#include "support/gateway_fixture.hpp"
#include "support/http_client.hpp"
#include "support/scripted_upstream.hpp"
#include "support/upstream_server.hpp"

#include "sluice/config/loader.hpp"

#include <gtest/gtest.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace sluice::test {
namespace {

using namespace std::chrono_literals;
using steady = std::chrono::steady_clock;

// Routes: /s/* go to the scripted upstream, /slow/* to the same one with a 300 ms timeout,
// /dead/* to a port nothing listens on, /v1/limited to the recording upstream under a limit
// of one request a minute, everything else to the recording upstream, unlimited.
const char* const base_rules = R"(
store: {type: memory}
upstreams:
  api: {url: UPSTREAM_URL}
  scripted: {url: SCRIPTED_URL}
  slow: {url: SCRIPTED_URL, timeout: 300ms}
  dead: {url: DEAD_URL}
routes:
  - {name: scripted, match: {path_prefix: /s/}, upstream: scripted}
  - {name: slow, match: {path_prefix: /slow/}, upstream: slow}
  - {name: dead, match: {path_prefix: /dead/}, upstream: dead}
  - {name: capped, match: {path_prefix: /cap/}, upstream: scripted, max_response_body: 1KiB}
  - name: limited
    match: {path_prefix: /v1/limited}
    upstream: api
    limits: [{name: once, by: ip, rate: 1/1m, burst: 1}]
  - {name: api, match: {path_prefix: /}, upstream: api}
)";

// The same with per-route body limits (only the tests about `max_request_body` use them, so
// that the others do not depend on the field being known).
const char* const limit_rules = R"(
store: {type: memory}
upstreams:
  api: {url: UPSTREAM_URL}
  scripted: {url: SCRIPTED_URL}
  dead: {url: DEAD_URL}
routes:
  - {name: small, match: {path_prefix: /v1/small}, upstream: api, max_request_body: 64KiB}
  - {name: big, match: {path_prefix: /v1/big}, upstream: api, max_request_body: 64MiB}
  - {name: api, match: {path_prefix: /}, upstream: api}
)";

constexpr std::size_t mib = 1024 * 1024;
constexpr int sse_events = 10;

/// The 32 MiB the scripted upstream sends as a chunked download (built once, shared).
const std::string& download_bytes() {
  static const std::string bytes = random_bytes(32 * mib, 32);
  return bytes;
}

/// One request as the scripted upstream read it.
struct seen_request {
  std::size_t connection = 0;  ///< accept index of the connection it came on
  http_head head;
  std::string body;
};

/// Reads heads until a final (non-1xx) one; counts the interim ones in `interim`.
std::optional<http_head> read_final(raw_socket& s, std::chrono::milliseconds timeout,
                                    int& interim) {
  const auto deadline = steady::now() + timeout;
  for (;;) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - steady::now());
    auto head = read_head(s, left.count() > 0 ? left : 1ms);
    if (!head) return std::nullopt;
    if (head->status() / 100 != 1) return head;
    ++interim;
  }
}

/// Reads the body of a response head: chunked, Content-Length, or up to the end.
std::optional<std::string> read_response_body(raw_socket& s, const http_head& h,
                                              std::chrono::milliseconds timeout) {
  if (h.chunked()) return read_chunked_body(s, timeout);
  if (h.has("Content-Length"))
    return s.read_exact(std::stoull(h.header("Content-Length")), timeout);
  return s.read_to_end(timeout);
}

/// A whole exchange on a fresh connection: the head, the body, the number of 1xx before it.
struct answer {
  http_head head;
  std::string body;
  int interim = 0;
  unsigned status() const { return head.status(); }
};

std::optional<answer> exchange(std::uint16_t port, std::string_view raw,
                               std::chrono::milliseconds timeout = 5s) {
  auto s = raw_socket::connect(port);
  s.write(raw, timeout);  // a gateway may answer (413...) and close before all was written
  answer a;
  auto head = read_final(s, timeout, a.interim);
  if (!head) return std::nullopt;
  a.head = std::move(*head);
  auto body = read_response_body(s, a.head, timeout);
  if (!body) return std::nullopt;
  a.body = std::move(*body);
  return a;
}

/// The `detail` member of a problem+json body ("" when absent).
std::string detail_of(const std::string& body) {
  const std::string key = "\"detail\":\"";
  const auto at = body.find(key);
  if (at == std::string::npos) return {};
  const auto end = body.find('"', at + key.size());
  return body.substr(at + key.size(),
                     end == std::string::npos ? std::string::npos : end - at - key.size());
}

std::string hex(std::size_t n) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%zx", n);
  return buf;
}

class streaming : public testing::Test {
 protected:
  void start(const char* rules) {
    const std::string dead = "\"http://127.0.0.1:" + std::to_string(closed_port()) + "\"";
    gateway = std::make_unique<gateway_fixture>(substitute(rules, {{"UPSTREAM_URL", upstream.url()},
                                                                   {"SCRIPTED_URL", scripted.url()},
                                                                   {"DEAD_URL", dead}}),
                                                2);
  }

  std::uint16_t port() const { return gateway->port(); }

  std::vector<seen_request> seen() const {
    std::lock_guard lock(mutex);
    return seen_;
  }
  /// The requests the scripted upstream read for `target`.
  std::vector<seen_request> seen(const std::string& target) const {
    std::vector<seen_request> out;
    for (auto& r : seen()) {
      if (r.head.target() == target) out.push_back(r);
    }
    return out;
  }

  /// A normal request through the scripted upstream on a fresh client connection: 200 "ok".
  void expect_healthy(const std::string& after) {
    SCOPED_TRACE("a normal request after " + after);
    auto ok = exchange(port(), "GET /s/ok HTTP/1.1\r\nHost: x\r\n\r\n");
    ASSERT_TRUE(ok) << "no answer";
    EXPECT_EQ(ok->status(), 200u) << ok->body;
    EXPECT_EQ(ok->body, "ok");
  }

  /// The scripted upstream: one request after the other on each connection, by target.
  void serve(raw_socket& s, std::size_t index) {
    for (;;) {
      auto head = read_head(s, 10s);
      if (!head) return;
      const std::string target = head->target();
      if (target == "/s/expect") {
        // An upstream may send 100 on its own: the client must still see one 100 only.
        s.write("HTTP/1.1 100 Continue\r\n\r\n");
      }
      auto body = read_request_body(s, *head, 10s);
      if (!body) return;
      {
        std::lock_guard lock(mutex);
        seen_.push_back({index, *head, *body});
      }
      if (target == "/s/ok") {
        s.write("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\nok");
      } else if (target == "/s/expect") {
        const std::string text =
            "expect=" + std::string(head->has("Expect") ? "yes" : "no") + " body=" + *body;
        s.write("HTTP/1.1 200 OK\r\nContent-Length: " + std::to_string(text.size()) + "\r\n\r\n" +
                text);
      } else if (target == "/s/events") {
        s.write(
            "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
            "Transfer-Encoding: chunked\r\n\r\n");
        for (int i = 0; i < sse_events; ++i) {
          std::this_thread::sleep_for(100ms);
          const std::string event =
              "id: " + std::to_string(i) + "\ndata: event " + std::to_string(i) + "\n\n";
          {
            std::lock_guard lock(mutex);
            sse_sent[i] = steady::now();
          }
          if (!s.write(hex(event.size()) + "\r\n" + event + "\r\n")) return;
        }
        s.write("0\r\n\r\n");
      } else if (target == "/s/download") {
        s.write(
            "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n"
            "Transfer-Encoding: chunked\r\n\r\n");
        if (!s.write(chunked(download_bytes(), {65536, 1, 300000, 4093, 1 << 20, 17}), 20s)) return;
      } else if (target == "/s/garbage") {
        s.write("garbage instead of a status line\r\n\r\n");
        s.closed_by_peer(3s);
        return;
      } else if (target == "/s/close") {
        return;  // closed before any response byte
      } else if (target == "/s/reset") {
        s.reset();
        return;
      } else if (target == "/slow/hang") {
        s.closed_by_peer(3s);  // answers nothing; waits for the gateway to give up
        return;
      } else if (target == "/s/short") {
        s.write("HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n" + std::string(50, 's'));
        return;
      } else if (target == "/s/chunked-up") {
        // After the body's last chunk, nothing more may arrive before the next request.
        const bool extra = s.readable(300ms);
        s.write("HTTP/1.1 200 OK\r\nContent-Length: " + std::string(extra ? "5" : "4") +
                "\r\n\r\n" + (extra ? "extra" : "none"));
      } else if (target == "/cap/length") {
        s.write("HTTP/1.1 200 OK\r\nContent-Length: 2000\r\n\r\n" + std::string(2000, 'L'));
      } else if (target == "/cap/chunked") {
        s.write("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n");
        for (int i = 0; i < 3; ++i) {
          if (!s.write(hex(1000) + "\r\n" + std::string(1000, 'C') + "\r\n")) return;
          std::this_thread::sleep_for(50ms);
        }
        s.write("0\r\n\r\n");
      } else if (target == "/s/late-extra") {
        // A whole, valid-looking response 300 ms after the announced body, on a connection
        // left open: a pooled reuse would hand it to the next request.
        s.write("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello");
        std::this_thread::sleep_for(300ms);
        s.write("HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nPOISON");
      } else if (target == "/s/idle-close") {
        // A keep-alive response, then the upstream closes the idle connection on its own
        // (as on its keep-alive timeout), without having said so.
        s.write("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
        std::this_thread::sleep_for(200ms);
        return;
      } else if (target == "/s/conn-cl") {
        s.write("HTTP/1.1 200 OK\r\nConnection: Content-Length\r\nContent-Length: 5\r\n\r\nhello");
      } else if (target == "/s/hints") {
        s.write("HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n");
        s.write("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
      } else if (target == "/s/long") {
        // 10 bytes announced, 20 sent; the connection stays open so that a reuse would show.
        s.write("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n0123456789ABCDEFGHIJ");
      } else {
        s.write("HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n");
      }
    }
  }

  // Declaration order is teardown order reversed: the gateway stops first, then the scripted
  // upstream joins its threads (which still use the members above it).
  mutable std::mutex mutex;
  std::vector<seen_request> seen_;
  std::array<steady::time_point, sse_events> sse_sent{};
  upstream_server upstream;
  scripted_upstream scripted{[this](raw_socket& s, std::size_t i) { serve(s, i); }};
  std::unique_ptr<gateway_fixture> gateway;
};

// ---------------------------------------------------------------------------------------------
// The test peers themselves, without the gateway: what the streaming cases below measure
// through the gateway holds when the client talks to the upstream directly.

TEST_F(streaming, peers_work_without_the_gateway) {
  {
    auto s = raw_socket::connect(scripted.port());
    ASSERT_TRUE(s.write("GET /s/events HTTP/1.1\r\nHost: x\r\n\r\n"));
    auto head = read_head(s, 3s);
    ASSERT_TRUE(head);
    ASSERT_TRUE(head->chunked());
    for (int i = 0; i < sse_events; ++i) {
      auto line = s.read_until("\r\n", 3s);
      ASSERT_TRUE(line);
      auto data = s.read_exact(std::stoul(*line, nullptr, 16) + 2, 3s);
      ASSERT_TRUE(data);
      const auto now = steady::now();
      std::lock_guard lock(mutex);
      EXPECT_LT(now - sse_sent[i], 20ms) << "event " << i;
    }
  }
  {
    auto s = raw_socket::connect(scripted.port());
    ASSERT_TRUE(s.write("GET /s/download HTTP/1.1\r\nHost: x\r\n\r\n"));
    auto head = read_head(s, 3s);
    ASSERT_TRUE(head);
    std::vector<std::size_t> sizes;
    auto body = read_chunked_body(s, 20s, &sizes);
    ASSERT_TRUE(body);
    EXPECT_TRUE(*body == download_bytes());
    EXPECT_GT(sizes.size(), 50u);
  }
  {
    const std::string data = random_bytes(3 * mib + 5, 3);
    auto s = raw_socket::connect(upstream.port());
    ASSERT_TRUE(s.write("POST /x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n" +
                        chunked(data, {1, 100, 65535, 1 << 20})));
    int interim = 0;
    auto head = read_final(s, 5s, interim);
    ASSERT_TRUE(head);
    EXPECT_EQ(head->status(), 200u);
    ASSERT_EQ(upstream.request_count(), 1u);
    EXPECT_TRUE(upstream.requests().front().body == data);
  }
}

// ---------------------------------------------------------------------------------------------
// Streaming

// Ten server-sent events, 100 ms apart: each reaches the client within 50 ms of being sent.
TEST_F(streaming, sse_events_are_relayed_as_they_are_sent) {
  start(base_rules);
  auto s = raw_socket::connect(port());
  ASSERT_TRUE(s.write("GET /s/events HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\n\r\n"));
  auto head = read_head(s, 3s);
  ASSERT_TRUE(head) << "no response head";
  EXPECT_EQ(head->status(), 200u);
  EXPECT_EQ(head->header("Content-Type"), "text/event-stream");
  EXPECT_TRUE(head->chunked()) << "the upstream's chunked framing was not kept";

  std::vector<std::string> events;
  std::vector<steady::time_point> received;
  std::string decoded;
  auto scan = [&] {
    const auto now = steady::now();
    for (auto at = decoded.find("\n\n"); at != std::string::npos; at = decoded.find("\n\n")) {
      events.push_back(decoded.substr(0, at));
      received.push_back(now);
      decoded.erase(0, at + 2);
    }
  };
  if (head->chunked()) {
    while (events.size() < sse_events) {
      auto line = s.read_until("\r\n", 3s);
      if (!line) break;
      const std::size_t size = std::stoul(*line, nullptr, 16);
      if (size == 0) break;
      auto data = s.read_exact(size + 2, 3s);
      if (!data) break;
      decoded += data->substr(0, size);
      scan();
    }
  } else {  // whatever framing came, the receipt times still tell whether it was buffered
    const std::size_t length = std::stoull(head->header("Content-Length"));
    std::size_t got = 0;
    while (got < length) {
      std::string more;
      if (s.read_some(more, 3s) != raw_socket::status::ok) break;
      got += more.size();
      decoded += more;
      scan();
    }
  }
  ASSERT_EQ(events.size(), static_cast<std::size_t>(sse_events));
  std::array<steady::time_point, sse_events> sent;
  {
    std::lock_guard lock(mutex);
    sent = sse_sent;
  }
  for (int i = 0; i < sse_events; ++i) {
    EXPECT_EQ(events[i], "id: " + std::to_string(i) + "\ndata: event " + std::to_string(i));
    const auto delay = std::chrono::duration_cast<std::chrono::milliseconds>(received[i] - sent[i]);
    EXPECT_LT(delay, 50ms) << "event " << i << " arrived " << delay.count()
                           << " ms after the upstream sent it";
  }
}

// 8 MiB chunked upload in chunks of varying sizes: the upstream gets the exact bytes, chunked.
TEST_F(streaming, chunked_upload_reaches_the_upstream_exactly_and_chunked) {
  start(base_rules);
  canned_response ok;
  ok.body = "stored";
  upstream.set_response(ok);
  const std::string data = random_bytes(8 * mib, 8);
  auto s = raw_socket::connect(port());
  const bool sent =
      s.write("POST /v1/upload HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n" +
                  chunked(data, {1, 100, 4096, 65535, 1 << 20, 300000, 7, 2 << 20}),
              20s);
  EXPECT_TRUE(sent) << "the gateway stopped reading the upload";
  int interim = 0;
  auto head = read_final(s, 20s, interim);
  ASSERT_TRUE(head) << "no response";
  auto body = read_response_body(s, *head, 5s);
  EXPECT_EQ(head->status(), 200u) << (body ? *body : "");
  ASSERT_EQ(upstream.request_count(), 1u);
  const auto r = upstream.requests().front();
  EXPECT_EQ(r.body.size(), data.size());
  EXPECT_TRUE(r.body == data) << "the upstream received other bytes";
  EXPECT_EQ(r.header("Transfer-Encoding"), "chunked");
  EXPECT_FALSE(r.has("Content-Length"));
}

// Under the default limit (16 MiB): a 12 MiB Content-Length upload goes through whole.
TEST_F(streaming, content_length_upload_under_the_default_limit) {
  start(base_rules);
  canned_response ok;
  ok.body = "stored";
  upstream.set_response(ok);
  const std::string data = random_bytes(12 * mib, 12);
  auto a = exchange(port(),
                    "POST /v1/upload HTTP/1.1\r\nHost: x\r\nContent-Length: " +
                        std::to_string(data.size()) + "\r\n\r\n" + data,
                    20s);
  ASSERT_TRUE(a) << "no response";
  EXPECT_EQ(a->status(), 200u) << a->body;
  ASSERT_EQ(upstream.request_count(), 1u);
  const auto r = upstream.requests().front();
  EXPECT_EQ(r.header("Content-Length"), std::to_string(data.size()));
  EXPECT_TRUE(r.body == data) << "the upstream received other bytes (" << r.body.size() << ")";
}

// 32 MiB with Content-Length on a route with `max_request_body: 64MiB`.
TEST_F(streaming, content_length_upload_of_32_mib_under_a_route_limit) {
  start(limit_rules);
  canned_response ok;
  ok.body = "stored";
  upstream.set_response(ok);
  const std::string data = random_bytes(32 * mib, 33);
  auto a = exchange(port(),
                    "POST /v1/big/upload HTTP/1.1\r\nHost: x\r\nContent-Length: " +
                        std::to_string(data.size()) + "\r\n\r\n" + data,
                    30s);
  ASSERT_TRUE(a) << "no response";
  EXPECT_EQ(a->status(), 200u) << a->body;
  ASSERT_EQ(upstream.request_count(), 1u);
  const auto r = upstream.requests().front();
  EXPECT_EQ(r.header("Content-Length"), std::to_string(data.size()));
  EXPECT_FALSE(r.has("Transfer-Encoding"));
  EXPECT_TRUE(r.body == data) << "the upstream received other bytes (" << r.body.size() << ")";
}

// A 32 MiB chunked download reaches the client byte-identical, still chunked.
TEST_F(streaming, chunked_download_of_32_mib) {
  start(base_rules);
  auto s = raw_socket::connect(port());
  ASSERT_TRUE(s.write("GET /s/download HTTP/1.1\r\nHost: x\r\n\r\n"));
  auto head = read_head(s, 20s);
  ASSERT_TRUE(head) << "no response head";
  EXPECT_EQ(head->status(), 200u);
  EXPECT_TRUE(head->chunked()) << "the upstream's chunked framing was not kept";
  EXPECT_FALSE(head->has("Content-Length"));
  auto body = read_response_body(s, *head, 20s);
  ASSERT_TRUE(body) << "the body did not arrive whole";
  EXPECT_EQ(body->size(), download_bytes().size());
  EXPECT_TRUE(*body == download_bytes()) << "the client received other bytes";
}

// A 32 MiB Content-Length download reaches the client byte-identical, same length.
TEST_F(streaming, content_length_download_of_32_mib) {
  start(base_rules);
  const std::string data = random_bytes(32 * mib, 34);
  canned_response big;
  big.body = data;
  upstream.set_response(big);
  auto a = exchange(port(), "GET /v1/download HTTP/1.1\r\nHost: x\r\n\r\n", 20s);
  ASSERT_TRUE(a) << "no response";
  EXPECT_EQ(a->status(), 200u);
  EXPECT_EQ(a->head.header("Content-Length"), std::to_string(data.size()));
  EXPECT_FALSE(a->head.chunked());
  EXPECT_TRUE(a->body == data) << "the client received other bytes (" << a->body.size() << ")";
}

// ---------------------------------------------------------------------------------------------
// max_request_body

// A declared Content-Length over the route's limit: 413 with no 100, no body byte read, and
// the upstream sees nothing.
TEST_F(streaming, declared_length_over_the_route_limit_is_413_before_the_body) {
  start(limit_rules);
  auto s = raw_socket::connect(port());
  ASSERT_TRUE(
      s.write("POST /v1/small HTTP/1.1\r\nHost: x\r\nContent-Length: 1048576\r\n"
              "Expect: 100-continue\r\n\r\n"));
  int interim = 0;
  auto head = read_final(s, 2s, interim);
  ASSERT_TRUE(head) << "no answer to the head alone";
  EXPECT_EQ(head->status(), 413u);
  EXPECT_EQ(interim, 0) << "a 100 Continue came before the 413";
  EXPECT_EQ(upstream.request_count(), 0u);
  EXPECT_EQ(upstream.accepts(), 0u);
}

// The same under the default limit of 16 MiB (no `max_request_body` on the route).
TEST_F(streaming, declared_length_over_the_default_limit_is_413_before_the_body) {
  start(base_rules);
  auto s = raw_socket::connect(port());
  ASSERT_TRUE(s.write("POST /v1/upload HTTP/1.1\r\nHost: x\r\nContent-Length: " +
                      std::to_string(17 * mib) + "\r\nExpect: 100-continue\r\n\r\n"));
  int interim = 0;
  auto head = read_final(s, 2s, interim);
  ASSERT_TRUE(head) << "no answer to the head alone";
  EXPECT_EQ(head->status(), 413u);
  EXPECT_EQ(interim, 0) << "a 100 Continue came before the 413";
  EXPECT_EQ(upstream.request_count(), 0u);
  EXPECT_EQ(upstream.accepts(), 0u);
}

// A chunked body that grows over the limit: 413, then the connection is closed.
TEST_F(streaming, chunked_body_growing_over_the_limit_is_413_and_closes) {
  start(limit_rules);
  auto s = raw_socket::connect(port());
  ASSERT_TRUE(s.write("POST /v1/small HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"));
  const std::string chunk = hex(16 * 1024) + "\r\n" + std::string(16 * 1024, 'g') + "\r\n";
  // Writes stop once the answer has come (loopback buffers absorb a few MiB, so past the
  // limit each chunk waits a little for it), and at 2 MiB in any case.
  std::size_t sent = 0;
  while (sent < 2 * mib && !s.readable(sent > 64 * 1024 ? 5ms : 0ms)) {
    if (!s.write(chunk, 2s)) break;
    sent += 16 * 1024;
  }
  int interim = 0;
  auto head = read_final(s, 3s, interim);
  ASSERT_TRUE(head) << "no answer after " << sent << " body bytes";
  EXPECT_EQ(head->status(), 413u);
  EXPECT_EQ(upstream.request_count(), 0u) << "the upstream got the request whole";
  EXPECT_TRUE(s.closed_by_peer(3s)) << "the connection stayed open after the 413";
}

// A rules file with a size that does not parse is refused, naming the field; valid sizes load.
TEST(streaming_config, max_request_body_sizes) {
  auto rules = [](const std::string& size) {
    return "upstreams: {api: {url: \"http://127.0.0.1:8081\"}}\n"
           "routes:\n"
           "  - name: r\n"
           "    match: {path_prefix: /}\n"
           "    upstream: api\n"
           "    max_request_body: " +
           size + "\n";
  };
  for (const std::string size : {"100", "12B", "12KB", "1MiB", "64MiB", "2GB", "unlimited"}) {
    const auto r = config::load_string(rules(size), "rules.yaml");
    std::string all;
    for (const auto& d : r.diagnostics) all += d.to_string() + "\n";
    EXPECT_TRUE(r.ok()) << "max_request_body: " << size << " was refused:\n" << all;
  }
  const auto bad = config::load_string(rules("12XB"), "rules.yaml");
  EXPECT_FALSE(bad.ok());
  ASSERT_FALSE(bad.diagnostics.empty());
  bool named = false;
  for (const auto& d : bad.diagnostics) {
    const auto text = d.to_string();
    named = named || text.find("max_request_body") != std::string::npos;
    EXPECT_EQ(text.find("unknown key"), std::string::npos) << text;
  }
  EXPECT_TRUE(named) << bad.diagnostics.front().to_string();
}

// ---------------------------------------------------------------------------------------------
// Expect: 100-continue

// Admitted: exactly one 100 (even when the upstream sends its own), then the 200; the upstream
// got the body once and no Expect field.
TEST_F(streaming, expect_continue_admitted_gets_one_100_then_the_answer) {
  start(base_rules);
  auto s = raw_socket::connect(port());
  ASSERT_TRUE(
      s.write("POST /s/expect HTTP/1.1\r\nHost: x\r\nContent-Length: 11\r\n"
              "Expect: 100-continue\r\n\r\n"));
  auto first = read_head(s, 2s);
  ASSERT_TRUE(first) << "no 100 Continue to the head alone";
  EXPECT_EQ(first->status(), 100u);
  ASSERT_TRUE(s.write("hello world"));
  int interim = 0;
  auto head = read_final(s, 3s, interim);
  ASSERT_TRUE(head) << "no final response";
  EXPECT_EQ(interim, 0) << "a second 100 Continue was relayed";
  EXPECT_EQ(head->status(), 200u);
  auto body = read_response_body(s, *head, 2s);
  ASSERT_TRUE(body);
  EXPECT_EQ(*body, "expect=no body=hello world");
  // The connection carries on, with no stray interim response in front of the next answer.
  ASSERT_TRUE(s.write("GET /s/ok HTTP/1.1\r\nHost: x\r\n\r\n"));
  auto next = read_head(s, 2s);
  ASSERT_TRUE(next);
  EXPECT_EQ(next->status(), 200u);
  EXPECT_EQ(seen("/s/expect").size(), 1u);
}

// Refused (429): no 100 before it; the body sent anyway is never parsed as a request.
TEST_F(streaming, expect_continue_refused_gets_no_100_and_the_body_is_not_a_request) {
  start(base_rules);
  auto first = exchange(port(), "GET /v1/limited HTTP/1.1\r\nHost: x\r\n\r\n");
  ASSERT_TRUE(first);
  ASSERT_EQ(first->status(), 200u);

  const std::string smuggled = "GET /v1/smuggled HTTP/1.1\r\nHost: x\r\n\r\n";
  auto s = raw_socket::connect(port());
  ASSERT_TRUE(s.write("POST /v1/limited HTTP/1.1\r\nHost: x\r\nContent-Length: " +
                      std::to_string(smuggled.size()) + "\r\nExpect: 100-continue\r\n\r\n"));
  int interim = 0;
  auto head = read_final(s, 1500ms, interim);
  EXPECT_EQ(interim, 0) << "a 100 Continue came for a refused request";
  bool body_sent = false;
  if (!head) {
    ADD_FAILURE() << "no final response before the body was sent";
    body_sent = s.write(smuggled);
    head = read_final(s, 3s, interim);
  }
  ASSERT_TRUE(head) << "no final response at all";
  EXPECT_EQ(head->status(), 429u);
  auto body = read_response_body(s, *head, 2s);
  ASSERT_TRUE(body);
  const bool announced_close = head->header("Connection") == "close";

  if (!body_sent) s.write(smuggled);  // the client sends the body anyway
  // Either the connection is closed, or the next request on it gets its own answer.
  if (s.write("GET /v1/real HTTP/1.1\r\nHost: x\r\n\r\n")) {
    auto next = read_head(s, 2s);
    if (next) {
      EXPECT_FALSE(announced_close) << "the 429 said Connection: close, yet an answer followed";
      EXPECT_EQ(next->status(), 200u);
      auto echo = read_response_body(s, *next, 2s);
      ASSERT_TRUE(echo);
      EXPECT_NE(echo->find("\"target\":\"/v1/real\""), std::string::npos)
          << "the answer on the connection is not the real request's: " << *echo;
    } else {
      EXPECT_NE(s.last_status(), raw_socket::status::timeout)
          << "the connection neither answered the next request nor closed";
    }
  }
  std::this_thread::sleep_for(200ms);
  for (const auto& r : upstream.requests()) {
    EXPECT_NE(r.target, "/v1/smuggled")
        << "the refused request's body reached the upstream as a request";
  }
}

// ---------------------------------------------------------------------------------------------
// Upstream misbehaviour

TEST_F(streaming, upstream_garbage_status_line_is_502_malformed) {
  start(base_rules);
  auto a = exchange(port(), "GET /s/garbage HTTP/1.1\r\nHost: x\r\n\r\n");
  ASSERT_TRUE(a);
  EXPECT_EQ(a->status(), 502u);
  EXPECT_EQ(a->head.header("Content-Type"), "application/problem+json");
  EXPECT_NE(detail_of(a->body).find("malformed"), std::string::npos) << a->body;
  expect_healthy("a garbage status line");
}

TEST_F(streaming, upstream_closing_before_any_byte_is_502_closed) {
  start(base_rules);
  auto a = exchange(port(), "GET /s/close HTTP/1.1\r\nHost: x\r\n\r\n");
  ASSERT_TRUE(a);
  EXPECT_EQ(a->status(), 502u);
  EXPECT_EQ(a->head.header("Content-Type"), "application/problem+json");
  EXPECT_NE(detail_of(a->body).find("closed"), std::string::npos) << a->body;
  expect_healthy("an upstream close");
}

TEST_F(streaming, upstream_reset_before_the_head_is_502) {
  start(base_rules);
  auto a = exchange(port(), "GET /s/reset HTTP/1.1\r\nHost: x\r\n\r\n");
  ASSERT_TRUE(a);
  EXPECT_EQ(a->status(), 502u);
  EXPECT_EQ(a->head.header("Content-Type"), "application/problem+json");
  EXPECT_NE(detail_of(a->body).find("closed"), std::string::npos) << a->body;
  expect_healthy("an upstream reset");
}

TEST_F(streaming, hung_upstream_is_504_in_time) {
  start(base_rules);
  const auto t0 = steady::now();
  auto a = exchange(port(), "GET /slow/hang HTTP/1.1\r\nHost: x\r\n\r\n", 3s);
  const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(steady::now() - t0);
  ASSERT_TRUE(a) << "no answer within 3 s";
  EXPECT_EQ(a->status(), 504u);
  EXPECT_NE(detail_of(a->body).find("in time"), std::string::npos) << a->body;
  EXPECT_GE(took, 250ms);
  EXPECT_LT(took, scaled(1000ms));
  expect_healthy("a hung upstream");
}

// After the head: a body shorter than its Content-Length ends the client connection early.
TEST_F(streaming, upstream_short_body_after_the_head_truncates_and_closes) {
  start(base_rules);
  auto s = raw_socket::connect(port());
  ASSERT_TRUE(s.write("GET /s/short HTTP/1.1\r\nHost: x\r\n\r\n"));
  auto head = read_head(s, 3s);
  ASSERT_TRUE(head) << "no response head";
  EXPECT_EQ(head->status(), 200u) << "the head was not relayed before the body ended";
  EXPECT_EQ(head->header("Content-Length"), "100");
  const std::string rest = s.read_to_end(3s);
  EXPECT_NE(s.last_status(), raw_socket::status::timeout) << "the connection stayed open";
  EXPECT_LT(rest.size(), 100u);
  if (head->status() == 200u) {
    EXPECT_EQ(rest, std::string(50, 's'));
  }
  expect_healthy("a short upstream body");
}

// After the head: a body longer than its Content-Length; the client gets exactly the
// announced bytes and the upstream connection is not reused.
TEST_F(streaming, upstream_body_longer_than_its_length_is_cut_and_not_reused) {
  start(base_rules);
  auto s = raw_socket::connect(port());
  ASSERT_TRUE(s.write("GET /s/long HTTP/1.1\r\nHost: x\r\n\r\n"));
  auto head = read_head(s, 3s);
  ASSERT_TRUE(head) << "no response head";
  EXPECT_EQ(head->status(), 200u);
  EXPECT_EQ(head->header("Content-Length"), "10");
  auto body = s.read_exact(10, 2s);
  ASSERT_TRUE(body);
  EXPECT_EQ(*body, "0123456789");
  // Nothing more: the connection ends or stays silent, never extra bytes.
  std::string extra;
  s.read_some(extra, 300ms);
  EXPECT_EQ(extra, "") << "bytes past the Content-Length reached the client";
  s.close();

  const auto accepts_before = scripted.accepts();
  for (int i = 0; i < 4; ++i) expect_healthy("a body longer than its length");
  const auto long_requests = seen("/s/long");
  ASSERT_EQ(long_requests.size(), 1u);
  for (const auto& r : seen("/s/ok")) {
    EXPECT_NE(r.connection, long_requests.front().connection)
        << "the connection that sent extra bytes was reused";
  }
  EXPECT_GT(scripted.accepts(), accepts_before);
}

// `max_response_body` (docs/operating.md): a declared length over it is 502 before any byte; a
// chunked body that grows past it closes the client connection after the head, short of the body.
TEST_F(streaming, response_over_max_response_body) {
  start(base_rules);
  auto a = exchange(port(), "GET /cap/length HTTP/1.1\r\nHost: x\r\n\r\n");
  ASSERT_TRUE(a);
  EXPECT_EQ(a->status(), 502u);
  EXPECT_NE(detail_of(a->body).find("max_response_body"), std::string::npos) << a->body;

  auto s = raw_socket::connect(port());
  ASSERT_TRUE(s.write("GET /cap/chunked HTTP/1.1\r\nHost: x\r\n\r\n"));
  auto head = read_head(s, 3s);
  ASSERT_TRUE(head);
  EXPECT_EQ(head->status(), 200u);
  const std::string rest = s.read_to_end(3s);  // the connection closes
  EXPECT_LT(rest.size(), 3000u) << "the whole body passed the limit";
  EXPECT_EQ(rest.find("0\r\n\r\n"), std::string::npos) << "a last chunk was forged";
  expect_healthy("a response over max_response_body");
}

// A refusal whose declared body is at most 64 KiB reads and drops the body and keeps the
// connection (docs/operating.md): the next request on it is answered, and the body never is one.
TEST_F(streaming, refused_short_body_is_dropped_and_the_connection_kept) {
  start(base_rules);
  ASSERT_TRUE(exchange(port(), "GET /v1/limited HTTP/1.1\r\nHost: x\r\n\r\n"));  // spends it
  const std::string body = "GET /v1/smuggled HTTP/1.1\r\nHost: x\r\n\r\n";
  auto s = raw_socket::connect(port());
  ASSERT_TRUE(s.write(
      "POST /v1/limited HTTP/1.1\r\nHost: x\r\nContent-Length: " + std::to_string(body.size()) +
      "\r\n\r\n" + body + "GET /v1/after HTTP/1.1\r\nHost: x\r\n\r\n"));
  auto refused = read_head(s, 3s);
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->status(), 429u);
  EXPECT_NE(refused->header("Connection"), "close");
  ASSERT_TRUE(read_response_body(s, *refused, 3s));
  auto next = read_head(s, 3s);
  ASSERT_TRUE(next) << "the connection was not kept";
  EXPECT_EQ(next->status(), 200u);
  for (const auto& r : upstream.requests()) EXPECT_NE(r.target, "/v1/smuggled");
}

// A chunked upload reaches the upstream with one last chunk, however the client's chunks and
// its terminator arrive (together, or the terminator later, alone).
TEST_F(streaming, chunked_upload_ends_with_one_last_chunk) {
  start(base_rules);
  {
    auto a = exchange(port(),
                      "POST /s/chunked-up HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                      "a\r\nabcdefghij\r\n0\r\n\r\n");
    ASSERT_TRUE(a);
    EXPECT_EQ(a->body, "none") << "bytes after the last chunk reached the upstream";
  }
  auto s = raw_socket::connect(port());
  ASSERT_TRUE(s.write(
      "POST /s/chunked-up HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n"));
  std::this_thread::sleep_for(200ms);
  ASSERT_TRUE(s.write("0\r\n\r\n"));
  auto head = read_head(s, 3s);
  ASSERT_TRUE(head);
  auto body = read_response_body(s, *head, 3s);
  ASSERT_TRUE(body);
  EXPECT_EQ(*body, "none") << "bytes after the last chunk reached the upstream";
  const auto got = seen("/s/chunked-up");
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].body, "abcdefghij");
  EXPECT_EQ(got[1].body, "abc");
}

// Bytes an upstream sends after the announced body, even later, never reach another request:
// every pooled connection is peeked at before reuse.
TEST_F(streaming, late_bytes_after_a_response_poison_no_later_request) {
  start(base_rules);
  auto first = exchange(port(), "GET /s/late-extra HTTP/1.1\r\nHost: x\r\n\r\n");
  ASSERT_TRUE(first);
  EXPECT_EQ(first->body, "hello");
  // The extra response has arrived on the idle connection, and the pool dropped it.
  EXPECT_EVENTUALLY(3s, gateway->gateway().sample().upstream.idle_stray >= 1u);
  for (int i = 0; i < 6; ++i) {
    auto ok = exchange(port(), "GET /s/ok HTTP/1.1\r\nHost: x\r\n\r\n");
    ASSERT_TRUE(ok);
    EXPECT_EQ(ok->body, "ok") << "request " << i << " got another response's bytes";
  }
}

// An upstream that closes an idle pooled connection is noticed before the connection is
// reused: a POST after it (never re-sent on a new connection: not idempotent) is answered.
TEST_F(streaming, upstream_closing_an_idle_connection_fails_no_request) {
  start(base_rules);
  for (int round = 0; round < 3; ++round) {
    const auto closed_before = gateway->gateway().sample().upstream.idle_closed;
    auto first = exchange(port(), "GET /s/idle-close HTTP/1.1\r\nHost: x\r\n\r\n");
    ASSERT_TRUE(first);
    EXPECT_EQ(first->body, "ok");
    // The upstream has closed it, and the pool dropped it.
    EXPECT_EVENTUALLY(3s, gateway->gateway().sample().upstream.idle_closed > closed_before);
    auto post = exchange(port(), "POST /s/ok HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc");
    ASSERT_TRUE(post);
    EXPECT_EQ(post->status(), 200u) << "round " << round << ": " << post->body;
    EXPECT_EQ(post->body, "ok");
  }
}

// `Connection: Content-Length` never strips a message's length, in either direction (a body
// read as a second request would skip routing and limits, and desynchronise the pool).
TEST_F(streaming, connection_naming_content_length_keeps_the_framing) {
  start(base_rules);
  const std::string smuggled = "GET /v1/smuggled HTTP/1.1\r\nHost: internal\r\n\r\n";
  auto a = exchange(port(),
                    "POST /v1/posted HTTP/1.1\r\nHost: x\r\nConnection: Content-Length\r\n"
                    "Content-Length: " +
                        std::to_string(smuggled.size()) + "\r\n\r\n" + smuggled);
  ASSERT_TRUE(a);
  EXPECT_EQ(a->status(), 200u);
  const auto got = upstream.requests();
  ASSERT_EQ(got.size(), 1u) << "the body reached the upstream as a request of its own";
  EXPECT_EQ(got[0].target, "/v1/posted");
  EXPECT_EQ(got[0].header("Content-Length"), std::to_string(smuggled.size()));
  EXPECT_EQ(got[0].body, smuggled);

  auto b = exchange(port(), "GET /s/conn-cl HTTP/1.1\r\nHost: x\r\n\r\n");
  ASSERT_TRUE(b);
  EXPECT_EQ(b->head.header("Content-Length"), "5");
  EXPECT_EQ(b->body, "hello");
}

// 1xx other than 100 are relayed as sent (RFC 9110 §15.2; 103 is RFC 8297).
TEST_F(streaming, early_hints_are_relayed) {
  start(base_rules);
  auto s = raw_socket::connect(port());
  ASSERT_TRUE(s.write("GET /s/hints HTTP/1.1\r\nHost: x\r\n\r\n"));
  auto hints = read_head(s, 3s);
  ASSERT_TRUE(hints);
  EXPECT_EQ(hints->status(), 103u);
  EXPECT_EQ(hints->header("Link"), "</style.css>; rel=preload");
  auto final_head = read_head(s, 3s);
  ASSERT_TRUE(final_head);
  EXPECT_EQ(final_head->status(), 200u);
}

TEST_F(streaming, upstream_connect_refused_is_502_could_not_be_reached) {
  start(base_rules);
  auto a = exchange(port(), "GET /dead/x HTTP/1.1\r\nHost: x\r\n\r\n");
  ASSERT_TRUE(a);
  EXPECT_EQ(a->status(), 502u);
  EXPECT_EQ(a->head.header("Content-Type"), "application/problem+json");
  EXPECT_NE(detail_of(a->body).find("could not be reached"), std::string::npos) << a->body;
  expect_healthy("an unreachable upstream");
}

// ---------------------------------------------------------------------------------------------
// Malformed client bodies

TEST_F(streaming, malformed_chunk_size_is_400_and_closes) {
  start(base_rules);
  auto s = raw_socket::connect(port());
  ASSERT_TRUE(
      s.write("POST /v1/chunky HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
              "zz\r\nhello\r\n0\r\n\r\n"));
  int interim = 0;
  auto head = read_final(s, 3s, interim);
  ASSERT_TRUE(head) << "no answer";
  EXPECT_EQ(head->status(), 400u);
  EXPECT_TRUE(s.closed_by_peer(3s)) << "the connection stayed open after the 400";
  for (const auto& r : upstream.requests()) EXPECT_NE(r.target, "/v1/chunky");
  auto after = exchange(port(), "GET /v1/after HTTP/1.1\r\nHost: x\r\n\r\n");
  ASSERT_TRUE(after);
  EXPECT_EQ(after->status(), 200u);
}

// A body shorter than its Content-Length, then the client closes: no crash, no request
// reaches the upstream whole, and the next connection is served.
TEST_F(streaming, client_closing_mid_body_leaves_the_gateway_serving) {
  start(base_rules);
  {
    auto s = raw_socket::connect(port());
    ASSERT_TRUE(s.write("POST /v1/partial HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n" +
                        std::string(50, 'p')));
    std::this_thread::sleep_for(100ms);
  }  // closed here
  std::this_thread::sleep_for(200ms);
  for (int i = 0; i < 3; ++i) {
    auto after = exchange(port(), "GET /v1/after HTTP/1.1\r\nHost: x\r\n\r\n");
    ASSERT_TRUE(after) << "no answer after a client left mid-body";
    EXPECT_EQ(after->status(), 200u);
  }
  for (const auto& r : upstream.requests()) EXPECT_NE(r.target, "/v1/partial");
}

// A client that stops mid-body and stays silent: its request ends after `client_timeout`
// (408 while no response has started, then the connection closes); the upstream's
// connection, which got part of a request, is not reused.
TEST_F(streaming, client_silent_mid_body_ends_after_the_read_timeout) {
  start((std::string("client_timeout: 400ms\n") + base_rules).c_str());
  auto s = raw_socket::connect(port());
  const auto began = std::chrono::steady_clock::now();
  ASSERT_TRUE(s.write("POST /v1/silent HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n" +
                      std::string(50, 'p')));
  const std::string answer = s.read_to_end(3s);
  const auto took = std::chrono::steady_clock::now() - began;
  EXPECT_EQ(answer.rfind("HTTP/1.1 408", 0), 0u) << answer;
  EXPECT_GE(took, 350ms);
  EXPECT_LT(took, scaled(2s));
  auto after = exchange(port(), "GET /v1/after HTTP/1.1\r\nHost: x\r\n\r\n");
  ASSERT_TRUE(after);
  EXPECT_EQ(after->status(), 200u);
}

// ---------------------------------------------------------------------------------------------
// Pipelining with bodies

/// Reads one answer per target from `c`: each a 200 from the echo upstream for that target,
/// in this order.
void expect_answers_in_order(http_connection& c, std::initializer_list<const char*> targets) {
  for (const auto* target : targets) {
    auto r = c.read_response();
    EXPECT_EQ(r.status, 200u) << target;
    EXPECT_NE(r.body.find(std::string("\"target\":\"") + target + "\""), std::string::npos)
        << "answer out of order, expected " << target;
  }
}

TEST_F(streaming, pipelined_posts_with_bodies_are_answered_in_order) {
  start(base_rules);
  const std::string third(300 * 1024, 'c');
  http_connection c(port());
  c.send_raw(
      "POST /v1/p1 HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nalpha-body"
      "POST /v1/p2 HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
      "6\r\nbravo-\r\n4\r\nbody\r\n0\r\n\r\n"
      "POST /v1/p3 HTTP/1.1\r\nHost: x\r\nContent-Length: " +
      std::to_string(third.size()) + "\r\n\r\n" + third);
  expect_answers_in_order(c, {"/v1/p1", "/v1/p2", "/v1/p3"});
  const auto got = upstream.requests();
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[0].target, "/v1/p1");
  EXPECT_EQ(got[0].body, "alpha-body");
  EXPECT_EQ(got[1].target, "/v1/p2");
  EXPECT_EQ(got[1].body, "bravo-body");
  EXPECT_EQ(got[2].target, "/v1/p3");
  EXPECT_TRUE(got[2].body == third) << "third body: " << got[2].body.size() << " bytes";
}

// Empty lines before a request line are ignored (RFC 9112 §2.2), as nginx and HAProxy do: a
// client that sends CRLF after a body gets its next request answered, not a 400.
TEST_F(streaming, empty_lines_between_pipelined_requests_are_ignored) {
  start(base_rules);
  http_connection c(port());
  c.send_raw(
      "\r\nGET /v1/e1 HTTP/1.1\r\nHost: x\r\n\r\n"
      "\r\n\r\nPOST /v1/e2 HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n\r\nbody\r\n"
      "\nGET /v1/e3 HTTP/1.1\r\nHost: x\r\n\r\n");
  expect_answers_in_order(c, {"/v1/e1", "/v1/e2", "/v1/e3"});
  const auto got = upstream.requests();
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[1].body, "body");
  // A CRLF split between two reads: the CR alone is held until its LF arrives.
  c.send_raw("\r");
  std::this_thread::sleep_for(100ms);
  c.send_raw("\nGET /v1/e4 HTTP/1.1\r\nHost: x\r\n\r\n");
  expect_answers_in_order(c, {"/v1/e4"});
}

}  // namespace
}  // namespace sluice::test
