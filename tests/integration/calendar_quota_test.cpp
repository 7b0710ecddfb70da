// SPDX-License-Identifier: Apache-2.0
// Calendar quotas and near-limit warnings through real HTTP. A monthly quota on a redis-server
// whose wall clock is stepped (tests/preload/clock_step.cpp) from five seconds before a month
// boundary to just after it: the count resets exactly at the boundary on the store's clock,
// with Reset, RateLimit `t` and Retry-After counted to it (the store time of each decision is
// read from the decision_time_header the upstream receives). The same on a three-master Redis
// Cluster whose nodes all read one offset file (so the cluster's clock steps as one; the nodes'
// cluster-node-timeout is longer than the step, so no node is taken for failed by it).
// `warn_at` on the memory store, on Redis and on a Redis Cluster: the exact
// X-RateLimit-Warning on forwarded responses and on a 429, the crossing counted once, and
// /admin/explain's period end.
// sluice-test-support: gateway_fixture redis_cluster upstream_server http_client

#include "harness.hpp"

#include "sluice/limiter/calendar.hpp"
#include "sluice/observability/admin.hpp"
#include "support/redis_cluster.hpp"
#include "support/temp_dir.hpp"

#include <boost/json.hpp>

#include <ctime>
#include <fstream>

namespace sluice::test {
namespace {

std::int64_t host_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::int64_t utc(int y, int mo, int d) {
  std::tm t{};
  t.tm_year = y - 1900;
  t.tm_mon = mo - 1;
  t.tm_mday = d;
  return static_cast<std::int64_t>(::timegm(&t)) * 1000;
}

std::int64_t ceil_s(std::int64_t ms) {
  return (ms + 999) / 1000;
}

/// Polls `done` every 10 ms for up to `limit`.
template <class F>
bool poll_until(F done, std::chrono::milliseconds limit = std::chrono::seconds(5)) {
  return eventually(done, limit);
}

constexpr const char* calendar_rules = R"(
store: STORE
decision_time_header: X-Decided-At
identity: {api_key: {header: X-API-Key}}
plans: {free: {limits: [{name: monthly, by: api_key, algorithm: calendar, rate: 3/month,
                         warn_at: 60%}]}}
api_keys: {key-a: free}
upstreams: {api: {url: UPSTREAM_URL}}
routes:
  - name: items
    match: {path_prefix: /v1/items}
    upstream: api
)";

/// The environment of a redis-server whose wall clock is the host's plus the whole seconds in
/// `offset_file` (tests/preload/clock_step.cpp).
std::vector<std::string> stepped_clock_env(const std::string& offset_file) {
  return {std::string("LD_PRELOAD=") + SLUICE_CLOCK_STEP_PRELOAD,
          "SLUICE_CLOCK_OFFSET_FILE=" + offset_file};
}

/// The monthly quota across the boundary of February 2027 on a store (rules file `store`) whose
/// clock is stepped by writing `offset_file`.
void monthly_count_resets_at_the_boundary(const std::string& offset_file,
                                          const std::string& store) {
  const auto set_store_clock = [&](std::int64_t target_ms) {
    std::ofstream(offset_file) << (target_ms - host_ms()) / 1000;
  };
  const std::int64_t boundary = utc(2027, 2, 1);
  upstream_server upstream;
  gateway_fixture gw(
      substitute(calendar_rules, {{"UPSTREAM_URL", upstream.url()}, {"STORE", store}}));
  // Jan 31 23:59:55 on the store's clock, within a second (the offset is whole seconds).
  set_store_clock(boundary - 5'000);
  const header_list key{{"X-API-Key", "key-a"}};
  std::int64_t last_decided = 0;
  for (int i = 0; i < 3; ++i) {
    const auto r = get(gw.port(), "/v1/items", key);
    ASSERT_EQ(r.status, 200u) << r.body;
    last_decided = std::stoll(upstream.requests().back().header("X-Decided-At"));
    ASSERT_LT(last_decided, boundary) << "the store's clock must still be in January";
    ASSERT_GE(last_decided, boundary - 6'000);
    const std::int64_t to_end = ceil_s(boundary - last_decided);
    expect_row(r, 200, 3, 2 - i, to_end, -1, "january #" + std::to_string(i + 1));
    EXPECT_EQ(r.header("RateLimit-Policy"), "\"monthly\";q=3;w=2678400");  // January: 31 days
    EXPECT_EQ(r.header("RateLimit"),
              "\"monthly\";r=" + std::to_string(2 - i) + ";t=" + std::to_string(to_end));
    // warn_at 60 %: past it once 2 of 3 are used (2 >= ceil(1.8)).
    EXPECT_EQ(r.header("X-RateLimit-Warning"), i == 0 ? "" : "\"monthly\"");
  }
  // Spent: refused until the boundary, Retry-After counted to it.
  const auto refused = get(gw.port(), "/v1/items", key);
  const std::int64_t most = ceil_s(boundary - last_decided);
  expect_row(refused, 429, 3, 0, -1, -1, "spent");
  const std::int64_t retry = std::stoll(refused.header("Retry-After"));
  EXPECT_GE(retry, 1);
  EXPECT_LE(retry, most);
  EXPECT_EQ(refused.header("X-RateLimit-Reset"), std::to_string(retry));
  EXPECT_EQ(refused.header("RateLimit"), "\"monthly\";r=0;t=" + std::to_string(retry));
  EXPECT_EQ(refused.header("X-RateLimit-Warning"), "\"monthly\"");
  EXPECT_EQ(upstream.request_count(), 3u);

  // Step the store's clock over the boundary: February's count starts at 0, seconds (not 30
  // days) after the first request. A cached refusal is kept at most 1 s, so poll.
  set_store_clock(boundary + 2'000);
  client_response admitted;
  ASSERT_TRUE(poll_until([&] {
    admitted = get(gw.port(), "/v1/items", key);
    return admitted.status == 200;
  })) << admitted.status;
  const std::int64_t decided = std::stoll(upstream.requests().back().header("X-Decided-At"));
  EXPECT_GE(decided, boundary);
  EXPECT_LT(decided, boundary + 60'000);
  const std::int64_t feb_end = utc(2027, 3, 1);
  expect_row(admitted, 200, 3, 2, ceil_s(feb_end - decided), -1, "february #1");
  EXPECT_EQ(admitted.header("RateLimit-Policy"), "\"monthly\";q=3;w=2419200");  // 28 days
  EXPECT_FALSE(admitted.has("X-RateLimit-Warning"));

  // /admin/explain shows the period and its end, in the limit's zone.
  observability::explain_query q;
  q.path = "/v1/items";
  q.api_key = "key-a";
  const auto text = gw.gateway().explain(q);
  ASSERT_TRUE(text);
  const auto doc = boost::json::parse(*text).as_object();
  const auto& now = doc.at("limits").as_array().at(0).as_object().at("now").as_object();
  EXPECT_EQ(now.at("period_start").as_string(), "2027-02-01T00:00:00+00:00");
  EXPECT_EQ(now.at("period_end").as_string(), "2027-03-01T00:00:00+00:00");
  EXPECT_EQ(now.at("period_end_ms").as_int64(), feb_end);
  EXPECT_EQ(now.at("remaining").as_int64(), 1);  // as the next request's headers would say
  EXPECT_EQ(now.at("past_warn_at").as_bool(), true);
}

TEST(calendar_quota, monthly_count_resets_at_the_boundary_on_a_stepped_store_clock) {
  temp_dir dir("calendar-step");
  const std::string offset_file = (dir.path / "offset").string();
  std::ofstream(offset_file) << "0";
  redis_server redis({}, stepped_clock_env(offset_file));
  monthly_count_resets_at_the_boundary(
      offset_file,
      "{type: redis, address: \"127.0.0.1:" + std::to_string(redis.port()) + "\", timeout: 250ms}");
}

TEST(calendar_quota, monthly_count_resets_at_the_boundary_on_a_stepped_cluster_clock) {
  temp_dir dir("calendar-step-cluster");
  const std::string offset_file = (dir.path / "offset").string();
  std::ofstream(offset_file) << "0";
  // The step is about two months: a node timeout of a year keeps the nodes from failing each
  // other when their clocks jump together.
  redis_cluster cluster({.replicas_per_master = 0,
                         .node_timeout = std::chrono::hours(24 * 365),
                         .env = stepped_clock_env(offset_file)});
  monthly_count_resets_at_the_boundary(offset_file, cluster.store_yaml());
}

constexpr const char* warning_rules = R"(
store: STORE
identity: {api_key: {header: X-API-Key}}
plans: {free: {limits: [{name: plan_hour, by: api_key, rate: 100/1h, burst: 100}]}}
api_keys: {key-a: free}
upstreams: {api: {url: UPSTREAM_URL}}
routes:
  - name: items
    match: {path_prefix: /v1/items}
    upstream: api
    limits:
      - {name: tb, by: api_key, rate: 10/1h, burst: 10, warn_at: 80%}
      - {name: daily, by: api_key, algorithm: calendar, rate: 20/day, warn_at: 0.25}
)";

/// warn_at on two limits of a route through the gateway `gw` (rules: warning_rules).
void header_past_the_threshold_and_one_crossing_counted(gateway_fixture& gw) {
  const header_list key{{"X-API-Key", "key-a"}};
  for (int i = 1; i <= 10; ++i) {
    const auto r = get(gw.port(), "/v1/items", key);
    ASSERT_EQ(r.status, 200u) << i;
    // daily: past 25 % of 20 from the 5th request; tb: past 80 % of 10 from the 8th.
    std::string expected;
    if (i >= 8)
      expected = "\"tb\", \"daily\"";
    else if (i >= 5)
      expected = "\"daily\"";
    EXPECT_EQ(r.header("X-RateLimit-Warning"), expected) << "request " << i;
  }
  const auto refused = get(gw.port(), "/v1/items", key);
  EXPECT_EQ(refused.status, 429u);
  EXPECT_EQ(refused.header("X-RateLimit-Warning"), "\"tb\", \"daily\"");
  // Each limit crossed its threshold once; plan_hour has no warn_at and is not listed.
  const auto s = gw.gateway().sample();
  const std::vector<std::pair<std::string, std::uint64_t>> expected{{"daily", 1}, {"tb", 1}};
  EXPECT_EQ(s.quota_warnings, expected);
}

class near_limit_warning : public ::testing::TestWithParam<store_kind> {};

TEST_P(near_limit_warning, header_past_the_threshold_and_one_crossing_counted) {
  world w(GetParam(), warning_rules);
  header_past_the_threshold_and_one_crossing_counted(*w.gateway);
}

INSTANTIATE_TEST_SUITE_P(stores, near_limit_warning,
                         ::testing::Values(store_kind::memory, store_kind::redis), store_name);

TEST(near_limit_warning_cluster, header_past_the_threshold_and_one_crossing_counted) {
  redis_cluster cluster({.replicas_per_master = 0, .env = {}});
  upstream_server upstream;
  gateway_fixture gw(substitute(
      warning_rules, {{"UPSTREAM_URL", upstream.url()}, {"STORE", cluster.store_yaml()}}));
  header_past_the_threshold_and_one_crossing_counted(gw);
}

}  // namespace
}  // namespace sluice::test
