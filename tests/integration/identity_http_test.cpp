// SPDX-License-Identifier: Apache-2.0
// sluice-test-support: gateway_fixture redis_server upstream_server http_client
// Identity through real HTTP: X-Forwarded-For spoofing (case c12), empty identities (c13),
// the API key as a query parameter, the API key file and the store-backed plan directory
// (issue 4).
//
// The TCP peer address is controlled by binding the test client's source address: on Linux
// the whole of 127.0.0.0/8 is loopback. The cases' addresses are mapped onto loopback ones —
// the load balancer 10.0.0.5 is 127.10.0.5 (trusted through 127.10.0.0/16), a direct client
// 203.0.113.x is 127.203.113.x — while every X-Forwarded-For value is exactly the case's.

#include "harness.hpp"

#include <fstream>
#include <set>

namespace sluice::test {
namespace {

const std::string lb = "127.10.0.5";  // the case's 10.0.0.5

client_response from(const world& w, const std::string& peer, const std::string& method,
                     const std::string& target, const header_list& headers = {}) {
  http_connection c(w.port(), peer);
  return c.request(method, target, headers);
}

/// Every bucket whose key matches `pattern` (redis only; group hashes listed by bucket).
std::set<std::string> scan(const world& w, const std::string& pattern) {
  return w.buckets().buckets(pattern);
}

std::string key(const std::string& limit, limiter::key_namespace ns, const std::string& v) {
  return limiter::bucket_key(limit, ns, v);
}

class identity_http : public testing::TestWithParam<store_kind> {};

const char* const c12_rules = R"(
store: STORE
identity: {trusted_proxies: [127.10.0.0/16, 10.0.0.0/8]}
upstreams: {api: {url: UPSTREAM_URL}}
routes:
  - name: login
    match: {path_prefix: /login, methods: [POST]}
    upstream: api
    limits:
      - {name: login_ip, by: ip, rate: 3/1m, burst: 3}
)";

TEST_P(identity_http, c12_xff_spoofing) {
  world w(GetParam(), c12_rules);
  schedule s;
  auto xff = [](std::string v) { return header_list{{"X-Forwarded-For", std::move(v)}}; };
  s.at(0.0);
  expect_row(from(w, lb, "POST", "/login", xff("198.51.100.1, 203.0.113.7")), 200, 3, 2, -1, -1,
             "row 1");
  s.at(0.1);
  expect_row(from(w, lb, "POST", "/login", xff("198.51.100.2, 203.0.113.7")), 200, 3, 1, -1, -1,
             "row 2");
  s.at(0.2);
  expect_row(from(w, lb, "POST", "/login", xff("198.51.100.3, 203.0.113.7")), 200, 3, 0, -1, -1,
             "row 3");
  s.at(0.3);
  expect_row(from(w, lb, "POST", "/login", xff("198.51.100.4, 203.0.113.7")), 429, 3, 0, -1, 20,
             "row 4");
  s.at(0.4);
  expect_row(from(w, lb, "POST", "/login", xff("192.0.2.50, 203.0.113.7")), 429, 3, 0, -1, 20,
             "row 5");
  s.at(0.5);
  expect_row(from(w, lb, "POST", "/login", xff("192.0.2.50")), 200, 3, 2, -1, -1, "row 6");
  s.at(0.6);
  expect_row(from(w, "127.203.113.9", "POST", "/login", xff("192.0.2.50")), 200, 3, 2, -1, -1,
             "row 7");
  s.at(0.7);
  expect_row(from(w, lb, "POST", "/login",
                  {{"X-Forwarded-For", "198.51.100.77"}, {"X-Forwarded-For", "203.0.113.8"}}),
             200, 3, 2, -1, -1, "row 8");
  s.at(0.8);
  expect_row(from(w, lb, "POST", "/login", xff("198.51.100.1, 203.0.113.12, 10.0.0.9")), 200, 3, 2,
             -1, -1, "row 9");

  ASSERT_EQ(w.upstream.request_count(), 7u);
  EXPECT_EQ(w.upstream.requests().front().header("X-Forwarded-For"),
            "198.51.100.1, 203.0.113.7, " + lb);  // sluice appends its own peer
  if (GetParam() == store_kind::redis) {
    using ns = limiter::key_namespace;
    EXPECT_EQ(scan(w, "sl:{login_ip|*"),
              (std::set<std::string>{
                  key("login_ip", ns::ip, "203.0.113.7"), key("login_ip", ns::ip, "192.0.2.50"),
                  key("login_ip", ns::ip, "127.203.113.9"), key("login_ip", ns::ip, "203.0.113.8"),
                  key("login_ip", ns::ip, "203.0.113.12")}));
    EXPECT_TRUE(scan(w, "*198.51.100*").empty());
  }
}

// An IPv6 zone index in X-Forwarded-For (`fe80::1%eth0`, or `%25` in the bracketed URI form)
// is dropped before keying: the client is keyed with the other addresses of its /64.
TEST_P(identity_http, ipv6_zone_index_is_dropped_before_keying) {
  world w(GetParam(), c12_rules);
  auto xff = [](std::string v) { return header_list{{"X-Forwarded-For", std::move(v)}}; };
  expect_row(from(w, lb, "POST", "/login", xff("fe80::1%eth0")), 200, 3, 2, -1, -1, "zone eth0");
  expect_row(from(w, lb, "POST", "/login", xff("fe80::2")), 200, 3, 1, -1, -1, "no zone");
  expect_row(from(w, lb, "POST", "/login", xff("[fe80::3%25eth1]:4711")), 200, 3, 0, -1, -1,
             "zone eth1, bracketed");
  expect_row(from(w, lb, "POST", "/login", xff("fe80::4%7")), 429, 3, 0, -1, -1, "numeric zone");
  expect_row(from(w, lb, "POST", "/login", xff("fe80:0:0:1::1%eth0")), 200, 3, 2, -1, -1,
             "another /64");
  if (GetParam() == store_kind::redis) {
    using ns = limiter::key_namespace;
    EXPECT_EQ(scan(w, "sl:{login_ip|*"),
              (std::set<std::string>{key("login_ip", ns::ip, "fe80::/64"),
                                     key("login_ip", ns::ip, "fe80:0:0:1::/64")}));
  }
}

const char* const c13_rules = R"(
store: STORE
identity: {api_key: {header: X-API-Key}, trusted_proxies: [127.10.0.0/16, 10.0.0.0/8], unknown_key: UNKNOWN}
plans: {anonymous: {limits: []}, free: {limits: []}}
api_keys: {key-a: free, "127.203.113.20": free}   # the second key's text is a client's address
upstreams: {api: {url: UPSTREAM_URL}}
routes:
  - name: public
    match: {path_prefix: /v1/public}
    upstream: api
    limits:
      - {name: public_ip, by: ip, rate: 3/1m, burst: 3}
  - name: items
    match: {path_prefix: /v1/items}
    upstream: api
    limits:
      - {name: items_key, by: api_key, rate: 3/1m, burst: 3}
)";

