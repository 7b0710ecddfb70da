// SPDX-License-Identifier: Apache-2.0
// The status page's per-route rates (issue 29): differences of route counter samples over
// the time between them, kept for a bounded number of steps, routes gone from the rules
// dropped. Times are given, never read from a clock.
#include "sluice/observability/rate_history.hpp"

#include <gtest/gtest.h>

namespace sluice::observability {
namespace {

route_counts route(std::string name, std::uint64_t allowed, std::uint64_t limited,
                   std::uint64_t fail_closed = 0) {
  route_counts r;
  r.route = std::move(name);
  r.allowed = allowed;
  r.limited = limited;
  r.fail_closed = fail_closed;
  return r;
}

TEST(rate_history, the_first_sample_is_a_baseline_and_rates_are_per_second_over_the_step) {
  rate_history h(std::chrono::seconds(2), 3);
  h.sample({route("items", 100, 10)}, 1'000);
  EXPECT_TRUE(h.read().empty());
  h.sample({route("items", 140, 14, 2)}, 3'000);  // +40 forwarded, +6 refused over 2 s
  auto s = h.read();
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].route, "items");
  EXPECT_EQ(s[0].forwarded, (std::vector<double>{20}));
  EXPECT_EQ(s[0].limited, (std::vector<double>{3}));
  // The time between samples, not the nominal step, divides (a late timer).
  h.sample({route("items", 170, 14, 2)}, 6'000);
  EXPECT_EQ(h.read()[0].forwarded, (std::vector<double>{20, 10}));
}

TEST(rate_history, keeps_at_most_its_points_and_drops_routes_that_are_gone) {
  rate_history h(std::chrono::seconds(1), 2);
  h.sample({route("a", 0, 0), route("b", 0, 0)}, 0);
  h.sample({route("a", 1, 0), route("b", 5, 0)}, 1'000);
  h.sample({route("a", 3, 0), route("b", 5, 0)}, 2'000);
  h.sample({route("a", 6, 1)}, 3'000);  // b renamed away by a reload
  auto s = h.read();
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].route, "a");
  EXPECT_EQ(s[0].forwarded, (std::vector<double>{2, 3}));  // the oldest point fell out
  EXPECT_EQ(s[0].limited, (std::vector<double>{0, 1}));
  // A route first seen in a sample started from 0 within that step.
  h.sample({route("a", 6, 1), route("c", 4, 0)}, 4'000);
  s = h.read();
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[1].route, "c");
  EXPECT_EQ(s[1].forwarded, (std::vector<double>{4}));
}

TEST(rate_history, a_zero_step_or_no_points_is_refused) {
  EXPECT_THROW(rate_history(std::chrono::milliseconds(0), 3), std::invalid_argument);
  EXPECT_THROW(rate_history(std::chrono::seconds(1), 0), std::invalid_argument);
}

}  // namespace
}  // namespace sluice::observability
