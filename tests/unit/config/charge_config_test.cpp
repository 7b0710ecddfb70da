// SPDX-License-Identifier: Apache-2.0
// `charge:` of a limit (config::charge_rule): what each form loads as, and the exact
// diagnostic of every way to get it wrong.
#include "sluice/config/loader.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace sluice::config {
namespace {

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
         "    match: {path_prefix: /v1}\n"
         "    upstream: api\n"
         "    limits:\n"
         "      - " +
         limit + "\n";
}

const limit& only_limit(const load_result& r) {
  return r.value->routes.at(0).limits.at(0);
}

TEST(charge, when_status_loads_statuses_and_classes) {
  const load_result r =
      load_string(route_with("{name: failed_logins, by: ip, algorithm: fixed_window, rate: 5/10m, "
                             "charge: {when_status: [401, 403, \"5xx\"]}}"),
                  "rules.yaml");
  for (const auto& d : r.diagnostics) ADD_FAILURE() << d.to_string();
  ASSERT_TRUE(r.ok());
  const charge_rule& c = only_limit(r).charge;
  EXPECT_EQ(c.what, charge_rule::kind::when_status);
  EXPECT_EQ(c.statuses, (std::vector<unsigned>{401, 403}));
  for (unsigned s : {401u, 403u, 500u, 503u, 599u}) EXPECT_TRUE(c.matches(s)) << s;
  for (unsigned s : {0u, 200u, 302u, 400u, 404u, 429u, 600u}) EXPECT_FALSE(c.matches(s)) << s;
}

TEST(charge, reserve_and_settle_load) {
  const load_result r = load_string(
      route_with("{name: tokens, by: api_key, rate: 10000/1h, charge: {reserve: {header: "
                 "X-Max-Tokens, max: 4000}, settle: {json: usage.total_tokens}, fallback: 500}}"),
      "rules.yaml");
  for (const auto& d : r.diagnostics) ADD_FAILURE() << d.to_string();
  ASSERT_TRUE(r.ok());
  const charge_rule& c = only_limit(r).charge;
  EXPECT_EQ(c.what, charge_rule::kind::settle);
  EXPECT_EQ(c.reserve_header, "X-Max-Tokens");
  EXPECT_EQ(c.reserve_max, 4000);
  EXPECT_EQ(c.settle_path_text, "usage.total_tokens");
  ASSERT_EQ(c.settle_path.size(), 2u);
  EXPECT_EQ(c.settle_path[1].member, "total_tokens");
  EXPECT_EQ(c.fallback, 500);

  const load_result fixed =
      load_string(route_with("{name: tokens, rate: 100/1m, charge: {reserve: 10, settle: {header: "
                             "X-Usage-Tokens}}}"),
                  "rules.yaml");
  ASSERT_TRUE(fixed.ok());
  EXPECT_EQ(only_limit(fixed).charge.reserve, 10);
  EXPECT_EQ(only_limit(fixed).charge.settle_header, "X-Usage-Tokens");
  EXPECT_EQ(only_limit(fixed).charge.fallback, -1);  // fallback: reserve
}

struct bad_case {
  std::string name;
  std::string yaml;
  std::vector<std::string> expected;
};

class charge_errors : public ::testing::TestWithParam<bad_case> {};

TEST_P(charge_errors, exact_diagnostics) {
  EXPECT_EQ(diags(GetParam().yaml), GetParam().expected);
}

const std::string at7 = "rules.yaml:7: routes[0].limits[0].charge";

