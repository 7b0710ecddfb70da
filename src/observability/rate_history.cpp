// SPDX-License-Identifier: Apache-2.0
// Per-route request rates for the status page's graphs: differences of the route counters
// sampled once a step.
#include "sluice/observability/rate_history.hpp"

#include <stdexcept>

namespace sluice::observability {

rate_history::rate_history(std::chrono::milliseconds step, std::size_t points)
    : step_(step), points_(points) {
  if (step.count() <= 0 || points == 0)
    throw std::invalid_argument("rate_history: the step and the points must be positive");
}

void rate_history::sample(const std::vector<route_counts>& routes, std::int64_t now_ms) {
  std::lock_guard lock(mutex_);
  const double seconds = primed_ ? static_cast<double>(now_ms - last_ms_) / 1000.0 : 0;
  std::map<std::string, route_state> next;
  for (const auto& r : routes) {
    const totals now{r.allowed + r.unlimited + r.fail_open + r.local, r.limited + r.fail_closed};
    auto& st = next[r.route];
    if (auto it = routes_.find(r.route); it != routes_.end()) st = std::move(it->second);
    if (primed_ && seconds > 0) {
      // Counters only grow; a route first seen now started from 0 within this step.
      auto rate = [seconds](std::uint64_t now, std::uint64_t before) {
        return now >= before ? static_cast<double>(now - before) / seconds : 0.0;
      };
      st.forwarded.push_back(rate(now.forwarded, st.last.forwarded));
      st.limited.push_back(rate(now.limited, st.last.limited));
      while (st.forwarded.size() > points_) st.forwarded.pop_front();
      while (st.limited.size() > points_) st.limited.pop_front();
    }
    st.last = now;
  }
  routes_ = std::move(next);
  last_ms_ = now_ms;
  primed_ = true;
}

std::vector<rate_history::series> rate_history::read() const {
  std::lock_guard lock(mutex_);
  std::vector<series> out;
  for (const auto& [name, st] : routes_) {
    if (st.forwarded.empty()) continue;
    out.push_back(
        {name, {st.forwarded.begin(), st.forwarded.end()}, {st.limited.begin(), st.limited.end()}});
  }
  return out;
}

}  // namespace sluice::observability
