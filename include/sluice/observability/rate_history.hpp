// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// Per-route request rates over the last minutes, for the status page's graphs.

#include "sluice/observability/metrics.hpp"

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace sluice::observability {

/// The per-route rates of the last `points` steps, from samples of the route counters taken
/// once a step (admin_server takes them on its own thread; nothing on the request path).
/// A rate is the difference of two consecutive samples divided by the time between them:
/// requests per second, averaged over the step. Memory: at most `points` rates per route name
/// seen (route names come from the rules file, a bounded set).
///
/// Thread-safe (a mutex; sample() once a step, read() once per page).
class rate_history {
 public:
  /// `step`: the time between samples (> 0); `points`: the rates kept per route (> 0).
  rate_history(std::chrono::milliseconds step, std::size_t points);

  /// Takes one sample of `routes` (metrics_sample::routes) at `now_ms` (milliseconds of a
  /// monotonic clock, the same for every call). The first sample only sets the baseline.
  void sample(const std::vector<route_counts>& routes, std::int64_t now_ms);

  /// One route's rates, oldest first, each averaged over one step (requests per second).
  struct series {
    std::string route;
    std::vector<double> forwarded;  ///< allowed + unlimited + fail_open + local
    std::vector<double> limited;    ///< 429 (limited) and 503 (fail_closed)
  };
  /// Every route with at least one rate, by name. Routes not in the last sample (renamed or
  /// removed) are dropped.
  std::vector<series> read() const;

  std::chrono::milliseconds step() const noexcept { return step_; }
  std::size_t points() const noexcept { return points_; }

 private:
  struct totals {
    std::uint64_t forwarded = 0, limited = 0;
  };
  struct route_state {
    totals last;
    std::deque<double> forwarded, limited;
  };
  std::chrono::milliseconds step_;
  std::size_t points_;
  mutable std::mutex mutex_;
  std::int64_t last_ms_ = 0;
  bool primed_ = false;
  std::map<std::string, route_state> routes_;
};

}  // namespace sluice::observability