std::string c13(const std::string& policy) {
  return substitute(c13_rules, {{"UNKNOWN", policy}});
}

TEST_P(identity_http, c13_part_a_ip_identity_absent_or_empty) {
  world w(GetParam(), c13("anonymous"));
  schedule s;
  const std::string a = "127.203.113.10", b = "127.203.113.11";
  long long expected[] = {2, 1, 0};
  for (int i = 0; i < 3; ++i) {
    s.at(0.1 * i);
    expect_row(from(w, a, "GET", "/v1/public"), 200, 3, expected[i], -1, -1, "rows 1-3");
  }
  s.at(0.3);
  expect_row(from(w, a, "GET", "/v1/public"), 429, 3, 0, -1, 20, "row 4");
  s.at(0.4);
  expect_row(from(w, b, "GET", "/v1/public"), 200, 3, 2, -1, -1, "row 5");
  s.at(0.5);
  expect_row(from(w, lb, "GET", "/v1/public"), 200, 3, 2, -1, -1, "row 6: the proxy's own address");
  s.at(0.6);
  expect_row(from(w, lb, "GET", "/v1/public", {{"X-Forwarded-For", ""}}), 200, 3, 1, -1, -1,
             "row 7: empty XFF, same bucket as row 6");
  s.at(0.7);
  expect_row(from(w, b, "GET", "/v1/public"), 200, 3, 1, -1, -1, "row 8");
  if (GetParam() == store_kind::redis) {
    using ns = limiter::key_namespace;
    const auto keys = scan(w, "sl:{public_ip|*");
    EXPECT_EQ(keys, (std::set<std::string>{key("public_ip", ns::ip, a), key("public_ip", ns::ip, b),
                                           key("public_ip", ns::ip, lb)}));
    for (const auto& k : scan(w, "sl:*")) {
      EXPECT_EQ(k.find("||"), std::string::npos) << k;   // no empty part
      EXPECT_EQ(k.find("|r}"), std::string::npos) << k;  // no empty raw value
    }
  }
}

