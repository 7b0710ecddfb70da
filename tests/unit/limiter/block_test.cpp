// SPDX-License-Identifier: Apache-2.0
// The penalty box (`block:` of a limit): what it loads as, its place beside the bucket, the
// arithmetic a block applies to a limit's outcome, the guarantee it states, and the exact
// diagnostic of every way to get it wrong.
#include "sluice/limiter/block.hpp"

#include "sluice/config/loader.hpp"
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
         "    match: {path_prefix: /login}\n"
         "    upstream: api\n"
         "    limits:\n"
         "      - " +
         limit + "\n";
}

TEST(block, loads_and_states_its_guarantee) {
  const load_result r =
      load_string(route_with("{name: failed_logins, by: ip, algorithm: fixed_window, rate: 5/10m, "
                             "block: 15m}"),
                  "rules.yaml");
  for (const auto& d : r.diagnostics) ADD_FAILURE() << d.to_string();
  ASSERT_TRUE(r.ok());
  const limit& l = r.value->routes.at(0).limits.at(0);
  EXPECT_EQ(l.block, 15min);
  EXPECT_EQ(limiter::guarantee(l),
            "exact per aligned window: at most 5 units in each 10m window aligned to the store "
            "clock; up to 10 (2x) in a rolling 10m across a window boundary (fixed window); "
            "penalty box (block 15m): a key this limit refuses is refused by it for 15m from "
            "that refusal, on the store's clock and exactly across instances (the block is kept "
            "in the store beside the key's bucket); a refusal during the block does not "
            "lengthen it, and a blocked key is charged nothing");
}

TEST(block, every_algorithm_that_can_refuse_takes_one) {
  for (const std::string algo : {"token_bucket", "fixed_window", "sliding_window", "sliding_log"}) {
    const load_result r = load_string(
        route_with("{name: k, algorithm: " + algo + ", rate: 5/1m, block: 1h}"), "rules.yaml");
    EXPECT_TRUE(r.ok()) << algo;
    if (r.ok()) {
      EXPECT_EQ(r.value->routes.at(0).limits.at(0).block, 1h) << algo;
    }
  }
  // The cap itself is accepted.
  EXPECT_TRUE(load_string(route_with("{name: k, rate: 5/1m, block: 7d}"), "rules.yaml").ok());
}

// A calendar quota refuses too, so it takes a block (docs/operating.md, "The penalty box").
TEST(block, a_calendar_quota_takes_one) {
  const load_result r = load_string(
      route_with("{name: k, algorithm: calendar, rate: 5/month, block: 1h}"), "rules.yaml");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.value->routes.at(0).limits.at(0).block, 1h);
}

struct bad_case {
  std::string name;
  std::string yaml;
  std::vector<std::string> expected;
};

class block_errors : public ::testing::TestWithParam<bad_case> {};

TEST_P(block_errors, exact_diagnostics) {
  EXPECT_EQ(diags(GetParam().yaml), GetParam().expected);
}

const std::string at7 = "rules.yaml:7: routes[0].limits[0].block: ";

