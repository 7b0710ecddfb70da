// SPDX-License-Identifier: Apache-2.0
// The proxy path: hop-by-hop headers (case c17), key collisions (case c14), framing,
// routing, upstream errors, and the gateway's behaviour with an unreachable store.
// sluice-test-support: gateway_fixture redis_server upstream_server http_client

#include "harness.hpp"

#include <random>
#include <set>

namespace sluice::test {
namespace {

const char* const c17_rules = R"(
store: STORE
identity: {api_key: {header: X-API-Key}}
plans: {free: {limits: []}}
api_keys: {key-a: free}
upstreams: {api: {url: UPSTREAM_URL}}
routes:
  - name: items
    match: {path_prefix: /v1/items}
    upstream: api
    limits:
      - {name: items_key, by: api_key, rate: 100/1m, burst: 100}
  - name: open
    match: {path_prefix: /v1/open}
    upstream: api
)";

const char* const c17_request =
    "GET /v1/items HTTP/1.1\r\n"
    "Host: api.example.test\r\n"
    "X-API-Key: key-a\r\n"
    "Connection: keep-alive, X-Debug-Token\r\n"
    "X-Debug-Token: tok-123\r\n"
    "Keep-Alive: timeout=30\r\n"
    "TE: trailers\r\n"
    "Proxy-Authorization: Basic cGxhY2Vob2xkZXI6cGxhY2Vob2xkZXI=\r\n"
    "Proxy-Connection: keep-alive\r\n"
    "Upgrade: h2c\r\n"
    "\r\n";

class proxy : public testing::TestWithParam<store_kind> {};

// c17: connection-level headers never cross the proxy, in either direction.
TEST_P(proxy, c17_hop_by_hop_headers) {
  world w(GetParam(), c17_rules, 1);
  w.upstream.set_response(
      {200, {{"Connection", "close"}, {"Keep-Alive", "timeout=1"}}, {}, {}, false});
  http_connection c(w.port());
  c.send_raw(c17_request);
  auto r = c.read_response();
  expect_row(r, 200, 100, 99, 1, -1, "first request");
  EXPECT_FALSE(r.has("Connection") && r.header("Connection") == "close");
  EXPECT_FALSE(r.has("Keep-Alive"));
  ASSERT_EQ(w.upstream.request_count(), 1u);
  const auto seen = w.upstream.requests().front();
  for (auto name : {"Connection", "Keep-Alive", "TE", "Proxy-Authorization", "Proxy-Connection",
                    "Upgrade", "X-Debug-Token"}) {
    EXPECT_FALSE(seen.has(name)) << name << " reached the upstream";
  }
  EXPECT_EQ(seen.header("X-API-Key"), "key-a");
  EXPECT_EQ(seen.header("Host"), "api.example.test");
  EXPECT_EQ(seen.header("X-Forwarded-For"), "127.0.0.1");
  EXPECT_EQ(seen.header("Via"), "1.1 sluice");
  // The client connection stays open and the next request on it is decided too.
  auto second = c.request("GET", "/v1/items", {{"X-API-Key", "key-a"}});
  expect_row(second, 200, 100, 98, -1, -1, "second request on the same connection");
}

// c17: a client's `Connection: close` never reaches the pooled upstream connection.
TEST_P(proxy, c17_upstream_pooling_survives_client_connection_close) {
  world w(GetParam(), c17_rules, 1);
  for (int i = 0; i < 2; ++i) {
    auto r = w.send("GET", "/v1/items", {{"X-API-Key", "key-a"}, {"Connection", "close"}});
    EXPECT_EQ(r.status, 200u);
  }
  EXPECT_EQ(w.upstream.request_count(), 2u);
  EXPECT_EQ(w.upstream.accepts(), 1u);
}

// c17 framing: both Content-Length and Transfer-Encoding is 400 with no upstream call and
// no limiter work; a chunked body goes upstream with exactly one framing header.
TEST_P(proxy, c17_framing) {
  world w(GetParam(), c17_rules, 1);
  http_connection c(w.port());
  c.send_raw(
      "POST /v1/items HTTP/1.1\r\nHost: x\r\nX-API-Key: key-a\r\nContent-Length: 5\r\n"
      "Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n");
  auto bad = c.read_response();
  EXPECT_EQ(bad.status, 400u);
  EXPECT_TRUE(c.closed_by_peer());
  EXPECT_EQ(w.upstream.request_count(), 0u);
  EXPECT_EQ(w.gateway->gateway().stats().store.checks, 0u);

  http_connection c2(w.port());
  c2.send_raw(
      "POST /v1/items HTTP/1.1\r\nHost: x\r\nX-API-Key: key-a\r\nTransfer-Encoding: chunked\r\n\r\n"
      "5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n");
  auto ok = c2.read_response();
  EXPECT_EQ(ok.status, 200u);
  ASSERT_EQ(w.upstream.request_count(), 1u);
  const auto seen = w.upstream.requests().front();
  EXPECT_EQ(seen.body, "hello world");
  EXPECT_EQ(seen.count("Content-Length") + seen.count("Transfer-Encoding"), 1u);
}

// On a limited route the upstream's own rate-limit fields are replaced by the gateway's; on
// an unlimited route they pass through untouched.
TEST_P(proxy, upstream_rate_limit_fields_only_pass_on_unlimited_routes) {
  world w(GetParam(), c17_rules, 1);
  w.upstream.set_response(
      {200, {{"X-RateLimit-Remaining", "7"}, {"RateLimit", "\"up\";r=7"}}, {}, {}, false});
  auto limited = w.get("/v1/items", {{"X-API-Key", "key-a"}});
  EXPECT_EQ(limited.count("X-RateLimit-Remaining"), 1u);
  EXPECT_EQ(limited.header("X-RateLimit-Remaining"), "99");
  EXPECT_EQ(limited.header("RateLimit"), "\"items_key\";r=99;t=1");
  EXPECT_EQ(limited.header("RateLimit-Policy"), "\"items_key\";q=100;w=60");
  auto open = w.get("/v1/open");
  EXPECT_EQ(open.header("X-RateLimit-Remaining"), "7");
  EXPECT_EQ(open.header("RateLimit"), "\"up\";r=7");
}

// `headers: []` sends no rate-limit field set, yet a limited route still removes the
// upstream's own rate-limit fields, and a 429 still carries Retry-After and its problem body.
TEST_P(proxy, headers_none_sends_no_quota_fields_but_still_strips_upstream_ones) {
  std::string rules = c17_rules;
  rules = "headers: []\n" + rules;
  rules = substitute(rules, {{"rate: 100/1m, burst: 100", "rate: 1/1m, burst: 1"}});
  world w(GetParam(), rules, 1);
  w.upstream.set_response(
      {200, {{"X-RateLimit-Remaining", "7"}, {"RateLimit", "\"up\";r=7"}}, {}, {}, false});
  auto ok = w.get("/v1/items", {{"X-API-Key", "key-a"}});
  EXPECT_EQ(ok.status, 200u);
  for (auto name : {"X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset", "RateLimit",
                    "RateLimit-Policy"}) {
    EXPECT_FALSE(ok.has(name)) << name;
  }
  auto refused = w.get("/v1/items", {{"X-API-Key", "key-a"}});
  EXPECT_EQ(refused.status, 429u);
  EXPECT_EQ(refused.header("Retry-After"), "60");
  EXPECT_EQ(refused.header("Content-Type"), "application/problem+json");
  EXPECT_FALSE(refused.has("X-RateLimit-Remaining"));
  EXPECT_FALSE(refused.has("RateLimit"));
  // An unlimited route passes the upstream's fields untouched, whatever `headers:` says.
  EXPECT_EQ(w.get("/v1/open").header("X-RateLimit-Remaining"), "7");
}

INSTANTIATE_TEST_SUITE_P(stores, proxy, testing::Values(store_kind::memory, store_kind::redis),
                         store_name);

const char* const c14_rules = R"(
store: STORE
upstreams: {api: {url: UPSTREAM_URL}}
routes:
  - name: docs
    match: {path_prefix: /v1/docs}
    upstream: api
    limits:
      - name: docs
        by: "header:X-Tenant"
        rate: 1/1m
        burst: 1
  - name: archive
    match: {path_prefix: /v1/archive}
    upstream: api
    limits:
      - {name: docs_a, by: "header:X-Tenant", rate: 1/1m, burst: 1}
)";