TEST_P(identity_http, c13_part_b_api_key_absent_empty_or_unknown) {
  world w(GetParam(), c13("anonymous"));
  schedule s;
  const std::string p20 = "127.203.113.20", p21 = "127.203.113.21";
  long long expected[] = {2, 1, 0};
  for (int i = 0; i < 3; ++i) {
    s.at(0.1 * i);
    expect_row(from(w, p20, "GET", "/v1/items"), 200, 3, expected[i], -1, -1, "rows 1-3");
  }
  s.at(0.3);
  expect_row(from(w, p20, "GET", "/v1/items"), 429, 3, 0, -1, 20, "row 4");
  s.at(0.4);
  expect_row(from(w, p21, "GET", "/v1/items", {{"X-API-Key", ""}}), 200, 3, 2, -1, -1, "row 5");
  s.at(0.5);
  expect_row(from(w, p20, "GET", "/v1/items", {{"X-API-Key", p20}}), 200, 3, 2, -1, -1,
             "row 6: the key namespace never meets the anonymous-IP one");
  s.at(0.6);
  expect_row(from(w, p20, "GET", "/v1/items", {{"X-API-Key", "key-z"}}), 429, 3, 0, -1, 20,
             "row 7: unknown key is anonymous");
  s.at(0.7);
  expect_row(from(w, p20, "GET", "/v1/items", {{"x-api-key", "key-a"}}), 200, 3, 2, -1, -1,
             "row 8 (header name in lower case)");
  EXPECT_EQ(w.upstream.request_count(), 6u);
  // Two different values for the identity header: 400, nothing counted, nothing forwarded.
  EXPECT_EQ(
      from(w, p20, "GET", "/v1/items", {{"X-API-Key", "key-a"}, {"X-API-Key", "key-b"}}).status,
      400u);
  EXPECT_EQ(w.upstream.request_count(), 6u);
  if (GetParam() == store_kind::redis) {
    using ns = limiter::key_namespace;
    EXPECT_EQ(scan(w, "sl:{items_key|*"),
              (std::set<std::string>{
                  key("items_key", ns::anonymous_ip, p20), key("items_key", ns::anonymous_ip, p21),
                  key("items_key", ns::api_key, p20), key("items_key", ns::api_key, "key-a")}));
  }
}

