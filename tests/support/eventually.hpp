// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// Waiting for a state in tests, instead of sleeping for a guessed time.
///
/// A test that needs something to have happened (a request reached the upstream, a worker
/// reconnected, a file was reloaded) polls for it with eventually(): the first look is at once,
/// then after 1 ms, 2 ms, 4 ms ... at most 50 ms apart, until the predicate holds or the budget
/// is spent. A fast machine passes as soon as the state is there; a slow one gets the whole
/// budget. The gtest form (EXPECT_EVENTUALLY / ASSERT_EVENTUALLY, or eventually_that()) fails
/// naming what was awaited and for how long.
///
/// Every budget — eventually()'s, and the other waits of tests/support that take one (the HTTP
/// client's per-operation deadline, ...) — is multiplied by one factor from the environment:
/// SLUICE_TEST_TIME_FACTOR (a positive number, default 1). A slow or loaded machine (a
/// sanitizer build, valgrind, two cores shared by several suites) runs the suite with, e.g.,
/// SLUICE_TEST_TIME_FACTOR=3; no assertion changes, only how long a wait may last.
///
/// Budgets bound waits for a state; they are not assertions about elapsed time. A test that
/// asserts a latency (a fail-open answered within 80 ms) measures it as such and does not scale.

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>

namespace sluice::test {

/// The factor every test budget is multiplied by: SLUICE_TEST_TIME_FACTOR when it is a
/// positive number, else 1. Read once per process.
inline double time_factor() {
  static const double factor = [] {
    const char* v = std::getenv("SLUICE_TEST_TIME_FACTOR");
    if (v == nullptr || *v == '\0') return 1.0;
    char* end = nullptr;
    const double f = std::strtod(v, &end);
    return end != v && *end == '\0' && f > 0 ? f : 1.0;
  }();
  return factor;
}

/// `budget` multiplied by time_factor(), in milliseconds (at least 1 ms for a positive budget).
template <class Rep, class Period>
std::chrono::milliseconds scaled(std::chrono::duration<Rep, Period> budget) {
  const double ms = std::chrono::duration<double, std::milli>(budget).count() * time_factor();
  if (ms <= 0) return std::chrono::milliseconds(0);
  return std::chrono::milliseconds(std::max<long long>(1, static_cast<long long>(ms + 0.5)));
}

/// Polls `pred` (a callable returning something testable as bool) until it holds or
/// scaled(`budget`) has passed; returns whether it held. The first poll is immediate, the
/// pauses between polls start at 1 ms and double up to 50 ms; the predicate is asked once more
/// at the deadline, so a state reached during the last pause still counts.
template <class Pred>
bool eventually(Pred&& pred, std::chrono::milliseconds budget = std::chrono::seconds(5)) {
  const auto deadline = std::chrono::steady_clock::now() + scaled(budget);
  auto pause = std::chrono::milliseconds(1);
  for (;;) {
    if (pred()) return true;
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) return false;
    std::this_thread::sleep_for(
        std::min<std::chrono::steady_clock::duration>(pause, deadline - now));
    pause = std::min(pause * 2, std::chrono::milliseconds(50));
  }
}

/// eventually() as a gtest assertion result: success, or a failure naming `what` and the
/// scaled budget it was awaited for. Use as EXPECT_TRUE(eventually_that("...", pred, 2s)).
template <class Pred>
::testing::AssertionResult eventually_that(
    const std::string& what, Pred&& pred,
    std::chrono::milliseconds budget = std::chrono::seconds(5)) {
  if (eventually(pred, budget)) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "not within " << scaled(budget).count() << " ms (SLUICE_TEST_TIME_FACTOR "
         << time_factor() << "): " << what;
}

}  // namespace sluice::test

/// EXPECT_EVENTUALLY(budget, condition): polls `condition` (an expression, evaluated again on
/// every poll; commas allowed) for up to scaled(budget); a failure prints the expression. More
/// may be streamed (<<), as with EXPECT_TRUE.
#define EXPECT_EVENTUALLY(budget, ...)         \
  EXPECT_TRUE(::sluice::test::eventually_that( \
      #__VA_ARGS__, [&] { return static_cast<bool>(__VA_ARGS__); }, (budget)))
/// ASSERT_EVENTUALLY(budget, condition): as EXPECT_EVENTUALLY, ending the test on failure.
#define ASSERT_EVENTUALLY(budget, ...)         \
  ASSERT_TRUE(::sluice::test::eventually_that( \
      #__VA_ARGS__, [&] { return static_cast<bool>(__VA_ARGS__); }, (budget)))
