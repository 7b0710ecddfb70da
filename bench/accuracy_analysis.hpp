// SPDX-License-Identifier: Apache-2.0
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
// The overshoot, in units: the same measures as a difference instead of a quotient, the largest
// number of units admitted above the promise (0 when never above it): for the approximate
// modes whose bound is stated in units (token leasing: "at most lease × workers × instances
// units above the limit in any window").
// Times are the store's decision times (the gateway's `decision_time_header`), so no network
// latency between the decision and the upstream blurs a window edge.
//
// Two figures per run:
// - the whole run ("cold start"): every key starts at once, at whatever phase of the window
//   the run began, so a window's first quota can come as a burst late in that window. For the
//   sliding counter that is the adversarial pattern (a window's units at its end).
// - the steady state: the same measure over the admissions at least `warmup_ms` after the
//   key's first admission (its first request: a fresh key admits it), so only rolling windows
//   that start after the warm-up count. With even traffic and a warm-up of at least 2 windows
//   this is the "even traffic" figure: both windows the counter weighs have seen the traffic.
//
// Settled costs (`charge: {reserve, settle}` on a fixed window): each admitted request's units
// are the cost the upstream reported for it, attributed to the window of its decision (where
// its reservation was taken); the fixed window's aligned measure is then the settled total per
// key per window against the budget N, and its overshoot the units above N, held to
// settle_bound_units().
//
// Even traffic (the schedule both sluice-accuracy --mode even and the test send): each key's
// requests evenly spaced at a constant rate, its j-th request at start + j·gap, costing 3 when
// heavy_turn(key, j) (about one in four, no regular pattern) and 1 otherwise.

#include <algorithm>
#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <vector>

