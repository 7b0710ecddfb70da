// SPDX-License-Identifier: Apache-2.0
// sluice-test-support: gateway_fixture redis_server upstream_server http_client
// CORS through real sockets (issue 12, item 2): preflights are answered by the gateway, never
// authenticated and charged only to `preflight` limits (by default by ip and global); every
// answer the gateway makes itself (429, 401, 404) and every relayed response carries the
// fields a browser needs to read it (Fetch standard §3.2.3), with the rate-limit fields
// exposed. Requests are raw bytes; the store is the memory store and a real redis-server.

#include "harness.hpp"
#include "support/child_process.hpp"
#include "support/temp_dir.hpp"

#include "sluice/http/cors.hpp"

#include <chrono>
#include <filesystem>
#include <set>

namespace sluice::test {
namespace {

const char* const rules_text = R"(
store: STORE
identity: {api_key: {header: X-API-Key}, unknown_key: reject}
plans: {free: {limits: [{name: free_key, rate: 100/1h, burst: 100}]}}
api_keys: {key-a: free}
cors: {origins: ["http://app.test"]}
upstreams: {api: {url: UPSTREAM_URL}}
routes:
  - name: items
    match: {path_prefix: /v1/items}
    upstream: api
    cors:
      origins: [http://app.test, "http://*.example.test:*"]
      methods: [GET, PUT]
      headers: [X-API-Key]
      max_age: 10m
    limits:
      - {name: items_key, by: api_key, rate: 2/1h, burst: 2}
      - {name: items_ip, by: ip, rate: 3/1h, burst: 3}
  - name: readonly
    match: {path_prefix: /v1/ro, methods: [GET]}
    upstream: api
    cors: {origins: [http://app.test], headers: [X-API-Key]}
  - name: fwd
    match: {path_prefix: /v1/fwd}
    upstream: api
    cors: {origins: ["*"], preflight: forward}
    limits:
      - {name: fwd_ip, by: ip, rate: 100/1h, burst: 100}
)";

/// A raw request from `peer`: `method target`, then `lines` ("Name: value" each).
client_response raw(const world& w, const std::string& peer, const std::string& method,
                    const std::string& target, const std::vector<std::string>& lines) {
  http_connection c(w.port(), peer);
  std::string bytes = method + " " + target + " HTTP/1.1\r\nHost: api.test\r\n";
  for (const auto& l : lines) bytes += l + "\r\n";
  bytes += "\r\n";
  c.send_raw(bytes);
  return c.read_response();
}

client_response preflight(const world& w, const std::string& peer, const std::string& target,
                          const std::string& origin = "http://app.test") {
  return raw(w, peer, "OPTIONS", target,
             {"Origin: " + origin, "Access-Control-Request-Method: PUT",
              "Access-Control-Request-Headers: x-api-key"});
}

/// Every value of `name`, joined with ", " (Vary may come as several lines).
std::string all(const client_response& r, std::string_view name) {
  std::string out;
  for (const auto& [n, v] : r.headers) {
    if (n.size() == name.size() && std::equal(n.begin(), n.end(), name.begin(), [](char a, char b) {
          return std::tolower(a) == std::tolower(b);
        }))
      out += (out.empty() ? "" : ", ") + v;
  }
  return out;
}

void expect_readable(const client_response& r, const std::string& origin, const char* what) {
  SCOPED_TRACE(what);
  EXPECT_EQ(r.header("Access-Control-Allow-Origin"), origin);
  EXPECT_EQ(r.header("Access-Control-Expose-Headers"), std::string(http::rate_limit_exposed));
  EXPECT_NE(all(r, "Vary").find("Origin"), std::string::npos) << all(r, "Vary");
  EXPECT_FALSE(r.has("Access-Control-Allow-Credentials"));
}

class cors_http : public testing::TestWithParam<store_kind> {};

TEST_P(cors_http, preflights_are_answered_unauthenticated_and_charged_only_by_ip) {
  world w(GetParam(), rules_text);
  const std::string browser = "127.30.0.1", other = "127.30.0.2";
  for (int i = 0; i < 3; ++i) {
    auto r = preflight(w, browser, "/v1/items/1");
    SCOPED_TRACE(i);
    ASSERT_EQ(r.status, 204u) << r.body;  // never 401 under unknown_key: reject
    expect_readable(r, "http://app.test", "preflight");
    EXPECT_EQ(r.header("Access-Control-Allow-Methods"), "GET, PUT");
    EXPECT_EQ(r.header("Access-Control-Allow-Headers"), "X-API-Key");
    EXPECT_EQ(r.header("Access-Control-Max-Age"), "600");
    EXPECT_EQ(r.header("X-RateLimit-Limit"), "3");  // items_ip only
    EXPECT_EQ(r.header("X-RateLimit-Remaining"), std::to_string(2 - i));
  }
  auto refused = preflight(w, browser, "/v1/items/1");
  EXPECT_EQ(refused.status, 429u);
  expect_readable(refused, "http://app.test", "a refused preflight");
  EXPECT_EQ(w.upstream.request_count(), 0u) << "the gateway answers preflights itself";

  // The key's buckets were never charged: key-a still has both of items_key's tokens.
  auto get = raw(w, other, "GET", "/v1/items/1", {"Origin: http://app.test", "X-API-Key: key-a"});
  EXPECT_EQ(get.status, 200u);
  expect_readable(get, "http://app.test", "a relayed response");
  EXPECT_EQ(get.header("X-RateLimit-Limit"), "2");
  EXPECT_EQ(get.header("X-RateLimit-Remaining"), "1");

  // A preflight from an origin the policy does not allow: 204 without any Access-Control-*.
  auto evil = preflight(w, other, "/v1/items/1", "http://evil.test");
  EXPECT_EQ(evil.status, 204u);
  EXPECT_FALSE(evil.has("Access-Control-Allow-Origin"));
  EXPECT_FALSE(evil.has("Access-Control-Allow-Methods"));
  EXPECT_NE(all(evil, "Vary").find("Origin"), std::string::npos);
  // A pattern origin (any subdomain, any port).
  auto sub = preflight(w, other, "/v1/items/1", "http://a.b.example.test:5173");
  EXPECT_EQ(sub.header("Access-Control-Allow-Origin"), "http://a.b.example.test:5173");

  // A route that takes only GET is preflighted for GET (routed by the announced method); one
  // announcing another method matches no route.
  auto ro = raw(w, other, "OPTIONS", "/v1/ro",
                {"Origin: http://app.test", "Access-Control-Request-Method: GET"});
  EXPECT_EQ(ro.status, 204u);
  EXPECT_EQ(ro.header("Access-Control-Allow-Origin"), "http://app.test");
  EXPECT_EQ(raw(w, other, "OPTIONS", "/v1/ro",
                {"Origin: http://app.test", "Access-Control-Request-Method: DELETE"})
                .status,
            404u);

  // OPTIONS without Access-Control-Request-Method is no preflight: it is authenticated.
  EXPECT_EQ(raw(w, other, "OPTIONS", "/v1/items/1", {"Origin: http://app.test"}).status, 401u);

  if (GetParam() == store_kind::redis) {
    EXPECT_TRUE(w.buckets().buckets("sl:{items_key|*").size() == 1u)
        << "only key-a's bucket: no preflight reached a per-key limit";
    EXPECT_TRUE(w.buckets().buckets("sl:{free_key|*").size() == 1u);
  }
}

TEST_P(cors_http, every_answer_of_the_gateway_is_readable_by_the_page) {
  world w(GetParam(), rules_text);
  const std::vector<std::string> keyed{"Origin: http://app.test", "X-API-Key: key-a"};
  EXPECT_EQ(raw(w, "127.31.0.1", "GET", "/v1/items", keyed).status, 200u);
  EXPECT_EQ(raw(w, "127.31.0.1", "GET", "/v1/items", keyed).status, 200u);
  auto limited = raw(w, "127.31.0.1", "GET", "/v1/items", keyed);
  expect_row(limited, 429, 2, 0, -1, -1, "limited");
  expect_readable(limited, "http://app.test", "429");
  EXPECT_FALSE(limited.header("Retry-After").empty());

  auto unauthorized = raw(w, "127.31.0.2", "GET", "/v1/items", {"Origin: http://app.test"});
  EXPECT_EQ(unauthorized.status, 401u);
  expect_readable(unauthorized, "http://app.test", "401");

  auto not_found = raw(w, "127.31.0.2", "GET", "/nowhere", {"Origin: http://app.test"});
  EXPECT_EQ(not_found.status, 404u);
  expect_readable(not_found, "http://app.test", "404 (the top-level policy)");

  auto bad = raw(w, "127.31.0.2", "GET", "/v1/items",
                 {"Origin: http://app.test", "X-API-Key: a", "X-API-Key: b"});
  EXPECT_EQ(bad.status, 400u);
  expect_readable(bad, "http://app.test", "400");

  // Refused on the route's own terms (413 before any body byte): the route's policy, which
  // the top-level one would not allow for this origin.
  auto too_large =
      raw(w, "127.31.0.2", "POST", "/v1/items",
          {"Origin: http://a.example.test:8080", "X-API-Key: key-a", "Content-Length: 999999999"});
  EXPECT_EQ(too_large.status, 413u);
  expect_readable(too_large, "http://a.example.test:8080", "413");

  // Another origin reads nothing, but the answer still says it varies by Origin.
  auto other =
      raw(w, "127.31.0.1", "GET", "/v1/items", {"Origin: http://evil.test", "X-API-Key: key-a"});
  EXPECT_EQ(other.status, 429u);
  EXPECT_FALSE(other.has("Access-Control-Allow-Origin"));
  EXPECT_FALSE(other.has("Access-Control-Expose-Headers"));
  EXPECT_EQ(all(other, "Vary"), "Origin");
}

TEST_P(cors_http, forwarded_preflights_and_the_upstreams_vary) {
  world w(GetParam(), rules_text);
  canned_response upstream_cors;
  upstream_cors.headers = {{"Vary", "Accept-Encoding"},
                           {"Access-Control-Allow-Origin", "http://upstream.test"}};
  w.upstream.set_response(upstream_cors);
  auto pf = preflight(w, "127.32.0.1", "/v1/fwd/x");
  EXPECT_EQ(pf.status, 200u) << "preflight: forward relays the upstream's answer";
  ASSERT_EQ(w.upstream.request_count(), 1u);
  EXPECT_EQ(w.upstream.requests().front().method, "OPTIONS");
  EXPECT_EQ(pf.header("Access-Control-Allow-Origin"), "http://upstream.test");

  // An actual request: the gateway's fields replace the upstream's; `*` needs no Vary, and the
  // upstream's own Vary is kept.
  auto get =
      raw(w, "127.32.0.1", "GET", "/v1/fwd/x", {"Origin: http://app.test", "X-API-Key: key-a"});
  EXPECT_EQ(get.status, 200u);
  EXPECT_EQ(get.count("Access-Control-Allow-Origin"), 1u);
  EXPECT_EQ(get.header("Access-Control-Allow-Origin"), "*");
  EXPECT_EQ(all(get, "Vary"), "Accept-Encoding");

  canned_response varies;
  varies.headers = {{"Vary", "Accept-Encoding"}};
  w.upstream.set_response(varies);
  auto item =
      raw(w, "127.32.0.1", "GET", "/v1/items/x", {"Origin: http://app.test", "X-API-Key: key-a"});
  EXPECT_EQ(item.status, 200u);
  EXPECT_EQ(all(item, "Vary"), "Accept-Encoding, Origin");
}

// No CORS policy anywhere, unknown keys rejected: the backend answers CORS itself, and a
// browser's preflight (which never carries the key) must reach it, not get a 401.
const char* const no_policy_rules = R"(
store: STORE
identity: {api_key: {header: X-API-Key}, unknown_key: reject}
plans: {free: {limits: []}}
api_keys: {key-a: free}
upstreams: {api: {url: UPSTREAM_URL}}
routes:
  - name: own_cors
    match: {path_prefix: /v1/own, methods: [GET, PUT]}
    upstream: api
    limits:
      - {name: own_key, by: api_key, rate: 100/1h, burst: 100}
      - {name: own_ip, by: ip, rate: 2/1h, burst: 2}
)";

TEST_P(cors_http, without_a_policy_a_preflight_is_forwarded_unauthenticated) {
  world w(GetParam(), no_policy_rules);
  canned_response answer;
  answer.status = 204;
  answer.body = "";
  answer.headers = {{"Access-Control-Allow-Origin", "http://app.test"},
                    {"Access-Control-Allow-Methods", "PUT"}};
  w.upstream.set_response(answer);
  auto pf = preflight(w, "127.33.0.1", "/v1/own/x");
  EXPECT_EQ(pf.status, 204u) << pf.body;
  EXPECT_EQ(pf.header("Access-Control-Allow-Origin"), "http://app.test");
  EXPECT_EQ(pf.header("Access-Control-Allow-Methods"), "PUT");
  EXPECT_FALSE(pf.has("Access-Control-Expose-Headers")) << "the upstream's answer, unchanged";
  ASSERT_EQ(w.upstream.request_count(), 1u);
  const auto seen = w.upstream.requests().front();
  EXPECT_EQ(seen.method, "OPTIONS");
  EXPECT_EQ(seen.header("Origin"), "http://app.test");
  EXPECT_EQ(seen.header("Access-Control-Request-Method"), "PUT");
  EXPECT_EQ(seen.header("Access-Control-Request-Headers"), "x-api-key");

  // Routed by the announced method: the route takes GET and PUT, not OPTIONS.
  EXPECT_EQ(raw(w, "127.33.0.1", "OPTIONS", "/v1/own/x",
                {"Origin: http://app.test", "Access-Control-Request-Method: GET"})
                .status,
            204u);
  EXPECT_EQ(w.upstream.request_count(), 2u);
  // Charged to the by-ip limit (preflight: true by default), which now refuses that address.
  EXPECT_EQ(preflight(w, "127.33.0.1", "/v1/own/x").status, 429u);
  EXPECT_EQ(w.upstream.request_count(), 2u);
  // Never to the per-key limit; a keyless actual request is still a 401.
  EXPECT_EQ(raw(w, "127.33.0.2", "PUT", "/v1/own/x", {"Origin: http://app.test"}).status, 401u);
  if (GetParam() == store_kind::redis)
    EXPECT_TRUE(w.buckets().buckets("sl:{own_key|*").empty())
        << "no preflight reached the per-key limit";
}

// The same over HTTP/2 (curl, h2c with prior knowledge): the preflight reaches the upstream
// once with its Origin and Access-Control-Request-* fields, its answer is relayed, and only
// the by-ip limit is charged.
TEST_P(cors_http, without_a_policy_an_http2_preflight_is_forwarded_unauthenticated) {
  const std::string curl = "/usr/bin/curl";
  if (!std::filesystem::exists(curl)) GTEST_SKIP() << "curl is missing (scripts/setup installs it)";
  world w(GetParam(), "http2: true\n" + std::string(no_policy_rules));
  canned_response answer;
  answer.status = 204;
  answer.body = "";
  answer.headers = {{"Access-Control-Allow-Origin", "http://app.test"},
                    {"Access-Control-Allow-Methods", "PUT"}};
  w.upstream.set_response(answer);
  temp_dir dir{"cors-h2"};
  int n = 0;
  auto h2_preflight = [&] {
    const auto name = "pf-" + std::to_string(n++);
    child_process c(
        {curl, "-sS", "-i", "--max-time", "10", "--http2-prior-knowledge", "--interface",
         "127.34.0.1", "-X", "OPTIONS", "-H", "Origin: http://app.test", "-H",
         "Access-Control-Request-Method: PUT", "-H", "Access-Control-Request-Headers: x-api-key",
         "http://127.0.0.1:" + std::to_string(w.port()) + "/v1/own/x"},
        dir.path / (name + ".out"), dir.path / (name + ".err"));
    EXPECT_EQ(c.wait_exit(std::chrono::seconds(20)).value_or(-1), 0) << c.err();
    return c.out();
  };
  const auto first = h2_preflight();
  EXPECT_EQ(first.rfind("HTTP/2 204", 0), 0u) << first;
  EXPECT_NE(first.find("access-control-allow-origin: http://app.test\r\n"), std::string::npos)
      << first;
  EXPECT_NE(first.find("access-control-allow-methods: PUT\r\n"), std::string::npos) << first;
  EXPECT_EQ(first.find("access-control-expose-headers"), std::string::npos)
      << "the upstream's answer, unchanged";
  ASSERT_EQ(w.upstream.request_count(), 1u);
  const auto seen = w.upstream.requests().front();
  EXPECT_EQ(seen.method, "OPTIONS");
  EXPECT_EQ(seen.header("Origin"), "http://app.test");
  EXPECT_EQ(seen.header("Access-Control-Request-Method"), "PUT");
  EXPECT_EQ(seen.header("Access-Control-Request-Headers"), "x-api-key");

  // Charged to the by-ip limit (2/1h) only: the second passes, the third is refused there.
  EXPECT_EQ(h2_preflight().rfind("HTTP/2 204", 0), 0u);
  EXPECT_EQ(w.upstream.request_count(), 2u);
  const auto third = h2_preflight();
  EXPECT_EQ(third.rfind("HTTP/2 429", 0), 0u) << third;
  EXPECT_EQ(w.upstream.request_count(), 2u);
  if (GetParam() == store_kind::redis)
    EXPECT_TRUE(w.buckets().buckets("sl:{own_key|*").empty())
        << "no preflight reached the per-key limit";
}

INSTANTIATE_TEST_SUITE_P(stores, cors_http, testing::Values(store_kind::memory, store_kind::redis),
                         store_name);

}  // namespace
}  // namespace sluice::test
