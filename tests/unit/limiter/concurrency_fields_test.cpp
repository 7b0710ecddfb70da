// SPDX-License-Identifier: Apache-2.0
// A concurrency limit's fields (`algorithm: concurrency`, `max_in_flight`, `slot_ttl`): what
// they load as, the Limit and guarantee they state, the RateLimit-Policy they advertise, and
// the exact diagnostic of every way to get them wrong (a reload carrying one keeps the running
// rules: the loader's result is then not ok).
#include "sluice/config/loader.hpp"
#include "sluice/limiter/check.hpp"
#include "sluice/limiter/decision.hpp"
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
std::string route_with(const std::string& limit) {
  return "upstreams: {api: {url: http://127.0.0.1:8081}}\n"
         "routes:\n"
         "  - name: r\n"
         "    match: {path_prefix: /}\n"
         "    upstream: api\n"
         "    limits:\n"
         "      - " +
         limit + "\n";
}

std::shared_ptr<const rules> load_ok(const std::string& yaml) {
  const load_result r = load_string(yaml, "rules.yaml");
  for (const auto& d : r.diagnostics) ADD_FAILURE() << d.to_string();
  return r.value;
}

TEST(concurrency_fields, load_with_the_default_ttl_and_state_their_guarantee) {
  auto r = load_ok(route_with("{name: inflight, algorithm: concurrency, max_in_flight: 4}"));
  ASSERT_TRUE(r);
  const limit& l = r->routes.at(0).limits.at(0);
  EXPECT_EQ(l.algorithm, algorithm::concurrency);
  EXPECT_EQ(l.params.rate.count, 4);
  EXPECT_EQ(l.params.rate.period, 30s);
  const auto b = limiter::bucket_params::for_limit(l, l.params);
  EXPECT_EQ(b.window_limit, 4);
  EXPECT_EQ(b.window_ms, 30'000);
  EXPECT_EQ(b.quota(l.algorithm), 4);
  EXPECT_EQ(limiter::guarantee(l),
            "exact across instances while gateways live: at most 4 requests (and tunnels) of one "
            "key in flight at once; the slots of a gateway that dies without releasing them "
            "(killed, crashed) come back within slot_ttl 30s of its last renewal (renewed every "
            "10s); a gateway cut off from the store for longer than 30s loses its slots while "
            "its requests still run, so others may then be admitted beyond 4 (concurrency)");
  r =
      load_ok(route_with("{name: inflight, algorithm: concurrency, max_in_flight: 1, slot_ttl: "
                         "2s}"));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->routes.at(0).limits.at(0).params.rate.period, 2s);
}

TEST(concurrency_fields, a_region_enforces_its_share_of_the_slots) {
  auto r = load_ok(
      route_with("{name: inflight, algorithm: concurrency, max_in_flight: 9, region_share: 0.5}"));
  ASSERT_TRUE(r);
  const limit& l = r->routes.at(0).limits.at(0);
  EXPECT_EQ(limiter::bucket_params::for_limit(l, l.params).window_limit, 4);  // ⌊9 × 0.5⌋
}

TEST(concurrency_fields, advertise_concurrent_requests_as_the_quota_unit) {
  std::vector<limiter::applied_limit> limits(2);
  limits[0].name = "calls";
  limits[0].algorithm = algorithm::fixed_window;
  limits[0].bucket.window_ms = 60'000;
  limits[0].bucket.window_limit = 100;
  limits[1].name = "inflight";
  limits[1].algorithm = algorithm::concurrency;
  limits[1].bucket.window_ms = 30'000;
  limits[1].bucket.window_limit = 4;
  limiter::check_outcome out;
  out.allowed = true;
  out.limits = {{true, 100, 99, 60'000, 0, 60'000, 0}, {true, 4, 3, 30'000, 0, 1'000, 0}};
  header_sets both;
  std::string lines;
  limiter::append_quota_lines(lines, limits, out, both);
  EXPECT_EQ(
      lines,
      "X-RateLimit-Limit: 4\r\n"
      "X-RateLimit-Remaining: 3\r\n"
      "X-RateLimit-Reset: 30\r\n"
      "RateLimit-Policy: \"calls\";q=100;w=60, \"inflight\";q=4;qu=\"concurrent-requests\"\r\n"
      "RateLimit: \"calls\";r=99;t=60, \"inflight\";r=3;t=1\r\n");
}

