// SPDX-License-Identifier: Apache-2.0
// Durations as the rules file writes them (include/sluice/config/duration_text.hpp): the
// largest unit that holds the value whole, read back by parse_duration().
#include "sluice/config/duration_text.hpp"

#include "sluice/config/loader.hpp"

#include <gtest/gtest.h>

#include <chrono>

namespace sluice::config {
namespace {

using namespace std::chrono_literals;

TEST(duration_text, the_largest_whole_unit) {
  EXPECT_EQ(duration_text(7 * 24h), "7d");
  EXPECT_EQ(duration_text(25h), "25h");
  EXPECT_EQ(duration_text(90min), "90m");
  EXPECT_EQ(duration_text(30s), "30s");
  EXPECT_EQ(duration_text(1500ms), "1500ms");
  EXPECT_EQ(duration_text(1ms), "1ms");
  EXPECT_EQ(duration_text(0ms), "0d");
}

TEST(duration_text, parse_duration_reads_it_back) {
  const std::chrono::milliseconds durations[] = {1ms, 999ms, 1s, 61s, 1min, 1h, 36h, 24h, 30 * 24h};
  for (const auto d : durations) {
    EXPECT_EQ(parse_duration(duration_text(d)), d) << duration_text(d);
  }
}

}  // namespace
}  // namespace sluice::config
