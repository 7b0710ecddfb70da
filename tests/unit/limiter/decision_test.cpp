// SPDX-License-Identifier: Apache-2.0
#include "sluice/limiter/decision.hpp"

#include <gtest/gtest.h>

#include <map>

namespace sluice::limiter {
namespace {

std::map<std::string, std::string> as_map(const std::vector<header_field>& fields) {
  std::map<std::string, std::string> m;
  for (const auto& [k, v] : fields) m[std::string(k)] = v;
  return m;
}

bucket_params tb(std::int64_t count, std::int64_t period_ms, std::int64_t burst) {
  config::limit_params p;
  p.rate = {count, std::chrono::milliseconds(period_ms)};
  p.burst = burst;
  return bucket_params::from(p);
}

TEST(decision, most_constraining_least_remaining_then_larger_reset_then_first) {
  std::vector<applied_limit> limits = {{"a", {}, tb(10, 1000, 10), false},
                                       {"b", {}, tb(10, 1000, 10), false},
                                       {"c", {}, tb(10, 1000, 10), false}};
  check_outcome o;
  o.allowed = true;
  o.limits = {
      {true, 10, 3, 7000, 0, 100}, {true, 10, 3, 9000, 0, 100}, {true, 10, 3, 9000, 0, 100}};
  EXPECT_EQ(most_constraining(limits, o), 1u);
  o.limits[2].remaining = 2;
  EXPECT_EQ(most_constraining(limits, o), 2u);
  limits[2].shadow = true;  // shadow limits never constrain
  EXPECT_EQ(most_constraining(limits, o), 1u);
}

TEST(decision, headers_render_from_the_outcome) {
  // c01 token-bucket variant, request 2: rate 5/1m burst 5, Remaining 3, Reset 24.
  std::vector<applied_limit> limits = {{"items_key", {}, tb(5, 60000, 5), false}};
  check_outcome o;
  o.allowed = true;
  o.limits = {{true, 5, 3, 23900, 0, 11900}};
  auto h = as_map(quota_headers(limits, o, {}));
  EXPECT_EQ(h["X-RateLimit-Limit"], "5");
  EXPECT_EQ(h["X-RateLimit-Remaining"], "3");
  EXPECT_EQ(h["X-RateLimit-Reset"], "24");
  EXPECT_EQ(h["RateLimit-Policy"], "\"items_key\";q=5;w=60");
  EXPECT_EQ(h["RateLimit"], "\"items_key\";r=3;t=12");
}

TEST(decision, ietf_lists_every_enforced_limit_in_order_and_omits_t_when_full) {
  std::vector<applied_limit> limits = {{"plan", {}, tb(100, 60000, 100), false},
                                       {"shadowed", {}, tb(1, 1000, 1), true},
                                       {"route", {}, tb(10, 1000, 20), false}};
  check_outcome o;
  o.allowed = true;
  o.limits = {
      {true, 100, 100, 0, 0, 0}, {false, 1, 0, 1000, 1000, 1000}, {true, 20, 19, 100, 0, 100}};
  auto h = as_map(quota_headers(limits, o, {}));
  EXPECT_EQ(h["RateLimit-Policy"], "\"plan\";q=100;w=60, \"route\";q=20;w=2");
  EXPECT_EQ(h["RateLimit"], "\"plan\";r=100, \"route\";r=19;t=1");
  EXPECT_EQ(h["X-RateLimit-Limit"], "20");
  config::header_sets none{false, false};
  EXPECT_TRUE(quota_headers(limits, o, none).empty());
  config::header_sets x_only{true, false};
  EXPECT_EQ(quota_headers(limits, o, x_only).size(), 3u);
}

TEST(decision, policy_window_never_advertises_a_faster_rate) {
  EXPECT_EQ(policy_window_seconds(tb(5, 60000, 5)), 60);
  EXPECT_EQ(policy_window_seconds(tb(1, 10000, 2)), 20);
  EXPECT_EQ(policy_window_seconds(tb(3, 1000, 10)), 4);  // 3.33 s rounded up
  EXPECT_EQ(policy_window_seconds(tb(1000000, 1000, 1000000)), 1);
}

TEST(decision, retry_after_is_the_longest_violated_wait_rounded_up_at_least_one) {
  std::vector<applied_limit> limits = {{"a", {}, tb(1, 1000, 1), false},
                                       {"b", {}, tb(1, 1000, 1), false},
                                       {"c", {}, tb(1, 1000, 1), true}};
  check_outcome o;
  o.allowed = false;
  o.limits = {{false, 1, 0, 1000, 200, 200},
              {false, 1, 0, 1000, 9800, 9800},
              {false, 1, 0, 1000, 99000, 0}};
  EXPECT_EQ(retry_after_seconds(limits, o), 10);
  EXPECT_EQ(violated_policies(limits, o), (std::vector<std::string>{"a", "b"}));
  o.limits[1].admits = true;
  EXPECT_EQ(retry_after_seconds(limits, o), 1);  // 200 ms rounds up to 1, never 0
}

TEST(decision, problem_body_names_the_violated_limits) {
  auto body = quota_exceeded_body({"a", "b"}, 12);
  EXPECT_NE(
      body.find("\"type\":\"https://iana.org/assignments/http-problem-types#quota-exceeded\""),
      std::string::npos);
  EXPECT_NE(body.find("\"violated-policies\":[\"a\",\"b\"]"), std::string::npos);
  EXPECT_NE(body.find("\"status\":429"), std::string::npos);
}

}  // namespace
}  // namespace sluice::limiter