TEST_P(identity_http, c13_part_b_with_unknown_key_reject) {
  world w(GetParam(), c13("reject"));
  const std::string p20 = "127.203.113.20", p21 = "127.203.113.21";
  for (int i = 0; i < 4; ++i) EXPECT_EQ(from(w, p20, "GET", "/v1/items").status, 401u) << i;
  auto r = from(w, p21, "GET", "/v1/items", {{"X-API-Key", ""}});
  EXPECT_EQ(r.status, 401u);
  EXPECT_EQ(r.header("Content-Type"), "application/problem+json");
  EXPECT_EQ(from(w, p20, "GET", "/v1/items", {{"X-API-Key", "key-z"}}).status, 401u);
  EXPECT_EQ(w.upstream.request_count(), 0u);
  if (GetParam() == store_kind::redis) {
    EXPECT_TRUE(scan(w, "sl:*").empty());
  }
  expect_row(from(w, p20, "GET", "/v1/items", {{"X-API-Key", "key-a"}}), 200, 3, 2, -1, -1,
             "known");
}

// `api_keys_file:` is hot-reloaded by itself: a key added to the file is known within ~2 s.
TEST_P(identity_http, api_keys_file_is_reloaded) {
  const std::string path = testing::TempDir() + "identity_http_keys_" +
                           std::to_string(static_cast<int>(GetParam())) + ".txt";
  std::ofstream(path) << "key-a free\n";
  const std::string rules = R"(
store: STORE
identity: {api_key: {header: X-API-Key}}
plans: {free: {limits: [{name: free_key, by: api_key, rate: 10/1m, burst: 10}]}}
api_keys_file: PATH
upstreams: {api: {url: UPSTREAM_URL}}
routes:
  - {name: all, match: {path_prefix: /}, upstream: api}
)";
  world w(GetParam(), substitute(rules, {{"PATH", path}}));
  expect_row(w.get("/x", {{"X-API-Key", "key-a"}}), 200, 10, 9, -1, -1, "file key");
  auto before = w.get("/x", {{"X-API-Key", "key-b"}});
  EXPECT_FALSE(before.has("X-RateLimit-Limit"));  // anonymous: no limits on this route
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  std::ofstream(path) << "key-a free\nkey-b free\n";
  EXPECT_EVENTUALLY(std::chrono::seconds(3),
                    w.get("/x", {{"X-API-Key", "key-b"}}).header("X-RateLimit-Limit") == "10")
      << "key-b was not picked up";
  // A broken edit keeps the last good keys.
  std::ofstream(path) << "key-a gold\n";
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  EXPECT_EQ(w.get("/x", {{"X-API-Key", "key-b"}}).header("X-RateLimit-Limit"), "10");
  std::remove(path.c_str());
}

// The API key as a query parameter (`identity.api_key.query`): percent-decoded before lookup
// and keying (`+` is a space), one key per request however many copies it is sent in. A copy
// that disagrees with another, in the query or between query and header, a malformed escape,
// or a decoded NUL is 400: nothing counted, nothing forwarded.
const char* const query_key_rules = R"(
store: STORE
identity: {api_key: {header: X-API-Key, query: api_key}}
plans: {anonymous: {limits: []}, free: {limits: []}}
api_keys: {key-a: free, "key a": free, "key+a": free}
upstreams: {api: {url: UPSTREAM_URL}}
routes:
  - name: items
    match: {path_prefix: /v1/items}
    upstream: api
    limits:
      - {name: items_key, by: api_key, rate: 10/1m, burst: 10}
)";

