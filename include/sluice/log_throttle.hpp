// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// A rate limiter for hot-path log lines (store errors, fail-open, accept failures), so an
/// outage produces a bounded number of lines, not one per request.

#include <atomic>
#include <chrono>
#include <cstdint>

namespace sluice {

/// Admits at most one event per `interval` (thread-safe, lock-free); counts the suppressed
/// ones so the next admitted line can say how many were dropped.
class log_throttle {
 public:
  explicit log_throttle(std::chrono::milliseconds interval = std::chrono::seconds(1))
      : interval_ms_(interval.count()) {}

  /// True when this event may be logged. `suppressed` receives the number of events
  /// dropped since the last admitted one.
  bool admit(std::uint64_t& suppressed);

  /// True when this event may be logged, for a line that does not say how many were dropped.
  bool admit() {
    std::uint64_t suppressed = 0;
    return admit(suppressed);
  }

 private:
  std::int64_t interval_ms_;
  std::atomic<std::int64_t> next_ms_{0};
  std::atomic<std::uint64_t> dropped_{0};
};

}  // namespace sluice
