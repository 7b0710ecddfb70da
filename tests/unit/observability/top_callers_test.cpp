// SPDX-License-Identifier: Apache-2.0
// The most limited callers (issue 29): the Space-Saving sketch's fixed memory under a flood
// of distinct keys, its order for keys refused at different rates, and the sliding window.
#include "sluice/observability/top_callers.hpp"

#include <gtest/gtest.h>

#include <cstdio>
#include <string>

namespace sluice::observability {
namespace {

TEST(top_callers, a_million_distinct_refused_keys_stay_within_the_stated_bound) {
  top_callers top({.top = 10, .window_minutes = 10, .counters_per_minute = 256});
  const std::size_t bound = top.bound_bytes();
  const std::size_t empty = top.bytes();
  // Three heavy callers among a million one-off keys, spread over the ten minutes.
  for (int i = 0; i < 1'000'000; ++i) {
    const std::int64_t now = static_cast<std::int64_t>(i) * 6 / 10;  // 600 s in all
    top.record("k" + std::to_string(i), "api", "per_key", now);
    if (i % 10 == 0) top.record("heavy-a", "api", "per_key", now);
    if (i % 20 == 0) top.record("heavy-b", "api", "per_key", now);
    if (i % 40 == 0) top.record("heavy-c", "api", "anon", now);
  }
  EXPECT_LE(top.counters_used(), 10u * 256u);
  EXPECT_LE(top.bytes(), bound);
  EXPECT_EQ(top.bytes(), empty) << "the sketches allocate nothing after construction";
  // The stated bound: 10 minutes × 256 counters, each a few hundred bytes.
  EXPECT_LT(bound, 10u * 256u * 400u) << bound;
  std::printf("top-N memory bound: %zu bytes (%zu counters)\n", bound, std::size_t{10 * 256});

  const auto a = top.top(3, 599'999);
  ASSERT_EQ(a.rows.size(), 3u);
  EXPECT_EQ(a.rows[0].caller, "heavy-a");
  EXPECT_EQ(a.rows[1].caller, "heavy-b");
  EXPECT_EQ(a.rows[2].caller, "heavy-c");
  EXPECT_EQ(a.rows[2].limit, "anon");
  EXPECT_EQ(a.rows[0].route, "api");
  // Each minute saw 100,000 one-off keys and 256 counters: a heavy key's count is its true
  // count plus at most its error.
  EXPECT_GE(a.rows[0].refusals, 100'000u);
  EXPECT_LE(a.rows[0].refusals - a.rows[0].error, 100'000u);
}

TEST(top_callers, three_keys_over_their_limits_at_different_rates_come_out_in_order) {
  top_callers top({.top = 5, .window_minutes = 2, .counters_per_minute = 8});
  for (int i = 0; i < 90; ++i) {
    top.record("aaaaaaaaaaaa", "items", "per_key", 1000);
    if (i % 2 == 0) top.record("bbbbbbbbbbbb", "items", "per_key", 1000);
    if (i % 3 == 0) top.record("cccccccccccc", "search", "anon", 1000);
  }
  const auto a = top.top(0, 1000);
  EXPECT_EQ(a.shown, 5u);
  ASSERT_EQ(a.rows.size(), 3u);
  EXPECT_EQ(a.rows[0].caller, "aaaaaaaaaaaa");
  EXPECT_EQ(a.rows[0].refusals, 90u);
  EXPECT_EQ(a.rows[1].caller, "bbbbbbbbbbbb");
  EXPECT_EQ(a.rows[1].refusals, 45u);
  EXPECT_EQ(a.rows[2].caller, "cccccccccccc");
  EXPECT_EQ(a.rows[2].refusals, 30u);
  EXPECT_EQ(a.rows[2].route, "search");
  EXPECT_EQ(a.rows[2].limit, "anon");
  EXPECT_EQ(a.rows[2].error, 0u);
  EXPECT_EQ(a.total, 165u);
}

TEST(top_callers, minutes_older_than_the_window_fall_out) {
  top_callers top({.top = 5, .window_minutes = 2, .counters_per_minute = 8});
  top.record("old", "r", "l", 0);       // minute 0
  top.record("new", "r", "l", 60'000);  // minute 1
  EXPECT_EQ(top.top(0, 60'000).rows.size(), 2u);
  const auto later = top.top(0, 120'000);  // minute 2: the window is minutes 1 and 2
  ASSERT_EQ(later.rows.size(), 1u);
  EXPECT_EQ(later.rows[0].caller, "new");
  top.record("newest", "r", "l", 120'000);  // reuses minute 0's sketch
  const auto a = top.top(0, 120'000);
  ASSERT_EQ(a.rows.size(), 2u);
  EXPECT_EQ(a.total, 2u);
}

TEST(top_callers, an_n_over_the_bound_is_capped_and_says_so) {
  top_callers top({});
  top.record("k", "r", "l", 0);
  const auto a = top.top(100'000, 0);
  EXPECT_TRUE(a.capped);
  EXPECT_EQ(a.asked, 100'000u);
  EXPECT_EQ(a.shown, top_settings::max_top);
  const auto json = top_json(a);
  EXPECT_NE(json.find("\"capped\":true"), std::string::npos) << json;
  EXPECT_NE(json.find("\"note\":\"n=100000 is over the bound; capped at 100\""), std::string::npos)
      << json;
  EXPECT_NE(json.find("\"caller\":\"k\""), std::string::npos) << json;
  EXPECT_FALSE(top.top(3, 0).capped);
}

TEST(space_saving, replaces_the_smallest_counter_and_keeps_its_count_as_error) {
  space_saving s(2);
  s.add("a", 5);
  s.add("b", 2);
  s.add("c");  // b (2) gives way: c counts 3 with error 2
  const auto e = s.entries();
  ASSERT_EQ(e.size(), 2u);
  EXPECT_EQ(e[0].key, "a");
  EXPECT_EQ(e[0].count, 5u);
  EXPECT_EQ(e[1].key, "c");
  EXPECT_EQ(e[1].count, 3u);
  EXPECT_EQ(e[1].error, 2u);
  EXPECT_EQ(s.total(), 8u);
  // A key longer than max_key_bytes is cut, not stored whole.
  s.add(std::string(1000, 'x'), 10);
  EXPECT_EQ(s.entries()[0].key.size(), space_saving::max_key_bytes);
}

}  // namespace
}  // namespace sluice::observability