class collisions : public testing::TestWithParam<store_kind> {};

// c14: caller values never merge buckets, never reach a key unencoded.
TEST_P(collisions, c14_key_collision) {
  world w(GetParam(), c14_rules);
  std::mt19937 rng(14);
  std::string big(8000, 'a');
  for (auto& ch : big) ch = static_cast<char>('a' + rng() % 26);
  const std::vector<std::string> values = {"a:b",   "a_b",  "a b",  "a%3Ab",          "A:B",
                                           "{a}:b", "a}b{", "ключ", "\xef\xbd\x81:b", big};
  schedule s;
  double t = 0;
  for (const auto& v : values) {
    s.at(t);
    expect_row(w.get("/v1/docs", {{"X-Tenant", v}}), 200, 1, 0, -1, -1, "first " + v.substr(0, 16));
    s.at(t + 0.1);
    expect_row(w.get("/v1/docs", {{"X-Tenant", v}}), 429, 1, 0, -1, 60,
               "second " + v.substr(0, 16));
    t += 0.2;
  }
  expect_row(w.get("/v1/archive", {{"X-Tenant", "b"}}), 200, 1, 0, -1, -1, "archive b");
  EXPECT_EQ(w.upstream.request_count(), 11u);

  // A header value with a bare CR or LF is 400 before any limiter work.
  http_connection c(w.port());
  c.send_raw("GET /v1/docs HTTP/1.1\r\nHost: x\r\nX-Tenant: a\rb\r\n\r\n");
  EXPECT_EQ(c.read_response().status, 400u);
  EXPECT_EQ(w.upstream.request_count(), 11u);

  if (GetParam() == store_kind::redis) {
    auto keys = w.redis->command({"KEYS", "*"});
    EXPECT_EQ(keys.elements.size(), 11u);
    for (const auto& k : keys.elements) {
      EXPECT_LE(k.str.size(), 128u) << k.str;
      // The only braces are the gateway's hash tag; no ':' after the prefix; printable ASCII.
      EXPECT_EQ(k.str.find('{'), 3u) << k.str;
      EXPECT_EQ(k.str.rfind('{'), 3u) << k.str;
      EXPECT_EQ(k.str.find('}'), k.str.size() - 1) << k.str;
      EXPECT_EQ(k.str.find(':', 3), std::string::npos) << k.str;
      for (unsigned char ch : k.str) EXPECT_TRUE(ch > ' ' && ch < 0x7f) << k.str;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(stores, collisions, testing::Values(store_kind::memory, store_kind::redis),
                         store_name);

const char* const routing_rules = R"(
store: {type: memory}
upstreams:
  api: {url: UPSTREAM_URL}
  dead: {url: "http://127.0.0.1:1"}
routes:
  - {name: get_only, match: {path_prefix: /v1/read, methods: [GET]}, upstream: api}
  - {name: dead, match: {path_prefix: /v1/dead}, upstream: dead}
  - {name: items, match: {path_prefix: /v1/items}, upstream: api}
)";

// Routing, one thing per test (a failure names its step): no route, a method the route does
// not take, HEAD on a GET route, the canonical path the upstream gets, paths that have none,
// and an upstream nobody listens on.
TEST(routing, no_route_is_404_problem_json) {
  world w(store_kind::memory, routing_rules);
  auto missing = w.get("/nowhere");
  EXPECT_EQ(missing.status, 404u);
  EXPECT_EQ(missing.header("Content-Type"), "application/problem+json");
}

TEST(routing, a_method_the_route_does_not_take_is_404) {
  world w(store_kind::memory, routing_rules);
  EXPECT_EQ(w.send("POST", "/v1/read").status, 404u);
}

TEST(routing, a_get_route_takes_head) {
  world w(store_kind::memory, routing_rules);
  http_connection head(w.port());
  head.send_raw("HEAD /v1/read HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(head.read_response(true).status, 200u);  // GET allows HEAD
}

// A response to HEAD has no body whatever its Content-Length (RFC 9110 §9.3.2): the pooled
// upstream connection it came on carries the next request's whole response.
TEST(routing, a_get_after_a_head_on_the_same_pooled_upstream_connection_is_whole) {
  world w(store_kind::memory, routing_rules);
  http_connection c(w.port());
  c.send_raw("HEAD /v1/read HTTP/1.1\r\nHost: x\r\n\r\n");
  const auto head = c.read_response(true);
  EXPECT_EQ(head.status, 200u);
  EXPECT_TRUE(head.body.empty());
  c.send_raw("GET /v1/read/again HTTP/1.1\r\nHost: x\r\n\r\n");
  const auto get = c.read_response();
  EXPECT_EQ(get.status, 200u);
  EXPECT_NE(get.body.find("\"target\":\"/v1/read/again\""), std::string::npos) << get.body;
  EXPECT_EQ(w.upstream.request_count(), 2u);
  EXPECT_EQ(w.upstream.accepts(), 1u) << "the GET went on the HEAD's pooled connection";
}

TEST(routing, the_upstream_receives_the_canonical_path) {
  world w(store_kind::memory, routing_rules);
  EXPECT_EQ(w.get("/v1/%69tems//a/./b/../c?q=1").status, 200u);
  ASSERT_EQ(w.upstream.request_count(), 1u);
  EXPECT_EQ(w.upstream.requests().back().target, "/v1/items/a/c?q=1");
}

TEST(routing, an_encoded_slash_is_400) {
  world w(store_kind::memory, routing_rules);
  EXPECT_EQ(w.get("/v1/items/%2F").status, 400u);
  EXPECT_EQ(w.upstream.request_count(), 0u);
}

TEST(routing, a_path_above_the_root_is_400) {
  world w(store_kind::memory, routing_rules);
  EXPECT_EQ(w.get("/v1/../../etc").status, 400u);
  EXPECT_EQ(w.upstream.request_count(), 0u);
}

TEST(routing, an_upstream_nobody_listens_on_is_502) {
  world w(store_kind::memory, routing_rules);
  auto dead = w.get("/v1/dead");
  EXPECT_EQ(dead.status, 502u);
}

// A malformed request gets 400 and the connection is closed.
TEST(routing, malformed_request_is_400_and_closes) {
  world w(store_kind::memory, routing_rules);
  http_connection c(w.port());
  c.send_raw("GET /v1/items HTTP/1.1\r\nHost x\r\n\r\n");
  EXPECT_EQ(c.read_response().status, 400u);
  EXPECT_TRUE(c.closed_by_peer());
}

const char* const store_down_rules = R"(
store: STORE
identity: {api_key: {header: X-API-Key}}
plans: {free: {limits: []}}
api_keys: {key-a: free}
upstreams: {api: {url: UPSTREAM_URL}}
routes:
  - name: items
    match: {path_prefix: /v1/items}
    upstream: api
    limits:
      - {name: items_key, by: api_key, rate: 100/1m, burst: 100}
)";

// Redis unreachable at start-up, killed mid-run and restarted: no crash, no hang; requests
// are let through (fail_open, the default) without made-up quota headers, and decisions
// come from Redis again once it is back.
TEST(store_outage, unreachable_then_killed_then_restarted) {
  world w(store_kind::redis, store_down_rules);
  {
    // A gateway pointed at a port where nothing listens.
    auto rules = substitute(store_down_rules,
                            {{"UPSTREAM_URL", w.upstream.url()},
                             {"STORE", "{type: redis, address: \"127.0.0.1:1\", timeout: 20ms}"}});
    gateway_fixture nowhere(rules);
    for (int i = 0; i < 5; ++i) {
      const auto start = std::chrono::steady_clock::now();
      auto r = get(nowhere.port(), "/v1/items", {{"X-API-Key", "key-a"}});
      EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(500));
      EXPECT_EQ(r.status, 200u);
      EXPECT_FALSE(r.has("X-RateLimit-Remaining"));
    }
    EXPECT_GE(nowhere.gateway().stats().fail_open, 5u);
  }
  // (Every worker's connection made first: on a loaded machine the first check could
  // otherwise meet a connection still being set up and fail open.)
  EXPECT_EVENTUALLY(std::chrono::seconds(5),
                    w.gateway->gateway().sample().store_connected >= 2);  // the world's 2 workers
  auto before = w.get("/v1/items", {{"X-API-Key", "key-a"}});
  EXPECT_EQ(before.header("X-RateLimit-Remaining"), "99");
  w.redis->kill();
  for (int i = 0; i < 5; ++i) {
    auto r = w.get("/v1/items", {{"X-API-Key", "key-a"}});
    EXPECT_EQ(r.status, 200u);
    EXPECT_FALSE(r.has("X-RateLimit-Remaining"));
  }
  w.redis->restart();
  // Back within a few seconds: decisions come from the store again.
  EXPECT_EVENTUALLY(std::chrono::seconds(5),
                    w.get("/v1/items", {{"X-API-Key", "key-a"}}).has("X-RateLimit-Remaining"));
}

}  // namespace
}  // namespace sluice::test
