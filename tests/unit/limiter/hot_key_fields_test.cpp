// SPDX-License-Identifier: Apache-2.0
// The hot-key fields of a limit (`lease`, `lease_time`, `shards`, `region_share`) and
// `store.region_share`: what they load as, the buckets they make (limit::enforced), the
// guarantee they state, and the exact diagnostic of every way to get them wrong.
#include "sluice/config/loader.hpp"
#include "sluice/limiter/check.hpp"
#include "sluice/limiter/guarantee.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace sluice::config {
namespace {

using namespace std::chrono_literals;

std::vector<std::string> diags(std::string_view yaml) {
  const load_result r = load_string(yaml, "rules.yaml");
  std::vector<std::string> out;
  for (const auto& d : r.diagnostics) out.push_back(d.to_string());
  EXPECT_EQ(r.ok(), out.empty());
  return out;
}

// Line 1 the upstream, line 2 `routes:`, the route from line 3, its limit on line 7.
std::string route_with(const std::string& limit, const std::string& before = "") {
  return before +
         "upstreams: {api: {url: http://127.0.0.1:8081}}\n"
         "routes:\n"
         "  - name: r\n"
         "    match: {path_prefix: /}\n"
         "    upstream: api\n"
         "    limits:\n"
         "      - " +
         limit + "\n";
}

const limit& only_limit(const std::shared_ptr<const rules>& r) {
  return r->routes.at(0).limits.at(0);
}

std::shared_ptr<const rules> load_ok(const std::string& yaml) {
  const load_result r = load_string(yaml, "rules.yaml");
  for (const auto& d : r.diagnostics) ADD_FAILURE() << d.to_string();
  return r.value;
}

TEST(hot_key_fields, lease_loads_with_its_default_time_and_states_its_bound) {
  auto r = load_ok(route_with("{name: hot, by: global, rate: 1000/1s, burst: 200, lease: 50}"));
  ASSERT_TRUE(r);
  const limit& l = only_limit(r);
  EXPECT_EQ(l.lease, 50);
  EXPECT_EQ(l.lease_time, 250ms);
  EXPECT_EQ(l.shards, 1u);
  EXPECT_EQ(l.region_share, 1.0);
  EXPECT_EQ(limiter::guarantee(l),
            "exact: at most 200 + 1000/1s x w units in any interval w (token bucket, burst 200); "
            "with token leases of up to 50 tokens per worker (lease_time 250ms): at most 50 x "
            "workers x instances units above that in any interval (tokens a worker took ahead "
            "and spends itself); tokens a lease leaves unused go back with that worker's next "
            "check of the bucket, or are lost (refusing early, never admitting late)");
  r = load_ok(route_with("{name: hot, rate: 10/1s, lease: 5, lease_time: 2s}"));
  ASSERT_TRUE(r);
  EXPECT_EQ(only_limit(r).lease_time, 2s);
}

TEST(hot_key_fields, shards_split_rate_and_burst_exactly) {
  auto r = load_ok(route_with("{name: all, by: global, rate: 1000/1s, burst: 100, shards: 4}"));
  ASSERT_TRUE(r);
  const limit& l = only_limit(r);
  EXPECT_EQ(l.shards, 4u);
  const limit_params b = l.enforced(l.params);
  EXPECT_EQ(b.rate.count, 1000);
  EXPECT_EQ(b.rate.period, 4s);  // 1000 per 4 s: a quarter of the rate, exactly
  EXPECT_EQ(b.burst, 25);
  const auto bucket = limiter::bucket_params::for_limit(l, l.params);
  EXPECT_EQ(bucket.burst, 25);
  EXPECT_EQ(bucket.refill_per_ms * 4'000, bucket.units_per_token * 1'000);
  EXPECT_EQ(limiter::hot_key_caveats(l, l.params),
            "; split into 4 shards of rate 1000/4s and burst 25, each request charged to one at "
            "random: never above the limit (the shards add up to at most it), but a request may "
            "be refused while other shards hold tokens (up to 75)");
}

TEST(hot_key_fields, region_share_scales_from_the_store_or_the_limit) {
  auto r =
      load_ok(route_with("{name: k, rate: 100/1m, burst: 10}", "store: {region_share: 0.5}\n"));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->store.region_share, 0.5);
  const limit& l = only_limit(r);
  EXPECT_EQ(l.region_share, 0.5);
  limit_params b = l.enforced(l.params);
  EXPECT_EQ(b.rate.count, 100);
  EXPECT_EQ(b.rate.period, 2min);  // 100 per 2 min: half the rate
  EXPECT_EQ(b.burst, 5);
  EXPECT_NE(limiter::guarantee(l).find("; in this region: share 0.5000 of it against this "
                                       "region's own store (exact: at most 5 + 100/2m x w units"),
            std::string::npos)
      << limiter::guarantee(l);

  // A limit's own share wins; a window keeps its length and counts its share.
  r = load_ok(route_with("{name: w, algorithm: fixed_window, rate: 90/1m, region_share: 0.34}",
                         "store: {region_share: 0.5}\n"));
  ASSERT_TRUE(r);
  b = only_limit(r).enforced(only_limit(r).params);
  EXPECT_EQ(b.rate.count, 30);  // ⌊90 × 0.34⌋
  EXPECT_EQ(b.rate.period, 1min);

