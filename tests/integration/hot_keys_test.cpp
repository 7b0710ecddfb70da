// SPDX-License-Identifier: Apache-2.0
// sluice-test-support: gateway_fixture redis_server upstream_server http_client
// Hot keys through real HTTP (issue 11, items 4 and 5): token leasing on a real Redis — one
// round trip pays for a lease of requests, two instances together never admit more than the
// bucket, an ended lease's tokens go back to the bucket — sharded global limits on both
// stores, and region shares.

#include "harness.hpp"

#include "sluice/limiter/keys.hpp"
#include "sluice/observability/admin.hpp"
#include "sluice/observability/metrics.hpp"
#include "sluice/store/cluster_slots.hpp"

#include <thread>

namespace sluice::test {
namespace {

using namespace std::chrono_literals;

const char* const lease_rules = R"(
store: STORE
upstreams: {api: {url: UPSTREAM_URL}}
routes:
  - name: hot
    match: {path_prefix: /v1/hot}
    upstream: api
    limits:
      - {name: hot, by: global, rate: RATE, burst: BURST, lease: LEASE, lease_time: TIME}
)";

std::string leasing(const std::string& rate, const std::string& burst, const std::string& lease,
                    const std::string& time = "250ms") {
  return substitute(lease_rules,
                    {{"RATE", rate}, {"BURST", burst}, {"LEASE", lease}, {"TIME", time}});
}

TEST(token_leasing, one_round_trip_pays_for_a_lease_and_the_headers_count_down_as_without) {
  world w(store_kind::redis, leasing("100/1h", "100", "10"), 1);
  const long long before = check_calls(*w.redis);
  for (int i = 0; i < 35; ++i) {
    const auto r = w.get("/v1/hot");
    ASSERT_EQ(r.status, 200u) << i;
    // One caller on one worker: Remaining counts down exactly as an unleased bucket's.
    EXPECT_EQ(r.header("X-RateLimit-Remaining"), std::to_string(99 - i)) << i;
    EXPECT_EQ(r.header("X-RateLimit-Limit"), "100");
  }
  EXPECT_EQ(check_calls(*w.redis) - before, 4) << "35 requests in leases of 10";
  const auto s = w.gateway->gateway().sample();
  EXPECT_EQ(s.lease_grants, 4u);
  EXPECT_EQ(s.leased_decisions, 31u);
  EXPECT_EQ(s.tokens_leased, 36u);  // 9 beyond each granting request's cost
  EXPECT_EQ(s.tokens_returned, 0u);
  // The metrics say the same.
  const auto metrics = observability::exposition(s);
  EXPECT_NE(metrics.find("sluice_lease_grants_total 4\n"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("sluice_lease_decisions_total 31\n"), std::string::npos);
  EXPECT_NE(metrics.find("sluice_lease_tokens_total{kind=\"leased\"} 36\n"), std::string::npos);
}

// The memory store decides without a round trip, so there is nothing to lease: a leased limit
// is decided as any other, every request by the store.
TEST(token_leasing, the_memory_store_takes_no_lease) {
  world w(store_kind::memory, leasing("100/1h", "100", "10"), 2);
  for (int i = 0; i < 12; ++i) {
    const auto r = w.get("/v1/hot");
    ASSERT_EQ(r.status, 200u) << i;
    EXPECT_EQ(r.header("X-RateLimit-Remaining"), std::to_string(99 - i)) << i;
  }
  const auto s = w.gateway->gateway().sample();
  EXPECT_EQ(s.lease_grants, 0u);
  EXPECT_EQ(s.leased_decisions, 0u);
}

// Two instances on one Redis, one worker each, no refill to speak of (30 per hour): however
// the requests alternate, the two together admit exactly the bucket's 30 — taken in leases,
// every leased token spent — and every refusal is an honest 429.
TEST(token_leasing, two_instances_never_admit_more_than_the_bucket) {
  world a(store_kind::redis, leasing("30/1h", "30", "10"), 1);
  gateway_fixture b(a.render(leasing("30/1h", "30", "10")), 1);
  int admitted = 0, refused = 0;
  for (int i = 0; i < 80; ++i) {
    const auto r = i % 2 == 0 ? a.get("/v1/hot") : test::get(b.port(), "/v1/hot");
    if (r.status == 200u) {
      ++admitted;
    } else {
      ASSERT_EQ(r.status, 429u) << i;
      EXPECT_FALSE(r.header("Retry-After").empty());
      ++refused;
    }
  }
  EXPECT_EQ(admitted, 30);
  EXPECT_EQ(refused, 50);
}

// An ended lease's tokens go back with its worker's next check: instance A takes a lease of
// 10 (9 left over), lets it end, and takes another — returning the 9 first — so instance B
// still finds 9 in the bucket (without the return it would find none).
TEST(token_leasing, an_ended_lease_returns_its_tokens) {
  world a(store_kind::redis, leasing("20/1h", "20", "10", "100ms"), 1);
  gateway_fixture b(a.render(leasing("20/1h", "20", "10", "100ms")), 1);
  ASSERT_EQ(a.get("/v1/hot").status, 200u);  // bucket 10, A holds 9
  std::this_thread::sleep_for(200ms);        // A's lease ends
  ASSERT_EQ(a.get("/v1/hot").status, 200u);  // returns 9 (bucket 19), takes 10 (bucket 9)
  EXPECT_EQ(a.gateway->gateway().sample().tokens_returned, 9u);
  int admitted_b = 0;
  for (int i = 0; i < 15; ++i) admitted_b += test::get(b.port(), "/v1/hot").status == 200u;
  EXPECT_EQ(admitted_b, 9);
}

// A Redis that cannot be reached: a leased limit gets the route's failure policy like any
// other, and nothing hangs.
TEST(token_leasing, an_unreachable_store_gets_the_failure_policy) {
  const std::string rules = R"(
store: {type: redis, address: "127.0.0.1:PORT", timeout: 50ms}
upstreams: {api: {url: UPSTREAM_URL}}
routes:
  - name: hot
    match: {path_prefix: /v1/hot}
    upstream: api
    on_store_failure: fail_closed
    limits:
      - {name: hot, by: global, rate: 10/1s, lease: 5}
)";
  upstream_server up;
  gateway_fixture g(substitute(rules, {{"PORT", std::to_string(free_loopback_port())},
                                       {"UPSTREAM_URL", up.url()}}),
                    1);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(test::get(g.port(), "/v1/hot").status, 503u) << i;
}

const char* const shard_rules = R"(
store: STORE
upstreams: {api: {url: UPSTREAM_URL}}
routes:
  - name: all
    match: {path_prefix: /v1/all}
    upstream: api
    limits:
      - {name: all_traffic, by: global, rate: 40/1h, burst: 40, shards: 4}
)";

