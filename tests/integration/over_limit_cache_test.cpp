// SPDX-License-Identifier: Apache-2.0
// sluice-test-support: gateway_fixture redis_server upstream_server http_client
// The over-limit cache through real HTTP (issue 10, item 7): a refusal Redis answered is
// repeated by the worker — same status and quota headers, no round trip — until a token could
// next arrive; a reload that raises the limit is obeyed at once; `over_limit_cache: false`
// asks Redis every time.

#include "harness.hpp"

#include <thread>

namespace sluice::test {
namespace {

const char* const rules = R"(
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
      - {name: items_key, by: api_key, rate: BURST/1h, burst: BURST}
)";

std::string with_burst(const std::string& n) {
  return substitute(rules, {{"BURST", n}});
}

TEST(over_limit_cache, refusals_repeat_without_a_round_trip_until_a_reload) {
  world w(store_kind::redis, with_burst("2"), 1);
  const header_list key{{"X-API-Key", "key-a"}};
  expect_row(w.get("/v1/items", key), 200, 2, 1, -1, -1, "first");
  expect_row(w.get("/v1/items", key), 200, 2, 0, -1, -1, "second");
  const auto refused = w.get("/v1/items", key);  // decided by Redis
  expect_row(refused, 429, 2, 0, -1, -1, "refused by Redis");
  const long long calls = check_calls(*w.redis);
  for (int i = 0; i < 5; ++i) {
    const auto again = w.get("/v1/items", key);
    expect_row(again, 429, 2, 0, -1, -1, "refused from the cache");
    // The same answer Redis gave: the times can only have counted down.
    EXPECT_LE(std::stoll(again.header("Retry-After")), std::stoll(refused.header("Retry-After")));
    EXPECT_LE(std::stoll(again.header("X-RateLimit-Reset")),
              std::stoll(refused.header("X-RateLimit-Reset")));
    EXPECT_EQ(again.header("RateLimit-Policy"), refused.header("RateLimit-Policy"));
  }
  EXPECT_EQ(check_calls(*w.redis), calls) << "a cached refusal went to Redis";
  EXPECT_EQ(w.gateway->gateway().sample().cached_refusals, 5u);

  // A reload that raises the limit: the next request is Redis's to decide again (the spent
  // balance carries over, case c16, so Redis still refuses — under the new limit).
  ASSERT_EQ(w.gateway->reload(w.render(with_burst("5"))), "");
  const auto after = w.get("/v1/items", key);
  EXPECT_EQ(check_calls(*w.redis), calls + 1) << "answered by a cache of the old rules";
  EXPECT_EQ(after.header("X-RateLimit-Limit"), "5");
}

// A Redis restarted empty (the gateway reconnects): the cached refusal is gone with the
// connection it was learned on, and the next request is admitted by the empty Redis.
TEST(over_limit_cache, a_new_store_connection_clears_it) {
  world w(store_kind::redis, with_burst("1"), 1);
  const header_list key{{"X-API-Key", "key-a"}};
  expect_row(w.get("/v1/items", key), 200, 1, 0, -1, -1, "first");
  expect_row(w.get("/v1/items", key), 429, 1, 0, -1, -1, "refused by Redis");
  expect_row(w.get("/v1/items", key), 429, 1, 0, -1, -1, "refused from the cache");
  ASSERT_EQ(w.gateway->gateway().sample().cached_refusals, 1u);
  w.redis->restart();  // --save "": it comes back empty
  ASSERT_TRUE(w.gateway->gateway().wait_for_store(std::chrono::milliseconds(3000)));
  expect_row(w.get("/v1/items", key), 200, 1, 0, -1, -1, "admitted by the restarted Redis");
}

TEST(over_limit_cache, off_asks_redis_every_time) {
  world w(store_kind::redis, with_burst("1"), 1, ", over_limit_cache: false");
  const header_list key{{"X-API-Key", "key-a"}};
  expect_row(w.get("/v1/items", key), 200, 1, 0, -1, -1, "first");
  const long long calls = check_calls(*w.redis);
  for (int i = 0; i < 3; ++i) expect_row(w.get("/v1/items", key), 429, 1, 0, -1, -1, "refused");
  EXPECT_EQ(check_calls(*w.redis), calls + 3);
  EXPECT_EQ(w.gateway->gateway().sample().cached_refusals, 0u);
}

}  // namespace
}  // namespace sluice::test
