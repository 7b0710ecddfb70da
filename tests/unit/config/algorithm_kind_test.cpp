// SPDX-License-Identifier: Apache-2.0
// What kind of counting each algorithm does (include/sluice/config/algorithm_kind.hpp).
#include "sluice/config/algorithm_kind.hpp"

#include <gtest/gtest.h>

namespace sluice::config {
namespace {

TEST(algorithm_kind, the_window_algorithms) {
  EXPECT_TRUE(is_window_algorithm(algorithm::fixed_window));
  EXPECT_TRUE(is_window_algorithm(algorithm::sliding_window));
  EXPECT_TRUE(is_window_algorithm(algorithm::sliding_log));
  EXPECT_TRUE(is_window_algorithm(algorithm::calendar));
  EXPECT_FALSE(is_window_algorithm(algorithm::token_bucket));
  EXPECT_FALSE(is_window_algorithm(algorithm::gcra));
  EXPECT_FALSE(is_window_algorithm(algorithm::concurrency));
}

}  // namespace
}  // namespace sluice::config
