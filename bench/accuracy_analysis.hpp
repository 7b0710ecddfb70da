#pragma once
// Accuracy analysis of admitted traffic (issue 5, "What it must show"): given, per key, every
// admitted request's store decision time and units, the largest number of units admitted
// divided by what the rule promises. Used by bench/accuracy_driver.cpp (sluice-accuracy) and
// by tests/integration/accuracy_test.cpp (the short version in the test suite).
//
// Definitions (N units per P ms; B the token bucket's burst):
// - token bucket: in any interval [t_i, t_j], units / (B + N·(t_j − t_i)/P);
// - sliding log and sliding counter: in any rolling window of P (t_j − t_i < P), units / N;
// - fixed window: in each aligned window [kP, (k+1)P), units / N ("aligned"), and separately
//   the worst rolling window of P ("rolling"), which shows the edge burst honestly.
// Times are the store's decision times (the gateway's `decision_time_header`), so no network
// latency between the decision and the upstream blurs a window edge.

#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace sluice::bench {

struct admitted {
  std::int64_t t_ms = 0;   ///< store decision time
  std::int64_t units = 0;  ///< the route's cost
};

struct accuracy_result {
  double ratio = 0;           ///< the algorithm's own promise (see above); goal <= 1.00 or bound
  double rolling_ratio = 0;   ///< worst rolling window of P / N (every algorithm)
  std::int64_t units = 0;     ///< units admitted in total
  std::string worst_key;      ///< where `ratio` was reached
};

enum class algo { token_bucket, fixed_window, sliding_window, sliding_log };

/// Worst rolling window of `window_ms`: max over i of the units in [t_i, t_i + window_ms).
inline double rolling_ratio(const std::vector<admitted>& ev, std::int64_t window_ms,
                            std::int64_t n) {
  std::int64_t best = 0, sum = 0;
  std::size_t j = 0;
  for (std::size_t i = 0; i < ev.size(); ++i) {
    while (j < ev.size() && ev[j].t_ms - ev[i].t_ms < window_ms) sum += ev[j++].units;
    best = std::max(best, sum);
    sum -= ev[i].units;
  }
  return static_cast<double>(best) / static_cast<double>(n);
}

/// The ratio of one key's admissions (sorted by time).
inline double key_ratio(const std::vector<admitted>& ev, algo a, std::int64_t n,
                        std::int64_t period_ms, std::int64_t burst) {
  double best = 0;
  switch (a) {
    case algo::token_bucket:
      for (std::size_t i = 0; i < ev.size(); ++i) {
        std::int64_t sum = 0;
        for (std::size_t j = i; j < ev.size(); ++j) {
          sum += ev[j].units;
          const double promised = static_cast<double>(burst) +
                                  static_cast<double>(n) *
                                      static_cast<double>(ev[j].t_ms - ev[i].t_ms) /
                                      static_cast<double>(period_ms);
          best = std::max(best, static_cast<double>(sum) / promised);
          if (promised > 4.0 * static_cast<double>(sum + burst)) break;  // cannot matter later
        }
      }
      return best;
    case algo::fixed_window: {
      std::map<std::int64_t, std::int64_t> per_window;
      for (const auto& e : ev) per_window[e.t_ms / period_ms] += e.units;
      for (const auto& [k, units] : per_window)
        best = std::max(best, static_cast<double>(units) / static_cast<double>(n));
      return best;
    }
    case algo::sliding_window:
    case algo::sliding_log:
      return rolling_ratio(ev, period_ms, n);
  }
  return best;
}

/// Ratios over every key: the worst key's.
inline accuracy_result analyse(std::map<std::string, std::vector<admitted>> per_key, algo a,
                               std::int64_t n, std::int64_t period_ms, std::int64_t burst) {
  accuracy_result out;
  for (auto& [key, ev] : per_key) {
    std::sort(ev.begin(), ev.end(),
              [](const admitted& x, const admitted& y) { return x.t_ms < y.t_ms; });
    for (const auto& e : ev) out.units += e.units;
    const double r = key_ratio(ev, a, n, period_ms, burst);
    if (r > out.ratio) {
      out.ratio = r;
      out.worst_key = key;
    }
    out.rolling_ratio = std::max(out.rolling_ratio, rolling_ratio(ev, period_ms, n));
  }
  return out;
}

}  // namespace sluice::bench