class sharded : public ::testing::TestWithParam<store_kind> {};

// A sharded global limit never admits more than the limit; each request is charged to one of
// the shards, whose burst is a quarter of the limit's; the refusals are honest 429s.
TEST_P(sharded, never_above_the_limit_and_each_shard_is_a_bucket) {
  world w(GetParam(), shard_rules, 2);
  int admitted = 0;
  for (int i = 0; i < 100; ++i) {
    const auto r = w.get("/v1/all");
    EXPECT_EQ(r.header("X-RateLimit-Limit"), "10") << "a shard's burst";
    if (r.status == 200u) {
      ++admitted;
    } else {
      ASSERT_EQ(r.status, 429u);
      EXPECT_FALSE(r.header("Retry-After").empty());
    }
  }
  EXPECT_LE(admitted, 40);
  // 100 requests at random over 4 shards of 10: each shard gets fewer than 5 only rarely.
  EXPECT_GE(admitted, 30);
  if (GetParam() == store_kind::redis) {
    config::limit l;
    l.name = "all_traffic";
    l.by = config::identity_kind::global;
    l.shards = 4;
    const auto keys = store::spread_shard_keys(l, lua::key_layout{});
    ASSERT_EQ(keys.size(), 4u);
    for (const auto& key : keys)
      EXPECT_NE(w.raw(key).type, redis_reply::kind::nil) << key << " has no bucket";
  }
}

INSTANTIATE_TEST_SUITE_P(stores, sharded, ::testing::Values(store_kind::memory, store_kind::redis),
                         store_name);

// Two regions, each with its own store and `store.region_share: 0.5`: each region admits
// half of the limit, and the limit's stated guarantee says so.
TEST(region_share, each_region_enforces_its_share_against_its_own_store) {
  const char* const rules = R"(
store: STORE
upstreams: {api: {url: UPSTREAM_URL}}
routes:
  - name: r
    match: {path_prefix: /v1/r}
    upstream: api
    limits:
      - {name: per_ip, by: ip, rate: 10/1h, burst: 10}
)";
  world east(store_kind::redis, rules, 1, ", region_share: 0.5");
  world west(store_kind::memory, rules, 1, ", region_share: 0.5");
  for (world* w : {&east, &west}) {
    int admitted = 0;
    for (int i = 0; i < 8; ++i) {
      const auto r = w->get("/v1/r");
      EXPECT_EQ(r.header("X-RateLimit-Limit"), "5");
      admitted += r.status == 200u;
    }
    EXPECT_EQ(admitted, 5);
  }
  observability::explain_query q;
  q.path = "/v1/r";
  const auto explained = east.gateway->gateway().explain(q);
  ASSERT_TRUE(explained);
  EXPECT_NE(explained->find("in this region: share 0.5000"), std::string::npos) << *explained;
}

}  // namespace
}  // namespace sluice::test
