// SPDX-License-Identifier: Apache-2.0
#include "sluice/store/circuit_breaker.hpp"

#include <gtest/gtest.h>

// The store connection's circuit breaker on a fake clock (case c11): closed -> open after N
// consecutive failures -> half-open after the cool-down -> one probe -> closed or open again.

namespace sluice::store {
namespace {

using namespace std::chrono_literals;
using state = breaker_state;
using admission = circuit_breaker::admission;
using transition = circuit_breaker::transition;

struct fake_clock {
  std::chrono::steady_clock::time_point now{};
  circuit_breaker::clock_fn fn() {
    return [this] { return now; };
  }
};

TEST(circuit_breaker, opens_after_consecutive_failures_only) {
  fake_clock c;
  circuit_breaker b(3, 500ms, c.fn());
  EXPECT_EQ(b.admit(), admission::send);
  EXPECT_EQ(b.record(false, false), transition::none);
  EXPECT_EQ(b.record(false, false), transition::none);
  EXPECT_EQ(b.record(true, false), transition::none);  // a success resets the count
  EXPECT_EQ(b.record(false, false), transition::none);
  EXPECT_EQ(b.record(false, false), transition::none);
  EXPECT_EQ(b.state(), state::closed);
  EXPECT_EQ(b.record(false, false), transition::opened);
  EXPECT_EQ(b.state(), state::open);
  EXPECT_EQ(b.consecutive_failures(), 3u);
  EXPECT_EQ(b.admit(), admission::refused);
  // Checks sent before it opened change nothing once it is open.
  EXPECT_EQ(b.record(true, false), transition::none);
  EXPECT_EQ(b.record(false, false), transition::none);
  EXPECT_EQ(b.state(), state::open);
}

TEST(circuit_breaker, one_probe_after_the_cool_down) {
  fake_clock c;
  circuit_breaker b(1, 500ms, c.fn());
  EXPECT_EQ(b.record(false, false), transition::opened);
  c.now += 499ms;
  EXPECT_EQ(b.admit(), admission::refused);
  EXPECT_EQ(b.state(), state::open);
  c.now += 1ms;
  EXPECT_EQ(b.admit(), admission::probe);
  EXPECT_EQ(b.state(), state::half_open);
  EXPECT_EQ(b.admit(), admission::refused) << "a second probe while one is out";
  c.now += 20ms;
  EXPECT_EQ(b.open_for(), 520ms);
  EXPECT_EQ(b.record(true, true), transition::closed);
  EXPECT_EQ(b.state(), state::closed);
  EXPECT_EQ(b.admit(), admission::send);
}

TEST(circuit_breaker, a_failed_probe_opens_it_for_another_cool_down) {
  fake_clock c;
  circuit_breaker b(2, 300ms, c.fn());
  b.record(false, false);
  EXPECT_EQ(b.record(false, false), transition::opened);
  c.now += 300ms;
  ASSERT_EQ(b.admit(), admission::probe);
  EXPECT_EQ(b.record(false, true), transition::reopened);
  EXPECT_EQ(b.state(), state::open);
  c.now += 299ms;
  EXPECT_EQ(b.admit(), admission::refused);
  c.now += 1ms;
  EXPECT_EQ(b.admit(), admission::probe);
}

TEST(circuit_breaker, a_probe_that_was_never_sent_is_made_again) {
  fake_clock c;
  circuit_breaker b(1, 100ms, c.fn());
  b.record(false, false);
  c.now += 100ms;
  ASSERT_EQ(b.admit(), admission::probe);
  b.probe_not_sent();
  EXPECT_EQ(b.admit(), admission::probe);
}

TEST(circuit_breaker, a_new_connection_ends_the_cool_down) {
  fake_clock c;
  circuit_breaker b(1, 10s, c.fn());
  b.record(false, false);
  EXPECT_EQ(b.admit(), admission::refused);
  b.cool_down_over();
  EXPECT_EQ(b.admit(), admission::probe);
}

TEST(circuit_breaker, zero_failures_disables_it) {
  fake_clock c;
  circuit_breaker b(0, 100ms, c.fn());
  for (int i = 0; i < 100; ++i) EXPECT_EQ(b.record(false, false), transition::none);
  EXPECT_EQ(b.state(), state::closed);
  EXPECT_EQ(b.admit(), admission::send);
}

}  // namespace
}  // namespace sluice::store