INSTANTIATE_TEST_SUITE_P(
    all, block_errors,
    ::testing::Values(
        bad_case{"zero",
                 route_with("{name: k, rate: 5/1m, block: 0}"),
                 {at7 + "block 0 is no block: a block lasts from 1s to 7d (leave block out for "
                        "none)"}},
        bad_case{"zero_seconds",
                 route_with("{name: k, rate: 5/1m, block: 0s}"),
                 {at7 + "block 0s is no block: a block lasts from 1s to 7d (leave block out for "
                        "none)"}},
        bad_case{"negative",
                 route_with("{name: k, rate: 5/1m, block: -15m}"),
                 {at7 + "invalid duration '-15m': expected a whole number and a unit (ms, s, "
                        "m, h, d), such as 250ms or 5s"}},
        bad_case{"unparsable",
                 route_with("{name: k, rate: 5/1m, block: a while}"),
                 {at7 + "invalid duration 'a while': expected a whole number and a unit (ms, "
                        "s, m, h, d), such as 250ms or 5s"}},
        bad_case{"above_the_cap",
                 route_with("{name: k, rate: 5/1m, block: 8d}"),
                 {at7 + "block 8d is longer than the maximum of 7d"}},
        bad_case{"absurd",
                 route_with("{name: k, rate: 5/1m, block: 99999999999999999d}"),
                 {at7 + "block 99999999999999999d is longer than the maximum of 7d"}},
        bad_case{"under_a_second",
                 route_with("{name: k, rate: 5/1m, block: 500ms}"),
                 {at7 + "block 500ms is shorter than 1s (Retry-After counts whole seconds)"}},
        bad_case{"shadow",
                 route_with("{name: k, rate: 5/1m, mode: shadow, block: 15m}"),
                 {at7 + "block applies only to an enforced limit: a shadow limit never refuses "
                        "anybody, so it never blocks anybody (remove block, or mode: shadow)"}},
        bad_case{"concurrency",
                 route_with("{name: k, algorithm: concurrency, max_in_flight: 4, block: 15m}"),
                 {at7 + "block does not apply to a concurrency limit: a slot frees when a request "
                        "ends, so a refusal there says nothing about the caller (use block on a "
                        "rate limit)"}},
        bad_case{"lease",
                 route_with("{name: k, rate: 50/1s, lease: 10, block: 15m}"),
                 {at7 + "block cannot be combined with lease: a worker spends leased tokens "
                        "without asking the store, so a block started elsewhere would not stop "
                        "it"}},
        bad_case{"shards",
                 route_with("{name: g, by: global, rate: 50/1s, shards: 4, block: 1m}"),
                 {at7 + "block cannot be combined with shards: a refusal by one shard would "
                        "block only that shard, while the others go on admitting"}}),
    [](const auto& info) { return info.param.name; });

TEST(block, a_limit_named_twice_must_block_alike) {
  const auto d = diags(
      "upstreams: {api: {url: http://127.0.0.1:8081}}\n"
      "routes:\n"
      "  - name: a\n"
      "    match: {path_prefix: /a}\n"
      "    upstream: api\n"
      "    limits: [{name: k, rate: 5/1m, block: 15m}]\n"
      "  - name: b\n"
      "    match: {path_prefix: /b}\n"
      "    upstream: api\n"
      "    limits: [{name: k, rate: 5/1m}]\n");
  ASSERT_EQ(d.size(), 1u);
  EXPECT_NE(d[0].find("block"), std::string::npos) << d[0];
}

}  // namespace
}  // namespace sluice::config

namespace sluice::limiter {
namespace {

TEST(block, lives_beside_its_bucket_under_its_hash_tag) {
  EXPECT_EQ(block_key("sl:{logins|i|r10.0.0.1}"), "sl:{logins|i|r10.0.0.1}:block");
  const auto alone = block_address({"sl:{logins|i|r10.0.0.1}", ""});
  EXPECT_EQ(alone.key, "sl:{logins|i|r10.0.0.1}:block");
  EXPECT_EQ(alone.field, "");
  const auto packed = block_address(packed_address("sl:{logins|i|r10.0.0.1}", 16));
  EXPECT_EQ(packed.key, packed_address("sl:{logins|i|r10.0.0.1}", 16).key);
  EXPECT_EQ(packed.field, "r10.0.0.1:block");
}

// The outcome of a blocked limit: refuses, Remaining 0, and each time the later of the
// block's end and the bucket's own.
TEST(block, apply_block_takes_the_later_of_block_and_bucket) {
  limit_outcome full{true, 5, 5, 0, 0, 0};
  apply_block(full, 300'000);
  EXPECT_FALSE(full.admits);
  EXPECT_EQ(full.remaining, 0);
  EXPECT_EQ(full.reset_ms, 300'000);
  EXPECT_EQ(full.retry_after_ms, 300'000);
  EXPECT_EQ(full.next_ms, 300'000);

  // An empty bucket whose own times are later than the block's end keeps them.
  limit_outcome empty{false, 5, 0, 600'000, 500'000, 450'000};
  apply_block(empty, 60'000);
  EXPECT_EQ(empty.reset_ms, 600'000);
  EXPECT_EQ(empty.retry_after_ms, 500'000);
  EXPECT_EQ(empty.next_ms, 450'000);

  // A bucket with units left: the next unit comes when the block ends, whatever the bucket's.
  limit_outcome some{true, 5, 3, 400'000, 0, 100'000};
  apply_block(some, 60'000);
  EXPECT_EQ(some.remaining, 0);
  EXPECT_EQ(some.next_ms, 60'000);
  EXPECT_EQ(some.reset_ms, 400'000);
}

}  // namespace
}  // namespace sluice::limiter