INSTANTIATE_TEST_SUITE_P(
    all, charge_errors,
    ::testing::Values(
        bad_case{"empty_list",
                 route_with("{name: k, rate: 5/1m, charge: {when_status: []}}"),
                 {at7 + ".when_status: when_status lists no status: name at least one status "
                        "(401) or class (\"5xx\")"}},
        bad_case{"unknown_status",
                 route_with("{name: k, rate: 5/1m, charge: {when_status: [401, 600]}}"),
                 {at7 + ".when_status[1]: unknown status 600: a response status is 100 .. 599"}},
        bad_case{"bad_class",
                 route_with("{name: k, rate: 5/1m, charge: {when_status: [\"6xx\"]}}"),
                 {at7 + ".when_status[0]: unknown status class '6xx'; expected 1xx, 2xx, 3xx, "
                        "4xx or 5xx"}},
        bad_case{"not_a_status",
                 route_with("{name: k, rate: 5/1m, charge: {when_status: [unauthorized]}}"),
                 {at7 + ".when_status[0]: unknown status 'unauthorized': write a status (401) "
                        "or a class (\"4xx\")"}},
        bad_case{"inexact_with_debt",
                 route_with("{name: k, rate: 1/1h, burst: 2000000000, charge: {reserve: 10, "
                            "settle: {header: X-U}}}"),
                 {at7 + ": charge needs the limit's arithmetic to stay exact with a debt of one "
                        "Limit: its capacity (burst x ms per token) or a window's count x ms "
                        "must be at most 2^52"}},
        bad_case{"both_kinds",
                 route_with("{name: k, rate: 5/1m, charge: {when_status: [401], reserve: 1}}"),
                 {at7 + ".reserve: reserve cannot be combined with when_status: a limit is "
                        "either charged by response status or reserved and settled from the "
                        "response"}},
        bad_case{"no_settle",
                 route_with("{name: k, rate: 5/1m, charge: {reserve: 1}}"),
                 {at7 + ": missing required key 'settle' ({header: NAME} or {json: PATH})"}},
        bad_case{"both_sources",
                 route_with("{name: k, rate: 5/1m, charge: {reserve: 1, settle: {header: X-U, "
                            "json: usage.total_tokens}}}"),
                 {at7 + ".settle: settle names one source: {header: NAME} or {json: PATH}, not "
                        "both"}},
        bad_case{"bad_path",
                 route_with("{name: k, rate: 5/1m, charge: {reserve: 1, settle: {json: "
                            "usage..total}}}"),
                 {at7 + ".settle.json: invalid JSON path 'usage..total': empty member name at "
                        "offset 6"}},
        bad_case{"no_max",
                 route_with("{name: k, rate: 5/1m, charge: {reserve: {header: X-Max-Tokens}, "
                            "settle: {header: X-U}}}"),
                 {at7 + ".reserve: missing required key 'max' (the most units a request header "
                        "may reserve)"}},
        bad_case{"reserve_above_the_limit",
                 route_with("{name: k, rate: 5/1m, charge: {reserve: 6, settle: {header: X-U}}}"),
                 {"rules.yaml:7: routes[0].limits[0]: cost 6 can never be admitted by burst 5"}},
        bad_case{"shadow",
                 route_with("{name: k, rate: 5/1m, mode: shadow, charge: {when_status: [401]}}"),
                 {at7 + ": charge applies only to an enforced limit: a shadow limit is decided "
                        "as if alone and never settled (remove charge, or mode: shadow)"}},
        bad_case{"sliding_log",
                 route_with("{name: k, algorithm: sliding_log, rate: 5/1m, charge: "
                            "{when_status: [401]}}"),
                 {at7 + ": charge applies to token_bucket, fixed_window and sliding_window; a "
                        "sliding_log limit cannot be settled after the response"}},
        bad_case{"lease",
                 route_with("{name: k, rate: 50/1s, lease: 10, charge: {when_status: [401]}}"),
                 {at7 + ": charge cannot be combined with lease: leased tokens are spent by a "
                        "worker without the store, and a settlement goes to the store"}},
        bad_case{"shards",
                 route_with("{name: k, by: global, rate: 50/1s, shards: 4, charge: "
                            "{when_status: [401]}}"),
                 {at7 + ": charge cannot be combined with shards: a request is charged to one "
                        "shard at random, and its settlement must reach that same bucket"}}),
    [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace sluice::config
