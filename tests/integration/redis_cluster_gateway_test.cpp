// SPDX-License-Identifier: Apache-2.0
// sluice-test-support: gateway_fixture redis_cluster redis_server upstream_server http_client
// sluice-test-serial
// `store.type: redis-cluster` through real sockets (case c09): a gateway on a real Redis
// Cluster of three masters and three replicas. Every bucket's keys are in one slot, the
// buckets spread over the masters, the 429s are exact, no store error of any kind and no
// fail-open decision; the slot of a refused bucket moved to another master keeps its
// refusal; a request with three limits on three masters is decided all or nothing.
#include "support/eventually.hpp"
#include "support/gateway_fixture.hpp"
#include "support/http_client.hpp"
#include "support/redis_cluster.hpp"
#include "support/upstream_server.hpp"

#include "sluice/limiter/keys.hpp"
#include "sluice/store/cluster_slots.hpp"
#include "sluice/store/counter_store.hpp"
#include "sluice/store/lua_scripts.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <set>
#include <string>
#include <thread>

namespace sluice::test {
namespace {

using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;

const char* const c09_rules = R"(
store: {type: redis-cluster, nodes: [NODES], timeout: 250ms}
identity: {api_key: {header: X-API-Key}}
plans: {free: {limits: []}}
api_keys: {KEYS}
upstreams: {api: {url: UPSTREAM_URL}}
routes:
  - name: sw
    match: {path_prefix: /v1/sw}
    upstream: api
    on_store_failure: fail_open
    limits:
      - {name: cluster_sw, by: api_key, algorithm: sliding_window, rate: 3/1m}
  - name: tb
    match: {path_prefix: /v1/tb}
    upstream: api
    on_store_failure: fail_open
    limits:
      - {name: cluster_tb, by: api_key, rate: 3/1m, burst: 3}
  - name: three
    match: {path_prefix: /v1/three}
    upstream: api
    on_store_failure: fail_open
    limits:
      - {name: LIMIT_A, by: api_key, rate: 5/1h, burst: 5}
      - {name: LIMIT_B, by: ip, rate: 5/1h, burst: 5}
      - {name: LIMIT_C, by: global, rate: 1/1h, burst: 1}
  - name: sharded
    match: {path_prefix: /v1/sharded}
    upstream: api
    on_store_failure: fail_open
    limits:
      - {name: cluster_shards, by: global, rate: 40/1h, burst: 40, shards: 4}
  - name: leased
    match: {path_prefix: /v1/leased}
    upstream: api
    on_store_failure: fail_open
    limits:
      - {name: LEASED, by: global, rate: 50/1h, burst: 50, lease: 10}
      - {name: LIMIT_B, by: ip, rate: 5/1h, burst: 5}
)";

std::string key_name(int i) {
  char b[16];
  std::snprintf(b, sizeof b, "key-%02d", i);
  return b;
}

// The Redis key of a bucket under the default (hash) layout, as the gateway writes it.
std::string redis_key(const std::string& limit, limiter::key_namespace ns,
                      const std::string& value) {
  limiter::limit_check lc;
  lc.key = limiter::bucket_key(limit, ns, value);
  return lua::redis_key(lc, lua::key_layout{});
}

std::uint16_t slot_of(const std::string& limit, limiter::key_namespace ns, const std::string& v) {
  return store::key_hash_slot(redis_key(limit, ns, v));
}

std::uint64_t error_replies(const store::store_stats& s) {
  std::uint64_t n = 0;
  for (auto v : s.error_replies) n += v;
  return n;
}

class cluster_gateway : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string nodes;
    for (const auto p : cluster_.ports()) {
      if (!nodes.empty()) nodes += ", ";
      nodes += "\"127.0.0.1:" + std::to_string(p) + "\"";
    }
    std::string keys;
    for (int i = 1; i <= 20; ++i) keys += (i > 1 ? ", " : "") + key_name(i) + ": free";
    // Three limit names whose buckets (for key-01, 127.0.0.1 and global) are on three masters.
    std::set<std::size_t> used;
    const std::pair<limiter::key_namespace, std::string> who[] = {
        {limiter::key_namespace::api_key, "key-01"},
        {limiter::key_namespace::ip, "127.0.0.1"},
        {limiter::key_namespace::global, ""}};
    for (int w = 0; w < 3; ++w) {
      for (int i = 0; i < 100; ++i) {
        const std::string name = "three_" + std::to_string(w) + "_" + std::to_string(i);
        const auto m = cluster_.master_of_slot(slot_of(name, who[w].first, who[w].second));
        if (m && !used.contains(*m)) {
          used.insert(*m);
          three_[w] = name;
          break;
        }
      }
    }
    ASSERT_EQ(used.size(), 3u) << "no three limit names on three masters";
    // A leased global limit on another master than LIMIT_B's bucket (two slots, two steps).
    const auto b_master =
        cluster_.master_of_slot(slot_of(three_[1], limiter::key_namespace::ip, "127.0.0.1"));
    for (int i = 0; i < 100 && leased_.empty(); ++i) {
      const std::string name = "leased_" + std::to_string(i);
      const auto m = cluster_.master_of_slot(slot_of(name, limiter::key_namespace::global, "*"));
      if (m && m != b_master) leased_ = name;
    }
    ASSERT_FALSE(leased_.empty());
    gateway_ =
        std::make_unique<gateway_fixture>(substitute(c09_rules, {{"NODES", nodes},
                                                                 {"KEYS", keys},
                                                                 {"UPSTREAM_URL", upstream_.url()},
                                                                 {"LIMIT_A", three_[0]},
                                                                 {"LIMIT_B", three_[1]},
                                                                 {"LIMIT_C", three_[2]},
                                                                 {"LEASED", leased_}}),
                                          2);
    ASSERT_EVENTUALLY(5s, gateway_->gateway().stats().store.connected);
    std::this_thread::sleep_for(300ms);  // the second worker's connections, too
  }

  client_response get(const std::string& path, const std::string& key) {
    return test::get(gateway_->port(), path, {{"X-API-Key", key}});
  }

  redis_cluster cluster_;
  upstream_server upstream_;
  std::unique_ptr<gateway_fixture> gateway_;
  std::string three_[3];
  std::string leased_;
};