  // ⌈60,000 / 0.3⌉ ms: never more than the share.
  r = load_ok(route_with("{name: t, rate: 7/1m, region_share: 0.3}"));
  ASSERT_TRUE(r);
  b = only_limit(r).enforced(only_limit(r).params);
  EXPECT_EQ(b.rate.period, 200'000ms);
  EXPECT_EQ(b.burst, 2);  // ⌊7 × 0.3⌋
}

TEST(hot_key_fields, a_limit_of_one_name_must_agree_on_them) {
  EXPECT_EQ(diags("upstreams: {api: {url: http://127.0.0.1:8081}}\n"
                  "routes:\n"
                  "  - name: a\n"
                  "    match: {path_prefix: /a}\n"
                  "    upstream: api\n"
                  "    limits: [{name: hot, rate: 10/1s, lease: 5}]\n"
                  "  - name: b\n"
                  "    match: {path_prefix: /b}\n"
                  "    upstream: api\n"
                  "    limits: [{name: hot, rate: 10/1s, lease: 4}]\n"),
            std::vector<std::string>{
                "rules.yaml:10: routes[1].limits[0]: limit 'hot' differs in lease from "
                "routes[0].limits[0] (line 6); one name is one bucket, so every definition must be "
                "identical"});
}

struct mistake {
  const char* name;
  std::string yaml;
  std::vector<std::string> expected;
};

void PrintTo(const mistake& m, std::ostream* os) {
  *os << m.name;
}

class hot_key_mistakes : public ::testing::TestWithParam<mistake> {};

TEST_P(hot_key_mistakes, are_reported_exactly) {
  EXPECT_EQ(diags(GetParam().yaml), GetParam().expected);
}

const std::vector<mistake> mistake_table = {
    {"lease_on_a_window",
     route_with("{name: w, algorithm: fixed_window, rate: 10/1s, lease: 2}"),
     {"rules.yaml:7: routes[0].limits[0].lease: lease applies only to token_bucket; a "
      "fixed_window limit has no tokens to hand out ahead"}},
    {"lease_above_the_burst",
     route_with("{name: k, rate: 10/1s, burst: 4, lease: 5}"),
     {"rules.yaml:7: routes[0].limits[0].lease: lease 5 is larger than the burst 4 of rate "
      "10/1s: a worker cannot take more than the bucket holds"}},
    {"lease_above_a_shard",
     route_with("{name: g, by: global, rate: 100/1s, burst: 100, shards: 4, lease: 30}"),
     {"rules.yaml:7: routes[0].limits[0].lease: lease 30 is larger than the burst 25 of one "
      "bucket of rate 100/1s: a worker cannot take more than the bucket holds"}},
    {"lease_above_a_plan_burst",
     route_with("{name: k, rate: 10/1s, lease: 5, plans: {free: {rate: 2/1s}}}",
                "plans: {free: {}}\n"),
     {"rules.yaml:8: routes[0].limits[0].lease: lease 5 is larger than the burst 2 of rate "
      "2/1s (routes[0].limits[0].plans.free): a worker cannot take more than the bucket "
      "holds"}},
    {"lease_zero",
     route_with("{name: k, rate: 10/1s, lease: 0}"),
     {"rules.yaml:7: routes[0].limits[0].lease: lease must be at least 1, got 0"}},
    {"lease_time_without_lease",
     route_with("{name: k, rate: 10/1s, lease_time: 1s}"),
     {"rules.yaml:7: routes[0].limits[0].lease_time: lease_time needs a lease (lease: N)"}},
    {"shards_on_a_per_key_limit",
     route_with("{name: k, by: api_key, rate: 10/1s, shards: 2}"),
     {"rules.yaml:7: routes[0].limits[0].shards: shards apply only to a by: global limit (the "
      "buckets of a per-caller limit are already spread over the store, one per caller)"}},
    {"shards_on_a_window",
     route_with("{name: g, by: global, algorithm: sliding_window, rate: 10/1s, shards: 2}"),
     {"rules.yaml:7: routes[0].limits[0].shards: shards apply only to token_bucket; a "
      "sliding_window limit cannot be split into buckets of a share of the rate each"}},
    {"shards_above_the_burst",
     route_with("{name: g, by: global, rate: 10/1s, burst: 3, shards: 4}"),
     {"rules.yaml:7: routes[0].limits[0].shards: shards 4 leave each shard no token of burst 3 "
      "(each shard holds burst / shards)"}},
    {"cost_above_a_shard",
     "upstreams: {api: {url: http://127.0.0.1:8081}}\n"
     "routes:\n"
     "  - name: r\n"
     "    match: {path_prefix: /}\n"
     "    upstream: api\n"
     "    cost: 5\n"
     "    limits:\n"
     "      - {name: g, by: global, rate: 20/1s, shards: 8}\n",
     {"rules.yaml:8: routes[0].limits[0]: cost 5 can never be admitted by burst 2 of one bucket "
      "(burst 20 split by shards or region_share)"}},
    {"region_share_above_one",
     route_with("{name: k, rate: 10/1s, region_share: 1.5}"),
     {"rules.yaml:7: routes[0].limits[0].region_share: region_share must be in (0, 1], got 1.5"}},
    {"region_share_not_a_number",
     route_with("{name: k, rate: 10/1s, region_share: half}"),
     {"rules.yaml:7: routes[0].limits[0].region_share: expected a number, got 'half'"}},
    {"store_region_share_zero",
     route_with("{name: k, rate: 10/1s}", "store: {region_share: 0}\n"),
     {"rules.yaml:1: store.region_share: region_share must be in (0, 1], got 0"}},
};

INSTANTIATE_TEST_SUITE_P(config, hot_key_mistakes, ::testing::ValuesIn(mistake_table),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace sluice::config