TEST_P(identity_http, api_key_query_parameter_is_decoded_and_unambiguous) {
  world w(GetParam(), query_key_rules);
  struct row {
    std::string target;
    header_list headers;
    unsigned status;
    long long remaining;  // of the row's bucket; -1 for a 400
    const char* what;
  };
  const std::vector<row> rows = {
      {"/v1/items?api_key=key-a", {}, 200, 9, "plain key"},
      {"/v1/items?api_key=key%2Da", {}, 200, 8, "%2D decodes to '-': key-a's bucket"},
      {"/v1/items?api_key=key-a&api_key=key-a", {}, 200, 7, "identical repeat"},
      {"/v1/items?api_key=key-a&api_key=key%2da", {}, 200, 6, "identical after decoding"},
      {"/v1/items?api_key=key-a&api_key=other", {}, 400, -1, "repeat, first is known"},
      {"/v1/items?api_key=other&api_key=key-a", {}, 400, -1, "repeat, last is known"},
      {"/v1/items?api_key=key-a&api%5Fkey=other", {}, 400, -1, "repeat under an encoded name"},
      {"/v1/items?api_key=%zz", {}, 400, -1, "malformed escape"},
      {"/v1/items?api_key=key%", {}, 400, -1, "lone %"},
      {"/v1/items?api_key=key%00a", {}, 400, -1, "decoded NUL"},
      {"/v1/items?api_key=other", {{"X-API-Key", "key-a"}}, 400, -1, "header and query differ"},
      {"/v1/items", {{"X-API-Key", "key-a"}, {"X-API-Key", "other"}}, 400, -1, "two header values"},
      {"/v1/items?api_key=key%2Da", {{"X-API-Key", "key-a"}}, 200, 5, "header and query agree"},
      {"/v1/items?other=%zz&api_key=key-a", {}, 200, 4, "other parameters are not validated"},
      {"/v1/items?api_key=key+a", {}, 200, 9, "'+' is a space: key \"key a\""},
      {"/v1/items?api_key=key%2Ba", {}, 200, 9, "%2B is a plus: key \"key+a\""},
      {"/v1/items?api_key=", {}, 200, 9, "empty: anonymous, keyed by address"},
      {"/v1/items?api_key=key-z", {}, 200, 8, "unknown: anonymous, same bucket"},
  };
  std::size_t forwarded = 0;
  for (const auto& r : rows) {
    SCOPED_TRACE(r.target);
    const auto res = w.send("GET", r.target, r.headers);
    if (r.status == 400) {
      EXPECT_EQ(res.status, 400u) << r.what << ": " << res.body;
      EXPECT_EQ(res.header("Content-Type"), "application/problem+json") << r.what;
      EXPECT_FALSE(res.has("X-RateLimit-Remaining")) << r.what;
      // The problem's detail names what was wrong: a bad escape, or a conflict.
      const std::string what = r.what;
      const bool escape = what.find("escape") != std::string::npos ||
                          what.find("lone %") != std::string::npos ||
                          what.find("NUL") != std::string::npos;
      EXPECT_NE(res.body.find(escape ? "malformed percent-escape" : "more than once"),
                std::string::npos)
          << r.what << ": " << res.body;
    } else {
      expect_row(res, r.status, 10, r.remaining, -1, -1, r.what);
      ++forwarded;
    }
    EXPECT_EQ(w.upstream.request_count(), forwarded) << r.what;
  }
  // The upstream receives the query exactly as sent.
  ASSERT_GE(w.upstream.requests().size(), 2u);
  EXPECT_EQ(w.upstream.requests()[1].target, "/v1/items?api_key=key%2Da");
  if (GetParam() == store_kind::redis) {
    using ns = limiter::key_namespace;
    EXPECT_EQ(scan(w, "sl:{items_key|*"),
              (std::set<std::string>{key("items_key", ns::api_key, "key-a"),
                                     key("items_key", ns::api_key, "key a"),
                                     key("items_key", ns::api_key, "key+a"),
                                     key("items_key", ns::anonymous_ip, "127.0.0.1")}));
  }
}

INSTANTIATE_TEST_SUITE_P(stores, identity_http,
                         testing::Values(store_kind::memory, store_kind::redis), store_name);

