// SPDX-License-Identifier: Apache-2.0
// The token-bucket cases from the field (c01-c07), through real HTTP, a real upstream, and
// both stores: the memory store and a real redis-server.
// sluice-test-support: gateway_fixture redis_server upstream_server http_client

#include "harness.hpp"

namespace sluice::test {
namespace {

const char* const base_rules = R"(
store: STORE
identity: {api_key: {header: X-API-Key}}
plans: {free: {limits: []}, pro: {limits: []}}
api_keys: {key-a: free, key-b: free, key-p: pro}
upstreams: {api: {url: UPSTREAM_URL}}
)";

std::string rules(const std::string& routes) {
  return std::string(base_rules) + "routes:\n" + routes;
}

class token_bucket_cases : public testing::TestWithParam<store_kind> {};

const header_list key_a = {{"X-API-Key", "key-a"}};
const header_list key_b = {{"X-API-Key", "key-b"}};

std::string key_of(const std::string& limit, const std::string& api_key) {
  return limiter::bucket_key(limit, limiter::key_namespace::api_key, api_key);
}

// c01, token-bucket variant: rate 5/1m, burst 5; requests at t = 0, 0.1, ..., 0.5.
TEST_P(token_bucket_cases, c01_off_by_one_remaining) {
  world w(GetParam(), rules(R"(
  - name: items
    match: {path_prefix: /v1/items}
    upstream: api
    limits:
      - {name: items_key, by: api_key, rate: 5/1m, burst: 5}
)"));
  schedule s;
  const long long remaining[] = {4, 3, 2, 1, 0};
  const long long reset[] = {12, 24, 36, 48, 60};
  for (int i = 0; i < 5; ++i) {
    s.at(0.1 * i);
    expect_row(w.get("/v1/items", key_a), 200, 5, remaining[i], reset[i], -1,
               "row " + std::to_string(i + 1));
  }
  s.at(0.5);
  expect_row(w.get("/v1/items", key_a), 429, 5, 0, 60, 12, "row 6");
  EXPECT_EQ(w.upstream.request_count(), 5u);
}

// c01's invariant: when a response says Remaining n and nothing else is sent, exactly n more
// 200s follow it — for several costs and bursts.
TEST_P(token_bucket_cases, c01_remaining_n_means_n_more_admissions) {
  world w(GetParam(), rules(R"(
  - name: one
    match: {path_prefix: /v1/one}
    upstream: api
    limits:
      - {name: inv_one, by: api_key, rate: 7/1h, burst: 7}
  - name: three
    match: {path_prefix: /v1/three}
    upstream: api
    cost: 3
    limits:
      - {name: inv_three, by: api_key, rate: 10/1h, burst: 10}
)"));
  // Remaining counts units: with cost c, Remaining n leaves floor(n / c) admissions.
  for (auto [path, cost] :
       {std::pair<std::string, unsigned long>{"/v1/one", 1}, {"/v1/three", 3}}) {
    std::vector<client_response> seen;
    for (int i = 0; i < 12; ++i) seen.push_back(w.get(path, key_a));
    for (std::size_t i = 0; i < seen.size(); ++i) {
      if (seen[i].status != 200) continue;
      const auto n = std::stoul(seen[i].header("X-RateLimit-Remaining"));
      std::size_t admitted_after = 0;
      for (std::size_t j = i + 1; j < seen.size(); ++j) admitted_after += seen[j].status == 200;
      EXPECT_EQ(admitted_after, n / cost) << path << " response " << i;
    }
  }
}

// c02: rate 1/10s, burst 2. Obeying Retry-After succeeds; it is never 0 or too early.
TEST_P(token_bucket_cases, c02_retry_after_value) {
  // The upstream learns each admission's store time: the stored level is checked against
  // those (one clock), not against the schedule, which a loaded machine runs late.
  world w(GetParam(), "decision_time_header: X-Decided-At\n" + rules(R"(
  - name: search
    match: {path_prefix: /v1/search}
    upstream: api
    limits:
      - {name: search_key, by: api_key, rate: 1/10s, burst: 2}
)"));
  schedule s;
  expect_row(w.get("/v1/search", key_a), 200, 2, 1, 10, -1, "t=0.0");
  s.at(0.1);
  expect_row(w.get("/v1/search", key_a), 200, 2, 0, 20, -1, "t=0.1");
  s.at(0.2);
  expect_row(w.get("/v1/search", key_a), 429, 2, 0, 20, 10, "t=0.2");
  s.at(9.8);
  expect_row(w.get("/v1/search", key_a), 429, 2, 0, 11, 1, "t=9.8");
  s.at(10.2);
  expect_row(w.get("/v1/search", key_a), 200, 2, 0, 20, -1, "t=10.2");
  EXPECT_EQ(w.upstream.request_count(), 3u);
  if (GetParam() == store_kind::redis) {
    const auto key = key_of("search_key", "key-a");
    auto [level, stamp] = bucket_state(w.raw(key));
    // 1 unit per ms: full (20,000) at the first admission, 10,000 taken by each of three.
    const auto seen = w.upstream.requests();
    ASSERT_EQ(seen.size(), 3u);
    const double first = std::stod(seen[0].header("X-Decided-At"));
    const double last = std::stod(seen[2].header("X-Decided-At"));
    EXPECT_NEAR(level, last - first - 10'000, 1.0);  // about 0.02 token when on schedule
    EXPECT_LE(w.pttl(key), 19800 + 1000);
    EXPECT_GT(w.pttl(key), 0);
  }
}

// c03 part A: a fraction of a token is never rounded into an admission or a Retry-After of 0.
TEST_P(token_bucket_cases, c03_fraction_kept_part_a) {
  world w(GetParam(), rules(R"(
  - name: items
    match: {path_prefix: /v1/items}
    upstream: api
    limits:
      - {name: items_key, by: api_key, rate: 1/2s, burst: 1}
)"));
  schedule s;
  expect_row(w.get("/v1/items", key_a), 200, 1, 0, 2, -1, "t=0.0");
  s.at(1.5);
  expect_row(w.get("/v1/items", key_a), 429, 1, 0, 1, 1, "t=1.5");
  s.at(1.8);
  expect_row(w.get("/v1/items", key_a), 429, 1, 0, 1, 1, "t=1.8");
  s.at(2.2);
  expect_row(w.get("/v1/items", key_a), 200, 1, 0, 2, -1, "t=2.2");
  s.at(2.3);
  expect_row(w.get("/v1/items", key_a), 429, 1, 0, 2, 2, "t=2.3");
  EXPECT_EQ(w.upstream.request_count(), 2u);
}

// c03 part B: a client polling faster than the refill is never starved.
TEST_P(token_bucket_cases, c03_no_starvation_part_b) {
  world w(GetParam(), rules(R"(
  - name: items
    match: {path_prefix: /v1/items}
    upstream: api
    limits:
      - {name: items_key, by: api_key, rate: 1/1s, burst: 1}
)"));
  schedule s;
  const double t[] = {0.0, 0.4, 0.8, 1.2, 1.6, 2.4};
  const unsigned status[] = {200, 429, 429, 200, 429, 200};
  for (int i = 0; i < 6; ++i) {
    s.at(t[i]);
    expect_row(w.get("/v1/items", key_b), status[i], 1, 0, -1, status[i] == 429 ? 1 : -1,
               "t=" + std::to_string(t[i]));
    if (i == 4 && GetParam() == store_kind::redis) {
      // The stored state means 0.4 token at t = 1.6 (never 0 tokens at t = 1.6).
      auto [level, stamp] = bucket_state(w.raw(key_of("items_key", "key-b")));
      auto now = w.redis->command({"TIME"});
      const long long now_ms =
          std::stoll(now.elements[0].str) * 1000 + std::stoll(now.elements[1].str) / 1000;
      const double tokens_now = (level + (now_ms - stamp)) / 1000.0;
      EXPECT_NEAR(tokens_now, 0.4, 0.08);
    }
  }
  EXPECT_EQ(w.upstream.request_count(), 3u);
}

// c04: a cost-4 request against 2.2 tokens is refused and debits nothing.
TEST_P(token_bucket_cases, c04_cost_exceeds_tokens) {
  world w(GetParam(), rules(R"(
  - name: bulk
    match: {path_prefix: /v1/bulk, methods: [POST]}
    upstream: api
    cost: 4
    limits:
      - {name: api_budget, by: api_key, rate: 1/1s, burst: 10}
  - name: items
    match: {path_prefix: /v1/items}
    upstream: api
    cost: 1
    limits:
      - {name: api_budget, by: api_key, rate: 1/1s, burst: 10}
)"));
  schedule s;
  expect_row(w.send("POST", "/v1/bulk", key_a), 200, 10, 6, 4, -1, "t=0.0");
  s.at(0.1);
  expect_row(w.send("POST", "/v1/bulk", key_a), 200, 10, 2, 8, -1, "t=0.1");
  s.at(0.2);
  expect_row(w.send("POST", "/v1/bulk", key_a), 429, 10, 2, 8, 2, "t=0.2");
  s.at(0.3);
  expect_row(w.get("/v1/items", key_a), 200, 10, 1, 9, -1, "t=0.3");
  EXPECT_EQ(w.upstream.request_count(), 3u);
  if (GetParam() == store_kind::redis) {
    const auto key = key_of("api_budget", "key-a");
    auto [level, stamp] = bucket_state(w.raw(key));
    EXPECT_NEAR(level, 1300, 60);  // 1.3 tokens, never negative
    EXPECT_LE(w.pttl(key), 8700 + 1000);
    EXPECT_GT(w.pttl(key), 7000);
  }
}

// c06 A and B: very long periods and very high rates keep exact, in-range expiries.
TEST_P(token_bucket_cases, c06_ttl_units_long_period_and_high_rate) {
  world w(GetParam(), rules(R"(
  - name: slow
    match: {path_prefix: /v1/slow}
    upstream: api
    limits:
      - {name: slow_key, by: api_key, rate: 1/30d, burst: 1000}
  - name: fast
    match: {path_prefix: /v1/fast}
    upstream: api
    limits:
      - {name: fast_key, by: api_key, rate: 1000000/1s, burst: 1000000}
)"));
  expect_row(w.get("/v1/slow", key_a), 200, 1000, 999, 2592000, -1, "part A");
  expect_row(w.get("/v1/fast", key_a), 200, 1000000, 999999, 1, -1, "part B");
  if (GetParam() == store_kind::redis) {
    const auto slow = w.pttl(key_of("slow_key", "key-a"));
    EXPECT_GE(slow, 2591999000LL);
    EXPECT_LE(slow, 2592000000LL + 1000);
    const auto fast = w.pttl(key_of("fast_key", "key-a"));
    // Absent, or expiring within 1 ms + pad (a read can land on the expiring instant: 0).
    EXPECT_TRUE(fast == -2 || (fast >= 0 && fast <= 1 + 1000)) << fast;
  }
}

// c06 D: the expiry is re-armed on every write, so a busy bucket never expires live state.
TEST_P(token_bucket_cases, c06_ttl_refreshed_on_every_write) {
  world w(GetParam(), rules(R"(
  - name: items
    match: {path_prefix: /v1/items}
    upstream: api
    limits:
      - {name: items_key, by: api_key, rate: 1/10s, burst: 2}
)"));
  const auto key = key_of("items_key", "key-a");
  const bool redis = GetParam() == store_kind::redis;
  schedule s;
  expect_row(w.get("/v1/items", key_a), 200, 2, 1, 10, -1, "t=0");
  if (redis) {
    EXPECT_LE(w.pttl(key), 10000 + 1000);
  }
  s.at(5.5);
  expect_row(w.get("/v1/items", key_a), 200, 2, 0, 15, -1, "t=5.5");
  if (redis) {
    EXPECT_GE(w.pttl(key), 14400 - 100);
    EXPECT_LE(w.pttl(key), 14500 + 1000);
  }
  s.at(10.5);
  expect_row(w.get("/v1/items", key_a), 200, 2, 0, -1, -1, "t=10.5 first");
  expect_row(w.get("/v1/items", key_a), 429, 2, 0, -1, 10, "t=10.5 second");
  if (redis) {  // 0.05 token
    EXPECT_NEAR(bucket_state(w.raw(key)).first, 500, 60);
  }
}

INSTANTIATE_TEST_SUITE_P(stores, token_bucket_cases,
                         testing::Values(store_kind::memory, store_kind::redis), store_name);

// c07: a key found without an expiry is repaired by the next call; idle keys vanish.
TEST(token_bucket_redis, c07_key_without_ttl_is_repaired) {
  world w(store_kind::redis, rules(R"(
  - name: items
    match: {path_prefix: /v1/items}
    upstream: api
    limits:
      - {name: items_key, by: api_key, rate: 1/10s, burst: 2}
)"));
  const auto key = key_of("items_key", "key-a");
  schedule s;
  expect_row(w.get("/v1/items", key_a), 200, 2, 1, -1, -1, "step 1a");
  s.at(0.05);
  expect_row(w.get("/v1/items", key_a), 200, 2, 0, -1, -1, "step 1b");
  EXPECT_EQ(w.buckets().persist(key), 1);  // the bucket's group hash
  EXPECT_EQ(w.pttl(key), -1);
  s.at(0.1);
  expect_row(w.get("/v1/items", key_a), 429, 2, 0, -1, 10, "step 3");
  EXPECT_GT(w.pttl(key), 0);
  EXPECT_LE(w.pttl(key), 19900 + 1000);
  s.at(20.5);
  expect_row(w.get("/v1/items", key_a), 200, 2, 1, -1, -1, "step 4a");
  expect_row(w.get("/v1/items", key_a), 200, 2, 0, -1, -1, "step 4b");
  s.at(45);  // full again at ~40.5 s: the key has expired
  EXPECT_FALSE(w.buckets().exists(key));
  EXPECT_EQ(w.redis->command({"EXISTS", w.buckets().where(key).key}).integer, 0);
  // No key under sluice's prefix is ever left without an expiry.
  auto keys = w.redis->command({"KEYS", "sl:*"});
  for (const auto& k : keys.elements)
    EXPECT_GT(w.redis->command({"PTTL", k.str}).integer, 0) << k.str;
}

}  // namespace
}  // namespace sluice::test