TEST_F(cluster_gateway, c09_exact_429s_on_every_master_and_a_moved_slot_keeps_its_refusal) {
  std::set<std::size_t> masters;
  clock_type::time_point key01_refused{};
  for (int i = 1; i <= 20; ++i) {
    const auto key = key_name(i);
    for (const char* route : {"sw", "tb"}) {
      const std::string limit = std::string("cluster_") + route;
      const auto m = cluster_.master_of_slot(slot_of(limit, limiter::key_namespace::api_key, key));
      ASSERT_TRUE(m);
      masters.insert(*m);
      for (int n = 0; n < 4; ++n) {
        const auto before_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count();
        const auto r = get(std::string("/v1/") + route, key);
        SCOPED_TRACE(key + " " + route + " #" + std::to_string(n + 1));
        EXPECT_NE(r.header("X-RateLimit-Remaining"), "-1");
        if (n < 3) {
          EXPECT_EQ(r.status, 200u);
          EXPECT_EQ(r.header("X-RateLimit-Remaining"), std::to_string(2 - n));
          continue;
        }
        EXPECT_EQ(r.status, 429u);
        EXPECT_EQ(r.header("X-RateLimit-Remaining"), "0");
        if (std::string(route) == "tb") {
          EXPECT_EQ(r.header("Retry-After"), "20");
          if (i == 1) key01_refused = clock_type::now();
        } else {
          // The previous window's 3 decay to 2 20 s into the next window.
          const double offset = static_cast<double>(before_ms % 60000) / 1000.0;
          const int expected = static_cast<int>(std::ceil(80.0 - offset));
          const int got = std::stoi(r.header("Retry-After"));
          EXPECT_NEAR(got, expected, 1);
        }
      }
    }
  }
  EXPECT_GE(masters.size(), 2u) << "the buckets are all on one master: not exercising the cluster";
  auto st = gateway_->gateway().stats();
  EXPECT_EQ(st.fail_open, 0u);
  EXPECT_EQ(st.store.errors, 0u);
  EXPECT_EQ(error_replies(st.store), 0u);
  EXPECT_EQ(st.allowed, 120u);
  EXPECT_EQ(st.rejected, 40u);

  // Slot move: key-01's cluster_tb bucket goes to another master, with its balance.
  const auto slot = slot_of("cluster_tb", limiter::key_namespace::api_key, "key-01");
  const auto from = cluster_.master_of_slot(slot);
  ASSERT_TRUE(from);
  std::size_t to = *from;
  for (auto m : cluster_.masters())
    if (m != *from) to = m;
  cluster_.move_slot(slot, to);
  ASSERT_LT(clock_type::now() - key01_refused, 15s);
  const auto after = get("/v1/tb", "key-01");
  EXPECT_EQ(after.status, 429u);
  EXPECT_EQ(after.header("X-RateLimit-Remaining"), "0");
  EXPECT_LE(std::stoi(after.header("Retry-After")), 20);
  // Every worker follows the move (each has its own connections and map).
  for (int n = 0; n < 6; ++n) {
    const auto r = get("/v1/tb", "key-01");
    EXPECT_EQ(r.status, 429u) << "after the move, #" << n;
  }
  st = gateway_->gateway().stats();
  EXPECT_EQ(st.fail_open, 0u);
  EXPECT_EQ(st.store.errors, 0u);
  EXPECT_EQ(st.store.error_replies[static_cast<std::size_t>(store::error_kind::crossslot)], 0u);
}

