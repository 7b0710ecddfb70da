// SPDX-License-Identifier: Apache-2.0
#include "sluice/limiter/guarantee.hpp"

#include <gtest/gtest.h>

namespace sluice::limiter {
namespace {

config::limit_params params(std::int64_t count, std::int64_t period_ms, std::int64_t burst = 0) {
  config::limit_params p;
  p.rate = {count, std::chrono::milliseconds(period_ms)};
  p.burst = burst;
  return p;
}

TEST(guarantee, token_bucket_and_gcra_are_exact_with_their_burst) {
  EXPECT_EQ(guarantee(config::algorithm::token_bucket, params(5, 60'000, 10)),
            "exact: at most 10 + 5/1m x w units in any interval w (token bucket, burst 10)");
  EXPECT_EQ(guarantee(config::algorithm::gcra, params(5, 60'000)),
            "exact: at most 5 + 5/1m x w units in any interval w (token bucket, burst 5)");
}

TEST(guarantee, fixed_window_names_the_edge_burst) {
  EXPECT_EQ(guarantee(config::algorithm::fixed_window, params(20, 1'000)),
            "exact per aligned window: at most 20 units in each 1s window aligned to the store "
            "clock; up to 40 (2x) in a rolling 1s across a window boundary (fixed window)");
}

// The sliding counter names both cases the accuracy harness measures: even traffic (1.1x while
// requests are small next to the limit) and adversarial traffic (under 2x).
TEST(guarantee, sliding_window_names_even_and_adversarial_traffic) {
  EXPECT_EQ(guarantee(config::algorithm::sliding_window, params(100, 1'000)),
            "approximate: at most 100 units in each aligned 1s window; in any rolling 1s, on "
            "even traffic (each key's requests evenly spaced, above the limit and 100 or more "
            "per window, for long enough: 2 windows at 2.5x) at most 100 + the largest request "
            "cost, within 1.1x (110) while no request costs more than 10 (measured 1.02-1.04x "
            "at 100/1s), and under 200 (2x) on adversarial traffic (a window's requests at its "
            "end, or a burst starting late in a window; measured up to 1.90x) (sliding window "
            "counter)");
  // Below 10 units per window no request is small enough for 1.1x: only the bound is stated.
  const auto small = guarantee(config::algorithm::sliding_window, params(5, 60'000));
  EXPECT_NE(small.find("at most 5 + the largest request cost (measured"), std::string::npos)
      << small;
  EXPECT_EQ(small.find("1.1x"), std::string::npos) << small;
  EXPECT_NE(small.find("under 10 (2x)"), std::string::npos) << small;
}

TEST(guarantee, sliding_log_is_exact_per_rolling_window) {
  EXPECT_EQ(guarantee(config::algorithm::sliding_log, params(100, 86'400'000)),
            "exact: at most 100 units in any rolling 1d (sliding log)");
}

TEST(guarantee, a_limit_lists_plan_overrides_and_marks_shadow) {
  config::limit l;
  l.algorithm = config::algorithm::sliding_log;
  l.params = params(10, 60'000);
  l.plan_overrides["pro"] = params(100, 60'000);
  l.mode = config::limit_mode::shadow;
  EXPECT_EQ(guarantee(l),
            "shadow (never refuses): exact: at most 10 units in any rolling 1m (sliding log); "
            "plan pro: exact: at most 100 units in any rolling 1m (sliding log)");
  l.has_default_params = false;
  l.mode = config::limit_mode::enforce;
  EXPECT_EQ(guarantee(l), "plan pro: exact: at most 100 units in any rolling 1m (sliding log)");
}

// On redis-cluster, a limit decided with others in other slots says what the two steps cost.
TEST(guarantee, a_limit_split_over_cluster_slots_names_what_can_be_charged) {
  config::limit l;
  l.params = params(5, 60'000, 5);
  const std::string alone = guarantee(l);
  EXPECT_EQ(cluster_caveat(l), "");
  l.split_on_cluster = true;
  EXPECT_EQ(guarantee(l), alone + cluster_caveat(l));
  EXPECT_NE(cluster_caveat(l).find("a refused request charges nothing"), std::string::npos);
  EXPECT_NE(cluster_caveat(l).find("no refund"), std::string::npos);
}

}  // namespace
}  // namespace sluice::limiter