struct mistake {
  std::string name;
  std::string yaml;
  std::vector<std::string> expected;
};

void PrintTo(const mistake& m, std::ostream* os) {
  *os << m.name;
}

class concurrency_mistakes : public ::testing::TestWithParam<mistake> {};

TEST_P(concurrency_mistakes, are_reported_exactly) {
  EXPECT_EQ(diags(GetParam().yaml), GetParam().expected);
}

const std::vector<mistake> mistake_table = {
    {"zero_in_flight",
     route_with("{name: c, algorithm: concurrency, max_in_flight: 0}"),
     {"rules.yaml:7: routes[0].limits[0].max_in_flight: max_in_flight must be at least 1, got "
      "0"}},
    {"too_many_in_flight",
     route_with("{name: c, algorithm: concurrency, max_in_flight: 10001}"),
     {"rules.yaml:7: routes[0].limits[0].max_in_flight: max_in_flight must be at most 10000, "
      "got 10001"}},
    {"no_max_in_flight",
     route_with("{name: c, algorithm: concurrency}"),
     {"rules.yaml:7: routes[0].limits[0]: missing required key 'max_in_flight'"}},
    {"a_rate",
     route_with("{name: c, algorithm: concurrency, max_in_flight: 2, rate: 10/1s}"),
     {"rules.yaml:7: routes[0].limits[0].rate: rate does not apply to a concurrency limit, "
      "which counts requests in flight (max_in_flight: N)"}},
    {"a_burst",
     route_with("{name: c, algorithm: concurrency, max_in_flight: 2, burst: 3}"),
     {"rules.yaml:7: routes[0].limits[0].burst: burst does not apply to a concurrency limit, "
      "which counts requests in flight (max_in_flight: N)"}},
    {"plans",
     route_with("{name: c, algorithm: concurrency, max_in_flight: 2, plans: {pro: {rate: "
                "1/1s}}}"),
     {"rules.yaml:7: routes[0].limits[0].plans: plans overrides are not supported on a "
      "concurrency limit (one max_in_flight for every caller; declare a concurrency limit in "
      "each plan instead)"}},
    {"ttl_too_short",
     route_with("{name: c, algorithm: concurrency, max_in_flight: 2, slot_ttl: 500ms}"),
     {"rules.yaml:7: routes[0].limits[0].slot_ttl: slot_ttl 500ms is shorter than the minimum "
      "of 1s (slots are renewed every slot_ttl / 3)"}},
    {"ttl_too_long",
     route_with("{name: c, algorithm: concurrency, max_in_flight: 2, slot_ttl: 2h}"),
     {"rules.yaml:7: routes[0].limits[0].slot_ttl: slot_ttl 2h is longer than the maximum of "
      "1h"}},
    {"in_flight_on_a_bucket",
     route_with("{name: c, rate: 10/1s, max_in_flight: 2}"),
     {"rules.yaml:7: routes[0].limits[0].max_in_flight: max_in_flight applies only to "
      "algorithm: concurrency; a token_bucket limit counts units per period (rate:)"}},
    {"ttl_on_a_window",
     route_with("{name: c, algorithm: fixed_window, rate: 10/1s, slot_ttl: 5s}"),
     {"rules.yaml:7: routes[0].limits[0].slot_ttl: slot_ttl applies only to algorithm: "
      "concurrency; a fixed_window limit counts units per period (rate:)"}},
    {"a_lease",
     route_with("{name: c, algorithm: concurrency, max_in_flight: 2, lease: 1}"),
     {"rules.yaml:7: routes[0].limits[0].lease: lease applies only to token_bucket; a "
      "concurrency limit has no tokens to hand out ahead"}},
    {"shards",
     route_with("{name: c, by: global, algorithm: concurrency, max_in_flight: 2, shards: 2}"),
     {"rules.yaml:7: routes[0].limits[0].shards: shards apply only to token_bucket; a "
      "concurrency limit cannot be split into buckets of a share of the rate each"}},
};

INSTANTIATE_TEST_SUITE_P(all, concurrency_mistakes, ::testing::ValuesIn(mistake_table),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace sluice::config