TEST_F(cluster_gateway, three_limits_on_three_masters_through_http_are_all_or_nothing) {
  // LIMIT_C (global, burst 1) admits once: then every request is refused and LIMIT_A and
  // LIMIT_B stay at 4 (a refused request charges nothing).
  const auto first = get("/v1/three", "key-01");
  EXPECT_EQ(first.status, 200u);
  for (int n = 0; n < 3; ++n) {
    const auto r = get("/v1/three", "key-01");
    EXPECT_EQ(r.status, 429u);
    EXPECT_NE(r.header("Retry-After"), "");
  }
  const auto st = gateway_->gateway().stats();
  EXPECT_EQ(st.fail_open, 0u);
  EXPECT_EQ(st.store.errors, 0u);
  EXPECT_EQ(st.store.split_checks, 4u);  // three slots: two steps each
  EXPECT_EQ(st.store.split_commit_refusals + st.store.split_partial_commits, 0u);
  EXPECT_GE(st.store.topology_refreshes, 2u);  // (one per worker at least)
  // The buckets' own state, read from the cluster: LIMIT_A and LIMIT_B were charged once.
  for (int w = 0; w < 2; ++w) {
    const auto ns = w == 0 ? limiter::key_namespace::api_key : limiter::key_namespace::ip;
    const std::string value = w == 0 ? "key-01" : "127.0.0.1";
    const auto key = limiter::bucket_key(three_[w], ns, value);
    const auto at = limiter::packed_address(key, lua::key_layout{}.hash_groups);
    const auto m = cluster_.master_of_slot(store::key_hash_slot(at.key));
    ASSERT_TRUE(m);
    const auto v = cluster_.command(*m, {"HGET", at.key, at.field});
    ASSERT_EQ(v.type, redis_reply::kind::string) << three_[w];
    // The state after the field's 8-byte expiry stamp: level in units, stamp, units/token.
    ASSERT_GE(v.str.size(), 8u + 24u);
    double level = 0, units = 0;
    std::memcpy(&level, v.str.data() + 8, 8);
    std::memcpy(&units, v.str.data() + 8 + 16, 8);
    EXPECT_NEAR(level / units, 4.0, 0.01) << three_[w] << " charged by a refused request";
  }
}

// A sharded global limit on the cluster: its shards are buckets of their own slots, spread
// over at least two masters, and together they never admit more than the limit.
TEST_F(cluster_gateway, sharded_global_limit_spreads_over_masters_and_stays_within_it) {
  // The shards' keys are picked in four quarters of the slot space: with the slots split
  // evenly over three masters (redis-cli --cluster create), they are on all three.
  config::limit l;
  l.name = "cluster_shards";
  l.by = config::identity_kind::global;
  l.shards = 4;
  std::set<std::size_t> masters;
  for (const auto& key : store::spread_shard_keys(l, lua::key_layout{})) {
    limiter::limit_check shard;
    shard.key = key;
    const auto m =
        cluster_.master_of_slot(store::key_hash_slot(lua::redis_key(shard, lua::key_layout{})));
    ASSERT_TRUE(m);
    masters.insert(*m);
  }
  EXPECT_EQ(masters.size(), 3u) << "the shards are not on every master";
  int admitted = 0;
  for (int n = 0; n < 80; ++n) {
    const auto r = get("/v1/sharded", "key-01");
    if (r.status == 200u) {
      ++admitted;
    } else {
      ASSERT_EQ(r.status, 429u);
    }
  }
  EXPECT_LE(admitted, 40);
  EXPECT_GE(admitted, 30);  // 80 requests at random over 4 shards of 10
  const auto st = gateway_->gateway().stats();
  EXPECT_EQ(st.fail_open, 0u);
  EXPECT_EQ(st.store.errors, 0u);
}

// A leased limit in a request decided in two steps (its bucket and LIMIT_B's on two
// masters): LIMIT_B (burst 5) admits 5 requests; the refused ones take no lease and charge
// nothing, so LEASED's bucket lost what the 5 admitted took (leases of up to 10), no more.
TEST_F(cluster_gateway, a_leased_limit_split_over_two_masters_is_charged_only_when_admitted) {
  int admitted = 0;
  for (int n = 0; n < 15; ++n) admitted += get("/v1/leased", "key-01").status == 200u;
  EXPECT_EQ(admitted, 5);
  const auto st = gateway_->gateway().stats();
  EXPECT_EQ(st.fail_open, 0u);
  EXPECT_EQ(st.store.errors, 0u);
  EXPECT_GT(st.store.split_checks, 0u);
  const auto key = limiter::bucket_key(leased_, limiter::key_namespace::global, "*");
  const auto at = limiter::packed_address(key, lua::key_layout{}.hash_groups);
  const auto m = cluster_.master_of_slot(store::key_hash_slot(at.key));
  ASSERT_TRUE(m);
  const auto v = cluster_.command(*m, {"HGET", at.key, at.field});
  ASSERT_EQ(v.type, redis_reply::kind::string);
  ASSERT_GE(v.str.size(), 8u + 24u);
  double level = 0, units = 0;
  std::memcpy(&level, v.str.data() + 8, 8);
  std::memcpy(&units, v.str.data() + 8 + 16, 8);
  // Two workers: each may hold a lease of up to 10 taken by its first admitted request.
  const double left = level / units;
  EXPECT_GE(left, 50.0 - 2 * 10 - 0.01);
  EXPECT_LE(left, 50.0 - 5 + 0.01);
  const auto s = gateway_->gateway().sample();
  EXPECT_GE(s.lease_grants, 1u);
}

}  // namespace
}  // namespace sluice::test