namespace sluice::bench {

struct admitted {
  std::int64_t t_ms = 0;   ///< store decision time
  std::int64_t units = 0;  ///< the route's cost
};

/// One rolling window of P: where the worst one was, for reading what made it.
struct rolling_window {
  std::int64_t units = 0;        ///< units admitted in [start_ms, start_ms + P)
  std::int64_t start_ms = 0;     ///< its first admission (store time)
  std::int64_t before_edge = 0;  ///< of `units`, those before the aligned boundary it spans
  /// Store time between the key's previous admission and this window's first: a pause in a
  /// key's traffic leaves a sliding counter's allowance unused, which the window then spends.
  std::int64_t pause_before_ms = 0;
};

struct accuracy_result {
  // Whole run, warm-up included (the cold start).
  double ratio = 0;             ///< the algorithm's own promise (see above); goal <= 1.00 or bound
  double rolling_ratio = 0;     ///< worst rolling window of P / N (every algorithm)
  std::int64_t units = 0;       ///< units admitted in total
  std::string worst_key;        ///< where `ratio` was reached
  rolling_window worst_window;  ///< the worst rolling window of P of any key
  // Steady state: admissions from `warmup_ms` after each key's first one.
  std::int64_t warmup_ms = 0;
  double steady_ratio = 0;
  double steady_rolling_ratio = 0;
  std::int64_t steady_units = 0;
  std::string steady_worst_key;
  rolling_window steady_worst_window;
  // Overshoot in units (see above): whole run, and steady state.
  double overshoot_units = 0;
  double steady_overshoot_units = 0;
};

enum class algo { token_bucket, fixed_window, sliding_window, sliding_log };

/// A 64-bit hash of (a, b): splitmix64's finaliser over a·φ + b. Deterministic, so a run's
/// pseudo-random choices repeat.
inline std::uint64_t mix64(std::uint64_t a, std::uint64_t b) {
  std::uint64_t x = a * 0x9E3779B97F4A7C15ULL + b;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

/// Whether a key's j-th request of even traffic costs 3: about one in four, from a hash of key
/// and j, so a run repeats and no two keys share a pattern.
inline bool heavy_turn(std::uint64_t key, std::int64_t j) {
  return (mix64(key, static_cast<std::uint64_t>(j)) & 3) == 0;
}

/// Settled costs (sluice-accuracy --settle-reserve): the cost the upstream reports for client
/// c's n-th request, uniform in [lo, hi] (lo <= hi) from a hash of (c, n), so a run repeats.
inline std::int64_t settle_cost(std::uint64_t client, std::uint64_t n, std::int64_t lo,
                                std::int64_t hi) {
  const auto span = static_cast<std::uint64_t>(hi - lo + 1);
  return lo + static_cast<std::int64_t>(mix64(client + 1, n) % span);
}

/// The largest excess of a settled cost over its reservation among admitted requests (their
/// `units` being the cost the upstream reported, each having reserved `reserve` units), 0 when
/// every cost is at most the reservation.
inline std::int64_t largest_excess(const std::map<std::string, std::vector<admitted>>& per_key,
                                   std::int64_t reserve) {
  std::int64_t best = 0;
  for (const auto& [key, ev] : per_key)
    for (const auto& e : ev) best = std::max(best, e.units - reserve);
  return best;
}

/// The stated bound of a settled cost (src/limiter/guarantee.cpp, `charge: {reserve, settle}`),
/// in units above the limit in any window: (requests in flight) x (largest cost above its
/// reservation); 0 when every cost is at most its reservation.
inline std::int64_t settle_bound_units(std::int64_t in_flight, std::int64_t largest_excess) {
  return in_flight * std::max<std::int64_t>(0, largest_excess);
}

/// The spacing of a key's requests, in µs, for even traffic offering `offered` times the limit
/// of n units per period_ms at 1.5 units per request on average (heavy_turn's mix).
inline std::int64_t even_gap_us(std::int64_t n, std::int64_t period_ms, double offered) {
  return static_cast<std::int64_t>(1.5 * static_cast<double>(period_ms) * 1000.0 /
                                   (offered * static_cast<double>(n)));
}

/// The rolling window of `window_ms` with the most units: max over i with t_i >= from_ms of
/// the units in [t_i, t_i + window_ms) (events sorted by time). O(n).
inline rolling_window worst_rolling_window(
    const std::vector<admitted>& ev, std::int64_t window_ms,
    std::int64_t from_ms = std::numeric_limits<std::int64_t>::min()) {
  rolling_window best;
  std::int64_t sum = 0;
  std::size_t j = 0, best_i = 0;
  bool found = false;
  for (std::size_t i = 0; i < ev.size(); ++i) {
    if (j < i) {
      j = i;
      sum = 0;
    }
    if (ev[i].t_ms < from_ms) continue;
    while (j < ev.size() && ev[j].t_ms - ev[i].t_ms < window_ms) sum += ev[j++].units;
    if (!found || sum > best.units) {
      best.units = sum;
      best.start_ms = ev[i].t_ms;
      best_i = i;
      found = true;
    }
    sum -= ev[i].units;
  }
  if (!found) return best;
  if (best_i > 0) best.pause_before_ms = best.start_ms - ev[best_i - 1].t_ms;
  const std::int64_t edge = (best.start_ms / window_ms + 1) * window_ms;
  for (std::size_t k = best_i; k < ev.size() && ev[k].t_ms < edge; ++k)
    best.before_edge += ev[k].units;
  return best;
}

/// Worst rolling window of `window_ms` ÷ n.
inline double rolling_ratio(const std::vector<admitted>& ev, std::int64_t window_ms,
                            std::int64_t n) {
  return static_cast<double>(worst_rolling_window(ev, window_ms).units) / static_cast<double>(n);
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
          const double promised =
              static_cast<double>(burst) + static_cast<double>(n) *
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

/// The overshoot of one key's admissions (sorted by time), in units: the most units admitted
/// above the algorithm's promise (see key_ratio), 0 when never above it.
inline double key_overshoot(const std::vector<admitted>& ev, algo a, std::int64_t n,
                            std::int64_t period_ms, std::int64_t burst) {
  double best = 0;
  switch (a) {
    case algo::token_bucket:
      for (std::size_t i = 0; i < ev.size(); ++i) {
        std::int64_t sum = 0;
        for (std::size_t j = i; j < ev.size(); ++j) {
          sum += ev[j].units;
          const double promised =
              static_cast<double>(burst) + static_cast<double>(n) *
                                               static_cast<double>(ev[j].t_ms - ev[i].t_ms) /
                                               static_cast<double>(period_ms);
          best = std::max(best, static_cast<double>(sum) - promised);
          if (promised > 4.0 * static_cast<double>(sum + burst)) break;  // cannot matter later
        }
      }
      return best;
    case algo::fixed_window: {
      std::map<std::int64_t, std::int64_t> per_window;
      for (const auto& e : ev) per_window[e.t_ms / period_ms] += e.units;
      for (const auto& [k, units] : per_window)
        best = std::max(best, static_cast<double>(units - n));
      return best;
    }
    case algo::sliding_window:
    case algo::sliding_log:
      return std::max(0.0, static_cast<double>(worst_rolling_window(ev, period_ms).units - n));
  }
  return best;
}

/// Ratios over every key (the worst key's), for the whole run and for the steady state after
/// `warmup_ms` (0: the steady figures equal the whole run's).
inline accuracy_result analyse(std::map<std::string, std::vector<admitted>> per_key, algo a,
                               std::int64_t n, std::int64_t period_ms, std::int64_t burst,
                               std::int64_t warmup_ms = 0) {
  accuracy_result out;
  out.warmup_ms = warmup_ms;
  for (auto& [key, ev] : per_key) {
    if (ev.empty()) continue;
    std::sort(ev.begin(), ev.end(),
              [](const admitted& x, const admitted& y) { return x.t_ms < y.t_ms; });
    for (const auto& e : ev) out.units += e.units;
    out.overshoot_units = std::max(out.overshoot_units, key_overshoot(ev, a, n, period_ms, burst));
    const double r = key_ratio(ev, a, n, period_ms, burst);
    if (r > out.ratio) {
      out.ratio = r;
      out.worst_key = key;
    }
    const auto w = worst_rolling_window(ev, period_ms);
    if (w.units > out.worst_window.units) out.worst_window = w;

    const std::int64_t from = ev.front().t_ms + warmup_ms;
    std::vector<admitted> steady;
    for (const auto& e : ev)
      if (e.t_ms >= from) steady.push_back(e);
    for (const auto& e : steady) out.steady_units += e.units;
    out.steady_overshoot_units =
        std::max(out.steady_overshoot_units, key_overshoot(steady, a, n, period_ms, burst));
    const double s = key_ratio(steady, a, n, period_ms, burst);
    if (s > out.steady_ratio) {
      out.steady_ratio = s;
      out.steady_worst_key = key;
    }
    const auto sw = worst_rolling_window(ev, period_ms, from);
    if (sw.units > out.steady_worst_window.units) out.steady_worst_window = sw;
  }
  const auto per_n = [n](std::int64_t units) {
    return static_cast<double>(units) / static_cast<double>(n);
  };
  out.rolling_ratio = per_n(out.worst_window.units);
  out.steady_rolling_ratio = per_n(out.steady_worst_window.units);
  return out;
}

}  // namespace sluice::bench