// The store-backed directory: HGET on a miss, then the worker's cache (positive and negative
// entries, each with its TTL).
TEST(plan_directory, redis_hash_with_cache_and_negative_cache) {
  const char* rules = R"(
store: STORE
identity:
  api_key: {header: X-API-Key}
  directory: {type: redis, hash: "sluice:api_keys", cache_ttl: 60s, negative_ttl: 1s, cache_size: 100}
plans:
  pro: {limits: [{name: pro_key, by: api_key, rate: 100/1m, burst: 100}]}
api_keys: {inline-key: pro}
upstreams: {api: {url: UPSTREAM_URL}}
routes:
  - {name: all, match: {path_prefix: /}, upstream: api}
)";
  world w(store_kind::redis, rules, 1);
  w.redis->command({"HSET", "sluice:api_keys", "dir-key", "pro"});
  w.redis->command({"HSET", "sluice:api_keys", "odd-key", "no-such-plan"});
  expect_row(w.get("/x", {{"X-API-Key", "dir-key"}}), 200, 100, 99, -1, -1, "directory key");
  expect_row(w.get("/x", {{"X-API-Key", "inline-key"}}), 200, 100, 99, -1, -1, "inline key");
  EXPECT_FALSE(w.get("/x", {{"X-API-Key", "odd-key"}}).has("X-RateLimit-Limit"));   // unknown plan
  EXPECT_FALSE(w.get("/x", {{"X-API-Key", "late-key"}}).has("X-RateLimit-Limit"));  // absent
  // Cached: removing the key from Redis changes nothing within cache_ttl.
  w.redis->command({"HDEL", "sluice:api_keys", "dir-key"});
  expect_row(w.get("/x", {{"X-API-Key", "dir-key"}}), 200, 100, 98, -1, -1, "cache hit");
  // Negative entry: a key added after a miss is seen only once negative_ttl has passed.
  w.redis->command({"HSET", "sluice:api_keys", "late-key", "pro"});
  EXPECT_FALSE(w.get("/x", {{"X-API-Key", "late-key"}}).has("X-RateLimit-Limit"));
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  expect_row(w.get("/x", {{"X-API-Key", "late-key"}}), 200, 100, 99, -1, -1, "after negative_ttl");
  // Keys of any bytes are looked up verbatim and never crash anything.
  EXPECT_EQ(w.get("/x", {{"X-API-Key", "{a}:b c"}}).status, 200u);
  EXPECT_EQ(w.get("/x", {{"X-API-Key", std::string(4000, 'k')}}).status, 200u);
}

// Connections only for what the rules use (issue 10): without a directory each worker holds
// one Redis connection (its checks'); the reload that first enables a directory connects it.
TEST(plan_directory, connected_only_once_the_rules_use_one) {
  const char* without = R"(
store: STORE
identity: {api_key: {header: X-API-Key}}
plans:
  pro: {limits: [{name: pro_key, by: api_key, rate: 100/1m, burst: 100}]}
api_keys: {inline-key: pro}
upstreams: {api: {url: UPSTREAM_URL}}
routes:
  - {name: all, match: {path_prefix: /}, upstream: api}
)";
  world w(store_kind::redis, without, 2);
  auto clients = [&] {
    const auto r = w.redis->command({"INFO", "clients"});
    const auto at = r.str.find("connected_clients:");
    return at == std::string::npos ? -1 : std::stoi(r.str.substr(at + 18));
  };
  expect_row(w.get("/x", {{"X-API-Key", "inline-key"}}), 200, 100, 99, -1, -1, "inline key");
  // The two workers' check connections, and the one command() opens to ask.
  EXPECT_EQ(clients(), 3);

  w.redis->command({"HSET", "sluice:api_keys", "dir-key", "pro"});
  std::string with = without;
  with.replace(with.find("identity: {api_key: {header: X-API-Key}}"),
               std::string("identity: {api_key: {header: X-API-Key}}").size(),
               "identity: {api_key: {header: X-API-Key}, directory: {type: redis, hash: "
               "\"sluice:api_keys\"}}");
  ASSERT_EQ(w.gateway->reload(w.render(with)), "");
  // (the new connection is made on each worker)
  EXPECT_EVENTUALLY(std::chrono::seconds(2),
                    w.get("/x", {{"X-API-Key", "dir-key"}}).has("X-RateLimit-Limit"))
      << "the directory was not connected after the reload enabled it";
  EXPECT_EQ(clients(), 5);
}

}  // namespace
}  // namespace sluice::test
